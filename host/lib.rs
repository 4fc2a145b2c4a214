//! rust-gin: a device-initiated GIN backend for RCCL.
//!
//! The host half of the project: RCCL's GIN host vtable, queue pairs,
//! completion queues and memory registrations on the NIC, and everything a
//! kernel needs placed in GPU-visible memory. The device half is the HIP
//! library under device/; its x86-64 build is linked into this crate
//! (see [`device`]) so that tests and benchmarks run the code a kernel runs.
//!
//! Map of the crate:
//! - [`gin`]: RCCL's GIN v14 vtable and the objects behind it.
//! - [`provider`]: NICs behind one interface (mlx5 hardware, the emulated NIC).
//! - [`nic`]: what the emulated NIC and the providers both say about a NIC (family,
//!   access rights, resources, counters), below both.
//! - [`rma`]: the RMA plugin RCCL's proxy GIN drives (ncclRmaPlugin_v13..v16).
//! - [`session`]: what both plugins share below their vtables: instances, listen and
//!   connect, properties, the queue-pair mesh, the tokens RCCL holds.
//! - [`emu`]: the emulated NIC that executes real mlx5 WQEs in host memory.
//! - [`mlx5`]: wire formats, queue memory, host-side posting.
//! - [`bnxt`], [`ionic`]: the wire formats of Broadcom Thor2 and AMD Pollara.
//! - [`abi`]: layouts shared with the device library (generated from C headers).
//! - [`ffi`]: C ABI mirrors of RCCL's plugin structs.
//! - [`device`]: the host build of the device library.
//! - [`selftest`]: the loopback self-test init runs before it says GIN works here.
//! - [`gpu`]: GPU-visible memory; [`mem`]: host DMA buffers; [`mapping`]: whether a
//!   range handed to registration is mapped read-write memory.
//! - [`oob`]: connection setup between ranks; [`config`]: the RCCL_RUST_GIN_* knobs;
//!   [`log`]: RCCL's logger; [`error`]: errors and their ncclResult_t.
//! - [`sys`]: bindings to rdma-core (mlx5dv) and its oracle facts.

pub mod abi;
pub mod bnxt;
pub mod config;
pub mod device;
#[cfg(feature = "emu")]
pub mod emu;
pub mod error;
pub mod ffi;
pub mod gin;
pub mod gpu;
pub mod ionic;
pub mod log;
pub mod mapping;
pub mod mem;
pub mod mlx5;
pub mod nic;
pub mod oob;
pub mod park;
pub mod preflight;
pub mod provider;
pub mod rma;
pub mod selftest;
pub mod session;
pub mod sys;
