"""Raw-text translation over real HTTP: a real worker trains a small syntax-aware run, then
``POST /v1/jobs/{id}/translate`` parses sentences as its training data was parsed and answers
what ``synattn translate --data`` gives for the same sentences in shards; owner checks, bounds,
an unfinished job and a mismatched parse are clear 4xx, never a 500."""

from __future__ import annotations

from pathlib import Path

import httpx
import torch

from tests.jobs.conftest import Env, h, serving

ATTENTION = {"enc_self": [{"name": "slr", "layers": [1], "options": {"mode": "gated"}}]}


def _train(base: str, token: str) -> str:
    r = httpx.post(f"{base}/v1/jobs/train", headers=h(token), json={"spec": {
        "config": "configs/tiny.yaml",
        "overrides": {"attention": ATTENTION, "decode": {"max_len_b": 5}}}})  # fmt: skip
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_translate_raw_sentences_of_a_finished_run(
    embedded: Env, m30k: dict[str, Path], tmp_path: Path
) -> None:
    from synattn_parser.batch import parse_corpus
    from synattn_trainer.inference import translate_split

    lines = (m30k["valid"].parent / "valid.en").read_text(encoding="utf-8").splitlines()[:5]
    with serving(embedded) as (base, token, env):
        job = _train(base, token)
        url = f"{base}/v1/jobs/{job}/translate"
        early = httpx.post(url, headers=h(token), json={"sentences": lines}, timeout=60)
        assert early.status_code == 409 and "queued" in early.json()["detail"]
        env.worker("train")
        done = env.wait(job, {"succeeded"}, timeout=300)
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
        serving(embedded, SYNATTN_PARSER_URL=parser_url) as (base, token, env),
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
    with serving(embedded) as (base, token, env):
        url = f"{base}/v1/jobs/{job}/translate"
        mismatch = httpx.post(url, headers=h(token), json={"sentences": ["A dog ."]},
                              timeout=60)  # fmt: skip
        assert mismatch.status_code == 409, mismatch.text
        assert "version 'spacy-0.0.1' at training" in mismatch.json()["detail"]
