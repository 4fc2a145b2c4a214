//! Write-mode signals (RCCL_RUST_GIN_SIGNAL_MODE=write; docs/nic-families.md,
//! section 7) on the emulated mlx5 NIC, ranks as threads: what lands in the
//! slots, a reset racing updates in flight, a bounded wait that times out,
//! and VA signals refused. The signal cases shared with atomic mode run in
//! both modes from tests/gin_vtable.rs and tests/lockstep.rs.

#[path = "support/gin_flow.rs"]
mod gin_flow;
#[path = "support/rccl_host.rs"]
mod rccl_host;

use gin_flow::*;
use rccl_host::*;
use rccl_rust_gin::abi::*;
use rccl_rust_gin::device::{self as dev, DeviceError};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

/// Every test of this binary runs in write mode: set before the plugin reads
/// its knobs (at init).
fn write_mode_plugin() -> &'static Plugin {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: before any thread of this test reads the environment
        // (every test calls this first; Once orders them).
        unsafe { std::env::set_var("RCCL_RUST_GIN_SIGNAL_MODE", "write") };
    });
    plugin()
}

struct Ctx {
    r: Rank,
    gctx: *mut c_void,
    h: *const c_void,
}

/// Connects `n` ranks as threads, creates a context set on each, and runs
/// `body(rank, ctx, barrier)`; then checks the error record as `expect_error`
/// says and tears down.
fn ranks(n: usize, expect_error: bool, body: impl Fn(usize, &Ctx, &dyn Fn()) + Sync) {
    let p = write_mode_plugin();
    Exchange::as_threads(n, |rank, ex| {
        let mut r = p.open_rank(rank as i32, n as i32);
        let all = ex.allgather(rank, r.handle);
        assert_eq!(p.connect(&mut r, &all), OK, "connect");
        let mut cfg = default_config();
        let (res, gctx, dh) = p.create_context(r.coll, &mut cfg);
        assert_eq!(res, OK, "createContext");
        // SAFETY: a live device handle.
        let h = unsafe { (*dh).handle } as *const c_void;
        assert_eq!(context_signal_mode(h, 0), RUST_GIN_SIGNAL_MODE_WRITE);
        assert_transport(h); // and the NIC family this process asked for
        let c = Ctx { r, gctx, h };
        ex.barrier();
        body(rank, &c, &|| ex.barrier());
        ex.barrier();
        let (q, has) = p.query_error(c.gctx);
        assert_eq!(q, OK);
        if !expect_error {
            assert!(!has, "rank {rank}: device-side error {:?}", error(c.h));
        }
        ex.barrier();
        assert_eq!(p.call_ptr(p.v.destroy_context, c.gctx), OK);
        ex.barrier();
        assert_eq!(p.call_ptr(p.v.close_coll, c.r.coll), OK);
        assert_eq!(p.call_ptr(p.v.finalize, c.r.ctx), OK);
    });
}

fn error(h: *const c_void) -> Option<DeviceError> {
    // SAFETY: a live handle and its error record.
    unsafe { DeviceError::from_record(&*((*(h as *const rust_gin_handle)).error as *const rust_gin_error)) }
}

fn context(h: *const c_void, c: u32) -> rust_gin_context {
    // SAFETY: a live handle; contexts as createContext wrote them.
    unsafe { *((*(h as *const rust_gin_handle)).contexts as *const rust_gin_context).add(c as usize) }
}

/// Slot `sender` of signal `id`, context `c`, at the rank that owns `h`.
fn slot(h: *const c_void, c: u32, sender: usize, id: u32) -> u64 {
    let x = context(h, c);
    let at = x.signal_slots as usize + 8 * (sender * x.n_signals as usize + id as usize);
    // SAFETY: inside the slot table (host memory of the emulated NIC).
    unsafe { (*(at as *const AtomicU64)).load(Ordering::Acquire) }
}

/// This rank's running total towards `peer` for signal `id`, context `c`.
fn total(h: *const c_void, c: u32, peer: usize, id: u32) -> u64 {
    let x = context(h, c);
    let at = x.signal_totals as usize + 8 * (peer * x.n_signals as usize + id as usize);
    // SAFETY: inside the totals table.
    unsafe { (*(at as *const AtomicU64)).load(Ordering::Acquire) }
}

fn signal(id: u64, value: u64) -> rust_gin_signal {
    signal_indexed(id, RUST_GIN_SIGNAL_OP_ADD, value)
}

#[test]
fn each_sender_writes_its_running_total_into_its_own_slot() {
    ranks(3, false, |me, c, sync| {
        // SAFETY (device calls): a live handle.
        unsafe {
            for peer in 0..3u32 {
                for v in [5u64, 7, 11] {
                    assert_eq!(dev::rust_gin_signal_peer(c.h, 1, peer, signal(2, v * (me as u64 + 1)), 0), 0);
                }
                assert_eq!(dev::rust_gin_signal_peer(c.h, 1, peer, signal_indexed(3, RUST_GIN_SIGNAL_OP_INC, 0), 0), 0);
            }
            assert_eq!(dev::rust_gin_flush(c.h, 1, 0, 1, std::ptr::null(), 0), 0);
            // Everyone's adds: 23 * (1 + 2 + 3).
            assert_eq!(dev::rust_gin_signal_wait(c.h, 1, 2, 23 * 6, std::ptr::null(), 0), 0);
            assert_eq!(dev::rust_gin_signal_wait(c.h, 1, 3, 3, std::ptr::null(), 0), 0);
        }
        sync();
        for s in 0..3usize {
            assert_eq!(slot(c.h, 1, s, 2), 23 * (s as u64 + 1), "rank {me}: slot of sender {s}, signal 2");
            assert_eq!(slot(c.h, 1, s, 3), 1, "rank {me}: slot of sender {s}, signal 3");
            assert_eq!(slot(c.h, 1, s, 0), 0, "rank {me}: signal 0 was never sent");
            assert_eq!(slot(c.h, 0, s, 2), 0, "rank {me}: context 0 is a table of its own");
            assert_eq!(total(c.h, 1, s, 2), 23 * (me as u64 + 1), "rank {me}: total towards {s}");
        }
        // The word RCCL polls is the fold of the slots, at rest.
        let mut off = 0;
        // SAFETY: a live handle.
        let w = unsafe { dev::rust_gin_signal_ptr(c.h, 1, 2, &mut off) };
        // SAFETY: the signal word rust_gin_signal_ptr returned.
        assert_eq!(unsafe { *w } - off, 23 * 6);
    });
}

#[test]
fn a_reset_racing_updates_in_flight_loses_none() {
    const K: u64 = 3000;
    let offset_seen = AtomicU64::new(0);
    ranks(2, false, |me, c, sync| {
        if me == 0 {
            // Signals in bursts, rung every 64, not flushed until the end: many
            // are in flight when rank 1 resets.
            for i in 0..K {
                let flags = if i % 64 == 63 { 0 } else { RUST_GIN_FLAG_AGGREGATE };
                // SAFETY: a live handle.
                let s = unsafe { dev::rust_gin_signal_peer(c.h, 0, 1, signal_indexed(1, RUST_GIN_SIGNAL_OP_INC, 0), flags) };
                assert_eq!(s, 0);
            }
            // SAFETY: a live handle.
            assert_eq!(unsafe { dev::rust_gin_flush(c.h, 0, 0, 1, std::ptr::null(), 0) }, 0);
            sync();
        } else {
            // SAFETY (device calls): a live handle.
            unsafe {
                let t = std::time::Instant::now();
                while dev::rust_gin_signal_read(c.h, 0, 1) < K / 3 {
                    assert!(t.elapsed().as_secs() < 20, "signals never came");
                    std::hint::spin_loop();
                }
                dev::rust_gin_signal_reset(c.h, 0, 1);
                let mut off = 0;
                let _ = dev::rust_gin_signal_ptr(c.h, 0, 1, &mut off);
                offset_seen.store(off, Ordering::Relaxed);
                sync();
                // Every update is counted exactly once: the word reaches K, and
                // the value after the reset is what arrived after it.
                assert_eq!(dev::rust_gin_signal_wait(c.h, 0, 1, K - off, std::ptr::null(), 0), 0);
                let mut off2 = 0;
                let w = dev::rust_gin_signal_ptr(c.h, 0, 1, &mut off2);
                assert_eq!(off2, off, "nothing but the reset moves the offset");
                assert_eq!(*w, K, "the folded word counts every signal once");
                assert_eq!(dev::rust_gin_signal_read(c.h, 0, 1), K - off);
                assert_eq!(slot(c.h, 0, 0, 1), K, "the sender's slot holds its total");
            }
        }
    });
    let off = offset_seen.load(Ordering::Relaxed);
    println!("reset at {off} of {K} signals");
    assert!(off >= K / 3 && off <= K, "the reset happened while signals arrived ({off})");
}

#[test]
fn a_signal_wait_that_nothing_satisfies_times_out() {
    ranks(2, true, |me, c, _| {
        if me != 1 {
            return;
        }
        // SAFETY: a live handle.
        let s = unsafe { dev::rust_gin_signal_wait(c.h, 0, 3, 1, std::ptr::null(), 20_000) };
        assert_eq!(s, RUST_GIN_ERR_TIMEOUT as i32, "a bounded write-mode wait ends");
        let e = error(c.h).expect("the timeout is recorded");
        assert_eq!(e.code, RUST_GIN_ERR_TIMEOUT);
        let text = e.to_string();
        assert!(text.contains("signal"), "{text}");
    });
}

#[test]
fn va_signals_are_refused_with_the_reason() {
    let p = write_mode_plugin();
    ranks(2, true, |me, c, sync| {
        let w = register(p, c.r.coll, 64);
        sync();
        if me == 0 {
            // SAFETY: a live handle and window.
            unsafe {
                let s = dev::rust_gin_signal_peer(c.h, 0, 1, signal_va(&w, 8), 0);
                assert_eq!(s, RUST_GIN_ERR_INVALID as i32, "VA signal in write mode");
                let s = dev::rust_gin_put(c.h, 0, 1, w.gh, 0, w.gh, 0, 8, signal_va(&w, 8), 0, 0, 0);
                assert_eq!(s, RUST_GIN_ERR_INVALID as i32, "put with a VA signal in write mode");
            }
            let e = error(c.h).expect("the refusal is recorded");
            assert_eq!(e.code, RUST_GIN_ERR_INVALID);
            let text = e.to_string();
            assert!(text.contains("VA signal refused") && text.contains("no remote atomics"), "{text}");
        }
        sync();
        if me == 1 {
            assert_eq!(w.buf.atomic_u64(8).load(Ordering::Acquire), 0, "the refused signal never landed");
        }
        sync();
        // SAFETY: a valid token.
        assert_eq!(unsafe { (p.v.dereg_mr_sym.unwrap())(c.r.coll, w.mh) }, OK);
    });
}

/// The properties RCCL reads before choosing a backend: no VA signals when
/// the knob says write.
#[test]
fn gin_properties_say_no_va_signals() {
    let p = write_mode_plugin();
    let (r, ctx) = p.init();
    assert_eq!(r, OK);
    let mut gp = rccl_rust_gin::ffi::gin::NcclGinProperties::default();
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { (p.v.get_gin_properties.unwrap())(&mut gp) }, OK);
    assert!(gp.supports_strong_signals && !gp.supports_va_signals);
    assert_eq!(p.call_ptr(p.v.finalize, ctx), OK);
}

/// The slot-write cases again on the emulated bnxt_re and ionic NICs, the
/// families whose signals are slot writes on the hardware (auto picks them).
#[test]
fn the_same_cases_on_bnxt_re_and_ionic() {
    rerun_on_families_in_modes(
        &["auto"],
        &[
            "each_sender_writes_its_running_total_into_its_own_slot",
            "a_reset_racing_updates_in_flight_loses_none",
            "a_signal_wait_that_nothing_satisfies_times_out",
            "va_signals_are_refused_with_the_reason",
            "a_put_larger_than_one_bnxt_wqe_lands_whole",
        ],
    );
}

/// The tickets (WQEs) the send queue of context `c` towards `peer` handed
/// out: a bnxt_re or ionic context's (rust_gin_nic_peer) queue state.
fn nic_tickets(h: *const c_void, c: u32, peer: u32) -> u64 {
    let x = context(h, c);
    // SAFETY: a family context's peer array and the queue state its
    // descriptor names (host memory of the emulated NIC).
    unsafe {
        let d = &*((x.peers as *const rust_gin_nic_peer).add(peer as usize));
        (*(d.sq.state as *const AtomicU64)).load(Ordering::Acquire) // resv, the state's first word
    }
}

/// A put larger than one bnxt_re WQE (16 MiB, a field quirk:
/// torchcomms#2714, mori#421) lands whole, every byte, on every family;
/// on bnxt_re as 16 + 16 + 8 MiB WQEs (and the signal's), since the
/// emulated Thor2 fails a larger WQE with a length error
/// (tests/emu_families.rs). Checked by hand (2026-12-06): with bnxt's
/// kMaxWqeBytes at 1 GiB the bnxt_re rerun fails with that error.
#[test]
fn a_put_larger_than_one_bnxt_wqe_lands_whole() {
    const BYTES: usize = (40 << 20) + 3;
    let p = write_mode_plugin();
    ranks(2, false, |me, c, sync| {
        let src = register(p, c.r.coll, BYTES);
        let dst = register(p, c.r.coll, BYTES);
        let data: Vec<u8> = (0..BYTES).map(|i| pattern(me, i)).collect();
        src.buf.try_write(0, &data).unwrap();
        sync();
        let peer = 1 - me as u32;
        let bnxt = family_asked() == Some(RUST_GIN_FAMILY_BNXT);
        let before = if bnxt { nic_tickets(c.h, 0, peer) } else { 0 };
        // SAFETY (device calls): a live handle and windows.
        unsafe {
            assert_eq!(dev::rust_gin_put(c.h, 0, peer, dst.gh, 0, src.gh, 0, BYTES as u64, signal(1, 1), 0, 0, 0), 0);
            assert_eq!(dev::rust_gin_signal_wait(c.h, 0, 1, 1, std::ptr::null(), 0), 0);
        }
        if bnxt {
            assert_eq!(nic_tickets(c.h, 0, peer) - before, 4, "rank {me}: three data WQEs of at most 16 MiB, then the signal");
        }
        let mut got = vec![0u8; BYTES];
        dst.buf.read(0, &mut got);
        let from = 1 - me;
        if let Some(i) = (0..BYTES).find(|&i| got[i] != pattern(from, i)) {
            panic!("rank {me}: byte {i} of the put from rank {from} is {:#x}, expected {:#x}", got[i], pattern(from, i));
        }
        sync();
        for w in [&dst, &src] {
            // SAFETY: valid tokens; nobody reads them any more.
            assert_eq!(unsafe { (p.v.dereg_mr_sym.unwrap())(c.r.coll, w.mh) }, OK, "deregMrSym");
        }
    });
}
