//! The DC transport's connection setup (docs/architecture.md, "DC
//! transport"): per context `n_dci` DC initiators on the context's rail, per
//! rank and rail one DC target; ranks exchange one message each (their DCT
//! numbers and DC keys per rail, with what rides along), not a queue pair
//! per peer. Which ranks a context set reaches is the [`PeerSet`] as with
//! RC; a rank outside it is simply never addressed.

use super::comm::CollComm;
use super::rails::{on_rail, rail_of, RailSet};
use crate::error::{Error, Result};
use crate::mlx5::wire::DatagramSeg;
use crate::provider::{DcTarget, QueuePair};

/// What one rank's DC target on one rail is: its number and key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DcAddr {
    pub dctn: u32,
    pub key: u64,
}

pub struct DcMesh {
    /// Indexed `context * n_dci + i`.
    pub dcis: Vec<Box<dyn QueuePair>>,
    /// One per rail.
    pub dcts: Vec<Box<dyn DcTarget>>,
    /// What each rank sent along (`extra` of build()), by rank.
    pub extras: Vec<Vec<u8>>,
    /// `targets[rank][rail]`.
    pub targets: Vec<Vec<DcAddr>>,
    pub n_dci: u32,
}

/// A DC key no other job guesses: a DCT accepts whoever presents it, so it
/// is the only thing between the DCT and a stranger's DCI (as the listen
/// handle's secret is for connection setup, oob::frame).
fn random_key() -> Result<u64> {
    let mut k = [0u8; 8];
    // SAFETY: getrandom writes at most k.len() bytes into k.
    let n = unsafe { libc::getrandom(k.as_mut_ptr() as *mut libc::c_void, k.len(), 0) };
    if n != k.len() as isize {
        return Err(Error::System(format!("getrandom for a DC key: {}", std::io::Error::last_os_error())));
    }
    Ok(u64::from_le_bytes(k))
}

impl DcMesh {
    /// Collective, as QpMesh::build: every rank calls it in the same order,
    /// holding `coll.collective`.
    pub fn build(
        coll: &CollComm,
        n_contexts: u32,
        n_dci: u32,
        log_depth: u32,
        traffic_class: u8,
        rings_in_device_memory: bool,
        extra: &[u8],
    ) -> Result<DcMesh> {
        let nrails = coll.rails.len();
        let mut dcts = Vec::with_capacity(nrails);
        for (k, nic) in coll.rails.iter().enumerate() {
            let dct = nic
                .create_dct(random_key()?)
                .map_err(|e| on_rail(e, &format!("creating the DC target on {}", RailSet::label(k, &**nic))))?;
            dcts.push(dct);
        }
        let mut dcis = Vec::with_capacity((n_contexts * n_dci) as usize);
        for c in 0..n_contexts {
            let rail = rail_of(c, nrails);
            let nic = &coll.rails[rail];
            for i in 0..n_dci {
                let q = nic.create_dci(log_depth, traffic_class, rings_in_device_memory).map_err(|e| {
                    on_rail(e, &format!("context {c}: creating DC initiator {i} on {}", RailSet::label(rail, &**nic)))
                })?;
                dcis.push(q);
            }
        }
        let mut mine = extra.to_vec();
        for d in &dcts {
            mine.extend_from_slice(&d.dctn().to_le_bytes());
            mine.extend_from_slice(&d.key().to_le_bytes());
        }
        let all = coll.mesh.allgather(&mine)?;
        let head = extra.len();
        let mut extras = Vec::with_capacity(all.len());
        let mut targets = Vec::with_capacity(all.len());
        for (p, m) in all.iter().enumerate() {
            if m.len() != head + 12 * nrails {
                return Err(Error::Remote(format!(
                    "rank {p} sent a DC description of {} bytes, not {} (another transport or rail count?)",
                    m.len(),
                    head + 12 * nrails
                )));
            }
            extras.push(m[..head].to_vec());
            targets.push(
                (0..nrails)
                    .map(|k| {
                        let at = head + 12 * k;
                        DcAddr {
                            dctn: u32::from_le_bytes(m[at..at + 4].try_into().expect("4")),
                            key: u64::from_le_bytes(m[at + 4..at + 12].try_into().expect("8")),
                        }
                    })
                    .collect(),
            );
        }
        Ok(DcMesh { dcis, dcts, extras, targets, n_dci })
    }

    /// The 48-byte datagram segment by which rail `rail`'s DCIs reach rank
    /// `p`'s DC target (mlx5_send_wr_set_dc_addr's bytes).
    pub fn datagram_of(coll: &CollComm, targets: &[Vec<DcAddr>], rail: usize, p: u32) -> Result<[u8; 48]> {
        let av: DatagramSeg = coll.rails[rail].dc_address(&coll.peers[rail][p as usize])?;
        let t = targets[p as usize][rail];
        Ok(av.with_dc_addr(t.dctn, t.key).encode())
    }
}

/// The rank whose WQE failed on a DC initiator: a DCI serves many peers, so
/// the error record's `peer` (the descriptor's) cannot name it. The failed
/// WQE is still in the DCI's ring: it never completes, so the ring cannot
/// wrap over it, and later posts to the failed queue are refused. Its
/// datagram segment (bytes 16..64 of the WQE: ctrl, then the 48-byte
/// `mlx5_wqe_datagram_seg`) is the copy of one rank's entry of the
/// context's `rust_gin_dc_peer` table the device made (mlx5/wqe.h
/// emit_queue_wqe), which carries that rank's DCT number and its random DC
/// key: the entry equal to it names the rank.
///
/// `wqe_index` is the error CQE's `wqe_counter` (a WQEBB index, 16 bits); a
/// DC WQE starts at an even WQEBB (docs/architecture.md, "WQE size and
/// credit"). `table[p]` is rank p's 48-byte datagram segment in the
/// context of this DCI (zero for a rank not connected). None: a WQE without
/// an address (a NOP or DUMP goes nowhere), or no entry matches.
pub fn peer_of_failed_wqe(dci: &dyn QueuePair, wqe_index: u32, table: &[[u8; 48]]) -> Option<u32> {
    use crate::mlx5::wire::{DATAGRAM_SEG_SIZE, SEND_WQE_BB};
    let mem = dci.mlx5_memory()?;
    let wqebbs = 1usize << mem.log_wqe_cnt;
    let first = (wqe_index as usize & (wqebbs - 1)) & !1;
    let mut seg = [0u8; DATAGRAM_SEG_SIZE];
    mem.sq.try_read(first * SEND_WQE_BB + 16, &mut seg).ok()?;
    if !DatagramSeg::parse(&seg).ext {
        return None;
    }
    table.iter().position(|t| *t == seg).map(|p| p as u32)
}
