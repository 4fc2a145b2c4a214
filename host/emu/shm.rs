//! The shared-memory wire between emulated NICs in different processes: one
//! single-producer ring per ordered pair of nodes, in a POSIX shared-memory
//! segment every process maps.

use super::fabric::WireError;
use super::packet::Packet;
use std::ffi::CString;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const MAGIC: u64 = 0x3142_4653_4752_5347; // "GSRGSFB1" little-endian
const HEADER_BYTES: usize = 4096;
const RING_HEADER: usize = 128;
const RING_BYTES: usize = 1 << 20;
const WRAP: u32 = u32::MAX;
/// How long a sender waits for room before it calls the wire stalled.
const STALL_LIMIT: Duration = Duration::from_secs(10);

#[repr(C)]
struct Header {
    magic: u64,
    max_nodes: u32,
    ring_bytes: u32,
    joined: AtomicU32,
}

pub struct ShmWire {
    base: *mut u8,
    size: usize,
    max_nodes: u32,
    name: CString,
    creator: bool,
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

impl ShmWire {
    pub fn create(name: &str, max_nodes: u32) -> std::io::Result<ShmWire> {
        if max_nodes == 0 || max_nodes > 64 {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "max_nodes must be 1..=64"));
        }
        let cname = shm_name(name)?;
        let size = segment_size(max_nodes);
        // SAFETY: plain libc calls with a valid NUL-terminated name; results checked.
        let fd = unsafe { libc::shm_open(cname.as_ptr(), libc::O_CREAT | libc::O_EXCL | libc::O_RDWR, 0o600) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is ours.
        if unsafe { libc::ftruncate(fd, size as libc::off_t) } != 0 {
            let e = std::io::Error::last_os_error();
            // SAFETY: fd and name are ours.
            unsafe {
                libc::close(fd);
                libc::shm_unlink(cname.as_ptr());
            }
            return Err(e);
        }
        let base = map(fd, size)?;
        // SAFETY: the segment starts zeroed and is at least HEADER_BYTES long.
        let h = unsafe { &mut *(base as *mut Header) };
        h.max_nodes = max_nodes;
        h.ring_bytes = RING_BYTES as u32;
        std::sync::atomic::fence(Ordering::Release);
        // SAFETY: as above; magic last so attachers see a complete header.
        unsafe { AtomicU64::from_ptr(base as *mut u64).store(MAGIC, Ordering::Release) };
        Ok(ShmWire { base, size, max_nodes, name: cname, creator: true, send_lock: Mutex::new(()) })
    }

    pub fn attach(name: &str) -> std::io::Result<ShmWire> {
        let cname = shm_name(name)?;
        // SAFETY: plain libc calls; results checked.
        let fd = unsafe { libc::shm_open(cname.as_ptr(), libc::O_RDWR, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: zeroed stat buffer filled by fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is valid.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let size = st.st_size as usize;
        if size < HEADER_BYTES {
            // SAFETY: fd is ours.
            unsafe { libc::close(fd) };
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "fabric segment too small"));
        }
        let base = map(fd, size)?;
        // SAFETY: the segment is at least HEADER_BYTES long.
        let magic = unsafe { AtomicU64::from_ptr(base as *mut u64).load(Ordering::Acquire) };
        // SAFETY: as above.
        let max_nodes = unsafe { (*(base as *const Header)).max_nodes };
        if magic != MAGIC || segment_size(max_nodes) != size {
            // SAFETY: unmapping what we mapped.
            unsafe { libc::munmap(base as *mut libc::c_void, size) };
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "not a rust-gin fabric segment"));
        }
        Ok(ShmWire { base, size, max_nodes, name: cname, creator: false, send_lock: Mutex::new(()) })
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a Header and lives as long as self.
        unsafe { &*(self.base as *const Header) }
    }

    pub fn join(&self) -> Result<u32, WireError> {
        let id = self.header().joined.fetch_add(1, Ordering::AcqRel);
        if id >= self.max_nodes {
            return Err(WireError::UnknownNode(id));
        }
        Ok(id)
    }

    pub fn leave(&self, _node: u32) {}

    fn ring(&self, src: u32, dst: u32) -> (&AtomicU64, &AtomicU64, *mut u8) {
        let idx = src as usize * self.max_nodes as usize + dst as usize;
        // SAFETY: idx < max_nodes^2, so the ring lies inside the mapping.
        unsafe {
            let r = self.base.add(HEADER_BYTES + idx * (RING_HEADER + RING_BYTES));
            (AtomicU64::from_ptr(r as *mut u64), AtomicU64::from_ptr(r.add(64) as *mut u64), r.add(RING_HEADER))
        }
    }

    pub fn send(&self, p: &Packet) -> Result<(), WireError> {
        if p.src_node >= self.max_nodes || p.dst_node >= self.max_nodes {
            return Err(WireError::UnknownNode(p.dst_node.max(p.src_node)));
        }
        let bytes = p.encode();
        let need = 8 + bytes.len().next_multiple_of(8);
        assert!(need <= RING_BYTES / 2, "packet larger than the shared-memory ring allows");
        let _g = self.send_lock.lock().unwrap_or_else(|e| e.into_inner());
        let (head, tail, data) = self.ring(p.src_node, p.dst_node);
        let mut h = head.load(Ordering::Relaxed);
        let started = Instant::now();
        loop {
            let contiguous = RING_BYTES - (h as usize % RING_BYTES);
            let total = if need > contiguous { contiguous + need } else { need };
            if (h - tail.load(Ordering::Acquire)) as usize + total <= RING_BYTES {
                if need > contiguous {
                    // SAFETY: at least 4 bytes remain before the ring's end (records are 8-aligned).
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
                return Ok(());
            }
            if started.elapsed() > STALL_LIMIT {
                return Err(WireError::Stalled { dst: p.dst_node, secs: STALL_LIMIT.as_secs() });
            }
            std::thread::yield_now();
        }
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
                let mut buf = vec![0u8; len as usize];
                // SAFETY: the record's bytes follow its length inside the ring.
                unsafe { std::ptr::copy_nonoverlapping(data.add(at + 8), buf.as_mut_ptr(), len as usize) };
                tail.store(t + (8 + (len as usize).next_multiple_of(8)) as u64, Ordering::Release);
                return Packet::decode(&buf);
            }
        }
        None
    }
}

fn map(fd: i32, size: usize) -> std::io::Result<*mut u8> {
    // SAFETY: mapping a shared-memory fd we own; result checked.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), size, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
    };
    // SAFETY: the mapping keeps the object alive; the fd is no longer needed.
    unsafe { libc::close(fd) };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p as *mut u8)
}

impl Drop for ShmWire {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping; unlinking the name we created.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.size);
            if self.creator {
                libc::shm_unlink(self.name.as_ptr());
            }
        }
    }
}
