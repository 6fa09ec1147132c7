import pytest

import specdec


def req(head_size=128, q=8, kv=2, **kw):
    return specdec.AttentionRequirements(head_size, num_q_heads=q, num_kv_heads=kv, **kw)


def test_backends_declare_capabilities_and_layouts():
    caps = {b["name"]: b for b in specdec.attention_backends()}
    assert set(caps) == {"REFERENCE", "OCL_PAGED", "OCL_FLASH", "OCL_MLA", "CPU_PAGED"}
    assert caps["CPU_PAGED"]["mla"] == "both" and caps["CPU_PAGED"]["non_causal"] is True
    assert caps["REFERENCE"]["on_device"] is False and caps["REFERENCE"]["mla"] == "both"
    assert caps["OCL_FLASH"]["non_causal"] is False
    assert caps["OCL_PAGED"]["non_causal"] is True
    assert caps["OCL_MLA"]["mla"] == "only" and caps["OCL_MLA"]["kv_layout"] == "mla_latent"
    assert caps["OCL_FLASH"]["kv_layout"] != caps["OCL_PAGED"]["kv_layout"]
    assert specdec.attention_priority("cpu")[-1] == "REFERENCE"
    assert "CPU_PAGED" not in specdec.attention_priority("cpu")  # PoCL's CPU: the native device's own
    with pytest.raises(specdec.UnsupportedError, match="CPU_PAGED cannot serve.*does not run on opencl devices"):
        specdec.select_backend(req(), "CPU_PAGED", "cpu")


def test_selector_cases():
    assert specdec.select_backend(req(), device_type="cpu")["backend"] == "OCL_FLASH"
    choice = specdec.select_backend(req(use_non_causal=True), device_type="cpu")
    assert choice["backend"] == "OCL_PAGED"
    assert choice["verdicts"][0] == ("OCL_FLASH", ["non-causal attention not supported"])
    mla = specdec.AttentionRequirements.from_spec(specdec.MLAAttentionSpec(16, 512, 64), 16)
    assert specdec.select_backend(mla, "auto", "cpu")["backend"] == "OCL_MLA"
    for name in ("ocl_paged", "OCL_PAGED", "Ocl_Paged"):
        assert specdec.select_backend(req(), name)["backend"] == "OCL_PAGED"
    with pytest.raises(specdec.UnsupportedError, match="OCL_FLASH cannot serve.*head_size 80 not supported"):
        specdec.select_backend(req(80), "OCL_FLASH")
    with pytest.raises(ValueError, match="attention_backend = 'nope'.*valid options are auto"):
        specdec.select_backend(req(), "nope")
    assert "non-MLA not supported" in specdec.validate_backend("ocl_mla", req())


def test_gemma3_and_non_causal_drafter_setups():
    layers = specdec.example_model_layers("gemma3-270m")
    config = specdec.plan_kv_cache(layers, 0, 4096, num_blocks_override=16)
    setup = specdec.initialize_attention(config, 4, device_type="cpu")
    assert [g.kv_cache_group_id for g in setup.attention_groups] == [0, 1]
    assert setup.attention_groups[1].layer_names == ["layers.5", "layers.11", "layers.17"]
    assert "attention group 0 (KV-cache group 0)" in setup.explain()

    plan = specdec.plan_target_and_drafter(specdec.example_model_layers("qwen2.5-coder-1.5b"),
                                           specdec.example_model_layers("qwen2.5-coder-0.5b"), "1GiB", 4096)
    target = specdec.initialize_attention(plan.target, 12, device_type="cpu")
    drafter = specdec.initialize_attention(plan.drafter, 14, use_non_causal=True, device_type="cpu")
    assert target.attention_groups[0].backend != drafter.attention_groups[0].backend
    assert target.layouts["layers.0"] != drafter.layouts["layers.0"]
    t = specdec.allocate_kv_cache(plan.target, target.layouts)
    d = specdec.allocate_kv_cache(plan.drafter, drafter.layouts)
    assert t.view("layers.0").layout == target.layouts["layers.0"]
    assert d.view("layers.0").layout == drafter.layouts["layers.0"]


def test_local_virtual_batches_worked_example():
    md = specdec.CommonAttentionMetadata()
    md.num_reqs, md.block_size, md.max_blocks_per_req = 3, 2, 9
    md.query_start_loc = [0, 4, 14, 19]
    md.seq_lens = [6, 17, 9]
    md.num_computed_tokens = [2, 7, 4]
    md.max_query_len, md.max_seq_len, md.num_actual_tokens = 10, 17, 19
    md.block_table = list(range(27))
    md.slot_mapping = [-1] * 19
    v = specdec.make_local_attention_virtual_batches(4, md)
    assert v.query_start_loc == [0, 2, 4, 5, 9, 13, 14, 18, 19]
    assert v.seq_lens == [4, 2, 4, 4, 4, 1, 4, 1]
    rows = [v.block_table[2 * i:2 * i + 2] for i in range(v.num_reqs)]
    assert rows == [[0, 1], [2, 3], [11, 12], [13, 14], [15, 16], [17, 17], [20, 21], [22, 23]]


def test_per_group_metadata_from_block_managers():
    config = specdec.plan_kv_cache(specdec.example_model_layers("gemma3-270m", 16), 0, 4096,
                                   num_blocks_override=128)
    m = specdec.KvCacheManager(config)
    assert m.allocate_slots("a", 0, 700) and m.allocate_slots("b", 0, 30)
    assert m.allocate_slots("a", 700, 5) and m.allocate_slots("b", 30, 1)
    for g in (0, 1):
        md = specdec.build_common_metadata(m, g, [("a", 700, 5), ("b", 30, 1)])
        assert md.query_start_loc == [0, 5, 6] and md.seq_lens == [705, 31]
        table = m.block_table("a", g)
        assert md.slot_mapping[0] == table[700 // 16] * 16 + 700 % 16
    sliding = specdec.build_common_metadata(m, 0, [("a", 700, 5)])
    assert sliding.block_table[:10] == [0] * 10  # left the 512-token window
    assert 0 not in specdec.build_common_metadata(m, 1, [("a", 700, 5)]).block_table


def test_cli_explains_the_choices(capsys):
    from specdec.cli import main
    assert main(["backends", "--example", "gemma3-270m", "--device-type", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "OCL_FLASH" in out and "OCL_PAGED" in out and "layout" in out
    assert "[target] gemma3-270m: 2 KV-cache group(s), 2 attention group(s)" in out
    assert main(["backends", "--example", "qwen2.5-coder-1.5b", "--drafter-example", "qwen2.5-coder-0.5b",
                 "--drafter-non-causal", "--device-type", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "[drafter] qwen2.5-coder-0.5b" in out and "non-causal" in out
    assert "OCL_FLASH: rejected: non-causal attention not supported" in out
    assert main(["backends", "--example", "qwen2.5-coder-1.5b", "--attention-backend", "OCL_MLA"]) == 2
    assert "non-MLA not supported" in capsys.readouterr().err
