"""Workload traces for the memory manager: ONNX models (inference and training-like) and synthetic.

`onnx_trace` turns an ONNX graph into the API calls a runtime would make: every weight is
allocated and written once; every node needs its (float) inputs and its output on the card and
updates its output; an activation is freed after its last use; the graph outputs are read.
Shapes come from onnx shape inference. Activations (anything computed from the data input) scale
with the batch size, weights do not. With `training=True` the forward pass keeps its activations
and is followed by a backward pass in reverse order (each node needs its inputs, weights and the
gradient of its output, and updates the gradients of its inputs and weights) and an optimizer
step that updates every weight from its gradient.

The onnx package ships the architectures used (backend test data, light/ models, listed in
`compiler.zoo.LIGHT`); their weights are generated in the graph by ConstantOfShape nodes, which
count as weights here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from compiler.zoo import LIGHT, light_path
from pyhost.memory.trace import Trace

_FLOAT_TYPES = {1: 4, 10: 2, 11: 8, 16: 2}   # FLOAT, FLOAT16, DOUBLE, BFLOAT16: bytes
_PASS_THROUGH = {"Reshape", "Flatten", "Dropout", "Identity", "Squeeze", "Unsqueeze"}


class _Ids:
    def __init__(self) -> None:
        self.n = 0
        self.of: dict[str, int] = {}

    def new(self, key: str) -> int:
        self.of[key] = self.n
        self.n += 1
        return self.n - 1


def onnx_trace(model: str | Path, *, batch: int = 1, training: bool = False,
               iterations: int = 1) -> Trace:
    """The API calls of `iterations` inferences (or training iterations) of an ONNX model.

    The weights are allocated and written once and live through every iteration (training
    updates them on the card); each iteration writes a new data input, allocates its own
    activations (and gradients) and frees them, reads the outputs and frees them.
    `meta["iteration_starts"]` holds the index of each iteration's first record.
    """
    import onnx
    from onnx import shape_inference

    path = light_path(model) if isinstance(model, str) and model in LIGHT \
        else Path(model)
    m = shape_inference.infer_shapes(onnx.load(str(path)))
    g = m.graph
    inits = {i.name for i in g.initializer}
    info: dict[str, tuple[int, list[int] | None]] = {}
    for v in [*g.value_info, *g.input, *g.output]:
        tt = v.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
        info[v.name] = (tt.elem_type, None if any(d <= 0 for d in dims) else dims)

    def nbytes(name: str) -> int | None:
        et, dims = info.get(name, (0, None))
        if et not in _FLOAT_TYPES or dims is None:
            return None
        return int(np.prod(dims, dtype=np.int64)) * _FLOAT_TYPES[et]

    weights: dict[str, int] = {}      # name -> bytes
    for node in g.node:
        if node.op_type == "ConstantOfShape" and all(i in inits for i in node.input):
            n = nbytes(node.output[0])
            if n:
                weights[node.output[0]] = n
    for init in g.initializer:
        if init.data_type in _FLOAT_TYPES:
            weights[init.name] = int(np.prod(init.dims, dtype=np.int64)) * \
                _FLOAT_TYPES[init.data_type]
    data_inputs = [i.name for i in g.input if i.name not in inits and i.name not in weights
                   and nbytes(i.name)]
    acts: dict[str, int] = {n: nbytes(n) * batch for n in data_inputs}  # type: ignore[operator]
    nodes = []     # (float inputs, output) of compute nodes, in graph (topological) order
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.output[0] in weights:
            continue
        ins = [i for i in dict.fromkeys(node.input) if i in acts or i in weights]
        if not ins or not node.output:
            continue
        out = node.output[0]
        n = nbytes(out)
        if n is None:
            if node.op_type not in _PASS_THROUGH:
                continue
            n = acts.get(ins[0], weights.get(ins[0], 0)) // (batch if ins[0] in acts else 1)
        from_data = any(i in acts for i in ins)
        if not from_data:
            continue   # computed from weights alone: a constant, folded by any compiler
        acts[out] = n * batch
        nodes.append((ins, out))
    outputs = [o.name for o in g.output if o.name in acts]

    stem = Path(path).stem.removeprefix("light_")
    tr = Trace(meta={"name": f"{stem}{'-train' if training else ''}-b{batch}"
                             f"{f'-x{iterations}' if iterations > 1 else ''}",
                     "model": Path(path).stem, "batch": batch, "training": training,
                     "iterations": iterations, "iteration_starts": []})
    ids = _Ids()
    for w, n in weights.items():
        tr.alloc(ids.new(w), n)
        tr.write(ids.of[w], n)
    last_use: dict[str, int] = {}
    for k, (ins, _) in enumerate(nodes):
        for i in ins:
            last_use[i] = k
    keep = set(outputs) | set(weights)
    for it in range(iterations):
        tr.meta["iteration_starts"].append(len(tr.records) if it else 0)
        for d in data_inputs:
            tr.alloc(ids.new(d), acts[d])
            tr.write(ids.of[d], acts[d])
        for k, (ins, out) in enumerate(nodes):
            if out not in ids.of:
                tr.alloc(ids.new(out), acts[out])
            tr.need(*(ids.of[i] for i in ins), ids.of[out])
            tr.updated(ids.of[out])
            if not training:
                for i in ins:
                    if last_use.get(i) == k and i not in keep:
                        tr.free(ids.of.pop(i))
        for o in outputs:
            tr.read(ids.of[o], acts[o])
        if training:
            _backward(tr, ids, nodes, weights, acts, outputs)
        for name in list(ids.of):
            if name not in weights:
                tr.free(ids.of.pop(name))
    for name in list(ids.of):
        tr.free(ids.of.pop(name))
    return tr


def _backward(tr: Trace, ids: _Ids, nodes: list[tuple[list[str], str]], weights: dict[str, int],
              acts: dict[str, int], outputs: list[str]) -> None:
    """Reverse-order gradients and an SGD step; forward activations are freed once consumed."""
    size = {**weights, **acts}
    grad: dict[str, int] = {}

    def g_of(name: str) -> tuple[int, bool]:
        """Id of the gradient of `name`, and whether it existed (then it accumulates)."""
        if name in grad:
            return grad[name], True
        grad[name] = ids.new("d:" + name)
        tr.alloc(grad[name], size[name])
        return grad[name], False

    for o in outputs:            # the loss gradient comes from the host
        gid, _ = g_of(o)
        tr.write(gid, size[o])
    for ins, out in reversed(nodes):
        if out not in grad:
            continue             # does not reach an output
        gy = grad[out]
        targets = [(i, *g_of(i)) for i in ins]
        operands = [ids.of[i] for i in ins] + [gy]
        operands += [gid for _, gid, existed in targets if existed]   # accumulate: read too
        operands += [gid for _, gid, existed in targets if not existed]
        tr.need(*dict.fromkeys(operands))
        for _, gid, _ in targets:
            tr.updated(gid)
        tr.free(grad.pop(out))
        ids.of.pop("d:" + out, None)
        if out not in outputs:
            tr.free(ids.of.pop(out))
    for w in weights:
        if w in grad:
            tr.need(ids.of[w], grad[w])
            tr.updated(ids.of[w])
            tr.free(grad.pop(w))
            ids.of.pop("d:" + w, None)
    for name in list(grad):      # gradients of the data inputs: not needed
        tr.free(grad.pop(name))
        ids.of.pop("d:" + name, None)


def many_small_trace(layers: int = 2000, *, seed: int = 0, lo: int = 256,
                     hi: int = 4096) -> Trace:
    """A chain of many small layers: each needs a small weight, its input and its output.

    Weights (lo..hi bytes, multiples of 64) are written up front; activations are produced and
    consumed by the next layer; the last activation is read. This is the workload where one
    driver call per tensor would dominate, so batching matters most.
    """
    rng = np.random.default_rng(seed)
    tr = Trace(meta={"name": f"many-small-{layers}", "layers": layers})
    w = [int(x) * 64 for x in rng.integers(lo // 64, hi // 64 + 1, layers)]
    a = [int(x) * 64 for x in rng.integers(lo // 64, hi // 64 + 1, layers + 1)]
    for i in range(layers):
        tr.alloc(i, w[i])
        tr.write(i, w[i])
    act = layers
    tr.alloc(act, a[0])
    tr.write(act, a[0])
    for i in range(layers):
        nxt = layers + 1 + i
        tr.alloc(nxt, a[i + 1])
        tr.need(i, act, nxt)
        tr.updated(nxt)
        tr.free(act)
        act = nxt
    tr.read(act, a[-1])
    for i in range(layers):
        tr.free(i)
    tr.free(act)
    return tr


def cyclic_trace(capacity: int, ratio: float, *, mixed: bool = False, tensors: int = 40,
                 cycles: int = 10, seed: int = 0) -> Trace:
    """Cyclic access to a working set of `ratio` times `capacity` (LRU's classic worst case).

    `tensors` tensors (equal sizes, or `mixed`: log-uniform over a 25x range, at most a third
    of the card) are written once and needed one per call in the same order, `cycles` times;
    with `mixed`, every fourth tensor is updated on the card when needed and read back after
    the last pass. Each pass is an iteration (`meta["iteration_starts"]`).
    """
    rng = np.random.default_rng(seed)
    total = ratio * capacity
    if mixed:
        w = np.exp(rng.uniform(np.log(1.0), np.log(25.0), tensors))
        raw = np.minimum(w / w.sum() * total, capacity / 3)
        raw *= total / raw.sum()
    else:
        raw = np.full(tensors, total / tensors)
    sizes = [max(64, int(x) // 64 * 64) for x in raw]
    name = f"cyclic-{'mixed' if mixed else 'uniform'}-{ratio:g}x"
    tr = Trace(meta={"name": name, "capacity": capacity, "iterations": cycles,
                     "iteration_starts": []})
    for t, n in enumerate(sizes):
        tr.alloc(t, n)
        tr.write(t, n)
    for c in range(cycles):
        tr.meta["iteration_starts"].append(len(tr.records) if c else 0)
        for t in range(tensors):
            tr.need(t)
            if mixed and t % 4 == 0:
                tr.updated(t)
    for t, n in enumerate(sizes):
        if mixed and t % 4 == 0:
            tr.read(t, n)
        tr.free(t)
    return tr


def small_tensors_trace(tensors: int = 10_000, size: int = 64) -> Trace:
    """Many small tensors through the plain API, without a schedule: each is written, needed
    (one per call), updated on the card and read back, in phases (all writes, all needs, all
    reads), the way a library hands over a batch of small operands. One driver call per
    transfer would be 2 per tensor."""
    tr = Trace(meta={"name": f"small-{tensors}x{size}B", "iterations": 1,
                     "iteration_starts": [0]})
    for t in range(tensors):
        tr.alloc(t, size)
        tr.write(t, size)
    for t in range(tensors):
        tr.need(t)
        tr.updated(t)
    for t in range(tensors):
        tr.read(t, size)
    for t in range(tensors):
        tr.free(t)
    return tr
