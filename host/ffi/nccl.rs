//! Types shared by RCCL's plugin interfaces: result codes, the logger, net
//! properties, the device handle.

use std::ffi::{c_char, c_int, c_void};

/// ncclResult_t (nccl.h.in): a C enum, passed as int.
pub type NcclResult = c_int;
pub const NCCL_SUCCESS: NcclResult = 0;
pub const NCCL_UNHANDLED_CUDA_ERROR: NcclResult = 1;
pub const NCCL_SYSTEM_ERROR: NcclResult = 2;
pub const NCCL_INTERNAL_ERROR: NcclResult = 3;
pub const NCCL_INVALID_ARGUMENT: NcclResult = 4;
pub const NCCL_INVALID_USAGE: NcclResult = 5;
pub const NCCL_REMOTE_ERROR: NcclResult = 6;
pub const NCCL_IN_PROGRESS: NcclResult = 7;
pub const NCCL_TIMEOUT: NcclResult = 8;

/// ncclDebugLogLevel as RCCL numbers it (RCCL inserts ERROR = 1, so every
/// later level is one above upstream NCCL's).
pub mod level {
    pub const NONE: i32 = 0;
    pub const ERROR: i32 = 1;
    pub const VERSION: i32 = 2;
    pub const WARN: i32 = 3;
    pub const INFO: i32 = 4;
    pub const ABORT: i32 = 5;
    pub const TRACE: i32 = 6;
}

/// ncclDebugLogSubSys bits used here.
pub mod subsys {
    pub const INIT: u64 = 0x1;
    pub const NET: u64 = 0x10;
    pub const ENV: u64 = 0x80;
    pub const ALLOC: u64 = 0x100;
}

/// ncclDebugLogger_t: a C variadic logger.
pub type NcclLogger =
    Option<unsafe extern "C" fn(level: c_int, flags: u64, file: *const c_char, line: c_int, fmt: *const c_char, ...)>;

pub const NCCL_NET_HANDLE_MAXSIZE: usize = 128;
pub const NCCL_PTR_HOST: c_int = 0x1;
pub const NCCL_PTR_CUDA: c_int = 0x2;
pub const NCCL_PTR_DMABUF: c_int = 0x4;
pub const NCCL_NET_MR_FLAG_FORCE_SO: u64 = 1 << 0;
pub const NCCL_NET_MR_FLAG_SIGNAL_NEVER_RESET: u64 = 1 << 1;
pub const NCCL_NET_SIGNAL_OP_INC: u32 = 0x1;
pub const NCCL_NET_SIGNAL_OP_ADD: u32 = 0x2;

/// ncclNetDeviceType values used here.
pub const NCCL_NET_DEVICE_HOST: c_int = 0;
pub const NCCL_NET_DEVICE_GIN_PROXY: c_int = 2;
/// rust-gin's GIN type: 8 (shared/reference/contracts.md), or the number the
/// build's `RUST_GIN_TYPE` names. RCCL's side writes it once too, as
/// `RUST_GIN_TYPE` in net_device.h (patch 0001;
/// `scripts/apply-rccl-patches.sh --gin-type N` writes another), and RCCL's
/// build passes that value to cargo as `RUST_GIN_TYPE` (cmake/RustGin.cmake),
/// so both sides agree (docs/configuration.md, "Build-time knobs").
pub const NCCL_NET_DEVICE_GIN_RUST: c_int = gin_type(option_env!("RUST_GIN_TYPE"));

/// The contract's number, when the build names none.
pub const DEFAULT_GIN_TYPE: c_int = 8;

/// `RUST_GIN_TYPE` checked at compile time: a GIN type (not 0, "any", nor 1,
/// the unpack net device) and a bit of RCCL's 32-bit device backend mask.
pub const fn gin_type(v: Option<&str>) -> c_int {
    let Some(s) = v else { return DEFAULT_GIN_TYPE };
    let b = s.as_bytes();
    assert!(!b.is_empty() && b.len() <= 2, "RUST_GIN_TYPE must be a number from 2 to 31");
    let mut n: c_int = 0;
    let mut i = 0;
    while i < b.len() {
        assert!(b[i].is_ascii_digit(), "RUST_GIN_TYPE must be a number from 2 to 31");
        n = n * 10 + (b[i] - b'0') as c_int;
        i += 1;
    }
    assert!(n >= 2 && n <= 31, "RUST_GIN_TYPE must be a number from 2 to 31");
    n
}

pub const NCCL_NET_MAX_DEVS_PER_NIC_V12: usize = 8;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NcclNetVDeviceProps {
    pub ndevs: c_int,
    pub devs: [c_int; NCCL_NET_MAX_DEVS_PER_NIC_V12],
}

/// ncclNetProperties_v12_t.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NcclNetProperties {
    pub name: *mut c_char,
    pub pci_path: *mut c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub force_flush: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: c_int,
    pub net_device_version: c_int,
    pub v_props: NcclNetVDeviceProps,
    pub max_p2p_bytes: usize,
    pub max_coll_bytes: usize,
    pub max_multi_request_size: c_int,
    pub rail_id: i16,
    pub plane_id: i16,
}

/// ncclNetDeviceHandle_v11_t.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NcclNetDeviceHandle {
    pub net_device_type: c_int,
    pub net_device_version: c_int,
    pub handle: *mut c_void,
    pub size: usize,
    pub needs_proxy_progress: c_int,
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<NcclNetVDeviceProps>() == 36);
    assert!(size_of::<NcclNetProperties>() == 128);
    assert!(offset_of!(NcclNetProperties, guid) == 16);
    assert!(offset_of!(NcclNetProperties, ptr_support) == 24);
    assert!(offset_of!(NcclNetProperties, latency) == 44);
    assert!(offset_of!(NcclNetProperties, net_device_type) == 56);
    assert!(offset_of!(NcclNetProperties, net_device_version) == 60);
    assert!(offset_of!(NcclNetProperties, v_props) == 64);
    assert!(offset_of!(NcclNetProperties, max_p2p_bytes) == 104);
    assert!(offset_of!(NcclNetProperties, max_coll_bytes) == 112);
    assert!(offset_of!(NcclNetProperties, max_multi_request_size) == 120);
    assert!(offset_of!(NcclNetProperties, rail_id) == 124);
    assert!(offset_of!(NcclNetProperties, plane_id) == 126);
    assert!(size_of::<NcclNetDeviceHandle>() == 32);
    assert!(offset_of!(NcclNetDeviceHandle, handle) == 8);
    assert!(offset_of!(NcclNetDeviceHandle, size) == 16);
    assert!(offset_of!(NcclNetDeviceHandle, needs_proxy_progress) == 24);
};
