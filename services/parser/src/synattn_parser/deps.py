"""Dependencies of the parser routes: the app's settings and model pool, read per request."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from synattn_parser.metrics import ParserMetrics
from synattn_parser.pool import ParserPool
from synattn_parser.settings import ParserSettings
from synattn_shared.webapi import app_state

Settings = Annotated[ParserSettings, Depends(app_state("settings", ParserSettings))]
Pool = Annotated[ParserPool, Depends(app_state("pool", ParserPool))]
Metrics = Annotated[ParserMetrics, Depends(app_state("metrics", ParserMetrics))]
