#include "device/buffer.h"

#include "common/errors.h"
#include "common/math.h"

namespace specdec::device {

void check_slice(const Slice& s, int64_t num_elems, const std::string& what) {
  SPECDEC_CHECK(s.buffer != nullptr && !s.buffer->empty(), what, "(no buffer)",
               "must be an allocated device buffer");
  SPECDEC_CHECK(s.offset >= 0, what + ".offset", s.offset, "must be >= 0");
  const int64_t capacity = static_cast<int64_t>(s.buffer->size_bytes() / 4);
  SPECDEC_CHECK(
      num_elems >= 0 && s.offset <= capacity && num_elems <= capacity - s.offset, what,
      str_cat(num_elems, " elements from offset ", s.offset),
      str_cat("must fit in the buffer of ", capacity, " 4-byte elements; pass a larger buffer"));
}

}  // namespace specdec::device
