import numpy as np
import pytest

import specdec


def plan(example, blocks=8, max_model_len=1024, dtype="f16"):
    return specdec.plan_kv_cache(specdec.example_model_layers(example, 16, dtype), 0, max_model_len,
                                 num_blocks_override=blocks)


def raw_values(raw, view, part, slots, dtype):
    """Reads a part through the view's strides on the host (independent of the C++ gather)."""
    p = view.k if part == "k" else view.v
    if dtype == "f16":
        elems = raw.view(np.float16).astype(np.float32)
    elif dtype == "bf16":
        elems = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
        elems = raw.view(np.float32)
    bs = view.spec.block_size
    out = np.zeros((len(slots), p.num_heads, p.width), np.float32)
    for t, s in enumerate(slots):
        if s < 0:
            continue
        for h in range(p.num_heads):
            start = p.offset + (s // bs) * p.stride_block + (s % bs) * p.stride_slot + h * p.stride_head
            out[t, h] = elems[start:start + p.width]
    return out


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("layout", ["kv_major", "block_major"])
def test_write_through_owner_read_through_sharer(context, dtype, layout):
    cfg = plan("gemma3n-like", dtype=dtype)
    cache = specdec.allocate_kv_cache(cfg, default_layout=layout, device=context)
    assert cache.view("layers.23").tensor_index == cache.view("layers.18").tensor_index
    assert cache.view("layers.23").layout == layout
    rng = np.random.default_rng(0)
    slots = np.array([5 * 16 + 3, 2 * 16, -1, 7 * 16 + 15, 1 * 16 + 9], np.int32)
    key = rng.standard_normal((5, 2, 256), dtype=np.float32)
    value = rng.standard_normal((5, 2, 256), dtype=np.float32)
    cache.write_kv("layers.18", key, value, slots)
    raw = cache.read_tensor(cache.view("layers.18").tensor_index)
    tol = {"f32": 0, "f16": 1e-3, "bf16": 1e-2}[dtype]
    mask = (slots >= 0)[:, None, None]
    for part, src in (("k", key), ("v", value)):
        through_sharer = cache.gather("layers.23", part, slots)
        np.testing.assert_allclose(through_sharer, np.where(mask, src, 0), rtol=tol, atol=1e-6)
        np.testing.assert_array_equal(raw_values(raw, cache.view("layers.23"), part, slots, dtype), through_sharer)
    # nothing else was written
    other = cache.read_tensor(cache.view("layers.0").tensor_index)
    assert not other.any()


def test_mla_latent_row_split_and_zero_sized_part(context):
    for lora, rope in ((512, 64), (64, 0)):
        layers = [specdec.LayerKvSpec("m0", specdec.MLAAttentionSpec(16, lora, rope, "f32")),
                  specdec.LayerKvSpec("m1", specdec.MLAAttentionSpec(16, lora, rope, "f32"), "m0")]
        cfg = specdec.plan_kv_cache(layers, 0, 256, num_blocks_override=4)
        cache = specdec.allocate_kv_cache(cfg, device=context)
        view = cache.view("m1")
        assert view.layout == "mla_latent" and view.shape == [4, 16, lora + rope]
        assert (view.k.width, view.v.width) == (lora, rope)
        slots = np.array([17, 18, 40], np.int32)
        k = np.arange(3 * lora, dtype=np.float32).reshape(3, 1, lora)
        v = -np.arange(3 * rope, dtype=np.float32).reshape(3, 1, rope)
        cache.write_kv("m0", k, v, slots)
        np.testing.assert_array_equal(cache.gather("m1", "k", slots), k)
        np.testing.assert_array_equal(cache.gather("m1", "v", slots), v)
        raw = cache.read_tensor(0).view(np.float32).reshape(4, 16, lora + rope)
        np.testing.assert_array_equal(raw[1, 1, :lora], k[0, 0])
        np.testing.assert_array_equal(raw[1, 1, lora:], v[0, 0])


def test_aliasing_with_different_layouts_is_an_error(context):
    cfg = plan("gemma3n-like")
    with pytest.raises(ValueError, match="identical layouts"):
        specdec.allocate_kv_cache(cfg, layouts={"layers.20": "block_major"}, device=context)
    with pytest.raises(ValueError, match="layout = 'nhd'"):
        specdec.allocate_kv_cache(cfg, layouts={"layers.0": "nhd"}, device=context)
    with pytest.raises(specdec.UnsupportedError, match="mla_latent"):
        specdec.make_layer_views(cfg, {"layers.0": "mla_latent"})


def test_bad_writes_name_the_field(context):
    cfg = plan("smollm2-135m", blocks=4)
    cache = specdec.allocate_kv_cache(cfg, device=context)
    k = np.zeros((2, 3, 64), np.float32)
    with pytest.raises(ValueError, match=r"slot_mapping\[1\] = 64"):
        cache.write_kv("layers.0", k, k, np.array([0, 64], np.int32))
    with pytest.raises(ValueError, match="key"):
        cache.write_kv("layers.0", np.zeros((2, 3, 32), np.float32), k, np.array([0, 1], np.int32))
    with pytest.raises(ValueError, match="layer_name = 'layers.99'"):
        cache.view("layers.99")


def test_slot_mappings_are_checked_before_narrowing(context):
    cfg = plan("smollm2-135m", blocks=4)
    cache = specdec.allocate_kv_cache(cfg, device=context)
    k = np.ones((1, 3, 64), np.float32)
    for bad, match in ((np.array([6.9]), "integer array"), (np.array([[1]], np.int32), "1-D"),
                       (np.array([2**32 + 5], np.int64), r"slot_mapping\[0\] = 4294967301"),
                       (np.array([-2], np.int64), r"slot_mapping\[0\] = -2")):
        with pytest.raises(ValueError, match=match):
            cache.write_kv("layers.0", k, k, bad)
    # a wrong value shape is found before the key is written: nothing changes
    with pytest.raises(ValueError, match="value"):
        cache.write_kv("layers.0", k, np.ones((1, 3, 32), np.float32), np.array([5], np.int64))
    assert not cache.read_tensor(0).any()
    cache.write_kv("layers.0", k, k, np.array([5], np.uint16))
    assert cache.read_tensor(0).any()


def test_device_by_index():
    cfg = plan("smollm2-135m", blocks=2)
    assert specdec.allocate_kv_cache(cfg, device=0).num_tensors == 30
