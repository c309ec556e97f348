"""The documentation site: its generated references match the code, and it builds strict."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def gen_reference() -> ModuleType:
    """``tools/gen_reference.py`` as a module (tools/ is not a package)."""
    path = REPO / "tools" / "gen_reference.py"
    spec = importlib.util.spec_from_file_location("tools_gen_reference", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_references_match_the_code() -> None:
    """In a fresh interpreter, as ``make docs`` runs it: other tests in this process may have
    registered variants or changed settings the pages are drawn from."""
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "gen_reference.py"), "--check"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_config_reference_lists_every_section_key_variant_option_and_preset() -> None:
    from pydantic import BaseModel

    from synattn_trainer.config import TrainConfig, VariantSpec
    from synattn_trainer.presets import VARIANTS
    from synattn_trainer.variant_options import OPTIONS

    text = gen_reference().render_config()
    for section, field in TrainConfig.model_fields.items():
        model = field.annotation
        if isinstance(model, type) and issubclass(model, BaseModel):
            assert f"## `{section}`" in text, section
            for key in model.model_fields:
                assert f"| `{key}` |" in text, (section, key)
        else:
            assert f"`{section}`" in text, section
    for key in VariantSpec.model_fields:
        assert f"| `{key}` |" in text, key
    for name, options in OPTIONS.items():
        part = text.split(f"### `{name}`\n", 1)[1].split("\n### ", 1)[0]
        for key in options.model_fields:
            assert f"| `{key}` |" in part, (name, key)
    for name in VARIANTS:
        assert f"| `{name}` |" in text, name


def test_config_reference_example_is_a_valid_config() -> None:
    import yaml

    from synattn_trainer.config import TrainConfig

    text = gen_reference().render_config()
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    TrainConfig.model_validate(yaml.safe_load(example))


def test_cli_reference_lists_every_command_and_option() -> None:
    gen = gen_reference()
    text = gen.render_cli()
    root = gen.synattn_group()

    def walk(command: Any, path: str, parent: Any) -> None:
        ctx = command.make_context(path.split()[-1], [], parent=parent, resilient_parsing=True)
        assert f"# {path}\n" in text, path
        for param in command.params:
            if param.param_type_name == "option" and not param.hidden:
                assert f"`{param.opts[0]}" in text, (path, param.opts)
        for name in getattr(command, "commands", {}):
            walk(command.get_command(ctx, name), f"{path} {name}", ctx)

    root_ctx = root.make_context("synattn", [], resilient_parsing=True)
    for name in root.list_commands(root_ctx):
        walk(root.get_command(root_ctx, name), f"synattn {name}", root_ctx)


def test_prose_is_escaped_outside_code_spans() -> None:
    md = gen_reference().md
    assert md("append </s> to ``src`` | *not* $x$") == (
        r"append &lt;/s&gt; to `src` \| \*not\* \$x\$"
    )
    assert md("`a|b <c>`") == "`a|b <c>`"


def test_site_builds_strict(tmp_path: Path) -> None:
    """``mkdocs build --strict``: a broken link or anchor, a page missing from the nav, or an
    API reference that does not resolve fails it (about 5 s). Not ``-q``: it hides the
    warnings from the strict count too, and the build passed with them."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for page in ("index.html", "reference/config.html", "reference/cli.html",
                 "reference/python.html", "papers/index.html"):  # fmt: skip
        assert (site / page).is_file(), page
    api = (site / "reference" / "python.html").read_text(encoding="utf-8")
    assert 'id="synattn_trainer.api.load"' in api  # mkdocstrings resolved the API
