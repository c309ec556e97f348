"""``synattn variants``: the attention variants this install offers (built-in and from plugins),
and the contract check a variant must pass (``synattn_trainer.variant_check``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from synattn_shared.cli import console, fail
from synattn_shared.errors import one_line


def variants_list() -> None:
    """Every attention variant a config may name: built-in or from which plugin (name,
    version, where it was found), and what its options are."""
    from synattn_trainer.plugins import PluginError, describe, owner
    from synattn_trainer.variant_options import OPTIONS

    try:
        rows = describe()
    except PluginError as exc:
        raise fail(one_line(exc)) from None
    width = [max(len(r[i]) for r in rows) for i in (0, 1)]
    print(f"{'variant':<{width[0]}}  {'from':<{width[1]}}  options")
    for name, origin in rows:
        doc = (OPTIONS[name].__doc__ or "").strip().split("\n\n")[0]
        print(f"{name:<{width[0]}}  {origin:<{width[1]}}  {' '.join(doc.split())}")
    plugins = {p.name: p for n, _ in rows if (p := owner(n)) is not None}
    for p in plugins.values():
        print(f"plugin {p.name} {p.version}: {p.origin} (source sha256 {p.sha256[:12]})")


def variants_check(
    name: Annotated[
        str | None,
        typer.Argument(help="a variant's name (default: every installed plugin's variants)"),
    ] = None,
    options: Annotated[
        str | None,
        typer.Option(help="the options to check with, as YAML or JSON (default: its defaults)"),
    ] = None,
    keep: Annotated[
        Path | None,
        typer.Option(help="folder for the synthetic corpus and the runs (default: removed)"),
    ] = None,
) -> None:
    """Run the contract of a variant on a tiny model and a synthetic corpus: options refused
    in one line, gradients reach its parameters, padded keys get no weight, analysis reads the
    attention applied, runs are deterministic and resume exactly. One line per check; exits 1
    when one fails."""
    import yaml

    from synattn_trainer.plugins import PluginError, load_plugins
    from synattn_trainer.presets import unknown_variant
    from synattn_trainer.variant_check import check_variant
    from synattn_trainer.variant_options import OPTIONS

    try:
        plugins = load_plugins()
        if name is not None and name not in OPTIONS:
            raise fail(unknown_variant(name))
    except PluginError as exc:
        raise fail(one_line(exc)) from None
    opts: Any = {}
    if options is not None:
        try:
            opts = yaml.safe_load(options)
        except yaml.YAMLError:
            raise fail(f"--options {options!r}: not YAML or JSON") from None
        if not isinstance(opts, dict):
            raise fail(f"--options {options!r}: a mapping of option to value")
    names = [name] if name is not None else [v for p in plugins.values() for v in p.variants]
    if not names:
        raise fail("no plugin is installed (entry points synattn.variants, SYNATTN_PLUGINS); "
                   "name a variant to check a built-in one")  # fmt: skip
    failed = 0
    for variant in names:
        for result in check_variant(variant, opts, keep / variant if keep else None):
            failed += not result.ok
            console.print(result.line(), markup=False, highlight=False)
    if failed:
        raise typer.Exit(code=1)


def register(app: typer.Typer) -> None:
    """``synattn variants list`` and ``synattn variants check``."""
    variants = typer.Typer(
        help="Attention variants: built-in and from plugins (docs/plugins.md).",
        no_args_is_help=True,
    )
    variants.command("list")(variants_list)
    variants.command("check")(variants_check)
    app.add_typer(variants, name="variants")
