//! Criterion benchmarks of the emulated NIC itself (emulated figures: host
//! threads, not hardware), stepped deterministically on the bench thread so
//! that only the NIC's own work is timed: 8-byte WRITEs consumed, 64 KiB
//! puts moved, the cost of one doorbell, a step that finds nothing, one
//! put+signal between two NICs, and parking (host/park.rs): a
//! park/wake hand-off between two threads and what a NIC step pays to wake
//! nobody. Command: `cargo bench --bench emu_nic`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rccl_rust_gin::abi::{rust_gin_mlx5_request, RUST_GIN_REQ_INLINE};
use rccl_rust_gin::emu::{Access, EmuNic, EmuQp, Fabric, NicConfig, Region};
use rccl_rust_gin::gpu::{Allocator, GpuBuf, HostMemory, Object, RingHome};
use rccl_rust_gin::mlx5::queue::QueueMem;
use rccl_rust_gin::mlx5::sq::{new_error_record, SendQueue};
use rccl_rust_gin::mlx5::wire::opcode;
use rccl_rust_gin::park;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Bed {
    fabric: Fabric,
    _nic: EmuNic,
    buf: GpuBuf,
    mr: Region,
    sq: SendQueue,
    _qp: EmuQp,
    _err: GpuBuf,
}

/// One NIC, a loopback QP of 2^log_depth WQEBBs and a registered buffer.
fn bed(log_depth: u32, bytes: usize) -> Bed {
    let fabric = Fabric::threads();
    let nic = EmuNic::new(&fabric, NicConfig::default()).unwrap();
    let pd = nic.alloc_pd();
    let buf = HostMemory.alloc(bytes, 4096, Object::WindowData).unwrap();
    // SAFETY: buf outlives the registration (Bed drops the NIC first... and
    // the NIC never touches it after the last step).
    let mr = unsafe { nic.reg_mr(pd, buf.host_addr().unwrap(), bytes, Access::all()) }.unwrap();
    let qp = EmuQp::create(&nic, pd, QueueMem::new(&HostMemory, log_depth, RingHome::Host).unwrap()).unwrap();
    qp.connect(nic.node(), qp.qpn).unwrap();
    let err = new_error_record(&HostMemory).unwrap();
    let sq = SendQueue::new(&HostMemory, &qp.descriptor(0, err.dev_addr(), 60_000_000_000)).unwrap();
    Bed { fabric, _nic: nic, buf, mr, sq, _qp: qp, _err: err }
}

/// Two NICs with a connected QP pair; rank 0 puts and signals into rank 1.
struct PutSignalPair {
    fabric: Fabric,
    _nics: [EmuNic; 2],
    _bufs: [GpuBuf; 2],
    mrs: [Region; 2],
    addrs: [u64; 2],
    sq: SendQueue,
    _qps: [EmuQp; 2],
    _err: GpuBuf,
}

impl PutSignalPair {
    fn new() -> PutSignalPair {
        let fabric = Fabric::threads();
        let nics = [0, 1].map(|_| EmuNic::new(&fabric, NicConfig::default()).unwrap());
        let pds = [nics[0].alloc_pd(), nics[1].alloc_pd()];
        let bufs = [0, 1].map(|_| HostMemory.alloc(4096, 4096, Object::WindowData).unwrap());
        // SAFETY: the buffers outlive the registrations (dropped after the NICs stop).
        let mrs = [0, 1].map(|i| unsafe { nics[i].reg_mr(pds[i], bufs[i].host_addr().unwrap(), 4096, Access::all()) }.unwrap());
        let qps = [0, 1].map(|i| {
            EmuQp::create(&nics[i], pds[i], QueueMem::new(&HostMemory, 10, RingHome::Host).unwrap()).unwrap()
        });
        qps[0].connect(nics[1].node(), qps[1].qpn).unwrap();
        qps[1].connect(nics[0].node(), qps[0].qpn).unwrap();
        let err = new_error_record(&HostMemory).unwrap();
        let sq = SendQueue::new(&HostMemory, &qps[0].descriptor(0, err.dev_addr(), 60_000_000_000)).unwrap();
        let addrs = [bufs[0].dev_addr(), bufs[1].dev_addr()];
        PutSignalPair { fabric, _nics: nics, _bufs: bufs, mrs, addrs, sq, _qps: qps, _err: err }
    }

    fn one(&self, cqe: bool) {
        let put = rust_gin_mlx5_request {
            opcode: opcode::RDMA_WRITE,
            length: 8,
            lkey: self.mrs[0].lkey,
            laddr: self.addrs[0],
            rkey: self.mrs[1].rkey,
            raddr: self.addrs[1] + 64,
            ..Default::default()
        };
        let signal = rust_gin_mlx5_request {
            opcode: opcode::ATOMIC_FA,
            flags: if cqe { rccl_rust_gin::abi::RUST_GIN_REQ_SIGNALED as u8 } else { 0 },
            length: 8,
            lkey: self.mrs[0].lkey,
            laddr: self.addrs[0] + 8,
            rkey: self.mrs[1].rkey,
            raddr: self.addrs[1],
            operand0: 1,
            ..Default::default()
        };
        self.sq.post(&[put, signal]).unwrap();
        self.fabric.step_until_idle();
        if cqe {
            self.sq.poll().unwrap();
        }
    }
}

/// Posts `reqs` (deferred, one doorbell), then times the NIC consuming them.
fn consume(b: &Bed, reqs: &[rust_gin_mlx5_request]) -> std::time::Duration {
    b.sq.post_deferred(reqs).unwrap();
    b.sq.ring();
    let t = std::time::Instant::now();
    b.fabric.step_until_idle();
    let d = t.elapsed();
    b.sq.poll().unwrap();
    d
}

fn timed(iters: u64, mut one: impl FnMut() -> std::time::Duration) -> std::time::Duration {
    (0..iters).map(|_| one()).sum()
}

fn emu_nic(c: &mut Criterion) {
    let mut g = c.benchmark_group("emu_nic");

    // 8-byte inline WRITEs, a quarter of a 4096-deep queue per round (the
    // last one signalled, so credit returns).
    let b = bed(12, 1 << 16);
    let n = 1024;
    let mut reqs: Vec<_> = (0..n)
        .map(|i| rust_gin_mlx5_request {
            opcode: opcode::RDMA_WRITE,
            flags: RUST_GIN_REQ_INLINE as u8,
            length: 8,
            rkey: b.mr.rkey,
            raddr: b.buf.dev_addr() + 8 * i,
            operand0: i,
            ..Default::default()
        })
        .collect();
    reqs.last_mut().unwrap().flags |= rccl_rust_gin::abi::RUST_GIN_REQ_SIGNALED as u8;
    g.throughput(Throughput::Elements(n));
    g.bench_function("writes_8b_consumed", |bn| bn.iter_custom(|iters| timed(iters, || consume(&b, &reqs))));

    // 64 KiB puts, 16 per round.
    let b = bed(8, 2 << 20);
    let mut reqs: Vec<_> = (0..16u64)
        .map(|i| rust_gin_mlx5_request {
            opcode: opcode::RDMA_WRITE,
            length: 65536,
            lkey: b.mr.lkey,
            rkey: b.mr.rkey,
            laddr: b.buf.dev_addr() + 65536 * i,
            raddr: b.buf.dev_addr() + (1 << 20) + 65536 * i,
            ..Default::default()
        })
        .collect();
    reqs.last_mut().unwrap().flags |= rccl_rust_gin::abi::RUST_GIN_REQ_SIGNALED as u8;
    g.throughput(Throughput::Bytes(16 * 65536));
    g.bench_function("puts_64k_moved", |bn| bn.iter_custom(|iters| timed(iters, || consume(&b, &reqs))));

    // One doorbell naming nothing new: what the NIC pays to hear it.
    let b = bed(6, 4096);
    let d = b.sq.descriptor();
    g.throughput(Throughput::Elements(1));
    g.bench_function("doorbell", |bn| {
        bn.iter(|| {
            // SAFETY: the bed's queue is live.
            unsafe { rccl_rust_gin::device::ring_by_hand(&d, 0, 0) }
        })
    });

    // A full step that finds nothing (one QP, nothing rung, nothing in
    // flight): what the polling thread's idle rounds now skip unless woken
    // (host/emu/nic/mod.rs, poll_loop).
    let b = bed(6, 4096);
    g.throughput(Throughput::Elements(1));
    g.bench_function("idle_step", |bn| bn.iter(|| assert!(!b._nic.step())));

    // One put+signal between two NICs, as gin-perf's direct path posts it
    // (an 8-byte WRITE and an 8-byte fetch-add on the signal word, one
    // doorbell; a CQE asked for every 64th operation), and both NICs
    // stepped until nothing moves: requester, responder, ACK, CQE.
    let pair = PutSignalPair::new();
    let mut k = 0u64;
    g.throughput(Throughput::Elements(1));
    g.bench_function("put_signal_two_nics", |bn| {
        bn.iter(|| {
            k += 1;
            pair.one(k % 64 == 0)
        })
    });
    g.finish();
    park_wake(c);
}

/// Waits until `w` reaches `want`, parked on it (as wave::spin does after
/// its brief spin; here at once, so that only parking is timed).
fn park_until(w: &AtomicU64, want: u64) {
    while w.load(Ordering::Acquire) < want {
        let p = park::begin(w.as_ptr() as usize);
        if w.load(Ordering::Acquire) >= want {
            break;
        }
        p.wait(Duration::from_secs(1));
    }
}

fn park_wake(c: &mut Criterion) {
    let mut g = c.benchmark_group("park");
    // Two threads hand a counter back and forth, each parked until the
    // other stores and wakes: one iteration is two wake-ups (a wake latency
    // is half of it).
    g.throughput(Throughput::Elements(2));
    g.bench_function("wake_round_trip", |bn| {
        bn.iter_custom(|iters| {
            let words = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
            let w = words.clone();
            let partner = std::thread::spawn(move || {
                for i in 1..=iters {
                    park_until(&w[0], i);
                    w[1].store(i, Ordering::Release);
                    park::wake_written(&[(w[1].as_ptr() as u64, 8)]);
                }
            });
            let t = Instant::now();
            for i in 1..=iters {
                words[0].store(i, Ordering::Release);
                park::wake_written(&[(words[0].as_ptr() as u64, 8)]);
                park_until(&words[1], i);
            }
            let d = t.elapsed();
            partner.join().unwrap();
            d
        })
    });
    // A NIC step's wake when nobody is parked: the gate (a fence and a load).
    let word = AtomicU64::new(0);
    let ranges = [(word.as_ptr() as u64, 8u64)];
    g.throughput(Throughput::Elements(1));
    g.bench_function("wake_nobody_parked", |bn| bn.iter(|| park::wake_written(std::hint::black_box(&ranges))));
    g.finish();
}

criterion_group!(benches, emu_nic);
criterion_main!(benches);
