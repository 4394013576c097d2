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
#pragma once

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
  // A failed run's teardown: every member waiting in a collective of this group, now or later,
  // throws troupe::Error instead of waiting for members that will never come. Any thread.
  virtual void abort() {}
};

}  // namespace troupe
