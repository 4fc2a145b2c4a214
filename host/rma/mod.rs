//! The RMA plugin: what RCCL's proxy GIN (GIN type 2, src/gin/gin_host_proxy.cc)
//! calls to move data, on the same NIC code as the device-initiated backend,
//! so the two paths can be compared on one NIC. Installed as
//! `librccl-rma-rust.so` and selected with `NCCL_RMA_PLUGIN=rust`
//! (docs/rma-plugin.md).
//!
//! - [`vtable`]: the exported `ncclRmaPlugin_v17`, `_v16`, `_v15`, `_v14` and `_v13`,
//!   each in its own layout ([`crate::ffi::rma`]), all on one implementation;
//! - [`plugin`]: that implementation, one function per callback;
//! - [`context`]: queue pairs per (context, peer), posting through the device
//!   library's host build ([`crate::mlx5::sq::SendQueue`]), doorbell
//!   aggregation, completions;
//! - [`memory`]: symmetric registrations (GIN windows seen from the host);
//!
//! Instances, connection setup, handles, the out-of-band and queue-pair
//! meshes and the slots the two vtables fill alike are shared with the GIN
//! backend ([`crate::session`]); registration is the GIN window
//! ([`crate::gin::window`]). Objects travel as the same kind of opaque token.

pub mod context;
pub mod memory;
pub mod plugin;
pub mod vtable;

pub use vtable::{ncclRmaPlugin_v13, ncclRmaPlugin_v14, ncclRmaPlugin_v15, ncclRmaPlugin_v16, ncclRmaPlugin_v17};

/// The smallest queue depth (WQEBBs) of an RMA queue pair: RCCL's proxy keeps
/// up to NCCL_NET_MAX_REQUESTS * maxRecvs requests in flight per peer and
/// context, and a put with a signal takes two WQEBBs.
pub const MIN_QUEUE_DEPTH: u32 = 2 * crate::ffi::rma::NCCL_NET_MAX_REQUESTS as u32 * plugin::MAX_RECVS as u32;
