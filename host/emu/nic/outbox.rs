//! Sending without waiting: packets wait here, per destination and in order,
//! until the end of the step, which hands each destination's packets to the
//! wire together (one lock per destination, not per packet); what the wire
//! cannot take now (a full shared-memory ring) stays while the NIC goes on
//! draining its own inbox, so loopback and two NICs sending to each
//! other make progress. A destination whose process is gone, or whose ring
//! stays full for STALL_LIMIT, fails the messages bound for it (as a real
//! requester's retries run out: TRANSPORT_RETRY_EXC_ERR) and delays nobody
//! else.

use super::*;

/// How long a destination may refuse every packet before it counts as stuck.
pub(super) const STALL_LIMIT: Duration = Duration::from_secs(10);
/// How often in-flight requests are checked for destinations that are gone.
const PEER_CHECK: Duration = Duration::from_millis(100);

/// Per destination, in destination order (a NIC talks to few); `last` is
/// where the previous packet went, which the next one almost always shares.
#[derive(Default)]
pub(super) struct Outbox {
    by_dst: Vec<(u32, Waiting)>,
    last: usize,
}

/// A destination's queue stays when emptied (its map node and buffer are
/// reused, not allocated per step).
struct Waiting {
    packets: VecDeque<Packet>,
    /// While the wire refuses packets: when it last took one for this
    /// destination (or refused the first). None while it takes them all.
    since: Option<Instant>,
}

impl Outbox {
    pub(super) fn is_empty(&self) -> bool {
        self.by_dst.iter().all(|(_, w)| w.packets.is_empty())
    }

    fn queue(&mut self, dst: u32) -> &mut Waiting {
        if self.by_dst.get(self.last).is_none_or(|(d, _)| *d != dst) {
            self.last = match self.by_dst.binary_search_by_key(&dst, |(d, _)| *d) {
                Ok(i) => i,
                Err(i) => {
                    self.by_dst.insert(i, (dst, Waiting { packets: VecDeque::new(), since: None }));
                    i
                }
            };
        }
        &mut self.by_dst[self.last].1
    }

    fn remove(&mut self, dst: u32) -> Option<Waiting> {
        let i = self.by_dst.binary_search_by_key(&dst, |(d, _)| *d).ok()?;
        self.last = 0;
        Some(self.by_dst.remove(i).1)
    }
}

/// CLOCK_MONOTONIC_COARSE as a Duration since boot.
pub(super) fn coarse_now() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl Inner {
    /// Queues `p` for its destination; the step sends each destination's
    /// packets together at its end (flush_outbox), in order.
    pub(super) fn send(&self, outbox: &mut Outbox, p: Packet) -> Result<(), WireError> {
        outbox.queue(p.dst_node).packets.push_back(p);
        Ok(())
    }

    /// Moves waiting packets to the wire; fails destinations that are gone
    /// or stuck. True if anything moved or failed.
    pub(super) fn flush_outbox(&self, st: &mut State) -> bool {
        let mut progress = false;
        let mut failed = Vec::new();
        for (dst, w) in st.outbox.by_dst.iter_mut() {
            let dst = *dst;
            if w.packets.is_empty() {
                continue;
            }
            let moved = match self.fabric.send_batch(dst, &mut w.packets) {
                Ok(n) => n,
                Err(e) => {
                    failed.push((dst, e));
                    continue;
                }
            };
            if moved > 0 {
                bump(&self.counters.packets_sent, moved as u64);
                progress = true;
            }
            if w.packets.is_empty() {
                w.since = None;
            } else if !self.fabric.peer_alive(dst) {
                failed.push((dst, self.fabric.peer_error(dst)));
            } else if moved > 0 || w.since.is_none() {
                w.since = Some(Instant::now());
            } else if w.since.is_some_and(|t| t.elapsed() > STALL_LIMIT) {
                failed.push((dst, WireError::Stalled { dst, secs: STALL_LIMIT.as_secs() }));
            }
        }
        for (dst, why) in failed {
            self.fail_peer(st, dst, &why);
            progress = true;
        }
        progress
    }

    /// Every so often: requests in flight to a node whose process is gone
    /// will never be answered; fail them now rather than at the requester's
    /// own timeout.
    pub(super) fn check_peers(&self, st: &mut State) -> bool {
        // The coarse clock (the kernel's tick, a few ms; no TSC read): this
        // runs on every step, and 100 ms needs no finer one.
        let now = coarse_now();
        if now.saturating_sub(st.last_peer_check) < PEER_CHECK {
            return false;
        }
        st.last_peer_check = now;
        let waiting: BTreeSet<u32> = st
            .qps
            .values()
            .filter(|q| q.inflight.iter().any(|e| matches!(e.status, Status::Pending)))
            .filter_map(|q| q.remote.map(|(node, _)| node))
            .collect();
        let mut progress = false;
        for node in waiting {
            if !self.fabric.peer_alive(node) {
                self.fail_peer(st, node, &self.fabric.peer_error(node));
                progress = true;
            }
        }
        progress
    }

    /// Drops what waits for `node` and fails every pending request of the
    /// QPs connected to it.
    fn fail_peer(&self, st: &mut State, node: u32, why: &WireError) {
        let dropped = st.outbox.remove(node).map_or(0, |w| w.packets.len());
        tracing::warn!(node, dropped, error = %why, "emulated NIC: peer unreachable, its requests fail");
        let qpns: Vec<u32> = st.qps.values().filter(|q| q.remote.is_some_and(|(n, _)| n == node)).map(|q| q.qpn).collect();
        for qpn in qpns {
            let qp = st.qps.get_mut(&qpn).expect("qp");
            let mut any = false;
            for e in qp.inflight.iter_mut().filter(|e| matches!(e.status, Status::Pending)) {
                e.status = Status::Err(syndrome::TRANSPORT_RETRY_EXC_ERR);
                any = true;
            }
            if any {
                self.enter_error(qp);
                st.mark_dirty(qpn);
            }
        }
    }
}
