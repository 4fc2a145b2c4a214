//! The doorbell of host-side posting on a ConnectX (the RMA plugin's proxy
//! path, host tools): a `rust_gin_host_doorbell` whose ring is a real MMIO
//! store to the UAR register this provider mapped for the CPU, in the order
//! rdma-core's mlx5 provider uses (providers/mlx5/qp.c `post_send_db`,
//! util/udma_barrier.h): the WQEs and the doorbell record reach memory before
//! the doorbell, the doorbell is one 64-bit store, and a write-combining
//! flush follows it (the register may sit in a BlueFlame page mapped WC).
//! GPU kernels never use it: they store to the GPU mapping of the register.

use crate::abi::rust_gin_host_doorbell;
use std::ffi::c_void;
use std::sync::atomic::{fence, Ordering};

/// # Safety
/// `reg` is a doorbell register this provider mapped for the CPU, which the
/// queue's owner keeps mapped while the queue can be rung.
unsafe extern "C" fn mmio_ring(_ctx: *const c_void, reg: *mut u64, value: u64) {
    // udma_to_device_barrier + mmio_wc_start: everything stored before (WQEs,
    // doorbell record) is globally visible before the doorbell.
    fence(Ordering::SeqCst);
    // SAFETY: per the function contract; aligned, so one 64-bit store
    // (mmio_write64_be: `value` is already in wire order).
    unsafe { std::ptr::write_volatile(reg, value) };
    wc_flush();
}

/// mmio_flush_writes: drain the write-combining buffer now rather than
/// whenever the CPU chooses to.
fn wc_flush() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no preconditions.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    fence(Ordering::SeqCst);
}

struct Port(rust_gin_host_doorbell);
// SAFETY: immutable, with a null context.
unsafe impl Sync for Port {}

static HOST_MMIO: Port = Port(rust_gin_host_doorbell { ring: Some(mmio_ring), record: None, ctx: std::ptr::null() });

/// For `rust_gin_mlx5_sq::host_doorbell` of a queue posted from the host.
pub fn host_mmio() -> u64 {
    &HOST_MMIO.0 as *const rust_gin_host_doorbell as u64
}
