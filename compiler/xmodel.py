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
import os
import re
import tempfile
import tokenize
import zipfile
from pathlib import Path
from typing import IO, Any

import numpy as np

from compiler.errors import XirError, XmodelError
from compiler.limits import check_tensor_size
from compiler.xir import CONST, Graph, Op, Subgraph

FORMAT = "dnncard-xmodel"
VERSION = 1
JSON_ENTRY = "xmodel.json"
_EPOCH = (1980, 1, 1, 0, 0, 0)

#: Limits the reader enforces before it allocates anything (see docs/xmodel.md).
MAX_JSON_BYTES = 256 << 20
MAX_ENTRIES = 1 << 20
MAX_BLOB_BYTES = 16 << 30
#: Deepest nesting of attribute values and of the subgraph tree.
MAX_DEPTH = 64
_BLOB_NAME = re.compile(r"^blobs/[0-9]{6,}\.(npy|bin)$")
#: Array dtypes an attribute or tensor may have: bool and numbers (no objects, no records).
_ARRAY_KINDS = "biufc"


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
            return {"__ndarray__": self.blob("npy", lambda f: _write_npy(f, arr))}
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


def _write_npy(f: IO[bytes], arr: np.ndarray) -> None:
    """``np.lib.format.write_array(f, arr, allow_pickle=False)``'s bytes. A contiguous array's
    data goes to ``f`` as it is in memory, where numpy copies every 16 MiB of it for a stream
    that is not a file (a ZIP entry): VGG-19's .xmodel holds 720 MB of arrays."""
    fmt = np.lib.format
    data = arr if arr.flags.c_contiguous else arr.T if arr.flags.f_contiguous else None
    if data is None or arr.dtype.hasobject or arr.dtype.fields is not None:
        fmt.write_array(f, arr, allow_pickle=False)
        return
    buf = io.BytesIO()
    try:
        fmt.write_array_header_1_0(buf, fmt.header_data_from_array_1_0(arr))
    except ValueError:          # a header too long for format 1.0: numpy picks the version
        fmt.write_array(f, arr, allow_pickle=False)
        return
    f.write(buf.getvalue())
    if data.size:
        f.write(data.reshape(-1).view(np.uint8))


def _subgraph_doc(w: _Writer, s: Subgraph) -> dict[str, Any]:
    bad = _bad_name_attr(s.attrs)
    if bad is not None:          # what load refuses is not written
        raise XmodelError(f"subgraph {s.name!r}: attribute {bad[0]!r} is a "
                          f"{type(bad[1]).__name__}, not a string; device, runner and plugin "
                          "are names (leave one unset rather than None), not saving it")
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
    if isinstance(path, (str, Path)):
        # write next to the target and rename: a failure never leaves a half-written file
        # where a good one was
        final = Path(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp",
                                   dir=final.parent if str(final.parent) else ".")
        try:
            with os.fdopen(fd, "wb") as f:
                _save_stream(graph, f)
            os.chmod(tmp, 0o644 & ~_umask())
            os.replace(tmp, final)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return
    _save_stream(graph, path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _save_stream(graph: Graph, target: IO[bytes]) -> None:
    from compiler import __version__

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
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as e:
            bad = text[max(e.start - 20, 0):e.end + 20]
            raise XmodelError(f"graph {graph.name!r}: a name or attribute holds a lone "
                              f"surrogate ({bad!r}), which is not valid Unicode; rename it") \
                from None
        zf.writestr(w._entry(JSON_ENTRY), data)


def dumps(graph: Graph) -> bytes:
    """The .xmodel bytes of ``graph``."""
    buf = io.BytesIO()
    save(graph, buf)
    return buf.getvalue()


# ---- reading -----------------------------------------------------------------------------------
#
# Everything read is checked before it is used: the ZIP directory (stored entries only, sizes
# within the file, no duplicates), the JSON document's structure and nesting, every blob's npy
# header against its entry size and the allowed dtypes, each declared shape and dtype, and the
# const data against the declared tensor. The only exception that leaves load() is XmodelError.

class _Reader:
    def __init__(self, zf: zipfile.ZipFile, where: str, size: int) -> None:
        self.zf = zf
        self.where = where
        infos = zf.infolist()
        if len(infos) > MAX_ENTRIES:
            raise XmodelError(f"{where}: {len(infos)} entries, more than an .xmodel has "
                              f"({MAX_ENTRIES}); the file is not an .xmodel or is corrupt")
        self.infos: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            name = info.filename
            if name in self.infos:
                raise XmodelError(f"{where}: entry {name!r} appears twice; the file is corrupt")
            if name != JSON_ENTRY and not _BLOB_NAME.match(name):
                raise XmodelError(f"{where}: unexpected entry {name!r}; an .xmodel holds only "
                                  f"{JSON_ENTRY} and blobs/NNNNNN.npy|bin")
            if info.compress_type != zipfile.ZIP_STORED:
                raise XmodelError(f"{where}: entry {name!r} is compressed; .xmodel entries are "
                                  "stored (this file was not written by the compiler)")
            if info.file_size != info.compress_size or info.file_size > size \
                    or info.header_offset + info.file_size > size:
                raise XmodelError(f"{where}: entry {name!r} declares {info.file_size} bytes, "
                                  f"more than the file holds ({size}); the file is truncated "
                                  "or corrupt")
            self.infos[name] = info
        self.names = set(self.infos)

    def read(self, name: str, limit: int) -> bytes:
        info = self.infos[name]
        if info.file_size > limit:
            raise XmodelError(f"{self.where}: entry {name!r} is {info.file_size} bytes, above "
                              f"the limit of {limit}")
        try:
            return self.zf.read(info)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as e:
            raise _corrupt(self.where, name, e) from None

    def _entry(self, ref: Any, ext: str) -> str:
        if not isinstance(ref, str) or not ref.endswith("." + ext):
            raise XmodelError(f"{self.where}: a blob reference must name a .{ext} entry, got "
                              f"{ref!r}")
        if ref not in self.names:
            raise XmodelError(f"{self.where}: blob {ref!r} is referenced but missing; the "
                              "file is truncated or corrupt")
        return ref

    def array(self, ref: Any) -> np.ndarray:
        name = self._entry(ref, "npy")
        info = self.infos[name]
        if info.file_size > MAX_BLOB_BYTES:
            raise XmodelError(f"{self.where}: blob {name!r} is {info.file_size} bytes, above "
                              f"the limit of {MAX_BLOB_BYTES}")
        try:
            with self.zf.open(info) as f:
                return _read_npy(f, info.file_size, f"{self.where}: blob {name!r}")
        except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as e:
            raise _corrupt(self.where, name, e) from None

    def blob(self, ref: Any) -> bytes:
        return self.read(self._entry(ref, "bin"), MAX_BLOB_BYTES)

    def decode(self, v: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise XmodelError(f"{self.where}: attribute values nest deeper than {MAX_DEPTH} "
                              "levels")
        if isinstance(v, dict):
            tags = [k for k in v if isinstance(k, str) and k.startswith("__")]
            if tags:
                if len(v) != 1 or tags[0] not in ("__ndarray__", "__bytes__", "__float__"):
                    raise XmodelError(f"{self.where}: unknown tagged value {sorted(v)[:3]}")
                tag, ref = tags[0], v[tags[0]]
                if tag == "__ndarray__":
                    return self.array(ref)
                if tag == "__bytes__":
                    return self.blob(ref)
                if ref not in ("nan", "inf", "-inf"):
                    raise XmodelError(f"{self.where}: __float__ must be nan, inf or -inf, got "
                                      f"{ref!r}")
                return float(ref)
            return {k: self.decode(x, depth + 1) for k, x in v.items()}
        if isinstance(v, list):
            return [self.decode(x, depth + 1) for x in v]
        return v

    def attrs(self, v: Any, what: str) -> dict[str, Any]:
        out = self.decode(_field(v, dict, what))
        assert isinstance(out, dict)
        return out


def _corrupt(where: str, name: str, e: Exception) -> XmodelError:
    why = "its CRC does not match (the bytes were changed)" if "CRC" in str(e) else \
        f"it cannot be read ({type(e).__name__}: {e})"
    return XmodelError(f"{where}: entry {name!r} is corrupt: {why}; the file is damaged, "
                       "recompile or copy it again")


def _read_npy(f: IO[bytes], size: int, where: str) -> np.ndarray:
    """An array from an .npy stream of ``size`` bytes, its header checked against the size
    before anything is allocated."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(f)
        else:
            raise ValueError(f"npy format version {version} is not supported")
    except (ValueError, SyntaxError, TypeError, EOFError, tokenize.TokenError) as e:
        # numpy parses the header as a Python literal (ast, then tokenize on failure)
        raise XmodelError(f"{where} is not a valid .npy array: {e}") from None
    if dtype.hasobject or dtype.kind not in _ARRAY_KINDS or dtype.fields or dtype.subdtype:
        raise XmodelError(f"{where} has dtype {dtype}; arrays are bool or numeric")
    count = math.prod(shape)
    header = f.tell()
    if header + count * dtype.itemsize != size:
        raise XmodelError(f"{where}: its header declares shape {list(shape)}/{dtype} "
                          f"({count * dtype.itemsize} bytes) but the entry holds "
                          f"{size - header} bytes of data; the file is corrupt")
    arr = np.empty(count, dtype)
    view = memoryview(arr).cast("B") if arr.nbytes else memoryview(b"")
    got = 0
    while got < arr.nbytes:
        n = f.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            raise XmodelError(f"{where} ends early; the file is truncated")
        got += n
    if f.read(1):
        raise XmodelError(f"{where} is longer than its header says; the file is corrupt")
    return arr.reshape(shape, order="F" if fortran else "C")


def _field(v: Any, kind: type | tuple[type, ...], what: str) -> Any:
    """``v`` if it has the JSON type ``kind``; XmodelError naming ``what`` otherwise."""
    if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise XmodelError(f"{what} must be a JSON {_JSON_NAMES.get(names, names)}, got "
                          f"{_kind(v)}")
    return v


_JSON_NAMES = {"dict": "object", "list": "array", "str": "string", "int": "integer"}


def _kind(v: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "null"}.get(type(v), repr(v))


def _get(d: dict[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    if key not in d:
        raise XmodelError(f"{what} lacks {key!r}")
    return _field(d[key], kind, f"{what}: {key!r}")


def _name(d: dict[str, Any], what: str) -> str:
    name = _get(d, "name", str, what)
    if not name:
        raise XmodelError(f"{what}: the name is empty")
    return name


def _shape(v: Any, what: str) -> tuple[int, ...] | None:
    if v is None:
        return None
    dims = _field(v, list, what)
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            raise XmodelError(f"{what} must list non-negative integers, got {dims!r}")
    return tuple(dims)


def _depth(v: Any) -> int:
    """Nesting depth of a JSON value (iterative: a crafted file cannot exhaust the stack)."""
    deepest, stack = 0, [(v, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, (dict, list)):
            deepest = max(deepest, d)
            if d > 4 * MAX_DEPTH:
                return d
            stack.extend((y, d + 1) for y in (x.values() if isinstance(x, dict) else x))
    return deepest


def load(path: str | Path | IO[bytes]) -> Graph:
    """Read an .xmodel file (or binary stream) back into a :class:`Graph`. Any defect of the
    file is an :class:`XmodelError` that says what is wrong; nothing in it is executed."""
    where = str(path) if isinstance(path, (str, Path)) else "<stream>"
    try:
        if isinstance(path, (str, Path)):
            p = Path(path)
            if p.is_dir():
                raise XmodelError(f"{where} is a directory, not an .xmodel file")
            size = p.stat().st_size
            zf = zipfile.ZipFile(str(p))
        else:
            pos = path.tell()
            size = path.seek(0, os.SEEK_END) - pos
            path.seek(pos)
            zf = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise XmodelError(f"{where} does not exist") from None
    except PermissionError:
        raise XmodelError(f"{where} cannot be read (permission denied)") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, OSError,
            NotImplementedError) as e:
        raise XmodelError(f"{where} is not an .xmodel file (not a ZIP container: "
                          f"{type(e).__name__})") from None
    with zf:
        r = _Reader(zf, where, size)
        if JSON_ENTRY not in r.names:
            raise XmodelError(f"{where}: no {JSON_ENTRY} entry; not an .xmodel file")
        try:
            doc = json.loads(r.read(JSON_ENTRY, MAX_JSON_BYTES).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as e:
            raise XmodelError(f"{where}: {JSON_ENTRY} is not valid JSON: {e}") from None
        except RecursionError:
            raise XmodelError(f"{where}: {JSON_ENTRY} nests too deeply") from None
        try:
            json.dumps(doc, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise XmodelError(f"{where}: {JSON_ENTRY} holds a lone surrogate escape (\\udXXX), "
                              "which is not valid Unicode; the file is corrupt") from None
        except (RecursionError, ValueError):
            pass  # reported below with the document's structure
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise XmodelError(f"{where}: not a {FORMAT} document")
        if doc.get("version") != VERSION:
            raise XmodelError(f"{where}: format version {doc.get('version')!r}; this compiler "
                              f"reads version {VERSION}; recompile the model")
        if _depth(doc) > 2 * MAX_DEPTH + 8:
            raise XmodelError(f"{where}: {JSON_ENTRY} nests deeper than an .xmodel can "
                              f"({_depth(doc)} levels)")
        try:
            graph = _build(doc, r)
            graph.check(shapes=False)
            return graph
        except XmodelError as e:
            if str(e).startswith(where):
                raise
            raise XmodelError(f"{where}: {e}") from None
        except XirError as e:
            raise XmodelError(f"{where}: inconsistent model: {e}") from None
        except (KeyError, TypeError, ValueError, AttributeError, IndexError,
                OverflowError) as e:
            raise XmodelError(f"{where}: malformed {JSON_ENTRY} ({type(e).__name__}: {e})") \
                from None
        except RecursionError:
            raise XmodelError(f"{where}: {JSON_ENTRY} nests too deeply") from None


def loads(data: bytes) -> Graph:
    return load(io.BytesIO(data))


def _build(doc: dict[str, Any], r: _Reader) -> Graph:
    g = _get(doc, "graph", dict, "the document")
    graph = Graph(_name(g, "the graph"))
    for k, v in r.attrs(g.get("attrs", {}), "graph attrs").items():
        graph.attrs[k] = v
    ops: dict[str, Op] = {}
    for i, spec in enumerate(_get(g, "ops", list, "the graph")):
        what = f"op #{i}"
        spec = _field(spec, dict, what)
        name = _name(spec, what)
        what = f"op {name!r}"
        op_type = _get(spec, "type", str, what)
        inputs: dict[str, list[Op]] = {}
        for pair in _get(spec, "inputs", list, what):
            if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[0], str) \
                    or not isinstance(pair[1], list) \
                    or not all(isinstance(n, str) for n in pair[1]):
                raise XmodelError(f"{what}: each input is [argument, [tensor names]], got "
                                  f"{pair!r}"[:200])
            arg, names = pair
            if arg in inputs:
                raise XmodelError(f"{what} lists argument {arg!r} twice")
            try:
                inputs[arg] = [ops[n] for n in names]
            except KeyError as e:
                raise XmodelError(f"op {name!r} reads {e.args[0]!r}, which no earlier "
                                  "op produces") from None
        out = _get(spec, "output", dict, what)
        shape = _shape(out.get("shape"), f"{what}: output shape")
        dtype = _get(out, "dtype", str, f"{what}: output")
        attrs = r.attrs(spec.get("attrs", {}), f"{what}: attrs")
        op = graph.create_op(name, op_type, inputs, attrs, shape=shape, dtype=dtype)
        _check_tensor(op, what)
        for k, v in r.attrs(out.get("attrs", {}), f"{what}: output attrs").items():
            op.output.attrs[k] = v
        ops[op.name] = op
    outputs = _get(g, "outputs", list, "the graph")
    for n in outputs:
        if not isinstance(n, str) or n not in ops:
            raise XmodelError(f"graph output {n!r} is not an op of the model")
    graph.set_outputs([graph.get_tensor(n) for n in outputs])
    root_doc = _get(doc, "subgraph", dict, "the document")
    root = graph.root_subgraph
    root.name = _name(root_doc, "the root subgraph")
    _restore(root, root_doc, r, ops, 0)
    return graph


def _check_tensor(op: Op, what: str) -> None:
    """The declared output type is one the compiler can hold, and a const's data matches it."""
    t = op.output
    dt = np.dtype(t.dtype)
    if dt.kind not in _ARRAY_KINDS:
        raise XmodelError(f"{what}: dtype {t.dtype!r} is not bool or numeric")
    if t.shape is not None:
        check_tensor_size(t.shape, dt, what, XmodelError)
    if op.type == CONST:
        data = op.attrs.get("data")
        if not isinstance(data, np.ndarray):
            raise XmodelError(f"{what}: a const op needs an array 'data' attribute")
        if data.shape != t.shape or data.dtype.name != t.dtype:
            raise XmodelError(f"{what}: its data is {list(data.shape)}/{data.dtype} but its "
                              f"tensor is declared {None if t.shape is None else list(t.shape)}"
                              f"/{t.dtype}; the file is inconsistent")


#: Subgraph attributes the compiler, runtime and summary read as names. Set means a string:
#: a device set to None would count as assigned (plugin_api.is_assigned) without naming one.
_STRING_ATTRS = ("device", "runner", "plugin")


def _bad_name_attr(attrs: dict[str, Any]) -> tuple[str, Any] | None:
    """The first of _STRING_ATTRS that is set to something other than a string, with it."""
    for k in _STRING_ATTRS:
        if k in attrs and not isinstance(attrs[k], str):
            return k, attrs[k]
    return None


def _restore(sub: Subgraph, doc: dict[str, Any], r: _Reader, ops: dict[str, Op],
             depth: int) -> None:
    if depth > MAX_DEPTH:
        raise XmodelError(f"the subgraph tree nests deeper than {MAX_DEPTH} levels")
    attrs = r.attrs(doc.get("attrs", {}), f"subgraph {sub.name!r}: attrs")
    bad = _bad_name_attr(attrs)
    if bad is not None:
        raise XmodelError(f"subgraph {sub.name!r}: attribute {bad[0]!r} is a "
                          f"{type(bad[1]).__name__}, not a string; the file is corrupt")
    sub.attrs.update(attrs)
    if "children" not in doc:
        if not sub.is_root and "ops" not in doc:
            raise XmodelError(f"subgraph {sub.name!r} lists neither children nor ops")
        return
    groups = []
    children = _get(doc, "children", list, f"subgraph {sub.name!r}")
    for child in children:
        child = _field(child, dict, f"a child of {sub.name!r}")
        cname = _name(child, f"a child of {sub.name!r}")
        names = _leaf_ops(child, depth + 1)
        missing = [n for n in names if n not in ops]
        if missing:
            raise XmodelError(f"subgraph {cname!r} lists unknown ops {missing[:5]}")
        groups.append((cname, frozenset(ops[n] for n in names)))
    for child_sub, child_doc in zip(sub._restore_children(groups), children, strict=True):
        _restore(child_sub, child_doc, r, ops, depth + 1)


def _leaf_ops(doc: dict[str, Any], depth: int) -> list[str]:
    if depth > MAX_DEPTH:
        raise XmodelError(f"the subgraph tree nests deeper than {MAX_DEPTH} levels")
    what = f"subgraph {doc.get('name')!r}"
    if "children" in doc:
        return [n for c in _get(doc, "children", list, what)
                for n in _leaf_ops(_field(c, dict, f"a child of {doc.get('name')!r}"),
                                   depth + 1)]
    names = _get(doc, "ops", list, what)
    if not all(isinstance(n, str) for n in names):
        raise XmodelError(f"{what}: ops must be a list of op names")
    return list(names)
