// The check macro for MPI calls (internal to actors/; only sources that talk MPI include it).
// Our communicators return errors (MPI_ERRORS_RETURN) instead of aborting the job, so a failed
// call becomes a troupe::Error naming the call and what it was for.
//
//   TROUPE_MPI_CHECK(MPI_Barrier(comm), "fabric barrier");
#pragma once

#include <mpi.h>

#include <string>

#include "base/check.hpp"

namespace troupe::actors {
[[noreturn]] void fail_mpi(int code, const char* expr, const char* file, int line, const std::string& hint);
}  // namespace troupe::actors

#define TROUPE_MPI_CHECK(call, ...)                                                                       \
  do {                                                                                                    \
    const int troupe_mpi_ = (call);                                                                       \
    if (troupe_mpi_ != MPI_SUCCESS)                                                                       \
      ::troupe::actors::fail_mpi(troupe_mpi_, #call, __FILE__, __LINE__, ::troupe::str_cat(__VA_ARGS__)); \
  } while (0)
