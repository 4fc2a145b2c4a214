//! Data-path figures of the mlx5 producer on the emulated NIC, each party
//! measured on its own:
//! - a bare loop of 64-byte stores, the ceiling for any producer here;
//! - the producer alone: the device code's host build posting batches of 64
//!   WRITEs into fresh 2^15-WQEBB queues, no NIC thread running;
//! - the emulated NIC alone: one NIC stepping a queue the producer filled
//!   beforehand, on this thread, nothing else running;
//! - both at once: the producer with the NIC's polling thread alongside, on
//!   a 2^10-WQEBB queue, so posting waits for the NIC (the NIC's pace);
//! - WQEBBs per put and per put-with-signal, doorbells and signalled CQEs
//!   per batch of 64 requests (NIC counters);
//! - the posting time of a GIN put with a counter against a plain put, the
//!   posting thread alone (the NIC is stepped only between rounds).
//!
//! The producer-alone rings are written once before the clock starts: a
//! long-lived queue's ring is resident, and a fresh one would otherwise be
//! paged in by the posts themselves (a page fault per 64 WQEs, measured at
//! 3-5 ns per WQE here), a cost of the measurement's fresh queues, not of
//! posting.

use super::cpu::thread_cpu_ns;
use super::world;
use rccl_rust_gin::abi::{rust_gin_mlx5_request, rust_gin_signal, RUST_GIN_SIGNAL_NONE};
use rccl_rust_gin::config::{Config, EmuProgress};
use rccl_rust_gin::device::{self, DeviceStatus};
use rccl_rust_gin::emu::{Access, EmuNic, EmuQp, Fabric, NicConfig};
use rccl_rust_gin::error::{Error, Result};
use rccl_rust_gin::gin::context::Settings;
use rccl_rust_gin::gpu::{Allocator, HostMemory, Object, RingHome};
use rccl_rust_gin::mlx5::queue::QueueMem;
use rccl_rust_gin::mlx5::sq::{new_error_record, SendQueue};
use rccl_rust_gin::mlx5::wire::opcode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(Clone, Debug, Default)]
pub struct Figures {
    pub wqebbs_per_put: f64,
    pub wqebbs_per_put_signal: f64,
    pub doorbells_per_batch64: f64,
    pub cqes_per_batch64: f64,
    /// Millions of 64-byte stores per second (of the thread's CPU time), one
    /// thread: the median of the passes run between the producer's rounds.
    pub store_loop_m_per_s: f64,
    /// Millions of WQEs per second (of its CPU time) one thread posts, no NIC running.
    pub producer_mwqe_per_s: f64,
    /// Producer CPU per WQE, ns (the median round's).
    pub producer_cpu_ns_per_wqe: f64,
    /// Rounds of 500 batches the producer's median is taken over.
    pub producer_rounds: usize,
    /// The producer's rate over the store loop's, round by round (each
    /// round against the store-loop pass just before it): median, min, max.
    pub producer_share: (f64, f64, f64),
    /// Millions of 8-byte WRITEs per second one NIC consumes (fetch,
    /// execute as requester and, in loopback, as responder, complete).
    pub nic_mwqe_per_s: f64,
    /// NIC CPU per WRITE, ns.
    pub nic_cpu_ns_per_wqe: f64,
    /// Producer and NIC thread together on a 2^10 queue: WQEs per second
    /// through the whole pipeline.
    pub pipeline_mwqe_per_s: f64,
    /// Posting time of an 8-byte GIN put, the posting thread's CPU per put
    /// (ns, the median round): plain, and naming a counter.
    pub put_cpu_ns: f64,
    pub counted_put_cpu_ns: f64,
    /// counted / plain per pair of neighbouring rounds: median, min, max.
    pub counted_ratio: (f64, f64, f64),
}

fn err<E: std::fmt::Display>(e: E) -> Error {
    Error::Internal(e.to_string())
}

/// The median of a non-empty list.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median, min and max of a non-empty list.
fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// The bare store loop: 64-byte slots of a 2 MiB ring, eight 8-byte stores
/// each, as many slots as one producer round posts WQEs.
struct StoreLoop {
    ring: Vec<[u64; 8]>,
    n: u64,
}

impl StoreLoop {
    const SLOTS: usize = 1 << 15;

    fn new() -> Self {
        let mut l = StoreLoop { ring: vec![[0u64; 8]; Self::SLOTS], n: 0 };
        l.pass();
        l
    }

    /// One pass through the ring: the thread's CPU ns per 64-byte store.
    fn pass(&mut self) -> f64 {
        let c = thread_cpu_ns();
        for _ in 0..Self::SLOTS {
            let slot = &mut self.ring[(self.n as usize) & (Self::SLOTS - 1)];
            for (i, w) in slot.iter_mut().enumerate() {
                // SAFETY: a valid, aligned &mut u64; volatile keeps the store.
                unsafe { std::ptr::write_volatile(w, self.n + i as u64) };
            }
            self.n += 1;
        }
        (thread_cpu_ns() - c).max(1) as f64 / Self::SLOTS as f64
    }
}

/// Writes every byte of a fresh ring once (it comes zeroed but not yet
/// paged in), so that posting into it does not take the page faults.
fn make_resident(mem: &QueueMem) {
    if let Some(addr) = mem.sq.host_addr() {
        // SAFETY: the ring is `len` bytes of host memory owned by `mem`, not
        // yet shared with any NIC or producer.
        unsafe { std::ptr::write_bytes(addr as *mut u8, 0, mem.sq.len()) };
    }
}

pub fn run(config: &Config, min: Duration) -> Result<Figures> {
    let fabric = Fabric::threads();
    let nic = EmuNic::new(&fabric, NicConfig { name: "datapath".into(), ..Default::default() }).map_err(err)?;
    let pd = nic.alloc_pd();
    let buf = HostMemory.alloc(1 << 16, 4096, Object::WindowData)?;
    // SAFETY: buf outlives the NIC's use of it (both dropped at the end).
    let mr = unsafe { nic.reg_mr(pd, buf.host_addr().unwrap_or(0), 1 << 16, Access::all()) }.map_err(err)?;
    let error = new_error_record(&HostMemory)?;
    let queue = |log: u32| -> Result<(EmuQp, SendQueue)> {
        let mem = QueueMem::new(&HostMemory, log, RingHome::Host)?;
        make_resident(&mem);
        let qp = EmuQp::create(&nic, pd, mem).map_err(err)?;
        qp.connect(nic.node(), qp.qpn).map_err(err)?;
        let sq = SendQueue::new(&HostMemory, &qp.descriptor(0, error.dev_addr(), 30_000_000_000))?;
        Ok((qp, sq))
    };
    let base = buf.dev_addr();
    let write = |i: u64, len: u32| rust_gin_mlx5_request {
        opcode: opcode::RDMA_WRITE,
        length: len,
        lkey: mr.lkey,
        rkey: mr.rkey,
        laddr: base + (i % 256) * 64,
        raddr: base + 16384 + (i % 256) * 64,
        ..Default::default()
    };
    let signal = rust_gin_mlx5_request {
        opcode: opcode::ATOMIC_FA,
        length: 8,
        lkey: mr.lkey,
        rkey: mr.rkey,
        laddr: base + 65528,
        raddr: base + 65520,
        operand0: 1,
        ..Default::default()
    };
    let mut f = Figures::default();

    // The producer alone, then the NIC alone on what it posted: rounds of
    // 500 batches of 64 8-byte WRITEs into a fresh 2^15 queue (never short
    // of credit), each drained by stepping the NIC on this thread. Each
    // round follows a pass of the store loop (after an untimed one, so its
    // ring is as warm as the producer's), and the share is taken round by
    // round: this machine's speed drifts by half within seconds, which a
    // ratio of figures taken seconds apart would report as the producer's.
    let batch: Vec<_> = (0..64).map(|i| write(i, 8)).collect();
    let mut stores = StoreLoop::new();
    let (mut store_ns, mut shares) = (vec![], vec![]);
    let (mut post_secs, mut post_cpu) = (0.0, vec![]);
    let (mut consumed, mut nic_secs, mut nic_cpu) = (0u64, 0.0, 0u64);
    while post_secs < min.as_secs_f64() || nic_secs < min.as_secs_f64() {
        // The store loop's passes first: the fresh queue's ring, written
        // just before the clock starts (make_resident), stays as warm for
        // the producer as the second pass finds the store loop's.
        stores.pass();
        let store = stores.pass();
        let (qp, sq) = queue(15)?;
        let st = |e| Error::Remote(format!("posting: {e:?} {:?}", sq.error()));
        let (c, t) = (thread_cpu_ns(), Instant::now());
        for _ in 0..500 {
            sq.post(&batch).map_err(st)?;
        }
        post_secs += t.elapsed().as_secs_f64();
        let post = (thread_cpu_ns() - c) as f64 / (500 * 64) as f64;
        post_cpu.push(post);
        store_ns.push(store);
        shares.push(store / post);
        let before = nic.counters();
        let (c, t) = (thread_cpu_ns(), Instant::now());
        while nic.counters().since(&before).writes < 500 * 64 {
            if !nic.step() && t.elapsed() > Duration::from_secs(30) {
                return Err(Error::Timeout("datapath: the NIC did not consume the queue".into()));
            }
        }
        while nic.step() {}
        nic_secs += t.elapsed().as_secs_f64();
        nic_cpu += thread_cpu_ns() - c;
        consumed += 500 * 64;
        // Dropped without a quiet: its completions were never consumed and
        // quiet would wait for a NIC that is not running.
        drop((sq, qp));
    }
    // Per second of the thread's own CPU time, the median round, as the
    // store loop: other jobs on these cores stretch wall time, and a round
    // they preempted (cold caches after) is an outlier, not the work.
    f.producer_rounds = post_cpu.len();
    f.producer_cpu_ns_per_wqe = median(post_cpu);
    f.store_loop_m_per_s = 1e3 / median(store_ns);
    f.producer_share = spread(shares);
    f.producer_mwqe_per_s = 1e3 / f.producer_cpu_ns_per_wqe;
    f.nic_mwqe_per_s = consumed as f64 / nic_secs / 1e6;
    f.nic_cpu_ns_per_wqe = nic_cpu as f64 / consumed as f64;

    // Both at once, and the NIC counters per batch.
    let (_qp, sq) = queue(10)?;
    let st = |e| Error::Remote(format!("posting: {e:?} {:?}", sq.error()));
    nic.start_polling();
    let c0 = nic.counters();
    let t = Instant::now();
    let mut batches = 0u64;
    while t.elapsed() < min {
        let reqs: Vec<_> = (0..64).map(|i| write(batches * 64 + i, 64)).collect();
        sq.post(&reqs).map_err(st)?;
        batches += 1;
    }
    sq.quiet().map_err(st)?;
    f.pipeline_mwqe_per_s = (batches * 64) as f64 / t.elapsed().as_secs_f64() / 1e6;
    let d = nic.counters().since(&c0);
    // Counted as the NIC read them; quiet may add one NOP at the very end.
    f.wqebbs_per_put = (d.wqebbs_read - d.nops) as f64 / (batches * 64) as f64;
    f.doorbells_per_batch64 = d.doorbells as f64 / batches as f64;
    f.cqes_per_batch64 = d.cqes_written as f64 / batches as f64;
    // Puts with a signal: a WRITE and a fetch-and-add each, 32 per batch of 64 requests.
    let c2 = nic.counters();
    for b in 0..200 {
        let reqs: Vec<_> = (0..32).flat_map(|i| [write(b * 32 + i, 64), signal]).collect();
        sq.post(&reqs).map_err(st)?;
    }
    sq.quiet().map_err(st)?;
    let d = nic.counters().since(&c2);
    f.wqebbs_per_put_signal = (d.wqebbs_read - d.nops) as f64 / (200 * 32) as f64;
    nic.stop_polling();
    put_posting(config, min, &mut f)?;
    Ok(f)
}

/// Puts per timed round of `put_posting`, and rounds per world: together
/// fewer WQEBBs than one 2^15 queue holds, so no round waits for credit.
const ROUND_PUTS: u64 = 1024;
const ROUNDS_PER_WORLD: usize = 12;

/// The posting time of an 8-byte put with a counter against a plain put:
/// rank 0 of a 2-rank world posts rounds of ROUND_PUTS puts to rank 1,
/// plain and counted rounds alternating, timed on the posting thread's CPU
/// clock. The NIC runs in proxy-progress mode, so nothing but the poster
/// runs while a round is timed; between rounds a helper thread steps both
/// NICs while the poster flushes and reads the counter (every round is
/// complete and credited before the next starts).
fn put_posting(config: &Config, min: Duration, f: &mut Figures) -> Result<()> {
    let mut cfg = config.clone();
    cfg.emu_progress = EmuProgress::Proxy;
    let settings = Settings {
        n_signals: 1,
        n_counters: 1,
        n_contexts: 1,
        log_depth: 15,
        traffic_class: 0,
        backend_version: 0,
        rank_stride: 1,
    };
    let no_signal = rust_gin_signal {
        type_: RUST_GIN_SIGNAL_NONE,
        op: 0,
        value: 0,
        id: 0,
        window: std::ptr::null(),
        offset: 0,
    };
    let mut per_put: [Vec<f64>; 2] = [vec![], vec![]];
    let mut ratios = vec![];
    let t = Instant::now();
    while t.elapsed() < min || ratios.is_empty() {
        let world = world::build(&cfg, 2, settings, 1 << 16, &[])?;
        let r = &world[0];
        let (h, src, dst) = (r.handle(), r.src.gin_handle() as *const _, r.dst.gin_handle() as *const _);
        let fail = |what: &str, code: i32| {
            let detail = r.ctx.last_error().map(|(e, _)| e.to_string()).unwrap_or_default();
            Error::Remote(format!("put posting: {what}: {:?} {detail}", DeviceStatus::check(code)))
        };
        let mut counted_total = 0u64;
        let mut last_plain = 1.0;
        for round in 0..ROUNDS_PER_WORLD {
            let counted = round % 2 == 1;
            let c0 = thread_cpu_ns();
            for i in 0..ROUND_PUTS {
                let off = (i % 1024) * 8;
                // SAFETY: the handle and windows live as long as `world`.
                let code = unsafe { device::rust_gin_put(h, 0, 1, dst, off, src, off, 8, no_signal, counted as u32, 0, 0) };
                if code != 0 {
                    return Err(fail("put", code));
                }
            }
            let ns = (thread_cpu_ns() - c0) as f64 / ROUND_PUTS as f64;
            per_put[counted as usize].push(ns);
            if counted {
                ratios.push(ns / last_plain);
                counted_total += ROUND_PUTS;
            } else {
                last_plain = ns;
            }
            // Untimed: complete and credit everything before the next round.
            let stop = AtomicBool::new(false);
            std::thread::scope(|s| -> Result<()> {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        for w in &world {
                            w.ctx.progress();
                        }
                        std::thread::yield_now();
                    }
                });
                let res = (|| {
                    // SAFETY: as above.
                    let code = unsafe { device::rust_gin_flush(h, 0, 0, 1, std::ptr::null(), 0) };
                    if code != 0 {
                        return Err(fail("flush", code));
                    }
                    // SAFETY: as above.
                    let n = unsafe { device::rust_gin_counter_read(h, 0, 0) };
                    if n != counted_total {
                        return Err(Error::Remote(format!("put posting: counter reads {n}, {counted_total} counted puts completed")));
                    }
                    Ok(())
                })();
                stop.store(true, Ordering::Relaxed);
                res
            })?;
        }
    }
    let [plain, counted] = per_put;
    f.put_cpu_ns = median(plain);
    f.counted_put_cpu_ns = median(counted);
    f.counted_ratio = spread(ratios);
    Ok(())
}
