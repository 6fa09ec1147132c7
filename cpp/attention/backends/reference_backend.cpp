// REFERENCE: attention_ref (attention/reference.cpp) behind the backend interface. Copies the
// cache, the query and the sinks to the host through the device (blocking reads: a sync point,
// correct on any device), computes there and writes the output back. Slow by design: the oracle
// of the tests and the backend of last resort.
#include <memory>
#include <vector>

#include "attention/backends/backends.h"
#include "attention/reference.h"
#include "common/errors.h"

namespace specdec::attn {
namespace {

BackendCapabilities reference_capabilities() {
  BackendCapabilities c;
  c.name = "REFERENCE";
  c.description = "plain C++ on the host (slow; the tests' oracle)";
  c.kv_cache_dtypes = {DType::kF32, DType::kF16, DType::kBF16};
  c.max_head_size = 1024;
  c.block_size_multiple_of = 1;
  c.is_mla = false;
  c.any_mla = true;  // attention_ref reads MLA latent rows too (layout kMlaLatent for those)
  c.causal = true;
  c.non_causal = true;
  c.sliding_window = true;
  c.chunked_local = true;  // the default builder's virtual batches; attention_ref also clips
  c.logit_softcap = true;
  c.sinks = true;
  c.separate_head_size_v = true;
  c.on_device = false;
  c.devices = {};  // every kind: it only reads and writes through the device
  c.kv_layout = kv::KvLayout::kKvMajor;
  c.also_reads = {kv::KvLayout::kBlockMajor};  // attention_ref reads through the view's strides
  return c;
}

class ReferenceBackend final : public AttentionBackend {
 public:
  const BackendCapabilities& capabilities() const override { return caps_; }

  void forward(device::Device& dev, const AttentionMetadata& md, const AttentionLayerParams& params,
               const kv::LayerKvView& view, const device::Buffer& cache, const device::Buffer& query,
               device::Buffer& output) const override {
    const CommonAttentionMetadata& host = md.host;
    check_layer_call(host, params, view);
    const size_t num_tokens = static_cast<size_t>(host.num_actual_tokens);
    const size_t n_q = num_tokens * params.num_q_heads * params.head_size;
    const size_t n_out = num_tokens * params.num_q_heads * params.head_size_v;
    check_forward_buffers(host, params, view, cache, query, output);
    if (n_out == 0) return;
    std::vector<uint8_t> raw(cache.size_bytes());
    dev.read(cache, raw.data(), raw.size());
    std::vector<float> q(n_q);
    if (n_q > 0) dev.read(query, q.data(), n_q * sizeof(float));
    std::vector<float> sinks;
    if (params.sinks != nullptr) {
      sinks.resize(static_cast<size_t>(params.num_q_heads));
      SPECDEC_CHECK(params.sinks->size_bytes() >= sinks.size() * sizeof(float), "sinks",
                   str_cat(params.sinks->size_bytes(), " bytes"),
                   str_cat("must hold num_q_heads = ", params.num_q_heads, " floats"));
      dev.read(*params.sinks, sinks.data(), sinks.size() * sizeof(float));
    }
    const std::vector<float> out = attention_ref(host, params, sinks, view, raw, q);
    dev.write(output, out.data(), out.size() * sizeof(float));
  }

 private:
  BackendCapabilities caps_ = reference_capabilities();
};

}  // namespace

std::unique_ptr<AttentionBackend> make_reference_backend() {
  return std::make_unique<ReferenceBackend>();
}

}  // namespace specdec::attn
