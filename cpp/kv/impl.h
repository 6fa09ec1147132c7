// The KV-cache ops' per-device implementations, called by kv/cache_ops.cpp and kv/allocator.cpp
// after the checks (OpenCL: kv/ocl_cache_ops.cpp, kv/ocl_allocator.cpp). Arguments are checked
// already; the buffers stay ocl::Buffer until step 7 of docs/device_seam.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/device.h"
#include "kv/cache_ops.h"

namespace specdec::kv {

// The elements between two tokens' rows of r (token_stride, or num_heads * width when 0);
// ConfigError when a non-zero stride is shorter than a row.
int64_t token_stride(const KvRows& r, const KvPartView& p);

// p not empty, num_tokens > 0
void ocl_kv_cache_write(device::Device& dev, const ocl::Buffer& cache, const LayerKvView& view,
                        const KvPartView& p, const ocl::Buffer& src, const ocl::Buffer& slot_mapping,
                        int num_tokens);
// num_tokens > 0, at least one part not empty, the rows of each non-empty part checked
void ocl_kv_cache_write_kv(device::Device& dev, const ocl::Buffer& cache, const LayerKvView& view,
                           const KvRows& k, const KvRows& v, const ocl::Buffer& slot_mapping,
                           int num_tokens);
// num_tokens > 0, every buffer and stride checked
void ocl_kv_cache_write_qkv(device::Device& dev, const ocl::Buffer& cache, const LayerKvView& view,
                            const QkvEpilogue& e, const ocl::Buffer& slot_mapping, int num_tokens);
// p not empty, num_tokens > 0
void ocl_kv_cache_gather(device::Device& dev, const ocl::Buffer& cache, const LayerKvView& view,
                         const KvPartView& p, const ocl::Buffer& slot_mapping, const ocl::Buffer& dst,
                         int num_tokens);

// A zero-filled buffer of `bytes` for the model's lifetime (huge pages where the device has them).
ocl::Buffer ocl_allocate_zeroed(device::Device& dev, size_t bytes);
// Blocking copy of b's first n bytes to dst.
void ocl_read(device::Device& dev, const ocl::Buffer& b, void* dst, size_t n);

}  // namespace specdec::kv
