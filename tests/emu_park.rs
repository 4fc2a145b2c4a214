//! Parking (host/park.rs): a waiter of the device library's host build parks
//! on what it waits for, and the emulated NIC wakes exactly the threads
//! parked on what it wrote; writers that wake nobody are caught by the
//! waiter's bounded timeout. One test: the parked-thread count is global.

#[path = "support/emu.rs"]
mod emu;

use emu::*;
use rccl_rust_gin::emu::Fabric;
use rccl_rust_gin::park;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const SECOND: u64 = 1_000_000_000;

/// Parks on `addr` (a u64 word) as wave::spin does: register, look once
/// more, sleep. Returns (woken, the word seen after, seconds parked).
fn park_on(addr: u64, timeout: Duration) -> std::thread::JoinHandle<(bool, u64, f64)> {
    std::thread::spawn(move || {
        // SAFETY: the word lies in a registered buffer that outlives the
        // thread (joined before the buffer is dropped); read atomically.
        let word = unsafe { AtomicU64::from_ptr(addr as *mut u64) };
        let t = Instant::now();
        let p = park::begin(addr as usize);
        if word.load(Ordering::Acquire) != 0 {
            drop(p);
            return (true, word.load(Ordering::Acquire), 0.0);
        }
        let woken = p.wait(timeout);
        (woken, word.load(Ordering::Acquire), t.elapsed().as_secs_f64())
    })
}

fn wait_parked(n: usize) {
    let t = Instant::now();
    while park::parked() < n {
        assert!(t.elapsed() < Duration::from_secs(10), "{} of {n} threads parked", park::parked());
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn the_nic_wakes_exactly_the_parked_party_and_other_writers_hit_the_timeout() {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 1 << 16, ALL);
    let link = Link::new(&a, &a, 6, SECOND);
    let host = a.buf.host_addr().unwrap() as u64;
    // Three words: two on one page (one bucket), one on another page.
    let (w1, w3, w2) = (4096u64, 4096 + 64, 8192u64);
    let long = Duration::from_secs(20);
    let woken_before = park::woken();
    let t1 = park_on(host + w1, long);
    let t3 = park_on(host + w3, long);
    let t2 = park_on(host + w2, long);
    wait_parked(3);

    // The NIC adds 5 to w1 (a signal, as the responder of an atomic).
    link.sq.post(&[fetch_add(a.addr(32768), a.mr.lkey, a.addr(w1), a.mr.rkey, 5)]).unwrap();
    fabric.step_until_idle();
    let (woken, seen, secs) = t1.join().unwrap();
    assert!(woken && seen == 5, "the thread parked on the word was woken ({woken}, saw {seen})");
    assert!(secs < 10.0, "woken by the write, not by its timeout ({secs} s)");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(park::parked(), 2, "the threads parked on other words (one on the same page) sleep on");
    assert_eq!(park::woken() - woken_before, 1, "one wake-up for one parked party");

    // One WRITE of 8 bytes to w2, one to w3.
    link.sq
        .post(&[write_inline(7, 8, a.addr(w2), a.mr.rkey), write_inline(9, 8, a.addr(w3), a.mr.rkey)])
        .unwrap();
    fabric.step_until_idle();
    for (t, want) in [(t2, 7), (t3, 9)] {
        let (woken, seen, secs) = t.join().unwrap();
        assert!(woken && seen == want && secs < 10.0, "woken by its WRITE ({woken}, saw {seen}, {secs} s)");
    }
    assert_eq!(park::parked(), 0);

    // A writer that wakes nobody (a host thread's store): the park ends at
    // its timeout and the waiter sees the word then.
    let w4 = 12288u64;
    let t4 = park_on(host + w4, Duration::from_millis(200));
    wait_parked(1);
    // SAFETY: inside the registered buffer; the NIC is idle.
    unsafe { AtomicU64::from_ptr((host + w4) as *mut u64) }.store(1, Ordering::Release);
    let (woken, seen, secs) = t4.join().unwrap();
    assert!(!woken && seen == 1, "nobody woke it; its timeout ended the park ({woken}, saw {seen})");
    assert!(secs < 5.0, "the park is bounded ({secs} s)");
    assert!(link.sq.error().is_none());

    // End to end through the device library's host build: a completion
    // wait (wave::spin keyed on the CQ ring) parks while the NIC is idle,
    // and the NIC's CQE wakes it: the key the device code names is the
    // memory the NIC reports.
    let woken_before = park::woken();
    link.sq.post_deferred(&[signaled(write_inline(3, 8, a.addr(16384), a.mr.rkey))]).unwrap();
    link.sq.ring();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| link.sq.quiet());
        wait_parked(1);
        fabric.step_until_idle();
        assert!(waiter.join().unwrap().is_ok(), "the completion wait ends well");
    });
    assert!(park::woken() > woken_before, "the CQE woke the parked completion wait (not its timeout)");
    let mut w = [0u8; 8];
    a.buf.read(16384, &mut w);
    assert_eq!(u64::from_ne_bytes(w), 3);
}
