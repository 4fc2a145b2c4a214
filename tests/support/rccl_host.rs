//! Drives the GIN vtable as RCCL does: the plugin is the cdylib, loaded with
//! dlopen and reached through its `ncclGinRustPlugin_v14` symbol; RCCL's
//! logger is a small C function compiled at test time that captures lines.
//! Device operations go through the device library's host build.

#![allow(dead_code)]

use rccl_rust_gin::ffi::gin::{NcclGinConfig, NcclGinProperties, NcclGinV14};
use rccl_rust_gin::ffi::nccl::*;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, Once};

/// The environment every harness test runs under (set once, before threads).
pub fn setup_env() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: called once at the start of each test, before this process
        // starts any thread that reads the environment.
        unsafe {
            std::env::set_var("NCCL_GIN_TYPE", "8");
            std::env::set_var("RCCL_RUST_GIN_PROVIDER", "emu");
            // A child test started with its own (a short one) keeps it.
            if std::env::var_os("RCCL_RUST_GIN_TIMEOUT_MS").is_none() {
                std::env::set_var("RCCL_RUST_GIN_TIMEOUT_MS", "20000");
            }
            // A child placed in a network namespace (tests/emu_tcp.rs) keeps
            // the interface it was given.
            if std::env::var_os("RCCL_RUST_GIN_SOCKET_IFNAME").is_none() {
                std::env::set_var("RCCL_RUST_GIN_SOCKET_IFNAME", "lo");
            }
            // READ data lands 30 s after its CQE unless a flush's DUMP lands
            // it: every get a test reads back must have been flushed.
            std::env::set_var("RCCL_RUST_GIN_EMU_READ_DELAY_US", "30000000");
        }
    });
}

const LOGGER_C: &str = r#"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <pthread.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static char buf[1 << 22];
static size_t used;
void capture_logger(int level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  char tmp[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&m);
  int n = snprintf(buf + used, sizeof buf - used, "%d %s\n", level, tmp);
  if (n > 0 && used + n < sizeof buf) used += n;
  pthread_mutex_unlock(&m);
}
size_t capture_take(char* out, size_t cap) {
  pthread_mutex_lock(&m);
  size_t n = used < cap ? used : cap;
  memcpy(out, buf, n);
  used = 0;
  pthread_mutex_unlock(&m);
  return n;
}
"#;

pub struct Logger {
    _lib: libloading::Library,
    pub func: NcclLogger,
    take: unsafe extern "C" fn(*mut c_char, usize) -> usize,
}

impl Logger {
    /// Compiles and loads the capture logger (one per process is enough).
    pub fn build() -> Logger {
        let dir = std::env::temp_dir().join(format!("rust-gin-logger-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("logger.c");
        let so = dir.join("liblogger.so");
        std::fs::write(&src, LOGGER_C).unwrap();
        let st = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&so)
            .arg(&src)
            .arg("-lpthread")
            .status()
            .expect("a C compiler (cc) for the test logger");
        assert!(st.success(), "compiling the capture logger");
        // SAFETY: a library we just built; its symbols have the declared types.
        unsafe {
            let lib = libloading::Library::new(&so).unwrap();
            let f: libloading::Symbol<*const c_void> = lib.get(b"capture_logger").unwrap();
            let func: NcclLogger = std::mem::transmute::<*const c_void, NcclLogger>(*f);
            let t: libloading::Symbol<unsafe extern "C" fn(*mut c_char, usize) -> usize> = lib.get(b"capture_take").unwrap();
            let take = *t;
            Logger { _lib: lib, func, take }
        }
    }

    /// Lines logged since the last call ("<level> <text>").
    pub fn take(&self) -> Vec<String> {
        let mut buf = vec![0u8; 1 << 22];
        // SAFETY: capture_take writes at most cap bytes.
        let n = unsafe { (self.take)(buf.as_mut_ptr() as *mut c_char, buf.len()) };
        String::from_utf8_lossy(&buf[..n]).lines().map(String::from).collect()
    }
}

pub struct Plugin {
    /// The dlopened cdylib; None for the in-process vtable.
    _lib: Option<libloading::Library>,
    pub v: &'static NcclGinV14,
    pub logger: Logger,
    /// Serializes tests that inspect the shared log.
    pub log_lock: Mutex<()>,
}

/// The cdylib built together with this test binary. `cargo test` builds it
/// next to the test, in target/<profile>/deps/; only `cargo build` copies it
/// up to target/<profile>/, where it may be stale or missing. So take the one
/// in deps/ when it is there.
pub fn cdylib_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let fresh = deps.join("librccl_rust_gin.so");
    if fresh.is_file() {
        return fresh;
    }
    deps.parent().unwrap().join("librccl_rust_gin.so")
}

pub fn plugin() -> &'static Plugin {
    static P: std::sync::OnceLock<Plugin> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        setup_env();
        let path = cdylib_path();
        // SAFETY: loading our own cdylib; the symbol is a static ncclGin_v14_t.
        unsafe {
            let lib = libloading::Library::new(&path).unwrap_or_else(|e| panic!("dlopen {}: {e}", path.display()));
            let sym: libloading::Symbol<*const NcclGinV14> = lib.get(b"ncclGinRustPlugin_v14").unwrap();
            let v: &'static NcclGinV14 = &**sym;
            Plugin { _lib: Some(lib), v, logger: Logger::build(), log_lock: Mutex::new(()) }
        }
    })
}

/// The vtable of the crate linked into this test (no dlopen): the device
/// calls, the emulated NIC and the plugin then share one copy of the crate.
pub fn in_process_plugin() -> &'static Plugin {
    static P: std::sync::OnceLock<Plugin> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        setup_env();
        Plugin {
            _lib: None,
            v: &rccl_rust_gin::gin::vtable::ncclGinRustPlugin_v14,
            logger: Logger::build(),
            log_lock: Mutex::new(()),
        }
    })
}

pub const OK: NcclResult = NCCL_SUCCESS;

/// A rank's objects, in the order RCCL creates them.
pub struct Rank {
    pub rank: i32,
    pub nranks: i32,
    pub ctx: *mut c_void,
    pub listen: *mut c_void,
    pub coll: *mut c_void,
    pub handle: [u8; NCCL_NET_HANDLE_MAXSIZE],
}

// SAFETY: the pointers are opaque tokens of the plugin, usable from any thread.
unsafe impl Send for Rank {}

impl Plugin {
    pub fn init(&self) -> (NcclResult, *mut c_void) {
        let mut ctx = std::ptr::null_mut();
        // SAFETY: calling the plugin's init with valid out-pointer and logger.
        let r = unsafe { (self.v.init.unwrap())(&mut ctx, 0x1234, self.logger.func) };
        (r, ctx)
    }

    pub fn name(&self) -> String {
        // SAFETY: the vtable's name is a static C string.
        unsafe { CStr::from_ptr(self.v.name) }.to_string_lossy().into_owned()
    }

    /// init, devices, getGinProperties, getProperties(0), listen.
    pub fn open_rank(&self, rank: i32, nranks: i32) -> Rank {
        let (r, ctx) = self.init();
        assert_eq!(r, OK, "init");
        let mut ndev = 0;
        // SAFETY: valid out-pointers throughout.
        unsafe {
            assert_eq!((self.v.devices.unwrap())(&mut ndev), OK);
            assert_eq!(ndev, 1);
            let mut gp = NcclGinProperties::default();
            assert_eq!((self.v.get_gin_properties.unwrap())(&mut gp), OK);
            assert!(gp.supports_strong_signals);
            assert_eq!(gp.supports_va_signals, !write_mode_asked(), "VA signals exactly when not in write mode");
            let mut props = std::mem::zeroed::<NcclNetProperties>();
            assert_eq!((self.v.get_properties.unwrap())(0, &mut props), OK);
            assert_eq!(props.net_device_type, NCCL_NET_DEVICE_GIN_RUST);
            assert_eq!(props.net_device_version as u32, rccl_rust_gin::abi::RUST_GIN_DEVICE_ABI_VERSION);
            assert_eq!(props.ptr_support & NCCL_PTR_DMABUF, 0, "the emulated NIC cannot import dma-bufs");
            assert!(!props.name.is_null());
            let mut handle = [0u8; NCCL_NET_HANDLE_MAXSIZE];
            let mut listen = std::ptr::null_mut();
            assert_eq!((self.v.listen.unwrap())(ctx, 0, handle.as_mut_ptr() as *mut c_void, &mut listen), OK);
            Rank { rank, nranks, ctx, listen, coll: std::ptr::null_mut(), handle }
        }
    }

    /// connect with everyone's handles, then closeListen.
    pub fn connect(&self, r: &mut Rank, handles: &[[u8; NCCL_NET_HANDLE_MAXSIZE]]) -> NcclResult {
        let mut ptrs: Vec<*mut c_void> = handles.iter().map(|h| h.as_ptr() as *mut c_void).collect();
        // SAFETY: nranks handle pointers of NCCL_NET_HANDLE_MAXSIZE bytes each.
        let res = unsafe { (self.v.connect.unwrap())(r.ctx, ptrs.as_mut_ptr(), r.nranks, r.rank, r.listen, &mut r.coll) };
        if res == OK {
            // SAFETY: the token listen() returned.
            assert_eq!(unsafe { (self.v.close_listen.unwrap())(r.listen) }, OK);
        }
        res
    }

    pub fn create_context(&self, coll: *mut c_void, cfg: &mut NcclGinConfig) -> (NcclResult, *mut c_void, *mut NcclNetDeviceHandle) {
        let mut gc = std::ptr::null_mut();
        let mut dh = std::ptr::null_mut();
        // SAFETY: valid pointers.
        let r = unsafe { (self.v.create_context.unwrap())(coll, cfg, &mut gc, &mut dh) };
        (r, gc, dh)
    }

    pub fn reg(&self, coll: *mut c_void, buf: *mut c_void, size: usize, ty: c_int) -> (NcclResult, *mut c_void, *mut c_void) {
        let mut mh = std::ptr::null_mut();
        let mut gh = std::ptr::null_mut();
        // SAFETY: valid pointers.
        let r = unsafe { (self.v.reg_mr_sym.unwrap())(coll, buf, size, ty, 0, &mut mh, &mut gh) };
        (r, mh, gh)
    }

    pub fn query_error(&self, gin_ctx: *mut c_void) -> (NcclResult, bool) {
        let mut e = false;
        // SAFETY: valid pointers.
        let r = unsafe { (self.v.query_last_error.unwrap())(gin_ctx, &mut e) };
        (r, e)
    }

    pub fn call_ptr(&self, f: Option<rccl_rust_gin::ffi::gin::PtrFn>, p: *mut c_void) -> NcclResult {
        // SAFETY: the plugin checks the token itself.
        unsafe { (f.unwrap())(p) }
    }
}

pub fn default_config() -> NcclGinConfig {
    NcclGinConfig {
        n_signals: 4,
        n_counters: 2,
        n_contexts: 2,
        queue_depth: 128,
        traffic_class: -1,
        backend_version: 0,
        rank_stride: 1,
    }
}

/// Threads standing in for ranks exchange handles as RCCL's allgather would.
pub struct Exchange {
    barrier: TimedBarrier,
    handles: Mutex<Vec<[u8; NCCL_NET_HANDLE_MAXSIZE]>>,
}

impl Exchange {
    pub fn new(n: usize) -> Arc<Exchange> {
        Arc::new(Exchange { barrier: TimedBarrier::new(n), handles: Mutex::new(vec![[0u8; NCCL_NET_HANDLE_MAXSIZE]; n]) })
    }
    pub fn allgather(&self, rank: usize, h: [u8; NCCL_NET_HANDLE_MAXSIZE]) -> Vec<[u8; NCCL_NET_HANDLE_MAXSIZE]> {
        self.handles.lock().unwrap()[rank] = h;
        self.barrier.wait();
        let all = self.handles.lock().unwrap().clone();
        self.barrier.wait();
        all
    }
    pub fn barrier(&self) {
        self.barrier.wait();
    }

    /// Runs `body(rank, exchange)` for each of `n` ranks on a thread of its
    /// own, all sharing one exchange, and waits for them.
    pub fn as_threads(n: usize, body: impl Fn(usize, &Exchange) + Sync) {
        let ex = Exchange::new(n);
        std::thread::scope(|s| {
            for rank in 0..n {
                let (ex, body) = (ex.clone(), &body);
                s.spawn(move || body(rank, &ex));
            }
        });
    }
}

/// A barrier that gives up after a minute: a rank that failed must not leave
/// the others waiting forever (the test then fails instead of hanging).
pub struct TimedBarrier {
    n: usize,
    state: Mutex<(usize, u64)>,
    cv: Condvar,
}

impl TimedBarrier {
    pub fn new(n: usize) -> TimedBarrier {
        TimedBarrier { n, state: Mutex::new((0, 0)), cv: Condvar::new() }
    }

    pub fn wait(&self) {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let generation = g.1;
        g.0 += 1;
        if g.0 == self.n {
            g.0 = 0;
            g.1 += 1;
            self.cv.notify_all();
            return;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while g.1 == generation {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            assert!(!left.is_zero(), "barrier: another rank never arrived (did it fail?)");
            g = self.cv.wait_timeout(g, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

/// Whether this process's contexts use write-mode signals: asked for
/// (RCCL_RUST_GIN_SIGNAL_MODE=write; tests run their signal cases in both
/// modes through [`rerun_in_write_mode`]), or picked by `auto` because the
/// emulated NIC presents bnxt_re or ionic (no remote atomics into GPU
/// memory on those: provider/emu.rs capabilities).
pub fn write_mode_asked() -> bool {
    match std::env::var("RCCL_RUST_GIN_SIGNAL_MODE").map(|v| v.trim().to_string()).as_deref() {
        Ok("write") => true,
        Ok("atomic") => false,
        _ => family_asked().is_some(),
    }
}

/// The NIC family the emulated NIC presents, when not mlx5
/// (RCCL_RUST_GIN_EMU_FAMILY): the value `rust_gin_context.family` must have.
pub fn family_asked() -> Option<u32> {
    match std::env::var("RCCL_RUST_GIN_EMU_FAMILY").map(|v| v.trim().to_string()).as_deref() {
        Ok("bnxt_re") | Ok("bnxt") => Some(rccl_rust_gin::abi::RUST_GIN_FAMILY_BNXT),
        Ok("ionic") => Some(rccl_rust_gin::abi::RUST_GIN_FAMILY_IONIC),
        _ => None,
    }
}

/// The family of context `ctx` behind a device handle (abi/gin.h).
pub fn context_family(h: *const std::ffi::c_void, ctx: u32) -> u32 {
    // SAFETY: a live device handle from createContext; host memory here.
    unsafe {
        let h = &*(h as *const rccl_rust_gin::abi::rust_gin_handle);
        (*(h.contexts as *const rccl_rust_gin::abi::rust_gin_context).add(ctx as usize)).family
    }
}

/// Runs the named tests again on the emulated bnxt_re and ionic NICs
/// (RCCL_RUST_GIN_EMU_FAMILY), each in both signal modes: auto, which picks
/// slot writes there as on the hardware, and atomic, forced (the emulated
/// NIC executes atomics in any format; Thor2 and Pollara would not deliver
/// them into GPU memory). Each test checks that its contexts really have the
/// family ([`context_family`]) and the mode. A no-op in a rerun.
pub fn rerun_on_families(tests: &[&str]) {
    rerun_on_families_in_modes(&["auto", "atomic"], tests);
}

/// As [`rerun_on_families`], in the signal modes named only (a test with VA
/// signals runs in atomic mode only: write mode refuses them).
pub fn rerun_on_families_in_modes(modes: &[&str], tests: &[&str]) {
    if family_asked().is_some() || dc_asked() {
        println!("already a rerun on another family or on DC");
        return;
    }
    for family in ["bnxt_re", "ionic"] {
        for &mode in modes {
            rerun_with(
                &format!("{family} with {mode} signals"),
                &[("RCCL_RUST_GIN_EMU_FAMILY", family), ("RCCL_RUST_GIN_SIGNAL_MODE", mode)],
                tests,
            );
        }
    }
}

/// Runs the named tests again on the emulated bnxt_re NIC with one doorbell
/// per published batch (RCCL_RUST_GIN_BNXT_DOORBELL=peer) instead of the
/// default one per WQE. A no-op in a rerun.
pub fn rerun_on_bnxt_with_peer_doorbells(tests: &[&str]) {
    if family_asked().is_some() || dc_asked() {
        println!("already a rerun on another family or on DC");
        return;
    }
    rerun_with(
        "bnxt_re with per-peer doorbell groups",
        &[("RCCL_RUST_GIN_EMU_FAMILY", "bnxt_re"), ("RCCL_RUST_GIN_BNXT_DOORBELL", "peer")],
        tests,
    );
}

/// The signal mode of context `ctx` behind a device handle, as the device
/// code reads it (abi/gin.h `rust_gin_context.signal_mode`).
pub fn context_signal_mode(h: *const std::ffi::c_void, ctx: u32) -> u32 {
    // SAFETY: a live device handle from createContext; the emulated NIC's
    // memory is host memory.
    unsafe {
        let h = &*(h as *const rccl_rust_gin::abi::rust_gin_handle);
        (*(h.contexts as *const rccl_rust_gin::abi::rust_gin_context).add(ctx as usize)).signal_mode
    }
}

/// Runs the named tests of this test binary again, in a child process with
/// RCCL_RUST_GIN_SIGNAL_MODE=write: the same test code in the other signal
/// mode. Each named test must have run and passed there (the child's own
/// summary says so), and each checks that its contexts really are in write
/// mode ([`context_signal_mode`]). In a child already in write mode it is a
/// no-op that says so.
pub fn rerun_in_write_mode(tests: &[&str]) {
    if write_mode_asked() || family_asked().is_some() {
        println!("already in write mode: this is the rerun");
        return;
    }
    rerun_with("write mode", &[("RCCL_RUST_GIN_SIGNAL_MODE", "write")], tests);
}

/// Whether this process asked for the DC transport.
pub fn dc_asked() -> bool {
    std::env::var("RCCL_RUST_GIN_TRANSPORT").is_ok_and(|v| v.trim() == "dc")
}

/// As [`rerun_in_write_mode`], on the DC transport with `dcis` initiators
/// per context; each test checks its contexts really have them
/// ([`context_dcis`]).
pub fn rerun_on_dc(dcis: u32, tests: &[&str]) {
    if dc_asked() || family_asked().is_some() {
        println!("already on DC: this is the rerun");
        return;
    }
    let n = dcis.to_string();
    rerun_with("DC", &[("RCCL_RUST_GIN_TRANSPORT", "dc"), ("RCCL_RUST_GIN_DCIS", &n)], tests);
}

/// As [`rerun_on_dc`], with write-mode signals too (slot writes through
/// DCIs: the signal path must read the DC peer layout).
pub fn rerun_on_dc_in_write_mode(dcis: u32, tests: &[&str]) {
    if dc_asked() || write_mode_asked() || family_asked().is_some() {
        println!("already on DC, in write mode or on another family: this is a rerun");
        return;
    }
    let n = dcis.to_string();
    rerun_with(
        "DC with write-mode signals",
        &[("RCCL_RUST_GIN_TRANSPORT", "dc"), ("RCCL_RUST_GIN_DCIS", &n), ("RCCL_RUST_GIN_SIGNAL_MODE", "write")],
        tests,
    );
}

/// Whether this process's puts, putValues, signals and gets go through
/// the *_exclusive entries (RUST_GIN_TEST_EXCLUSIVE=1, set by
/// [`rerun_exclusive`]).
pub fn exclusive_asked() -> bool {
    std::env::var("RUST_GIN_TEST_EXCLUSIVE").is_ok_and(|v| v.trim() == "1")
}

/// rust_gin_put, or rust_gin_put_exclusive in an exclusive rerun.
///
/// # Safety
/// As the device functions: a live handle and windows.
#[allow(clippy::too_many_arguments)]
pub unsafe fn put(
    h: *const std::ffi::c_void,
    ctx: u32,
    peer: u32,
    dst: *const std::ffi::c_void,
    dst_off: u64,
    src: *const std::ffi::c_void,
    src_off: u64,
    bytes: u64,
    sig: rccl_rust_gin::abi::rust_gin_signal,
    has_counter: u32,
    counter: u32,
    flags: u32,
) -> i32 {
    use rccl_rust_gin::device as dev;
    // SAFETY: the caller's promise, passed on.
    unsafe {
        if exclusive_asked() {
            dev::rust_gin_put_exclusive(h, ctx, peer, dst, dst_off, src, src_off, bytes, sig, has_counter, counter, flags)
        } else {
            dev::rust_gin_put(h, ctx, peer, dst, dst_off, src, src_off, bytes, sig, has_counter, counter, flags)
        }
    }
}

/// rust_gin_put_value, or its exclusive entry in an exclusive rerun.
///
/// # Safety
/// As the device functions: a live handle and windows.
#[allow(clippy::too_many_arguments)]
pub unsafe fn put_value(
    h: *const std::ffi::c_void,
    ctx: u32,
    peer: u32,
    dst: *const std::ffi::c_void,
    dst_off: u64,
    value: u64,
    size: u32,
    sig: rccl_rust_gin::abi::rust_gin_signal,
    flags: u32,
) -> i32 {
    use rccl_rust_gin::device as dev;
    // SAFETY: the caller's promise, passed on.
    unsafe {
        if exclusive_asked() {
            dev::rust_gin_put_value_exclusive(h, ctx, peer, dst, dst_off, value, size, sig, flags)
        } else {
            dev::rust_gin_put_value(h, ctx, peer, dst, dst_off, value, size, sig, flags)
        }
    }
}

/// rust_gin_signal_peer, or its exclusive entry in an exclusive rerun.
///
/// # Safety
/// As the device functions: a live handle.
pub unsafe fn signal_peer(
    h: *const std::ffi::c_void,
    ctx: u32,
    peer: u32,
    sig: rccl_rust_gin::abi::rust_gin_signal,
    flags: u32,
) -> i32 {
    use rccl_rust_gin::device as dev;
    // SAFETY: the caller's promise, passed on.
    unsafe {
        if exclusive_asked() {
            dev::rust_gin_signal_peer_exclusive(h, ctx, peer, sig, flags)
        } else {
            dev::rust_gin_signal_peer(h, ctx, peer, sig, flags)
        }
    }
}

/// rust_gin_get, or its exclusive entry in an exclusive rerun.
///
/// # Safety
/// As the device functions: a live handle and windows.
#[allow(clippy::too_many_arguments)]
pub unsafe fn get(
    h: *const std::ffi::c_void,
    ctx: u32,
    peer: u32,
    remote: *const std::ffi::c_void,
    remote_off: u64,
    local: *const std::ffi::c_void,
    local_off: u64,
    bytes: u64,
    flags: u32,
) -> i32 {
    use rccl_rust_gin::device as dev;
    // SAFETY: the caller's promise, passed on.
    unsafe {
        if exclusive_asked() {
            dev::rust_gin_get_exclusive(h, ctx, peer, remote, remote_off, local, local_off, bytes, flags)
        } else {
            dev::rust_gin_get(h, ctx, peer, remote, remote_off, local, local_off, bytes, flags)
        }
    }
}

/// Runs the named tests again with RUST_GIN_TEST_EXCLUSIVE=1 on mlx5 RC,
/// bnxt_re and ionic (DC refuses exclusive puts: a DCI serves several
/// peers). Each test checks how many batches the owning path published.
pub fn rerun_exclusive(tests: &[&str]) {
    if exclusive_asked() || family_asked().is_some() || dc_asked() || write_mode_asked() {
        println!("already a rerun");
        return;
    }
    let x = ("RUST_GIN_TEST_EXCLUSIVE", "1");
    rerun_with("exclusive queues, mlx5 RC", &[x], tests);
    rerun_with("exclusive queues, bnxt_re", &[x, ("RCCL_RUST_GIN_EMU_FAMILY", "bnxt_re")], tests);
    rerun_with("exclusive queues, ionic", &[x, ("RCCL_RUST_GIN_EMU_FAMILY", "ionic")], tests);
}

/// DC initiators of context `ctx` behind a device handle (0: RC).
pub fn context_dcis(h: *const std::ffi::c_void, ctx: u32) -> u32 {
    // SAFETY: a live handle from createContext and its context array; the
    // memory is host memory.
    unsafe {
        let h = &*(h as *const rccl_rust_gin::abi::rust_gin_handle);
        (*(h.contexts as *const rccl_rust_gin::abi::rust_gin_context).add(ctx as usize)).n_dci
    }
}

/// Runs the named tests again on emulated NICs that start each batch of
/// queue pair q (q mod m) x 30 ms late, and reversed, for m = 2 and 3: two
/// queues whose numbers differ by anything but a multiple of 6 then run in
/// both orders, so a test whose promise rests on one queue per peer and
/// context sees a signal sent on another queue land before the data. A
/// no-op in a rerun.
pub fn rerun_with_queue_skew(tests: &[&str]) {
    if std::env::var_os("RCCL_RUST_GIN_EMU_QP_SKEW").is_some() || family_asked().is_some() || dc_asked() {
        println!("already a rerun");
        return;
    }
    for skew in ["mod2:30000", "revmod2:30000", "mod3:30000", "revmod3:30000"] {
        rerun_with(&format!("queue skew {skew}"), &[("RCCL_RUST_GIN_EMU_QP_SKEW", skew)], tests);
    }
}

/// Runs the named tests of this test binary again in a child process with
/// `env` set; each must have run and passed there.
fn rerun_with(what: &str, env: &[(&str, &str)], tests: &[&str]) {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(tests).args(["--exact", "--test-threads", "1"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("rerun the test binary");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the {what} rerun failed:\n{text}");
    let summary = format!("test result: ok. {} passed", tests.len());
    assert!(text.contains(&summary), "the {what} rerun did not run all {} tests:\n{text}", tests.len());
    for t in tests {
        assert!(text.contains(&format!("test {t} ... ok")), "{t} did not pass in {what}:\n{text}");
    }
}
