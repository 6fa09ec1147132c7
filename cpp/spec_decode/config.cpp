#include "spec_decode/config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "attention/registry.h"
#include "common/dtype.h"
#include "common/errors.h"
#include "common/json.h"
#include "common/utf8.h"

namespace specdec::spec_decode {

namespace {

const char* kMethods = "'draft_model', 'ngram', 'suffix', 'layer_skip', 'dflash', 'hybrid' or 'custom'";

std::string show(const nlohmann::json& v) { return json_summary(v); }

int64_t get_int(const nlohmann::json& v, const std::string& field, int64_t lo, int64_t hi,
                const std::string& allowed) {
  if (!v.is_number_integer()) throw ConfigError(field, show(v), allowed);
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) throw ConfigError(field, show(v), allowed);
    x = static_cast<int64_t>(u);
  } else {
    x = v.get<int64_t>();
  }
  SPECDEC_CHECK(x >= lo && x <= hi, field, x, allowed);
  return x;
}

double get_real(const nlohmann::json& v, const std::string& field, const std::string& allowed) {
  if (!v.is_number()) throw ConfigError(field, show(v), allowed);
  const double x = v.get<double>();
  SPECDEC_CHECK(std::isfinite(x), field, x, allowed);
  return x;
}

std::string get_text(const nlohmann::json& v, const std::string& field, const std::string& allowed) {
  if (!v.is_string()) throw ConfigError(field, show(v), allowed);
  return v.get<std::string>();
}

// "1GiB", "512MiB", "1.5GB", or an integer count of bytes
int64_t get_bytes(const nlohmann::json& v, const std::string& field) {
  const std::string allowed = "a byte count >= 0: an integer or a string such as '256MiB' or '1GB'";
  if (v.is_number_integer()) return get_int(v, field, 0, int64_t{1} << 50, allowed);
  const std::string s = get_text(v, field, allowed);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) throw ConfigError(field, s, allowed);
  double n = 0;
  try {
    size_t used = 0;
    n = std::stod(s.substr(0, i), &used);
    if (used != i) throw ConfigError(field, s, allowed);  // "1.2.3MiB"
  } catch (const ConfigError&) {
    throw;
  } catch (...) {
    throw ConfigError(field, s, allowed);
  }
  std::string unit = s.substr(i);
  unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::tolower(c); });
  const std::pair<const char*, double> units[] = {
      {"", 1}, {"b", 1}, {"k", 1e3}, {"kb", 1e3}, {"kib", 1024.0}, {"m", 1e6}, {"mb", 1e6},
      {"mib", 1048576.0}, {"g", 1e9}, {"gb", 1e9}, {"gib", 1073741824.0}};
  for (const auto& [name, mult] : units) {
    if (unit == name) {
      const double bytes = n * mult;
      SPECDEC_CHECK(bytes >= 0 && bytes <= static_cast<double>(int64_t{1} << 50), field, s, allowed);
      return static_cast<int64_t>(bytes);
    }
  }
  throw ConfigError(field, s, allowed);
}

}  // namespace

SpeculativeConfig SpeculativeConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object()) {
    throw ConfigError("speculative_config", show(j), "an object of fields, e.g. {\"method\": \"ngram\", "
                      "\"num_speculative_tokens\": 4}");
  }
  static const std::set<std::string> known = {
      "method", "model", "num_speculative_tokens", "attention_backend", "prompt_lookup_min",
      "prompt_lookup_max", "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
      "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob", "max_model_len",
      "draft_max_model_len", "draft_kv_cache_memory_bytes", "draft_kv_cache_fraction",
      "kv_cache_dtype", "disable_by_batch_size", "adaptive", "draft_vocab_size", "draft_vocab_file",
      "exit_layer", "proposers", "disable_hybrid_kv_cache_manager", "device"};
  std::string names;
  for (const auto& k : known) names += (names.empty() ? "" : ", ") + k;
  SpeculativeConfig c;
  for (const auto& [key, v] : j.items()) {
    if (!known.contains(key)) {
      if (key == "tensor_parallel_size" || key == "draft_tensor_parallel_size") {
        throw ConfigError("speculative_config." + key, show(v), "not supported: specdec runs one device");
      }
      throw ConfigError("speculative_config." + key, show(v), "a known field: " + names);
    }
    if (v.is_null()) continue;  // None = the default
    const std::string f = "speculative_config." + key;
    if (key == "method") c.method = get_text(v, f, kMethods);
    else if (key == "model") c.model = get_text(v, f, "a model (GGUF path or catalog name), 'ngram', or for custom 'module:Class'");
    else if (key == "num_speculative_tokens") c.num_speculative_tokens = static_cast<int>(get_int(v, f, 1, kMaxSpecLen, str_cat("an integer in [1, ", kMaxSpecLen, "]")));
    else if (key == "attention_backend") c.attention_backend = get_text(v, f, "None, 'auto' or a backend name");
    else if (key == "device") {
      const char* allowed = "None (the target's device), a device selector ('native', 'ocl:gpu', 'P:D') or an index";
      if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < 1024) c.device = std::to_string(v.get<int64_t>());
      else c.device = get_text(v, f, allowed);
    }
    else if (key == "prompt_lookup_min") c.prompt_lookup_min = static_cast<int>(get_int(v, f, 1, 1024, "an integer in [1, 1024]"));
    else if (key == "prompt_lookup_max") c.prompt_lookup_max = static_cast<int>(get_int(v, f, 1, 1024, "an integer in [1, 1024]"));
    else if (key == "suffix_decoding_max_tree_depth") c.suffix_decoding_max_tree_depth = static_cast<int>(get_int(v, f, 1, 64, "an integer in [1, 64] (a request's tree holds up to its length x depth nodes)"));
    else if (key == "suffix_decoding_max_cached_requests") c.suffix_decoding_max_cached_requests = get_int(v, f, 0, int64_t{1} << 40, "an integer >= 0 (0: no global tree)");
    else if (key == "suffix_decoding_max_spec_factor") c.suffix_decoding_max_spec_factor = get_real(v, f, "a finite number > 0");
    else if (key == "suffix_decoding_min_token_prob") c.suffix_decoding_min_token_prob = get_real(v, f, "a number in [0, 1]");
    else if (key == "max_model_len" || key == "draft_max_model_len") {
      if (j.contains("max_model_len") && j.contains("draft_max_model_len") && !j["max_model_len"].is_null() &&
          !j["draft_max_model_len"].is_null()) {
        throw ConfigError(f, show(v), "one of max_model_len and its alias draft_max_model_len");
      }
      c.max_model_len = get_int(v, f, 0, int64_t{1} << 31, "0 (the target's) or an integer >= 2");
    } else if (key == "draft_kv_cache_memory_bytes") c.draft_kv_cache_memory_bytes = get_bytes(v, f);
    else if (key == "draft_kv_cache_fraction") c.draft_kv_cache_fraction = get_real(v, f, "a number in (0, 1)");
    else if (key == "kv_cache_dtype") c.kv_cache_dtype = get_text(v, f, "'f32', 'f16', 'bf16' or 'int8'");
    else if (key == "disable_by_batch_size") c.disable_by_batch_size = get_int(v, f, 1, int64_t{1} << 30, "None or an integer >= 1");
    else if (key == "draft_vocab_size") c.draft_vocab_size = get_int(v, f, 0, int64_t{1} << 31, "0 (the whole vocabulary) or an integer >= 1");
    else if (key == "draft_vocab_file") c.draft_vocab_file = get_text(v, f, "the path of a JSON file written by `specdec draft-vocab`");
    else if (key == "proposers") {
      if (!v.is_array() || v.empty()) {
        throw ConfigError(f, show(v), "a list of at least two configs (objects), e.g. [{\"method\": \"suffix\"}, "
                          "{\"method\": \"draft_model\", \"model\": ...}]");
      }
      // before any part is parsed: each proposes on every step
      SPECDEC_CHECK(v.size() <= kMaxHybridParts, f, str_cat(v.size(), " configs"),
                    str_cat("at most ", kMaxHybridParts, " configs for method hybrid"));
      // parsed after the loop: a part without num_speculative_tokens takes the hybrid's
    } else if (key == "exit_layer") {
      const std::string allowed = "'auto' or an integer >= 1 (layers of the target that draft)";
      if (v.is_string()) {
        SPECDEC_CHECK(v.get<std::string>() == "auto", f, show(v), allowed);
        c.exit_layer = 0;
      } else {
        c.exit_layer = static_cast<int>(get_int(v, f, 1, 1 << 20, allowed));
      }
    } else if (key == "disable_hybrid_kv_cache_manager") {
      SPECDEC_CHECK(v.is_boolean(), f, show(v), "true or false");
      c.disable_hybrid_kv_cache_manager = v.get<bool>();
    } else if (key == "adaptive") {
      SPECDEC_CHECK(v.is_boolean(), f, show(v), "true or false");
      c.adaptive = v.get<bool>();
    }
  }
  if (j.contains("proposers") && !j["proposers"].is_null()) {
    const auto& parts = j["proposers"];
    for (size_t i = 0; i < parts.size(); ++i) {
      const std::string prefix = str_cat("speculative_config.proposers[", i, "]");
      nlohmann::json part = parts[i];
      if (!part.is_object()) throw ConfigError(prefix, show(part), "a config (an object of fields)");
      if ((!part.contains("num_speculative_tokens") || part["num_speculative_tokens"].is_null()) &&
          c.num_speculative_tokens > 0) {
        part["num_speculative_tokens"] = c.num_speculative_tokens;
      }
      try {
        c.proposers.push_back(from_json(part));
      } catch (const ConfigError& e) {  // the part's field, named inside the hybrid
        const std::string base = "speculative_config";
        const std::string rest = e.field().rfind(base, 0) == 0 ? e.field().substr(base.size()) : "." + e.field();
        throw ConfigError(prefix + rest, e.value(), e.allowed());
      }
    }
  }
  c.validate();
  return c;
}

bool SpeculativeConfig::has_drafter_part() const {
  for (const auto& p : proposers) {
    if (p.method == "draft_model") return true;
  }
  return false;
}

const SpeculativeConfig& SpeculativeConfig::drafter_config() const {
  for (const auto& p : proposers) {
    if (p.method == "draft_model") return p;
  }
  return *this;
}

SpeculativeConfig SpeculativeConfig::from_json_text(const std::string& text) {
  nlohmann::json j;
  try {
    j = parse_json(text);
  } catch (const FormatError& e) {
    const std::string shown = valid_utf8(text.size() > 80 ? text.substr(0, 77) + "..." : text);
    throw ConfigError("speculative_config", shown, str_cat("a JSON object (", e.what(), ")"));
  }
  return from_json(j);
}

void SpeculativeConfig::validate() {
  const std::string p = "speculative_config.";
  if (method.empty()) {
    if (model == "ngram" || model == "[ngram]") method = "ngram";
    else if (!model.empty()) method = "draft_model";
    else throw ConfigError(p + "method", "None", std::string(kMethods) + " (or a drafter model)");
  }
  SPECDEC_CHECK(method == "draft_model" || method == "ngram" || method == "suffix" || method == "layer_skip" ||
                   method == "dflash" || method == "hybrid" || method == "custom",
               p + "method", method, kMethods);
  const bool hybrid = method == "hybrid";
  if (hybrid) {
    SPECDEC_CHECK(proposers.size() >= 2, p + "proposers", proposers.size(),
                 "at least two configs for method hybrid (it picks the best draft among its parts)");
    SPECDEC_CHECK(proposers.size() <= kMaxHybridParts, p + "proposers", str_cat(proposers.size(), " configs"),
                 str_cat("at most ", kMaxHybridParts, " configs for method hybrid"));
    SPECDEC_CHECK(model.empty(), p + "model", model, "None for method hybrid (a drafter belongs to its draft_model part)");
    int drafters = 0, skips = 0;
    for (size_t i = 0; i < proposers.size(); ++i) {
      const SpeculativeConfig& part = proposers[i];
      const std::string f = str_cat(p, "proposers[", i, "].");
      SPECDEC_CHECK(part.method == "draft_model" || part.method == "ngram" || part.method == "suffix" ||
                       part.method == "layer_skip",
                   f + "method", part.method, "'draft_model', 'ngram', 'suffix' or 'layer_skip' inside a hybrid");
      SPECDEC_CHECK(!part.adaptive, f + "adaptive", "true",
                   "false inside a hybrid (set adaptive on the hybrid config: k is chosen per step for the draft it takes)");
      SPECDEC_CHECK(part.disable_by_batch_size == 0, f + "disable_by_batch_size", part.disable_by_batch_size,
                   "None inside a hybrid (set it on the hybrid config)");
      drafters += part.method == "draft_model";
      skips += part.method == "layer_skip";
    }
    SPECDEC_CHECK(drafters <= 1, p + "proposers", str_cat(drafters, " draft_model parts"), "at most one draft_model part");
    SPECDEC_CHECK(skips <= 1, p + "proposers", str_cat(skips, " layer_skip parts"), "at most one layer_skip part");
  } else {
    SPECDEC_CHECK(proposers.empty(), p + "proposers", str_cat(proposers.size(), " configs"),
                 "None (only for method hybrid)");
  }
  const bool ngram = method == "ngram", suffix = method == "suffix", draft = method == "draft_model";
  if (hybrid && num_speculative_tokens == 0) {  // the longest part's
    for (const auto& part : proposers) num_speculative_tokens = std::max(num_speculative_tokens, part.num_speculative_tokens);
  }
  const bool dflash = method == "dflash";
  if (draft || dflash || method == "custom") {
    SPECDEC_CHECK(!model.empty(), p + "model", "None",
                 draft    ? "the drafter: a GGUF path or a catalog name (see `specdec models`)"
                 : dflash ? "the DFlash drafter: a directory with config.json (dflash_config) and model.safetensors"
                          : "'module:Class' naming a specdec.Proposer subclass (or pass the proposer object)");
  }
  if (ngram) SPECDEC_CHECK(model.empty() || model == "ngram" || model == "[ngram]", p + "model", model,
                          "None or 'ngram' for method ngram");
  if (suffix) SPECDEC_CHECK(model.empty(), p + "model", model, "None for method suffix (no model)");
  if (method == "layer_skip") {
    SPECDEC_CHECK(model.empty(), p + "model", model, "None for method layer_skip (the target drafts)");
  } else {
    SPECDEC_CHECK(exit_layer == 0, p + "exit_layer", exit_layer, "None (only for method layer_skip)");
  }
  if (num_speculative_tokens == 0) {
    SPECDEC_CHECK(suffix, p + "num_speculative_tokens", "None",
                 str_cat("an integer in [1, ", kMaxSpecLen, "] (required for method ", method, ")"));
    num_speculative_tokens = std::min(suffix_decoding_max_tree_depth, kMaxSpecLen);
  }
  SPECDEC_CHECK(num_speculative_tokens >= 1 && num_speculative_tokens <= kMaxSpecLen,
               p + "num_speculative_tokens", num_speculative_tokens, str_cat("an integer in [1, ", kMaxSpecLen, "]"));
  // n-gram fields
  if (ngram) {
    if (prompt_lookup_min == 0 && prompt_lookup_max == 0) prompt_lookup_min = prompt_lookup_max = 5;
    else if (prompt_lookup_min == 0) prompt_lookup_min = prompt_lookup_max;
    else if (prompt_lookup_max == 0) prompt_lookup_max = prompt_lookup_min;
    SPECDEC_CHECK(prompt_lookup_min <= prompt_lookup_max, p + "prompt_lookup_min", prompt_lookup_min,
                 str_cat("<= prompt_lookup_max = ", prompt_lookup_max));
  } else {
    SPECDEC_CHECK(prompt_lookup_min == 0, p + "prompt_lookup_min", prompt_lookup_min, "None (only for method ngram)");
    SPECDEC_CHECK(prompt_lookup_max == 0, p + "prompt_lookup_max", prompt_lookup_max, "None (only for method ngram)");
  }
  // suffix fields
  SPECDEC_CHECK(suffix_decoding_max_spec_factor > 0, p + "suffix_decoding_max_spec_factor",
               suffix_decoding_max_spec_factor, "a finite number > 0");
  SPECDEC_CHECK(suffix_decoding_min_token_prob >= 0 && suffix_decoding_min_token_prob <= 1,
               p + "suffix_decoding_min_token_prob", suffix_decoding_min_token_prob, "a number in [0, 1]");
  // drafter fields
  if (dflash) {
    SPECDEC_CHECK(draft_vocab_size == 0, p + "draft_vocab_size", draft_vocab_size,
                 "None for method dflash (it drafts with the target's head)");
  }
  SPECDEC_CHECK(draft || device.empty(), p + "device", device,
               dflash ? "None for method dflash (its drafter reads the target's hidden states and embedding "
                        "on the target's device)"
                      : "None (only for method draft_model: the drafter's own device)");
  if (!draft && !dflash) {
    SPECDEC_CHECK(attention_backend.empty(), p + "attention_backend", attention_backend, "None (only for method draft_model)");
    SPECDEC_CHECK(max_model_len == 0, p + "max_model_len", max_model_len, "None (only for method draft_model)");
    SPECDEC_CHECK(draft_kv_cache_memory_bytes == 0, p + "draft_kv_cache_memory_bytes",
                 draft_kv_cache_memory_bytes, "None (only for method draft_model)");
    SPECDEC_CHECK(draft_kv_cache_fraction == 0, p + "draft_kv_cache_fraction", draft_kv_cache_fraction,
                 "None (only for method draft_model)");
    SPECDEC_CHECK(kv_cache_dtype.empty(), p + "kv_cache_dtype", kv_cache_dtype, "None (only for method draft_model)");
    SPECDEC_CHECK(draft_vocab_size == 0, p + "draft_vocab_size", draft_vocab_size, "None (only for method draft_model)");
    SPECDEC_CHECK(draft_vocab_file.empty(), p + "draft_vocab_file", draft_vocab_file, "None (only for method draft_model)");
    SPECDEC_CHECK(!disable_hybrid_kv_cache_manager, p + "disable_hybrid_kv_cache_manager", "true",
                 "false (only for method draft_model: the drafter's cache; the target's is LLM's "
                 "disable_hybrid_kv_cache_manager)");
  }
  SPECDEC_CHECK(draft_vocab_size >= 0, p + "draft_vocab_size", draft_vocab_size,
               "0 (the whole vocabulary) or an integer >= 1");
  SPECDEC_CHECK(draft_vocab_file.empty() || draft_vocab_size > 0, p + "draft_vocab_file", draft_vocab_file,
               "None unless draft_vocab_size is given (the file ranks the ids; the size picks how many)");
  std::string lower = attention_backend;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (lower == "auto") attention_backend.clear();
  if (!attention_backend.empty()) {
    std::string upper = attention_backend;
    std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char ch) { return std::toupper(ch); });
    const auto names = attn::backend_names();
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    SPECDEC_CHECK(std::find(names.begin(), names.end(), upper) != names.end(), p + "attention_backend",
                 attention_backend, "None, 'auto' or one of " + list);
    attention_backend = upper;
  }
  SPECDEC_CHECK(max_model_len == 0 || max_model_len >= 2, p + "max_model_len", max_model_len,
               "0 (the target's) or an integer >= 2");
  SPECDEC_CHECK(draft_kv_cache_fraction == 0 || (draft_kv_cache_fraction > 0 && draft_kv_cache_fraction < 1),
               p + "draft_kv_cache_fraction", draft_kv_cache_fraction, "a number in (0, 1)");
  SPECDEC_CHECK(draft_kv_cache_fraction == 0 || draft_kv_cache_memory_bytes == 0, p + "draft_kv_cache_fraction",
               draft_kv_cache_fraction, "None when draft_kv_cache_memory_bytes is given (one of the two)");
  if (!kv_cache_dtype.empty()) parse_dtype(kv_cache_dtype, p + "kv_cache_dtype");
}

nlohmann::json SpeculativeConfig::to_json() const {
  nlohmann::json j;
  j["method"] = method;
  j["num_speculative_tokens"] = num_speculative_tokens;
  if (!model.empty()) j["model"] = model;
  if (method == "ngram") {
    j["prompt_lookup_min"] = prompt_lookup_min;
    j["prompt_lookup_max"] = prompt_lookup_max;
  }
  if (method == "suffix") {
    j["suffix_decoding_max_tree_depth"] = suffix_decoding_max_tree_depth;
    j["suffix_decoding_max_cached_requests"] = suffix_decoding_max_cached_requests;
    j["suffix_decoding_max_spec_factor"] = suffix_decoding_max_spec_factor;
    j["suffix_decoding_min_token_prob"] = suffix_decoding_min_token_prob;
  }
  if (method == "draft_model" || method == "dflash") {
    j["attention_backend"] = attention_backend.empty() ? nlohmann::json(nullptr) : nlohmann::json(attention_backend);
    j["device"] = device.empty() ? nlohmann::json(nullptr) : nlohmann::json(device);
    j["max_model_len"] = max_model_len;
    j["draft_kv_cache_memory_bytes"] = draft_kv_cache_memory_bytes;
    j["draft_kv_cache_fraction"] = draft_kv_cache_fraction;
    j["kv_cache_dtype"] = kv_cache_dtype.empty() ? nlohmann::json(nullptr) : nlohmann::json(kv_cache_dtype);
    j["draft_vocab_size"] = draft_vocab_size;
    j["draft_vocab_file"] = draft_vocab_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(draft_vocab_file);
    j["disable_hybrid_kv_cache_manager"] = disable_hybrid_kv_cache_manager;
  }
  if (method == "layer_skip") j["exit_layer"] = exit_layer == 0 ? nlohmann::json("auto") : nlohmann::json(exit_layer);
  if (method == "hybrid") {
    j["proposers"] = nlohmann::json::array();
    for (const auto& part : proposers) j["proposers"].push_back(part.to_json());
  }
  j["adaptive"] = adaptive;
  j["disable_by_batch_size"] = disable_by_batch_size ? nlohmann::json(disable_by_batch_size) : nlohmann::json(nullptr);
  return j;
}

}  // namespace specdec::spec_decode
