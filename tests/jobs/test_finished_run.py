"""The APIs of a finished run over real HTTP, on one small run a real worker trains (fixed
and gated heads over syntax-aware data; the run is trained once for both):

- ``POST /v1/jobs/{id}/attention`` answers every module, row-stochastic, equal to
  ``synattn attention`` for the same checkpoint and row, with the syntax, roles and statistics;
- ``POST /v1/jobs/{id}/translate`` parses sentences as the run's training data was parsed and
  answers what ``synattn translate --data`` gives for the same sentences in shards;

owner checks, bounds, an unfinished job and a mismatched parse as an attacker would send them:
clear 4xx, never a 500."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import torch

from tests.jobs.conftest import Env, h, serving, tiny_yaml

SENTENCE = "Two dogs run across the green field ."
ATTENTION = {
    "enc_self": [
        {"name": "fixed", "layers": [0], "options": {"fixed": 3}},
        {"name": "slr", "layers": [1], "options": {"mode": "gated"}},
    ]
}


@pytest.fixture(scope="module")
def finished(
    m30k: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Env, str, Any, list[str]]]:
    """The run both tests read: queued through the API (asked about before it ran: a 409),
    trained by a real worker. (env, job id, the finished job, five validation sentences)."""
    root = tmp_path_factory.getbasetemp()
    tiny_yaml(m30k, root / "configs" / "tiny.yaml")
    home = tmp_path_factory.mktemp("finished-run")
    env = Env(root, home, f"sqla+sqlite:///{home / 'broker.sqlite'}")
    lines = (m30k["valid"].parent / "valid.en").read_text(encoding="utf-8").splitlines()[:5]
    try:
        with serving(env) as (base, token, env):
            r = httpx.post(f"{base}/v1/jobs/train", headers=h(token), json={"spec": {
                "config": "configs/tiny.yaml",
                "overrides": {"attention": ATTENTION, "decode": {"max_len_b": 5}},
                "evaluate": {"split": "valid", "analyze": True}}})  # fmt: skip
            assert r.status_code == 201, r.text
            job = str(r.json()["id"])
            early = httpx.post(f"{base}/v1/jobs/{job}/attention", headers=h(token),
                               json={"row": 0}, timeout=120)  # fmt: skip
            assert early.status_code == 409 and "queued" in early.json()["detail"]
            early = httpx.post(f"{base}/v1/jobs/{job}/translate", headers=h(token),
                               json={"sentences": lines}, timeout=60)  # fmt: skip
            assert early.status_code == 409 and "queued" in early.json()["detail"]
            env.worker("train")
            done = env.wait(job, {"succeeded"}, timeout=300)
        yield env, job, done, lines
    finally:
        env.stop()


def test_attention_of_a_finished_run(
    finished: tuple[Env, str, Any, list[str]], tmp_path: Path
) -> None:
    env0, job, done, _ = finished
    with serving(env0) as (base, token, env):
        url = f"{base}/v1/jobs/{job}/attention"
        t0 = time.perf_counter()
        r = httpx.post(url, headers=h(token), json={"split": "valid", "row": 2}, timeout=60)
        cold = time.perf_counter() - t0
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["model_cached"] is False
        names = {f"{k}.{i}" for k in ("enc_self", "dec_self", "enc_dec") for i in (0, 1)}
        assert set(body["modules"]) == names
        src, tgt = body["tokens"]["source"], body["tokens"]["target"]
        assert src[-1] == "</s>" and tgt[0] == "<s>"
        for name, heads in body["modules"].items():
            a = np.asarray(heads)
            queries = src if name.startswith("enc_self") else tgt
            keys = tgt if name.startswith("dec_self") else src
            assert a.shape == (4, len(queries), len(keys)), name
            np.testing.assert_allclose(a.sum(-1), 1.0, atol=1e-5, err_msg=name)
        # exactly what the CLI exports for the same checkpoint and row
        npz = tmp_path / "row2.npz"
        valid = Path(json.loads(json.dumps(done.spec))["resolved"]["data"]["valid"])
        env.cli("attention", "--checkpoint", done.result["checkpoint"], "--data", str(valid),
                "--row", "2", "--out", str(npz))  # fmt: skip
        with np.load(npz) as ref:
            for name in names:
                assert np.array_equal(np.asarray(body["modules"][name], np.float32), ref[name])
            assert list(ref["src_tokens"]) == src and list(ref["tgt_tokens"]) == tgt
        # what each head is: 3 fixed patterns + 1 learned below, gated SLR above
        assert body["roles"]["enc_self.0"] == [
            "fixed: current token",
            "fixed: previous token",
            "fixed: next token",
            "learned",
        ]
        assert body["roles"]["enc_self.1"] == ["gated (SLR)"] * 4
        assert body["roles"]["dec_self.0"] == ["learned"] * 4
        # the fixed heads apply their patterns: current token is the identity on real tokens
        np.testing.assert_allclose(np.asarray(body["modules"]["enc_self.0"][0]),
                                   np.eye(len(src)), atol=1e-6)  # fmt: skip
        syn = body["syntax"]
        words = syn["words"]
        assert len(syn["subword_to_word"]) == len(src)
        roots = sum(1 for a in range(len(words)) if all(arc["dep"] != a for arc in syn["arcs"]))
        assert roots >= 1 and len(syn["arcs"]) == len(words) - roots
        assert all(0 <= arc["head"] < len(words) and arc["rel"] for arc in syn["arcs"])
        soft = np.asarray(syn["matrices"]["slr_soft"])
        assert soft.shape == (len(src), len(src)) and np.all((soft >= 0) & (soft <= 1))
        assert np.all(np.diag(soft) == 1.0)
        stats = body["stats"]
        assert (
            len(stats["enc_self.1"]["gate"]) == 4 and len(stats["enc_self.0"]["importance"]) == 4
        )
        # warm: the model stays loaded in this API process
        t0 = time.perf_counter()
        again = httpx.post(url, headers=h(token), json={"row": 3}, timeout=60)
        warm = time.perf_counter() - t0
        assert again.status_code == 200 and again.json()["model_cached"] is True
        assert warm < cold
        # requests at once share one loaded model: each gets its own row, never a 500
        from concurrent.futures import ThreadPoolExecutor

        def fetch(row: int) -> tuple[int, list[str]]:
            got = httpx.post(url, headers=h(token), json={"row": row}, timeout=120)
            return got.status_code, got.json()["tokens"]["source"] if got.is_success else []

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(fetch, [k % 6 for k in range(24)]))
        assert {status for status, _ in answers} == {200}
        for k, (_, source) in enumerate(answers):
            assert source == answers[k % 6][1]
        # another user's job is not told apart from a missing one
        other = env.cli("token", "create", "mallory").stdout.strip()
        assert httpx.post(url, headers=h(other), json={"row": 0}, timeout=120).status_code == 404
        assert httpx.post(url, json={"row": 0}, timeout=120).status_code == 401
        # bad input: clear 4xx, never a 500
        for payload, status, words_ in (
            ({"row": 10_000}, 422, "outside 0..59"),
            ({"row": -1}, 422, "row"),
            ({"row": 1, "text": "A dog."}, 422, "not both"),
            ({"text": "   "}, 422, "text:1: empty sentence"),
            ({"text": "x" * 1001}, 422, "at most 1000"),
            ({"split": "train"}, 422, "split"),
            ({"row": 1e300}, 422, "row"),
            ({"row": 0, "extra": 1}, 422, "extra"),
        ):
            bad = httpx.post(url, headers=h(token), json=payload, timeout=120)
            assert bad.status_code == status, (payload, bad.text)
            assert words_ in bad.text, (payload, bad.text)
        assert httpx.post(f"{base}/v1/jobs/{'0' * 12}/attention", headers=h(token),
                          json={"row": 0}, timeout=120).status_code == 404  # fmt: skip
        # free text in this process: parsed as the run's data was (no parser API is set),
        # teacher-forced on the model's own greedy translation, which the answer carries
        typed = httpx.post(url, headers=h(token), json={"text": SENTENCE}, timeout=180)
        assert typed.status_code == 200, typed.text
        local = typed.json()
        assert local["row"] is None and local["split"] is None
        assert local["syntax"]["words"] == SENTENCE.split(" ")
        greedy = httpx.post(f"{base}/v1/jobs/{job}/translate", headers=h(token),
                            json={"sentences": [SENTENCE], "beam": 1}, timeout=180)  # fmt: skip
        assert local["translation"] == greedy.json()["translations"][0]
        assert body["translation"] is None  # a row of the data: teacher-forced on its reference
        print(f"attention route: cold {cold * 1000:.0f} ms, warm {warm * 1000:.0f} ms")
    # a response never grows past the configured bound
    with serving(env0, SYNATTN_ATTENTION_MAX_TOKENS="4") as (base, _, env):
        token = env.cli("token", "create", "tester").stdout.strip()
        # a fresh API process: the first request loads the model (a bound, not httpx's 5 s,
        # which a loaded 2-core CI machine exceeded)
        small = httpx.post(
            f"{base}/v1/jobs/{job}/attention", headers=h(token), json={"row": 2}, timeout=120
        )
        assert small.status_code == 413 and "at most 4" in small.json()["detail"]
        # a typed sentence too: refused before the model translates it
        long = httpx.post(f"{base}/v1/jobs/{job}/attention", headers=h(token),
                          json={"text": SENTENCE}, timeout=120)  # fmt: skip
        assert long.status_code == 413 and "source subwords" in long.json()["detail"]
    # free text through a real parser API (SYNATTN_PARSER_URL): the recorded parse, asked of
    # the API, teacher-forced on the model's own translation; a dead parser is a 502, not a 500
    from tests.parser.conftest import TEST_LIMITS, api_server

    sentence = SENTENCE
    with (
        api_server(TEST_LIMITS, tmp_path / "parser.log") as (parser, parser_url),
        serving(env0, SYNATTN_PARSER_URL=parser_url) as (base, _, env),
    ):
        token = env.cli("token", "create", "tester").stdout.strip()
        r = httpx.post(f"{base}/v1/jobs/{job}/attention", headers=h(token),
                       json={"text": sentence},
                       timeout=180)  # fmt: skip
        assert r.status_code == 200, r.text
        free = r.json()
        assert free["row"] is None and free["split"] is None
        assert free["syntax"]["words"] == sentence.split(" ")
        assert len(free["syntax"]["arcs"]) == 7  # one root among eight words
        assert free["tokens"]["target"][0] == "<s>"
        a = np.asarray(free["modules"]["enc_dec.1"])
        np.testing.assert_allclose(a.sum(-1), 1.0, atol=1e-5)
        # the parser API parses as this process did: the same answer
        assert free["translation"] == local["translation"]
        assert free["syntax"] == local["syntax"] and free["tokens"] == local["tokens"]
        for name, heads in local["modules"].items():
            np.testing.assert_allclose(free["modules"][name], heads, atol=1e-6, err_msg=name)
        parser.terminate()
        parser.wait(20)
        dead = httpx.post(f"{base}/v1/jobs/{job}/attention", headers=h(token),
                          json={"text": "A cat ."}, timeout=180)  # fmt: skip
        assert dead.status_code == 502 and "parser API" in dead.json()["detail"]


def test_translate_raw_sentences_of_a_finished_run(
    finished: tuple[Env, str, Any, list[str]], tmp_path: Path
) -> None:
    """(Last in this module: it ends by changing the run's checkpoint.)"""
    from synattn_parser.batch import parse_corpus
    from synattn_trainer.inference import translate_split

    env0, job, done, lines = finished
    with serving(env0) as (base, token, env):
        url = f"{base}/v1/jobs/{job}/translate"
        r = httpx.post(url, headers=h(token), json={"sentences": lines}, timeout=120)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["job"] == job and body["model_cached"] is False
        assert body["parse"]["parser"]["backend"] == "spacy"
        assert body["parse"]["features"]["derived_scheme"] == "flat"
        # the same sentences parsed into shards and translated by the CLI's shard path
        src = tmp_path / "five.en"
        src.write_text("\n".join(lines) + "\n", encoding="utf-8")
        parse_corpus(src, tmp_path / "five")
        checkpoint = Path(done.result["checkpoint"])
        assert body["translations"] == translate_split(checkpoint, tmp_path / "five")
        again = httpx.post(url, headers=h(token), json={"sentences": lines[:2], "beam": 1},
                           timeout=60)  # fmt: skip
        assert again.status_code == 200 and again.json()["model_cached"] is True
        assert len(again.json()["translations"]) == 2
        # another user's job is not told apart from a missing one; no token is a 401
        other = env.cli("token", "create", "mallory").stdout.strip()
        assert httpx.post(url, headers=h(other), json={"sentences": ["A dog ."]},
                          timeout=60).status_code == 404  # fmt: skip
        assert httpx.post(url, json={"sentences": ["A dog ."]}, timeout=60).status_code == 401
        unknown = httpx.post(f"{base}/v1/jobs/{'0' * 12}/translate", headers=h(token),
                             json={"sentences": ["A dog ."]}, timeout=60)  # fmt: skip
        assert unknown.status_code == 404 and "no job" in unknown.json()["detail"]
        # bad input: clear 4xx with the reason
        for payload, words in (
            ({"sentences": ["A dog ."] * 65}, "at most 64"),
            ({"sentences": []}, "at least 1"),
            ({"sentences": ["x" * 1001]}, "at most 1000"),
            ({"sentences": ["A dog .", "   "]}, "sentence:2: empty sentence"),
            ({"sentences": "A dog ."}, "list"),
            ({"sentences": ["A dog ."], "beam": 0}, "beam"),
            ({"sentences": ["A dog ."], "extra": 1}, "extra"),
        ):
            bad = httpx.post(url, headers=h(token), json=payload, timeout=60)
            assert bad.status_code == 422, (payload, bad.text)
            assert words in bad.json()["detail"], (payload, bad.text)
        # the request body's schema documents its bounds, with an example
        schema = httpx.get(f"{base}/openapi.json", timeout=30).json()
        body_schema = schema["components"]["schemas"]["TranslateRequest"]
        assert body_schema["examples"] and body_schema["properties"]["sentences"]["maxItems"] == 64
        responses = schema["paths"]["/v1/jobs/{job_id}/translate"]["post"]["responses"]
        assert {"404", "409", "422"} <= set(responses)
    # through a parser API (SYNATTN_PARSER_URL): the same parse, the same translations
    from tests.parser.conftest import TEST_LIMITS, api_server

    with (
        api_server(TEST_LIMITS, tmp_path / "parser.log") as (parser, parser_url),
        serving(env0, SYNATTN_PARSER_URL=parser_url) as (base, token, env),
    ):
        url = f"{base}/v1/jobs/{job}/translate"
        remote = httpx.post(url, headers=h(token), json={"sentences": lines}, timeout=120)
        assert remote.status_code == 200, remote.text
        assert remote.json()["translations"] == body["translations"]
        state = torch.load(checkpoint, map_location="cpu", weights_only=False)
        state["parse"]["parser"]["version"] = "spacy-0.0.1"
        torch.save(state, checkpoint)
        other = httpx.post(url, headers=h(token), json={"sentences": ["A dog ."]}, timeout=60)
        assert other.status_code == 409, other.text
        assert "the parser API differs" in other.json()["detail"]
        parser.terminate()
        parser.wait(20)
        dead = httpx.post(url, headers=h(token), json={"sentences": ["A dog ."]}, timeout=60)
        assert dead.status_code == 502 and "parser API" in dead.json()["detail"]
    # in this process: a model that records another parser is refused with the reason
    with serving(env0) as (base, token, env):
        url = f"{base}/v1/jobs/{job}/translate"
        mismatch = httpx.post(url, headers=h(token), json={"sentences": ["A dog ."]},
                              timeout=60)  # fmt: skip
        assert mismatch.status_code == 409, mismatch.text
        assert "version 'spacy-0.0.1' at training" in mismatch.json()["detail"]
