"""``python -m bench``: words choose the benchmark modules, options go to the one chosen."""

from __future__ import annotations

import types

import pytest

from bench import __main__ as bench_main


@pytest.fixture
def calls(monkeypatch) -> list[tuple[str, list[str]]]:
    seen: list[tuple[str, list[str]]] = []

    def fake_import(name: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(main=lambda argv: seen.append((name, argv)) or 0)

    monkeypatch.setattr(bench_main.importlib, "import_module", fake_import)
    return seen


def test_options_reach_the_one_module_chosen(calls) -> None:
    assert bench_main.main(["dma", "--only", "c2c"]) == 0
    assert calls == [("bench.dma_bench", ["--only", "c2c"])]


def test_words_alone_choose_modules(calls) -> None:
    assert bench_main.main(["dram", "compile"]) == 0
    assert calls == [("bench.compile_bench", []), ("bench.dram_bench", [])]


def test_options_for_several_modules_are_refused(calls, capsys) -> None:
    assert bench_main.main(["dram", "compile", "--patterns", "x"]) == 2
    assert calls == []
    assert "need exactly one benchmark" in capsys.readouterr().err
