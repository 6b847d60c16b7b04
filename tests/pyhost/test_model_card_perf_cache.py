"""ModelCard keeps the performance estimate of each program it ran (a model runs the same
program every inference): a program run again, at another address, reports exactly what a
fresh card reports for it; another place in the first beat, or other bytes, is estimated
again."""

from __future__ import annotations

import random

import numpy as np

from pyhost.model_card import ModelCard
from pyhost.spec import isa, regs
from pyhost.spec.accel import AccelConfig
from tb.accel import randprog

MEM = 1 << 20


def _start(card: ModelCard, base: int, count: int, slots: list[int]) -> dict[str, int]:
    card.mmio_write(regs.offset("ACC_INSN_BASE"), base)
    card.mmio_write(regs.offset("ACC_INSN_COUNT"), count)
    for i, s in enumerate(slots):
        card.mmio_write(regs.offset(f"ACC_SLOT{i}"), s)
    start = next(f for f in regs.BY_NAME["ACC_CTRL"].fields if f.name == "START")
    card.mmio_write(regs.offset("ACC_CTRL"), start.mask)
    return {c: card.mmio_read(regs.offset(f"ACC_{c.upper()}_LO"))
            | (card.mmio_read(regs.offset(f"ACC_{c.upper()}_HI")) << 32)
            for c, _ in regs.ACCEL_COUNTERS}


def test_a_program_run_again_reports_what_a_fresh_card_does() -> None:
    cfg = AccelConfig()
    rp = randprog.generate(random.Random(3), cfg, mem_size=1 << 18, n_insns=120)
    image = np.frombuffer(rp.memory(1 << 18), np.uint8)
    prog = image[rp.insn_base:rp.insn_base + 16 * rp.insn_count]
    other = [rp.insn_base, (1 << 19) + 64 * 3 + rp.insn_base % 64,   # same place in the beat
             (1 << 19) + 64 * 40 + (rp.insn_base + 16) % 64]          # another
    card = ModelCard(MEM)
    got = []
    for base in other:
        card.card_memory[:image.size] = image
        card.card_memory[base:base + prog.size] = prog
        got.append(_start(card, base, rp.insn_count, rp.slots))
        fresh = ModelCard(MEM)
        fresh.card_memory[:image.size] = image
        fresh.card_memory[base:base + prog.size] = prog
        assert got[-1] == _start(fresh, base, rp.insn_count, rp.slots), base
    assert got[0]["insns"] == rp.insn_count and got[0]["cycles"] > 0
    assert len(card._perf_cache) == 2
    # other bytes at the same address: estimated again
    card.card_memory[:image.size] = image
    end = isa.encode(isa.end())
    short = np.concatenate([prog[:16 * 40], np.frombuffer(end, np.uint8)])
    card.card_memory[rp.insn_base:rp.insn_base + short.size] = short
    fresh = ModelCard(MEM)
    fresh.card_memory[:image.size] = image
    fresh.card_memory[rp.insn_base:rp.insn_base + short.size] = short
    again = _start(card, rp.insn_base, 41, rp.slots)
    assert again == _start(fresh, rp.insn_base, 41, rp.slots)
    assert again["insns"] == 41 and again["cycles"] < got[0]["cycles"]
    assert len(card._perf_cache) == 3
