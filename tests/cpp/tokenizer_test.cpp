// Tokenizers: every llama.cpp test vector of the five vocabulary files (SPM: llama-spm, phi-3; BPE:
// gpt-2, starcoder, deepseek-coder) tokenizes to exactly the recorded ids; decode inverts encode on
// varied text; invalid UTF-8 gives the documented result; streaming detokenization equals decode.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/errors.h"
#include "test_data.h"

using namespace specdec;
using namespace specdec::tokenizer;

namespace {

// llama.cpp's vocabulary files and vectors (test_data.h); "" when unavailable (the tests skip).
const std::string kVocabDir = test_data::vocab_dir();

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct VectorCase {
  std::string input;
  std::vector<int32_t> ids;
};

// Splits .inp exactly as llama.cpp's tests/test-tokenizer-0.cpp: inputs are separated by
// "\n__ggml_vocab_test__\n"; the text after the last separator (empty here) is not a case.
std::vector<VectorCase> read_vectors(const std::string& name) {
  const std::string raw = read_file(kVocabDir + name + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream out(read_file(kVocabDir + name + ".out"));
  std::vector<VectorCase> cases;
  std::string line;
  for (size_t i = 0; std::getline(out, line); ++i) {
    VectorCase c;
    c.input = i < inputs.size() ? inputs[i] : "<missing input>";
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
    cases.push_back(c);
  }
  EXPECT_EQ(cases.size(), inputs.size()) << name;
  return cases;
}

std::string show(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    }
  }
  return out;
}

const std::vector<std::string> kVocabFiles = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf",
                                              "ggml-vocab-gpt-2.gguf", "ggml-vocab-starcoder.gguf",
                                              "ggml-vocab-deepseek-coder.gguf"};

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param.substr(11);  // after "ggml-vocab-"
  name = name.substr(0, name.size() - 5);    // before ".gguf"
  for (char& c : name) c = std::isalnum(uint8_t(c)) ? c : '_';
  return name;
}

Tokenizer load(const std::string& name) { return Tokenizer::from_file(kVocabDir + name); }

// Text that exercises every pre-tokenizer branch and the byte fallback.
const std::vector<std::string>& corpus() {
  static const std::vector<std::string> texts = {
      "",
      " ",
      "Hello, world! How's it going? I'm fine; we'll see. DON'T SHOUT, Y'ALL'D",
      "\xC3\x9Cn\xC3\xAF"
      "c\xC3\xB6"
      "d\xC3\xA9 fa\xC3\xA7"
      "ade na\xC3\xAFve caf\xC3\xA9 "
      "\xE2\x80\x94 \xE2\x80\x9Cquotes\xE2\x80\x9D \xE2\x80\x98single\xE2\x80\x99 \xE2\x80\xA6",
      "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xD0\xBC\xD0\xB8\xD1\x80, "
      "\xCE\x9A\xCE\xB1\xCE\xBB\xCE\xB7\xCE\xBC\xCE\xAD\xCF\x81\xCE\xB1 "
      "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D "
      "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87 "
      "\xE0\xB8\xAA\xE0\xB8\xA7\xE0\xB8\xB1\xE0\xB8\xAA\xE0\xB8\x94\xE0\xB8\xB5",
      "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xEF\xBC\x81"
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9"
      "\xE3\x83\x88 \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 \xE3\x80\x80\xE5\x85\xA8\xE8\xA7\x92",
      "\xF0\x9F\xA6\x99\xF0\x9F\x9A\x80 \xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F "
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 \xE2\x9C\x85 "
      "\xF0\x9F\x87\xBA\xF0\x9F\x87\xB8 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
      "def f(x):\n    return x**2  # square\n\tif (a && b) { c++; }\n\r\n",
      "int main() { std::vector<int> v{1, 2, 3}; return v[0] >= 0 ? 0 : -1; }\n",
      "a  b   c    d     e\n\n\n   leading and trailing   \t\t\t \t \n \r\n ",
      "\xC2\xA0\xE2\x80\x83\xE3\x80\x80\xE2\x80\xA8\xC2\x85 non-ASCII spaces",
      "3.14159 1,000,000 0x1F 1e-9 \xD9\xA3\xD9\xA4\xD9\xA5 \xC2\xB2\xC2\xB3 12345678901234567890",
      "e\xCC\x81 a\xCC\x88 combining marks \xE0\xA5\x8D",
      "'s 'S 'll 'LL don't DON'T it'S we'Re",
      "\x01\x02\x1F\x7F control bytes \xEF\xBF\xBD replacement",
      std::string(300, 'a') + std::string(50, ' ') + std::string(40, '\n'),
  };
  return texts;
}

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or values above U+10FFFF).
bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const uint8_t b = s[i];
    const size_t n = b < 0x80                   ? 1
                     : (b >= 0xC2 && b <= 0xDF) ? 2
                     : (b >= 0xE0 && b <= 0xEF) ? 3
                     : (b >= 0xF0 && b <= 0xF4) ? 4
                                                : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((uint8_t(s[i + k]) & 0xC0) != 0x80) return false;
    }
    const uint8_t c = n > 1 ? uint8_t(s[i + 1]) : 0x80;
    if ((b == 0xE0 && c < 0xA0) || (b == 0xED && c > 0x9F) || (b == 0xF0 && c < 0x90) ||
        (b == 0xF4 && c > 0x8F)) {
      return false;
    }
    i += n;
  }
  return true;
}

class VocabVectors : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (kVocabDir.empty()) GTEST_SKIP() << test_data::kNoVocab;
  }
};

TEST_P(VocabVectors, EveryVectorMatchesLlamaCpp) {
  const Tokenizer tok = load(GetParam());
  const std::vector<VectorCase> cases = read_vectors(GetParam());
  ASSERT_GE(cases.size(), 40u);
  for (const VectorCase& c : cases) {
    EXPECT_EQ(tok.encode(c.input, false, false), c.ids) << "input '" << show(c.input) << "'";
  }
}

TEST_P(VocabVectors, DecodeInvertsEncodeOnEveryVector) {
  const Tokenizer tok = load(GetParam());
  for (const VectorCase& c : read_vectors(GetParam())) {
    EXPECT_EQ(tok.decode(tok.encode(c.input, false, false)), c.input) << show(c.input);
    EXPECT_EQ(tok.decode(tok.encode(c.input, true, false)), c.input) << show(c.input);
  }
}

TEST_P(VocabVectors, DecodeInvertsEncodeOnVariedText) {
  const Tokenizer tok = load(GetParam());
  for (const std::string& text : corpus()) {
    for (bool add_special : {false, true}) {
      for (bool parse_special : {false, true}) {
        const std::vector<int32_t> ids = tok.encode(text, add_special, parse_special);
        EXPECT_EQ(tok.decode(ids), text) << show(text) << " add_special=" << add_special;
        if (!text.empty()) {
          EXPECT_FALSE(ids.empty());
        }
      }
    }
  }
}

TEST_P(VocabVectors, StreamingEqualsFullDecodeAndNeverSplitsACharacter) {
  const Tokenizer tok = load(GetParam());
  for (const std::string& text : corpus()) {
    for (bool special : {false, true}) {
      const std::vector<int32_t> ids = tok.encode(text, true, false);
      StreamDecoder stream(tok, special);
      std::string joined;
      for (int32_t id : ids) {
        const std::string chunk = stream.push(id);
        EXPECT_TRUE(valid_utf8(chunk)) << show(chunk) << " in " << show(text);
        joined += chunk;
      }
      joined += stream.flush();
      EXPECT_EQ(joined, tok.decode(ids, special)) << show(text);
      stream.reset();
      EXPECT_EQ(stream.flush(), "");
    }
  }
}

// Invalid UTF-8 never fails. SPM keeps the bytes exactly (byte fallback). BPE reads every byte
// that does not start a complete sequence as U+FFFD (as llama.cpp), keeps forms that decode to a
// value (surrogates, overlongs) by value, and reads 4-byte forms above U+10FFFF as invalid bytes.
TEST_P(VocabVectors, InvalidUtf8HasADefinedResult) {
  const Tokenizer tok = load(GetParam());
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\xFF", r},
      {"a\x80"
       "b",
       "a" + r + "b"},
      {"\xC3", r},
      {"\xE2\x82x", r + r + "x"},
      {"abc\xF0\x9F\x98", "abc" + r + r + r},
      {"\xED\xA0\x80", "\xED\xA0\x80"},
      {std::string("\xC0\x80", 2), std::string(1, '\0')},
      {"\xF4\x90\x80\x80", r + r + r + r},
      {"\xFE\xFF ok \xF0\x9F\xA6\x99\x80", r + r + " ok \xF0\x9F\xA6\x99" + r},
  };
  for (const auto& [input, bpe_result] : cases) {
    const std::vector<int32_t> ids = tok.encode(input, false, false);
    const std::string expected = tok.kind() == TokenizerKind::kSpm ? input : bpe_result;
    EXPECT_EQ(tok.decode(ids), expected) << show(input);
    StreamDecoder stream(tok);
    std::string joined;
    for (int32_t id : ids) joined += stream.push(id);
    EXPECT_EQ(joined + stream.flush(), expected) << show(input);
  }
}

TEST_P(VocabVectors, RejectsOutOfRangeIds) {
  const Tokenizer tok = load(GetParam());
  EXPECT_THROW(tok.decode({0, tok.vocab_size()}), ConfigError);
  EXPECT_THROW(tok.decode({-1}), ConfigError);
  EXPECT_THROW(tok.token_to_piece(tok.vocab_size()), ConfigError);
  StreamDecoder stream(tok);
  EXPECT_THROW(stream.push(-7), ConfigError);
}

INSTANTIATE_TEST_SUITE_P(Files, VocabVectors, ::testing::ValuesIn(kVocabFiles), param_name);

TEST(Tokenizer, SpmFlagsSpecialTokensAndSpacePrefix) {
  if (kVocabDir.empty()) GTEST_SKIP() << test_data::kNoVocab;
  const Tokenizer spm = load("ggml-vocab-llama-spm.gguf");
  EXPECT_EQ(spm.kind(), TokenizerKind::kSpm);
  EXPECT_EQ(spm.vocab_size(), 32000);
  EXPECT_EQ(spm.bos_id(), 1);
  EXPECT_EQ(spm.eos_id(), 2);
  EXPECT_TRUE(spm.add_bos());
  EXPECT_FALSE(spm.add_eos());
  EXPECT_TRUE(spm.add_space_prefix());
  EXPECT_TRUE(spm.is_eog(2));
  EXPECT_FALSE(spm.is_eog(1));
  EXPECT_EQ(spm.encode("Hello world", true, false), (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_EQ(spm.encode("", true, false), (std::vector<int32_t>{1}));
  // Control tokens in text are parsed only when asked; the space prefix follows them.
  EXPECT_EQ(spm.encode("<s>Hello", false, true), (std::vector<int32_t>{1, 15043}));
  EXPECT_NE(spm.encode("<s>Hello", false, false)[0], 1);
  EXPECT_EQ(spm.decode({1, 15043}, true), "<s>Hello");
  EXPECT_EQ(spm.decode({1, 15043}, false), "Hello");
  EXPECT_EQ(spm.decode({29871, 15043}), " Hello");  // "▁" then "▁Hello": one space removed
  EXPECT_EQ(spm.token_to_piece(13), "\n");          // byte token <0x0A>
}

TEST(Tokenizer, BpeFlagsAndSpecialTokens) {
  if (kVocabDir.empty()) GTEST_SKIP() << test_data::kNoVocab;
  const Tokenizer gpt2 = load("ggml-vocab-gpt-2.gguf");
  EXPECT_EQ(gpt2.kind(), TokenizerKind::kBpe);
  EXPECT_EQ(gpt2.pre_name(), "gpt-2");
  EXPECT_EQ(gpt2.num_merges(), 50000u);
  EXPECT_FALSE(gpt2.add_bos());
  EXPECT_FALSE(gpt2.add_space_prefix());
  EXPECT_EQ(gpt2.eog_ids(), std::vector<int32_t>{50256});
  EXPECT_EQ(gpt2.encode("a<|endoftext|>b", true, true), (std::vector<int32_t>{64, 50256, 65}));
  EXPECT_GT(gpt2.encode("a<|endoftext|>b", true, false).size(), 3u);
  EXPECT_EQ(gpt2.token_to_piece(50256, false), "");
  EXPECT_EQ(gpt2.token_to_piece(50256, true), "<|endoftext|>");
  EXPECT_EQ(gpt2.token_to_piece(220), " ");  // 'Ġ'
  EXPECT_EQ(gpt2.token_id("Hello"), 15496);
  EXPECT_EQ(gpt2.token_id("no such token"), kNoToken);
}

}  // namespace
