//! The emulated NIC's host doorbell (device/include/rust_gin/abi/host_doorbell.h):
//! what the device library's host build calls to ring a queue of an emulated
//! NIC. A QP's descriptor names its NIC's port, so a doorbell reaches the NIC
//! that owns the queue; the NIC then checks that the address is that QP's
//! doorbell register, as hardware routes a store by its UAR page.

use crate::abi::rust_gin_host_doorbell;
use std::ffi::c_void;
use std::sync::Arc;

/// What hears the host build's stores to one NIC.
pub(crate) trait DoorbellSink: Send + Sync {
    /// An 8-byte store to a doorbell register.
    fn doorbell(&self, addr: usize, value: u64);
    /// A doorbell-record word was stored (already in memory).
    fn record(&self, addr: usize, value: u32);
}

/// One NIC's port; its address goes into descriptors and must outlive them
/// (the QP owns it).
pub struct HostDoorbell {
    port: Box<rust_gin_host_doorbell>,
    _sink: Box<Arc<dyn DoorbellSink>>,
}

// SAFETY: the port is immutable after construction; its ctx points at the
// boxed Arc, which is Send + Sync.
unsafe impl Send for HostDoorbell {}
// SAFETY: as above.
unsafe impl Sync for HostDoorbell {}

impl HostDoorbell {
    /// `sink` holds nothing of the NIC's but what doorbells need (no cycle).
    pub(crate) fn new(sink: Arc<dyn DoorbellSink>) -> HostDoorbell {
        let sink = Box::new(sink);
        let port = Box::new(rust_gin_host_doorbell {
            ring: Some(ring),
            record: Some(record),
            ctx: &*sink as *const Arc<dyn DoorbellSink> as *const c_void,
        });
        HostDoorbell { port, _sink: sink }
    }

    /// For `rust_gin_mlx5_sq::host_doorbell`.
    pub fn addr(&self) -> u64 {
        &*self.port as *const rust_gin_host_doorbell as u64
    }
}

/// # Safety
/// `ctx` is the boxed Arc of a live [`HostDoorbell`] (the descriptor's owner
/// keeps it alive while the queue can be rung).
unsafe extern "C" fn ring(ctx: *const c_void, reg: *mut u64, value: u64) {
    // SAFETY: per the function contract.
    let sink = unsafe { &*(ctx as *const Arc<dyn DoorbellSink>) };
    deliver("doorbell", || sink.doorbell(reg as usize, value));
}

/// # Safety
/// As for [`ring`].
unsafe extern "C" fn record(ctx: *const c_void, dbr: *mut u32, value: u32) {
    // SAFETY: per the function contract.
    let sink = unsafe { &*(ctx as *const Arc<dyn DoorbellSink>) };
    deliver("doorbell record", || sink.record(dbr as usize, value));
}

/// Called from C++: a panic must not unwind through it.
fn deliver(what: &str, f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        tracing::error!("emulated NIC: panic while handling a {what}; the store is lost");
    }
}
