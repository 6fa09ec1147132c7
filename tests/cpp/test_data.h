// Where the C++ tests find their data. stories260K.gguf is carried in the repository
// (tests/data/models: llama2.c's TinyStories 260K, MIT); llama.cpp's vocabulary files and token
// vectors come from the pinned llama-cpp-python sdist, fetched into the specdec cache by
// tests/python/llamacpp_sdist.py (CTest's fixture llamacpp_vocab_fetch runs it and records the
// folder). Nothing is read from outside the clone but that cache.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace specdec::test_data {

inline std::string stories260k() {
  return std::string(SPECDEC_TEST_DATA_DIR) + "/models/stories260K.gguf";
}

inline constexpr const char* kNoVocab =
    "llama.cpp's vocabulary vectors are not available: set SPECDEC_VOCAB_DIR to the folder, or run "
    "`python3 tests/python/llamacpp_sdist.py` (CTest's fixture llamacpp_vocab_fetch does; its "
    "output says why it could not)";

// The vocabulary folder with a trailing '/': $SPECDEC_VOCAB_DIR when set (used as given: a wrong
// folder fails the tests), else the folder CTest's fixture recorded in SPECDEC_VOCAB_RECORD if it
// still exists; "" when neither (the tests that need it skip with kNoVocab).
inline std::string vocab_dir() {
  if (const char* env = std::getenv("SPECDEC_VOCAB_DIR"); env != nullptr && *env != '\0') {
    return std::string(env) + "/";
  }
  std::ifstream in(SPECDEC_VOCAB_RECORD);
  std::string dir;
  if (!std::getline(in, dir) || dir.empty() || !std::filesystem::is_directory(dir)) return "";
  return dir + "/";
}

}  // namespace specdec::test_data

// Declares `var` (the vocabulary folder) or skips the current test with a one-line reason.
#define SPECDEC_VOCAB_DIR_OR_SKIP(var)                                  \
  const std::string var = ::specdec::test_data::vocab_dir();            \
  if (var.empty()) GTEST_SKIP() << ::specdec::test_data::kNoVocab
