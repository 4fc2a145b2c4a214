//! The emulated NIC: executes real mlx5 work-queue entries in host memory,
//! byte for byte as a ConnectX reads them, with errors, completions and
//! doorbells. It exists for tests, benchmarks and bring-up without hardware,
//! and is only ever chosen explicitly (RCCL_RUST_GIN_PROVIDER=emu).
//!
//! - [`doorbell`]: the host doorbell a QP's descriptor names, through which
//!   the device code's host build rings this NIC (and no other).
//! - [`nic`]: one NIC (QPs, CQs, MRs), stepped deterministically or by a
//!   polling thread.
//! - [`fabric`], [`shm`], [`tcp`], [`packet`]: the wire between NICs, in one
//!   process, across processes, or across hosts; [`inbox`]: the NICs of one
//!   process and their inboxes (the in-process wire, and the TCP wire's
//!   local end).
//! - [`family_queue`]: a bnxt_re or ionic queue (nic/family.rs executes
//!   those formats with the same requester and responder).
//! - [`wqe`]: decoding a WQE from its bytes; [`mr`]: keys and access checks;
//!   [`guarded`]: reading and writing registered memory that may have been
//!   unmapped, as an error instead of a fault.
//!   What it counts is the provider-neutral [`crate::nic::counters`].

pub mod doorbell;
pub mod fabric;
pub mod family_queue;
pub mod guarded;
pub mod inbox;
pub mod mr;
pub mod nic;
pub mod packet;
pub mod queue;
pub mod shm;
pub mod tcp;
pub mod wqe;

pub use crate::nic::CounterSnapshot;
pub use doorbell::HostDoorbell;
pub use fabric::{Fabric, WeakFabric};
pub use mr::{Access, Region};
pub use nic::{CqSpec, EmuNic, FamilyCqSpec, FamilyQpSpec, NicConfig, NicError, QpSpec, QpState, QueueFormat, TraceEntry};
pub use family_queue::EmuFamilyQp;
pub use queue::{EmuQp, UarPage};
