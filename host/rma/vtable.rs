//! The exported vtables `ncclRmaPlugin_v16`, `_v15`, `_v14` and `_v13`, each
//! in its own layout, and the C functions behind them: every one runs in the
//! boundary guard (error -> ncclResult_t + WARN line, panic -> internal
//! error) and calls the one implementation in [`super::plugin`].

use super::plugin as p;
use crate::ffi::boundary::{guard, out};
use crate::ffi::nccl::*;
use crate::ffi::rma::*;
use std::ffi::{c_int, c_void};

const NAME: &std::ffi::CStr = c"rust-gin-rma";

// --- shared by every version -------------------------------------------------

unsafe extern "C" fn init(ctx: *mut *mut c_void, comm_id: u64, logger: NcclLogger) -> NcclResult {
    crate::log::set_logger(logger);
    guard("init", || p::init(ctx, comm_id))
}

unsafe extern "C" fn devices(ndev: *mut c_int) -> NcclResult {
    guard("devices", || p::devices(ndev))
}

unsafe extern "C" fn get_rma_properties(coll_comm: *mut c_void, props: *mut NcclRmaProperties) -> NcclResult {
    guard("getRmaProperties", || p::get_rma_properties(coll_comm, props))
}

unsafe extern "C" fn get_properties(dev: c_int, props: *mut NcclNetProperties) -> NcclResult {
    guard("getProperties", || p::get_properties(dev, props))
}

unsafe extern "C" fn listen(
    ctx: *mut c_void,
    dev: c_int,
    handle: *mut c_void,
    listen_comm: *mut *mut c_void,
) -> NcclResult {
    guard("listen", || p::listen(ctx, dev, handle, listen_comm))
}

unsafe extern "C" fn connect(
    ctx: *mut c_void,
    handles: *mut *mut c_void,
    nranks: c_int,
    rank: c_int,
    listen_comm: *mut c_void,
    coll_comm: *mut *mut c_void,
) -> NcclResult {
    guard("connect", || p::connect(ctx, handles, nranks, rank, listen_comm, coll_comm))
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

unsafe extern "C" fn close_listen(listen_comm: *mut c_void) -> NcclResult {
    guard("closeListen", || p::close_listen(listen_comm))
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

unsafe extern "C" fn finalize(ctx: *mut c_void) -> NcclResult {
    guard("finalize", || p::finalize(ctx))
}

// --- v14 and later: config without the device handle --------------------------

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

unsafe extern "C" fn reg_mr_sym(
    coll_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    type_: c_int,
    mr_flags: u64,
    mhandle: *mut *mut c_void,
) -> NcclResult {
    guard("regMrSym", || p::reg_mr_sym(coll_comm, data, size, type_, mr_flags, mhandle))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn reg_mr_sym_dma_buf(
    coll_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    type_: c_int,
    offset: u64,
    fd: c_int,
    mr_flags: u64,
    mhandle: *mut *mut c_void,
) -> NcclResult {
    guard("regMrSymDmaBuf", || p::reg_mr_sym_dma_buf(coll_comm, data, size, type_, offset, fd, mr_flags, mhandle))
}

// --- v15 and v16: with optFlags ----------------------------------------------

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn iput(
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
) -> NcclResult {
    guard("iput", || {
        p::iput(rma_ctx, context, src_off, src_mhandle, size, dst_off, dst_mhandle, rank, opt_flags, request)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn iput_signal(
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
) -> NcclResult {
    guard("iputSignal", || {
        p::iput_signal(
            rma_ctx,
            context,
            src_off,
            src_mhandle,
            size,
            dst_off,
            dst_mhandle,
            rank,
            signal_off,
            signal_mhandle,
            signal_value,
            signal_op,
            is_strong_signal,
            opt_flags,
            request,
        )
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn iget(
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
) -> NcclResult {
    guard("iget", || {
        p::iget(rma_ctx, context, remote_off, remote_mhandle, size, local_off, local_mhandle, rank, opt_flags, request)
    })
}

// --- v14 and v13: no optFlags (the default behaviour: ring at once) ----------

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn iput_v14(
    rma_ctx: *mut c_void,
    context: c_int,
    src_off: u64,
    src_mhandle: *mut c_void,
    size: usize,
    dst_off: u64,
    dst_mhandle: *mut c_void,
    rank: u32,
    request: *mut *mut c_void,
) -> NcclResult {
    guard("iput", || p::iput(rma_ctx, context, src_off, src_mhandle, size, dst_off, dst_mhandle, rank, 0, request))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn iput_signal_v14(
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
) -> NcclResult {
    guard("iputSignal", || {
        p::iput_signal(
            rma_ctx,
            context,
            src_off,
            src_mhandle,
            size,
            dst_off,
            dst_mhandle,
            rank,
            signal_off,
            signal_mhandle,
            signal_value,
            signal_op,
            is_strong_signal,
            0,
            request,
        )
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn iget_v14(
    rma_ctx: *mut c_void,
    context: c_int,
    remote_off: u64,
    remote_mhandle: *mut c_void,
    size: usize,
    local_off: u64,
    local_mhandle: *mut c_void,
    rank: u32,
    request: *mut *mut c_void,
) -> NcclResult {
    guard("iget", || {
        p::iget(rma_ctx, context, remote_off, remote_mhandle, size, local_off, local_mhandle, rank, 0, request)
    })
}

// --- v13 (= ncclGin_v13_t) ----------------------------------------------------

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

/// v13 registration also returns a ginHandle: the mhandle itself (what
/// RCCL's proxy does with the ginHandle of an RMA registration).
unsafe extern "C" fn reg_mr_sym_v13(
    coll_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    type_: c_int,
    mr_flags: u64,
    mhandle: *mut *mut c_void,
    gin_handle: *mut *mut c_void,
) -> NcclResult {
    guard("regMrSym", || {
        let gh = out(gin_handle, "ginHandle")?;
        *gh = std::ptr::null_mut();
        p::reg_mr_sym(coll_comm, data, size, type_, mr_flags, mhandle)?;
        // SAFETY: checked non-NULL by reg_mr_sym, which just wrote it.
        *gh = unsafe { *mhandle };
        Ok(())
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn reg_mr_sym_dma_buf_v13(
    coll_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    type_: c_int,
    offset: u64,
    fd: c_int,
    mr_flags: u64,
    mhandle: *mut *mut c_void,
    gin_handle: *mut *mut c_void,
) -> NcclResult {
    guard("regMrSymDmaBuf", || {
        let gh = out(gin_handle, "ginHandle")?;
        *gh = std::ptr::null_mut();
        p::reg_mr_sym_dma_buf(coll_comm, data, size, type_, offset, fd, mr_flags, mhandle)?;
        // SAFETY: as in reg_mr_sym_v13.
        *gh = unsafe { *mhandle };
        Ok(())
    })
}

/// v13 has no isStrongSignal: every v13 signal is strong (and every signal
/// here is anyway).
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn iput_signal_v13(
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
) -> NcclResult {
    guard("iputSignal", || {
        p::iput_signal(
            gin_ctx,
            context,
            src_off,
            src_mhandle,
            size,
            dst_off,
            dst_mhandle,
            rank,
            signal_off,
            signal_mhandle,
            signal_value,
            signal_op,
            true,
            0,
            request,
        )
    })
}

// --- the exported symbols ----------------------------------------------------

/// What a newer RCCL loads first (rma_v16.h; RCCL's docs: v16, 15, 14, 13).
#[no_mangle]
#[used]
pub static ncclRmaPlugin_v16: NcclRmaV16 = NcclRmaV16 {
    name: NAME.as_ptr(),
    init: Some(init),
    devices: Some(devices),
    get_rma_properties: Some(get_rma_properties),
    get_properties: Some(get_properties),
    listen: Some(listen),
    connect: Some(connect),
    create_context: Some(create_context),
    reg_mr_sym: Some(reg_mr_sym),
    reg_mr_sym_dma_buf: Some(reg_mr_sym_dma_buf),
    dereg_mr_sym: Some(dereg_mr_sym),
    destroy_context: Some(destroy_context),
    close_coll: Some(close_coll),
    close_listen: Some(close_listen),
    iput: Some(iput),
    iput_signal: Some(iput_signal),
    iget: Some(iget),
    iflush: Some(iflush),
    test: Some(test),
    rma_progress: Some(rma_progress),
    query_last_error: Some(query_last_error),
    finalize: Some(finalize),
};

/// What the pinned RCCL loads first (its rma.cc tries 15, 14, 13).
#[no_mangle]
#[used]
pub static ncclRmaPlugin_v15: NcclRmaV15 = NcclRmaV15 {
    name: NAME.as_ptr(),
    init: Some(init),
    devices: Some(devices),
    get_properties: Some(get_properties),
    listen: Some(listen),
    connect: Some(connect),
    create_context: Some(create_context),
    reg_mr_sym: Some(reg_mr_sym),
    reg_mr_sym_dma_buf: Some(reg_mr_sym_dma_buf),
    dereg_mr_sym: Some(dereg_mr_sym),
    destroy_context: Some(destroy_context),
    close_coll: Some(close_coll),
    close_listen: Some(close_listen),
    iput: Some(iput),
    iput_signal: Some(iput_signal),
    iget: Some(iget),
    iflush: Some(iflush),
    test: Some(test),
    rma_progress: Some(rma_progress),
    query_last_error: Some(query_last_error),
    finalize: Some(finalize),
};

#[no_mangle]
#[used]
pub static ncclRmaPlugin_v14: NcclRmaV14 = NcclRmaV14 {
    name: NAME.as_ptr(),
    init: Some(init),
    devices: Some(devices),
    get_properties: Some(get_properties),
    listen: Some(listen),
    connect: Some(connect),
    create_context: Some(create_context),
    reg_mr_sym: Some(reg_mr_sym),
    reg_mr_sym_dma_buf: Some(reg_mr_sym_dma_buf),
    dereg_mr_sym: Some(dereg_mr_sym),
    destroy_context: Some(destroy_context),
    close_coll: Some(close_coll),
    close_listen: Some(close_listen),
    iput: Some(iput_v14),
    iput_signal: Some(iput_signal_v14),
    iget: Some(iget_v14),
    iflush: Some(iflush),
    test: Some(test),
    rma_progress: Some(rma_progress),
    query_last_error: Some(query_last_error),
    finalize: Some(finalize),
};

/// Only `ncclRmaPlugin_v13` is exported for v13, not `ncclGinPlugin_v13`:
/// RCCL's GIN loader would find that one too (and skip it as a GIN_PROXY
/// plugin), and this library's GIN backend is the type-8 one.
#[no_mangle]
#[used]
pub static ncclRmaPlugin_v13: NcclRmaV13 = NcclRmaV13 {
    name: NAME.as_ptr(),
    init: Some(init),
    devices: Some(devices),
    get_properties: Some(get_properties),
    listen: Some(listen),
    connect: Some(connect),
    create_context: Some(create_context_v13),
    reg_mr_sym: Some(reg_mr_sym_v13),
    reg_mr_sym_dma_buf: Some(reg_mr_sym_dma_buf_v13),
    dereg_mr_sym: Some(dereg_mr_sym),
    destroy_context: Some(destroy_context),
    close_coll: Some(close_coll),
    close_listen: Some(close_listen),
    iput: Some(iput_v14),
    iput_signal: Some(iput_signal_v13),
    iget: Some(iget_v14),
    iflush: Some(iflush),
    test: Some(test),
    gin_progress: Some(rma_progress),
    query_last_error: Some(query_last_error),
    finalize: Some(finalize),
};
