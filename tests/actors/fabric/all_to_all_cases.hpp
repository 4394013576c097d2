// All-to-all cases shared by the collectives tests (in-process CPU groups, groups across
// processes, NCCL groups): row counts per (sender, receiver) pair, uneven and with zeros;
// inputs every process can make on its own (random bytes: all_to_all moves bytes, so every
// bit must arrive); and each member's expected output, assembled on the host.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"

namespace troupe::test {

// Every dtype the all-to-alls move.
inline const std::vector<DType>& all_to_all_dtypes() {
  static const std::vector<DType> dtypes = {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64};
  return dtypes;
}

struct AllToAllCase {
  std::string name;
  int64_t width = 1;                      // elements per row
  std::function<int64_t(int, int)> rows;  // rows(src, dst): rows member src sends member dst

  std::vector<int64_t> send_counts(int size, int member) const {
    std::vector<int64_t> c;
    for (int dst = 0; dst < size; ++dst) c.push_back(rows(member, dst));
    return c;
  }
  std::vector<int64_t> recv_counts(int size, int member) const {
    std::vector<int64_t> c;
    for (int src = 0; src < size; ++src) c.push_back(rows(src, member));
    return c;
  }
  // Member `member`'s in: [sum of its send counts, width], random bytes.
  Tensor input(int size, int member, DType dtype) const {
    int64_t total = 0;
    for (int64_t c : send_counts(size, member)) total += c;
    Tensor t = Tensor::host(dtype, {total, width});
    uint64_t x = (uint64_t(member) + 1) * 0x9E3779B97F4A7C15ull + uint64_t(dtype) * 7919 + uint64_t(width);
    auto* bytes = static_cast<uint8_t*>(t.data());
    for (size_t i = 0; i < t.nbytes(); i += 8) {  // splitmix64, 8 bytes a step
      uint64_t z = (x += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      std::memcpy(bytes + i, &z, std::min<size_t>(8, t.nbytes() - i));
    }
    return t;
  }
  // Member `member`'s out: member src's rows for it, src = 0, 1, ... in turn.
  Tensor expected(int size, int member, DType dtype) const {
    int64_t total = 0;
    for (int64_t c : recv_counts(size, member)) total += c;
    Tensor out = Tensor::host(dtype, {total, width});
    const size_t row = size_t(width) * dtype_size(dtype);
    auto* dst = static_cast<std::byte*>(out.data());
    for (int src = 0; src < size; ++src) {
      const Tensor in = input(size, src, dtype);
      int64_t begin = 0;
      for (int d = 0; d < member; ++d) begin += rows(src, d);
      const size_t bytes = size_t(rows(src, member)) * row;
      if (bytes > 0) std::memcpy(dst, static_cast<const std::byte*>(in.data()) + size_t(begin) * row, bytes);
      dst += bytes;
    }
    return out;
  }
};

// all_to_all's equal split: n elements for every pair.
inline AllToAllCase equal_split(int64_t n) {
  return {"equal n " + std::to_string(n), 1, [n](int, int) { return n; }};
}

// Uneven splits (as tokens routed to experts are): zeros scattered over the pairs, a member
// that sends nothing at all, one that receives nothing, nothing anywhere, and (big) pieces
// large enough for MPI's rendezvous protocol.
inline std::vector<AllToAllCase> uneven_cases(bool big) {
  std::vector<AllToAllCase> cases = {
      {"scattered zeros", 3, [](int src, int dst) { return int64_t((3 * src + 5 * dst + 1) % 4); }},
      {"member 0 sends nothing", 5, [](int src, int dst) { return src == 0 ? 0 : int64_t((src + dst) % 3 + 2 * dst); }},
      {"member 0 receives nothing", 1, [](int src, int dst) { return dst == 0 ? 0 : int64_t(src + 7 * dst); }},
      {"nothing anywhere", 4, [](int, int) { return int64_t(0); }},
  };
  if (big) cases.push_back({"big", 1024, [](int src, int dst) { return int64_t(40 * (src + 1) * (dst + 1) + src); }});
  return cases;
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && (a.nbytes() == 0 || std::memcmp(a.data(), b.data(), a.nbytes()) == 0);
}

}  // namespace troupe::test
