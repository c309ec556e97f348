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
from synattn_parser.settings import ParserSettings
from synattn_shared.errors import SyntaxInputError
from synattn_shared.materialise import MaterialiseOptions, materialise
from synattn_shared.webapi import StrictJSONRoute, problems

router = APIRouter(route_class=StrictJSONRoute, tags=["parse"])

RECORD_FIELDS = (
    "words", "pretokenized", "dep_head", "dep_rel", "upos", "xpos", "tree", "syn_dist",
    "const_layer", "has_syntax",
)  # fmt: skip


def feature_cells(rows: list[RowOrError], features: list[str]) -> int:
    """An upper bound on the numbers the requested features hold (every format writes each
    number once): a feature of an n-word sentence has at most max(n*n, 2n) cells."""
    per_sentence = sum(
        max(len(r["words"]) ** 2, 2 * len(r["words"]))
        for r in rows
        if not isinstance(r, SyntaxInputError)
    )
    return per_sentence * len(set(features))


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
    index: int, sent_id: str, row: RowOrError, req: ParseRequest, opts: MaterialiseOptions
) -> dict[str, Any]:
    """One ``SentenceResult`` as a plain dict (built directly: this is the hot path)."""
    if isinstance(row, SyntaxInputError):
        return {"index": index, "sent_id": sent_id, "error": row.reason}
    out: dict[str, Any] = {"index": index, "sent_id": sent_id}
    for key in RECORD_FIELDS:
        if row.get(key) is not None:
            out[key] = row[key]
    if req.features:
        mats = materialise(row, tuple(dict.fromkeys(req.features)), opts)
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
    responses=problems(408, 413, 422, 503),
)
async def parse(req: ParseRequest, cfg: Settings, pool: Pool) -> Response:
    check_request(req, cfg)
    n = len(req.sentences)
    name = req.backend or cfg.backend
    ids = req.ids or [str(k) for k in range(n)]
    try:
        rows = await pool.parse(name, list(zip(ids, req.sentences, strict=True)))
    except BackendUnavailable as exc:
        raise HTTPException(422, f"backend {name!r} is not available here: {exc}") from None
    except BrokenExecutor:
        raise HTTPException(503, "the parser worker died; it is restarting, retry") from None
    info = pool.infos[name]
    errors = [(k, r) for k, r in enumerate(rows) if isinstance(r, SyntaxInputError)]
    if req.strict and errors:
        k, failure = errors[0]
        raise HTTPException(422, f"sentence {k}: {failure.reason}")
    if req.features:
        cells = feature_cells(rows, list(req.features))
        if cells > cfg.max_response_cells:
            raise HTTPException(
                413,
                f"the {req.format} response would hold up to {cells} numbers (limit "
                f"{cfg.max_response_cells}); ask for fewer features or fewer or shorter sentences",
            )
    opts = MaterialiseOptions(tau=req.tau, rp_clip=req.rp_clip, slr_binarize=req.slr_binarize)

    def build() -> list[dict[str, Any]]:
        return [_result(k, ids[k], r, req, opts) for k, r in enumerate(rows)]

    try:
        results = await run_in_threadpool(build) if req.features else build()
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
