//! The shared-memory wire between emulated NICs in different processes: one
//! single-producer ring per ordered pair of nodes, in a POSIX shared-memory
//! segment every process maps.
//!
//! Dependable across processes:
//! - sending never blocks: a full ring is reported ([`SendError::Full`]) and
//!   the NIC keeps the packet for later, draining its own inbox meanwhile, so
//!   loopback and two NICs sending to each other cannot deadlock;
//! - node slots name the owning process: a slot is free again when its NIC
//!   leaves or its process is gone, and a sender can tell a dead peer
//!   ([`ShmWire::peer_alive`]) from a slow one;
//! - the segment records the processes that map it: the last one to leave
//!   removes it, and a segment whose processes are all gone (a crashed job)
//!   is reclaimed by the next job that opens the name;
//! - a mapping belongs to the process that made it: a forked child inherits
//!   the mapping (and the exit hook) but neither detaches nor removes
//!   anything when it exits or drops it.

use super::packet::{Packet, WireError};
use std::ffi::CString;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

const MAGIC: u64 = 0x3242_4653_4752_5347; // "GSRGSFB2" little-endian
const HEADER_BYTES: usize = 4096;
const RING_HEADER: usize = 128;
const RING_BYTES: usize = 1 << 20;
const WRAP: u32 = u32::MAX;
/// Most nodes (and processes) one segment serves.
pub const MAX_NODES: u32 = 64;
/// The largest packet a ring carries: a quarter of it, so that a full-sized
/// packet always fits once the consumer has caught up.
pub const MAX_PACKET: usize = RING_BYTES / 4;

#[repr(C)]
struct Header {
    magic: u64,
    max_nodes: u32,
    ring_bytes: u32,
    /// Process ids mapping the segment (0 = free slot).
    attached: [AtomicU32; MAX_NODES as usize],
    /// Process id owning node i (0 = free).
    nodes: [AtomicU32; MAX_NODES as usize],
}
const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_BYTES);

/// Why a packet was not sent.
#[derive(Debug)]
pub enum SendError {
    /// The ring to the destination is full now: try again later.
    Full(Packet),
    Wire(WireError),
}

pub struct ShmWire {
    base: *mut u8,
    size: usize,
    max_nodes: u32,
    name: CString,
    /// The segment's identity (st_dev, st_ino): the name is removed only
    /// while it still refers to this segment.
    id: (u64, u64),
    /// This mapping's slot in the header's `attached`.
    attach_slot: usize,
    /// The process that created or attached this mapping: only it detaches
    /// (a forked child has a copy of the struct but owns no slot).
    owner: u32,
    /// Producers of one ring may be several NICs of this process (loopback
    /// tests): one sender at a time.
    send_lock: Mutex<()>,
}

// SAFETY: the mapping is shared memory accessed through atomics and raw
// copies under the ring protocol; the pointer stays valid until drop.
unsafe impl Send for ShmWire {}
// SAFETY: as above; sends are serialized by send_lock, receives are per node.
unsafe impl Sync for ShmWire {}

fn segment_size(max_nodes: u32) -> usize {
    HEADER_BYTES + (max_nodes as usize).pow(2) * (RING_HEADER + RING_BYTES)
}

fn shm_name(name: &str) -> std::io::Result<CString> {
    let n = if name.starts_with('/') { name.to_string() } else { format!("/{name}") };
    CString::new(n).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in fabric name"))
}

fn my_pid() -> u32 {
    std::process::id()
}

/// Whether process `pid` exists (a pid of another user's process counts).
fn alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    if pid == my_pid() {
        return true;
    }
    // SAFETY: signal 0 only checks for existence.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Claims a free (or dead process's) slot of `slots` for this process.
fn claim(slots: &[AtomicU32]) -> Option<u32> {
    let me = my_pid();
    for (i, s) in slots.iter().enumerate() {
        let cur = s.load(Ordering::Acquire);
        if (cur == 0 || !alive(cur)) && s.compare_exchange(cur, me, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            return Some(i as u32);
        }
    }
    None
}

struct Fd(i32);
impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.0) };
    }
}

impl ShmWire {
    /// Creates the named segment for up to `max_nodes` NICs; fails with
    /// AlreadyExists when the name is taken.
    pub fn create(name: &str, max_nodes: u32) -> std::io::Result<ShmWire> {
        if max_nodes == 0 || max_nodes > MAX_NODES {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "max_nodes must be 1..=64"));
        }
        let cname = shm_name(name)?;
        let size = segment_size(max_nodes);
        // SAFETY: plain libc calls with a valid NUL-terminated name; results checked.
        let fd = unsafe { libc::shm_open(cname.as_ptr(), libc::O_CREAT | libc::O_EXCL | libc::O_RDWR, 0o600) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = Fd(fd);
        // SAFETY: fd is ours.
        if unsafe { libc::ftruncate(fd.0, size as libc::off_t) } != 0 {
            let e = std::io::Error::last_os_error();
            // SAFETY: the name is ours.
            unsafe { libc::shm_unlink(cname.as_ptr()) };
            return Err(e);
        }
        let base = map(fd.0, size)?;
        let id = file_id(fd.0).unwrap_or((0, 0));
        // SAFETY: the segment starts zeroed and is at least HEADER_BYTES long.
        let h = unsafe { &mut *(base as *mut Header) };
        h.max_nodes = max_nodes;
        h.ring_bytes = RING_BYTES as u32;
        h.attached[0].store(my_pid(), Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        // SAFETY: as above; magic last so attachers see a complete header.
        unsafe { AtomicU64::from_ptr(base as *mut u64).store(MAGIC, Ordering::Release) };
        let w = ShmWire { base, size, max_nodes, name: cname, id, attach_slot: 0, owner: my_pid(), send_lock: Mutex::new(()) };
        at_exit::track(&w);
        Ok(w)
    }

    /// Maps an existing segment.
    pub fn attach(name: &str) -> std::io::Result<ShmWire> {
        let mut w = Self::map_existing(name)?;
        match claim(&w.header().attached) {
            Some(slot) => {
                w.attach_slot = slot as usize;
                at_exit::track(&w);
            }
            None => {
                w.attach_slot = usize::MAX;
                return Err(std::io::Error::other(format!("{MAX_NODES} mappings of this fabric exist already")));
            }
        }
        Ok(w)
    }

    /// Attaches to the named segment, or creates it; a segment left by a job
    /// whose processes are all gone is removed and made anew.
    pub fn open(name: &str, max_nodes: u32) -> std::io::Result<ShmWire> {
        for _ in 0..4 {
            match Self::create(name, max_nodes) {
                Ok(w) => return Ok(w),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            match Self::reclaim_if_stale(name)? {
                true => continue, // removed: create it again
                false => match Self::attach(name) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    r => return r,
                },
            }
        }
        Err(std::io::Error::other("the fabric segment keeps appearing and vanishing"))
    }

    /// Removes the named segment when no process that mapped it is alive.
    /// The check and the removal hold an exclusive lock on the segment and
    /// make sure the name still refers to it, so two jobs reclaiming at once
    /// cannot remove each other's fresh segment.
    fn reclaim_if_stale(name: &str) -> std::io::Result<bool> {
        let cname = shm_name(name)?;
        // SAFETY: plain libc calls; results checked.
        let fd = unsafe { libc::shm_open(cname.as_ptr(), libc::O_RDWR, 0) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return if e.kind() == std::io::ErrorKind::NotFound { Ok(true) } else { Err(e) };
        }
        let fd = Fd(fd);
        // SAFETY: fd is ours; blocks only while another process reclaims.
        if unsafe { libc::flock(fd.0, libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let Ok(w) = Self::map_fd(fd.0, &cname) else { return Ok(false) };
        let stale = !w.header().attached.iter().any(|p| alive(p.load(Ordering::Acquire)));
        if stale && file_id(fd.0).is_some_and(|id| names(name, id)) {
            tracing::info!(name, "emulated fabric: removing a segment whose processes are all gone");
            // SAFETY: the name refers to the segment we hold locked.
            unsafe { libc::shm_unlink(cname.as_ptr()) };
        }
        Ok(stale)
    }

    fn map_existing(name: &str) -> std::io::Result<ShmWire> {
        let cname = shm_name(name)?;
        // SAFETY: plain libc calls; results checked.
        let fd = unsafe { libc::shm_open(cname.as_ptr(), libc::O_RDWR, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = Fd(fd);
        Self::map_fd(fd.0, &cname)
    }

    fn map_fd(fd: i32, cname: &CString) -> std::io::Result<ShmWire> {
        // SAFETY: zeroed stat buffer filled by fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is valid.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let size = st.st_size as usize;
        if size < HEADER_BYTES {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "fabric segment too small"));
        }
        let base = map(fd, size)?;
        let id = (st.st_dev, st.st_ino);
        // SAFETY: the segment is at least HEADER_BYTES long.
        let magic = unsafe { AtomicU64::from_ptr(base as *mut u64).load(Ordering::Acquire) };
        // SAFETY: as above.
        let max_nodes = unsafe { (*(base as *const Header)).max_nodes };
        if magic != MAGIC || max_nodes == 0 || max_nodes > MAX_NODES || segment_size(max_nodes) != size {
            // SAFETY: unmapping what we mapped.
            unsafe { libc::munmap(base as *mut libc::c_void, size) };
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "not a rust-gin fabric segment"));
        }
        // Not counted as attached until attach() claims a slot.
        Ok(ShmWire {
            base,
            size,
            max_nodes,
            name: cname.clone(),
            id,
            attach_slot: usize::MAX,
            owner: my_pid(),
            send_lock: Mutex::new(()),
        })
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a Header and lives as long as self.
        unsafe { &*(self.base as *const Header) }
    }

    /// Takes a free node slot (or one whose process is gone). Packets left
    /// for the slot's previous owner are dropped.
    pub fn join(&self) -> Result<u32, WireError> {
        let slots = &self.header().nodes[..self.max_nodes as usize];
        let id = claim(slots).ok_or(WireError::UnknownNode(self.max_nodes))?;
        for src in 0..self.max_nodes {
            let (head, tail, _) = self.ring(src, id);
            tail.store(head.load(Ordering::Acquire), Ordering::Release);
        }
        Ok(id)
    }

    pub fn leave(&self, node: u32) {
        if let Some(s) = self.header().nodes.get(node as usize) {
            let _ = s.compare_exchange(my_pid(), 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// Whether a NIC holds `node` and its process is alive.
    pub fn peer_alive(&self, node: u32) -> bool {
        self.header().nodes.get(node as usize).is_some_and(|s| alive(s.load(Ordering::Acquire)))
    }

    fn ring(&self, src: u32, dst: u32) -> (&AtomicU64, &AtomicU64, *mut u8) {
        let idx = src as usize * self.max_nodes as usize + dst as usize;
        // SAFETY: idx < max_nodes^2, so the ring lies inside the mapping.
        unsafe {
            let r = self.base.add(HEADER_BYTES + idx * (RING_HEADER + RING_BYTES));
            (AtomicU64::from_ptr(r as *mut u64), AtomicU64::from_ptr(r.add(64) as *mut u64), r.add(RING_HEADER))
        }
    }

    /// Sends `p` if its ring has room now; never waits.
    pub fn try_send(&self, p: Packet) -> Result<(), SendError> {
        if p.src_node >= self.max_nodes || p.dst_node >= self.max_nodes {
            return Err(SendError::Wire(WireError::UnknownNode(p.dst_node.max(p.src_node))));
        }
        let bytes = p.encode();
        let need = 8 + bytes.len().next_multiple_of(8);
        if need > MAX_PACKET {
            return Err(SendError::Wire(WireError::TooLarge { bytes: bytes.len(), max: MAX_PACKET - 8 }));
        }
        let _g = self.send_lock.lock().unwrap_or_else(|e| e.into_inner());
        let (head, tail, data) = self.ring(p.src_node, p.dst_node);
        let mut h = head.load(Ordering::Relaxed);
        let contiguous = RING_BYTES - (h as usize % RING_BYTES);
        let total = if need > contiguous { contiguous + need } else { need };
        if (h - tail.load(Ordering::Acquire)) as usize + total > RING_BYTES {
            return Err(SendError::Full(p));
        }
        if need > contiguous {
            // SAFETY: at least 8 bytes remain before the ring's end (records are 8-aligned).
            unsafe { (data.add(h as usize % RING_BYTES) as *mut u32).write_unaligned(WRAP) };
            h += contiguous as u64;
        }
        let at = h as usize % RING_BYTES;
        // SAFETY: [at, at+need) lies inside the ring and is free (checked above).
        unsafe {
            (data.add(at) as *mut u32).write_unaligned(bytes.len() as u32);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), data.add(at + 8), bytes.len());
        }
        head.store(h + need as u64, Ordering::Release);
        Ok(())
    }

    /// The next packet for `node` from any source.
    pub fn recv(&self, node: u32) -> Option<Packet> {
        for src in 0..self.max_nodes {
            let (head, tail, data) = self.ring(src, node);
            loop {
                let t = tail.load(Ordering::Relaxed);
                if t == head.load(Ordering::Acquire) {
                    break;
                }
                let at = t as usize % RING_BYTES;
                // SAFETY: the producer published a record (or wrap marker) at `at`.
                let len = unsafe { (data.add(at) as *const u32).read_unaligned() };
                if len == WRAP {
                    tail.store(t + (RING_BYTES - at) as u64, Ordering::Release);
                    continue;
                }
                let len = (len as usize).min(MAX_PACKET);
                // SAFETY: the record's bytes follow its length inside the ring.
                let buf = unsafe { std::slice::from_raw_parts(data.add(at + 8), len) };
                let p = Packet::decode(buf);
                tail.store(t + (8 + len.next_multiple_of(8)) as u64, Ordering::Release);
                if p.is_none() {
                    tracing::warn!(src, node, "emulated fabric: undecodable packet dropped");
                    continue;
                }
                return p;
            }
        }
        None
    }
}

/// (st_dev, st_ino) of an open descriptor.
fn file_id(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: zeroed stat buffer filled by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is valid.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// Whether the segment `name` refers to now is the one with `id`.
fn names(name: &str, id: (u64, u64)) -> bool {
    use std::os::unix::fs::MetadataExt;
    let path = format!("/dev/shm/{}", name.trim_start_matches('/'));
    std::fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == id)
}

fn map(fd: i32, size: usize) -> std::io::Result<*mut u8> {
    // SAFETY: mapping a shared-memory fd we own; result checked.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), size, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p as *mut u8)
}

impl Drop for ShmWire {
    fn drop(&mut self) {
        if self.attach_slot != usize::MAX {
            at_exit::untrack(self.base);
            // SAFETY: the mapping is still ours.
            unsafe { detach(self.base, self.attach_slot, self.owner, &self.name, self.id) };
        }
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.size) };
    }
}

/// Gives up this mapping's attach slot; the last process to leave removes
/// the segment (a crashed one's slot counts as empty), while the name still
/// refers to it. Only in `owner`, the process that made the mapping: a
/// forked child that exits holds no slot of its own, and clearing its
/// parent's slot would make the segment look abandoned and remove it under
/// the living parent (issue 26).
///
/// # Safety
/// `base` is a live mapping of a fabric segment.
unsafe fn detach(base: *mut u8, slot: usize, owner: u32, name: &CString, id: (u64, u64)) {
    if owner != my_pid() {
        return;
    }
    // SAFETY: per the function contract, the mapping starts with a Header.
    let h = unsafe { &*(base as *const Header) };
    // Only a slot that still names us: a slot reclaimed after a pid reuse
    // belongs to someone else.
    if let Some(s) = h.attached.get(slot) {
        let _ = s.compare_exchange(owner, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
    let last = !h.attached.iter().any(|p| alive(p.load(Ordering::Acquire)));
    if last && names(&name.to_string_lossy(), id) {
        // SAFETY: the name refers to this segment.
        unsafe { libc::shm_unlink(name.as_ptr()) };
    }
}

/// Segments this process maps, detached at exit: a process that ends
/// without dropping its NICs (RCCL need not finalize) still lets the last
/// one out remove the segment.
mod at_exit {
    use super::{detach, ShmWire};
    use std::ffi::CString;
    use std::sync::{Mutex, Once};

    struct Entry {
        base: usize,
        slot: usize,
        owner: u32,
        name: CString,
        id: (u64, u64),
    }

    static LIVE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

    pub(super) fn track(w: &ShmWire) {
        static HOOK: Once = Once::new();
        // SAFETY: registering a plain extern "C" function.
        HOOK.call_once(|| unsafe {
            libc::atexit(detach_all);
        });
        let e = Entry { base: w.base as usize, slot: w.attach_slot, owner: w.owner, name: w.name.clone(), id: w.id };
        LIVE.lock().unwrap_or_else(|e| e.into_inner()).push(e);
    }

    pub(super) fn untrack(base: *mut u8) {
        LIVE.lock().unwrap_or_else(|e| e.into_inner()).retain(|e| e.base != base as usize);
    }

    /// Runs in every process that inherited the hook, forked children
    /// included: detach() acts only on the owner's own mappings.
    extern "C" fn detach_all() {
        let live = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|e| e.into_inner()));
        for e in live {
            // SAFETY: tracked mappings stay mapped until untracked (and
            // mappings are never unmapped at exit).
            unsafe { detach(e.base as *mut u8, e.slot, e.owner, &e.name, e.id) };
        }
    }
}
