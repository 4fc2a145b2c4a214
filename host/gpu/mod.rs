//! GPU-visible memory. Everything a kernel reads or writes (queue rings,
//! doorbell records, descriptors, signals, counters) is allocated here:
//! through HIP where a GPU exists (host-pinned or device memory), or as plain
//! host memory when the emulated NIC runs on a machine without a GPU.

use crate::mem::DmaBuf;
use std::sync::Mutex;

pub mod hip;
mod object;

pub use object::{Object, Placement, RingHome};

/// One GPU-visible allocation.
pub struct GpuBuf {
    /// CPU-visible address, when the CPU can access the memory directly.
    host: Option<usize>,
    /// The address kernels (and the NIC, after registration) use.
    dev: u64,
    len: usize,
    object: Object,
    _backing: Backing,
}

enum Backing {
    Host(#[allow(dead_code)] DmaBuf), // owned for its lifetime only
    /// hipHostMalloc or hipMalloc memory, freed with hipHostFree or hipFree.
    Hip(hip::HipMem),
}

impl GpuBuf {
    pub fn dev_addr(&self) -> u64 {
        self.dev
    }
    pub fn host_addr(&self) -> Option<usize> {
        self.host
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn placement(&self) -> Placement {
        self.object.placement()
    }
    pub fn object(&self) -> Object {
        self.object
    }

    fn host_ptr(&self, off: usize, len: usize) -> *mut u8 {
        self.check_bounds(off, len);
        let base = self.host.expect("host access to device-only memory goes through copies");
        (base + off) as *mut u8
    }

    /// Copies `data` to `off` (a host store, or a copy to device memory).
    /// Panics when a copy to device memory fails (see [`GpuBuf::try_write`]).
    pub fn write(&self, off: usize, data: &[u8]) {
        if let Err(e) = self.try_write(off, data) {
            panic!("GpuBuf write of {} bytes at {off} ({self:?}): {e}", data.len());
        }
    }

    /// Copies from `off` into `out`. Panics when a copy from device memory
    /// fails (see [`GpuBuf::try_read`]).
    pub fn read(&self, off: usize, out: &mut [u8]) {
        if let Err(e) = self.try_read(off, out) {
            panic!("GpuBuf read of {} bytes at {off} ({self:?}): {e}", out.len());
        }
    }

    /// As [`GpuBuf::write`], returning the error of a failed copy to device
    /// memory (hipMemcpy) instead of panicking. Host memory cannot fail.
    pub fn try_write(&self, off: usize, data: &[u8]) -> std::io::Result<()> {
        match (self.host, &self._backing) {
            (None, Backing::Hip(m)) => {
                self.check_bounds(off, data.len());
                m.copy_in(off, data)
            }
            _ => {
                let p = self.host_ptr(off, data.len());
                // SAFETY: in bounds (checked) of a live allocation owned by self.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
                Ok(())
            }
        }
    }

    /// As [`GpuBuf::read`], returning the error of a failed copy instead of
    /// panicking.
    pub fn try_read(&self, off: usize, out: &mut [u8]) -> std::io::Result<()> {
        match (self.host, &self._backing) {
            (None, Backing::Hip(m)) => {
                self.check_bounds(off, out.len());
                m.copy_out(off, out)
            }
            _ => {
                let p = self.host_ptr(off, out.len());
                // SAFETY: in bounds (checked) of a live allocation owned by self.
                unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len()) };
                Ok(())
            }
        }
    }

    /// Zeroes the whole buffer through a bounded scratch (a temporary as
    /// large as the buffer could itself run out of memory).
    pub fn zero(&self) {
        let zeros = vec![0u8; self.len.min(1 << 20)];
        let mut off = 0;
        while off < self.len {
            let n = zeros.len().min(self.len - off);
            self.write(off, &zeros[..n]);
            off += n;
        }
    }

    fn check_bounds(&self, off: usize, len: usize) {
        assert!(off.checked_add(len).is_some_and(|e| e <= self.len), "GpuBuf access out of bounds");
    }

    /// Writes a plain-old-data value (a descriptor) at `off`.
    pub fn write_pod<T: Copy>(&self, off: usize, v: &T) {
        // SAFETY: T is Copy (plain data); we view its bytes for the copy.
        let bytes = unsafe { std::slice::from_raw_parts(v as *const T as *const u8, std::mem::size_of::<T>()) };
        self.write(off, bytes);
    }

    pub fn read_pod<T: Copy + Default>(&self, off: usize) -> T {
        let mut v = T::default();
        // SAFETY: T is Copy (plain data); we fill its bytes from the buffer.
        let bytes = unsafe { std::slice::from_raw_parts_mut(&mut v as *mut T as *mut u8, std::mem::size_of::<T>()) };
        self.read(off, bytes);
        v
    }

    /// The 64-bit word at `off` as an atomic, for host-visible memory.
    pub fn atomic_u64(&self, off: usize) -> &std::sync::atomic::AtomicU64 {
        assert!(off.is_multiple_of(8), "misaligned atomic");
        let p = self.host_ptr(off, 8);
        // SAFETY: aligned, in bounds, alive as long as self.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(p as *mut u64) }
    }
    pub fn atomic_u32(&self, off: usize) -> &std::sync::atomic::AtomicU32 {
        assert!(off.is_multiple_of(4), "misaligned atomic");
        let p = self.host_ptr(off, 4);
        // SAFETY: aligned, in bounds, alive as long as self.
        unsafe { std::sync::atomic::AtomicU32::from_ptr(p as *mut u32) }
    }
}

impl std::fmt::Debug for GpuBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuBuf({:?} in {:?}, dev {:#x}, {} bytes)", self.object, self.placement(), self.dev, self.len)
    }
}

/// Allocates GPU-visible memory for an [`Object`], where its placement says.
pub trait Allocator: Send + Sync {
    fn alloc(&self, len: usize, align: usize, object: Object) -> std::io::Result<GpuBuf>;
    /// Human-readable, for logs.
    fn describe(&self) -> String;
}

/// Plain host memory standing in for GPU memory (no GPU on this machine):
/// the CPU and the emulated NIC see the same addresses a kernel would.
#[derive(Default)]
pub struct HostMemory;

impl Allocator for HostMemory {
    fn alloc(&self, len: usize, align: usize, object: Object) -> std::io::Result<GpuBuf> {
        record(object, len);
        let b = DmaBuf::try_new(len, align.max(64)).map_err(|e| {
            std::io::Error::new(e.kind(), format!("could not allocate {len} bytes of host memory for the {object:?}: {e}"))
        })?;
        let addr = b.addr();
        Ok(GpuBuf { host: Some(addr), dev: addr as u64, len, object, _backing: Backing::Host(b) })
    }
    fn describe(&self) -> String {
        "host memory (no GPU)".into()
    }
}

/// One allocation, as [`recording`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    pub object: Object,
    pub placement: Placement,
    pub len: usize,
}

static RECORDER: Mutex<Option<Vec<Allocation>>> = Mutex::new(None);

fn record(object: Object, len: usize) {
    if let Some(v) = RECORDER.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        v.push(Allocation { object, placement: object.placement(), len });
    }
}

/// Runs `f` and returns every allocation any allocator of this process made
/// meanwhile (for tests that check placements; run them alone in their
/// process).
pub fn recording<T>(f: impl FnOnce() -> T) -> (T, Vec<Allocation>) {
    *RECORDER.lock().unwrap_or_else(|e| e.into_inner()) = Some(Vec::new());
    let out = f();
    let seen = RECORDER.lock().unwrap_or_else(|e| e.into_inner()).take().unwrap_or_default();
    (out, seen)
}
