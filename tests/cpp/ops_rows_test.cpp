// gather_rows, copy_2d, split_columns and gather_columns against ops::ref: exact copies (bitwise),
// out-of-range indices give NaN, offsets and strides; argument errors.
#include <gtest/gtest.h>

#include <tuple>

#include "common/errors.h"
#include "ops/reference.h"
#include "ops/rows.h"
#include "ops_test_util.h"

using namespace specdec;
using namespace specdec::ops;
using namespace specdec::ops::testing;

namespace {

class GatherRows : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(GatherRows, SelectsRowsBitwise) {
  const auto [dim, num_src] = GetParam();
  std::mt19937 rng(dim + num_src);
  const auto src = random_floats(static_cast<size_t>(dim) * num_src, rng);
  std::vector<int32_t> idx = {num_src - 1, 0, num_src / 2, num_src - 1, -1, num_src};
  std::vector<float> want(idx.size() * dim);
  ref::gather_rows(src, idx, want, num_src, dim);
  const device::Buffer s = upload(src), ib = upload(idx),
                    d = upload(std::vector<float>(want.size() + 5));
  gather_rows(dev(), s, ib, Slice(d, 5), num_src, static_cast<int64_t>(idx.size()), dim);
  const auto got = download<float>(d, want.size(), 5);
  EXPECT_TRUE(bitwise_equal(got, want));
  EXPECT_TRUE(std::isnan(got[4 * dim])) << "index -1 gives NaN";
  EXPECT_TRUE(std::isnan(got[5 * dim + dim - 1])) << "index num_src gives NaN";
}

INSTANTIATE_TEST_SUITE_P(Ops, GatherRows,
                         ::testing::Combine(::testing::Values(1, 7, 64, 896, 1536, 2048),
                                            ::testing::Values(1, 16, 64)));

TEST(Rows, Copy2dSplitColumnsGatherColumns) {
  std::mt19937 rng(3);
  const int rows = 11, a = 896, b = 128, c = 128;
  const int64_t w = a + b + c;
  const auto src = random_floats(static_cast<size_t>(rows * w), rng);
  {  // split a fused qkv row
    std::vector<float> wa(rows * a), wb(rows * b), wc(rows * c);
    ref::split_columns(src, wa, wb, wc, rows, a, b, c);
    const device::Buffer s = upload(src), da = upload(std::vector<float>(wa.size())),
                      db = upload(std::vector<float>(wb.size() + 7)),
                      dc = upload(std::vector<float>(wc.size()));
    split_columns(dev(), s, da, Slice(db, 7), dc, rows, a, b, c);
    EXPECT_TRUE(bitwise_equal(download<float>(da, wa.size()), wa));
    EXPECT_TRUE(bitwise_equal(download<float>(db, wb.size(), 7), wb));
    EXPECT_TRUE(bitwise_equal(download<float>(dc, wc.size()), wc));
    EXPECT_TRUE(bitwise_equal(std::vector<float>(wa.begin(), wa.begin() + a),
                              std::vector<float>(src.begin(), src.begin() + a)));
  }
  {  // two-way split (c = 0): the third destination is not touched
    std::vector<float> wa(rows * a), wb(rows * (b + c)), none;
    ref::split_columns(src, wa, wb, none, rows, a, b + c, 0);
    const device::Buffer s = upload(src), da = upload(std::vector<float>(wa.size())),
                      db = upload(std::vector<float>(wb.size())),
                      dc = upload(std::vector<float>{42.0f});
    split_columns(dev(), s, da, db, dc, rows, a, b + c, 0);
    EXPECT_TRUE(bitwise_equal(download<float>(db, wb.size()), wb));
    EXPECT_EQ(download<float>(dc, 1)[0], 42.0f);
  }
  {  // copy columns [a, a + b) of src into columns [3, 3 + b) of a wider matrix
    const int64_t dst_stride = b + 10;
    std::vector<float> want(rows * dst_stride, 0.0f);
    ref::copy_2d(std::span<const float>(src).subspan(a), std::span<float>(want).subspan(3), rows, b,
                 w, dst_stride);
    const device::Buffer s = upload(src), d = upload(std::vector<float>(want.size(), 0.0f));
    copy_2d(dev(), Slice(s, a), Slice(d, 3), rows, b, w, dst_stride);
    EXPECT_TRUE(bitwise_equal(download<float>(d, want.size()), want));
  }
  {  // the logit of a chosen token per row
    const std::vector<int32_t> cols = {
        0, 5, static_cast<int32_t>(w - 1), -1, static_cast<int32_t>(w), 7, 8, 9, 10, 11, 12};
    std::vector<float> want(rows);
    ref::gather_columns(src, cols, want, rows, static_cast<int>(w));
    const device::Buffer s = upload(src), cb = upload(cols), d = upload(std::vector<float>(rows));
    gather_columns(dev(), s, cb, d, rows, static_cast<int>(w));
    const auto got = download<float>(d, rows);
    EXPECT_TRUE(bitwise_equal(got, want));
    EXPECT_TRUE(std::isnan(got[3]) && std::isnan(got[4]));
  }
}

class SplitColumns : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(SplitColumns, OddWidthsStraddlingVectors) {
  const auto [a, b, c] = GetParam();
  std::mt19937 rng(a + b + c);
  const int rows = 3;
  const auto src = random_floats(static_cast<size_t>(rows) * (a + b + c), rng);
  std::vector<float> wa(rows * a), wb(rows * b), wc(rows * c);
  ref::split_columns(src, wa, wb, wc, rows, a, b, c);
  const device::Buffer s = upload(src), da = upload(wa), db = upload(wb), dc = upload(wc);
  split_columns(dev(), s, da, db, dc, rows, a, b, c);
  EXPECT_TRUE(bitwise_equal(download<float>(da, wa.size()), wa));
  EXPECT_TRUE(bitwise_equal(download<float>(db, wb.size()), wb));
  EXPECT_TRUE(bitwise_equal(download<float>(dc, wc.size()), wc));
  // copy_2d of the middle columns into a row of odd stride
  std::vector<float> want(static_cast<size_t>(rows) * (b + 3), 0.0f);
  ref::copy_2d(std::span<const float>(src).subspan(a), want, rows, b, a + b + c, b + 3);
  const device::Buffer d = upload(std::vector<float>(want.size(), 0.0f));
  copy_2d(dev(), Slice(s, a), d, rows, b, a + b + c, b + 3);
  EXPECT_TRUE(bitwise_equal(download<float>(d, want.size()), want));
}

INSTANTIATE_TEST_SUITE_P(Ops, SplitColumns,
                         ::testing::Values(std::make_tuple(1, 1, 1), std::make_tuple(5, 7, 0),
                                           std::make_tuple(17, 3, 40), std::make_tuple(100, 37, 5),
                                           std::make_tuple(896, 128, 128),
                                           std::make_tuple(2048, 256, 256),
                                           std::make_tuple(15, 1, 16)));

TEST(Rows, BadArgumentsNameTheField) {
  const device::Buffer x = upload(std::vector<float>(64)), i = upload(std::vector<int32_t>(4));
  auto field_of = [](auto&& f) {
    try {
      f();
    } catch (const ConfigError& e) {
      return e.field();
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(field_of([&] { gather_rows(dev(), x, i, x, 4, 5, 16); }), "gather_rows.idx");
  EXPECT_EQ(field_of([&] { gather_rows(dev(), x, i, x, 5, 4, 16); }), "gather_rows.src");
  EXPECT_EQ(field_of([&] { copy_2d(dev(), x, x, 4, 16, 8, 16); }), "copy_2d.src_row_stride");
  EXPECT_EQ(field_of([&] { copy_2d(dev(), x, Slice(x, 1), 4, 16, 16, 16); }), "copy_2d.dst");
  EXPECT_EQ(field_of([&] { split_columns(dev(), x, x, x, x, 4, 0, 8, 8); }), "split_columns.a");
  EXPECT_EQ(field_of([&] { split_columns(dev(), x, x, x, Slice(x, 50), 4, 8, 4, 4); }),
            "split_columns.dst_c");
  EXPECT_EQ(field_of([&] { gather_columns(dev(), x, i, x, 5, 8); }), "gather_columns.cols");
  EXPECT_EQ(field_of([&] { gather_rows(dev(), x, i, x, 4, 0, 16); }), "(no error)");
}

}  // namespace
