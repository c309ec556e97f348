"""Prometheus metrics of one API process (its own registry: several apps may share a process)."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from synattn_shared.asgi import ASGIApp, Scope

ROUTES = {"/v1/parse", "/v1/backends", "/v1/health", "/v1/ready", "/metrics", "/"}


class ParserMetrics:
    """Requests, latency, sentences parsed and micro-batch sizes."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "synattn_parser_requests_total",
            "HTTP requests by route and status",
            ["route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "synattn_parser_request_seconds",
            "HTTP request latency by route",
            ["route"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.sentences = Counter(
            "synattn_parser_sentences_total",
            "sentences parsed by backend and outcome",
            ["backend", "outcome"],
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "synattn_parser_batch_size",
            "sentences per parser call (micro-batch)",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
            registry=self.registry,
        )


class Metrics:
    """Count requests and observe latency per route (unknown paths share one label)."""

    def __init__(self, app: ASGIApp, metrics: ParserMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = scope["path"] if scope["path"] in ROUTES else "other"
        status = 500
        start = time.perf_counter()

        async def send_status(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - start)
