// What a ModelRunner is loaded with (RunnerOptions), and what one step takes (StepRequest) and
// gives back (StepOutput).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace specdec::runner {

struct RunnerOptions {
  std::string attention_backend;           // "" / "auto" or a backend name
  int64_t max_model_len = 0;               // 0: the context length, capped to what the budget holds
  int64_t kv_cache_memory_bytes = 1ll << 30;
  int block_size = 16;
  DType kv_cache_dtype = DType::kF16;
  int64_t max_num_batched_tokens = 512;    // most tokens of one step (all requests)
  int64_t max_num_logits = 128;            // most logit rows of one step
  // Logits only for these token ids (empty: the whole vocabulary): a drafter's reduced vocabulary
  // in the style of FR-Spec. The lm_head rows of these ids are copied once at load into their own
  // matrix, so a step reads |ids| rows instead of vocab_size; StepOutput::vocab_size is then
  // |ids|, logit column j is token logit_token_ids[j] and argmax is a token id. Each logit is
  // bitwise the one the whole vocabulary gives. Ids strictly increasing (so argmax's tie rule,
  // the lowest id, holds), in [0, vocab_size).
  std::vector<int32_t> logit_token_ids;
  // vLLM's disable_hybrid_kv_cache_manager (kv::PlannerOptions): one KV-cache group managed as
  // full attention, each layer's mask and metadata as its own spec says.
  bool disable_hybrid_kv_cache_manager = false;
  // Automatic prefix caching (kv::KvCacheManager): full blocks of committed tokens are kept under
  // their prefix and shared by later requests that claim_prefix the same tokens.
  bool enable_prefix_caching = false;
};

// One request's share of a step.
struct StepRequest {
  std::string request_id;
  std::vector<int32_t> tokens;      // the new tokens, at positions num_computed_tokens, ...
  int64_t num_computed_tokens = 0;  // tokens already in the cache
  int num_logits = 1;               // logits for the last num_logits new tokens (0: none)
  // Speculative decoding: tokens that can no longer be rolled back (-1: all computed ones).
  // Sliding-window blocks are freed only as seen from here, so truncate() back to it works.
  int64_t num_committed_tokens = -1;
};

struct StepOutput {
  int64_t vocab_size = 0;            // the width of a logits row (see logit_token_ids)
  std::vector<float> logits;         // [sum of num_logits, vocab_size], requests in order
  std::vector<int64_t> logits_start; // [num_requests + 1] first row of each request
  // Per logit row, reduced on the device (so greedy decoding needs no logits transfer):
  std::vector<int32_t> argmax;       // the token with the largest logit (ties: the lowest id)
  std::vector<float> argmax_logprob; // its log-probability: logit - logsumexp(row)
  // hidden[layer] = [num_tokens, hidden_size]: the residual stream after that layer (-1: after
  // the final norm), for the layers asked for.
  std::map<int, std::vector<float>> hidden;
};

}  // namespace specdec::runner
