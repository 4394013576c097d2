#include "data/data_splits.hpp"

#include <cmath>
#include <cstdlib>

#include "base/check.hpp"

namespace troupe {
namespace {

// numpy's DOUBLE_pairwise_sum (numpy/_core/src/umath/loops_utils.h.src).
double pairwise_sum(const double* a, size_t n) {
  if (n < 8) {
    double res = -0.0;
    for (size_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int k = 0; k < 8; ++k) r[k] = a[k];
    size_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (int k = 0; k < 8; ++k) r[k] += a[i + size_t(k)];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  size_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

// Python's float(): the whole string must be a number.
std::optional<double> parse_float(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

const char* split_name(Split s) {
  switch (s) {
    case Split::train:
      return "train";
    case Split::valid:
      return "valid";
    case Split::test:
      return "test";
  }
  return "?";
}

double numpy_sum(std::span<const double> values) {
  // The reduction starts from the identity 0 and adds the pairwise sum of all elements.
  return 0.0 + pairwise_sum(values.data(), values.size());
}

std::vector<double> normalize_weights(std::span<const double> weights) {
  const double sum = numpy_sum(weights);
  std::vector<double> out;
  out.reserve(weights.size());
  for (double w : weights) out.push_back(w / sum);
  return out;
}

std::array<double, 3> parse_split(std::string_view split) {
  std::vector<double> values;
  size_t i = 0;
  while (i < split.size()) {
    const auto is_num = [](char c) { return c == '.' || (c >= '0' && c <= '9'); };
    if (!is_num(split[i])) {
      // Megatron reads the runs of [.0-9] and skips the rest; a letter there is a mistake
      // (a missing value, a wrong flag) that would silently change the weights.
      TROUPE_CHECK(split[i] == ',' || split[i] == '/' || split[i] == ' ', "--split \"", split, "\": '", split[i],
                   "' is not part of a weight list; expected up to 3 numbers such as 969,30,1");
      ++i;
      continue;
    }
    size_t j = i;
    while (j < split.size() && is_num(split[j])) ++j;
    const std::string run(split.substr(i, j - i));
    const auto v = parse_float(run);
    TROUPE_CHECK(v.has_value(), "--split \"", split, "\": '", run, "' is not a number");
    values.push_back(*v);
    i = j;
  }
  TROUPE_CHECK(values.size() <= 3, "--split \"", split, "\" has ", values.size(),
               " numbers; it takes at most 3 (train, valid, test)");
  values.resize(3, 0.0);
  TROUPE_CHECK(numpy_sum(values) > 0, "--split \"", split, "\" gives every split a zero weight");
  const std::vector<double> w = normalize_weights(values);
  return {w[0], w[1], w[2]};
}

SplitMatrix split_matrix(const std::array<double, 3>& split) {
  SplitMatrix m;
  double begin = 0;  // Python's int 0, then float sums: 0 + w0 == w0 exactly
  for (size_t k = 0; k < 3; ++k) {
    const double end = begin + split[k];
    if (end <= begin)
      m[k] = std::nullopt;
    else
      m[k] = std::make_pair(begin, end);
    begin = end;
  }
  return m;
}

std::optional<std::pair<int64_t, int64_t>> split_range(const SplitMatrix& m, Split s, int64_t num_elements) {
  const auto& b = m[size_t(s)];
  if (!b) return std::nullopt;
  // int(round(x * float(n))): Python rounds halves to even, as nearbyint in the default mode.
  const auto at = [&](double f) { return int64_t(std::nearbyint(f * double(num_elements))); };
  return std::make_pair(at(b->first), at(b->second));
}

Blend parse_blend(const std::vector<std::string>& data_path) {
  TROUPE_CHECK(!data_path.empty(), "--data-path is empty");
  Blend blend;
  if (data_path.size() % 2 == 0) {
    std::vector<double> weights;
    std::vector<std::string> prefixes;
    size_t numeric = 0;
    for (size_t i = 0; i < data_path.size(); i += 2) {
      if (const auto w = parse_float(data_path[i])) {
        weights.push_back(*w);
        ++numeric;
      }
      prefixes.push_back(data_path[i + 1]);
    }
    if (numeric == weights.size() && numeric == data_path.size() / 2) {
      for (double w : weights) TROUPE_CHECK(w > 0, "--data-path: weight ", w, " must be positive");
      blend.prefixes = std::move(prefixes);
      blend.weights = std::move(weights);
    } else {
      TROUPE_CHECK(numeric == 0,
                   "--data-path mixes weights and prefixes: give 'W1 PREFIX1 W2 PREFIX2 ...' or "
                   "'PREFIX1 PREFIX2 ...'");
      blend.prefixes = data_path;
    }
  } else {
    blend.prefixes = data_path;
  }
  for (auto& p : blend.prefixes) {
    // Megatron strips whitespace around each prefix.
    const size_t b = p.find_first_not_of(" \t\r\n"), e = p.find_last_not_of(" \t\r\n");
    p = b == std::string::npos ? std::string() : p.substr(b, e - b + 1);
    TROUPE_CHECK(!p.empty(), "--data-path has an empty prefix");
  }
  return blend;
}

std::vector<std::array<int64_t, 3>> samples_per_dataset(std::span<const double> normalized_weights,
                                                        const std::array<std::optional<int64_t>, 3>& sizes,
                                                        double surplus) {
  std::vector<std::array<int64_t, 3>> out;
  for (double w : normalized_weights) {
    std::array<int64_t, 3> row{};
    for (size_t k = 0; k < 3; ++k) {
      const double target = double(sizes[k].value_or(0));
      row[k] = int64_t(std::ceil(std::ceil(target * w) * (1 + surplus)));
    }
    out.push_back(row);
  }
  return out;
}

}  // namespace troupe
