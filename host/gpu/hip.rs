//! GPU-visible memory through the HIP runtime (hip-sys): host-pinned memory
//! (hipHostMalloc, coherent and mapped, rocSHMEM's default for queues),
//! device memory (hipMalloc; uncached and fine-grained through
//! hipExtMallocWithFlags, see gpu/object.rs for which object gets which),
//! and GPU mappings of a NIC's doorbell page
//! (hipHostRegister with hipHostRegisterIoMemory, the HIP-level equivalent of
//! rocSHMEM's hsa_amd_memory_lock_to_pool and of NCCL's
//! cudaHostRegister(..., cudaHostRegisterIoMemory)).
//!
//! Only functions whose C signatures did not change up to ROCm 7 are called
//! (docs/dependencies.md lists them). hip-sys declares them returning its
//! `hipError_t`, a Rust enum: a code it does not list (newer ROCm) would be
//! undefined behaviour, so every call goes through [`hip!`], which calls the
//! same C function through a pointer returning `i32`.
//!
//! UNVERIFIED ON HARDWARE: no AMD GPU was available while this was written;
//! only the no-GPU path (hipGetDeviceCount = hipErrorNoDevice) has run.

use super::{record, Allocator, Backing, GpuBuf, Object, Placement};
use crate::error::{Error, Result};
use hip_sys::hiprt;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::{Mutex, OnceLock};

/// Calls the hip-sys function `$f` through a function pointer of the same
/// arguments that returns `i32`. Expands to an unsafe operation: the caller's
/// `unsafe` block vouches for the arguments.
///
/// The `let declared` line makes the compiler check the argument types
/// against hip-sys's declaration. The transmute then changes only the return
/// type: HIP's `hipError_t` is a C enum of non-negative values below 2^31,
/// which the C ABI returns as a 32-bit integer, exactly as C callers read it
/// (`int rc = hipMalloc(...)`); the function called is the same symbol.
macro_rules! hip {
    ($f:ident ( $($arg:expr),* $(,)? ) as fn( $($t:ty),* $(,)? )) => {{
        let declared: unsafe extern "C" fn($($t),*) -> hiprt::hipError_t = hiprt::$f;
        let f = std::mem::transmute::<
            unsafe extern "C" fn($($t),*) -> hiprt::hipError_t,
            unsafe extern "C" fn($($t),*) -> i32,
        >(declared);
        f($($arg),*)
    }};
}

const HIP_SUCCESS: i32 = 0;
/// hipErrorNoDevice: no GPU visible to the runtime.
pub const HIP_ERROR_NO_DEVICE: i32 = 100;
/// hipErrorHostMemoryAlreadyRegistered.
const HIP_ERROR_ALREADY_REGISTERED: i32 = 712;

// Flag values as in hip_runtime_api.h (unchanged from HIP 5.4 to ROCm 7).
const HOST_MALLOC_MAPPED: c_uint = 0x2;
const HOST_MALLOC_COHERENT: c_uint = 0x4000_0000;
const HOST_REGISTER_MAPPED: c_uint = 0x2;
// hipExtMallocWithFlags flags (hip_runtime_api.h): hipDeviceMallocFinegrained
// is in the HIP 5.2 headers hip-sys was generated from; hipDeviceMallocUncached
// (0x3, after hipMallocSignalMemory 0x2) is in later ROCm releases only, and
// is what rocSHMEM allocates NIC-written memory with (src/gpu_ib/connection.cpp).
// An older runtime refuses the flag: the allocation fails with HIP's error.
const DEVICE_MALLOC_FINEGRAINED: c_uint = 0x1;
const DEVICE_MALLOC_UNCACHED: c_uint = 0x3;
const HOST_REGISTER_IO_MEMORY: c_uint = 0x4;

/// HIP's text for an error code (hipGetErrorString), with the number.
pub fn error_text(rc: i32) -> String {
    let declared: unsafe extern "C" fn(hiprt::hipError_t) -> *const c_char = hiprt::hipGetErrorString;
    // SAFETY: the same symbol called with its C argument type: hipError_t is
    // a C enum passed as a 32-bit integer, so any code (known to hip-sys or
    // not) is a valid argument. The runtime returns a static string (or NULL).
    let text = unsafe {
        let f = std::mem::transmute::<
            unsafe extern "C" fn(hiprt::hipError_t) -> *const c_char,
            unsafe extern "C" fn(i32) -> *const c_char,
        >(declared);
        let p = f(rc);
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    format!("{} (HIP error {rc})", if text.is_empty() { "unknown error" } else { text.as_str() })
}

fn io_err(what: &str, rc: i32) -> std::io::Error {
    std::io::Error::other(format!("{what}: {}", error_text(rc)))
}

/// The number of GPUs HIP sees (hipGetDeviceCount), or the error code.
pub fn device_count() -> std::result::Result<i32, i32> {
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid out-pointer for the call.
    let rc = unsafe { hip!(hipGetDeviceCount(&mut n) as fn(*mut c_int)) };
    if rc == HIP_SUCCESS {
        Ok(n)
    } else {
        Err(rc)
    }
}

/// The calling thread's current device (hipGetDevice).
fn current_device() -> std::io::Result<i32> {
    let mut d: c_int = -1;
    // SAFETY: `d` is a valid out-pointer for the call.
    let rc = unsafe { hip!(hipGetDevice(&mut d) as fn(*mut c_int)) };
    if rc != HIP_SUCCESS {
        return Err(io_err("hipGetDevice", rc));
    }
    Ok(d)
}

fn set_device(d: i32) -> std::io::Result<()> {
    // SAFETY: plain integer argument.
    let rc = unsafe { hip!(hipSetDevice(d) as fn(c_int)) };
    if rc != HIP_SUCCESS {
        return Err(io_err(&format!("hipSetDevice({d})"), rc));
    }
    Ok(())
}

/// Runs `f` with `device` current on this thread, restoring the previous one
/// (HIP allocates on, and maps for, the current device).
fn on_device<T>(device: i32, f: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<T> {
    let before = current_device()?;
    if before == device {
        return f();
    }
    set_device(device)?;
    let r = f();
    let _ = set_device(before);
    r
}

/// Allocates GPU-visible memory with HIP, on the GPU that was current when it
/// was created.
pub struct HipAllocator {
    device: i32,
    pci_bus_id: String,
}

impl HipAllocator {
    /// The allocator for the calling thread's current GPU. Fails with
    /// Error::System saying what is missing when HIP sees no GPU.
    pub fn new() -> Result<HipAllocator> {
        match device_count() {
            Ok(n) if n > 0 => {}
            Ok(_) | Err(HIP_ERROR_NO_DEVICE) => {
                return Err(Error::System(format!(
                    "no GPU: hipGetDeviceCount reports no device ({}). HIP needs an AMD GPU with /dev/kfd and \
                     /dev/dri/renderD* accessible (the render and video groups) and not hidden by \
                     HIP_VISIBLE_DEVICES or ROCR_VISIBLE_DEVICES; to run without a GPU set RCCL_RUST_GIN_PROVIDER=emu",
                    error_text(HIP_ERROR_NO_DEVICE)
                )))
            }
            Err(rc) => {
                return Err(Error::System(format!(
                    "the HIP runtime is unusable: hipGetDeviceCount failed with {}; check the ROCm installation \
                     and driver (amdgpu/KFD), or set RCCL_RUST_GIN_PROVIDER=emu to run without a GPU",
                    error_text(rc)
                )))
            }
        }
        let device = current_device().map_err(|e| Error::System(e.to_string()))?;
        let mut buf = [0 as c_char; 64];
        // SAFETY: `buf` holds 64 bytes, the length passed; HIP NUL-terminates.
        let rc = unsafe {
            hip!(hipDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as c_int, device) as fn(*mut c_char, c_int, c_int))
        };
        let pci_bus_id = if rc == HIP_SUCCESS {
            buf[buf.len() - 1] = 0;
            // SAFETY: NUL-terminated within the buffer (its last byte is 0).
            unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
        } else {
            format!("unknown ({})", error_text(rc))
        };
        Ok(HipAllocator { device, pci_bus_id })
    }

    /// The HIP device index memory comes from.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// The GPU's PCI address (hipDeviceGetPCIBusId), e.g. `0000:c1:00.0`.
    pub fn pci_bus_id(&self) -> &str {
        &self.pci_bus_id
    }

    /// Maps `[addr, addr+len)` of an I/O mapping (a NIC's UAR page, mmap'ed
    /// by rdma-core) for this GPU. Whole pages are registered, once per page:
    /// several QPs' doorbells may share one UAR page (rdma-core hands out four
    /// doorbell registers per NC UAR page), so registrations are counted and
    /// the page is unregistered when its last mapping drops.
    pub fn map_io(&self, addr: usize, len: usize) -> std::io::Result<IoMapping> {
        let page = page_size();
        let base = addr & !(page - 1);
        let end = (addr + len.max(1)).div_ceil(page) * page;
        let key = (self.device, base);
        let mut maps = io_maps().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = maps.get_mut(&key) {
            if m.len >= end - base {
                m.count += 1;
                return Ok(IoMapping { key, dev_base: m.dev, offset: addr - base });
            }
            return Err(std::io::Error::other(format!(
                "I/O page {base:#x} is already mapped for the GPU with a shorter length ({} < {})",
                m.len,
                end - base
            )));
        }
        let dev = on_device(self.device, || {
            // SAFETY: [base, end) is a live mapping of the caller's (the UAR
            // page rdma-core mmap'ed); HIP only records and maps it.
            let rc = unsafe {
                hip!(hipHostRegister(base as *mut c_void, end - base, HOST_REGISTER_IO_MEMORY | HOST_REGISTER_MAPPED)
                    as fn(*mut c_void, usize, c_uint))
            };
            // Registered by someone else already (another library mapping the
            // same page): use it, but leave the unregistering to them.
            let owned = rc == HIP_SUCCESS;
            if rc != HIP_SUCCESS && rc != HIP_ERROR_ALREADY_REGISTERED {
                return Err(io_err(
                    &format!(
                        "hipHostRegister(IoMemory) of the doorbell page {base:#x} ({} bytes) for GPU {}: the GPU \
                         cannot reach the NIC's doorbell (this needs a ROCm that supports hipHostRegisterIoMemory \
                         and an IOMMU/ACS setup that allows GPU-to-NIC peer writes)",
                        end - base,
                        self.device
                    ),
                    rc,
                ));
            }
            let mut d: *mut c_void = std::ptr::null_mut();
            // SAFETY: `d` is a valid out-pointer; `base` was registered above.
            let rc = unsafe {
                hip!(hipHostGetDevicePointer(&mut d, base as *mut c_void, 0)
                    as fn(*mut *mut c_void, *mut c_void, c_uint))
            };
            if rc != HIP_SUCCESS || d.is_null() {
                if owned {
                    // SAFETY: undoing the registration above.
                    unsafe { hip!(hipHostUnregister(base as *mut c_void) as fn(*mut c_void)) };
                }
                return Err(io_err(&format!("hipHostGetDevicePointer of the doorbell page {base:#x}"), rc));
            }
            Ok((d as u64, owned))
        })?;
        let (dev, owned) = dev;
        maps.insert(key, IoEntry { count: 1, dev, len: end - base, owned });
        Ok(IoMapping { key, dev_base: dev, offset: addr - base })
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

struct IoEntry {
    count: usize,
    dev: u64,
    len: usize,
    /// Registered by map_io (not found already registered).
    owned: bool,
}

/// Registered I/O pages by (HIP device, page address).
fn io_maps() -> &'static Mutex<HashMap<(i32, usize), IoEntry>> {
    static M: OnceLock<Mutex<HashMap<(i32, usize), IoEntry>>> = OnceLock::new();
    M.get_or_init(|| Mutex::new(HashMap::new()))
}

/// A GPU mapping of (part of) an I/O page; unregistered with its last user.
pub struct IoMapping {
    key: (i32, usize),
    dev_base: u64,
    offset: usize,
}

impl IoMapping {
    /// The address kernels use for the mapped `addr`.
    pub fn dev_addr(&self) -> u64 {
        self.dev_base + self.offset as u64
    }
}

impl Drop for IoMapping {
    fn drop(&mut self) {
        let mut maps = io_maps().lock().unwrap_or_else(|e| e.into_inner());
        let last = match maps.get_mut(&self.key) {
            Some(m) => {
                m.count -= 1;
                (m.count == 0).then_some(m.owned)
            }
            None => None,
        };
        if let Some(owned) = last {
            maps.remove(&self.key);
            let (device, base) = self.key;
            if !owned {
                return;
            }
            let _ = on_device(device, || {
                // SAFETY: the page was registered by map_io and no mapping of
                // it is left.
                let rc = unsafe { hip!(hipHostUnregister(base as *mut c_void) as fn(*mut c_void)) };
                if rc != HIP_SUCCESS {
                    tracing::warn!("hipHostUnregister of doorbell page {base:#x}: {}", error_text(rc));
                }
                Ok(())
            });
        }
    }
}

/// Memory HIP allocated for a [`GpuBuf`], freed with it.
pub(super) struct HipMem {
    ptr: *mut c_void,
    placement: Placement,
    device: i32,
}

/// The HIP call that allocates `placement` (for messages).
fn allocator_call(placement: Placement) -> &'static str {
    match placement {
        Placement::HostPinned => "hipHostMalloc(Mapped | Coherent)",
        Placement::Device => "hipMalloc",
        Placement::DeviceUncached => "hipExtMallocWithFlags(hipDeviceMallocUncached)",
        Placement::DeviceFine => "hipExtMallocWithFlags(hipDeviceMallocFinegrained)",
    }
}

// SAFETY: HipMem owns its allocation and hands out only raw addresses; the
// HIP runtime is thread-safe, and every access to the memory goes through raw
// pointers, atomics or hipMemcpy (it is shared with a GPU and a NIC).
unsafe impl Send for HipMem {}
// SAFETY: as above; &HipMem exposes no references into the memory.
unsafe impl Sync for HipMem {}

impl HipMem {
    /// Copies host bytes into the (device-only) allocation at `off`.
    pub(super) fn copy_in(&self, off: usize, data: &[u8]) -> std::io::Result<()> {
        self.copy(true, off, data.as_ptr() as *mut u8, data.len())
    }
    /// Copies from the allocation at `off` into `out`.
    pub(super) fn copy_out(&self, off: usize, out: &mut [u8]) -> std::io::Result<()> {
        self.copy(false, off, out.as_mut_ptr(), out.len())
    }
    fn copy(&self, to_device: bool, off: usize, host: *mut u8, len: usize) -> std::io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: the caller (GpuBuf) checked off+len against the allocation.
        let dev = unsafe { (self.ptr as *mut u8).add(off) };
        let (dst, src, kind) = if to_device {
            (dev as *mut c_void, host as *const c_void, hiprt::hipMemcpyKind::hipMemcpyHostToDevice)
        } else {
            (host as *mut c_void, dev as *const c_void, hiprt::hipMemcpyKind::hipMemcpyDeviceToHost)
        };
        on_device(self.device, || {
            // SAFETY: dst and src are valid for len bytes (device allocation in
            // bounds, host slice of len bytes); the kind is a listed variant.
            let rc = unsafe {
                hip!(hipMemcpy(dst, src, len, kind) as fn(*mut c_void, *const c_void, usize, hiprt::hipMemcpyKind))
            };
            if rc != HIP_SUCCESS {
                return Err(io_err(&format!("hipMemcpy of {len} bytes"), rc));
            }
            Ok(())
        })
    }
}

impl Drop for HipMem {
    fn drop(&mut self) {
        let rc = match self.placement {
            // SAFETY: allocated by hipHostMalloc in alloc() and freed once.
            Placement::HostPinned => unsafe { hip!(hipHostFree(self.ptr) as fn(*mut c_void)) },
            // SAFETY: allocated by hipMalloc or hipExtMallocWithFlags in
            // alloc() (both freed with hipFree), and freed once.
            Placement::Device | Placement::DeviceUncached | Placement::DeviceFine => unsafe {
                hip!(hipFree(self.ptr) as fn(*mut c_void))
            },
        };
        if rc != HIP_SUCCESS {
            tracing::warn!("freeing GPU-visible memory at {:p}: {}", self.ptr, error_text(rc));
        }
    }
}

impl Allocator for HipAllocator {
    fn alloc(&self, len: usize, align: usize, object: Object) -> std::io::Result<GpuBuf> {
        record(object, len);
        let placement = object.placement();
        let size = len.max(1);
        let mem = on_device(self.device, || {
            let mut p: *mut c_void = std::ptr::null_mut();
            let rc = match placement {
                // SAFETY: `p` is a valid out-pointer.
                Placement::HostPinned => unsafe {
                    hip!(hipHostMalloc(&mut p, size, HOST_MALLOC_MAPPED | HOST_MALLOC_COHERENT)
                        as fn(*mut *mut c_void, usize, c_uint))
                },
                // SAFETY: `p` is a valid out-pointer.
                Placement::Device => unsafe { hip!(hipMalloc(&mut p, size) as fn(*mut *mut c_void, usize)) },
                // SAFETY: `p` is a valid out-pointer.
                Placement::DeviceUncached => unsafe {
                    hip!(hipExtMallocWithFlags(&mut p, size, DEVICE_MALLOC_UNCACHED) as fn(*mut *mut c_void, usize, c_uint))
                },
                // SAFETY: `p` is a valid out-pointer.
                Placement::DeviceFine => unsafe {
                    hip!(hipExtMallocWithFlags(&mut p, size, DEVICE_MALLOC_FINEGRAINED)
                        as fn(*mut *mut c_void, usize, c_uint))
                },
            };
            if rc != HIP_SUCCESS || p.is_null() {
                return Err(io_err(
                    &format!("{} of {size} bytes for the {object:?} on GPU {}", allocator_call(placement), self.device),
                    rc,
                ));
            }
            // Owned from here: freed on every error path below by HipMem's Drop.
            let mem = HipMem { ptr: p, placement, device: self.device };
            if align > 1 && !(p as usize).is_multiple_of(align) {
                return Err(std::io::Error::other(format!(
                    "HIP returned {p:p}, not aligned to the {align} bytes asked for"
                )));
            }
            match placement {
                // SAFETY: `size` bytes just allocated and host-accessible.
                Placement::HostPinned => unsafe { std::ptr::write_bytes(p as *mut u8, 0, size) },
                // hipMemcpy from pageable host memory returns once the copy is
                // done; hipMemset may return before (asynchronous on the null
                // stream), and no device-wide synchronisation is wanted here.
                Placement::Device | Placement::DeviceUncached | Placement::DeviceFine => {
                    mem.copy_in(0, &vec![0u8; size])?
                }
            }
            Ok(mem)
        })?;
        let (host, dev) = match placement {
            Placement::HostPinned => {
                let mut d: *mut c_void = std::ptr::null_mut();
                let rc = on_device(self.device, || {
                    // SAFETY: `d` is a valid out-pointer; mem.ptr is a live
                    // hipHostMalloc allocation made with hipHostMallocMapped.
                    let rc = unsafe {
                        hip!(hipHostGetDevicePointer(&mut d, mem.ptr, 0) as fn(*mut *mut c_void, *mut c_void, c_uint))
                    };
                    Ok(rc)
                })?;
                if rc != HIP_SUCCESS || d.is_null() {
                    return Err(io_err("hipHostGetDevicePointer of pinned memory", rc));
                }
                (Some(mem.ptr as usize), d as u64)
            }
            Placement::Device | Placement::DeviceUncached | Placement::DeviceFine => (None, mem.ptr as u64),
        };
        Ok(GpuBuf { host, dev, len, object, _backing: Backing::Hip(mem) })
    }

    fn describe(&self) -> String {
        format!("HIP device {} (PCI {})", self.device, self.pci_bus_id)
    }
}

/// hipMemRangeHandleTypeDmaBufFd (hip_runtime_api.h).
const MEM_RANGE_HANDLE_TYPE_DMABUF_FD: c_int = 0x1;

/// A dma-buf exported for a GPU address range, to register with the NIC.
pub struct DmaBufRange {
    pub fd: std::os::fd::OwnedFd,
    /// Offset of the asked-for address inside the (page-aligned) dma-buf.
    pub offset: u64,
}

/// Exports `[addr, addr+len)` of GPU memory as a dma-buf
/// (hipMemGetHandleForAddressRange over the enclosing pages, as NCCL does
/// with cuMemGetHandleForAddressRange). The function is looked up at run
/// time: HIP 5.2, which hip-sys was generated from, does not have it; an
/// older runtime gets an error saying so.
pub fn export_dmabuf(addr: u64, len: u64) -> std::result::Result<DmaBufRange, String> {
    type GetHandle = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int, u64) -> i32;
    static GET: OnceLock<Option<GetHandle>> = OnceLock::new();
    let get = GET.get_or_init(|| {
        // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name; the
        // symbol, when present, has hip_runtime_api.h's signature.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"hipMemGetHandleForAddressRange".as_ptr()) };
        // SAFETY: a non-null symbol of the declared type.
        (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, GetHandle>(p) })
    });
    let Some(get) = get else {
        return Err("this HIP runtime has no hipMemGetHandleForAddressRange (ROCm 6 or newer exports dma-bufs)".into());
    };
    let page = page_size() as u64;
    let start = addr & !(page - 1);
    let end = addr.checked_add(len).and_then(|e| e.checked_add(page - 1)).ok_or("range wraps")? & !(page - 1);
    let mut fd: c_int = -1;
    // SAFETY: `fd` is a valid out-pointer for the int HIP writes; the range
    // is the caller's GPU allocation, page-aligned as the call requires.
    let rc = unsafe {
        get(&mut fd as *mut c_int as *mut c_void, start as *mut c_void, (end - start) as usize, MEM_RANGE_HANDLE_TYPE_DMABUF_FD, 0)
    };
    if rc != HIP_SUCCESS || fd < 0 {
        return Err(format!("hipMemGetHandleForAddressRange({start:#x}, {} bytes): {}", end - start, error_text(rc)));
    }
    // SAFETY: HIP returned a new file descriptor we now own.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    Ok(DmaBufRange { fd, offset: addr - start })
}
