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
use std::collections::BTreeMap;

/// How long a destination may refuse every packet before it counts as stuck.
pub(super) const STALL_LIMIT: Duration = Duration::from_secs(10);
/// How often in-flight requests are checked for destinations that are gone.
const PEER_CHECK: Duration = Duration::from_millis(100);

#[derive(Default)]
pub(super) struct Outbox {
    by_dst: BTreeMap<u32, Waiting>,
}

struct Waiting {
    packets: VecDeque<Packet>,
    /// When the wire last took a packet for this destination (or the first
    /// refusal).
    since: Instant,
}

impl Outbox {
    pub(super) fn is_empty(&self) -> bool {
        self.by_dst.is_empty()
    }
}

impl Inner {
    /// Queues `p` for its destination; the step sends each destination's
    /// packets together at its end (flush_outbox), in order.
    pub(super) fn send(&self, outbox: &mut Outbox, p: Packet) -> Result<(), WireError> {
        let w = outbox.by_dst.entry(p.dst_node).or_insert_with(|| Waiting { packets: VecDeque::new(), since: Instant::now() });
        w.packets.push_back(p);
        Ok(())
    }

    /// Moves waiting packets to the wire; fails destinations that are gone
    /// or stuck. True if anything moved or failed.
    pub(super) fn flush_outbox(&self, st: &mut State) -> bool {
        let mut progress = false;
        let mut failed = Vec::new();
        for (&dst, w) in st.outbox.by_dst.iter_mut() {
            let before = w.packets.len();
            match self.fabric.send_batch(dst, &mut w.packets) {
                Ok(0) => {}
                Ok(n) => {
                    self.counters.packets_sent.fetch_add(n as u64, Ordering::Relaxed);
                    w.since = Instant::now();
                    progress = true;
                }
                Err(e) => {
                    failed.push((dst, e));
                    continue;
                }
            }
            if !w.packets.is_empty() {
                if !self.fabric.peer_alive(dst) {
                    failed.push((dst, WireError::PeerGone(dst)));
                } else if w.packets.len() == before && w.since.elapsed() > STALL_LIMIT {
                    failed.push((dst, WireError::Stalled { dst, secs: STALL_LIMIT.as_secs() }));
                }
            }
        }
        st.outbox.by_dst.retain(|_, w| !w.packets.is_empty());
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
        if st.last_peer_check.elapsed() < PEER_CHECK {
            return false;
        }
        st.last_peer_check = Instant::now();
        let waiting: BTreeSet<u32> = st
            .qps
            .values()
            .filter(|q| q.inflight.iter().any(|e| matches!(e.status, Status::Pending)))
            .filter_map(|q| q.remote.map(|(node, _)| node))
            .collect();
        let mut progress = false;
        for node in waiting {
            if !self.fabric.peer_alive(node) {
                self.fail_peer(st, node, &WireError::PeerGone(node));
                progress = true;
            }
        }
        progress
    }

    /// Drops what waits for `node` and fails every pending request of the
    /// QPs connected to it.
    fn fail_peer(&self, st: &mut State, node: u32, why: &WireError) {
        let dropped = st.outbox.by_dst.remove(&node).map_or(0, |w| w.packets.len());
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
                st.dirty.insert(qpn);
            }
        }
    }
}
