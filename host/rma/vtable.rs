//! The exported vtables `ncclRmaPlugin_v17`, `_v16`, `_v15`, `_v14` and `_v13`, each
//! in its own layout, and the C functions behind them: every one runs in the
//! boundary guard (error -> ncclResult_t + WARN line, panic -> internal
//! error) and calls the one implementation in [`super::plugin`]. The slots
//! both plugins fill the same way are [`crate::session::thunks`]; a version
//! differs only in the slots its static names, and the adapters for the
//! signatures it has are generated from one argument list per callback.

use super::plugin::{self as p, Rma};
use crate::error::Result;
use crate::ffi::boundary::{guard, out};
use crate::ffi::nccl::*;
use crate::ffi::plugin_vtable_value;
use crate::ffi::rma::*;
use std::ffi::{c_int, c_void};

const NAME: &std::ffi::CStr = c"rust-gin-rma";

// --- one signature in every version ----------------------------------------------

unsafe extern "C" fn get_rma_properties(coll_comm: *mut c_void, props: *mut NcclRmaProperties) -> NcclResult {
    guard("getRmaProperties", || p::get_rma_properties(coll_comm, props))
}

unsafe extern "C" fn dereg_mr_sym(coll_comm: *mut c_void, mhandle: *mut c_void) -> NcclResult {
    guard("deregMrSym", || p::dereg_mr_sym(coll_comm, mhandle))
}

unsafe extern "C" fn destroy_context(rma_ctx: *mut c_void) -> NcclResult {
    guard("destroyContext", || p::destroy_context(rma_ctx))
}

unsafe extern "C" fn close_coll(coll_comm: *mut c_void) -> NcclResult {
    guard("closeColl", || p::close_coll(coll_comm))
}

unsafe extern "C" fn iflush(
    rma_ctx: *mut c_void,
    context: c_int,
    mhandle: *mut c_void,
    rank: u32,
    request: *mut *mut c_void,
) -> NcclResult {
    guard("iflush", || p::iflush(rma_ctx, context, mhandle, rank, request))
}

unsafe extern "C" fn test(coll_comm: *mut c_void, request: *mut c_void, done: *mut c_int) -> NcclResult {
    guard("test", || p::test(coll_comm, request, done))
}

unsafe extern "C" fn rma_progress(rma_ctx: *mut c_void) -> NcclResult {
    guard("rmaProgress", || p::rma_progress(rma_ctx))
}

unsafe extern "C" fn query_last_error(rma_ctx: *mut c_void, has_error: *mut bool) -> NcclResult {
    guard("queryLastError", || p::query_last_error(rma_ctx, has_error))
}

// --- createContext: v14 and later, and v13 with its device handle ---------------

unsafe extern "C" fn create_context(
    coll_comm: *mut c_void,
    config: *mut NcclRmaConfig,
    rma_ctx: *mut *mut c_void,
) -> NcclResult {
    guard("createContext", || {
        *out(rma_ctx, "rmaCtx")? = std::ptr::null_mut();
        p::create_context(coll_comm, p::RawConfig::from_v14(config)?, rma_ctx).map(drop)
    })
}

/// v17: the config names the peers to connect (a peer array) instead of a
/// rank stride; nContexts and trafficClass are checked as before.
unsafe extern "C" fn create_context_v17(
    coll_comm: *mut c_void,
    config: *mut NcclRmaConfigV17,
    rma_ctx: *mut *mut c_void,
) -> NcclResult {
    guard("createContext", || {
        *out(rma_ctx, "rmaCtx")? = std::ptr::null_mut();
        p::create_context(coll_comm, p::RawConfig::from_v17(config)?, rma_ctx).map(drop)
    })
}

/// v13 createContext also returns a device handle. An RMA plugin has no
/// device API (RCCL's GIN proxy builds its own device context), so the
/// handle only says what kind of backend this is, as RCCL's proxy does for
/// its own handle: GIN_PROXY, NCCL_GIN_PROXY_VERSION, needsProxyProgress 1,
/// and no device-side object (handle NULL, size 0). RCCL's v13 wrapper
/// discards it. It lives as long as the context.
unsafe extern "C" fn create_context_v13(
    coll_comm: *mut c_void,
    config: *mut NcclGinConfigV13,
    gin_ctx: *mut *mut c_void,
    dev_handle: *mut *mut NcclNetDeviceHandle,
) -> NcclResult {
    guard("createContext", || {
        let dh = out(dev_handle, "devHandle")?;
        *dh = std::ptr::null_mut();
        *out(gin_ctx, "ginCtx")? = std::ptr::null_mut();
        let ctx = p::create_context(coll_comm, p::RawConfig::from_v13(config)?, gin_ctx)?;
        *dh = &*ctx.dev_handle as *const NcclNetDeviceHandle as *mut NcclNetDeviceHandle;
        Ok(())
    })
}

// --- registration: v14 and later, and v13 with its ginHandle ----------------------

/// v13 registration also returns a ginHandle: the mhandle itself (what
/// RCCL's proxy does with the ginHandle of an RMA registration).
fn with_gin_handle(mhandle: *mut *mut c_void, gin_handle: *mut *mut c_void, reg: impl FnOnce() -> Result<()>) -> Result<()> {
    let gh = out(gin_handle, "ginHandle")?;
    *gh = std::ptr::null_mut();
    reg()?;
    // SAFETY: checked non-NULL by the registration, which just wrote it.
    *gh = unsafe { *mhandle };
    Ok(())
}

/// A registration callback in the v14 shape (`$thunk`: ..., mhandle) and the
/// v13 one (`$thunk_v13`: ..., mhandle, ginHandle), from one argument list.
macro_rules! reg_thunks {
    ($call:literal => $imp:path, ($($arg:ident: $ty:ty),*), $thunk:ident, $thunk_v13:ident) => {
        #[allow(clippy::too_many_arguments)]
        unsafe extern "C" fn $thunk($($arg: $ty,)* mhandle: *mut *mut c_void) -> NcclResult {
            guard($call, || $imp($($arg,)* mhandle))
        }

        #[allow(clippy::too_many_arguments)]
        unsafe extern "C" fn $thunk_v13($($arg: $ty,)* mhandle: *mut *mut c_void, gin_handle: *mut *mut c_void) -> NcclResult {
            guard($call, || with_gin_handle(mhandle, gin_handle, || $imp($($arg,)* mhandle)))
        }
    };
}

reg_thunks!("regMrSym" => p::reg_mr_sym,
    (coll_comm: *mut c_void, data: *mut c_void, size: usize, type_: c_int, mr_flags: u64),
    reg_mr_sym, reg_mr_sym_v13);
reg_thunks!("regMrSymDmaBuf" => p::reg_mr_sym_dma_buf,
    (coll_comm: *mut c_void, data: *mut c_void, size: usize, type_: c_int, offset: u64, fd: c_int, mr_flags: u64),
    reg_mr_sym_dma_buf, reg_mr_sym_dma_buf_v13);

// --- iput, iputSignal, iget: one adapter per signature ----------------------------

/// The adapters of one data-path callback: each passes the arguments every
/// version has (`head`), then the trailing ones its version has; the ones
/// its version lacks take the value that keeps that version's meaning.
macro_rules! data_path_thunks {
    ($call:literal => $imp:path, $head:tt { $($thunk:ident($($extra:ident: $extra_ty:ty),*; $($default:expr),*);)+ }) => {
        $(data_path_thunks!(@one $call, $imp, $head, $thunk, ($($extra: $extra_ty),*), ($($default),*));)+
    };
    (@one $call:literal, $imp:path, ($($arg:ident: $ty:ty),*), $thunk:ident, ($($extra:ident: $extra_ty:ty),*), ($($default:expr),*)) => {
        #[allow(clippy::too_many_arguments)]
        unsafe extern "C" fn $thunk($($arg: $ty,)* $($extra: $extra_ty,)* request: *mut *mut c_void) -> NcclResult {
            guard($call, || $imp($($arg,)* $($extra,)* $($default,)* request))
        }
    };
}

// Without optFlags (v13, v14), a request rings its doorbell at once.
data_path_thunks!("iput" => p::iput,
    (rma_ctx: *mut c_void, context: c_int, src_off: u64, src_mhandle: *mut c_void, size: usize, dst_off: u64,
     dst_mhandle: *mut c_void, rank: u32) {
        iput(opt_flags: u32;);
        iput_v14(; NCCL_RMA_OPT_FLAGS_DEFAULT);
    });
// v13 has no isStrongSignal: every v13 signal is strong (and every signal
// here is anyway).
data_path_thunks!("iputSignal" => p::iput_signal,
    (rma_ctx: *mut c_void, context: c_int, src_off: u64, src_mhandle: *mut c_void, size: usize, dst_off: u64,
     dst_mhandle: *mut c_void, rank: u32, signal_off: u64, signal_mhandle: *mut c_void, signal_value: u64,
     signal_op: u32) {
        iput_signal(is_strong_signal: bool, opt_flags: u32;);
        iput_signal_v14(is_strong_signal: bool; NCCL_RMA_OPT_FLAGS_DEFAULT);
        iput_signal_v13(; true, NCCL_RMA_OPT_FLAGS_DEFAULT);
    });
data_path_thunks!("iget" => p::iget,
    (rma_ctx: *mut c_void, context: c_int, remote_off: u64, remote_mhandle: *mut c_void, size: usize,
     local_off: u64, local_mhandle: *mut c_void, rank: u32) {
        iget(opt_flags: u32;);
        iget_v14(; NCCL_RMA_OPT_FLAGS_DEFAULT);
    });

// --- the exported symbols: what each version's slots hold ------------------------

/// A version's vtable: the RMA data path (iflush, test) is the same in all.
macro_rules! rma_vtable_value {
    ($ty:ident { $($slot:ident: $f:expr),* $(,)? }) => {
        plugin_vtable_value!($ty, Rma, NAME, { iflush: iflush, test: test, $($slot: $f),* })
    };
}

/// What NCCL 2.32 loads first (NVIDIA/nccl src/plugin/rma.cc tries 17, 16,
/// 15, 14, 13 since rma_v17.h): v16's slots, connect with RCCL's abort flag,
/// createContext with a peer array. No RCCL release loads it yet.
#[no_mangle]
#[used]
pub static ncclRmaPlugin_v17: NcclRmaV17 = plugin_vtable_value!(NcclRmaV17, Rma, NAME,
    connect: crate::session::thunks::connect_v17::<Rma>, {
    iflush: iflush, test: test,
    get_rma_properties: get_rma_properties, create_context: create_context_v17, reg_mr_sym: reg_mr_sym,
    reg_mr_sym_dma_buf: reg_mr_sym_dma_buf, iput: iput, iput_signal: iput_signal, iget: iget, rma_progress: rma_progress,
});

/// What a newer RCCL loads first (rma_v16.h; RCCL's docs: v16, 15, 14, 13).
#[no_mangle]
#[used]
pub static ncclRmaPlugin_v16: NcclRmaV16 = rma_vtable_value!(NcclRmaV16 {
    get_rma_properties: get_rma_properties, create_context: create_context, reg_mr_sym: reg_mr_sym,
    reg_mr_sym_dma_buf: reg_mr_sym_dma_buf, iput: iput, iput_signal: iput_signal, iget: iget, rma_progress: rma_progress,
});

/// What the pinned RCCL loads first (its rma.cc tries 15, 14, 13).
#[no_mangle]
#[used]
pub static ncclRmaPlugin_v15: NcclRmaV15 = rma_vtable_value!(NcclRmaV15 {
    create_context: create_context, reg_mr_sym: reg_mr_sym, reg_mr_sym_dma_buf: reg_mr_sym_dma_buf,
    iput: iput, iput_signal: iput_signal, iget: iget, rma_progress: rma_progress,
});

#[no_mangle]
#[used]
pub static ncclRmaPlugin_v14: NcclRmaV14 = rma_vtable_value!(NcclRmaV14 {
    create_context: create_context, reg_mr_sym: reg_mr_sym, reg_mr_sym_dma_buf: reg_mr_sym_dma_buf,
    iput: iput_v14, iput_signal: iput_signal_v14, iget: iget_v14, rma_progress: rma_progress,
});

/// Only `ncclRmaPlugin_v13` is exported for v13, not `ncclGinPlugin_v13`:
/// RCCL's GIN loader would find that one too (and skip it as a GIN_PROXY
/// plugin), and this library's GIN backend is the type-8 one.
#[no_mangle]
#[used]
pub static ncclRmaPlugin_v13: NcclRmaV13 = rma_vtable_value!(NcclRmaV13 {
    create_context: create_context_v13, reg_mr_sym: reg_mr_sym_v13, reg_mr_sym_dma_buf: reg_mr_sym_dma_buf_v13,
    iput: iput_v14, iput_signal: iput_signal_v13, iget: iget_v14, gin_progress: rma_progress,
});
