//! The bnxt_re and ionic policies of the device data path (bnxt/family.h,
//! ionic/family.h), in the host build: requests posted through
//! rust_gin_bnxt_post / rust_gin_ionic_post land in host memory as the bytes
//! the Rust twins (host/bnxt/wire.rs, host/ionic/wire.rs, themselves checked
//! against rdma-core by the wire oracles) encode, at the right ring slot, with
//! the right colour, and are rung with the doorbell value the twins compute,
//! across several ring wraps; CQEs the twins encode are consumed by
//! rust_gin_*_poll (phase / colour across CQ wraps, credit, the CQ doorbell,
//! an error CQE into the sticky error record). The producer protocol is the
//! one mlx5 uses. Here the test plays the NIC by hand, byte by byte;
//! tests/emu_families.rs runs the same code against the emulated NIC.

use rccl_rust_gin::abi::{
    rust_gin_error, rust_gin_host_doorbell, rust_gin_mlx5_request, rust_gin_mlx5_sq_state, rust_gin_nic_sq,
    RUST_GIN_ERR_CQE, RUST_GIN_ERR_INVALID, RUST_GIN_ERR_QP_FAILED, RUST_GIN_OK, RUST_GIN_REQ_FENCE,
    RUST_GIN_REQ_INLINE, RUST_GIN_REQ_SMALL_FENCE, RUST_GIN_REQ_SOLICITED,
};
use rccl_rust_gin::bnxt::wire as bw;
use rccl_rust_gin::ionic::wire as iw;
use rccl_rust_gin::mlx5::wire::opcode;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ffi::c_void;
use std::sync::Mutex;

use rccl_rust_gin::device::{rust_gin_bnxt_poll, rust_gin_bnxt_post, rust_gin_ionic_poll, rust_gin_ionic_post};

/// Zeroed, 4 KiB-aligned host memory standing in for GPU-visible memory.
struct Buf {
    p: *mut u8,
    layout: Layout,
}
impl Buf {
    fn new(len: usize) -> Buf {
        let layout = Layout::from_size_align(len.max(64), 4096).unwrap();
        // SAFETY: non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        assert!(!p.is_null());
        Buf { p, layout }
    }
    fn addr(&self) -> u64 {
        self.p as u64
    }
    fn bytes(&self, at: usize, len: usize) -> Vec<u8> {
        assert!(at + len <= self.layout.size());
        // SAFETY: in bounds; the device code has returned.
        unsafe { std::slice::from_raw_parts(self.p.add(at), len).to_vec() }
    }
    fn write(&self, at: usize, b: &[u8]) {
        assert!(at + b.len() <= self.layout.size());
        // SAFETY: in bounds; no device call is running.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), self.p.add(at), b.len()) }
    }
}
impl Drop for Buf {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout.
        unsafe { dealloc(self.p, self.layout) }
    }
}

/// Every doorbell the device code stores, as (register, value).
struct Rings(Mutex<Vec<(u64, u64)>>);
extern "C" fn ring(ctx: *const c_void, reg: *mut u64, value: u64) {
    // SAFETY: ctx is the Rings of the queue, alive for the test.
    let r = unsafe { &*(ctx as *const Rings) };
    r.0.lock().unwrap().push((reg as u64, value));
}

const LOG_WQE: u32 = 4; // 16 WQEs
const LOG_CQ: u32 = 2; // 4 CQEs: the CQ wraps often
const QID: u32 = 0x5_4321;
const CQID: u32 = 0x1234;

struct Queue {
    ring: Buf,
    cq: Buf,
    state: Box<rust_gin_mlx5_sq_state>,
    error: Box<rust_gin_error>,
    rings: Box<Rings>,
    host: Box<rust_gin_host_doorbell>,
    desc: rust_gin_nic_sq,
    sq_db: u64,
    cq_db: u64,
}

impl Queue {
    fn new(wqe_bytes: usize) -> Box<Queue> {
        let ring_buf = Buf::new(wqe_bytes << LOG_WQE);
        let cq = Buf::new(32 << LOG_CQ);
        let mut state = Box::<rust_gin_mlx5_sq_state>::default();
        let mut error = Box::<rust_gin_error>::default();
        let rings = Box::new(Rings(Mutex::new(Vec::new())));
        let host = Box::new(rust_gin_host_doorbell {
            ring: Some(ring),
            record: None,
            ctx: &*rings as *const Rings as *const c_void,
        });
        // Doorbell addresses only: the host doorbell receives them, nothing
        // stores there.
        let (sq_db, cq_db) = (0x7000_0000_1008u64, 0x7000_0000_1020u64);
        let desc = rust_gin_nic_sq {
            wqe_buf: ring_buf.addr(),
            sq_db,
            cq_buf: cq.addr(),
            cq_db,
            state: &mut *state as *mut _ as u64,
            error: &mut *error as *mut _ as u64,
            qpn: QID,
            log_wqe_cnt: LOG_WQE,
            cqn: CQID,
            log_cq_cnt: LOG_CQ,
            peer: 3,
            log_signal_period: 2,
            timeout_ns: 2_000_000_000,
            cq_phase: 1,
            host_doorbell: &*host as *const rust_gin_host_doorbell as u64,
            ..Default::default()
        };
        Box::new(Queue { ring: ring_buf, cq, state, error, rings, host, desc, sq_db, cq_db })
    }
    fn take_rings(&self) -> Vec<(u64, u64)> {
        let _ = &self.host;
        std::mem::take(&mut *self.rings.0.lock().unwrap())
    }
}

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A random request of every kind the families post.
fn random_request(g: &mut Rng) -> rust_gin_mlx5_request {
    let kinds = [opcode::RDMA_WRITE, opcode::RDMA_WRITE_IMM, opcode::RDMA_READ, opcode::ATOMIC_FA, opcode::ATOMIC_CS];
    let mut r = rust_gin_mlx5_request {
        opcode: kinds[(g.next() % 6).min(4) as usize],
        lkey: g.next() as u32,
        rkey: g.next() as u32,
        laddr: g.next(),
        raddr: g.next(),
        operand0: g.next(),
        operand1: g.next(),
        imm: g.next() as u32,
        length: 1 + (g.next() % 0x10000) as u32,
        ..Default::default()
    };
    let fl = [0, RUST_GIN_REQ_FENCE, RUST_GIN_REQ_SMALL_FENCE, RUST_GIN_REQ_SOLICITED][(g.next() % 4) as usize];
    r.flags = fl as u8;
    match r.opcode {
        opcode::ATOMIC_FA | opcode::ATOMIC_CS => r.length = 8,
        opcode::RDMA_WRITE if g.next() % 3 == 0 => {
            r.flags |= RUST_GIN_REQ_INLINE as u8;
            r.length = 1 + (g.next() % 8) as u32;
        }
        _ => {}
    }
    r
}

/// The bytes the bnxt_re twin encodes for `r` (signalled: `sig`).
fn bnxt_expected(r: &rust_gin_mlx5_request, sig: bool) -> [u8; bw::WQE3_BYTES] {
    let mut f = if sig { bw::flags::SIGNALED } else { 0 };
    // Every atomic is fenced: at most one outstanding (bnxt/family.h).
    let atomic = r.opcode == opcode::ATOMIC_FA || r.opcode == opcode::ATOMIC_CS;
    if r.flags & RUST_GIN_REQ_FENCE as u8 != 0 || atomic {
        f |= bw::flags::UC_FENCE;
    } else if r.flags & RUST_GIN_REQ_SMALL_FENCE as u8 != 0 {
        f |= bw::flags::RD_FENCE;
    }
    if r.flags & RUST_GIN_REQ_SOLICITED as u8 != 0 {
        f |= bw::flags::SE;
    }
    let w = match r.opcode {
        opcode::ATOMIC_FA => bw::Wqe::atomic(bw::opcode::ATOMIC_FA, f, r.raddr, r.rkey, r.operand0, 0, r.laddr, r.lkey),
        opcode::ATOMIC_CS => {
            bw::Wqe::atomic(bw::opcode::ATOMIC_CS, f, r.raddr, r.rkey, r.operand0, r.operand1, r.laddr, r.lkey)
        }
        opcode::RDMA_READ => bw::Wqe::rdma(bw::opcode::RDMA_READ, f, r.raddr, r.rkey, r.laddr, r.lkey, r.length, 0),
        // ibv's imm_data is big-endian; bnxt_re carries it in host order.
        opcode::RDMA_WRITE_IMM => bw::Wqe::rdma(
            bw::opcode::RDMA_WRITE_IMM,
            f,
            r.raddr,
            r.rkey,
            r.laddr,
            r.lkey,
            r.length,
            u32::from_be(r.imm),
        ),
        _ if r.flags & RUST_GIN_REQ_INLINE as u8 != 0 => bw::Wqe::write_inline8(f, r.raddr, r.rkey, r.operand0, r.length),
        _ => bw::Wqe::rdma(bw::opcode::RDMA_WRITE, f, r.raddr, r.rkey, r.laddr, r.lkey, r.length, 0),
    };
    w.encode()
}

/// The bytes the ionic twin encodes for `r` at ring slot `idx`.
fn ionic_expected(r: &rust_gin_mlx5_request, idx: u16, color: u32, sig: bool) -> [u8; iw::WQE_BYTES] {
    let mut f = if sig { iw::flags::SIG } else { 0 };
    if r.flags & (RUST_GIN_REQ_FENCE | RUST_GIN_REQ_SMALL_FENCE) as u8 != 0 {
        f |= iw::flags::FENCE;
    }
    if r.flags & RUST_GIN_REQ_SOLICITED as u8 != 0 {
        f |= iw::flags::SOL;
    }
    let w = match r.opcode {
        opcode::ATOMIC_FA => {
            iw::Wqe::atomic_v2(iw::op_v2::ATOMIC_FA, idx, f, color, r.raddr, r.rkey, r.operand0, 0, r.laddr, r.lkey)
        }
        opcode::ATOMIC_CS => iw::Wqe::atomic_v2(
            iw::op_v2::ATOMIC_CS,
            idx,
            f,
            color,
            r.raddr,
            r.rkey,
            r.operand0,
            r.operand1,
            r.laddr,
            r.lkey,
        ),
        opcode::RDMA_READ => {
            iw::Wqe::rdma(iw::op_v2::RDMA_READ, idx, f, color, r.raddr, r.rkey, r.laddr, r.lkey, r.length, 0)
        }
        opcode::RDMA_WRITE_IMM => {
            iw::Wqe::rdma(iw::op_v2::RDMA_WRITE_IMM, idx, f, color, r.raddr, r.rkey, r.laddr, r.lkey, r.length, r.imm)
        }
        _ if r.flags & RUST_GIN_REQ_INLINE as u8 != 0 => {
            iw::Wqe::write_inline8(iw::op_v2::RDMA_WRITE, idx, f, color, r.raddr, r.rkey, r.operand0, r.length)
        }
        _ => iw::Wqe::rdma(iw::op_v2::RDMA_WRITE, idx, f, color, r.raddr, r.rkey, r.laddr, r.lkey, r.length, 0),
    };
    w.encode()
}

/// One NIC family as the test drives it.
trait Family {
    const WQE_STRIDE: usize;
    /// Whether the family rings once per WQE unless the descriptor's
    /// doorbell_group asks for one per batch (bnxt_re's policy).
    const DOORBELL_PER_WQE: bool;
    fn post(q: &rust_gin_nic_sq, reqs: &[rust_gin_mlx5_request]) -> i32;
    fn poll(q: &rust_gin_nic_sq) -> i32;
    /// The WQE bytes at index `i` (free-running), as the twin encodes them.
    fn expected(r: &rust_gin_mlx5_request, i: u64, sig: bool) -> Vec<u8>;
    fn sq_doorbell(pi: u64) -> u64;
    fn cq_doorbell(ci: u64) -> u64;
    /// The CQE the NIC writes at consumer index `ci` completing WQEs up to
    /// `end` (exclusive), with an error status or none.
    fn cqe(ci: u64, end: u64, error: Option<u8>) -> Vec<u8>;
    /// The error record's syndrome for that status.
    fn syndrome(status: u8) -> u8;
}

struct Bnxt;
impl Family for Bnxt {
    const WQE_STRIDE: usize = (bw::STATIC_WQE_SLOTS as usize) * bw::SLOT_BYTES;
    const DOORBELL_PER_WQE: bool = true;
    fn post(q: &rust_gin_nic_sq, reqs: &[rust_gin_mlx5_request]) -> i32 {
        // SAFETY: the descriptor and everything it names outlive the call.
        unsafe { rust_gin_bnxt_post(q, reqs.as_ptr(), reqs.len() as u32) }
    }
    fn poll(q: &rust_gin_nic_sq) -> i32 {
        // SAFETY: as above.
        unsafe { rust_gin_bnxt_poll(q) }
    }
    fn expected(r: &rust_gin_mlx5_request, _: u64, sig: bool) -> Vec<u8> {
        bnxt_expected(r, sig).to_vec()
    }
    fn sq_doorbell(pi: u64) -> u64 {
        // Static mode: the index is the WQE index; the epoch the wrap
        // parity of the slot tail (8 slots per WQE).
        let slots = (1u64 << LOG_WQE) as u32 * bw::STATIC_WQE_SLOTS;
        bw::db_value((pi % (1 << LOG_WQE)) as u32, bw::db_epoch(pi * bw::STATIC_WQE_SLOTS as u64, slots), QID, bw::db::QUE_TYPE_SQ)
    }
    fn cq_doorbell(ci: u64) -> u64 {
        bw::db_value((ci % (1 << LOG_CQ)) as u32, bw::db_epoch(ci, 1 << LOG_CQ), CQID, bw::db::QUE_TYPE_CQ)
    }
    fn cqe(ci: u64, end: u64, error: Option<u8>) -> Vec<u8> {
        let c = bw::Cqe {
            qp_handle: 0x1122_3344_5566_7788,
            con_indx: (end % (1 << LOG_WQE)) as u32,
            wc_type: bw::bcqe::WC_TYPE_SEND,
            status: error.unwrap_or(bw::status::OK),
        };
        c.encode(bw::cq_expected_phase(ci, 1 << LOG_CQ)).to_vec()
    }
    fn syndrome(status: u8) -> u8 {
        status
    }
}

struct Ionic;
impl Family for Ionic {
    const WQE_STRIDE: usize = iw::WQE_BYTES;
    const DOORBELL_PER_WQE: bool = false;
    fn post(q: &rust_gin_nic_sq, reqs: &[rust_gin_mlx5_request]) -> i32 {
        // SAFETY: the descriptor and everything it names outlive the call.
        unsafe { rust_gin_ionic_post(q, reqs.as_ptr(), reqs.len() as u32) }
    }
    fn poll(q: &rust_gin_nic_sq) -> i32 {
        // SAFETY: as above.
        unsafe { rust_gin_ionic_poll(q) }
    }
    fn expected(r: &rust_gin_mlx5_request, i: u64, sig: bool) -> Vec<u8> {
        let depth = 1u32 << LOG_WQE;
        ionic_expected(r, (i % depth as u64) as u16, iw::color_for(i, depth), sig).to_vec()
    }
    fn sq_doorbell(pi: u64) -> u64 {
        iw::db_value(QID, (pi % (1 << LOG_WQE)) as u16)
    }
    fn cq_doorbell(ci: u64) -> u64 {
        iw::db_value(CQID, (ci % (1 << LOG_CQ)) as u16)
    }
    fn cqe(ci: u64, end: u64, error: Option<u8>) -> Vec<u8> {
        let c = iw::Cqe {
            msg_msn: end as u32,
            npg_wqe_idx_timestamp: 0,
            status_length: error.map_or(64, u32::from),
            qid: QID,
            typ: iw::cqe::TYPE_SEND_MSN,
            error: error.is_some(),
        };
        c.encode(iw::color_for(ci, 1 << LOG_CQ)).to_vec()
    }
    fn syndrome(status: u8) -> u8 {
        status
    }
}

/// Posts 3 x 16 random requests in batches, completing them by hand, and
/// checks every WQE, every doorbell, the credit and the CQ doorbells.
fn posts_and_completes<F: Family>(seed: u64, doorbell_group: u32) {
    let mut q = Queue::new(F::WQE_STRIDE);
    q.desc.doorbell_group = doorbell_group;
    let per_wqe = F::DOORBELL_PER_WQE && doorbell_group == 0;
    let mut doorbells = 0u64;
    let mut g = Rng(seed);
    let depth = 1u64 << LOG_WQE;
    let mut pi = 0u64;
    let mut ci = 0u64;
    for round in 0..24 {
        // 1..=4 requests (a quarter queue: one batch), then 5..=7 (two).
        let n = if round % 3 == 2 { 5 + g.next() % 3 } else { 1 + g.next() % 4 };
        let reqs: Vec<_> = (0..n).map(|_| random_request(&mut g)).collect();
        assert_eq!(F::post(&q.desc, &reqs), RUST_GIN_OK as i32, "round {round}");
        // Batches of at most a quarter queue (4); each batch's last WQE asks
        // for a CQE (no NOP to flush with), and each batch rings.
        let batches: Vec<u64> = if n <= 4 { vec![n] } else { vec![4, n - 4] };
        let mut expect_rings = Vec::new();
        let mut k = 0u64;
        for b in &batches {
            for j in 0..*b {
                let i = pi + k + j;
                let slot = (i % depth) as usize;
                let got = q.ring.bytes(slot * F::WQE_STRIDE, F::expected(&reqs[0], i, false).len());
                let want = F::expected(&reqs[(k + j) as usize], i, j + 1 == *b);
                assert_eq!(got, want, "round {round}, WQE {i} (slot {slot}): {:?}", reqs[(k + j) as usize]);
            }
            // bnxt_re by default: a doorbell naming each WQE in turn;
            // otherwise one per batch.
            let firsts = if per_wqe { 1..=*b } else { *b..=*b };
            for j in firsts {
                expect_rings.push((q.sq_db, F::sq_doorbell(pi + k + j)));
            }
            k += b;
        }
        doorbells += expect_rings.len() as u64;
        assert_eq!(q.take_rings(), expect_rings, "round {round}: doorbells (per WQE: {per_wqe}), in order");
        assert_eq!(q.state.doorbells, doorbells, "round {round}: the doorbell count");
        pi += n;
        assert_eq!(q.state.ready, pi);
        assert_eq!(q.state.rung, pi);
        // The NIC completes everything: one CQE per signalled WQE (per batch).
        let mut end = pi - n;
        for b in &batches {
            end += b;
            q.cq.write(((ci % (1 << LOG_CQ)) * 32) as usize, &F::cqe(ci, end, None));
            ci += 1;
        }
        assert_eq!(F::poll(&q.desc), RUST_GIN_OK as i32);
        assert_eq!(q.state.done, pi, "round {round}: credit from the CQEs");
        assert_eq!(q.state.cq_ci, ci);
        assert_eq!(q.take_rings(), vec![(q.cq_db, F::cq_doorbell(ci))], "round {round}: the CQ doorbell");
        // A stale CQE (last pass's phase or colour) is not taken again.
        assert_eq!(F::poll(&q.desc), RUST_GIN_OK as i32);
        assert_eq!(q.state.cq_ci, ci, "round {round}: an old CQE was consumed twice");
        assert!(q.take_rings().is_empty());
    }
    assert!(pi > 3 * depth, "the SQ wrapped three times ({pi} WQEs)");

    // An error CQE fails the queue and lands in the sticky error record.
    let r = random_request(&mut g);
    assert_eq!(F::post(&q.desc, &[r]), RUST_GIN_OK as i32);
    pi += 1;
    q.take_rings();
    q.cq.write(((ci % (1 << LOG_CQ)) * 32) as usize, &F::cqe(ci, pi, Some(7)));
    assert_eq!(F::poll(&q.desc), RUST_GIN_ERR_CQE as i32);
    assert_ne!(q.state.failed, 0);
    assert_eq!(q.error.code, RUST_GIN_ERR_CQE);
    assert_eq!(q.error.syndrome, F::syndrome(7));
    assert_eq!(u64::from(q.error.wqe_index), (pi - 1) & 0xffff);
    assert_eq!(q.error.peer, 3);
    assert_eq!(F::post(&q.desc, &[r]), RUST_GIN_ERR_QP_FAILED as i32, "a failed queue refuses posts");
}

/// NOP and DUMP have no WQE in these families, and a malformed request
/// posts nothing.
fn refuses_what_it_cannot_encode<F: Family>() {
    let q = Queue::new(F::WQE_STRIDE);
    let ok = rust_gin_mlx5_request { opcode: opcode::RDMA_WRITE, length: 8, ..Default::default() };
    for bad in [
        rust_gin_mlx5_request { opcode: opcode::NOP, ..Default::default() },
        rust_gin_mlx5_request { opcode: opcode::DUMP, length: 1, ..Default::default() },
        rust_gin_mlx5_request { opcode: opcode::RDMA_READ, length: 8, flags: RUST_GIN_REQ_INLINE as u8, ..Default::default() },
        rust_gin_mlx5_request { opcode: opcode::RDMA_WRITE, length: 9, flags: RUST_GIN_REQ_INLINE as u8, ..Default::default() },
        rust_gin_mlx5_request { opcode: opcode::ATOMIC_FA, length: 4, ..Default::default() },
    ] {
        assert_eq!(F::post(&q.desc, &[ok, bad]), RUST_GIN_ERR_INVALID as i32, "{bad:?}");
    }
    assert_eq!(q.state.resv, 0, "nothing was posted");
    assert!(q.take_rings().is_empty());
}

#[test]
fn bnxt_posts_the_twins_bytes_and_rings_its_doorbell_across_wraps() {
    for seed in [1, 0x9e37_79b9_7f4a_7c15, 42] {
        posts_and_completes::<Bnxt>(seed, 0);
    }
}

#[test]
fn ionic_posts_the_twins_bytes_and_rings_its_doorbell_across_wraps() {
    for seed in [1, 0x9e37_79b9_7f4a_7c15, 42] {
        posts_and_completes::<Ionic>(seed, 0);
    }
}

#[test]
fn bnxt_refuses_what_it_cannot_encode() {
    refuses_what_it_cannot_encode::<Bnxt>();
}

#[test]
fn ionic_refuses_what_it_cannot_encode() {
    refuses_what_it_cannot_encode::<Ionic>();
}

// ---------------------------------------------------------------------------
// Field quirks as policies (docs/nic-families.md, "Field quirks as policies")
// ---------------------------------------------------------------------------

/// bnxt_re rings one doorbell per WQE by default (batched doorbells hung a
/// Thor2, torchcomms#2714): a doorbell naming each WQE in turn. With
/// doorbell_group 1 (RCCL_RUST_GIN_BNXT_DOORBELL=peer, mori#421) it rings
/// once per batch; ionic ignores the field. Checked by hand (2026-12-06):
/// with bnxt's kDoorbellPerWqe false the default run fails at round 0
/// ("doorbells (per WQE: true)": one doorbell where two were due).
#[test]
fn bnxt_rings_per_wqe_by_default_and_per_batch_when_grouped() {
    posts_and_completes::<Bnxt>(7, 0);
    posts_and_completes::<Bnxt>(7, 1);
    posts_and_completes::<Ionic>(7, 1);
}

/// bnxt_re: at most one atomic outstanding per QP (torchcomms#2714,
/// mori#421): every atomic WQE carries UC_FENCE (IBV_SEND_FENCE) whatever
/// the request asked, so the NIC starts it only after every earlier READ
/// and atomic completed; WRITEs and READs stay unfenced. Checked by hand
/// (2026-12-06): with bnxt::kFenceAtomics false this fails on the first
/// fetch-and-add (and the random streams above fail on their atomics).
#[test]
fn bnxt_fences_every_atomic() {
    let q = Queue::new(Bnxt::WQE_STRIDE);
    let r = |op: u8, length: u32| rust_gin_mlx5_request { opcode: op, length, lkey: 1, rkey: 2, laddr: 64, raddr: 128, ..Default::default() };
    let reqs = [r(opcode::ATOMIC_FA, 8), r(opcode::RDMA_WRITE, 64), r(opcode::ATOMIC_CS, 8), r(opcode::RDMA_READ, 64)];
    assert_eq!(Bnxt::post(&q.desc, &reqs), RUST_GIN_OK as i32);
    for (i, req) in reqs.iter().enumerate() {
        let flags = q.ring.bytes(i * Bnxt::WQE_STRIDE + 1, 1)[0];
        let atomic = req.opcode == opcode::ATOMIC_FA || req.opcode == opcode::ATOMIC_CS;
        assert_eq!(flags & bw::flags::UC_FENCE != 0, atomic, "WQE {i} ({:#x}): flags {flags:#x}", req.opcode);
    }
}

/// Doorbells are serialised (ionic's GDA mode needs them in order, and
/// torchcomms#3116 saw Pollara drop concurrent doorbell stores): however
/// many producers post at once, only the holder of the queue's ring lock
/// rings, so no two doorbell stores ever overlap and the indices they name
/// never go backwards. The host doorbell here lingers inside each store to
/// widen the window. Checked by hand (2026-12-06): with the ring lock taken
/// out of SendQueue::ring this fails with overlapping stores.
fn doorbells_are_serialised<F: Family>() {
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
    struct Watch {
        inside: AtomicU32,
        overlaps: AtomicU32,
        values: Mutex<Vec<u64>>,
        sq_db: AtomicU64,
    }
    extern "C" fn slow_ring(ctx: *const c_void, reg: *mut u64, value: u64) {
        // SAFETY: ctx is the test's Watch, alive for the test.
        let w = unsafe { &*(ctx as *const Watch) };
        if w.inside.fetch_add(1, Ordering::SeqCst) != 0 {
            w.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
        if reg as u64 == w.sq_db.load(Ordering::Relaxed) {
            w.values.lock().unwrap().push(value);
        }
        w.inside.fetch_sub(1, Ordering::SeqCst);
    }
    let mut q = Queue::new(F::WQE_STRIDE);
    let watch = Box::new(Watch {
        inside: AtomicU32::new(0),
        overlaps: AtomicU32::new(0),
        values: Mutex::new(Vec::new()),
        sq_db: AtomicU64::new(q.sq_db),
    });
    let host = Box::new(rust_gin_host_doorbell { ring: Some(slow_ring), record: None, ctx: &*watch as *const Watch as *const c_void });
    q.desc.host_doorbell = &*host as *const rust_gin_host_doorbell as u64;
    // 5 producers x 3 single-WQE posts: 15 WQEs, within one ring (ionic
    // keeps one free), so nobody waits for credit.
    let w = rust_gin_mlx5_request { opcode: opcode::RDMA_WRITE, length: 8, lkey: 1, rkey: 2, laddr: 64, raddr: 128, ..Default::default() };
    let desc = q.desc;
    std::thread::scope(|s| {
        for _ in 0..5 {
            s.spawn(move || {
                for _ in 0..3 {
                    assert_eq!(F::post(&desc, &[w]), RUST_GIN_OK as i32);
                }
            });
        }
    });
    assert_eq!(watch.overlaps.load(Ordering::SeqCst), 0, "two doorbell stores overlapped");
    let values = watch.values.lock().unwrap().clone();
    assert!(!values.is_empty());
    // Each doorbell names a later producer index than the one before.
    let index_of = |v: u64| (0..=15u64).find(|pi| F::sq_doorbell(*pi) == v).expect("a doorbell value of this queue");
    let pis: Vec<u64> = values.iter().map(|v| index_of(*v)).collect();
    assert!(pis.windows(2).all(|p| p[0] < p[1]), "doorbells went backwards: {pis:?}");
    assert_eq!(pis.last(), Some(&15), "the last doorbell names every WQE");
}

#[test]
fn ionic_doorbells_are_serialised() {
    doorbells_are_serialised::<Ionic>();
}

#[test]
fn bnxt_doorbells_are_serialised() {
    doorbells_are_serialised::<Bnxt>();
}
