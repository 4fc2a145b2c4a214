//! AMD Pollara (ionic) through rdma-core's ionic direct verbs (rdma-core
//! pull request 1771, head 69787abe, 2026-07-21: ionic_dv.h, ionic_dv.c) in
//! the sequence MORI's ionic provider uses (ROCm/mori 624002c8,
//! src/application/transport/rdma/providers/ionic/ionic.cpp, plus the GDA
//! and hop-limit fixes of ROCm/mori PR 588, head 3f43a48b, 2026-08-20):
//!
//! 1. per NIC: a parent domain whose allocator hands libionic GPU-visible
//!    memory for every queue ring (`ibv_alloc_parent_domain` with
//!    IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS, ionic.cpp:441-479; libionic
//!    calls it in `ionic_queue_map`, ionic_queue.c:13-30), with the
//!    controller memory bar off for both queues (`ionic_dv_pd_set_sqcmb` /
//!    `_rqcmb`(false, false, false), ionic.cpp:475-476: the rings must be in
//!    that memory, and GDA refuses the express doorbell, ionic_dv.c:158-176);
//!    the context's doorbell page (`ionic_dv_get_ctx`), mapped for the GPU;
//! 2. per QP: its CQ (`ibv_create_cq_ex` on the parent domain,
//!    ionic.cpp:109-128), the QP (`ibv_create_qp` on the parent domain,
//!    ionic.cpp:238-252), **GPU-direct-async mode** (`ionic_dv_qp_set_gda(qp,
//!    true, true)`, mori PR 588: without it the GPU's doorbell has no
//!    effect), then the rings as libionic laid them out (`ionic_dv_get_qp`,
//!    `ionic_dv_get_cq` for the QP's `ionic_dv_qp_get_udma_idx`,
//!    ionic.cpp:269-292);
//! 3. connect: ibv_modify_qp RST -> INIT -> RTR -> RTS with hop limit 255
//!    (mori PR 588: 1 drops routed traffic) and no REMOTE_ATOMIC (ionic
//!    refuses it: mori 682).
//!
//! Field quirks (crate::nic::quirks): each QP's CQ and QP go to the next
//! uDMA engine of the device's mask in turn (`ionic_dv_pd_set_udma_mask` on
//! the parent domain before creating them, the man page's alternative
//! usage), and a QP's traffic class is the device's sysfs one if it has one,
//! else the configured one (default 0, not NCCL's 224: torchcomms#3116).
//!
//! UNVERIFIED ON HARDWARE: docs/nic-families.md, "Host providers".

pub mod ffi;

use super::dv::{
    nic_addr, DomainMemory, DoorbellPage, DvContext, DvNic, FamilyOps, IonicDvCtx, IonicDvQueue, IonicQpInit, Memory,
    NicQp, Obj, ObjKind, QpParts,
};
use crate::error::{Error, Result};
use crate::gpu::{Allocator, GpuBuf, Object, RingHome};
use crate::ionic::wire;
use crate::mlx5::queue::{MAX_LOG_DEPTH, MIN_LOG_DEPTH};
use std::sync::{Arc, Mutex};

/// Inline bytes of one 64-byte send WQE (the two SGEs' 32 bytes at @32:
/// docs/nic-families.md §3, ionic_verbs.c `ionic_v1_prep_inline`).
pub const MAX_INLINE: u32 = 32;
/// `IONIC_PD_TAG` = RDMA_DRIVER_IONIC << 32, `_CQ` | 1, `_SQ` | 2, `_RQ` | 3
/// (ionic.h:44-48 at PR 1771); RDMA_DRIVER_IONIC = 29
/// (kernel-headers/rdma/ib_user_ioctl_verbs.h, enum rdma_driver_id).
pub const PD_TAG: u64 = 29 << 32;
pub const PD_TAG_CQ: u64 = PD_TAG | 1;
pub const PD_TAG_SQ: u64 = PD_TAG | 2;
pub const PD_TAG_RQ: u64 = PD_TAG | 3;
/// `IONIC_DBELL_QID_SHIFT` (ionic_queue.h:17): a queue's `db_val` is its
/// qid << 24 (`ionic_queue_dbell_init`, ionic_queue.h:212-216).
pub const DBELL_QID_SHIFT: u32 = 24;
/// The receive queue asked for: the smallest (no receives are posted).
pub const RQ_WRS: u32 = 1;

/// The queue memory libionic asks the parent domain for: this crate's
/// GPU-visible allocations, kept until libionic frees them.
pub(crate) struct RingPool {
    alloc: Arc<dyn Allocator>,
    /// Where the next rings go (set by create_qp under `creating`).
    home: Mutex<RingHome>,
    bufs: Mutex<Vec<GpuBuf>>,
    name: String,
}

impl RingPool {
    /// The device address of an address libionic holds, if it is one of ours.
    pub fn dev_addr(&self, addr: usize, len: usize) -> Option<u64> {
        let bufs = self.bufs.lock().unwrap_or_else(|e| e.into_inner());
        bufs.iter().find_map(|b| {
            let base = nic_addr(b) as usize;
            (addr >= base && addr + len <= base + b.len()).then(|| b.dev_addr() + (addr - base) as u64)
        })
    }
}

impl DomainMemory for RingPool {
    fn alloc(&self, len: usize, align: usize, tag: u64) -> Option<usize> {
        let home = *self.home.lock().unwrap_or_else(|e| e.into_inner());
        let object = if tag == PD_TAG_CQ { Object::CompletionRing(home) } else { Object::SendRing(home) };
        let b = match self.alloc.alloc(len, align.max(4096), object) {
            Ok(b) => b,
            Err(e) => {
                crate::warn_line!("{}: queue ring of {len} bytes for libionic (tag {tag:#x}): {e}", self.name);
                return None;
            }
        };
        if let Err(e) = b.try_write(0, &vec![0u8; len]) {
            crate::warn_line!("{}: zeroing a queue ring: {e}", self.name);
            return None;
        }
        let a = nic_addr(&b) as usize;
        self.bufs.lock().unwrap_or_else(|e| e.into_inner()).push(b);
        Some(a)
    }
    fn free(&self, addr: usize) {
        let mut bufs = self.bufs.lock().unwrap_or_else(|e| e.into_inner());
        bufs.retain(|b| nic_addr(b) as usize != addr);
    }
}

/// Per-NIC state: the parent domain over the ring pool, the doorbell page.
pub(crate) struct IonicOps {
    // Drop order: the doorbell mapping, then the parent domain (after every
    // QP and CQ created on it: each NicQp holds it), then the pool.
    db: Arc<DoorbellPage>,
    domain: Arc<Obj>,
    pool: Arc<RingPool>,
    dv: IonicDvCtx,
    /// The firmware WQE ABI version the device writes (gates.rs).
    wqe_abi: u32,
    /// The device's uDMA engines (`ionic_dv_ctx_get_udma_mask`).
    udma_mask: u8,
    /// QPs created so far (one at a time: the ring pool's home and the
    /// domain's uDMA mask are set for the QP being created).
    creating: Mutex<usize>,
}

impl IonicOps {
    pub(crate) fn open(ctx: &Arc<DvContext>, memory: &Memory) -> Result<IonicOps> {
        let p = &ctx.platform;
        let name = &ctx.name;
        let pool = Arc::new(RingPool {
            alloc: memory.allocator(),
            home: Mutex::new(RingHome::Host),
            bufs: Mutex::new(Vec::new()),
            name: name.clone(),
        });
        let domain = p
            .ionic_alloc_parent_domain(ctx.ctx.handle(), ctx.pd.handle(), pool.clone())
            .map_err(|e| Error::System(format!("{name}: ibv_alloc_parent_domain (queue memory for the GPU): {e}")))?;
        let domain = Arc::new(Obj::new(p, domain, ObjKind::ParentDomain));
        for send in [true, false] {
            p.ionic_pd_set_cmb(domain.handle(), send, false, false, false).map_err(|e| {
                Error::System(format!(
                    "{name}: ionic_dv_pd_set_{}cmb(off): {e} (libionic without direct verbs?)",
                    if send { "sq" } else { "rq" }
                ))
            })?;
        }
        let dv = p.ionic_get_ctx(ctx.ctx.handle()).map_err(|e| {
            Error::System(format!("{name}: ionic_dv_get_ctx: {e} (libionic without rdma-core PR 1771's direct verbs?)"))
        })?;
        let wqe_abi = wqe_abi_of(ctx, &dv)?;
        let udma_mask = p
            .ionic_ctx_udma_mask(ctx.ctx.handle())
            .map_err(|e| Error::System(format!("{name}: ionic_dv_ctx_get_udma_mask: {e}")))?;
        if udma_mask == 0 {
            return Err(Error::System(format!("{name}: ionic_dv_ctx_get_udma_mask says the device has no uDMA engine")));
        }
        let db = Arc::new(DoorbellPage::map(memory, dv.db_page, name)?);
        Ok(IonicOps { db, domain, pool, dv, wqe_abi, udma_mask, creating: Mutex::new(0) })
    }

    fn doorbell(&self, qtype: u8) -> u64 {
        self.db.dev(self.dv.db_ptr + 8 * qtype as usize)
    }

    /// The device address of a ring libionic laid out, which must be ours.
    fn ring(&self, name: &str, what: &str, q: &IonicDvQueue) -> Result<u64> {
        self.pool.dev_addr(q.ptr, q.size).ok_or_else(|| {
            Error::System(format!(
                "{name}: libionic put the {what} ({} bytes at {:#x}) outside the GPU-visible memory its parent domain \
                 handed out (controller memory bar, or its own anonymous pages); the GPU cannot reach it",
                q.size, q.ptr
            ))
        })
    }
}

/// The firmware WQE ABI version of the context (the alloc-ucontext
/// response's `version`, which libionic keeps in its private context and no
/// direct verb reports), read where ionic.h puts it and trusted only when
/// the queue types beside it are the ones ionic_dv_get_ctx reported; then
/// gated (gates::ionic_wqe_abi): 1 or 2, else the NIC is refused.
fn wqe_abi_of(ctx: &DvContext, dv: &IonicDvCtx) -> Result<u32> {
    let name = &ctx.name;
    let p = ctx.platform.ionic_ctx_private(ctx.ctx.handle()).map_err(|e| {
        Error::System(format!("{name}: reading libionic's firmware WQE ABI version: {e}"))
    })?;
    if (p.sq_qtype, p.rq_qtype, p.cq_qtype) != (dv.sq_qtype, dv.rq_qtype, dv.cq_qtype) || !(12..=21).contains(&p.pg_shift) {
        return Err(Error::System(format!(
            "{name}: libionic's context does not have the layout of rdma-core PR 1771's ionic.h (queue types {}/{}/{}              and page shift {} where ionic_dv_get_ctx says {}/{}/{}), so its firmware WQE ABI version cannot be read;              refusing rather than guess the opcode table (docs/nic-families.md, \"Firmware and ABI gates\")",
            p.sq_qtype, p.rq_qtype, p.cq_qtype, p.pg_shift, dv.sq_qtype, dv.rq_qtype, dv.cq_qtype
        )));
    }
    let v = crate::nic::gates::ionic_wqe_abi(name, p.version as i64)?;
    crate::info_line!(INIT, "{name}: ionic firmware WQE ABI version {v}: WQEs use the v{v} opcode table");
    Ok(v)
}

fn check_queue(name: &str, what: &str, q: &IonicDvQueue, stride_log2: u8, at_least: u32) -> Result<u32> {
    let depth = q.mask as u32 + 1;
    if q.stride_log2 != stride_log2 {
        return Err(Error::System(format!(
            "{name}: libionic chose {}-byte entries for the {what}; the device policy (ionic/family.h) uses {}",
            1u32 << q.stride_log2,
            1u32 << stride_log2
        )));
    }
    if !depth.is_power_of_two() || depth < at_least || q.depth_log2 as u32 != depth.trailing_zeros() {
        return Err(Error::System(format!(
            "{name}: the {what} has mask {:#x} (depth_log2 {}); expected a power of two of at least {at_least}",
            q.mask, q.depth_log2
        )));
    }
    Ok(depth.trailing_zeros())
}

impl FamilyOps for IonicOps {
    fn create_qp(&self, nic: &DvNic, log_depth: u32, traffic_class: u8, rings_in_device_memory: bool) -> Result<NicQp> {
        let ctx = &nic.ctx;
        let name = &ctx.name;
        let p = &ctx.platform;
        let wqes = 1u32 << log_depth.clamp(MIN_LOG_DEPTH, MAX_LOG_DEPTH);
        let home = if rings_in_device_memory { RingHome::Device } else { RingHome::Host };
        let mut created = self.creating.lock().unwrap_or_else(|e| e.into_inner());
        *self.pool.home.lock().unwrap_or_else(|e| e.into_inner()) = home;
        // Both uDMA engines: this QP and its CQ on the next one in turn.
        let engine = crate::nic::quirks::ionic_udma_engine(self.udma_mask, *created).unwrap_or(0);
        p.ionic_pd_set_udma_mask(self.domain.handle(), 1 << engine)
            .map_err(|e| Error::System(format!("{name}: ionic_dv_pd_set_udma_mask({:#x}): {e}", 1u8 << engine)))?;
        let cq = Obj::new(
            p,
            p.ionic_create_cq(ctx.ctx.handle(), self.domain.handle(), wqes)
                .map_err(|e| Error::System(format!("{name}: ibv_create_cq_ex on the parent domain ({wqes} CQEs): {e}")))?,
            ObjKind::Cq,
        );
        let attr = IonicQpInit { max_send_wr: wqes, max_recv_wr: RQ_WRS, max_inline_data: MAX_INLINE };
        let (qp, qpn) = p
            .ionic_create_qp(self.domain.handle(), cq.handle(), &attr)
            .map_err(|e| Error::System(format!("{name}: ibv_create_qp on the parent domain ({wqes} WQEs): {e}")))?;
        let qp = Obj::new(p, qp, ObjKind::Qp);
        p.ionic_qp_set_gda(qp.handle(), true, true).map_err(|e| {
            Error::System(format!(
                "{name}: ionic_dv_qp_set_gda(QP {qpn:#x}, send, recv): {e}; without GPU-direct-async mode the GPU's \
                 doorbells have no effect (ROCm/mori PR 588)"
            ))
        })?;
        let udma = p.ionic_qp_get_udma_idx(qp.handle()).map_err(|e| Error::System(format!("{name}: ionic_dv_qp_get_udma_idx: {e}")))?;
        if udma != engine {
            return Err(Error::System(format!(
                "{name}: libionic put QP {qpn:#x} on uDMA engine {udma} although its domain allows only {engine} \
                 (ionic_dv_pd_set_udma_mask not honoured)"
            )));
        }
        let cqq = p
            .ionic_get_cq(cq.handle(), udma)
            .map_err(|e| Error::System(format!("{name}: ionic_dv_get_cq(udma {udma}): {e}")))?;
        let (_rq, sq) = p.ionic_get_qp(qp.handle()).map_err(|e| Error::System(format!("{name}: ionic_dv_get_qp: {e}")))?;
        let log_wqe_cnt = check_queue(name, "send queue", &sq, wire::WQE_BYTES.trailing_zeros() as u8, wqes)?;
        let log_cq_cnt = check_queue(name, "CQ", &cqq, wire::CQE_BYTES.trailing_zeros() as u8, wqes)?;
        let wqe_buf = self.ring(name, "send ring", &sq)?;
        let cq_buf = self.ring(name, "CQ ring", &cqq)?;
        let qid = |q: &IonicDvQueue| (q.db_val >> DBELL_QID_SHIFT) as u32;
        crate::info_line!(
            NET,
            "{name}: ionic QP {qpn:#x} (SQ qid {:#x}, CQ qid {:#x}, udma {udma}, GDA on, {} WQEs, {} CQEs, rings in \
             {home:?} memory of {})",
            qid(&sq),
            qid(&cqq),
            1u32 << log_wqe_cnt,
            1u32 << log_cq_cnt,
            self.pool.alloc.describe()
        );
        let parts = QpParts {
            qp,
            cq,
            keep: vec![self.domain.clone()],
            doorbell: self.db.clone(),
            qp_num: qpn,
            sq_qid: qid(&sq),
            cq_qid: qid(&cqq),
            wqe_buf,
            log_wqe_cnt,
            cq_buf,
            log_cq_cnt,
            sq_db: self.doorbell(self.dv.sq_qtype),
            cq_db: self.doorbell(self.dv.cq_qtype),
            cq_phase: 0,
            wqe_abi: self.wqe_abi,
        };
        let tc_file = crate::nic::quirks::sysfs_traffic_class_path(name, ctx.port);
        let (tc, source) = crate::nic::quirks::ionic_traffic_class(p.read_sysfs(&tc_file).ok().as_deref(), traffic_class);
        crate::info_line!(NET, "{name}: ionic QP {qpn:#x} traffic class {tc} (from {source:?}: {tc_file})");
        let q = NicQp::new(ctx, parts, Vec::new(), self.pool.alloc.as_ref(), tc)?;
        *created += 1;
        Ok(q)
    }
}
