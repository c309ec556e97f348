"""The parser API as an attacker would use it: every case gets its exact status (never a 5xx),
and the server still answers a valid request afterwards."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.hostile import closed_within, raw_exchange, status_of

GOOD = {"sentences": ["Bush held a talk with Sharon."], "features": ["slr_soft"]}


def still_serves(client: httpx.Client) -> None:
    r = client.post("/v1/parse", json=GOOD)
    assert r.status_code == 200, r.text
    assert r.json()["sentences"][0]["words"][0] == "Bush"


def post_raw(client: httpx.Client, body: bytes, ctype: str = "application/json") -> httpx.Response:
    return client.post("/v1/parse", content=body, headers={"content-type": ctype})


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b'{"sentences": ["x"], "tau": NaN}', "NaN"),
        (b'{"sentences": ["x"], "tau": Infinity}', "Infinity"),
        (b'{"sentences": ["x"], "tau": -Infinity}', "Infinity"),
        (b'{"sentences": ["x"], "tau": 1e999}', "out of range"),
        (b'{"sentences": ["x"], "rp_clip": 1e999}', "out of range"),
        (b'{"sentences": ["x"], "rp_clip": NaN}', "NaN"),
        (b'{"sentences": ["x"], "rp_clip": 100000000000000000000000000}', "integer out of range"),
        (b'{"sentences": ["x"], "tau": 1e7}', "tau"),
        (b'{"sentences": ["x"], "rp_clip": 2.5}', "rp_clip"),
        (b'{"sentences": ["\\ud800 lone"]}', "lone surrogate"),
        (b'{"sentences": [["ok", "\\udfff"]]}', "lone surrogate"),
        (b'{"sentences": ["x"], "ids": ["\\ud800"]}', "lone surrogate"),
        (b'{"\\ud800": 1, "sentences": ["x"]}', "lone surrogate"),
        (b'{"sentences": ["caf\xe9"]}', "UTF-8"),
        (b'{"sentences": ["x"]', "invalid JSON"),
        (b"[" * 5000 + b"]" * 5000, "nested deeper"),
        (b'{"sentences": ' + b"[" * 100 + b"]" * 100 + b"}", "nested deeper"),
        (b"null", "body"),
        (b'"just a string"', "body"),
        (b'{"sentences": [["ok", ""]]}', "sentences"),
        (b'{"sentences": [5]}', "sentences"),
        (b'{"sentences": ["x"], "ids": ["' + b"i" * 201 + b'"]}', "ids"),
        (b'{"sentences": ["x"], "format": "xml"}', "format"),
        (b'{"sentences": ["x"], "backend": "../../etc/passwd"}', "backend"),
        (b'{"sentences": ["x"], "features": ["slr_soft", 3]}', "features"),
    ],
)
def test_bad_json_is_a_422_that_never_echoes_it(
    client: httpx.Client, body: bytes, needle: str
) -> None:
    r = post_raw(client, body)
    assert r.status_code == 422, r.text
    problem = r.json()
    assert needle in r.text and isinstance(problem["detail"], str)
    assert "\\ud800" not in problem["detail"]
    still_serves(client)


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", ""])
def test_bodies_that_are_not_json_are_refused(client: httpx.Client, ctype: str) -> None:
    r = post_raw(client, b"\xff\xfe sentences=\x00\x01", ctype)
    assert r.status_code == 422, r.text
    assert isinstance(r.json()["detail"], str)
    still_serves(client)


@pytest.mark.parametrize(
    "sentence",
    ["a\x00b c", "\u200b\u200b", "\ufeff", "\U0001f600 " * 50, "x\r\ny", "\t", "." * 500,
     "\u0301\u0301 combining", "\u202eright-to-left"],
)  # fmt: skip
def test_odd_but_valid_text_parses_or_fails_alone(client: httpx.Client, sentence: str) -> None:
    r = client.post("/v1/parse", json={"sentences": [sentence, "It rained."], "features": ["rp"]})
    assert r.status_code == 200, r.text
    assert r.json()["sentences"][1]["words"] == ["It", "rained", "."]
    json.dumps(r.json())  # the reply is valid JSON
    still_serves(client)


@pytest.mark.parametrize("fmt", ["compact", "dense"])
def test_every_format_has_a_response_size_limit(client: httpx.Client, fmt: str) -> None:
    """64 sentences of 100 words with every feature would be ~70 million numbers (about 600 MB
    of JSON); the server says no before it builds any of it."""
    words = [f"w{k}" for k in range(100)]
    features = ["slr_soft", "slr_bias", "dep_hops", "rp", "dea_mask", "slr_hard"]
    body = {"sentences": [words] * 64, "features": features, "format": fmt}
    start = time.monotonic()
    r = client.post("/v1/parse", json=body)
    assert r.status_code == 413, r.text[:300]
    assert "limit 200000" in r.json()["detail"] and fmt in r.json()["detail"]
    assert len(r.content) < 1000 and time.monotonic() - start < 30
    # just under the limit is served
    small = client.post("/v1/parse", json={**body, "sentences": [words] * 3})
    assert small.status_code == 200 and len(small.json()["sentences"]) == 3
    still_serves(client)


def test_stalled_body_is_closed_with_408(parser_server: str, client: httpx.Client) -> None:
    head = (
        b"POST /v1/parse HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
        b"content-length: 1000\r\n\r\n"
    )
    took, reply = closed_within(parser_server, head + b'{"sentences": [', limit=15)
    assert status_of(reply) == 408 and b"body not received within 3 s" in reply
    assert 2.5 < took < 10
    still_serves(client)


@pytest.mark.parametrize(
    "payload",
    [b"", b"POST /v1/parse HTTP/1.1\r\nHost: x\r\n", b"GET /v1/health HTTP/1.1\r\nHo"],
)
def test_stalled_headers_are_closed(
    parser_server: str, client: httpx.Client, payload: bytes
) -> None:
    took, reply = closed_within(parser_server, payload, limit=15)
    assert 1.5 < took < 10
    assert reply == b"" or status_of(reply) == 408
    still_serves(client)


def test_a_slow_but_steady_body_is_still_cut_at_the_deadline(parser_server: str) -> None:
    """The body deadline is total, not idle: a byte a second does not keep it open."""
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(parser_server)
    start = time.monotonic()
    with socket.create_connection((url.hostname, url.port), timeout=15) as sock:
        sock.sendall(b"POST /v1/parse HTTP/1.1\r\nHost: x\r\ncontent-length: 100\r\n\r\n")
        closed = False
        for _ in range(12):
            try:
                sock.sendall(b" ")
            except OSError:
                closed = True
                break
            time.sleep(0.5)
            sock.setblocking(False)
            try:
                if sock.recv(4096) is not None:
                    closed = True
                    break
            except BlockingIOError:
                pass
            finally:
                sock.setblocking(True)
    assert closed and time.monotonic() - start < 6


def test_pipelined_requests_after_a_good_one_still_time_out(parser_server: str) -> None:
    good = json.dumps(GOOD).encode()
    req = (
        b"POST /v1/parse HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(good)).encode() + b"\r\n\r\n" + good
    )
    start = time.monotonic()
    reply = raw_exchange(parser_server, req + b"POST /v1/parse HTTP/1.1\r\n", timeout=15)
    assert reply.startswith(b"HTTP/1.1 200") and b"HTTP/1.1 408" in reply
    assert time.monotonic() - start < 10


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/../../etc/passwd", 404),
        ("GET", "/v1/parse", 405),
        ("DELETE", "/v1/health", 405),
        ("GET", "/%ED%A0%80", 404),
        ("GET", "/v1/backends?x=%ED%A0%80", 200),
    ],
)
def test_odd_paths_and_methods(client: httpx.Client, method: str, path: str, status: int) -> None:
    r = client.request(method, path)
    assert r.status_code == status, r.text
    if status >= 400:
        assert isinstance(r.json()["detail"], str)
    still_serves(client)
