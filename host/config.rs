//! rust-gin's own knobs (RCCL_RUST_GIN_*), read once per init. Every knob is
//! listed in docs/configuration.md with its default; a bad value is an error
//! that names the variable, never a silent fallback.

use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    /// ConnectX through verbs and mlx5 DevX.
    Mlx5,
    /// The emulated NIC (tests, benchmarks, bring-up); never chosen silently.
    Emu,
    /// Broadcom Thor2 through bnxt_re direct verbs (host/provider/bnxt/).
    Bnxt,
    /// AMD Pollara through ionic direct verbs (host/provider/ionic/).
    Ionic,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum EmuFabric {
    /// Ranks are threads of this process.
    Local(String),
    /// Ranks are processes sharing the named memory segment.
    Shm(String),
    /// Ranks are processes on hosts joined by TCP (emu/tcp/): the address
    /// to listen on ("" = the connection-setup interface's, as
    /// RCCL_RUST_GIN_SOCKET_IFNAME picks it).
    Tcp(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmuProgress {
    /// Polling threads run the emulated NICs (RCCL_RUST_GIN_EMU_THREADS;
    /// needsProxyProgress = 0).
    Thread,
    /// RCCL's proxy thread drives it through ginProgress (needsProxyProgress = 1).
    Proxy,
}

/// RCCL_RUST_GIN_EMU_THREADS: how many threads run a process's emulated NICs
/// (emu/nic/poller.rs says why they share).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmuThreads {
    /// Half the CPUs this process may use (at least one), shared.
    Auto,
    /// The NICs of a fabric take turns on this many threads.
    Shared(u32),
    /// A thread per NIC.
    PerNic,
}

impl EmuThreads {
    /// Threads the NICs of one fabric share (None: one per NIC).
    pub fn resolve(self) -> Option<u32> {
        match self {
            EmuThreads::Auto => {
                let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
                Some((cpus / 2).max(1))
            }
            EmuThreads::Shared(n) => Some(n),
            EmuThreads::PerNic => None,
        }
    }
}

/// RCCL_RUST_GIN_SIGNAL_MODE: how signals travel (provider/caps.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalModeKnob {
    /// Remote atomics where the capability probe says they work into GPU
    /// memory, else slot writes.
    Auto,
    Atomic,
    Write,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub provider: ProviderKind,
    pub timeout_ms: u64,
    pub queue_depth: u32,
    pub rings_in_device_memory: bool,
    pub socket_ifname: Option<String>,
    pub connect_timeout_ms: u64,
    pub emu_fabric: EmuFabric,
    pub emu_progress: EmuProgress,
    pub emu_threads: EmuThreads,
    pub emu_mtu: usize,
    pub emu_read_delay_us: u64,
    /// A firmware fault the emulated NIC is told to have (tests of the
    /// init self-test).
    pub emu_fault: Option<crate::nic::PlantedFault>,
    /// A reordering emulated NIC for ordering tests.
    pub emu_qp_skew: Option<crate::nic::QpSkew>,
    /// Whether init runs the loopback self-test (host/selftest.rs).
    pub self_test: bool,
    /// TCP fabric: a peer silent (or a connect pending) this long is
    /// unreachable.
    pub emu_tcp_timeout_ms: u64,
    /// The NIC family the emulated NIC presents (its queue formats).
    pub emu_family: crate::nic::NicFamily,
    /// The firmware WQE ABI version an emulated ionic NIC presents.
    pub emu_ionic_abi: u16,
    /// What a NIC firmware below the known-needed versions does.
    pub fw_check: crate::nic::gates::FwCheck,
    /// bnxt_re: one doorbell per WQE, or one per published batch of a peer.
    pub bnxt_doorbell: crate::nic::quirks::BnxtDoorbell,
    pub nic_filter: Option<String>,
    pub ib_port: u8,
    pub gid_index: i32,
    pub traffic_class: i32,
    /// QPs that share one UAR page (its doorbell register); 0 = all QPs of a
    /// device context.
    pub qps_per_uar: u32,
    /// NICs (rails) per context set: context c uses rail c mod rails.
    pub rails: u32,
    pub signal_mode: SignalModeKnob,
    /// RC (a queue pair per context and peer) or DC (a few DC initiators per
    /// context, one DC target per rank): docs/architecture.md, "DC transport".
    pub transport: Transport,
    /// DC initiators per context (a power of two).
    pub dcis: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Rc,
    Dc,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            provider: ProviderKind::Mlx5,
            timeout_ms: 60_000,
            queue_depth: 512,
            rings_in_device_memory: false,
            socket_ifname: None,
            connect_timeout_ms: 120_000,
            emu_fabric: EmuFabric::Local("default".into()),
            emu_progress: EmuProgress::Thread,
            emu_threads: EmuThreads::Auto,
            emu_mtu: 4096,
            emu_read_delay_us: 0,
            emu_fault: None,
            emu_qp_skew: None,
            self_test: true,
            emu_tcp_timeout_ms: 5000,
            emu_family: crate::nic::NicFamily::Mlx5,
            emu_ionic_abi: 2,
            fw_check: crate::nic::gates::FwCheck::Warn,
            bnxt_doorbell: crate::nic::quirks::BnxtDoorbell::PerWqe,
            nic_filter: None,
            ib_port: 1,
            gid_index: -1,
            traffic_class: 0,
            qps_per_uar: 16,
            rails: 1,
            signal_mode: SignalModeKnob::Auto,
            transport: Transport::Rc,
            dcis: 4,
        }
    }
}

/// Every knob with its default and meaning (docs/configuration.md is checked
/// against this list by tests/config_docs.rs).
pub const KNOBS: &[(&str, &str, &str)] = &[
    ("RCCL_RUST_GIN_PROVIDER", "mlx5", "mlx5 (ConnectX via verbs + DevX; without a usable ConnectX, the family of the NICs found: bnxt_re or ionic), bnxt_re (Broadcom Thor2), ionic (AMD Pollara) or emu (the emulated NIC)"),
    ("RCCL_RUST_GIN_TIMEOUT_MS", "60000", "bound on every device-side wait (queue credit, flush, signal, counter)"),
    ("RCCL_RUST_GIN_QUEUE_DEPTH", "512", "send-queue depth in WQEs when RCCL's config leaves queueDepth at 0"),
    ("RCCL_RUST_GIN_QUEUE_PLACEMENT", "host", "host (pinned host memory, as rocSHMEM) or device (GPU memory) for queue rings and doorbell records"),
    ("RCCL_RUST_GIN_SOCKET_IFNAME", "(NCCL_SOCKET_IFNAME, else the first non-loopback interface)", "interface of the connection-setup sockets, as NCCL_SOCKET_IFNAME: name prefixes, `=` before the list for exact names, `^` first to exclude; IPv4 or IPv6"),
    ("RCCL_RUST_GIN_CONNECT_TIMEOUT_MS", "120000", "bound on connection setup with every peer"),
    ("RCCL_RUST_GIN_EMU_FABRIC", "local:default", "emu only: local:<name> (ranks as threads), shm:<name> (ranks as processes of one host), tcp (ranks on hosts joined by TCP, listening on the connection-setup interface: `RCCL_RUST_GIN_SOCKET_IFNAME`) or tcp:<IP address> (listening on that address); docs/architecture.md, \"The TCP fabric\""),
    ("RCCL_RUST_GIN_EMU_TCP_TIMEOUT_MS", "5000", "emu only, with `RCCL_RUST_GIN_EMU_FABRIC=tcp`: a peer process from which nothing (not even a heartbeat, sent every quarter of this) arrives for this long, or whose connect takes longer, is unreachable: its operations end in error CQEs within this plus a heartbeat period (a quarter of this, at most 500 ms) plus 100 ms; 50 to 3600000"),
    ("RCCL_RUST_GIN_EMU_PROGRESS", "thread", "emu only: thread (polling threads run the NICs, `RCCL_RUST_GIN_EMU_THREADS`) or proxy (RCCL's ginProgress drives it)"),
    ("RCCL_RUST_GIN_EMU_THREADS", "auto", "emu only, with progress thread: the threads that run a process's emulated NICs: auto (half the CPUs the process may use, at least 1), a number from 1 to 1024 (the NICs of a fabric take turns on that many threads, assigned in turn), or nic (a thread per NIC)"),
    ("RCCL_RUST_GIN_EMU_MTU", "4096", "emu only: packet payload size, a power of two from 256 to 65536"),
    ("RCCL_RUST_GIN_EMU_FAULT", "none", "emu only: a firmware fault the emulated NIC has, for tests of the init self-test: none, corrupt-write (every WRITE lands with its first byte flipped), atomic-as-write (atomics run as 8-byte WRITEs of their operand, as ionic v2 opcodes on a v1 NIC), read-zeros (READ responses carry zeros) or collapsed-cq (only a CQ's first CQE is written, rocm-xio#127)"),
    ("RCCL_RUST_GIN_EMU_QP_SKEW", "none", "emu only: none, mod<m>:<us> or revmod<m>:<us> (m 2 to 16, us 1 to 10000000): the emulated NIC starts each batch of queue pair q (q mod m) times us microseconds after its doorbell, or (m - 1 - q mod m) times with rev, as engines serving queues at different latencies would, so that work on different queues arrives in either order (a fault model for ordering tests)"),
    ("RCCL_RUST_GIN_SELF_TEST", "on", "on: init opens each NIC, posts a loopback put, put with signal (in the signal mode contexts will use), atomics (atomic mode), get and a CQE round trip through the device library's WQE builders, checks the bytes, and refuses the backend with one WARN naming the failing step; off: skip it (docs/bring-up.md)"),
    ("RCCL_RUST_GIN_EMU_READ_DELAY_US", "0", "emu only: READ data lands up to this long after its CQE unless a flush (DUMP) lands it; 0 = at once (a fault model for tests)"),
    ("RCCL_RUST_GIN_EMU_FAMILY", "mlx5", "emu only: the NIC family the emulated NIC presents: mlx5 (ConnectX WQEs, doorbell records, 64-byte CQEs), bnxt_re (Thor2: 128-byte static-mode WQEs, MSN table) or ionic (Pollara: 64-byte WQEs, colour bits); the GIN operations post that family's bytes (docs/nic-families.md)"),
    ("RCCL_RUST_GIN_EMU_IONIC_ABI", "2", "emu only, with `RCCL_RUST_GIN_EMU_FAMILY=ionic`: the firmware WQE ABI version the emulated Pollara presents, 0 to 255; its queues decode opcodes with that version's table. createContext writes version 1 or 2 as the NIC says and refuses any other (docs/nic-families.md, \"Firmware and ABI gates\")"),
    ("RCCL_RUST_GIN_FW_CHECK", "warn", "bnxt_re and ionic: what a NIC firmware older than the versions known to be needed does (Thor2 237.1.137 or 235.2.86, AINIC 1.117.5-a-45; mori#471): warn (a WARN line naming the firmware, then go on), refuse (open fails with ncclSystemError) or off (no check); docs/nic-families.md, \"Firmware and ABI gates\""),
    ("RCCL_RUST_GIN_BNXT_DOORBELL", "wqe", "bnxt_re (and the emulated bnxt_re NIC): wqe (one doorbell per WQE) or peer (one per published batch of a peer's queue). Reports conflict: batched doorbells hung a Thor2 (torchcomms#2714), per-peer groups reached ~98 % of 400G (mori#421); docs/nic-families.md, \"Field quirks as policies\""),
    ("RCCL_RUST_GIN_NIC", "(all mlx5 devices)", "mlx5 only: comma-separated device names to use"),
    ("RCCL_RUST_GIN_IB_PORT", "1", "mlx5 only: port number"),
    ("RCCL_RUST_GIN_GID_INDEX", "-1", "mlx5 only: GID index for RoCE; -1 picks a RoCE v2 IPv4-mapped GID"),
    ("RCCL_RUST_GIN_TRAFFIC_CLASS", "0", "traffic class when RCCL's config leaves trafficClass undefined (-1)"),
    ("RCCL_RUST_GIN_QPS_PER_UAR", "16", "queue pairs (and DC initiators) that share one UAR page and its doorbell register (1 = a page per QP, 0 = one page per device context; mlx5 and the emulated NIC); docs/architecture.md says why sharing is safe"),
    ("RCCL_RUST_GIN_TRANSPORT", "rc", "rc (a reliable-connected queue pair per context and peer) or dc (Dynamically Connected: `RCCL_RUST_GIN_DCIS` initiators per context, one DC target per rank and rail, 64 bytes of device state per peer); emu and mlx5 providers (mlx5: DevX DCIs and DCTs, UNVERIFIED on hardware, docs/mlx5-provider.md §2a; bnxt_re and ionic refuse it); docs/architecture.md, \"DC transport\""),
    ("RCCL_RUST_GIN_DCIS", "4", "with `RCCL_RUST_GIN_TRANSPORT=dc`: DC initiators per context, a power of two from 1 to 64; peer p always uses initiator p mod this"),
    ("RCCL_RUST_GIN_RAILS", "1", "NICs per context set, 1 to 16: the NIC RCCL's listen(dev) names, then the others closest to the GPU by PCI path; context c uses rail c mod the number of rails (emu: as many emulated NICs per rank); docs/architecture.md, \"Rails\""),
    ("RCCL_RUST_GIN_SIGNAL_MODE", "auto", "auto (remote atomics where the capability probe says they work into GPU memory, else write), atomic (8-byte RDMA fetch-and-add) or write (8-byte RDMA WRITE of a running total into a per-sender slot, folded by the reader; no VA signals): docs/nic-families.md, section 7. Every rank must resolve to the same mode. The RMA plugin's signals are always atomics: it refuses write, and auto where atomics do not work (docs/rma-plugin.md)"),
];

/// The most rails (NICs per context set) RCCL_RUST_GIN_RAILS takes.
pub const MAX_RAILS: u32 = 16;

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

fn number<T: std::str::FromStr>(name: &str, v: &str, min: T, max: T) -> Result<T>
where
    T: PartialOrd + std::fmt::Display + Copy,
{
    let n: T = v.parse().map_err(|_| Error::InvalidArgument(format!("{name}={v:?} is not a number")))?;
    if n < min || n > max {
        return Err(Error::InvalidArgument(format!("{name}={v} is out of range [{min}, {max}]")));
    }
    Ok(n)
}

impl Config {
    /// Reads the environment.
    pub fn from_env() -> Result<Config> {
        Config::from_lookup(var)
    }

    /// Reads knobs through `get` (tests pass a map instead of the environment).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let mut c = Config::default();
        if let Some(v) = get("RCCL_RUST_GIN_PROVIDER") {
            c.provider = match v.to_ascii_lowercase().as_str() {
                "mlx5" => ProviderKind::Mlx5,
                "emu" => ProviderKind::Emu,
                "bnxt_re" | "bnxt" => ProviderKind::Bnxt,
                "ionic" => ProviderKind::Ionic,
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "RCCL_RUST_GIN_PROVIDER={v:?}: use mlx5, bnxt_re, ionic or emu"
                    )))
                }
            };
        }
        if let Some(v) = get("RCCL_RUST_GIN_TIMEOUT_MS") {
            c.timeout_ms = number("RCCL_RUST_GIN_TIMEOUT_MS", &v, 1, 86_400_000)?;
        }
        if let Some(v) = get("RCCL_RUST_GIN_QUEUE_DEPTH") {
            c.queue_depth = number("RCCL_RUST_GIN_QUEUE_DEPTH", &v, 64, 32768)?;
        }
        if let Some(v) = get("RCCL_RUST_GIN_QUEUE_PLACEMENT") {
            c.rings_in_device_memory = match v.as_str() {
                "host" => false,
                "device" => true,
                _ => return Err(Error::InvalidArgument(format!("RCCL_RUST_GIN_QUEUE_PLACEMENT={v:?}: use host or device"))),
            };
        }
        c.socket_ifname = get("RCCL_RUST_GIN_SOCKET_IFNAME").or_else(|| get("NCCL_SOCKET_IFNAME"));
        if let Some(v) = get("RCCL_RUST_GIN_CONNECT_TIMEOUT_MS") {
            c.connect_timeout_ms = number("RCCL_RUST_GIN_CONNECT_TIMEOUT_MS", &v, 1, 86_400_000)?;
        }
        if let Some(v) = get("RCCL_RUST_GIN_EMU_FABRIC") {
            c.emu_fabric = match v.split_once(':') {
                Some(("local", n)) if !n.is_empty() => EmuFabric::Local(n.into()),
                Some(("shm", n)) if !n.is_empty() && !n.contains('/') => EmuFabric::Shm(n.into()),
                None if v == "tcp" => EmuFabric::Tcp(String::new()),
                Some(("tcp", ip)) if ip.parse::<std::net::IpAddr>().is_ok() => EmuFabric::Tcp(ip.into()),
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "RCCL_RUST_GIN_EMU_FABRIC={v:?}: use local:<name>, shm:<name>, tcp or tcp:<IP address>"
                    )))
                }
            };
        }
        if let Some(v) = get("RCCL_RUST_GIN_EMU_TCP_TIMEOUT_MS") {
            c.emu_tcp_timeout_ms = number("RCCL_RUST_GIN_EMU_TCP_TIMEOUT_MS", &v, 50u64, 3_600_000)?;
        }
        if let Some(v) = get("RCCL_RUST_GIN_EMU_FAMILY") {
            c.emu_family = match v.as_str() {
                "mlx5" => crate::nic::NicFamily::Mlx5,
                "bnxt_re" | "bnxt" => crate::nic::NicFamily::Bnxt,
                "ionic" => crate::nic::NicFamily::Ionic,
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "RCCL_RUST_GIN_EMU_FAMILY={v:?}: use mlx5, bnxt_re or ionic"
                    )))
                }
            };
        }
        if let Some(v) = get("RCCL_RUST_GIN_EMU_IONIC_ABI") {
            c.emu_ionic_abi = number("RCCL_RUST_GIN_EMU_IONIC_ABI", &v, 0u16, 255)?;
        }
        if let Some(v) = get("RCCL_RUST_GIN_FW_CHECK") {
            c.fw_check = match v.as_str() {
                "warn" => crate::nic::gates::FwCheck::Warn,
                "refuse" => crate::nic::gates::FwCheck::Refuse,
                "off" => crate::nic::gates::FwCheck::Off,
                _ => return Err(Error::InvalidArgument(format!("RCCL_RUST_GIN_FW_CHECK={v:?}: use warn, refuse or off"))),
            };
        }
        if let Some(v) = get(crate::nic::quirks::BnxtDoorbell::KNOB) {
            c.bnxt_doorbell = crate::nic::quirks::BnxtDoorbell::parse(&v)?;
        }
        if let Some(v) = get("RCCL_RUST_GIN_EMU_PROGRESS") {
            c.emu_progress = match v.as_str() {
                "thread" => EmuProgress::Thread,
                "proxy" => EmuProgress::Proxy,
                _ => return Err(Error::InvalidArgument(format!("RCCL_RUST_GIN_EMU_PROGRESS={v:?}: use thread or proxy"))),
            };
        }
        if let Some(v) = get("RCCL_RUST_GIN_EMU_THREADS") {
            c.emu_threads = match v.as_str() {
                "auto" => EmuThreads::Auto,
                "nic" => EmuThreads::PerNic,
                _ => EmuThreads::Shared(number("RCCL_RUST_GIN_EMU_THREADS", &v, 1u32, 1024).map_err(|_| {
                    Error::InvalidArgument(format!("RCCL_RUST_GIN_EMU_THREADS={v:?}: use auto, nic or a number from 1 to 1024"))
                })?),
            };
        }
        if let Some(v) = get("RCCL_RUST_GIN_EMU_MTU") {
            c.emu_mtu = number("RCCL_RUST_GIN_EMU_MTU", &v, 256usize, 1 << 16)?;
            if !c.emu_mtu.is_power_of_two() {
                return Err(Error::InvalidArgument(format!("RCCL_RUST_GIN_EMU_MTU={v} is not a power of two")));
            }
        }
        if let Some(v) = get("RCCL_RUST_GIN_EMU_FAULT") {
            c.emu_fault = match v.as_str() {
                "none" => None,
                s => Some(crate::nic::PlantedFault::parse(s).ok_or_else(|| {
                    let all: Vec<&str> = crate::nic::PlantedFault::ALL.iter().map(|f| f.name()).collect();
                    Error::InvalidArgument(format!("RCCL_RUST_GIN_EMU_FAULT={v:?}: use none, {}", all.join(", ")))
                })?),
            };
        }
        if let Some(v) = get("RCCL_RUST_GIN_EMU_QP_SKEW") {
            c.emu_qp_skew = match v.as_str() {
                "none" => None,
                s => Some(crate::nic::QpSkew::parse(s).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "RCCL_RUST_GIN_EMU_QP_SKEW={v:?}: use none, mod<m>:<us> or revmod<m>:<us> (m 2 to 16, us 1 to 10000000)"
                    ))
                })?),
            };
        }
        if let Some(v) = get("RCCL_RUST_GIN_SELF_TEST") {
            c.self_test = match v.as_str() {
                "on" => true,
                "off" => false,
                _ => return Err(Error::InvalidArgument(format!("RCCL_RUST_GIN_SELF_TEST={v:?}: use on or off"))),
            };
        }
        if let Some(v) = get("RCCL_RUST_GIN_EMU_READ_DELAY_US") {
            c.emu_read_delay_us = number("RCCL_RUST_GIN_EMU_READ_DELAY_US", &v, 0u64, 60_000_000)?;
        }
        c.nic_filter = get("RCCL_RUST_GIN_NIC");
        if let Some(v) = get("RCCL_RUST_GIN_IB_PORT") {
            c.ib_port = number("RCCL_RUST_GIN_IB_PORT", &v, 1, 255)?;
        }
        if let Some(v) = get("RCCL_RUST_GIN_GID_INDEX") {
            c.gid_index = number("RCCL_RUST_GIN_GID_INDEX", &v, -1, 255)?;
        }
        if let Some(v) = get("RCCL_RUST_GIN_TRAFFIC_CLASS") {
            c.traffic_class = number("RCCL_RUST_GIN_TRAFFIC_CLASS", &v, 0, 255)?;
        }
        if let Some(v) = get("RCCL_RUST_GIN_QPS_PER_UAR") {
            c.qps_per_uar = number("RCCL_RUST_GIN_QPS_PER_UAR", &v, 0, 1 << 20)?;
        }
        if let Some(v) = get("RCCL_RUST_GIN_TRANSPORT") {
            c.transport = match v.to_ascii_lowercase().as_str() {
                "rc" => Transport::Rc,
                "dc" => Transport::Dc,
                _ => return Err(Error::InvalidArgument(format!("RCCL_RUST_GIN_TRANSPORT={v:?}: use rc or dc"))),
            };
        }
        if let Some(v) = get("RCCL_RUST_GIN_DCIS") {
            c.dcis = number("RCCL_RUST_GIN_DCIS", &v, 1, 64)?;
            if !c.dcis.is_power_of_two() {
                // The device picks a peer's DCI with a mask (gin/ops.h, queue_of).
                return Err(Error::InvalidArgument(format!("RCCL_RUST_GIN_DCIS={v} is not a power of two")));
            }
        }
        if let Some(v) = get("RCCL_RUST_GIN_RAILS") {
            c.rails = number("RCCL_RUST_GIN_RAILS", &v, 1, MAX_RAILS)?;
        }
        if let Some(v) = get("RCCL_RUST_GIN_SIGNAL_MODE") {
            c.signal_mode = match v.as_str() {
                "auto" => SignalModeKnob::Auto,
                "atomic" => SignalModeKnob::Atomic,
                "write" => SignalModeKnob::Write,
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "RCCL_RUST_GIN_SIGNAL_MODE={v:?}: use auto, atomic or write"
                    )))
                }
            };
        }
        Ok(c)
    }

    pub fn timeout_ns(&self) -> u64 {
        self.timeout_ms * 1_000_000
    }
}
