//! A GIN world for measurements: ranks as threads of this process, each with
//! its own NIC, connected through the real backend objects (listen handles,
//! connection setup, createContext, symmetric windows), as RCCL would build
//! them. With hosts (gin-perf --fabric tcp --hosts), each rank's emulated
//! NIC is on a TCP fabric of its own, listening on its host's address, and
//! its thread first enters that host's network namespace (if named): its
//! sockets (connection setup, the fabric's listener and event loop) live
//! there, so every packet between ranks crosses the namespaces' network.

use rccl_rust_gin::config::Config;
use rccl_rust_gin::error::{Error, Result};
use rccl_rust_gin::gin::comm::{CollComm, Instance, ListenComm};
use rccl_rust_gin::gin::context::{GinContext, Settings};
use rccl_rust_gin::gin::window::{Source, Window};
use rccl_rust_gin::gpu::{Allocator, GpuBuf, HostMemory, Object};
use rccl_rust_gin::ffi::nccl::NCCL_PTR_CUDA;
use std::sync::{Arc, Barrier, Mutex};

/// One rank's objects.
pub struct Rank {
    pub coll: Arc<CollComm>,
    pub ctx: GinContext,
    /// Source and destination windows of `window_bytes` each.
    pub src: Window,
    pub dst: Window,
    _src_buf: GpuBuf,
    _dst_buf: GpuBuf,
}

impl Rank {
    /// The device handle kernels (and the host build of the device code) take.
    pub fn handle(&self) -> *const std::ffi::c_void {
        self.ctx.device_handle() as *const std::ffi::c_void
    }
    pub fn counters(&self) -> Option<rccl_rust_gin::nic::CounterSnapshot> {
        self.coll.nic.counters()
    }
    /// Host addresses of the source and destination windows' memory (the
    /// emulated NIC's memory is host memory).
    pub fn host_addrs(&self) -> (usize, usize) {
        (self._src_buf.host_addr().unwrap_or(0), self._dst_buf.host_addr().unwrap_or(0))
    }
}

// SAFETY: GinContext and windows are Send + Sync; the buffers are owned.
unsafe impl Send for Rank {}
// SAFETY: as above.
unsafe impl Sync for Rank {}

/// Where a rank's NIC lives on a TCP fabric: an address of this machine,
/// and the network namespace (under /run/netns) holding it, if any.
#[derive(Clone, Debug)]
pub struct Host {
    pub ip: std::net::IpAddr,
    pub netns: Option<String>,
}

impl std::str::FromStr for Host {
    type Err = String;
    /// IP or IP@NETNS.
    fn from_str(s: &str) -> std::result::Result<Host, String> {
        let (ip, ns) = s.split_once('@').map_or((s, None), |(i, n)| (i, Some(n.to_string())));
        let ip = ip.parse().map_err(|_| format!("--hosts: {ip:?} is not an IP address (IP or IP@NETNS)"))?;
        if ns.as_deref().is_some_and(|n| n.is_empty() || n.contains('/')) {
            return Err(format!("--hosts: {s:?}: a namespace name after @, as `ip netns list` shows it"));
        }
        Ok(Host { ip, netns: ns })
    }
}

/// Moves this thread into network namespace `ns` (/run/netns/<ns>).
fn enter(ns: &str) -> Result<()> {
    let f = std::fs::File::open(format!("/run/netns/{ns}"))
        .map_err(|e| Error::InvalidArgument(format!("--hosts: network namespace {ns}: {e}")))?;
    use std::os::fd::AsRawFd;
    // SAFETY: setns on a descriptor of a namespace file; it changes only this
    // thread's network namespace (its later sockets and threads).
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(Error::System(format!("--hosts: entering network namespace {ns}: {}", std::io::Error::last_os_error())));
    }
    Ok(())
}

/// The configuration of a rank on `host`: its own TCP fabric on the host's
/// address, and connection setup on the interface holding it.
fn on_host(config: &Config, host: &Host) -> Result<Config> {
    if let Some(ns) = &host.netns {
        enter(ns)?;
    }
    let mut c = config.clone();
    c.emu_fabric = rccl_rust_gin::config::EmuFabric::Tcp(host.ip.to_string());
    let found = rccl_rust_gin::oob::iface::interfaces().into_iter().find(|a| a.ip == host.ip).map(|a| a.name);
    // 127.0.0.x other than .1 is on lo without being listed as its address.
    let iface = match found {
        Some(n) => n,
        None if host.ip.is_loopback() => "lo".to_string(),
        None => return Err(Error::InvalidArgument(format!("--hosts: no interface here has address {}", host.ip))),
    };
    c.socket_ifname = Some(format!("={iface}"));
    Ok(c)
}

/// Builds `nranks` connected ranks with one context set per rank; with
/// `hosts` (one per rank), each rank on its own host (see the module text).
pub fn build(config: &Config, nranks: usize, settings: Settings, window_bytes: usize, hosts: &[Host]) -> Result<Vec<Rank>> {
    build_sized(config, nranks, settings, window_bytes, window_bytes, hosts)
}

/// As [`build`], with a source window of `src_bytes` and a destination
/// window of `dst_bytes` on every rank.
pub fn build_sized(
    config: &Config,
    nranks: usize,
    settings: Settings,
    src_bytes: usize,
    dst_bytes: usize,
    hosts: &[Host],
) -> Result<Vec<Rank>> {
    if !hosts.is_empty() && hosts.len() != nranks {
        return Err(Error::InvalidArgument(format!("--hosts names {} hosts for {nranks} ranks", hosts.len())));
    }
    let provider = rccl_rust_gin::provider::select(config)?;
    let barrier = Barrier::new(nranks);
    let handles = Mutex::new(vec![None; nranks]);
    let out: Vec<Result<Rank>> = std::thread::scope(|s| {
        let joins: Vec<_> = (0..nranks)
            .map(|r| {
                let (provider, barrier, handles) = (provider.clone(), &barrier, &handles);
                s.spawn(move || -> Result<Rank> {
                    let (config, provider) = match hosts.get(r) {
                        None => (config.clone(), provider),
                        Some(h) => match on_host(config, h).and_then(|c| Ok((rccl_rust_gin::provider::select(&c)?, c))) {
                            Ok((p, c)) => (c, p),
                            Err(e) => {
                                barrier.wait();
                                return Err(e);
                            }
                        },
                    };
                    let config = &config;
                    let inst = Arc::new(Instance::new(config.clone(), provider, 0x9e37_79b9));
                    let listen = ListenComm::new(inst, 0, config.rails as usize);
                    let h = listen.as_ref().map(|l| l.handle.clone()).ok();
                    handles.lock().unwrap_or_else(|e| e.into_inner())[r] = h;
                    barrier.wait();
                    let all: Vec<_> = handles.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    let listen = listen?;
                    let all: Vec<_> = all
                        .into_iter()
                        .enumerate()
                        .map(|(p, h)| h.ok_or_else(|| Error::Internal(format!("rank {p} could not listen"))))
                        .collect::<Result<_>>()?;
                    let coll = Arc::new(CollComm::connect(&listen, all, r as u32)?);
                    let ctx = GinContext::create(coll.clone(), settings)?;
                    let alloc = HostMemory;
                    let src_buf = alloc.alloc(src_bytes, 4096, Object::WindowData)?;
                    let dst_buf = alloc.alloc(dst_bytes, 4096, Object::WindowData)?;
                    let src = Window::register(coll.clone(), src_buf.dev_addr(), src_bytes as u64, NCCL_PTR_CUDA, Source::Pointer)?;
                    let dst = Window::register(coll.clone(), dst_buf.dev_addr(), dst_bytes as u64, NCCL_PTR_CUDA, Source::Pointer)?;
                    Ok(Rank { coll, ctx, src, dst, _src_buf: src_buf, _dst_buf: dst_buf })
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap_or_else(|_| Err(Error::Internal("rank thread panicked".into())))).collect()
    });
    out.into_iter().collect()
}
