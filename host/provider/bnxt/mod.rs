//! Broadcom Thor2 (bnxt_re) through rdma-core's bnxt_re direct verbs
//! (rdma-core pull request 1654, head 35fcb9e4, 2026-08-21: bnxt_re_dv.h,
//! dv.c, and `ibv_alloc_user_buf` of commit e2fcb50d), in the sequence
//! MORI's bnxt provider uses (ROCm/mori 624002c8,
//! src/application/transport/rdma/providers/bnxt/bnxt.cpp):
//!
//! 1. per NIC: the context's default doorbell page
//!    (`bnxt_re_dv_get_default_db_region`, bnxt.cpp:540-542), mapped for the
//!    GPU (bnxt.cpp:549-557 uses hipHostRegister; this crate's
//!    hipHostRegister(IoMemory) as for mlx5 UARs); SQ, RQ and CQ doorbells
//!    all go to that page (rdma-core db.c: `bnxt_re_ring_db` writes
//!    `dpi->dbpage`);
//! 2. per QP: the CQ ring and the SQ ring (with the MSN table after the
//!    slots, bnxt_re_dv.h: "sq length including MSN area") in GPU-visible
//!    memory from this crate's allocator, described with `ibv_alloc_user_buf`
//!    (a dma-buf for device memory when HIP exports one), the CQ by
//!    `bnxt_re_dv_create_cq`, its id by `bnxt_re_dv_init_obj` (Broadcom's
//!    library; bnxt.cpp:110-117), the QP by `bnxt_re_dv_create_qp`;
//! 3. connect: ibv_modify_qp RST -> INIT -> RTR -> RTS (bnxt.cpp:367-437).
//!
//! The queues are sized for the device policy's static WQE mode
//! (bnxt/family.h: 8 slots of 16 bytes per WQE, doorbell index = WQE index;
//! MSN entries = roundup_pow_of_two(WQEs), rdma-core verbs.c:1451-1458).
//! UNVERIFIED: that the kernel runs a direct-verbs QP in static mode (MORI
//! sizes 3-slot WQEs, i.e. variable mode), the CQ's first phase (rdma-core
//! keeps the create response's `phase` private; 1 is assumed), and all of
//! it on hardware. docs/nic-families.md, "Host providers".

pub mod ffi;

use super::dv::{nic_addr, DoorbellPage, DvContext, DvNic, FamilyOps, Memory, NicQp, Obj, ObjKind, QpParts, PAGE};
use crate::bnxt::wire;
use crate::error::{Error, Result};
use crate::gpu::hip::DmaBufRange;
use crate::gpu::{GpuBuf, Object, Placement, RingHome};
use crate::mlx5::queue::{MAX_LOG_DEPTH, MIN_LOG_DEPTH};
use std::sync::Arc;

/// MSN table entry bytes (one le64 per WQE: rdma-core verbs.h:131-140).
pub const MSN_ENTRY_BYTES: usize = 8;
/// The receive queue this provider asks for: the smallest (no receives are
/// posted; rdma-core's dv create_qp needs one unless an SRQ is given).
pub const RQ_WRS: u32 = 1;

/// The sizes of one QP's rings in the static WQE mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub wqes: u32,
    pub sq_slots: u32,
    pub sq_npsn: u32,
    /// Slots and MSN table, rounded up to a page.
    pub sq_len: u32,
    pub msn_offset: u32,
    pub ncqe: u32,
    pub cq_len: u32,
    pub rq_len: u32,
}

impl Layout {
    pub fn new(log_depth: u32) -> Layout {
        let wqes = 1u32 << log_depth.clamp(MIN_LOG_DEPTH, MAX_LOG_DEPTH);
        let sq_slots = wqes * wire::STATIC_WQE_SLOTS;
        let sq_npsn = wqes.next_power_of_two();
        let msn_offset = sq_slots * wire::SLOT_BYTES as u32;
        let round = |n: u32| n.div_ceil(PAGE as u32) * PAGE as u32;
        Layout {
            wqes,
            sq_slots,
            sq_npsn,
            sq_len: round(msn_offset + sq_npsn * MSN_ENTRY_BYTES as u32),
            msn_offset,
            // One CQE per WQE at most: the CQ cannot overflow.
            ncqe: wqes,
            cq_len: round(wqes * wire::CQE_BYTES as u32),
            rq_len: PAGE as u32,
        }
    }
}

/// Per-NIC state: the default doorbell page, mapped.
pub(crate) struct BnxtOps {
    db: Arc<DoorbellPage>,
    db_cpu: usize,
}

impl BnxtOps {
    pub(crate) fn open(ctx: &Arc<DvContext>, memory: &Memory) -> Result<BnxtOps> {
        let r = ctx.platform.bnxt_default_db_region(ctx.ctx.handle()).map_err(|e| {
            Error::System(format!("{}: bnxt_re_dv_get_default_db_region: {e} (libbnxt_re without direct verbs?)", ctx.name))
        })?;
        wqe_mode_gate(ctx, &r)?;
        Ok(BnxtOps { db: Arc::new(DoorbellPage::map(memory, r.dbr, &ctx.name)?), db_cpu: r.dbr })
    }
}

/// The context's WQE mode (the ucontext response's `mode`, which libbnxt_re
/// keeps in its private context and no direct verb reports), read where
/// main.h puts it and trusted only when the doorbell page beside it is the
/// one bnxt_re_dv_get_default_db_region returned; then gated
/// (gates::bnxt_wqe_mode): static, else the NIC is refused.
fn wqe_mode_gate(ctx: &DvContext, r: &super::dv::BnxtDbRegion) -> Result<()> {
    let name = &ctx.name;
    let p = ctx
        .platform
        .bnxt_ctx_private(ctx.ctx.handle())
        .map_err(|e| Error::System(format!("{name}: reading libbnxt_re's WQE mode: {e}")))?;
    if p.dbpage != r.dbr || p.wqe_mode > crate::nic::gates::BNXT_WQE_MODE_VARIABLE {
        return Err(Error::System(format!(
            "{name}: libbnxt_re's context does not have the layout of rdma-core PR 1654's main.h (doorbell page {:#x}              where bnxt_re_dv_get_default_db_region says {:#x}, WQE mode {}), so its WQE mode cannot be read;              refusing rather than guess it (docs/nic-families.md, \"Firmware and ABI gates\")",
            p.dbpage, r.dbr, p.wqe_mode
        )));
    }
    crate::nic::gates::bnxt_wqe_mode(name, p.wqe_mode)?;
    crate::info_line!(INIT, "{name}: bnxt_re context in static WQE mode");
    Ok(())
}

/// A ring's memory described to the NIC: its `ibv_buf`, and the dma-buf
/// it names, if any. libibverbs only records the fd (`ibv_buf_init_dmabuf`,
/// verbs.c at e2fcb50d); the kernel imports it when the CQ or QP is created,
/// so the caller keeps it open until then.
fn user_buf(ctx: &DvContext, memory: &Memory, b: &GpuBuf, what: &str) -> Result<(Obj, Option<DmaBufRange>)> {
    let p = &ctx.platform;
    // Device memory goes as a dma-buf when HIP exports one starting at the
    // buffer (ibv_alloc_user_buf has no offset); else by address (peer memory).
    let dmabuf = match (memory, b.placement()) {
        (Memory::Gpu(_), Placement::Device | Placement::DeviceUncached | Placement::DeviceFine) => {
            p.export_dmabuf(b.dev_addr(), b.len() as u64).ok().filter(|d| d.offset == 0)
        }
        _ => None,
    };
    use std::os::fd::AsRawFd;
    let fd = dmabuf.as_ref().map(|d| d.fd.as_raw_fd()).unwrap_or(-1);
    // SAFETY: the buffer outlives the ibv_buf (NicQp drops the objects
    // before the rings); the caller keeps the fd open until the CQ or QP
    // that imports it exists.
    let h = unsafe { p.bnxt_alloc_user_buf(ctx.pd.handle(), nic_addr(b), b.len(), fd) }.map_err(|e| {
        Error::System(format!(
            "{}: ibv_alloc_user_buf for the {what} ({} bytes at {:#x}, {}): {e}",
            ctx.name,
            b.len(),
            nic_addr(b),
            if fd >= 0 { "dma-buf" } else { "by address" }
        ))
    })?;
    Ok((Obj::new(p, h, ObjKind::UserBuf), dmabuf))
}

impl FamilyOps for BnxtOps {
    fn create_qp(&self, nic: &DvNic, log_depth: u32, traffic_class: u8, rings_in_device_memory: bool) -> Result<NicQp> {
        let ctx = &nic.ctx;
        let name = &ctx.name;
        let p = &ctx.platform;
        let l = Layout::new(log_depth);
        let home = if rings_in_device_memory { RingHome::Device } else { RingHome::Host };
        let alloc = nic.memory().allocator();
        let mem = |len: u32, o: Object, what: &str| {
            alloc.alloc(len as usize, PAGE, o).map_err(|e| Error::System(format!("{name}: {what} ({}): {e}", alloc.describe())))
        };
        let cq_ring = mem(l.cq_len, Object::CompletionRing(home), "CQ ring")?;
        let sq_ring = mem(l.sq_len, Object::SendRing(home), "send ring and MSN table")?;
        // The receive ring is never posted to; it lives with the send ring.
        let rq_ring = mem(l.rq_len, Object::SendRing(home), "receive ring")?;
        for b in [&cq_ring, &sq_ring, &rq_ring] {
            b.try_write(0, &vec![0u8; b.len()]).map_err(|e| Error::System(format!("{name}: zeroing a ring: {e}")))?;
        }
        let (cq_buf, cq_fd) = user_buf(ctx, nic.memory(), &cq_ring, "CQ ring")?;
        let (sq_buf, sq_fd) = user_buf(ctx, nic.memory(), &sq_ring, "send ring")?;
        let (rq_buf, rq_fd) = user_buf(ctx, nic.memory(), &rq_ring, "receive ring")?;
        let cq = Obj::new(
            p,
            p.bnxt_create_cq(ctx.ctx.handle(), cq_buf.handle(), 0, l.ncqe)
                .map_err(|e| Error::System(format!("{name}: bnxt_re_dv_create_cq ({} CQEs): {e}", l.ncqe)))?,
            ObjKind::Cq,
        );
        let cqn = p.bnxt_cq_id(cq.handle()).map_err(|e| {
            Error::System(format!(
                "{name}: the CQ's id for its doorbell (bnxt_re_dv_init_obj(BNXT_RE_DV_OBJ_CQ)): {e}; rdma-core's bnxt_re \
                 direct verbs (PR 1654) do not report it, Broadcom's libbnxt_re does"
            ))
        })?;
        let attr = super::dv::BnxtQpInit {
            max_send_wr: l.wqes,
            max_recv_wr: RQ_WRS,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: crate::device::MAX_INLINE,
            sq_umem: sq_buf.handle(),
            sq_umem_offset: 0,
            sq_len: l.sq_len,
            sq_slots: l.sq_slots,
            sq_npsn: l.sq_npsn,
            rq_umem: rq_buf.handle(),
            rq_umem_offset: 0,
            rq_len: l.rq_len,
        };
        let (qp, qpn) = p
            .bnxt_create_qp(ctx.pd.handle(), cq.handle(), &attr)
            .map_err(|e| Error::System(format!("{name}: bnxt_re_dv_create_qp ({} WQEs, {} slots): {e}", l.wqes, l.sq_slots)))?;
        let qp = Obj::new(p, qp, ObjKind::Qp);
        // Imported by now (the kernel holds its own references).
        drop((cq_fd, sq_fd, rq_fd));
        let db = self.db.dev(self.db_cpu);
        crate::info_line!(
            NET,
            "{name}: bnxt_re QP {qpn:#x} (CQ {cqn:#x}, {} static WQEs, MSN table of {} at +{:#x}, rings in {home:?} \
             memory of {})",
            l.wqes,
            l.sq_npsn,
            l.msn_offset,
            alloc.describe()
        );
        let parts = QpParts {
            qp,
            cq,
            // Released after the QP and CQ, newest first.
            keep: vec![Arc::new(rq_buf), Arc::new(sq_buf), Arc::new(cq_buf)],
            doorbell: self.db.clone(),
            qp_num: qpn,
            // rdma-core rings the SQ with the QP's id (db.c, bnxt_re_ring_sq_db).
            sq_qid: qpn,
            cq_qid: cqn,
            wqe_buf: sq_ring.dev_addr(),
            log_wqe_cnt: l.wqes.trailing_zeros(),
            cq_buf: cq_ring.dev_addr(),
            log_cq_cnt: l.ncqe.trailing_zeros(),
            sq_db: db,
            cq_db: db,
            cq_phase: wire::CQ_START_PHASE,
            wqe_abi: 0,
        };
        NicQp::new(ctx, parts, vec![sq_ring, rq_ring, cq_ring], alloc.as_ref(), traffic_class)
    }
}
