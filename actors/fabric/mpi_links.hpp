// The MPI backend of the process links (internal to actors/): the processes of `mpirun`, one
// MPI communicator per links communicator (duplicates of MPI_COMM_WORLD that return errors
// instead of aborting). MPI starts here with MPI_THREAD_MULTIPLE (stage threads, the send
// reaper and the trainer call it at once) and is finalized when the links go, if it started here.
#pragma once

#include <mpi.h>

#include <deque>
#include <memory>
#include <mutex>

#include "actors/fabric/process_links.hpp"

namespace troupe::actors {

class MpiLinks final : public ProcessLinks {
 public:
  // MPI cannot start again once finalized: a second MpiLinks after the first went is an error.
  MpiLinks();
  ~MpiLinks() override;
  MpiLinks(const MpiLinks&) = delete;
  MpiLinks& operator=(const MpiLinks&) = delete;

  const char* name() const override { return "MPI"; }
  int process() const override { return process_; }
  int processes() const override { return processes_; }
  int node_process() const override { return node_process_; }
  int max_tag() const override { return tag_ub_; }
  int new_communicator() override;
  std::unique_ptr<LinkRequests> requests() override;
  // No MPI_Finalize at the end (it waits for every process): the process exits without it and
  // mpirun ends the job.
  void end_without_waiting() override { finalize_ = false; }

  MPI_Comm comm(int id) const;

 private:
  bool finalize_ = false;  // we started MPI, so we end it
  int process_ = 0, processes_ = 1, node_process_ = 0;
  int tag_ub_ = 32767;  // the largest tag this MPI allows
  mutable std::mutex mu_;
  std::deque<MPI_Comm> comms_;  // [id]
};

}  // namespace troupe::actors
