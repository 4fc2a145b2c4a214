/* Running a wave in lockstep on the CPU (host build only): the entry point
 * that tests call, and what it reports. The execution model is described in
 * docs/architecture.md ("The lockstep wave"); the runtime is
 * device/src/host_only/lockstep.cpp, the hooks it serves are in port/wave.h. */
#ifndef RUST_GIN_ABI_LOCKSTEP_H
#define RUST_GIN_ABI_LOCKSTEP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What one lane runs: its whole program for this wave. */
typedef void (*rust_gin_ls_lane_fn)(void* ctx, uint32_t lane);

typedef struct rust_gin_ls_stats {
  uint64_t steps;           /* wave-wide primitives executed (ballot, readlane, barrier, region) */
  uint64_t spin_loops;      /* spin loops entered by a group of lanes */
  uint64_t spin_iterations; /* iterations of those loops, all lanes at once */
  uint64_t max_spin_iterations; /* the longest single loop */
  uint64_t model_errors;    /* code the model cannot run as a wave would (see the message) */
} rust_gin_ls_stats;

/* Runs fn(ctx, lane) for every lane set in `exec` as one wave, in lockstep,
 * on the calling thread; returns when every lane has returned. Several
 * threads may each run a wave at once. `msg` (may be NULL) receives the first
 * model errors as text, NUL-terminated. Returns the number of model errors:
 * non-zero means the device code did something a wave cannot do as written
 * (wave primitives reached by lanes at different places, a readlane from an
 * inactive lane, a primitive inside a spin step). A lane that never leaves a
 * spin loop is not detected here: the device code's own bounded waits end it
 * and report what they waited for. */
uint64_t rust_gin_lockstep_run(uint64_t exec, rust_gin_ls_lane_fn fn, void* ctx, rust_gin_ls_stats* stats,
                               char* msg, size_t msg_cap);

#ifdef __cplusplus
}
#endif

#endif
