"""Tensor layouts of the accelerator in card memory, and packing between them and numpy.

Activations are channel-blocked "C/N, H, W, N" int8 per image (images one after the other): the
channels are padded to a multiple of the array size N and split into blocks of N; the N channels
of one pixel of one block are one scratchpad row (lane n = channel cb*N + n, byte n of the row).
Padding channels hold a fill value, the tensor's zero point (real value 0), so that every kernel
sees deterministic bytes there and the kernels' own outputs keep that property.

A matrix (M, K) is the same layout with batch M and a 1 x 1 image: rows of K/N blocks, which is
numpy's row-major order with K padded to a multiple of N.

Weights are N x N tiles, W[k][n] at byte k*N + n (the WGT row format), with
W[k][n] = weight[out = ob*N + n][in = cb*N + k][kh][kw]; `conv_weight_tiles` lists them in the
order a kernel consumes them, so that each LOAD.WGT moves one contiguous run of tiles.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def nchw_view(shape: Sequence[int]) -> tuple[int, int, int, int]:
    """The (B, C, H, W) view a tensor of `shape` has in the blocked layout: NCHW as it is,
    (N, C, L) as (N, C, 1, L), a (M, K) matrix as (M, K, 1, 1), a (K,) vector as (1, K, 1, 1).
    ValueError for other ranks."""
    s = tuple(int(v) for v in shape)
    if len(s) == 4:
        return s[0], s[1], s[2], s[3]
    if len(s) == 3:
        return s[0], s[1], 1, s[2]
    if len(s) == 2:
        return s[0], s[1], 1, 1
    if len(s) == 1:
        return 1, s[0], 1, 1
    raise ValueError(f"shape {s} has no blocked layout (ranks 1 to 4 do)")


def blocks(channels: int, n: int) -> int:
    """Channel blocks of N lanes that hold `channels` channels."""
    return -(-int(channels) // n)


def act_bytes(c: int, h: int, w: int, n: int, batch: int = 1, elem: int = 1) -> int:
    """Bytes of a (batch, c, h, w) activation in the blocked layout (`elem` bytes per lane)."""
    return batch * blocks(c, n) * h * w * n * elem


def _nchw(x: np.ndarray) -> np.ndarray:
    if x.ndim == 3:
        return x[None]
    if x.ndim != 4:
        raise ValueError(f"expected a (C, H, W) or (B, C, H, W) tensor, got shape {x.shape}")
    return x


def pack_act(x: np.ndarray, n: int, fill: int = 0, dtype: type = np.int8) -> bytes:
    """NCHW (or CHW) -> blocked bytes; padding channels get `fill` (the zero point)."""
    x = _nchw(np.asarray(x))
    b, c, h, w = x.shape
    cb = blocks(c, n)
    out = np.full((b, cb * n, h, w), fill, dtype)
    out[:, :c] = x
    # (B, CB, N, H, W) -> (B, CB, H, W, N)
    blk = out.reshape(b, cb, n, h, w).transpose(0, 1, 3, 4, 2)
    return np.ascontiguousarray(blk).astype(np.dtype(dtype).newbyteorder("<")).tobytes()


def unpack_act(buf: bytes | bytearray | memoryview | np.ndarray, shape: Sequence[int], n: int,
               dtype: type = np.int8) -> np.ndarray:
    """Blocked bytes -> NCHW array of `shape` (B, C, H, W); padding channels are dropped."""
    b, c, h, w = (int(v) for v in shape)
    cb = blocks(c, n)
    dt = np.dtype(dtype).newbyteorder("<")
    size = b * cb * h * w * n * dt.itemsize
    raw = np.frombuffer(bytes(buf[:size]) if not isinstance(buf, np.ndarray)
                        else buf[:size].tobytes(), dt)
    if raw.size * dt.itemsize != size:
        raise ValueError(f"{size} bytes needed for {tuple(shape)}, got {raw.size * dt.itemsize}")
    blk = raw.reshape(b, cb, h, w, n).transpose(0, 1, 4, 2, 3).reshape(b, cb * n, h, w)
    return np.ascontiguousarray(blk[:, :c]).astype(dtype)


def pack_rows(x: np.ndarray, n: int, fill: int = 0) -> bytes:
    """A (M, K) int8 matrix -> rows of K/N blocks (K padded with `fill`)."""
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"expected a (M, K) matrix, got shape {x.shape}")
    return pack_act(x[:, :, None, None], n, fill)


def unpack_rows(buf: bytes | bytearray | memoryview | np.ndarray, m: int, k: int, n: int,
                dtype: type = np.int8) -> np.ndarray:
    """Rows of K/N blocks -> (M, K) (int8, or int32 for the int32 GEMM)."""
    return unpack_act(buf, (m, k, 1, 1), n, dtype)[:, :, 0, 0]


def weight_tiles(w: np.ndarray, n: int) -> np.ndarray:
    """(Cout, Cin, KH, KW) int8 -> tiles (NBo, NBi, KH, KW, N_k, N_n), zero-padded channels."""
    w = np.asarray(w)
    if w.ndim != 4:
        raise ValueError(f"expected a (Cout, Cin, KH, KW) weight, got shape {w.shape}")
    co, ci, kh, kw = w.shape
    nbo, nbi = blocks(co, n), blocks(ci, n)
    wp = np.zeros((nbo * n, nbi * n, kh, kw), np.int8)
    wp[:co, :ci] = w
    # [ob, n, cb, k, kh, kw] -> [ob, cb, kh, kw, k, n]
    return wp.reshape(nbo, n, nbi, n, kh, kw).transpose(0, 2, 4, 5, 3, 1)


def conv_weight_tiles(w: np.ndarray, n: int, ob_groups: Sequence[range],
                      cb_passes: Sequence[range]) -> list[bytes]:
    """The weight chunks of a tiled kernel: one per (output-block group, input-block pass), in
    that loop order; each is the tiles [ob in group][cb in pass][kh][kw], contiguous."""
    t = weight_tiles(w, n)
    out = []
    for g in ob_groups:
        for p in cb_passes:
            chunk = t[g.start:g.stop, p.start:p.stop]
            out.append(np.ascontiguousarray(chunk).tobytes())
    return out



def gemm_weight_tiles(w_kn: np.ndarray, n: int, ob_groups: Sequence[range],
                      cb_passes: Sequence[range]) -> bytes:
    """`conv_weight_tiles` of a GEMM's (K, Nout) int8 weight (the 1x1 conv weight ``w_kn.T``),
    the chunks one after the other (``b"".join`` of that list), tiled straight from that
    layout into one buffer: tile (ob, cb) holds w_kn[cb*N + k, ob*N + n] at [k][n]."""
    w_kn = np.asarray(w_kn)
    if w_kn.ndim != 2:
        raise ValueError(f"expected a (K, Nout) weight, got shape {w_kn.shape}")
    k, nout = w_kn.shape
    kb, nbo = blocks(k, n), blocks(nout, n)
    if k == kb * n and nout == nbo * n:
        wp = w_kn.astype(np.int8, copy=False)
    else:
        wp = np.zeros((kb * n, nbo * n), np.int8)
        wp[:k, :nout] = w_kn
    out = np.empty(sum(len(g) * len(p) for g in ob_groups for p in cb_passes) * n * n, np.int8)
    at = 0
    for g in ob_groups:
        for p in cb_passes:
            size = len(g) * len(p) * n * n
            # [cb, k, ob, n] -> [ob, cb, k, n]
            out[at:at + size].reshape(len(g), len(p), n, n)[...] = \
                wp[p.start * n:p.stop * n, g.start * n:g.stop * n] \
                .reshape(len(p), n, len(g), n).transpose(2, 0, 1, 3)
            at += size
    return out.tobytes()

def lane_rows(values: np.ndarray, n: int, fill: int = 0) -> np.ndarray:
    """Per-channel int32 values -> (blocks, N) rows (the ACC row format), padding with `fill`."""
    v = np.asarray(values, np.int64).reshape(-1)
    out = np.full(blocks(v.size, n) * n, fill, np.int64)
    out[:v.size] = v
    if out.size and (out.min() < -(2**31) or out.max() >= 2**31):
        raise ValueError("per-channel values must fit int32")
    return out.astype(np.int32).reshape(-1, n)


def acc_rows_bytes(rows: np.ndarray) -> bytes:
    """(R, N) int32 rows -> their bytes in card memory (little endian, the LOAD.ACC element)."""
    return np.ascontiguousarray(np.asarray(rows, np.int32)).astype("<i4").tobytes()
