//! ConnectX through verbs (rdma-sys) and mlx5 DevX (bindgen of mlx5dv.h),
//! following rocSHMEM's GDA design: per QP, the send ring, a CQ ring and the
//! doorbell records are DevX umems in host-pinned memory (hipHostMalloc) by
//! default, or GPU memory by RCCL_RUST_GIN_QUEUE_PLACEMENT=device; each QP
//! has a non-cached UAR of its own, mapped for the GPU through HIP; the CQ is
//! a normal one (the device code polls CQEs by owner bit and writes the CQ
//! doorbell record).
//!
//! Modules: [`device`] (open, port, GID, NicInfo), [`devx`] (umem, UAR,
//! DevX objects), [`prm`] (the PRM command layouts), [`qp`] (queue pairs),
//! [`mr`] (memory regions), [`addr`] (the peer address and path math),
//! [`platform`] (every rdma-core, sysfs and HIP call, behind one trait that
//! tests implement with a recording stand-in).
//!
//! UNVERIFIED ON HARDWARE: written and compiled without a ConnectX NIC or an
//! AMD GPU. docs/mlx5-provider.md lists what has and has not run, and the
//! commands that verify it on an MI300X + ConnectX-7 node.

pub mod addr;
mod dc;
mod device;
mod counters;
mod devx;
pub mod doorbell;
pub mod mr;
pub mod platform;
pub mod prm;
mod qp;

use super::caps::{self, Capabilities, Known};
use super::{Access, DcTarget, MemoryRegion, Nic, NicAddress, NicInfo, Provider, QueuePair};
use crate::config::{Config, ProviderKind};
use crate::error::{Error, Result};
use crate::ffi::nccl::NCCL_PTR_DMABUF;
use crate::gpu::{Allocator, HostMemory, RingHome};
use device::Context;
use platform::Platform;
use std::sync::{Arc, Mutex};

pub use devx::{UAR_ALLOC_TYPE_NC, UAR_ALLOC_TYPE_NC_DEDICATED};

pub struct Mlx5Provider {
    /// Where every call for these devices goes.
    platform: Arc<dyn Platform>,
    names: Vec<String>,
    config: Config,
    infos: Mutex<Vec<Option<NicInfo>>>,
    /// What [`Provider::open`] opens NICs for.
    mode: MemoryMode,
}

pub use super::MemoryMode;

impl Mlx5Provider {
    /// Lists the mlx5 RDMA devices; fails, saying what to do, when none is usable.
    pub fn probe(config: &Config) -> Result<Mlx5Provider> {
        Self::probe_on(platform::process_platform(), config)
    }

    /// As [`Mlx5Provider::probe`], every call going to `platform`.
    pub fn probe_on(platform: Arc<dyn Platform>, config: &Config) -> Result<Mlx5Provider> {
        let all = platform.device_names().map_err(|errno| {
            Error::System(format!(
                "no RDMA device found{} (ibv_get_device_list: {errno}). Check that the ConnectX driver (mlx5_ib) is \
                 loaded and /dev/infiniband is accessible; to run without hardware set RCCL_RUST_GIN_PROVIDER=emu",
                config
                    .nic_filter
                    .as_ref()
                    .map(|f| format!(", so none matches RCCL_RUST_GIN_NIC={f}"))
                    .unwrap_or_default()
            ))
        })?;
        let n = all.len();
        let wanted = |name: &str| config.nic_filter.as_ref().is_none_or(|f| f.split(',').any(|w| w.trim() == name));
        let names: Vec<String> = all.into_iter().filter(|name| name.starts_with("mlx5") && wanted(name)).collect();
        if names.is_empty() {
            return Err(Error::System(format!(
                "no usable mlx5 device among {n} RDMA device(s){}; set RCCL_RUST_GIN_NIC to an mlx5 device name, or \
                 RCCL_RUST_GIN_PROVIDER=emu to run without hardware",
                config.nic_filter.as_ref().map(|f| format!(" matching RCCL_RUST_GIN_NIC={f}")).unwrap_or_default()
            )));
        }
        let infos = Mutex::new(vec![None; names.len()]);
        Ok(Mlx5Provider { platform, names, config: config.clone(), infos, mode: MemoryMode::Gpu })
    }

    /// The same devices, opened by [`Provider::open`] for `mode`.
    pub fn for_mode(mut self, mode: MemoryMode) -> Mlx5Provider {
        self.mode = mode;
        self
    }

    /// The device names, in index order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Opens device `dev` with queue memory and doorbells for `mode`.
    pub fn open_mode(&self, dev: usize, mode: MemoryMode) -> Result<Arc<Mlx5Nic>> {
        super::check_dev(dev, self.names.len())?;
        let ctx = Arc::new(Context::open(&self.platform, &self.names[dev], &self.config, true)?);
        let memory = match mode {
            MemoryMode::Gpu => qp::Memory::Gpu(self.platform.open_gpu().map_err(|e| {
                Error::System(format!("{}: queue memory and doorbells for the GPU: {}", ctx.name, e.message()))
            })?),
            MemoryMode::Host => qp::Memory::Host(Arc::new(HostMemory)),
        };
        let eqn = devx::query_eqn(&ctx)?;
        let info = ctx.info();
        crate::info_line!(
            INIT,
            "mlx5 provider: {} port {} ({:?}, GID index {} {:?}, {} Mbps, PCI {}), memory: {}",
            info.name,
            ctx.port,
            ctx.link_layer,
            ctx.gid_index,
            ctx.gid_type,
            info.speed_mbps,
            info.pci_path,
            memory.allocator().describe()
        );
        // Optional: without a set the NIC works, its WARNs say less.
        let counters = match counters::QueueCounters::alloc(&ctx) {
            Ok(c) => Some(Arc::new(c)),
            Err(e) => {
                crate::info_line!(INIT, "{}: no queue-counter set, error reports will lack the NIC's counters: {e}", ctx.name);
                None
            }
        };
        let nic = Mlx5Nic { ctx, memory, eqn, info, counters, dc_capable: Mutex::new(None), dc_avs: Mutex::default() };
        let caps = nic.capabilities();
        crate::info_line!(INIT, "capabilities of {caps}");
        if let Some(why) = caps.atomics_unusable() {
            crate::info_line!(INIT, "{why}: signals travel as slot writes (RCCL_RUST_GIN_SIGNAL_MODE=auto), no VA signals");
        }
        Ok(Arc::new(nic))
    }
}

impl Provider for Mlx5Provider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Mlx5
    }
    fn devices(&self) -> usize {
        self.names.len()
    }
    fn info(&self, dev: usize) -> Result<NicInfo> {
        super::check_dev(dev, self.names.len())?;
        let mut infos = self.infos.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = &infos[dev] {
            return Ok(i.clone());
        }
        // A plain verbs context is enough for the queries (no DevX needed).
        let info = Context::open(&self.platform, &self.names[dev], &self.config, false)?.info();
        infos[dev] = Some(info.clone());
        Ok(info)
    }
    fn open(&self, dev: usize) -> Result<Arc<dyn Nic>> {
        Ok(self.open_mode(dev, self.mode)?)
    }
    /// The GPU's bus id (HIP) resolved in sysfs, as the NICs' paths are.
    fn gpu_pci_path(&self) -> Option<String> {
        let bus = self.platform.open_gpu().ok()?.pci_bus_id()?;
        std::fs::canonicalize(format!("/sys/bus/pci/devices/{}", bus.to_ascii_lowercase()))
            .ok()
            .map(|p| p.display().to_string())
    }
}

/// One opened ConnectX port.
pub struct Mlx5Nic {
    ctx: Arc<Context>,
    memory: qp::Memory,
    eqn: u32,
    info: NicInfo,
    /// Every QP of this NIC counts into it (counters.rs).
    counters: Option<Arc<counters::QueueCounters>>,
    /// The DC capability, asked once (QUERY_HCA_CAP) when DC is first used.
    dc_capable: Mutex<Option<std::result::Result<(), Error>>>,
    /// Address vectors by peer address: every context of a context set asks
    /// for every peer's, and on RoCE each costs an address handle (a kernel
    /// call resolving the MAC); kept for the NIC's life.
    dc_avs: Mutex<std::collections::HashMap<NicAddress, crate::mlx5::wire::DatagramSeg>>,
}

impl Mlx5Nic {
    /// Refuses DC on a device without it; asks the firmware once (a failed
    /// query is asked again next time).
    fn check_dc(&self) -> Result<()> {
        let mut known = self.dc_capable.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = known.as_ref() {
            return r.clone();
        }
        match dc::check_dc_capable(&self.ctx) {
            Err(e @ Error::System(_)) => Err(e),
            r => {
                *known = Some(r.clone());
                r
            }
        }
    }
}

impl Nic for Mlx5Nic {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Mlx5
    }
    fn info(&self) -> NicInfo {
        self.info.clone()
    }
    fn address(&self) -> NicAddress {
        self.ctx.address().encode()
    }
    fn check_peer(&self, remote: &NicAddress) -> Result<()> {
        addr::check_peer(&self.ctx.address(), &addr::Mlx5Address::decode(remote)?)
    }
    fn allocator(&self) -> Arc<dyn Allocator> {
        self.memory.allocator()
    }
    fn create_qp(&self, log_depth: u32, traffic_class: u8, rings_in_device_memory: bool) -> Result<Box<dyn QueuePair>> {
        let rings = if rings_in_device_memory { RingHome::Device } else { RingHome::Host };
        Ok(Box::new(qp::Mlx5Qp::create(&self.ctx, &self.memory, self.eqn, log_depth, traffic_class, rings, self.counters.as_ref())?))
    }
    fn create_dci(&self, log_depth: u32, traffic_class: u8, rings_in_device_memory: bool) -> Result<Box<dyn QueuePair>> {
        self.check_dc()?;
        let rings = if rings_in_device_memory { RingHome::Device } else { RingHome::Host };
        Ok(Box::new(qp::Mlx5Qp::create_dci(&self.ctx, &self.memory, self.eqn, log_depth, traffic_class, rings, self.counters.as_ref())?))
    }
    fn create_dct(&self, key: u64) -> Result<Box<dyn DcTarget>> {
        self.check_dc()?;
        Ok(Box::new(dc::Mlx5Dct::create(&self.ctx, &self.memory, self.eqn, key)?))
    }
    fn dc_address(&self, remote: &NicAddress) -> Result<crate::mlx5::wire::DatagramSeg> {
        let mut avs = self.dc_avs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(av) = avs.get(remote) {
            return Ok(*av);
        }
        let av = dc::dc_address(&self.ctx, &addr::Mlx5Address::decode(remote)?)?;
        avs.insert(*remote, av);
        Ok(av)
    }
    /// With a GPU: dma-buf first (exported by HIP, imported by the NIC
    /// driver, no out-of-tree peer-memory module needed), then peer-memory
    /// (ibv_reg_mr of the GPU address), with an error naming both when
    /// neither works. Host memory registered here takes the second path.
    unsafe fn reg_mr(&self, addr: u64, len: u64, access: Access) -> Result<Box<dyn MemoryRegion>> {
        if !matches!(self.memory, qp::Memory::Gpu(_)) {
            // SAFETY: forwarded contract.
            return unsafe { mr::reg(&self.ctx, addr, len, access) };
        }
        let dmabuf = if self.info.ptr_support & NCCL_PTR_DMABUF == 0 {
            Err(format!("{} cannot import dma-bufs", self.ctx.name))
        } else {
            self.ctx.platform.export_dmabuf(addr, len).and_then(|d| {
                use std::os::fd::AsRawFd;
                // SAFETY: forwarded contract; the dma-buf covers the range
                // (exported for its pages), and the NIC keeps its own
                // reference, so the fd may close after the call.
                unsafe { mr::reg_dmabuf(&self.ctx, addr, len, d.offset, d.fd.as_raw_fd(), access) }
                    .map_err(|e| e.to_string())
            })
        };
        let dmabuf_err = match dmabuf {
            Ok(r) => {
                registration_path(&self.ctx.name, "dma-buf");
                return Ok(r);
            }
            Err(e) => e,
        };
        // SAFETY: forwarded contract.
        match unsafe { mr::reg(&self.ctx, addr, len, access) } {
            Ok(r) => {
                registration_path(&self.ctx.name, &format!("peer-memory (dma-buf: {dmabuf_err})"));
                Ok(r)
            }
            Err(e) => Err(Error::System(format!(
                "registering {len} bytes of GPU memory at {addr:#x}: dma-buf failed ({dmabuf_err}); \
                 peer-memory failed ({e})"
            ))),
        }
    }
    unsafe fn reg_dmabuf_mr(
        &self,
        addr: u64,
        len: u64,
        offset: u64,
        fd: i32,
        access: Access,
    ) -> Result<Box<dyn MemoryRegion>> {
        // SAFETY: forwarded contract.
        unsafe { mr::reg_dmabuf(&self.ctx, addr, len, offset, fd, access) }
    }
    fn needs_progress(&self) -> bool {
        false
    }
    fn progress(&self) -> bool {
        false
    }
    fn error_counters(&self) -> Option<String> {
        Some(match self.counters.as_ref()?.query() {
            Ok(all) => super::nonzero_counters(all),
            Err(e) => format!("unreadable ({e})"),
        })
    }
    fn capabilities(&self) -> Capabilities {
        let c = &self.ctx;
        Capabilities {
            nic: c.name.clone(),
            remote_atomics: if c.atomic_cap == platform::ATOMIC_NONE {
                Known::No("verbs atomic_cap is IBV_ATOMIC_NONE".into())
            } else {
                Known::Yes
            },
            atomics_use_pcie: c.atomic_cap == platform::ATOMIC_GLOB,
            gpu_atomic_completer: match &self.memory {
                qp::Memory::Gpu(g) => caps::gpu_atomic_completer(g.pci_bus_id().as_deref(), |p| c.platform.read_sysfs(p)),
                qp::Memory::Host(_) => Known::Unknown("host-memory mode: no GPU".into()),
            },
            dmabuf: self.info.ptr_support & NCCL_PTR_DMABUF != 0,
            max_inline: crate::device::MAX_INLINE,
            max_qp: Some(c.max_qp),
            qps_per_uar: Some(c.uars.per_page()),
        }
    }
}

/// Says once per NIC which way GPU memory is registered (NCCL_DEBUG=INFO).
fn registration_path(nic: &str, how: &str) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.iter().any(|n| n == nic) {
        said.push(nic.to_string());
        crate::info_line!(INIT, "{nic}: GPU memory registered through {how}");
    }
}
