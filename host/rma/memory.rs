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
    /// Offsets count from the address regMrSym was given, which is the start
    /// of RCCL's symmetric allocation, not of a user window inside it: RCCL
    /// adds the window's offset (NVIDIA/nccl@1e47331c
    /// src/rma/rma_proxy_launch.cc:31-34; the GIN proxy's kernels,
    /// src/include/nccl_device/impl/gin__funcs.h:23). `arg` names the offset
    /// argument for the error.
    pub fn local(&self, off: u64, len: u64, what: &str, arg: &str) -> Result<(u64, u32)> {
        check_range(off, len, self.window.size, what, arg, "this rank's")?;
        Ok((self.window.local_addr() + off, self.window.lkey()))
    }

    /// [off, off+len) of rank `rank`'s registration, counted from its start
    /// as in [`RmaMem::local`].
    pub fn remote(&self, rank: u32, off: u64, len: u64, what: &str, arg: &str) -> Result<Remote> {
        let r = self
            .window
            .remote(rank)
            .ok_or_else(|| Error::InvalidArgument(format!("rank {rank} out of range for {what}")))?;
        check_range(off, len, r.size, what, arg, &format!("rank {rank}'s"))?;
        Ok(Remote { addr: r.base + off, rkey: r.rkey })
    }
}

fn check_range(off: u64, len: u64, size: u64, what: &str, arg: &str, whose: &str) -> Result<()> {
    match off.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::InvalidArgument(format!(
            "{what}: {arg} {off} + size {len} is past the end of {whose} registration ({size} bytes)"
        ))),
    }
}
