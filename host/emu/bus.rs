//! The emulated PCIe bus between the device code's host build and the
//! emulated NIC. port.h routes the two kinds of store that reach a real NIC,
//! the 8-byte doorbell (MMIO) and the 32-bit doorbell record (DMA-read host
//! memory), through these hooks; the NIC registers the address ranges it
//! owns and hears about every store into them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

/// What a device on the bus hears.
pub trait BusDevice: Send + Sync {
    /// An 8-byte store into one of its MMIO ranges (a doorbell).
    fn mmio_write64(&self, addr: usize, value: u64);
    /// A 32-bit doorbell-record store into one of its DMA ranges; the value
    /// is already in memory.
    fn dbr_write32(&self, addr: usize, value: u32);
}

struct Range {
    len: usize,
    device: Arc<dyn BusDevice>,
}

fn ranges() -> &'static RwLock<BTreeMap<usize, Range>> {
    static R: OnceLock<RwLock<BTreeMap<usize, Range>>> = OnceLock::new();
    R.get_or_init(|| RwLock::new(BTreeMap::new()))
}

/// Stores that reached no registered device (a stray doorbell: on hardware,
/// a write to unmapped or wrong memory).
static STRAY_STORES: AtomicU64 = AtomicU64::new(0);

/// Claims `[start, start+len)` for `device` until the returned guard drops.
pub fn register(start: usize, len: usize, device: Arc<dyn BusDevice>) -> Registration {
    ranges().write().unwrap_or_else(|e| e.into_inner()).insert(start, Range { len, device });
    Registration { start }
}

/// Unregisters its range when dropped.
pub struct Registration {
    start: usize,
}

impl Drop for Registration {
    fn drop(&mut self) {
        ranges().write().unwrap_or_else(|e| e.into_inner()).remove(&self.start);
    }
}

fn device_at(addr: usize) -> Option<Arc<dyn BusDevice>> {
    let map = ranges().read().unwrap_or_else(|e| e.into_inner());
    let (start, r) = map.range(..=addr).next_back()?;
    (addr < start + r.len).then(|| r.device.clone())
}

pub fn stray_stores() -> u64 {
    STRAY_STORES.load(Ordering::Relaxed)
}

/// # Safety
/// Called by the device library's host build with the doorbell address.
#[no_mangle]
pub unsafe extern "C" fn rust_gin_host_mmio_write64(reg: *mut u64, value: u64) {
    if let Some(d) = device_at(reg as usize) {
        return d.mmio_write64(reg as usize, value);
    }
    // Another copy of this crate in the process (a test linking the rlib and
    // dlopening the cdylib) owns the NIC: its UAR page says how to reach it,
    // as an MMIO address names its device on a real bus.
    // SAFETY: doorbell addresses come from queue descriptors, which point into
    // UAR pages; those start with a UarHeader.
    if let Some(h) = unsafe { UarHeader::at(reg as usize) } {
        // SAFETY: the header's handler and context stay valid while the page exists.
        return unsafe { (h.handler)(h.ctx, reg as usize, value) };
    }
    STRAY_STORES.fetch_add(1, Ordering::Relaxed);
    tracing::error!(addr = reg as usize, value, "doorbell store to an address no emulated NIC owns");
}

/// The first bytes of an emulated UAR page: how to reach the NIC that owns
/// it, whichever copy of the crate rings it.
#[repr(C)]
pub struct UarHeader {
    pub magic: u64,
    pub handler: unsafe extern "C" fn(ctx: *const std::ffi::c_void, addr: usize, value: u64),
    pub ctx: *const std::ffi::c_void,
}

pub const UAR_MAGIC: u64 = 0x5241_5547_4e49_4752; // "RGINGUAR"

impl UarHeader {
    /// The header of the page holding `addr`, if it is an emulated UAR page.
    ///
    /// # Safety
    /// `addr` must lie in a readable page.
    pub unsafe fn at<'a>(addr: usize) -> Option<&'a UarHeader> {
        let page = addr & !4095;
        // SAFETY: per the contract the page is readable; the magic is read atomically.
        let magic = unsafe { std::sync::atomic::AtomicU64::from_ptr(page as *mut u64) }.load(Ordering::Acquire);
        // SAFETY: a page with our magic starts with a UarHeader.
        (magic == UAR_MAGIC).then(|| unsafe { &*(page as *const UarHeader) })
    }
}

/// # Safety
/// Called by the device library's host build with a valid, 4-byte aligned
/// doorbell-record address.
#[no_mangle]
pub unsafe extern "C" fn rust_gin_host_dbr_write32(dbr: *mut u32, value: u32) {
    // SAFETY: the caller passes a valid doorbell-record address; the NIC reads
    // it concurrently, so the store is atomic.
    unsafe { AtomicU32::from_ptr(dbr).store(value, Ordering::Release) };
    if let Some(d) = device_at(dbr as usize) {
        d.dbr_write32(dbr as usize, value);
    }
}

/// Monotonic nanoseconds, the host build's stand-in for s_memrealtime.
#[no_mangle]
pub extern "C" fn rust_gin_host_clock_ns() -> u64 {
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64 + 1
}
