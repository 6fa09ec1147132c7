#!/usr/bin/env python3
"""What rendering a chat in the warm worker process costs over rendering it in-process: one
conversation, ChatML and Llama 3 style templates, the text (tokenize=False) and the protected
render of tokenize=True. Minimum and median over many renders. Writes JSON.

    .venv/bin/python bench/chat_template_bench.py [--renders 500] [--turns 4]
        [--out bench/out/chat_template_bench.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

from specdec import _chat_worker
from specdec._files import check_output_file, write_file_atomic
from specdec.chat_template import check_conversation, render_chat

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = {
    "chatml": ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
               "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"),
    "llama3": ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}"
               "<|end_header_id|>\n\n{{ m.content | trim }}<|eot_id|>{% endfor %}"
               "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n"
               "{% endif %}"),
}


def conversation(turns: int) -> List[Dict[str, Any]]:
    msgs = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"Question {i}: what is {i} + {i}? " * 4})
        msgs.append({"role": "assistant", "content": f"It is {2 * i}. " * 8})
    msgs.append({"role": "user", "content": "Thanks. One more question, please."})
    return check_conversation(msgs)


def times_ms(renders: int, fn: Callable[[], object]) -> List[float]:
    out = []
    for _ in range(renders):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1e3)
    return out


def bench(name: str, source: str, msgs: List[Dict[str, Any]], protect: bool,
          renders: int) -> Dict[str, Any]:
    special = {"bos_token": "<s>", "eos_token": "</s>"}
    control = [] if protect else None
    spans = (lambda s: []) if protect else None

    def local() -> object:
        return render_chat(source, msgs, name=name, special_tokens=special, control_spans=spans)

    def worker() -> object:
        return _chat_worker.render(source, msgs, name=name, add_generation_prompt=True,
                                   special_tokens=special, control=control)
    assert local()[0] == worker()[0]  # warm both (compile, start the worker)
    here, there = times_ms(renders, local), times_ms(renders, worker)
    row = {"template": name, "tokenize": protect, "renders": renders,
           "in_process_min_ms": min(here), "in_process_median_ms": statistics.median(here),
           "worker_min_ms": min(there), "worker_median_ms": statistics.median(there)}
    row["overhead_min_ms"] = row["worker_min_ms"] - row["in_process_min_ms"]
    row["overhead_median_ms"] = row["worker_median_ms"] - row["in_process_median_ms"]
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--renders", type=int, default=500)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "chat_template_bench.json"))
    args = ap.parse_args()
    default_folder = Path(args.out).resolve().parent == ROOT / "bench" / "out"
    check_output_file(args.out, "--out", create_folder=default_folder)  # before the run
    msgs = conversation(args.turns)
    start = time.perf_counter()
    _chat_worker.render("x", msgs, name="start", add_generation_prompt=True)
    start_ms = (time.perf_counter() - start) * 1e3
    results = [bench(name, source, msgs, protect, args.renders)
               for name, source in TEMPLATES.items() for protect in (False, True)]
    for r in results:
        print(f"{r['template']:7s} tokenize={r['tokenize']!s:5s} in-process "
              f"{r['in_process_min_ms']:.3f} / {r['in_process_median_ms']:.3f} ms, worker "
              f"{r['worker_min_ms']:.3f} / {r['worker_median_ms']:.3f} ms (min / median); "
              f"overhead {r['overhead_min_ms']:.3f} / {r['overhead_median_ms']:.3f} ms")
    print(f"first render (starting the worker): {start_ms:.1f} ms")
    out = write_file_atomic(args.out, json.dumps({
        "machine": platform.platform(), "processor": platform.processor(),
        "messages": len(msgs), "worker_start_ms": round(start_ms, 1), "results": results},
        indent=2) + "\n", "--out")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
