// Blocking TCP socket steps with a deadline, for the TCP backend's rendezvous (internal to
// actors/): listen, accept, connect (retrying while the other side is not up yet), and whole
// reads and writes. Every system call is checked; a deadline that passes is an error naming
// what was waited for.
//
//   UniqueFd server = tcp_listen(family, 29500, "MASTER_PORT=29500");
//   UniqueFd peer = tcp_accept(server.get(), deadline, "waiting for the other processes");
//   tcp_read(peer.get(), &hello, sizeof hello, deadline, "the hello of a process");
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace troupe::actors {

using Deadline = std::chrono::steady_clock::time_point;

// An owned file descriptor, closed when it goes.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();
  int get() const { return fd_; }
  int release();
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// The address family to listen on for `host`: AF_INET if it has an IPv4 address, else AF_INET6;
// `what` names it in errors.
int tcp_family(const std::string& host, const std::string& what);
// A socket listening on every address of `family` at `port` (0: any free port).
UniqueFd tcp_listen(int family, int port, const std::string& what);
int tcp_local_port(int fd);
// The numeric address of the other end of a connected socket.
std::string tcp_peer_host(int fd);
// The next connection, or an error when `deadline` passes first.
UniqueFd tcp_accept(int listener, Deadline deadline, const std::string& what);
// Connects to host:port, retrying while nobody listens there yet; an error naming `what` and
// the last failure when `deadline` passes.
UniqueFd tcp_connect(const std::string& host, int port, Deadline deadline, const std::string& what);
// All `bytes`, or an error (the other end closed, the deadline passed).
void tcp_read(int fd, void* data, size_t bytes, Deadline deadline, const std::string& what);
void tcp_write(int fd, const void* data, size_t bytes, Deadline deadline, const std::string& what);
// Length-prefixed strings.
void tcp_write_string(int fd, const std::string& s, Deadline deadline, const std::string& what);
std::string tcp_read_string(int fd, Deadline deadline, const std::string& what);
// For the progress thread: non-blocking, no Nagle delay on small messages.
void tcp_set_streaming(int fd);

}  // namespace troupe::actors
