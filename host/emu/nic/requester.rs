//! The requester side: doorbells, executing the send queue's WQEs, sending
//! requests, taking responses, and the posted-write model of READ data.

use super::*;

impl Inner {
    /// A doorbell store arrived through a QP's host doorbell.
    pub(super) fn step(&self) -> bool {
        let mut st = lock(&self.state);
        st.step_payload = 0;
        let mut progress = !st.posted.is_empty() && land_posted(&mut st, Some(Instant::now())) > 0;
        // The QPs rung since the last step, their bits cleared before their
        // send queues are read: a doorbell from now on marks them again.
        let mut rung = std::mem::take(&mut st.rung_spare);
        st.rung.take(|slot| rung.push(QpTable::qpn(slot)));
        for &qpn in &rung {
            // A skewed QP's batch starts `delay` after the doorbell that
            // found it idle; later doorbells join the held batch.
            if let Some(delay) = self.config.qp_skew.map(|k| k.delay(qpn)).filter(|d| !d.is_zero()) {
                if let Some(qp) = st.qps.get_mut(&qpn) {
                    qp.held_until.get_or_insert_with(|| Instant::now() + delay);
                }
            }
            st.mark_dirty(qpn);
            progress = true;
        }
        rung.clear();
        st.rung_spare = rung;
        if self.config.poll_doorbell_records {
            // Not progress by itself: what it marks runs below and counts there.
            poll_records(&mut st);
        }
        // Each part below is skipped when it has nothing to do: most steps
        // of a polling NIC find little, and the buffers' take-and-return
        // cost more than the test (`idle_step` in benches/emu_nic.rs).
        // Packets a step left over come first; new ones queue behind them.
        if self.fabric.recv_batch(self.node(), &mut st.inbox, 1024) > 0 || !st.inbox.is_empty() {
            let mut inbox = std::mem::take(&mut st.inbox);
            // Read in place and dropped together: a packet is ~100 bytes,
            // and each move of one (out of the queue, into a call) was a copy.
            progress = true;
            let mut taken = 0;
            for p in inbox.iter() {
                // READ responses count against the step's payload budget:
                // the rest of the inbox waits for the next step.
                if st.step_payload >= STEP_PAYLOAD_BUDGET {
                    break;
                }
                if p.body.is_request() {
                    self.respond(&mut st, p);
                } else {
                    self.on_response(&mut st, p);
                }
                taken += 1;
            }
            inbox.drain(..taken);
            st.inbox = inbox; // keeps its capacity for the next step
        }
        if !st.ack_qps.is_empty() {
            self.flush_acks(&mut st);
        }
        if !st.outbox.is_empty() {
            progress |= self.flush_outbox(&mut st);
        }
        progress |= self.check_peers(&mut st);
        if !st.dirty.is_empty() {
            // QPs with work, in QP order, each once (as a set would give them).
            let mut dirty = std::mem::take(&mut st.dirty_spare);
            std::mem::swap(&mut dirty, &mut st.dirty);
            dirty.sort_unstable();
            dirty.dedup();
            for &qpn in &dirty {
                progress |= self.run_sq(&mut st, qpn);
                progress |= self.complete(&mut st, qpn);
            }
            dirty.clear();
            st.dirty_spare = dirty;
        }
        if !st.outbox.is_empty() {
            progress |= self.flush_outbox(&mut st);
        }
        wake_parked(&mut st);
        // Nothing that only time moves on (poll_loop's idle rounds).
        let settled = st.posted.is_empty() && st.outbox.is_empty() && st.dirty.is_empty() && st.inbox.is_empty();
        self.settled.store(settled, Ordering::Relaxed);
        progress
    }

    /// Executes published WQEs of one send queue. Returns true on progress.
    pub(super) fn run_sq(&self, st: &mut State, qpn: u32) -> bool {
        if let Some(qp) = st.qps.get_mut(&qpn) {
            match qp.held_until {
                Some(t) if Instant::now() < t => {
                    st.mark_dirty(qpn);
                    return false;
                }
                Some(_) => qp.held_until = None,
                None => {}
            }
        }
        if st.qps.get(&qpn).is_some_and(|qp| qp.bell.family.is_some()) {
            return self.run_family_sq(st, qpn);
        }
        // The WQE being decoded, copied out of the ring (at most 16 WQEBBs:
        // DS is 6 bits), into a buffer the NIC keeps: a fresh zeroed 1 KiB
        // per call was ~150 instructions of a two-NIC put+signal.
        let mut buf = std::mem::take(&mut st.wqe_buf);
        buf.resize(MAX_WQE_BYTES, 0); // allocates once, then a length check
        let progress = self.run_sq_in(st, qpn, &mut buf);
        st.wqe_buf = buf;
        progress
    }

    fn run_sq_in(&self, st: &mut State, qpn: u32, buf: &mut [u8]) -> bool {
        let mut progress = false;
        loop {
            if st.out_of_budget(qpn) {
                return progress;
            }
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
            read_wqebbs(qp, qp.ci, &mut buf[..SEND_WQE_BB]);
            let ds = buf[7] & 0x3f;
            let nbb = wqe::wqebbs_for_ds(ds) as u64;
            if nbb > avail {
                return progress; // the rest of this WQE is not published yet
            }
            let len = nbb as usize * SEND_WQE_BB;
            read_wqebbs(qp, qp.ci + 1, &mut buf[SEND_WQE_BB..len]);
            let bytes = &buf[..len];
            // Counted once consumed: a fenced WQE is re-read until it may start.
            let count = |n: u64| bump(&self.counters.wqebbs_read, n);
            let index = qp.ci as u16;
            let state = qp.state;
            let dci = matches!(qp.transport, Transport::Dci { .. });
            // Not a (decoded, av) pair: an RC WQE would move the pair's
            // empty datagram segment along with it (~20 instructions a WQE).
            let mut av = None;
            let decoded = if dci {
                wqe::decode_dc(bytes, index, qpn).map(|(w, a)| {
                    av = a;
                    w
                })
            } else {
                wqe::decode(bytes, index, qpn)
            };
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
            if fence_holds(qp, wqe::fence_of(&w.ctrl)) {
                return progress;
            }
            // A DC initiator's WQE names its target. An address that is no
            // NIC of this fabric never gets an answer: retries run out.
            let mut target = None;
            if let Some(av) = av {
                let Some(node) = dc_node_of(&av) else {
                    qp.ci += w.wqebbs as u64;
                    count(w.wqebbs as u64);
                    push_done(qp, index, true, w.ctrl.opcode, Status::Err(syndrome::TRANSPORT_RETRY_EXC_ERR));
                    self.enter_error(qp);
                    progress = true;
                    continue;
                };
                let to = (node, av.dqp_dct);
                // DCI reuse: a new target only once the DCI is drained, so
                // one connection's ACKs never answer another's requests.
                let switching = matches!(qp.transport, Transport::Dci { current } if current != Some(to));
                if switching {
                    if fence_holds(qp, Fence::Strong) {
                        return progress;
                    }
                    qp.transport = Transport::Dci { current: Some(to) };
                }
                target = Some((to.0, to.1, av.dc_key));
            }
            qp.ci += w.wqebbs as u64;
            count(w.wqebbs as u64);
            progress = true;
            let signaled = wqe::wants_cqe(&w.ctrl);
            self.execute(st, qpn, index, signaled, w.ctrl.opcode, w.op, target);
        }
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

    /// `target`: a DC initiator's (node, DCT, DC key) for this WQE.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn execute(
        &self,
        st: &mut State,
        qpn: u32,
        index: u16,
        signaled: bool,
        opcode: u8,
        op: WqeOp,
        target: Option<(u32, u32, u64)>,
    ) {
        if self.tracing.load(Ordering::Relaxed) {
            self.record_trace(qpn, index, opcode, &op);
        }
        let qp = st.qps.get(&qpn).expect("qp");
        let pd = qp.spec.pd;
        let (remote, dc_key) = match target {
            Some((node, dctn, key)) => (Some((node, dctn)), key),
            None => (qp.remote, 0),
        };
        // The common small put and signal-slot write: an inline WRITE has no
        // gather list to check and goes out as one packet built where it is
        // queued (the general path below moved its payload through four
        // temporaries: the largest cost of an 8-byte WRITE in perf).
        if let WqeOp::Write { raddr, rkey, inline: Some(d), imm, .. } = op {
            let total = d.len() as u64;
            bump(&self.counters.writes, 1);
            bump(&self.counters.payload_bytes, total);
            let qp = st.qps.get_mut(&qpn).expect("qp");
            let msg = qp.next_msg;
            qp.next_msg += 1;
            qp.inflight.push_back(Inflight { msg, index, signaled, opcode, awaits: Await::Write, status: Status::Pending });
            let (node, rqpn) = remote.expect("an RTS RC QP has a remote, a DCI's WQE a target");
            let body = Body::Write { raddr, rkey, total, offset: 0, last: true, imm, data: Payload::from_slice(d) };
            let p = Packet { src_node: self.node(), dst_node: node, src_qpn: qpn, dst_qpn: rqpn, msg, dc_key, body };
            if let Err(e) = self.send(&mut st.outbox, p) {
                tracing::warn!(qpn, error = %e, "emulated NIC: the wire refused a packet");
                if let Some(entry) = qp.inflight.back_mut() {
                    entry.status = Status::Err(syndrome::TRANSPORT_RETRY_EXC_ERR);
                }
            }
            return;
        }
        let check_local = |mrs: &MrTable, sges: &[Sge], write: bool| -> Result<(), u8> {
            for s in sges {
                mrs.check_local(pd, s.lkey, s.addr, s.len, write).map_err(|_| syndrome::LOCAL_PROT_ERR)?;
            }
            Ok(())
        };
        let outcome: Result<(Await, Option<Outgoing>), u8> = match op {
            WqeOp::Nop => {
                bump(&self.counters.nops, 1);
                Ok((Await::None, None))
            }
            WqeOp::Dump { source } => check_local(&st.mrs, std::slice::from_ref(&source), false).map(|()| {
                // A read of local memory: PCIe lets no read pass the NIC's
                // earlier writes, so every READ response received so far lands.
                bump(&self.counters.dumps, 1);
                let landed = land_posted(st, None);
                bump(&self.counters.read_writes_landed_by_dump, landed as u64);
                (Await::None, None)
            }),
            // Gathered (inline WRITEs left above): read when sent, once,
            // straight into its packets.
            WqeOp::Write { raddr, rkey, gather, inline: _, imm } => check_local(&st.mrs, &gather, false).map(|()| {
                // Its gather is a read of local memory, like a DUMP's: no
                // read passes the NIC's earlier PCIe writes, so the READ
                // data received so far lands (the flush of the families
                // without a DUMP: a fenced 1-byte WRITE, queue/send_queue.h).
                if !gather.is_empty() && !st.posted.is_empty() {
                    let landed = land_posted(st, None);
                    bump(&self.counters.read_writes_landed_by_dump, landed as u64);
                }
                let total: u64 = gather.iter().map(|s| s.len).sum();
                st.step_payload += total;
                bump(&self.counters.writes, 1);
                bump(&self.counters.payload_bytes, total);
                (Await::Write, Some(Outgoing::Write { raddr, rkey, total, imm, gather }))
            }),
            WqeOp::Read { raddr, rkey, scatter } => check_local(&st.mrs, &scatter, true).map(|()| {
                bump(&self.counters.reads, 1);
                let len = scatter.iter().map(|s| s.len).sum();
                (Await::Read { scatter }, Some(Outgoing::Packet(Body::Read { raddr, rkey, len })))
            }),
            WqeOp::Atomic { kind, raddr, rkey, swap_add, compare, result } => {
                check_local(&st.mrs, std::slice::from_ref(&result), true).map(|()| {
                    bump(&self.counters.atomics, 1);
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
                let (node, rqpn) = remote.expect("an RTS RC QP has a remote, a DCI's WQE a target");
                match self.send_message(&mut st.outbox, qpn, node, rqpn, msg, dc_key, body) {
                    Ok(()) => {}
                    Err(SendFailure::Wire(e)) => {
                        tracing::warn!(qpn, error = %e, "emulated NIC: the wire refused a packet");
                        if let Some(entry) = qp.inflight.back_mut() {
                            entry.status = Status::Err(syndrome::TRANSPORT_RETRY_EXC_ERR);
                        }
                    }
                    Err(SendFailure::Unmapped { addr }) => {
                        // As a ConnectX whose page walk for the gather
                        // fails: a local protection error, and the QP stops.
                        tracing::warn!(qpn, addr = format_args!("{addr:#x}"), "emulated NIC: a WRITE's source is registered but not mapped");
                        if let Some(entry) = qp.inflight.back_mut() {
                            entry.status = Status::Err(syndrome::LOCAL_PROT_ERR);
                        }
                        self.enter_error(qp);
                    }
                }
            }
            Ok((_, None)) => unreachable!("remote operations always carry a body"),
        }
    }

    /// Sends a request, splitting a WRITE's payload into MTU-sized packets.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_message(
        &self,
        outbox: &mut Outbox,
        qpn: u32,
        node: u32,
        rqpn: u32,
        msg: u64,
        dc_key: u64,
        out: Outgoing,
    ) -> Result<(), SendFailure> {
        let mk = |body| Packet { src_node: self.node(), dst_node: node, src_qpn: qpn, dst_qpn: rqpn, msg, dc_key, body };
        match out {
            Outgoing::Write { raddr, rkey, total, imm, gather } => {
                // The payload is read from memory once, straight into the
                // MTU-sized packets it travels in (at least one, empty for
                // an empty message).
                let mtu = self.config.mtu as u64;
                let mut sges = gather.iter();
                let (mut addr, mut left) = (0u64, 0u64);
                let mut offset = 0u64;
                loop {
                    let n = (total - offset).min(mtu);
                    let mut data = Payload::with_capacity(n as usize);
                    while (data.len() as u64) < n {
                        while left == 0 {
                            let s = sges.next().expect("the gather list holds `total` bytes");
                            (addr, left) = (s.addr, s.len);
                        }
                        let k = left.min(n - data.len() as u64);
                        // SAFETY: inside a gather entry, which execute()
                        // checked against a registered region. Packets cut
                        // before a fault are already queued: a message
                        // without its last packet, which the responder never
                        // acknowledges.
                        unsafe { data.extend_from_raw(addr, k as usize) }.map_err(|_| SendFailure::Unmapped { addr })?;
                        addr += k;
                        left -= k;
                    }
                    let last = offset + n == total;
                    self.send(outbox, mk(Body::Write { raddr, rkey, total, offset, last, imm, data })).map_err(SendFailure::Wire)?;
                    offset += n;
                    if last {
                        return Ok(());
                    }
                }
            }
            Outgoing::Packet(b) => self.send(outbox, mk(b)).map_err(SendFailure::Wire),
        }
    }

    /// Requester side: a response to one of our messages.
    pub(super) fn on_response(&self, st: &mut State, p: &Packet) {
        let Some(qp) = st.qps.get_mut(&p.dst_qpn) else {
            bump(&self.counters.packets_dropped, 1);
            return;
        };
        // Messages enter `inflight` in msg order (one number per WQE) and
        // leave from the front, so the reply's entry is found by subtraction.
        let pos = qp.inflight.front().and_then(|f| p.msg.checked_sub(f.msg)).map(|d| d as usize);
        let Some(pos) = pos.filter(|&i| qp.inflight.get(i).is_some_and(|e| e.msg == p.msg)) else {
            bump(&self.counters.packets_dropped, 1);
            return;
        };
        if !matches!(qp.inflight[pos].status, Status::Pending) {
            return; // already flushed
        }
        let mut fail = None;
        let front_msg = qp.inflight.front().map_or(0, |f| f.msg);
        let entry = &mut qp.inflight[pos];
        match (&p.body, &entry.awaits) {
            (Body::Ack, _) => {
                entry.status = Status::Ok { byte_cnt: 0 };
                // A coalesced ACK: every earlier WRITE is acknowledged too
                // (READ and atomic responses were sent before it, in order).
                // Only from where the previous ACK reached: each entry is
                // looked at once, not once per ACK (a scan of everything in
                // flight per ACK was 40% of the NIC's step in gin-perf).
                let from = (qp.acked_through.saturating_sub(front_msg) as usize).min(pos);
                for e in qp.inflight.range_mut(from..pos) {
                    if matches!(e.status, Status::Pending) && matches!(e.awaits, Await::Write) {
                        e.status = Status::Ok { byte_cnt: 0 };
                    }
                }
                qp.acked_through = qp.acked_through.max(p.msg + 1);
            }
            (Body::Nak { syndrome }, _) => fail = Some(*syndrome),
            (Body::ReadResponse { offset, last, data }, Await::Read { scatter }) => {
                let mut off = *offset;
                let mut rest: &[u8] = data;
                let mut base = 0u64;
                for s in scatter.iter() {
                    if rest.is_empty() {
                        break;
                    }
                    if off < base + s.len {
                        let at = off - base;
                        let n = ((s.len - at) as usize).min(rest.len());
                        match self.config.read_data_delay {
                            None => {
                                // SAFETY: the scatter entry was checked (local write) at execution.
                                if unsafe { mr_write(s.addr + at, &rest[..n]) }.is_err() {
                                    fail = Some(syndrome::LOCAL_PROT_ERR);
                                    break;
                                }
                                st.written.push((s.addr + at, n as u64));
                            }
                            Some(d) => {
                                bump(&self.counters.read_writes_delayed, 1);
                                let due = Instant::now() + d;
                                st.posted.push_back(PostedWrite { due, addr: s.addr + at, data: rest[..n].to_vec() });
                            }
                        }
                        rest = &rest[n..];
                        off += n as u64;
                    }
                    base += s.len;
                }
                bump(&self.counters.payload_bytes, data.len() as u64);
                if *last && fail.is_none() {
                    let total = scatter.iter().map(|s| s.len).sum::<u64>() as u32;
                    entry.status = Status::Ok { byte_cnt: total };
                }
            }
            (Body::AtomicResponse { old }, Await::Atomic { result }) => {
                // Host byte order (the DevX provider asks for host-endian atomics).
                // SAFETY: the result entry was checked (8 bytes, local write).
                if unsafe { mr_write(result.addr, &old.to_ne_bytes()) }.is_ok() {
                    st.written.push((result.addr, 8));
                    entry.status = Status::Ok { byte_cnt: 8 };
                } else {
                    fail = Some(syndrome::LOCAL_PROT_ERR);
                }
            }
            _ => fail = Some(syndrome::BAD_RESP_ERR),
        }
        if let Some(s) = fail {
            qp.inflight[pos].status = Status::Err(s);
            self.enter_error(qp);
        }
        st.mark_dirty(p.dst_qpn);
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
        // the region is still registered (though maybe unmapped).
        if unsafe { mr_write(w.addr, &w.data) }.is_ok() {
            st.written.push((w.addr, w.data.len() as u64));
        } else {
            // Its READ has completed already: nothing left to tell.
            tracing::warn!(addr = format_args!("{:#x}", w.addr), "emulated NIC: READ data for unmapped memory dropped");
        }
        n += 1;
    }
    n
}

/// Whether `fence` holds the QP's next WQE back: every earlier WQE still
/// pending (strong), or an earlier READ or atomic (small).
pub(super) fn fence_holds(qp: &Qp, fence: Fence) -> bool {
    let pending = |f: &dyn Fn(&Inflight) -> bool| qp.inflight.iter().any(|e| matches!(e.status, Status::Pending) && f(e));
    match fence {
        Fence::None => false,
        Fence::Strong => pending(&|_| true),
        Fence::Small => pending(&|e| matches!(e.awaits, Await::Read { .. } | Await::Atomic { .. })),
    }
}

/// The send queue's producer index from its doorbell record (16 bits).
/// Marks for execution the mlx5 send queues whose doorbell record is ahead
/// of what the NIC consumed (NicConfig::poll_doorbell_records).
fn poll_records(st: &mut State) {
    let ahead: Vec<u32> = st
        .qps
        .values()
        .filter(|q| q.bell.family.is_none() && q.state == QpState::Rts && read_sq_dbr(q) as u16 != q.ci as u16)
        .map(|q| q.qpn)
        .collect();
    for &qpn in &ahead {
        st.mark_dirty(qpn);
    }
}

fn read_sq_dbr(qp: &Qp) -> u32 {
    // SAFETY: the doorbell record is valid per create_qp's contract.
    let raw = unsafe { AtomicU32::from_ptr((qp.spec.dbrec + 4 * SND_DBR) as *mut u32) }.load(Ordering::Acquire);
    u32::from_be(raw) & 0xffff
}

/// Why send_message stopped.
pub(super) enum SendFailure {
    Wire(WireError),
    /// The gather list reached memory that is registered but not mapped.
    Unmapped { addr: u64 },
}

/// A request as execute() hands it to send_message: a WRITE whose payload
/// is read from its gather list as it is cut into packets, or a single
/// packet's body.
pub(super) enum Outgoing {
    Write { raddr: u64, rkey: u32, total: u64, imm: Option<u32>, gather: SgList },
    Packet(Body),
}

/// Largest WQE: DS is 6 bits, 63 * 16 bytes, in 16 WQEBBs.
const MAX_WQE_BYTES: usize = 16 * SEND_WQE_BB;

/// Copies WQEBBs from `start` on (as many as `out` holds) out of the ring.
fn read_wqebbs(qp: &Qp, start: u64, out: &mut [u8]) {
    let cnt = 1u64 << qp.spec.log_wqe_cnt;
    for (k, bb) in out.chunks_exact_mut(SEND_WQE_BB).enumerate() {
        let slot = ((start + k as u64) & (cnt - 1)) as usize;
        // SAFETY: the slot lies inside the send queue the creator keeps
        // valid (create_qp's contract); the producer published it.
        unsafe { std::ptr::copy_nonoverlapping((qp.spec.sq_buf + slot * SEND_WQE_BB) as *const u8, bb.as_mut_ptr(), SEND_WQE_BB) };
    }
}
