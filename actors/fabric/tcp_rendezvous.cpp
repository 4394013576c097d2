#include "actors/fabric/tcp_rendezvous.hpp"

#include <cstdint>
#include <map>

#include "base/check.hpp"
#include "base/log.hpp"

namespace troupe::actors {

namespace {

constexpr uint32_t kMagic = 0x54525031;  // "TRP1": a Troupe process, this wire version

// What a process says first on every connection it makes.
struct Hello {
  uint32_t magic = kMagic;
  int32_t rank = 0;
  int32_t world_size = 0;
  int32_t port = 0;  // where it listens (to process 0 only)
};

double seconds(std::chrono::milliseconds d) { return std::chrono::duration<double>(d).count(); }

std::string master_of(const LaunchEnv& env) {
  return str_cat("MASTER_ADDR=", env.master_addr, " ", env.master_port_var, "=", env.master_port);
}

// Process 0: takes every other process's hello, checks them, answers with the address table.
std::vector<UniqueFd> serve_rendezvous(const LaunchEnv& env) {
  const int P = env.world_size;
  const std::string what = str_cat("process 0 (", env.rank_var, "=0) waiting at ", master_of(env));
  UniqueFd server = tcp_listen(tcp_family(env.master_addr, "MASTER_ADDR"), env.master_port,
                               str_cat(what, " (another process with ", env.rank_var, "=0, or the port is taken?)"));
  const Deadline deadline = std::chrono::steady_clock::now() + env.rendezvous_timeout;
  std::vector<UniqueFd> peers(static_cast<size_t>(P));
  std::vector<std::string> hosts(static_cast<size_t>(P)), ports(static_cast<size_t>(P));
  std::vector<UniqueFd> refused;  // connections of processes whose hello was wrong
  auto refuse = [&](const std::string& why) {
    // Everyone connected so far hears why, then this process fails with the same sentence.
    for (std::vector<UniqueFd>* list : std::initializer_list<std::vector<UniqueFd>*>{&peers, &refused})
      for (UniqueFd& fd : *list) {
        if (!fd) continue;
        try {
          const uint8_t no = 1;
          tcp_write(fd.get(), &no, 1, std::chrono::steady_clock::now() + std::chrono::seconds(2), "refusing");
          tcp_write_string(fd.get(), why, std::chrono::steady_clock::now() + std::chrono::seconds(2), "refusing");
        } catch (const Error&) {  // that process went already; the error stands
        }
      }
    TROUPE_FAIL(why);
  };
  for (int joined = 1; joined < P;) {
    UniqueFd fd;
    try {
      fd = tcp_accept(server.get(), deadline, what);
    } catch (const Error&) {
      std::string missing;
      for (int p = 1; p < P; ++p)
        if (!peers[size_t(p)]) missing += str_cat(missing.empty() ? "" : ", ", p);
      refuse(str_cat(what, ": processes ", missing, " did not arrive within ", seconds(env.rendezvous_timeout),
                     " s (TROUPE_RENDEZVOUS_TIMEOUT); start all ", P, " processes (", env.world_size_var, "=", P,
                     ") with the same MASTER_ADDR and MASTER_PORT"));
    }
    const std::string host = tcp_peer_host(fd.get());
    Hello h;
    try {
      tcp_read(fd.get(), &h, sizeof h, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(10)),
               "a hello");
    } catch (const Error& e) {
      logger("fabric").warning(what, ": ignoring a connection from ", host, " that said nothing useful (", e.what(),
                               ")");
      continue;
    }
    if (h.magic != kMagic) {
      logger("fabric").warning(what, ": ignoring a connection from ", host, " that is not a Troupe process");
      continue;
    }
    refused.push_back(std::move(fd));
    if (h.world_size != P)
      refuse(str_cat(env.world_size_var, " disagrees between processes: process 0 has ", env.world_size_var, "=", P,
                     ", the process with ", env.rank_var, "=", h.rank, " at ", host, " has ", env.world_size_var, "=",
                     h.world_size));
    if (h.rank <= 0 || h.rank >= P || peers[size_t(h.rank)])
      refuse(str_cat(env.rank_var, "=", h.rank, " is claimed by two processes (", h.rank == 0 ? "process 0" : "one",
                     h.rank == 0 ? "" : str_cat(" at ", hosts[size_t(h.rank)]), " and one at ", host,
                     "): give every process its own ", env.rank_var, " from 0 to ", P - 1));
    peers[size_t(h.rank)] = std::move(refused.back());
    refused.pop_back();
    hosts[size_t(h.rank)] = host;
    ports[size_t(h.rank)] = std::to_string(h.port);
    ++joined;
  }
  for (int p = 1; p < P; ++p) {
    const int fd = peers[size_t(p)].get();
    const uint8_t ok = 0;
    const std::string at = str_cat("process 0: handing out the addresses to process ", p);
    tcp_write(fd, &ok, 1, deadline, at);
    for (int q = 1; q < P; ++q) {
      tcp_write_string(fd, hosts[size_t(q)], deadline, at);
      tcp_write_string(fd, ports[size_t(q)], deadline, at);
    }
  }
  return peers;
}

// Process `env.rank` > 0: joins at process 0, then connects to every other process.
std::vector<UniqueFd> join_rendezvous(const LaunchEnv& env) {
  const int P = env.world_size, me = env.rank;
  const std::string who = str_cat("process ", me, " (", env.rank_var, "=", me, ")");
  UniqueFd server = tcp_listen(tcp_family(env.master_addr, "MASTER_ADDR"), 0, str_cat(who, ": a port of its own"));
  const Deadline deadline = std::chrono::steady_clock::now() + env.rendezvous_timeout;
  std::vector<UniqueFd> peers(static_cast<size_t>(P));
  const std::string reaching =
      str_cat(who, ": could not reach process 0 at ", master_of(env), " within ", seconds(env.rendezvous_timeout),
              " s (TROUPE_RENDEZVOUS_TIMEOUT); check that process 0 runs and that MASTER_ADDR and MASTER_PORT are "
              "the same for every process");
  peers[0] = tcp_connect(env.master_addr, env.master_port, deadline, reaching);
  const Hello mine{kMagic, me, P, tcp_local_port(server.get())};
  const std::string at = str_cat(who, ": the rendezvous with process 0 at ", master_of(env));
  tcp_write(peers[0].get(), &mine, sizeof mine, deadline, at);
  uint8_t status = 1;
  // Process 0 answers once every process has arrived.
  tcp_read(peers[0].get(), &status, 1, deadline, str_cat(at, " (process 0 failed or is not a Troupe process)"));
  if (status != 0) TROUPE_FAIL(tcp_read_string(peers[0].get(), deadline, at));
  std::vector<std::string> hosts(static_cast<size_t>(P)), ports(static_cast<size_t>(P));
  for (int q = 1; q < P; ++q) {
    hosts[size_t(q)] = tcp_read_string(peers[0].get(), deadline, at);
    ports[size_t(q)] = tcp_read_string(peers[0].get(), deadline, at);
  }
  // Every process listens before it joins, so the lower-numbered ones are reachable now.
  const Deadline mesh = std::chrono::steady_clock::now() + env.rendezvous_timeout;
  for (int q = 1; q < me; ++q) {
    const std::string link =
        str_cat(who, ": connecting to process ", q, " at ", hosts[size_t(q)], ":", ports[size_t(q)]);
    peers[size_t(q)] = tcp_connect(hosts[size_t(q)], std::stoi(ports[size_t(q)]), mesh, link);
    const Hello h{kMagic, me, P, 0};
    tcp_write(peers[size_t(q)].get(), &h, sizeof h, mesh, link);
  }
  for (int joined = me + 1; joined < P; ++joined) {
    const std::string link = str_cat(who, ": waiting for the connections of processes ", me + 1, " to ", P - 1);
    UniqueFd fd = tcp_accept(server.get(), mesh, link);
    Hello h;
    tcp_read(fd.get(), &h, sizeof h, mesh, link);
    TROUPE_CHECK(h.magic == kMagic && h.rank > me && h.rank < P && !peers[size_t(h.rank)], link,
                 ": an unexpected connection (from ", tcp_peer_host(fd.get()), ", rank ", h.rank, ")");
    peers[size_t(h.rank)] = std::move(fd);
  }
  return peers;
}

}  // namespace

std::vector<UniqueFd> tcp_rendezvous(const LaunchEnv& env) {
  TROUPE_CHECK(env.world_size > 1 && env.rank >= 0 && env.rank < env.world_size, "tcp_rendezvous: process ", env.rank,
               " of ", env.world_size);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<UniqueFd> peers = env.rank == 0 ? serve_rendezvous(env) : join_rendezvous(env);
  logger("fabric").debug("process ", env.rank, " of ", env.world_size, ": connected to every other process in ",
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), " s");
  return peers;
}

}  // namespace troupe::actors
