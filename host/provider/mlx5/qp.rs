//! One RC queue pair or DC initiator built with DevX over [`QueueMem`]: the
//! send ring, the CQ ring and the doorbell records are umems in memory the
//! kernel (device code) reaches, the doorbell is a UAR page (shared as
//! UarPool says), mapped for the GPU. The device code posts, rings and
//! polls; the host only creates, connects and destroys. A DCI is the same
//! queue with `st` = DCI, twice the WQEBBs per WQE (mlx5::queue::
//! DC_WQE_SHIFT) and no remote: it goes to RTS when created.

use super::addr::{self, GidType, LinkLayer, Mlx5Address};
use super::counters::QueueCounters;
use super::device::Context;
use super::devx::{Obj, Uar, Umem};
use super::platform::{AhAttr, DeviceMapping, GpuAccess};
use super::prm;
use crate::error::{Error, Result};
use crate::gpu::{Allocator, GpuBuf, RingHome};
use crate::mlx5::queue::{QueueMem, CQ_DBREC_OFF, QP_DBREC_OFF};
use crate::mlx5::wire::CQE_SIZE;
use crate::provider::{NicAddress, QueueDescriptor, QueuePair};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Connection parameters (docs/mlx5-provider.md says why these values).
pub const ACK_TIMEOUT: u8 = 20; // 4.096 us * 2^20 = 4.3 s, NCCL_IB_TIMEOUT's default
pub const RETRY_COUNT: u8 = 7;
pub const RNR_RETRY: u8 = 7;
pub const MIN_RNR_NAK: u8 = 12; // 0.64 ms; unused (no receive queue), required by INIT2RTR
pub const HOP_LIMIT: u8 = 255;
/// At most 16 RDMA READs / atomics outstanding in each direction.
pub const MAX_RD_ATOMIC: i32 = 16;

/// Where the doorbell register is for the device code.
pub(crate) enum Doorbell {
    /// Mapped for a GPU (hipHostRegister IoMemory).
    Gpu(Box<dyn DeviceMapping>),
    /// The CPU mapping itself (host-side posting).
    Host(u64),
}

impl Doorbell {
    fn addr(&self) -> u64 {
        match self {
            Doorbell::Gpu(m) => m.dev_addr(),
            Doorbell::Host(a) => *a,
        }
    }

    /// How the device library's host build rings it: real MMIO through the
    /// CPU mapping; none for the GPU mapping (a host ring of a GPU-only queue
    /// is counted as unowned, never stored).
    fn host_port(&self) -> u64 {
        match self {
            Doorbell::Gpu(_) => 0,
            Doorbell::Host(_) => super::doorbell::host_mmio(),
        }
    }
}

/// How queue memory is reached: through HIP for a GPU, or plain host memory
/// for host-side posting.
#[derive(Clone)]
pub(crate) enum Memory {
    Gpu(Arc<dyn GpuAccess>),
    Host(Arc<dyn Allocator>),
}

impl Memory {
    pub fn allocator(&self) -> Arc<dyn Allocator> {
        match self {
            Memory::Gpu(g) => g.allocator(),
            Memory::Host(a) => a.clone(),
        }
    }
}

pub(crate) struct Mlx5Qp {
    // Drop order is declaration order, the reverse of creation (as on the
    // error paths of create): the GPU mapping of the doorbell, the QP, its
    // CQ, the umems under them, the UAR, the memory, and last the device
    // context.
    doorbell: Doorbell,
    qp: Obj,
    _cq: Obj,
    _umem_dbr: Umem,
    _umem_cq: Umem,
    _umem_sq: Umem,
    uar: Arc<Uar>,
    mem: QueueMem,
    /// The NIC's queue-counter set this QP counts into, freed after it.
    _counters: Option<Arc<QueueCounters>>,
    ctx: Arc<Context>,
    qpn: u32,
    cqn: u32,
    traffic_class: u8,
    connected: AtomicBool,
    /// A DC initiator (descriptor with wqe_shift 1, no connect).
    dci: bool,
}

/// What [`Mlx5Qp::create_as`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QpKind {
    Rc,
    Dci,
}

/// The address the NIC uses for a buffer: its host mapping when it has one
/// (pinned host memory), else its GPU address (device memory, reached by the
/// NIC through peer memory).
fn nic_addr(b: &GpuBuf) -> u64 {
    b.host_addr().map(|a| a as u64).unwrap_or(b.dev_addr())
}

impl Mlx5Qp {
    pub fn create(
        ctx: &Arc<Context>,
        memory: &Memory,
        eqn: u32,
        log_depth: u32,
        traffic_class: u8,
        rings: RingHome,
        counters: Option<&Arc<QueueCounters>>,
    ) -> Result<Mlx5Qp> {
        Self::create_as(ctx, memory, eqn, log_depth, traffic_class, rings, QpKind::Rc, counters)
    }

    /// A DC initiator of 2^log_depth WQEs (twice the WQEBBs), in RTS:
    /// CREATE_QP (st = DCI), RST2INIT, INIT2RTR, RTR2RTS.
    pub fn create_dci(
        ctx: &Arc<Context>,
        memory: &Memory,
        eqn: u32,
        log_depth: u32,
        traffic_class: u8,
        rings: RingHome,
        counters: Option<&Arc<QueueCounters>>,
    ) -> Result<Mlx5Qp> {
        let q = Self::create_as(
            ctx,
            memory,
            eqn,
            log_depth + crate::mlx5::queue::DC_WQE_SHIFT,
            traffic_class,
            rings,
            QpKind::Dci,
            counters,
        )?;
        let what = |t: &str| format!("{t} of DC initiator {:#x}", q.qpn);
        q.qp.modify(&ctx.name, &what("RST2INIT"), &prm::rst2init_dci(q.qpn, ctx.port))?;
        q.qp.modify(
            &ctx.name,
            &what("INIT2RTR"),
            &prm::init2rtr_dci(q.qpn, ctx.port, ctx.active_mtu, ctx.log_msg_max()),
        )?;
        q.qp.modify(&ctx.name, &what("RTR2RTS"), &prm::rtr2rts(&rts_args(ctx, q.qpn)))?;
        q.connected.store(true, Ordering::Release);
        Ok(q)
    }

    #[allow(clippy::too_many_arguments)]
    fn create_as(
        ctx: &Arc<Context>,
        memory: &Memory,
        eqn: u32,
        log_depth: u32,
        traffic_class: u8,
        rings: RingHome,
        kind: QpKind,
        counters: Option<&Arc<QueueCounters>>,
    ) -> Result<Mlx5Qp> {
        let name = &ctx.name;
        let alloc = memory.allocator();
        let mem = QueueMem::new(alloc.as_ref(), log_depth, rings)
            .map_err(|e| Error::System(format!("{name}: queue memory ({}): {e}", alloc.describe())))?;
        // Every CQE starts invalid and hardware-owned (op_own 0xF1), as
        // rocSHMEM's mlx5_initialize_cq_buffer does; the device code polls
        // by owner bit from consumer index 0.
        mem.cq
            .try_write(0, &vec![0xF1u8; CQE_SIZE << mem.log_cq_cnt])
            .map_err(|e| Error::System(format!("{name}: initialising the CQ ring: {e}")))?;

        let uar = ctx.uars.get(ctx)?;
        // SAFETY: `mem` outlives the umems: Mlx5Qp declares it after them (so
        // drops it later), and on the error paths below the locals drop in
        // reverse order (objects, umems, UAR, then memory).
        let umem_sq = unsafe { Umem::register(ctx, nic_addr(&mem.sq), mem.sq.len(), "send queue ring")? };
        // SAFETY: as above.
        let umem_cq = unsafe { Umem::register(ctx, nic_addr(&mem.cq), mem.cq.len(), "completion queue ring")? };
        // SAFETY: as above.
        let umem_dbr = unsafe { Umem::register(ctx, nic_addr(&mem.dbr), mem.dbr.len(), "doorbell records")? };

        let (cq, out) = Obj::create(
            ctx,
            if kind == QpKind::Dci { "CREATE_CQ (DC initiator)" } else { "CREATE_CQ" },
            &prm::create_cq(&prm::CqArgs {
                log_cq_size: mem.log_cq_cnt,
                uar_page: uar.page_id,
                eqn,
                cq_umem_id: umem_cq.id,
                cq_umem_offset: 0,
                dbr_umem_id: umem_dbr.id,
                dbr_offset: CQ_DBREC_OFF as u64,
            }),
        )?;
        let cqn = prm::get(&out, prm::create_cq_out::CQN) as u32;
        let args = prm::QpArgs {
            pdn: ctx.pdn,
            log_sq_size: mem.log_wqe_cnt,
            uar_page: uar.page_id,
            cqn,
            wq_umem_id: umem_sq.id,
            dbr_umem_id: umem_dbr.id,
            dbr_offset: QP_DBREC_OFF as u64,
            counter_set_id: counters.map_or(0, |c| c.id),
        };
        let (qp, out) = match kind {
            QpKind::Rc => Obj::create(ctx, "CREATE_QP", &prm::create_qp(&args))?,
            QpKind::Dci => Obj::create(ctx, "CREATE_QP (DC initiator)", &prm::create_dci(&args))?,
        };
        let qpn = prm::get(&out, prm::create_qp_out::QPN) as u32;
        let doorbell = match memory {
            Memory::Gpu(h) => Doorbell::Gpu(
                h.map_io(uar.reg_addr, 8).map_err(|e| Error::System(format!("{name}: QP {qpn:#x} doorbell: {e}")))?,
            ),
            Memory::Host(_) => Doorbell::Host(uar.reg_addr as u64),
        };
        crate::info_line!(
            NET,
            "{name}: DevX {} {qpn:#x} (CQ {cqn:#x}, {} WQEBBs, {} UAR page {}, rings in {:?} memory of {})",
            if kind == QpKind::Dci { "DC initiator" } else { "QP" },
            1u32 << mem.log_wqe_cnt,
            if uar.dedicated { "dedicated" } else { "shared" },
            uar.page_id,
            rings,
            alloc.describe()
        );
        Ok(Mlx5Qp {
            qp,
            _cq: cq,
            _umem_sq: umem_sq,
            _umem_cq: umem_cq,
            _umem_dbr: umem_dbr,
            doorbell,
            uar,
            mem,
            _counters: counters.cloned(),
            ctx: ctx.clone(),
            qpn,
            cqn,
            traffic_class,
            connected: AtomicBool::new(false),
            dci: kind == QpKind::Dci,
        })
    }
}

/// RTR2RTS of an RC QP or a DCI: send PSN 0, the device's outstanding
/// READ/atomic limit, retries and the ACK timeout.
fn rts_args(ctx: &Context, qpn: u32) -> prm::RtsArgs {
    prm::RtsArgs {
        qpn,
        next_send_psn: 0,
        log_sra_max: log2_rd_atomic(ctx.max_qp_init_rd_atom),
        retry_count: RETRY_COUNT,
        rnr_retry: RNR_RETRY,
        ack_timeout: ACK_TIMEOUT,
    }
}

fn log2_rd_atomic(n: i32) -> u8 {
    (31 - (n.clamp(1, MAX_RD_ATOMIC) as u32).leading_zeros()) as u8
}

/// The remote MAC for a RoCE path, resolved by the kernel through an
/// address handle (as NCCL's DOCA host code does: ibv_create_ah, then
/// mlx5dv_init_obj(MLX5DV_OBJ_AH) for the AV's rmac).
pub(crate) fn resolve_rmac(ctx: &Context, remote: &Mlx5Address, traffic_class: u8) -> Result<[u8; 6]> {
    {
        let attr = AhAttr {
            dgid: remote.gid,
            sgid_index: ctx.gid_index,
            hop_limit: HOP_LIMIT,
            traffic_class,
            port: ctx.port,
        };
        let ah = ctx.platform.create_ah(ctx.pd, &attr).map_err(|e| {
            Error::System(format!(
                "{}: resolving the peer's MAC address (ibv_create_ah towards GID index {} of the peer): {e}; is the \
                 peer's IP reachable from this interface?",
                ctx.name, remote.gid_index
            ))
        })?;
        let mac = ctx.platform.ah_rmac(ah);
        if let Err(e) = ctx.platform.destroy_ah(ah) {
            tracing::warn!("{}: ibv_destroy_ah: {e}", ctx.name);
        }
        mac.map_err(|e| Error::System(format!("{}: mlx5dv_init_obj(AH) for the peer's MAC failed: {e}", ctx.name)))
    }
}

impl QueuePair for Mlx5Qp {
    fn qpn(&self) -> u32 {
        self.qpn
    }

    fn connect(&self, remote: &NicAddress, remote_qpn: u32) -> Result<()> {
        let ctx = &self.ctx;
        let local = ctx.address();
        let peer = Mlx5Address::decode(remote)?;
        addr::check_peer(&local, &peer)?;
        if self.dci {
            return Err(Error::InvalidUsage(format!(
                "{}: DC initiator {:#x} has no remote to connect to (every WQE names its target)",
                ctx.name, self.qpn
            )));
        }
        if remote_qpn == 0 || remote_qpn > 0xff_ffff {
            return Err(Error::InvalidArgument(format!("remote QP number {remote_qpn:#x} is not a 24-bit QPN")));
        }
        if self.connected.swap(true, Ordering::AcqRel) {
            // A failed transition leaves the QP half-way: a retry needs a new QP.
            return Err(Error::InvalidUsage(format!("{}: connect was already called on QP {:#x}", ctx.name, self.qpn)));
        }
        let path = match local.link_layer {
            LinkLayer::Infiniband => prm::PathArgs::Ib { rlid: peer.lid, sl: 0 },
            LinkLayer::Ethernet => {
                let flow_label = addr::calc_flow_label(self.qpn, remote_qpn);
                prm::PathArgs::Roce {
                    rgid: peer.gid,
                    sgid_index: ctx.gid_index,
                    hop_limit: HOP_LIMIT,
                    traffic_class: self.traffic_class,
                    flow_label,
                    rmac: resolve_rmac(ctx, &peer, self.traffic_class)?,
                    udp_sport: (ctx.gid_type == GidType::RoceV2).then(|| addr::flow_label_to_udp_sport(flow_label)),
                    eth_prio: 0,
                }
            }
        };
        let what = |t: &str| format!("{t} of QP {:#x} (towards QP {remote_qpn:#x})", self.qpn);
        self.qp.modify(&ctx.name, &what("RST2INIT"), &prm::rst2init(self.qpn, ctx.port))?;
        self.qp.modify(
            &ctx.name,
            &what("INIT2RTR"),
            &prm::init2rtr(&prm::RtrArgs {
                qpn: self.qpn,
                remote_qpn,
                port: ctx.port,
                mtu: addr::path_mtu(&local, &peer),
                log_msg_max: ctx.log_msg_max(),
                log_rra_max: log2_rd_atomic(ctx.max_qp_rd_atom),
                min_rnr_nak: MIN_RNR_NAK,
                next_rcv_psn: 0,
                path,
            }),
        )?;
        self.qp.modify(&ctx.name, &what("RTR2RTS"), &prm::rtr2rts(&rts_args(ctx, self.qpn)))?;
        crate::info_line!(
            NET,
            "{}: QP {:#x} connected to QP {remote_qpn:#x} ({:?}, path MTU {} bytes)",
            ctx.name,
            self.qpn,
            local.link_layer,
            addr::mtu_bytes(addr::path_mtu(&local, &peer))
        );
        Ok(())
    }

    /// A DCI's is what the emulated provider's DCIs have (QueueMem::
    /// dci_descriptor: wqe_shift 1, no dc_targets yet) with `peer` kept.
    fn descriptor(&self, peer: u32, error: u64, timeout_ns: u64) -> QueueDescriptor {
        let (db, host) = (self.doorbell.addr(), self.doorbell.host_port());
        if self.dci {
            let mut d = self.mem.dci_descriptor(self.qpn, self.cqn, db, host, error, timeout_ns, 0);
            d.peer = peer;
            return QueueDescriptor::Mlx5(d);
        }
        QueueDescriptor::Mlx5(self.mem.descriptor(self.qpn, self.cqn, db, host, peer, error, timeout_ns))
    }

    fn log_slots(&self) -> u32 {
        self.mem.log_wqe_cnt
    }

    fn mlx5_memory(&self) -> Option<&QueueMem> {
        Some(&self.mem)
    }
}

impl Drop for Mlx5Qp {
    fn drop(&mut self) {
        tracing::debug!("{}: destroying QP {:#x} (UAR page {})", self.ctx.name, self.qpn, self.uar.page_id);
    }
}
