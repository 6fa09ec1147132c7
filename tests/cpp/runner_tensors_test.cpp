// The tensors a forward needs: present with the shapes the ModelConfig implies.
#include <gtest/gtest.h>

#include "common/errors.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "runner/tensor_names.h"
#include "test_data.h"

using namespace specdec;
using namespace specdec::model;

namespace {

// A 2-layer qwen2-like model with F32 zero weights: d 8, 2 q heads / 1 kv head of 4, ff 16, vocab 10.
GgufWriter tiny_qwen2(bool with_bias = true) {
  GgufWriter w;
  w.set_string("general.architecture", "qwen2");
  w.set_u32("qwen2.block_count", 2).set_u32("qwen2.embedding_length", 8);
  w.set_u32("qwen2.feed_forward_length", 16).set_u32("qwen2.attention.head_count", 2);
  w.set_u32("qwen2.attention.head_count_kv", 1).set_u32("qwen2.context_length", 64);
  w.set_f32("qwen2.attention.layer_norm_rms_epsilon", 1e-6f);
  auto add = [&](const std::string& name, std::vector<int64_t> dims) {
    int64_t n = 1;
    for (int64_t x : dims) n *= x;
    w.add_f32(name, dims, std::vector<float>(static_cast<size_t>(n)));
  };
  add("token_embd.weight", {8, 10});
  add("output_norm.weight", {8});
  add("output.weight", {8, 10});
  for (int i = 0; i < 2; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    add(p + "attn_norm.weight", {8});
    add(p + "attn_q.weight", {8, 8});
    add(p + "attn_k.weight", {8, 4});
    add(p + "attn_v.weight", {8, 4});
    add(p + "attn_output.weight", {8, 8});
    if (with_bias || i == 1) {
      add(p + "attn_q.bias", {8});
      add(p + "attn_k.bias", {4});
      add(p + "attn_v.bias", {4});
    }
    add(p + "ffn_norm.weight", {8});
    add(p + "ffn_gate.weight", {8, 16});
    add(p + "ffn_up.weight", {8, 16});
    add(p + "ffn_down.weight", {16, 8});
  }
  return w;
}

}  // namespace

TEST(RunnerTensorsTest, RealSmallModels) {
  const auto f = GgufFile::open(test_data::stories260k());
  EXPECT_NO_THROW(runner::check_model_tensors(f, config_from_gguf(f)));
  const auto q = GgufFile::from_bytes(tiny_qwen2().to_bytes());
  const ModelConfig c = config_from_gguf(q);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_NO_THROW(runner::check_model_tensors(q, c));
  EXPECT_EQ(runner::layer_tensors(c, 1)[1].name, "blk.1.attn_q.weight");
}

TEST(RunnerTensorsTest, MissingOrMisshapenTensorsNameThem) {
  // blk.0.attn_q.bias decides qkv_bias: without it the config says none, and layer 1's biases
  // are optional (present with the right shapes: fine).
  const auto f = GgufFile::from_bytes(tiny_qwen2(false).to_bytes());
  EXPECT_NO_THROW(runner::check_model_tensors(f, config_from_gguf(f)));

  GgufWriter w = tiny_qwen2();
  w.add_f32("blk.1.attn_k_norm.weight", {3}, {0, 0, 0});  // optional only with qk_norm: ignored
  auto bad = GgufFile::from_bytes(w.to_bytes());
  EXPECT_NO_THROW(runner::check_model_tensors(bad, config_from_gguf(bad)));

  const auto good = GgufFile::from_bytes(tiny_qwen2().to_bytes());
  ModelConfig c = config_from_gguf(good);
  c.intermediate_size = 12;
  try {
    runner::check_model_tensors(good, c);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'blk.0.ffn_gate.weight' has shape [8, 16]"),
              std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("implies [8, 12]"), std::string::npos);
  }
  c = config_from_gguf(good);
  c.tied_embeddings = false;
  c.post_norms = true;
  try {
    runner::check_model_tensors(good, c);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'blk.0.post_attention_norm.weight' is missing"),
              std::string::npos) << e.what();
  }
}
