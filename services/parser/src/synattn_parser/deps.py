"""Dependencies of the parser routes: the app's settings and model pool, read per request."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from synattn_parser.metrics import ParserMetrics
from synattn_parser.pool import ParserPool
from synattn_parser.settings import ParserSettings


def settings(request: Request) -> ParserSettings:
    s: ParserSettings = request.app.state.settings
    return s


def pool(request: Request) -> ParserPool:
    p: ParserPool = request.app.state.pool
    return p


def metrics(request: Request) -> ParserMetrics:
    m: ParserMetrics = request.app.state.metrics
    return m


Settings = Annotated[ParserSettings, Depends(settings)]
Pool = Annotated[ParserPool, Depends(pool)]
Metrics = Annotated[ParserMetrics, Depends(metrics)]
