//! rust-gin driven through the caller's door: RCCL's generic GIN device code
//! (ncclGin's methods in nccl_device/impl/gin__funcs.h, restated in
//! device/src/host_only/rccl_caller.cpp over patch 0004's real gin_rust.h),
//! run by lockstep waves against the emulated NIC. Four workgroups share one
//! context; coops of one thread, a wave and a workgroup (two waves); every
//! NIC family and both signal modes (reruns at the end).
//!
//! A wait that RCCL's own loop never leaves is a failure that names the wait:
//! a watchdog raises the abort flag after WATCHDOG, the loop leaves through
//! it, and the harness says so (RUST_GIN_RCCL_LEFT_BY_ABORT).

#[path = "support/gin_flow.rs"]
mod gin_flow;
#[path = "support/gin_world.rs"]
mod gin_world;
#[path = "support/lockstep.rs"]
#[macro_use]
mod lockstep;
#[path = "support/rccl_host.rs"]
mod rccl_host;

use gin_flow::Win;
use gin_world::*;
use lockstep::*;
use rccl_host::*;
use rccl_rust_gin::abi::*;
use rccl_rust_gin::device as dev;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

const WGS: usize = 4;
const ROUNDS: u64 = 6;
const NO_TIMEOUT: u64 = u64::MAX;
const WATCHDOG: Duration = Duration::from_secs(20);
/// ncclNetDeviceType of rust-gin (patch 0001).
const GIN_RUST: u32 = 8;
/// ncclGinResourceSharingMode (gin_device_common.h:108-112 at the pin).
const NCCL_GIN_RESOURCE_SHARING_THREAD: u32 = 2;

const KINDS: [(u32, &str); 3] = [
    (RUST_GIN_RCCL_COOP_THREAD, "thread"),
    (RUST_GIN_RCCL_COOP_WAVE, "wave"),
    (RUST_GIN_RCCL_COOP_WORKGROUP, "workgroup"),
];

/// RCCL's side of every rank: its ncclDevComm fields and windows.
struct Rccl {
    w: World,
    abort: Box<AtomicU32>,
    shadows: Vec<Vec<u64>>,
    comms: Vec<rust_gin_rccl_comm>,
    /// src, dst, sig windows of each rank, as RCCL windows (ginOffset4K 0).
    wins: Vec<[rust_gin_rccl_window; 3]>,
}

// SAFETY: the comms point into `abort` and `shadows`, owned here and never
// moved (boxed and heap vectors); the device handles are shared by design.
unsafe impl Sync for Rccl {}

fn rccl_window(win: &Win) -> rust_gin_rccl_window {
    rust_gin_rccl_window { gin_win: win.gh, gin_offset_4k: 0, local: win.buf.dev_addr() as *mut _ }
}

impl Rccl {
    fn new(depth: i32) -> Rccl {
        let w = world(depth);
        let abort = Box::new(AtomicU32::new(0));
        let mut shadows = Vec::new();
        let mut comms = Vec::new();
        let mut wins = Vec::new();
        for r in 0..N {
            // SAFETY: a live device handle; the context count is in it.
            let n_contexts = unsafe { (*(w.h[r] as *const rust_gin_handle)).n_contexts } as usize;
            shadows.push(vec![0u64; n_contexts * 64]);
            wins.push([rccl_window(&w.src[r]), rccl_window(&w.dst[r]), rccl_window(&w.sig[r])]);
        }
        for (r, s) in shadows.iter_mut().enumerate() {
            comms.push(rust_gin_rccl_comm {
                rank: r as i32,
                n_ranks: N as i32,
                abort_flag: abort.as_ptr(),
                gin_handle: w.h[r] as *mut _,
                gin_backend: GIN_RUST,
                signal_count: 64,
                signal_shadows: s.as_mut_ptr(),
                strong_legacy_signals: 0,
                resource_sharing: 0,
            });
        }
        Rccl { w, abort, shadows, comms, wins }
    }
    fn comm(&self, rank: usize) -> *const rust_gin_rccl_comm {
        &self.comms[rank]
    }
    fn win(&self, rank: usize, which: usize) -> *const rust_gin_rccl_window {
        &self.wins[rank][which]
    }
    fn no_device_error(&self) {
        for r in 0..N {
            // SAFETY: live handles and their error records.
            let e = unsafe {
                let h = &*(self.w.h[r] as *const rust_gin_handle);
                dev::DeviceError::from_record(&*(h.error as *const rust_gin_error))
            };
            assert!(e.is_none(), "rank {r}: device error {}", e.unwrap());
        }
    }
}

const SRC: usize = 0;
const DST: usize = 1;
const SIG: usize = 2;

/// One thread of a coop, as a test body sees it.
#[derive(Clone, Copy)]
struct Who {
    wg: usize,
    /// The thread's index in its workgroup's threads that post on their own
    /// (THREAD coops: every lane; otherwise 0, the coop posts once).
    poster: usize,
    posters: usize,
    coop: rust_gin_rccl_coop,
}

/// Runs `body` as `wgs` workgroups at once, each on its own threads: one
/// wave of 64 lanes (thread and wave coops) or two (workgroup coops). A
/// watchdog raises the abort flag after WATCHDOG so that a wait RCCL's loop
/// would never leave ends and is named by the body's checks.
fn workgroups(r: &Rccl, kind: u32, wgs: usize, body: impl Fn(Who) + Sync) {
    let waves = if kind == RUST_GIN_RCCL_COOP_WORKGROUP { 2 } else { 1 };
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let watchdog = s.spawn(|| {
            let start = Instant::now();
            while !done.load(Ordering::Acquire) {
                if start.elapsed() > WATCHDOG {
                    r.abort.store(1, Ordering::Release);
                    return true;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            false
        });
        let mut threads = Vec::new();
        for wg in 0..wgs {
            // SAFETY: a barrier for this workgroup's waves, freed below after they joined.
            let group = unsafe { dev::rust_gin_rccl_group_new(waves) } as usize;
            for wave_ix in 0..waves {
                let body = &body;
                threads.push((
                    group,
                    s.spawn(move || {
                        wave(lanes(64), |l| {
                            let (rank, size) = match kind {
                                RUST_GIN_RCCL_COOP_THREAD => (0, 1),
                                RUST_GIN_RCCL_COOP_WAVE => (l, 64),
                                _ => (wave_ix as u32 * 64 + l, 64 * waves),
                            };
                            let coop =
                                rust_gin_rccl_coop { kind, rank, size, pad: 0, group: group as *mut std::ffi::c_void };
                            let (poster, posters) =
                                if kind == RUST_GIN_RCCL_COOP_THREAD { (l as usize, 64) } else { (0, 1) };
                            body(Who { wg, poster, posters, coop });
                        });
                    }),
                ));
            }
        }
        let mut groups = Vec::new();
        for (g, t) in threads {
            t.join().expect("a workgroup's wave failed");
            groups.push(g);
        }
        groups.dedup();
        for g in groups {
            // SAFETY: from rust_gin_rccl_group_new; every wave using it has joined.
            unsafe { dev::rust_gin_rccl_group_free(g as *mut std::ffi::c_void) };
        }
        done.store(true, Ordering::Release);
        assert!(!watchdog.join().unwrap(), "the watchdog had to raise the abort flag: a wait never ended");
    });
}

/// A wait's result as RCCL would see it, with the wait named when RCCL's
/// loop only left through the abort flag (a hang on hardware).
fn waited(what: &str, s: i32) {
    assert_ne!(s, RUST_GIN_RCCL_LEFT_BY_ABORT as i32, "{what} never ended: RCCL's loop left only through the abort flag");
    assert_eq!(s, 0, "{what}: ncclResult_t {s}");
}

fn signal_inc(id: u32) -> rust_gin_rccl_action {
    rust_gin_rccl_action { kind: RUST_GIN_RCCL_ACTION_SIGNAL_INC, signal: id, ..Default::default() }
}
fn signal_add(id: u32, value: u64) -> rust_gin_rccl_action {
    rust_gin_rccl_action { kind: RUST_GIN_RCCL_ACTION_SIGNAL_ADD, signal: id, value, ..Default::default() }
}
fn strong(mut a: rust_gin_rccl_action) -> rust_gin_rccl_action {
    a.strength = RUST_GIN_RCCL_STRENGTH_STRONG;
    a
}
fn weak(mut a: rust_gin_rccl_action) -> rust_gin_rccl_action {
    a.strength = RUST_GIN_RCCL_STRENGTH_WEAK;
    a
}
const NONE: rust_gin_rccl_action = rust_gin_rccl_action {
    kind: RUST_GIN_RCCL_ACTION_NONE,
    strength: 0,
    signal: 0,
    pad: 0,
    value: 0,
    va_window: std::ptr::null(),
    va_offset: 0,
};

/// The peer workgroup `wg` of rank 0 sends to.
fn peer_of_wg(wg: usize) -> usize {
    1 + wg % (N - 1)
}

/// Where a put of (wg, poster, round) lands in the peer's destination window.
fn slot(who: &Who, round: u64) -> u64 {
    ((who.wg * 64 + who.poster) as u64 * ROUNDS + round) * SLOT as u64
}

/// Receivers: every peer waits, with RCCL's waitSignal from a wave coop, for
/// each signal the workgroups of rank 0 sent it, then reads it back.
fn receive_signals(r: &Rccl, ctx: u32, expect: &(dyn Fn(usize, usize) -> u64 + Sync)) {
    std::thread::scope(|s| {
        for p in 1..N {
            s.spawn(move || {
                workgroups(r, RUST_GIN_RCCL_COOP_WAVE, 1, |who| {
                    for wg in 0..WGS {
                        let least = expect(p, wg);
                        // SAFETY: the harness over live handles (each rank's own comm).
                        let s = unsafe {
                            dev::rust_gin_rccl_wait_signal(r.comm(p), ctx, who.coop, wg as u32, least, 64, NO_TIMEOUT)
                        };
                        waited(&format!("rank {p}: waitSignal(signal {wg}, least {least})"), s);
                    }
                });
                for wg in 0..WGS {
                    // SAFETY: as above.
                    let v = unsafe { dev::rust_gin_rccl_read_signal(r.comm(p), ctx, wg as u32, 64) };
                    assert_eq!(v, expect(p, wg), "rank {p}: readSignal(signal {wg})");
                }
            });
        }
    });
}

/// put with a signal and a counter, waitCounter, flush: the counter hang
/// (issue 24) as a regression test. Before rust_gin_progress, RCCL's
/// waitCounter polled a word nothing advanced and left only through the
/// watchdog's abort flag, on every family: "waitCounter(counter 0, least 6)
/// never ended" (seen for every coop kind before the fix).
fn puts_signals_and_counters(kind: u32) {
    puts_signals_and_counters_with(kind, WGS, 0);
}

/// As above, with `wgs` workgroups and the ncclGin's resource sharing mode
/// `sharing`; returns the doorbells the owning path rang on context 0.
fn puts_signals_and_counters_with(kind: u32, wgs: usize, sharing: u32) -> u64 {
    let mut r = Rccl::new(256);
    for c in &mut r.comms {
        c.resource_sharing = sharing;
    }
    let r = r;
    let ctx = 0;
    workgroups(&r, kind, wgs, |who| {
        let p = peer_of_wg(who.wg);
        for round in 0..ROUNDS {
            let off = slot(&who, round);
            // SAFETY: the harness over live handles and registered windows.
            unsafe {
                dev::rust_gin_rccl_put(
                    r.comm(0),
                    ctx,
                    who.coop,
                    p as i32,
                    r.win(p, DST),
                    off,
                    r.win(0, SRC),
                    off % (64 * SLOT as u64 * 64),
                    SLOT as u64,
                    signal_inc(who.wg as u32),
                    who.wg as i32,
                    0,
                )
            };
        }
        let least = ROUNDS * who.posters as u64;
        // SAFETY: as above.
        let s = unsafe { dev::rust_gin_rccl_wait_counter(r.comm(0), ctx, who.coop, who.wg as u32, least, 64, NO_TIMEOUT) };
        waited(&format!("workgroup {}: waitCounter(counter {}, least {least})", who.wg, who.wg), s);
        // RCCL's flush covers every peer of the context, so in THREAD
        // sharing it would post on the other owners' queues while they put
        // (no owner promise holds then; a run under load lost a WQE that
        // way): there the flush comes after all workgroups, below.
        if sharing != NCCL_GIN_RESOURCE_SHARING_THREAD {
            // SAFETY: as above.
            let s = unsafe { dev::rust_gin_rccl_flush(r.comm(0), ctx, who.coop, NO_TIMEOUT) };
            waited("flush", s);
        }
    });
    if sharing == NCCL_GIN_RESOURCE_SHARING_THREAD {
        workgroups(&r, RUST_GIN_RCCL_COOP_WAVE, 1, |who| {
            // SAFETY: as above; every owner is done.
            let s = unsafe { dev::rust_gin_rccl_flush(r.comm(0), ctx, who.coop, NO_TIMEOUT) };
            waited("flush after the owners", s);
        });
    }
    let posters = if kind == RUST_GIN_RCCL_COOP_THREAD { 64 } else { 1 };
    for wg in 0..wgs {
        // SAFETY: as above, from a plain thread (RCCL's readCounter from one thread).
        let c = unsafe { dev::rust_gin_rccl_read_counter(r.comm(0), ctx, wg as u32, 64) };
        assert_eq!(c, ROUNDS * posters, "readCounter(counter {wg})");
    }
    receive_signals(&r, ctx, &|p, wg| if wg < wgs && peer_of_wg(wg) == p { ROUNDS * posters } else { 0 });
    for wg in 0..wgs {
        let p = peer_of_wg(wg);
        for poster in 0..posters as usize {
            for round in 0..ROUNDS {
                let who = Who { wg, poster, posters: posters as usize, coop: Default::default() };
                let off = slot(&who, round) as usize;
                let src = off % (64 * SLOT * 64);
                assert_eq!(
                    r.w.dst_bytes(p, off, SLOT),
                    r.w.src_bytes(0, src, SLOT),
                    "rank {p}: the put of workgroup {wg}, thread {poster}, round {round}"
                );
            }
        }
    }
    r.no_device_error();
    r.w.owned_batches(0)
}

#[test]
fn rccl_puts_signals_and_counters_from_thread_coops() {
    puts_signals_and_counters(RUST_GIN_RCCL_COOP_THREAD);
}
#[test]
fn rccl_puts_signals_and_counters_from_wave_coops() {
    puts_signals_and_counters(RUST_GIN_RCCL_COOP_WAVE);
}
#[test]
fn rccl_puts_signals_and_counters_from_workgroup_coops() {
    puts_signals_and_counters(RUST_GIN_RCCL_COOP_WORKGROUP);
}

/// putValue with SignalAdd; the receiver follows with waitSignalFollowShadow
/// and meets with waitSignalMeetShadow after increaseSignalShadow; then
/// resetSignal zeroes value and shadow, and the next round counts from 0.
/// RCCL's THREAD resource sharing (gin_device_common.h:108-112 at the pin;
/// GDAKI's EXCLUSIVE): each of N - 1 workgroups alone posts to rank 0's
/// queue to its own peer, so patch 0004 calls rust_gin_put_exclusive, which
/// posts with no ticket or turn. Each workgroup's
/// waitCounter polls, and may ring, the other owners' queues
/// (progress_counters): the ring lock the owners keep makes that safe.
/// Fails where the patch drops the mode (no batch of the owning path). Not
/// rerun on DC, which refuses exclusive puts (tests/lockstep.rs).
#[test]
fn rccl_thread_sharing_posts_on_owned_queues() {
    for (kind, name) in [(RUST_GIN_RCCL_COOP_WAVE, "wave"), (RUST_GIN_RCCL_COOP_WORKGROUP, "workgroup")] {
        let owned = puts_signals_and_counters_with(kind, N - 1, NCCL_GIN_RESOURCE_SHARING_THREAD);
        assert!(owned > 0, "{name} coops with THREAD sharing: no batch of the owning path");
        println!("{name} coops, THREAD sharing: {owned} batches published by owners");
    }
    // The default, GPU sharing, never takes it.
    assert_eq!(puts_signals_and_counters_with(RUST_GIN_RCCL_COOP_WAVE, N - 1, 0), 0, "GPU sharing");
}

#[test]
fn rccl_put_values_and_shadow_waits() {
    for (kind, name) in KINDS {
        let r = Rccl::new(128);
        let ctx = 1;
        for round in 0..2u64 {
            workgroups(&r, kind, WGS, |who| {
                let p = peer_of_wg(who.wg);
                let off = (who.wg * 64 + who.poster) as u64 * 8;
                // SAFETY: the harness over live handles and windows.
                unsafe {
                    dev::rust_gin_rccl_put_value(
                        r.comm(0),
                        ctx,
                        who.coop,
                        p as i32,
                        r.win(p, DST),
                        off,
                        0xabc0_0000 + off + round,
                        8,
                        signal_add(who.wg as u32, 3),
                    )
                };
            });
            let posters = if kind == RUST_GIN_RCCL_COOP_THREAD { 64 } else { 1 };
            std::thread::scope(|s| {
                for p in 1..N {
                    let r = &r;
                    s.spawn(move || {
                        workgroups(r, RUST_GIN_RCCL_COOP_WAVE, 1, |who| {
                            for wg in (0..WGS).filter(|&wg| peer_of_wg(wg) == p) {
                                let sig = wg as u32;
                                let total = 3 * posters;
                                let (mut before, mut delta) = (0u64, 0u64);
                                // SAFETY: the harness; before/delta are this lane's.
                                let s = unsafe {
                                    dev::rust_gin_rccl_wait_signal_follow_shadow(
                                        r.comm(p), ctx, who.coop, sig, total, &mut before, &mut delta, 64,
                                    )
                                };
                                waited(&format!("{name}: rank {p}: waitSignalFollowShadow(signal {sig})"), s);
                                assert_eq!((before, delta), (0, total), "rank {p} signal {sig}: before and delta");
                                // The shadow now equals the value: meeting it returns at once.
                                // SAFETY: as above.
                                let s = unsafe {
                                    dev::rust_gin_rccl_wait_signal_meet_shadow(r.comm(p), ctx, who.coop, sig, 64)
                                };
                                waited(&format!("rank {p}: waitSignalMeetShadow(signal {sig})"), s);
                            }
                        });
                        for wg in (0..WGS).filter(|&wg| peer_of_wg(wg) == p) {
                            for poster in 0..posters as usize {
                                let off = (wg * 64 + poster) * 8;
                                let v = u64::from_le_bytes(r.w.dst_bytes(p, off, 8).try_into().unwrap());
                                assert_eq!(v, 0xabc0_0000 + off as u64 + round, "{name}: rank {p} value at {off}");
                            }
                            // SAFETY: the harness; one thread resets (as a kernel's thread 0 would).
                            unsafe { dev::rust_gin_rccl_reset_signal(r.comm(p), ctx, wg as u32) };
                            // SAFETY: as above.
                            let v = unsafe { dev::rust_gin_rccl_read_signal(r.comm(p), ctx, wg as u32, 64) };
                            assert_eq!(v, 0, "{name}: readSignal after resetSignal");
                        }
                    });
                }
            });
            for p in 1..N {
                assert!(r.shadows[p][ctx as usize * 64..][..WGS].iter().all(|s| *s == 0), "resetSignal zeroes the shadow");
            }
        }
        r.no_device_error();
    }
}

/// get from every peer, then flush; flushAsync + wait after puts.
#[test]
fn rccl_gets_flushes_and_async_flushes() {
    for (kind, name) in KINDS {
        let r = Rccl::new(128);
        workgroups(&r, kind, WGS, |who| {
            let p = peer_of_wg(who.wg);
            let off = ((who.wg * 64 + who.poster) * SLOT) as u64;
            // SAFETY: the harness over live handles and windows.
            unsafe {
                dev::rust_gin_rccl_get(r.comm(0), 0, who.coop, p as i32, r.win(p, SRC), off, r.win(0, DST), off, SLOT as u64);
                waited("flush after get", dev::rust_gin_rccl_flush(r.comm(0), 0, who.coop, 1 << 40));
                dev::rust_gin_rccl_put(
                    r.comm(0), 1, who.coop, p as i32, r.win(p, DST), off, r.win(0, SRC), off, SLOT as u64, NONE, -1, 0,
                );
                let mut req = [0u64; 2];
                dev::rust_gin_rccl_flush_async(r.comm(0), 1, who.coop, p as i32, req.as_mut_ptr());
                // flushAsync's request lives in thread 0's registers; wait is called with it.
                waited("wait(flushAsync)", dev::rust_gin_rccl_wait(r.comm(0), 1, who.coop, req.as_mut_ptr(), NO_TIMEOUT));
            }
        });
        let posters = if kind == RUST_GIN_RCCL_COOP_THREAD { 64 } else { 1 };
        for wg in 0..WGS {
            let p = peer_of_wg(wg);
            for poster in 0..posters {
                let off = (wg * 64 + poster) * SLOT;
                assert_eq!(r.w.dst_bytes(0, off, SLOT), r.w.src_bytes(p, off, SLOT), "{name}: get from rank {p} at {off}");
                assert_eq!(r.w.dst_bytes(p, off, SLOT), r.w.src_bytes(0, off, SLOT), "{name}: put to rank {p} at {off}");
            }
        }
        r.no_device_error();
    }
}

/// Contract: a strong signal makes visible the puts that every workgroup
/// issued on the context before it, not only the caller's (NCCL's GIN
/// guide, nccl#2302). Four workgroups put to peer 1 without a signal; after
/// they all returned, workgroup 0 sends one strong signal (a zero-byte put,
/// rocm-systems#8724). Peer 1 waits for it, then every byte of all four must
/// be there. A signal planted on context 1 (another ordering domain) passes
/// here, as the emulated NIC executes queues in doorbell order; the rerun on
/// a NIC that skews queues (`rccl_cases_again_on_a_nic_that_skews_queues`)
/// catches it.
#[test]
fn rccl_strong_signal_covers_every_workgroups_puts() {
    for (kind, name) in KINDS {
        let r = Rccl::new(256);
        let big = 64 * 1024u64; // large enough that the puts are still in flight
        workgroups(&r, kind, WGS, |who| {
            if who.poster != 0 {
                return;
            }
            let off = who.wg as u64 * big;
            // SAFETY: the harness over live handles and windows.
            unsafe {
                dev::rust_gin_rccl_put(r.comm(0), 0, who.coop, 1, r.win(1, DST), off, r.win(0, SRC), off, big, NONE, -1, 0)
            };
        });
        workgroups(&r, RUST_GIN_RCCL_COOP_WAVE, 1, |who| {
            // SAFETY: as above; a zero-byte put that carries only the signal.
            unsafe {
                dev::rust_gin_rccl_put(
                    r.comm(0), 0, who.coop, 1, r.win(1, DST), 0, r.win(0, SRC), 0, 0, strong(signal_inc(9)), -1, 0,
                )
            };
        });
        workgroups(&r, RUST_GIN_RCCL_COOP_WAVE, 1, |who| {
            // SAFETY: as above.
            let s = unsafe { dev::rust_gin_rccl_wait_signal(r.comm(1), 0, who.coop, 9, 1, 64, NO_TIMEOUT) };
            waited("rank 1: waitSignal(strong signal 9)", s);
        });
        for wg in 0..WGS {
            let off = wg * big as usize;
            assert_eq!(
                r.w.dst_bytes(1, off, big as usize),
                r.w.src_bytes(0, off, big as usize),
                "{name}: strong signal: workgroup {wg}'s put"
            );
        }
        // SAFETY: as above.
        assert_eq!(unsafe { dev::rust_gin_rccl_supports_strong_signal(r.comm(0), 0) }, 1);
        r.no_device_error();
    }
}

/// ncclGinBarrier over the world (NCCL's syncInternal, restated in
/// rccl_caller.cpp), bound to one context and over ncclGinAllContexts, with
/// the default fence (Put | Get): every rank puts to every peer and gets
/// from every peer (on context p mod 2 for all contexts), then all four run
/// the barrier three times on one session (the shadows count the rounds).
/// When the first returns, each rank holds every peer's put and every get
/// it issued: a peer's barrier signal travels behind its puts on each
/// queue, and the Get fence flushes. The tests' READ data lands only when a
/// flush lands it (RCCL_RUST_GIN_EMU_READ_DELAY_US), so a missing Get fence
/// fails at once. Seen failing: with the fence planted as Put only, on the
/// gets ("left the barrier before its get"); with the barrier's signals
/// planted on context 0 alone under all contexts, on the skewed reruns
/// (`rccl_cases_again_on_a_nic_that_skews_queues`).
#[test]
fn rccl_gin_barrier_orders_every_peers_puts_before_it_returns() {
    const CHUNK: u64 = 16 * 1024;
    const GETS: u64 = 512 * 1024;
    // Not a THREAD coop: NCCL's loop signals the next peer only after the
    // previous peer's signal arrived, so one thread per rank waits in a
    // circle for more than two ranks (each thread of a larger coop takes
    // one peer at once).
    for (kind, name) in &KINDS[1..] {
        for all in [false, true] {
            let (kind, name) = (*kind, if all { format!("{name}, all contexts") } else { name.to_string() });
            let r = Rccl::new(128);
            // SAFETY: a live device handle.
            let n_ctx = unsafe { (*(r.w.h[0] as *const rust_gin_handle)).n_contexts };
            assert!(n_ctx >= 2, "two contexts to spread over");
            let ctx_of = |p: usize| if all { p as u32 % n_ctx } else { 0 };
            workgroups(&r, kind, N, |who| {
                let rank = who.wg;
                let off = rank as u64 * CHUNK;
                for p in (0..N).filter(|&p| p != rank) {
                    let (c, pi) = (ctx_of(p), p as i32);
                    let at = p as u64 * CHUNK;
                    // SAFETY: the harness over live handles and windows.
                    unsafe {
                        dev::rust_gin_rccl_put(r.comm(rank), c, who.coop, pi, r.win(p, DST), off, r.win(rank, SRC), off, CHUNK, NONE, -1, 0);
                        dev::rust_gin_rccl_get(r.comm(rank), c, who.coop, pi, r.win(p, SRC), at, r.win(rank, DST), GETS + at, CHUNK);
                    }
                }
                let contexts = if all { n_ctx } else { 0 };
                let fence = RUST_GIN_RCCL_FENCE_PUT | RUST_GIN_RCCL_FENCE_GET;
                for round in 0..3 {
                    // SAFETY: as above.
                    let s = unsafe { dev::rust_gin_rccl_gin_barrier(r.comm(rank), 0, who.coop, 32, 0, contexts, fence) };
                    waited(&format!("{name}: rank {rank}: ncclGinBarrier round {round}"), s);
                    if round > 0 {
                        continue;
                    }
                    for p in (0..N).filter(|&p| p != rank) {
                        let at = p * CHUNK as usize;
                        let want = r.w.src_bytes(p, at, CHUNK as usize);
                        assert!(r.w.dst_bytes(rank, at, CHUNK as usize) == want, "{name}: rank {rank} left the barrier without rank {p}'s put");
                        assert!(
                            r.w.dst_bytes(rank, GETS as usize + at, CHUNK as usize) == want,
                            "{name}: rank {rank} left the barrier before its get from rank {p} landed"
                        );
                    }
                }
            });
            r.no_device_error();
        }
    }
}

/// Weak signals (ncclGin_WeakSignalInc) and signal(): counted exactly, and
/// the bundled put's data is there when its own signal is.
#[test]
fn rccl_weak_signals_and_signal_only_calls() {
    let r = Rccl::new(128);
    workgroups(&r, RUST_GIN_RCCL_COOP_WAVE, WGS, |who| {
        let p = peer_of_wg(who.wg) as i32;
        let off = who.wg as u64 * 4096;
        // SAFETY: the harness over live handles and windows.
        unsafe {
            dev::rust_gin_rccl_put(
                r.comm(0), 0, who.coop, p, r.win(p as usize, DST), off, r.win(0, SRC), off, 4096,
                weak(signal_inc(20 + who.wg as u32)), -1, 0,
            );
            dev::rust_gin_rccl_signal(r.comm(0), 0, who.coop, p, weak(signal_add(20 + who.wg as u32, 41)));
        }
    });
    std::thread::scope(|s| {
        for wg in 0..WGS {
            let r = &r;
            s.spawn(move || {
                let p = peer_of_wg(wg);
                workgroups(r, RUST_GIN_RCCL_COOP_WAVE, 1, |who| {
                    // SAFETY: as above.
                    let s = unsafe { dev::rust_gin_rccl_wait_signal(r.comm(p), 0, who.coop, 20 + wg as u32, 42, 64, 1 << 40) };
                    waited(&format!("rank {p}: waitSignal(weak signal {})", 20 + wg), s);
                });
                let off = wg * 4096;
                assert_eq!(r.w.dst_bytes(p, off, 4096), r.w.src_bytes(0, off, 4096), "the weak signal's own put");
            });
        }
    });
    r.no_device_error();
}

/// VA signals: a put whose signal is an atomic into a word of the peer's
/// signal window at a window offset; the peer waits on that word with
/// RCCL's VA waitSignal (no backend call) and resets it. Atomic mode only:
/// write mode refuses VA signals (getGinProperties says so).
#[test]
fn rccl_va_signals() {
    if write_mode_asked() {
        println!("write-mode signals: VA signals are refused by design (supportsVASignals = 0); nothing to run here");
        return;
    }
    let r = Rccl::new(128);
    workgroups(&r, RUST_GIN_RCCL_COOP_WAVE, WGS, |who| {
        let p = peer_of_wg(who.wg);
        let action = rust_gin_rccl_action {
            kind: RUST_GIN_RCCL_ACTION_VA_SIGNAL_ADD,
            value: 5,
            va_window: r.win(p, SIG),
            va_offset: 8 * who.wg as u64,
            ..Default::default()
        };
        // SAFETY: the harness over live handles and windows.
        unsafe {
            dev::rust_gin_rccl_put(
                r.comm(0), 0, who.coop, p as i32, r.win(p, DST), 0, r.win(0, SRC), 0, 64, action, -1, 0,
            )
        };
    });
    for wg in 0..WGS {
        let p = peer_of_wg(wg);
        let off = 8 * wg as u64;
        workgroups(&r, RUST_GIN_RCCL_COOP_WAVE, 1, |who| {
            // SAFETY: as above.
            let s = unsafe { dev::rust_gin_rccl_wait_va_signal(r.comm(p), 0, who.coop, r.win(p, SIG), off, 5, 64, NO_TIMEOUT) };
            waited(&format!("rank {p}: waitSignal(VA signal at {off})"), s);
        });
        // SAFETY: as above.
        unsafe {
            assert_eq!(dev::rust_gin_rccl_read_va_signal(r.comm(p), 0, r.win(p, SIG), off, 64), 5);
            dev::rust_gin_rccl_reset_va_signal(r.comm(p), 0, r.win(p, SIG), off);
            assert_eq!(dev::rust_gin_rccl_read_va_signal(r.comm(p), 0, r.win(p, SIG), off, 64), 0, "VA resetSignal");
        }
    }
    r.no_device_error();
}

/// Counters under reset and wrap: resetCounter between batches, then no
/// reset and 8-bit waits while the count passes 256 several times (RCCL's
/// rollingLessEq compares within half the window, so each wait names the
/// running total and must still end after the low byte wrapped).
#[test]
fn rccl_counters_under_reset_and_narrow_waits() {
    let r = Rccl::new(64);
    for batch in 0..3u64 {
        workgroups(&r, RUST_GIN_RCCL_COOP_WAVE, WGS, |who| {
            let p = peer_of_wg(who.wg) as i32;
            let counter = 10 + who.wg as u32;
            // SAFETY: the harness over live handles and windows.
            unsafe {
                // Every lane resets (a kernel's `if (thread 0)` would be a
                // divergent branch); all do so before any lane puts.
                dev::rust_gin_rccl_reset_counter(r.comm(0), 0, counter);
                for i in 0..40u64 {
                    let off = ((who.wg as u64 * 40 + i) * 8) % 4096;
                    dev::rust_gin_rccl_put(
                        r.comm(0), 0, who.coop, p, r.win(p as usize, DST), off, r.win(0, SRC), off, 8, NONE,
                        counter as i32, 0,
                    );
                }
                let s = dev::rust_gin_rccl_wait_counter(r.comm(0), 0, who.coop, counter, 40, 32, 1 << 40);
                waited(&format!("batch {batch}: waitCounter(counter {counter}, least 40, 32 bits)"), s);
                assert_eq!(dev::rust_gin_rccl_read_counter(r.comm(0), 0, counter, 32), 40, "readCounter after reset");
            }
        });
    }
    workgroups(&r, RUST_GIN_RCCL_COOP_WAVE, WGS, |who| {
        let p = peer_of_wg(who.wg) as i32;
        let counter = 10 + who.wg as u32;
        // SAFETY: the harness over live handles and windows.
        unsafe {
            dev::rust_gin_rccl_reset_counter(r.comm(0), 0, counter);
            let mut total = 0u64;
            for batch in 0..9u64 {
                for i in 0..100u64 {
                    let off = ((who.wg as u64 * 100 + i) * 8) % 4096;
                    dev::rust_gin_rccl_put(
                        r.comm(0), 0, who.coop, p, r.win(p as usize, DST), off, r.win(0, SRC), off, 8, NONE,
                        counter as i32, 0,
                    );
                }
                total += 100;
                let s = dev::rust_gin_rccl_wait_counter(r.comm(0), 0, who.coop, counter, total, 8, 1 << 40);
                waited(&format!("batch {batch}: waitCounter(counter {counter}, least {total}, 8 bits)"), s);
                let v = dev::rust_gin_rccl_read_counter(r.comm(0), 0, counter, 8);
                assert_eq!(v, total & 0xff, "8-bit readCounter after {total} counted puts");
            }
        }
    });
    r.no_device_error();
}

/// Contract: a blocking call whose wait can never end returns once the abort
/// flag is raised, within a bound: RCCL's loop reads the flag every 100,000
/// steps, so each step's progress hook must stay cheap and must not block.
/// Seen failing before the abort check was right in the harness: thread 0's
/// result was expected from every lane ("left otherwise than by abort").
#[test]
fn rccl_waits_honour_the_abort_flag_within_a_bound() {
    let r = Rccl::new(64);
    r.abort.store(1, Ordering::Release);
    let start = Instant::now();
    workgroups(&r, RUST_GIN_RCCL_COOP_WAVE, 1, |who| {
        // SAFETY: the harness over live handles; nothing will ever signal 63.
        unsafe {
            // Thread 0 runs RCCL's loop; the others wait at the coop's sync.
            let want = if who.coop.rank == 0 { RUST_GIN_RCCL_LEFT_BY_ABORT as i32 } else { 0 };
            let s = dev::rust_gin_rccl_wait_signal(r.comm(0), 0, who.coop, 63, 1, 64, NO_TIMEOUT);
            assert_eq!(s, want, "waitSignal left otherwise than by abort");
            let s = dev::rust_gin_rccl_wait_counter(r.comm(0), 0, who.coop, 1, 1, 64, NO_TIMEOUT);
            assert_eq!(s, want, "waitCounter left otherwise than by abort");
        }
    });
    let took = start.elapsed();
    assert!(took < Duration::from_secs(10), "waits with the abort flag raised took {took:?}");
    r.abort.store(0, Ordering::Release);
    r.no_device_error();
}

const CASES: [&str; 10] = [
    "rccl_puts_signals_and_counters_from_thread_coops",
    "rccl_thread_sharing_posts_on_owned_queues",
    "rccl_puts_signals_and_counters_from_wave_coops",
    "rccl_puts_signals_and_counters_from_workgroup_coops",
    "rccl_put_values_and_shadow_waits",
    "rccl_gets_flushes_and_async_flushes",
    "rccl_strong_signal_covers_every_workgroups_puts",
    "rccl_gin_barrier_orders_every_peers_puts_before_it_returns",
    "rccl_weak_signals_and_signal_only_calls",
    "rccl_counters_under_reset_and_narrow_waits",
];

#[test]
fn rccl_cases_again_with_write_mode_signals() {
    rerun_in_write_mode(&CASES);
}

#[test]
fn rccl_cases_again_on_bnxt_re_and_ionic() {
    rerun_on_families(&CASES);
}

/// The strong-signal case on a NIC that serves queues at different
/// latencies (tests/support/rccl_host.rs `rerun_with_queue_skew`), and the
/// other cases with it: none may rest on an order between queues. Seen
/// failing: with the signal planted on context 1 (another queue to the same
/// peer, waited for there), the `revmod3` rerun failed in two runs of two
/// ("workgroup 0's put"); the unskewed run passes that plant, as the
/// emulated NIC otherwise runs queues in doorbell order.
#[test]
fn rccl_cases_again_on_a_nic_that_skews_queues() {
    rerun_with_queue_skew(&CASES);
}

/// Not the THREAD-sharing case: DC refuses exclusive puts (a DCI serves
/// several peers; tests/lockstep.rs shows the refusal).
#[test]
fn rccl_cases_again_on_dc_initiators() {
    let cases: Vec<&str> = CASES.iter().copied().filter(|c| *c != "rccl_thread_sharing_posts_on_owned_queues").collect();
    rerun_on_dc(RERUN_DCIS, &cases);
}
