//! Four ranks of the in-process plugin on the emulated NIC, connected, each
//! with one createContext and three registered windows (source, destination,
//! signal words): the world the lockstep and RCCL-caller tests run waves in.

#![allow(dead_code)]

use super::gin_flow::{register, Win};
use super::rccl_host::*;
use rccl_rust_gin::abi::*;
use rccl_rust_gin::device::{self as dev, DeviceError};
use std::ffi::c_void;

/// Four ranks of the in-process plugin on the emulated NIC; the test thread
/// acts for rank 0, whose windows and those of its peers it can read.
pub struct World {
    pub ranks: Vec<Rank>,
    pub gctx: Vec<*mut c_void>,
    pub h: Vec<usize>,
    pub src: Vec<Win>,
    pub dst: Vec<Win>,
    pub sig: Vec<Win>,
}

/// DC initiators per context when a test binary reruns on DC.
pub const RERUN_DCIS: u32 = 2;
pub const N: usize = 4;
pub const SLOT: usize = 64;

// SAFETY: opaque plugin tokens and host memory shared by the test's threads.
unsafe impl Sync for World {}
unsafe impl Send for World {}

pub fn world(depth: i32) -> World {
    let p = in_process_plugin();
    let ex = Exchange::new(N);
    let parts: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..N)
            .map(|rank| {
                let ex = ex.clone();
                s.spawn(move || {
                    let mut r = p.open_rank(rank as i32, N as i32);
                    let all = ex.allgather(rank, r.handle);
                    assert_eq!(p.connect(&mut r, &all), OK, "connect");
                    let mut cfg = default_config();
                    cfg.queue_depth = depth;
                    cfg.n_signals = 64;
                    cfg.n_counters = 64;
                    let (res, gctx, dh) = p.create_context(r.coll, &mut cfg);
                    assert_eq!(res, OK, "createContext (depth {depth})");
                    // SAFETY: a live device handle.
                    let h = unsafe { (*dh).handle } as usize;
                    let want = if write_mode_asked() { RUST_GIN_SIGNAL_MODE_WRITE } else { RUST_GIN_SIGNAL_MODE_ATOMIC };
                    assert_eq!(context_signal_mode(h as *const c_void, 0), want, "signal mode");
                    let dcis = if dc_asked() { RERUN_DCIS } else { 0 };
                    let family = family_asked().unwrap_or(RUST_GIN_FAMILY_MLX5);
                    assert_eq!(context_family(h as *const c_void, 0), family, "NIC family");
                    assert_eq!(context_dcis(h as *const c_void, 0), dcis, "DC initiators");
                    let src = register(p, r.coll, 64 * SLOT * 64);
                    let dst = register(p, r.coll, N * 64 * SLOT * 64);
                    let sig = register(p, r.coll, 64 * 8 + 8);
                    let bytes: Vec<u8> = (0..64 * SLOT * 64).map(|i| (rank * 37 + i * 11 + 1) as u8).collect();
                    src.buf.write(0, &bytes);
                    ex.barrier();
                    SendPart((r, gctx as usize, h, src, dst, sig))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut w = World { ranks: vec![], gctx: vec![], h: vec![], src: vec![], dst: vec![], sig: vec![] };
    for SendPart((r, g, h, src, dst, sig)) in parts {
        w.ranks.push(r);
        w.gctx.push(g as *mut c_void);
        w.h.push(h);
        w.src.push(src);
        w.dst.push(dst);
        w.sig.push(sig);
    }
    w
}

struct SendPart((Rank, usize, usize, Win, Win, Win));
// SAFETY: opaque tokens and host memory, used by one thread at a time.
unsafe impl Send for SendPart {}

impl Drop for World {
    fn drop(&mut self) {
        let p = in_process_plugin();
        for r in 0..N {
            for w in [&self.src[r], &self.dst[r], &self.sig[r]] {
                // SAFETY: valid tokens.
                unsafe { (p.v.dereg_mr_sym.unwrap())(self.ranks[r].coll, w.mh) };
            }
            p.call_ptr(p.v.destroy_context, self.gctx[r]);
            p.call_ptr(p.v.close_coll, self.ranks[r].coll);
            p.call_ptr(p.v.finalize, self.ranks[r].ctx);
        }
    }
}

impl World {
    pub fn handle(&self) -> *const c_void {
        self.h[0] as *const c_void
    }
    pub fn error(&self) -> Option<DeviceError> {
        // SAFETY: rank 0's device handle and its error record are live.
        unsafe {
            let h = &*(self.handle() as *const rust_gin_handle);
            DeviceError::from_record(&*(h.error as *const rust_gin_error))
        }
    }
    /// The state of every send queue of context `ctx` on rank 0: one per
    /// peer (RC) or per DC initiator (DC).
    pub fn sq_states(&self, ctx: u32) -> Vec<rust_gin_mlx5_sq_state> {
        // SAFETY: the handle's contexts, peers or DCIs and queue state are live.
        unsafe {
            let h = &*(self.handle() as *const rust_gin_handle);
            let c = &*((h.contexts as *const rust_gin_context).add(ctx as usize));
            let state = |sq: &rust_gin_mlx5_sq| std::ptr::read_volatile(sq.state as *const rust_gin_mlx5_sq_state);
            if c.n_dci > 0 {
                (0..c.n_dci as usize).map(|i| state(&*(c.dcis as *const rust_gin_mlx5_sq).add(i))).collect()
            } else if c.family != RUST_GIN_FAMILY_MLX5 {
                // bnxt_re, ionic: the family-neutral peer layout.
                let state = |sq: &rust_gin_nic_sq| std::ptr::read_volatile(sq.state as *const rust_gin_mlx5_sq_state);
                (0..N).map(|p| state(&(*(c.peers as *const rust_gin_nic_peer).add(p)).sq)).collect()
            } else {
                (0..N).map(|p| state(&(*(c.peers as *const rust_gin_peer).add(p)).sq)).collect()
            }
        }
    }
    /// The live state of rank 0's RC queue to `peer` on context `ctx`, any
    /// family (tests that set the protocol's words by hand).
    pub fn sq_state_ptr(&self, ctx: u32, peer: u32) -> *mut rust_gin_mlx5_sq_state {
        // SAFETY: the handle's contexts and peers are live; RC (no DCIs).
        unsafe {
            let h = &*(self.handle() as *const rust_gin_handle);
            let c = &*((h.contexts as *const rust_gin_context).add(ctx as usize));
            assert_eq!(c.n_dci, 0, "sq_state_ptr: an RC context");
            if c.family != RUST_GIN_FAMILY_MLX5 {
                (*(c.peers as *const rust_gin_nic_peer).add(peer as usize)).sq.state as *mut rust_gin_mlx5_sq_state
            } else {
                (*(c.peers as *const rust_gin_peer).add(peer as usize)).sq.state as *mut rust_gin_mlx5_sq_state
            }
        }
    }
    /// Forgets rank 0's recorded device error (the record keeps the first).
    pub fn clear_error(&self) {
        // SAFETY: rank 0's live error record; no device call runs meanwhile.
        unsafe {
            let h = &*(self.handle() as *const rust_gin_handle);
            let e = h.error as *mut rust_gin_error;
            std::ptr::write_volatile(e, rust_gin_error::default());
        }
    }
    /// Which of sq_states' queues carries rank 0's traffic to `peer`.
    pub fn queue_of(&self, peer: u32) -> u32 {
        match context_dcis(self.handle(), 0) {
            0 => peer,
            n => peer % n,
        }
    }
    pub fn doorbells(&self, ctx: u32) -> u64 {
        self.sq_states(ctx).iter().map(|s| s.doorbells).sum()
    }
    /// Batches owning waves published on context `ctx`'s queues without a
    /// ticket (rust_gin_put_exclusive).
    pub fn owned_batches(&self, ctx: u32) -> u64 {
        self.sq_states(ctx).iter().map(|s| s.owned_batches).sum()
    }
    pub fn ok(&self, what: &str, s: i32) {
        assert_eq!(s, 0, "{what}: {:?}", self.error().map(|e| e.to_string()));
    }
    /// Bytes of rank `to`'s destination window.
    pub fn dst_bytes(&self, to: usize, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.dst[to].buf.read(off, &mut v);
        v
    }
    pub fn src_bytes(&self, rank: usize, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.src[rank].buf.read(off, &mut v);
        v
    }
    pub fn signal(&self, rank: usize, ctx: u32, id: u32) -> u64 {
        // SAFETY: the host build of the device library, on a live handle.
        unsafe { dev::rust_gin_signal_read(self.h[rank] as *const c_void, ctx, id) }
    }
}

