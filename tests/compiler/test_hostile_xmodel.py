"""Hostile .xmodel files: the loader checks what it reads, and a file never runs code it names.

Targeted cases assert the exact error class and the key words of each message; hypothesis
mutates a valid file byte by byte (and its JSON document with valid CRCs) and checks that only
XmodelError ever leaves the loader, and that what loads can be inspected, drawn and checked for
the card without any other exception.
"""

from __future__ import annotations

import io
import json
import sys
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler import cli, xmodel
from compiler.errors import CompilerError, RunnerError, UntrustedRunnerError, XmodelError
from compiler.pipeline import compile_model
from compiler.runtime import GraphExecutor
from compiler.runtime.card import CardRuntimeError, accel_image, is_accel_subgraph
from compiler.runtime.loader import check_runners
from compiler.summary import format_summary, summarize, to_dot
from compiler.xir import Graph
from tests.compiler.helpers import conv_net


@pytest.fixture(scope="module")
def accel_bytes() -> bytes:
    """A quantized conv net with a CPU, an ACCEL and a SOFTMAX_IP subgraph."""
    g = compile_model(conv_net(), {"plugin": "accel,softmax_ip", "quantize": {"samples": 1}}).graph
    assert {c.device for c in g.root_subgraph.children} == {"CPU", "ACCEL", "SOFTMAX_IP"}
    return xmodel.dumps(g)


@pytest.fixture(scope="module")
def cpu_bytes() -> bytes:
    return xmodel.dumps(compile_model(conv_net()).graph)


# --- helpers --------------------------------------------------------------------------------------

def rewrite(data: bytes, edit: Callable[[str, bytes], bytes | None],
            compress: int = zipfile.ZIP_STORED, extra: dict[str, bytes] | None = None) -> bytes:
    """A copy of an .xmodel with valid CRCs, ``edit(name, payload)`` changing or dropping
    (None) entries, and ``extra`` entries added."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", compress) as dst:
        for info in src.infolist():
            payload = edit(info.filename, src.read(info))
            if payload is not None:
                dst.writestr(info.filename, payload)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # duplicate names on purpose
            for k, v in (extra or {}).items():
                dst.writestr(k, v)
    return out.getvalue()


def doc_of(data: bytes) -> dict[str, Any]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return json.loads(z.read("xmodel.json"))  # type: ignore[no-any-return]


def with_doc(data: bytes, change: Callable[[dict[str, Any]], None]) -> bytes:
    doc = doc_of(data)
    change(doc)
    return rewrite(data, lambda n, p: json.dumps(doc).encode() if n == "xmodel.json" else p)


def op_doc(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(o for o in doc["graph"]["ops"] if o["name"] == name)


def accel_doc(doc: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in doc["subgraph"]["children"] if c["attrs"].get("device") == "ACCEL")


def refused(data: bytes, *words: str) -> XmodelError:
    with pytest.raises(XmodelError) as e:
        xmodel.loads(data)
    for w in words:
        assert w in str(e.value), (w, str(e.value))
    return e.value


def use_loaded(g: Graph) -> None:
    """What a user does with a loaded model short of running it: every failure is one of the
    compiler's own errors."""
    s = summarize(g)
    format_summary(s)
    json.dumps(s)
    to_dot(g, show_consts=True)
    root = g.root_subgraph
    if root.is_leaf:
        return
    try:
        check_runners(root.children)
    except RunnerError:
        pass
    for c in root.children:
        if is_accel_subgraph(c):
            try:
                accel_image(c)
            except CardRuntimeError:
                pass


# --- the container --------------------------------------------------------------------------------

def test_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(XmodelError, match="is a directory"):
        xmodel.load(tmp_path)
    with pytest.raises(XmodelError, match="does not exist"):
        xmodel.load(tmp_path / "nope.xmodel")


def test_truncated_and_garbage(cpu_bytes: bytes) -> None:
    for n in (0, 10, len(cpu_bytes) // 2, len(cpu_bytes) - 1):
        refused(cpu_bytes[:n], "not an .xmodel file")
    refused(b"\x00" * 1000, "not a ZIP container")


def test_crc_failure_is_reported_as_corrupt(cpu_bytes: bytes) -> None:
    with zipfile.ZipFile(io.BytesIO(cpu_bytes)) as z:
        info = z.getinfo("blobs/000000.npy")
    data = bytearray(cpu_bytes)
    at = info.header_offset + 30 + len(info.filename) + info.file_size - 1  # last data byte
    data[at] ^= 0xFF
    refused(bytes(data), "blobs/000000.npy", "corrupt", "CRC")
    with zipfile.ZipFile(io.BytesIO(cpu_bytes)) as z:
        info = z.getinfo("xmodel.json")
    data = bytearray(cpu_bytes)
    data[info.header_offset + 30 + len(info.filename) + 5] ^= 0x01
    refused(bytes(data), "xmodel.json", "CRC")


def test_compressed_duplicate_and_foreign_entries(cpu_bytes: bytes) -> None:
    refused(rewrite(cpu_bytes, lambda n, p: p, zipfile.ZIP_DEFLATED), "compressed")
    refused(rewrite(cpu_bytes, lambda n, p: p, extra={"xmodel.json": b"{}"}), "appears twice")
    refused(rewrite(cpu_bytes, lambda n, p: p, extra={"evil.py": b"import os"}),
            "unexpected entry 'evil.py'")
    refused(rewrite(cpu_bytes, lambda n, p: p, extra={"../../etc/passwd": b""}),
            "unexpected entry")


def test_entry_sizes_beyond_the_file(cpu_bytes: bytes) -> None:
    """A central directory that declares more bytes than the file has (a zip bomb's shape)."""
    data = bytearray(cpu_bytes)
    with zipfile.ZipFile(io.BytesIO(cpu_bytes)) as z:
        info = z.getinfo("blobs/000000.npy")
    cd = data.find(b"PK\x01\x02")  # the central directory record of the first entry
    assert cd >= 0
    data[cd + 20:cd + 24] = (1 << 31).to_bytes(4, "little")
    data[cd + 24:cd + 28] = (1 << 31).to_bytes(4, "little")
    e = refused(bytes(data))
    assert "blobs/000000.npy" in str(e) or "not an .xmodel" in str(e)
    assert info.file_size < 1 << 31


# --- npy blobs ------------------------------------------------------------------------------------

def npy_header(shape: tuple[int, ...], descr: str) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False,
                                               "shape": shape})
    return buf.getvalue()


def test_npy_header_against_the_entry_size(cpu_bytes: bytes) -> None:
    """A header declaring a terabyte over 8 bytes of data is refused before allocating."""
    huge = npy_header((1 << 38,), "<f4") + b"\x00" * 8
    refused(rewrite(cpu_bytes, lambda n, p: huge if n == "blobs/000000.npy" else p),
            "blobs/000000.npy", "header declares shape [274877906944]", "holds 8 bytes")
    short = npy_header((4,), "<f4") + b"\x00" * 15
    refused(rewrite(cpu_bytes, lambda n, p: short if n == "blobs/000000.npy" else p),
            "header declares")


def test_npy_header_that_is_not_a_literal(cpu_bytes: bytes) -> None:
    """NUL bytes inside the header's dict (numpy's parser then fails in tokenize): corrupt."""
    cut = b"e, 'shape': ("
    bad = npy_header((4,), "<f4").replace(cut, b"\x00" * len(cut), 1) + b"\x00" * 16
    refused(rewrite(cpu_bytes, lambda n, p: bad if n == "blobs/000000.npy" else p),
            "blobs/000000.npy", "not a valid .npy array")


@pytest.mark.parametrize("attr", ["device", "runner", "plugin"])
@pytest.mark.parametrize("value", [[], None, 3])
def test_subgraph_names_must_be_strings(accel_bytes: bytes, attr: str, value: Any) -> None:
    """A subgraph's device/runner/plugin that is not a string is refused at load (it used to
    load and break the summary with a raw TypeError; found by the document-edit test)."""
    def change(doc: dict[str, Any]) -> None:
        accel_doc(doc)["attrs"][attr] = value
    refused(with_doc(accel_bytes, change), f"attribute {attr!r}", "not a string")


def test_a_subgraph_without_a_device_still_summarizes(accel_bytes: bytes) -> None:
    """A hand-edited file whose subgraph lost its device: the summary counts it under None
    (it raised a raw TypeError sorting None against 'CPU'; found by the document-edit test)."""
    def change(doc: dict[str, Any]) -> None:
        del accel_doc(doc)["attrs"]["device"]
    g = xmodel.loads(with_doc(accel_bytes, change))
    use_loaded(g)
    assert None in summarize(g)["devices"]


def test_npy_object_and_record_dtypes_are_refused(cpu_bytes: bytes) -> None:
    for descr in ("|O", "<U4", "|V8", "<M8[s]"):
        bad = npy_header((1,), descr) + b"\x00" * 16
        refused(rewrite(cpu_bytes, lambda n, p, bad=bad: bad if n == "blobs/000000.npy" else p),
                "blobs/000000.npy")
    refused(rewrite(cpu_bytes, lambda n, p: b"\x93NUMPY\x09\x00junk" if n ==
                    "blobs/000000.npy" else p), "not a valid .npy array")


# --- the document ---------------------------------------------------------------------------------

def test_declared_shapes_and_dtypes(cpu_bytes: bytes) -> None:
    def first(doc: dict[str, Any]) -> dict[str, Any]:
        return doc["graph"]["ops"][0]["output"]

    refused(with_doc(cpu_bytes, lambda d: first(d).update(shape=[1 << 20, 1 << 20])),
            "op 'x'", "4096.0 GiB", "above the compiler's limit")
    refused(with_doc(cpu_bytes, lambda d: first(d).update(shape=[1 << 62] * 3)),
            "op 'x'", "overflows int64")
    refused(with_doc(cpu_bytes, lambda d: first(d).update(shape=[1, -3])),
            "non-negative integers")
    refused(with_doc(cpu_bytes, lambda d: first(d).update(shape=[True, 3])),
            "non-negative integers")
    refused(with_doc(cpu_bytes, lambda d: first(d).update(shape="1,3")), "must be a JSON array")
    refused(with_doc(cpu_bytes, lambda d: first(d).update(dtype="object")), "not supported")
    refused(with_doc(cpu_bytes, lambda d: first(d).update(dtype="V100000000")), "not supported")
    refused(with_doc(cpu_bytes, lambda d: first(d).update(dtype="no-such-type")),
            "not a numpy dtype")


def test_const_data_must_match_its_tensor(cpu_bytes: bytes) -> None:
    doc = doc_of(cpu_bytes)
    const = next(o for o in doc["graph"]["ops"] if o["type"] == "const")
    name = const["name"]

    def grow(d: dict[str, Any]) -> None:
        op_doc(d, name)["output"]["shape"][0] += 1

    refused(with_doc(cpu_bytes, grow), f"op {name!r}", "its data is", "inconsistent")
    refused(with_doc(cpu_bytes, lambda d: op_doc(d, name)["attrs"].pop("data")),
            "array 'data' attribute")


def test_structure_errors_name_what_is_wrong(cpu_bytes: bytes) -> None:
    cases: list[tuple[Callable[[dict[str, Any]], Any], str]] = [
        (lambda d: d.update(graph=[]), "'graph' must be a JSON object"),
        (lambda d: d.pop("subgraph"), "lacks 'subgraph'"),
        (lambda d: d["graph"].update(ops={}), "'ops' must be a JSON array"),
        (lambda d: d["graph"]["ops"].__setitem__(0, 7), "op #0 must be a JSON object"),
        (lambda d: d["graph"]["ops"][0].update(name=""), "name is empty"),
        (lambda d: d["graph"]["ops"][0].update(type=3), "'type' must be a JSON string"),
        (lambda d: d["graph"]["ops"][1].update(inputs=[["X"]]), "[argument, [tensor names]]"),
        (lambda d: d["graph"]["ops"][0].update(attrs=[1, 2]), "attrs must be a JSON object"),
        (lambda d: d["graph"].update(outputs=["ghost"]), "graph output 'ghost'"),
        (lambda d: d["graph"]["ops"][0]["attrs"].update(a={"__pickle__": "x"}),
         "unknown tagged value"),
        (lambda d: d["graph"]["ops"][0]["attrs"].update(a={"__float__": "1e3"}),
         "__float__ must be nan, inf or -inf"),
        (lambda d: d["graph"]["ops"][0]["attrs"].update(a={"__ndarray__": 5}),
         "blob reference must name a .npy entry"),
        (lambda d: d["graph"]["ops"][0]["attrs"].update(a={"__bytes__": "blobs/000000.npy"}),
         "blob reference must name a .bin entry"),
        (lambda d: d["subgraph"]["children"][0].update(ops=[1]), "ops must be a list"),
        (lambda d: d["subgraph"]["children"][0].pop("ops"), "lacks 'ops'"),
        (lambda d: d["subgraph"]["children"].append({"name": "x2", "ops": []}), "has no ops"),
    ]
    for change, words in cases:
        refused(with_doc(cpu_bytes, change), words)


def test_nesting_depth_is_bounded(cpu_bytes: bytes) -> None:
    deep: Any = 1
    for _ in range(xmodel.MAX_DEPTH + 5):
        deep = [deep]
    refused(with_doc(cpu_bytes, lambda d: d["graph"]["ops"][0]["attrs"].update(a=deep)),
            "nest")
    text = "[" * 100_000 + "1" + "]" * 100_000
    refused(rewrite(cpu_bytes, lambda n, p: p.replace(b'"attrs": {}', b'"attrs": {"a": '
                                                      + text.encode() + b"}", 1)
                    if n == "xmodel.json" else p), "nest")

    def tree(d: dict[str, Any]) -> None:
        child = d["subgraph"]["children"][0]
        node = child
        for i in range(xmodel.MAX_DEPTH + 2):
            node["children"] = [{"name": f"n{i}", "attrs": {}, "ops": node.pop("ops")}]
            node = node["children"][0]

    refused(with_doc(cpu_bytes, tree), "nest")


def test_json_size_and_encoding(cpu_bytes: bytes) -> None:
    refused(rewrite(cpu_bytes, lambda n, p: b"\xff\xfe" + p if n == "xmodel.json" else p),
            "not valid JSON")
    refused(rewrite(cpu_bytes, lambda n, p: b'{"format": "dnncard-xmodel", "version": 1, "x": '
                    + b"9" * 5000 + b"}" if n == "xmodel.json" else p), "not valid JSON")


# --- the accelerator's attributes -----------------------------------------------------------------

def test_tampered_accel_config_is_caught(accel_bytes: bytes) -> None:
    """A changed N no longer matches the I/O layout; smaller scratchpads no longer hold the
    program: both refused before anything runs (today they ran and returned garbage)."""
    def attrs(d: dict[str, Any]) -> dict[str, Any]:
        return accel_doc(d)["attrs"]  # type: ignore[no-any-return]

    cases: list[tuple[Callable[[dict[str, Any]], Any], str]] = [
        (lambda d: attrs(d)["accel_config"].update(n=16), "accel_config says N = 16"),
        (lambda d: attrs(d)["accel_config"].update(acc_depth=8), "SP_RANGE"),
        (lambda d: attrs(d)["accel_config"].update(inp_depth=2), "SP_RANGE"),
        (lambda d: attrs(d)["accel_config"].update(n=True), "bad accel_config"),
        (lambda d: attrs(d)["accel_config"].update(n=0), "bad accel_config"),
        (lambda d: attrs(d)["accel_config"].update(bogus=1), "bad accel_config"),
        (lambda d: attrs(d)["accel_io"][0].update(nbytes=7), "does not match its shape"),
        (lambda d: attrs(d)["accel_io"][0].update(n=4), "N = 4"),
        (lambda d: attrs(d)["accel_io"][0].update(slot=9), "expected 2"),
        (lambda d: attrs(d)["accel_io"][0].update(scale=0.0), "finite positive"),
        (lambda d: attrs(d)["accel_io"][0].update(zero_point=300), "zero_point"),
        (lambda d: attrs(d)["accel_io"][0].update(shape=[1, 2, 3, 4, 5]), "1 to 4 dimensions"),
        (lambda d: attrs(d)["accel_io"][0].update(shape=[]), "1 to 4 dimensions"),
        (lambda d: attrs(d)["accel_io"].reverse(), "inputs come first"),
        (lambda d: attrs(d).update(accel_scratch_bytes=-1), "accel_scratch_bytes"),
        (lambda d: attrs(d).update(accel_scratch_bytes="many"), "accel_scratch_bytes"),
        (lambda d: attrs(d).update(accel_io={}), "accel_io must be a list"),
    ]
    for change, words in cases:
        g = xmodel.loads(with_doc(accel_bytes, change))
        (sub,) = [c for c in g.root_subgraph.children if is_accel_subgraph(c)]
        with pytest.raises(CardRuntimeError) as e:
            accel_image(sub)
        assert words in str(e.value), (words, str(e.value))


def test_tampered_program_is_caught(accel_bytes: bytes) -> None:
    doc = doc_of(accel_bytes)
    ref = accel_doc(doc)["attrs"]["accel_program"]["__bytes__"]

    def patch(pc: int, raw: bytes) -> Callable[[str, bytes], bytes]:
        def edit(n: str, p: bytes) -> bytes:
            return p[:16 * pc] + raw + p[16 * pc + 16:] if n == ref else p
        return edit

    def image(data: bytes) -> None:
        g = xmodel.loads(data)
        accel_image(next(c for c in g.root_subgraph.children if is_accel_subgraph(c)))

    for edit, words in [
        (patch(0, b"\x0f" + bytes(15)), "does not decode"),              # opcode 15
        (patch(0, bytes(16)), "does not decode"),                        # opcode 0
        (lambda n, p: p[:-16] if n == ref else p, "the last instruction is not END"),
        (lambda n, p: p[:-1] if n == ref else p, "whole number"),
    ]:
        with pytest.raises(CardRuntimeError) as e:
            image(rewrite(accel_bytes, edit))
        assert words in str(e.value), (words, str(e.value))


# --- runners: a file never runs code it names -----------------------------------------------------

EVIL = '''
from pathlib import Path
Path({marker!r}).write_text("pwned")


class Runner:
    def __init__(self, subgraph, options):
        Path({marker!r}).write_text("pwned by the runner")
'''


def _evil_model(cpu_bytes: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                ) -> tuple[Path, Path]:
    marker = tmp_path / "pwned.txt"
    mod = tmp_path / "evilmod_xmodel.py"
    mod.write_text(EVIL.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "evilmod_xmodel", raising=False)
    path = tmp_path / "evil.xmodel"
    path.write_bytes(with_doc(cpu_bytes, lambda d: d["subgraph"]["children"][0]["attrs"].update(
        runner="evilmod_xmodel:Runner")))
    return path, marker


def test_a_crafted_runner_is_refused_and_never_imported(
        cpu_bytes: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path, marker = _evil_model(cpu_bytes, tmp_path, monkeypatch)
    g = xmodel.load(path)                          # loading reads data only
    with pytest.raises(UntrustedRunnerError, match="refusing to import 'evilmod_xmodel'"):
        GraphExecutor(g)
    assert cli.main(["run", str(path)]) == 1
    err = capsys.readouterr().err
    assert "refusing to import 'evilmod_xmodel'" in err and "--trust-runners" in err
    assert cli.main(["inspect", str(path)]) == 0   # inspecting shows it, runs nothing
    assert "evilmod_xmodel:Runner" in capsys.readouterr().out
    assert not marker.exists() and "evilmod_xmodel" not in sys.modules


def test_trust_runners_is_explicit(cpu_bytes: bytes, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """With the flag the named module is imported (that is what trusting means)."""
    path, marker = _evil_model(cpu_bytes, tmp_path, monkeypatch)
    with pytest.raises(CompilerError):
        GraphExecutor(xmodel.load(path), trust_runners=True)  # its Runner is no Runner
    assert marker.read_text().startswith("pwned")


# --- random mutations -----------------------------------------------------------------------------

mutation = st.tuples(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]),
                     st.floats(0, 1, exclude_max=True), st.integers(0, 255),
                     st.integers(1, 64))


def mutate(data: bytes, edits: list[tuple[str, float, int, int]]) -> bytes:
    b = bytearray(data)
    for kind, where, value, n in edits:
        if not b:
            break
        i = int(where * len(b))
        if kind == "flip":
            b[i] ^= 1 << (value % 8)
        elif kind == "set":
            b[i:i + n] = bytes([value]) * min(n, len(b) - i)
        elif kind == "insert":
            b[i:i] = bytes([value]) * n
        elif kind == "delete":
            del b[i:i + n]
        else:
            del b[i:]
    return bytes(b)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutation, min_size=1, max_size=6))
def test_random_byte_mutations_raise_only_xmodel_error(accel_bytes: bytes,
                                                       edits: list[Any]) -> None:
    try:
        g = xmodel.loads(mutate(accel_bytes, edits))
    except XmodelError:
        return
    use_loaded(g)


json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=6) | st.sampled_from(["float32", "int8", "object", "blobs/000000.npy",
                                             "blobs/000027.bin", "cpu", "x"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["__ndarray__", "__bytes__", "__float__", "name", "ops", "children",
                         "shape", "n", "a"]), inner, max_size=2),
    max_leaves=6)


def _paths(v: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(v, dict):
        for k, x in v.items():
            out += _paths(x, (*path, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out += _paths(x, (*path, i))
    return out


@pytest.fixture(scope="module")
def accel_paths(accel_bytes: bytes) -> list[tuple[Any, ...]]:
    return _paths(doc_of(accel_bytes))[1:]


@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_document_edits_raise_only_xmodel_error(accel_bytes: bytes,
                                                       accel_paths: list[Any],
                                                       data: st.DataObject) -> None:
    """The same with valid CRCs: a value anywhere in xmodel.json replaced by random JSON."""
    doc = doc_of(accel_bytes)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(accel_paths))
        node = doc
        try:
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = data.draw(json_value)
        except (KeyError, IndexError, TypeError):
            continue
    blob = rewrite(accel_bytes, lambda n, p: json.dumps(doc).encode() if n == "xmodel.json"
                   else p)
    try:
        g = xmodel.loads(blob)
    except XmodelError:
        return
    use_loaded(g)
