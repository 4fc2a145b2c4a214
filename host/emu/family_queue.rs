//! A bnxt_re or ionic send queue on an emulated NIC, as those families'
//! providers lay one out for the GPU: the WQE ring, a CQ of 32-byte CQEs,
//! producer state and a doorbell page, described by the family-neutral
//! `rust_gin_nic_sq` the device library's family policies read.

use super::doorbell::HostDoorbell;
use super::nic::{EmuNic, FamilyCqSpec, FamilyQpSpec, NicError, QpState, QueueFormat};
use crate::abi::{rust_gin_mlx5_sq_state, rust_gin_nic_sq};
use crate::gpu::{Allocator, GpuBuf, Object, RingHome};

/// A family QP with its CQ; destroyed (QP, CQ, page) on drop.
pub struct EmuFamilyQp {
    nic: EmuNic,
    pub format: QueueFormat,
    pub qpn: u32,
    pub cqn: u32,
    pub page: usize,
    pub log_wqe_cnt: u32,
    /// bnxt_re: the path MTU the device code counts PSNs with (the NIC's).
    pub path_mtu: u32,
    /// ionic: the firmware WQE ABI version the NIC presents, as the
    /// descriptor names it (0 for bnxt_re).
    pub wqe_abi: u32,
    /// bnxt_re: the descriptor's doorbell grouping (0: a doorbell per WQE).
    pub doorbell_group: u32,
    pub sq: GpuBuf,
    pub cq: GpuBuf,
    pub state: GpuBuf,
    doorbell: HostDoorbell,
}

impl EmuFamilyQp {
    /// A ring of 2^log_wqe_cnt WQEs and a CQ of as many CQEs (enough for a
    /// CQE per WQE, which an error's flush writes).
    pub fn create(nic: &EmuNic, pd: u32, format: QueueFormat, log_wqe_cnt: u32, alloc: &dyn Allocator) -> Result<EmuFamilyQp, NicError> {
        let io = |e: std::io::Error| NicError::BadArgument(format!("queue memory: {e}"));
        // The ionic gate, as on hardware: the version the NIC presents, or
        // no queue (crate::nic::gates).
        let wqe_abi = match format {
            QueueFormat::Ionic => crate::nic::gates::ionic_wqe_abi(nic.name(), nic.ionic_abi() as i64)
                .map_err(|e| NicError::BadArgument(e.message().to_string()))?,
            QueueFormat::Bnxt => 0,
        };
        // bnxt_re: the MSN table right after the ring, one entry per WQE.
        let ring = format.wqe_stride() << log_wqe_cnt;
        let msn = if format == QueueFormat::Bnxt { 8 << log_wqe_cnt } else { 0 };
        let sq = alloc.alloc(ring + msn, 4096, Object::SendRing(RingHome::Host)).map_err(io)?;
        let cq = alloc.alloc(QueueFormat::CQE_BYTES << log_wqe_cnt, 4096, Object::CompletionRing(RingHome::Host)).map_err(io)?;
        let state = alloc.alloc(std::mem::size_of::<rust_gin_mlx5_sq_state>(), 128, Object::QueueState).map_err(io)?;
        let host = |b: &GpuBuf| b.host_addr().ok_or_else(|| NicError::BadArgument("the emulated NIC needs host-visible queue memory".into()));
        let page = nic.alloc_uar();
        // SAFETY: the CQ ring lives in self and outlives the CQ (destroyed in
        // drop before the memory is freed).
        let cqn = unsafe { nic.create_family_cq(FamilyCqSpec { format, buf: host(&cq)?, log_cnt: log_wqe_cnt })? };
        let msn_table = if msn > 0 { host(&sq)? + ring } else { 0 };
        let spec = FamilyQpSpec { format, pd, send_cq: cqn, sq_buf: host(&sq)?, log_wqe_cnt, db_page: page, msn_table };
        // SAFETY: as above, for the send ring.
        let qpn = unsafe { nic.create_family_qp(spec)? };
        let doorbell = nic.host_doorbell(qpn)?;
        let path_mtu = if msn > 0 { nic.mtu() as u32 } else { 0 };
        Ok(EmuFamilyQp { nic: nic.clone(), format, qpn, cqn, page, log_wqe_cnt, path_mtu, wqe_abi, doorbell_group: 0, sq, cq, state, doorbell })
    }

    /// INIT -> RTR (towards `remote`) -> RTS.
    pub fn connect(&self, remote_node: u32, remote_qpn: u32) -> Result<(), NicError> {
        self.nic.modify_qp(self.qpn, QpState::Init, None)?;
        self.nic.modify_qp(self.qpn, QpState::Rtr, Some((remote_node, remote_qpn)))?;
        self.nic.modify_qp(self.qpn, QpState::Rts, None)
    }

    /// The descriptor the device library's family policy reads.
    pub fn descriptor(&self, peer: u32, error: u64, timeout_ns: u64) -> rust_gin_nic_sq {
        let (sq_off, cq_off) = self.format.doorbell_offsets();
        rust_gin_nic_sq {
            wqe_buf: self.sq.dev_addr(),
            sq_db: (self.page + sq_off) as u64,
            cq_buf: self.cq.dev_addr(),
            cq_db: (self.page + cq_off) as u64,
            state: self.state.dev_addr(),
            error,
            qpn: self.qpn,
            log_wqe_cnt: self.log_wqe_cnt,
            cqn: self.cqn,
            log_cq_cnt: self.log_wqe_cnt,
            peer,
            log_signal_period: self.log_wqe_cnt.saturating_sub(2),
            timeout_ns,
            cq_phase: crate::bnxt::wire::CQ_START_PHASE,
            host_doorbell: self.doorbell.addr(),
            path_mtu: self.path_mtu,
            wqe_abi: self.wqe_abi,
            doorbell_group: self.doorbell_group,
            ..Default::default()
        }
    }
}

impl Drop for EmuFamilyQp {
    fn drop(&mut self) {
        let _ = self.nic.destroy_qp(self.qpn);
        let _ = self.nic.destroy_cq(self.cqn);
        self.nic.free_uar(self.page);
    }
}
