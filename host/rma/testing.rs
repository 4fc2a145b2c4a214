//! Hooks for tests and benchmarks, on the tokens the vtable handed out. They
//! see the objects of this copy of the library only: a test that dlopens the
//! cdylib cannot reach that copy's objects through them, so tests that use
//! these drive the vtable statics of the linked crate
//! (`rccl_rust_gin::rma::ncclRmaPlugin_v16`). Nothing in RCCL calls them.

use super::plugin::MEMS;
use crate::error::Result;
use std::ffi::c_void;

/// Flips bits of this rank's copy of `rank`'s rkey of a registration, so
/// that the next request to it is refused by the peer's NIC (a remote access
/// error) — the fault the error path is tested with.
pub fn corrupt_peer_rkey(mhandle: *mut c_void, rank: u32, xor: u32) -> Result<()> {
    MEMS.get(mhandle, "mhandle")?.corrupt_rkey(rank, xor)
}
