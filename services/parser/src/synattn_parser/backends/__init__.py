"""Parser backends by name, and which of them this install can use (and why not)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from synattn_parser.backends.base import (
    BackendUnavailable,
    Parser,
    SentenceInput,
    check_input,
    parse_isolated,
)
from synattn_parser.backends.benepar_backend import INSTALL as BENEPAR_INSTALL
from synattn_parser.backends.spacy_backend import find_spacy_model, spacy_install_hint
from synattn_parser.backends.stanza_backend import stanza_install_hint
from synattn_parser.settings import ParserSettings

BACKEND_NAMES = ("spacy", "benepar", "stanza", "derived", "given")
DESCRIPTIONS = {
    "spacy": "spaCy dependency parse; constituency derived from it",
    "benepar": "spaCy dependency parse + benepar constituency parse",
    "stanza": "stanza dependency and constituency parse (local models)",
    "derived": "constituency derived from the spaCy dependency parse (same as spacy)",
    "given": "parses you supply: one PTB bracketing or one CoNLL-U block per sentence",
}

__all__ = [
    "BACKEND_NAMES",
    "BackendStatus",
    "BackendUnavailable",
    "Parser",
    "SentenceInput",
    "backend_status",
    "check_input",
    "load_parser",
    "parse_isolated",
]


@dataclass(frozen=True)
class BackendStatus:
    """Whether a backend can be loaded here; ``reason`` (with the install command) when not."""

    name: str
    available: bool
    description: str
    reason: str | None = None


def _benepar_reason(settings: ParserSettings) -> str | None:
    if importlib.util.find_spec("benepar") is None:
        return "benepar is not installed; install it with: " + BENEPAR_INSTALL.format(
            model=settings.benepar_model
        )
    import nltk

    try:
        nltk.data.find(f"models/{settings.benepar_model}")
    except LookupError:
        if not Path(settings.benepar_model).exists():
            return (
                f"benepar model {settings.benepar_model!r} is not installed; install it with: "
                f"python -c \"import benepar; benepar.download('{settings.benepar_model}')\""
            )
    return None


def _stanza_reason(settings: ParserSettings) -> str | None:
    hint = stanza_install_hint(settings.stanza_lang, settings.stanza_dir)
    if importlib.util.find_spec("stanza") is None:
        return f"stanza is not installed; install it with: {hint}"
    root = Path(settings.stanza_dir or Path.home() / "stanza_resources")
    if not (root / "resources.json").is_file() or not (root / settings.stanza_lang).is_dir():
        lang = settings.stanza_lang
        return f"stanza models for {lang!r} are not in {root}; install them with: {hint}"
    return None


def backend_status(settings: ParserSettings) -> list[BackendStatus]:
    """Every backend with whether it can be used here, checked without loading any model."""
    spacy_missing = None
    if find_spacy_model(settings.spacy_model, settings.spacy_fallback) is None:
        spacy_missing = (
            f"spaCy model {settings.spacy_model!r} is not installed; install it with: "
            f"{spacy_install_hint(settings.spacy_model)}"
        )
    reasons = {
        "spacy": spacy_missing,
        "derived": spacy_missing,
        "benepar": spacy_missing or _benepar_reason(settings),
        "stanza": _stanza_reason(settings),
        "given": None,
    }
    return [
        BackendStatus(name, reasons[name] is None, DESCRIPTIONS[name], reasons[name])
        for name in BACKEND_NAMES
    ]


def load_parser(name: str, settings: ParserSettings) -> Parser:
    """Load the named backend's models (once per process; callers keep the instance).

    Raises:
        BackendUnavailable: the backend's package or model is missing.
        ValueError: an unknown backend name.
    """
    if name in ("spacy", "derived"):
        from synattn_parser.backends.spacy_backend import SpacyParser

        return SpacyParser(
            settings.spacy_model,
            settings.spacy_fallback,
            batch_size=settings.batch_max_size,
            constituency=f"derived:{settings.derived_scheme}",
            blas=settings.spacy_blas,
        )
    if name == "benepar":
        from synattn_parser.backends.benepar_backend import load_benepar

        return load_benepar(
            settings.spacy_model, settings.spacy_fallback, settings.benepar_model,
            blas=settings.spacy_blas,
        )  # fmt: skip
    if name == "stanza":
        from synattn_parser.backends.stanza_backend import StanzaParser

        return StanzaParser(settings.stanza_lang, settings.stanza_dir)
    if name == "given":
        from synattn_parser.backends.given import GivenParser

        return GivenParser()
    raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}")
