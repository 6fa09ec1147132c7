"""Routing and autoscaling of ``specdec serve --ray``'s engine replicas (Ray Serve).

``PrefixAffinityRouter`` is a Ray Serve request router (``ray.serve.request_router.RequestRouter``):
a request goes to the replica whose prefix cache most likely holds its prompt's leading part, unless
that replica is busier than the least loaded one by more than ``max_imbalance`` requests; then (and
for a prompt no replica holds ``min_match_chars`` of) the least loaded replica takes it, among equally
loaded ones the one holding least. What a replica holds is guessed
from what was routed to it: the prompt's text (a chat's messages, a completion's prompt) is cut into
``block_chars``-character blocks (16: a few tokens, so that short shared prompts count), each block's hash chained to the one before it as the engine's
KV blocks are, and each replica keeps the chained hashes routed to it (least recently used out past
``capacity`` blocks). A request's match on a replica is its number of leading blocks found there.

A match that ends where an earlier prompt went on differently is a preamble that several
conversations share (a system prompt, a few-shot header), not a conversation's own history: the
router also keeps, over all replicas, the different blocks seen after each block, and when the
longest match ends at a block that another prompt continued otherwise — and prompts went on from
there in 3 ways or more, or the match holds no earlier prompt's end that fewer than 3 continuations
followed (a conversation's previous turn) — the request is placed by load (among equally loaded
replicas the one holding most of it). Every replica then takes the shared preamble once (one
prefill) instead of one replica taking every conversation that starts with it: with 4 replicas
and 2 system prompts, affinity to the preamble left two replicas idle and the other two short of
memory (bench/README.md, "Replicas on Ray Serve"). A conversation's next turn still matches up
to the end of its previous prompt, where nothing else went on: it stays, and so does an edited
last message or a branch from its middle (an agent's). The guess lives in the process that
routes (the ingress replica); the engines' own caches decide what is hit.

``QueuePolicy`` is a Ray Serve autoscaling policy on the engines' waiting queues (the
``specdec:num_requests_waiting`` that each replica's ``/metrics`` exports, reported to Ray by the
replica's ``record_autoscaling_stats``).

This module imports only the standard library and Ray: Ray pickles the policy by value into its
controller.
"""

from __future__ import annotations

import collections
import math
import random
from typing import Any, Dict, List, Optional, Tuple

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from specdec.server import ray_common
from specdec.server.ray_common import RoutingHint, block_hashes

_ROOT = 0  # next_blocks' key before a prompt's first block
# a block that prompts went on from in this many different ways or more is a point that several
# conversations share (a system prompt, a common first message); in fewer, one conversation's (its
# next turn, an edited message, a regenerated reply, a few branches of an agent's)
_MANY = 3
ROUTER_DEFAULTS = {"block_chars": 16, "min_match_chars": 64, "max_imbalance": 4, "capacity": 1 << 17}
_LOWEST = {"block_chars": 1, "min_match_chars": 0, "max_imbalance": 0, "capacity": 1}


def router_options(kwargs: Dict[str, Any]) -> Dict[str, int]:
    """The router's options over their defaults, or a ValueError naming the one that is wrong."""
    unknown = sorted(set(kwargs) - set(ROUTER_DEFAULTS))
    if unknown:
        raise ValueError(f"router kwargs: unknown {unknown}; known: {', '.join(ROUTER_DEFAULTS)}")
    out = dict(ROUTER_DEFAULTS)
    for name, value in kwargs.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < _LOWEST[name]:
            raise ValueError(f"router kwargs: {name} = {value!r}: an integer >= {_LOWEST[name]}")
        out[name] = value
    return out


class PrefixAffinityRouter(RequestRouter):
    """Prefix affinity first, then load (module docstring)."""

    def initialize_state(self, **kwargs: Any) -> None:
        o = router_options(kwargs)
        block_chars, min_match_chars = o["block_chars"], o["min_match_chars"]
        max_imbalance, capacity = o["max_imbalance"], o["capacity"]
        self.block_chars = block_chars
        # fewer matching blocks than this is no reason to prefer a replica (a few tokens of a
        # template's preamble are in every prompt)
        self.min_blocks = max(1, -(-min_match_chars // block_chars))
        self.max_imbalance = max_imbalance
        self.capacity = capacity
        self.tables: Dict[ReplicaID, "collections.OrderedDict[int, None]"] = {}
        # counters: routed by affinity, routed by load (no replica held the prefix, or the one that
        # did was too busy), of those the ones where a replica held it but was too busy, and routed
        # by load because only a preamble other conversations share matched
        self.stats = {"affinity": 0, "load": 0, "overloaded": 0, "shared": 0}
        # over all replicas: the different blocks seen after each block (chained hash -> up to
        # _MANY next blocks' hashes); least recently used out past capacity entries per replica
        self.next_blocks: "collections.OrderedDict[int, Tuple[int, ...]]" = collections.OrderedDict()
        # over all replicas: the last whole block of each prompt routed (where a conversation's
        # next turn will go on), least recently used out past capacity entries
        self.ends: "collections.OrderedDict[int, None]" = collections.OrderedDict()
        self.matched_blocks = 0
        self.prompt_blocks = 0
        # requests this router sent to each replica and not yet completed: its load as this router
        # knows it at once (Ray's own figure comes from probes, which a busy machine answers late:
        # a replica whose probe misses Ray's deadline is skipped for the next rank)
        self.inflight: Dict[ReplicaID, set] = {}
        ray_common.register(self._deployment_id.name, self)

    # ---- what the ingress asks ----
    def replica_ids(self) -> List[Tuple[str, ReplicaID]]:
        return [(rid.unique_id, rid) for rid in self.curr_replicas]

    def load(self, rid: ReplicaID) -> int:
        """Requests on the replica: those this router sent it, or more when Ray heard of more (from
        other routers' requests, in the replica's own answers)."""
        q = self.replica_queue_len_cache.get(rid)
        return max(len(self.inflight.get(rid, ())), 0 if q is None else q)

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        self.inflight.get(replica_id, set()).discard(internal_request_id)

    # ---- Ray's interface ----
    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self.tables.pop(replica_id, None)
        self.inflight.pop(replica_id, None)

    def update_replicas(self, replicas: List[RunningReplica]) -> None:
        super().update_replicas(replicas)
        live = {r.replica_id for r in replicas}
        for table in (self.tables, self.inflight):
            for rid in list(table):
                if rid not in live:
                    del table[rid]

    async def choose_replicas(self, candidate_replicas: List[RunningReplica],
                              pending_request: Optional[PendingRequest] = None) -> List[List[RunningReplica]]:
        hint = _hint(pending_request)
        if pending_request is not None:  # every rank tried and none took it: Ray waits, then asks again
            pending_request.routing_context.should_backoff = True
        if not candidate_replicas:
            return []
        candidates = list(candidate_replicas)
        if hint is not None and hint.avoid is not None and len(candidates) > 1:
            candidates = [r for r in candidates if r.replica_id.unique_id != hint.avoid] or candidates
        random.shuffle(candidates)  # ties among equally loaded replicas holding as much: any
        # the least loaded first; among equals, the one holding the fewest blocks (new prefixes
        # spread over the replicas' caches)
        by_load = sorted(candidates, key=lambda r: (self.load(r.replica_id),
                                                    len(self.tables.get(r.replica_id, ()))))
        if hint is None or not hint.text:
            self._seed_queue_lens(by_load)
            return [[r] for r in by_load]
        if hint.blocks is None:
            hint.blocks = block_hashes(hint.text, self.block_chars)
        best, best_len = None, self.min_blocks - 1
        matches = {}
        for r in by_load:  # the least loaded among the longest matches
            n = matches[r.replica_id] = self._match(r.replica_id, hint.blocks)
            if n > best_len:
                best, best_len = r, n
        hint.best_match = max(matches.values(), default=0)  # for on_request_routed's counters
        hint.shared = best is not None and self._shared(hint.blocks, best_len)
        if hint.shared:
            # only a preamble other conversations share matched: by load; among equally loaded
            # replicas the one holding most of it (ties: the one holding least in all)
            by_load.sort(key=lambda r: (self.load(r.replica_id), -matches[r.replica_id],
                                        len(self.tables.get(r.replica_id, ()))))
            self._seed_queue_lens(by_load)
            return [[r] for r in by_load]
        least = self.load(by_load[0].replica_id)
        if best is not None and self.load(best.replica_id) - least <= self.max_imbalance:
            ranks = [[best]] + [[r] for r in by_load if r is not best]
        else:
            ranks = [[r] for r in by_load]
        self._seed_queue_lens(by_load)
        return ranks

    def _seed_queue_lens(self, replicas: List[RunningReplica]) -> None:
        """Ray takes a rank's replica without probing it when its queue length is known: the
        loads this router knows, for replicas Ray has no fresh figure of."""
        cache = self.replica_queue_len_cache
        for r in replicas:
            if cache.get(r.replica_id) is None and hasattr(cache, "update"):
                cache.update(r.replica_id, len(self.inflight.get(r.replica_id, ())))

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID,
                          result: Any) -> None:
        hint = _hint(pending_request)
        rid = getattr(getattr(pending_request, "metadata", None), "internal_request_id", None)
        if rid is not None:
            self.inflight.setdefault(replica_id, set()).add(rid)
        if hint is None or not hint.text:
            self.stats["load"] += 1
            return
        blocks = hint.blocks if hint.blocks is not None else block_hashes(hint.text, self.block_chars)
        matched = self._match(replica_id, blocks)
        if hint.shared:
            self.stats["shared"] += 1
        elif matched >= self.min_blocks:
            self.stats["affinity"] += 1
        else:
            self.stats["load"] += 1
            if hint.best_match >= self.min_blocks:
                self.stats["overloaded"] += 1
        self.matched_blocks += matched
        self.prompt_blocks += len(blocks)
        table = self.tables.setdefault(replica_id, collections.OrderedDict())
        for h in blocks:
            table[h] = None
            table.move_to_end(h)
        while len(table) > self.capacity:
            table.popitem(last=False)
        nxt, parent = self.next_blocks, _ROOT
        for h in blocks:
            seen = nxt.get(parent, ())
            if h not in seen and len(seen) < _MANY:
                nxt[parent] = seen + (h,)
            if parent in nxt:
                nxt.move_to_end(parent)
            parent = h
        while len(nxt) > self.capacity * max(1, len(self.tables)):
            nxt.popitem(last=False)
        if blocks:
            self.ends[blocks[-1]] = None
            self.ends.move_to_end(blocks[-1])
            while len(self.ends) > self.capacity:
                self.ends.popitem(last=False)

    def _shared(self, blocks: List[int], matched: int) -> bool:
        """Whether the first `matched` blocks are a preamble other conversations share: they end
        where an earlier prompt went on otherwise, and either prompts went on from there in
        _MANY ways already, or no earlier prompt ended inside them that fewer than _MANY
        continuations followed. A conversation's own history holds the end of its previous
        turn's prompt, which its next turns continue the same way (with the reply): an edited
        last message, a regenerated reply or a few branches of an agent's keep their replica;
        sessions that start alike (a common first message and reply) are spread from the
        (_MANY + 1)-th on; a preamble sent alone once (to warm a cache) counts as shared once
        _MANY conversations went on from it."""
        if matched <= 0 or matched >= len(blocks):
            return False
        seen = self.next_blocks.get(blocks[matched - 1], ())
        if not seen or blocks[matched] in seen:
            return False
        if len(seen) >= _MANY:
            return True
        nxt = self.next_blocks
        return not any(h in self.ends and len(nxt.get(h, ())) < _MANY for h in blocks[:matched])

    def _match(self, rid: ReplicaID, blocks: List[int]) -> int:
        table = self.tables.get(rid)
        if not table:
            return 0
        n = 0
        for h in blocks:
            if h not in table:
                break
            n += 1
        return n


def _hint(pending_request: Optional[PendingRequest]) -> Optional[RoutingHint]:
    if pending_request is None:
        return None
    hint = pending_request.kwargs.get("routing")
    return hint if isinstance(hint, RoutingHint) else None


class QueuePolicy:
    """Replicas for the engines' waiting queues: one more while the waiting requests per replica
    are over ``target_waiting`` (ceil(waiting / target_waiting) at once when far over), one fewer
    when nothing waits and the running requests would fit the other replicas' batches
    (``max_num_seqs`` each) at half their size; Ray applies the deployment's min / max replicas
    and its up- and downscale delays. A Ray Serve class policy: ``policy_kwargs`` reach
    the constructor."""

    def __init__(self, target_waiting: float = 2.0, max_num_seqs: int = 16) -> None:
        self.target = float(target_waiting)
        self.batch = float(max_num_seqs)

    def __call__(self, ctx: Any) -> Tuple[int, Dict[str, Any]]:
        metrics = ctx.aggregated_metrics or {}
        waiting = sum(metrics.get("waiting", {}).values())
        running = sum(metrics.get("running", {}).values())
        current = ctx.current_num_replicas  # running replicas: the ones whose metrics these are
        base = max(current, ctx.target_num_replicas)  # and those still starting: kept
        if current == 0:
            return max(base, 1), {}
        if waiting > self.target * current:
            return max(base, current + 1, math.ceil(waiting / max(self.target, 1e-9))), {}
        if (waiting == 0 and current > 1 and current == ctx.target_num_replicas
                and running <= (current - 1) * self.batch * 0.5):
            return current - 1, {}
        return base, {}
