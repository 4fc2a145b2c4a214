//! NIC providers behind one interface. The GIN backend and the RMA plugin
//! see a [`Provider`] (the NICs a process can use) and, per listening rank, a
//! [`Nic`] that creates queue pairs and registers memory. Providers:
//! - `mlx5`: ConnectX through verbs and mlx5 DevX (host/provider/mlx5/);
//! - `emu`: the emulated NIC (host/provider/emu.rs), only by explicit choice;
//! - `bnxt` (Broadcom Thor2) and `ionic` (AMD Pollara) through their direct
//!   verbs (host/provider/dv.rs, bnxt/, ionic/), chosen by the NIC's vendor.

pub mod bnxt;
pub mod caps;
pub mod dv;
mod dv_sys;
#[cfg(feature = "emu")]
pub mod emu;
pub mod ionic;
pub mod mlx5;

pub use crate::nic::{Access, CounterSnapshot, NicFamily, NicResources};

use crate::abi::{rust_gin_mlx5_sq, rust_gin_nic_sq};
use crate::config::{Config, ProviderKind};
use crate::error::{Error, Result};
use crate::gpu::Allocator;
use std::sync::Arc;

/// What RCCL's getProperties reports about a NIC.
#[derive(Clone, Debug, Default)]
pub struct NicInfo {
    pub name: String,
    pub pci_path: String,
    pub guid: u64,
    /// Port speed in Mbps.
    pub speed_mbps: i32,
    pub port: i32,
    /// Registration kinds that really work (NCCL_PTR_HOST | CUDA | DMABUF).
    pub ptr_support: i32,
    /// Largest message of one operation.
    pub max_message: u64,
    pub latency_us: f32,
    /// Whether every put already received on this NIC is visible once any
    /// signal arrives, from any peer (RMA v16's getRmaProperties;
    /// docs/rma-plugin.md gives the reasoning per provider).
    pub flushes_all_puts_on_any_signal: bool,
}

/// What a peer needs to reach a NIC: goes into the listen handle.
pub const NIC_ADDRESS_BYTES: usize = 40;
pub type NicAddress = [u8; NIC_ADDRESS_BYTES];


/// A registered memory region.
pub trait MemoryRegion: Send + Sync {
    fn lkey(&self) -> u32;
    fn rkey(&self) -> u32;
    /// The address the NIC uses for this region (as registered).
    fn addr(&self) -> u64;
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// (lkey, rkey) on each rail, rail 0 first: a region registered on
    /// several NICs (session::rails) has a key pair per NIC.
    fn rail_keys(&self) -> Vec<(u32, u32)> {
        vec![(self.lkey(), self.rkey())]
    }
}

/// The device-side descriptor of one queue, by family.
#[derive(Clone, Copy, Debug)]
pub enum QueueDescriptor {
    Mlx5(rust_gin_mlx5_sq),
    /// bnxt_re or ionic (abi/nic_queue.h).
    Nic(NicFamily, rust_gin_nic_sq),
}

impl QueueDescriptor {
    /// The family of the queue it describes.
    pub fn family(&self) -> NicFamily {
        match self {
            QueueDescriptor::Mlx5(_) => NicFamily::Mlx5,
            QueueDescriptor::Nic(f, _) => *f,
        }
    }

    /// The mlx5 descriptor, for code that drives mlx5 queues only.
    pub fn mlx5(self) -> Option<rust_gin_mlx5_sq> {
        match self {
            QueueDescriptor::Mlx5(d) => Some(d),
            QueueDescriptor::Nic(..) => None,
        }
    }
}

/// A reliable-connected queue pair with its CQ, built over queue memory a
/// kernel can reach.
pub trait QueuePair: Send + Sync {
    fn qpn(&self) -> u32;
    /// INIT -> RTR (towards the remote NIC's QP) -> RTS.
    fn connect(&self, remote: &NicAddress, remote_qpn: u32) -> Result<()>;
    /// The device-side descriptor of this queue.
    fn descriptor(&self, peer: u32, error: u64, timeout_ns: u64) -> QueueDescriptor;
    /// log2 of the ring's slots: WQEBBs (mlx5), WQEs (bnxt_re, ionic); the
    /// counter log has one entry per slot.
    fn log_slots(&self) -> u32;
    /// An mlx5 queue's memory (its ring read back for error reports); None
    /// for the other families.
    fn mlx5_memory(&self) -> Option<&crate::mlx5::queue::QueueMem> {
        None
    }
}

/// A DC target (DCT): one per rank and NIC for a context set with the DC
/// transport; any peer's DC initiator reaches it with its number and key.
pub trait DcTarget: Send + Sync {
    fn dctn(&self) -> u32;
    fn key(&self) -> u64;
}

/// One NIC opened by one rank.
pub trait Nic: Send + Sync {
    fn kind(&self) -> ProviderKind;
    /// The family of the queues create_qp makes.
    fn family(&self) -> NicFamily {
        NicFamily::Mlx5
    }
    fn info(&self) -> NicInfo;
    fn address(&self) -> NicAddress;
    /// Refuses a peer this NIC cannot reach (another fabric, another subnet).
    fn check_peer(&self, remote: &NicAddress) -> Result<()>;
    /// Where queue memory and GPU-visible objects come from.
    fn allocator(&self) -> Arc<dyn Allocator>;
    fn create_qp(&self, log_depth: u32, traffic_class: u8, rings_in_device_memory: bool) -> Result<Box<dyn QueuePair>>;
    /// A DC initiator, ready to send (its descriptor has wqe_shift 1; the
    /// caller sets dc_targets): docs/architecture.md, "DC transport".
    fn create_dci(&self, _log_depth: u32, _traffic_class: u8, _rings_in_device_memory: bool) -> Result<Box<dyn QueuePair>> {
        Err(Error::InvalidUsage(format!(
            "provider {:?} has no DC transport (RCCL_RUST_GIN_TRANSPORT=dc): use rc",
            self.kind()
        )))
    }
    /// A DC target accepting DC key `key`, in the NIC's protection domain.
    fn create_dct(&self, _key: u64) -> Result<Box<dyn DcTarget>> {
        Err(Error::InvalidUsage(format!(
            "provider {:?} has no DC transport (RCCL_RUST_GIN_TRANSPORT=dc): use rc",
            self.kind()
        )))
    }
    /// The address vector (datagram segment without DCT number and key) by
    /// which this NIC's DC initiators reach the NIC at `remote`.
    fn dc_address(&self, _remote: &NicAddress) -> Result<crate::mlx5::wire::DatagramSeg> {
        Err(Error::InvalidUsage(format!("provider {:?} has no DC transport", self.kind())))
    }
    /// Registers [addr, addr+len).
    ///
    /// # Safety
    /// The memory must stay valid for NIC access until the region is dropped.
    unsafe fn reg_mr(&self, addr: u64, len: u64, access: Access) -> Result<Box<dyn MemoryRegion>>;
    /// Registers a dma-buf (GPU memory exported as a file descriptor).
    ///
    /// # Safety
    /// As for reg_mr; `fd` must be a dma-buf covering [offset, offset+len).
    unsafe fn reg_dmabuf_mr(&self, addr: u64, len: u64, offset: u64, fd: i32, access: Access)
        -> Result<Box<dyn MemoryRegion>>;
    /// Whether someone must call [`Nic::progress`] (the emulated NIC driven
    /// by RCCL's proxy thread); hardware needs nothing.
    fn needs_progress(&self) -> bool;
    fn progress(&self) -> bool;
    /// What this NIC and the GPU behind it can do (provider/caps.rs).
    fn capabilities(&self) -> caps::Capabilities;
    /// What the NIC counted (doorbells, WQEBBs read, CQEs, packets, ...):
    /// the emulated NIC counts everything; hardware providers return None
    /// (its counters are not read yet).
    fn counters(&self) -> Option<CounterSnapshot> {
        None
    }
    /// What the NIC itself counted that explains a failed queue, nonzero
    /// error counters only ("local_ack_timeout_err 7, out_of_sequence 2"),
    /// for the WARN of a device-side error: mlx5 reads its DevX queue-counter
    /// set, the emulated NIC its own counters. None where there are none.
    fn error_counters(&self) -> Option<String> {
        None
    }
    /// What this NIC holds now, where the provider counts it (the emulated
    /// NIC); None otherwise.
    fn resources(&self) -> Option<NicResources> {
        None
    }
}

/// The NICs of one kind available to this process.
pub trait Provider: Send + Sync {
    fn kind(&self) -> ProviderKind;
    fn devices(&self) -> usize;
    fn info(&self, dev: usize) -> Result<NicInfo>;
    fn open(&self, dev: usize) -> Result<Arc<dyn Nic>>;
    /// The sysfs PCI path of the GPU this process posts from
    /// (`/sys/devices/pci0000:c0/.../0000:c1:00.0`), where known: rails
    /// are the NICs closest to it. None: no GPU (the emulated NIC), or its
    /// path is unknown.
    fn gpu_pci_path(&self) -> Option<String> {
        None
    }
}

/// The devices of `n` rails (docs/architecture.md, "Rails"): `first` (the
/// device RCCL's listen names) as rail 0, then the others by PCI distance
/// to the GPU ([`rail_order`]); fewer when the provider has fewer devices.
pub fn pick_rails(provider: &dyn Provider, first: usize, n: usize) -> Result<Vec<usize>> {
    check_dev(first, provider.devices())?;
    if n <= 1 {
        return Ok(vec![first]);
    }
    let paths = (0..provider.devices()).map(|d| provider.info(d).map(|i| i.pci_path)).collect::<Result<Vec<_>>>()?;
    let mut order = rail_order(first, provider.gpu_pci_path().as_deref(), &paths);
    order.truncate(n);
    Ok(order)
}

/// Every device index, `first` first, then the others ordered by their
/// distance to `gpu` in the PCI tree (the path components of the two sysfs
/// paths not shared: a NIC behind the GPU's own switch is 2 away, one behind
/// the same root port farther, one under another root complex farthest),
/// ties and unknown paths (empty, or no GPU path) by index.
pub fn rail_order(first: usize, gpu: Option<&str>, nic_paths: &[String]) -> Vec<usize> {
    let parts = |p: &str| -> Vec<String> { p.split('/').filter(|c| !c.is_empty()).map(str::to_string).collect() };
    let distance = |nic: &str| -> usize {
        match gpu {
            Some(g) if !g.is_empty() && !nic.is_empty() => {
                let (a, b) = (parts(g), parts(nic));
                let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
                (a.len() - common) + (b.len() - common)
            }
            _ => usize::MAX,
        }
    };
    let mut rest: Vec<usize> = (0..nic_paths.len()).filter(|&d| d != first).collect();
    rest.sort_by_key(|&d| (distance(&nic_paths[d]), d));
    std::iter::once(first).chain(rest).collect()
}

/// Who posts to the queues a NIC creates, which decides where their memory
/// lives and how the doorbell is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryMode {
    /// GPU kernels (the GIN backend): queue memory through HIP, doorbells
    /// mapped for the GPU; fails without a GPU.
    Gpu,
    /// The host (the RMA plugin's proxy path, tools): host memory and the
    /// CPU's doorbell mapping, rung through the provider's host doorbell.
    Host,
}

/// The provider the configuration selects, opening NICs for GPU kernels.
/// The emulated NIC only when asked for; mlx5 otherwise, failing with what
/// is missing when no NIC is usable.
pub fn select(config: &Config) -> Result<Arc<dyn Provider>> {
    select_for(config, MemoryMode::Gpu)
}

/// As [`select`], opening NICs for `mode` (the emulated NIC's memory serves
/// both).
pub fn select_for(config: &Config, mode: MemoryMode) -> Result<Arc<dyn Provider>> {
    match config.provider {
        #[cfg(feature = "emu")]
        ProviderKind::Emu => Ok(Arc::new(emu::EmuProvider::new(config)?)),
        #[cfg(not(feature = "emu"))]
        ProviderKind::Emu => Err(Error::InvalidArgument(
            "RCCL_RUST_GIN_PROVIDER=emu, but this library was built without the emulated NIC (cargo feature `emu`)"
                .into(),
        )),
        // The hardware default: ConnectX, else the family of the NICs found.
        ProviderKind::Mlx5 => match mlx5::Mlx5Provider::probe(config) {
            Ok(p) => Ok(Arc::new(p.for_mode(mode))),
            Err(e) => select_by_vendor(dv::process_dv_platform(), config, mode).unwrap_or(Err(e)),
        },
        ProviderKind::Bnxt => Ok(Arc::new(dv::DvProvider::probe_on(dv::process_dv_platform(), dv::Family::Bnxt, config)?.for_mode(mode))),
        ProviderKind::Ionic => {
            Ok(Arc::new(dv::DvProvider::probe_on(dv::process_dv_platform(), dv::Family::Ionic, config)?.for_mode(mode)))
        }
    }
}

/// When no ConnectX is usable: the provider of the family of the first
/// device (matching RCCL_RUST_GIN_NIC) that is a Thor2 or a Pollara, or an
/// error naming the devices when none is a NIC rust-gin drives. None when
/// the list has no device, or has a ConnectX (the mlx5 error stands).
pub fn select_by_vendor(
    platform: Arc<dyn dv::DvPlatform>,
    config: &Config,
    mode: MemoryMode,
) -> Option<Result<Arc<dyn Provider>>> {
    let all = platform.devices().ok().filter(|d| !d.is_empty())?;
    let wanted = |n: &str| config.nic_filter.as_ref().is_none_or(|f| f.split(',').any(|w| w.trim() == n));
    let devs: Vec<_> = all.iter().filter(|d| wanted(&d.name)).collect();
    if devs.iter().any(|d| dv::Family::of(d) == Some(dv::Family::Mlx5)) {
        return None;
    }
    let Some(family) = devs.iter().find_map(|d| dv::Family::of(d)) else {
        return Some(Err(Error::System(format!(
            "no RDMA device rust-gin can drive: {} (rust-gin drives mlx5 ConnectX, bnxt_re Thor2 and ionic Pollara              NICs{}); to run without hardware set RCCL_RUST_GIN_PROVIDER=emu",
            if devs.is_empty() { "none matches RCCL_RUST_GIN_NIC".to_string() } else {
                devs.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
            },
            config.nic_filter.as_ref().map(|f| format!("; RCCL_RUST_GIN_NIC={f}")).unwrap_or_default()
        ))));
    };
    crate::info_line!(INIT, "no usable ConnectX; the NICs found are {}: using its provider", family.name());
    Some(dv::DvProvider::probe_on(platform, family, config).map(|p| Arc::new(p.for_mode(mode)) as Arc<dyn Provider>))
}

pub(crate) fn check_dev(dev: usize, n: usize) -> Result<()> {
    if dev >= n {
        return Err(Error::InvalidArgument(format!("device index {dev} out of range (this provider has {n})")));
    }
    Ok(())
}

/// "name value, ..." of the nonzero counters among `counters`, or "none
/// nonzero".
pub fn nonzero_counters<'a>(counters: impl IntoIterator<Item = (&'a str, u64)>) -> String {
    let v: Vec<String> = counters.into_iter().filter(|(_, n)| *n != 0).map(|(k, n)| format!("{k} {n}")).collect();
    if v.is_empty() {
        "none nonzero".into()
    } else {
        v.join(", ")
    }
}
