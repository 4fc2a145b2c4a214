//! The queue-pair mesh of a context set: one RC queue pair per (context,
//! connected peer), built the same way by the GIN backend's and the RMA
//! plugin's createContext; only what rides along with the QP numbers
//! differs. Which peers are connected is the [`PeerSet`]: every rank (a rank
//! stride, GIN v14 and RMA v13-v16) or the peer array of GIN v15 and RMA v17.

use super::comm::CollComm;
use super::rails::{on_rail, rail_of, RailSet};
use crate::error::{Error, Result};
use crate::provider::QueuePair;
use std::ffi::c_int;

/// The ranks a context set connects to, ascending, and each rank's slot in
/// that list (queue pairs are indexed `context * len + slot`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerSet {
    ranks: Vec<u32>,
    /// Per rank of the comm: its slot, or `NONE` (not connected).
    slot: Vec<u32>,
}

impl PeerSet {
    const NONE: u32 = u32::MAX;

    /// Every rank of an `nranks` comm, self included.
    pub fn all(nranks: u32) -> PeerSet {
        PeerSet { ranks: (0..nranks).collect(), slot: (0..nranks).collect() }
    }

    /// The peer array createContext received (GIN v15, RMA v17), checked:
    /// every entry a rank of the comm, none twice. `what` names the config
    /// in messages ("config"). The order RCCL passes does not matter (NCCL
    /// sorts it); an empty array connects nobody.
    pub fn from_array(nranks: u32, array: &[c_int], what: &str) -> Result<PeerSet> {
        let mut slot = vec![Self::NONE; nranks as usize];
        for (i, &r) in array.iter().enumerate() {
            if r < 0 || r as u32 >= nranks {
                return Err(Error::InvalidArgument(format!(
                    "{what}.peerArray[{i}] = {r}: not a rank of this comm [0, {nranks})"
                )));
            }
            if slot[r as usize] != Self::NONE {
                return Err(Error::InvalidArgument(format!("{what}.peerArray[{i}] = {r}: rank {r} is listed twice")));
            }
            slot[r as usize] = 0;
        }
        let ranks: Vec<u32> = (0..nranks).filter(|&r| slot[r as usize] != Self::NONE).collect();
        for (k, &r) in ranks.iter().enumerate() {
            slot[r as usize] = k as u32;
        }
        Ok(PeerSet { ranks, slot })
    }

    /// A createContext peer array (GIN v15, RMA v17) as a [`PeerSet`]:
    /// `peerArrayCount` at least 0 and at most the comm's nranks, the array not
    /// NULL when the count is positive, every entry a rank, none twice. `what`
    /// names the config in messages.
    ///
    /// # Safety
    /// `array` is NULL or points to `count` readable ints (RCCL's array).
    pub unsafe fn from_raw(nranks: u32, array: *const c_int, count: c_int, what: &str) -> Result<PeerSet> {
        if count < 0 {
            return Err(Error::InvalidArgument(format!("{what}.peerArrayCount = {count}: must not be negative")));
        }
        if count as u32 > nranks {
            return Err(Error::InvalidArgument(format!(
                "{what}.peerArrayCount = {count}: more peers than the comm's {nranks} ranks"
            )));
        }
        if count > 0 && array.is_null() {
            return Err(Error::InvalidArgument(format!("{what}.peerArray is NULL with peerArrayCount = {count}")));
        }
        let list: &[c_int] = if count == 0 {
            &[]
        } else {
            // SAFETY: the caller's contract; count checked above.
            unsafe { std::slice::from_raw_parts(array, count as usize) }
        };
        PeerSet::from_array(nranks, list, what)
    }

    /// The connected ranks, ascending.
    pub fn ranks(&self) -> &[u32] {
        &self.ranks
    }

    pub fn len(&self) -> usize {
        self.ranks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranks.is_empty()
    }

    /// Whether every rank of the comm is connected.
    pub fn is_all(&self) -> bool {
        self.ranks.len() == self.slot.len()
    }

    /// `rank`'s slot, or None when it is not connected (or not a rank).
    pub fn slot(&self, rank: u32) -> Option<u32> {
        self.slot.get(rank as usize).copied().filter(|&s| s != Self::NONE)
    }
}

/// The start of a createContext INFO line, the same for both plugins:
/// "provider P, NIC N: rank R built Q QPs to K of M ranks (C context(s),
/// depth D, traffic class T, R rail(s)"; the caller closes the parenthesis.
pub fn built_line(coll: &CollComm, qps: usize, peers: &PeerSet, n_contexts: u32, log_depth: u32, tc: u8) -> String {
    format!(
        "provider {:?}, NIC {}: rank {} built {qps} QPs to {} of {} ranks ({n_contexts} context(s), depth {}, \
         traffic class {tc}, {} rail(s)",
        coll.instance.provider.kind(),
        coll.nic.info().name,
        coll.rank,
        peers.len(),
        coll.nranks,
        1u32 << log_depth,
        coll.rails.len(),
    )
}

/// One RC queue pair per (context, connected peer), self included when it
/// is in the peer set (loopback), each connected to the QP the peer made for
/// us. A context's queue pairs are on its rail ([`rail_of`]), connected to
/// the peers' NICs on the same rail.
pub struct QpMesh {
    /// Indexed `context * peers.len() + slot`.
    pub qps: Vec<Box<dyn QueuePair>>,
    /// What each connected rank sent along with its QP numbers (`extra` of
    /// build()), indexed by rank; empty for ranks not connected.
    pub extras: Vec<Vec<u8>>,
    pub peers: PeerSet,
}

impl QpMesh {
    /// Creates the queue pairs to the ranks of `peers`, exchanges QP numbers
    /// (and `extra`, the same bytes to every peer) with them, connects, and
    /// waits until every rank is ready to receive. Collective: every rank
    /// calls it, in the same order; the caller holds `coll.collective`.
    /// Ranks outside `peers` get an empty message: peer sets must agree (a
    /// rank lists q exactly when q lists it), and where they do not, both
    /// sides fail with an error naming the other rank instead of waiting for
    /// a queue pair that never comes.
    pub fn build(
        coll: &CollComm,
        n_contexts: u32,
        log_depth: u32,
        traffic_class: u8,
        rings_in_device_memory: bool,
        extra: &[u8],
        peers: PeerSet,
    ) -> Result<QpMesh> {
        let nranks = coll.nranks;
        if peers.slot.len() != nranks as usize {
            return Err(Error::Internal(format!("a peer set of {} ranks for a comm of {nranks}", peers.slot.len())));
        }
        let npeers = peers.len() as u32;
        let nrails = coll.rails.len();
        let mut qps = Vec::with_capacity((n_contexts * npeers) as usize);
        for c in 0..n_contexts {
            let rail = rail_of(c, nrails);
            let nic = &coll.rails[rail];
            for _ in 0..npeers {
                let qp = nic.create_qp(log_depth, traffic_class, rings_in_device_memory).map_err(|e| {
                    on_rail(e, &format!("context {c}: creating a queue pair on {}", RailSet::label(rail, &**nic)))
                })?;
                qps.push(qp);
            }
        }
        let qp = |c: u32, s: u32| &qps[(c * npeers + s) as usize];
        let head = extra.len();
        let mine = |p: u32| {
            let Some(s) = peers.slot(p) else { return Vec::new() };
            let mut v = Vec::with_capacity(head + 4 * n_contexts as usize);
            v.extend_from_slice(extra);
            for c in 0..n_contexts {
                v.extend_from_slice(&qp(c, s).qpn().to_le_bytes());
            }
            v
        };
        let theirs = coll.mesh.alltoall(mine)?;
        let me = coll.rank;
        let mut extras = Vec::with_capacity(nranks as usize);
        let connected = (|| {
            for (p, m) in theirs.iter().enumerate() {
                let Some(s) = peers.slot(p as u32) else {
                    if !m.is_empty() {
                        return Err(Error::InvalidUsage(format!(
                            "rank {p} connects to rank {me} but rank {me}'s peer array does not list rank {p} \
                             (peer arrays must agree: each rank lists exactly the ranks that list it)"
                        )));
                    }
                    extras.push(Vec::new());
                    continue;
                };
                if m.is_empty() {
                    return Err(Error::InvalidUsage(format!(
                        "rank {me}'s peer array lists rank {p}, but rank {p}'s does not list rank {me} \
                         (peer arrays must agree: each rank lists exactly the ranks that list it)"
                    )));
                }
                if m.len() != head + 4 * n_contexts as usize {
                    return Err(Error::Remote(format!(
                        "rank {p} sent a context description of {} bytes (created with another nContexts?)",
                        m.len()
                    )));
                }
                extras.push(m[..head].to_vec());
                for c in 0..n_contexts {
                    let at = head + 4 * c as usize;
                    let rqpn = u32::from_le_bytes(m[at..at + 4].try_into().expect("4"));
                    let rail = rail_of(c, nrails);
                    qp(c, s).connect(&coll.peers[rail][p], rqpn).map_err(|e| {
                        Error::System(format!(
                            "connecting context {c} to rank {p} (QP {rqpn:#x}) on {}: {}",
                            RailSet::label(rail, &*coll.rails[rail]),
                            e.message()
                        ))
                    })?;
                }
            }
            Ok(())
        })();
        // Nobody posts before everyone's queues are ready to receive, and a
        // rank that failed (peer arrays that disagree, a QP that would not
        // connect) fails every rank now rather than leaving them waiting.
        let status = coll.mesh.allgather(&[connected.is_err() as u8])?;
        connected?;
        if let Some(r) = status.iter().position(|v| v.first() != Some(&0)) {
            return Err(Error::Remote(format!("rank {r} could not set up its queue pairs of this context set (see its WARN line)")));
        }
        Ok(QpMesh { qps, extras, peers })
    }
}
