// CPU channels between processes over the process links, MPI or TCP (internal to actors/; the
// Fabric makes them). The sending end posts a send and hands the request, with the tensor that
// must outlive it, to a SendReaper: a thread that completes sends in the background (MPI only
// moves a large message while someone in the sending process calls into MPI, and the stage that
// sent it may be computing for a long time; over TCP it only keeps the tensor until the progress
// thread has written it). The receiving end receives when the parcel's announcement arrives,
// waiting at most `timeout`.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/fabric/device_services.hpp"
#include "actors/fabric/process_links.hpp"

namespace troupe::actors {

class SendReaper {
 public:
  SendReaper();
  // Waits up to `drain` for sends in flight, then gives up on them (a failed run: their
  // receivers are gone) and leaves their buffers allocated.
  ~SendReaper();
  SendReaper(const SendReaper&) = delete;
  SendReaper& operator=(const SendReaper&) = delete;

  // Sends t's bytes; t stays alive until the transfer completes. Throws the error of an
  // earlier send that failed in the background.
  void send(ProcessLinks& links, int comm, const Tensor& t, int dest, int tag);
  // The run failed: the destructor gives up on what is in flight at once.
  void give_up_at_end();

 private:
  struct InFlight {
    Tensor tensor;
    std::unique_ptr<LinkRequests> requests;
  };
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<InFlight> in_flight_;
  bool stop_ = false;
  bool give_up_at_once_ = false;
  std::string error_;  // the first send that failed in the background
  std::thread thread_;
};

// Channels on communicator `comm` of `links`; `owner` keeps whatever else they need alive.
std::unique_ptr<Channel> make_host_send_channel(std::shared_ptr<ProcessLinks> links, int comm, int dest, int tag,
                                                std::shared_ptr<SendReaper> reaper, std::shared_ptr<void> owner);
std::unique_ptr<Channel> make_host_recv_channel(std::shared_ptr<ProcessLinks> links, int comm, int source, int tag,
                                                std::chrono::milliseconds timeout, std::shared_ptr<void> owner);

}  // namespace troupe::actors
