// A Hugging Face tokenizer (tokenizer.json, tokenizer_config.json, generation_config.json) as the
// tokenizer.* GGUF keys llama.cpp's converter writes, so that the one tokenizer implementation
// (cpp/tokenizer) reads it. Two forms run: byte-level BPE (tokenizer.ggml.model = gpt2, with the
// pre-tokenizer named from tokenizer.json's pre_tokenizer) and SentencePiece-style BPE with byte
// fallback (llama; a merge's rank becomes its result's score: the lowest rank, the highest score).
#include <algorithm>
#include <map>
#include <optional>

#include "common/errors.h"
#include "common/json.h"
#include "model/hf_parts.h"

namespace specdec::model {
namespace fs = std::filesystem;
namespace {

using Json = nlohmann::json;

// llama.cpp's token types.
constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;

// The split expressions of Qwen2's and Llama 3's tokenizer.json (they differ in \p{N}{1,3}).
constexpr const char* kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Parsed {
  std::string where;  // tokenizer.json's path
  Json j;
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::map<std::string, int32_t> ids;  // text -> id (added tokens win)
};

// The steps of a pre_tokenizer / normalizer / decoder (a Sequence flattened); [] for null.
std::vector<Json> steps(const Json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_object()) return {};
  const std::string type = it->value("type", "");
  if (type == "Sequence") {
    const char* list = it->contains("pretokenizers") ? "pretokenizers"
                       : it->contains("normalizers") ? "normalizers"
                       : it->contains("decoders")    ? "decoders"
                                                     : "processors";
    std::vector<Json> out;
    for (const Json& x : it->value(list, Json::array())) {
      if (x.is_object()) out.push_back(x);
    }
    return out;
  }
  return {*it};
}

bool has_step(const std::vector<Json>& s, const std::string& type) {
  return std::any_of(s.begin(), s.end(),
                     [&](const Json& x) { return x.value("type", "") == type; });
}

void read_vocab(Parsed& p, int64_t vocab_size) {
  const Json& model = p.j.at("model");
  const Json& vocab = model.contains("vocab") ? model["vocab"] : Json();
  SPECDEC_CHECK(vocab.is_object(), p.where + " model.vocab", json_summary(vocab),
                "an object: token -> id");
  int64_t n = vocab_size;
  std::vector<std::pair<std::string, int64_t>> entries;
  for (const auto& [text, id] : vocab.items())
    entries.emplace_back(text, id.is_number_integer() ? id.get<int64_t>() : -1);
  for (const auto& t : p.j.value("added_tokens", Json::array())) {
    entries.emplace_back(t.value("content", ""), t.contains("id") && t["id"].is_number_integer()
                                                     ? t["id"].get<int64_t>()
                                                     : -1);
  }
  for (const auto& [text, id] : entries) {
    SPECDEC_CHECK(id >= 0 && id < n, str_cat(p.where, " token ", json_summary(text)), id,
                  str_cat("an id in [0, ", n, ") (config.json vocab_size: the embedding's rows)"));
  }
  p.tokens.assign(static_cast<size_t>(n), "");
  p.types.assign(static_cast<size_t>(n), kNormal);
  std::vector<bool> set(static_cast<size_t>(n), false);
  for (const auto& [text, id] : entries) {
    if (set[id] && p.tokens[id] != text) {  // an added token repeats its vocab entry: fine
      throw FormatError(str_cat(p.where, ": tokens ", json_summary(p.tokens[id]), " and ",
                                json_summary(text), " both have id ", id,
                                " (model.vocab / added_tokens): each id must name one token"));
    }
    p.tokens[id] = text;
    set[id] = true;
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!set[i]) p.tokens[i] = str_cat("[PAD", i, "]"), p.types[i] = kUnused;
  }
  for (const auto& t : p.j.value("added_tokens", Json::array())) {
    p.types[t["id"].get<int64_t>()] = t.value("special", false) ? kControl : kUserDefined;
  }
  for (int64_t i = n - 1; i >= 0; --i) p.ids[p.tokens[i]] = static_cast<int32_t>(i);
  for (const auto& t : p.j.value("added_tokens", Json::array()))
    p.ids[t.value("content", "")] = t["id"].get<int32_t>();
}

std::vector<std::string> read_merges(const Parsed& p) {
  std::vector<std::string> out;
  for (const auto& m : p.j.at("model").value("merges", Json::array())) {
    if (m.is_string()) {
      out.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      const std::string a = m[0].get<std::string>(), b = m[1].get<std::string>();
      if (a.find(' ') != std::string::npos || b.find(' ') != std::string::npos) {
        throw UnsupportedError(str_cat(p.where, ": merge ", json_summary(m),
                                       " has a token with a space; "
                                       "merges are stored as 'left right'"));
      }
      out.push_back(a + " " + b);
    } else {
      throw ConfigError(p.where + " model.merges[]", json_summary(m),
                        "\"left right\" or [left, right]");
    }
  }
  return out;
}

// The llama.cpp pre-tokenizer name of a byte-level BPE pre_tokenizer.
std::string byte_level_pre(const Parsed& p) {
  const std::vector<Json> s = steps(p.j, "pre_tokenizer");
  auto byte_level = [&](const Json& x, bool regex) {
    return x.value("type", "") == "ByteLevel" && !x.value("add_prefix_space", false) &&
           x.value("use_regex", true) == regex;
  };
  if (s.size() == 1 && byte_level(s[0], true)) return "gpt-2";
  if (s.size() == 2 && s[0].value("type", "") == "Digits" &&
      s[0].value("individual_digits", false) && byte_level(s[1], true)) {
    return "smollm";
  }
  const auto isolated = [](const Json& x) {  // the matches are the pieces, as llama.cpp splits
    return x.value("behavior", "") == "Isolated" && !x.value("invert", false);
  };
  if (s.size() == 2 && s[0].value("type", "") == "Split" && isolated(s[0]) &&
      byte_level(s[1], false)) {
    const std::string regex = s[0].contains("pattern") ? s[0]["pattern"].value("Regex", "") : "";
    if (regex == kQwen2Split) return "qwen2";
    if (regex == kLlama3Split) return "llama-bpe";
  }
  throw UnsupportedError(
      str_cat(p.where, ": pre_tokenizer ", json_summary(p.j.value("pre_tokenizer", Json()), 200),
              " is not supported; supported byte-level forms: GPT-2's ByteLevel, SmolLM's "
              "Digits + ByteLevel, Qwen2's and Llama 3's Split + ByteLevel"));
}

// Every step of tokenizer.json's `key` (normalizer or pre_tokenizer) must be one `allowed` accepts:
// a step the tokenizer here would skip changes the tokens, so it is refused, not ignored.
template <typename Allowed>
void check_steps(const Parsed& p, const char* key, Allowed allowed, const char* supported) {
  for (const Json& x : steps(p.j, key)) {
    if (!allowed(x)) {
      throw UnsupportedError(str_cat(p.where, ": ", key, " step ", json_summary(x, 160),
                                     " is not supported; supported: ", supported));
    }
  }
}

bool is_text(const Json& x, const char* key, const std::string& want) {
  return x.contains(key) && x[key].is_string() && x[key].get<std::string>() == want;
}

// SentencePiece-style BPE: "▁" for spaces (Prepend("▁") and Replace(" " -> "▁"), or Metaspace);
// byte-level BPE: no normalizer but NFC (Qwen2's; the text is taken as given, as llama.cpp does).
void check_normalizer_and_pre(const Parsed& p, bool spm) {
  if (spm) {
    check_steps(
        p, "normalizer",
        [](const Json& x) {
          const std::string type = x.value("type", "");
          if (type == "Prepend") return is_text(x, "prepend", "\xe2\x96\x81");
          return type == "Replace" && x.contains("pattern") && x["pattern"].is_object() &&
                 is_text(x["pattern"], "String", " ") && is_text(x, "content", "\xe2\x96\x81");
        },
        "Prepend(\"\xe2\x96\x81\") and Replace(\" \" -> \"\xe2\x96\x81\") (SentencePiece's "
        "spaces)");
    check_steps(
        p, "pre_tokenizer",
        [](const Json& x) {
          return x.value("type", "") == "Metaspace" &&
                 (!x.contains("replacement") || is_text(x, "replacement", "\xe2\x96\x81"));
        },
        "Metaspace with replacement \"\xe2\x96\x81\" (a SentencePiece-style BPE splits nothing)");
  } else {
    check_steps(
        p, "normalizer", [](const Json& x) { return x.value("type", "") == "NFC"; },
        "none, or NFC (byte-level BPE)");
  }
}

// SentencePiece style: whether a space prefix is added (Prepend("▁") or Metaspace with a prepend).
bool spm_space_prefix(const Parsed& p) {
  for (const Json& x : steps(p.j, "normalizer")) {
    if (x.value("type", "") == "Prepend") return true;
  }
  for (const Json& x : steps(p.j, "pre_tokenizer")) {
    if (x.value("type", "") != "Metaspace") continue;
    if (x.value("split", false)) {
      throw UnsupportedError(str_cat(p.where,
                                     ": pre_tokenizer Metaspace with split = true is not supported "
                                     "(SentencePiece-style BPE runs over the whole text)"));
    }
    const std::string scheme =
        x.value("prepend_scheme", x.value("add_prefix_space", true) ? "always" : "never");
    return scheme != "never";
  }
  return false;
}

void add_spm_scores(const Parsed& p, GgufWriter& w) {
  const std::vector<std::string> merges = read_merges(p);
  std::vector<float> scores(p.tokens.size(), 0.0f);
  std::vector<bool> merged(p.tokens.size(), false);
  for (size_t i = 0; i < merges.size(); ++i) {
    const size_t space = merges[i].find(' ');
    const auto it = p.ids.find(merges[i].substr(0, space) + merges[i].substr(space + 1));
    if (it == p.ids.end() || merged[it->second]) continue;
    merged[it->second] = true;
    scores[it->second] = -static_cast<float>(i);
  }
  for (size_t i = 0; i < scores.size(); ++i) {  // pieces no merge makes: after every merge
    if (!merged[i] && p.types[i] == kNormal) scores[i] = -static_cast<float>(merges.size() + i);
  }
  w.set_f32s("tokenizer.ggml.scores", scores);
}

void add_vocab(Parsed& p, GgufWriter& w) {
  const Json& model = p.j.at("model");
  const std::string type = model.value("type", "");
  if (type != "BPE") {
    throw UnsupportedError(str_cat(p.where, ": model.type = '", type,
                                   "' is not supported; supported: BPE "
                                   "(byte-level, or SentencePiece-style with byte fallback)"));
  }
  const bool byte_level = has_step(steps(p.j, "pre_tokenizer"), "ByteLevel") ||
                          has_step(steps(p.j, "decoder"), "ByteLevel");
  const bool spm = !byte_level && (model.value("byte_fallback", false) ||
                                   has_step(steps(p.j, "pre_tokenizer"), "Metaspace") ||
                                   has_step(steps(p.j, "normalizer"), "Replace"));
  if (!byte_level && !spm) {
    throw UnsupportedError(
        str_cat(p.where,
                ": a BPE tokenizer that is neither byte-level (ByteLevel "
                "pre-tokenizer) nor SentencePiece-style (byte_fallback, ▁ for spaces)"));
  }
  check_normalizer_and_pre(p, spm);
  if (spm) {
    for (size_t i = 0; i < p.tokens.size(); ++i) {
      const std::string& t = p.tokens[i];
      if (p.types[i] == kNormal && t.size() == 6 && t.rfind("<0x", 0) == 0 && t[5] == '>')
        p.types[i] = kByte;
    }
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      const auto it = p.ids.find(model["unk_token"].get<std::string>());
      if (it != p.ids.end())
        p.types[it->second] = kUnknown, w.set_u32("tokenizer.ggml.unknown_token_id", it->second);
    }
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_bool("tokenizer.ggml.add_space_prefix", spm_space_prefix(p));
    add_spm_scores(p, w);
  } else {
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", byte_level_pre(p));
    w.set_strings("tokenizer.ggml.merges", read_merges(p));
  }
  w.set_strings("tokenizer.ggml.tokens", p.tokens);
  w.set_i32s("tokenizer.ggml.token_type", p.types);
}

// A token named by tokenizer_config.json: a string, {"content": ...} or null.
std::optional<int32_t> token_of(const Parsed& p, const Json& cfg, const std::string& key,
                                const std::string& file) {
  const auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  const Json& v = it->is_object() ? it->value("content", Json()) : *it;
  SPECDEC_CHECK(v.is_string(), file + " " + key, json_summary(*it),
                "a token's text, {\"content\": text} or null");
  const auto id = p.ids.find(v.get<std::string>());
  SPECDEC_CHECK(id != p.ids.end(), file + " " + key, json_summary(v),
                "a token of tokenizer.json's vocabulary");
  return id->second;
}

// The template processor's special tokens before and after a single text (add BOS / EOS).
std::pair<std::optional<std::string>, std::optional<std::string>> template_ends(const Parsed& p) {
  for (const Json& x : steps(p.j, "post_processor")) {
    if (x.value("type", "") != "TemplateProcessing" || !x.contains("single") || x["single"].empty())
      continue;
    const Json& single = x["single"];
    auto special = [](const Json& item) -> std::optional<std::string> {
      if (item.contains("SpecialToken")) return item["SpecialToken"].value("id", "");
      return std::nullopt;
    };
    return {special(single.front()), single.size() > 1 ? special(single.back()) : std::nullopt};
  }
  return {std::nullopt, std::nullopt};
}

void set_id(GgufWriter& w, const char* key, std::optional<int32_t> id) {
  if (id) w.set_u32(key, static_cast<uint32_t>(*id));
}

// eos_token_id of generation_config.json: one id or a list (all of them end generation).
std::vector<int32_t> generation_eos(const fs::path& dir, int64_t n) {
  const fs::path file = dir / "generation_config.json";
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return {};
  const Json g = read_json_file(file);
  const Json v = g.is_object() ? g.value("eos_token_id", Json()) : Json();
  if (v.is_null()) return {};
  std::vector<int32_t> ids;
  for (const Json& e : v.is_array() ? v : Json::array({v})) {
    SPECDEC_CHECK(e.is_number_integer() && e.get<int64_t>() >= 0 && e.get<int64_t>() < n,
                  file.string() + " eos_token_id", json_summary(v),
                  str_cat("a token id or a list of token ids in [0, ", n, ")"));
    ids.push_back(e.get<int32_t>());
  }
  return ids;
}

void add_special(const Parsed& p, const fs::path& dir, GgufWriter& w) {
  const fs::path file = dir / "tokenizer_config.json";
  std::error_code ec;
  const Json cfg = fs::is_regular_file(file, ec) ? read_json_file(file) : Json::object();
  const std::string where = file.string();
  SPECDEC_CHECK(cfg.is_object(), where, json_summary(cfg), "a JSON object");
  const auto [first, last] = template_ends(p);
  auto find = [&](const std::optional<std::string>& t) -> std::optional<int32_t> {
    if (!t) return std::nullopt;
    const auto it = p.ids.find(*t);
    return it == p.ids.end() ? std::nullopt : std::optional<int32_t>(it->second);
  };
  std::optional<int32_t> bos = token_of(p, cfg, "bos_token", where);
  std::optional<int32_t> eos = token_of(p, cfg, "eos_token", where);
  if (!bos) bos = find(first);
  const std::vector<int32_t> stops = generation_eos(dir, static_cast<int64_t>(p.tokens.size()));
  if (!eos && !stops.empty()) eos = stops.front();
  set_id(w, "tokenizer.ggml.bos_token_id", bos);
  set_id(w, "tokenizer.ggml.eos_token_id", eos);
  set_id(w, "tokenizer.ggml.padding_token_id", token_of(p, cfg, "pad_token", where));
  if (const auto unk = token_of(p, cfg, "unk_token", where))
    set_id(w, "tokenizer.ggml.unknown_token_id", unk);
  auto flag = [&](const char* key, bool fallback) {
    if (!cfg.contains(key) || cfg[key].is_null()) return fallback;
    SPECDEC_CHECK(cfg[key].is_boolean(), where + " " + key, json_summary(cfg[key]),
                  "true or false");
    return cfg[key].get<bool>();
  };
  // without the flags, the post-processor's template says (Llama 3 adds BOS there)
  w.set_bool("tokenizer.ggml.add_bos_token",
             flag("add_bos_token", first.has_value() && find(first) == bos && bos));
  w.set_bool("tokenizer.ggml.add_eos_token",
             flag("add_eos_token", last.has_value() && find(last) == eos && eos));
  if (!stops.empty()) w.set_i32s("tokenizer.hf.eos_token_ids", stops);
}

void add_chat_template(const fs::path& dir, GgufWriter& w) {
  const fs::path jinja = dir / "chat_template.jinja";
  const fs::path file = dir / "tokenizer_config.json";
  std::error_code ec;
  if (fs::is_regular_file(jinja, ec)) {
    w.set_string("tokenizer.chat_template", read_text_file(jinja, kMaxSmallJsonFileBytes));
    return;
  }
  if (!fs::is_regular_file(file, ec)) return;
  const Json cfg = read_json_file(file);
  const Json t = cfg.value("chat_template", Json());
  if (t.is_string()) {
    w.set_string("tokenizer.chat_template", t.get<std::string>());
  } else if (t.is_array()) {  // named templates: "default", else the first
    const Json* pick = nullptr;
    for (const Json& e : t) {
      if (!e.is_object() || !e.contains("template") || !e["template"].is_string()) {
        throw ConfigError(file.string() + " chat_template[]", json_summary(e),
                          "{\"name\": ..., \"template\": text}");
      }
      const std::string name =
          e.contains("name") && e["name"].is_string() ? e["name"].get<std::string>() : "";
      if (pick == nullptr || name == "default") pick = &e;
      if (!name.empty() && name != "default") {  // as llama.cpp's converter: tool_use, rag, ...
        w.set_string("tokenizer.chat_template." + name, e["template"].get<std::string>());
      }
    }
    if (pick != nullptr)
      w.set_string("tokenizer.chat_template", (*pick)["template"].get<std::string>());
  } else if (!t.is_null()) {
    throw ConfigError(file.string() + " chat_template", json_summary(t),
                      "a template string or a list of named templates");
  }
}

}  // namespace

void add_hf_tokenizer(const fs::path& dir, int64_t vocab_size, GgufWriter& w) {
  Parsed p;
  const fs::path file = dir / "tokenizer.json";
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) {
    throw ConfigError("path", dir.string(),
                      "a Hugging Face directory with tokenizer.json (tokenizer.model "
                      "alone is not read)");
  }
  p.where = file.string();
  JsonLimits limits;
  limits.unique_keys = true;  // a token twice in model.vocab: a DOM would keep one silently
  p.j = read_json_file(file, kMaxLargeJsonFileBytes, limits);
  SPECDEC_CHECK(p.j.is_object() && p.j.contains("model") && p.j["model"].is_object(),
                p.where + " model",
                p.j.is_object() && p.j.contains("model") ? json_summary(p.j["model"]) : "missing",
                "an object");
  const Json& added = p.j.contains("added_tokens") ? p.j["added_tokens"] : Json::array();
  SPECDEC_CHECK(added.is_array(), p.where + " added_tokens", json_summary(added), "a list");
  for (const Json& t : added) {
    SPECDEC_CHECK(t.is_object() && t.contains("content") && t["content"].is_string() &&
                      t.contains("id") && t["id"].is_number_integer() &&
                      (!t.contains("special") || t["special"].is_boolean()),
                  p.where + " added_tokens[]", json_summary(t),
                  "{\"id\": integer, \"content\": text, \"special\": bool}");
  }
  try {
    read_vocab(p, vocab_size);
    add_vocab(p, w);
    add_special(p, dir, w);
    add_chat_template(dir, w);
  } catch (const nlohmann::json::exception& e) {  // a field of an unexpected JSON type
    throw FormatError(
        str_cat(dir.string(), ": a tokenizer file has a field of the wrong type: ", e.what()));
  }
}

}  // namespace specdec::model
