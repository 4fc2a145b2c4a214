//! The emulated NIC: executes real mlx5 work-queue entries in host memory,
//! byte for byte as a ConnectX reads them, with errors, completions and
//! doorbells. It exists for tests, benchmarks and bring-up without hardware,
//! and is only ever chosen explicitly (RCCL_RUST_GIN_PROVIDER=emu).
//!
//! - [`bus`]: the doorbell and doorbell-record stores of the device code's
//!   host build arrive here.
//! - [`nic`]: one NIC (QPs, CQs, MRs), stepped deterministically or by a
//!   polling thread.
//! - [`fabric`], [`shm`], [`packet`]: the wire between NICs, in one process
//!   or across processes.
//! - [`wqe`]: decoding a WQE from its bytes; [`mr`]: keys and access checks;
//!   [`counters`]: what crossed the bus and the wire.

pub mod bus;
pub mod counters;
pub mod fabric;
pub mod mr;
pub mod nic;
pub mod packet;
pub mod queue;
pub mod shm;
pub mod wqe;

pub use counters::CounterSnapshot;
pub use fabric::Fabric;
pub use mr::{Access, Region};
pub use nic::{CqSpec, EmuNic, NicConfig, NicError, QpSpec, QpState, TraceEntry};
pub use queue::EmuQp;
