//! Completions: in order, a CQE where asked and for every error, and the
//! error state that flushes everything behind a failure.

use super::*;

impl Inner {
    /// The QP moves to the error state: in-flight WQEs behind the failed one
    /// (and every later one) complete with flush errors.
    pub(super) fn enter_error(&self, qp: &mut Qp) {
        if qp.state != QpState::Error {
            tracing::debug!(qpn = qp.qpn, "emulated NIC: QP enters the error state");
        }
        qp.state = QpState::Error;
        let mut seen_error = false;
        for e in qp.inflight.iter_mut() {
            if matches!(e.status, Status::Err(_)) {
                seen_error = true;
            } else if seen_error && matches!(e.status, Status::Pending) {
                e.status = Status::Err(syndrome::WR_FLUSH_ERR);
            }
        }
    }

    pub(super) fn fail_qp(&self, qp: &mut Qp, synd: u8, opcode: u8, why: &str) {
        tracing::warn!(qpn = qp.qpn, why, "emulated NIC: QP error");
        push_done(qp, qp.ci as u16, true, opcode, Status::Err(synd));
        self.enter_error(qp);
    }

    /// Completes finished WQEs in order, writing CQEs where asked and for errors.
    pub(super) fn complete(&self, st: &mut State, qpn: u32) -> bool {
        let mut progress = false;
        loop {
            let Some(qp) = st.qps.get_mut(&qpn) else { return progress };
            let Some(front) = qp.inflight.front() else { return progress };
            let (byte_cnt, synd) = match front.status {
                Status::Pending => return progress,
                Status::Ok { byte_cnt } => (byte_cnt, None),
                Status::Err(s) => (0, Some(s)),
            };
            let e = qp.inflight.pop_front().expect("front");
            let cq = qp.spec.send_cq;
            progress = true;
            if let Some(s) = synd {
                if qp.state != QpState::Error {
                    self.enter_error(qp);
                }
                let cqe = Cqe {
                    opcode: cqe_opcode::REQ_ERR,
                    qpn,
                    wqe_counter: e.index,
                    byte_cnt: 0,
                    syndrome: s,
                    vendor_syndrome: if s == syndrome::WR_FLUSH_ERR { 0xf9 } else { 0x80 },
                    wqe_opcode: e.opcode,
                    imm: 0,
                };
                bump(&self.counters.error_cqes, 1);
                self.write_cqe(st, cq, &cqe);
            } else if e.signaled {
                let cqe = Cqe {
                    opcode: cqe_opcode::REQ,
                    qpn,
                    wqe_counter: e.index,
                    byte_cnt,
                    syndrome: 0,
                    vendor_syndrome: 0,
                    wqe_opcode: 0,
                    imm: 0,
                };
                self.write_cqe(st, cq, &cqe);
            }
        }
    }

    pub(super) fn write_cqe(&self, st: &mut State, cqn: u32, cqe: &Cqe) {
        let Some(cq) = st.cqs.get_mut(&cqn) else { return };
        if self.config.fault == Some(crate::nic::PlantedFault::CollapsedCq) && cq.pi > 0 {
            return;
        }
        if cq.family.is_some() {
            return self.write_family_cqe(st, cqn, cqe);
        }
        let cnt = 1u64 << cq.spec.log_cnt;
        // SAFETY: the CQ doorbell record is valid per create_cq's contract.
        let ci24 = u32::from_be(unsafe { AtomicU32::from_ptr(cq.spec.dbrec as *mut u32) }.load(Ordering::Acquire))
            & 0xff_ffff;
        let ci = cq.pi - ((cq.pi as u32).wrapping_sub(ci24) & 0xff_ffff) as u64;
        if cq.pi - ci >= cnt {
            bump(&self.counters.cq_overruns, 1);
            tracing::error!(cqn, pi = cq.pi, ci, "emulated NIC: CQ overrun, CQE dropped");
            return;
        }
        let owner = wire::cqe_owner_for(cq.pi as u32, cq.spec.log_cnt);
        let bytes = cqe.encode(owner);
        let slot = cq.spec.buf + (cq.pi & (cnt - 1)) as usize * CQE_SIZE;
        // SAFETY: the CQE slot is inside the CQ ring (create_cq's contract);
        // op_own goes last with release so a poller never sees a torn CQE.
        unsafe {
            dma_write(slot as u64, &bytes[..63]);
            AtomicU8::from_ptr((slot + 63) as *mut u8).store(bytes[63], Ordering::Release);
        }
        cq.pi += 1;
        // Waiters park on the ring (the CQ's key), whichever slot this was.
        let ring = (cq.spec.buf as u64, cnt * CQE_SIZE as u64);
        st.written.push(ring);
        bump(&self.counters.cqes_written, 1);
    }
}

pub(super) fn push_done(qp: &mut Qp, index: u16, signaled: bool, opcode: u8, status: Status) {
    let msg = qp.next_msg;
    qp.next_msg += 1;
    qp.inflight.push_back(Inflight { msg, index, signaled, opcode, awaits: Await::None, status });
}
