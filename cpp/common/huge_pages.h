// Host memory in transparent huge pages, for buffers that live as long as a model (weights, the
// KV cache) on a CPU: a kernel streaming weights through 4 KiB pages stops at every page boundary
// (hardware prefetchers do not cross pages; one TLB entry per 4 KiB). Measured on a 2-core Zen 4
// VM, PoCL 3.1: a streaming read kernel 21-23 GB/s over 4 KiB pages, 30-32 GB/s over huge pages
// (bench/README.md). SPECDEC_HUGE_PAGES=0 turns it off (read once per process).
#pragma once

#include <cstddef>

namespace specdec {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;
inline constexpr size_t kHugePageMinBytes = size_t{1}
                                            << 20;  // smaller buffers: at most half padding

bool huge_pages_enabled();

// 2 MiB-aligned anonymous memory of size_bytes rounded up to 2 MiB (*span), its whole 2 MiB pages
// advised as huge pages and its partial last one as 4 KiB pages (so the padding is never
// resident; a buffer below 2 MiB is advised whole); advice only: without THP the pages stay
// 4 KiB. Zero, as fresh pages are. nullptr when the mapping fails. Release with munmap(p, *span).
void* map_huge_pages(size_t size_bytes, size_t* span);

}  // namespace specdec
