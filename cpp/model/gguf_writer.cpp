#include "model/gguf_writer.h"

#include <cstring>
#include <fstream>

#include "common/errors.h"

namespace specdec::model {
namespace {

class Out {
 public:
  template <typename T>
  void put(T value) {
    const size_t at = bytes.size();
    bytes.resize(at + sizeof(T));
    std::memcpy(bytes.data() + at, &value, sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void pad(size_t alignment) {
    while (bytes.size() % alignment != 0) bytes.push_back(0);
  }
  void value(const GgufValue& v) {
    std::visit([this](const auto& x) {
      using T = std::decay_t<decltype(x)>;
      if constexpr (std::is_same_v<T, std::string>) {
        str(x);
      } else if constexpr (std::is_same_v<T, GgufArray>) {
        put(static_cast<uint32_t>(x.type));
        put<uint64_t>(x.values.size());
        for (const auto& e : x.values) value(e);
      } else if constexpr (std::is_same_v<T, bool>) {
        put<uint8_t>(x ? 1 : 0);
      } else {
        put(x);
      }
    }, v.variant());
  }
  std::vector<uint8_t> bytes;
};

template <typename T>
GgufValue array_of(GgufType type, const std::vector<T>& values) {
  GgufArray a;
  a.type = type;
  a.values.reserve(values.size());
  for (const auto& v : values) a.values.emplace_back(v);
  return GgufValue(std::move(a));
}

}  // namespace

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  SPECDEC_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "alignment", alignment,
               "a power of two");
  if (alignment != kGgufDefaultAlignment) set_u32("general.alignment", alignment);
}

GgufWriter& GgufWriter::set(const std::string& key, GgufValue value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return *this;
    }
  }
  metadata_.emplace_back(key, std::move(value));
  return *this;
}

GgufWriter& GgufWriter::set_string(const std::string& key, const std::string& value) {
  return set(key, GgufValue(value));
}
GgufWriter& GgufWriter::set_u32(const std::string& key, uint32_t value) {
  return set(key, GgufValue(value));
}
GgufWriter& GgufWriter::set_f32(const std::string& key, float value) {
  return set(key, GgufValue(value));
}
GgufWriter& GgufWriter::set_bool(const std::string& key, bool value) {
  return set(key, GgufValue(value));
}
GgufWriter& GgufWriter::set_strings(const std::string& key, const std::vector<std::string>& v) {
  return set(key, array_of(GgufType::kString, v));
}
GgufWriter& GgufWriter::set_f32s(const std::string& key, const std::vector<float>& v) {
  return set(key, array_of(GgufType::kFloat32, v));
}
GgufWriter& GgufWriter::set_i32s(const std::string& key, const std::vector<int32_t>& v) {
  return set(key, array_of(GgufType::kInt32, v));
}

GgufWriter& GgufWriter::erase(const std::string& key) {
  std::erase_if(metadata_, [&](const auto& kv) { return kv.first == key; });
  return *this;
}

GgufWriter& GgufWriter::add_tensor(const std::string& name, GgmlType type,
                                   std::vector<int64_t> dims, std::vector<uint8_t> data) {
  const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(type));
  SPECDEC_CHECK(info != nullptr, name + ".type", static_cast<uint32_t>(type), "a known ggml type");
  SPECDEC_CHECK(!dims.empty() && dims.size() <= kGgufMaxDims, name + ".dims", dims.size(),
               "1 to 4 dimensions");
  int64_t n = 1;
  for (int64_t d : dims) {
    SPECDEC_CHECK(d > 0, name + ".dims", d, "positive");
    n *= d;
  }
  SPECDEC_CHECK(dims[0] % info->block_size == 0, name + ".dims[0]", dims[0],
               str_cat("a multiple of the ", info->name, " block size ", info->block_size));
  const uint64_t expected = static_cast<uint64_t>(n / info->block_size * info->type_size);
  SPECDEC_CHECK(data.size() == expected, name + ".data", data.size(),
               str_cat(expected, " bytes for these dims"));
  tensors_.push_back({name, type, std::move(dims), std::move(data)});
  return *this;
}

GgufWriter& GgufWriter::add_f32(const std::string& name, std::vector<int64_t> dims,
                                const std::vector<float>& values) {
  std::vector<uint8_t> data(values.size() * sizeof(float));
  std::memcpy(data.data(), values.data(), data.size());
  return add_tensor(name, GgmlType::kF32, std::move(dims), std::move(data));
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  Out out;
  for (char c : {'G', 'G', 'U', 'F'}) out.put(c);
  out.put<uint32_t>(3);
  out.put<uint64_t>(tensors_.size());
  out.put<uint64_t>(metadata_.size());
  for (const auto& [key, value] : metadata_) {
    out.str(key);
    out.put(static_cast<uint32_t>(value.type()));
    out.value(value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    out.str(t.name);
    out.put<uint32_t>(t.dims.size());
    for (int64_t d : t.dims) out.put(d);
    out.put(static_cast<uint32_t>(t.type));
    out.put(offset);
    offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  out.pad(alignment_);
  for (const auto& t : tensors_) {
    out.bytes.insert(out.bytes.end(), t.data.begin(), t.data.end());
    out.pad(alignment_);
  }
  return out.bytes;
}

void GgufWriter::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = to_bytes();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw ConfigError("path", path, "a writable file path");
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw ConfigError("path", path, "a writable file path (write failed)");
}

}  // namespace specdec::model
