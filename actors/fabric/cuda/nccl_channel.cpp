#include "actors/fabric/cuda/nccl_channel.hpp"

#include "actors/fabric/cuda/cuda_helpers.hpp"
#include "actors/fabric/cuda/cuda_services.hpp"

namespace troupe::actors::cuda {

using troupe::cuda::stream_of;

namespace {

// Two GPUs: a two-rank communicator of its own (rank 0 sends, rank 1 receives), so the
// order of one channel's transfers never interleaves with another's, and a stream per end
// so a send waiting for its receiver never holds up compute or other channels. Both ends
// live here, or one (the other end's process holds the other rank).
// Both NCCL kernels are launched only once the producing work has finished (the send stream
// and, across devices, the receive stream wait for an event recorded after it): a NCCL
// kernel spins on its SMs until its peer arrives, and a receive posted when the message
// arrives (the sender runs a few ops ahead of its GPU) would spin for whole ops, taking SMs
// from the receiver's compute. Across processes the sender's event cannot travel: there the
// receive is launched when the parcel's notice arrives, and the stage actor sends that notice
// only once the producing op has finished on its device (actors/train/stage_actor.cpp).
class NcclChannel final : public Channel {
 public:
  NcclChannel(int src, int dst, bool timing) : src_(src), dst_(dst), timing_(timing) {
    const int devices[2] = {src, dst};
    TROUPE_NCCL_CHECK(ncclCommInitAll(comms_, 2, devices), "channel cuda:", src, " -> cuda:", dst);
    on_device(src, [&] { connect_pair(comms_, src, dst, false); });
    on_device(src, [&] { send_stream_ = make_transfer_stream(); });
    on_device(dst, [&] { recv_stream_ = make_transfer_stream(); });
    keep_pool_memory(src);
    keep_pool_memory(dst);
  }
  // One end; the device of the end elsewhere is -1.
  NcclChannel(bool sending, int device, const ncclUniqueId& id, bool timing)
      : src_(sending ? device : -1), dst_(sending ? -1 : device), timing_(timing), cross_process_(true) {
    const int rank = sending ? 0 : 1;
    on_device(device, [&] {
      TROUPE_NCCL_CHECK(ncclCommInitRank(&comms_[rank], 2, id, rank), "channel between processes, ",
                        sending ? "sender" : "receiver", " on cuda:", device);
      (sending ? send_stream_ : recv_stream_) = make_transfer_stream();
    });
    connect_pair_end(comms_[rank], rank, device);
    keep_pool_memory(device);
  }
  ~NcclChannel() override {
    if (!aborted_) {
      if (send_stream_) cudaStreamSynchronize(send_stream_);
      if (recv_stream_) cudaStreamSynchronize(recv_stream_);
      for (ncclComm_t c : comms_)
        if (c) ncclCommDestroy(c);
    }
    if (send_stream_) cudaStreamDestroy(send_stream_);
    if (recv_stream_) cudaStreamDestroy(recv_stream_);
  }
  Parcel send(const Context& ctx, const Tensor& t) override {
    TROUPE_CHECK(comms_[0], "NcclChannel: send() on the receiving end");
    TROUPE_CHECK(ctx.device_index() == src_, "NcclChannel: send from cuda:", ctx.device_index(),
                 ", expected cuda:", src_);
    Parcel p;
    p.ready = make_event(false);  // the tensor is complete: both ends may start
    TROUPE_CUDA_CHECK(cudaEventRecord(event_of(p.ready), stream_of(ctx)));
    TROUPE_CUDA_CHECK(cudaStreamWaitEvent(send_stream_, event_of(p.ready), 0));
    TROUPE_NCCL_CHECK(ncclSend(t.data(), t.nbytes(), ncclInt8, 1, comms_[0], send_stream_), "channel send of ",
                      t.str());
    TROUPE_CUDA_CHECK(cudaFreeAsync(t.data(), send_stream_));  // after the send, in stream order
    p.shape = t.shape();
    p.dtype = t.dtype();
    return p;
  }
  Inbound receive(const Context& ctx, Parcel& p) override {
    TROUPE_CHECK(comms_[1], "NcclChannel: receive() on the sending end");
    TROUPE_CHECK(ctx.device_index() == dst_, "NcclChannel: receive on cuda:", ctx.device_index(),
                 ", expected cuda:", dst_);
    TROUPE_CHECK(p.ready || cross_process_, "NcclChannel: a parcel without its ready event");
    const size_t bytes = size_t(p.bytes());
    void* data = nullptr;
    TROUPE_CUDA_CHECK(cudaMallocAsync(&data, bytes, recv_stream_));
    if (p.ready) TROUPE_CUDA_CHECK(cudaStreamWaitEvent(recv_stream_, event_of(p.ready), 0));  // the sender's device
    p.ready.reset();
    Inbound in;
    std::shared_ptr<TransferEvents> timing;
    if (timing_) {
      timing = std::make_shared<TransferEvents>();
      timing->start = make_event(true);
      TROUPE_CUDA_CHECK(cudaEventRecord(event_of(timing->start), recv_stream_));
    }
    TROUPE_NCCL_CHECK(ncclRecv(data, bytes, ncclInt8, 0, comms_[1], recv_stream_), "channel receive of ",
                      dtype_name(p.dtype), shape_str(p.shape));
    in.ready = make_event(timing_);
    TROUPE_CUDA_CHECK(cudaEventRecord(event_of(in.ready), recv_stream_));
    if (timing) {
      timing->end = in.ready;
      in.timing = std::move(timing);
    }
    in.tensor = Tensor::wrap(data, p.dtype, p.shape, DeviceKind::cuda, dst_);
    return in;
  }
  void abort() override {
    if (aborted_) return;
    aborted_ = true;
    for (ncclComm_t c : comms_)
      if (c) ncclCommAbort(c);
  }

 private:
  int src_, dst_;
  bool timing_;
  bool cross_process_ = false;
  ncclComm_t comms_[2] = {nullptr, nullptr};  // [0]: the sender's, [1]: the receiver's (null elsewhere)
  cudaStream_t send_stream_ = nullptr, recv_stream_ = nullptr;
  bool aborted_ = false;
};

}  // namespace

std::unique_ptr<Channel> make_nccl_channel(int src, int dst, bool timing) {
  return std::make_unique<NcclChannel>(src, dst, timing);
}

std::unique_ptr<Channel> make_nccl_channel_end(bool sending, int device, const ncclUniqueId& id, bool timing) {
  return std::make_unique<NcclChannel>(sending, device, id, timing);
}

std::unique_ptr<Channel> make_process_channel(bool sending, const Context& ctx, const std::vector<uint8_t>& id,
                                              bool timing) {
  TROUPE_CHECK(ctx.is_cuda(), "make_process_channel: a CPU context");
  return make_nccl_channel_end(sending, ctx.device_index(), nccl_id_from_bytes(id), timing);
}

}  // namespace troupe::actors::cuda
