// OCL_FLASH: split-KV ("flash decoding") attention over a block_major cache, with tiles of query
// tokens for verify steps and prefill chunks (kernels/attention_flash.cl).
//
// The launch plan of a batch is built once per step by FlashMetadataBuilder and rides along as
// the metadata's backend_data, so every layer of the attention group reuses it: work items of up
// to `tile` consecutive query tokens of one request times the splits of their key ranges, and for
// each token its number of splits and where its partials go, with their device copies and the
// scratch for the partials. Splits sit at absolute key positions (multiples of split_keys), so a
// token's splits, and hence its result bit for bit, depend only on its own position (and window),
// never on the batch. Big batches are cut into several launches so that the partials fit a
// bounded scratch buffer; tokens are independent, so cutting changes nothing. Metadata from
// another builder (or one that did not know num_q_heads) gets a plan for that call only.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <memory>
#include <string>
#include <vector>

#include "attention/backends/backends.h"
#include "common/errors.h"
#include "device/ocl_device.h"
#include "kv/cache_ops.h"
#include "common/math.h"

namespace specdec::attn {
namespace {

constexpr int kSplitKeys = 256;                       // keys per split, rounded up to whole blocks
constexpr int64_t kScratchBytes = int64_t{64} << 20;  // partials of one launch (at least one tile)
constexpr float kLog2e = 1.4426950408889634f;

// Keys per split: kSplitKeys rounded up to whole blocks; SPECDEC_FLASH_SPLIT_KEYS overrides (a
// tuning value: it changes the rounding of the results, so keep it fixed for a whole run).
int split_keys_for(int block_size) {
  static const int keys = [] {  // read once per process
    const char* env = std::getenv("SPECDEC_FLASH_SPLIT_KEYS");
    return env != nullptr ? std::max(1, std::atoi(env)) : kSplitKeys;
  }();
  return static_cast<int>(cdiv(keys, block_size)) * block_size;
}

// Bytes of partials one launch may use; SPECDEC_FLASH_SCRATCH_BYTES overrides (the tests use a
// small value to cut batches into several launches, set while the process runs: so it is read
// per plan, once per step, never per layer). A tile that needs more gets its own launch.
int64_t scratch_bytes() {
  if (const char* env = std::getenv("SPECDEC_FLASH_SCRATCH_BYTES"))
    return std::max<int64_t>(1, std::atoll(env));
  return kScratchBytes;
}


// Software prefetch two blocks ahead: CPU devices only (-DPF_DIST=0 compiles it out).
std::string build_options(const ocl::DeviceInfo& device, DType dtype, int tile, int group, int head,
                          int block, int split_keys) {
  // correctly rounded divisions in every variant: the quantising one needs them (as
  // quantize_activations), and the others must compute the same output
  return str_cat(kv::cache_dtype_define(dtype, "OCL_FLASH"), " -DHEAD=", head, " -DGROUP=", group, " -DBLOCK=", block,
                 " -DTILE=", tile, " -DSPLIT_KEYS=", split_keys,
                 " -DPF_DIST=", device.type == "cpu" ? 2 : 0, " -cl-fp32-correctly-rounded-divide-sqrt");
}

}  // namespace

// Declared by tests/cpp/attention_flash_test.cpp, which checks the estimate against the kernel.
// Local memory of one flash_attn_split work-group, from the kernel's __local arrays with
// rows = tile * group q rows: q and acc (rows * head floats each), the split's scores s
// (rows * split_keys floats), the partial dot products part (rows * 16 float16, 1 KiB a row) and
// one block of converted V rows vbuf (block * head floats), plus 256 bytes the runtime may keep
// for itself (NVIDIA's reports 64 more than the arrays).
int64_t flash_local_mem_estimate(int tile, int group, int head, int block, int split_keys) {
  const int64_t rows = int64_t{tile} * group;
  return rows * (int64_t{head} * 4 * 2 + int64_t{split_keys} * 4 + 16 * 16 * 4) +
         int64_t{block} * head * 4 + 256;
}

// What the built flash_attn_split kernel uses on ctx's device (CL_KERNEL_LOCAL_MEM_SIZE).
int64_t flash_kernel_local_mem(ocl::Context& ctx, DType dtype, int tile, int group, int head,
                               int block, int split_keys) {
  const ocl::Kernel k =
      ctx.kernel("attention_flash", "flash_attn_split",
                 build_options(ctx.device(), dtype, tile, group, head, block, split_keys));
  cl_ulong bytes = 0;
  ocl::check(clGetKernelWorkGroupInfo(k.get(), ctx.device().id, CL_KERNEL_LOCAL_MEM_SIZE,
                                      sizeof(bytes), &bytes, nullptr),
             "clGetKernelWorkGroupInfo", "CL_KERNEL_LOCAL_MEM_SIZE of flash_attn_split");
  return static_cast<int64_t>(bytes);
}

namespace {

int find_tile_tokens(ocl::Context& ctx, DType dtype, int group, int head, int block, int split_keys);

// Query tokens per work item: at most 32 q rows (tile * group) and 8 tokens per work-group, fewer
// until the kernel fits the device's local memory, by the host's estimate and then by what the
// built kernel reports. A fixed value per (device, shape): results never depend on it.
int tile_tokens_for(ocl::Context& ctx, DType dtype, int group, int head, int block,
                    int split_keys) {
  // per device and shape, found once (it builds the kernel to ask its local memory)
  static std::mutex mu;
  static std::map<std::tuple<cl_device_id, int, int, int, int, int>, int> known;
  const auto key = std::make_tuple(ctx.device().id, static_cast<int>(dtype), group, head, block, split_keys);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (const auto it = known.find(key); it != known.end()) return it->second;
  }
  const int tile = find_tile_tokens(ctx, dtype, group, head, block, split_keys);
  std::lock_guard<std::mutex> lock(mu);
  known.emplace(key, tile);
  return tile;
}

int find_tile_tokens(ocl::Context& ctx, DType dtype, int group, int head, int block,
                     int split_keys) {
  const int64_t limit = ctx.device().local_mem_bytes;
  int64_t need = 0;
  for (int tile = std::clamp(32 / group, 1, 8); tile >= 1; --tile) {
    need = flash_local_mem_estimate(tile, group, head, block, split_keys);
    if (need > limit) continue;
    need = flash_kernel_local_mem(ctx, dtype, tile, group, head, block, split_keys);
    if (need <= limit) return tile;
  }
  throw UnsupportedError(str_cat(
      "OCL_FLASH: head_size ", head, " with ", group, " q heads per kv head and block_size ", block,
      " needs ", need, " bytes of local memory for a single query token per work-group; device ",
      ctx.device().name, " has ", limit, ". Use attention backend OCL_PAGED for this model"));
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

// Everything a plan depends on besides the batch (the tile follows from these and the device).
// forward() takes the step's plan only for a call of the same shape: a layer called with another
// head count, window, chunk or scratch size gets a plan of its own. The context handle cannot be
// reused while a plan holds it: the plan's buffers keep their context alive.
struct FlashShape {
  cl_context context = nullptr;
  DType dtype = DType::kF16;
  int num_q_heads = 0, num_kv_heads = 0, head_size = 0, block_size = 0;
  int window = 0, chunk = 0, split_keys = 0;
  int64_t partials_per_launch = 0;  // 0 when asked without the plan's scratch (forward)
  bool operator==(const FlashShape&) const = default;
  // The same kernels and splits (a plan for `a` serves `b`), whatever the scratch.
  bool same_kernels(const FlashShape& o) const {
    return context == o.context && dtype == o.dtype && num_q_heads == o.num_q_heads &&
           num_kv_heads == o.num_kv_heads && head_size == o.head_size && block_size == o.block_size &&
           window == o.window && chunk == o.chunk && split_keys == o.split_keys;
  }
};

FlashShape shape_of(const ocl::Context& ctx, DType dtype, int num_q_heads, int num_kv_heads,
                    int head_size, int block_size, int window, int chunk, bool with_scratch = true) {
  FlashShape s;
  s.context = ctx.get();
  s.dtype = dtype;
  s.num_q_heads = num_q_heads;
  s.num_kv_heads = num_kv_heads;
  s.head_size = head_size;
  s.block_size = block_size;
  s.window = window;
  s.chunk = chunk;
  s.split_keys = split_keys_for(block_size);
  if (!with_scratch) return s;  // per layer: no getenv
  const int64_t row_bytes = int64_t{num_q_heads} * (head_size + 2) * int64_t{sizeof(float)};
  s.partials_per_launch = std::max<int64_t>(1, scratch_bytes() / row_bytes);
  return s;
}

// A batch's plan for one shape, with its device copies and the scratch for its partials. Owns
// its buffers: kernels enqueued with them keep them alive until they finish (OpenCL rules).
struct FlashMetadata : BackendMetadata {
  FlashShape shape;
  int tile = 0;
  FlashPlan plan;
  device::Buffer items;       // [num_items, 4] int32
  device::Buffer token_part;  // [num_tokens, 2] int32
  device::Buffer part_acc;    // [max_partials, num_q_heads, head_size] f32
  device::Buffer part_ml;     // [max_partials, num_q_heads, 2] f32
  std::string options;     // the kernels' build options (one string per step, not per layer)
  // the same with -DQUANT_OUT=32 / =256 (the output quantised as well, one scale per 32 / 256
  // values)
  std::string options_quantized32;
  std::string options_quantized256;
};

// The plan of `md` (at least one token) for shape `s`.
std::shared_ptr<const FlashMetadata> make_flash_metadata(device::Device& dev, const FlashShape& s,
                                                         const CommonAttentionMetadata& md) {
  ocl::Context& ctx = ocl::context_of(dev);
  auto fm = std::make_shared<FlashMetadata>();
  fm->shape = s;
  fm->tile = tile_tokens_for(ctx, s.dtype, s.num_q_heads / s.num_kv_heads, s.head_size,
                             s.block_size, s.split_keys);
  fm->options = build_options(ctx.device(), s.dtype, fm->tile, s.num_q_heads / s.num_kv_heads,
                              s.head_size, s.block_size, s.split_keys);
  fm->options_quantized32 = fm->options + " -DQUANT_OUT=32";
  fm->options_quantized256 = fm->options + " -DQUANT_OUT=256";
  fm->plan = make_plan(md, s.window, s.chunk, s.split_keys, fm->tile, s.partials_per_launch);
  fm->items = upload_int32s(dev, fm->plan.items);
  fm->token_part = upload_int32s(dev, fm->plan.token_part);
  const size_t partial_rows = static_cast<size_t>(std::max<int64_t>(fm->plan.max_partials, 1)) *
                              static_cast<size_t>(s.num_q_heads);
  fm->part_acc = dev.allocate(partial_rows * s.head_size * sizeof(float));
  fm->part_ml = dev.allocate(partial_rows * 2 * sizeof(float));
  return fm;
}

// Local virtual batches for chunked-local specs (the default builder), then the launch plan for
// the layers of an attention group with num_q_heads q heads (none when that is unknown).
class FlashMetadataBuilder : public AttentionMetadataBuilder {
 public:
  FlashMetadataBuilder(std::unique_ptr<AttentionMetadataBuilder> base, const kv::KvCacheSpec& spec,
                       int num_q_heads)
      : base_(std::move(base)), spec_(spec), num_q_heads_(num_q_heads) {}

  AttentionMetadata build(device::Device& dev,
                          const CommonAttentionMetadata& common) const override {
    AttentionMetadata md = base_->build(dev, common);
    if (!plannable() || md.host.num_actual_tokens == 0) return md;
    ocl::Context& ctx = ocl::context_of(dev);
    const int window = spec_.kind == kv::KvSpecKind::kSlidingWindow ? spec_.sliding_window : 0;
    const int chunk = spec_.kind == kv::KvSpecKind::kChunkedLocal ? spec_.attention_chunk_size : 0;
    const FlashShape shape = shape_of(ctx, spec_.dtype, num_q_heads_, spec_.num_kv_heads,
                                      spec_.head_size, spec_.block_size, window, chunk);
    md.backend_data = make_flash_metadata(dev, shape, md.host);
    return md;
  }

 private:
  // Shapes that forward() serves; for the others it explains what is wrong.
  bool plannable() const {
    const int d = spec_.head_size;
    return num_q_heads_ > 0 && spec_.kind != kv::KvSpecKind::kMla && spec_.num_kv_heads >= 1 &&
           num_q_heads_ % spec_.num_kv_heads == 0 && (d == 64 || d == 128 || d == 256) &&
           spec_.head_size_v == d && spec_.block_size % 16 == 0 && spec_.dtype != DType::kI8;
  }

  std::unique_ptr<AttentionMetadataBuilder> base_;
  kv::KvCacheSpec spec_;
  int num_q_heads_;
};

class OclFlashBackend : public AttentionBackend {
 public:
  OclFlashBackend();
  const BackendCapabilities& capabilities() const override { return caps_; }
  std::unique_ptr<AttentionMetadataBuilder> make_builder(const kv::KvCacheSpec& spec,
                                                         int num_q_heads) const override {
    return std::make_unique<FlashMetadataBuilder>(AttentionBackend::make_builder(spec, num_q_heads),
                                                  spec, num_q_heads);
  }
  void forward(device::Device& dev, const AttentionMetadata& md, const AttentionLayerParams& params,
               const kv::LayerKvView& view, const device::Buffer& cache, const device::Buffer& query,
               device::Buffer& output) const override;

 private:
  void check_inputs(const AttentionMetadata& md, const AttentionLayerParams& params,
                    const kv::LayerKvView& view) const;

  BackendCapabilities caps_;  // no other state: per-step data lives in the metadata
};

// The smallest work-group (tile 1, one q head per kv head) at head_size 256 needs
// flash_local_mem_estimate(1, 1, 256, B, 256) = 4352 + 1024 * B bytes of local memory for
// block_size B <= 256 (split_keys = 256). Within the 32 KiB that many GPUs offer: B <= 27, so 16,
// the largest multiple of 16. forward() itself checks the device, not this limit: larger blocks
// run where the local memory allows (the tests use 32 and 48 on the CPU device).
constexpr int kMaxBlockSize = 16;

OclFlashBackend::OclFlashBackend() {
  caps_.name = "OCL_FLASH";
  caps_.description = "tiled online-softmax attention with split-KV decoding";
  caps_.kv_cache_dtypes = {DType::kF32, DType::kF16, DType::kBF16};
  caps_.head_sizes = {64, 128, 256};
  caps_.max_head_size = 256;
  caps_.block_size_multiple_of = 16;
  caps_.max_block_size = kMaxBlockSize;
  caps_.causal = true;
  caps_.non_causal = false;  // the selector relies on this: non-causal drafters go elsewhere
  caps_.sliding_window = true;
  caps_.chunked_local = true;  // through the default builder's local virtual batches
  caps_.logit_softcap = true;
  caps_.sinks = false;
  caps_.separate_head_size_v = false;
  caps_.on_device = true;
  caps_.devices = {device::Kind::kOpenCL};
  caps_.quantized_output = true;  // -DQUANT_OUT=32 (head sizes 64, 128, 256), =256 (head size 256)
  caps_.kv_layout = kv::KvLayout::kBlockMajor;
}

void OclFlashBackend::check_inputs(const AttentionMetadata& md, const AttentionLayerParams& p,
                                   const kv::LayerKvView& view) const {
  const int d = p.head_size;
  if (!md.host.causal) throw UnsupportedError("OCL_FLASH: non-causal attention not supported");
  if (p.sinks != nullptr) throw UnsupportedError("OCL_FLASH: attention sinks not supported");
  SPECDEC_CHECK(view.layout == kv::KvLayout::kBlockMajor, "view.layout",
               kv::layout_name(view.layout), "OCL_FLASH reads block_major caches");
  SPECDEC_CHECK(
      std::find(caps_.head_sizes.begin(), caps_.head_sizes.end(), d) != caps_.head_sizes.end(),
      "head_size", d, "OCL_FLASH supports 64, 128, 256");
  SPECDEC_CHECK(p.head_size_v == d, "head_size_v", p.head_size_v,
               str_cat("must equal head_size = ", d));
  SPECDEC_CHECK(p.num_kv_heads >= 1 && p.num_q_heads >= 1 && p.num_q_heads % p.num_kv_heads == 0,
               "num_q_heads", p.num_q_heads,
               str_cat("must be a positive multiple of num_kv_heads = ", p.num_kv_heads));
  SPECDEC_CHECK(view.k.num_heads == p.num_kv_heads && view.k.width == d && view.v.width == d, "view",
               str_cat(view.k.num_heads, " kv heads of ", view.k.width, "/", view.v.width),
               str_cat("must match num_kv_heads = ", p.num_kv_heads, " and head_size = ", d));
  SPECDEC_CHECK(view.spec.block_size % 16 == 0, "block_size", view.spec.block_size,
               "must be a multiple of 16");
  SPECDEC_CHECK(md.host.block_size == view.spec.block_size, "metadata.block_size",
               md.host.block_size,
               str_cat("must equal the cache's block_size = ", view.spec.block_size));
  SPECDEC_CHECK(view.k.stride_slot == d && view.v.stride_slot == d &&
                   view.k.stride_block == view.v.stride_block &&
                   view.k.stride_head == view.v.stride_head,
               "view", view.layer_name, "strides are not those of a block_major cache");
  SPECDEC_CHECK(p.sliding_window >= 0, "sliding_window", p.sliding_window, "must be >= 0");
  SPECDEC_CHECK(p.attention_chunk_size >= 0, "attention_chunk_size", p.attention_chunk_size,
               "must be >= 0");
}

void OclFlashBackend::forward(device::Device& dev, const AttentionMetadata& md,
                              const AttentionLayerParams& p, const kv::LayerKvView& view,
                              const device::Buffer& cache, const device::Buffer& query,
                              device::Buffer& output) const {
  ocl::Context& ctx = ocl::context_of(dev);
  check_inputs(md, p, view);  // first: what OCL_FLASH cannot do at all
  check_layer_call(md.host, p, view);
  check_forward_buffers(md.host, p, view, cache, query, output);
  if (md.host.num_actual_tokens == 0) return;
  const int d = p.head_size, hq = p.num_q_heads, hkv = p.num_kv_heads, bs = view.spec.block_size;
  const FlashShape shape = shape_of(ctx, view.spec.dtype, hq, hkv, d, bs, p.sliding_window,
                                    p.attention_chunk_size, /*with_scratch=*/false);
  // the step's plan when it was built for this shape, else one for this call
  std::shared_ptr<const FlashMetadata> fm =
      std::dynamic_pointer_cast<const FlashMetadata>(md.backend_data);
  if (fm == nullptr || !fm->shape.same_kernels(shape)) {
    fm = make_flash_metadata(dev, shape_of(ctx, view.spec.dtype, hq, hkv, d, bs, p.sliding_window,
                                           p.attention_chunk_size), md.host);
  }
  const ops::QuantizedOut* qo = p.quantized_output;
  if (qo != nullptr) {
    const int64_t t = md.host.num_actual_tokens, width = int64_t{hq} * d;
    SPECDEC_CHECK(d % qo->scale_block == 0, "quantized_output", str_cat("head_size ", d),
                  str_cat("needs head_size % ", qo->scale_block,
                          " == 0 (one activation scale per ", qo->scale_block,
                          " values within a head)"));
    ops::check_quantized_out(*qo, t, width, "quantized_output");
  }
  const std::string& options = qo == nullptr             ? fm->options
                               : qo->scale_block == 256 ? fm->options_quantized256
                                                        : fm->options_quantized32;
  // base-2 scores: q pre-scaled by scale * log2(e); with a softcap, s2 = softcap * log2(e) *
  // tanh(q.k * scale / softcap)
  const float softcap = p.logit_softcap;
  const float q_scale = softcap > 0 ? p.scale / softcap : p.scale * kLog2e;
  const float softcap_log2 = softcap > 0 ? softcap * kLog2e : 0.0f;
  ocl::Kernel split = ctx.kernel("attention_flash", "flash_attn_split", options);
  ocl::Kernel merge = ctx.kernel("attention_flash", "flash_attn_merge", options);
  cl_uint i = 0;
  auto arg = [&split, &i](const auto& value) { split.arg(i++, value); };
  arg(query);
  arg(cache);
  arg(md.block_table);
  arg(md.query_start_loc);
  arg(md.seq_lens);
  arg(md.token_request_buf);
  arg(fm->items);
  arg(fm->token_part);
  arg(output);
  arg(fm->part_acc);
  arg(fm->part_ml);
  const cl_uint item_offset_arg = i++;  // set per launch (values are captured at each enqueue)
  arg(cl_int{md.host.max_blocks_per_req});
  arg(cl_long{view.k.offset});
  arg(cl_long{view.v.offset});
  arg(cl_long{view.k.stride_block});
  arg(cl_long{view.k.stride_head});
  arg(q_scale);
  arg(softcap_log2);
  arg(cl_int{p.sliding_window});
  arg(cl_int{p.attention_chunk_size});
  merge.arg(0, fm->token_part).arg(1, fm->part_acc).arg(2, fm->part_ml).arg(3, output);
  if (qo != nullptr) {  // after every other argument (-DQUANT_OUT appends them)
    arg(*qo->q8);
    arg(*qo->q16);
    arg(*qo->rec);
    merge.arg(5, *qo->q8).arg(6, *qo->q16).arg(7, *qo->rec);
  }
  const size_t local[2] = {1, 1};
  for (const FlashPlan::Launch& l : fm->plan.launches) {
    split.arg(item_offset_arg, cl_int{l.item_begin});
    const size_t global[2] = {static_cast<size_t>(l.item_end - l.item_begin),
                              static_cast<size_t>(hkv)};
    split.launch(ctx, 2, global, local);
    if (!l.merge) continue;
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
