"""Model runners: real spawned processes on socket pairs; deaths, exceptions, shutdown, orphans."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from synattn_parser.runners import ModelWorkerDied, ProcessRunner, ThreadRunner

ROOT = Path(__file__).resolve().parents[2]


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


# called in the model processes: module-level, so they pickle by reference
def pid_after(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def echo(value: Any) -> Any:
    return value


def fail(message: str) -> None:
    raise ValueError(message)


def unpicklable_result() -> Any:
    return lambda: None


class NeedsTwoArgs(Exception):
    def __init__(self, a: str, b: str) -> None:
        super().__init__(a)  # pickles, but cannot be rebuilt from its args


def raise_needs_two_args() -> None:
    raise NeedsTwoArgs("a", "b")


def test_calls_spread_over_the_workers_and_call_all_reaches_each_once() -> None:
    async def main() -> tuple[list[int], list[int], list[int | None]]:
        async with ProcessRunner(2) as runner:
            everyone = await runner.call_all(pid_after, 0)
            busy = await asyncio.gather(*(runner.call(pid_after, 0.2) for _ in range(4)))
            return everyone, list(busy), runner.pids

    everyone, busy, pids = run(main())
    assert sorted(everyone) == sorted(pids) and len(set(everyone)) == 2
    assert sorted(busy) == sorted(pids * 2)  # the least busy worker takes each call


def test_results_exceptions_and_large_payloads_cross_intact() -> None:
    big = os.urandom(8 << 20)  # far past the socket buffers and the stream's limit

    async def main() -> None:
        async with ProcessRunner(1) as runner:
            assert await runner.call(echo, {"a": [1, 2.5, None]}) == {"a": [1, 2.5, None]}
            assert await runner.call(echo, big) == big
            with pytest.raises(ValueError, match="bad sentence"):
                await runner.call(fail, "bad sentence")
            with pytest.raises(RuntimeError, match="result"):
                await runner.call(unpicklable_result)
            with pytest.raises(RuntimeError, match="could not be read"):
                await runner.call(raise_needs_two_args)
            assert await runner.call(echo, 7) == 7  # the worker survived all of that

    run(main())


def test_a_killed_worker_fails_its_calls_at_once_and_refuses_new_ones() -> None:
    async def main() -> None:
        async with ProcessRunner(1) as runner:
            (pid,) = await runner.call_all(pid_after, 0)
            waiting = asyncio.ensure_future(runner.call(pid_after, 30))
            await asyncio.sleep(0.2)
            t = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(ModelWorkerDied, match=rf"model process {pid} exited \(code -9\)"):
                await waiting
            assert time.monotonic() - t < 5
            with pytest.raises(ModelWorkerDied):
                await runner.call(echo, 1)

    run(main())


def test_a_cancelled_call_leaves_the_worker_in_step() -> None:
    async def main() -> None:
        async with ProcessRunner(1) as runner:
            slow = asyncio.ensure_future(runner.call(pid_after, 0.3))
            await asyncio.sleep(0.05)
            slow.cancel()
            assert await runner.call(echo, "next") == "next"  # not the cancelled call's answer

    run(main())


def test_workers_ignore_ctrl_c_and_close_joins_them() -> None:
    async def main() -> list[int | None]:
        runner = ProcessRunner(2)
        pids = await runner.call_all(pid_after, 0)
        for pid in pids:
            os.kill(pid, signal.SIGINT)  # the terminal's Ctrl-C reaches the process group
        assert sorted(await runner.call_all(pid_after, 0)) == sorted(pids)
        await runner.close(wait=True)
        with pytest.raises(ModelWorkerDied, match="shut down"):
            await runner.call(echo, 1)
        return [w.process.exitcode for w in runner._procs]

    assert run(main()) == [0, 0]


@pytest.mark.parametrize("busy", [False, True])
def test_workers_exit_when_their_server_is_killed(busy: bool) -> None:
    """SIGKILL of the owning process closes its sockets: an idle worker exits at once, a busy one
    when its call ends."""
    script = textwrap.dedent(f"""
        import asyncio, sys
        from tests.parser.test_runners import pid_after
        from synattn_parser.runners import ProcessRunner

        async def main():
            runner = ProcessRunner(2)
            print(*await runner.call_all(pid_after, 0), flush=True)
            if {busy}:
                asyncio.ensure_future(runner.call(pid_after, 2))
                asyncio.ensure_future(runner.call(pid_after, 2))
            await asyncio.sleep(60)

        asyncio.run(main())
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        workers = [psutil.Process(int(pid)) for pid in proc.stdout.readline().split()]
        assert len(workers) == 2
        time.sleep(0.3)
        proc.kill()
        proc.wait(10)
        _, alive = psutil.wait_procs(workers, timeout=10)
        assert not alive
    finally:
        proc.kill()


def test_thread_runner_runs_calls_off_the_loop_in_one_thread() -> None:
    async def main() -> tuple[list[int], int]:
        runner = ThreadRunner()
        try:
            import threading

            idents = await asyncio.gather(*(runner.call(threading.get_ident) for _ in range(5)))
            return list(idents), threading.get_ident()
        finally:
            await runner.close()

    idents, loop_thread = run(main())
    assert len(set(idents)) == 1 and idents[0] != loop_thread
