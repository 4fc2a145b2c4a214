//! The C functions behind the slots both vtables fill the same way (init,
//! devices, getProperties, listen, connect, closeListen, finalize), written
//! once and instantiated per plugin: `listen::<Gin>` is the GIN backend's,
//! `listen::<Rma>` the RMA plugin's. Each runs in the boundary guard.

use super::{comm, properties, Offload, Sessions};
use crate::config::Config;
use crate::error::Result;
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
        // SAFETY: RCCL's handle buffer (NCCL_NET_HANDLE_MAXSIZE bytes) or NULL.
        let l = unsafe { comm::listen_on(inst, dev, handle)? };
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
