"""The plugin registry's state, below everything that registers into it: which plugins are
loaded, who owns each variant and preset name, and ``PluginAware``, the dict whose look-ups
load the plugins first.

What loading does (find the plugins, check them, register their variants, presets and
papers) is ``synattn_trainer.plugins``, which sits above the option, preset and variant
registries it fills; it connects its loader here (``connect``) when it is imported, and the
package imports it first (``synattn_trainer/__init__.py``), so no look-up can miss it.
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from synattn_trainer.variant_options import VariantConfig

ENTRY_POINT_GROUP = "synattn.variants"
PLUGINS_ENV = "SYNATTN_PLUGINS"
PLUGINS_KEY = "plugins"  # the checkpoint entry (and the job spec field) holding ``record``
VARIANT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
WHERE = f"entry points {ENTRY_POINT_GROUP} or {PLUGINS_ENV}"


class PluginError(ValueError):
    """A plugin that cannot be loaded or that clashes with another variant or preset name."""


class PluginMismatch(ValueError):
    """A checkpoint or job made with a plugin this process lacks, or has in another version
    or source; the message is one line naming the plugin and both versions."""


@dataclass(frozen=True)
class PluginVariant:
    """One variant of a plugin: its options model and its ``AttentionVariant`` class (or the
    class's import path ``module:Class``, imported when a model is first built)."""

    options: type[VariantConfig]
    implementation: str | type


@dataclass(frozen=True)
class Plugin:
    """A loaded plugin: where it came from and what it declares."""

    name: str
    version: str
    sha256: str  # of its source files (``source_digest``)
    origin: str  # for messages: the entry point and distribution, or the SYNATTN_PLUGINS entry
    variants: dict[str, PluginVariant] = field(default_factory=dict)
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)
    paper: tuple[str, str, str] | None = None

    def label(self) -> str:
        return f"plugin {self.name} {self.version}"

    def record(self) -> dict[str, Any]:
        """What a run records of this plugin (``PLUGINS_KEY``); ``origin`` stays out: paths
        differ between machines, the code they hold must not."""
        return {"version": self.version, "sha256": self.sha256, "variants": sorted(self.variants)}


# ---------------------------------------------------------------------------------- state

_lock = threading.RLock()
_state = "unloaded"  # unloaded | loading | loaded
_loading_thread: int | None = None
_plugins: dict[str, Plugin] = {}
_variant_owner: dict[str, str] = {}  # variant name -> plugin name
_preset_owner: dict[str, str] = {}  # preset name -> plugin name
_error: PluginError | None = None

V = TypeVar("V")


class PluginAware(dict[str, V]):
    """A registry of built-ins (a plain dict) whose look-ups load the plugins first, once per
    process: a name, a membership test, an iteration or a length then includes theirs.
    Writes (``register``'s ``setdefault``) load nothing."""

    def __getitem__(self, key: str) -> V:
        _ensure()
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        _ensure()
        return super().__contains__(key)

    def __iter__(self) -> Iterator[str]:
        _ensure()
        return super().__iter__()

    def __len__(self) -> int:
        _ensure()
        return super().__len__()

    def get(self, key: str, default: Any = None) -> Any:
        _ensure()
        return super().get(key, default)

    def keys(self) -> Any:
        _ensure()
        return super().keys()

    def values(self) -> Any:
        _ensure()
        return super().values()

    def items(self) -> Any:
        _ensure()
        return super().items()


def _ensure() -> None:
    if _state != "loaded":
        load_plugins()
    elif _error is not None:
        raise _error


def load_plugins() -> Mapping[str, Plugin]:
    """Every plugin, found and registered on the first call in this process.

    Raises:
        PluginError: a plugin that cannot be imported, declares something malformed, or uses
            a variant, preset or plugin name already taken (the message names both); raised
            again by every later call.
    """
    global _state, _error, _loading_thread
    if _state == "loaded":
        if _error is not None:
            raise _error
        return _plugins
    with _lock:
        if _state == "loading" and _loading_thread == threading.get_ident():
            return _plugins  # a look-up made while loading (a preset validated): as it stands
        if _state == "unloaded":
            _state, _loading_thread = "loading", threading.get_ident()
            try:
                _LOADER[0]()
            except PluginError as exc:
                _error = exc
            except Exception as exc:  # unreadable source files, say: no plugin half-loaded
                _error = PluginError(f"plugins ({WHERE}): {type(exc).__name__}: {exc}")
            finally:
                _state, _loading_thread = "loaded", None
    if _error is not None:
        raise _error
    return _plugins


def disable() -> None:
    """Load no plugin in this process (the committed reference pages are built-ins only)."""
    global _state, _error
    with _lock:
        reset()
        _state, _error = "loaded", None


def reset() -> None:
    """Forget every plugin: their names leave the registries and the next look-up finds and
    loads them again (tests; a tool that changed ``SYNATTN_PLUGINS`` or ``sys.path``)."""
    global _state, _error
    with _lock:
        _UNREGISTER[0](set(_variant_owner), set(_preset_owner))
        _plugins.clear()
        _variant_owner.clear()
        _preset_owner.clear()
        _state, _error = "unloaded", None
        importlib.invalidate_caches()


def owner(variant: str) -> Plugin | None:
    """The plugin a variant name comes from; None for a built-in (or an unknown name)."""
    load_plugins()
    name = _variant_owner.get(variant)
    return None if name is None else _plugins[name]


def preset_owner(preset: str) -> Plugin | None:
    """The plugin a preset name comes from; None for a built-in (or an unknown name)."""
    load_plugins()
    name = _preset_owner.get(preset)
    return None if name is None else _plugins[name]


def builtin(registry: Mapping[str, V]) -> dict[str, V]:
    """A registry's built-in entries only, read without loading any plugin."""
    taken = set(_variant_owner) | set(_preset_owner)
    items: list[tuple[str, V]] = list(dict.items(registry))  # type: ignore[arg-type]
    return {k: v for k, v in items if k not in taken}


def _not_connected() -> None:
    raise PluginError("the plugin loader is not connected (import synattn_trainer.plugins)")


_LOADER: list[Callable[[], None]] = [_not_connected]
_UNREGISTER: list[Callable[[set[str], set[str]], None]] = [lambda _v, _p: None]


def connect(loader: Callable[[], None], unregister: Callable[[set[str], set[str]], None]) -> None:
    """Install what loading and forgetting plugins do (``synattn_trainer.plugins``)."""
    _LOADER[0], _UNREGISTER[0] = loader, unregister
