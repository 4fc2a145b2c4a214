//! RCCL's RMA plugin interface, versions 13 to 16 (plugin/rma/rma_v1x.h), as
//! RCCL's proxy GIN (src/gin/gin_host_proxy.cc) drives it.
//!
//! Sources (see docs/rma-plugin.md): v13 is `ncclGin_v13_t` itself
//! (rma_v13.h: `typedef ncclGin_v13_t ncclRma_v13_t`); v14 adds rankStride to
//! the config and drops the device handle and ginHandle; v15 adds `optFlags`
//! to iput, iputSignal and iget; v16 inserts `getRmaProperties` after
//! `devices`. v13, v14 and v15 are 168 bytes with the same slot offsets; v16
//! is 176 bytes. Offsets below are the ones computed from the C headers on
//! x86-64 (LP64).

use super::nccl::{NcclNetDeviceHandle, NcclResult};
use std::ffi::{c_char, c_int, c_void};

/// ncclRmaOptFlags (rma_v15.h): hints on iput, iputSignal and iget.
pub const NCCL_RMA_OPT_FLAGS_DEFAULT: u32 = 0;
/// The caller permits aggregating compatible requests (a doorbell may be
/// deferred to a later call); data and ordering semantics do not change.
pub const NCCL_RMA_OPT_FLAGS_AGGREGATE_REQUESTS: u32 = 1 << 0;
/// Every bit this library knows.
pub const NCCL_RMA_OPT_FLAGS_KNOWN: u32 = NCCL_RMA_OPT_FLAGS_AGGREGATE_REQUESTS;

/// NCCL_GIN_PROXY_VERSION (gin_proxy_device_host_common.h): the
/// netDeviceVersion RCCL's proxy puts in the device handle it creates.
pub const NCCL_GIN_PROXY_VERSION: c_int = 100;
/// NCCL_NET_MAX_REQUESTS (nccl_net.h): RCCL's proxy sizes its per-peer
/// queues as this times maxRecvs.
pub const NCCL_NET_MAX_REQUESTS: c_int = 32;

/// ncclGinConfig_v13_t (gin_v13.h): what a v13 createContext receives.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NcclGinConfigV13 {
    pub n_signals: c_int,
    pub n_counters: c_int,
    pub n_contexts: c_int,
    pub queue_depth: c_int,
    pub traffic_class: c_int,
}

/// ncclRmaConfig_v14_t = ncclRmaConfig_v15_t = ncclRmaConfig_v16_t.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NcclRmaConfig {
    pub n_contexts: c_int,
    pub traffic_class: c_int,
    pub rank_stride: c_int,
}

/// ncclRmaProperties_v16_t.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NcclRmaProperties {
    /// True when every put already received on the communicator is visible
    /// whenever any signal arrives, from any peer, on every NIC it uses.
    pub flushes_all_puts_on_any_signal: bool,
}

// --- callback types shared by every version --------------------------------

// The setup callbacks are the GIN plugin's, slot for slot.
pub use super::gin::{ConnectFn, DeregMrSymFn, DevicesFn, GetPropertiesFn, InitFn, ListenFn, PtrFn, QueryLastErrorFn};
pub type GetRmaPropertiesFn = unsafe extern "C" fn(coll_comm: *mut c_void, props: *mut NcclRmaProperties) -> NcclResult;
pub type IflushFn = unsafe extern "C" fn(
    rma_ctx: *mut c_void,
    context: c_int,
    mhandle: *mut c_void,
    rank: u32,
    request: *mut *mut c_void,
) -> NcclResult;
pub type TestFn = unsafe extern "C" fn(coll_comm: *mut c_void, request: *mut c_void, done: *mut c_int) -> NcclResult;

// --- v14 and later ---------------------------------------------------------

pub type CreateContextFn =
    unsafe extern "C" fn(coll_comm: *mut c_void, config: *mut NcclRmaConfig, rma_ctx: *mut *mut c_void) -> NcclResult;
pub type RegMrSymFn = unsafe extern "C" fn(
    coll_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    type_: c_int,
    mr_flags: u64,
    mhandle: *mut *mut c_void,
) -> NcclResult;
pub type RegMrSymDmaBufFn = unsafe extern "C" fn(
    coll_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    type_: c_int,
    offset: u64,
    fd: c_int,
    mr_flags: u64,
    mhandle: *mut *mut c_void,
) -> NcclResult;

// --- v15 and v16: with optFlags --------------------------------------------

pub type IputFn = unsafe extern "C" fn(
    rma_ctx: *mut c_void,
    context: c_int,
    src_off: u64,
    src_mhandle: *mut c_void,
    size: usize,
    dst_off: u64,
    dst_mhandle: *mut c_void,
    rank: u32,
    opt_flags: u32,
    request: *mut *mut c_void,
) -> NcclResult;
pub type IputSignalFn = unsafe extern "C" fn(
    rma_ctx: *mut c_void,
    context: c_int,
    src_off: u64,
    src_mhandle: *mut c_void,
    size: usize,
    dst_off: u64,
    dst_mhandle: *mut c_void,
    rank: u32,
    signal_off: u64,
    signal_mhandle: *mut c_void,
    signal_value: u64,
    signal_op: u32,
    is_strong_signal: bool,
    opt_flags: u32,
    request: *mut *mut c_void,
) -> NcclResult;
pub type IgetFn = unsafe extern "C" fn(
    rma_ctx: *mut c_void,
    context: c_int,
    remote_off: u64,
    remote_mhandle: *mut c_void,
    size: usize,
    local_off: u64,
    local_mhandle: *mut c_void,
    rank: u32,
    opt_flags: u32,
    request: *mut *mut c_void,
) -> NcclResult;

// --- v14: without optFlags -------------------------------------------------

pub type IputV14Fn = unsafe extern "C" fn(
    rma_ctx: *mut c_void,
    context: c_int,
    src_off: u64,
    src_mhandle: *mut c_void,
    size: usize,
    dst_off: u64,
    dst_mhandle: *mut c_void,
    rank: u32,
    request: *mut *mut c_void,
) -> NcclResult;
pub type IputSignalV14Fn = unsafe extern "C" fn(
    rma_ctx: *mut c_void,
    context: c_int,
    src_off: u64,
    src_mhandle: *mut c_void,
    size: usize,
    dst_off: u64,
    dst_mhandle: *mut c_void,
    rank: u32,
    signal_off: u64,
    signal_mhandle: *mut c_void,
    signal_value: u64,
    signal_op: u32,
    is_strong_signal: bool,
    request: *mut *mut c_void,
) -> NcclResult;
pub type IgetV14Fn = unsafe extern "C" fn(
    rma_ctx: *mut c_void,
    context: c_int,
    remote_off: u64,
    remote_mhandle: *mut c_void,
    size: usize,
    local_off: u64,
    local_mhandle: *mut c_void,
    rank: u32,
    request: *mut *mut c_void,
) -> NcclResult;

// --- v13 (= ncclGin_v13_t): device handle, ginHandle, no isStrongSignal ----

pub type CreateContextV13Fn = unsafe extern "C" fn(
    coll_comm: *mut c_void,
    config: *mut NcclGinConfigV13,
    gin_ctx: *mut *mut c_void,
    dev_handle: *mut *mut NcclNetDeviceHandle,
) -> NcclResult;
pub type RegMrSymV13Fn = unsafe extern "C" fn(
    coll_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    type_: c_int,
    mr_flags: u64,
    mhandle: *mut *mut c_void,
    gin_handle: *mut *mut c_void,
) -> NcclResult;
pub type RegMrSymDmaBufV13Fn = unsafe extern "C" fn(
    coll_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    type_: c_int,
    offset: u64,
    fd: c_int,
    mr_flags: u64,
    mhandle: *mut *mut c_void,
    gin_handle: *mut *mut c_void,
) -> NcclResult;
pub type IputSignalV13Fn = unsafe extern "C" fn(
    gin_ctx: *mut c_void,
    context: c_int,
    src_off: u64,
    src_mhandle: *mut c_void,
    size: usize,
    dst_off: u64,
    dst_mhandle: *mut c_void,
    rank: u32,
    signal_off: u64,
    signal_mhandle: *mut c_void,
    signal_value: u64,
    signal_op: u32,
    request: *mut *mut c_void,
) -> NcclResult;

/// ncclRma_v16_t: v15 plus getRmaProperties at offset 24.
#[repr(C)]
pub struct NcclRmaV16 {
    pub name: *const c_char,
    pub init: Option<InitFn>,
    pub devices: Option<DevicesFn>,
    pub get_rma_properties: Option<GetRmaPropertiesFn>,
    pub get_properties: Option<GetPropertiesFn>,
    pub listen: Option<ListenFn>,
    pub connect: Option<ConnectFn>,
    pub create_context: Option<CreateContextFn>,
    pub reg_mr_sym: Option<RegMrSymFn>,
    pub reg_mr_sym_dma_buf: Option<RegMrSymDmaBufFn>,
    pub dereg_mr_sym: Option<DeregMrSymFn>,
    pub destroy_context: Option<PtrFn>,
    pub close_coll: Option<PtrFn>,
    pub close_listen: Option<PtrFn>,
    pub iput: Option<IputFn>,
    pub iput_signal: Option<IputSignalFn>,
    pub iget: Option<IgetFn>,
    pub iflush: Option<IflushFn>,
    pub test: Option<TestFn>,
    pub rma_progress: Option<PtrFn>,
    pub query_last_error: Option<QueryLastErrorFn>,
    pub finalize: Option<PtrFn>,
}

/// ncclRma_v15_t: iput, iputSignal and iget take optFlags.
#[repr(C)]
pub struct NcclRmaV15 {
    pub name: *const c_char,
    pub init: Option<InitFn>,
    pub devices: Option<DevicesFn>,
    pub get_properties: Option<GetPropertiesFn>,
    pub listen: Option<ListenFn>,
    pub connect: Option<ConnectFn>,
    pub create_context: Option<CreateContextFn>,
    pub reg_mr_sym: Option<RegMrSymFn>,
    pub reg_mr_sym_dma_buf: Option<RegMrSymDmaBufFn>,
    pub dereg_mr_sym: Option<DeregMrSymFn>,
    pub destroy_context: Option<PtrFn>,
    pub close_coll: Option<PtrFn>,
    pub close_listen: Option<PtrFn>,
    pub iput: Option<IputFn>,
    pub iput_signal: Option<IputSignalFn>,
    pub iget: Option<IgetFn>,
    pub iflush: Option<IflushFn>,
    pub test: Option<TestFn>,
    pub rma_progress: Option<PtrFn>,
    pub query_last_error: Option<QueryLastErrorFn>,
    pub finalize: Option<PtrFn>,
}

/// ncclRma_v14_t: no optFlags.
#[repr(C)]
pub struct NcclRmaV14 {
    pub name: *const c_char,
    pub init: Option<InitFn>,
    pub devices: Option<DevicesFn>,
    pub get_properties: Option<GetPropertiesFn>,
    pub listen: Option<ListenFn>,
    pub connect: Option<ConnectFn>,
    pub create_context: Option<CreateContextFn>,
    pub reg_mr_sym: Option<RegMrSymFn>,
    pub reg_mr_sym_dma_buf: Option<RegMrSymDmaBufFn>,
    pub dereg_mr_sym: Option<DeregMrSymFn>,
    pub destroy_context: Option<PtrFn>,
    pub close_coll: Option<PtrFn>,
    pub close_listen: Option<PtrFn>,
    pub iput: Option<IputV14Fn>,
    pub iput_signal: Option<IputSignalV14Fn>,
    pub iget: Option<IgetV14Fn>,
    pub iflush: Option<IflushFn>,
    pub test: Option<TestFn>,
    pub rma_progress: Option<PtrFn>,
    pub query_last_error: Option<QueryLastErrorFn>,
    pub finalize: Option<PtrFn>,
}

/// ncclRma_v13_t = ncclGin_v13_t: createContext returns a device handle,
/// registrations a ginHandle, iputSignal has no isStrongSignal, and slot 18
/// is named ginProgress.
#[repr(C)]
pub struct NcclRmaV13 {
    pub name: *const c_char,
    pub init: Option<InitFn>,
    pub devices: Option<DevicesFn>,
    pub get_properties: Option<GetPropertiesFn>,
    pub listen: Option<ListenFn>,
    pub connect: Option<ConnectFn>,
    pub create_context: Option<CreateContextV13Fn>,
    pub reg_mr_sym: Option<RegMrSymV13Fn>,
    pub reg_mr_sym_dma_buf: Option<RegMrSymDmaBufV13Fn>,
    pub dereg_mr_sym: Option<DeregMrSymFn>,
    pub destroy_context: Option<PtrFn>,
    pub close_coll: Option<PtrFn>,
    pub close_listen: Option<PtrFn>,
    pub iput: Option<IputV14Fn>,
    pub iput_signal: Option<IputSignalV13Fn>,
    pub iget: Option<IgetV14Fn>,
    pub iflush: Option<IflushFn>,
    pub test: Option<TestFn>,
    pub gin_progress: Option<PtrFn>,
    pub query_last_error: Option<QueryLastErrorFn>,
    pub finalize: Option<PtrFn>,
}

// SAFETY (all four): the vtables are immutable static data (a name literal
// and function pointers), shared read-only across threads.
unsafe impl Sync for NcclRmaV16 {}
// SAFETY: as above.
unsafe impl Sync for NcclRmaV15 {}
// SAFETY: as above.
unsafe impl Sync for NcclRmaV14 {}
// SAFETY: as above.
unsafe impl Sync for NcclRmaV13 {}

/// Offsets of the slots v13, v14 and v15 share (research memo section 7).
macro_rules! assert_168_layout {
    ($t:ty, $progress:ident) => {
        assert!(size_of::<$t>() == 168);
        assert!(align_of::<$t>() == 8);
        assert!(offset_of!($t, name) == 0);
        assert!(offset_of!($t, init) == 8);
        assert!(offset_of!($t, devices) == 16);
        assert!(offset_of!($t, get_properties) == 24);
        assert!(offset_of!($t, listen) == 32);
        assert!(offset_of!($t, connect) == 40);
        assert!(offset_of!($t, create_context) == 48);
        assert!(offset_of!($t, reg_mr_sym) == 56);
        assert!(offset_of!($t, reg_mr_sym_dma_buf) == 64);
        assert!(offset_of!($t, dereg_mr_sym) == 72);
        assert!(offset_of!($t, destroy_context) == 80);
        assert!(offset_of!($t, close_coll) == 88);
        assert!(offset_of!($t, close_listen) == 96);
        assert!(offset_of!($t, iput) == 104);
        assert!(offset_of!($t, iput_signal) == 112);
        assert!(offset_of!($t, iget) == 120);
        assert!(offset_of!($t, iflush) == 128);
        assert!(offset_of!($t, test) == 136);
        assert!(offset_of!($t, $progress) == 144);
        assert!(offset_of!($t, query_last_error) == 152);
        assert!(offset_of!($t, finalize) == 160);
    };
}

const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<NcclGinConfigV13>() == 20);
    assert!(offset_of!(NcclGinConfigV13, n_contexts) == 8);
    assert!(offset_of!(NcclGinConfigV13, traffic_class) == 16);
    assert!(size_of::<NcclRmaConfig>() == 12);
    assert!(offset_of!(NcclRmaConfig, traffic_class) == 4);
    assert!(offset_of!(NcclRmaConfig, rank_stride) == 8);
    assert!(size_of::<NcclRmaProperties>() == 1);
    assert!(align_of::<NcclRmaProperties>() == 1);

    assert_168_layout!(NcclRmaV13, gin_progress);
    assert_168_layout!(NcclRmaV14, rma_progress);
    assert_168_layout!(NcclRmaV15, rma_progress);

    assert!(size_of::<NcclRmaV16>() == 176);
    assert!(align_of::<NcclRmaV16>() == 8);
    assert!(offset_of!(NcclRmaV16, name) == 0);
    assert!(offset_of!(NcclRmaV16, init) == 8);
    assert!(offset_of!(NcclRmaV16, devices) == 16);
    assert!(offset_of!(NcclRmaV16, get_rma_properties) == 24);
    assert!(offset_of!(NcclRmaV16, get_properties) == 32);
    assert!(offset_of!(NcclRmaV16, listen) == 40);
    assert!(offset_of!(NcclRmaV16, connect) == 48);
    assert!(offset_of!(NcclRmaV16, create_context) == 56);
    assert!(offset_of!(NcclRmaV16, reg_mr_sym) == 64);
    assert!(offset_of!(NcclRmaV16, reg_mr_sym_dma_buf) == 72);
    assert!(offset_of!(NcclRmaV16, dereg_mr_sym) == 80);
    assert!(offset_of!(NcclRmaV16, destroy_context) == 88);
    assert!(offset_of!(NcclRmaV16, close_coll) == 96);
    assert!(offset_of!(NcclRmaV16, close_listen) == 104);
    assert!(offset_of!(NcclRmaV16, iput) == 112);
    assert!(offset_of!(NcclRmaV16, iput_signal) == 120);
    assert!(offset_of!(NcclRmaV16, iget) == 128);
    assert!(offset_of!(NcclRmaV16, iflush) == 136);
    assert!(offset_of!(NcclRmaV16, test) == 144);
    assert!(offset_of!(NcclRmaV16, rma_progress) == 152);
    assert!(offset_of!(NcclRmaV16, query_last_error) == 160);
    assert!(offset_of!(NcclRmaV16, finalize) == 168);
};
