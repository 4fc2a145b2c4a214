//! Memory regions of the emulated NIC: keys, access rights and bounds, as a
//! ConnectX checks them.

pub use crate::nic::Access;

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

/// Regions by key index, as a ConnectX finds an mkey's context: a key is
/// index << 8 | a variant byte, the index selects the slot (a bounds check,
/// no hash, on every packet's rkey), and the whole key must match the
/// slot's. An rkey names the same index as its lkey with its own variant.
#[derive(Default)]
pub struct MrTable {
    /// Slot i holds the region of key index `first + i` (None: deregistered).
    slots: Vec<Option<Region>>,
    first: u32,
    next_index: u32,
    live: usize,
}

const LKEY_VARIANT: u32 = 0x2a;
const RKEY_VARIANT: u32 = 0x5c;

impl MrTable {
    /// A table whose keys start at `base` (an index), so that two NICs hand
    /// out different keys for the same registration, as two ConnectX NICs
    /// do: code that uses one NIC's key on another (a window key on the
    /// wrong rail) gets the access error hardware would give.
    pub fn starting_at(base: u32) -> MrTable {
        MrTable { next_index: base, first: base + 2, ..MrTable::default() }
    }

    /// Registers a region. Keys look like mlx5 mkeys: index << 8 | a variant
    /// byte, never the invalid lkey 0x100.
    pub fn register(&mut self, pd: u32, addr: u64, len: u64, access: Access) -> Region {
        self.next_index += 1;
        let index = self.next_index + 1; // index 1 would give 0x100
        let lkey = (index << 8) | LKEY_VARIANT;
        let rkey = (index << 8) | RKEY_VARIANT;
        let r = Region { pd, addr, len, access, lkey, rkey };
        if self.slots.is_empty() {
            self.first = index;
        }
        let i = (index - self.first) as usize;
        if self.slots.len() <= i {
            self.slots.resize(i + 1, None);
        }
        self.slots[i] = Some(r);
        self.live += 1;
        r
    }

    pub fn deregister(&mut self, lkey: u32) -> Option<Region> {
        let i = self.slot(lkey)?;
        if self.slots[i].is_none_or(|r| r.lkey != lkey) {
            return None;
        }
        let r = self.slots[i].take();
        self.live -= 1;
        // Indices are never reused; the table keeps no tail of holes.
        while matches!(self.slots.last(), Some(None)) {
            self.slots.pop();
        }
        r
    }

    fn slot(&self, key: u32) -> Option<usize> {
        let i = (key >> 8).wrapping_sub(self.first) as usize;
        (i < self.slots.len()).then_some(i)
    }

    pub fn get(&self, lkey: u32) -> Option<&Region> {
        self.slots[self.slot(lkey)?].as_ref().filter(|r| r.lkey == lkey)
    }

    pub fn len(&self) -> usize {
        self.live
    }
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// A local access through an lkey (the QP's own gather or scatter list).
    pub fn check_local(&self, pd: u32, lkey: u32, addr: u64, len: u64, write: bool) -> Result<Region, AccessError> {
        let r = *self.get(lkey).ok_or(AccessError::NoSuchKey)?;
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
        let r = self.slot(rkey).and_then(|i| self.slots[i]).filter(|r| r.rkey == rkey).ok_or(AccessError::NoSuchKey)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_find_their_region_and_nothing_else() {
        let mut t = MrTable::starting_at(0x40);
        let a = t.register(1, 0x1000, 64, Access::all());
        let b = t.register(1, 0x2000, 64, Access::all());
        let c = t.register(2, 0x3000, 64, Access::LOCAL_WRITE);
        assert_eq!(t.len(), 3);
        assert_eq!(t.check_remote(1, b.rkey, 0x2000, 8, Access::REMOTE_WRITE).unwrap().lkey, b.lkey);
        assert_eq!(t.check_local(1, a.lkey, 0x1000, 64, true).unwrap().rkey, a.rkey);
        // An lkey is not an rkey, nor the reverse.
        assert_eq!(t.check_remote(1, b.lkey, 0x2000, 8, Access::REMOTE_WRITE).unwrap_err(), AccessError::NoSuchKey);
        assert_eq!(t.check_local(1, b.rkey, 0x2000, 8, false).unwrap_err(), AccessError::NoSuchKey);
        assert_eq!(t.check_local(1, c.lkey, 0x3000, 8, false).unwrap_err(), AccessError::WrongPd);
        assert_eq!(t.check_remote(2, c.rkey, 0x3000, 8, Access::REMOTE_WRITE).unwrap_err(), AccessError::NotPermitted);
        // Keys below, between and past the table's.
        for k in [0x100 | LKEY_VARIANT, (a.lkey & !0xff) - 0x100, c.lkey + 0x100, u32::MAX] {
            assert!(t.get(k).is_none(), "{k:#x}");
        }
        // A wrong key on a live slot deregisters nothing.
        assert!(t.deregister(b.rkey).is_none());
        assert_eq!(t.deregister(b.lkey).unwrap().addr, 0x2000);
        assert!(t.get(b.lkey).is_none() && t.deregister(b.lkey).is_none());
        assert_eq!(t.check_remote(1, b.rkey, 0x2000, 8, Access::REMOTE_WRITE).unwrap_err(), AccessError::NoSuchKey);
        assert_eq!(t.deregister(c.lkey).unwrap().addr, 0x3000);
        assert_eq!((t.len(), t.slots.len()), (1, 1), "trailing holes are dropped");
        let d = t.register(1, 0x4000, 64, Access::all());
        assert!(d.lkey > c.lkey, "indices are not reused");
        assert_eq!(t.get(d.lkey).unwrap().addr, 0x4000);
        assert_eq!(t.get(a.lkey).unwrap().addr, 0x1000);
        // Another NIC's table hands out other keys.
        let mut u = MrTable::starting_at(0x1040);
        assert!(u.register(1, 0x1000, 64, Access::all()).lkey != a.lkey && u.get(a.lkey).is_none());
    }
}
