//! One rank's whole life as RCCL drives it, with every device operation
//! checked end to end (bytes, signal values, counter values). Used by the
//! thread and process tests.

#![allow(dead_code)]

use super::rccl_host::*;
use rccl_rust_gin::abi::*;
use rccl_rust_gin::device as dev;
use rccl_rust_gin::ffi::nccl::*;
use rccl_rust_gin::gpu::{Allocator, GpuBuf, HostMemory, Object};
use std::ffi::c_void;

pub struct Win {
    pub buf: GpuBuf,
    pub mh: *mut c_void,
    pub gh: *const c_void,
}

pub fn register(p: &Plugin, coll: *mut c_void, size: usize) -> Win {
    let buf = HostMemory.alloc(size, 4096, Object::WindowData).unwrap();
    let (r, mh, gh) = p.reg(coll, buf.dev_addr() as *mut c_void, size, NCCL_PTR_CUDA);
    assert_eq!(r, OK, "regMrSym of {size} bytes");
    assert!(!mh.is_null() && !gh.is_null());
    Win { buf, mh, gh: gh as *const c_void }
}

pub fn pattern(rank: usize, i: usize) -> u8 {
    (rank * 31 + i * 7 + 1) as u8
}

pub fn signal_indexed(id: u64, op: u32, value: u64) -> rust_gin_signal {
    rust_gin_signal { type_: RUST_GIN_SIGNAL_INDEXED, op, value, id, window: std::ptr::null(), offset: 0 }
}

pub fn signal_va(w: &Win, offset: u64) -> rust_gin_signal {
    rust_gin_signal { type_: RUST_GIN_SIGNAL_VA, op: RUST_GIN_SIGNAL_OP_INC, value: 0, id: 0, window: w.gh, offset }
}

pub const NO_SIGNAL: rust_gin_signal =
    rust_gin_signal { type_: RUST_GIN_SIGNAL_NONE, op: 0, value: 0, id: 0, window: std::ptr::null(), offset: 0 };

/// The collective part after connect: contexts, windows, operations, checks,
/// teardown. `sync` is a barrier across ranks.
/// The transport this process runs on (RCCL_RUST_GIN_TRANSPORT, rc unless
/// a test binary sets dc: tests/gin_dc.rs) is the one every context of the
/// handle has: DC initiators, RCCL_RUST_GIN_DCIS of them (default 4), or
/// none (RC).
pub fn assert_transport(h: *const c_void) {
    let dc = std::env::var("RCCL_RUST_GIN_TRANSPORT").is_ok_and(|v| v == "dc");
    let want = if dc { std::env::var("RCCL_RUST_GIN_DCIS").map_or(4, |v| v.parse().unwrap()) } else { 0 };
    // SAFETY: a live device handle and its context array (host memory here).
    unsafe {
        let handle = &*(h as *const rust_gin_handle);
        for c in 0..handle.n_contexts as usize {
            let ctx = &*((handle.contexts as *const rust_gin_context).add(c));
            assert_eq!(ctx.n_dci, want, "context {c}: DC initiators (RCCL_RUST_GIN_TRANSPORT dc: {dc})");
            assert_eq!(ctx.dcis != 0, dc);
            let family = super::rccl_host::family_asked().unwrap_or(rccl_rust_gin::abi::RUST_GIN_FAMILY_MLX5);
            assert_eq!(ctx.family, family, "context {c}: NIC family (RCCL_RUST_GIN_EMU_FAMILY)");
        }
    }
}

pub fn run_connected(p: &Plugin, r: &Rank, sync: &dyn Fn()) {
    let n = r.nranks as usize;
    let me = r.rank as usize;
    let mut cfg = default_config();
    let (res, gctx, dh) = p.create_context(r.coll, &mut cfg);
    assert_eq!(res, OK, "createContext");
    // SAFETY: createContext returned a device handle it owns until destroyContext.
    let dh = unsafe { &*dh };
    assert_eq!(dh.net_device_type, NCCL_NET_DEVICE_GIN_RUST);
    assert_eq!(dh.net_device_version as u32, RUST_GIN_DEVICE_ABI_VERSION);
    assert_eq!(dh.needs_proxy_progress, 0, "the emulated NIC runs its own thread");
    assert!(!dh.handle.is_null());
    let h = dh.handle as *const c_void;
    // The signal mode this process asked for is the one the contexts got.
    let write = write_mode_asked();
    let want = if write { RUST_GIN_SIGNAL_MODE_WRITE } else { RUST_GIN_SIGNAL_MODE_ATOMIC };
    for c in 0..cfg.n_contexts as u32 {
        assert_eq!(context_signal_mode(h, c), want, "context {c}: signal mode");
    }
    assert_transport(h);

    let src = register(p, r.coll, 4096);
    let dst = register(p, r.coll, n * 4096 + n * 8);
    let sig = register(p, r.coll, n * 8);
    let got = register(p, r.coll, 4096);
    let bytes: Vec<u8> = (0..4096).map(|i| pattern(me, i)).collect();
    src.buf.write(0, &bytes);
    sync();

    // SAFETY (all device calls below): the handle and windows are live; the
    // host build of the device library takes them as a kernel would.
    unsafe {
        for peer in 0..n as u32 {
            let s = dev::rust_gin_put(
                h, 0, peer, dst.gh, (me * 4096) as u64, src.gh, 0, 4096,
                signal_indexed(0, RUST_GIN_SIGNAL_OP_INC, 0), 1, 0, 0,
            );
            assert_eq!(s, 0, "put to {peer}");
            let s = dev::rust_gin_put_value(
                h, 1, peer, dst.gh, (n * 4096 + me * 8) as u64, (1000 * me + peer as usize) as u64, 8,
                signal_indexed(1, RUST_GIN_SIGNAL_OP_ADD, 5), RUST_GIN_FLAG_AGGREGATE,
            );
            assert_eq!(s, 0, "putValue to {peer}");
            // No VA signals in write mode (refused: tests/signal_slots.rs).
            if !write {
                assert_eq!(dev::rust_gin_signal_peer(h, 0, peer, signal_va(&sig, (me * 8) as u64), 0), 0, "VA signal");
            }
        }
        // Aggregated putValues are published but maybe not rung: a flush rings.
        assert_eq!(dev::rust_gin_flush(h, 1, 0, 1, std::ptr::null(), 0), 0, "flush context 1");
        assert_eq!(dev::rust_gin_counter_read(h, 0, 0), n as u64, "one local completion per put");
        assert_eq!(dev::rust_gin_signal_wait(h, 0, 0, n as u64, std::ptr::null(), 0), 0, "every peer's put signal");
        assert_eq!(dev::rust_gin_signal_read(h, 0, 0), n as u64);
        assert_eq!(dev::rust_gin_signal_wait(h, 1, 1, 5 * n as u64, std::ptr::null(), 0), 0, "putValue signals");
        assert_eq!(dev::rust_gin_signal_read(h, 1, 1), 5 * n as u64, "signal add");
        assert_eq!(dev::rust_gin_flush(h, 0, 0, 1, std::ptr::null(), 0), 0, "flush context 0");
    }
    // Signals arrived after their data: check the data.
    for s in 0..n {
        let mut slot = vec![0u8; 4096];
        dst.buf.read(s * 4096, &mut slot);
        assert!(slot.iter().enumerate().all(|(i, b)| *b == pattern(s, i)), "rank {me}: data from rank {s}");
        let mut w = [0u8; 8];
        dst.buf.read(n * 4096 + s * 8, &mut w);
        assert_eq!(u64::from_ne_bytes(w), (1000 * s + me) as u64, "rank {me}: putValue from rank {s}");
    }
    // VA signals: one increment from every rank, in this rank's window.
    let t = std::time::Instant::now();
    for s in (0..n).filter(|_| !write) {
        while sig.buf.atomic_u64(s * 8).load(std::sync::atomic::Ordering::Acquire) != 1 {
            assert!(t.elapsed().as_secs() < 20, "rank {me}: VA signal from rank {s} never came");
            std::thread::yield_now();
        }
    }
    // SAFETY: as above.
    unsafe {
        // get from the next rank, then flushAsync + wait.
        let peer = ((me + 1) % n) as u32;
        assert_eq!(dev::rust_gin_get(h, 0, peer, src.gh, 0, got.gh, 0, 4096, 0), 0, "get");
        let mut req = rust_gin_request::default();
        assert_eq!(dev::rust_gin_flush_async(h, 0, peer, &mut req), 0);
        assert_eq!(dev::rust_gin_wait(h, req, std::ptr::null(), 0), 0, "wait for the get");
        let mut g = vec![0u8; 4096];
        got.buf.read(0, &mut g);
        assert!(g.iter().enumerate().all(|(i, b)| *b == pattern(peer as usize, i)), "rank {me}: get from {peer}");

        // Resets.
        dev::rust_gin_signal_reset(h, 0, 0);
        assert_eq!(dev::rust_gin_signal_read(h, 0, 0), 0, "reset moves the offset");
        let mut off = 0u64;
        let raw = dev::rust_gin_signal_ptr(h, 0, 0, &mut off);
        assert_eq!(*raw - off, 0);
        assert_eq!(*raw, n as u64, "the signal word itself is never rewritten");
        dev::rust_gin_counter_reset(h, 0, 0);
        assert_eq!(dev::rust_gin_counter_read(h, 0, 0), 0);
        dev::rust_gin_va_signal_reset(sig.gh, 0);
        assert_eq!(sig.buf.atomic_u64(0).load(std::sync::atomic::Ordering::Acquire), 0);
        assert_eq!(dev::rust_gin_supports_strong_signal(h), 1);
    }
    teardown(p, r, gctx, &[&src, &dst, &sig, &got], sync);
}

/// The end of a rank's life: no device-side error, then (after every rank
/// is done with them) the windows deregistered, the context destroyed, the
/// comm closed and the plugin finalized, as RCCL does.
pub fn teardown(p: &Plugin, r: &Rank, gctx: *mut c_void, windows: &[&Win], sync: &dyn Fn()) {
    let (q, has) = p.query_error(gctx);
    assert_eq!(q, OK);
    assert!(!has, "no device-side error");
    // Nobody deregisters while a peer may still read from it.
    sync();
    for w in windows {
        // SAFETY: valid tokens.
        assert_eq!(unsafe { (p.v.dereg_mr_sym.unwrap())(r.coll, w.mh) }, OK, "deregMrSym");
    }
    assert_eq!(p.call_ptr(p.v.destroy_context, gctx), OK, "destroyContext");
    sync();
    assert_eq!(p.call_ptr(p.v.close_coll, r.coll), OK, "closeColl");
    assert_eq!(p.call_ptr(p.v.finalize, r.ctx), OK, "finalize");
}
