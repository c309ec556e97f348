"""Paths and request bodies documented where users look: an example for every request body of
both APIs, a 422 for a body of the wrong shape that shows what it looks like, errors that name
a path saying which root it was resolved against, and a grid written for the CLI posted to the
API unchanged.

Nothing here trains: a data root of configs over stand-in data (``tests.stand_in``) is enough
for what is checked at submit time."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from pydantic import BaseModel

from tests.jobs.conftest import Env, h, serving, tiny_yaml
from tests.stand_in import stand_in_data

GRID_HINT = (
    "a grid sent to the API names its config relative to the data root, not to the grid file "
    "as `synattn experiment run` does"
)


@pytest.fixture
def light(tmp_path: Path) -> Env:
    """A queue (embedded broker and store) over a data root holding ``configs/tiny.yaml``."""
    root, home = tmp_path / "root", tmp_path / "home"
    home.mkdir()
    fake = stand_in_data(root / "data")  # real enough for the checks at the door
    tiny_yaml(fake, root / "configs" / "tiny.yaml")
    return Env(root, home, f"sqla+sqlite:///{home / 'broker.sqlite'}")


def job_app(tmp_path: Path) -> FastAPI:
    from synattn_jobs.api import create_app
    from synattn_jobs.settings import JobSettings

    settings = JobSettings(home=tmp_path / "home", data_root=tmp_path)
    settings.prepare()
    return create_app(settings)


def parser_app() -> FastAPI:
    from synattn_parser.api import create_app
    from synattn_parser.settings import ParserSettings

    return create_app(ParserSettings())


def api_routes(routes: Iterable[Any]) -> Iterator[APIRoute]:
    """The API routes of an app, inside included routers too (FastAPI keeps those nested)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif (inner := getattr(route, "original_router", None)) is not None:
            yield from api_routes(inner.routes)


def body_models(app: FastAPI) -> dict[tuple[str, str], type[BaseModel]]:
    """Every (method, path) that takes a body, and the model the body is validated by."""
    out = {}
    for route in api_routes(app.routes):
        if route.body_field is not None:
            model = route.body_field.field_info.annotation
            assert isinstance(model, type) and issubclass(model, BaseModel), route.path
            out.update({(m.lower(), route.path_format): model for m in route.methods})
    return out


def schema_examples(schema: dict[str, Any], op: dict[str, Any]) -> list[Any]:
    """The examples /openapi.json gives for an operation's JSON body (its media type's or its
    schema's)."""
    media = op["requestBody"]["content"]["application/json"]
    body = media["schema"]
    if "$ref" in body:
        body = schema["components"]["schemas"][body["$ref"].rsplit("/", 1)[-1]]
    examples = list(body.get("examples") or [])
    examples += [e["value"] for e in (media.get("examples") or {}).values()]
    return examples + ([media["example"]] if "example" in media else [])


@pytest.mark.parametrize("which", ["jobs", "parser"])
def test_every_request_body_has_an_example_its_model_accepts(which: str, tmp_path: Path) -> None:
    app = job_app(tmp_path) if which == "jobs" else parser_app()
    schema = app.openapi()
    models = body_models(app)
    seen = set()
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            if "requestBody" not in op:
                continue
            seen.add((method, path))
            examples = schema_examples(schema, op)
            assert examples, f"{method.upper()} {path}: its body has no example"
            for example in examples:
                models[(method, path)].model_validate(example)
    assert seen == set(models)
    assert len(seen) >= (7 if which == "jobs" else 1)


def test_the_api_description_and_settings_say_where_paths_resolve(tmp_path: Path) -> None:
    from synattn_jobs import settings

    text = job_app(tmp_path).openapi()["info"]["description"]
    for words in ("SYNATTN_DATA_ROOT", "working directory", "`configs/tiny.yaml`, not `../"):
        assert words in text
    assert settings.__doc__ is not None and "defaults to the working directory" in settings.__doc__
    field = settings.JobSettings.model_fields["data_root"]
    assert field.description is not None and "working directory" in field.description


def post(base: str, token: str, path: str, body: Any) -> httpx.Response:
    return httpx.post(f"{base}{path}", headers=h(token), json=body, timeout=30)


def test_a_body_of_the_wrong_shape_is_answered_with_what_it_looks_like(light: Env) -> None:
    parse_body = '{"spec": {"src": "corpora/m30k/train.en", "out": "datasets/m30k/train"}}'
    with serving(light) as (base, token, _):
        r = post(base, token, "/v1/jobs/parse", {"src": "corpora/x.en", "out": "datasets/x"})
        assert r.status_code == 422, r.text
        assert r.json()["detail"] == (
            "body.spec: Field required (and 2 more); the body of POST /v1/jobs/parse looks "
            f"like {parse_body} (see /docs)"
        )
        assert r.json()["errors"][0]["loc"] == ["body", "spec"]
        for path, body, shown in [
            ("/v1/jobs/train", {"config": "configs/tiny.yaml"}, '{"spec": {"config": '),
            ("/v1/jobs/parse", [], parse_body),
            ("/v1/experiments", {"config": "configs/tiny.yaml"}, '{"name": "demo", '),
            ("/v1/jobs/train", {"spec": {"config": "configs/tiny.yaml", "evaluat": {}}},
             '{"spec": {"config": "configs/tiny.yaml"}}'),
        ]:  # fmt: skip
            detail = post(base, token, path, body).json()["detail"]
            assert f"; the body of POST {path} looks like {shown}" in detail, detail
            assert detail.endswith(" (see /docs)"), detail
        # a body of the right shape with a wrong value: the message is the error alone
        r = post(base, token, "/v1/jobs/parse", {"spec": {"src": "a", "out": "b", "limit": 0}})
        assert r.json()["detail"] == "body.spec.limit: Input should be greater than or equal to 1"
        # the first examples are requests a data root holding configs/tiny.yaml accepts
        from synattn_jobs.schemas import ExperimentSpec, TrainRequest

        for path, model in (("/v1/jobs/train", TrainRequest), ("/v1/experiments", ExperimentSpec)):
            extra = model.model_config.get("json_schema_extra")
            assert isinstance(extra, dict) and isinstance(extra["examples"], list)
            r = post(base, token, path, extra["examples"][0])
            assert r.status_code == 201, r.text


def test_the_parser_api_shows_its_body_too() -> None:
    r = TestClient(parser_app()).post("/v1/parse", json={"texts": ["The cat sat."]})
    assert r.status_code == 422
    assert r.json()["detail"] == (
        "body.sentences: Field required (and 1 more); the body of POST /v1/parse looks like "
        '{"sentences": ["The cat sat on the mat."]} (see /docs)'
    )


def test_errors_that_name_a_path_say_which_root_it_was_resolved_against(light: Env) -> None:
    root = light.root.resolve()
    note = f"paths in a request are resolved against the job service's data root {root} "
    note += "(SYNATTN_DATA_ROOT)"
    cases = [
        ("/v1/jobs/train", {"spec": {"config": "../configs/tiny.yaml"}},
         f"config '../configs/tiny.yaml' must not contain '..': {note}"),
        ("/v1/jobs/train", {"spec": {"config": "/etc/passwd"}},
         f"config '/etc/passwd' is outside the data root: {note}"),
        ("/v1/jobs/train", {"spec": {"config": "configs/nope.yaml"}},
         f"config 'configs/nope.yaml': no such file under the job service's data root {root} "
         "(SYNATTN_DATA_ROOT)"),
        ("/v1/jobs/train", {"out": "/etc", "spec": {"config": "configs/tiny.yaml"}},
         "out '/etc' is outside the runs folder: paths in a request are resolved against the "
         f"job service's runs folder {root / 'runs'} (SYNATTN_RUNS_DIR)"),
        ("/v1/jobs/train",
         {"spec": {"config": "configs/tiny.yaml", "overrides": {"data.train": "/etc"}}},
         "data.train '/etc' is outside the data root: a config's data paths are resolved "
         f"against its own folder and must lie inside the job service's data root {root} "
         "(SYNATTN_DATA_ROOT)"),
        ("/v1/jobs/parse", {"spec": {"src": "../x.en", "out": "parsed/x"}},
         f"src '../x.en' must not contain '..': {note}"),
        ("/v1/jobs/parse", {"spec": {"src": "corpora/x.en", "out": "parsed/x"}},
         f"src 'corpora/x.en': no such file under the job service's data root {root} "
         "(SYNATTN_DATA_ROOT)"),
    ]  # fmt: skip
    with serving(light) as (base, token, _):
        for path, body, want in cases:
            r = post(base, token, path, body)
            assert r.status_code == 422, r.text
            assert r.json()["detail"] == want


def test_a_grid_written_for_the_cli_and_posted_unchanged_says_how_to_write_it(
    light: Env,
) -> None:
    """A grid file names its config relative to itself (the CLI resolves it); the API resolves
    a grid's config against the data root. The CLI queues the file as it is; the API refuses
    the same grid, saying what to write, and accepts that."""
    folder = light.root / "experiments"
    folder.mkdir()
    grid = {"name": "cli-grid", "config": "../configs/tiny.yaml", "variants": ["vanilla", "dea"]}
    (folder / "grid.yaml").write_text(yaml.safe_dump(grid), encoding="utf-8")
    assert light.cli("experiment", "run", str(folder / "grid.yaml")).returncode == 0
    root = light.root.resolve()
    note = f"paths in a request are resolved against the job service's data root {root} "
    note += "(SYNATTN_DATA_ROOT)"
    with serving(light) as (base, token, _):
        r = post(base, token, "/v1/experiments", {**grid, "name": "api-grid"})
        assert r.status_code == 422, r.text
        assert r.json()["detail"] == (
            f"config '../configs/tiny.yaml' must not contain '..': {note}; {GRID_HINT}: "
            "write config: 'configs/tiny.yaml'"
        )
        r = post(base, token, "/v1/experiments",
                 {**grid, "name": "api-grid", "config": "configs/tiny.yaml"})  # fmt: skip
        assert r.status_code == 201, r.text
        assert [j["variant"] for j in r.json()["jobs"]] == ["vanilla", "dea"]
        # nothing under the data root matches: the hint without a guess
        r = post(base, token, "/v1/experiments", {**grid, "config": "../other/tiny.yaml"})
        assert r.json()["detail"].endswith(f"{note}; {GRID_HINT}"), r.text
        r = post(base, token, "/v1/experiments", {**grid, "config": "tiny.yaml"})
        assert r.json()["detail"] == (
            f"config 'tiny.yaml': no such file under the job service's data root {root} "
            f"(SYNATTN_DATA_ROOT); {GRID_HINT}"
        )
        # an absolute path is no grid-file habit: the plain message
        r = post(base, token, "/v1/experiments", {**grid, "config": "/etc/passwd"})
        assert r.json()["detail"] == f"config '/etc/passwd' is outside the data root: {note}"
