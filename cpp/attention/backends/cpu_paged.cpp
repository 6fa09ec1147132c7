// CPU_PAGED: paged attention of the native CPU device (cpu/attention.h) behind the backend
// interface. Every layer kind the reference serves (causal, non-causal, sliding window, chunked
// local through the builder's virtual batches, softcap, sinks, GQA, MLA latent rows) in f32 for
// f32 / f16 / bf16 caches, recorded on the device as one op: (token block, kv head, key chunk)
// items taken by the pool's threads from a shared counter, the largest first, and the thread that
// finishes a (token block, kv head)'s last chunk combines it (flash-decoding; no barrier between
// the parts and the combine), quantising the combined rows for the output projection when asked
// (capabilities().quantized_output). Always split, with key chunks at absolute positions: a
// token's result never depends on its batch (choosing the unsplit path for busy steps would make a
// decode alone and the same decode in a batch differ in the last bits).
#include <atomic>
#include <memory>
#include <vector>

#include "attention/backends/backends.h"
#include "common/errors.h"
#include "cpu/attention.h"
#include "device/cpu_device.h"
#include "ops/cpu_common.h"

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
  c.quantized_output = true;  // head_size_v a multiple of the scale block
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
  std::unique_ptr<std::atomic<int32_t>[]> pending;  // per Out: its parts still to come
  cpu::QuantOut quantized;
  bool quantize = false;
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
    if (const ops::QuantizedOut* qo = params.quantized_output) {
      SPECDEC_CHECK(qo->scale_block > 0 && params.head_size_v % qo->scale_block == 0, "quantized_output",
                    str_cat("head_size_v ", params.head_size_v, ", scale block ", qo->scale_block),
                    "CPU_PAGED quantises its output only when head_size_v is a multiple of the scale block");
      ops::check_quantized_out(*qo, md.host.num_actual_tokens,
                               int64_t{params.num_q_heads} * params.head_size_v, "quantized_output");
      s->quantized = ops::quant_out_of(*qo);
      s->quantize = true;
    }
    s->plan = cpu::plan_attention(c);
    s->partials.resize(static_cast<size_t>(s->plan.partial_floats));
    s->pending = std::make_unique<std::atomic<int32_t>[]>(s->plan.outs.size());
    cpu::reset_pending(s->plan, s->pending.get());
    cd.record(
        "attention", static_cast<int64_t>(s->plan.items.size()), 1,
        [s](int64_t i0, int64_t i1) {
          cpu::attention_fused(s->call, s->plan, s->partials.data(), s->pending.get(),
                               s->quantize ? &s->quantized : nullptr, i0, i1);
        },
        cpu::Program::Schedule::kDynamic);
  }

 private:
  BackendCapabilities caps_ = cpu_paged_capabilities();
};

}  // namespace

std::unique_ptr<AttentionBackend> make_cpu_paged_backend() {
  return std::make_unique<CpuPagedBackend>();
}

}  // namespace specdec::attn
