//! One emulated ConnectX: queue pairs, completion queues and memory regions,
//! executing real mlx5 send WQEs in host memory.
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

use super::doorbell::{DoorbellSink, HostDoorbell};
use crate::provider::counters::{CounterSnapshot, Counters};
use super::fabric::{Fabric, Stepper, WireError};
use super::mr::{Access, AccessError, MrTable, Region};
use super::packet::{Body, Packet};
use super::wqe::{self, AtomicKind, Fence, Sge, WqeOp};
use crate::mlx5::wire::{self, cqe_opcode, syndrome, Cqe, CQE_SIZE, SEND_WQE_BB, SND_DBR, UAR_DB_OFFSET};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
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
}

impl Default for NicConfig {
    fn default() -> Self {
        NicConfig { name: "emu0".into(), mtu: 4096, read_data_delay: None }
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
    Read { scatter: Vec<Sge> },
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
}

struct Qp {
    qpn: u32,
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
}

struct State {
    mrs: MrTable,
    qps: HashMap<u32, Qp>,
    cqs: HashMap<u32, Cq>,
    uars: HashMap<usize, crate::mem::DmaBuf>,
    dirty: BTreeSet<u32>,
    /// READ data not landed yet, oldest first (all with one delay, so also
    /// in order of `due`).
    posted: VecDeque<PostedWrite>,
    next_qpn: u32,
    next_cqn: u32,
    next_pd: u32,
}

struct Inner {
    config: NicConfig,
    fabric: Fabric,
    node: AtomicU32,
    state: Mutex<State>,
    doorbells: Mutex<Vec<u32>>,
    /// qpn -> (UAR page, doorbell record), for doorbells, which must not
    /// wait for the state lock.
    uar_of: Mutex<HashMap<u32, (usize, usize)>>,
    counters: Counters,
    wake: (Mutex<bool>, Condvar),
    /// The polling thread is (about to be) blocked on `wake`: only then is a
    /// notification worth a system call.
    sleeping: AtomicBool,
    stop: AtomicBool,
    poller: Mutex<Option<std::thread::JoinHandle<()>>>,
    trace: Mutex<Option<Vec<TraceEntry>>>,
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

impl DoorbellSink for Inner {
    fn doorbell(&self, addr: usize, value: u64) {
        Inner::doorbell(self, addr, value);
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl EmuNic {
    pub fn new(fabric: &Fabric, config: NicConfig) -> Result<EmuNic, NicError> {
        if config.mtu < 256 || !config.mtu.is_power_of_two() {
            return Err(NicError::BadArgument(format!("MTU {} is not a power of two >= 256", config.mtu)));
        }
        let inner = Arc::new(Inner {
            config,
            fabric: fabric.clone(),
            node: AtomicU32::new(u32::MAX),
            state: Mutex::new(State {
                mrs: MrTable::default(),
                qps: HashMap::new(),
                cqs: HashMap::new(),
                uars: HashMap::new(),
                dirty: BTreeSet::new(),
                posted: VecDeque::new(),
                next_qpn: 0x100,
                next_cqn: 0x40,
                next_pd: 1,
            }),
            doorbells: Mutex::new(Vec::new()),
            uar_of: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            wake: (Mutex::new(false), Condvar::new()),
            sleeping: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            poller: Mutex::new(None),
            trace: Mutex::new(None),
        });
        let port: Arc<dyn Stepper> = Arc::new(Port(Arc::downgrade(&inner)));
        let node = fabric.join(Arc::downgrade(&port)).map_err(|e| NicError::Wire(e.to_string()))?;
        inner.node.store(node, Ordering::Relaxed);
        Ok(EmuNic(Arc::new(Handle { inner, _port: port })))
    }

    /// This NIC's address on the fabric.
    pub fn node(&self) -> u32 {
        self.0.inner.node.load(Ordering::Relaxed)
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

    /// The port through which the device library's host build rings this
    /// NIC's queues (a QP keeps one and names it in its descriptor).
    pub fn host_doorbell(&self) -> HostDoorbell {
        let sink: std::sync::Weak<dyn DoorbellSink> = Arc::downgrade(&self.0.inner) as std::sync::Weak<dyn DoorbellSink>;
        HostDoorbell::new(sink)
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
        st.cqs.insert(cqn, Cq { spec, pi: 0 });
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
        st.qps.insert(
            qpn,
            Qp {
                qpn,
                spec,
                state: QpState::Reset,
                remote: None,
                ci: 0,
                next_msg: 0,
                inflight: VecDeque::new(),
                recv_credits: 0,
                failed_msg: None,
            },
        );
        drop(st);
        lock(&self.0.inner.uar_of).insert(qpn, (spec.uar, spec.dbrec));
        Ok(qpn)
    }

    pub fn destroy_qp(&self, qpn: u32) -> Result<(), NicError> {
        lock(&self.0.inner.state).qps.remove(&qpn).ok_or(NicError::NoSuchQp(qpn))?;
        lock(&self.0.inner.uar_of).remove(&qpn);
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
        st.dirty.insert(qpn);
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

    /// Starts a thread that runs the NIC until [`EmuNic::stop_polling`] or drop.
    pub fn start_polling(&self) {
        let mut p = lock(&self.0.inner.poller);
        if p.is_some() {
            return;
        }
        self.0.inner.stop.store(false, Ordering::Relaxed);
        let weak = Arc::downgrade(&self.0.inner);
        let name = format!("emu-nic-{}", self.0.inner.config.name);
        *p = Some(
            std::thread::Builder::new()
                .name(name)
                .spawn(move || poll_loop(weak))
                .expect("spawn the emulated NIC's polling thread"),
        );
    }

    pub fn stop_polling(&self) {
        let handle = lock(&self.0.inner.poller).take();
        if let Some(h) = handle {
            self.0.inner.stop.store(true, Ordering::Relaxed);
            self.0.inner.wake();
            let _ = h.join();
        }
    }

    /// Starts (or restarts) recording every executed WQE.
    pub fn start_trace(&self) {
        *lock(&self.0.inner.trace) = Some(Vec::new());
    }

    /// Stops recording and returns the trace.
    pub fn take_trace(&self) -> Vec<TraceEntry> {
        lock(&self.0.inner.trace).take().unwrap_or_default()
    }

    pub fn is_polling(&self) -> bool {
        lock(&self.0.inner.poller).is_some()
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let handle = lock(&self.inner.poller).take();
        if let Some(h) = handle {
            self.inner.stop.store(true, Ordering::Relaxed);
            self.inner.wake();
            let _ = h.join();
        }
        self.inner.fabric.leave(self.inner.node());
    }
}

fn poll_loop(weak: Weak<Inner>) {
    // Idle rounds spent yielding before sleeping: a wake-up through the
    // condition variable costs tens of microseconds on a busy machine, which
    // would dominate every emulated latency.
    const SPIN_ROUNDS: u32 = 64;
    let mut idle = 0u32;
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if inner.stop.load(Ordering::Relaxed) {
            return;
        }
        if inner.step() {
            idle = 0;
            continue;
        }
        idle += 1;
        if idle < SPIN_ROUNDS {
            drop(inner);
            std::thread::yield_now();
            continue;
        }
        // Cross-process packets do not wake us: poll again soon.
        let (m, cv) = &inner.wake;
        let mut woken = lock(m);
        if !*woken {
            inner.sleeping.store(true, Ordering::Release);
            woken = cv.wait_timeout(woken, Duration::from_micros(50)).map(|r| r.0).unwrap_or_else(|e| e.into_inner().0);
            inner.sleeping.store(false, Ordering::Release);
        }
        *woken = false;
        idle = 0;
    }
}

// --- memory access (the NIC's DMA) ---------------------------------------------

/// # Safety
/// [addr, addr+len) must lie inside a registered region (checked by the caller
/// through the MR table), which its owner keeps valid while registered.
unsafe fn dma_read(addr: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    // SAFETY: per the function contract.
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, v.as_mut_ptr(), len) };
    v
}

/// # Safety
/// As for [`dma_read`], for writing.
unsafe fn dma_write(addr: u64, data: &[u8]) {
    // SAFETY: per the function contract.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len()) };
}

fn remote_syndrome(_e: AccessError) -> u8 {
    syndrome::REMOTE_ACCESS_ERR
}

impl Inner {
    fn node(&self) -> u32 {
        self.node.load(Ordering::Relaxed)
    }

    fn wake(&self) {
        let (m, cv) = &self.wake;
        let mut w = lock(m);
        *w = true;
        if self.sleeping.load(Ordering::Acquire) {
            cv.notify_one();
        }
    }

    /// A doorbell store arrived through a QP's host doorbell.
    fn doorbell(&self, addr: usize, value: u64) {
        let page = addr & !(UAR_PAGE - 1);
        let (qpn, pi) = wire::parse_doorbell(value);
        let ok_offset = DB_REG_RANGE.contains(&(addr - page));
        let owner = lock(&self.uar_of).get(&qpn).copied();
        let Some((_, dbrec)) = owner.filter(|(uar, _)| ok_offset && *uar == page) else {
            self.counters.doorbells_misdirected.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(qpn, addr, "emulated NIC: doorbell for a QP that does not own this UAR register; ignored");
            return;
        };
        self.counters.doorbells.fetch_add(1, Ordering::Relaxed);
        // The doorbell names the producer index too; the record is what the
        // NIC trusts. A difference means the record was stale when rung.
        // SAFETY: the doorbell record is valid while the QP exists.
        let dbr = u32::from_be(unsafe { AtomicU32::from_ptr((dbrec + 4 * SND_DBR) as *mut u32) }.load(Ordering::Acquire));
        if dbr as u16 != pi {
            self.counters.doorbell_dbr_mismatches.fetch_add(1, Ordering::Relaxed);
        }
        lock(&self.doorbells).push(qpn);
        self.wake();
    }

    fn step(&self) -> bool {
        let mut st = lock(&self.state);
        let mut progress = land_posted(&mut st, Some(Instant::now())) > 0;
        let rung: Vec<u32> = std::mem::take(&mut *lock(&self.doorbells));
        for qpn in rung {
            st.dirty.insert(qpn);
            progress = true;
        }
        for _ in 0..1024 {
            let Some(p) = self.fabric.recv(self.node()) else { break };
            progress = true;
            if p.body.is_request() {
                self.respond(&mut st, p);
            } else {
                self.on_response(&mut st, p);
            }
        }
        let dirty: Vec<u32> = std::mem::take(&mut st.dirty).into_iter().collect();
        for qpn in dirty {
            progress |= self.run_sq(&mut st, qpn);
            progress |= self.complete(&mut st, qpn);
        }
        progress
    }

    /// Executes published WQEs of one send queue. Returns true on progress.
    fn run_sq(&self, st: &mut State, qpn: u32) -> bool {
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

    fn read_wqebbs(&self, qp: &Qp, start: u64, n: u64) -> Vec<u8> {
        let cnt = 1u64 << qp.spec.log_wqe_cnt;
        let mut v = Vec::with_capacity(n as usize * SEND_WQE_BB);
        for k in 0..n {
            let slot = ((start + k) & (cnt - 1)) as usize;
            // SAFETY: the slot lies inside the send queue the creator keeps
            // valid (create_qp's contract); the producer published it.
            v.extend(unsafe { dma_read((qp.spec.sq_buf + slot * SEND_WQE_BB) as u64, SEND_WQE_BB) });
        }
        v
    }

    fn execute(&self, st: &mut State, qpn: u32, index: u16, signaled: bool, opcode: u8, op: WqeOp) {
        if let Some(t) = lock(&self.trace).as_mut() {
            let raddr = match &op {
                WqeOp::Nop | WqeOp::Dump { .. } => 0,
                WqeOp::Write { raddr, .. } | WqeOp::Read { raddr, .. } | WqeOp::Atomic { raddr, .. } => *raddr,
            };
            t.push(TraceEntry { qpn, index, opcode, raddr });
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
        let outcome: Result<(Await, Option<Body>), u8> = match op {
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
                let data = match inline {
                    Some(d) => d,
                    // SAFETY: every gather entry was checked against a registered region.
                    None => gather.iter().flat_map(|s| unsafe { dma_read(s.addr, s.len as usize) }).collect(),
                };
                self.counters.writes.fetch_add(1, Ordering::Relaxed);
                self.counters.payload_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
                let total = data.len() as u64;
                (Await::Write, Some(Body::Write { raddr, rkey, total, offset: 0, last: true, imm, data }))
            }),
            WqeOp::Read { raddr, rkey, scatter } => check_local(&st.mrs, &scatter, true).map(|()| {
                self.counters.reads.fetch_add(1, Ordering::Relaxed);
                let len = scatter.iter().map(|s| s.len).sum();
                (Await::Read { scatter }, Some(Body::Read { raddr, rkey, len }))
            }),
            WqeOp::Atomic { kind, raddr, rkey, swap_add, compare, result } => {
                check_local(&st.mrs, std::slice::from_ref(&result), true).map(|()| {
                    self.counters.atomics.fetch_add(1, Ordering::Relaxed);
                    (Await::Atomic { result }, Some(Body::Atomic { kind, raddr, rkey, swap_add, compare }))
                })
            }
        };
        let qp = st.qps.get_mut(&qpn).expect("qp");
        let msg = qp.next_msg;
        qp.next_msg += 1;
        match outcome {
            Err(synd) => {
                push_done(qp, index, signaled, opcode, Status::Err(synd));
                self.enter_error(qp);
            }
            Ok((Await::None, _)) => push_done(qp, index, signaled, opcode, Status::Ok { byte_cnt: 0 }),
            Ok((awaits, Some(body))) => {
                qp.inflight.push_back(Inflight { msg, index, signaled, opcode, awaits, status: Status::Pending });
                let (node, rqpn) = remote.expect("RTS QP has a remote");
                if let Err(e) = self.send_message(qpn, node, rqpn, msg, body) {
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
    fn send_message(&self, qpn: u32, node: u32, rqpn: u32, msg: u64, body: Body) -> Result<(), WireError> {
        let mk = |body| Packet { src_node: self.node(), dst_node: node, src_qpn: qpn, dst_qpn: rqpn, msg, body };
        match body {
            Body::Write { raddr, rkey, total, imm, data, .. } if data.len() > self.config.mtu => {
                let mtu = self.config.mtu;
                let n = data.len().div_ceil(mtu);
                for (k, chunk) in data.chunks(mtu).enumerate() {
                    let last = k + 1 == n;
                    let offset = (k * mtu) as u64;
                    self.send(mk(Body::Write { raddr, rkey, total, offset, last, imm, data: chunk.to_vec() }))?;
                }
                Ok(())
            }
            b => self.send(mk(b)),
        }
    }

    fn send(&self, p: Packet) -> Result<(), WireError> {
        self.counters.packets_sent.fetch_add(1, Ordering::Relaxed);
        self.fabric.send(p)
    }

    fn reply(&self, req: &Packet, body: Body) {
        let p = Packet {
            src_node: self.node(),
            dst_node: req.src_node,
            src_qpn: req.dst_qpn,
            dst_qpn: req.src_qpn,
            msg: req.msg,
            body,
        };
        if let Err(e) = self.send(p) {
            tracing::warn!(error = %e, "emulated NIC: cannot answer a request");
        }
    }

    /// Responder side: executes one request packet.
    fn respond(&self, st: &mut State, p: Packet) {
        let accepted = st.qps.get(&p.dst_qpn).is_some_and(|q| {
            matches!(q.state, QpState::Rtr | QpState::Rts) && q.remote == Some((p.src_node, p.src_qpn))
        });
        if !accepted {
            // A real responder drops it and the requester retries until it
            // gives up: report what the requester would end with.
            self.counters.packets_dropped.fetch_add(1, Ordering::Relaxed);
            if !matches!(&p.body, Body::Write { last: false, .. }) {
                self.reply(&p, Body::Nak { syndrome: syndrome::TRANSPORT_RETRY_EXC_ERR });
            }
            return;
        }
        let pd = st.qps[&p.dst_qpn].spec.pd;
        match &p.body {
            Body::Write { raddr, rkey, total, offset, last, imm, data } => {
                let key = (p.src_node, p.src_qpn);
                let failed_before = st.qps[&p.dst_qpn].failed_msg == Some((key.0, p.msg));
                if failed_before {
                    return;
                }
                let check = st.mrs.check_remote(pd, *rkey, *raddr, *total, Access::REMOTE_WRITE);
                if let Err(e) = check {
                    st.qps.get_mut(&p.dst_qpn).expect("qp").failed_msg = Some((key.0, p.msg));
                    self.reply(&p, Body::Nak { syndrome: remote_syndrome(e) });
                    return;
                }
                // SAFETY: [raddr, raddr+total) lies in a registered region, and
                // offset + len <= total by construction of the packets.
                unsafe { dma_write(raddr + offset, data) };
                self.counters.payload_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
                if *last {
                    if let Some(imm) = imm {
                        if let Err(s) = self.deliver_imm(st, p.dst_qpn, *imm, *total as u32) {
                            self.reply(&p, Body::Nak { syndrome: s });
                            return;
                        }
                    }
                    self.reply(&p, Body::Ack);
                }
            }
            Body::Read { raddr, rkey, len } => {
                match st.mrs.check_remote(pd, *rkey, *raddr, *len, Access::REMOTE_READ) {
                    Err(e) => self.reply(&p, Body::Nak { syndrome: remote_syndrome(e) }),
                    Ok(_) => {
                        let mtu = self.config.mtu as u64;
                        let mut off = 0;
                        loop {
                            let n = (*len - off).min(mtu);
                            // SAFETY: inside the checked region.
                            let data = unsafe { dma_read(raddr + off, n as usize) };
                            self.counters.payload_bytes.fetch_add(n, Ordering::Relaxed);
                            let last = off + n == *len;
                            self.reply(&p, Body::ReadResponse { offset: off, last, data });
                            off += n;
                            if last {
                                break;
                            }
                        }
                    }
                }
            }
            Body::Atomic { kind, raddr, rkey, swap_add, compare } => {
                if raddr % 8 != 0 {
                    self.reply(&p, Body::Nak { syndrome: syndrome::REMOTE_INVAL_REQ_ERR });
                    return;
                }
                match st.mrs.check_remote(pd, *rkey, *raddr, 8, Access::REMOTE_ATOMIC) {
                    Err(e) => self.reply(&p, Body::Nak { syndrome: remote_syndrome(e) }),
                    Ok(_) => {
                        // SAFETY: 8-aligned and inside a registered region; the
                        // owner reads it with atomics (a signal or counter).
                        let word = unsafe { AtomicU64::from_ptr(*raddr as *mut u64) };
                        let old = match kind {
                            AtomicKind::FetchAdd => word.fetch_add(*swap_add, Ordering::AcqRel),
                            AtomicKind::CompareSwap => {
                                word.compare_exchange(*compare, *swap_add, Ordering::AcqRel, Ordering::Acquire)
                                    .unwrap_or_else(|v| v)
                            }
                        };
                        self.counters.payload_bytes.fetch_add(8, Ordering::Relaxed);
                        self.reply(&p, Body::AtomicResponse { old });
                    }
                }
            }
            _ => unreachable!("respond() only gets requests"),
        }
    }

    /// WRITE with immediate: consumes a receive and writes a RESP_WR_IMM CQE.
    fn deliver_imm(&self, st: &mut State, qpn: u32, imm: u32, len: u32) -> Result<(), u8> {
        let qp = st.qps.get_mut(&qpn).expect("qp");
        let Some(rcq) = qp.spec.recv_cq else { return Err(syndrome::REMOTE_OP_ERR) };
        if qp.recv_credits == 0 {
            return Err(syndrome::RNR_RETRY_EXC_ERR);
        }
        qp.recv_credits -= 1;
        let cqe = Cqe {
            opcode: cqe_opcode::RESP_WR_IMM,
            qpn,
            wqe_counter: 0,
            byte_cnt: len,
            syndrome: 0,
            vendor_syndrome: 0,
            wqe_opcode: 0,
            imm,
        };
        self.write_cqe(st, rcq, &cqe);
        Ok(())
    }

    /// Requester side: a response to one of our messages.
    fn on_response(&self, st: &mut State, p: Packet) {
        let Some(qp) = st.qps.get_mut(&p.dst_qpn) else {
            self.counters.packets_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let Some(pos) = qp.inflight.iter().position(|e| e.msg == p.msg) else {
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

    /// The QP moves to the error state: in-flight WQEs behind the failed one
    /// (and every later one) complete with flush errors.
    fn enter_error(&self, qp: &mut Qp) {
        if qp.state != QpState::Error {
            tracing::debug!(qpn = qp.qpn, "emulated NIC: QP enters the error state");
        }
        qp.state = QpState::Error;
        let mut seen_error = false;
        for e in qp.inflight.iter_mut() {
            if matches!(e.status, Status::Err(_)) {
                seen_error = true;
            } else if seen_error && matches!(e.status, Status::Pending) {
                e.status = Status::Err(syndrome::WR_FLUSH_ERR);
            }
        }
    }

    fn fail_qp(&self, qp: &mut Qp, synd: u8, opcode: u8, why: &str) {
        tracing::warn!(qpn = qp.qpn, why, "emulated NIC: QP error");
        push_done(qp, qp.ci as u16, true, opcode, Status::Err(synd));
        self.enter_error(qp);
    }

    /// Completes finished WQEs in order, writing CQEs where asked and for errors.
    fn complete(&self, st: &mut State, qpn: u32) -> bool {
        let mut progress = false;
        loop {
            let Some(qp) = st.qps.get_mut(&qpn) else { return progress };
            let Some(front) = qp.inflight.front() else { return progress };
            let (byte_cnt, synd) = match front.status {
                Status::Pending => return progress,
                Status::Ok { byte_cnt } => (byte_cnt, None),
                Status::Err(s) => (0, Some(s)),
            };
            let e = qp.inflight.pop_front().expect("front");
            let cq = qp.spec.send_cq;
            progress = true;
            if let Some(s) = synd {
                if qp.state != QpState::Error {
                    self.enter_error(qp);
                }
                let cqe = Cqe {
                    opcode: cqe_opcode::REQ_ERR,
                    qpn,
                    wqe_counter: e.index,
                    byte_cnt: 0,
                    syndrome: s,
                    vendor_syndrome: if s == syndrome::WR_FLUSH_ERR { 0xf9 } else { 0x80 },
                    wqe_opcode: e.opcode,
                    imm: 0,
                };
                self.counters.error_cqes.fetch_add(1, Ordering::Relaxed);
                self.write_cqe(st, cq, &cqe);
            } else if e.signaled {
                let cqe = Cqe {
                    opcode: cqe_opcode::REQ,
                    qpn,
                    wqe_counter: e.index,
                    byte_cnt,
                    syndrome: 0,
                    vendor_syndrome: 0,
                    wqe_opcode: 0,
                    imm: 0,
                };
                self.write_cqe(st, cq, &cqe);
            }
        }
    }

    fn write_cqe(&self, st: &mut State, cqn: u32, cqe: &Cqe) {
        let Some(cq) = st.cqs.get_mut(&cqn) else { return };
        let cnt = 1u64 << cq.spec.log_cnt;
        // SAFETY: the CQ doorbell record is valid per create_cq's contract.
        let ci24 = u32::from_be(unsafe { AtomicU32::from_ptr(cq.spec.dbrec as *mut u32) }.load(Ordering::Acquire))
            & 0xff_ffff;
        let ci = cq.pi - ((cq.pi as u32).wrapping_sub(ci24) & 0xff_ffff) as u64;
        if cq.pi - ci >= cnt {
            self.counters.cq_overruns.fetch_add(1, Ordering::Relaxed);
            tracing::error!(cqn, pi = cq.pi, ci, "emulated NIC: CQ overrun, CQE dropped");
            return;
        }
        let owner = wire::cqe_owner_for(cq.pi as u32, cq.spec.log_cnt);
        let bytes = cqe.encode(owner);
        let slot = cq.spec.buf + (cq.pi & (cnt - 1)) as usize * CQE_SIZE;
        // SAFETY: the CQE slot is inside the CQ ring (create_cq's contract);
        // op_own goes last with release so a poller never sees a torn CQE.
        unsafe {
            dma_write(slot as u64, &bytes[..63]);
            AtomicU8::from_ptr((slot + 63) as *mut u8).store(bytes[63], Ordering::Release);
        }
        cq.pi += 1;
        self.counters.cqes_written.fetch_add(1, Ordering::Relaxed);
    }
}

/// Lands posted READ data due by `now` (all of it with None); returns how
/// many writes landed.
fn land_posted(st: &mut State, now: Option<Instant>) -> usize {
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

fn push_done(qp: &mut Qp, index: u16, signaled: bool, opcode: u8, status: Status) {
    let msg = qp.next_msg;
    qp.next_msg += 1;
    qp.inflight.push_back(Inflight { msg, index, signaled, opcode, awaits: Await::None, status });
}

/// The send queue's producer index from its doorbell record (16 bits).
fn read_sq_dbr(qp: &Qp) -> u32 {
    // SAFETY: the doorbell record is valid per create_qp's contract.
    let raw = unsafe { AtomicU32::from_ptr((qp.spec.dbrec + 4 * SND_DBR) as *mut u32) }.load(Ordering::Acquire);
    u32::from_be(raw) & 0xffff
}
