// OCL_MLA: MLA latent attention (absorbed form) on the mla_latent layout, kernels in
// kernels/attention_mla.cl. Each token's keys are cut into splits of kSplitKeys keys (a fixed
// size: the splits depend on the token's own context length only); one work-group computes one
// split for up to 16 q heads at once, reading each latent row once for all of them, and a
// second kernel merges a token's splits in split order. Outputs are therefore bitwise the same
// whatever the rest of the batch. Big batches run in several launches so that the partial sums
// of one launch stay under kScratchBytes. MlaMetadataBuilder plans the launches and allocates
// the scratch once per step (the metadata's backend_data, reused by every layer of the attention
// group); metadata from another builder gets a plan and scratch for that call only.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "attention/backends/backends.h"
#include "common/errors.h"
#include "device/ocl_device.h"
#include "kv/cache_ops.h"

namespace specdec::attn {
namespace {

constexpr int kSplitKeys = 256;              // keys per split (part of the reduction order)
constexpr int kMaxHeadsPerGroup = 16;        // q heads served by one work-group
constexpr int64_t kScratchBytes = 32 << 20;  // partial sums of one launch, at most (>= 1 token)

BackendCapabilities mla_capabilities() {
  BackendCapabilities c;
  c.name = "OCL_MLA";
  c.description = "MLA latent attention";
  c.kv_cache_dtypes = {DType::kF32, DType::kF16, DType::kBF16};
  c.max_head_size = 1024;
  c.block_size_multiple_of = 1;
  c.is_mla = true;
  c.causal = true;
  c.non_causal = true;
  c.logit_softcap = true;
  c.sinks = true;
  c.on_device = true;
  c.devices = {device::Kind::kOpenCL};
  c.kv_layout = kv::KvLayout::kMlaLatent;
  return c;
}

// The largest divisor of num_q_heads that is at most kMaxHeadsPerGroup.
int heads_per_group(int num_q_heads) {
  for (int g = std::min(num_q_heads, kMaxHeadsPerGroup); g > 1; --g) {
    if (num_q_heads % g == 0) return g;
  }
  return 1;
}

std::string build_options(DType dtype, int lora, int rope, int hpg) {
  const std::string cache = kv::cache_dtype_define(dtype, "OCL_MLA");
  return str_cat(cache, " -DLORA=", lora, " -DROPE=", rope, " -DHPG=", hpg,
                 " -DSPLIT=", kSplitKeys);
}

// Keys visible to each token (the kernel's visible_keys on the host).
std::vector<int> visible_keys(const CommonAttentionMetadata& md) {
  std::vector<int> keys(static_cast<size_t>(md.num_actual_tokens), 0);
  for (int r = 0; r < md.num_reqs; ++r) {
    for (int t = md.query_start_loc[r]; t < md.query_start_loc[r + 1]; ++t) {
      const int pos = md.seq_lens[r] - md.query_len(r) + (t - md.query_start_loc[r]);
      keys[t] = md.causal ? pos + 1 : md.seq_lens[r];
    }
  }
  return keys;
}

int num_splits(int num_keys) { return num_keys > 0 ? (num_keys + kSplitKeys - 1) / kSplitKeys : 0; }

// Tokens [begin, end) of one launch and the most splits any of them has.
struct Launch {
  int begin = 0, end = 0, max_splits = 0;
};

// Consecutive token ranges whose partial sums (tokens * max_splits * split_bytes) fit the scratch.
std::vector<Launch> plan_launches(const std::vector<int>& keys, int64_t split_bytes) {
  std::vector<Launch> out;
  Launch cur;
  for (int t = 0; t < static_cast<int>(keys.size()); ++t) {
    const int ms = std::max(cur.max_splits, std::max(1, num_splits(keys[t])));
    if (cur.end > cur.begin &&
        int64_t{cur.end - cur.begin + 1} * ms * split_bytes > kScratchBytes) {
      out.push_back(cur);
      cur = Launch{t, t, 0};
    }
    cur.max_splits = std::max(cur.max_splits, std::max(1, num_splits(keys[t])));
    cur.end = t + 1;
  }
  if (cur.end > cur.begin) out.push_back(cur);
  return out;
}

void check_inputs(const AttentionMetadata& md, const AttentionLayerParams& p,
                  const kv::LayerKvView& view, const device::Buffer& cache, const device::Buffer& query,
                  const device::Buffer& output) {
  const kv::KvCacheSpec& s = view.spec;
  if (s.kind != kv::KvSpecKind::kMla || view.layout != kv::KvLayout::kMlaLatent) {
    throw UnsupportedError("OCL_MLA: layer " + view.layer_name + " is " + kv::kind_name(s.kind) +
                           " in layout " + kv::layout_name(view.layout) +
                           "; OCL_MLA serves only MLA caches in mla_latent");
  }
  SPECDEC_CHECK(p.num_kv_heads == 1, "num_kv_heads", p.num_kv_heads, "must be 1 for MLA");
  SPECDEC_CHECK(p.num_q_heads >= 1, "num_q_heads", p.num_q_heads, "must be at least 1");
  SPECDEC_CHECK(p.head_size == s.kv_lora_rank + s.qk_rope_head_dim && p.head_size <= 1024,
               "head_size", p.head_size,
               str_cat("must equal kv_lora_rank + qk_rope_head_dim = ",
                       s.kv_lora_rank + s.qk_rope_head_dim, " (at most 1024)"));
  SPECDEC_CHECK(p.head_size_v == s.kv_lora_rank, "head_size_v", p.head_size_v,
               str_cat("must equal kv_lora_rank = ", s.kv_lora_rank));
  if (p.sliding_window != 0 || p.attention_chunk_size != 0) {
    throw UnsupportedError("OCL_MLA: sliding window and chunked local attention not supported");
  }
  SPECDEC_CHECK(md.host.block_size == s.block_size, "block_size", md.host.block_size,
               str_cat("must equal the layer's block_size = ", s.block_size));
  check_forward_buffers(md.host, p, view, cache, query, output);
}

// Launches of one batch for one head count and latent size, with the scratch they share (in
// order on the queue). Kernels enqueued with the scratch keep it alive until they finish, and
// the scratch keeps its context alive (so the handle cannot name another context meanwhile).
struct MlaMetadata : BackendMetadata {
  cl_context context = nullptr;
  int num_q_heads = 0, kv_lora_rank = 0;
  std::vector<Launch> launches;
  device::Buffer acc;  // [tokens, max_splits, num_q_heads, kv_lora_rank] f32 (the largest launch)
  device::Buffer ml;   // [tokens, max_splits, num_q_heads, 2] f32

  bool serves(const ocl::Context& ctx, int heads, int lora) const {
    return context == ctx.get() && num_q_heads == heads && kv_lora_rank == lora;
  }
};

// The plan of `md` (at least one token, lora >= 1).
std::shared_ptr<const MlaMetadata> make_mla_metadata(device::Device& dev,
                                                     const CommonAttentionMetadata& md, int heads,
                                                     int lora) {
  const ocl::Context& ctx = ocl::context_of(dev);
  auto mm = std::make_shared<MlaMetadata>();
  mm->context = ctx.get();
  mm->num_q_heads = heads;
  mm->kv_lora_rank = lora;
  const int64_t split_bytes = int64_t{heads} * (lora + 2) * 4;  // partial acc + (m, l) of one split
  mm->launches = plan_launches(visible_keys(md), split_bytes);
  int64_t partials = 1;  // [tokens, max_splits, heads] of the largest launch
  for (const Launch& l : mm->launches)
    partials = std::max(partials, int64_t{l.end - l.begin} * l.max_splits * heads);
  mm->acc = dev.allocate(static_cast<size_t>(partials) * lora * sizeof(float));
  mm->ml = dev.allocate(static_cast<size_t>(partials) * 2 * sizeof(float));
  return mm;
}

// The default upload, then the launch plan for the layers of an attention group with
// num_q_heads q heads (none when that is unknown).
class MlaMetadataBuilder : public AttentionMetadataBuilder {
 public:
  MlaMetadataBuilder(std::unique_ptr<AttentionMetadataBuilder> base, const kv::KvCacheSpec& spec,
                     int num_q_heads)
      : base_(std::move(base)), spec_(spec), num_q_heads_(num_q_heads) {}

  AttentionMetadata build(device::Device& dev,
                          const CommonAttentionMetadata& common) const override {
    AttentionMetadata md = base_->build(dev, common);
    if (num_q_heads_ >= 1 && spec_.kind == kv::KvSpecKind::kMla && spec_.kv_lora_rank >= 1 &&
        md.host.num_actual_tokens > 0) {
      md.backend_data =
          make_mla_metadata(dev, md.host, num_q_heads_, spec_.kv_lora_rank);
    }
    return md;
  }

 private:
  std::unique_ptr<AttentionMetadataBuilder> base_;
  kv::KvCacheSpec spec_;
  int num_q_heads_;
};

class OclMlaBackend final : public AttentionBackend {
 public:
  const BackendCapabilities& capabilities() const override { return caps_; }

  std::unique_ptr<AttentionMetadataBuilder> make_builder(const kv::KvCacheSpec& spec,
                                                         int num_q_heads) const override {
    return std::make_unique<MlaMetadataBuilder>(AttentionBackend::make_builder(spec, num_q_heads),
                                                spec, num_q_heads);
  }

  void forward(device::Device& dev, const AttentionMetadata& md, const AttentionLayerParams& params,
               const kv::LayerKvView& view, const device::Buffer& cache, const device::Buffer& query,
               device::Buffer& output) const override;

 private:
  BackendCapabilities caps_ = mla_capabilities();  // no other state: per-step data is in md
};

void OclMlaBackend::forward(device::Device& dev, const AttentionMetadata& md,
                            const AttentionLayerParams& params, const kv::LayerKvView& view,
                            const device::Buffer& cache, const device::Buffer& query,
                            device::Buffer& output) const {
  ocl::Context& ctx = ocl::context_of(dev);
  check_inputs(md, params, view, cache, query, output);  // first: what OCL_MLA cannot do at all
  check_layer_call(md.host, params, view);
  const kv::KvCacheSpec& s = view.spec;
  const int lora = s.kv_lora_rank, heads = params.num_q_heads, hpg = heads_per_group(heads);
  if (md.host.num_actual_tokens == 0 || lora == 0) return;  // nothing to output
  // the step's plan when it was built for these heads, else one for this call
  auto mm = std::dynamic_pointer_cast<const MlaMetadata>(md.backend_data);
  if (mm == nullptr || !mm->serves(ctx, heads, lora))
    mm = make_mla_metadata(dev, md.host, heads, lora);

  const std::string options = build_options(s.dtype, lora, s.qk_rope_head_dim, hpg);
  ocl::Kernel split = ctx.kernel("attention_mla", "mla_attention_split", options);
  ocl::Kernel merge = ctx.kernel("attention_mla", "mla_attention_merge", options);
  const cl_int causal = md.host.causal ? 1 : 0;
  split.arg(0, query)
      .arg(1, cache)
      .arg(2, md.block_table)
      .arg(3, md.query_start_loc)
      .arg(4, md.seq_lens)
      .arg(5, md.token_request_buf)
      .arg(6, mm->acc)
      .arg(7, mm->ml)
      .arg(10, cl_int{heads})
      .arg(11, cl_int{md.host.max_blocks_per_req})
      .arg(12, cl_int{s.block_size})
      .arg(13, cl_long{view.k.offset})
      .arg(14, cl_long{view.k.stride_block})
      .arg(15, cl_long{view.k.stride_slot})
      .arg(16, cl_float{params.scale})
      .arg(17, cl_float{params.logit_softcap})
      .arg(18, causal);
  merge.arg(0, mm->acc)
      .arg(1, mm->ml)
      .arg(2, md.query_start_loc)
      .arg(3, md.seq_lens)
      .arg(4, md.token_request_buf)
      .arg(5, params.sinks != nullptr ? *params.sinks : query)
      .arg(6, output)
      .arg(9, cl_int{heads})
      .arg(10, causal)
      .arg(11, cl_int{params.sinks != nullptr ? 1 : 0});
  for (const Launch& l : mm->launches) {
    split.arg(8, cl_int{l.begin}).arg(9, cl_int{l.max_splits});
    const size_t global[3] = {static_cast<size_t>(l.max_splits), static_cast<size_t>(heads / hpg),
                              static_cast<size_t>(l.end - l.begin)};
    const size_t local[3] = {1, 1, 1};
    split.launch(ctx, 3, global, local);
    merge.arg(7, cl_int{l.begin}).arg(8, cl_int{l.max_splits});
    const size_t merge_global[2] = {static_cast<size_t>(heads),
                                    static_cast<size_t>(l.end - l.begin)};
    const size_t merge_local[2] = {1, 1};
    merge.launch(ctx, 2, merge_global, merge_local);
  }
}

}  // namespace

std::unique_ptr<AttentionBackend> make_ocl_mla_backend() {
  return std::make_unique<OclMlaBackend>();
}

}  // namespace specdec::attn
