/* Every layout shared by the host crate and the device library. bindgen reads
 * this file (build/bindings.rs); nothing here may depend on C++. */
#ifndef RUST_GIN_ABI_H
#define RUST_GIN_ABI_H

#include "rust_gin/abi/error.h"
#include "rust_gin/abi/gin.h"
#include "rust_gin/abi/host_doorbell.h"
#include "rust_gin/abi/lockstep.h"
#include "rust_gin/abi/mlx5_queue.h"
#include "rust_gin/abi/nic_queue.h"
#include "rust_gin/abi/rccl_caller.h"

#endif
