//! The HIP layer (host/gpu/hip.rs) against a recording HIP stand-in: this
//! test binary defines the HIP runtime functions the crate calls, and the
//! linker resolves the crate's references to these definitions before
//! libamdhip64's (an object's definition wins over a shared library's). No GPU
//! is involved: "device" memory is host memory the stand-in hands out. What
//! is checked is what the crate asks HIP for: the allocation call and flags
//! for every object (docs/architecture.md, "Memory placement"), zeroing and
//! copies through hipMemcpy, the matching free, the doorbell page mapping,
//! and errors that name the failing call. One test per process owns the
//! stand-in's state.

use rccl_rust_gin::gpu::hip::HipAllocator;
use rccl_rust_gin::gpu::{Allocator, Object, Placement};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::Mutex;

#[derive(Clone, Debug, PartialEq)]
enum Call {
    HostMalloc { size: usize, flags: c_uint },
    Malloc { size: usize },
    ExtMalloc { size: usize, flags: c_uint },
    HostFree(usize),
    Free(usize),
    Memcpy { dst: usize, src: usize, len: usize, kind: c_int },
    HostRegister { base: usize, len: usize, flags: c_uint },
    HostUnregister(usize),
}

static CALLS: Mutex<Vec<Call>> = Mutex::new(Vec::new());
/// Makes the next hipExtMallocWithFlags fail (hipErrorOutOfMemory, 2).
static FAIL_EXT_MALLOC: Mutex<bool> = Mutex::new(false);

fn log(c: Call) {
    CALLS.lock().unwrap().push(c);
}

fn take() -> Vec<Call> {
    std::mem::take(&mut *CALLS.lock().unwrap())
}

fn alloc_host(size: usize) -> *mut c_void {
    // 4096-aligned, as HIP's allocations are; leaked until the matching free
    // (the test frees few enough that leaking them is harmless).
    let layout = std::alloc::Layout::from_size_align(size.max(1), 4096).unwrap();
    // SAFETY: a non-zero-sized layout.
    unsafe { std::alloc::alloc(layout) as *mut c_void }
}

// --- the stand-in: the HIP runtime functions host/gpu/hip.rs calls -------------
// SAFETY (all): called by the crate with the pointer arguments HIP's
// documentation requires (valid out-pointers, live buffers).

#[no_mangle]
pub unsafe extern "C" fn hipGetDeviceCount(n: *mut c_int) -> c_int {
    unsafe { *n = 1 };
    0
}
#[no_mangle]
pub unsafe extern "C" fn hipGetDevice(d: *mut c_int) -> c_int {
    unsafe { *d = 0 };
    0
}
#[no_mangle]
pub extern "C" fn hipSetDevice(_d: c_int) -> c_int {
    0
}
#[no_mangle]
pub unsafe extern "C" fn hipDeviceGetPCIBusId(buf: *mut c_char, len: c_int, _d: c_int) -> c_int {
    let id = b"0000:c1:00.0\0";
    unsafe { std::ptr::copy_nonoverlapping(id.as_ptr() as *const c_char, buf, id.len().min(len as usize)) };
    0
}
#[no_mangle]
pub unsafe extern "C" fn hipHostMalloc(p: *mut *mut c_void, size: usize, flags: c_uint) -> c_int {
    log(Call::HostMalloc { size, flags });
    unsafe { *p = alloc_host(size) };
    0
}
#[no_mangle]
pub unsafe extern "C" fn hipMalloc(p: *mut *mut c_void, size: usize) -> c_int {
    log(Call::Malloc { size });
    unsafe { *p = alloc_host(size) };
    0
}
#[no_mangle]
pub unsafe extern "C" fn hipExtMallocWithFlags(p: *mut *mut c_void, size: usize, flags: c_uint) -> c_int {
    log(Call::ExtMalloc { size, flags });
    if std::mem::take(&mut *FAIL_EXT_MALLOC.lock().unwrap()) {
        return 2; // hipErrorOutOfMemory
    }
    unsafe { *p = alloc_host(size) };
    0
}
#[no_mangle]
pub unsafe extern "C" fn hipHostGetDevicePointer(d: *mut *mut c_void, h: *mut c_void, _flags: c_uint) -> c_int {
    unsafe { *d = h };
    0
}
#[no_mangle]
pub extern "C" fn hipHostFree(p: *mut c_void) -> c_int {
    log(Call::HostFree(p as usize));
    0
}
#[no_mangle]
pub extern "C" fn hipFree(p: *mut c_void) -> c_int {
    log(Call::Free(p as usize));
    0
}
#[no_mangle]
pub unsafe extern "C" fn hipMemcpy(dst: *mut c_void, src: *const c_void, len: usize, kind: c_int) -> c_int {
    log(Call::Memcpy { dst: dst as usize, src: src as usize, len, kind });
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) };
    0
}
#[no_mangle]
pub extern "C" fn hipHostRegister(p: *mut c_void, len: usize, flags: c_uint) -> c_int {
    log(Call::HostRegister { base: p as usize, len, flags });
    0
}
#[no_mangle]
pub extern "C" fn hipHostUnregister(p: *mut c_void) -> c_int {
    log(Call::HostUnregister(p as usize));
    0
}
#[no_mangle]
pub extern "C" fn hipGetErrorString(_e: c_int) -> *const c_char {
    c"stand-in error".as_ptr()
}

// hip_runtime_api.h values, stated here independently of host/gpu/hip.rs.
const HOST_MALLOC_MAPPED: c_uint = 0x2;
const HOST_MALLOC_COHERENT: c_uint = 0x4000_0000;
const DEVICE_MALLOC_FINEGRAINED: c_uint = 0x1;
const DEVICE_MALLOC_UNCACHED: c_uint = 0x3;
const HOST_REGISTER_MAPPED: c_uint = 0x2;
const HOST_REGISTER_IO_MEMORY: c_uint = 0x4;
const MEMCPY_HOST_TO_DEVICE: c_int = 1;
const MEMCPY_DEVICE_TO_HOST: c_int = 2;

#[test]
fn every_object_is_allocated_copied_and_freed_as_its_placement_says() {
    let a = HipAllocator::new().expect("one (stand-in) GPU");
    assert_eq!(a.pci_bus_id(), "0000:c1:00.0");
    let mut objects: Vec<Object> = Object::ALL.to_vec();
    objects.push(Object::WindowData);
    for o in objects {
        take();
        let b = a.alloc(4096, 4096, o).expect("alloc");
        let calls = take();
        let want_alloc = match o.placement() {
            Placement::HostPinned => Call::HostMalloc { size: 4096, flags: HOST_MALLOC_MAPPED | HOST_MALLOC_COHERENT },
            Placement::Device => Call::Malloc { size: 4096 },
            Placement::DeviceUncached => Call::ExtMalloc { size: 4096, flags: DEVICE_MALLOC_UNCACHED },
            Placement::DeviceFine => Call::ExtMalloc { size: 4096, flags: DEVICE_MALLOC_FINEGRAINED },
        };
        assert_eq!(calls.first(), Some(&want_alloc), "{o:?}: {calls:?}");
        let host_visible = o.placement() == Placement::HostPinned;
        assert_eq!(b.host_addr().is_some(), host_visible, "{o:?}");
        if !host_visible {
            // Zeroed through one host-to-device copy of the whole allocation.
            assert!(
                matches!(calls.get(1), Some(Call::Memcpy { len: 4096, kind: MEMCPY_HOST_TO_DEVICE, dst, .. }) if *dst as u64 == b.dev_addr()),
                "{o:?} zeroed by hipMemcpy: {calls:?}"
            );
            b.write(100, b"rust-gin");
            let mut out = [0u8; 8];
            b.read(100, &mut out);
            assert_eq!(&out, b"rust-gin");
            let copies = take();
            assert!(matches!(copies[0], Call::Memcpy { len: 8, kind: MEMCPY_HOST_TO_DEVICE, .. }), "{copies:?}");
            assert!(matches!(copies[1], Call::Memcpy { len: 8, kind: MEMCPY_DEVICE_TO_HOST, .. }), "{copies:?}");
        }
        let dev = b.dev_addr() as usize;
        drop(b);
        let freed = take();
        let want_free = if host_visible { Call::HostFree(dev) } else { Call::Free(dev) };
        assert_eq!(freed, vec![want_free], "{o:?}");
    }

    // A refused allocation names the call and the object, and frees nothing.
    *FAIL_EXT_MALLOC.lock().unwrap() = true;
    let e = a.alloc(4096, 64, Object::Signals).err().expect("refused");
    let m = e.to_string();
    assert!(m.contains("hipExtMallocWithFlags(hipDeviceMallocUncached)") && m.contains("Signals"), "{m}");
    let calls = take();
    assert_eq!(calls.len(), 1, "nothing to free after a failed allocation: {calls:?}");

    // A doorbell page is registered once (IoMemory | Mapped), shared by two
    // doorbells on it, and unregistered with its last mapping.
    let page = alloc_host(4096) as usize;
    let m1 = a.map_io(page + 0x800, 8).expect("map");
    let m2 = a.map_io(page + 0x900, 8).expect("map again");
    assert_eq!(m1.dev_addr(), page as u64 + 0x800);
    assert_eq!(m2.dev_addr(), page as u64 + 0x900);
    assert_eq!(
        take(),
        vec![Call::HostRegister { base: page, len: 4096, flags: HOST_REGISTER_IO_MEMORY | HOST_REGISTER_MAPPED }]
    );
    drop(m1);
    assert!(take().is_empty(), "still mapped by the second doorbell");
    drop(m2);
    assert_eq!(take(), vec![Call::HostUnregister(page)]);
}
