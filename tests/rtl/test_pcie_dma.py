"""RTL regression for pcie_dma on its own (no csr, no DRAM timing), on each simulator."""

from __future__ import annotations

import pytest

from tb.common import simulator


@pytest.mark.rtl
def test_pcie_dma(sim: str) -> None:
    """The pcie_dma bench passes."""
    res = simulator.run(sim, "pcie_dma", simulator.rtl_sources("pcie_dma"),
                        "tb.pcie_dma.test_pcie_dma")
    assert res.tests == 3


@pytest.mark.rtl
def test_pcie_dma_clock_gate_in_lockstep(sim: str) -> None:
    """The DMA bench on the gated pcie_dma and its ungated twin side by side: every output of
    the two is the same in every cycle (the lockstep top stops the run at the first difference),
    so the clock gate changes nothing the DMA does."""
    from tb.pcie_dma import lockstep

    top = lockstep.write_lockstep_top(simulator.BUILD_ROOT / "generated")
    res = simulator.run(sim, lockstep.TOP, [*simulator.rtl_sources("pcie_dma"), top],
                        "tb.pcie_dma.test_pcie_dma", run_name="lockstep")
    assert res.tests == 3


@pytest.mark.rtl
def test_pcie_dma_waves_of_chosen_scopes(sim: str) -> None:
    """An FST limited to chosen scopes (what make sim records by default) records each of them
    and nothing else of the design: every signal of the bench's GTKWave save file is in it."""
    from tb.common import waves

    if sim != "verilator":
        pytest.skip("Icarus records the whole hierarchy")
    res = simulator.run(sim, "pcie_dma", simulator.rtl_sources("pcie_dma"),
                        "tb.pcie_dma.test_pcie_dma", waves=True, wave_scopes=[("pcie_dma", 1)],
                        testcase="test_errors_and_write_back", run_name="scoped_waves")
    assert res.waves is not None
    names = waves.fst_signals(res.waves)
    shown = [n for n in names if n.startswith("pcie_dma.")]
    assert "pcie_dma.irq_done" in shown and "pcie_dma.m_axi_host_arvalid" in shown, shown[:20]
    assert not [n for n in shown if n.count(".") > 1], "a signal below pcie_dma was recorded"
    # the save file's own scopes are all there when asked for
    save = [(s, 1) for s in waves.save_file_scopes("pcie_dma")]
    res = simulator.run(sim, "pcie_dma", simulator.rtl_sources("pcie_dma"),
                        "tb.pcie_dma.test_pcie_dma", waves=True, wave_scopes=save,
                        testcase="test_errors_and_write_back", run_name="save_file_waves")
    assert res.waves is not None
    names = set(waves.fst_signals(res.waves))
    wanted = set(waves.save_file_signals("pcie_dma"))
    assert wanted and wanted <= names, sorted(wanted - names)
    assert not [n for n in names if n.startswith("pcie_dma.core.") and n.count(".") == 2], \
        "dma_core's own signals were recorded (only its engine was asked for)"
