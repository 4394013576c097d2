// main() of every GPU test: exit 77 (CTest's "skipped") when no GPU is visible.
#include <cstdio>

#include <gtest/gtest.h>

#include "kernels/context.hpp"

int main(int argc, char** argv) {
  if (!troupe::cuda_available()) {
    std::printf("no CUDA device visible%s: skipping GPU test\n", troupe::cuda_built() ? "" : " (CUDA not built)");
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
