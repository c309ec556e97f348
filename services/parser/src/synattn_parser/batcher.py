"""Micro-batching: concurrent requests share one parser call (bounded wait, bounded size).

Parsing one sentence per ``nlp.pipe`` call wastes most of spaCy's batch throughput. Requests put
their sentences on a queue; one collector task takes what arrives within ``max_wait`` of the first
item (up to ``max_size`` sentences) and hands the batch to the model workers (``run``). While
a batch parses, the next one fills up, so batch size grows with load by itself.

With more batches in flight than model workers (a model process with a batch queued in front of
it), two rules keep the model busy on batches as large as the load allows:

- a batch takes at most its share of the outstanding sentences (outstanding / batches in flight).
  Otherwise every client ends up in one batch, and the model idles while that batch's replies
  travel and the next requests arrive; split in groups, one group's round trip overlaps the other
  group's parse.
- past ``max_wait``, a batch is sent only when a worker is free to take it; while every worker is
  busy it keeps growing (sending it earlier would only make it wait, smaller, in a worker's queue).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def in_executor(
    fn: Callable[[list[T]], Sequence[R]], executor: Executor
) -> Callable[[list[T]], Awaitable[Sequence[R]]]:
    """``fn`` (blocking) as a batch function that runs in ``executor``."""

    async def run(items: list[T]) -> Sequence[R]:
        return await asyncio.get_running_loop().run_in_executor(executor, fn, items)

    return run


@dataclass
class _Pending(Generic[T, R]):
    items: list[T]
    future: asyncio.Future[list[R]] = field(repr=False)


class MicroBatcher(Generic[T, R]):
    """Runs ``await run(items) -> results`` (same length, same order) on micro-batches.

    Args:
        run: the batch function, off the event loop (:mod:`synattn_parser.runners`; for a
            blocking function and an executor, :func:`in_executor`).
        max_size: most sentences per call (a larger request runs alone, whole).
        max_wait: seconds to wait for more requests after the first one arrives.
        on_batch: called with each batch's size (metrics).
        concurrency: batches in flight at once (sent to ``run``, not yet answered).
        workers: batches ``run`` computes at once (its model workers); default
            ``concurrency``. With ``concurrency > workers`` the module docstring's rules apply.
    """

    def __init__(
        self,
        run: Callable[[list[T]], Awaitable[Sequence[R]]],
        max_size: int = 256,
        max_wait: float = 0.004,
        on_batch: Callable[[int], None] | None = None,
        concurrency: int = 1,
        workers: int | None = None,
    ) -> None:
        self.run = run
        self.max_size = max_size
        self.max_wait = max_wait
        self.on_batch = on_batch
        self.concurrency = concurrency
        self.workers = min(workers or concurrency, concurrency)
        self._queue: asyncio.Queue[_Pending[T, R]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._slots: asyncio.Semaphore | None = None
        self._wake = asyncio.Event()  # a request arrived or a batch finished
        self._running: set[asyncio.Task[None]] = set()
        self._outstanding = 0  # sentences submitted and not yet answered
        self._waiting: set[asyncio.Future[list[R]]] = set()  # their futures

    def share(self) -> int:
        """Most sentences the next batch may take: its share of the outstanding work."""
        return min(self.max_size, max(1, -(-self._outstanding // self.concurrency)))

    def start(self) -> None:
        """Start the collector on the running loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._collect())

    async def stop(self, reason: BaseException | None = None) -> None:
        """Stop the collector and the batches in flight; every request not yet answered (queued,
        being collected or in flight) fails with ``reason`` (default: it is cancelled)."""
        for task in list(self._running):
            task.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        while not self._queue.empty():
            self._queue.get_nowait()
        for future in self._waiting:
            if not future.done():
                if reason is None:
                    future.cancel()
                else:
                    future.set_exception(reason)

    async def submit(self, items: list[T]) -> list[R]:
        """Results for ``items``, computed in some micro-batch."""
        self.start()
        future: asyncio.Future[list[R]] = asyncio.get_running_loop().create_future()
        self._outstanding += len(items)
        self._waiting.add(future)
        try:
            self._queue.put_nowait(_Pending(items, future))
            self._wake.set()
            return await future
        finally:
            self._outstanding -= len(items)
            self._waiting.discard(future)

    async def _collect(self) -> None:
        loop = asyncio.get_running_loop()
        wake = self._wake
        self._slots = asyncio.Semaphore(self.concurrency)
        carry: _Pending[T, R] | None = None
        while True:
            first = carry if carry is not None else await self._queue.get()
            carry = None
            await self._slots.acquire()  # a batch may go in flight: collect it now
            batch = [first]
            size = len(first.items)
            deadline = loop.time() + self.max_wait
            while size < (limit := self.share()):
                if not self._queue.empty():
                    nxt = self._queue.get_nowait()
                    if size + len(nxt.items) > limit:
                        carry = nxt  # starts the next batch; never split a request
                        break
                    batch.append(nxt)
                    size += len(nxt.items)
                    continue
                now = loop.time()
                busy = len(self._running)
                if now >= deadline and busy < self.workers:
                    break  # a worker would idle: send what we have
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), deadline - now if now < deadline else None)
            task = loop.create_task(self._run(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _run(self, batch: list[_Pending[T, R]]) -> None:
        try:
            live = [p for p in batch if not p.future.done()]
            flat = [item for p in live for item in p.items]
            if self.on_batch is not None:
                self.on_batch(len(flat))
            try:
                results = await self.run(flat)
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
            # before the wake-up: the collector counts busy workers when it wakes (the done
            # callback, which runs later, covers a task cancelled before it started)
            self._running.discard(asyncio.current_task())
            self._slots.release()
            self._wake.set()
