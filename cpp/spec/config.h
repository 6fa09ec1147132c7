// SpeculativeConfig: what to speculate with, validated where it is built. vLLM's field names
// where vLLM has the field (vllm/config/speculative.py); every error names the field, the value
// and what is allowed.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace specdec::spec {

struct SpeculativeConfig {
  // "draft_model", "ngram", "suffix" or "custom" (a Python specdec.Proposer). When absent:
  // model "ngram" / "[ngram]" -> ngram, any other model -> draft_model.
  std::string method;
  // draft_model: the drafter (GGUF path or catalog name); custom: "module:Class" or "module.Class"
  std::string model;
  int num_speculative_tokens = 0;  // k, in [1, kMaxSpecLen]; suffix: defaults to min(depth, 32)
  // The drafter's attention backend: "" (= None / "auto") selects on its own, never inherited.
  std::string attention_backend;
  int prompt_lookup_min = 0;  // ngram: both default to 5; one given is copied to the other
  int prompt_lookup_max = 0;
  int suffix_decoding_max_tree_depth = 24;
  int64_t suffix_decoding_max_cached_requests = 10000;
  double suffix_decoding_max_spec_factor = 1.0;
  double suffix_decoding_min_token_prob = 0.1;
  int64_t max_model_len = 0;  // the drafter's (alias draft_max_model_len); 0: the target's
  int64_t draft_kv_cache_memory_bytes = 0;  // the drafter's KV budget; 0: a share of the total
  double draft_kv_cache_fraction = 0.0;     // (0, 1): that share; 0: proportional to need
  std::string kv_cache_dtype;               // the drafter's; "": the target's
  int64_t disable_by_batch_size = 0;        // no speculation with this many running requests (0: never)
  // k per request and step from measured acceptance and costs (spec/adaptive.h), up to
  // num_speculative_tokens; 0 (plain decoding) where speculating would be slower.
  bool adaptive = false;

  static constexpr int kMaxSpecLen = 32;

  // From a JSON object (keyword names as keys). Unknown keys, wrong types and bad values are
  // ConfigErrors naming the field; the result is validated.
  static SpeculativeConfig from_json(const nlohmann::json& j);
  static SpeculativeConfig from_json_text(const std::string& text);
  nlohmann::json to_json() const;
  void validate();  // fills defaults (method, lookup sizes, k for suffix) and checks every field
  bool uses_drafter() const { return method == "draft_model"; }
};

}  // namespace specdec::spec
