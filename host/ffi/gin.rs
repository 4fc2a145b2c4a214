//! ncclGin_v14_t: the GIN backend vtable RCCL drives (plugin/gin/gin_v14.h).

use super::nccl::{NcclLogger, NcclNetDeviceHandle, NcclNetProperties, NcclResult};
use std::ffi::{c_char, c_int, c_void};

/// ncclGinProperties_v14_t.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NcclGinProperties {
    pub supports_strong_signals: bool,
    pub supports_va_signals: bool,
}

/// ncclGinConfig_v14_t.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NcclGinConfig {
    pub n_signals: c_int,
    pub n_counters: c_int,
    pub n_contexts: c_int,
    pub queue_depth: c_int,
    pub traffic_class: c_int,
    pub backend_version: c_int,
    pub rank_stride: c_int,
}

pub type InitFn = unsafe extern "C" fn(ctx: *mut *mut c_void, comm_id: u64, logger: NcclLogger) -> NcclResult;
pub type DevicesFn = unsafe extern "C" fn(ndev: *mut c_int) -> NcclResult;
pub type GetGinPropertiesFn = unsafe extern "C" fn(props: *mut NcclGinProperties) -> NcclResult;
pub type GetPropertiesFn = unsafe extern "C" fn(dev: c_int, props: *mut NcclNetProperties) -> NcclResult;
pub type ListenFn =
    unsafe extern "C" fn(ctx: *mut c_void, dev: c_int, handle: *mut c_void, listen_comm: *mut *mut c_void) -> NcclResult;
pub type ConnectFn = unsafe extern "C" fn(
    ctx: *mut c_void,
    handles: *mut *mut c_void,
    nranks: c_int,
    rank: c_int,
    listen_comm: *mut c_void,
    coll_comm: *mut *mut c_void,
) -> NcclResult;
pub type CreateContextFn = unsafe extern "C" fn(
    coll_comm: *mut c_void,
    config: *mut NcclGinConfig,
    gin_ctx: *mut *mut c_void,
    dev_handle: *mut *mut NcclNetDeviceHandle,
) -> NcclResult;
pub type RegMrSymFn = unsafe extern "C" fn(
    coll_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    type_: c_int,
    mr_flags: u64,
    mhandle: *mut *mut c_void,
    gin_handle: *mut *mut c_void,
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
    gin_handle: *mut *mut c_void,
) -> NcclResult;
pub type DeregMrSymFn = unsafe extern "C" fn(coll_comm: *mut c_void, mhandle: *mut c_void) -> NcclResult;
pub type PtrFn = unsafe extern "C" fn(p: *mut c_void) -> NcclResult;
pub type QueryLastErrorFn = unsafe extern "C" fn(gin_ctx: *mut c_void, has_error: *mut bool) -> NcclResult;

/// ncclGin_v14_t: every slot is a nullable C function pointer.
#[repr(C)]
pub struct NcclGinV14 {
    pub name: *const c_char,
    pub init: Option<InitFn>,
    pub devices: Option<DevicesFn>,
    pub get_gin_properties: Option<GetGinPropertiesFn>,
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
    pub gin_progress: Option<PtrFn>,
    pub query_last_error: Option<QueryLastErrorFn>,
    pub finalize: Option<PtrFn>,
}

// SAFETY: the vtable is immutable static data (a name literal and function
// pointers), shared read-only across threads.
unsafe impl Sync for NcclGinV14 {}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<NcclGinProperties>() == 2);
    assert!(size_of::<NcclGinConfig>() == 28);
    assert!(offset_of!(NcclGinConfig, backend_version) == 20);
    assert!(offset_of!(NcclGinConfig, rank_stride) == 24);
    assert!(size_of::<NcclGinV14>() == 136);
    assert!(offset_of!(NcclGinV14, init) == 8);
    assert!(offset_of!(NcclGinV14, get_gin_properties) == 24);
    assert!(offset_of!(NcclGinV14, create_context) == 56);
    assert!(offset_of!(NcclGinV14, reg_mr_sym_dma_buf) == 72);
    assert!(offset_of!(NcclGinV14, gin_progress) == 112);
    assert!(offset_of!(NcclGinV14, query_last_error) == 120);
    assert!(offset_of!(NcclGinV14, finalize) == 128);
};
