//! Data-path figures of the mlx5 producer on the emulated NIC, each party
//! measured on its own:
//! - a bare loop of 64-byte stores, the ceiling for any producer here;
//! - the producer alone: the device code's host build posting batches of 64
//!   WRITEs into fresh 2^15-WQEBB queues, no NIC thread running;
//! - the emulated NIC alone: one NIC stepping a queue the producer filled
//!   beforehand, on this thread, nothing else running;
//! - both at once: the producer with the NIC's polling thread alongside, on
//!   a 2^10-WQEBB queue, so posting waits for the NIC (the NIC's pace);
//! - WQEBBs per put and per put-with-signal, doorbells and signalled CQEs
//!   per batch of 64 requests (NIC counters).

use super::cpu::thread_cpu_ns;
use rccl_rust_gin::abi::rust_gin_mlx5_request;
use rccl_rust_gin::emu::{Access, EmuNic, EmuQp, Fabric, NicConfig};
use rccl_rust_gin::error::{Error, Result};
use rccl_rust_gin::gpu::{Allocator, HostMemory, Object, RingHome};
use rccl_rust_gin::mlx5::queue::QueueMem;
use rccl_rust_gin::mlx5::sq::{new_error_record, SendQueue};
use rccl_rust_gin::mlx5::wire::opcode;
use std::time::{Duration, Instant};

#[derive(Clone, Debug, Default)]
pub struct Figures {
    pub wqebbs_per_put: f64,
    pub wqebbs_per_put_signal: f64,
    pub doorbells_per_batch64: f64,
    pub cqes_per_batch64: f64,
    /// Millions of 64-byte stores per second, one thread.
    pub store_loop_m_per_s: f64,
    /// Millions of WQEs per second one thread posts, no NIC running.
    pub producer_mwqe_per_s: f64,
    /// Producer CPU per WQE, ns.
    pub producer_cpu_ns_per_wqe: f64,
    /// Millions of 8-byte WRITEs per second one NIC consumes (fetch,
    /// execute as requester and, in loopback, as responder, complete).
    pub nic_mwqe_per_s: f64,
    /// NIC CPU per WRITE, ns.
    pub nic_cpu_ns_per_wqe: f64,
    /// Producer and NIC thread together on a 2^10 queue: WQEs per second
    /// through the whole pipeline.
    pub pipeline_mwqe_per_s: f64,
}

fn err<E: std::fmt::Display>(e: E) -> Error {
    Error::Internal(e.to_string())
}

/// Millions of 64-byte stores per second into a 2 MiB ring, for `min`.
fn store_loop(min: Duration) -> f64 {
    let mut ring = vec![[0u64; 8]; 1 << 15];
    let mut n = 0u64;
    let t = Instant::now();
    while t.elapsed() < min {
        for _ in 0..(1 << 15) {
            let slot = &mut ring[(n as usize) & ((1 << 15) - 1)];
            for (i, w) in slot.iter_mut().enumerate() {
                // SAFETY: a valid, aligned &mut u64; volatile keeps the store.
                unsafe { std::ptr::write_volatile(w, n + i as u64) };
            }
            n += 1;
        }
    }
    n as f64 / t.elapsed().as_secs_f64() / 1e6
}

pub fn run(min: Duration) -> Result<Figures> {
    let fabric = Fabric::threads();
    let nic = EmuNic::new(&fabric, NicConfig { name: "datapath".into(), ..Default::default() }).map_err(err)?;
    let pd = nic.alloc_pd();
    let buf = HostMemory.alloc(1 << 16, 4096, Object::WindowData)?;
    // SAFETY: buf outlives the NIC's use of it (both dropped at the end).
    let mr = unsafe { nic.reg_mr(pd, buf.host_addr().unwrap_or(0), 1 << 16, Access::all()) }.map_err(err)?;
    let error = new_error_record(&HostMemory)?;
    let queue = |log: u32| -> Result<(EmuQp, SendQueue)> {
        let qp = EmuQp::create(&nic, pd, QueueMem::new(&HostMemory, log, RingHome::Host)?).map_err(err)?;
        qp.connect(nic.node(), qp.qpn).map_err(err)?;
        let sq = SendQueue::new(&HostMemory, &qp.descriptor(0, error.dev_addr(), 30_000_000_000))?;
        Ok((qp, sq))
    };
    let base = buf.dev_addr();
    let write = |i: u64, len: u32| rust_gin_mlx5_request {
        opcode: opcode::RDMA_WRITE,
        length: len,
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
    let mut f = Figures { store_loop_m_per_s: store_loop(min), ..Default::default() };

    // The producer alone, then the NIC alone on what it posted: rounds of
    // 500 batches of 64 8-byte WRITEs into a fresh 2^15 queue (never short
    // of credit), each drained by stepping the NIC on this thread.
    let batch: Vec<_> = (0..64).map(|i| write(i, 8)).collect();
    let (mut posted, mut post_secs, mut post_cpu) = (0u64, 0.0, 0u64);
    let (mut consumed, mut nic_secs, mut nic_cpu) = (0u64, 0.0, 0u64);
    while post_secs < min.as_secs_f64() || nic_secs < min.as_secs_f64() {
        let (qp, sq) = queue(15)?;
        let st = |e| Error::Remote(format!("posting: {e:?} {:?}", sq.error()));
        let (c, t) = (thread_cpu_ns(), Instant::now());
        for _ in 0..500 {
            sq.post(&batch).map_err(st)?;
        }
        post_secs += t.elapsed().as_secs_f64();
        post_cpu += thread_cpu_ns() - c;
        posted += 500 * 64;
        let before = nic.counters();
        let (c, t) = (thread_cpu_ns(), Instant::now());
        while nic.counters().since(&before).writes < 500 * 64 {
            if !nic.step() && t.elapsed() > Duration::from_secs(30) {
                return Err(Error::Timeout("datapath: the NIC did not consume the queue".into()));
            }
        }
        while nic.step() {}
        nic_secs += t.elapsed().as_secs_f64();
        nic_cpu += thread_cpu_ns() - c;
        consumed += 500 * 64;
        // Dropped without a quiet: its completions were never consumed and
        // quiet would wait for a NIC that is not running.
        drop((sq, qp));
    }
    f.producer_mwqe_per_s = posted as f64 / post_secs / 1e6;
    f.producer_cpu_ns_per_wqe = post_cpu as f64 / posted as f64;
    f.nic_mwqe_per_s = consumed as f64 / nic_secs / 1e6;
    f.nic_cpu_ns_per_wqe = nic_cpu as f64 / consumed as f64;

    // Both at once, and the NIC counters per batch.
    let (_qp, sq) = queue(10)?;
    let st = |e| Error::Remote(format!("posting: {e:?} {:?}", sq.error()));
    nic.start_polling();
    let c0 = nic.counters();
    let t = Instant::now();
    let mut batches = 0u64;
    while t.elapsed() < min {
        let reqs: Vec<_> = (0..64).map(|i| write(batches * 64 + i, 64)).collect();
        sq.post(&reqs).map_err(st)?;
        batches += 1;
    }
    sq.quiet().map_err(st)?;
    f.pipeline_mwqe_per_s = (batches * 64) as f64 / t.elapsed().as_secs_f64() / 1e6;
    let d = nic.counters().since(&c0);
    // Counted as the NIC read them; quiet may add one NOP at the very end.
    f.wqebbs_per_put = (d.wqebbs_read - d.nops) as f64 / (batches * 64) as f64;
    f.doorbells_per_batch64 = d.doorbells as f64 / batches as f64;
    f.cqes_per_batch64 = d.cqes_written as f64 / batches as f64;
    // Puts with a signal: a WRITE and a fetch-and-add each, 32 per batch of 64 requests.
    let c2 = nic.counters();
    for b in 0..200 {
        let reqs: Vec<_> = (0..32).flat_map(|i| [write(b * 32 + i, 64), signal]).collect();
        sq.post(&reqs).map_err(st)?;
    }
    sq.quiet().map_err(st)?;
    let d = nic.counters().since(&c2);
    f.wqebbs_per_put_signal = (d.wqebbs_read - d.nops) as f64 / (200 * 32) as f64;
    nic.stop_polling();
    Ok(f)
}
