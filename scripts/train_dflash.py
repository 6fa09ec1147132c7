"""Trains a small DFlash block drafter for a target model here, on the CPU, and evaluates it.

    .venv/bin/pip install jax optax              # training only: never a dependency of specdec
    .venv/bin/python scripts/train_dflash.py data  --target stories260K.gguf --out /tmp/dflash_data.npz
    .venv/bin/python scripts/train_dflash.py train --target stories260K.gguf --data /tmp/dflash_data.npz \
        --out data/dflash-stories260k
    .venv/bin/python scripts/train_dflash.py eval  --target stories260K.gguf --drafter data/dflash-stories260k

data: the target writes its own training text (a short sampled opening, then its greedy
continuation for half of the sequences, so that drafts learn what greedy decoding accepts, and a
continuation sampled at temperature 0.7 for the other half, for more varied stories), and its
residual stream after
the drafter's target layers is read at every position (the last layer's after the final norm, as
Hugging Face lists hidden states and as specdec's target writes them for the drafter).

train: the drafter is z-lab's DFlash architecture (Qwen3-style layers, fc + hidden_norm over the
concatenated hidden states, non-causal attention over [context K/V, block]); the target's token
embedding and output head are frozen and not saved. Each example: a sequence, an anchor a, the
block [token a, mask x (B - 1)] at positions a .. a + B - 1 with the context of positions < a;
loss: cross-entropy of the masks' logits against tokens a + 1 .. a + B - 1. JAX + optax.

eval: specdec with method dflash on held-out openings against plain decoding (lossless checked),
greedy: acceptance per draft position, mean acceptance length, tokens/s.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- data
def collect(a: argparse.Namespace) -> int:
    import specdec
    from specdec import _core
    llm = specdec.LLM(a.target, progress=False, max_num_seqs=64, max_model_len=a.seq_len)
    cfg = llm.runner.config
    layers = [int(x) for x in a.layers.split(",")]
    bos = llm.tokenizer.bos_token_id
    rng = np.random.default_rng(a.seed)
    opens = []
    for i in range(a.sequences):
        n = int(rng.integers(2, 10))
        opens.append(specdec.SamplingParams(temperature=1.0, max_tokens=n, seed=int(rng.integers(1 << 30)),
                                            ignore_eos=True))
    first = llm.generate([{"prompt_token_ids": [bos]}] * a.sequences, opens)
    prefixes = [[bos] + list(o.outputs[0].token_ids) for o in first]
    # every other sequence greedy to its end, the others sampled at --temperature (more stories:
    # greedy continuations of short openings fall into a few)
    greedy = [specdec.SamplingParams(temperature=0 if i % 2 == 0 else a.temperature,
                                     max_tokens=a.seq_len - len(p) - 1, ignore_eos=True,
                                     seed=int(rng.integers(1 << 30)))
              for i, p in enumerate(prefixes)]
    outs = llm.generate([{"prompt_token_ids": p} for p in prefixes], greedy)
    seqs = [p + list(o.outputs[0].token_ids) for p, o in zip(prefixes, outs)]
    T = max(len(s) for s in seqs)
    tokens = np.full((len(seqs), T), -1, dtype=np.int32)
    hidden = np.zeros((len(seqs), T, len(layers) * cfg.hidden_size), dtype=np.float32)
    want = [-1 if l == cfg.num_layers - 1 else l for l in layers]  # HF: the last one after the norm
    for i, s in enumerate(seqs):
        out = llm.runner.step([_core.StepRequest(f"d{i}", s, num_logits=1)], hidden_layers=want)
        llm.runner.free(f"d{i}")
        tokens[i, :len(s)] = s
        hidden[i, :len(s)] = np.concatenate([out.hidden[l] for l in want], axis=-1)
    np.savez_compressed(a.out, tokens=tokens, hidden=hidden, layers=np.array(layers))
    print(f"wrote {a.out}: {len(seqs)} sequences of up to {T} tokens, hidden after layers {layers}")
    return 0


# ---------------------------------------------------------------- the model (JAX)
def target_tables(path: str):
    import gguf
    r = gguf.GGUFReader(path)
    t = {x.name: x for x in r.tensors}
    for name in ("token_embd.weight", "output.weight"):
        if name in t and t[name].tensor_type.name != "F32":
            raise SystemExit(f"{path}: {name} is {t[name].tensor_type.name}; this script reads F32 tensors")
    emb = np.array(t["token_embd.weight"].data, dtype=np.float32)
    head = np.array(t["output.weight"].data, dtype=np.float32) if "output.weight" in t else emb
    return emb, head


def target_context(path: str) -> int:
    import specdec
    return specdec.load_model_config(path).context_length


def init_params(cfg: dict, rng: np.random.Generator) -> dict:
    d, hd = cfg["hidden_size"], cfg["head_dim"]
    h, kvh, ff = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]
    n_ctx = len(cfg["dflash_config"]["target_layer_ids"])

    def mat(o, i):
        return (rng.standard_normal((o, i)) / math.sqrt(i)).astype(np.float32)

    p = {"norm.weight": np.ones(d, np.float32), "fc.weight": mat(d, n_ctx * d),
         "hidden_norm.weight": np.ones(d, np.float32)}
    for i in range(cfg["num_hidden_layers"]):
        q = f"layers.{i}."
        p.update({q + "input_layernorm.weight": np.ones(d, np.float32),
                  q + "self_attn.q_proj.weight": mat(h * hd, d), q + "self_attn.k_proj.weight": mat(kvh * hd, d),
                  q + "self_attn.v_proj.weight": mat(kvh * hd, d),
                  q + "self_attn.o_proj.weight": mat(d, h * hd) * 0.5,
                  q + "self_attn.q_norm.weight": np.ones(hd, np.float32),
                  q + "self_attn.k_norm.weight": np.ones(hd, np.float32),
                  q + "post_attention_layernorm.weight": np.ones(d, np.float32),
                  q + "mlp.gate_proj.weight": mat(ff, d), q + "mlp.up_proj.weight": mat(ff, d),
                  q + "mlp.down_proj.weight": mat(d, ff) * 0.5})
    return p


def make_loss(cfg: dict, emb, head):
    import jax
    import jax.numpy as jnp
    d, hd = cfg["hidden_size"], cfg["head_dim"]
    nh, kvh = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    B = cfg["dflash_config"]["block_size"]
    mask_id = cfg["dflash_config"]["mask_token_id"]
    inv = theta ** (-2.0 * jnp.arange(hd // 2) / hd)
    emb, head = jnp.asarray(emb), jnp.asarray(head)

    def rms(x, w):
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w

    def rope(x, pos):  # x [..., P, heads, hd], pos [..., P]: neox halves
        ang = pos[..., None].astype(jnp.float32) * inv  # [..., P, hd/2]
        c, s = jnp.cos(ang)[..., None, :], jnp.sin(ang)[..., None, :]
        x0, x1 = x[..., : hd // 2], x[..., hd // 2:]
        return jnp.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)

    def loss(p, hidden, tokens, anchors):
        # hidden [S, T, n*d], tokens [S, T] (-1: padding), anchors [S, A]
        S, T = tokens.shape
        A = anchors.shape[1]
        ctx = rms(hidden @ p["fc.weight"].T, p["hidden_norm.weight"])  # [S, T, d]
        pos_ctx = jnp.arange(T)
        blk_pos = anchors[..., None] + jnp.arange(B)  # [S, A, B]
        first = jnp.take_along_axis(tokens, anchors, axis=1)  # [S, A]
        ids = jnp.concatenate([first[..., None], jnp.full((S, A, B - 1), mask_id)], axis=-1)
        x = emb[jnp.maximum(ids, 0)]  # [S, A, B, d]
        visible = pos_ctx[None, None, :] < anchors[..., None]  # [S, A, T]
        group = nh // kvh
        for i in range(cfg["num_hidden_layers"]):
            q_ = f"layers.{i}."
            k_ctx = rms((ctx @ p[q_ + "self_attn.k_proj.weight"].T).reshape(S, T, kvh, hd), p[q_ + "self_attn.k_norm.weight"])
            k_ctx = rope(k_ctx, jnp.broadcast_to(pos_ctx, (S, T)))
            v_ctx = (ctx @ p[q_ + "self_attn.v_proj.weight"].T).reshape(S, T, kvh, hd)
            h = rms(x, p[q_ + "input_layernorm.weight"])
            q = rms((h @ p[q_ + "self_attn.q_proj.weight"].T).reshape(S, A, B, nh, hd), p[q_ + "self_attn.q_norm.weight"])
            q = rope(q, blk_pos)
            kb = rms((h @ p[q_ + "self_attn.k_proj.weight"].T).reshape(S, A, B, kvh, hd), p[q_ + "self_attn.k_norm.weight"])
            kb = rope(kb, blk_pos)
            vb = (h @ p[q_ + "self_attn.v_proj.weight"].T).reshape(S, A, B, kvh, hd)
            qg = q.reshape(S, A, B, kvh, group, hd)
            sc_ctx = jnp.einsum("sabkgd,stkd->sakgbt", qg, k_ctx) / math.sqrt(hd)
            sc_ctx = jnp.where(visible[:, :, None, None, None, :], sc_ctx, -1e30)
            sc_blk = jnp.einsum("sabkgd,sackd->sakgbc", qg, kb) / math.sqrt(hd)
            sc = jnp.concatenate([sc_ctx, sc_blk], axis=-1)
            pr = jax.nn.softmax(sc, axis=-1)
            o = (jnp.einsum("sakgbt,stkd->sabkgd", pr[..., :T], v_ctx)
                 + jnp.einsum("sakgbc,sackd->sabkgd", pr[..., T:], vb))
            x = x + o.reshape(S, A, B, nh * hd) @ p[q_ + "self_attn.o_proj.weight"].T
            h = rms(x, p[q_ + "post_attention_layernorm.weight"])
            g = jax.nn.silu(h @ p[q_ + "mlp.gate_proj.weight"].T) * (h @ p[q_ + "mlp.up_proj.weight"].T)
            x = x + g @ p[q_ + "mlp.down_proj.weight"].T
        logits = rms(x[:, :, 1:], p["norm.weight"]) @ head.T  # [S, A, B-1, V]
        lab_pos = anchors[..., None] + jnp.arange(1, B)  # [S, A, B-1]
        labels = jnp.take_along_axis(tokens, jnp.minimum(lab_pos, T - 1).reshape(S, -1), axis=1).reshape(S, A, B - 1)
        valid = (lab_pos < T) & (labels >= 0)
        logp = jax.nn.log_softmax(logits, axis=-1)
        nll = -jnp.take_along_axis(logp, jnp.maximum(labels, 0)[..., None], axis=-1)[..., 0]
        return jnp.sum(nll * valid) / jnp.maximum(jnp.sum(valid), 1), ((logits.argmax(-1) == labels) & valid, valid)

    return loss


def train(a: argparse.Namespace) -> int:
    import jax
    import jax.numpy as jnp
    import optax
    data = np.load(a.data)
    tokens, hidden, layers = data["tokens"], data["hidden"], [int(x) for x in data["layers"]]
    emb, head = target_tables(a.target)
    vocab, d = emb.shape
    cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": d,
           "num_hidden_layers": a.draft_layers, "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
           "head_dim": a.head_dim, "intermediate_size": a.ff, "hidden_act": "silu", "rms_norm_eps": 1e-6,
           "rope_theta": 10000.0, "max_position_embeddings": target_context(a.target), "vocab_size": vocab,
           "attention_bias": False,
           "dflash_config": {"target_layer_ids": layers, "block_size": a.block_size, "mask_token_id": a.mask_token_id}}
    rng = np.random.default_rng(a.seed)
    params = {k: jnp.asarray(v) for k, v in init_params(cfg, rng).items()}
    n = tokens.shape[0]
    held = max(1, n // 20)  # the last 5 %: validation
    lengths = (tokens >= 0).sum(1)
    loss_fn = make_loss(cfg, emb, head)
    sched = optax.warmup_cosine_decay_schedule(0.0, a.lr, 100, a.steps, a.lr * 0.05)
    opt = optax.adamw(sched, weight_decay=0.01)
    state = opt.init(params)

    @jax.jit
    def step(params, state, h, t, an):
        (l, aux), g = jax.value_and_grad(lambda p: loss_fn(p, h, t, an), has_aux=True)(params)
        upd, state = opt.update(g, state, params)
        return optax.apply_updates(params, upd), state, l

    @jax.jit
    def evaluate(params, h, t, an):
        l, (hit, valid) = loss_fn(params, h, t, an)
        return l, hit, valid

    def batch(idx):
        an = np.stack([rng.integers(1, max(2, lengths[i] - 1), size=a.anchors) for i in idx])
        return jnp.asarray(hidden[idx]), jnp.asarray(tokens[idx]), jnp.asarray(an.astype(np.int32))

    start = time.time()
    for it in range(1, a.steps + 1):
        idx = rng.choice(n - held, size=a.batch, replace=False)
        params, state, l = step(params, state, *batch(idx))
        if it % 200 == 0 or it == a.steps:
            idx = np.arange(n - held, n)
            vl, hit, valid = evaluate(params, *batch(idx))
            hit, valid = np.asarray(hit), np.asarray(valid)
            acc = hit.sum((0, 1)) / np.maximum(valid.sum((0, 1)), 1)
            # accepted drafts per block if drafts stop at the first miss (greedy verification)
            run = np.cumprod(hit, axis=-1).sum(-1).mean()
            print(f"step {it}: train loss {float(l):.3f}, held-out loss {float(vl):.3f}, top-1 per position "
                  f"{np.round(acc, 2).tolist()}, accepted per block {run:.2f} ({time.time() - start:.0f} s)",
                  flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg["specdec_training"] = {"target": Path(a.target).name, "sequences": int(n), "steps": a.steps,
                               "batch": a.batch, "anchors_per_sequence": a.anchors, "seed": a.seed,
                               "script": "scripts/train_dflash.py"}
    from specdec._files import write_file_atomic
    from specdec.testing.dflash import write_safetensors  # NumPy only
    write_file_atomic(out / "config.json", json.dumps(cfg, indent=1) + "\n", "--out")
    write_safetensors(out / "model.safetensors", {k: np.asarray(v) for k, v in params.items()}, "F32")
    print(f"wrote {out}/config.json and model.safetensors")
    return 0


# ---------------------------------------------------------------- evaluation with specdec
def evaluate_drafter(a: argparse.Namespace) -> int:
    import specdec
    rng = np.random.default_rng(a.seed + 1)  # openings the training data did not use
    plain = specdec.LLM(a.target, progress=False, max_num_seqs=1, max_model_len=128)
    bos = plain.tokenizer.bos_token_id
    opens = [specdec.SamplingParams(temperature=1.0, max_tokens=int(rng.integers(2, 10)),
                                    seed=int(rng.integers(1 << 30)), ignore_eos=True) for _ in range(a.prompts)]
    prompts = [[bos] + list(o.outputs[0].token_ids)
               for o in plain.generate([{"prompt_token_ids": [bos]}] * a.prompts, opens)]
    tok = plain.tokenizer
    texts = ["Once upon a time", "Lily and Ben went to the park", "The little dog was sad because"]
    prompts += [tok.encode(t, add_special=True) for t in texts]
    greedy = specdec.SamplingParams(temperature=0, max_tokens=a.max_tokens, ignore_eos=True)
    result = {"prompts": len(prompts), "max_tokens": a.max_tokens, "rows": []}
    for k in [int(x) for x in a.ks.split(",")]:
        spec = specdec.LLM(a.target, progress=False, max_num_seqs=1, max_model_len=128, speculative_config={
            "method": "dflash", "model": a.drafter, "num_speculative_tokens": k})
        drafts = accepted = 0
        per_pos = np.zeros(k)
        t_plain = t_spec = 0.0
        tokens = 0
        lossless = True
        for p in prompts:
            t0 = time.perf_counter()
            want = plain.generate({"prompt_token_ids": p}, greedy)[0]
            t1 = time.perf_counter()
            got = spec.generate({"prompt_token_ids": p}, greedy)[0]
            t2 = time.perf_counter()
            t_plain += t1 - t0
            t_spec += t2 - t1
            lossless = lossless and got.outputs[0].token_ids == want.outputs[0].token_ids
            m = spec.last_metrics
            drafts += m["num_drafts"]
            accepted += m["num_accepted_tokens"]
            per_pos[:len(m["num_accepted_tokens_per_pos"])] += np.asarray(m["num_accepted_tokens_per_pos"])
            tokens += len(got.outputs[0].token_ids)
        row = {"k": k, "lossless": lossless, "drafts": drafts, "accepted_tokens": accepted,
               "accepted_per_step": accepted / max(drafts, 1),
               "mean_acceptance_length": 1 + accepted / max(drafts, 1),
               "acceptance_per_position": (per_pos / max(drafts, 1)).tolist(),
               "tokens_per_s": tokens / t_spec, "plain_tokens_per_s": tokens / t_plain,
               "speedup_vs_plain": t_plain / t_spec}
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
    if a.json:
        from specdec._files import write_file_atomic
        write_file_atomic(a.json, json.dumps(result, indent=1) + "\n", "--json")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("data")
    p.add_argument("--target", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--sequences", type=int, default=2000)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--layers", default="0,2,4", help="the target's layers whose output the drafter reads")
    p.add_argument("--temperature", type=float, default=0.7, help="of the sampled half of the sequences")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=collect)
    p = sub.add_parser("train")
    p.add_argument("--target", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--draft-layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=16)
    p.add_argument("--ff", type=int, default=192)
    p.add_argument("--block-size", type=int, default=8)
    p.add_argument("--mask-token-id", type=int, default=0)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--anchors", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=train)
    p = sub.add_parser("eval")
    p.add_argument("--target", required=True)
    p.add_argument("--drafter", required=True)
    p.add_argument("--prompts", type=int, default=20)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--ks", default="3,5,7")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    p.set_defaults(func=evaluate_drafter)
    a = ap.parse_args()
    return a.func(a)


if __name__ == "__main__":
    sys.exit(main())
