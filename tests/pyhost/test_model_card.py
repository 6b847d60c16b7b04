"""ModelCard through raw BAR0 accesses: register semantics and the DMA contract of docs/dma.md."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from pyhost.backend import MmioError
from pyhost.model_card import IRQ_ALL, ModelCard, irq_done_bit, irq_err_bit, status_word
from pyhost.spec import regs
from pyhost.spec.regs import Access, Channel, DmaError

MiB = 1 << 20
H2C, C2H, C2C = Channel.H2C, Channel.C2H, Channel.C2C
RUN = regs.CH_CTRL_FIELDS[0].mask
RESET = regs.CH_CTRL_FIELDS[1].mask
DONE = status_word(done=True)


def err(code: DmaError) -> int:
    return status_word(error=True, code=code)


class Bench:
    """A small card plus raw chain helpers (no driver involved)."""

    def __init__(self, mem_size: int = 16 * MiB, **kw: int) -> None:
        self.card = ModelCard(mem_size, host_size=8 * MiB, **kw)
        self.host = self.card.host
        self.desc = self.host.alloc(64 * 1024)
        self.wb = self.host.alloc(4096)
        self.data = self.host.alloc(2 * MiB)
        self.rng = np.random.default_rng(0)

    def rd(self, name: str) -> int:
        return self.card.mmio_read(regs.offset(name))

    def wr(self, name: str, v: int) -> None:
        self.card.mmio_write(regs.offset(name), v)

    def chain(self, descs: list[tuple[int, int, int]], *, completed: bool = True,
              stop: bool = True, **kw: int) -> int:
        """Lay out (length, src, dst) descriptors linked in order; return the first address."""
        a = self.desc.address
        for i, (n, s, d) in enumerate(descs):
            last = i == len(descs) - 1
            self.host.write(a + 32 * i, regs.encode_descriptor(
                n, s, d, nxt=a + 32 * (i + 1), stop=stop and last,
                completed=completed and last, **kw))
        return a

    def run(self, ch: Channel, first: int, wb: bool = True) -> None:
        for reg, v in (("DESC_LO", first & 0xFFFF_FFFF), ("DESC_HI", first >> 32),
                       ("WB_LO", self.wb.address & 0xFFFF_FFFF if wb else 0),
                       ("WB_HI", self.wb.address >> 32 if wb else 0)):
            self.card.mmio_write(regs.channel_reg(ch, reg), v)
        self.wb.view(0, 8)[:] = 0
        self.card.mmio_write(regs.channel_reg(ch, "CTRL"), RUN)

    def status(self, ch: Channel) -> tuple[int, int]:
        return (self.card.mmio_read(regs.channel_reg(ch, "STATUS")),
                self.card.mmio_read(regs.channel_reg(ch, "COMPLETED")))

    def writeback(self) -> tuple[int, int]:
        return struct.unpack(regs.WB_FORMAT, self.wb.read(0, 8))


@pytest.fixture
def b() -> Bench:
    return Bench()


# --- registers ----------------------------------------------------------------------------------

DYNAMIC = {"MEM_SIZE_LO", "MEM_SIZE_HI", "BUS_WIDTH", "CAPS", "ACC_CFG_N", "ACC_CFG_ISA",
           "ACC_CFG_INP_DEPTH", "ACC_CFG_WGT_DEPTH", "ACC_CFG_ACC_DEPTH", "ACC_CFG_QUEUE_DEPTH"}


def test_reset_values(b: Bench) -> None:
    """Every register reads its spec reset value; the parameters read what the card was built
    with (MEM_SIZE, BUS_WIDTH 512, CAPS = 3 channels, 32 tags, the accelerator)."""
    for r in regs.REGISTERS:
        if r.name not in DYNAMIC:
            assert b.card.mmio_read(r.offset) == r.reset, r.name
    card = ModelCard(0x1_2345_6000, host_size=4096)
    assert card.mmio_read(regs.offset("MEM_SIZE_LO")) == 0x2345_6000
    assert card.mmio_read(regs.offset("MEM_SIZE_HI")) == 1
    assert ModelCard().mmio_read(regs.offset("MEM_SIZE_LO")) == 1 << 30   # the 1 GiB default
    assert b.rd("BUS_WIDTH") == 512
    caps = {f.name: f for f in regs.BY_NAME["CAPS"].fields}
    v = b.rd("CAPS")
    assert (v & caps["CHANNELS"].mask) >> caps["CHANNELS"].lsb == 3
    assert (v & caps["TAGS"].mask) >> caps["TAGS"].lsb == regs.MAX_TAGS
    assert v & caps["ACCEL"].mask
    assert not ModelCard(accel=None).mmio_read(regs.offset("CAPS")) & caps["ACCEL"].mask


def test_card_memory_is_lazy() -> None:
    """A 1 GiB card costs nothing until DMA touches its memory; then it reads zero."""
    card = ModelCard()
    assert card._mem is None
    assert card.card_memory.size == 1 << 30 and card.card_memory[-1] == 0


def test_read_only_registers_ignore_writes(b: Bench) -> None:
    """Writes to RO registers change nothing; WO (CTRL) registers read 0."""
    before = {r.name: b.card.mmio_read(r.offset) for r in regs.REGISTERS}
    for r in regs.REGISTERS:
        if r.access == Access.RO:
            b.card.mmio_write(r.offset, 0xFFFF_FFFF)
    for r in regs.REGISTERS:
        if r.access == Access.RO:
            assert b.card.mmio_read(r.offset) == before[r.name], r.name
        if r.access == Access.WO:
            b.card.mmio_write(r.offset, 0)
            assert b.card.mmio_read(r.offset) == 0, r.name


def test_read_write_registers(b: Bench) -> None:
    """RW registers hold 32 bits; IRQ_MASK holds only the defined interrupt bits."""
    for r in regs.REGISTERS:
        if r.access != Access.RW:
            continue
        for v in (0xFFFF_FFFF, 0x1234_5678, 0):
            b.card.mmio_write(r.offset, v)
            want = v & IRQ_ALL if r.name == "IRQ_MASK" else v
            assert b.card.mmio_read(r.offset) == want, f"{r.name} after {v:#x}"


def test_unknown_offsets(b: Bench) -> None:
    """Offsets without a register read 0 and ignore writes; bad offsets and values raise."""
    used = {r.offset for r in regs.REGISTERS}
    for off in range(0, regs.BAR0_SIZE, 4):
        if off not in used:
            b.card.mmio_write(off, 0xFFFF_FFFF)
            assert b.card.mmio_read(off) == 0, hex(off)
    assert b.rd("SCRATCH") == 0 and b.rd("IRQ_STATUS") == 0
    for off in (2, regs.BAR0_SIZE, -4):
        with pytest.raises(MmioError):
            b.card.mmio_read(off)
    with pytest.raises(MmioError):
        b.card.mmio_write(0x14, 1 << 32)


def test_irq_status_w1c_and_line(b: Bench) -> None:
    """IRQ_STATUS bits are set by the engine, cleared only by writing 1; the line is
    IRQ_STATUS & IRQ_MASK."""
    src = b.data.address
    for ch in (H2C, C2C):
        s = src if ch == H2C else 0
        b.run(ch, b.chain([(16, s, 0x100)]))
    want = irq_done_bit(H2C) | irq_done_bit(C2C)
    assert b.rd("IRQ_STATUS") == want
    assert not b.card.irq and not b.card.wait_irq(0.0)        # masked
    b.wr("IRQ_MASK", irq_done_bit(H2C))
    assert b.card.irq and b.card.wait_irq(0.0)
    b.wr("IRQ_STATUS", 0)                                      # writing 0 clears nothing
    b.wr("IRQ_STATUS", irq_done_bit(C2C))                      # clears only C2C
    assert b.rd("IRQ_STATUS") == irq_done_bit(H2C) and b.card.irq
    b.wr("IRQ_MASK", irq_done_bit(C2C))
    assert not b.card.irq
    b.wr("IRQ_MASK", IRQ_ALL)
    b.wr("IRQ_STATUS", 0xFFFF_FFFF)
    assert b.rd("IRQ_STATUS") == 0 and not b.card.irq


# --- DMA ----------------------------------------------------------------------------------------

def test_chain_runs_and_counts(b: Bench) -> None:
    """A 3-descriptor H2C chain: data, STATUS, COMPLETED, write-back, counters, DONE interrupt;
    then C2H and C2C move it back."""
    data = b.rng.integers(0, 256, 5000, dtype=np.uint8)
    b.data.view(0, 5000)[:] = data
    first = b.chain([(1000, b.data.address, 64), (3000, b.data.address + 1000, 8192 + 3),
                     (1000, b.data.address + 4000, 5 * MiB)])
    b.run(H2C, first)
    assert b.status(H2C) == (DONE, 3) and b.writeback() == (3, DONE)
    assert b.rd("IRQ_STATUS") == irq_done_bit(H2C)
    mem = b.card.card_memory
    assert (mem[64:1064] == data[:1000]).all() and (mem[8195:11195] == data[1000:4000]).all()
    assert (mem[5 * MiB:5 * MiB + 1000] == data[4000:]).all()
    assert mem[63] == 0 and mem[1064] == 0 and mem[8194] == 0 and mem[11195] == 0
    assert (b.rd("H2C_BYTES_LO"), b.rd("H2C_DESCS")) == (5000, 3)
    # 64-byte lines: [64,1064) lines 1..16, [8195,11195) lines 128..174, [5 MiB, +1000) 16.
    assert (b.rd("DRAM_WR_LO"), b.rd("DRAM_RD_LO")) == (16 + 47 + 16, 0)
    for name in regs.DRAM_COUNTERS[2:]:
        assert b.rd(f"DRAM_{name.upper()}_LO") == 0

    b.run(C2C, b.chain([(3000, 8195, 100_000)]))
    out = b.data.address + MiB
    b.run(C2H, b.chain([(3000, 100_000, out + 7)], completed=False))
    assert b.status(C2H) == (DONE, 1)
    assert b.rd("IRQ_STATUS") & irq_done_bit(C2H) == 0, "DONE irq without a COMPLETED descriptor"
    assert b.host.read(out + 7, 3000) == data[1000:4000].tobytes()
    assert b.host.read(out + 6, 1) == b"\0" and b.host.read(out + 3007, 1) == b"\0"
    # C2C source [8195, 11195): 47 lines; C2H source [100000, 103000): lines 1562..1609.
    assert b.rd("DRAM_RD_LO") == 47 + 48
    assert b.rd("DRAM_WR_LO") == 79 + 48      # + C2C destination [100000, 103000)


def test_counters_are_64_bit() -> None:
    """BYTES carries past 2^32 into the HI register."""
    b = Bench(mem_size=8 * MiB)
    b.run(H2C, b.chain([(2 * MiB, b.data.address, 0)] * 2047 + [(2 * MiB + 5, 0, 0)]))
    assert b.status(H2C) == (err(DmaError.SRC_READ), 2047)
    b.run(H2C, b.chain([(2 * MiB, b.data.address, 0)] + [(5, b.data.address, 0)]))
    assert b.status(H2C) == (DONE, 2)
    total = 2048 * 2 * MiB + 5
    assert (b.rd("H2C_BYTES_HI"), b.rd("H2C_BYTES_LO")) == (total >> 32, total & 0xFFFF_FFFF)


def test_next_ignored_after_stop_and_no_writeback(b: Bench) -> None:
    """STOP ends the chain whatever `next` says; WB address 0 means no write-back."""
    first = b.chain([(8, b.data.address, 0)])
    b.host.write(first, regs.encode_descriptor(8, b.data.address, 0, nxt=0xDEAD_0000,
                                               stop=True, completed=True))
    b.wb.view(0, 8)[:] = 0xEE
    b.card.mmio_write(regs.channel_reg(H2C, "WB_LO"), 0)
    b.card.mmio_write(regs.channel_reg(H2C, "DESC_LO"), first & 0xFFFF_FFFF)
    b.card.mmio_write(regs.channel_reg(H2C, "DESC_HI"), first >> 32)
    b.card.mmio_write(regs.channel_reg(H2C, "CTRL"), RUN)
    assert b.status(H2C) == (DONE, 1)
    assert b.wb.read(0, 8) == b"\xee" * 8


@pytest.mark.parametrize("reg,value", [("DMA_MPS", 64), ("DMA_MPS", 8192), ("DMA_MPS", 384),
                                       ("DMA_MRRS", 0), ("DMA_MRRS", 4097), ("DMA_TAGS", 0),
                                       ("DMA_TAGS", 33)])
def test_bad_config(b: Bench, reg: str, value: int) -> None:
    """Out-of-range MPS / MRRS / TAGS stop the chain at start: BAD_CONFIG, COMPLETED 0,
    write-back, ERR interrupt, no data moved."""
    b.wr(reg, value)
    b.data.view(0, 16)[:] = 7
    b.run(H2C, b.chain([(16, b.data.address, 0)]))
    assert b.status(H2C) == (err(DmaError.BAD_CONFIG), 0)
    assert b.writeback() == (0, err(DmaError.BAD_CONFIG))
    assert b.rd("IRQ_STATUS") == irq_err_bit(H2C)
    assert b.card.card_memory[0] == 0


@pytest.mark.parametrize("mps,mrrs,tags", [(128, 128, 1), (4096, 4096, 32), (256, 2048, 17)])
def test_good_config_limits(b: Bench, mps: int, mrrs: int, tags: int) -> None:
    b.wr("DMA_MPS", mps)
    b.wr("DMA_MRRS", mrrs)
    b.wr("DMA_TAGS", tags)
    b.run(C2H, b.chain([(16, 0, b.data.address)]))
    assert b.status(C2H) == (DONE, 1)


def _bad_chain(b: Bench, ch: Channel, bad: tuple[int, int, int]) -> int:
    """good, bad, good on channel ch; return the first descriptor address."""
    if ch == H2C:
        good = (64, b.data.address, 0x1000)
    elif ch == C2H:
        good = (64, 0x1000, b.data.address + 0x1000)
    else:
        good = (64, 0x1000, 0x2000)
    return b.chain([good, bad, good])


TOP = 16 * MiB


@pytest.mark.parametrize("ch,bad,code", [
    (H2C, (64, 0, TOP - 63), DmaError.DST_WRITE),
    (H2C, (64, 0, TOP), DmaError.DST_WRITE),
    (H2C, (64, 0, (1 << 64) - 32), DmaError.DST_WRITE),
    (H2C, (64, 0x1000, 0), DmaError.SRC_READ),                      # below host memory
    (C2H, (64, TOP - 1, 0), DmaError.SRC_READ),
    (C2H, (64, 0, 0x1000), DmaError.DST_WRITE),
    (C2C, (64, TOP - 32, 0), DmaError.SRC_READ),
    (C2C, (64, 0, TOP - 32), DmaError.DST_WRITE),
])
def test_range_errors(b: Bench, ch: Channel, bad: tuple[int, int, int], code: DmaError) -> None:
    """A source or destination byte outside memory stops the chain at that descriptor."""
    n, s, d = bad
    if ch == H2C and s == 0:
        s = b.data.address
    if ch == C2H and d == 0:
        d = b.data.address
    b.run(ch, _bad_chain(b, ch, (n, s, d)))
    assert b.status(ch) == (err(code), 1)
    assert b.writeback() == (1, err(code))
    assert b.rd("IRQ_STATUS") == irq_err_bit(ch)
    assert b.card.mmio_read(regs.channel_reg(ch, "DESCS")) == 1


def test_range_edges_pass(b: Bench) -> None:
    """The last bytes of card and host memory are reachable."""
    b.run(H2C, b.chain([(64, b.host.end - 64, TOP - 64)]))
    assert b.status(H2C) == (DONE, 1)


@pytest.mark.parametrize("kind", ["magic", "zero", "desc_read"])
def test_descriptor_errors(b: Bench, kind: str) -> None:
    """BAD_MAGIC, ZERO_LENGTH, DESC_READ at descriptor 1: descriptor 0 complete, 2 untouched."""
    b.data.view(0, 64)[:] = 0xAB
    first = b.chain([(64, b.data.address, 0), (64, b.data.address, 0x100),
                     (64, b.data.address, 0x200)])
    if kind == "magic":
        b.host.write(first + 32, regs.encode_descriptor(64, b.data.address, 0x100,
                                                        nxt=first + 64, magic=0xAD4C))
        code = DmaError.BAD_MAGIC
    elif kind == "zero":
        b.host.write(first + 32, regs.encode_descriptor(0, b.data.address, 0x100, nxt=first + 64))
        code = DmaError.ZERO_LENGTH
    else:
        b.host.write(first, regs.encode_descriptor(64, b.data.address, 0, nxt=b.host.end - 16))
        code = DmaError.DESC_READ
    b.run(H2C, first)
    assert b.status(H2C) == (err(code), 1)
    mem = b.card.card_memory
    assert (mem[:64] == 0xAB).all() and (mem[64:0x300] == 0).all()


def test_injected_host_errors(b: Bench) -> None:
    """inject_host_error makes DMA accesses overlapping the range fail; CPU accesses work."""
    src = b.data.address
    b.card.inject_host_error(src + 100, src + 101)
    b.run(H2C, b.chain([(100, src, 0), (1, src + 100, 0)]))
    assert b.status(H2C) == (err(DmaError.SRC_READ), 1)
    b.host.write(src + 100, b"x")            # the CPU side is not affected
    b.card.clear_host_errors()
    b.run(H2C, b.chain([(100, src, 0), (1, src + 100, 0)]))
    assert b.status(H2C) == (DONE, 2)
    b.card.inject_host_error(b.desc.address + 40, b.desc.address + 41)
    b.run(C2H, b.chain([(1, 0, src), (1, 0, src)]))
    assert b.status(C2H) == (err(DmaError.DESC_READ), 1)
    b.card.clear_host_errors()
    b.card.inject_host_error(src + 4, src + 5)
    b.run(C2H, b.chain([(4, 0, src), (4, 0, src + 4)]))
    assert b.status(C2H) == (err(DmaError.DST_WRITE), 1)
    b.card.clear_host_errors()
    with pytest.raises(ValueError):
        b.card.inject_host_error(5, 5)


def test_status_write_error(b: Bench) -> None:
    """A failed write-back after a good chain: STATUS_WRITE, all descriptors counted, ERR irq
    and no DONE irq. After an error, a failed write-back keeps the original code."""
    b.card.inject_host_error(b.wb.address + 7, b.wb.address + 8)
    b.run(H2C, b.chain([(8, b.data.address, 0)] * 2))
    assert b.status(H2C) == (err(DmaError.STATUS_WRITE), 2)
    assert b.rd("IRQ_STATUS") == irq_err_bit(H2C)
    assert b.writeback() == (0, 0)
    b.run(H2C, b.chain([(0, b.data.address, 0)]))
    assert b.status(H2C) == (err(DmaError.ZERO_LENGTH), 0)


def test_reset_idle_and_abort(b: Bench) -> None:
    """RESET of an idle channel drops its last status; RESET of a running (looping) chain gives
    ERROR + ABORTED, the ERR interrupt and no write-back; RUN while BUSY is ignored; while one
    chain holds the data mover another channel's chain waits, then runs after the abort."""
    b.run(C2H, b.chain([(8, 0, b.data.address)]))
    b.card.mmio_write(regs.channel_reg(C2H, "CTRL"), RESET)
    assert b.status(C2H) == (0, 0)
    b.wr("IRQ_STATUS", IRQ_ALL)

    loop = b.desc.address + 4096
    b.host.write(loop, regs.encode_descriptor(8, b.data.address, 0, nxt=loop))
    b.run(H2C, loop)
    assert b.status(H2C) == (status_word(busy=True), 1)
    assert b.rd("IRQ_STATUS") == 0 and b.writeback() == (0, 0)
    b.run(H2C, b.chain([(8, b.data.address, 0)]))                 # ignored: busy
    b.run(C2C, b.chain([(8, 0, 64)]))                             # waits for the mover
    assert b.status(C2C) == (status_word(busy=True), 0)
    b.card.mmio_write(regs.channel_reg(H2C, "CTRL"), RESET | RUN)
    assert b.status(H2C) == (err(DmaError.ABORTED), 1)
    assert b.writeback() == (1, DONE), "the aborted chain wrote back (only C2C may)"
    assert b.rd("IRQ_STATUS") == irq_err_bit(H2C) | irq_done_bit(C2C)
    assert b.status(C2C) == (DONE, 1)
    b.run(H2C, b.chain([(8, b.data.address, 0)]))
    assert b.status(H2C) == (DONE, 1)


def test_waiting_channel_reset_aborts(b: Bench) -> None:
    """A channel waiting for the mover is busy: RESET aborts it too."""
    loop = b.desc.address + 4096
    b.host.write(loop, regs.encode_descriptor(8, b.data.address, 0, nxt=loop))
    b.run(H2C, loop)
    b.run(C2H, b.chain([(8, 0, b.data.address)]))
    b.card.mmio_write(regs.channel_reg(C2H, "CTRL"), RESET)
    assert b.status(C2H) == (err(DmaError.ABORTED), 0)
    b.card.mmio_write(regs.channel_reg(H2C, "CTRL"), RESET)
    assert b.status(C2H) == (err(DmaError.ABORTED), 0), "an aborted waiter ran later"


def test_c2c_overlap_is_memmove(b: Bench) -> None:
    mem = b.card.card_memory
    mem[:1000] = np.arange(1000) % 251
    ref = mem[:1000].copy()
    b.run(C2C, b.chain([(900, 0, 100)]))
    assert (mem[100:1000] == ref[:900]).all()
    b.run(C2C, b.chain([(900, 100, 0)]))
    assert (mem[:900] == ref[:900]).all()


def test_gigabyte_transfer() -> None:
    """1 GiB of card memory filled and read back in 256 MiB descriptors (numpy copies)."""
    card = ModelCard(1 << 30, host_size=256 * MiB + 64 * 1024)
    data = card.host.alloc(256 * MiB)
    data.view()[::4096] = np.arange(65536) % 256
    desc = card.host.alloc(4096)
    for i in range(4):
        card.host.write(desc.address + 32 * i, regs.encode_descriptor(
            256 * MiB, data.address, i * 256 * MiB, nxt=desc.address + 32 * (i + 1), stop=i == 3))
    card.mmio_write(regs.channel_reg(H2C, "DESC_LO"), desc.address & 0xFFFF_FFFF)
    card.mmio_write(regs.channel_reg(H2C, "DESC_HI"), desc.address >> 32)
    card.mmio_write(regs.channel_reg(H2C, "CTRL"), RUN)
    assert card.mmio_read(regs.channel_reg(H2C, "COMPLETED")) == 4
    assert (card.card_memory[(3 << 28) + 4096 * 7] == 7)
    data.view()[:] = 0
    card.mmio_write(regs.channel_reg(C2H, "DESC_LO"), desc.address & 0xFFFF_FFFF)
    card.mmio_write(regs.channel_reg(C2H, "DESC_HI"), desc.address >> 32)
    card.host.write(desc.address, regs.encode_descriptor(256 * MiB, 1 << 28, data.address,
                                                         stop=True))
    card.mmio_write(regs.channel_reg(C2H, "CTRL"), RUN)
    assert (data.view()[::4096] == np.arange(65536) % 256).all()


def test_reset_restores_everything(b: Bench) -> None:
    b.wr("SCRATCH", 5)
    b.wr("IRQ_MASK", 3)
    b.run(H2C, b.chain([(8, b.data.address, 0)]))
    b.card.reset()
    for r in regs.REGISTERS:
        if r.name not in DYNAMIC:
            assert b.card.mmio_read(r.offset) == r.reset, r.name
