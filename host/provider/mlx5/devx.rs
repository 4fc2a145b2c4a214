//! Owned DevX objects: user memory (umem) registrations, UARs and firmware
//! objects (CQ, QP), each released on drop, and the commands that create and
//! modify them with errors that carry the firmware's status and syndrome.

use super::device::Context;
use super::platform::{Handle, Platform, UarInfo};
use super::prm;
use crate::error::{Error, Result};
use crate::sys::mlx5dv;
use std::sync::{Arc, Mutex, Weak};

/// MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED (mlx5dv.h, rdma-core v45+, commit
/// bf550b9fa833 "mlx5: Add support for allocating a dedicated NC UAR"):
/// absent from older headers, so defined here as NCCL's DOCA code does.
pub const UAR_ALLOC_TYPE_NC_DEDICATED: u32 = 1 << 31;
/// MLX5DV_UAR_ALLOC_TYPE_NC (= MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC).
pub const UAR_ALLOC_TYPE_NC: u32 = mlx5dv::MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC;

/// A registered umem.
pub(crate) struct Umem {
    platform: Arc<dyn Platform>,
    handle: Handle,
    pub id: u32,
}

impl Umem {
    /// Registers `[addr, addr+len)` for the NIC to read and write.
    ///
    /// # Safety
    /// The memory must stay mapped until the Umem drops.
    pub unsafe fn register(ctx: &Context, addr: u64, len: usize, what: &str) -> Result<Umem> {
        // LOCAL_WRITE lets the NIC write CQEs (and read the rings and records).
        let access = rdma_sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        // SAFETY: forwarded contract.
        let (handle, id) = unsafe { ctx.platform.devx_umem_reg(ctx.ctx, addr, len, access) }.map_err(|e| {
            Error::System(format!(
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
            ))
        })?;
        Ok(Umem { platform: ctx.platform.clone(), handle, id })
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // After the objects that use it (their owners drop them first).
        if let Err(e) = self.platform.devx_umem_dereg(self.handle) {
            tracing::warn!("mlx5dv_devx_umem_dereg(umem {}): {e}", self.id);
        }
    }
}

/// A UAR: the doorbell page of one or more QPs (UarPool).
pub(crate) struct Uar {
    platform: Arc<dyn Platform>,
    handle: Handle,
    /// The doorbell register (BlueFlame register address) for the CPU.
    pub reg_addr: usize,
    pub page_id: u32,
    /// Dedicated to this QP (NC_DEDICATED) rather than the context's shared NC UAR.
    pub dedicated: bool,
}

impl Uar {
    /// A dedicated non-cached UAR (rocSHMEM's choice: one per QP, so no two
    /// QPs' doorbells share a register), falling back to the context's shared
    /// NC UAR where rdma-core is older than v45 or the kernel refuses.
    pub fn alloc(ctx: &Context) -> Result<Uar> {
        let made = |u: UarInfo, dedicated| Uar {
            platform: ctx.platform.clone(),
            handle: u.handle,
            reg_addr: u.reg_addr,
            page_id: u.page_id,
            dedicated,
        };
        let dedicated_err = match ctx.platform.devx_alloc_uar(ctx.ctx, UAR_ALLOC_TYPE_NC_DEDICATED) {
            Ok(u) => return Ok(made(u, true)),
            Err(e) => e,
        };
        let u = ctx.platform.devx_alloc_uar(ctx.ctx, UAR_ALLOC_TYPE_NC).map_err(|e| {
            Error::System(format!(
                "{}: no UAR for the doorbell: mlx5dv_devx_alloc_uar(NC_DEDICATED) failed with {dedicated_err}, \
                 (NC) with {e}. The kernel refused a doorbell page (out of UARs, or DevX UAR allocation not \
                 permitted: see NVSHMEM issue #23 for the same failure); check ulimits, that no other process \
                 exhausted the UARs, and the mlx5_ib/firmware versions",
                ctx.name
            ))
        })?;
        crate::warn_line!(
            "{}: no dedicated doorbell page (mlx5dv_devx_alloc_uar(NC_DEDICATED): {dedicated_err}; rdma-core v45+ \
             is needed); QPs share the context's NC UAR",
            ctx.name
        );
        Ok(made(u, false))
    }
}

/// Hands the QPs of a device context their UAR pages, `per_page` QPs to a
/// page (0: one page for all of them), so that a rank with thousands of QPs
/// does not hold thousands of UARs (ConnectX's UAR space is the ceiling:
/// docs/architecture.md, "Doorbell pages"). All QPs on a page ring its one
/// register: a doorbell is a single aligned 64-bit store that names its QP
/// and carries that QP's producer index, so doorbells of different QPs to
/// one register cannot mix, and each QP's own doorbells stay ordered by its
/// ring lock. rdma-core's own default does the same: all QPs of a verbs
/// context share its 16 doorbell registers (MLX5_DEF_TOT_UUARS, 8 UAR
/// pages; providers/mlx5/mlx5-abi.h). A page is freed when its last QP is.
pub(crate) struct UarPool {
    per_page: u32,
    /// The page being filled and how many QPs it has had.
    filling: Mutex<Option<(Weak<Uar>, u32)>>,
}

impl UarPool {
    pub fn new(per_page: u32) -> UarPool {
        UarPool { per_page, filling: Mutex::new(None) }
    }

    pub fn per_page(&self) -> u32 {
        self.per_page
    }

    /// The page for a new QP: the one being filled while it has room and
    /// lives, else a new one.
    pub fn get(&self, ctx: &Context) -> Result<Arc<Uar>> {
        let mut filling = self.filling.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((page, users)) = filling.as_mut() {
            if self.per_page == 0 || *users < self.per_page {
                if let Some(u) = page.upgrade() {
                    *users += 1;
                    return Ok(u);
                }
            }
        }
        let u = Arc::new(Uar::alloc(ctx)?);
        *filling = Some((Arc::downgrade(&u), 1));
        Ok(u)
    }
}

impl Drop for Uar {
    fn drop(&mut self) {
        // After the QP and CQ that name it (a no-op in rdma-core for the
        // shared NC UAR).
        self.platform.devx_free_uar(self.handle);
    }
}

/// A firmware object (CQ, QP) created through DevX.
pub(crate) struct Obj {
    platform: Arc<dyn Platform>,
    handle: Handle,
    what: &'static str,
}

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
        let handle =
            ctx.platform.devx_obj_create(ctx.ctx, input, &mut out).map_err(|e| cmd_error(&ctx.name, what, e, &out))?;
        Ok((Obj { platform: ctx.platform.clone(), handle, what }, out))
    }

    /// Sends a query of the object; returns its output.
    pub fn query(&self, ctx_name: &str, what: &str, input: &[u8], out: &mut [u8]) -> Result<()> {
        self.platform.devx_obj_query(self.handle, input, out).map_err(|e| cmd_error(ctx_name, what, e, out))
    }

    /// Sends a modify command (a QP state transition).
    pub fn modify(&self, ctx_name: &str, what: &str, input: &[u8]) -> Result<()> {
        let mut out = [0u8; prm::cmd_out::BYTES];
        self.platform.devx_obj_modify(self.handle, input, &mut out).map_err(|e| cmd_error(ctx_name, what, e, &out))
    }
}

impl Drop for Obj {
    fn drop(&mut self) {
        // rdma-core sends the matching DESTROY command recorded at creation.
        if let Err(e) = self.platform.devx_obj_destroy(self.handle) {
            tracing::warn!("mlx5dv_devx_obj_destroy({}): {e}", self.what);
        }
    }
}

/// The EQ number CREATE_CQ needs (completion vector 0; the device code polls
/// and never arms the CQ, so no event is ever delivered on it).
pub(crate) fn query_eqn(ctx: &Context) -> Result<u32> {
    ctx.platform
        .devx_query_eqn(ctx.ctx, 0)
        .map_err(|e| Error::System(format!("{}: mlx5dv_devx_query_eqn: {e}", ctx.name)))
}
