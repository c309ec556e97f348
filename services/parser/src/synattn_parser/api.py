"""The parser REST API: ``/v1/parse``, ``/v1/backends``, ``/v1/health``, ``/v1/ready``, metrics.

One process holds one instance of each loaded model and runs it from one executor thread (stanza
is not thread-safe; spaCy gains nothing from threads); concurrent requests are micro-batched.
Run it with ``synattn serve-parser`` or ``uvicorn synattn_parser.api:create_app --factory``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from synattn_parser.backends import (
    BackendUnavailable,
    Parser,
    backend_status,
    check_input,
    load_parser,
)
from synattn_parser.batcher import MicroBatcher
from synattn_parser.core import RowOrError, encode_array, parse_to_rows
from synattn_parser.metrics import ParserMetrics
from synattn_parser.schemas import (
    BackendInfo,
    BackendsResponse,
    ParseRequest,
    ParseResponse,
    Problem,
    SentenceResult,
)
from synattn_parser.settings import ParserSettings
from synattn_shared import __version__
from synattn_shared.errors import SyntaxInputError
from synattn_shared.features import FeatureOptions
from synattn_shared.materialise import ALL_FEATURES, MaterialiseOptions, materialise

log = logging.getLogger(__name__)
Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Any]
ROUTES = {"/v1/parse", "/v1/backends", "/v1/health", "/v1/ready", "/metrics"}
MAX_DENSE_CELLS = 4_000_000  # numbers in one dense response; beyond it, ask for compact


class BodyLimit:
    """Reject request bodies over ``limit`` bytes with 413, by header and while streaming.

    Starlette reads a body of any size into memory; this refuses before that happens.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._reject(send)
            return
        seen = 0
        started = False

        async def limited_receive() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge(413, f"request body is larger than {self.limit} bytes")
            return message

        async def tracking_send(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._reject(send)

    async def _reject(self, send: Any) -> None:
        response = JSONResponse(
            {"detail": f"request body is larger than {self.limit} bytes"}, status_code=413
        )
        await response({"type": "http"}, _no_receive, send)


class _TooLarge(HTTPException):
    """Raised from ``receive``: FastAPI re-raises HTTPExceptions met while reading the body."""


async def _no_receive() -> Any:  # pragma: no cover - JSONResponse never reads
    return {"type": "http.disconnect"}


class Metrics:
    """Count requests and observe latency per route (unknown paths share one label)."""

    def __init__(self, app: ASGIApp, metrics: ParserMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = scope["path"] if scope["path"] in ROUTES else "other"
        status = 500
        start = time.perf_counter()

        async def send_status(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - start)


class ParserPool:
    """Loaded backends (one instance each) and their micro-batchers, sharing one model thread."""

    def __init__(self, settings: ParserSettings, metrics: ParserMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parser-model")
        self.parsers: dict[str, Parser] = {}
        self.batchers: dict[str, MicroBatcher[tuple[str, Any], RowOrError]] = {}
        self.errors: dict[str, str] = {}
        self._lock = asyncio.Lock()
        self.options = FeatureOptions(derived_scheme=settings.derived_scheme)

    async def get(self, name: str) -> tuple[Parser, MicroBatcher[tuple[str, Any], RowOrError]]:
        """The loaded backend ``name`` (loaded on first use, in the model thread).

        Raises:
            BackendUnavailable: its package or model is missing.
        """
        if name not in self.parsers:
            async with self._lock:
                if name not in self.parsers:
                    loop = asyncio.get_running_loop()
                    try:
                        parser = await loop.run_in_executor(
                            self.executor, load_parser, name, self.settings
                        )
                    except BackendUnavailable as exc:
                        self.errors[name] = str(exc)
                        raise
                    self.errors.pop(name, None)
                    self.batchers[name] = MicroBatcher(
                        self._batch_fn(parser),
                        self.executor,
                        max_size=self.settings.batch_max_size,
                        max_wait=self.settings.batch_max_wait_ms / 1000,
                        on_batch=self.metrics.batch_size.observe,
                    )
                    self.parsers[name] = parser
        return self.parsers[name], self.batchers[name]

    def _batch_fn(self, parser: Parser) -> Callable[[list[tuple[str, Any]]], list[RowOrError]]:
        backend = parser.info.backend

        def run(batch: list[tuple[str, Any]]) -> list[RowOrError]:
            ids = [sid for sid, _ in batch]
            items = [item for _, item in batch]
            rows = parse_to_rows(parser, items, ids, self.options, self.settings.max_tokens)
            failed = sum(isinstance(r, SyntaxInputError) for r in rows)
            self.metrics.sentences.labels(backend, "ok").inc(len(rows) - failed)
            if failed:
                self.metrics.sentences.labels(backend, "error").inc(failed)
            return rows

        return run

    async def close(self) -> None:
        for batcher in self.batchers.values():
            await batcher.stop()
        self.executor.shutdown(wait=False, cancel_futures=True)


def _result(
    index: int, sent_id: str, row: RowOrError, req: ParseRequest, opts: MaterialiseOptions
) -> SentenceResult:
    if isinstance(row, SyntaxInputError):
        return SentenceResult(index=index, sent_id=sent_id, error=row.reason)
    feats = None
    if req.features:
        mats = materialise(row, tuple(dict.fromkeys(req.features)), opts)
        feats = {
            k: None if v is None else encode_array(v, req.format)
            for k, v in mats.items()
            if k in req.features
        }
    return SentenceResult(
        index=index,
        sent_id=sent_id,
        **{k: row[k] for k in SentenceResult.model_fields if k in row and k != "sent_id"},
        features=feats,
    )


def create_app(settings: ParserSettings | None = None) -> FastAPI:
    """The parser API application (a factory, so tests and workers build their own)."""
    cfg = settings or ParserSettings()
    metrics = ParserMetrics()
    pool = ParserPool(cfg, metrics)
    state: dict[str, Any] = {"loading": None}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if cfg.preload:
            state["loading"] = asyncio.create_task(_preload())
        yield
        await pool.close()

    async def _preload() -> None:
        try:
            await pool.get(cfg.backend)
        except BackendUnavailable as exc:
            log.error("backend %s cannot load: %s", cfg.backend, exc)

    app = FastAPI(
        title="synattn parser",
        version=__version__,
        description="Sentences in, syntax out: dependency and constituency parses and the "
        "features syntax-aware attention variants consume.",
        lifespan=lifespan,
        responses={413: {"model": Problem}},
    )

    @app.get("/v1/health", summary="Liveness")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/v1/ready",
        summary="Readiness: the default backend's models are loaded",
        responses={503: {"model": Problem}},
    )
    async def ready() -> JSONResponse:
        if cfg.backend in pool.parsers:
            info = pool.parsers[cfg.backend].info
            return JSONResponse({"ready": True, "backend": cfg.backend, "model": info.model})
        reason = pool.errors.get(cfg.backend, f"loading backend {cfg.backend}")
        return JSONResponse({"ready": False, "detail": reason}, status_code=503)

    @app.get("/v1/backends", response_model=BackendsResponse, summary="Backends and features")
    async def backends() -> BackendsResponse:
        statuses = await run_in_threadpool(backend_status, cfg)
        return BackendsResponse(
            backends=[
                BackendInfo(
                    name=s.name,
                    available=s.available and s.name not in pool.errors,
                    loaded=s.name in pool.parsers,
                    default=s.name == cfg.backend,
                    description=s.description,
                    reason=pool.errors.get(s.name, s.reason),
                )
                for s in statuses
            ],
            features=list(ALL_FEATURES),
        )

    @app.post(
        "/v1/parse",
        response_model=ParseResponse,
        response_model_exclude_none=True,
        summary="Parse sentences and compute their syntax features",
        responses={422: {"model": Problem}, 413: {"model": Problem}},
    )
    async def parse(req: ParseRequest) -> ParseResponse:
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
        name = req.backend or cfg.backend
        try:
            parser, batcher = await pool.get(name)
        except BackendUnavailable as exc:
            raise HTTPException(422, f"backend {name!r} is not available here: {exc}") from None
        ids = req.ids or [str(k) for k in range(n)]
        rows = await batcher.submit(list(zip(ids, req.sentences, strict=True)))
        errors = [(k, r) for k, r in enumerate(rows) if isinstance(r, SyntaxInputError)]
        if req.strict and errors:
            k, exc = errors[0]
            raise HTTPException(422, f"sentence {k}: {exc.reason}")
        if req.features and req.format == "dense":
            cells = sum(
                len(r["words"]) ** 2 for r in rows if not isinstance(r, SyntaxInputError)
            ) * len(req.features)
            if cells > MAX_DENSE_CELLS:
                raise HTTPException(
                    413,
                    f"dense output would hold {cells} numbers (limit {MAX_DENSE_CELLS}); "
                    "ask for format=compact, fewer features or fewer sentences",
                )
        opts = MaterialiseOptions(tau=req.tau, rp_clip=req.rp_clip, slr_binarize=req.slr_binarize)

        def build() -> list[SentenceResult]:
            return [_result(k, ids[k], r, req, opts) for k, r in enumerate(rows)]

        try:
            results = await run_in_threadpool(build) if req.features else build()
        except ValueError as exc:  # an option combination the feature code refuses
            raise HTTPException(422, str(exc)) from None
        return ParseResponse(
            parser=parser.info, format=req.format, errors=len(errors), sentences=results
        )

    @app.get("/metrics", include_in_schema=False)
    async def prometheus() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(BodyLimit, limit=cfg.max_body_bytes)  # type: ignore[arg-type]
    app.add_middleware(Metrics, metrics=metrics)  # type: ignore[arg-type]  # outermost: counts 413s
    app.state.pool = pool
    app.state.settings = cfg
    return app
