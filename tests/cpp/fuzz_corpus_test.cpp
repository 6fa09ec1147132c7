// Replays the libFuzzer corpus (fuzz/corpus/) through both readers in every CTest build (the test
// command's has ASan+UBSan), so past crashes stay fixed even where clang/libFuzzer is missing.
// Seeds written by fuzz/make_corpus.py (named *.gguf / *.safetensors) are valid files and must
// parse; inputs the fuzzer kept (named by their SHA-1) and inputs that once broke a reader
// (crash-*) must parse or throw FormatError.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/errors.h"
#include "model/gguf.h"
#include "model/safetensors.h"

namespace specdec::model {
namespace {

namespace fs = std::filesystem;

const fs::path kCorpusDir = fs::path(SPECDEC_SOURCE_DIR) / "fuzz" / "corpus";

std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs `parse` on every file of fuzz/corpus/<kind>; returns how many files there were.
template <typename Parse>
int replay(const std::string& kind, const Parse& parse) {
  int num_files = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(kCorpusDir / kind)) {
    ++num_files;
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    const bool is_seed =
        name.rfind("crash-", 0) != 0 && entry.path().extension().string() == "." + kind;
    try {
      parse(read_bytes(entry.path()));
    } catch (const FormatError& e) {
      EXPECT_FALSE(is_seed) << "seed does not parse: " << e.what();
    }
  }
  return num_files;
}

TEST(FuzzCorpusTest, GgufSeedsParseAndCrashesAreFixed) {
  const int num_files = replay("gguf", [](std::vector<uint8_t> bytes) {
    const GgufFile file = GgufFile::from_bytes(std::move(bytes));
    for (const auto& [key, value] : file.metadata()) {
      if (value.type() == GgufType::kArray) (void)file.get_array(key);
    }
  });
  EXPECT_GE(num_files, 5);
}

TEST(FuzzCorpusTest, SafetensorsSeedsParseAndCrashesAreFixed) {
  const int num_files = replay("safetensors", [](std::vector<uint8_t> bytes) {
    const SafetensorsFile file = SafetensorsFile::from_bytes(std::move(bytes));
    for (const SafetensorsTensor& tensor : file.tensors()) (void)file.tensor(tensor.name);
  });
  EXPECT_GE(num_files, 5);
}

}  // namespace
}  // namespace specdec::model
