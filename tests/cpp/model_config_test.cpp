// ModelConfig from GGUF metadata and Hugging Face config.json, and the GGUF writer it is tested
// with. Real model files are checked in tests/python/test_model_config.py (through the cache).
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "kv/planner.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "test_data.h"

using namespace specdec;
using namespace specdec::model;
using nlohmann::json;

namespace {

const std::string kStories = test_data::stories260k();

GgufFile parse(const GgufWriter& w) { return GgufFile::from_bytes(w.to_bytes()); }

void add_norm(GgufWriter& w, const std::string& name, int64_t n) {
  w.add_f32(name, {n}, std::vector<float>(static_cast<size_t>(n), 1.0f));
}

// Gemma 3 270M's metadata as its GGUF file holds it (no pattern key: llama.cpp's rule).
GgufWriter gemma3_metadata() {
  GgufWriter w;
  w.set_string("general.architecture", "gemma3").set_string("general.name", "Gemma 3 270m");
  w.set_u32("gemma3.attention.head_count", 4).set_u32("gemma3.attention.head_count_kv", 1);
  w.set_u32("gemma3.attention.key_length", 256).set_u32("gemma3.attention.value_length", 256);
  w.set_f32("gemma3.attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_u32("gemma3.attention.sliding_window", 512).set_u32("gemma3.block_count", 18);
  w.set_u32("gemma3.context_length", 32768).set_u32("gemma3.embedding_length", 640);
  w.set_u32("gemma3.feed_forward_length", 2048).set_f32("gemma3.rope.freq_base", 1e6f);
  add_norm(w, "blk.0.attn_q_norm.weight", 256);
  add_norm(w, "blk.0.post_attention_norm.weight", 640);
  w.add_tensor("token_embd.weight", GgmlType::kQ8_0, {640, 64},
               std::vector<uint8_t>(640 / 32 * 34 * 64));
  return w;
}

GgufWriter deepseek2_metadata(bool new_keys) {
  GgufWriter w;
  w.set_string("general.architecture", "deepseek2");
  w.set_u32("deepseek2.attention.head_count", 16).set_u32("deepseek2.attention.head_count_kv", 16);
  w.set_f32("deepseek2.attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_u32("deepseek2.block_count", 27).set_u32("deepseek2.context_length", 163840);
  w.set_u32("deepseek2.embedding_length", 2048).set_u32("deepseek2.feed_forward_length", 10944);
  w.set_u32("deepseek2.attention.kv_lora_rank", 512).set_u32("deepseek2.rope.dimension_count", 64);
  w.set_u32("deepseek2.vocab_size", 102400).set_u32("deepseek2.expert_count", 64);
  if (new_keys) {  // absorbed MLA sizes in key/value_length, per-head sizes in *_mla
    w.set_u32("deepseek2.attention.key_length", 576).set_u32("deepseek2.attention.value_length", 512);
    w.set_u32("deepseek2.attention.key_length_mla", 192);
    w.set_u32("deepseek2.attention.value_length_mla", 128);
  } else {
    w.set_u32("deepseek2.attention.key_length", 192).set_u32("deepseek2.attention.value_length", 128);
  }
  return w;
}

}  // namespace

TEST(GgufWriterTest, RoundTripsMetadataAndTensors) {
  GgufWriter w(64);
  w.set_string("general.architecture", "test").set_u32("n", 7).set_bool("flag", true);
  w.set_strings("names", {"a", "", "ccc"}).set_f32s("scores", {1.5f, -2.0f});
  w.set_i32s("types", {1, 3}).set_u32("n", 8);  // replaces
  w.add_f32("x", {3, 2}, {1, 2, 3, 4, 5, 6});
  w.add_tensor("q", GgmlType::kQ8_0, {32}, std::vector<uint8_t>(34, 7));
  const GgufFile f = parse(w);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.get_u32("n"), 8u);
  EXPECT_TRUE(f.get_bool("flag"));
  EXPECT_EQ(f.get_string_array("names"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f.get_array("scores").values.size(), 2u);
  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensor& x = f.tensor("x");
  EXPECT_EQ(x.dims, (std::vector<int64_t>{3, 2}));
  float v[6];
  std::memcpy(v, x.data, sizeof(v));
  EXPECT_EQ(v[5], 6.0f);
  EXPECT_EQ(f.tensor("q").data[33], 7);
  EXPECT_EQ(f.tensor("q").offset % 64, 0u);
}

TEST(GgufWriterTest, RejectsWrongSizes) {
  GgufWriter w;
  EXPECT_THROW(w.add_tensor("q", GgmlType::kQ8_0, {32}, std::vector<uint8_t>(33)), ConfigError);
  EXPECT_THROW(w.add_tensor("q", GgmlType::kQ8_0, {31}, std::vector<uint8_t>(34)), ConfigError);
  EXPECT_THROW(GgufWriter(48), ConfigError);
}

TEST(ModelConfigTest, Stories260K) {
  const ModelConfig c = load_model_config(kStories);
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.source_format, "gguf");
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_q_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_size, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.context_length, 128);
  EXPECT_EQ(c.rope_type, RopeType::kNorm);
  EXPECT_EQ(c.rope_dim, 8);
  EXPECT_DOUBLE_EQ(c.rope_base, 10000);
  EXPECT_FALSE(c.tied_embeddings);  // it has output.weight
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_NEAR(c.norm_eps, 1e-5, 1e-9);
  const auto specs = c.layer_kv_specs(16, DType::kF16);
  ASSERT_EQ(specs.size(), 5u);
  EXPECT_EQ(specs[0].layer_name, "layers.0");
  EXPECT_EQ(specs[4].spec, kv::KvCacheSpec::full_attention(16, 4, 8, DType::kF16));
}

TEST(ModelConfigTest, Gemma3FromGgufHasTwoKvGroups) {
  const ModelConfig c = config_from_gguf(parse(gemma3_metadata()));
  EXPECT_EQ(c.num_layers, 18);
  EXPECT_EQ(c.num_sliding_layers(), 15);
  for (int i = 0; i < 18; ++i) {
    const bool global = i == 5 || i == 11 || i == 17;
    EXPECT_EQ(c.layers[i].attention, global ? LayerAttention::kFull : LayerAttention::kSliding) << i;
    EXPECT_EQ(c.layers[i].sliding_window, global ? 0 : 512) << i;
    EXPECT_DOUBLE_EQ(c.layers[i].rope_base, global ? 1e6 : 10000) << i;
  }
  EXPECT_EQ(c.rope_type, RopeType::kNeox);
  EXPECT_EQ(c.activation, Activation::kGeluTanh);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.post_norms);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_DOUBLE_EQ(c.norm_weight_offset, 0);
  EXPECT_NEAR(c.embedding_scale, std::sqrt(640.0), 1e-12);
  EXPECT_DOUBLE_EQ(c.attention_scale, 1.0 / 16);
  EXPECT_EQ(c.vocab_size, 64);  // from the embedding's rows: no vocab_size key, no tokens
  const kv::KvCacheConfig plan = kv::plan_kv_cache(c.layer_kv_specs(), int64_t{1} << 30, 32768);
  ASSERT_EQ(plan.groups.size(), 2u);
  // Requests no longer than the window: every layer sees everything, one full-attention group.
  const auto short_specs = c.layer_kv_specs(16, DType::kF16, 512);
  EXPECT_EQ(short_specs[0].spec.kind, kv::KvSpecKind::kFullAttention);
  EXPECT_EQ(kv::plan_kv_cache(short_specs, int64_t{1} << 30, 512).groups.size(), 1u);
  EXPECT_EQ(c.layer_kv_specs(16, DType::kF16, 513)[0].spec.kind, kv::KvSpecKind::kSlidingWindow);
}

TEST(ModelConfigTest, PatternKeyOverridesTheDefault) {
  GgufWriter w = gemma3_metadata();
  w.set("gemma3.attention.sliding_window_pattern", GgufValue(uint32_t{3}));
  EXPECT_EQ(config_from_gguf(parse(w)).num_sliding_layers(), 12);
  GgufArray bools{GgufType::kBool, {}};
  for (int i = 0; i < 18; ++i) bools.values.emplace_back(i < 2);
  w.set("gemma3.attention.sliding_window_pattern", GgufValue(bools));
  EXPECT_EQ(config_from_gguf(parse(w)).num_sliding_layers(), 2);
  bools.values.pop_back();
  w.set("gemma3.attention.sliding_window_pattern", GgufValue(bools));
  EXPECT_THROW(config_from_gguf(parse(w)), FormatError);
}

TEST(ModelConfigTest, DeepSeek2MlaBothKeyStyles) {
  for (bool new_keys : {false, true}) {
    const ModelConfig c = config_from_gguf(parse(deepseek2_metadata(new_keys)));
    EXPECT_EQ(c.architecture, "deepseek2");
    EXPECT_EQ(c.mla.kv_lora_rank, 512);
    EXPECT_EQ(c.mla.qk_rope_head_dim, 64);
    EXPECT_EQ(c.mla.qk_nope_head_dim, 128);
    EXPECT_EQ(c.mla.v_head_dim, 128);
    EXPECT_EQ(c.mla.q_lora_rank, 0);
    EXPECT_EQ(c.head_size, 192);
    EXPECT_EQ(c.num_experts, 64);
    const auto specs = c.layer_kv_specs(16, DType::kF16);
    ASSERT_EQ(specs.size(), 27u);
    EXPECT_EQ(specs[3].spec, kv::KvCacheSpec::mla(16, 512, 64, DType::kF16));
    EXPECT_EQ(kv::plan_kv_cache(specs, int64_t{1} << 30, 4096).groups.size(), 1u);
  }
}

TEST(ModelConfigTest, ChunkedLocalAndKvSharingKeys) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.attention.head_count", 8).set_u32("llama.attention.head_count_kv", 2);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f).set_u32("llama.block_count", 10);
  w.set_u32("llama.context_length", 4096).set_u32("llama.embedding_length", 256);
  w.set_u32("llama.feed_forward_length", 512).set_u32("llama.vocab_size", 100);
  w.set_u32("llama.attention.chunk_size", 64).set_u32("llama.attention.shared_kv_layers", 4);
  const ModelConfig c = config_from_gguf(parse(w));
  for (int i = 0; i < 10; ++i) {
    const bool global = i % 4 == 3;
    EXPECT_EQ(c.layers[i].attention, global ? LayerAttention::kFull : LayerAttention::kChunked);
    EXPECT_EQ(c.layers[i].use_rope, !global);  // Llama 4 style NoPE global layers
  }
  // Layers 6..9 share: chunked ones read layer 5, the global layer 7 reads layer 3.
  EXPECT_EQ(c.layers[5].kv_sharing_target, -1);
  EXPECT_EQ(c.layers[6].kv_sharing_target, 5);
  EXPECT_EQ(c.layers[7].kv_sharing_target, 3);
  EXPECT_EQ(c.layers[9].kv_sharing_target, 5);
  const auto specs = c.layer_kv_specs();
  EXPECT_EQ(specs[7].kv_sharing_target, "layers.3");
  const kv::KvCacheConfig plan = kv::plan_kv_cache(specs, int64_t{1} << 28, 4096);
  EXPECT_EQ(plan.groups.size(), 2u);
  EXPECT_EQ(plan.kv_sharing.size(), 4u);
}

// config_from_gguf(w) fails with a FormatError whose message names `needle`.
void expect_format(const GgufWriter& w, const std::string& needle) {
  try {
    config_from_gguf(parse(w));
    ADD_FAILURE() << "no error for " << needle;
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ModelConfigTest, GgufErrorsNameTheKey) {
  GgufWriter w = gemma3_metadata();
  w.set_string("general.architecture", "mamba");
  try {
    config_from_gguf(parse(w));
    FAIL();
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("'mamba'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("gemma3"), std::string::npos);
  }
  expect_format(gemma3_metadata().erase("gemma3.block_count"), "gemma3.block_count");
  expect_format(gemma3_metadata().set_string("gemma3.block_count", "18"), "gemma3.block_count");
  expect_format(gemma3_metadata().set_u32("gemma3.attention.head_count_kv", 3), "num_kv_heads");
  expect_format(gemma3_metadata().set_u32("gemma3.embedding_length", 0), "hidden_size");
  expect_format(gemma3_metadata().set_f32("gemma3.rope.freq_base", NAN), "gemma3.rope.freq_base");
  expect_format(gemma3_metadata().set("gemma3.block_count", GgufValue(int32_t{-1})), "block_count");
  expect_format(gemma3_metadata().set_u32("gemma3.attention.shared_kv_layers", 18),
                "shared_kv_layers");
  GgufWriter per_layer = gemma3_metadata();
  per_layer.set_i32s("gemma3.attention.head_count_kv", std::vector<int32_t>(18, 1));
  EXPECT_EQ(config_from_gguf(parse(per_layer)).num_kv_heads, 1);
  per_layer.set_i32s("gemma3.attention.head_count_kv", {1, 2});
  EXPECT_THROW(config_from_gguf(parse(per_layer)), UnsupportedError);
}

// Issue 34, item 5: a size is bounded before anything is sized from it (block_count = 2^30 made
// a table of 2^30 layers); a vocab_size key must be the embedding's rows.
TEST(ModelConfigTest, GgufSizesAreBoundedBeforeUse) {
  expect_format(gemma3_metadata().set_u32("gemma3.block_count", 1u << 30),
                "'gemma3.block_count' = 1.07374e+09: expected an integer in [0, 1024]");
  expect_format(gemma3_metadata().set_u32("gemma3.vocab_size", 1u << 22), "[0, 2097152]");
  expect_format(gemma3_metadata().set_u32("gemma3.context_length", 1u << 30), "[0, 134217728]");
  expect_format(gemma3_metadata().set_u32("gemma3.vocab_size", 100),
                "'gemma3.vocab_size' = 100: expected the rows of token_embd.weight (64)");
  EXPECT_EQ(config_from_gguf(parse(gemma3_metadata().set_u32("gemma3.vocab_size", 64))).vocab_size,
            64);
  EXPECT_EQ(max_model_size("num_hidden_layers"), 1024);
  EXPECT_EQ(max_model_size("rope.scaling.factor_not_a_size"), int64_t{1} << 30);
}

// ---- Hugging Face config.json ----

json llama_json() {
  return json::parse(R"({"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
    "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
    "rms_norm_eps": 1e-5, "rope_theta": 100000, "max_position_embeddings": 8192,
    "vocab_size": 49152, "tie_word_embeddings": true, "hidden_act": "silu"})");
}

TEST(ModelConfigHfTest, Llama) {
  const ModelConfig c = config_from_hf_json(llama_json(), "config.json");
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.source_format, "hf");
  EXPECT_EQ(c.head_size, 64);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_DOUBLE_EQ(c.rope_base, 100000);
  EXPECT_EQ(c.rope_type, RopeType::kNorm);
  EXPECT_EQ(c.layer_kv_specs()[29].spec, kv::KvCacheSpec::full_attention(16, 3, 64, DType::kF16));
}

TEST(ModelConfigHfTest, Qwen2AndQwen3) {
  json q2 = llama_json();
  q2["model_type"] = "qwen2";
  q2["use_sliding_window"] = true;
  q2["sliding_window"] = 4096;
  q2["max_window_layers"] = 28;
  ModelConfig c = config_from_hf_json(q2, "q2");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.output_bias);
  EXPECT_EQ(c.rope_type, RopeType::kNeox);
  EXPECT_EQ(c.num_sliding_layers(), 2);  // layers 28 and 29
  EXPECT_EQ(c.layers[29].sliding_window, 4096);
  json q3 = llama_json();
  q3["model_type"] = "qwen3";
  q3["head_dim"] = 128;
  c = config_from_hf_json(q3, "q3");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.head_size, 128);
}

json gemma3_text_json() {
  return json::parse(R"({"model_type": "gemma3_text", "hidden_size": 640,
    "intermediate_size": 2048, "num_hidden_layers": 18, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0, "max_position_embeddings": 32768, "vocab_size": 262144,
    "sliding_window": 512, "query_pre_attn_scalar": 256, "final_logit_softcapping": null,
    "hidden_activation": "gelu_pytorch_tanh", "rope_scaling": null})");
}

TEST(ModelConfigHfTest, Gemma3TextAndWrapped) {
  const ModelConfig c = config_from_hf_json(gemma3_text_json(), "g");
  EXPECT_EQ(c.architecture, "gemma3");
  EXPECT_EQ(c.num_sliding_layers(), 15);
  EXPECT_EQ(c.layers[5].attention, LayerAttention::kFull);
  EXPECT_DOUBLE_EQ(c.layers[0].rope_base, 10000);
  EXPECT_DOUBLE_EQ(c.layers[5].rope_base, 1e6);
  EXPECT_DOUBLE_EQ(c.norm_weight_offset, 1);  // HF stores w - 1
  EXPECT_DOUBLE_EQ(c.final_logit_softcap, 0);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.activation, Activation::kGeluTanh);
  EXPECT_EQ(kv::plan_kv_cache(c.layer_kv_specs(), int64_t{1} << 30, 32768).groups.size(), 2u);
  json wrapped = {{"model_type", "gemma3"}, {"text_config", gemma3_text_json()}};
  wrapped["text_config"]["layer_types"] = json::array();
  for (int i = 0; i < 18; ++i) {
    wrapped["text_config"]["layer_types"].push_back(i % 2 ? "full_attention" : "sliding_attention");
  }
  EXPECT_EQ(config_from_hf_json(wrapped, "g").num_sliding_layers(), 9);
}

TEST(ModelConfigHfTest, DeepSeekV2) {
  const json j = json::parse(R"({"model_type": "deepseek_v2", "hidden_size": 2048,
    "intermediate_size": 10944, "num_hidden_layers": 27, "num_attention_heads": 16,
    "num_key_value_heads": 16, "kv_lora_rank": 512, "q_lora_rank": null, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "max_position_embeddings": 163840,
    "vocab_size": 102400, "n_routed_experts": 64, "rope_scaling": {"type": "yarn",
    "factor": 40, "original_max_position_embeddings": 4096}})");
  const ModelConfig c = config_from_hf_json(j, "ds");
  EXPECT_EQ(c.architecture, "deepseek2");
  EXPECT_EQ(c.head_size, 192);
  EXPECT_EQ(c.head_size_v, 128);
  EXPECT_EQ(c.rope_dim, 64);
  EXPECT_EQ(c.rope_scaling_type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling_factor, 40);
  EXPECT_EQ(c.rope_original_context_length, 4096);
  EXPECT_EQ(c.layer_kv_specs()[0].spec, kv::KvCacheSpec::mla(16, 512, 64, DType::kF16));
}

TEST(ModelConfigHfTest, ProductsOfSizesAreBounded) {
  json j = llama_json();
  j["vocab_size"] = 1 << 21;
  j["hidden_size"] = 1 << 17;
  j["num_attention_heads"] = 1 << 12;
  j["num_key_value_heads"] = 1 << 12;
  try {
    config_from_hf_json(j, "config.json");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "embedding elements") << e.what();
    EXPECT_NE(std::string(e.what()).find("2097152 x 131072"), std::string::npos) << e.what();
  }
}

TEST(ModelConfigHfTest, ErrorsNameTheField) {
  auto expect_field = [](json j, const std::string& field) {
    try {
      config_from_hf_json(j, "config.json");
      ADD_FAILURE() << "no error for " << field;
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.field(), field) << e.what();
      EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
    }
  };
  json j = llama_json();
  j["model_type"] = "mamba";
  expect_field(j, "model_type");
  j = llama_json();
  j.erase("hidden_size");
  expect_field(j, "hidden_size");
  j = llama_json();
  j["num_attention_heads"] = "nine";
  expect_field(j, "num_attention_heads");
  j = llama_json();
  j["num_key_value_heads"] = 4;
  expect_field(j, "num_kv_heads");
  j = llama_json();
  j["hidden_act"] = "relu";
  expect_field(j, "hidden_act");
  j = llama_json();
  j["rms_norm_eps"] = -1;
  expect_field(j, "norm_eps");
  j = llama_json();
  j["num_hidden_layers"] = -3;
  expect_field(j, "num_hidden_layers");
  expect_field(json::array(), "config.json");
  expect_field(json{{"model_type", "gemma3"}}, "text_config");
}

TEST(ModelConfigTest, LoadRejectsMissingPath) {
  try {
    load_model_config("/nonexistent/model.gguf");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "path");
  }
}
