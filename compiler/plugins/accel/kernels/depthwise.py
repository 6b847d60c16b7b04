"""Depthwise convolutions on the array's depthwise mode (the DW instruction): which kernel taps
each instruction takes, the input tile's row pitch that puts them in the INP banks' rotation, and
the weight tiles (tap x channel).

A depthwise Conv (group = input channels = output channels) as an implicit GEMM has one live
weight tile per channel block and tap, and that tile is diagonal: N useful MACs of the array's
N x N per iteration. DW makes the taps the reduction instead: one iteration multiplies up to N
taps' input rows by their weights, lane by lane, so a 3x3 kernel takes two instructions per
channel block at N = 8 (two kernel rows, 6 taps; then 3) where the diagonal form took nine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compiler.plugins.accel.kernels.base import _PAD, _limit, _need
from pyhost.accel import layout
from pyhost.spec.isa import Opcode

#: Largest DW field values (the DW format narrows some of GEMM's fields).
_TAP_W = _limit(Opcode.DW, "tap_w")
_PITCH = _limit(Opcode.DW, "tap_pitch")
_DW_SI = _limit(Opcode.DW, "inp_si")
_DW_SO = _limit(Opcode.DW, "inp_so")
_DW_ACC = _limit(Opcode.DW, "acc_base")
_DW_WGT = _limit(Opcode.DW, "wgt_base")


@dataclass(frozen=True)
class DwPass:
    """The taps of one DW instruction: kernel rows ky0 .. ky0 + rows - 1, columns kx0 .. kx0 +
    cols - 1 (a pass covers whole kernel rows, or part of one row when the row has more taps
    than N)."""

    ky0: int
    rows: int
    kx0: int
    cols: int

    @property
    def taps(self) -> int:
        return self.rows * self.cols


@dataclass(frozen=True)
class DwPlan:
    """How a depthwise Conv runs on DW: the input tile's row pitch (its padded width plus
    `extra_left` / `extra_right` columns that no tap reads) and the passes."""

    pitch: int
    extra_left: int
    extra_right: int
    passes: tuple[DwPass, ...]

    def insn_fields(self, p: DwPass, dh: int) -> dict[str, int]:
        """The DW fields of pass `p`: its taps' geometry and its first tap's row offset (from
        the tile row of the output pixel's window origin)."""
        return {"taps": p.taps, "tap_w": p.cols,
                "tap_pitch": dh * self.pitch if p.rows > 1 else 0,
                "offset": p.ky0 * dh * self.pitch + p.kx0 + self.extra_left}


def is_depthwise(group: int, c_in: int, c_out: int) -> bool:
    """A Conv whose every output channel reads exactly its own input channel."""
    return group > 1 and group == c_in == c_out


def plan(kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, pl: int, pr: int, width: int,
         n: int) -> DwPlan | None:
    """The DW form of a depthwise Conv's geometry (padded input tile `pl + width + pr` wide), or
    None where DW cannot take it (dilation along the width, a stride or kernel width beyond
    DW's fields): then the Conv runs as the implicit GEMM with diagonal tiles.

    Passes take as many whole kernel rows as N taps hold (N // kw) when the tile can be given a
    pitch P with dh * P = kw (mod N) (the banks' rotation, docs/isa.md DW) by adding at most
    N - 1 columns of padding (LOAD's pad fields permitting) and dh * P fits tap_pitch; else one
    kernel row per pass (no pitch rule). A kernel row of more than N taps is split."""
    wp = pl + width + pr
    if dw != 1 or kw > _TAP_W or sw > _DW_SI or sh * wp > _DW_SO:
        return None
    per = n // kw
    if per >= 2 and kh >= 2:
        # the one pitch in [wp, wp + N) with dh * pitch = kw (mod N), if dh allows one
        for pitch in range(wp, wp + n):
            if (dh * pitch - kw) % n:
                continue
            extra = pitch - wp
            right = min(extra, _PAD - pr)
            left = extra - right
            if pl + left <= _PAD and dh * pitch <= _PITCH and sh * pitch <= _DW_SO:
                passes = tuple(DwPass(ky, min(per, kh - ky), 0, kw) for ky in range(0, kh, per))
                return DwPlan(pitch, left, right, passes)
            break
    if kw <= n:
        return DwPlan(wp, 0, 0, tuple(DwPass(ky, 1, 0, kw) for ky in range(kh)))
    return DwPlan(wp, 0, 0, tuple(DwPass(ky, 1, kx, min(n, kw - kx))
                                  for ky in range(kh) for kx in range(0, kw, n)))


def weight_tiles(w: np.ndarray, dp: DwPlan, n: int) -> np.ndarray:
    """A depthwise weight (C, 1, KH, KW) as DW tiles [block][pass] of N x N int8: row k of a
    pass's tile holds tap k (row-major over the pass's kernel rows and columns), lane c the
    channel block's channel c; rows past the pass's taps and lanes past the channels are 0."""
    w = np.asarray(w)
    _need(w.ndim == 4 and w.shape[1] == 1, f"a depthwise weight is (C, 1, KH, KW), got {w.shape}")
    c = int(w.shape[0])
    nb = layout.blocks(c, n)
    wc = np.zeros((nb * n, w.shape[2], w.shape[3]), np.int8)
    wc[:c] = w[:, 0]
    out = np.zeros((nb, len(dp.passes), n, n), np.int8)
    for i, p in enumerate(dp.passes):
        taps = wc[:, p.ky0:p.ky0 + p.rows, p.kx0:p.kx0 + p.cols].reshape(nb * n, p.taps)
        out[:, i, :p.taps, :] = taps.T.reshape(p.taps, nb, n).transpose(1, 0, 2)
    return out


def fits(acc_depth: int, wgt_depth: int) -> bool:
    """Whether DW's narrower base fields address the whole ACC and WGT scratchpads (the default
    build's do; a larger build runs depthwise Convs as the implicit GEMM)."""
    return acc_depth - 1 <= _DW_ACC and wgt_depth - 1 <= _DW_WGT
