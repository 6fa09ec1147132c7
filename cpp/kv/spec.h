// Per-layer KV-cache specs: what one attention layer stores per token, and how many bytes
// one block of it (a page) and one request of max_model_len can take.
//
//   kind            page_size_bytes (one block of one layer)
//   full            block_size * num_kv_heads * (head_size + head_size_v) * dtype_size
//   sliding_window  same as full; blocks that left the window are freed
//   chunked_local   same as full; blocks of finished chunks are freed
//   mla             block_size * (kv_lora_rank + qk_rope_head_dim) * dtype_size  (one latent row,
//                   no K/V factor of 2; num_kv_heads is 1)
#pragma once

#include <cstdint>
#include <string>

#include "common/dtype.h"

namespace specdec::kv {

enum class KvSpecKind { kFullAttention, kSlidingWindow, kChunkedLocal, kMla };

std::string kind_name(KvSpecKind kind);  // "full_attention", "sliding_window", ...

struct KvCacheSpec {
  KvSpecKind kind = KvSpecKind::kFullAttention;
  int block_size = 16;           // tokens per block
  int num_kv_heads = 1;          // 1 for MLA
  int head_size = 0;             // K head size; for MLA the latent row size (lora + rope)
  int head_size_v = 0;           // V head size; 0 for MLA (the latent row holds both parts)
  DType dtype = DType::kF16;
  int sliding_window = 0;        // tokens, sliding_window kind only
  int attention_chunk_size = 0;  // tokens, chunked_local kind only
  int kv_lora_rank = 0;          // MLA only: k part of the latent row
  int qk_rope_head_dim = 0;      // MLA only: v (rope) part of the latent row

  // Constructors that validate (ConfigError naming the field). head_size_v < 0 means "= head_size".
  static KvCacheSpec full_attention(int block_size, int num_kv_heads, int head_size, DType dtype,
                                    int head_size_v = -1);
  static KvCacheSpec sliding(int block_size, int num_kv_heads, int head_size, DType dtype,
                             int sliding_window, int head_size_v = -1);
  static KvCacheSpec chunked_local(int block_size, int num_kv_heads, int head_size, DType dtype,
                                   int attention_chunk_size, int head_size_v = -1);
  static KvCacheSpec mla(int block_size, int kv_lora_rank, int qk_rope_head_dim, DType dtype);

  // Throws ConfigError naming the first field that is out of range.
  void validate() const;

  int64_t page_size_bytes() const;
  int64_t bytes_per_token() const;  // page_size_bytes / block_size
  // Blocks one request can hold at once: max_model_len tokens, of which at most
  // max_num_batched_tokens are new in one step (windows and chunks free the rest).
  int64_t max_blocks_per_request(int64_t max_model_len, int64_t max_num_batched_tokens) const;
  int64_t max_memory_usage_bytes(int64_t max_model_len, int64_t max_num_batched_tokens) const;
  // The K and V widths of one token of one head as stored: (head_size, head_size_v) for
  // attention, (kv_lora_rank, qk_rope_head_dim) for MLA. Either may be 0 for MLA.
  int k_width() const;
  int v_width() const;

  bool is_attention() const { return kind != KvSpecKind::kMla; }
  KvCacheSpec with_block_size(int new_block_size) const;
  std::string to_string() const;
  bool operator==(const KvCacheSpec& other) const = default;
};

// One attention layer's declaration. A layer with kv_sharing_target reads (and never writes)
// the cache of that earlier layer; its spec must equal the target's.
struct LayerKvSpec {
  std::string layer_name;
  KvCacheSpec spec;
  std::string kv_sharing_target;  // empty: the layer owns its cache
};

}  // namespace specdec::kv
