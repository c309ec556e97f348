"""Training batches built ahead, in worker processes, while the device computes.

Why: on the first GPU run (an H200, Transformer-base at 16k target tokens per update, see
``results/gpu/``) every syntax variant ran at 0.2-0.45x of vanilla. Their batches carry syntax
tensors built on the CPU (dependency masks, SLR biases, phrase positions: 120-330 ms per such
batch on one core here), and ``Trainer.step`` built them inline, so the GPU waited on that
Python and numpy for most of each update. Built in ``workers`` processes a few batches ahead,
that cost overlaps the device's work instead of adding to it.

The batches are the same tensors ``make_batch`` gives inline, in the same order (tested), so a
run's numbers do not depend on the setting; it is a property of the machine, like the number
of threads, and lives outside the training configuration. The pool is forked once per
``Trainer.train`` (its processes inherit the loaded corpus instead of receiving it), and stays
up across epochs.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from types import TracebackType

import torch

from synattn_shared.requests import FeatureRequest
from synattn_trainer.data import Batch, Corpus, make_batch

# what a forked worker builds from (set in the parent just before the fork: inherited, never
# pickled; a worker process serves one prefetcher)
_CORPUS: Corpus | None = None
_REQUESTS: tuple[FeatureRequest, ...] = ()


def _init_worker() -> None:
    torch.set_num_threads(1)  # each worker is one core's worth of batch building


def _build(index: list[int]) -> Batch:
    assert _CORPUS is not None, "prefetch worker started without a corpus"
    return make_batch(_CORPUS, index, _REQUESTS)


class BatchPrefetcher:
    """``workers`` forked processes that build the batches of a sequence of index lists, up to
    ``ahead`` of them in flight, delivered in order. Use as a context manager (or ``close``)."""

    def __init__(
        self,
        corpus: Corpus,
        requests: Sequence[FeatureRequest],
        workers: int,
        ahead: int | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"a prefetcher needs at least one worker process, not {workers}")
        global _CORPUS, _REQUESTS
        self.ahead = ahead if ahead is not None else 2 * workers
        if self.ahead < 1:
            raise ValueError(f"ahead must be at least 1, not {self.ahead}")
        _CORPUS, _REQUESTS = corpus, tuple(requests)
        try:
            self._pool = ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("fork"),
                initializer=_init_worker,
            )  # fmt: skip
            # start them now, while the globals hold this corpus
            for f in [self._pool.submit(int, 0) for _ in range(workers)]:
                f.result()
        finally:
            _CORPUS, _REQUESTS = None, ()

    def batches(self, groups: Sequence[list[int]]) -> Iterator[Batch]:
        """The batch of every index list in ``groups``, in order; a worker's error is raised
        here, at the batch that failed. Leaving the loop early drops what was built ahead."""
        pending: deque[Future[Batch]] = deque()
        queued = 0
        try:
            while queued < len(groups) or pending:
                while queued < len(groups) and len(pending) < self.ahead:
                    pending.append(self._pool.submit(_build, list(groups[queued])))
                    queued += 1
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> BatchPrefetcher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def read_ahead(
    groups: Iterable[list[int]], touch: Callable[[list[int]], object], depth: int = 2
) -> Iterator[list[int]]:
    """``groups`` unchanged and in order, while one background thread calls ``touch`` on the
    next ``depth`` of them (``MappedCorpus.read_ahead``: their rows' pages read from disk while
    this batch trains). For training in the trainer's own process, where no prefetch worker
    builds the batches. A group is yielded once its ``touch`` has returned (waiting costs no
    more than reading those pages here would), and a failure in ``touch`` is raised here,
    before its group. Leaving the loop early stops the thread after the group it is on."""
    if depth < 1:
        raise ValueError(f"depth must be at least 1, not {depth}")
    pool = ThreadPoolExecutor(1, thread_name_prefix="synattn-read-ahead")
    pending: deque[tuple[list[int], Future[object]]] = deque()
    source = iter(groups)
    try:
        while True:
            while len(pending) < depth and (group := next(source, None)) is not None:
                pending.append((group, pool.submit(touch, group)))
            if not pending:
                return
            group, done = pending.popleft()
            done.result()  # pages still being read are read once, by the thread; its error
            yield group
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
