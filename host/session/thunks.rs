//! The C functions behind the slots both vtables fill the same way (init,
//! devices, getProperties, listen, connect, closeListen, finalize), written
//! once and instantiated per plugin: `listen::<Gin>` is the GIN backend's,
//! `listen::<Rma>` the RMA plugin's. Each runs in the boundary guard.

use super::{comm, properties, Offload, Sessions};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::ffi::boundary::{guard, out};
use crate::ffi::nccl::{NcclLogger, NcclNetProperties, NcclResult};
use crate::provider::Provider;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// What differs between the plugins in these slots.
pub trait Plugin: 'static {
    /// The plugin's own instances and comms.
    fn sessions() -> &'static Sessions;
    /// init(): reads the knobs and opens the provider the plugin posts through.
    fn open() -> Result<(Config, Arc<dyn Provider>)>;
    /// What getProperties announces.
    const OFFLOAD: Offload;
    /// NICs per comm (rails) listen() opens: one unless the plugin spreads
    /// its contexts over several (the GIN backend, RCCL_RUST_GIN_RAILS).
    fn rails(_config: &Config) -> usize {
        1
    }
}

pub unsafe extern "C" fn init<P: Plugin>(ctx: *mut *mut c_void, comm_id: u64, logger: NcclLogger) -> NcclResult {
    crate::log::set_logger(logger);
    guard("init", || {
        let ctx = out(ctx, "ctx")?;
        *ctx = std::ptr::null_mut();
        let (config, provider) = P::open()?;
        *ctx = P::sessions().init(config, provider, comm_id);
        Ok(())
    })
}

pub unsafe extern "C" fn devices<P: Plugin>(ndev: *mut c_int) -> NcclResult {
    guard("devices", || {
        let ndev = out(ndev, "ndev")?;
        *ndev = P::sessions().provider()?.devices() as c_int;
        Ok(())
    })
}

pub unsafe extern "C" fn get_properties<P: Plugin>(dev: c_int, props: *mut NcclNetProperties) -> NcclResult {
    guard("getProperties", || {
        let props = out(props, "props")?;
        properties::fill(&*P::sessions().provider()?, dev, P::OFFLOAD, props)
    })
}

pub unsafe extern "C" fn listen<P: Plugin>(
    ctx: *mut c_void,
    dev: c_int,
    handle: *mut c_void,
    listen_comm: *mut *mut c_void,
) -> NcclResult {
    guard("listen", || {
        let lc = out(listen_comm, "listenComm")?;
        *lc = std::ptr::null_mut();
        let inst = P::sessions().instances.get(ctx, "ctx")?;
        let rails = P::rails(&inst.config);
        // SAFETY: RCCL's handle buffer (NCCL_NET_HANDLE_MAXSIZE bytes) or NULL.
        let l = unsafe { comm::listen_on(inst, dev, rails, handle)? };
        *lc = P::sessions().listens.insert(Arc::new(l));
        Ok(())
    })
}

pub unsafe extern "C" fn connect<P: Plugin>(
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
        let s = P::sessions();
        let inst = s.instances.get(ctx, "ctx")?;
        let l = s.listens.get(listen_comm, "listenComm")?;
        // SAFETY: RCCL's array of nranks handle pointers, or NULL.
        let c = unsafe { comm::connect_with(&inst, &l, handles, nranks, rank)? };
        *cc = s.colls.insert(Arc::new(c));
        Ok(())
    })
}

/// RMA v17's connect: connect() that honours RCCL's abort flag
/// (`comm->abortFlag`, NVIDIA/nccl rma_proxy.cc). The connection setup runs
/// on a helper thread while the calling thread watches the flag: once it is
/// set, connect returns ncclInternalError with a WARN line at once, and the
/// helper's setup gives up at its next wait (within about a second: one
/// connection attempt) and drops what it built. A flag already set refuses
/// to start. NULL means no flag (as in v13-v16).
///
/// # Safety
/// Called by RCCL with its arguments: `handles` as connect()'s, `abort_flag`
/// NULL or a u32 that outlives the call.
pub unsafe extern "C" fn connect_v17<P: Plugin>(
    ctx: *mut c_void,
    handles: *mut *mut c_void,
    nranks: c_int,
    rank: c_int,
    listen_comm: *mut c_void,
    coll_comm: *mut *mut c_void,
    abort_flag: *const u32,
) -> NcclResult {
    guard("connect", || {
        let cc = out(coll_comm, "collComm")?;
        *cc = std::ptr::null_mut();
        // SAFETY: RCCL's abort flag (a u32 it may set from another thread)
        // lives as long as its comm, which outlives this call; NULL is no
        // flag. Read volatile, as RCCL declares it.
        let aborted = || !abort_flag.is_null() && unsafe { std::ptr::read_volatile(abort_flag) } != 0;
        let abort_err = |when: &str| {
            Error::Internal(format!("abortFlag is set ({when}): connection setup of rank {rank}/{nranks} abandoned"))
        };
        if aborted() {
            return Err(abort_err("before connection setup started"));
        }
        let s = P::sessions();
        let inst = s.instances.get(ctx, "ctx")?;
        let l = s.listens.get(listen_comm, "listenComm")?;
        // SAFETY: RCCL's array of nranks handle pointers, or NULL.
        let hs = unsafe { comm::decode_handles(&inst, handles, nranks, rank)? };
        let (tx, rx) = std::sync::mpsc::channel();
        // Set when this call gives up: the helper's setup stops at its next
        // wait and drops what it built.
        let cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let helper_cancel = cancel.clone();
        std::thread::Builder::new()
            .name("rust-gin-connect".into())
            .spawn(move || {
                let _ = tx.send(comm::CollComm::connect_cancellable(&l, hs, rank as u32, helper_cancel));
            })
            .map_err(|e| Error::System(format!("cannot start the connection-setup thread: {e}")))?;
        let c = loop {
            match rx.recv_timeout(std::time::Duration::from_millis(1)) {
                Ok(r) => break r?,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) if aborted() => {
                    cancel.store(true, std::sync::atomic::Ordering::Release);
                    return Err(abort_err("during connection setup"));
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(Error::Internal("the connection-setup thread ended without an answer".into()))
                }
            }
        };
        if aborted() {
            return Err(abort_err("when connection setup finished"));
        }
        *cc = s.colls.insert(Arc::new(comm::connected(&inst, c)?));
        Ok(())
    })
}

pub unsafe extern "C" fn close_listen<P: Plugin>(listen_comm: *mut c_void) -> NcclResult {
    guard("closeListen", || P::sessions().listens.remove(listen_comm, "listenComm").map(drop))
}

/// finalize(): objects made under the instance refuse further use.
pub unsafe extern "C" fn finalize<P: Plugin>(ctx: *mut c_void) -> NcclResult {
    guard("finalize", || {
        P::sessions().instances.remove(ctx, "ctx")?.finalize();
        Ok(())
    })
}
