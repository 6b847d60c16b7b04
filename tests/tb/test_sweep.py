"""The sweep engine (tb/sweep) on Dask: a LocalCluster on 127.0.0.1 reached by its address, as a
user reaches an existing cluster, and the local default the command line starts itself.

Small on purpose: a tiny ONNX model (tests/compiler/helpers.conv_net) on the functional card at
a few points, one point of it on card_top under Verilator (the lean build at 16 MiB that
the card tests in tests/rtl build too), and two points that fail (a timeout, a missing model
file) while the others finish.

Nothing here may depend on how fast the machine is: the timeout point's limit (TIMEOUT_S) is
shorter than the start-up of the point's own Python process (which imports numpy before it can
do anything), and the interrupted sweeps accept any number of points finished before the
interrupt.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tb.common.simulator import simulator_available
from tb.sweep import report
from tb.sweep.cache import Cache
from tb.sweep.engine import run_sweep
from tb.sweep.spec import SpecError, from_mapping, load, make_point

distributed = pytest.importorskip("distributed")

#: A point's timeout that no run can meet on any machine: the timeout counts from the start of
#: the point's child process, whose Python start-up alone (interpreter, numpy, the project's
#: modules) takes tens of milliseconds on the fastest machine (here a point's child reaches
#: its first file read after about 0.17 s).
TIMEOUT_S = 0.01


@pytest.fixture(scope="module")
def cluster():
    """A two-worker LocalCluster bound to 127.0.0.1: the 'existing cluster' of these tests."""
    import logging

    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR,
                      memory_limit=0) as c:
        assert c.scheduler_address.startswith("tcp://127.0.0.1:")
        yield c


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import onnx

    from tests.compiler.helpers import conv_net

    path = tmp_path_factory.mktemp("models") / "tiny.onnx"
    onnx.save(conv_net(seed=3, channels=8), str(path))
    return path


def _spec(tiny: Path, extra: list[dict] | None = None, ns: tuple[int, ...] = (4, 8)):
    return from_mapping({"name": "t", "grid": {"n": list(ns)}, "points": extra or [],
                         "fixed": {"model": str(tiny), "images": 1, "card_mem": "1M",
                                   "timeout_s": 600}})


# --- the spec ------------------------------------------------------------------------------------

def test_spec_grid_groups_and_dedup(tmp_path: Path) -> None:
    text = """
name: s
grid:
  model: [demo]
  backend: [model, rtl]
  n: [4, 8]
  scratchpad:
    - {inp_depth: 8192, wgt_depth: 1024, acc_depth: 4096}
    - {inp_depth: 4096, wgt_depth: 512, acc_depth: 2048}
points:
  - {backend: model, n: 4, simulator: icarus}     # the same as a grid point: run once
fixed: {card_mem: 80K, policy: lru}
"""
    (tmp_path / "s.yaml").write_text(text)
    s = load(tmp_path / "s.yaml")
    assert len(s) == 2 * 2 * 2
    assert {(p.inp_depth, p.acc_depth) for p in s.points} == {(8192, 4096), (4096, 2048)}
    assert all(p.card_mem == 80 << 10 and p.policy == "lru" for p in s.points)
    (tmp_path / "s.json").write_text(json.dumps({"grid": {"n": [16]}}))
    assert [p.n for p in load(tmp_path / "s.json").points] == [16]


@pytest.mark.parametrize("doc, words", [
    ({"grid": {"nn": [4]}}, "nn"),
    ({"grid": {"n": [5]}}, "4, 8 or 16"),
    ({"grid": {"policy": ["nope"]}}, "policy 'nope'"),
    ({"grid": {"card_mem": ["1000"]}}, "multiple of 4 KiB"),
    ({"grid": {"backend": ["fpga"]}}, "backend 'fpga'"),
    ({"grid": {"n": []}}, "empty list"),
    ({"gird": {}}, "unknown top-level"),
    ({"points": [{"images": 0}]}, "images must be a positive integer"),
])
def test_spec_errors_say_what_is_wrong(doc: dict, words: str) -> None:
    with pytest.raises(SpecError, match=words.replace("(", r"\(")):
        from_mapping(doc)


def test_policies_come_from_the_registry() -> None:
    """A policy added to pyhost.memory.POLICIES is accepted without a change here."""
    from pyhost.memory import POLICIES

    for name in POLICIES:
        assert make_point({"policy": name}).policy == name
    assert make_point({"policy": "future"}, policies=("future",)).policy == "future"


def test_rtl_parameters_keep_default_builds_shared() -> None:
    assert make_point({"card_mem": "16M"}).rtl_parameters() == {"MEM_SIZE": "64'd16777216"}
    assert make_point({"n": 16, "acc_depth": 2048}).rtl_parameters() == {
        "MEM_SIZE": f"64'd{64 << 20}", "ACC_N": 16, "ACC_ACC_DEPTH": 2048}


def test_only_selects_part_of_a_spec() -> None:
    from tb.sweep.spec import select

    s = from_mapping({"grid": {"model": ["demo", "resnet50"], "n": [4, 8, 16],
                               "card_mem": ["80K", "1M"]}})
    assert len(select(s, ["model=demo"])) == 6
    part = select(s, ["model=demo", "n=4,16", "card_mem=1M"])
    assert [(p.model, p.n, p.card_mem) for p in part.points] == [("demo", 4, 1 << 20),
                                                                  ("demo", 16, 1 << 20)]
    for bad, words in (["nn=4"], "AXIS=VALUE"), (["n"], "AXIS=VALUE"), (["n=x"], "integer"), \
            (["n=5"], "no point"):
        with pytest.raises(SpecError, match=words):
            select(s, bad)


def test_pareto_front() -> None:
    assert report.pareto([(16, 400.0), (64, 150.0), (64, 120.0), (256, 130.0), (256, 50.0)]) \
        == [(16, 400.0), (64, 120.0), (256, 50.0)]


# --- the engine on a cluster reached by its address ----------------------------------------------

def _by_label(res) -> dict[str, dict]:
    return {r["label"]: r for r in res.records}


@pytest.mark.skipif(not simulator_available("verilator"), reason="needs Verilator")
def test_sweep_on_an_existing_cluster(cluster, tiny: Path, tmp_path: Path) -> None:
    """Functional-card points, one RTL point, a timeout and a missing model: the good points
    finish with their figures, the bad ones are reported with their logs; a second run of the
    good points executes nothing."""
    from tb.sweep.cluster import connect

    good_rtl = {"backend": "rtl", "simulator": "verilator", "n": 8, "card_mem": "16M",
                "build": "lean"}
    spec = _spec(tiny, [good_rtl, {"n": 4, "policy": "lru", "timeout_s": TIMEOUT_S},
                        {"model": str(tmp_path / "missing.onnx")}])
    cache = Cache(tmp_path / "cache")
    with connect(cluster.scheduler_address) as client:
        res = run_sweep(spec, client, cache, log_dir=tmp_path / "logs")
        assert res.workers == 2
        recs = res.records
        assert len(recs) == 5
        status = [r["status"] for r in recs]
        assert status == ["ok", "ok", "ok", "timeout", "failed"], status
        for r in recs[:3]:
            s = r["result"]["summary"]
            assert r["result"]["check"]["correct"], r["result"]["check"]
            assert s["accel_cycles"] > 0 and 0 < s["mac_utilization"] <= 1
            assert s["bytes_h2c"] > 0 and s["bytes_c2h"] > 0
            assert [st["name"] for st in s["steps"] if "cycles" in st]
        model8, rtl8 = recs[1], recs[2]
        assert rtl8["point"]["backend"] == "rtl" and rtl8["result"]["check"]["bit_exact"] is True
        # the same program: same instructions and MACs on the RTL as on the functional card
        for a, b in zip(model8["result"]["summary"]["steps"], rtl8["result"]["summary"]["steps"],
                        strict=True):
            if "counters" in a:
                assert a["counters"]["insns"] == b["counters"]["insns"]
                assert a["macs"] == b["macs"]
        assert recs[4]["stage"] == "compile" and "no such file" in recs[4]["error"]
        timeout_log = Path(recs[3]["log_path"]).read_text()
        assert f"stopped after {TIMEOUT_S:g} s" in timeout_log
        # compiles: the tiny model for N = 4 and 8 (the RTL point shares N = 8's) and the missing
        # model's, which fails
        assert res.failed == 2 and res.compiles_run == 3 and res.points_run == 4

        # again, the good points only: nothing executes, the records come from the cache
        again = run_sweep(_spec(tiny, [good_rtl]), client, cache)
        assert again.executed == 0 and again.cached == 3 and again.failed == 0
        assert [r["result"] for r in again.records] == [r["result"] for r in recs[:3]]


def test_a_point_is_stopped_at_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_task outside Dask: the timeout is enforced at its deadline, not at the next poll of
    the child. With a poll interval far longer than the child lives, a check at the poll only
    would see the child exit with the error of its bogus artefacts ('failed'); at the deadline
    it is still starting up and is stopped ('timeout')."""
    from tb.sweep import tasks

    monkeypatch.setattr(tasks, "POLL_S", 600.0)
    point = make_point({"timeout_s": TIMEOUT_S}).to_dict()
    res = tasks.run_task(point, {"meta.json": b"{}"})
    assert res["status"] == "timeout", res
    assert f"stopped after {TIMEOUT_S:g} s" in res["log"] and res["error"].startswith("timeout")


def test_interrupted_sweep_resumes(cluster, tiny: Path, tmp_path: Path) -> None:
    """Interrupted after the first finished point, the sweep runs only the rest next time:
    whatever finished before the interrupt (one point or more, on a fast machine possibly all)
    comes from the cache, everything else runs, nothing fails."""
    import threading

    from tb.sweep.cluster import connect

    spec = _spec(tiny, ns=(4, 8, 16))
    cache = Cache(tmp_path / "cache")
    caller = threading.get_ident()

    def stop_after_one(p) -> None:
        # in the engine's own thread (not its ticker's): the interrupt comes at that event
        if p.done >= 1 and threading.get_ident() == caller:
            raise KeyboardInterrupt

    with connect(cluster.scheduler_address) as client:
        with pytest.raises(KeyboardInterrupt):
            run_sweep(spec, client, cache, on_progress=stop_after_one, tick_s=0.2)
        # what the interrupted run left in the cache (each entry written as its task finished)
        points_done = len(list((cache.root / "run").glob("*/*.json")))
        compiles_done = len(list((cache.root / "compile").glob("*/complete")))
        res = run_sweep(spec, client, cache)
    assert 1 <= points_done <= 3 and 1 <= compiles_done <= 3
    assert res.failed == 0, [(r["label"], r.get("error")) for r in res.records
                             if r["status"] != "ok"]
    assert res.cached == points_done and res.points_run == 3 - points_done
    assert res.compiles_run == 3 - compiles_done
    assert res.executed == res.compiles_run + res.points_run    # 0 when all had finished
    assert len(res.records) == 3 and all(r["status"] == "ok" for r in res.records)


class _KeyRecorder:
    """A distributed.Client that notes the key of every task submitted through it."""

    def __init__(self, client) -> None:
        self._client = client
        self.keys: list[str] = []

    def submit(self, *args, **kwargs):
        fut = self._client.submit(*args, **kwargs)
        self.keys.append(fut.key)
        return fut

    def __getattr__(self, name: str):
        return getattr(self._client, name)


def test_sweep_resumes_at_once_after_an_interrupt(cluster, tiny: Path, tmp_path: Path) -> None:
    """Interrupted when its first compile is done (that compile's point just submitted, the other
    two compiles queued or running) and run again at once on the same client, the sweep runs
    every point that had not finished, and none fails because of what the interrupted run
    cancelled. Under the interrupted run's task keys, the scheduler's late confirmation of that
    cancel cancelled the new futures (FutureCancelledError: here in 2 of 3 runs, depending on
    whether it arrived before or after the new submits); the resumed run's keys are its own."""
    import threading

    from tb.sweep.cluster import connect

    spec = _spec(tiny, ns=(4, 8, 16))
    cache = Cache(tmp_path / "cache")
    caller = threading.get_ident()

    def stop_after_a_compile(p) -> None:
        # in the engine's own thread (not its ticker's): the interrupt comes at that event
        if p.compiling < 3 and threading.get_ident() == caller:
            raise KeyboardInterrupt

    with connect(cluster.scheduler_address) as client:
        first, second = _KeyRecorder(client), _KeyRecorder(client)
        with pytest.raises(KeyboardInterrupt):
            run_sweep(spec, first, cache, on_progress=stop_after_a_compile, tick_s=0.2)
        res = run_sweep(spec, second, cache)
    assert len(first.keys) == 4 and not set(first.keys) & set(second.keys), \
        (first.keys, second.keys)
    assert res.failed == 0, [(r["label"], r.get("error")) for r in res.records
                             if r["status"] != "ok"]
    assert res.cached == 0 and res.compiles_run == 2 and res.points_run == 3
    assert all(r["status"] == "ok" for r in res.records)


def test_an_interrupt_at_the_first_report_propagates(cluster, tiny: Path, tmp_path: Path) -> None:
    """on_progress raising at its first call (the end of scheduling, before the ticker thread
    started) stops the sweep with that exception, not with the ticker's join failing
    ("cannot join thread before it is started")."""
    from tb.sweep.cluster import connect

    def stop_at_once(p) -> None:
        raise KeyboardInterrupt

    with connect(cluster.scheduler_address) as client, pytest.raises(KeyboardInterrupt):
        run_sweep(_spec(tiny, ns=(4,)), client, Cache(tmp_path / "cache"),
                  on_progress=stop_at_once)


def test_code_reaches_workers_without_an_install(tiny: Path, tmp_path: Path) -> None:
    """ProjectCode unpacks the tree on a worker that must not use its own (forced here: a
    LocalCluster sees this checkout) and the point runs from the shipped copy."""
    import logging

    from distributed import Client, LocalCluster

    from tb.sweep.cluster import ship_code

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR) as c, \
            Client(c) as client:
        ship_code(client, force=True, base=str(tmp_path / "code"))
        res = run_sweep(_spec(tiny, ns=(8,)), client, Cache(tmp_path / "cache"))
    [rec] = res.records
    assert rec["status"] == "ok", rec.get("error")
    assert rec["code_root"].startswith(str(tmp_path / "code")), rec["code_root"]
    assert (Path(rec["code_root"]) / "rtl" / "accel").is_dir()


# --- the local default, through the command line ------------------------------------------------

def test_command_line_on_the_local_default(tiny: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m tb.sweep SPEC` starts its own local cluster, shows progress, writes the
    table, the CSVs and the plots; a second run executes nothing."""
    from tb.sweep.__main__ import main

    spec = tmp_path / "local.json"
    spec.write_text(json.dumps({"name": "local", "grid": {
        "model": [str(tiny)], "n": [8], "card_mem": ["4K", "1M"], "policy": ["belady"]},
        "fixed": {"images": 1, "max_layers": 1}}))
    out, cache = tmp_path / "out", tmp_path / "cache"
    args = [str(spec), "--out", str(out), "--cache", str(cache)]
    assert main(args) == 0
    err = capsys.readouterr()
    assert "2/2 points" in err.err and "a local Dask cluster on 127.0.0.1" in err.out
    for f in ("table.txt", "results.csv", "subgraphs.csv", "results.json", "cycles_vs_n.png",
              "mac_util_vs_n.png", "bytes_vs_card_mem.png", "pareto.png"):
        assert (out / f).stat().st_size > 0, f
    data = json.loads((out / "results.json").read_text())
    assert data["meta"]["points_run"] == 2 and data["meta"]["workers"] >= 1
    small = [p for p in data["points"] if p["point"]["card_mem"] == 4 << 10]
    big = [p for p in data["points"] if p["point"]["card_mem"] == 1 << 20]
    assert all(p["result"]["summary"]["evictions"] > 0 for p in small)
    assert all(p["result"]["summary"]["evictions"] == 0 for p in big)
    assert main(args + ["--quiet"]) == 0
    assert json.loads((out / "results.json").read_text())["meta"]["executed"] == 0
