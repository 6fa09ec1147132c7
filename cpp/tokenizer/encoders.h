// The two merge algorithms, applied to one fragment of text (special tokens already split out).
//
// SPM (`llama` vocabularies): the fragment is cut into UTF-8 characters; adjacent symbols whose
// concatenation is a token are merged, highest score first (ties: leftmost); a final symbol that is
// not a token becomes byte-fallback tokens. Byte-level BPE (`gpt2` vocabularies): the fragment is
// pre-tokenized into words; in each word every byte starts as its GPT-2 character token and
// adjacent symbols are merged by lowest merge rank first (ties: leftmost).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace specdec::tokenizer {

// `text` must already have its spaces escaped to U+2581 (and the space prefix added).
void spm_encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out);
void bpe_encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out);
// WordPiece (`bert` vocabularies, wpm.cpp): normalise, split into words, longest tokens first.
void wpm_encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out);
// Unigram (`t5` vocabularies, ugm.cpp): normalise (charsmap, white space), then the segmentation
// with the best total score (Viterbi).
void ugm_encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out);

}  // namespace specdec::tokenizer
