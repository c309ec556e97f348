"""The Multi30k downloader uses a verified local copy and refuses a wrong checksum."""

from __future__ import annotations

import pytest

from synattn_shared.datasets import MULTI30K, fetch, multi30k_lines
from tests.conftest import SHARED_DATA, data_file


def test_local_copy_is_verified_and_read():
    data_file("multi30k", "val.en.gz")
    lines = list(multi30k_lines("val", "en", SHARED_DATA))
    assert len(lines) == 1014 and all(lines)
    assert len(list(multi30k_lines("train", "en", SHARED_DATA, limit=5))) == 5


def test_wrong_checksum_is_refused(tmp_path):
    (tmp_path / "multi30k").mkdir()
    (tmp_path / "multi30k" / "val.en.gz").write_bytes(b"not the data")
    with pytest.raises(ValueError, match="sha256"):
        fetch(MULTI30K["val.en.gz"], tmp_path, "multi30k")
