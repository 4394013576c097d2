#include "actors/fabric/mpi_requests.hpp"

#include <algorithm>
#include <climits>
#include <thread>

#include "actors/fabric/mpi_check.hpp"
#include "actors/fabric/mpi_links.hpp"

namespace troupe::actors {

namespace {
constexpr int64_t kMaxMessage = int64_t(1) << 30;  // MPI counts are ints
}  // namespace

void fail_mpi(int code, const char* expr, const char* file, int line, const std::string& hint) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  fail("mpi", expr, file, line, str_cat(hint, hint.empty() ? "" : ": ", std::string(text, size_t(length))));
}

MpiRequests::~MpiRequests() { abandon(); }

void MpiRequests::send(int comm_id, const void* data, int64_t bytes, int dest, int tag, int label) {
  const MPI_Comm comm = links_.comm(comm_id);
  const auto* p = static_cast<const char*>(data);
  for (int64_t done = 0; done < bytes || (bytes == 0 && done == 0); done += kMaxMessage) {
    const int n = int(std::min(kMaxMessage, bytes - done));
    MPI_Request r = MPI_REQUEST_NULL;
    TROUPE_MPI_CHECK(MPI_Isend(p + done, n, MPI_BYTE, dest, tag, comm, &r), "send of ", n, " bytes to process ", dest,
                     " (tag ", tag, ")");
    requests_.push_back(r);
    transfers_.push_back({label, -1, dest});
    if (bytes == 0) break;
  }
}

void MpiRequests::recv(int comm_id, void* data, int64_t bytes, int source, int tag, int label) {
  const MPI_Comm comm = links_.comm(comm_id);
  auto* p = static_cast<char*>(data);
  for (int64_t done = 0; done < bytes || (bytes == 0 && done == 0); done += kMaxMessage) {
    const int n = int(std::min(kMaxMessage, bytes - done));
    MPI_Request r = MPI_REQUEST_NULL;
    TROUPE_MPI_CHECK(MPI_Irecv(p + done, n, MPI_BYTE, source, tag, comm, &r), "receive of ", n, " bytes from process ",
                     source, " (tag ", tag, ")");
    requests_.push_back(r);
    transfers_.push_back({label, n, source});
    if (bytes == 0) break;
  }
}

void MpiRequests::reap(int index, const MPI_Status& status) {
  const Transfer& t = transfers_[size_t(index)];
  if (status.MPI_ERROR != MPI_SUCCESS && status.MPI_ERROR != MPI_ERR_PENDING)
    fail_mpi(status.MPI_ERROR, "MPI_Testsome", __FILE__, __LINE__,
             str_cat(t.bytes < 0 ? "a send to" : "a receive from", " process ", t.peer, " (peer ", t.label, ")"));
  if (t.bytes < 0) return;
  int count = 0;
  TROUPE_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &count), "length of a received message");
  TROUPE_CHECK(count == t.bytes, "received ", count, " bytes from process ", t.peer, " (peer ", t.label, "), expected ",
               t.bytes, ": the two sides disagree on the transfer");
}

bool MpiRequests::test() {
  if (requests_.empty()) return true;
  const int n = int(requests_.size());
  std::vector<int> indices(size_t(n), 0);
  std::vector<MPI_Status> statuses(static_cast<size_t>(n));
  int completed = 0;
  const int rc = MPI_Testsome(n, requests_.data(), &completed, indices.data(), statuses.data());
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) fail_mpi(rc, "MPI_Testsome", __FILE__, __LINE__, "");
  if (completed == MPI_UNDEFINED) completed = 0;
  for (int i = 0; i < completed; ++i) {
    // Without MPI_ERR_IN_STATUS the statuses' error fields are not set.
    if (rc == MPI_SUCCESS) statuses[size_t(i)].MPI_ERROR = MPI_SUCCESS;
    reap(indices[size_t(i)], statuses[size_t(i)]);
  }
  // Completed requests are MPI_REQUEST_NULL now; keep the rest in order.
  size_t kept = 0;
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (requests_[i] == MPI_REQUEST_NULL) continue;
    requests_[kept] = requests_[i];
    transfers_[kept] = transfers_[i];
    ++kept;
  }
  requests_.resize(kept);
  transfers_.resize(kept);
  return requests_.empty();
}

bool MpiRequests::wait_until(std::chrono::steady_clock::time_point deadline, const std::function<bool()>& stop,
                             std::vector<int>& unfinished) {
  // Poll eagerly at first (a collective's peers usually arrive within microseconds), then
  // back off to at most a millisecond so a long wait does not eat a core.
  auto pause = std::chrono::microseconds(0);
  for (int polls = 0;; ++polls) {
    if (test()) return true;
    if ((stop && stop()) || std::chrono::steady_clock::now() >= deadline) break;
    if (polls < 200) {
      std::this_thread::yield();
    } else {
      pause = std::min(std::chrono::microseconds(1000), pause + std::chrono::microseconds(20));
      std::this_thread::sleep_for(pause);
    }
  }
  unfinished.clear();
  for (const Transfer& t : transfers_) unfinished.push_back(t.label);
  std::sort(unfinished.begin(), unfinished.end());
  unfinished.erase(std::unique(unfinished.begin(), unfinished.end()), unfinished.end());
  return false;
}

void MpiRequests::abandon() {
  // Best effort and silent: this runs on the way out of a failure (or in a destructor).
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (requests_[i] == MPI_REQUEST_NULL) continue;
    if (transfers_[i].bytes >= 0) MPI_Cancel(&requests_[i]);
    MPI_Request_free(&requests_[i]);
  }
  requests_.clear();
  transfers_.clear();
}

}  // namespace troupe::actors
