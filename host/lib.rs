//! rust-gin: a device-initiated GIN backend for RCCL.
//!
//! The host half of the project: RCCL's GIN host vtable, queue pairs,
//! completion queues and memory registrations on the NIC, and everything a
//! kernel needs placed in GPU-visible memory. The device half is the HIP
//! library under device/; its x86-64 build is linked into this crate
//! (see [`device`]) so that tests and benchmarks run the code a kernel runs.
//!
//! Map of the crate:
//! - [`abi`]: layouts shared with the device library (generated from C headers).
//! - [`mlx5`]: mlx5 wire formats, the Rust twin of device/include/rust_gin/mlx5/wire.h.
//! - [`emu`]: the emulated NIC that executes real mlx5 WQEs in host memory.
//! - [`device`]: the host build of the device library.
//! - [`sys`]: bindings to rdma-core (mlx5dv) and its oracle facts.

pub mod abi;
pub mod device;
pub mod emu;
pub mod gpu;
pub mod mem;
pub mod mlx5;
pub mod sys;
