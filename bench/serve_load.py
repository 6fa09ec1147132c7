#!/usr/bin/env python3
"""A bounded load test of ``specdec serve``: C concurrent streaming clients (the official ``openai``
client), R requests each, against a real server process on 127.0.0.1, with or without a drafter
and a KV budget you choose (small enough to preempt, if you like).

Reports: every request answered or not, each greedy output equal to the same request alone
(``specdec.LLM`` in this process), every KV block back in the pool afterwards (``/metrics``),
throughput (output tokens / wall time), time to first token and inter-token latency as each
client saw them (p50, p90, p99), and the server's own counters (drafts, accepted, preemptions,
prefix-cache hits).

    .venv/bin/python bench/serve_load.py --model stories260K.gguf-path --clients 32 --requests 2 \\
        --speculative-config '{"method": "draft_model", "model": "...", "num_speculative_tokens": 3}'

Writes bench/out/serve_load.json. Not a test: nothing asserts on timings.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

import specdec  # noqa: E402
from specdec._files import write_file_atomic  # noqa: E402
from specdec.bench import machine_info  # noqa: E402
from serve_helpers import ServerProcess  # noqa: E402

TOPICS = ["Once upon a time", "The dog", "Lily went to the park and saw a big red ball. She",
          "Tom had a little boat", "The sun was hot and the children"]


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(ROOT / "tests" / "data" / "models" / "stories260K.gguf"))
    ap.add_argument("--speculative-config", default=None)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=2, help="per client")
    ap.add_argument("--max-tokens", type=int, default=40)
    ap.add_argument("--max-num-seqs", type=int, default=8)
    ap.add_argument("--max-model-len", type=int, default=0)
    ap.add_argument("--kv-cache-memory", default="auto")
    ap.add_argument("--chat", action="store_true", help="chat completions (the model's template)")
    ap.add_argument("--category", default="stories",
                    help="prompts: 'stories' (short openings) or a category of `specdec bench` "
                         "(code_generation, code_editing, chat, summarisation), one variant per client")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "serve_load.json"))
    a = ap.parse_args()
    import openai

    args = ["--model", a.model, "--served-model-name", "m", "--max-num-seqs", str(a.max_num_seqs),
            "--max-pending", str(a.clients * 2), "--kv-cache-memory", a.kv_cache_memory,
            "--max-model-len", str(a.max_model_len)]
    if a.speculative_config:
        args += ["--speculative-config", a.speculative_config]
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    server = ServerProcess(args, str(Path(a.out).with_suffix(".server.log")))
    try:
        llm = specdec.LLM(a.model, progress=False, max_model_len=a.max_model_len, max_num_seqs=1)
        if a.category == "stories":
            prompts = [f"{TOPICS[i % len(TOPICS)]} {i}" for i in range(a.clients)]
        else:
            from specdec.bench import PROMPTS
            prompts = [f"{PROMPTS[a.category]}\n\n(Request {i}.)" for i in range(a.clients)]
        params = specdec.SamplingParams(temperature=0, max_tokens=a.max_tokens, ignore_eos=True)
        if a.chat:
            want = {p: llm.chat([{"role": "user", "content": p}], params)[0].outputs[0].text for p in prompts}
        else:
            want = {p: llm.generate(p, params)[0].outputs[0].text for p in prompts}
        machine = machine_info(llm.context)
        del llm
        client = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=600)
        ttft, itl, results, errors = [], [], [], []
        lock = threading.Lock()

        def run(p: str) -> None:
            for _ in range(a.requests):
                t0 = time.perf_counter()
                last, first, pieces, n = None, None, [], 0
                try:
                    kw = dict(model="m", max_tokens=a.max_tokens, temperature=0, stream=True,
                              stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
                    stream = (client.chat.completions.create(messages=[{"role": "user", "content": p}], **kw)
                              if a.chat else client.completions.create(prompt=p, **kw))
                    usage = None
                    gaps = []
                    for ch in stream:
                        if ch.usage is not None:
                            usage = ch.usage
                        for c in ch.choices:
                            text = (c.delta.content or "") if a.chat else c.text
                            if not text:
                                continue
                            now = time.perf_counter()
                            if first is None:
                                first = now - t0
                            else:
                                gaps.append(now - last)
                            last = now
                            pieces.append(text)
                    n = usage.completion_tokens if usage else 0
                    with lock:
                        ttft.append(first)
                        itl.extend(gaps)
                        results.append((p, "".join(pieces), n, time.perf_counter() - t0))
                except Exception as e:  # noqa: BLE001 - counted
                    with lock:
                        errors.append(repr(e))

        threads = [threading.Thread(target=run, args=(p,)) for p in prompts]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
        # every block back: wait for the engine to settle
        deadline = time.monotonic() + 30
        while True:
            m = server.metrics()
            idle = (m["specdec:num_requests_running"] == 0 and m["specdec:num_requests_waiting"] == 0
                    and m["specdec:kv_cache_usage_perc"] == 0.0)
            if idle or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        equal = sum(1 for p, text, _, _ in results if text == want[p])
        tokens = sum(n for _, _, n, _ in results)
        report = {
            "machine": machine,
            "date": time.strftime("%Y-%m-%d"),
            "config": vars(a),
            "requests": a.clients * a.requests, "answered": len(results), "errors": errors[:5],
            "outputs_equal_to_alone": equal, "all_blocks_back": idle,
            "wall_seconds": wall, "output_tokens": tokens, "throughput_tok_s": tokens / wall,
            "ttft_s": {"p50": pct(ttft, 50), "p90": pct(ttft, 90), "p99": pct(ttft, 99),
                       "mean": statistics.mean(ttft) if ttft else None},
            "itl_s": {"p50": pct(itl, 50), "p90": pct(itl, 90), "p99": pct(itl, 99),
                      "mean": statistics.mean(itl) if itl else None,
                      "note": "gaps between text pieces as the client received them; a speculative "
                              "step may deliver several tokens in one piece"},
            "server": {k: v for k, v in m.items() if k.endswith("_total") or "{position" in k},
        }
        write_file_atomic(a.out, json.dumps(report, indent=1))
        print(json.dumps({k: report[k] for k in ("requests", "answered", "outputs_equal_to_alone",
                                                  "all_blocks_back", "throughput_tok_s", "ttft_s", "itl_s")},
                         indent=1))
        return 0 if not errors and equal == len(results) and idle else 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
