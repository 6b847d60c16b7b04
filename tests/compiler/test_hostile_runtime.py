"""The card runtime under hostile input: NaN/Inf never become finite probabilities, an illegal
or deadlocking program is reported as what it is (the error path never raises its own error),
a failed run leaves the memory manager consistent and the next run correct, and a crafted
runner is refused before anything touches the card."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from compiler.errors import UntrustedRunnerError
from compiler.pipeline import compile_model
from compiler.runtime import card as card_runtime
from compiler.runtime.card import AccelStepError, CardExecutor, CardRuntimeError, CardSession
from compiler.xir import Graph
from pyhost.accel.abi import AccelImage
from pyhost.driver import PcieDriver
from pyhost.model_card import ModelCard
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from tests.compiler.helpers import conv_net


@pytest.fixture(scope="module")
def graph() -> Graph:
    return compile_model(conv_net(), {"plugin": "accel", "quantize": {"samples": 1}}).graph


def session() -> CardSession:
    return CardSession(PcieDriver(ModelCard(1 << 20, host_size=32 << 20, accel=AccelConfig())))


def feeds(bad: float | None = None) -> dict[str, np.ndarray]:
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    if bad is not None:
        x[0, 0, 0, :3] = bad
    return {"x": x}


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs_are_refused_and_the_session_recovers(graph: Graph,
                                                                bad: float) -> None:
    s = session()
    ex = CardExecutor(graph, s)
    want = ex.run(feeds())
    with pytest.raises(CardRuntimeError, match="'x' holds 3 NaN or Inf value"):
        ex.run(feeds(bad))
    s.manager.check()
    got = ex.run(feeds())
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def _with_program(monkeypatch: pytest.MonkeyPatch, program: bytes) -> None:
    """Let the runtime load an image whose program is ``program`` (past the ABI's own check,
    as if the card memory had been overwritten)."""
    real = card_runtime.accel_image

    def tampered(sub: object) -> AccelImage:
        return dataclasses.replace(real(sub), program=program)  # type: ignore[arg-type]

    monkeypatch.setattr(card_runtime, "accel_image", tampered)


def test_an_illegal_opcode_is_reported_not_an_isa_error(graph: Graph,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _with_program(monkeypatch, b"\x0f" + bytes(15) + isa.encode(isa.end()))
    s = session()
    ex = CardExecutor(graph, s)
    with pytest.raises(AccelStepError) as e:
        ex.run(feeds())
    msg = str(e.value)
    assert "ILLEGAL_OPCODE at instruction 0" in msg
    assert "instruction 0: <0f000000000000000000000000000000: illegal opcode 15>" in msg
    s.manager.check()


def test_a_deadlock_quotes_no_instruction(graph: Graph, monkeypatch: pytest.MonkeyPatch) -> None:
    prog = [isa.gemm(pop_prev=1, outer=0, inner=0), isa.end()]
    _with_program(monkeypatch, b"".join(isa.encode(i) for i in prog))
    s = session()
    ex = CardExecutor(graph, s)
    with pytest.raises(AccelStepError) as e:
        ex.run(feeds())
    msg = str(e.value)
    assert "DEADLOCK after" in msg and "dispatched instructions" in msg
    assert "; instruction" not in msg and "GEMM" not in msg
    s.manager.check()


def test_a_crafted_runner_is_refused_before_the_card_is_touched(graph: Graph) -> None:
    g = compile_model(conv_net(), {"plugin": "accel", "quantize": {"samples": 1}}).graph
    cpu = next(c for c in g.root_subgraph.children if c.get_attr("device") == "CPU")
    cpu.set_attr("runner", "os:system")
    s = session()
    before = s.driver.stats.copy()
    with pytest.raises(UntrustedRunnerError, match="refusing to import 'os'"):
        CardExecutor(g, s)
    after = s.driver.stats
    assert (after.doorbells, after.mmio_writes) == (before.doorbells, before.mmio_writes)
    del graph
