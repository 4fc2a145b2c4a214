//! The threads that run emulated NICs. A poller is one thread stepping the
//! NICs given to it, round after round, until it has none left: a NIC's own
//! (NicConfig's default), or one of the few the provider shares among the
//! NICs of a process's fabric (RCCL_RUST_GIN_EMU_THREADS, provider/emu.rs).
//!
//! Why share: on a machine with fewer cores than NICs plus requesters, a
//! thread per NIC makes the NICs take turns through the scheduler: each
//! hand-over between two ranks' NICs is a `sched_yield` or a futex wake and
//! a context switch, and an idle NIC's polling takes the core from one with
//! work. One thread stepping both ends of a transfer hands a packet over
//! within the round (docs/performance.md, "NIC threads, data in flight and
//! counter lines"). A real NIC costs
//! the host no CPU at all; the fewer cycles the emulation burns in the
//! scheduler, the closer the emulated comparisons come to that.

use super::{lock, Inner};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

/// What doorbells and packets tell a poller (every NIC it runs shares it).
#[derive(Default)]
pub(super) struct Signal {
    wake: (Mutex<()>, Condvar),
    /// The thread is (about to be) blocked on `wake`: only then is a
    /// notification worth a system call.
    sleeping: AtomicBool,
    /// Work arrived since the thread last looked (set without a lock: a
    /// doorbell or a packet costs an atomic store unless the thread sleeps).
    pub(super) woken: AtomicBool,
}

impl Signal {
    pub(super) fn wake(&self) {
        self.woken.store(true, Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            let (m, cv) = &self.wake;
            let _g = lock(m);
            cv.notify_one();
        }
    }
}

struct Run {
    nics: Vec<Weak<Inner>>,
    /// Bumped when the NIC list empties: a thread of an older generation
    /// ends at its next round (a new one may already run the next NICs).
    generation: u64,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// One polling thread and the NICs it steps.
pub struct Poller {
    name: String,
    pub(super) signal: Arc<Signal>,
    run: Mutex<Run>,
}

impl std::fmt::Debug for Poller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Poller({})", self.name)
    }
}

impl Poller {
    /// A poller whose thread will be named `emu-nic-<name>` (gin-perf finds
    /// the NICs' CPU time by that prefix).
    pub fn new(name: &str) -> Arc<Poller> {
        Arc::new(Poller {
            name: format!("emu-nic-{name}"),
            signal: Arc::new(Signal::default()),
            run: Mutex::new(Run { nics: Vec::new(), generation: 0, thread: None }),
        })
    }

    /// NICs this poller steps now.
    pub fn nics(&self) -> usize {
        lock(&self.run).nics.len()
    }

    pub(super) fn contains(&self, nic: &Arc<Inner>) -> bool {
        lock(&self.run).nics.iter().any(|w| w.as_ptr() == Arc::as_ptr(nic))
    }

    /// Steps `nic` from now on, starting the thread if it has none.
    pub(super) fn add(self: &Arc<Self>, nic: &Arc<Inner>) {
        let mut run = lock(&self.run);
        if run.nics.iter().any(|w| w.as_ptr() == Arc::as_ptr(nic)) {
            return;
        }
        run.nics.push(Arc::downgrade(nic));
        if run.thread.is_none() {
            let (me, generation) = (self.clone(), run.generation);
            run.thread = Some(
                std::thread::Builder::new()
                    .name(self.name.clone())
                    .spawn(move || me.poll_loop(generation))
                    .expect("spawn an emulated NIC polling thread"),
            );
        }
        drop(run);
        self.signal.wake();
    }

    /// Stops stepping `nic`; returns once no round of the thread runs it.
    /// The last NIC's removal ends the thread (joined here).
    pub(super) fn remove(&self, nic: *const Inner) {
        let mut run = lock(&self.run);
        run.nics.retain(|w| w.as_ptr() != nic && w.strong_count() > 0);
        if !run.nics.is_empty() || run.thread.is_none() {
            return;
        }
        run.generation += 1;
        let thread = run.thread.take();
        drop(run);
        self.signal.wake();
        if let Some(t) = thread {
            // Not from the thread itself (a NIC dropped inside a step).
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }

    fn poll_loop(self: Arc<Self>, generation: u64) {
        // Idle rounds spent yielding before sleeping: a wake-up through the
        // condition variable costs tens of microseconds on a busy machine,
        // which would dominate every emulated latency.
        const SPIN_ROUNDS: u32 = 64;
        // An idle round does a full step only this often unless woken
        // (timers: check_peers, a destination that stays stuck). Between, it
        // looks at one flag: a full step that finds nothing still takes two
        // locks and ~240 instructions (benches/emu_nic.rs, idle_step), and
        // on two cores shared by the requesters and the NICs idle steps take
        // CPU from the threads with work (docs/performance.md, "Instruction
        // counts, where wall clock cannot decide").
        const FULL_STEP_EVERY: u32 = 16;
        let signal = &self.signal;
        let mut idle = 0u32;
        let mut nics: Vec<Arc<Inner>> = Vec::new();
        loop {
            // The list is held for the whole round, so that remove() returns
            // only once no step of the removed NIC runs here.
            let run = lock(&self.run);
            if run.generation != generation {
                return;
            }
            nics.extend(run.nics.iter().filter_map(Weak::upgrade));
            // Cleared before the steps look at anything: a doorbell or packet
            // from now on sets it again, and the next round steps in full.
            signal.woken.store(false, Ordering::SeqCst);
            let mut progress = false;
            for nic in &nics {
                progress |= nic.step();
            }
            // Packets over shared memory wake nobody: every round steps.
            let skip = nics.iter().all(|n| n.settled.load(Ordering::Relaxed) && !n.fabric.is_shared_memory());
            drop(run);
            // A NIC's last reference may go here: never under the list lock
            // (its drop removes it from this poller).
            nics.clear();
            if progress {
                idle = 0;
                continue;
            }
            idle += 1;
            if idle < SPIN_ROUNDS {
                std::thread::yield_now();
                if skip {
                    while idle + 1 < SPIN_ROUNDS
                        && !idle.is_multiple_of(FULL_STEP_EVERY)
                        && !signal.woken.load(Ordering::SeqCst)
                    {
                        idle += 1;
                        std::thread::yield_now();
                    }
                }
                continue;
            }
            // Sleep until woken; cross-process packets do not wake us, so
            // poll again soon regardless. Announce the sleep before the last
            // look at `woken`: a waker that misses `sleeping` has set `woken`
            // first.
            let (m, cv) = &signal.wake;
            let g = lock(m);
            signal.sleeping.store(true, Ordering::SeqCst);
            if !signal.woken.swap(false, Ordering::SeqCst) {
                let _ = cv.wait_timeout(g, Duration::from_micros(50));
            }
            signal.sleeping.store(false, Ordering::SeqCst);
            signal.woken.store(false, Ordering::Relaxed);
            idle = 0;
        }
    }
}
