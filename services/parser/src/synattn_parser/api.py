"""The parser REST API: ``/v1/parse``, ``/v1/backends``, ``/v1/health``, ``/v1/ready``, metrics.

A model process beside the HTTP process holds one instance of each loaded model (stanza is not
thread-safe; spaCy gains nothing from threads); concurrent requests are micro-batched.
Run it with ``synattn serve-parser`` or ``uvicorn synattn_parser.api:create_app --factory``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from concurrent.futures.thread import BrokenThreadPool
from contextlib import asynccontextmanager
from functools import lru_cache, partial
from multiprocessing import get_context
from typing import Any

import orjson
from fastapi import FastAPI, HTTPException
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from synattn_parser.backends import BackendUnavailable, backend_status, check_input
from synattn_parser.batch import get_parser
from synattn_parser.batcher import MicroBatcher
from synattn_parser.core import RowOrError, encode_array, parse_to_rows
from synattn_parser.metrics import ParserMetrics
from synattn_parser.schemas import (
    BackendInfo,
    BackendsResponse,
    ParseRequest,
    ParseResponse,
    Problem,
)
from synattn_parser.settings import ParserSettings
from synattn_shared import __version__
from synattn_shared.asgi import ASGIApp, BodyLimit, Scope
from synattn_shared.errors import SyntaxInputError
from synattn_shared.features import FeatureOptions
from synattn_shared.manifest import ParserInfo
from synattn_shared.materialise import ALL_FEATURES, MaterialiseOptions, materialise

log = logging.getLogger(__name__)
BrokenExecutor = (BrokenProcessPool, BrokenThreadPool)
ROUTES = {"/v1/parse", "/v1/backends", "/v1/health", "/v1/ready", "/metrics"}
MAX_DENSE_CELLS = 4_000_000  # numbers in one dense response; beyond it, ask for compact


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


def _exit_with_parent(poll_s: float = 1.0) -> None:
    """Model-process initializer: exit when the API process dies, even by SIGKILL.

    A pool worker otherwise waits on its task queue forever, holding a model's memory.
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(0)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


@lru_cache(maxsize=8)
def _settings(settings_json: str) -> ParserSettings:
    """Settings sent to a model worker, parsed once there (not once per micro-batch)."""
    return ParserSettings.model_validate_json(settings_json)


def _load_in_model_process(name: str, settings_json: str) -> ParserInfo:
    """Load backend ``name`` in the model process (cached there) and return its description."""
    return get_parser(name, _settings(settings_json)).info


def _parse_in_model_process(
    name: str, settings_json: str, batch: list[tuple[str, Any]]
) -> list[RowOrError]:
    """One micro-batch: parse and compute rows, in the model process."""
    settings = _settings(settings_json)
    parser = get_parser(name, settings)
    options = FeatureOptions(derived_scheme=settings.derived_scheme)
    ids = [sid for sid, _ in batch]
    items = [item for _, item in batch]
    return parse_to_rows(parser, items, ids, options, settings.max_tokens)


class ParserPool:
    """Loaded backends and their micro-batchers, all served by one model worker.

    The worker is a child process by default (``PARSER_MODEL_PROCESS=false``: a thread, which
    shares the GIL with the HTTP loop), ``PARSER_MODEL_WORKERS=N`` runs N model processes, and
    ``PARSER_BATCHES_IN_FLIGHT`` micro-batches go to each worker at once (2: one parses while the
    next is ready). Each worker holds one instance per backend (stanza is not thread-safe).
    """

    def __init__(self, settings: ParserSettings, metrics: ParserMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self._settings_json = settings.model_dump_json()
        self.executor = self._new_executor()
        self.infos: dict[str, ParserInfo] = {}
        self.batchers: dict[str, MicroBatcher[tuple[str, Any], RowOrError]] = {}
        self.errors: dict[str, str] = {}
        self._lock = asyncio.Lock()

    def _new_executor(self) -> Executor:
        workers = self.settings.model_workers
        if self.settings.model_process or workers > 1:
            return ProcessPoolExecutor(
                max_workers=workers, mp_context=get_context("spawn"), initializer=_exit_with_parent
            )
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="parser-model")

    async def get(self, name: str) -> tuple[ParserInfo, MicroBatcher[tuple[str, Any], RowOrError]]:
        """The loaded backend ``name`` (loaded on first use, in the model worker).

        Raises:
            BackendUnavailable: its package or model is missing.
        """
        if name not in self.infos:
            async with self._lock:
                if name not in self.infos:
                    loop = asyncio.get_running_loop()
                    try:
                        loads = [
                            loop.run_in_executor(
                                self.executor, _load_in_model_process, name, self._settings_json
                            )
                            for _ in range(self.settings.model_workers)
                        ]  # one per worker process (each keeps its own model)
                        info = (await asyncio.gather(*loads))[0]
                    except BackendUnavailable as exc:
                        self.errors[name] = str(exc)
                        raise
                    self.errors.pop(name, None)
                    self.batchers[name] = MicroBatcher(
                        partial(_parse_in_model_process, name, self._settings_json),
                        self.executor,
                        max_size=self.settings.batch_max_size,
                        max_wait=self.settings.batch_max_wait_ms / 1000,
                        on_batch=self.metrics.batch_size.observe,
                        concurrency=self.settings.model_workers * self.settings.batches_in_flight,
                        workers=self.settings.model_workers,
                    )
                    self.infos[name] = info
        return self.infos[name], self.batchers[name]

    async def parse(self, name: str, batch: list[tuple[str, Any]]) -> list[RowOrError]:
        """Rows for ``batch`` (micro-batched with other requests); counts sentences.

        Raises:
            BackendUnavailable: the backend cannot load.
            BrokenExecutor: the model worker died (it is replaced; the request fails with 503).
        """
        info, batcher = await self.get(name)
        try:
            rows = await batcher.submit(batch)
        except BrokenExecutor:
            await self.reset()
            raise
        failed = sum(isinstance(r, SyntaxInputError) for r in rows)
        self.metrics.sentences.labels(info.backend, "ok").inc(len(rows) - failed)
        if failed:
            self.metrics.sentences.labels(info.backend, "error").inc(failed)
        return rows

    async def reset(self) -> None:
        """Replace a dead model worker; backends load again on next use."""
        async with self._lock:
            for batcher in self.batchers.values():
                await batcher.stop()
            self.batchers.clear()
            self.infos.clear()
            self.executor.shutdown(wait=False, cancel_futures=True)
            self.executor = self._new_executor()
        if self.settings.preload:
            asyncio.get_running_loop().create_task(self._preload_quietly())

    async def _preload_quietly(self) -> None:
        try:
            await self.get(self.settings.backend)
        except (BackendUnavailable, BrokenExecutor) as exc:
            log.error("backend %s cannot load: %s", self.settings.backend, exc)
        except Exception as exc:  # a bug: say so in /v1/ready instead of loading forever
            log.exception("backend %s failed to load", self.settings.backend)
            self.errors[self.settings.backend] = f"{type(exc).__name__}: {exc}"

    async def close(self) -> None:
        for batcher in self.batchers.values():
            await batcher.stop()
        # join a model process so it never outlives the server
        wait = isinstance(self.executor, ProcessPoolExecutor)
        await asyncio.to_thread(self.executor.shutdown, wait=wait, cancel_futures=True)


RECORD_FIELDS = (
    "words", "pretokenized", "dep_head", "dep_rel", "upos", "xpos", "tree", "syn_dist",
    "const_layer", "has_syntax",
)  # fmt: skip


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
        await pool._preload_quietly()

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
        if cfg.backend in pool.infos:
            info = pool.infos[cfg.backend]
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
                    loaded=s.name in pool.infos,
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
    async def parse(req: ParseRequest) -> Response:
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

    @app.get("/metrics", include_in_schema=False)
    async def prometheus() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(BodyLimit, limit=cfg.max_body_bytes)  # type: ignore[arg-type]
    app.add_middleware(Metrics, metrics=metrics)  # type: ignore[arg-type]  # outermost: counts 413s
    app.state.pool = pool
    app.state.settings = cfg
    return app
