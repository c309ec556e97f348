"""Micro-batching: concurrent requests share one parser call (bounded wait, bounded size).

Parsing one sentence per ``nlp.pipe`` call wastes most of spaCy's batch throughput. Requests put
their sentences on a queue; one collector task takes what arrives within ``max_wait`` of the first
item (up to ``max_size`` sentences) and runs the batch in a single executor thread, off the event
loop. While a batch parses, the next one fills up, so batch size grows with load by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class _Pending(Generic[T, R]):
    items: list[T]
    future: asyncio.Future[list[R]] = field(repr=False)


class MicroBatcher(Generic[T, R]):
    """Runs ``fn(items) -> results`` (same length, same order) on micro-batches of requests.

    Args:
        fn: the batch function (blocking; runs in ``executor``).
        executor: where ``fn`` runs; a single thread keeps one model call at a time.
        max_size: most sentences per call (a larger request runs alone, whole).
        max_wait: seconds to wait for more requests after the first one arrives.
        on_batch: called with each batch's size (metrics).
        concurrency: batches in flight at once (one per model worker).
    """

    def __init__(
        self,
        fn: Callable[[list[T]], Sequence[R]],
        executor: Executor,
        max_size: int = 256,
        max_wait: float = 0.004,
        on_batch: Callable[[int], None] | None = None,
        concurrency: int = 1,
    ) -> None:
        self.fn = fn
        self.executor = executor
        self.max_size = max_size
        self.max_wait = max_wait
        self.on_batch = on_batch
        self._queue: asyncio.Queue[_Pending[T, R]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.concurrency = concurrency
        self._slots: asyncio.Semaphore | None = None
        self._running: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Start the collector on the running loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._collect())

    async def stop(self) -> None:
        """Stop the collector; pending requests get ``CancelledError``."""
        for task in list(self._running):
            task.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        while not self._queue.empty():
            self._queue.get_nowait().future.cancel()

    async def submit(self, items: list[T]) -> list[R]:
        """Results for ``items``, computed in some micro-batch."""
        self.start()
        future: asyncio.Future[list[R]] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(items, future))
        return await future

    async def _collect(self) -> None:
        loop = asyncio.get_running_loop()
        self._slots = asyncio.Semaphore(self.concurrency)
        carry: _Pending[T, R] | None = None
        while True:
            first = carry if carry is not None else await self._queue.get()
            carry = None
            await self._slots.acquire()  # a model worker is free: collect its batch now
            batch = [first]
            size = len(first.items)
            deadline = loop.time() + self.max_wait
            while size < self.max_size:
                try:
                    if self._queue.empty():
                        timeout = deadline - loop.time()
                        if timeout <= 0:
                            break
                        nxt = await asyncio.wait_for(self._queue.get(), timeout)
                    else:
                        nxt = self._queue.get_nowait()
                except TimeoutError:
                    break
                if size + len(nxt.items) > self.max_size:
                    carry = nxt  # starts the next batch; never split a request
                    break
                batch.append(nxt)
                size += len(nxt.items)
            task = loop.create_task(self._run(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _run(self, batch: list[_Pending[T, R]]) -> None:
        loop = asyncio.get_running_loop()
        try:
            live = [p for p in batch if not p.future.done()]
            flat = [item for p in live for item in p.items]
            if self.on_batch is not None:
                self.on_batch(len(flat))
            try:
                results = await loop.run_in_executor(self.executor, self.fn, flat)
            except Exception as exc:
                for p in live:
                    if not p.future.done():
                        p.future.set_exception(exc)
                return
            start = 0
            for p in live:
                part = list(results[start : start + len(p.items)])
                start += len(p.items)
                if not p.future.done():
                    p.future.set_result(part)
        finally:
            assert self._slots is not None
            self._slots.release()
