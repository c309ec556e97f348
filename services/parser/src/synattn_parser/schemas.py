"""Request and response models of the parser API (they are the OpenAPI schema)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from synattn_parser.settings import BackendName, Scheme
from synattn_shared.defaults import RP_CLIP, SLR_TAU
from synattn_shared.manifest import ParserInfo
from synattn_shared.materialise import ALL_FEATURES
from synattn_shared.paths import SLUG_PATTERN

FeatureName = Literal[ALL_FEATURES]  # type: ignore[valid-type]
Token = Annotated[str, Field(min_length=1, max_length=200)]
Sentence = (
    Annotated[str, Field(max_length=100_000)] | Annotated[list[Token], Field(max_length=10_000)]
)


class ParseRequest(BaseModel):
    """Sentences to parse and the features to return for each."""

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [
                {"sentences": ["The cat sat on the mat."]},
                {
                    "sentences": ["Bush held a talk with Sharon.", ["It", "rained", "."]],
                    "features": ["slr_soft", "dea_mask", "rp_index"],
                    "format": "dense",
                },
            ]
        },
    )

    sentences: list[Sentence] = Field(
        min_length=1,
        description="one item per sentence: raw text (a string, never split into sentences: "
        "a result whose parse has several roots carries a warning) or pretokenised words (a "
        "list, never re-tokenised)",
    )
    ids: list[Annotated[str, Field(max_length=200)]] | None = Field(
        None, description="one sent_id per sentence (default: its 0-based index)"
    )
    backend: BackendName | None = Field(None, description="default: the server's backend")
    features: list[FeatureName] = Field(
        default_factory=list, description="reader-side features to compute (see /v1/backends)"
    )
    tau: float = Field(SLR_TAU, gt=0, le=1e6, description="soft SLR temperature")
    rp_clip: int = Field(RP_CLIP, ge=0, le=62, description="RP clip distance k (int8 indices)")
    slr_binarize: Literal["right", "none"] = Field(
        "right",
        description="the tree the SLR features (and the ``syn_dist`` feature) are computed on: "
        "right: the n-ary tree right-binarised, as the trainer's SLR variant reads it (Hou et "
        "al.'s code); none: the n-ary tree, as the row's ``syn_dist``",
    )
    scheme: Scheme | None = Field(
        None,
        description="how constituency trees are derived from dependencies when the backend "
        "has no constituency parser (default: the server's)",
    )
    tokenizer: Annotated[str, Field(pattern=f"^{SLUG_PATTERN}$")] | None = Field(
        None,
        description="a subword vocabulary of /v1/backends: features at subword level, "
        "with each sentence's subwords",
    )
    render: list[Literal["dep_svg", "tree"]] = Field(
        default_factory=list,
        max_length=2,
        description="dep_svg: the dependency parse drawn by spaCy's displaCy (SVG text); tree: "
        "the bracketed constituency tree also when it is derived (with ``scheme``)",
    )
    format: Literal["compact", "dense"] = Field(
        "compact", description="compact: {shape, dtype, flat data}; dense: nested lists"
    )
    strict: bool = Field(False, description="fail the whole request (422) if any sentence fails")


class SentenceResult(BaseModel):
    """One sentence: its parse and features, or its error."""

    index: int
    sent_id: str
    error: str | None = None
    words: list[str] | None = None
    pretokenized: bool | None = None
    dep_head: list[int] | None = Field(None, description="1-based heads, 0 = root")
    dep_rel: list[str] | None = None
    upos: list[str] | None = None
    xpos: list[str] | None = None
    tree: str | None = None
    syn_dist: list[int] | None = Field(
        None,
        description="the shard row's flat syntactic distances (n-1 values) of the n-ary tree, "
        "as ``synattn parse`` stores them; LPEA's and RHE's local phrases read these. SLR "
        "reads the right-binarised ones, returned as ``features.syn_dist`` (``slr_binarize``): "
        "for (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)) this is [1, 2, 2] and "
        "features.syn_dist is [1, 2, 1]",
    )
    const_layer: list[int] | None = None
    has_syntax: bool | None = None
    subwords: list[str] | None = Field(None, description="pieces of the named vocabulary")
    subword_to_word: list[int] | None = None
    features: dict[str, Any] | None = Field(
        None,
        description="requested features (at subword level with a tokenizer); non-finite "
        "values (-inf biases) are null. The ``syn_dist`` feature is the distances SLR reads "
        "(right-binarised by default, see ``slr_binarize``), not the row's ``syn_dist``",
    )
    dep_svg: str | None = Field(None, description="the dependency parse as SVG (render)")
    warnings: list[str] | None = Field(
        None,
        description="what the caller should know about this result, e.g. that the string "
        "parsed as several sentences (several roots) and was still treated as one",
    )


class ParseResponse(BaseModel):
    """The parser that ran and one result per input sentence, in order."""

    parser: ParserInfo
    format: Literal["compact", "dense"]
    errors: int
    sentences: list[SentenceResult]


class BackendInfo(BaseModel):
    """One backend: usable here or not, and why not."""

    name: str
    available: bool
    loaded: bool
    default: bool
    description: str
    reason: str | None = None


class BackendsResponse(BaseModel):
    """Every backend, the feature names, derived-tree schemes and subword vocabularies
    ``/v1/parse`` accepts."""

    backends: list[BackendInfo]
    features: list[str]
    schemes: list[str] = Field(default_factory=list)
    tokenizers: list[str] = Field(default_factory=list)


class Health(BaseModel):
    """The process answers."""

    status: Literal["ok"]


class Ready(BaseModel):
    """Whether the default backend's models are loaded (503 while not)."""

    ready: bool
    backend: str | None = None
    model: str | None = None
    detail: str | None = None
