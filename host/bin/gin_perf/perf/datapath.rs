//! Data-path figures of the mlx5 producer on the emulated NIC: WQEBBs per
//! put and per put-with-signal, doorbells and signalled CQEs per batch of 64
//! requests, and the posting rate of the device code's host build.

use rccl_rust_gin::abi::rust_gin_mlx5_request;
use rccl_rust_gin::emu::{Access, EmuNic, EmuQp, Fabric, NicConfig};
use rccl_rust_gin::error::{Error, Result};
use rccl_rust_gin::gpu::{Allocator, HostMemory, Object, RingHome};
use rccl_rust_gin::mlx5::queue::QueueMem;
use rccl_rust_gin::mlx5::sq::{new_error_record, SendQueue};
use rccl_rust_gin::mlx5::wire::opcode;
use std::time::Instant;

#[derive(Clone, Debug, Default)]
pub struct Figures {
    pub wqebbs_per_put: f64,
    pub wqebbs_per_put_signal: f64,
    pub doorbells_per_batch64: f64,
    pub cqes_per_batch64: f64,
    /// Millions of WQEs per second one thread posts (NIC consuming alongside).
    pub post_mwqe_per_s: f64,
}

fn err<E: std::fmt::Display>(e: E) -> Error {
    Error::Internal(e.to_string())
}

pub fn run(batches: u64) -> Result<Figures> {
    let fabric = Fabric::threads();
    let nic = EmuNic::new(&fabric, NicConfig { name: "datapath".into(), ..Default::default() }).map_err(err)?;
    let pd = nic.alloc_pd();
    let buf = HostMemory.alloc(1 << 16, 4096, Object::WindowData)?;
    // SAFETY: buf outlives the NIC's use of it (both dropped at the end).
    let mr = unsafe { nic.reg_mr(pd, buf.host_addr().unwrap_or(0), 1 << 16, Access::all()) }.map_err(err)?;
    let qp = EmuQp::create(&nic, pd, QueueMem::new(&HostMemory, 10, RingHome::Host)?).map_err(err)?;
    qp.connect(nic.node(), qp.qpn).map_err(err)?;
    let error = new_error_record(&HostMemory)?;
    let sq = SendQueue::new(&HostMemory, &qp.descriptor(0, error.dev_addr(), 30_000_000_000))?;
    nic.start_polling();
    let base = buf.dev_addr();
    let write = |i: u64| rust_gin_mlx5_request {
        opcode: opcode::RDMA_WRITE,
        length: 64,
        lkey: mr.lkey,
        rkey: mr.rkey,
        laddr: base + (i % 256) * 64,
        raddr: base + 16384 + (i % 256) * 64,
        ..Default::default()
    };
    let signal = rust_gin_mlx5_request {
        opcode: opcode::ATOMIC_FA,
        length: 8,
        lkey: mr.lkey,
        rkey: mr.rkey,
        laddr: base + 65528,
        raddr: base + 65520,
        operand0: 1,
        ..Default::default()
    };
    let st = |e| Error::Remote(format!("posting: {e:?} {:?}", sq.error()));

    // Puts in batches of 64.
    let c0 = nic.counters();
    let t = Instant::now();
    for b in 0..batches {
        let reqs: Vec<_> = (0..64).map(|i| write(b * 64 + i)).collect();
        sq.post(&reqs).map_err(st)?;
    }
    let post_secs = t.elapsed().as_secs_f64();
    sq.quiet().map_err(st)?;
    let c1 = nic.counters();
    let d = c1.since(&c0);
    let puts = (batches * 64) as f64;
    let mut f = Figures {
        // Counted as the NIC read them; quiet may add one NOP at the very end.
        wqebbs_per_put: (d.wqebbs_read - d.nops) as f64 / puts,
        doorbells_per_batch64: d.doorbells as f64 / batches as f64,
        cqes_per_batch64: d.cqes_written as f64 / batches as f64,
        post_mwqe_per_s: puts / post_secs / 1e6,
        ..Default::default()
    };
    // Puts with a signal: a WRITE and a fetch-and-add each, 32 per batch of 64 requests.
    let c2 = nic.counters();
    for b in 0..batches {
        let reqs: Vec<_> = (0..32).flat_map(|i| [write(b * 32 + i), signal]).collect();
        sq.post(&reqs).map_err(st)?;
    }
    sq.quiet().map_err(st)?;
    let d = nic.counters().since(&c2);
    f.wqebbs_per_put_signal = (d.wqebbs_read - d.nops) as f64 / (batches * 32) as f64;
    nic.stop_polling();
    Ok(f)
}
