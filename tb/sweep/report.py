"""A sweep's outputs: the table, the CSVs, the plots (matplotlib PNG) and results.json.

- ``table.txt`` (also printed): one row per point;
- ``results.csv``: the same with every figure; ``subgraphs.csv``: one row per accelerator
  subgraph of every point (cycles, MACs, MAC utilization, unit busy/stall counters);
- ``cycles_vs_n.png`` and ``mac_util_vs_n.png``: accelerator cycles and MAC utilization per
  model against the array size N, one line per other configuration;
- ``bytes_vs_card_mem.png``: bytes moved (host to card + card to host + on card) against the
  card memory, one line per memory-manager policy, per model;
- ``pareto.png``: cycles against the array's MACs (N*N) per model, the Pareto front drawn.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

COLUMNS = ("model", "backend", "sim", "N", "inp", "wgt", "acc", "card_mem", "policy", "status",
           "cycles", "MAC util", "H2C bytes", "C2H bytes", "evictions", "wall s", "correct",
           "bit-exact", "cached")


def _size(n: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def row(rec: dict[str, Any]) -> dict[str, Any]:
    """One point's flat figures (the CSV row)."""
    p = rec["point"]
    r = rec.get("result") or {}
    s = r.get("summary") or {}
    chk = r.get("check") or {}
    return {
        "model": p["model"], "backend": p["backend"],
        "sim": p["simulator"] if p["backend"] == "rtl" else "",
        "N": p["n"], "inp": p["inp_depth"], "wgt": p["wgt_depth"], "acc": p["acc_depth"],
        "queue": p["queue_depth"], "card_mem": p["card_mem"], "policy": p["policy"],
        "link": p["link"], "images": p["images"], "max_layers": p["max_layers"],
        "status": rec["status"], "cycles": s.get("accel_cycles", ""),
        "sim_cycles": r.get("sim_cycles", ""), "macs": s.get("macs", ""),
        "mac_utilization": s.get("mac_utilization", ""),
        "bytes_h2c": s.get("bytes_h2c", ""), "bytes_c2h": s.get("bytes_c2h", ""),
        "bytes_c2c": s.get("bytes_c2c", ""), "evictions": s.get("evictions", ""),
        "writebacks": s.get("writebacks", ""), "wall_s": rec.get("wall_s", ""),
        "run_s": r.get("run_s", ""), "correct": chk.get("correct", ""),
        "top1_agrees": chk.get("top1_agrees", ""), "bit_exact": chk.get("bit_exact", ""),
        "cached": rec.get("cached", False), "error": (rec.get("error") or "")[:300],
        "key": rec.get("key") or "", "log": rec.get("log_path") or "",
    }


def table(records: Sequence[dict[str, Any]]) -> str:
    """The printed table."""
    rows = []
    for rec in records:
        f = row(rec)
        ok = f["status"] == "ok"
        rows.append([
            Path(f["model"]).stem if "/" in f["model"] else f["model"], f["backend"], f["sim"],
            str(f["N"]), str(f["inp"]), str(f["wgt"]), str(f["acc"]), _size(f["card_mem"]),
            f["policy"], f["status"],
            f"{f['cycles']:,}" if ok else "", f"{100 * f['mac_utilization']:.1f}%" if ok else "",
            f"{f['bytes_h2c']:,}" if ok else "", f"{f['bytes_c2h']:,}" if ok else "",
            str(f["evictions"]) if ok else "",
            f"{f['wall_s']:.1f}" if isinstance(f["wall_s"], float) else "",
            {True: "yes", False: "NO"}.get(f["correct"], ""),
            {True: "yes", False: "NO", None: "-"}.get(f["bit_exact"], "-") if ok else "",
            "yes" if f["cached"] else ""])
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c)
              for i, c in enumerate(COLUMNS)]
    right = {"N", "inp", "wgt", "acc", "card_mem", "cycles", "MAC util", "H2C bytes",
             "C2H bytes", "evictions", "wall s"}

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if h in right else c.ljust(w)
                         for c, w, h in zip(cells, widths, COLUMNS, strict=True)).rstrip()

    lines = [fmt(COLUMNS), fmt(["-" * w for w in widths])]
    lines += [fmt(r) for r in rows]
    failed = [r for r in records if r["status"] != "ok"]
    for r in failed:
        lines.append(f"{r['status']}: {r['label']}: {(r.get('error') or '').strip()[:400]}"
                     + (f" (log: {r['log_path']})" if r.get("log_path") else ""))
    return "\n".join(lines)


def subgraph_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for rec in records:
        if rec["status"] != "ok":
            continue
        p = rec["point"]
        model_steps = {s["name"]: s for s in
                       (rec["result"].get("model_summary") or {}).get("steps", [])}
        for s in rec["result"]["summary"]["steps"]:
            if "cycles" not in s:
                continue
            c = s["counters"]
            m = model_steps.get(s["name"])
            out.append({"model": p["model"], "backend": p["backend"], "N": p["n"],
                        "inp": p["inp_depth"], "wgt": p["wgt_depth"], "acc": p["acc_depth"],
                        "card_mem": p["card_mem"], "policy": p["policy"], "subgraph": s["name"],
                        "cycles": s["cycles"], "macs": s["macs"],
                        "mac_utilization": round(s["mac_utilization"], 5),
                        "model_cycles": m["cycles"] if m else "",
                        **{k: c[k] for k in ("insns", "load_busy", "load_stall", "compute_busy",
                                             "compute_stall", "store_busy", "store_stall",
                                             "bytes_loaded", "bytes_stored") if k in c}})
    return out


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def pareto(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both coordinates (smaller is better), by x."""
    front: list[tuple[float, float]] = []
    for x, y in sorted(set(points)):
        if not front or y < front[-1][1]:
            front.append((x, y))
    return front


def plots(records: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """The four PNGs (those the sweep has data for)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [row(r) for r in records if r["status"] == "ok"]
    if not ok:
        return []
    models = sorted({f["model"] for f in ok})
    written: list[Path] = []

    def series_name(f: dict[str, Any], skip: set[str]) -> str:
        parts = []
        for k, text in (("backend", f["backend"] + (f"/{f['sim']}" if f["sim"] else "")),
                        ("inp", f"inp {f['inp']}"), ("wgt", f"wgt {f['wgt']}"),
                        ("acc", f"acc {f['acc']}"), ("card_mem", _size(f["card_mem"])),
                        ("policy", f["policy"])):
            if k not in skip and len({g[k] for g in ok}) > 1 or k == "backend":
                parts.append(text)
        return ", ".join(parts)

    def fig_per_model(title: str) -> tuple[Any, list[Any]]:
        fig, axes = plt.subplots(1, len(models), figsize=(5.2 * len(models), 4.2),
                                 squeeze=False)
        fig.suptitle(title)
        return fig, list(axes[0])

    def label(ax: Any, model: str, xlabel: str, ylabel: str) -> None:
        ax.set_title(Path(model).stem)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)

    def save(fig: Any, fname: str) -> None:
        fig.tight_layout()
        fig.savefig(out / fname, dpi=110)
        plt.close(fig)
        written.append(out / fname)

    for metric, fname, ylabel, log in (
            ("cycles", "cycles_vs_n.png", "accelerator cycles (last image)", True),
            ("mac_utilization", "mac_util_vs_n.png", "MAC utilization", False)):
        fig, axes = fig_per_model(f"{ylabel} against array size N")
        for ax, model in zip(axes, models, strict=True):
            series: dict[str, list[tuple[int, float]]] = defaultdict(list)
            for f in ok:
                if f["model"] == model:
                    series[series_name(f, {"N"})].append((f["N"], float(f[metric])))
            for name, pts in sorted(series.items()):
                pts.sort()
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted({f["N"] for f in ok}), [str(n) for n in sorted({f["N"]
                                                                                  for f in ok})])
            if log:
                ax.set_yscale("log")
            else:
                ax.set_ylim(0, 1)
            label(ax, model, "N (array N x N)", ylabel)
        save(fig, fname)

    fig, axes = fig_per_model("bytes moved against card memory, per policy")
    for ax, model in zip(axes, models, strict=True):
        series = defaultdict(list)
        for f in ok:
            if f["model"] == model:
                name = f["policy"] + (f" ({series_name(f, {'card_mem', 'policy'})})")
                series[name].append((f["card_mem"], float(f["bytes_h2c"] + f["bytes_c2h"]
                                                          + f["bytes_c2c"])))
        for name, pts in sorted(series.items()):
            pts = sorted(set(pts))
            ax.plot([p[0] / 1024 for p in pts], [p[1] for p in pts], marker="o", label=name)
        ax.set_xscale("log", base=2)
        label(ax, model, "card memory (KiB)", "bytes moved (H2C + C2H + C2C)")
    save(fig, "bytes_vs_card_mem.png")

    fig, axes = fig_per_model("Pareto front: cycles against the array's MACs")
    for ax, model in zip(axes, models, strict=True):
        pts = [(f["N"] ** 2, float(f["cycles"])) for f in ok if f["model"] == model]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=18, alpha=0.6, label="points")
        front = pareto(pts)
        ax.plot([p[0] for p in front], [p[1] for p in front], "r-o", label="Pareto front")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        label(ax, model, "array MACs per cycle (N x N)", "accelerator cycles (last image)")
    save(fig, "pareto.png")
    return written


def write_all(records: Sequence[dict[str, Any]], out: Path, meta: dict[str, Any],
              make_plots: bool = True) -> dict[str, Path]:
    """Every output into ``out``; the paths by name."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"results.json": out / "results.json", "results.csv": out / "results.csv",
             "subgraphs.csv": out / "subgraphs.csv", "table.txt": out / "table.txt"}
    slim = [{k: v for k, v in r.items() if k != "log_tail"} for r in records]
    paths["results.json"].write_text(json.dumps({"meta": meta, "points": slim}, indent=1))
    _write_csv(paths["results.csv"], [row(r) for r in records])
    _write_csv(paths["subgraphs.csv"], subgraph_rows(records))
    paths["table.txt"].write_text(table(records) + "\n")
    if make_plots:
        for p in plots(records, out):
            paths[p.name] = p
    return paths
