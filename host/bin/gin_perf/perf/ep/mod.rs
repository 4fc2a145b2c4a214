//! The expert-parallel workload (issue 28): dispatch and combine of
//! mixture-of-experts tokens over N ranks, as DeepEP drives GIN, on the
//! direct path and on the proxy model, on the emulated NIC.
//!
//! - Low-latency mode: one put per token copy straight into its slot at the
//!   receiver, then one signal per (sender, receiver) pair adding the count
//!   plus one (so a pair with no token still signals); the receiver waits on
//!   all its N signals and checks each count.
//! - High-throughput mode: the copies packed per receiver (once, at setup:
//!   a GPU copy kernel's work, not the network's), sent as puts of up to
//!   `chunk` tokens, each carrying a signal adding its token count (the last
//!   one plus one; an empty pair sends the signal alone).
//! - Combine sends every received token back to its sender (the expert's
//!   output; the identity here) into the sender's combine region, the same
//!   way, on signals N..2N.
//!
//! Ranks are threads of this process; `threads` driver threads stand in for
//! the GPUs (thread t posts and waits for ranks t, t + threads, ...: all its
//! ranks' posts first, then their waits), so that 64 ranks run on 2 cores
//! without 64 spinning requesters. Each iteration starts on a barrier of the
//! drivers; its time runs from the first driver's start to the last one's
//! end. Receivers check the stamp (first 8 bytes) of every token copy every
//! iteration and every byte in the last one.

pub mod fabric;
pub mod report;
pub mod routing;

use crate::perf::cpu::{self, thread_cpu_ns};
use fabric::{Fabric, Win};
use rccl_rust_gin::error::{Error, Result};
use routing::{pattern, stamp, Plan};
use std::sync::{Barrier, Mutex};
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    LowLatency,
    HighThroughput,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::LowLatency => "ll",
            Mode::HighThroughput => "ht",
        }
    }
}

/// What is timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Dispatch,
    Combine,
    /// Dispatch then combine, timed together (and each on its own).
    RoundTrip,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Dispatch => "dispatch",
            Phase::Combine => "combine",
            Phase::RoundTrip => "round trip",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Params {
    pub mode: Mode,
    pub phase: Phase,
    /// Bytes per token (hidden size x 2 for bf16).
    pub token_bytes: usize,
    /// Tokens per high-throughput put.
    pub chunk: usize,
    pub iters: usize,
    pub warmup: usize,
    pub threads: usize,
    /// Testing only (--ep-fault-drop): rank 0 leaves out its first token
    /// put of the last dispatch, which the receiver's check must catch.
    pub fault_drop: bool,
}

/// One measurement: one path, one point, one repeat.
#[derive(Clone, Debug, Default)]
pub struct EpRun {
    pub path: String,
    pub ranks: usize,
    pub tokens: usize,
    pub repeat: usize,
    /// Per iteration of the timed phase, microseconds: median and p99 over
    /// the timed iterations; for a round trip also each half's median.
    pub median_us: f64,
    pub p99_us: f64,
    pub dispatch_us: f64,
    pub combine_us: f64,
    /// Puts plus signals (descriptors on the proxy path) per iteration, and
    /// payload bytes per iteration.
    pub messages: f64,
    pub bytes: f64,
    /// NIC counters per iteration, all ranks together.
    pub doorbells: f64,
    pub cqes: f64,
    pub wqebbs: f64,
    /// CPU per iteration, microseconds: the driver threads (the GPUs' part),
    /// the emulated NICs' threads, every other thread (proxy threads, main)
    /// and the kernel's share of all.
    pub req_cpu_us: f64,
    pub nic_cpu_us: f64,
    pub host_cpu_us: f64,
    pub sys_cpu_us: f64,
    /// Token copies checked at the receivers (stamps, all iterations) and
    /// bytes compared in full (the last iteration).
    pub copies_checked: u64,
    pub bytes_checked: u64,
    /// Posts per iteration that found their queue full (proxy: a peer's
    /// GFD queue of 32) and waited for it to drain.
    pub full_waits: f64,
    pub steal_pct: f64,
}

impl EpRun {
    pub fn mmsg_per_s(&self) -> f64 {
        if self.median_us > 0.0 { self.messages / self.median_us } else { 0.0 }
    }
    pub fn gb_per_s(&self) -> f64 {
        if self.median_us > 0.0 { self.bytes / self.median_us / 1e3 } else { 0.0 }
    }
}

/// Window sizes a plan needs: (source, destination) bytes per rank.
pub fn window_bytes(plan: &Plan, p: &Params) -> (usize, usize) {
    let h = p.token_bytes;
    let src = plan.tokens * h + if p.mode == Mode::HighThroughput { plan.comb_slots * h } else { 0 };
    ((src).max(4096), ((plan.recv_slots + plan.comb_slots) * h).max(4096))
}

/// Signals a rank needs: one per sender for dispatch, one per combiner.
pub fn signals(ranks: usize) -> usize {
    2 * ranks
}

/// Messages (puts + signals) and payload bytes of one dispatch; a combine
/// moves the same.
pub fn traffic(plan: &Plan, p: &Params) -> (usize, usize) {
    let bytes = plan.copies() * p.token_bytes;
    let msgs = match p.mode {
        Mode::LowLatency => plan.copies() + plan.ranks * plan.ranks,
        Mode::HighThroughput => plan.chunked_puts(p.chunk) + plan.empty_pairs(),
    };
    (msgs, bytes)
}

/// The payload of every token of rank `rank` (bytes 8.. of each), written
/// once; the stamps are written each iteration.
fn fill(f: &dyn Fabric, plan: &Plan, p: &Params, rank: usize) {
    let (src, _) = f.host(rank);
    let h = p.token_bytes;
    for t in 0..plan.tokens {
        // SAFETY: token t lies in the source window (window_bytes), host memory this process owns.
        let tok = unsafe { std::slice::from_raw_parts_mut((src + t * h) as *mut u8, h) };
        for (i, b) in tok.iter_mut().enumerate().skip(8) {
            *b = pattern(rank, t as u32, i);
        }
    }
    if p.mode == Mode::HighThroughput {
        for q in 0..plan.ranks {
            for (j, &t) in plan.sends[rank][q].iter().enumerate() {
                let slot = plan.tokens + plan.comb_off[rank][q] + j;
                // SAFETY: the packed region follows the tokens in the source window.
                unsafe { std::ptr::copy_nonoverlapping((src + t as usize * h) as *const u8, (src + slot * h) as *mut u8, h) };
            }
        }
    }
}

fn write_u64(addr: usize, v: u64) {
    // SAFETY: callers pass 8-aligned addresses inside a window's host memory.
    unsafe { std::ptr::write_volatile(addr as *mut u64, v) }
}

fn read_u64(addr: usize) -> u64 {
    // SAFETY: as write_u64.
    unsafe { std::ptr::read_volatile(addr as *const u64) }
}

/// Stamps rank `rank`'s tokens (and their packed copies) for iteration `k`.
fn stamp_tokens(f: &dyn Fabric, plan: &Plan, p: &Params, rank: usize, k: u64) {
    let (src, _) = f.host(rank);
    let h = p.token_bytes;
    for t in 0..plan.tokens {
        write_u64(src + t * h, stamp(k, rank, t as u32));
    }
    if p.mode == Mode::HighThroughput {
        for q in 0..plan.ranks {
            for (j, &t) in plan.sends[rank][q].iter().enumerate() {
                write_u64(src + (plan.tokens + plan.comb_off[rank][q] + j) * h, stamp(k, rank, t));
            }
        }
    }
}

/// Posts rank `r`'s dispatch (or, with `combine`, its combine: what it
/// received, back to each sender).
fn post(f: &dyn Fabric, plan: &Plan, p: &Params, r: usize, combine: bool, drop_one: bool) -> Result<()> {
    let mut drop_one = drop_one && r == 0 && !combine;
    let n = plan.ranks;
    let h = p.token_bytes as u64;
    // Peers from r + 1 on, so that the ranks do not all start on rank 0.
    for i in 1..=n {
        let q = (r + i) % n;
        // Dispatch: r's tokens for q. Combine: what q sent r, back to q.
        let count = if combine { plan.sends[q][r].len() } else { plan.sends[r][q].len() };
        let id = if combine { (n + r) as u32 } else { r as u32 };
        // Where the j-th token comes from here and lands there.
        let src_slot = |j: usize| -> (Win, u64) {
            if combine {
                (Win::Dst, (plan.recv_off[r][q] + j) as u64 * h)
            } else if p.mode == Mode::HighThroughput {
                (Win::Src, (plan.tokens + plan.comb_off[r][q] + j) as u64 * h)
            } else {
                (Win::Src, plan.sends[r][q][j] as u64 * h)
            }
        };
        let dst_slot = |j: usize| -> u64 {
            if combine {
                (plan.recv_slots + plan.comb_off[q][r] + j) as u64 * h
            } else {
                (plan.recv_off[q][r] + j) as u64 * h
            }
        };
        match p.mode {
            Mode::LowLatency => {
                let items: Vec<(Win, u64, u64, u64)> = (0..count)
                    .filter(|_| !std::mem::take(&mut drop_one))
                    .map(|j| {
                        let (w, off) = src_slot(j);
                        (w, off, dst_slot(j), h)
                    })
                    .collect();
                f.put_many(r, q, &items)?;
                f.signal(r, q, id, count as u64 + 1)?;
            }
            Mode::HighThroughput => {
                if count == 0 {
                    f.signal(r, q, id, 1)?;
                }
                let mut j = 0;
                while j < count {
                    let c = p.chunk.min(count - j);
                    let last = j + c == count;
                    let (w, off) = src_slot(j);
                    // The fault leaves the chunk's first token out, signal and all.
                    let skip = std::mem::take(&mut drop_one) as u64;
                    f.put(r, q, w, off + skip * h, dst_slot(j) + skip * h, (c as u64 - skip) * h, Some((id, c as u64 + last as u64)))?;
                    j += c;
                }
            }
        }
    }
    Ok(())
}

/// Waits for rank `r`'s N signals of a dispatch (or combine) and checks
/// that each added the count routing says, plus one. `prev` holds the
/// signals' values before.
fn wait(f: &dyn Fabric, plan: &Plan, r: usize, combine: bool, prev: &mut [u64]) -> Result<()> {
    let n = plan.ranks;
    for s in 0..n {
        let id = if combine { n + s } else { s };
        let count = if combine { plan.sends[r][s].len() } else { plan.sends[s][r].len() };
        let v = f.wait_signal(r, id as u32, prev[id] + count as u64 + 1)?;
        if v != prev[id] + count as u64 + 1 {
            return Err(Error::Remote(format!(
                "rank {r}: signal {id} from rank {s} added {}, routing says {} tokens (+1)",
                v.wrapping_sub(prev[id]),
                count
            )));
        }
        prev[id] = v;
    }
    Ok(())
}

/// Checks what rank `r` received: every copy's stamp for iteration `k`, and
/// with `full` every byte. Returns (copies, bytes compared in full).
fn verify(f: &dyn Fabric, plan: &Plan, p: &Params, r: usize, combine: bool, k: u64, full: bool) -> Result<(u64, u64)> {
    let (_, dst) = f.host(r);
    let h = p.token_bytes;
    let (mut copies, mut bytes) = (0, 0);
    for s in 0..plan.ranks {
        // Dispatch: s's tokens for r. Combine: r's own tokens, back from s.
        let (origin, list, base) = if combine {
            (r, &plan.sends[r][s], plan.recv_slots + plan.comb_off[r][s])
        } else {
            (s, &plan.sends[s][r], plan.recv_off[r][s])
        };
        for (j, &t) in list.iter().enumerate() {
            let a = dst + (base + j) * h;
            let got = read_u64(a);
            if got != stamp(k, origin, t) {
                return Err(Error::Remote(format!(
                    "{} at rank {r}: slot {} holds {got:#x}, want token {t} of rank {origin}, iteration {k} ({:#x})",
                    if combine { "combine" } else { "dispatch" },
                    base + j,
                    stamp(k, origin, t)
                )));
            }
            if full {
                // SAFETY: the slot lies in r's destination window.
                let tok = unsafe { std::slice::from_raw_parts(a as *const u8, h) };
                if let Some(i) = (8..h).find(|&i| tok[i] != pattern(origin, t, i)) {
                    return Err(Error::Remote(format!("rank {r}: byte {i} of token {t} of rank {origin} is {:#x}, want {:#x}", tok[i], pattern(origin, t, i))));
                }
                bytes += h as u64;
            }
            copies += 1;
        }
    }
    Ok((copies, bytes))
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[(((sorted.len() - 1) as f64) * q).round() as usize]
}

/// One measurement of `phase` on `f`: `warmup` + `iters` iterations.
pub fn measure(f: &dyn Fabric, nic_tids: &[i32], plan: &Plan, p: &Params, repeat: usize) -> Result<EpRun> {
    let n = plan.ranks;
    let threads = p.threads.clamp(1, n);
    let total = p.warmup + p.iters;
    let dispatch_each = p.phase != Phase::Combine;
    let combine_each = p.phase != Phase::Dispatch;
    for r in 0..n {
        fill(f, plan, p, r);
    }
    let barrier = Barrier::new(threads);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    let failed = std::sync::atomic::AtomicBool::new(false);
    // Per driver: per iteration (dispatch start, dispatch end, combine start, combine end).
    let times: Mutex<Vec<Vec<[Option<Instant>; 4]>>> = Mutex::new(vec![Vec::new(); threads]);
    let req_cpu = std::sync::atomic::AtomicU64::new(0);
    let loop_cpu = std::sync::atomic::AtomicU64::new(0);
    let (full_start, full_end) = (std::sync::atomic::AtomicU64::new(0), std::sync::atomic::AtomicU64::new(0));
    let checked = std::sync::atomic::AtomicU64::new(0);
    let checked_bytes = std::sync::atomic::AtomicU64::new(0);
    let marks: Mutex<Option<(cpu::Mark, Vec<Option<rccl_rust_gin::nic::CounterSnapshot>>, Option<(u64, u64)>)>> = Mutex::new(None);
    let after: Mutex<Option<(cpu::Split, Vec<Option<rccl_rust_gin::nic::CounterSnapshot>>, Option<(u64, u64)>)>> = Mutex::new(None);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (barrier, first_error, failed, times, req_cpu, checked, checked_bytes, marks, after) =
                (&barrier, &first_error, &failed, &times, &req_cpu, &checked, &checked_bytes, &marks, &after);
            let loop_cpu = &loop_cpu;
            let (full_start, full_end) = (&full_start, &full_end);
            s.spawn(move || {
                let mine: Vec<usize> = (t..n).step_by(threads).collect();
                let mut prev: Vec<Vec<u64>> = mine.iter().map(|&r| (0..signals(n)).map(|id| f.read_signal(r, id as u32)).collect()).collect();
                let mut my_times = Vec::with_capacity(total);
                let mut my_cpu = 0u64;
                let mut last_dispatch = 0u64;
                let mut loop_start = 0u64;
                let fail = |e: Error| {
                    failed.store(true, std::sync::atomic::Ordering::SeqCst);
                    first_error.lock().unwrap_or_else(|x| x.into_inner()).get_or_insert(e);
                };
                for k in 0..total {
                    let dispatch = dispatch_each || k == 0;
                    let timed = k >= p.warmup;
                    if dispatch {
                        for &r in &mine {
                            stamp_tokens(f, plan, p, r, k as u64);
                        }
                        last_dispatch = k as u64;
                    }
                    barrier.wait();
                    if k == p.warmup && t == 0 {
                        full_start.store(f.queue_full_waits(), std::sync::atomic::Ordering::Relaxed);
                        let counters = (0..n).map(|r| f.counters(r)).collect();
                        *marks.lock().unwrap_or_else(|x| x.into_inner()) = Some((cpu::Mark::now(nic_tids), counters, cpu::machine_ticks()));
                    }
                    if k == p.warmup {
                        barrier.wait();
                        loop_start = thread_cpu_ns();
                    }
                    let mut tt: [Option<Instant>; 4] = [None; 4];
                    let go = !failed.load(std::sync::atomic::Ordering::SeqCst);
                    let drop_one = p.fault_drop && k + 1 == total;
                    let phase = |combine: bool, prev: &mut Vec<Vec<u64>>| -> Result<(Instant, Instant, u64)> {
                        let c0 = thread_cpu_ns();
                        let t0 = Instant::now();
                        for &r in &mine {
                            post(f, plan, p, r, combine, drop_one)?;
                        }
                        for (i, &r) in mine.iter().enumerate() {
                            wait(f, plan, r, combine, &mut prev[i])?;
                        }
                        Ok((t0, Instant::now(), thread_cpu_ns() - c0))
                    };
                    let timed_dispatch = dispatch && go;
                    if timed_dispatch {
                        match phase(false, &mut prev) {
                            Ok((a, b, c)) => {
                                tt[0] = Some(a);
                                tt[1] = Some(b);
                                if timed && dispatch_each {
                                    my_cpu += c;
                                }
                            }
                            Err(e) => fail(e),
                        }
                    }
                    barrier.wait();
                    if combine_each && !failed.load(std::sync::atomic::Ordering::SeqCst) {
                        match phase(true, &mut prev) {
                            Ok((a, b, c)) => {
                                tt[2] = Some(a);
                                tt[3] = Some(b);
                                if timed {
                                    my_cpu += c;
                                }
                            }
                            Err(e) => fail(e),
                        }
                    }
                    barrier.wait();
                    // Untimed: the receivers' checks.
                    if !failed.load(std::sync::atomic::Ordering::SeqCst) {
                        let full = k + 1 == total;
                        for &r in &mine {
                            let check = |combine: bool| match verify(f, plan, p, r, combine, last_dispatch, full) {
                                Ok((c, b)) => {
                                    checked.fetch_add(c, std::sync::atomic::Ordering::Relaxed);
                                    checked_bytes.fetch_add(b, std::sync::atomic::Ordering::Relaxed);
                                }
                                Err(e) => fail(e),
                            };
                            if dispatch {
                                check(false);
                            }
                            if combine_each {
                                check(true);
                            }
                        }
                    }
                    if timed {
                        my_times.push(tt);
                    }
                    barrier.wait();
                    if k + 1 == total && t == 0 {
                        let m = marks.lock().unwrap_or_else(|x| x.into_inner()).take();
                        if let Some((mark, before, ticks)) = m {
                            // Requesters' CPU is added by each driver below; the split's
                            // requester share is filled in after the join.
                            let counters = (0..n).map(|r| f.counters(r)).collect::<Vec<_>>();
                            full_end.store(f.queue_full_waits(), std::sync::atomic::Ordering::Relaxed);
                            let split = mark.split(0);
                            let _ = before.len();
                            *after.lock().unwrap_or_else(|x| x.into_inner()) = Some((split, counters, cpu::machine_ticks()));
                            *marks.lock().unwrap_or_else(|x| x.into_inner()) = Some((mark, before, ticks));
                        }
                    }
                }
                // The drivers' CPU in the timed phases (the GPUs' part), and over
                // the whole loop (checks included), which is taken out of the
                // host's share: the checks are the benchmark's, not a path's.
                req_cpu.fetch_add(my_cpu, std::sync::atomic::Ordering::Relaxed);
                loop_cpu.fetch_add(thread_cpu_ns() - loop_start, std::sync::atomic::Ordering::Relaxed);
                times.lock().unwrap_or_else(|x| x.into_inner())[t] = my_times;
            });
        }
    });
    if let Some(e) = first_error.into_inner().unwrap_or_else(|x| x.into_inner()) {
        return Err(e);
    }
    for r in 0..n {
        f.flush(r)?;
    }
    let times = times.into_inner().unwrap_or_else(|x| x.into_inner());
    // Iteration i's span: the earliest start to the latest end over the drivers.
    let span = |i: usize, a: usize, b: usize| -> Option<f64> {
        let start = times.iter().filter_map(|v| v.get(i).and_then(|x| x[a])).min()?;
        let end = times.iter().filter_map(|v| v.get(i).and_then(|x| x[b])).max()?;
        Some(end.duration_since(start).as_secs_f64() * 1e6)
    };
    let iters = times.first().map_or(0, |v| v.len());
    let mut d: Vec<f64> = (0..iters).filter_map(|i| span(i, 0, 1)).collect();
    let mut c: Vec<f64> = (0..iters).filter_map(|i| span(i, 2, 3)).collect();
    let mut whole: Vec<f64> = match p.phase {
        Phase::Dispatch => d.clone(),
        Phase::Combine => c.clone(),
        Phase::RoundTrip => (0..iters).filter_map(|i| Some(span(i, 0, 1)? + span(i, 2, 3)?)).collect(),
    };
    for v in [&mut d, &mut c, &mut whole] {
        v.sort_by(|a, b| a.total_cmp(b));
    }
    let mut run = EpRun {
        path: f.name().into(),
        ranks: n,
        tokens: plan.tokens,
        repeat,
        median_us: percentile(&whole, 0.5),
        p99_us: percentile(&whole, 0.99),
        dispatch_us: percentile(&d, 0.5),
        combine_us: percentile(&c, 0.5),
        copies_checked: checked.into_inner(),
        bytes_checked: checked_bytes.into_inner(),
        ..Default::default()
    };
    let (msgs, bytes) = traffic(plan, p);
    let halves = if p.phase == Phase::RoundTrip { 2.0 } else { 1.0 };
    run.messages = msgs as f64 * halves;
    run.bytes = bytes as f64 * halves;
    let it = p.iters.max(1) as f64;
    run.full_waits = full_end.into_inner().saturating_sub(full_start.into_inner()) as f64 / it;
    let (m, a) = (marks.into_inner().unwrap_or_else(|x| x.into_inner()), after.into_inner().unwrap_or_else(|x| x.into_inner()));
    if let (Some((_, before, t0)), Some((split, after, t1))) = (m, a) {
        let req = req_cpu.into_inner();
        run.req_cpu_us = req as f64 / it / 1e3;
        run.nic_cpu_us = split.nic as f64 / it / 1e3;
        run.host_cpu_us = split.host.saturating_sub(loop_cpu.into_inner()) as f64 / it / 1e3;
        run.sys_cpu_us = split.sys as f64 / it / 1e3;
        run.steal_pct = cpu::steal_pct(t0, t1);
        let (mut db, mut cq, mut wq) = (0u64, 0u64, 0u64);
        for (b, a) in before.iter().zip(&after) {
            if let (Some(b), Some(a)) = (b, a) {
                let x = a.since(b);
                db += x.doorbells;
                cq += x.cqes_written;
                wq += x.wqebbs_read;
            }
        }
        run.doorbells = db as f64 / it;
        run.cqes = cq as f64 / it;
        run.wqebbs = wq as f64 / it;
    }
    Ok(run)
}
