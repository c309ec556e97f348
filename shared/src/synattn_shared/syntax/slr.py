"""Syntactic local range (SLR), hard and soft (Hou et al. 2022; the gated-SLR paper;
docs/papers/gated-slr.md, "Syntactic local range").

Hard SLR for query ``i`` and key ``j``::

    m_ij = prod_{t=j}^{i-2}   I(d_{i-1} - d_t)    (j <= i-2)
         = prod_{t=i+1}^{j-1} I(d_i - d_t)        (j >= i+2)
         = 1                                      (|i-j| <= 1)

with ``I(x) = 1[x > 0]`` (strict) or ``1[x >= 0]`` (inclusive). Every row is one interval
``[L_i, R_i]``. Soft SLR replaces ``I`` by ``f_tau(x) = sigmoid(2x/tau)`` and is computed
in log space, ``log m = sum of logsigmoid``, so long products never underflow.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

from synattn_shared.defaults import SLR_TAU

SlrTies = Literal["strict", "inclusive"]
SlrMode = Literal["hard", "soft"]

D_BIG = 1000.0  # split value next to </s>, BOS and padding ("SLR at subword level")


def slr_intervals(
    d: npt.ArrayLike, ties: SlrTies = "strict"
) -> tuple[npt.NDArray[np.int16], npt.NDArray[np.int16]]:
    """Interval form of the hard SLR: row ``i`` keeps keys ``L_i <= j <= R_i``.

    ``L_i = 1 + max{t <= i-2 : d_t >= d_{i-1}}`` (0 if none) and
    ``R_i = min{t >= i+1 : d_t >= d_i}`` (n-1 if none); ``inclusive`` uses ``>`` instead.

    Args:
        d: split distances ``[n-1]``.
        ties: ``strict`` (seed eq. 1) or ``inclusive``.

    Returns:
        ``L, R`` as ``int16[n]``.
    """
    dist = np.asarray(d, dtype=np.float64)
    n = dist.shape[0] + 1
    L = np.zeros(n, dtype=np.int16)
    R = np.full(n, n - 1, dtype=np.int16)
    if n <= 2:
        return L, R
    t = np.arange(n - 1)

    def blocks(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.asarray(a >= b if ties == "strict" else a > b)

    # Pre side, rows i = 1..n-1: splits t <= i-2 that block, compared with d_{i-1}.
    rows = np.arange(1, n)
    pre = blocks(dist[None, :], dist[rows - 1, None]) & (t[None, :] <= rows[:, None] - 2)
    last = np.where(pre.any(axis=1), (n - 2) - np.argmax(pre[:, ::-1], axis=1), -1)
    L[1:] = last + 1
    # Post side, rows i = 0..n-2: splits t >= i+1 that block, compared with d_i.
    rows = np.arange(0, n - 1)
    post = blocks(dist[None, :], dist[rows, None]) & (t[None, :] >= rows[:, None] + 1)
    R[:-1] = np.where(post.any(axis=1), np.argmax(post, axis=1), n - 1)
    return L, R


def slr_hard_mask(d: npt.ArrayLike, ties: SlrTies = "strict") -> npt.NDArray[np.bool_]:
    """Hard SLR keep-mask ``[n, n]`` (True = in range) from the interval form."""
    L, R = slr_intervals(d, ties)
    j = np.arange(L.shape[0])
    return (j[None, :] >= L[:, None]) & (j[None, :] <= R[:, None])


def _log_factor(
    x: npt.NDArray[np.float32], mode: SlrMode, tau: float, ties: SlrTies
) -> npt.NDArray[np.float32]:
    """``g(x)``: ``logsigmoid(2x/tau)`` (soft) or ``0 / -inf`` by the indicator (hard)."""
    if mode == "soft":
        z = (2.0 / tau) * x
        # logsigmoid(z) = -softplus(-z), stable for large |z|.
        soft: npt.NDArray[np.float32] = (-np.logaddexp(np.float32(0.0), -z)).astype(np.float32)
        return soft
    keep = x > 0 if ties == "strict" else x >= 0
    return np.where(keep, np.float32(0.0), np.float32(-np.inf)).astype(np.float32)


def slr_log_mask(
    d: npt.ArrayLike,
    tau: float = SLR_TAU,
    mode: SlrMode = "soft",
    ties: SlrTies = "strict",
    lengths: npt.ArrayLike | None = None,
) -> npt.NDArray[np.float32]:
    """SLR as an additive log-bias ``log m``, batched.

    Args:
        d: split distances ``[B, T-1]`` (or ``[T-1]`` for one sentence); padded splits should
            hold ``D_BIG``.
        tau: temperature of the soft mode, in distance units (default 10, the gated-SLR paper's
            best).
        mode: ``soft`` (``logsigmoid``) or ``hard`` (``{0, -inf}``).
        ties: indicator of the hard mode; soft mode ignores it (a tie costs a factor 1/2).
        lengths: real positions per sentence ``[B]``; rows at or beyond it get bias 0 so no padded
            query row is ever all ``-inf``. Key padding is the caller's key-padding mask.

    Returns:
        ``float32[B, 1, T, T]`` (``[T, T]`` for 1-D input): 0 on the diagonal and neighbours.
    """
    dist = np.asarray(d, dtype=np.float32)
    single = dist.ndim == 1
    if single:
        dist = dist[None, :]
    B, S = dist.shape
    T = S + 1
    out = np.zeros((B, T, T), dtype=np.float32)
    if S >= 1:
        i = np.arange(T)[:, None]
        t = np.arange(S)[None, :]
        # Cpre[b,i,t] = g(d_{i-1} - d_t) for t <= i-2; Cpost[b,i,t] = g(d_i - d_t) for t >= i+1.
        prev = dist[:, np.clip(np.arange(T) - 1, 0, S - 1)]  # d_{i-1}   [B, T]
        own = dist[:, np.clip(np.arange(T), 0, S - 1)]  # d_i       [B, T]
        cpre = _log_factor(prev[:, :, None] - dist[:, None, :], mode, tau, ties)
        cpre = np.where(t <= i - 2, cpre, np.float32(0.0))
        cpost = _log_factor(own[:, :, None] - dist[:, None, :], mode, tau, ties)
        cpost = np.where(t >= i + 1, cpost, np.float32(0.0))
        # j < i: sum_{t >= j} Cpre (reverse cumulative sum); j > i: sum_{t <= j-1} Cpost.
        rev = np.flip(np.cumsum(np.flip(cpre, axis=2), axis=2), axis=2)  # [B, T, S] at t=j
        fwd = np.cumsum(cpost, axis=2)  # [B, T, S] at t=j-1
        j = np.arange(T)[None, :]
        lower = np.concatenate([rev, np.zeros((B, T, 1), np.float32)], axis=2)
        upper = np.concatenate([np.zeros((B, T, 1), np.float32), fwd], axis=2)
        out = np.where(j < i, lower, np.where(j > i, upper, np.float32(0.0))).astype(np.float32)
    if lengths is not None:
        real = np.arange(T)[None, :] < np.asarray(lengths)[:, None]  # [B, T]
        out = np.where(real[:, :, None], out, np.float32(0.0))
    return out[0] if single else out[:, None, :, :]


def slr_mask(
    d: npt.ArrayLike, tau: float = SLR_TAU, mode: SlrMode = "soft", ties: SlrTies = "strict"
) -> npt.NDArray[np.float32]:
    """SLR as a multiplicative mask ``m`` in ``(0, 1]`` or ``{0, 1}``, one sentence."""
    return np.exp(slr_log_mask(d, tau=tau, mode=mode, ties=ties)).astype(np.float32)
