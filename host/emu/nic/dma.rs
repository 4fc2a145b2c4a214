//! Memory access: the NIC's DMA. Registered memory goes through
//! [`crate::emu::guarded`]: its owner may have unmapped it while registered,
//! which must end in an error completion, not a fault (issue 26). The NIC's
//! own queues and CQs are written directly.

use super::*;
use crate::emu::guarded::{self, Unmapped};

/// Reads registered memory.
///
/// # Safety
/// [addr, addr+len) must lie inside a registered region (checked by the caller
/// through the MR table); it may have been unmapped since.
pub(super) unsafe fn dma_read(addr: u64, len: usize) -> Result<Payload, Unmapped> {
    let mut p = Payload::with_capacity(len);
    // SAFETY: per the function contract.
    unsafe { p.extend_from_raw(addr, len) }?;
    Ok(p)
}

/// Writes registered memory.
///
/// # Safety
/// As for [`dma_read`], for writing.
pub(super) unsafe fn mr_write(addr: u64, data: &[u8]) -> Result<(), Unmapped> {
    // SAFETY: per the function contract.
    unsafe { guarded::copy(addr as *mut u8, data.as_ptr(), data.len()) }
}

/// Writes the NIC's own queue memory (CQEs), which the creator of the queue
/// keeps mapped (create_cq's contract).
///
/// # Safety
/// [addr, addr+data.len()) lies inside such a queue.
pub(super) unsafe fn dma_write(addr: u64, data: &[u8]) {
    // SAFETY: per the function contract.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len()) };
}

pub(super) fn remote_syndrome(_e: AccessError) -> u8 {
    syndrome::REMOTE_ACCESS_ERR
}
