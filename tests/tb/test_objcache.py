"""tb/common/objcache.py: the Verilator runtime compiled once per set of flags, with the real C++
compiler behind a wrapper that counts its invocations."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from tb.common import objcache

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    root = tmp_path / "vroot"
    (root / "include").mkdir(parents=True)
    (root / "include" / "rt.h").write_text("int rt_value();\n#define RT_K 7\n")
    (root / "include" / "rt.cpp").write_text('#include "rt.h"\nint rt_value() { return RT_K; }\n')
    log = tmp_path / "cxx.log"
    cxx = tmp_path / "cxx"
    cxx.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\nexec c++ \"$@\"\n")
    cxx.chmod(cxx.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("VERILATOR_ROOT", str(root))
    monkeypatch.setenv(objcache.DIR_ENV, str(tmp_path / "cache"))
    return {"root": root, "cxx": cxx, "log": log, "tmp": tmp_path}


def compiles(env: dict[str, Path]) -> int:
    return len(env["log"].read_text().splitlines()) if env["log"].exists() else 0


def build(env: dict[str, Path], name: str, *flags: str, src: Path | None = None) -> Path:
    """One 'build directory' compiling the runtime source as verilated.mk does."""
    d = env["tmp"] / name
    d.mkdir(exist_ok=True)
    src = src or env["root"] / "include" / "rt.cpp"
    cwd = os.getcwd()
    os.chdir(d)
    try:
        rc = objcache.main([str(env["cxx"]), *flags, "-MMD", f"-I{env['root']}/include",
                            "-c", "-o", "rt.o", str(src)])
    finally:
        os.chdir(cwd)
    assert rc == 0
    return d / "rt.o"


def test_second_build_reuses_the_object(env: dict[str, Path]) -> None:
    a = build(env, "a", "-O1")
    assert compiles(env) == 1
    b = build(env, "b", "-O1")
    assert compiles(env) == 1, "the same runtime compile ran twice"
    assert a.read_bytes() == b.read_bytes()
    assert (b.parent / "rt.d").read_text() == (a.parent / "rt.d").read_text()


def test_other_flags_compile_again(env: dict[str, Path]) -> None:
    build(env, "a", "-O1")
    build(env, "b", "-O2")
    build(env, "c", "-O1", "-DVM_TRACE=1")
    assert compiles(env) == 3
    build(env, "d", "-O2")
    assert compiles(env) == 3


def test_changed_header_or_source_compiles_again(env: dict[str, Path]) -> None:
    build(env, "a", "-O1")
    (env["root"] / "include" / "rt.h").write_text("int rt_value();\n#define RT_K 8\n")
    build(env, "b", "-O1")
    assert compiles(env) == 2, "a changed header must not reuse the old object"
    src = env["root"] / "include" / "rt.cpp"
    src.write_text(src.read_text() + "int rt_other() { return 1; }\n")
    build(env, "c", "-O1")
    assert compiles(env) == 3
    build(env, "d", "-O1")
    assert compiles(env) == 3


def test_a_damaged_entry_is_compiled_again(env: dict[str, Path]) -> None:
    build(env, "a", "-O1")
    for m in (env["tmp"] / "cache").glob("*/manifest.json"):
        m.write_text("{not json")
    build(env, "b", "-O1")
    assert compiles(env) == 2
    build(env, "c", "-O1")
    assert compiles(env) == 2


def test_the_models_own_files_are_never_cached(env: dict[str, Path]) -> None:
    model = env["tmp"] / "Vtop.cpp"
    model.write_text("int top() { return 1; }\n")
    build(env, "a", "-O1", src=model)
    build(env, "b", "-O1", src=model)
    assert compiles(env) == 2
    assert not (env["tmp"] / "cache").exists()


def test_a_failed_compile_fails_and_stores_nothing(env: dict[str, Path]) -> None:
    (env["root"] / "include" / "rt.h").write_text("this is not C++\n")
    d = env["tmp"] / "bad"
    d.mkdir()
    cwd = os.getcwd()
    os.chdir(d)
    try:
        rc = objcache.main([str(env["cxx"]), "-MMD", "-c", "-o", "rt.o",
                            str(env["root"] / "include" / "rt.cpp")])
    finally:
        os.chdir(cwd)
    assert rc != 0
    assert not any((env["tmp"] / "cache").glob("*/obj.o"))


def test_without_a_cache_folder_it_only_compiles(env: dict[str, Path],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(objcache.DIR_ENV)
    build(env, "a", "-O1")
    build(env, "b", "-O1")
    assert compiles(env) == 2


def test_the_simulator_wrapper_names_it(tmp_path: Path) -> None:
    """tb/common/simulator.py hands this script to verilated.mk when ccache is missing."""
    import subprocess

    from tb.common import simulator

    env = {k: v for k, v in os.environ.items() if k not in ("OBJCACHE", objcache.DIR_ENV)}
    env["SIM_BUILD_ROOT"] = str(tmp_path)
    code = ("import os; from tb.common import simulator; "
            f"print(os.environ['OBJCACHE']); print(os.environ.get('{objcache.DIR_ENV}'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, cwd=simulator.ROOT).stdout.split("\n")
    if shutil.which("ccache", path=env.get("PATH")):
        assert out[0] == "ccache"
    else:
        assert out[0] == f"{sys.executable} {simulator.OBJCACHE_SCRIPT}"
        assert out[1] == str(tmp_path / "verilator" / "objcache")
