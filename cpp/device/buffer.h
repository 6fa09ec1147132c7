// A device buffer as the layers above the seam see it: a size, an identity and, for the device's
// own files, its native handle or host memory. A leaf header (no CL types), so ocl/ may include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "device/kind.h"

namespace specdec::device {

// "The same buffer" (what comparing OpenCL memory handles answers today): equal ids, same memory.
struct BufferId {
  const void* value = nullptr;
  friend bool operator==(BufferId, BufferId) = default;
};

// Move-only. The memory is owned by `keep` (its deleter does what the device needs: OpenCL
// releases its memory object, which keeps the memory until the ops enqueued on it ran); a region holds
// its own handle, and the parent's memory lives until its last region goes.
class Buffer {
 public:
  Buffer() = default;
  // native: OpenCL the memory object; host: the memory where the host can reach it (else nullptr)
  Buffer(Kind kind, void* native, std::byte* host, size_t size_bytes, std::shared_ptr<void> keep)
      : kind_(kind), native_(native), host_(host), size_(size_bytes), keep_(std::move(keep)) {}
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      kind_ = other.kind_;
      native_ = std::exchange(other.native_, nullptr);
      host_ = std::exchange(other.host_, nullptr);
      size_ = std::exchange(other.size_, 0);
      keep_ = std::move(other.keep_);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  size_t size_bytes() const { return size_; }
  bool empty() const { return size_ == 0; }
  Kind kind() const { return kind_; }
  BufferId id() const { return {native_ != nullptr ? native_ : static_cast<const void*>(host_)}; }
  void* native() const { return native_; }  // OpenCL: the memory object (device files only)
  std::byte* host() const { return host_; }  // OpenCL: the USE_HOST_PTR memory, or nullptr
  // The owner of the memory (device files: a region made without the device's help shares it).
  const std::shared_ptr<void>& owner() const { return keep_; }

 private:
  Kind kind_ = Kind::kOpenCL;
  void* native_ = nullptr;
  std::byte* host_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<void> keep_;
};

// A device buffer from an element offset on (ops::Slice). Every op element is 4 bytes (f32
// activations, int32 ids and positions), so offsets count elements. Converts implicitly from a
// Buffer, so a whole buffer can be passed where a Slice is expected; {buffer, offset} selects a
// later part (one row of a batch, the k part of a fused projection).
struct Slice {
  Slice(const Buffer& b, int64_t offset_elems = 0) : buffer(&b), offset(offset_elems) {}  // NOLINT

  const Buffer* buffer;
  int64_t offset;  // in 4-byte elements
};

// ConfigError naming `what` unless elements [offset, offset + num_elems) lie inside the buffer.
void check_slice(const Slice& s, int64_t num_elems, const std::string& what);

}  // namespace specdec::device
