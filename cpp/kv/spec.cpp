#include "kv/spec.h"

#include <algorithm>

#include "common/errors.h"
#include "common/math.h"

namespace specdec::kv {
namespace {

constexpr int kMaxBlockSize = 1 << 16;
constexpr int kMaxHeads = 1 << 12;
constexpr int kMaxHeadSize = 1 << 16;

void check_range(int value, int lo, int hi, const char* field) {
  SPECDEC_CHECK(value >= lo && value <= hi, field, value,
               str_cat("must be in [", lo, ", ", hi, "]"));
}

}  // namespace

std::string kind_name(KvSpecKind kind) {
  switch (kind) {
    case KvSpecKind::kFullAttention: return "full_attention";
    case KvSpecKind::kSlidingWindow: return "sliding_window";
    case KvSpecKind::kChunkedLocal: return "chunked_local";
    case KvSpecKind::kMla: return "mla";
  }
  return "unknown";
}

KvCacheSpec KvCacheSpec::full_attention(int block_size, int num_kv_heads, int head_size,
                                        DType dtype, int head_size_v) {
  KvCacheSpec s;
  s.kind = KvSpecKind::kFullAttention;
  s.block_size = block_size;
  s.num_kv_heads = num_kv_heads;
  s.head_size = head_size;
  s.head_size_v = head_size_v < 0 ? head_size : head_size_v;
  s.dtype = dtype;
  s.validate();
  return s;
}

KvCacheSpec KvCacheSpec::sliding(int block_size, int num_kv_heads, int head_size, DType dtype,
                                 int sliding_window, int head_size_v) {
  KvCacheSpec s = full_attention(block_size, num_kv_heads, head_size, dtype, head_size_v);
  s.kind = KvSpecKind::kSlidingWindow;
  s.sliding_window = sliding_window;
  s.validate();
  return s;
}

KvCacheSpec KvCacheSpec::chunked_local(int block_size, int num_kv_heads, int head_size,
                                       DType dtype, int attention_chunk_size, int head_size_v) {
  KvCacheSpec s = full_attention(block_size, num_kv_heads, head_size, dtype, head_size_v);
  s.kind = KvSpecKind::kChunkedLocal;
  s.attention_chunk_size = attention_chunk_size;
  s.validate();
  return s;
}

KvCacheSpec KvCacheSpec::mla(int block_size, int kv_lora_rank, int qk_rope_head_dim, DType dtype) {
  KvCacheSpec s;
  s.kind = KvSpecKind::kMla;
  s.block_size = block_size;
  s.num_kv_heads = 1;
  s.kv_lora_rank = kv_lora_rank;
  s.qk_rope_head_dim = qk_rope_head_dim;
  s.head_size = kv_lora_rank + qk_rope_head_dim;
  s.head_size_v = 0;
  s.dtype = dtype;
  s.validate();
  return s;
}

void KvCacheSpec::validate() const {
  check_range(block_size, 1, kMaxBlockSize, "block_size");
  dtype_size(dtype);  // throws on a value outside the enum
  if (kind == KvSpecKind::kMla) {
    check_range(kv_lora_rank, 0, kMaxHeadSize, "kv_lora_rank");
    check_range(qk_rope_head_dim, 0, kMaxHeadSize, "qk_rope_head_dim");
    SPECDEC_CHECK(kv_lora_rank + qk_rope_head_dim > 0, "kv_lora_rank + qk_rope_head_dim",
                 kv_lora_rank + qk_rope_head_dim, "the MLA latent row must not be empty");
    SPECDEC_CHECK(num_kv_heads == 1, "num_kv_heads", num_kv_heads, "MLA caches have one latent head");
    SPECDEC_CHECK(head_size == kv_lora_rank + qk_rope_head_dim, "head_size", head_size,
                 str_cat("for MLA must equal kv_lora_rank + qk_rope_head_dim = ",
                         kv_lora_rank + qk_rope_head_dim));
    return;
  }
  check_range(num_kv_heads, 1, kMaxHeads, "num_kv_heads");
  check_range(head_size, 1, kMaxHeadSize, "head_size");
  check_range(head_size_v, 1, kMaxHeadSize, "head_size_v");
  if (kind == KvSpecKind::kSlidingWindow) {
    SPECDEC_CHECK(sliding_window >= 1, "sliding_window", sliding_window, "must be >= 1 token");
  }
  if (kind == KvSpecKind::kChunkedLocal) {
    SPECDEC_CHECK(attention_chunk_size >= 1, "attention_chunk_size", attention_chunk_size,
                 "must be >= 1 token");
    SPECDEC_CHECK(attention_chunk_size % block_size == 0, "attention_chunk_size",
                 attention_chunk_size,
                 str_cat("must be a multiple of block_size = ", block_size,
                         " (chunks are made of whole blocks)"));
  }
}

int KvCacheSpec::k_width() const { return kind == KvSpecKind::kMla ? kv_lora_rank : head_size; }
int KvCacheSpec::v_width() const {
  return kind == KvSpecKind::kMla ? qk_rope_head_dim : head_size_v;
}

int64_t KvCacheSpec::page_size_bytes() const {
  const int64_t row = int64_t{k_width()} + v_width();  // elements per token per head
  int64_t bytes = checked_mul(block_size, num_kv_heads, "page_size_bytes");
  bytes = checked_mul(bytes, row, "page_size_bytes");
  return checked_mul(bytes, static_cast<int64_t>(dtype_size(dtype)), "page_size_bytes");
}

int64_t KvCacheSpec::bytes_per_token() const { return page_size_bytes() / block_size; }

int64_t KvCacheSpec::max_blocks_per_request(int64_t max_model_len,
                                            int64_t max_num_batched_tokens) const {
  SPECDEC_CHECK(max_model_len >= 1 && max_model_len <= kMaxTokens, "max_model_len", max_model_len,
               str_cat("must be in [1, ", kMaxTokens, "]"));
  SPECDEC_CHECK(max_num_batched_tokens >= 1 && max_num_batched_tokens <= kMaxTokens,
               "max_num_batched_tokens", max_num_batched_tokens,
               str_cat("must be in [1, ", kMaxTokens, "]"));
  switch (kind) {
    case KvSpecKind::kFullAttention:
    case KvSpecKind::kMla:
      return cdiv(max_model_len, block_size);
    case KvSpecKind::kSlidingWindow: {
      // The window may start mid-block: one block more than the tokens need.
      const int64_t n = std::min<int64_t>(int64_t{sliding_window} - 1 + max_num_batched_tokens, max_model_len);
      return std::min(cdiv(n, block_size) + 1, cdiv(max_model_len, block_size));
    }
    case KvSpecKind::kChunkedLocal: {
      const int64_t n = std::min<int64_t>(int64_t{attention_chunk_size} + max_num_batched_tokens, max_model_len);
      return cdiv(n, block_size);
    }
  }
  return 0;
}

int64_t KvCacheSpec::max_memory_usage_bytes(int64_t max_model_len,
                                            int64_t max_num_batched_tokens) const {
  return checked_mul(max_blocks_per_request(max_model_len, max_num_batched_tokens),
                     page_size_bytes(), "max_memory_usage_bytes");
}

KvCacheSpec KvCacheSpec::with_block_size(int new_block_size) const {
  KvCacheSpec s = *this;
  s.block_size = new_block_size;
  s.validate();
  return s;
}

std::string KvCacheSpec::to_string() const {
  std::string out = str_cat(kind_name(kind), "(block_size=", block_size);
  if (kind == KvSpecKind::kMla) {
    out += str_cat(", kv_lora_rank=", kv_lora_rank, ", qk_rope_head_dim=", qk_rope_head_dim);
  } else {
    out += str_cat(", num_kv_heads=", num_kv_heads, ", head_size=", head_size);
    if (head_size_v != head_size) out += str_cat(", head_size_v=", head_size_v);
  }
  if (kind == KvSpecKind::kSlidingWindow) out += str_cat(", sliding_window=", sliding_window);
  if (kind == KvSpecKind::kChunkedLocal) {
    out += str_cat(", attention_chunk_size=", attention_chunk_size);
  }
  return out + str_cat(", dtype=", dtype_name(dtype), ")");
}

}  // namespace specdec::kv
