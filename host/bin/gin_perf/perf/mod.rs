//! gin-perf's measurements: round-trip latency (signal ping-pong), message
//! rate and bandwidth (separate runs) for put, put+signal, signal and get,
//! on the device-initiated path and on a model of RCCL's proxy path, with
//! the emulated NIC's counters and the CPU each party spends per operation.
//!
//! Every timed run lasts at least `min_time` (a pilot run sizes it), the
//! whole sweep is repeated `repeats` times with both paths measured in each
//! repeat, and figures and direct/proxy ratios are medians over the repeats
//! with their range (stats.rs).

pub mod chart;
pub mod cpu;
pub mod datapath;
pub mod direct;
pub mod ep;
pub mod gfd;
pub mod proxy;
pub mod report;
pub mod stats;
pub mod world;

use rccl_rust_gin::error::{Error, Result};
use rccl_rust_gin::nic::CounterSnapshot;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use cpu::thread_cpu_ns;
pub use stats::Run;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Put,
    PutSignal,
    Signal,
    Get,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::PutSignal => "put+signal",
            Op::Signal => "signal",
            Op::Get => "get",
        }
    }
    pub fn moves_data(self) -> bool {
        self != Op::Signal
    }
}

/// How rank 0's lanes reach the NIC in the message-rate runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaneMode {
    /// One OS thread per lane; on the direct path each lane has its own
    /// context, hence its own send queue per peer.
    Queues,
    /// The lanes are one lockstep wave (the device library's CPU wave
    /// runtime, fibers of one thread) posting to one queue: the device code
    /// takes one ticket and rings one doorbell per wave-wide post. With
    /// `waves` > 1, that many waves (one thread each) share the queue, as
    /// the blocks of a kernel on one context do.
    Wave,
}

impl LaneMode {
    pub fn name(self) -> &'static str {
        match self {
            LaneMode::Queues => "queues",
            LaneMode::Wave => "wave",
        }
    }
}

/// One way of getting operations from a requester to the NIC.
pub trait Path: Send + Sync {
    fn name(&self) -> &'static str;
    /// Posts one operation from `lane` of rank `from` to rank `to`, moving
    /// `bytes` at byte offset `off` of the source and destination windows.
    fn post(&self, from: usize, lane: usize, to: usize, op: Op, off: u64, bytes: u64) -> Result<()>;
    /// Waits until everything `lane` of `from` posted has completed.
    fn flush(&self, from: usize, lane: usize) -> Result<()>;
    /// As `flush`, called by each of `lanes` lanes at once (in a wave, the
    /// lanes share one flush).
    fn flush_lanes(&self, from: usize, lane: usize, lanes: usize) -> Result<()> {
        let _ = lanes;
        self.flush(from, lane)
    }
    /// Waits until rank `rank`'s signal 0 (of context 0) reached `least`.
    fn wait_signal(&self, rank: usize, least: u64) -> Result<()>;
    fn signal_value(&self, rank: usize) -> u64;
    /// The emulated NIC counters of rank `rank`.
    fn counters(&self, rank: usize) -> Option<CounterSnapshot>;
}

#[derive(Clone, Debug)]
pub struct Params {
    pub sizes: Vec<u64>,
    pub ops: Vec<Op>,
    pub lanes: usize,
    pub lane_mode: LaneMode,
    /// Waves of `lanes` lanes each in `LaneMode::Wave` (1 in `Queues`).
    pub waves: usize,
    /// Least duration of every timed run.
    pub min_time: Duration,
    /// Warm-up round trips before the timed ones.
    pub warmup: usize,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Round trips between ranks 0 and 1 for at least `min_time`: rank 0 sends
/// `op`, rank 1 answers in kind once it sees the signal (a put or get
/// without signal is timed to its completion instead). Returns the median,
/// p99 and the timed seconds.
fn latency(path: &dyn Path, op: Op, bytes: u64, min_time: Duration, warmup: usize) -> Result<(f64, f64, f64)> {
    let mut rtts = Vec::new();
    let mut timed = Duration::ZERO;
    // Enough round trips for a p99 even when each one is slow.
    let enough = |n: usize, t: Duration| t >= min_time && n >= 100;
    match op {
        Op::PutSignal | Op::Signal => {
            let base0 = path.signal_value(0);
            let base1 = path.signal_value(1);
            // The last round trip's number, set by rank 0 before it posts
            // that one, so that rank 1 answers it and stops.
            let last = AtomicU64::new(u64::MAX);
            std::thread::scope(|s| -> Result<()> {
                let pong = s.spawn(|| -> Result<()> {
                    for k in 1.. {
                        path.wait_signal(1, base1 + k)?;
                        path.post(1, 0, 0, op, 0, bytes)?;
                        if k >= last.load(Ordering::SeqCst) {
                            return Ok(());
                        }
                    }
                    Ok(())
                });
                let mut res = Ok(());
                for k in 1u64.. {
                    if k as usize > warmup && enough(rtts.len() + 1, timed) {
                        last.store(k, Ordering::SeqCst);
                    }
                    let t = Instant::now();
                    if let Err(e) = path.post(0, 0, 1, op, 0, bytes).and_then(|_| path.wait_signal(0, base0 + k)) {
                        res = Err(e);
                        break;
                    }
                    if k as usize > warmup {
                        let d = t.elapsed();
                        timed += d;
                        rtts.push(d.as_secs_f64() * 1e6);
                    }
                    if k == last.load(Ordering::SeqCst) {
                        break;
                    }
                }
                let p = pong.join().unwrap_or_else(|_| Err(Error::Internal("pong thread panicked".into())));
                res.and(p)
            })?;
        }
        Op::Put | Op::Get => {
            for k in 0.. {
                let t = Instant::now();
                path.post(0, 0, 1, op, 0, bytes)?;
                path.flush(0, 0)?;
                if k >= warmup {
                    let d = t.elapsed();
                    timed += d;
                    rtts.push(d.as_secs_f64() * 1e6);
                    if enough(rtts.len(), timed) {
                        break;
                    }
                }
            }
        }
    }
    rtts.sort_by(|a, b| a.total_cmp(b));
    Ok((percentile(&rtts, 0.5), percentile(&rtts, 0.99), timed.as_secs_f64()))
}

/// Runs `n` operations on each of `lanes` lanes (of each of `waves` waves in
/// `Wave` mode) of rank 0 (to rank 1), then flushes; returns the seconds and
/// the requesters' CPU.
fn lanes_run(
    path: &dyn Path,
    op: Op,
    bytes: u64,
    n: usize,
    lanes: usize,
    waves: usize,
    mode: LaneMode,
) -> Result<(f64, u64)> {
    let lane_body = |lane: usize| -> Result<()> {
        for _ in 0..n {
            path.post(0, lane, 1, op, 0, bytes)?;
        }
        path.flush_lanes(0, lane, lanes)
    };
    match mode {
        LaneMode::Queues => {
            let t = Instant::now();
            let cpu = std::thread::scope(|s| -> Result<u64> {
                let joins: Vec<_> = (0..lanes)
                    .map(|lane| {
                        s.spawn(move || -> Result<u64> {
                            let c0 = thread_cpu_ns();
                            lane_body(lane)?;
                            Ok(thread_cpu_ns() - c0)
                        })
                    })
                    .collect();
                let mut sum = 0;
                for j in joins {
                    sum += j.join().unwrap_or_else(|_| Err(Error::Internal("lane panicked".into())))?;
                }
                Ok(sum)
            })?;
            Ok((t.elapsed().as_secs_f64(), cpu))
        }
        LaneMode::Wave => {
            let first_error = Mutex::new(None);
            let t = Instant::now();
            // One thread per wave; a wave's lanes are wave-local (the
            // lanes of each wave share the flush among themselves).
            let (cpu, model_errors) = std::thread::scope(|s| {
                let joins: Vec<_> = (0..waves.max(1))
                    .map(|_| {
                        let (first_error, lane_body) = (&first_error, &lane_body);
                        s.spawn(move || {
                            let lane = |l: u32| {
                                if let Err(e) = lane_body(l as usize) {
                                    first_error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
                                }
                            };
                            let c0 = thread_cpu_ns();
                            let errors = wave(lanes, &lane);
                            (thread_cpu_ns() - c0, errors)
                        })
                    })
                    .collect();
                // A wave thread that panicked counts as a model error.
                joins.into_iter().map(|j| j.join().unwrap_or((0, 1))).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
            });
            let secs = t.elapsed().as_secs_f64();
            if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
                return Err(e);
            }
            if model_errors != 0 {
                return Err(Error::Internal(format!("the wave runtime reported {model_errors} model errors")));
            }
            Ok((secs, cpu))
        }
    }
}

/// Runs `lane(l)` for lanes 0..lanes as one lockstep wave on this thread;
/// returns the runtime's count of model errors.
pub(crate) fn wave(lanes: usize, lane: &dyn Fn(u32)) -> u64 {
    extern "C" fn trampoline(ctx: *mut std::ffi::c_void, l: u32) {
        // SAFETY: ctx is the `&dyn Fn` below, alive for the whole run.
        let f = unsafe { &*(ctx as *const &dyn Fn(u32)) };
        // A panic must not unwind into C.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(l))).is_err() {
            std::process::abort();
        }
    }
    let exec = if lanes >= 64 { u64::MAX } else { (1u64 << lanes) - 1 };
    let mut stats = rccl_rust_gin::abi::rust_gin_ls_stats::default();
    // SAFETY: the trampoline and its context outlive the call, which
    // returns when every lane has returned; no message buffer is passed.
    unsafe {
        rccl_rust_gin::device::rust_gin_lockstep_run(
            exec,
            Some(trampoline),
            &lane as *const &dyn Fn(u32) as *mut std::ffi::c_void,
            &mut stats,
            std::ptr::null_mut(),
            0,
        )
    }
}

/// Runs `f(n)` with growing `n` until one run lasts `min_time`; the shorter
/// runs before it are the warm-up. Returns that run's `n` and result. The
/// first run is always a warm-up: when it alone lasts `min_time` (a cold
/// start on a loaded machine: fresh rings, threads, page faults), it runs
/// again with the same `n`.
fn sized<T>(min_time: Duration, mut f: impl FnMut(usize) -> Result<(f64, T)>) -> Result<(usize, f64, T)> {
    let min = min_time.as_secs_f64();
    let mut n = 16usize;
    let mut warm = false;
    loop {
        let (secs, t) = f(n)?;
        if secs >= min {
            if !warm {
                warm = true;
                continue;
            }
            return Ok((n, secs, t));
        }
        warm = true;
        // Aim 20% past the goal; grow at most 16x per step while tiny runs
        // are dominated by fixed costs.
        let want = (n as f64 * 1.2 * min / secs.max(1e-9)).ceil() as usize;
        n = want.clamp(n + 1, n * 16);
    }
}

/// Message rate with the CPU split and NIC counters.
fn rate(path: &dyn Path, nic_tids: &[i32], op: Op, bytes: u64, p: &Params, run: &mut Run) -> Result<()> {
    let mut measured = None;
    let (n, secs, _) = sized(p.min_time, |n| {
        let before = path.counters(0);
        let mark = cpu::Mark::now(nic_tids);
        let (secs, req) = lanes_run(path, op, bytes, n, p.lanes, p.waves, p.lane_mode)?;
        let split = mark.split(req);
        measured = Some((split, before, path.counters(0)));
        Ok((secs, ()))
    })?;
    let ops = (n * p.lanes * p.waves.max(1)) as f64;
    run.rate_secs = secs;
    run.mops = ops / secs / 1e6;
    if let Some((split, before, after)) = measured {
        run.requester_cpu_ns = split.requester as f64 / ops;
        run.nic_cpu_ns = split.nic as f64 / ops;
        run.host_cpu_ns = split.host as f64 / ops;
        run.sys_cpu_ns = split.sys as f64 / ops;
        if let (Some(b), Some(a)) = (before, after) {
            let d = a.since(&b);
            run.wqebbs_per_op = d.wqebbs_read as f64 / ops;
            run.doorbells_per_op = d.doorbells as f64 / ops;
            run.cqes_per_op = d.cqes_written as f64 / ops;
        }
    }
    Ok(())
}

/// Bandwidth: one lane streams `n` operations and the clock stops when the
/// data is where it goes: put+signal when rank 1 has seen the last signal,
/// put and get at the flush.
fn bandwidth(path: &dyn Path, op: Op, bytes: u64, p: &Params, run: &mut Run) -> Result<()> {
    let (n, secs, _) = sized(p.min_time, |n| {
        let base = path.signal_value(1);
        let t = Instant::now();
        for _ in 0..n {
            path.post(0, 0, 1, op, 0, bytes)?;
        }
        if op == Op::PutSignal {
            path.wait_signal(1, base + n as u64)?;
        } else {
            path.flush(0, 0)?;
        }
        let secs = t.elapsed().as_secs_f64();
        path.flush(0, 0)?;
        Ok((secs, ()))
    })?;
    run.bw_secs = secs;
    run.bandwidth_gbs = bytes as f64 * n as f64 / secs / 1e9;
    Ok(())
}

/// The (op, size) points of a sweep, in order; `signal` has one, of 0 bytes.
pub fn points(p: &Params) -> Vec<(Op, u64)> {
    p.ops
        .iter()
        .flat_map(|&op| {
            let sizes: Vec<u64> = if op.moves_data() { p.sizes.clone() } else { vec![0] };
            sizes.into_iter().map(move |b| (op, b))
        })
        .collect()
}

/// One (op, size) on one path, once; `nic_tids` are the threads of the
/// emulated NICs this path uses.
pub fn measure(path: &dyn Path, nic_tids: &[i32], p: &Params, op: Op, bytes: u64, repeat: usize) -> Result<Run> {
    let mut run = Run { path: path.name().into(), op: op.name().into(), bytes, repeat, ..Default::default() };
    let ticks = cpu::machine_ticks();
    (run.rtt_median_us, run.rtt_p99_us, run.rtt_secs) = latency(path, op, bytes, p.min_time, p.warmup)?;
    rate(path, nic_tids, op, bytes, p, &mut run)?;
    if op.moves_data() {
        bandwidth(path, op, bytes, p, &mut run)?;
    }
    run.steal_pct = cpu::steal_pct(ticks, cpu::machine_ticks());
    Ok(run)
}
