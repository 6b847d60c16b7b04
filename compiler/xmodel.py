"""The .xmodel container: a compiled model (graph, subgraph tree with attributes, weights and
binary payloads such as instruction streams) in one file.

Format (version 1), documented in docs/xmodel.md: a ZIP archive, entries stored uncompressed
with fixed timestamps so the same model always gives the same bytes:

- ``xmodel.json``: ``{"format": "dnncard-xmodel", "version": 1, "producer": {...},
  "graph": {"name", "attrs", "ops": [...], "outputs": [...]}, "subgraph": {...}}``;
  ops are listed in topological order, each with ``name``, ``type``, ``attrs``, ``inputs``
  (a list of ``[argument, [tensor names]]``) and ``output`` (``shape``, ``dtype``, ``attrs``);
  the subgraph tree nests ``{"name", "attrs", "children": [...]}`` and leaves list their ``ops``;
- ``blobs/NNNNNN.npy`` (numpy format, no pickles) for every array attribute, and
  ``blobs/NNNNNN.bin`` for every ``bytes`` attribute. In JSON an array is
  ``{"__ndarray__": "blobs/000003.npy"}``, bytes ``{"__bytes__": "blobs/000004.bin"}`` and a
  non-finite float ``{"__float__": "nan"}``; attribute keys never start with ``__``.
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from pathlib import Path
from typing import IO, Any

import numpy as np

from compiler.errors import XirError, XmodelError
from compiler.xir import Graph, Op, Subgraph

FORMAT = "dnncard-xmodel"
VERSION = 1
JSON_ENTRY = "xmodel.json"
_EPOCH = (1980, 1, 1, 0, 0, 0)


# ---- writing -----------------------------------------------------------------------------------
class _Writer:
    def __init__(self, zf: zipfile.ZipFile) -> None:
        self.zf = zf
        self.count = 0

    def _entry(self, name: str) -> zipfile.ZipInfo:
        info = zipfile.ZipInfo(name, date_time=_EPOCH)
        info.compress_type = zipfile.ZIP_STORED
        info.external_attr = 0o644 << 16
        return info

    def blob(self, ext: str, write: Any) -> str:
        name = f"blobs/{self.count:06d}.{ext}"
        self.count += 1
        with self.zf.open(self._entry(name), "w", force_zip64=True) as f:
            write(f)
        return name

    def encode(self, v: Any) -> Any:
        if isinstance(v, np.ndarray):
            arr = v
            return {"__ndarray__": self.blob(
                "npy", lambda f: np.lib.format.write_array(f, arr, allow_pickle=False))}
        if isinstance(v, bytes):
            data = v
            return {"__bytes__": self.blob("bin", lambda f: f.write(data))}
        if isinstance(v, float) and not math.isfinite(v):
            return {"__float__": repr(v)}
        if isinstance(v, list):
            return [self.encode(x) for x in v]
        if isinstance(v, dict):
            return {k: self.encode(x) for k, x in v.items()}
        return v

    def attrs(self, attrs: Any) -> dict[str, Any]:
        return {k: self.encode(v) for k, v in attrs.items()}


def _subgraph_doc(w: _Writer, s: Subgraph) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": s.name, "attrs": w.attrs(s.attrs)}
    if s.is_leaf:
        if not s.is_root:
            doc["ops"] = [op.name for op in s.topological_sort()]
    else:
        doc["children"] = [_subgraph_doc(w, c) for c in s.children_topological_sort()]
    return doc


def save(graph: Graph, path: str | Path | IO[bytes]) -> None:
    """Write ``graph`` with its subgraph tree to an .xmodel file (or binary stream)."""
    try:
        graph.check(shapes=False)
    except XirError as e:
        raise XmodelError(f"graph {graph.name!r} is not well formed, not saving it: {e}") from e
    from compiler import __version__

    target: Any = str(path) if isinstance(path, Path) else path
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        w = _Writer(zf)
        ops = []
        for op in graph.topological_sort():
            t = op.output
            ops.append({
                "name": op.name, "type": op.type, "attrs": w.attrs(op.attrs),
                "inputs": [[arg, [x.name for x in ts]] for arg, ts in op._inputs.items()],
                "output": {"shape": None if t.shape is None else list(t.shape),
                           "dtype": t.dtype, "attrs": w.attrs(t.attrs)},
            })
        doc = {
            "format": FORMAT,
            "version": VERSION,
            "producer": {"name": "dnncard-compiler", "version": __version__},
            "graph": {"name": graph.name, "attrs": w.attrs(graph.attrs), "ops": ops,
                      "outputs": [t.name for t in graph.outputs]},
            "subgraph": _subgraph_doc(w, graph.root_subgraph),
        }
        text = json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False)
        zf.writestr(w._entry(JSON_ENTRY), text.encode("utf-8"))


def dumps(graph: Graph) -> bytes:
    """The .xmodel bytes of ``graph``."""
    buf = io.BytesIO()
    save(graph, buf)
    return buf.getvalue()


# ---- reading -----------------------------------------------------------------------------------
class _Reader:
    def __init__(self, zf: zipfile.ZipFile, where: str) -> None:
        self.zf = zf
        self.where = where
        self.names = set(zf.namelist())

    def _open(self, name: str) -> IO[bytes]:
        if name not in self.names:
            raise XmodelError(f"{self.where}: blob {name!r} is referenced but missing; the "
                              "file is truncated or corrupt")
        return self.zf.open(name)

    def decode(self, v: Any) -> Any:
        if isinstance(v, dict):
            if "__ndarray__" in v:
                with self._open(v["__ndarray__"]) as f:
                    try:
                        return np.lib.format.read_array(f, allow_pickle=False)
                    except (ValueError, OSError) as e:
                        raise XmodelError(f"{self.where}: blob {v['__ndarray__']!r} is not a "
                                          f"valid .npy array: {e}") from e
            if "__bytes__" in v:
                with self._open(v["__bytes__"]) as f:
                    return f.read()
            if "__float__" in v:
                return float(v["__float__"])
            return {k: self.decode(x) for k, x in v.items()}
        if isinstance(v, list):
            return [self.decode(x) for x in v]
        return v


def load(path: str | Path | IO[bytes]) -> Graph:
    """Read an .xmodel file (or binary stream) back into a :class:`Graph`."""
    where = str(path) if isinstance(path, (str, Path)) else "<stream>"
    try:
        zf = zipfile.ZipFile(str(path) if isinstance(path, Path) else path)
    except FileNotFoundError:
        raise XmodelError(f"{where} does not exist") from None
    except zipfile.BadZipFile:
        raise XmodelError(f"{where} is not an .xmodel file (not a ZIP container)") from None
    with zf:
        r = _Reader(zf, where)
        if JSON_ENTRY not in r.names:
            raise XmodelError(f"{where}: no {JSON_ENTRY} entry; not an .xmodel file")
        try:
            doc = json.loads(zf.read(JSON_ENTRY).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise XmodelError(f"{where}: {JSON_ENTRY} is not valid JSON: {e}") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise XmodelError(f"{where}: not a {FORMAT} document")
        if doc.get("version") != VERSION:
            raise XmodelError(f"{where}: format version {doc.get('version')!r}; this compiler "
                              f"reads version {VERSION}; recompile the model")
        try:
            return _build(doc, r)
        except XirError as e:
            raise XmodelError(f"{where}: inconsistent model: {e}") from e
        except (KeyError, TypeError, ValueError) as e:
            raise XmodelError(f"{where}: malformed {JSON_ENTRY} ({type(e).__name__}: {e})") \
                from e


def loads(data: bytes) -> Graph:
    return load(io.BytesIO(data))


def _build(doc: dict[str, Any], r: _Reader) -> Graph:
    g = doc["graph"]
    graph = Graph(g["name"])
    for k, v in r.decode(g["attrs"]).items():
        graph.attrs[k] = v
    ops: dict[str, Op] = {}
    for spec in g["ops"]:
        inputs = {}
        for arg, names in spec["inputs"]:
            try:
                inputs[arg] = [ops[n] for n in names]
            except KeyError as e:
                raise XmodelError(f"op {spec['name']!r} reads {e.args[0]!r}, which no earlier "
                                  "op produces") from None
        out = spec["output"]
        op = graph.create_op(spec["name"], spec["type"], inputs, r.decode(spec["attrs"]),
                             shape=out["shape"], dtype=out["dtype"])
        for k, v in r.decode(out["attrs"]).items():
            op.output.attrs[k] = v
        ops[op.name] = op
    graph.set_outputs([graph.get_tensor(n) for n in g["outputs"]])
    root_doc = doc["subgraph"]
    root = graph.root_subgraph
    root.name = root_doc["name"]
    _restore(root, root_doc, r, ops)
    return graph


def _restore(sub: Subgraph, doc: dict[str, Any], r: _Reader, ops: dict[str, Op]) -> None:
    for k, v in r.decode(doc["attrs"]).items():
        sub.attrs[k] = v
    if "children" not in doc:
        return
    groups = []
    for child in doc["children"]:
        names = _leaf_ops(child)
        missing = [n for n in names if n not in ops]
        if missing:
            raise XmodelError(f"subgraph {child['name']!r} lists unknown ops {missing[:5]}")
        groups.append((child["name"], frozenset(ops[n] for n in names)))
    for child_sub, child_doc in zip(sub._restore_children(groups), doc["children"], strict=True):
        _restore(child_sub, child_doc, r, ops)


def _leaf_ops(doc: dict[str, Any]) -> list[str]:
    if "children" in doc:
        return [n for c in doc["children"] for n in _leaf_ops(c)]
    return list(doc["ops"])
