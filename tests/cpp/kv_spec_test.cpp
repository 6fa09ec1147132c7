#include <gtest/gtest.h>

#include "common/errors.h"
#include "kv/spec.h"

using namespace specdec;
using namespace specdec::kv;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

}  // namespace

TEST(KvSpec, PageSizesPerDtype) {
  // 16 tokens * 8 heads * (128 + 128) elements
  const int64_t elems = 16 * 8 * 256;
  EXPECT_EQ(KvCacheSpec::full_attention(16, 8, 128, DType::kF32).page_size_bytes(), elems * 4);
  EXPECT_EQ(KvCacheSpec::full_attention(16, 8, 128, DType::kF16).page_size_bytes(), elems * 2);
  EXPECT_EQ(KvCacheSpec::full_attention(16, 8, 128, DType::kBF16).page_size_bytes(), elems * 2);
  EXPECT_EQ(KvCacheSpec::full_attention(16, 8, 128, DType::kI8).page_size_bytes(), elems);
  // separate V head size: 16 * 8 * (192 + 128) * 2
  EXPECT_EQ(KvCacheSpec::full_attention(16, 8, 192, DType::kF16, 128).page_size_bytes(), 16 * 8 * 320 * 2);
  // MLA: one latent row, no factor 2: 64 * (512 + 64) * 2
  EXPECT_EQ(KvCacheSpec::mla(64, 512, 64, DType::kF16).page_size_bytes(), 64 * 576 * 2);
  // vLLM-ascend's worked example: 64 tokens, head 8, fp16 -> 1024 bytes
  EXPECT_EQ(KvCacheSpec::mla(64, 8, 0, DType::kF16).page_size_bytes(), 1024);
  EXPECT_EQ(KvCacheSpec::full_attention(16, 8, 128, DType::kF16).bytes_per_token(), 8 * 256 * 2);
}

TEST(KvSpec, MaxMemoryPerRequest) {
  const auto full = KvCacheSpec::full_attention(16, 1, 64, DType::kF16);  // page 4096
  EXPECT_EQ(full.max_memory_usage_bytes(1000, 2048), 63 * 4096);        // cdiv(1000, 16)
  const auto sw = KvCacheSpec::sliding(16, 1, 64, DType::kF16, 128);
  // min(128 - 1 + 64, 100000) = 191 -> cdiv 12 + 1 = 13
  EXPECT_EQ(sw.max_blocks_per_request(100000, 64), 13);
  // never more than the request itself can fill: max_model_len 100 -> 7 blocks
  EXPECT_EQ(sw.max_blocks_per_request(100, 64), 7);
  const auto chunk = KvCacheSpec::chunked_local(16, 1, 64, DType::kF16, 256);
  EXPECT_EQ(chunk.max_blocks_per_request(100000, 64), 20);  // (256 + 64) / 16
  EXPECT_EQ(chunk.max_blocks_per_request(200, 64), 13);     // cdiv(200, 16)
  const auto mla = KvCacheSpec::mla(16, 512, 64, DType::kBF16);
  EXPECT_EQ(mla.max_memory_usage_bytes(4096, 2048), 256 * mla.page_size_bytes());
}

TEST(KvSpec, BadValuesNameTheField) {
  EXPECT_NE(error_of([] { KvCacheSpec::full_attention(0, 1, 64, DType::kF16); }).find("block_size = 0"), std::string::npos);
  EXPECT_NE(error_of([] { KvCacheSpec::full_attention(16, -2, 64, DType::kF16); }).find("num_kv_heads = -2"), std::string::npos);
  EXPECT_NE(error_of([] { KvCacheSpec::full_attention(16, 1, 0, DType::kF16); }).find("head_size = 0"), std::string::npos);
  EXPECT_NE(error_of([] { KvCacheSpec::full_attention(16, 1, 64, DType::kF16, 0); }).find("head_size_v = 0"), std::string::npos);
  EXPECT_NE(error_of([] { KvCacheSpec::sliding(16, 1, 64, DType::kF16, 0); }).find("sliding_window = 0"), std::string::npos);
  EXPECT_NE(error_of([] { KvCacheSpec::chunked_local(16, 1, 64, DType::kF16, 100); }).find("attention_chunk_size = 100"), std::string::npos);
  EXPECT_NE(error_of([] { KvCacheSpec::mla(16, 0, 0, DType::kF16); }).find("kv_lora_rank + qk_rope_head_dim = 0"), std::string::npos);
  EXPECT_NE(error_of([] { KvCacheSpec::mla(16, -1, 64, DType::kF16); }).find("kv_lora_rank = -1"), std::string::npos);
  EXPECT_NE(error_of([] { parse_dtype("f8"); }).find("dtype = 'f8'"), std::string::npos);
  EXPECT_EQ(parse_dtype("BFloat16"), DType::kBF16);
}
