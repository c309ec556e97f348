"""Raw sentences through the parse a model was trained on: the parse record a checkpoint keeps,
the check that this install parses the same way (a mismatch is refused, with the reason), and
raw lines turned into the shard rows ``synattn parse`` would have written for them.

A syntax-aware model reads features of its source's parse, and even a plain model reads the
parser's words: at test time a sentence must go through the same backend, model version and
feature options as the training data did (docs/papers/index.md, "Constituency trees derived
from dependencies"). The record is the training split's
manifest entry (``parser``, ``features``) plus whether its lines were pretokenised; the reader-side
options (SLR's binarisation, temperatures) are the model's own configuration and travel with it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from synattn_shared.errors import BadFile, SyntaxInputError
from synattn_shared.manifest import ParserInfo, load_manifest
from synattn_shared.schema import SCHEMA_VERSION

if TYPE_CHECKING:  # torch, spaCy and the parser package load where they are used
    import torch
    from tokenizers import Tokenizer

    from synattn_parser.settings import ParserSettings
    from synattn_trainer.config import TrainConfig
    from synattn_trainer.model import Transformer

PARSE_KEY = "parse"  # the checkpoint entry that holds the record
MAX_CHARS = 2000  # characters per raw sentence (the parser API's default limit)
NOT_FEATURE_OPTIONS = frozenset({"limit"})  # manifest ``features`` keys that select rows only


class ParseMismatch(ValueError):
    """This install cannot parse as the model's training data was parsed; the message is one
    line saying why (and how to get the recorded parser, when it is missing)."""


class ParserMissing(ParseMismatch):
    """The parser package is not installed in this process (a parser API may stand in)."""


class ParserUnreachable(RuntimeError):
    """A parser API did not answer, or answered with an error that is not about the input."""


class ParseRecord(BaseModel):
    """Which parse a model's training data came from: what raw text must go through."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    parser: ParserInfo
    features: dict[str, Any]  # the manifest's FeatureOptions (``constituency``, scheme, ...)
    pretokenized: bool = False  # the corpus lines were split on whitespace, not tokenised
    schema_version: int = SCHEMA_VERSION
    dataset: str | None = None  # the training split's name (for messages)

    def describe(self) -> str:
        """One line: backend, model and version, constituency source, feature options."""
        p = self.parser
        opts = ", ".join(f"{k}={v}" for k, v in sorted(self.options().items()))
        tok = "pretokenised lines" if self.pretokenized else "raw lines"
        return (
            f"{p.backend} ({p.model or 'no model'}, {p.version or 'no version'}; constituency "
            f"{p.constituency}; {opts}; {tok})"
        )

    def options(self) -> dict[str, Any]:
        """The feature options (``FeatureOptions`` fields) the rows were made with."""
        return {k: v for k, v in self.features.items() if k not in NOT_FEATURE_OPTIONS}


def record_from_shards(directory: str | Path) -> ParseRecord:
    """The parse record of a shard directory: its manifest's parser and feature options, and
    whether its lines were pretokenised (read from its first rows: parse fallbacks are
    pretokenised rows of a raw corpus, so one raw row is enough to call it raw).

    Raises:
        FileNotFoundError: no manifest (not a synattn shard directory).
    """
    from synattn_shared.shards import ShardDataset

    manifest = load_manifest(directory)
    pretokenized = False
    try:
        batch = next(ShardDataset(directory).iter_batches(["pretokenized"], 1024), None)
    except (ValueError, OSError):
        batch = None  # incomplete or unreadable: the manifest alone still names the parser
    if batch is not None and batch.num_rows:
        pretokenized = all(batch.column(0).to_pylist())
    return ParseRecord(
        parser=manifest.parser,
        features=dict(manifest.features),
        pretokenized=pretokenized,
        schema_version=manifest.schema_version,
        dataset=manifest.dataset,
    )


def training_parse(train: str | Path) -> dict[str, Any] | None:
    """What ``Trainer`` stores under ``PARSE_KEY`` in every checkpoint: the training split's
    parse record as JSON, or None when it has no manifest."""
    try:
        return record_from_shards(train).model_dump(mode="json")
    except FileNotFoundError:
        return None


def checkpoint_entries(checkpoint: Path) -> tuple[Any, dict[str, Any]]:
    """A checkpoint's parse record entry (None when it has none) and its config, read without
    loading its tensors (memory-mapped).

    Raises:
        BadFile: the file is not a synattn checkpoint (a ``ValueError``).
    """
    from synattn_trainer.checkpoint import CHECKPOINT_FIX, read_checkpoint

    state = read_checkpoint(checkpoint, "cpu", mmap=True)
    try:
        return state.get(PARSE_KEY), dict(state["config"])
    except (TypeError, ValueError):
        raise BadFile(checkpoint, "not a synattn checkpoint (its config is not a mapping)",
                      CHECKPOINT_FIX) from None  # fmt: skip


def parse_record(
    entry: Mapping[str, Any] | None, train: str | Path | None, checkpoint: Path | str = ""
) -> ParseRecord:
    """The model's parse record: the checkpoint's own ``entry``, else (a checkpoint from before
    records were kept) the manifest of its training split ``train``.

    Raises:
        ParseMismatch: neither says which parse trained the model.
    """
    if entry is not None:
        try:
            return ParseRecord.model_validate(entry)
        except ValidationError as exc:
            raise ParseMismatch(
                f"{checkpoint}: its parse record is not one this synattn reads "
                f"({exc.errors()[0]['msg']})"
            ) from None
    if train is not None:
        try:
            return record_from_shards(train)
        except FileNotFoundError:
            pass
    raise ParseMismatch(
        f"{checkpoint}: the checkpoint does not record which parse trained it, and its "
        f"training data {train} has no manifest to read it from; translate parsed shards "
        "(--data) instead"
    )


def parser_settings(record: ParseRecord, base: ParserSettings | None = None) -> ParserSettings:
    """Parser settings that load the recorded backend and model (the rest from ``base``, by
    default the ``PARSER_*`` environment)."""
    from synattn_parser.settings import ParserSettings

    settings = base or ParserSettings()
    model = record.parser.model or ""
    name = model.rsplit("-", 1)[0] if "-" in model else model  # "<package>-<version>"
    update: dict[str, Any] = {"backend": record.parser.backend}
    scheme = record.options().get("derived_scheme")
    if scheme is not None:
        update["derived_scheme"] = scheme
    if record.parser.backend in ("spacy", "derived") and name:
        update |= {"spacy_model": name, "spacy_fallback": name}
    elif record.parser.backend == "benepar" and "+" in name:
        spacy_model, benepar_model = name.split("+", 1)
        update |= {"spacy_model": spacy_model, "spacy_fallback": spacy_model,
                   "benepar_model": benepar_model}  # fmt: skip
    elif record.parser.backend == "stanza" and name.startswith("stanza"):
        update["stanza_lang"] = model.removeprefix("stanza-")
    return settings.model_copy(update=update)


def _refuse_unparseable(record: ParseRecord) -> str:
    """The start of every refusal ("the model was trained on ..."); raises the refusals that
    hold wherever the parser runs (given parses, another shard schema).

    Raises:
        ParseMismatch: raw text cannot be parsed as this record's data was, anywhere.
    """
    where = f"the model was trained on {record.describe()}"
    if record.parser.backend == "given":
        raise ParseMismatch(
            f"{where}: parses supplied with the data, which raw text does not have; "
            "translate parsed shards (--data) instead"
        )
    if record.schema_version != SCHEMA_VERSION:
        raise ParseMismatch(
            f"{where}: shard schema version {record.schema_version}, this synattn makes "
            f"version {SCHEMA_VERSION}"
        )
    return where


def info_differences(recorded: ParserInfo, here: ParserInfo) -> list[str]:
    """The fields in which the parser loaded here differs from the recorded one."""
    return [
        f"{key} {getattr(recorded, key)!r} at training, {getattr(here, key)!r} here"
        for key in ("backend", "model", "version", "constituency")
        if getattr(recorded, key) != getattr(here, key)
    ]


class RecordedParser:
    """The recorded parse, loaded here and checked: raw lines in, the shard rows that
    ``synattn parse`` makes of them out (``synattn_parser.batch.parse_lines``, the same code).

    Raises:
        ParseMismatch: the recorded backend or model is not installed, the loaded parser is not
            the recorded one (model version, library version, constituency source), or the
            feature options are not ones this install makes.
    """

    def __init__(self, record: ParseRecord, settings: ParserSettings | None = None) -> None:
        self.record = record
        wanted = record.parser
        where = _refuse_unparseable(record)
        try:
            from synattn_parser.backends import BackendUnavailable, load_parser
            from synattn_parser.batch import parse_lines
        except ImportError:
            raise ParserMissing(
                f"{where}: raw text needs the parser package here (pip install ./services/parser)"
            ) from None
        from synattn_shared.features import FeatureOptions

        try:
            self.options = FeatureOptions(**record.options())
        except ValidationError as exc:
            raise ParseMismatch(
                f"{where}: its feature options differ from those this install makes "
                f"({'; '.join(e['msg'] for e in exc.errors())})"
            ) from None
        cfg = parser_settings(record, settings)
        if self.options.derived_scheme != cfg.derived_scheme:
            raise ParseMismatch(
                f"{where}: derived_scheme {self.options.derived_scheme!r} was recorded, the "
                f"parser here derives {cfg.derived_scheme!r}"
            )
        try:
            self.parser = load_parser(wanted.backend, cfg)
        except (BackendUnavailable, ValueError) as exc:
            raise ParseMismatch(f"{where}, which is not available here: {exc}") from None
        if diff := info_differences(wanted, self.parser.info):
            raise ParseMismatch(f"{where}; the parser here differs: {'; '.join(diff)}")
        self._parse_lines = parse_lines
        self._lock = threading.Lock()  # one parse at a time: a spaCy pipeline is not shared

    def rows(
        self, lines: Sequence[str], first_line: int = 1, source: str = "<input>"
    ) -> list[dict[str, Any]]:
        """Shard rows of raw sentences (one per line), each with an empty ``tgt``.

        Args:
            lines: sentences; split on whitespace when the training corpus was pretokenised.
            first_line: the 1-based line number of ``lines[0]`` (for messages).
            source: where the lines come from (for messages).

        Raises:
            SyntaxInputError: an empty sentence, located.
        """
        for k, text in enumerate(lines):
            check_sentence(text, first_line + k, None, source)
        with self._lock:
            rows, _ = self._parse_lines(
                self.parser, list(lines), first_line - 1, self.record.pretokenized,
                self.options, None, source=source,
            )  # fmt: skip
        for row in rows:
            row["tgt"] = ""
        return rows


RECORD_FIELDS = ("words", "pretokenized", "dep_head", "dep_rel", "upos", "xpos", "tree",
                 "syn_dist", "const_layer", "has_syntax")  # fmt: skip


class RemoteParser:
    """The recorded parse through a parser API (``synattn serve-parser``), for a process
    without the parser package: each request names the recorded backend and derivation
    scheme, and each answer's ``parser`` must be the recorded one. The API makes rows with the
    same code as ``synattn parse``; a sentence it cannot parse (over its token limit) is
    refused here, where the batch parser would have stored it without syntax.

    Raises:
        ParseMismatch: the record's feature options are not the ones the API makes rows with.
    """

    def __init__(self, record: ParseRecord, url: str, timeout_s: float = 60.0) -> None:
        from synattn_shared.features import FeatureOptions

        self.record = record
        self.url = url.rstrip("/") + "/v1/parse"
        self.timeout_s = timeout_s
        self.where = _refuse_unparseable(record)
        self.scheme = record.options().get("derived_scheme", "flat")
        made = FeatureOptions(derived_scheme=self.scheme).model_dump()
        if record.options() != made:
            raise ParseMismatch(
                f"{self.where}: the parser API makes rows with other feature options ({made})"
            )

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        import contextlib
        import json
        import urllib.error
        import urllib.request

        data = json.dumps(body).encode()
        req = urllib.request.Request(
            self.url, data, {"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                answer: dict[str, Any] = json.loads(resp.read())
                return answer
        except urllib.error.HTTPError as exc:
            detail = str(exc.code)
            with contextlib.suppress(ValueError, KeyError, TypeError):
                detail += f": {json.loads(exc.read())['detail']}"
            if exc.code == 422 and "not available" in detail:
                raise ParseMismatch(f"{self.where}; the parser API answered {detail}") from None
            raise ParserUnreachable(f"the parser API answered {detail}"[:300]) from None
        except (OSError, ValueError) as exc:
            raise ParserUnreachable(f"parser API unreachable: {type(exc).__name__}") from None

    def rows(
        self, lines: Sequence[str], first_line: int = 1, source: str = "<input>"
    ) -> list[dict[str, Any]]:
        """Shard rows of raw sentences, as ``RecordedParser.rows``.

        Raises:
            SyntaxInputError: an empty sentence, or one the parser API could not parse.
            ParseMismatch: the API's parser is not the recorded one.
            ParserUnreachable: the API did not answer as a parser API does.
        """
        for k, text in enumerate(lines):
            check_sentence(text, first_line + k, None, source)
        items: list[Any] = [t.split() for t in lines] if self.record.pretokenized else list(lines)
        answer = self._post(
            {"sentences": items, "backend": self.record.parser.backend, "scheme": self.scheme}
        )
        try:
            here = ParserInfo.model_validate(answer["parser"])
            results: list[dict[str, Any]] = answer["sentences"]
        except (KeyError, TypeError, ValidationError):
            raise ParserUnreachable("the parser API's answer is not a parse") from None
        if diff := info_differences(self.record.parser, here):
            raise ParseMismatch(f"{self.where}; the parser API differs: {'; '.join(diff)}")
        rows = []
        for k, result in enumerate(results):
            if result.get("error"):
                raise SyntaxInputError(
                    f"the parser could not parse it: {str(result['error'])[:200]}",
                    source=source, line=first_line + k,
                )  # fmt: skip
            row = {key: result.get(key) for key in RECORD_FIELDS}
            row["tgt"] = ""
            rows.append(row)
        return rows


_PARSERS: dict[str, RecordedParser] = {}
_PARSERS_LOCK = threading.Lock()


def cached_parser(record: ParseRecord) -> RecordedParser:
    """The process's ``RecordedParser`` for a record (loaded once; a failed check is not kept,
    so installing the missing model and retrying works)."""
    key = record.model_dump_json()
    with _PARSERS_LOCK:
        if key not in _PARSERS:
            _PARSERS[key] = RecordedParser(record)
        return _PARSERS[key]


def check_sentence(
    text: str, line: int, max_chars: int | None = MAX_CHARS, source: str = "<input>"
) -> None:
    """Refuse a sentence that is empty or longer than ``max_chars`` characters.

    Raises:
        SyntaxInputError: the reason, with the source and line.
    """
    if not text.strip():
        raise SyntaxInputError("empty sentence", source=source, line=line)
    if max_chars is not None and len(text) > max_chars:
        raise SyntaxInputError(
            f"{len(text)} characters, the limit is {max_chars}", source=source, line=line
        )


def numbered_chunks(
    lines: Iterable[str], size: int, max_lines: int | None, source: str = "<input>"
) -> Iterator[tuple[int, list[str]]]:
    """Consecutive lines ``size`` at a time with the 1-based number of each chunk's first,
    newlines stripped, read lazily (a chunk is handed on as soon as it is full).

    Raises:
        SyntaxInputError: more than ``max_lines`` lines (raised when line ``max_lines + 1``
            arrives, after the chunk before it is handed on: a stream is translated up to the
            limit).
    """
    chunk: list[str] = []
    first = 1
    for k, line in enumerate(lines, start=1):
        if max_lines is not None and k > max_lines:
            if chunk:
                yield first, chunk
            raise SyntaxInputError(
                f"more than {max_lines} lines, the limit", source=source, line=k
            )
        chunk.append(line.rstrip("\r\n"))
        if len(chunk) >= size:
            yield first, chunk
            first, chunk = k + 1, []
    if chunk:
        yield first, chunk


def translate_rows(
    model: Transformer,
    tok: Tokenizer,
    cfg: TrainConfig,
    rows: Sequence[dict[str, Any]],
    *,
    beam: int | None = None,
    lenpen: float | None = None,
    device: torch.device | None = None,
    first_line: int = 1,
    source: str = "<input>",
) -> list[str]:
    """Beam-search translations of parsed rows, in order: the same encoding and the same
    translate loop as ``translate_split`` over shards.

    Raises:
        SyntaxInputError: a sentence longer (in subwords) than the model's positions allow.
    """
    from synattn_trainer.data import corpus_from_rows
    from synattn_trainer.decode import translate_corpus

    if not rows:
        return []
    corpus = corpus_from_rows(list(rows), tok, source_eos=cfg.data.source_eos)
    d, limit = cfg.decode, cfg.model.max_positions
    for k, src in enumerate(corpus.src):
        longest = int(len(src) * d.max_len_a + d.max_len_b) + 1
        if len(src) > limit or longest > limit:
            raise SyntaxInputError(
                f"{len(src)} source subwords (a translation of up to {longest}); the model "
                f"has {limit} positions",
                source=source, line=first_line + k,
            )  # fmt: skip
    return translate_corpus(model, corpus, tok, d, beam=beam, lenpen=lenpen, device=device)
