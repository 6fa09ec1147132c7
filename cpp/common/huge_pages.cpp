#include "common/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace specdec {

bool huge_pages_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("SPECDEC_HUGE_PAGES");
    return env == nullptr || std::string_view(env) != "0";
  }();
  return on;
}

void* map_huge_pages(size_t size_bytes, size_t* span_out) {
  if (size_bytes == 0 || size_bytes > SIZE_MAX / 2) return nullptr;
  const size_t span = (size_bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* raw = mmap(nullptr, span + kHugePageBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (base + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (aligned > base) munmap(raw, aligned - base);
  const uintptr_t end = aligned + span, raw_end = base + span + kHugePageBytes;
  if (raw_end > end) munmap(reinterpret_cast<void*>(end), raw_end - end);
  void* p = reinterpret_cast<void*>(aligned);
  // Huge pages over the whole 2 MiB pages of the buffer only: its partial last page stays in
  // 4 KiB pages, so the padding past size_bytes is never resident (a huge page there would be,
  // whole, once the buffer's last bytes are written: 1.2 MiB on average per weight). Below one
  // huge page, the whole span (padding at most half).
  const size_t whole = size_bytes >= kHugePageBytes ? size_bytes / kHugePageBytes * kHugePageBytes : span;
  madvise(p, whole, MADV_HUGEPAGE);
  if (whole < span) madvise(static_cast<char*>(p) + whole, span - whole, MADV_NOHUGEPAGE);
  *span_out = span;
  return p;
}

}  // namespace specdec
