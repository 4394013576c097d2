// A chunk's FP8 scaling state as a checkpoint stores it: per global layer, by name
// (gpt_chunk.hpp: fp8_buffers), so any pipeline split reads it back.
#include <algorithm>
#include <string>

#include "base/check.hpp"
#include "model/fp8/fp8_linears.hpp"
#include "model/gpt_chunk.hpp"

namespace troupe {

namespace {

// Columns [first, first + n) of a host f32 [rows, cols] tensor (a 1-D one: one row), and back.
Tensor host_columns(const Tensor& t, int64_t first, int64_t n) {
  const int64_t rows = t.numel() / t.dim(t.ndim() - 1), cols = t.dim(t.ndim() - 1);
  Tensor out = Tensor::host(DType::f32, t.ndim() == 1 ? Shape{n} : Shape{rows, n});
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(t.data_as<float>() + r * cols + first, n, out.data_as<float>() + r * n);
  return out;
}

void set_host_columns(const Tensor& t, int64_t first, const Tensor& part) {
  const int64_t rows = t.numel() / t.dim(t.ndim() - 1), cols = t.dim(t.ndim() - 1);
  const int64_t n = part.dim(part.ndim() - 1);
  TROUPE_CHECK(part.numel() == rows * n, "FP8 state: ", shape_str(part.shape()), " does not fit ",
               shape_str(t.shape()));
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(part.data_as<float>() + r * n, n, t.data_as<float>() + r * cols + first);
}

constexpr const char* kFp8MetaParts[] = {"amax_history", "scale", "scale_inv"};

}  // namespace

std::vector<std::pair<std::string, Tensor>> GptChunk::fp8_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  if (!fp8_) return out;
  const Fp8Linears::Meta* metas[] = {&fp8_->forward_meta(), &fp8_->backward_meta()};
  std::vector<Tensor> host;  // forward's three, backward's three
  for (const Fp8Linears::Meta* m : metas)
    for (const Tensor* t : {&m->history, &m->scale, &m->scale_inv}) {
      // scale_inv is kept as a [T, kFp8ScaleRow] table for the GEMMs; a checkpoint holds its [T].
      const int64_t count = m->scale.numel();
      if (t == &m->scale_inv) {
        host.push_back(Tensor::host(DType::f32, {count}));
        copy_columns(ctx_, *t, 0, host.back().view({count, 1}), 0, 1);
      } else {
        host.push_back(Tensor::host(DType::f32, t->shape()));
        copy(ctx_, *t, host.back());
      }
    }
  ctx_.synchronize();
  for (int i = 0; i < layout_.num_layers(); ++i) {
    const std::string prefix = "decoder.layers." + std::to_string(layout_.first_layer() + i) + ".fp8_meta.";
    for (int dir = 0; dir < 2; ++dir) {
      const int64_t per_layer = dir == 0 ? 8 : 4;  // forward: x and w of 4 linears; backward: dy
      for (int part = 0; part < 3; ++part)
        out.emplace_back(prefix + (dir == 0 ? "forward." : "backward.") + kFp8MetaParts[part],
                         host_columns(host[3 * size_t(dir) + size_t(part)], per_layer * i, per_layer));
    }
  }
  return out;
}

void GptChunk::load_fp8_buffers(const std::vector<std::pair<std::string, Tensor>>& host) {
  TROUPE_CHECK(fp8_, "load_fp8_buffers: FP8 is off (no --fp8-format)");
  std::vector<std::pair<std::string, Tensor>> mine = fp8_buffers();
  TROUPE_CHECK(host.size() == mine.size(), "load_fp8_buffers: ", host.size(), " tensors for this chunk's ",
               mine.size());
  // The chunk's meta on the host, filled layer by layer in fp8_buffers' order.
  Fp8Linears::Meta fwd, bwd;
  for (auto [meta, src] : {std::pair{&fwd, &fp8_->forward_meta()}, std::pair{&bwd, &fp8_->backward_meta()}})
    for (auto [dst, t] : {std::pair{&meta->history, &src->history}, std::pair{&meta->scale, &src->scale},
                          std::pair{&meta->scale_inv, &src->scale_inv}})
      *dst = Tensor::host(DType::f32, t == &src->scale_inv ? Shape{src->scale.numel()} : t->shape());
  for (size_t k = 0; k < mine.size(); ++k) {
    TROUPE_CHECK(host[k].first == mine[k].first && host[k].second.shape() == mine[k].second.shape(),
                 "load_fp8_buffers: '", host[k].first, "' ", shape_str(host[k].second.shape()), " where '",
                 mine[k].first, "' ", shape_str(mine[k].second.shape()), " belongs");
    const int64_t i = int64_t(k / 6), dir = int64_t(k % 6) / 3, part = int64_t(k % 3);
    Fp8Linears::Meta& m = dir == 0 ? fwd : bwd;
    const Tensor& t = part == 0 ? m.history : part == 1 ? m.scale : m.scale_inv;
    const int64_t per_layer = dir == 0 ? 8 : 4;
    set_host_columns(t, per_layer * i, host[k].second);
  }
  fp8_->load_meta(fwd, bwd);
}

}  // namespace troupe
