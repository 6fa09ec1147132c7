#include "runner/dflash_context.h"

#include "common/errors.h"
#include "ops/norm.h"
#include "ops/rows.h"
#include "quant/matmul.h"
#include "runner/blocks.h"
#include "runner/model_runner.h"

namespace specdec::runner {

uint64_t DFlashContext::set_sink(device::Device& dev, const model::ModelConfig& config,
                                 int64_t max_num_batched_tokens, const std::vector<int>& layers, HiddenSink sink) {
  SPECDEC_CHECK(!layers.empty() && sink, "hidden sink", "empty", "target layers and a sink");
  SPECDEC_CHECK(!sink_, "hidden sink", "a second one",
               "one drafter per target (release the proposer that holds this target first)");
  for (int l : layers) {
    SPECDEC_CHECK(l >= 0 && l < config.num_layers, "hidden layers", l, str_cat("in [0, ", config.num_layers, ")"));
  }
  capture_layers_ = layers;
  sink_ = std::move(sink);
  captured_ = dev.allocate(static_cast<size_t>(max_num_batched_tokens * static_cast<int64_t>(layers.size()) *
                                               config.hidden_size) * 4);
  sink_token_ = ++next_sink_token_;
  return sink_token_;
}

void DFlashContext::clear_sink(uint64_t token) {
  if (token == 0 || token != sink_token_) return;
  capture_layers_.clear();
  sink_ = {};
  captured_ = device::Buffer{};
  sink_token_ = 0;
}

void DFlashContext::capture(device::Device& dev, int layer, const device::Buffer& from,
                            int64_t num_tokens, int hidden) {
  const int64_t width = static_cast<int64_t>(capture_layers_.size()) * hidden;
  for (size_t j = 0; j < capture_layers_.size(); ++j) {
    if (capture_layers_[j] != layer) continue;
    ops::copy_2d(dev, ops::Slice(from, 0), ops::Slice(captured_, static_cast<int64_t>(j) * hidden), num_tokens,
                 hidden, hidden, width);
  }
}

void DFlashContext::send(const std::vector<StepRequest>& requests, int64_t num_tokens) const {
  std::vector<ContextRows> rows;
  int64_t row = 0;
  for (const auto& r : requests) {
    const auto n = static_cast<int64_t>(r.tokens.size());
    rows.push_back({r.request_id, r.num_computed_tokens, n, row, r.tokens});
    row += n;
  }
  sink_(rows, captured_, num_tokens);
}

void DFlashContext::set_target(const ModelRunner& drafter, std::shared_ptr<ModelRunner> target) {
  const model::ModelConfig& c = drafter.config();
  SPECDEC_CHECK(c.is_dflash(), "set_dflash_target", c.name, "only for a DFlash drafter");
  SPECDEC_CHECK(target != nullptr && target.get() != &drafter, "target", "None", "the target's ModelRunner");
  const model::ModelConfig& t = target->config();
  SPECDEC_CHECK(!t.is_dflash(), "target", t.name, "a model that is not itself a DFlash drafter");
  SPECDEC_CHECK(t.hidden_size == c.hidden_size, "DFlash drafter hidden_size", c.hidden_size,
               str_cat("the target's hidden_size ", t.hidden_size, " (it reads the target's embedding)"));
  SPECDEC_CHECK(t.vocab_size == c.vocab_size, "DFlash drafter vocab_size", c.vocab_size,
               str_cat("the target's vocab_size ", t.vocab_size, " (it drafts with the target's head)"));
  SPECDEC_CHECK(target->options().logit_token_ids.empty(), "target logit_token_ids",
               target->options().logit_token_ids.size(), "none (the drafter reads the whole head)");
  for (int l : c.dflash_target_layers) {
    SPECDEC_CHECK(l < t.num_layers, "dflash_config.target_layer_ids", l,
                 str_cat("layers of the target, in [0, ", t.num_layers, ")"));
  }
  // a target step's rows all become context in one drafter step
  const int64_t own = drafter.options().max_num_batched_tokens;
  SPECDEC_CHECK(own >= target->options().max_num_batched_tokens, "DFlash drafter max_num_batched_tokens", own,
               str_cat("at least the target's ", target->options().max_num_batched_tokens));
  target_ = std::move(target);
}

std::vector<const ContextRows*> keep_context_rows(const std::vector<ContextRows>& rows, int64_t num_rows,
                                                  int64_t max_model_len, RequestTable& requests) {
  std::vector<const ContextRows*> kept;
  for (const auto& r : rows) {
    SPECDEC_CHECK(r.num_rows >= 1 && r.first_row >= 0 && r.first_row + r.num_rows <= num_rows && r.first_position >= 0,
                 str_cat("context rows of ", r.request_id), r.num_rows, str_cat("rows within the step's ", num_rows));
    const int64_t have = requests.length(r.request_id);
    if (have < r.first_position || r.first_position + r.num_rows > max_model_len) {
      requests.drop(r.request_id);  // rows this drafter never saw (or past its length)
      continue;
    }
    if (have > r.first_position) requests.roll_back(r.request_id, r.first_position);
    kept.push_back(&r);
  }
  return kept;
}

std::vector<StepRequest> context_requests(const std::vector<const ContextRows*>& kept) {
  std::vector<StepRequest> reqs;
  for (const ContextRows* r : kept) {
    StepRequest s;
    s.request_id = r->request_id;
    s.tokens.assign(static_cast<size_t>(r->num_rows), 0);
    s.num_computed_tokens = r->first_position;
    s.num_logits = 0;
    reqs.push_back(std::move(s));
  }
  return reqs;
}

const device::Buffer& contiguous_rows(device::Device& dev, const std::vector<const ContextRows*>& kept,
                                   const device::Buffer& hidden, int64_t width, device::Buffer& gathered) {
  int64_t next = 0;
  bool contiguous = true;
  for (const ContextRows* r : kept) {
    contiguous = contiguous && r->first_row == next;
    next += r->num_rows;
  }
  if (contiguous) return hidden;
  gathered = dev.allocate(static_cast<size_t>(next * width) * 4, device::Lifetime::kStep);
  int64_t at = 0;
  for (const ContextRows* r : kept) {
    ops::copy_2d(dev, ops::Slice(hidden, r->first_row * width), ops::Slice(gathered, at * width), r->num_rows,
                 width, width, width);
    at += r->num_rows;
  }
  return gathered;
}

void write_context_layers(const LayerStep& step, const ModelWeights& weights, const device::Buffer& hidden) {
  const model::ModelConfig& c = step.config;
  StepBuffers& s = step.s;
  const float eps = static_cast<float>(c.norm_eps), off = static_cast<float>(c.norm_weight_offset);
  quant::matmul_reusing(step.dev, *weights.dflash_fc, hidden, s.xq, step.num_tokens, s.x);
  ops::rms_norm(step.dev, s.x, weights.dflash_hidden_norm, s.h, step.num_tokens, c.hidden_size, eps, off);
  quant::clear_source(s.xq);  // the norm wrote s.h without quantising it: xq holds none of it
  for (int il = 0; il < c.num_layers; ++il) gqa_write_context(step, il, weights.layers[il]);
}

}  // namespace specdec::runner
