//! Criterion benchmark of the proxy model's hot path: requesters writing
//! GFDs and the proxy draining a batch of 32 (take + decode), without the
//! RMA calls. Host threads, not hardware (emulated).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
#[path = "../host/bin/gin_perf/perf/gfd.rs"]
mod gfd;

use gfd::{op, Gfd, GFD_QWORDS};
use std::hint::black_box;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

fn drain(c: &mut Criterion) {
    let slots: Vec<[AtomicU64; GFD_QWORDS]> = (0..32).map(|_| std::array::from_fn(|_| AtomicU64::new(0))).collect();
    let g = Gfd { op: op::PUT | op::WITH_SIGNAL_INC, size: 4096, src_off: 64, src_handle: 0x5247_0500_0000_0011, dst_off: 128, dst_handle: 0x5247_0500_0000_0012, signal_id: 3, signal_value: 1, strong: true, ..Default::default() };
    let mut grp = c.benchmark_group("proxy_gfd");
    grp.throughput(Throughput::Elements(32));
    grp.bench_function("write_then_drain_32", |b| {
        b.iter(|| {
            for s in &slots {
                gfd::put(s, black_box(&g));
            }
            let mut n = 0;
            for s in &slots {
                let w = gfd::take(s, Duration::from_secs(1)).unwrap().unwrap();
                n += Gfd::decode(&w).size;
            }
            black_box(n)
        })
    });
    grp.finish();
}

criterion_group!(benches, drain);
criterion_main!(benches);
