//! The responder side: executing a peer's requests against this NIC's
//! memory regions and answering them.

use super::*;
use crate::emu::guarded;
use crate::nic::PlantedFault;

impl Inner {
    pub(super) fn reply(&self, outbox: &mut Outbox, req: &Packet, body: Body) {
        let p = Packet {
            src_node: self.node(),
            dst_node: req.src_node,
            src_qpn: req.dst_qpn,
            dst_qpn: req.src_qpn,
            msg: req.msg,
            dc_key: 0,
            body,
        };
        if let Err(e) = self.send(outbox, p) {
            tracing::warn!(error = %e, "emulated NIC: cannot answer a request");
        }
    }

    /// The ACK of a WRITE, held until the step's end (or the QP's next
    /// other reply): a later WRITE's ACK of the same QP replaces it, as one
    /// coalesced ACK acknowledges every earlier message (on_response).
    fn defer_ack(&self, st: &mut State, req: &Packet) {
        let ack = Packet {
            src_node: self.node(),
            dst_node: req.src_node,
            src_qpn: req.dst_qpn,
            dst_qpn: req.src_qpn,
            msg: req.msg,
            dc_key: 0,
            body: Body::Ack,
        };
        let Some(qp) = st.qps.get_mut(&req.dst_qpn) else { return };
        if qp.pending_ack.replace(ack).is_none() {
            st.ack_qps.push(req.dst_qpn);
        }
    }

    /// Sends the QP's pending ACK now: before any other reply of the QP, so
    /// the requester sees its answers in message order.
    fn flush_ack(&self, st: &mut State, qpn: u32) {
        if let Some(ack) = st.qps.get_mut(&qpn).and_then(|q| q.pending_ack.take()) {
            if let Err(e) = self.send(&mut st.outbox, ack) {
                tracing::warn!(error = %e, "emulated NIC: cannot send an ACK");
            }
        }
    }

    /// Sends every pending ACK (the step's end).
    pub(super) fn flush_acks(&self, st: &mut State) {
        let mut qps = std::mem::take(&mut st.ack_qps);
        for &qpn in &qps {
            self.flush_ack(st, qpn);
        }
        qps.clear();
        st.ack_qps = qps; // keeps its capacity
    }

    /// Responder side: executes one request packet.
    pub(super) fn respond(&self, st: &mut State, p: &Packet) {
        // One lookup: the QP's protection domain and whether this message
        // already failed come with the acceptance check. A DC target (DCT)
        // accepts any initiator that presents its DC key.
        let qp = st.qps.get(&p.dst_qpn).filter(|q| {
            matches!(q.state, QpState::Rtr | QpState::Rts) && q.remote == Some((p.src_node, p.src_qpn))
        });
        let accepted = match qp.map(|q| (q.spec.pd, q.failed_msg)) {
            Some(a) => Some((a.0, a.1, false)),
            None => match st.dcts.get_mut(&p.dst_qpn) {
                Some(d) if d.key == p.dc_key => {
                    let failed = d.failed_msg.filter(|f| f.0 == p.src_node && f.1 == p.src_qpn).map(|f| (f.0, f.2));
                    Some((d.pd, failed, true))
                }
                Some(d) => {
                    // A DC key violation: the DCT drops the request and
                    // counts it (ConnectX: the DCT context's
                    // access_violations, async event DCT_KEY_VIOLATION =
                    // 0x1d in Linux include/linux/mlx5/device.h); the
                    // initiator hears nothing and retries until it gives up.
                    d.key_violations += 1;
                    None
                }
                None => None,
            },
        };
        let Some((pd, failed_msg, dct)) = accepted else {
            // A real responder drops it and the requester retries until it
            // gives up: report what the requester would end with.
            bump(&self.counters.packets_dropped, 1);
            if !matches!(&p.body, Body::Write { last: false, .. }) {
                self.reply(&mut st.outbox, p, Body::Nak { syndrome: syndrome::TRANSPORT_RETRY_EXC_ERR });
            }
            return;
        };
        // A DCT keeps no per-initiator state across messages but the message
        // that failed (its later packets are dropped).
        let mark_failed = |st: &mut State, msg: u64| {
            if dct {
                if let Some(d) = st.dcts.get_mut(&p.dst_qpn) {
                    d.failed_msg = Some((p.src_node, p.src_qpn, msg));
                }
            } else {
                st.qps.get_mut(&p.dst_qpn).expect("qp").failed_msg = Some((p.src_node, msg));
            }
        };
        match &p.body {
            Body::Write { raddr, rkey, total, offset, last, imm, data } => {
                let key = (p.src_node, p.src_qpn);
                let failed_before = failed_msg == Some((key.0, p.msg));
                if failed_before {
                    return;
                }
                let check = st.mrs.check_remote(pd, *rkey, *raddr, *total, Access::REMOTE_WRITE);
                if let Err(e) = check {
                    mark_failed(st, p.msg);
                    self.flush_ack(st, p.dst_qpn);
                    self.reply(&mut st.outbox, p, Body::Nak { syndrome: remote_syndrome(e) });
                    return;
                }
                let mut planted;
                let data = if self.config.fault == Some(PlantedFault::CorruptWrite) && *offset == 0 && !data.is_empty() {
                    planted = data.to_vec();
                    planted[0] ^= 0xff;
                    &planted[..]
                } else {
                    &data[..]
                };
                // SAFETY: [raddr, raddr+total) lies in a registered region, and
                // offset + len <= total by construction of the packets.
                if unsafe { mr_write(raddr + offset, data) }.is_err() {
                    // Registered but unmapped here: as an access violation.
                    mark_failed(st, p.msg);
                    self.flush_ack(st, p.dst_qpn);
                    self.reply(&mut st.outbox, p, Body::Nak { syndrome: syndrome::REMOTE_ACCESS_ERR });
                    return;
                }
                st.written.push((raddr + offset, data.len() as u64));
                bump(&self.counters.payload_bytes, data.len() as u64);
                if *last {
                    if let Some(imm) = imm {
                        // A DCT has no receive queue here: WRITE with
                        // immediate to it is a remote operation error.
                        let delivered =
                            if dct { Err(syndrome::REMOTE_OP_ERR) } else { self.deliver_imm(st, p.dst_qpn, *imm, *total as u32) };
                        if let Err(s) = delivered {
                            self.flush_ack(st, p.dst_qpn);
                            self.reply(&mut st.outbox, p, Body::Nak { syndrome: s });
                            return;
                        }
                    }
                    if dct {
                        // No coalescing across DC initiators: ACK now.
                        self.reply(&mut st.outbox, p, Body::Ack);
                    } else {
                        self.defer_ack(st, p);
                    }
                }
            }
            Body::Read { raddr, rkey, len } => {
                self.flush_ack(st, p.dst_qpn);
                match st.mrs.check_remote(pd, *rkey, *raddr, *len, Access::REMOTE_READ) {
                    Err(e) => self.reply(&mut st.outbox, p, Body::Nak { syndrome: remote_syndrome(e) }),
                    Ok(_) => {
                        let mtu = self.config.mtu as u64;
                        let mut off = 0;
                        loop {
                            let n = (*len - off).min(mtu);
                            // SAFETY: inside the checked region.
                            let read = unsafe { dma_read(raddr + off, n as usize) };
                            let read = match read {
                                Ok(d) if self.config.fault == Some(PlantedFault::ReadZeros) => Ok(Payload::from_slice(&vec![0u8; d.len()])),
                                r => r,
                            };
                            let Ok(data) = read else {
                                // Registered but unmapped here: the requester
                                // fails the READ on this NAK.
                                self.reply(&mut st.outbox, p, Body::Nak { syndrome: syndrome::REMOTE_ACCESS_ERR });
                                break;
                            };
                            bump(&self.counters.payload_bytes, n);
                            st.step_payload += n;
                            let last = off + n == *len;
                            self.reply(&mut st.outbox, p, Body::ReadResponse { offset: off, last, data });
                            off += n;
                            if last {
                                break;
                            }
                        }
                    }
                }
            }
            Body::Atomic { kind, raddr, rkey, swap_add, compare } => {
                self.flush_ack(st, p.dst_qpn);
                if raddr % 8 != 0 {
                    self.reply(&mut st.outbox, p, Body::Nak { syndrome: syndrome::REMOTE_INVAL_REQ_ERR });
                    return;
                }
                match st.mrs.check_remote(pd, *rkey, *raddr, 8, Access::REMOTE_ATOMIC) {
                    Err(e) => self.reply(&mut st.outbox, p, Body::Nak { syndrome: remote_syndrome(e) }),
                    Ok(_) => {
                        // SAFETY: 8-aligned and inside a registered region (maybe
                        // unmapped); the owner reads it with atomics (a
                        // signal or counter).
                        let old = unsafe {
                            match kind {
                                _ if self.config.fault == Some(PlantedFault::AtomicAsWrite) => {
                                    mr_write(*raddr, &swap_add.to_le_bytes()).map(|()| 0)
                                }
                                AtomicKind::FetchAdd => guarded::fetch_add(*raddr as *mut u64, *swap_add),
                                AtomicKind::CompareSwap => guarded::compare_swap(*raddr as *mut u64, *compare, *swap_add),
                            }
                        };
                        let Ok(old) = old else {
                            self.reply(&mut st.outbox, p, Body::Nak { syndrome: syndrome::REMOTE_ACCESS_ERR });
                            return;
                        };
                        bump(&self.counters.payload_bytes, 8);
                        st.written.push((*raddr, 8));
                        self.reply(&mut st.outbox, p, Body::AtomicResponse { old });
                    }
                }
            }
            _ => unreachable!("respond() only gets requests"),
        }
    }

    /// WRITE with immediate: consumes a receive and writes a RESP_WR_IMM CQE.
    pub(super) fn deliver_imm(&self, st: &mut State, qpn: u32, imm: u32, len: u32) -> Result<(), u8> {
        let qp = st.qps.get_mut(&qpn).expect("qp");
        let Some(rcq) = qp.spec.recv_cq else { return Err(syndrome::REMOTE_OP_ERR) };
        if qp.recv_credits == 0 {
            return Err(syndrome::RNR_RETRY_EXC_ERR);
        }
        qp.recv_credits -= 1;
        let cqe = Cqe {
            opcode: cqe_opcode::RESP_WR_IMM,
            qpn,
            wqe_counter: 0,
            byte_cnt: len,
            syndrome: 0,
            vendor_syndrome: 0,
            wqe_opcode: 0,
            imm,
        };
        self.write_cqe(st, rcq, &cqe);
        Ok(())
    }
}
