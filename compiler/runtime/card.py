"""Running compiled models on the card: a session on the PCIe driver and the executor.

`CardSession` owns a memory manager on a `PcieDriver` (ModelCard or the RTL card: the code is
synchronous and uses only the driver, so it runs unchanged inside a cocotb bridge thread) and the
accelerator's configuration read from the card. `CardExecutor` runs a partitioned graph like
`GraphExecutor`, one step per root child, but keeps the values that cross subgraph boundaries
where they are: host float arrays, or memory-manager tensors holding the int8 blocked layout of
the accelerator, so consecutive accelerator subgraphs never round-trip through the host.

An accelerator step (a subgraph compiled by the ``accel`` plugin, see its ``accel_*``
attributes) has three tensors created once per executor: its program, its constant blob (slot 0)
and its scratch arena (slot 1); its inputs and outputs take slots 2.. . A launch asks the
manager for all of them in one ``need_in_device`` call, binds the returned addresses to the slot
registers, starts the program at the program tensor's address, waits for the interrupt and marks
the outputs updated. Before the first run the executor checks that the card's accelerator is the
one every subgraph was compiled for and that each step's tensors fit the card, and hands the
manager the whole run's sequence of need calls as its schedule hint.

Per run it reports what each step cost (`RunStats`) and, optionally, records a timeline of host,
DMA, accelerator and CPU events that `chrome_trace` writes as Chrome/Perfetto trace JSON.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from compiler.errors import RunnerError
from compiler.runtime.base import Runner
from compiler.runtime.cpu import CpuRunner
from compiler.runtime.executor import Lifetimes, check_feeds
from compiler.runtime.loader import check_runners, create_runner
from compiler.xir import Graph, Subgraph
from pyhost.accel.abi import (
    ACCEL_SPACE,
    CONST_SLOT,
    PROGRAM_ATTR,
    SCRATCH_SLOT,
    AbiError,
    AccelImage,
    IoSpec,
    align_up,
    card_align,
)
from pyhost.accel.control import instruction_text
from pyhost.driver import AccelProgram, AccelRunError, PcieDriver
from pyhost.memory import MemoryManager, TensorHandle
from pyhost.spec import isa


class CardRuntimeError(RunnerError):
    """Base class of the card runtime's errors."""


class AccelConfigMismatch(CardRuntimeError):
    """The card's accelerator is not the one a subgraph was compiled for."""


class CardMemoryError(CardRuntimeError):
    """A step needs more card memory at once than the card has."""


class AccelStepError(CardRuntimeError):
    """The accelerator reported an error while running a step."""


# --- what the plugin compiled -------------------------------------------------------------------

def accel_image(sub: Subgraph) -> AccelImage:
    """The accelerator image of a subgraph compiled by the ``accel`` plugin (`pyhost.accel.abi`);
    CardRuntimeError when its attributes are missing or malformed."""
    try:
        return AccelImage.from_attrs(sub.name, sub.attrs)
    except AbiError as e:
        raise CardRuntimeError(str(e)) from None


def _pack(spec: IoSpec, x: np.ndarray) -> np.ndarray:
    """`IoSpec.pack` with the runtime's error."""
    try:
        return spec.pack(x)
    except AbiError as e:
        raise CardRuntimeError(str(e)) from None


def is_accel_subgraph(sub: Subgraph) -> bool:
    return sub.has_attr(PROGRAM_ATTR)


# --- the timeline -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Event:
    """One span of the timeline; times in the session clock's unit (seconds by default)."""

    name: str
    category: str           # "host" | "dma" | "accel" | "cpu"
    start: float
    duration: float
    args: Mapping[str, Any] = field(default_factory=dict)


CATEGORIES = ("host", "dma", "accel", "cpu")


def chrome_trace(events: Sequence[Event], *, time_scale: float = 1e6) -> dict[str, Any]:
    """Chrome / Perfetto trace JSON (``traceEvents`` of complete events, ph "X"), one track per
    category. `time_scale` converts the clock's unit to microseconds (1e6 for seconds)."""
    t0 = min((e.start for e in events), default=0.0)
    out: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0,
                                  "args": {"name": "dnncard"}}]
    for i, cat in enumerate(CATEGORIES):
        out.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": i + 1,
                    "args": {"name": cat}})
    for e in events:
        out.append({"name": e.name, "cat": e.category, "ph": "X", "pid": 1,
                    "tid": CATEGORIES.index(e.category) + 1 if e.category in CATEGORIES else 0,
                    "ts": (e.start - t0) * time_scale, "dur": e.duration * time_scale,
                    "args": dict(e.args)})
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def write_chrome_trace(events: Sequence[Event], path: str | Path, *,
                       time_scale: float = 1e6) -> None:
    Path(path).write_text(json.dumps(chrome_trace(events, time_scale=time_scale), default=int))


class _TracingDriver:
    """The manager's view of the driver: the same calls, each recorded as a "dma" event."""

    def __init__(self, driver: PcieDriver, session: CardSession) -> None:
        self._driver = driver
        self._session = session

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)

    def _timed(self, what: str, fn: Callable[[Any], None],
               transfers: Sequence[tuple[Any, int, Any]]) -> None:
        with self._session.span(what, "dma", transfers=len(transfers),
                                bytes=sum(int(t[1]) for t in transfers)):
            fn(transfers)

    def write_batch(self, transfers: Sequence[tuple[Any, int, int]]) -> None:
        self._timed("H2C", self._driver.write_batch, transfers)

    def read_batch(self, transfers: Sequence[tuple[int, int, Any]]) -> None:
        self._timed("C2H", self._driver.read_batch, transfers)

    def copy_batch(self, transfers: Sequence[tuple[int, int, int]]) -> None:
        self._timed("C2C", self._driver.copy_batch, transfers)

    def write_data(self, host: Any, size: int, card_addr: int) -> None:
        self.write_batch([(host, size, card_addr)])

    def read_data(self, card_addr: int, size: int, host: Any) -> None:
        self.read_batch([(card_addr, size, host)])

    def copy_on_card(self, src: int, size: int, dst: int) -> None:
        self.copy_batch([(src, size, dst)])


# --- the session --------------------------------------------------------------------------------

class CardSession:
    """A memory manager on the card's driver, the card's accelerator configuration, a clock and
    an optional timeline.

    `policy` and `record` go to the MemoryManager ("belady" by default: the executor gives it
    the run's need sequence). `clock` timestamps the timeline (default time.perf_counter; the RTL
    path passes simulated time); `timeline=False` records nothing. `timeout_s` bounds each
    accelerator run (None: the driver's timeout).
    """

    def __init__(self, driver: PcieDriver, *, policy: str = "belady",
                 record: IO[str] | None = None, clock: Callable[[], float] | None = None,
                 timeline: bool = True, timeout_s: float | None = None) -> None:
        self.driver = driver
        self.config = driver.accel_config()
        self.align = card_align(self.config.n)
        self.clock = clock or time.perf_counter
        self.events: list[Event] | None = [] if timeline else None
        self.timeout_s = timeout_s
        self.manager = MemoryManager(_TracingDriver(driver, self), policy=policy,  # type: ignore[arg-type]
                                     align=self.align, record=record)
        self._names = itertools.count()

    @property
    def capacity(self) -> int:
        return self.manager.capacity

    def unique(self, what: str) -> str:
        """A manager tensor name no other tensor of this session has."""
        return f"{what}#{next(self._names)}"

    @contextlib.contextmanager
    def span(self, name: str, category: str, **args: Any) -> Iterator[dict[str, Any]]:
        """Record the enclosed work as one timeline event; the yielded dict adds args."""
        if self.events is None:
            yield args
            return
        t0 = self.clock()
        try:
            yield args
        finally:
            self.events.append(Event(name, category, t0, self.clock() - t0, args))

    # checks ---------------------------------------------------------------------------------

    def check_config(self, image: AccelImage) -> None:
        if image.config != self.config:
            diff = {k: (getattr(image.config, k), getattr(self.config, k))
                    for k in ("n", "inp_depth", "wgt_depth", "acc_depth", "queue_depth")
                    if getattr(image.config, k) != getattr(self.config, k)}
            raise AccelConfigMismatch(
                f"subgraph {image.name!r} was compiled for an accelerator with "
                f"{dataclasses.asdict(image.config)}, but the card reports "
                f"{dataclasses.asdict(self.config)} (differs in "
                + ", ".join(f"{k}: compiled {a}, card {b}" for k, (a, b) in diff.items())
                + '); recompile with plugin_options {"accel": {...}} set to the card\'s '
                  "ACC_CFG_* values")

    def check_fits(self, image: AccelImage) -> None:
        need = image.card_bytes(self.align)
        if need > self.capacity:
            parts = {"program": len(image.program), "constants": len(image.consts),
                     "scratch": image.scratch_bytes,
                     "inputs/outputs": sum(s.nbytes for s in image.io)}
            raise CardMemoryError(
                f"accelerator step {image.name!r} needs {need} bytes of card memory at once ("
                + ", ".join(f"{k} {v}" for k, v in parts.items())
                + f"), more than the card's {self.capacity} bytes; use a card with more memory "
                  'or recompile with plugin_options {"accel": {"max_step_bytes": '
                  f"{self.capacity}}}}} so the plugin splits the model into smaller steps")

    def prepare(self, subgraph: Subgraph) -> AccelStep:
        """The step of one accelerator subgraph, after the config and memory checks."""
        image = accel_image(subgraph)
        self.check_config(image)
        self.check_fits(image)
        return AccelStep(self, image)

    def close(self) -> None:
        self.manager.close()


# --- one accelerator subgraph on the card -------------------------------------------------------

class AccelStep:
    """An accelerator subgraph ready to launch: program, constants and scratch are manager
    tensors (written once; uploaded at the first launch, then wherever the manager keeps them).
    """

    def __init__(self, session: CardSession, image: AccelImage) -> None:
        self.session = session
        self.image = image
        mgr = session.manager
        self.program = self._tensor("program", image.program)
        self.consts = self._tensor("consts", image.consts) if image.consts else None
        self.scratch = (mgr.allocate_tensor(align_up(image.scratch_bytes, session.align),
                                            name=session.unique(f"{image.name}/scratch"))
                        if image.scratch_bytes else None)
        self.resident = [t for t in (self.program, self.consts, self.scratch) if t is not None]
        self.last_counters: dict[str, int] = {}

    def _tensor(self, what: str, data: bytes) -> TensorHandle:
        mgr = self.session.manager
        t = mgr.allocate_tensor(align_up(len(data), self.session.align),
                                name=self.session.unique(f"{self.image.name}/{what}"))
        mgr.write_tensor(t, len(data), data)
        return t

    def allocate(self, spec: IoSpec, name: str | None = None) -> TensorHandle:
        """A manager tensor for one input or output of this step."""
        return self.session.manager.allocate_tensor(
            align_up(spec.nbytes, self.session.align),
            name=name or self.session.unique(f"{self.image.name}/{spec.name}"))

    def need_list(self, inputs: Sequence[TensorHandle], outputs: Sequence[TensorHandle]
                  ) -> list[TensorHandle]:
        """The tensors of one launch, in the order of its need_in_device call."""
        return [*self.resident, *inputs, *outputs]

    def launch(self, inputs: Sequence[TensorHandle], outputs: Sequence[TensorHandle]
               ) -> dict[str, int]:
        """Run the program on the card with these input and output tensors (in accel_io order);
        returns the accelerator's counters. The outputs are marked updated.

        The scratch arena is deliberately not marked updated: nothing in it outlives the launch,
        so the manager may drop it without a write-back and never uploads it.
        """
        img, s = self.image, self.session
        if len(inputs) != len(img.inputs) or len(outputs) != len(img.outputs):
            raise CardRuntimeError(f"step {img.name!r} takes {len(img.inputs)} inputs and "
                                   f"{len(img.outputs)} outputs, got {len(inputs)} and "
                                   f"{len(outputs)}")
        tensors = self.need_list(inputs, outputs)
        addrs = dict(zip((t.id for t in tensors), s.manager.need_in_device(*tensors),
                         strict=True))
        for t in tensors:
            a = addrs[t.id]
            if a % s.align or a + t.size > ACCEL_SPACE:
                raise CardRuntimeError(f"step {img.name!r}: {t!r} was placed at {a:#x}, which "
                                       f"the accelerator cannot use (not {s.align}-byte aligned "
                                       "or above 4 GiB)")
        slots = {spec.slot: addrs[t.id] for spec, t in zip([*img.inputs, *img.outputs],
                                                           [*inputs, *outputs], strict=True)}
        slots[CONST_SLOT] = addrs[self.consts.id] if self.consts is not None else 0
        slots[SCRATCH_SLOT] = addrs[self.scratch.id] if self.scratch is not None else 0
        prog = AccelProgram(addrs[self.program.id], img.insns)
        drv = s.driver
        with s.span(img.name, "accel", insns=img.insns) as args:
            try:
                drv.accel_bind(slots)
                drv.accel_start(prog)
                res = drv.accel_wait(s.timeout_s)
            except AccelRunError as e:
                at = ""
                if e.names_instruction and 0 <= e.pc < img.insns:
                    raw = img.program[e.pc * isa.INSN_BYTES:(e.pc + 1) * isa.INSN_BYTES]
                    at = f"; instruction {e.pc}: {instruction_text(raw)}"
                raise AccelStepError(f"accelerator step {img.name!r} failed: {e}{at}") from e
            args.update(res.counters)
        for t in outputs:
            s.manager.tensor_updated(t)
        return dict(res.counters)

    def run_host(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Float inputs -> float outputs through the card: quantize, pack, write, launch, read,
        unpack, dequantize (the Runner path; one host round trip)."""
        mgr, s = self.session.manager, self.session
        ins, outs = [], []
        try:
            with s.span(f"{self.image.name}: pack inputs", "host"):
                for spec in self.image.inputs:
                    t = self.allocate(spec)
                    ins.append(t)
                    mgr.write_tensor(t, spec.nbytes, _pack(spec, arrays[spec.name]))
            outs = [self.allocate(spec) for spec in self.image.outputs]
            self.last_counters = self.launch(ins, outs)
            result = {}
            for spec, t in zip(self.image.outputs, outs, strict=True):
                buf = np.empty(spec.nbytes, np.uint8)
                mgr.read_tensor(t, spec.nbytes, buf)
                with s.span(f"unpack {spec.name}", "host"):
                    result[spec.name] = spec.unpack(buf)
            return result
        finally:
            for t in ins + outs:
                mgr.free_tensor(t)

    def release(self) -> None:
        for t in self.resident:
            self.session.manager.free_tensor(t)
        self.resident = []


# --- statistics ---------------------------------------------------------------------------------

@dataclass
class StepStats:
    """One step of a run."""

    name: str
    device: str
    wall_s: float
    counters: dict[str, int] | None = None     # accelerator steps
    n: int = 0                                 # the array size (accelerator steps)

    @property
    def cycles(self) -> int:
        return int(self.counters["cycles"]) if self.counters else 0

    @property
    def macs(self) -> int:
        return int(self.counters["macs"]) if self.counters else 0

    @property
    def mac_utilization(self) -> float:
        """macs / (N*N*cycles): the fraction of the array's peak the step used."""
        return self.macs / (self.n * self.n * self.cycles) if self.cycles else 0.0

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "device": self.device,
                             "wall_s": round(self.wall_s, 6)}
        if self.counters is not None:
            d["counters"] = dict(self.counters)
            d["mac_utilization"] = round(self.mac_utilization, 4)
        return d


@dataclass
class RunStats:
    """What one run of a CardExecutor cost."""

    steps: list[StepStats] = field(default_factory=list)
    wall_s: float = 0.0
    memory: dict[str, int] = field(default_factory=dict)

    @property
    def accel_cycles(self) -> int:
        return sum(s.cycles for s in self.steps)

    @property
    def accel_macs(self) -> int:
        return sum(s.macs for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {"wall_s": round(self.wall_s, 6), "steps": [s.to_dict() for s in self.steps],
                "memory": dict(self.memory)}

    def format(self) -> str:
        lines = [f"{'step':32} {'device':10} {'wall ms':>9} {'cycles':>11} {'MACs':>13} "
                 f"{'util':>6}  busy/stall load, compute, store"]
        for s in self.steps:
            row = f"{s.name[:32]:32} {s.device:10} {1e3 * s.wall_s:9.2f}"
            if s.counters:
                c = s.counters
                row += (f" {s.cycles:11d} {s.macs:13d} {100 * s.mac_utilization:5.1f}%  "
                        f"{c['load_busy']}/{c['load_stall']}, "
                        f"{c['compute_busy']}/{c['compute_stall']}, "
                        f"{c['store_busy']}/{c['store_stall']}")
            lines.append(row)
        m = self.memory
        lines.append(
            f"memory: {m.get('bytes_h2c', 0)} B to the card in {m.get('transfers_h2c', 0)} "
            f"transfers, {m.get('bytes_c2h', 0)} B back in {m.get('transfers_c2h', 0)}, "
            f"{m.get('bytes_c2c', 0)} B moved on the card; {m.get('driver_calls', 0)} driver "
            f"calls, {m.get('descriptors', 0)} descriptors, {m.get('evictions', 0)} evictions, "
            f"{m.get('writebacks', 0)} write-backs; run {1e3 * self.wall_s:.1f} ms")
        return "\n".join(lines)


_TRANSPORT_KEYS = ("bytes_h2c", "bytes_c2h", "bytes_c2c", "transfers_h2c", "transfers_c2h",
                   "transfers_c2c", "driver_calls")
_MANAGER_KEYS = ("evictions", "writebacks", "compactions", "prefetched", "need_hits",
                 "need_misses")
_DRIVER_KEYS = ("descriptors", "doorbells", "interrupts", "accel_runs", "mmio_reads",
                "mmio_writes")


def _memory_counters(session: CardSession) -> dict[str, int]:
    mgr = session.manager
    out = {k: int(getattr(mgr.transport.stats, k)) for k in _TRANSPORT_KEYS}
    out.update({k: int(getattr(mgr.stats, k)) for k in _MANAGER_KEYS})
    out.update({k: int(getattr(session.driver.stats, k)) for k in _DRIVER_KEYS})
    return out


# --- the executor -------------------------------------------------------------------------------

@dataclass
class _Value:
    """A tensor value of a run: on the host, on the card (a manager tensor), or both."""

    host: np.ndarray | None = None
    dev: TensorHandle | None = None
    spec: IoSpec | None = None


class CardExecutor:
    """Runs a compiled graph with its accelerator subgraphs on the card and the others on their
    host runners; ``run(feeds) -> outputs`` as `GraphExecutor`.

    Construction checks every accelerator subgraph against the card (configuration, memory)
    before anything is uploaded, then creates each step's program, constant and scratch tensors.
    ``options`` go to the host runners (``options["card"]`` is set to the session, so any
    AccelRunner created by name shares it). `stats` is the last run's `RunStats`. Runner names
    are checked against the allow-list first (``trust_runners``: `compiler.runtime.loader`).
    """

    def __init__(self, graph: Graph, session: CardSession,
                 options: Mapping[str, Any] | None = None, *,
                 trust_runners: bool = False) -> None:
        self.graph = graph
        self.session = session
        root = graph.root_subgraph
        children = [root] if root.is_leaf else root.children_topological_sort()
        if not root.is_leaf:
            check_runners(children, trust_runners=trust_runners)
        images = {c: accel_image(c) for c in children if is_accel_subgraph(c)}
        for img in images.values():
            session.check_config(img)
        for img in images.values():
            session.check_fits(img)
        opts = {**dict(options or {}), "card": session}
        self.steps: list[tuple[Subgraph, AccelStep | Runner]] = []
        for c in children:
            if c in images:
                self.steps.append((c, AccelStep(session, images[c])))
            elif c is root:
                self.steps.append((c, CpuRunner(c, opts)))
            else:
                self.steps.append((c, create_runner(c, opts, trust_runners=trust_runners)))
        self.input_names = [op.name for op in graph.inputs]
        self.output_names = [t.name for t in graph.outputs]
        self._lifetimes = Lifetimes((self._input_names(st) for _, st in self.steps),
                                    self.output_names)
        self._tag = session.unique("run")
        self._runs = 0
        self.stats = RunStats()

    @staticmethod
    def _input_names(step: AccelStep | Runner) -> list[str]:
        if isinstance(step, AccelStep):
            return [s.name for s in step.image.inputs]
        return [t.name for t in step.input_tensors]

    def _name(self, tensor: str) -> str:
        return f"{self._tag}/{self._runs}/{tensor}"

    def schedule(self) -> tuple[list[list[str]], list[str]]:
        """The need calls of the next run in order (manager tensor names) and the tensors the
        host will read back: the manager's schedule hint."""
        mgr_name: dict[int, str] = {}
        for _, st in self.steps:
            if isinstance(st, AccelStep):
                for t in st.resident:
                    mgr_name[t.id] = t.name or ""
        needs: list[list[str]] = []
        reads: list[str] = []
        on_card: set[str] = set()
        for _, st in self.steps:
            if isinstance(st, AccelStep):
                call = [mgr_name[t.id] for t in st.resident]
                call += [self._name(s.name) for s in st.image.inputs]
                call += [self._name(s.name) for s in st.image.outputs]
                needs.append(call)
                on_card |= {s.name for s in st.image.outputs}
            else:
                reads += [self._name(n) for n in self._input_names(st) if n in on_card]
        reads += [self._name(n) for n in self.output_names if n in on_card]
        return needs, list(dict.fromkeys(reads))

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        check_feeds(self.input_names, feeds)
        s = self.session
        mgr = s.manager
        self._runs += 1
        needs, reads = self.schedule()
        mgr.set_schedule(needs, reads=reads)
        before = _memory_counters(s)
        stats = RunStats()
        t_run = time.perf_counter()
        env: dict[str, _Value] = {k: _Value(host=np.asarray(v)) for k, v in feeds.items()}
        live = self._lifetimes.start()
        try:
            for sub, st in self.steps:
                t0 = time.perf_counter()
                if isinstance(st, AccelStep):
                    ins = [self._on_card(env, spec, st) for spec in st.image.inputs]
                    outs = []
                    for spec in st.image.outputs:
                        t = st.allocate(spec, self._name(spec.name))
                        env[spec.name] = _Value(dev=t, spec=spec)
                        outs.append(t)
                    counters = st.launch(ins, outs)
                    stats.steps.append(StepStats(sub.name, str(sub.get_attr("device", "ACCEL")),
                                                 time.perf_counter() - t0, counters,
                                                 st.image.config.n))
                else:
                    args = {n: self._on_host(env, n) for n in self._input_names(st)}
                    with s.span(sub.name, "cpu", device=str(sub.get_attr("device", "CPU"))):
                        got = st.run(args)
                    for t in st.output_tensors:
                        if t.name not in got:
                            raise RunnerError(f"runner for {sub.name!r} did not produce "
                                              f"{t.name!r}")
                        env[t.name] = _Value(host=got[t.name])
                    stats.steps.append(StepStats(sub.name, str(sub.get_attr("device", "CPU")),
                                                 time.perf_counter() - t0))
                for n in live.read(self._input_names(st)):
                    self._drop(env.pop(n, None))
            result = {n: self._on_host(env, n) for n in self.output_names}
        except BaseException:
            # free what this run holds without letting a failure there replace the error
            for v in env.values():
                try:
                    self._drop(v)
                except Exception:  # noqa: BLE001, S110 - the original error is reported
                    pass
            raise
        for v in env.values():
            self._drop(v)
        stats.wall_s = time.perf_counter() - t_run
        after = _memory_counters(s)
        stats.memory = {k: after[k] - before[k] for k in after}
        self.stats = stats
        return result

    def _on_card(self, env: dict[str, _Value], spec: IoSpec, step: AccelStep) -> TensorHandle:
        v = env.get(spec.name)
        if v is None:
            raise RunnerError(f"step {step.image.name!r} needs {spec.name!r}, which no earlier "
                              "step produced")
        if v.dev is not None:
            assert v.spec is not None
            if (v.spec.nbytes, v.spec.scale, v.spec.zero_point, v.spec.n,
                    v.spec.feature_scales) != (spec.nbytes, spec.scale, spec.zero_point,
                                               spec.n, spec.feature_scales):
                raise CardRuntimeError(f"tensor {spec.name!r}: the producer's layout "
                                       f"{v.spec} differs from the consumer's {spec}")
            return v.dev
        assert v.host is not None
        with self.session.span(f"pack {spec.name}", "host"):
            raw = _pack(spec, v.host)
        t = step.allocate(spec, self._name(spec.name))
        self.session.manager.write_tensor(t, spec.nbytes, raw)
        v.dev, v.spec = t, spec
        return t

    def _on_host(self, env: dict[str, _Value], name: str) -> np.ndarray:
        v = env.get(name)
        if v is None:
            raise RunnerError(f"tensor {name!r} was not produced by any earlier step")
        if v.host is None:
            assert v.dev is not None and v.spec is not None
            buf = np.empty(v.spec.nbytes, np.uint8)
            self.session.manager.read_tensor(v.dev, v.spec.nbytes, buf)
            with self.session.span(f"unpack {name}", "host"):
                v.host = v.spec.unpack(buf)
        return v.host

    def _drop(self, v: _Value | None) -> None:
        if v is not None and v.dev is not None:
            self.session.manager.free_tensor(v.dev)
            v.dev = None

    def close(self) -> None:
        for _, st in self.steps:
            if isinstance(st, AccelStep):
                st.release()
            else:
                st.close()
