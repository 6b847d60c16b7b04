"""Finding plugins by name, as ``--options '{"plugin": "a,b"}'`` names them.

A name may be:

- a built-in plugin (``accel``, ``softmax_ip``), or an entry point of group
  ``dnncard.compiler_plugins``;
- ``package.module:attr``: ``attr`` is a factory (like ``get_plugin``) or a Plugin subclass;
- ``package.module``: the module's ``get_plugin()``;
- a path to a ``.py`` file: that file's ``get_plugin()``;
- ``libNAME.so`` (any directory): mapped to ``NAME``, then resolved as above, so option strings
  written for Vitis AI's ``vai_c`` keep working.

The built-in CPU target is not named: it always runs last and takes whatever is left.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
from collections.abc import Callable, Iterable, Mapping
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from compiler.errors import OptionsError, PluginLoadError
from compiler.plugin_api.base import Plugin

ENTRY_POINT_GROUP = "dnncard.compiler_plugins"

#: Built-in plugins by name -> module (explicit, like the pass table).
BUILTIN: dict[str, str] = {
    "accel": "compiler.plugins.accel",
    "softmax_ip": "compiler.plugins.softmax_ip",
}

#: The name reserved for the CPU target, which cannot be listed as a plugin.
CPU_TARGET = "cpu"

_SO = re.compile(r"^lib(?P<name>[A-Za-z0-9_.\-]+)\.so(\.[0-9.]+)?$")


def plugin_names(options: Mapping[str, Any]) -> list[str]:
    """The plugin list from options: ``"plugin"`` or ``"plugins"``, a comma-separated string or
    a list of strings."""
    keys = [k for k in ("plugin", "plugins") if k in options]
    if len(keys) > 1:
        raise OptionsError('give the plugin list once, as "plugin" or as "plugins", not both')
    if not keys:
        return []
    raw = options[keys[0]]
    if isinstance(raw, str):
        items = raw.split(",")
    elif isinstance(raw, list) and all(isinstance(x, str) for x in raw):
        items = raw
    else:
        raise OptionsError(f'"{keys[0]}" must be a comma-separated string or a list of '
                           f"strings, got {raw!r}")
    names = [x.strip() for x in items if x.strip()]
    if not names:
        raise OptionsError(f'"{keys[0]}" names no plugin ({raw!r}); list at least one, or leave '
                           "the key out to compile for the CPU only")
    return names


def load_plugins(names: Iterable[str]) -> list[Plugin]:
    """Instantiate the named plugins in order; duplicates are an error."""
    plugins: list[Plugin] = []
    seen: dict[str, str] = {}
    for spec in names:
        plugin = load_plugin(spec)
        pname = plugin.get_plugin_name()
        if pname == CPU_TARGET:
            raise PluginLoadError(f"{spec!r}: the name {CPU_TARGET!r} belongs to the built-in "
                                  "CPU target, which always runs last; rename the plugin")
        if pname in seen:
            what = "is listed twice" if seen[pname] == spec else \
                f"and {seen[pname]!r} are the same plugin ({pname!r})"
            raise PluginLoadError(f"plugin {spec!r} {what}; list each plugin once")
        seen[pname] = spec
        plugins.append(plugin)
    return plugins


def load_plugin(spec: str) -> Plugin:
    """Resolve one plugin name (see the module docstring) and instantiate it."""
    if not isinstance(spec, str) or not spec.strip():
        raise PluginLoadError(f"a plugin name must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    so = _SO.match(Path(spec).name)
    if so:
        return load_plugin(so.group("name"))
    if spec.endswith(".py"):
        return _instantiate(spec, _module_from_file(spec), "get_plugin")
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        return _instantiate(spec, _import(spec, module_name), attr)
    if spec == CPU_TARGET:
        raise PluginLoadError(f"{spec!r} is the built-in CPU target; it always runs last and "
                              "must not be listed")
    if spec in BUILTIN:
        return _instantiate(spec, _import(spec, BUILTIN[spec]), "get_plugin")
    eps = [ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == spec]
    if len(eps) > 1:
        raise PluginLoadError(f"plugin {spec!r}: {len(eps)} installed packages declare an "
                              f"entry point of that name in {ENTRY_POINT_GROUP!r}; uninstall "
                              "one or name the plugin as module:attr")
    if eps:
        try:
            target = eps[0].load()
        except Exception as e:
            raise PluginLoadError(f"plugin {spec!r}: entry point {eps[0].value!r} cannot be "
                                  f"loaded: {type(e).__name__}: {e}") from e
        return _call_factory(spec, target)
    return _instantiate(spec, _import(spec, spec), "get_plugin")


def _import(spec: str, module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            raise PluginLoadError(
                f"plugin {spec!r}: no built-in plugin, entry point ({ENTRY_POINT_GROUP}) or "
                f"module named {module_name!r}; install the package that provides it, or name "
                "it as a path to a .py file or module:attr. Built-in plugins: "
                f"{sorted(BUILTIN)}") from None
        raise PluginLoadError(f"plugin {spec!r}: importing {module_name!r} failed: {e}") from e
    except Exception as e:
        raise PluginLoadError(f"plugin {spec!r}: importing {module_name!r} raised "
                              f"{type(e).__name__}: {e}") from e


def _module_from_file(spec: str) -> ModuleType:
    path = Path(spec).resolve()
    if not path.is_file():
        raise PluginLoadError(f"plugin file {spec!r} does not exist")
    # a stable, collision-free module name per file, so two plugins both called plugin.py work
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    name = f"dnncard_plugin_{path.stem}_{digest}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise PluginLoadError(f"plugin file {spec!r} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:
        raise PluginLoadError(f"plugin file {spec!r} raised {type(e).__name__} while "
                              f"loading: {e}") from e
    return module


def _instantiate(spec: str, module: ModuleType, attr: str) -> Plugin:
    factory = getattr(module, attr, None)
    if factory is None:
        raise PluginLoadError(f"plugin {spec!r}: module {module.__name__!r} has no {attr}(); "
                              f"a plugin module must define {attr}() returning a "
                              "compiler.plugin_api.Plugin")
    return _call_factory(spec, factory)


def _call_factory(spec: str, factory: Callable[[], Any] | Any) -> Plugin:
    if isinstance(factory, Plugin):
        return factory
    if not callable(factory):
        raise PluginLoadError(f"plugin {spec!r}: {factory!r} is neither a factory nor a Plugin")
    try:
        plugin = factory()
    except Exception as e:
        raise PluginLoadError(f"plugin {spec!r}: its factory raised {type(e).__name__}: "
                              f"{e}") from e
    if not isinstance(plugin, Plugin):
        raise PluginLoadError(f"plugin {spec!r}: get_plugin() returned "
                              f"{type(plugin).__name__}, expected an instance of "
                              "compiler.plugin_api.Plugin")
    name = plugin.get_plugin_name()
    if not isinstance(name, str) or not name:
        raise PluginLoadError(f"plugin {spec!r}: get_plugin_name() must return a non-empty "
                              f"str, got {name!r}")
    return plugin
