"""stanza dependency and constituency parsing, from local models only (no download at run time).

stanza pipelines are not thread-safe: the API holds one instance per process and calls it from a
single executor thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from synattn_parser.backends.base import (
    BackendUnavailable,
    SentenceInput,
    join_sentence_trees,
    normalise_text,
)
from synattn_shared.manifest import ParserInfo
from synattn_shared.records import SentenceRecord

PROCESSORS = "tokenize,mwt,pos,lemma,depparse"


def stanza_install_hint(lang: str, model_dir: str | None) -> str:
    """The command that downloads the stanza models this backend needs."""
    where = f", model_dir={model_dir!r}" if model_dir else ""
    return (
        f"pip install 'synattn-parser[stanza]' && python -c \"import stanza; "
        f"stanza.download({lang!r}{where}, processors='{PROCESSORS},constituency')\""
    )


def record_from_stanza(
    sentences: Sequence[Sequence[dict[str, Any]]],
    trees: Sequence[str | None],
    sent_id: str,
    pretokenized: bool,
) -> SentenceRecord:
    """One record from the sentences stanza found in one input line.

    ``sentences`` is ``Document.to_dict()``: per sentence, word dicts with ``id``, ``text``,
    ``head`` (1-based within the sentence, 0 = root), ``deprel``, ``upos``, ``xpos``; multi-word
    token rows (``id`` a pair) are skipped, their syntactic words kept. Heads are offset into one
    line-level numbering (several roots when there are several sentences); the trees are joined
    under a virtual root (docs/papers/gated-slr.md, "Decisions"), or left unknown when any is
    missing.
    """
    words: list[str] = []
    heads: list[int] = []
    rels: list[str] = []
    upos: list[str] = []
    xpos: list[str] = []
    for sent in sentences:
        offset = len(words)
        for w in sent:
            if isinstance(w.get("id"), (list, tuple)):
                continue
            words.append(w["text"])
            head = int(w.get("head", 0))
            heads.append(0 if head == 0 else head + offset)
            rels.append(w.get("deprel") or "dep")
            upos.append(w.get("upos") or "X")
            xpos.append(w.get("xpos") or w.get("upos") or "X")
    tree = None
    if trees and all(t is not None for t in trees):
        tree = join_sentence_trees([t for t in trees if t is not None])
    return SentenceRecord(
        sent_id=sent_id,
        words=tuple(words),
        pretokenized=pretokenized,
        dep_head=tuple(heads),
        dep_rel=tuple(rels),
        upos=tuple(upos),
        xpos=tuple(xpos),
        tree=tree,
    )


class StanzaParser:
    """stanza's parse of raw or pretokenised sentences.

    Two pipelines share the models: one tokenises raw text, the other takes given words
    (``tokenize_pretokenized``, no MWT expansion, so as many words come out as went in).

    Raises:
        BackendUnavailable: stanza or its models are missing (message has the install command).
    """

    def __init__(
        self, lang: str = "en", model_dir: str | None = None, constituency: bool = True
    ) -> None:
        try:
            import stanza
        except ImportError as exc:
            raise BackendUnavailable(
                f"stanza is not installed; install it with: {stanza_install_hint(lang, model_dir)}"
            ) from exc
        procs = PROCESSORS + (",constituency" if constituency else "")
        common: dict[str, Any] = {
            "lang": lang,
            "download_method": None,
            "logging_level": "WARN",
        }
        if model_dir:
            common["dir"] = model_dir
        try:
            self.raw = stanza.Pipeline(processors=procs, **common)
            self.pretok = stanza.Pipeline(
                processors=procs.replace(",mwt", ""), tokenize_pretokenized=True, **common
            )
        except Exception as exc:  # stanza raises several types for missing resources
            raise BackendUnavailable(
                f"stanza models for {lang!r} are not installed ({exc.__class__.__name__}); "
                f"install them with: {stanza_install_hint(lang, model_dir)}"
            ) from exc
        self.constituency = constituency
        self.info = ParserInfo(
            backend="stanza",
            model=f"stanza-{lang}",
            version=f"stanza-{stanza.__version__}",
            constituency="stanza" if constituency else "derived",
        )

    def parse(self, items: Sequence[SentenceInput], ids: Sequence[str]) -> list[SentenceRecord]:
        """Parse a batch (one stanza call per input kind)."""
        import stanza

        out: list[SentenceRecord | None] = [None] * len(items)
        raw = [k for k, x in enumerate(items) if isinstance(x, str)]
        pre = [k for k, x in enumerate(items) if not isinstance(x, str)]
        if raw:
            docs = self.raw.bulk_process(
                [stanza.Document([], text=normalise_text(items[k])) for k in raw]  # type: ignore[arg-type]
            )
            for k, doc in zip(raw, docs, strict=True):
                out[k] = self._record(doc, ids[k], False)
        for k in pre:
            doc = self.pretok([list(items[k])])
            out[k] = self._record(doc, ids[k], True)
        return [r for r in out if r is not None]

    def _record(self, doc: Any, sent_id: str, pretokenized: bool) -> SentenceRecord:
        trees = [
            str(s.constituency) if self.constituency and s.constituency is not None else None
            for s in doc.sentences
        ]
        return record_from_stanza(doc.to_dict(), trees, sent_id, pretokenized)
