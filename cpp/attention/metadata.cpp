#include "attention/metadata.h"

#include <algorithm>
#include <climits>

#include "common/errors.h"
#include "common/math.h"
#include "kv/blocks.h"

namespace specdec::attn {

void CommonAttentionMetadata::validate() const {
  SPECDEC_CHECK(num_reqs >= 0, "num_reqs", num_reqs, "must be >= 0");
  SPECDEC_CHECK(block_size >= 1, "block_size", block_size, "must be >= 1");
  SPECDEC_CHECK(query_start_loc.size() == static_cast<size_t>(num_reqs) + 1, "query_start_loc",
               str_cat(query_start_loc.size(), " entries"), str_cat("must have num_reqs + 1 = ", num_reqs + 1));
  SPECDEC_CHECK(query_start_loc[0] == 0, "query_start_loc[0]", query_start_loc[0], "must be 0");
  SPECDEC_CHECK(seq_lens.size() == static_cast<size_t>(num_reqs), "seq_lens", str_cat(seq_lens.size(), " entries"),
               str_cat("must have num_reqs = ", num_reqs));
  SPECDEC_CHECK(num_computed_tokens.size() == static_cast<size_t>(num_reqs), "num_computed_tokens",
               str_cat(num_computed_tokens.size(), " entries"), str_cat("must have num_reqs = ", num_reqs));
  SPECDEC_CHECK(max_blocks_per_req >= 0 && block_table.size() == static_cast<size_t>(num_reqs) * max_blocks_per_req,
               "block_table", str_cat(block_table.size(), " entries"),
               str_cat("must have num_reqs * max_blocks_per_req = ", int64_t{num_reqs} * max_blocks_per_req));
  for (int r = 0; r < num_reqs; ++r) {
    const int q = query_len(r);
    SPECDEC_CHECK(q >= 0, str_cat("query_start_loc[", r + 1, "]"), query_start_loc[r + 1], "must not decrease");
    SPECDEC_CHECK(seq_lens[r] >= q, str_cat("seq_lens[", r, "]"), seq_lens[r],
                 str_cat("must be >= the request's query length ", q));
    SPECDEC_CHECK(num_computed_tokens[r] == seq_lens[r] - q, str_cat("num_computed_tokens[", r, "]"),
                 num_computed_tokens[r], str_cat("must be seq_lens - query length = ", seq_lens[r] - q));
    SPECDEC_CHECK(seq_lens[r] <= int64_t{max_blocks_per_req} * block_size, str_cat("seq_lens[", r, "]"), seq_lens[r],
                 str_cat("exceeds what the block table covers (", max_blocks_per_req, " blocks of ", block_size, ")"));
    SPECDEC_CHECK(q <= max_query_len, "max_query_len", max_query_len, str_cat("must be >= ", q));
    SPECDEC_CHECK(seq_lens[r] <= max_seq_len, "max_seq_len", max_seq_len, str_cat("must be >= ", seq_lens[r]));
  }
  SPECDEC_CHECK(query_start_loc[num_reqs] == num_actual_tokens, "num_actual_tokens", num_actual_tokens,
               str_cat("must equal query_start_loc[num_reqs] = ", query_start_loc[num_reqs]));
  SPECDEC_CHECK(slot_mapping.size() == static_cast<size_t>(num_actual_tokens), "slot_mapping",
               str_cat(slot_mapping.size(), " entries"), str_cat("must have num_actual_tokens = ", num_actual_tokens));
}

CommonAttentionMetadata build_common_metadata(const kv::KvCacheManager& manager, int group_id,
                                              const std::vector<ScheduledRequest>& requests, bool causal) {
  CommonAttentionMetadata md;
  md.num_reqs = static_cast<int>(requests.size());
  md.block_size = manager.group(group_id).block_size();
  md.causal = causal;
  md.query_start_loc.push_back(0);
  for (const auto& req : requests) {
    const auto& table = manager.block_table(req.request_id, group_id);
    md.max_blocks_per_req = std::max(md.max_blocks_per_req, static_cast<int>(table.size()));
  }
  md.max_blocks_per_req = std::max(md.max_blocks_per_req, 1);
  md.block_table.assign(static_cast<size_t>(md.num_reqs) * md.max_blocks_per_req, kv::kNullBlockId);
  for (int r = 0; r < md.num_reqs; ++r) {
    const ScheduledRequest& req = requests[r];
    const auto& table = manager.block_table(req.request_id, group_id);
    const int64_t end = req.num_computed_tokens + req.num_new_tokens;
    SPECDEC_CHECK(req.num_computed_tokens >= 0 && req.num_new_tokens >= 0 && end <= int64_t{md.block_size} * static_cast<int64_t>(table.size()),
                 str_cat("requests[", r, "]"), req.request_id,
                 str_cat("tokens [", req.num_computed_tokens, ", ", end, ") are not covered by its block table of ",
                         table.size(), " blocks; call allocate_slots first"));
    std::copy(table.begin(), table.end(), md.block_table.begin() + static_cast<int64_t>(r) * md.max_blocks_per_req);
    for (int64_t pos = req.num_computed_tokens; pos < end; ++pos) {
      const int32_t block = table[pos / md.block_size];
      SPECDEC_CHECK(block != kv::kNullBlockId, str_cat("requests[", r, "]"), req.request_id,
                   str_cat("position ", pos, " lies in a freed block"));
      const int64_t slot = int64_t{block} * md.block_size + pos % md.block_size;
      SPECDEC_CHECK(slot <= INT32_MAX, "slot_mapping", slot, "slots are int32: the planner caps num_blocks * block_size");
      md.slot_mapping.push_back(static_cast<int32_t>(slot));
    }
    md.query_start_loc.push_back(static_cast<int32_t>(md.slot_mapping.size()));
    md.seq_lens.push_back(static_cast<int32_t>(end));
    md.num_computed_tokens.push_back(static_cast<int32_t>(req.num_computed_tokens));
    md.max_query_len = std::max(md.max_query_len, static_cast<int>(req.num_new_tokens));
    md.max_seq_len = std::max(md.max_seq_len, static_cast<int>(end));
  }
  md.num_actual_tokens = static_cast<int>(md.slot_mapping.size());
  return md;
}

CommonAttentionMetadata make_local_attention_virtual_batches(int chunk, const CommonAttentionMetadata& common) {
  common.validate();
  const int bs = common.block_size;
  SPECDEC_CHECK(chunk >= 1 && chunk % bs == 0, "attention_chunk_size", chunk,
               str_cat("must be a positive multiple of block_size = ", bs));
  const int pages = chunk / bs;
  CommonAttentionMetadata out;
  out.block_size = bs;
  out.max_blocks_per_req = pages;
  out.causal = true;
  out.num_actual_tokens = common.num_actual_tokens;
  out.slot_mapping = common.slot_mapping;
  out.query_start_loc.push_back(0);
  const int ncols = common.max_blocks_per_req;
  for (int r = 0; r < common.num_reqs; ++r) {
    const int q = common.query_len(r), s = common.seq_lens[r];
    if (s == 0) {  // no keys and no queries: one empty virtual request
      out.block_table.insert(out.block_table.end(), pages, 0);
      out.query_start_loc.push_back(out.query_start_loc.back());
      out.seq_lens.push_back(0);
      out.num_computed_tokens.push_back(0);
      continue;
    }
    const int q_first = std::min(chunk - (s - q) % chunk, q);
    const int last = s % chunk == 0 ? chunk : s % chunk;  // keys in the request's last chunk
    const int nblk = 1 + static_cast<int>(cdiv(q - q_first, chunk));
    for (int a = 0; a < nblk; ++a) {
      const int q_local = a == 0 ? q_first : std::min(q - q_first - chunk * (a - 1), chunk);
      const int k_local = a == nblk - 1 ? last : chunk;
      const int k_start = s - ((nblk - a - 1) * chunk + last);
      const int block_start = k_start / bs;
      for (int i = 0; i < pages; ++i) {
        const int col = std::clamp(block_start + i, 0, ncols - 1);  // ncols >= 1 since s > 0
        out.block_table.push_back(common.block_table[static_cast<size_t>(r) * ncols + col]);
      }
      out.query_start_loc.push_back(out.query_start_loc.back() + q_local);
      out.seq_lens.push_back(k_local);
      out.num_computed_tokens.push_back(k_local - q_local);
      out.max_query_len = std::max(out.max_query_len, q_local);
      out.max_seq_len = std::max(out.max_seq_len, k_local);
    }
  }
  out.num_reqs = static_cast<int>(out.seq_lens.size());
  return out;
}

AttentionMetadata upload_metadata(device::Device& dev, const CommonAttentionMetadata& common) {
  common.validate();
  AttentionMetadata md;
  md.host = common;
  md.token_request.resize(static_cast<size_t>(common.num_actual_tokens));
  for (int r = 0; r < common.num_reqs; ++r) {
    std::fill(md.token_request.begin() + common.query_start_loc[r],
              md.token_request.begin() + common.query_start_loc[r + 1], r);
  }
  md.query_start_loc = upload_int32s(dev, common.query_start_loc);
  md.seq_lens = upload_int32s(dev, common.seq_lens);
  md.block_table = upload_int32s(dev, common.block_table);
  md.token_request_buf = upload_int32s(dev, md.token_request);
  md.slot_mapping = upload_int32s(dev, common.slot_mapping);
  return md;
}

AttentionMetadata AttentionMetadataBuilder::build(device::Device& dev, const CommonAttentionMetadata& common) const {
  return upload_metadata(dev, common);
}

AttentionMetadata LocalAttentionMetadataBuilder::build(device::Device& dev,
                                                       const CommonAttentionMetadata& common) const {
  return upload_metadata(dev, make_local_attention_virtual_batches(chunk_, common));
}

device::Buffer upload_int32s(device::Device& dev, const std::vector<int32_t>& values) {
  if (values.empty()) return dev.allocate(sizeof(int32_t), device::Lifetime::kStep);
  return dev.upload(values.data(), values.size() * sizeof(int32_t), device::Lifetime::kStep);
}

}  // namespace specdec::attn
