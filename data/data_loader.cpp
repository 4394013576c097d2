#include "data/data_loader.hpp"

#include "base/check.hpp"

namespace troupe {

void make_training_sample(const int32_t* text, int64_t L, const DataLoaderOptions& options, int32_t* tokens,
                          int32_t* labels, float* loss_mask, int32_t* position_ids) {
  int32_t position = 0;
  for (int64_t t = 0; t < L; ++t) {
    const int32_t in = text[t], out = text[t + 1];
    loss_mask[t] = 1.0f;
    if (options.eod_mask_loss && in == options.eod) loss_mask[t] = 0.0f;
    if (out == kPadTokenId) loss_mask[t] = 0.0f;
    tokens[t] = in == kPadTokenId ? 0 : in;
    labels[t] = out == kPadTokenId ? 0 : out;
    position_ids[t] = position++;
    if (options.reset_position_ids && in == options.eod) position = 0;
  }
}

DataLoader::DataLoader(std::shared_ptr<const SampleSource> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options), consumed_(options.consumed_samples) {
  TROUPE_CHECK(dataset_ != nullptr, "DataLoader: no dataset");
  TROUPE_CHECK(options_.micro_batch_size > 0, "DataLoader: micro batch size ", options_.micro_batch_size);
  TROUPE_CHECK(options_.data_parallel_size > 0 && options_.data_parallel_rank >= 0 &&
                   options_.data_parallel_rank < options_.data_parallel_size,
               "DataLoader: data-parallel rank ", options_.data_parallel_rank, " of ", options_.data_parallel_size);
  TROUPE_CHECK(options_.consumed_samples >= 0, "DataLoader: negative consumed samples");
  TROUPE_CHECK(!(options_.eod_mask_loss || options_.reset_position_ids) || options_.eod >= 0,
               "DataLoader: --eod-mask-loss and --reset-position-ids need the tokenizer's EOD id");
  text_.resize(size_t(dataset_->sequence_length() + 1));
}

std::optional<MicroBatch> DataLoader::next() {
  const int64_t B = options_.micro_batch_size;
  const int64_t step = B * options_.data_parallel_size;
  if (consumed_ + step > dataset_->size()) return std::nullopt;
  const int64_t L = dataset_->sequence_length();
  MicroBatch mb;
  mb.tokens = Tensor::host(DType::i32, {B, L});
  mb.labels = Tensor::host(DType::i32, {B, L});
  mb.loss_mask = Tensor::host(DType::f32, {B, L});
  mb.position_ids = Tensor::host(DType::i32, {B, L});
  const int64_t first = consumed_ + options_.data_parallel_rank * B;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t index = first + b;
    dataset_->sample(index, text_.data());
    make_training_sample(text_.data(), L, options_, mb.tokens.data_as<int32_t>() + b * L,
                         mb.labels.data_as<int32_t>() + b * L, mb.loss_mask.data_as<float>() + b * L,
                         mb.position_ids.data_as<int32_t>() + b * L);
    mb.sample_indices.push_back(index);
  }
  consumed_ += step;
  return mb;
}

}  // namespace troupe
