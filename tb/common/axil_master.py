"""BAR0 as an AXI4-Lite master that costs nothing while idle: cocotbext-axi's timing, no watchers.

RtlCard drove BAR0 with cocotbext-axi's ``AxiLiteMaster``. Its channel objects keep coroutines
alive for the whole test: the B and R sinks each wait on RisingEdge of their VALID and READY
forever, and every channel waits on Edge(rst). Each of those is a VPI value-change callback that
the simulator compares after every evaluation, so while the card computes on its own for
millions of cycles the co-simulation paid for five watched signals that never change (about 5 %
of a Verilator model's evaluation time, measured with callgrind).

:class:`AxiLiteBar0` is the same master for one access at a time, written as one coroutine that
awaits clock edges only while an access is in flight. It reproduces the cocotbext-axi master's
timing edge for edge, for the serial accesses a host program makes (tests/tb/test_axil_master.py
runs both on the same accesses and compares every handshake's time and value):

- a call made at time t drives AW and W (or AR) at the first rising clock edge after t (the
  sources sleep while idle and are woken by the access, then await the next edge), with the
  write applied in that time step as cocotb applies writes;
- each VALID drops at the edge where its READY is sampled high (the values before the edge);
- the response is taken at the first rising edge at which the slave's BVALID (RVALID) is
  sampled high, and the call returns in that edge's callback (cocotbext-axi's sink wakes on the
  VALID's rise and samples at the next edge: the same edge);
- BREADY and RREADY are 0 from construction to the first rising edge, then 1 (the sinks' READY
  while not paused); cocotbext-axi also drops them while ``rst`` is high, which the slave cannot
  see: a slave resets its response valids, and READY matters only while one is up;
- the address and data signals start as X (cocotbext-axi's sources initialise them so), AWPROT
  and ARPROT, where present, carry cocotbext-axi's default (non-secure, unprivileged, data).

Unlike cocotbext-axi's master it refuses to hang: an access whose handshake or response does not
come within ``timeout_cycles`` rising edges raises :class:`Bar0Error`, and so does a response
that is not OKAY (cocotbext-axi returned it; RtlCard ignored it). Concurrent calls are served one
after the other (cocotbext-axi's master pipelines up to two, with other timing).
"""

from __future__ import annotations

import cocotb
from cocotb.triggers import Lock, RisingEdge
from cocotb.types import LogicArray

#: AxiProt.NONSECURE: cocotbext-axi's default AWPROT / ARPROT.
PROT_DEFAULT = 0b010
#: Rising edges an access may wait for a handshake or response before it is an error.
TIMEOUT_CYCLES = 100_000
_RESP = {1: "EXOKAY", 2: "SLVERR", 3: "DECERR"}


class Bar0Error(RuntimeError):
    """A BAR0 access that did not complete: no handshake or response in time, or an error
    response."""


class AxiLiteBar0:
    """An AXI4-Lite master on ``<prefix>_*`` of ``dut``, clocked by ``clk``: 32-bit aligned reads
    and writes of whole words (the card's BAR0)."""

    def __init__(self, dut, prefix: str, clk, timeout_cycles: int = TIMEOUT_CYCLES) -> None:
        def sig(name: str, optional: bool = False):
            full = f"{prefix}_{name}"
            if optional and not hasattr(dut, full):
                return None
            return getattr(dut, full)

        self.clk = clk
        self.timeout_cycles = timeout_cycles
        self.awaddr, self.awprot = sig("awaddr"), sig("awprot", True)
        self.awvalid, self.awready = sig("awvalid"), sig("awready")
        self.wdata, self.wstrb = sig("wdata"), sig("wstrb", True)
        self.wvalid, self.wready = sig("wvalid"), sig("wready")
        self.bresp, self.bvalid, self.bready = sig("bresp", True), sig("bvalid"), sig("bready")
        self.araddr, self.arprot = sig("araddr"), sig("arprot", True)
        self.arvalid, self.arready = sig("arvalid"), sig("arready")
        self.rdata, self.rresp = sig("rdata"), sig("rresp", True)
        self.rvalid, self.rready = sig("rvalid"), sig("rready")
        if len(self.wdata) != 32:
            raise ValueError(f"{prefix}_wdata is {len(self.wdata)} bits wide: AxiLiteBar0 "
                             "drives a 32-bit BAR0")
        self.strb = (1 << (len(self.wstrb))) - 1 if self.wstrb is not None else 0
        # initial values as writes of this time step (cocotbext-axi writes them at once; under
        # Icarus a no-delay write to a net then a deposit resolve to X, so the later writes of
        # an access would not be seen: the step's writes come before any edge either way)
        for s in (self.awvalid, self.wvalid, self.arvalid, self.bready, self.rready):
            s.value = 0
        for s in (self.awaddr, self.awprot, self.wdata, self.wstrb, self.araddr, self.arprot):
            if s is not None:
                s.value = LogicArray("X" * len(s))
        self._edge = RisingEdge(clk)
        self._lock = Lock()
        self.reads = 0
        self.writes = 0
        cocotb.start_soon(self._ready_up())

    async def _ready_up(self) -> None:
        await self._edge
        self.bready.value = 1
        self.rready.value = 1

    async def _response(self, valid, what: str) -> None:
        """Wait for the first rising edge at which the response VALID is sampled high."""
        edge = self._edge
        for _ in range(self.timeout_cycles):
            await edge
            if valid.value:
                return
        raise Bar0Error(f"{what}: no response in {self.timeout_cycles} clock cycles")

    @staticmethod
    def _check_resp(resp, what: str) -> None:
        if resp is not None:
            code = int(resp.value)
            if code:
                raise Bar0Error(f"{what}: {_RESP.get(code, code)} response")

    async def write(self, offset: int, value: int) -> None:
        """Write the 32-bit word ``value`` at the aligned byte offset ``offset``."""
        async with self._lock:
            what = f"BAR0 write of {value:#x} to {offset:#x}"
            # the data go out with the VALIDs, at the first edge (as the sources drive them)
            await self._drive_at_next_edge(
                [(self.awaddr, offset), (self.awprot, PROT_DEFAULT), (self.wdata, value),
                 (self.wstrb, self.strb)],
                [(self.awvalid, self.awready), (self.wvalid, self.wready)], what)
            await self._response(self.bvalid, what)
            self._check_resp(self.bresp, what)
            self.writes += 1

    async def read(self, offset: int) -> int:
        """Read the 32-bit word at the aligned byte offset ``offset``."""
        async with self._lock:
            what = f"BAR0 read of {offset:#x}"
            await self._drive_at_next_edge([(self.araddr, offset), (self.arprot, PROT_DEFAULT)],
                                           [(self.arvalid, self.arready)], what)
            await self._response(self.rvalid, what)
            self._check_resp(self.rresp, what)
            self.reads += 1
            return int(self.rdata.value)

    async def _drive_at_next_edge(self, fields: list, pairs: list, what: str) -> None:
        """At the next rising edge drive ``fields`` and raise each (valid, ready) pair's VALID;
        hold each VALID until its READY is sampled high at an edge (then drop it there)."""
        edge = self._edge
        await edge
        for s, v in fields:
            if s is not None:
                s.value = v
        for valid, _ in pairs:
            valid.value = 1
        pending = pairs
        for _ in range(self.timeout_cycles):
            await edge
            left = []
            for valid, ready in pending:
                if ready.value:
                    valid.value = 0
                else:
                    left.append((valid, ready))
            if not left:
                return
            pending = left
        raise Bar0Error(f"{what}: no handshake in {self.timeout_cycles} clock cycles "
                        "(the slave never raised READY)")
