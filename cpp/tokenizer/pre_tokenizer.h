// Pre-tokenizers of byte-level BPE vocabularies (`tokenizer.ggml.pre`): the regex splits that cut
// text into words before BPE merges run inside each word.
//
// Each pre-tokenizer is a sequence of regexes applied one after another, each one splitting the
// pieces made by the previous one; both matches and the gaps between matches become pieces (as in
// llama.cpp's unicode_regex_split). The regexes are hand-written matchers over code points with the
// same leftmost-first backtracking semantics as the original patterns (no std::regex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace specdec::tokenizer {

enum class PreTokenizer {
  kDefault,    // llama.cpp's fallback: punctuation runs, GPT-2, \p{N}+, [0-9]{3}
  kGpt2,       // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
  kStarcoder,  // \p{N} (each digit alone), then GPT-2  (also `smollm`)
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*
  // |\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,
  kDeepseekCoder,  // [\r\n], \s?\p{L}+, \s?\p{P}+, [CJK]+, \p{N}
  // Llama 3: as kQwen2 but \p{N}{1,3} (digits in groups of up to three); BPE with ignore_merges
  kLlama3,
  // Qwen3.5: as kQwen2 with marks joining letters ([\p{L}\p{M}]+, [^\s\p{L}\p{M}\p{N}])
  kQwen35,
  kFalcon,  // [\p{P}\$\+<=>\^~\|`]+, then GPT-2, then [0-9][0-9][0-9]
  // [\r\n], \s?[cased letters]+, \s?[ASCII and full-width symbols]+, \s+$, [CJK]+, \p{N}+
  kDeepseekLlm,
  kNewlines,  // [^\n]+|[\n]+ (Gemma 4: BPE runs over whole lines)
};

// The pre-tokenizer named by `tokenizer.ggml.pre`; throws UnsupportedError naming the value and
// the supported names.
PreTokenizer pre_tokenizer_from_name(const std::string& name);
// Every accepted `tokenizer.ggml.pre` value, comma separated (for messages and docs).
std::string supported_pre_tokenizer_names();

// Splits `cps` into pieces; returns the length of each piece in code points (they sum to
// cps.size(), none is zero).
std::vector<size_t> pre_tokenize(PreTokenizer pre, const std::vector<uint32_t>& cps);

}  // namespace specdec::tokenizer
