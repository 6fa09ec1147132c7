"""``speculative_config`` as the engine uses it: the C++ ``SpeculativeConfig`` (validated there,
vLLM's field names) plus what Python adds — a custom proposer object, the drafter's file, the
split of one KV budget between target and drafter, and the proposer itself.

``speculative_config`` may be None, a ``SpeculativeConfig``, a dict (keyword names as keys; for
``method: "custom"`` the key ``"proposer"`` may hold a ``specdec.Proposer`` object) or a JSON
string (as ``specdec generate --speculative-config`` takes it).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from specdec import _core
from specdec._checks import error
from specdec._json import check_depth
from specdec.draft_vocab import draft_vocab_ids, read_ranking
from specdec.hub import resolve_model
from specdec.model import load_model_config
from specdec.proposers import Proposer

SpeculativeConfig = _core.spec_decode.SpeculativeConfig


def _check_proposer(obj: Any, field: str) -> Any:
    """A custom proposer must be an instance of a specdec.Proposer subclass."""
    allowed = "a proposer object: an instance of a specdec.Proposer subclass that defines propose(requests)"
    if isinstance(obj, type):
        raise error(field, obj, allowed + " (an instance, not the class)")
    if not isinstance(obj, Proposer) or not callable(getattr(obj, "propose", None)):
        raise error(field, obj, allowed)
    return obj


def _class_path(path: Any, field: str) -> tuple:
    """``(module, class)`` from ``"module:Class"`` or ``"module.Class"``; the shape only (nothing
    is imported)."""
    allowed = "'module:Class' or 'module.Class' naming a specdec.Proposer subclass"
    text = path if isinstance(path, str) else ""
    mod, sep, name = text.partition(":")
    if not sep:
        mod, _, name = text.rpartition(".")
    if not (mod and name.isidentifier() and all(part.isidentifier() for part in mod.split("."))):
        raise error(field, path, allowed)
    return mod, name


def _load_class(path: str, field: str) -> Any:
    """Imports ``module`` (its code runs: see "Trust" in docs/speculative.md), checks that
    ``Class`` is a specdec.Proposer subclass, and only then instantiates it with no arguments."""
    mod, name = _class_path(path, field)
    allowed = "'module:Class' or 'module.Class' naming a specdec.Proposer subclass"
    try:
        cls = getattr(importlib.import_module(mod), name)
    except Exception as e:  # noqa: BLE001 - ImportError, AttributeError or the module's own error
        raise error(field, path, f"{allowed} ({type(e).__name__}: {e})") from None
    if not isinstance(cls, type):
        raise error(field, path, f"{allowed} ({path} is not a class)")
    if not issubclass(cls, Proposer):
        raise error(field, path, f"{allowed} ({cls.__module__}.{cls.__qualname__} is not a "
                    "subclass of specdec.Proposer; it was not instantiated)")
    try:
        obj = cls()
    except Exception as e:  # noqa: BLE001 - any failure of a user's constructor, named
        raise error(field, path, f"{allowed} constructible with no arguments "
                    f"({type(e).__name__}: {e})") from None
    return _check_proposer(obj, field)


class Speculation:
    def __init__(self, config: Optional["SpeculativeConfig"], custom: Any = None) -> None:
        self.config = config
        self.custom = custom

    def resolve_drafter(self, progress: bool) -> Optional[str]:
        if self.config is None or not self.config.uses_drafter():
            return None
        c = self.config.drafter_config()
        if c.method == "dflash":  # a checkpoint directory (config.json + model.safetensors)
            p = Path(c.model).expanduser()
            if not (p / "config.json").is_file() or not (p / "model.safetensors").is_file():
                raise ValueError(f"speculative_config.model = {c.model!r}: a DFlash drafter directory with "
                                 "config.json (dflash_config) and model.safetensors is allowed")
            return str(p)
        try:
            return resolve_model(c.model, progress=progress)
        except ValueError as e:
            raise ValueError(f"speculative_config.model = {c.model!r}: the drafter: {e}") from None

    def split_budget(self, target_path: str, drafter_path: Optional[str], total: int,
                     max_model_len: int, block_size: int, dtype: str,
                     max_num_batched_tokens: int, target_disable_hybrid: bool = False) -> Dict[str, Any]:
        """The target's and the drafter's shares of one KV budget, and the rule used."""
        if drafter_path is None:
            return {"target_bytes": total, "drafter_bytes": 0, "rule": "no drafter: all to the target"}
        c = self.config.drafter_config()  # a hybrid's draft_model part
        if c.draft_kv_cache_memory_bytes:
            d = c.draft_kv_cache_memory_bytes
            if d >= total:
                raise ValueError(f"speculative_config.draft_kv_cache_memory_bytes = {d}: less than "
                                 f"kv_cache_memory_bytes = {total} (the drafter's share of it)")
            return {"target_bytes": total - d, "drafter_bytes": d,
                    "rule": f"drafter: draft_kv_cache_memory_bytes = {d}"}
        t_cfg, d_cfg = load_model_config(target_path), load_model_config(drafter_path)
        # one max_model_len request of the target in each model (the drafter's own, shorter
        # max_model_len only lowers its need, so its share is an upper bound then)
        length = max_model_len or min(t_cfg.context_length, d_cfg.context_length)
        dt = {"f32": "f32", "f16": "f16", "bf16": "bf16", "int8": "int8"}.get(dtype.lower(), dtype)
        plan = _core.plan_target_and_drafter(
            t_cfg.layer_kv_specs(block_size, dt), d_cfg.layer_kv_specs(block_size, c.kv_cache_dtype or dt),
            total, length, c.draft_kv_cache_fraction or None, max_num_batched_tokens, "target", "drafter",
            target_disable_hybrid, drafter_unified(c, d_cfg))
        return {"target_bytes": plan.target_budget_bytes, "drafter_bytes": plan.drafter_budget_bytes,
                "rule": plan.split}

    def load_drafter(self, context, path: str, target_max_model_len: int, kv_bytes: int,
                     block_size: int, dtype: str, max_num_batched_tokens: int, max_num_logits: int,
                     progress, enable_prefix_caching: bool = False) -> "_core.ModelRunner":
        c = self.config.drafter_config()  # a hybrid's draft_model part
        # a drafter with a shorter context holds what it can; past it, it stops drafting
        length = min(target_max_model_len, load_model_config(path).context_length)
        if c.max_model_len:
            if c.max_model_len > target_max_model_len:
                raise ValueError(f"speculative_config.max_model_len = {c.max_model_len}: at most the "
                                 f"target's max_model_len = {target_max_model_len}")
            length = c.max_model_len
        ids = self.draft_vocab_ids(path)
        # the drafter's own backend: None / auto selects independently, never the target's
        try:
            return _core.ModelRunner(context, path, attention_backend=c.attention_backend or "",
                                     max_model_len=length, kv_cache_memory_bytes=kv_bytes,
                                     block_size=block_size, kv_cache_dtype=c.kv_cache_dtype or dtype,
                                     max_num_batched_tokens=max_num_batched_tokens,
                                     max_num_logits=max_num_logits, progress=progress, logit_token_ids=ids,
                                     disable_hybrid_kv_cache_manager=c.disable_hybrid_kv_cache_manager,
                                     enable_prefix_caching=enable_prefix_caching)
        except ValueError as e:
            raise ValueError(f"speculative_config: the drafter {c.model!r} with a KV-cache budget of "
                             f"{kv_bytes} bytes (its share of kv_cache_memory_bytes; see "
                             f"draft_kv_cache_memory_bytes / draft_kv_cache_fraction): {e}") from None

    def draft_vocab_ids(self, path: str) -> List[int]:
        """The drafter's reduced vocabulary (speculative_config.draft_vocab_size; [] for all)."""
        c = self.config.drafter_config()  # a hybrid's draft_model part
        if not c.draft_vocab_size:
            return []
        tok = _core.Tokenizer.from_file(path)
        vocab = load_model_config(path).vocab_size
        ranking = read_ranking(c.draft_vocab_file, tok.vocab_size) if c.draft_vocab_file else None
        return draft_vocab_ids(c.draft_vocab_size, vocab, list(tok.eog_token_ids), ranking)

    def context_follows_target(self) -> bool:
        """Whether the drafter's cache holds the target's hidden states (DFlash) rather than its
        own computation: then a prefix the target takes from its cache must be in the drafter's
        cache too (the scheduler claims both, for the same length)."""
        c = self.config
        return c is not None and c.drafter_config().method == "dflash"

    def make_proposer(self, target, drafter) -> Any:
        c = self.config
        if c is None:
            return None
        if c.method == "hybrid":  # each part drafts at most its own num_speculative_tokens
            return _core.spec_decode.HybridProposer([self._make(part, target, drafter) for part in c.proposers],
                                                    [part.num_speculative_tokens for part in c.proposers])
        return self._make(c, target, drafter)

    def _make(self, c: "SpeculativeConfig", target, drafter) -> Any:
        n = target.max_model_len
        if c.method == "ngram":
            return _core.spec_decode.NgramProposer(c.prompt_lookup_min, c.prompt_lookup_max, n)
        if c.method == "suffix":
            return _core.spec_decode.SuffixProposer(c.suffix_decoding_max_tree_depth,
                                             c.suffix_decoding_max_cached_requests,
                                             c.suffix_decoding_max_spec_factor,
                                             c.suffix_decoding_min_token_prob, n)
        if c.method == "draft_model":
            return _core.spec_decode.DraftModelProposer(drafter, target.config.vocab_size)
        if c.method == "dflash":
            block = drafter.config.dflash_block_size
            if c.num_speculative_tokens > block - 1:
                raise ValueError(f"speculative_config.num_speculative_tokens = {c.num_speculative_tokens}: at "
                                 f"most the DFlash drafter's block_size - 1 = {block - 1}")
            return _core.spec_decode.DFlashProposer(target, drafter)
        if c.method == "layer_skip":
            return _core.spec_decode.LayerSkipProposer(target, 0 if c.exit_layer == "auto" else c.exit_layer)
        return self.custom if self.custom is not None else _load_class(c.model, "speculative_config.model")


def drafter_unified(config: "SpeculativeConfig", drafter_cfg: Any) -> bool:
    """Whether the drafter's KV cache is one group managed as full attention: its config's
    switch, and always for a DFlash drafter (its runner plans it so: its sliding layers keep
    their whole K/V)."""
    return bool(config.disable_hybrid_kv_cache_manager or drafter_cfg.is_dflash)


def _plain_value(v: Any) -> Any:
    """NumPy scalars as Python numbers (JSON-like values otherwise unchanged)."""
    if hasattr(v, "item") and type(v).__module__ == "numpy" and getattr(v, "shape", None) == ():
        return v.item()
    return v


def build_speculation(value: Any, load: bool = True) -> Speculation:
    """Checks ``speculative_config`` (before anything loads).

    For ``method: "custom"`` with ``model: "module:Class"``, ``load`` imports the module and
    instantiates the class (a specdec.Proposer subclass); ``load=False`` checks the string's
    shape only and imports nothing (what planning needs: ``specdec kv-plan``, ``backends``).
    """
    allowed = ("None, a SpeculativeConfig, a dict such as {'method': 'ngram', "
               "'num_speculative_tokens': 4}, or its JSON text")
    if value is None:
        return Speculation(None)
    if isinstance(value, SpeculativeConfig):
        return Speculation(value, _custom_class(value, load))
    if isinstance(value, str):
        return build_speculation(_core.spec_decode.SpeculativeConfig.from_json(value), load) if value.strip() \
            else Speculation(None)
    if not isinstance(value, Mapping):
        raise error("speculative_config", value, allowed)
    fields = dict(value)
    custom = fields.pop("proposer", None)
    if custom is not None:
        if fields.get("method", "custom") != "custom":
            raise error("speculative_config.proposer", custom, "only with method 'custom'")
        _check_proposer(custom, "speculative_config.proposer")
        fields["method"] = "custom"
        fields.setdefault("model", f"{type(custom).__module__}:{type(custom).__qualname__}")
    for key, v in list(fields.items()):
        if not isinstance(key, str):
            raise error("speculative_config", key, "string keys (field names)")
        v = fields[key] = _plain_value(v)
        check_depth(f"speculative_config.{key}", v, "a JSON-like value (string, number, None)")
        try:
            json.dumps(v, allow_nan=False)
        except (TypeError, ValueError):
            raise error(f"speculative_config.{key}", v, "a JSON-like value (string, number, None)") from None
    config = SpeculativeConfig.from_json(json.dumps(fields))
    return Speculation(config, custom if custom is not None else _custom_class(config, load))


def _custom_class(config: "SpeculativeConfig", load: bool) -> Any:
    """The proposer that ``model: "module:Class"`` names (None for other methods, or when not
    ``load``: then the name's shape alone is checked)."""
    if config.method != "custom":
        return None
    if not load:
        _class_path(config.model, "speculative_config.model")
        return None
    return _load_class(config.model, "speculative_config.model")


__all__ = ["Speculation", "SpeculativeConfig", "build_speculation"]
