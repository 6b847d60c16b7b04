"""The functional card's performance model: estimated cycles of every DMA chain and accelerator
run, and the card's estimated clock.

`ModelCard` (pyhost/model_card.py) runs chains and programs at numpy speed with no notion of
time; `CardTiming` gives each of them the cycles the RTL card (card_top, 400 MHz) would take:

- an accelerator run: `pyhost.accel.timing.perf_estimate` on its instruction stream (fetch
  bursts, queues, token chains, every unit's start, memory latency and write responses),
  calibrated against card_top under Verilator;
- a DMA chain, doorbell to interrupt: `dma_cycles`: a fixed start (the first descriptor
  fetch and the first data after the host's read latency, the status write-back and the
  interrupt), the data at one 64-byte beat per cycle (the host port and the DRAM bus both move
  25.6 GB/s), a card-to-card copy reading and writing the card memory (two beats per 64 bytes),
  and the DRAM refresh that long transfers cannot postpone (tRFC / tREFI of the time beyond the
  postponement window). Calibrated on the DMA benchmark's RTL figures (README "The DMA engine:
  figures": doorbell to interrupt of single transfers, 4 KiB to 4 MiB, host reads answered
  after 500 ns), within 1 % of each.

The model's own counters (AccelModel's ``cycles``) stay what they were; ModelCard reports the
estimate in ACC_CYCLES and the units' busy/stall counters (docs/perf-model.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyhost.spec.accel import BEAT_BYTES
from pyhost.spec.regs import Channel

#: Beat of the card's data bus and of the host port (bytes per cycle): the card's AXI data bus
#: (pyhost.spec.accel.DATA_WIDTH), which the DMA engine's ports share.
BEAT = BEAT_BYTES


@dataclass(frozen=True)
class DmaParams:
    """DMA chain timing (cycles of 2.5 ns)."""

    #: Doorbell to interrupt of a chain apart from its data: descriptor fetch (one host read
    #: latency), the first data's latency, the status write-back and the interrupt.
    start: int = 450
    #: Extra cycles per descriptor after the first (the engine fetches descriptors in blocks
    #: and overlaps them with data: only the block fetches that are not hidden cost).
    per_descriptor: int = 4
    #: Data cycles a transfer can run before refresh, which it can otherwise postpone, costs.
    refresh_window: int = 6000
    #: Fraction of the data time refresh takes beyond the window (tRFC / tREFI with the
    #: controller's overheads).
    refresh_cost: float = 0.055


DMA_PARAMS = DmaParams()


def dma_cycles(channel: Channel, nbytes: int, descriptors: int = 1,
               p: DmaParams = DMA_PARAMS) -> int:
    """Estimated doorbell-to-interrupt cycles of a chain moving ``nbytes`` in ``descriptors``."""
    beats = -(-nbytes // BEAT)
    data = beats * (2 if channel == Channel.C2C else 1)
    refresh = p.refresh_cost * max(0, data - p.refresh_window)
    return int(p.start + p.per_descriptor * max(0, descriptors - 1) + data + refresh + 0.5)


@dataclass
class TimingEvent:
    """One estimated operation of the card."""

    kind: str           # "H2C", "C2H", "C2C" or "ACCEL"
    cycles: int
    nbytes: int = 0
    descriptors: int = 0


@dataclass
class CardTiming:
    """The card's estimated clock: every chain and accelerator run, one after the other (the
    host waits for each before the next, as the runtime does)."""

    events: list[TimingEvent] = field(default_factory=list)
    cycles: int = 0

    def add(self, ev: TimingEvent) -> None:
        self.events.append(ev)
        self.cycles += ev.cycles

    def totals(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for ev in self.events:
            out[f"{ev.kind.lower()}_cycles"] = out.get(f"{ev.kind.lower()}_cycles", 0) + ev.cycles
        return out
