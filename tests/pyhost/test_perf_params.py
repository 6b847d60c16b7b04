"""The performance model's calibration file (pyhost/accel/perf_params.json): only fitted numbers,
read with clear errors. What the hardware's build defines (pyhost.spec) is never in it."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from pyhost.accel import timing
from pyhost.spec import accel as spec_accel
from pyhost.spec import dram as spec_dram
from pyhost.spec import regs as spec_regs
from pyhost.spec.accel import AccelConfig


def _spec_names() -> set[str]:
    names = {f.name for f in dataclasses.fields(AccelConfig)}
    names |= {f.name.lower() for f in dataclasses.fields(spec_dram.Ddr4Timing)}
    for mod in (spec_accel, spec_dram, spec_regs):
        names |= {k.lower() for k, v in vars(mod).items()
                  if k.isupper() and isinstance(v, int | float)}
    names |= {k.lower() for k in spec_accel.RTL_DEFAULTS}
    return names


def test_calibration_holds_no_constant_of_the_spec() -> None:
    """A name the spec defines (a build parameter, a burst limit, a DRAM timing) in the file
    would be a second definition of it: the model reads those from pyhost.spec."""
    data = json.loads(timing.PERF_PARAMS_FILE.read_text())
    keys = set(data["params"]) | {k for v in data.get("by_n", {}).values() for k in v}
    assert keys and not keys & _spec_names(), sorted(keys & _spec_names())
    assert not {f.name for f in dataclasses.fields(timing.PerfParams)} & _spec_names()


def test_the_file_is_the_one_source_of_the_values() -> None:
    data = json.loads(timing.PERF_PARAMS_FILE.read_text())
    assert dataclasses.asdict(timing.PERF_PARAMS) == {
        **{f.name: f.default for f in dataclasses.fields(timing.PerfParams)
           if f.default is not dataclasses.MISSING}, **data["params"]}
    for n, over in data.get("by_n", {}).items():
        assert dataclasses.asdict(timing.perf_params_for(int(n))) \
            == {**dataclasses.asdict(timing.PERF_PARAMS), **over}


def test_fetch_buffer_follows_the_burst_length() -> None:
    """accel_fetch.v: BUF_AW = clog2(max(2 * MAX_BURST, 16)), BUF_BEATS = 1 << BUF_AW."""
    assert [spec_accel.fetch_buffer_beats(b) for b in (1, 8, 9, 12, 16, 17, 64)] \
        == [16, 16, 32, 32, 32, 64, 128]
    assert timing._FETCH_BUF == spec_accel.FETCH_BUFFER_BEATS


def _write(tmp_path: Path, doc: object) -> Path:
    p = tmp_path / "p.json"
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def test_by_n_overrides_the_base(tmp_path: Path) -> None:
    base = dataclasses.asdict(timing.PERF_PARAMS)
    got = timing.load_perf_params(_write(tmp_path, {"params": base,
                                                    "by_n": {"16": {"store_gap": 9}}}))
    assert got[None] == timing.PERF_PARAMS and got[16].store_gap == 9
    assert got[16].fetch_latency == base["fetch_latency"]


@pytest.mark.parametrize("doc, words", [
    ("{not json", "cannot read"),
    ([], "'params' object"),
    ({"params": {"fetch_latency": 1}}, "missing performance-model parameter"),
    ({"params": {"queue_depth": 8}}, "unknown performance-model parameter(s) ['queue_depth']"),
    ({"params": "x"}, "'params' object"),
    ({"by_n": {"x": {}}}, "by_n key 'x'"),
    ({"by_n": {"8": {"end": -1}}}, "end must be a non-negative number"),
    ({"by_n": {"8": {"end": True}}}, "end must be a non-negative number"),
    ({"by_n": []}, "'by_n' must be an object"),
])
def test_bad_calibration_files_say_what_is_wrong(tmp_path: Path, doc: object, words: str
                                                 ) -> None:
    if isinstance(doc, dict) and "params" not in doc:
        doc = {"params": dataclasses.asdict(timing.PERF_PARAMS), **doc}
    with pytest.raises(timing.PerfParamsError, match=re.escape(words)):
        timing.load_perf_params(_write(tmp_path, doc))
    with pytest.raises(timing.PerfParamsError, match="cannot read"):
        timing.load_perf_params(tmp_path / "absent.json")
