//! The device library's x86-64 build, linked into this crate by build.rs.
//! These are the very functions a kernel calls, compiled for the CPU; the
//! portability header routes their doorbell and doorbell-record stores into
//! the emulated NIC (see [`crate::emu::bus`]).
//!
//! All functions take pointers to device-visible memory (descriptors, queue
//! state, WQE and CQE rings) that must stay valid for the call; callers wrap
//! them in safe types.

use crate::abi::{rust_gin_mlx5_request, rust_gin_mlx5_sq};

extern "C" {
    pub fn rust_gin_mlx5_post(sq: *const rust_gin_mlx5_sq, reqs: *const rust_gin_mlx5_request, n: u32) -> i32;
    pub fn rust_gin_mlx5_post_deferred(
        sq: *const rust_gin_mlx5_sq,
        reqs: *const rust_gin_mlx5_request,
        n: u32,
    ) -> i32;
    pub fn rust_gin_mlx5_ring(sq: *const rust_gin_mlx5_sq);
    pub fn rust_gin_mlx5_quiet(sq: *const rust_gin_mlx5_sq) -> i32;
    pub fn rust_gin_mlx5_poll(sq: *const rust_gin_mlx5_sq) -> i32;
    pub fn rust_gin_mlx5_build_wqe(
        req: *const rust_gin_mlx5_request,
        index: u16,
        qpn: u32,
        cq_update: i32,
        out64: *mut u8,
    );
}

/// Builds the 64-byte WQE the device code writes for `req`.
pub fn build_wqe(req: &rust_gin_mlx5_request, index: u16, qpn: u32, cq_update: bool) -> [u8; 64] {
    let mut out = [0u8; 64];
    // SAFETY: build_wqe reads one request and writes exactly 64 bytes to out.
    unsafe { rust_gin_mlx5_build_wqe(req, index, qpn, cq_update as i32, out.as_mut_ptr()) };
    out
}
