//! One emulated ConnectX: queue pairs, completion queues and memory regions,
//! executing real mlx5 send WQEs in host memory (and bnxt_re / ionic send
//! queues, whose edges family.rs supplies).
//!
//! Fidelity, in short (docs/architecture.md has the whole list):
//! - work starts with a doorbell (an 8-byte write to the QP's UAR page) and
//!   runs up to the producer index in the doorbell record, never beyond;
//! - each WQE is read from the ring as the NIC reads it and decoded
//!   (emu/wqe.rs); malformed ones complete with an error;
//! - requests travel as MTU-sized packets to the responder NIC, which checks
//!   keys, bounds, rights and protection domains and answers with ACK, NAK,
//!   read data or the atomic's old value;
//! - completions are in order; a CQE is written for each WQE that asks for
//!   one and for every error; after an error the QP is in the error state and
//!   every later WQE completes with a flush error;
//! - fences hold a WQE until earlier ones (all, or READs and atomics) finish;
//! - with `NicConfig::read_data_delay`, READ data reaches memory up to that
//!   long after its CQE, unless a DUMP WQE (whose local read cannot pass the
//!   NIC's earlier PCIe writes) or a deregistration lands it first: the
//!   hazard a flush after gets exists for.
//!   Not modelled: other timing, other PCIe reordering, packet loss and
//!   retransmission.
//!
//! This file holds the control path (verbs-like calls); poller.rs the
//! threads that step NICs;
//! requester.rs the send queue's execution and the responses, responder.rs
//! the peer's requests, completion.rs the CQEs and the error state, dma.rs
//! the NIC's memory accesses, family.rs the bnxt_re and ionic queue formats.

mod completion;
mod dma;
mod family;
mod outbox;
mod requester;
mod poller;
mod responder;
mod rung;

pub use family::{FamilyCqSpec, FamilyQpSpec, QueueFormat};
pub use poller::Poller;
use super::doorbell::{DoorbellSink, HostDoorbell};
use dma::*;
use outbox::Outbox;
use requester::land_posted;
use completion::push_done;
use crate::nic::counters::{CounterSnapshot, Counters};
use super::fabric::{Fabric, Stepper};
use super::mr::{Access, AccessError, MrTable, Region};
use super::packet::{Body, Packet, Payload, WireError};
use super::wqe::{self, AtomicKind, Fence, SgList, Sge, WqeOp};
use crate::mlx5::wire::{self, cqe_opcode, syndrome, Cqe, CQE_SIZE, SEND_WQE_BB, SND_DBR, UAR_DB_OFFSET};
// QP, CQ and UAR numbers are the NIC's own small integers: a fast hash.
use rustc_hash::FxHashMap as HashMap;
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

pub const UAR_PAGE: usize = 4096;
/// Send doorbell registers in a UAR page (two BlueFlame buffers of 256 bytes).
const DB_REG_RANGE: std::ops::Range<usize> = UAR_DB_OFFSET..UAR_DB_OFFSET + 0x200;

#[derive(Clone, Debug)]
pub struct NicConfig {
    pub name: String,
    /// Largest payload of one packet.
    pub mtu: usize,
    /// READ data lands in memory this long after it arrived (its CQE may be
    /// written meanwhile), unless a DUMP or a deregistration lands it
    /// earlier. None: at once.
    pub read_data_delay: Option<Duration>,
    /// The polling thread this NIC shares with others (start_polling);
    /// None: a thread of its own.
    pub poller: Option<Arc<Poller>>,
    /// ionic: the firmware WQE ABI version this NIC presents (the
    /// alloc-ucontext response's `version` on a Pollara). Its send queues
    /// decode opcodes and atomic bodies with that version's table, as the
    /// firmware does, whatever the producer meant.
    pub ionic_abi: u16,
    /// Watch every mlx5 send queue's doorbell record on each step instead of
    /// waiting for a doorbell: a GPU kernel's doorbell store goes to a page
    /// of pinned host memory nothing hears, but the producer index it wrote
    /// to the record just before is there to see (docs/architecture.md, "GIN
    /// over Ethernet on AMD GPUs without an RDMA NIC").
    pub poll_doorbell_records: bool,
    /// A firmware fault to plant (crate::nic::PlantedFault): the init
    /// self-test's tests.
    pub fault: Option<crate::nic::PlantedFault>,
    /// Queue pairs start each batch late by their number's class
    /// (crate::nic::QpSkew): engines that serve queues at different
    /// latencies, so work on different queues arrives in either order (the
    /// ordering tests' reordering NIC).
    pub qp_skew: Option<crate::nic::QpSkew>,
}

impl Default for NicConfig {
    fn default() -> Self {
        NicConfig {
            name: "emu0".into(),
            mtu: 4096,
            read_data_delay: None,
            poller: None,
            ionic_abi: 2,
            poll_doorbell_records: false,
            fault: None,
            qp_skew: None,
        }
    }
}

/// READ data on its way to memory (the posted-write model).
struct PostedWrite {
    due: Instant,
    addr: u64,
    data: Vec<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    Error,
}

/// Errors of the NIC's control path (verbs-like calls), not of WQEs.
#[derive(Debug, PartialEq, Eq)]
pub enum NicError {
    NoSuchQp(u32),
    NoSuchCq(u32),
    NoSuchMr(u32),
    BadState { qpn: u32, from: QpState, to: QpState },
    BadArgument(String),
    Wire(String),
}

impl std::fmt::Display for NicError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NicError::NoSuchQp(q) => write!(f, "no QP {q:#x}"),
            NicError::NoSuchCq(c) => write!(f, "no CQ {c:#x}"),
            NicError::NoSuchMr(k) => write!(f, "no memory region with lkey {k:#x}"),
            NicError::BadState { qpn, from, to } => write!(f, "QP {qpn:#x}: cannot go from {from:?} to {to:?}"),
            NicError::BadArgument(s) => write!(f, "{s}"),
            NicError::Wire(s) => write!(f, "{s}"),
        }
    }
}
impl std::error::Error for NicError {}

/// The buffers of a CQ, allocated by the caller (as DevX umem).
#[derive(Clone, Copy, Debug)]
pub struct CqSpec {
    /// 2^log_cnt CQEs of 64 bytes; the NIC initialises them to "hardware owned".
    pub buf: usize,
    pub log_cnt: u32,
    /// The CQ doorbell record (be32[2]); [0] is the consumer index.
    pub dbrec: usize,
}

/// The buffers of a QP's send queue, allocated by the caller.
#[derive(Clone, Copy, Debug)]
pub struct QpSpec {
    pub pd: u32,
    pub send_cq: u32,
    /// For WRITE with immediate: the CQ that receives RESP_WR_IMM CQEs.
    pub recv_cq: Option<u32>,
    /// 2^log_wqe_cnt WQEBBs.
    pub sq_buf: usize,
    pub log_wqe_cnt: u32,
    /// The QP doorbell record (be32[2]); [1] is the send queue's.
    pub dbrec: usize,
    /// The UAR page whose doorbell register rings this QP.
    pub uar: usize,
}

#[derive(Clone, Copy, Debug)]
enum Status {
    Pending,
    Ok { byte_cnt: u32 },
    Err(u8),
}

#[derive(Debug)]
enum Await {
    None,
    Write,
    Read { scatter: SgList },
    Atomic { result: Sge },
}

#[derive(Debug)]
struct Inflight {
    msg: u64,
    index: u16,
    signaled: bool,
    opcode: u8,
    awaits: Await,
    status: Status,
}

struct Cq {
    spec: CqSpec,
    pi: u64,
    /// bnxt_re and ionic CQs (family.rs): the format, and the consumer
    /// index their CQ doorbell last reported (they have no record).
    family: Option<family::FamilyCq>,
}

/// A DC target: any DC initiator presenting `key` may address this NIC's
/// memory regions of protection domain `pd` through it.
struct Dct {
    pd: u32,
    key: u64,
    /// Requests dropped for a wrong DC key.
    key_violations: u64,
    /// The message that failed here (its later packets are dropped):
    /// (initiator node, initiator QP, message).
    failed_msg: Option<(u32, u32, u64)>,
}

/// What a send queue is: an RC QP (one remote QP), or a DC initiator whose
/// every WQE names its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Rc,
    /// `current`: the target (node, DCT) the DCI is connected to now. A
    /// WQE for another target waits until everything in flight completed:
    /// the DCI is reused only once drained (ConnectX does the same; one
    /// connection at a time per DCI).
    Dci { current: Option<(u32, u32)> },
}

struct Qp {
    qpn: u32,
    transport: Transport,
    /// Where this QP's doorbells arrive (shared with its host doorbell).
    bell: Arc<Bell>,
    spec: QpSpec,
    state: QpState,
    remote: Option<(u32, u32)>,
    /// Next WQEBB to execute.
    ci: u64,
    next_msg: u64,
    inflight: VecDeque<Inflight>,
    /// Receives posted, consumed by incoming WRITE with immediate.
    recv_credits: u64,
    /// Responder: a message that already failed (its later packets are dropped).
    failed_msg: Option<(u32, u64)>,
    /// Responder: the ACK for the newest WRITE executed this step, sent at
    /// the step's end (or before any other reply of this QP): one ACK
    /// acknowledges every message up to its own, as RC's coalesced ACKs do.
    pending_ack: Option<Packet>,
    /// Requester: messages below this were covered by an ACK (on_response).
    acked_through: u64,
    /// Requester, with `NicConfig::qp_skew`: the rung batch waits until then.
    held_until: Option<Instant>,
}

impl Qp {
    /// A new QP in the reset state, ringing through `bell`.
    fn new(qpn: u32, bell: Bell, spec: QpSpec) -> Qp {
        Qp {
            qpn,
            bell: Arc::new(bell),
            spec,
            transport: Transport::Rc,
            state: QpState::Reset,
            remote: None,
            ci: 0,
            next_msg: 0,
            inflight: VecDeque::new(),
            recv_credits: 0,
            failed_msg: None,
            pending_ack: None,
            acked_through: 0,
            held_until: None,
        }
    }
}

struct State {
    mrs: MrTable,
    qps: QpTable,
    /// DC targets by number (from the QP number space).
    dcts: HashMap<u32, Dct>,
    cqs: HashMap<u32, Cq>,
    uars: HashMap<usize, crate::mem::DmaBuf>,
    /// QPs with work for the next step (each QP once per run, see mark_dirty).
    dirty: Vec<u32>,
    /// The step's spare lists (they trade places with `dirty`, and take the
    /// rung QPs, so that no step allocates once warm).
    dirty_spare: Vec<u32>,
    rung_spare: Vec<u32>,
    /// The QPs rung since the last step (their doorbells hold the bits).
    rung: rung::RungSet,
    /// Memory the NIC wrote this step ([addr, addr + len): CQ rings, data,
    /// atomic words): threads parked on it are woken at the step's end.
    written: Vec<(u64, u64)>,
    /// QPs holding a pending ACK (Qp::pending_ack), in the order they got one.
    ack_qps: Vec<u32>,
    /// READ data not landed yet, oldest first (all with one delay, so also
    /// in order of `due`).
    posted: VecDeque<PostedWrite>,
    /// Packets the wire could not take yet.
    outbox: Outbox,
    /// Packets taken from the wire for this step (reused buffer).
    inbox: VecDeque<Packet>,
    /// run_sq's copy of the WQE it decodes (kept: requester.rs).
    wqe_buf: Vec<u8>,
    /// Payload this step has sent: WRITEs and READ responses (STEP_PAYLOAD_BUDGET).
    step_payload: u64,
    /// When check_peers last looked (outbox::coarse_now).
    last_peer_check: Duration,
    next_qpn: u32,
    next_cqn: u32,
    next_pd: u32,
}

struct Inner {
    config: NicConfig,
    fabric: Fabric,
    node: AtomicU32,
    state: Mutex<State>,
    /// What doorbells share with the polling thread (no NIC lock on their path).
    hub: Arc<Hub>,
    counters: Arc<Counters>,
    /// The thread that steps this NIC once polling starts (poller.rs).
    poller: Arc<Poller>,
    trace: Mutex<Option<Vec<TraceEntry>>>,
    /// Whether `trace` records: checked per WQE without taking its lock.
    tracing: AtomicBool,
    /// Set by a step that left nothing waiting on time (no READ data held
    /// back, nothing the wire refused): until a doorbell or a packet wakes
    /// the NIC, another step would find nothing (poll_loop).
    settled: AtomicBool,
}

/// One executed WQE, as the optional execution trace records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEntry {
    pub qpn: u32,
    pub index: u16,
    pub opcode: u8,
    /// Remote address of the operation (0 for NOP).
    pub raddr: u64,
}

/// Handle to one emulated NIC; clones share it. Dropping the last handle
/// stops its polling thread and leaves the fabric.
#[derive(Clone)]
pub struct EmuNic(Arc<Handle>);

struct Handle {
    inner: Arc<Inner>,
    /// The fabric holds a weak link to this; it lives as long as the handle.
    _port: Arc<dyn Stepper>,
}


/// The fabric sees the NIC through this (a weak link, so that the NIC is
/// dropped when its owner lets go).
struct Port(Weak<Inner>);

/// What a doorbell and the polling thread share (besides the QP's rung bit).
struct Hub {
    /// The poller's: doorbells and packets of every NIC it runs wake it.
    signal: Arc<poller::Signal>,
}

impl Hub {
    fn wake(&self) {
        self.signal.wake();
    }
}

/// One QP's doorbell register: it knows its QP, so a doorbell needs no
/// lookup and no NIC lock: it sets the QP's rung bit and wakes the poller.
struct Bell {
    qpn: u32,
    uar: usize,
    dbrec: usize,
    /// The QP's bit in the NIC's rung set (rung.rs).
    rung: rung::RungBit,
    hub: Arc<Hub>,
    counters: Arc<Counters>,
    /// bnxt_re and ionic QPs (family.rs): no doorbell record, so the
    /// doorbell value is the producer index the NIC trusts.
    family: Option<family::FamilyBell>,
}

impl DoorbellSink for Bell {
    fn doorbell(&self, addr: usize, value: u64) {
        if let Some(f) = &self.family {
            return self.family_doorbell(f, addr, value);
        }
        let page = addr & !(UAR_PAGE - 1);
        let (qpn, pi) = wire::parse_doorbell(value);
        if page != self.uar || !DB_REG_RANGE.contains(&(addr - page)) || qpn != self.qpn {
            self.counters.doorbells_misdirected.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(qpn, addr, "emulated NIC: doorbell for a QP that does not own this UAR register; ignored");
            return;
        }
        self.counters.doorbells.fetch_add(1, Ordering::Relaxed);
        // The doorbell names the producer index too; the record is what the
        // NIC trusts. A difference means the record was stale when rung.
        // SAFETY: the doorbell record is valid while the QP exists (and the
        // bell is dropped with it, or with its host doorbell after it).
        let dbr = u32::from_be(unsafe { AtomicU32::from_ptr((self.dbrec + 4 * SND_DBR) as *mut u32) }.load(Ordering::Acquire));
        if dbr as u16 != pi {
            self.counters.doorbell_dbr_mismatches.fetch_add(1, Ordering::Relaxed);
        }
        self.rung.set();
        self.hub.wake();
    }
    fn record(&self, _addr: usize, _value: u32) {
        self.counters.dbr_writes.fetch_add(1, Ordering::Relaxed);
    }
}

impl Stepper for Port {
    fn step(&self) -> bool {
        self.0.upgrade().is_some_and(|i| i.step())
    }
    fn wake(&self) {
        if let Some(i) = self.0.upgrade() {
            i.wake();
        }
    }
}

/// Adds to one of the counters the step keeps. Only code holding the state
/// lock calls it (everything the step runs), so there is one writer at a
/// time and a load and a store suffice: a locked read-modify-write per
/// WQE, packet and byte count was a fifth of the step's time. Readers (a
/// snapshot) see each store whole. The doorbell's counters, bumped by the
/// ringing threads without the lock, stay read-modify-writes.
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl EmuNic {
    pub fn new(fabric: &Fabric, config: NicConfig) -> Result<EmuNic, NicError> {
        if config.mtu < 256 || !config.mtu.is_power_of_two() {
            return Err(NicError::BadArgument(format!("MTU {} is not a power of two >= 256", config.mtu)));
        }
        if let Some(max) = fabric.max_payload().filter(|m| config.mtu > *m) {
            return Err(NicError::BadArgument(format!(
                "MTU {} is larger than this fabric's packets carry ({max} bytes)",
                config.mtu
            )));
        }
        // Before any access to registered memory: an unmapped buffer is then
        // an error completion, not a SIGSEGV (emu/guarded.rs).
        super::guarded::install();
        let poller = config.poller.clone().unwrap_or_else(|| Poller::new(&config.name));
        let inner = Arc::new(Inner {
            config,
            fabric: fabric.clone(),
            node: AtomicU32::new(u32::MAX),
            state: Mutex::new(State {
                mrs: MrTable::default(),
                qps: QpTable::default(),
                dcts: HashMap::default(),
                cqs: HashMap::default(),
                uars: HashMap::default(),
                dirty: Vec::new(),
                dirty_spare: Vec::new(),
                rung_spare: Vec::new(),
                rung: rung::RungSet::default(),
                written: Vec::new(),
                ack_qps: Vec::new(),
                posted: VecDeque::new(),
                outbox: Outbox::default(),
                inbox: VecDeque::new(),
                wqe_buf: Vec::new(),
                step_payload: 0,
                last_peer_check: outbox::coarse_now(),
                next_qpn: QPN_BASE - 1,
                next_cqn: 0x40,
                next_pd: 1,
            }),
            hub: Arc::new(Hub { signal: poller.signal.clone() }),
            counters: Arc::new(Counters::default()),
            poller,
            trace: Mutex::new(None),
            tracing: AtomicBool::new(false),
            settled: AtomicBool::new(false),
        });
        let port: Arc<dyn Stepper> = Arc::new(Port(Arc::downgrade(&inner)));
        let node = fabric.join(Arc::downgrade(&port)).map_err(|e| NicError::Wire(e.to_string()))?;
        inner.node.store(node, Ordering::Relaxed);
        // Keys of NIC n start at index n * 4096 (24-bit mkey indexes).
        lock(&inner.state).mrs = MrTable::starting_at((node & 0xfff) << 12);
        Ok(EmuNic(Arc::new(Handle { inner, _port: port })))
    }

    /// This NIC's address on the fabric.
    pub fn node(&self) -> u32 {
        self.0.inner.node.load(Ordering::Relaxed)
    }
    /// The largest payload of one packet (the path MTU of its QPs).
    /// ionic: the firmware WQE ABI version this NIC presents.
    pub fn ionic_abi(&self) -> u16 {
        self.0.inner.config.ionic_abi
    }

    pub fn mtu(&self) -> usize {
        self.0.inner.config.mtu
    }
    pub fn name(&self) -> &str {
        &self.0.inner.config.name
    }
    pub fn fabric(&self) -> &Fabric {
        &self.0.inner.fabric
    }

    pub fn counters(&self) -> CounterSnapshot {
        self.0.inner.counters.snapshot()
    }

    /// What this NIC holds now, counted in its tables (gin-scale).
    pub fn resources(&self) -> crate::nic::NicResources {
        let st = lock(&self.0.inner.state);
        crate::nic::NicResources {
            qps: st.qps.values().count(),
            cqs: st.cqs.len(),
            uar_pages: st.uars.len(),
            mrs: st.mrs.len(),
            send_queue_bytes: st.qps.values().map(|q| SEND_WQE_BB << q.spec.log_wqe_cnt).sum(),
            completion_queue_bytes: st.cqs.values().map(|c| CQE_SIZE << c.spec.log_cnt).sum(),
        }
    }

    pub fn alloc_pd(&self) -> u32 {
        let mut st = lock(&self.0.inner.state);
        st.next_pd += 1;
        st.next_pd
    }

    /// Registers [addr, addr+len) for NIC access.
    ///
    /// # Safety
    /// The memory must stay valid for reads and writes by the NIC (from its
    /// polling thread) until [`EmuNic::dereg_mr`]; as with a real NIC, the
    /// owner must not access bytes the NIC is writing until a completion or a
    /// signal says they have landed.
    pub unsafe fn reg_mr(&self, pd: u32, addr: usize, len: usize, access: Access) -> Result<Region, NicError> {
        if addr == 0 && len != 0 {
            return Err(NicError::BadArgument("reg_mr: null address".into()));
        }
        if (addr as u64).checked_add(len as u64).is_none() {
            return Err(NicError::BadArgument("reg_mr: region wraps the address space".into()));
        }
        Ok(lock(&self.0.inner.state).mrs.register(pd, addr as u64, len as u64, access))
    }

    pub fn dereg_mr(&self, lkey: u32) -> Result<Region, NicError> {
        let mut st = lock(&self.0.inner.state);
        // Nothing may reach the memory after it is deregistered: land what
        // is on its way (hardware would have, long before).
        land_posted(&mut st, None);
        wake_parked(&mut st);
        st.mrs.deregister(lkey).ok_or(NicError::NoSuchMr(lkey))
    }

    /// A UAR page: its send doorbell register is at +0x800. Doorbells reach
    /// the NIC through the QP's [`HostDoorbell`], never by looking at the page.
    pub fn alloc_uar(&self) -> usize {
        let page = crate::mem::DmaBuf::pages(UAR_PAGE);
        let addr = page.addr();
        lock(&self.0.inner.state).uars.insert(addr, page);
        addr
    }

    /// The port through which the device library's host build rings QP
    /// `qpn` (the QP's owner keeps it and names it in the descriptor).
    pub fn host_doorbell(&self, qpn: u32) -> Result<HostDoorbell, NicError> {
        let st = lock(&self.0.inner.state);
        let bell: Arc<dyn DoorbellSink> = st.qps.get(&qpn).ok_or(NicError::NoSuchQp(qpn))?.bell.clone();
        Ok(HostDoorbell::new(bell))
    }

    pub fn free_uar(&self, page: usize) {
        lock(&self.0.inner.state).uars.remove(&page);
    }

    /// # Safety
    /// `spec.buf` (2^log_cnt * 64 bytes) and `spec.dbrec` (8 bytes) must stay
    /// valid until [`EmuNic::destroy_cq`].
    pub unsafe fn create_cq(&self, spec: CqSpec) -> Result<u32, NicError> {
        if spec.log_cnt > 22 || spec.buf == 0 || spec.dbrec == 0 || !spec.buf.is_multiple_of(64) || !spec.dbrec.is_multiple_of(4) {
            return Err(NicError::BadArgument(format!("create_cq: bad buffers or size {spec:?}")));
        }
        for i in 0..(1usize << spec.log_cnt) {
            // SAFETY: the caller guarantees the CQE ring.
            unsafe { AtomicU8::from_ptr((spec.buf + i * CQE_SIZE + 63) as *mut u8) }
                .store(wire::CQE_INIT_OP_OWN, Ordering::Relaxed);
        }
        let mut st = lock(&self.0.inner.state);
        st.next_cqn += 1;
        let cqn = st.next_cqn;
        st.cqs.insert(cqn, Cq { spec, pi: 0, family: None });
        Ok(cqn)
    }

    pub fn destroy_cq(&self, cqn: u32) -> Result<(), NicError> {
        let mut st = lock(&self.0.inner.state);
        if st.qps.values().any(|q| q.spec.send_cq == cqn || q.spec.recv_cq == Some(cqn)) {
            return Err(NicError::BadArgument(format!("destroy_cq: CQ {cqn:#x} is still used by a QP")));
        }
        st.cqs.remove(&cqn).ok_or(NicError::NoSuchCq(cqn))?;
        Ok(())
    }

    /// # Safety
    /// The send queue (2^log_wqe_cnt * 64 bytes) and doorbell record must stay
    /// valid until [`EmuNic::destroy_qp`]; the UAR page must come from
    /// [`EmuNic::alloc_uar`].
    pub unsafe fn create_qp(&self, spec: QpSpec) -> Result<u32, NicError> {
        if spec.log_wqe_cnt > 15 || spec.sq_buf == 0 || !spec.sq_buf.is_multiple_of(64) || !spec.dbrec.is_multiple_of(4) {
            return Err(NicError::BadArgument(format!("create_qp: bad send queue {spec:?}")));
        }
        let mut st = lock(&self.0.inner.state);
        if !st.cqs.contains_key(&spec.send_cq) {
            return Err(NicError::NoSuchCq(spec.send_cq));
        }
        if let Some(r) = spec.recv_cq {
            if !st.cqs.contains_key(&r) {
                return Err(NicError::NoSuchCq(r));
            }
        }
        if !st.uars.contains_key(&spec.uar) {
            return Err(NicError::BadArgument(format!("create_qp: {:#x} is not a UAR page of this NIC", spec.uar)));
        }
        st.next_qpn += 1;
        let qpn = st.next_qpn;
        let bell = Bell {
            qpn,
            uar: spec.uar,
            dbrec: spec.dbrec,
            rung: st.rung.bit(QpTable::slot(qpn)),
            hub: self.0.inner.hub.clone(),
            counters: self.0.inner.counters.clone(),
            family: None,
        };
        st.qps.insert(qpn, Qp::new(qpn, bell, spec));
        drop(st);
        Ok(qpn)
    }

    /// A DC initiator over the caller's buffers: like an RC QP, but RTR
    /// takes no remote and every WQE carries its target's datagram segment
    /// (wqe::decode_dc).
    ///
    /// # Safety
    /// As [`EmuNic::create_qp`].
    pub unsafe fn create_dci(&self, spec: QpSpec) -> Result<u32, NicError> {
        // SAFETY: the caller's contract is create_qp's.
        let qpn = unsafe { self.create_qp(spec)? };
        lock(&self.0.inner.state).qps.get_mut(&qpn).expect("just created").transport = Transport::Dci { current: None };
        Ok(qpn)
    }

    /// A DC target in protection domain `pd` with DC key `key`; its number
    /// (24 bits, from the QP number space) is what initiators address.
    pub fn create_dct(&self, pd: u32, key: u64) -> u32 {
        let mut st = lock(&self.0.inner.state);
        st.next_qpn += 1;
        let dctn = st.next_qpn;
        st.dcts.insert(dctn, Dct { pd, key, key_violations: 0, failed_msg: None });
        dctn
    }

    pub fn destroy_dct(&self, dctn: u32) -> Result<(), NicError> {
        lock(&self.0.inner.state).dcts.remove(&dctn).map(|_| ()).ok_or(NicError::NoSuchQp(dctn))
    }

    /// Requests DCT `dctn` dropped for a wrong DC key.
    pub fn dct_key_violations(&self, dctn: u32) -> Result<u64, NicError> {
        lock(&self.0.inner.state).dcts.get(&dctn).map(|d| d.key_violations).ok_or(NicError::NoSuchQp(dctn))
    }

    /// The address vector by which DC initiators reach this NIC (no DCT
    /// number or key yet: [`wire::DatagramSeg::with_dc_addr`]). RoCE-style:
    /// GRH present, the node as an IPv4-mapped GID (::ffff:10.N.N.N) and a
    /// locally administered MAC.
    pub fn dc_address(&self) -> wire::DatagramSeg {
        dc_address_of(self.node())
    }

    pub fn destroy_qp(&self, qpn: u32) -> Result<(), NicError> {
        lock(&self.0.inner.state).qps.remove(&qpn).ok_or(NicError::NoSuchQp(qpn))?;
        Ok(())
    }

    /// RESET -> INIT -> RTR (with the remote node and QP) -> RTS, or any
    /// state -> ERROR (posted WQEs then complete with flush errors).
    pub fn modify_qp(&self, qpn: u32, to: QpState, remote: Option<(u32, u32)>) -> Result<(), NicError> {
        let mut st = lock(&self.0.inner.state);
        let qp = st.qps.get_mut(&qpn).ok_or(NicError::NoSuchQp(qpn))?;
        let ok = matches!(
            (qp.state, to),
            (QpState::Reset, QpState::Init)
                | (QpState::Init, QpState::Rtr)
                | (QpState::Rtr, QpState::Rts)
                | (_, QpState::Error)
                | (_, QpState::Reset)
        );
        if !ok {
            return Err(NicError::BadState { qpn, from: qp.state, to });
        }
        match to {
            QpState::Rtr if matches!(qp.transport, Transport::Dci { .. }) => {
                if remote.is_some() {
                    return Err(NicError::BadArgument("a DC initiator takes its target from each WQE, not at RTR".into()));
                }
            }
            QpState::Rtr => {
                qp.remote = Some(remote.ok_or_else(|| NicError::BadArgument("RTR needs the remote node and QP".into()))?);
            }
            QpState::Reset => {
                qp.remote = None;
                qp.ci = 0;
                qp.inflight.clear();
            }
            QpState::Error => {
                for e in qp.inflight.iter_mut() {
                    if matches!(e.status, Status::Pending) {
                        e.status = Status::Err(syndrome::WR_FLUSH_ERR);
                    }
                }
            }
            _ => {}
        }
        qp.state = to;
        st.mark_dirty(qpn);
        drop(st);
        self.0.inner.wake();
        Ok(())
    }

    pub fn qp_state(&self, qpn: u32) -> Result<QpState, NicError> {
        lock(&self.0.inner.state).qps.get(&qpn).map(|q| q.state).ok_or(NicError::NoSuchQp(qpn))
    }

    /// Posts `n` receives (credits for incoming WRITE with immediate).
    pub fn post_recv(&self, qpn: u32, n: u64) -> Result<(), NicError> {
        let mut st = lock(&self.0.inner.state);
        st.qps.get_mut(&qpn).ok_or(NicError::NoSuchQp(qpn))?.recv_credits += n;
        Ok(())
    }

    /// Deterministic mode: does all work available now.
    pub fn step(&self) -> bool {
        self.0.inner.step()
    }

    /// Has the NIC's poller step it until [`EmuNic::stop_polling`] or drop
    /// (starting the poller's thread if it has none).
    pub fn start_polling(&self) {
        self.0.inner.poller.add(&self.0.inner);
    }

    /// Returns once the poller no longer steps this NIC.
    pub fn stop_polling(&self) {
        self.0.inner.poller.remove(Arc::as_ptr(&self.0.inner));
    }

    /// Starts (or restarts) recording every executed WQE.
    pub fn start_trace(&self) {
        *lock(&self.0.inner.trace) = Some(Vec::new());
        self.0.inner.tracing.store(true, Ordering::Release);
    }

    /// Stops recording and returns the trace.
    pub fn take_trace(&self) -> Vec<TraceEntry> {
        self.0.inner.tracing.store(false, Ordering::Release);
        lock(&self.0.inner.trace).take().unwrap_or_default()
    }

    pub fn is_polling(&self) -> bool {
        self.0.inner.poller.contains(&self.0.inner)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.inner.poller.remove(Arc::as_ptr(&self.inner));
        self.inner.fabric.leave(self.inner.node());
    }
}

/// The emulated NIC's DC address for fabric node `node` (EmuNic::dc_address).
pub fn dc_address_of(node: u32) -> wire::DatagramSeg {
    let n = node.to_be_bytes();
    let mut rgid = [0u8; 16];
    rgid[10] = 0xff;
    rgid[11] = 0xff;
    rgid[12..].copy_from_slice(&n);
    wire::DatagramSeg {
        // RoCE, as rdma-core's mlx5_create_ah (providers/mlx5/verbs.c) fills
        // an AV for Ethernet: grh bit 30 clear (reserved for RoCE), sgid
        // index 0, hop limit, the destination GID and MAC.
        grh_gid_fl: 0,
        hop_limit: 64,
        rmac: [0x02, 0x00, n[0], n[1], n[2], n[3]],
        rgid,
        ..Default::default()
    }
}

/// The fabric node a datagram segment addresses, if it is an emulated NIC's
/// address (the IPv4-mapped GID and the MAC of one node).
pub fn dc_node_of(av: &wire::DatagramSeg) -> Option<u32> {
    let node = u32::from_be_bytes(av.rgid[12..16].try_into().ok()?);
    let want = dc_address_of(node);
    (av.rgid == want.rgid && av.rmac == want.rmac).then_some(node)
}

/// QP numbers count up from here, one per QP, never reused.
const QPN_BASE: u32 = 0x101;

/// QPs indexed directly by number (QPN_BASE on, in creation order): a QP
/// found per WQE and per packet costs a bounds check, not a hash.
#[derive(Default)]
struct QpTable {
    slots: Vec<Option<Qp>>,
}

impl QpTable {
    fn slot(qpn: u32) -> usize {
        qpn.wrapping_sub(QPN_BASE) as usize
    }
    fn qpn(slot: usize) -> u32 {
        QPN_BASE + slot as u32
    }
    fn get(&self, qpn: &u32) -> Option<&Qp> {
        self.slots.get(Self::slot(*qpn))?.as_ref()
    }
    fn get_mut(&mut self, qpn: &u32) -> Option<&mut Qp> {
        self.slots.get_mut(Self::slot(*qpn))?.as_mut()
    }
    /// `qpn` is the next number (create_qp hands them out in order).
    fn insert(&mut self, qpn: u32, qp: Qp) {
        let i = Self::slot(qpn);
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        self.slots[i] = Some(qp);
    }
    fn remove(&mut self, qpn: &u32) -> Option<Qp> {
        self.slots.get_mut(Self::slot(*qpn))?.take()
    }
    fn values(&self) -> impl Iterator<Item = &Qp> {
        self.slots.iter().flatten()
    }
}

/// Wakes the host-build waiters parked on what the NIC wrote (crate::park);
/// one fence and one load when nobody is parked.
fn wake_parked(st: &mut State) {
    crate::park::wake_written(&st.written);
    st.written.clear();
}

/// Payload (WRITEs sent, READs answered) one step sends at most before it
/// leaves the remaining WQEs and incoming packets to the next step, as a
/// NIC bounds the data it has in flight. Without it a step turned every
/// published 64 KiB WRITE of a deep queue into packets at once: megabytes of payload buffers, out of cache and freshly allocated,
/// before the peer took the first (gin-perf's direct 64 KiB put spent 25-36
/// µs of NIC CPU per put against the proxy path's 11-12, which posts fewer
/// at a time; gets the same on the responder). A WQE or READ is never split:
/// one larger than the budget still goes whole.
const STEP_PAYLOAD_BUDGET: u64 = 256 << 10;

impl State {
    /// Whether this step has sent its payload budget; if so QP `qpn` goes on
    /// in the next step.
    fn out_of_budget(&mut self, qpn: u32) -> bool {
        let out = self.step_payload >= STEP_PAYLOAD_BUDGET;
        if out {
            self.mark_dirty(qpn);
        }
        out
    }

    /// QP `qpn` has work for the next step. The step sorts and deduplicates;
    /// a run of marks for one QP (every reply of a batch) costs a compare.
    fn mark_dirty(&mut self, qpn: u32) {
        if self.dirty.last() != Some(&qpn) {
            self.dirty.push(qpn);
        }
    }
}

impl Inner {
    fn node(&self) -> u32 {
        self.node.load(Ordering::Relaxed)
    }

    fn wake(&self) {
        self.hub.wake();
    }
}
