"""Human- and machine-readable summaries of a compiled graph, and its Graphviz rendering."""

from __future__ import annotations

from collections import Counter
from typing import Any

from compiler.xir import CONST, DATA, Graph, Subgraph, Tensor

#: Fixed colours for known devices; others take the next free palette entry in name order.
DEVICE_COLOURS = {"CPU": "#d9d9d9", "SOFTMAX_IP": "#fdb462", "ACCEL": "#80b1d3"}
PALETTE = ["#8dd3c7", "#bebada", "#fb8072", "#b3de69", "#fccde5", "#bc80bd", "#ccebc5",
           "#ffed6f"]
UNASSIGNED = "#ffffff"


def printable(s: object) -> str:
    """``s`` with every control, format, surrogate or unassigned character shown as an escape
    (``\\x1b``, ``\\u202e``): names come from model files, and a name must not move the
    terminal's cursor, reorder a line or break the file it is written into."""
    text = str(s)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ord(ch)) for ch in text)


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else \
        f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _tensor(t: Tensor) -> dict[str, Any]:
    return {"name": t.name, "shape": None if t.shape is None else list(t.shape),
            "dtype": t.dtype}


def _children(graph: Graph) -> list[Subgraph]:
    root = graph.root_subgraph
    return [] if root.is_leaf else root.children_topological_sort()


def summarize(graph: Graph) -> dict[str, Any]:
    """Subgraphs (device, runner, ops, interface tensors), model inputs/outputs, op counts."""
    subs = []
    for s in _children(graph):
        attrs = {k: v for k, v in s.attrs.items() if k not in ("device", "runner", "plugin")}
        subs.append({
            "name": s.name, "device": s.get_attr("device"), "runner": s.get_attr("runner"),
            "plugin": s.get_attr("plugin"), "ops": len(s.ops),
            "op_types": dict(sorted(Counter(o.type for o in s.ops).items())),
            "inputs": [_tensor(t) for t in s.input_tensors],
            "outputs": [_tensor(t) for t in s.output_tensors],
            "attrs": {k: _short(v) for k, v in attrs.items()},
        })
    weights = sum(op.output.nbytes for op in graph.ops if op.type == CONST)
    return {
        "name": graph.name,
        "ops": len(graph),
        "op_types": dict(sorted(Counter(o.type for o in graph.ops).items())),
        "weight_bytes": weights,
        "inputs": [_tensor(op.output) for op in graph.inputs],
        "outputs": [_tensor(t) for t in graph.outputs],
        "quantized": "quantization" in graph.attrs,
        # a subgraph without a device (a hand-edited file) counts under None, sorted last
        "devices": dict(sorted(Counter(s["device"] for s in subs).items(),
                               key=lambda kv: (kv[0] is None, str(kv[0])))),
        "subgraphs": subs,
    }


def _short(v: Any) -> Any:
    if isinstance(v, bytes):
        return f"<{len(v)} bytes>"
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        return f"<array {v.dtype} {list(v.shape)}>"
    if isinstance(v, dict):
        return {k: _short(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_short(x) for x in v]
    return v


def format_summary(s: dict[str, Any]) -> str:
    """The summary as text; every name from the model is shown through `printable`."""
    p = printable

    def shp(t: dict[str, Any]) -> str:
        shape = tuple(t["shape"]) if t["shape"] is not None else "?"
        return f"{p(t['name'])} {p(t['dtype'])}{shape}"

    lines = [f"model {p(s['name'])}: {s['ops']} ops, {s['weight_bytes'] / 1e6:.1f} MB of "
             f"constants{', int8-quantized' if s['quantized'] else ''}"]
    lines += [f"  input   {shp(t)}" for t in s["inputs"]]
    lines += [f"  output  {shp(t)}" for t in s["outputs"]]
    lines.append(f"{len(s['subgraphs'])} subgraphs in execution order "
                 f"({', '.join(f'{p(k)}: {v}' for k, v in s['devices'].items())}):")
    for i, sub in enumerate(s["subgraphs"]):
        kinds = ", ".join(f"{p(k)} x{v}" for k, v in sub["op_types"].items() if k != CONST)
        lines.append(f"  [{i}] {p(sub['name'])}  device={p(sub['device'])}  "
                     f"runner={p(sub['runner'])}  {sub['ops']} ops ({kinds})")
        for t in sub["inputs"]:
            lines.append(f"        in   {shp(t)}")
        for t in sub["outputs"]:
            lines.append(f"        out  {shp(t)}")
        for k, v in sub["attrs"].items():
            lines.append(f"        attr {p(k)} = {p(v)}")
    return "\n".join(lines)


def device_colours(devices: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    free = iter(PALETTE)
    for d in sorted(set(devices)):
        out[d] = DEVICE_COLOURS.get(d) or next(free, "#eeeeee")
    return out


def _esc(s: object) -> str:
    """Text for inside a DOT double-quoted string: shown as written (escapes included), never
    closing the string, never a DOT escape sequence such as \\l or \\N."""
    return printable(s).replace("\\", "\\\\").replace('"', '\\"')


def _q(s: object) -> str:
    return f'"{_esc(s)}"'


def _label(*lines: object) -> str:
    """A quoted DOT label of several lines."""
    return '"' + "\\n".join(_esc(x) for x in lines) + '"'


def to_dot(graph: Graph, show_consts: bool = False) -> str:
    """Graphviz DOT: one cluster per subgraph, filled with its device's colour."""
    subs = _children(graph)
    colours = device_colours([s.get_attr("device") or "" for s in subs])
    lines = [f"digraph {_q(graph.name)} {{", "  rankdir=TB;", "  compound=true;",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=8];']
    shown = {op for op in graph.ops if show_consts or op.type != CONST}
    groups = [(s.name, s.get_attr("device") or "", s.topological_sort()) for s in subs] or \
        [("graph", "", graph.topological_sort())]
    for i, (name, device, ops) in enumerate(groups):
        fill = colours.get(device, UNASSIGNED)
        lines.append(f"  subgraph cluster_{i} {{")
        lines.append(f"    label={_q(f'{name} [{device}]' if device else name)};")
        lines.append(f'    style="filled,rounded"; fillcolor={_q(fill)}; color="#555555";')
        for op in ops:
            if op not in shown:
                continue
            shape = op.output.shape
            label = _label(op.name, op.type, list(shape) if shape is not None else "?")
            extra = ', shape=ellipse, fillcolor="#ffffff"' if op.type == DATA else \
                ', fillcolor="#ffffff"'
            lines.append(f"    {_q(op.name)} [label={label}{extra}];")
        lines.append("  }")
    for op in graph.topological_sort():
        if op not in shown:
            continue
        for arg, ts in op.inputs.items():
            for t in ts:
                if t.producer in shown:
                    lines.append(f"  {_q(t.producer.name)} -> {_q(op.name)} [label={_q(arg)}];")
    legend = _label(*(f"{d or 'unassigned'}: {c}" for d, c in colours.items()))
    lines.append(f'  label={legend}; labelloc=b; fontname="Helvetica"; fontsize=9;')
    lines.append("}")
    return "\n".join(lines) + "\n"
