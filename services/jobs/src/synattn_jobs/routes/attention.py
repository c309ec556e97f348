"""The attention explorer's API: what each head of a finished training run applies to one
sentence, beside the syntax the model read and what each head is (fixed, gated, masked)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import ORJSONResponse

from synattn_jobs.deps import JobFolder, OwnedJob, Settings
from synattn_jobs.schemas import AttentionRequest, AttentionView
from synattn_jobs.settings import JobSettings
from synattn_shared.paths import UnsafePath, confine
from synattn_shared.webapi import StrictJSONRoute, problems

if TYPE_CHECKING:  # the trainer loads where a route uses it (501 when it is not installed)
    from synattn_trainer.rawtext import ParseRecord, RecordedParser, RemoteParser

router = APIRouter(prefix="/v1/jobs", route_class=StrictJSONRoute, tags=["attention"])


def _cache(request: Request, settings: JobSettings) -> Any:
    """The process's explorer cache (a few loaded models and splits)."""
    from synattn_trainer.explorer import ExplorerCache

    cache = getattr(request.app.state, "explorer", None)
    if cache is None:
        cache = request.app.state.explorer = ExplorerCache(settings.attention_models)
    return cache


def _inside(path: str | None, settings: JobSettings, what: str) -> Path:
    """A file or folder the job's record names, confined to the data root; else 409."""
    if not path:
        raise HTTPException(409, f"the job recorded no {what}")
    try:
        return confine(path, settings.data_root, what, exclude=(settings.home,))
    except UnsafePath:
        raise HTTPException(409, f"the job's {what} lies outside the data root") from None


def finished_checkpoint(job: Any, settings: JobSettings, purpose: str) -> Path:
    """The model file of a finished training job, confined to the data root: a 409 saying why
    for another kind of job, an unfinished run or a model file that is gone, a 501 when this
    API was installed without the trainer."""
    if job.kind != "train":
        raise HTTPException(
            409, f"job {job.id} is a {job.kind} job; {purpose} needs a training job"
        )
    if job.state != "succeeded":
        raise HTTPException(409, f"job {job.id} is {job.state}; {purpose} needs a finished run")
    try:
        import synattn_trainer  # noqa: F401
    except ImportError:  # pragma: no cover - every image with the job API has the trainer
        raise HTTPException(501, "this API was installed without synattn-trainer") from None
    checkpoint = _inside((job.result or {}).get("checkpoint"), settings, "checkpoint")
    if not checkpoint.is_file():
        raise HTTPException(409, f"the run's model file {checkpoint.name} is gone")
    return checkpoint


@contextlib.contextmanager
def parse_errors() -> Iterator[None]:
    """Raw text that fails to parse as the run's data was, as HTTP answers: 422 for a sentence
    the parser refuses, 409 when the parser API's parser is another one, 502 when it does not
    answer."""
    from synattn_shared.errors import SyntaxInputError
    from synattn_trainer import rawtext

    try:
        yield
    except SyntaxInputError as exc:
        raise HTTPException(422, str(exc)) from None
    except rawtext.ParseMismatch as exc:
        raise HTTPException(409, str(exc)) from None
    except rawtext.ParserUnreachable as exc:
        raise HTTPException(502, str(exc)) from None


def _recorded_parser(
    checkpoint: Path, settings: JobSettings
) -> tuple[ParseRecord, RecordedParser | RemoteParser]:
    """The parse a run's model was trained on (the record its checkpoint keeps, or for an older
    run its training split's manifest) and a parser that parses raw text that way: in this
    process, or through the parser API at ``SYNATTN_PARSER_URL`` when one is set.

    Raises:
        HTTPException: 409 when the run's model file is unreadable or this server cannot parse
            as its training data was parsed (with the reason); 501 without the parser package
            and without a parser API.
    """
    from synattn_trainer import rawtext

    try:
        entry, cfg = rawtext.checkpoint_entries(checkpoint)
    except ValueError:
        raise HTTPException(409, f"the run's model file {checkpoint.name} is unreadable") from None
    train = None
    if entry is None:  # a run from before checkpoints kept their parse: its data's manifest
        train = _inside((cfg.get("data") or {}).get("train"), settings, "training split")
    parser: RecordedParser | RemoteParser
    try:
        record = rawtext.parse_record(entry, train, checkpoint.name)
        if settings.parser_url:  # the parser API the operator named parses for this process
            parser = rawtext.RemoteParser(record, settings.parser_url)
        else:
            parser = rawtext.cached_parser(record)
    except rawtext.ParserMissing as exc:
        raise HTTPException(501, f"{exc}, or set SYNATTN_PARSER_URL to a parser API") from None
    except rawtext.ParseMismatch as exc:
        raise HTTPException(409, str(exc).replace(str(settings.data_root), "DATA_ROOT")) from None
    return record, parser


def _text_row(text: str, checkpoint: Path, settings: JobSettings) -> dict[str, Any]:
    """One typed sentence as the shard row the run's recorded parse makes of it.

    Raises:
        HTTPException: 422 for an empty sentence or one the parser API could not parse, 409
            for another parse than the recorded one, 501 without a parser, 502 when the
            parser API does not answer.
    """
    _, parser = _recorded_parser(checkpoint, settings)
    with parse_errors():
        (row,) = parser.rows([text], source="text")
    return dict(row)


@router.post(
    "/{job_id}/attention",
    response_model=AttentionView,
    responses=problems(401, 403, 404, 408, 409, 413, 422, 501, 502),
)
def attention(
    req: AttentionRequest, job: OwnedJob, folder: JobFolder, settings: Settings, request: Request
) -> Any:
    """Every module's applied attention for one sentence of a finished training job you own:
    ``[heads][queries][keys]`` per module, exactly what ``synattn attention`` exports for the
    same checkpoint and row; the syntax it read; each head's role and recorded statistics.
    Free text (``text``) is parsed as the run's training data was (a 409 says why when this
    server cannot), translated greedily by the model, and teacher-forced on that translation,
    which the answer carries as ``translation``."""
    checkpoint = finished_checkpoint(job, settings, "attention")
    from synattn_trainer import explorer

    limit = settings.attention_max_tokens
    translation = None
    if req.text is not None:
        parsed = _text_row(req.text, checkpoint, settings)
        run, cached = _cache(request, settings).model(checkpoint)
        from synattn_trainer.data import corpus_from_rows

        source = corpus_from_rows([parsed], run.tok, source_eos=run.cfg.data.source_eos)
        if len(source.src[0]) > limit:  # refused before the model translates it
            raise HTTPException(
                413, f"the sentence has {len(source.src[0])} source subwords; the explorer "
                f"shows at most {limit} (SYNATTN_ATTENTION_MAX_TOKENS)",
            )  # fmt: skip
        with run.lock:
            corpus, row = explorer.text_corpus(run, parsed), 0
        dep_rel = parsed.get("dep_rel")
        translation = corpus.refs[0]
    else:
        run, cached = _cache(request, settings).model(checkpoint)
        split = getattr(run.cfg.data, req.split)
        if split is None:
            raise HTTPException(422, f"the run has no {req.split} split")
        data = _inside(split, settings, f"{req.split} split")
        corpus = _cache(request, settings).corpus(data, run)
        row = req.row or 0
        if row >= len(corpus):
            raise HTTPException(422, f"row {row} is outside 0..{len(corpus) - 1} of {req.split}")
        dep_rel = _cache(request, settings).dep_rels(data)[row]
    src_len, tgt_len = len(corpus.src[row]), len(corpus.tgt[row]) - 1
    if max(src_len, tgt_len) > limit:
        raise HTTPException(
            413, f"the sentence has {src_len} source and {tgt_len} target subwords; the "
            f"explorer shows at most {limit} (SYNATTN_ATTENTION_MAX_TOKENS)",
        )  # fmt: skip
    with run.lock:  # one forward at a time per model: it leaves state on the modules
        arrays, src, tgt = explorer.row_attention(run.model, run.tok, corpus, row)
        roles = explorer.head_roles(run.model)  # after the forward: RHE's labels are this row's
    # the arrays go out as numpy through orjson: what the route would otherwise spend on
    # validating and encoding ~10^4-10^5 floats as Python objects (bench/training/attention_api.py)
    return ORJSONResponse({
        "job": job.id,
        "split": None if req.text is not None else req.split,
        "row": None if req.text is not None else row,
        "translation": translation,  # the model's own (greedy) translation of free text
        "tokens": {"source": src, "target": tgt},
        "modules": arrays,
        "roles": roles,
        "syntax": explorer.row_syntax(corpus, row, run.model, dep_rel),
        "stats": explorer.run_stats(folder) if folder is not None else {},
        "model_cached": cached,
    })  # fmt: skip
