"""``POST /v1/parse``: sentences in, parses and features out, within the service's limits."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, HTTPException, Response
from fastapi.concurrency import run_in_threadpool

from synattn_parser.backends import BackendUnavailable, check_input
from synattn_parser.core import RowOrError, encode_array
from synattn_parser.deps import Pool, Settings
from synattn_parser.pool import BrokenExecutor
from synattn_parser.schemas import ParseRequest, ParseResponse
from synattn_parser.settings import ParserSettings, Scheme
from synattn_parser.subwords import UnknownVocabulary, pieces, vocabulary
from synattn_shared.errors import SyntaxInputError
from synattn_shared.materialise import MaterialiseOptions, materialise
from synattn_shared.syntax.derived import derive_tree
from synattn_shared.syntax.trees import bracket
from synattn_shared.webapi import StrictJSONRoute, problems

router = APIRouter(route_class=StrictJSONRoute, tags=["parse"])

RECORD_FIELDS = (
    "words", "pretokenized", "dep_head", "dep_rel", "upos", "xpos", "tree", "syn_dist",
    "const_layer", "has_syntax",
)  # fmt: skip


def feature_cells(lengths: list[int], features: list[str]) -> int:
    """An upper bound on the numbers the requested features hold (every format writes each
    number once): a feature of an n-position sentence has at most max(n*n, 2n) cells."""
    return sum(max(n * n, 2 * n) for n in lengths) * len(set(features))


def dependency_svg(row: dict[str, Any]) -> str | None:
    """The dependency parse drawn by displaCy (words HTML-escaped by displaCy), or None."""
    heads, rels = row.get("dep_head"), row.get("dep_rel")
    if heads is None:
        return None
    from spacy import displacy

    tags = row.get("upos") or [""] * len(row["words"])
    words = [{"text": w, "tag": t or ""} for w, t in zip(row["words"], tags, strict=True)]
    arcs = []
    for i, h in enumerate(heads):
        if h == 0:
            continue
        head = h - 1
        label = rels[i] if rels else ""
        arcs.append({"start": min(i, head), "end": max(i, head), "label": label,
                     "dir": "left" if i < head else "right"})  # fmt: skip
    svg: str = displacy.render(
        {"words": words, "arcs": arcs}, style="dep", manual=True, jupyter=False,
        options={"compact": True, "distance": 130, "offset_x": 30},
    )  # fmt: skip
    return svg


def several_roots(row: dict[str, Any]) -> str | None:
    """The warning for a parse with several roots: the string held more than one sentence,
    and it is still one sentence here (one string = one sentence = one tree is the API's
    contract), so its tree joins several sentences' trees under one top node."""
    heads = row.get("dep_head")
    roots = 0 if heads is None else sum(1 for h in heads if h == 0)
    if roots < 2:
        return None
    return (
        f"the text parsed as {roots} sentences ({roots} roots); each string is treated as one "
        "sentence, so its tree joins theirs: split the text and send one string per sentence"
    )


def check_request(req: ParseRequest, cfg: ParserSettings) -> None:
    """The request-size limits (413 for too many sentences, 422 for one too long)."""
    n = len(req.sentences)
    if n > cfg.max_sentences:
        raise HTTPException(413, f"{n} sentences, the limit is {cfg.max_sentences}")
    if req.ids is not None and len(req.ids) != n:
        raise HTTPException(422, f"{len(req.ids)} ids for {n} sentences")
    for k, s in enumerate(req.sentences):
        if isinstance(s, str) and len(s) > cfg.max_chars:
            raise HTTPException(
                422, f"sentence {k}: {len(s)} characters, the limit is {cfg.max_chars}"
            )
        if not isinstance(s, str) and len(s) > cfg.max_tokens:
            raise HTTPException(
                422, f"sentence {k}: {len(s)} tokens, the limit is {cfg.max_tokens}"
            )
        if req.strict and (reason := check_input(s)) is not None:
            raise HTTPException(422, f"sentence {k}: {reason}")


def _result(
    index: int,
    sent_id: str,
    row: RowOrError,
    req: ParseRequest,
    opts: MaterialiseOptions,
    split: tuple[list[str], list[int]] | None = None,
    scheme: Scheme = "flat",
) -> dict[str, Any]:
    """One ``SentenceResult`` as a plain dict (built directly: this is the hot path)."""
    if isinstance(row, SyntaxInputError):
        return {"index": index, "sent_id": sent_id, "error": row.reason}
    out: dict[str, Any] = {"index": index, "sent_id": sent_id}
    for key in RECORD_FIELDS:
        if row.get(key) is not None:
            out[key] = row[key]
    if (warning := several_roots(row)) is not None:
        out["warnings"] = [warning]
    if split is not None:
        out["subwords"], out["subword_to_word"] = split
    if "dep_svg" in req.render and (svg := dependency_svg(row)) is not None:
        out["dep_svg"] = svg
    if "tree" in req.render and out.get("tree") is None and row.get("dep_head") is not None:
        out["tree"] = bracket(
            derive_tree(row["words"], row["dep_head"], row.get("upos"), row.get("xpos"), scheme)
        )
    if req.features:
        s2w = None if split is None else split[1]
        mats = materialise(row, tuple(dict.fromkeys(req.features)), opts, s2w)
        out["features"] = {
            k: None if v is None else encode_array(v, req.format)
            for k, v in mats.items()
            if k in req.features
        }
    return out


@router.post(
    "/v1/parse",
    response_model=ParseResponse,
    response_model_exclude_none=True,
    summary="Parse sentences and compute their syntax features",
    description=(
        "Each item of ``sentences`` is one sentence: a string is never split, even when it "
        'holds several sentences ("Dr. Smith arrived. Then he left." is one sentence with one '
        "tree). A sentence whose parse has several roots says so in its ``warnings``: split "
        "such a text into one string per sentence before sending it.\n\n"
        "Two syntactic distances: ``syn_dist`` is the shard row's, of the n-ary tree (what "
        "LPEA's and RHE's local phrases read); the ``syn_dist`` feature is what SLR reads, "
        "the tree right-binarised first unless ``slr_binarize`` is ``none``."
    ),
    responses=problems(408, 413, 422, 503),
)
async def parse(req: ParseRequest, cfg: Settings, pool: Pool) -> Response:
    check_request(req, cfg)
    n = len(req.sentences)
    name = req.backend or cfg.backend
    ids = req.ids or [str(k) for k in range(n)]
    try:
        vocab = None if req.tokenizer is None else vocabulary(cfg, req.tokenizer)
    except UnknownVocabulary as exc:
        raise HTTPException(422, str(exc)) from None
    try:
        rows = await pool.parse(name, list(zip(ids, req.sentences, strict=True)), req.scheme)
    except BackendUnavailable as exc:
        raise HTTPException(422, f"backend {name!r} is not available here: {exc}") from None
    except BrokenExecutor:
        raise HTTPException(503, "the parser worker died; it is restarting, retry") from None
    info = pool.infos[name].model_copy()
    if req.scheme is not None and info.constituency.startswith("derived"):
        info.constituency = f"derived:{req.scheme}"
    errors = [(k, r) for k, r in enumerate(rows) if isinstance(r, SyntaxInputError)]
    if req.strict and errors:
        k, failure = errors[0]
        raise HTTPException(422, f"sentence {k}: {failure.reason}")
    splits: list[tuple[list[str], list[int]] | None] = [
        None if vocab is None or isinstance(r, SyntaxInputError) else pieces(vocab, r["words"])
        for r in rows
    ]
    if req.features:
        lengths = [
            len(r["words"]) if sp is None else len(sp[1])
            for r, sp in zip(rows, splits, strict=True)
            if not isinstance(r, SyntaxInputError)
        ]
        cells = feature_cells(lengths, list(req.features))
        if cells > cfg.max_response_cells:
            raise HTTPException(
                413,
                f"the {req.format} response would hold up to {cells} numbers (limit "
                f"{cfg.max_response_cells}); ask for fewer features or fewer or shorter sentences",
            )
    opts = MaterialiseOptions(tau=req.tau, rp_clip=req.rp_clip, slr_binarize=req.slr_binarize)

    def build() -> list[dict[str, Any]]:
        scheme = req.scheme or cfg.derived_scheme
        return [_result(k, ids[k], r, req, opts, splits[k], scheme) for k, r in enumerate(rows)]

    try:
        slow = req.features or req.render
        results = await run_in_threadpool(build) if slow else build()
    except ValueError as exc:  # an option combination the feature code refuses
        raise HTTPException(422, str(exc)) from None
    body = {
        "parser": info.model_dump(),
        "format": req.format,
        "errors": len(errors),
        "sentences": results,
    }
    # the documented ParseResponse, serialised without re-validating every field
    return Response(orjson.dumps(body), media_type="application/json")
