"""A peers run as a reader sees it: its JSON, its markdown table and its chart.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np

from autotune.bench.accuracy import DRAWS, MEASURES
from autotune.bench.figures import save_png

#: JSON keys of the peers, in the order they take turns
PEER_NAMES = ("mmtune", "cublas", "triton", "triton_tf32x3", "cupy")
LABELS = {"mmtune": "mmtune", "cublas": "cuBLAS", "triton": "Triton", "triton_tf32x3": "Triton tf32x3", "cupy": "CuPy"}
#: the peers mmtune's speed is given as a ratio to (vs_<peer>, call_vs_<peer>)
COMPARED = ("cublas", "triton", "triton_tf32x3")
#: the issue 19 goals the report checks: no shape below FLOOR x cuBLAS
FLOOR = 0.75
#: the commit a copied tree was taken from, where it runs without its git history (source_commit)
COMMIT_ENV = "MMTUNE_COMMIT"
RATIOS = (*(f"vs_{peer}" for peer in COMPARED), *(f"call_vs_{peer}" for peer in COMPARED))


def source_commit() -> str | None:
    """The git commit of the code that ran, for a reader of the results: COMMIT_ENV where whoever
    copied the tree to a GPU host set it; else the checkout's HEAD, marked "+" where tracked files
    differ from it; else None."""
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV]
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode == 0:
            changed = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                     capture_output=True, text=True, timeout=10).stdout.strip()
            return head.stdout.strip() + ("+" if changed else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def write(result: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "peers.json").write_text(json.dumps(result, indent=1) + "\n")
    (out_dir / "peers.md").write_text(markdown(result))
    chart(result, out_dir / "peers.png")


def _number(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _gflops(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def markdown(result: dict) -> str:
    """The per-shape table, the per-category geometric means and the call overhead, as Markdown."""
    names = [name for name in PEER_NAMES if name in result["peers"]]
    head = ["shape", "category", "config from", "family"]
    for name in names:
        head += [f"{LABELS[name]} call", f"{LABELS[name]} kernel"]
    head += [f"vs {LABELS[peer]}" for peer in COMPARED] + ["first call, s (" + " / ".join(LABELS[n] for n in names) + ")"]
    lines = [
        f"GFLOPS on {result['device']}, {result['dtype']}, layout {result.get('layout') or 'NN'}, {result['date']}: "
        "call = back-to-back calls on the wall clock "
        "(host included), kernel = CUDA events (the GPU alone); vs = mmtune kernel / peer kernel.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * 4 + "---:|" * (len(head) - 4),
    ]
    for r in result["rows"]:
        cells = [f"{r['m']}x{r['n']}x{r['k']}", r["category"] or "", r["source"], r["family"]]
        for name in names:
            cells += [_gflops(r[f"{name}_call_gflops"]), _gflops(r[f"{name}_kernel_gflops"])]
        cells += [_number(r.get(f"vs_{peer}"), 3) for peer in COMPARED]
        cells.append(" / ".join(_number(r[f"{name}_first_call_s"], 3) for name in names))
        lines.append("| " + " | ".join(cells) + " |")
    ratio_heads = [f"{prefix}{LABELS[peer]}" for prefix in ("vs ", "call vs ") for peer in COMPARED]
    lines += ["", "| category | shapes | " + " | ".join(ratio_heads) + " |", "|---|---:|" + "---:|" * len(ratio_heads)]
    for name, means in result["geomeans"].items():
        lines.append(f"| {name} | {means['shapes']} | " + " | ".join(_number(means[key], 3) for key in RATIOS) + " |")
    lines += errors_table(result, names)
    overhead = ", ".join(f"{LABELS[name]} {_number(us, 1)}" for name, us in result["call_overhead_us"].items())
    lines += ["", f"Call overhead at {result['overhead_shape']} (call minus kernel, µs): {overhead}."]
    worst = result["worst_vs_cublas"]
    if worst:
        below = ", ".join(result["below_floor"]) or "none"
        lines.append(f"Lowest mmtune / cuBLAS: {worst['ratio']:.3f} at {worst['shape']}; below {FLOOR}x: {below}.")
    loops = [LABELS[name] for name in names if any(r[f"{name}_kernel_timing"] == "loop" for r in result["rows"])]
    if loops:
        lines.append("Kernel times from held loops, not graphs (their graph did not compute the product): " + ", ".join(loops) + ".")
    for name, reason in result["absent"].items():
        lines.append(f"Absent: {LABELS.get(name, name)}: {reason}")
    for r in result["rows"]:
        for name, reason in r["failures"].items():
            lines.append(f"Failed: {LABELS[name]} at {r['m']}x{r['n']}x{r['k']}: {reason}")
    return "\n".join(lines) + "\n"


def errors_table(result: dict, names: list[str]) -> list[str]:
    """Each peer's two error measures against float64 per shape and draw (autotune.bench.accuracy)."""
    lines = ["", "Errors against float64, the median of 5 draws of operands: elementwise max |C-C64| / (|A||B|) and "
             "normwise ||C-C64||F / ||C64||F; uniform U[-1, 1], wide +-2^U[-30, 30].", "",
             "| shape | draw | " + " | ".join(f"{LABELS[name]} elementwise / normwise" for name in names) + " |",
             "|---|---|" + "---:|" * len(names)]
    for r in result["rows"]:
        for draw in DRAWS:
            cells = [" / ".join(_error(r.get(f"{name}_error_{measure}_{draw}")) for measure in MEASURES)
                     for name in names]
            lines.append(f"| {r['m']}x{r['n']}x{r['k']} | {draw} | " + " | ".join(cells) + " |")
    return lines


def _error(value: float | None) -> str:
    return "-" if value is None else f"{value:.2g}"


def chart(result: dict, path: Path) -> None:
    """Kernel GFLOPS per shape and peer (bars, log scale) with call GFLOPS (dots) above;
    mmtune's kernel ratio to cuBLAS and Triton below, against the 1.0, 0.9 and FLOOR lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, names = result["rows"], [name for name in PEER_NAMES if name in result["peers"]]
    width = 0.8 / max(len(names), 1)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(8, 0.9 * len(rows)), 8), sharex=True,
                                      gridspec_kw={"height_ratios": [2, 1]})
    for i, name in enumerate(names):
        xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(rows))]
        top.bar(xs, [r[f"{name}_kernel_gflops"] or 0 for r in rows], width, label=f"{LABELS[name]} kernel")
        top.scatter(xs, [r[f"{name}_call_gflops"] or np.nan for r in rows], s=10, color="black", zorder=3,
                    label="call (host included)" if i == 0 else None)
    top.set_yscale("log")
    top.set_ylabel("GFLOPS")
    top.legend(fontsize=8)
    top.set_title(f"{result['device']} {result['dtype']}: mmtune and its peers")
    for peer, marker in zip(COMPARED, "os^"):
        key, label = f"vs_{peer}", f"mmtune / {LABELS[peer]}"
        bottom.plot(range(len(rows)), [r.get(key) or np.nan for r in rows], marker, label=label)
    for level, style in ((1.0, "-"), (0.9, "--"), (FLOOR, ":")):
        bottom.axhline(level, color="grey", linestyle=style, linewidth=0.8)
    bottom.set_ylabel("kernel ratio")
    bottom.legend(fontsize=8)
    labels = [f"{r['m']}x{r['n']}x{r['k']}" + (f"\n{r['category']}" if r["category"] else "") for r in rows]
    bottom.set_xticks(range(len(rows)), labels, rotation=45, ha="right", fontsize=8)
    fig.tight_layout()
    save_png(fig, path)
