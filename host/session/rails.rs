//! Several NICs per context set (rails; docs/architecture.md, "Rails").
//!
//! A comm holds one opened NIC per rail. Queue pairs go to one rail each
//! (context c on rail c mod R: [`rail_of`]); memory a kernel addresses is
//! registered on every rail. [`RailSet`] is the comm's NIC as the code that
//! does not care about rails sees it (windows, the RMA plugin): it registers
//! on every rail, each NIC with its own keys, which a window descriptor
//! carries per rail (device ABI version 2: a context uses its rail's keys).

use crate::config::ProviderKind;
use crate::error::{Error, Result};
use crate::gpu::Allocator;
use crate::provider::{caps, Access, CounterSnapshot, MemoryRegion, Nic, NicAddress, NicInfo, QueuePair};
use std::sync::Arc;

/// The rail of context `context` among `rails`: round robin, the same on
/// every rank, so that a context's queue pairs join rail r to rail r.
pub fn rail_of(context: u32, rails: usize) -> usize {
    context as usize % rails.max(1)
}

/// The NICs of one comm, rail 0 first.
pub struct RailSet {
    nics: Vec<Arc<dyn Nic>>,
}

impl RailSet {
    /// The comm's NIC: `nics[0]` itself when there is one rail, else a set
    /// that registers on every rail.
    pub fn nic(nics: &[Arc<dyn Nic>]) -> Arc<dyn Nic> {
        if nics.len() == 1 {
            nics[0].clone()
        } else {
            Arc::new(RailSet { nics: nics.to_vec() })
        }
    }

    /// "rail r (NIC name)", as errors and WARN lines name a rail.
    pub fn label(rail: usize, nic: &dyn Nic) -> String {
        format!("rail {rail} (NIC {})", nic.info().name)
    }

    /// Registers through `reg` on every rail, at one address.
    fn each(
        &self,
        what: &str,
        mut reg: impl FnMut(&dyn Nic) -> Result<Box<dyn MemoryRegion>>,
    ) -> Result<Box<dyn MemoryRegion>> {
        let mut regions: Vec<Box<dyn MemoryRegion>> = Vec::with_capacity(self.nics.len());
        for (rail, nic) in self.nics.iter().enumerate() {
            let r = reg(&**nic).map_err(|e| on_rail(e, &format!("{what} on {}", Self::label(rail, &**nic))))?;
            if let Some(first) = regions.first() {
                // One address on every rail (the same memory); the keys are
                // each NIC's own (a window carries a key pair per rail).
                if r.addr() != first.addr() {
                    return Err(Error::System(format!(
                        "{what}: {} registered it at {:#x}, {} at {:#x}",
                        Self::label(rail, &**nic),
                        r.addr(),
                        Self::label(0, &*self.nics[0]),
                        first.addr(),
                    )));
                }
            }
            regions.push(r);
        }
        Ok(Box::new(RailRegion(regions)))
    }
}

/// `e` of the same kind, its message prefixed with where it happened.
pub fn on_rail(e: Error, at: &str) -> Error {
    let m = format!("{at}: {}", e.message());
    match e {
        Error::InvalidArgument(_) => Error::InvalidArgument(m),
        Error::InvalidUsage(_) => Error::InvalidUsage(m),
        Error::System(_) => Error::System(m),
        Error::Remote(_) => Error::Remote(m),
        Error::Timeout(_) => Error::Timeout(m),
        Error::Internal(_) => Error::Internal(m),
    }
}

/// Field-wise `a + b` (wrapping), through the snapshot's own difference:
/// `a - (0 - b)`.
pub fn sum(a: &CounterSnapshot, b: &CounterSnapshot) -> CounterSnapshot {
    a.since(&CounterSnapshot::default().since(b))
}

/// One registration per rail (rail 0's keys stand for it where one pair is
/// asked for); dropped together.
struct RailRegion(Vec<Box<dyn MemoryRegion>>);

impl MemoryRegion for RailRegion {
    fn lkey(&self) -> u32 {
        self.0[0].lkey()
    }
    fn rkey(&self) -> u32 {
        self.0[0].rkey()
    }
    fn addr(&self) -> u64 {
        self.0[0].addr()
    }
    fn len(&self) -> u64 {
        self.0[0].len()
    }
    fn rail_keys(&self) -> Vec<(u32, u32)> {
        self.0.iter().map(|r| (r.lkey(), r.rkey())).collect()
    }
}

impl Nic for RailSet {
    fn kind(&self) -> ProviderKind {
        self.nics[0].kind()
    }
    /// Rail 0's (createContext refuses rails of different families).
    fn family(&self) -> crate::nic::NicFamily {
        self.nics[0].family()
    }
    /// Rail 0's, named after every rail, with what all rails support.
    fn info(&self) -> NicInfo {
        let mut i = self.nics[0].info();
        i.name = self.nics.iter().map(|n| n.info().name).collect::<Vec<_>>().join("+");
        i.ptr_support = self.nics.iter().fold(i.ptr_support, |s, n| s & n.info().ptr_support);
        i.flushes_all_puts_on_any_signal = false;
        i
    }
    fn address(&self) -> NicAddress {
        self.nics[0].address()
    }
    fn check_peer(&self, remote: &NicAddress) -> Result<()> {
        self.nics[0].check_peer(remote)
    }
    fn allocator(&self) -> Arc<dyn Allocator> {
        self.nics[0].allocator()
    }
    fn create_qp(&self, log_depth: u32, traffic_class: u8, rings_in_device_memory: bool) -> Result<Box<dyn QueuePair>> {
        self.nics[0].create_qp(log_depth, traffic_class, rings_in_device_memory)
    }
    unsafe fn reg_mr(&self, addr: u64, len: u64, access: Access) -> Result<Box<dyn MemoryRegion>> {
        // SAFETY: the caller's contract, for every rail's registration.
        self.each(&format!("registering {len} bytes at {addr:#x}"), |n| unsafe { n.reg_mr(addr, len, access) })
    }
    unsafe fn reg_dmabuf_mr(&self, addr: u64, len: u64, offset: u64, fd: i32, access: Access)
        -> Result<Box<dyn MemoryRegion>> {
        // SAFETY: the caller's contract, for every rail's registration.
        self.each(&format!("registering dma-buf {fd} ({len} bytes)"), |n| unsafe {
            n.reg_dmabuf_mr(addr, len, offset, fd, access)
        })
    }
    fn needs_progress(&self) -> bool {
        self.nics.iter().any(|n| n.needs_progress())
    }
    fn progress(&self) -> bool {
        self.nics.iter().fold(false, |any, n| n.progress() | any)
    }
    fn capabilities(&self) -> caps::Capabilities {
        self.nics[0].capabilities()
    }
    /// The sum over rails ([`crate::session::CollComm::rail_counters`] has
    /// them one by one).
    fn counters(&self) -> Option<CounterSnapshot> {
        let all: Option<Vec<CounterSnapshot>> = self.nics.iter().map(|n| n.counters()).collect();
        all.map(|v| v.iter().fold(CounterSnapshot::default(), |a, b| sum(&a, b)))
    }
}
