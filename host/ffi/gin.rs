//! ncclGin_v14_t: the GIN backend vtable RCCL drives (plugin/gin/gin_v14.h),
//! and ncclGin_v15_t (NVIDIA/nccl@7217a581 src/include/plugin/gin/gin_v15.h),
//! what an RCCL that syncs NCCL 2.32 will drive: the same slots, with a
//! config that carries a peer array instead of a rank stride.

use super::nccl::{NcclLogger, NcclNetProperties, NcclResult};
use std::ffi::{c_int, c_void};

/// ncclGinProperties_v14_t.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NcclGinProperties {
    pub supports_strong_signals: bool,
    pub supports_va_signals: bool,
}

c_int_struct! {
    /// ncclGinConfig_v14_t.
    NcclGinConfig { n_signals, n_counters, n_contexts, queue_depth, traffic_class, backend_version, rank_stride }
}

/// ncclGinConfig_v15_t: v14's first six members, then the peers this rank
/// connects to (ranks of connect(), NCCL passes them sorted and including
/// itself) instead of rankStride.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NcclGinConfigV15 {
    pub n_signals: c_int,
    pub n_counters: c_int,
    pub n_contexts: c_int,
    pub queue_depth: c_int,
    pub traffic_class: c_int,
    pub backend_version: c_int,
    pub peer_array: *mut c_int,
    pub peer_array_count: c_int,
}

impl Default for NcclGinConfigV15 {
    fn default() -> Self {
        NcclGinConfigV15 {
            n_signals: 0,
            n_counters: 0,
            n_contexts: 0,
            queue_depth: 0,
            traffic_class: 0,
            backend_version: 0,
            peer_array: std::ptr::null_mut(),
            peer_array_count: 0,
        }
    }
}

pub type InitFn = unsafe extern "C" fn(ctx: *mut *mut c_void, comm_id: u64, logger: NcclLogger) -> NcclResult;
pub type DevicesFn = unsafe extern "C" fn(ndev: *mut c_int) -> NcclResult;
pub type GetGinPropertiesFn = unsafe extern "C" fn(props: *mut NcclGinProperties) -> NcclResult;
pub type GetPropertiesFn = unsafe extern "C" fn(dev: c_int, props: *mut NcclNetProperties) -> NcclResult;
pub type ListenFn =
    unsafe extern "C" fn(ctx: *mut c_void, dev: c_int, handle: *mut c_void, listen_comm: *mut *mut c_void) -> NcclResult;
connect_fn!(ConnectFn);
create_context_fn!(CreateContextFn, NcclGinConfig, dev_handle);
create_context_fn!(CreateContextV15Fn, NcclGinConfigV15, dev_handle);
reg_fns!(RegMrSymFn, RegMrSymDmaBufFn, (mhandle, gin_handle));
pub type DeregMrSymFn = unsafe extern "C" fn(coll_comm: *mut c_void, mhandle: *mut c_void) -> NcclResult;
pub type PtrFn = unsafe extern "C" fn(p: *mut c_void) -> NcclResult;
pub type QueryLastErrorFn = unsafe extern "C" fn(gin_ctx: *mut c_void, has_error: *mut bool) -> NcclResult;

/// A GIN vtable: v14's slots with the version's createContext.
macro_rules! gin_vtable {
    ($(#[$doc:meta])* $name:ident, $cc:ty) => {
        plugin_vtable! {
            $(#[$doc])*
            $name {
                properties: [get_gin_properties: GetGinPropertiesFn],
                connect: ConnectFn,
                create_context: $cc,
                reg_mr_sym: RegMrSymFn,
                reg_mr_sym_dma_buf: RegMrSymDmaBufFn,
                data_path: [gin_progress: PtrFn],
            }
        }
    };
}

gin_vtable!(
    /// ncclGin_v14_t.
    NcclGinV14, CreateContextFn
);
gin_vtable!(
    /// ncclGin_v15_t: ncclGin_v14_t with createContext taking
    /// ncclGinConfig_v15_t (ncclGinProperties_v15_t is v14's).
    NcclGinV15, CreateContextV15Fn
);

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<NcclGinConfigV15>() == 40);
    assert!(offset_of!(NcclGinConfigV15, peer_array) == 24);
    assert!(offset_of!(NcclGinConfigV15, peer_array_count) == 32);
    assert!(size_of::<NcclGinV15>() == 136);
    assert!(offset_of!(NcclGinV15, create_context) == 56);
    assert!(offset_of!(NcclGinV15, finalize) == 128);
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
