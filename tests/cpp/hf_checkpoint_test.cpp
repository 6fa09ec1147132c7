// A Hugging Face directory read into the GGUF form: tensor names, the Llama q/k permutation,
// Gemma 3's norms (w + 1), tied heads, views into the mapped files, and the tokenizer's keys.
#include "model/hf_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/errors.h"
#include "model/config.h"

namespace specdec::model {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

struct Tensor {
  std::string name;
  std::vector<uint64_t> shape;  // HF order (outermost first)
  std::vector<float> values;    // stored F32
};

void write(const fs::path& file, const std::string& text) {
  std::ofstream(file, std::ios::binary) << text;
}

void write_safetensors(const fs::path& file, const std::vector<Tensor>& tensors) {
  Json header = Json::object();
  std::string data;
  for (const auto& t : tensors) {
    const size_t begin = data.size();
    data.append(reinterpret_cast<const char*>(t.values.data()), t.values.size() * 4);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  const std::string h = header.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  write(file, out + h + data);
}

std::vector<float> iota(size_t n, float start = 0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

// One layer, hidden 4, 2 query heads and 1 KV head of size 4.
class HfDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("specdec_hf_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write_model(const std::string& model_type) {
    const Json config = {{"model_type", model_type}, {"hidden_size", 4}, {"intermediate_size", 4},
                         {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
                         {"head_dim", 4}, {"vocab_size", 6}, {"max_position_embeddings", 64},
                         {"query_pre_attn_scalar", 4}, {"layer_types", {"full_attention"}},
                         {"tie_word_embeddings", true}, {"attention_bias", model_type == "llama"},
                         {"hidden_act", model_type == "gemma3_text" ? "gelu_pytorch_tanh" : "silu"}};
    write(dir_ / "config.json", config.dump());
    std::vector<Tensor> t = {{"model.embed_tokens.weight", {6, 4}, iota(24)},
                             {"model.norm.weight", {4}, iota(4, 0.5f)}};
    const std::string l = "model.layers.0.";
    t.push_back({l + "input_layernorm.weight", {4}, iota(4)});
    if (model_type == "phi3") write_phi3(config, t);
    if (model_type != "phi3") {
      t.push_back({l + "self_attn.q_proj.weight", {8, 4}, iota(32)});  // row r holds 4r..4r+3
      t.push_back({l + "self_attn.k_proj.weight", {4, 4}, iota(16, 100)});
      t.push_back({l + "self_attn.v_proj.weight", {4, 4}, iota(16)});
      t.push_back({l + "mlp.gate_proj.weight", {4, 4}, iota(16)});
      t.push_back({l + "mlp.up_proj.weight", {4, 4}, iota(16)});
    }
    t.push_back({l + "self_attn.o_proj.weight", {4, 8}, iota(32)});
    t.push_back({l + "mlp.down_proj.weight", {4, 4}, iota(16)});
    if (model_type == "gemma3_text") {
      t.push_back({l + "self_attn.q_norm.weight", {4}, iota(4)});
      t.push_back({l + "self_attn.k_norm.weight", {4}, iota(4)});
      t.push_back({l + "post_attention_layernorm.weight", {4}, iota(4)});
      t.push_back({l + "pre_feedforward_layernorm.weight", {4}, iota(4, -0.25f)});
      t.push_back({l + "post_feedforward_layernorm.weight", {4}, iota(4)});
    } else {
      t.push_back({l + "post_attention_layernorm.weight", {4}, iota(4)});
    }
    if (model_type == "llama") {  // attention_bias: the q/k biases are permuted as their rows
      t.push_back({l + "self_attn.q_proj.bias", {8}, iota(8)});
      t.push_back({l + "self_attn.k_proj.bias", {4}, iota(4, 10)});
      t.push_back({l + "self_attn.v_proj.bias", {4}, iota(4)});
      t.push_back({l + "self_attn.o_proj.bias", {4}, iota(4)});
    }
    for (size_t i = 0; i < extra_tensors_; ++i) t.push_back({str_cat("extra.", i, ".weight"), {1}, {0.5f}});
    write_safetensors(dir_ / "model.safetensors", t);
    const Json tok = {{"model", {{"type", "BPE"}, {"byte_fallback", true}, {"unk_token", "<unk>"},
                                 {"vocab", {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"a", 3}, {"b", 4}, {"ab", 5}}},
                                 {"merges", {"a b"}}}},
                      {"added_tokens", {{{"id", 1}, {"content", "<s>"}, {"special", true}},
                                        {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
                      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}};
    write(dir_ / "tokenizer.json", tok.dump());
    write(dir_ / "tokenizer_config.json",
          Json{{"bos_token", "<s>"}, {"eos_token", {{"content", "</s>"}}}, {"add_bos_token", true},
               {"chat_template", "{{ messages }}"}}.dump());
    write(dir_ / "generation_config.json", Json{{"eos_token_id", {2, 5}}}.dump());
  }

  // Phi-3: q | k | v in qkv_proj, gate | up in gate_up_proj, a separate head, LongRoPE over 16
  // original tokens (2 pairs per head), max_position_embeddings 64.
  void write_phi3(Json config, std::vector<Tensor>& t) {
    config["tie_word_embeddings"] = false;
    config["original_max_position_embeddings"] = 16;
    config["rope_scaling"] = {
        {"type", "longrope"}, {"long_factor", {2.0, 8.0}}, {"short_factor", {1.0, 1.5}}};
    write(dir_ / "config.json", config.dump());
    t.push_back({"model.layers.0.self_attn.qkv_proj.weight", {16, 4}, iota(64)});
    t.push_back({"model.layers.0.mlp.gate_up_proj.weight", {8, 4}, iota(32, 1000)});
    t.push_back({"lm_head.weight", {6, 4}, iota(24, 7)});
  }

  size_t extra_tensors_ = 0;  // tensors no architecture uses, added to model.safetensors

  std::vector<float> floats(const GgufFile& f, const std::string& name) {
    const GgufTensor& t = f.tensor(name);
    EXPECT_EQ(t.type, GgmlType::kF32) << name;
    std::vector<float> v(static_cast<size_t>(t.num_elements));
    std::memcpy(v.data(), t.data, v.size() * 4);
    return v;
  }

  fs::path dir_;
};

TEST_F(HfDir, LlamaQkRowsArePermutedToInterleavedOrder) {
  write_model("llama");
  const GgufFile f = hf_to_gguf(dir_.string());
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  // per head of 4 rows: HF rows (0, 1 | 2, 3) -> (0, 2, 1, 3)
  const std::vector<int> q_rows = {0, 2, 1, 3, 4, 6, 5, 7};
  const std::vector<float> q = floats(f, "blk.0.attn_q.weight");
  for (int r = 0; r < 8; ++r) EXPECT_EQ(q[r * 4], 4.0f * q_rows[r]) << "row " << r;
  const std::vector<float> k = floats(f, "blk.0.attn_k.weight");  // one KV head
  for (int r = 0; r < 4; ++r) EXPECT_EQ(k[r * 4], 100.0f + 4.0f * q_rows[r]) << "row " << r;
  // the others are views of the file: same values, unchanged order
  const std::vector<float> qb = floats(f, "blk.0.attn_q.bias");
  for (int r = 0; r < 8; ++r) EXPECT_EQ(qb[r], static_cast<float>(q_rows[r])) << "bias " << r;
  EXPECT_EQ(floats(f, "blk.0.attn_k.bias"), (std::vector<float>{10, 12, 11, 13}));
  EXPECT_EQ(floats(f, "blk.0.attn_v.bias"), iota(4));
  EXPECT_EQ(floats(f, "blk.0.attn_v.weight"), iota(16));
  EXPECT_EQ(f.tensor("blk.0.attn_v.weight").dims, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(floats(f, "blk.0.ffn_norm.weight"), iota(4));
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);  // tied
  const ModelConfig c = config_from_gguf(f);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.rope_type, RopeType::kNorm);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_TRUE(c.qkv_bias && c.output_bias);
}

TEST_F(HfDir, Gemma3NormsGetPlusOne) {
  write_model("gemma3_text");
  const GgufFile f = hf_to_gguf(dir_.string());
  EXPECT_EQ(floats(f, "blk.0.attn_norm.weight"), iota(4, 1));
  EXPECT_EQ(floats(f, "blk.0.ffn_norm.weight"), iota(4, 0.75f));
  EXPECT_EQ(floats(f, "blk.0.attn_q_norm.weight"), iota(4, 1));
  EXPECT_EQ(floats(f, "output_norm.weight"), iota(4, 1.5f));
  EXPECT_EQ(floats(f, "blk.0.attn_q.weight"), iota(32));  // NEOX: rows as HF has them
  const ModelConfig c = config_from_gguf(f);
  EXPECT_EQ(c.norm_weight_offset, 0);
  EXPECT_TRUE(c.post_norms);
}

// As llama.cpp's converter writes Phi-3: the fused tensors as they are (no q/k permutation: NEOX
// RoPE), LongRoPE's factors as two F32 tensors, attn_factor and the original context, no type key.
TEST_F(HfDir, Phi3KeepsFusedTensorsAndWritesLongRopeFactors) {
  write_model("phi3");
  const GgufFile f = hf_to_gguf(dir_.string());
  EXPECT_EQ(f.get_string("general.architecture"), "phi3");
  EXPECT_EQ(floats(f, "blk.0.attn_qkv.weight"), iota(64));
  EXPECT_EQ(f.tensor("blk.0.attn_qkv.weight").dims, (std::vector<int64_t>{4, 16}));
  EXPECT_EQ(floats(f, "blk.0.ffn_up.weight"), iota(32, 1000));  // gate rows then up rows
  EXPECT_EQ(f.find_tensor("blk.0.ffn_gate.weight"), nullptr);
  EXPECT_EQ(floats(f, "output.weight"), iota(24, 7));
  EXPECT_EQ(floats(f, "rope_factors_long.weight"), (std::vector<float>{2, 8}));
  EXPECT_EQ(floats(f, "rope_factors_short.weight"), (std::vector<float>{1, 1.5f}));
  EXPECT_EQ(f.find("phi3.rope.scaling.type"), nullptr);
  const ModelConfig c = config_from_gguf(f);
  EXPECT_TRUE(c.fused_qkv && c.fused_gate_up);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(c.rope_type, RopeType::kNeox);
  EXPECT_EQ(c.rope_scaling_type, "longrope");
  EXPECT_EQ(c.rope_original_context_length, 16);
  EXPECT_FLOAT_EQ(static_cast<float>(c.rope_attn_factor), std::sqrt(1.5f));  // 1 + ln 4 / ln 16
  EXPECT_DOUBLE_EQ(c.rope_scaling_factor, 1);
}

TEST_F(HfDir, TokenizerKeys) {
  write_model("qwen3");
  const GgufFile f = hf_to_gguf(dir_.string(), false);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_EQ(f.get_string("tokenizer.chat_template"), "{{ messages }}");
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").size(), 6u);
  const GgufArray& types = f.get_array("tokenizer.ggml.token_type");
  EXPECT_EQ(*types.values[0].get_if<int32_t>(), 2);  // unknown
  EXPECT_EQ(*types.values[1].get_if<int32_t>(), 3);  // control
  EXPECT_EQ(*types.values[3].get_if<int32_t>(), 1);
  const GgufArray& scores = f.get_array("tokenizer.ggml.scores");
  EXPECT_EQ(*scores.values[5].get_if<float>(), 0.0f);  // "ab": merge 0, the highest score
  EXPECT_EQ(f.get_array("tokenizer.hf.eos_token_ids").values.size(), 2u);
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_space_prefix"));
}

// Issue 34, item 4: a valid header of 300,000 entries never finished loading (the header was
// parsed in quadratic time). The tensors no architecture uses are read and left alone.
TEST_F(HfDir, ThreeHundredThousandUnusedTensorsLoad) {
  write_model("qwen3");
  const size_t used = hf_to_gguf(dir_.string()).tensors().size();
  extra_tensors_ = 300000;
  write_model("qwen3");
  ASSERT_GT(fs::file_size(dir_ / "model.safetensors"), 15u << 20);
  const GgufFile f = hf_to_gguf(dir_.string());
  EXPECT_EQ(f.tensors().size(), used);
  EXPECT_EQ(f.tensor("token_embd.weight").num_elements, 24);
}

// Issue 34, item 5: vocab_size = 2^30 padded the vocabulary to 2^30 tokens (std::bad_alloc).
TEST_F(HfDir, SizesAreCheckedBeforeTheyAreUsed) {
  write_model("qwen3");
  Json config = Json::parse(std::ifstream(dir_ / "config.json"));
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, int64_t>>{{"vocab_size", int64_t{1} << 30},
                                                    {"num_hidden_layers", int64_t{1} << 30},
                                                    {"hidden_size", int64_t{1} << 30}}) {
    Json bad = config;
    bad[field] = value;
    write(dir_ / "config.json", bad.dump());
    try {
      hf_to_gguf(dir_.string(), false);
      ADD_FAILURE() << field;
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.field(), field);
      EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
    }
  }
  for (const auto& [field, value] : std::vector<std::pair<std::string, int>>{
           {"vocab_size", 1 << 21}, {"vocab_size", 5}, {"hidden_size", 8}}) {
    Json bad = config;
    bad[field] = value;
    if (field == "hidden_size") bad["head_dim"] = 4;
    write(dir_ / "config.json", bad.dump());
    for (bool with_tensors : {false, true}) {
      try {
        hf_to_gguf(dir_.string(), with_tensors);
        ADD_FAILURE() << field << " = " << value;
      } catch (const FormatError& e) {
        const std::string want = str_cat(field, " = ", value, ": expected the ");
        EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("model.embed_tokens.weight, whose shape is [6,4]"),
                  std::string::npos) << e.what();
      }
    }
  }
}

TEST_F(HfDir, Refusals) {
  write_model("llama");
  write(dir_ / "tokenizer.json", Json{{"model", {{"type", "WordPiece"}, {"vocab", Json::object()}}}}.dump());
  try {
    hf_to_gguf(dir_.string());
    FAIL() << "a WordPiece tokenizer was read";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("model.type = 'WordPiece' is not supported"), std::string::npos) << e.what();
  }
  write_model("llama");
  fs::remove(dir_ / "model.safetensors");
  EXPECT_THROW(hf_to_gguf(dir_.string()), ConfigError);
  EXPECT_NO_THROW(hf_to_gguf(dir_.string(), false));  // the tokenizer of a config-only directory
}

}  // namespace
}  // namespace specdec::model
