#include "quant/device_weight.h"

#include <cstring>

#include "common/errors.h"
#include "quant/impl.h"

namespace specdec::quant {

int64_t DeviceWeight::source_bytes() const {
  return layout.rows * row_bytes(layout.type, layout.cols);
}

std::vector<uint8_t> DeviceWeight::download(device::Device& dev) const {
  std::vector<uint8_t> packed(static_cast<size_t>(layout.total_bytes));
  dev.read(buffer, packed.data(), packed.size());
  return unpack(layout, packed.data());
}

DeviceWeight upload_weight(device::Device& dev, GgmlType type, const uint8_t* data, size_t size_bytes,
                           const std::vector<int64_t>& dims, const std::string& name,
                           device::Arena* arena) {
  const std::string who = name.empty() ? std::string("weight") : name;
  if (!is_weight_type_supported(type)) {
    throw UnsupportedError(str_cat(who, ": weight format ", weight_type_name(type),
                                   " is not supported; supported: ", supported_weight_type_list()));
  }
  SPECDEC_CHECK(!dims.empty() && dims.size() <= 4, who + ".dims", dims.size(),
               "must have 1 to 4 dims");
  int64_t rows = 1;
  for (size_t i = 1; i < dims.size(); ++i) {
    SPECDEC_CHECK(dims[i] > 0 && rows <= (int64_t{1} << 40) / dims[i], who + ".dims", dims[i],
                 "must be positive and the matrix below 2^40 rows");
    rows *= dims[i];
  }
  DeviceLayout layout;
  try {
    layout = device_layout(type, rows, dims[0]);
  } catch (const ConfigError& e) {
    throw e.with_prefix(who);
  }
  const int64_t expected = rows * row_bytes(type, dims[0]);
  SPECDEC_CHECK(static_cast<int64_t>(size_bytes) == expected, who + ".size_bytes", size_bytes,
               str_cat("must be ", expected, " for ", rows, " rows of ", dims[0], " ",
                       weight_format(type).name, " elements"));
  SPECDEC_CHECK(data != nullptr, who + ".data", "null", "must point at the tensor's bytes");
  if (layout.total_bytes > dev.info().max_alloc_bytes) {
    throw UnsupportedError(str_cat(who, ": ", layout.total_bytes, " bytes on the device exceed ",
                                   dev.info().name, "'s largest allocation (",
                                   dev.info().max_alloc_bytes,
                                   " bytes); on PoCL, POCL_MEMORY_LIMIT raises it"));
  }
  const auto bytes = static_cast<size_t>(layout.total_bytes);
  DeviceWeight w{who, layout, {}};
  w.buffer = arena != nullptr ? arena->allocate(bytes, device::Access::kReadOnly)
                              : dev.allocate(bytes, device::Lifetime::kModel, device::Access::kReadOnly);
  if (w.buffer.kind() == device::Kind::kCpu && w.buffer.host() != nullptr) {
    // host memory no op has seen yet, zeroed (CpuDevice::allocate's kModel buffers and arena
    // chunks): repacked in place, without a staging vector (its page faults, zeroing and copy)
    repack_into(layout, data, reinterpret_cast<uint8_t*>(w.buffer.host()));
  } else {
    const std::vector<uint8_t> packed = repack(layout, data);
    dev.write(w.buffer, packed.data(), packed.size());
  }
  return w;
}

DeviceWeight upload_weight(device::Device& dev, const WeightBytes& weight, device::Arena* arena) {
  return upload_weight(dev, weight.type, weight.data, weight.size_bytes, weight.dims, weight.name, arena);
}

DeviceWeight upload_weight_stacked(device::Device& dev, const std::vector<WeightBytes>& parts,
                                   const std::string& name, device::Arena* arena) {
  SPECDEC_CHECK(!parts.empty(), name + ".parts", 0, "must name at least one tensor");
  const WeightBytes& first = parts[0];
  SPECDEC_CHECK(!first.dims.empty(), first.name + ".dims", 0, "must have at least one dim");
  int64_t rows = 0;
  size_t bytes = 0;
  for (const WeightBytes& t : parts) {
    SPECDEC_CHECK(
        t.type == first.type, t.name + ".type", weight_type_name(t.type),
        str_cat("must equal ", first.name, "'s ", weight_type_name(first.type), " to stack"));
    SPECDEC_CHECK(!t.dims.empty() && t.dims[0] == first.dims[0], t.name + ".dims[0]",
                 t.dims.empty() ? 0 : t.dims[0],
                 str_cat("must equal ", first.name, "'s ", first.dims[0], " to stack"));
    int64_t r = 1;
    for (size_t i = 1; i < t.dims.size(); ++i) r *= t.dims[i];
    rows += r;
    bytes += t.size_bytes;
  }
  std::vector<uint8_t> data(bytes);
  size_t at = 0;
  for (const WeightBytes& t : parts) {
    SPECDEC_CHECK(t.data != nullptr, t.name + ".data", "null", "must point at the tensor's bytes");
    std::memcpy(data.data() + at, t.data, t.size_bytes);
    at += t.size_bytes;
  }
  return upload_weight(dev, first.type, data.data(), data.size(), {first.dims[0], rows}, name, arena);
}

}  // namespace specdec::quant
