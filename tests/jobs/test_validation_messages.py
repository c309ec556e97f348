"""Validation errors read as one line: ``where: reason``, never pydantic's ``Value error, ``
prefix or an empty location (``config x.yaml: : Value error, ...`` was the message)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from synattn_jobs.schemas import AttentionRequest  # module level: FastAPI resolves the annotation
from synattn_shared.errors import one_line, validation_line

SYNATTN = str(Path(sys.executable).with_name("synattn"))
UNKNOWN = "unknown attention variant 'slr-gated'; known: vanilla, dea"


def bad_config(root: Path, attention: object) -> Path:
    """A config that is fine but for its ``attention`` block (a model validator refuses it)."""
    cfg = {"name": "bad", "data": {"train": "data/train", "valid": "data/valid",
                                   "tokenizer": "data/tokenizer.json"},
           "attention": attention}  # fmt: skip
    path = root / "configs" / "bad.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def test_the_line_of_a_model_validator_error_has_no_prefix_and_no_empty_location() -> None:
    assert validation_line({"loc": (), "msg": "Value error, bad thing"}) == "bad thing"
    assert validation_line({"loc": ("body", "", 0), "msg": "Assertion failed, x"}) == "body.0: x"
    assert validation_line({"loc": ("a",), "msg": "Field required"}) == "a: Field required"


@pytest.mark.parametrize(
    ("attention", "want"),
    [
        ({"enc_self": [{"name": "slr-gated"}]}, UNKNOWN),
        # an error inside a variant's options, wrapped by the config's validator: no prefix
        # at either level
        ({"enc_self": [{"name": "slr", "options": {"tau": -1}}]},
         "variant 'slr' on enc_self: tau: Input should be greater than 0"),
    ],
)  # fmt: skip
def test_a_config_refused_before_it_is_queued(
    tmp_path: Path, attention: object, want: str
) -> None:
    from synattn_jobs.errors import BadJobSpec
    from synattn_jobs.settings import JobSettings
    from synattn_jobs.trainconfig import validate_train_config

    path = bad_config(tmp_path, attention)
    settings = JobSettings(data_root=tmp_path, home=tmp_path / "home")
    with pytest.raises(BadJobSpec) as info:
        validate_train_config(path, {}, settings)
    assert str(info.value).startswith(f"config bad.yaml: {want}"), str(info.value)
    assert "Value error" not in str(info.value) and ": : " not in str(info.value)


def test_the_job_api_and_the_train_command_say_it_in_one_line(tmp_path: Path) -> None:
    from synattn_jobs.api import create_app
    from synattn_jobs.settings import JobSettings

    path = bad_config(tmp_path, {"enc_self": [{"name": "slr-gated"}]})
    settings = JobSettings(data_root=tmp_path, home=tmp_path / "home")
    settings.prepare()
    app = create_app(settings)
    token = app.state.store.create_token("alice")
    with TestClient(app) as client:
        r = client.post("/v1/jobs/train", json={"spec": {"config": "configs/bad.yaml"}},
                        headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith(f"config bad.yaml: {UNKNOWN}"), r.text

    proc = subprocess.run([SYNATTN, "train", str(path), "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2
    line = " ".join(proc.stderr.split())
    assert line.startswith(f"error: {path}: {UNKNOWN}"), proc.stderr
    assert "Value error" not in line and "validation error for" not in line


def test_one_line_folds_any_other_error() -> None:
    assert one_line(ValueError("a\n  b")) == "a b"


def test_a_body_refused_by_a_model_validator_reads_as_one_line() -> None:
    """The API's 422 handler (``install_error_handlers``, both APIs) on a real request model
    whose validator refuses the body: ``body: reason``, not ``body: Value error, reason``."""
    from fastapi import FastAPI

    from synattn_shared.webapi import install_error_handlers

    app = FastAPI()
    install_error_handlers(app)

    @app.post("/attention")
    def attention(req: AttentionRequest) -> dict[str, str]:
        return {}

    with TestClient(app) as client:
        r = client.post("/attention", json={"row": 1, "text": "It rained."})
    assert r.status_code == 422
    body = r.json()
    assert body["detail"] == "body: give a row or a text, not both", body
    assert body["errors"][0]["msg"] == "give a row or a text, not both"
