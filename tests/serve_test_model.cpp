#include "tests/serve_test_model.hpp"

#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {

namespace {
constexpr int kBlockSize = 8;
const InferenceModelOptions kModelOptions{.max_tokens = 64, .max_sequences = 4};
}  // namespace

ServeTestModel::ServeTestModel(int seq_length)
    : config(tiny_inference_config(true, 32, seq_length, 50257)),
      weights(random_normal({ParamLayout(config, ChunkSpec::whole_model()).size()}, 8, 0.3f)),
      tok(Gpt2Tokenizer::from_files(source_path("assets/gpt2/gpt2-vocab.json"),
                                    source_path("assets/gpt2/gpt2-merges.txt"))) {}

std::vector<actors::InferenceReplica> ServeTestModel::replicas(int n, int64_t num_blocks) const {
  std::vector<actors::InferenceReplica> out;
  for (int i = 0; i < n; ++i) {
    actors::InferenceReplica r;
    r.context = std::make_shared<const Context>(Context::cpu());
    r.model = std::make_shared<InferenceModel>(*r.context, config, DType::f32, kModelOptions);
    r.model->load_weights(weights);
    r.engine = {.num_blocks = num_blocks, .block_size = kBlockSize};
    std::shared_ptr<const Tokenizer> t = tok.clone();
    r.detokenize = [t](std::span<const int32_t> ids) { return t->decode(ids); };
    out.push_back(std::move(r));
  }
  return out;
}

actors::InferenceReplica ServeTestModel::tensor_parallel_replica(const std::vector<std::unique_ptr<Collectives>>& group,
                                                                 int64_t num_blocks) const {
  const int T = int(group.size());
  const ParamLayout whole(config, ChunkSpec::whole_model());
  actors::InferenceReplica r;
  for (int t = 0; t < T; ++t) {
    auto ctx = std::make_shared<const Context>(Context::cpu());
    // The model refers to its context: the model's deleter keeps the context alive.
    auto model =
        std::shared_ptr<InferenceModel>(new InferenceModel(*ctx, config, DType::f32, kModelOptions,
                                                           TensorParallel{{t, T}, false, group[size_t(t)].get()}),
                                        [ctx](InferenceModel* m) { delete m; });
    model->load_weights(shard_params(whole, weights, model->layout()));
    if (t == 0) {
      r.context = ctx;
      r.model = std::move(model);
    } else {
      r.other_ranks.push_back(std::move(model));
    }
  }
  r.engine = {.num_blocks = num_blocks, .block_size = kBlockSize};
  std::shared_ptr<const Tokenizer> tk = tok.clone();
  r.detokenize = [tk](std::span<const int32_t> ids) { return tk->decode(ids); };
  return r;
}

std::vector<int32_t> ServeTestModel::alone(const GenerationRequest& req, int64_t num_blocks) const {
  InferenceModel model(cpu(), config, DType::f32, kModelOptions);
  model.load_weights(weights);
  InferenceEngine engine(model, {.num_blocks = num_blocks, .block_size = kBlockSize});
  std::vector<int32_t> out;
  engine.add_request(req, [&](const TokenEvent& e) {
    if (e.has_token) out.push_back(e.token);
  });
  engine.run();
  return out;
}

}  // namespace troupe::test
