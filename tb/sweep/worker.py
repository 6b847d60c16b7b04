"""The child process of one sweep task: ``python -m tb.sweep.worker compile|run IN OUT``.

A sweep task (tb/sweep/tasks.py) runs every compile and every point in a process of its own,
so that a timeout can stop it (its whole process group: the simulator too), a crash (a
simulator that aborts, a segfault) is one failed point, and nothing of one point (cocotb, the
model's memory) stays in the Dask worker for the next.

``compile IN OUT``: IN is the point (JSON); writes OUT/model.xmodel, inputs.npz, reference.npz
(onnxruntime in fp32 on the inputs) and meta.json.
``run IN OUT``: IN is {"point": ..., "artefacts": dir of a compile}; writes OUT/result.json
(and OUT/dump.fst for an RTL point with waves).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from tb.sweep.spec import DEFAULT_LINK, Point


class PointError(Exception):
    """A point that cannot run as specified (the message says why)."""


def _point(d: dict[str, Any]) -> Point:
    return Point(**d)


def do_compile(point: Point, out: Path) -> dict[str, Any]:
    """Compile the point's model for its accelerator build; inputs and onnxruntime outputs."""
    import onnxruntime as ort

    from compiler import xmodel
    from compiler.pipeline import compile_model
    from tb.demo import DemoError, load_model, make_inputs

    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        model, _ = load_model(point.model, out)
    except DemoError as e:
        raise PointError(str(e)) from None
    graph = compile_model(model, point.compile_options()).graph
    compile_s = time.perf_counter() - t0
    xmodel.save(graph, out / "model.xmodel")
    subs = list(graph.root_subgraph.children_topological_sort())
    accel = [s.name for s in subs if s.get_attr("device") == "ACCEL"]
    if not accel:
        raise PointError(f"{point.model}: the accelerator plugin claimed no op; nothing would "
                         "run on the card")
    feeds = make_inputs(graph, point.images, point.model)
    np.savez(out / "inputs.npz", **feeds)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ref = {}
    for i in range(point.images):
        for n, v in zip(names, sess.run(None, {k: v[i] for k, v in feeds.items()}), strict=True):
            ref[f"{n}/{i}"] = v
    np.savez(out / "reference.npz", **ref)
    program = hashlib.sha256((out / "model.xmodel").read_bytes()).hexdigest()
    meta = {"program_hash": program, "compile_s": compile_s, "accel_subgraphs": accel,
            "subgraphs": [(s.name, s.get_attr("device")) for s in subs
                          if s.get_attr("device") != "DATA"],
            "estimate": _plugin_estimate(graph)}
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta


def _plugin_estimate(graph: Any) -> dict[str, int]:
    """The plugin's static cycle estimate per accelerator subgraph (accel_stats), if any."""
    out = {}
    for s in graph.root_subgraph.children_topological_sort():
        if s.get_attr("device") == "ACCEL" and s.has_attr("accel_stats"):
            st = s.get_attr("accel_stats")
            if isinstance(st, dict) and "estimated_cycles" in st:
                out[s.name] = int(st["estimated_cycles"])
    return out


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _model_run(point: Point, art: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The point on the functional card: (raw result, outputs)."""
    from compiler import xmodel
    from pyhost.model_card import ModelCard
    from pyhost.spec.accel import AccelConfig
    from tb.sweep.host import run_images

    graph = xmodel.load(art / "model.xmodel")
    feeds = _load_npz(art / "inputs.npz")
    card = ModelCard(point.card_mem, accel=AccelConfig(**point.accel))
    t0 = time.perf_counter()
    runs, outs, cycles = run_images(card, graph, feeds, point.images, point.policy)
    return {"runs": runs, "cycles": cycles, "run_s": time.perf_counter() - t0}, outs


def _rtl_run(point: Point, art: Path, out: Path
             ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The point on card_top under its simulator (the build reused per parameter set)."""
    from tb.common import simulator

    if point.link != DEFAULT_LINK:
        import inspect

        from tb.common.rtl_card import RtlCard

        if "link" not in inspect.signature(RtlCard).parameters:
            raise PointError(f"link mode {point.link!r}: this tree's RtlCard has only the "
                             f"{DEFAULT_LINK!r} host link (no `link` option)")
    t0 = time.perf_counter()
    b = simulator.card_build(point.simulator, point.rtl_parameters(), waves=point.waves) \
        if point.build == "lean" else \
        simulator.build(point.simulator, "card_top", simulator.card_sources(),
                        point.rtl_parameters(), waves=point.waves)
    build_s = time.perf_counter() - t0
    files = {k: out / f"rtl_{k}" for k in ("out.json", "outputs.npz")}
    env = {"SWEEP_XMODEL": str(art / "model.xmodel"), "SWEEP_INPUTS": str(art / "inputs.npz"),
           "SWEEP_IMAGES": str(point.images), "SWEEP_POLICY": point.policy,
           "SWEEP_LINK": point.link, "SWEEP_OUT": str(files["out.json"]),
           "SWEEP_OUT_NPZ": str(files["outputs.npz"]), "COCOTB_LOG_LEVEL": "WARNING"}
    run_name = "sweep-" + hashlib.sha1(str(out).encode()).hexdigest()[:12]
    t1 = time.perf_counter()
    res = simulator.test(b, "tb.sweep.rtl_point", testcase="sweep_point", run_name=run_name,
                         extra_env=env, check=False)
    sim_s = time.perf_counter() - t1
    log = res.run_dir / "sim.log"
    if res.failed or not files["out.json"].exists():
        tail = log.read_text(errors="replace")[-4000:] if log.exists() else "(no log)"
        raise PointError(f"the RTL run failed ({res.failed} of {res.tests} cocotb tests); "
                         f"{log}:\n{tail}")
    r = json.loads(files["out.json"].read_text())
    r.update(build_s=build_s, sim_s=sim_s, run_s=sim_s, build_dir=str(b.build_dir))
    if res.waves is not None:
        os.replace(res.waves, out / "dump.fst")
    return r, _load_npz(files["outputs.npz"])


def do_run(point: Point, art: Path, out: Path) -> dict[str, Any]:
    """Run the point; its result (figures, correctness, bit-exactness for RTL points)."""
    from tb.sweep.host import compare, summarize

    out.mkdir(parents=True, exist_ok=True)
    reference = _load_npz(art / "reference.npz")
    model_raw, model_outs = _model_run(point, art)
    if point.backend == "model":
        raw, outs, exact = model_raw, model_outs, None
    else:
        raw, outs = _rtl_run(point, art, out)
        exact = model_outs
    result = {"summary": summarize(raw["runs"], point.n), "runs": raw["runs"],
              "sim_cycles": raw["cycles"], "run_s": raw["run_s"],
              "check": compare(outs, reference, exact)}
    for k in ("build_s", "sim_s"):
        if k in raw:
            result[k] = raw[k]
    if point.backend == "rtl":
        # the functional card's view of the same run, for the performance model's accuracy
        result["model_summary"] = summarize(model_raw["runs"], point.n)
        result["model_sim_cycles"] = model_raw["cycles"]
    return result


def _kill_group(signum: int, frame: Any) -> None:
    """SIGTERM (the worker that started us died, or someone stops us): take the simulator and
    everything else of this point's process group down too."""
    import signal

    os.killpg(0, signal.SIGKILL)


def main(argv: list[str]) -> int:
    import signal

    signal.signal(signal.SIGTERM, _kill_group)
    if len(argv) != 3 or argv[0] not in ("compile", "run"):
        print("usage: python -m tb.sweep.worker compile|run IN.json OUTDIR", file=sys.stderr)
        return 2
    mode, inp, out = argv[0], Path(argv[1]), Path(argv[2])
    data = json.loads(inp.read_text())
    try:
        if mode == "compile":
            res = do_compile(_point(data), out)
        else:
            res = do_run(_point(data["point"]), Path(data["artefacts"]), out)
    except PointError as e:
        print(f"error: {e}", file=sys.stderr)
        (out / "error.txt").write_text(str(e))
        return 3
    (out / "result.json").write_text(json.dumps(res, default=_jsonable))
    return 0


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.integer | np.floating | np.bool_):
        return v.item()
    raise TypeError(f"not JSON serializable: {type(v).__name__}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
