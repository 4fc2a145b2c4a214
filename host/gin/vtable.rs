//! `ncclGinRustPlugin_v14`: the GIN v14 vtable RCCL's patch registers, and the
//! C functions behind it. Each checks its arguments, runs inside the
//! boundary guard (error -> ncclResult_t + WARN, panic -> internal error),
//! and works on registry objects, never on raw pointers RCCL hands back.

use super::comm::{CollComm, Instance, ListenComm};
use super::context::{GinContext, Settings};
use super::handle::ListenHandle;
use super::registry::{Kind, Registry};
use super::window::{Source, Window};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::ffi::boundary::{guard, out};
use crate::ffi::gin::{NcclGinConfig, NcclGinProperties, NcclGinV14};
use crate::ffi::nccl::*;
use crate::provider::Provider;
use crate::{bad_arg, info_line};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::{Arc, Mutex, RwLock};

pub(crate) static INSTANCES: Registry<Instance> = Registry::new(Kind::Instance);
pub(crate) static LISTENS: Registry<ListenComm> = Registry::new(Kind::Listen);
pub(crate) static COLLS: Registry<CollComm> = Registry::new(Kind::Coll);
pub(crate) static CONTEXTS: Registry<GinContext> = Registry::new(Kind::Context);
pub(crate) static WINDOWS: Registry<Window> = Registry::new(Kind::Memory);

/// The provider of the latest init (devices() and getProperties() take no
/// context).
static PROVIDER: RwLock<Option<Arc<dyn Provider>>> = RwLock::new(None);

fn provider() -> Result<Arc<dyn Provider>> {
    PROVIDER
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .ok_or_else(|| Error::InvalidUsage("called before init()".into()))
}

/// Whether RCCL asked for this backend: as RCCL's rocSHMEM backend (type 6)
/// does, rust-gin is chosen only when NCCL_GIN_TYPE names its type (8).
pub fn check_selected(nccl_gin_type: Option<&str>) -> Result<()> {
    match nccl_gin_type.map(str::trim) {
        Some(v) if v == NCCL_NET_DEVICE_GIN_RUST.to_string() => Ok(()),
        other => {
            let shown = other.map(|v| format!("NCCL_GIN_TYPE={v}")).unwrap_or_else(|| "NCCL_GIN_TYPE unset".into());
            info_line!(INIT, "not selected ({shown}); set NCCL_GIN_TYPE=8 to use rust-gin");
            Err(Error::InvalidUsage(format!("rust-gin is selected only with NCCL_GIN_TYPE=8 ({shown})")))
        }
    }
}

/// init(): selection, knobs, provider (a usable NIC, or the emulated one by
/// explicit choice).
pub fn init_instance(comm_id: u64) -> Result<Arc<Instance>> {
    check_selected(std::env::var("NCCL_GIN_TYPE").ok().as_deref())?;
    let config = Config::from_env()?;
    let provider = crate::provider::select(&config)?;
    info_line!(INIT, "provider {:?}, {} device(s)", provider.kind(), provider.devices());
    *PROVIDER.write().unwrap_or_else(|e| e.into_inner()) = Some(provider.clone());
    Ok(Arc::new(Instance::new(config, provider, comm_id)))
}

unsafe extern "C" fn init(ctx: *mut *mut c_void, comm_id: u64, logger: NcclLogger) -> NcclResult {
    crate::log::set_logger(logger);
    guard("init", || {
        let ctx = out(ctx, "ctx")?;
        *ctx = std::ptr::null_mut();
        let inst = init_instance(comm_id)?;
        *ctx = INSTANCES.insert(inst);
        Ok(())
    })
}

unsafe extern "C" fn devices(ndev: *mut c_int) -> NcclResult {
    guard("devices", || {
        let ndev = out(ndev, "ndev")?;
        *ndev = provider()?.devices() as c_int;
        Ok(())
    })
}

unsafe extern "C" fn get_gin_properties(props: *mut NcclGinProperties) -> NcclResult {
    guard("getGinProperties", || {
        // One RC queue pair per peer and context executes in order: a signal
        // (a fetch-and-add behind the data) lands after every earlier put to
        // that peer (strong); VA signals are fetch-and-adds into a window.
        *out(props, "props")? = NcclGinProperties { supports_strong_signals: true, supports_va_signals: true };
        Ok(())
    })
}

/// Strings RCCL keeps pointers to: made once per device and kept.
fn device_strings(dev: usize, name: &str, pci: &str) -> (*mut c_char, *mut c_char) {
    static STRINGS: Mutex<Option<HashMap<(usize, String), (CString, CString)>>> = Mutex::new(None);
    let mut g = STRINGS.lock().unwrap_or_else(|e| e.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    let e = map
        .entry((dev, name.to_string()))
        .or_insert_with(|| (CString::new(name).unwrap_or_default(), CString::new(pci).unwrap_or_default()));
    (e.0.as_ptr() as *mut c_char, e.1.as_ptr() as *mut c_char)
}

pub fn fill_properties(dev: c_int, props: &mut NcclNetProperties) -> Result<()> {
    let device_version = crate::abi::RUST_GIN_DEVICE_ABI_VERSION as c_int;
    fill_properties_of(&*provider()?, dev, props, NCCL_NET_DEVICE_GIN_RUST, device_version, 1)
}

/// getProperties for a provider: what the GIN backend and the RMA plugin
/// report, apart from the offload type and version and maxRecvs.
pub fn fill_properties_of(
    provider: &dyn Provider,
    dev: c_int,
    props: &mut NcclNetProperties,
    net_device_type: c_int,
    net_device_version: c_int,
    max_recvs: c_int,
) -> Result<()> {
    if dev < 0 {
        return Err(bad_arg!("dev {dev} is negative"));
    }
    let info = provider.info(dev as usize)?;
    let (name, pci) = device_strings(dev as usize, &info.name, &info.pci_path);
    let mut v_props = NcclNetVDeviceProps { ndevs: 1, ..Default::default() };
    v_props.devs[0] = dev;
    *props = NcclNetProperties {
        name,
        pci_path: pci,
        guid: info.guid,
        ptr_support: info.ptr_support,
        reg_is_global: 0,
        force_flush: 0,
        speed: info.speed_mbps,
        port: info.port,
        latency: info.latency_us,
        max_comms: 65536,
        max_recvs,
        net_device_type,
        net_device_version,
        v_props,
        max_p2p_bytes: info.max_message as usize,
        max_coll_bytes: info.max_message as usize,
        max_multi_request_size: 1,
        rail_id: 0,
        plane_id: 0,
    };
    Ok(())
}

unsafe extern "C" fn get_properties(dev: c_int, props: *mut NcclNetProperties) -> NcclResult {
    guard("getProperties", || fill_properties(dev, out(props, "props")?))
}

unsafe extern "C" fn listen(ctx: *mut c_void, dev: c_int, handle: *mut c_void, listen_comm: *mut *mut c_void) -> NcclResult {
    guard("listen", || {
        let lc = out(listen_comm, "listenComm")?;
        *lc = std::ptr::null_mut();
        let inst = INSTANCES.get(ctx, "ctx")?;
        // SAFETY: RCCL's handle buffer, per the vtable contract.
        let l = unsafe { listen_on(inst, dev, handle)? };
        *lc = LISTENS.insert(Arc::new(l));
        Ok(())
    })
}

/// listen() once the plugin context is found (shared with the RMA plugin):
/// opens the NIC and the connection-setup socket and writes the 128-byte
/// handle into RCCL's buffer.
///
/// # Safety
/// `handle` is NULL (refused) or points to NCCL_NET_HANDLE_MAXSIZE writable bytes.
pub unsafe fn listen_on(inst: Arc<Instance>, dev: c_int, handle: *mut c_void) -> Result<ListenComm> {
    if handle.is_null() {
        return Err(bad_arg!("handle is NULL"));
    }
    if dev < 0 || dev as usize >= inst.provider.devices() {
        return Err(bad_arg!("dev {dev} out of range (this provider has {} device(s))", inst.provider.devices()));
    }
    let l = ListenComm::new(inst, dev as usize)?;
    let bytes = l.handle.encode();
    // SAFETY: RCCL's handle buffer holds NCCL_NET_HANDLE_MAXSIZE bytes.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), handle as *mut u8, bytes.len()) };
    info_line!(NET, "listening for connection setup on {} (NIC {})", l.listener.addr(), l.nic.info().name);
    Ok(l)
}

unsafe extern "C" fn connect(
    ctx: *mut c_void,
    handles: *mut *mut c_void,
    nranks: c_int,
    rank: c_int,
    listen_comm: *mut c_void,
    coll_comm: *mut *mut c_void,
) -> NcclResult {
    guard("connect", || {
        let cc = out(coll_comm, "collComm")?;
        *cc = std::ptr::null_mut();
        let inst = INSTANCES.get(ctx, "ctx")?;
        let l = LISTENS.get(listen_comm, "listenComm")?;
        // SAFETY: RCCL's handle array, per the vtable contract.
        let c = unsafe { connect_with(&inst, &l, handles, nranks, rank)? };
        *cc = COLLS.insert(Arc::new(c));
        Ok(())
    })
}

/// The largest nranks connect() takes. Each rank holds one RC queue pair per
/// peer, and an mlx5 QP number is 24 bits wide, so no NIC serves more peers
/// than 2^24; anything above is a corrupted argument, refused before any
/// allocation sized by it.
pub const MAX_NRANKS: c_int = 1 << 24;

/// connect() once the plugin context and listen comm are found (shared with
/// the RMA plugin): checks rank and nranks, decodes every rank's handle and
/// builds the collective comm.
///
/// # Safety
/// `handles` is NULL (refused) or points to `nranks` pointers, each NULL
/// (refused) or to NCCL_NET_HANDLE_MAXSIZE readable bytes.
pub unsafe fn connect_with(
    inst: &Instance,
    l: &ListenComm,
    handles: *mut *mut c_void,
    nranks: c_int,
    rank: c_int,
) -> Result<CollComm> {
    inst.check_alive()?;
    if !(1..=MAX_NRANKS).contains(&nranks) {
        return Err(bad_arg!("nranks {nranks} out of range [1, {MAX_NRANKS}] (one queue pair per peer, 24-bit QP numbers)"));
    }
    if rank < 0 || rank >= nranks {
        return Err(bad_arg!("rank {rank} out of range [0, {nranks})"));
    }
    if handles.is_null() {
        return Err(bad_arg!("handles is NULL"));
    }
    // Grown as handles decode, not reserved from nranks: a bad handle stops
    // it early.
    let mut hs = Vec::new();
    for r in 0..nranks as usize {
        // SAFETY: RCCL passes nranks handle pointers.
        let p = unsafe { *handles.add(r) };
        if p.is_null() {
            return Err(bad_arg!("handles[{r}] is NULL"));
        }
        // SAFETY: each handle is an NCCL_NET_HANDLE_MAXSIZE-byte buffer.
        let b = unsafe { std::slice::from_raw_parts(p as *const u8, NCCL_NET_HANDLE_MAXSIZE) };
        hs.push(ListenHandle::decode(b, r, inst.provider.kind())?);
    }
    let c = CollComm::connect(l, hs, rank as u32)?;
    info_line!(NET, "rank {rank}/{nranks} connected (provider {:?}, NIC {})", inst.provider.kind(), c.nic.info().name);
    Ok(c)
}

unsafe extern "C" fn create_context(
    coll_comm: *mut c_void,
    config: *mut NcclGinConfig,
    gin_ctx: *mut *mut c_void,
    dev_handle: *mut *mut NcclNetDeviceHandle,
) -> NcclResult {
    guard("createContext", || {
        let gc = out(gin_ctx, "ginCtx")?;
        let dh = out(dev_handle, "devHandle")?;
        *gc = std::ptr::null_mut();
        *dh = std::ptr::null_mut();
        let coll = COLLS.get(coll_comm, "collComm")?;
        // SAFETY: RCCL passes a valid config or NULL.
        let cfg = unsafe { config.as_ref() }.ok_or_else(|| bad_arg!("config is NULL"))?;
        let ic = &coll.instance.config;
        let s = Settings::from_config(cfg, ic.queue_depth, ic.traffic_class)?;
        let ctx = GinContext::create(coll.clone(), s)?;
        let info = coll.nic.info();
        info_line!(
            INIT,
            "provider {:?}, NIC {}: rank {} built {} QPs to {} peers ({} context(s), depth {}, traffic class {}), \
             {} signals, {} counters, backend version {}, rank stride {}",
            coll.instance.provider.kind(),
            info.name,
            coll.rank,
            ctx.queue_pairs(),
            coll.nranks,
            s.n_contexts,
            1u32 << s.log_depth,
            s.traffic_class,
            s.n_signals,
            s.n_counters,
            s.backend_version,
            s.rank_stride
        );
        let ctx = Arc::new(ctx);
        *dh = &*ctx.dev_handle as *const NcclNetDeviceHandle as *mut NcclNetDeviceHandle;
        *gc = CONTEXTS.insert(ctx);
        Ok(())
    })
}

fn reg(coll_comm: *mut c_void, data: *mut c_void, size: usize, type_: c_int, src: Source, mhandle: *mut *mut c_void, gin_handle: *mut *mut c_void) -> Result<()> {
    let mh = out(mhandle, "mhandle")?;
    let gh = out(gin_handle, "ginHandle")?;
    *mh = std::ptr::null_mut();
    *gh = std::ptr::null_mut();
    let coll = COLLS.get(coll_comm, "collComm")?;
    let w = Window::register(coll, data as u64, size as u64, type_, src)?;
    *gh = w.gin_handle() as *mut c_void;
    *mh = WINDOWS.insert(Arc::new(w));
    Ok(())
}

unsafe extern "C" fn reg_mr_sym(
    coll_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    type_: c_int,
    _mr_flags: u64,
    mhandle: *mut *mut c_void,
    gin_handle: *mut *mut c_void,
) -> NcclResult {
    guard("regMrSym", || reg(coll_comm, data, size, type_, Source::Pointer, mhandle, gin_handle))
}

unsafe extern "C" fn reg_mr_sym_dma_buf(
    coll_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    type_: c_int,
    offset: u64,
    fd: c_int,
    _mr_flags: u64,
    mhandle: *mut *mut c_void,
    gin_handle: *mut *mut c_void,
) -> NcclResult {
    guard("regMrSymDmaBuf", || {
        if fd < 0 {
            return Err(bad_arg!("fd {fd} is not a file descriptor"));
        }
        reg(coll_comm, data, size, type_, Source::DmaBuf { offset, fd }, mhandle, gin_handle)
    })
}

unsafe extern "C" fn dereg_mr_sym(coll_comm: *mut c_void, mhandle: *mut c_void) -> NcclResult {
    guard("deregMrSym", || {
        let coll = COLLS.get(coll_comm, "collComm")?;
        let w = WINDOWS.get(mhandle, "mhandle")?;
        if !Arc::ptr_eq(&w.coll, &coll) {
            return Err(bad_arg!("mhandle {mhandle:?} was registered on another collComm"));
        }
        drop(w);
        let w = WINDOWS.remove(mhandle, "mhandle")?;
        retire(w);
        Ok(())
    })
}

/// Invalidates a window's descriptor and keeps its memory with the comm.
fn retire(w: Arc<Window>) {
    match Arc::try_unwrap(w) {
        Ok(w) => {
            let coll = w.coll.clone();
            let desc = w.retire();
            coll.retired_windows.lock().unwrap_or_else(|e| e.into_inner()).push(desc);
        }
        Err(_) => tracing::warn!("deregMrSym: window still in use by a concurrent call; released later"),
    }
}

unsafe extern "C" fn destroy_context(gin_ctx: *mut c_void) -> NcclResult {
    guard("destroyContext", || CONTEXTS.remove(gin_ctx, "ginCtx").map(drop))
}

unsafe extern "C" fn close_coll(coll_comm: *mut c_void) -> NcclResult {
    guard("closeColl", || {
        let coll = COLLS.remove(coll_comm, "collComm")?;
        // RCCL destroys contexts and deregisters windows first; if it did
        // not, do it now rather than leak them.
        let contexts = CONTEXTS.take_where(|c| Arc::ptr_eq(&c.coll, &coll));
        let windows = WINDOWS.take_where(|w| Arc::ptr_eq(&w.coll, &coll));
        if !contexts.is_empty() || !windows.is_empty() {
            crate::warn_line!(
                "closeColl: {} context(s) and {} window(s) were still open; destroyed them",
                contexts.len(),
                windows.len()
            );
        }
        drop(contexts);
        windows.into_iter().for_each(retire);
        Ok(())
    })
}

unsafe extern "C" fn close_listen(listen_comm: *mut c_void) -> NcclResult {
    guard("closeListen", || LISTENS.remove(listen_comm, "listenComm").map(drop))
}

/// A context whose plugin context is not finalized: after finalize RCCL may
/// still tear contexts down, but not drive or query them.
fn live_context(gin_ctx: *mut c_void) -> Result<Arc<GinContext>> {
    let ctx = CONTEXTS.get(gin_ctx, "ginCtx")?;
    ctx.coll.instance.check_alive()?;
    Ok(ctx)
}

unsafe extern "C" fn gin_progress(gin_ctx: *mut c_void) -> NcclResult {
    guard("ginProgress", || {
        live_context(gin_ctx)?.progress();
        Ok(())
    })
}

unsafe extern "C" fn query_last_error(gin_ctx: *mut c_void, has_error: *mut bool) -> NcclResult {
    guard("queryLastError", || {
        let he = out(has_error, "hasError")?;
        *he = false;
        let ctx = live_context(gin_ctx)?;
        if let Some((e, newly)) = ctx.last_error() {
            *he = true;
            if newly {
                crate::warn_line!("rank {}: device-side error: {e}", ctx.coll.rank);
            }
        }
        Ok(())
    })
}

unsafe extern "C" fn finalize(ctx: *mut c_void) -> NcclResult {
    guard("finalize", || {
        let inst = INSTANCES.remove(ctx, "ctx")?;
        inst.finalize();
        Ok(())
    })
}

/// The one symbol RCCL's patch references (patches/0003).
#[no_mangle]
#[used]
pub static ncclGinRustPlugin_v14: NcclGinV14 = NcclGinV14 {
    name: c"rust-gin".as_ptr(),
    init: Some(init),
    devices: Some(devices),
    get_gin_properties: Some(get_gin_properties),
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
    gin_progress: Some(gin_progress),
    query_last_error: Some(query_last_error),
    finalize: Some(finalize),
};

/// Looks up a live context (tests and tools that hold a ginCtx token).
pub fn context(gin_ctx: *mut c_void) -> Result<Arc<GinContext>> {
    CONTEXTS.get(gin_ctx, "ginCtx")
}
