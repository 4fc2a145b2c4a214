//! Parking for the waits of the device library's host build (`wave::spin`
//! in device/include/rust_gin/port/wave.h): a waiter that has spun briefly
//! parks, keyed by what it waits on, and whoever writes that wakes exactly
//! the threads parked on it.
//!
//! - A key is an address the waiter polls (a signal or counter word, the
//!   ring of the CQ it polls), or [`ANY`] for a wait that depends on several
//!   things (counter waits poll every counted queue): those wake on any write.
//! - The emulated NIC reports the byte ranges it wrote in a step (CQE rings,
//!   WRITE data, atomic words, READ data) with [`wake_written`]; a waiter
//!   whose key lies in a range is woken, nobody else. With nobody parked
//!   that costs one fence and one load per step.
//! - Writers that report nothing (a host thread storing a flag, a real NIC,
//!   another lane advancing a shared index) are caught by the waiter's own
//!   bounded timeout: every park ends by its deadline, so nothing hangs.
//!
//! No lost wake-up: a waiter registers (and counts itself in `PARKED`) with a
//! sequentially consistent fence, then checks its condition once more before
//! sleeping; a writer stores its data, fences, then reads `PARKED`. One of
//! the two sees the other's write (the store-buffering litmus test with
//! SeqCst fences on both sides), so either the waiter sees the data and does
//! not sleep, or the writer sees it registered and wakes it. The sleep itself
//! is a futex on the waiter's own word, which the waker sets before waking.

use std::sync::atomic::{fence, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The key of a wait that any write may end.
pub const ANY: usize = 0;

const BUCKETS: usize = 64;
/// The bucket of [`ANY`]; keyed waiters hash by page into the others.
const ANY_BUCKET: usize = BUCKETS;

/// One thread's parking word: 0 while parked, 1 once woken.
struct Parker {
    word: AtomicU32,
}

struct Waiter {
    key: usize,
    parker: Arc<Parker>,
}

struct Bucket {
    /// Waiters in `waiters` (read without the lock by wakers).
    n: AtomicUsize,
    waiters: Mutex<Vec<Waiter>>,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Bucket = Bucket { n: AtomicUsize::new(0), waiters: Mutex::new(Vec::new()) };
static TABLE: [Bucket; BUCKETS + 1] = [EMPTY; BUCKETS + 1];
/// Threads parked (or about to), all buckets: the writers' gate.
static PARKED: AtomicUsize = AtomicUsize::new(0);
/// Wake-ups delivered, for tests and benches.
static WOKEN: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static ME: Arc<Parker> = Arc::new(Parker { word: AtomicU32::new(1) });
}

fn bucket_of(key: usize) -> usize {
    if key == ANY {
        ANY_BUCKET
    } else {
        (key >> 12) % BUCKETS
    }
}

fn lock(b: &Bucket) -> MutexGuard<'_, Vec<Waiter>> {
    b.waiters.lock().unwrap_or_else(|e| e.into_inner())
}

/// A registration; [`Parking::wait`] sleeps on it, dropping it cancels.
pub struct Parking {
    bucket: usize,
    parker: Arc<Parker>,
}

/// Registers the calling thread as parked on `key`. The caller checks its
/// condition once more, then calls [`Parking::wait`] (or drops the
/// registration if the condition now holds).
pub fn begin(key: usize) -> Parking {
    let parker = ME.with(|p| p.clone());
    parker.word.store(0, Ordering::Relaxed);
    let bucket = bucket_of(key);
    let b = &TABLE[bucket];
    lock(b).push(Waiter { key, parker: parker.clone() });
    b.n.fetch_add(1, Ordering::SeqCst);
    PARKED.fetch_add(1, Ordering::SeqCst); // after the bucket's: see anyone_parked
    // Orders the registration before the caller's last look at its
    // condition (see the module comment).
    fence(Ordering::SeqCst);
    Parking { bucket, parker }
}

impl Parking {
    /// Sleeps until woken or `timeout` has passed (spurious returns of the
    /// futex are slept again); true if woken.
    pub fn wait(self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.parker.word.load(Ordering::Acquire) != 0 {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            futex_wait(&self.parker.word, deadline - now);
        }
    }
}

impl Drop for Parking {
    fn drop(&mut self) {
        let b = &TABLE[self.bucket];
        let mut w = lock(b);
        if let Some(i) = w.iter().position(|x| Arc::ptr_eq(&x.parker, &self.parker)) {
            w.swap_remove(i);
            b.n.fetch_sub(1, Ordering::Relaxed);
            PARKED.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Whether anyone is parked, after the writer's fence: the gate a writer
/// passes before looking further.
fn anyone_parked() -> bool {
    fence(Ordering::SeqCst);
    // Acquire: a waiter counted here has its bucket count and entry in
    // place (it made them before its count).
    PARKED.load(Ordering::Acquire) != 0
}

/// Wakes the threads parked on a key inside one of `ranges` ([addr, addr +
/// len)), and those parked on [`ANY`] if `ranges` is not empty. Called by a
/// writer after its stores.
pub fn wake_written(ranges: &[(u64, u64)]) {
    if ranges.is_empty() || !anyone_parked() {
        return;
    }
    let mut seen = 0u64; // buckets already looked at (bit per bucket)
    for &(addr, len) in ranges {
        let (first, last) = (addr >> 12, (addr + len.max(1) - 1) >> 12);
        if last - first >= BUCKETS as u64 {
            // The range covers every bucket.
            (0..BUCKETS).filter(|b| seen & (1 << b) == 0).for_each(|b| wake_in(b, ranges));
            break;
        }
        for page in first..=last {
            let b = (page as usize) % BUCKETS;
            if seen & (1 << b) == 0 {
                seen |= 1 << b;
                wake_in(b, ranges);
            }
        }
    }
    wake_in(ANY_BUCKET, ranges);
}

fn wake_in(bucket: usize, ranges: &[(u64, u64)]) {
    let b = &TABLE[bucket];
    if b.n.load(Ordering::Relaxed) == 0 {
        return;
    }
    for w in lock(b).iter() {
        let hit = w.key == ANY || ranges.iter().any(|&(a, l)| (w.key as u64).wrapping_sub(a) < l);
        if hit && w.parker.word.swap(1, Ordering::Release) == 0 {
            WOKEN.fetch_add(1, Ordering::Relaxed);
            futex_wake(&w.parker.word);
        }
    }
}

/// Wake-ups delivered so far (all threads).
pub fn woken() -> usize {
    WOKEN.load(Ordering::Relaxed)
}

/// Threads parked now.
pub fn parked() -> usize {
    PARKED.load(Ordering::Relaxed)
}

fn futex_wait(word: &AtomicU32, timeout: Duration) {
    let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
    // SAFETY: FUTEX_WAIT on a live, aligned u32 of this process with a valid
    // relative timeout; it only sleeps while the word is still 0.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, 0u32, &ts as *const libc::timespec, 0usize, 0u32);
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a live, aligned u32 (the parker is kept alive by
    // its Arc in the bucket, under the bucket's lock).
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1i32);
    }
}

// --- what the host build calls (port.h) ----------------------------------------

/// Registers the calling thread as parked on `key` (NULL: any write).
/// Returns a token for [`rust_gin_host_park_end`]; the caller checks its
/// condition once more in between.
#[no_mangle]
pub extern "C" fn rust_gin_host_park_begin(key: *const std::ffi::c_void) -> u32 {
    // Nothing here panics but a poisoned lock, which lock() recovers; still,
    // no unwinding into C++. The registration stays in its bucket; the token
    // names the bucket, and the thread's own parker finds it again.
    std::panic::catch_unwind(|| {
        let p = begin(key as usize);
        let token = p.bucket as u32 + 1;
        std::mem::forget(p); // ended by rust_gin_host_park_end
        token
    })
    .unwrap_or(0)
}

/// Sleeps on this thread's registration `token` until woken or `timeout_ns`
/// (0: does not sleep), then unregisters.
#[no_mangle]
pub extern "C" fn rust_gin_host_park_end(token: u32, timeout_ns: u64) {
    let Some(bucket) = (token as usize).checked_sub(1).filter(|&b| b <= BUCKETS) else { return };
    let _ = std::panic::catch_unwind(|| {
        let p = Parking { bucket, parker: ME.with(|m| m.clone()) };
        if timeout_ns > 0 {
            p.wait(Duration::from_nanos(timeout_ns));
        }
    });
}
