//! Symmetric registrations of the RMA plugin (regMrSym): a GIN window
//! (local registration plus every rank's base, rkey and size from the
//! allgather), seen from the host that posts the requests.

use crate::error::{Error, Result};
use crate::gin::window::Window;
use std::sync::atomic::{AtomicU32, Ordering};

pub struct RmaMem {
    pub window: Window,
    /// Every rank's rkey, copied from the window; tests may corrupt one
    /// (see [`super::testing::corrupt_peer_rkey`]) to provoke a NIC error.
    rkeys: Vec<AtomicU32>,
}

/// Where a request goes in a peer's registration.
#[derive(Clone, Copy, Debug)]
pub struct Remote {
    pub addr: u64,
    pub rkey: u32,
}

impl RmaMem {
    pub fn new(window: Window) -> RmaMem {
        let n = window.coll.nranks;
        let rkeys = (0..n).map(|p| AtomicU32::new(window.remote(p).map(|r| r.rkey).unwrap_or(0))).collect();
        RmaMem { window, rkeys }
    }

    /// [off, off+len) of the local registration: its address and lkey.
    pub fn local(&self, off: u64, len: u64, what: &str) -> Result<(u64, u32)> {
        check_range(off, len, self.window.size, what, "this rank's")?;
        Ok((self.window.local_addr() + off, self.window.lkey()))
    }

    /// [off, off+len) of rank `rank`'s registration.
    pub fn remote(&self, rank: u32, off: u64, len: u64, what: &str) -> Result<Remote> {
        let r = self
            .window
            .remote(rank)
            .ok_or_else(|| Error::InvalidArgument(format!("rank {rank} out of range for {what}")))?;
        check_range(off, len, r.size, what, &format!("rank {rank}'s"))?;
        Ok(Remote { addr: r.base + off, rkey: self.rkeys[rank as usize].load(Ordering::Relaxed) })
    }

    pub(crate) fn corrupt_rkey(&self, rank: u32, xor: u32) -> Result<()> {
        let k =
            self.rkeys.get(rank as usize).ok_or_else(|| Error::InvalidArgument(format!("rank {rank} out of range")))?;
        k.fetch_xor(xor, Ordering::Relaxed);
        Ok(())
    }
}

fn check_range(off: u64, len: u64, size: u64, what: &str, whose: &str) -> Result<()> {
    match off.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::InvalidArgument(format!(
            "{what}: offset {off} + size {len} is past the end of {whose} registration ({size} bytes)"
        ))),
    }
}
