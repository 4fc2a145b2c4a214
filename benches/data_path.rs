//! Criterion benchmarks of the data path's hot pieces, on the host build of
//! the device library (the code a kernel runs, compiled for x86-64). Figures
//! are emulated: they time host threads, not a GPU or a NIC.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rccl_rust_gin::abi::rust_gin_mlx5_request;
use rccl_rust_gin::device;
use rccl_rust_gin::emu::{Access, EmuNic, EmuQp, Fabric, NicConfig};
use rccl_rust_gin::gpu::{Allocator, HostMemory, Object, RingHome};
use rccl_rust_gin::mlx5::queue::QueueMem;
use rccl_rust_gin::mlx5::sq::{new_error_record, SendQueue};
use rccl_rust_gin::mlx5::wire::opcode;
use std::hint::black_box;

fn wqe_build(c: &mut Criterion) {
    let req = rust_gin_mlx5_request {
        opcode: opcode::RDMA_WRITE,
        length: 4096,
        lkey: 1,
        rkey: 2,
        laddr: 0x1000,
        raddr: 0x2000,
        ..Default::default()
    };
    let mut g = c.benchmark_group("wqe_build");
    g.throughput(Throughput::Elements(1));
    g.bench_function("rdma_write", |b| {
        let mut i = 0u16;
        b.iter(|| {
            i = i.wrapping_add(1);
            black_box(device::build_wqe(black_box(&req), i, 0x42, false).unwrap())
        })
    });
    g.finish();
}

/// One batch of 64 WRITEs through the producer (reserve, write, publish,
/// ring), with the emulated NIC consuming on its own thread (emulated).
fn batch_post(c: &mut Criterion) {
    let fabric = Fabric::threads();
    let nic = EmuNic::new(&fabric, NicConfig::default()).unwrap();
    let pd = nic.alloc_pd();
    let buf = HostMemory.alloc(1 << 16, 4096, Object::WindowData).unwrap();
    // SAFETY: buf outlives the registration's use in this benchmark.
    let mr = unsafe { nic.reg_mr(pd, buf.host_addr().unwrap(), 1 << 16, Access::all()) }.unwrap();
    let qp = EmuQp::create(&nic, pd, QueueMem::new(&HostMemory, 12, RingHome::Host).unwrap()).unwrap();
    qp.connect(nic.node(), qp.qpn).unwrap();
    let err = new_error_record(&HostMemory).unwrap();
    let sq = SendQueue::new(&HostMemory, &qp.descriptor(0, err.dev_addr(), 60_000_000_000)).unwrap();
    nic.start_polling();
    let reqs: Vec<_> = (0..64u64)
        .map(|i| rust_gin_mlx5_request {
            opcode: opcode::RDMA_WRITE,
            length: 64,
            lkey: mr.lkey,
            rkey: mr.rkey,
            laddr: buf.dev_addr() + i * 64,
            raddr: buf.dev_addr() + 32768 + i * 64,
            ..Default::default()
        })
        .collect();
    let mut g = c.benchmark_group("batch_post");
    g.throughput(Throughput::Elements(64));
    g.bench_function("64_writes_emulated", |b| b.iter(|| sq.post(black_box(&reqs)).unwrap()));
    g.bench_function("64_writes_then_quiet_emulated", |b| {
        b.iter_batched(|| (), |_| {
            sq.post(&reqs).unwrap();
            sq.quiet().unwrap()
        }, BatchSize::SmallInput)
    });
    g.finish();
    sq.quiet().unwrap();
    nic.stop_polling();
}

/// The producer alone: batches of 64 into a fresh 32768-WQEBB queue that is
/// never short of credit, with no NIC thread competing for the CPU. Queue
/// setup is outside the timed part, and so is paging in the fresh ring (a
/// long-lived queue's ring is resident). This is the host-built core's
/// posting rate per thread (emulated).
fn post_only(c: &mut Criterion) {
    let fabric = Fabric::threads();
    let nic = EmuNic::new(&fabric, NicConfig::default()).unwrap();
    let pd = nic.alloc_pd();
    let req = rust_gin_mlx5_request { opcode: opcode::RDMA_WRITE, length: 64, lkey: 1, rkey: 2, laddr: 64, raddr: 128, ..Default::default() };
    let reqs = vec![req; 64];
    let mut g = c.benchmark_group("post_only");
    g.throughput(Throughput::Elements(64));
    g.bench_function("64_writes_no_nic_emulated", |b| {
        b.iter_custom(|iters| {
            let mut total = std::time::Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let mem = QueueMem::new(&HostMemory, 15, RingHome::Host).unwrap();
                let ring = mem.sq.host_addr().unwrap();
                // SAFETY: the ring's bytes, owned by `mem`, not yet shared.
                unsafe { std::ptr::write_bytes(ring as *mut u8, 0, mem.sq.len()) };
                let qp = EmuQp::create(&nic, pd, mem).unwrap();
                qp.connect(nic.node(), qp.qpn).unwrap();
                let err = new_error_record(&HostMemory).unwrap();
                let sq = SendQueue::new(&HostMemory, &qp.descriptor(0, err.dev_addr(), 1_000_000_000)).unwrap();
                let n = left.min(500);
                let t = std::time::Instant::now();
                for _ in 0..n {
                    sq.post(black_box(&reqs)).unwrap();
                }
                total += t.elapsed();
                left -= n;
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, wqe_build, post_only, batch_post);
criterion_main!(benches);
