//! A MODEL of RCCL's proxy GIN path (src/gin/gin_host_proxy.cc at the pinned
//! revision), used only to measure both paths on the same emulated NIC.
//!
//! The requester (standing in for a kernel) writes 128-byte GFDs into a
//! per-peer queue in host memory; a proxy thread per rank drains them as
//! RCCL's does: first completions (test, in order, advancing the consumer
//! index the requester waits on), then up to POLL_BATCH descriptors per peer
//! (passing ncclRmaOptFlagsAggregateRequests when another is already queued
//! and this is not the last of the batch), each turned into iput, iputSignal,
//! iget or iflush of the RMA plugin (our ncclRmaPlugin_v16), then rmaProgress.
//! Signals land through the plugin's fetch-and-add in a registered signal
//! array, as RCCL's proxy registers its own.

use super::gfd::{op, Gfd, GFD_QWORDS};
use super::{Op, Path};
use rccl_rust_gin::config::Config;
use rccl_rust_gin::nic::CounterSnapshot;
use rccl_rust_gin::error::{Error, Result};
use rccl_rust_gin::ffi::nccl::{NcclResult, NCCL_NET_HANDLE_MAXSIZE, NCCL_PTR_CUDA, NCCL_SUCCESS};
use rccl_rust_gin::ffi::rma::{NcclRmaConfig, NcclRmaV16, NCCL_RMA_OPT_FLAGS_AGGREGATE_REQUESTS, NCCL_RMA_OPT_FLAGS_DEFAULT};
use rccl_rust_gin::gpu::{Allocator, GpuBuf, HostMemory, Object};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

/// NCCL_GIN_PROXY_POLL_BATCH's default.
pub const POLL_BATCH: usize = 32;
/// Descriptors per peer queue (RCCL: NCCL_NET_MAX_REQUESTS * maxRecvs).
pub const QUEUE_SIZE: usize = 32;
const WAIT_LIMIT: Duration = Duration::from_secs(30);

fn plugin() -> &'static NcclRmaV16 {
    &rccl_rust_gin::rma::ncclRmaPlugin_v16
}

fn ok(what: &str, r: NcclResult) -> Result<()> {
    if r == NCCL_SUCCESS {
        Ok(())
    } else {
        Err(Error::Remote(format!("proxy model: RMA plugin {what} returned {r}")))
    }
}

/// One peer's GFD ring, as RCCL lays it out: slots of 16 qwords, a producer
/// index the requester advances and a consumer index the proxy advances once
/// requests complete, in order.
struct PeerQueue {
    slots: Vec<[AtomicU64; GFD_QWORDS]>,
    pi: AtomicU32,
    ci: AtomicU32,
}

impl PeerQueue {
    fn new() -> PeerQueue {
        PeerQueue {
            slots: (0..QUEUE_SIZE).map(|_| std::array::from_fn(|_| AtomicU64::new(0))).collect(),
            pi: AtomicU32::new(0),
            ci: AtomicU32::new(0),
        }
    }
}

struct Slot {
    op: u16,
    request: *mut c_void,
    done: bool,
}

struct ProxyRank {
    rank: usize,
    coll: *mut c_void,
    rma_ctx: *mut c_void,
    src: *mut c_void,
    dst: *mut c_void,
    signals_mh: *mut c_void,
    signals: GpuBuf,
    _bufs: Vec<GpuBuf>,
    queues: Vec<PeerQueue>,
    stop: AtomicBool,
    proxy_error: Mutex<Option<String>>,
}

// SAFETY: the raw pointers are opaque plugin tokens, valid from any thread.
unsafe impl Send for ProxyRank {}
// SAFETY: as above; the rest is atomics and owned buffers.
unsafe impl Sync for ProxyRank {}

pub struct Proxy {
    ranks: Vec<Arc<ProxyRank>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Posts that found their peer queue full and waited for the proxy.
    full_waits: AtomicU64,
}

impl Proxy {
    fn requester_post(&self, from: usize, to: usize, g: &Gfd) -> Result<()> {
        let q = &self.ranks[from].queues[to];
        let idx = q.pi.fetch_add(1, Ordering::AcqRel);
        let t = Instant::now();
        if idx.wrapping_sub(q.ci.load(Ordering::Acquire)) >= QUEUE_SIZE as u32 {
            self.full_waits.fetch_add(1, Ordering::Relaxed);
        }
        while idx.wrapping_sub(q.ci.load(Ordering::Acquire)) >= QUEUE_SIZE as u32 {
            self.check_proxy(from)?;
            if t.elapsed() > WAIT_LIMIT {
                return Err(Error::Timeout(format!("proxy model: rank {from}'s queue to {to} never drained")));
            }
            std::thread::yield_now();
        }
        super::gfd::put(&q.slots[idx as usize % QUEUE_SIZE], g);
        Ok(())
    }

    fn check_proxy(&self, rank: usize) -> Result<()> {
        match &*self.ranks[rank].proxy_error.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(Error::Remote(e.clone())),
            None => Ok(()),
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        for r in &self.ranks {
            r.stop.store(true, Ordering::Release);
        }
        for t in self.threads.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            let _ = t.join();
        }
        let v = plugin();
        for r in &self.ranks {
            // SAFETY (all calls): tokens this model obtained from the plugin.
            unsafe {
                for mh in [r.src, r.dst, r.signals_mh] {
                    let _ = (v.dereg_mr_sym.unwrap())(r.coll, mh);
                }
                let _ = (v.destroy_context.unwrap())(r.rma_ctx);
            }
        }
        for r in &self.ranks {
            // SAFETY: as above.
            unsafe {
                let _ = (v.close_coll.unwrap())(r.coll);
            }
        }
    }
}

/// The proxy thread of one rank: gin_host_proxy.cc's loop.
fn proxy_loop(r: Arc<ProxyRank>) {
    let v = plugin();
    let n = r.queues.len();
    let mut states: Vec<Vec<Option<Slot>>> = (0..n).map(|_| (0..QUEUE_SIZE).map(|_| None).collect()).collect();
    let mut sis = vec![0u32; n]; // next descriptor to take, per peer
    let mut cis = vec![0u32; n]; // shadow of the consumer index
    let fail = |e: String| *r.proxy_error.lock().unwrap_or_else(|x| x.into_inner()) = Some(e);
    while !r.stop.load(Ordering::Acquire) {
        // 1. Completions, in order per peer.
        for peer in 0..n {
            let mut i = cis[peer];
            while i != sis[peer] {
                let s = states[peer][i as usize % QUEUE_SIZE].as_mut().expect("issued slot");
                if !s.done {
                    let mut done = 0;
                    // SAFETY: a request token of the plugin.
                    let res = unsafe { (v.test.unwrap())(r.coll, s.request, &mut done) };
                    if res != NCCL_SUCCESS {
                        return fail(format!("proxy model: test returned {res} (op {:#x})", s.op));
                    }
                    s.done = done != 0;
                }
                if s.done && i == cis[peer] {
                    cis[peer] = cis[peer].wrapping_add(1);
                    r.queues[peer].ci.store(cis[peer], Ordering::Release);
                }
                i = i.wrapping_add(1);
            }
        }
        // 2. New descriptors, up to POLL_BATCH per peer.
        for peer in 0..n {
            let q = &r.queues[peer];
            for p in 0..POLL_BATCH {
                let slot = &q.slots[sis[peer] as usize % QUEUE_SIZE];
                let words = match super::gfd::take(slot, WAIT_LIMIT) {
                    Ok(Some(w)) => w,
                    Ok(None) => break,
                    Err(e) => return fail(format!("proxy model: {e}")),
                };
                let g = Gfd::decode(&words);
                let next = &q.slots[(sis[peer] as usize + 1) % QUEUE_SIZE];
                let aggregate = next[0].load(Ordering::Acquire) & 1 == 1 && p != POLL_BATCH - 1;
                let flags = if aggregate { NCCL_RMA_OPT_FLAGS_AGGREGATE_REQUESTS } else { NCCL_RMA_OPT_FLAGS_DEFAULT };
                let mut req = std::ptr::null_mut();
                let src = g.src_handle as *mut c_void;
                let dst = g.dst_handle as *mut c_void;
                let rank = peer as u32;
                // SAFETY (all calls): tokens and handles of this model's registrations.
                let res = unsafe {
                    if g.op & op::GET != 0 {
                        (v.iget.unwrap())(r.rma_ctx, 0, g.src_off, src, g.size as usize, g.dst_off, dst, rank, flags, &mut req)
                    } else if g.op & op::FLUSH != 0 {
                        (v.iflush.unwrap())(r.rma_ctx, 0, r.signals_mh, rank, &mut req)
                    } else if let Some(sop) = g.signal_op() {
                        (v.iput_signal.unwrap())(
                            r.rma_ctx, 0, g.src_off, src, g.size as usize, g.dst_off, dst, rank,
                            8 * g.signal_id as u64, r.signals_mh, g.signal_value, sop, g.strong, flags, &mut req,
                        )
                    } else {
                        (v.iput.unwrap())(r.rma_ctx, 0, g.src_off, src, g.size as usize, g.dst_off, dst, rank, flags, &mut req)
                    }
                };
                if res != NCCL_SUCCESS {
                    return fail(format!("proxy model: the RMA call for op {:#x} returned {res}", g.op));
                }
                let done = req.is_null();
                states[peer][sis[peer] as usize % QUEUE_SIZE] = Some(Slot { op: g.op, request: req, done });
                sis[peer] = sis[peer].wrapping_add(1);
            }
        }
        // 3. rmaProgress (RCCL ignores its result).
        // SAFETY: the context token.
        unsafe {
            let _ = (v.rma_progress.unwrap())(r.rma_ctx);
        }
        std::thread::yield_now();
    }
}

/// Builds `nranks` ranks as threads, each with the RMA plugin's objects
/// (init, listen, connect, createContext, three registrations) and a proxy
/// thread. The plugin reads RCCL_RUST_GIN_* from the environment.
pub fn build(config: &Config, nranks: usize, window: usize) -> Result<Box<dyn Path>> {
    let _ = config;
    Ok(Box::new(build_world(nranks, window, window, 8)?))
}

/// As [`build`], with a source window of `src_bytes`, a destination window
/// of `dst_bytes` and `n_signals` signals on every rank.
pub fn build_world(nranks: usize, src_bytes: usize, dst_bytes: usize, n_signals: usize) -> Result<Proxy> {
    let v = plugin();
    let barrier = Barrier::new(nranks);
    let handles = Mutex::new(vec![[0u8; NCCL_NET_HANDLE_MAXSIZE]; nranks]);
    let ranks: Vec<Result<ProxyRank>> = std::thread::scope(|s| {
        let joins: Vec<_> = (0..nranks)
            .map(|rank| {
                let (barrier, handles) = (&barrier, &handles);
                s.spawn(move || -> Result<ProxyRank> {
                    // SAFETY (all calls): valid out-pointers; tokens from the plugin.
                    unsafe {
                        let mut ctx = std::ptr::null_mut();
                        ok("init", (v.init.unwrap())(&mut ctx, 0x5052_4f58, None))?;
                        let mut h = [0u8; NCCL_NET_HANDLE_MAXSIZE];
                        let mut lc = std::ptr::null_mut();
                        ok("listen", (v.listen.unwrap())(ctx, 0, h.as_mut_ptr() as *mut c_void, &mut lc))?;
                        handles.lock().unwrap_or_else(|e| e.into_inner())[rank] = h;
                        barrier.wait();
                        let mut all = handles.lock().unwrap_or_else(|e| e.into_inner()).clone();
                        let mut ptrs: Vec<*mut c_void> = all.iter_mut().map(|h| h.as_mut_ptr() as *mut c_void).collect();
                        let mut coll = std::ptr::null_mut();
                        ok("connect", (v.connect.unwrap())(ctx, ptrs.as_mut_ptr(), nranks as i32, rank as i32, lc, &mut coll))?;
                        ok("closeListen", (v.close_listen.unwrap())(lc))?;
                        let mut cfg = NcclRmaConfig { n_contexts: 1, traffic_class: -1, rank_stride: 1 };
                        let mut rma_ctx = std::ptr::null_mut();
                        ok("createContext", (v.create_context.unwrap())(coll, &mut cfg, &mut rma_ctx))?;
                        let mut bufs = Vec::new();
                        let reg = |len: usize| -> Result<(*mut c_void, GpuBuf)> {
                            let b = HostMemory.alloc(len, 4096, Object::WindowData)?;
                            let mut mh = std::ptr::null_mut();
                            ok("regMrSym", (v.reg_mr_sym.unwrap())(coll, b.dev_addr() as *mut c_void, len, NCCL_PTR_CUDA, 0, &mut mh))?;
                            Ok((mh, b))
                        };
                        let (src, sb) = reg(src_bytes)?;
                        let (dst, db) = reg(dst_bytes)?;
                        let (signals_mh, signals) = reg((8 * n_signals).max(64))?;
                        bufs.push(sb);
                        bufs.push(db);
                        Ok(ProxyRank {
                            rank,
                            coll,
                            rma_ctx,
                            src,
                            dst,
                            signals_mh,
                            signals,
                            _bufs: bufs,
                            queues: (0..nranks).map(|_| PeerQueue::new()).collect(),
                            stop: AtomicBool::new(false),
                            proxy_error: Mutex::new(None),
                        })
                    }
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap_or_else(|_| Err(Error::Internal("rank thread panicked".into())))).collect()
    });
    let ranks: Vec<Arc<ProxyRank>> = ranks.into_iter().map(|r| r.map(Arc::new)).collect::<Result<_>>()?;
    let threads = ranks
        .iter()
        .map(|r| {
            let r = r.clone();
            std::thread::Builder::new()
                .name(format!("gin-proxy-{}", r.rank))
                .spawn(move || proxy_loop(r))
                .map_err(|e| Error::System(format!("proxy thread: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Proxy { ranks, threads: Mutex::new(threads), full_waits: AtomicU64::new(0) })
}

/// What the expert-parallel workload (perf/ep/) needs beyond [`Path`]:
/// arbitrary descriptors, signal ids and the windows' memory.
impl Proxy {
    /// Queues one descriptor on rank `from`'s queue to `to` (waiting,
    /// bounded, for a free slot).
    pub fn post_gfd(&self, from: usize, to: usize, g: &Gfd) -> Result<()> {
        self.requester_post(from, to, g)
    }
    /// The plugin's memory handles of rank `rank`'s source and destination windows.
    pub fn window_handles(&self, rank: usize) -> (u64, u64) {
        (self.ranks[rank].src as u64, self.ranks[rank].dst as u64)
    }
    /// Host addresses of rank `rank`'s source and destination windows.
    pub fn host_addrs(&self, rank: usize) -> (usize, usize) {
        let b = &self.ranks[rank]._bufs;
        (b[0].host_addr().unwrap_or(0), b[1].host_addr().unwrap_or(0))
    }
    /// Signal `id` of rank `rank`.
    pub fn signal(&self, rank: usize, id: usize) -> u64 {
        self.ranks[rank].signals.atomic_u64(8 * id).load(Ordering::Acquire)
    }
    /// Waits (bounded) until signal `id` of `rank` reaches `least`; returns its value.
    pub fn wait_signal_id(&self, rank: usize, id: usize, least: u64) -> Result<u64> {
        let t = Instant::now();
        loop {
            let v = self.signal(rank, id);
            if (v.wrapping_sub(least) as i64) >= 0 {
                return Ok(v);
            }
            self.check_proxy(rank)?;
            if t.elapsed() > WAIT_LIMIT {
                return Err(Error::Timeout(format!("proxy model: rank {rank}'s signal {id} never reached {least} (it reads {v})")));
            }
            std::thread::yield_now();
        }
    }
    /// Posts so far that found their peer queue (QUEUE_SIZE descriptors) full.
    pub fn full_waits(&self) -> u64 {
        self.full_waits.load(Ordering::Relaxed)
    }
    /// Waits (bounded) until every descriptor rank `from` queued completed.
    pub fn flush_rank(&self, from: usize) -> Result<()> {
        Path::flush(self, from, 0)
    }
}

impl Path for Proxy {
    fn name(&self) -> &'static str {
        "proxy"
    }

    fn post(&self, from: usize, _lane: usize, to: usize, o: Op, off: u64, bytes: u64) -> Result<()> {
        let r = &self.ranks[from];
        let mut g = Gfd { size: bytes, src_off: off, dst_off: off, ..Default::default() };
        match o {
            Op::Put | Op::PutSignal | Op::Signal => {
                g.op = op::PUT;
                g.src_handle = r.src as u64;
                g.dst_handle = r.dst as u64;
                if o != Op::Put {
                    g.op |= op::WITH_SIGNAL_INC;
                    g.signal_value = 1;
                    g.strong = true;
                }
                if o == Op::Signal {
                    g.size = 0;
                }
            }
            Op::Get => {
                g.op = op::GET;
                g.src_handle = r.src as u64; // the remote side, as RCCL's GFD names it
                g.dst_handle = r.dst as u64;
            }
        }
        self.requester_post(from, to, &g)
    }

    fn flush(&self, from: usize, _lane: usize) -> Result<()> {
        let r = &self.ranks[from];
        let t = Instant::now();
        for (to, q) in r.queues.iter().enumerate() {
            let target = q.pi.load(Ordering::Acquire);
            while (q.ci.load(Ordering::Acquire).wrapping_sub(target) as i32) < 0 {
                self.check_proxy(from)?;
                if t.elapsed() > WAIT_LIMIT {
                    return Err(Error::Timeout(format!("proxy model: flush of rank {from} to {to} never completed")));
                }
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    fn wait_signal(&self, rank: usize, least: u64) -> Result<()> {
        let t = Instant::now();
        while (self.signal_value(rank).wrapping_sub(least) as i64) < 0 {
            self.check_proxy(rank)?;
            if t.elapsed() > WAIT_LIMIT {
                return Err(Error::Timeout(format!("proxy model: rank {rank}'s signal never reached {least}")));
            }
            std::thread::yield_now();
        }
        Ok(())
    }

    fn signal_value(&self, rank: usize) -> u64 {
        self.ranks[rank].signals.atomic_u64(0).load(Ordering::Acquire)
    }

    fn counters(&self, rank: usize) -> Option<CounterSnapshot> {
        rccl_rust_gin::rma::plugin::nic_counters(self.ranks[rank].coll).ok().flatten()
    }
}
