#include "tokenizer/vocab.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "common/errors.h"

namespace specdec::tokenizer {

using model::GgufArray;
using model::GgufType;
using model::GgufValue;

namespace {

constexpr const char* kKeyModel = "tokenizer.ggml.model";
constexpr const char* kKeyPre = "tokenizer.ggml.pre";
constexpr const char* kKeyTokens = "tokenizer.ggml.tokens";
constexpr const char* kKeyScores = "tokenizer.ggml.scores";
constexpr const char* kKeyTypes = "tokenizer.ggml.token_type";
constexpr const char* kKeyMerges = "tokenizer.ggml.merges";
constexpr const char* kKeyCharsmap = "tokenizer.ggml.precompiled_charsmap";

// Reads keys of one metadata map; every error names the key, the value and the file.
class MetadataReader {
 public:
  MetadataReader(const std::map<std::string, GgufValue>& metadata, const std::string& source)
      : metadata_(metadata), source_(source) {}

  [[noreturn]] void fail(const std::string& key, const std::string& detail) const {
    throw FormatError(str_cat("tokenizer metadata ", key, ": ", detail,
                              source_.empty() ? "" : " (file " + source_ + ")"));
  }

  const GgufValue* find(const std::string& key) const {
    const auto it = metadata_.find(key);
    return it == metadata_.end() ? nullptr : &it->second;
  }

  std::optional<std::string> string(const std::string& key) const {
    const GgufValue* value = find(key);
    if (value == nullptr) return std::nullopt;
    if (const auto* s = value->get_if<std::string>()) return *s;
    fail(key, str_cat("expected a string, found ", model::gguf_type_name(value->type())));
  }

  std::optional<bool> boolean(const std::string& key) const {
    const GgufValue* value = find(key);
    if (value == nullptr) return std::nullopt;
    if (const auto* b = value->get_if<bool>()) return *b;
    fail(key, str_cat("expected a bool, found ", model::gguf_type_name(value->type())));
  }

  std::optional<int64_t> integer(const std::string& key) const {
    const GgufValue* value = find(key);
    if (value == nullptr) return std::nullopt;
    std::optional<int64_t> out;
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
            if (!(std::is_same_v<T, uint64_t> &&
                  static_cast<uint64_t>(v) > uint64_t{std::numeric_limits<int64_t>::max()})) {
              out = static_cast<int64_t>(v);
            }
          }
        },
        value->variant());
    if (!out)
      fail(key, str_cat("expected an integer, found ", model::gguf_type_name(value->type())));
    return out;
  }

  // The array at `key` (nullptr when absent), checked for its element type and length.
  const GgufArray* array(const std::string& key, std::initializer_list<GgufType> element_types,
                         std::optional<size_t> length) const {
    const GgufValue* value = find(key);
    if (value == nullptr) return nullptr;
    const auto* array = value->get_if<GgufArray>();
    if (array == nullptr) {
      fail(key, str_cat("expected an array, found ", model::gguf_type_name(value->type())));
    }
    bool type_ok = false;
    for (GgufType t : element_types) type_ok = type_ok || array->type == t;
    if (!type_ok) {
      fail(key,
           str_cat("array of ", model::gguf_type_name(array->type), " has the wrong element type"));
    }
    if (length && array->values.size() != *length) {
      fail(key, str_cat("has ", array->values.size(), " entries but ", kKeyTokens, " has ", *length,
                        "; the lengths must be equal"));
    }
    return array;
  }

 private:
  const std::map<std::string, GgufValue>& metadata_;
  const std::string& source_;
};

std::string printable(std::string_view text) {
  std::string out = "'";
  for (char c : text.substr(0, 60)) {
    out += (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) ? std::string(1, c)
                                                                : str_cat("\\x", int(uint8_t(c)));
  }
  return out + (text.size() > 60 ? "...'" : "'");
}

uint32_t attr_of_type(TokenType type) {
  switch (type) {
    case TokenType::kNormal:
      return kAttrNormal;
    case TokenType::kUnknown:
      return kAttrUnknown;
    case TokenType::kControl:
      return kAttrControl;
    case TokenType::kUserDefined:
      return kAttrUserDefined;
    case TokenType::kUnused:
      return kAttrUnused;
    case TokenType::kByte:
      return kAttrByte;
    case TokenType::kUndefined:
      break;
  }
  return 0;
}

bool is_byte_token_text(const std::string& text) {
  auto hex = [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
  };
  return text.size() == 6 && text.compare(0, 3, "<0x") == 0 && hex(text[3]) && hex(text[4]) &&
         text[5] == '>';
}

void read_tokens(const MetadataReader& r, Vocab& v) {
  const GgufArray* tokens = r.array(kKeyTokens, {GgufType::kString}, std::nullopt);
  if (tokens == nullptr) r.fail(kKeyTokens, "is missing");
  if (tokens->values.empty()) r.fail(kKeyTokens, "is empty");
  if (tokens->values.size() >= size_t{std::numeric_limits<int32_t>::max()}) {
    r.fail(kKeyTokens, str_cat("has ", tokens->values.size(), " entries; at most 2^31-2 allowed"));
  }
  const size_t n = tokens->values.size();
  const GgufArray* scores = r.array(kKeyScores, {GgufType::kFloat32, GgufType::kInt32}, n);
  const GgufArray* types = r.array(kKeyTypes, {GgufType::kInt32}, n);
  v.tokens.resize(n);
  for (size_t i = 0; i < n; ++i) {
    TokenData& t = v.tokens[i];
    t.text = *tokens->values[i].get_if<std::string>();
    if (t.text.empty()) t.text = str_cat("[EMPTY_", i, "]");  // as llama.cpp
    if (scores != nullptr) {
      const GgufValue& s = scores->values[i];
      t.score = s.get_if<float>() ? *s.get_if<float>() : static_cast<float>(*s.get_if<int32_t>());
    }
    if (types != nullptr) {
      const int32_t type = *types->values[i].get_if<int32_t>();
      if (type < 0 || type > static_cast<int32_t>(TokenType::kByte)) {
        r.fail(kKeyTypes, str_cat("token ", i, " has type ", type, "; expected 0..6"));
      }
      t.type = static_cast<TokenType>(type);
    }
    t.attr = attr_of_type(t.type);
    if (t.type == TokenType::kByte && !is_byte_token_text(t.text)) {
      r.fail(kKeyTypes, str_cat("token ", i, " ", printable(t.text),
                                " has type BYTE but is not of the form <0xXX>"));
    }
  }
  v.token_ids.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const auto [it, inserted] = v.token_ids.emplace(v.tokens[i].text, static_cast<int32_t>(i));
    if (!inserted) {
      r.fail(kKeyTokens, str_cat("duplicate token ", printable(v.tokens[i].text), " at ids ",
                                 it->second, " and ", i));
    }
  }
}

void read_merges(const MetadataReader& r, Vocab& v) {
  const GgufArray* merges = r.array(kKeyMerges, {GgufType::kString}, std::nullopt);
  if (merges == nullptr)
    r.fail(kKeyMerges, "is missing (required for tokenizer.ggml.model = gpt2)");
  if (merges->values.size() >= size_t{std::numeric_limits<int32_t>::max()}) {
    r.fail(kKeyMerges, str_cat("has ", merges->values.size(), " entries"));
  }
  std::unordered_map<std::string, int32_t> extra_ids;
  v.merges.reserve(merges->values.size());
  for (size_t i = 0; i < merges->values.size(); ++i) {
    const std::string& merge = *merges->values[i].get_if<std::string>();
    const size_t space = merge.find(' ', 1);
    if (space == std::string::npos || space + 1 >= merge.size()) {
      r.fail(kKeyMerges, str_cat("entry ", i, " ", printable(merge),
                                 " is not two tokens separated by a space"));
    }
    const std::string_view left = std::string_view(merge).substr(0, space);
    const std::string_view right = std::string_view(merge).substr(space + 1);
    const int32_t left_id = v.find(left);
    const int32_t right_id = v.find(right);
    if (left_id == kNoToken || right_id == kNoToken) {
      r.fail(kKeyMerges,
             str_cat("entry ", i, " ", printable(merge), " refers to ",
                     printable(left_id == kNoToken ? left : right), ", which is not a token"));
    }
    const std::string merged = std::string(left) + std::string(right);
    int32_t result = v.find(merged);
    if (result == kNoToken) {
      const auto [it, inserted] = extra_ids.emplace(merged, v.size() + int32_t(extra_ids.size()));
      if (inserted) v.extra_symbols.push_back(merged);
      result = it->second;
    }
    const uint64_t key = (uint64_t(uint32_t(left_id)) << 32) | uint32_t(right_id);
    v.merges.emplace(key, BpeMerge{static_cast<int32_t>(i), result});  // the first one wins
  }
}

// Special ids: SentencePiece's defaults <unk> = 0, <s> = 1, </s> = 2 (dropped when out of range),
// then the file's keys, which must be in range. (llama.cpp's BPE default of 11 for BOS and EOS is
// not copied: a BPE file without the keys has no BOS/EOS.)
void read_special_ids(const MetadataReader& r, Vocab& v) {
  SpecialTokens& s = v.special;
  if (v.kind == TokenizerKind::kSpm) s.bos = 1, s.eos = 2, s.unk = 0;
  if (v.kind == TokenizerKind::kWpm) s.bos = 101, s.unk = 100, s.sep = 102, s.pad = 0, s.mask = 103;
  if (v.kind == TokenizerKind::kUgm) s.eos = 1, s.unk = 2, s.pad = 0;  // T5's
  const std::pair<const char*, int32_t*> keys[] = {
      {"tokenizer.ggml.bos_token_id", &s.bos},
      {"tokenizer.ggml.eos_token_id", &s.eos},
      {"tokenizer.ggml.eot_token_id", &s.eot},
      {"tokenizer.ggml.eom_token_id", &s.eom},
      {"tokenizer.ggml.unknown_token_id", &s.unk},
      {"tokenizer.ggml.seperator_token_id", &s.sep},
      {"tokenizer.ggml.padding_token_id", &s.pad},
      {"tokenizer.ggml.mask_token_id", &s.mask},
      {"tokenizer.ggml.fim_pre_token_id", &s.fim_pre},
      {"tokenizer.ggml.fim_suf_token_id", &s.fim_suf},
      {"tokenizer.ggml.fim_mid_token_id", &s.fim_mid},
      {"tokenizer.ggml.fim_pad_token_id", &s.fim_pad},
      {"tokenizer.ggml.fim_rep_token_id", &s.fim_rep},
      {"tokenizer.ggml.fim_sep_token_id", &s.fim_sep},
      {"tokenizer.ggml.prefix_token_id", &s.fim_pre},
      {"tokenizer.ggml.suffix_token_id", &s.fim_suf},
      {"tokenizer.ggml.middle_token_id", &s.fim_mid},
  };
  for (const auto& [key, id] : keys) {
    if (*id >= v.size()) *id = kNoToken;
    const std::optional<int64_t> value = r.integer(key);
    if (!value) continue;
    // -1 stored as int or as u32 (llama2.c conversions such as stories260K): "no such token".
    if (*value == -1 || *value == 0xFFFFFFFFll) {
      *id = kNoToken;
      continue;
    }
    if (*value < 0 || *value >= v.size()) {
      r.fail(key, str_cat("= ", *value, " is outside the vocabulary [0, ", v.size(), ")"));
    }
    *id = static_cast<int32_t>(*value);
  }
}

// tokenizer.hf.eos_token_ids (specdec's in-memory key for a Hugging Face directory's
// generation_config.json eos_token_id list): every one ends generation.
void read_extra_eog(const MetadataReader& r, Vocab& v) {
  const char* key = "tokenizer.hf.eos_token_ids";
  const GgufArray* ids = r.array(key, {GgufType::kInt32}, std::nullopt);
  if (ids == nullptr) return;
  for (const auto& e : ids->values) {
    const int32_t id = *e.get_if<int32_t>();
    if (id < 0 || id >= v.size()) r.fail(key, str_cat("holds ", id, ", outside the vocabulary [0, ", v.size(), ")"));
    v.eog_ids.push_back(id);
  }
  std::sort(v.eog_ids.begin(), v.eog_ids.end());
  v.eog_ids.erase(std::unique(v.eog_ids.begin(), v.eog_ids.end()), v.eog_ids.end());
}

void read_flags(const MetadataReader& r, Vocab& v) {
  // llama.cpp's defaults: SPM adds BOS and a space prefix; BPE (for these pre-tokenizers) neither.
  const bool spm = v.kind == TokenizerKind::kSpm;
  // llama.cpp's Llama 3 pre-tokenizer adds BOS unless the file says otherwise
  const bool wpm = v.kind == TokenizerKind::kWpm;
  v.add_bos = r.boolean("tokenizer.ggml.add_bos_token")
                  .value_or(spm || wpm || v.pre == PreTokenizer::kLlama3);
  v.add_sep = wpm;  // [CLS] text [SEP]
  v.wpm_lowercase = r.boolean("tokenizer.ggml.normalizer.lowercase").value_or(true);
  v.wpm_strip_accents =
      r.boolean("tokenizer.ggml.normalizer.strip_accents").value_or(v.wpm_lowercase);
  // llama.cpp adds BOS for Gemma 4 whatever the file says (its template and training expect it)
  if (v.utf8_symbols) v.add_bos = true;
  // Unigram (T5) adds EOS unless the file says otherwise
  v.add_eos = r.boolean("tokenizer.ggml.add_eos_token").value_or(v.kind == TokenizerKind::kUgm);
  // WordPiece puts "▁" before every word; decoding drops the first one like SPM's prefix
  v.add_space_prefix = wpm || r.boolean("tokenizer.ggml.add_space_prefix").value_or(spm);
  if (v.add_bos && v.special.bos == kNoToken) {
    r.fail("tokenizer.ggml.add_bos_token", "is true but there is no BOS token (bos_token_id)");
  }
  if (v.add_eos && v.special.eos == kNoToken) {
    r.fail("tokenizer.ggml.add_eos_token", "is true but there is no EOS token (eos_token_id)");
  }
}

// Unigram: the precompiled charsmap (absent or an empty array: no normalisation, as llama.cpp)
// and the white-space flags.
void read_ugm(const MetadataReader& r, Vocab& v) {
  v.ugm.remove_extra_whitespaces =
      r.boolean("tokenizer.ggml.remove_extra_whitespaces").value_or(false);
  const GgufArray* charsmap =
      r.array(kKeyCharsmap, {GgufType::kUint8, GgufType::kInt8}, std::nullopt);
  if (charsmap == nullptr || charsmap->values.empty()) return;
  std::string blob;
  blob.reserve(charsmap->values.size());
  for (const GgufValue& b : charsmap->values) {
    const auto* u = b.get_if<uint8_t>();
    blob += static_cast<char>(u != nullptr ? *u : static_cast<uint8_t>(*b.get_if<int8_t>()));
  }
  try {
    v.ugm.charsmap = Charsmap::parse(blob);
  } catch (const FormatError& e) {
    r.fail(kKeyCharsmap, e.what());
  }
}

// tokenizer.chat_template.<name> keys (llama.cpp's converter writes one per named template of
// tokenizer_config.json, listing the names in tokenizer.chat_templates).
void read_named_chat_templates(const std::map<std::string, GgufValue>& metadata,
                               const MetadataReader& r, Vocab& v) {
  const std::string prefix = "tokenizer.chat_template.";
  for (auto it = metadata.lower_bound(prefix);
       it != metadata.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    const std::optional<std::string> source = r.string(it->first);
    const std::string name = it->first.substr(prefix.size());
    if (name.empty()) r.fail(it->first, "needs a template name after the dot");
    v.named_chat_templates[name] = *source;
  }
}

}  // namespace

const char* tokenizer_kind_name(TokenizerKind kind) {
  switch (kind) {
    case TokenizerKind::kSpm:
      return "spm";
    case TokenizerKind::kWpm:
      return "wpm";
    case TokenizerKind::kUgm:
      return "ugm";
    case TokenizerKind::kBpe:
      break;
  }
  return "bpe";
}

Vocab load_vocab(const std::map<std::string, GgufValue>& metadata, const std::string& source) {
  const MetadataReader r(metadata, source);
  Vocab v;
  const std::optional<std::string> model = r.string(kKeyModel);
  if (!model) r.fail(kKeyModel, "is missing");
  if (*model == "llama") {
    v.kind = TokenizerKind::kSpm;
  } else if (*model == "gpt2") {
    v.kind = TokenizerKind::kBpe;
  } else if (*model == "bert") {
    v.kind = TokenizerKind::kWpm;
  } else if (*model == "gemma4") {
    v.kind = TokenizerKind::kBpe;
    v.utf8_symbols = true;
  } else if (*model == "t5") {
    v.kind = TokenizerKind::kUgm;
  } else {
    throw UnsupportedError(str_cat(
        kKeyModel, " = '", *model,
        "' is not supported; supported: 'llama' (SentencePiece BPE), 'gpt2' (byte-level BPE), "
        "'gemma4' (BPE over UTF-8 characters), 'bert' (WordPiece), 't5' (Unigram)"));
  }
  v.pre_name = r.string(kKeyPre).value_or(v.utf8_symbols ? "gemma4" : "default");
  if (v.kind == TokenizerKind::kBpe) v.pre = pre_tokenizer_from_name(v.pre_name);
  v.ignore_merges = v.kind == TokenizerKind::kBpe && v.pre == PreTokenizer::kLlama3;
  read_tokens(r, v);
  for (const TokenData& t : v.tokens) v.max_token_bytes = std::max(v.max_token_bytes, t.text.size());
  if (v.kind == TokenizerKind::kBpe) read_merges(r, v);
  if (v.kind == TokenizerKind::kUgm) read_ugm(r, v);
  read_special_ids(r, v);
  read_flags(r, v);
  v.chat_template = r.string("tokenizer.chat_template").value_or("");
  read_named_chat_templates(metadata, r, v);
  derive_special_tokens(v, r.string("general.name").value_or(""),
                        r.string("general.architecture").value_or(""));
  read_extra_eog(r, v);
  derive_pieces(v);
  if (v.kind == TokenizerKind::kUgm) derive_ugm(v);
  return v;
}

}  // namespace specdec::tokenizer
