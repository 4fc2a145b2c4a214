//! The emulated NIC executing bnxt_re and ionic send queues (host/emu/nic/
//! family.rs): requests posted by the device library's family policies
//! (rust_gin_bnxt_post / rust_gin_ionic_post, the code a kernel runs) are
//! decoded from the family's bytes, executed, and completed with the
//! family's CQEs, which the device code's own poll consumes.
//!
//! The oracle for "executed right" is the mlx5 path, itself checked against
//! rdma-core and end to end elsewhere: one random stream of WRITEs (inline and
//! gathered), READs and atomics over one buffer leaves the same bytes behind
//! on all three families. Plus fixed values, ring and CQ wraps, the family's
//! error status in the sticky record, and a misdirected doorbell ignored.

use rccl_rust_gin::abi::{
    rust_gin_error, rust_gin_mlx5_request, rust_gin_mlx5_sq_state, rust_gin_nic_sq, RUST_GIN_ERR_CQE,
    RUST_GIN_ERR_QP_FAILED, RUST_GIN_OK, RUST_GIN_REQ_INLINE,
};
use rccl_rust_gin::emu::{Access, EmuFamilyQp, EmuNic, EmuQp, Fabric, NicConfig, QueueFormat, Region};
use rccl_rust_gin::device::DeviceStatus;
use rccl_rust_gin::gpu::{Allocator, GpuBuf, HostMemory, Object, RingHome};
use rccl_rust_gin::mlx5::queue::QueueMem;
use rccl_rust_gin::mlx5::sq::{new_error_record, SendQueue};
use rccl_rust_gin::mlx5::wire::opcode;
use std::time::{Duration, Instant};

use rccl_rust_gin::device::{rust_gin_bnxt_poll, rust_gin_bnxt_post, rust_gin_ionic_poll, rust_gin_ionic_post};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Mlx5,
    Bnxt,
    Ionic,
}

const BUF: usize = 64 << 10;
// [0, 32K): WRITE and atomic targets, READ sources
const SOURCE: u64 = 32 << 10; // [32K, 48K): gathered WRITE payloads
const LANDING: u64 = 48 << 10; // [48K, 56K): READ destinations
const RESULTS: u64 = 56 << 10; // [56K, 64K): atomic results
const LOG_WQE: u32 = 4; // 16 WQEs: the rings wrap many times

/// A queue and (kept alive, never read) the QP behind it.
enum Queue {
    Mlx5(SendQueue, #[allow(dead_code)] EmuQp),
    Family(Box<rust_gin_nic_sq>, #[allow(dead_code)] EmuFamilyQp),
}

struct Bed {
    kind: Kind,
    _fabric: Fabric,
    nic: EmuNic,
    buf: GpuBuf,
    mr: Region,
    q: Queue,
    err: GpuBuf,
}

impl Bed {
    fn new(kind: Kind) -> Bed {
        Bed::with_mtu(kind, NicConfig::default().mtu)
    }

    fn with_mtu(kind: Kind, mtu: usize) -> Bed {
        Bed::with_config(kind, NicConfig { mtu, ..NicConfig::default() })
    }

    fn with_config(kind: Kind, config: NicConfig) -> Bed {
        let fabric = Fabric::threads();
        let nic = EmuNic::new(&fabric, config).unwrap();
        let pd = nic.alloc_pd();
        let buf = HostMemory.alloc(BUF, 4096, Object::WindowData).unwrap();
        for i in 0..BUF {
            buf.write_pod(i, &((i * 7 + 3) as u8));
        }
        // SAFETY: buf outlives the registration (the NIC is dropped first).
        let mr = unsafe { nic.reg_mr(pd, buf.host_addr().unwrap(), BUF, Access::all()) }.unwrap();
        let err = new_error_record(&HostMemory).unwrap();
        let timeout = 5_000_000_000;
        let q = match kind {
            Kind::Mlx5 => {
                let qp = EmuQp::create(&nic, pd, QueueMem::new(&HostMemory, LOG_WQE, RingHome::Host).unwrap()).unwrap();
                qp.connect(nic.node(), qp.qpn).unwrap();
                let sq = SendQueue::new(&HostMemory, &qp.descriptor(0, err.dev_addr(), timeout)).unwrap();
                Queue::Mlx5(sq, qp)
            }
            Kind::Bnxt | Kind::Ionic => {
                let f = if kind == Kind::Bnxt { QueueFormat::Bnxt } else { QueueFormat::Ionic };
                let qp = EmuFamilyQp::create(&nic, pd, f, LOG_WQE, &HostMemory).unwrap();
                qp.connect(nic.node(), qp.qpn).unwrap();
                Queue::Family(Box::new(qp.descriptor(0, err.dev_addr(), timeout)), qp)
            }
        };
        nic.start_polling();
        Bed { kind, _fabric: fabric, nic, buf, mr, q, err }
    }

    fn addr(&self, off: u64) -> u64 {
        self.buf.dev_addr() + off
    }

    fn post(&self, reqs: &[rust_gin_mlx5_request]) -> i32 {
        let n = reqs.len() as u32;
        // SAFETY: the descriptor and everything it names live in self.
        match (&self.q, self.kind) {
            (Queue::Mlx5(sq, _), _) => code(sq.post(reqs)),
            (Queue::Family(d, _), Kind::Bnxt) => unsafe { rust_gin_bnxt_post(&**d, reqs.as_ptr(), n) },
            (Queue::Family(d, _), _) => unsafe { rust_gin_ionic_post(&**d, reqs.as_ptr(), n) },
        }
    }

    fn poll(&self) -> i32 {
        // SAFETY: as in post().
        match (&self.q, self.kind) {
            (Queue::Mlx5(sq, _), _) => code(sq.poll()),
            (Queue::Family(d, _), Kind::Bnxt) => unsafe { rust_gin_bnxt_poll(&**d) },
            (Queue::Family(d, _), _) => unsafe { rust_gin_ionic_poll(&**d) },
        }
    }

    fn state(&self) -> rust_gin_mlx5_sq_state {
        let at = match &self.q {
            Queue::Mlx5(sq, _) => sq.descriptor().state,
            Queue::Family(d, _) => d.state,
        };
        // SAFETY: the queue's live state block, read by value.
        unsafe { std::ptr::read_volatile(at as *const rust_gin_mlx5_sq_state) }
    }

    /// Polls until everything posted completed; the poll's status. (mlx5
    /// signals every 2^n WQEBBs, not every batch: its quiet asks for a CQE.)
    fn drain(&self) -> i32 {
        if let Queue::Mlx5(sq, _) = &self.q {
            return code(sq.quiet());
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let s = self.poll();
            if s != RUST_GIN_OK as i32 {
                return s;
            }
            let st = self.state();
            if st.done >= st.resv {
                return s;
            }
            assert!(Instant::now() < deadline, "{:?}: completions stopped at {} of {} posted", self.kind, st.done, st.resv);
            std::thread::yield_now();
        }
    }

    fn error(&self) -> rust_gin_error {
        self.err.read_pod(0)
    }

    fn bytes(&self) -> Vec<u8> {
        (0..BUF).map(|i| self.buf.read_pod::<u8>(i)).collect()
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.nic.stop_polling();
    }
}

/// The device code's status for a host-side result.
fn code(r: Result<(), DeviceStatus>) -> i32 {
    use rccl_rust_gin::abi as a;
    (match r {
        Ok(()) => a::RUST_GIN_OK,
        Err(DeviceStatus::CqeError) => a::RUST_GIN_ERR_CQE,
        Err(DeviceStatus::Timeout) => a::RUST_GIN_ERR_TIMEOUT,
        Err(DeviceStatus::QpFailed) => a::RUST_GIN_ERR_QP_FAILED,
        Err(DeviceStatus::Invalid) => a::RUST_GIN_ERR_INVALID,
        Err(DeviceStatus::Aborted) => a::RUST_GIN_ERR_ABORTED,
        Err(DeviceStatus::Unknown(c)) => return c,
    }) as i32
}

fn write_inline(b: &Bed, off: u64, value: u64, len: u32) -> rust_gin_mlx5_request {
    rust_gin_mlx5_request {
        opcode: opcode::RDMA_WRITE,
        flags: RUST_GIN_REQ_INLINE as u8,
        rkey: b.mr.rkey,
        raddr: b.addr(off),
        operand0: value,
        length: len,
        ..Default::default()
    }
}

fn rdma(b: &Bed, op: u8, local: u64, remote: u64, len: u32) -> rust_gin_mlx5_request {
    rust_gin_mlx5_request {
        opcode: op,
        lkey: b.mr.lkey,
        laddr: b.addr(local),
        rkey: b.mr.rkey,
        raddr: b.addr(remote),
        length: len,
        ..Default::default()
    }
}

fn atomic(b: &Bed, op: u8, result: u64, remote: u64, a: u64, c: u64) -> rust_gin_mlx5_request {
    rust_gin_mlx5_request { operand0: a, operand1: c, ..rdma(b, op, result, remote, 8) }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random stream over the bed's buffer: WRITEs inline and gathered, READs,
/// fetch-and-adds and compare-and-swaps, overlapping on purpose.
fn random_stream(b: &Bed, seed: u64, n: usize) -> Vec<rust_gin_mlx5_request> {
    let mut g = Rng(seed);
    (0..n)
        .map(|i| match g.below(5) {
            0 => write_inline(b, (g.below(32 << 10) & !7).min((32 << 10) - 8), g.next(), 1 + g.below(8) as u32),
            1 => rdma(b, opcode::RDMA_WRITE, SOURCE + g.below(15 << 10), g.below(31 << 10), 1 + g.below(1024) as u32),
            2 => rdma(b, opcode::RDMA_READ, LANDING + g.below(7 << 10), g.below(31 << 10), 1 + g.below(1024) as u32),
            3 => atomic(b, opcode::ATOMIC_FA, RESULTS + 8 * (i as u64 % 1024), 8 * g.below(64), g.next(), 0),
            _ => {
                let word = 8 * g.below(64);
                // Compare with the word's start value half of the time, so
                // some swaps happen (the value is fixed by the fill pattern).
                let start = u64::from_le_bytes(std::array::from_fn(|k| ((word as usize + k) * 7 + 3) as u8));
                let cmp = if g.below(2) == 0 { start } else { g.next() };
                atomic(b, opcode::ATOMIC_CS, RESULTS + 8 * (i as u64 % 1024), word, g.next(), cmp)
            }
        })
        .collect()
}

fn run_stream(kind: Kind, seed: u64, mtu: usize) -> Vec<u8> {
    let b = Bed::with_mtu(kind, mtu);
    let reqs = random_stream(&b, seed, 600);
    // Batches of 1..=7, several per ring: tickets, doorbells and CQEs wrap.
    let mut g = Rng(seed ^ 0x9e37_79b9);
    let mut at = 0;
    while at < reqs.len() {
        let n = (1 + g.below(7) as usize).min(reqs.len() - at);
        assert_eq!(b.post(&reqs[at..at + n]), RUST_GIN_OK as i32, "{kind:?}: post at {at}");
        at += n;
        if g.below(3) == 0 {
            assert_eq!(b.drain(), RUST_GIN_OK as i32, "{kind:?}: drain at {at}");
        }
    }
    assert_eq!(b.drain(), RUST_GIN_OK as i32, "{kind:?}: final drain");
    let st = b.state();
    assert_eq!(st.resv, st.done, "{kind:?}");
    assert!(b.error().state == 0, "{kind:?}: an error was recorded: {:?}", b.error().code);
    b.bytes()
}

#[test]
fn every_family_leaves_the_bytes_mlx5_leaves() {
    // At a 256-byte MTU most messages take several packets, so bnxt_re's
    // MSN entries (checked by the NIC on every WQE) span several PSNs.
    for (seed, mtu) in [(1u64, 4096), (0xdead_beef, 256), (42, 1024)] {
        let want = run_stream(Kind::Mlx5, seed, mtu);
        let fill: Vec<u8> = (0..BUF).map(|i| (i * 7 + 3) as u8).collect();
        let changed = want.iter().zip(&fill).filter(|(a, b)| a != b).count();
        assert!(changed > 10_000, "the stream barely changed the buffer ({changed} bytes): it tests nothing");
        for kind in [Kind::Bnxt, Kind::Ionic] {
            let got = run_stream(kind, seed, mtu);
            let first = got.iter().zip(&want).position(|(a, b)| a != b);
            assert!(first.is_none(), "{kind:?}, seed {seed:#x}: first difference from mlx5 at byte {:#x}", first.unwrap());
        }
    }
}

#[test]
fn values_land_where_the_family_says() {
    for kind in [Kind::Bnxt, Kind::Ionic] {
        let b = Bed::new(kind);
        let reqs = [
            write_inline(&b, 0x100, 0x1122_3344_5566_7788, 8),
            write_inline(&b, 0x110, 0xaabb_ccdd, 3),
            rdma(&b, opcode::RDMA_WRITE, SOURCE, 0x200, 64),
            atomic(&b, opcode::ATOMIC_FA, RESULTS, 0x100, 5, 0),
            atomic(&b, opcode::ATOMIC_CS, RESULTS + 8, 0x100, 0x77, 0x1122_3344_5566_778d),
            rdma(&b, opcode::RDMA_READ, LANDING, 0x100, 16),
        ];
        assert_eq!(b.post(&reqs), RUST_GIN_OK as i32);
        assert_eq!(b.drain(), RUST_GIN_OK as i32, "{kind:?}");
        let u64_at = |off: u64| b.buf.read_pod::<u64>(off as usize);
        assert_eq!(u64_at(RESULTS), 0x1122_3344_5566_7788, "{kind:?}: fetch-and-add's old value");
        assert_eq!(u64_at(RESULTS + 8), 0x1122_3344_5566_778d, "{kind:?}: compare-and-swap's old value");
        assert_eq!(u64_at(0x100), 0x77, "{kind:?}: the swap happened after the add");
        assert_eq!(u64_at(LANDING), 0x77, "{kind:?}: the READ saw both atomics");
        let three: Vec<u8> = (0..4).map(|k| b.buf.read_pod::<u8>(0x110 + k)).collect();
        assert_eq!(three, [0xdd, 0xcc, 0xbb, ((0x110 + 3) * 7 + 3) as u8], "{kind:?}: 3 inline bytes, no more");
        let src: Vec<u8> = (0..64).map(|k| b.buf.read_pod::<u8>(SOURCE as usize + k)).collect();
        let dst: Vec<u8> = (0..64).map(|k| b.buf.read_pod::<u8>(0x200 + k)).collect();
        assert_eq!(src, dst, "{kind:?}: gathered WRITE");
    }
}

/// Firmware WQE ABI version 1 (docs/nic-families.md, "Firmware and ABI
/// gates"): the emulated Pollara decodes with the v1 table, where v2's
/// FETCH_ADD (0x05) is WRITE_IMM and CMP_SWAP (0x04) is WRITE. The device
/// writes the version the descriptor names, so writes, fetch-and-add and
/// compare-and-swap land as on a v2 NIC, across ring wraps.
#[test]
fn ionic_v1_firmware_runs_what_the_device_meant() {
    for abi in [1u16, 2] {
        let b = Bed::with_config(Kind::Ionic, NicConfig { ionic_abi: abi, ..NicConfig::default() });
        match &b.q {
            Queue::Family(d, _) => assert_eq!(d.wqe_abi, abi as u32, "the descriptor names the NIC's version"),
            Queue::Mlx5(..) => unreachable!(),
        }
        let u64_at = |off: u64| b.buf.read_pod::<u64>(off as usize);
        for round in 0..6u64 {
            let (word, res) = (0x100 + 8 * round, RESULTS + 16 * round);
            let reqs = [
                write_inline(&b, word, 0x1000 + round, 8),
                atomic(&b, opcode::ATOMIC_FA, res, word, 5, 0),
                atomic(&b, opcode::ATOMIC_CS, res + 8, word, 0x77 + round, 0x1005 + round),
                rdma(&b, opcode::RDMA_WRITE, SOURCE, 0x800 + 64 * round, 64),
                rdma(&b, opcode::RDMA_READ, LANDING + 8 * round, word, 8),
            ];
            assert_eq!(b.post(&reqs), RUST_GIN_OK as i32, "v{abi} round {round}");
            assert_eq!(b.drain(), RUST_GIN_OK as i32, "v{abi} round {round}: {:?}", b.error());
            assert_eq!(u64_at(res), 0x1000 + round, "v{abi} round {round}: fetch-and-add's old value");
            assert_eq!(u64_at(res + 8), 0x1005 + round, "v{abi} round {round}: compare-and-swap's old value");
            assert_eq!(u64_at(word), 0x77 + round, "v{abi} round {round}: add then swap");
            assert_eq!(u64_at(LANDING + 8 * round), 0x77 + round, "v{abi} round {round}: the READ");
            let src: Vec<u8> = (0..64).map(|k| b.buf.read_pod::<u8>(SOURCE as usize + k)).collect();
            let dst: Vec<u8> = (0..64).map(|k| b.buf.read_pod::<u8>((0x800 + 64 * round) as usize + k)).collect();
            assert_eq!(src, dst, "v{abi} round {round}: gathered WRITE");
        }
    }
}

/// An emulated Pollara presenting a version rust-gin does not write gets
/// no queue (the same gate the hardware provider applies).
#[test]
fn ionic_refuses_a_firmware_abi_it_does_not_write() {
    let fabric = Fabric::threads();
    for abi in [0u16, 3] {
        let nic = EmuNic::new(&fabric, NicConfig { ionic_abi: abi, ..NicConfig::default() }).unwrap();
        let pd = nic.alloc_pd();
        let e = EmuFamilyQp::create(&nic, pd, QueueFormat::Ionic, LOG_WQE, &HostMemory).err().expect("refused");
        assert!(e.to_string().contains(&format!("WQE ABI version {abi}")), "{e}");
        // bnxt_re queues on the same NIC are unaffected.
        EmuFamilyQp::create(&nic, pd, QueueFormat::Bnxt, LOG_WQE, &HostMemory).expect("a bnxt_re queue");
    }
}

#[test]
fn a_bad_rkey_completes_with_the_familys_status() {
    for (kind, want) in [(Kind::Bnxt, 0x07u8 /* BNXT_RE_REQ_ST_REM_ACC */), (Kind::Ionic, 9 /* IONIC_STS_REMOTE_ACC_ERR */)] {
        let b = Bed::new(kind);
        let mut bad = write_inline(&b, 0x100, 1, 8);
        bad.rkey ^= 0x5a00;
        let behind = write_inline(&b, 0x108, 2, 8);
        assert_eq!(b.post(&[write_inline(&b, 0x0f8, 3, 8), bad, behind]), RUST_GIN_OK as i32);
        assert_eq!(b.drain(), RUST_GIN_ERR_CQE as i32, "{kind:?}");
        let e = b.error();
        assert_eq!(e.code, RUST_GIN_ERR_CQE, "{kind:?}");
        assert_eq!(e.syndrome, want, "{kind:?}: the family's remote-access status");
        assert_eq!(e.wqe_index & 0xf, 1, "{kind:?}: the second WQE failed");
        assert_eq!(b.buf.read_pod::<u64>(0xf8), 3, "{kind:?}: the WQE before the error landed");
        assert_eq!(b.post(&[write_inline(&b, 0, 1, 8)]), RUST_GIN_ERR_QP_FAILED as i32, "{kind:?}: the queue stays failed");
    }
}

#[test]
fn bnxt_msn_entries_name_each_wqe_and_its_psns() {
    let b = Bed::with_mtu(Kind::Bnxt, 256);
    let Queue::Family(d, qp) = &b.q else { unreachable!() };
    assert_eq!(d.path_mtu, 256, "the descriptor carries the path MTU the NIC counts with");
    // 1, 2 and 4 packets, a READ of 3, an atomic (1), then enough to wrap the table.
    let mut reqs = vec![
        rdma(&b, opcode::RDMA_WRITE, SOURCE, 0, 100),
        rdma(&b, opcode::RDMA_WRITE, SOURCE, 0, 257),
        rdma(&b, opcode::RDMA_WRITE, SOURCE, 0, 1024),
        rdma(&b, opcode::RDMA_READ, LANDING, 0, 700),
        atomic(&b, opcode::ATOMIC_FA, RESULTS, 0, 1, 0),
    ];
    for k in 0..20 {
        reqs.push(write_inline(&b, 8 * k, k, 8));
    }
    for chunk in reqs.chunks(3) {
        assert_eq!(b.post(chunk), RUST_GIN_OK as i32);
    }
    assert_eq!(b.drain(), RUST_GIN_OK as i32, "the NIC accepted every MSN entry");
    // The table's entries for the last 16 WQEs (it holds one ring's worth).
    let table = qp.sq.host_addr().unwrap() + (128 << LOG_WQE);
    let pk = |len: u64| len.div_ceil(256).max(1);
    let psns: Vec<u64> = reqs.iter().map(|r| pk(r.length as u64)).collect();
    let mut start = 0u64;
    for (n, p) in psns.iter().enumerate() {
        let slot = n % 16;
        if n + 16 >= reqs.len() {
            // SAFETY: inside the table; the NIC and the device code are idle.
            let e = unsafe { std::ptr::read_volatile((table + 8 * slot) as *const u64) };
            let want = ((slot as u64) << 48) | (((start + p) & 0xff_ffff) << 24) | (start & 0xff_ffff);
            assert_eq!(e, want, "WQE {n}: entry {slot}");
        }
        start += p;
    }
    assert_eq!(b.state().psn, start, "the producer's PSN count");
}

#[test]
fn a_wrong_msn_entry_fails_the_wqe() {
    // The device writes the entries; the NIC checks them. Here the table
    // is overwritten between post and execution by stopping the NIC first.
    let b = Bed::with_mtu(Kind::Bnxt, 256);
    b.nic.stop_polling();
    let Queue::Family(_, qp) = &b.q else { unreachable!() };
    assert_eq!(b.post(&[rdma(&b, opcode::RDMA_WRITE, SOURCE, 0, 600)]), RUST_GIN_OK as i32);
    let table = qp.sq.host_addr().unwrap() + (128 << LOG_WQE);
    // SAFETY: inside the table; the NIC is stopped.
    let e = unsafe { &*((table) as *const std::sync::atomic::AtomicU64) };
    assert_eq!(e.load(std::sync::atomic::Ordering::Relaxed), 3 << 24, "a 600-byte WRITE takes PSNs 0..3");
    e.store(2 << 24, std::sync::atomic::Ordering::Relaxed); // one PSN short
    b.nic.start_polling();
    assert_eq!(b.drain(), RUST_GIN_ERR_CQE as i32);
    assert_eq!(b.error().syndrome, 0x03, "BNXT_RE_REQ_ST_LOC_QP_OP");
}

/// The emulated NIC presenting a family says what that hardware can do:
/// no remote atomics into GPU memory on bnxt_re and ionic (so auto picks
/// slot writes), and no DC transport (ConnectX only), refused by name.
#[test]
fn an_emulated_family_nic_reports_the_hardware_limits() {
    use rccl_rust_gin::config::{Config, EmuFabric, ProviderKind};
    use rccl_rust_gin::provider::{emu::EmuProvider, NicFamily, Provider};
    for family in [NicFamily::Mlx5, NicFamily::Bnxt, NicFamily::Ionic] {
        let config = Config {
            provider: ProviderKind::Emu,
            emu_fabric: EmuFabric::Local(format!("limits-{}", family.name())),
            emu_family: family,
            ..Config::default()
        };
        let nic = EmuProvider::new(&config).unwrap().open(0).unwrap();
        assert_eq!(nic.family(), family);
        let caps = nic.capabilities();
        let dci = nic.create_dci(6, 0, false).map(|_| ());
        if family == NicFamily::Mlx5 {
            assert!(caps.atomics_unusable().is_none(), "{caps}");
            assert!(dci.is_ok(), "{dci:?}");
        } else {
            let why = caps.atomics_unusable().expect("no atomics into GPU memory");
            assert!(why.contains(family.name()), "{why}");
            let e = dci.expect_err("DC is ConnectX only");
            assert_eq!(e.code(), rccl_rust_gin::ffi::nccl::NCCL_INVALID_USAGE, "{e}");
            assert!(e.to_string().contains("no DC transport") && e.to_string().contains(family.name()), "{e}");
        }
    }
}

/// bnxt_re rings once per WQE by default and once per batch with
/// doorbell_group 1 (RCCL_RUST_GIN_BNXT_DOORBELL=peer); ionic once per
/// batch: what the emulated NIC counts (host/nic/counters.rs), with every
/// WQE executed either way. Checked by hand (2026-12-06): with bnxt's
/// kDoorbellPerWqe false the default run counts 10 doorbells, not 30.
#[test]
fn the_nic_counts_a_doorbell_per_bnxt_wqe_unless_grouped() {
    for (kind, group, want) in [(Kind::Bnxt, 0u32, 30u64), (Kind::Bnxt, 1, 10), (Kind::Ionic, 0, 10)] {
        let mut b = Bed::new(kind);
        if let Queue::Family(d, _) = &mut b.q {
            d.doorbell_group = group;
        }
        let before = b.nic.counters().doorbells;
        for k in 0..10u64 {
            let batch: Vec<_> = (0..3).map(|j| write_inline(&b, 8 * (3 * k + j), 0x5a00 + 3 * k + j, 8)).collect();
            assert_eq!(b.post(&batch), RUST_GIN_OK as i32);
            assert_eq!(b.drain(), RUST_GIN_OK as i32);
        }
        assert_eq!(b.nic.counters().doorbells - before, want, "{kind:?}, doorbell_group {group}");
        assert_eq!(b.state().doorbells, want, "{kind:?}: the producer's own count");
        for i in 0..30u64 {
            assert_eq!(b.buf.read_pod::<u64>(8 * i as usize), 0x5a00 + i, "{kind:?}: WRITE {i} landed");
        }
    }
}

/// bnxt_re moves at most 16 MiB per WQE (torchcomms#2714, mori#421): the
/// emulated Thor2 fails a larger WQE with BNXT_RE_REQ_ST_LOC_LEN, as the
/// NIC would; the GIN operations split larger puts and gets so that none is
/// posted (tests/signal_slots.rs, a_put_larger_than_one_bnxt_wqe_lands_whole).
#[test]
fn a_bnxt_wqe_over_16_mib_fails_with_a_length_error() {
    let b = Bed::new(Kind::Bnxt);
    let big = rdma(&b, opcode::RDMA_WRITE, SOURCE, 0, (16 << 20) + 1);
    assert_eq!(b.post(&[big]), RUST_GIN_OK as i32);
    assert_eq!(b.drain(), RUST_GIN_ERR_CQE as i32);
    assert_eq!(b.error().syndrome, 0x02, "BNXT_RE_REQ_ST_LOC_LEN");
}
