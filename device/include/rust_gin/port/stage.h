// Stage hooks, for gin-smoke (smoke/gin_smoke.hip, docs/bring-up.md stage 2):
// built with RUST_GIN_STAGE_HOOKS defined, the send and completion queues
// call rust_gin_stage(stage, queue state, index) at each step of a post,
// which the program defines (it records wall_clock64). Without it (the
// default, and every artefact RCCL links) a hook is nothing at all: the
// default build's bitcode and code objects are byte for byte the same.
#pragma once

#include <stdint.h>

#include "rust_gin/port/port.h"

enum {
  RUST_GIN_STAGE_RESERVED = 0,  // a ticket range handed out (index: its base)
  RUST_GIN_STAGE_PUBLISHED = 1, // WQEs written and published (index: the new `ready`)
  RUST_GIN_STAGE_DOORBELL = 2,  // the doorbell rung (index: the producer index rung)
  RUST_GIN_STAGE_CQE = 3,       // CQEs consumed (index: WQEBBs now known complete)
};

#if defined(RUST_GIN_STAGE_HOOKS)
RG_EXTERN_C RG_DEV void rust_gin_stage(uint32_t stage, const void* queue_state, uint64_t index);
#define RG_STAGE(stage, state, index) rust_gin_stage((stage), (state), (index))
#else
#define RG_STAGE(stage, state, index) ((void)0)
#endif
