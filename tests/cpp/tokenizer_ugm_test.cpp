// Unigram (UGM, `tokenizer.ggml.model = t5`) on hand-built inputs: the precompiled charsmap parser
// (a small valid double array; malformed blobs are FormatErrors, through load_vocab naming the
// key), the normaliser's white-space rules, and the Viterbi search on a tiny vocabulary (best total
// score, ties, unknown characters, user-defined tokens). llama.cpp's ids for a real vocabulary are
// checked in tests/python/test_vocab_sdist.py.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "gguf_test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/ugm.h"

using namespace specdec;
using namespace specdec::tokenizer;
using specdec::model::GgufArray;
using specdec::model::GgufType;
using specdec::model::GgufValue;
using specdec::model::testing::numbers;
using specdec::model::testing::strings;

namespace {

using Meta = std::map<std::string, GgufValue>;

// A double array in the XCDA layout, built naively: every trie node owns a 256-node block (its
// state is the block's first index), the child for byte c of state s is node s ^ c, whose BASE
// leads to the child's state, and a node with a replacement has its LEAF bit set and a value node
// at its child's state. Block 0 holds the root pointer (node 0).
struct XcdaBuilder {
  std::vector<uint32_t> nodes = std::vector<uint32_t>(512, 0);  // block 0 and the root's block 1
  std::string strings;

  void add(const std::string& key, const std::string& replacement) {
    uint32_t state = 256;
    uint32_t index = 0;
    for (char ch : key) {
      const uint32_t c = uint8_t(ch);
      index = state ^ c;
      if ((nodes[index] & 0xFF) != c) {  // a new child: it gets its own block
        const uint32_t child = static_cast<uint32_t>(nodes.size());
        nodes.resize(nodes.size() + 256, 0);
        nodes[index] = ((index ^ child) << 10) | c;
      }
      state = index ^ (nodes[index] >> 10);
    }
    nodes[index] |= 1u << 8;                                            // LEAF
    nodes[state] = (1u << 31) | static_cast<uint32_t>(strings.size());  // its value node
    strings += replacement;
    strings += '\0';
  }
  std::string blob() const {
    std::vector<uint32_t> all = nodes;
    all[0] = 256u << 10;  // the root's BASE: state 256
    std::string out;
    auto put = [&](uint32_t v) {
      for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
    };
    put(static_cast<uint32_t>(all.size() * 4));
    for (uint32_t v : all) put(v);
    return out + strings;
  }
};

std::string sample_blob() {
  XcdaBuilder b;
  b.add("A", "a");
  b.add("AB", "x");
  b.add("\xEF\xBC\xA1", "a");  // U+FF21 FULLWIDTH LATIN CAPITAL LETTER A
  b.add("\t", " ");
  b.add("-", "");  // dropped
  return b.blob();
}

std::pair<size_t, std::string> match(const Charsmap& map, std::string_view text) {
  std::string_view replacement;
  const size_t n = map.longest_match(text, replacement);
  return {n, n > 0 ? std::string(replacement) : std::string("-")};
}

void set_u32(std::string& blob, size_t offset, uint32_t v) {
  for (int i = 0; i < 4; ++i) blob[offset + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}

GgufValue bytes(const std::string& blob) {
  GgufArray a;
  a.type = GgufType::kUint8;
  for (char c : blob) a.values.emplace_back(static_cast<uint8_t>(c));
  return GgufValue(a);
}

// T5 ids: <pad> 0, </s> 1, <unk> 2; then pieces with scores; <u> is user-defined.
Meta tiny_ugm(float score_ab = -1.5f) {
  const std::vector<std::pair<std::string, float>> pieces = {
      {"\u2581", -3.0f},  {"a", -3.0f},  {"b", -3.0f},           {"c", -1.0f},
      {"\u2581a", -1.0f}, {"bc", -1.0f}, {"\u2581ab", score_ab}, {"ab", -2.0f},
      {"x", -2.0f},       {"A", -5.0f},  {"-", -5.0f},           {"[u]", -20.0f}};
  std::vector<std::string> tokens = {"<pad>", "</s>", "<unk>"};
  std::vector<int32_t> types = {3, 3, 2};
  std::vector<float> scores = {0, 0, 0};
  for (const auto& [text, score] : pieces) {
    tokens.push_back(text);
    types.push_back(1);
    scores.push_back(score);
  }
  tokens.push_back("x-!");  // user-defined
  types.push_back(4);
  scores.push_back(-100.0f);
  types[tokens.size() - 2] = 5;  // "[u]": unused, still searchable
  Meta m;
  m["general.architecture"] = GgufValue(std::string("t5encoder"));
  m["tokenizer.ggml.model"] = GgufValue(std::string("t5"));
  m["tokenizer.ggml.tokens"] = strings(tokens);
  m["tokenizer.ggml.scores"] = numbers(GgufType::kFloat32, scores);
  m["tokenizer.ggml.token_type"] = numbers(GgufType::kInt32, types);
  m["tokenizer.ggml.add_space_prefix"] = GgufValue(true);
  m["tokenizer.ggml.remove_extra_whitespaces"] = GgufValue(true);
  m["tokenizer.ggml.precompiled_charsmap"] = bytes(sample_blob());
  return m;
}

int32_t id(const Tokenizer& t, const std::string& text) { return t.token_id(text); }

}  // namespace

TEST(Charsmap, LongestMatchAndItsReplacement) {
  const Charsmap map = Charsmap::parse(sample_blob());
  EXPECT_EQ(match(map, "A"), std::make_pair(size_t{1}, std::string("a")));
  EXPECT_EQ(match(map, "ABC"), std::make_pair(size_t{2}, std::string("x")));  // longest
  EXPECT_EQ(match(map, "AC"), std::make_pair(size_t{1}, std::string("a")));
  EXPECT_EQ(match(map, "\xEF\xBC\xA1!"), std::make_pair(size_t{3}, std::string("a")));
  EXPECT_EQ(match(map, "\xEF\xBC"), std::make_pair(size_t{0}, std::string("-")));  // no leaf yet
  EXPECT_EQ(match(map, "-"), std::make_pair(size_t{1}, std::string("")));
  EXPECT_EQ(match(map, "B"), std::make_pair(size_t{0}, std::string("-")));
  EXPECT_EQ(match(map, std::string("\0A", 2)), std::make_pair(size_t{0}, std::string("-")));
  EXPECT_EQ(match(map, ""), std::make_pair(size_t{0}, std::string("-")));
  // every byte after every prefix stays inside the array
  for (int c = 0; c < 256; ++c) {
    for (const std::string prefix : {"", "A", "\xEF", "\xEF\xBC", "\xEF\xBC\xA1"}) {
      match(map, prefix + std::string(1, static_cast<char>(c)) + "A");
    }
  }
  // an array of 0 bytes followed by strings: no normalisation
  EXPECT_TRUE(Charsmap::parse(std::string("\0\0\0\0x\0", 6)).empty());
}

TEST(Charsmap, MalformedBlobsAreFormatErrors) {
  const std::string good = sample_blob();
  const uint32_t array_bytes = uint32_t(uint8_t(good[0])) | uint32_t(uint8_t(good[1])) << 8;
  struct Case {
    const char* name;
    std::string blob;
    const char* expect;  // in the message
  };
  std::vector<Case> cases;
  cases.push_back(Case{"empty (the loader passes none: an empty array is no normalisation)", "",
                       "4-byte size"});
  cases.push_back(Case{"truncated size", "\x10\x00", "4-byte size"});
  std::string b = good;
  set_u32(b, 0, 1u << 30);
  cases.push_back(Case{"size beyond the blob", b, "only 9225 follow"});
  cases.push_back(Case{"no replacement strings", good.substr(0, 4 + array_bytes),
                       "replacement strings must follow"});
  b = good;
  set_u32(b, 0, array_bytes - 2);
  cases.push_back(Case{"size not a multiple of 4", b, "whole number"});
  b = good;
  set_u32(b, 4, 100000u << 10);  // the root's BASE far outside the array
  cases.push_back(Case{"root out of range", b, "BASE of node 0 leads to state 100000"});
  b = good;
  set_u32(b, 0, array_bytes - 1024);  // the last block falls outside the array
  cases.push_back(Case{"array one block short", b, "nodes up to 2303"});
  b = good;
  const size_t child_a = 4 + 4 * (256 ^ 'A');
  set_u32(b, child_a, (0x7FFFu << 10) | (1u << 8) | 'A');  // child 'A' leads far outside
  cases.push_back(Case{"child out of range", b, "BASE of node 321"});
  b = good;
  // the value node of "A" (first added: state 512) points past the strings
  set_u32(b, 4 + 4 * 512, (1u << 31) | 5000u);
  cases.push_back(Case{"replacement offset out of range", b, "offset 5000"});
  b = good;
  b.back() = 'z';  // the last string ("" of "-") loses its NUL
  cases.push_back(Case{"unterminated replacement", b, "NUL-terminated"});
  for (const auto& [name, blob, expect] : cases) {
    try {
      Charsmap::parse(blob);
      ADD_FAILURE() << name << " accepted";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << name << ": " << e.what();
    }
  }
  // Through the vocabulary loader the message names the key and the file.
  for (const auto& [name, blob, expect] : cases) {
    if (blob.empty()) continue;  // below
    Meta m = tiny_ugm();
    m["tokenizer.ggml.precompiled_charsmap"] = bytes(blob);
    try {
      Tokenizer::from_metadata(m, "tiny.gguf");
      ADD_FAILURE() << name << " accepted";
    } catch (const FormatError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("tokenizer.ggml.precompiled_charsmap"), std::string::npos) << what;
      EXPECT_NE(what.find("tiny.gguf"), std::string::npos) << what;
      EXPECT_NE(what.find(expect), std::string::npos) << what;
    }
  }
  Meta m = tiny_ugm();
  m["tokenizer.ggml.precompiled_charsmap"] = strings({"x"});  // wrong element type
  EXPECT_THROW(Tokenizer::from_metadata(m), FormatError);
  // an empty array (converters write one for identity normalisers) is no normalisation, as in
  // llama.cpp: the vocabulary loads
  m["tokenizer.ggml.precompiled_charsmap"] = bytes("");
  EXPECT_NO_THROW(Tokenizer::from_metadata(m, "tiny.gguf"));
}

// Random bit flips in the nodes (mostly in the ones in use): each blob is refused or gives a map
// whose lookups stay inside it (the sanitizer build checks the reads).
TEST(Charsmap, CorruptedArraysAreRefusedOrSafeToWalk) {
  const std::string good = sample_blob();
  std::vector<size_t> used;  // byte offsets of non-zero nodes
  for (size_t i = 4; i + 4 <= good.size(); i += 4) {
    if (good.compare(i, 4, std::string(4, '\0')) != 0) used.push_back(i);
  }
  const std::string alphabet = "AB\xEF\xBC\xA1\t-x";
  std::mt19937 rng(7);
  int refused = 0, accepted = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string b = good;
    for (int flips = 1 + rng() % 3; flips > 0; --flips) {
      const size_t node =
          rng() % 2 ? used[rng() % used.size()] : 4 + 4 * (rng() % (b.size() / 4 - 1));
      b[std::min(node + rng() % 4, b.size() - 1)] ^= static_cast<char>(1u << (rng() % 8));
    }
    try {
      const Charsmap map = Charsmap::parse(b);
      ++accepted;
      for (int i = 0; i < 50; ++i) {
        std::string text;
        for (int j = 0; j < 4; ++j) {
          text += rng() % 4 ? alphabet[rng() % alphabet.size()] : static_cast<char>(rng() % 256);
        }
        match(map, text);
      }
    } catch (const FormatError&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 100);
  EXPECT_GT(accepted, 100);
}

TEST(TinyUgm, ViterbiPicksTheBestTotalScore) {
  const Tokenizer t = Tokenizer::from_metadata(tiny_ugm());
  EXPECT_EQ(t.kind(), TokenizerKind::kUgm);
  EXPECT_STREQ(tokenizer_kind_name(t.kind()), "ugm");
  // "▁abc": ▁a + bc = -2 beats ▁ab + c = -2.5 and ▁ + a + bc = -7
  EXPECT_EQ(t.encode("abc", false), (std::vector<int32_t>{id(t, "\u2581a"), id(t, "bc")}));
  const Tokenizer t2 = Tokenizer::from_metadata(tiny_ugm(-0.5f));  // now ▁ab + c = -1.5
  EXPECT_EQ(t2.encode("abc", false), (std::vector<int32_t>{id(t2, "\u2581ab"), id(t2, "c")}));
  // a tie (▁ab + c = -2 = ▁a + bc): the token ending at the same place that starts first wins
  const Tokenizer t3 = Tokenizer::from_metadata(tiny_ugm(-1.0f));
  EXPECT_EQ(t3.encode("abc", false), (std::vector<int32_t>{id(t3, "\u2581a"), id(t3, "bc")}));
  // add_special: EOS (T5's default: add_eos), no BOS
  EXPECT_EQ(t.encode("c", true), (std::vector<int32_t>{id(t, "\u2581"), id(t, "c"), 1}));
  EXPECT_EQ(t.decode(t.encode("abc c", false)), "abc c");
}

TEST(TinyUgm, UnknownCharactersAndWhiteSpace) {
  const Tokenizer t = Tokenizer::from_metadata(tiny_ugm());
  const int32_t unk = 2;
  // é and ü are not tokens: one unknown token for the run (min score - 10 each)
  EXPECT_EQ(t.encode("a\u00e9\u00fc", false), (std::vector<int32_t>{id(t, "\u2581a"), unk}));
  EXPECT_EQ(t.encode("\u00e9 a", false),
            (std::vector<int32_t>{id(t, "\u2581"), unk, id(t, "\u2581a")}));
  // invalid UTF-8 becomes U+FFFD (unknown); extra white space goes, tabs via the charsmap
  EXPECT_EQ(t.encode("\xff", false), (std::vector<int32_t>{id(t, "\u2581"), unk}));
  EXPECT_EQ(t.encode("  a \t\t c  ", false),
            (std::vector<int32_t>{id(t, "\u2581a"), id(t, "\u2581"), id(t, "c")}));
  EXPECT_TRUE(t.encode(" \t ", false).empty());
  // the charsmap: A -> a, AB -> x, fullwidth A -> a, '-' dropped
  EXPECT_EQ(t.encode("AB", false), (std::vector<int32_t>{id(t, "\u2581"), id(t, "x")}));
  EXPECT_EQ(t.encode("\xEF\xBC\xA1-bc", false),
            (std::vector<int32_t>{id(t, "\u2581a"), id(t, "bc")}));
  // decode: the first space goes; an unknown token is text, not a special token
  EXPECT_EQ(t.decode({unk, id(t, "\u2581a")}), " a");
  EXPECT_EQ(t.decode({id(t, "\u2581a"), unk, id(t, "\u2581a")}, true), "a<unk> a");
  // without remove_extra_whitespaces each space stays (escaped); the prefix comes once
  Meta m = tiny_ugm();
  m["tokenizer.ggml.remove_extra_whitespaces"] = GgufValue(false);
  const Tokenizer keep = Tokenizer::from_metadata(m);
  EXPECT_EQ(keep.encode("a  c", false),
            (std::vector<int32_t>{id(t, "\u2581a"), id(t, "\u2581"), id(t, "\u2581"), id(t, "c")}));
}

TEST(TinyUgm, UserDefinedTokens) {
  const Tokenizer t = Tokenizer::from_metadata(tiny_ugm());
  const int32_t user = id(t, "x-!");
  // split out of any text (no parse_special needed)
  EXPECT_EQ(t.encode("cx-!c", false),
            (std::vector<int32_t>{id(t, "\u2581"), id(t, "c"), user, id(t, "\u2581"), id(t, "c")}));
  // input that a user-defined token begins is not normalised (llama.cpp matches any prefix of
  // one): "x-" keeps its "-", which the charsmap drops elsewhere
  EXPECT_EQ(t.encode("x-", false), (std::vector<int32_t>{id(t, "\u2581"), id(t, "x"), id(t, "-")}));
  EXPECT_EQ(t.encode("c-", false), (std::vector<int32_t>{id(t, "\u2581"), id(t, "c")}));
  // unused tokens stay searchable (llama.cpp's trie holds them)
  EXPECT_EQ(t.encode("[u]", false), (std::vector<int32_t>{id(t, "\u2581"), id(t, "[u]")}));
  EXPECT_EQ(t.decode({user}), "x-!");
}
