//! RCCL's RMA plugin interface, versions 13 to 17 (plugin/rma/rma_v1x.h), as
//! RCCL's proxy GIN (src/gin/gin_host_proxy.cc) drives it.
//!
//! Sources (see docs/rma-plugin.md): v13 is `ncclGin_v13_t` itself
//! (rma_v13.h: `typedef ncclGin_v13_t ncclRma_v13_t`); v14 adds rankStride to
//! the config and drops the device handle and ginHandle; v15 adds `optFlags`
//! to iput, iputSignal and iget; v16 inserts `getRmaProperties` after
//! `devices`; v17 (NVIDIA/nccl@c6fbb1d7 rma_v17.h) keeps v16's slots, adds
//! `volatile uint32_t* abortFlag` as connect's last argument and replaces the
//! config's rankStride with a peer array. v13, v14 and v15 are 168 bytes with
//! the same slot offsets; v16 and v17 are 176 bytes. Offsets below are the ones
//! computed from the C headers on x86-64 (LP64).

use super::nccl::NcclResult;
use std::ffi::{c_int, c_void};

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

c_int_struct! {
    /// ncclGinConfig_v13_t (gin_v13.h): what a v13 createContext receives.
    NcclGinConfigV13 { n_signals, n_counters, n_contexts, queue_depth, traffic_class }
}

c_int_struct! {
    /// ncclRmaConfig_v14_t = ncclRmaConfig_v15_t = ncclRmaConfig_v16_t.
    NcclRmaConfig { n_contexts, traffic_class, rank_stride }
}

/// ncclRmaConfig_v17_t: nContexts, trafficClass, then the peers (ranks of
/// connect()) this rank connects to, instead of rankStride.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NcclRmaConfigV17 {
    pub n_contexts: c_int,
    pub traffic_class: c_int,
    pub peer_array: *mut c_int,
    pub peer_array_count: c_int,
}

impl Default for NcclRmaConfigV17 {
    fn default() -> Self {
        NcclRmaConfigV17 { n_contexts: 0, traffic_class: 0, peer_array: std::ptr::null_mut(), peer_array_count: 0 }
    }
}

/// ncclRmaProperties_v16_t (v17 uses it as is).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NcclRmaProperties {
    /// True when every put already received on the communicator is visible
    /// whenever any signal arrives, from any peer, on every NIC it uses.
    pub flushes_all_puts_on_any_signal: bool,
}

// --- callback types ------------------------------------------------------------

// The setup callbacks are the GIN plugin's, slot for slot; v13's createContext
// and registrations are ncclGin_v13_t's, which v14 kept.
pub use super::gin::{ConnectFn, DeregMrSymFn, DevicesFn, GetPropertiesFn, InitFn, ListenFn, PtrFn, QueryLastErrorFn};
pub use super::gin::{RegMrSymDmaBufFn as RegMrSymDmaBufV13Fn, RegMrSymFn as RegMrSymV13Fn};
create_context_fn!(CreateContextV13Fn, NcclGinConfigV13, dev_handle);
// v14 and later: no device handle, no ginHandle.
create_context_fn!(CreateContextFn, NcclRmaConfig);
create_context_fn!(CreateContextV17Fn, NcclRmaConfigV17);

// v17's connect: the GIN connect plus RCCL's abort flag (comm->abortFlag),
// which a connection setup in progress must watch.
connect_fn!(ConnectV17Fn, abort_flag: *const u32);
reg_fns!(RegMrSymFn, RegMrSymDmaBufFn, (mhandle));

pub type GetRmaPropertiesFn = unsafe extern "C" fn(coll_comm: *mut c_void, props: *mut NcclRmaProperties) -> NcclResult;
pub type IflushFn = unsafe extern "C" fn(
    rma_ctx: *mut c_void,
    context: c_int,
    mhandle: *mut c_void,
    rank: u32,
    request: *mut *mut c_void,
) -> NcclResult;
pub type TestFn = unsafe extern "C" fn(coll_comm: *mut c_void, request: *mut c_void, done: *mut c_int) -> NcclResult;

/// iput, iputSignal and iget as a version declares them: isStrongSignal on
/// iputSignal from v14, optFlags on all three from v15. iput and iputSignal
/// start with the same arguments (`@all`'s `$put`).
macro_rules! data_path_fns {
    ($iput:ident, $iput_signal:ident, $iget:ident, strong: [$($strong:ident)?], flags: [$($flags:ident)?]) => {
        data_path_fns!(@all $iput, $iput_signal, $iget, [$($strong)?], [$($flags)?],
            (rma_ctx: *mut c_void, context: c_int, src_off: u64, src_mhandle: *mut c_void, size: usize, dst_off: u64,
             dst_mhandle: *mut c_void, rank: u32));
    };
    (@all $iput:ident, $iput_signal:ident, $iget:ident, [$($strong:ident)?], [$($flags:ident)?], $put:tt) => {
        data_path_fns!(@fn $iput, $put, ($($flags: u32)?));
        data_path_fns!(@fn $iput_signal, $put,
            (signal_off: u64, signal_mhandle: *mut c_void, signal_value: u64, signal_op: u32 $(, $strong: bool)? $(, $flags: u32)?));
        data_path_fns!(@fn $iget,
            (rma_ctx: *mut c_void, context: c_int, remote_off: u64, remote_mhandle: *mut c_void, size: usize,
             local_off: u64, local_mhandle: *mut c_void, rank: u32),
            ($($flags: u32)?));
    };
    (@fn $name:ident, ($($arg:ident: $ty:ty),*), ($($extra:ident: $extra_ty:ty),*)) => {
        pub type $name =
            unsafe extern "C" fn($($arg: $ty,)* $($extra: $extra_ty,)* request: *mut *mut c_void) -> NcclResult;
    };
}

data_path_fns!(IputFn, IputSignalFn, IgetFn, strong: [is_strong_signal], flags: [opt_flags]);
data_path_fns!(IputV14Fn, IputSignalV14Fn, IgetV14Fn, strong: [is_strong_signal], flags: []);
data_path_fns!(IputV13Fn, IputSignalV13Fn, IgetV13Fn, strong: [], flags: []);

/// An RMA vtable: the data path after closeListen is iput, iputSignal, iget,
/// iflush, test and the progress slot (named ginProgress in v13).
macro_rules! rma_vtable {
    ($(#[$doc:meta])* $name:ident [$($prop:ident: $prop_ty:ty)?], $cc:ty, $reg:ty, $reg_dmabuf:ty,
     $iput:ty, $iput_signal:ty, $iget:ty, $progress:ident) => {
        rma_vtable!($(#[$doc])* $name [$($prop: $prop_ty)?], ConnectFn, $cc, $reg, $reg_dmabuf,
            $iput, $iput_signal, $iget, $progress);
    };
    ($(#[$doc:meta])* $name:ident [$($prop:ident: $prop_ty:ty)?], $conn:ty, $cc:ty, $reg:ty, $reg_dmabuf:ty,
     $iput:ty, $iput_signal:ty, $iget:ty, $progress:ident) => {
        plugin_vtable! {
            $(#[$doc])*
            $name {
                properties: [$($prop: $prop_ty)?],
                connect: $conn,
                create_context: $cc,
                reg_mr_sym: $reg,
                reg_mr_sym_dma_buf: $reg_dmabuf,
                data_path: [iput: $iput, iput_signal: $iput_signal, iget: $iget, iflush: IflushFn, test: TestFn, $progress: PtrFn],
            }
        }
    };
}

// What each version changes (rma_v13.h .. rma_v17.h): the property slot
// v16 inserts after devices, v17's connect (abortFlag), createContext and
// registration (v13's device handle and ginHandle, v17's peer array),
// iput/iputSignal/iget (isStrongSignal, optFlags), and the progress slot's
// name.
rma_vtable!(
    /// ncclRma_v17_t: v16's slots; connect takes abortFlag, createContext
    /// ncclRmaConfig_v17_t.
    NcclRmaV17 [get_rma_properties: GetRmaPropertiesFn], ConnectV17Fn, CreateContextV17Fn, RegMrSymFn,
    RegMrSymDmaBufFn, IputFn, IputSignalFn, IgetFn, rma_progress
);
rma_vtable!(
    /// ncclRma_v16_t: v15 plus getRmaProperties at offset 24.
    NcclRmaV16 [get_rma_properties: GetRmaPropertiesFn], CreateContextFn, RegMrSymFn, RegMrSymDmaBufFn,
    IputFn, IputSignalFn, IgetFn, rma_progress
);
rma_vtable!(
    /// ncclRma_v15_t: iput, iputSignal and iget take optFlags.
    NcclRmaV15 [], CreateContextFn, RegMrSymFn, RegMrSymDmaBufFn, IputFn, IputSignalFn, IgetFn, rma_progress
);
rma_vtable!(
    /// ncclRma_v14_t: no optFlags.
    NcclRmaV14 [], CreateContextFn, RegMrSymFn, RegMrSymDmaBufFn, IputV14Fn, IputSignalV14Fn, IgetV14Fn, rma_progress
);
rma_vtable!(
    /// ncclRma_v13_t = ncclGin_v13_t: createContext returns a device handle,
    /// registrations a ginHandle, iputSignal has no isStrongSignal, and slot
    /// 18 is named ginProgress.
    NcclRmaV13 [], CreateContextV13Fn, RegMrSymV13Fn, RegMrSymDmaBufV13Fn, IputV13Fn, IputSignalV13Fn, IgetV13Fn,
    gin_progress
);

// The layouts, checked where they are made; tests/abi_mirror.rs checks every
// offset against RCCL's headers.
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<NcclGinConfigV13>() == 20);
    assert!(offset_of!(NcclGinConfigV13, traffic_class) == 16);
    assert!(size_of::<NcclRmaConfig>() == 12);
    assert!(offset_of!(NcclRmaConfig, rank_stride) == 8);
    assert!(size_of::<NcclRmaProperties>() == 1 && align_of::<NcclRmaProperties>() == 1);
    assert!(size_of::<NcclRmaV13>() == 168 && offset_of!(NcclRmaV13, iput) == 104);
    assert!(offset_of!(NcclRmaV13, gin_progress) == 144 && offset_of!(NcclRmaV13, finalize) == 160);
    assert!(size_of::<NcclRmaV14>() == 168 && offset_of!(NcclRmaV14, rma_progress) == 144);
    assert!(size_of::<NcclRmaV15>() == 168 && offset_of!(NcclRmaV15, rma_progress) == 144);
    assert!(size_of::<NcclRmaV16>() == 176 && offset_of!(NcclRmaV16, get_rma_properties) == 24);
    assert!(offset_of!(NcclRmaV16, iput) == 112 && offset_of!(NcclRmaV16, finalize) == 168);
    assert!(size_of::<NcclRmaConfigV17>() == 24 && offset_of!(NcclRmaConfigV17, peer_array) == 8);
    assert!(offset_of!(NcclRmaConfigV17, peer_array_count) == 16);
    assert!(size_of::<NcclRmaV17>() == 176 && offset_of!(NcclRmaV17, connect) == 48);
    assert!(offset_of!(NcclRmaV17, create_context) == 56 && offset_of!(NcclRmaV17, finalize) == 168);
};
