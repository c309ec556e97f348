"""Every UD English-EWT dev sentence parses pretokenised through the API, token counts kept."""

from __future__ import annotations

import httpx

from synattn_shared.readers import read_conllu
from tests.conftest import data_file


def test_every_ud_ewt_dev_sentence_parses_pretokenised(client: httpx.Client) -> None:
    records = list(read_conllu(data_file("ud_ewt/en_ewt-ud-dev.conllu")))
    assert len(records) > 2000
    batch = 64
    for start in range(0, len(records), batch):
        chunk = records[start : start + batch]
        r = client.post(
            "/v1/parse",
            json={"sentences": [list(x.words) for x in chunk], "ids": [x.sent_id for x in chunk]},
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["errors"] == 0, [s for s in body["sentences"] if "error" in s][:1]
        for rec, got in zip(chunk, body["sentences"], strict=True):
            assert got["sent_id"] == rec.sent_id
            assert got["words"] == list(rec.words)
            assert len(got["dep_head"]) == rec.n and got["has_syntax"]
