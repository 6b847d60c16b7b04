"""The accelerator's software ABI: how a compiled program meets the card.

A subgraph compiled for the accelerator is a position-independent program that addresses card
memory only through the 16 slot registers: slot 0 holds its constant blob, slot 1 a scratch arena
for the activations that stay inside it, slots 2.. its external inputs and then outputs, each at
offset 0 (`CONST_SLOT`, `SCRATCH_SLOT`, `FIRST_IO_SLOT`). Every tensor is aligned to
`card_align(n)`. The compiler plugin writes this contract into the subgraph's ``accel_*``
attributes (`IoSpec` per external tensor); the runtime reads it back as an `AccelImage`, binds the
slots to wherever the memory manager placed the tensors and starts the program.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyhost.accel import layout
from pyhost.spec import isa
from pyhost.spec.accel import BEAT_BYTES, AccelConfig


class AbiError(ValueError):
    """A subgraph's accelerator attributes are missing or malformed (recompile it)."""


#: Slot registers of an accelerator subgraph: constants, scratch, then inputs and outputs.
CONST_SLOT, SCRATCH_SLOT, FIRST_IO_SLOT = 0, 1, 2
MAX_IO = isa.NUM_SLOTS - FIRST_IO_SLOT
#: The memory manager's allocation unit: one bus beat, or a whole weight tile when N*N is larger
#: (a slot base must be a multiple of the largest element a LOAD reads through it).
MIN_ALIGN = BEAT_BYTES
#: The accelerator addresses card memory with 32 bits.
ACCEL_SPACE = isa.ADDR_SPACE
#: The attribute that marks a subgraph compiled for the accelerator.
PROGRAM_ATTR = "accel_program"


def align_up(x: int, a: int) -> int:
    return -(-int(x) // a) * a


def card_align(n: int) -> int:
    """Alignment of every accelerator tensor in card memory for an array of size N."""
    return max(MIN_ALIGN, n * n)


def _int(v: Any, what: str, lo: int, hi: int) -> int:
    """``v`` if it is an int (not a bool) in [lo, hi]; AbiError otherwise."""
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise AbiError(f"{what} must be an integer in {lo}..{hi}, got {v!r}; recompile")
    return v


def sp_range_ok(insn: isa.Insn, cfg: AccelConfig) -> bool:
    """Whether ``insn`` stays inside the scratchpads of ``cfg`` (the rule behind
    `AccelError.SP_RANGE`, checked statically: no field depends on run-time state)."""
    f = insn.fields.get
    if insn.op == isa.Opcode.LOAD:
        total = (f("pad_top", 0) + f("y_size", 0) + f("pad_bottom", 0)) * \
            (f("pad_left", 0) + f("x_size", 0) + f("pad_right", 0))
        return not total or f("sp_base", 0) + total <= cfg.depth(isa.Buffer(f("buf", 0)))
    if insn.op == isa.Opcode.STORE:
        total = f("y_size", 0) * f("x_size", 0)
        return not total or f("sp_base", 0) + total <= cfg.acc_depth
    outer, inner = f("outer", 0), f("inner", 0)
    if not (outer and inner):
        return True
    if insn.op in (isa.Opcode.GEMM, isa.Opcode.DW):
        a_last = f("acc_base", 0) + (outer - 1) * f("acc_so", 0) + (inner - 1) * f("acc_si", 0)
        i_last = f("inp_base", 0) + (outer - 1) * f("inp_so", 0) + (inner - 1) * f("inp_si", 0)
        if insn.op == isa.Opcode.DW:
            i_last += isa.dw_offsets(f("taps", 0), f("tap_w", 0), f("tap_pitch", 0))[-1]
        return a_last < cfg.acc_depth and i_last < cfg.inp_depth and \
            f("wgt_base", 0) < cfg.wgt_depth
    if insn.op == isa.Opcode.ALU:
        d_last = f("dst_base", 0) + (outer - 1) * f("dst_so", 0) + (inner - 1) * f("dst_si", 0)
        s_last = f("src_base", 0) + (outer - 1) * f("src_so", 0) + (inner - 1) * f("src_si", 0) \
            + (1 if f("alu_op", 0) == isa.AluOp.REQ else 0)
        return d_last < cfg.acc_depth and (bool(f("use_imm", 0)) or s_last < cfg.acc_depth)
    return True


def _check_one(name: str, program: bytes, pc: int, last: int, cfg: AccelConfig,
               slots: int) -> None:
    """`check_program`'s rules for instruction ``pc`` (of ``last`` + 1)."""
    raw = program[pc * isa.INSN_BYTES:(pc + 1) * isa.INSN_BYTES]
    where = f"subgraph {name!r}: accel_program instruction {pc}"
    try:
        insn = isa.decode(raw)
    except isa.IsaError as e:
        raise AbiError(f"{where} ({raw.hex()}) does not decode: {e}; recompile") from None
    err = isa.check_static(insn, cfg.n)
    if err != isa.AccelError.NONE:
        raise AbiError(f"{where} is illegal ({err.name}): {isa.disassemble_one(insn)}")
    if (insn.op == isa.Opcode.END) != (pc == last):
        what = "END before the last instruction" if pc < last else \
            "the last instruction is not END"
        raise AbiError(f"{where}: {what}; recompile")
    if insn.op in (isa.Opcode.LOAD, isa.Opcode.STORE) and insn.slot >= slots:
        raise AbiError(f"{where} uses slot {insn.slot}, but the subgraph binds slots "
                       f"0..{slots - 1}: {isa.disassemble_one(insn)}")
    if not sp_range_ok(insn, cfg):
        raise AbiError(f"{where} reaches beyond the scratchpads of accel_config {cfg} "
                       f"(SP_RANGE): {isa.disassemble_one(insn)}; the configuration does "
                       "not match the program, recompile")


_LOAD, _STORE, _GEMM, _ALU, _END = (int(isa.Opcode.LOAD), int(isa.Opcode.STORE),
                                    int(isa.Opcode.GEMM), int(isa.Opcode.ALU),
                                    int(isa.Opcode.END))


def _cleared(program: bytes, cfg: AccelConfig, slots: int) -> np.ndarray:
    """Per instruction, whether the rules of `_check_one` certainly pass, decided on all of
    them at once with numpy: LOAD, STORE, GEMM, ALU and END (at the end) are checked exactly
    as `isa.check_static` and `sp_range_ok` check them; DW, XALU and illegal opcodes are never
    cleared (`_check_one` decides those)."""
    from pyhost.accel.program_order import decode_fields

    op, flags, cols = decode_fields(np.frombuffer(program, np.uint8))
    k = op.size

    def c(name: str) -> np.ndarray:
        return cols.get(name, np.zeros(k, np.int64))

    is_l, is_s, is_g, is_a, is_e = (op == _LOAD, op == _STORE, op == _GEMM, op == _ALU,
                                    op == _END)
    last = np.zeros(k, bool)
    last[-1] = True
    ok = (is_e & (flags == 0) & last) | ((is_l | is_s | is_g | is_a) & ~last)
    pads = (c("pad_top") != 0) | (c("pad_bottom") != 0) | (c("pad_left") != 0) \
        | (c("pad_right") != 0)
    buf, tr, y, x, sp = c("buf"), c("transpose") != 0, c("y_size"), c("x_size"), c("sp_base")
    # the fetch unit: the units' flags, STORE's buffer and form, a transposed LOAD's form,
    # the ALU's operation
    ok &= ~(is_l & ((flags & 0b0101) != 0)) & ~(is_s & ((flags & 0b1010) != 0))
    ok &= ~(is_s & ((buf < int(isa.Buffer.ACC)) | pads | tr))
    ok &= ~(is_l & tr & ((buf != int(isa.Buffer.INP)) | (y % cfg.n != 0) | pads))
    alu_op, use_imm = c("alu_op"), c("use_imm") != 0
    req = alu_op == int(isa.AluOp.REQ)
    ok &= ~(is_a & ((alu_op > int(max(isa.AluOp))) | (req & use_imm)))
    # slots and scratchpad ranges
    ok &= ~((is_l | is_s) & (c("slot") >= slots))
    depth = np.array([cfg.depth(isa.Buffer(b)) for b in range(len(isa.Buffer))], np.int64)
    total = np.where(is_l, (c("pad_top") + y + c("pad_bottom"))
                     * (c("pad_left") + x + c("pad_right")), y * x)
    ok &= ~((is_l | is_s) & (total > 0) & (sp + total > depth[np.clip(buf, 0, len(depth) - 1)]))
    outer, inner = c("outer"), c("inner")
    loops = (outer > 0) & (inner > 0)
    a_last = c("acc_base") + (outer - 1) * c("acc_so") + (inner - 1) * c("acc_si")
    i_last = c("inp_base") + (outer - 1) * c("inp_so") + (inner - 1) * c("inp_si")
    ok &= ~(is_g & loops & ((a_last >= cfg.acc_depth) | (i_last >= cfg.inp_depth)
                            | (c("wgt_base") >= cfg.wgt_depth)))
    d_last = c("dst_base") + (outer - 1) * c("dst_so") + (inner - 1) * c("dst_si")
    s_last = c("src_base") + (outer - 1) * c("src_so") + (inner - 1) * c("src_si") + req
    ok &= ~(is_a & loops & ((d_last >= cfg.acc_depth) | (~use_imm & (s_last >= cfg.acc_depth))))
    return ok


def check_program(name: str, program: bytes, cfg: AccelConfig, slots: int,
                  vectorized: bool = True) -> None:
    """Check that the program of subgraph ``name`` can run on ``cfg`` with ``slots`` slot
    registers bound: every instruction decodes and passes the fetch unit's static check, only
    the last one is END, LOAD/STORE name a bound slot, and every scratchpad access fits the
    configuration's depths. AbiError naming the first offending instruction otherwise.
    Vectorized (the default), the instructions the numpy rules clear are not decoded one by one
    (ResNet-50's 508k: 0.2 s instead of 11 s); the others are, in order, so the error is the
    same as ``vectorized=False`` (every instruction one by one) gives."""
    if not isinstance(program, bytes) or not program or len(program) % isa.INSN_BYTES:
        raise AbiError(f"subgraph {name!r}: accel_program is not a whole number "
                       f"of {isa.INSN_BYTES}-byte instructions; recompile")
    last = len(program) // isa.INSN_BYTES - 1
    todo = range(last + 1) if not vectorized else \
        np.flatnonzero(~_cleared(program, cfg, slots)).tolist()
    for pc in todo:
        _check_one(name, program, pc, last, cfg, slots)



@dataclass(frozen=True)
class IoSpec:
    """An external tensor of an accelerator subgraph (one entry of ``accel_io``).

    Its bytes are the blocked int8 layout of `pyhost.accel.layout` ("nchwc": channel blocks of
    N lanes; a (M, K) matrix is (M, K, 1, 1)) with real = scale * (q - zero_point); padding lanes
    hold `fill`. With ``feature_scales`` (one per element of the last axis, zero point 0) real
    = feature_scales[f] * q: a transformer's per-feature activations.
    """

    name: str
    role: str                 # "in" | "out"
    slot: int
    nbytes: int
    shape: tuple[int, ...]
    scale: float
    zero_point: int
    n: int
    fill: int
    layout: str = "nchwc"
    feature_scales: tuple[float, ...] | None = None

    def to_attr(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["shape"] = list(self.shape)
        if self.feature_scales is None:
            del d["feature_scales"]
        else:
            d["feature_scales"] = list(self.feature_scales)
        return d

    @classmethod
    def from_attr(cls, d: Mapping[str, Any]) -> IoSpec:
        if not isinstance(d, Mapping):
            raise AbiError(f"accel_io entry must be an object, got {type(d).__name__}; "
                           "recompile")
        names = {f.name for f in dataclasses.fields(cls)}
        missing = sorted(names - set(d) - {"layout", "feature_scales"})
        if missing:
            raise AbiError(f"accel_io entry {dict(d)!r} lacks {missing}; recompile")
        unknown = sorted(str(k) for k in set(d) - names)
        if unknown:
            raise AbiError(f"accel_io entry has unknown fields {unknown}; recompile")
        name = d["name"]
        if not isinstance(name, str) or not name:
            raise AbiError(f"accel_io entry name must be a non-empty string, got {name!r}")
        what = f"accel_io entry {name!r}"
        shape = d["shape"]
        if not isinstance(shape, (list, tuple)) or not 1 <= len(shape) <= 4:
            raise AbiError(f"{what}: shape must be a list of 1 to 4 dimensions (the ranks with "
                           f"a blocked layout, layout.nchw_view), got {shape!r}")
        dims = tuple(_int(v, f"{what}: a dimension", 1, ACCEL_SPACE) for v in shape)
        scale = d["scale"]
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) \
                or not math.isfinite(scale) or scale <= 0:
            raise AbiError(f"{what}: scale must be a finite positive number, got {scale!r}")
        fs = d.get("feature_scales")
        if fs is not None:
            if not isinstance(fs, (list, tuple)) or len(fs) != dims[-1] or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool)
                    and math.isfinite(v) and v > 0 for v in fs):
                raise AbiError(f"{what}: feature_scales must be {dims[-1]} finite positive "
                               "numbers (one per element of the last axis)")
            if d["zero_point"] != 0:
                raise AbiError(f"{what}: a per-feature tensor has zero point 0, got "
                               f"{d['zero_point']!r}")
            fs = tuple(float(v) for v in fs)
        layout_name = d.get("layout", "nchwc")
        if layout_name != "nchwc" or d["role"] not in ("in", "out"):
            raise AbiError(f"{what}: layout {layout_name!r} / role {d['role']!r} unknown to "
                           "this runtime; recompile")
        spec = cls(name=name, role=d["role"], slot=_int(d["slot"], f"{what}: slot", 0,
                                                         isa.NUM_SLOTS - 1),
                   nbytes=_int(d["nbytes"], f"{what}: nbytes", 1, ACCEL_SPACE), shape=dims,
                   scale=float(scale),
                   zero_point=_int(d["zero_point"], f"{what}: zero_point", -128, 127),
                   n=_int(d["n"], f"{what}: n", 1, 1 << 16),
                   fill=_int(d["fill"], f"{what}: fill", -128, 127), layout=layout_name,
                   feature_scales=fs)
        b, c, h, w = spec.nchw
        want = layout.act_bytes(c, h, w, spec.n, b)
        if spec.nbytes != want:
            raise AbiError(f"{what}: nbytes {spec.nbytes} does not match its shape "
                           f"{list(dims)} in the blocked layout of N = {spec.n} ({want} "
                           "bytes); recompile")
        return spec

    @property
    def nchw(self) -> tuple[int, int, int, int]:
        return layout.nchw_view(self.shape)

    def pack(self, x: np.ndarray) -> np.ndarray:
        """Float array -> quantized blocked bytes (uint8 array of `nbytes`)."""
        x = np.asarray(x)
        if x.shape != self.shape:
            raise AbiError(f"tensor {self.name!r} is {x.shape}, expected {self.shape}")
        if x.dtype.kind == "f" and not np.isfinite(x).all():
            bad = int(np.count_nonzero(~np.isfinite(x)))
            raise AbiError(f"tensor {self.name!r} holds {bad} NaN or Inf value(s); the "
                           "accelerator computes in int8, which has no encoding for them "
                           "(the CPU path would give NaN outputs): check the input")
        if x.dtype.kind not in "biuf":
            raise AbiError(f"tensor {self.name!r} is {x.dtype}, not a number")
        q = np.clip(np.rint(x.astype(np.float64) / self._scales) + self.zero_point, -128, 127)
        raw = layout.pack_act(q.astype(np.int8).reshape(self.nchw), self.n, self.zero_point)
        return np.frombuffer(raw, np.uint8)

    def unpack(self, raw: np.ndarray | bytes) -> np.ndarray:
        """Blocked bytes -> the dequantized float32 array of `shape`."""
        q = layout.unpack_act(raw, self.nchw, self.n).reshape(self.shape)
        return ((q.astype(np.int64) - self.zero_point) * self._scales).astype(np.float32)

    @property
    def _scales(self) -> np.ndarray | float:
        return self.scale if self.feature_scales is None else np.asarray(self.feature_scales)


@dataclass(frozen=True)
class AccelImage:
    """The ``accel_*`` attributes of one accelerator subgraph, checked."""

    name: str
    program: bytes
    consts: bytes
    scratch_bytes: int
    io: tuple[IoSpec, ...]
    config: AccelConfig
    stats: Mapping[str, Any]

    @classmethod
    def from_attrs(cls, name: str, a: Mapping[str, Any]) -> AccelImage:
        """The image in a subgraph's attributes (``name`` for messages); AbiError when one is
        missing, malformed, or inconsistent with the others: the I/O layouts must be those of
        the configuration's N, the slots 2, 3, ... in order (inputs first), and the program
        must run on the configuration (`check_program`)."""
        need = ("accel_program", "accel_consts", "accel_scratch_bytes", "accel_io",
                "accel_config")
        missing = [k for k in need if k not in a]
        if missing:
            raise AbiError(f"subgraph {name!r} lacks {missing}: it was not compiled "
                           "by the accel plugin (or by an older one); recompile")
        raw_cfg = a["accel_config"]
        if not isinstance(raw_cfg, Mapping) or any(isinstance(v, bool) for v in raw_cfg.values()):
            raise AbiError(f"subgraph {name!r}: bad accel_config {raw_cfg!r}: an object of "
                           "positive integers; recompile")
        try:
            cfg = AccelConfig(**raw_cfg)
        except (TypeError, ValueError) as e:
            raise AbiError(f"subgraph {name!r}: bad accel_config "
                           f"{raw_cfg!r}: {e}") from None
        for field in ("n", "inp_depth", "wgt_depth", "acc_depth", "queue_depth"):
            _int(getattr(cfg, field), f"subgraph {name!r}: accel_config.{field}", 1, 1 << 16)
        consts = a["accel_consts"]
        if not isinstance(consts, bytes):
            raise AbiError(f"subgraph {name!r}: accel_consts must be bytes, got "
                           f"{type(consts).__name__}; recompile")
        scratch = _int(a["accel_scratch_bytes"], f"subgraph {name!r}: accel_scratch_bytes", 0,
                       ACCEL_SPACE)
        raw_io = a["accel_io"]
        if not isinstance(raw_io, list) or len(raw_io) > MAX_IO:
            raise AbiError(f"subgraph {name!r}: accel_io must be a list of at most {MAX_IO} "
                           "entries; recompile")
        io = tuple(IoSpec.from_attr(d) for d in raw_io)
        roles = [s.role for s in io]
        if roles != sorted(roles, key=lambda r: r != "in") or "out" not in roles:
            raise AbiError(f"subgraph {name!r}: accel_io lists roles {roles}; inputs come "
                           "first, and there is at least one output; recompile")
        names = [s.name for s in io]
        if len(set(names)) != len(names):
            raise AbiError(f"subgraph {name!r}: accel_io names a tensor twice ({names})")
        for i, s in enumerate(io):
            if s.slot != FIRST_IO_SLOT + i:
                raise AbiError(f"subgraph {name!r}: accel_io entry {s.name!r} is bound to slot "
                               f"{s.slot}, expected {FIRST_IO_SLOT + i}; recompile")
            if s.n != cfg.n:
                raise AbiError(f"subgraph {name!r}: accel_io entry {s.name!r} has the layout "
                               f"of N = {s.n}, but accel_config says N = {cfg.n}; the file "
                               "is inconsistent (tampered or corrupt): recompile")
        prog = a["accel_program"]
        check_program(name, prog, cfg, FIRST_IO_SLOT + len(io))
        stats = a.get("accel_stats") or {}
        if not isinstance(stats, Mapping):
            raise AbiError(f"subgraph {name!r}: accel_stats must be an object")
        image = cls(name, prog, consts, scratch, io, cfg, dict(stats))
        if image.card_bytes(card_align(cfg.n)) > ACCEL_SPACE:
            raise AbiError(f"subgraph {name!r} needs {image.card_bytes(card_align(cfg.n))} "
                           "bytes of card memory, beyond the accelerator's 4 GiB address space")
        return image

    @property
    def inputs(self) -> list[IoSpec]:
        return [s for s in self.io if s.role == "in"]

    @property
    def outputs(self) -> list[IoSpec]:
        return [s for s in self.io if s.role == "out"]

    @property
    def insns(self) -> int:
        return len(self.program) // isa.INSN_BYTES

    def card_bytes(self, align: int) -> int:
        """Card bytes of one launch: program, constants, scratch, inputs, outputs."""
        return sum(align_up(x, align) for x in (len(self.program), len(self.consts),
                                                self.scratch_bytes,
                                                *(s.nbytes for s in self.io)))
