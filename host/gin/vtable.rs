//! `ncclGinRustPlugin_v14`: the GIN v14 vtable RCCL's patch registers, and the
//! C functions behind it. Each checks its arguments, runs inside the
//! boundary guard (error -> ncclResult_t + WARN, panic -> internal error),
//! and works on registry objects, never on raw pointers RCCL hands back.

use super::context::{GinContext, Settings};
use super::window::{Source, Window};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::ffi::boundary::{guard, out};
use crate::ffi::gin::{NcclGinConfig, NcclGinConfigV15, NcclGinProperties, NcclGinV14, NcclGinV15};
use crate::ffi::plugin_vtable_value;
use crate::ffi::nccl::*;
use crate::provider::Provider;
use crate::session::registry::{Kind, Registry};
use crate::session::mesh::{built_line, PeerSet};
use crate::session::{CollComm, Offload, Plugin, Sessions};
use crate::{bad_arg, info_line};
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// Instances, listen and collective comms of the GIN backend.
pub(crate) static SESSIONS: Sessions = Sessions::new();
pub(crate) static CONTEXTS: Registry<GinContext> = Registry::new(Kind::Context);
pub(crate) static WINDOWS: Registry<Window> = Registry::new(Kind::Memory);

/// Whether RCCL asked for this backend: as RCCL's rocSHMEM backend (type 6)
/// does, rust-gin is chosen only when NCCL_GIN_TYPE names its type (8, or
/// the build's RUST_GIN_TYPE).
pub fn check_selected(nccl_gin_type: Option<&str>) -> Result<()> {
    let ours = NCCL_NET_DEVICE_GIN_RUST;
    match nccl_gin_type.map(str::trim) {
        Some(v) if v == ours.to_string() => Ok(()),
        other => {
            let shown = other.map(|v| format!("NCCL_GIN_TYPE={v}")).unwrap_or_else(|| "NCCL_GIN_TYPE unset".into());
            info_line!(INIT, "not selected ({shown}); set NCCL_GIN_TYPE={ours} to use rust-gin");
            Err(Error::InvalidUsage(format!("rust-gin is selected only with NCCL_GIN_TYPE={ours} ({shown})")))
        }
    }
}

unsafe extern "C" fn get_gin_properties(props: *mut NcclGinProperties) -> NcclResult {
    guard("getGinProperties", || {
        // One RC queue pair per peer and context executes in order: a signal
        // (a fetch-and-add or a slot write behind the data) lands after every
        // earlier put to that peer (strong). VA signals are fetch-and-adds
        // into a window: none with RCCL_RUST_GIN_SIGNAL_MODE=write. With auto
        // the NIC is not open yet: write where the provider named is of a
        // family without atomics into GPU memory (bnxt_re, ionic, or the
        // emulated NIC presenting one); a context that ends up in write mode
        // otherwise refuses VA signals at the device (docs/configuration.md).
        let va = Config::from_env().map_or(true, |c| {
            use crate::config::{ProviderKind, SignalModeKnob};
            let no_atomics = matches!(c.provider, ProviderKind::Bnxt | ProviderKind::Ionic)
                || (c.provider == ProviderKind::Emu && c.emu_family != crate::nic::NicFamily::Mlx5);
            match c.signal_mode {
                SignalModeKnob::Write => false,
                SignalModeKnob::Atomic => true,
                SignalModeKnob::Auto => !no_atomics,
            }
        });
        *out(props, "props")? = NcclGinProperties { supports_strong_signals: true, supports_va_signals: va };
        Ok(())
    })
}

/// The GIN backend's side of the callbacks it shares with the RMA plugin.
pub struct Gin;

impl Plugin for Gin {
    fn sessions() -> &'static Sessions {
        &SESSIONS
    }

    /// Selection, knobs, provider (a usable NIC, or the emulated one by
    /// explicit choice).
    fn open() -> Result<(Config, Arc<dyn Provider>)> {
        check_selected(std::env::var("NCCL_GIN_TYPE").ok().as_deref())?;
        let config = Config::from_env()?;
        let provider = crate::provider::select(&config)?;
        info_line!(INIT, "provider {:?}, {} device(s)", provider.kind(), provider.devices());
        // The platform around a real NIC, once per process (preflight.rs):
        // WARN lines only; the emulated NIC needs none of it.
        if provider.kind() != crate::config::ProviderKind::Emu {
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(crate::preflight::warn_all);
        }
        // NCCL reads a successful init as "GIN works here": the NICs
        // execute our WQEs right, or init says which step failed.
        crate::selftest::check_at_init(&config)?;
        Ok((config, provider))
    }

    /// RCCL_RUST_GIN_RAILS: the NICs a context set spreads over.
    fn rails(config: &Config) -> usize {
        config.rails as usize
    }

    /// This backend's device ABI.
    const OFFLOAD: Offload = Offload {
        net_device_type: NCCL_NET_DEVICE_GIN_RUST,
        net_device_version: crate::abi::RUST_GIN_DEVICE_ABI_VERSION as c_int,
        max_recvs: 1,
    };
}

unsafe extern "C" fn create_context(
    coll_comm: *mut c_void,
    config: *mut NcclGinConfig,
    gin_ctx: *mut *mut c_void,
    dev_handle: *mut *mut NcclNetDeviceHandle,
) -> NcclResult {
    guarded_create(coll_comm, config, gin_ctx, dev_handle, |cfg, coll| {
        let ic = &coll.instance.config;
        let s = Settings::from_config(cfg, ic.queue_depth, ic.traffic_class)?;
        Ok((s, PeerSet::all(coll.nranks), format!("rank stride {}", s.rank_stride)))
    })
}

/// GIN v15 (NCCL 2.32): the config carries the peers to connect instead of a
/// rank stride; queue pairs go to those ranks only.
unsafe extern "C" fn create_context_v15(
    coll_comm: *mut c_void,
    config: *mut NcclGinConfigV15,
    gin_ctx: *mut *mut c_void,
    dev_handle: *mut *mut NcclNetDeviceHandle,
) -> NcclResult {
    guarded_create(coll_comm, config, gin_ctx, dev_handle, |cfg, coll| {
        let ic = &coll.instance.config;
        let s = Settings::from_v15(cfg, ic.queue_depth, ic.traffic_class)?;
        // SAFETY: RCCL's peer array of peerArrayCount ints, alive for the call.
        let peers = unsafe { PeerSet::from_raw(coll.nranks, cfg.peer_array, cfg.peer_array_count, "config")? };
        let scope = format!("peer array of {}", peers.len());
        Ok((s, peers, scope))
    })
}

/// createContext of either version in the boundary guard: the config (NULL
/// refused) read by `settings` into the settings, the peers to connect and
/// how they were given.
fn guarded_create<C>(
    coll_comm: *mut c_void,
    config: *mut C,
    gin_ctx: *mut *mut c_void,
    dev_handle: *mut *mut NcclNetDeviceHandle,
    settings: impl FnOnce(&C, &CollComm) -> Result<(Settings, PeerSet, String)>,
) -> NcclResult {
    guard("createContext", || {
        // SAFETY: RCCL passes a valid config or NULL.
        let cfg = unsafe { config.as_ref() }.ok_or_else(|| bad_arg!("config is NULL"));
        new_context(coll_comm, gin_ctx, dev_handle, |coll| settings(cfg?, coll))
    })
}

/// createContext of either version once `settings` (from the config: the
/// settings, the peers to connect and how they were given) are known.
fn new_context(
    coll_comm: *mut c_void,
    gin_ctx: *mut *mut c_void,
    dev_handle: *mut *mut NcclNetDeviceHandle,
    settings: impl FnOnce(&CollComm) -> Result<(Settings, PeerSet, String)>,
) -> Result<()> {
    let gc = out(gin_ctx, "ginCtx")?;
    let dh = out(dev_handle, "devHandle")?;
    *gc = std::ptr::null_mut();
    *dh = std::ptr::null_mut();
    let coll = SESSIONS.coll(coll_comm)?;
    let (s, peers, scope) = settings(&coll)?;
    let ctx = GinContext::create_for(coll.clone(), s, peers)?;
    let built = built_line(&coll, ctx.queue_pairs(), ctx.peers(), s.n_contexts, s.log_depth, s.traffic_class);
    info_line!(
        INIT,
        "{built}), {} signals, {} counters, backend version {}, {scope}",
        s.n_signals,
        s.n_counters,
        s.backend_version,
    );
    let ctx = Arc::new(ctx);
    *dh = &*ctx.dev_handle as *const NcclNetDeviceHandle as *mut NcclNetDeviceHandle;
    *gc = CONTEXTS.insert(ctx);
    Ok(())
}

fn reg(coll_comm: *mut c_void, data: *mut c_void, size: usize, type_: c_int, src: Source, mhandle: *mut *mut c_void, gin_handle: *mut *mut c_void) -> Result<()> {
    let mh = out(mhandle, "mhandle")?;
    let gh = out(gin_handle, "ginHandle")?;
    *mh = std::ptr::null_mut();
    *gh = std::ptr::null_mut();
    let coll = SESSIONS.coll(coll_comm)?;
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
        let coll = SESSIONS.coll(coll_comm)?;
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
        let coll = SESSIONS.colls.remove(coll_comm, "collComm")?;
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
                // What the NICs counted, in the same line: a lost peer shows
                // as ACK timeouts, a bad key as remote access errors.
                let counted: Vec<String> = ctx
                    .coll
                    .rails
                    .iter()
                    .filter_map(|n| n.error_counters().map(|c| format!("{}: {c}", n.info().name)))
                    .collect();
                let counted =
                    if counted.is_empty() { String::new() } else { format!("; NIC counters: {}", counted.join("; ")) };
                crate::warn_line!("rank {}: device-side error: {e}{counted}", ctx.coll.rank);
            }
        }
        Ok(())
    })
}

/// The one symbol RCCL's patch references (patches/0003).
#[no_mangle]
#[used]
pub static ncclGinRustPlugin_v14: NcclGinV14 = plugin_vtable_value!(NcclGinV14, Gin, c"rust-gin", {
    get_gin_properties: get_gin_properties,
    create_context: create_context,
    reg_mr_sym: reg_mr_sym,
    reg_mr_sym_dma_buf: reg_mr_sym_dma_buf,
    gin_progress: gin_progress,
});

/// The GIN v15 vtable, for an RCCL that syncs NCCL 2.32 (NVIDIA/nccl's
/// src/plugin/gin.cc tries v15, 14, 13 since gin_v15.h, @7217a581): v14's
/// callbacks but createContext, which takes a peer array. Patch 0003
/// registers it in a tree whose gin.cc sees gin_v15.h; the pinned RCCL has
/// none and gets ncclGinRustPlugin_v14.
#[no_mangle]
#[used]
pub static ncclGinRustPlugin_v15: NcclGinV15 = plugin_vtable_value!(NcclGinV15, Gin, c"rust-gin", {
    get_gin_properties: get_gin_properties,
    create_context: create_context_v15,
    reg_mr_sym: reg_mr_sym,
    reg_mr_sym_dma_buf: reg_mr_sym_dma_buf,
    gin_progress: gin_progress,
});

/// What each rail's NIC of a collComm counted, rail 0 first (tests and
/// tools that hold a collComm token; docs/architecture.md, "Rails").
pub fn rail_counters(coll_comm: *mut c_void) -> Result<Vec<(String, Option<crate::nic::CounterSnapshot>)>> {
    Ok(SESSIONS.coll(coll_comm)?.rail_counters())
}

/// Looks up a live context (tests and tools that hold a ginCtx token).
pub fn context(gin_ctx: *mut c_void) -> Result<Arc<GinContext>> {
    CONTEXTS.get(gin_ctx, "ginCtx")
}
