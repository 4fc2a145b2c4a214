// The mlx5 completion queue: the family-neutral poller (queue/completion_queue.h)
// over the mlx5 policy (mlx5/family.h: owner bit, wqe_counter, error CQE
// syndromes, the CQ doorbell record).
#pragma once

#include "rust_gin/mlx5/family.h"
#include "rust_gin/queue/completion_queue.h"

namespace rust_gin {
namespace mlx5 {

typedef queue::CompletionQueue<Family> CompletionQueue;

}  // namespace mlx5
}  // namespace rust_gin
