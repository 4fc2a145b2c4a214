//! An RMA context set (createContext): one RC queue pair per (context, peer),
//! each with a host-side [`SendQueue`] that posts through the device
//! library's x86-64 build, its own sticky error record, and the doorbell
//! aggregation state.
//!
//! Posting: every request ends in a WQE that asks for a CQE, so its
//! completion is `done >= target` on its queue (completions are in order on
//! a send queue, and every WQE is one WQEBB on mlx5, one WQE on bnxt_re and
//! ionic: the producer counts slots of the ring either way).
//!
//! NIC families: mlx5, bnxt_re and ionic queues alike, through the family's
//! entry points ([`SendQueue`]). bnxt_re and ionic have neither NOP nor DUMP,
//! so where mlx5 posts those (an empty request, a flush after READs) they
//! post a 1-byte WRITE from the sink's flush byte to the peer's landing byte
//! (its sink's byte [`SINK_LANDING_BYTE`], registered for remote writes and
//! exchanged when the queues connect), fenced for a flush. Requests on one queue are posted
//! under the queue's lock, so a request's WQE indices are known: `first` is
//! the reservation counter before posting and `target` the counter after.
//!
//! Backlog: a request that finds its queue full (or other requests already
//! waiting on it) is queued in the queue's backlog, in order, and posted when
//! room comes back, by the next call on that queue or test or rmaProgress.
//! Refusing it would leak it in RCCL's proxy and stall the GPU (nccl#2119);
//! waiting would hold the proxy thread. One request's WQEs (an iputSignal's
//! WRITE and ATOMIC) are always posted together, so a signal never goes
//! ahead of its data.
//!
//! Aggregation (ncclRmaOptFlagsAggregateRequests): the request is published
//! without a doorbell (`post_deferred`) and its queue is remembered; the next
//! non-aggregated request, iflush, test or rmaProgress on this context set
//! rings every remembered queue. One doorbell covers everything published
//! before it, so compatible requests (same queue) share one.

use super::memory::RmaMem;
use crate::abi::{rust_gin_error, rust_gin_mlx5_request, rust_gin_mlx5_sq_state};
use crate::config::SignalModeKnob;
use crate::device::{DeviceError, DeviceStatus};
use crate::error::{Error, Result};
use crate::gpu::{GpuBuf, Object};
use crate::mlx5::queue::{log_depth_for, SINK_FLUSH_BYTE};
use crate::mlx5::sq::SendQueue;
use crate::mlx5::wire::opcode;
use crate::provider::{Access, MemoryRegion, NicFamily, QueueDescriptor, QueuePair};
use crate::session::comm::CollComm;
use crate::session::mesh::{PeerSet, QpMesh};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub const MAX_CONTEXTS: i32 = 64;

/// Largest message of one RDMA WRITE or READ; bigger requests are split
/// (the plugin's transfers, and the queue-depth check here).
pub const MAX_CHUNK: u64 = 1 << 30;

/// Where peers' 1-byte flush WRITEs land in the sink, on the families
/// without a DUMP (bnxt_re, ionic): apart from the atomic result (0..8) and
/// the flush byte the NIC reads ([`SINK_FLUSH_BYTE`]). Nobody reads it.
pub const SINK_LANDING_BYTE: u64 = 48;

/// RUST_GIN_REQ_* flags (abi/mlx5_queue.h).
pub mod req_flags {
    pub const SIGNALED: u8 = crate::abi::RUST_GIN_REQ_SIGNALED as u8;
    pub const SMALL_FENCE: u8 = crate::abi::RUST_GIN_REQ_SMALL_FENCE as u8;
}

/// The validated configuration of one context set.
#[derive(Clone, Copy, Debug)]
pub struct RmaSettings {
    pub n_contexts: u32,
    pub traffic_class: u8,
    pub rank_stride: u32,
    pub log_depth: u32,
}

impl RmaSettings {
    /// Checks RCCL's config. `queue_depth` 0 takes `default_depth`; the depth
    /// never goes below what RCCL's proxy can have outstanding per peer.
    pub fn new(
        n_contexts: i32,
        traffic_class: i32,
        rank_stride: i32,
        queue_depth: i32,
        default_depth: u32,
        default_tc: i32,
    ) -> Result<RmaSettings> {
        let bad = |f: &str, v: i32, want: &str| Err(Error::InvalidArgument(format!("config.{f} = {v}: {want}")));
        if !(1..=MAX_CONTEXTS).contains(&n_contexts) {
            return bad("nContexts", n_contexts, &format!("must be in [1, {MAX_CONTEXTS}]"));
        }
        if !(-1..=255).contains(&traffic_class) {
            return bad("trafficClass", traffic_class, "must be -1 (undefined) or in [0, 255]");
        }
        if rank_stride < 1 {
            return bad("rankStride", rank_stride, "must be at least 1");
        }
        if !(0..=32768).contains(&queue_depth) {
            return bad("queueDepth", queue_depth, "must be 0 (default) or in [1, 32768]");
        }
        let depth = if queue_depth == 0 { default_depth } else { queue_depth as u32 };
        let tc = if traffic_class < 0 { default_tc } else { traffic_class };
        Ok(RmaSettings {
            n_contexts: n_contexts as u32,
            traffic_class: tc as u8,
            rank_stride: rank_stride as u32,
            log_depth: log_depth_for(depth.max(super::MIN_QUEUE_DEPTH)),
        })
    }
}

/// One queue pair to one peer in one context.
pub struct Queue {
    pub context: u32,
    pub peer: u32,
    // Field order is drop order: the host-side queue and its error record go
    // before the QP that owns the rings they point into.
    sq: SendQueue,
    error: GpuBuf,
    qp: Box<dyn QueuePair>,
    /// Serializes posting, so a request's WQE indices are known; holds the
    /// requests waiting for room.
    post: Mutex<Backlog>,
    /// The backlog is not empty (read without the lock by test and progress).
    backlogged: AtomicBool,
    /// Published WQEs wait for a doorbell.
    deferred: AtomicBool,
    /// Ring slots the producer may fill (the depth less the family's slack).
    depth: u64,
    /// bnxt_re, ionic: the peer's landing byte (address, rkey).
    landing: (u64, u32),
}

impl Queue {
    pub fn qpn(&self) -> u32 {
        self.qp.qpn()
    }

    /// The producer-side doorbell count of this queue (statistics).
    pub fn doorbells(&self) -> u64 {
        self.sq.state().doorbells
    }

    /// The queue's sticky error, its status named in the family's table.
    fn error(&self) -> Option<DeviceError> {
        DeviceError::from_record(&self.error.read_pod::<rust_gin_error>(0)).map(|e| e.on_family(self.sq.family()))
    }

    fn failed(&self) -> bool {
        self.sq.state().failed != 0
    }

    /// Room in the ring for `n` more WQEs, as the NIC has completed so far.
    fn has_room(&self, n: u64) -> bool {
        let st = self.sq.state();
        st.resv - st.done + n <= self.depth
    }
}

/// Requests of one queue waiting for room, oldest first.
#[derive(Default)]
struct Backlog {
    waiting: VecDeque<Waiting>,
    /// The queue's completion count when the backlog was last seen stuck, and
    /// since when: waiting requests time out only when the NIC has completed
    /// nothing on the queue for the timeout, not after a wait behind a long
    /// but moving backlog.
    stuck: Option<(u64, Instant)>,
    /// Why posting from the backlog failed, for the requests left in it.
    refused: Option<String>,
}

struct Waiting {
    reqs: Vec<rust_gin_mlx5_request>,
    /// Filled with the WQEs [first, target) when posted.
    at: Arc<OnceLock<(u64, u64)>>,
}

/// What a request is, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Put,
    PutSignal,
    Signal,
    Get,
    Flush,
    Nop,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Put => "iput",
            Op::PutSignal => "iputSignal",
            Op::Signal => "iputSignal (signal only)",
            Op::Get => "iget",
            Op::Flush => "iflush",
            Op::Nop => "zero-byte request",
        }
    }
}

/// A request: the WQEs [first, target) of one queue, once posted.
pub struct Request {
    pub ctx: Arc<RmaContext>,
    pub queue: usize,
    pub op: Op,
    wqes: Wqes,
    /// When its doorbell rang (the timeout's start): at post for a ringing
    /// post; for an aggregated or queued one, the first test that finds it
    /// posted (which rings).
    rung: OnceLock<Instant>,
}

enum Wqes {
    Posted(u64, u64),
    /// In the queue's backlog; the backlog fills it when it posts.
    Queued(Arc<OnceLock<(u64, u64)>>),
}

impl Request {
    /// [first, target) of its queue, None while it waits in the backlog.
    fn wqes(&self) -> Option<(u64, u64)> {
        match &self.wqes {
            Wqes::Posted(first, target) => Some((*first, *target)),
            Wqes::Queued(at) => at.get().copied(),
        }
    }
}

pub struct RmaContext {
    pub coll: Arc<CollComm>,
    pub settings: RmaSettings,
    queues: Vec<Queue>,
    /// The connected ranks; queues are indexed `context * peers.len() + slot`.
    peers: PeerSet,
    _sink_mr: Box<dyn MemoryRegion>,
    /// Where fetch-and-adds put the old value (nobody reads it).
    sink: GpuBuf,
    /// Queues with published but unrung WQEs (may hold stale entries).
    pending: Mutex<Vec<usize>>,
    any_pending: AtomicBool,
    /// Failures the host saw (request timeouts), for queryLastError.
    host_errors: Mutex<Vec<String>>,
    /// Error count already reported through queryLastError.
    reported: AtomicU64,
    progress_lock: Mutex<()>,
    timeout: Duration,
    /// The device handle a v13 createContext returns (RCCL discards it).
    pub dev_handle: Box<crate::ffi::nccl::NcclNetDeviceHandle>,
}

// SAFETY: dev_handle holds no pointer (handle is NULL); every other field is
// Send + Sync.
unsafe impl Send for RmaContext {}
// SAFETY: as above; dev_handle is never written after construction.
unsafe impl Sync for RmaContext {}

impl RmaContext {
    /// Builds the queue pairs to the peers of `peers` (every rank, or the
    /// v17 peer array) and connects them (collective).
    pub fn create(coll: Arc<CollComm>, settings: RmaSettings, peers: PeerSet) -> Result<RmaContext> {
        coll.instance.check_alive()?;
        let _one_at_a_time = coll.collective.lock().unwrap_or_else(|e| e.into_inner());
        let cfg = &coll.instance.config;
        let alloc = coll.nic.allocator();
        let family = coll.nic.family();
        check_signals(&coll, cfg.signal_mode)?;
        let sink = alloc.alloc(64, 64, Object::Sink)?;
        sink.write(0, &[0u8; 64]);
        // bnxt_re, ionic: peers' flush WRITEs land in our sink.
        let access =
            if family == NicFamily::Mlx5 { Access::LOCAL_WRITE } else { Access::LOCAL_WRITE | Access::REMOTE_WRITE };
        // SAFETY: the buffer lives in the context, which drops the region first.
        let sink_mr = unsafe { coll.nic.reg_mr(sink.dev_addr(), sink.len() as u64, access)? };
        let mut landing = Vec::new();
        if family != NicFamily::Mlx5 {
            landing.extend_from_slice(&(sink.dev_addr() + SINK_LANDING_BYTE).to_le_bytes());
            landing.extend_from_slice(&sink_mr.rkey().to_le_bytes());
        }
        let mesh = QpMesh::build(
            &coll,
            settings.n_contexts,
            settings.log_depth,
            settings.traffic_class,
            cfg.rings_in_device_memory,
            &landing,
            peers,
        )?;
        // Each connected peer's landing byte (empty: mlx5, or not connected).
        let landings: Vec<(u64, u32)> = mesh
            .extras
            .iter()
            .map(|m| match (m.get(0..8), m.get(8..12)) {
                (Some(a), Some(k)) => {
                    (u64::from_le_bytes(a.try_into().expect("8")), u32::from_le_bytes(k.try_into().expect("4")))
                }
                _ => (0, 0),
            })
            .collect();
        let peers = mesh.peers;
        let npeers = peers.len() as u32;
        let timeout_ns = cfg.timeout_ns();
        let mut queues = Vec::with_capacity(mesh.qps.len());
        for (i, qp) in mesh.qps.into_iter().enumerate() {
            let (context, peer) = (i as u32 / npeers, peers.ranks()[i % npeers as usize]);
            let error = crate::mlx5::sq::new_error_record(&*alloc)?;
            error.write_pod(0, &rust_gin_error::default());
            // Posted from the host through the family's entry points
            // (host/mlx5/sq.rs). The flush byte is read by mlx5's DUMP; the
            // other families' fenced WRITE reads it too and lands at the peer.
            let landing = landings.get(peer as usize).copied().unwrap_or((0, 0));
            let flush = sink.dev_addr() + SINK_FLUSH_BYTE;
            let desc = match qp.descriptor(peer, error.dev_addr(), timeout_ns) {
                QueueDescriptor::Mlx5(d) => QueueDescriptor::Mlx5(d.with_read_flush(flush, sink_mr.lkey())),
                QueueDescriptor::Nic(f, d) => {
                    if f != family || landing.1 == 0 {
                        return Err(Error::Internal(format!(
                            "a {} queue to rank {peer} on a {} NIC without the peer's landing byte",
                            f.name(),
                            family.name()
                        )));
                    }
                    QueueDescriptor::Nic(f, d.with_read_flush(flush, sink_mr.lkey(), landing.0, landing.1))
                }
            };
            let sq = SendQueue::for_queue(&*alloc, &desc)?;
            let depth = (1u64 << qp.log_slots()) - sq.ring_slack();
            queues.push(Queue {
                context,
                peer,
                sq,
                error,
                qp,
                post: Mutex::new(Backlog::default()),
                backlogged: AtomicBool::new(false),
                deferred: AtomicBool::new(false),
                depth,
                landing,
            });
        }
        let dev_handle = Box::new(crate::ffi::nccl::NcclNetDeviceHandle {
            net_device_type: crate::ffi::nccl::NCCL_NET_DEVICE_GIN_PROXY,
            net_device_version: crate::ffi::rma::NCCL_GIN_PROXY_VERSION,
            handle: std::ptr::null_mut(),
            size: 0,
            needs_proxy_progress: 1,
        });
        Ok(RmaContext {
            timeout: Duration::from_millis(cfg.timeout_ms),
            coll: coll.clone(),
            settings,
            queues,
            peers,
            _sink_mr: sink_mr,
            sink,
            pending: Mutex::new(Vec::new()),
            any_pending: AtomicBool::new(false),
            host_errors: Mutex::new(Vec::new()),
            reported: AtomicU64::new(0),
            progress_lock: Mutex::new(()),
            dev_handle,
        })
    }

    pub fn queue_pairs(&self) -> usize {
        self.queues.len()
    }

    /// The queue of (context, peer); None when out of range or `peer` is not
    /// connected (not in the v17 peer array).
    pub fn queue(&self, context: u32, peer: u32) -> Option<&Queue> {
        let slot = self.peers.slot(peer)?;
        if context >= self.settings.n_contexts {
            return None;
        }
        self.queues.get((context * self.peers.len() as u32 + slot) as usize)
    }

    /// The ranks this context set connects to.
    pub fn peers(&self) -> &PeerSet {
        &self.peers
    }

    /// The queue of (context, rank), or an error naming what is out of range.
    pub fn queue_index(&self, context: i32, rank: u32) -> Result<usize> {
        let n = self.settings.n_contexts;
        if context < 0 || context as u32 >= n {
            return Err(Error::InvalidArgument(format!("context {context} out of range [0, {n})")));
        }
        if rank >= self.coll.nranks {
            return Err(Error::InvalidArgument(format!("rank {rank} out of range [0, {})", self.coll.nranks)));
        }
        let slot = self.peers.slot(rank).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "rank {rank} is not connected in this context set (createContext's peerArray does not list it)"
            ))
        })?;
        Ok((context as u32 * self.peers.len() as u32 + slot) as usize)
    }

    /// The 8-byte sink fetch-and-adds return into: (address, lkey).
    pub fn sink(&self) -> (u64, u32) {
        (self.sink.dev_addr(), self._sink_mr.lkey())
    }

    /// The NIC family of this context set's queues.
    pub fn family(&self) -> NicFamily {
        self.queues.first().map_or(NicFamily::Mlx5, |q| q.sq.family())
    }

    /// A request that moves nothing and completes in order on queue `qi`
    /// (a zero-byte iput or iget): a signalled NOP on mlx5; on bnxt_re and
    /// ionic, which have none, a signalled 1-byte WRITE of the flush byte
    /// to the peer's landing byte.
    pub fn empty_request(&self, qi: usize) -> rust_gin_mlx5_request {
        self.flush_write(qi, req_flags::SIGNALED).unwrap_or_else(|| nop(req_flags::SIGNALED))
    }

    /// iflush's request on queue `qi`: a signalled request behind the small
    /// fence that reads the local flush byte, whose completion proves every
    /// earlier READ's data landed (the NIC's read cannot pass its writes of
    /// that data): mlx5's DUMP, or on bnxt_re and ionic the 1-byte WRITE to
    /// the peer's landing byte (queue/send_queue.h, flush_target).
    pub fn flush_request(&self, qi: usize) -> rust_gin_mlx5_request {
        let flags = req_flags::SIGNALED | req_flags::SMALL_FENCE;
        self.flush_write(qi, flags).unwrap_or_else(|| read_flush(self.sink(), flags))
    }

    fn flush_write(&self, qi: usize, flags: u8) -> Option<rust_gin_mlx5_request> {
        let q = &self.queues[qi];
        if q.sq.family() == NicFamily::Mlx5 {
            return None;
        }
        let (laddr, lkey) = self.sink();
        Some(rdma(opcode::RDMA_WRITE, laddr + SINK_FLUSH_BYTE, lkey, q.landing.0, q.landing.1, 1, flags))
    }

    /// Checks that `mem` was registered on this context's comm.
    pub fn check_mem(&self, mem: &RmaMem, what: &str) -> Result<()> {
        if !Arc::ptr_eq(&mem.window.coll, &self.coll) {
            return Err(Error::InvalidArgument(format!("{what} was registered on another collComm")));
        }
        Ok(())
    }

    /// Posts `reqs` (the last asks for a CQE) to queue `qi`, or queues them
    /// behind the queue's backlog when there is no room; returns the request.
    /// With `aggregate`, no doorbell now. Errors are permanent only: bad
    /// input, a failed queue.
    pub fn post(
        self: &Arc<Self>,
        qi: usize,
        reqs: &[rust_gin_mlx5_request],
        op: Op,
        aggregate: bool,
    ) -> Result<Request> {
        let q = &self.queues[qi];
        let n = reqs.len() as u64;
        if n > q.depth {
            // Never fits, however long it waits.
            return Err(Error::InvalidArgument(format!(
                "{}: size takes {n} WQEs (one per {} bytes), more than the {} the queue to rank {} holds",
                op.name(),
                MAX_CHUNK,
                q.depth,
                q.peer
            )));
        }
        let (wqes, newly_deferred) = {
            let mut b = q.post.lock().unwrap_or_else(|e| e.into_inner());
            // Older requests first: nothing overtakes the backlog.
            self.drain(q, &mut b);
            let mut st = q.sq.state();
            if st.failed != 0 {
                return Err(self.queue_failure(q, op.name()));
            }
            let room = |st: &rust_gin_mlx5_sq_state| st.resv - st.done + n <= q.depth;
            if b.waiting.is_empty() && !room(&st) {
                let _ = q.sq.poll();
                st = q.sq.state();
            }
            if b.waiting.is_empty() && room(&st) {
                // Only this thread, under the lock, moves resv.
                let first = st.resv;
                let r = if aggregate { q.sq.post_deferred(reqs) } else { q.sq.post(reqs) };
                r.map_err(|s| self.post_error(q, op, s))?;
                // A ringing post rings everything published on the queue before it.
                let was = q.deferred.swap(aggregate, Ordering::Relaxed);
                (Wqes::Posted(first, first + n), aggregate && !was)
            } else {
                // Room comes back only for WQEs the NIC was told about.
                if q.deferred.swap(false, Ordering::Relaxed) {
                    q.sq.ring();
                }
                let at = Arc::new(OnceLock::new());
                b.waiting.push_back(Waiting { reqs: reqs.to_vec(), at: at.clone() });
                if b.stuck.is_none() {
                    b.stuck = Some((q.sq.state().done, Instant::now()));
                }
                q.backlogged.store(true, Ordering::Release);
                (Wqes::Queued(at), false)
            }
        };
        let posted_now = matches!(wqes, Wqes::Posted(..));
        if newly_deferred {
            self.pending.lock().unwrap_or_else(|e| e.into_inner()).push(qi);
            self.any_pending.store(true, Ordering::Release);
        } else if !aggregate {
            self.ring_pending();
        }
        let rung = OnceLock::new();
        if posted_now && !aggregate {
            let _ = rung.set(Instant::now());
        }
        Ok(Request { ctx: self.clone(), queue: qi, op, wqes, rung })
    }

    /// Rings every queue holding published, unrung WQEs.
    pub fn ring_pending(&self) {
        if !self.any_pending.load(Ordering::Acquire) {
            return;
        }
        let list = {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            self.any_pending.store(false, Ordering::Release);
            std::mem::take(&mut *p)
        };
        for qi in list {
            let q = &self.queues[qi];
            if q.deferred.swap(false, Ordering::Relaxed) {
                // Under the post lock: a ring never races a half-done post.
                let _g = q.post.lock().unwrap_or_else(|e| e.into_inner());
                q.sq.ring();
            }
        }
    }

    /// Posts what the backlog of `q` holds, oldest first, as far as room
    /// allows, under one doorbell: the hints were for requests now all known
    /// (the caller holds the post lock).
    fn drain(&self, q: &Queue, b: &mut Backlog) {
        if b.waiting.is_empty() {
            return;
        }
        let _ = q.sq.poll();
        if q.failed() {
            // Nothing more goes out; test reports the failure to each.
            b.waiting.clear();
            q.backlogged.store(false, Ordering::Release);
            return;
        }
        let mut posted = false;
        while let Some(w) = b.waiting.front() {
            let n = w.reqs.len() as u64;
            if !q.has_room(n) {
                break;
            }
            let first = q.sq.state().resv;
            if let Err(s) = q.sq.post_deferred(&w.reqs) {
                b.refused = Some(format!("posting from the backlog to QP {:#x} returned {s:?}", q.qpn()));
                b.waiting.clear();
                break;
            }
            let _ = w.at.set((first, first + n));
            b.waiting.pop_front();
            posted = true;
        }
        // One doorbell for what was posted and anything held before it.
        if posted | q.deferred.swap(false, Ordering::Relaxed) {
            q.sq.ring();
        }
        if b.waiting.is_empty() {
            b.stuck = None;
            q.backlogged.store(false, Ordering::Release);
        } else {
            let done = q.sq.state().done;
            if posted || b.stuck.is_none_or(|(d, _)| d != done) {
                b.stuck = Some((done, Instant::now()));
            }
        }
    }

    /// Drains the backlog of `q`, if it has one.
    fn drain_queue(&self, q: &Queue) {
        if q.backlogged.load(Ordering::Acquire) {
            let mut b = q.post.lock().unwrap_or_else(|e| e.into_inner());
            self.drain(q, &mut b);
        }
    }

    fn post_error(&self, q: &Queue, op: Op, s: DeviceStatus) -> Error {
        match s {
            DeviceStatus::QpFailed | DeviceStatus::CqeError => self.queue_failure(q, op.name()),
            DeviceStatus::Timeout => Error::Timeout(format!(
                "{} to rank {} (context {}, QP {:#x}): {}",
                op.name(),
                q.peer,
                q.context,
                q.qpn(),
                q.error().map(|e| e.to_string()).unwrap_or_else(|| "timed out".into())
            )),
            other => Error::Internal(format!("{}: posting to QP {:#x} returned {other:?}", op.name(), q.qpn())),
        }
    }

    fn queue_failure(&self, q: &Queue, what: &str) -> Error {
        let why = q.error().map(|e| e.to_string()).unwrap_or_else(|| "the queue is in the error state".into());
        Error::Remote(format!("{what}: the queue to rank {} (context {}) failed: {why}", q.peer, q.context))
    }

    /// Whether `req` has completed; an error when its queue failed at or
    /// before it, or when it outlived the timeout.
    pub fn test(&self, req: &Request) -> Result<bool> {
        self.ring_pending();
        let q = &self.queues[req.queue];
        self.drain_queue(q);
        let Some((first, target)) = req.wqes() else {
            return self.still_waiting(q, req);
        };
        // An error CQE is recorded in the queue's error record; read below.
        let _ = q.sq.poll();
        let st = q.sq.state();
        if st.failed != 0 {
            let e = q.error();
            if let Some(e) = e.filter(|e| e.code == crate::abi::RUST_GIN_ERR_CQE) {
                // The first error's WQE index, extended next to this request's
                // last WQE (outstanding WQEs span less than 2^15).
                let last = target - 1;
                let d = (e.wqe_index as u16).wrapping_sub(last as u16) as i16 as i64;
                let failed_at = last as i64 + d;
                if failed_at > last as i64 && st.done >= target {
                    return Ok(true); // completed before the failure
                }
            }
            return Err(self.queue_failure(q, req.op.name()));
        }
        if st.done >= target {
            return Ok(true);
        }
        // ring_pending above rang the request if it waited for a doorbell.
        if req.rung.get_or_init(Instant::now).elapsed() > self.timeout {
            let msg = format!(
                "{} to rank {} (context {}, QP {:#x}, WQEs {}..{}) not complete after {} ms (completed up to {})",
                req.op.name(),
                q.peer,
                q.context,
                q.qpn(),
                first,
                target,
                self.timeout.as_millis(),
                st.done
            );
            self.host_errors.lock().unwrap_or_else(|e| e.into_inner()).push(msg.clone());
            return Err(Error::Timeout(msg));
        }
        Ok(false)
    }

    /// test of a request still in the backlog: an error once its queue
    /// failed, or completed nothing for the timeout while it waited.
    fn still_waiting(&self, q: &Queue, req: &Request) -> Result<bool> {
        if q.failed() {
            return Err(self.queue_failure(q, req.op.name()));
        }
        let Wqes::Queued(at) = &req.wqes else { return Ok(false) };
        let mut b = q.post.lock().unwrap_or_else(|e| e.into_inner());
        if at.get().is_some() {
            return Ok(false); // posted meanwhile; the next test follows it
        }
        if let Some(why) = &b.refused {
            return Err(Error::Internal(format!("{} to rank {} (context {}): {why}", req.op.name(), q.peer, q.context)));
        }
        let Some((done, since)) = b.stuck.filter(|(_, since)| since.elapsed() > self.timeout) else {
            return Ok(false);
        };
        let msg = format!(
            "{} to rank {} (context {}, QP {:#x}) waited for room with {} request(s) queued, and the queue \
             completed nothing for {} ms (completed up to {done})",
            req.op.name(),
            q.peer,
            q.context,
            q.qpn(),
            b.waiting.len(),
            since.elapsed().as_millis()
        );
        // Failed: its WQEs never go out.
        b.waiting.retain(|w| !Arc::ptr_eq(&w.at, at));
        drop(b);
        self.host_errors.lock().unwrap_or_else(|e| e.into_inner()).push(msg.clone());
        Err(Error::Timeout(msg))
    }

    fn drive_nic(&self) {
        let _g = self.progress_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.coll.nic.progress();
    }

    /// rmaProgress: rings what aggregation left unrung, drives a NIC that
    /// needs it (the emulated NIC in proxy mode), reaps completions and posts
    /// from backlogs.
    pub fn progress(&self) {
        self.ring_pending();
        if self.coll.nic.needs_progress() {
            self.drive_nic();
        }
        for q in &self.queues {
            if q.backlogged.load(Ordering::Acquire) {
                self.drain_queue(q);
                continue;
            }
            let st = q.sq.state();
            if st.resv != st.done && st.failed == 0 {
                let _ = q.sq.poll();
            }
        }
    }

    /// Every error so far (device-side records of every queue, then host-side
    /// ones) and whether any is new since the last call.
    pub fn errors(&self) -> (Vec<String>, bool) {
        let mut out = Vec::new();
        let mut count = 0u64;
        for q in &self.queues {
            if let Some(e) = q.error() {
                count += e.count;
                out.push(format!("context {} rank {}: {e}", q.context, q.peer));
            } else if q.failed() {
                count += 1;
                out.push(format!("context {} rank {}: the queue is in the error state", q.context, q.peer));
            }
        }
        let host = self.host_errors.lock().unwrap_or_else(|e| e.into_inner());
        count += host.len() as u64;
        out.extend(host.iter().cloned());
        let newly = self.reported.swap(count, Ordering::AcqRel) != count;
        (out, newly)
    }
}

/// The RMA plugin's signals are remote fetch-and-adds on RCCL's signal word:
/// RCCL's proxy GIN has its kernels poll that one word and calls nothing to
/// refresh it, so the per-sender slot writes of the GIN backend
/// (docs/nic-families.md §7) cannot stand in. Where the capability probe
/// says remote atomics do not work into GPU memory (Thor2, Pollara), or the
/// knob asks for no atomics (`write`), the context is refused rather than
/// left to post signals that hang or never land; `RCCL_RUST_GIN_SIGNAL_MODE=atomic`
/// posts them anyway (signals in host memory; the emulated NICs execute
/// atomics in every format).
fn check_signals(coll: &CollComm, knob: SignalModeKnob) -> Result<()> {
    let why: Vec<String> = match knob {
        SignalModeKnob::Atomic => return Ok(()),
        SignalModeKnob::Write => vec!["RCCL_RUST_GIN_SIGNAL_MODE=write asks for signals without remote atomics".into()],
        SignalModeKnob::Auto => coll.rails.iter().filter_map(|nic| nic.capabilities().atomics_unusable()).collect(),
    };
    if why.is_empty() {
        return Ok(());
    }
    Err(Error::InvalidUsage(format!(
        "the RMA plugin's signals are remote atomics on RCCL's signal word, and {}; use the GIN backend \
         (NCCL_GIN_TYPE=8), whose slot-write signals need none, or set RCCL_RUST_GIN_SIGNAL_MODE=atomic \
         if atomics do reach the signals' memory (docs/rma-plugin.md, \"NIC families\")",
        why.join("; ")
    )))
}

/// A request of `len` bytes from `laddr`/`lkey` to `raddr`/`rkey`.
pub fn rdma(op: u8, laddr: u64, lkey: u32, raddr: u64, rkey: u32, len: u32, flags: u8) -> rust_gin_mlx5_request {
    rust_gin_mlx5_request { opcode: op, flags, length: len, lkey, rkey, laddr, raddr, ..Default::default() }
}

/// An 8-byte fetch-and-add of `add` at `raddr`, the old value into the sink.
pub fn fetch_add(sink: (u64, u32), raddr: u64, rkey: u32, add: u64, flags: u8) -> rust_gin_mlx5_request {
    rust_gin_mlx5_request {
        opcode: opcode::ATOMIC_FA,
        flags,
        length: 8,
        lkey: sink.1,
        rkey,
        laddr: sink.0,
        raddr,
        operand0: add,
        ..Default::default()
    }
}

/// A DUMP of the sink's flush byte: its CQE proves that the data of every
/// earlier READ on the queue reached memory (wire.h, OP_DUMP).
pub fn read_flush(sink: (u64, u32), flags: u8) -> rust_gin_mlx5_request {
    rust_gin_mlx5_request {
        opcode: opcode::DUMP,
        flags,
        length: 1,
        lkey: sink.1,
        laddr: sink.0 + SINK_FLUSH_BYTE,
        ..Default::default()
    }
}

pub fn nop(flags: u8) -> rust_gin_mlx5_request {
    rust_gin_mlx5_request { opcode: opcode::NOP, flags, ..Default::default() }
}
