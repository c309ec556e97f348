"""The parser API over real HTTP against a uvicorn process (see conftest.py)."""

from __future__ import annotations

import contextlib
import functools
import operator
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import psutil
import pytest

from synattn_parser.settings import ParserSettings
from tests.conftest import RUNNING_WORDS
from tests.parser.conftest import all_exited, api_server, model_processes, wait_ready


def parse(client: httpx.Client, **body: object) -> httpx.Response:
    return client.post("/v1/parse", json=body)


def test_health_ready_and_docs(client: httpx.Client) -> None:
    assert client.get("/v1/health").json() == {"status": "ok"}
    ready = client.get("/v1/ready").json()
    assert ready["ready"] is True and ready["backend"] == "spacy"
    schema = client.get("/openapi.json").json()
    assert {"/v1/parse", "/v1/backends", "/v1/health", "/v1/ready"} <= set(schema["paths"])
    assert client.get("/docs").status_code == 200


def test_backends_lists_availability_with_install_hints(client: httpx.Client) -> None:
    body = client.get("/v1/backends").json()
    by_name = {b["name"]: b for b in body["backends"]}
    assert set(by_name) == {"spacy", "benepar", "stanza", "derived", "given"}
    assert (
        by_name["spacy"]["available"]
        and by_name["spacy"]["loaded"]
        and by_name["spacy"]["default"]
    )
    assert by_name["given"]["available"]
    # benepar and stanza models cannot be installed on this machine: the reason says how
    assert (
        not by_name["benepar"]["available"] and "benepar.download" in by_name["benepar"]["reason"]
    )
    assert not by_name["stanza"]["available"] and "stanza.download" in by_name["stanza"]["reason"]
    assert "slr_soft" in body["features"]


def test_raw_sentence_is_parsed_with_features(client: httpx.Client) -> None:
    r = parse(
        client, sentences=["Bush held a talk with Sharon."], features=["syn_dist", "dea_mask"]
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["parser"]["backend"] == "spacy" and body["errors"] == 0
    s = body["sentences"][0]
    assert s["words"] == ["Bush", "held", "a", "talk", "with", "Sharon", "."]
    assert s["pretokenized"] is False and s["has_syntax"] is True
    assert len(s["dep_head"]) == 7 and s["dep_head"].count(0) == 1
    assert len(s["syn_dist"]) == 6 and len(s["const_layer"]) == 7
    mask = s["features"]["dea_mask"]
    assert mask["shape"] == [7, 7] and mask["dtype"] == "bool" and len(mask["data"]) == 49


def test_pretokenised_input_keeps_the_tokens(client: httpx.Client) -> None:
    words = ["Mr.", "O'Neil", "can't", "co-operate", "--", "e-mail", "u.s.a", "(", "!", ")"]
    r = parse(client, sentences=[words, list(RUNNING_WORDS)])
    assert r.status_code == 200
    got = [s["words"] for s in r.json()["sentences"]]
    assert got == [words, list(RUNNING_WORDS)]
    assert all(s["pretokenized"] for s in r.json()["sentences"])


def test_dense_and_compact_formats_hold_the_same_numbers(client: httpx.Client) -> None:
    feats = ["slr_soft", "slr_bias", "dea_bias", "rp_index", "dep_hops", "lp_span"]
    common = {"sentences": [list(RUNNING_WORDS)], "features": feats, "tau": 5.0, "rp_clip": 3}
    dense = parse(client, format="dense", **common).json()["sentences"][0]["features"]
    compact = parse(client, format="compact", **common).json()["sentences"][0]["features"]
    for name in feats:
        c = compact[name]
        flat = np.array(c["data"], dtype=object).reshape(c["shape"])
        assert flat.tolist() == dense[name], name
    n = len(RUNNING_WORDS)
    assert np.array(dense["slr_soft"]).shape == (n, n)
    assert None in functools.reduce(operator.iadd, dense["dea_bias"], [])  # -inf is sent as null
    assert max(max(r) for r in dense["rp_index"]) <= 2 * 3 + 1


def test_one_bad_sentence_does_not_fail_the_others(client: httpx.Client) -> None:
    r = parse(client, sentences=["A fine sentence.", "   ", ["ok", "then"]], ids=["a", "b", "c"])
    body = r.json()
    assert r.status_code == 200 and body["errors"] == 1
    a, b, c = body["sentences"]
    assert a["words"] and c["words"] == ["ok", "then"]
    assert b["sent_id"] == "b" and b["error"] == "empty sentence" and "words" not in b


def test_strict_mode_fails_the_request(client: httpx.Client) -> None:
    r = parse(client, sentences=["fine", "  "], strict=True)
    assert r.status_code == 422 and "sentence 1: empty sentence" in r.json()["detail"]


def test_given_parses_and_their_errors(client: httpx.Client) -> None:
    tree = "(S (NP (NNP Bush)) (VP (VBD held) (NP (DT a) (NN talk))) (. .))"
    conllu = (
        "1\tIt\tit\tPRON\tPRP\t_\t2\tnsubj\t_\t_\n2\trained\train\tVERB\tVBD\t_\t0\troot\t_\t_"
    )
    r = parse(client, backend="given", sentences=[tree, conllu, "(S (NP"], features=["syn_dist"])
    s = r.json()["sentences"]
    assert s[0]["words"] == ["Bush", "held", "a", "talk", "."] and s[0]["tree"]
    assert s[0]["syn_dist"] == [3, 2, 1, 3]  # NP=1, VP=2, S=3 after collapse
    assert s[1]["dep_head"] == [2, 0]
    assert "unbalanced" in s[2]["error"]


def test_a_string_of_several_sentences_is_one_sentence_with_a_warning(
    client: httpx.Client,
) -> None:
    """One string = one sentence (the contract, in the endpoint's description); a parse with
    several roots says so, and says to split (it came back silently with two roots)."""
    r = parse(client, sentences=["Dr. Smith arrived. Then he left.", "It rained."])
    assert r.status_code == 200, r.text
    two, one = r.json()["sentences"]
    assert two["words"] == ["Dr.", "Smith", "arrived", ".", "Then", "he", "left", "."]
    assert two["dep_head"].count(0) == 2 and len(two["syn_dist"]) == 7  # one row, one tree
    (warning,) = two["warnings"]
    assert "parsed as 2 sentences" in warning and "one sentence" in warning
    assert "split" in warning
    assert "warnings" not in one  # a single root: nothing to say
    schema = client.get("/openapi.json").json()
    described = schema["paths"]["/v1/parse"]["post"]["description"]
    assert "a string is never split" in described and "warnings" in described
    result = schema["components"]["schemas"]["SentenceResult"]["properties"]
    assert "several roots" in result["warnings"]["description"]


def test_the_two_syn_dists_are_named_and_slr_reads_the_binarised_one(
    client: httpx.Client,
) -> None:
    """For one given tree the row's ``syn_dist`` is [1,2,2] (the n-ary tree: LPEA's and RHE's
    local phrases) and ``features.syn_dist`` is [1,2,1] (right-binarised: what SLR reads). The
    schema names both, and the trainer's SLR variant reads the binarised one."""
    from synattn_shared.features import to_row
    from synattn_shared.records import SentenceRecord
    from synattn_shared.requests import build_features
    from synattn_shared.syntax.slr import slr_log_mask
    from synattn_trainer.config import ModelConfig
    from synattn_trainer.variant_options import SlrConfig
    from synattn_trainer.variants.slr import Slr

    tree = "(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))"
    feats = ["syn_dist", "slr_bias"]
    r = parse(client, backend="given", sentences=[tree], features=feats, format="dense")
    (s,) = r.json()["sentences"]
    assert s["syn_dist"] == [1, 2, 2]
    assert s["features"]["syn_dist"] == [1, 2, 1]
    r = parse(client, backend="given", sentences=[tree], features=feats, format="dense",
              slr_binarize="none")  # fmt: skip
    assert r.json()["sentences"][0]["features"]["syn_dist"] == [1, 2, 2]

    schema = client.get("/openapi.json").json()["components"]["schemas"]
    row_doc = schema["SentenceResult"]["properties"]["syn_dist"]["description"]
    assert "shard row" in row_doc and "features.syn_dist" in row_doc and "SLR" in row_doc
    assert "[1, 2, 2]" in row_doc and "[1, 2, 1]" in row_doc
    assert "SLR" in schema["ParseRequest"]["properties"]["slr_binarize"]["description"]
    assert "SLR reads" in schema["SentenceResult"]["properties"]["features"]["description"]

    # the trainer: the SLR variant's bias is built from the binarised distances, the API's
    # features.syn_dist, and equals the API's slr_bias
    row = to_row(SentenceRecord(sent_id="t", words=("The", "cat", "sat", "."), tree=tree))
    assert row["syn_dist"] == [1, 2, 2]  # what a shard stores
    (request,) = Slr(SlrConfig(), ModelConfig(), "enc_self", 0).requests()
    read = build_features([row], [np.arange(4)], [request])[request][0]
    tau = SlrConfig().tau

    def bias(d: list[int]) -> np.ndarray:
        return slr_log_mask(np.asarray(d, np.float32), tau=tau, mode="soft", ties="strict")

    np.testing.assert_allclose(read, bias(s["features"]["syn_dist"]), rtol=1e-6)
    np.testing.assert_allclose(read, np.asarray(s["features"]["slr_bias"]), rtol=1e-6)
    assert not np.allclose(read, bias(s["syn_dist"]))


def test_unavailable_backend_is_a_clear_422(client: httpx.Client) -> None:
    r = parse(client, sentences=["x"], backend="benepar")
    assert r.status_code == 422
    assert "benepar" in r.json()["detail"] and "install" in r.json()["detail"]


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"sentences": ["x"] * 65}, 413, "65 sentences, the limit is 64"),
        ({"sentences": ["word " * 130]}, 422, "650 characters, the limit is 600"),
        ({"sentences": [["w"] * 201]}, 422, "201 tokens, the limit is 200"),
        ({"sentences": []}, 422, "sentences"),
        ({"sentences": ["x"], "features": ["nope"]}, 422, "features"),
        ({"sentences": ["x"], "tau": 0}, 422, "tau"),
        ({"sentences": ["x"], "ids": ["a", "b"]}, 422, "2 ids for 1 sentences"),
        ({"sentences": ["x"], "colour": "red"}, 422, "colour"),
    ],
)
def test_limits_and_validation(client: httpx.Client, body: dict, status: int, needle: str) -> None:
    r = client.post("/v1/parse", json=body)
    assert r.status_code == status, r.text
    assert needle in r.text


def test_raw_sentence_over_the_token_limit_is_a_sentence_error(client: httpx.Client) -> None:
    r = parse(client, sentences=[". " * 250, "short one"])
    first, second = r.json()["sentences"]
    assert "tokens, the limit is 200" in first["error"] and second["words"]


def test_body_limit_by_header(client: httpx.Client) -> None:
    r = client.post(
        "/v1/parse",
        content=b"{" + b" " * 70_000 + b"}",
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 413 and "larger than 65536 bytes" in r.json()["detail"]


def test_body_limit_when_streamed_without_length(parser_server: str) -> None:
    """A chunked body has no Content-Length; the app still stops reading at the limit."""
    host, port = parser_server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/parse HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        chunk = b" " * 16384
        for _ in range(5):  # 80 KiB > 64 KiB limit; no terminating chunk: the app must not wait
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        reply = b""
        try:
            while data := sock.recv(65536):
                reply += data
        except ConnectionResetError:
            pass  # the server closes with our unread bytes in its buffer; its reply came first
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]


def test_concurrent_requests_are_micro_batched(client: httpx.Client, parser_server: str) -> None:
    def one(k: int) -> list[str]:
        r = httpx.post(
            f"{parser_server}/v1/parse", json={"sentences": [f"Dog number {k} barks ."]}
        )
        return r.json()["sentences"][0]["words"]

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(64)))
    assert results == [["Dog", "number", str(k), "barks", "."] for k in range(64)]
    text = client.get("/metrics").text
    count = _metric(text, "synattn_parser_batch_size_count")
    total = _metric(text, "synattn_parser_batch_size_sum")
    assert total / count > 1.0  # some parser calls served several requests


def _metric(text: str, name: str, labels: str = "") -> float:
    for line in text.splitlines():
        if line.startswith(name + labels + " ") or (not labels and line.startswith(name + " ")):
            return float(line.split()[-1])
    raise AssertionError(f"{name}{labels} not in /metrics")


def test_metrics_count_requests_latency_and_sentences(client: httpx.Client) -> None:
    before = client.get("/metrics").text
    parse(client, sentences=["One .", "Two .", "  "])
    client.post("/v1/parse", json={"sentences": []})
    text = client.get("/metrics").text
    key = '{route="/v1/parse",status="200"}'
    assert _metric(text, "synattn_parser_requests_total", key) >= 1
    assert _metric(text, "synattn_parser_requests_total", '{route="/v1/parse",status="422"}') >= 1
    assert 'synattn_parser_request_seconds_bucket{le="0.1",route="/v1/parse"}' in text
    ok = '{backend="spacy",outcome="ok"}'
    err = '{backend="spacy",outcome="error"}'
    assert _metric(text, "synattn_parser_sentences_total", ok) >= 2 + _metric_or0(before, ok)
    assert _metric(text, "synattn_parser_sentences_total", err) >= 1


def _metric_or0(text: str, labels: str) -> float:
    try:
        return _metric(text, "synattn_parser_sentences_total", labels)
    except AssertionError:
        return 0.0


def test_several_model_worker_processes() -> None:
    """PARSER_MODEL_WORKERS=2: two model processes, both loaded, joined on shutdown."""
    with api_server({"PARSER_MODEL_WORKERS": "2"}) as (proc, url):
        workers = model_processes(proc)
        assert len(workers) == 2
        with ThreadPoolExecutor(8) as pool:
            bodies = list(
                pool.map(
                    lambda k: httpx.post(
                        f"{url}/v1/parse", json={"sentences": [f"Cat {k} sat ."]}
                    ),
                    range(16),
                )
            )
        assert [b.json()["sentences"][0]["words"][1] for b in bodies] == [
            str(k) for k in range(16)
        ]
    assert all_exited(workers, timeout=5)


def test_the_model_process_exits_when_the_server_is_killed() -> None:
    """The default model runs in a child process; SIGKILL of the server must not orphan it."""
    with api_server() as (proc, _):
        children = psutil.Process(proc.pid).children(recursive=True)  # with the resource tracker
        try:
            # the default: one model process per usable core but one (at least 1, at most 4)
            assert len(model_processes(proc)) == ParserSettings().model_workers >= 1
            proc.kill()
            proc.wait(10)
            assert all_exited(children, timeout=15)
        finally:
            for c in children:
                with contextlib.suppress(psutil.NoSuchProcess):
                    c.kill()


def test_a_killed_model_process_is_a_503_and_the_workers_are_replaced() -> None:
    """SIGKILL of one model process under load: its requests get 503 (never 500, never a hang),
    both processes are replaced once, and parsing goes on.

    The requests queued behind the kill wait for the replacements to load spaCy: seconds here,
    over 30 s on a slow CI machine, hence the bound of 180 s (still a bound: a hang fails)."""
    with api_server({"PARSER_MODEL_WORKERS": "2"}) as (proc, url):
        old = model_processes(proc)
        assert len(old) == 2

        def post(k: int) -> httpx.Response:
            body = {"sentences": [f"The cat {k} sat on the mat ."] * 8}
            return httpx.post(f"{url}/v1/parse", json=body, timeout=180)

        with ThreadPoolExecutor(8) as clients:
            during = [clients.submit(post, k) for k in range(160)]
            while sum(f.done() for f in during) < 20:
                time.sleep(0.01)  # not a busy loop: it would take a core from the server
            old[0].kill()
            statuses = [f.result().status_code for f in during]
        failed = [f.result() for f in during if f.result().status_code != 200]
        assert set(statuses) <= {200, 503} and 503 in statuses
        assert all("worker died" in r.json()["detail"] for r in failed)
        assert all_exited(old, timeout=10)  # the survivor was shut down with the dead one
        wait_ready(url, proc)
        new = model_processes(proc)
        assert len(new) == 2 and not {p.pid for p in new} & {p.pid for p in old}
        assert post(1).status_code == 200


def test_render_tree_scheme_and_svg(client: httpx.Client) -> None:
    """A derived tree is returned on request, with the scheme asked for; displaCy's SVG escapes
    the words it draws."""
    words = ["The", "<b>cat</b>", "sat", "."]
    r = client.post("/v1/parse", json={"sentences": [words], "render": ["tree", "dep_svg"],
                                       "scheme": "binary"})  # fmt: skip
    assert r.status_code == 200, r.text
    body = r.json()
    s = body["sentences"][0]
    assert body["parser"]["constituency"] == "derived:binary"
    assert s["tree"].startswith("(") and "sat" in s["tree"]
    assert s["dep_svg"].startswith("<svg") and "<b>" not in s["dep_svg"]
    assert "&lt;b&gt;cat&lt;/b&gt;" in s["dep_svg"]
    flat = client.post("/v1/parse", json={"sentences": [words], "render": ["tree"]}).json()
    assert flat["parser"]["constituency"] == "derived:flat"


def test_a_tokenizer_must_be_one_the_server_has(client: httpx.Client) -> None:
    info = client.get("/v1/backends").json()
    assert info["tokenizers"] == [] and info["schemes"] == ["flat", "two_level", "binary"]
    r = client.post("/v1/parse", json={"sentences": ["A dog ."], "tokenizer": "m30k"})
    assert r.status_code == 422 and "PARSER_TOKENIZERS_DIR" in r.json()["detail"]
    for bad in ("../etc/passwd", "/abs", "a/b", ".hidden", ""):
        r = client.post("/v1/parse", json={"sentences": ["A dog ."], "tokenizer": bad})
        assert r.status_code == 422, bad
