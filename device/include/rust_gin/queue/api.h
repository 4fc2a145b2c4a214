// extern "C" entry points of the bnxt_re and ionic data paths: the same
// producer and completion protocol as rust_gin_mlx5_post/_poll (mlx5/api.h),
// instantiated with the bnxt_re and ionic family policies (bnxt/family.h,
// ionic/family.h) over the family-neutral descriptor (abi/nic_queue.h).
// They exist in the GPU build (ISA checks: each family's doorbell) and in
// the host build (tests/device_family_host.rs checks their bytes against the
// Rust twins; tests/emu_families.rs runs them against the emulated NIC).
// The Rust side's declarations are bindgen's (host/device.rs).
#pragma once

#include "rust_gin/abi/mlx5_queue.h"
#include "rust_gin/abi/nic_queue.h"
#include "rust_gin/port/port.h"

// Posts n requests in order and rings once per batch, as rust_gin_mlx5_post;
// RUST_GIN_ERR_INVALID, with nothing posted, for a request the family cannot
// encode (NOP, DUMP, inline other than a WRITE of 1..8 bytes).
RG_EXTERN_C RG_DEV int rust_gin_bnxt_post(const rust_gin_nic_sq* sq, const rust_gin_mlx5_request* reqs, uint32_t n);
RG_EXTERN_C RG_DEV int rust_gin_ionic_post(const rust_gin_nic_sq* sq, const rust_gin_mlx5_request* reqs, uint32_t n);
// Posts and publishes without ringing, as rust_gin_mlx5_post_deferred; a
// later _ring (or a ringing post) sends them. The RMA plugin's aggregation.
RG_EXTERN_C RG_DEV int rust_gin_bnxt_post_deferred(const rust_gin_nic_sq* sq, const rust_gin_mlx5_request* reqs,
                                                   uint32_t n);
RG_EXTERN_C RG_DEV int rust_gin_ionic_post_deferred(const rust_gin_nic_sq* sq, const rust_gin_mlx5_request* reqs,
                                                    uint32_t n);
// Rings for everything published, as rust_gin_mlx5_ring.
RG_EXTERN_C RG_DEV void rust_gin_bnxt_ring(const rust_gin_nic_sq* sq);
RG_EXTERN_C RG_DEV void rust_gin_ionic_ring(const rust_gin_nic_sq* sq);
// Consumes the CQEs present and rings the CQ doorbell; RUST_GIN_ERR_CQE if
// one was an error.
RG_EXTERN_C RG_DEV int rust_gin_bnxt_poll(const rust_gin_nic_sq* sq);
RG_EXTERN_C RG_DEV int rust_gin_ionic_poll(const rust_gin_nic_sq* sq);
