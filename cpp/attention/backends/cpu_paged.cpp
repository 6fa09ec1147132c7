// CPU_PAGED: paged attention of the native CPU device (cpu/attention.h) behind the backend
// interface. Every layer kind the reference serves (causal, non-causal, sliding window, chunked
// local through the builder's virtual batches, softcap, sinks, GQA, MLA latent rows) in f32 for
// f32 / f16 / bf16 caches, recorded on the device: (token block, kv head, key chunk) items over the
// pool, then a combine per (token block, kv head) (flash-decoding). Always split, with key chunks at
// absolute positions: a token's result never depends on its batch (choosing the unsplit path for
// busy steps would make a decode alone and the same decode in a batch differ in the last bits).
#include <memory>
#include <vector>

#include "attention/backends/backends.h"
#include "cpu/attention.h"
#include "device/cpu_device.h"

namespace specdec::attn {
namespace {

BackendCapabilities cpu_paged_capabilities() {
  BackendCapabilities c;
  c.name = "CPU_PAGED";
  c.description = "native CPU paged attention (SIMD inner loops, split over keys at absolute chunks)";
  c.kv_cache_dtypes = {DType::kF32, DType::kF16, DType::kBF16};
  c.max_head_size = 1024;
  c.block_size_multiple_of = 1;
  c.is_mla = false;
  c.any_mla = true;  // reads MLA latent rows too (layout kMlaLatent for those)
  c.causal = true;
  c.non_causal = true;
  c.sliding_window = true;
  c.chunked_local = true;
  c.logit_softcap = true;
  c.sinks = true;
  c.separate_head_size_v = true;
  c.on_device = true;
  c.devices = {device::Kind::kCpu};
  c.kv_layout = kv::KvLayout::kKvMajor;
  c.also_reads = {kv::KvLayout::kBlockMajor};
  return c;
}

// What the recorded ops read after forward() returned: copies, shared by the ops of one call.
struct CallState {
  CommonAttentionMetadata md;
  AttentionLayerParams params;
  kv::LayerKvView view;
  cpu::AttentionCall call;
  cpu::AttentionPlan plan;
  std::vector<float> partials;
};

class CpuPagedBackend final : public AttentionBackend {
 public:
  const BackendCapabilities& capabilities() const override { return caps_; }

  void forward(device::Device& dev, const AttentionMetadata& md, const AttentionLayerParams& params,
               const kv::LayerKvView& view, const device::Buffer& cache,
               const device::Buffer& query, device::Buffer& output) const override {
    check_layer_call(md.host, params, view);
    check_forward_buffers(md.host, params, view, cache, query, output);
    if (md.host.num_actual_tokens == 0) return;
    device::CpuDevice& cd = device::cpu_of(dev);
    auto s = std::make_shared<CallState>();
    s->md = md.host;
    s->params = params;
    s->params.sinks = nullptr;
    s->params.quantized_output = nullptr;
    s->view = view;
    cpu::AttentionCall& c = s->call;
    c.md = &s->md;
    c.params = &s->params;
    c.view = &s->view;
    c.cache = reinterpret_cast<const uint8_t*>(cache.host());
    c.sinks =
        params.sinks != nullptr ? reinterpret_cast<const float*>(params.sinks->host()) : nullptr;
    c.query = reinterpret_cast<const float*>(query.host());
    c.out = reinterpret_cast<float*>(output.host());
    c.isa = cd.isa();
    s->plan = cpu::plan_attention(c);
    s->partials.resize(static_cast<size_t>(s->plan.partial_floats));
    cd.record("attention_partial", static_cast<int64_t>(s->plan.items.size()), 1,
              [s](int64_t i0, int64_t i1) {
                cpu::attention_partial(s->call, s->plan, s->partials.data(), i0, i1);
              });
    cd.record("attention_combine", static_cast<int64_t>(s->plan.outs.size()), 1,
              [s](int64_t o0, int64_t o1) {
                cpu::attention_combine(s->call, s->plan, s->partials.data(), o0, o1);
              });
  }

 private:
  BackendCapabilities caps_ = cpu_paged_capabilities();
};

}  // namespace

std::unique_ptr<AttentionBackend> make_cpu_paged_backend() {
  return std::make_unique<CpuPagedBackend>();
}

}  // namespace specdec::attn
