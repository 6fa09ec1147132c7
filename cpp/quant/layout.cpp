#include "quant/layout.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

#include "common/errors.h"
#include "quant/dequantize.h"

namespace specdec::quant {
namespace {

constexpr int R = kRowsPerGroup;

struct PlaneSpec {
  const char* name;
  int64_t record_bytes;
};

// Planes per type; record bytes are for one (group of 16 rows, block).
std::vector<PlaneSpec> plane_specs(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return {{"w", 4 * R}};
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return {{"w", 2 * R}};
    case GgmlType::kQ8_0:
      return {{"qs", 32 * R}, {"d", 2 * R}};
    case GgmlType::kQ4_0:
      return {{"qs", 16 * R}, {"d", 2 * R}};
    case GgmlType::kQ4_1:
      return {{"qs", 16 * R}, {"dm", 4 * R}};
    case GgmlType::kQ5_0:
      return {{"qs", 16 * R}, {"qh", 4 * R}, {"d", 2 * R}};
    case GgmlType::kQ5_1:
      return {{"qs", 16 * R}, {"qh", 4 * R}, {"dm", 4 * R}};
    case GgmlType::kIQ4_NL:
      return {{"qs", 16 * R}, {"d", 2 * R}};
    case GgmlType::kIQ4_XS:  // records of 8 sub-blocks: per 32 elements as IQ4_NL's, plus scales
      return {{"qs", 128 * R}, {"sc", 8 * R}, {"d", 2 * R}};
    case GgmlType::kQ2_K:
      return {{"qs", 64 * R}, {"sc", 16 * R}, {"dm", 4 * R}};
    case GgmlType::kQ3_K:
      return {{"qs", 64 * R}, {"hm", 32 * R}, {"sc", 16 * R}, {"d", 2 * R}};
    case GgmlType::kQ4_K:
      return {{"qs", 128 * R}, {"sc", 16 * R}, {"dm", 4 * R}};
    case GgmlType::kQ5_K:
      return {{"qs", 128 * R}, {"qh", 32 * R}, {"sc", 16 * R}, {"dm", 4 * R}};
    case GgmlType::kQ6_K:
      return {{"ql", 128 * R}, {"qh", 64 * R}, {"sc", 16 * R}, {"d", 2 * R}};
    default:
      weight_format(type);
      return {};  // throws UnsupportedError
  }
}

// Q5_0: qh bit e (element e) -> H: byte s, bit c = qh bit 4c + s; bit 4 + c = qh bit 16 + 4c + s.
uint32_t q5_0_to_h(uint32_t qh) {
  uint32_t h = 0;
  for (int s = 0; s < 4; ++s) {
    for (int c = 0; c < 4; ++c) {
      h |= ((qh >> (4 * c + s)) & 1u) << (8 * s + c);
      h |= ((qh >> (16 + 4 * c + s)) & 1u) << (8 * s + 4 + c);
    }
  }
  return h;
}

uint32_t h_to_q5_0(uint32_t h) {
  uint32_t qh = 0;
  for (int s = 0; s < 4; ++s) {
    for (int c = 0; c < 4; ++c) {
      qh |= ((h >> (8 * s + c)) & 1u) << (4 * c + s);
      qh |= ((h >> (8 * s + 4 + c)) & 1u) << (16 + 4 * c + s);
    }
  }
  return qh;
}

// Packs 8 six-bit scales and mins into ggml's 12 bytes (inverse of k4_scale_min).
void pack_k4_scales(const uint8_t* sc, const uint8_t* m, uint8_t* q) {
  std::memset(q, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      q[j] |= sc[j] & 63;
      q[j + 4] |= m[j] & 63;
    } else {
      q[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
      q[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      q[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
    }
  }
}

// Copies `n` bytes in groups of 4: source bytes [4t, 4t + 4) go to record offset (t * R + lane) * 4
// (the "16 rows x 4 bytes" vector t); `to_record` selects the direction.
void move4(uint8_t* rec, uint8_t* blk, int n, int lane, bool to_record) {
  for (int t = 0; t < n / 4; ++t) {
    uint8_t* r = rec + (t * R + lane) * 4;
    if (to_record)
      std::memcpy(r, blk + 4 * t, 4);
    else
      std::memcpy(blk + 4 * t, r, 4);
  }
}

void move(uint8_t* rec, uint8_t* blk, int n, bool to_record) {
  if (to_record)
    std::memcpy(rec, blk, n);
  else
    std::memcpy(blk, rec, n);
}

void move_q5_0_bits(uint8_t* rec, uint8_t* blk, int lane, bool to_record) {
  uint32_t v;
  if (to_record) {
    std::memcpy(&v, blk, 4);
    v = q5_0_to_h(v);
    std::memcpy(rec + 4 * lane, &v, 4);
  } else {
    std::memcpy(&v, rec + 4 * lane, 4);
    v = h_to_q5_0(v);
    std::memcpy(blk, &v, 4);
  }
}

// Q4_K / Q5_K: 6-bit scales and mins unpacked to bytes, [j][lane] scales then [j][lane] mins.
void move_k4_scales(uint8_t* sc_rec, uint8_t* packed, int lane, bool to_record) {
  uint8_t sc[8], m[8];
  if (to_record) {
    for (int j = 0; j < 8; ++j) {
      k4_scale_min(j, packed, &sc[j], &m[j]);
      sc_rec[j * R + lane] = sc[j];
      sc_rec[(8 + j) * R + lane] = m[j];
    }
  } else {
    for (int j = 0; j < 8; ++j) {
      sc[j] = sc_rec[j * R + lane];
      m[j] = sc_rec[(8 + j) * R + lane];
    }
    pack_k4_scales(sc, m, packed);
  }
}

// IQ4_XS: the eight 6-bit sub-block scales as bytes, [ib][lane].
void move_iq4_xs_scales(uint8_t* sc_rec, uint8_t* blk, int lane, bool to_record) {
  if (to_record) {
    uint16_t scales_h;
    std::memcpy(&scales_h, blk + 2, 2);
    for (int ib = 0; ib < 8; ++ib)
      sc_rec[ib * R + lane] = static_cast<uint8_t>(iq4_xs_scale(ib, scales_h, blk + 4));
    return;
  }
  uint16_t scales_h = 0;
  std::memset(blk + 4, 0, 4);
  for (int ib = 0; ib < 8; ++ib) {
    const uint8_t ls = sc_rec[ib * R + lane];
    blk[4 + ib / 2] |= static_cast<uint8_t>((ls & 0xF) << (4 * (ib % 2)));
    scales_h |= static_cast<uint16_t>(((ls >> 4) & 3) << (2 * ib));
  }
  std::memcpy(blk + 2, &scales_h, 2);
}

// Q3_K: the sixteen 6-bit sub-block scales as bytes, [i][lane].
void move_q3_k_scales(uint8_t* sc_rec, uint8_t* packed, int lane, bool to_record) {
  uint8_t ls[16];
  if (to_record) {
    q3_k_scales(packed, ls);
    for (int i = 0; i < 16; ++i) sc_rec[i * R + lane] = ls[i];
  } else {
    for (int i = 0; i < 16; ++i) ls[i] = sc_rec[i * R + lane];
    pack_q3_k_scales(ls, packed);
  }
}

// Moves one ggml block of a 32-element format (row `lane` of its group) to or from its records.
void move_block_32(GgmlType type, uint8_t* blk, uint8_t* const* rec, int lane, bool to_record) {
  switch (type) {
    case GgmlType::kQ8_0:  // qs: 16 vectors of (16 rows x 2 bytes)
      for (int p = 0; p < 16; ++p) move(rec[0] + (p * R + lane) * 2, blk + 2 + 2 * p, 2, to_record);
      move(rec[1] + 2 * lane, blk, 2, to_record);
      break;
    case GgmlType::kQ4_0:
      move4(rec[0], blk + 2, 16, lane, to_record);
      move(rec[1] + 2 * lane, blk, 2, to_record);
      break;
    case GgmlType::kQ4_1:
      move4(rec[0], blk + 4, 16, lane, to_record);
      move(rec[1] + 2 * lane, blk, 2, to_record);            // d
      move(rec[1] + 2 * (R + lane), blk + 2, 2, to_record);  // m
      break;
    case GgmlType::kQ5_0:
      move4(rec[0], blk + 6, 16, lane, to_record);
      move_q5_0_bits(rec[1], blk + 2, lane, to_record);
      move(rec[2] + 2 * lane, blk, 2, to_record);
      break;
    case GgmlType::kQ5_1:
      move4(rec[0], blk + 8, 16, lane, to_record);
      move_q5_0_bits(rec[1], blk + 4, lane, to_record);
      move(rec[2] + 2 * lane, blk, 2, to_record);            // d
      move(rec[2] + 2 * (R + lane), blk + 2, 2, to_record);  // m
      break;
    case GgmlType::kIQ4_NL:
      move4(rec[0], blk + 2, 16, lane, to_record);
      move(rec[1] + 2 * lane, blk, 2, to_record);
      break;
    default:
      break;
  }
}

// Moves one ggml block (row `lane` of its group) to or from its records. `rec[p]` points at the
// record of plane p. With to_record == false the block is rebuilt from the records.
void move_block(GgmlType type, uint8_t* blk, uint8_t* const* rec, int lane, bool to_record) {
  switch (type) {
    case GgmlType::kF32:
      move(rec[0] + 4 * lane, blk, 4, to_record);
      break;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      move(rec[0] + 2 * lane, blk, 2, to_record);
      break;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      const bool q5 = type == GgmlType::kQ5_K;
      move4(rec[0], blk + (q5 ? 48 : 16), 128, lane, to_record);
      if (q5) move4(rec[1], blk + 16, 32, lane, to_record);
      move_k4_scales(rec[q5 ? 2 : 1], blk + 4, lane, to_record);
      uint8_t* dm_rec = rec[q5 ? 3 : 2];
      move(dm_rec + 2 * lane, blk, 2, to_record);            // d
      move(dm_rec + 2 * (R + lane), blk + 2, 2, to_record);  // dmin
      break;
    }
    case GgmlType::kQ2_K:
      move4(rec[0], blk + 16, 64, lane, to_record);  // qs
      for (int s = 0; s < 16; ++s) move(rec[1] + s * R + lane, blk + s, 1, to_record);
      move(rec[2] + 2 * lane, blk + 80, 2, to_record);        // d
      move(rec[2] + 2 * (R + lane), blk + 82, 2, to_record);  // dmin
      break;
    case GgmlType::kQ3_K:
      move4(rec[0], blk + 32, 64, lane, to_record);  // qs
      move4(rec[1], blk, 32, lane, to_record);       // hmask
      move_q3_k_scales(rec[2], blk + 96, lane, to_record);
      move(rec[3] + 2 * lane, blk + 108, 2, to_record);
      break;
    case GgmlType::kIQ4_XS:
      move4(rec[0], blk + 8, 128, lane, to_record);
      move_iq4_xs_scales(rec[1], blk, lane, to_record);
      move(rec[2] + 2 * lane, blk, 2, to_record);
      break;
    case GgmlType::kQ6_K:
      move4(rec[0], blk, 128, lane, to_record);       // ql
      move4(rec[1], blk + 128, 64, lane, to_record);  // qh
      for (int s = 0; s < 16; ++s) move(rec[2] + s * R + lane, blk + 192 + s, 1, to_record);
      move(rec[3] + 2 * lane, blk + 208, 2, to_record);
      break;
    default:
      move_block_32(type, blk, rec, lane, to_record);
      break;
  }
}

// Groups [g0, g1) of the layout moved between GGUF blocks and records.
void walk_groups(const DeviceLayout& layout, uint8_t* blocks, uint8_t* packed, bool to_record, int64_t g0,
                 int64_t g1) {
  const WeightFormat& f = weight_format(layout.type);
  const int64_t nb = layout.blocks_per_row;
  std::vector<uint8_t*> rec(layout.planes.size());
  for (int64_t r = g0 * R; r < std::min(layout.rows, g1 * R); ++r) {
    const int64_t g = r / R;
    const int lane = static_cast<int>(r % R);
    for (int64_t b = 0; b < nb; ++b) {
      for (size_t p = 0; p < rec.size(); ++p) {
        const Plane& plane = layout.planes[p];
        rec[p] = packed + plane.offset + (g * nb + b) * plane.record_bytes;
      }
      move_block(layout.type, blocks + (r * nb + b) * f.block_bytes, rec.data(), lane, to_record);
    }
  }
}

// Every group, split over threads for a large matrix (groups are independent: each writes its
// own records / rows). A model's load repacks about its file's size: the 1.5B's 1.1 GB took
// ~4.5 s on one thread of the 2-vCPU Xeon VM.
void walk(const DeviceLayout& layout, uint8_t* blocks, uint8_t* packed, bool to_record) {
  const int64_t groups = (layout.rows + R - 1) / R;
  constexpr int64_t kMinBytesPerThread = int64_t{4} << 20;
  const int64_t by_size = std::max<int64_t>(1, layout.total_bytes / kMinBytesPerThread);
  const int threads = static_cast<int>(
      std::min<int64_t>({by_size, groups, std::max(1u, std::thread::hardware_concurrency()), 8}));
  if (threads <= 1) {
    walk_groups(layout, blocks, packed, to_record, 0, groups);
    return;
  }
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  auto part = [&](int t) {
    try {
      walk_groups(layout, blocks, packed, to_record, groups * t / threads, groups * (t + 1) / threads);
    } catch (...) {
      errors[static_cast<size_t>(t)] = std::current_exception();
    }
  };
  int t = 0;
  try {
    for (; t < threads; ++t) pool.emplace_back(part, t);
  } catch (const std::system_error&) {  // no more threads: this one walks the parts left
  }
  for (int left = t; left < threads; ++left) part(left);
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace

const Plane& DeviceLayout::plane(const std::string& name) const {
  for (const Plane& p : planes) {
    if (p.name == name) return p;
  }
  throw UnsupportedError(
      str_cat("layout of ", weight_type_name(type), " has no plane '", name, "'"));
}

DeviceLayout device_layout(GgmlType type, int64_t rows, int64_t cols) {
  const WeightFormat& f = weight_format(type);
  SPECDEC_CHECK(rows > 0, "rows", rows, "must be > 0");
  check_row_length(type, cols);
  DeviceLayout layout;
  layout.type = type;
  layout.rows = rows;
  layout.cols = cols;
  layout.groups = (rows + R - 1) / R;
  layout.blocks_per_row = cols / f.block_size;
  int64_t offset = 0;
  for (const PlaneSpec& spec : plane_specs(type)) {
    layout.planes.push_back({spec.name, offset, spec.record_bytes});
    const int64_t bytes = layout.groups * layout.blocks_per_row * spec.record_bytes;
    offset += (bytes + kPlaneAlignment - 1) / kPlaneAlignment * kPlaneAlignment;
  }
  layout.total_bytes = offset;
  return layout;
}

std::vector<uint8_t> repack(const DeviceLayout& layout, const uint8_t* src) {
  std::vector<uint8_t> packed(static_cast<size_t>(layout.total_bytes), 0);
  walk(layout, const_cast<uint8_t*>(src), packed.data(), true);
  return packed;
}

void repack_into(const DeviceLayout& layout, const uint8_t* src, uint8_t* dst) {
  walk(layout, const_cast<uint8_t*>(src), dst, true);
}

void unpack_row(const DeviceLayout& layout, const uint8_t* packed, int64_t r, uint8_t* dst) {
  SPECDEC_CHECK(r >= 0 && r < layout.rows, "row", r, str_cat("must be in [0, ", layout.rows, ")"));
  const WeightFormat& f = weight_format(layout.type);
  const int64_t nb = layout.blocks_per_row, g = r / R;
  const int lane = static_cast<int>(r % R);
  uint8_t* rec[8] = {};
  SPECDEC_CHECK(layout.planes.size() <= 8, "planes", layout.planes.size(), "at most 8");
  for (int64_t b = 0; b < nb; ++b) {
    for (size_t p = 0; p < layout.planes.size(); ++p) {
      const Plane& plane = layout.planes[p];
      rec[p] = const_cast<uint8_t*>(packed) + plane.offset + (g * nb + b) * plane.record_bytes;
    }
    move_block(layout.type, dst + b * f.block_bytes, rec, lane, false);
  }
}

std::vector<uint8_t> unpack(const DeviceLayout& layout, const uint8_t* packed) {
  std::vector<uint8_t> blocks(
      static_cast<size_t>(layout.rows * row_bytes(layout.type, layout.cols)));
  walk(layout, blocks.data(), const_cast<uint8_t*>(packed), false);
  return blocks;
}

}  // namespace specdec::quant
