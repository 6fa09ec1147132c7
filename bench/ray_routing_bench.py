#!/usr/bin/env python3
"""Routing of ``specdec serve --ray`` measured: prefix affinity then load (specdec's router)
against Ray Serve's default router (power of two choices) and one ``specdec serve`` alone, on a
workload of concurrent multi-turn chat sessions that share system prompts.

Each of S sessions (``--sessions``, default 8) uses one of P system prompts (``--systems``,
default 2) and holds T turns (``--turns``): each turn sends the whole conversation so far (the
system prompt, every earlier user message and reply) with a new user message, streamed, greedy,
``--max-tokens`` tokens (128). The sessions run concurrently, each turn after the previous one's reply
and a user's pause (uniform in [``--think-min-s``, ``--think-s``], [0, 2] s by default, seeded, so
the setups see the same pauses; without pauses the sessions move in lockstep, and Ray's default
router, choosing by queue lengths that repeat each round, keeps most sessions on one replica by
accident).
The same workload runs against:

- ``single``: one ``specdec serve`` (no Ray), the native device on every core;
- ``prefix``: ``specdec serve --ray --num-replicas R`` with specdec's router;
- ``ray-default``: the same with ``--router ray-default``.

The replicas' KV caches are small for the sessions' conversations together (``--kv-tokens-per-
replica``, default 3072 tokens each; the conversations reach ~6,700 tokens in all) and the single
server has the same memory in one cache (``--replicas`` times as much): routing decides whether
the replicas' caches hold each conversation once (about half of them each) or every conversation
twice, evicting one another. Each setup runs ``--repeats`` times (3), the setups taking turns;
Ray's default router chooses at random, so its figures move from run to run: means are reported,
with each run's hit rate and the turns that went to another replica than the session's last.

Reported per setup: the prefix-cache hit rate (cached prompt tokens / prompt tokens, from each
response's ``usage.prompt_tokens_details.cached_tokens``), time to first token (p50, p90), output
throughput (tokens / wall time), the replicas each session's turns went to, and the requests that
failed (none expected); then the targets: hit rate with ``prefix`` >= 0.9x ``single`` and >= 1.5x
``ray-default``, and ``single`` / ``ray-default``: one cache holding every conversation once loses
only what no cache holds (each prompt's new part, each conversation's start), so that ratio is
about the most any router can reach against Ray's.

    .venv/bin/python bench/ray_routing_bench.py [--model smollm2-135m-instruct-q4_1] \\
        [--replicas 2] [--sessions 8] [--turns 6] [--max-tokens 128] [--repeats 3] \\
        [--think-min-s 0] [--think-s 2] [--kv-tokens-per-replica 3072] [--threads-per-replica 1]

A workload where each conversation's own history is most of its prompts (chat-length replies,
few turns, users who read them): ``--turns 3 --max-tokens 512 --think-min-s 5 --think-s 15
--kv-tokens-per-replica 8192`` (bench/README.md, "Replicas on Ray Serve").

Writes bench/results/issue37/ray_routing.json (``--out``). Not a test: nothing asserts on timings.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
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

SYSTEMS = [
    "You are a patient programming tutor. Explain ideas in plain words, give one short example "
    "in Python for each idea, point out the most common mistake beginners make with it, and end "
    "with a one-line question that checks the student understood. Keep every answer under a "
    "hundred words, never use tables, and never repeat the question back to the student.",
    "You are a travel planner for people who take trains in Europe. For every request name the "
    "route, the rough travel time, one place worth a stop on the way and one thing to book in "
    "advance. Prefer night trains where they exist, mention the cheapest sensible option first, "
    "and answer in short sentences without lists unless the traveller asks for one.",
    "You are a careful editor of short business emails. Rewrite what you are given so that it "
    "is polite, direct and at most five sentences long, keep every fact and date exactly as "
    "written, remove filler words, and after the rewrite add one line that says what you "
    "changed and why, in the fewest words that make it clear.",
]
QUESTIONS = [
    "How do lists differ from tuples, and when should I use each of them in a real program?",
    "I want to go from Paris to Vienna next month with a stop somewhere interesting. Ideas?",
    "Please rewrite: hi team just checking in about the report that is due friday, thanks.",
    "What does a dictionary comprehension do, and can you show me one that filters values?",
    "Which route from Amsterdam to Copenhagen avoids flying and takes less than a day?",
    "Please rewrite: sorry for the late reply, the meeting moved to tuesday at ten, ok?",
    "Why does my loop that removes items from a list while iterating skip some of them?",
    "Is there a night train from Munich to Rome, and is it worth it compared to the day train?",
    "Can you explain what a generator is and why it might save memory in a large program?",
    "I have two days between Zurich and Milan; what is one stop you would not miss?",
    "Please rewrite: we need the numbers by end of day otherwise the launch slips, thx.",
    "What is the difference between is and == in Python, with one example where it matters?",
]


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def run_workload(server: ServerProcess, name: str, a: argparse.Namespace) -> dict:
    import openai
    client = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=600)
    records, failures = [], []
    lock = threading.Lock()

    def session(s: int) -> None:
        rng = random.Random(1000 + s)  # the same pauses in every setup
        messages = [{"role": "system", "content": SYSTEMS[s % a.systems]}]
        time.sleep(rng.uniform(0, a.think_s))  # users do not start at once (within --think-s)
        for t in range(a.turns):
            if t:
                time.sleep(rng.uniform(a.think_min_s, a.think_s))  # reading the reply, typing the next
            q = QUESTIONS[(s * 5 + t * 7) % len(QUESTIONS)]
            messages.append({"role": "user", "content": f"(turn {t + 1}) {q}"})
            start = time.monotonic()
            first, text, usage, replica = None, [], None, None
            try:
                raw = client.chat.completions.with_raw_response.create(
                    model=name, messages=messages, max_completion_tokens=a.max_tokens,
                    temperature=0, stream=True, stream_options={"include_usage": True})
                replica = raw.headers.get("x-specdec-replica", "single")
                for chunk in raw.parse():
                    if chunk.choices and chunk.choices[0].delta.content:
                        if first is None:
                            first = time.monotonic() - start
                        text.append(chunk.choices[0].delta.content)
                    if chunk.usage is not None:
                        usage = chunk.usage
            except Exception as e:  # noqa: BLE001 - counted: none expected
                with lock:
                    failures.append(f"session {s} turn {t}: {e!r}")
                return
            reply = "".join(text)
            messages.append({"role": "assistant", "content": reply})
            cached = usage.prompt_tokens_details.cached_tokens if usage and usage.prompt_tokens_details else 0
            with lock:
                records.append({"session": s, "turn": t, "replica": replica, "ttft_s": first,
                                "seconds": time.monotonic() - start,
                                "prompt_tokens": usage.prompt_tokens if usage else 0,
                                "cached_tokens": cached or 0,
                                "completion_tokens": usage.completion_tokens if usage else 0})

    start = time.monotonic()
    threads = [threading.Thread(target=session, args=(s,)) for s in range(a.sessions)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.monotonic() - start
    prompt = sum(r["prompt_tokens"] for r in records)
    cached = sum(r["cached_tokens"] for r in records)
    ttfts = [r["ttft_s"] for r in records if r["ttft_s"] is not None]
    later = [r["ttft_s"] for r in records if r["ttft_s"] is not None and r["turn"] > 0]
    sticky, last, moves = {}, {}, 0
    for r in sorted(records, key=lambda r: (r["session"], r["turn"])):
        sticky.setdefault(r["session"], set()).add(r["replica"])
        moves += r["session"] in last and last[r["session"]] != r["replica"]
        last[r["session"]] = r["replica"]
    return {"requests": len(records), "failed": failures, "wall_s": round(wall, 3),
            "prompt_tokens": prompt, "cached_tokens": cached,
            "hit_rate": round(cached / prompt, 4) if prompt else None,
            "ttft_p50_s": pct(ttfts, 50), "ttft_p90_s": pct(ttfts, 90),
            "ttft_later_turns_p50_s": pct(later, 50),
            "output_tokens_per_s": round(sum(r["completion_tokens"] for r in records) / wall, 2),
            "moves": moves, "later_turns": sum(1 for r in records if r["turn"] > 0),
            "replicas_per_session": {str(k): sorted(v) for k, v in sorted(sticky.items())},
            "records": records}


def summarize(rs: list) -> dict:
    """One setup's runs: the mean hit rate (and each run's), the median TTFTs, the mean
    throughput, every run's moves and failures, and the runs themselves."""
    def mean(key):
        xs = [r[key] for r in rs if r[key] is not None]
        return round(sum(xs) / len(xs), 4) if xs else None

    def median(key):
        return pct([r[key] for r in rs if r[key] is not None], 50)

    return {"runs": len(rs), "hit_rate": mean("hit_rate"), "hit_rate_runs": [r["hit_rate"] for r in rs],
            "prompt_tokens": mean("prompt_tokens"), "cached_tokens": mean("cached_tokens"),
            "ttft_p50_s": median("ttft_p50_s"), "ttft_p90_s": median("ttft_p90_s"),
            "ttft_later_turns_p50_s": median("ttft_later_turns_p50_s"),
            "output_tokens_per_s": mean("output_tokens_per_s"),
            "moves_runs": [r["moves"] for r in rs], "later_turns": rs[0]["later_turns"],
            "failed": [f for r in rs for f in r["failed"]], "results": rs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct-q4_1")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--systems", type=int, default=2, choices=[1, 2, 3])
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=128, help="each reply's length (a chat's)")
    ap.add_argument("--think-s", type=float, default=2.0,
                    help="a user's pause before each turn: uniform in [--think-min-s, this] seconds, "
                         "seeded per session (the same in every setup); the first turns start within "
                         "[0, this]")
    ap.add_argument("--think-min-s", type=float, default=0.0,
                    help="the shortest pause between a reply and the next turn (reading it, typing)")
    ap.add_argument("--max-num-seqs", type=int, default=8)
    ap.add_argument("--threads-per-replica", type=int, default=1,
                    help="SPECDEC_CPU_THREADS of each Ray replica (the single server uses every core)")
    ap.add_argument("--setups", default="single,prefix,ray-default")
    ap.add_argument("--repeats", type=int, default=3,
                    help="runs of each setup, taking turns; figures are means over them")
    ap.add_argument("--router-kwargs", default=None, help="the prefix router's options (JSON)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "issue37" / "ray_routing.json"))
    ap.add_argument("--kv-tokens-per-replica", type=int, default=3072,
                    help="each replica's KV cache in tokens (the single server gets --replicas times "
                         "as much: the same memory in all); 0: sized by the server (auto)")
    a = ap.parse_args()
    if not 0 <= a.think_min_s <= a.think_s:
        ap.error(f"--think-min-s {a.think_min_s}: between 0 and --think-s ({a.think_s})")
    if a.repeats < 1:
        ap.error(f"--repeats: {a.repeats} is not allowed: give 1 or more runs of each setup")
    path = str(specdec.fetch(a.model, progress=True)) if not os.path.exists(a.model) else a.model
    llm = specdec.LLM(path, progress=False, max_model_len=256, kv_cache_memory_bytes=64 << 20)
    group = llm.runner.kv_config.groups[0]
    block_bytes = group.bytes_per_block
    block_tokens = group.token_capacity // max(1, group.usable_blocks)
    report = {"workload": {k: getattr(a, k) for k in ("model", "replicas", "sessions", "systems", "turns",
                                                       "max_tokens", "think_s", "think_min_s", "max_num_seqs", "threads_per_replica", "repeats",
                                                       "kv_tokens_per_replica", "router_kwargs")},
              "machine": machine_info(llm.context), "ray_version": None, "setups": {}}
    del llm
    # the KV memory: a whole number of blocks for the tokens asked, and the null block
    per_replica = ((a.kv_tokens_per_replica + block_tokens - 1) // block_tokens + 1) * block_bytes
    report["workload"]["kv_bytes_per_replica"] = per_replica if a.kv_tokens_per_replica else "auto"
    import ray
    report["ray_version"] = ray.__version__
    logs = ROOT / "bench" / "out" / "ray_routing_logs"  # the servers' own output (not kept in git)
    logs.mkdir(parents=True, exist_ok=True)
    setups = a.setups.split(",")
    runs = {setup: [] for setup in setups}
    # the setups take turns (single, prefix, ray-default, single, ...) so that a slow spell of
    # the machine does not fall on one of them; Ray's default router chooses at random, so its
    # hit rate differs from run to run: each setup's figures are the mean of its runs
    for setup in [x for _ in range(a.repeats) for x in setups]:
        context = min(4096, a.kv_tokens_per_replica) if a.kv_tokens_per_replica else 4096
        common = ["--model", path, "--served-model-name", "m", "--max-num-seqs", str(a.max_num_seqs),
                  "--max-model-len", str(context)]
        env = {}
        if a.kv_tokens_per_replica:
            common += ["--kv-cache-memory", str(per_replica * (a.replicas if setup == "single" else 1))]
        if setup == "single":
            args = common
        else:
            args = common + ["--ray", "--num-replicas", str(a.replicas), "--router", setup,
                             "--replica-cpus", str(max(0.1, (os.cpu_count() or 2) / a.replicas))]
            if setup == "prefix" and a.router_kwargs:
                args += ["--router-kwargs", a.router_kwargs]
            env["SPECDEC_CPU_THREADS"] = str(a.threads_per_replica)
        sys.stderr.write(f"== {setup}\n")
        server = ServerProcess(args, str(logs / f"{setup}-{len(runs[setup]) + 1}.log"), timeout=600, env=env)
        try:
            if setup != "single":  # /health answers once one replica is up: wait for all of them
                deadline = time.monotonic() + 300
                while time.monotonic() < deadline:
                    _, body, _ = server.request("GET", "/replicas")
                    reps = body.get("replicas", [])
                    if len(reps) == a.replicas and all(r.get("healthy") for r in reps):
                        break
                    time.sleep(0.5)
                else:
                    raise RuntimeError(f"not {a.replicas} healthy replicas in 300 s: {body}")
            result = run_workload(server, "m", a)
        finally:
            code = server.stop()
            if code != 0 and setup != "single":
                subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "stop", "--force"],
                               capture_output=True, timeout=120)
        runs[setup].append(result)
        sys.stderr.write(f"   hit rate {result['hit_rate']}, {result['moves']} of {result['later_turns']} "
                         f"turns moved, TTFT p50 {result['ttft_p50_s']}, {result['output_tokens_per_s']} "
                         f"tok/s, failed {len(result['failed'])}\n")
        write_report(report, runs, a.out)  # after every run: a later one that fails loses nothing
    targets = report.get("targets")
    if targets:
        sys.stderr.write(f"hit rate: prefix / single = {targets['prefix_vs_single']} (target >= 0.9), "
                         f"prefix / ray-default = {targets['prefix_vs_ray_default']} (target >= 1.5; "
                         f"single / ray-default, about the most a router can reach: "
                         f"{targets['single_vs_ray_default']})\n")
    print(a.out)
    return 0


def _ratio(x, y):
    return round(x / y, 3) if x is not None and y else None


def write_report(report: dict, runs: dict, out: str) -> None:
    """The runs so far, each setup summarized, and the targets once every setup has run."""
    report["setups"] = {setup: summarize(rs) for setup, rs in runs.items() if rs}
    s = report["setups"]
    if "prefix" in s and "single" in s and "ray-default" in s:
        hp, hs, hd = s["prefix"]["hit_rate"], s["single"]["hit_rate"], s["ray-default"]["hit_rate"]
        report["targets"] = {
            "prefix_vs_single": _ratio(hp, hs), "prefix_vs_single_target": 0.9,
            "prefix_vs_ray_default": _ratio(hp, hd), "prefix_vs_ray_default_target": 1.5,
            # about the most any router can reach against Ray's: one cache holding every conversation
            # once (the single server, same memory) loses only what no cache can hold (the new
            # part of each prompt, and the start of a conversation)
            "single_vs_ray_default": _ratio(hs, hd),
            # run i of prefix against run i of ray-default (the spread of the ratio above)
            "prefix_vs_ray_default_runs": [_ratio(p["hit_rate"], d["hit_rate"])
                                           for p, d in zip(runs["prefix"], runs["ray-default"])],
        }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(out, json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())
