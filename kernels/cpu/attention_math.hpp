// The vector loops the CPU attention references share (attention.cpp, attention_block.cpp,
// paged_attention.cpp): plain f32 loops in index order, so every reference sums the same way.
#pragma once

namespace troupe::cpu {

inline float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y += alpha * x
inline void axpy(float alpha, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace troupe::cpu
