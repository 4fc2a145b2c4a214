//! The memory of one RC queue pair as the device code and the NIC share it,
//! and the descriptor kernels read (abi::rust_gin_mlx5_sq). Provider-neutral:
//! the emulated NIC and the DevX provider both register these buffers.

use crate::abi::{rust_gin_mlx5_sq, rust_gin_mlx5_sq_state};
use crate::gpu::{Allocator, GpuBuf, Object, RingHome};
use crate::mlx5::wire::{CQE_SIZE, SEND_WQE_BB};

/// Offsets in the 64-byte doorbell-record block: the QP's be32[2] record and,
/// on its own 32 bytes, the CQ's.
pub const QP_DBREC_OFF: usize = 0;
pub const CQ_DBREC_OFF: usize = 32;

/// The byte of a context's 64-byte sink (atomic results at offset 0) that a
/// flush after READs has the NIC read (`rust_gin_mlx5_sq::flush_addr`): the
/// sink lives in device memory, where get destinations do.
pub const SINK_FLUSH_BYTE: u64 = 32;

/// log2 of the WQEBBs of one DC initiator WQE (ctrl + 48-byte datagram
/// segment + up to three more segments: 112 bytes, two WQEBBs).
pub const DC_WQE_SHIFT: u32 = 1;

/// Queue depths are clamped to this range (WQEBBs).
pub const MIN_LOG_DEPTH: u32 = 6;
pub const MAX_LOG_DEPTH: u32 = 15;

pub struct QueueMem {
    pub log_wqe_cnt: u32,
    pub log_cq_cnt: u32,
    /// The send queue ring (NIC-read).
    pub sq: GpuBuf,
    /// The completion ring (NIC-written).
    pub cq: GpuBuf,
    /// QP and CQ doorbell records.
    pub dbr: GpuBuf,
    /// Producer/consumer counters, touched by device code only.
    pub state: GpuBuf,
}

/// log2 of the queue depth for a requested number of WQEs (rounded up to a
/// power of two and clamped).
pub fn log_depth_for(requested: u32) -> u32 {
    let r = requested.max(1).next_power_of_two().trailing_zeros();
    r.clamp(MIN_LOG_DEPTH, MAX_LOG_DEPTH)
}

impl QueueMem {
    /// A queue of 2^log_wqe_cnt WQEBBs with a CQ of the same depth (enough
    /// for one CQE per WQE, which is what flushing after an error writes).
    pub fn new(alloc: &dyn Allocator, log_wqe_cnt: u32, rings: RingHome) -> std::io::Result<QueueMem> {
        let log_wqe_cnt = log_wqe_cnt.clamp(MIN_LOG_DEPTH, MAX_LOG_DEPTH);
        let log_cq_cnt = log_wqe_cnt;
        let sq = alloc.alloc(SEND_WQE_BB << log_wqe_cnt, 4096, Object::SendRing(rings))?;
        let cq = alloc.alloc(CQE_SIZE << log_cq_cnt, 4096, Object::CompletionRing(rings))?;
        let dbr = alloc.alloc(64, 64, Object::DoorbellRecords(rings))?;
        let state = alloc.alloc(std::mem::size_of::<rust_gin_mlx5_sq_state>(), 128, Object::QueueState)?;
        Ok(QueueMem { log_wqe_cnt, log_cq_cnt, sq, cq, dbr, state })
    }

    pub fn qp_dbrec(&self) -> u64 {
        self.dbr.dev_addr() + QP_DBREC_OFF as u64
    }
    pub fn cq_dbrec(&self) -> u64 {
        self.dbr.dev_addr() + CQ_DBREC_OFF as u64
    }

    /// What a kernel needs to post to this queue. `host_doorbell` is the
    /// provider's `rust_gin_host_doorbell` for host-side posting, or 0.
    #[allow(clippy::too_many_arguments)]
    pub fn descriptor(
        &self,
        qpn: u32,
        cqn: u32,
        uar_db: u64,
        host_doorbell: u64,
        peer: u32,
        error: u64,
        timeout_ns: u64,
    ) -> rust_gin_mlx5_sq {
        rust_gin_mlx5_sq {
            wqe_buf: self.sq.dev_addr(),
            dbrec: self.qp_dbrec(),
            uar_db,
            cq_buf: self.cq.dev_addr(),
            cq_dbrec: self.cq_dbrec(),
            state: self.state.dev_addr(),
            error,
            qpn,
            log_wqe_cnt: self.log_wqe_cnt,
            cqn,
            log_cq_cnt: self.log_cq_cnt,
            peer,
            // A CQE at least once per quarter of the queue (see sq.h).
            log_signal_period: self.log_wqe_cnt - 2,
            timeout_ns,
            flush_addr: 0,
            flush_lkey: 0,
            wqe_shift: 0,
            host_doorbell,
            counter_log: 0,
            counters: 0,
            dc_targets: 0,
        }
    }

    /// The descriptor of this queue as a DC initiator: every WQE (ticket)
    /// two WQEBBs, so the ring of 2^log_wqe_cnt WQEBBs holds half as many
    /// tickets; `dc_targets` is the context's rust_gin_dc_peer table
    /// (abi/mlx5_queue.h, wqe_shift and dc_targets).
    #[allow(clippy::too_many_arguments)]
    pub fn dci_descriptor(
        &self,
        qpn: u32,
        cqn: u32,
        uar_db: u64,
        host_doorbell: u64,
        error: u64,
        timeout_ns: u64,
        dc_targets: u64,
    ) -> rust_gin_mlx5_sq {
        let mut d = self.descriptor(qpn, cqn, uar_db, host_doorbell, u32::MAX, error, timeout_ns);
        d.wqe_shift = DC_WQE_SHIFT;
        d.log_wqe_cnt = self.log_wqe_cnt - DC_WQE_SHIFT;
        d.log_signal_period = d.log_wqe_cnt - 2;
        d.dc_targets = dc_targets;
        d
    }

    /// The device-side counters, for tests and diagnostics.
    pub fn state_snapshot(&self) -> rust_gin_mlx5_sq_state {
        self.state.read_pod(0)
    }
}
