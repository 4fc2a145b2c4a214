//! Running test code as the lanes of a lockstep wave (the runtime is
//! device/src/host_only/lockstep.cpp; its model is in docs/architecture.md).

#![allow(dead_code)]

use rccl_rust_gin::abi::rust_gin_ls_stats;
use rccl_rust_gin::device::rust_gin_lockstep_run;
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

// The runtime's hooks (port/wave.h), for tests of the model itself.
extern "C" {
    pub fn rust_gin_ls_lane() -> c_int;
    pub fn rust_gin_ls_ballot(p: c_int, file: *const c_char, line: c_int) -> u64;
    pub fn rust_gin_ls_readlane(v: u64, lane: u32, file: *const c_char, line: c_int) -> u64;
    pub fn rust_gin_ls_region_begin(cond: c_int, file: *const c_char, line: c_int) -> c_int;
    pub fn rust_gin_ls_region_end(file: *const c_char, line: c_int);
    pub fn rust_gin_ls_spin_enter(file: *const c_char, line: c_int);
    pub fn rust_gin_ls_spin_report(left: c_int, file: *const c_char, line: c_int) -> c_int;
}

/// A call site for the hooks: the model tells sync points apart by it.
#[macro_export]
macro_rules! site {
    () => {
        (concat!(file!(), "\0").as_ptr() as *const std::ffi::c_char, line!() as std::ffi::c_int)
    };
}

/// The outcome of one wave: the runtime's counters and its model errors.
pub struct WaveRun {
    pub stats: rust_gin_ls_stats,
    pub model_errors: String,
}

/// Runs `lane(l)` for every lane set in `exec` as one lockstep wave on the
/// calling thread. A lane that panics fails the test (after the wave ends).
/// The lanes are fibers of the calling thread, so `lane` need not be Sync.
pub fn try_wave<F: Fn(u32)>(exec: u64, lane: F) -> WaveRun {
    struct Ctx<'a> {
        f: &'a dyn Fn(u32),
        failures: Mutex<Vec<String>>,
    }
    extern "C" fn trampoline(ctx: *mut c_void, l: u32) {
        // SAFETY: ctx is the Ctx below, alive for the whole run.
        let c = unsafe { &*(ctx as *const Ctx) };
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| (c.f)(l))) {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            c.failures.lock().unwrap_or_else(|p| p.into_inner()).push(format!("lane {l}: {msg}"));
        }
    }
    let ctx = Ctx { f: &lane, failures: Mutex::new(Vec::new()) };
    let mut stats = rust_gin_ls_stats::default();
    let mut msg = vec![0u8; 4096];
    // SAFETY: the trampoline and ctx outlive the call, which returns only
    // when every lane has returned; msg holds msg.len() bytes.
    unsafe {
        rust_gin_lockstep_run(
            exec,
            Some(trampoline),
            &ctx as *const Ctx as *mut c_void,
            &mut stats,
            msg.as_mut_ptr() as *mut c_char,
            msg.len(),
        )
    };
    let failures = ctx.failures.into_inner().unwrap_or_else(|p| p.into_inner());
    assert!(failures.is_empty(), "lanes failed:\n{}", failures.join("\n"));
    let end = msg.iter().position(|b| *b == 0).unwrap_or(msg.len());
    WaveRun { stats, model_errors: String::from_utf8_lossy(&msg[..end]).into_owned() }
}

/// As [`try_wave`], and the device code must have run as a wave can.
pub fn wave<F: Fn(u32)>(exec: u64, lane: F) -> rust_gin_ls_stats {
    let r = try_wave(exec, lane);
    assert_eq!(r.stats.model_errors, 0, "the lockstep model found code a wave cannot run:\n{}", r.model_errors);
    r.stats
}

/// The first `n` lanes.
pub fn lanes(n: u32) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

pub fn lanes_of(mask: u64) -> impl Iterator<Item = u32> {
    (0..64).filter(move |l| (mask >> l) & 1 == 1)
}
