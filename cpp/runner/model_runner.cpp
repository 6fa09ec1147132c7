#include "runner/model_runner.h"

#include <chrono>

#include "attention/registry.h"
#include "common/errors.h"
#include "kv/planner.h"
#include "model/dflash.h"
#include "ops/norm.h"
#include "quant/device_weight.h"
#include "quant/matmul.h"
#include "runner/blocks.h"
#include "runner/warm_up.h"

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

std::shared_ptr<device::Device> required(std::shared_ptr<device::Device> dev) {
  SPECDEC_CHECK(dev != nullptr, "device", "null", "a device is required (device::open)");
  return dev;
}

}  // namespace

ModelRunner::ModelRunner(std::shared_ptr<device::Device> dev, const std::string& path,
                         const RunnerOptions& options, const LoadProgress& progress)
    : dev_(required(std::move(dev))), options_(options), file_(model::open_model_file(path)),
      config_(model::config_from_gguf(file_)),
      weights_(load_weights(*dev_, file_, config_, progress)),
      logits_head_(*dev_, file_, config_, options_, weights_), kv_config_(plan(config_, options_)),
      setup_(attn::initialize_attention(kv_config_, layer_infos(config_), options_.attention_backend,
                                        dev_->info())),
      cache_(std::make_unique<kv::KvCacheAllocation>(dev_, kv_config_, setup_.layouts)),
      manager_(std::make_unique<kv::KvCacheManager>(kv_config_, options_.enable_prefix_caching)),
      requests_(*manager_) {
  scratch_ = std::make_unique<StepBuffers>(*dev_, config_, options_.max_num_batched_tokens, options_.max_num_logits);
  layers_ = bind_layers(config_, setup_, *cache_);
  build_rope_tables(*dev_, file_, config_, kv_config_.max_model_len, *scratch_);
  // the weights are in the device's memory now: the file's pages need not stay resident too (a
  // later read, such as extra logit rows, faults them back in)
  dev_->sync();
  (void)file_.release_pages();  // a refusal costs memory only
}

ModelRunner::~ModelRunner() = default;

int64_t ModelRunner::num_logit_columns() const {
  std::lock_guard<std::mutex> guard(mu_);
  return logits_head_.num_columns();
}

void ModelRunner::set_extra_logit_tokens(const std::vector<int32_t>& ids) {
  std::lock_guard<std::mutex> guard(mu_);
  logits_head_.set_extra_tokens(ids);
}

std::vector<int32_t> ModelRunner::extra_logit_tokens() const {
  std::lock_guard<std::mutex> guard(mu_);
  return logits_head_.extra_tokens();
}

int64_t ModelRunner::num_lm_head_rows() const {
  if (config_.is_dflash()) return dflash_.target() ? dflash_.target()->num_lm_head_rows() : config_.vocab_size;
  return logits_head_.num_lm_head_rows();
}

const quant::DeviceWeight& ModelRunner::embedding() const {
  if (!config_.is_dflash()) return weights_.token_embd;
  SPECDEC_CHECK(dflash_.target() != nullptr, "DFlash drafter", config_.name,
               "attached to its target (set_dflash_target) before a step: it reads the target's embedding");
  return dflash_.target()->weights_.token_embd;
}

const quant::DeviceWeight& ModelRunner::head() const {
  if (!config_.is_dflash()) return weights_.lm_head();
  SPECDEC_CHECK(dflash_.target() != nullptr, "DFlash drafter", config_.name,
               "attached to its target (set_dflash_target) before a step: it reads the target's output head");
  return dflash_.target()->weights_.lm_head();
}

void ModelRunner::set_dflash_target(std::shared_ptr<ModelRunner> target) {
  std::lock_guard<std::mutex> guard(mu_);
  dflash_.set_target(*this, std::move(target));
}

uint64_t ModelRunner::set_hidden_sink(const std::vector<int>& layers, HiddenSink sink) {
  std::lock_guard<std::mutex> guard(mu_);
  return dflash_.set_sink(*dev_, config_, options_.max_num_batched_tokens, layers, std::move(sink));
}

void ModelRunner::clear_hidden_sink(uint64_t token) {
  std::lock_guard<std::mutex> guard(mu_);
  dflash_.clear_sink(token);
}

void ModelRunner::write_context(const std::vector<ContextRows>& rows, const device::Buffer& hidden, int64_t num_rows) {
  std::lock_guard<std::mutex> guard(mu_);
  write_context_locked(rows, hidden, num_rows);
}

void ModelRunner::write_context_locked(const std::vector<ContextRows>& rows, const device::Buffer& hidden,
                                       int64_t num_rows) {
  SPECDEC_CHECK(config_.is_dflash(), "write_context", config_.name, "only for a DFlash drafter");
  const std::vector<const ContextRows*> kept = keep_context_rows(rows, num_rows, max_model_len(), requests_);
  if (kept.empty()) return;
  const std::vector<StepRequest> reqs = context_requests(kept);
  const int64_t width = static_cast<int64_t>(config_.dflash_target_layers.size()) * config_.hidden_size;
  device::Buffer gathered;
  const device::Buffer& in = contiguous_rows(*dev_, kept, hidden, width, gathered);
  StepPlan plan;
  try {
    plan = plan_step(reqs);
  } catch (const ConfigError&) {  // not all fit: each request on its own; one that does not fit
    if (kept.size() > 1) {           // goes without context (no drafts) until its next prefill
      for (const ContextRows* r : kept) write_context_locked({*r}, hidden, num_rows);
    } else {
      requests_.drop(reqs.front().request_id);
    }
    return;
  }
  // prefix caching: the rows before these are the target's committed context
  for (const ContextRows* r : kept) {
    if (static_cast<int64_t>(r->tokens.size()) == r->num_rows) {
      manager_->record_tokens(r->request_id, r->first_position, r->tokens, r->first_position);
    }
  }
  write_context_layers(LayerStep{*dev_, config_, layers_, plan.metadata, *scratch_, plan.num_tokens}, weights_, in);
  for (const auto& r : reqs) {
    requests_.set_length(r.request_id, r.num_computed_tokens + static_cast<int64_t>(r.tokens.size()));
  }
}

void ModelRunner::check_requests(const std::vector<StepRequest>& requests) const {
  int64_t tokens = 0, logits = 0;
  for (const auto& r : requests) {
    const std::string f = "request " + r.request_id;
    SPECDEC_CHECK(!r.tokens.empty(), f + ".tokens", 0, "at least one new token");
    const int64_t have = requests_.length(r.request_id);
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
const ops::QuantizedOut* quantize_h(device::Device& dev, StepBuffers& s, int64_t t, int d,
                                    const quant::DeviceWeight& first_reader) {
  const int scale_block = quant::activation_scale_block(first_reader.type());
  if (scale_block == 0 || !quant::prepare_activations(dev, t, d, s.xq, scale_block)) return nullptr;
  s.xq_out = {&s.xq.q8, &s.xq.q16, &s.xq.rec, scale_block};
  return &s.xq_out;
}

// The first matmul of layer il that reads its normed input: MLA's kv_a, else q (with k, v).
const quant::DeviceWeight& attention_input_reader(const model::ModelConfig& c, const LayerWeights& w,
                                                  int il) {
  if (c.layers[il].attention == model::LayerAttention::kMla) return w.wkv_a;
  return w.wqkv ? *w.wqkv : w.wqk ? *w.wqk : w.wq;
}

// After a norm wrote s.h: s.xq holds its quantisation when `q` was passed (the norm wrote both in
// one launch); otherwise xq holds no quantisation of the new s.h (a stale one of the same buffer
// must not be taken for it).
void mark_h(StepBuffers& s, const ops::QuantizedOut* q) {
  if (q != nullptr) {
    quant::set_source(s.xq, s.h);
  } else {
    quant::clear_source(s.xq);
  }
}

}  // namespace

// One decoder layer on the normed input s.h (the previous layer's fused add + norm). Leaves the
// residual stream in s.x and, in s.h, its norm with `next_norm` (the next layer's attn_norm, or
// the output norm after the last layer): each residual add is fused with the norm after it.
void ModelRunner::run_layer(int il, const std::vector<attn::AttentionMetadata>& md, int64_t t, int exit) {
  const auto& c = config_;
  const LayerWeights& w = weights_.layers[il];
  StepBuffers& s = *scratch_;
  device::Device& dev = *dev_;
  const int d = c.hidden_size;
  const float eps = static_cast<float>(c.norm_eps), off = static_cast<float>(c.norm_weight_offset);
  const LayerStep step{dev, c, layers_, md, s, t};

  if (c.layers[il].attention == model::LayerAttention::kMla) mla_attention(step, il, w);
  else gqa_attention(step, il, w);
  if (present(w.post_attn_norm)) ops::rms_norm(dev, s.proj, w.post_attn_norm, s.proj, t, d, eps, off);
  const ops::QuantizedOut* q = quantize_h(dev, s, t, d, w.gate_up ? *w.gate_up : w.gate);
  ops::add_rms_norm(dev, s.x, s.proj, w.ffn_norm, s.h, t, d, eps, off, q);
  mark_h(s, q);

  gated_ffn(step, w);
  if (present(w.post_ffn_norm)) ops::rms_norm(dev, s.proj, w.post_ffn_norm, s.proj, t, d, eps, off);
  const device::Buffer& next_norm = il + 1 < exit ? weights_.layers[il + 1].attn_norm : weights_.output_norm;
  // the last layer's output norm feeds the logits rows only (gathered, quantised there)
  q = il + 1 < exit ? quantize_h(dev, s, t, d, attention_input_reader(c, weights_.layers[il + 1], il + 1))
                    : nullptr;
  ops::add_rms_norm(dev, s.x, s.proj, next_norm, s.h, t, d, eps, off, q);
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
  requests_.check_exit(requests, exit);
  StepOutput out;
  out.vocab_size = logits_head_.num_columns();
  out.logits_start = {0};
  if (requests.empty()) return out;  // nothing to run
  const StepPlan plan = plan_step(requests);
  out.logits_start = plan.logits_start;
  run_layers(plan, hidden_layers, out, exit);
  compute_logits(plan, return_logits, out);
  requests_.commit_step(requests, exit, config_.num_layers);
  // a drafter's context from these rows (after the state above)
  if (dflash_.has_sink() && exit == config_.num_layers) dflash_.send(requests, plan.num_tokens);
  return out;
}

ModelRunner::StepPlan ModelRunner::plan_step(const std::vector<StepRequest>& requests) {
  StepPlan plan;
  plan.sched = requests_.allocate_slots(requests);
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
  // copied when created: no blocking write through the queue (each costs a round trip on PoCL).
  // The previous step's buffers go now, while its ops may still read them: the ordering
  // contract's rule 2 (device/device.h) keeps their memory until then.
  s.ids = dev_->upload(ids.data(), ids.size() * 4, device::Lifetime::kStep);
  s.positions = dev_->upload(positions.data(), positions.size() * 4, device::Lifetime::kStep);
  if (!plan.logit_rows.empty()) {
    s.rows = dev_->upload(plan.logit_rows.data(), plan.logit_rows.size() * 4, device::Lifetime::kStep);
  }
  // Per attention group, once for every layer of the group (slot mappings, block tables, the
  // backend's launch plan).
  plan.metadata = attn::build_step_metadata(*dev_, setup_, *manager_, plan.sched);
}

void ModelRunner::run_layers(const StepPlan& plan, const std::vector<int>& hidden_layers, StepOutput& out,
                             int exit) {
  StepBuffers& s = *scratch_;
  device::Device& dev = *dev_;
  const int64_t t = plan.num_tokens;
  const int d = config_.hidden_size;
  const double embedding_scale = config_.is_dflash() ? config_.dflash_embedding_scale : config_.embedding_scale;
  quant::embedding_lookup(dev, embedding(), s.ids, t, s.x, static_cast<float>(embedding_scale));
  auto capture = [&](int layer, const device::Buffer& from) {
    for (int l : hidden_layers) {
      if (l != layer) continue;
      std::vector<float> h(static_cast<size_t>(t * d));
      dev.read(from, h.data(), h.size() * 4);
      out.hidden[layer] = std::move(h);
    }
  };
  const float eps = static_cast<float>(config_.norm_eps), off = static_cast<float>(config_.norm_weight_offset);
  const ops::QuantizedOut* q = quantize_h(dev, s, t, d, attention_input_reader(config_, weights_.layers[0], 0));
  ops::rms_norm(dev, s.x, weights_.layers[0].attn_norm, s.h, t, d, eps, off, q);
  mark_h(s, q);
  for (int il = 0; il < exit; ++il) {
    run_layer(il, plan.metadata, t, exit);
    capture(il, s.x);  // the residual stream after the layer
    // (Hugging Face lists the last layer's output after the final norm: s.h there)
    if (dflash_.has_sink() && exit == config_.num_layers) {  // a drafter's context
      dflash_.capture(dev, il, il + 1 == config_.num_layers ? s.h : s.x, t, d);
    }
  }
  capture(-1, s.h);  // after the final norm
}

void ModelRunner::compute_logits(const StepPlan& plan, bool return_logits, StepOutput& out) {
  if (plan.logit_rows.empty()) return;
  logits_head_.compute(head(), *scratch_, plan.num_tokens, static_cast<int64_t>(plan.logit_rows.size()),
                       return_logits, out);
}

double ModelRunner::warm_up() {
  const auto start = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> guard(mu_);
  WarmUp(*this).run();
  dev_->sync();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void ModelRunner::truncate(const std::string& request_id, int64_t num_tokens) {
  std::lock_guard<std::mutex> guard(mu_);
  requests_.truncate(request_id, num_tokens);
}

void ModelRunner::free(const std::string& request_id) {
  std::lock_guard<std::mutex> guard(mu_);
  requests_.free(request_id);
}

int64_t ModelRunner::claim_prefix(const std::string& request_id, const std::vector<int32_t>& tokens,
                                  int64_t max_tokens) {
  std::lock_guard<std::mutex> guard(mu_);
  return requests_.claim_prefix(request_id, tokens, max_tokens);
}

void ModelRunner::unclaim_prefix(const std::string& request_id) {
  std::lock_guard<std::mutex> guard(mu_);
  requests_.unclaim_prefix(request_id);
}

int64_t ModelRunner::reset_prefix_cache() {
  std::lock_guard<std::mutex> guard(mu_);
  return requests_.reset_prefix_cache();
}

ModelRunner::PrefixCacheStats ModelRunner::prefix_cache_stats() const {
  std::lock_guard<std::mutex> guard(mu_);
  return requests_.prefix_cache_stats();
}

bool ModelRunner::has_request(const std::string& request_id) const {
  std::lock_guard<std::mutex> guard(mu_);
  return requests_.contains(request_id);
}

std::vector<int64_t> ModelRunner::num_blocks_needed(const std::string& request_id, int64_t num_computed,
                                                    int64_t num_new, int64_t num_committed) const {
  std::lock_guard<std::mutex> guard(mu_);
  return requests_.num_blocks_needed(request_id, num_computed, num_new, num_committed);
}

std::vector<int64_t> ModelRunner::num_free_blocks() const {
  std::lock_guard<std::mutex> guard(mu_);
  return requests_.num_free_blocks();
}

int64_t ModelRunner::num_cached_tokens(const std::string& request_id) const {
  std::lock_guard<std::mutex> guard(mu_);
  return requests_.length(request_id);
}

}  // namespace specdec::runner
