"""Micro-batching: concurrent submits share calls, requests are never split, errors reach all."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from synattn_parser.batcher import MicroBatcher


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_concurrent_requests_share_one_call_and_keep_their_order() -> None:
    calls: list[list[int]] = []

    def fn(items: list[int]) -> list[int]:
        calls.append(list(items))
        time.sleep(0.02)
        return [x * 10 for x in items]

    async def main() -> list[list[int]]:
        b = MicroBatcher(fn, ThreadPoolExecutor(1), max_size=100, max_wait=0.05)
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
            fn, ThreadPoolExecutor(1), max_size=5, max_wait=0.05, on_batch=sizes.append
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
        b = MicroBatcher(fn, ThreadPoolExecutor(1), max_size=10, max_wait=0.02)
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
        b = MicroBatcher(fn, ThreadPoolExecutor(1), max_size=2, max_wait=0)
        await asyncio.gather(*(b.submit([k]) for k in range(10)))
        await b.stop()
        return threading.get_ident()

    loop_thread = run(main())
    assert len(threads) == 1 and loop_thread not in threads


@pytest.mark.parametrize("wait", [0.0, 0.01])
def test_a_lone_request_is_not_held_back_longer_than_max_wait(wait: float) -> None:
    async def main() -> float:
        b = MicroBatcher(lambda xs: xs, ThreadPoolExecutor(1), max_size=64, max_wait=wait)
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
        b = MicroBatcher(fn, ThreadPoolExecutor(2), max_size=2, max_wait=0, concurrency=2)
        out = await asyncio.gather(*(b.submit([k]) for k in range(8)))
        await b.stop()
        return out

    assert run(main()) == [[k] for k in range(8)]
    assert peak == 2
