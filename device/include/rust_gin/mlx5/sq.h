// The mlx5 send queue: the family-neutral producer (queue/send_queue.h) over
// the mlx5 policy (mlx5/family.h). The names below are the ones the GIN
// layer, the mlx5 entry points and the hazard rebuilds use.
#pragma once

#include "rust_gin/mlx5/cq.h"
#include "rust_gin/mlx5/family.h"
#include "rust_gin/queue/send_queue.h"

namespace rust_gin {
namespace mlx5 {

using queue::RingPolicy;
typedef queue::SendQueue<Family> SendQueue;
// A list post builds each WQE by shape (SendQueue::post): the detection
// must see mlx5's write template, or posting falls back to selects unseen.
static_assert(queue::HasShapePolicy<Family>::value, "mlx5::Family::write takes a ShapePolicy");

}  // namespace mlx5
}  // namespace rust_gin
