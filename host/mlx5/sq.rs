//! Posting to a send queue from the host, through the device library's
//! x86-64 build: the same producer code a kernel runs. Used by the RMA
//! plugin's data path, the benchmarks and the tests. Every NIC family: mlx5
//! through its entry points (mlx5/api.h), bnxt_re and ionic through theirs
//! (queue/api.h); the wrapper only chooses which one, the protocol is the
//! device library's.

use crate::abi::{rust_gin_error, rust_gin_mlx5_request, rust_gin_mlx5_sq, rust_gin_mlx5_sq_state, rust_gin_nic_sq};
use crate::device::{self, DeviceError, DeviceStatus};
use crate::gpu::{Allocator, GpuBuf, Object};
use crate::nic::NicFamily;
use crate::provider::QueueDescriptor;

/// A queue descriptor in device-visible memory, plus the error record it
/// reports into.
pub struct SendQueue {
    desc: GpuBuf,
    /// Which entry points take the descriptor (and which layout it has).
    family: NicFamily,
}

// SAFETY: the descriptor is immutable after construction and the device code
// it is passed to is thread-safe by design (many lanes post concurrently).
unsafe impl Sync for SendQueue {}
// SAFETY: as above.
unsafe impl Send for SendQueue {}

/// The entry points of one family, over the descriptor's address.
struct Entry {
    post: unsafe extern "C" fn(u64, *const rust_gin_mlx5_request, u32) -> i32,
    post_deferred: unsafe extern "C" fn(u64, *const rust_gin_mlx5_request, u32) -> i32,
    ring: unsafe extern "C" fn(u64),
    poll: unsafe extern "C" fn(u64) -> i32,
}

macro_rules! entry {
    ($desc:ty, $post:ident, $deferred:ident, $ring:ident, $poll:ident) => {{
        // Thin shims: each casts the address back to the family's descriptor.
        unsafe extern "C" fn post(d: u64, r: *const rust_gin_mlx5_request, n: u32) -> i32 {
            // SAFETY: the caller's (SendQueue's) contract: `d` is a live descriptor of this family.
            unsafe { device::$post(d as *const $desc, r, n) }
        }
        unsafe extern "C" fn deferred(d: u64, r: *const rust_gin_mlx5_request, n: u32) -> i32 {
            // SAFETY: as in post.
            unsafe { device::$deferred(d as *const $desc, r, n) }
        }
        unsafe extern "C" fn ring(d: u64) {
            // SAFETY: as in post.
            unsafe { device::$ring(d as *const $desc) }
        }
        unsafe extern "C" fn poll(d: u64) -> i32 {
            // SAFETY: as in post.
            unsafe { device::$poll(d as *const $desc) }
        }
        Entry { post, post_deferred: deferred, ring, poll }
    }};
}

static MLX5: Entry =
    entry!(rust_gin_mlx5_sq, rust_gin_mlx5_post, rust_gin_mlx5_post_deferred, rust_gin_mlx5_ring, rust_gin_mlx5_poll);
static BNXT: Entry =
    entry!(rust_gin_nic_sq, rust_gin_bnxt_post, rust_gin_bnxt_post_deferred, rust_gin_bnxt_ring, rust_gin_bnxt_poll);
static IONIC: Entry = entry!(
    rust_gin_nic_sq,
    rust_gin_ionic_post,
    rust_gin_ionic_post_deferred,
    rust_gin_ionic_ring,
    rust_gin_ionic_poll
);

impl SendQueue {
    /// An mlx5 queue.
    pub fn new(alloc: &dyn Allocator, desc: &rust_gin_mlx5_sq) -> std::io::Result<SendQueue> {
        let b = alloc.alloc(std::mem::size_of::<rust_gin_mlx5_sq>(), 64, Object::SqDescriptor)?;
        b.write_pod(0, desc);
        Ok(SendQueue { desc: b, family: NicFamily::Mlx5 })
    }

    /// A queue of any family, as its queue pair describes it.
    pub fn for_queue(alloc: &dyn Allocator, desc: &QueueDescriptor) -> std::io::Result<SendQueue> {
        match desc {
            QueueDescriptor::Mlx5(d) => Self::new(alloc, d),
            QueueDescriptor::Nic(family, d) => {
                let b = alloc.alloc(std::mem::size_of::<rust_gin_nic_sq>(), 64, Object::SqDescriptor)?;
                b.write_pod(0, d);
                Ok(SendQueue { desc: b, family: *family })
            }
        }
    }

    pub fn family(&self) -> NicFamily {
        self.family
    }

    fn entry(&self) -> &'static Entry {
        match self.family {
            NicFamily::Mlx5 => &MLX5,
            NicFamily::Bnxt => &BNXT,
            NicFamily::Ionic => &IONIC,
        }
    }

    /// The mlx5 descriptor as device code takes it. Panics on another
    /// family's queue (mlx5-only benchmarks and tests call it).
    pub fn ptr(&self) -> *const rust_gin_mlx5_sq {
        assert_eq!(self.family, NicFamily::Mlx5, "SendQueue::ptr is the mlx5 descriptor");
        self.desc.dev_addr() as *const rust_gin_mlx5_sq
    }

    /// The mlx5 descriptor; panics on another family's queue, as [`Self::ptr`].
    pub fn descriptor(&self) -> rust_gin_mlx5_sq {
        assert_eq!(self.family, NicFamily::Mlx5, "SendQueue::descriptor is the mlx5 descriptor");
        self.desc.read_pod(0)
    }

    /// The queue's state block and error record, wherever the family's
    /// descriptor keeps them.
    fn state_and_error(&self) -> (u64, u64) {
        match self.family {
            NicFamily::Mlx5 => {
                let d: rust_gin_mlx5_sq = self.desc.read_pod(0);
                (d.state, d.error)
            }
            NicFamily::Bnxt | NicFamily::Ionic => {
                let d: rust_gin_nic_sq = self.desc.read_pod(0);
                (d.state, d.error)
            }
        }
    }

    /// Posts requests in order and rings.
    pub fn post(&self, reqs: &[rust_gin_mlx5_request]) -> Result<(), DeviceStatus> {
        let n = u32::try_from(reqs.len()).map_err(|_| DeviceStatus::Invalid)?;
        // SAFETY: the descriptor (of this family) and everything it points to
        // live as long as the queue's owner keeps them; reqs is a valid slice
        // of n requests.
        DeviceStatus::check(unsafe { (self.entry().post)(self.desc.dev_addr(), reqs.as_ptr(), n) })
    }

    /// Posts without ringing (a later post or [`SendQueue::ring`] rings).
    pub fn post_deferred(&self, reqs: &[rust_gin_mlx5_request]) -> Result<(), DeviceStatus> {
        let n = u32::try_from(reqs.len()).map_err(|_| DeviceStatus::Invalid)?;
        // SAFETY: as in post().
        DeviceStatus::check(unsafe { (self.entry().post_deferred)(self.desc.dev_addr(), reqs.as_ptr(), n) })
    }

    pub fn ring(&self) {
        // SAFETY: as in post().
        unsafe { (self.entry().ring)(self.desc.dev_addr()) }
    }

    /// Waits until everything posted has completed (mlx5 queues: the
    /// benchmarks' and tests' quiet; the RMA plugin waits per request).
    pub fn quiet(&self) -> Result<(), DeviceStatus> {
        // SAFETY: as in post(); ptr() checks the family.
        DeviceStatus::check(unsafe { device::rust_gin_mlx5_quiet(self.ptr()) })
    }

    /// Consumes available CQEs.
    pub fn poll(&self) -> Result<(), DeviceStatus> {
        // SAFETY: as in post().
        DeviceStatus::check(unsafe { (self.entry().poll)(self.desc.dev_addr()) })
    }

    /// WQEs the ring keeps free: ionic's producer never fills its ring (a
    /// full ring's doorbell would name the consumer's own index;
    /// `kRingSlack` in ionic/family.h). The RMA plugin's room check must
    /// leave them, or the producer's own credit wait spins where nothing
    /// drives a proxy-mode NIC (tests/rma_plugin.rs fills a queue on ionic).
    pub fn ring_slack(&self) -> u64 {
        match self.family {
            NicFamily::Ionic => 1,
            NicFamily::Mlx5 | NicFamily::Bnxt => 0,
        }
    }

    /// The device-side producer/consumer counters.
    pub fn state(&self) -> rust_gin_mlx5_sq_state {
        let (state, _) = self.state_and_error();
        // SAFETY: `state` points at the queue's live state block; read by value.
        unsafe { std::ptr::read_volatile(state as *const rust_gin_mlx5_sq_state) }
    }

    /// The sticky error this queue reports into, if any.
    pub fn error(&self) -> Option<DeviceError> {
        let (_, error) = self.state_and_error();
        // SAFETY: `error` points at a live record; read by value.
        let r = unsafe { std::ptr::read_volatile(error as *const rust_gin_error) };
        DeviceError::from_record(&r).map(|e| e.on_family(self.family))
    }
}

/// A zeroed sticky-error record in device-visible memory.
pub fn new_error_record(alloc: &dyn Allocator) -> std::io::Result<GpuBuf> {
    alloc.alloc(std::mem::size_of::<rust_gin_error>(), 64, Object::ErrorRecord)
}
