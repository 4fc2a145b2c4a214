//! Owned DevX objects: user memory (umem) registrations, UARs and firmware
//! objects (CQ, QP), each released on drop, and the commands that create and
//! modify them with errors that carry the firmware's status and syndrome.

use super::device::{errno, Context};
use super::prm;
use crate::error::{Error, Result};
use crate::sys::mlx5dv;
use std::ffi::c_void;

/// MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED (mlx5dv.h, rdma-core v45+, commit
/// bf550b9fa833 "mlx5: Add support for allocating a dedicated NC UAR"):
/// absent from older headers, so defined here as NCCL's DOCA code does.
pub const UAR_ALLOC_TYPE_NC_DEDICATED: u32 = 1 << 31;
/// MLX5DV_UAR_ALLOC_TYPE_NC (= MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC).
pub const UAR_ALLOC_TYPE_NC: u32 = mlx5dv::MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC;

/// A registered umem.
pub(crate) struct Umem {
    ptr: *mut mlx5dv::mlx5dv_devx_umem,
    pub id: u32,
}

// SAFETY: a handle passed only to rdma-core, which is thread-safe for it.
unsafe impl Send for Umem {}
// SAFETY: as above.
unsafe impl Sync for Umem {}

impl Umem {
    /// Registers `[addr, addr+len)` for the NIC to read and write.
    ///
    /// # Safety
    /// The memory must stay mapped until the Umem drops.
    pub unsafe fn register(ctx: &Context, addr: u64, len: usize, what: &str) -> Result<Umem> {
        // SAFETY: the caller keeps the range alive; LOCAL_WRITE lets the NIC
        // write CQEs (and read the rings and records).
        let ptr = unsafe {
            mlx5dv::mlx5dv_devx_umem_reg(
                ctx.ctx,
                addr as *mut c_void,
                len,
                rdma_sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0,
            )
        };
        if ptr.is_null() {
            let e = errno();
            return Err(Error::System(format!(
                "{}: mlx5dv_devx_umem_reg of the {what} ({len} bytes at {addr:#x}): {e}{}",
                ctx.name,
                if e.raw_os_error() == Some(libc::EFAULT) || e.raw_os_error() == Some(libc::EINVAL) {
                    "; GPU memory needs amdgpu peer-memory support in the RDMA stack, or keep queues in host \
                     memory (RCCL_RUST_GIN_QUEUE_PLACEMENT=host)"
                } else if e.raw_os_error() == Some(libc::ENOMEM) {
                    "; raise the locked-memory limit (ulimit -l)"
                } else {
                    ""
                }
            )));
        }
        // SAFETY: non-null result of umem_reg.
        let id = unsafe { (*ptr).umem_id };
        Ok(Umem { ptr, id })
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: registered in register(), deregistered once, after the
        // objects that use it (their owners drop them first).
        let rc = unsafe { mlx5dv::mlx5dv_devx_umem_dereg(self.ptr) };
        if rc != 0 {
            tracing::warn!("mlx5dv_devx_umem_dereg(umem {}): {}", self.id, std::io::Error::from_raw_os_error(rc.abs()));
        }
    }
}

/// A UAR: the doorbell page of one QP.
pub(crate) struct Uar {
    ptr: *mut mlx5dv::mlx5dv_devx_uar,
    /// The doorbell register (BlueFlame register address) for the CPU.
    pub reg_addr: usize,
    pub page_id: u32,
    /// Dedicated to this QP (NC_DEDICATED) rather than the context's shared NC UAR.
    pub dedicated: bool,
}

// SAFETY: a handle passed only to rdma-core; the doorbell page is written by
// the device code with 8-byte stores, never through Rust references.
unsafe impl Send for Uar {}
// SAFETY: as above.
unsafe impl Sync for Uar {}

impl Uar {
    /// A dedicated non-cached UAR (rocSHMEM's choice: one per QP, so no two
    /// QPs' doorbells share a register), falling back to the context's shared
    /// NC UAR where rdma-core is older than v45 or the kernel refuses.
    pub fn alloc(ctx: &Context) -> Result<Uar> {
        // SAFETY: valid context; the flag is one rdma-core v45+ accepts and
        // older versions refuse with EOPNOTSUPP.
        let p = unsafe { mlx5dv::mlx5dv_devx_alloc_uar(ctx.ctx, UAR_ALLOC_TYPE_NC_DEDICATED) };
        if !p.is_null() {
            return Ok(Self::from_raw(p, true));
        }
        let dedicated_err = errno();
        // SAFETY: as above, with the NC type every DevX-capable rdma-core has.
        let p = unsafe { mlx5dv::mlx5dv_devx_alloc_uar(ctx.ctx, UAR_ALLOC_TYPE_NC) };
        if p.is_null() {
            let e = errno();
            return Err(Error::System(format!(
                "{}: no UAR for the doorbell: mlx5dv_devx_alloc_uar(NC_DEDICATED) failed with {dedicated_err}, \
                 (NC) with {e}. The kernel refused a doorbell page (out of UARs, or DevX UAR allocation not \
                 permitted: see NVSHMEM issue #23 for the same failure); check ulimits, that no other process \
                 exhausted the UARs, and the mlx5_ib/firmware versions",
                ctx.name
            )));
        }
        crate::warn_line!(
            "{}: no dedicated doorbell page (mlx5dv_devx_alloc_uar(NC_DEDICATED): {dedicated_err}; rdma-core v45+ \
             is needed); QPs share the context's NC UAR",
            ctx.name
        );
        Ok(Self::from_raw(p, false))
    }

    fn from_raw(p: *mut mlx5dv::mlx5dv_devx_uar, dedicated: bool) -> Uar {
        // SAFETY: a non-null UAR returned by rdma-core.
        let u = unsafe { *p };
        Uar { ptr: p, reg_addr: u.reg_addr as usize, page_id: u.page_id, dedicated }
    }
}

impl Drop for Uar {
    fn drop(&mut self) {
        // SAFETY: allocated in alloc(), freed once after the QP and CQ that
        // name it (a no-op in rdma-core for the shared NC UAR).
        unsafe { mlx5dv::mlx5dv_devx_free_uar(self.ptr) };
    }
}

/// A firmware object (CQ, QP) created through DevX.
pub(crate) struct Obj {
    ptr: *mut mlx5dv::mlx5dv_devx_obj,
    what: &'static str,
}

// SAFETY: a handle passed only to rdma-core's DevX calls, which are
// thread-safe; modifications are serialised by the owner.
unsafe impl Send for Obj {}
// SAFETY: as above.
unsafe impl Sync for Obj {}

fn cmd_error(ctx_name: &str, what: &str, e: std::io::Error, out: &[u8]) -> Error {
    let (status, syndrome) = prm::status(out);
    Error::System(format!(
        "{ctx_name}: DevX {what} failed: {e} (firmware status {status:#x}, syndrome {syndrome:#010x}){}",
        match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => "; DevX needs permission for this object (CAP_NET_RAW)",
            _ => "",
        }
    ))
}

impl Obj {
    /// Sends a create command; returns the object and the command's output.
    pub fn create(ctx: &Context, what: &'static str, input: &[u8]) -> Result<(Obj, [u8; prm::cmd_out::BYTES])> {
        let mut out = [0u8; prm::cmd_out::BYTES];
        // SAFETY: input and output buffers of the lengths passed.
        let ptr = unsafe {
            mlx5dv::mlx5dv_devx_obj_create(
                ctx.ctx,
                input.as_ptr() as *const c_void,
                input.len(),
                out.as_mut_ptr() as *mut c_void,
                out.len(),
            )
        };
        if ptr.is_null() {
            return Err(cmd_error(&ctx.name, what, errno(), &out));
        }
        Ok((Obj { ptr, what }, out))
    }

    /// Sends a modify command (a QP state transition).
    pub fn modify(&self, ctx_name: &str, what: &str, input: &[u8]) -> Result<()> {
        let mut out = [0u8; prm::cmd_out::BYTES];
        // SAFETY: a live object; buffers of the lengths passed.
        let rc = unsafe {
            mlx5dv::mlx5dv_devx_obj_modify(
                self.ptr,
                input.as_ptr() as *const c_void,
                input.len(),
                out.as_mut_ptr() as *mut c_void,
                out.len(),
            )
        };
        if rc != 0 {
            return Err(cmd_error(ctx_name, what, std::io::Error::from_raw_os_error(rc.abs()), &out));
        }
        Ok(())
    }
}

impl Drop for Obj {
    fn drop(&mut self) {
        // SAFETY: created in create(), destroyed once; rdma-core sends the
        // matching DESTROY command recorded at creation.
        let rc = unsafe { mlx5dv::mlx5dv_devx_obj_destroy(self.ptr) };
        if rc != 0 {
            tracing::warn!("mlx5dv_devx_obj_destroy({}): {}", self.what, std::io::Error::from_raw_os_error(rc.abs()));
        }
    }
}

/// The EQ number CREATE_CQ needs (completion vector 0; the device code polls
/// and never arms the CQ, so no event is ever delivered on it).
pub(crate) fn query_eqn(ctx: &Context) -> Result<u32> {
    let mut eqn = 0u32;
    // SAFETY: valid context and out-pointer.
    let rc = unsafe { mlx5dv::mlx5dv_devx_query_eqn(ctx.ctx, 0, &mut eqn) };
    if rc != 0 {
        return Err(Error::System(format!(
            "{}: mlx5dv_devx_query_eqn: {}",
            ctx.name,
            std::io::Error::from_raw_os_error(rc.abs())
        )));
    }
    Ok(eqn)
}
