"""BAR0 as an AXI4-Lite master that costs nothing while idle: cocotbext-axi's timing, no watchers.

RtlCard drove BAR0 with cocotbext-axi's ``AxiLiteMaster``. Its channel objects keep coroutines
alive for the whole test: the B and R sinks each wait on RisingEdge of their VALID and READY
forever, and every channel waits on Edge(rst). Each of those is a VPI value-change callback that
the simulator compares after every evaluation, so while the card computes on its own for
millions of cycles the co-simulation paid for five watched signals that never change (about 5 %
of a Verilator model's evaluation time, measured with callgrind).

:class:`AxiLiteBar0` is the same master for one access at a time, written as one coroutine that
awaits clock edges only while an access is in flight. It reproduces the cocotbext-axi master's
timing edge for edge, for the serial accesses a host program makes (tests/rtl/test_card_bar0.py
runs both on the same accesses and compares the bus at every edge and every access's times and
values):

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

Reset (``rst``, when given): an access called while it is high starts at the first edge after
its release, as cocotbext-axi's sources restart then; one in flight when it rises raises
:class:`Bar0Error` (cocotbext-axi flushed it, and a read then returned nothing). rst is only
sampled at the edges of an access, never watched.

Unlike cocotbext-axi's master it refuses to hang: an access whose handshake or response does not
come within ``timeout_cycles`` rising edges raises :class:`Bar0Error`, and so do a response that
is not OKAY (cocotbext-axi returned it; RtlCard ignored it) and a READY or VALID that is X. Its
VALIDs are dropped whatever ends it (an error, or the caller's task cancelled). After a timeout
or an X the bus is in an unknown state (a late response would be taken for the next access's),
so every later access is refused with the reason. Concurrent calls are served one after the
other (cocotbext-axi's master pipelines up to two, with other timing).
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

    def __init__(self, dut, prefix: str, clk, rst=None,
                 timeout_cycles: int = TIMEOUT_CYCLES) -> None:
        def sig(name: str, optional: bool = False):
            full = f"{prefix}_{name}"
            if optional and not hasattr(dut, full):
                return None
            return getattr(dut, full)

        self.rst = rst
        self.timeout_cycles = timeout_cycles
        self._failed: str | None = None     # why an earlier access left the bus unknown
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
        cocotb.start_soon(self._ready_up())

    async def _ready_up(self) -> None:
        await self._edge
        self.bready.value = 1
        self.rready.value = 1

    def _in_reset(self) -> bool:
        return self.rst is not None and str(self.rst.value) == "1"

    def _bit(self, sig, what: str) -> bool:
        v = sig.value
        try:
            return bool(v)
        except ValueError:
            self._failed = f"{sig._name} was {v}"
            raise Bar0Error(f"{what}: {sig._name} is {v}, neither 0 nor 1") from None

    async def write(self, offset: int, value: int) -> None:
        """Write the 32-bit word ``value`` at the aligned byte offset ``offset``."""
        await self._access(f"BAR0 write of {value:#x} to {offset:#x}",
                           [(self.awaddr, offset), (self.awprot, PROT_DEFAULT),
                            (self.wdata, value), (self.wstrb, self.strb)],
                           [(self.awvalid, self.awready), (self.wvalid, self.wready)],
                           self.bvalid, self.bresp)

    async def read(self, offset: int) -> int:
        """Read the 32-bit word at the aligned byte offset ``offset``."""
        await self._access(f"BAR0 read of {offset:#x}",
                           [(self.araddr, offset), (self.arprot, PROT_DEFAULT)],
                           [(self.arvalid, self.arready)], self.rvalid, self.rresp)
        return int(self.rdata.value)

    async def _access(self, what: str, fields: list, pairs: list, resp_valid, resp) -> None:
        """One access: at the first rising edge at which ``rst`` is not sampled high, drive
        ``fields`` and raise each (valid, ready) pair's VALID; drop each VALID at the edge its
        READY is sampled high; then wait for the first edge at which ``resp_valid`` is sampled
        high. Every wait is bounded by ``timeout_cycles`` edges."""
        async with self._lock:
            if self._failed is not None:
                raise Bar0Error(
                    f"{what}: refused, because an earlier access failed ({self._failed}): a "
                    "response that comes late would be taken for another access's; reset the "
                    "card and build a new RtlCard")
            edge, limit = self._edge, self.timeout_cycles
            up: list = []
            try:
                # cocotbext-axi's sources do not run while rst is high, and start at the first
                # edge after its release: so does the access
                for _ in range(limit + 1):
                    await edge
                    if not self._in_reset():
                        break
                else:
                    raise Bar0Error(f"{what}: rst held high for {limit} clock cycles")
                for sig, v in fields:
                    if sig is not None:
                        sig.value = v
                for valid, _ in pairs:
                    valid.value = 1
                up = list(pairs)
                for _ in range(limit):
                    await edge
                    self._no_reset(what)
                    left = []
                    for valid, ready in up:
                        if self._bit(ready, what):
                            valid.value = 0
                        else:
                            left.append((valid, ready))
                    up = left
                    if not up:
                        break
                else:
                    self._failed = "no handshake"
                    raise Bar0Error(f"{what}: no handshake in {limit} clock cycles (the slave "
                                    "never raised READY)")
                for _ in range(limit):
                    await edge
                    self._no_reset(what)
                    if self._bit(resp_valid, what):
                        break
                else:
                    self._failed = "no response"
                    raise Bar0Error(f"{what}: no response in {limit} clock cycles")
                if resp is not None:
                    code = int(resp.value)
                    if code:
                        raise Bar0Error(f"{what}: {_RESP.get(code, code)} response")
            except BaseException:               # an error, or the calling task cancelled
                for valid, _ in up:             # no VALID left up for the slave to take later
                    valid.value = 0
                raise

    def _no_reset(self, what: str) -> None:
        if self._in_reset():
            raise Bar0Error(f"{what}: rst rose during the access (the slave dropped it; "
                            "cocotbext-axi's master flushed such an access without an error)")
