//! Symmetric registrations of the RMA plugin (regMrSym): a GIN window
//! (local registration plus every rank's base, rkey and size from the
//! allgather), seen from the host that posts the requests.

use crate::error::{Error, Result};
use crate::gin::window::Window;

pub struct RmaMem {
    pub window: Window,
}

/// Where a request goes in a peer's registration.
#[derive(Clone, Copy, Debug)]
pub struct Remote {
    pub addr: u64,
    pub rkey: u32,
}

impl RmaMem {
    pub fn new(window: Window) -> RmaMem {
        RmaMem { window }
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
        Ok(Remote { addr: r.base + off, rkey: r.rkey })
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
