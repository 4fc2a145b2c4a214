//! Memory access: the NIC's DMA.

use super::*;

/// # Safety
/// [addr, addr+len) must lie inside a registered region (checked by the caller
/// through the MR table), which its owner keeps valid while registered.
pub(super) unsafe fn dma_read(addr: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    // SAFETY: per the function contract.
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, v.as_mut_ptr(), len) };
    v
}

/// # Safety
/// As for [`dma_read`], for writing.
pub(super) unsafe fn dma_write(addr: u64, data: &[u8]) {
    // SAFETY: per the function contract.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len()) };
}

pub(super) fn remote_syndrome(_e: AccessError) -> u8 {
    syndrome::REMOTE_ACCESS_ERR
}

/// Appends [addr, addr+len) to `out` (one copy, no per-byte loop).
///
/// # Safety
/// As for [`dma_read`].
pub(super) unsafe fn dma_read_into(out: &mut Vec<u8>, addr: u64, len: usize) {
    out.reserve(len);
    // SAFETY: per the function contract for the source; `out` has room for
    // len more bytes, which the copy initialises before set_len.
    unsafe {
        std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr().add(out.len()), len);
        out.set_len(out.len() + len);
    }
}
