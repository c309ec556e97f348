"""Attention variants from outside the repository: plugins (docs/plugins.md).

A plugin is an installed package that declares itself under the entry-point group
``synattn.variants`` (its ``pyproject.toml``: ``[project.entry-points."synattn.variants"]
NAME = "module"``), or, for a quick experiment, a module or ``.py`` file named in the setting
``SYNATTN_PLUGINS`` (``os.pathsep``-separated: ``path/to/file.py:package.module``). Either way
the module (or the entry point's object) declares, with no torch needed to read it:

- ``VARIANTS``: ``{name: PluginVariant(OptionsModel, "module:Class")}``: each variant's options
  model (a ``VariantConfig`` subclass) and its ``AttentionVariant`` class, by import path (loaded
  when a model is built, so the job API validates configs without torch) or the class itself;
- ``PRESETS`` (optional): ``{name: fragment}``, config fragments as ``presets.VARIANTS`` holds;
- ``PAPER`` (optional): ``(cite, method, title)``, what ``synattn presets`` shows beside them;
- a file or module plugin's ``NAME`` and ``__version__`` (defaults: its module's name and
  ``unversioned``); a package's are its entry point's name and its distribution's version.

Plugins join the registries the built-ins are in (``variant_options.OPTIONS``,
``presets.VARIANTS``, ``variants.REGISTRY``) under the same rules. They are found and read once
per process, on the first look-up of a variant or preset name (``PluginAware``), and a name that
clashes with a built-in or another plugin's is refused then, naming both: every look-up raises
that ``PluginError`` until the install is fixed.

A run records the plugins its variants come from (``record``): name, version and a SHA-256 of
the plugin's source files. Checkpoints keep it under ``PLUGINS_KEY`` and a queued job's spec
keeps the one made at submit time; a checkpoint resumed or loaded, or a job run by a worker,
where the plugin is missing or differs is refused with the reason (``check_recorded``), so a
name never stands for another method.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch-free at import: the job API reads plugins without PyTorch
    from synattn_trainer.config import TrainConfig
    from synattn_trainer.presets import Paper
    from synattn_trainer.variants.base import AttentionVariant

from synattn_trainer import plugin_registry
from synattn_trainer.plugin_registry import (
    ENTRY_POINT_GROUP,
    PLUGINS_ENV,
    PLUGINS_KEY,
    VARIANT_NAME,
    WHERE,
    Plugin,
    PluginAware,
    PluginError,
    PluginMismatch,
    PluginVariant,
    _plugins,
    _preset_owner,
    _variant_owner,
    builtin,
    disable,
    load_plugins,
    owner,
    preset_owner,
    reset,
)

__all__ = [  # the registry's names, imported from here as they always were
    "ENTRY_POINT_GROUP",
    "PLUGINS_ENV",
    "PLUGINS_KEY",
    "VARIANT_NAME",
    "WHERE",
    "Plugin",
    "PluginAware",
    "PluginError",
    "PluginMismatch",
    "PluginVariant",
    "builtin",
    "check_recorded",
    "describe",
    "disable",
    "implementation",
    "load_plugins",
    "owner",
    "preset_owner",
    "record",
    "reset",
    "source_digest",
]


# ---------------------------------------------------------------------------------- discovery


@dataclass
class _Found:
    name: str
    version: str
    origin: str
    declared: Any  # the module or object holding VARIANTS, PRESETS, PAPER
    roots: list[Path]  # what source_digest hashes


def _discover() -> list[_Found]:
    found: list[_Found] = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = ep.dist
        version = dist.version if dist is not None else "unknown"
        origin = f"entry point {ep.name} = {ep.value}" + (
            f" of {dist.name} {version}" if dist is not None else ""
        )
        try:
            declared = ep.load()
        except Exception as exc:
            raise PluginError(f"plugin {ep.name!r} ({origin}) cannot be loaded: "
                              f"{type(exc).__name__}: {exc}") from None  # fmt: skip
        roots = _module_roots(ep.module)
        found.append(_Found(ep.name, version, origin, declared, roots))
    for entry in filter(
        None, (e.strip() for e in os.environ.get(PLUGINS_ENV, "").split(os.pathsep))
    ):
        found.append(_from_setting(entry))
    return found


def _from_setting(entry: str) -> _Found:
    """A ``SYNATTN_PLUGINS`` entry: a ``.py`` file, a package folder, or a module name."""
    origin = f"{PLUGINS_ENV} entry {entry}"
    path = Path(entry).expanduser()
    try:
        if entry.endswith(".py") or os.sep in entry or path.is_dir():
            if not path.exists():
                raise PluginError(f"{origin}: no such file or folder")
            module = _load_path(path.resolve())
            roots = [path.resolve()]
        else:
            module = importlib.import_module(entry)
            roots = _module_roots(entry)
    except PluginError:
        raise
    except Exception as exc:
        raise PluginError(f"{origin} cannot be loaded: {type(exc).__name__}: {exc}") from None
    name = str(getattr(module, "NAME", module.__name__.removeprefix("synattn_plugin_")))
    version = str(getattr(module, "__version__", "unversioned"))
    return _Found(name, version, origin, module, roots)


def _load_path(path: Path) -> ModuleType:
    """A plugin file or package folder imported as ``synattn_plugin_<name>``."""
    stem = path.stem if path.is_file() else path.name
    module_name = "synattn_plugin_" + re.sub(r"\W", "_", stem)
    if path.is_dir():
        spec = importlib.util.spec_from_file_location(
            module_name, path / "__init__.py", submodule_search_locations=[str(path)]
        )
    else:
        spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"{PLUGINS_ENV} entry {path}: not a Python file or package")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # its classes pickle, and "module:Class" paths resolve
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def _module_roots(module: str) -> list[Path]:
    """The files of a module's top-level package (or the module file), found without
    importing anything more."""
    top = module.split(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(p) for p in spec.submodule_search_locations]
    return [Path(spec.origin)] if spec.origin and spec.origin != "built-in" else []


def source_digest(roots: list[Path]) -> str:
    """SHA-256 over the source files under ``roots`` (paths relative to each root, and their
    bytes; compiled caches left out)."""
    h = hashlib.sha256()
    for root in sorted(set(roots)):
        files = (
            [root]
            if root.is_file()
            else sorted(
                p
                for p in root.rglob("*")
                if p.is_file()
                and "__pycache__" not in p.parts
                and p.suffix not in (".pyc", ".pyo")
            )
        )
        for f in files:
            rel = f.name if f == root else f.relative_to(root).as_posix()
            h.update(rel.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


# ---------------------------------------------------------------------------------- registration


def _declared(found: _Found) -> Plugin:
    """A found plugin's declaration, checked."""
    from synattn_shared.paths import SLUG_PATTERN
    from synattn_trainer.variant_options import VariantConfig

    who = f"plugin {found.name!r} ({found.origin})"
    obj = found.declared
    variants = getattr(obj, "VARIANTS", None)
    presets = getattr(obj, "PRESETS", {}) or {}
    paper = getattr(obj, "PAPER", None)
    if not isinstance(variants, Mapping) and not presets:
        raise PluginError(f"{who} declares no VARIANTS mapping (nor PRESETS)")
    variants = variants or {}
    if not isinstance(presets, Mapping):
        raise PluginError(f"{who}: PRESETS must be a mapping of preset name to config fragment")
    for name, v in variants.items():
        if not isinstance(name, str) or not VARIANT_NAME.fullmatch(name):
            raise PluginError(f"{who}: variant name {name!r} must match {VARIANT_NAME.pattern}")
        if not isinstance(v, PluginVariant):
            raise PluginError(f"{who}: variant {name!r} must be a PluginVariant(options, class)")
        if not (isinstance(v.options, type) and issubclass(v.options, VariantConfig)):
            raise PluginError(f"{who}: variant {name!r}: options must subclass VariantConfig")
        if isinstance(v.implementation, str) and ":" not in v.implementation:
            raise PluginError(f"{who}: variant {name!r}: implementation must be 'module:Class'")
    for name, fragment in presets.items():
        if not isinstance(name, str) or not re.fullmatch(SLUG_PATTERN, name):
            raise PluginError(f"{who}: preset name {name!r} is not a slug ({SLUG_PATTERN})")
        if not isinstance(fragment, Mapping):
            raise PluginError(f"{who}: preset {name!r} must be a mapping (a config fragment)")
    if paper is not None and not (
        isinstance(paper, tuple) and len(paper) == 3 and all(isinstance(x, str) for x in paper)
    ):
        raise PluginError(f"{who}: PAPER must be a (cite, method, title) tuple of strings")
    roots = list(found.roots)
    for v in variants.values():  # the class's own package too, where it lives elsewhere
        if isinstance(v.implementation, str):
            roots += _module_roots(v.implementation.split(":")[0])
    return Plugin(
        name=found.name,
        version=found.version,
        sha256=source_digest(roots),
        origin=found.origin,
        variants=dict(variants),
        presets={k: dict(f) for k, f in presets.items()},
        paper=paper,
    )


def _register_all(found: list[_Found]) -> None:
    """Check every plugin against the built-ins and each other, then register them all, or
    none (a clash leaves the registries as they were)."""
    from synattn_trainer.presets import VARIANTS
    from synattn_trainer.variant_options import OPTIONS

    plugins: dict[str, Plugin] = {}
    variant_owner: dict[str, str] = {}
    preset_owner: dict[str, str] = {}
    builtin_variants = set(dict.keys(OPTIONS))
    builtin_presets = set(dict.keys(VARIANTS))
    for f in found:
        p = _declared(f)
        if p.name in plugins:
            raise PluginError(
                f"two plugins are named {p.name!r}: {plugins[p.name].origin} and "
                f"{p.origin}; uninstall or rename one"
            )
        for v in p.variants:
            if v in builtin_variants:
                raise PluginError(
                    f"plugin {p.name!r} ({p.origin}) declares variant {v!r}, "
                    "which is a built-in variant; rename it in the plugin"
                )
            if v in variant_owner:
                other = plugins[variant_owner[v]]
                raise PluginError(
                    f"variant {v!r} is declared by plugin {other.name!r} "
                    f"({other.origin}) and by plugin {p.name!r} ({p.origin}); "
                    "uninstall or rename one"
                )
            variant_owner[v] = p.name
        for s in p.presets:
            if s in builtin_presets:
                raise PluginError(
                    f"plugin {p.name!r} ({p.origin}) declares preset {s!r}, "
                    "which is a built-in preset; rename it in the plugin"
                )
            if s in preset_owner:
                other = plugins[preset_owner[s]]
                raise PluginError(
                    f"preset {s!r} is declared by plugin {other.name!r} "
                    f"({other.origin}) and by plugin {p.name!r} ({p.origin}); "
                    "uninstall or rename one"
                )
            preset_owner[s] = p.name
        plugins[p.name] = p
    _plugins.update(plugins)
    _variant_owner.update(variant_owner)
    _preset_owner.update(preset_owner)
    try:
        for p in plugins.values():
            for v, decl in p.variants.items():
                dict.__setitem__(OPTIONS, v, decl.options)
            for s, fragment in p.presets.items():
                dict.__setitem__(VARIANTS, s, fragment)
            _add_papers(p)
        for p in plugins.values():
            for s, fragment in p.presets.items():
                _check_preset(p, s, fragment)
    except PluginError:
        _unregister(set(variant_owner), set(preset_owner))
        for name in plugins:
            _plugins.pop(name, None)
        _variant_owner.clear()
        _preset_owner.clear()
        raise


def _add_papers(p: Plugin) -> None:
    from synattn_trainer.presets import PLUGIN_PAPERS, Paper

    if not p.presets:
        return
    cite, method, title = p.paper or (f"plugin {p.name}", p.version, p.origin)
    paper: Paper = Paper(cite, method, title)
    PLUGIN_PAPERS.append((paper, p.presets))


def _check_preset(p: Plugin, name: str, fragment: Mapping[str, Any]) -> None:
    """A plugin's preset must make a valid config on its own (data paths aside)."""
    from synattn_shared.errors import one_line
    from synattn_trainer.config import TrainConfig
    from synattn_trainer.presets import merge

    base: dict[str, Any] = {"data": {"train": "-", "valid": "-", "tokenizer": "-"}}
    try:
        TrainConfig.model_validate(merge(base, dict(fragment)))
    except ValueError as exc:
        raise PluginError(f"plugin {p.name!r} ({p.origin}): preset {name!r} is not a valid "
                          f"config fragment: {one_line(exc)}") from None  # fmt: skip


def _unregister(variants: set[str], presets: set[str]) -> None:
    from synattn_trainer.presets import PLUGIN_PAPERS, VARIANTS
    from synattn_trainer.variant_options import OPTIONS

    for v in variants:
        dict.pop(OPTIONS, v, None)
    for s in presets:
        dict.pop(VARIANTS, s, None)
    PLUGIN_PAPERS[:] = [(paper, g) for paper, g in PLUGIN_PAPERS if not set(g) & presets]
    base = sys.modules.get("synattn_trainer.variants.base")
    if base is not None:
        for v in variants:
            base.REGISTRY.pop(v, None)


def implementation(variant: str) -> type[AttentionVariant]:
    """A plugin variant's class, imported and registered on first use
    (``synattn_trainer.variants.base.plugin_class``)."""
    from synattn_trainer.variants.base import plugin_class

    return plugin_class(variant)


# ---------------------------------------------------------------------------------- provenance


def record(cfg: TrainConfig) -> dict[str, dict[str, Any]]:
    """The plugins whose variants ``cfg`` uses, by name, as a run records them: version and
    source digest (``Plugin.record``); {} for a configuration of built-ins."""
    used = sorted({s.name for specs in cfg.attention.values() for s in specs})
    out: dict[str, dict[str, Any]] = {}
    for v in used:
        p = owner(v)
        if p is not None:
            out[p.name] = p.record()
    return out


def check_recorded(recorded: Mapping[str, Any] | None, what: str) -> None:
    """Refuse to go on with ``what`` (a checkpoint, a job) made with plugins this process
    lacks or has in another version or source.

    Raises:
        PluginMismatch: the first plugin that differs, in one line.
        PluginError: this process's plugins cannot be loaded.
    """
    if not recorded:
        return
    have = load_plugins()
    for name, rec in sorted(recorded.items()):
        rec = rec if isinstance(rec, Mapping) else {}
        version = rec.get("version", "?")
        variants = ", ".join(map(str, rec.get("variants", []))) or "?"
        mine = have.get(name)
        if mine is None:
            raise PluginMismatch(
                f"{what} needs plugin {name!r} {version} (variants {variants}), which is not "
                f"installed here ({WHERE}); install that version"
            )
        if mine.version != version:
            raise PluginMismatch(
                f"{what} was made with plugin {name!r} {version}; this install has {mine.version}"
                f" ({mine.origin}); install {version} to run it"
            )
        if mine.sha256 != rec.get("sha256"):
            raise PluginMismatch(
                f"{what} was made with plugin {name!r} {version} of other source code (sha256 "
                f"{str(rec.get('sha256'))[:12]}, here {mine.sha256[:12]}: {mine.origin}); "
                "install the same code to run it"
            )


def describe() -> list[tuple[str, str]]:
    """``(variant, where it comes from)`` for every variant: ``built-in`` or the plugin."""
    from synattn_trainer.variant_options import OPTIONS

    return [(v, p.label() if (p := owner(v)) else "built-in") for v in OPTIONS]


plugin_registry.connect(lambda: _register_all(_discover()), _unregister)
