"""schemathesis against the live parser server's OpenAPI schema: 0 server errors, 0 responses
that differ from the schema."""

from __future__ import annotations

from tests.openapi_fuzz import fuzz

EXAMPLES = 40  # per operation; bounded so the suite stays fast


def test_no_server_errors_and_no_schema_violations(parser_server: str) -> None:
    seen = fuzz(parser_server, EXAMPLES)
    assert seen >= {"/v1/parse", "/v1/backends", "/v1/ready", "/v1/health"}
