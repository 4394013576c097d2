#include "storage/shard_geometry.hpp"

#include <algorithm>
#include <cstring>

#include "base/check.hpp"

namespace troupe {

namespace {

// Boxes for [begin, end) of the tensor `shape[dim:]`, whose outer coordinates are `prefix`.
void range_boxes(const Shape& shape, size_t dim, Shape& prefix, int64_t begin, int64_t end,
                 std::vector<ShardSlice>& out) {
  if (begin >= end) return;
  const size_t nd = shape.size();
  auto emit = [&](int64_t first, int64_t count) {  // `count` whole sub-blocks of dim from `first`
    ShardSlice s;
    s.offset = prefix;
    s.length.assign(prefix.size(), 1);
    s.offset.push_back(first);
    s.length.push_back(count);
    for (size_t d = dim + 1; d < nd; ++d) {
      s.offset.push_back(0);
      s.length.push_back(shape[d]);
    }
    out.push_back(std::move(s));
  };
  int64_t inner = 1;
  for (size_t d = dim + 1; d < nd; ++d) inner *= shape[d];
  const int64_t first = begin / inner, last = (end - 1) / inner;  // sub-blocks touched
  auto partial = [&](int64_t block, int64_t lo, int64_t hi) {     // [lo, hi) inside one sub-block
    if (lo == 0 && hi == inner) return emit(block, 1);
    prefix.push_back(block);
    range_boxes(shape, dim + 1, prefix, lo, hi, out);
    prefix.pop_back();
  };
  if (first == last) return partial(first, begin - first * inner, end - first * inner);
  int64_t whole_from = first, whole_to = last + 1;
  if (begin % inner != 0) {
    partial(first, begin % inner, inner);
    whole_from = first + 1;
  }
  const bool tail = end % inner != 0;
  if (tail) whole_to = last;
  if (whole_to > whole_from) emit(whole_from, whole_to - whole_from);
  if (tail) partial(last, 0, end - last * inner);
}

}  // namespace

std::vector<ShardSlice> flat_range_boxes(const Shape& shape, int64_t begin, int64_t end) {
  TROUPE_CHECK(0 <= begin && begin <= end && end <= shape_numel(shape), "flat_range_boxes: range [", begin, ", ", end,
               ") outside a tensor of shape ", shape_str(shape));
  std::vector<ShardSlice> out;
  if (shape.empty()) {
    if (begin < end) out.push_back(ShardSlice{});
    return out;
  }
  Shape prefix;
  range_boxes(shape, 0, prefix, begin, end, out);
  return out;
}

std::vector<BoxPlacement> place_box(const ShardGeometry& g, const ShardSlice& local_box) {
  std::vector<BoxPlacement> out;
  if (g.local_shape.empty()) {
    out.push_back({local_box, local_box});
    return out;
  }
  const int dim = g.split_dim < 0 ? 0 : g.split_dim;
  std::vector<std::pair<int64_t, int64_t>> pieces = g.pieces;
  if (g.split_dim < 0) pieces = {{0, g.local_shape[0]}};
  const int64_t lo = local_box.offset[size_t(dim)], hi = lo + local_box.length[size_t(dim)];
  int64_t local_start = 0;
  for (const auto& [global_start, length] : pieces) {
    const int64_t a = std::max(lo, local_start), b = std::min(hi, local_start + length);
    if (a < b) {
      BoxPlacement p{local_box, local_box};
      p.local.offset[size_t(dim)] = a;
      p.local.length[size_t(dim)] = b - a;
      p.global.offset[size_t(dim)] = global_start + (a - local_start);
      p.global.length[size_t(dim)] = b - a;
      // Rows past the stored tensor (vocabulary padding) are not stored.
      const int64_t rows = g.global_shape[0];
      const int64_t r0 = p.global.offset[0], r1 = std::min(rows, r0 + p.global.length[0]);
      if (r1 > r0) {
        p.global.length[0] = r1 - r0;
        p.local.length[0] = r1 - r0;
        out.push_back(std::move(p));
      }
    }
    local_start += length;
  }
  return out;
}

void copy_box_region(const void* src, const ShardSlice& src_box, void* dst, const ShardSlice& dst_box,
                     const ShardSlice& region, size_t elem) {
  const size_t nd = region.length.size();
  if (region.numel() == 0) return;
  if (nd == 0) {
    std::memcpy(dst, src, elem);
    return;
  }
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  // Walk the region's rows (all dims but the last), copying one contiguous run each.
  const size_t run = size_t(region.length[nd - 1]) * elem;
  Shape idx = region.offset;
  while (true) {
    int64_t so = 0, doff = 0;
    for (size_t k = 0; k < nd; ++k) {
      so = so * src_box.length[k] + (idx[k] - src_box.offset[k]);
      doff = doff * dst_box.length[k] + (idx[k] - dst_box.offset[k]);
    }
    std::memcpy(d + size_t(doff) * elem, s + size_t(so) * elem, run);
    // Advance dims nd-2 .. 0 like an odometer.
    size_t k = nd - 1;
    while (true) {
      if (k == 0) return;
      --k;
      if (++idx[k] < region.offset[k] + region.length[k]) break;
      idx[k] = region.offset[k];
    }
  }
}

}  // namespace troupe
