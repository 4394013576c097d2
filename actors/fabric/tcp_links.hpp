// The TCP backend of the process links (internal to actors/): one connected socket per other
// process (tcp_rendezvous.hpp makes them) and a progress thread that poll()s them all. Every
// message is a frame (communicator, tag, bytes) and its bytes; frames from one process on one
// (communicator, tag) meet the receives posted for them in order. Incoming frames are read as
// soon as they arrive: into the posted receive's buffer, or kept until one is posted (so two
// processes sending to each other never block). A connection that closes (its process exited
// or died) fails every transfer with that process at once, naming it.
//
//   auto links = std::make_shared<TcpLinks>(env.rank, env.local_rank, tcp_rendezvous(env));
//   auto rq = links->requests();  // as any ProcessLinks (process_links.hpp)
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "actors/fabric/process_links.hpp"
#include "actors/fabric/tcp_socket.hpp"

namespace troupe::actors {

class TcpLinks final : public ProcessLinks {
 public:
  // peers[p]: the connected socket to process p (empty for this process).
  TcpLinks(int process, int node_process, std::vector<UniqueFd> peers);
  // Sends what is still queued, tells every peer it is done (half-close) and reads until they
  // are done too, at most a few seconds: closing with unread data would reset the connection
  // and could lose bytes a peer has not read yet.
  ~TcpLinks() override;
  TcpLinks(const TcpLinks&) = delete;
  TcpLinks& operator=(const TcpLinks&) = delete;

  const char* name() const override { return "TCP"; }
  int process() const override { return process_; }
  int processes() const override { return int(peers_.size()); }
  int node_process() const override { return node_process_; }
  int max_tag() const override { return 0x7fffffff; }
  int new_communicator() override { return next_comm_++; }
  std::unique_ptr<LinkRequests> requests() override;
  void end_without_waiting() override { hurry_ = true; }  // no lingering at the end

  struct Transfer;
  struct Incoming;

 private:
  friend class TcpRequests;
  struct Peer;
  using Key = std::pair<int, int>;  // (communicator, tag)

  // Called by TcpRequests, with mu_ held.
  void post_locked(const std::shared_ptr<Transfer>& t);
  void abandon_locked(Transfer& t);

  void loop();
  std::atomic<bool> hurry_{false};
  void read_peer(int p);   // with mu_ held
  void write_peer(int p);  // with mu_ held
  void close_peer(int p, const std::string& why);
  void complete(Transfer& t);
  void fail(Transfer& t, const std::string& why);
  void wake() const;

  const int process_, node_process_;
  std::atomic<int> next_comm_{2};
  std::vector<std::unique_ptr<Peer>> peers_;  // [process]; null for this one
  UniqueFd wake_fd_;                          // an eventfd: new sends, stopping

  std::mutex mu_;  // guards everything below and in peers_
  std::condition_variable done_cv_;
  uint64_t completions_ = 0;  // counts completed or failed transfers (for waiters)
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace troupe::actors
