// The KV-cache writes of the native CPU device on host memory (kv/cache_ops.h's ops): new K / V
// rows stored through the slot mapping into a layer's view in its dtype (f32, f16 round to
// nearest even, bf16), the fused q | k | v epilogue (bias, RoPE, q out, K and V in), and the
// gather back. Bitwise kv::kv_cache_write_ref / kv_cache_gather_ref and the separate ops. Tokens
// [t0, t1): a thread pool splits by tokens (distinct tokens have distinct slots). Slot -1 is
// padding and skipped; arguments are checked by the caller (kv::check_slot_mapping, ...).
#pragma once

#include <cstdint>

#include "common/model_types.h"
#include "kv/layout.h"

namespace specdec::cpu {

// Rows of new values: token t's heads start at data + t * token_stride.
struct KvSrc {
  const float* data = nullptr;
  int64_t token_stride = 0;
};

// Stores src into `part` (view.k or view.v: num_heads * width elements a token) of the cache.
void kv_write(uint8_t* cache, const kv::LayerKvView& view, const kv::KvPartView& part, const KvSrc& src,
              const int32_t* slots, int64_t t0, int64_t t1);

// Reads `part` at each slot into dst [t, num_heads * width] (f32); slot -1 rows read as zeros.
void kv_gather(const uint8_t* cache, const kv::LayerKvView& view, const kv::KvPartView& part,
               const int32_t* slots, float* dst, int64_t t0, int64_t t1);

// The fused q | k | v epilogue (kv::QkvEpilogue): x [t, x_stride] holds q (q_heads), k and v
// (kv_heads each) heads of head_size; bias (or null) added, q and k rotated (inv_freq or null:
// rope_dim = head_size, NEOX or adjacent pairs), q to q_out [t, q_stride], k and v to the cache.
struct QkvArgs {
  const float* x = nullptr;
  int64_t x_stride = 0;
  const float* bias = nullptr;
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;
  // With inv_freq: the angles of rope_angles for every token of the call (the step's, shared by its
  // layers), or null: computed here for each part (the same values)
  const float* angles = nullptr;
  bool neox = false;
  float* q_out = nullptr;
  int64_t q_stride = 0;
  int q_heads = 0, kv_heads = 0, head_size = 0;
};
// Items [i0, i1) of tokens x 2 parts: item 2t the q heads of token t, 2t + 1 its k and v heads, so
// that a decode's one token keeps two threads busy (every element's operations are the same
// however the items are split).
void qkv_epilogue(uint8_t* cache, const kv::LayerKvView& view, const QkvArgs& a, const int32_t* slots, int64_t i0,
                  int64_t i1);

}  // namespace specdec::cpu
