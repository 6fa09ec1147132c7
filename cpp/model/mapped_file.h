// Read-only bytes of a model file: either a private read-only memory map of a file on disk
// or an owned byte vector (tests, in-memory files). Move-only; the bytes stay at the same
// address for the object's lifetime, including across moves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace specdec::model {

class MappedFile {
 public:
  // Maps `path` read-only. Throws ConfigError (field "path") when the file cannot be opened,
  // is not a regular file, or cannot be mapped. An empty file gives size() == 0.
  static MappedFile open(const std::string& path);
  // Takes ownership of `bytes`; source() is "<memory>".
  static MappedFile from_bytes(std::vector<uint8_t> bytes);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // The path, or "<memory>"; used in error messages.
  const std::string& source() const { return source_; }
  // Drops this process's resident pages of a mapped file: the kernel's page cache keeps the file,
  // and a later read faults its pages back in, unchanged (the map is private and read-only). Called
  // once the weights are in the device's own memory, so that the file does not count a second time
  // in the process's resident memory. No-op for owned bytes. False when the kernel refused.
  bool release_pages() const noexcept { return release_pages(data_, size_); }
  // The same for the pages holding [begin, begin + n) (rounded out to whole pages; clamped to the
  // mapping): a tensor's bytes once the device has its copy.
  bool release_pages(const uint8_t* begin, size_t n) const noexcept;

 private:
  void release() noexcept;

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool is_mapped_ = false;  // data_ came from mmap and must be unmapped
  std::vector<uint8_t> owned_;
  std::string source_;
};

}  // namespace specdec::model
