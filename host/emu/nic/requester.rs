//! The requester side: doorbells, executing the send queue's WQEs, sending
//! requests, taking responses, and the posted-write model of READ data.

use super::*;

impl Inner {
    /// A doorbell store arrived through a QP's host doorbell.
    pub(super) fn step(&self) -> bool {
        let mut st = lock(&self.state);
        let mut progress = land_posted(&mut st, Some(Instant::now())) > 0;
        let rung: Vec<u32> = std::mem::take(&mut *lock(&self.hub.rung));
        for qpn in rung {
            // Before the send queue is read: a doorbell from now on queues
            // the QP again.
            if let Some(qp) = st.qps.get(&qpn) {
                qp.bell.rung.store(false, Ordering::Release);
            }
            st.dirty.insert(qpn);
            progress = true;
        }
        let mut inbox = std::mem::take(&mut st.inbox);
        self.fabric.recv_batch(self.node(), &mut inbox, 1024);
        while let Some(p) = inbox.pop_front() {
            progress = true;
            if p.body.is_request() {
                self.respond(&mut st, p);
            } else {
                self.on_response(&mut st, p);
            }
        }
        st.inbox = inbox; // keeps its capacity for the next step
        progress |= self.flush_outbox(&mut st);
        progress |= self.check_peers(&mut st);
        let dirty: Vec<u32> = std::mem::take(&mut st.dirty).into_iter().collect();
        for qpn in dirty {
            progress |= self.run_sq(&mut st, qpn);
            progress |= self.complete(&mut st, qpn);
        }
        if !st.outbox.is_empty() {
            progress |= self.flush_outbox(&mut st);
        }
        progress
    }

    /// Executes published WQEs of one send queue. Returns true on progress.
    pub(super) fn run_sq(&self, st: &mut State, qpn: u32) -> bool {
        let mut progress = false;
        loop {
            let Some(qp) = st.qps.get(&qpn) else { return progress };
            if !matches!(qp.state, QpState::Rts | QpState::Error) {
                return progress;
            }
            let cnt = 1u64 << qp.spec.log_wqe_cnt;
            let pi16 = read_sq_dbr(qp) as u16;
            let avail = pi16.wrapping_sub(qp.ci as u16) as u64;
            if avail == 0 {
                return progress;
            }
            if avail > cnt {
                // The record claims more WQEs than the ring holds: the QP
                // fails once and executes nothing more.
                if qp.state == QpState::Error {
                    return progress;
                }
                let qp = st.qps.get_mut(&qpn).expect("qp");
                self.fail_qp(qp, syndrome::LOCAL_QP_OP_ERR, 0, "doorbell record ahead of the ring");
                return true;
            }
            let first = self.read_wqebbs(qp, qp.ci, 1);
            let ds = first[7] & 0x3f;
            let nbb = wqe::wqebbs_for_ds(ds) as u64;
            if nbb > avail {
                return progress; // the rest of this WQE is not published yet
            }
            let bytes = if nbb == 1 { first } else { self.read_wqebbs(qp, qp.ci, nbb) };
            // Counted once consumed: a fenced WQE is re-read until it may start.
            let count = |n: u64| self.counters.wqebbs_read.fetch_add(n, Ordering::Relaxed);
            let index = qp.ci as u16;
            let state = qp.state;
            let decoded = wqe::decode(&bytes, index, qpn);
            let qp = st.qps.get_mut(&qpn).expect("qp");
            if state == QpState::Error {
                let (skip, op) = match &decoded {
                    Ok(w) => (w.wqebbs as u64, w.ctrl.opcode),
                    Err(e) => (e.wqebbs as u64, e.opcode),
                };
                push_done(qp, index, true, op, Status::Err(syndrome::WR_FLUSH_ERR));
                qp.ci += skip;
                count(skip);
                progress = true;
                continue;
            }
            let w = match decoded {
                Ok(w) => w,
                Err(e) => {
                    tracing::debug!(qpn, index, reason = %e.reason, "emulated NIC: bad WQE");
                    push_done(qp, index, true, e.opcode, Status::Err(e.syndrome));
                    qp.ci += e.wqebbs as u64;
                    count(e.wqebbs as u64);
                    self.enter_error(qp);
                    progress = true;
                    continue;
                }
            };
            let pending = |f: &dyn Fn(&Inflight) -> bool| qp.inflight.iter().any(|e| matches!(e.status, Status::Pending) && f(e));
            match wqe::fence_of(&w.ctrl) {
                Fence::Strong if pending(&|_| true) => return progress,
                Fence::Small if pending(&|e| matches!(e.awaits, Await::Read { .. } | Await::Atomic { .. })) => {
                    return progress
                }
                _ => {}
            }
            qp.ci += w.wqebbs as u64;
            count(w.wqebbs as u64);
            progress = true;
            let signaled = wqe::wants_cqe(&w.ctrl);
            self.execute(st, qpn, index, signaled, w.ctrl.opcode, w.op);
        }
    }

    pub(super) fn read_wqebbs(&self, qp: &Qp, start: u64, n: u64) -> Vec<u8> {
        let cnt = 1u64 << qp.spec.log_wqe_cnt;
        let mut v = Vec::with_capacity(n as usize * SEND_WQE_BB);
        for k in 0..n {
            let slot = ((start + k) & (cnt - 1)) as usize;
            // SAFETY: the slot lies inside the send queue the creator keeps
            // valid (create_qp's contract); the producer published it.
            unsafe { dma_read_into(&mut v, (qp.spec.sq_buf + slot * SEND_WQE_BB) as u64, SEND_WQE_BB) };
        }
        v
    }

    fn record_trace(&self, qpn: u32, index: u16, opcode: u8, op: &WqeOp) {
        let raddr = match op {
            WqeOp::Nop | WqeOp::Dump { .. } => 0,
            WqeOp::Write { raddr, .. } | WqeOp::Read { raddr, .. } | WqeOp::Atomic { raddr, .. } => *raddr,
        };
        if let Some(t) = lock(&self.trace).as_mut() {
            t.push(TraceEntry { qpn, index, opcode, raddr });
        }
    }

    pub(super) fn execute(&self, st: &mut State, qpn: u32, index: u16, signaled: bool, opcode: u8, op: WqeOp) {
        if self.tracing.load(Ordering::Relaxed) {
            self.record_trace(qpn, index, opcode, &op);
        }
        let qp = st.qps.get(&qpn).expect("qp");
        let pd = qp.spec.pd;
        let remote = qp.remote;
        let check_local = |mrs: &MrTable, sges: &[Sge], write: bool| -> Result<(), u8> {
            for s in sges {
                mrs.check_local(pd, s.lkey, s.addr, s.len, write).map_err(|_| syndrome::LOCAL_PROT_ERR)?;
            }
            Ok(())
        };
        let outcome: Result<(Await, Option<Outgoing>), u8> = match op {
            WqeOp::Nop => {
                self.counters.nops.fetch_add(1, Ordering::Relaxed);
                Ok((Await::None, None))
            }
            WqeOp::Dump { source } => check_local(&st.mrs, std::slice::from_ref(&source), false).map(|()| {
                // A read of local memory: PCIe lets no read pass the NIC's
                // earlier writes, so every READ response received so far lands.
                self.counters.dumps.fetch_add(1, Ordering::Relaxed);
                let landed = land_posted(st, None);
                self.counters.read_writes_landed_by_dump.fetch_add(landed as u64, Ordering::Relaxed);
                (Await::None, None)
            }),
            WqeOp::Write { raddr, rkey, gather, inline, imm } => check_local(&st.mrs, &gather, false).map(|()| {
                // The payload is read from memory once, straight into the
                // MTU-sized packets it travels in.
                let mut chunks = match inline {
                    Some(d) => vec![d],
                    // SAFETY: every gather entry was checked against a registered region.
                    None => unsafe { gather_chunks(&gather, self.config.mtu) },
                };
                let total: u64 = chunks.iter().map(|c| c.len() as u64).sum();
                self.counters.writes.fetch_add(1, Ordering::Relaxed);
                self.counters.payload_bytes.fetch_add(total, Ordering::Relaxed);
                let out = if chunks.len() == 1 {
                    let data = chunks.pop().expect("one chunk");
                    Outgoing::Packet(Body::Write { raddr, rkey, total, offset: 0, last: true, imm, data })
                } else {
                    Outgoing::Write { raddr, rkey, total, imm, chunks }
                };
                (Await::Write, Some(out))
            }),
            WqeOp::Read { raddr, rkey, scatter } => check_local(&st.mrs, &scatter, true).map(|()| {
                self.counters.reads.fetch_add(1, Ordering::Relaxed);
                let len = scatter.iter().map(|s| s.len).sum();
                (Await::Read { scatter }, Some(Outgoing::Packet(Body::Read { raddr, rkey, len })))
            }),
            WqeOp::Atomic { kind, raddr, rkey, swap_add, compare, result } => {
                check_local(&st.mrs, std::slice::from_ref(&result), true).map(|()| {
                    self.counters.atomics.fetch_add(1, Ordering::Relaxed);
                    (Await::Atomic { result }, Some(Outgoing::Packet(Body::Atomic { kind, raddr, rkey, swap_add, compare })))
                })
            }
        };
        let qp = st.qps.get_mut(&qpn).expect("qp");
        match outcome {
            Err(synd) => {
                push_done(qp, index, signaled, opcode, Status::Err(synd));
                self.enter_error(qp);
            }
            Ok((Await::None, _)) => push_done(qp, index, signaled, opcode, Status::Ok { byte_cnt: 0 }),
            Ok((awaits, Some(body))) => {
                // One number per inflight entry, consecutive (on_response).
                let msg = qp.next_msg;
                qp.next_msg += 1;
                qp.inflight.push_back(Inflight { msg, index, signaled, opcode, awaits, status: Status::Pending });
                let (node, rqpn) = remote.expect("RTS QP has a remote");
                if let Err(e) = self.send_message(&mut st.outbox, qpn, node, rqpn, msg, body) {
                    tracing::warn!(qpn, error = %e, "emulated NIC: the wire refused a packet");
                    if let Some(entry) = qp.inflight.back_mut() {
                        entry.status = Status::Err(syndrome::TRANSPORT_RETRY_EXC_ERR);
                    }
                }
            }
            Ok((_, None)) => unreachable!("remote operations always carry a body"),
        }
    }

    /// Sends a request, splitting a WRITE's payload into MTU-sized packets.
    pub(super) fn send_message(
        &self,
        outbox: &mut Outbox,
        qpn: u32,
        node: u32,
        rqpn: u32,
        msg: u64,
        out: Outgoing,
    ) -> Result<(), WireError> {
        let mk = |body| Packet { src_node: self.node(), dst_node: node, src_qpn: qpn, dst_qpn: rqpn, msg, body };
        match out {
            Outgoing::Write { raddr, rkey, total, imm, chunks } => {
                let n = chunks.len();
                let mut offset = 0u64;
                for (k, data) in chunks.into_iter().enumerate() {
                    let len = data.len() as u64;
                    self.send(outbox, mk(Body::Write { raddr, rkey, total, offset, last: k + 1 == n, imm, data }))?;
                    offset += len;
                }
                Ok(())
            }
            Outgoing::Packet(b) => self.send(outbox, mk(b)),
        }
    }

    /// Requester side: a response to one of our messages.
    pub(super) fn on_response(&self, st: &mut State, p: Packet) {
        let Some(qp) = st.qps.get_mut(&p.dst_qpn) else {
            self.counters.packets_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        // Messages enter `inflight` in msg order (one number per WQE) and
        // leave from the front, so the reply's entry is found by subtraction.
        let pos = qp.inflight.front().and_then(|f| p.msg.checked_sub(f.msg)).map(|d| d as usize);
        let Some(pos) = pos.filter(|&i| qp.inflight.get(i).is_some_and(|e| e.msg == p.msg)) else {
            self.counters.packets_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if !matches!(qp.inflight[pos].status, Status::Pending) {
            return; // already flushed
        }
        let mut fail = None;
        let entry = &mut qp.inflight[pos];
        match (&p.body, &entry.awaits) {
            (Body::Ack, _) => entry.status = Status::Ok { byte_cnt: 0 },
            (Body::Nak { syndrome }, _) => fail = Some(*syndrome),
            (Body::ReadResponse { offset, last, data }, Await::Read { scatter }) => {
                let mut off = *offset;
                let mut rest: &[u8] = data;
                let mut base = 0u64;
                for s in scatter {
                    if rest.is_empty() {
                        break;
                    }
                    if off < base + s.len {
                        let at = off - base;
                        let n = ((s.len - at) as usize).min(rest.len());
                        match self.config.read_data_delay {
                            // SAFETY: the scatter entry was checked (local write) at execution.
                            None => unsafe { dma_write(s.addr + at, &rest[..n]) },
                            Some(d) => {
                                self.counters.read_writes_delayed.fetch_add(1, Ordering::Relaxed);
                                let due = Instant::now() + d;
                                st.posted.push_back(PostedWrite { due, addr: s.addr + at, data: rest[..n].to_vec() });
                            }
                        }
                        rest = &rest[n..];
                        off += n as u64;
                    }
                    base += s.len;
                }
                self.counters.payload_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
                if *last {
                    let total = scatter.iter().map(|s| s.len).sum::<u64>() as u32;
                    entry.status = Status::Ok { byte_cnt: total };
                }
            }
            (Body::AtomicResponse { old }, Await::Atomic { result }) => {
                // Host byte order (the DevX provider asks for host-endian atomics).
                // SAFETY: the result entry was checked (8 bytes, local write).
                unsafe { dma_write(result.addr, &old.to_ne_bytes()) };
                entry.status = Status::Ok { byte_cnt: 8 };
            }
            _ => fail = Some(syndrome::BAD_RESP_ERR),
        }
        if let Some(s) = fail {
            qp.inflight[pos].status = Status::Err(s);
            self.enter_error(qp);
        }
        st.dirty.insert(p.dst_qpn);
    }
}

/// Lands posted READ data due by `now` (all of it with None); returns how
/// many writes landed.
pub(super) fn land_posted(st: &mut State, now: Option<Instant>) -> usize {
    let mut n = 0;
    while st.posted.front().is_some_and(|w| now.is_none_or(|t| w.due <= t)) {
        let w = st.posted.pop_front().expect("front");
        // SAFETY: the scatter entry was checked (local write, registered) when
        // its READ executed, and deregistration lands everything first, so
        // the region is still registered and valid.
        unsafe { dma_write(w.addr, &w.data) };
        n += 1;
    }
    n
}

/// The send queue's producer index from its doorbell record (16 bits).
fn read_sq_dbr(qp: &Qp) -> u32 {
    // SAFETY: the doorbell record is valid per create_qp's contract.
    let raw = unsafe { AtomicU32::from_ptr((qp.spec.dbrec + 4 * SND_DBR) as *mut u32) }.load(Ordering::Acquire);
    u32::from_be(raw) & 0xffff
}

/// A request as execute() hands it to send_message: a WRITE's payload
/// already cut into packets, or a single packet's body.
pub(super) enum Outgoing {
    Write { raddr: u64, rkey: u32, total: u64, imm: Option<u32>, chunks: Vec<Vec<u8>> },
    Packet(Body),
}

/// The bytes of `gather`, in order, cut into chunks of at most `mtu` (at
/// least one chunk, empty for an empty list).
///
/// # Safety
/// Every entry must lie in a registered region (checked by the caller).
unsafe fn gather_chunks(gather: &[Sge], mtu: usize) -> Vec<Vec<u8>> {
    let total: usize = gather.iter().map(|s| s.len as usize).sum();
    let mut chunks: Vec<Vec<u8>> = Vec::with_capacity(total.div_ceil(mtu).max(1));
    chunks.push(Vec::with_capacity(total.min(mtu)));
    for s in gather {
        let (mut addr, mut left) = (s.addr, s.len as usize);
        while left > 0 {
            let room = mtu - chunks.last().expect("one chunk").len();
            if room == 0 {
                chunks.push(Vec::with_capacity((total - chunks.len() * mtu).min(mtu)));
                continue;
            }
            let n = left.min(room);
            // SAFETY: inside the entry, which the caller checked.
            unsafe { dma_read_into(chunks.last_mut().expect("one chunk"), addr, n) };
            addr += n as u64;
            left -= n;
        }
    }
    chunks
}
