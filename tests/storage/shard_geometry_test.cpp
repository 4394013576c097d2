// Flat ranges of a local tensor as boxes, their places in the global tensor (pieces along
// a split dimension, clipped vocabulary rows), and box copies: every element lands where the
// index arithmetic of a plain loop says.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "storage/shard_geometry.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

// Row-major flat index of `idx` in `shape`.
int64_t flat_index(const Shape& shape, const Shape& idx) {
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

// Calls fn(index) for every index of the box, in row-major order.
void for_each_index(const ShardSlice& box, const std::function<void(const Shape&)>& fn) {
  if (box.numel() == 0) return;
  Shape idx = box.offset;
  while (true) {
    fn(idx);
    size_t d = idx.size();
    while (true) {
      if (d == 0) return;
      --d;
      if (++idx[d] < box.offset[d] + box.length[d]) break;
      idx[d] = box.offset[d];
    }
  }
}

TEST(FlatRangeBoxes, CoverTheRangeInOrder) {
  std::mt19937 rng(3);
  const std::vector<Shape> shapes = {{7}, {5, 6}, {3, 4, 5}, {2, 3, 4, 5}, {1, 9}};
  for (const Shape& shape : shapes) {
    const int64_t n = shape_numel(shape);
    for (int trial = 0; trial < 200; ++trial) {
      int64_t a = int64_t(rng() % uint32_t(n + 1)), b = int64_t(rng() % uint32_t(n + 1));
      if (a > b) std::swap(a, b);
      int64_t next = a;
      for (const ShardSlice& box : flat_range_boxes(shape, a, b)) {
        for_each_index(box, [&](const Shape& idx) { ASSERT_EQ(flat_index(shape, idx), next++) << shape_str(shape); });
      }
      EXPECT_EQ(next, b) << shape_str(shape) << " [" << a << ", " << b << ")";
    }
  }
}

TEST(FlatRangeBoxes, FewBoxes) {
  // A range over whole rows is one box; a ragged one at most head + middle + tail per level.
  EXPECT_EQ(flat_range_boxes({4, 8}, 8, 24).size(), 1u);
  EXPECT_EQ(flat_range_boxes({4, 8}, 3, 29).size(), 3u);
  EXPECT_THROW(flat_range_boxes({4, 8}, 0, 33), Error);
}

TEST(PlaceBox, PiecesAndClippedRows) {
  // A rank holding global rows [8, 10) then [2, 4) of a [12, 3] tensor stored with 9 rows.
  const ShardGeometry g{.local_shape = {4, 3}, .global_shape = {9, 3}, .split_dim = 0, .pieces = {{8, 2}, {2, 2}}};
  const std::vector<BoxPlacement> p = place_box(g, ShardSlice::whole(g.local_shape));
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].local.offset, (Shape{0, 0}));
  EXPECT_EQ(p[0].local.length, (Shape{1, 3}));  // global row 9 is padding: not stored
  EXPECT_EQ(p[0].global.offset, (Shape{8, 0}));
  EXPECT_EQ(p[1].local.offset, (Shape{2, 0}));
  EXPECT_EQ(p[1].global.offset, (Shape{2, 0}));
  EXPECT_EQ(p[1].global.length, (Shape{2, 3}));
}

TEST(PlaceBox, ColumnSplitFromPartialRows) {
  // Columns [4, 8) of an [3, 8] tensor; the flat range [2, 7) of the [3, 4] local shard.
  const ShardGeometry g{.local_shape = {3, 4}, .global_shape = {3, 8}, .split_dim = 1, .pieces = {{4, 4}}};
  std::vector<float> global(24, 0.0f), local(12);
  std::iota(local.begin(), local.end(), 1.0f);
  for (const ShardSlice& box : flat_range_boxes(g.local_shape, 2, 7)) {
    const float* src = local.data() + flat_index(g.local_shape, box.offset);  // each box is contiguous
    for (const BoxPlacement& p : place_box(g, box)) {
      std::vector<float> part(size_t(p.global.numel()));
      copy_box_region(src, box, part.data(), p.local, p.local, sizeof(float));
      copy_box_region(part.data(), p.global, global.data(), ShardSlice::whole(g.global_shape), p.global, sizeof(float));
    }
  }
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 8; ++c) {
      const int64_t lf = r * 4 + (c - 4);
      const float want = (c >= 4 && lf >= 2 && lf < 7) ? local[size_t(lf)] : 0.0f;
      EXPECT_EQ(global[size_t(r * 8 + c)], want) << r << "," << c;
    }
}

}  // namespace
}  // namespace troupe::test
