import json

import pytest

import specdec

GIB = 1 << 30


def gemma3_layers():
    return {f"layers.{i}": (specdec.FullAttentionSpec(16, 1, 256) if i % 6 == 5 else
                            specdec.SlidingWindowSpec(16, 1, 256, sliding_window=512))
            for i in range(18)}


def test_gemma3_plan_has_two_groups():
    plan = specdec.plan_kv_cache(gemma3_layers(), "1GiB", 32768, model_name="gemma3")
    assert [g.spec.kind for g in plan.groups] == ["sliding_window", "full_attention"]
    assert plan.groups[1].layer_names == ["layers.5", "layers.11", "layers.17"]
    assert len(plan.groups[0].layer_names) == 15
    # 16 tokens * 1 head * 512 elements * 2 bytes
    assert plan.groups[0].spec.page_size_bytes == 16384
    assert [g.num_blocks for g in plan.groups] == [1237, 15656]
    assert plan.max_concurrent_requests == 7
    text = specdec.format_kv_plan(plan)
    assert "2 KV-cache groups" in text and "layers.5, 11, 17" in text
    assert "layers.0-4, 6-10, 12-16" in text
    data = json.loads(plan.to_json())
    assert data["groups"][0]["spec"]["sliding_window"] == 512
    assert data["total_bytes"] == plan.total_bytes <= GIB
    # the built-in example is the same model
    example = specdec.example_model_layers("gemma3-270m")
    assert [l.spec for l in example] == list(gemma3_layers().values())


def test_spec_sizes_and_errors_name_the_field():
    assert specdec.FullAttentionSpec(16, 8, 128, dtype="f32").page_size_bytes == 16 * 8 * 256 * 4
    assert specdec.FullAttentionSpec(16, 8, 192, head_size_v=128).page_size_bytes == 16 * 8 * 320 * 2
    assert specdec.MLAAttentionSpec(16, 512, 64, "bf16").page_size_bytes == 16 * 576 * 2
    assert specdec.FullAttentionSpec(16, 2, 64, "int8").page_size_bytes == 16 * 2 * 128
    with pytest.raises(ValueError, match="block_size = 0"):
        specdec.FullAttentionSpec(0, 1, 64)
    with pytest.raises(ValueError, match="num_kv_heads = -1"):
        specdec.FullAttentionSpec(16, -1, 64)
    with pytest.raises(ValueError, match="head_size = 0"):
        specdec.SlidingWindowSpec(16, 1, 0, sliding_window=4)
    with pytest.raises(ValueError, match="dtype = 'fp8'"):
        specdec.FullAttentionSpec(16, 1, 64, dtype="fp8")
    with pytest.raises(ValueError, match="sliding_window = -3"):
        specdec.SlidingWindowSpec(16, 1, 64, sliding_window=-3)
    with pytest.raises(ValueError, match="head_size_v = 0"):
        specdec.FullAttentionSpec(16, 1, 64, head_size_v=0)
    with pytest.raises(ValueError, match="num_kv_heads = 1099511627776"):
        specdec.FullAttentionSpec(16, 2**40, 64)
    with pytest.raises(ValueError, match="qk_rope_head_dim = -1"):
        specdec.MLAAttentionSpec(16, 512, -1)


def test_bad_plans_name_the_field():
    spec = specdec.FullAttentionSpec(16, 2, 64)
    with pytest.raises(ValueError, match=r"a\.sliding_window = 9000: must be <= max_model_len = 4096"):
        specdec.plan_kv_cache({"a": specdec.SlidingWindowSpec(16, 2, 64, 9000)}, GIB, 4096)
    with pytest.raises(ValueError, match=r"b\.kv_sharing_target = 'nope'"):
        specdec.plan_kv_cache([specdec.LayerKvSpec("a", spec), specdec.LayerKvSpec("b", spec, "nope")], GIB, 4096)
    other = specdec.FullAttentionSpec(16, 4, 64)
    with pytest.raises(ValueError, match=r"b\.kv_sharing_target = 'a'.*differs"):
        specdec.plan_kv_cache([specdec.LayerKvSpec("a", spec), specdec.LayerKvSpec("b", other, "a")], GIB, 4096)
    with pytest.raises(ValueError, match="kv_cache_memory_bytes.*largest max_model_len that fits is"):
        specdec.plan_kv_cache({"a": spec}, "1MiB", 32768)
    with pytest.raises(ValueError, match="kv_cache_memory_bytes = 'lots'"):
        specdec.plan_kv_cache({"a": spec}, "lots", 4096)
    with pytest.raises(ValueError, match="max_model_len = 0"):
        specdec.plan_kv_cache({"a": spec}, GIB, 0)


def test_kv_sharing_layers_join_the_target_group():
    layers = specdec.example_model_layers("gemma3n-like")
    plan = specdec.plan_kv_cache(layers, GIB, 32768)
    assert len(plan.tensors) == 20
    assert plan.kv_sharing["layers.24"] == "layers.19"
    assert plan.group_of("layers.29") == plan.group_of("layers.19") == 1
    assert plan.tensor_of("layers.22") == plan.tensor_of("layers.18")
    assert "sharing   8: layers.20-23, 25-28" in specdec.format_kv_plan(plan)


def test_target_and_drafter_from_one_budget():
    target = specdec.example_model_layers("qwen2.5-coder-1.5b")
    drafter = specdec.example_model_layers("qwen2.5-coder-0.5b")
    plan = specdec.plan_target_and_drafter(target, drafter, 4 * GIB, 32768)
    assert plan.target_budget_bytes + plan.drafter_budget_bytes == 4 * GIB
    assert plan.target.max_concurrent_requests == plan.drafter.max_concurrent_requests
    assert "proportional" in plan.split
    text = specdec.format_kv_plan(plan)
    assert "[target]" in text and "[drafter]" in text
    as_text = specdec.plan_target_and_drafter(target, drafter, "4GiB", 32768)
    assert as_text.drafter_budget_bytes == plan.drafter_budget_bytes
    fixed = specdec.plan_target_and_drafter(target, drafter, 4 * GIB, 32768, drafter_fraction=0.25)
    assert fixed.drafter_budget_bytes == GIB
    with pytest.raises(ValueError, match="drafter_fraction"):
        specdec.plan_target_and_drafter(target, drafter, 4 * GIB, 32768, drafter_fraction=0)


def test_parse_bytes():
    assert specdec.parse_bytes("1GiB") == GIB
    assert specdec.parse_bytes("1.5 MiB") == 3 << 19
    assert specdec.parse_bytes("2e9") == 2_000_000_000
    assert specdec.parse_bytes(123) == 123
    for bad in ("-1", "12 parsecs", "", True, -5, "1e400", 2**70):
        with pytest.raises(ValueError, match="kv_cache_memory_bytes"):
            specdec.parse_bytes(bad)
