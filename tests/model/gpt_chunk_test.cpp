// The whole model on the CPU: gradients against finite differences (GPT-2, Llama, Qwen3), Qwen3's
// q/k norms against a direct computation, the loss of a fresh model, and a split into two chunks
// reproducing the whole model.
#include <cmath>
#include <random>

#include "kernels/ops.hpp"
#include "model/gpt_chunk.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

// Qwen3 is Llama-style with q/k norms, a head dimension (16) apart from hidden / heads (8) and
// a tied output layer.
// Mistral is Llama-style with a sliding window (3 positions) shorter than the sequence (6).
enum class Family { gpt2, llama, qwen3, mistral };

const char* family_name(Family f) {
  return f == Family::gpt2 ? "Gpt2" : f == Family::llama ? "Llama" : f == Family::qwen3 ? "Qwen3" : "Mistral";
}

GptConfig tiny(Family f) {
  const bool llama = f != Family::gpt2;
  GptConfig c = llama ? GptConfig::llama_style(2, 32, 4, 2, 48) : GptConfig::gpt2_124m();
  if (!llama) {
    c.num_layers = 2;
    c.hidden_size = 16;
    c.num_attention_heads = 2;
  }
  if (f == Family::qwen3) {
    c.kv_channels = 16;
    c.qk_layernorm = true;
    c.untie_embeddings_and_output_weights = false;
  }
  if (f == Family::mistral) c.sliding_window = 3;
  c.seq_length = 6;
  c.vocab_size = 50;
  c.make_vocab_size_divisible_by = 8;  // 50 -> 56: padded columns exist
  c.hidden_dropout = 0.1f;             // exercises the dropout paths (same masks in every forward)
  c.attention_dropout = 0.0f;
  c.init_method_std = 0.2f;  // larger weights: gradients well above finite-difference noise
  return c;
}

struct Inputs {
  Tensor tokens, targets;
  int64_t counted = 0;
};

Inputs make_inputs(int64_t B, int64_t T, int32_t V, uint64_t seed) {
  Inputs in{random_tokens({B, T}, seed, V), random_tokens({B, T}, seed + 1, V)};
  in.targets.data_as<int32_t>()[1] = -1;  // one ignored position
  for (int64_t i = 0; i < in.targets.numel(); ++i) in.counted += in.targets.data_as<int32_t>()[i] >= 0;
  return in;
}

double mean_loss(GptChunk& m, const Inputs& in, float grad_scale) {
  ActivationsPtr a =
      m.forward(in.tokens, in.targets, Tensor(), {.training = true, .loss_grad_scale = grad_scale, .dropout_seed = 7});
  double s = 0;
  for (int64_t i = 0; i < a->losses.numel(); ++i) s += a->losses.data_as<float>()[i];
  m.release(std::move(a));
  return s / double(in.counted);
}

class GptGradient : public ::testing::TestWithParam<Family> {};

TEST_P(GptGradient, EveryParameterMatchesFiniteDifferences) {
  const GptConfig c = tiny(GetParam());
  GptChunk model(cpu(), c, ChunkSpec::whole_model(), DType::f32);
  model.init_weights(3);
  const Inputs in = make_inputs(2, c.seq_length, int32_t(c.vocab_size), 11);
  const float scale = 1.0f / float(in.counted);

  ActivationsPtr a =
      model.forward(in.tokens, in.targets, Tensor(), {.training = true, .loss_grad_scale = scale, .dropout_seed = 7});
  model.backward(*a, Tensor(), Tensor());
  model.release(std::move(a));

  const Tensor grads = model.grads();
  for (const ParamInfo& p : model.layout().params()) {
    const Tensor w = model.params().slice(p.offset, {p.numel()});
    const Tensor g = grads.slice(p.offset, {p.numel()});
    if (p.name == "embedding.word_embeddings.weight") {
      // Padded vocabulary rows get no gradient: check the real rows only.
      const int64_t real = c.vocab_size * c.hidden_size;
      expect_grad_close(
          p.name, [&] { return mean_loss(model, in, scale); }, w.slice(0, {real}), g.slice(0, {real}), 8, 1e-2f, 3e-2,
          2e-4);
      continue;
    }
    expect_grad_close(
        p.name, [&] { return mean_loss(model, in, scale); }, w, g, 6, 1e-2f, 3e-2, 2e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, GptGradient,
                         ::testing::Values(Family::gpt2, Family::llama, Family::qwen3, Family::mistral),
                         [](const auto& info) { return std::string(family_name(info.param)); });

// A Qwen3 layer's q and k against a direct computation from its saved activations: the QKV
// projection of the normed input, each query head RMS-normed with the q weight and each key head
// with the k weight (HF Qwen3's q_norm / k_norm on the [.., heads, D] view), then RoPE; values as
// projected.
TEST(GptChunk, QkNormIsRmsNormOfEachHeadBeforeRope) {
  const GptConfig c = tiny(Family::qwen3);
  GptChunk model(cpu(), c, ChunkSpec::whole_model(), DType::f32);
  model.load_weights(random_normal({model.layout().size()}, 21, 0.5f));  // the norm weights too
  const Inputs in = make_inputs(2, c.seq_length, int32_t(c.vocab_size), 23);
  ActivationsPtr a = model.forward(in.tokens, in.targets, Tensor(), {.training = false});
  const int64_t H = c.num_attention_heads, G = c.query_groups(), D = c.head_dim(), W = c.qkv_size();
  const int64_t n = a->rows();
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerActivations& s = a->layers[size_t(l)];
    const LayerTensors w = model.layout().layer(model.params(), l);
    Tensor projected = Tensor::host(DType::f32, {n, W});
    linear_forward(cpu(), s.ln1, w.qkv_w, Tensor(), projected);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t head = 0; head < H + G; ++head) {
        float* x = projected.data_as<float>() + r * W + head * D;
        const float* g = (head < H ? w.q_norm : w.k_norm).data_as<float>();
        double sq = 0;
        for (int64_t j = 0; j < D; ++j) sq += double(x[j]) * x[j];
        const double rstd = 1.0 / std::sqrt(sq / double(D) + double(c.norm_epsilon));
        for (int64_t j = 0; j < D; ++j) x[j] = float(x[j] * rstd) * g[j];
      }
    rope_apply(cpu(), projected.view({a->batch, a->seq, W}), {int(H), int(G), int(D), c.rotary_base}, false);
    EXPECT_LT(max_abs_diff(projected, s.qkv), 1e-5) << "layer " << l;
  }
}

TEST(GptChunk, FreshModelLossIsNearLogVocab) {
  GptConfig c = tiny(Family::gpt2);
  c.init_method_std = 0.02f;
  GptChunk model(cpu(), c, ChunkSpec::whole_model(), DType::f32);
  model.init_weights(5);
  const Inputs in = make_inputs(2, c.seq_length, int32_t(c.vocab_size), 13);
  ActivationsPtr a = model.forward(in.tokens, in.targets, Tensor(), {.training = false});
  double s = 0;
  for (int64_t i = 0; i < a->losses.numel(); ++i) s += a->losses.data_as<float>()[i];
  EXPECT_NEAR(s / double(in.counted), std::log(double(c.vocab_size)), 0.1);
  EXPECT_EQ(a->losses.data_as<float>()[1], 0.0f) << "an ignored target contributes no loss";
}

// Embedding + layer 0 on one chunk, layer 1 + head on another: same loss and gradients as
// the whole model (what a two-stage pipeline computes).
TEST(GptChunk, TwoChunksReproduceTheWholeModel) {
  for (Family f : {Family::gpt2, Family::llama, Family::qwen3}) {
    const GptConfig c = tiny(f);
    GptChunk whole(cpu(), c, ChunkSpec::whole_model(), DType::f32);
    GptChunk first(cpu(), c, {0, 1, true, false}, DType::f32);
    GptChunk last(cpu(), c, {1, 1, false, true}, DType::f32);
    whole.init_weights(9);
    first.init_weights(9);
    last.init_weights(9);
    const Inputs in = make_inputs(2, c.seq_length, int32_t(c.vocab_size), 17);
    const ForwardOptions fo{.training = true, .loss_grad_scale = 1.0f / float(in.counted), .dropout_seed = 3};

    ActivationsPtr a = whole.forward(in.tokens, in.targets, Tensor(), fo);
    whole.backward(*a, Tensor(), Tensor());

    const Tensor hidden = Tensor::host(DType::f32, {2, c.seq_length, c.hidden_size});
    const Tensor dhidden = Tensor::host(DType::f32, hidden.shape());
    ActivationsPtr a1 = first.forward(in.tokens, Tensor(), hidden, fo);
    ActivationsPtr a2 = last.forward(hidden, in.targets, Tensor(), fo);
    last.backward(*a2, Tensor(), dhidden);
    first.backward(*a1, dhidden, Tensor());

    EXPECT_LT(rel_error(a2->losses, a->losses), 1e-6) << family_name(f);
    for (const GptChunk* part : {&first, &last}) {
      for (const ParamInfo& p : part->layout().params()) {
        Tensor expected = whole.layout().view(whole.grads(), p.name);
        Tensor got = part->layout().view(part->grads(), p.name);
        if (c.untie_embeddings_and_output_weights || p.name != "embedding.word_embeddings.weight") {
          EXPECT_LT(rel_error(got, expected), 1e-5) << p.name;
        }
      }
    }
    // Tied embeddings: the whole model's gradient is the sum of both stages' copies.
    if (!c.untie_embeddings_and_output_weights) {
      Tensor sum = Tensor::host(DType::f32, {c.padded_vocab_size(), c.hidden_size});
      const Tensor g1 = first.layout().view(first.grads(), "embedding.word_embeddings.weight");
      const Tensor g2 = last.layout().view(last.grads(), "embedding.word_embeddings.weight");
      for (int64_t i = 0; i < sum.numel(); ++i) sum.at(i) = g1.at(i) + g2.at(i);
      EXPECT_LT(rel_error(sum, whole.layout().view(whole.grads(), "embedding.word_embeddings.weight")), 1e-5);
    }
  }
}

TEST(GptChunk, BadInputsAreErrors) {
  const GptConfig c = tiny(Family::gpt2);
  GptChunk model(cpu(), c, ChunkSpec::whole_model(), DType::f32);
  const Inputs in = make_inputs(2, c.seq_length + 1, int32_t(c.vocab_size), 1);
  EXPECT_THROW(model.forward(in.tokens, in.targets, Tensor(), {}), Error);  // longer than --seq-length
  const Inputs ok = make_inputs(2, c.seq_length, int32_t(c.vocab_size), 1);
  EXPECT_THROW(model.forward(ok.tokens, Tensor(), Tensor(), {.training = true}), Error);  // no targets
  EXPECT_THROW(GptChunk(cpu(), c, ChunkSpec::whole_model(), DType::bf16), Error);         // CPU computes in f32
}

}  // namespace
}  // namespace troupe::test
