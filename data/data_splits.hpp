// Megatron's train/valid/test splits and blend arguments, with its arithmetic reproduced
// exactly (megatron/core/datasets/blended_megatron_dataset_config.py, utils.py,
// blended_megatron_dataset_builder.py), so the same flags select the same documents and ask for
// the same numbers of samples:
//
//   --split "969,30,1"  -> weights normalized to sum 1 -> bookends (0, .969), (.969, .999),
//                          (.999, 1) -> split k covers sequences [round(beg*N), round(end*N))
//                          (round half to even, as Python's round); an empty bookend disables k.
//   --data-path 0.3 A 0.7 B   -> prefixes A, B with weights 0.3, 0.7 (normalized)
//   --data-path A B           -> no weights (each dataset weighs its one-epoch sample count)
//
//   SplitMatrix m = split_matrix(parse_split("969,30,1"));
//   auto train = split_range(m, Split::train, 1000);    // [0, 969)
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe {

enum class Split { train = 0, valid = 1, test = 2 };
inline constexpr std::array<Split, 3> kSplits = {Split::train, Split::valid, Split::test};
const char* split_name(Split s);  // "train", "valid", "test"

// numpy.sum of a float64 array (pairwise summation, 8 accumulators), bit for bit.
double numpy_sum(std::span<const double> values);
// Megatron's utils.normalize: w / numpy.sum(w).
std::vector<double> normalize_weights(std::span<const double> weights);

// parse_and_normalize_split: the numbers in `split` (runs of [.0-9]), padded with zeros to 3,
// normalized. Throws on more than 3 numbers, a malformed number or an all-zero split.
std::array<double, 3> parse_split(std::string_view split);

using SplitMatrix = std::array<std::optional<std::pair<double, double>>, 3>;
// convert_split_vector_to_split_matrix (one vector): cumulative bookends, nullopt when empty.
SplitMatrix split_matrix(const std::array<double, 3>& split);
// The sequence range [begin, end) of split `s` over `num_elements` sequences, nullopt when the
// split is disabled.
std::optional<std::pair<int64_t, int64_t>> split_range(const SplitMatrix& m, Split s, int64_t num_elements);

// A --data-path: dataset prefixes, with weights (one per prefix) or none.
struct Blend {
  std::vector<std::string> prefixes;
  std::optional<std::vector<double>> weights;  // as given, not normalized
};
// get_blend_from_list: an even-length list whose every other entry, from the first, parses as
// a number is weight/prefix pairs; otherwise every entry is a prefix.
Blend parse_blend(const std::vector<std::string>& data_path);

// _get_size_per_split_per_dataset: sample counts per dataset (rows) per split (columns),
// ceil(ceil(size * weight) * (1 + surplus)); a missing split size gives 0.
std::vector<std::array<int64_t, 3>> samples_per_dataset(std::span<const double> normalized_weights,
                                                        const std::array<std::optional<int64_t>, 3>& sizes,
                                                        double surplus = 0.0);

}  // namespace troupe
