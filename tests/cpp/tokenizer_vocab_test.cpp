// Tokenizer metadata and algorithms on small hand-built vocabularies: BPE merge order (rank, then
// leftmost), merges whose result is not a token, SPM score order and byte fallback, special-token
// splitting, BOS/EOS rules, the EOG set; malformed metadata gives FormatError naming the key;
// chat templates render exactly; pre-tokenizer pieces (expectations from Python's `re` with
// Unicode classes built from unicodedata).
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "common/errors.h"
#include "tokenizer/pre_tokenizer.h"
#include "gguf_test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "test_data.h"

using namespace specdec;
using namespace specdec::tokenizer;
using specdec::model::GgufArray;
using specdec::model::GgufType;
using specdec::model::GgufValue;
using specdec::model::testing::numbers;
using specdec::model::testing::strings;

namespace {

using Meta = std::map<std::string, GgufValue>;

// Byte-level BPE: 'Ġ' is the space. Merges in rank order.
Meta tiny_bpe() {
  const std::vector<std::string> tokens = {"a",
                                           "b",
                                           "c",
                                           "d",
                                           "\xC4\xA0",
                                           "ab",
                                           "bc",
                                           "abc",
                                           "aa",
                                           "\xC4\xA0"
                                           "a",
                                           "<|im_end|>",
                                           "<|endoftext|>",
                                           "<tool>"};
  std::vector<int32_t> types(tokens.size(), 1);
  types[10] = types[11] = 3;  // control
  types[12] = 4;              // user-defined
  Meta m;
  m["tokenizer.ggml.model"] = GgufValue(std::string("gpt2"));
  m["tokenizer.ggml.pre"] = GgufValue(std::string("gpt-2"));
  m["tokenizer.ggml.tokens"] = strings(tokens);
  m["tokenizer.ggml.token_type"] = numbers(GgufType::kInt32, types);
  m["tokenizer.ggml.merges"] =
      strings({"b c", "a b", "a bc", "a a", "\xC4\xA0 a", "c d"});  // "cd" is not a token
  m["tokenizer.ggml.eos_token_id"] = GgufValue(uint32_t{11});
  return m;
}

// SPM: <unk>, <s>, </s>, 256 byte tokens, then pieces with scores.
Meta tiny_spm(float score_ab = -1.0f, float score_bc = -0.5f) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  std::vector<float> scores = {0, 0, 0};
  const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
    types.push_back(6);
    scores.push_back(0);
  }
  const std::vector<std::pair<std::string, float>> pieces = {{"\xE2\x96\x81", -2},
                                                             {"a", -3},
                                                             {"b", -3},
                                                             {"c", -3},
                                                             {"ab", score_ab},
                                                             {"bc", score_bc},
                                                             {"\xE2\x96\x81"
                                                              "a",
                                                              -1.5},
                                                             {"<tool>", 0}};
  for (const auto& [text, score] : pieces) {
    tokens.push_back(text);
    types.push_back(text == "<tool>" ? 4 : 1);
    scores.push_back(score);
  }
  Meta m;
  m["tokenizer.ggml.model"] = GgufValue(std::string("llama"));
  m["tokenizer.ggml.tokens"] = strings(tokens);
  m["tokenizer.ggml.token_type"] = numbers(GgufType::kInt32, types);
  m["tokenizer.ggml.scores"] = numbers(GgufType::kFloat32, scores);
  m["tokenizer.ggml.add_space_prefix"] = GgufValue(false);
  return m;
}

std::vector<int32_t> ids_of(const Tokenizer& tok, const std::vector<std::string>& texts) {
  std::vector<int32_t> ids;
  for (const std::string& t : texts) ids.push_back(tok.token_id(t));
  return ids;
}

TEST(TinyBpe, MergesByRankThenLeftmost) {
  const Tokenizer tok = Tokenizer::from_metadata(tiny_bpe());
  EXPECT_EQ(tok.encode("abc", false, false), ids_of(tok, {"abc"}));  // b+c, then a+bc
  EXPECT_EQ(tok.encode("abd", false, false), ids_of(tok, {"ab", "d"}));
  EXPECT_EQ(tok.encode("aaa", false, false), ids_of(tok, {"aa", "a"}));  // leftmost first
  EXPECT_EQ(tok.encode(" a", false, false), ids_of(tok, {"\xC4\xA0"
                                                         "a"}));
  // "c d" merges into a symbol that is not a token: it falls back to one token per byte.
  EXPECT_EQ(tok.encode("cd", false, false), ids_of(tok, {"c", "d"}));
  EXPECT_EQ(tok.decode(tok.encode("abc abd aaa cd", false, false)), "abc abd aaa cd");
  EXPECT_EQ(tok.num_merges(), 6u);
}

TEST(TinyBpe, SpecialTokensAndEog) {
  const Tokenizer tok = Tokenizer::from_metadata(tiny_bpe());
  const int32_t im_end = tok.token_id("<|im_end|>");
  const int32_t tool = tok.token_id("<tool>");
  EXPECT_EQ(tok.encode("a<|im_end|>b", false, true), (std::vector<int32_t>{0, im_end, 1}));
  EXPECT_NE(tok.encode("a<|im_end|>b", false, false)[1], im_end);
  // User-defined tokens are split out even without parse_special.
  EXPECT_EQ(tok.encode("a<tool>b", false, false), (std::vector<int32_t>{0, tool, 1}));
  EXPECT_EQ(tok.eog_ids(), (std::vector<int32_t>{im_end, 11}));
  EXPECT_TRUE(tok.is_eog(im_end));
  EXPECT_FALSE(tok.is_eog(0));
  EXPECT_EQ(tok.bos_id(), kNoToken);  // no key: no BOS (BPE)
  EXPECT_FALSE(tok.add_bos());
  EXPECT_EQ(tok.encode("a", true, false), (std::vector<int32_t>{0}));
  EXPECT_EQ(tok.decode({0, im_end, tool}, false), "a<tool>");
  EXPECT_EQ(tok.decode({0, im_end, tool}, true), "a<|im_end|><tool>");
}

TEST(TinyBpe, AddBosAndEosFromTheFile) {
  Meta m = tiny_bpe();
  m["tokenizer.ggml.bos_token_id"] = GgufValue(uint32_t{11});
  m["tokenizer.ggml.add_bos_token"] = GgufValue(true);
  m["tokenizer.ggml.add_eos_token"] = GgufValue(true);
  const Tokenizer tok = Tokenizer::from_metadata(m);
  EXPECT_EQ(tok.encode("a", true, false), (std::vector<int32_t>{11, 0, 11}));
  EXPECT_EQ(tok.encode("a", false, false), (std::vector<int32_t>{0}));
}

TEST(TinySpm, MergesByScoreThenLeftmostWithByteFallback) {
  const Tokenizer by_score = Tokenizer::from_metadata(tiny_spm(-1.0f, -0.5f));
  EXPECT_EQ(by_score.encode("abc", false, false), ids_of(by_score, {"a", "bc"}));
  const Tokenizer tie = Tokenizer::from_metadata(tiny_spm(-1.0f, -1.0f));
  EXPECT_EQ(tie.encode("abc", false, false), ids_of(tie, {"ab", "c"}));
  // 'é' is not in the vocabulary: its two bytes become <0xC3> <0xA9>.
  EXPECT_EQ(by_score.encode("a\xC3\xA9", false, false),
            ids_of(by_score, {"a", "<0xC3>", "<0xA9>"}));
  EXPECT_EQ(by_score.decode(by_score.encode("a\xC3\xA9 b", false, false)), "a\xC3\xA9 b");
  // Defaults without keys: BOS 1, EOS 2, UNK 0, add BOS.
  EXPECT_EQ(by_score.encode(" a", true, false), ids_of(by_score, {"<s>",
                                                                  "\xE2\x96\x81"
                                                                  "a"}));
  EXPECT_EQ(by_score.eog_ids(), std::vector<int32_t>{2});
  EXPECT_EQ(by_score.encode("a<tool>b", false, false), ids_of(by_score, {"a", "<tool>", "b"}));
}

TEST(TinySpm, SpacePrefixAfterEachSpecialToken) {
  Meta m = tiny_spm();
  m["tokenizer.ggml.add_space_prefix"] = GgufValue(true);
  const Tokenizer tok = Tokenizer::from_metadata(m);
  const std::vector<int32_t> ids = tok.encode("a<tool>a", true, false);
  EXPECT_EQ(ids, ids_of(tok, {"<s>",
                              "\xE2\x96\x81"
                              "a",
                              "<tool>",
                              "\xE2\x96\x81"
                              "a"}));
  EXPECT_EQ(tok.decode(ids), "a<tool>a");
}

// Each edit of valid metadata must give FormatError whose message names the key.
TEST(TokenizerMetadata, MalformedMetadataIsAFormatErrorNamingTheKey) {
  struct Case {
    std::string key;
    std::function<void(Meta&)> edit;
  };
  const std::vector<Case> cases = {
      {"tokenizer.ggml.model", [](Meta& m) { m.erase("tokenizer.ggml.model"); }},
      {"tokenizer.ggml.model", [](Meta& m) { m["tokenizer.ggml.model"] = GgufValue(uint32_t{2}); }},
      {"tokenizer.ggml.tokens", [](Meta& m) { m.erase("tokenizer.ggml.tokens"); }},
      {"tokenizer.ggml.tokens",
       [](Meta& m) { m["tokenizer.ggml.tokens"] = GgufValue(std::string("a")); }},
      {"tokenizer.ggml.tokens",
       [](Meta& m) {
         m["tokenizer.ggml.tokens"] = numbers(GgufType::kInt32, std::vector<int32_t>{1});
       }},
      {"tokenizer.ggml.tokens", [](Meta& m) { m["tokenizer.ggml.tokens"] = strings({}); }},
      {"tokenizer.ggml.tokens",
       [](Meta& m) {
         m["tokenizer.ggml.tokens"] = strings({"a", "b", "a"});
       }},
      {"tokenizer.ggml.token_type",
       [](Meta& m) {
         m["tokenizer.ggml.token_type"] = numbers(GgufType::kInt32, std::vector<int32_t>{1, 1});
       }},
      {"tokenizer.ggml.token_type",
       [](Meta& m) {
         m["tokenizer.ggml.token_type"] = numbers(GgufType::kFloat32, std::vector<float>(13, 1.0f));
       }},
      {"tokenizer.ggml.token_type",
       [](Meta& m) {
         std::vector<int32_t> t(13, 1);
         t[3] = 9;
         m["tokenizer.ggml.token_type"] = numbers(GgufType::kInt32, t);
       }},
      {"tokenizer.ggml.token_type",
       [](Meta& m) {
         std::vector<int32_t> t(13, 1);
         t[0] = 6;
         m["tokenizer.ggml.token_type"] = numbers(GgufType::kInt32, t);
       }},
      {"tokenizer.ggml.scores",
       [](Meta& m) {
         m["tokenizer.ggml.scores"] = numbers(GgufType::kFloat32, std::vector<float>(12, 0.0f));
       }},
      {"tokenizer.ggml.scores",
       [](Meta& m) { m["tokenizer.ggml.scores"] = strings(std::vector<std::string>(13, "x")); }},
      {"tokenizer.ggml.merges", [](Meta& m) { m.erase("tokenizer.ggml.merges"); }},
      {"tokenizer.ggml.merges",
       [](Meta& m) {
         m["tokenizer.ggml.merges"] = strings({"a b", "ab"});
       }},
      {"tokenizer.ggml.merges", [](Meta& m) { m["tokenizer.ggml.merges"] = strings({"a "}); }},
      {"tokenizer.ggml.merges", [](Meta& m) { m["tokenizer.ggml.merges"] = strings({"a x"}); }},
      {"tokenizer.ggml.merges",
       [](Meta& m) {
         m["tokenizer.ggml.merges"] = numbers(GgufType::kInt32, std::vector<int32_t>{1});
       }},
      {"tokenizer.ggml.eos_token_id",
       [](Meta& m) { m["tokenizer.ggml.eos_token_id"] = GgufValue(uint32_t{13}); }},
      {"tokenizer.ggml.eos_token_id",
       [](Meta& m) { m["tokenizer.ggml.eos_token_id"] = GgufValue(int32_t{-5}); }},
      {"tokenizer.ggml.eos_token_id",
       [](Meta& m) { m["tokenizer.ggml.eos_token_id"] = GgufValue(std::string("2")); }},
      {"tokenizer.ggml.bos_token_id",
       [](Meta& m) { m["tokenizer.ggml.bos_token_id"] = GgufValue(uint64_t{1} << 40); }},
      {"tokenizer.ggml.add_bos_token",
       [](Meta& m) { m["tokenizer.ggml.add_bos_token"] = GgufValue(uint32_t{1}); }},
      {"tokenizer.ggml.add_bos_token",
       [](Meta& m) { m["tokenizer.ggml.add_bos_token"] = GgufValue(true); }},  // no BOS id
      {"tokenizer.ggml.pre", [](Meta& m) { m["tokenizer.ggml.pre"] = GgufValue(2.0f); }},
      {"tokenizer.chat_template",
       [](Meta& m) { m["tokenizer.chat_template"] = GgufValue(uint8_t{1}); }},
  };
  for (const Case& c : cases) {
    Meta m = tiny_bpe();
    c.edit(m);
    try {
      Tokenizer::from_metadata(m, "tiny.gguf");
      ADD_FAILURE() << "no error for an edit of " << c.key;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(c.key), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("tiny.gguf"), std::string::npos) << e.what();
    }
  }
}

TEST(TokenizerMetadata, UnsupportedModelsAndPreTokenizersNameTheValue) {
  Meta m = tiny_bpe();
  m["tokenizer.ggml.model"] = GgufValue(std::string("rwkv"));
  EXPECT_THROW(Tokenizer::from_metadata(m), UnsupportedError);
  m = tiny_bpe();
  m["tokenizer.ggml.pre"] = GgufValue(std::string("kimi-k2"));  // a pre-tokenizer specdec refuses
  try {
    Tokenizer::from_metadata(m);
    ADD_FAILURE() << "kimi-k2 accepted";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("'kimi-k2'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("qwen2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("llama-bpe"), std::string::npos) << e.what();
  }
  m.erase("tokenizer.ggml.pre");  // missing: llama.cpp's "default"
  EXPECT_EQ(Tokenizer::from_metadata(m).pre_name(), "default");
}

TEST(TokenizerMetadata, MissingOrTruncatedFiles) {
  EXPECT_THROW(Tokenizer::from_file("/nonexistent/vocab.gguf"), ConfigError);
  SPECDEC_VOCAB_DIR_OR_SKIP(vocab);
  const std::string path = vocab + "ggml-vocab-gpt-2.gguf";
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  ASSERT_GT(bytes.size(), 1000u);
  for (size_t keep : {bytes.size() / 2, bytes.size() - 1, size_t{100}}) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + keep);
    EXPECT_THROW(Tokenizer::from_gguf(model::GgufFile::from_bytes(cut)), FormatError) << keep;
  }
  EXPECT_EQ(Tokenizer::from_gguf(model::GgufFile::from_bytes(bytes)).vocab_size(), 50257);
}

// Chat templates are rendered in Python (jinja2's sandbox); the C++ side reads the templates and
// encodes the rendered text with control tokens parsed only in the template's own markup.
TEST(ChatTemplate, DefaultAndNamedTemplatesAreRead) {
  Meta m = tiny_bpe();
  m["tokenizer.chat_template"] = GgufValue(std::string("{{ messages }}"));
  m["tokenizer.chat_template.tool_use"] = GgufValue(std::string("{{ tools }}"));
  m["tokenizer.chat_template.rag"] = GgufValue(std::string("{{ documents }}"));
  const Tokenizer tok = Tokenizer::from_metadata(m);
  EXPECT_EQ(tok.chat_template(), "{{ messages }}");
  EXPECT_EQ(tok.named_chat_templates(),
            (std::map<std::string, std::string>{{"rag", "{{ documents }}"},
                                                {"tool_use", "{{ tools }}"}}));
  m["tokenizer.chat_template.tool_use"] = GgufValue(uint8_t{1});
  EXPECT_THROW(Tokenizer::from_metadata(m), FormatError);
  EXPECT_TRUE(Tokenizer::from_metadata(tiny_bpe()).named_chat_templates().empty());
}

TEST(ChatTemplate, ControlTokensAreParsedOnlyInsideTheMarkup) {
  const Tokenizer tok = Tokenizer::from_metadata(tiny_bpe());
  // "<|im_end|>ab<|im_end|><tool>": markup covers the first control token only.
  const std::string text = "<|im_end|>ab<|im_end|><tool>";
  const std::vector<int32_t> ids = tok.encode_with_markup(text, {{0, 10}}, false);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], 10);     // the markup's <|im_end|>
  EXPECT_EQ(ids[1], 5);      // "ab"
  EXPECT_EQ(ids.back(), 12);  // user-defined: split out everywhere
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 10), 1);  // the message's <|im_end|> is text
  std::vector<int32_t> expected = {10, 5};
  for (int32_t id : tok.encode("<|im_end|>", false, false)) expected.push_back(id);
  expected.push_back(12);
  EXPECT_EQ(ids, expected);
  // The whole text as markup is encode(parse_special = true); no markup is parse_special = false.
  EXPECT_EQ(tok.encode_with_markup(text, {{0, text.size()}}, false), tok.encode(text, false, true));
  EXPECT_EQ(tok.encode_with_markup(text, {}, false), tok.encode(text, false, false));
  // A control token straddling a range's end is not parsed.
  const std::vector<int32_t> cut = tok.encode_with_markup(text, {{0, 5}}, false);
  EXPECT_EQ(std::count(cut.begin(), cut.end(), 10), 0);
  // control (not user-defined) token texts, as a chat template protects them in message text
  EXPECT_EQ(tok.control_text_spans("x<|im_end|><tool><|endoftext|><|im_"),
            (std::vector<std::pair<size_t, size_t>>{{1, 11}, {17, 30}}));
  EXPECT_TRUE(tok.control_text_spans("").empty());
  for (const auto& bad : std::vector<std::vector<std::pair<size_t, size_t>>>{
           {{3, 3}}, {{0, 40}}, {{5, 9}, {2, 4}}, {{0, 6}, {5, 9}}}) {
    EXPECT_THROW(tok.encode_with_markup(text, bad, false), ConfigError);
  }
}

TEST(Wordpiece, NormalisesSplitsAndTakesTheLongestTokens) {
  const std::vector<std::string> tokens = {"[UNK]", "[CLS]", "[SEP]", "\u2581hello", "\u2581he",
                                           "llo", "\u2581cafe", "\u2581,", "\u2581x"};
  std::vector<int32_t> types(tokens.size(), 1);
  types[0] = 2;
  types[1] = types[2] = 3;
  Meta m;
  m["tokenizer.ggml.model"] = GgufValue(std::string("bert"));
  m["tokenizer.ggml.tokens"] = strings(tokens);
  m["tokenizer.ggml.token_type"] = numbers(GgufType::kInt32, types);
  m["tokenizer.ggml.unknown_token_id"] = GgufValue(uint32_t{0});
  m["tokenizer.ggml.bos_token_id"] = GgufValue(uint32_t{1});
  m["tokenizer.ggml.seperator_token_id"] = GgufValue(uint32_t{2});
  const Tokenizer tok = Tokenizer::from_metadata(m);
  // lower case, accents dropped (É -> E -> e), "," a word of its own, "zz" and "hellox" unknown
  EXPECT_EQ(tok.encode("Hello, CAF\xC3\x89 zz hellox", true, false),
            (std::vector<int32_t>{1, 3, 7, 6, 0, 0, 2}));
  EXPECT_EQ(tok.decode({3, 7, 6}, false), "hello , cafe");
  m["tokenizer.ggml.normalizer.lowercase"] = GgufValue(false);
  EXPECT_EQ(Tokenizer::from_metadata(m).encode("Hello x", false, false),
            (std::vector<int32_t>{0, 8}));
  EXPECT_EQ(to_lower('A'), uint32_t('a'));
  EXPECT_EQ(to_lower(0x130), uint32_t('i'));  // İ: the first character of "i̇"
  EXPECT_EQ(nfd_base(0xC9), uint32_t('E'));
  EXPECT_EQ(nfd_base(0xAC01), 0x1100u);      // a Hangul syllable: its first jamo
  EXPECT_EQ(nfd_base('a'), uint32_t('a'));
  EXPECT_EQ(nfd_base(0x10FFFF), 0x10FFFFu);
}

// Pieces of pre_tokenize as strings.
std::vector<std::string> pieces(const std::string& pre, const std::string& text) {
  const std::vector<uint32_t> cps = decode_utf8(text);
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t n : pre_tokenize(pre_tokenizer_from_name(pre), cps)) {
    std::string piece;
    for (size_t i = start; i < start + n; ++i) append_utf8(cps[i], piece);
    out.push_back(piece);
    start += n;
  }
  return out;
}

using P = std::vector<std::string>;

TEST(PreTokenizer, PiecesMatchTheRegexes) {
  EXPECT_EQ(pieces("qwen2", "Hello World's DON'T x'LL"),
            (P{"Hello", " World", "'s", " DON", "'T", " x", "'LL"}));
  EXPECT_EQ(pieces("gpt-2", "Hello World's DON'T x'LL"),
            (P{"Hello", " World", "'s", " DON", "'", "T", " x", "'", "LL"}));
  EXPECT_EQ(pieces("qwen2", "a\n\n b"), (P{"a", "\n\n", " b"}));
  EXPECT_EQ(pieces("qwen2", "  \n  x"), (P{"  \n", " ", " x"}));
  EXPECT_EQ(pieces("qwen2", "x   "), (P{"x", "   "}));
  EXPECT_EQ(pieces("qwen2", "12345 abc"), (P{"1", "2", "3", "4", "5", " abc"}));
  EXPECT_EQ(pieces("qwen2", "  ?!\n\nok"), (P{" ", " ?!\n\n", "ok"}));
  EXPECT_EQ(pieces("qwen2",
                   "\xE4\xB8\xAD\xE6\x96\x87"
                   "123ab"),
            (P{"\xE4\xB8\xAD\xE6\x96\x87", "1", "2", "3", "ab"}));
  EXPECT_EQ(pieces("gpt-2", "  y"), (P{" ", " y"}));
  EXPECT_EQ(pieces("gpt-2", "12345 abc"), (P{"12345", " abc"}));
  EXPECT_EQ(pieces("starcoder", "x12 34"), (P{"x", "1", "2", " ", "3", "4"}));
  EXPECT_EQ(pieces("smollm", "v1.25"), (P{"v", "1", ".", "2", "5"}));
  EXPECT_EQ(
      pieces("deepseek-coder", "Hello, \xE4\xB8\x96\xE7\x95\x8C! 123\nok"),
      (P{"Hello", ",", " ", "\xE4\xB8\x96\xE7\x95\x8C", "!", " ", "1", "2", "3", "\n", "ok"}));
  EXPECT_EQ(pieces("deepseek-coder", " ...a"), (P{" ...", "a"}));
  EXPECT_EQ(pieces("default", "a+=b;  123456 x"),
            (P{"a", "+=", "b", ";", " ", " ", "123", "456", " x"}));
  EXPECT_EQ(pieces("default", "$$ 1000"), (P{"$$", " ", "100", "0"}));
  EXPECT_EQ(pieces("falcon", "a`b+=1234"), (P{"a", "`", "b", "+=", "123", "4"}));
  EXPECT_EQ(pieces("qwen2", "e\xCC\x81x y"), (P{"e", "\xCC\x81x", " y"}));  // e + U+0301
  EXPECT_EQ(pieces("qwen35", "e\xCC\x81x y"), (P{"e\xCC\x81x", " y"}));     // marks join letters
  EXPECT_EQ(pieces("deepseek-llm", "Hi, x  \n7"), (P{"Hi", ",", " x", "  ", "\n", "7"}));
  EXPECT_EQ(pieces("gemma4", "a b\n\nc"), (P{"a b", "\n\n", "c"}));
  EXPECT_TRUE(pieces("qwen2", "").empty());
}

TEST(Unicode, ClassesAndDecoding) {
  EXPECT_EQ(code_point_class('a'), CodePointClass::kLetter);
  EXPECT_EQ(code_point_class(0x4E2D), CodePointClass::kLetter);  // 中
  EXPECT_EQ(code_point_class(0x00B2), CodePointClass::kNumber);  // ²
  EXPECT_EQ(code_point_class(0x0301), CodePointClass::kMark);
  EXPECT_EQ(code_point_class(0x1F999), CodePointClass::kSymbol);  // 🦙
  EXPECT_EQ(code_point_class(0x0378), CodePointClass::kUndefined);
  EXPECT_EQ(code_point_class(0x110000), CodePointClass::kUndefined);
  EXPECT_TRUE(is_white_space(0x3000));
  EXPECT_TRUE(is_white_space(0x85));
  EXPECT_FALSE(is_white_space(0x1C));
  EXPECT_FALSE(is_white_space(0x200B));
  EXPECT_EQ(decode_utf8("a\xFF\xE2\x82\xAC"), (std::vector<uint32_t>{'a', 0xFFFD, 0x20AC}));
  EXPECT_EQ(complete_utf8_prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(complete_utf8_prefix("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(complete_utf8_prefix("ab\xE2\x41"), 4u);
  EXPECT_EQ(complete_utf8_prefix("\xF0\x9F\x98"), 0u);
  EXPECT_EQ(complete_utf8_prefix("\xE0\x80"), 2u);  // can never complete: not held back
  EXPECT_EQ(gpt2_byte_to_code_point(' '), 0x120u);
  EXPECT_EQ(gpt2_code_point_to_byte(0x120), ' ');
  EXPECT_EQ(gpt2_code_point_to_byte(0x4E2D), -1);
}

}  // namespace

// stories260K (a llama2.c conversion) stores "no token" as 0xFFFFFFFF for padding and separator.
TEST(TokenizerMetadata, Stories260KSentinelIdsMeanNoToken) {
  const auto tok = Tokenizer::from_file(specdec::test_data::stories260k());
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.bos_id(), 1);
  const std::vector<int32_t> ids = tok.encode("Once upon a time", true, false);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(tok.decode(ids), "Once upon a time");
}
