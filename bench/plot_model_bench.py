#!/usr/bin/env python3
"""Plots bench/model_bench.py's JSON with matplotlib as a PNG: left, decode and prefill tokens/s
per model, specdec next to llama.cpp (ratio under each pair); right, the cost of a forward of n
tokens relative to one token (what verifying n - 1 drafts costs) per model.

    .venv/bin/python bench/plot_model_bench.py [bench/results/model_bench_pocl_cpu.json] [OUT.png]
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from specdec._files import write_file_atomic  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENGINES = {"specdec": ("specdec (OpenCL, PoCL)", "tab:blue"), "llama_cpp": ("llama.cpp (CPU)", "tab:orange")}


def _short(model: str) -> str:
    name = model.split("-instruct")[0].replace("qwen2.5-coder-", "qwen-")
    return name.split("-q4")[0].split("-q8")[0]


def plot(data: dict, dst: Path) -> None:
    models = data["models"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    for ax, key, title in ((axes[0], "decode_tok_s", "decode tokens/s"), (axes[1], "prefill_tok_s", "prefill tokens/s")):
        w = 0.38
        for j, (eng, (label, color)) in enumerate(ENGINES.items()):
            xs = [i + j * w for i, m in enumerate(models) if eng in m]
            ys = [m[eng][key] for m in models if eng in m]
            bars = ax.bar(xs, ys, w, label=label, color=color)
            ax.bar_label(bars, fmt="%.0f", fontsize=7)
        for i, m in enumerate(models):
            r = m.get("ratio_specdec_over_llama_cpp", {}).get(key)
            if r:
                ax.annotate(f"{r:.2f}x", (i + w / 2, 0), xytext=(0, -26), textcoords="offset points",
                            ha="center", fontsize=8, fontweight="bold")
        ax.set_xticks([i + w / 2 for i in range(len(models))], [_short(m["model"]) for m in models], fontsize=8)
        ax.set_title(title + (" (ratio specdec / llama.cpp)" if key == "decode_tok_s" else ""), fontsize=10)
        ax.set_ylabel("tokens/s")
        ax.legend(fontsize=7)
    ax = axes[2]
    ns = [1, 2, 4, 8, 16]
    for i, m in enumerate(models):
        color = plt.get_cmap("tab10")(i + 2)
        for eng, style in (("specdec", "-"), ("llama_cpp", "--")):
            if eng in m:
                ax.plot(ns, [m[eng]["relative_cost"][str(n)] for n in ns], style, marker="o", color=color,
                        label=f"{_short(m['model'])} ({'specdec' if eng == 'specdec' else 'llama.cpp'})")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("n (tokens in the forward)")
    ax.set_ylabel("forward of n / forward of 1")
    ax.set_title("verification cost (solid: specdec, dashed: llama.cpp)", fontsize=10)
    ax.legend(fontsize=6)
    load = ", ".join(f"{v:.2f}" for v in data.get("load_average_before", []))
    fig.suptitle(f"Plain forward on {data.get('device', '?')} ({data.get('machine', '?')}), llama-cpp-python "
                 f"{data.get('llama_cpp_python', '?')}; load average before: {load}", fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_file_atomic(dst, buf.getvalue(), "DST")


def main() -> int:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "bench" / "results" / "model_bench_pocl_cpu.json"
    dst = Path(sys.argv[2]) if len(sys.argv) > 2 else src.with_suffix(".png")
    plot(json.loads(src.read_text()), dst)
    print(f"wrote {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
