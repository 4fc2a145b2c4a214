//! Puts with counters do not block (issue 11, part 3): the posting lane
//! returns after posting, and the counter advances once the put completed,
//! credited by whoever polls the queue (a counter read or wait). The NIC here
//! progresses only when ginProgress is called (RCCL_RUST_GIN_EMU_PROGRESS=
//! proxy), so a put that waited for its own completion could not return.

#[path = "support/gin_flow.rs"]
mod gin_flow;
#[path = "support/rccl_host.rs"]
mod rccl_host;

use gin_flow::{register, Win, NO_SIGNAL};
use rccl_host::*;
use rccl_rust_gin::abi::*;
use rccl_rust_gin::device as dev;
use std::ffi::c_void;
use std::time::{Duration, Instant};

const N: usize = 2;

struct World {
    ranks: Vec<Rank>,
    gctx: Vec<usize>,
    h: Vec<usize>,
    src: Vec<Win>,
    dst: Vec<Win>,
}

fn world() -> World {
    // SAFETY: set before the plugin starts any thread (first use in this process).
    unsafe { std::env::set_var("RCCL_RUST_GIN_EMU_PROGRESS", "proxy") };
    let p = in_process_plugin();
    let ex = Exchange::new(N);
    let parts: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..N)
            .map(|rank| {
                let ex = ex.clone();
                s.spawn(move || {
                    let mut r = p.open_rank(rank as i32, N as i32);
                    let all = ex.allgather(rank, r.handle);
                    assert_eq!(p.connect(&mut r, &all), OK);
                    let mut cfg = default_config();
                    cfg.queue_depth = 64;
                    let (res, gctx, dh) = p.create_context(r.coll, &mut cfg);
                    assert_eq!(res, OK);
                    // SAFETY: a live device handle.
                    let h = unsafe { (*dh).handle } as usize;
                    // RC here, DC in tests/gin_counters_dc.rs.
                    gin_flow::assert_transport(h as *const c_void);
                    let src = register(p, r.coll, 1 << 16);
                    let dst = register(p, r.coll, 1 << 16);
                    src.buf.write(0, &(0..1u32 << 16).map(|i| (i * 7 + rank as u32) as u8).collect::<Vec<_>>());
                    ex.barrier();
                    Part((r, gctx as usize, h, src, dst))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut w = World { ranks: vec![], gctx: vec![], h: vec![], src: vec![], dst: vec![] };
    for Part((r, g, h, src, dst)) in parts {
        w.ranks.push(r);
        w.gctx.push(g);
        w.h.push(h);
        w.src.push(src);
        w.dst.push(dst);
    }
    w
}

struct Part((Rank, usize, usize, Win, Win));
// SAFETY: opaque plugin tokens and host memory, used by one thread at a time.
unsafe impl Send for Part {}

impl World {
    fn progress(&self) {
        let p = in_process_plugin();
        for g in &self.gctx {
            assert_eq!(p.call_ptr(p.v.gin_progress, *g as *mut c_void), OK);
        }
    }
    /// Drives the NICs until rank 0's counter `id` reads `want`.
    fn counter_reaches(&self, id: u32, want: u64) {
        let t = Instant::now();
        loop {
            self.progress();
            // SAFETY: live handle.
            let v = unsafe { dev::rust_gin_counter_read(self.h[0] as *const c_void, 0, id) };
            if v == want {
                return;
            }
            assert!(v < want, "counter {id} went past {want}: {v}");
            assert!(t.elapsed() < Duration::from_secs(20), "counter {id} stuck at {v}, expected {want}");
            std::thread::yield_now();
        }
    }
    fn put(&self, off: u64, counter: u32) -> i32 {
        let h = self.h[0] as *const c_void;
        // SAFETY: live handle and windows.
        unsafe {
            dev::rust_gin_put(h, 0, 1, self.dst[0].gh, off, self.src[0].gh, off, 256, NO_SIGNAL, 1, counter, 0)
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let p = in_process_plugin();
        for r in 0..N {
            for w in [&self.src[r], &self.dst[r]] {
                // SAFETY: valid tokens.
                unsafe { (p.v.dereg_mr_sym.unwrap())(self.ranks[r].coll, w.mh) };
            }
            p.call_ptr(p.v.destroy_context, self.gctx[r] as *mut c_void);
            p.call_ptr(p.v.close_coll, self.ranks[r].coll);
            p.call_ptr(p.v.finalize, self.ranks[r].ctx);
        }
    }
}

#[test]
fn a_put_with_a_counter_returns_before_it_completes_and_the_counter_follows_completion() {
    let w = world();
    // No progress yet: the NIC has not even read the WQEs. The put returns.
    let t = Instant::now();
    assert_eq!(w.put(0, 1), 0, "put with counter 1");
    assert!(t.elapsed() < Duration::from_secs(5), "the put waited {:?}", t.elapsed());
    // SAFETY: live handle.
    assert_eq!(unsafe { dev::rust_gin_counter_read(w.h[0] as *const c_void, 0, 1) }, 0, "not complete yet");
    w.counter_reaches(1, 1);
    let mut got = vec![0u8; 256];
    w.dst[1].buf.read(0, &mut got);
    let mut want = vec![0u8; 256];
    w.src[0].buf.read(0, &mut want);
    assert_eq!(got, want, "the counted put landed");

    // Many more than the queue holds (depth 64), no read in between: every
    // one is counted (a counted slot is credited before it is reused).
    for i in 0..300u64 {
        assert_eq!(w.put((i % 200) * 256, 0), 0, "put {i}");
        if i % 16 == 0 {
            w.progress();
        }
    }
    w.counter_reaches(0, 300);

    // Reset while counted puts are outstanding: later completions count
    // from zero, none is lost or counted twice.
    let h = w.h[0] as *const c_void;
    // SAFETY: live handle.
    unsafe { dev::rust_gin_counter_reset(h, 0, 0) };
    for i in 0..10u64 {
        assert_eq!(w.put(i * 256, 0), 0);
    }
    w.counter_reaches(0, 10);
    // SAFETY: live handle.
    let e = unsafe { &*((*(h as *const rust_gin_handle)).error as *const rust_gin_error) };
    assert!(dev::DeviceError::from_record(e).is_none(), "{:?}", dev::DeviceError::from_record(e));
}

#[test]
fn a_counted_put_that_fails_fails_the_counter_wait_instead_of_hanging() {
    let w = world();
    let p = in_process_plugin();
    // Rank 1 deregisters the window rank 0 is about to write: its NIC refuses
    // the rkey, the put completes in error, and its counter never advances.
    // SAFETY: a valid token of rank 1, not used again (drop skips nothing:
    // deregistering twice is refused, not fatal).
    unsafe { (p.v.dereg_mr_sym.unwrap())(w.ranks[1].coll, w.dst[1].mh) };
    let r = w.put(0, 1);
    // SAFETY: live handle.
    let rec = unsafe { &*((*(w.h[0] as *const rust_gin_handle)).error as *const rust_gin_error) };
    assert_eq!(r, 0, "posting succeeds; the failure comes with the completion: {:?}", dev::DeviceError::from_record(rec));
    let h = w.h[0] as *const c_void;
    // Drive the NICs (a counter read polls the queue) until the error CQE
    // has been seen.
    let t = Instant::now();
    while dev::DeviceError::from_record(rec).is_none_or(|e| e.code != RUST_GIN_ERR_CQE) {
        w.progress();
        // SAFETY: live handle.
        unsafe { dev::rust_gin_counter_read(h, 0, 1) };
        assert!(t.elapsed() < Duration::from_secs(20), "the error CQE never came");
    }
    // SAFETY: live handle; no abort flag, the handle's timeout.
    let s = unsafe { dev::rust_gin_counter_wait(h, 0, 1, 1, std::ptr::null(), 0) };
    assert!(t.elapsed() < Duration::from_secs(5), "the wait did not return at once");
    assert_eq!(s, RUST_GIN_ERR_QP_FAILED as i32, "the wait reports the failed queue");
    // SAFETY: live handle.
    assert_eq!(unsafe { dev::rust_gin_counter_read(h, 0, 1) }, 0, "a failed put is not counted");
}

/// Both cases again on the emulated bnxt_re and ionic NICs, in both signal
/// modes: counted puts credited from those families' CQEs (one counter-log
/// entry per WQE), and a failed counted put seen in their error status.
#[test]
fn the_same_cases_on_bnxt_re_and_ionic() {
    rerun_on_families(&[
        "a_put_with_a_counter_returns_before_it_completes_and_the_counter_follows_completion",
        "a_counted_put_that_fails_fails_the_counter_wait_instead_of_hanging",
    ]);
}
