//! RCCL's 128-byte GIN proxy descriptor (GFD, version 2): 16 qwords, each with
//! its own flag in bit 0, so the proxy can tell a whole descriptor from a torn
//! one without a separate flag. Bit positions as in
//! nccl_device/gin/proxy/gin_proxy_device_host_common.h (docs/proxy-model.md
//! cites them); only what the proxy model needs is encoded.

// A format description: the proxy model, its test and its bench each use
// part of it.
#![allow(dead_code)]

pub const GFD_QWORDS: usize = 16;
pub const GFD_BYTES: usize = 128;
pub const GFD_VERSION: u64 = 2;

/// ncclGinProxyOp_t bits (headerExt.op).
pub mod op {
    pub const PUT: u16 = 1 << 0;
    pub const WITH_INLINE: u16 = 1 << 1;
    pub const WITH_COUNTER: u16 = 1 << 2;
    pub const WITH_SIGNAL_INC: u16 = 1 << 3;
    pub const WITH_SIGNAL_ADD: u16 = 1 << 4;
    pub const VA_SIGNAL: u16 = 1 << 5;
    pub const GET: u16 = 1 << 6;
    pub const FLUSH: u16 = 1 << 7;
}

const HEADER: usize = 0;
const SRC_OFF: usize = 1;
const SRC_HANDLE: usize = 2;
const DST_OFF: usize = 3;
const DST_HANDLE: usize = 4;
const COMPLETION: usize = 5;
const SIGNAL_VAL: usize = 6;
const HEADER_EXT: usize = 7;

/// A decoded descriptor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gfd {
    pub op: u16,
    pub size: u64,
    pub src_off: u64,
    pub src_handle: u64,
    pub dst_off: u64,
    pub dst_handle: u64,
    pub counter_id: u32,
    pub signal_id: u32,
    pub signal_value: u64,
    pub strong: bool,
}

impl Gfd {
    /// The 16 qwords, every one with its flag bit set.
    pub fn encode(&self) -> [u64; GFD_QWORDS] {
        let mut q = [1u64; GFD_QWORDS];
        q[HEADER] = 1 | (GFD_VERSION << 1) | (self.size << 7);
        q[SRC_OFF] = 1 | (self.src_off << 1);
        q[SRC_HANDLE] = 1 | (self.src_handle << 1);
        q[DST_OFF] = 1 | (self.dst_off << 1);
        q[DST_HANDLE] = 1 | (self.dst_handle << 1);
        // completion: flag:1, counterId:23 (bits 1..24), signalId:24 (bits 24..48), signalValLow:16 (48..64)
        q[COMPLETION] = 1
            | ((self.counter_id as u64 & 0x7f_ffff) << 1)
            | ((self.signal_id as u64 & 0xff_ffff) << 24)
            | ((self.signal_value & 0xffff) << 48);
        // signalVal: flag:1, isStrongSignal:1, resv:6, signalValLow2:16 (8..24), signalValHigh:32 (24..56)
        q[SIGNAL_VAL] = 1 | ((self.strong as u64) << 1) | (((self.signal_value >> 16) & 0xffff) << 8) | ((self.signal_value >> 32) << 24);
        // headerExt: flag:1, resv:7, op:16 (8..24)
        q[HEADER_EXT] = 1 | ((self.op as u64) << 8);
        q
    }

    pub fn decode(q: &[u64; GFD_QWORDS]) -> Gfd {
        let c = q[COMPLETION];
        let s = q[SIGNAL_VAL];
        Gfd {
            op: ((q[HEADER_EXT] >> 8) & 0xffff) as u16,
            size: q[HEADER] >> 7,
            src_off: q[SRC_OFF] >> 1,
            src_handle: q[SRC_HANDLE] >> 1,
            dst_off: q[DST_OFF] >> 1,
            dst_handle: q[DST_HANDLE] >> 1,
            counter_id: ((c >> 1) & 0x7f_ffff) as u32,
            signal_id: ((c >> 24) & 0xff_ffff) as u32,
            signal_value: (c >> 48) | (((s >> 8) & 0xffff) << 16) | (((s >> 24) & 0xffff_ffff) << 32),
            strong: (s >> 1) & 1 == 1,
        }
    }

    pub fn version(q: &[u64; GFD_QWORDS]) -> u64 {
        (q[HEADER] >> 1) & 0xf
    }

    /// RCCL's rule: exactly one signal bit means that signal; none or both
    /// means a plain put.
    pub fn signal_op(&self) -> Option<u32> {
        let inc = self.op & op::WITH_SIGNAL_INC != 0;
        let add = self.op & op::WITH_SIGNAL_ADD != 0;
        match (inc, add) {
            (true, false) => Some(rccl_rust_gin::ffi::nccl::NCCL_NET_SIGNAL_OP_INC),
            (false, true) => Some(rccl_rust_gin::ffi::nccl::NCCL_NET_SIGNAL_OP_ADD),
            _ => None,
        }
    }
}

/// What a proxy does with one queue slot: if qword 0 says a descriptor is
/// there, waits (bounded) for all 16 flags, copies the words and clears the
/// slot for the next round. None when the slot is empty; Err when a torn
/// descriptor never completed.
pub fn take(slot: &[std::sync::atomic::AtomicU64; GFD_QWORDS], limit: std::time::Duration) -> Result<Option<[u64; GFD_QWORDS]>, String> {
    use std::sync::atomic::Ordering;
    if slot[0].load(Ordering::Acquire) & 1 == 0 {
        return Ok(None);
    }
    let mut words = [0u64; GFD_QWORDS];
    for (k, w) in words.iter_mut().enumerate() {
        *w = slot[k].load(Ordering::Acquire);
        if *w & 1 == 1 {
            continue;
        }
        // Torn so far: wait, and only now read the clock.
        let t = std::time::Instant::now();
        loop {
            *w = slot[k].load(Ordering::Acquire);
            if *w & 1 == 1 {
                break;
            }
            if t.elapsed() > limit {
                return Err(format!("a descriptor stayed torn (qword {k} never flagged)"));
            }
            std::hint::spin_loop();
        }
    }
    for w in slot.iter() {
        w.store(0, Ordering::Release);
    }
    Ok(Some(words))
}

/// What a requester does: writes the 16 flagged qwords, qword 0 last.
pub fn put(slot: &[std::sync::atomic::AtomicU64; GFD_QWORDS], g: &Gfd) {
    let words = g.encode();
    for k in (0..GFD_QWORDS).rev() {
        slot[k].store(words[k], std::sync::atomic::Ordering::Release);
    }
}
