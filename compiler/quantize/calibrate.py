"""Calibration: run the float graph on sample inputs and record every activation's range."""

from __future__ import annotations

import zipfile
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

import numpy as np

from compiler.errors import CalibrationFileError, QuantizationError
from compiler.options import QuantizeOptions
from compiler.runtime.cpu import CpuRunner
from compiler.xir import Graph, Tensor


def calibration_samples(graph: Graph, opts: QuantizeOptions) -> list[dict[str, np.ndarray]]:
    """The sample inputs the options ask for (seeded random normals, or an .npz file)."""
    inputs = graph.inputs
    if opts.calibration == "random":
        rng = np.random.default_rng(opts.seed)
        samples = []
        for _ in range(opts.samples):
            feed = {}
            for op in inputs:
                if np.dtype(op.output.dtype).kind != "f":
                    raise QuantizationError(
                        f"input {op.name!r} is {op.output.dtype}; random calibration makes "
                        "float inputs only; give real samples as an .npz file")
                feed[op.name] = rng.standard_normal(op.output.shape).astype(op.output.dtype)
            samples.append(feed)
        return samples
    path = Path(opts.calibration)
    if not path.is_file():
        raise CalibrationFileError(f"calibration file {str(path)!r} does not exist; give an .npz "
                                'with one array per input, or "random"')
    try:
        data = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise CalibrationFileError(f"calibration file {str(path)!r} is not a readable .npz ({e}); "
                                "save one with numpy.savez, one array per input") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise CalibrationFileError(f"calibration file {str(path)!r} is a single .npy array; save "
                                "an .npz with numpy.savez, one array per input")
    with data:
        arrays = {}
        for op in inputs:
            if op.name not in data.files:
                raise CalibrationFileError(f"calibration file {str(path)!r} has no array for "
                                        f"input {op.name!r} (it has {sorted(data.files)})")
            try:
                a = data[op.name]
            except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
                raise CalibrationFileError(f"calibration file {str(path)!r}: array {op.name!r} "
                                        f"cannot be read ({e})") from None
            shape = op.output.shape
            if a.shape == shape:
                a = a[None]
            if a.shape[1:] != shape or a.shape[0] == 0:
                raise CalibrationFileError(f"calibration array {op.name!r} is {a.shape}; expected "
                                        f"(samples, *{shape}) with at least one sample")
            if a.dtype.kind not in "biuf":
                raise CalibrationFileError(f"calibration array {op.name!r} is {a.dtype}; expected "
                                        f"numbers ({op.output.dtype})")
            _check_calibration_array(op.name, path, a, op.output.dtype)
            arrays[op.name] = a.astype(op.output.dtype)
    count = min(min(a.shape[0] for a in arrays.values()), opts.samples)
    return [{k: v[i] for k, v in arrays.items()} for i in range(count)]


def _check_calibration_array(name: str, path: Path, a: np.ndarray, dtype: str) -> None:
    """Calibration data must be finite and representable in the input's dtype: a NaN, an Inf
    or a float64 value beyond float32 (which would become Inf) has no int8 range."""
    if a.dtype.kind != "f" or a.size == 0:
        return
    bad = ~np.isfinite(a)
    if bad.any():
        kinds = sorted({"NaN" if np.isnan(v) else "Inf" for v in a[bad].reshape(-1)[:1000]})
        raise CalibrationFileError(
            f"calibration array {name!r} in {str(path)!r} holds {int(bad.sum())} NaN or Inf "
            f"value(s) (non-finite: {', '.join(kinds)}); calibrate with finite samples")
    if np.dtype(dtype).kind == "f":
        top = float(np.finfo(np.dtype(dtype)).max)
        amax = float(np.abs(a).max())
        if amax > top:
            raise CalibrationFileError(
                f"calibration array {name!r} in {str(path)!r} has values up to {amax:g}, "
                f"outside {dtype} (largest {top:g}); scale the data into the model's input "
                "range")


def collect_ranges(graph: Graph, samples: Iterable[Mapping[str, np.ndarray]],
                   method: str = "minmax", percentile: float = 99.99,
                   features: Collection[Tensor] = (),
                   feature_absmax: dict[Tensor, np.ndarray] | None = None,
                   keep: dict[Tensor, list[np.ndarray]] | None = None
                   ) -> dict[Tensor, tuple[float, float]]:
    """(lo, hi) of every float tensor the graph computes (model inputs included); for the
    ``features`` tensors also each feature's (last axis) largest magnitude over all samples,
    into ``feature_absmax`` (rounded to float32), and, with ``keep``, their values (float32,
    at most 4 samples).

    ``minmax`` takes the extremes over all samples; ``percentile`` takes, per sample, the
    ``percentile``-th and (100 - ``percentile``)-th percentiles and averages them over samples,
    which ignores rare outliers.
    """
    per: dict[Tensor, list[tuple[float, float]]] = {}
    #: the first tensor (in execution order) that held a NaN or an Inf, and which
    bad: list[tuple[Tensor, int, str]] = []
    sample = [0]

    def observe(t: Tensor, v: np.ndarray) -> None:
        if v.dtype.kind != "f" or v.size == 0:
            return
        finite = np.isfinite(v)
        if not finite.all():
            if not bad:
                kinds = sorted({"NaN" if np.isnan(x) else "Inf"
                                for x in v[~finite].reshape(-1)[:1000]})
                bad.append((t, sample[0], ", ".join(kinds)))
            v = v[finite]
            if v.size == 0:
                return
        if method == "minmax":
            lo, hi = float(v.min()), float(v.max())
        else:
            lo, hi = (float(x) for x in np.percentile(v, [100 - percentile, percentile]))
        per.setdefault(t, []).append((lo, hi))
        if t in features and feature_absmax is not None and v.ndim >= 1 and finite.all():
            a = np.abs(v).reshape(-1, v.shape[-1]).max(axis=0)
            prev = feature_absmax.get(t)
            feature_absmax[t] = a if prev is None else np.maximum(prev, a)
            if keep is not None and len(keep.setdefault(t, [])) < 4:
                keep[t].append(v.astype(np.float32))

    # in float64 (`CpuRunner` wide), ranges rounded to float32 below: the same on every CPU
    runner = CpuRunner(graph.root_subgraph, observer=observe, wide=True)
    n = 0
    with np.errstate(all="ignore"):
        for feed in samples:
            runner.run(feed)
            n += 1
            sample[0] = n
            if bad:
                break
    if n == 0:
        raise QuantizationError("calibration needs at least one sample")
    if bad:
        t, k, kinds = bad[0]
        prod = t.producer
        src = "model input" if prod.type == "data" else f"output of {prod.type} {prod.name!r}"
        raise QuantizationError(
            f"calibration: tensor {t.name!r} ({src}) has {kinds} values for calibration sample "
            f"{k}: its range is not finite, so it has no int8 form. The calibration inputs "
            "are outside what the model computes finitely (e.g. Sqrt or Log of negative values "
            'from random calibration); give real samples as an .npz ("calibration": "data.npz")')
    if feature_absmax is not None:
        for t in list(feature_absmax):
            feature_absmax[t] = feature_absmax[t].astype(np.float32).astype(np.float64)
    out = {}
    for t, rs in per.items():
        if method == "minmax":
            lo, hi = min(r[0] for r in rs), max(r[1] for r in rs)
        else:
            lo, hi = float(np.mean([r[0] for r in rs])), float(np.mean([r[1] for r in rs]))
        # rounded to float32: the float64 computation's last bits depend on the CPU's BLAS
        # kernels; rounding makes the ranges, and every scale from them, the same everywhere
        out[t] = (float(np.float32(lo)), float(np.float32(hi)))
        if not all(np.isfinite(out[t])):
            raise QuantizationError(f"calibration: tensor {t.name!r} ({t.producer.type}) took "
                                    f"the range {out[t]}, not finite; the float model overflows "
                                    "or divides by zero on these samples, so it has no int8 "
                                    "scale")
    return out
