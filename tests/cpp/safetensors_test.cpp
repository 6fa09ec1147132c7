// Tests for the hardened safetensors reader: round trips, then hostile files that must all be
// a FormatError naming the culprit, then a seeded byte-mutation loop.
#include "model/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/errors.h"

namespace specdec::model {
namespace {

using Bytes = std::vector<uint8_t>;
using Json = nlohmann::json;

// A file from raw header text and data bytes; `length` overrides the length prefix.
Bytes make_file(const std::string& header, const Bytes& data = {},
                std::optional<uint64_t> length = std::nullopt) {
  const uint64_t n = length.value_or(header.size());
  Bytes file(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i) file[i] = static_cast<uint8_t>(n >> (8 * i));
  std::copy(header.begin(), header.end(), file.begin() + 8);
  std::copy(data.begin(), data.end(), file.begin() + 8 + header.size());
  return file;
}

struct TensorSpec {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
  Bytes bytes;
};

// A valid file: tensors laid out back to back in the given order.
Bytes write_safetensors(const std::vector<TensorSpec>& specs, const Json& metadata = nullptr) {
  Json header = Json::object();
  Bytes data;
  for (const TensorSpec& spec : specs) {
    header[spec.name] = {{"dtype", spec.dtype},
                         {"shape", spec.shape},
                         {"data_offsets", {data.size(), data.size() + spec.bytes.size()}}};
    data.insert(data.end(), spec.bytes.begin(), spec.bytes.end());
  }
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  return make_file(header.dump(), data);
}

template <typename T>
Bytes as_bytes(const std::vector<T>& values) {
  Bytes out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// The standard valid file the hostile tests start from; every data byte belongs to a tensor.
Bytes sample_file() {
  std::vector<uint16_t> half, bf16;
  for (float v : {1.0f, -2.5f, 0.25f, 65504.0f, 3.0f, -0.0f}) {
    half.push_back(float_to_half_bits(v));
    bf16.push_back(float_to_bf16_bits(v));
  }
  return write_safetensors(
      {{"w.f32", "F32", {2, 3}, as_bytes(std::vector<float>{1, 2, 3, 4, 5, 6})},
       {"w.f16", "F16", {3, 2}, as_bytes(half)},
       {"w.bf16", "BF16", {6}, as_bytes(bf16)},
       {"scalar", "F32", {}, as_bytes(std::vector<float>{7.5f})},
       {"empty", "F16", {0, 4}, {}}},
      Json{{"format", "pt"}, {"note", "tiny"}});
}

// Expects FormatError whose message contains every string in `needles`.
void expect_format_error(const Bytes& file, const std::vector<std::string>& needles) {
  try {
    SafetensorsFile::from_bytes(file);
    ADD_FAILURE() << "no FormatError; expected one mentioning " << needles.at(0);
  } catch (const FormatError& e) {
    for (const std::string& needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "message: " << e.what() << "\nmissing: " << needle;
    }
  }
}

// A one-tensor file whose entry for "t" is `entry` (raw JSON), with `data_bytes` zero bytes.
Bytes with_entry(const std::string& entry, size_t data_bytes = 16) {
  return make_file("{\"t\":" + entry + "}", Bytes(data_bytes, 0));
}

TEST(SafetensorsTest, RoundTripsTensorsAndMetadata) {
  const SafetensorsFile file = SafetensorsFile::from_bytes(sample_file());
  ASSERT_EQ(file.tensors().size(), 5u);
  const SafetensorsTensor& f32 = file.tensor("w.f32");
  EXPECT_EQ(f32.dtype, SafetensorsDType::kF32);
  EXPECT_EQ(f32.engine_dtype(), DType::kF32);
  EXPECT_EQ(f32.shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(f32.num_elements, 6u);
  EXPECT_EQ(f32.size_bytes, 24u);
  float values[6];
  std::memcpy(values, f32.data, sizeof(values));
  EXPECT_EQ(values[5], 6.0f);
  const SafetensorsTensor& f16 = file.tensor("w.f16");
  EXPECT_EQ(f16.engine_dtype(), DType::kF16);
  uint16_t bits[6];
  std::memcpy(bits, f16.data, sizeof(bits));
  EXPECT_EQ(half_bits_to_float(bits[1]), -2.5f);
  EXPECT_EQ(half_bits_to_float(bits[3]), 65504.0f);
  const SafetensorsTensor& bf16 = file.tensor("w.bf16");
  EXPECT_EQ(bf16.engine_dtype(), DType::kBF16);
  EXPECT_EQ(bf16.data_offsets[0], 36u);
  std::memcpy(bits, bf16.data, sizeof(bits));
  EXPECT_EQ(bf16_bits_to_float(bits[2]), 0.25f);
  const SafetensorsTensor& scalar = file.tensor("scalar");
  EXPECT_TRUE(scalar.shape.empty());
  EXPECT_EQ(scalar.num_elements, 1u);
  float scalar_value;
  std::memcpy(&scalar_value, scalar.data, sizeof(float));
  EXPECT_EQ(scalar_value, 7.5f);
  EXPECT_EQ(file.tensor("empty").num_elements, 0u);
  EXPECT_EQ(file.tensor("empty").size_bytes, 0u);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.metadata().size(), 2u);
  EXPECT_EQ(file.file_size(), sample_file().size());
}

TEST(SafetensorsTest, EmptyHeaderObjectHasNoTensors) {
  const SafetensorsFile file = SafetensorsFile::from_bytes(make_file("{}  "));
  EXPECT_TRUE(file.tensors().empty());
  EXPECT_TRUE(file.metadata().empty());
}

TEST(SafetensorsTest, OtherDtypesAreReportedButNotEngineTypes) {
  const SafetensorsFile file =
      SafetensorsFile::from_bytes(write_safetensors({{"ids", "I64", {2}, Bytes(16, 1)},
                                                     {"mask", "BOOL", {3}, Bytes(3, 1)},
                                                     {"q", "I8", {4}, Bytes(4, 2)}}));
  EXPECT_EQ(file.tensor("ids").dtype, SafetensorsDType::kI64);
  EXPECT_EQ(file.tensor("q").engine_dtype(), DType::kI8);
  try {
    (void)file.tensor("ids").engine_dtype();
    ADD_FAILURE() << "expected UnsupportedError";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("\"ids\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("I64"), std::string::npos) << e.what();
  }
}

TEST(SafetensorsTest, MissingTensorNamesIt) {
  const SafetensorsFile file = SafetensorsFile::from_bytes(sample_file());
  EXPECT_FALSE(file.contains("nope"));
  try {
    (void)file.tensor("nope");
    ADD_FAILURE() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("\"nope\""), std::string::npos) << e.what();
  }
}

TEST(SafetensorsTest, OpensAndMapsFileOnDisk) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("specdec_st_test_" + std::to_string(::getpid()) + ".safetensors");
  const Bytes bytes = sample_file();
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  {
    SafetensorsFile file = SafetensorsFile::open(path.string());
    SafetensorsFile moved = std::move(file);
    EXPECT_EQ(moved.file_size(), bytes.size());
    float first;
    std::memcpy(&first, moved.tensor("w.f32").data, sizeof(float));
    EXPECT_EQ(first, 1.0f);
  }
  std::ofstream(path, std::ios::trunc).close();  // empty file
  EXPECT_THROW(SafetensorsFile::open(path.string()), FormatError);
  std::filesystem::remove(path);
  EXPECT_THROW(SafetensorsFile::open(path.string()), ConfigError);
  EXPECT_THROW(SafetensorsFile::open(path.parent_path().string()), ConfigError);
}

TEST(SafetensorsTest, TruncationAnywhereIsFormatError) {
  const Bytes full = sample_file();
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= uint64_t{full[i]} << (8 * i);
  std::mt19937 rng(1234);
  std::vector<size_t> cuts;
  for (size_t cut = 0; cut <= 8 + header_bytes; ++cut) cuts.push_back(cut);
  std::uniform_int_distribution<size_t> in_data(8 + header_bytes + 1, full.size() - 1);
  for (int i = 0; i < 50; ++i) cuts.push_back(in_data(rng));
  for (size_t cut : cuts) {
    SCOPED_TRACE(cut);
    EXPECT_THROW(SafetensorsFile::from_bytes(Bytes(full.begin(), full.begin() + cut)), FormatError);
  }
}

TEST(SafetensorsTest, HeaderLengthAbsurdOrPastEnd) {
  expect_format_error(make_file("{}", {}, uint64_t{1} << 40),
                      {"header length 1099511627776", "cap"});
  expect_format_error(make_file("{}", {}, 3), {"header length 3", "file size 2"});
  expect_format_error(make_file("{}", {}, ~uint64_t{1}), {"header length 18446744073709551614"});
  expect_format_error(Bytes{1, 0, 0}, {"3 bytes"});
}

TEST(SafetensorsTest, BadJsonIsFormatError) {
  expect_format_error(make_file(""), {"not valid JSON"});
  expect_format_error(make_file("{\"t\": {"), {"not valid JSON"});
  expect_format_error(make_file("{\"t\" 1}"), {"not valid JSON", "file byte"});
  expect_format_error(make_file("{\"\xff\": 1}"), {"not valid JSON"});
  expect_format_error(make_file("[1, 2]"), {"header = [1,2]", "object"});
  expect_format_error(make_file("{} {}"), {"not valid JSON"});
  expect_format_error(make_file(std::string(10000, '[') + std::string(10000, ']')),
                      {"nested deeper than 8 levels"});
  expect_format_error(make_file("{\"t\":" + std::string(10, '[') + std::string(10, ']') + "}"),
                      {"nested deeper than 8 levels"});
}

TEST(SafetensorsTest, TooManyJsonValuesIsFormatError) {
  // An entry of ~1M tiny values would build a tree of ~100 MB: rejected while parsing.
  std::string header = "{\"__metadata__\":{},\"a\":[";
  const uint64_t n = SafetensorsFile::kMaxJsonValues + 8;
  header.reserve(header.size() + 2 * n + 2);
  for (uint64_t i = 0; i < n; ++i) header += i == 0 ? "0" : ",0";
  header += "]}";
  expect_format_error(make_file(header), {"more than", "values"});
}

// A header of `n` one-byte tensors named "t<i>" (in file order i = n-1 .. 0) and its data.
Bytes many_tensors(size_t n) {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  header.reserve(n * 64);
  for (size_t k = 0; k < n; ++k) {
    const size_t i = n - 1 - k;
    header += str_cat(",\"t", i, "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[", i, ",",
                      i + 1, "]}");
  }
  header += "}";
  Bytes data(n);
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<uint8_t>(i * 7);
  return make_file(header, data);
}

// Issue 34, item 4: a valid 20 MB header of 300,000 entries never finished (nlohmann's parse with
// a callback scans the whole header object each time an entry's object ends: quadratic). Now the
// header is streamed entry by entry; this runs in about a second.
TEST(SafetensorsTest, ThreeHundredThousandEntriesAreReadInLinearTime) {
  constexpr size_t n = 300000;
  const Bytes bytes = many_tensors(n);
  ASSERT_GT(bytes.size(), 15u << 20);
  const SafetensorsFile file = SafetensorsFile::from_bytes(bytes);
  ASSERT_EQ(file.tensors().size(), n);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_TRUE(std::is_sorted(file.tensors().begin(), file.tensors().end(),
                             [](const auto& a, const auto& b) { return a.name < b.name; }));
  for (size_t i : {size_t{0}, size_t{12345}, n - 1}) {
    const SafetensorsTensor& t = file.tensor(str_cat("t", i));
    EXPECT_EQ(t.data_offsets[0], i);
    EXPECT_EQ(*t.data, static_cast<uint8_t>(i * 7));
  }
  EXPECT_FALSE(file.contains("t300000"));
  EXPECT_EQ(file.find("t-1"), nullptr);
}

TEST(SafetensorsTest, TensorCountIsBounded) {
  expect_format_error(many_tensors(SafetensorsFile::kMaxTensors + 1),
                      {"more than 1048576 tensors", "split the checkpoint"});
}

TEST(SafetensorsTest, DuplicateKeysAreFormatError) {
  expect_format_error(make_file("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                                "\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                                Bytes(2)),
                      {"duplicate key \"t\""});
  expect_format_error(
      with_entry("{\"dtype\":\"U8\",\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}"),
      {"duplicate key \"dtype\""});
  expect_format_error(make_file("{\"__metadata__\":{},\"__metadata__\":{}}"),
                      {"duplicate key \"__metadata__\""});
  // far apart in a big header (found after sorting, not by a scan per entry)
  Bytes big = many_tensors(1000);
  const std::string dup = ",\"t5\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}";
  std::string header(big.begin() + 8, big.end() - 1000);
  header.pop_back();
  expect_format_error(make_file(header + dup, Bytes(1000)), {"duplicate key \"t5\""});
}

TEST(SafetensorsTest, WrongFieldsAndTypesNameTheTensor) {
  const std::string ok_offsets = "\"data_offsets\":[0,16]";
  expect_format_error(with_entry("[1]"), {"tensor \"t\"", "entry = [1]"});
  expect_format_error(with_entry("{\"shape\":[4]," + ok_offsets + "}"),
                      {"tensor \"t\"", "missing field \"dtype\""});
  expect_format_error(with_entry("{\"dtype\":\"F32\",\"shape\":[4]," + ok_offsets + ",\"x\":1}"),
                      {"tensor \"t\"", "unexpected field \"x\""});
  expect_format_error(with_entry("{\"dtype\":32,\"shape\":[4]," + ok_offsets + "}"),
                      {"tensor \"t\"", "dtype = 32"});
  expect_format_error(with_entry("{\"dtype\":\"F33\",\"shape\":[4]," + ok_offsets + "}"),
                      {"tensor \"t\"", "dtype = \"F33\""});
  expect_format_error(with_entry("{\"dtype\":\"F32\",\"shape\":\"4\"," + ok_offsets + "}"),
                      {"tensor \"t\"", "shape = \"4\""});
  expect_format_error(with_entry("{\"dtype\":\"F32\",\"shape\":[-4]," + ok_offsets + "}"),
                      {"tensor \"t\"", "shape = [-4]"});
  expect_format_error(with_entry("{\"dtype\":\"F32\",\"shape\":[4.0]," + ok_offsets + "}"),
                      {"tensor \"t\"", "shape = [4.0]"});
  expect_format_error(
      with_entry("{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}"),
      {"tensor \"t\"", "at most 8"});
  expect_format_error(with_entry("{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0]}"),
                      {"tensor \"t\"", "data_offsets = [0]"});
}

TEST(SafetensorsTest, BadOffsetsNameTheTensor) {
  const std::string head = "{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":";
  expect_format_error(with_entry(head + "[-16,0]}"), {"tensor \"t\"", "[-16,0]"});
  expect_format_error(with_entry(head + "[0,16.0]}"), {"tensor \"t\"", "[0,16.0]"});
  expect_format_error(with_entry(head + "[0,\"16\"]}"), {"tensor \"t\"", "[0,\"16\"]"});
  expect_format_error(with_entry(head + "[16,0]}"), {"tensor \"t\"", "begin <= end"});
  expect_format_error(with_entry(head + "[0,12]}"), {"tensor \"t\"", "16 bytes", "got 12"});
  expect_format_error(with_entry(head + "[16,32]}"), {"tensor \"t\"", "data section size 16"});
  expect_format_error(with_entry(head + "[0,18446744073709551615]}"),
                      {"tensor \"t\"", "data section size"});
  expect_format_error(with_entry(head + "[0,99999999999999999999999]}"), {"tensor \"t\""});
}

TEST(SafetensorsTest, ShapeOverflowIsFormatError) {
  expect_format_error(with_entry("{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],"
                                 "\"data_offsets\":[0,0]}"),
                      {"tensor \"t\"", "overflow"});
  expect_format_error(
      with_entry("{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}"),
      {"tensor \"t\"", "overflow"});
}

TEST(SafetensorsTest, OverlappingTensorsAreFormatError) {
  expect_format_error(make_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                                "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[6,10]}}",
                                Bytes(10)),
                      {"\"a\"", "\"b\"", "overlap"});
  // Gaps and empty tensors inside another tensor's range are fine.
  EXPECT_NO_THROW(SafetensorsFile::from_bytes(
      make_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[6,8]}}",
                Bytes(10))));
}

TEST(SafetensorsTest, MetadataMustBeStrings) {
  expect_format_error(make_file("{\"__metadata__\":{\"format\":1}}"),
                      {"__metadata__ entry \"format\" = 1"});
  expect_format_error(make_file("{\"__metadata__\":[\"a\"]}"), {"__metadata__ = [\"a\"]"});
}

TEST(SafetensorsTest, LongNamesAreCutInMessages) {
  const std::string name(100000, 'n');
  try {
    SafetensorsFile::from_bytes(make_file("{\"" + name + "\":1}"));
    ADD_FAILURE() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_LT(std::string(e.what()).size(), 400u) << e.what();
    EXPECT_NE(std::string(e.what()).find("100000 bytes"), std::string::npos) << e.what();
  }
}

// Every accepted file must be self-consistent: sizes match shapes, data lies inside the file
// at one common base, and non-empty tensors do not overlap.
void check_consistent(const SafetensorsFile& file) {
  const uint64_t data_size = file.file_size() - 8 - file.header_size_bytes();
  const uint8_t* base = nullptr;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const SafetensorsTensor& t : file.tensors()) {
    ASSERT_LE(t.data_offsets[0], t.data_offsets[1]);
    ASSERT_LE(t.data_offsets[1], data_size);
    ASSERT_LE(t.shape.size(), SafetensorsFile::kMaxRank);
    ASSERT_EQ(t.size_bytes, t.num_elements * safetensors_dtype_size(t.dtype));
    if (base == nullptr) base = t.data - t.data_offsets[0];
    ASSERT_EQ(t.data, base + t.data_offsets[0]);
    if (t.size_bytes > 0) ranges.emplace_back(t.data_offsets[0], t.data_offsets[1]);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) ASSERT_LE(ranges[i - 1].second, ranges[i].first);
}

TEST(SafetensorsTest, RandomHeaderMutationsNeverCrash) {
  const Bytes original = sample_file();
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= uint64_t{original[i]} << (8 * i);
  std::mt19937 rng(20261121);
  std::uniform_int_distribution<size_t> position(0, 8 + header_bytes - 1);
  std::uniform_int_distribution<int> byte(0, 255), flips(1, 4);
  int accepted = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    Bytes bytes = original;
    for (int f = flips(rng); f > 0; --f) bytes[position(rng)] = static_cast<uint8_t>(byte(rng));
    try {
      const SafetensorsFile file = SafetensorsFile::from_bytes(bytes);
      ++accepted;
      check_consistent(file);
    } catch (const FormatError&) {
      // expected for most mutations
    }
  }
  EXPECT_GT(accepted, 0);  // some mutations (e.g. inside strings) stay valid
}

// Whether `text` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool is_valid_utf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<uint8_t>(text[i]);
    const size_t length = lead < 0x80   ? 1
                          : lead < 0xC2 ? 0
                          : lead < 0xE0 ? 2
                          : lead < 0xF0 ? 3
                          : lead < 0xF5 ? 4
                                        : 0;
    if (length == 0 || i + length > text.size()) return false;
    uint32_t code_point = length == 1 ? lead : lead & (0x7F >> length);
    for (size_t k = 1; k < length; ++k) {
      const auto next = static_cast<uint8_t>(text[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      code_point = (code_point << 6) | (next & 0x3F);
    }
    if ((length == 3 && code_point < 0x800) || (length == 4 && code_point < 0x10000) ||
        code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF)) {
      return false;
    }
    i += length;
  }
  return true;
}

// Regression (libFuzzer, fuzz/corpus/safetensors/crash-json_error_non_utf8.safetensors): the JSON
// parser's message quotes the raw bytes it read, and names were cut at 64 bytes even mid-character,
// so messages could be invalid UTF-8, which Python cannot decode (UnicodeDecodeError instead of
// FormatError). Every message is now valid UTF-8, with '?' for each offending byte.
TEST(SafetensorsTest, MessagesAreValidUtf8) {
  const auto expect_utf8_error = [](const auto& run, const std::string& needle) {
    try {
      run();
      ADD_FAILURE() << "expected an error mentioning " << needle;
    } catch (const std::runtime_error& e) {
      EXPECT_TRUE(is_valid_utf8(e.what())) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_utf8_error([] { SafetensorsFile::from_bytes(make_file("{\"sh\xfa\": 1}")); },
                    "not valid JSON");
  const std::string cut_name = std::string(63, 'n') + "\xc3\xa9";  // U+00E9 across the cut
  expect_utf8_error([&] { SafetensorsFile::from_bytes(make_file("{\"" + cut_name + "\":1}")); },
                    "nnn?\"... (65 bytes)");
  const SafetensorsFile file =
      SafetensorsFile::from_bytes(write_safetensors({{cut_name, "I64", {1}, Bytes(8)}}));
  expect_utf8_error([&] { (void)file.tensor(cut_name + "x"); }, "has no tensor");
  expect_utf8_error([&] { (void)file.tensors()[0].engine_dtype(); }, "has dtype I64");
}

}  // namespace
}  // namespace specdec::model
