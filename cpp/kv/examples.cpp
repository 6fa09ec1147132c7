#include "kv/examples.h"

#include <functional>

#include "common/errors.h"

namespace specdec::kv {
namespace {

using Builder = std::function<std::vector<LayerKvSpec>(int block_size, DType dtype)>;

std::string layer(int i) { return str_cat("layers.", i); }

// Gemma 3 270M: 18 layers, every 6th (5, 11, 17) global, the rest sliding window 512;
// 1 KV head of 256.
std::vector<LayerKvSpec> gemma3_270m(int bs, DType dt) {
  std::vector<LayerKvSpec> out;
  for (int i = 0; i < 18; ++i) {
    out.push_back({layer(i), i % 6 == 5 ? KvCacheSpec::full_attention(bs, 1, 256, dt)
                                        : KvCacheSpec::sliding(bs, 1, 256, dt, 512), ""});
  }
  return out;
}

std::vector<LayerKvSpec> uniform_full(int num_layers, int kv_heads, int head, int bs, DType dt) {
  std::vector<LayerKvSpec> out;
  for (int i = 0; i < num_layers; ++i) {
    out.push_back({layer(i), KvCacheSpec::full_attention(bs, kv_heads, head, dt), ""});
  }
  return out;
}

// DeepSeek-V2-Lite: 27 MLA layers, kv_lora_rank 512, qk_rope_head_dim 64.
std::vector<LayerKvSpec> deepseek_v2_lite(int bs, DType dt) {
  std::vector<LayerKvSpec> out;
  for (int i = 0; i < 27; ++i) out.push_back({layer(i), KvCacheSpec::mla(bs, 512, 64, dt), ""});
  return out;
}

// Llama-4-Scout-like: 48 layers, chunked local attention (chunk 8192) except every 4th layer
// (3, 7, ...), which is global (NoPE); 8 KV heads of 128.
std::vector<LayerKvSpec> llama4_like(int bs, DType dt) {
  std::vector<LayerKvSpec> out;
  for (int i = 0; i < 48; ++i) {
    out.push_back({layer(i), i % 4 == 3 ? KvCacheSpec::full_attention(bs, 8, 128, dt)
                                        : KvCacheSpec::chunked_local(bs, 8, 128, dt, 8192), ""});
  }
  return out;
}

// Gemma-3n-E2B-like: 30 layers, every 5th (4, 9, ...) global, the rest sliding window 512;
// 2 KV heads of 256. The last 10 layers own no cache: each reads the last earlier layer of its
// own type (sliding -> layer 18, global -> layer 19).
std::vector<LayerKvSpec> gemma3n_like(int bs, DType dt) {
  std::vector<LayerKvSpec> out;
  for (int i = 0; i < 30; ++i) {
    const bool global = i % 5 == 4;
    LayerKvSpec l{layer(i), global ? KvCacheSpec::full_attention(bs, 2, 256, dt)
                                   : KvCacheSpec::sliding(bs, 2, 256, dt, 512), ""};
    if (i >= 20) l.kv_sharing_target = layer(global ? 19 : 18);
    out.push_back(l);
  }
  return out;
}

struct Entry {
  ExampleModel info;
  Builder build;
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {{"gemma3-270m", "Gemma 3 270M: 18 layers, 15 sliding (window 512) + 3 global (5, 11, 17), 1 KV head x 256", 32768, 4}, gemma3_270m},
      {{"smollm2-135m", "SmolLM2-135M: 30 full-attention layers, 3 KV heads x 64", 8192, 9},
       [](int bs, DType dt) { return uniform_full(30, 3, 64, bs, dt); }},
      {{"qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B: 28 full-attention layers, 2 KV heads x 128", 32768, 12},
       [](int bs, DType dt) { return uniform_full(28, 2, 128, bs, dt); }},
      {{"qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B: 24 full-attention layers, 2 KV heads x 64 (drafter of the 1.5B)", 32768, 14},
       [](int bs, DType dt) { return uniform_full(24, 2, 64, bs, dt); }},
      {{"deepseek-v2-lite", "DeepSeek-V2-Lite-like: 27 MLA layers, latent 512 + rope 64", 32768, 16}, deepseek_v2_lite},
      {{"llama4-like", "Llama-4-Scout-like: 48 layers, chunked local (8192) with every 4th layer global, 8 KV heads x 128", 65536, 40}, llama4_like},
      {{"gemma3n-like", "Gemma-3n-E2B-like: 30 layers (4 sliding 512 : 1 global), last 10 share KV with layers 18/19, 2 KV heads x 256", 32768, 8}, gemma3n_like},
  };
  return entries;
}

}  // namespace

std::vector<ExampleModel> example_models() {
  std::vector<ExampleModel> out;
  for (const auto& e : registry()) out.push_back(e.info);
  return out;
}

std::vector<LayerKvSpec> example_model_layers(const std::string& name, int block_size, DType dtype) {
  std::string known;
  for (const auto& e : registry()) {
    if (e.info.name == name) return e.build(block_size, dtype);
    known += (known.empty() ? "" : ", ") + e.info.name;
  }
  throw ConfigError("example", "'" + name + "'", "known examples: " + known);
}

}  // namespace specdec::kv
