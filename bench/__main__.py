"""``make bench``: run every benchmark module (bench/*_bench.py with a ``main()``), in name order.

``python -m bench dram compile`` runs only the modules whose names contain those words;
``python -m bench dram --patterns seq_read_64B`` passes the options (everything from the first
word starting with ``-``) to the one module the words choose. Each
module prints its summary and writes JSON under bench/results/; the exit status is non-zero when
any module missed a target or failed.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from pathlib import Path


def main(argv: list[str]) -> int:
    # words before the first option choose the modules; the options go to the one chosen
    cut = next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))
    words, options = argv[:cut], argv[cut:]
    names = sorted(p.stem for p in Path(__file__).parent.glob("*_bench.py"))
    if words:
        names = [n for n in names if any(a in n for a in words)]
    if options and len(names) != 1:
        chosen = ", ".join(names) or "none"
        print(f"options {' '.join(options)} need exactly one benchmark; "
              f"{' '.join(words) or '(all)'} chooses {len(names)}: {chosen}", file=sys.stderr)
        return 2
    status = 0
    for name in names:
        print(f"\n=== bench/{name}.py ===", flush=True)
        try:
            rc = importlib.import_module(f"bench.{name}").main(options)
        except Exception:  # a broken benchmark must not hide the others' figures
            traceback.print_exc()
            rc = 1
        status |= 1 if rc else 0
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
