#include "actors/http/http_worker_pool.hpp"

#include <algorithm>

namespace troupe::actors {

HttpWorkerPool::HttpWorkerPool(int threads) {
  for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { run(); });
}

HttpWorkerPool::~HttpWorkerPool() { join(); }

void HttpWorkerPool::post(std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    if (ending_) return;
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void HttpWorkerPool::join() {
  {
    std::lock_guard lock(mu_);
    ending_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
}

void HttpWorkerPool::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return ending_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // ending, and nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace troupe::actors
