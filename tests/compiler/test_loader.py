"""Plugin loader: every naming form of --options '{"plugin": ...}', and its errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from compiler.errors import OptionsError, PluginLoadError
from compiler.plugin_api import load_plugin, load_plugins, plugin_names
from compiler.plugins.softmax_ip import SoftmaxIpPlugin
from tests.compiler import sample_plugins as sp

PLUGIN_FILE = textwrap.dedent('''
    from compiler.plugin_api import Plugin, filter_by_type

    class FilePlugin(Plugin):
        def get_plugin_name(self): return "from_file"
        def get_device(self): return "FILE_IP"
        def get_runner(self): return "cpu"
        def partition(self, graph): return filter_by_type(graph, "Relu")
        def compile(self, subgraph): pass

    def get_plugin():
        return FilePlugin()
''')


def test_builtin_module_attr_and_module_forms() -> None:
    assert isinstance(load_plugin("softmax_ip"), SoftmaxIpPlugin)
    assert isinstance(load_plugin("compiler.plugins.softmax_ip"), SoftmaxIpPlugin)
    assert isinstance(load_plugin("tests.compiler.sample_plugins"), sp.ConvReluPlugin)
    assert isinstance(load_plugin("tests.compiler.sample_plugins:get_relu_plugin"),
                      sp.ReluPlugin)
    # a Plugin subclass works as its own factory
    assert isinstance(load_plugin("tests.compiler.sample_plugins:ReluPlugin"), sp.ReluPlugin)


def test_so_names_map_to_plugin_names() -> None:
    """libNAME.so (as written for vai_c) resolves NAME, with or without a directory."""
    assert isinstance(load_plugin("libsoftmax_ip.so"), SoftmaxIpPlugin)
    assert isinstance(load_plugin("/opt/plugins/libsoftmax_ip.so"), SoftmaxIpPlugin)
    assert isinstance(load_plugin("libtests.compiler.sample_plugins.so"), sp.ConvReluPlugin)


def test_python_file(tmp_path: Path) -> None:
    f = tmp_path / "my_plugin.py"
    f.write_text(PLUGIN_FILE)
    p = load_plugin(str(f))
    assert p.get_plugin_name() == "from_file" and p.get_device() == "FILE_IP"


def test_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed distribution can register a plugin under group dnncard.compiler_plugins."""
    dist = tmp_path / "fake_plugins-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugins\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[dnncard.compiler_plugins]\nep_relu = tests.compiler.sample_plugins:get_relu_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert isinstance(load_plugin("ep_relu"), sp.ReluPlugin)
    assert isinstance(load_plugin("libep_relu.so"), sp.ReluPlugin)
    dist2 = tmp_path / "other_plugins-2.0.dist-info"
    dist2.mkdir()
    (dist2 / "METADATA").write_text("Metadata-Version: 2.1\nName: other-plugins\nVersion: 2.0\n")
    (dist2 / "entry_points.txt").write_text(
        "[dnncard.compiler_plugins]\nep_relu = tests.compiler.sample_plugins:get_plugin\n")
    with pytest.raises(PluginLoadError, match="2 installed packages declare"):
        load_plugin("ep_relu")


@pytest.mark.parametrize("name, message", [
    ("no_such_plugin_xyz", "no built-in plugin, entry point .* or module named "
                           "'no_such_plugin_xyz'"),
    ("json", r"module 'json' has no get_plugin\(\)"),
    ("tests.compiler.sample_plugins:nope", r"has no nope\(\)"),
    ("tests.compiler.sample_plugins:not_a_plugin", r"get_plugin\(\) returned int, expected an "
                                                   "instance of compiler.plugin_api.Plugin"),
    ("tests.compiler.sample_plugins:raises", "its factory raised RuntimeError: factory failed"),
    ("cpu", "built-in CPU target"),
    ("libcpu.so", "built-in CPU target"),
    ("/nonexistent/plugin.py", "does not exist"),
    ("", "non-empty string"),
])
def test_load_errors(name: str, message: str) -> None:
    with pytest.raises(PluginLoadError, match=message):
        load_plugin(name)


def test_broken_dependency_is_not_reported_as_missing_plugin(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    (tmp_path / "needs_missing_dep.py").write_text("import definitely_not_installed_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginLoadError, match="importing 'needs_missing_dep' failed"):
        load_plugin("needs_missing_dep")
    bad = tmp_path / "bad_file.py"
    bad.write_text("raise ValueError('broken at import')\n")
    with pytest.raises(PluginLoadError, match="raised ValueError while loading"):
        load_plugin(str(bad))


def test_duplicates_are_refused() -> None:
    with pytest.raises(PluginLoadError, match="listed twice"):
        load_plugins(["softmax_ip", "softmax_ip"])
    with pytest.raises(PluginLoadError, match="are the same plugin"):
        load_plugins(["softmax_ip", "libsoftmax_ip.so"])
    got = load_plugins(["tests.compiler.sample_plugins", "softmax_ip"])
    assert [p.get_plugin_name() for p in got] == ["test_accel", "softmax_ip"]


def test_option_keys_and_forms() -> None:
    assert plugin_names({"plugin": "a, b,c"}) == ["a", "b", "c"]
    assert plugin_names({"plugins": ["a", "b"]}) == ["a", "b"]
    assert plugin_names({}) == []
    with pytest.raises(OptionsError, match="not both"):
        plugin_names({"plugin": "a", "plugins": "b"})
    with pytest.raises(OptionsError, match="comma-separated string or a list"):
        plugin_names({"plugin": 3})
