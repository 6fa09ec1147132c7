// A tokenizer vocabulary read from GGUF metadata (`tokenizer.ggml.*`), validated, with the derived
// tables the tokenizers need: text -> id, BPE merge ranks, byte tokens, special tokens and the
// end-of-generation set. Keys and defaults follow llama.cpp (shared/reference/llamacpp.md §1.4).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/gguf.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/ugm.h"

namespace specdec::tokenizer {

enum class TokenizerKind {
  kSpm,  // `tokenizer.ggml.model = llama`: SentencePiece-style BPE by score, byte fallback
  kBpe,  // `tokenizer.ggml.model = gpt2` (byte-level) or `gemma4` (UTF-8): ranked merges
  kWpm,  // `tokenizer.ggml.model = bert`: WordPiece, longest tokens first
  kUgm,  // `tokenizer.ggml.model = t5`: Unigram, precompiled normaliser and Viterbi by score
};
// "spm", "bpe", "wpm" or "ugm".
const char* tokenizer_kind_name(TokenizerKind kind);

// `tokenizer.ggml.token_type` values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Attribute bits of a token (llama.cpp's llama_token_attr): the type, plus what loading derives.
enum TokenAttr : uint32_t {
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrLstrip = 1u << 7,  // parse_special: white space before the token is dropped
  kAttrRstrip = 1u << 8,  // parse_special: white space after the token is dropped
};

inline constexpr int32_t kNoToken = -1;

struct TokenData {
  std::string text;
  float score = 0.0f;
  TokenType type = TokenType::kNormal;
  uint32_t attr = kAttrNormal;
};

// Special token ids; kNoToken when the vocabulary has none.
struct SpecialTokens {
  int32_t bos = kNoToken, eos = kNoToken, eot = kNoToken, eom = kNoToken, unk = kNoToken;
  int32_t sep = kNoToken, pad = kNoToken, mask = kNoToken;
  int32_t fim_pre = kNoToken, fim_suf = kNoToken, fim_mid = kNoToken;
  int32_t fim_pad = kNoToken, fim_rep = kNoToken, fim_sep = kNoToken;
};

struct BpeMerge {
  int32_t rank = 0;    // index in tokenizer.ggml.merges; lower merges first
  int32_t result = 0;  // symbol of the merged text (see Vocab::extra_symbols)
};

struct Vocab {
  Vocab() = default;
  Vocab(Vocab&&) noexcept = default;
  Vocab& operator=(Vocab&&) noexcept = default;
  Vocab(const Vocab&) = delete;  // token_ids views into tokens[].text
  Vocab& operator=(const Vocab&) = delete;

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  // The id of the token whose text is `text`, or kNoToken.
  int32_t find(std::string_view text) const {
    const auto it = token_ids.find(text);
    return it == token_ids.end() ? kNoToken : it->second;
  }

  TokenizerKind kind = TokenizerKind::kSpm;
  std::string pre_name;  // tokenizer.ggml.pre as written ("default" when absent)
  PreTokenizer pre = PreTokenizer::kDefault;
  // BPE: a pre-token that is itself a token is taken whole, without merges (llama.cpp's
  // ignore_merges, set for the Llama 3 pre-tokenizer)
  bool ignore_merges = false;
  // BPE: merges start from UTF-8 characters with spaces escaped to U+2581 and <0xXX> byte
  // fallback (Gemma 4's `gemma4` model), instead of GPT-2's byte characters
  bool utf8_symbols = false;
  // WordPiece: the normaliser (tokenizer.ggml.normalizer.lowercase / .strip_accents, both true
  // unless the file says otherwise) and the longest token text in bytes
  bool wpm_lowercase = true;
  bool wpm_strip_accents = true;
  size_t max_token_bytes = 0;
  // Unigram: the charsmap, the token tries, the normaliser flags
  UgmModel ugm;
  std::vector<TokenData> tokens;
  std::unordered_map<std::string_view, int32_t> token_ids;

  // BPE: merge of symbols (left << 32 | right). A symbol below size() is a token; symbol
  // size() + i is extra_symbols[i], a merge result that is not itself a token.
  std::unordered_map<uint64_t, BpeMerge> merges;
  std::vector<std::string> extra_symbols;
  // BPE: the token of each byte's GPT-2 character; SPM: the byte-fallback token (<0xXX>, else the
  // one-byte text). kNoToken when the vocabulary has none.
  std::array<int32_t, 256> byte_tokens{};

  SpecialTokens special;
  bool add_bos = false;
  bool add_eos = false;
  bool add_sep = false;  // WordPiece: SEP ends an encoding with special tokens
  bool add_space_prefix = false;
  // Control, user-defined and unknown tokens, longest text first (ties: lower id first).
  std::vector<int32_t> special_token_order;
  std::vector<int32_t> eog_ids;  // sorted
  // Detokenized bytes of each token (its text for control, unknown and user-defined tokens).
  std::vector<std::string> pieces;
  std::string chat_template;  // tokenizer.chat_template, empty when absent
  // tokenizer.chat_template.<name> (e.g. "tool_use", "rag"), by name
  std::map<std::string, std::string> named_chat_templates;
};

// Reads and validates the vocabulary in `metadata` (GGUF key/values). `source` names the file in
// messages. Throws FormatError for malformed metadata (naming the key and the value) and
// UnsupportedError for a tokenizer model or pre-tokenizer that is not implemented.
Vocab load_vocab(const std::map<std::string, model::GgufValue>& metadata,
                 const std::string& source);

// Derived tables (vocab_special.cpp): special ids detected from token text, the EOG set, the
// special-token order and model-specific strip attributes (by general.name, general.architecture
// and tokenizer.ggml.pre, as llama.cpp). Called by load_vocab.
void derive_special_tokens(Vocab& vocab, const std::string& model_name,
                           const std::string& architecture);
// Fills vocab.pieces and vocab.byte_tokens.
void derive_pieces(Vocab& vocab);
// Unigram (ugm.cpp): the token tries and the unknown-token score of vocab.ugm, from the tokens'
// final attributes.
void derive_ugm(Vocab& vocab);

}  // namespace specdec::tokenizer
