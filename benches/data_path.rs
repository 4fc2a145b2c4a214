//! Criterion benchmarks of the data path's hot pieces, run on the host build
//! of the device library (the code a kernel runs, compiled for x86-64).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rccl_rust_gin::abi::rust_gin_mlx5_request;
use rccl_rust_gin::device;
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
            black_box(device::build_wqe(black_box(&req), i, 0x42, false))
        })
    });
    g.finish();
}

criterion_group!(benches, wqe_build);
criterion_main!(benches);
