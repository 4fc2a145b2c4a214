//! Memory regions: ibv_reg_mr for host and GPU pointers, ibv_reg_dmabuf_mr
//! for dma-bufs, with access rights mapped from [`Access`].

use super::device::Context;
use super::platform::MrKeys;
use crate::error::{Error, Result};
use crate::provider::{Access, MemoryRegion};
use rdma_sys::ibv_access_flags as F;
use std::sync::Arc;

/// The ibv_access_flags for `a`. Verbs refuses REMOTE_WRITE or REMOTE_ATOMIC
/// without LOCAL_WRITE (ibv_reg_mr(3): EINVAL), so those imply it.
pub fn verbs_access(a: Access) -> i32 {
    let mut v = 0u32;
    if a.contains(Access::LOCAL_WRITE) {
        v |= F::IBV_ACCESS_LOCAL_WRITE.0;
    }
    if a.contains(Access::REMOTE_WRITE) {
        v |= F::IBV_ACCESS_REMOTE_WRITE.0 | F::IBV_ACCESS_LOCAL_WRITE.0;
    }
    if a.contains(Access::REMOTE_READ) {
        v |= F::IBV_ACCESS_REMOTE_READ.0;
    }
    if a.contains(Access::REMOTE_ATOMIC) {
        v |= F::IBV_ACCESS_REMOTE_ATOMIC.0 | F::IBV_ACCESS_LOCAL_WRITE.0;
    }
    v as i32
}

pub(crate) struct Region {
    keys: MrKeys,
    addr: u64,
    len: u64,
    ctx: Arc<Context>,
}

impl MemoryRegion for Region {
    fn lkey(&self) -> u32 {
        self.keys.lkey
    }
    fn rkey(&self) -> u32 {
        self.keys.rkey
    }
    fn addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> u64 {
        self.len
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Err(e) = self.ctx.platform.dereg_mr(self.keys.handle) {
            tracing::warn!("ibv_dereg_mr(lkey {:#x}): {e}", self.keys.lkey);
        }
    }
}

fn hint(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EFAULT) | Some(libc::EINVAL) => {
            "; a GPU pointer needs amdgpu peer-memory support in the RDMA stack (or register a dma-buf)"
        }
        Some(libc::ENOMEM) => "; raise the locked-memory limit (ulimit -l)",
        Some(libc::EOPNOTSUPP) | Some(libc::EPROTONOSUPPORT) => "; this kernel cannot import dma-bufs into the NIC",
        _ => "",
    }
}

fn check_len(len: u64) -> Result<usize> {
    if len == 0 {
        return Err(Error::InvalidArgument("cannot register an empty memory region".into()));
    }
    usize::try_from(len).map_err(|_| Error::InvalidArgument(format!("region of {len} bytes is too large")))
}

/// Registers `[addr, addr+len)`.
///
/// # Safety
/// The memory must stay valid for NIC access until the region drops.
pub(crate) unsafe fn reg(ctx: &Arc<Context>, addr: u64, len: u64, access: Access) -> Result<Box<dyn MemoryRegion>> {
    let n = check_len(len)?;
    // SAFETY: forwarded contract (the caller keeps the memory alive).
    let keys = unsafe { ctx.platform.reg_mr(ctx.pd, addr, n, verbs_access(access)) }.map_err(|e| {
        Error::System(format!("{}: ibv_reg_mr of {len} bytes at {addr:#x} ({access:?}): {e}{}", ctx.name, hint(&e)))
    })?;
    Ok(Box::new(Region { keys, addr, len, ctx: ctx.clone() }))
}

/// Registers a dma-buf covering `[offset, offset+len)` of `fd`, at iova `addr`.
///
/// # Safety
/// As [`reg`]; `fd` must be a dma-buf of at least offset+len bytes.
pub(crate) unsafe fn reg_dmabuf(
    ctx: &Arc<Context>,
    addr: u64,
    len: u64,
    offset: u64,
    fd: i32,
    access: Access,
) -> Result<Box<dyn MemoryRegion>> {
    let n = check_len(len)?;
    // SAFETY: forwarded contract (the caller vouches for the dma-buf).
    let keys =
        unsafe { ctx.platform.reg_dmabuf_mr(ctx.pd, offset, n, addr, fd, verbs_access(access)) }.map_err(|e| {
            Error::System(format!(
                "{}: ibv_reg_dmabuf_mr of {len} bytes (fd {fd}, offset {offset}, iova {addr:#x}, {access:?}): {e}{}",
                ctx.name,
                hint(&e)
            ))
        })?;
    Ok(Box::new(Region { keys, addr, len, ctx: ctx.clone() }))
}
