//! gin-scale: what ONE rank of an N-rank job holds after createContext (issue
//! 12 part 4), for N in the thousands, in one process on the emulated NIC.
//!
//! The measured rank runs the real connection setup: a collective comm over
//! the emulated provider and `GinContext::create_for` (host/gin/context.rs,
//! host/session/mesh.rs), which creates its queue pairs, exchanges QP
//! numbers and connects. The other N-1 ranks exist only as answers: an
//! out-of-band stand-in (`oob::StandIn`) gives the measured rank a
//! synthetic but well-formed record from each rank in scope (signal table
//! address and key, QP numbers) and an empty one from the others, and counts
//! every message. A sampled few of the peers are real: each has an emulated
//! NIC of its own on the same fabric, queue pairs connected back to the
//! measured rank's, a signal table and a window; after setup the measured rank
//! posts a put with a signal to each of them on every context, through the
//! device library's host build, and the bytes and the signal are checked on
//! the peer's side.
//!
//! Counts come from what was allocated, not from formulas: QPs, CQs, UAR
//! pages and MRs from the emulated NIC's tables; queue and GPU-visible memory
//! from the allocator's record of every allocation (gpu::recording); host
//! memory from this program's counting global allocator (live heap bytes
//! before and after createContext, less the GPU-visible and UAR bytes, which
//! the emulated NIC also keeps on the heap, and less the allocation record). Setup time is the wall time of
//! createContext against the stand-in: the measured rank's own work, no
//! network.
//!
//! Transports: RC and DC (`--transport`). With DC the stand-in answers DC's
//! one allgather (signal table, DC target number and key per rank,
//! host/session/dc.rs); the sampled peers have a DC target each and take
//! the same checked put+signal through the measured rank's DCIs.

use clap::Parser;
use rccl_rust_gin::provider::caps::SignalMode;
use rccl_rust_gin::abi::{rust_gin_signal, RUST_GIN_SIGNAL_INDEXED, RUST_GIN_SIGNAL_OP_INC};
use rccl_rust_gin::config::{Config, EmuFabric, EmuProgress, ProviderKind};
use rccl_rust_gin::device::{self, DeviceStatus};
use rccl_rust_gin::error::{Error, Result};
use rccl_rust_gin::ffi::nccl::NCCL_PTR_CUDA;
use rccl_rust_gin::gin::comm::{CollComm, Instance};
use rccl_rust_gin::gin::context::{GinContext, Settings};
use rccl_rust_gin::gin::window::{Source, Window};
use rccl_rust_gin::gpu::{recording, Allocation, Allocator, GpuBuf, HostMemory, Object};
use rccl_rust_gin::mlx5::queue::log_depth_for;
use rccl_rust_gin::oob::{frame, Mesh, StandIn};
use rccl_rust_gin::provider::{Access, DcTarget, MemoryRegion, Nic, NicResources, QueuePair};
use rccl_rust_gin::session::mesh::PeerSet;
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[allow(dead_code)]
#[path = "gin_perf/perf"]
mod perf {
    pub mod chart;
    pub mod report;
    pub mod stats;
}
use perf::chart::{legend, xy_panel, Line};

// ---------------------------------------------------------------------------
// Host memory: a counting global allocator
// ---------------------------------------------------------------------------

/// Live heap bytes of this process (every allocation through the global
/// allocator, the emulated NIC's "GPU" buffers included).
static LIVE: AtomicI64 = AtomicI64::new(0);

struct Counting;

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            LIVE.fetch_add(l.size() as i64, Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            LIVE.fetch_add(l.size() as i64, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as i64, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: as above.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            LIVE.fetch_add(new as i64 - l.size() as i64, Ordering::Relaxed);
        }
        q
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

#[derive(Parser, Debug)]
#[command(name = "gin-scale", about = "Per-rank resources of createContext for N emulated ranks (one real rank, the others answered by a stand-in)")]
struct Args {
    /// Numbers of ranks, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1024,4096,16384")]
    ranks: Vec<u32>,
    /// Transports: rc, dc.
    #[arg(long, value_delimiter = ',', default_value = "rc,dc")]
    transport: Vec<String>,
    /// DC initiators per context with the DC transport (RCCL_RUST_GIN_DCIS).
    #[arg(long, default_value_t = 4)]
    dcis: u32,
    /// Connection scopes: full (every rank), rail (rail-only: the ranks with
    /// the same local index, a rank stride of --gpus-per-node), peers (a v15
    /// peer list of --peer-list ring neighbours).
    #[arg(long, value_delimiter = ',', default_value = "full,rail,peers")]
    scope: Vec<String>,
    /// GPUs per node: the rank stride of the rail-only scope.
    #[arg(long, default_value_t = 8)]
    gpus_per_node: u32,
    /// Peers of the v15 peer-list scope besides the rank itself (half on each side of it on a ring).
    #[arg(long, default_value_t = 64)]
    peer_list: u32,
    /// RCCL_RUST_GIN_QPS_PER_UAR settings, comma-separated (1 = a page per QP, 0 = all on one).
    #[arg(long, value_delimiter = ',', default_value = "16,1")]
    qps_per_uar: Vec<u32>,
    /// Contexts per context set (nContexts).
    #[arg(long, default_value_t = 1)]
    contexts: u32,
    /// Queue depth in WQEs (RCCL's queueDepth; rounded up to a power of two in [64, 32768]).
    #[arg(long, default_value_t = 512)]
    depth: u32,
    /// Peers that get a real emulated NIC and traffic (a put with a signal on every context, checked).
    #[arg(long, default_value_t = 4)]
    sample: u32,
    /// Queue memory (MiB) above which a configuration is refused before anything is allocated.
    #[arg(long, default_value_t = 2048)]
    max_queue_mib: u64,
    /// Output: table or csv.
    #[arg(long, default_value = "table")]
    format: String,
    /// Where to write the SVG chart.
    #[arg(long, default_value = "target/gin-scale.svg")]
    chart: std::path::PathBuf,
    /// Write no chart.
    #[arg(long)]
    no_chart: bool,
}

// ---------------------------------------------------------------------------
// Scopes
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    Full,
    Rail { stride: u32 },
    Peers { count: u32 },
}

impl Scope {
    fn parse(s: &str, a: &Args) -> std::result::Result<Scope, String> {
        match s {
            "full" => Ok(Scope::Full),
            "rail" if a.gpus_per_node >= 1 => Ok(Scope::Rail { stride: a.gpus_per_node }),
            "peers" => Ok(Scope::Peers { count: a.peer_list }),
            _ => Err(format!("unknown scope {s:?} (full, rail, peers; --gpus-per-node at least 1)")),
        }
    }
    /// The chart's name for it (one colour each).
    fn name(&self) -> &'static str {
        match self {
            Scope::Full => "full mesh",
            Scope::Rail { .. } => "rail-only",
            Scope::Peers { .. } => "peer list",
        }
    }
    fn label(&self) -> String {
        match self {
            Scope::Full => "full mesh".into(),
            Scope::Rail { stride } => format!("rail-only /{stride}"),
            Scope::Peers { count } => format!("peer list {count}"),
        }
    }
    /// The ranks `me` connects to, ascending, itself included; symmetric
    /// (q is in p's list exactly when p is in q's), as RCCL's lists are.
    fn ranks(&self, n: u32, me: u32) -> Vec<u32> {
        match *self {
            Scope::Full => (0..n).collect(),
            Scope::Rail { stride } => (0..n).filter(|r| r % stride == me % stride).collect(),
            Scope::Peers { count } => {
                let half = (count / 2).min((n - 1) / 2);
                let mut v: Vec<u32> = (0..=half).flat_map(|d| [(me + d) % n, (me + n - d) % n]).collect();
                if count % 2 == 1 && 2 * half < n - 1 {
                    v.push((me + half + 1) % n);
                }
                v.sort_unstable();
                v.dedup();
                v
            }
        }
    }
    /// As the connection scope createContext receives it: every rank (GIN
    /// v14's path), or a peer array (GIN v15's). Rail-only goes in as the
    /// peer array of the ranks a rank stride names: at this commit GIN v14's
    /// rankStride still connects every rank (host/gin/context.rs).
    fn peer_set(&self, n: u32, me: u32) -> Result<PeerSet> {
        match self {
            Scope::Full => Ok(PeerSet::all(n)),
            _ => {
                let list: Vec<i32> = self.ranks(n, me).into_iter().map(|r| r as i32).collect();
                PeerSet::from_array(n, &list, "config")
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The other ranks: an OOB stand-in
// ---------------------------------------------------------------------------

/// Answers one collective: (peer, what the measured rank gave it) -> what it gives back.
type Responder = Box<dyn FnMut(u32, &[u8]) -> Vec<u8> + Send>;

#[derive(Default)]
struct Oob {
    /// One per collective the measured rank will run, in order.
    script: Mutex<VecDeque<(&'static str, Responder)>>,
    collectives: AtomicU64,
    sent_msgs: AtomicU64,
    sent_bytes: AtomicU64,
    recv_msgs: AtomicU64,
    recv_bytes: AtomicU64,
}

impl Oob {
    fn expect(&self, what: &'static str, r: Responder) {
        self.script.lock().unwrap().push_back((what, r));
    }
    fn counts(&self) -> [u64; 5] {
        [&self.collectives, &self.sent_msgs, &self.sent_bytes, &self.recv_msgs, &self.recv_bytes]
            .map(|c| c.load(Ordering::Relaxed))
    }
}

impl StandIn for Oob {
    fn alltoall(&self, seq: u64, me: u32, nranks: u32, mine: &dyn Fn(u32) -> Vec<u8>) -> Result<Vec<Vec<u8>>> {
        let (_what, mut answer) = self.script.lock().unwrap().pop_front().ok_or_else(|| {
            Error::Internal(format!("gin-scale: collective {seq} of rank {me} was not expected (the stand-in has no answer)"))
        })?;
        self.collectives.fetch_add(1, Ordering::Relaxed);
        let mut out = Vec::with_capacity(nranks as usize);
        let (mut sb, mut rb) = (0u64, 0u64);
        for p in 0..nranks {
            if p == me {
                out.push(Vec::new());
                continue;
            }
            // The real mesh sends every other rank one frame per collective,
            // empty or not, and receives one from each.
            let m = mine(p);
            sb += m.len() as u64;
            let a = answer(p, &m);
            rb += a.len() as u64;
            out.push(a);
        }
        let others = nranks as u64 - 1;
        self.sent_msgs.fetch_add(others, Ordering::Relaxed);
        self.recv_msgs.fetch_add(others, Ordering::Relaxed);
        self.sent_bytes.fetch_add(sb, Ordering::Relaxed);
        self.recv_bytes.fetch_add(rb, Ordering::Relaxed);
        Ok(out)
    }
}

// ---------------------------------------------------------------------------
// A sampled peer: real NIC, queue pairs, signal table and window
// ---------------------------------------------------------------------------

const WINDOW_BYTES: usize = 64 * 1024;
const PUT_BYTES: usize = 256;

/// Fields drop in order: the QPs and regions before the memory they use.
struct Sampled {
    rank: u32,
    qps: Vec<Box<dyn QueuePair>>,
    /// DC: its DC target (the measured rank's DCIs reach it), no QPs.
    dct: Option<Box<dyn DcTarget>>,
    signals_mr: Box<dyn MemoryRegion>,
    dst_mr: Box<dyn MemoryRegion>,
    signals: GpuBuf,
    dst: GpuBuf,
    nic: Arc<dyn Nic>,
}

impl Sampled {
    fn new(rank: u32, nic: Arc<dyn Nic>, settings: &Settings, dc: bool) -> Result<Sampled> {
        let alloc = HostMemory;
        let (qps, dct) = if dc {
            (Vec::new(), Some(nic.create_dct(0x5ca1_e000_0000_0000 | rank as u64)?))
        } else {
            let qps = (0..settings.n_contexts).map(|_| nic.create_qp(settings.log_depth, 0, false)).collect::<Result<Vec<_>>>()?;
            (qps, None)
        };
        let signals = alloc.alloc(8 * (settings.n_contexts * settings.n_signals) as usize, 64, Object::Signals)?;
        let dst = alloc.alloc(WINDOW_BYTES, 4096, Object::WindowData)?;
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
        // SAFETY: both buffers live in self, which drops the regions first (field order).
        let signals_mr = unsafe { nic.reg_mr(signals.dev_addr(), signals.len() as u64, access)? };
        // SAFETY: as above.
        let dst_mr = unsafe { nic.reg_mr(dst.dev_addr(), dst.len() as u64, access)? };
        Ok(Sampled { rank, qps, dct, signals_mr, dst_mr, signals, dst, nic })
    }
}

// The records createContext and regMrSym exchange (host/gin/context.rs,
// host/session/mesh.rs, host/gin/window.rs), for one rail: a peer's signal
// table (address, rkey) then its QP number for us per context; a window's
// base, size and rkey. The traffic check fails if these drift.
fn qp_record(signal_base: u64, signal_rkey: u32, qpns: impl Iterator<Item = u32>) -> Vec<u8> {
    // The stand-in ranks signal with remote atomics, as the emulated NIC's
    // capabilities make `auto` choose.
    let mut v = rccl_rust_gin::gin::context::signal_record(&[(signal_base, signal_rkey)], SignalMode::RemoteAtomic);
    qpns.for_each(|q| v.extend_from_slice(&q.to_le_bytes()));
    v
}
fn window_record(base: u64, size: u64, rkey: u32) -> Vec<u8> {
    let mut v = base.to_le_bytes().to_vec();
    v.extend_from_slice(&size.to_le_bytes());
    v.extend_from_slice(&rkey.to_le_bytes());
    v
}
/// The measured rank's QP numbers for a peer, from its createContext message.
fn qpns_in(msg: &[u8], n_contexts: u32) -> Vec<u32> {
    let head = msg.len() - 4 * n_contexts as usize;
    msg[head..].chunks_exact(4).map(|b| u32::from_le_bytes(b.try_into().unwrap())).collect()
}

// ---------------------------------------------------------------------------
// One measurement
// ---------------------------------------------------------------------------

#[derive(Clone, Debug, Default)]
struct Measured {
    peers: usize,
    qps: usize,
    cqs: usize,
    uar_pages: usize,
    /// NIC-counted ring bytes (send queues and CQs it was given).
    nic_ring_bytes: usize,
    /// Allocated: send rings, CQ rings, doorbell records.
    queue_bytes: usize,
    /// Allocated: handle, contexts, per-peer descriptors, counter logs, error record.
    descriptor_bytes: usize,
    /// Allocated: signals, offsets, counters, sink (not per peer).
    signal_bytes: usize,
    /// Allocated by the two windows' registration (descriptors and peer tables).
    window_bytes: usize,
    uar_bytes: usize,
    /// Heap growth of createContext less the GPU-visible and UAR bytes.
    host_bytes: i64,
    setup_ms: f64,
    oob: [u64; 5],
    checked: usize,
}

/// The transport a row measures: RC (a QP per context and connected peer)
/// or DC (--dcis initiators per context and one DC target).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Rc,
    Dc,
}

impl Transport {
    fn parse(s: &str) -> Option<Transport> {
        match s {
            "rc" => Some(Transport::Rc),
            "dc" => Some(Transport::Dc),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
enum Outcome {
    Measured(Measured),
    Refused(String),
}

#[derive(Clone, Debug)]
struct Row {
    transport: String,
    ranks: u32,
    scope: Scope,
    qps_per_uar: u32,
    outcome: Outcome,
}

fn sum(allocs: &[Allocation], pick: impl Fn(Object) -> bool) -> usize {
    allocs.iter().filter(|a| pick(a.object)).map(|a| a.len).sum()
}

fn is_queue(o: Object) -> bool {
    matches!(o, Object::SendRing(_) | Object::CompletionRing(_) | Object::DoorbellRecords(_))
}
fn is_descriptor(o: Object) -> bool {
    matches!(o, Object::Handle | Object::Contexts | Object::Peers | Object::CounterLog | Object::CountedPeers | Object::ErrorRecord)
}
fn is_signal(o: Object) -> bool {
    matches!(o, Object::Signals | Object::SignalOffsets | Object::Counters | Object::Sink)
}

fn resources(nics: &[Arc<dyn Nic>]) -> NicResources {
    nics.iter().filter_map(|n| n.resources()).fold(NicResources::default(), |a, r| NicResources {
        qps: a.qps + r.qps,
        cqs: a.cqs + r.cqs,
        uar_pages: a.uar_pages + r.uar_pages,
        mrs: a.mrs + r.mrs,
        send_queue_bytes: a.send_queue_bytes + r.send_queue_bytes,
        completion_queue_bytes: a.completion_queue_bytes + r.completion_queue_bytes,
    })
}

static FABRICS: AtomicU64 = AtomicU64::new(0);

fn config(qps_per_uar: u32, depth: u32) -> Config {
    let mut c = Config { provider: ProviderKind::Emu, qps_per_uar, queue_depth: depth, ..Config::default() };
    // A fabric of its own per measurement, its NICs on polling threads
    // (only the measured rank's and the sampled peers' exist).
    c.emu_fabric = EmuFabric::Local(format!("gin-scale-{}", FABRICS.fetch_add(1, Ordering::Relaxed)));
    c.emu_progress = EmuProgress::Thread;
    c
}

fn measure(a: &Args, transport: Transport, n: u32, scope: Scope, qps_per_uar: u32) -> Result<Outcome> {
    let me = 0u32;
    let dc = transport == Transport::Dc;
    let mut cfg = config(qps_per_uar, a.depth);
    if dc {
        cfg.transport = rccl_rust_gin::config::Transport::Dc;
        cfg.dcis = a.dcis;
    }
    let provider = rccl_rust_gin::provider::select(&cfg)?;
    let settings = Settings {
        n_signals: 1,
        n_counters: 1,
        n_contexts: a.contexts,
        log_depth: log_depth_for(a.depth),
        traffic_class: 0,
        backend_version: 0,
        rank_stride: 1,
    };
    let in_scope = scope.ranks(n, me);
    let nqps = in_scope.len() * a.contexts as usize;
    // Refuse before allocating: one probe QP's rings (on a NIC of its own,
    // so that it takes no UAR slot of the measured rank's), times the QPs.
    let probe_nic = provider.open(0)?;
    let (probe, allocs) = recording(|| probe_nic.create_qp(settings.log_depth, 0, false));
    drop(probe?);
    drop(probe_nic);
    let per_qp = sum(&allocs, is_queue);
    let predicted = per_qp as u64 * nqps as u64;
    if predicted > a.max_queue_mib << 20 {
        return Ok(Outcome::Refused(format!(
            "{nqps} QPs x {} KiB of rings = {} MiB > --max-queue-mib {} (computed from one probe QP, not allocated)",
            per_qp >> 10,
            predicted >> 20,
            a.max_queue_mib
        )));
    }

    // The sampled peers: spread over the scope, never the measured rank.
    let others: Vec<u32> = in_scope.iter().copied().filter(|&r| r != me).collect();
    let k = (a.sample as usize).min(others.len());
    let picks: Vec<u32> = (0..k).map(|i| others[i * others.len() / k.max(1)]).collect();
    let mut sampled = Vec::with_capacity(k);
    for &p in &picks {
        sampled.push(Sampled::new(p, provider.open(0)?, &settings, dc)?);
    }
    let sampled = Arc::new(sampled);
    let index: HashMap<u32, usize> = picks.iter().enumerate().map(|(i, &p)| (p, i)).collect();

    // The measured rank's comm: its NIC, every rank's NIC address (the
    // sampled peers' real ones; the others' on the same fabric, at node
    // numbers no NIC has, never reached), and the stand-in mesh.
    let nic = provider.open(0)?;
    let oob = Arc::new(Oob::default());
    let mut addrs = Vec::with_capacity(n as usize);
    for r in 0..n {
        let a = match index.get(&r) {
            Some(&i) => sampled[i].nic.address(),
            None if r == me => nic.address(),
            None => {
                let mut x = nic.address();
                x[9..13].copy_from_slice(&(0x4000_0000u32 + r).to_le_bytes());
                x
            }
        };
        addrs.push(a);
    }
    let inst = Arc::new(Instance::new(cfg.clone(), provider.clone(), 0x5ca1e));
    let coll = Arc::new(CollComm {
        instance: inst,
        nic: nic.clone(),
        rails: vec![nic.clone()],
        mesh: Mesh::with_stand_in(me, n, oob.clone())?,
        rank: me,
        nranks: n,
        peers: vec![addrs],
        collective: Mutex::new(()),
        retired_windows: Mutex::new(Vec::new()),
    });

    // createContext: the QP exchange, then everyone's status.
    let member: Vec<bool> = {
        let mut m = vec![false; n as usize];
        in_scope.iter().for_each(|&r| m[r as usize] = true);
        m
    };
    let captured: Arc<Mutex<HashMap<u32, Vec<u8>>>> = Arc::default();
    {
        let (sampled, index, captured, nctx) = (sampled.clone(), index.clone(), captured.clone(), a.contexts);
        if dc {
            // DC: one allgather of (signal table, DC target number and key)
            // per rank (host/session/dc.rs), and no status round.
            oob.expect(
                "createContext: DC targets",
                Box::new(move |p, _| {
                    let (sig, dctn, key) = match index.get(&p) {
                        Some(&i) => {
                            let s = &sampled[i];
                            let t = s.dct.as_ref().expect("a DC target");
                            ((s.signals_mr.addr(), s.signals_mr.rkey()), t.dctn(), t.key())
                        }
                        // Well-formed, never used.
                        None => ((0x7000_0000_0000 + ((p as u64) << 12), 0x00a0_0000 | (p & 0xf_ffff)), 0x90_0000 | (p & 0xf_ffff), 0x5ca1e ^ p as u64),
                    };
                    let mut v = rccl_rust_gin::gin::context::signal_record(&[sig], SignalMode::RemoteAtomic);
                    v.extend_from_slice(&dctn.to_le_bytes());
                    v.extend_from_slice(&key.to_le_bytes());
                    v
                }),
            );
        } else {
        oob.expect(
            "createContext: QP numbers",
            Box::new(move |p, mine| {
                if !member[p as usize] {
                    return Vec::new();
                }
                match index.get(&p) {
                    Some(&i) => {
                        captured.lock().unwrap().insert(p, mine.to_vec());
                        let s = &sampled[i];
                        qp_record(s.signals_mr.addr(), s.signals_mr.rkey(), s.qps.iter().map(|q| q.qpn()))
                    }
                    // Well-formed, never used: 24-bit QP numbers, a key and an
                    // address of its own per rank.
                    None => qp_record(
                        0x7000_0000_0000 + ((p as u64) << 12),
                        0x00a0_0000 | (p & 0xf_ffff),
                        (0..nctx).map(move |c| 0x80_0000 | ((p * nctx + c) & 0x7f_ffff)),
                    ),
                }
            }),
        );
        oob.expect("createContext: status", Box::new(|_, _| vec![0u8]));
        }
    }
    let nics = [nic.clone()];
    let before = resources(&nics);
    let heap_before = LIVE.load(Ordering::Relaxed);
    let peers = scope.peer_set(n, me)?;
    let ((ctx, setup), allocs) = recording(|| {
        let t = Instant::now();
        let ctx = GinContext::create_for(coll.clone(), settings, peers);
        (ctx, t.elapsed())
    });
    let ctx = ctx?;
    let heap = LIVE.load(Ordering::Relaxed) - heap_before;
    let after = resources(&nics);
    let oob_counts = oob.counts();

    // The sampled peers connect back and take a put with a signal on every context.
    let windows: Vec<(u64, u32)> = sampled.iter().map(|s| (s.dst_mr.addr(), s.dst_mr.rkey())).collect();
    for _ in 0..2 {
        let (index, windows) = (index.clone(), windows.clone());
        oob.expect(
            "regMrSym",
            Box::new(move |p, _| match index.get(&p) {
                Some(&i) => window_record(windows[i].0, WINDOW_BYTES as u64, windows[i].1),
                None => window_record(0x6000_0000_0000 + ((p as u64) << 20), WINDOW_BYTES as u64, 0x00b0_0000 | (p & 0xf_ffff)),
            }),
        );
    }
    let alloc = HostMemory;
    let src_buf = alloc.alloc(WINDOW_BYTES, 4096, Object::WindowData)?;
    let pattern: Vec<u8> = (0..PUT_BYTES).map(|i| (i as u8) ^ 0x5a).collect();
    src_buf.write(0, &pattern);
    let dst_buf = alloc.alloc(WINDOW_BYTES, 4096, Object::WindowData)?;
    let ((src, dst), window_allocs) = recording(|| {
        let src = Window::register(coll.clone(), src_buf.dev_addr(), WINDOW_BYTES as u64, NCCL_PTR_CUDA, Source::Pointer);
        let dst = Window::register(coll.clone(), dst_buf.dev_addr(), WINDOW_BYTES as u64, NCCL_PTR_CUDA, Source::Pointer);
        (src, dst)
    });
    let (src, dst) = (src?, dst?);
    let captured = captured.lock().unwrap().clone();
    // RC only: a DC target is passive, nothing to connect.
    for s in sampled.iter().filter(|_| !dc) {
        let msg = captured.get(&s.rank).ok_or_else(|| Error::Internal(format!("no createContext message to rank {}", s.rank)))?;
        for (q, mine) in s.qps.iter().zip(qpns_in(msg, a.contexts)) {
            q.connect(&nic.address(), mine)?;
        }
    }
    let h = ctx.device_handle() as *const std::ffi::c_void;
    let mut checked = 0;
    for s in sampled.iter() {
        for c in 0..a.contexts {
            let signal = rust_gin_signal {
                type_: RUST_GIN_SIGNAL_INDEXED,
                op: RUST_GIN_SIGNAL_OP_INC,
                value: 0,
                id: 0,
                window: std::ptr::null(),
                offset: 0,
            };
            let off = (PUT_BYTES * c as usize) as u64;
            let (dw, sw) = (dst.gin_handle() as *const _, src.gin_handle() as *const _);
            // SAFETY: the handle and both windows live until the end of this function.
            let code = unsafe { device::rust_gin_put(h, c, s.rank, dw, off, sw, 0, PUT_BYTES as u64, signal, 0, 0, 0) };
            DeviceStatus::check(code).map_err(|e| Error::Remote(format!("put+signal to rank {}, context {c}: {e:?}", s.rank)))?;
            // SAFETY: as above.
            let code = unsafe { device::rust_gin_flush(h, c, 0, 1, std::ptr::null(), 0) };
            DeviceStatus::check(code).map_err(|e| Error::Remote(format!("flush of context {c} after rank {}: {e:?}", s.rank)))?;
            let mut got = vec![0u8; PUT_BYTES];
            s.dst.read(off as usize, &mut got);
            let mut word = [0u8; 8];
            s.signals.read(8 * (c * settings.n_signals) as usize, &mut word);
            let sig = u64::from_ne_bytes(word);
            if got != pattern || sig != 1 {
                return Err(Error::Remote(format!(
                    "rank {}, context {c}: {} of {PUT_BYTES} bytes as put, signal {sig} (1 expected)",
                    s.rank,
                    got.iter().zip(&pattern).filter(|(x, y)| x == y).count()
                )));
            }
            checked += 1;
        }
    }
    if ctx.last_error().is_some() {
        return Err(Error::Remote(format!("device error after the traffic: {:?}", ctx.last_error())));
    }

    let gpu_visible = allocs.iter().map(|x| x.len).sum::<usize>();
    let uar_pages = after.uar_pages - before.uar_pages;
    let uar_bytes = uar_pages * rccl_rust_gin::emu::nic::UAR_PAGE;
    let m = Measured {
        peers: ctx.peers().len(),
        qps: after.qps - before.qps,
        cqs: after.cqs - before.cqs,
        uar_pages,
        nic_ring_bytes: (after.send_queue_bytes + after.completion_queue_bytes)
            - (before.send_queue_bytes + before.completion_queue_bytes),
        queue_bytes: sum(&allocs, is_queue),
        descriptor_bytes: sum(&allocs, is_descriptor),
        signal_bytes: sum(&allocs, is_signal),
        window_bytes: sum(&window_allocs, |o| matches!(o, Object::WindowDescriptor | Object::WindowPeers)),
        uar_bytes,
        // Less the allocator's own record of the allocations, which only
        // this measurement keeps.
        host_bytes: heap
            - gpu_visible as i64
            - uar_bytes as i64
            - (allocs.capacity() * std::mem::size_of::<Allocation>()) as i64,
        setup_ms: setup.as_secs_f64() * 1e3,
        oob: oob_counts,
        checked,
    };
    drop((src, dst, ctx));
    Ok(Outcome::Measured(m))
}

// ---------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------

fn mib(b: usize) -> String {
    format!("{:.2}", b as f64 / (1 << 20) as f64)
}
fn kib(b: usize) -> String {
    format!("{:.1}", b as f64 / 1024.0)
}

const COLUMNS: &[&str] = &[
    "transport", "ranks", "scope", "qps_per_uar", "status", "peers", "qps", "cqs", "uar_pages", "queue_mib",
    "nic_ring_mib", "descriptor_kib", "signal_kib", "window_kib", "uar_kib", "host_kib", "setup_ms", "oob_collectives",
    "oob_sent_msgs", "oob_sent_bytes", "oob_recv_msgs", "oob_recv_bytes", "oob_wire_bytes", "checked_puts",
];

fn cells(r: &Row) -> Vec<String> {
    let head = vec![r.transport.clone(), r.ranks.to_string(), r.scope.label(), r.qps_per_uar.to_string()];
    let rest = match &r.outcome {
        Outcome::Measured(m) => {
            let wire = m.oob[2] + m.oob[4] + frame::HEADER as u64 * (m.oob[1] + m.oob[3]);
            let mut v = vec!["measured".to_string()];
            v.extend([m.peers, m.qps, m.cqs, m.uar_pages].map(|x| x.to_string()));
            v.extend([mib(m.queue_bytes), mib(m.nic_ring_bytes)]);
            v.extend([m.descriptor_bytes, m.signal_bytes, m.window_bytes, m.uar_bytes].map(kib));
            v.push(format!("{:.1}", m.host_bytes as f64 / 1024.0));
            v.push(format!("{:.1}", m.setup_ms));
            v.extend(m.oob.map(|x| x.to_string()));
            v.push(wire.to_string());
            v.push(m.checked.to_string());
            v
        }
        Outcome::Refused(why) => std::iter::once(format!("REFUSED: {why}")).chain((6..COLUMNS.len()).map(|_| "-".into())).collect(),
    };
    head.into_iter().chain(rest).collect()
}

fn print_table(rows: &[Row]) {
    let header = ["transport", "ranks", "scope", "QPs/UAR", "peers", "QPs", "UAR pages", "queue MiB", "descr KiB", "host KiB", "setup ms", "OOB msgs", "OOB KiB", "puts ok"];
    let mut lines = vec![header.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    for r in rows {
        let c = cells(r);
        let mut l = vec![c[0].clone(), c[1].clone(), c[2].clone(), c[3].clone()];
        match &r.outcome {
            Outcome::Measured(m) => {
                let bytes = m.oob[2] + m.oob[4] + frame::HEADER as u64 * (m.oob[1] + m.oob[3]);
                l.extend([c[5].clone(), c[6].clone(), c[8].clone(), c[9].clone(), c[11].clone(), c[15].clone(), c[16].clone()]);
                l.push(format!("{}", m.oob[1] + m.oob[3]));
                l.push(format!("{:.1}", bytes as f64 / 1024.0));
                l.push(c[23].clone());
            }
            _ => l.push(c[4].clone()),
        }
        lines.push(l);
    }
    let ncol = header.len();
    let width: Vec<usize> =
        (0..ncol).map(|i| lines.iter().filter(|l| l.len() == ncol).map(|l| l[i].len()).max().unwrap_or(0)).collect();
    for l in &lines {
        let s: Vec<String> = l.iter().enumerate().map(|(i, c)| if l.len() == ncol { format!("{c:>w$}", w = width[i]) } else { c.clone() }).collect();
        println!("{}", s.join("  "));
    }
}

fn write_chart(path: &std::path::Path, rows: &[Row], default_qpu: u32) -> std::result::Result<(), String> {
    use plotters::prelude::*;
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let mut keys: Vec<(Scope, u32)> = rows.iter().filter(|r| r.transport == "rc").map(|r| (r.scope, r.qps_per_uar)).collect();
    keys.dedup();
    keys.sort_by_key(|k| (k.0.name(), k.1));
    keys.dedup();
    let lines = |f: &dyn Fn(&Measured) -> f64| -> Vec<Line> {
        keys.iter()
            .map(|&(scope, qpu)| Line {
                op: scope.name().to_string(),
                path: if qpu == default_qpu { "RC".into() } else { format!("RC {qpu} QP/UAR") },
                points: rows
                    .iter()
                    .filter(|r| r.transport == "rc" && r.scope == scope && r.qps_per_uar == qpu)
                    .filter_map(|r| match &r.outcome {
                        Outcome::Measured(m) if f(m) > 0.0 => Some(((r.ranks as f64).log2(), f(m))),
                        _ => None,
                    })
                    .collect(),
            })
            .filter(|l| !l.points.is_empty())
            .collect()
    };
    let root = SVGBackend::new(path, (1500, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let title = perf::report::title(true, "rust-gin: per-rank resources of createContext (RC; counted, not computed)");
    let root = root.titled(&title, ("sans-serif", 18)).map_err(|x| e(&x))?;
    let (panels, strip) = root.split_vertically(470);
    let areas = panels.split_evenly((1, 3));
    let ranks = |x: f64| {
        let v = 1u64 << x as u32;
        if v >= 1024 && v % 1024 == 0 { format!("{}k", v / 1024) } else { v.to_string() }
    };
    let qps = lines(&|m| m.qps as f64);
    xy_panel(&areas[0], "queue pairs per rank", "ranks", "QPs", &qps, &ranks)?;
    xy_panel(&areas[1], "UAR pages per rank", "ranks", "pages", &lines(&|m| m.uar_pages as f64), &ranks)?;
    xy_panel(&areas[2], "queue memory per rank", "ranks", "MiB", &lines(&|m| m.queue_bytes as f64 / (1 << 20) as f64), &ranks)?;
    legend(&strip, &qps, &format!("solid: RC, {default_qpu} QPs per UAR page; dashed: other RCCL_RUST_GIN_QPS_PER_UAR; DC not in this build"))?;
    root.present().map_err(|x| e(&x))
}

fn main() {
    let a = Args::parse();
    let scopes: Vec<Scope> = match a.scope.iter().map(|s| Scope::parse(s, &a)).collect() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("gin-scale: {e}");
            std::process::exit(2);
        }
    };
    let Some(transports) = a.transport.iter().map(|t| Transport::parse(t)).collect::<Option<Vec<_>>>() else {
        eprintln!("gin-scale: unknown transport in {:?} (rc, dc)", a.transport);
        std::process::exit(2);
    };
    if a.ranks.iter().any(|&n| n < 2) || a.contexts == 0 {
        eprintln!("gin-scale: --ranks must be at least 2 and --contexts at least 1");
        std::process::exit(2);
    }
    eprintln!(
        "gin-scale: EMULATED NIC, one process: one real rank (rank 0) per configuration, the others answered by an \
         OOB stand-in, {} sampled peer(s) real with a checked put+signal per context; {} context(s), depth {}",
        a.sample, a.contexts, a.depth
    );
    let mut rows = Vec::new();
    let mut failed = false;
    for (&t, name) in transports.iter().zip(&a.transport) {
        for &n in &a.ranks {
            for &scope in &scopes {
                for &qpu in &a.qps_per_uar {
                    let outcome = match measure(&a, t, n, scope, qpu) {
                        Ok(o) => o,
                        Err(e) => {
                            eprintln!("gin-scale: {n} ranks, {}, {qpu} QPs/UAR: FAILED: {e}", scope.label());
                            failed = true;
                            continue;
                        }
                    };
                    rows.push(Row { transport: name.clone(), ranks: n, scope, qps_per_uar: qpu, outcome });
                }
            }
        }
    }
    match a.format.as_str() {
        "csv" => {
            println!("{}", COLUMNS.join(","));
            for r in &rows {
                println!("{}", cells(r).iter().map(|c| c.replace(',', ";")).collect::<Vec<_>>().join(","));
            }
        }
        _ => print_table(&rows),
    }
    if !a.no_chart {
        if let Some(dir) = a.chart.parent().filter(|d| !d.as_os_str().is_empty()) {
            let _ = std::fs::create_dir_all(dir);
        }
        match write_chart(&a.chart, &rows, a.qps_per_uar.first().copied().unwrap_or(16)) {
            Ok(()) => eprintln!("gin-scale: chart written to {}", a.chart.display()),
            Err(e) => {
                eprintln!("gin-scale: chart: {e}");
                failed = true;
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
}
