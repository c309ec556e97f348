"""benepar constituency parsing as a spaCy pipeline component (dependencies from spaCy)."""

from __future__ import annotations

from typing import Any

from synattn_parser.backends.base import BackendUnavailable, join_sentence_trees
from synattn_parser.backends.spacy_backend import SpacyParser, load_spacy
from synattn_parser.settings import Blas

INSTALL = (
    "pip install 'synattn-parser[benepar]' && "
    "python -c \"import benepar; benepar.download('{model}')\""
)


def benepar_tree(doc: Any) -> str:
    """The bracketing of a benepar-annotated ``Doc``: its sentences' trees joined
    under a virtual root (docs/papers/gated-slr.md, "Decisions")."""
    return join_sentence_trees([sent._.parse_string for sent in doc.sents])


def add_benepar(nlp: Any, model: str) -> None:
    """Add the benepar component to a spaCy pipeline.

    Raises:
        BackendUnavailable: benepar or its model is missing (message has the install command).
    """
    try:
        import benepar  # noqa: F401 - registers the "benepar" factory
    except ImportError as exc:
        raise BackendUnavailable(
            f"benepar is not installed; install it with: {INSTALL.format(model=model)}"
        ) from exc
    try:
        nlp.add_pipe("benepar", config={"model": model})
    except (LookupError, OSError, ValueError) as exc:
        raise BackendUnavailable(
            f"benepar model {model!r} is not installed; install it with: "
            f"python -c \"import benepar; benepar.download('{model}')\""
        ) from exc


def load_benepar(
    spacy_model: str,
    fallback: str | None,
    model: str,
    batch_size: int = 64,
    blas: Blas = "numpy",
) -> SpacyParser:
    """spaCy dependencies plus benepar constituency in one pipeline."""
    nlp, name = load_spacy(spacy_model, fallback, blas)
    add_benepar(nlp, model)
    return SpacyParser(
        model=spacy_model,
        nlp=nlp,
        model_name=f"{name}+{model}",
        batch_size=batch_size,
        tree_of=benepar_tree,
        backend="benepar",
        constituency="benepar",
    )
