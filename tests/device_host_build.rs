//! The x86-64 build of the device sources is linked into the crate and is the
//! code the GPU runs: its WQE builder agrees with the Rust wire-format twin.

use rccl_rust_gin::abi::rust_gin_mlx5_request;
use rccl_rust_gin::device;
use rccl_rust_gin::gpu::{Allocator, HostMemory, Object, RingHome};
use rccl_rust_gin::mlx5::queue::QueueMem;
use rccl_rust_gin::mlx5::sq::{new_error_record, SendQueue};
use rccl_rust_gin::mlx5::wire::{doorbell_value, opcode, CtrlSeg, DataSeg, RaddrSeg, UAR_DB_OFFSET};
use rccl_rust_gin::provider::mlx5::doorbell as mlx5_doorbell;

/// `device::unowned_doorbells` counts for the whole process: the two tests
/// that read it take turns (tests of one binary run on parallel threads).
static UNOWNED: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn unowned_count_to_myself() -> std::sync::MutexGuard<'static, ()> {
    UNOWNED.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn host_built_device_code_builds_an_rdma_write() {
    let req = rust_gin_mlx5_request {
        opcode: opcode::RDMA_WRITE,
        length: 4096,
        lkey: 0x1234,
        rkey: 0xabcd,
        laddr: 0x7f00_0000_1000,
        raddr: 0x7e00_0000_2000,
        ..Default::default()
    };
    let w = device::build_wqe(&req, 0x1_2345u32 as u16, 0x00ab_cdef, true).unwrap();
    let ctrl = CtrlSeg::parse(&w[0..16]);
    assert_eq!(ctrl.opcode, opcode::RDMA_WRITE);
    assert_eq!(ctrl.wqe_index, 0x2345);
    assert_eq!(ctrl.qpn, 0x00ab_cdef);
    assert_eq!(ctrl.ds, 3);
    assert!(ctrl.cq_update());
    assert_eq!(RaddrSeg::parse(&w[16..32]), RaddrSeg { raddr: 0x7e00_0000_2000, rkey: 0xabcd });
    assert_eq!(DataSeg::parse(&w[32..48]), DataSeg { byte_count: 4096, lkey: 0x1234, addr: 0x7f00_0000_1000 });
    assert_eq!(&w[48..64], &[0u8; 16]);
}

/// A queue of the mlx5 provider posted from the host: its doorbell is a real
/// MMIO store of the right value to the queue's own UAR register, after the
/// doorbell record (issue 10: doorbells by provider, not by address). The
/// "register" here is host memory standing in for the CPU's UAR mapping.
#[test]
fn host_posting_on_mlx5_stores_the_doorbell_to_the_queues_own_register() {
    let _turn = unowned_count_to_myself();
    let mem = QueueMem::new(&HostMemory, 6, RingHome::Host).unwrap();
    let uar = HostMemory.alloc(4096, 4096, Object::WindowData).unwrap();
    let reg = uar.dev_addr() + UAR_DB_OFFSET as u64;
    let error = new_error_record(&HostMemory).unwrap();
    let qpn = 0x00ab_cd12;
    let desc = mem.descriptor(qpn, 0x41, reg, mlx5_doorbell::host_mmio(), 0, error.dev_addr(), 1_000_000_000);
    let sq = SendQueue::new(&HostMemory, &desc).unwrap();
    let unowned = device::unowned_doorbells();
    let w = rust_gin_mlx5_request { opcode: opcode::RDMA_WRITE, length: 64, lkey: 1, rkey: 2, laddr: 64, raddr: 128, ..Default::default() };
    for (batch, total) in [(3usize, 3u16), (2, 5)] {
        sq.post(&vec![w; batch]).unwrap();
        let mut db = [0u8; 8];
        uar.read(UAR_DB_OFFSET, &mut db);
        assert_eq!(u64::from_ne_bytes(db), doorbell_value(qpn, total), "doorbell after {total} WQEs");
        let mut rec = [0u8; 4];
        mem.dbr.read(4, &mut rec);
        assert_eq!(u32::from_be_bytes(rec), u32::from(total), "send doorbell record");
    }
    assert_eq!(sq.state().doorbells, 2, "one doorbell per rung batch");
    let mut rest = vec![0u8; 4096];
    uar.read(0, &mut rest);
    rest[UAR_DB_OFFSET..UAR_DB_OFFSET + 8].fill(0);
    assert!(rest.iter().all(|b| *b == 0), "nothing but the doorbell register was written");
    assert_eq!(device::unowned_doorbells(), unowned);
}

/// Lists posted through mlx5_post are written WQE by WQE as build_wqe
/// (oracle-checked, tests/wire_oracle.rs) builds each request alone,
/// whichever batch writer the list gets (mlx5/family.h, Family::batch): a
/// list of one ListKind (WRITEs, inline WRITEs, fetch-adds; SIGNALED on
/// some), and lists that differ from one such list in one request's
/// fence, opcode or inline flag only, which must not take its writer.
#[test]
fn every_list_is_written_as_its_requests_are_built_one_by_one() {
    const FENCE: u8 = rccl_rust_gin::abi::RUST_GIN_REQ_FENCE as u8;
    const SMALL_FENCE: u8 = rccl_rust_gin::abi::RUST_GIN_REQ_SMALL_FENCE as u8;
    const SIGNALED: u8 = rccl_rust_gin::abi::RUST_GIN_REQ_SIGNALED as u8;
    const INLINE: u8 = rccl_rust_gin::abi::RUST_GIN_REQ_INLINE as u8;
    const SOLICITED: u8 = rccl_rust_gin::abi::RUST_GIN_REQ_SOLICITED as u8;
    let w = |i: u64, flags: u8| rust_gin_mlx5_request {
        opcode: opcode::RDMA_WRITE,
        flags,
        length: if flags & INLINE != 0 { 8 } else { 64 + i as u32 },
        lkey: 1 + i as u32,
        rkey: 2 + i as u32,
        laddr: 64 * i,
        raddr: 4096 + 64 * i,
        operand0: 0x1122_3344_5566_7700 + i,
        imm: 0xdead_0000 + i as u32,
        ..Default::default()
    };
    let with = |mut r: rust_gin_mlx5_request, op: u8| {
        r.opcode = op;
        r.length = if op == opcode::ATOMIC_FA || op == opcode::ATOMIC_CS { 8 } else { r.length };
        r
    };
    let lists: Vec<(&str, Vec<rust_gin_mlx5_request>)> = vec![
        ("WRITEs", vec![w(0, 0), w(1, SIGNALED), w(2, 0), w(3, 0)]),
        ("inline WRITEs", vec![w(0, INLINE | SIGNALED), w(1, INLINE), w(2, INLINE)]),
        ("fetch-adds", vec![with(w(0, 0), opcode::ATOMIC_FA), with(w(1, SIGNALED), opcode::ATOMIC_FA)]),
        ("a fenced WRITE among WRITEs", vec![w(0, 0), w(1, FENCE), w(2, 0)]),
        ("a small-fenced WRITE among WRITEs", vec![w(0, 0), w(1, 0), w(2, SMALL_FENCE)]),
        ("a solicited WRITE first", vec![w(0, SOLICITED), w(1, 0)]),
        ("a WRITE_IMM among WRITEs", vec![w(0, 0), with(w(1, 0), opcode::RDMA_WRITE_IMM)]),
        ("a READ among WRITEs", vec![w(0, 0), with(w(1, 0), opcode::RDMA_READ)]),
        ("an inline WRITE among WRITEs", vec![w(0, 0), w(1, INLINE), w(2, 0)]),
        ("a compare-and-swap among fetch-adds", vec![with(w(0, 0), opcode::ATOMIC_FA), with(w(1, 0), opcode::ATOMIC_CS)]),
        ("a fenced fetch-add first", vec![with(w(0, FENCE), opcode::ATOMIC_FA), with(w(1, 0), opcode::ATOMIC_FA)]),
    ];
    let error = new_error_record(&HostMemory).unwrap();
    let qpn = 0x00ab_cd12;
    for (what, list) in lists {
        let mem = QueueMem::new(&HostMemory, 6, RingHome::Host).unwrap();
        let desc = mem.descriptor(qpn, 0x41, 0x10, 0, 0, error.dev_addr(), 1_000_000_000);
        let sq = SendQueue::new(&HostMemory, &desc).unwrap();
        let _turn = unowned_count_to_myself(); // its host ring is refused and counted
        sq.post(&list).unwrap();
        for (i, r) in list.iter().enumerate() {
            let mut got = [0u8; 64];
            mem.sq.read(64 * i, &mut got);
            // The CQE bit as posted (the batch's end may ask for one); a
            // SIGNALED request must have it.
            let cq = got[11] & 0x08 != 0;
            assert!(cq || r.flags & SIGNALED == 0, "{what}: WQE {i} is SIGNALED but asks for no CQE");
            let want = device::build_wqe(r, i as u16, qpn, cq).unwrap();
            assert_eq!(got, want, "{what}: WQE {i} differs from build_wqe of {r:?}");
        }
    }
}

/// A queue mapped for GPU kernels only names no host doorbell: a host-side
/// ring of it is counted and reported, and its doorbell address (here one
/// that would fault if anything read or wrote it) is never touched.
#[test]
fn a_host_ring_of_a_gpu_only_queue_touches_nothing() {
    let _turn = unowned_count_to_myself();
    let mem = QueueMem::new(&HostMemory, 6, RingHome::Host).unwrap();
    let error = new_error_record(&HostMemory).unwrap();
    let nowhere = 0x10; // the null page: any access faults
    let desc = mem.descriptor(0x99, 0x41, nowhere, 0, 0, error.dev_addr(), 1_000_000_000);
    let sq = SendQueue::new(&HostMemory, &desc).unwrap();
    let before = device::unowned_doorbells();
    let w = rust_gin_mlx5_request { opcode: opcode::RDMA_WRITE, length: 8, lkey: 1, rkey: 2, laddr: 64, raddr: 128, ..Default::default() };
    sq.post(&[w]).unwrap();
    assert!(device::unowned_doorbells() > before, "the refused doorbell is counted");
}

/// The standalone posting timer (device/src/host_only/posting_timing.cpp,
/// outside the crate's build) still builds from the command its header
/// gives and posts: it would otherwise rot unseen. It exits non-zero where
/// its WQE writes alone differ from the WQEs its posting wrote, so a pass
/// also says the two shares it prints compare the same work.
#[test]
fn the_standalone_posting_timer_builds_and_posts() {
    let root = env!("CARGO_MANIFEST_DIR");
    let exe = std::env::temp_dir().join(format!("posting_timing_{}", std::process::id()));
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let built = std::process::Command::new(&cxx)
        .current_dir(root)
        .args(["-std=c++17", "-O2", "-fPIC", "-x", "c++", "-Idevice/include", "device/src/rust_gin_device.hip"])
        .args(["device/src/host_only/lockstep.cpp", "device/src/host_only/posting_timing.cpp", "-o"])
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("run {cxx}: {e}"));
    assert!(built.status.success(), "{cxx} failed:\n{}", String::from_utf8_lossy(&built.stderr));
    let run = std::process::Command::new(&exe).args(["1", "64"]).output().expect("run the timer");
    let _ = std::fs::remove_file(&exe);
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "timer failed: {}\n{out}", String::from_utf8_lossy(&run.stderr));
    assert!(out.contains("EMULATED") && out.contains("ns CPU/WQE"), "{out}");
    for line in ["share of the store loop, WQE writes alone:", "share of the store loop, posting:"] {
        assert!(out.contains(line), "{line} missing:\n{out}");
    }
}

/// mlx5 stores the doorbell record before the doorbell (NCCL's GDAKI and
/// MORI do; a field quirk in docs/nic-families.md): the NIC may fetch WQEs
/// up to the record as soon as the doorbell (BlueFlame/UAR store) arrives.
/// The host build reports each store in program order through the queue's
/// host doorbell; every doorbell must come right after the record naming
/// the same producer index. (On the GPU, tests/isa_checks.rs holds every
/// mlx5 doorbell to a record store and a system-scope release before it.)
/// Checked by hand (2026-12-06): with the record stored after the doorbell
/// in mlx5::Family::ring this fails on the first batch.
#[test]
fn mlx5_stores_the_doorbell_record_before_each_doorbell() {
    use rccl_rust_gin::abi::rust_gin_host_doorbell;
    use std::ffi::c_void;
    use std::sync::Mutex;
    struct Log(Mutex<Vec<(char, u64)>>);
    extern "C" fn ring(ctx: *const c_void, _reg: *mut u64, value: u64) {
        // SAFETY: ctx is the test's Log, alive for the test.
        unsafe { &*(ctx as *const Log) }.0.lock().unwrap().push(('D', value));
    }
    extern "C" fn record(ctx: *const c_void, _dbr: *mut u32, value: u32) {
        // SAFETY: as above.
        unsafe { &*(ctx as *const Log) }.0.lock().unwrap().push(('R', u64::from(u32::from_be(value))));
    }
    let log = Box::new(Log(Mutex::new(Vec::new())));
    let host = Box::new(rust_gin_host_doorbell { ring: Some(ring), record: Some(record), ctx: &*log as *const Log as *const c_void });
    let mem = QueueMem::new(&HostMemory, 6, RingHome::Host).unwrap();
    let error = new_error_record(&HostMemory).unwrap();
    let qpn = 0x0012_3456;
    // The register is never stored to: the host doorbell receives it.
    let desc = mem.descriptor(qpn, 0x41, 0x7000_0000_0800, &*host as *const rust_gin_host_doorbell as u64, 0, error.dev_addr(), 1_000_000_000);
    let sq = SendQueue::new(&HostMemory, &desc).unwrap();
    let w = rust_gin_mlx5_request { opcode: opcode::RDMA_WRITE, length: 64, lkey: 1, rkey: 2, laddr: 64, raddr: 128, ..Default::default() };
    let mut want = Vec::new();
    let mut total = 0u16;
    for batch in [3usize, 2, 4] {
        sq.post(&vec![w; batch]).unwrap();
        total += batch as u16;
        want.push(('R', u64::from(total)));
        want.push(('D', doorbell_value(qpn, total)));
    }
    assert_eq!(*log.0.lock().unwrap(), want, "each doorbell record, then its doorbell");
}
