//! The loopback self-test `init` runs before it says yes (NCCL's GIN
//! contract reads a successful init as "GIN works on this node"), and that
//! `gin-caps --self-test` prints step by step.
//!
//! Per NIC: open it, connect a queue pair to itself, and post through the
//! device library's own WQE builders (its x86-64 build, the code a kernel
//! runs, as the RMA plugin posts) the operations the GIN backend relies on,
//! each checked byte for byte:
//! 1. `completions`: four signaled WRITEs, four CQEs (a collapsed or
//!    compressed CQ writes only the first, rocm-xio#127);
//! 2. `put`: a gathered 4 KiB WRITE and an inline 8-byte one;
//! 3. `put-signal`: data then the signal in the mode contexts will use
//!    (a fetch-and-add, or an inline slot WRITE);
//! 4. `atomics` (remote-atomic mode only): fetch-and-add and compare-and-swap,
//!    the old values they return and the words they leave;
//! 5. `get`: an RDMA READ.
//!
//! The queues and buffers are host memory (the provider opened for the host,
//! as the RMA plugin does): what is tested is the NIC, its firmware and the
//! WQE bytes, not GPU memory. The first failing step ends the NIC's test and
//! is named in one line. Every wait is bounded ([`STEP_TIMEOUT`]).

use crate::abi::{rust_gin_mlx5_request, RUST_GIN_REQ_INLINE, RUST_GIN_REQ_SIGNALED};
use crate::config::{Config, EmuFabric, EmuThreads, ProviderKind, SignalModeKnob};
use crate::error::{Error, Result};
use crate::gpu::{Allocator, GpuBuf, HostMemory, Object};
use crate::mlx5::sq::{new_error_record, SendQueue};
use crate::mlx5::wire::opcode;
use crate::provider::caps::SignalMode;
use crate::provider::{self, Access, MemoryMode, Nic};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The longest a step waits for its completions.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(2);

/// The steps, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Open,
    Completions,
    Put,
    PutSignal,
    Atomics,
    Get,
}

impl Step {
    pub fn name(self) -> &'static str {
        match self {
            Step::Open => "open",
            Step::Completions => "completions",
            Step::Put => "put",
            Step::PutSignal => "put-signal",
            Step::Atomics => "atomics",
            Step::Get => "get",
        }
    }
}

/// What one step found.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub step: Step,
    /// None: passed; Some(why) failed.
    pub failure: Option<String>,
    /// What was checked (or, skipped, why not).
    pub detail: String,
}

/// One NIC's self-test.
#[derive(Clone, Debug)]
pub struct Report {
    pub device: usize,
    pub nic: String,
    pub family: &'static str,
    pub signal_mode: &'static str,
    pub steps: Vec<Outcome>,
}

impl Report {
    /// The step that failed, if any (the test stops there).
    pub fn failure(&self) -> Option<&Outcome> {
        self.steps.iter().find(|o| o.failure.is_some())
    }

    /// The one line init WARNs with when a step failed.
    pub fn failure_line(&self) -> Option<String> {
        self.failure().map(|o| {
            format!(
                "self-test failed on {} ({}, signals as {}): step {}: {}; GIN is not offered on this node \
                 (docs/bring-up.md; RCCL_RUST_GIN_SELF_TEST=off skips the test)",
                self.nic,
                self.family,
                self.signal_mode,
                o.step.name(),
                o.failure.as_deref().unwrap_or("")
            )
        })
    }
}

/// The configuration the self-test opens NICs with: the emulated NIC on a
/// fabric of its own (a loopback needs no peer, and a shared-memory or TCP
/// fabric would gain a node per process), with a thread of its own (shared
/// polling threads take NICs in turn: the test's would move the others'),
/// and READ data landing at once and no queue skew (fault models for the
/// flush after a get and for ordering across queues, which a loopback on one
/// queue does not exercise).
fn test_config(config: &Config) -> Config {
    let mut c = config.clone();
    if c.provider == ProviderKind::Emu {
        c.emu_fabric = EmuFabric::Local(format!("rust-gin-self-test-{}", std::process::id()));
        c.emu_threads = EmuThreads::PerNic;
        c.emu_read_delay_us = 0;
        c.emu_qp_skew = None;
        c.rails = 1;
    }
    c
}

/// Runs the self-test on every device of the configured provider.
pub fn run(config: &Config) -> Result<Vec<Report>> {
    let c = test_config(config);
    let p = provider::select_for(&c, MemoryMode::Host)?;
    Ok((0..p.devices()).map(|dev| run_device(&c, &*p, dev)).collect())
}

/// What init calls: Ok when every NIC passed (or the test is off), else the
/// first failure's line as a system error (init's guard WARNs it). Run once
/// per process and configuration, as RCCL may init more than once.
pub fn check_at_init(config: &Config) -> Result<()> {
    if !config.self_test {
        return Ok(());
    }
    type Key = String;
    static DONE: OnceLock<Mutex<HashMap<Key, std::result::Result<(), String>>>> = OnceLock::new();
    // The knobs that change what the test opens or expects.
    let key = format!(
        "{:?}|{:?}|{:?}|{}|{:?}|{:?}|{}|{}",
        config.provider,
        config.emu_family,
        config.emu_fault,
        config.emu_ionic_abi,
        config.signal_mode,
        config.nic_filter,
        config.ib_port,
        config.gid_index
    );
    let mut done = DONE.get_or_init(|| Mutex::new(HashMap::new())).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = done.get(&key) {
        return r.clone().map_err(Error::System);
    }
    let r = match run(config) {
        Err(e) => Err(format!("self-test could not start: {e}")),
        Ok(reports) => match reports.iter().find_map(Report::failure_line) {
            Some(line) => Err(line),
            None => {
                let nics: Vec<String> = reports.iter().map(|r| format!("{} ({})", r.nic, r.family)).collect();
                crate::info_line!(INIT, "self-test passed on {}", nics.join(", "));
                Ok(())
            }
        },
    };
    // The boundary guard WARNs the error, once per refused init.
    done.insert(key, r.clone());
    r.map_err(Error::System)
}

fn run_device(c: &Config, p: &dyn provider::Provider, dev: usize) -> Report {
    let mut report = Report {
        device: dev,
        nic: p.info(dev).map(|i| i.name).unwrap_or_else(|_| format!("device {dev}")),
        family: "?",
        signal_mode: "?",
        steps: Vec::new(),
    };
    let bed = match p.open(dev).and_then(|nic| Bed::new(c, nic)) {
        Ok(b) => b,
        Err(e) => {
            report.steps.push(Outcome { step: Step::Open, failure: Some(e.to_string()), detail: String::new() });
            return report;
        }
    };
    report.family = bed.nic.family().name();
    report.signal_mode = bed.mode.name();
    report.steps.push(Outcome {
        step: Step::Open,
        failure: None,
        detail: format!("loopback QP {:#x}, {} WQEs", bed.qpn, 1u32 << LOG_DEPTH),
    });
    let steps: [(Step, fn(&Bed) -> std::result::Result<String, String>); 5] = [
        (Step::Completions, Bed::completions),
        (Step::Put, Bed::put),
        (Step::PutSignal, Bed::put_signal),
        (Step::Atomics, Bed::atomics),
        (Step::Get, Bed::get),
    ];
    for (step, f) in steps {
        let r = f(&bed);
        let failed = r.is_err();
        report.steps.push(match r {
            Ok(detail) => Outcome { step, failure: None, detail },
            Err(why) => Outcome { step, failure: Some(why), detail: String::new() },
        });
        if failed {
            break;
        }
    }
    report
}

const LOG_DEPTH: u32 = 4;
const BUF: usize = 16 << 10;
// The one registered buffer: sources, the put's landing, the signal word,
// atomic results, the get's landing.
const SRC: u64 = 0;
const DST: u64 = 4 << 10;
const SIGNAL: u64 = 8 << 10;
const ATOMIC_OLD: u64 = SIGNAL + 64;
const WORD: u64 = SIGNAL + 128;
const LANDING: u64 = 12 << 10;
const PAGE: usize = 4 << 10;

/// A NIC, a queue pair connected to itself and a registered buffer.
/// Fields drop in order: the queue pair and the registration go before
/// the memory they use.
struct Bed {
    _qp: Box<dyn provider::QueuePair>,
    _mr: Box<dyn provider::MemoryRegion>,
    sq: SendQueue,
    _err: GpuBuf,
    buf: GpuBuf,
    nic: Arc<dyn Nic>,
    mode: SignalMode,
    qpn: u32,
    lkey: u32,
    rkey: u32,
}

impl Bed {
    fn new(c: &Config, nic: Arc<dyn Nic>) -> Result<Bed> {
        let caps = nic.capabilities();
        let mode = match c.signal_mode {
            SignalModeKnob::Atomic => SignalMode::RemoteAtomic,
            SignalModeKnob::Write => SignalMode::SlotWrite,
            SignalModeKnob::Auto => caps.signal_mode(),
        };
        let qp = nic.create_qp(LOG_DEPTH, c.traffic_class as u8, false)?;
        qp.connect(&nic.address(), qp.qpn())?;
        let buf = HostMemory.alloc(BUF, PAGE, Object::WindowData).map_err(|e| Error::System(format!("self-test buffer: {e}")))?;
        // SAFETY: `buf` outlives the region: both move into the Bed, whose
        // field order drops the region first.
        let mr = unsafe { nic.reg_mr(buf.dev_addr(), BUF as u64, Access::all()) }?;
        let err = new_error_record(&HostMemory).map_err(|e| Error::System(format!("self-test error record: {e}")))?;
        let timeout_ns = STEP_TIMEOUT.as_nanos() as u64;
        let sq = SendQueue::for_queue(&HostMemory, &qp.descriptor(0, err.dev_addr(), timeout_ns))
            .map_err(|e| Error::System(format!("self-test queue descriptor: {e}")))?;
        Ok(Bed { mode, qpn: qp.qpn(), sq, lkey: mr.lkey(), rkey: mr.rkey(), buf, _err: err, _mr: mr, _qp: qp, nic })
    }

    fn at(&self, off: u64) -> u64 {
        self.buf.dev_addr() + off
    }

    fn write(&self, op: u8, src: u64, dst: u64, len: u32, flags: u8) -> rust_gin_mlx5_request {
        rust_gin_mlx5_request {
            opcode: op,
            flags,
            length: len,
            lkey: self.lkey,
            rkey: self.rkey,
            laddr: self.at(src),
            raddr: self.at(dst),
            ..Default::default()
        }
    }

    fn inline(&self, dst: u64, value: u64, flags: u8) -> rust_gin_mlx5_request {
        rust_gin_mlx5_request {
            operand0: value,
            ..self.write(opcode::RDMA_WRITE, 0, dst, 8, flags | RUST_GIN_REQ_INLINE as u8)
        }
    }

    fn atomic(&self, op: u8, word: u64, operand0: u64, operand1: u64) -> rust_gin_mlx5_request {
        rust_gin_mlx5_request {
            operand0,
            operand1,
            ..self.write(op, ATOMIC_OLD, word, 8, RUST_GIN_REQ_SIGNALED as u8)
        }
    }

    /// Posts and waits, within [`STEP_TIMEOUT`], until every WQE posted has
    /// completed.
    fn post_and_wait(&self, reqs: &[rust_gin_mlx5_request]) -> std::result::Result<(), String> {
        self.sq.post(reqs).map_err(|s| format!("the device library refused to post: {s:?}"))?;
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            let polled = self.sq.poll();
            if let Some(e) = self.sq.error() {
                return Err(format!("error completion: {e}"));
            }
            polled.map_err(|s| format!("polling the CQ: {s:?}"))?;
            let st = self.sq.state();
            if st.done >= st.resv {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} of {} WQEs completed after {} ms (CQEs after the queue's first never arrived: a collapsed or \
                     compressed CQ, rocm-xio#127, or a NIC that stopped)",
                    st.done,
                    st.resv,
                    STEP_TIMEOUT.as_millis()
                ));
            }
            if self.nic.needs_progress() {
                self.nic.progress();
            } else {
                std::thread::yield_now();
            }
        }
    }

    fn fill(&self, off: u64, len: usize, seed: u8) -> Vec<u8> {
        let v: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1).collect();
        self.buf.write(off as usize, &v);
        v
    }

    fn read(&self, off: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.buf.read(off as usize, &mut v);
        v
    }

    fn word(&self, off: u64) -> u64 {
        self.buf.atomic_u64(off as usize).load(std::sync::atomic::Ordering::Acquire)
    }

    fn set_word(&self, off: u64, v: u64) {
        self.buf.atomic_u64(off as usize).store(v, std::sync::atomic::Ordering::Release);
    }

    fn completions(&self) -> std::result::Result<String, String> {
        let sig = RUST_GIN_REQ_SIGNALED as u8;
        let reqs: Vec<_> = (0..4u64).map(|i| self.inline(DST + 8 * i, 0x5e1f_0000 + i, sig)).collect();
        self.post_and_wait(&reqs)?;
        Ok("4 signaled WQEs, 4 CQEs".into())
    }

    fn put(&self) -> std::result::Result<String, String> {
        let want = self.fill(SRC, PAGE, 7);
        self.buf.write(DST as usize, &vec![0u8; PAGE]);
        let value = 0x0123_4567_89ab_cdefu64;
        self.post_and_wait(&[
            self.write(opcode::RDMA_WRITE, SRC, DST, (PAGE - 64) as u32, 0),
            self.inline(DST + (PAGE - 8) as u64, value, RUST_GIN_REQ_SIGNALED as u8),
        ])?;
        let got = self.read(DST, PAGE - 64);
        compare("the 4032-byte WRITE", &want[..PAGE - 64], &got)?;
        let w = self.word(DST + (PAGE - 8) as u64);
        if w != value {
            return Err(format!("the inline 8-byte WRITE left {w:#x}, expected {value:#x}"));
        }
        Ok("4032 bytes gathered and 8 inline, bytes checked".into())
    }

    fn put_signal(&self) -> std::result::Result<String, String> {
        let want = self.fill(SRC, 256, 11);
        self.buf.write(DST as usize, &[0u8; 256]);
        // An add onto 5 and a write of 1 leave different words: a NIC that
        // runs the fetch-and-add as a WRITE of its operand is caught here.
        let (before, after) = match self.mode {
            SignalMode::RemoteAtomic => (5, 6),
            SignalMode::SlotWrite => (0, 1),
        };
        self.set_word(SIGNAL, before);
        self.set_word(ATOMIC_OLD, u64::MAX);
        let data = self.write(opcode::RDMA_WRITE, SRC, DST, 256, 0);
        let signal = match self.mode {
            SignalMode::RemoteAtomic => self.atomic(opcode::ATOMIC_FA, SIGNAL, 1, 0),
            SignalMode::SlotWrite => self.inline(SIGNAL, 1, RUST_GIN_REQ_SIGNALED as u8),
        };
        self.post_and_wait(&[data, signal])?;
        compare("the data before the signal", &want, &self.read(DST, 256))?;
        let s = self.word(SIGNAL);
        if s != after {
            return Err(format!("the signal word is {s:#x} after a {} of 1 onto {before}, expected {after}", self.mode.name()));
        }
        if self.mode == SignalMode::RemoteAtomic && self.word(ATOMIC_OLD) != before {
            return Err(format!("the fetch-and-add returned {:#x}, expected the old value {before}", self.word(ATOMIC_OLD)));
        }
        Ok(format!("256 bytes, then the signal as {}", self.mode.name()))
    }

    fn atomics(&self) -> std::result::Result<String, String> {
        if self.mode != SignalMode::RemoteAtomic {
            return Ok("skipped: signals are slot writes, nothing uses remote atomics".into());
        }
        let check = |what: &str, want_old: u64, want_word: u64| -> std::result::Result<(), String> {
            let (old, word) = (self.word(ATOMIC_OLD), self.word(WORD));
            if old != want_old || word != want_word {
                return Err(format!(
                    "{what}: returned {old:#x} and left {word:#x}, expected {want_old:#x} and {want_word:#x}"
                ));
            }
            Ok(())
        };
        self.set_word(WORD, 40);
        self.post_and_wait(&[self.atomic(opcode::ATOMIC_FA, WORD, 2, 0)])?;
        check("fetch-and-add 2 onto 40", 40, 42)?;
        self.post_and_wait(&[self.atomic(opcode::ATOMIC_CS, WORD, 7, 42)])?;
        check("compare-and-swap 42 -> 7", 42, 7)?;
        self.post_and_wait(&[self.atomic(opcode::ATOMIC_CS, WORD, 9, 42)])?;
        check("compare-and-swap 42 -> 9 on 7 (no swap)", 7, 7)?;
        Ok("fetch-and-add and compare-and-swap (swapping and not), old values and words checked".into())
    }

    fn get(&self) -> std::result::Result<String, String> {
        let want = self.fill(SRC, 2048, 23);
        self.buf.write(LANDING as usize, &[0u8; 2048]);
        self.post_and_wait(&[self.write(opcode::RDMA_READ, LANDING, SRC, 2048, RUST_GIN_REQ_SIGNALED as u8)])?;
        compare("the 2048-byte READ", &want, &self.read(LANDING, 2048))?;
        Ok("2048 bytes read back, bytes checked".into())
    }
}

fn compare(what: &str, want: &[u8], got: &[u8]) -> std::result::Result<(), String> {
    match want.iter().zip(got).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{what}: byte {i} is {:#04x}, expected {:#04x} ({} of {} bytes differ)",
            got[i],
            want[i],
            want.iter().zip(got).filter(|(a, b)| a != b).count(),
            want.len()
        )),
    }
}
