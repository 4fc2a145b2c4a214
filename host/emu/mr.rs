//! Memory regions of the emulated NIC: keys, access rights and bounds, as a
//! ConnectX checks them.

pub use crate::provider::Access;
// Keys are the NIC's own small integers: a fast non-cryptographic hash.
use rustc_hash::FxHashMap as HashMap;

#[derive(Clone, Copy, Debug)]
pub struct Region {
    pub pd: u32,
    pub addr: u64,
    pub len: u64,
    pub access: Access,
    pub lkey: u32,
    pub rkey: u32,
}

impl Region {
    /// Whether [addr, addr+len) lies inside the region (len 0 is inside
    /// when addr is).
    pub fn covers(&self, addr: u64, len: u64) -> bool {
        addr >= self.addr && addr.checked_add(len).is_some_and(|end| end <= self.addr + self.len)
    }
}

/// Why an access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessError {
    NoSuchKey,
    WrongPd,
    OutOfBounds,
    NotPermitted,
}

/// Regions by lkey; an rkey names the same index with its own variant byte,
/// so it finds its region with the same single lookup.
#[derive(Default)]
pub struct MrTable {
    by_lkey: HashMap<u32, Region>,
    next_index: u32,
}

const LKEY_VARIANT: u32 = 0x2a;
const RKEY_VARIANT: u32 = 0x5c;

impl MrTable {
    /// A table whose keys start at `base` (an index), so that two NICs hand
    /// out different keys for the same registration, as two ConnectX NICs
    /// do: code that uses one NIC's key on another (a window key on the
    /// wrong rail) gets the access error hardware would give.
    pub fn starting_at(base: u32) -> MrTable {
        MrTable { next_index: base, ..MrTable::default() }
    }

    /// Registers a region. Keys look like mlx5 mkeys: index << 8 | a variant
    /// byte, never the invalid lkey 0x100.
    pub fn register(&mut self, pd: u32, addr: u64, len: u64, access: Access) -> Region {
        self.next_index += 1;
        let index = self.next_index + 1; // index 1 would give 0x100
        let lkey = (index << 8) | LKEY_VARIANT;
        let rkey = (index << 8) | RKEY_VARIANT;
        let r = Region { pd, addr, len, access, lkey, rkey };
        self.by_lkey.insert(lkey, r);
        r
    }

    pub fn deregister(&mut self, lkey: u32) -> Option<Region> {
        self.by_lkey.remove(&lkey)
    }

    pub fn get(&self, lkey: u32) -> Option<&Region> {
        self.by_lkey.get(&lkey)
    }

    pub fn len(&self) -> usize {
        self.by_lkey.len()
    }
    pub fn is_empty(&self) -> bool {
        self.by_lkey.is_empty()
    }

    /// A local access through an lkey (the QP's own gather or scatter list).
    pub fn check_local(&self, pd: u32, lkey: u32, addr: u64, len: u64, write: bool) -> Result<Region, AccessError> {
        let r = *self.by_lkey.get(&lkey).ok_or(AccessError::NoSuchKey)?;
        if r.pd != pd {
            return Err(AccessError::WrongPd);
        }
        if !r.covers(addr, len) {
            return Err(AccessError::OutOfBounds);
        }
        if write && !r.access.contains(Access::LOCAL_WRITE) {
            return Err(AccessError::NotPermitted);
        }
        Ok(r)
    }

    /// A remote access through an rkey.
    pub fn check_remote(&self, pd: u32, rkey: u32, addr: u64, len: u64, need: Access) -> Result<Region, AccessError> {
        let lkey = (rkey & !0xff) | LKEY_VARIANT;
        let r = *self.by_lkey.get(&lkey).filter(|r| r.rkey == rkey).ok_or(AccessError::NoSuchKey)?;
        if r.pd != pd {
            return Err(AccessError::WrongPd);
        }
        if !r.covers(addr, len) {
            return Err(AccessError::OutOfBounds);
        }
        if !r.access.contains(need) {
            return Err(AccessError::NotPermitted);
        }
        Ok(r)
    }
}
