"""Where model calls run: child processes reached through asyncio sockets, or one thread.

``concurrent.futures.ProcessPoolExecutor`` moves each call through two helper threads (a feeder
that pickles, a manager that unpickles and wakes the loop). Under 16 concurrent clients on 2 cores
those threads and the event loop took turns at the GIL: py-spy put 13% of the HTTP process in
``submit`` waiting to write its wake-up byte. :class:`ProcessRunner` has no threads: each model
process owns one end of a socket pair, and the event loop writes calls to it and reads results
from it like any other connection.

Semantics kept from the executor, each tested (``tests/parser/test_runners.py``):

- a dead model process fails its calls at once with :class:`ModelWorkerDied` (a
  ``BrokenProcessPool``), and the runner refuses new calls: the owner replaces it;
- a model process exits when the server dies, even by SIGKILL (the socket closes: EOF), and
  ignores the terminal's Ctrl-C (the server shuts it down);
- exceptions raised by the called function reach the caller; one that cannot be pickled arrives
  as a ``RuntimeError`` naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import pickle
import signal
import socket
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing import get_context
from multiprocessing.process import BaseProcess
from typing import Any, Protocol

_HEADER = struct.Struct("!QQ")  # call id, payload length
_PICKLE = pickle.HIGHEST_PROTOCOL


class ModelWorkerDied(BrokenProcessPool):
    """A model process exited (killed, out of memory, crashed) while calls were pending."""


class ModelRunner(Protocol):
    """Runs picklable calls on the model workers, from the event loop."""

    workers: int

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on the least busy worker."""

    async def call_all(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """``fn(*args)`` once on every worker (loading a model into each)."""

    async def close(self, wait: bool = True) -> None:
        """Stop the workers; with ``wait``, until they have exited."""


class ThreadRunner:
    """One model thread beside the event loop (``PARSER_MODEL_PROCESS=false``): shares the GIL."""

    workers = 1

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parser-model")

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def call_all(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        return [await self.call(fn, *args)]

    async def close(self, wait: bool = True) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


# ---------------------------------------------------------------------------- the model process


def _recv_exactly(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise EOFError
        got += k
    return buf


def _encode_outcome(call_id: int, ok: bool, value: Any) -> bytes:
    """A result frame; a result or exception that cannot be pickled becomes a RuntimeError."""
    try:
        return pickle.dumps((ok, value), _PICKLE)
    except Exception as exc:
        what = "result" if ok else f"exception {type(value).__name__}: {value}"
        return pickle.dumps(
            (False, RuntimeError(f"model call {call_id}: {what} ({exc})")), _PICKLE
        )


def _serve(sock: socket.socket) -> None:
    """The model process: answer calls in arrival order until the server's end closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server stops us, not the terminal
    sock.setblocking(True)
    while True:
        try:
            call_id, size = _HEADER.unpack(_recv_exactly(sock, _HEADER.size))
            payload = _recv_exactly(sock, size)
        except (EOFError, OSError):
            os._exit(0)  # the server closed us or died: nothing left to answer
        try:
            fn, args = pickle.loads(payload)
            outcome = _encode_outcome(call_id, True, fn(*args))
        except BaseException as exc:
            outcome = _encode_outcome(call_id, False, exc)
        try:
            sock.sendall(_HEADER.pack(call_id, len(outcome)))
            sock.sendall(outcome)
        except OSError:
            os._exit(0)


# ---------------------------------------------------------------------------- the server's side


@dataclass(eq=False)
class _Worker:
    process: BaseProcess
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    pending: dict[int, asyncio.Future[Any]] = field(default_factory=dict)
    listener: asyncio.Task[None] | None = None


class ProcessRunner:
    """``workers`` spawned model processes, each fed through its own socket by the event loop.

    Calls go to the worker with the fewest pending calls; a worker answers its calls in order.
    Processes start on the first call (inside the running loop). ``async with`` closes them.
    """

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._ctx = get_context("spawn")
        self._procs: list[_Worker] = []
        self._ids = itertools.count()
        self._start: asyncio.Task[None] | None = None
        self.broken: str | None = None  # why calls are refused, once a worker died or we closed

    @property
    def pids(self) -> list[int | None]:
        return [w.process.pid for w in self._procs]

    async def __aenter__(self) -> ProcessRunner:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def _started(self) -> list[_Worker]:
        if self._start is None:
            self._start = asyncio.get_running_loop().create_task(self._spawn())
        await asyncio.shield(self._start)
        if self.broken is not None:
            raise ModelWorkerDied(self.broken)
        return self._procs

    async def _spawn(self) -> None:
        for _ in range(self.workers):
            ours, theirs = socket.socketpair()
            process = self._ctx.Process(
                target=_serve, args=(theirs,), name="parser-model", daemon=True
            )
            process.start()
            theirs.close()  # only the child holds its end: its exit is our EOF
            reader, writer = await asyncio.open_connection(sock=ours, limit=2**20)
            worker = _Worker(process, reader, writer)
            worker.listener = asyncio.get_running_loop().create_task(self._listen(worker))
            self._procs.append(worker)

    async def _listen(self, worker: _Worker) -> None:
        """Deliver ``worker``'s results; on EOF it died: fail its calls, refuse new ones."""
        try:
            while True:
                call_id, size = _HEADER.unpack(await worker.reader.readexactly(_HEADER.size))
                payload = await worker.reader.readexactly(size)
                future = worker.pending.pop(call_id, None)
                if future is None or future.done():
                    continue  # its caller gave up (cancelled)
                try:
                    ok, value = pickle.loads(payload)
                except Exception as exc:
                    ok, value = (
                        False,
                        RuntimeError(f"model call result could not be read: {exc!r}"),
                    )
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        if self.broken is None:
            self.broken = f"model process {worker.process.pid} exited"  # refuse calls at once
            code = await asyncio.to_thread(_join, worker.process, 1.0, False)
            self.broken = f"model process {worker.process.pid} exited (code {code})"
        self._fail(worker, ModelWorkerDied(self.broken))

    @staticmethod
    def _fail(worker: _Worker, exc: BaseException) -> None:
        pending, worker.pending = worker.pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(exc)

    async def _send(self, worker: _Worker, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        if self.broken is not None:
            raise ModelWorkerDied(self.broken)
        payload = pickle.dumps((fn, args), _PICKLE)
        call_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        worker.pending[call_id] = future
        try:
            try:
                worker.writer.write(_HEADER.pack(call_id, len(payload)))
                worker.writer.write(payload)
                await worker.writer.drain()
            except ConnectionError as exc:  # it died before reading the call
                why = self.broken or f"model process {worker.process.pid} closed its socket"
                raise ModelWorkerDied(why) from exc
            return await future
        finally:
            worker.pending.pop(call_id, None)

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        workers = await self._started()
        return await self._send(min(workers, key=lambda w: len(w.pending)), fn, args)

    async def call_all(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        workers = await self._started()
        return list(await asyncio.gather(*(self._send(w, fn, args) for w in workers)))

    async def close(self, wait: bool = True) -> None:
        """Close the sockets (each process exits after its current call); ``wait``: join them,
        killing one that has not exited within 10 s."""
        if self.broken is None:
            self.broken = "the model processes were shut down"
        if self._start is not None:
            with contextlib.suppress(Exception):
                await self._start
        for worker in self._procs:
            if worker.listener is not None:
                worker.listener.cancel()
            worker.writer.close()
            self._fail(worker, ModelWorkerDied(self.broken))
        joins = asyncio.gather(*(asyncio.to_thread(_join, w.process) for w in self._procs))
        if wait:
            await joins
        else:  # reap them in the background (no zombies), without holding up the caller
            _REAPERS.add(joins)
            joins.add_done_callback(_REAPERS.discard)


_REAPERS: set[asyncio.Future[Any]] = set()  # joins in progress (a reference keeps them alive)


def _join(process: BaseProcess, timeout: float = 10.0, kill: bool = True) -> int | None:
    """Wait up to ``timeout`` for ``process`` to exit (then kill it, with ``kill``); its exit
    code."""
    process.join(timeout)
    if process.exitcode is None and kill:
        process.kill()
        process.join()
    return process.exitcode
