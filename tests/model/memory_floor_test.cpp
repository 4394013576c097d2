#include "model/memory_floor.hpp"

#include <gtest/gtest.h>

#include "base/check.hpp"
#include "tests/test_util.hpp"

namespace troupe {
namespace {

TEST(MemoryFloor, IsTheLogitsOfOneMicrobatchOnOneTensorParallelRank) {
  GptConfig c = GptConfig::gpt2_124m();  // vocabulary 50257 -> 50304 (TP1), 50688 (TP4: a multiple of 128 x 4)
  EXPECT_EQ(microbatch_memory_floor(c, 8, 1, DType::bf16), int64_t(8) * 1024 * 50304 * 2);
  EXPECT_EQ(microbatch_memory_floor(c, 8, 4, DType::f32), int64_t(8) * 1024 * (50688 / 4) * 4);
  EXPECT_EQ(microbatch_memory_floor(c, int64_t(1) << 40, 1, DType::f32), INT64_MAX);  // saturates, no wrap
}

TEST(MemoryFloor, RefusesAMicroBatchThatCannotFitNamingTheFlag) {
  const GptConfig c = GptConfig::gpt2_124m();
  const int64_t gib80 = int64_t(80) << 30;
  EXPECT_NO_THROW(check_microbatch_fits(c, 64, 1, DType::bf16, gib80));  // 6.1 GiB of logits
  try {
    check_microbatch_fits(c, 1024, 1, DType::bf16, gib80);  // 98 GiB
    FAIL() << "a 98 GiB microbatch was accepted on an 80 GiB device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--micro-batch-size 1024"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace troupe
