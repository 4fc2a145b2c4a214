//! The GIN vtable driven exactly in RCCL's order, ranks as threads: init,
//! devices, getGinProperties, getProperties, listen, allgather of handles,
//! connect, closeListen, createContext, regMrSym, device operations (host
//! build of the device library), deregMrSym, destroyContext, closeColl,
//! finalize. Then bad input and faults.

#[path = "support/gin_flow.rs"]
mod gin_flow;
#[macro_use]
#[path = "support/mapped.rs"]
mod mapped;
#[path = "support/rccl_host.rs"]
mod rccl_host;

use gin_flow::*;
use rccl_host::*;
use rccl_rust_gin::abi::*;
use rccl_rust_gin::device as dev;
use rccl_rust_gin::ffi::nccl::*;
use std::ffi::c_void;
use std::sync::Arc;

fn run_threads(n: usize) {
    let p = plugin();
    Exchange::as_threads(n, |rank, ex| {
        let mut r = p.open_rank(rank as i32, n as i32);
        let all = ex.allgather(rank, r.handle);
        assert_eq!(p.connect(&mut r, &all), OK, "connect");
        run_connected(p, &r, &|| ex.barrier());
    });
}

#[test]
fn two_ranks_as_threads() {
    run_threads(2);
}

#[test]
fn four_ranks_as_threads() {
    run_threads(4);
}

#[test]
fn eight_ranks_as_threads() {
    run_threads(8);
}

/// The end-to-end runs above, again with every signal a slot write
/// (RCCL_RUST_GIN_SIGNAL_MODE=write) on the same emulated mlx5 NIC.
#[test]
fn the_same_runs_with_write_mode_signals() {
    rerun_in_write_mode(&["two_ranks_as_threads", "four_ranks_as_threads", "eight_ranks_as_threads"]);
}

/// The end-to-end runs and the error report again on the emulated bnxt_re
/// and ionic NICs, in both signal modes: every GIN operation posts that
/// family's WQEs, rings its doorbell and reads its CQEs (gin/family.h).
#[test]
fn the_same_runs_on_bnxt_re_and_ionic() {
    rerun_on_families(&[
        "two_ranks_as_threads",
        "four_ranks_as_threads",
        "eight_ranks_as_threads",
        "an_error_cqe_is_reported_and_waits_return_instead_of_hanging",
    ]);
}

/// A single connected rank (nranks 1, loopback) for the bad-input tests.
fn solo() -> (Rank, *mut c_void, *const c_void) {
    let p = plugin();
    let mut r = p.open_rank(0, 1);
    let h = r.handle;
    assert_eq!(p.connect(&mut r, &[h]), OK);
    let mut cfg = default_config();
    let (res, gctx, dh) = p.create_context(r.coll, &mut cfg);
    assert_eq!(res, OK);
    // SAFETY: a live device handle.
    let h = unsafe { (*dh).handle } as *const c_void;
    (r, gctx, h)
}

fn close(r: Rank, gctx: *mut c_void) {
    let p = plugin();
    assert_eq!(p.call_ptr(p.v.destroy_context, gctx), OK);
    assert_eq!(p.call_ptr(p.v.close_coll, r.coll), OK);
    assert_eq!(p.call_ptr(p.v.finalize, r.ctx), OK);
}

/// Every line logged while `f` runs (threads included), under the log lock.
fn logged<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    let p = plugin();
    let _g = p.log_lock.lock().unwrap_or_else(|e| e.into_inner());
    p.logger.take();
    let v = f();
    (v, p.logger.take())
}

/// Runs `f`, returns its result and the WARN lines it logged.
fn warns<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    let (v, lines) = logged(f);
    (v, lines.into_iter().filter(|l| l.starts_with(&format!("{} ", level::WARN))).collect())
}

fn expect_warn(res: NcclResult, want: NcclResult, lines: &[String], words: &[&str], what: &str) {
    assert_eq!(res, want, "{what}: result code (WARN lines: {lines:?})");
    assert!(
        lines.iter().any(|l| words.iter().all(|w| l.contains(w))),
        "{what}: no WARN line naming {words:?}; got {lines:?}"
    );
}

#[test]
fn bad_input_gets_an_error_and_a_warn_line_never_a_crash() {
    let p = plugin();
    let v = p.v;
    let null = std::ptr::null_mut();
    // SAFETY (whole test): every call passes pointers that are valid or
    // deliberately NULL/foreign; the plugin must refuse the latter cleanly.
    unsafe {
        // An init first: getProperties answers about the provider of the
        // latest init (without one it is "called before init()").
        let (rank, gctx, h) = solo();
        let (r, l) = warns(|| (v.init.unwrap())(null as *mut *mut c_void, 0, p.logger.func));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["init", "ctx is NULL"], "init(NULL)");
        let (r, l) = warns(|| (v.devices.unwrap())(null as *mut i32));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["ndev is NULL"], "devices(NULL)");
        let (r, l) = warns(|| (v.get_properties.unwrap())(7, &mut std::mem::zeroed()));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["device index 7"], "getProperties(7)");
        let (r, l) = warns(|| (v.get_properties.unwrap())(-1, &mut std::mem::zeroed()));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["dev -1"], "getProperties(-1)");

        // listen with a bad device and a NULL handle buffer.
        let mut lc = null;
        let mut hb = [0u8; NCCL_NET_HANDLE_MAXSIZE];
        let (r, l) = warns(|| (v.listen.unwrap())(rank.ctx, 3, hb.as_mut_ptr() as *mut c_void, &mut lc));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["listen", "dev 3"], "listen(dev 3)");
        let (r, l) = warns(|| (v.listen.unwrap())(rank.ctx, 0, null, &mut lc));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["handle is NULL"], "listen(NULL handle)");
        // A foreign pointer where a token belongs.
        let mut x = 5u64;
        let (r, l) = warns(|| (v.listen.unwrap())(&mut x as *mut u64 as *mut c_void, 0, hb.as_mut_ptr() as *mut c_void, &mut lc));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["ctx", "not a rust-gin"], "listen(foreign ctx)");
        // A token of the wrong kind.
        let (r, l) = warns(|| (v.listen.unwrap())(rank.coll, 0, hb.as_mut_ptr() as *mut c_void, &mut lc));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["another kind"], "listen(collComm as ctx)");

        // connect: rank and nranks out of range, corrupted and NULL handles.
        let mut good = p.open_rank(0, 1);
        let mut bad_handle = good.handle;
        bad_handle[40] ^= 0xff;
        let mut cc = null;
        let mut hp = [bad_handle.as_mut_ptr() as *mut c_void];
        let (r, l) = warns(|| (v.connect.unwrap())(good.ctx, hp.as_mut_ptr(), 1, 0, good.listen, &mut cc));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["handle of rank 0", "checksum"], "connect(corrupted handle)");
        let mut wrong = good.handle;
        wrong[0..4].copy_from_slice(b"NCCL");
        hp[0] = wrong.as_mut_ptr() as *mut c_void;
        let (r, l) = warns(|| (v.connect.unwrap())(good.ctx, hp.as_mut_ptr(), 1, 0, good.listen, &mut cc));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["not a rust-gin handle"], "connect(foreign handle)");
        hp[0] = good.handle.as_mut_ptr() as *mut c_void;
        let (r, l) = warns(|| (v.connect.unwrap())(good.ctx, hp.as_mut_ptr(), 1, 1, good.listen, &mut cc));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["rank 1 out of range"], "connect(rank 1 of 1)");
        let (r, l) = warns(|| (v.connect.unwrap())(good.ctx, hp.as_mut_ptr(), 0, 0, good.listen, &mut cc));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["nranks 0"], "connect(nranks 0)");
        let mut nulls = [null];
        let (r, l) = warns(|| (v.connect.unwrap())(good.ctx, nulls.as_mut_ptr(), 1, 0, good.listen, &mut cc));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["handles[0] is NULL"], "connect(NULL handle)");
        let h0 = good.handle;
        assert_eq!(p.connect(&mut good, &[h0]), OK, "the good handle still connects");

        // createContext: every config field checked.
        for (field, mutate, words) in [
            ("backendVersion", Box::new(|c: &mut rccl_rust_gin::ffi::gin::NcclGinConfig| c.backend_version = 1) as Box<dyn Fn(&mut _)>, "backendVersion = 1"),
            ("nContexts", Box::new(|c: &mut rccl_rust_gin::ffi::gin::NcclGinConfig| c.n_contexts = 0), "nContexts = 0"),
            ("nSignals", Box::new(|c: &mut rccl_rust_gin::ffi::gin::NcclGinConfig| c.n_signals = -2), "nSignals = -2"),
            ("queueDepth", Box::new(|c: &mut rccl_rust_gin::ffi::gin::NcclGinConfig| c.queue_depth = 1 << 20), "queueDepth = 1048576"),
            ("trafficClass", Box::new(|c: &mut rccl_rust_gin::ffi::gin::NcclGinConfig| c.traffic_class = 300), "trafficClass = 300"),
            ("rankStride", Box::new(|c: &mut rccl_rust_gin::ffi::gin::NcclGinConfig| c.rank_stride = 0), "rankStride = 0"),
        ] {
            let mut cfg = default_config();
            mutate(&mut cfg);
            let ((r, _, _), l) = warns(|| p.create_context(good.coll, &mut cfg));
            expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["createContext", words], field);
        }
        let (r, l) = warns(|| (v.create_context.unwrap())(good.coll, null as *mut _, &mut cc, &mut std::ptr::null_mut()));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["config is NULL"], "createContext(NULL config)");

        // regMrSym: NULL data, size 0, a huge size, a bad type.
        let buf = vec![0u8; 4096];
        for (data, size, ty, words) in [
            (null, 64usize, NCCL_PTR_CUDA, "data is NULL"),
            (buf.as_ptr() as *mut c_void, 0, NCCL_PTR_CUDA, "size is 0"),
            (buf.as_ptr() as *mut c_void, usize::MAX - 8, NCCL_PTR_CUDA, "wraps"),
            (buf.as_ptr() as *mut c_void, 64, 9, "type 9"),
        ] {
            let ((r, _, _), l) = warns(|| p.reg(good.coll, data, size, ty));
            expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["regMrSym", words], words);
        }
        let mut mh = null;
        let mut gh = null;
        let (r, l) = warns(|| (v.reg_mr_sym_dma_buf.unwrap())(good.coll, buf.as_ptr() as *mut c_void, 64, NCCL_PTR_CUDA, 0, 3, 0, &mut mh, &mut gh));
        expect_warn(r, NCCL_INVALID_USAGE, &l, &["regMrSymDmaBuf", "dma-buf"], "dma-buf on the emulated NIC");
        let (r, l) = warns(|| (v.dereg_mr_sym.unwrap())(good.coll, rank.ctx));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["mhandle", "another kind"], "deregMrSym(a ctx)");
        assert_eq!(p.call_ptr(v.close_coll, good.coll), OK);
        assert_eq!(p.call_ptr(v.finalize, good.ctx), OK);

        // Device side: ids, peers, offsets, windows never registered or
        // deregistered; each returns INVALID and is recorded, none crashes.
        let w = register(p, rank.coll, 4096);
        let not_a_window = [0u64; 8];
        let cases: Vec<(&str, Box<dyn Fn() -> i32>)> = vec![
            ("peer 5", Box::new(|| dev::rust_gin_put(h, 0, 5, w.gh, 0, w.gh, 0, 8, NO_SIGNAL, 0, 0, 0))),
            ("context 9", Box::new(|| dev::rust_gin_put(h, 9, 0, w.gh, 0, w.gh, 0, 8, NO_SIGNAL, 0, 0, 0))),
            ("offset past window", Box::new(|| dev::rust_gin_put(h, 0, 0, w.gh, 4090, w.gh, 0, 8, NO_SIGNAL, 0, 0, 0))),
            ("huge size", Box::new(|| dev::rust_gin_put(h, 0, 0, w.gh, 0, w.gh, 0, u64::MAX, NO_SIGNAL, 0, 0, 0))),
            ("never registered", Box::new(|| dev::rust_gin_put(h, 0, 0, not_a_window.as_ptr() as *const c_void, 0, w.gh, 0, 8, NO_SIGNAL, 0, 0, 0))),
            ("signal id", Box::new(|| dev::rust_gin_signal_peer(h, 0, 0, signal_indexed(99, RUST_GIN_SIGNAL_OP_INC, 0), 0))),
            ("signal op", Box::new(|| dev::rust_gin_signal_peer(h, 0, 0, signal_indexed(0, 7, 0), 0))),
            ("counter id", Box::new(|| dev::rust_gin_put(h, 0, 0, w.gh, 0, w.gh, 0, 8, NO_SIGNAL, 1, 99, 0))),
            ("putValue size", Box::new(|| dev::rust_gin_put_value(h, 0, 0, w.gh, 0, 1, 3, NO_SIGNAL, 0))),
            ("flush coop size", Box::new(|| dev::rust_gin_flush(h, 0, 0, 0, std::ptr::null(), 0))),
            ("signal wait id", Box::new(|| dev::rust_gin_signal_wait(h, 0, 42, 1, std::ptr::null(), 0))),
        ];
        for (what, f) in &cases {
            assert_eq!(f(), RUST_GIN_ERR_INVALID as i32, "device call with a bad {what}");
        }
        // The first bad call is the sticky error; queryLastError reports it once.
        let ((r, has), l) = warns(|| p.query_error(gctx));
        assert_eq!(r, OK);
        assert!(has, "queryLastError reports the recorded invalid argument");
        expect_warn(OK, OK, &l, &["invalid argument in a device call"], "queryLastError WARN");
        let ((_, has_again), l) = warns(|| p.query_error(gctx));
        assert!(has_again);
        assert!(l.is_empty(), "the same error is not warned twice: {l:?}");
        // A deregistered window stops validating at once.
        assert_eq!((v.dereg_mr_sym.unwrap())(rank.coll, w.mh), OK);
        assert_eq!(dev::rust_gin_put(h, 0, 0, w.gh, 0, w.gh, 0, 8, NO_SIGNAL, 0, 0, 0), RUST_GIN_ERR_INVALID as i32, "deregistered window");
        let (r, l) = warns(|| (v.dereg_mr_sym.unwrap())(rank.coll, w.mh));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["no longer exists"], "double deregMrSym");
        // A NULL handle never crashes.
        assert_eq!(dev::rust_gin_put(std::ptr::null(), 0, 0, w.gh, 0, w.gh, 0, 8, NO_SIGNAL, 0, 0, 0), RUST_GIN_ERR_INVALID as i32);

        // Double destroy, use after close, calls after finalize.
        let (r0, r1) = (rank.ctx, rank.coll);
        close(rank, gctx);
        let (r, l) = warns(|| p.call_ptr(v.destroy_context, gctx));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["destroyContext", "already destroyed"], "double destroyContext");
        let (r, l) = warns(|| p.call_ptr(v.close_coll, r1));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["closeColl"], "double closeColl");
        let (r, l) = warns(|| (v.listen.unwrap())(r0, 0, hb.as_mut_ptr() as *mut c_void, &mut lc));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["listen", "no longer exists"], "listen after finalize");
        let (r, l) = warns(|| p.call_ptr(v.finalize, r0));
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["finalize"], "double finalize");
    }
}

// --- bad input found by the held-out harness: one test per case -------------------
// Each asserts the code, a WARN line naming the argument, and that the
// process still works afterwards (a valid registration and a put to itself).

/// The process is alive and the plugin usable: a put through two fresh
/// windows lands.
fn still_works(p: &Plugin, coll: *mut c_void, h: *const c_void) {
    let a = register(p, coll, 4096);
    let b = register(p, coll, 4096);
    a.buf.write(0, b"alive after bad input");
    // SAFETY: live handle and windows.
    unsafe {
        assert_eq!(dev::rust_gin_put(h, 0, 0, b.gh, 0, a.gh, 0, 21, NO_SIGNAL, 0, 0, 0), 0, "put after bad input");
        assert_eq!(dev::rust_gin_flush(h, 0, 0, 1, std::ptr::null(), 0), 0, "flush after bad input");
    }
    let mut got = [0u8; 21];
    b.buf.read(0, &mut got);
    assert_eq!(&got, b"alive after bad input");
    for w in [a, b] {
        // SAFETY: valid tokens.
        assert_eq!(unsafe { (p.v.dereg_mr_sym.unwrap())(coll, w.mh) }, OK);
    }
}

/// regMrSym of [data, data+size) as `ty` is refused with INVALID_ARGUMENT
/// and a WARN naming `words`; the plugin keeps working.
fn refused_registration(data: usize, size: usize, words: &[&str]) {
    let p = plugin();
    let (rank, gctx, h) = solo();
    for ty in [NCCL_PTR_HOST, NCCL_PTR_CUDA] {
        let ((r, mh, gh), l) = warns(|| p.reg(rank.coll, data as *mut c_void, size, ty));
        let mut all = vec!["regMrSym"];
        all.extend_from_slice(words);
        expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &all, &format!("regMrSym(type {ty}) of {data:#x}+{size}"));
        assert!(mh.is_null() && gh.is_null(), "a refused registration returns no handles");
    }
    still_works(p, rank.coll, h);
    close(rank, gctx);
}

refused_range_tests!(refused_registration);

#[test]
fn reg_of_mapped_memory_that_is_not_a_heap_buffer_works() {
    // The check refuses what is not mapped read-write, not what is unusual:
    // an anonymous mapping of our own registers, and a put into it lands.
    let p = plugin();
    let (rank, gctx, h) = solo();
    let m = mapped::Mapping::new(2, libc::PROT_READ | libc::PROT_WRITE);
    let (r, mh, gh) = p.reg(rank.coll, m.addr as *mut c_void, m.len, NCCL_PTR_HOST);
    assert_eq!(r, OK, "regMrSym of an mmap'ed range");
    let src = register(p, rank.coll, 4096);
    src.buf.write(0, &[0x5a; 64]);
    // SAFETY: live handle and windows; the mapping outlives the window.
    unsafe {
        assert_eq!(dev::rust_gin_put(h, 0, 0, gh as *const c_void, 4096, src.gh, 0, 64, NO_SIGNAL, 0, 0, 0), 0);
        assert_eq!(dev::rust_gin_flush(h, 0, 0, 1, std::ptr::null(), 0), 0);
        assert_eq!(std::slice::from_raw_parts((m.addr + 4096) as *const u8, 64), &[0x5a; 64]);
        assert_eq!((p.v.dereg_mr_sym.unwrap())(rank.coll, mh), OK);
        assert_eq!((p.v.dereg_mr_sym.unwrap())(rank.coll, src.mh), OK);
    }
    close(rank, gctx);
}

/// connect with `nranks` (and one valid handle) is refused before anything
/// is sized by it; the same listen comm then connects.
fn refused_nranks(nranks: i32) {
    let p = plugin();
    let mut good = p.open_rank(0, 1);
    let mut hp = [good.handle.as_mut_ptr() as *mut c_void];
    let mut cc = std::ptr::null_mut();
    // SAFETY: valid pointers; the plugin must not read past hp[0].
    let (r, l) = warns(|| unsafe { (p.v.connect.unwrap())(good.ctx, hp.as_mut_ptr(), nranks, 0, good.listen, &mut cc) });
    expect_warn(r, NCCL_INVALID_ARGUMENT, &l, &["connect", &format!("nranks {nranks} out of range")], "connect(nranks)");
    assert!(cc.is_null());
    let h0 = good.handle;
    assert_eq!(p.connect(&mut good, &[h0]), OK, "the same listen comm connects with nranks 1");
    assert_eq!(p.call_ptr(p.v.close_coll, good.coll), OK);
    assert_eq!(p.call_ptr(p.v.finalize, good.ctx), OK);
}

#[test]
fn connect_with_nranks_int_max_is_refused() {
    refused_nranks(i32::MAX);
}

#[test]
fn connect_with_nranks_one_past_the_cap_is_refused() {
    refused_nranks(rccl_rust_gin::session::MAX_NRANKS + 1);
}

#[test]
fn connect_with_negative_nranks_is_refused() {
    refused_nranks(-1);
}

/// After finalize a context may still be destroyed, but not driven or
/// queried: `call` on it is INVALID_USAGE with a WARN naming the call.
fn refused_after_finalize(name: &str, call: impl Fn(*mut c_void) -> NcclResult) {
    let p = plugin();
    let (rank, gctx, _) = solo();
    assert_eq!(call(gctx), OK, "{name} before finalize");
    assert_eq!(p.call_ptr(p.v.finalize, rank.ctx), OK);
    let (r, l) = warns(|| call(gctx));
    expect_warn(r, NCCL_INVALID_USAGE, &l, &[name, "after finalize"], &format!("{name} after finalize"));
    assert_eq!(p.call_ptr(p.v.destroy_context, gctx), OK, "teardown after finalize still works");
    assert_eq!(p.call_ptr(p.v.close_coll, rank.coll), OK);
    // A new plugin context works.
    let (rank, gctx, h) = solo();
    still_works(p, rank.coll, h);
    close(rank, gctx);
}

#[test]
fn query_last_error_after_finalize_is_invalid_usage() {
    refused_after_finalize("queryLastError", |c| plugin().query_error(c).0);
}

#[test]
fn gin_progress_after_finalize_is_invalid_usage() {
    refused_after_finalize("ginProgress", |c| plugin().call_ptr(plugin().v.gin_progress, c));
}

/// Rank 0's put to `TARGET` fails at the target's NIC; the WARN names
/// `TARGET`. Three ranks, so that on DC (the rerun below, 2 DCIs per
/// context) the failed DCI also serves rank 0 itself: the peer comes from
/// the failed WQE, not from the queue.
const TARGET: usize = 2;

#[test]
fn an_error_cqe_is_reported_and_waits_return_instead_of_hanging() {
    let p = plugin();
    let n = 3;
    let ex = Exchange::new(n);
    let saw = Arc::new(std::sync::Mutex::new(Vec::new()));
    std::thread::scope(|s| {
        for rank in 0..n {
            let (ex, saw) = (ex.clone(), saw.clone());
            s.spawn(move || {
                let mut r = p.open_rank(rank as i32, n as i32);
                let all = ex.allgather(rank, r.handle);
                assert_eq!(p.connect(&mut r, &all), OK);
                let mut cfg = default_config();
                let (res, gctx, dh) = p.create_context(r.coll, &mut cfg);
                assert_eq!(res, OK);
                // SAFETY: live device handle.
                let h = unsafe { (*dh).handle } as *const c_void;
                assert_eq!(context_dcis(h, 0), if dc_asked() { 2 } else { 0 }, "the transport asked for");
                let w = register(p, r.coll, 4096);
                ex.barrier();
                if rank == 0 {
                    // Corrupt this rank's copy of TARGET's rkey: the NIC at
                    // TARGET refuses the write with a remote access error.
                    let desc = w.gh as *mut rust_gin_window;
                    let target = TARGET as u32;
                    // SAFETY: the descriptor is host memory on the emulated NIC.
                    unsafe {
                        let pe = ((*desc).peers as *mut rust_gin_window_peer).add(TARGET);
                        (*pe).rkey ^= 0x4400;
                        assert_eq!(dev::rust_gin_put(h, 0, target, w.gh, 0, w.gh, 0, 64, NO_SIGNAL, 0, 0, 0), 0, "posting succeeds");
                        let t = std::time::Instant::now();
                        let f = dev::rust_gin_flush(h, 0, 0, 1, std::ptr::null(), 0);
                        assert!(t.elapsed().as_secs() < 10, "flush returned instead of hanging");
                        assert_ne!(f, 0, "flush reports the failure");
                        // Later operations on that queue fail fast.
                        assert_eq!(dev::rust_gin_put(h, 0, target, w.gh, 0, w.gh, 0, 8, NO_SIGNAL, 0, 0, 0), RUST_GIN_ERR_QP_FAILED as i32);
                        // A wait for a signal that will never come ends by its bound
                        // or by the abort flag.
                        let abort = 1u32;
                        assert_eq!(dev::rust_gin_signal_wait(h, 0, 0, 1, &abort, 0), RUST_GIN_ERR_ABORTED as i32);
                        (*pe).rkey ^= 0x4400;
                    }
                    let ((q, has), l) = warns(|| p.query_error(gctx));
                    assert_eq!(q, OK);
                    assert!(has, "queryLastError reports the error CQE");
                    saw.lock().unwrap().extend(l);
                }
                ex.barrier();
                // SAFETY: valid tokens.
                unsafe { assert_eq!((p.v.dereg_mr_sym.unwrap())(r.coll, w.mh), OK) };
                assert_eq!(p.call_ptr(p.v.destroy_context, gctx), OK);
                ex.barrier();
                assert_eq!(p.call_ptr(p.v.close_coll, r.coll), OK);
                assert_eq!(p.call_ptr(p.v.finalize, r.ctx), OK);
            });
        }
    });
    let lines = saw.lock().unwrap().clone();
    // A remote access error, in the completion status of the family the
    // emulated NIC presents (each checked against rdma-core by the oracles).
    let (status, name) = match family_asked() {
        Some(RUST_GIN_FAMILY_BNXT) => (u32::from(rccl_rust_gin::bnxt::wire::status::REM_ACC), "REM_ACC"),
        Some(RUST_GIN_FAMILY_IONIC) => (rccl_rust_gin::ionic::wire::status::REMOTE_ACC_ERR, "REMOTE_ACC_ERR"),
        _ => (u32::from(rccl_rust_gin::mlx5::wire::syndrome::REMOTE_ACCESS_ERR), "REMOTE_ACCESS_ERR"),
    };
    let status = format!("syndrome {status:#04x}");
    expect_warn(
        OK,
        OK,
        &lines,
        &["rank 0", &format!("peer {TARGET}"), "QP", "WQE index 0", &status, name],
        "the WARN names peer, QP, WQE index and syndrome",
    );
    // What it means, and what the NIC counted, in the same line.
    expect_warn(
        OK,
        OK,
        &lines,
        &[&status, "a remote access error: the peer's key, bounds or rights", "NIC counters: rust-gin-emu0: error_cqes "],
        "the WARN says what the syndrome means and what the NIC counted",
    );
}

/// The same test on DC: the error on a DCI names the rank whose WQE failed.
#[test]
fn an_error_cqe_on_dc_names_the_peer() {
    rerun_on_dc(2, &["an_error_cqe_is_reported_and_waits_return_instead_of_hanging"]);
}

#[test]
fn selected_only_by_nccl_gin_type_8() {
    use rccl_rust_gin::gin::vtable::check_selected;
    assert!(check_selected(Some("8")).is_ok());
    for other in [None, Some("6"), Some("2"), Some(""), Some("eight")] {
        let e = check_selected(other).unwrap_err();
        assert_eq!(e.code(), NCCL_INVALID_USAGE, "{other:?}");
        assert!(e.to_string().contains("NCCL_GIN_TYPE"), "{e}");
    }
    assert_eq!(plugin().name(), "rust-gin");
}

// --- GIN v15 (NCCL 2.32): createContext with a peer array --------------------------

/// `ncclGinRustPlugin_v15` of the same dlopened library as [`plugin`]: every
/// slot but createContext is the v14 table's function.
fn v15() -> &'static rccl_rust_gin::ffi::gin::NcclGinV15 {
    use rccl_rust_gin::ffi::gin::NcclGinV15;
    static V: std::sync::OnceLock<(libloading::Library, usize)> = std::sync::OnceLock::new();
    plugin();
    let (_, v) = V.get_or_init(|| {
        // SAFETY: our own cdylib (already loaded by plugin()); the symbol is a
        // static ncclGin_v15_t.
        unsafe {
            let lib = libloading::Library::new(cdylib_path()).unwrap();
            let v = *lib.get::<*const NcclGinV15>(b"ncclGinRustPlugin_v15").unwrap() as usize;
            (lib, v)
        }
    });
    // SAFETY: a static of the library held open above.
    unsafe { &*(*v as *const NcclGinV15) }
}

fn config_v15(n_contexts: i32, peers: &mut [i32]) -> rccl_rust_gin::ffi::gin::NcclGinConfigV15 {
    rccl_rust_gin::ffi::gin::NcclGinConfigV15 {
        n_signals: 4,
        n_counters: 2,
        n_contexts,
        queue_depth: 128,
        traffic_class: -1,
        backend_version: 0,
        peer_array: peers.as_mut_ptr(),
        peer_array_count: peers.len() as i32,
    }
}

fn create_v15(coll: *mut c_void, cfg: &mut rccl_rust_gin::ffi::gin::NcclGinConfigV15) -> (NcclResult, *mut c_void, *const c_void) {
    let (mut gc, mut dh) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: valid pointers.
    let r = unsafe { (v15().create_context.unwrap())(coll, cfg, &mut gc, &mut dh) };
    // SAFETY: a live device handle when createContext succeeded.
    let h = if r == OK { unsafe { (*dh).handle as *const c_void } } else { std::ptr::null() };
    (r, gc, h)
}


/// NCCL's gin_host.cc (NVIDIA/nccl@7217a581) passes a v15 backend the ranks
/// at the requested stride from this rank, itself included: stride 2 on 4
/// ranks connects 0 with 2 and 1 with 3. Each rank gets 2 contexts x 2 queue
/// pairs (the INFO line says so), puts with signals to its listed peers
/// (device operations, host build), flushes every context (the ranks not
/// connected are passed over), and a put to an unlisted rank is refused at
/// once as an invalid argument, recorded and reported by queryLastError as
/// "not connected", while the context's queues stay usable.
#[test]
fn v15_connects_only_the_ranks_in_its_peer_array() {
    let p = plugin();
    let n = 4usize;
    let ((), lines) = logged(|| {
        let ex = Exchange::new(n);
        std::thread::scope(|s| {
            for rank in 0..n {
                let ex = ex.clone();
                s.spawn(move || {
                    let mut r = p.open_rank(rank as i32, n as i32);
                    let all = ex.allgather(rank, r.handle);
                    assert_eq!(p.connect(&mut r, &all), OK);
                    let mut peers: Vec<i32> = (rank % 2..n).step_by(2).map(|q| q as i32).collect();
                    let (res, gctx, h) = create_v15(r.coll, &mut config_v15(2, &mut peers));
                    assert_eq!(res, OK, "createContext v15 with peers {peers:?}");
                    let src = register(p, r.coll, 4096);
                    let dst = register(p, r.coll, n * 4096);
                    src.buf.write(0, &(0..4096).map(|i| pattern(rank, i)).collect::<Vec<_>>());
                    ex.barrier();
                    // SAFETY (device calls): live handle and windows.
                    unsafe {
                        for &q in &peers {
                            let s = dev::rust_gin_put(
                                h, 1, q as u32, dst.gh, (rank * 4096) as u64, src.gh, 0, 4096,
                                signal_indexed(0, RUST_GIN_SIGNAL_OP_INC, 0), 0, 0, 0,
                            );
                            assert_eq!(s, 0, "put to listed rank {q}");
                        }
                        let np = peers.len() as u64;
                        assert_eq!(dev::rust_gin_signal_wait(h, 1, 0, np, std::ptr::null(), 0), 0, "listed peers' signals");
                        assert_eq!(dev::rust_gin_flush(h, 0, 0, 1, std::ptr::null(), 0), 0, "flush an idle context");
                        assert_eq!(dev::rust_gin_flush(h, 1, 0, 1, std::ptr::null(), 0), 0, "flush context 1");
                    }
                    for &q in &peers {
                        let mut slot = vec![0u8; 4096];
                        dst.buf.read(q as usize * 4096, &mut slot);
                        assert!(slot.iter().enumerate().all(|(i, b)| *b == pattern(q as usize, i)), "data from {q}");
                    }
                    let (q, has) = p.query_error(gctx);
                    assert_eq!((q, has), (OK, false), "no error so far");
                    ex.barrier();
                    let other = ((rank + 1) % n) as u32;
                    // SAFETY: as above.
                    unsafe {
                        let t = std::time::Instant::now();
                        let s = dev::rust_gin_put(h, 0, other, dst.gh, 0, src.gh, 0, 8, NO_SIGNAL, 0, 0, 0);
                        assert_eq!(s as u32, RUST_GIN_ERR_INVALID, "a put to unlisted rank {other} is refused");
                        assert!(t.elapsed().as_secs() < 5, "at once, not after the context's timeout");
                        let mut req = std::mem::zeroed();
                        let s = dev::rust_gin_flush_async(h, 0, other, &mut req);
                        assert_eq!(s as u32, RUST_GIN_ERR_INVALID, "flushAsync of unlisted rank {other} is refused");
                        assert_eq!(dev::rust_gin_flush(h, 0, 0, 1, std::ptr::null(), 0), 0, "the queues are unharmed");
                        let back = peers.iter().find(|&&q| q as usize != rank).copied().unwrap_or(rank as i32) as u32;
                        let s = dev::rust_gin_put(h, 0, back, dst.gh, (rank * 4096) as u64, src.gh, 0, 8, NO_SIGNAL, 0, 0, 0);
                        assert_eq!(s, 0, "a listed rank still takes puts");
                        assert_eq!(dev::rust_gin_flush(h, 0, 0, 1, std::ptr::null(), 0), 0);
                    }
                    let (q, has) = p.query_error(gctx);
                    assert_eq!((q, has), (OK, true), "queryLastError reports it");
                    ex.barrier();
                    for w in [&src, &dst] {
                        // SAFETY: valid tokens.
                        assert_eq!(unsafe { (p.v.dereg_mr_sym.unwrap())(r.coll, w.mh) }, OK);
                    }
                    assert_eq!(p.call_ptr(p.v.destroy_context, gctx), OK);
                    ex.barrier();
                    assert_eq!(p.call_ptr(p.v.close_coll, r.coll), OK);
                    assert_eq!(p.call_ptr(p.v.finalize, r.ctx), OK);
                });
            }
        });
    });
    for rank in 0..n {
        let built = format!("rank {rank} built 4 QPs to 2 of 4 ranks (2 context(s)");
        assert!(
            lines.iter().any(|l| l.contains(&built) && l.contains("peer array of 2")),
            "no INFO line '{built} ... peer array of 2'; got {lines:?}"
        );
        let other = (rank + 1) % n;
        let not = format!("rank {rank}: device-side error");
        let why = format!("peer not connected (createContext's peerArray does not list it) (peer {other}");
        assert!(
            lines.iter().any(|l| l.starts_with(&format!("{} ", level::WARN)) && l.contains(&not) && l.contains(&why)),
            "no WARN line '{not} ... ({why})'; got {lines:?}"
        );
    }
}

#[test]
fn v15_bad_config_gets_an_error_and_a_warn_line() {
    let p = plugin();
    let mut r = p.open_rank(0, 1);
    let h = r.handle;
    assert_eq!(p.connect(&mut r, &[h]), OK);
    let (mut zero, mut one, mut twice) = ([0i32], [1i32], [0i32, 0]);
    let cases: Vec<(rccl_rust_gin::ffi::gin::NcclGinConfigV15, &[&str])> = vec![
        (rccl_rust_gin::ffi::gin::NcclGinConfigV15 { peer_array_count: -1, ..config_v15(1, &mut zero) }, &["config.peerArrayCount = -1"]),
        (
            rccl_rust_gin::ffi::gin::NcclGinConfigV15 { peer_array: std::ptr::null_mut(), ..config_v15(1, &mut zero) },
            &["config.peerArray is NULL with peerArrayCount = 1"],
        ),
        (config_v15(1, &mut one), &["config.peerArray[0] = 1", "not a rank"]),
        (config_v15(1, &mut twice), &["config.peerArrayCount = 2", "more peers"]),
        (config_v15(0, &mut zero), &["config.nContexts = 0"]),
        (rccl_rust_gin::ffi::gin::NcclGinConfigV15 { backend_version: 1, ..config_v15(1, &mut zero) }, &["config.backendVersion = 1"]),
        (rccl_rust_gin::ffi::gin::NcclGinConfigV15 { traffic_class: 300, ..config_v15(1, &mut zero) }, &["config.trafficClass = 300"]),
    ];
    for (mut c, words) in cases {
        let ((res, gc, _), l) = warns(|| create_v15(r.coll, &mut c));
        expect_warn(res, NCCL_INVALID_ARGUMENT, &l, words, &format!("{c:?}"));
        assert!(gc.is_null());
    }
    // An empty array connects nobody: every queue is closed, a flush passes.
    let (res, gc, h) = create_v15(r.coll, &mut config_v15(1, &mut []));
    assert_eq!(res, OK);
    // SAFETY: a live handle.
    assert_eq!(unsafe { dev::rust_gin_flush(h, 0, 0, 1, std::ptr::null(), 0) }, 0);
    assert_eq!(p.call_ptr(p.v.destroy_context, gc), OK);
    // Itself listed: a loopback put lands.
    let (res, gc, h) = create_v15(r.coll, &mut config_v15(1, &mut [0]));
    assert_eq!(res, OK);
    let w = register(p, r.coll, 64);
    w.buf.write(0, &[7u8; 8]);
    // SAFETY: live handle and window.
    unsafe {
        assert_eq!(dev::rust_gin_put(h, 0, 0, w.gh, 8, w.gh, 0, 8, NO_SIGNAL, 0, 0, 0), 0);
        assert_eq!(dev::rust_gin_flush(h, 0, 0, 1, std::ptr::null(), 0), 0);
    }
    let mut b = [0u8; 8];
    w.buf.read(8, &mut b);
    assert_eq!(b, [7u8; 8], "loopback put landed");
    // SAFETY: valid tokens.
    assert_eq!(unsafe { (p.v.dereg_mr_sym.unwrap())(r.coll, w.mh) }, OK);
    close(r, gc);
}
