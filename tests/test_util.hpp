// Helpers shared by all tests: random tensors, error norms, finite-difference gradient
// checks, and the CUDA context for GPU tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "base/check.hpp"
#include "kernels/tensor.hpp"

namespace troupe::actors {
class Fabric;
}

namespace troupe::test {

// Sets an environment variable (for this process and the troupe processes a test starts) until it goes.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) { ::setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// Host f32 tensor of N(0, stddev^2) values from a fixed seed.
Tensor random_normal(Shape shape, uint64_t seed, float stddev = 1.0f);
// Host f32 tensor of U[lo, hi) values.
Tensor random_uniform(Shape shape, uint64_t seed, float lo, float hi);
// Host i32 tensor of values in [0, n).
Tensor random_tokens(Shape shape, uint64_t seed, int32_t n);

// ||a - b|| / max(||b||, tiny), both host f32 with the same numel.
double rel_error(const Tensor& a, const Tensor& b);
double max_abs_diff(const Tensor& a, const Tensor& b);
// How many bytes of u8 tensors a and b (each on the host or the GPU) differ.
int64_t byte_mismatches(const Tensor& a, const Tensor& b);
// sum(a * b) in f64 (a random projection turns a tensor output into a scalar loss).
double dot(const Tensor& a, const Tensor& b);

// Central-difference check of d(loss)/d(x) at `samples` random positions of host f32 `x`
// (plus the position of the largest |analytic|). loss() must recompute from x's current
// contents. Fails the test (with the tensor name, index, both values) when
// |numeric - analytic| > atol + rtol * max(|numeric|, |analytic|).
void expect_grad_close(const std::string& name, const std::function<double()>& loss, const Tensor& x,
                       const Tensor& analytic, int samples = 24, float eps = 1e-2f, double rtol = 2e-2,
                       double atol = 2e-3);

// A fresh, empty directory under the system temp dir (troupe_<tag>_<pid>_<n>), removed with
// everything in it when the object goes.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  // Names of the files in the directory (not recursive), sorted.
  std::vector<std::string> files() const;

 private:
  std::filesystem::path path_;
};

// The CUDA context GPU tests run on (created on first use).
const Context& gpu();
const Context& cpu();

// Path of a file in the source tree (tests read bundled data; $TROUPE_SOURCE_DIR overrides).
std::string source_path(const std::string& relative);
// Path of the built `troupe` command, for tests that run it as a child process
// ($TROUPE_BINARY overrides).
std::string troupe_binary();

// Runs `node tests/node/<script> args...` (the Hugging Face and OpenAI reference
// implementations, installed by scripts/setup.sh) and returns its standard output; throws
// troupe::Error with the exit status when it fails (its stderr goes to the test's).
std::string run_node(const std::string& script, const std::vector<std::string>& args);

// fn(id) on a thread of its own for every id (the members of a collective group, say);
// rethrows the first exception once every thread has joined.
void run_threads(const std::vector<int>& ids, const std::function<void(int)>& fn);
inline void run_threads(int n, const std::function<void(int)>& fn) {
  std::vector<int> ids;
  for (int i = 0; i < n; ++i) ids.push_back(i);
  run_threads(ids, fn);
}
// The members of a group whose endpoint lives in this process (non-null).
template <typename Group>
std::vector<int> local_members(const Group& group) {
  std::vector<int> ids;
  for (size_t i = 0; i < group.size(); ++i)
    if (group[i]) ids.push_back(int(i));
  return ids;
}

// Keeps the process's fabric (actors/fabric/fabric.hpp) alive for the whole test binary: under mpirun
// MPI starts once per process and cannot start again, so tests that make several runs (or
// groups) one after another register it:
//   [[maybe_unused]] auto* const env = ::testing::AddGlobalTestEnvironment(new FabricEnvironment);
class FabricEnvironment : public ::testing::Environment {
 public:
  void SetUp() override;
  void TearDown() override;
};
// The fabric FabricEnvironment holds (null before SetUp).
actors::Fabric* test_fabric();

}  // namespace troupe::test
