//! Broadcom bnxt_re (Thor2) and AMD ionic (Pollara) send queues on the
//! emulated NIC: the same WQE bytes, doorbells and CQEs the device library's
//! family policies (device/include/rust_gin/{bnxt,ionic}/family.h) write and
//! read, executed by the same requester and responder as mlx5's. Only the
//! queue's edges differ by family, so only they live here:
//! - no doorbell record: the NIC trusts the index the last SQ doorbell named
//!   (bnxt_re: index and epoch, so a full ring is told from an empty one;
//!   ionic: a 16-bit index modulo the ring, so a ring posted completely full
//!   looks empty, as on the hardware);
//! - WQEs at a fixed stride (bnxt_re static mode: 8 slots of 16 bytes;
//!   ionic: 64 bytes), decoded from the family's format (host/bnxt/wire.rs,
//!   host/ionic/wire.rs: the twins the wire oracles check against rdma-core);
//! - 32-byte CQEs with a phase (bnxt_re) or colour (ionic) bit written last;
//!   the CQ's consumer index comes from its doorbell.
//!
//! Inside, errors travel as mlx5 syndromes (the requester's and responder's
//! language); the CQE writer translates them into the family's status, as
//! both families' statuses and mlx5's map to the same `ibv_wc_status`.

use super::*;
use crate::bnxt::wire as bw;
use crate::ionic::wire as iw;

/// The queue formats besides mlx5 the emulated NIC executes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueFormat {
    Bnxt,
    Ionic,
}

impl QueueFormat {
    /// Bytes between consecutive WQEs of the ring.
    pub fn wqe_stride(self) -> usize {
        match self {
            QueueFormat::Bnxt => bw::SLOT_BYTES * bw::STATIC_WQE_SLOTS as usize,
            QueueFormat::Ionic => iw::WQE_BYTES,
        }
    }
    pub const CQE_BYTES: usize = 32;
    /// Offsets of the SQ and CQ doorbell registers in the doorbell page
    /// (bnxt_re: one register for every queue, the type field tells them
    /// apart; ionic: one per queue type, dbpage[qtype], with the qtypes this
    /// emulated NIC reports).
    pub fn doorbell_offsets(self) -> (usize, usize) {
        match self {
            QueueFormat::Bnxt => (0, 0),
            QueueFormat::Ionic => (iw::db_offset(IONIC_SQ_QTYPE), iw::db_offset(IONIC_CQ_QTYPE)),
        }
    }
}

/// The queue types this emulated ionic reports (the ctx response's sq_qtype
/// and cq_qtype on hardware).
const IONIC_SQ_QTYPE: u8 = 1;
const IONIC_CQ_QTYPE: u8 = 2;
/// No doorbell heard yet.
const NO_DOORBELL: u64 = u64::MAX;

/// A family QP's doorbell side (part of its [`Bell`]).
pub(super) struct FamilyBell {
    format: QueueFormat,
    sq_db: usize,
    cq_db: usize,
    cqn: u32,
    /// The newest SQ doorbell value (NO_DOORBELL before the first).
    sq_value: AtomicU64,
    /// The newest CQ doorbell value, shared with the CQ.
    cq_value: Arc<AtomicU64>,
    /// bnxt_re's MSN table: its address and the path MTU; `psn` is the
    /// NIC's own next PSN, against which each WQE's entry is checked.
    msn: Option<(usize, u32)>,
    psn: AtomicU64,
}

/// A family CQ's format and the consumer index its doorbell reports.
pub(super) struct FamilyCq {
    format: QueueFormat,
    value: Arc<AtomicU64>,
}

/// The buffers of a bnxt_re or ionic CQ, allocated by the caller.
#[derive(Clone, Copy, Debug)]
pub struct FamilyCqSpec {
    pub format: QueueFormat,
    /// 2^log_cnt CQEs of 32 bytes; the NIC zeroes them (phase / colour 0:
    /// not valid on the first pass).
    pub buf: usize,
    pub log_cnt: u32,
}

/// The buffers of a bnxt_re or ionic QP's send queue, allocated by the caller.
#[derive(Clone, Copy, Debug)]
pub struct FamilyQpSpec {
    pub format: QueueFormat,
    pub pd: u32,
    pub send_cq: u32,
    /// 2^log_wqe_cnt WQEs of `format.wqe_stride()` bytes.
    pub sq_buf: usize,
    pub log_wqe_cnt: u32,
    /// The doorbell page (from [`EmuNic::alloc_uar`]).
    pub db_page: usize,
    /// bnxt_re: the MSN table (2^log_wqe_cnt 8-byte entries, right after
    /// the ring as Thor2 keeps it), checked per WQE; 0: none.
    pub msn_table: usize,
}

/// A WQE decoded from a family's bytes.
struct Decoded<'a> {
    op: WqeOp<'a>,
    signaled: bool,
    fence: Fence,
    opcode: u8,
}

fn refuse(syndrome: u8, reason: &str, opcode: u8) -> wqe::WqeError {
    wqe::WqeError { syndrome, reason: reason.into(), wqebbs: 1, opcode }
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// A bnxt_re static-mode WQE (8 slots): header, RDMA or atomic slot, then
/// SGEs or inline data in the slots its header counts.
fn decode_bnxt(b: &[u8]) -> Result<Decoded<'_>, wqe::WqeError> {
    let w = bw::Wqe::parse(b);
    let slots = w.wqe_slots as usize;
    if !(3..=bw::STATIC_WQE_SLOTS as usize).contains(&slots) {
        return Err(refuse(syndrome::LOCAL_QP_OP_ERR, "bnxt_re: wqe_size outside 3..=8 slots", w.opcode));
    }
    let body = &b[2 * bw::SLOT_BYTES..slots * bw::SLOT_BYTES];
    let sges = || -> SgList {
        let mut l = SgList::default();
        for s in body.chunks_exact(bw::SLOT_BYTES) {
            l.push(Sge {
                addr: le64(s, 0),
                lkey: le32(s, bw::off::SGE_LKEY),
                len: le32(s, bw::off::SGE_LENGTH) as u64,
            });
        }
        l
    };
    let fence = if w.flags & bw::flags::UC_FENCE != 0 {
        Fence::Strong
    } else if w.flags & bw::flags::RD_FENCE != 0 {
        Fence::Small
    } else {
        Fence::None
    };
    let inline = w.flags & bw::flags::INLINE != 0;
    let (raddr, rkey) = w.rdma_seg();
    let op = match w.opcode {
        bw::opcode::RDMA_WRITE | bw::opcode::RDMA_WRITE_IMM => {
            // WRITE_IMM carries the immediate in host order; the wire (and
            // the responder's CQE) wants ibv's big-endian imm_data.
            let imm = (w.opcode == bw::opcode::RDMA_WRITE_IMM).then_some(w.key_immd.to_be());
            if inline {
                let len = w.lhdr as usize;
                if len > body.len() || len > bw::MAX_INLINE as usize {
                    return Err(refuse(syndrome::LOCAL_LENGTH_ERR, "bnxt_re: inline data beyond its slots", w.opcode));
                }
                WqeOp::Write { raddr, rkey, gather: SgList::default(), inline: Some(&body[..len]), imm }
            } else {
                WqeOp::Write { raddr, rkey, gather: sges(), inline: None, imm }
            }
        }
        bw::opcode::RDMA_READ if !inline => WqeOp::Read { raddr, rkey, scatter: sges() },
        bw::opcode::ATOMIC_FA | bw::opcode::ATOMIC_CS if !inline && slots == 3 => {
            let (swap_add, compare) = w.atomic_seg();
            let (addr, lkey, len) = w.sge();
            if len != 8 {
                return Err(refuse(syndrome::LOCAL_LENGTH_ERR, "bnxt_re: atomic result SGE is not 8 bytes", w.opcode));
            }
            let kind = if w.opcode == bw::opcode::ATOMIC_CS { AtomicKind::CompareSwap } else { AtomicKind::FetchAdd };
            WqeOp::Atomic {
                kind,
                raddr: w.lhdr,
                rkey: w.key_immd,
                swap_add,
                compare,
                result: Sge { addr, len: 8, lkey },
            }
        }
        _ => return Err(refuse(syndrome::LOCAL_QP_OP_ERR, "bnxt_re: opcode not supported", w.opcode)),
    };
    // A field quirk (torchcomms#2714, mori#421): Thor2 moves at most 16 MiB
    // per WQE, so the device splits larger puts and gets (bnxt/family.h);
    // this NIC fails a larger one, as the local length error it would be.
    if let WqeOp::Write { gather: l, .. } | WqeOp::Read { scatter: l, .. } = &op {
        if l.iter().map(|s| s.len).sum::<u64>() > crate::nic::quirks::BNXT_MAX_WQE_BYTES {
            return Err(refuse(syndrome::LOCAL_LENGTH_ERR, "bnxt_re: more than 16 MiB in one WQE", w.opcode));
        }
    }
    Ok(Decoded { op, signaled: w.flags & bw::flags::SIGNALED != 0, fence, opcode: w.opcode })
}

/// What an ionic opcode means under firmware WQE ABI `abi` (1: enum
/// ionic_v1_op; 2 and later: enum ionic_v2_op). The tables overlap: 0x04 and
/// 0x05 are v2's atomics and v1's WRITE and WRITE_IMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IonicOp {
    Write,
    WriteImm,
    Read,
    FetchAdd,
    CompareSwap,
    Other,
}

fn ionic_op(op: u8, abi: u16) -> IonicOp {
    if abi < 2 {
        match op {
            iw::op_v1::RDMA_WRITE => IonicOp::Write,
            iw::op_v1::RDMA_WRITE_IMM => IonicOp::WriteImm,
            iw::op_v1::RDMA_READ => IonicOp::Read,
            iw::op_v1::ATOMIC_FA => IonicOp::FetchAdd,
            iw::op_v1::ATOMIC_CS => IonicOp::CompareSwap,
            _ => IonicOp::Other,
        }
    } else {
        match op {
            iw::op_v2::RDMA_WRITE => IonicOp::Write,
            iw::op_v2::RDMA_WRITE_IMM => IonicOp::WriteImm,
            iw::op_v2::RDMA_READ => IonicOp::Read,
            iw::op_v2::ATOMIC_FA => IonicOp::FetchAdd,
            iw::op_v2::ATOMIC_CS => IonicOp::CompareSwap,
            _ => IonicOp::Other,
        }
    }
}

/// An ionic 64-byte WQE at free-running index `i` of a ring of `depth`,
/// read as a NIC whose firmware WQE ABI is `abi`: its colour must be the
/// ring pass's.
fn decode_ionic(b: &[u8], i: u64, depth: u32, abi: u16) -> Result<Decoded<'_>, wqe::WqeError> {
    let w = iw::Wqe::parse(b);
    if u32::from(w.flags & iw::flags::COLOR != 0) != iw::color_for(i, depth) {
        return Err(refuse(syndrome::LOCAL_QP_OP_ERR, "ionic: WQE colour is not this ring pass's", w.op));
    }
    let tail = &b[iw::PLD_OFFSET..iw::WQE_BYTES];
    let sges = |n: u8| -> Result<SgList, wqe::WqeError> {
        if n as usize * iw::SGE_BYTES > iw::PLD_BYTES {
            return Err(refuse(syndrome::LOCAL_LENGTH_ERR, "ionic: more SGEs than the WQE holds", w.op));
        }
        let mut l = SgList::default();
        for s in tail.chunks_exact(iw::SGE_BYTES).take(n as usize) {
            l.push(Sge {
                addr: u64::from_be_bytes(s[0..8].try_into().expect("8 bytes")),
                len: be32(s, iw::off::SGE_LEN) as u64,
                lkey: be32(s, iw::off::SGE_LKEY),
            });
        }
        Ok(l)
    };
    let inline = w.flags & iw::flags::INL != 0;
    let (raddr, rkey) = (w.remote_va, w.rkey);
    let iop = ionic_op(w.op, abi);
    let op = match iop {
        IonicOp::Write | IonicOp::WriteImm => {
            let imm = (iop == IonicOp::WriteImm).then_some(w.imm_be);
            if inline {
                let len = w.word28 as usize;
                if len > iw::PLD_BYTES {
                    return Err(refuse(syndrome::LOCAL_LENGTH_ERR, "ionic: inline data beyond the WQE", w.op));
                }
                WqeOp::Write { raddr, rkey, gather: SgList::default(), inline: Some(&tail[..len]), imm }
            } else {
                WqeOp::Write { raddr, rkey, gather: sges(w.num_sge_key)?, inline: None, imm }
            }
        }
        IonicOp::Read if !inline => WqeOp::Read { raddr, rkey, scatter: sges(w.num_sge_key)? },
        IonicOp::FetchAdd | IonicOp::CompareSwap if !inline => {
            let t = |off: usize| off - iw::PLD_OFFSET;
            let swap_add = ((w.word28 as u64) << 32) | be32(tail, t(iw::off::SWAP_ADD_LOW)) as u64;
            let compare =
                ((be32(tail, t(iw::off::COMPARE_HIGH)) as u64) << 32) | be32(tail, t(iw::off::COMPARE_LOW)) as u64;
            // v2: lkey @44, local_va @48; v1: the result's SGE at @48.
            let (lkey, addr) = if abi < 2 {
                let s = t(iw::off::ATOMIC_V1_SGE);
                if be32(tail, s + iw::off::SGE_LEN) != 8 {
                    return Err(refuse(syndrome::LOCAL_LENGTH_ERR, "ionic v1: atomic result SGE is not 8 bytes", w.op));
                }
                (be32(tail, s + iw::off::SGE_LKEY), u64::from_be_bytes(tail[s..s + 8].try_into().expect("8 bytes")))
            } else {
                let va = t(iw::off::ATOMIC_LOCAL_VA);
                (be32(tail, t(iw::off::ATOMIC_LKEY)), u64::from_be_bytes(tail[va..va + 8].try_into().expect("8 bytes")))
            };
            let kind = if iop == IonicOp::CompareSwap { AtomicKind::CompareSwap } else { AtomicKind::FetchAdd };
            WqeOp::Atomic { kind, raddr, rkey, swap_add, compare, result: Sge { addr, len: 8, lkey } }
        }
        _ => return Err(refuse(syndrome::LOCAL_QP_OP_ERR, "ionic: opcode not supported", w.op)),
    };
    let fence = if w.flags & iw::flags::FENCE != 0 { Fence::Strong } else { Fence::None };
    Ok(Decoded { op, signaled: w.flags & iw::flags::SIG != 0, fence, opcode: w.op })
}

/// The family's completion status for an error the NIC found (an mlx5
/// syndrome inside): the one that maps to the same `ibv_wc_status`.
fn bnxt_status(s: u8) -> u8 {
    use crate::bnxt::wire::status as b;
    match s {
        syndrome::LOCAL_LENGTH_ERR => b::LOC_LEN,
        syndrome::LOCAL_QP_OP_ERR => b::LOC_QP_OP,
        syndrome::LOCAL_PROT_ERR | syndrome::LOCAL_ACCESS_ERR => b::PROT,
        syndrome::WR_FLUSH_ERR => b::WR_FLUSH,
        syndrome::MW_BIND_ERR => b::MEM_OP,
        syndrome::REMOTE_INVAL_REQ_ERR => b::REM_INVAL,
        syndrome::REMOTE_ACCESS_ERR => b::REM_ACC,
        syndrome::REMOTE_OP_ERR | syndrome::REMOTE_ABORTED_ERR => b::REM_OP,
        syndrome::TRANSPORT_RETRY_EXC_ERR => b::TRNSP_XCED,
        syndrome::RNR_RETRY_EXC_ERR => b::RNR_NAK_XCED,
        _ => b::BAD_RESP,
    }
}

fn ionic_status(s: u8) -> u32 {
    use crate::ionic::wire::status as i;
    match s {
        syndrome::LOCAL_LENGTH_ERR => i::LOCAL_LEN_ERR,
        syndrome::LOCAL_QP_OP_ERR => i::LOCAL_QP_OPER_ERR,
        syndrome::LOCAL_PROT_ERR => i::LOCAL_PROT_ERR,
        syndrome::LOCAL_ACCESS_ERR => i::LOCAL_ACC_ERR,
        syndrome::WR_FLUSH_ERR => i::WQE_FLUSHED_ERR,
        syndrome::MW_BIND_ERR => i::MEM_MGMT_OPER_ERR,
        syndrome::REMOTE_INVAL_REQ_ERR => i::REMOTE_INV_REQ_ERR,
        syndrome::REMOTE_ACCESS_ERR => i::REMOTE_ACC_ERR,
        syndrome::REMOTE_OP_ERR | syndrome::REMOTE_ABORTED_ERR => i::REMOTE_OPER_ERR,
        syndrome::TRANSPORT_RETRY_EXC_ERR => i::RETRY_EXCEEDED,
        syndrome::RNR_RETRY_EXC_ERR => i::RNR_RETRY_EXCEEDED,
        _ => i::BAD_RESP_ERR,
    }
}

impl Bell {
    /// A store to a family QP's doorbell page: an SQ doorbell (the producer
    /// index the NIC will run to) or its CQ's (the consumer index).
    pub(super) fn family_doorbell(&self, f: &FamilyBell, addr: usize, value: u64) {
        let page = addr & !(UAR_PAGE - 1);
        let (is_sq, qid) = match f.format {
            QueueFormat::Bnxt => {
                let d = bw::parse_doorbell(value);
                let sq = d.typ == bw::db::QUE_TYPE_SQ;
                let ok_type = sq || d.typ == bw::db::QUE_TYPE_CQ || d.typ == bw::db::QUE_TYPE_CQ_ARMALL;
                if page != self.uar || addr != f.sq_db || !d.valid || !ok_type {
                    return self.misdirected(addr, value);
                }
                (sq, d.qid)
            }
            QueueFormat::Ionic => {
                let (qid, _) = iw::parse_doorbell(value);
                if page != self.uar || (addr != f.sq_db && addr != f.cq_db) {
                    return self.misdirected(addr, value);
                }
                (addr == f.sq_db, qid)
            }
        };
        if qid != if is_sq { self.qpn } else { f.cqn } {
            return self.misdirected(addr, value);
        }
        if !is_sq {
            f.cq_value.store(value, Ordering::Release);
            return;
        }
        self.counters.doorbells.fetch_add(1, Ordering::Relaxed);
        f.sq_value.store(value, Ordering::Release);
        self.rung.set();
        self.hub.wake();
    }

    fn misdirected(&self, addr: usize, value: u64) {
        self.counters.doorbells_misdirected.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(qpn = self.qpn, addr, value, "emulated NIC: doorbell not for this QP's queues; ignored");
    }
}

impl FamilyBell {
    /// bnxt_re: the MSN entry of WQE `ci` must name its ring index and the
    /// PSNs its `len` bytes take from the NIC's own count, which then moves
    /// on. A Thor2 reads the table only to retransmit, so a wrong entry
    /// there corrupts a recovery long after the post; the emulated NIC
    /// checks every one at once, failing the WQE.
    fn check_msn(&self, ci: u64, log: u32, len: u64) -> Result<(), String> {
        let Some((table, mtu)) = self.msn else { return Ok(()) };
        let slot = ci & ((1u64 << log) - 1);
        // SAFETY: the table has 2^log entries (create_family_qp's contract).
        let e = unsafe { std::ptr::read_volatile((table + 8 * slot as usize) as *const u64) };
        let e = u64::from_le(e);
        let psn = self.psn.load(Ordering::Relaxed);
        let pk = bw::packets(len as u32, mtu) as u64;
        let want = bw::msn_entry(slot as u32, (psn + pk) as u32, psn as u32);
        if e != want {
            return Err(format!("entry {slot}: {e:#018x}, expected {want:#018x} (PSN {psn}, {len} bytes at MTU {mtu})"));
        }
        self.psn.store(psn + pk, Ordering::Relaxed);
        Ok(())
    }

    /// WQEs published past `ci` by the newest SQ doorbell, or None if it
    /// names more than the ring holds.
    fn available(&self, ci: u64, log: u32) -> Option<u64> {
        let v = self.sq_value.load(Ordering::Acquire);
        if v == NO_DOORBELL {
            return Some(0);
        }
        let depth = 1u64 << log;
        match self.format {
            QueueFormat::Bnxt => {
                let d = bw::parse_doorbell(v);
                // Index and epoch name the producer modulo twice the ring.
                let pi2 = (d.index as u64 & (depth - 1)) | ((d.epoch as u64) << log);
                let n = pi2.wrapping_sub(ci) & (2 * depth - 1);
                (n <= depth).then_some(n)
            }
            QueueFormat::Ionic => Some((iw::parse_doorbell(v).1 as u64).wrapping_sub(ci) & (depth - 1)),
        }
    }
}

impl Inner {
    /// run_sq for a bnxt_re or ionic send queue.
    pub(super) fn run_family_sq(&self, st: &mut State, qpn: u32) -> bool {
        let mut progress = false;
        let mut buf = [0u8; 128];
        loop {
            if st.out_of_budget(qpn) {
                return progress;
            }
            let Some(qp) = st.qps.get(&qpn) else { return progress };
            if !matches!(qp.state, QpState::Rts | QpState::Error) {
                return progress;
            }
            let bell = qp.bell.clone();
            let f = bell.family.as_ref().expect("a family QP");
            let log = qp.spec.log_wqe_cnt;
            let Some(avail) = f.available(qp.ci, log) else {
                if qp.state == QpState::Error {
                    return progress;
                }
                let qp = st.qps.get_mut(&qpn).expect("qp");
                self.fail_qp(qp, syndrome::LOCAL_QP_OP_ERR, 0, "doorbell names more WQEs than the ring holds");
                return true;
            };
            if avail == 0 {
                return progress;
            }
            let (format, stride) = (f.format, f.format.wqe_stride());
            let slot = (qp.ci & ((1u64 << log) - 1)) as usize;
            // SAFETY: the slot lies inside the send queue the creator keeps
            // valid (create_family_qp's contract); the doorbell published it.
            unsafe { std::ptr::copy_nonoverlapping((qp.spec.sq_buf + slot * stride) as *const u8, buf.as_mut_ptr(), stride) };
            let (index, state, ci) = (qp.ci as u16, qp.state, qp.ci);
            let decoded = match format {
                QueueFormat::Bnxt => decode_bnxt(&buf[..stride]),
                QueueFormat::Ionic => decode_ionic(&buf[..stride], ci, 1 << log, self.config.ionic_abi),
            };
            let qp = st.qps.get_mut(&qpn).expect("qp");
            progress = true;
            if state == QpState::Error {
                let op = decoded.as_ref().map_or_else(|e| e.opcode, |d| d.opcode);
                push_done(qp, index, true, op, Status::Err(syndrome::WR_FLUSH_ERR));
                qp.ci += 1;
                bump(&self.counters.wqebbs_read, 1);
                continue;
            }
            let d = match decoded {
                Ok(d) => d,
                Err(e) => {
                    tracing::debug!(qpn, index, reason = %e.reason, "emulated NIC: bad WQE");
                    push_done(qp, index, true, e.opcode, Status::Err(e.syndrome));
                    qp.ci += 1;
                    bump(&self.counters.wqebbs_read, 1);
                    self.enter_error(qp);
                    continue;
                }
            };
            if super::requester::fence_holds(qp, d.fence) {
                return progress;
            }
            if let Err(why) = f.check_msn(ci, log, d.op.length()) {
                tracing::warn!(qpn, index, why, "emulated NIC: MSN table entry does not match the WQE");
                push_done(qp, index, true, d.opcode, Status::Err(syndrome::LOCAL_QP_OP_ERR));
                qp.ci += 1;
                bump(&self.counters.wqebbs_read, 1);
                self.enter_error(qp);
                continue;
            }
            qp.ci += 1;
            bump(&self.counters.wqebbs_read, 1);
            self.execute(st, qpn, index, d.signaled, d.opcode, d.op, None);
        }
    }

    /// write_cqe for a bnxt_re or ionic CQ: the mlx5-shaped completion the
    /// requester made, in the family's format.
    pub(super) fn write_family_cqe(&self, st: &mut State, cqn: u32, cqe: &Cqe) {
        let Some(cq) = st.cqs.get_mut(&cqn) else { return };
        let f = cq.family.as_ref().expect("a family CQ");
        if cqe.opcode != cqe_opcode::REQ && cqe.opcode != cqe_opcode::REQ_ERR {
            tracing::warn!(cqn, opcode = cqe.opcode, "emulated NIC: no receive completions on bnxt_re / ionic CQs yet; dropped");
            return;
        }
        let log = cq.spec.log_cnt;
        let depth = 1u64 << log;
        let v = f.value.load(Ordering::Acquire);
        // Outstanding CQEs from the consumer index the doorbell named (0 before
        // the first): bnxt_re's epoch tells a full CQ; ionic's index cannot.
        let outstanding = match (f.format, v) {
            (_, NO_DOORBELL) => cq.pi,
            (QueueFormat::Bnxt, v) => {
                let d = bw::parse_doorbell(v);
                let ci2 = (d.index as u64 & (depth - 1)) | ((d.epoch as u64) << log);
                cq.pi.wrapping_sub(ci2) & (2 * depth - 1)
            }
            (QueueFormat::Ionic, v) => cq.pi.wrapping_sub(iw::parse_doorbell(v).1 as u64) & (depth - 1),
        };
        if outstanding >= depth {
            bump(&self.counters.cq_overruns, 1);
            tracing::error!(cqn, pi = cq.pi, "emulated NIC: CQ overrun, CQE dropped");
            return;
        }
        let failed = cqe.opcode == cqe_opcode::REQ_ERR;
        // Both report how far the SQ completed as one past the WQE.
        let end = (cqe.wqe_counter as u32).wrapping_add(1) & 0xffff;
        let (bytes, valid_at) = match f.format {
            QueueFormat::Bnxt => {
                let c = bw::Cqe {
                    qp_handle: cqe.qpn as u64,
                    con_indx: end,
                    wc_type: bw::bcqe::WC_TYPE_SEND,
                    status: if failed { bnxt_status(cqe.syndrome) } else { bw::status::OK },
                };
                (c.encode(bw::cq_expected_phase(cq.pi, depth as u32)), bw::CQE_BCQE_OFFSET)
            }
            QueueFormat::Ionic => {
                let c = iw::Cqe {
                    msg_msn: end,
                    npg_wqe_idx_timestamp: 0,
                    status_length: if failed { ionic_status(cqe.syndrome) } else { cqe.byte_cnt },
                    qid: cqe.qpn,
                    typ: iw::cqe::TYPE_SEND_MSN,
                    error: failed,
                };
                (c.encode(iw::color_for(cq.pi, depth as u32)), iw::off::CQE_QID_TYPE_FLAGS)
            }
        };
        let slot = cq.spec.buf + (cq.pi & (depth - 1)) as usize * QueueFormat::CQE_BYTES;
        // SAFETY: the slot is inside the CQ ring (create_family_cq's
        // contract). The word holding the phase / colour goes last, with
        // release, so a poller that sees it valid sees the whole CQE.
        unsafe {
            dma_write(slot as u64, &bytes[..valid_at]);
            dma_write((slot + valid_at + 4) as u64, &bytes[valid_at + 4..]);
            let word = u32::from_ne_bytes(bytes[valid_at..valid_at + 4].try_into().expect("4 bytes"));
            AtomicU32::from_ptr((slot + valid_at) as *mut u32).store(word, Ordering::Release);
        }
        cq.pi += 1;
        st.written.push((cq.spec.buf as u64, depth * QueueFormat::CQE_BYTES as u64));
        bump(&self.counters.cqes_written, 1);
    }
}

impl EmuNic {
    /// # Safety
    /// `spec.buf` (2^log_cnt * 32 bytes) must stay valid until
    /// [`EmuNic::destroy_cq`].
    pub unsafe fn create_family_cq(&self, spec: FamilyCqSpec) -> Result<u32, NicError> {
        if spec.log_cnt > 16 || spec.buf == 0 || !spec.buf.is_multiple_of(32) {
            return Err(NicError::BadArgument(format!("create_family_cq: bad buffer or size {spec:?}")));
        }
        // SAFETY: the caller guarantees the ring.
        unsafe { std::ptr::write_bytes(spec.buf as *mut u8, 0, QueueFormat::CQE_BYTES << spec.log_cnt) };
        let mut st = lock(&self.0.inner.state);
        st.next_cqn += 1;
        let cqn = st.next_cqn;
        let family = FamilyCq { format: spec.format, value: Arc::new(AtomicU64::new(NO_DOORBELL)) };
        let mspec = CqSpec { buf: spec.buf, log_cnt: spec.log_cnt, dbrec: 0 };
        st.cqs.insert(cqn, Cq { spec: mspec, pi: 0, family: Some(family) });
        Ok(cqn)
    }

    /// # Safety
    /// The send queue (2^log_wqe_cnt WQEs at the format's stride) must stay
    /// valid until [`EmuNic::destroy_qp`]; the doorbell page must come from
    /// [`EmuNic::alloc_uar`].
    pub unsafe fn create_family_qp(&self, spec: FamilyQpSpec) -> Result<u32, NicError> {
        if spec.log_wqe_cnt > 15
            || spec.sq_buf == 0
            || !spec.sq_buf.is_multiple_of(64)
            || (spec.msn_table != 0 && (spec.format != QueueFormat::Bnxt || !spec.msn_table.is_multiple_of(8)))
        {
            return Err(NicError::BadArgument(format!("create_family_qp: bad send queue {spec:?}")));
        }
        let mut st = lock(&self.0.inner.state);
        let cq_value = match st.cqs.get(&spec.send_cq).map(|c| c.family.as_ref()) {
            Some(Some(f)) if f.format == spec.format => f.value.clone(),
            Some(_) => {
                return Err(NicError::BadArgument(format!(
                    "create_family_qp: CQ {:#x} is not a {:?} CQ",
                    spec.send_cq, spec.format
                )))
            }
            None => return Err(NicError::NoSuchCq(spec.send_cq)),
        };
        if !st.uars.contains_key(&spec.db_page) {
            return Err(NicError::BadArgument(format!("create_family_qp: {:#x} is not a doorbell page of this NIC", spec.db_page)));
        }
        st.next_qpn += 1;
        let qpn = st.next_qpn;
        let (sq_off, cq_off) = spec.format.doorbell_offsets();
        let family = FamilyBell {
            format: spec.format,
            sq_db: spec.db_page + sq_off,
            cq_db: spec.db_page + cq_off,
            cqn: spec.send_cq,
            sq_value: AtomicU64::new(NO_DOORBELL),
            cq_value,
            msn: (spec.msn_table != 0).then_some((spec.msn_table, self.0.inner.config.mtu as u32)),
            psn: AtomicU64::new(0),
        };
        let mspec = QpSpec {
            pd: spec.pd,
            send_cq: spec.send_cq,
            recv_cq: None,
            sq_buf: spec.sq_buf,
            log_wqe_cnt: spec.log_wqe_cnt,
            dbrec: 0,
            uar: spec.db_page,
        };
        let bell = Bell {
            qpn,
            uar: spec.db_page,
            dbrec: 0,
            rung: st.rung.bit(QpTable::slot(qpn)),
            hub: self.0.inner.hub.clone(),
            counters: self.0.inner.counters.clone(),
            family: Some(family),
        };
        st.qps.insert(qpn, Qp::new(qpn, bell, mspec));
        Ok(qpn)
    }
}
