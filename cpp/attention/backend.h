// Attention backends: the interface every implementation offers, what it declares it can do,
// and what a layer requires. The selector (selector.h) matches the two and explains every
// rejection; the allocator views each layer's cache in the layout its backend declares.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ops/norm.h"  // ops::QuantizedOut
#include "attention/metadata.h"
#include "common/dtype.h"
#include "device/device.h"
#include "kv/layout.h"
#include "kv/spec.h"

namespace specdec::attn {

// What one attention layer needs from a backend.
struct AttentionRequirements {
  int head_size = 0;     // q/k head size (MLA: kv_lora_rank + qk_rope_head_dim)
  int head_size_v = 0;   // v / output head size (MLA: kv_lora_rank)
  int num_q_heads = 0;
  int num_kv_heads = 0;  // 1 for MLA
  DType kv_cache_dtype = DType::kF16;
  int block_size = 16;
  bool use_mla = false;
  bool use_non_causal = false;     // bidirectional (DFlash drafters)
  bool use_sliding_window = false;
  bool use_chunked_local = false;
  bool use_softcap = false;        // logit soft-capping
  bool use_sinks = false;          // learned per-head attention sinks
  // Set for a layer that reads another layer's cache: the backend must read that layout.
  std::optional<kv::KvLayout> required_layout;

  // ConfigError naming the first field out of range (sizes must be positive, num_q_heads a
  // multiple of num_kv_heads); the selector calls it before asking any backend.
  void validate() const;

  // From a layer's KV spec; num_q_heads must be a multiple of the spec's num_kv_heads
  // (ConfigError naming num_q_heads otherwise). MLA: head_size_v = kv_lora_rank.
  static AttentionRequirements from_spec(const kv::KvCacheSpec& spec, int num_q_heads,
                                         bool use_non_causal = false, bool use_softcap = false,
                                         bool use_sinks = false);
  std::string to_string() const;
};

// What a backend declares it implements (and tests).
struct BackendCapabilities {
  std::string name;                    // e.g. "OCL_PAGED"; matched case-insensitively
  std::string description;
  std::vector<DType> kv_cache_dtypes;
  std::vector<int> head_sizes;         // empty: any head size in [1, max_head_size]
  int max_head_size = 0;
  int block_size_multiple_of = 1;      // block_size % this == 0
  int max_block_size = 0;              // 0: any
  bool is_mla = false;                 // MLA latent caches (and only those)
  bool any_mla = false;                // serves MLA and non-MLA layers alike (REFERENCE)
  bool causal = true;
  bool non_causal = false;
  bool sliding_window = false;
  bool chunked_local = false;
  bool logit_softcap = false;
  bool sinks = false;
  bool separate_head_size_v = false;   // head_size_v != head_size (attention, not MLA)
  bool on_device = true;               // false: runs on the host (REFERENCE)
  // The device kinds it runs on (the priority lists offer it only there); empty: every kind
  // (REFERENCE reads and writes through the Device).
  std::vector<device::Kind> devices;
  // Writes the output quantised as well when AttentionLayerParams::quantized_output asks (the
  // output projection's int8 activations: one launch fewer per layer).
  bool quantized_output = false;
  kv::KvLayout kv_layout = kv::KvLayout::kKvMajor;  // the layout it allocates its caches in
  // Other attention layouts it can read (through the view's strides), e.g. a KV-sharing layer
  // reading a cache written by another backend.
  std::vector<kv::KvLayout> also_reads;
};

// Per-layer parameters of one attention call.
struct AttentionLayerParams {
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_size = 0;           // q/k (MLA: lora + rope)
  int head_size_v = 0;         // v / output (MLA: lora)
  float scale = 1.0f;          // applied to q.k
  float logit_softcap = 0.0f;  // 0: none; else s = softcap * tanh(s / softcap)
  int sliding_window = 0;      // 0: none; else a query at position p sees keys >= p - window + 1
  int attention_chunk_size = 0;  // 0: none; else a query at p sees keys >= floor(p / C) * C
  // [num_q_heads] f32 sink logits (an extra softmax term with no value), or null for none.
  const device::Buffer* sinks = nullptr;
  // Where a backend with capabilities().quantized_output also writes the output quantised with
  // one scale per QuantizedOut::scale_block values ([num_tokens, num_q_heads * head_size_v], the
  // bytes quant::quantize_activations would write); null: not asked. Others ignore it (the caller checks the capability).
  const ops::QuantizedOut* quantized_output = nullptr;

  // Parameters of a layer with `spec`: heads and head sizes, and the window or chunk of its kind.
  static AttentionLayerParams from_spec(const kv::KvCacheSpec& spec, int num_q_heads, float scale);
};

// Checks that a call's parameters and metadata agree with the layer's cache view (heads, head
// sizes, block size, and the window or chunk its spec declares); ConfigError naming the field.
// Every backend's forward() runs it first.
void check_layer_call(const CommonAttentionMetadata& md, const AttentionLayerParams& params,
                      const kv::LayerKvView& view);
// Checks that the buffers of a call are large enough: query [num_tokens, num_q_heads,
// head_size], output [num_tokens, num_q_heads, head_size_v] (f32), the cache tensor for the
// view, and the sinks when given; ConfigError naming the buffer.
void check_forward_buffers(const CommonAttentionMetadata& md, const AttentionLayerParams& params,
                           const kv::LayerKvView& view, const device::Buffer& cache,
                           const device::Buffer& query, const device::Buffer& output);

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  virtual const BackendCapabilities& capabilities() const = 0;
  const std::string& name() const { return capabilities().name; }
  kv::KvLayout kv_layout() const { return capabilities().kv_layout; }
  // The layout of a layer with `spec` on this backend: MLA caches always use kMlaLatent; a layer
  // that must read `required` gets it when this backend can read it.
  kv::KvLayout kv_layout_for(const kv::KvCacheSpec& spec,
                             std::optional<kv::KvLayout> required = std::nullopt) const;
  bool can_read(kv::KvLayout layout) const;
  // Whether it runs on devices of `kind` (capabilities().devices).
  bool runs_on(device::Kind kind) const;

  // Every reason this backend cannot serve `r`, in a fixed order; empty when it can.
  std::vector<std::string> validate(const AttentionRequirements& r) const;

  // The builder that turns common metadata into what this backend's kernel reads, once per step
  // for every layer of an attention group with this spec and num_q_heads (0: not known; the
  // backend then derives what it needs in forward()). Default: chunked-local specs get local
  // virtual batches; everything else is uploaded as is.
  virtual std::unique_ptr<AttentionMetadataBuilder> make_builder(const kv::KvCacheSpec& spec,
                                                                 int num_q_heads = 0) const;

  // One layer's attention for a ragged batch (prefill chunks and decodes together).
  //   md:     built by this backend's builder for the layer's KV-cache group
  //   view:   the layer's view of its cache tensor (in this backend's layout), cache: the tensor
  //   query:  [num_tokens, num_q_heads, head_size] f32
  //   output: [num_tokens, num_q_heads, head_size_v] f32
  // K/V of the new tokens must already be in the cache (kv_cache_write). Enqueued on dev, which
  // must be of a kind the backend runs on (runs_on).
  virtual void forward(device::Device& dev, const AttentionMetadata& md, const AttentionLayerParams& params,
                       const kv::LayerKvView& view, const device::Buffer& cache, const device::Buffer& query,
                       device::Buffer& output) const = 0;
};

}  // namespace specdec::attn
