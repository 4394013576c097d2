// Where the pieces of one rank's tensor lie in the global tensor a checkpoint stores, and
// the box copies that move bytes between the two.
//
// A rank holds the global tensor cut along `split_dim` into `pieces` (global start, length),
// concatenated in that order (tensor parallelism: vocabulary rows, head groups, FFN columns).
// The stored global tensor may have fewer rows than the rank's view of it (`global_shape[0]`
// below the pieces' extent: the vocabulary padding, which depends on the TP size, is not
// stored); rows past it are dropped on save and left alone on load.
//
//   ShardGeometry g{.local_shape = {4, 8}, .global_shape = {6, 8}, .split_dim = 0, .pieces = {{4, 4}}};
//   for (const ShardSlice& run : flat_range_boxes(g.local_shape, 0, 32))
//     for (const BoxPlacement& p : place_box(g, run)) ...   // p.local rows 0..1 -> p.global rows 4..5
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "storage/checkpoint_format.hpp"

namespace troupe {

struct ShardGeometry {
  Shape local_shape;
  Shape global_shape;  // as stored (dim 0 possibly clipped)
  int split_dim = -1;  // -1: the rank holds all of it (one piece covering dim 0)
  std::vector<std::pair<int64_t, int64_t>> pieces;
};

// Boxes of a row-major tensor of `shape` covering its flat elements [begin, end), in order.
// Each box is contiguous in memory (its row-major order is the tensor's), so the elements of
// a flat range are exactly the boxes' elements one after another.
std::vector<ShardSlice> flat_range_boxes(const Shape& shape, int64_t begin, int64_t end);

// A box of the local tensor and the box of the global tensor it is.
struct BoxPlacement {
  ShardSlice local;
  ShardSlice global;
};
// The parts of `local_box` that the global tensor stores, one per piece it touches.
std::vector<BoxPlacement> place_box(const ShardGeometry& g, const ShardSlice& local_box);

// Copies the elements of `region` from a row-major buffer holding box `src_box` to one holding
// `dst_box` (all three in the same coordinates; `region` inside both). `elem` bytes per element.
void copy_box_region(const void* src, const ShardSlice& src_box, void* dst, const ShardSlice& dst_box,
                     const ShardSlice& region, size_t elem);

}  // namespace troupe
