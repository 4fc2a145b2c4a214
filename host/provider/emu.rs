//! The emulated NIC as a provider: one emulated ConnectX per opened device,
//! on a fabric named by RCCL_RUST_GIN_EMU_FABRIC (ranks as threads of this
//! process, or as processes sharing memory). Memory is host memory: the
//! emulated NIC reads and writes what a kernel would.

use super::{
    check_dev, Access, DcTarget, MemoryRegion, Nic, NicAddress, NicFamily, NicInfo, Provider, QueueDescriptor,
    QueuePair,
};
use crate::config::{Config, EmuFabric, EmuProgress, ProviderKind};
use crate::emu::nic::Poller;
use crate::emu::family_queue::EmuFamilyQp;
use crate::emu::nic::QueueFormat;
use crate::emu::tcp::TcpOptions;
use crate::emu::{EmuNic, EmuQp, Fabric, NicConfig, Region, UarPage, WeakFabric};
use crate::error::{Error, Result};
use crate::ffi::nccl::{NCCL_PTR_CUDA, NCCL_PTR_HOST};
use crate::gpu::{Allocator, HostMemory, RingHome};
use crate::mlx5::queue::QueueMem;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

const KIND_TAG: u8 = 0xE1;

/// The process's fabrics, held weakly: a fabric lives while a NIC of this
/// process uses it, and a shared-memory one is removed when its last
/// process lets go.
fn fabrics() -> &'static Mutex<HashMap<EmuFabric, WeakFabric>> {
    static F: OnceLock<Mutex<HashMap<EmuFabric, WeakFabric>>> = OnceLock::new();
    F.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The process's handle on a named fabric (created on first use).
fn fabric(which: &EmuFabric, tcp: &TcpSetup) -> Result<Fabric> {
    let mut map = fabrics().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = map.get(which).and_then(WeakFabric::upgrade) {
        return Ok(f);
    }
    let f = match which {
        EmuFabric::Local(_) => Fabric::threads(),
        EmuFabric::Shm(name) => Fabric::shm_open(name, crate::emu::shm::MAX_NODES)
            .map_err(|e| Error::System(format!("emulated fabric shm:{name}: {e}")))?,
        EmuFabric::Tcp(ip) => {
            let ip: std::net::IpAddr = match ip.as_str() {
                "" => crate::oob::pick_address(tcp.ifname.as_deref())?,
                s => s.parse().map_err(|_| {
                    Error::InvalidArgument(format!("RCCL_RUST_GIN_EMU_FABRIC=tcp:{s}: not an IP address"))
                })?,
            };
            let opts = TcpOptions { dead_after: tcp.dead_after, fabric_id: fabric_id(which) };
            Fabric::tcp(std::net::SocketAddr::new(ip, 0), opts).map_err(|e| {
                Error::System(format!("emulated TCP fabric: cannot listen on {ip} (RCCL_RUST_GIN_EMU_FABRIC): {e}"))
            })?
        }
    };
    map.insert(which.clone(), f.downgrade());
    Ok(f)
}

/// The polling thread for the next NIC this process opens on fabric `which`
/// when its NICs share `threads` threads: the pollers take NICs in turn. A
/// poller lives while a NIC of it does (its thread while one polls).
fn shared_poller(which: &EmuFabric, threads: u32) -> Arc<Poller> {
    type Slots = (Vec<std::sync::Weak<Poller>>, usize);
    static P: OnceLock<Mutex<HashMap<EmuFabric, Slots>>> = OnceLock::new();
    let mut map = P.get_or_init(|| Mutex::new(HashMap::new())).lock().unwrap_or_else(|e| e.into_inner());
    let (slots, next) = map.entry(which.clone()).or_default();
    slots.resize_with(threads as usize, std::sync::Weak::new);
    let k = *next % slots.len();
    *next = next.wrapping_add(1);
    if let Some(p) = slots[k].upgrade() {
        return p;
    }
    let p = Poller::new(&format!("f{k}"));
    slots[k] = Arc::downgrade(&p);
    p
}

/// What a TCP fabric needs from the configuration.
#[derive(Clone)]
struct TcpSetup {
    ifname: Option<String>,
    dead_after: Duration,
}

fn fabric_id(which: &EmuFabric) -> u64 {
    // FNV-1a over the spelling: the same on every rank of the fabric (TCP:
    // each host may name its own address; the fabric is the same).
    let s = match which {
        EmuFabric::Local(n) => format!("local:{n}:{}", std::process::id()),
        EmuFabric::Shm(n) => format!("shm:{n}"),
        EmuFabric::Tcp(_) => "tcp".to_string(),
    };
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

pub struct EmuProvider {
    /// Emulated NICs per rank: as many as RCCL_RUST_GIN_RAILS asks for, each
    /// its own node on the fabric (stepped by a poller: shared_poller).
    nics: usize,
    fabric: EmuFabric,
    tcp: TcpSetup,
    progress: EmuProgress,
    /// Threads the NICs of a fabric share (None: one per NIC).
    threads: Option<u32>,
    mtu: usize,
    read_data_delay: Option<Duration>,
    qps_per_uar: u32,
    family: NicFamily,
    ionic_abi: u16,
    fault: Option<crate::nic::PlantedFault>,
    qp_skew: Option<crate::nic::QpSkew>,
    bnxt_doorbell: crate::nic::quirks::BnxtDoorbell,
}

impl EmuProvider {
    pub fn new(config: &Config) -> Result<EmuProvider> {
        Ok(EmuProvider {
            nics: config.rails.max(1) as usize,
            fabric: config.emu_fabric.clone(),
            tcp: TcpSetup {
                ifname: config.socket_ifname.clone(),
                dead_after: Duration::from_millis(config.emu_tcp_timeout_ms),
            },
            progress: config.emu_progress,
            threads: config.emu_threads.resolve(),
            mtu: config.emu_mtu,
            read_data_delay: (config.emu_read_delay_us > 0).then(|| Duration::from_micros(config.emu_read_delay_us)),
            qps_per_uar: config.qps_per_uar,
            family: config.emu_family,
            ionic_abi: config.emu_ionic_abi,
            fault: config.emu_fault,
            qp_skew: config.emu_qp_skew,
            bnxt_doorbell: config.bnxt_doorbell,
        })
    }
}

fn emu_info(dev: usize) -> NicInfo {
    NicInfo {
        name: format!("rust-gin-emu{dev}"),
        pci_path: format!("/sys/devices/virtual/rust-gin/emu{dev}"),
        guid: 0x5247_454d_5530_0001 + dev as u64,
        speed_mbps: 400_000,
        port: 1,
        // Kernel buffers are host memory here (no GPU): both kinds register.
        // No dma-buf: the emulated NIC has no way to import one.
        ptr_support: NCCL_PTR_HOST | NCCL_PTR_CUDA,
        max_message: 1 << 31,
        latency_us: 0.0,
        // Per NIC: its step loop executes every incoming packet, from
        // every peer and QP, one at a time in arrival order under one lock,
        // storing a write's bytes before it looks at the next packet; a signal
        // is a fetch-and-add with release semantics after all of them.
        flushes_all_puts_on_any_signal: true,
    }
}

impl Provider for EmuProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Emu
    }
    fn devices(&self) -> usize {
        self.nics
    }
    fn info(&self, dev: usize) -> Result<NicInfo> {
        check_dev(dev, self.nics)?;
        Ok(emu_info(dev))
    }
    fn open(&self, dev: usize) -> Result<Arc<dyn Nic>> {
        check_dev(dev, self.nics)?;
        let f = fabric(&self.fabric, &self.tcp)?;
        let nic = EmuNic::new(&f, NicConfig {
                name: format!("emu-{}-{dev}", std::process::id()),
                mtu: self.mtu,
                read_data_delay: self.read_data_delay,
                poller: match (self.progress, self.threads) {
                    (EmuProgress::Thread, Some(n)) => Some(shared_poller(&self.fabric, n)),
                    _ => None,
                },
                ionic_abi: self.ionic_abi,
                poll_doorbell_records: false,
                fault: self.fault,
                qp_skew: self.qp_skew,
            })
            .map_err(|e| Error::System(format!("emulated NIC: {e}")))?;
        if self.progress == EmuProgress::Thread {
            nic.start_polling();
        }
        let pd = nic.alloc_pd();
        Ok(Arc::new(EmuDevice {
            dev,
            fabric: f,
            nic,
            pd,
            fabric_id: fabric_id(&self.fabric),
            progress: self.progress,
            qps_per_uar: self.qps_per_uar,
            uar: Mutex::new(None),
            family: self.family,
            bnxt_doorbell: self.bnxt_doorbell,
        }))
    }
}

pub struct EmuDevice {
    dev: usize,
    /// The NIC's fabric: a TCP fabric turns peer addresses into node ids.
    fabric: Fabric,
    nic: EmuNic,
    pd: u32,
    fabric_id: u64,
    progress: EmuProgress,
    /// QPs per UAR page (RCCL_RUST_GIN_QPS_PER_UAR; 0 = all), as the mlx5
    /// provider hands them out: a page at a time, freed with its last QP.
    qps_per_uar: u32,
    /// The page new QPs go to, and how many QPs it was given.
    uar: Mutex<Option<(Arc<UarPage>, u32)>>,
    /// The queue formats this NIC presents (RCCL_RUST_GIN_EMU_FAMILY).
    family: NicFamily,
    bnxt_doorbell: crate::nic::quirks::BnxtDoorbell,
}

impl EmuDevice {
    /// DC is ConnectX's: an emulated NIC presenting another family refuses it.
    fn mlx5_only(&self, what: &str) -> Result<()> {
        match self.family {
            NicFamily::Mlx5 => Ok(()),
            f => Err(Error::InvalidUsage(format!(
                "{what}: the emulated NIC presents {} (RCCL_RUST_GIN_EMU_FAMILY), which has no DC transport \
                 (RCCL_RUST_GIN_TRANSPORT=dc is ConnectX only)",
                f.name()
            ))),
        }
    }

    /// The emulated NIC itself (counters, tracing), for tests and benchmarks.
    pub fn nic(&self) -> &EmuNic {
        &self.nic
    }

    /// The UAR page for the next queue (QP or DCI): the current one until
    /// it carries RCCL_RUST_GIN_QPS_PER_UAR queues (0: no limit), then a
    /// new one, as the mlx5 provider shares pages.
    fn uar_page(&self) -> Arc<UarPage> {
        let mut cur = self.uar.lock().unwrap_or_else(|e| e.into_inner());
        match cur.as_mut() {
            Some((page, n)) if self.qps_per_uar == 0 || *n < self.qps_per_uar => {
                *n += 1;
                page.clone()
            }
            _ => {
                let page = UarPage::new(&self.nic);
                *cur = Some((page.clone(), 1));
                page
            }
        }
    }
}

/// An emulated NIC's address: KIND_TAG | fabric id u64 | node u32 | then,
/// on the TCP fabric, its process's listen address: family u8 (4 or 6) |
/// ip [16] | port u16 (bytes 13..32 of 40).
fn decode(a: &NicAddress) -> Option<(u64, u32)> {
    (a[0] == KIND_TAG).then(|| {
        (u64::from_le_bytes(a[1..9].try_into().expect("8 bytes")), u32::from_le_bytes(a[9..13].try_into().expect("4")))
    })
}

fn encode_listen(a: &mut NicAddress, s: std::net::SocketAddr) {
    match s.ip() {
        std::net::IpAddr::V4(v4) => {
            a[13] = 4;
            a[14..18].copy_from_slice(&v4.octets());
        }
        std::net::IpAddr::V6(v6) => {
            a[13] = 6;
            a[14..30].copy_from_slice(&v6.octets());
        }
    }
    a[30..32].copy_from_slice(&s.port().to_le_bytes());
}

fn decode_listen(a: &NicAddress) -> Option<std::net::SocketAddr> {
    let raw: [u8; 16] = a[14..30].try_into().expect("16");
    let ip: std::net::IpAddr = match a[13] {
        4 => std::net::Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]).into(),
        6 => std::net::Ipv6Addr::from(raw).into(),
        _ => return None,
    };
    Some(std::net::SocketAddr::new(ip, u16::from_le_bytes(a[30..32].try_into().expect("2"))))
}

/// The node id by which `fabric` reaches the NIC at `remote` (TCP: an alias
/// of its process's listen address and node).
fn node_of(fabric: &Fabric, remote: &NicAddress) -> Result<u32> {
    let (_, node) = decode(remote).ok_or_else(|| Error::InvalidArgument("not an emulated-NIC address".into()))?;
    let listen = decode_listen(remote);
    if fabric.listen_addr().is_some() && listen.is_none() {
        return Err(Error::InvalidArgument("the peer's emulated-NIC address carries no TCP listen address".into()));
    }
    fabric.resolve(listen, node).map_err(|e| Error::System(format!("emulated TCP fabric: {e}")))
}

struct EmuRegion {
    nic: EmuNic,
    r: Region,
}
impl MemoryRegion for EmuRegion {
    fn lkey(&self) -> u32 {
        self.r.lkey
    }
    fn rkey(&self) -> u32 {
        self.r.rkey
    }
    fn addr(&self) -> u64 {
        self.r.addr
    }
    fn len(&self) -> u64 {
        self.r.len
    }
}
impl Drop for EmuRegion {
    fn drop(&mut self) {
        let _ = self.nic.dereg_mr(self.r.lkey);
    }
}

/// INIT -> RTR -> RTS of emulated QP `qpn` towards the NIC at `remote`.
fn connect_emu(
    fabric: &Fabric,
    qpn: u32,
    remote: &NicAddress,
    connect: impl FnOnce(u32) -> std::result::Result<(), crate::emu::nic::NicError>,
) -> Result<()> {
    let node = node_of(fabric, remote)?;
    connect(node).map_err(|e| Error::System(format!("emulated QP {qpn:#x}: {e}")))
}

struct EmuQueuePair(EmuQp, Fabric);
impl QueuePair for EmuQueuePair {
    fn qpn(&self) -> u32 {
        self.0.qpn
    }
    fn connect(&self, remote: &NicAddress, remote_qpn: u32) -> Result<()> {
        connect_emu(&self.1, self.0.qpn, remote, |node| self.0.connect(node, remote_qpn))
    }
    fn descriptor(&self, peer: u32, error: u64, timeout_ns: u64) -> QueueDescriptor {
        QueueDescriptor::Mlx5(self.0.descriptor(peer, error, timeout_ns))
    }
    fn log_slots(&self) -> u32 {
        self.0.mem.log_wqe_cnt
    }
    fn mlx5_memory(&self) -> Option<&QueueMem> {
        Some(&self.0.mem)
    }
}

/// A bnxt_re or ionic queue pair on an emulated NIC presenting that family.
struct EmuFamilyQueuePair(EmuFamilyQp, NicFamily, Fabric);
impl QueuePair for EmuFamilyQueuePair {
    fn qpn(&self) -> u32 {
        self.0.qpn
    }
    fn connect(&self, remote: &NicAddress, remote_qpn: u32) -> Result<()> {
        connect_emu(&self.2, self.0.qpn, remote, |node| self.0.connect(node, remote_qpn))
    }
    fn descriptor(&self, peer: u32, error: u64, timeout_ns: u64) -> QueueDescriptor {
        QueueDescriptor::Nic(self.1, self.0.descriptor(peer, error, timeout_ns))
    }
    fn log_slots(&self) -> u32 {
        self.0.log_wqe_cnt
    }
}

/// A DC target on an emulated NIC; destroyed on drop.
struct EmuDct {
    nic: EmuNic,
    dctn: u32,
    key: u64,
}
impl DcTarget for EmuDct {
    fn dctn(&self) -> u32 {
        self.dctn
    }
    fn key(&self) -> u64 {
        self.key
    }
}
impl Drop for EmuDct {
    fn drop(&mut self) {
        let _ = self.nic.destroy_dct(self.dctn);
    }
}

impl Nic for EmuDevice {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Emu
    }
    fn family(&self) -> NicFamily {
        self.family
    }
    fn info(&self) -> NicInfo {
        emu_info(self.dev)
    }
    fn address(&self) -> NicAddress {
        let mut a = [0u8; super::NIC_ADDRESS_BYTES];
        a[0] = KIND_TAG;
        a[1..9].copy_from_slice(&self.fabric_id.to_le_bytes());
        a[9..13].copy_from_slice(&self.nic.node().to_le_bytes());
        if let Some(listen) = self.fabric.listen_addr() {
            encode_listen(&mut a, listen);
        }
        a
    }
    fn check_peer(&self, remote: &NicAddress) -> Result<()> {
        match decode(remote) {
            Some((f, _)) if f == self.fabric_id => Ok(()),
            Some(_) => Err(Error::InvalidArgument(
                "the peer's emulated NIC is on another fabric (RCCL_RUST_GIN_EMU_FABRIC differs, or ranks in \
                 separate processes need shm:<name> or tcp)"
                    .into(),
            )),
            None => Err(Error::InvalidArgument("the peer's handle is not from the emulated provider".into())),
        }
    }
    fn allocator(&self) -> Arc<dyn Allocator> {
        Arc::new(HostMemory)
    }
    fn create_qp(&self, log_depth: u32, _traffic_class: u8, rings_in_device_memory: bool) -> Result<Box<dyn QueuePair>> {
        let format = match self.family {
            NicFamily::Mlx5 => None,
            NicFamily::Bnxt => Some(QueueFormat::Bnxt),
            NicFamily::Ionic => Some(QueueFormat::Ionic),
        };
        if let Some(format) = format {
            // Rings in host memory either way: nothing here is GPU memory.
            let mut qp = EmuFamilyQp::create(&self.nic, self.pd, format, log_depth, &HostMemory)
                .map_err(|e| Error::System(format!("emulated {} NIC: {e}", self.family.name())))?;
            if format == QueueFormat::Bnxt {
                qp.doorbell_group = self.bnxt_doorbell.descriptor_value();
            }
            return Ok(Box::new(EmuFamilyQueuePair(qp, self.family, self.fabric.clone())));
        }
        let rings = if rings_in_device_memory { RingHome::Device } else { RingHome::Host };
        let mem = QueueMem::new(&HostMemory, log_depth, rings)?;
        let qp = EmuQp::create_on(&self.nic, self.pd, mem, self.uar_page()).map_err(|e| Error::System(format!("emulated NIC: {e}")))?;
        Ok(Box::new(EmuQueuePair(qp, self.fabric.clone())))
    }
    fn create_dci(&self, log_depth: u32, _traffic_class: u8, rings_in_device_memory: bool) -> Result<Box<dyn QueuePair>> {
        self.mlx5_only("DC initiators")?;
        let rings = if rings_in_device_memory { RingHome::Device } else { RingHome::Host };
        // Two WQEBBs per WQE: twice the WQEBBs for the same number of WQEs.
        let mem = QueueMem::new(&HostMemory, log_depth + crate::mlx5::queue::DC_WQE_SHIFT, rings)?;
        let qp = EmuQp::create_dci_on(&self.nic, self.pd, mem, self.uar_page())
            .map_err(|e| Error::System(format!("emulated NIC: {e}")))?;
        Ok(Box::new(EmuQueuePair(qp, self.fabric.clone())))
    }
    fn create_dct(&self, key: u64) -> Result<Box<dyn DcTarget>> {
        self.mlx5_only("DC targets")?;
        Ok(Box::new(EmuDct { nic: self.nic.clone(), dctn: self.nic.create_dct(self.pd, key), key }))
    }
    fn dc_address(&self, remote: &NicAddress) -> Result<crate::mlx5::wire::DatagramSeg> {
        self.check_peer(remote)?;
        Ok(crate::emu::nic::dc_address_of(node_of(&self.fabric, remote)?))
    }
    unsafe fn reg_mr(&self, addr: u64, len: u64, access: Access) -> Result<Box<dyn MemoryRegion>> {
        // Both memory kinds are host memory here, and the emulated NIC pins
        // nothing: an unmapped or read-only page would fault inside it.
        crate::mapping::check_range(addr, len)?;
        // SAFETY: forwarded contract: the caller keeps the memory valid until
        // the region drops.
        let r = unsafe { self.nic.reg_mr(self.pd, addr as usize, len as usize, access) }
            .map_err(|e| Error::InvalidArgument(format!("registering {len} bytes at {addr:#x}: {e}")))?;
        Ok(Box::new(EmuRegion { nic: self.nic.clone(), r }))
    }
    unsafe fn reg_dmabuf_mr(&self, _: u64, _: u64, _: u64, _: i32, _: Access) -> Result<Box<dyn MemoryRegion>> {
        Err(Error::InvalidUsage(
            "the emulated NIC cannot import dma-bufs (getProperties does not advertise NCCL_PTR_DMABUF)".into(),
        ))
    }
    fn needs_progress(&self) -> bool {
        self.progress == EmuProgress::Proxy
    }
    fn progress(&self) -> bool {
        self.nic.step()
    }
    fn capabilities(&self) -> crate::provider::caps::Capabilities {
        use crate::provider::caps::{Capabilities, Known};
        Capabilities {
            nic: emu_info(self.dev).name,
            // Executed by the NIC's step loop on host memory, whatever the
            // family; a family that presents Thor2 or Pollara reports what
            // the hardware does, so that auto picks slot writes as there
            // (a forced RCCL_RUST_GIN_SIGNAL_MODE=atomic still runs here).
            remote_atomics: match self.family {
                NicFamily::Mlx5 => Known::Yes,
                NicFamily::Bnxt => Known::No(
                    "emulated bnxt_re: Thor2 has no PCIe AtomicOps completer path into GPU memory (ROCm/MAD 191)".into(),
                ),
                NicFamily::Ionic => Known::No("emulated ionic: Pollara reports no atomic support (ROCm/mori 682)".into()),
            },
            atomics_use_pcie: false,
            gpu_atomic_completer: Known::Unknown("emulated: no GPU".into()),
            dmabuf: false,
            max_inline: crate::device::MAX_INLINE,
            max_qp: None,
            qps_per_uar: Some(self.qps_per_uar),
        }
    }
    fn counters(&self) -> Option<crate::nic::CounterSnapshot> {
        Some(self.nic.counters())
    }
    fn resources(&self) -> Option<crate::nic::NicResources> {
        Some(self.nic.resources())
    }
    fn error_counters(&self) -> Option<String> {
        let c = self.nic.counters();
        Some(super::nonzero_counters([
            ("error_cqes", c.error_cqes),
            ("cq_overruns", c.cq_overruns),
            ("packets_dropped", c.packets_dropped),
            ("doorbell_dbr_mismatches", c.doorbell_dbr_mismatches),
            ("doorbells_misdirected", c.doorbells_misdirected),
        ]))
    }
}
