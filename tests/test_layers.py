"""The package layers point one way, and pyhost/ and compiler/ have no import cycles.

Layers, lowest first: ``pyhost.spec`` (the hardware/software contract: imports nothing of the
project but itself), ``pyhost`` (the device stack), ``compiler``, ``tb`` (everything that needs a
simulator or only checks; the only layer that may import cocotb) and ``bench``. A module may
import its own layer and the ones below. Every import counts, at module level or inside a
function; only imports under ``if TYPE_CHECKING:`` are exempt. Inside the compiler the compile
side never imports the card runtime (``compiler.runtime.card``): only the runtime, the CLI and
runner modules do.

The checker is tested on a small tree that has the back-edges and the cycle this layout removed,
so that it is shown to catch them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pyhost", "compiler", "tb", "bench")
#: Third-party packages that belong to the simulator layer.
SIMULATOR_ONLY = ("cocotb", "cocotb_tools", "cocotb_bus", "cocotbext")
LAYER_NAMES = ("pyhost.spec", "pyhost", "compiler", "tb", "bench")
#: Who may import the card runtime inside the compiler.
CARD_RUNTIME = "compiler.runtime.card"


def layer_of(module: str) -> int | None:
    """The layer index of a module, or None for a module outside the layered packages."""
    top = module.split(".")[0]
    if module == "pyhost.spec" or module.startswith("pyhost.spec."):
        return 0
    if top in SIMULATOR_ONLY:
        return LAYER_NAMES.index("tb")
    if top in PACKAGES:
        return LAYER_NAMES.index(top)
    return None


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_only(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or \
        (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def imports_of(root: Path, path: Path, modules: set[str]) -> list[tuple[str, int]]:
    """(imported module, line) of every import in a file, type-only ones excluded. `from pkg
    import name` is an import of ``pkg.name`` when that is a module, else of ``pkg``."""
    mod = module_name(root, path)
    is_pkg = path.name == "__init__.py"
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        for ch in ast.iter_child_nodes(node):
            if isinstance(ch, ast.If) and _type_only(ch):
                for other in ch.orelse:
                    visit_one(other)
                continue
            visit_one(ch)

    def visit_one(ch: ast.AST) -> None:
        if isinstance(ch, ast.Import):
            out.extend((a.name, ch.lineno) for a in ch.names)
        elif isinstance(ch, ast.ImportFrom):
            if ch.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[:len(base) - (ch.level - 1)]
                name = ".".join(base + ([ch.module] if ch.module else []))
            else:
                name = ch.module or ""
            for a in ch.names:
                full = f"{name}.{a.name}"
                out.append((full if full in modules else name, ch.lineno))
        else:
            visit(ch)

    visit(ast.parse(path.read_text(), str(path)))
    return out


def import_graph(root: Path) -> dict[str, list[tuple[str, int]]]:
    files = {module_name(root, p): p for pkg in PACKAGES if (root / pkg).is_dir()
             for p in sorted((root / pkg).rglob("*.py"))}
    modules = set(files)
    return {m: imports_of(root, p, modules) for m, p in files.items()}


def back_edges(root: Path) -> list[str]:
    """Every import that points up the layers, or from the compile side into the card
    runtime, as "module:line imports target"."""
    bad = []
    for mod, deps in sorted(import_graph(root).items()):
        lm = layer_of(mod)
        for dep, line in deps:
            ld = layer_of(dep)
            if lm is not None and ld is not None and ld > lm:
                bad.append(f"{mod}:{line} imports {dep} ({LAYER_NAMES[ld]} is above "
                           f"{LAYER_NAMES[lm]})")
            elif (dep == CARD_RUNTIME or dep.startswith(CARD_RUNTIME + ".")) \
                    and mod.startswith("compiler.") \
                    and not mod.startswith(("compiler.runtime", "compiler.cli")) \
                    and not mod.endswith(".runner"):
                bad.append(f"{mod}:{line} imports {dep} (the compile side does not import "
                           "the card runtime)")
    return bad


def cycles(root: Path, packages: tuple[str, ...] = ("pyhost", "compiler")) -> list[list[str]]:
    """Strongly connected groups of modules (import cycles) inside `packages`."""
    graph = import_graph(root)
    adj: dict[str, set[str]] = defaultdict(set)
    for mod, deps in graph.items():
        adj[mod] |= {d for d, _ in deps if d in graph and d != mod}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:   # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(adj[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1 and group[0].split(".")[0] in packages:
                found.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


# --- the project ---------------------------------------------------------------------------------

def test_layers_point_down() -> None:
    """No module imports a layer above its own (pyhost.spec imports nothing of the project,
    pyhost never tb, compiler or cocotb, compiler never tb, tb never bench), and the compile side
    never imports the card runtime."""
    bad = back_edges(ROOT)
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_no_import_cycles() -> None:
    """pyhost/ and compiler/ have no import cycle outside type-only imports."""
    found = cycles(ROOT)
    assert not found, f"import cycles: {found}"


def test_compiling_loads_neither_driver_nor_memory_manager() -> None:
    """The compile flow and the host executor (calibration) do not load the driver, the memory
    manager or the card runtime; the card runtime's names still resolve from compiler.runtime."""
    code = ("import sys\n"
            "import compiler.pipeline, compiler.quantize\n"
            "from compiler.runtime import GraphExecutor\n"
            "import compiler.plugins.accel\n"
            "loaded = sorted(m for m in sys.modules if m.startswith(('pyhost.driver', "
            "'pyhost.memory', 'compiler.runtime.card', 'cocotb', 'tb.')))\n"
            "assert not loaded, loaded\n"
            "from compiler.runtime import CardExecutor\n"
            "assert CardExecutor.__module__ == 'compiler.runtime.card'\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# --- the checker itself --------------------------------------------------------------------------

_OLD_LAYOUT = {
    # the back-edges and the cycle of the layout before issue 11
    "pyhost/__init__.py": "",
    "pyhost/spec/__init__.py": "",
    "pyhost/spec/isa.py": "",
    "pyhost/rtl_card.py": "from cocotb.triggers import Timer\n"
                          "from tb.common.host_memory_axi import HostMemoryAxiSlave\n",
    "pyhost/accel/__init__.py": "",
    "pyhost/accel/randprog.py": "from compiler.quantize.requant import quantize_multiplier\n",
    "pyhost/memory/__init__.py": "",
    "pyhost/memory/trace.py": "from pyhost.memory.manager import MemoryManager\n",
    "pyhost/memory/manager.py": "def plan():\n    from pyhost.memory.bound import plan_drops\n",
    "pyhost/memory/bound.py": "from pyhost.memory.trace import Trace\n",
    "compiler/__init__.py": "",
    "compiler/runtime/__init__.py": "",
    "compiler/runtime/card.py": "",
    "compiler/plugins/__init__.py": "",
    "compiler/plugins/accel/__init__.py": "",
    "compiler/plugins/accel/codegen.py": "from compiler.runtime.card import IoSpec\n",
    "compiler/plugins/accel/runner.py": "from compiler.runtime.card import CardSession\n",
    "tb/__init__.py": "",
    "tb/common/__init__.py": "",
    "tb/common/host_memory_axi.py": "import cocotb\nfrom bench import dram_bench\n",
    "bench/__init__.py": "",
    "bench/dram_bench.py": "",
}


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def test_checker_catches_the_old_back_edges(tmp_path: Path) -> None:
    """On a tree with the old layout's imports the checker names each back-edge: pyhost
    importing tb and cocotb, pyhost importing the compiler, the compile side importing the card
    runtime, tb importing bench (but not the accelerator runner importing the card runtime)."""
    bad = back_edges(_tree(tmp_path, _OLD_LAYOUT))
    got = {b.split(" (")[0] for b in bad}
    assert got == {
        "pyhost.rtl_card:1 imports cocotb.triggers",
        "pyhost.rtl_card:2 imports tb.common.host_memory_axi",
        "pyhost.accel.randprog:1 imports compiler.quantize.requant",
        "compiler.plugins.accel.codegen:1 imports compiler.runtime.card",
        "tb.common.host_memory_axi:2 imports bench.dram_bench",
    }, bad


def test_checker_catches_the_old_cycle(tmp_path: Path) -> None:
    """The memory manager's old cycle (trace -> manager -> bound -> trace, one edge a deferred
    import inside a function) is found; a type-only import is not an edge."""
    root = _tree(tmp_path, _OLD_LAYOUT)
    assert cycles(root) == [["pyhost.memory.bound", "pyhost.memory.manager",
                             "pyhost.memory.trace"]]
    (root / "pyhost/memory/trace.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from pyhost.memory.manager import MemoryManager\n")
    assert cycles(root) == []


def test_spec_imports_nothing_of_the_project(tmp_path: Path) -> None:
    """pyhost.spec importing the device stack is a back-edge; importing itself is not."""
    root = _tree(tmp_path, {**_OLD_LAYOUT,
                            "pyhost/spec/accel.py": "from pyhost.spec.isa import Buffer\n"
                                                    "from pyhost.accel import model\n"})
    assert [b.split(" (")[0] for b in back_edges(root) if b.startswith("pyhost.spec")] == [
        "pyhost.spec.accel:2 imports pyhost.accel"]
