// OCL_FLASH: split-KV ("flash decoding") attention over a block_major cache, with tiles of query
// tokens for verify steps and prefill chunks (kernels/attention_flash.cl).
//
// The host plans each batch once per (metadata, window, chunk, shape) and caches the plan with its
// device copy, so every layer of a step reuses it: work items of up to `tile` consecutive query
// tokens of one request times the splits of their key ranges, and for each token its number of
// splits and where its partials go. Splits sit at absolute key positions (multiples of
// split_keys), so a token's splits, and hence its result bit for bit, depend only on its own
// position (and window), never on the batch. Big batches are cut into several launches so that
// the partials fit a bounded scratch buffer; tokens are independent, so cutting changes nothing.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "attention/backends/backends.h"
#include "common/errors.h"
#include "common/math.h"

namespace specdec::attn {
namespace {

constexpr int kSplitKeys = 256;                       // keys per split, rounded up to whole blocks
constexpr int64_t kScratchBytes = int64_t{64} << 20;  // partials of one launch (at least one tile)
constexpr size_t kMaxCachedPlans = 8;                 // e.g. several KV-cache groups in one step
constexpr float kLog2e = 1.4426950408889634f;

// Keys per split: kSplitKeys rounded up to whole blocks; SPECDEC_FLASH_SPLIT_KEYS overrides (a
// tuning value: it changes the rounding of the results, so keep it fixed for a whole run).
int split_keys_for(int block_size) {
  int keys = kSplitKeys;
  if (const char* env = std::getenv("SPECDEC_FLASH_SPLIT_KEYS")) keys = std::max(1, std::atoi(env));
  return static_cast<int>(cdiv(keys, block_size)) * block_size;
}

// Local memory of one work-group (see the kernel's __local arrays): q and acc rows, the split's
// scores, partial dot products, one block of converted V rows.
int64_t local_bytes(int tile, int group, int head, int block, int split_keys) {
  const int64_t rows = int64_t{tile} * group;
  return rows * head * 4 * 2 + rows * split_keys * 4 + rows * 16 * 4 + int64_t{block} * head * 4;
}

// Query tokens per work item: at most 32 q rows (tile * group) per work-group, fewer where the
// device's local memory is small. A fixed value per (device, shape): results never depend on it.
int tile_tokens_for(const ocl::DeviceInfo& device, int group, int head, int block, int split_keys) {
  int tile = std::clamp(32 / group, 1, 8);
  while (tile > 1 && local_bytes(tile, group, head, block, split_keys) > device.local_mem_bytes)
    --tile;
  if (local_bytes(tile, group, head, block, split_keys) > device.local_mem_bytes) {
    throw UnsupportedError(str_cat("OCL_FLASH: a work-group needs ",
                                   local_bytes(tile, group, head, block, split_keys),
                                   " bytes of local memory, device ", device.name, " has ",
                                   device.local_mem_bytes, "; use OCL_PAGED"));
  }
  return tile;
}

// Bytes of partials one launch may use; SPECDEC_FLASH_SCRATCH_BYTES overrides (the tests use a
// small value to cut batches into several launches). A tile that needs more gets its own launch.
int64_t scratch_bytes() {
  if (const char* env = std::getenv("SPECDEC_FLASH_SCRATCH_BYTES"))
    return std::max<int64_t>(1, std::atoll(env));
  return kScratchBytes;
}

// Lowest visible key of the query at position pos (as first_key in the kernel).
int first_key(int pos, int window, int chunk) {
  int lo = 0;
  if (window > 0) lo = std::max(lo, pos - window + 1);
  if (chunk > 0) lo = std::max(lo, pos / chunk * chunk);
  return lo;
}

int num_splits(int pos, int window, int chunk, int split_keys) {
  return pos / split_keys - first_key(pos, window, chunk) / split_keys + 1;
}

// Work of one batch: items (first token, tokens, split, 0), per token (partial base, splits),
// and the launches that cut it (partial bases restart at 0 in every launch).
struct FlashPlan {
  struct Launch {
    int item_begin = 0, item_end = 0, token_begin = 0, token_end = 0;
    bool merge = false;  // some token of the launch has several splits
  };
  std::vector<int32_t> items;       // [num_items, 4]
  std::vector<int32_t> token_part;  // [num_tokens, 2]
  std::vector<Launch> launches;
  int64_t max_partials = 0;  // most partials of one launch
};

FlashPlan make_plan(const CommonAttentionMetadata& md, int window, int chunk, int split_keys,
                    int tile, int64_t partials_per_launch) {
  FlashPlan plan;
  plan.token_part.assign(static_cast<size_t>(md.num_actual_tokens) * 2, 0);
  FlashPlan::Launch cur;
  int64_t partials = 0;
  for (int r = 0; r < md.num_reqs; ++r) {
    const int qs = md.query_start_loc[r], q_len = md.query_len(r);
    for (int t0 = qs; t0 < qs + q_len; t0 += tile) {
      const int nt = std::min(tile, qs + q_len - t0);
      const int p0 = md.seq_lens[r] - q_len + (t0 - qs);
      int64_t tile_partials = 0;
      for (int t = 0; t < nt; ++t) {
        const int n = num_splits(p0 + t, window, chunk, split_keys);
        tile_partials += n > 1 ? n : 0;
      }
      if (partials > 0 && partials + tile_partials > partials_per_launch) {  // start a new launch
        plan.launches.push_back(cur);
        cur = {cur.item_end, cur.item_end, t0, t0, false};
        partials = 0;
      }
      for (int t = 0; t < nt; ++t) {
        const int n = num_splits(p0 + t, window, chunk, split_keys);
        plan.token_part[2 * static_cast<size_t>(t0 + t)] =
            static_cast<int32_t>(n > 1 ? partials : 0);
        plan.token_part[2 * static_cast<size_t>(t0 + t) + 1] = n;
        partials += n > 1 ? n : 0;
        cur.merge = cur.merge || n > 1;
      }
      for (int s = first_key(p0, window, chunk) / split_keys; s <= (p0 + nt - 1) / split_keys;
           ++s) {
        plan.items.insert(plan.items.end(), {t0, nt, s, 0});
      }
      cur.item_end = static_cast<int>(plan.items.size() / 4);
      cur.token_end = t0 + nt;
      plan.max_partials = std::max(plan.max_partials, partials);
    }
  }
  if (cur.item_end > cur.item_begin) plan.launches.push_back(cur);
  return plan;
}

std::string dtype_define(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "-DCACHE_F32";
    case DType::kF16:
      return "-DCACHE_F16";
    case DType::kBF16:
      return "-DCACHE_BF16";
    case DType::kI8:
      break;
  }
  throw UnsupportedError("OCL_FLASH: kv_cache_dtype " + dtype_name(dtype) +
                         " not supported (f32, f16, bf16)");
}

// A released buffer that enqueued kernels still use lives until they finish (OpenCL rules).
void ensure_size(ocl::Context& ctx, ocl::Buffer& buf, size_t bytes) {
  if (buf.get() == nullptr || buf.size_bytes() < bytes)
    buf = ocl::Buffer(ctx, std::max<size_t>(bytes, 64));
}

class OclFlashBackend : public AttentionBackend {
 public:
  OclFlashBackend();
  const BackendCapabilities& capabilities() const override { return caps_; }
  void forward(ocl::Context& ctx, const AttentionMetadata& md, const AttentionLayerParams& params,
               const kv::LayerKvView& view, const ocl::Buffer& cache, const ocl::Buffer& query,
               ocl::Buffer& output) const override;

 private:
  // A plan with its device copies, uploaded without blocking the host: the host vectors must
  // outlive the transfer, so destruction waits for its event.
  struct CachedPlan {
    std::vector<int64_t> key;
    FlashPlan plan;
    ocl::Buffer items, token_part;
    cl_event uploaded = nullptr;
    uint64_t last_use = 0;
    CachedPlan() = default;
    CachedPlan(const CachedPlan&) = delete;
    CachedPlan& operator=(const CachedPlan&) = delete;
    ~CachedPlan() {
      if (uploaded != nullptr) {
        clWaitForEvents(1, &uploaded);
        clReleaseEvent(uploaded);
      }
    }
  };
  void check_inputs(const AttentionMetadata& md, const AttentionLayerParams& params,
                    const kv::LayerKvView& view, const ocl::Buffer& query,
                    const ocl::Buffer& output) const;
  const CachedPlan& plan_for(ocl::Context& ctx, const CommonAttentionMetadata& md, int window,
                             int chunk, int split_keys, int tile,
                             int64_t partials_per_launch) const;

  BackendCapabilities caps_;
  // Single-threaded use (like the context's kernel objects): recent plans with their device
  // copies and grow-only scratch for the partials, all tied to the context ctx_.
  mutable cl_context ctx_ = nullptr;
  mutable std::vector<std::unique_ptr<CachedPlan>> plans_;
  mutable uint64_t uses_ = 0;
  mutable ocl::Buffer part_acc_, part_ml_;
};

OclFlashBackend::OclFlashBackend() {
  caps_.name = "OCL_FLASH";
  caps_.description = "tiled online-softmax attention with split-KV decoding";
  caps_.kv_cache_dtypes = {DType::kF32, DType::kF16, DType::kBF16};
  caps_.head_sizes = {64, 128, 256};
  caps_.max_head_size = 256;
  caps_.block_size_multiple_of = 16;
  caps_.causal = true;
  caps_.non_causal = false;  // the selector relies on this: non-causal drafters go elsewhere
  caps_.sliding_window = true;
  caps_.chunked_local = true;  // through the default builder's local virtual batches
  caps_.logit_softcap = true;
  caps_.sinks = false;
  caps_.separate_head_size_v = false;
  caps_.on_device = true;
  caps_.kv_layout = kv::KvLayout::kBlockMajor;
}

void OclFlashBackend::check_inputs(const AttentionMetadata& md, const AttentionLayerParams& p,
                                   const kv::LayerKvView& view, const ocl::Buffer& query,
                                   const ocl::Buffer& output) const {
  const int d = p.head_size;
  if (!md.host.causal) throw UnsupportedError("OCL_FLASH: non-causal attention not supported");
  if (p.sinks != nullptr) throw UnsupportedError("OCL_FLASH: attention sinks not supported");
  check_config(view.layout == kv::KvLayout::kBlockMajor, "view.layout",
               kv::layout_name(view.layout), "OCL_FLASH reads block_major caches");
  check_config(
      std::find(caps_.head_sizes.begin(), caps_.head_sizes.end(), d) != caps_.head_sizes.end(),
      "head_size", d, "OCL_FLASH supports 64, 128, 256");
  check_config(p.head_size_v == d, "head_size_v", p.head_size_v,
               str_cat("must equal head_size = ", d));
  check_config(p.num_kv_heads >= 1 && p.num_q_heads >= 1 && p.num_q_heads % p.num_kv_heads == 0,
               "num_q_heads", p.num_q_heads,
               str_cat("must be a positive multiple of num_kv_heads = ", p.num_kv_heads));
  check_config(view.k.num_heads == p.num_kv_heads && view.k.width == d && view.v.width == d, "view",
               str_cat(view.k.num_heads, " kv heads of ", view.k.width, "/", view.v.width),
               str_cat("must match num_kv_heads = ", p.num_kv_heads, " and head_size = ", d));
  check_config(view.spec.block_size % 16 == 0, "block_size", view.spec.block_size,
               "must be a multiple of 16");
  check_config(md.host.block_size == view.spec.block_size, "metadata.block_size",
               md.host.block_size,
               str_cat("must equal the cache's block_size = ", view.spec.block_size));
  check_config(view.k.stride_slot == d && view.v.stride_slot == d &&
                   view.k.stride_block == view.v.stride_block &&
                   view.k.stride_head == view.v.stride_head,
               "view", view.layer_name, "strides are not those of a block_major cache");
  check_config(p.sliding_window >= 0, "sliding_window", p.sliding_window, "must be >= 0");
  check_config(p.attention_chunk_size >= 0, "attention_chunk_size", p.attention_chunk_size,
               "must be >= 0");
  const size_t rows =
      static_cast<size_t>(md.host.num_actual_tokens) * p.num_q_heads * d * sizeof(float);
  check_config(query.size_bytes() >= rows, "query", str_cat(query.size_bytes(), " bytes"),
               str_cat("must hold num_tokens * num_q_heads * head_size floats (", rows, " bytes)"));
  check_config(output.size_bytes() >= rows, "output", str_cat(output.size_bytes(), " bytes"),
               str_cat("must hold num_tokens * num_q_heads * head_size floats (", rows, " bytes)"));
}

const OclFlashBackend::CachedPlan& OclFlashBackend::plan_for(ocl::Context& ctx,
                                                             const CommonAttentionMetadata& md,
                                                             int window, int chunk, int split_keys,
                                                             int tile,
                                                             int64_t partials_per_launch) const {
  if (ctx.get() != ctx_) {
    plans_.clear();
    part_acc_ = ocl::Buffer();
    part_ml_ = ocl::Buffer();
    ctx_ = ctx.get();
  }
  std::vector<int64_t> key = {window, chunk, split_keys, tile, partials_per_launch, md.num_reqs};
  key.insert(key.end(), md.query_start_loc.begin(), md.query_start_loc.end());
  key.insert(key.end(), md.seq_lens.begin(), md.seq_lens.end());
  for (auto& c : plans_) {
    if (c->key == key) {
      c->last_use = ++uses_;
      return *c;
    }
  }
  if (plans_.size() >= kMaxCachedPlans) {  // replace the least recently used
    plans_.erase(std::min_element(plans_.begin(), plans_.end(), [](const auto& a, const auto& b) {
      return a->last_use < b->last_use;
    }));
  }
  CachedPlan& c = *plans_.emplace_back(std::make_unique<CachedPlan>());
  c.key = std::move(key);
  c.plan = make_plan(md, window, chunk, split_keys, tile, partials_per_launch);
  const size_t items_bytes = c.plan.items.size() * sizeof(int32_t);
  const size_t parts_bytes = c.plan.token_part.size() * sizeof(int32_t);
  c.items = ocl::Buffer(ctx, items_bytes);
  c.token_part = ocl::Buffer(ctx, parts_bytes);
  // in-order queue: the kernels that read them run after both writes; the event of the second
  // one marks both done (forward() returns early for an empty batch: neither is empty here)
  ocl::check(clEnqueueWriteBuffer(ctx.queue(), c.items.get(), CL_FALSE, 0, items_bytes,
                                  c.plan.items.data(), 0, nullptr, nullptr),
             "clEnqueueWriteBuffer", "OCL_FLASH work items");
  ocl::check(clEnqueueWriteBuffer(ctx.queue(), c.token_part.get(), CL_FALSE, 0, parts_bytes,
                                  c.plan.token_part.data(), 0, nullptr, &c.uploaded),
             "clEnqueueWriteBuffer", "OCL_FLASH token splits");
  c.last_use = ++uses_;
  return c;
}

void OclFlashBackend::forward(ocl::Context& ctx, const AttentionMetadata& md,
                              const AttentionLayerParams& p, const kv::LayerKvView& view,
                              const ocl::Buffer& cache, const ocl::Buffer& query,
                              ocl::Buffer& output) const {
  check_inputs(md, p, view, query, output);
  if (md.host.num_actual_tokens == 0) return;
  const int d = p.head_size, hq = p.num_q_heads, hkv = p.num_kv_heads, group = hq / hkv;
  const int bs = view.spec.block_size, split_keys = split_keys_for(bs);
  const int tile = tile_tokens_for(ctx.device(), group, d, bs, split_keys);
  const int64_t row_bytes = int64_t{hq} * (d + 2) * static_cast<int64_t>(sizeof(float));
  const CachedPlan& c = plan_for(ctx, md.host, p.sliding_window, p.attention_chunk_size, split_keys,
                                 tile, std::max<int64_t>(1, scratch_bytes() / row_bytes));
  ensure_size(ctx, part_acc_, static_cast<size_t>(c.plan.max_partials) * hq * d * sizeof(float));
  ensure_size(ctx, part_ml_, static_cast<size_t>(c.plan.max_partials) * hq * 2 * sizeof(float));

  // software prefetch two blocks ahead: CPU devices only (-DPF_DIST=0 compiles it out)
  const std::string options =
      str_cat(dtype_define(view.spec.dtype), " -DHEAD=", d, " -DGROUP=", group, " -DBLOCK=", bs,
              " -DTILE=", tile, " -DSPLIT_KEYS=", split_keys,
              " -DPF_DIST=", ctx.device().type == "cpu" ? 2 : 0);
  // base-2 scores: q pre-scaled by scale * log2(e); with a softcap, s2 = softcap * log2(e) *
  // tanh(q.k * scale / softcap)
  const float softcap = p.logit_softcap;
  const float q_scale = softcap > 0 ? p.scale / softcap : p.scale * kLog2e;
  const float softcap_log2 = softcap > 0 ? softcap * kLog2e : 0.0f;
  ocl::Kernel split = ctx.kernel("attention_flash", "flash_attn_split", options);
  ocl::Kernel merge = ctx.kernel("attention_flash", "flash_attn_merge", options);
  const size_t local[2] = {1, 1};
  for (const FlashPlan::Launch& l : c.plan.launches) {
    cl_uint i = 0;
    auto arg = [&split, &i](const auto& value) { split.arg(i++, value); };
    arg(query);
    arg(cache);
    arg(md.block_table);
    arg(md.query_start_loc);
    arg(md.seq_lens);
    arg(md.token_request_buf);
    arg(c.items);
    arg(c.token_part);
    arg(output);
    arg(part_acc_);
    arg(part_ml_);
    arg(cl_int{l.item_begin});
    arg(cl_int{md.host.max_blocks_per_req});
    arg(cl_long{view.k.offset});
    arg(cl_long{view.v.offset});
    arg(cl_long{view.k.stride_block});
    arg(cl_long{view.k.stride_head});
    arg(q_scale);
    arg(softcap_log2);
    arg(cl_int{p.sliding_window});
    arg(cl_int{p.attention_chunk_size});
    const size_t global[2] = {static_cast<size_t>(l.item_end - l.item_begin),
                              static_cast<size_t>(hkv)};
    split.launch(ctx, 2, global, local);
    if (!l.merge) continue;
    merge.arg(0, c.token_part).arg(1, part_acc_).arg(2, part_ml_).arg(3, output);
    merge.arg(4, cl_int{l.token_begin});
    const size_t merge_global[2] = {static_cast<size_t>(hq),
                                    static_cast<size_t>(l.token_end - l.token_begin)};
    merge.launch(ctx, 2, merge_global, local);
  }
}

}  // namespace

std::unique_ptr<AttentionBackend> make_ocl_flash_backend() {
  return std::make_unique<OclFlashBackend>();
}

}  // namespace specdec::attn
