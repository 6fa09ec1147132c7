#!/usr/bin/env python3
"""Plots bench/model_bench.py's JSON as an SVG (no plotting library needed):
left, decode and prefill tokens/s per model, specdec next to llama.cpp; right, the cost of a
forward of n tokens relative to one token (what verifying n - 1 drafts costs) per model.

    python3 bench/plot_model_bench.py [bench/results/model_bench_pocl_cpu.json] [OUT.svg]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parents[1]
COLORS = {"specdec": "#1f77b4", "llama_cpp": "#ff7f0e"}
MODEL_COLORS = ["#2ca02c", "#d62728", "#9467bd", "#8c564b", "#17becf"]
LABEL = {"specdec": "specdec (OpenCL, PoCL)", "llama_cpp": "llama.cpp (CPU)"}


def _short(model: str) -> str:
    """smollm2-135m-instruct-q4_1 -> smollm2-135m, qwen2.5-coder-1.5b-instruct-q4_k_m -> qwen-1.5b"""
    name = model.split("-instruct")[0].replace("qwen2.5-coder-", "qwen-")
    return name.split("-q4")[0].split("-q8")[0]


def _text(x, y, s, size=11, anchor="middle", rotate=None, weight="normal"):
    rot = f' transform="rotate({rotate} {x:.1f} {y:.1f})"' if rotate else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'font-family="sans-serif" font-weight="{weight}"{rot}>{s}</text>')


def _bars(models: List[dict], key: str, title: str, x0: float, y0: float, w: float, h: float) -> List[str]:
    out = [_text(x0 + w / 2, y0 - 8, title, 13, weight="bold")]
    engines = [e for e in ("specdec", "llama_cpp") if any(e in m for m in models)]
    vmax = max(m[e][key] for m in models for e in engines if e in m) * 1.15
    out.append(f'<line x1="{x0}" y1="{y0 + h}" x2="{x0 + w}" y2="{y0 + h}" stroke="black"/>')
    out.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y0 + h}" stroke="black"/>')
    for i in range(5):
        v = vmax * i / 4
        y = y0 + h - h * i / 4
        out.append(f'<line x1="{x0 - 4}" y1="{y:.1f}" x2="{x0}" y2="{y:.1f}" stroke="black"/>')
        out.append(_text(x0 - 6, y + 4, f"{v:.0f}", 10, "end"))
    slot = w / len(models)
    bw = slot * 0.7 / len(engines)
    for i, m in enumerate(models):
        for j, e in enumerate(engines):
            if e not in m:
                continue
            v = m[e][key]
            bh = h * v / vmax
            bx = x0 + i * slot + slot * 0.15 + j * bw
            out.append(f'<rect x="{bx:.1f}" y="{y0 + h - bh:.1f}" width="{bw:.1f}" height="{bh:.1f}" '
                       f'fill="{COLORS[e]}"/>')
            out.append(_text(bx + bw / 2, y0 + h - bh - 3, f"{v:.0f}", 9))
        ratio = m.get("ratio_specdec_over_llama_cpp", {}).get(key)
        name = _short(m["model"])
        out.append(_text(x0 + (i + 0.5) * slot, y0 + h + 14, name, 9))
        if ratio:
            out.append(_text(x0 + (i + 0.5) * slot, y0 + h + 27, f"{ratio:.2f}x", 10, weight="bold"))
    out.append(_text(x0 - 38, y0 + h / 2, "tokens/s", 11, rotate=-90))
    return out


def _costs(models: List[dict], x0: float, y0: float, w: float, h: float) -> List[str]:
    out = [_text(x0 + w / 2, y0 - 8, "forward of n tokens / forward of 1 token", 13, weight="bold")]
    ns = [1, 2, 4, 8, 16]
    vmax = max(max(m[e]["relative_cost"][str(n)] for n in ns) for m in models
               for e in ("specdec", "llama_cpp") if e in m) * 1.05
    xs = {n: x0 + w * i / (len(ns) - 1) for i, n in enumerate(ns)}
    out.append(f'<line x1="{x0}" y1="{y0 + h}" x2="{x0 + w}" y2="{y0 + h}" stroke="black"/>')
    out.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y0 + h}" stroke="black"/>')
    for n in ns:
        out.append(_text(xs[n], y0 + h + 14, str(n), 10))
    out.append(_text(x0 + w / 2, y0 + h + 30, "n (tokens in the forward)", 11))
    for v in range(1, int(vmax) + 1):
        y = y0 + h - h * v / vmax
        out.append(f'<line x1="{x0 - 4}" y1="{y:.1f}" x2="{x0 + w}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(_text(x0 - 6, y + 4, f"{v}x", 10, "end"))
    for i, m in enumerate(models):
        color = MODEL_COLORS[i % len(MODEL_COLORS)]
        for e, dash in (("specdec", ""), ("llama_cpp", ' stroke-dasharray="5,3"')):
            if e not in m:
                continue
            pts = " ".join(f"{xs[n]:.1f},{y0 + h - h * m[e]['relative_cost'][str(n)] / vmax:.1f}" for n in ns)
            out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<rect x="{x0 + 10}" y="{y0 + 8 + 16 * i}" width="12" height="3" fill="{color}"/>')
        out.append(_text(x0 + 26, y0 + 13 + 16 * i, _short(m["model"]), 10, "start"))
    out.append(_text(x0 + 10, y0 + 13 + 16 * len(models), "solid: specdec, dashed: llama.cpp", 10, "start"))
    return out


def plot(data: dict) -> str:
    models = data["models"]
    W, H = 1180, 420
    load = ", ".join(f"{v:.2f}" for v in data.get("load_average_before", []))
    title = (f"Plain forward on {data.get('device', '?')} ({data.get('machine', '?')}), "
             f"llama-cpp-python {data.get('llama_cpp_python', '?')}; load average before: {load}")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}">',
             '<rect width="100%" height="100%" fill="white"/>', _text(W / 2, 20, title, 12)]
    parts += _bars(models, "decode_tok_s", "decode tokens/s (ratio specdec / llama.cpp)", 60, 60, 340, 280)
    parts += _bars(models, "prefill_tok_s", "prefill tokens/s", 470, 60, 300, 280)
    parts += _costs(models, 840, 60, 310, 280)
    for j, e in enumerate(("specdec", "llama_cpp")):
        parts.append(f'<rect x="{60 + 230 * j}" y="{H - 30}" width="12" height="12" fill="{COLORS[e]}"/>')
        parts.append(_text(78 + 230 * j, H - 20, LABEL[e], 11, "start"))
    parts.append("</svg>")
    return "\n".join(parts)


def main() -> int:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "bench" / "results" / "model_bench_pocl_cpu.json"
    dst = Path(sys.argv[2]) if len(sys.argv) > 2 else src.with_suffix(".svg")
    dst.write_text(plot(json.loads(src.read_text())))
    print(f"wrote {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
