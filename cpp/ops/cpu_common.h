// What the native CPU implementations of the ops share (ops/cpu_<family>.cpp): host pointers of
// slices and the device to record on. Each op is recorded on the device (CpuDevice::record) with
// its arguments by value and runs at the next flush, split by rows over the pool's threads.
#pragma once

#include <cstdint>

#include "cpu/act_rec.h"
#include "cpu/ops.h"
#include "device/cpu_device.h"
#include "ops/norm.h"
#include "ops/slice.h"

namespace specdec::ops {

// The slice's first element in host memory (4-byte elements).
template <typename T>
T* host_of(const Slice& s) {
  static_assert(sizeof(T) == 4, "op slices count 4-byte elements");
  return reinterpret_cast<T*>(s.buffer->host()) + s.offset;
}

// The CPU records of a QuantizedOut (q8 and rec; the OpenCL-only int16 copy is not written).
inline cpu::QuantOut quant_out_of(const QuantizedOut& q) {
  return cpu::QuantOut{reinterpret_cast<int8_t*>(q.q8->host()),
                       reinterpret_cast<cpu::ActRec*>(q.rec->host()), q.scale_block};
}

// Rows per run of work handed to a thread: about 16 KiB of a row op's input.
inline int64_t row_grain(int64_t row_elems) {
  const int64_t g = (int64_t{4096} + row_elems - 1) / (row_elems > 0 ? row_elems : 1);
  return g < 1 ? 1 : g;
}

}  // namespace specdec::ops
