//! gin-perf's measurements: latency (signal ping-pong), bandwidth and message
//! rate for put, put+signal, signal and get, on the device-initiated path and
//! on a model of RCCL's proxy path, with the emulated NIC's counters and the
//! host CPU each path spends per operation.

pub mod chart;
pub mod datapath;
pub mod direct;
pub mod gfd;
pub mod proxy;
pub mod report;
pub mod world;

use rccl_rust_gin::provider::CounterSnapshot;
use rccl_rust_gin::error::Result;
use std::time::Instant;

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

/// One way of getting operations from a requester to the NIC.
pub trait Path: Send + Sync {
    fn name(&self) -> &'static str;
    /// Posts one operation from `lane` of rank `from` to rank `to`, moving
    /// `bytes` at byte offset `off` of the source and destination windows.
    fn post(&self, from: usize, lane: usize, to: usize, op: Op, off: u64, bytes: u64) -> Result<()>;
    /// Waits until everything `from` posted (on `lane`) has completed.
    fn flush(&self, from: usize, lane: usize) -> Result<()>;
    /// Waits until rank `rank`'s signal 0 reached `least`.
    fn wait_signal(&self, rank: usize, least: u64) -> Result<()>;
    fn signal_value(&self, rank: usize) -> u64;
    /// The emulated NIC counters of rank `rank`.
    fn counters(&self, rank: usize) -> Option<CounterSnapshot>;
    /// Host CPU the path's proxy threads have spent so far (0 for the direct path).
    fn proxy_cpu_ns(&self) -> u64;
}

/// What one (path, op, size) measurement found.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub path: String,
    pub op: String,
    pub bytes: u64,
    pub lanes: usize,
    pub iters: usize,
    /// Ping-pong round trip, microseconds.
    pub rtt_median_us: f64,
    pub rtt_p99_us: f64,
    pub bandwidth_gbs: f64,
    pub mops: f64,
    pub wqebbs_per_op: f64,
    pub doorbells_per_op: f64,
    pub cqes_per_op: f64,
    /// CPU of the requesting threads (on hardware: GPU time) per operation, ns.
    pub requester_cpu_ns_per_op: f64,
    /// Host CPU of the proxy threads per operation, ns.
    pub proxy_cpu_ns_per_op: f64,
}

#[derive(Clone, Debug)]
pub struct Params {
    pub sizes: Vec<u64>,
    pub iters: usize,
    pub warmup: usize,
    pub ops: Vec<Op>,
    pub lanes: usize,
}

/// CPU time of the calling thread, ns.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime fills the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Round trips between ranks 0 and 1: rank 0 sends `op`, rank 1 answers in
/// kind once it sees the signal (a put or get without signal is timed to
/// its completion instead).
fn latency(path: &dyn Path, op: Op, bytes: u64, iters: usize, warmup: usize) -> Result<(f64, f64)> {
    let total = warmup + iters;
    let mut rtts = Vec::with_capacity(iters);
    match op {
        Op::PutSignal | Op::Signal => {
            let base0 = path.signal_value(0);
            let base1 = path.signal_value(1);
            std::thread::scope(|s| -> Result<()> {
                let pong = s.spawn(|| -> Result<()> {
                    for k in 1..=total as u64 {
                        path.wait_signal(1, base1 + k)?;
                        path.post(1, 0, 0, op, 0, bytes)?;
                    }
                    Ok(())
                });
                let mut res = Ok(());
                for k in 1..=total as u64 {
                    let t = Instant::now();
                    if let Err(e) = path.post(0, 0, 1, op, 0, bytes).and_then(|_| path.wait_signal(0, base0 + k)) {
                        res = Err(e);
                        break;
                    }
                    if k as usize > warmup {
                        rtts.push(t.elapsed().as_secs_f64() * 1e6);
                    }
                }
                let p = pong.join().unwrap_or_else(|_| Err(rccl_rust_gin::error::Error::Internal("pong thread panicked".into())));
                res.and(p)
            })?;
        }
        Op::Put | Op::Get => {
            for k in 0..total {
                let t = Instant::now();
                path.post(0, 0, 1, op, 0, bytes)?;
                path.flush(0, 0)?;
                if k >= warmup {
                    rtts.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
        }
    }
    rtts.sort_by(|a, b| a.total_cmp(b));
    Ok((percentile(&rtts, 0.5), percentile(&rtts, 0.99)))
}

/// Streams `iters` operations per lane from rank 0 to rank 1, then flushes.
fn stream(path: &dyn Path, op: Op, bytes: u64, iters: usize, lanes: usize) -> Result<Sample> {
    let before = path.counters(0);
    let proxy_before = path.proxy_cpu_ns();
    let t = Instant::now();
    let cpu: u64 = std::thread::scope(|s| -> Result<u64> {
        let joins: Vec<_> = (0..lanes)
            .map(|lane| {
                s.spawn(move || -> Result<u64> {
                    let c0 = thread_cpu_ns();
                    for _ in 0..iters {
                        path.post(0, lane, 1, op, 0, bytes)?;
                    }
                    path.flush(0, lane)?;
                    Ok(thread_cpu_ns() - c0)
                })
            })
            .collect();
        let mut sum = 0;
        for j in joins {
            sum += j.join().unwrap_or_else(|_| Err(rccl_rust_gin::error::Error::Internal("lane panicked".into())))?;
        }
        Ok(sum)
    })?;
    let secs = t.elapsed().as_secs_f64();
    let ops = (iters * lanes) as f64;
    let mut s = Sample {
        bandwidth_gbs: if op.moves_data() { bytes as f64 * ops / secs / 1e9 } else { 0.0 },
        mops: ops / secs / 1e6,
        requester_cpu_ns_per_op: cpu as f64 / ops,
        proxy_cpu_ns_per_op: (path.proxy_cpu_ns() - proxy_before) as f64 / ops,
        ..Default::default()
    };
    if let (Some(b), Some(a)) = (before, path.counters(0)) {
        let d = a.since(&b);
        s.wqebbs_per_op = d.wqebbs_read as f64 / ops;
        s.doorbells_per_op = d.doorbells as f64 / ops;
        s.cqes_per_op = d.cqes_written as f64 / ops;
    }
    Ok(s)
}

/// Every (op, size) for one path.
pub fn measure(path: &dyn Path, p: &Params, mut progress: impl FnMut(&Sample)) -> Result<Vec<Sample>> {
    let mut out = Vec::new();
    for &op in &p.ops {
        let sizes: Vec<u64> = if op.moves_data() { p.sizes.clone() } else { vec![0] };
        for &bytes in &sizes {
            // Fewer iterations for large messages keep every point quick.
            let iters = (p.iters as u64 * 4096 / bytes.max(4096)).max(8) as usize;
            let (med, p99) = latency(path, op, bytes, iters.min(p.iters), p.warmup.min(iters))?;
            let mut s = stream(path, op, bytes, iters, p.lanes)?;
            s.path = path.name().into();
            s.op = op.name().into();
            s.bytes = bytes;
            s.lanes = p.lanes;
            s.iters = iters;
            s.rtt_median_us = med;
            s.rtt_p99_us = p99;
            progress(&s);
            out.push(s);
        }
    }
    Ok(out)
}
