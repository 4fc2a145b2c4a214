//! The device library run as AMD waves run it: 64 lanes in lockstep on the
//! CPU (device/src/host_only/lockstep.cpp), so that the GPU path of the wave
//! layer (ballot, readlane, leaders, divergent spin loops) executes here.
//!   - the model itself: exec masks, divergence, spin-loop reconvergence;
//!   - the two hazards it was built to expose, rebuilt from the old code
//!     (device/src/host_only/hazards.cpp), must still deadlock or stall here
//!     and must not with plain threads: the instrument proves itself;
//!   - every GIN operation from 1, 2, 17, 63 and 64 lanes, same, different
//!     and mixed peers, queue depths 64 to 4096, 8 waves at once.
//! A wait that never ends is a failure that names what it waited for (the
//! device code's own bounded waits, decoded from the error record).

#[path = "support/emu.rs"]
mod emu;
#[path = "support/gin_flow.rs"]
mod gin_flow;
#[path = "support/lockstep.rs"]
#[macro_use]
mod lockstep;
#[path = "support/rccl_host.rs"]
mod rccl_host;
#[path = "support/gin_world.rs"]
mod gin_world;

use emu::*;
use gin_world::*;
use gin_flow::{signal_indexed, signal_va, NO_SIGNAL};
use lockstep::*;
use rccl_host::*;
use rccl_rust_gin::abi::*;
use rccl_rust_gin::device as dev;
use rccl_rust_gin::emu::Fabric;
use rccl_rust_gin::ffi::nccl::*;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const MS: u64 = 1_000_000;

extern "C" {
    fn rust_gin_hazard_flush_target_per_lane(q: *const rust_gin_mlx5_sq, target: *mut u64) -> i32;
    fn rust_gin_hazard_post_per_lane(q: *const rust_gin_mlx5_sq, r: *const rust_gin_mlx5_request, n: u32) -> i32;
    fn rust_gin_hazard_post_deferred_no_ring(q: *const rust_gin_mlx5_sq, r: *const rust_gin_mlx5_request, n: u32)
        -> i32;
}

// --- the model --------------------------------------------------------------

fn ballot(p: bool, (f, l): (*const std::ffi::c_char, i32)) -> u64 {
    // SAFETY: a hook of the lockstep runtime, called from a lane.
    unsafe { rust_gin_ls_ballot(p as i32, f, l) }
}

/// A spin loop as wave::spin runs it; `step` returns Some(result) to leave.
fn spin<T: Copy>(mut step: impl FnMut() -> Option<T>, (f, l): (*const std::ffi::c_char, i32)) -> T {
    // SAFETY: hooks of the lockstep runtime, called from a lane.
    unsafe {
        if rust_gin_ls_lane() < 0 {
            loop {
                if let Some(r) = step() {
                    return r;
                }
                std::thread::yield_now();
            }
        }
        rust_gin_ls_spin_enter(f, l);
        let mut r = None;
        loop {
            if r.is_none() {
                r = step();
            }
            if rust_gin_ls_spin_report(r.is_some() as i32, f, l) != 0 {
                return r.unwrap();
            }
        }
    }
}

#[test]
fn wave_primitives_see_exactly_the_active_lanes() {
    for exec in [lanes(1), lanes(2), lanes(17), lanes(63), lanes(64), 0x8000_0000_0000_0001, 0x5555_0000_ffff_0a0a] {
        let seen = Mutex::new(Vec::new());
        wave(exec, |l| {
            let all = ballot(true, site!());
            let odd = ballot(l % 2 == 1, site!());
            let leader = all.trailing_zeros();
            // SAFETY: lockstep hooks, from a lane.
            let v = unsafe {
                let (f, ln) = site!();
                rust_gin_ls_readlane(u64::from(l) * 10, leader, f, ln)
            };
            seen.lock().unwrap().push((l, all, odd, v));
        });
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.len() as u32, exec.count_ones());
        for (l, all, odd, v) in seen {
            assert_eq!(all, exec, "lane {l}: ballot(true) is the exec mask");
            assert_eq!(odd, exec & 0xaaaa_aaaa_aaaa_aaaa, "lane {l}: ballot of odd lanes");
            assert_eq!(v, u64::from(exec.trailing_zeros()) * 10, "lane {l}: readlane from the leader");
        }
    }
}

#[test]
fn unmarked_divergence_and_inactive_readlane_are_model_errors() {
    // Lanes reaching different wave primitives without a Region.
    let r = try_wave(lanes(4), |l| {
        if l % 2 == 0 {
            ballot(true, site!());
        } else {
            ballot(true, site!());
        }
    });
    assert!(r.stats.model_errors > 0 && r.model_errors.contains("divergent wave"), "{}", r.model_errors);
    // The same branch inside a Region: each side sees only its own lanes.
    let masks = Mutex::new(Vec::new());
    wave(lanes(4), |l| {
        let (f, ln) = site!();
        // SAFETY: lockstep hooks, from a lane.
        let inside = unsafe { rust_gin_ls_region_begin((l % 2 == 0) as i32, f, ln) } != 0;
        // (No lock may be held across a wave primitive: the lanes are fibers
        // of one thread.)
        if inside {
            let m = ballot(true, site!());
            masks.lock().unwrap().push((l, m));
        }
        // SAFETY: as above; the region's end.
        unsafe { rust_gin_ls_region_end(f, ln) };
        let m = ballot(true, site!());
        masks.lock().unwrap().push((l, m));
    });
    let m = masks.into_inner().unwrap();
    assert!(m.contains(&(0, 0b0101)) && m.contains(&(2, 0b0101)), "{m:?}");
    assert!(m.contains(&(1, 0b1111)) && m.contains(&(3, 0b1111)), "all four reconverge: {m:?}");
    // readlane from a lane outside the exec mask reads a stale register.
    let r = try_wave(lanes(3), |_| {
        // SAFETY: lockstep hooks, from a lane.
        unsafe {
            let (f, ln) = site!();
            rust_gin_ls_readlane(1, 40, f, ln);
        }
    });
    assert!(r.model_errors.contains("not active"), "{}", r.model_errors);
}

/// The hazard in its purest form: lanes take turns through a spin loop. A
/// lane whose turn came leaves the loop but parks at its end, so it never
/// hands the turn on. Threads get through; a wave does not.
#[test]
fn a_lane_that_left_a_spin_loop_waits_for_the_others() {
    // A wave gives up after 10,000 turns; threads, which get through, only
    // after a minute (they may be slow on a loaded machine, never stuck).
    fn take_turns(turn: &AtomicU64, l: u32) -> bool {
        let mut tries = 0u32;
        let start = Instant::now();
        // SAFETY: a lockstep hook, callable from anywhere.
        let in_wave = unsafe { rust_gin_ls_lane() } >= 0;
        let got = spin(
            || {
                tries += 1;
                if turn.load(Ordering::Acquire) == u64::from(l) {
                    Some(true)
                } else if (in_wave && tries > 10_000) || start.elapsed() > Duration::from_secs(60) {
                    Some(false)
                } else {
                    None
                }
            },
            site!(),
        );
        if got {
            turn.fetch_add(1, Ordering::AcqRel);
        }
        got
    }
    let turn = AtomicU64::new(0);
    let stuck = AtomicU64::new(0);
    let r = wave(lanes(4), |l| {
        if !take_turns(&turn, l) {
            stuck.fetch_add(1, Ordering::Relaxed);
        }
    });
    assert_eq!(stuck.load(Ordering::Relaxed), 3, "lanes 1..3 wait for a turn lane 0 cannot hand on");
    assert!(r.max_spin_iterations > 10_000);
    let turn = AtomicU64::new(0);
    std::thread::scope(|s| {
        for l in 0..4 {
            let turn = &turn;
            s.spawn(move || assert!(take_turns(turn, l), "thread {l}"));
        }
    });
}

// --- the hazards, at the mlx5 level ------------------------------------------

struct Bed {
    _fabric: Fabric,
    a: Side,
    link: Link,
}

fn bed(log_depth: u32, timeout_ns: u64) -> Bed {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 1 << 20, ALL);
    let link = Link::new(&a, &a, log_depth, timeout_ns);
    a.nic.start_polling();
    Bed { _fabric: fabric, a, link }
}

impl Bed {
    fn q(&self) -> *const rust_gin_mlx5_sq {
        self.link.sq.ptr()
    }
    fn write(&self, i: u64) -> rust_gin_mlx5_request {
        write_inline(i, 8, self.a.addr(8 * (i % 8192)), self.a.mr.rkey)
    }
    /// Every lane's post succeeded, and a quiet finds the queue healthy.
    fn all_landed(&self, st: &[i32]) {
        assert!(st.iter().all(|s| *s == 0), "{st:?} {:?}", self.link.sq.error());
        self.link.sq.quiet().unwrap();
        assert!(self.link.sq.error().is_none());
    }
    /// The 8-byte word at `off` of side a's buffer.
    fn word(&self, off: u64) -> u64 {
        let mut w = [0u8; 8];
        self.a.buf.read(off as usize, &mut w);
        u64::from_ne_bytes(w)
    }
}

fn statuses(exec: u64, f: impl Fn(u32) -> i32) -> Vec<i32> {
    let out = Mutex::new(vec![0; 64]);
    wave(exec, |l| {
        let s = f(l);
        out.lock().unwrap()[l as usize] = s;
    });
    out.into_inner().unwrap()
}

#[test]
fn hazard_lanes_flushing_one_queue_on_their_own_deadlock_in_a_wave() {
    // Unsignalled WQEs ahead: every lane's flush posts a NOP of its own.
    let b = bed(8, 300 * MS);
    b.link.sq.post(&[b.write(1), b.write(2), b.write(3)]).unwrap();
    let st = statuses(lanes(8), |_| {
        let mut t = 0;
        // SAFETY: a live queue; t is a valid out-pointer.
        unsafe { rust_gin_hazard_flush_target_per_lane(b.q(), &mut t) }
    });
    assert!(st.contains(&(RUST_GIN_ERR_TIMEOUT as i32)), "the old per-lane flush must stall in a wave: {st:?}");
    let e = b.link.sq.error().expect("the stall is recorded");
    assert_eq!(e.wait_kind as u32, RUST_GIN_WAIT_SQ_PUBLISH, "{e}");

    // The same calls from threads go through: only the wave sees it.
    let b = bed(8, 30_000 * MS);
    b.link.sq.post(&[b.write(1), b.write(2), b.write(3)]).unwrap();
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                let mut t = 0;
                // SAFETY: as above.
                assert_eq!(unsafe { rust_gin_hazard_flush_target_per_lane(b.q(), &mut t) }, 0);
            });
        }
    });

    // The fix: lanes sharing a queue share one flush (one NOP), in a wave.
    let b = bed(8, 30_000 * MS);
    b.link.sq.post(&[b.write(1), b.write(2), b.write(3)]).unwrap();
    let st = statuses(lanes(64), |_| {
        // SAFETY: a live queue.
        unsafe { dev::rust_gin_mlx5_quiet(b.q()) }
    });
    assert!(st.iter().all(|s| *s == 0), "{st:?} {:?}", b.link.sq.error());
    let s = b.link.sq.state();
    assert_eq!((s.ready, s.done), (4, 4), "three writes and one NOP for 64 lanes");
}

#[test]
fn hazard_lanes_posting_to_one_queue_on_their_own_deadlock_in_a_wave() {
    let b = bed(8, 300 * MS);
    let st = statuses(lanes(8), |l| {
        let r = b.write(u64::from(l));
        // SAFETY: a live queue and one request.
        unsafe { rust_gin_hazard_post_per_lane(b.q(), &r, 1) }
    });
    assert!(st.contains(&(RUST_GIN_ERR_TIMEOUT as i32)), "the old per-lane post must stall in a wave: {st:?}");
    assert_eq!(b.link.sq.error().unwrap().wait_kind as u32, RUST_GIN_WAIT_SQ_PUBLISH);

    // rust_gin_mlx5_post now takes turns: lists of different lengths from 64
    // lanes land exactly once, each lane's in order.
    let b = bed(6, 30_000 * MS);
    let st = statuses(lanes(64), |l| {
        let reqs: Vec<_> = (0..(l % 5) + 1).map(|k| b.write(u64::from(l) * 8 + u64::from(k))).collect();
        // SAFETY: a live queue and reqs.len() requests.
        unsafe { dev::rust_gin_mlx5_post(b.q(), reqs.as_ptr(), reqs.len() as u32) }
    });
    assert!(st.iter().all(|s| *s == 0), "{st:?} {:?}", b.link.sq.error());
    assert_eq!(b.link.sq.state().ready, (0..64u64).map(|l| l % 5 + 1).sum::<u64>(), "each request once");
    b.link.sq.quiet().unwrap();
    for l in 0..64u64 {
        for k in 0..(l % 5) + 1 {
            let mut w = [0u8; 8];
            b.a.buf.read((8 * (l * 8 + k)) as usize, &mut w);
            assert_eq!(u64::from_ne_bytes(w), l * 8 + k, "lane {l} request {k}");
        }
    }
}

/// The list entry point builds each WQE by its shape (mlx5/wqe.h,
/// ShapePolicy::by_shape): in a wave whose lanes post lists of every shape
/// (inline WRITE, gathered WRITE, fetch-and-add, READ, NOP, DUMP), the
/// dispatch diverges lane by lane, and every lane's requests still land
/// once, byte for byte, in order.
#[test]
fn a_wave_posting_lists_of_every_shape_lands_each_request() {
    let b = bed(9, 30_000 * MS);
    let (base, lkey, rkey) = (b.a.addr(0), b.a.mr.lkey, b.a.mr.rkey);
    const SRC: u64 = 512 << 10;
    const GATHERED: u64 = 256 << 10;
    const READ_BACK: u64 = 640 << 10;
    const COUNTER: u64 = 768 << 10;
    const SINKS: u64 = 800 << 10;
    for l in 0..64u64 {
        b.a.buf.write((SRC + 8 * l) as usize, &(l * 1000 + 7).to_ne_bytes());
    }
    let st = statuses(lanes(64), |l| {
        let l = u64::from(l);
        let every = [
            write_inline(l + 1, 8, base + 8 * l, rkey),
            write(base + SRC + 8 * l, lkey, base + GATHERED + 8 * l, rkey, 8),
            fetch_add(base + SINKS + 8 * l, lkey, base + COUNTER, rkey, 1),
            read(base + READ_BACK + 8 * l, lkey, base + SRC + 8 * l, rkey, 8),
            rust_gin_mlx5_request { opcode: rccl_rust_gin::mlx5::wire::opcode::NOP, ..Default::default() },
            rust_gin_mlx5_request { opcode: rccl_rust_gin::mlx5::wire::opcode::DUMP, length: 1, lkey, laddr: base + SRC, ..Default::default() },
        ];
        // Lanes start their lists at different shapes: neighbouring lanes
        // build different shapes in the same step.
        let reqs: Vec<_> = (0..every.len()).map(|k| every[(k + l as usize) % every.len()]).collect();
        // SAFETY: a live queue and reqs.len() requests.
        unsafe { dev::rust_gin_mlx5_post(b.q(), reqs.as_ptr(), reqs.len() as u32) }
    });
    b.all_landed(&st);
    let word = |off: u64| b.word(off);
    for l in 0..64u64 {
        assert_eq!(word(8 * l), l + 1, "lane {l}: inline WRITE");
        assert_eq!(word(GATHERED + 8 * l), l * 1000 + 7, "lane {l}: gathered WRITE");
        assert_eq!(word(READ_BACK + 8 * l), l * 1000 + 7, "lane {l}: READ");
    }
    assert_eq!(word(COUNTER), 64, "one fetch-and-add per lane");
    let mut olds: Vec<u64> = (0..64u64).map(|l| word(SINKS + 8 * l)).collect();
    olds.sort_unstable();
    assert_eq!(olds, (0..64u64).collect::<Vec<_>>(), "each fetch-and-add saw a distinct old value");
    let c = b.a.nic.counters();
    assert_eq!((c.writes, c.reads, c.atomics, c.dumps), (128, 64, 64, 64), "every request executed once");
}

#[test]
fn a_wave_whose_lanes_post_lists_of_one_shape_each_lands_every_request() {
    // Each lane's list is of one operation, its own: inline WRITEs,
    // gathered WRITEs, fetch-adds (each with a loop of its own, a ListKind
    // of mlx5/wqe.h, chosen per lane by Family::batch), READs and NOPs
    // (the mixed lists' loop), in turn from lane to lane.
    let b = bed(9, 30_000 * MS);
    let (base, lkey, rkey) = (b.a.addr(0), b.a.mr.lkey, b.a.mr.rkey);
    const K: u64 = 4; // requests per list
    const SRC: u64 = 512 << 10;
    const GATHERED: u64 = 256 << 10;
    const READ_BACK: u64 = 640 << 10;
    const COUNTER: u64 = 768 << 10;
    const SINKS: u64 = 800 << 10;
    for w in 0..64 * K {
        b.a.buf.write((SRC + 8 * w) as usize, &(w * 1000 + 7).to_ne_bytes());
    }
    let st = statuses(lanes(64), |l| {
        let l = u64::from(l);
        let reqs: Vec<_> = (0..K)
            .map(|k| {
                let w = l * K + k;
                match l % 5 {
                    0 => write_inline(w + 1, 8, base + 8 * w, rkey),
                    1 => write(base + SRC + 8 * w, lkey, base + GATHERED + 8 * w, rkey, 8),
                    2 => fetch_add(base + SINKS + 8 * w, lkey, base + COUNTER, rkey, 1),
                    3 => read(base + READ_BACK + 8 * w, lkey, base + SRC + 8 * w, rkey, 8),
                    _ => rust_gin_mlx5_request { opcode: rccl_rust_gin::mlx5::wire::opcode::NOP, ..Default::default() },
                }
            })
            .collect();
        // SAFETY: a live queue and K requests.
        unsafe { dev::rust_gin_mlx5_post(b.q(), reqs.as_ptr(), K as u32) }
    });
    b.all_landed(&st);
    let word = |off: u64| b.word(off);
    let (mut adds, mut olds) = (0, vec![]);
    for l in 0..64u64 {
        for w in l * K..(l + 1) * K {
            match l % 5 {
                0 => assert_eq!(word(8 * w), w + 1, "lane {l}: inline WRITE {w}"),
                1 => assert_eq!(word(GATHERED + 8 * w), w * 1000 + 7, "lane {l}: gathered WRITE {w}"),
                2 => {
                    adds += 1;
                    olds.push(word(SINKS + 8 * w));
                }
                3 => assert_eq!(word(READ_BACK + 8 * w), w * 1000 + 7, "lane {l}: READ {w}"),
                _ => {}
            }
        }
    }
    assert_eq!(word(COUNTER), adds, "one fetch-and-add per request");
    olds.sort_unstable();
    assert_eq!(olds, (0..adds).collect::<Vec<_>>(), "each fetch-and-add saw a distinct old value");
    let lanes_of = |r: u64| (0..64u64).filter(|l| l % 5 == r).count() as u64 * K;
    let c = b.a.nic.counters();
    assert_eq!(
        (c.writes, c.reads, c.atomics),
        (lanes_of(0) + lanes_of(1), lanes_of(3), lanes_of(2)),
        "every request executed once"
    );
}

#[test]
fn hazard_a_deferred_burst_longer_than_the_queue_waits_for_a_doorbell_nobody_rings() {
    const BURST: u64 = 3 * 64; // three queues' worth
    let b = bed(6, 300 * MS);
    let burst_b: Vec<_> = (0..BURST).map(|i| b.write(i)).collect();
    // SAFETY: a live queue and burst_b.len() requests.
    let s = unsafe { rust_gin_hazard_post_deferred_no_ring(b.q(), burst_b.as_ptr(), burst_b.len() as u32) };
    assert_eq!(s, RUST_GIN_ERR_TIMEOUT as i32, "the old credit wait never rings");
    assert_eq!(b.link.sq.error().unwrap().wait_kind as u32, RUST_GIN_WAIT_SQ_CREDIT);

    // The fix, from one lane and from a wave of 64 lanes: bursts of any
    // length complete.
    let b = bed(6, 30_000 * MS);
    let burst_b: Vec<_> = (0..BURST).map(|i| b.write(i)).collect();
    // SAFETY: as above.
    assert_eq!(unsafe { dev::rust_gin_mlx5_post_deferred(b.q(), burst_b.as_ptr(), burst_b.len() as u32) }, 0);
    let st = statuses(lanes(64), |l| {
        let reqs: Vec<_> = (0..96u64).map(|k| b.write(1000 + u64::from(l) * 96 + k)).collect();
        // SAFETY: as above.
        unsafe { dev::rust_gin_mlx5_post_deferred(b.q(), reqs.as_ptr(), reqs.len() as u32) }
    });
    assert!(st.iter().all(|s| *s == 0), "{st:?} {:?}", b.link.sq.error());
    b.link.sq.quiet().unwrap();
    assert_eq!(b.link.sq.state().done, BURST + 64 * 96);
}

#[test]
fn waits_behind_a_failed_queue_return_at_once() {
    let b = bed(6, 10_000 * MS);
    // An earlier producer holds ticket 0 and will never publish it...
    // SAFETY: the queue state is live host memory; no one else touches it.
    let st = b.link.sq.descriptor().state as *mut rust_gin_mlx5_sq_state;
    unsafe { (*st).resv = 1 };
    // ...and the queue has failed.
    unsafe { (*st).failed = 1 };
    let t = Instant::now();
    let r = b.write(1);
    // SAFETY: a live queue and one request.
    let s = unsafe { dev::rust_gin_mlx5_post(b.q(), &r, 1) };
    assert_eq!(s, RUST_GIN_ERR_QP_FAILED as i32);
    // Let the post get past its own first check: a producer that reserved
    // before the failure waits in publish and must leave too.
    unsafe { (*st).failed = 0 };
    let waiter = std::thread::scope(|sc| {
        let h = sc.spawn(|| {
            let t = Instant::now();
            // SAFETY: as above.
            let s = unsafe { dev::rust_gin_mlx5_post(b.q(), &r, 1) };
            (s, t.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        unsafe { (*st).failed = 1 };
        h.join().unwrap()
    });
    assert_eq!(waiter.0, RUST_GIN_ERR_QP_FAILED as i32);
    assert!(waiter.1 < Duration::from_secs(2), "left after {:?}, not after the 10 s timeout", waiter.1);
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn mlx5_entry_points_refuse_what_the_nic_would_misread() {
    let b = bed(6, 1_000 * MS);
    let good = b.write(1);
    let with = |mut r: rust_gin_mlx5_request, f: &dyn Fn(&mut rust_gin_mlx5_request)| {
        f(&mut r);
        r
    };
    let w0 = write(b.a.addr(0), b.a.mr.lkey, b.a.addr(64), b.a.mr.rkey, 0);
    let r8 = read(b.a.addr(0), b.a.mr.lkey, b.a.addr(64), b.a.mr.rkey, 8);
    let fa = fetch_add(b.a.addr(0), b.a.mr.lkey, b.a.addr(64), b.a.mr.rkey, 1);
    let bad = [
        ("inline of 0 bytes", with(good, &|r| r.length = 0)),
        ("inline of 9 bytes", with(good, &|r| r.length = 9)),
        ("WRITE of 0 bytes (byte_count 0 is 2 GiB)", w0),
        ("READ of 0 bytes", with(r8, &|r| r.length = 0)),
        ("inline READ", with(r8, &|r| r.flags = RUST_GIN_REQ_INLINE as u8)),
        ("WRITE over 2 GiB", with(w0, &|r| r.length = 0x8000_0001)),
        ("4-byte atomic", with(fa, &|r| r.length = 4)),
        ("unknown opcode", with(good, &|r| r.opcode = 0x7f)),
        ("unknown flag", with(good, &|r| r.flags |= 0x80)),
    ];
    for (what, r) in bad {
        // After a good request, before one, and a list of it alone: a list
        // whose requests share opcode and flags is checked by the first
        // one's rule (mlx5_post's check_list), any other request by request.
        for list in [[good, r], [r, good], [r, r]] {
            // SAFETY: a live queue and two requests.
            let s = unsafe { dev::rust_gin_mlx5_post(b.q(), list.as_ptr(), 2) };
            assert_eq!(s, RUST_GIN_ERR_INVALID as i32, "{what}: {list:?}");
        }
        assert!(dev::build_wqe(&r, 0, 1, false).is_err(), "build_wqe: {what}");
    }
    assert_eq!(b.link.sq.state().resv, 0, "nothing of a refused list is posted");
    assert!(dev::build_wqe(&good, 0, 1, false).is_ok());
}

// --- GIN operations from lockstep waves ---------------------------------------

/// Write mode: a thread that samples every slot, running total and signal
/// word of every rank while waves post, and records any that went
/// backwards. A slot or total that decreases is an update lost for good.
struct Watch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<(u64, Vec<String>)>>,
}

impl World {
    /// (what, address) of every word the write mode keeps monotonic.
    fn monotonic_words(&self) -> Vec<(String, usize)> {
        let mut v = Vec::new();
        for r in 0..N {
            // SAFETY: live handles; contexts as createContext wrote them.
            unsafe {
                let h = &*(self.h[r] as *const rust_gin_handle);
                for ctx in 0..h.n_contexts as usize {
                    let c = &*((h.contexts as *const rust_gin_context).add(ctx));
                    let ns = c.n_signals as usize;
                    for i in 0..ns {
                        v.push((format!("rank {r} ctx {ctx} signal word {i}"), c.signals as usize + 8 * i));
                    }
                    for i in 0..N * ns {
                        let (p, id) = (i / ns, i % ns);
                        v.push((format!("rank {r} ctx {ctx} slot of sender {p} signal {id}"), c.signal_slots as usize + 8 * i));
                        v.push((format!("rank {r} ctx {ctx} total to peer {p} signal {id}"), c.signal_totals as usize + 8 * i));
                    }
                }
            }
        }
        v
    }

    fn watch(&self) -> Option<Watch> {
        if !write_mode_asked() {
            return None;
        }
        let words = self.monotonic_words();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let st = stop.clone();
        let started = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let go = started.clone();
        let thread = std::thread::spawn(move || {
            let load = |a: usize| {
                // SAFETY: words of live contexts (host memory of the emulated NIC), 8-byte aligned.
                unsafe { (*(a as *const std::sync::atomic::AtomicU64)).load(Ordering::Acquire) }
            };
            let mut last: Vec<u64> = words.iter().map(|(_, a)| load(*a)).collect();
            go.store(true, Ordering::Release);
            let (mut samples, mut bad) = (0u64, Vec::new());
            // Sweeps until told to stop, then one more over the final values.
            loop {
                let last_sweep = st.load(Ordering::Acquire);
                for (k, (what, a)) in words.iter().enumerate() {
                    let v = load(*a);
                    if v < last[k] && bad.len() < 8 {
                        bad.push(format!("{what}: {} then {v}", last[k]));
                    }
                    last[k] = last[k].max(v);
                }
                samples += 1;
                if last_sweep {
                    break;
                }
                std::thread::yield_now();
            }
            (samples, bad)
        });
        // The first values are read before any wave posts.
        while !started.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        Some(Watch { stop, thread: Some(thread) })
    }
}

impl Watch {
    fn finish(mut self) {
        self.stop.store(true, Ordering::Release);
        let (samples, bad) = self.thread.take().unwrap().join().unwrap();
        assert!(bad.is_empty(), "write-mode words went backwards: {bad:?}");
        assert!(samples > 0, "the watcher never swept");
        println!("write mode: slots, totals and signal words sampled {samples} times, never backwards");
    }
}

/// Peer layouts the issue asks for.
fn peer_of(kind: &str, lane: u32) -> u32 {
    match kind {
        "same" => 1,
        "different" => lane % N as u32,
        _ => (lane / 3 + lane * 7 / 5) % N as u32, // mixed: runs of equal and unequal peers
    }
}

#[test]
fn every_gin_operation_from_1_2_17_63_and_64_lanes() {
    // One wave: in an exclusive rerun it owns every queue it puts to.
    let w = world(256);
    let h = w.handle();
    // Write mode has no VA signals (refused: tests/signal_slots.rs).
    let va = !write_mode_asked();
    let watch = w.watch();
    let mut round = 0u32;
    let mut puts = [0u64; 64]; // puts so far per lane (counter l of context 0)
    for n_lanes in [1u32, 2, 17, 63, 64] {
        for kind in ["same", "different", "mixed"] {
            round += 1;
            let exec = lanes(n_lanes);
            lanes_of(exec).for_each(|l| puts[l as usize] += 1);
            let puts = &puts;
            let db0 = w.doorbells(0);
            let sig0: Vec<u64> = (0..N).map(|r| w.signal(r, 0, 0)).collect();
            let va0: Vec<u64> = (0..N).map(|r| w.sig[r].buf.atomic_u64(64 * 8).load(Ordering::Acquire)).collect();
            // Lanes with one request (put) and with two (put + signal).
            wave(exec, |l| {
                let peer = peer_of(kind, l);
                let off = (l as usize * SLOT) as u64;
                let sig = if l % 2 == 0 { signal_indexed(0, RUST_GIN_SIGNAL_OP_INC, 0) } else { NO_SIGNAL };
                // SAFETY (all device calls): live handle and windows.
                unsafe {
                    w.ok("put", put(h, 0, peer, w.dst[0].gh, off, w.src[0].gh, off, SLOT as u64, sig, 1, l, 0));
                    w.ok("putValue", put_value(
                        h, 0, peer, w.dst[0].gh, (64 * SLOT + l as usize * 8) as u64,
                        u64::from(round) << 32 | u64::from(l), 8, NO_SIGNAL, RUST_GIN_FLAG_AGGREGATE));
                    if va {
                        w.ok("signal", signal_peer(h, 0, peer, signal_va(&w.sig[0], 64 * 8), 0));
                    }
                    w.ok("get", get(
                        h, 1, peer, w.src[0].gh, off, w.dst[0].gh, (128 * SLOT + l as usize * SLOT) as u64,
                        SLOT as u64, 0));
                    let mut req = rust_gin_request::default();
                    w.ok("flushAsync", dev::rust_gin_flush_async(h, 1, peer, &mut req));
                    w.ok("wait", dev::rust_gin_wait(h, req, std::ptr::null(), 0));
                    // Coop ranks 0..coop must all be present, or peers of a
                    // missing rank go unflushed (with one lane and a coop of 3,
                    // peer 1's putValue was checked before it landed).
                    let coop = n_lanes.min(3);
                    w.ok("flush", dev::rust_gin_flush(h, 0, l % coop, coop, std::ptr::null(), 0));
                    w.ok("counter wait", dev::rust_gin_counter_wait(h, 0, l, puts[l as usize], std::ptr::null(), 0));
                }
            });
            // Bytes: every lane's put and putValue reached its peer's window.
            for l in 0..n_lanes {
                let peer = peer_of(kind, l) as usize;
                let off = l as usize * SLOT;
                assert_eq!(w.dst_bytes(peer, off, SLOT), w.src_bytes(0, off, SLOT), "{kind}/{n_lanes}: put of lane {l}");
                let v = w.dst_bytes(peer, 64 * SLOT + l as usize * 8, 8);
                assert_eq!(u64::from_ne_bytes(v.try_into().unwrap()), u64::from(round) << 32 | u64::from(l));
                assert_eq!(w.dst_bytes(0, 128 * SLOT + off, SLOT), w.src_bytes(peer, off, SLOT), "get of lane {l}");
            }
            // Signals: one per even lane to its peer; VA signals, one per lane.
            for r in 0..N {
                let want = (0..n_lanes).filter(|l| l % 2 == 0 && peer_of(kind, *l) as usize == r).count() as u64;
                assert_eq!(w.signal(r, 0, 0) - sig0[r], want, "{kind}/{n_lanes}: indexed signal at rank {r}");
                let want = if va { (0..n_lanes).filter(|l| peer_of(kind, *l) as usize == r).count() as u64 } else { 0 };
                let got = w.sig[r].buf.atomic_u64(64 * 8).load(Ordering::Acquire) - va0[r];
                assert_eq!(got, want, "{kind}/{n_lanes}: VA signal at rank {r}");
            }
            // Doorbells: the put step rings once per distinct queue; the
            // aggregated putValue none; signals once per queue; flushes may
            // ring more. Checked exactly below, on a quiet world.
            assert!(w.doorbells(0) > db0);
            assert!(w.error().is_none(), "{:?}", w.error());
        }
    }
    watch.map(Watch::finish);
}

#[test]
fn one_doorbell_per_queue_per_wave_batch() {
    let w = world(4096);
    let h = w.handle();
    let mut lines = Vec::new();
    for kind in ["same", "different"] {
        for n_lanes in [2u32, 17, 64] {
            // Queues the wave's lanes reach: one per peer on RC, one per DC
            // initiator on DC (peers share them).
            let queues = lanes_of(lanes(n_lanes))
                .map(|l| w.queue_of(peer_of(kind, l)))
                .collect::<std::collections::BTreeSet<_>>()
                .len() as u64;
            let before = w.doorbells(0);
            let owned_before = w.owned_batches(0);
            wave(lanes(n_lanes), |l| {
                // SAFETY: live handle and windows.
                let s = unsafe {
                    put(h, 0, peer_of(kind, l), w.dst[0].gh, (l as usize * SLOT) as u64, w.src[0].gh, 0,
                        SLOT as u64, signal_indexed(1, RUST_GIN_SIGNAL_OP_INC, 0), 0, 0, 0)
                };
                w.ok("put", s);
            });
            let rung = w.doorbells(0) - before;
            // Each queue's two batches (the data, then the signal behind it)
            // went the owning path in an exclusive rerun, none otherwise.
            let owned = w.owned_batches(0) - owned_before;
            let want = if exclusive_asked() { 2 * queues } else { 0 };
            assert_eq!(owned, want, "{kind}, {n_lanes} lanes: batches of the owning path");
            lines.push(format!("lockstep: {n_lanes:>2} lanes, {kind:>9} peer(s): {rung} doorbell(s) for {queues} queue(s)"));
            // bnxt_re rings once per WQE unless RCCL_RUST_GIN_BNXT_DOORBELL=
            // peer (a field quirk, docs/nic-families.md): each lane's data
            // WQE and signal WQE then get a doorbell each.
            let per_wqe = family_asked() == Some(RUST_GIN_FAMILY_BNXT)
                && std::env::var("RCCL_RUST_GIN_BNXT_DOORBELL").map_or(true, |v| v != "peer");
            let want = if per_wqe { 2 * lanes_of(lanes(n_lanes)).count() as u64 } else { queues };
            assert_eq!(rung, want, "{kind}, {n_lanes} lanes: one doorbell per queue per wave batch (per WQE on bnxt_re: {per_wqe})");
        }
    }
    println!("{}", lines.join("\n"));
    // SAFETY: live handle.
    w.ok("flush", unsafe { dev::rust_gin_flush(h, 0, 0, 1, std::ptr::null(), 0) });
}

#[test]
fn flush_and_signal_waits_called_by_many_lanes_of_one_wave() {
    for depth in [64, 512, 4096] {
        let w = world(depth);
        let h = w.handle();
        let watch = w.watch();
        wave(lanes(64), |l| {
            // SAFETY: live handle and windows.
            unsafe {
                for k in 0..4u64 {
                    w.ok("putValue", put_value(
                        h, 0, 0, w.dst[0].gh, (l as usize * 8) as u64, k, 8,
                        signal_indexed(2, RUST_GIN_SIGNAL_OP_ADD, 1), RUST_GIN_FLAG_AGGREGATE));
                }
                let mut req = rust_gin_request::default();
                w.ok("flushAsync", dev::rust_gin_flush_async(h, 0, 0, &mut req));
                w.ok("wait", dev::rust_gin_wait(h, req, std::ptr::null(), 0));
                w.ok("flush", dev::rust_gin_flush(h, 0, 0, 1, std::ptr::null(), 0));
                w.ok("signal wait", dev::rust_gin_signal_wait(h, 0, 2, 256, std::ptr::null(), 0));
            }
        });
        assert_eq!(w.signal(0, 0, 2), 256, "depth {depth}");
        watch.map(Watch::finish);
        for l in 0..64 {
            assert_eq!(u64::from_ne_bytes(w.dst_bytes(0, l * 8, 8).try_into().unwrap()), 3);
        }
    }
}

#[test]
fn misaligned_va_signal_targets_are_refused() {
    let w = world(128);
    let p = in_process_plugin();
    // A window whose base is 4 bytes past an 8-byte boundary.
    let raw = rccl_rust_gin::gpu::Allocator::alloc(
        &rccl_rust_gin::gpu::HostMemory, 4096, 4096, rccl_rust_gin::gpu::Object::WindowData).unwrap();
    let mut wins = Vec::new();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..N)
            .map(|r| {
                let coll = w.ranks[r].coll as usize;
                let base = raw.dev_addr() as usize + 4;
                s.spawn(move || {
                    let (res, mh, gh) = p.reg(coll as *mut c_void, base as *mut c_void, 64, NCCL_PTR_CUDA);
                    assert_eq!(res, OK);
                    (mh as usize, gh as usize)
                })
            })
            .collect();
        wins = hs.into_iter().map(|h| h.join().unwrap()).collect();
    });
    let gh = wins[0].1 as *const c_void;
    let sig = |off| rust_gin_signal {
        type_: RUST_GIN_SIGNAL_VA, op: RUST_GIN_SIGNAL_OP_INC, value: 0, id: 0, window: gh, offset: off };
    // SAFETY: live handle and window.
    let s = unsafe { dev::rust_gin_signal_peer(w.handle(), 0, 1, sig(0), 0) };
    assert_eq!(s, RUST_GIN_ERR_INVALID as i32, "offset 0 of a base 4 past alignment");
    let e = w.error().expect("recorded");
    assert_eq!(e.wait_kind as u32, RUST_GIN_ARG_SIGNAL);
    // SAFETY: as above.
    let s = unsafe { dev::rust_gin_signal_peer(w.handle(), 0, 1, sig(4), 0) };
    assert_eq!(s, 0, "offset 4 lands on an 8-byte boundary");
    // SAFETY: as above.
    assert_eq!(unsafe { dev::rust_gin_flush(w.handle(), 0, 0, 1, std::ptr::null(), 0) }, 0);
    for (r, (mh, _)) in wins.iter().enumerate() {
        // SAFETY: valid tokens.
        unsafe { (p.v.dereg_mr_sym.unwrap())(w.ranks[r].coll, *mh as *mut c_void) };
    }
}

/// 8 waves of 64 lanes at once, depth 64, mixed operations; every byte,
/// signal and counter checked. RUST_GIN_LOCKSTEP_OPS sets the operations per
/// wave (default 20,000; the soak in docs/architecture.md uses more).
#[test]
fn eight_waves_of_64_lanes_mixed_operations_depth_64() {
    let ops: u64 = std::env::var("RUST_GIN_LOCKSTEP_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let w = world(64);
    let h = w.handle();
    let rounds = ops.div_ceil(64 * 3) as u32; // three operations per lane per round
    let watch = w.watch();
    let t = Instant::now();
    let stats: Vec<rust_gin_ls_stats> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8u32)
            .map(|wv| {
                let w = &w;
                s.spawn(move || {
                    let h = w.handle();
                    wave(lanes(64), |l| {
                        let g = wv * 64 + l; // global lane: its own slot and counter
                        let peer = peer_of("mixed", g + l);
                        let off = l as usize * SLOT;
                        for r in 1..=rounds {
                            // SAFETY: live handle and windows.
                            unsafe {
                                let dst_off = g as usize * SLOT;
                                let flags = if r % 3 == 0 { RUST_GIN_FLAG_AGGREGATE } else { 0 };
                                w.ok("put", dev::rust_gin_put(
                                    h, wv % 2, peer, w.dst[0].gh, dst_off as u64,
                                    w.src[0].gh, off as u64, SLOT as u64,
                                    signal_indexed(u64::from(l % 8), RUST_GIN_SIGNAL_OP_INC, 0), 1,
                                    g % 64, flags));
                                w.ok("putValue", dev::rust_gin_put_value(
                                    h, wv % 2, peer, w.dst[0].gh, (N * 64 * SLOT * 63 + g as usize * 8) as u64,
                                    u64::from(r), 8, NO_SIGNAL, flags));
                                w.ok("signal", dev::rust_gin_signal_peer(
                                    h, wv % 2, peer, signal_indexed(u64::from(8 + l % 8), RUST_GIN_SIGNAL_OP_ADD, 2), 0));
                            }
                        }
                        // SAFETY: as above.
                        w.ok("flush", unsafe { dev::rust_gin_flush(h, wv % 2, 0, 1, std::ptr::null(), 0) });
                    })
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let took = t.elapsed();
    watch.map(Watch::finish);
    // Counters: each global lane g counts its puts on counter g % 64 of its
    // context (wv % 2); waves wv and wv+2, +4, +6 share that counter.
    for ctx in 0..2u32 {
        for c in 0..64u32 {
            // SAFETY: live handle.
            let v = unsafe { dev::rust_gin_counter_read(h, ctx, c) };
            assert_eq!(v, 4 * u64::from(rounds), "counter {c} of context {ctx}");
        }
    }
    // Signals: every put carries an increment, every signal an add of 2.
    for r in 0..N {
        let mut inc = 0;
        let mut add = 0;
        for g in 0..512u32 {
            if peer_of("mixed", g + g % 64) as usize == r {
                inc += 1;
                add += 2;
            }
        }
        let got_inc: u64 = (0..2).flat_map(|c| (0..8).map(move |id| (c, id))).map(|(c, id)| w.signal(r, c, id)).sum();
        let got_add: u64 = (0..2).flat_map(|c| (8..16).map(move |id| (c, id))).map(|(c, id)| w.signal(r, c, id)).sum();
        assert_eq!(got_inc, inc * u64::from(rounds), "put signals at rank {r}");
        assert_eq!(got_add, add * u64::from(rounds), "signal adds at rank {r}");
    }
    // Bytes: each global lane's last put and putValue.
    for g in 0..512usize {
        let peer = peer_of("mixed", (g + g % 64) as u32) as usize;
        let off = (g % 64) * SLOT;
        assert_eq!(w.dst_bytes(peer, g * SLOT, SLOT), w.src_bytes(0, off, SLOT), "put of global lane {g}");
        let v = w.dst_bytes(peer, N * 64 * SLOT * 63 + g * 8, 8);
        assert_eq!(u64::from_ne_bytes(v.try_into().unwrap()), u64::from(rounds), "putValue of global lane {g}");
    }
    assert!(w.error().is_none(), "{:?}", w.error());
    let spins: u64 = stats.iter().map(|s| s.spin_iterations).sum();
    let steps: u64 = stats.iter().map(|s| s.steps).sum();
    println!(
        "lockstep soak: 8 waves x 64 lanes, {} operations per wave, depth 64: {:.1} s ({} wave steps, {} spin iterations)",
        u64::from(rounds) * 64 * 3,
        took.as_secs_f64(),
        steps,
        spins
    );
}

/// Lanes of one call naming contexts of two NIC families (two handles):
/// the wave runs the family of its lowest lane, the other lanes are refused
/// with RUST_GIN_ARG_FAMILY and run nothing (the switch in gin/family.h must
/// be wave-uniform); a family that is no family is refused in every lane.
/// The second handle is a copy of rank 0's whose context says another
/// family: were it run, it would read rank 0's peers through the wrong
/// descriptor layout.
#[test]
fn lanes_naming_contexts_of_two_families_are_refused_not_run() {
    let w = world(64);
    let real = w.handle();
    // SAFETY: rank 0's live handle and its first context (host memory).
    let (h0, c0) = unsafe {
        let h = *(real as *const rust_gin_handle);
        (h, *(h.contexts as *const rust_gin_context))
    };
    let family = c0.family;
    let fake = |fam: u32| {
        let ctx = Box::new([rust_gin_context { family: fam, ..c0 }]);
        let h = Box::new(rust_gin_handle { contexts: ctx.as_ptr() as u64, n_contexts: 1, ..h0 });
        (ctx, h)
    };
    let other = if family == RUST_GIN_FAMILY_MLX5 { RUST_GIN_FAMILY_IONIC } else { RUST_GIN_FAMILY_MLX5 };
    let (_c1, h1) = fake(other);
    let mixed = &*h1 as *const rust_gin_handle as usize;
    let before = w.signal(1, 0, 3);
    let results: Vec<std::sync::atomic::AtomicI32> = (0..4).map(|_| std::sync::atomic::AtomicI32::new(-1)).collect();
    wave(lanes(4), |l| {
        let h = if l % 2 == 0 { real } else { mixed as *const c_void };
        // SAFETY: live handles (the copy points at rank 0's memory).
        let s = unsafe { dev::rust_gin_signal_peer(h, 0, 1, signal_indexed(3, RUST_GIN_SIGNAL_OP_INC, 0), 0) };
        results[l as usize].store(s, Ordering::Relaxed);
    });
    let got: Vec<i32> = results.iter().map(|r| r.load(Ordering::Relaxed)).collect();
    assert_eq!(got, vec![0, RUST_GIN_ERR_INVALID as i32, 0, RUST_GIN_ERR_INVALID as i32], "lanes 0, 2 run; 1, 3 refused");
    let e = w.error().expect("the refusal is recorded");
    assert_eq!((e.code, u32::from(e.wait_kind)), (RUST_GIN_ERR_INVALID, RUST_GIN_ARG_FAMILY), "{e}");
    assert_eq!((e.observed, e.expected), (u64::from(other), u64::from(family)), "the lane's family and the wave's");
    let t = std::time::Instant::now();
    while w.signal(1, 0, 3) != before + 2 {
        assert!(t.elapsed().as_secs() < 20, "the two signals of the running lanes never came");
        std::thread::yield_now();
    }
    // Not a family at all: refused in every lane, whatever the build serves.
    let (_c2, h2) = fake(9);
    let corrupt = &*h2 as *const rust_gin_handle as usize;
    wave(lanes(2), |_| {
        // SAFETY: as above.
        let s = unsafe { dev::rust_gin_signal_peer(corrupt as *const c_void, 0, 1, signal_indexed(3, RUST_GIN_SIGNAL_OP_INC, 0), 0) };
        assert_eq!(s, RUST_GIN_ERR_INVALID as i32, "family 9");
    });
}

/// The GIN cases every rerun below runs again in another configuration:
/// every operation from 1–64 lanes, the doorbell count per batch, many-lane
/// flushes and waits, and the eight-wave soak.
const GIN_CASES: [&str; 4] = [
    "every_gin_operation_from_1_2_17_63_and_64_lanes",
    "one_doorbell_per_queue_per_wave_batch",
    "flush_and_signal_waits_called_by_many_lanes_of_one_wave",
    "eight_waves_of_64_lanes_mixed_operations_depth_64",
];

/// DC initiators per context in the DC reruns: fewer than the ranks, so
/// peers share one, and a wave's lanes to different peers meet on one queue.

/// The GIN cases again on the DC transport (docs/architecture.md, "DC
/// transport"), with RERUN_DCIS initiators per context shared by the peers
/// (p mod 2).
#[test]
fn gin_cases_again_on_dc_initiators() {
    rerun_on_dc(RERUN_DCIS, &GIN_CASES);
}

/// Both at once: write-mode signals are slot WRITEs through the DCIs. The
/// merge of the two left the write-mode signal reading the RC peer layout
/// on DC (remote access errors); this rerun caught it.
#[test]
fn gin_cases_again_on_dc_with_write_mode_signals() {
    rerun_on_dc_in_write_mode(RERUN_DCIS, &GIN_CASES);
}

/// The signal cases above, again with every signal a slot write
/// (RCCL_RUST_GIN_SIGNAL_MODE=write), watched for totals that go backwards:
/// many lanes of one wave adding to the same signal of the same peer, and
/// eight waves at once.
#[test]
fn signal_cases_again_with_write_mode_signals() {
    rerun_in_write_mode(&GIN_CASES);
}

/// The GIN cases on the emulated bnxt_re and ionic NICs, each in both
/// signal modes: lanes of a wave posting those families' WQEs, bnxt_re's
/// MSN-table PSNs assigned under the publish turn in lane order, ionic's
/// kept-free ring slot, and their flush WRITEs after gets.
#[test]
fn gin_cases_again_on_bnxt_re_and_ionic() {
    rerun_on_families(&GIN_CASES);
}

/// The same on bnxt_re with its doorbells grouped per peer's queue
/// (RCCL_RUST_GIN_BNXT_DOORBELL=peer) rather than one per WQE: the option
/// mori#421 reached line rate with (docs/nic-families.md, "Field quirks as
/// policies").
#[test]
fn gin_cases_again_on_bnxt_re_with_per_peer_doorbells() {
    rerun_on_bnxt_with_peer_doorbells(&GIN_CASES);
}

/// The single-wave GIN cases again with every put, putValue, signal and get
/// through the *_exclusive entries: the wave owns its queues (RCCL's THREAD
/// sharing) and posts with no ticket or turn, on every family. Between the
/// owner's posts the shared path runs on the same queues (the flushes' NOPs
/// and DUMPs take tickets), so the two meet on one queue in turn. Not the
/// eight-wave soak: its waves share queues.
#[test]
fn gin_cases_again_on_exclusive_queues() {
    rerun_exclusive(&GIN_CASES[..3]);
}

/// An exclusive put refused by name, not run: on a queue another producer
/// is posting to (a ticket taken and not yet published: the shared
/// protocol's state mid-post, set by hand), and on a DC context (rerun on
/// DC), whose initiators serve several peers. Nothing is posted; the queue
/// stays usable.
#[test]
fn exclusive_puts_where_the_wave_cannot_own_the_queue_are_refused() {
    let w = world(256);
    let h = w.handle();
    let put_one = |peer: u32| {
        let s = std::sync::atomic::AtomicI32::new(0);
        wave(lanes(1), |_| {
            // SAFETY: live handle and windows.
            let r = unsafe {
                dev::rust_gin_put_exclusive(h, 0, peer, w.dst[0].gh, 0, w.src[0].gh, 0, 8, NO_SIGNAL, 0, 0, 0)
            };
            s.store(r, Ordering::Relaxed);
        });
        s.into_inner()
    };
    let refused = |s: i32, why: &str| {
        assert_eq!(s, RUST_GIN_ERR_INVALID as i32, "{why}: exclusive put not refused");
        let e = w.error().expect("the refusal is recorded");
        assert_eq!(e.wait_kind as u32, RUST_GIN_ARG_NOT_EXCLUSIVE, "{why}: {e}");
    };
    if dc_asked() {
        assert!(context_dcis(h, 0) > 0, "the DC rerun has DC initiators");
        refused(put_one(1), "DC context");
        return;
    }
    // A producer mid-post on the queue to peer 1: its ticket taken, not published.
    let state = w.sq_state_ptr(0, 1);
    // SAFETY: the live queue state of rank 0's queue to peer 1; nothing posts meanwhile.
    unsafe { (*state).resv += 1 };
    refused(put_one(1), "ticket in flight");
    // SAFETY: as above: the phantom ticket withdrawn.
    unsafe { (*state).resv -= 1 };
    w.clear_error();
    assert_eq!(put_one(1), 0, "the queue once no one else posts");
    assert!(w.error().is_none(), "{:?}", w.error());
}

#[test]
fn exclusive_puts_on_dc_are_refused() {
    rerun_on_dc(RERUN_DCIS, &["exclusive_puts_where_the_wave_cannot_own_the_queue_are_refused"]);
}
