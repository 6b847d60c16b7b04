"""The CPU runner: executes a subgraph op by op with the numpy kernels of :mod:`compiler.ops`
(onnx's reference evaluator for ops without one)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from compiler.errors import CompilerError, RunnerError
from compiler.ops.base import describe
from compiler.ops.infer import Kernel, op_kernel
from compiler.ops.registry import get_opdef
from compiler.runtime.base import Runner
from compiler.xir import CONST, DATA, Op, Subgraph, Tensor

Observer = Callable[[Tensor, np.ndarray], None]


class CpuRunner(Runner):
    """Runs a CPU subgraph. ``observer(tensor, value)``, if given, sees every computed tensor
    (calibration uses it).

    ``wide=True`` computes every float tensor in float64 (inputs and constants widened, each
    op's float result kept or widened to float64; outputs too): calibration uses it so that
    what it records does not depend on the CPU. A float32 matrix product's rounding depends on
    the BLAS kernel the CPU selects (OpenBLAS's Haswell and SkylakeX kernels sum in different
    orders), and so would every scale derived from it; in float64 those differences are about
    1e-16 relative, far below the float32 rounding of the recorded ranges."""

    def __init__(self, subgraph: Subgraph, options: Mapping[str, Any] | None = None,
                 observer: Observer | None = None, wide: bool = False) -> None:
        super().__init__(subgraph, options)
        self.observer = observer
        self.wide = wide
        self._wide_consts: dict[str, np.ndarray] = {}
        self.implementations: dict[str, str] = {}
        order = subgraph.topological_sort()
        self._steps: list[tuple[Op, Kernel | None, list[str | None]]] = []
        #: per step, the input positions its kernel widens itself (`OpDef.narrow_inputs`)
        self._narrow: list[frozenset[int]] = []
        for op in order:
            self._narrow.append(frozenset())
            if op.type in (DATA, CONST):
                self._steps.append((op, None, []))
                continue
            kernel, impl = op_kernel(op)
            self.implementations[op.name] = impl
            opdef = get_opdef(op.type)
            if impl == "numpy" and opdef is not None:
                self._narrow[-1] = opdef.narrow_inputs
            names = [None if t is None else t.name for t in op.positional_inputs()]
            self._steps.append((op, kernel, names))
        # free each intermediate after its last reader, keeping the outputs
        keep = {t.name for t in self._outputs}
        last: dict[str, int] = {}
        for i, (_, _, names) in enumerate(self._steps):
            for n in names:
                if n is not None:
                    last[n] = i
        self._free_after: list[list[str]] = [[] for _ in self._steps]
        for n, i in last.items():
            if n not in keep:
                self._free_after[i].append(n)

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        # IEEE results (NaN from sqrt(-1), inf from exp overflow) are the model's semantics,
        # exactly as ONNX Runtime computes them; numpy's warnings about them are noise here
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            return self._run(inputs)

    def _run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        env: dict[str, np.ndarray] = self.check_inputs(inputs)
        wide = self.wide
        lazy: set[str] = set()      # large constants kept narrow in env (wide runs)
        if wide:
            env = {k: _widen(v) for k, v in env.items()}
        for i, (op, kernel, names) in enumerate(self._steps):
            if op.type == CONST:
                data = op.attrs["data"]
                if wide:
                    hit = self._wide_consts.get(op.name)
                    if hit is None and np.asarray(data).nbytes <= WIDE_CACHE_BYTES:
                        hit = self._wide_consts[op.name] = _widen(np.asarray(data))
                    if hit is None:
                        lazy.add(op.name)        # widened where it is used, then freed
                    else:
                        data = hit
                env[op.name] = data
            elif op.type == DATA:
                pass  # fed through the inputs
            else:
                assert kernel is not None
                args = [None if n is None else env[n] for n in names]
                if lazy:
                    # a large constant is widened here for this op, or, where the kernel
                    # widens it itself in blocks (a Gemm's or MatMul's weight), not at all
                    narrow = self._narrow[i]
                    args = [_widen(np.asarray(a)) if n in lazy and j not in narrow else a
                            for j, (n, a) in enumerate(zip(names, args, strict=True))]
                try:
                    y = kernel(*args)
                    del args
                except CompilerError:
                    raise
                except Exception as e:
                    raise RunnerError(f"{describe(op)} failed on the CPU: "
                                      f"{type(e).__name__}: {e}") from e
                t = op.output
                if wide and y.dtype.kind == "f" and np.dtype(t.dtype).kind == "f":
                    y = _widen(y)
                    if y.shape != t.shape:
                        raise RunnerError(f"{describe(op)}: kernel produced {y.shape}, the "
                                          f"graph says {t.shape}")
                elif y.shape != t.shape or y.dtype.name != t.dtype:
                    raise RunnerError(f"{describe(op)}: kernel produced {y.shape}/{y.dtype}, "
                                      f"the graph says {t.shape}/{t.dtype}")
                env[op.name] = y
            if self.observer is not None and op.type != CONST:
                self.observer(op.output, env[op.name])
            for n in self._free_after[i]:
                env.pop(n, None)
        return {t.name: _widen(env[t.name]) if t.name in lazy else env[t.name]
                for t in self._outputs}


#: In a wide run, a constant of at most this many bytes is widened once and kept for the next
#: run; a larger one (VGG-19's first fully connected weight: 411 MB, 822 MB in float64) stays
#: as it is and is widened for each op that reads it, so that a run holds one such copy at a
#: time (and no wide copy of every weight at once: the light VGG-19's calibration peaked at
#: 2.2 GB with that, 1.6 GB without).
WIDE_CACHE_BYTES = 16 << 20


def _widen(a: np.ndarray) -> np.ndarray:
    """A float array as float64 (other arrays unchanged)."""
    return a.astype(np.float64) if a.dtype.kind == "f" and a.dtype != np.float64 else a
