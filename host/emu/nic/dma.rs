//! Memory access: the NIC's DMA.

use super::*;

/// # Safety
/// [addr, addr+len) must lie inside a registered region (checked by the caller
/// through the MR table), which its owner keeps valid while registered.
pub(super) unsafe fn dma_read(addr: u64, len: usize) -> Payload {
    let mut p = Payload::with_capacity(len);
    // SAFETY: per the function contract.
    unsafe { p.extend_from_raw(addr, len) };
    p
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
