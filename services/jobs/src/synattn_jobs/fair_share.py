"""Fair share in the job store: per-user quotas, the workers' slots and devices, and the
choice of the next job to release (``release_next``), fewest running processes first.

``FairShareQueries`` is a part of ``JobStore`` (its base class): the queries the fair
dispatcher (``synattn_jobs.dispatch``), the workers' registration and the queue's order use.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import (
    func,
    select,
    update,
)
from sqlalchemy.orm import Session

from synattn_jobs.store_tables import (
    Job,
    Lock,
    Quota,
    UserStart,
    WorkerSlot,
    _owned_by,
    _rowcount,
)


def fair_order(rows: Sequence[Any], busy: dict[str, int], last: dict[str, float]) -> list[str]:
    """The order the dispatcher would release waiting jobs in, if no job finished meanwhile:
    ``rows`` are (id, user, priority, created_at[, processes]) sorted by priority (descending)
    and age; ``busy`` each user's processes in running or released jobs, ``last`` their last
    start. A job counts its processes (default 1) against its user's share."""
    import heapq

    per_user: dict[str, list[Any]] = {}
    for row in rows:
        per_user.setdefault(row[1], []).append(row)
    oldest: dict[str, list[float]] = {}  # per user: the oldest creation time from k on
    for u, js in per_user.items():
        suffix, m = [0.0] * len(js), float("inf")
        for k in range(len(js) - 1, -1, -1):
            m = min(m, float(js[k][3]))
            suffix[k] = m
        oldest[u] = suffix
    heap = [(busy.get(u, 0), last.get(u, -1.0), oldest[u][0], u, 0) for u in per_user]
    heapq.heapify(heap)
    out: list[str] = []
    tick = max([*last.values(), 0.0]) + 1.0
    while heap:
        n, _, _, user, k = heapq.heappop(heap)
        jobs = per_user[user]
        out.append(jobs[k][0])
        if k + 1 < len(jobs):
            size = int(jobs[k][4]) if len(jobs[k]) > 4 else 1
            heapq.heappush(heap, (n + size, tick, oldest[user][k + 1], user, k + 1))
            tick += 1.0
    return out


def _best_fit(free: dict[str, int], devices: dict[str, int], processes: int) -> str | None:
    """The worker with a free slot whose devices fit ``processes`` most tightly (None: no
    free slot fits): big workers stay free for big jobs."""
    fits = [w for w, k in free.items() if k > 0 and devices[w] >= processes]
    return min(fits, key=lambda w: (devices[w], w)) if fits else None


class FairShareQueries:
    """The fair-share half of ``JobStore``; ``session`` is the store's."""

    def session(self) -> AbstractContextManager[Session]:  # provided by JobStore
        raise NotImplementedError

    # ------------------------------------------------------------ fair share
    def _lock(self, s: Session, name: str) -> None:
        s.execute(update(Lock).where(Lock.name == name).values(at=time.time()))

    def _limit(self, s: Session, owner: str | None, which: str, default: int | None) -> int | None:
        row = s.get(Quota, owner or "")
        value = None if row is None else getattr(row, which)
        return default if value is None else int(value)

    def set_quota(self, user: str, max_queued: int | None, max_running: int | None) -> Quota:
        """An admin's override for one user (None: the setting's default)."""
        with self.session() as s:
            row = s.get(Quota, user)
            if row is None:
                row = Quota(user=user)
                s.add(row)
            row.max_queued, row.max_running = max_queued, max_running
            return row

    def gate_releases(self, users: Sequence[str], job_id: str | None) -> None:
        """While ``job_id`` is set, the dispatcher releases that job alone of ``users``' waiting
        jobs (none of theirs, for a user it is not of); None lifts the gate. A user's limits
        stay as they are, and ``set_quota`` leaves the gate as it is."""
        with self.session() as s:
            for user in users:
                row = s.get(Quota, user)
                if row is None:
                    row = Quota(user=user)
                    s.add(row)
                row.release_only = job_id

    def quotas(self) -> Sequence[Quota]:
        with self.session() as s:
            return s.scalars(select(Quota).order_by(Quota.user)).all()

    def register_worker(self, name: str, queues: str, slots: int, devices: int = 1) -> None:
        """A worker's beat: it is alive and serves ``queues`` with ``slots`` task slots, each
        running a job of up to ``devices`` processes."""
        now = time.time()
        with self.session() as s:
            row = s.get(WorkerSlot, name)
            if row is None:
                s.add(WorkerSlot(name=name, queues=queues, slots=slots, devices=devices,
                                 beat_at=now))  # fmt: skip
            else:
                row.queues, row.slots, row.devices, row.beat_at = queues, slots, devices, now

    def live_devices(self, kind: str, live_after_s: float) -> int | None:
        """The most devices a live worker of ``kind``'s queue owns (beat within
        ``live_after_s``): the largest job it can take; None while no such worker is live."""
        with self.session() as s:
            most = s.scalar(
                select(func.max(WorkerSlot.devices)).where(
                    WorkerSlot.beat_at >= time.time() - live_after_s,
                    WorkerSlot.queues.like(f"%{kind}%"),
                )
            )
        return None if most is None else int(most)

    def processes(self, job_ids: Sequence[str]) -> dict[str, int]:
        """Each job's processes (the broker queue it goes to depends on them)."""
        if not job_ids:
            return {}
        with self.session() as s:
            return {
                j: int(n or 1)
                for j, n in s.execute(
                    select(Job.id, Job.processes).where(Job.id.in_(list(job_ids)))
                )
            }

    def running_limit(self, owner: str | None, default: int | None) -> int | None:
        """The processes ``owner``'s running jobs may have (an admin's override, else
        ``default``); None: no limit."""
        with self.session() as s:
            return self._limit(s, owner, "max_running", default)

    def unregister_worker(self, name: str) -> None:
        with self.session() as s:
            row = s.get(WorkerSlot, name)
            if row is not None:
                s.delete(row)

    def release_next(
        self, kind: str, ahead: int, live_after_s: float, max_running: int | None
    ) -> list[str]:
        """Mark the next queued jobs of ``kind`` released to the broker, as many as live
        workers have free slots (plus ``ahead``), and return their ids, in order.

        Fair share counts processes: the next job belongs to the user with the fewest
        processes in running (or released) jobs of this kind, ties to the user whose last job
        started longest ago, then to the oldest waiting job; within a user, the highest
        priority first, then the oldest, among the jobs that fit now. A job of N processes
        needs a free slot of a worker that owns N devices or more. Which slots are free is
        found by placing the jobs that hold one: a running job on its worker, a released one
        on the smallest worker it fits (largest jobs first). A smaller job may take a slot a
        larger one cannot use (backfill), so a 2-process job waits for a 2-device worker
        without holding up the 1-device ones. A user whose running limit (in processes) the
        job would pass is skipped, and a user whose releases are gated to one job
        (``gate_releases``) gets that job or none. One dispatcher at a time (a lock row)."""
        now = time.time()
        waiting_q = (Job.kind == kind, Job.state == "queued", Job.released_at.is_(None),
                     Job.cancel_requested.is_(False))  # fmt: skip
        with self.session() as s:
            self._lock(s, "dispatch")
            workers = s.execute(
                select(WorkerSlot.name, WorkerSlot.slots, WorkerSlot.devices).where(
                    WorkerSlot.beat_at >= now - live_after_s,
                    WorkerSlot.queues.like(f"%{kind}%"),
                )
            ).all()
            free = {name: int(slots or 0) for name, slots, _ in workers}
            devices = {name: int(d or 1) for name, _, d in workers}
            spare = ahead  # releases beyond the free slots
            busy: dict[str, int] = {}
            unplaced: list[int] = []
            for owner, n, state, worker in s.execute(
                select(Job.owner, Job.processes, Job.state, Job.worker).where(*self._held(kind))
            ):
                busy[owner or ""] = busy.get(owner or "", 0) + int(n or 1)
                if state == "running" and worker in free:
                    free[worker] = max(free[worker] - 1, 0)
                else:  # released, not yet taken (or its worker is gone): somewhere it fits
                    unplaced.append(int(n or 1))
            for n in sorted(unplaced, reverse=True):
                w = _best_fit(free, devices, n)
                if w is None:
                    spare -= 1
                else:
                    free[w] -= 1
            spare = max(spare, 0)
            if not spare and not any(free.values()):
                return []
            waiting: dict[str, float] = {
                u or "": float(t)
                for u, t in s.execute(
                    select(Job.owner, func.min(Job.created_at))
                    .where(*waiting_q)
                    .group_by(Job.owner)
                )
            }
            if not waiting:
                return []
            last = self._last_starts(s, kind)
            quotas = s.scalars(select(Quota)).all()
            limits = {q.user: q.max_running for q in quotas}
            gates = {q.user: q.release_only for q in quotas if q.release_only is not None}
            largest = max(devices.values(), default=0)
            picked: list[str] = []
            while waiting:
                room = (
                    largest
                    if spare
                    else max((devices[w] for w, k in free.items() if k > 0), default=0)
                )  # the most processes a job released now can have
                fits: dict[str, int] = {}
                for u in waiting:
                    lim = limits.get(u) if limits.get(u) is not None else max_running
                    cap = room if lim is None else min(room, lim - busy.get(u, 0))
                    if cap >= 1:
                        fits[u] = cap
                if not fits:
                    break
                user = min(fits, key=lambda u: (busy.get(u, 0), last.get(u, -1.0), waiting[u]))
                gate = (Job.id == gates[user],) if user in gates else ()
                job = s.scalars(
                    select(Job).where(*waiting_q, *gate, _owned_by(user or None),
                                      func.coalesce(Job.processes, 1) <= fits[user])
                    .order_by(Job.priority.desc(), Job.created_at).limit(1)
                ).first()  # fmt: skip
                if job is None:  # nothing more of this user's is waiting, or fits now
                    del waiting[user]
                    continue
                n = int(job.processes or 1)
                w = _best_fit(free, devices, n)
                if w is None:
                    spare -= 1
                else:
                    free[w] -= 1
                job.released_at = now
                job.release_count = (job.release_count or 0) + 1
                picked.append(job.id)
                s.flush()
                busy[user] = busy.get(user, 0) + n
                last[user] = now
                if not spare and not any(free.values()):
                    break
            return picked

    @staticmethod
    def _held(kind: str) -> tuple[Any, ...]:
        """Jobs of ``kind`` that hold a worker slot: running, or released to the broker."""
        return (
            Job.kind == kind,
            (Job.state == "running") | ((Job.state == "queued") & Job.released_at.is_not(None)),
        )

    @staticmethod
    def _busy(s: Session, kind: str) -> dict[str, int]:
        """Per user: processes of the running jobs of ``kind`` and of those released to its
        broker queue."""
        return {
            u or "": int(n or 0)
            for u, n in s.execute(
                select(Job.owner, func.sum(func.coalesce(Job.processes, 1)))
                .where(*FairShareQueries._held(kind))
                .group_by(Job.owner)
            )
        }

    @staticmethod
    def _last_starts(s: Session, kind: str) -> dict[str, float]:
        return {
            r.user: r.last_start
            for r in s.scalars(select(UserStart).where(UserStart.kind == kind))
        }

    def unrelease_stale(self, timeout_s: float) -> int:
        """Released jobs no worker took within ``timeout_s`` (a release whose task was never
        sent: the dispatcher died between the two) go back to waiting in the store."""
        with self.session() as s:
            return _rowcount(
                s.execute(
                    update(Job)
                    .where(Job.state == "queued", Job.released_at < time.time() - timeout_s)
                    .values(released_at=None)
                )
            )

    def queue(
        self, kinds: Sequence[str] = ("parse", "train"), fifo: bool = False
    ) -> dict[str, Any]:
        """Every queued job's position in the fair order (the released ones first, in release
        order, then the waiting ones as the dispatcher would pick them now; ``fifo``: the
        order of submission), and every user's counts of queued and running jobs."""
        who = func.coalesce(Job.owner, "")
        with self.session() as s:
            counts: dict[str, dict[str, int]] = {}
            for u, state, n in s.execute(
                select(who, Job.state, func.count())
                .where(Job.state.in_(("queued", "running")))
                .group_by(who, Job.state)
            ):
                counts.setdefault(u, {"queued": 0, "running": 0})[state] = int(n)
            positions: dict[str, int] = {}
            for kind in kinds:
                rows = s.execute(
                    select(Job.id, func.coalesce(Job.owner, ""), Job.priority, Job.created_at,
                           func.coalesce(Job.processes, 1))
                    .where(Job.kind == kind, Job.state == "queued", Job.released_at.is_(None),
                           Job.cancel_requested.is_(False))
                    .order_by(Job.priority.desc(), Job.created_at)
                ).all()  # fmt: skip
                released: Sequence[str] = []
                if fifo:  # every queued job is in the broker already, in submission order
                    order = [r[0] for r in sorted(rows, key=lambda r: r[3])]
                else:
                    released = s.scalars(
                        select(Job.id).where(Job.kind == kind, Job.state == "queued",
                                             Job.released_at.is_not(None))
                        .order_by(Job.released_at, Job.created_at)
                    ).all()  # fmt: skip
                    order = fair_order(rows, self._busy(s, kind), self._last_starts(s, kind))
                for k, job_id in enumerate(released):
                    positions[job_id] = k + 1
                for k, job_id in enumerate(order):
                    positions[job_id] = len(released) + k + 1
        return {"counts": counts, "positions": positions}
