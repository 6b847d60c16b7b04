"""cocotb bench for the whole accelerator (rtl/accel/accel.v) against its functional model.

Card memory is the AXI memory model of tb/common (latency, jitter, out-of-order responses across
the fetch and load IDs, back-pressure on every channel, injected bus errors); the registers are
driven through the csr-side register port. Every program runs on the RTL and on
pyhost.accel.model.AccelModel from the same memory image; card memory, the three scratchpads and
the exact counters must agree bit for bit. A watchdog fails a test whose program never raises an
interrupt (a token deadlock the hardware did not catch).
"""

from __future__ import annotations

import logging
import os
import random

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, First, ReadOnly, RisingEdge, Timer

from pyhost.accel.model import AccelModel, AccelResult
from pyhost.backend import HostMemory
from pyhost.spec import dram, isa, regs
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AccelError, Buffer
from tb.accel import randprog
from tb.common.clocking import reset, start_clock
from tb.common.host_memory_axi import HostMemoryAxiSlave, HostMemoryConfig, _on

MEM_SIZE = 1 << 20
PROGRAM_BASE = MEM_SIZE - (64 << 10)      # programs live in the top 64 KiB
EXACT_COUNTERS = ("insns", "macs", "bytes_loaded", "bytes_stored")
SIM = os.environ.get("SIM", "verilator")

MEMORY_MODES = {
    "ideal": HostMemoryConfig(read_latency=4),
    "slow": HostMemoryConfig(read_latency=40, jitter=30, out_of_order=True, seed=3),
    "backpressure": HostMemoryConfig(read_latency=12, jitter=8, out_of_order=True,
                                     ar_pause=[0, 1, 1], r_pause=[0, 0, 1, 1, 0, 1],
                                     aw_pause=[1, 0, 0, 1], w_pause=[0, 1, 0, 0, 1], seed=7),
}


def _int(sig) -> int:
    v = sig.value
    return int(v) if v.is_resolvable else 0


class TB:
    def __init__(self, dut, mode: str = "ideal") -> None:
        self.dut = dut
        start_clock(dut)
        self.mem = HostMemory(MEM_SIZE, base=0)
        self.axi = HostMemoryAxiSlave(dut, "m_axi", self.mem, MEMORY_MODES[mode])
        self.cfg = AccelConfig(n=int(dut.N.value), inp_depth=int(dut.INP_DEPTH.value),
                               wgt_depth=int(dut.WGT_DEPTH.value),
                               acc_depth=int(dut.ACC_DEPTH.value),
                               queue_depth=int(dut.QUEUE_DEPTH.value))
        self.model = AccelModel(self.cfg)
        self.model_mem = np.zeros(MEM_SIZE, np.uint8)
        dut.reg_wr.value = 0
        dut.reg_waddr.value = 0
        dut.reg_wdata.value = 0
        dut.reg_wstrb.value = 0
        dut.reg_raddr.value = 0
        dut.reg_re.value = 1
        self.irq_done = 0
        self.irq_err = 0
        logging.getLogger("cocotb").setLevel(logging.WARNING)

    async def reset(self) -> None:
        await reset(self.dut, hold=4, settle=2)
        cocotb.start_soon(self._irqs())

    async def _irqs(self) -> None:
        # edge-triggered: no Python per clock cycle while the accelerator runs
        d = self.dut
        while True:
            await First(RisingEdge(d.irq_done), RisingEdge(d.irq_err))
            await ReadOnly()
            self.irq_done += _on(d.irq_done)
            self.irq_err += _on(d.irq_err)
            await RisingEdge(d.clk)

    # -- registers ----------------------------------------------------------------------------
    async def wr(self, name: str, value: int) -> None:
        d = self.dut
        d.reg_waddr.value = regs.offset(name)
        d.reg_wdata.value = value & 0xFFFF_FFFF
        d.reg_wstrb.value = 0xF
        d.reg_wr.value = 1
        await RisingEdge(d.clk)
        d.reg_wr.value = 0

    async def rd(self, name: str) -> int:
        self.dut.reg_raddr.value = regs.offset(name)
        await RisingEdge(self.dut.clk)
        await RisingEdge(self.dut.clk)
        return _int(self.dut.reg_rdata)

    async def counters(self) -> dict[str, int]:
        out = {}
        for c, _ in regs.ACCEL_COUNTERS:
            lo = await self.rd(f"ACC_{c.upper()}_LO")
            hi = await self.rd(f"ACC_{c.upper()}_HI")
            out[c] = hi << 32 | lo
        return out

    # -- memory -------------------------------------------------------------------------------
    def write_both(self, addr: int, data: bytes) -> None:
        self.mem.write(addr, data)
        self.model_mem[addr:addr + len(data)] = np.frombuffer(data, np.uint8)

    # -- running ------------------------------------------------------------------------------
    async def launch(self, base: int, count: int, slots: list[int], *,
                     watchdog: int = 2_000_000) -> tuple[int, int, int]:
        """Start the program at ``base`` on the RTL; (status, error code, error pc) after its
        interrupt. The watchdog fails the test if no interrupt comes (a hang the hardware's
        deadlock detector did not catch)."""
        for i, s in enumerate(slots):
            await self.wr(f"ACC_SLOT{i}", s)
        await self.wr("ACC_INSN_BASE", base)
        await self.wr("ACC_INSN_COUNT", count)
        done0, err0 = self.irq_done, self.irq_err
        await self.wr("ACC_CTRL", 1)
        fired = await First(RisingEdge(self.dut.irq_done), RisingEdge(self.dut.irq_err),
                            Timer(watchdog * dram.CTRL_CLK_NS, unit="ns"))
        if isinstance(fired, Timer):
            status = await self.rd("ACC_STATUS")
            raise AssertionError(
                f"watchdog: no interrupt after {watchdog} cycles (ACC_STATUS {status:#x}, "
                "tokens l2c/c2l/c2s/s2c "
                f"{_int(self.dut.tok_l2c_reg)}/{_int(self.dut.tok_c2l_reg)}/"
                f"{_int(self.dut.tok_c2s_reg)}/{_int(self.dut.tok_s2c_reg)}, idle "
                f"fetch/load/compute/store {_int(self.dut.f_idle)}/{_int(self.dut.ld_idle)}/"
                f"{_int(self.dut.cp_idle)}/{_int(self.dut.st_idle)}, waiting "
                f"{_int(self.dut.ld_waiting)}/{_int(self.dut.cp_waiting)}/"
                f"{_int(self.dut.st_waiting)})")
        await ClockCycles(self.dut.clk, 3)
        assert self.irq_done + self.irq_err == done0 + err0 + 1, (
            f"{self.irq_done - done0} done and {self.irq_err - err0} error interrupts, "
            "expected one")
        status = await self.rd("ACC_STATUS")
        code = (status >> 8) & 0xFF
        pc = await self.rd("ACC_ERR_PC")
        assert not status & 1, f"ACC_STATUS {status:#x}: still busy after the interrupt"
        assert bool(status & 2) != bool(status & 4), f"ACC_STATUS {status:#x}: DONE xor ERROR"
        return status, code, pc

    async def run_program(self, image: bytes, base: int, count: int, slots: list[int]
                          ) -> tuple[tuple[int, int, int], AccelResult]:
        """The program image at ``base`` on both sides, run on both: (RTL result, model's)."""
        self.write_both(base, image)
        rtl = await self.launch(base, count, slots)
        model = self.model.run_array(self.model_mem, base, count, slots)
        return rtl, model

    async def run_both(self, image: bytes, base: int, count: int, slots: list[int],
                       what: str) -> dict[str, int]:
        """Run on both; require success and identical memory, scratchpads and counters."""
        (status, code, pc), res = await self.run_program(image, base, count, slots)
        assert res.error == AccelError.NONE, f"{what}: model error {res.error.name} at {res.err_pc}"
        assert status & 2 and code == 0, (
            f"{what}: RTL status {status:#x} error {AccelError(code).name} at pc {pc}, model "
            "succeeded")
        counters = await self.counters()
        for c in EXACT_COUNTERS:
            assert counters[c] == res.counters[c], (
                f"{what}: counter {c} RTL {counters[c]} model {res.counters[c]}")
        self.compare_memory(what)
        self.compare_scratchpads(what)
        return counters

    def compare_memory(self, what: str) -> None:
        rtl = self.mem.array
        model = self.model_mem
        diff = np.nonzero(rtl != model)[0]
        assert diff.size == 0, (
            f"{what}: card memory differs at {diff.size} bytes, first {int(diff[0]):#x}: RTL "
            f"{rtl[diff[0]]:#04x} model {model[diff[0]]:#04x}")

    def scratchpad_rows(self, name: str) -> list[int]:
        arr = getattr(self.dut, name)
        depth = {"inp_mem": self.cfg.inp_depth, "wgt_mem": self.cfg.wgt_depth,
                 "acc_mem": self.cfg.acc_depth}[name]
        return [_int(arr[i]) for i in range(depth)]

    def compare_scratchpads(self, what: str) -> None:
        n = self.cfg.n
        views = {
            "inp_mem": (self.model.inp.astype(np.uint8), 1),
            "wgt_mem": (self.model.wgt.reshape(self.cfg.wgt_depth, n * n).astype(np.uint8), 1),
            "acc_mem": (self.model.acc.view(np.uint32).view(np.uint8)
                        .reshape(self.cfg.acc_depth, 4 * n), 1),
        }
        for name, (model_rows, _) in views.items():
            rtl_rows = self.scratchpad_rows(name)
            for i, v in enumerate(rtl_rows):
                want = int.from_bytes(model_rows[i].tobytes(), "little")
                assert v == want, (f"{what}: {name}[{i}] RTL {v:#x} model {want:#x}")

    async def clear_scratchpads(self) -> None:
        """Zero every scratchpad row on both sides with padding-only loads (no memory traffic)."""
        prog = clear_program(self.cfg)
        self.write_both(PROGRAM_BASE, isa.encode_program(prog))
        status, code, pc = await self.launch(PROGRAM_BASE, len(prog), [0] * isa.NUM_SLOTS)
        assert status & 2, f"clearing the scratchpads failed: {AccelError(code).name} at {pc}"
        self.model.inp[:] = 0
        self.model.wgt[:] = 0
        self.model.acc[:] = 0


def clear_program(cfg: AccelConfig) -> list[isa.Insn]:
    """LOADs with y_size = 0 that write zero padding over every scratchpad row."""
    prog = []
    for buf, depth in ((Buffer.INP, cfg.inp_depth), (Buffer.WGT, cfg.wgt_depth),
                       (Buffer.ACC, cfg.acc_depth)):
        row = 0
        while row < depth:
            n = min(depth - row, 15 * 15)
            # n rows = pad_top rows of pad_left elements, pad_left up to 15
            top, left = (n // 15, 15) if n >= 15 else (1, n)
            chunk = top * left
            prog.append(isa.load(buf, sp_base=row, y_size=0, x_size=0, pad_top=top,
                                 pad_left=left))
            row += chunk
    return prog + [isa.end()]


ICARUS = cocotb.SIM_NAME.lower().startswith("icarus") if cocotb.SIM_NAME else False


async def _random_programs(dut, mode: str, seeds: range) -> None:
    tb = TB(dut, mode)
    await tb.reset()
    await tb.clear_scratchpads()
    for seed in seeds:
        rp = randprog.generate(random.Random(seed), tb.cfg, mem_size=PROGRAM_BASE)
        for addr, data in rp.init:
            tb.write_both(addr, data)
        await tb.run_both(rp.image(), rp.insn_base, rp.insn_count, rp.slots,
                          f"seed {seed} ({mode})")


def _seeds(base: int) -> range:
    return range(base, base + (2 if ICARUS else 10))


@cocotb.test(timeout_time=4, timeout_unit="sec")
async def test_attention_head(dut) -> None:
    """One attention head (compiler/plugins/accel/kernels/attention.py: the transposed LOAD of
    K, GEMMs, the integer Softmax with its XALU DIV, P^T through card memory) on the RTL and the
    model: bit for bit the same memory, scratchpads and counters; and the output within 0.03 x
    max|V| of float attention."""
    import math

    from tb.accel.transformer_cases import head_memory, multi_head_memory

    tb = TB(dut, "slow")
    await tb.reset()
    await tb.clear_scratchpads()
    seq, d = (16, 8) if ICARUS else (32, 16)
    h = head_memory(tb.cfg, np.random.default_rng(5), seq, d, base=0x1000)
    tb.write_both(0x1000, bytes(h.memory[0x1000:]))
    image = isa.encode_program(h.program)
    await tb.run_both(image, PROGRAM_BASE, len(h.program), [0] * isa.NUM_SLOTS,
                      f"attention head seq {seq} d {d}")
    got = h.output(tb.mem.array) * h.out_scale
    s = h.qf @ h.kf.T / math.sqrt(d)
    p = np.exp(s - s.max(1, keepdims=True))
    want = (p / p.sum(1, keepdims=True)) @ h.vf
    err = float(np.abs(got - want).max())
    assert err <= 0.03 * float(np.abs(h.vf).max()), f"attention output off by {err}"
    dut._log.info("attention head seq %d d %d: %d instructions, max error %.4f (max |V| %.3f)",
                  seq, d, len(h.program), err, float(np.abs(h.vf).max()))
    # the second of two heads, reading its slice of wider Q, K, V (one transposed LOAD of K
    # per token block)
    cases, mem = multi_head_memory(tb.cfg, np.random.default_rng(6), seq, 2, d)
    base = 0x8000
    shifted = [isa.Insn(i.op, {**i.fields, "offset": i.fields.get("offset", 0) + base})
               if i.op in (isa.Opcode.LOAD, isa.Opcode.STORE) else i for i in cases[1].program]
    tb.write_both(base, bytes(mem))
    await tb.run_both(isa.encode_program(shifted), PROGRAM_BASE, len(shifted),
                      [0] * isa.NUM_SLOTS, f"head 1 of 2, seq {seq}")


@cocotb.test(timeout_time=4, timeout_unit="sec")
async def test_linear_t(dut) -> None:
    """A linear layer in the transposed layout (compiler/plugins/accel/kernels/linear_t.py:
    weights as input rows, X^T's tiles as weights, bias, per-feature REQ, a tile-major int8
    store) on the RTL and the model, bit for bit, and the accelerator's arithmetic."""
    from tb.accel.transformer_cases import linear_case

    tb = TB(dut, "backpressure")
    await tb.reset()
    await tb.clear_scratchpads()
    tokens, d_in, d_out = (16, 16, 8) if ICARUS else (32, 64, 48)
    c = linear_case(tb.cfg, np.random.default_rng(6), tokens, d_in, d_out, base=0x1000)
    tb.write_both(0x1000, bytes(c.memory[0x1000:]))
    await tb.run_both(isa.encode_program(c.program), PROGRAM_BASE, len(c.program),
                      [0] * isa.NUM_SLOTS, f"linear {tokens} x {d_in} -> {d_out}")
    assert np.array_equal(c.output(tb.mem.array), c.expect)


@cocotb.test(timeout_time=4, timeout_unit="sec")
async def test_layernorm_and_gelu_programs(dut) -> None:
    """LayerNorm's normalization (pyhost/ibert.py i_layernorm_insns: features as rows, five
    XALU rows per token block) and GELU (i_gelu_insns) over accumulator rows loaded from card
    memory, stored back: RTL and model bit for bit, and the model's result the numpy
    sequence's."""
    from pyhost import ibert

    tb = TB(dut, "ideal")
    await tb.reset()
    await tb.clear_scratchpads()
    n = tb.cfg.n
    h, blocks = (16, 1) if ICARUS else (32, 2)
    rng = np.random.default_rng(8)
    tokens = rng.integers(-128, 128, (blocks * n, h)).astype(np.int64)
    rows = tokens.reshape(blocks, n, h).transpose(0, 2, 1).reshape(-1, n).astype("<i4")
    src, dst = 0x2000, 0x8000
    tb.write_both(src, rows.tobytes())
    count = blocks * h
    x, tmp, g_in, g_tmp, g_out = 0, count, 2 * count + 9 * blocks, 3 * count + 9 * blocks, \
        4 * count + 9 * blocks
    prog = [isa.load(Buffer.ACC, sp_base=x, offset=src, y_size=1, x_size=count,
                     y_stride=count),
            isa.load(Buffer.ACC, sp_base=g_in, offset=src, y_size=1, x_size=count,
                     y_stride=count, push_next=1),
            isa.alu(isa.AluOp.ADD, outer=0, inner=0, pop_prev=1)]       # (tokens)
    prog += ibert.i_layernorm_insns(x, h, blocks, tmp, 0.05)
    prog += ibert.i_gelu_insns(g_in, count, g_tmp, g_out, 0.05)
    prog[-1] = isa.Insn(prog[-1].op, {**prog[-1].fields, "push_next": 1})
    prog += [isa.store(Buffer.ACC, sp_base=x, offset=dst, y_size=1, x_size=count,
                       y_stride=count, pop_prev=1, push_prev=1),
             isa.alu(isa.AluOp.ADD, outer=0, inner=0, pop_next=1, push_next=1),
             isa.store(Buffer.ACC, sp_base=g_out, offset=dst + count * 4 * n, y_size=1,
                       x_size=count, y_stride=count, pop_prev=1),
             isa.end()]
    await tb.run_both(isa.encode_program(prog), PROGRAM_BASE, len(prog), [0] * isa.NUM_SLOTS,
                      f"LayerNorm and GELU, {blocks} x {h} rows")
    out = np.frombuffer(bytes(tb.model_mem[dst:dst + 2 * count * 4 * n]), "<i4")
    ln = out[:count * n].reshape(blocks, h, n).transpose(0, 2, 1).reshape(-1, h)
    assert np.array_equal(ln, ibert.i_layernorm(tokens, 0.05)[0])
    assert np.array_equal(out[count * n:], ibert.i_gelu(rows.reshape(-1), 0.05)[0])


@cocotb.test(timeout_time=4, timeout_unit="sec")
async def test_random_programs_ideal(dut) -> None:
    """Constrained-random programs, memory without back-pressure: RTL == model bit for bit."""
    await _random_programs(dut, "ideal", _seeds(100))


@cocotb.test(timeout_time=4, timeout_unit="sec")
async def test_random_programs_slow_out_of_order(dut) -> None:
    """Random programs with long jittered latency and reads returned out of order across the
    fetch and load IDs."""
    await _random_programs(dut, "slow", _seeds(200))


@cocotb.test(timeout_time=4, timeout_unit="sec")
async def test_random_programs_backpressure(dut) -> None:
    """Random programs with back-pressure and idle cycles on AR, R, AW and W."""
    await _random_programs(dut, "backpressure", _seeds(300))


@cocotb.test(timeout_time=1, timeout_unit="sec")
async def test_registers_and_bad_config(dut) -> None:
    """Configuration registers report the parameters, slots hold what is written, and a
    misaligned INSN_BASE or a zero INSN_COUNT stop at once with BAD_CONFIG and an interrupt."""
    tb = TB(dut)
    await tb.reset()
    got = [await tb.rd(n) for n in ("ACC_CFG_N", "ACC_CFG_ISA", "ACC_CFG_INP_DEPTH",
                                    "ACC_CFG_WGT_DEPTH", "ACC_CFG_ACC_DEPTH",
                                    "ACC_CFG_QUEUE_DEPTH")]
    c = tb.cfg
    assert got == [c.n, isa.ISA_VERSION, c.inp_depth, c.wgt_depth, c.acc_depth, c.queue_depth], got
    for i in range(isa.NUM_SLOTS):
        await tb.wr(f"ACC_SLOT{i}", 0x1000_0000 * (i % 8) + 0x40 * i)
    for i in range(isa.NUM_SLOTS):
        v = await tb.rd(f"ACC_SLOT{i}")
        assert v == 0x1000_0000 * (i % 8) + 0x40 * i, f"ACC_SLOT{i} = {v:#x}"
    for base, count in ((PROGRAM_BASE + 8, 1), (PROGRAM_BASE, 0)):
        status, code, _ = await tb.launch(base, count, [0] * isa.NUM_SLOTS)
        assert code == AccelError.BAD_CONFIG, (
            f"base {base:#x} count {count}: {AccelError(code).name}, expected BAD_CONFIG")


@cocotb.test(timeout_time=4, timeout_unit="sec")
async def test_errors(dut) -> None:
    """Every error kind of the random generator stops the RTL with the code and pc the model
    gives (and the generator promises); FETCH_BUS from an injected error; the next program
    after each error runs normally."""
    tb = TB(dut, "slow")
    await tb.reset()
    await tb.clear_scratchpads()
    kinds = randprog.ERROR_KINDS
    for i, kind in enumerate(kinds * (1 if ICARUS else 3)):
        rp = randprog.generate_error(random.Random(1000 + i), tb.cfg, kind, MEM_SIZE)
        for addr, data in rp.init:
            tb.write_both(addr, data)
        (status, code, pc), res = await tb.run_program(rp.image(), rp.insn_base, rp.insn_count,
                                                       rp.slots)
        assert (res.error, res.err_pc) == (rp.expect_error, rp.expect_pc), (
            f"model {res.error.name}@{res.err_pc}, generator promised "
            f"{rp.expect_error.name}@{rp.expect_pc}")
        assert status & 4 and (code, pc) == (int(kind), rp.expect_pc), (
            f"{kind.name}: RTL status {status:#x} {AccelError(code).name}@{pc}, expected "
            f"{kind.name}@{rp.expect_pc}")
    # the instruction fetch itself fails
    prog = isa.encode_program([isa.gemm(outer=1, inner=1)] * 9 + [isa.end()])
    tb.axi.inject_error(PROGRAM_BASE + 64, PROGRAM_BASE + 128)
    tb.write_both(PROGRAM_BASE, prog)
    status, code, pc = await tb.launch(PROGRAM_BASE, 10, [0] * isa.NUM_SLOTS)
    tb.axi.clear_errors()
    assert status & 4 and (code, pc) == (AccelError.FETCH_BUS, 4), (
        f"FETCH_BUS expected at pc 4, got {AccelError(code).name}@{pc}")
    # and the accelerator still works. After an error the ISA leaves card memory unspecified:
    # which instructions started before the stop depends on timing (the model runs each one
    # whole and stops at once; the RTL cuts a running GEMM or DW short and never starts the
    # STORE waiting for its token), so the two memories may differ where the failed programs
    # wrote. Start the last program from the RTL's memory on both sides.
    tb.model_mem[:] = tb.mem.array
    rp = randprog.generate(random.Random(7), tb.cfg, mem_size=PROGRAM_BASE)
    await tb.clear_scratchpads()
    for addr, data in rp.init:
        tb.write_both(addr, data)
    await tb.run_both(rp.image(), rp.insn_base, rp.insn_count, rp.slots, "after the errors")


@cocotb.test(timeout_time=1, timeout_unit="sec")
async def test_abort(dut) -> None:
    """ABORT stops a long program with ABORTED and an interrupt; the accelerator then runs the
    next program correctly."""
    tb = TB(dut)
    await tb.reset()
    await tb.clear_scratchpads()
    long = [isa.gemm(outer=4095, inner=64, acc_si=1)] * 8 + [isa.end()]
    tb.write_both(PROGRAM_BASE, isa.encode_program(long))
    for i, s in enumerate([0] * isa.NUM_SLOTS):
        await tb.wr(f"ACC_SLOT{i}", s)
    await tb.wr("ACC_INSN_BASE", PROGRAM_BASE)
    await tb.wr("ACC_INSN_COUNT", len(long))
    err0 = tb.irq_err
    await tb.wr("ACC_CTRL", 1)
    await ClockCycles(dut.clk, 2000)
    assert (await tb.rd("ACC_STATUS")) & 1, "not busy 2000 cycles into a long program"
    await tb.wr("ACC_CTRL", 2)
    await ClockCycles(dut.clk, 20)
    status = await tb.rd("ACC_STATUS")
    assert tb.irq_err == err0 + 1 and (status >> 8) & 0xFF == AccelError.ABORTED, (
        f"ACC_STATUS {status:#x} after ABORT, error interrupts {tb.irq_err - err0}")
    rp = randprog.generate(random.Random(11), tb.cfg, mem_size=PROGRAM_BASE)
    await tb.clear_scratchpads()
    for addr, data in rp.init:
        tb.write_both(addr, data)
    await tb.run_both(rp.image(), rp.insn_base, rp.insn_count, rp.slots, "after the abort")
