import pytest

import specdec


def manager(example="gemma3-270m", blocks=64, max_model_len=4096, block_size=16):
    layers = specdec.example_model_layers(example, block_size)
    cfg = specdec.plan_kv_cache(layers, 0, max_model_len, num_blocks_override=blocks)
    return specdec.KvCacheManager(cfg), cfg


def test_sliding_group_frees_blocks_that_left_the_window():
    m, cfg = manager(blocks=200)
    assert m.num_groups == 2
    r = m.allocate_slots("a", 0, 1000)  # 63 blocks in each group
    assert r.ok and bool(r)
    assert m.num_free_blocks(0) == m.num_free_blocks(1) == 199 - 63
    # next step: the query at 1000 sees 489..1000 -> blocks 0..29 (positions < 480) are freed
    assert m.allocate_slots("a", 1000, 1).ok
    table = m.block_table("a", 0)
    assert table[:30] == [0] * 30 and 0 not in table[30:]
    assert m.num_free_blocks(0) == 199 - 63 + 30
    assert 0 not in m.block_table("a", 1)  # the global group keeps everything
    m.free("a")
    assert m.num_free_blocks(0) == m.num_free_blocks(1) == 199
    assert m.usage == 0


def test_out_of_blocks_is_a_result_and_changes_nothing():
    m, _ = manager(blocks=10)
    assert m.allocate_slots("a", 0, 100).ok  # 7 blocks per group
    free = [m.num_free_blocks(g) for g in range(2)]
    r = m.allocate_slots("b", 0, 64)  # needs 4, 2 are free
    assert not r.ok and r.group_id == 0 and r.blocks_needed == 4 and r.blocks_free == 2
    assert repr(r) == "AllocationResult(out of blocks: group 0 needs 4 new blocks, 2 free)"
    assert [m.num_free_blocks(g) for g in range(2)] == free
    assert not m.can_allocate("b", 0, 64)
    m.free("a")
    assert m.allocate_slots("b", 0, 64).ok


def test_rollback_and_bad_input():
    m, _ = manager(example="smollm2-135m", blocks=32)
    assert m.allocate_slots("a", 0, 40).ok  # 3 blocks
    assert m.allocate_slots("a", 40, 5).ok  # verify 1 + 4 drafts: 45 tokens, still 3 blocks
    m.truncate("a", 33)  # 2 drafts rejected
    assert len(m.block_table("a", 0)) == 3
    m.truncate("a", 30)
    assert len(m.block_table("a", 0)) == 2 and m.num_free_blocks(0) == 29
    with pytest.raises(ValueError, match="request_id"):
        m.free("nope")
    with pytest.raises(ValueError, match="num_new_tokens"):
        m.allocate_slots("a", 30, -1)
    with pytest.raises(ValueError):
        m.allocate_slots("a", 30, 5000)  # beyond max_model_len
