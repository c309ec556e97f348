"""The attention explorer's API: what each head of a finished training run applies to one
sentence, beside the syntax the model read and what each head is (fixed, gated, masked)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import ORJSONResponse

from synattn_jobs.deps import JobFolder, OwnedJob, Settings
from synattn_jobs.schemas import AttentionRequest, AttentionView
from synattn_jobs.settings import JobSettings
from synattn_shared.paths import UnsafePath, confine
from synattn_shared.webapi import StrictJSONRoute, problems

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


def _parse(text: str, settings: JobSettings) -> dict[str, Any]:
    """One sentence through the parser API (422 without one, 502 when it fails)."""
    import httpx

    if not settings.parser_url:
        raise HTTPException(
            422, "free text needs a parser API: set SYNATTN_PARSER_URL (or give a row)"
        )
    try:
        resp = httpx.post(f"{settings.parser_url.rstrip('/')}/v1/parse",
                          json={"sentences": [text]}, timeout=30)  # fmt: skip
    except httpx.HTTPError as exc:
        raise HTTPException(502, f"parser API unreachable: {type(exc).__name__}") from None
    if resp.status_code != 200:
        raise HTTPException(502, f"parser API answered {resp.status_code}")
    sentence: dict[str, Any] = resp.json()["sentences"][0]
    if sentence.get("error"):
        raise HTTPException(422, f"the parser could not parse it: {sentence['error'][:200]}")
    return sentence


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
    same checkpoint and row; the syntax it read; each head's role and recorded statistics."""
    if job.kind != "train":
        raise HTTPException(
            409, f"job {job.id} is a {job.kind} job; attention needs a training job"
        )
    if job.state != "succeeded":
        raise HTTPException(409, f"job {job.id} is {job.state}; attention needs a finished run")
    try:
        from synattn_trainer import explorer
    except ImportError:  # pragma: no cover - every image with the job API has the trainer
        raise HTTPException(501, "this API was installed without synattn-trainer") from None
    result = job.result or {}
    checkpoint = _inside(result.get("checkpoint"), settings, "checkpoint")
    if not checkpoint.is_file():
        raise HTTPException(409, f"the run's model file {checkpoint.name} is gone")
    run, cached = _cache(request, settings).model(checkpoint)
    dep_rel = None
    if req.text is not None:
        parsed = _parse(req.text, settings)
        with run.lock:
            corpus, row = explorer.text_corpus(run, parsed), 0
        dep_rel = parsed.get("dep_rel")
    else:
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
    limit = settings.attention_max_tokens
    if max(src_len, tgt_len) > limit:
        raise HTTPException(
            413, f"the sentence has {src_len} source and {tgt_len} target subwords; the "
            f"explorer shows at most {limit} (SYNATTN_ATTENTION_MAX_TOKENS)",
        )  # fmt: skip
    with run.lock:  # one forward at a time per model: it leaves state on the modules
        arrays, src, tgt = explorer.row_attention(run.model, run.tok, corpus, row)
        roles = explorer.head_roles(run.model)  # after the forward: RHE's labels are this row's
    # the arrays go out as numpy through orjson: what the route would otherwise spend on
    # validating and encoding ~10^4-10^5 floats as Python objects (bench/attention_api.py)
    return ORJSONResponse({
        "job": job.id,
        "split": None if req.text is not None else req.split,
        "row": None if req.text is not None else row,
        "tokens": {"source": src, "target": tgt},
        "modules": arrays,
        "roles": roles,
        "syntax": explorer.row_syntax(corpus, row, run.model, dep_rel),
        "stats": explorer.run_stats(folder) if folder is not None else {},
        "model_cached": cached,
    })  # fmt: skip
