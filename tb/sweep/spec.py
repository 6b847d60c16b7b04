"""The sweep spec: which points a design-space sweep runs.

A spec is a YAML or JSON mapping (docs/sweep.md)::

    name: example                   # names the output directory
    grid:                           # the points are the cartesian product of these lists
      model: [demo, resnet50]       # "demo", a light model of the onnx package, or an .onnx path
      backend: [model, rtl]         # the functional card, or card_top under a simulator
      n: [4, 8, 16]                 # accelerator parameters (pyhost.spec.accel.AccelConfig)
      acc_depth: [4096, 2048]
      card_mem: [80K, 64M]          # card memory (bytes; K/M/G suffixes)
      policy: [belady, lru]         # memory-manager policy (pyhost.memory.POLICIES)
    points:                         # optional: more points, each a partial point over `fixed`
      - {model: demo, n: 8, backend: rtl, simulator: icarus}
    fixed:                          # values every point shares unless the grid or points set them
      images: 1
      max_layers: 2

A scalar in ``grid`` is a one-value axis. A grid value that is a mapping sets several axes
together, so a grouped axis (any name) varies them in step::

      scratchpad:
        - {inp_depth: 8192, wgt_depth: 1024, acc_depth: 4096}
        - {inp_depth: 4096, wgt_depth: 512, acc_depth: 2048}
      model:
        - {model: demo, max_layers: 2}
        - {model: resnet50, max_layers: 8, samples: 1}

Every axis has a default (``AXES``), so a point is a
complete, validated `Point`; points equal after normalization (the simulator and the link of a
functional-card point mean nothing) are run once. Errors are `SpecError` with the key that was
wrong and what it may be.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from pyhost.spec.accel import (
    DEFAULT_ACC_DEPTH,
    DEFAULT_INP_DEPTH,
    DEFAULT_N,
    DEFAULT_QUEUE_DEPTH,
    DEFAULT_WGT_DEPTH,
)

BACKENDS = ("model", "rtl")
SIMULATORS = ("verilator", "icarus")
BUILDS = ("lean", "full")
#: Array sizes the RTL (and the compiler) support.
ARRAY_SIZES = (4, 8, 16)
#: The host link of the default RTL card build (RtlCard's fast AXI mode); other link modes are
#: accepted by the spec and checked where the point runs (RtlCard must know them).
DEFAULT_LINK = "axi"


class SpecError(ValueError):
    """A sweep spec that cannot be run: the message names the key and what it may be."""


def parse_size(value: Any, key: str = "card_mem") -> int:
    """'80K', '64M', '1G', 1048576 -> bytes: a positive multiple of 4 KiB."""
    if isinstance(value, bool):
        raise SpecError(f"{key}: expected a byte count such as 80K, 64M or 1048576, got {value!r}")
    if isinstance(value, int):
        n = value
    else:
        t = str(value).strip().upper().removesuffix("B").removesuffix("I")
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
        try:
            n = int(t[:-1] if mult > 1 else t) * mult
        except ValueError:
            raise SpecError(f"{key}: expected a byte count such as 80K, 64M or 1048576, "
                            f"got {value!r}") from None
    if n <= 0 or n % 4096:
        raise SpecError(f"{key}: the card memory must be a positive multiple of 4 KiB, "
                        f"got {value!r}")
    return n


@dataclass(frozen=True)
class Point:
    """One fully specified run: a model compiled for one accelerator build, run on one card."""

    model: str = "demo"
    backend: str = "model"
    simulator: str = "verilator"
    n: int = DEFAULT_N
    inp_depth: int = DEFAULT_INP_DEPTH
    wgt_depth: int = DEFAULT_WGT_DEPTH
    acc_depth: int = DEFAULT_ACC_DEPTH
    queue_depth: int = DEFAULT_QUEUE_DEPTH
    card_mem: int = 64 << 20
    policy: str = "belady"
    link: str = DEFAULT_LINK
    images: int = 1
    #: Accelerator layers per subgraph (None: the plugin's default, one subgraph per run of
    #: accelerator ops).
    max_layers: int | None = None
    #: Calibration samples of the quantizer (seed 0).
    samples: int = 2
    #: Wall seconds (fractions allowed) the point may take before it is stopped and reported
    #: as a timeout, counted from the start of its process (tb/sweep/tasks.py).
    timeout_s: float = 3600.0
    #: Return the run's FST to the client (RTL points).
    waves: bool = False
    #: The Verilator build: "lean" (tb/common/simulator.py's card_build, the one the card tests
    #: and benches use: only the top level and a few monitored signals visible to VPI, C++ at
    #: -O3; about 5.7x faster, docs/accel.md) or "full" (cocotb's --public-flat-rw build).
    #: The cycles are the same; it is not part of the point's identity.
    build: str = "lean"

    # --- derived ------------------------------------------------------------------------------

    @property
    def accel(self) -> dict[str, int]:
        """The accelerator configuration (AccelConfig's fields)."""
        return {"n": self.n, "inp_depth": self.inp_depth, "wgt_depth": self.wgt_depth,
                "acc_depth": self.acc_depth, "queue_depth": self.queue_depth}

    @property
    def array_macs(self) -> int:
        """The GEMM array's MACs per cycle (N*N): the hardware cost axis of the Pareto front."""
        return self.n * self.n

    def compile_options(self) -> dict[str, Any]:
        """compile_model's options for this point (what the compile stage is keyed on)."""
        accel: dict[str, Any] = dict(self.accel)
        if self.max_layers is not None:
            accel["max_layers"] = self.max_layers
        return {"plugin": "accel", "quantize": {"samples": self.samples, "seed": 0},
                "plugin_options": {"accel": accel}}

    def rtl_parameters(self) -> dict[str, str | int]:
        """card_top's parameters for this point's build: the card memory, and each accelerator
        parameter that differs from the RTL's default (rtl/include/accel_cfg.vh, generated from
        pyhost/spec/accel.py, which a sweep never edits), so a default build is the same build
        (same key) as every other bench's."""
        from pyhost.spec.accel import RTL_DEFAULTS

        out: dict[str, str | int] = {"MEM_SIZE": f"64'd{self.card_mem}"}
        for name, value in (("N", self.n), ("INP_DEPTH", self.inp_depth),
                            ("WGT_DEPTH", self.wgt_depth), ("ACC_DEPTH", self.acc_depth),
                            ("QUEUE_DEPTH", self.queue_depth)):
            if value != RTL_DEFAULTS[name]:
                out[f"ACC_{name}"] = value
        return out

    def label(self) -> str:
        """A short human name: model, backend, the axes that usually vary."""
        parts = [self.model if "/" not in self.model else Path(self.model).stem,
                 self.backend if self.backend == "model" else f"rtl-{self.simulator}",
                 f"N{self.n}", f"acc{self.acc_depth}", f"inp{self.inp_depth}",
                 f"wgt{self.wgt_depth}", _size_text(self.card_mem), self.policy]
        if self.link != DEFAULT_LINK:
            parts.append(self.link)
        return " ".join(parts)

    def identity(self) -> dict[str, Any]:
        """What decides the point's result (not its timeout or whether it returns waves)."""
        d = asdict(self)
        for k in ("timeout_s", "waves", "build"):
            d.pop(k)
        return d

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


AXES = tuple(f.name for f in fields(Point))
_INT_AXES = ("n", "inp_depth", "wgt_depth", "acc_depth", "queue_depth", "images", "samples")


def _size_text(n: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def make_point(values: Mapping[str, Any], policies: Sequence[str] | None = None,
               where: str = "point") -> Point:
    """A validated, normalized Point from axis values (missing axes take their defaults).

    ``policies``: the memory-manager policy names to accept (default: pyhost.memory.POLICIES
    as it is now, so a policy added there is accepted here without a change).
    """
    unknown = sorted(set(values) - set(AXES))
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {unknown}; the axes are {list(AXES)}")
    v = dict(values)
    for k in _INT_AXES:
        if k in v and (not isinstance(v[k], int) or isinstance(v[k], bool) or v[k] < 1):
            raise SpecError(f"{where}: {k} must be a positive integer, got {v[k]!r}")
    if "max_layers" in v and v["max_layers"] is not None and (
            not isinstance(v["max_layers"], int) or isinstance(v["max_layers"], bool)
            or v["max_layers"] < 1):
        raise SpecError(f"{where}: max_layers must be a positive integer or null, "
                        f"got {v['max_layers']!r}")
    if "card_mem" in v:
        v["card_mem"] = parse_size(v["card_mem"], f"{where}: card_mem")
    for k in ("model", "backend", "simulator", "policy", "link"):
        if k in v and not isinstance(v[k], str):
            raise SpecError(f"{where}: {k} must be a string, got {v[k]!r}")
    if "timeout_s" in v:
        t = v["timeout_s"]
        if isinstance(t, bool) or not isinstance(t, int | float) or t <= 0:
            raise SpecError(f"{where}: timeout_s must be a positive number, got {t!r}")
        v["timeout_s"] = float(t)
    if "build" in v and v["build"] not in BUILDS:
        raise SpecError(f"{where}: build {v['build']!r}: expected one of {list(BUILDS)}")
    if "waves" in v and not isinstance(v["waves"], bool):
        raise SpecError(f"{where}: waves must be true or false, got {v['waves']!r}")
    p = Point(**v)
    if p.backend not in BACKENDS:
        raise SpecError(f"{where}: backend {p.backend!r}: expected one of {list(BACKENDS)}")
    if p.simulator not in SIMULATORS:
        raise SpecError(f"{where}: simulator {p.simulator!r}: expected one of {list(SIMULATORS)}")
    if p.n not in ARRAY_SIZES:
        raise SpecError(f"{where}: n = {p.n}: the RTL's array is 4, 8 or 16")
    if policies is None:
        from pyhost.memory import POLICIES

        policies = tuple(POLICIES)
    if p.policy not in policies:
        raise SpecError(f"{where}: policy {p.policy!r}: expected one of {list(policies)}")
    if not p.model:
        raise SpecError(f"{where}: model is empty")
    if p.backend == "model":
        # The functional card has no simulator and no link: one point, whatever they say.
        p = replace(p, simulator=Point.simulator, link=DEFAULT_LINK, waves=False)
    return p


@dataclass(frozen=True)
class SweepSpec:
    """A parsed spec: its name and its points (deduplicated, in spec order)."""

    name: str
    points: tuple[Point, ...]

    def __len__(self) -> int:
        return len(self.points)


_TOP_KEYS = ("name", "grid", "points", "fixed", "description")


def from_mapping(data: Any, default_name: str = "sweep",
                 policies: Sequence[str] | None = None) -> SweepSpec:
    """A SweepSpec from the parsed YAML/JSON document."""
    if not isinstance(data, Mapping):
        raise SpecError(f"a sweep spec is a mapping with keys {list(_TOP_KEYS)}, got "
                        f"{type(data).__name__}")
    unknown = sorted(set(data) - set(_TOP_KEYS))
    if unknown:
        raise SpecError(f"unknown top-level key(s) {unknown}; expected {list(_TOP_KEYS)} "
                        f"(axes go under 'grid' or 'fixed')")
    name = str(data.get("name") or default_name)
    if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise SpecError(f"name {name!r}: use letters, digits, '-', '_' and '.' (it names the "
                        "output directory)")
    fixed = data.get("fixed") or {}
    grid = data.get("grid") or {}
    extra = data.get("points") or []
    for key, val in (("fixed", fixed), ("grid", grid)):
        if not isinstance(val, Mapping):
            raise SpecError(f"{key}: expected a mapping of axis -> value(s), got "
                            f"{type(val).__name__}")
    if not isinstance(extra, list):
        raise SpecError(f"points: expected a list of mappings, got {type(extra).__name__}")
    axes = {k: (list(v) if isinstance(v, list | tuple) else [v]) for k, v in grid.items()}
    for k, vals in axes.items():
        if not vals:
            raise SpecError(f"grid.{k}: an empty list gives no points")
        if k not in AXES and not all(isinstance(v, Mapping) for v in vals):
            raise SpecError(f"grid.{k}: not an axis ({list(AXES)}); a grouped axis (any name) "
                            "lists mappings that set several axes together")
    points: list[Point] = []
    if grid or not extra:
        for combo in itertools.product(*axes.values()):
            values = dict(fixed)
            for k, v in zip(axes, combo, strict=True):
                # a mapping sets several axes at once (a grouped axis: e.g. one scratchpad size
                # is three depths, one model comes with its own layers per subgraph)
                values.update(v if isinstance(v, Mapping) else {k: v})
            points.append(make_point(values, policies, "grid point " + json.dumps(
                dict(zip(axes, combo, strict=True)), default=str)))
    for i, item in enumerate(extra):
        if not isinstance(item, Mapping):
            raise SpecError(f"points[{i}]: expected a mapping, got {type(item).__name__}")
        points.append(make_point({**fixed, **item}, policies, f"points[{i}]"))
    seen: dict[Point, None] = {}
    for p in points:
        seen.setdefault(p)
    return SweepSpec(name, tuple(seen))


def select(spec: SweepSpec, only: Sequence[str]) -> SweepSpec:
    """The points of ``spec`` whose axes match every ``AXIS=VALUE[,VALUE...]`` of ``only``
    (``--only model=demo --only n=4,8``): run part of a study, the rest later from the same
    spec (the cache keys do not depend on the selection). Values are compared as the spec
    normalizes them (``card_mem=64M`` is 64 MiB)."""
    keep = list(spec.points)
    for item in only:
        axis, sep, text = item.partition("=")
        axis = axis.strip()
        if not sep or axis not in AXES or not text:
            raise SpecError(f"--only {item!r}: expected AXIS=VALUE[,VALUE...] with an axis of "
                            f"{list(AXES)}")
        wanted = set()
        for raw in text.split(","):
            raw = raw.strip()
            if axis == "card_mem":
                wanted.add(parse_size(raw, "--only card_mem"))
            elif axis in _INT_AXES or axis == "max_layers":
                try:
                    wanted.add(int(raw))
                except ValueError:
                    raise SpecError(f"--only {axis}={raw!r}: expected an integer") from None
            elif axis in ("timeout_s",):
                wanted.add(float(raw))
            elif axis == "waves":
                wanted.add(raw.lower() in ("1", "true", "yes"))
            else:
                wanted.add(raw)
        keep = [p for p in keep if getattr(p, axis) in wanted]
    if not keep:
        raise SpecError(f"--only {' '.join(only)}: no point of {spec.name!r} matches")
    return SweepSpec(spec.name, tuple(keep))


def load(path: str | Path, policies: Sequence[str] | None = None) -> SweepSpec:
    """Parse a spec file: ``.json``, else YAML (a JSON document is YAML too)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise SpecError(f"cannot read the sweep spec {path}: {e.strerror}") from None
    if p.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecError(f"{path}: not valid JSON: {e}") from None
    else:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise SpecError(f"{path}: not valid YAML: {e}") from None
    return from_mapping(data, p.stem, policies)
