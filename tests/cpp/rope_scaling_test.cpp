// RoPE scaling: the rope.scaling.* keys and rope_freqs of GGUF files, config.json's rope_scaling
// (linear, yarn, llama3, Phi-3's longrope) and Mistral's window, and the per-layer frequencies
// (model/rope_scaling.h) against llama.cpp's definitions. The runner against the NumPy reference on
// such models: tests/python/test_runner_reference.py.
#include "model/rope_scaling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>

#include "common/errors.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"

using namespace specdec;
using namespace specdec::model;
using nlohmann::json;

namespace {

// A 2-layer qwen2 file's metadata (head 32, 16 pairs).
GgufWriter qwen2_metadata() {
  GgufWriter w;
  w.set_string("general.architecture", "qwen2");
  w.set_u32("qwen2.attention.head_count", 4).set_u32("qwen2.attention.head_count_kv", 2);
  w.set_f32("qwen2.attention.layer_norm_rms_epsilon", 1e-6f).set_u32("qwen2.block_count", 2);
  w.set_u32("qwen2.context_length", 131072).set_u32("qwen2.embedding_length", 128);
  w.set_u32("qwen2.feed_forward_length", 256).set_f32("qwen2.rope.freq_base", 1e6f);
  w.set_u32("qwen2.vocab_size", 320);
  return w;
}

ModelConfig parse(const GgufWriter& w) {
  return config_from_gguf(GgufFile::from_bytes(w.to_bytes()));
}

template <typename F>
std::string unsupported_message(F&& f) {
  try {
    f();
  } catch (const UnsupportedError& e) {
    return e.what();
  }
  return "no UnsupportedError";
}

// The qwen2 config with YaRN of `factor` over 32768 original tokens.
ModelConfig yarn_config(double factor) {
  GgufWriter w = qwen2_metadata();
  w.set_string("qwen2.rope.scaling.type", "yarn")
      .set_f32("qwen2.rope.scaling.factor", static_cast<float>(factor));
  w.set_u32("qwen2.rope.scaling.original_context_length", 32768);
  return parse(w);
}

}  // namespace

TEST(RopeScalingConfigTest, GgufYarnKeys) {
  GgufWriter w = qwen2_metadata();
  w.set_string("qwen2.rope.scaling.type", "yarn").set_f32("qwen2.rope.scaling.factor", 4);
  w.set_u32("qwen2.rope.scaling.original_context_length", 32768);
  w.set_f32("qwen2.rope.scaling.attn_factor", 0.5f)
      .set_f32("qwen2.rope.scaling.yarn_beta_fast", 16);
  w.set_f32("qwen2.rope.scaling.yarn_beta_slow", 2)
      .set_f32("qwen2.rope.scaling.yarn_ext_factor", 0.5f);
  const ModelConfig c = parse(w);
  EXPECT_EQ(c.rope_scaling_type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling_factor, 4);
  EXPECT_EQ(c.rope_original_context_length, 32768);
  EXPECT_DOUBLE_EQ(c.rope_attn_factor, 0.5);
  EXPECT_DOUBLE_EQ(c.rope_yarn_beta_fast, 16);
  EXPECT_DOUBLE_EQ(c.rope_yarn_beta_slow, 2);
  EXPECT_DOUBLE_EQ(c.rope_yarn_ext_factor, 0.5);
  EXPECT_FALSE(c.rope_freq_factors);
  const json j = c.to_json();
  EXPECT_EQ(j["rope_scaling_type"], "yarn");
  EXPECT_EQ(j["rope_yarn_beta_fast"], 16);
}

TEST(RopeScalingConfigTest, RopeFreqsTensorIsLlama3Scaling) {
  GgufWriter w = qwen2_metadata();
  w.add_f32("rope_freqs.weight", {16}, std::vector<float>(16, 2.0f));
  const ModelConfig c = parse(w);
  EXPECT_TRUE(c.rope_freq_factors);
  EXPECT_EQ(c.rope_scaling_type, "llama3");
  GgufWriter old_linear = qwen2_metadata();  // no type: llama.cpp's default, linear
  old_linear.set_f32("qwen2.rope.scale_linear", 2);
  EXPECT_EQ(parse(old_linear).rope_scaling_type, "linear");
  EXPECT_DOUBLE_EQ(parse(old_linear).rope_scaling_factor, 2);
  GgufWriter none = qwen2_metadata();
  none.set_string("qwen2.rope.scaling.type", "none");
  EXPECT_EQ(parse(none).rope_scaling_type, "");
}

TEST(RopeScalingConfigTest, UnknownTypesNameTheSupportedOnes) {
  for (const char* type : {"dynamic", "su", "ntk"}) {
    GgufWriter w = qwen2_metadata();
    w.set_string("qwen2.rope.scaling.type", type);
    const std::string msg = unsupported_message([&] { parse(w); });
    EXPECT_NE(msg.find(std::string("'") + type + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("qwen2.rope.scaling.type"), std::string::npos) << msg;
    EXPECT_NE(msg.find("supported: none, linear, yarn, longrope"), std::string::npos) << msg;
    json hf = {{"model_type", "llama"},
               {"num_hidden_layers", 2},
               {"hidden_size", 64},
               {"intermediate_size", 128},
               {"num_attention_heads", 4},
               {"vocab_size", 100},
               {"max_position_embeddings", 4096},
               {"rope_scaling", {{"rope_type", type}, {"factor", 2}}}};
    const std::string hf_msg = unsupported_message([&] { config_from_hf_json(hf, "config.json"); });
    EXPECT_NE(hf_msg.find("default, linear, yarn, llama3"), std::string::npos) << hf_msg;
  }
  GgufWriter bad = qwen2_metadata();
  bad.set_string("qwen2.rope.scaling.type", "yarn")
      .set_f32("qwen2.rope.scaling.yarn_beta_slow", 64);
  try {
    parse(bad);
    FAIL() << "beta_slow > beta_fast accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("rope_yarn_beta_slow"), std::string::npos) << e.what();
  }
}

TEST(RopeScalingConfigTest, HfLlama3AndMistral) {
  json llama = {{"model_type", "llama"},
                {"num_hidden_layers", 2},
                {"hidden_size", 256},
                {"intermediate_size", 512},
                {"num_attention_heads", 2},
                {"vocab_size", 100},
                {"max_position_embeddings", 131072},
                {"rope_theta", 500000.0},
                {"rope_scaling",
                 {{"rope_type", "llama3"},
                  {"factor", 8.0},
                  {"low_freq_factor", 1.0},
                  {"high_freq_factor", 4.0},
                  {"original_max_position_embeddings", 8192}}}};
  const ModelConfig c = config_from_hf_json(llama, "config.json");
  EXPECT_EQ(c.rope_scaling_type, "llama3");
  EXPECT_EQ(c.rope_original_context_length, 8192);
  const std::vector<float> f = llama3_rope_factors(c);
  ASSERT_EQ(f.size(), 64u);
  int low = 0, mid = 0, high = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi * std::pow(500000.0, 2.0 * i / 128);
    if (wavelen < 8192 / 4.0) {
      EXPECT_EQ(f[i], 1.0f) << i;
      ++low;
    } else if (wavelen > 8192 / 1.0) {
      EXPECT_EQ(f[i], 8.0f) << i;
      ++high;
    } else {  // 1 / ((1 - s) / 8 + s), s = (8192 / wavelen - 1) / 3
      const double s = (8192 / wavelen - 1) / 3;
      EXPECT_NEAR(f[i], 1 / ((1 - s) / 8 + s), 1e-5) << i;
      ++mid;
    }
  }
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
  EXPECT_GT(high, 0);
  EXPECT_EQ(rope_frequencies(c, 1, {}).factors, f);  // without rope_freqs: from config.json

  json mistral = {
      {"model_type", "mistral"},         {"num_hidden_layers", 3},   {"hidden_size", 64},
      {"intermediate_size", 128},        {"num_attention_heads", 4}, {"vocab_size", 100},
      {"max_position_embeddings", 32768}};
  const ModelConfig m = config_from_hf_json(mistral, "config.json");
  EXPECT_EQ(m.architecture, "llama");
  ASSERT_EQ(m.num_sliding_layers(), 3);
  EXPECT_EQ(m.layers[2].sliding_window, 4096);  // MistralConfig's default
  mistral["sliding_window"] = 16;
  EXPECT_EQ(config_from_hf_json(mistral, "config.json").layers[0].sliding_window, 16);
  mistral["sliding_window"] = nullptr;
  EXPECT_EQ(config_from_hf_json(mistral, "config.json").num_sliding_layers(), 0);
}

TEST(RopeScalingConfigTest, TransformersV5RopeParameters) {
  // rope_theta inside rope_parameters; Gemma 3's per layer type form
  json llama = {{"model_type", "llama"},         {"num_hidden_layers", 2},
                {"hidden_size", 256},            {"intermediate_size", 512},
                {"num_attention_heads", 2},      {"vocab_size", 100},
                {"max_position_embeddings", 4096},
                {"rope_parameters", {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 5e5}}}};
  const ModelConfig c = config_from_hf_json(llama, "config.json");
  EXPECT_EQ(c.rope_base, 5e5);
  EXPECT_EQ(c.rope_scaling_type, "linear");
  EXPECT_EQ(c.rope_scaling_factor, 2.0);
  json gemma = {{"model_type", "gemma3_text"},   {"num_hidden_layers", 6},
                {"hidden_size", 256},            {"intermediate_size", 512},
                {"num_attention_heads", 2},      {"num_key_value_heads", 1},
                {"head_dim", 128},               {"vocab_size", 100},
                {"max_position_embeddings", 4096}, {"sliding_window", 16},
                {"rope_parameters",
                 {{"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1e6}}},
                  {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}}}};
  const ModelConfig g = config_from_hf_json(gemma, "config.json");
  EXPECT_EQ(g.rope_base, 1e6);
  EXPECT_EQ(g.rope_base_local, 1e4);
  EXPECT_EQ(g.rope_scaling_type, "linear");
  EXPECT_EQ(g.rope_scaling_factor, 8.0);
  gemma["rope_parameters"]["full_attention"]["rope_type"] = "dynamic";
  EXPECT_THROW(config_from_hf_json(gemma, "config.json"), UnsupportedError);
}

TEST(RopeScalingTest, YarnCorrDimsAsGgml) {
  // rope_dim * ln(n_ctx_orig / (beta 2 pi)) / (2 ln base): 5.90 and 9.91 for Qwen's values.
  EXPECT_EQ(yarn_corr_dims(32, 32768, 1e6, 32, 1), (std::array<double, 2>{5, 10}));
  EXPECT_EQ(yarn_corr_dims(128, 32768, 1e6, 32, 1), (std::array<double, 2>{23, 40}));
  EXPECT_EQ(yarn_corr_dims(16, 64, 1e4, 32, 1),
            (std::array<double, 2>{0, 3}));  // -0.99: clamped at 0
  EXPECT_EQ(yarn_corr_dims(8, 1 << 28, 1e4, 32, 1),
            (std::array<double, 2>{6, 7}));  // 7.63: rope_dim - 1
}

class YarnFrequenciesTest : public ::testing::TestWithParam<double> {};

// Per pair: divisor 1 up to the correction range, factor from its end on, between them
// 1 / (freq_scale (1 - ramp) + ramp); mscale 1 + 0.1 ln(factor) (1 for factors <= 1).
TEST_P(YarnFrequenciesTest, BlendAndMscale) {
  const double factor = GetParam();
  const ModelConfig c = yarn_config(factor);
  const RopeFrequencies f = rope_frequencies(c, 0, {});
  const auto [low, high] = yarn_corr_dims(32, 32768, 1e6, 32, 1);
  ASSERT_EQ(f.factors.size(), 16u);
  EXPECT_EQ(f.freq_scale, 1);
  EXPECT_EQ(f.base, 1e6);
  for (int i = 0; i < 16; ++i) {
    const double ramp = 1 - std::clamp((i - low) / (high - low), 0.0, 1.0);
    EXPECT_NEAR(f.factors[i], 1 / ((1 - ramp) / factor + ramp), 1e-6 * factor) << i;
    if (i <= low) {
      EXPECT_EQ(f.factors[i], 1.0f) << i;
    }
    if (i >= high) {
      EXPECT_FLOAT_EQ(f.factors[i], static_cast<float>(factor)) << i;
    }
  }
  EXPECT_DOUBLE_EQ(f.mscale, factor > 1 ? 1 + 0.1 * std::log(factor) : 1.0);
  // rope_freqs divide on top of the blend; ext_factor 0 leaves linear angles, no mscale.
  const std::vector<float> ff(16, 2.0f);
  const RopeFrequencies g = rope_frequencies(c, 1, ff);
  for (int i = 0; i < 16; ++i) EXPECT_FLOAT_EQ(g.factors[i], 2 * f.factors[i]) << i;
  ModelConfig no_ext = c;
  no_ext.rope_yarn_ext_factor = 0;
  const RopeFrequencies h = rope_frequencies(no_ext, 0, {});
  for (int i = 0; i < 16; ++i) EXPECT_FLOAT_EQ(h.factors[i], static_cast<float>(factor)) << i;
  EXPECT_EQ(h.mscale, 1);
  no_ext.rope_attn_factor = 0.5;
  EXPECT_EQ(rope_mscale(no_ext), 0.5);
}

INSTANTIATE_TEST_SUITE_P(Factors, YarnFrequenciesTest, ::testing::Values(0.5, 1.0, 2.0, 4.0, 40.0));

TEST(RopeScalingTest, LinearAndLocalLayers) {
  ModelConfig c = yarn_config(4);
  c.rope_scaling_type = "linear";
  RopeFrequencies f = rope_frequencies(c, 0, {});
  EXPECT_DOUBLE_EQ(f.freq_scale, 0.25);
  EXPECT_TRUE(f.factors.empty());
  EXPECT_EQ(f.mscale, 1);
  // A layer with a local base of its own (Gemma 3) is not scaled.
  c.rope_base_local = 1e4;
  c.layers[0].attention = LayerAttention::kSliding;
  c.layers[0].sliding_window = 16;
  c.layers[0].rope_base = 1e4;
  f = rope_frequencies(c, 0, {});
  EXPECT_EQ(f.freq_scale, 1);
  EXPECT_EQ(f.base, 1e4);
  EXPECT_DOUBLE_EQ(rope_frequencies(c, 1, {}).freq_scale, 0.25);
  const std::vector<float> wrong(15, 1.0f);
  EXPECT_THROW(rope_frequencies(c, 1, wrong), ConfigError);
}

// Phi-3 as llama.cpp's converter writes it: fused attn_qkv and gate | up, LongRoPE as two factor
// tensors with attn_factor and the original context (no type), a window llama.cpp ignores.
TEST(RopeScalingConfigTest, Phi3LongRope) {
  auto phi3 = [](bool with_original) {
    GgufWriter w;
    w.set_string("general.architecture", "phi3");
    w.set_u32("phi3.attention.head_count", 4).set_u32("phi3.attention.head_count_kv", 4);
    w.set_f32("phi3.attention.layer_norm_rms_epsilon", 1e-5f).set_u32("phi3.block_count", 2);
    w.set_u32("phi3.context_length", 131072).set_u32("phi3.embedding_length", 128);
    w.set_u32("phi3.feed_forward_length", 256).set_f32("phi3.rope.freq_base", 1e4f);
    w.set_u32("phi3.vocab_size", 320).set_u32("phi3.attention.sliding_window", 2047);
    w.set_u32("phi3.rope.dimension_count", 32).set_f32("phi3.rope.scaling.attn_factor", 1.19f);
    if (with_original) w.set_u32("phi3.rope.scaling.original_context_length", 4096);
    w.add_f32("blk.0.attn_qkv.weight", {128, 384}, std::vector<float>(128 * 384, 0.0f));
    w.add_f32("rope_factors_long.weight", {16}, std::vector<float>(16, 4.0f));
    w.add_f32("rope_factors_short.weight", {16}, std::vector<float>(16, 1.0f));
    return w;
  };
  const ModelConfig c = parse(phi3(true));
  EXPECT_EQ(c.rope_type, RopeType::kNeox);
  EXPECT_TRUE(c.fused_qkv);
  EXPECT_TRUE(c.fused_gate_up);
  EXPECT_EQ(c.rope_scaling_type, "longrope");
  EXPECT_TRUE(c.rope_long_short_factors);
  EXPECT_EQ(c.num_sliding_layers(), 0);  // llama.cpp disables Phi-3's window
  EXPECT_FLOAT_EQ(static_cast<float>(rope_mscale(c)), 1.19f);
  const std::vector<float> long_factors(16, 4.0f);
  const RopeFrequencies f = rope_frequencies(c, 0, long_factors);
  EXPECT_EQ(f.factors, long_factors);
  EXPECT_EQ(f.freq_scale, 1);
  try {
    parse(phi3(false));
    FAIL() << "LongRoPE without its original context accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("phi3.rope.scaling.original_context_length"),
              std::string::npos);
  }
  GgufWriter typed = qwen2_metadata();
  typed.set_string("qwen2.rope.scaling.type", "longrope");
  EXPECT_THROW(parse(typed), FormatError);  // the type without its factor tensors
}

// A Hugging Face Phi-3.5-mini style config.json reads as its GGUF twin: LongRoPE from rope_scaling
// (longrope or su) with the original context at the top level, attn_factor as the converter
// computes it; malformed LongRoPE configs name the field.
namespace {

json phi3_json() {
  json j = {{"model_type", "phi3"},
            {"num_hidden_layers", 2},
            {"hidden_size", 128},
            {"intermediate_size", 256},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 4},
            {"vocab_size", 320},
            {"max_position_embeddings", 131072},
            {"rms_norm_eps", 1e-5},
            {"rope_theta", 10000.0},
            {"sliding_window", 262144},
            {"tie_word_embeddings", false},
            {"original_max_position_embeddings", 4096}};
  j["rope_scaling"] = {{"type", "longrope"},
                       {"long_factor", std::vector<double>(16, 4.0)},
                       {"short_factor", std::vector<double>(16, 1.0)}};
  return j;
}

}  // namespace

TEST(RopeScalingConfigTest, HfPhi3LongRope) {
  const ModelConfig c = config_from_hf_json(phi3_json(), "config.json");
  EXPECT_EQ(c.architecture, "phi3");
  EXPECT_EQ(c.rope_type, RopeType::kNeox);
  EXPECT_TRUE(c.fused_qkv && c.fused_gate_up);
  EXPECT_EQ(c.rope_dim, 32);
  EXPECT_EQ(c.rope_scaling_type, "longrope");
  EXPECT_TRUE(c.rope_long_short_factors);
  EXPECT_EQ(c.rope_long_factors, std::vector<float>(16, 4.0f));
  EXPECT_EQ(c.rope_short_factors, std::vector<float>(16, 1.0f));
  EXPECT_EQ(c.rope_original_context_length, 4096);
  EXPECT_DOUBLE_EQ(c.rope_scaling_factor, 1);
  EXPECT_DOUBLE_EQ(c.rope_attn_factor, std::sqrt(1 + std::log(32.0) / std::log(4096.0)));
  EXPECT_EQ(c.num_sliding_layers(), 0);  // as from GGUF: llama.cpp does not apply Phi-3's window
  json su = phi3_json();
  su["rope_scaling"]["type"] = "su";
  su["rope_scaling"]["attention_factor"] = 1.25;  // transformers' explicit factor wins
  EXPECT_EQ(config_from_hf_json(su, "config.json").rope_scaling_type, "longrope");
  EXPECT_DOUBLE_EQ(config_from_hf_json(su, "config.json").rope_attn_factor, 1.25);
  json v5 = phi3_json();  // transformers v5: rope_parameters, the original context inside
  v5.erase("original_max_position_embeddings");
  v5["rope_parameters"] = v5["rope_scaling"];
  v5.erase("rope_scaling");
  v5["rope_parameters"]["rope_type"] = "longrope";
  v5["rope_parameters"]["original_max_position_embeddings"] = 4096;
  EXPECT_EQ(config_from_hf_json(v5, "config.json").rope_original_context_length, 4096);
  json none = phi3_json();  // Phi-3-mini-4k: no scaling, the original context kept
  none["rope_scaling"] = nullptr;
  none["max_position_embeddings"] = 4096;
  const ModelConfig n = config_from_hf_json(none, "config.json");
  EXPECT_EQ(n.rope_scaling_type, "");
  EXPECT_FALSE(n.rope_long_short_factors);
  EXPECT_EQ(n.rope_original_context_length, 4096);
  EXPECT_DOUBLE_EQ(rope_mscale(n), 1);
  json partial = phi3_json();  // Phi-4-mini style: 3/4 of each head rotates
  partial["partial_rotary_factor"] = 0.75;
  partial["rope_scaling"]["long_factor"] = std::vector<double>(12, 4.0);
  partial["rope_scaling"]["short_factor"] = std::vector<double>(12, 1.0);
  EXPECT_EQ(config_from_hf_json(partial, "config.json").rope_dim, 24);
}

TEST(RopeScalingConfigTest, HfPhi3ErrorsNameTheField) {
  auto field_of = [](const json& j) -> std::string {
    try {
      config_from_hf_json(j, "config.json");
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
      return e.field() + " = " + e.value();
    }
    return "no ConfigError";
  };
  json j = phi3_json();
  j["rope_scaling"]["long_factor"] = std::vector<double>(15, 4.0);
  EXPECT_EQ(field_of(j), "rope_scaling.long_factor = 15 values");
  j = phi3_json();
  j["rope_scaling"].erase("short_factor");
  EXPECT_EQ(field_of(j), "rope_scaling.short_factor = missing");
  j = phi3_json();
  j["rope_scaling"]["short_factor"][3] = -1;
  EXPECT_EQ(field_of(j), "rope_scaling.short_factor = -1");
  j = phi3_json();
  j.erase("original_max_position_embeddings");
  EXPECT_EQ(field_of(j), "original_max_position_embeddings = missing");
  j["original_max_position_embeddings"] = 1;
  EXPECT_EQ(field_of(j), "original_max_position_embeddings = 1");
  j = phi3_json();
  j["partial_rotary_factor"] = 1.5;
  EXPECT_EQ(field_of(j), "partial_rotary_factor = 1.5");
  for (const char* type : {"dynamic", "yarn", "linear"}) {
    j = phi3_json();
    j["rope_scaling"]["type"] = type;
    const std::string msg = unsupported_message([&] { config_from_hf_json(j, "config.json"); });
    EXPECT_NE(msg.find(std::string("rope_scaling.rope_type = '") + type + "'"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("supported: default, longrope (or su)"), std::string::npos) << msg;
  }
  j = phi3_json();
  j["model_type"] = "llama";
  const std::string msg = unsupported_message([&] { config_from_hf_json(j, "config.json"); });
  EXPECT_NE(msg.find("(longrope: model_type phi3)"), std::string::npos) << msg;
}
