"""Prints a table from attention_bench JSON (and a PNG plot when matplotlib is available)."""

import io
import json
import sys

from specdec._files import write_file_atomic

data = json.load(open(sys.argv[1]))
print(f"device: {data['device']}; host streaming read {data['host_read_GBps']:.1f} GB/s; "
      f"device copy {data['device_copy_GBps']:.1f} GB/s")
print(f"{'backend':10s} {'case':11s} {'context':>8s} {'median us':>10s} {'KV GB/s':>8s}  layer")
for r in data["results"]:
    print(f"{r['backend']:10s} {r['case']:11s} {r['context']:8d} {r['median_us']:10.1f} {r['kv_GBps']:8.2f}  "
          f"{r.get('num_q_heads', '')} q heads, {r.get('spec', '')}")
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(0)
fig, ax = plt.subplots(figsize=(7, 4))
for backend in sorted({r["backend"] for r in data["results"]}):
    rows = [r for r in data["results"] if r["backend"] == backend and r["case"] == "decode"]
    ax.plot([r["context"] for r in rows], [r["kv_GBps"] for r in rows], marker="o", label=f"{backend} decode")
ax.axhline(data["host_read_GBps"], linestyle="--", color="gray", label="host streaming read")
ax.set_xscale("log", base=2)
ax.set_xlabel("context (tokens)")
ax.set_ylabel("KV bytes read / time (GB/s)")
ax.legend()
fig.tight_layout()
out = sys.argv[1].replace(".json", ".png")
buf = io.BytesIO()
fig.savefig(buf, format="png", dpi=100)
write_file_atomic(out, buf.getvalue(), "the plot")
print(f"plot: {out}")
