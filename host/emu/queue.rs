//! Bringing a [`QueueMem`] up on an emulated NIC, as the DevX provider does on
//! hardware: a CQ and an RC QP over the caller's buffers, a UAR page (its own,
//! or one shared with other QPs: RCCL_RUST_GIN_QPS_PER_UAR), and the
//! RESET -> INIT -> RTR -> RTS walk.

use super::doorbell::HostDoorbell;
use super::nic::{CqSpec, EmuNic, NicError, QpSpec, QpState};
use crate::abi::rust_gin_mlx5_sq;
use crate::mlx5::queue::QueueMem;
use crate::mlx5::wire::UAR_DB_OFFSET;
use std::sync::Arc;

/// A UAR page of an emulated NIC, freed when the last QP on it goes. QPs on
/// one page ring the same register; each doorbell names its QP, and each QP
/// is rung through its own host doorbell, so sharing changes no doorbell.
pub struct UarPage {
    nic: EmuNic,
    pub addr: usize,
}

impl UarPage {
    pub fn new(nic: &EmuNic) -> Arc<UarPage> {
        Arc::new(UarPage { nic: nic.clone(), addr: nic.alloc_uar() })
    }
}

impl Drop for UarPage {
    fn drop(&mut self) {
        self.nic.free_uar(self.addr);
    }
}

/// A QP on an emulated NIC; destroyed (QP, CQ, UAR) on drop.
pub struct EmuQp {
    nic: EmuNic,
    pub qpn: u32,
    pub cqn: u32,
    pub uar: usize,
    pub mem: QueueMem,
    /// How the device code's host build rings this QP (named in its descriptor).
    doorbell: HostDoorbell,
    /// Held until the QP is destroyed (dropped after `drop` ran).
    _page: Arc<UarPage>,
    /// A DC initiator (every WQE two WQEBBs, carrying its target).
    pub dci: bool,
}

impl EmuQp {
    /// A QP with a UAR page of its own.
    pub fn create(nic: &EmuNic, pd: u32, mem: QueueMem) -> Result<EmuQp, NicError> {
        Self::create_on(nic, pd, mem, UarPage::new(nic))
    }

    /// A QP on `page` (which may carry other QPs' doorbells too).
    pub fn create_on(nic: &EmuNic, pd: u32, mem: QueueMem, page: Arc<UarPage>) -> Result<EmuQp, NicError> {
        Self::create_as(nic, pd, mem, page, false)
    }

    /// A DC initiator on a UAR page of its own, INIT -> RTR -> RTS at once
    /// (it has no remote).
    pub fn create_dci(nic: &EmuNic, pd: u32, mem: QueueMem) -> Result<EmuQp, NicError> {
        Self::create_dci_on(nic, pd, mem, UarPage::new(nic))
    }

    /// A DC initiator on `page` (shared with other queues' doorbells).
    pub fn create_dci_on(nic: &EmuNic, pd: u32, mem: QueueMem, page: Arc<UarPage>) -> Result<EmuQp, NicError> {
        let qp = Self::create_as(nic, pd, mem, page, true)?;
        nic.modify_qp(qp.qpn, QpState::Init, None)?;
        nic.modify_qp(qp.qpn, QpState::Rtr, None)?;
        nic.modify_qp(qp.qpn, QpState::Rts, None)?;
        Ok(qp)
    }

    fn create_as(nic: &EmuNic, pd: u32, mem: QueueMem, page: Arc<UarPage>, dci: bool) -> Result<EmuQp, NicError> {
        let host = |b: &crate::gpu::GpuBuf| {
            b.host_addr().ok_or_else(|| NicError::BadArgument("the emulated NIC needs host-visible queue memory".into()))
        };
        let uar = page.addr;
        let cq_spec = CqSpec { buf: host(&mem.cq)?, log_cnt: mem.log_cq_cnt, dbrec: host(&mem.dbr)? + crate::mlx5::queue::CQ_DBREC_OFF };
        // SAFETY: the CQ ring and record belong to `mem`, which lives in self
        // and outlives the CQ (destroyed in drop before mem is freed).
        let cqn = unsafe { nic.create_cq(cq_spec)? };
        let qp_spec = QpSpec {
            pd,
            send_cq: cqn,
            recv_cq: None,
            sq_buf: host(&mem.sq)?,
            log_wqe_cnt: mem.log_wqe_cnt,
            dbrec: host(&mem.dbr)? + crate::mlx5::queue::QP_DBREC_OFF,
            uar,
        };
        // SAFETY: as above, for the send queue and its record.
        let qpn = unsafe { if dci { nic.create_dci(qp_spec)? } else { nic.create_qp(qp_spec)? } };
        let doorbell = nic.host_doorbell(qpn)?;
        Ok(EmuQp { nic: nic.clone(), qpn, cqn, uar, mem, doorbell, dci, _page: page })
    }

    /// INIT -> RTR (towards `remote`) -> RTS.
    pub fn connect(&self, remote_node: u32, remote_qpn: u32) -> Result<(), NicError> {
        self.nic.modify_qp(self.qpn, QpState::Init, None)?;
        self.nic.modify_qp(self.qpn, QpState::Rtr, Some((remote_node, remote_qpn)))?;
        self.nic.modify_qp(self.qpn, QpState::Rts, None)
    }

    pub fn doorbell_addr(&self) -> u64 {
        (self.uar + UAR_DB_OFFSET) as u64
    }

    /// A DC initiator's has wqe_shift 1 and no dc_targets yet (the owner of
    /// the target table sets them).
    pub fn descriptor(&self, peer: u32, error: u64, timeout_ns: u64) -> rust_gin_mlx5_sq {
        if self.dci {
            let mut d =
                self.mem.dci_descriptor(self.qpn, self.cqn, self.doorbell_addr(), self.doorbell.addr(), error, timeout_ns, 0);
            d.peer = peer;
            return d;
        }
        self.mem.descriptor(self.qpn, self.cqn, self.doorbell_addr(), self.doorbell.addr(), peer, error, timeout_ns)
    }
}

impl Drop for EmuQp {
    fn drop(&mut self) {
        let _ = self.nic.destroy_qp(self.qpn);
        let _ = self.nic.destroy_cq(self.cqn);
    }
}
