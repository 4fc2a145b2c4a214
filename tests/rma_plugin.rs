//! The RMA plugin driven as RCCL's proxy GIN drives it, ranks as threads on
//! the emulated NIC: init (twice, as rma.cc and the GIN proxy do), devices,
//! getProperties, getRmaProperties, listen, connect, createContext,
//! regMrSym, iput, iputSignal (with and without data), iget, iflush, test,
//! rmaProgress, queryLastError, deregMrSym, destroyContext, closeColl,
//! closeListen, finalize. Every exported version (v13..v17) runs a full flow
//! through the dlopened cdylib; then optFlags (doorbells counted by the
//! emulated NIC), the flushesAllPutsOnAnySignal claim, bad input and a fault.
//! The tests that read the NIC's counters (rccl_rust_gin::rma::plugin::nic_counters)
//! drive the vtable of the linked crate instead, whose objects that call sees.
//!
//! The cdylib is the one cargo test builds next to this test (see
//! rccl_host::cdylib_path).

#[path = "support/machine.rs"]
mod machine;
#[macro_use]
#[path = "support/mapped.rs"]
mod mapped;
#[path = "support/rccl_host.rs"]
mod rccl_host;
#[path = "support/impair.rs"]
mod impair;
#[path = "support/netns.rs"]
mod netns;
#[path = "support/ranks.rs"]
mod ranks;

use rccl_host::{cdylib_path, setup_env, Logger};
use rccl_rust_gin::ffi::nccl::*;
use rccl_rust_gin::ffi::rma::*;
use rccl_rust_gin::gpu::{Allocator, GpuBuf, HostMemory, Object};
use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

type P = *mut c_void;

thread_local! {
    /// The comm size of the rank this thread plays (run() sets it): v17's
    /// createContext takes the peer list, which the v16-shaped flow leaves
    /// to the Api.
    static RANKS: std::cell::Cell<c_int> = const { std::cell::Cell::new(0) };
}
const OK: NcclResult = NCCL_SUCCESS;
const NULL: P = std::ptr::null_mut();
const AGG: u32 = NCCL_RMA_OPT_FLAGS_AGGREGATE_REQUESTS;

// --- the plugin as RCCL sees it ------------------------------------------------

struct Harness {
    _lib: libloading::Library,
    v13: &'static NcclRmaV13,
    v14: &'static NcclRmaV14,
    v15: &'static NcclRmaV15,
    v16: &'static NcclRmaV16,
    v17: &'static NcclRmaV17,
    logger: Logger,
    log_lock: Mutex<()>,
}

fn harness() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(|| {
        setup_env();
        let path = cdylib_path();
        // SAFETY: our own cdylib; each symbol is a static of the declared layout.
        unsafe {
            let lib = libloading::Library::new(&path).unwrap_or_else(|e| {
                panic!("dlopen {} (cargo test or cargo build --lib makes it): {e}", path.display())
            });
            let v17: &'static NcclRmaV17 = &**lib.get::<*const NcclRmaV17>(b"ncclRmaPlugin_v17").unwrap();
            let v16: &'static NcclRmaV16 = &**lib.get::<*const NcclRmaV16>(b"ncclRmaPlugin_v16").unwrap();
            let v15: &'static NcclRmaV15 = &**lib.get::<*const NcclRmaV15>(b"ncclRmaPlugin_v15").unwrap();
            let v14: &'static NcclRmaV14 = &**lib.get::<*const NcclRmaV14>(b"ncclRmaPlugin_v14").unwrap();
            let v13: &'static NcclRmaV13 = &**lib.get::<*const NcclRmaV13>(b"ncclRmaPlugin_v13").unwrap();
            Harness { _lib: lib, v13, v14, v15, v16, v17, logger: Logger::build(), log_lock: Mutex::new(()) }
        }
    })
}

/// The linked crate's own vtable: its objects are visible to nic_counters.
fn linked() -> Api {
    harness();
    Api::V16(&rccl_rust_gin::rma::ncclRmaPlugin_v16)
}

/// One of the five exported layouts, called in the v16 shape.
#[derive(Clone, Copy)]
enum Api {
    V13(&'static NcclRmaV13),
    V14(&'static NcclRmaV14),
    V15(&'static NcclRmaV15),
    V16(&'static NcclRmaV16),
    V17(&'static NcclRmaV17),
}

macro_rules! slot {
    ($api:expr, $f:ident) => {
        match $api {
            Api::V13(v) => v.$f.unwrap(),
            Api::V14(v) => v.$f.unwrap(),
            Api::V15(v) => v.$f.unwrap(),
            Api::V16(v) => v.$f.unwrap(),
            Api::V17(v) => v.$f.unwrap(),
        }
    };
}

// SAFETY (every method): the plugin checks its arguments; tests pass valid
// pointers or deliberately bad ones the plugin must refuse.
#[allow(clippy::too_many_arguments)]
impl Api {
    fn version(self) -> u32 {
        match self {
            Api::V13(_) => 13,
            Api::V14(_) => 14,
            Api::V15(_) => 15,
            Api::V16(_) => 16,
            Api::V17(_) => 17,
        }
    }
    fn name(self) -> String {
        let n = match self {
            Api::V13(v) => v.name,
            Api::V14(v) => v.name,
            Api::V15(v) => v.name,
            Api::V16(v) => v.name,
            Api::V17(v) => v.name,
        };
        // SAFETY: a static C string.
        unsafe { CStr::from_ptr(n) }.to_string_lossy().into_owned()
    }
    fn init(self, ctx: *mut P) -> NcclResult {
        unsafe { slot!(self, init)(ctx, 0x5eed, harness().logger.func) }
    }
    fn devices(self, n: *mut c_int) -> NcclResult {
        unsafe { slot!(self, devices)(n) }
    }
    fn get_properties(self, dev: c_int, p: *mut NcclNetProperties) -> NcclResult {
        unsafe { slot!(self, get_properties)(dev, p) }
    }
    fn get_rma_properties(self, coll: P, p: *mut NcclRmaProperties) -> Option<NcclResult> {
        match self {
            Api::V16(v) => Some(unsafe { v.get_rma_properties.unwrap()(coll, p) }),
            Api::V17(v) => Some(unsafe { v.get_rma_properties.unwrap()(coll, p) }),
            _ => None,
        }
    }
    fn listen(self, ctx: P, dev: c_int, handle: P, lc: *mut P) -> NcclResult {
        unsafe { slot!(self, listen)(ctx, dev, handle, lc) }
    }
    fn connect(self, ctx: P, handles: *mut P, n: c_int, rank: c_int, lc: P, cc: *mut P) -> NcclResult {
        match self {
            Api::V13(v) => unsafe { v.connect.unwrap()(ctx, handles, n, rank, lc, cc) },
            Api::V14(v) => unsafe { v.connect.unwrap()(ctx, handles, n, rank, lc, cc) },
            Api::V15(v) => unsafe { v.connect.unwrap()(ctx, handles, n, rank, lc, cc) },
            Api::V16(v) => unsafe { v.connect.unwrap()(ctx, handles, n, rank, lc, cc) },
            // An abort flag RCCL never sets (the abort tests set theirs).
            Api::V17(v) => {
                static NEVER: u32 = 0;
                unsafe { v.connect.unwrap()(ctx, handles, n, rank, lc, cc, &NEVER) }
            }
        }
    }
    /// v17: createContext with a peer array.
    fn create_context_v17(self, coll: P, n_contexts: c_int, tc: c_int, peers: &[c_int]) -> (NcclResult, P) {
        let Api::V17(v) = self else { panic!("v17 only") };
        let mut cfg = NcclRmaConfigV17 {
            n_contexts,
            traffic_class: tc,
            peer_array: peers.as_ptr() as *mut c_int,
            peer_array_count: peers.len() as c_int,
        };
        let mut ctx = NULL;
        let r = unsafe { v.create_context.unwrap()(coll, &mut cfg, &mut ctx) };
        (r, ctx)
    }
    fn create_context(self, coll: P, n_contexts: c_int, tc: c_int, stride: c_int) -> (NcclResult, P) {
        let mut ctx = NULL;
        let r = match self {
            // NCCL's rma_proxy.cc turns a rank stride into the peers at that
            // stride from this rank (self included); stride 1 is everyone.
            Api::V17(_) => {
                assert_eq!(stride, 1, "v17 tests with other peer sets call create_context_v17");
                let n = RANKS.with(|r| r.get());
                return self.create_context_v17(coll, n_contexts, tc, &(0..n).collect::<Vec<_>>());
            }
            Api::V13(v) => {
                let mut cfg = NcclGinConfigV13 { n_contexts, traffic_class: tc, ..Default::default() };
                let mut dh: *mut NcclNetDeviceHandle = std::ptr::null_mut();
                let r = unsafe { v.create_context.unwrap()(coll, &mut cfg, &mut ctx, &mut dh) };
                if r == OK {
                    // SAFETY: the context's handle, alive until destroyContext.
                    let h = unsafe { &*dh };
                    assert_eq!(h.net_device_type, NCCL_NET_DEVICE_GIN_PROXY, "v13 device handle type");
                    assert_eq!(h.net_device_version, NCCL_GIN_PROXY_VERSION);
                    assert_eq!(h.needs_proxy_progress, 1);
                    assert!(h.handle.is_null() && h.size == 0, "no device-side object");
                }
                r
            }
            _ => {
                let mut cfg = NcclRmaConfig { n_contexts, traffic_class: tc, rank_stride: stride };
                let f = match self {
                    Api::V14(v) => v.create_context.unwrap(),
                    Api::V15(v) => v.create_context.unwrap(),
                    Api::V16(v) => v.create_context.unwrap(),
                    Api::V13(_) | Api::V17(_) => unreachable!(),
                };
                unsafe { f(coll, &mut cfg, &mut ctx) }
            }
        };
        (r, ctx)
    }
    fn create_context_raw(self, coll: P, cfg: *mut NcclRmaConfig, ctx: *mut P) -> NcclResult {
        match self {
            Api::V16(v) => unsafe { v.create_context.unwrap()(coll, cfg, ctx) },
            _ => panic!("v16 only"),
        }
    }
    fn reg(self, coll: P, data: P, size: usize, ty: c_int) -> (NcclResult, P) {
        let mut mh = NULL;
        let r = match self {
            Api::V13(v) => {
                let mut gh = NULL;
                let r = unsafe { v.reg_mr_sym.unwrap()(coll, data, size, ty, 0, &mut mh, &mut gh) };
                if r == OK {
                    assert_eq!(gh, mh, "v13: the ginHandle is the mhandle");
                }
                r
            }
            Api::V14(v) => unsafe { v.reg_mr_sym.unwrap()(coll, data, size, ty, 0, &mut mh) },
            Api::V15(v) => unsafe { v.reg_mr_sym.unwrap()(coll, data, size, ty, 0, &mut mh) },
            Api::V16(v) => unsafe { v.reg_mr_sym.unwrap()(coll, data, size, ty, 0, &mut mh) },
            Api::V17(v) => unsafe { v.reg_mr_sym.unwrap()(coll, data, size, ty, 0, &mut mh) },
        };
        (r, mh)
    }
    fn reg_dmabuf(self, coll: P, data: P, size: usize, fd: c_int) -> NcclResult {
        let mut mh = NULL;
        match self {
            Api::V13(v) => {
                let mut gh = NULL;
                unsafe { v.reg_mr_sym_dma_buf.unwrap()(coll, data, size, NCCL_PTR_CUDA, 0, fd, 0, &mut mh, &mut gh) }
            }
            Api::V14(v) => unsafe { v.reg_mr_sym_dma_buf.unwrap()(coll, data, size, NCCL_PTR_CUDA, 0, fd, 0, &mut mh) },
            Api::V15(v) => unsafe { v.reg_mr_sym_dma_buf.unwrap()(coll, data, size, NCCL_PTR_CUDA, 0, fd, 0, &mut mh) },
            Api::V16(v) => unsafe { v.reg_mr_sym_dma_buf.unwrap()(coll, data, size, NCCL_PTR_CUDA, 0, fd, 0, &mut mh) },
            Api::V17(v) => unsafe { v.reg_mr_sym_dma_buf.unwrap()(coll, data, size, NCCL_PTR_CUDA, 0, fd, 0, &mut mh) },
        }
    }
    fn dereg(self, coll: P, mh: P) -> NcclResult {
        unsafe { slot!(self, dereg_mr_sym)(coll, mh) }
    }
    fn destroy(self, ctx: P) -> NcclResult {
        unsafe { slot!(self, destroy_context)(ctx) }
    }
    fn close_coll(self, coll: P) -> NcclResult {
        unsafe { slot!(self, close_coll)(coll) }
    }
    fn close_listen(self, l: P) -> NcclResult {
        unsafe { slot!(self, close_listen)(l) }
    }
    fn finalize(self, ctx: P) -> NcclResult {
        unsafe { slot!(self, finalize)(ctx) }
    }
    /// iput; v13 and v14 have no optFlags (the plugin behaves as with 0).
    fn iput(
        self,
        ctx: P,
        c: c_int,
        so: u64,
        smh: P,
        size: usize,
        doff: u64,
        dmh: P,
        rank: u32,
        flags: u32,
        req: *mut P,
    ) -> NcclResult {
        match self {
            Api::V13(v) => unsafe { v.iput.unwrap()(ctx, c, so, smh, size, doff, dmh, rank, req) },
            Api::V14(v) => unsafe { v.iput.unwrap()(ctx, c, so, smh, size, doff, dmh, rank, req) },
            Api::V15(v) => unsafe { v.iput.unwrap()(ctx, c, so, smh, size, doff, dmh, rank, flags, req) },
            Api::V16(v) => unsafe { v.iput.unwrap()(ctx, c, so, smh, size, doff, dmh, rank, flags, req) },
            Api::V17(v) => unsafe { v.iput.unwrap()(ctx, c, so, smh, size, doff, dmh, rank, flags, req) },
        }
    }
    fn iput_signal(
        self,
        ctx: P,
        c: c_int,
        so: u64,
        smh: P,
        size: usize,
        doff: u64,
        dmh: P,
        rank: u32,
        sigoff: u64,
        sigmh: P,
        value: u64,
        op: u32,
        flags: u32,
        req: *mut P,
    ) -> NcclResult {
        match self {
            Api::V13(v) => unsafe {
                v.iput_signal.unwrap()(ctx, c, so, smh, size, doff, dmh, rank, sigoff, sigmh, value, op, req)
            },
            Api::V14(v) => unsafe {
                v.iput_signal.unwrap()(ctx, c, so, smh, size, doff, dmh, rank, sigoff, sigmh, value, op, true, req)
            },
            Api::V15(v) => unsafe {
                v.iput_signal.unwrap()(
                    ctx, c, so, smh, size, doff, dmh, rank, sigoff, sigmh, value, op, false, flags, req,
                )
            },
            Api::V16(v) => unsafe {
                v.iput_signal.unwrap()(
                    ctx, c, so, smh, size, doff, dmh, rank, sigoff, sigmh, value, op, true, flags, req,
                )
            },
            Api::V17(v) => unsafe {
                v.iput_signal.unwrap()(
                    ctx, c, so, smh, size, doff, dmh, rank, sigoff, sigmh, value, op, true, flags, req,
                )
            },
        }
    }
    fn iget(
        self,
        ctx: P,
        c: c_int,
        roff: u64,
        rmh: P,
        size: usize,
        loff: u64,
        lmh: P,
        rank: u32,
        flags: u32,
        req: *mut P,
    ) -> NcclResult {
        match self {
            Api::V13(v) => unsafe { v.iget.unwrap()(ctx, c, roff, rmh, size, loff, lmh, rank, req) },
            Api::V14(v) => unsafe { v.iget.unwrap()(ctx, c, roff, rmh, size, loff, lmh, rank, req) },
            Api::V15(v) => unsafe { v.iget.unwrap()(ctx, c, roff, rmh, size, loff, lmh, rank, flags, req) },
            Api::V16(v) => unsafe { v.iget.unwrap()(ctx, c, roff, rmh, size, loff, lmh, rank, flags, req) },
            Api::V17(v) => unsafe { v.iget.unwrap()(ctx, c, roff, rmh, size, loff, lmh, rank, flags, req) },
        }
    }
    fn iflush(self, ctx: P, c: c_int, mh: P, rank: u32, req: *mut P) -> NcclResult {
        unsafe { slot!(self, iflush)(ctx, c, mh, rank, req) }
    }
    fn test(self, coll: P, req: P, done: *mut c_int) -> NcclResult {
        unsafe { slot!(self, test)(coll, req, done) }
    }
    fn progress(self, ctx: P) -> NcclResult {
        match self {
            Api::V13(v) => unsafe { v.gin_progress.unwrap()(ctx) },
            Api::V14(v) => unsafe { v.rma_progress.unwrap()(ctx) },
            Api::V15(v) => unsafe { v.rma_progress.unwrap()(ctx) },
            Api::V16(v) => unsafe { v.rma_progress.unwrap()(ctx) },
            Api::V17(v) => unsafe { v.rma_progress.unwrap()(ctx) },
        }
    }
    fn query(self, ctx: P, has: *mut bool) -> NcclResult {
        unsafe { slot!(self, query_last_error)(ctx, has) }
    }

    // --- conveniences ---

    /// test() until done (driving progress as RCCL's proxy loop does);
    /// returns test's result.
    fn wait(self, coll: P, ctx: P, req: P) -> NcclResult {
        let t = Instant::now();
        loop {
            let mut done = 0;
            let r = self.test(coll, req, &mut done);
            if r != OK || done == 1 {
                return r;
            }
            assert_eq!(self.progress(ctx), OK, "rmaProgress");
            assert!(t.elapsed() < Duration::from_secs(20), "request {req:?} never completed");
            std::thread::yield_now();
        }
    }
    fn put(self, ctx: P, c: c_int, so: u64, smh: P, size: usize, doff: u64, dmh: P, rank: u32, flags: u32) -> P {
        let mut req = NULL;
        assert_eq!(self.iput(ctx, c, so, smh, size, doff, dmh, rank, flags, &mut req), OK, "iput to {rank}");
        assert!(!req.is_null());
        req
    }
    fn reg_ok(self, coll: P, buf: &GpuBuf, ty: c_int) -> P {
        let (r, mh) = self.reg(coll, buf.dev_addr() as P, buf.len(), ty);
        assert_eq!(r, OK, "regMrSym of {} bytes", buf.len());
        assert!(!mh.is_null());
        // RCCL's proxy carries mhandles in 63-bit GFD fields.
        assert_eq!(mh as u64 >> 63, 0, "an mhandle fits RCCL's 63-bit descriptor fields");
        mh
    }
}

/// Threads standing in for ranks: RCCL's allgather of handles and a
/// barrier, both bounded, and broken for everyone once a rank panics (a
/// failing rank fails the test instead of leaving the others waiting).
struct Exchange {
    state: Mutex<(usize, u64, bool)>, // arrived, generation, broken
    cv: std::sync::Condvar,
    n: usize,
    handles: Mutex<Vec<[u8; NCCL_NET_HANDLE_MAXSIZE]>>,
}

impl Exchange {
    fn new(n: usize) -> std::sync::Arc<Exchange> {
        std::sync::Arc::new(Exchange {
            state: Mutex::new((0, 0, false)),
            cv: std::sync::Condvar::new(),
            n,
            handles: Mutex::new(vec![[0u8; NCCL_NET_HANDLE_MAXSIZE]; n]),
        })
    }
    fn barrier(&self) {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if std::thread::panicking() {
            g.2 = true;
            self.cv.notify_all();
            return;
        }
        assert!(!g.2, "another rank failed");
        let gen = g.1;
        g.0 += 1;
        if g.0 == self.n {
            g.0 = 0;
            g.1 += 1;
            self.cv.notify_all();
            return;
        }
        let t = Instant::now();
        while g.1 == gen && !g.2 {
            assert!(t.elapsed() < Duration::from_secs(30), "barrier: the other ranks never arrived");
            g = self.cv.wait_timeout(g, Duration::from_millis(100)).unwrap_or_else(|e| e.into_inner()).0;
        }
        assert!(!g.2, "another rank failed");
    }
    fn allgather(&self, rank: usize, h: [u8; NCCL_NET_HANDLE_MAXSIZE]) -> Vec<[u8; NCCL_NET_HANDLE_MAXSIZE]> {
        self.handles.lock().unwrap()[rank] = h;
        self.barrier();
        let all = self.handles.lock().unwrap().clone();
        self.barrier();
        all
    }
    /// Marks the group broken when the calling rank's thread unwinds.
    fn guard(self: &std::sync::Arc<Self>) -> impl Drop + '_ {
        struct G<'a>(&'a Exchange);
        impl Drop for G<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    self.0.barrier();
                }
            }
        }
        G(self)
    }
}

fn buf(size: usize) -> GpuBuf {
    HostMemory.alloc(size, 4096, Object::WindowData).unwrap()
}

fn pattern(rank: usize, i: usize) -> u8 {
    (rank * 37 + i * 11 + 3) as u8
}

// --- NIC families: the same tests on emulated bnxt_re and ionic ------------------

/// The family the emulated NIC presents in this process
/// (RCCL_RUST_GIN_EMU_FAMILY, set by a rerun), as createContext's INFO
/// line names it.
fn family_name() -> &'static str {
    match rccl_host::family_asked() {
        Some(rccl_rust_gin::abi::RUST_GIN_FAMILY_BNXT) => "bnxt_re",
        Some(rccl_rust_gin::abi::RUST_GIN_FAMILY_IONIC) => "ionic",
        _ => "mlx5",
    }
}

/// A remote access error as the family's CQE reports it: (status, name).
fn remote_access_error() -> (&'static str, &'static str) {
    match family_name() {
        "bnxt_re" => ("syndrome 0x07", "REM_ACC"), // BNXT_RE_REQ_ST_REM_ACC
        "ionic" => ("syndrome 0x09", "REMOTE_ACC_ERR"), // IONIC_STS_REMOTE_ACC_ERR
        _ => ("syndrome 0x13", "REMOTE_ACCESS_ERR"),
    }
}

/// `lines` hold exactly `contexts` createContext INFO lines, each saying it
/// built queues of this process's family: a rerun on bnxt_re or ionic
/// really posted to that family's queues.
#[track_caller]
fn expect_family_queues(lines: &[String], contexts: usize) {
    let built: Vec<&String> = lines.iter().filter(|l| l.contains("RMA plugin: provider") && l.contains(" built ")).collect();
    assert_eq!(built.len(), contexts, "createContext INFO lines: {built:?}");
    let want = format!(", {} queues", family_name());
    assert!(built.iter().all(|l| l.contains(&want)), "not all on {}: {built:?}", family_name());
}

/// Runs `body` and, in a family rerun (one test thread, so the captured log
/// is this test's own), checks that its `contexts` contexts had the family's
/// queues. In the parallel main run the log is shared and mlx5 is the
/// default, so nothing is checked there.
fn on_family<T>(contexts: usize, body: impl FnOnce() -> T) -> T {
    if rccl_host::family_asked().is_none() {
        return body();
    }
    harness().logger.take();
    KEPT.lock().unwrap_or_else(|e| e.into_inner()).clear();
    let v = body();
    let mut lines = std::mem::take(&mut *KEPT.lock().unwrap_or_else(|e| e.into_inner()));
    lines.extend(harness().logger.take());
    expect_family_queues(&lines, contexts);
    v
}

/// The tests whose data path reruns on emulated bnxt_re and ionic NICs,
/// with RCCL_RUST_GIN_SIGNAL_MODE=atomic: the plugin's signals are remote
/// atomics, which these emulated NICs execute (Thor2 and Pollara would not
/// into GPU memory: see signals_need_remote_atomics).
const FAMILY_TESTS: &[&str] = &[
    "v16_four_ranks",
    "v16_two_ranks",
    "v15_two_ranks",
    "v14_two_ranks",
    "v13_two_ranks",
    "v17_two_ranks",
    "v17_connects_only_the_ranks_in_its_peer_array_with_that_many_contexts",
    "aggregated_requests_share_one_doorbell_and_keep_data_and_order",
    "a_signal_from_any_peer_makes_every_received_put_visible",
    "a_put_to_a_deregistered_window_fails_and_is_reported_without_hanging",
    "proxy_progress_mode",
    "aggregated_requests_time_from_their_doorbell_and_never_stall_a_full_queue",
    "a_full_queue_in_proxy_mode_gets_room_by_driving_the_nic",
    "offsets_count_from_the_registered_allocation_not_the_window_inside_it",
    "a_burst_past_the_queue_depth_is_queued_in_order_and_never_refused",
    "queued_requests_still_fail_on_a_stuck_or_failed_queue",
];

#[test]
fn the_same_runs_on_emulated_bnxt_re_and_ionic() {
    rccl_host::rerun_on_families_in_modes(&["atomic"], FAMILY_TESTS);
}

#[test]
fn with_the_knob_at_write_create_context_is_refused() {
    rccl_host::rerun_in_write_mode(&["signals_need_remote_atomics"]);
}

#[test]
fn on_bnxt_re_and_ionic_without_atomics_create_context_is_refused() {
    rccl_host::rerun_on_families_in_modes(&["auto"], &["signals_need_remote_atomics"]);
}

/// RCCL's proxy GIN polls one signal word that iputSignal must add to, so
/// the plugin's signals are remote atomics. With the knob at auto, a NIC
/// whose probe says they do not work into GPU memory (the emulated bnxt_re
/// and ionic report what Thor2 and Pollara do) gets createContext refused
/// with a WARN line saying why and what to do; mlx5 gets its context. The
/// knob at `write` (no atomics wanted) is refused on every NIC.
#[test]
fn signals_need_remote_atomics() {
    let api = linked();
    let r = solo(api);
    let ((res, ctx), lines) = warns(|| api.create_context(r.coll, 1, -1, 1));
    let mode = std::env::var("RCCL_RUST_GIN_SIGNAL_MODE").unwrap_or_default();
    match family_name() {
        _ if mode == "write" => {
            expect_warn(
                res,
                NCCL_INVALID_USAGE,
                &lines,
                &["createContext", "signals are remote atomics", "RCCL_RUST_GIN_SIGNAL_MODE=write asks"],
                "createContext with the knob at write",
            );
            assert_eq!(ctx, NULL);
        }
        "mlx5" => {
            assert_eq!(res, OK, "mlx5 has remote atomics: {lines:?}");
            assert_eq!(api.destroy(ctx), OK);
        }
        f => {
            assert!(mode.is_empty() || mode == "auto", "the refusal is auto's (mode {mode:?})");
            let why = if f == "bnxt_re" { "Thor2" } else { "Pollara" };
            expect_warn(
                res,
                NCCL_INVALID_USAGE,
                &lines,
                &["createContext", "signals are remote atomics", "no remote atomics", why, "RCCL_RUST_GIN_SIGNAL_MODE=atomic", "NCCL_GIN_TYPE=8"],
                "createContext on a NIC without remote atomics",
            );
            assert_eq!(ctx, NULL);
        }
    }
    close(api, r);
}

/// A rank's objects: two plugin contexts, as RCCL makes them.
struct Rank {
    rank: usize,
    n: usize,
    /// From rma.cc's init (comm->rmaContext).
    ctx_rma: P,
    /// From the GIN proxy's init: listen and connect use this one.
    ctx: P,
    coll: P,
}

// SAFETY: the pointers are opaque tokens, usable from any thread.
unsafe impl Send for Rank {}

/// init twice, devices, getProperties, listen, allgather, connect, closeListen.
fn open(api: Api, rank: usize, n: usize, ex: &Exchange) -> Rank {
    open_with(api, rank, n, &|h| ex.allgather(rank, h))
}

/// As [`open`], the handles gathered by `allgather` (ranks as processes:
/// through the parent test).
fn open_with(
    api: Api,
    rank: usize,
    n: usize,
    allgather: &dyn Fn([u8; NCCL_NET_HANDLE_MAXSIZE]) -> Vec<[u8; NCCL_NET_HANDLE_MAXSIZE]>,
) -> Rank {
    let (mut ctx_rma, mut ctx) = (NULL, NULL);
    assert_eq!(api.init(&mut ctx_rma), OK, "init (rma.cc)");
    assert_eq!(api.init(&mut ctx), OK, "init (GIN proxy)");
    assert_ne!(ctx_rma, ctx, "each init makes its own context");
    let mut ndev = 0;
    assert_eq!(api.devices(&mut ndev), OK);
    assert_eq!(ndev, 1);
    // SAFETY: zeroed POD filled by the plugin.
    let mut props: NcclNetProperties = unsafe { std::mem::zeroed() };
    assert_eq!(api.get_properties(0, &mut props), OK);
    assert_eq!(
        props.net_device_type, NCCL_NET_DEVICE_GIN_PROXY,
        "an RMA plugin reports GIN_PROXY (RCCL's v13 wrapper requires it)"
    );
    assert_eq!(props.net_device_version, NCCL_GIN_PROXY_VERSION);
    assert_eq!(props.max_recvs, 8);
    assert_eq!(props.ptr_support & NCCL_PTR_DMABUF, 0, "the emulated NIC cannot import dma-bufs");
    assert_ne!(props.ptr_support & NCCL_PTR_HOST, 0);
    assert!(!props.name.is_null());
    let mut handle = [0u8; NCCL_NET_HANDLE_MAXSIZE];
    let mut lc = NULL;
    assert_eq!(api.listen(ctx, 0, handle.as_mut_ptr() as P, &mut lc), OK, "listen");
    let all = allgather(handle);
    let mut ptrs: Vec<P> = all.iter().map(|h| h.as_ptr() as P).collect();
    let mut coll = NULL;
    assert_eq!(api.connect(ctx, ptrs.as_mut_ptr(), n as c_int, rank as c_int, lc, &mut coll), OK, "connect");
    assert_eq!(api.close_listen(lc), OK, "closeListen");
    Rank { rank, n, ctx_rma, ctx, coll }
}

fn close(api: Api, r: Rank) {
    assert_eq!(api.close_coll(r.coll), OK, "closeColl");
    assert_eq!(api.finalize(r.ctx), OK, "finalize (GIN proxy)");
    assert_eq!(api.finalize(r.ctx_rma), OK, "finalize (rma.cc)");
}

fn spin_until(what: &str, api: Api, ctx: P, f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert_eq!(api.progress(ctx), OK);
        assert!(t.elapsed() < Duration::from_secs(20), "{what} never happened");
        std::thread::yield_now();
    }
}

/// Everything after connect, checked end to end.
fn flow(api: Api, r: &Rank, sync: &dyn Fn()) {
    let (me, n) = (r.rank, r.n);
    let flags = |last: bool| if last { 0 } else { AGG };
    let mut props = NcclRmaProperties::default();
    if let Some(res) = api.get_rma_properties(r.coll, &mut props) {
        assert_eq!(res, OK, "getRmaProperties");
        assert!(props.flushes_all_puts_on_any_signal, "the emulated NIC flushes every received put on any signal");
    }
    let (res, ctx) = api.create_context(r.coll, 2, -1, 1);
    assert_eq!(res, OK, "createContext");
    let src = buf(4096);
    let dst = buf(n * 4096 + n * 8);
    let sig = buf(16);
    let got = buf(4096);
    let inl = buf(8 * n);
    src.write(0, &(0..4096).map(|i| pattern(me, i)).collect::<Vec<_>>());
    for p in 0..n {
        inl.write(8 * p, &((1000 * me + p) as u64).to_ne_bytes());
    }
    let (src_mh, dst_mh, sig_mh, got_mh) = (
        api.reg_ok(r.coll, &src, NCCL_PTR_CUDA),
        api.reg_ok(r.coll, &dst, NCCL_PTR_CUDA),
        api.reg_ok(r.coll, &sig, NCCL_PTR_CUDA),
        api.reg_ok(r.coll, &got, NCCL_PTR_CUDA),
    );
    let inl_mh = api.reg_ok(r.coll, &inl, NCCL_PTR_HOST);
    sync();

    let mut reqs = Vec::new();
    for p in 0..n as u32 {
        let last = p as usize + 1 == n;
        // Context 0: 4 KiB and a +1 on the peer's signal word 0, aggregated
        // across peers (the next non-aggregated request rings them all).
        let mut q = NULL;
        let res = api.iput_signal(
            ctx,
            0,
            0,
            src_mh,
            4096,
            (me * 4096) as u64,
            dst_mh,
            p,
            0,
            sig_mh,
            77,
            NCCL_NET_SIGNAL_OP_INC,
            flags(last),
            &mut q,
        );
        assert_eq!(res, OK, "iputSignal to {p}");
        reqs.push(q);
        // Context 1: 8 bytes from the host registration, then a signal
        // without data (RCCL's VA signal: size 0, NULL handles), +5.
        reqs.push(api.put(ctx, 1, 8 * p as u64, inl_mh, 8, (n * 4096 + me * 8) as u64, dst_mh, p, AGG));
        let mut q = NULL;
        let res =
            api.iput_signal(ctx, 1, 0, NULL, 0, 0, NULL, p, 8, sig_mh, 5, NCCL_NET_SIGNAL_OP_ADD, flags(last), &mut q);
        assert_eq!(res, OK, "signal-only iputSignal to {p}");
        reqs.push(q);
    }
    for q in &reqs {
        assert_eq!(api.wait(r.coll, ctx, *q), OK, "test");
    }
    // A request test() reported done is released.
    let mut done = 7;
    assert_eq!(api.test(r.coll, reqs[0], &mut done), NCCL_INVALID_ARGUMENT, "a finished request is gone");
    assert_eq!(done, 0);

    // Every peer's signals, and with them (same queue pair) their data.
    let word = |off: usize| sig.atomic_u64(off).load(Ordering::Acquire);
    spin_until("signal 0 reaching nranks", api, ctx, || word(0) == n as u64);
    spin_until("signal 1 reaching 5 * nranks", api, ctx, || word(8) == 5 * n as u64);
    for s in 0..n {
        let mut slot = vec![0u8; 4096];
        dst.read(s * 4096, &mut slot);
        assert!(
            slot.iter().enumerate().all(|(i, b)| *b == pattern(s, i)),
            "rank {me}: data from rank {s} (v{})",
            api.version()
        );
        let mut w = [0u8; 8];
        dst.read(n * 4096 + s * 8, &mut w);
        assert_eq!(u64::from_ne_bytes(w), (1000 * s + me) as u64, "rank {me}: 8 bytes from rank {s}");
    }

    // iget from the next rank, then iflush; both complete.
    let peer = ((me + 1) % n) as u32;
    let mut g = NULL;
    assert_eq!(api.iget(ctx, 1, 0, src_mh, 4096, 0, got_mh, peer, 0, &mut g), OK, "iget");
    let mut f = NULL;
    assert_eq!(api.iflush(ctx, 1, sig_mh, peer, &mut f), OK, "iflush");
    assert!(!f.is_null(), "iflush returns a request");
    assert_eq!(api.wait(r.coll, ctx, f), OK, "iflush completes");
    assert_eq!(api.wait(r.coll, ctx, g), OK, "iget completes (behind the flush, in order)");
    let mut gb = vec![0u8; 4096];
    got.read(0, &mut gb);
    assert!(gb.iter().enumerate().all(|(i, b)| *b == pattern(peer as usize, i)), "rank {me}: get from {peer}");

    // A zero-byte put is a request like any other: it completes, moves nothing.
    let before: Vec<u8> = {
        let mut v = vec![0u8; 8];
        dst.read(0, &mut v);
        v
    };
    let z = api.put(ctx, 0, 0, src_mh, 0, 0, dst_mh, peer, 0);
    assert_eq!(api.wait(r.coll, ctx, z), OK, "zero-byte iput");
    let mut after = vec![0u8; 8];
    dst.read(0, &mut after);
    assert_eq!(before, after);

    let mut has = true;
    assert_eq!(api.query(ctx, &mut has), OK);
    assert!(!has, "queryLastError: no error");
    assert_eq!(api.progress(ctx), OK, "rmaProgress with nothing to do");

    // Nobody deregisters while a peer may still read or write.
    sync();
    for mh in [src_mh, dst_mh, sig_mh, got_mh, inl_mh] {
        assert_eq!(api.dereg(r.coll, mh), OK, "deregMrSym");
    }
    assert_eq!(api.destroy(ctx), OK, "destroyContext");
    sync();
}

fn run(api: Api, n: usize) {
    on_family(n, || run_ranks(api, n))
}

fn run_ranks(api: Api, n: usize) {
    let ex = Exchange::new(n);
    std::thread::scope(|s| {
        for rank in 0..n {
            let ex = ex.clone();
            s.spawn(move || {
                let _broken_on_panic = ex.guard();
                RANKS.with(|r| r.set(n as c_int));
                let r = open(api, rank, n, &ex);
                flow(api, &r, &|| ex.barrier());
                close(api, r);
            });
        }
    });
}

/// The plugin (RCCL's proxy GIN path) with its ranks as processes in two
/// network namespaces, their emulated NICs joined by the TCP fabric
/// (tests/support/netns.rs; over loopback, loudly, where namespaces cannot
/// be made): the same flow, checked end to end.
#[test]
fn v16_two_ranks_across_network_namespaces_over_tcp() {
    let net = netns::Net::new(2);
    let mut kids: Vec<ranks::Kid> = (0..2).map(|r| ranks::start(&net, r, "rma_rank_on_a_host", r, 2, &[])).collect();
    ranks::relay(&mut kids, 120);
    for k in kids {
        k.finish(60);
    }
}

#[test]
#[ignore = "a rank of v16_two_ranks_across_network_namespaces_over_tcp; it starts it in a namespace"]
fn rma_rank_on_a_host() {
    let (rank, n) = ranks::me();
    let fabric = std::env::var("RCCL_RUST_GIN_EMU_FABRIC").unwrap_or_default();
    assert!(fabric.starts_with("tcp:"), "a rank on a host runs on the TCP fabric, not {fabric:?}");
    let api = Api::V16(harness().v16);
    RANKS.with(|r| r.set(n as c_int));
    let r = open_with(api, rank, n, &|h| ranks::allgather(&h));
    flow(api, &r, &ranks::barrier);
    close(api, r);
    ranks::done();
}

#[test]
fn v16_four_ranks() {
    let h = harness();
    assert_eq!(Api::V16(h.v16).name(), "rust-gin-rma");
    run(Api::V16(h.v16), 4);
}

#[test]
fn v16_two_ranks() {
    run(Api::V16(harness().v16), 2);
}

#[test]
fn v15_two_ranks() {
    run(Api::V15(harness().v15), 2);
}

#[test]
fn v14_two_ranks() {
    run(Api::V14(harness().v14), 2);
}

#[test]
fn v13_two_ranks() {
    run(Api::V13(harness().v13), 2);
}

#[test]
fn v15_four_ranks() {
    run(Api::V15(harness().v15), 4);
}

#[test]
fn v17_two_ranks() {
    run(Api::V17(harness().v17), 2);
}

#[test]
fn v17_four_ranks() {
    run(Api::V17(harness().v17), 4);
}

// --- v17: peer arrays, nContexts, trafficClass, abortFlag -----------------------------


/// NCCL's rma_proxy.cc (NVIDIA/nccl@c6fbb1d7) hands a v17 plugin the peers
/// at the context's rank stride from this rank, itself included: with
/// stride 2 on 4 ranks, ranks 0 and 2 connect to each other, 1 and 3 too.
/// Each rank asks for 3 contexts and traffic class 5, gets 3 * 2 queue pairs
/// (the INFO line says so), moves data and signals to its listed peers on
/// the last context, and is refused, with a WARN line, a request to a rank
/// it did not list. A duplicate entry is refused before anything collective.
#[test]
fn v17_connects_only_the_ranks_in_its_peer_array_with_that_many_contexts() {
    let api = Api::V17(harness().v17);
    let n = 4usize;
    let ((), lines) = logged(|| {
        let ex = Exchange::new(n);
        std::thread::scope(|s| {
            for rank in 0..n {
                let ex = ex.clone();
                s.spawn(move || {
                    let _broken_on_panic = ex.guard();
                    let r = open(api, rank, n, &ex);
                    let (res, ctx) = api.create_context_v17(r.coll, 1, -1, &[rank as c_int, rank as c_int]);
                    assert_eq!((res, ctx), (NCCL_INVALID_ARGUMENT, NULL), "a rank listed twice");
                    let peers: Vec<c_int> = (rank % 2..n).step_by(2).map(|p| p as c_int).collect();
                    let (res, ctx) = api.create_context_v17(r.coll, 3, 5, &peers);
                    assert_eq!(res, OK, "createContext with peers {peers:?}");
                    let src = buf(4096);
                    let dst = buf(n * 4096);
                    let sig = buf(8);
                    src.write(0, &(0..4096).map(|i| pattern(rank, i)).collect::<Vec<_>>());
                    let (src_mh, dst_mh, sig_mh) = (
                        api.reg_ok(r.coll, &src, NCCL_PTR_CUDA),
                        api.reg_ok(r.coll, &dst, NCCL_PTR_CUDA),
                        api.reg_ok(r.coll, &sig, NCCL_PTR_CUDA),
                    );
                    ex.barrier();
                    for &p in &peers {
                        let mut q = NULL;
                        let res = api.iput_signal(
                            ctx, 2, 0, src_mh, 4096, (rank * 4096) as u64, dst_mh, p as u32, 0, sig_mh, 0,
                            NCCL_NET_SIGNAL_OP_INC, 0, &mut q,
                        );
                        assert_eq!(res, OK, "iputSignal on context 2 to listed rank {p}");
                        assert_eq!(api.wait(r.coll, ctx, q), OK);
                    }
                    let word = || sig.atomic_u64(0).load(Ordering::Acquire);
                    spin_until("a signal from every listed peer", api, ctx, || word() == peers.len() as u64);
                    for &p in &peers {
                        let mut slot = vec![0u8; 4096];
                        dst.read(p as usize * 4096, &mut slot);
                        assert!(slot.iter().enumerate().all(|(i, b)| *b == pattern(p as usize, i)), "data from {p}");
                    }
                    // Ranks of the other parity were never connected.
                    let other = ((rank + 1) % n) as u32;
                    let mut q = NULL;
                    let res = api.iput(ctx, 0, 0, src_mh, 8, 0, dst_mh, other, 0, &mut q);
                    assert_eq!((res, q), (NCCL_INVALID_ARGUMENT, NULL), "iput to unlisted rank {other}");
                    let res = api.iput(ctx, 3, 0, src_mh, 8, 0, dst_mh, rank as u32, 0, &mut q);
                    assert_eq!(res, NCCL_INVALID_ARGUMENT, "context 3 of 3");
                    let mut has = true;
                    assert_eq!(api.query(ctx, &mut has), OK);
                    assert!(!has, "a refused request is no queue error");
                    ex.barrier();
                    for mh in [src_mh, dst_mh, sig_mh] {
                        assert_eq!(api.dereg(r.coll, mh), OK);
                    }
                    assert_eq!(api.destroy(ctx), OK);
                    ex.barrier();
                    close(api, r);
                });
            }
        });
    });
    if rccl_host::family_asked().is_some() {
        expect_family_queues(&lines, n);
    }
    for rank in 0..n {
        let built = format!("rank {rank} built 6 QPs to 2 of 4 ranks (3 context(s)");
        assert!(
            lines.iter().any(|l| l.contains(&built) && l.contains("traffic class 5") && l.contains("peer array of 2")),
            "no INFO line '{built} ... traffic class 5, peer array of 2'; got {lines:?}"
        );
        let twice = format!("config.peerArray[1] = {rank}: rank {rank} is listed twice");
        assert!(lines.iter().any(|l| l.contains("createContext") && l.contains(&twice)), "no WARN line '{twice}'");
    }
    let refused = lines.iter().filter(|l| l.contains("iput") && l.contains("is not connected") && l.contains("peerArray"));
    assert_eq!(refused.count(), n, "one WARN line per rank for the unlisted rank");
}

/// Peer arrays that disagree (rank 0 lists rank 1, rank 1 does not list
/// rank 0) fail createContext on both ranks at once, with a line naming the
/// other rank, and leave the comm usable: arrays that agree work next.
#[test]
fn v17_peer_arrays_that_disagree_fail_on_every_rank_without_a_hang() {
    let api = Api::V17(harness().v17);
    let ((), lines) = logged(|| {
        let ex = Exchange::new(2);
        std::thread::scope(|s| {
            for rank in 0..2usize {
                let ex = ex.clone();
                s.spawn(move || {
                    let _broken_on_panic = ex.guard();
                    let r = open(api, rank, 2, &ex);
                    let mine: &[c_int] = if rank == 0 { &[0, 1] } else { &[1] };
                    let t = Instant::now();
                    let (res, ctx) = api.create_context_v17(r.coll, 1, -1, mine);
                    assert_eq!((res, ctx), (NCCL_INVALID_USAGE, NULL), "rank {rank}");
                    assert!(t.elapsed() < Duration::from_secs(10), "failed at once, not by a timeout");
                    let (res, ctx) = api.create_context_v17(r.coll, 1, -1, &[0, 1]);
                    assert_eq!(res, OK, "agreeing arrays after the failed attempt");
                    assert_eq!(api.destroy(ctx), OK);
                    ex.barrier();
                    close(api, r);
                });
            }
        });
    });
    assert!(lines.iter().any(|l| l.contains("rank 0's peer array lists rank 1, but rank 1's does not list rank 0")));
    assert!(lines.iter().any(|l| l.contains("rank 0 connects to rank 1 but rank 1's peer array does not list rank 0")));
}

/// Bad v17 configs: each an error code and a WARN line naming the argument.
/// An empty peer array is valid and connects nobody.
#[test]
fn v17_bad_create_context_input_gets_an_error_and_a_warn_line() {
    let api = Api::V17(harness().v17);
    let v = harness().v17;
    let r = solo(api);
    let raw = |cfg: *mut NcclRmaConfigV17, out: *mut P| unsafe { v.create_context.unwrap()(r.coll, cfg, out) };
    let cfg = |n_contexts, traffic_class, peer_array: *mut c_int, peer_array_count| NcclRmaConfigV17 {
        n_contexts,
        traffic_class,
        peer_array,
        peer_array_count,
    };
    let mut zero = [0 as c_int];
    let z = zero.as_mut_ptr();
    let mut three = [3 as c_int];
    let mut minus = [-1 as c_int];
    let cases: Vec<(NcclRmaConfigV17, &[&str])> = vec![
        (cfg(1, -1, z, -1), &["createContext", "config.peerArrayCount = -1", "negative"]),
        (cfg(1, -1, std::ptr::null_mut(), 1), &["config.peerArray is NULL with peerArrayCount = 1"]),
        (cfg(1, -1, z, 2), &["config.peerArrayCount = 2", "more peers than the comm's 1 ranks"]),
        (cfg(1, -1, three.as_mut_ptr(), 1), &["config.peerArray[0] = 3", "not a rank"]),
        (cfg(1, -1, minus.as_mut_ptr(), 1), &["config.peerArray[0] = -1", "not a rank"]),
        (cfg(0, -1, z, 1), &["config.nContexts = 0"]),
        (cfg(65, -1, z, 1), &["config.nContexts = 65"]),
        (cfg(1, 256, z, 1), &["config.trafficClass = 256"]),
        (cfg(1, -2, z, 1), &["config.trafficClass = -2"]),
    ];
    for (mut c, words) in cases {
        let mut ctx = NULL;
        let (res, l) = warns(|| raw(&mut c, &mut ctx));
        expect_warn(res, NCCL_INVALID_ARGUMENT, &l, words, &format!("{c:?}"));
        assert!(ctx.is_null());
    }
    let mut ctx = NULL;
    let (res, l) = warns(|| raw(std::ptr::null_mut(), &mut ctx));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["config is NULL"], "NULL config");
    let mut c = cfg(1, -1, z, 1);
    let (res, l) = warns(|| raw(&mut c, std::ptr::null_mut()));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["rmaCtx is NULL"], "NULL rmaCtx");

    // Nobody listed: a context set with no queue pairs; requests are refused.
    let a = buf(64);
    let mh = api.reg_ok(r.coll, &a, NCCL_PTR_CUDA);
    let (res, empty) = api.create_context_v17(r.coll, 1, -1, &[]);
    assert_eq!(res, OK, "an empty peer array");
    let mut q = NULL;
    let (res, l) = warns(|| api.iput(empty, 0, 0, mh, 8, 8, mh, 0, 0, &mut q));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["iput", "rank 0 is not connected"], "iput with no peers");
    assert_eq!(api.destroy(empty), OK);
    // Itself listed: loopback works.
    let (res, ctx) = api.create_context_v17(r.coll, 1, -1, &[0]);
    assert_eq!(res, OK);
    a.write(0, &[9u8; 8]);
    let q = api.put(ctx, 0, 0, mh, 8, 8, mh, 0, 0);
    assert_eq!(api.wait(r.coll, ctx, q), OK);
    let mut b = [0u8; 8];
    a.read(8, &mut b);
    assert_eq!(b, [9u8; 8], "loopback put landed");
    assert_eq!(api.dereg(r.coll, mh), OK);
    assert_eq!(api.destroy(ctx), OK);
    close(api, r);
}

/// v17's connect takes RCCL's abort flag: set before the call, connect
/// refuses to start; set while the setup waits for a peer that never comes,
/// connect returns at once instead of after RCCL_RUST_GIN_CONNECT_TIMEOUT_MS.
#[test]
fn v17_connect_returns_when_rccl_sets_the_abort_flag() {
    let h = harness();
    let v = h.v17;
    let api = Api::V17(v);
    // Ranks 0 and 1 of a 2-rank comm listen; only rank 0 ever connects.
    let mut ctxs = [NULL; 2];
    let mut lcs = [NULL; 2];
    let mut handles = [[0u8; NCCL_NET_HANDLE_MAXSIZE]; 2];
    for r in 0..2 {
        assert_eq!(api.init(&mut ctxs[r]), OK);
        assert_eq!(api.listen(ctxs[r], 0, handles[r].as_mut_ptr() as P, &mut lcs[r]), OK);
    }
    let ptrs: Vec<P> = handles.iter().map(|h| h.as_ptr() as P).collect();
    let connect = |flag: *const u32, cc: &mut P| unsafe {
        v.connect.unwrap()(ctxs[0], ptrs.as_ptr() as *mut P, 2, 0, lcs[0], cc, flag)
    };
    let set = std::sync::atomic::AtomicU32::new(1);
    let mut cc = NULL;
    let (res, l) = warns(|| connect(set.as_ptr(), &mut cc));
    expect_warn(res, NCCL_INTERNAL_ERROR, &l, &["connect", "abortFlag is set (before connection setup started)"], "set");
    assert!(cc.is_null());

    let flag = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let setter = {
        let flag = flag.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            flag.store(1, Ordering::SeqCst);
        })
    };
    let t = Instant::now();
    let (res, l) = warns(|| connect(flag.as_ptr(), &mut cc));
    let took = t.elapsed();
    setter.join().unwrap();
    expect_warn(res, NCCL_INTERNAL_ERROR, &l, &["connect", "abortFlag is set (during connection setup)"], "set later");
    assert!(cc.is_null());
    assert!(took >= Duration::from_millis(300), "connect waited for the peer until the flag was set ({took:?})");
    assert!(took < Duration::from_secs(10), "connect returned on the flag, not on the connect timeout ({took:?})");
    for r in 0..2 {
        assert_eq!(api.close_listen(lcs[r]), OK);
        assert_eq!(api.finalize(ctxs[r]), OK);
    }
}

// --- bad input -------------------------------------------------------------------

/// Every line logged while `f` runs (threads included), under the log lock.
fn logged<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    let h = harness();
    let _g = h.log_lock.lock().unwrap_or_else(|e| e.into_inner());
    keep(h.logger.take());
    let v = f();
    let lines = h.logger.take();
    keep(lines.clone());
    (v, lines)
}

/// Lines logged() took, kept for [`on_family`] in a family rerun.
static KEPT: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn keep(lines: Vec<String>) {
    if rccl_host::family_asked().is_some() {
        KEPT.lock().unwrap_or_else(|e| e.into_inner()).extend(lines);
    }
}

/// Runs `f`, returns its result and the WARN lines it logged.
fn warns<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    let (v, lines) = logged(f);
    (v, lines.into_iter().filter(|l| l.starts_with(&format!("{} ", level::WARN))).collect())
}

#[track_caller]
fn expect_warn(res: NcclResult, want: NcclResult, lines: &[String], words: &[&str], what: &str) {
    assert_eq!(res, want, "{what}: result code (WARN lines: {lines:?})");
    assert!(
        lines.iter().any(|l| words.iter().all(|w| l.contains(w))),
        "{what}: no WARN line naming {words:?}; got {lines:?}"
    );
}

/// One rank alone (nranks 1: every request loops back to itself).
fn solo(api: Api) -> Rank {
    let ex = Exchange::new(1);
    open(api, 0, 1, &ex)
}

#[test]
fn bad_input_gets_an_error_code_and_a_warn_line() {
    let api = Api::V16(harness().v16);
    let r = solo(api);
    let (res, ctx) = api.create_context(r.coll, 2, -1, 1);
    assert_eq!(res, OK);
    let a = buf(4096);
    let b = buf(4096);
    let am = api.reg_ok(r.coll, &a, NCCL_PTR_CUDA);
    let bm = api.reg_ok(r.coll, &b, NCCL_PTR_CUDA);
    let mut foreign = 5u64;
    let fp = &mut foreign as *mut u64 as P;

    // init, devices, properties.
    let (res, l) = warns(|| api.init(std::ptr::null_mut()));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["init", "ctx is NULL"], "init(NULL)");
    let (res, l) = warns(|| api.devices(std::ptr::null_mut()));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["devices", "ndev is NULL"], "devices(NULL)");
    let (res, l) = warns(|| api.get_properties(7, &mut unsafe { std::mem::zeroed() }));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["getProperties", "device index 7"], "getProperties(7)");
    let (res, l) = warns(|| api.get_properties(-1, &mut unsafe { std::mem::zeroed() }));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["dev -1"], "getProperties(-1)");
    let (res, l) = warns(|| api.get_properties(0, std::ptr::null_mut()));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["props is NULL"], "getProperties(NULL)");
    let (res, l) = warns(|| api.get_rma_properties(NULL, &mut NcclRmaProperties::default()).unwrap());
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["getRmaProperties", "collComm is NULL"], "getRmaProperties(NULL)");
    let (res, l) = warns(|| api.get_rma_properties(r.coll, std::ptr::null_mut()).unwrap());
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["rmaProps is NULL"], "getRmaProperties(coll, NULL)");
    let (res, l) = warns(|| api.get_rma_properties(r.ctx, &mut NcclRmaProperties::default()).unwrap());
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["another kind"], "getRmaProperties(a plugin context)");

    // listen and connect.
    let mut hb = [0u8; NCCL_NET_HANDLE_MAXSIZE];
    let mut lc = NULL;
    let (res, l) = warns(|| api.listen(r.ctx, 3, hb.as_mut_ptr() as P, &mut lc));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["listen", "dev 3"], "listen(dev 3)");
    let (res, l) = warns(|| api.listen(r.ctx, 0, NULL, &mut lc));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["handle is NULL"], "listen(NULL handle)");
    let (res, l) = warns(|| api.listen(fp, 0, hb.as_mut_ptr() as P, &mut lc));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["ctx", "not a rust-gin"], "listen(foreign ctx)");
    assert_eq!(api.listen(r.ctx, 0, hb.as_mut_ptr() as P, &mut lc), OK);
    let mut hp = [hb.as_mut_ptr() as P];
    let mut cc = NULL;
    let (res, l) = warns(|| api.connect(r.ctx, hp.as_mut_ptr(), 1, 1, lc, &mut cc));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["connect", "rank 1 out of range"], "connect(rank 1 of 1)");
    let mut bad = hb;
    bad[50] ^= 1;
    hp[0] = bad.as_mut_ptr() as P;
    let (res, l) = warns(|| api.connect(r.ctx, hp.as_mut_ptr(), 1, 0, lc, &mut cc));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["checksum"], "connect(corrupted handle)");
    assert_eq!(api.close_listen(lc), OK);
    let (res, l) = warns(|| api.close_listen(lc));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["closeListen", "already destroyed or closed"], "double closeListen");

    // createContext.
    for (nctx, tc, stride, words) in [
        (0, -1, 1, "nContexts = 0"),
        (65, -1, 1, "nContexts = 65"),
        (1, 300, 1, "trafficClass = 300"),
        (1, -1, 0, "rankStride = 0"),
    ] {
        let ((res, _), l) = warns(|| api.create_context(r.coll, nctx, tc, stride));
        expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["createContext", words], words);
    }
    let mut c2 = NULL;
    let (res, l) = warns(|| api.create_context_raw(r.coll, std::ptr::null_mut(), &mut c2));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["config is NULL"], "createContext(NULL config)");
    let (res, l) = warns(|| {
        api.create_context_raw(
            r.coll,
            &mut NcclRmaConfig { n_contexts: 1, traffic_class: -1, rank_stride: 1 },
            std::ptr::null_mut(),
        )
    });
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["rmaCtx is NULL"], "createContext(NULL rmaCtx)");

    // Registration: NULL data, size 0, a bad type, dma-buf not advertised.
    for (data, size, ty, words) in [
        (NULL, 64usize, NCCL_PTR_CUDA, "data is NULL"),
        (a.dev_addr() as P, 0, NCCL_PTR_CUDA, "size is 0"),
        (a.dev_addr() as P, 64, 9, "type 9"),
    ] {
        let ((res, _), l) = warns(|| api.reg(r.coll, data, size, ty));
        expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["regMrSym", words], words);
    }
    let (res, l) = warns(|| api.reg_dmabuf(r.coll, a.dev_addr() as P, 64, 3));
    expect_warn(
        res,
        NCCL_INVALID_USAGE,
        &l,
        &["regMrSymDmaBuf", "NCCL_PTR_DMABUF"],
        "regMrSymDmaBuf without NCCL_PTR_DMABUF",
    );
    let (res, l) = warns(|| api.dereg(r.coll, r.ctx));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["deregMrSym", "another kind"], "deregMrSym(a ctx)");

    // iput: every argument.
    type Call = Box<dyn Fn(*mut P) -> NcclResult>;
    let put = |ctx: P, c: c_int, so: u64, smh: P, size: usize, doff: u64, dmh: P, rank: u32, fl: u32| -> Call {
        Box::new(move |req| api.iput(ctx, c, so, smh, size, doff, dmh, rank, fl, req))
    };
    let cases: Vec<(Call, NcclResult, &[&str], &str)> = vec![
        (put(NULL, 0, 0, am, 8, 0, bm, 0, 0), NCCL_INVALID_ARGUMENT, &["iput", "rmaCtx is NULL"], "NULL rmaCtx"),
        (put(fp, 0, 0, am, 8, 0, bm, 0, 0), NCCL_INVALID_ARGUMENT, &["rmaCtx", "not a rust-gin"], "foreign rmaCtx"),
        (
            put(r.coll, 0, 0, am, 8, 0, bm, 0, 0),
            NCCL_INVALID_ARGUMENT,
            &["rmaCtx", "another kind"],
            "collComm as rmaCtx",
        ),
        (put(ctx, 2, 0, am, 8, 0, bm, 0, 0), NCCL_INVALID_ARGUMENT, &["context 2 out of range [0, 2)"], "context 2"),
        (put(ctx, -1, 0, am, 8, 0, bm, 0, 0), NCCL_INVALID_ARGUMENT, &["context -1 out of range"], "context -1"),
        (put(ctx, 0, 0, am, 8, 0, bm, 1, 0), NCCL_INVALID_ARGUMENT, &["rank 1 out of range [0, 1)"], "rank 1 of 1"),
        (put(ctx, 0, 0, NULL, 8, 0, bm, 0, 0), NCCL_INVALID_ARGUMENT, &["srcMhandle is NULL"], "NULL srcMhandle"),
        (
            put(ctx, 0, 0, fp, 8, 0, bm, 0, 0),
            NCCL_INVALID_ARGUMENT,
            &["srcMhandle", "not a rust-gin"],
            "unregistered srcMhandle",
        ),
        (
            put(ctx, 0, 0, am, 8, 0, ctx, 0, 0),
            NCCL_INVALID_ARGUMENT,
            &["dstMhandle", "another kind"],
            "rmaCtx as dstMhandle",
        ),
        (
            put(ctx, 0, 4090, am, 8, 0, bm, 0, 0),
            NCCL_INVALID_ARGUMENT,
            &["iput source", "srcOff 4090 + size 8", "4096 bytes"],
            "source offset past the registration",
        ),
        (
            put(ctx, 0, 0, am, 8, 4096, bm, 0, 0),
            NCCL_INVALID_ARGUMENT,
            &["iput destination", "rank 0's registration"],
            "destination offset past the registration",
        ),
        (put(ctx, 0, 0, am, usize::MAX, 0, bm, 0, 0), NCCL_INVALID_ARGUMENT, &["past the end"], "a size that wraps"),
        (
            put(ctx, 0, 0, am, 8, 0, bm, 0, 1 << 5),
            NCCL_INVALID_ARGUMENT,
            &["iput", "optFlags 0x20"],
            "unknown optFlags bit",
        ),
        (
            put(ctx, 0, 0, am, 8, 0, bm, 0, AGG | 1 << 31),
            NCCL_INVALID_ARGUMENT,
            &["optFlags 0x80000001"],
            "aggregate plus an unknown bit",
        ),
    ];
    for (f, want, words, what) in &cases {
        let mut req = fp; // must be reset to NULL on failure
        let (res, l) = warns(|| f(&mut req));
        expect_warn(res, *want, &l, words, what);
        assert!(req.is_null(), "{what}: request set to NULL on failure");
    }
    let (res, l) = warns(|| api.iput(ctx, 0, 0, am, 8, 0, bm, 0, 0, std::ptr::null_mut()));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["iput", "request is NULL"], "NULL request");

    // iputSignal and iget.
    let sig_case = |off: u64, sigmh: P, op: u32| {
        let mut q = NULL;
        api.iput_signal(ctx, 0, 0, am, 8, 0, bm, 0, off, sigmh, 1, op, 0, &mut q)
    };
    let (res, l) = warns(|| sig_case(0, bm, 7));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["iputSignal", "signalOp 7"], "signalOp 7");
    let (res, l) = warns(|| sig_case(0, NULL, NCCL_NET_SIGNAL_OP_INC));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["signalMhandle is NULL"], "NULL signalMhandle");
    let (res, l) = warns(|| sig_case(4, bm, NCCL_NET_SIGNAL_OP_INC));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["not 8-byte aligned"], "misaligned signal");
    let (res, l) = warns(|| sig_case(4092, bm, NCCL_NET_SIGNAL_OP_INC));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["iputSignal signal", "past the end"], "signal past the registration");
    let mut q = NULL;
    let (res, l) = warns(|| api.iput_signal(ctx, 0, 0, NULL, 8, 0, bm, 0, 0, bm, 1, NCCL_NET_SIGNAL_OP_INC, 0, &mut q));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["srcMhandle is NULL"], "data without a source");
    let (res, l) = warns(|| api.iget(ctx, 0, 4000, am, 200, 0, bm, 0, 0, &mut q));
    expect_warn(
        res,
        NCCL_INVALID_ARGUMENT,
        &l,
        &["iget source", "remoteOff 4000 + size 200"],
        "iget past the remote registration",
    );
    let (res, l) = warns(|| api.iget(ctx, 0, 0, am, 200, 3900, bm, 0, 0, &mut q));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["iget destination"], "iget past the local registration");
    let (res, l) = warns(|| api.iflush(ctx, 5, bm, 0, &mut q));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["iflush", "context 5"], "iflush(context 5)");
    let (res, l) = warns(|| api.iflush(ctx, 0, fp, 0, &mut q));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["iflush", "mhandle", "not a rust-gin"], "iflush(foreign mhandle)");

    // test, rmaProgress, queryLastError.
    let mut done = 0;
    let (res, l) = warns(|| api.test(r.coll, NULL, &mut done));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["test", "request is NULL"], "test(NULL request)");
    let (res, l) = warns(|| api.test(r.coll, fp, &mut done));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["request", "not a rust-gin"], "test(foreign request)");
    let ok_req = api.put(ctx, 0, 0, am, 8, 0, bm, 0, 0);
    let (res, l) = warns(|| api.test(r.coll, ok_req, std::ptr::null_mut()));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["done is NULL"], "test(NULL done)");
    let (res, l) = warns(|| api.test(ctx, ok_req, &mut done));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["collComm", "another kind"], "test(rmaCtx as collComm)");
    assert_eq!(api.wait(r.coll, ctx, ok_req), OK, "the request survived the bad calls");
    let (res, l) = warns(|| api.progress(fp));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["rmaProgress", "not a rust-gin"], "rmaProgress(foreign)");
    let (res, l) = warns(|| api.query(ctx, std::ptr::null_mut()));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["queryLastError", "hasError is NULL"], "queryLastError(NULL)");

    // A deregistered handle, double deregistration, a handle of another comm.
    let c = buf(64);
    let cm = api.reg_ok(r.coll, &c, NCCL_PTR_CUDA);
    assert_eq!(api.dereg(r.coll, cm), OK);
    let (res, l) = warns(|| api.iput(ctx, 0, 0, cm, 8, 0, bm, 0, 0, &mut q));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["srcMhandle", "no longer exists"], "deregistered srcMhandle");
    let (res, l) = warns(|| api.dereg(r.coll, cm));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["deregMrSym", "no longer exists"], "double deregMrSym");
    let other = solo(api);
    let om = api.reg_ok(other.coll, &c, NCCL_PTR_CUDA);
    let (res, l) = warns(|| api.iput(ctx, 0, 0, om, 8, 0, bm, 0, 0, &mut q));
    expect_warn(
        res,
        NCCL_INVALID_ARGUMENT,
        &l,
        &["srcMhandle was registered on another collComm"],
        "a handle of another comm",
    );
    let (res, l) = warns(|| api.dereg(r.coll, om));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["registered on another collComm"], "deregMrSym on the wrong comm");
    let (_, octx) = api.create_context(other.coll, 1, -1, 1);
    let oreq = api.put(octx, 0, 0, om, 8, 0, om, 0, 0);
    let (res, l) = warns(|| api.test(r.coll, oreq, &mut done));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["belongs to another collComm"], "test on the wrong comm");
    assert_eq!(api.wait(other.coll, octx, oreq), OK);
    // closeColl releases what was left open, with a WARN.
    let (res, l) = warns(|| api.close_coll(other.coll));
    expect_warn(res, OK, &l, &["closeColl", "1 RMA context(s), 1 registration(s)"], "closeColl with open objects");
    let (res, l) = warns(|| api.destroy(octx));
    expect_warn(
        res,
        NCCL_INVALID_ARGUMENT,
        &l,
        &["destroyContext", "already destroyed"],
        "a context closeColl released",
    );
    assert_eq!(api.finalize(other.ctx), OK);
    assert_eq!(api.finalize(other.ctx_rma), OK);

    // Calls after finalize: the context still exists, its plugin context not.
    assert_eq!(api.finalize(r.ctx), OK);
    let (res, l) = warns(|| api.iput(ctx, 0, 0, am, 8, 0, bm, 0, 0, &mut q));
    expect_warn(res, NCCL_INVALID_USAGE, &l, &["iput", "after finalize"], "iput after finalize");
    let (res, l) = warns(|| api.progress(ctx));
    expect_warn(res, NCCL_INVALID_USAGE, &l, &["rmaProgress", "after finalize"], "rmaProgress after finalize");
    let (res, l) = warns(|| api.listen(r.ctx, 0, hb.as_mut_ptr() as P, &mut lc));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["listen", "no longer exists"], "listen after finalize");
    let (res, l) = warns(|| api.finalize(r.ctx));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["finalize", "already destroyed or closed"], "double finalize");
    // Teardown still works after finalize (RCCL may order it either way).
    assert_eq!(api.dereg(r.coll, am), OK);
    assert_eq!(api.dereg(r.coll, bm), OK);
    assert_eq!(api.destroy(ctx), OK);
    let (res, l) = warns(|| api.destroy(ctx));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["destroyContext", "already destroyed"], "double destroyContext");
    assert_eq!(api.close_coll(r.coll), OK);
    let (res, l) = warns(|| api.close_coll(r.coll));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["closeColl", "already destroyed or closed"], "double closeColl");
    assert_eq!(api.finalize(r.ctx_rma), OK);
}

// --- bad input found by the held-out harness: one test per case -------------------

/// A put to itself through fresh registrations completes with the bytes:
/// the process and the plugin survived what came before.
fn rma_still_works(api: Api, r: &Rank, ctx: P) {
    let (a, b) = (buf(4096), buf(4096));
    a.write(0, b"still alive");
    let (am, bm) = (api.reg_ok(r.coll, &a, NCCL_PTR_HOST), api.reg_ok(r.coll, &b, NCCL_PTR_HOST));
    let req = api.put(ctx, 0, 0, am, 11, 0, bm, 0, 0);
    assert_eq!(api.wait(r.coll, ctx, req), OK, "a put after bad input");
    let mut got = [0u8; 11];
    b.read(0, &mut got);
    assert_eq!(&got, b"still alive");
    assert_eq!(api.dereg(r.coll, am), OK);
    assert_eq!(api.dereg(r.coll, bm), OK);
}

/// One rank alone through the v16 table, with one context.
fn solo_v16_context() -> (Api, Rank, P) {
    let api = Api::V16(harness().v16);
    let r = solo(api);
    let (res, ctx) = api.create_context(r.coll, 1, -1, 1);
    assert_eq!(res, OK);
    (api, r, ctx)
}

/// regMrSym of [data, data+size) is refused for both pointer kinds, with a
/// WARN naming `words`; then the plugin still works.
fn rma_refused_registration(data: usize, size: usize, words: &[&str]) {
    let (api, r, ctx) = solo_v16_context();
    for ty in [NCCL_PTR_HOST, NCCL_PTR_CUDA] {
        let ((res, mh), l) = warns(|| api.reg(r.coll, data as P, size, ty));
        let all: Vec<&str> = std::iter::once("regMrSym").chain(words.iter().copied()).collect();
        expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &all, &format!("regMrSym(type {ty}) of {data:#x}+{size}"));
        assert!(mh.is_null());
    }
    rma_still_works(api, &r, ctx);
    assert_eq!(api.destroy(ctx), OK);
    close(api, r);
}

refused_range_tests!(rma_refused_registration);

#[test]
fn rma_connect_with_nranks_int_max_is_refused() {
    let api = Api::V16(harness().v16);
    let mut ctx = NULL;
    assert_eq!(api.init(&mut ctx), OK);
    let mut handle = [0u8; NCCL_NET_HANDLE_MAXSIZE];
    let mut lc = NULL;
    assert_eq!(api.listen(ctx, 0, handle.as_mut_ptr() as P, &mut lc), OK);
    let mut ptrs = [handle.as_mut_ptr() as P];
    let mut coll = NULL;
    let (res, l) = warns(|| api.connect(ctx, ptrs.as_mut_ptr(), c_int::MAX, 0, lc, &mut coll));
    expect_warn(res, NCCL_INVALID_ARGUMENT, &l, &["connect", "nranks 2147483647 out of range"], "connect(INT_MAX)");
    assert_eq!(api.connect(ctx, ptrs.as_mut_ptr(), 1, 0, lc, &mut coll), OK, "the same listen comm then connects");
    assert_eq!(api.close_listen(lc), OK);
    assert_eq!(api.close_coll(coll), OK);
    assert_eq!(api.finalize(ctx), OK);
}

#[test]
fn rma_query_last_error_after_finalize_is_invalid_usage() {
    let (api, r, ctx) = solo_v16_context();
    let mut has = true;
    assert_eq!(api.query(ctx, &mut has), OK);
    assert!(!has);
    assert_eq!(api.finalize(r.ctx), OK);
    let (res, l) = warns(|| api.query(ctx, &mut has));
    expect_warn(res, NCCL_INVALID_USAGE, &l, &["queryLastError", "after finalize"], "queryLastError after finalize");
    assert_eq!(api.destroy(ctx), OK, "teardown after finalize still works");
    assert_eq!(api.close_coll(r.coll), OK);
    assert_eq!(api.finalize(r.ctx_rma), OK);
    let (api, r, ctx) = solo_v16_context();
    rma_still_works(api, &r, ctx);
    assert_eq!(api.destroy(ctx), OK);
    close(api, r);
}

/// mlx5 (the default provider) is probed for host-side posting; without an
/// RDMA NIC init fails with what is missing, and RCCL falls back to its own
/// RMA backend.
#[test]
fn without_an_rdma_nic_the_mlx5_provider_fails_init_with_a_reason() {
    let config = rccl_rust_gin::config::Config::default();
    assert_eq!(config.provider, rccl_rust_gin::config::ProviderKind::Mlx5, "mlx5 unless emu is asked for");
    let devs = machine::sysfs_mlx5_devices();
    eprintln!("THIS MACHINE: mlx5 devices in sysfs: {devs:?}; the RMA plugin's provider must {}",
        if devs.is_empty() { "FAIL with a reason" } else { "open" });
    match rccl_rust_gin::rma::plugin::select_provider(&config) {
        Err(e) if devs.is_empty() => {
            assert_eq!(e.code(), NCCL_SYSTEM_ERROR);
            assert!(e.to_string().contains("RCCL_RUST_GIN_PROVIDER=emu"), "{e}");
        }
        Err(e) => panic!("sysfs lists {devs:?}, yet the provider failed: {e}"),
        // A machine with a ConnectX: host-side posting needs no GPU.
        Ok(p) => {
            assert!(!devs.is_empty(), "a provider on a machine whose sysfs lists no mlx5 device");
            assert_eq!(p.kind(), rccl_rust_gin::config::ProviderKind::Mlx5);
            assert_eq!(p.devices(), devs.len());
        }
    }
}

// --- optFlags: aggregation shares doorbells, changes nothing else ---------------

#[test]
fn aggregated_requests_share_one_doorbell_and_keep_data_and_order() {
    on_family(1, aggregated_requests_share_one_doorbell_and_keep_data_and_order_body)
}

fn aggregated_requests_share_one_doorbell_and_keep_data_and_order_body() {
    let api = linked();
    let r = solo(api);
    let (res, ctx) = api.create_context(r.coll, 2, -1, 1);
    assert_eq!(res, OK);
    let src = buf(8 * 4096);
    src.write(0, &(0..8 * 4096).map(|i| pattern(3, i)).collect::<Vec<_>>());
    let dst = buf(8 * 4096);
    let sig = buf(64);
    let (sm, dm, gm) = (
        api.reg_ok(r.coll, &src, NCCL_PTR_CUDA),
        api.reg_ok(r.coll, &dst, NCCL_PTR_CUDA),
        api.reg_ok(r.coll, &sig, NCCL_PTR_CUDA),
    );
    let doorbells = || rccl_rust_gin::rma::plugin::nic_counters(r.coll).unwrap().expect("the emulated NIC's counters").doorbells;
    let clear = || dst.write(0, &vec![0u8; 8 * 4096]);
    let check = |what: &str| {
        let mut d = vec![0u8; 8 * 4096];
        dst.read(0, &mut d);
        assert!(d.iter().enumerate().all(|(i, b)| *b == pattern(3, i)), "{what}: the data landed");
    };
    let puts = |flags: &dyn Fn(usize) -> u32| -> Vec<P> {
        (0..8).map(|k| api.put(ctx, 0, (k * 4096) as u64, sm, 4096, (k * 4096) as u64, dm, 0, flags(k))).collect()
    };
    // A shared ring is one doorbell, except on bnxt_re, which rings once per
    // WQE unless RCCL_RUST_GIN_BNXT_DOORBELL=peer (a field quirk,
    // docs/nic-families.md): there aggregation defers the ring, and the
    // ring names each WQE.
    let per_wqe = rccl_host::family_asked() == Some(rccl_rust_gin::abi::RUST_GIN_FAMILY_BNXT)
        && std::env::var("RCCL_RUST_GIN_BNXT_DOORBELL").map_or(true, |v| v != "peer");
    let rung = |grouped: u64, wqes: u64| if per_wqe { wqes } else { grouped };
    let wait_all = |reqs: &[P]| reqs.iter().for_each(|q| assert_eq!(api.wait(r.coll, ctx, *q), OK));

    // Without the hint: one doorbell per request.
    clear();
    let d0 = doorbells();
    let reqs = puts(&|_| 0);
    assert_eq!(doorbells() - d0, 8, "eight requests, eight doorbells");
    wait_all(&reqs);
    check("no hint");

    // With the hint on all but the last: one doorbell for all eight.
    clear();
    let d0 = doorbells();
    let reqs = puts(&|k| if k < 7 { AGG } else { 0 });
    assert_eq!(doorbells() - d0, rung(1, 8), "seven aggregated and one plain request share one doorbell");
    wait_all(&reqs);
    assert_eq!(doorbells() - d0, rung(1, 8));
    check("aggregated");

    // All aggregated: nothing rings until test() (or iflush, rmaProgress).
    clear();
    let d0 = doorbells();
    let reqs = puts(&|_| AGG);
    assert_eq!(doorbells() - d0, 0, "aggregated requests wait for a doorbell");
    let mut done = 0;
    assert_eq!(api.test(r.coll, reqs[0], &mut done), OK);
    assert_eq!(doorbells() - d0, rung(1, 8), "test() rings what aggregation left");
    // The NIC may have completed the first put before test() looked: then
    // test() said done and released it (a second test would find it gone).
    wait_all(&reqs[done as usize..]);
    check("rung by test");
    for ring in ["rmaProgress", "iflush"] {
        clear();
        let d0 = doorbells();
        let reqs = puts(&|_| AGG);
        let mut extra = Vec::new();
        if ring == "rmaProgress" {
            assert_eq!(api.progress(ctx), OK);
        } else {
            let mut f = NULL;
            assert_eq!(api.iflush(ctx, 0, NULL, 0, &mut f), OK);
            extra.push(f);
        }
        // iflush adds its flush WRITE (bnxt_re has no NOP), rung with them.
        let wqes = if ring == "iflush" { 9 } else { 8 };
        assert_eq!(doorbells() - d0, rung(1, wqes), "{ring} rings what aggregation left, once");
        wait_all(&reqs);
        wait_all(&extra);
        check(ring);
    }

    // A plain request on another queue rings the aggregated ones too.
    clear();
    let d0 = doorbells();
    let mut reqs = puts(&|_| AGG);
    reqs.push(api.put(ctx, 1, 0, sm, 8, 0, dm, 0, 0));
    assert_eq!(doorbells() - d0, rung(2, 9), "one doorbell per queue");
    wait_all(&reqs);
    check("two queues");

    // Order: aggregated puts, then an aggregated signal, then a plain one:
    // when the signal is seen, every byte before it is there.
    clear();
    sig.write(0, &[0u8; 8]);
    let mut reqs = puts(&|_| AGG);
    let mut q = NULL;
    assert_eq!(api.iput_signal(ctx, 0, 0, NULL, 0, 0, NULL, 0, 0, gm, 1, NCCL_NET_SIGNAL_OP_INC, AGG, &mut q), OK);
    reqs.push(q);
    assert_eq!(api.iput_signal(ctx, 0, 0, NULL, 0, 0, NULL, 0, 0, gm, 2, NCCL_NET_SIGNAL_OP_ADD, 0, &mut q), OK);
    reqs.push(q);
    spin_until("the signals", api, ctx, || sig.atomic_u64(0).load(Ordering::Acquire) == 3);
    check("before the signal");
    wait_all(&reqs);

    // An unknown bit posts nothing.
    let d0 = doorbells();
    let (res, l) = warns(|| api.iput(ctx, 0, 0, sm, 8, 0, dm, 0, 2, &mut q));
    expect_warn(
        res,
        NCCL_INVALID_ARGUMENT,
        &l,
        &["iput", "optFlags 0x2", "ncclRmaOptFlagsAggregateRequests"],
        "unknown optFlags",
    );
    assert!(q.is_null());
    assert_eq!(api.progress(ctx), OK);
    assert_eq!(doorbells() - d0, 0, "a refused request rings nothing");
    let c = rccl_rust_gin::rma::plugin::nic_counters(r.coll).unwrap().expect("counters");
    assert_eq!(c.doorbells_misdirected, 0, "every doorbell named its queue ({})", family_name());

    for m in [sm, dm, gm] {
        assert_eq!(api.dereg(r.coll, m), OK);
    }
    assert_eq!(api.destroy(ctx), OK);
    close(api, r);
}

// --- flushesAllPutsOnAnySignal on the emulated NIC -------------------------------

/// Ranks 2 and 3 put into rank 0 and see their puts completed (received);
/// then rank 1 signals rank 0 on its own queue pair. Rank 0 watches only the
/// signal: the moment it changes, every put received before it must be
/// visible — what getRmaProperties claims for the emulated NIC.
#[test]
fn a_signal_from_any_peer_makes_every_received_put_visible() {
    on_family(4, a_signal_from_any_peer_makes_every_received_put_visible_body)
}

fn a_signal_from_any_peer_makes_every_received_put_visible_body() {
    let api = Api::V16(harness().v16);
    let n = 4;
    let ex = Exchange::new(n);
    std::thread::scope(|s| {
        for rank in 0..n {
            let ex = ex.clone();
            s.spawn(move || {
                let _broken_on_panic = ex.guard();
                let r = open(api, rank, n, &ex);
                let mut p = NcclRmaProperties::default();
                assert_eq!(api.get_rma_properties(r.coll, &mut p), Some(OK));
                assert!(p.flushes_all_puts_on_any_signal);
                let (res, ctx) = api.create_context(r.coll, 1, -1, 1);
                assert_eq!(res, OK);
                let size = 64 * 1024; // several packets each
                let src = buf(size);
                src.write(0, &(0..size).map(|i| pattern(rank, i)).collect::<Vec<_>>());
                let dst = buf(n * size);
                let sig = buf(8);
                let sm = api.reg_ok(r.coll, &src, NCCL_PTR_CUDA);
                let dm = api.reg_ok(r.coll, &dst, NCCL_PTR_CUDA);
                let gm = api.reg_ok(r.coll, &sig, NCCL_PTR_CUDA);
                ex.barrier();
                std::thread::scope(|inner| {
                    let watcher = (rank == 0).then(|| {
                        let (sig, dst) = (&sig, &dst);
                        inner.spawn(move || {
                            let t = Instant::now();
                            while sig.atomic_u64(0).load(Ordering::Acquire) == 0 {
                                assert!(t.elapsed() < Duration::from_secs(20), "no signal");
                                std::hint::spin_loop();
                            }
                            // No wait, no flush: read at once.
                            for from in [2usize, 3] {
                                let mut d = vec![0u8; size];
                                dst.read(from * size, &mut d);
                                assert!(
                                    d.iter().enumerate().all(|(i, b)| *b == pattern(from, i)),
                                    "put from rank {from} visible at the signal"
                                );
                            }
                        })
                    });
                    if rank >= 2 {
                        let q = api.put(ctx, 0, 0, sm, size, (rank * size) as u64, dm, 0, 0);
                        assert_eq!(api.wait(r.coll, ctx, q), OK);
                    }
                    ex.barrier(); // the puts were received
                    if rank == 1 {
                        let mut q = NULL;
                        let res = api.iput_signal(
                            ctx,
                            0,
                            0,
                            NULL,
                            0,
                            0,
                            NULL,
                            0,
                            0,
                            gm,
                            1,
                            NCCL_NET_SIGNAL_OP_INC,
                            0,
                            &mut q,
                        );
                        assert_eq!(res, OK);
                        assert_eq!(api.wait(r.coll, ctx, q), OK);
                    }
                    if let Some(w) = watcher {
                        w.join().unwrap();
                    }
                });
                ex.barrier();
                for m in [sm, dm, gm] {
                    assert_eq!(api.dereg(r.coll, m), OK);
                }
                assert_eq!(api.destroy(ctx), OK);
                ex.barrier();
                close(api, r);
            });
        }
    });
}

// --- a fault: the peer's NIC refuses a request --------------------------------------

#[test]
fn a_put_to_a_deregistered_window_fails_and_is_reported_without_hanging() {
    let api = linked();
    let n = 2;
    let ex = Exchange::new(n);
    let lines = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for rank in 0..n {
            let (ex, lines) = (ex.clone(), &lines);
            s.spawn(move || {
                let _broken_on_panic = ex.guard();
                let r = open(api, rank, n, &ex);
                let (res, ctx) = api.create_context(r.coll, 1, -1, 1);
                assert_eq!(res, OK);
                let a = buf(4096);
                let b = buf(4096);
                let am = api.reg_ok(r.coll, &a, NCCL_PTR_CUDA);
                let bm = api.reg_ok(r.coll, &b, NCCL_PTR_CUDA);
                a.write(0, &[0xab; 64]);
                ex.barrier();
                // A good request first: it completes before the fault.
                let good = if rank == 0 { api.put(ctx, 0, 0, am, 64, 0, bm, 1, 0) } else { NULL };
                // Then rank 1, once the good put's bytes are in, deregisters
                // the window rank 0 writes to next: its NIC refuses the rkey
                // (a remote access error).
                if rank == 1 {
                    let t = Instant::now();
                    let landed = || {
                        let mut v = [0u8; 64];
                        b.read(0, &mut v);
                        v == [0xab; 64]
                    };
                    while !landed() {
                        assert!(t.elapsed() < Duration::from_secs(20), "the good put never landed");
                        std::thread::yield_now();
                    }
                    assert_eq!(api.dereg(r.coll, bm), OK);
                }
                ex.barrier();
                if rank == 0 {
                    let bad = api.put(ctx, 0, 0, am, 64, 0, bm, 1, 0);
                    let t = Instant::now();
                    let (res, l) = warns(|| api.wait(r.coll, ctx, bad));
                    assert!(t.elapsed() < Duration::from_secs(10), "test() reported instead of hanging");
                    expect_warn(
                        res,
                        NCCL_REMOTE_ERROR,
                        &l,
                        &["test", "iput", "rank 1", remote_access_error().1],
                        "the failed request",
                    );
                    let mut done = 0;
                    assert_eq!(api.test(r.coll, good, &mut done), OK, "the earlier request completed before the fault");
                    assert_eq!(done, 1);
                    let ((q, has), l) = warns(|| {
                        let mut has = false;
                        (api.query(ctx, &mut has), has)
                    });
                    assert_eq!(q, OK);
                    assert!(has, "queryLastError reports the error");
                    lines.lock().unwrap().extend(l);
                    let ((_, again), l) = warns(|| {
                        let mut has = false;
                        (api.query(ctx, &mut has), has)
                    });
                    assert!(again, "still in error");
                    assert!(l.is_empty(), "reported once: {l:?}");
                    // That queue fails fast now; the one to rank 0 still works.
                    let mut q = NULL;
                    let (res, l) = warns(|| api.iput(ctx, 0, 0, am, 8, 0, bm, 1, 0, &mut q));
                    expect_warn(
                        res,
                        NCCL_REMOTE_ERROR,
                        &l,
                        &["iput", "queue to rank 1", "failed"],
                        "a request on the failed queue",
                    );
                    let ok = api.put(ctx, 0, 0, am, 8, 0, bm, 0, 0);
                    assert_eq!(api.wait(r.coll, ctx, ok), OK, "other queues are unaffected");
                }
                ex.barrier();
                assert_eq!(api.dereg(r.coll, am), OK);
                if rank == 0 {
                    assert_eq!(api.dereg(r.coll, bm), OK);
                }
                assert_eq!(api.destroy(ctx), OK);
                ex.barrier();
                close(api, r);
            });
        }
    });
    let lines = lines.into_inner().unwrap();
    expect_warn(
        OK,
        OK,
        &lines,
        &["rank 0", "RMA error", "rank 1", "QP", remote_access_error().0, remote_access_error().1],
        "queryLastError's WARN",
    );
}

// --- proxy-progress mode: completion semantics, deterministic ordering ------------

const CHILD: &str = "RUST_GIN_RMA_PROXY_CHILD";

/// Runs [`proxy_progress_child`] in a child process whose emulated NICs move
/// only when rmaProgress drives them (RCCL_RUST_GIN_EMU_PROGRESS=proxy), as
/// under RCCL's proxy thread.
#[test]
fn proxy_progress_mode() {
    run_child("proxy_progress_child", CHILD, &[("RCCL_RUST_GIN_EMU_PROGRESS", "proxy")]);
}

/// Runs the ignored test `name` of this binary in a child process with
/// `marker` and `env` set, and fails unless it ran and passed.
fn run_child(name: &str, marker: &str, env: &[(&str, &str)]) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--ignored", "--nocapture", "--test-threads=1"])
        .env(marker, "1")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains(&format!("{name} ... ok")), "the child ran the test:\n{text}");
}

#[test]
#[ignore = "run by proxy_progress_mode in a child process"]
fn proxy_progress_child() {
    on_family(4, proxy_progress_child_body)
}

fn proxy_progress_child_body() {
    // Without its parent's RCCL_RUST_GIN_EMU_PROGRESS=proxy this would not
    // test proxy progress: fail rather than pass.
    assert!(std::env::var(CHILD).is_ok(), "proxy_progress_child runs only as the child of proxy_progress_mode");
    let api = Api::V16(harness().v16);
    let n = 4;
    let ex = Exchange::new(n);
    std::thread::scope(|s| {
        for rank in 0..n {
            let ex = ex.clone();
            s.spawn(move || {
                let _broken_on_panic = ex.guard();
                let r = open(api, rank, n, &ex);
                let (res, ctx) = api.create_context(r.coll, 1, -1, 1);
                assert_eq!(res, OK);
                let size = 16 * 1024;
                let src = buf(size);
                src.write(0, &(0..size).map(|i| pattern(rank, i)).collect::<Vec<_>>());
                let dst = buf(n * size);
                let sig = buf(8);
                let sm = api.reg_ok(r.coll, &src, NCCL_PTR_CUDA);
                let dm = api.reg_ok(r.coll, &dst, NCCL_PTR_CUDA);
                let gm = api.reg_ok(r.coll, &sig, NCCL_PTR_CUDA);
                ex.barrier();
                let mut mine = Vec::new();
                if rank >= 2 {
                    let q = api.put(ctx, 0, 0, sm, size, (rank * size) as u64, dm, 0, 0);
                    let mut done = 1;
                    assert_eq!(api.test(r.coll, q, &mut done), OK);
                    assert_eq!(done, 0, "nothing completes before rmaProgress drives the NIC");
                    assert_eq!(api.progress(ctx), OK); // the WRITE leaves: packets in rank 0's inbox
                    mine.push(q);
                }
                ex.barrier();
                if rank == 1 {
                    let mut q = NULL;
                    assert_eq!(
                        api.iput_signal(ctx, 0, 0, NULL, 0, 0, NULL, 0, 0, gm, 1, NCCL_NET_SIGNAL_OP_INC, 0, &mut q),
                        OK
                    );
                    assert_eq!(api.progress(ctx), OK); // the atomic leaves, behind the puts
                    mine.push(q);
                }
                ex.barrier();
                if rank == 0 {
                    assert_eq!(sig.atomic_u64(0).load(Ordering::Acquire), 0, "rank 0's NIC has not run yet");
                    // One step of rank 0's NIC: the puts from ranks 2 and 3 were
                    // received (never acknowledged) before rank 1's signal.
                    assert_eq!(api.progress(ctx), OK);
                    assert_eq!(sig.atomic_u64(0).load(Ordering::Acquire), 1, "the signal arrived");
                    for from in [2usize, 3] {
                        let mut d = vec![0u8; size];
                        dst.read(from * size, &mut d);
                        assert!(
                            d.iter().enumerate().all(|(i, b)| *b == pattern(from, i)),
                            "put from {from} visible at the signal"
                        );
                    }
                }
                ex.barrier();
                // Everyone drives their NIC until their requests are done
                // (rank 0 keeps answering).
                let t = Instant::now();
                for q in mine {
                    loop {
                        let mut done = 0;
                        assert_eq!(api.test(r.coll, q, &mut done), OK);
                        if done == 1 {
                            break;
                        }
                        assert_eq!(api.progress(ctx), OK);
                        assert!(t.elapsed() < Duration::from_secs(20), "rank {rank}: request never completed");
                    }
                }
                ex.barrier();
                for m in [sm, dm, gm] {
                    assert_eq!(api.dereg(r.coll, m), OK);
                }
                assert_eq!(api.destroy(ctx), OK);
                ex.barrier();
                close(api, r);
            });
        }
    });
}

const SHORT_TIMEOUT_CHILD: &str = "RUST_GIN_RMA_SHORT_TIMEOUT_CHILD";

/// Aggregated requests (issue 11): a burst longer than the queue rings what
/// it holds instead of waiting out the timeout for room, and a request's
/// timeout starts when its doorbell rings, not when it was posted behind a
/// held doorbell. Run in a child with a 300 ms timeout.
#[test]
fn aggregated_requests_time_from_their_doorbell_and_never_stall_a_full_queue() {
    run_child("short_timeout_child", SHORT_TIMEOUT_CHILD, &[("RCCL_RUST_GIN_TIMEOUT_MS", "300")]);
}

#[test]
#[ignore = "run by aggregated_requests_time_from_their_doorbell_and_never_stall_a_full_queue in a child process"]
fn short_timeout_child() {
    on_family(2, short_timeout_child_body)
}

fn short_timeout_child_body() {
    assert!(
        std::env::var(SHORT_TIMEOUT_CHILD).is_ok(),
        "short_timeout_child runs only as the child of aggregated_requests_time_from_their_doorbell_and_never_stall_a_full_queue"
    );
    let api = Api::V16(harness().v16);
    let n = 2;
    let ex = Exchange::new(n);
    std::thread::scope(|s| {
        for rank in 0..n {
            let ex = ex.clone();
            s.spawn(move || {
                let _broken_on_panic = ex.guard();
                let r = open(api, rank, n, &ex);
                let (res, ctx) = api.create_context(r.coll, 1, -1, 1);
                assert_eq!(res, OK);
                let src = buf(4096);
                let dst = buf(4096);
                let sm = api.reg_ok(r.coll, &src, NCCL_PTR_CUDA);
                let dm = api.reg_ok(r.coll, &dst, NCCL_PTR_CUDA);
                ex.barrier();
                if rank == 0 {
                    // Three queues' worth of hinted puts, no test between.
                    let t = Instant::now();
                    let mut reqs = Vec::new();
                    for i in 0..3 * 1024u64 {
                        let mut q = NULL;
                        let res = api.iput(ctx, 0, 0, sm, 8, (i % 512) * 8, dm, 1, NCCL_RMA_OPT_FLAGS_AGGREGATE_REQUESTS, &mut q);
                        assert_eq!(res, OK, "hinted put {i}");
                        reqs.push(q);
                    }
                    assert!(t.elapsed() < Duration::from_millis(300), "the burst waited {:?} for room", t.elapsed());
                    for q in reqs {
                        assert_eq!(api.wait(r.coll, ctx, q), OK);
                    }
                    // Held behind no doorbell for longer than the timeout: not
                    // a timeout, the clock starts when the first test rings it.
                    let mut q = NULL;
                    let res = api.iput(ctx, 0, 0, sm, 8, 0, dm, 1, NCCL_RMA_OPT_FLAGS_AGGREGATE_REQUESTS, &mut q);
                    assert_eq!(res, OK);
                    std::thread::sleep(Duration::from_millis(500));
                    assert_eq!(api.wait(r.coll, ctx, q), OK, "a request held 500 ms before its doorbell");
                }
                ex.barrier();
                assert_eq!(api.dereg(r.coll, sm), OK);
                assert_eq!(api.dereg(r.coll, dm), OK);
                assert_eq!(api.destroy(ctx), OK);
                ex.barrier();
                close(api, r);
            });
        }
    });
}

const FULL_QUEUE_CHILD: &str = "RUST_GIN_RMA_FULL_QUEUE_CHILD";

/// A burst three rings long, nothing tested in between, on a NIC that moves
/// only when the proxy drives it: the posts that find the ring full are
/// queued, and go out as test and rmaProgress drive the NIC and room comes
/// back; the device producer's own credit wait, which nothing would drive,
/// is never entered. On ionic the ring's last WQE stays free (ionic/family.h
/// kRingSlack): the plugin's room check must leave it too, or the post that
/// fills it waits in the producer and times out.
#[test]
fn a_full_queue_in_proxy_mode_gets_room_by_driving_the_nic() {
    run_child("full_queue_child", FULL_QUEUE_CHILD, &[("RCCL_RUST_GIN_EMU_PROGRESS", "proxy")]);
}

#[test]
#[ignore = "run by a_full_queue_in_proxy_mode_gets_room_by_driving_the_nic in a child process"]
fn full_queue_child() {
    assert!(std::env::var(FULL_QUEUE_CHILD).is_ok(), "full_queue_child runs only as its parent's child");
    on_family(1, || {
        let api = linked();
        let r = solo(api);
        let (res, ctx) = api.create_context(r.coll, 1, -1, 1);
        assert_eq!(res, OK);
        let src = buf(4096);
        let dst = buf(4096);
        let (sm, dm) = (api.reg_ok(r.coll, &src, NCCL_PTR_CUDA), api.reg_ok(r.coll, &dst, NCCL_PTR_CUDA));
        let mut reqs = Vec::new();
        for i in 0..3 * 512u64 {
            let mut q = NULL;
            let (res, l) = warns(|| api.iput(ctx, 0, 0, sm, 8, (i % 512) * 8, dm, 0, 0, &mut q));
            assert_eq!(res, OK, "put {i} of a burst on a full ring: {l:?}");
            reqs.push(q);
        }
        for q in reqs {
            assert_eq!(api.wait(r.coll, ctx, q), OK);
        }
        for m in [sm, dm] {
            assert_eq!(api.dereg(r.coll, m), OK);
        }
        assert_eq!(api.destroy(ctx), OK);
        close(api, r);
    });
}

// --- offsets: from the registered allocation, not from a window inside it ---------

/// The symmetric allocation RCCL registers, a window inside it, and where the
/// window's bytes sit: what the offset tests below lay out on every rank.
const ALLOC: usize = 32 * 1024;
const SRC_WIN: usize = 0x3000;
const DST_WIN: usize = 0x5000;
const SIG_ALLOC: usize = 4096;
const SIG_WIN: usize = 0x800;
const GET_ALLOC: usize = 8192;
const GET_WIN: usize = 0x1000;

/// Issue 24 (a). RCCL registers the whole backing allocation, never a window
/// inside it, and passes offsets from the allocation's start (NVIDIA/nccl
/// @1e47331c, "Fix RMA proxy offsets for subwindows"):
/// - the RMA proxy registers `mem->primaryAddr, mem->size`
///   (src/dev_runtime.cc:538 -> src/rma/rma_proxy.cc:317) and, since that
///   commit, adds the window's offset in the allocation to both offsets
///   (src/rma/rma_proxy_launch.cc:31-34, `ncclDevrGetWinOffset`,
///   src/dev_runtime.cc:1665);
/// - the GIN proxy registers the same allocation (src/dev_runtime.cc:510 ->
///   src/gin/gin_host.cc:390 -> src/gin/gin_host_proxy.cc:391), and its
///   kernels add `4096 * ginOffset4K` (the window's offset, src/dev_runtime.cc:744,
///   1255) before the GFD reaches iput, iputSignal or iget
///   (src/include/nccl_device/impl/gin__funcs.h:23, 485-488;
///   src/gin/gin_host_proxy.cc:261, 303, 311).
///
/// So the plugin counts every offset from the address regMrSym was given.
/// Here each rank has windows at 0x3000 (source), 0x5000 (destination),
/// 0x800 (signals) and 0x1000 (gets) of its allocations, and RCCL's offsets
/// (window offset + offset in the window) must land every put, signal and
/// get at exactly those bytes of the peer's allocation, and nothing
/// anywhere else; offsets past the registration are refused with a WARN
/// naming the argument. A registration that itself starts inside a larger
/// allocation (0x1240 in, not page-aligned) counts from its own start. Every
/// version's table.
///
/// Seen failing (2026-12-05, each fault planted in host/rma/memory.rs and
/// reverted): the peer's address as `base + (off & 0xfff)` (the offset's 4 KiB
/// part dropped) failed "rank 0: the destination allocation (v17): byte 0x0"
/// (the put meant for 0x6000 landed at 0); the peer's base rounded down to
/// its page failed "a put into the sub-range" (the peer's NIC refused the
/// address below its registration); on the code before the WARN lines named
/// the argument, the first out-of-range case failed (no "dstOff").
#[test]
fn offsets_count_from_the_registered_allocation_not_the_window_inside_it() {
    let h = harness();
    for api in [Api::V17(h.v17), Api::V16(h.v16), Api::V15(h.v15), Api::V14(h.v14), Api::V13(h.v13)] {
        let n = 2;
        let ex = Exchange::new(n);
        std::thread::scope(|s| {
            for rank in 0..n {
                let ex = ex.clone();
                s.spawn(move || {
                    let _broken_on_panic = ex.guard();
                    RANKS.with(|r| r.set(n as c_int));
                    let r = open(api, rank, n, &ex);
                    window_offsets(api, &r, &|| ex.barrier());
                    close(api, r);
                });
            }
        });
    }
}

/// Rank `rank`'s source byte at `offset`, repeating only every 512 KiB
/// (pattern() repeats every 256 bytes, which would hide a source read from
/// the wrong 256-byte step).
fn byte_at(rank: usize, offset: usize) -> u8 {
    ((offset as u64).wrapping_mul(0x9e37_79b1) >> 11) as u8 ^ (rank as u8).wrapping_mul(0x5b)
}

/// `got` equals `want`, or the first differing byte is named.
#[track_caller]
fn same_bytes(got: &GpuBuf, want: &[u8], what: &str) {
    let mut g = vec![0u8; want.len()];
    got.read(0, &mut g);
    if let Some(i) = g.iter().zip(want).position(|(a, b)| a != b) {
        panic!("{what}: byte {i:#x} is {:#04x}, expected {:#04x}", g[i], want[i]);
    }
}

fn window_offsets(api: Api, r: &Rank, sync: &dyn Fn()) {
    let (me, peer) = (r.rank, (1 - r.rank) as u32);
    let v = api.version();
    let (res, ctx) = api.create_context(r.coll, 1, -1, 1);
    assert_eq!(res, OK, "createContext");
    let (src, dst, sig, got) = (buf(ALLOC), buf(ALLOC), buf(SIG_ALLOC), buf(GET_ALLOC));
    src.write(0, &(0..ALLOC).map(|i| byte_at(me, i)).collect::<Vec<_>>());
    for b in [&dst, &sig, &got] {
        b.write(0, &vec![0u8; b.len()]);
    }
    // Whole allocations, as RCCL registers them.
    let (sm, dm, gm, lm) = (
        api.reg_ok(r.coll, &src, NCCL_PTR_CUDA),
        api.reg_ok(r.coll, &dst, NCCL_PTR_CUDA),
        api.reg_ok(r.coll, &sig, NCCL_PTR_CUDA),
        api.reg_ok(r.coll, &got, NCCL_PTR_CUDA),
    );
    sync();
    // RCCL's offsets: the window's place in the allocation plus the offset in it.
    let (s, d, g) = (SRC_WIN as u64, DST_WIN as u64, SIG_WIN as u64);
    let p1 = api.put(ctx, 0, s + 0x100, sm, 0x400, d + 0x200, dm, peer, 0);
    let mut p2 = NULL;
    let add = NCCL_NET_SIGNAL_OP_ADD;
    let res = api.iput_signal(ctx, 0, s + 0x800, sm, 0x100, d + 0x1000, dm, peer, g + 16, gm, 7, add, 0, &mut p2);
    assert_eq!(res, OK, "iputSignal");
    let mut p3 = NULL;
    let res = api.iput_signal(ctx, 0, 0, NULL, 0, 0, NULL, peer, g + 24, gm, 0, NCCL_NET_SIGNAL_OP_INC, 0, &mut p3);
    assert_eq!(res, OK, "signal-only iputSignal");
    for q in [p1, p2, p3] {
        assert_eq!(api.wait(r.coll, ctx, q), OK, "rank {me}: test");
    }
    // The peer's requests to this rank are complete too.
    sync();
    let from = |at: usize| byte_at(peer as usize, at);
    let mut want = vec![0u8; ALLOC];
    for i in 0..0x400 {
        want[DST_WIN + 0x200 + i] = from(SRC_WIN + 0x100 + i);
    }
    for i in 0..0x100 {
        want[DST_WIN + 0x1000 + i] = from(SRC_WIN + 0x800 + i);
    }
    same_bytes(&dst, &want, &format!("rank {me}: the destination allocation (v{v})"));
    let mut want_sig = vec![0u8; SIG_ALLOC];
    want_sig[SIG_WIN + 16..SIG_WIN + 24].copy_from_slice(&7u64.to_ne_bytes());
    want_sig[SIG_WIN + 24..SIG_WIN + 32].copy_from_slice(&1u64.to_ne_bytes());
    same_bytes(&sig, &want_sig, &format!("rank {me}: the signal allocation (v{v})"));

    // A get from the peer's window into this rank's get window, then a flush.
    let mut q = NULL;
    assert_eq!(api.iget(ctx, 0, d + 0x200, dm, 0x400, GET_WIN as u64 + 0x40, lm, peer, 0, &mut q), OK, "iget");
    let mut f = NULL;
    assert_eq!(api.iflush(ctx, 0, gm, peer, &mut f), OK, "iflush");
    assert_eq!(api.wait(r.coll, ctx, f), OK, "iflush completes");
    assert_eq!(api.wait(r.coll, ctx, q), OK, "iget completes");
    let mut want_got = vec![0u8; GET_ALLOC];
    for i in 0..0x400 {
        // The peer's window holds what this rank put there.
        want_got[GET_WIN + 0x40 + i] = byte_at(me, SRC_WIN + 0x100 + i);
    }
    same_bytes(&got, &want_got, &format!("rank {me}: the get allocation (v{v})"));

    // Past the registration (not past the window: RCCL checks windows): refused.
    let sig_past = (SIG_ALLOC - 4) as u64;
    type Call<'a> = Box<dyn Fn(*mut P) -> NcclResult + 'a>;
    let cases: Vec<(Call, &[&str])> = vec![
        (
            Box::new(|q| api.iput(ctx, 0, 0, sm, 0x200, (ALLOC - 0x100) as u64, dm, peer, 0, q)),
            &["iput", "dstOff 32512 + size 512", "rank", "(32768 bytes)"],
        ),
        (Box::new(|q| api.iput(ctx, 0, (ALLOC - 8) as u64, sm, 16, 0, dm, peer, 0, q)), &["iput", "srcOff 32760 + size 16"]),
        (
            Box::new(|q| {
                api.iput_signal(ctx, 0, 0, sm, 8, 0, dm, peer, sig_past, gm, 1, NCCL_NET_SIGNAL_OP_INC, 0, q)
            }),
            &["iputSignal", "signalOff 4092 + size 8"],
        ),
        (
            Box::new(|q| api.iput_signal(ctx, 0, 0, sm, 8, ALLOC as u64, dm, peer, 0, gm, 1, NCCL_NET_SIGNAL_OP_INC, 0, q)),
            &["iputSignal", "dstOff 32768 + size 8"],
        ),
        (Box::new(|q| api.iget(ctx, 0, ALLOC as u64, dm, 1, 0, lm, peer, 0, q)), &["iget", "remoteOff 32768 + size 1"]),
        (Box::new(|q| api.iget(ctx, 0, 0, dm, 16, (GET_ALLOC - 8) as u64, lm, peer, 0, q)), &["iget", "localOff 8184 + size 16"]),
    ];
    for (call, words) in &cases {
        let mut q = 1usize as P;
        let (res, l) = warns(|| call(&mut q));
        expect_warn(res, NCCL_INVALID_ARGUMENT, &l, words, &format!("rank {me} (v{v}): {words:?}"));
        assert!(q.is_null(), "request set to NULL on failure");
    }

    // A registration that itself starts inside the allocation, off the page:
    // its offsets count from where it starts.
    let (res, sub) = api.reg(r.coll, (dst.dev_addr() + 0x1240) as P, 0x2000, NCCL_PTR_CUDA);
    assert_eq!(res, OK, "regMrSym of a sub-range");
    sync();
    let q = api.put(ctx, 0, s, sm, 0x40, 0x10, sub, peer, 0);
    assert_eq!(api.wait(r.coll, ctx, q), OK, "a put into the sub-range");
    let mut q = NULL;
    let (res, l) = warns(|| api.iput(ctx, 0, 0, sm, 16, 0x2000 - 8, sub, peer, 0, &mut q));
    expect_warn(
        res,
        NCCL_INVALID_ARGUMENT,
        &l,
        &["iput", "dstOff 8184 + size 16", "(8192 bytes)"],
        "past the sub-range, inside the allocation",
    );
    sync();
    for i in 0..0x40 {
        want[0x1250 + i] = from(SRC_WIN + i);
    }
    same_bytes(&dst, &want, &format!("rank {me}: the sub-range registration (v{v})"));
    sync();
    for m in [sm, dm, gm, lm, sub] {
        assert_eq!(api.dereg(r.coll, m), OK, "deregMrSym");
    }
    assert_eq!(api.destroy(ctx), OK);
    sync();
}

// --- bursts past the queue's depth: queued, in order, never refused ---------------

const BACKLOG_CHILD: &str = "RUST_GIN_RMA_BACKLOG_CHILD";

/// Issue 24 (b), nccl#2119: a proxy whose iput fails for lack of room leaks
/// the request and the GPU waits forever, and RCCL's proxy posts as many
/// requests as its kernels hand it without testing in between. So a full
/// queue must queue the request, not refuse it, and not hold the proxy
/// thread until room comes back either. Rank 0 posts four queues' worth of
/// puts (context 0) and two of put-with-signals (context 1) to each of ranks
/// 1 and 2, interleaved, then a get and a flush behind them, with no test in
/// between, while the peers' NICs execute nothing (proxy mode, their proxies
/// busy elsewhere: what a congested or paused link does to a real one). Only
/// then do the peers drive their NICs. Every call returns ncclSuccess at
/// once; every request completes; per peer and context nothing overtakes:
/// the overlapping puts leave exactly the bytes of a sequential replay, each
/// signal arrives after its put's data, and the get, queued behind the
/// puts, reads their final bytes.
///
/// Seen failing (2026-12-05): on the code before the backlog, put-with-signal
/// 256 to rank 1 (its queue full with 256, two WQEs each) waited out the 20 s timeout
/// for room and returned ncclTimeout; with the backlog drained newest first
/// (planted in host/rma/context.rs, reverted), rank 1 saw signal 686 with
/// the data of put 594; with each queued request's WQEs posted in reverse (the ATOMIC
/// before the WRITE; planted, reverted), the watcher saw a signal before its
/// data in 5 of 10 runs (a race it must catch in the middle of a NIC step).
#[test]
fn a_burst_past_the_queue_depth_is_queued_in_order_and_never_refused() {
    run_child(
        "backlog_child",
        BACKLOG_CHILD,
        &[("RCCL_RUST_GIN_EMU_PROGRESS", "proxy"), ("RCCL_RUST_GIN_QUEUE_DEPTH", "512")],
    );
}

/// Put `i` of the burst: (bytes, first 8-byte slot). Lengths 8 to 32 at
/// slots that walk by 7 over 61, so most puts overlap earlier ones.
fn burst_put(i: usize) -> (usize, usize) {
    (8 * (1 + i % 4), (i * 7) % 61)
}

#[test]
#[ignore = "run by a_burst_past_the_queue_depth_is_queued_in_order_and_never_refused in a child process"]
fn backlog_child() {
    assert!(std::env::var(BACKLOG_CHILD).is_ok(), "backlog_child runs only as its parent's child");
    on_family(3, backlog_child_body)
}

fn backlog_child_body() {
    let api = Api::V16(harness().v16);
    let n = 3;
    let depth = 512;
    let puts = 4 * depth; // one WQE each
    let signals = 2 * depth; // a WRITE and an ATOMIC each
    const SLOTS: usize = 64; // 8-byte slots the puts overwrite: bytes [0, 512)
    // Signalled put j: SIGNALLED bytes whose last 8 hold j + 1, at DATA_AT.
    // Long, so its last bytes land well after its first (several packets).
    const SIGNALLED: usize = 16 * 1024;
    const DATA_AT: usize = 1024;
    const LAST: usize = DATA_AT + SIGNALLED - 8;
    // The bytes a sequential replay of the puts leaves.
    let mut replay = [0u64; SLOTS];
    for i in 0..puts {
        let (len, slot) = burst_put(i);
        replay[slot..slot + len / 8].fill(i as u64);
    }
    let finished = std::sync::atomic::AtomicBool::new(false);
    let ex = Exchange::new(n);
    std::thread::scope(|s| {
        for rank in 0..n {
            let (ex, finished) = (ex.clone(), &finished);
            s.spawn(move || {
                let _broken_on_panic = ex.guard();
                let r = open(api, rank, n, &ex);
                let (res, ctx) = api.create_context(r.coll, 2, -1, 1);
                assert_eq!(res, OK);
                // Put i's source: its number 4 times. Signalled put j's: the
                // SIGNALLED bytes that end with value j + 1 of a run of
                // values 1, 2, ... (sources overlap).
                let values = puts * 32 + SIGNALLED;
                let src = buf(values + signals * 8);
                for i in 0..puts {
                    src.write(i * 32, &[(i as u64).to_ne_bytes(); 4].concat());
                }
                for j in 0..signals {
                    src.write(values + j * 8, &(j as u64 + 1).to_ne_bytes());
                }
                let (dst, sig, got) = (buf(DATA_AT + SIGNALLED), buf(64), buf(4096));
                for b in [&dst, &sig, &got] {
                    b.write(0, &vec![0u8; b.len()]);
                }
                let sm = api.reg_ok(r.coll, &src, NCCL_PTR_CUDA);
                let dm = api.reg_ok(r.coll, &dst, NCCL_PTR_CUDA);
                let gm = api.reg_ok(r.coll, &sig, NCCL_PTR_CUDA);
                let lm = api.reg_ok(r.coll, &got, NCCL_PTR_CUDA);
                ex.barrier();
                let mut reqs = Vec::new();
                let mut flush = NULL;
                if rank == 0 {
                    for i in 0..puts {
                        // RCCL's hint on most, as when more GFDs wait.
                        let flags = if i % 16 == 15 { 0 } else { AGG };
                        for p in 1..n as u32 {
                            let (len, slot) = burst_put(i);
                            let mut q = NULL;
                            let (res, l) =
                                warns(|| api.iput(ctx, 0, (i * 32) as u64, sm, len, (slot * 8) as u64, dm, p, flags, &mut q));
                            assert_eq!(res, OK, "put {i} to rank {p}: {l:?}");
                            reqs.push(q);
                            if i < signals {
                                let op = if i % 2 == 0 { NCCL_NET_SIGNAL_OP_INC } else { NCCL_NET_SIGNAL_OP_ADD };
                                let so = (values + (i + 1) * 8 - SIGNALLED) as u64;
                                let (d, z) = (DATA_AT as u64, SIGNALLED);
                                let mut q = NULL;
                                let (res, l) =
                                    warns(|| api.iput_signal(ctx, 1, so, sm, z, d, dm, p, 0, gm, 1, op, flags, &mut q));
                                assert_eq!(res, OK, "put with signal {i} to rank {p}: {l:?}");
                                reqs.push(q);
                            }
                        }
                    }
                    // Behind every put to rank 1 on context 0: a get of the slots, and a flush.
                    let mut q = NULL;
                    assert_eq!(api.iget(ctx, 0, 0, dm, SLOTS * 8, 0, lm, 1, 0, &mut q), OK, "iget behind the burst");
                    reqs.push(q);
                    assert_eq!(api.iflush(ctx, 0, gm, 1, &mut flush), OK, "iflush behind the burst");
                }
                // Only now do the peers' proxies run.
                ex.barrier();
                if rank == 0 {
                    assert_eq!(api.wait(r.coll, ctx, flush), OK, "the flush");
                    for (k, q) in reqs.into_iter().enumerate() {
                        assert_eq!(api.wait(r.coll, ctx, q), OK, "request {k} of the burst");
                    }
                    let mut has = true;
                    assert_eq!(api.query(ctx, &mut has), OK);
                    assert!(!has, "queryLastError: no error");
                    let mut g = vec![0u8; SLOTS * 8];
                    got.read(0, &mut g);
                    let g: Vec<u64> = g.chunks(8).map(|c| u64::from_ne_bytes(c.try_into().unwrap())).collect();
                    assert_eq!(g, replay, "the get, queued behind the puts, reads their final bytes");
                    finished.store(true, Ordering::Release);
                } else {
                    // The target: drives its NIC until rank 0 is done, while a
                    // watcher sees the data of each signal it has seen, also
                    // in the middle of a step of the NIC.
                    let seen = |who: &str| {
                        let s = sig.atomic_u64(0).load(Ordering::Acquire);
                        let d = dst.atomic_u64(LAST).load(Ordering::Acquire);
                        assert!(d >= s, "rank {rank} ({who}): signal {s} arrived before its data (the slot holds {d})");
                    };
                    std::thread::scope(|w| {
                        w.spawn(|| {
                            while !finished.load(Ordering::Acquire) {
                                seen("watcher");
                            }
                        });
                        let t = Instant::now();
                        loop {
                            let done = finished.load(Ordering::Acquire);
                            assert_eq!(api.progress(ctx), OK);
                            seen("between steps");
                            if done {
                                break;
                            }
                            assert!(t.elapsed() < Duration::from_secs(60), "rank {rank}: rank 0's burst never finished");
                            std::thread::yield_now();
                        }
                    });
                }
                ex.barrier();
                if rank != 0 {
                    assert_eq!(sig.atomic_u64(0).load(Ordering::Acquire), signals as u64, "rank {rank}: every signal");
                    let last = dst.atomic_u64(LAST).load(Ordering::Acquire);
                    assert_eq!(last, signals as u64, "rank {rank}: the last signalled put");
                    let mut b = vec![0u8; SLOTS * 8];
                    dst.read(0, &mut b);
                    let b: Vec<u64> = b.chunks(8).map(|c| u64::from_ne_bytes(c.try_into().unwrap())).collect();
                    assert_eq!(b, replay, "rank {rank}: the puts' final bytes are a sequential replay's");
                }
                for m in [sm, dm, gm, lm] {
                    assert_eq!(api.dereg(r.coll, m), OK);
                }
                assert_eq!(api.destroy(ctx), OK);
                ex.barrier();
                close(api, r);
            });
        }
    });
}

const STUCK_CHILD: &str = "RUST_GIN_RMA_STUCK_CHILD";

/// Issue 24 (b), the other side: queueing covers only the lack of room.
/// Requests queued on a queue whose NIC completes nothing for the timeout
/// fail with ncclTimeout when tested (no test says "not done" forever), and
/// requests queued on a queue that failed fail with ncclRemoteError; a new
/// request on the failed queue is refused at once. Proxy mode, 300 ms
/// timeout: rank 1's NIC first executes nothing while rank 0 overfills the
/// queue of context 0 (stuck); then rank 1 deregisters a window, rank 0
/// overfills context 1's queue with puts into it, and rank 1's NIC refuses
/// the first (failed).
///
/// Seen failing (2026-12-05, each planted in host/rma/context.rs and
/// reverted): without the backlog's stuck clock, the request queued on the
/// stuck queue "never finished, with or without an error"; without the
/// failed-queue check for a request still in the backlog, the one queued on
/// the failed queue got ncclTimeout instead of ncclRemoteError.
#[test]
fn queued_requests_still_fail_on_a_stuck_or_failed_queue() {
    run_child(
        "stuck_child",
        STUCK_CHILD,
        &[
            ("RCCL_RUST_GIN_EMU_PROGRESS", "proxy"),
            ("RCCL_RUST_GIN_TIMEOUT_MS", "300"),
            ("RCCL_RUST_GIN_QUEUE_DEPTH", "512"),
        ],
    );
}

#[test]
#[ignore = "run by queued_requests_still_fail_on_a_stuck_or_failed_queue in a child process"]
fn stuck_child() {
    assert!(std::env::var(STUCK_CHILD).is_ok(), "stuck_child runs only as its parent's child");
    on_family(2, stuck_child_body)
}

fn stuck_child_body() {
    let api = Api::V16(harness().v16);
    let n = 2;
    let burst = 2 * 512;
    let finished = std::sync::atomic::AtomicBool::new(false);
    let ex = Exchange::new(n);
    // test until not "not done"; returns test's result and its WARN lines.
    let outcome = |api: Api, coll: P, ctx: P, q: P| {
        let t = Instant::now();
        loop {
            let mut done = 0;
            let (res, l) = warns(|| api.test(coll, q, &mut done));
            if res != OK || done == 1 {
                return (res, l);
            }
            assert_eq!(api.progress(ctx), OK);
            assert!(t.elapsed() < Duration::from_secs(20), "the request never finished, with or without an error");
            std::thread::yield_now();
        }
    };
    std::thread::scope(|s| {
        for rank in 0..n {
            let (ex, finished) = (ex.clone(), &finished);
            s.spawn(move || {
                let _broken_on_panic = ex.guard();
                let r = open(api, rank, n, &ex);
                let (res, ctx) = api.create_context(r.coll, 2, -1, 1);
                assert_eq!(res, OK);
                let (src, dst, gone) = (buf(4096), buf(4096), buf(4096));
                let sm = api.reg_ok(r.coll, &src, NCCL_PTR_CUDA);
                let dm = api.reg_ok(r.coll, &dst, NCCL_PTR_CUDA);
                let gm = api.reg_ok(r.coll, &gone, NCCL_PTR_CUDA);
                ex.barrier();
                // Stuck: rank 1's NIC executes nothing.
                if rank == 0 {
                    let t = Instant::now();
                    let reqs: Vec<P> = (0..burst).map(|i| api.put(ctx, 0, 0, sm, 8, (i % 512) * 8, dm, 1, 0)).collect();
                    let (res, l) = outcome(api, r.coll, ctx, reqs[burst as usize - 1]);
                    expect_warn(
                        res,
                        NCCL_TIMEOUT,
                        &l,
                        &["test", "iput", "rank 1", "waited for room", "completed nothing"],
                        "a request queued on a stuck queue",
                    );
                    assert!(t.elapsed() >= Duration::from_millis(300), "it failed only after the timeout");
                    let (res, l) = outcome(api, r.coll, ctx, reqs[0]);
                    expect_warn(
                        res,
                        NCCL_TIMEOUT,
                        &l,
                        &["test", "iput", "not complete after 300 ms"],
                        "the request the NIC never completed",
                    );
                }
                ex.barrier();
                // Failed: rank 1's window is gone when rank 0's puts arrive.
                if rank == 1 {
                    assert_eq!(api.dereg(r.coll, gm), OK);
                }
                ex.barrier();
                if rank == 0 {
                    let reqs: Vec<P> = (0..burst).map(|i| api.put(ctx, 1, 0, sm, 8, (i % 512) * 8, gm, 1, 0)).collect();
                    ex.barrier();
                    let (res, l) = outcome(api, r.coll, ctx, reqs[burst as usize - 1]);
                    expect_warn(
                        res,
                        NCCL_REMOTE_ERROR,
                        &l,
                        &["test", "iput", "rank 1", "failed"],
                        "a request queued on a failed queue",
                    );
                    let (res, l) = outcome(api, r.coll, ctx, reqs[0]);
                    expect_warn(
                        res,
                        NCCL_REMOTE_ERROR,
                        &l,
                        &["test", "iput", "rank 1", remote_access_error().1],
                        "the request the NIC refused",
                    );
                    let mut q = NULL;
                    let (res, l) = warns(|| api.iput(ctx, 1, 0, sm, 8, 0, gm, 1, 0, &mut q));
                    expect_warn(
                        res,
                        NCCL_REMOTE_ERROR,
                        &l,
                        &["iput", "queue to rank 1", "failed"],
                        "a new request on the failed queue",
                    );
                    finished.store(true, Ordering::Release);
                } else {
                    ex.barrier();
                    let t = Instant::now();
                    while !finished.load(Ordering::Acquire) {
                        assert_eq!(api.progress(ctx), OK);
                        assert!(t.elapsed() < Duration::from_secs(30), "rank 0 never finished");
                        std::thread::yield_now();
                    }
                }
                ex.barrier();
                assert_eq!(api.dereg(r.coll, sm), OK);
                assert_eq!(api.dereg(r.coll, dm), OK);
                if rank == 0 {
                    assert_eq!(api.dereg(r.coll, gm), OK);
                }
                assert_eq!(api.destroy(ctx), OK);
                ex.barrier();
                close(api, r);
            });
        }
    });
}
