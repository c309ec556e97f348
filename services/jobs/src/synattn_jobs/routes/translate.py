"""Raw-text translation with a finished training run's model: the sentences are parsed as the
run's training data was (the parse record its checkpoint keeps) and translated by beam search,
exactly as ``synattn translate --text`` and ``synattn_trainer.api`` do."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from synattn_jobs.deps import OwnedJob, Settings
from synattn_jobs.routes.attention import (
    _cache,
    _recorded_parser,
    finished_checkpoint,
    parse_errors,
)
from synattn_jobs.schemas import TranslateRequest, TranslateView
from synattn_shared.webapi import StrictJSONRoute, problems

router = APIRouter(prefix="/v1/jobs", route_class=StrictJSONRoute, tags=["translate"])


@router.post(
    "/{job_id}/translate",
    response_model=TranslateView,
    responses=problems(401, 403, 404, 408, 409, 413, 422, 501, 502),
)
def translate(req: TranslateRequest, job: OwnedJob, settings: Settings, request: Request) -> Any:
    """Translate raw sentences with the model of a finished training job you own. Each is
    tokenised and parsed by the parser the run's training data was parsed with; a 409 says why
    when this server cannot parse the same way (another model or library version, another
    backend, other feature options). A sentence the model cannot take is a 422 naming it.
    The parsing happens in this process, or through the parser API at ``SYNATTN_PARSER_URL``
    when one is set (its parser must be the recorded one; 502 when it does not answer)."""
    checkpoint = finished_checkpoint(job, settings, "translation")
    from synattn_trainer import rawtext

    record, parser = _recorded_parser(checkpoint, settings)
    run, cached = _cache(request, settings).model(checkpoint)
    with parse_errors():
        rows = parser.rows(req.sentences, source="sentence")
        with run.lock:  # decoding keeps per-call state on the modules
            out = rawtext.translate_rows(
                run.model, run.tok, run.cfg, rows, beam=req.beam, lenpen=req.lenpen,
                source="sentence",
            )  # fmt: skip
    return {
        "job": job.id,
        "translations": out,
        "parse": record.model_dump(mode="json"),
        "model_cached": cached,
    }
