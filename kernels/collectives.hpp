// Collective communication within one group of devices (a tensor-, data- or pipeline-parallel
// group), as the model and the runtime see it: a plain interface, so kernels/ and model/ never
// know which backend moves the bytes. Backends live in actors/ (actors/fabric/collective_groups.hpp):
// CPU devices of one process (threads, shared memory), CPU devices across processes (MPI),
// GPUs (NCCL).
//
// Every member calls the same collectives in the same order with the same shapes and dtypes,
// each from the thread that drives its device. On a GPU the operation is enqueued on the
// member's context stream (work enqueued afterwards sees the result); on a CPU device it has
// completed when the call returns (the call blocks until every member has arrived).
// Sums are taken in member order on every member, so all members hold bitwise identical results
// (CPU backends; NCCL's own order on GPUs).
//
//   comm.all_reduce(ctx, partial);                  // partial <- sum over members
//   comm.reduce_scatter(ctx, full, mine);           // mine [n] <- sum over members of full[r*n, (r+1)*n)
//   comm.all_gather(ctx, mine, full);               // full [size*n] <- concatenation of every member's mine
//
// All-to-all (expert-parallel token dispatch and combine): every member sends a part of its
// `in` to every member, itself included. Bytes move, nothing is added: any dtype. It blocks
// (CPU) or is enqueued (GPU) like the others; on a GPU the counts of all_to_all_v must be on
// the host before the call, hence exchange_counts' synchronization. (Backends outside
// actors/fabric/, such as test doubles, may leave the two calls out: they throw.)
//
//   comm.all_to_all(ctx, in, out);                  // in, out [size*n]: out part q <- member q's in part rank()
//   auto recv = exchange_counts(ctx, comm, send);   // recv[q] <- member q's send[rank()]
//   comm.all_to_all_v(ctx, tokens, send, routed, recv);  // rows: tokens [sum(send), H] -> routed [sum(recv), H]
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/context.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

enum class ReduceOp { sum, max };

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;  // this member's index in the group, 0 .. size()-1
  virtual int size() const = 0;

  // t <- reduction of every member's t (in place). Contiguous tensors of any float dtype.
  virtual void all_reduce(const Context& ctx, const Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  // in: [size() * n] elements (any shape with that numel); out: n elements: the sum over members
  // of in's rank()-th part. out may alias in's rank()-th part.
  virtual void reduce_scatter(const Context& ctx, const Tensor& in, const Tensor& out) = 0;
  // in: n elements; out: [size() * n]: member r's `in` at part r. in may alias out's rank()-th part.
  virtual void all_gather(const Context& ctx, const Tensor& in, const Tensor& out) = 0;
  // t <- member `root`'s t.
  virtual void broadcast(const Context& ctx, const Tensor& t, int root) = 0;
  // Equal splits. in, out: [size() * n] elements (any shapes with that numel), the same dtype;
  // member r's part r of in (elements [r*n, (r+1)*n)) goes to member r, and out's part q
  // receives member q's part rank(). out must not overlap in. Every member calls it with the
  // same n and dtype.
  virtual void all_to_all(const Context& ctx, const Tensor& in, const Tensor& out);
  // Variable splits, in rows: in [sum(send_counts), ...] and out [sum(recv_counts), ...] hold
  // rows of the same width (the product of the dimensions after the first) and dtype on every
  // member. The first send_counts[0] rows of in go to member 0, the next send_counts[1] to
  // member 1, ...; out holds recv_counts[0] rows from member 0, then recv_counts[1] rows from
  // member 1, ... Both vectors have size() entries (zeros allowed) and must agree across the
  // group: recv_counts[q] on member r equals send_counts[r] on member q. The receiver cannot
  // know them otherwise, so exchange them first (exchange_counts below). CPU groups check that
  // both ends of every pair agree (an error on both); NCCL cannot, and counts that disagree
  // hang or corrupt the transfer. out must not overlap in. Every member calls it, with the
  // same row width and dtype, even one with nothing to send or receive.
  virtual void all_to_all_v(const Context& ctx, const Tensor& in, const std::vector<int64_t>& send_counts,
                            const Tensor& out, const std::vector<int64_t>& recv_counts);
  // A failed run's teardown: every member waiting in a collective of this group, now or later,
  // throws troupe::Error instead of waiting for members that will never come. Any thread.
  virtual void abort() {}
};

// all_to_all and all_reduce of small host tensors (counts, statistics), whatever ctx's device:
// on a GPU through device copies on ctx's stream, then a wait for that stream. They return once
// `out` (`t`) holds the result on the host. Every member calls them, as the collectives.
void host_all_to_all(const Context& ctx, Collectives& comm, const Tensor& in, const Tensor& out);
void host_all_reduce(const Context& ctx, Collectives& comm, const Tensor& t, ReduceOp op = ReduceOp::sum);

// The receive counts of an all_to_all_v: returns recv with recv[q] = member q's
// send_counts[rank()] (send_counts: size() entries, known on this member only). Every member
// calls it; it is an all_to_all of size() i64 values on ctx's device and returns once they are
// on the host (on a GPU it waits for ctx's stream: a host synchronization).
std::vector<int64_t> exchange_counts(const Context& ctx, Collectives& comm, const std::vector<int64_t>& send_counts);

}  // namespace troupe
