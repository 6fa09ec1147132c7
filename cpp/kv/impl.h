// The KV-cache ops' per-device implementations, called by kv/cache_ops.cpp after the checks
// (OpenCL: kv/ocl_cache_ops.cpp). Arguments are checked already.
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
void ocl_kv_cache_write(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                        const KvPartView& p, const device::Buffer& src, const device::Buffer& slot_mapping,
                        int num_tokens);
// num_tokens > 0, at least one part not empty, the rows of each non-empty part checked
void ocl_kv_cache_write_kv(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                           const KvRows& k, const KvRows& v, const device::Buffer& slot_mapping,
                           int num_tokens);
// num_tokens > 0, every buffer and stride checked
void ocl_kv_cache_write_qkv(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                            const QkvEpilogue& e, const device::Buffer& slot_mapping, int num_tokens);
// p not empty, num_tokens > 0
void ocl_kv_cache_gather(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                         const KvPartView& p, const device::Buffer& slot_mapping, const device::Buffer& dst,
                         int num_tokens);


// The native CPU device (kv/cpu_*.cpp): the same arguments, recorded on the device.
void cpu_kv_cache_write(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                        const KvPartView& p, const device::Buffer& src, const device::Buffer& slot_mapping,
                        int num_tokens);
void cpu_kv_cache_write_kv(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                           const KvRows& k, const KvRows& v, const device::Buffer& slot_mapping,
                           int num_tokens);
void cpu_kv_cache_write_qkv(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                            const QkvEpilogue& e, const device::Buffer& slot_mapping, int num_tokens);
void cpu_kv_cache_gather(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                         const KvPartView& p, const device::Buffer& slot_mapping, const device::Buffer& dst,
                         int num_tokens);

}  // namespace specdec::kv
