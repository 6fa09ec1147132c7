// Attention metadata: what every attention layer of one KV-cache group reads in one engine step.
//
// CommonAttentionMetadata is built once per step per KV-cache group (host vectors, vLLM's
// names). Each attention group's builder turns it into AttentionMetadata (device buffers plus
// the host copy it was made from); every layer of the attention group reuses it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "device/device.h"

namespace specdec::kv {
class KvCacheManager;
}

namespace specdec::attn {

struct CommonAttentionMetadata {
  int num_reqs = 0;
  int num_actual_tokens = 0;     // tokens of this step over all requests
  int max_query_len = 0;
  int max_seq_len = 0;
  int block_size = 0;            // tokens per block of this group
  int max_blocks_per_req = 0;    // columns of block_table
  bool causal = true;
  std::vector<int32_t> query_start_loc;      // [num_reqs + 1], cumulative query lengths
  std::vector<int32_t> seq_lens;             // [num_reqs], computed + new tokens
  std::vector<int32_t> num_computed_tokens;  // [num_reqs], seq_lens - query lengths
  std::vector<int32_t> block_table;          // [num_reqs, max_blocks_per_req], row-major
  std::vector<int32_t> slot_mapping;         // [num_actual_tokens], -1 = padding

  int query_len(int r) const { return query_start_loc[r + 1] - query_start_loc[r]; }
  // Throws ConfigError naming the first inconsistent field.
  void validate() const;
};

// One request's share of a step.
struct ScheduledRequest {
  std::string request_id;
  int64_t num_computed_tokens = 0;  // tokens already in the cache
  int64_t num_new_tokens = 0;       // tokens computed now (prefill chunk, or 1 + drafts)
};

// Common metadata of KV-cache group `group_id` for the scheduled requests, from the block
// tables of `manager` (allocate_slots must have covered every request's new tokens).
// slot = block_table[r][pos / block_size] * block_size + pos % block_size.
CommonAttentionMetadata build_common_metadata(const kv::KvCacheManager& manager, int group_id,
                                              const std::vector<ScheduledRequest>& requests,
                                              bool causal = true);

// Chunked local attention as plain causal attention over virtual requests, one per attention
// chunk that a request's new tokens touch (vLLM's make_local_attention_virtual_batches). Needs
// attention_chunk_size % block_size == 0. The local block table has attention_chunk_size /
// block_size columns, with columns past the end of a request's table clipped to its last one.
CommonAttentionMetadata make_local_attention_virtual_batches(int attention_chunk_size,
                                                             const CommonAttentionMetadata& common);

// Per-step data that a backend's own builder derives once for every layer of an attention
// group (launch plans, split tables, scratch); backends downcast to their own type.
struct BackendMetadata {
  virtual ~BackendMetadata() = default;
};

// What a backend's kernel reads: device copies of the (possibly transformed) metadata.
struct AttentionMetadata {
  CommonAttentionMetadata host;        // what was uploaded
  std::vector<int32_t> token_request;  // [num_actual_tokens] request index of each token
  device::Buffer query_start_loc;         // [num_reqs + 1] int32
  device::Buffer seq_lens;                // [num_reqs] int32
  device::Buffer block_table;             // [num_reqs, max_blocks_per_req] int32
  device::Buffer token_request_buf;       // [num_actual_tokens] int32
  device::Buffer slot_mapping;            // [num_actual_tokens] int32
  std::shared_ptr<const BackendMetadata> backend_data;  // set by a backend's own builder, or null
};

// Uploads `common` (after validate()) and derives token_request.
AttentionMetadata upload_metadata(device::Device& dev, const CommonAttentionMetadata& common);
// A device buffer created holding `values` (copied at creation, no blocking write through the
// queue; Lifetime::kStep); one int32 of room when empty.
device::Buffer upload_int32s(device::Device& dev, const std::vector<int32_t>& values);

class AttentionMetadataBuilder {
 public:
  virtual ~AttentionMetadataBuilder() = default;
  virtual AttentionMetadata build(device::Device& dev, const CommonAttentionMetadata& common) const;
};

// Builder for chunked local attention: virtual batches, then upload.
class LocalAttentionMetadataBuilder : public AttentionMetadataBuilder {
 public:
  explicit LocalAttentionMetadataBuilder(int attention_chunk_size) : chunk_(attention_chunk_size) {}
  AttentionMetadata build(device::Device& dev, const CommonAttentionMetadata& common) const override;

 private:
  int chunk_;
};

}  // namespace specdec::attn
