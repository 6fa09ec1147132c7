#include "device/arena.h"

#include <algorithm>

namespace specdec::device {

Arena::Arena(Device& dev, size_t chunk_bytes)
    : dev_(dev),
      chunk_bytes_(std::max(chunk_bytes, Device::huge_page_min_bytes)),
      align_(dev.region_alignment()),
      pooled_(dev.huge_pages()) {}

Buffer Arena::allocate(size_t size_bytes, Access access) {
  if (!pooled_ || size_bytes == 0 || size_bytes >= chunk_bytes_ / 4) {
    return dev_.allocate(size_bytes, Lifetime::kModel, access);
  }
  const size_t origin = (used_ + align_ - 1) / align_ * align_;
  if (chunk_.empty() || origin + size_bytes > chunk_.size_bytes()) {
    chunk_ = dev_.allocate(chunk_bytes_, Lifetime::kModel, Access::kReadWrite);
    ++chunks_;
    used_ = size_bytes;
    return dev_.region(chunk_, 0, size_bytes, access);
  }
  used_ = origin + size_bytes;
  return dev_.region(chunk_, origin, size_bytes, access);
}

}  // namespace specdec::device
