// extern "C" entry points of the mlx5 data path, below the GIN operations:
// used by the RMA plugin's emulated provider, the benchmarks and the tests.
// Every function exists in the GPU build and in the host (x86-64) build.
#pragma once

#include "rust_gin/abi/mlx5_queue.h"
#include "rust_gin/port/port.h"

// Posts n requests in order and rings once per batch. Returns RUST_GIN_*;
// RUST_GIN_ERR_INVALID, with nothing posted, if any request is one that
// request_valid (mlx5/wqe.h) refuses. Lanes of a wave that post to one
// queue take turns, in lane order.
RG_EXTERN_C RG_DEV int rust_gin_mlx5_post(const rust_gin_mlx5_sq* sq, const rust_gin_mlx5_request* reqs, uint32_t n);
// Posts and publishes without ringing: a later rust_gin_mlx5_ring (or any
// ringing post) sends them. The aggregation path.
RG_EXTERN_C RG_DEV int rust_gin_mlx5_post_deferred(const rust_gin_mlx5_sq* sq, const rust_gin_mlx5_request* reqs,
                                                   uint32_t n);
RG_EXTERN_C RG_DEV void rust_gin_mlx5_ring(const rust_gin_mlx5_sq* sq);
// Waits until everything published on the queue has completed.
RG_EXTERN_C RG_DEV int rust_gin_mlx5_quiet(const rust_gin_mlx5_sq* sq);
// Consumes the CQEs present; RUST_GIN_ERR_CQE if one was an error.
RG_EXTERN_C RG_DEV int rust_gin_mlx5_poll(const rust_gin_mlx5_sq* sq);
// Writes the 64-byte WQE for one request (wire-format tests); writes nothing
// and returns RUST_GIN_ERR_INVALID for a request request_valid refuses.
RG_EXTERN_C RG_DEV int rust_gin_mlx5_build_wqe(const rust_gin_mlx5_request* req, uint16_t index, uint32_t qpn,
                                                int cq_update, void* out64);
