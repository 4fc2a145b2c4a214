//! Hooks for tests and benchmarks, on the tokens the vtable handed out. They
//! see the objects of this copy of the library only: a test that dlopens the
//! cdylib cannot reach that copy's objects through them, so tests that use
//! these drive the vtable statics of the linked crate
//! (`rccl_rust_gin::rma::ncclRmaPlugin_v16`). Nothing in RCCL calls them.

use super::plugin::{COLLS, CONTEXTS, MEMS};
use crate::emu::CounterSnapshot;
use crate::error::Result;
use std::ffi::c_void;

/// The emulated NIC's counters (doorbells, WQEBBs, CQEs, ...) of the NIC
/// behind a collComm; None on hardware.
pub fn emu_counters(coll_comm: *mut c_void) -> Result<Option<CounterSnapshot>> {
    Ok(COLLS.get(coll_comm, "collComm")?.nic.emu_counters())
}

/// The producer-side doorbell count of the queue to `peer` in `context`.
pub fn queue_doorbells(rma_ctx: *mut c_void, context: u32, peer: u32) -> Result<u64> {
    let ctx = CONTEXTS.get(rma_ctx, "rmaCtx")?;
    let q = ctx
        .queue(context, peer)
        .ok_or_else(|| crate::error::Error::InvalidArgument(format!("no queue for context {context}, peer {peer}")))?;
    Ok(q.doorbells())
}

/// Flips bits of this rank's copy of `rank`'s rkey of a registration, so
/// that the next request to it is refused by the peer's NIC (a remote access
/// error) — the fault the error path is tested with.
pub fn corrupt_peer_rkey(mhandle: *mut c_void, rank: u32, xor: u32) -> Result<()> {
    MEMS.get(mhandle, "mhandle")?.corrupt_rkey(rank, xor)
}
