// Factories of the built-in attention backends (one file each under backends/).
#pragma once

#include <memory>

#include "attention/backend.h"

namespace specdec::attn {

// Plain C++ on host memory: supports everything, the oracle of the tests, lowest priority.
std::unique_ptr<AttentionBackend> make_reference_backend();
// General OpenCL paged attention (kv_major layout).
std::unique_ptr<AttentionBackend> make_ocl_paged_backend();
// Tiled online-softmax attention with split-KV decoding, for common shapes (block_major layout).
std::unique_ptr<AttentionBackend> make_ocl_flash_backend();
// MLA latent attention (mla_latent layout).
std::unique_ptr<AttentionBackend> make_ocl_mla_backend();
// Native CPU paged attention (kv_major layout; MLA latent rows too), on the native CPU device.
std::unique_ptr<AttentionBackend> make_cpu_paged_backend();

}  // namespace specdec::attn
