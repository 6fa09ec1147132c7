// ModelRunner: one forward pass over a ragged batch of requests (prefill chunks and decodes
// together) on a device, through the per-group KV cache, block tables and attention groups.
//
// Per step: every request's slots are allocated in each KV-cache group, the metadata of each
// attention group is built once, and every layer writes its new K/V through its group's slot
// mapping and attends with its own backend. Logits are computed only for the rows asked for.
// All kernels on the decode / verify path are batch invariant: a token's logits are bitwise the
// same alone, among k+1 tokens of its request, or inside a batch of other requests.
// The logits head, the requests' state, DFlash and the warm-up are their own types beside it
// (logits_head.h, request_table.h, dflash_context.h, warm_up.h).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "attention/groups.h"
#include "attention/metadata.h"
#include "device/device.h"
#include "kv/allocator.h"
#include "kv/blocks.h"
#include "kv/config.h"
#include "model/config.h"
#include "model/gguf.h"
#include "runner/dflash_context.h"
#include "runner/logits_head.h"
#include "runner/model_weights.h"
#include "runner/request_table.h"
#include "runner/step_io.h"

namespace specdec::runner {

struct StepBuffers;
struct LayerBinding;

// Thread-safe: step and the request calls below are serialised by the runner's own lock (one step
// at a time; several runners on one Device interleave their ops safely, see Device::lock).
class ModelRunner {
 public:
  using PrefixCacheStats = runner::PrefixCacheStats;
  using ContextRows = runner::ContextRows;
  using HiddenSink = runner::HiddenSink;
  static constexpr int64_t kMaxExtraLogitTokens = LogitsHead::kMaxExtraTokens;

  // Loads the GGUF model at `path` onto `dev`, plans and allocates its KV cache and chooses
  // attention backends. progress(bytes done, bytes total) during the weight upload.
  ModelRunner(std::shared_ptr<device::Device> dev, const std::string& path,
              const RunnerOptions& options = {}, const LoadProgress& progress = {});
  ~ModelRunner();

  // Runs one step. ConfigError for a bad request (ids out of range, too many tokens or logits,
  // a length above max_model_len, a token count that does not follow the cache); a step that
  // does not fit the free KV blocks is an error naming the group and leaves nothing changed.
  // return_logits = false leaves StepOutput::logits empty (argmax and its logprob are always
  // there): the [rows, vocab] transfer is skipped.
  // num_layers in [1, config().num_layers] exits early: only the first num_layers decoder layers
  // run, then the final norm and the head (layer-skip self-drafting; 0: every layer). Such a step
  // writes K/V for those layers only, so its positions must be rolled back (truncate) before a
  // step that runs more layers over them: ConfigError otherwise.
  StepOutput step(const std::vector<StepRequest>& requests, const std::vector<int>& hidden_layers = {},
                  bool return_logits = true, int num_layers = 0);

  // Runs every kernel variant the steps of this runner can launch once, on throwaway tokens
  // (decode, verify and prefill shapes, split-KV attention past one split, logits): OpenCL
  // builds kernels at their first launch (PoCL a work-group function per local size), so a
  // runner warmed up at load compiles nothing inside a request. Leaves no request behind; needs
  // the KV cache to be empty of other requests' blocks only as far as one request's worth.
  // Returns the seconds it took (mostly compilation the first time on a machine: PoCL caches
  // the binaries on disk).
  double warm_up();

  // Rolls a request back to num_tokens (speculative rejection); frees the blocks past it.
  void truncate(const std::string& request_id, int64_t num_tokens);
  // Ends a request and returns its blocks.
  void free(const std::string& request_id);
  bool has_request(const std::string& request_id) const;
  // Prefix caching: a request this runner does not hold starts from the longest cached prefix of
  // `tokens` (whole blocks, at most max_tokens and len - 1); returns its length (0: none, nothing
  // created). The caller's next step for it starts there. 0 when prefix caching is off.
  int64_t claim_prefix(const std::string& request_id, const std::vector<int32_t>& tokens, int64_t max_tokens);
  // Undoes claim_prefix for a request no step has run for yet (its claim is not counted as a
  // query or hit, and its blocks go back as they were); a request it does not hold is ignored.
  void unclaim_prefix(const std::string& request_id);
  // Evicts the cached blocks no request uses; returns how many.
  int64_t reset_prefix_cache();
  PrefixCacheStats prefix_cache_stats() const;
  // For schedulers: free blocks a step of num_new tokens after num_computed tokens would take from
  // each KV-cache group, net of the blocks the request's own sliding window gives back first (an
  // unknown request counts as new; a request that gives back more than it takes counts 0, so
  // sums over requests are an upper bound), and the free blocks per group.
  std::vector<int64_t> num_blocks_needed(const std::string& request_id, int64_t num_computed,
                                         int64_t num_new, int64_t num_committed = -1) const;
  std::vector<int64_t> num_free_blocks() const;
  int64_t num_cached_tokens(const std::string& request_id) const;

  const model::ModelConfig& config() const { return config_; }
  const kv::KvCacheConfig& kv_config() const { return kv_config_; }
  const attn::AttentionSetup& attention() const { return setup_; }
  const RunnerOptions& options() const { return options_; }
  int64_t max_model_len() const { return kv_config_.max_model_len; }
  int64_t weight_bytes() const { return weights_.device_bytes; }
  // The width of a logits row: |logit_token_ids| + |extra logit tokens|, or the vocabulary size.
  int64_t num_logit_columns() const;
  // With logit_token_ids: ids whose logits the next steps add after those columns (a drafter's
  // reduced vocabulary grown by the tokens of its requests' contexts: the words of a prompt it
  // should be able to copy). Their lm_head rows are uploaded here (a few hundred KB; the same
  // ids again cost nothing). Logit column |logit_token_ids| + j is token ids[j]; argmax and its
  // logprob cover both parts. Ids strictly increasing (argmax ties: the lowest id), in
  // [0, num_lm_head_rows()), not in logit_token_ids; at most kMaxExtraLogitTokens. ConfigError
  // otherwise (nothing changes then), or without logit_token_ids.
  void set_extra_logit_tokens(const std::vector<int32_t>& ids);
  std::vector<int32_t> extra_logit_tokens() const;
  // Token ids the lm_head has rows for: min(its rows, vocab_size).
  int64_t num_lm_head_rows() const;
  device::Device& device() { return *dev_; }

  // ---- DFlash (a target's hidden states, a drafter's context; see DFlashContext) ----
  // A target: after every step, the residual stream after each of `layers` (the last layer's:
  // after the final norm, as Hugging Face's hidden_states list it) goes, for every row of the
  // step, to `sink`: layer j in columns [j * hidden, (j + 1) * hidden). Nothing leaves the device.
  // Empty layers: no capture. Returns a token for clear_hidden_sink; a second sink while one is set
  // is a ConfigError (one drafter per target).
  uint64_t set_hidden_sink(const std::vector<int>& layers, HiddenSink sink);
  // Removes the sink `token` set (a later sink's token leaves that one in place).
  void clear_hidden_sink(uint64_t token);
  // A DFlash drafter (config().is_dflash()): reads `target`'s token embedding and output head
  // (ConfigError when the shapes or the target layers do not fit). Set before the first step.
  void set_dflash_target(std::shared_ptr<ModelRunner> target);
  // A DFlash drafter: the context K/V of a target step's rows (`hidden` as the sink passes it):
  // each request is first rolled back to first_position (freed at 0), then its cache holds
  // first_position + num_rows tokens. A request whose cache is shorter than first_position
  // (rows it never saw) is dropped instead: it has no context until its next prefill.
  void write_context(const std::vector<ContextRows>& rows, const device::Buffer& hidden, int64_t num_rows);

 private:
  friend class WarmUp;  // runs throwaway steps through the parts below

  void check_requests(const std::vector<StepRequest>& requests) const;
  // A step in three parts: plan_step allocates the requests' slots (undone on a shortage),
  // flattens their tokens, positions and logit rows onto the device and builds each attention
  // group's metadata, once for every layer; run_layers runs the embedding and the decoder
  // layers; compute_logits the head and its reductions for the logit rows.
  struct StepPlan {
    std::vector<attn::ScheduledRequest> sched;
    int64_t num_tokens = 0;
    std::vector<int32_t> logit_rows;    // rows of the step's tokens that get logits
    std::vector<int64_t> logits_start;  // [num_requests + 1]
    std::vector<attn::AttentionMetadata> metadata;  // per attention group
  };
  StepPlan plan_step(const std::vector<StepRequest>& requests);
  // The flattened inputs and the metadata of `requests`, whose slots plan.sched holds.
  void plan_inputs(const std::vector<StepRequest>& requests, StepPlan& plan);
  // Runs layers [0, exit) (exit = config_.num_layers: all), the last one's add + norm with the
  // output norm.
  void run_layers(const StepPlan& plan, const std::vector<int>& hidden_layers, StepOutput& out, int exit);
  void compute_logits(const StepPlan& plan, bool return_logits, StepOutput& out);
  void run_layer(int il, const std::vector<attn::AttentionMetadata>& md, int64_t num_tokens, int exit);
  // This model's, or a DFlash drafter's target's
  const quant::DeviceWeight& embedding() const;
  const quant::DeviceWeight& head() const;
  void write_context_locked(const std::vector<ContextRows>& rows, const device::Buffer& hidden, int64_t num_rows);

  std::shared_ptr<device::Device> dev_;  // first: the members below are made on it
  RunnerOptions options_;
  model::GgufFile file_;
  model::ModelConfig config_;
  ModelWeights weights_;
  LogitsHead logits_head_;                  // reduced vocabulary, extra tokens, argmax
  kv::KvCacheConfig kv_config_;
  attn::AttentionSetup setup_;
  std::unique_ptr<kv::KvCacheAllocation> cache_;
  std::unique_ptr<kv::KvCacheManager> manager_;
  RequestTable requests_;                   // lengths and early-exit state per request
  std::unique_ptr<StepBuffers> scratch_;
  std::vector<LayerBinding> layers_;        // per layer, resolved at load
  DFlashContext dflash_;                    // a target's hidden sink, a drafter's target
  mutable std::mutex mu_;                   // guards everything a step or request call touches
};

}  // namespace specdec::runner
