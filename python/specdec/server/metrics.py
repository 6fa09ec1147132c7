"""Prometheus metrics under vLLM's names, with ``specdec:`` in place of ``vllm:``.

Counters of the engine (speculative decoding, preemptions, prefix cache) and gauges (running and
waiting requests, KV-cache usage) are read from the engine when scraped; per-request figures
(prompt and generation tokens, time to first token, inter-token latency, end-to-end latency,
finished requests by reason) are observed by the server as requests finish.
"""

from __future__ import annotations

from typing import Any, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

_TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                 80.0, 160.0, 640.0)
_ITL_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
                2.5, 5.0, 10.0, 20.0, 80.0)
_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                120.0, 240.0, 480.0, 960.0, 1920.0)


class _EngineCollector:
    """Reads the engine's totals at scrape time."""

    def __init__(self, llm: Any, model_name: str) -> None:
        self.llm, self.model = llm, model_name

    def describe(self) -> Iterable:
        return []

    def collect(self) -> Iterable:
        llm, labels = self.llm, [self.model]
        core = llm.engine.core
        sched = core.scheduler
        spec = core.stats.spec
        g = GaugeMetricFamily("specdec:num_requests_running", "Requests in the engine's running batch",
                              labels=["model_name"])
        g.add_metric(labels, len(sched.running))
        yield g
        g = GaugeMetricFamily("specdec:num_requests_waiting", "Requests waiting to be scheduled",
                              labels=["model_name"])
        g.add_metric(labels, len(sched.waiting) + len(llm.engine._inbox))
        yield g
        free = llm.runner.num_free_blocks()
        total = [grp.num_blocks - 1 for grp in llm.runner.kv_config.groups]
        used = sum(t - f for t, f in zip(total, free))
        g = GaugeMetricFamily("specdec:kv_cache_usage_perc",
                              "Fraction of the target's KV blocks in use (1 = full; cached free blocks count as free)",
                              labels=["model_name"])
        g.add_metric(labels, used / sum(total) if sum(total) else 0.0)
        yield g
        stats = llm.prefix_cache_stats()
        for name, key, doc in (("prefix_cache_queries", "queries", "Prompt tokens looked up in the prefix cache"),
                               ("prefix_cache_hits", "hits", "Prompt tokens found in the prefix cache")):
            c = CounterMetricFamily(f"specdec:{name}", doc, labels=["model_name"])
            c.add_metric(labels, stats[key])
            yield c
        c = CounterMetricFamily("specdec:num_preemptions", "Preemptions (requests recomputed)",
                                labels=["model_name"])
        c.add_metric(labels, core.stats.num_preemptions)
        yield c
        for name, value, doc in (
                ("spec_decode_num_drafts", spec.num_drafts, "Drafts verified"),
                ("spec_decode_num_draft_tokens", spec.num_draft_tokens, "Draft tokens verified"),
                ("spec_decode_num_accepted_tokens", spec.num_accepted_tokens, "Draft tokens accepted")):
            c = CounterMetricFamily(f"specdec:{name}", doc, labels=["model_name"])
            c.add_metric(labels, value)
            yield c
        c = CounterMetricFamily("specdec:spec_decode_num_accepted_tokens_per_pos",
                                "Draft tokens accepted at each draft position",
                                labels=["model_name", "position"])
        for pos, v in enumerate(spec.num_accepted_tokens_per_pos):
            c.add_metric(labels + [str(pos)], v)
        yield c


class ServerMetrics:
    def __init__(self, llm: Any, model_name: str) -> None:
        self.registry = CollectorRegistry()
        self.model = model_name
        kw = {"labelnames": ["model_name"], "registry": self.registry}
        self.prompt_tokens = Counter("specdec:prompt_tokens", "Prompt tokens of finished requests", **kw)
        self.generation_tokens = Counter("specdec:generation_tokens", "Generated tokens", **kw)
        self.request_success = Counter("specdec:request_success", "Finished requests by reason",
                                       labelnames=["model_name", "finished_reason"], registry=self.registry)
        self.ttft = Histogram("specdec:time_to_first_token_seconds", "Time to first token",
                              buckets=_TTFT_BUCKETS, **kw)
        self.itl = Histogram("specdec:inter_token_latency_seconds",
                             "Time between tokens of a request as the client sees them (a speculative "
                             "step delivers several at once: each after the first counts 0)",
                             buckets=_ITL_BUCKETS, **kw)
        self.e2e = Histogram("specdec:e2e_request_latency_seconds", "Request latency, arrival to finish",
                             buckets=_E2E_BUCKETS, **kw)
        self.registry.register(_EngineCollector(llm, model_name))

    def first_token(self, seconds: float) -> None:
        self.ttft.labels(self.model).observe(seconds)

    def token_gap(self, seconds: float, count: int) -> None:
        h = self.itl.labels(self.model)
        h.observe(seconds)
        for _ in range(count - 1):
            h.observe(0.0)

    def finished(self, prompt_tokens: int, output_tokens: int, reason: str, seconds: float) -> None:
        m = self.model
        self.prompt_tokens.labels(m).inc(prompt_tokens)
        self.generation_tokens.labels(m).inc(output_tokens)
        self.request_success.labels(m, reason).inc()
        self.e2e.labels(m).observe(seconds)
