//! The two ways the workload's puts and signals reach the NIC, for N ranks:
//! the device library called straight (direct), and the proxy model (RCCL's
//! type-2 GIN over our RMA plugin, perf/proxy.rs).

use crate::perf::gfd::{op, Gfd};
use crate::perf::proxy::Proxy;
use crate::perf::world::Rank;
use rccl_rust_gin::abi::{rust_gin_signal, RUST_GIN_FLAG_AGGREGATE, RUST_GIN_SIGNAL_INDEXED, RUST_GIN_SIGNAL_NONE, RUST_GIN_SIGNAL_OP_ADD};
use rccl_rust_gin::device::{self, DeviceStatus};
use rccl_rust_gin::error::{Error, Result};
use rccl_rust_gin::nic::CounterSnapshot;

/// A rank's two windows: the source (its tokens, and in high-throughput
/// mode their packed copies) and the destination (received tokens, then
/// combine results).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Win {
    Src,
    Dst,
}

pub trait Fabric: Send + Sync {
    fn name(&self) -> &'static str;
    /// A put of `bytes` from `from`'s window `src` at `src_off` to `to`'s
    /// destination window at `dst_off`; with `signal` (id, addend), the
    /// target's signal `id` is added to once the data is there.
    fn put(&self, from: usize, to: usize, src: Win, src_off: u64, dst_off: u64, bytes: u64, signal: Option<(u32, u64)>) -> Result<()>;
    /// Puts without signals from `from` to `to`: (source window, source
    /// offset, destination offset, bytes) each, in order.
    fn put_many(&self, from: usize, to: usize, items: &[(Win, u64, u64, u64)]) -> Result<()> {
        for &(w, s, d, b) in items {
            self.put(from, to, w, s, d, b, None)?;
        }
        Ok(())
    }
    /// Adds `add` to signal `id` of `to`, ordered after `from`'s earlier puts to it.
    fn signal(&self, from: usize, to: usize, id: u32, add: u64) -> Result<()>;
    /// Waits (bounded) until signal `id` of `rank` reaches `least`; returns its value.
    fn wait_signal(&self, rank: usize, id: u32, least: u64) -> Result<u64>;
    fn read_signal(&self, rank: usize, id: u32) -> u64;
    /// Waits (bounded) until everything `from` posted has completed.
    fn flush(&self, from: usize) -> Result<()>;
    /// Host addresses of `rank`'s source and destination windows.
    fn host(&self, rank: usize) -> (usize, usize);
    fn counters(&self, rank: usize) -> Option<CounterSnapshot>;
    /// Posts so far that found their queue full and waited (the proxy's
    /// per-peer descriptor queues; 0 where not counted).
    fn queue_full_waits(&self) -> u64 {
        0
    }
}

pub struct Direct {
    pub ranks: Vec<Rank>,
    /// Lanes of the lockstep wave that posts a peer's puts (1: one thread
    /// posts each put on its own, a doorbell each).
    pub lanes: usize,
    /// Post a peer's token puts with RUST_GIN_FLAG_AGGREGATE (RCCL's
    /// ncclGinOptFlagsAggregateRequests): published without a doorbell;
    /// the signal that follows rings once for all of them.
    pub aggregate: bool,
}

impl Direct {
    fn put_flags(&self, from: usize, to: usize, src: Win, src_off: u64, dst_off: u64, bytes: u64, signal: Option<(u32, u64)>, flags: u32) -> Result<()> {
        let r = &self.ranks[from];
        let s = match src {
            Win::Src => r.src.gin_handle() as *const _,
            Win::Dst => r.dst.gin_handle() as *const _,
        };
        let d = r.dst.gin_handle() as *const _;
        // SAFETY: the handle and windows live as long as the world.
        let code = unsafe { device::rust_gin_put(r.handle(), 0, to as u32, d, dst_off, s, src_off, bytes, sig(signal), 0, 0, flags) };
        check("put", code, r)
    }
}

fn check(what: &str, code: i32, r: &Rank) -> Result<()> {
    DeviceStatus::check(code).map_err(|s| {
        let detail = r.ctx.last_error().map(|(e, _)| e.to_string()).unwrap_or_default();
        Error::Remote(format!("{what}: {s:?} {detail}"))
    })
}

fn sig(signal: Option<(u32, u64)>) -> rust_gin_signal {
    rust_gin_signal {
        type_: if signal.is_some() { RUST_GIN_SIGNAL_INDEXED } else { RUST_GIN_SIGNAL_NONE },
        op: RUST_GIN_SIGNAL_OP_ADD,
        value: signal.map_or(0, |s| s.1),
        id: signal.map_or(0, |s| s.0 as u64),
        window: std::ptr::null(),
        offset: 0,
    }
}

impl Fabric for Direct {
    fn name(&self) -> &'static str {
        "direct"
    }

    fn put(&self, from: usize, to: usize, src: Win, src_off: u64, dst_off: u64, bytes: u64, signal: Option<(u32, u64)>) -> Result<()> {
        self.put_flags(from, to, src, src_off, dst_off, bytes, signal, 0)
    }

    /// With lanes > 1, up to `lanes` puts at a time as one lockstep wave
    /// (lane l posts item l), as the lanes of a GPU wave post consecutive
    /// tokens for one peer: one ticket and one doorbell per wave-wide post.
    fn put_many(&self, from: usize, to: usize, items: &[(Win, u64, u64, u64)]) -> Result<()> {
        if self.lanes <= 1 {
            let flags = if self.aggregate { RUST_GIN_FLAG_AGGREGATE } else { 0 };
            for &(w, s, d, b) in items {
                self.put_flags(from, to, w, s, d, b, None, flags)?;
            }
            return Ok(());
        }
        for batch in items.chunks(self.lanes.min(64)) {
            let first_error = std::sync::Mutex::new(None);
            let lane = |l: u32| {
                let (w, s, d, b) = batch[l as usize];
                if let Err(e) = self.put(from, to, w, s, d, b, None) {
                    first_error.lock().unwrap_or_else(|x| x.into_inner()).get_or_insert(e);
                }
            };
            let model_errors = crate::perf::wave(batch.len(), &lane);
            if let Some(e) = first_error.into_inner().unwrap_or_else(|x| x.into_inner()) {
                return Err(e);
            }
            if model_errors != 0 {
                return Err(Error::Internal(format!("the wave runtime reported {model_errors} model errors")));
            }
        }
        Ok(())
    }

    fn signal(&self, from: usize, to: usize, id: u32, add: u64) -> Result<()> {
        let r = &self.ranks[from];
        // SAFETY: as in put.
        let code = unsafe { device::rust_gin_signal_peer(r.handle(), 0, to as u32, sig(Some((id, add))), 0) };
        check("signal", code, r)
    }

    fn wait_signal(&self, rank: usize, id: u32, least: u64) -> Result<u64> {
        let r = &self.ranks[rank];
        // SAFETY: as in put.
        let code = unsafe { device::rust_gin_signal_wait(r.handle(), 0, id, least, std::ptr::null(), 0) };
        check(&format!("rank {rank} waiting for signal {id} to reach {least}"), code, r)?;
        Ok(self.read_signal(rank, id))
    }

    fn read_signal(&self, rank: usize, id: u32) -> u64 {
        // SAFETY: as in put.
        unsafe { device::rust_gin_signal_read(self.ranks[rank].handle(), 0, id) }
    }

    fn flush(&self, from: usize) -> Result<()> {
        let r = &self.ranks[from];
        // SAFETY: as in put.
        check("flush", unsafe { device::rust_gin_flush(r.handle(), 0, 0, 1, std::ptr::null(), 0) }, r)
    }

    fn host(&self, rank: usize) -> (usize, usize) {
        self.ranks[rank].host_addrs()
    }

    fn counters(&self, rank: usize) -> Option<CounterSnapshot> {
        self.ranks[rank].counters()
    }
}

/// The proxy model: each put or signal is a 128-byte descriptor in the
/// rank's queue to that peer, which the rank's proxy thread turns into an
/// RMA-plugin call (iput, iputSignal).
pub struct ProxyFabric {
    pub proxy: Proxy,
}

impl Fabric for ProxyFabric {
    fn name(&self) -> &'static str {
        "proxy"
    }

    fn put(&self, from: usize, to: usize, src: Win, src_off: u64, dst_off: u64, bytes: u64, signal: Option<(u32, u64)>) -> Result<()> {
        let (s, d) = self.proxy.window_handles(from);
        let mut g = Gfd {
            op: op::PUT,
            size: bytes,
            src_off,
            src_handle: if src == Win::Src { s } else { d },
            dst_off,
            dst_handle: d,
            ..Default::default()
        };
        if let Some((id, add)) = signal {
            g.op |= op::WITH_SIGNAL_ADD;
            g.signal_id = id;
            g.signal_value = add;
            g.strong = true;
        }
        self.proxy.post_gfd(from, to, &g)
    }

    fn signal(&self, from: usize, to: usize, id: u32, add: u64) -> Result<()> {
        let (s, d) = self.proxy.window_handles(from);
        let g = Gfd {
            op: op::PUT | op::WITH_SIGNAL_ADD,
            size: 0,
            src_handle: s,
            dst_handle: d,
            signal_id: id,
            signal_value: add,
            strong: true,
            ..Default::default()
        };
        self.proxy.post_gfd(from, to, &g)
    }

    fn wait_signal(&self, rank: usize, id: u32, least: u64) -> Result<u64> {
        self.proxy.wait_signal_id(rank, id as usize, least)
    }

    fn read_signal(&self, rank: usize, id: u32) -> u64 {
        self.proxy.signal(rank, id as usize)
    }

    fn flush(&self, from: usize) -> Result<()> {
        self.proxy.flush_rank(from)
    }

    fn host(&self, rank: usize) -> (usize, usize) {
        self.proxy.host_addrs(rank)
    }

    fn counters(&self, rank: usize) -> Option<CounterSnapshot> {
        crate::perf::Path::counters(&self.proxy, rank)
    }

    fn queue_full_waits(&self) -> u64 {
        self.proxy.full_waits()
    }
}
