"""The model worker beside the HTTP process: loaded backends and their micro-batchers.

A child process (by default) holds one instance of each loaded model (stanza is not thread-safe;
spaCy gains nothing from threads) and parses micro-batches of concurrent requests; it exits
with the server, even when the server is killed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import defaultdict
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from concurrent.futures.thread import BrokenThreadPool
from functools import lru_cache, partial
from multiprocessing import get_context
from typing import Any

from synattn_parser.backends import BackendUnavailable
from synattn_parser.batch import get_parser
from synattn_parser.batcher import MicroBatcher
from synattn_parser.core import RowOrError, parse_to_rows
from synattn_parser.metrics import ParserMetrics
from synattn_parser.settings import ParserSettings, Scheme
from synattn_shared.errors import SyntaxInputError
from synattn_shared.features import FeatureOptions
from synattn_shared.heap import freeze_heap
from synattn_shared.manifest import ParserInfo

log = logging.getLogger(__name__)
BrokenExecutor = (BrokenProcessPool, BrokenThreadPool)


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
    """Load backend ``name`` in the model process (cached there) and return its description.

    The loaded model is then frozen out of the garbage collector's full collections (which
    otherwise walk the whole model about once a second under load, a 100 ms pause each).
    """
    info = get_parser(name, _settings(settings_json)).info
    freeze_heap()
    return info


Item = tuple[str, Any, Scheme | None]  # (sent_id, text or words, derived scheme or default)


def _parse_in_model_process(name: str, settings_json: str, batch: list[Item]) -> list[RowOrError]:
    """One micro-batch: parse and compute rows, in the model process (each request's derived
    constituency scheme, or the server's)."""
    settings = _settings(settings_json)
    parser = get_parser(name, settings)
    groups: dict[Scheme, list[int]] = defaultdict(list)
    for k, (_, _, scheme) in enumerate(batch):
        groups[scheme or settings.derived_scheme].append(k)
    out: list[RowOrError | None] = [None] * len(batch)
    for scheme, index in groups.items():
        rows = parse_to_rows(
            parser, [batch[k][1] for k in index], [batch[k][0] for k in index],
            FeatureOptions(derived_scheme=scheme), settings.max_tokens,
        )  # fmt: skip
        for k, row in zip(index, rows, strict=True):
            out[k] = row
    return out  # type: ignore[return-value]


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
        self.batchers: dict[str, MicroBatcher[Item, RowOrError]] = {}
        self.errors: dict[str, str] = {}
        self._lock = asyncio.Lock()

    def _new_executor(self) -> Executor:
        workers = self.settings.model_workers
        if self.settings.model_process or workers > 1:
            return ProcessPoolExecutor(
                max_workers=workers, mp_context=get_context("spawn"), initializer=_exit_with_parent
            )
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="parser-model")

    async def get(self, name: str) -> tuple[ParserInfo, MicroBatcher[Item, RowOrError]]:
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

    async def parse(
        self, name: str, batch: list[tuple[str, Any]], scheme: Scheme | None = None
    ) -> list[RowOrError]:
        """Rows for ``batch`` (micro-batched with other requests); counts sentences.

        Raises:
            BackendUnavailable: the backend cannot load.
            BrokenExecutor: the model worker died (it is replaced; the request fails with 503).
        """
        info, batcher = await self.get(name)
        try:
            rows = await batcher.submit([(sid, item, scheme) for sid, item in batch])
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
        except (BackendUnavailable, BrokenProcessPool, BrokenThreadPool) as exc:
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
