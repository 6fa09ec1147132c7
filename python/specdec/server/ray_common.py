"""What the ingress and the request router of ``specdec serve --ray`` share: the routing hint of a
request, the prompt text's block hashes, and the routers alive in this process (by deployment
name: the ingress asks them for the replicas, to reach each one's /health and /metrics, and for
their counters). A module of its own: Ray pickles ``ray_router`` by value into other processes,
and a registry or a class copied that way would not be the one the ingress uses."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

ROUTERS: Dict[str, Any] = {}
LOCK = threading.Lock()


def register(name: str, router: Any) -> None:
    with LOCK:
        ROUTERS[name] = router


def get(name: str) -> Any:
    with LOCK:
        return ROUTERS.get(name)


@dataclass
class RoutingHint:
    """What the ingress tells the router about one request (passed as the ``routing`` keyword of
    the engine call; the replica ignores it)."""

    text: str = ""                    # the prompt's text: a chat's messages or a completion's prompt
    avoid: Optional[str] = None       # not this one unless it is the only one (a retry)
    blocks: Optional[List[int]] = field(default=None, repr=False)  # chained hashes, computed once
    # what the router found when it chose (for its counters): a shared preamble only (placed by
    # load), and the longest match on any replica in blocks
    shared: bool = field(default=False, repr=False)
    best_match: int = field(default=0, repr=False)

    def __getstate__(self) -> Dict[str, Any]:  # the replica needs none of it: not sent along
        return {"text": ""}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.text, self.avoid, self.blocks, self.shared, self.best_match = "", None, None, False, 0


def block_hashes(text: str, block_chars: int) -> List[int]:
    """Chained hashes of the text's whole ``block_chars``-character blocks."""
    out: List[int] = []
    h = 0
    for i in range(0, len(text) - block_chars + 1, block_chars):
        h = hash((h, text[i:i + block_chars]))
        out.append(h)
    return out
