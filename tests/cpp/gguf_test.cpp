// GgufFile: the real stories260K model and vocabulary-only files parse; a hand-built file with
// every value type round-trips; truncations (at every section boundary and at random points) and
// hostile edits of counts, lengths, types, dims, offsets, version and alignment all give
// FormatError and nothing else.
#include "model/gguf.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/errors.h"
#include "test_data.h"

using namespace specdec;
using namespace specdec::model;

namespace {

const std::string kStories = test_data::stories260k();

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <typename T>
void patch(std::vector<uint8_t>& bytes, size_t at, T value) {
  ASSERT_LE(at + sizeof(T), bytes.size());
  std::memcpy(bytes.data() + at, &value, sizeof(T));
}

// Writes GGUF bytes and remembers the byte offset of named fields for later patching.
class Writer {
 public:
  template <typename T>
  Writer& put(T value, const std::string& mark = "") {
    if (!mark.empty()) marks[mark] = bytes.size();
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    bytes.insert(bytes.end(), p, p + sizeof(T));
    return *this;
  }
  Writer& str(const std::string& text, const std::string& mark = "") {
    put<uint64_t>(text.size(), mark);
    bytes.insert(bytes.end(), text.begin(), text.end());
    return *this;
  }
  Writer& header(uint32_t version, uint64_t num_tensors, uint64_t num_kvs) {
    bytes.insert(bytes.end(), {'G', 'G', 'U', 'F'});
    return put(version, "version").put(num_tensors, "num_tensors").put(num_kvs, "num_kvs");
  }
  Writer& key(const std::string& name, GgufType type) {
    str(name, "key:" + name);
    return put(static_cast<uint32_t>(type), "type:" + name);
  }
  Writer& tensor_info(const std::string& name, std::vector<int64_t> dims, GgmlType type,
                      uint64_t offset) {
    str(name, "tensor:" + name);
    put<uint32_t>(dims.size(), "n_dims:" + name);
    for (size_t d = 0; d < dims.size(); ++d) put(dims[d], "dim" + std::to_string(d) + ":" + name);
    put(static_cast<uint32_t>(type), "ttype:" + name);
    return put(offset, "offset:" + name);
  }
  void pad(size_t alignment) {
    while (bytes.size() % alignment != 0) bytes.push_back(0);
  }

  std::vector<uint8_t> bytes;
  std::map<std::string, size_t> marks;
};

// A small v3 file: every value type, arrays of strings, a nested and an empty array, and three
// tensors (f32 [4, 2], q8_0 [32], f16 [3]) whose data bytes count up from their offset.
Writer minimal_file(uint32_t version = 3) {
  Writer w;
  w.header(version, 3, 17);
  w.key("u8", GgufType::kUint8).put<uint8_t>(200);
  w.key("i8", GgufType::kInt8).put<int8_t>(-100);
  w.key("u16", GgufType::kUint16).put<uint16_t>(60000);
  w.key("i16", GgufType::kInt16).put<int16_t>(-30000);
  w.key("u32", GgufType::kUint32).put<uint32_t>(4000000000u);
  w.key("i32", GgufType::kInt32).put<int32_t>(-2000000000);
  w.key("f32", GgufType::kFloat32).put<float>(1.5f);
  w.key("bool", GgufType::kBool).put<uint8_t>(1, "bool");
  w.key("str", GgufType::kString).str("hello", "str");
  w.key("u64", GgufType::kUint64).put<uint64_t>(uint64_t{1} << 60);
  w.key("i64", GgufType::kInt64).put<int64_t>(-(int64_t{1} << 60));
  w.key("f64", GgufType::kFloat64).put<double>(0.25);
  w.key("strs", GgufType::kArray).put(GgufType::kString, "strs.type").put<uint64_t>(3, "strs.n");
  w.str("a").str("").str("ccc", "strs.2");
  w.key("nested", GgufType::kArray).put(GgufType::kArray).put<uint64_t>(2);
  w.put(GgufType::kInt32).put<uint64_t>(2).put<int32_t>(1).put<int32_t>(2);
  w.put(GgufType::kInt32).put<uint64_t>(0);
  w.key("empty", GgufType::kArray).put(GgufType::kFloat32).put<uint64_t>(0);
  w.key("general.alignment", GgufType::kUint32).put<uint32_t>(64, "alignment");
  w.key("general.architecture", GgufType::kString).str("test");
  w.tensor_info("a.weight", {4, 2}, GgmlType::kF32, 0);
  w.tensor_info("b.weight", {32}, GgmlType::kQ8_0, 64);
  w.tensor_info("c.weight", {3}, GgmlType::kF16, 128);
  w.pad(64);
  w.marks["data"] = w.bytes.size();
  for (int i = 0; i < 128 + 6; ++i) w.bytes.push_back(static_cast<uint8_t>(i));
  return w;
}

// Byte offsets of the section boundaries of a GGUF file, walked independently of the reader.
class BoundaryWalker {
 public:
  explicit BoundaryWalker(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}

  std::vector<size_t> walk(uint64_t& num_tensors) {
    std::vector<size_t> out = {0, 4, 8, 16, 24};
    pos_ = 8;
    num_tensors = take<uint64_t>();
    const auto num_kvs = take<uint64_t>();
    for (uint64_t i = 0; i < num_kvs; ++i) {
      skip_string();
      skip_value(take<uint32_t>());
      out.push_back(pos_);
    }
    for (uint64_t i = 0; i < num_tensors; ++i) {
      skip_string();
      pos_ += 8 * take<uint32_t>() + 4 + 8;
      out.push_back(pos_);
    }
    return out;
  }

 private:
  template <typename T>
  T take() {
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  void skip_string() { pos_ += take<uint64_t>(); }
  void skip_value(uint32_t type) {
    static constexpr size_t kSizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == 8) return skip_string();
    if (type != 9) {
      pos_ += kSizes[type];
      return;
    }
    const auto elem = take<uint32_t>();
    const auto count = take<uint64_t>();
    for (uint64_t i = 0; i < count; ++i) skip_value(elem);
  }

  const std::vector<uint8_t>& bytes_;
  size_t pos_ = 0;
};

void expect_format_error(const std::vector<uint8_t>& bytes, const std::string& what,
                         const std::string& needle = "") {
  try {
    GgufFile::from_bytes(bytes);
    ADD_FAILURE() << what << ": parsed without error";
  } catch (const FormatError& e) {
    if (!needle.empty()) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << what << ": message '" << e.what() << "' lacks '" << needle << "'";
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw something else: " << e.what();
  }
}

TEST(GgufTest, ParsesStories260K) {
  const GgufFile file = GgufFile::open(kStories);
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.alignment(), 32u);
  EXPECT_EQ(file.get_string("general.architecture"), "llama");
  EXPECT_EQ(file.get_u32("llama.embedding_length"), 64u);
  EXPECT_EQ(file.get_u32("llama.block_count"), 5u);
  EXPECT_EQ(file.get_u32("llama.attention.head_count"), 8u);
  EXPECT_EQ(file.get_u32("llama.attention.head_count_kv"), 4u);
  EXPECT_EQ(file.get_u32("llama.context_length"), 128u);
  EXPECT_EQ(file.get_u32("llama.feed_forward_length"), 172u);
  EXPECT_EQ(file.get_int("llama.block_count"), 5);
  EXPECT_FLOAT_EQ(file.get_f32("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
  const std::vector<std::string> tokens = file.get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(file.get_array("tokenizer.ggml.scores").type, GgufType::kFloat32);
  EXPECT_EQ(file.find("no.such.key"), nullptr);

  ASSERT_EQ(file.tensors().size(), 3u + 5u * 9u);
  EXPECT_EQ(file.data_offset() % file.alignment(), 0u);
  const uint8_t* begin = file.tensors()[0].data - file.data_offset() - file.tensors()[0].offset;
  for (const GgufTensor& t : file.tensors()) {
    EXPECT_EQ(t.type, GgmlType::kF32) << t.name;
    EXPECT_EQ(t.size_bytes, static_cast<uint64_t>(t.num_elements) * 4) << t.name;
    EXPECT_EQ(t.offset % file.alignment(), 0u) << t.name;
    EXPECT_LE(file.data_offset() + t.offset + t.size_bytes, file.file_size()) << t.name;
    EXPECT_EQ(t.data, begin + file.data_offset() + t.offset) << t.name;
  }
  const GgufTensor& embd = file.tensor("token_embd.weight");
  EXPECT_EQ(embd.dims, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(file.tensor("blk.4.ffn_down.weight").dims, (std::vector<int64_t>{172, 64}));
  EXPECT_THROW(file.tensor("blk.5.ffn_down.weight"), FormatError);
}

// Dropping the file's resident pages (after the weights were copied to a device) changes no byte:
// per tensor, for ranges past or before the map (ignored), and for the whole file; twice is fine.
TEST(GgufTest, ReleasedPagesReadBackUnchanged) {
  const GgufFile file = GgufFile::open(kStories);
  std::vector<std::vector<uint8_t>> before;
  for (const GgufTensor& t : file.tensors()) before.emplace_back(t.data, t.data + t.size_bytes);
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < file.tensors().size(); i += 2) ASSERT_TRUE(file.release_pages(file.tensors()[i]));
    for (size_t i = 0; i < file.tensors().size(); ++i) {
      const GgufTensor& t = file.tensors()[i];
      ASSERT_EQ(std::memcmp(t.data, before[i].data(), t.size_bytes), 0) << t.name << " round " << round;
    }
    ASSERT_TRUE(file.release_pages());
    EXPECT_EQ(file.get_string("general.architecture"), "llama");  // metadata is parsed: untouched
    for (size_t i = 0; i < file.tensors().size(); ++i) {
      const GgufTensor& t = file.tensors()[i];
      ASSERT_EQ(std::memcmp(t.data, before[i].data(), t.size_bytes), 0) << t.name << " round " << round;
    }
  }
  // a tensor of an in-memory file (owned bytes): a no-op
  std::ifstream in(kStories, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const MappedFile owned = MappedFile::from_bytes(bytes);
  owned.release_pages();
  owned.release_pages(owned.data() + 10, 100);
  owned.release_pages(nullptr, 0);
  EXPECT_EQ(std::memcmp(owned.data(), bytes.data(), bytes.size()), 0);
  const MappedFile mapped = MappedFile::open(kStories);
  EXPECT_TRUE(mapped.release_pages(mapped.data() + mapped.size(), 4096));      // past the end: ignored
  EXPECT_TRUE(mapped.release_pages(mapped.data() + mapped.size() - 3, 4096));  // clamped to the map
  EXPECT_EQ(std::memcmp(mapped.data(), bytes.data(), bytes.size()), 0);
}

TEST(GgufTest, TypedGettersNameTheKey) {
  const GgufFile file = GgufFile::open(kStories);
  try {
    file.get_u32("general.architecture");
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'general.architecture'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("found string"), std::string::npos) << e.what();
  }
  EXPECT_THROW(file.get_string("missing.key"), FormatError);
  EXPECT_THROW(file.get_string_array("tokenizer.ggml.scores"), FormatError);
  EXPECT_THROW(file.get_int("general.name"), FormatError);
}

TEST(GgufTest, ParsesVocabFiles) {
  SPECDEC_VOCAB_DIR_OR_SKIP(vocab);
  int num_files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(vocab)) {
    if (entry.path().extension() != ".gguf") continue;
    ++num_files;
    const GgufFile file = GgufFile::open(entry.path().string());
    EXPECT_FALSE(file.get_string("tokenizer.ggml.model").empty()) << entry.path();
    EXPECT_FALSE(file.get_string_array("tokenizer.ggml.tokens").empty()) << entry.path();
    EXPECT_TRUE(file.tensors().empty()) << entry.path();
  }
  EXPECT_GE(num_files, 5);
}

TEST(GgufTest, OpenMissingFileIsConfigError) {
  EXPECT_THROW(GgufFile::open(std::string(SPECDEC_TEST_DATA_DIR) + "/models/no-such-file.gguf"), ConfigError);
}

TEST(GgufTest, RoundTripsEveryValueType) {
  for (uint32_t version : {2u, 3u}) {
    const Writer w = minimal_file(version);
    const GgufFile file = GgufFile::from_bytes(w.bytes);
    EXPECT_EQ(file.version(), version);
    EXPECT_EQ(file.metadata().size(), 17u);
    EXPECT_EQ(*file.find("u8")->get_if<uint8_t>(), 200);
    EXPECT_EQ(*file.find("i8")->get_if<int8_t>(), -100);
    EXPECT_EQ(*file.find("u16")->get_if<uint16_t>(), 60000);
    EXPECT_EQ(*file.find("i16")->get_if<int16_t>(), -30000);
    EXPECT_EQ(file.get_u32("u32"), 4000000000u);
    EXPECT_EQ(file.get_i32("i32"), -2000000000);
    EXPECT_EQ(file.get_f32("f32"), 1.5f);
    EXPECT_TRUE(file.get_bool("bool"));
    EXPECT_EQ(file.get_string("str"), "hello");
    EXPECT_EQ(file.get_u64("u64"), uint64_t{1} << 60);
    EXPECT_EQ(file.get_i64("i64"), -(int64_t{1} << 60));
    EXPECT_EQ(file.get_f64("f64"), 0.25);
    EXPECT_EQ(file.get_int("u16"), 60000);
    EXPECT_EQ(file.get_int("i64"), -(int64_t{1} << 60));
    EXPECT_EQ(file.get_string_array("strs"), (std::vector<std::string>{"a", "", "ccc"}));
    const GgufArray& nested = file.get_array("nested");
    ASSERT_EQ(nested.type, GgufType::kArray);
    ASSERT_EQ(nested.values.size(), 2u);
    const GgufArray& inner = *nested.values[0].get_if<GgufArray>();
    EXPECT_EQ(inner.type, GgufType::kInt32);
    EXPECT_EQ(*inner.values[1].get_if<int32_t>(), 2);
    EXPECT_TRUE(nested.values[1].get_if<GgufArray>()->values.empty());
    EXPECT_EQ(file.get_array("empty").type, GgufType::kFloat32);
    EXPECT_EQ(file.alignment(), 64u);

    EXPECT_EQ(file.data_offset(), w.marks.at("data"));
    ASSERT_EQ(file.tensors().size(), 3u);
    const GgufTensor& b = file.tensor("b.weight");
    EXPECT_EQ(b.type, GgmlType::kQ8_0);
    EXPECT_EQ(b.size_bytes, 34u);
    EXPECT_EQ(b.num_elements, 32);
    EXPECT_EQ(b.data[0], 64);
    EXPECT_EQ(file.tensor("a.weight").size_bytes, 32u);
    EXPECT_EQ(file.tensor("c.weight").size_bytes, 6u);
    EXPECT_EQ(file.tensor("c.weight").data[5], 133);
  }
}

TEST(GgufTest, TypeTable) {
  EXPECT_EQ(ggml_type_info(2)->block_size, 32);
  EXPECT_EQ(ggml_type_info(14)->type_size, 210);
  EXPECT_EQ(ggml_type_info(30)->type_size, 2);
  EXPECT_EQ(ggml_type_info(4), nullptr);
  EXPECT_EQ(ggml_type_info(1000), nullptr);
}

TEST(GgufTest, TruncationsAreFormatErrors) {
  const std::vector<uint8_t> bytes = read_bytes(kStories);
  const GgufFile file = GgufFile::from_bytes(bytes);
  uint64_t data_end = 0;
  for (const GgufTensor& t : file.tensors()) {
    data_end = std::max(data_end, file.data_offset() + t.offset + t.size_bytes);
  }
  uint64_t num_tensors = 0;
  std::vector<size_t> cuts = BoundaryWalker(bytes).walk(num_tensors);
  EXPECT_EQ(num_tensors, file.tensors().size());
  EXPECT_LE(cuts.back(), file.data_offset());
  cuts.push_back(file.data_offset());
  cuts.push_back(data_end - 1);
  std::mt19937_64 rng(1234);
  for (int i = 0; i < 300; ++i) cuts.push_back(rng() % data_end);
  for (size_t cut : cuts) {
    const std::vector<uint8_t> truncated(bytes.begin(), bytes.begin() + cut);
    expect_format_error(truncated, "cut at " + std::to_string(cut));
  }
}

TEST(GgufTest, TruncatedMinimalFileAtEveryByte) {
  const Writer w = minimal_file();
  for (size_t cut = 0; cut < w.bytes.size(); ++cut) {
    expect_format_error({w.bytes.begin(), w.bytes.begin() + cut}, "cut at " + std::to_string(cut));
  }
}

template <typename T>
void expect_patch_fails(const std::string& mark, T value, const std::string& needle = "") {
  Writer w = minimal_file();
  std::vector<uint8_t> bytes = w.bytes;
  patch(bytes, w.marks.at(mark), value);
  expect_format_error(bytes, mark + " = " + std::to_string(value), needle);
}

TEST(GgufTest, HostileHeaderFields) {
  expect_patch_fails<uint32_t>("version", 1, "version 1");
  expect_patch_fails<uint32_t>("version", 4, "version 4");
  expect_patch_fails<uint32_t>("version", 0x00030000, "big-endian");
  expect_patch_fails<uint32_t>("version", 0, "version 0");
  expect_patch_fails<uint64_t>("num_tensors", uint64_t{1} << 40, "tensor count");
  expect_patch_fails<uint64_t>("num_tensors", ~uint64_t{0}, "tensor count");
  expect_patch_fails<uint64_t>("num_tensors", 4);
  expect_patch_fails<uint64_t>("num_kvs", uint64_t{1} << 62, "metadata count");
  expect_patch_fails<uint64_t>("num_kvs", 18);
  expect_patch_fails<uint64_t>("num_kvs", 16);
  std::vector<uint8_t> bad_magic = minimal_file().bytes;
  bad_magic[0] = 'X';
  expect_format_error(bad_magic, "magic", "magic");
}

TEST(GgufTest, HostileMetadata) {
  expect_patch_fails<uint64_t>("key:u8", ~uint64_t{0}, "key length");
  expect_patch_fails<uint64_t>("key:u8", 0, "empty key");
  expect_patch_fails<uint32_t>("type:u32", 13, "'u32'");
  expect_patch_fails<uint32_t>("type:u32", 0xffffffff, "value type id");
  expect_patch_fails<uint64_t>("str", uint64_t{1} << 50, "'str'");
  expect_patch_fails<uint8_t>("bool", 2, "bool value 2");
  expect_patch_fails<uint32_t>("strs.type", 99, "array element type");
  expect_patch_fails<uint64_t>("strs.n", uint64_t{1} << 61, "array length");
  expect_patch_fails<uint64_t>("strs.n", 1000000, "array length");
  expect_patch_fails<uint64_t>("strs.2", 1 << 20, "'strs'");
  expect_patch_fails<uint32_t>("alignment", 3, "power of two");
  expect_patch_fails<uint32_t>("alignment", 0, "power of two");
  expect_patch_fails<uint32_t>("type:general.alignment", 5, "expected uint32");
}

TEST(GgufTest, HostileTensorInfos) {
  expect_patch_fails<uint64_t>("tensor:b.weight", 1 << 30, "name length");
  expect_patch_fails<uint64_t>("tensor:b.weight", 0, "name length");
  expect_patch_fails<uint32_t>("n_dims:a.weight", 5, "n_dims 5");
  expect_patch_fails<uint32_t>("n_dims:a.weight", 0xffffffff, "n_dims");
  expect_patch_fails<uint32_t>("n_dims:a.weight", 1);  // [4] now overlaps b.weight's dim bytes
  expect_patch_fails<int64_t>("dim0:a.weight", 0, "'a.weight': dimension 0 is 0");
  expect_patch_fails<int64_t>("dim1:a.weight", -1, "dimension 1 is -1");
  expect_patch_fails<int64_t>("dim1:a.weight", int64_t{1} << 62, "overflow");
  expect_patch_fails<int64_t>("dim1:a.weight", int64_t{1} << 40, "past the end");
  expect_patch_fails<int64_t>("dim0:b.weight", 33, "block size");
  expect_patch_fails<int64_t>("dim0:b.weight", int64_t{1} << 61, "past the end");
  expect_patch_fails<int64_t>("dim1:a.weight", int64_t{1} << 60, "byte size");
  expect_patch_fails<uint32_t>("ttype:a.weight", 4, "unknown ggml type id 4");
  expect_patch_fails<uint32_t>("ttype:c.weight", 1000, "'c.weight': unknown ggml type id 1000");
  expect_patch_fails<uint64_t>("offset:b.weight", 1, "not a multiple of the alignment 64");
  expect_patch_fails<uint64_t>("offset:b.weight", 0, "overlaps");
  expect_patch_fails<uint64_t>("offset:c.weight", 192, "past the end");
  expect_patch_fails<uint64_t>("offset:c.weight", ~uint64_t{0} - 63, "past the end");
}

TEST(GgufTest, DuplicateKey) {
  Writer w = minimal_file();
  std::vector<uint8_t> bytes = w.bytes;
  bytes[w.marks.at("key:i8") + 8] = 'u';  // "i8" -> "u8"
  expect_format_error(bytes, "duplicate key", "'u8': duplicate key");
}

TEST(GgufTest, DuplicateTensorName) {
  Writer w = minimal_file();
  std::vector<uint8_t> bytes = w.bytes;
  bytes[w.marks.at("tensor:b.weight") + 8] = 'a';  // "b.weight" -> "a.weight"
  expect_format_error(bytes, "duplicate tensor", "duplicate tensor name");
}

TEST(GgufTest, DeeplyNestedArraysAreRejected) {
  Writer w;
  w.header(3, 0, 1).key("deep", GgufType::kArray);
  for (int i = 0; i < 20; ++i) w.put(GgufType::kArray).put<uint64_t>(1);
  w.put(GgufType::kUint8).put<uint64_t>(1).put<uint8_t>(7);
  expect_format_error(w.bytes, "deep nesting", "nested deeper");
}

// Regression (libFuzzer, fuzz/corpus/gguf/crash-getter_error_non_utf8_key.gguf): the typed getters
// put the key into the message unquoted, so a key with invalid UTF-8 gave a message that Python
// cannot decode (UnicodeDecodeError instead of FormatError). Keys are now quoted like the parser's.
TEST(GgufTest, StringsMustBeUtf8AndGetterErrorsQuoteTheKeyAsAscii) {
  const auto expect_ascii_error = [](const auto& get, const std::string& needle) {
    try {
      get();
      ADD_FAILURE() << "expected FormatError mentioning " << needle;
    } catch (const FormatError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(needle), std::string::npos) << message;
      EXPECT_TRUE(std::all_of(message.begin(), message.end(), [](char c) { return c > 0; }))
          << message;
    }
  };
  // GGUF strings are UTF-8: a key, a string value or a string in an array that is not fails the
  // read, naming where (and the bytes never reach Python as a str that cannot hold them)
  Writer bad_key;
  bad_key.header(3, 0, 1).key("bad\xff\xfe key", GgufType::kUint8).put<uint8_t>(1);
  expect_ascii_error([&] { GgufFile::from_bytes(bad_key.bytes); },
                     "metadata #0: key at byte 24 is not valid UTF-8 (byte 0xff at byte 35)");
  Writer bad_value;
  bad_value.header(3, 0, 1).key("general.name", GgufType::kString).str("ok\xc3(");
  expect_ascii_error([&] { GgufFile::from_bytes(bad_value.bytes); },
                     "metadata key 'general.name': string at byte");
  for (const char* overlong : {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"}) {
    Writer w;
    w.header(3, 0, 1).key("k", GgufType::kString).str(overlong);  // overlong, surrogate, > U+10FFFF
    EXPECT_THROW(GgufFile::from_bytes(w.bytes), FormatError) << overlong;
  }
  Writer good;
  good.header(3, 0, 1).key("ok key", GgufType::kString).str("caf\xc3\xa9 \xf0\x9f\x99\x82");
  const GgufFile file = GgufFile::from_bytes(good.bytes);
  EXPECT_EQ(file.get_string("ok key"), "caf\xc3\xa9 \xf0\x9f\x99\x82");
  expect_ascii_error([&] { file.get_u32("ok key"); }, "'ok key': expected uint32");
  expect_ascii_error([&] { file.get_string("\xc3"); }, "'?' is missing");
  expect_ascii_error([&] { file.tensor("\xc3"); }, "tensor '?' is missing");
}

}  // namespace
