#include "data/gpt_dataset.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "storage/atomic_file.hpp"
#include "base/check.hpp"

namespace troupe {
namespace {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Index algorithms

int64_t gpt_num_epochs(int64_t tokens_per_epoch, std::optional<int64_t> num_samples, int64_t sequence_length) {
  if (!num_samples) return 1;
  TROUPE_CHECK(tokens_per_epoch > 0, "GPT dataset: no tokens to draw ", *num_samples, " samples from");
  const int64_t requested = *num_samples * sequence_length + kAddExtraToken;
  // The smallest E >= 1 with E * tokens_per_epoch >= requested (Megatron counts up to it).
  return std::max<int64_t>(1, (requested + tokens_per_epoch - 1) / tokens_per_epoch);
}

GptEpochPlan gpt_epoch_plan(int64_t tokens_per_epoch, std::optional<int64_t> num_samples, int64_t sequence_length) {
  GptEpochPlan plan;
  plan.num_epochs = gpt_num_epochs(tokens_per_epoch, num_samples, sequence_length);
  if (plan.num_epochs == 1) return plan;
  const int64_t L = sequence_length;
  plan.num_samples_sans_final_epoch = ((plan.num_epochs - 1) * tokens_per_epoch - kAddExtraToken) / L;
  const int64_t from_final_epoch = *num_samples - plan.num_samples_sans_final_epoch;
  const int64_t per_epoch = (tokens_per_epoch - kAddExtraToken) / L;
  TROUPE_CHECK(from_final_epoch >= 0, "GPT dataset: negative samples from the final epoch");
  TROUPE_CHECK(from_final_epoch <= per_epoch + 1, "GPT dataset: ", from_final_epoch,
               " samples from the final epoch exceed one epoch's ", per_epoch + 1);
  // Python: num_samples_from_final_epoch < int(0.80 * num_samples_per_epoch)
  plan.separate_final_epoch = from_final_epoch < int64_t(0.80 * double(per_epoch));
  return plan;
}

std::vector<int32_t> build_document_index(std::span<const int32_t> documents, int64_t num_epochs, NumpyRandomState& rng,
                                          bool separate_final_epoch) {
  if (!separate_final_epoch || num_epochs == 1) {
    std::vector<int32_t> index;
    index.reserve(size_t(num_epochs) * documents.size());
    for (int64_t e = 0; e < num_epochs; ++e) index.insert(index.end(), documents.begin(), documents.end());
    rng.shuffle(index);
    return index;
  }
  std::vector<int32_t> first = build_document_index(documents, num_epochs - 1, rng, false);
  const std::vector<int32_t> last = build_document_index(documents, 1, rng, false);
  first.insert(first.end(), last.begin(), last.end());
  return first;
}

std::vector<int64_t> build_sample_index(std::span<const int32_t> sizes, std::span<const int32_t> document_index,
                                        int64_t sequence_length, int64_t num_epochs, int64_t tokens_per_epoch,
                                        bool drop_last_partial_sequence, int64_t add_extra_token) {
  TROUPE_CHECK(sequence_length > 1 && num_epochs > 0 && tokens_per_epoch > 1, "build_sample_index: sequence length ",
               sequence_length, ", ", num_epochs, " epochs, ", tokens_per_epoch, " tokens per epoch");
  TROUPE_CHECK(!document_index.empty(), "build_sample_index: empty document index");
  const int64_t total = num_epochs * tokens_per_epoch - add_extra_token;
  // helpers.cpp computes the partial-sequence count in single precision; so do we.
  const int64_t num_samples =
      drop_last_partial_sequence ? total / sequence_length : int64_t(std::ceil(float(total) / float(sequence_length)));
  std::vector<int64_t> index(size_t(2 * (num_samples + 1)));
  int64_t row = 0;
  int64_t doc_pos = 0;     // position in document_index
  int64_t doc_offset = 0;  // token offset in that document
  index[0] = doc_pos;
  index[1] = doc_offset;
  ++row;
  const int64_t last_pos = int64_t(document_index.size()) - 1;
  while (row <= num_samples) {
    int64_t remaining = sequence_length + add_extra_token;
    while (remaining != 0) {
      const int64_t doc_length = sizes[size_t(document_index[size_t(doc_pos)])] - doc_offset;
      remaining -= doc_length;
      if (remaining <= 0) {
        // The sample ends inside this document; the next one starts on its last token.
        doc_offset += remaining + doc_length - add_extra_token;
        remaining = 0;
      } else {
        if (doc_pos == last_pos) {
          TROUPE_CHECK(row == num_samples, "build_sample_index: ran out of documents at sample ", row, " of ",
                       num_samples);
          doc_offset = sizes[size_t(document_index[size_t(doc_pos)])] - add_extra_token;
          break;
        }
        ++doc_pos;
        doc_offset = 0;
      }
    }
    index[size_t(2 * row)] = doc_pos;
    index[size_t(2 * row + 1)] = doc_offset;
    ++row;
  }
  return index;
}

std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size, NumpyRandomState& rng) {
  TROUPE_CHECK(0 <= num_samples && num_samples <= total_size, "build_shuffle_index: ", num_samples, " of ", total_size);
  std::vector<int64_t> index(static_cast<size_t>(total_size));
  for (int64_t i = 0; i < total_size; ++i) index[size_t(i)] = i;
  rng.shuffle(std::span<int64_t>(index.data(), size_t(num_samples)));
  if (num_samples < total_size)
    rng.shuffle(std::span<int64_t>(index.data() + num_samples, size_t(total_size - num_samples)));
  return index;
}

// FNV-1a over the lengths of sequences [begin, end), as 16 hex digits.
std::string sequence_lengths_fingerprint(const std::vector<int32_t>& sizes, int64_t begin, int64_t end) {
  uint64_t h = 1469598103934665603ULL;
  for (int64_t i = begin; i < end; ++i) {
    const auto v = static_cast<uint32_t>(sizes[size_t(i)]);
    for (int b = 0; b < 4; ++b) {
      h ^= (v >> (8 * b)) & 0xffU;
      h *= 1099511628211ULL;
    }
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string description_hash(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// ---------------------------------------------------------------------------------------------
// GptDataset

GptDataset::GptDataset(std::shared_ptr<const IndexedDataset> dataset, Split split, int64_t begin, int64_t end,
                       std::optional<int64_t> num_samples, GptDatasetConfig config)
    : dataset_(std::move(dataset)),
      split_(split),
      begin_(begin),
      end_(end),
      num_samples_(num_samples),
      config_(std::move(config)) {
  TROUPE_CHECK(dataset_ != nullptr, "GptDataset: no indexed dataset");
  const std::string& prefix = dataset_->path_prefix();
  TROUPE_CHECK(config_.sequence_length > 1, "GPT dataset '", prefix, "': sequence length ", config_.sequence_length,
               " must be > 1");
  TROUPE_CHECK(0 <= begin_ && begin_ <= end_ && end_ <= dataset_->num_sequences(), "GPT dataset '", prefix,
               "': sequence range [", begin_, ", ", end_, ") outside [0, ", dataset_->num_sequences(), "]");
  TROUPE_CHECK(end_ <= int64_t(std::numeric_limits<int32_t>::max()), "GPT dataset '", prefix,
               "': more sequences than the int32 document index holds");
  TROUPE_CHECK(!num_samples_ || *num_samples_ >= 0, "GPT dataset '", prefix, "': negative sample count");

  const std::vector<int32_t> sizes = dataset_->sequence_lengths();
  int64_t tokens_per_epoch = 0;
  for (int64_t i = begin_; i < end_; ++i) tokens_per_epoch += sizes[size_t(i)];

  nlohmann::ordered_json d;
  d["class"] = "GPTDataset";
  d["dataset_path"] = prefix;
  d["num_samples"] = num_samples_ ? nlohmann::ordered_json(*num_samples_) : nlohmann::ordered_json(nullptr);
  d["index_split"] = split_name(split_);
  d["random_seed"] = config_.random_seed;
  d["sequence_length"] = config_.sequence_length;
  d["split"] = config_.split;
  d["sequence_range"] = {begin_, end_};
  d["drop_last_partial_sequence"] = split_ != Split::valid || config_.drop_last_partial_validation_sequence;
  // Not in Megatron's description: a re-preprocessed dataset of another size gets new indices.
  d["dataset_sequences"] = dataset_->num_sequences();
  d["tokens_per_epoch"] = tokens_per_epoch;
  // Re-preprocessed into the same prefix with the same totals but other document lengths
  // (another tokenizer, edited text): the cached indices would point into the wrong places.
  d["sequence_lengths_fnv1a"] = sequence_lengths_fingerprint(sizes, begin_, end_);
  d["index_format"] = "troupe-gpt-indices-1";
  description_ = d.dump(4);

  if (tokens_per_epoch <= 1) {
    // Megatron cannot build such a split (it loops forever or asserts); an empty split that is
    // asked for nothing is simply empty here.
    TROUPE_CHECK(!num_samples_ || *num_samples_ == 0, "GPT dataset '", prefix, "': the ", split_name(split_),
                 " split (sequences [", begin_, ", ", end_, ")) has ", tokens_per_epoch, " tokens, too few for ",
                 *num_samples_, " samples");
    return;
  }

  const GptEpochPlan plan = gpt_epoch_plan(tokens_per_epoch, num_samples_, config_.sequence_length);
  if (config_.use_cache) {
    const std::string dir = config_.cache_dir.empty() ? prefix + "/cache/GPTDataset_indices" : config_.cache_dir;
    cache_prefix_ = str_cat(dir, "/", description_hash(description_), "-GPTDataset-", split_name(split_));
    if (load_cache(plan.num_epochs * (end_ - begin_))) {
      loaded_from_cache_ = true;
      return;
    }
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    TROUPE_CHECK(!ec, "GPT dataset '", prefix, "': cannot create the index cache directory '", dir, "': ", ec.message(),
                 " (choose another with --data-cache-path)");
  }
  build_indices(sizes, tokens_per_epoch);
}

bool GptDataset::load_cache(int64_t expected_document_index_size) {
  namespace fs = std::filesystem;
  const std::string desc_path = cache_prefix_ + "-description.txt";
  for (const char* part : {"-description.txt", "-document_index.npy", "-sample_index.npy", "-shuffle_index.npy"})
    if (!fs::is_regular_file(cache_prefix_ + part)) return false;
  if (read_text_file(desc_path) != description_) return false;  // a hash collision, or stale
  try {
    NpyArray doc = NpyArray::open(cache_prefix_ + "-document_index.npy");
    NpyArray smp = NpyArray::open(cache_prefix_ + "-sample_index.npy");
    NpyArray shf = NpyArray::open(cache_prefix_ + "-shuffle_index.npy");
    if (doc.shape().size() != 1 || doc.shape()[0] != expected_document_index_size) return false;
    if (smp.shape().size() != 2 || smp.shape()[1] != 2 || smp.shape()[0] < 1) return false;
    if (shf.shape().size() != 1 || shf.shape()[0] != smp.shape()[0] - 1) return false;
    document_index_ = IndexArray(std::move(doc));
    sample_index_ = IndexArray(std::move(smp));
    shuffle_index_ = IndexArray(std::move(shf));
    return true;
  } catch (const Error&) {
    return false;  // unreadable: rebuild over it
  }
}

void GptDataset::build_indices(const std::vector<int32_t>& sizes, int64_t tokens_per_epoch) {
  const int64_t L = config_.sequence_length;
  const GptEpochPlan plan = gpt_epoch_plan(tokens_per_epoch, num_samples_, L);
  NumpyRandomState rng(config_.random_seed);

  std::vector<int32_t> documents;
  documents.reserve(size_t(end_ - begin_));
  for (int64_t i = begin_; i < end_; ++i) documents.push_back(int32_t(i));
  const std::vector<int32_t> doc_index =
      build_document_index(documents, plan.num_epochs, rng, plan.separate_final_epoch);

  const bool drop_last = split_ != Split::valid || config_.drop_last_partial_validation_sequence;
  std::vector<int64_t> sample_index =
      build_sample_index(sizes, doc_index, L, plan.num_epochs, tokens_per_epoch, drop_last);
  const int64_t num_samples = int64_t(sample_index.size()) / 2 - 1;
  std::vector<int64_t> shuffle_index = plan.separate_final_epoch
                                           ? build_shuffle_index(plan.num_samples_sans_final_epoch, num_samples, rng)
                                           : build_shuffle_index(num_samples, num_samples, rng);

  if (!config_.use_cache) {
    document_index_ = IndexArray(std::vector<int64_t>(doc_index.begin(), doc_index.end()));
    sample_index_ = IndexArray(std::move(sample_index));
    shuffle_index_ = IndexArray(std::move(shuffle_index));
    return;
  }

  // On disk in Megatron's dtypes: int32 document index; int32 sample index unless a value may
  // exceed it; uint32 shuffle index unless the sample count nears 2^32.
  write_npy(cache_prefix_ + "-document_index.npy", NpyDtype::i32, {int64_t(doc_index.size())}, doc_index.data());
  int64_t max_size = 0;
  for (int32_t s : sizes) max_size = std::max<int64_t>(max_size, s);
  const std::vector<int64_t> sample_shape = {num_samples + 1, 2};
  if (std::max<int64_t>(int64_t(doc_index.size()), max_size) <= std::numeric_limits<int32_t>::max()) {
    const std::vector<int32_t> narrow(sample_index.begin(), sample_index.end());
    write_npy(cache_prefix_ + "-sample_index.npy", NpyDtype::i32, sample_shape, narrow.data());
  } else {
    write_npy(cache_prefix_ + "-sample_index.npy", NpyDtype::i64, sample_shape, sample_index.data());
  }
  if (num_samples < int64_t(std::numeric_limits<uint32_t>::max()) - 1) {
    const std::vector<uint32_t> narrow(shuffle_index.begin(), shuffle_index.end());
    write_npy(cache_prefix_ + "-shuffle_index.npy", NpyDtype::u32, {num_samples}, narrow.data());
  } else {
    write_npy(cache_prefix_ + "-shuffle_index.npy", NpyDtype::i64, {num_samples}, shuffle_index.data());
  }
  // Last: its presence says the three index files are complete.
  write_file_atomic(cache_prefix_ + "-description.txt", description_.data(), description_.size());

  document_index_ = IndexArray(NpyArray::open(cache_prefix_ + "-document_index.npy"));
  sample_index_ = IndexArray(NpyArray::open(cache_prefix_ + "-sample_index.npy"));
  shuffle_index_ = IndexArray(NpyArray::open(cache_prefix_ + "-shuffle_index.npy"));
}

std::string GptDataset::index_origin() const {
  if (!loaded_from_cache_) return "";
  return str_cat("; the indices were read from the cache ", cache_prefix_,
                 "-*.npy: delete those files to rebuild them, or pass another --data-cache-path");
}

void GptDataset::sample(int64_t index, int32_t* out) const {
  const std::string& prefix = dataset_->path_prefix();
  TROUPE_CHECK(index >= 0 && index < size(), "GPT dataset '", prefix, "' (", split_name(split_), "): sample ", index,
               " out of range [0, ", size(), ")");
  const int64_t want = config_.sequence_length + kAddExtraToken;
  const int64_t j = shuffle_index_[index];
  TROUPE_CHECK(j >= 0 && j + 1 < sample_index_.size() / 2, "GPT dataset '", prefix, "': corrupt shuffle index",
               index_origin());
  const int64_t first = sample_index_[2 * j], first_offset = sample_index_[2 * j + 1];
  const int64_t last = sample_index_[2 * j + 2], last_offset = sample_index_[2 * j + 3];
  TROUPE_CHECK(0 <= first && first <= last && last < document_index_.size(), "GPT dataset '", prefix,
               "': corrupt sample index at row ", j, index_origin());
  int64_t n = 0;
  for (int64_t pos = first; pos <= last; ++pos) {
    const int64_t doc = document_index_[pos];
    TROUPE_CHECK(doc >= begin_ && doc < end_, "GPT dataset '", prefix, "': corrupt document index at ", pos,
                 index_origin());
    const int64_t offset = pos == first ? first_offset : 0;
    const int64_t length =
        pos == last ? last_offset + kAddExtraToken - offset : dataset_->sequence_length(doc) - offset;
    TROUPE_CHECK(length >= 0 && n + length <= want, "GPT dataset '", prefix, "': sample ", index, " spans more than ",
                 want, " tokens (corrupt index", index_origin(), ")");
    dataset_->read(doc, offset, length, out + n);
    n += length;
  }
  for (; n < want; ++n) out[n] = kPadTokenId;
}

}  // namespace troupe
