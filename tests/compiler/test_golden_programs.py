"""What the compiler emits does not change by accident: the accelerator programs (and the whole
.xmodel) of the demo CNN at three array sizes and of the light ResNet-50, against hashes
recorded in tests/data/golden_programs.json.

The hashes were recorded before the package layout changed (issue 11) so that the move is shown
to change no emitted byte. A change that is meant to change the code the accelerator plugin
generates updates the file with ``python -m tests.compiler.test_golden_programs --update`` and
says why in its commit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from compiler import xmodel, zoo
from compiler.pipeline import compile_model

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden_programs.json"

_QUANT = {"samples": 4, "seed": 0}
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "demo": ("demo", {"plugin": "accel", "quantize": _QUANT}),
    "demo_layers1_n4": ("demo", {"plugin": "accel", "quantize": _QUANT,
                                 "plugin_options": {"accel": {"max_layers": 1, "n": 4}}}),
    "demo_layers2_n16": ("demo", {"plugin": "accel", "quantize": _QUANT,
                                  "plugin_options": {"accel": {"max_layers": 2, "n": 16}}}),
    "resnet50": ("resnet50", {"plugin": "accel", "quantize": {"samples": 2, "seed": 0}}),
}


def fingerprint(case: str) -> dict[str, Any]:
    """Hashes of each accelerator subgraph's program, constants and I/O attributes, and of the
    serialized .xmodel."""
    model_name, options = CASES[case]
    model = zoo.demo_cnn() if model_name == "demo" else zoo.light_model(model_name)
    graph = compile_model(model, options).graph
    programs = {}
    for sub in graph.root_subgraph.children_topological_sort():
        if sub.get_attr("device") != "ACCEL":
            continue
        a = sub.attrs
        h = hashlib.sha256()
        for k in ("accel_program", "accel_consts"):
            h.update(bytes(a[k]))
        h.update(json.dumps({k: a[k] for k in ("accel_scratch_bytes", "accel_io",
                                               "accel_config")}, sort_keys=True).encode())
        programs[sub.name] = h.hexdigest()[:16]
    return {"programs": programs, "xmodel": hashlib.sha256(xmodel.dumps(graph)).hexdigest()[:16]}


@pytest.mark.parametrize("case", list(CASES))
def test_emitted_code_is_unchanged(case: str) -> None:
    """Every accelerator subgraph's program, constants and I/O layout, and the .xmodel bytes,
    hash as recorded."""
    want = json.loads(GOLDEN.read_text())[case]
    got = fingerprint(case)
    assert got["programs"] == want["programs"], f"{case}: accelerator programs changed"
    assert got["xmodel"] == want["xmodel"], f"{case}: the .xmodel bytes changed"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--update", action="store_true", help="rewrite the recorded hashes")
    args = ap.parse_args()
    got = {case: fingerprint(case) for case in CASES}
    if args.update:
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    print(json.dumps(got, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
