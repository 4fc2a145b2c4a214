//! The queue-pair mesh of a context set: one RC queue pair per (context,
//! peer), built the same way by the GIN backend's and the RMA plugin's
//! createContext; only what rides along with the QP numbers differs.

use super::comm::CollComm;
use crate::error::{Error, Result};
use crate::provider::QueuePair;

/// One RC queue pair per (context, peer), self included (loopback), each
/// connected to the QP the peer made for us.
pub struct QpMesh {
    /// Indexed `context * nranks + peer`.
    pub qps: Vec<Box<dyn QueuePair>>,
    /// What each rank sent along with its QP numbers (`extra` of build()).
    pub extras: Vec<Vec<u8>>,
}

impl QpMesh {
    /// Creates the queue pairs, exchanges QP numbers (and `extra`, the same
    /// bytes to every peer) with every rank, connects, and waits until every
    /// rank is ready to receive. Collective: every rank calls it, in the same
    /// order; the caller holds `coll.collective`.
    pub fn build(
        coll: &CollComm,
        n_contexts: u32,
        log_depth: u32,
        traffic_class: u8,
        rings_in_device_memory: bool,
        extra: &[u8],
    ) -> Result<QpMesh> {
        let nranks = coll.nranks;
        let mut qps = Vec::with_capacity((n_contexts * nranks) as usize);
        for _ in 0..n_contexts {
            for _ in 0..nranks {
                qps.push(coll.nic.create_qp(log_depth, traffic_class, rings_in_device_memory)?);
            }
        }
        let qp = |c: u32, p: u32| &qps[(c * nranks + p) as usize];
        let head = extra.len();
        let mine = |p: u32| {
            let mut v = Vec::with_capacity(head + 4 * n_contexts as usize);
            v.extend_from_slice(extra);
            for c in 0..n_contexts {
                v.extend_from_slice(&qp(c, p).qpn().to_le_bytes());
            }
            v
        };
        let theirs = coll.mesh.alltoall(mine)?;
        let mut extras = Vec::with_capacity(nranks as usize);
        for (p, m) in theirs.iter().enumerate() {
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
                qp(c, p as u32).connect(&coll.peers[p], rqpn).map_err(|e| {
                    Error::System(format!("connecting context {c} to rank {p} (QP {rqpn:#x}): {}", e.message()))
                })?;
            }
        }
        // Nobody posts before everyone's queues are ready to receive.
        coll.mesh.barrier()?;
        Ok(QpMesh { qps, extras })
    }
}
