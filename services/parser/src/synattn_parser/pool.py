"""The model workers beside the HTTP process: loaded backends and their micro-batchers.

Child processes (by default) each hold one instance of each loaded model (stanza is not
thread-safe; spaCy gains nothing from threads) and parse micro-batches of concurrent requests;
they exit with the server, even when the server is killed (:mod:`synattn_parser.runners`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from concurrent.futures.process import BrokenProcessPool
from concurrent.futures.thread import BrokenThreadPool
from functools import lru_cache, partial
from typing import Any

from synattn_parser.backends import BackendUnavailable
from synattn_parser.batch import get_parser
from synattn_parser.batcher import MicroBatcher
from synattn_parser.core import RowOrError, parse_to_rows
from synattn_parser.metrics import ParserMetrics
from synattn_parser.runners import ModelRunner, ModelWorkerDied, ProcessRunner, ThreadRunner
from synattn_parser.settings import ParserSettings, Scheme
from synattn_shared.errors import SyntaxInputError
from synattn_shared.features import FeatureOptions
from synattn_shared.heap import freeze_heap
from synattn_shared.manifest import ParserInfo

log = logging.getLogger(__name__)
BrokenExecutor = (BrokenProcessPool, BrokenThreadPool)  # ModelWorkerDied is a BrokenProcessPool


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
    """Loaded backends and their micro-batchers, all served by the same model workers.

    ``PARSER_MODEL_WORKERS=N`` child processes by default (``PARSER_MODEL_PROCESS=false``: one
    thread, which shares the GIL with the HTTP loop); ``PARSER_BATCHES_IN_FLIGHT`` micro-batches
    go to each worker at once (2: one parses while the next is ready). Each worker holds one
    instance per backend (stanza is not thread-safe).
    """

    def __init__(self, settings: ParserSettings, metrics: ParserMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self._settings_json = settings.model_dump_json()
        self.runner = self._new_runner()
        self.infos: dict[str, ParserInfo] = {}
        self.batchers: dict[str, MicroBatcher[Item, RowOrError]] = {}
        self.errors: dict[str, str] = {}
        self._lock = asyncio.Lock()

    def _new_runner(self) -> ModelRunner:
        workers = self.settings.model_workers
        if self.settings.model_process or workers > 1:
            return ProcessRunner(workers)
        return ThreadRunner()

    async def get(self, name: str) -> tuple[ParserInfo, MicroBatcher[Item, RowOrError]]:
        """The loaded backend ``name`` (loaded on first use, in the model worker).

        Raises:
            BackendUnavailable: its package or model is missing.
        """
        if name not in self.infos:
            async with self._lock:
                if name not in self.infos:
                    try:  # into every worker (each keeps its own model)
                        info = (
                            await self.runner.call_all(
                                _load_in_model_process, name, self._settings_json
                            )
                        )[0]
                    except BackendUnavailable as exc:
                        self.errors[name] = str(exc)
                        raise
                    self.errors.pop(name, None)
                    self.batchers[name] = MicroBatcher(
                        partial(
                            self.runner.call,
                            partial(_parse_in_model_process, name, self._settings_json),
                        ),
                        max_size=self.settings.batch_max_size,
                        max_wait=self.settings.batch_max_wait_ms / 1000,
                        on_batch=self.metrics.batch_size.observe,
                        concurrency=self.runner.workers * self.settings.batches_in_flight,
                        workers=self.runner.workers,
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
        runner = self.runner
        try:
            rows = await batcher.submit([(sid, item, scheme) for sid, item in batch])
        except BrokenExecutor:
            await self.reset(runner)
            raise
        failed = sum(isinstance(r, SyntaxInputError) for r in rows)
        self.metrics.sentences.labels(info.backend, "ok").inc(len(rows) - failed)
        if failed:
            self.metrics.sentences.labels(info.backend, "error").inc(failed)
        return rows

    async def reset(self, broken: ModelRunner | None = None) -> None:
        """Replace the model workers (``broken``: only if they are still those; every request
        that was waiting on them fails, and only the first replaces them); backends load again
        on next use."""
        async with self._lock:
            if broken is not None and broken is not self.runner:
                return
            replaced = ModelWorkerDied("the model workers are being replaced")
            for batcher in self.batchers.values():
                await batcher.stop(replaced)  # its requests: 503, like those of the dead worker
            self.batchers.clear()
            self.infos.clear()
            await self.runner.close(wait=False)
            self.runner = self._new_runner()
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
        await self.runner.close(wait=True)  # join the model processes: none outlives the server
