#include "runner/model_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "attention/registry.h"
#include "common/errors.h"
#include "kv/cache_ops.h"
#include "kv/planner.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ops/rows.h"
#include "ops/sampling.h"
#include "quant/device_weight.h"
#include "quant/formats.h"
#include "model/dflash.h"
#include "quant/matmul.h"
#include "runner/blocks.h"

namespace specdec::runner {

namespace {

std::vector<attn::LayerAttentionInfo> layer_infos(const model::ModelConfig& c) {
  std::vector<attn::LayerAttentionInfo> out;
  for (int il = 0; il < c.num_layers; ++il) {
    attn::LayerAttentionInfo info;
    info.layer_name = str_cat("layers.", il);
    info.num_q_heads = c.num_q_heads;
    info.use_softcap = c.attn_logit_softcap > 0;
    // a DFlash block attends both ways, except in a drafter's sliding (causal, windowed) layers
    info.use_non_causal = c.is_dflash() && c.layers[il].attention != model::LayerAttention::kSliding;
    out.push_back(info);
  }
  return out;
}

kv::KvCacheConfig plan(const model::ModelConfig& c, const RunnerOptions& o) {
  SPECDEC_CHECK(o.max_num_batched_tokens >= 1, "max_num_batched_tokens", o.max_num_batched_tokens, ">= 1");
  SPECDEC_CHECK(o.max_num_logits >= 1, "max_num_logits", o.max_num_logits, ">= 1");
  SPECDEC_CHECK(o.max_model_len >= 0, "max_model_len", o.max_model_len, ">= 0 (0: the model's)");
  SPECDEC_CHECK(o.max_model_len <= c.context_length, "max_model_len", o.max_model_len,
               str_cat("at most the model's context length ", c.context_length));
  kv::PlannerOptions po;
  po.max_num_batched_tokens = o.max_num_batched_tokens;
  po.model_name = c.name;
  // a DFlash drafter's sliding layers keep their whole K/V: its cache is rolled back and
  // rewritten from the target's rows every step, so it never frees a window's blocks
  po.disable_hybrid_kv_cache_manager = o.disable_hybrid_kv_cache_manager || c.is_dflash();
  int64_t len = o.max_model_len;
  if (len == 0) {
    len = kv::max_model_len_for_budget(c.layer_kv_specs(o.block_size, o.kv_cache_dtype),
                                       o.kv_cache_memory_bytes, c.context_length, po);
    SPECDEC_CHECK(len > 0, "kv_cache_memory_bytes", o.kv_cache_memory_bytes,
                 "too small to hold one request of even one block");
  }
  // Windows as wide as the longest request are full attention (one group fewer).
  return kv::plan_kv_cache(c.layer_kv_specs(o.block_size, o.kv_cache_dtype, len),
                           o.kv_cache_memory_bytes, len, po);
}

const model::GgufTensor& lm_head_tensor(const model::GgufFile& file, const model::ModelConfig& c) {
  return file.tensor(c.tied_embeddings ? "token_embd.weight" : "output.weight");
}

// The lm_head rows of `ids` (checked by the caller) as their own matrix: rows of a ggml block
// format are independent, so row j holds token ids[j]'s bytes as they are in the file.
quant::DeviceWeight logit_rows(ocl::Context& ctx, const model::GgufFile& file, const model::ModelConfig& c,
                               const std::vector<int32_t>& ids, const std::string& what) {
  const model::GgufTensor& t = lm_head_tensor(file, c);
  const int64_t cols = t.dims.at(0);
  const int64_t rb = quant::row_bytes(t.type, cols);
  std::vector<uint8_t> bytes(ids.size() * static_cast<size_t>(rb));
  for (size_t j = 0; j < ids.size(); ++j) {
    std::memcpy(bytes.data() + j * static_cast<size_t>(rb), t.data + static_cast<int64_t>(ids[j]) * rb,
                static_cast<size_t>(rb));
  }
  return quant::upload_weight(ctx, t.type, bytes.data(), bytes.size(), {cols, static_cast<int64_t>(ids.size())},
                              t.name + "[" + what + "]");
}

int64_t lm_head_rows(const model::GgufFile& file, const model::ModelConfig& c) {
  const model::GgufTensor& t = lm_head_tensor(file, c);
  return std::min<int64_t>(t.num_elements / t.dims.at(0), c.vocab_size);
}

}  // namespace

ModelRunner::ModelRunner(std::shared_ptr<ocl::Context> ctx, const std::string& path,
                         const RunnerOptions& options, const LoadProgress& progress)
    : ctx_(std::move(ctx)), options_(options), file_(model::open_model_file(path)),
      config_(model::config_from_gguf(file_)) {
  const auto& c = config_;
  weights_ = load_weights(*ctx_, file_, c, progress);
  SPECDEC_CHECK(!c.is_dflash() || options_.logit_token_ids.empty(), "logit_token_ids",
               str_cat(options_.logit_token_ids.size(), " ids"), "none for a DFlash drafter (it uses the target's head)");
  if (!options_.logit_token_ids.empty()) {  // the reduced lm_head replaces the whole one
    const auto& ids = options_.logit_token_ids;
    const int64_t vocab = lm_head_rows(file_, c);
    for (size_t j = 0; j < ids.size(); ++j) {
      const int32_t lo = j == 0 ? 0 : ids[j - 1] + 1;
      SPECDEC_CHECK(ids[j] >= lo && ids[j] < vocab, str_cat("logit_token_ids[", j, "]"), ids[j],
                   str_cat("token ids in [0, ", vocab, "), strictly increasing (here in [", lo, ", ", vocab, "))"));
    }
    if (weights_.output) weights_.device_bytes -= weights_.output->source_bytes();
    weights_.output = logit_rows(*ctx_, file_, c, ids, "logit_token_ids");
    weights_.device_bytes += weights_.output->source_bytes();
  }
  kv_config_ = plan(c, options_);
  setup_ = attn::initialize_attention(kv_config_, layer_infos(c), options_.attention_backend,
                                      ctx_->device().type);
  cache_ = std::make_unique<kv::KvCacheAllocation>(ctx_, kv_config_, setup_.layouts);
  manager_ = std::make_unique<kv::KvCacheManager>(kv_config_, options_.enable_prefix_caching);
  scratch_ = std::make_unique<StepBuffers>(*ctx_, c, options_.max_num_batched_tokens, options_.max_num_logits);
  layers_ = bind_layers(c, setup_, *cache_);
  build_rope_tables(*ctx_, file_, c, kv_config_.max_model_len, *scratch_);
}

ModelRunner::~ModelRunner() = default;

int64_t ModelRunner::num_logit_columns() const {
  std::lock_guard<std::mutex> guard(mu_);
  return logit_columns();
}

int64_t ModelRunner::logit_columns() const {
  return options_.logit_token_ids.empty()
             ? config_.vocab_size
             : static_cast<int64_t>(options_.logit_token_ids.size() + extra_ids_.size());
}

void ModelRunner::set_extra_logit_tokens(const std::vector<int32_t>& ids) {
  std::lock_guard<std::mutex> guard(mu_);
  if (ids == extra_ids_) return;
  const auto& base = options_.logit_token_ids;
  SPECDEC_CHECK(!base.empty() || ids.empty(), "extra logit tokens", str_cat(ids.size(), " ids"),
               "none unless the runner has logit_token_ids (a reduced vocabulary)");
  SPECDEC_CHECK(static_cast<int64_t>(ids.size()) <= kMaxExtraLogitTokens, "extra logit tokens",
               str_cat(ids.size(), " ids"), str_cat("at most ", kMaxExtraLogitTokens));
  const int64_t vocab = lm_head_rows(file_, config_);
  for (size_t j = 0; j < ids.size(); ++j) {
    const int32_t lo = j == 0 ? 0 : ids[j - 1] + 1;
    SPECDEC_CHECK(ids[j] >= lo && ids[j] < vocab && !std::binary_search(base.begin(), base.end(), ids[j]),
                 str_cat("extra logit token [", j, "]"), ids[j],
                 str_cat("token ids in [0, ", vocab, "), strictly increasing, not in logit_token_ids"));
  }
  extra_ids_.clear();
  extra_head_.reset();
  if (ids.empty()) return;
  extra_head_ = logit_rows(*ctx_, file_, config_, ids, "extra logit tokens");
  if (static_cast<int64_t>(ids.size()) > extra_capacity_) {  // grows in powers of two
    int64_t cap = 256;
    while (cap < static_cast<int64_t>(ids.size())) cap *= 2;
    extra_logits_ = ocl::Buffer(*ctx_, static_cast<size_t>(options_.max_num_logits * cap) * 4);
    extra_capacity_ = cap;
  }
  extra_ids_ = ids;
}

int64_t ModelRunner::num_lm_head_rows() const {
  if (config_.is_dflash()) return dflash_target_ ? dflash_target_->num_lm_head_rows() : config_.vocab_size;
  return lm_head_rows(file_, config_);
}

const quant::DeviceWeight& ModelRunner::embedding() const {
  if (!config_.is_dflash()) return weights_.token_embd;
  SPECDEC_CHECK(dflash_target_ != nullptr, "DFlash drafter", config_.name,
               "attached to its target (set_dflash_target) before a step: it reads the target's embedding");
  return dflash_target_->weights_.token_embd;
}

const quant::DeviceWeight& ModelRunner::head() const {
  if (!config_.is_dflash()) return weights_.lm_head();
  SPECDEC_CHECK(dflash_target_ != nullptr, "DFlash drafter", config_.name,
               "attached to its target (set_dflash_target) before a step: it reads the target's output head");
  return dflash_target_->weights_.lm_head();
}

void ModelRunner::set_dflash_target(std::shared_ptr<ModelRunner> target) {
  std::lock_guard<std::mutex> guard(mu_);
  SPECDEC_CHECK(config_.is_dflash(), "set_dflash_target", config_.name, "only for a DFlash drafter");
  SPECDEC_CHECK(target != nullptr && target.get() != this, "target", "None", "the target's ModelRunner");
  const model::ModelConfig& t = target->config();
  SPECDEC_CHECK(!t.is_dflash(), "target", t.name, "a model that is not itself a DFlash drafter");
  SPECDEC_CHECK(t.hidden_size == config_.hidden_size, "DFlash drafter hidden_size", config_.hidden_size,
               str_cat("the target's hidden_size ", t.hidden_size, " (it reads the target's embedding)"));
  SPECDEC_CHECK(t.vocab_size == config_.vocab_size, "DFlash drafter vocab_size", config_.vocab_size,
               str_cat("the target's vocab_size ", t.vocab_size, " (it drafts with the target's head)"));
  SPECDEC_CHECK(target->options().logit_token_ids.empty(), "target logit_token_ids",
               target->options().logit_token_ids.size(), "none (the drafter reads the whole head)");
  for (int l : config_.dflash_target_layers) {
    SPECDEC_CHECK(l < t.num_layers, "dflash_config.target_layer_ids", l,
                 str_cat("layers of the target, in [0, ", t.num_layers, ")"));
  }
  // a target step's rows all become context in one drafter step
  SPECDEC_CHECK(options_.max_num_batched_tokens >= target->options().max_num_batched_tokens,
               "DFlash drafter max_num_batched_tokens", options_.max_num_batched_tokens,
               str_cat("at least the target's ", target->options().max_num_batched_tokens));
  dflash_target_ = std::move(target);
}

uint64_t ModelRunner::set_hidden_sink(const std::vector<int>& layers, HiddenSink sink) {
  std::lock_guard<std::mutex> guard(mu_);
  SPECDEC_CHECK(!layers.empty() && sink, "hidden sink", "empty", "target layers and a sink");
  SPECDEC_CHECK(!sink_, "hidden sink", "a second one",
               "one drafter per target (release the proposer that holds this target first)");
  for (int l : layers) {
    SPECDEC_CHECK(l >= 0 && l < config_.num_layers, "hidden layers", l, str_cat("in [0, ", config_.num_layers, ")"));
  }
  capture_layers_ = layers;
  sink_ = std::move(sink);
  captured_ = ocl::Buffer(*ctx_, static_cast<size_t>(options_.max_num_batched_tokens * static_cast<int64_t>(layers.size()) *
                                                     config_.hidden_size) * 4);
  sink_token_ = ++next_sink_token_;
  return sink_token_;
}

void ModelRunner::clear_hidden_sink(uint64_t token) {
  std::lock_guard<std::mutex> guard(mu_);
  if (token == 0 || token != sink_token_) return;
  capture_layers_.clear();
  sink_ = {};
  captured_ = ocl::Buffer{};
  sink_token_ = 0;
}

void ModelRunner::write_context(const std::vector<ContextRows>& rows, const ocl::Buffer& hidden, int64_t num_rows) {
  std::lock_guard<std::mutex> guard(mu_);
  write_context_locked(rows, hidden, num_rows);
}

void ModelRunner::write_context_locked(const std::vector<ContextRows>& rows, const ocl::Buffer& hidden,
                                       int64_t num_rows) {
  SPECDEC_CHECK(config_.is_dflash(), "write_context", config_.name, "only for a DFlash drafter");
  const int d = config_.hidden_size;
  const int64_t width = static_cast<int64_t>(config_.dflash_target_layers.size()) * d;
  std::vector<StepRequest> reqs;
  std::vector<const ContextRows*> kept;
  for (const auto& r : rows) {
    SPECDEC_CHECK(r.num_rows >= 1 && r.first_row >= 0 && r.first_row + r.num_rows <= num_rows && r.first_position >= 0,
                 str_cat("context rows of ", r.request_id), r.num_rows, str_cat("rows within the step's ", num_rows));
    const auto it = lengths_.find(r.request_id);
    const int64_t have = it == lengths_.end() ? 0 : it->second;
    if (have < r.first_position || r.first_position + r.num_rows > max_model_len()) {
      // rows this drafter never saw (or past its length): no context for the request now
      if (it != lengths_.end()) {
        manager_->free(r.request_id);
        lengths_.erase(it);
        partial_.erase(r.request_id);
      }
      continue;
    }
    if (have > r.first_position) {
      if (r.first_position == 0) {
        manager_->free(r.request_id);
        lengths_.erase(r.request_id);
      } else {
        manager_->truncate(r.request_id, r.first_position);
        lengths_[r.request_id] = r.first_position;
      }
      partial_.erase(r.request_id);
    }
    StepRequest s;
    s.request_id = r.request_id;
    s.tokens.assign(static_cast<size_t>(r.num_rows), 0);
    s.num_computed_tokens = r.first_position;
    s.num_logits = 0;
    reqs.push_back(std::move(s));
    kept.push_back(&r);
  }
  if (reqs.empty()) return;
  ocl::Context& ctx = *ctx_;
  StepBuffers& s = *scratch_;
  // the kept requests' rows, contiguous (a copy only when one was dropped or rows were reordered)
  const ocl::Buffer* in = &hidden;
  ocl::Buffer gathered;
  int64_t next = 0;
  bool contiguous = true;
  for (const ContextRows* r : kept) {
    contiguous = contiguous && r->first_row == next;
    next += r->num_rows;
  }
  if (!contiguous) {
    gathered = ocl::Buffer(ctx, static_cast<size_t>(next * width) * 4);
    int64_t at = 0;
    for (const ContextRows* r : kept) {
      ops::copy_2d(ctx, ops::Slice(hidden, r->first_row * width), ops::Slice(gathered, at * width), r->num_rows,
                   width, width, width);
      at += r->num_rows;
    }
    in = &gathered;
  }
  StepPlan plan;
  try {
    plan = plan_step(reqs);
  } catch (const ConfigError&) {  // not all fit: each request on its own; one that does not fit
    if (kept.size() > 1) {           // goes without context (no drafts) until its next prefill
      for (const ContextRows* r : kept) write_context_locked({*r}, hidden, num_rows);
      return;
    }
    for (const auto& r : reqs) {
      if (lengths_.contains(r.request_id)) {
        manager_->free(r.request_id);
        lengths_.erase(r.request_id);
      }
    }
    return;
  }
  // prefix caching: the rows before these are the target's committed context
  for (const ContextRows* r : kept) {
    if (static_cast<int64_t>(r->tokens.size()) == r->num_rows) {
      manager_->record_tokens(r->request_id, r->first_position, r->tokens, r->first_position);
    }
  }
  const int64_t t = plan.num_tokens;
  const float eps = static_cast<float>(config_.norm_eps), off = static_cast<float>(config_.norm_weight_offset);
  // the context: hidden_norm(fc(concatenated hidden states)), the same input for every layer
  quant::matmul_reusing(ctx, *weights_.dflash_fc, *in, s.xq, t, s.x);
  ops::rms_norm(ctx, s.x, weights_.dflash_hidden_norm, s.h, t, d, eps, off);
  s.xq.source = nullptr;  // s.h has no quantisation of its own yet
  const LayerStep step{ctx, config_, layers_, plan.metadata, s, t};
  for (int il = 0; il < config_.num_layers; ++il) gqa_write_context(step, il, weights_.layers[il]);
  for (const auto& r : reqs) lengths_[r.request_id] = r.num_computed_tokens + static_cast<int64_t>(r.tokens.size());
}

std::vector<int32_t> ModelRunner::extra_logit_tokens() const {
  std::lock_guard<std::mutex> guard(mu_);
  return extra_ids_;
}

void ModelRunner::check_requests(const std::vector<StepRequest>& requests) const {
  int64_t tokens = 0, logits = 0;
  for (const auto& r : requests) {
    const std::string f = "request " + r.request_id;
    SPECDEC_CHECK(!r.tokens.empty(), f + ".tokens", 0, "at least one new token");
    const auto it = lengths_.find(r.request_id);
    const int64_t have = it == lengths_.end() ? 0 : it->second;
    SPECDEC_CHECK(r.num_computed_tokens == have, f + ".num_computed_tokens", r.num_computed_tokens,
                 str_cat("the tokens in the cache: ", have));
    SPECDEC_CHECK(r.num_computed_tokens + static_cast<int64_t>(r.tokens.size()) <= max_model_len(),
                 f + ".tokens", r.num_computed_tokens + static_cast<int64_t>(r.tokens.size()),
                 str_cat("total length at most max_model_len = ", max_model_len()));
    SPECDEC_CHECK(r.num_logits >= 0 && r.num_logits <= static_cast<int>(r.tokens.size()),
                 f + ".num_logits", r.num_logits, "in [0, number of new tokens]");
    for (int32_t id : r.tokens) {
      SPECDEC_CHECK(id >= 0 && id < config_.vocab_size, f + ".token", id,
                   str_cat("a token id in [0, ", config_.vocab_size, ")"));
    }
    for (const auto& other : requests) {
      SPECDEC_CHECK(&other == &r || other.request_id != r.request_id, "request_id", r.request_id,
                   "unique within a step");
    }
    tokens += static_cast<int64_t>(r.tokens.size());
    logits += r.num_logits;
  }
  SPECDEC_CHECK(tokens <= options_.max_num_batched_tokens, "tokens in the step", tokens,
               str_cat("at most max_num_batched_tokens = ", options_.max_num_batched_tokens));
  SPECDEC_CHECK(logits <= options_.max_num_logits, "logit rows in the step", logits,
               str_cat("at most max_num_logits = ", options_.max_num_logits));
}

namespace {

// The quantised form of s.h [t, d] for the matmul that reads it first, with that weight's scale
// block (quant::activation_scale_block), written by the norm that writes s.h (one launch fewer per
// block, and the rows are quantised while in cache); nullptr where that weight reads f32 or
// d % scale_block != 0.
const ops::QuantizedOut* quantize_h(ocl::Context& ctx, StepBuffers& s, int64_t t, int d,
                                    const quant::DeviceWeight& first_reader) {
  const int scale_block = quant::activation_scale_block(first_reader.type());
  if (scale_block == 0 || !quant::prepare_activations(ctx, t, d, s.xq, scale_block)) return nullptr;
  s.xq_out = {&s.xq.q8, &s.xq.q16, &s.xq.rec, scale_block};
  return &s.xq_out;
}

// The first matmul of layer il that reads its normed input: MLA's kv_a, else q (with k, v).
const quant::DeviceWeight& attention_input_reader(const model::ModelConfig& c, const LayerWeights& w,
                                                  int il) {
  if (c.layers[il].attention == model::LayerAttention::kMla) return w.wkv_a;
  return w.wqkv ? *w.wqkv : w.wqk ? *w.wqk : w.wq;
}

// After a norm wrote s.h: s.xq holds its quantisation when `q` was passed.
void mark_h(StepBuffers& s, const ops::QuantizedOut* q) { s.xq.source = q != nullptr ? s.h.get() : nullptr; }

}  // namespace

// One decoder layer on the normed input s.h (the previous layer's fused add + norm). Leaves the
// residual stream in s.x and, in s.h, its norm with `next_norm` (the next layer's attn_norm, or
// the output norm after the last layer): each residual add is fused with the norm after it.
void ModelRunner::run_layer(int il, const std::vector<attn::AttentionMetadata>& md, int64_t t, int exit) {
  const auto& c = config_;
  const LayerWeights& w = weights_.layers[il];
  StepBuffers& s = *scratch_;
  ocl::Context& ctx = *ctx_;
  const int d = c.hidden_size;
  const float eps = static_cast<float>(c.norm_eps), off = static_cast<float>(c.norm_weight_offset);
  const LayerStep step{ctx, c, layers_, md, s, t};

  if (c.layers[il].attention == model::LayerAttention::kMla) mla_attention(step, il, w);
  else gqa_attention(step, il, w);
  if (present(w.post_attn_norm)) ops::rms_norm(ctx, s.proj, w.post_attn_norm, s.proj, t, d, eps, off);
  const ops::QuantizedOut* q = quantize_h(ctx, s, t, d, w.gate_up ? *w.gate_up : w.gate);
  ops::add_rms_norm(ctx, s.x, s.proj, w.ffn_norm, s.h, t, d, eps, off, q);
  mark_h(s, q);

  gated_ffn(step, w);
  if (present(w.post_ffn_norm)) ops::rms_norm(ctx, s.proj, w.post_ffn_norm, s.proj, t, d, eps, off);
  const ocl::Buffer& next_norm = il + 1 < exit ? weights_.layers[il + 1].attn_norm : weights_.output_norm;
  // the last layer's output norm feeds the logits rows only (gathered, quantised there)
  q = il + 1 < exit ? quantize_h(ctx, s, t, d, attention_input_reader(c, weights_.layers[il + 1], il + 1))
                    : nullptr;
  ops::add_rms_norm(ctx, s.x, s.proj, next_norm, s.h, t, d, eps, off, q);
  mark_h(s, q);
}

StepOutput ModelRunner::step(const std::vector<StepRequest>& requests, const std::vector<int>& hidden_layers,
                             bool return_logits, int num_layers) {
  std::lock_guard<std::mutex> guard(mu_);
  check_requests(requests);
  SPECDEC_CHECK(num_layers >= 0 && num_layers <= config_.num_layers, "num_layers", num_layers,
               str_cat("0 (every layer) or an exit layer in [1, ", config_.num_layers, "]"));
  const int exit = num_layers == 0 ? config_.num_layers : num_layers;
  for (int l : hidden_layers) {
    SPECDEC_CHECK(l >= -1 && l < exit, "hidden_layers", l,
                 str_cat("layer indices in [0, ", exit, ") or -1 (after the final norm)"));
  }
  for (const auto& r : requests) {  // positions an early exit left without the deeper layers' K/V
    const auto it = partial_.find(r.request_id);
    if (it == partial_.end() || exit <= it->second.layers) continue;
    throw ConfigError(str_cat("request ", r.request_id, ".num_computed_tokens"), str_cat(r.num_computed_tokens),
                      str_cat("at most ", it->second.from, " for a step through ", exit,
                              " layers: an early-exit step through ", it->second.layers,
                              " layers wrote the positions after it (truncate them first)"));
  }
  StepOutput out;
  out.vocab_size = logit_columns();
  out.logits_start = {0};
  if (requests.empty()) return out;  // nothing to run
  const StepPlan plan = plan_step(requests);
  out.logits_start = plan.logits_start;
  run_layers(plan, hidden_layers, out, exit);
  compute_logits(plan, return_logits, out);
  std::vector<ContextRows> rows;  // a drafter's context from these rows (after the state below)
  if (sink_ && exit == config_.num_layers) {
    int64_t row = 0;
    for (const auto& r : requests) {
      const auto n = static_cast<int64_t>(r.tokens.size());
      rows.push_back({r.request_id, r.num_computed_tokens, n, row, r.tokens});
      row += n;
    }
  }
  for (const auto& r : requests) {
    lengths_[r.request_id] = r.num_computed_tokens + static_cast<int64_t>(r.tokens.size());
    // prefix caching: the positions before this step are final in a full step (the engine rolled
    // rejected ones back); an early exit's positions are partial, so it registers nothing
    const int64_t committed = exit < config_.num_layers ? 0
        : r.num_committed_tokens < 0 ? r.num_computed_tokens
        : std::min(r.num_computed_tokens, r.num_committed_tokens);
    manager_->record_tokens(r.request_id, r.num_computed_tokens, r.tokens, committed);
    if (exit < config_.num_layers) {
      auto [it, added] = partial_.try_emplace(r.request_id, Partial{r.num_computed_tokens, exit});
      if (!added) it->second.layers = std::min(it->second.layers, exit);
    }
  }
  if (!rows.empty()) sink_(rows, captured_, plan.num_tokens);
  return out;
}

ModelRunner::StepPlan ModelRunner::plan_step(const std::vector<StepRequest>& requests) {
  StepPlan plan;
  // Allocate every request's slots; on a shortage undo this step's allocations.
  for (const auto& r : requests) {
    const kv::AllocationResult a = manager_->allocate_slots(
        r.request_id, r.num_computed_tokens, static_cast<int64_t>(r.tokens.size()),
        r.num_committed_tokens);
    if (!a.ok) {
      for (const auto& done : plan.sched) {
        if (done.num_computed_tokens == 0) manager_->free(done.request_id);
        else manager_->truncate(done.request_id, done.num_computed_tokens);
      }
      if (r.num_computed_tokens == 0 && manager_->has_request(r.request_id)) manager_->free(r.request_id);
      throw ConfigError("kv_cache", a.to_string(), "a step whose new tokens fit the free KV blocks "
                        "(finish or preempt requests, or give a larger kv_cache_memory_bytes)");
    }
    plan.sched.push_back({r.request_id, r.num_computed_tokens, static_cast<int64_t>(r.tokens.size())});
  }
  plan_inputs(requests, plan);
  return plan;
}

void ModelRunner::plan_inputs(const std::vector<StepRequest>& requests, StepPlan& plan) {
  // The flattened inputs: token ids and positions of every new token, and the logit rows.
  std::vector<int32_t> ids, positions;
  plan.logits_start.push_back(0);
  for (const auto& r : requests) {
    const int64_t base = static_cast<int64_t>(ids.size());
    for (size_t j = 0; j < r.tokens.size(); ++j) {
      ids.push_back(r.tokens[j]);
      positions.push_back(static_cast<int32_t>(r.num_computed_tokens + static_cast<int64_t>(j)));
    }
    for (int j = static_cast<int>(r.tokens.size()) - r.num_logits; j < static_cast<int>(r.tokens.size()); ++j) {
      plan.logit_rows.push_back(static_cast<int32_t>(base + j));
    }
    plan.logits_start.push_back(static_cast<int64_t>(plan.logit_rows.size()));
  }
  plan.num_tokens = static_cast<int64_t>(ids.size());
  StepBuffers& s = *scratch_;
  // copied when created: no blocking write through the queue (each costs a round trip on PoCL)
  s.ids = ocl::Buffer(*ctx_, ids.data(), ids.size() * 4);
  s.positions = ocl::Buffer(*ctx_, positions.data(), positions.size() * 4);
  if (!plan.logit_rows.empty()) {
    s.rows = ocl::Buffer(*ctx_, plan.logit_rows.data(), plan.logit_rows.size() * 4);
  }
  // Per attention group, once for every layer of the group (slot mappings, block tables, the
  // backend's launch plan).
  plan.metadata = attn::build_step_metadata(*ctx_, setup_, *manager_, plan.sched);
}

void ModelRunner::run_layers(const StepPlan& plan, const std::vector<int>& hidden_layers, StepOutput& out,
                             int exit) {
  StepBuffers& s = *scratch_;
  ocl::Context& ctx = *ctx_;
  const int64_t t = plan.num_tokens;
  const int d = config_.hidden_size;
  const double embedding_scale = config_.is_dflash() ? config_.dflash_embedding_scale : config_.embedding_scale;
  quant::embedding_lookup(ctx, embedding(), s.ids, t, s.x, static_cast<float>(embedding_scale));
  const int64_t cap_width = static_cast<int64_t>(capture_layers_.size()) * d;
  auto capture_device = [&](int layer, const ocl::Buffer& from) {  // for a drafter's context
    for (size_t j = 0; j < capture_layers_.size(); ++j) {
      if (capture_layers_[j] != layer) continue;
      ops::copy_2d(ctx, ops::Slice(from, 0), ops::Slice(captured_, static_cast<int64_t>(j) * d), t, d, d, cap_width);
    }
  };
  auto capture = [&](int layer, const ocl::Buffer& from) {
    for (int l : hidden_layers) {
      if (l != layer) continue;
      std::vector<float> h(static_cast<size_t>(t * d));
      from.read(ctx, h.data(), h.size() * 4);
      out.hidden[layer] = std::move(h);
    }
  };
  const float eps = static_cast<float>(config_.norm_eps), off = static_cast<float>(config_.norm_weight_offset);
  const ops::QuantizedOut* q = quantize_h(ctx, s, t, d, attention_input_reader(config_, weights_.layers[0], 0));
  ops::rms_norm(ctx, s.x, weights_.layers[0].attn_norm, s.h, t, d, eps, off, q);
  mark_h(s, q);
  for (int il = 0; il < exit; ++il) {
    run_layer(il, plan.metadata, t, exit);
    capture(il, s.x);  // the residual stream after the layer
    // (Hugging Face lists the last layer's output after the final norm: s.h there)
    if (!capture_layers_.empty() && exit == config_.num_layers) {
      capture_device(il, il + 1 == config_.num_layers ? s.h : s.x);
    }
  }
  capture(-1, s.h);  // after the final norm
}

void ModelRunner::compute_logits(const StepPlan& plan, bool return_logits, StepOutput& out) {
  const int64_t m = static_cast<int64_t>(plan.logit_rows.size());
  if (m == 0) return;
  StepBuffers& s = *scratch_;
  ocl::Context& ctx = *ctx_;
  const int64_t t = plan.num_tokens;
  const int d = config_.hidden_size;
  const int64_t vocab = out.vocab_size;
  ops::gather_rows(ctx, s.h, s.rows, s.xs, t, m, d);
  s.xq.source = nullptr;  // s.xs holds this step's rows: quantised anew by the first head's matmul
  const int64_t base = vocab - static_cast<int64_t>(extra_ids_.size());  // the lm_head's columns
  // logits of `w` into `logits` [m, n], then [argmax column | logsumexp | logit there] into
  // s.reduced from element `at`; both parts' reductions come back in one transfer
  auto head = [&](const quant::DeviceWeight& w, ocl::Buffer& logits, int64_t n, int64_t at) {
    quant::matmul_reusing(ctx, w, s.xs, s.xq, m, logits);
    if (config_.final_logit_softcap > 0) {
      ops::softcap(ctx, logits, m * n, static_cast<float>(config_.final_logit_softcap));
    }
    const ops::Slice ids(s.reduced, at), lse(s.reduced, at + m), picked(s.reduced, at + 2 * m);
    ops::argmax(ctx, logits, ids, m, static_cast<int>(n));
    ops::logsumexp_rows(ctx, logits, lse, m, static_cast<int>(n));
    ops::gather_columns(ctx, logits, ids, picked, m, static_cast<int>(n));
  };
  head(this->head(), s.logits, base, 0);
  const bool two = !extra_ids_.empty();
  if (two) head(*extra_head_, extra_logits_, vocab - base, 3 * m);
  std::vector<float> reduced(static_cast<size_t>((two ? 6 : 3) * m));
  s.reduced.read(ctx, reduced.data(), reduced.size() * 4);
  const float* extra = two ? reduced.data() + 3 * m : nullptr;
  const auto& columns = options_.logit_token_ids;
  auto token = [&](int32_t column, bool in_extra) {  // a column of either part -> its token id
    if (in_extra) return extra_ids_[static_cast<size_t>(column)];
    return columns.empty() ? column : columns[static_cast<size_t>(column)];
  };
  out.argmax.resize(static_cast<size_t>(m));
  out.argmax_logprob.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    int32_t col;
    std::memcpy(&col, &reduced[static_cast<size_t>(i)], 4);
    int32_t id = token(col, false);
    float best = reduced[2 * m + i], lse = reduced[m + i];
    if (extra != nullptr) {  // the larger logit of the two parts (ties: the lower id)
      int32_t ecol;
      std::memcpy(&ecol, extra + i, 4);
      const int32_t eid = token(ecol, true);
      const float ev = extra[2 * m + i], else_lse = extra[m + i];
      if (ev > best || (ev == best && eid < id)) {
        best = ev;
        id = eid;
      }
      const float hi = std::max(lse, else_lse);
      lse = hi + static_cast<float>(std::log(std::exp(static_cast<double>(lse) - hi) +
                                             std::exp(static_cast<double>(else_lse) - hi)));
    }
    out.argmax[static_cast<size_t>(i)] = id;
    out.argmax_logprob[static_cast<size_t>(i)] = best - lse;
  }
  if (return_logits) {
    out.logits.resize(static_cast<size_t>(m * vocab));
    if (extra_ids_.empty()) {
      s.logits.read(ctx, out.logits.data(), out.logits.size() * 4);
    } else {  // [m, base] and [m, extra] -> rows of [base | extra]
      std::vector<float> a(static_cast<size_t>(m * base)), b(static_cast<size_t>(m * (vocab - base)));
      s.logits.read(ctx, a.data(), a.size() * 4);
      extra_logits_.read(ctx, b.data(), b.size() * 4);
      for (int64_t i = 0; i < m; ++i) {
        std::copy_n(a.data() + i * base, base, out.logits.data() + i * vocab);
        std::copy_n(b.data() + i * (vocab - base), vocab - base, out.logits.data() + i * vocab + base);
      }
    }
  }
}

double ModelRunner::warm_up() {
  const auto start = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> guard(mu_);
  const std::string id = "\x01warm-up";  // no user's request id (those are printable)
  // One throwaway request of `n` new tokens after `computed` positions whose K/V rows hold
  // whatever the cache holds (the results are discarded); skipped when its blocks do not fit.
  // Returns whether it ran.
  auto run = [&](int64_t computed, int64_t n) {
    if (n < 1 || computed + n > max_model_len() || n > options_.max_num_batched_tokens) return false;
    // slots in prefill-sized steps, as a request gets them: each step frees the blocks that fell
    // out of a sliding window or chunk, so the request holds what a real one at `computed` holds
    bool ok = true;
    for (int64_t c = 0; ok && c < computed;) {
      const int64_t step = std::min(options_.max_num_batched_tokens, computed - c);
      ok = manager_->allocate_slots(id, c, step).ok;
      c += step;
    }
    if (!ok || !manager_->allocate_slots(id, computed, n).ok) {
      if (manager_->has_request(id)) manager_->free(id);
      return false;
    }
    StepRequest r;
    r.request_id = id;
    r.tokens.assign(static_cast<size_t>(n), 0);
    r.num_computed_tokens = computed;
    r.num_logits = static_cast<int>(std::min<int64_t>(n, options_.max_num_logits));
    StepPlan plan;
    plan.sched.push_back({id, computed, n});
    try {
      plan_inputs({r}, plan);
      StepOutput out;
      out.vocab_size = logit_columns();
      run_layers(plan, {}, out, config_.num_layers);
      compute_logits(plan, false, out);
    } catch (...) {
      manager_->free(id);
      throw;
    }
    manager_->free(id);
    return true;
  };
  // decode (one activation row per matmul), verify (up to 16 rows), a prefill chunk (more than
  // 16 rows, as long as a step may be): every matmul variant
  const int64_t chunk = std::min<int64_t>({64, options_.max_num_batched_tokens, max_model_len()});
  for (int64_t n : {int64_t{1}, int64_t{2}, chunk}) run(0, n);
  // a decode far enough into the context that split-KV attention splits and merges (OCL_FLASH
  // and OCL_MLA split every 256 keys by default): at position 1024, or, when the free KV blocks
  // do not hold a request that long (a warm-up while other requests run), at the latest of 768,
  // 512, 384, 320 and 256 that fits. A request that passes a split must fit at 256 too, so the
  // merge kernel is not built inside one. (A split size changed by SPECDEC_FLASH_SPLIT_KEYS or
  // rounded up to blocks of 48 or more may need a later position than the last one tried.)
  int64_t last = -1;
  for (int64_t at : {int64_t{1024}, int64_t{768}, int64_t{512}, int64_t{384}, int64_t{320}, int64_t{256}}) {
    at = std::min<int64_t>(max_model_len() - 1, at);
    if (at == last) continue;  // short contexts: one try per position
    last = at;
    if (run(at, 1)) break;
  }
  // a DFlash drafter: its context path (fc, the K/V projections and writes) at the same shapes
  if (config_.is_dflash() && dflash_target_ != nullptr) {
    const int64_t width = static_cast<int64_t>(config_.dflash_target_layers.size()) * config_.hidden_size;
    for (int64_t n : {int64_t{1}, int64_t{2}, chunk}) {
      if (n > max_model_len()) continue;
      const std::vector<float> zeros(static_cast<size_t>(n * width), 0.0f);
      const ocl::Buffer hidden(*ctx_, zeros.data(), zeros.size() * 4);
      write_context_locked({{id, 0, n, 0}}, hidden, n);
      if (manager_->has_request(id)) manager_->free(id);
      lengths_.erase(id);
    }
  }
  ctx_->finish();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void ModelRunner::truncate(const std::string& request_id, int64_t num_tokens) {
  std::lock_guard<std::mutex> guard(mu_);
  SPECDEC_CHECK(lengths_.contains(request_id), "request_id", request_id, "a running request");
  SPECDEC_CHECK(num_tokens >= 0 && num_tokens <= lengths_[request_id], "num_tokens", num_tokens,
               str_cat("in [0, ", lengths_[request_id], "] (the tokens in the cache)"));
  manager_->truncate(request_id, num_tokens);
  lengths_[request_id] = num_tokens;
  const auto it = partial_.find(request_id);
  if (it != partial_.end() && num_tokens <= it->second.from) partial_.erase(it);
}

void ModelRunner::free(const std::string& request_id) {
  std::lock_guard<std::mutex> guard(mu_);
  SPECDEC_CHECK(lengths_.contains(request_id), "request_id", request_id, "a running request");
  manager_->free(request_id);
  lengths_.erase(request_id);
  partial_.erase(request_id);
}

int64_t ModelRunner::claim_prefix(const std::string& request_id, const std::vector<int32_t>& tokens,
                                  int64_t max_tokens) {
  std::lock_guard<std::mutex> guard(mu_);
  if (lengths_.contains(request_id)) return 0;
  const int64_t hit = manager_->claim_prefix(request_id, tokens, max_tokens);
  if (hit > 0) lengths_[request_id] = hit;
  return hit;
}

void ModelRunner::unclaim_prefix(const std::string& request_id) {
  std::lock_guard<std::mutex> guard(mu_);
  if (!lengths_.contains(request_id)) return;
  manager_->unclaim_prefix(request_id);
  lengths_.erase(request_id);
  partial_.erase(request_id);
}

int64_t ModelRunner::reset_prefix_cache() {
  std::lock_guard<std::mutex> guard(mu_);
  return manager_->reset_prefix_cache();
}

ModelRunner::PrefixCacheStats ModelRunner::prefix_cache_stats() const {
  std::lock_guard<std::mutex> guard(mu_);
  PrefixCacheStats s;
  s.enabled = manager_->prefix_caching();
  s.queries = manager_->prefix_cache_queries();
  s.hits = manager_->prefix_cache_hits();
  for (int g = 0; g < manager_->num_groups(); ++g) s.cached_blocks.push_back(manager_->num_cached_blocks(g));
  return s;
}

bool ModelRunner::has_request(const std::string& request_id) const {
  std::lock_guard<std::mutex> guard(mu_);
  return lengths_.contains(request_id);
}

std::vector<int64_t> ModelRunner::num_blocks_needed(const std::string& request_id, int64_t num_computed,
                                                    int64_t num_new, int64_t num_committed) const {
  std::lock_guard<std::mutex> guard(mu_);
  std::vector<int64_t> out;
  const int64_t freed_from = num_committed < 0 ? num_computed : std::min(num_computed, num_committed);
  for (int g = 0; g < manager_->num_groups(); ++g) {
    const int64_t gross = manager_->num_blocks_needed(request_id, num_computed, num_new, g, num_committed);
    const int64_t back = manager_->num_reclaimable_blocks(request_id, freed_from, g);
    out.push_back(std::max<int64_t>(0, gross - back));
  }
  return out;
}

std::vector<int64_t> ModelRunner::num_free_blocks() const {
  std::lock_guard<std::mutex> guard(mu_);
  std::vector<int64_t> out;
  for (int g = 0; g < manager_->num_groups(); ++g) out.push_back(manager_->num_free_blocks(g));
  return out;
}

int64_t ModelRunner::num_cached_tokens(const std::string& request_id) const {
  std::lock_guard<std::mutex> guard(mu_);
  const auto it = lengths_.find(request_id);
  return it == lengths_.end() ? 0 : it->second;
}

}  // namespace specdec::runner
