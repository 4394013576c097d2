// The threads an HttpServer runs its handlers on: handlers block (a request waits for its
// tokens, a stream for each next one), so they stay off the connections' event loop.
//
//   HttpWorkerPool workers(8);
//   workers.post([] { ... });
//   workers.join();  // the jobs posted run, then the threads end
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace troupe::actors {

class HttpWorkerPool {
 public:
  explicit HttpWorkerPool(int threads);
  ~HttpWorkerPool();  // join()
  HttpWorkerPool(const HttpWorkerPool&) = delete;
  HttpWorkerPool& operator=(const HttpWorkerPool&) = delete;

  void post(std::function<void()> job);
  // Runs the jobs posted so far, then ends the threads; later posts are dropped.
  void join();

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool ending_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace troupe::actors
