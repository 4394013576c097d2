#include "actors/fabric/tcp_socket.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "base/check.hpp"

namespace troupe::actors {

namespace {

constexpr auto kRetry = std::chrono::milliseconds(200);     // between connection attempts
constexpr auto kAttempt = std::chrono::milliseconds(5000);  // one connection attempt at most

int ms_left(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return int(std::max<int64_t>(0, std::min<int64_t>(left.count(), 1 << 30)));
}

// Waits for `events` on fd; false when the deadline passes first.
bool wait_for(int fd, short events, Deadline deadline, const std::string& what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, ms_left(deadline));
    if (n == -1 && errno == EINTR) continue;
    TROUPE_SYSCALL(n, what, ": poll");
    return n > 0;
  }
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) ::freeaddrinfo(list);
  }
};

// "" on success, else why host:port cannot be resolved; `fatal` when retrying cannot help.
std::string resolve(const std::string& host, int port, AddrInfo& out, bool& fatal) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &out.list);
  fatal = rc == EAI_NONAME || rc == EAI_SERVICE || rc == EAI_FAMILY;
  return rc == 0 ? "" : str_cat("cannot resolve ", host, ": ", ::gai_strerror(rc));
}

// One non-blocking connect to `a`, waiting at most kAttempt; the socket, or -1 with `why`.
int try_connect(const addrinfo& a, Deadline deadline, std::string& why) {
  UniqueFd fd(::socket(a.ai_family, a.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a.ai_protocol));
  TROUPE_SYSCALL(fd.get(), "a socket to connect with");
  int rc = ::connect(fd.get(), a.ai_addr, a.ai_addrlen);
  if (rc == -1 && errno == EINPROGRESS) {
    const Deadline attempt = std::min(deadline, std::chrono::steady_clock::now() + kAttempt);
    if (!wait_for(fd.get(), POLLOUT, attempt, "connecting")) {
      why = "no answer";
      return -1;
    }
    int err = 0;
    socklen_t len = sizeof err;
    TROUPE_SYSCALL(::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len), "the result of a connect");
    if (err != 0) {
      errno = err;
      rc = -1;
    } else {
      rc = 0;
    }
  }
  if (rc == -1) {
    why = std::strerror(errno);
    return -1;
  }
  const int flags = ::fcntl(fd.get(), F_GETFL);
  TROUPE_SYSCALL(flags, "a connected socket's flags");
  TROUPE_SYSCALL(::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK), "making a connected socket blocking");
  return fd.release();
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

int UniqueFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

int tcp_family(const std::string& host, const std::string& what) {
  AddrInfo ai;
  bool fatal = false;
  const std::string why = resolve(host, 1, ai, fatal);
  TROUPE_CHECK(why.empty(), what, ": ", why);
  // IPv4 where the name has both ("localhost"): it works on hosts with IPv6 turned off.
  for (const addrinfo* a = ai.list; a; a = a->ai_next)
    if (a->ai_family == AF_INET) return AF_INET;
  return ai.list->ai_family;
}

UniqueFd tcp_listen(int family, int port, const std::string& what) {
  UniqueFd fd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  TROUPE_SYSCALL(fd.get(), what, ": a socket to listen on");
  const int one = 1;
  TROUPE_SYSCALL(::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one), what, ": SO_REUSEADDR");
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_any;
    a->sin6_port = htons(uint16_t(port));
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    a->sin_port = htons(uint16_t(port));
    len = sizeof *a;
  }
  TROUPE_SYSCALL(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len), what, ": cannot listen on port ", port);
  TROUPE_SYSCALL(::listen(fd.get(), SOMAXCONN), what, ": listen on port ", port);
  return fd;
}

int tcp_local_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  TROUPE_SYSCALL(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), "the port of a listening socket");
  return addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                    : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

std::string tcp_peer_host(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  TROUPE_SYSCALL(::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len), "the address of a connected process");
  char host[NI_MAXHOST] = {};
  const int rc = ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST);
  TROUPE_CHECK(rc == 0, "the address of a connected process: ", ::gai_strerror(rc));
  return host;
}

UniqueFd tcp_accept(int listener, Deadline deadline, const std::string& what) {
  for (;;) {
    TROUPE_CHECK(wait_for(listener, POLLIN, deadline, what), what, ": timed out");
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd == -1 && (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN)) continue;
    TROUPE_SYSCALL(fd, what, ": accept");
    return UniqueFd(fd);
  }
}

UniqueFd tcp_connect(const std::string& host, int port, Deadline deadline, const std::string& what) {
  std::string why = "not tried";
  for (;;) {
    AddrInfo ai;
    bool fatal = false;
    const std::string unresolved = resolve(host, port, ai, fatal);
    TROUPE_CHECK(!fatal, what, ": ", unresolved);
    if (!unresolved.empty()) why = unresolved;
    for (const addrinfo* a = ai.list; a; a = a->ai_next) {
      const int fd = try_connect(*a, deadline, why);
      if (fd >= 0) return UniqueFd(fd);
    }
    TROUPE_CHECK(std::chrono::steady_clock::now() + kRetry < deadline, what, ": nothing answered at ", host, ":", port,
                 " in time (last attempt: ", why, ")");
    std::this_thread::sleep_for(kRetry);
  }
}

void tcp_read(int fd, void* data, size_t bytes, Deadline deadline, const std::string& what) {
  auto* p = static_cast<char*>(data);
  for (size_t done = 0; done < bytes;) {
    TROUPE_CHECK(wait_for(fd, POLLIN, deadline, what), what, ": timed out");
    const ssize_t n = ::recv(fd, p + done, bytes - done, 0);
    if (n == -1 && (errno == EINTR || errno == EAGAIN)) continue;
    TROUPE_SYSCALL(n, what);
    TROUPE_CHECK(n > 0, what, ": the other process closed the connection");
    done += size_t(n);
  }
}

void tcp_write(int fd, const void* data, size_t bytes, Deadline deadline, const std::string& what) {
  const auto* p = static_cast<const char*>(data);
  for (size_t done = 0; done < bytes;) {
    TROUPE_CHECK(wait_for(fd, POLLOUT, deadline, what), what, ": timed out");
    const ssize_t n = ::send(fd, p + done, bytes - done, MSG_NOSIGNAL);
    if (n == -1 && (errno == EINTR || errno == EAGAIN)) continue;
    TROUPE_SYSCALL(n, what);
    done += size_t(n);
  }
}

void tcp_write_string(int fd, const std::string& s, Deadline deadline, const std::string& what) {
  const uint32_t n = uint32_t(s.size());
  tcp_write(fd, &n, sizeof n, deadline, what);
  tcp_write(fd, s.data(), s.size(), deadline, what);
}

std::string tcp_read_string(int fd, Deadline deadline, const std::string& what) {
  uint32_t n = 0;
  tcp_read(fd, &n, sizeof n, deadline, what);
  TROUPE_CHECK(n < (1u << 20), what, ": a ", n, "-byte string (not a Troupe process?)");
  std::string s(n, '\0');
  tcp_read(fd, s.data(), n, deadline, what);
  return s;
}

void tcp_set_streaming(int fd) {
  const int one = 1;
  TROUPE_SYSCALL(::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one), "TCP_NODELAY on a process link");
  const int flags = ::fcntl(fd, F_GETFL);
  TROUPE_SYSCALL(flags, "a process link's flags");
  TROUPE_SYSCALL(::fcntl(fd, F_SETFL, flags | O_NONBLOCK), "making a process link non-blocking");
}

}  // namespace troupe::actors
