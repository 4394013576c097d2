// What the data loader draws from: a finite, indexable set of training samples, each
// sequence_length() + 1 tokens long (inputs are tokens [0, L), labels tokens [1, L + 1)).
// GptDataset (one indexed dataset, one split) and BlendedDataset (a weighted mix) are the two.
#pragma once

#include <cstdint>

namespace troupe {

// Token id that fills a short sample (Megatron's _PAD_TOKEN_ID when the tokenizer has no pad);
// the loader turns it into token 0 with a zero loss mask.
inline constexpr int32_t kPadTokenId = -1;

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t size() const = 0;
  virtual int64_t sequence_length() const = 0;
  // Writes the sequence_length() + 1 tokens of sample `index` (0 <= index < size()) into `out`.
  virtual void sample(int64_t index, int32_t* out) const = 0;
};

}  // namespace troupe
