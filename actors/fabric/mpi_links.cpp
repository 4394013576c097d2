#include "actors/fabric/mpi_links.hpp"

#include <atomic>

#include "actors/fabric/mpi_check.hpp"
#include "actors/fabric/mpi_requests.hpp"

namespace troupe::actors {

namespace {

std::atomic<bool> g_mpi_finalized{false};

MPI_Comm dup_world(const char* what) {
  MPI_Comm comm = MPI_COMM_NULL;
  TROUPE_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm), what);
  TROUPE_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), what);
  return comm;
}

}  // namespace

MpiLinks::MpiLinks() {
  TROUPE_CHECK(!g_mpi_finalized, "Fabric::init: MPI was finalized when the previous fabric went and cannot ",
               "start again in this process (keep one Fabric for the whole run)");
  int initialized = 0, provided = 0;
  TROUPE_MPI_CHECK(MPI_Initialized(&initialized), "Fabric::init");
  if (!initialized) {
    TROUPE_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "Fabric::init");
    finalize_ = true;
  } else {
    TROUPE_MPI_CHECK(MPI_Query_thread(&provided), "Fabric::init");
  }
  TROUPE_CHECK(provided >= MPI_THREAD_MULTIPLE, "Fabric::init: this MPI provides thread level ", provided,
               ", Troupe needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE, ")");
  TROUPE_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &process_), "Fabric::init");
  TROUPE_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &processes_), "Fabric::init");
  MPI_Comm node = MPI_COMM_NULL;
  TROUPE_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, process_, MPI_INFO_NULL, &node),
                   "Fabric::init: the processes of this machine");
  TROUPE_MPI_CHECK(MPI_Comm_rank(node, &node_process_), "Fabric::init");
  TROUPE_MPI_CHECK(MPI_Comm_free(&node), "Fabric::init");
  void* tag_ub = nullptr;
  int found = 0;
  TROUPE_MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found), "Fabric::init");
  if (found && tag_ub) tag_ub_ = *static_cast<int*>(tag_ub);
  comms_.push_back(dup_world("Fabric::init: the control communicator"));
  comms_.push_back(dup_world("Fabric::init: the channel communicator"));
}

MpiLinks::~MpiLinks() {
  // Nothing may throw here; errors on the way out are ignored.
  for (MPI_Comm& c : comms_) MPI_Comm_free(&c);
  if (finalize_) {
    MPI_Finalize();
    g_mpi_finalized = true;
  }
}

int MpiLinks::new_communicator() {
  const MPI_Comm comm = dup_world("a communicator for a group spanning processes");
  std::lock_guard<std::mutex> lock(mu_);
  comms_.push_back(comm);
  return int(comms_.size()) - 1;
}

MPI_Comm MpiLinks::comm(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  TROUPE_CHECK(id >= 0 && size_t(id) < comms_.size(), "MPI links: no communicator ", id);
  return comms_[size_t(id)];
}

std::unique_ptr<LinkRequests> MpiLinks::requests() { return std::make_unique<MpiRequests>(*this); }

}  // namespace troupe::actors
