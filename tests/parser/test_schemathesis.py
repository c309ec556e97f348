"""A bounded schemathesis run against the live server's OpenAPI schema finds no 5xx."""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, given, settings

EXAMPLES = 40  # per operation; bounded so the suite stays fast


def test_no_server_errors(parser_server: str) -> None:
    schema = schemathesis.openapi.from_url(f"{parser_server}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/v1/parse", "/v1/backends", "/v1/ready"}
    for op in operations:

        @given(case=op.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def no_5xx(case: schemathesis.Case) -> None:
            response = case.call(base_url=parser_server, timeout=60)
            assert response.status_code < 500, (case.path, case.body, response.text[:500])

        no_5xx()
