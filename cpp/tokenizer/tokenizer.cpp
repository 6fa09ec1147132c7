#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "common/errors.h"
#include "model/hf_checkpoint.h"
#include "tokenizer/encoders.h"
#include "tokenizer/special_split.h"
#include "tokenizer/unicode.h"

namespace specdec::tokenizer {
namespace {

// SPM input: spaces become U+2581.
std::string escape_spaces(std::string_view text, bool space_prefix) {
  std::string out;
  out.reserve(text.size() + 8);
  if (space_prefix) out += "\u2581";
  for (char c : text) {
    if (c == ' ') {
      out += "\u2581";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

Tokenizer::Tokenizer(Vocab vocab)
    : vocab_(std::make_shared<const Vocab>(std::move(vocab))),
      splitter_(std::make_shared<const SpecialSplitter>(*vocab_)) {}

Tokenizer Tokenizer::from_metadata(const std::map<std::string, model::GgufValue>& metadata,
                                   const std::string& source) {
  return Tokenizer(load_vocab(metadata, source));
}

Tokenizer Tokenizer::from_gguf(const model::GgufFile& file) {
  return from_metadata(file.metadata(), file.source());
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  if (model::is_hf_checkpoint(path)) return from_gguf(model::hf_to_gguf(path, false));
  return from_gguf(model::GgufFile::open(path));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  return encode_fragments(text, add_special, parse_special, nullptr);
}

std::vector<int32_t> Tokenizer::encode_with_markup(
    std::string_view text, const std::vector<std::pair<size_t, size_t>>& markup,
    bool add_special) const {
  size_t last_end = 0;
  for (const auto& [begin, end] : markup) {
    if (begin < last_end || end <= begin || end > text.size()) {
      throw ConfigError("markup", str_cat("[", begin, ", ", end, ")"),
                        str_cat("ranges must be non-empty, sorted, disjoint and inside the text "
                                "(", text.size(), " bytes); the previous one ends at ", last_end));
    }
    last_end = end;
  }
  return encode_fragments(text, add_special, false, &markup);
}

std::vector<std::pair<size_t, size_t>> Tokenizer::control_text_spans(std::string_view text) const {
  return splitter_->control_spans(text);
}

std::vector<int32_t> Tokenizer::encode_fragments(
    std::string_view text, bool add_special, bool parse_special,
    const std::vector<std::pair<size_t, size_t>>* special_ranges, bool continuation) const {
  const Vocab& v = *vocab_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && v.add_bos) out.push_back(v.special.bos);
  bool after_special = !continuation;  // SPM: a text run at the start or after a special token
  for (const Fragment& f : splitter_->split(text, parse_special, special_ranges)) {
    if (f.token != kNoToken) {
      out.push_back(f.token);
      after_special = !continuation;
      continue;
    }
    const std::string_view run = text.substr(f.offset, f.length);
    if (v.kind == TokenizerKind::kSpm) {
      spm_encode(v, escape_spaces(run, v.add_space_prefix && after_special), out);
    } else if (v.kind == TokenizerKind::kWpm) {
      wpm_encode(v, run, out);
    } else if (v.kind == TokenizerKind::kUgm) {
      ugm_encode(v, run, out);
    } else {
      if (v.utf8_symbols) {
        bpe_encode(v, escape_spaces(run, false), out);
      } else {
        bpe_encode(v, run, out);
      }
    }
    after_special = false;
  }
  if (add_special && v.add_eos) out.push_back(v.special.eos);
  if (add_special && v.add_sep && v.special.sep != kNoToken) out.push_back(v.special.sep);
  return out;
}

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= vocab_->size()) {
    throw ConfigError("token id", std::to_string(id),
                      str_cat("must be in [0, ", vocab_->size(), ") for this vocabulary"));
  }
}

void Tokenizer::append_piece(int32_t id, bool special, bool& strip_space, std::string& out) const {
  check_id(id);
  const Vocab& v = *vocab_;
  const uint32_t attr = v.tokens[id].attr;
  if (attr & (kAttrControl | kAttrUnknown | kAttrUserDefined)) {
    if (special || (attr & (kAttrControl | kAttrUnknown)) == 0) out += v.pieces[id];
    // A text run (with its space prefix) starts after a special token. A Unigram unknown token
    // stands for characters inside the text: it ends the run's start like a normal piece.
    const bool in_text =
        v.kind == TokenizerKind::kUgm && !(attr & (kAttrControl | kAttrUserDefined));
    strip_space = v.add_space_prefix && !in_text;
    return;
  }
  const std::string& piece = v.pieces[id];
  const bool strip = strip_space && !piece.empty() && piece[0] == ' ';
  out.append(piece, strip ? 1 : 0);
  strip_space = false;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool special,
                              bool continuation) const {
  std::string out;
  bool strip_space = vocab_->add_space_prefix && !continuation;
  for (int32_t id : ids) append_piece(id, special, strip_space, out);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool special) const {
  check_id(id);
  const uint32_t attr = vocab_->tokens[id].attr;
  if (!special && (attr & (kAttrControl | kAttrUnknown))) return "";
  return vocab_->pieces[id];
}

bool Tokenizer::is_eog(int32_t id) const {
  return std::binary_search(vocab_->eog_ids.begin(), vocab_->eog_ids.end(), id);
}

const std::string& Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return vocab_->tokens[id].text;
}

TokenType Tokenizer::token_type(int32_t id) const {
  check_id(id);
  return vocab_->tokens[id].type;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool special, bool continuation)
    : tokenizer_(&tokenizer),
      special_(special),
      continuation_(continuation),
      strip_space_(tokenizer.add_space_prefix() && !continuation) {}

std::string StreamDecoder::push(int32_t id) {
  tokenizer_->append_piece(id, special_, strip_space_, pending_);
  const size_t complete = complete_utf8_prefix(pending_);
  std::string out = pending_.substr(0, complete);
  pending_.erase(0, complete);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

void StreamDecoder::reset() {
  pending_.clear();
  strip_space_ = tokenizer_->add_space_prefix() && !continuation_;
}

}  // namespace specdec::tokenizer
