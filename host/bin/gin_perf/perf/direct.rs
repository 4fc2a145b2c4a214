//! The device-initiated path: requesters call the device library (its host
//! build stands in for the kernel) with the backend's device handle; no host
//! thread sits between them and the NIC. With `lane_contexts`, lane `l`
//! posts on context `l` (its own send queue per peer); otherwise every lane
//! posts on context 0, as the lanes of one wave do.

use super::world::Rank;
use super::{Op, Path};
use rccl_rust_gin::abi::{rust_gin_signal, RUST_GIN_SIGNAL_INDEXED, RUST_GIN_SIGNAL_NONE, RUST_GIN_SIGNAL_OP_INC};
use rccl_rust_gin::device::{self, DeviceStatus};
use rccl_rust_gin::nic::CounterSnapshot;
use rccl_rust_gin::error::{Error, Result};

pub struct Direct {
    pub ranks: Vec<Rank>,
    pub lane_contexts: bool,
}

impl Direct {
    fn context(&self, lane: usize) -> u32 {
        if self.lane_contexts {
            lane as u32
        } else {
            0
        }
    }
}

fn check(what: &str, code: i32, r: &Rank) -> Result<()> {
    DeviceStatus::check(code).map_err(|s| {
        let detail = r.ctx.last_error().map(|(e, _)| e.to_string()).unwrap_or_default();
        Error::Remote(format!("{what}: {s:?} {detail}"))
    })
}

impl Path for Direct {
    fn name(&self) -> &'static str {
        "direct"
    }

    fn post(&self, from: usize, lane: usize, to: usize, op: Op, off: u64, bytes: u64) -> Result<()> {
        let r = &self.ranks[from];
        let h = r.handle();
        let signal = rust_gin_signal {
            type_: if matches!(op, Op::PutSignal | Op::Signal) { RUST_GIN_SIGNAL_INDEXED } else { RUST_GIN_SIGNAL_NONE },
            op: RUST_GIN_SIGNAL_OP_INC,
            value: 0,
            id: 0,
            window: std::ptr::null(),
            offset: 0,
        };
        let c = self.context(lane);
        let (src, dst) = (r.src.gin_handle() as *const _, r.dst.gin_handle() as *const _);
        // SAFETY: the handle and windows are live for the world's lifetime.
        let code = unsafe {
            match op {
                Op::Put | Op::PutSignal => device::rust_gin_put(h, c, to as u32, dst, off, src, off, bytes, signal, 0, 0, 0),
                Op::Signal => device::rust_gin_signal_peer(h, c, to as u32, signal, 0),
                Op::Get => device::rust_gin_get(h, c, to as u32, src, off, dst, off, bytes, 0),
            }
        };
        check(op.name(), code, r)
    }

    fn flush(&self, from: usize, lane: usize) -> Result<()> {
        let r = &self.ranks[from];
        // SAFETY: as in post.
        check("flush", unsafe { device::rust_gin_flush(r.handle(), self.context(lane), 0, 1, std::ptr::null(), 0) }, r)
    }

    fn flush_lanes(&self, from: usize, lane: usize, lanes: usize) -> Result<()> {
        if self.lane_contexts {
            return self.flush(from, lane);
        }
        // The lanes of a wave share the flush: lane l flushes peers l, l + lanes, ...
        let r = &self.ranks[from];
        // SAFETY: as in post.
        check("flush", unsafe { device::rust_gin_flush(r.handle(), 0, lane as u32, lanes as u32, std::ptr::null(), 0) }, r)
    }

    fn wait_signal(&self, rank: usize, least: u64) -> Result<()> {
        let r = &self.ranks[rank];
        // SAFETY: as in post.
        check("signal wait", unsafe { device::rust_gin_signal_wait(r.handle(), 0, 0, least, std::ptr::null(), 0) }, r)
    }

    fn signal_value(&self, rank: usize) -> u64 {
        // SAFETY: as in post.
        unsafe { device::rust_gin_signal_read(self.ranks[rank].handle(), 0, 0) }
    }

    fn counters(&self, rank: usize) -> Option<CounterSnapshot> {
        self.ranks[rank].counters()
    }
}
