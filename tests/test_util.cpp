#include "tests/test_util.hpp"

#include "actors/fabric/fabric.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include <unistd.h>

namespace troupe::test {

Tensor random_normal(Shape shape, uint64_t seed, float stddev) {
  Tensor t = Tensor::host(DType::f32, std::move(shape));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = d(rng);
  return t;
}

Tensor random_uniform(Shape shape, uint64_t seed, float lo, float hi) {
  Tensor t = Tensor::host(DType::f32, std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = d(rng);
  return t;
}

Tensor random_tokens(Shape shape, uint64_t seed, int32_t n) {
  Tensor t = Tensor::host(DType::i32, std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, n - 1);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<int32_t>()[i] = d(rng);
  return t;
}

double rel_error(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = double(a.data_as<float>()[i]) - b.data_as<float>()[i];
    num += d * d;
    den += double(b.data_as<float>()[i]) * b.data_as<float>()[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::fabs(double(a.data_as<float>()[i]) - b.data_as<float>()[i]));
  return m;
}

int64_t byte_mismatches(const Tensor& a, const Tensor& b) {
  TROUPE_CHECK(a.numel() == b.numel(), "byte_mismatches: ", a.str(), " and ", b.str());
  const Tensor ha = Tensor::host(DType::u8, a.shape()), hb = Tensor::host(DType::u8, b.shape());
  for (auto [src, dst] : {std::pair{&a, &ha}, std::pair{&b, &hb}}) {
    const Context& ctx = src->is_cuda() ? gpu() : cpu();
    copy(ctx, *src, *dst);
    ctx.synchronize();
  }
  int64_t bad = 0;
  for (int64_t i = 0; i < a.numel(); ++i) bad += ha.data_as<uint8_t>()[i] != hb.data_as<uint8_t>()[i];
  return bad;
}

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += double(a.data_as<float>()[i]) * b.data_as<float>()[i];
  return s;
}

void expect_grad_close(const std::string& name, const std::function<double()>& loss, const Tensor& x,
                       const Tensor& analytic, int samples, float eps, double rtol, double atol) {
  ASSERT_EQ(x.numel(), analytic.numel()) << name;
  std::mt19937_64 rng(12345);
  std::vector<int64_t> idx;
  for (int i = 0; i < samples; ++i) idx.push_back(int64_t(rng() % uint64_t(x.numel())));
  int64_t largest = 0;
  for (int64_t i = 0; i < x.numel(); ++i)
    if (std::fabs(analytic.data_as<float>()[i]) > std::fabs(analytic.data_as<float>()[largest])) largest = i;
  idx.push_back(largest);
  float* p = x.data_as<float>();
  for (int64_t i : idx) {
    const float orig = p[i];
    p[i] = orig + eps;
    const double up = loss();
    p[i] = orig - eps;
    const double down = loss();
    p[i] = orig;
    const double numeric = (up - down) / (2.0 * double(eps));
    const double a = analytic.data_as<float>()[i];
    EXPECT_LE(std::fabs(numeric - a), atol + rtol * std::max(std::fabs(numeric), std::fabs(a)))
        << name << "[" << i << "]: numeric " << numeric << " analytic " << a;
  }
}

TempDir::TempDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  path_ = std::filesystem::temp_directory_path() / str_cat("troupe_", tag, "_", ::getpid(), "_", counter++);
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::vector<std::string> TempDir::files() const {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(path_)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

const Context& gpu() {
  static Context ctx = Context::cuda(0);
  return ctx;
}

const Context& cpu() {
  static Context ctx = Context::cpu();
  return ctx;
}

std::string source_path(const std::string& relative) {
  const char* env = std::getenv("TROUPE_SOURCE_DIR");  // a build run from another checkout (the GPU machine)
  return std::string(env && *env ? env : TROUPE_SOURCE_DIR) + "/" + relative;
}

void run_threads(const std::vector<int>& ids, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(ids.size());
  std::vector<std::thread> threads;
  for (size_t k = 0; k < ids.size(); ++k)
    threads.emplace_back([&, k] {
      try {
        fn(ids[k]);
      } catch (...) {
        errors[k] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

namespace {
std::shared_ptr<actors::Fabric> g_fabric;
}

void FabricEnvironment::SetUp() { g_fabric = actors::Fabric::init(); }
void FabricEnvironment::TearDown() { g_fabric.reset(); }
actors::Fabric* test_fabric() { return g_fabric.get(); }

std::string run_node(const std::string& script, const std::vector<std::string>& args) {
  auto quoted = [](const std::string& a) {
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  std::string command = quoted(TROUPE_NODE) + " " + quoted(source_path("tests/node/" + script));
  for (const auto& a : args) command += " " + quoted(a);
  FILE* pipe = popen(command.c_str(), "r");
  TROUPE_CHECK(pipe != nullptr, "cannot run ", command, ": ", std::strerror(errno));
  std::string out;
  char buffer[1 << 16];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  const int status = pclose(pipe);
  TROUPE_CHECK(status == 0, command, " failed (status ", status, ")");
  return out;
}

std::string troupe_binary() {
  const char* env = std::getenv("TROUPE_BINARY");
  return env && *env ? env : TROUPE_BINARY;
}

}  // namespace troupe::test
