//! Posting to an mlx5 send queue from the host, through the device library's
//! x86-64 build: the same producer code a kernel runs. Used by the RMA
//! plugin's data path, the benchmarks and the tests.

use crate::abi::{rust_gin_error, rust_gin_mlx5_request, rust_gin_mlx5_sq, rust_gin_mlx5_sq_state};
use crate::device::{self, DeviceError, DeviceStatus};
use crate::gpu::{Allocator, GpuBuf, Object};

/// A queue descriptor in device-visible memory, plus the error record it
/// reports into.
pub struct SendQueue {
    desc: GpuBuf,
}

// SAFETY: the descriptor is immutable after construction and the device code
// it is passed to is thread-safe by design (many lanes post concurrently).
unsafe impl Sync for SendQueue {}
// SAFETY: as above.
unsafe impl Send for SendQueue {}

impl SendQueue {
    pub fn new(alloc: &dyn Allocator, desc: &rust_gin_mlx5_sq) -> std::io::Result<SendQueue> {
        let b = alloc.alloc(std::mem::size_of::<rust_gin_mlx5_sq>(), 64, Object::SqDescriptor)?;
        b.write_pod(0, desc);
        Ok(SendQueue { desc: b })
    }

    /// The descriptor as device code takes it.
    pub fn ptr(&self) -> *const rust_gin_mlx5_sq {
        self.desc.dev_addr() as *const rust_gin_mlx5_sq
    }

    pub fn descriptor(&self) -> rust_gin_mlx5_sq {
        self.desc.read_pod(0)
    }

    /// Posts requests in order and rings.
    pub fn post(&self, reqs: &[rust_gin_mlx5_request]) -> Result<(), DeviceStatus> {
        let n = u32::try_from(reqs.len()).map_err(|_| DeviceStatus::Invalid)?;
        // SAFETY: the descriptor and everything it points to live as long as
        // the queue's owner keeps them; reqs is a valid slice of n requests.
        DeviceStatus::check(unsafe { device::rust_gin_mlx5_post(self.ptr(), reqs.as_ptr(), n) })
    }

    /// Posts without ringing (a later post or [`SendQueue::ring`] rings).
    pub fn post_deferred(&self, reqs: &[rust_gin_mlx5_request]) -> Result<(), DeviceStatus> {
        let n = u32::try_from(reqs.len()).map_err(|_| DeviceStatus::Invalid)?;
        // SAFETY: as in post().
        DeviceStatus::check(unsafe { device::rust_gin_mlx5_post_deferred(self.ptr(), reqs.as_ptr(), n) })
    }

    pub fn ring(&self) {
        // SAFETY: as in post().
        unsafe { device::rust_gin_mlx5_ring(self.ptr()) }
    }

    /// Waits until everything posted has completed.
    pub fn quiet(&self) -> Result<(), DeviceStatus> {
        // SAFETY: as in post().
        DeviceStatus::check(unsafe { device::rust_gin_mlx5_quiet(self.ptr()) })
    }

    /// Consumes available CQEs.
    pub fn poll(&self) -> Result<(), DeviceStatus> {
        // SAFETY: as in post().
        DeviceStatus::check(unsafe { device::rust_gin_mlx5_poll(self.ptr()) })
    }

    /// The device-side producer/consumer counters.
    pub fn state(&self) -> rust_gin_mlx5_sq_state {
        let d = self.descriptor();
        // SAFETY: `state` points at the queue's live state block; read by value.
        unsafe { std::ptr::read_volatile(d.state as *const rust_gin_mlx5_sq_state) }
    }

    /// The sticky error this queue reports into, if any.
    pub fn error(&self) -> Option<DeviceError> {
        let d = self.descriptor();
        // SAFETY: `error` points at a live record; read by value.
        let r = unsafe { std::ptr::read_volatile(d.error as *const rust_gin_error) };
        DeviceError::from_record(&r)
    }
}

/// A zeroed sticky-error record in device-visible memory.
pub fn new_error_record(alloc: &dyn Allocator) -> std::io::Result<GpuBuf> {
    alloc.alloc(std::mem::size_of::<rust_gin_error>(), 64, Object::ErrorRecord)
}
