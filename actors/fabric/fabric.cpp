#include "actors/fabric/fabric.hpp"

#include <map>
#include <mutex>

#include "actors/fabric/cpu_collectives.hpp"
#include "actors/fabric/host_channel.hpp"
#include "actors/fabric/host_exchange.hpp"
#include "actors/fabric/host_group.hpp"
#include "actors/fabric/launch_env.hpp"
#include "actors/fabric/mpi_links.hpp"
#include "actors/fabric/tcp_links.hpp"
#include "actors/fabric/tcp_rendezvous.hpp"
#include "base/check.hpp"
#include "base/log.hpp"
#if TROUPE_HAVE_CUDA
#include "actors/fabric/cuda/cuda_services.hpp"
#include "actors/fabric/cuda/nccl_group.hpp"
#endif

namespace troupe::actors {

struct Fabric::Channels {
  std::mutex mu;                                     // guards the rest
  std::map<std::pair<int, int>, int> channel_count;  // per (from, to): channels made so far
  std::shared_ptr<SendReaper> reaper;                // made with the first sending channel
};

namespace {

std::mutex g_mu;
std::weak_ptr<Fabric> g_live;

constexpr int kNcclIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES (nccl.h is not included here)
// The links' first two communicators: the host helpers and make_group's agreement; the
// cross-process channels (tags 2 id, 2 id + 1).
constexpr int kControl = 0, kChannels = 1;

}  // namespace

Fabric::Fabric() : channels_(std::make_unique<Channels>()) {}

std::shared_ptr<Fabric> Fabric::init() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (auto live = g_live.lock()) return live;
  std::shared_ptr<Fabric> f(new Fabric());
  const LaunchEnv env = read_launch_env();
  if (env.launcher == Launcher::mpirun) {
    f->links_ = std::make_shared<MpiLinks>();
  } else if (env.world_size > 1) {
    f->links_ = std::make_shared<TcpLinks>(env.rank, env.local_rank, tcp_rendezvous(env));
  } else {
    f->node_process_ = env.local_rank;  // WORLD_SIZE=1 under torchrun: one process
  }
  if (f->links_) {
    f->process_ = f->links_->process();
    f->processes_ = f->links_->processes();
    f->node_process_ = f->links_->node_process();
    set_log_process(f->process_, f->processes_);  // every log line names its rank from now on
    logger("fabric").debug("process ", f->process_, " of ", f->processes_, " (", f->node_process_,
                           "-th on its machine), started by ", launcher_name(env.launcher), ", linked by ",
                           f->links_->name());
  }
  g_live = f;
  return f;
}

Fabric::~Fabric() {
  // Nothing may throw here; errors on the way out are ignored.
  channels_->reaper.reset();  // drains the sends in flight
  links_.reset();             // MPI: freed and finalized; TCP: the connections finished
}

bool Fabric::uses_mpi() const { return links_ && std::string(links_->name()) == "MPI"; }
bool Fabric::uses_tcp() const { return links_ && std::string(links_->name()) == "TCP"; }

void Fabric::all_reduce(std::vector<double>& values, ReduceOp op) {
  if (links_) host_all_reduce(*links_, kControl, values, op, watch());
}

void Fabric::barrier() {
  if (links_) host_barrier(*links_, kControl, watch());
}

std::vector<std::string> Fabric::all_gather(const std::string& mine) {
  if (!links_) return {mine};
  return host_all_gather(*links_, kControl, mine, watch());
}

void Fabric::broadcast(std::vector<uint8_t>& bytes, int root) {
  TROUPE_CHECK(root >= 0 && root < processes_, "Fabric::broadcast: root ", root, " of ", processes_, " processes");
  if (links_) host_broadcast(*links_, kControl, bytes, root, watch());
}

ClockOffset Fabric::clock_offset(const std::function<int64_t()>& now_ns, int rounds) {
  if (!links_) return {};
  return host_clock_offset(*links_, kControl, now_ns, rounds, watch());
}

void Fabric::end_without_waiting() {
  {
    std::lock_guard<std::mutex> lock(channels_->mu);
    if (channels_->reaper) channels_->reaper->give_up_at_end();
  }
  if (links_) links_->end_without_waiting();
}

void Fabric::watch_peers(std::function<std::string()> watch) {
  std::lock_guard lock(watch_mu_);
  watch_ = std::move(watch);
}

std::vector<std::unique_ptr<Collectives>> Fabric::make_group(const std::vector<int>& member_process,
                                                             const std::vector<const Context*>& local_contexts,
                                                             const GroupOptions& options) {
  const int size = int(member_process.size());
  const std::string& name = options.name;
  TROUPE_CHECK(size >= 1 && local_contexts.size() == member_process.size(), "make_group '", name, "': ", size,
               " member processes, ", local_contexts.size(), " contexts");
  int local_kinds = 0;  // bit 0: a CPU member here, bit 1: a CUDA member here
  bool one_process = true;
  for (int i = 0; i < size; ++i) {
    const int p = member_process[size_t(i)];
    const Context* ctx = local_contexts[size_t(i)];
    TROUPE_CHECK(p >= 0 && p < processes_, "make_group '", name, "': member ", i, " in process ", p, " of ",
                 processes_);
    TROUPE_CHECK((p == process_) == (ctx != nullptr), "make_group '", name, "': member ", i, " lives in process ", p,
                 ", this is process ", process_, ": its context must be given here and only here");
    if (ctx) local_kinds |= ctx->is_cuda() ? 2 : 1;
    one_process &= p == member_process[0];
  }
  std::vector<std::unique_ptr<Collectives>> endpoints(static_cast<size_t>(size));
  // Every process takes part in what follows for a group spanning processes (also those without
  // members): they agree on its kind, and a CUDA group's id travels from member 0's process.
  int kinds = local_kinds;
  if (!one_process) {
    std::vector<double> seen = {double(local_kinds & 1), double(local_kinds & 2)};
    all_reduce(seen, ReduceOp::max);
    kinds = (seen[0] > 0 ? 1 : 0) | (seen[1] > 0 ? 2 : 0);
  }
  TROUPE_CHECK(kinds != 3, "make_group '", name, "': CPU and CUDA members in one group");
  if (kinds == 0) return endpoints;  // all its members in one other process
  logger("fabric").debug("group '", name, "': ", size, " members, ",
                         kinds == 2    ? "NCCL"
                         : one_process ? "shared memory"
                                       : links_->name());

  if (kinds == 2) {
#if TROUPE_HAVE_CUDA
    std::vector<uint8_t> id;
    if (process_ == member_process[0]) id = cuda::nccl_unique_id();
    if (!one_process) broadcast(id, member_process[0]);
    if (local_kinds == 0) return endpoints;
    return cuda::make_nccl_group(id, local_contexts, options);
#else
    TROUPE_FAIL("make_group '", name, "': CUDA members in a build without the CUDA backend");
#endif
  }

  const int comm = one_process ? -1 : links_->new_communicator();
  if (local_kinds == 0) return endpoints;
  auto group = std::make_shared<HostGroup>(member_process, process_, name, options.timeout,
                                           one_process ? nullptr : links_, comm, shared_from_this());
  for (int i = 0; i < size; ++i)
    if (member_process[size_t(i)] == process_) endpoints[size_t(i)] = make_cpu_endpoint(group, i);
  return endpoints;
}

std::unique_ptr<Channel> Fabric::make_channel(int from_process, int to_process, const Context* from_ctx,
                                              const Context* to_ctx, bool timing, std::chrono::milliseconds timeout) {
  const std::string what = str_cat("make_channel from process ", from_process, " to process ", to_process);
  TROUPE_CHECK(from_process >= 0 && from_process < processes_ && to_process >= 0 && to_process < processes_, what, ": ",
               processes_, " processes");
  TROUPE_CHECK((from_process == process_) == (from_ctx != nullptr) && (to_process == process_) == (to_ctx != nullptr),
               what, ": in process ", process_, " give the context of each end that lives here, and only those");
  if (from_process != process_ && to_process != process_) return nullptr;
  if (from_process == to_process) return actors::make_channel(*from_ctx, *to_ctx, timing);

  const bool sending = from_process == process_;
  const int peer = sending ? to_process : from_process;
  const Context& ctx = sending ? *from_ctx : *to_ctx;
  int id = 0;
  {
    std::lock_guard<std::mutex> lock(channels_->mu);
    id = channels_->channel_count[{from_process, to_process}]++;
  }
  const int hello_tag = 2 * id, data_tag = 2 * id + 1;
  TROUPE_CHECK(data_tag <= links_->max_tag(), what, ": channel ", id, " needs tag ", data_tag, ", ", links_->name(),
               " allows up to ", links_->max_tag());

  // The ends check that they agree on the kind (and a CUDA channel's sender hands out the
  // NCCL id): the sender sends [is_cuda, id...], the receiver answers [is_cuda].
  std::vector<uint8_t> hello(1 + kNcclIdBytes, 0), answer(1, 0);
  std::unique_ptr<LinkRequests> rq = links_->requests();
  if (sending) {
    hello[0] = ctx.is_cuda();
#if TROUPE_HAVE_CUDA
    if (ctx.is_cuda()) {
      const std::vector<uint8_t> nccl = cuda::nccl_unique_id();
      TROUPE_CHECK(nccl.size() == size_t(kNcclIdBytes), what, ": an NCCL id of ", nccl.size(), " bytes");
      std::copy(nccl.begin(), nccl.end(), hello.begin() + 1);
    }
#endif
    rq->send(kChannels, hello.data(), int64_t(hello.size()), peer, hello_tag, peer);
    rq->recv(kChannels, answer.data(), 1, peer, hello_tag, peer);
  } else {
    answer[0] = ctx.is_cuda();
    rq->recv(kChannels, hello.data(), int64_t(hello.size()), peer, hello_tag, peer);
    rq->send(kChannels, answer.data(), 1, peer, hello_tag, peer);
  }
  std::vector<int> late;
  TROUPE_CHECK(rq->wait_until(std::chrono::steady_clock::now() + timeout, nullptr, late), what, ": process ", peer,
               " did not make its end within ", std::chrono::duration<double>(timeout).count(), " s");
  TROUPE_CHECK(hello[0] == answer[0], what, ": the sender is a ", hello[0] ? "GPU" : "CPU", ", the receiver a ",
               answer[0] ? "GPU" : "CPU");

  if (ctx.is_cuda()) {
#if TROUPE_HAVE_CUDA
    return cuda::make_process_channel(sending, ctx, std::vector<uint8_t>(hello.begin() + 1, hello.end()), timing);
#else
    (void)timing;
    TROUPE_FAIL(what, ": a CUDA context in a build without the CUDA backend");
#endif
  }
  if (!sending) return make_host_recv_channel(links_, kChannels, peer, data_tag, timeout, shared_from_this());
  std::shared_ptr<SendReaper> reaper;
  {
    std::lock_guard<std::mutex> lock(channels_->mu);
    if (!channels_->reaper) channels_->reaper = std::make_shared<SendReaper>();
    reaper = channels_->reaper;
  }
  return make_host_send_channel(links_, kChannels, peer, data_tag, std::move(reaper), shared_from_this());
}

}  // namespace troupe::actors
