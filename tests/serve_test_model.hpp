// A tiny random GPT-2 with the real GPT-2 tokenizer, as the inference pool and HTTP API tests
// serve it on CPU devices, and the engine alone on the same weights (what a request must get).
//
//   ServeTestModel m(/*seq_length=*/64);
//   actors::InferencePool pool(m.replicas(2));
//   EXPECT_EQ(pool.generate(req).tokens, m.alone(req));
#pragma once

#include <memory>
#include <vector>

#include "actors/serve/inference_pool.hpp"
#include "data/gpt2_tokenizer.hpp"
#include "kernels/collectives.hpp"
#include "model/config.hpp"

namespace troupe::test {

struct ServeTestModel {
  explicit ServeTestModel(int seq_length = 64);

  // `n` CPU replicas; each engine has `num_blocks` blocks of 8 tokens and runs 4 requests at most.
  std::vector<actors::InferenceReplica> replicas(int n, int64_t num_blocks = 32) const;
  // One replica that is a tensor-parallel group of CPU devices over `group` (which must outlive
  // the replica), the same budgets.
  actors::InferenceReplica tensor_parallel_replica(const std::vector<std::unique_ptr<Collectives>>& group,
                                                   int64_t num_blocks = 32) const;
  // The engine alone, one request at a time: the generated ids.
  std::vector<int32_t> alone(const GenerationRequest& req, int64_t num_blocks = 32) const;

  GptConfig config;
  Tensor weights;
  Gpt2Tokenizer tok;
};

}  // namespace troupe::test
