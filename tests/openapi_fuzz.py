"""A bounded schemathesis run over a live server's OpenAPI schema: no 5xx, and every response
(status, content type, body, headers) as the schema documents it."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


def fuzz(base_url: str, examples: int, headers: dict[str, str] | None = None,
         skip: frozenset[str] = frozenset()) -> set[str]:  # fmt: skip
    """Run every operation of the schema ``examples`` times; returns the paths exercised."""
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    seen = set()
    for op in operations:
        if op.path in skip:
            continue
        seen.add(op.path)

        @given(case=op.as_strategy())
        @settings(
            max_examples=examples,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def conforms(case: Any) -> None:
            case.call_and_validate(base_url=base_url, headers=headers, checks=CHECKS, timeout=60)

        conforms()
    return seen
