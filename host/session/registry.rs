//! The objects RCCL holds (instances, listen and collective comms, contexts,
//! memory handles) travel as opaque tokens, not pointers: a token names its
//! kind and a never-reused serial, so a stale, doubled, foreign or corrupted
//! value is an error that says so instead of a dereference.

use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const TAG: u64 = 0x5247 << 48; // "RG" in the top bits: never a user-space pointer

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Instance = 1,
    Listen = 2,
    Coll = 3,
    Context = 4,
    Memory = 5,
    RmaContext = 6,
    RmaRequest = 7,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Instance => "plugin context (from init)",
            Kind::Listen => "listen comm",
            Kind::Coll => "collective comm",
            Kind::Context => "GIN context",
            Kind::Memory => "memory handle",
            Kind::RmaContext => "RMA context",
            Kind::RmaRequest => "RMA request",
        }
    }
}

static SERIAL: AtomicU64 = AtomicU64::new(1);

/// Live objects of one kind.
pub struct Registry<T> {
    kind: Kind,
    live: Mutex<BTreeMap<u64, Arc<T>>>,
}

impl<T> Registry<T> {
    pub const fn new(kind: Kind) -> Registry<T> {
        Registry { kind, live: Mutex::new(BTreeMap::new()) }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<T>>> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers an object; the token is what RCCL gets.
    pub fn insert(&self, v: Arc<T>) -> *mut c_void {
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed) & 0xff_ffff_ffff;
        let token = TAG | ((self.kind as u64) << 40) | serial;
        self.map().insert(token, v);
        token as *mut c_void
    }

    fn check(&self, p: *mut c_void, what: &str) -> Result<u64> {
        let t = p as u64;
        if p.is_null() {
            return Err(Error::InvalidArgument(format!("{what} is NULL")));
        }
        if t & (0xffff << 48) != TAG {
            return Err(Error::InvalidArgument(format!("{what} {p:?} is not a rust-gin {} (corrupted?)", self.kind.name())));
        }
        if (t >> 40) & 0xff != self.kind as u64 {
            return Err(Error::InvalidArgument(format!(
                "{what} {p:?} is a rust-gin object of another kind, not a {}",
                self.kind.name()
            )));
        }
        Ok(t)
    }

    /// The live object behind a token.
    pub fn get(&self, p: *mut c_void, what: &str) -> Result<Arc<T>> {
        let t = self.check(p, what)?;
        self.map().get(&t).cloned().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{what} {p:?} is a {} that no longer exists (destroyed or closed already, or used after finalize)",
                self.kind.name()
            ))
        })
    }

    /// Unregisters (the object lives on while others hold it).
    pub fn remove(&self, p: *mut c_void, what: &str) -> Result<Arc<T>> {
        let t = self.check(p, what)?;
        self.map().remove(&t).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{what} {p:?} is a {} that was already destroyed or closed",
                self.kind.name()
            ))
        })
    }

    /// Every live object matching `f` (for cleanup of forgotten children).
    pub fn take_where(&self, f: impl Fn(&T) -> bool) -> Vec<Arc<T>> {
        let mut m = self.map();
        let keys: Vec<u64> = m.iter().filter(|(_, v)| f(v)).map(|(k, _)| *k).collect();
        keys.into_iter().filter_map(|k| m.remove(&k)).collect()
    }
}
