"""Micro-batching: concurrent submits share calls, requests are never split, errors reach all."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from synattn_parser.batcher import MicroBatcher, in_executor


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_concurrent_requests_share_one_call_and_keep_their_order() -> None:
    calls: list[list[int]] = []

    def fn(items: list[int]) -> list[int]:
        calls.append(list(items))
        time.sleep(0.02)
        return [x * 10 for x in items]

    async def main() -> list[list[int]]:
        b = MicroBatcher(in_executor(fn, ThreadPoolExecutor(1)), max_size=100, max_wait=0.05)
        out = await asyncio.gather(*(b.submit([k, k + 100]) for k in range(20)))
        await b.stop()
        return out

    out = run(main())
    assert out == [[k * 10, (k + 100) * 10] for k in range(20)]
    assert len(calls) < 20 and sum(len(c) for c in calls) == 40


def test_batch_size_is_bounded_and_requests_are_never_split() -> None:
    sizes: list[int] = []

    def fn(items: list[str]) -> list[str]:
        return items

    async def main() -> list[list[str]]:
        b = MicroBatcher(
            in_executor(fn, ThreadPoolExecutor(1)),
            max_size=5,
            max_wait=0.05,
            on_batch=sizes.append,
        )
        reqs = [[f"{k}.{j}" for j in range(3)] for k in range(6)] + [[f"big{j}" for j in range(9)]]
        out = await asyncio.gather(*(b.submit(r) for r in reqs))
        await b.stop()
        return out

    out = run(main())
    assert out[-1] == [f"big{j}" for j in range(9)]  # larger than max_size: runs alone, whole
    assert all(s <= 5 or s == 9 for s in sizes) and sum(sizes) == 27


def test_a_failing_batch_reaches_every_waiting_request() -> None:
    def fn(items: list[int]) -> list[int]:
        raise RuntimeError("model crashed")

    async def main() -> list[object]:
        b = MicroBatcher(in_executor(fn, ThreadPoolExecutor(1)), max_size=10, max_wait=0.02)
        out = await asyncio.gather(*(b.submit([k]) for k in range(3)), return_exceptions=True)
        await b.stop()
        return out

    assert all(isinstance(e, RuntimeError) for e in run(main()))


def test_model_calls_run_off_the_event_loop_in_one_thread() -> None:
    threads: set[int] = set()

    def fn(items: list[int]) -> list[int]:
        threads.add(threading.get_ident())
        return items

    async def main() -> int:
        b = MicroBatcher(in_executor(fn, ThreadPoolExecutor(1)), max_size=2, max_wait=0)
        await asyncio.gather(*(b.submit([k]) for k in range(10)))
        await b.stop()
        return threading.get_ident()

    loop_thread = run(main())
    assert len(threads) == 1 and loop_thread not in threads


@pytest.mark.parametrize("wait", [0.0, 0.01])
def test_a_lone_request_is_not_held_back_longer_than_max_wait(wait: float) -> None:
    async def main() -> float:
        b = MicroBatcher(
            in_executor(lambda xs: xs, ThreadPoolExecutor(1)), max_size=64, max_wait=wait
        )
        t = time.perf_counter()
        await b.submit([1])
        dt = time.perf_counter() - t
        await b.stop()
        return dt

    assert run(main()) < wait + 0.5


def test_concurrency_keeps_several_batches_in_flight() -> None:
    active = 0
    peak = 0
    lock = threading.Lock()

    def fn(items: list[int]) -> list[int]:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.05)
        with lock:
            active -= 1
        return items

    async def main() -> list[list[int]]:
        b = MicroBatcher(
            in_executor(fn, ThreadPoolExecutor(2)), max_size=2, max_wait=0, concurrency=2
        )
        out = await asyncio.gather(*(b.submit([k]) for k in range(8)))
        await b.stop()
        return out

    assert run(main()) == [[k] for k in range(8)]
    assert peak == 2


def test_closed_loop_clients_split_into_one_group_per_batch_in_flight() -> None:
    """16 clients, one sentence each, two batches in flight on one worker: batches of about 8,
    never all 16 in one (the model would idle while that batch's replies travel)."""
    sizes: list[int] = []

    def fn(items: list[int]) -> list[int]:
        time.sleep(0.01)
        return items

    async def client(b: MicroBatcher[int, int], k: int) -> None:
        for _ in range(8):
            assert await b.submit([k]) == [k]

    async def main() -> None:
        b = MicroBatcher(
            in_executor(fn, ThreadPoolExecutor(1)), max_wait=0.002, on_batch=sizes.append,
            concurrency=2, workers=1,
        )  # fmt: skip
        await asyncio.gather(*(client(b, k) for k in range(16)))
        await b.stop()

    run(main())
    assert sum(sizes) == 16 * 8
    assert max(sizes) <= 8
    assert sorted(sizes)[len(sizes) // 2] >= 6  # median: the groups stay whole


def test_a_batch_waiting_for_a_busy_worker_keeps_growing() -> None:
    """Past max_wait, a batch is sent only when the worker can take it: five requests that arrive
    while a long batch parses become one batch, not five."""
    sizes: list[int] = []

    def fn(items: list[int]) -> list[int]:
        time.sleep(0.3 if len(items) == 10 else 0.01)
        return items

    async def main() -> None:
        b = MicroBatcher(
            in_executor(fn, ThreadPoolExecutor(1)), max_wait=0.005, on_batch=sizes.append,
            concurrency=2, workers=1,
        )  # fmt: skip
        first = asyncio.ensure_future(b.submit(list(range(10))))
        await asyncio.sleep(0.05)
        late = []
        for k in range(5):
            late.append(asyncio.ensure_future(b.submit([100 + k])))
            await asyncio.sleep(0.02)  # longer than max_wait
        assert await first == list(range(10))
        assert [await f for f in late] == [[100 + k] for k in range(5)]
        await b.stop()

    run(main())
    assert sizes == [10, 5]


def test_share_is_the_outstanding_work_over_the_batches_in_flight() -> None:
    b: MicroBatcher[int, int] = MicroBatcher(
        in_executor(lambda xs: xs, ThreadPoolExecutor(1)), max_size=6, concurrency=2, workers=1
    )
    assert b.share() == 1  # nothing outstanding: send the first sentence at once
    b._outstanding = 9
    assert b.share() == 5
    b._outstanding = 40
    assert b.share() == 6  # bounded by max_size


def test_stop_fails_every_unanswered_request_with_the_reason() -> None:
    """In flight, being collected behind a busy worker, or queued: on stop each request gets the
    reason (a request left waiting would hang its client)."""

    def fn(items: list[int]) -> list[int]:
        time.sleep(0.3)
        return items

    async def main() -> list[object]:
        b = MicroBatcher(
            in_executor(fn, ThreadPoolExecutor(1)), max_size=2, max_wait=0.001,
            concurrency=2, workers=1,
        )  # fmt: skip
        waiting = [asyncio.ensure_future(b.submit([k])) for k in range(9)]
        await asyncio.sleep(0.1)  # one batch parses, one waits for the worker, the rest queue
        await b.stop(RuntimeError("workers replaced"))
        return await asyncio.gather(*waiting, return_exceptions=True)

    out = run(main())
    assert all(isinstance(e, RuntimeError) and str(e) == "workers replaced" for e in out)
