//! Host memory that a device (the emulated NIC, or a GPU) reads and writes
//! behind Rust's back: stable, aligned, zeroed, and only ever accessed through
//! raw pointers and atomics once handed out.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// An owned, zeroed, aligned allocation with a stable address.
pub struct DmaBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: DmaBuf owns its allocation and hands out only raw addresses; all
// concurrent access goes through raw pointers or atomics by design (it is
// memory shared with a device).
unsafe impl Send for DmaBuf {}
// SAFETY: as above; &DmaBuf exposes no references into the buffer.
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    /// `len` bytes aligned to `align` (a power of two); len 0 gets one byte.
    /// Running out of memory is an error, not an abort: sizes come from
    /// RCCL's config (up to gigabytes of signals), and the job must get an
    /// ncclSystemError it can report (issue 26).
    pub fn try_new(len: usize, align: usize) -> std::io::Result<DmaBuf> {
        let layout = Layout::from_size_align(len.max(1), align.max(1)).map_err(|e| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{len} bytes aligned to {align}: {e}"))
        })?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or_else(|| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
        Ok(DmaBuf { ptr, layout })
    }

    /// `len` page-aligned bytes for the emulated NIC's own fixed-size pages
    /// (a doorbell page): aborts, as a Box does, when even that is not there.
    pub fn pages(len: usize) -> DmaBuf {
        let layout = Layout::from_size_align(len.max(1), 4096).expect("DmaBuf page layout");
        DmaBuf::try_new(len, 4096).unwrap_or_else(|_| std::alloc::handle_alloc_error(layout))
    }

    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    pub fn len(&self) -> usize {
        self.layout.size()
    }
    pub fn is_empty(&self) -> bool {
        self.layout.size() == 0
    }

    /// Copies bytes out (a snapshot; the device may be writing concurrently
    /// only where the protocol allows, e.g. after a completion).
    pub fn read(&self, off: usize, out: &mut [u8]) {
        assert!(off + out.len() <= self.len(), "DmaBuf read out of bounds");
        // SAFETY: bounds checked above; the buffer lives as long as self.
        unsafe { std::ptr::copy_nonoverlapping(self.as_ptr().add(off), out.as_mut_ptr(), out.len()) };
    }

    pub fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.len(), "DmaBuf write out of bounds");
        // SAFETY: bounds checked above; the buffer lives as long as self.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.as_ptr().add(off), data.len()) };
    }

    /// The 64-bit word at `off` as an atomic (off must be 8-aligned).
    pub fn atomic_u64(&self, off: usize) -> &std::sync::atomic::AtomicU64 {
        assert!(off.is_multiple_of(8) && off + 8 <= self.len(), "DmaBuf atomic_u64 misaligned or out of bounds");
        // SAFETY: aligned and in bounds; lives as long as self.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(self.as_ptr().add(off) as *mut u64) }
    }

    pub fn atomic_u32(&self, off: usize) -> &std::sync::atomic::AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= self.len(), "DmaBuf atomic_u32 misaligned or out of bounds");
        // SAFETY: aligned and in bounds; lives as long as self.
        unsafe { std::sync::atomic::AtomicU32::from_ptr(self.as_ptr().add(off) as *mut u32) }
    }

    pub fn fill(&self, byte: u8) {
        // SAFETY: the whole allocation.
        unsafe { std::ptr::write_bytes(self.as_ptr(), byte, self.len()) };
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

impl std::fmt::Debug for DmaBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DmaBuf({:#x}, {} bytes)", self.addr(), self.len())
    }
}
