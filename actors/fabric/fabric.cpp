#include "actors/fabric/fabric.hpp"

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>

#include "actors/fabric/cpu_collectives.hpp"
#include "actors/fabric/host_group.hpp"
#include "actors/fabric/mpi_channel.hpp"
#include "actors/fabric/mpi_check.hpp"
#include "base/check.hpp"
#include "base/log.hpp"
#if TROUPE_HAVE_CUDA
#include "actors/fabric/cuda/cuda_services.hpp"
#include "actors/fabric/cuda/nccl_group.hpp"
#endif

namespace troupe::actors {

struct Fabric::Mpi {
  bool finalize = false;                             // we started MPI, so we end it
  MPI_Comm control = MPI_COMM_NULL;                  // the host-side helpers and make_group's agreement
  MPI_Comm channels = MPI_COMM_NULL;                 // cross-process channels (tags 2 id, 2 id + 1)
  std::vector<MPI_Comm> group_comms;                 // one per multi-process CPU group, freed at the end
  int tag_ub = 32767;                                // the largest tag this MPI allows
  std::mutex mu;                                     // guards the rest
  std::map<std::pair<int, int>, int> channel_count;  // per (from, to): channels made so far
  std::shared_ptr<SendReaper> reaper;                // made with the first sending channel
};

namespace {

// MPI can start only once per process: a fabric started after an MPI fabric went is an error.
std::mutex g_mu;
std::weak_ptr<Fabric> g_live;
std::atomic<bool> g_mpi_finalized{false};

constexpr int kNcclIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES (nccl.h is not included here)

bool launched_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(name)) return true;
  return false;
}

MPI_Comm dup_world(const char* what) {
  MPI_Comm comm = MPI_COMM_NULL;
  TROUPE_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm), what);
  TROUPE_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), what);
  return comm;
}

template <typename T>
void combine(T& acc, T x, ReduceOp op) {
  if (op == ReduceOp::sum)
    acc += x;
  else if (x > acc || x != x)
    acc = x;  // max; NaN wins
}

}  // namespace

std::shared_ptr<Fabric> Fabric::init() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (auto live = g_live.lock()) return live;
  std::shared_ptr<Fabric> f(new Fabric());
  if (launched_by_mpirun()) {
    TROUPE_CHECK(!g_mpi_finalized, "Fabric::init: MPI was finalized when the previous fabric went and cannot ",
                 "start again in this process (keep one Fabric for the whole run)");
    f->mpi_ = std::make_unique<Mpi>();
    Mpi& mpi = *f->mpi_;
    int initialized = 0, provided = 0;
    TROUPE_MPI_CHECK(MPI_Initialized(&initialized), "Fabric::init");
    if (!initialized) {
      TROUPE_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "Fabric::init");
      mpi.finalize = true;
    } else {
      TROUPE_MPI_CHECK(MPI_Query_thread(&provided), "Fabric::init");
    }
    // Stage threads, the send reaper and the trainer all call MPI at once.
    TROUPE_CHECK(provided >= MPI_THREAD_MULTIPLE, "Fabric::init: this MPI provides thread level ", provided,
                 ", Troupe needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE, ")");
    TROUPE_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &f->process_), "Fabric::init");
    TROUPE_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &f->processes_), "Fabric::init");
    MPI_Comm node = MPI_COMM_NULL;
    TROUPE_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, f->process_, MPI_INFO_NULL, &node),
                     "Fabric::init: the processes of this machine");
    TROUPE_MPI_CHECK(MPI_Comm_rank(node, &f->node_process_), "Fabric::init");
    TROUPE_MPI_CHECK(MPI_Comm_free(&node), "Fabric::init");
    mpi.control = dup_world("Fabric::init: the control communicator");
    mpi.channels = dup_world("Fabric::init: the channel communicator");
    void* tag_ub = nullptr;
    int found = 0;
    TROUPE_MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found), "Fabric::init");
    if (found && tag_ub) mpi.tag_ub = *static_cast<int*>(tag_ub);
    set_log_process(f->process_, f->processes_);  // every log line names its rank from now on
    logger("fabric").debug("process ", f->process_, " of ", f->processes_, " (", f->node_process_,
                           "-th on its machine)");
  }
  g_live = f;
  return f;
}

Fabric::~Fabric() {
  if (!mpi_) return;
  // Nothing may throw here; errors on the way out are ignored.
  mpi_->reaper.reset();  // drains the sends in flight
  for (MPI_Comm& c : mpi_->group_comms) MPI_Comm_free(&c);
  if (mpi_->channels != MPI_COMM_NULL) MPI_Comm_free(&mpi_->channels);
  if (mpi_->control != MPI_COMM_NULL) MPI_Comm_free(&mpi_->control);
  if (mpi_->finalize) {
    MPI_Finalize();
    g_mpi_finalized = true;
  }
}

void Fabric::all_reduce(std::vector<double>& values, ReduceOp op) {
  if (!mpi_) return;
  const int n = int(values.size());
  std::vector<int> counts(size_t(processes_), 0);
  TROUPE_MPI_CHECK(MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, mpi_->control), "Fabric::all_reduce");
  for (int p = 0; p < processes_; ++p)
    TROUPE_CHECK(counts[size_t(p)] == n, "Fabric::all_reduce: process ", p, " reduces ", counts[size_t(p)],
                 " values, process ", process_, " ", n);
  // Everyone gathers everything and reduces in process order: the same bits everywhere (an
  // MPI_Allreduce may add in a different order on different processes).
  std::vector<double> all(size_t(n) * size_t(processes_));
  TROUPE_MPI_CHECK(MPI_Allgather(values.data(), n, MPI_DOUBLE, all.data(), n, MPI_DOUBLE, mpi_->control),
                   "Fabric::all_reduce of ", n, " values");
  for (int e = 0; e < n; ++e) {
    double acc = all[size_t(e)];
    for (int p = 1; p < processes_; ++p) combine(acc, all[size_t(p) * size_t(n) + size_t(e)], op);
    values[size_t(e)] = acc;
  }
}

void Fabric::barrier() {
  if (mpi_) TROUPE_MPI_CHECK(MPI_Barrier(mpi_->control), "Fabric::barrier");
}

std::vector<std::string> Fabric::all_gather(const std::string& mine) {
  if (!mpi_) return {mine};
  TROUPE_CHECK(mine.size() < (size_t(1) << 30), "Fabric::all_gather: ", mine.size(), " bytes");
  const int n = int(mine.size());
  std::vector<int> lengths(size_t(processes_), 0), offsets(size_t(processes_), 0);
  TROUPE_MPI_CHECK(MPI_Allgather(&n, 1, MPI_INT, lengths.data(), 1, MPI_INT, mpi_->control), "Fabric::all_gather");
  int64_t total = 0;
  for (int p = 0; p < processes_; ++p) {
    offsets[size_t(p)] = int(total);
    total += lengths[size_t(p)];
  }
  TROUPE_CHECK(total < (int64_t(1) << 31), "Fabric::all_gather: ", total, " bytes in all");
  std::string all(size_t(total), '\0');
  TROUPE_MPI_CHECK(
      MPI_Allgatherv(mine.data(), n, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, mpi_->control),
      "Fabric::all_gather of ", total, " bytes");
  std::vector<std::string> out;
  for (int p = 0; p < processes_; ++p)
    out.push_back(all.substr(size_t(offsets[size_t(p)]), size_t(lengths[size_t(p)])));
  return out;
}

void Fabric::broadcast(std::vector<uint8_t>& bytes, int root) {
  TROUPE_CHECK(root >= 0 && root < processes_, "Fabric::broadcast: root ", root, " of ", processes_, " processes");
  if (!mpi_) return;
  uint64_t n = bytes.size();
  TROUPE_MPI_CHECK(MPI_Bcast(&n, 1, MPI_UINT64_T, root, mpi_->control), "Fabric::broadcast");
  bytes.resize(size_t(n));
  constexpr uint64_t kPiece = uint64_t(1) << 30;  // MPI counts are ints
  for (uint64_t done = 0; done < n; done += kPiece)
    TROUPE_MPI_CHECK(MPI_Bcast(bytes.data() + done, int(std::min(kPiece, n - done)), MPI_BYTE, root, mpi_->control),
                     "Fabric::broadcast of ", n, " bytes from process ", root);
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
  if (!one_process)
    TROUPE_MPI_CHECK(MPI_Allreduce(&local_kinds, &kinds, 1, MPI_INT, MPI_BOR, mpi_->control), "make_group '", name,
                     "': agreeing on the kind of its members");
  TROUPE_CHECK(kinds != 3, "make_group '", name, "': CPU and CUDA members in one group");
  if (kinds == 0) return endpoints;  // all its members in one other process
  logger("fabric").debug("group '", name, "': ", size, " members, ",
                         kinds == 2    ? "NCCL"
                         : one_process ? "shared memory"
                                       : "MPI");

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

  MPI_Comm comm = MPI_COMM_NULL;
  if (!one_process) {
    comm = dup_world("make_group: the group's communicator");
    std::lock_guard<std::mutex> lock(mpi_->mu);
    mpi_->group_comms.push_back(comm);
  }
  if (local_kinds == 0) return endpoints;
  auto group = std::make_shared<HostGroup>(member_process, process_, name, options.timeout, comm, shared_from_this());
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
    std::lock_guard<std::mutex> lock(mpi_->mu);
    id = mpi_->channel_count[{from_process, to_process}]++;
  }
  const int hello_tag = 2 * id, data_tag = 2 * id + 1;
  TROUPE_CHECK(data_tag <= mpi_->tag_ub, what, ": channel ", id, " needs tag ", data_tag, ", this MPI allows up to ",
               mpi_->tag_ub);

  // The ends check that they agree on the kind (and a CUDA channel's sender hands out the
  // NCCL id): the sender sends [is_cuda, id...], the receiver answers [is_cuda].
  std::vector<uint8_t> hello(1 + kNcclIdBytes, 0), answer(1, 0);
  MpiRequests rq;
  if (sending) {
    hello[0] = ctx.is_cuda();
#if TROUPE_HAVE_CUDA
    if (ctx.is_cuda()) {
      const std::vector<uint8_t> nccl = cuda::nccl_unique_id();
      TROUPE_CHECK(nccl.size() == size_t(kNcclIdBytes), what, ": an NCCL id of ", nccl.size(), " bytes");
      std::copy(nccl.begin(), nccl.end(), hello.begin() + 1);
    }
#endif
    rq.send(mpi_->channels, hello.data(), int64_t(hello.size()), peer, hello_tag, peer);
    rq.recv(mpi_->channels, answer.data(), 1, peer, hello_tag, peer);
  } else {
    answer[0] = ctx.is_cuda();
    rq.recv(mpi_->channels, hello.data(), int64_t(hello.size()), peer, hello_tag, peer);
    rq.send(mpi_->channels, answer.data(), 1, peer, hello_tag, peer);
  }
  std::vector<int> late;
  TROUPE_CHECK(rq.wait_until(std::chrono::steady_clock::now() + timeout, nullptr, late), what, ": process ", peer,
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
  if (!sending) return make_mpi_recv_channel(mpi_->channels, peer, data_tag, timeout, shared_from_this());
  std::shared_ptr<SendReaper> reaper;
  {
    std::lock_guard<std::mutex> lock(mpi_->mu);
    if (!mpi_->reaper) mpi_->reaper = std::make_shared<SendReaper>();
    reaper = mpi_->reaper;
  }
  return make_mpi_send_channel(mpi_->channels, peer, data_tag, std::move(reaper), shared_from_this());
}

}  // namespace troupe::actors
