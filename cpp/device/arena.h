// Many small model-lifetime buffers (a model's weights) carved out of a few large ones, so that
// they too live in huge pages where the device has them (a buffer below
// Device::huge_page_min_bytes gets the runtime's 4 KiB pages).
#pragma once

#include <cstddef>

#include "device/device.h"

namespace specdec::device {

// Requests of a quarter of a chunk or more get a kModel buffer of their own; the others are
// placed one after the other, aligned to the device's region_alignment(), in kModel chunks of
// `chunk_bytes` (at least Device::huge_page_min_bytes). Without huge pages (another device type,
// or turned off) every request is its own kModel buffer. Not thread-safe (one loader owns one);
// the chunks live until their last region is released.
class Arena {
 public:
  explicit Arena(Device& dev, size_t chunk_bytes = size_t{8} << 20);
  Buffer allocate(size_t size_bytes, Access access = Access::kReadOnly);
  size_t chunks() const { return chunks_; }

 private:
  Device& dev_;
  size_t chunk_bytes_;
  size_t align_;
  bool pooled_;
  Buffer chunk_;
  size_t used_ = 0;
  size_t chunks_ = 0;
};

}  // namespace specdec::device
