// Tokenizers read from GGUF metadata: SentencePiece-style BPE (`llama`: Llama, Gemma, Phi-3),
// byte-level BPE (`gpt2`: SmolLM2, Qwen2.5, GPT-2, StarCoder, DeepSeek-Coder), WordPiece (`bert`)
// and Unigram (`t5`), tokenizing exactly as llama.cpp does. See docs/tokenizer.md.
//
// A Tokenizer is immutable after loading and safe to use from several threads; copies share the
// vocabulary.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/gguf.h"
#include "tokenizer/vocab.h"

namespace specdec::tokenizer {

class SpecialSplitter;

class Tokenizer {
 public:
  // Throws FormatError for malformed tokenizer metadata and UnsupportedError for tokenizer
  // models or pre-tokenizers specdec does not read (naming the supported ones).
  static Tokenizer from_gguf(const model::GgufFile& file);
  static Tokenizer from_file(const std::string& path);
  static Tokenizer from_metadata(const std::map<std::string, model::GgufValue>& metadata,
                                 const std::string& source = "");

  // Token ids of `text`. add_special: BOS/EOS as the file says (add_bos_token, add_eos_token).
  // parse_special: control tokens written in the text (e.g. "<|im_start|>") become their ids;
  // user-defined tokens are always recognised. Invalid UTF-8 never fails: SPM keeps the bytes
  // (byte fallback), BPE reads each invalid byte as U+FFFD.
  std::vector<int32_t> encode(std::string_view text, bool add_special = true,
                              bool parse_special = false) const;
  // Token ids of `text` continuing earlier text: no BOS / EOS, control-token text stays text, and
  // no SPM space prefix at its start (what a grammar library needs to tokenize forced bytes).
  std::vector<int32_t> encode_continuation(std::string_view text) const {
    return encode_fragments(text, false, false, nullptr, true);
  }
  // The bytes of `ids` concatenated. Control and unknown tokens are rendered only when `special`;
  // with add_space_prefix (SPM) the space that encode puts at the start of each text run (the text
  // start and after each special token) is removed. Throws ConfigError for an id out of range.
  // continuation: the ids continue a text (generated tokens after a prompt), so the space prefix
  // of the first piece is kept.
  std::string decode(const std::vector<int32_t>& ids, bool special = false,
                     bool continuation = false) const;
  // The bytes of one token (may be part of a UTF-8 character); control/unknown tokens give their
  // text when `special`, else "".
  std::string token_to_piece(int32_t id, bool special = true) const;
  // Appends the piece of `id` as decode does; `strip_space` carries the space-prefix state.
  void append_piece(int32_t id, bool special, bool& strip_space, std::string& out) const;

  int32_t vocab_size() const { return vocab_->size(); }
  TokenizerKind kind() const { return vocab_->kind; }
  const std::string& pre_name() const { return vocab_->pre_name; }
  int32_t bos_id() const { return vocab_->special.bos; }
  int32_t eos_id() const { return vocab_->special.eos; }
  const SpecialTokens& special_tokens() const { return vocab_->special; }
  bool add_bos() const { return vocab_->add_bos; }
  bool add_eos() const { return vocab_->add_eos; }
  bool add_space_prefix() const { return vocab_->add_space_prefix; }
  // End-of-generation tokens (EOS, EOT, EOM, <|im_end|>, <end_of_turn>, ... as llama.cpp), sorted.
  const std::vector<int32_t>& eog_ids() const { return vocab_->eog_ids; }
  bool is_eog(int32_t id) const;
  // The stored text of a token; throws ConfigError when out of range.
  const std::string& token_text(int32_t id) const;
  TokenType token_type(int32_t id) const;
  // The id whose text is exactly `text`, or kNoToken.
  int32_t token_id(std::string_view text) const { return vocab_->find(text); }
  size_t num_merges() const { return vocab_->merges.size(); }

  // tokenizer.chat_template, and the named ones (tokenizer.chat_template.<name>, e.g. tool_use).
  const std::string& chat_template() const { return vocab_->chat_template; }
  const std::map<std::string, std::string>& named_chat_templates() const {
    return vocab_->named_chat_templates;
  }
  // Token ids of a rendered chat: control (and unknown) tokens are parsed only where they lie
  // wholly inside one of the `markup` byte ranges [begin, end) (sorted, disjoint): the text the
  // chat template wrote itself. Elsewhere (the messages' text) they stay plain text, so a user
  // writing "<|im_end|><|im_start|>system" gets that text, not a new system turn. User-defined
  // tokens are split out everywhere, as by encode().
  std::vector<int32_t> encode_with_markup(std::string_view text,
                                          const std::vector<std::pair<size_t, size_t>>& markup,
                                          bool add_special = true) const;
  // Byte ranges [begin, end) of control- and unknown-token texts in `text` (left to right, the
  // longest at each position, not overlapping): what a chat template must not let message text
  // turn into tokens.
  std::vector<std::pair<size_t, size_t>> control_text_spans(std::string_view text) const;

  const Vocab& vocab() const { return *vocab_; }

 private:
  explicit Tokenizer(Vocab vocab);
  void check_id(int32_t id) const;
  std::vector<int32_t> encode_fragments(
      std::string_view text, bool add_special, bool parse_special,
      const std::vector<std::pair<size_t, size_t>>* special_ranges, bool continuation = false) const;

  std::shared_ptr<const Vocab> vocab_;
  std::shared_ptr<const SpecialSplitter> splitter_;
};

// Detokenizes one token at a time: push() returns the text completed so far, holding back the
// bytes of a UTF-8 character that is not finished yet; flush() returns what is left. The
// concatenation of everything returned equals Tokenizer::decode of all ids pushed. The tokenizer
// must outlive the decoder.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool special = false,
                         bool continuation = false);
  std::string push(int32_t id);
  std::string flush();
  // Forgets pending bytes and starts a new text (as after construction).
  void reset();

 private:
  const Tokenizer* tokenizer_;
  bool special_;
  bool continuation_;
  bool strip_space_;
  std::string pending_;
};

}  // namespace specdec::tokenizer
