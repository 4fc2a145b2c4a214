// Kernels that wrap each device entry point, so the code object carries every
// entry point's instruction stream and register counts for the ISA checks
// (tests/isa_checks.rs). Naming: rust_gin_isa_db_<entry> for entry points
// that may ring a doorbell, rust_gin_isa_nodb_<entry> for the others. The
// checks fail if an entry point declared in the API headers has no kernel here.
#include "rust_gin_device.hip"

#if defined(RUST_GIN_ISA_FAULT_SCRATCH)
// Planted fault for the ISA checks' own test: a dynamically indexed local
// array cannot live in registers and goes to scratch.
RG_EXTERN_C RG_GLOBAL void rust_gin_isa_nodb_scratch_fault(uint64_t* out, uint32_t i, uint32_t j) {
  volatile uint64_t tmp[64];
  for (uint32_t k = 0; k < 64; ++k) tmp[k] = out[k];
  tmp[i & 63] = 1;
  out[0] = tmp[j & 63];
}
#endif

#define RG_ISA_KERNEL(kind, entry, params, args) \
  RG_EXTERN_C RG_GLOBAL void rust_gin_isa_##kind##_##entry params { entry args; }

RG_ISA_KERNEL(db, rust_gin_mlx5_post, (const rust_gin_mlx5_sq* sq, const rust_gin_mlx5_request* r, uint32_t n),
              (sq, r, n))
RG_ISA_KERNEL(nodb, rust_gin_mlx5_post_deferred,
              (const rust_gin_mlx5_sq* sq, const rust_gin_mlx5_request* r, uint32_t n), (sq, r, n))
RG_ISA_KERNEL(db, rust_gin_mlx5_ring, (const rust_gin_mlx5_sq* sq), (sq))
RG_ISA_KERNEL(db, rust_gin_mlx5_quiet, (const rust_gin_mlx5_sq* sq), (sq))
RG_ISA_KERNEL(nodb, rust_gin_mlx5_poll, (const rust_gin_mlx5_sq* sq), (sq))
RG_ISA_KERNEL(nodb, rust_gin_mlx5_build_wqe,
              (const rust_gin_mlx5_request* r, uint16_t i, uint32_t q, int c, void* o), (r, i, q, c, o))
