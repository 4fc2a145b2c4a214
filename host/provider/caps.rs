//! What a NIC and the GPU behind it can do for rust-gin, probed once when the
//! NIC is opened: printed at `NCCL_DEBUG=INFO`, by `gin-caps`, and used to
//! choose how signals travel (docs/configuration.md, "Capabilities"; the
//! knob RCCL_RUST_GIN_SIGNAL_MODE overrides the choice).
//!
//! A signal is an 8-byte fetch-and-add the NIC executes into the peer GPU's
//! memory. That needs the NIC to do remote atomics, and where the NIC
//! executes them as PCIe AtomicOps (verbs `IBV_ATOMIC_GLOB`) the GPU must
//! complete those; a NIC that executes them as its own read-modify-write
//! (`IBV_ATOMIC_HCA`, ConnectX's default) needs nothing of the GPU. Broadcom
//! Thor2 and AMD Pollara report no remote atomics into GPU memory (issue 13):
//! their signals travel as slot writes instead ([`SignalMode::SlotWrite`]).
//! What the probe cannot read is said as unknown, with the reason, never
//! guessed.

use std::fmt;

/// A capability the probe found, found missing, or could not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Known {
    Yes,
    No(String),
    Unknown(String),
}

impl Known {
    pub fn is_no(&self) -> bool {
        matches!(self, Known::No(_))
    }
}

impl fmt::Display for Known {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Known::Yes => write!(f, "yes"),
            Known::No(why) => write!(f, "no ({why})"),
            Known::Unknown(why) => write!(f, "unknown ({why})"),
        }
    }
}

/// How signals reach the peer (abi/gin.h `RUST_GIN_SIGNAL_MODE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalMode {
    /// An 8-byte RDMA fetch-and-add behind the data on the same queue pair.
    RemoteAtomic,
    /// No remote atomics: an 8-byte inline RDMA WRITE of the sender's running
    /// total into its own slot at the peer, behind the data on the same queue
    /// pair; the receiver folds the slots (docs/nic-families.md, section 7).
    /// VA signals are refused.
    SlotWrite,
}

impl SignalMode {
    pub fn name(self) -> &'static str {
        match self {
            SignalMode::RemoteAtomic => "remote atomic (8-byte fetch-and-add)",
            SignalMode::SlotWrite => "slot write (8-byte RDMA WRITE of a running total per sender; no VA signals)",
        }
    }

    /// The value of `rust_gin_context.signal_mode`.
    pub fn abi(self) -> u32 {
        match self {
            SignalMode::RemoteAtomic => crate::abi::RUST_GIN_SIGNAL_MODE_ATOMIC,
            SignalMode::SlotWrite => crate::abi::RUST_GIN_SIGNAL_MODE_WRITE,
        }
    }

    /// A `rust_gin_context.signal_mode` value, if it names a mode.
    pub fn from_abi(v: u32) -> Option<SignalMode> {
        match v {
            crate::abi::RUST_GIN_SIGNAL_MODE_ATOMIC => Some(SignalMode::RemoteAtomic),
            crate::abi::RUST_GIN_SIGNAL_MODE_WRITE => Some(SignalMode::SlotWrite),
            _ => None,
        }
    }
}

/// One NIC's capabilities (with the GPU its queues serve, where known).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    pub nic: String,
    /// The NIC executes 8-byte remote fetch-and-add (verbs `atomic_cap`).
    pub remote_atomics: Known,
    /// The NIC executes them as PCIe AtomicOps on the target memory
    /// (`IBV_ATOMIC_GLOB`), so the GPU must complete those.
    pub atomics_use_pcie: bool,
    /// The GPU completes 64-bit PCIe AtomicOps (its PCIe Device
    /// Capabilities 2); the switches on the path are not read.
    pub gpu_atomic_completer: Known,
    /// GPU memory registers as a dma-buf (else through peer memory).
    pub dmabuf: bool,
    /// Largest inline payload of one WQE the device code posts.
    pub max_inline: u32,
    /// Queue pairs the NIC offers (verbs `max_qp`), where known.
    pub max_qp: Option<u32>,
    /// Queue pairs per UAR page (RCCL_RUST_GIN_QPS_PER_UAR; 0 = all).
    pub qps_per_uar: Option<u32>,
}

impl Capabilities {
    /// Why remote atomics into GPU memory do not work with this NIC and GPU,
    /// or None where they do (or the probe could not tell: unknown is not no).
    pub fn atomics_unusable(&self) -> Option<String> {
        match (&self.remote_atomics, &self.gpu_atomic_completer) {
            (Known::No(why), _) => Some(format!("{}: no remote atomics ({why})", self.nic)),
            (_, Known::No(why)) if self.atomics_use_pcie => Some(format!(
                "{}: the NIC executes atomics as PCIe AtomicOps, which the GPU does not complete ({why})",
                self.nic
            )),
            _ => None,
        }
    }

    /// The signal mode `RCCL_RUST_GIN_SIGNAL_MODE=auto` picks: remote atomics
    /// where they work into GPU memory, else slot writes.
    pub fn signal_mode(&self) -> SignalMode {
        match self.atomics_unusable() {
            None => SignalMode::RemoteAtomic,
            Some(_) => SignalMode::SlotWrite,
        }
    }
}

impl fmt::Display for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: remote atomics {} ({}); GPU completes PCIe AtomicOps {}; dma-buf {}; max inline {} B; max QPs {}; \
             QPs per UAR page {}; signals: {}",
            self.nic,
            self.remote_atomics,
            if self.atomics_use_pcie { "as PCIe AtomicOps: the GPU must complete them" } else { "by the NIC itself" },
            self.gpu_atomic_completer,
            if self.dmabuf { "yes" } else { "no (peer memory)" },
            self.max_inline,
            self.max_qp.map(|n| n.to_string()).unwrap_or_else(|| "unknown".into()),
            match self.qps_per_uar {
                Some(0) => "all".to_string(),
                Some(n) => n.to_string(),
                None => "n/a".to_string(),
            },
            self.signal_mode().name()
        )
    }
}

/// PCI capability id of the PCI Express capability.
const PCI_CAP_ID_EXP: u8 = 0x10;
/// Offset of Device Capabilities 2 in the PCI Express capability.
const PCI_EXP_DEVCAP2: usize = 0x24;
/// Device Capabilities 2: 64-bit AtomicOp Completer Supported (PCIe Base
/// Specification 7.5.3.15; Linux `PCI_EXP_DEVCAP2_ATOMIC_COMP64`).
pub const PCI_EXP_DEVCAP2_ATOMIC_COMP64: u32 = 1 << 7;

/// Whether a PCI function completes 64-bit AtomicOps, from its configuration
/// space as sysfs gives it (`/sys/bus/pci/devices/<bdf>/config`). Without
/// root, Linux returns only the first 64 bytes, before the capability list:
/// that is unknown, not no.
pub fn atomic_completer(config: &[u8]) -> Known {
    let byte = |o: usize| config.get(o).copied();
    let word = |o: usize| Some(u32::from_le_bytes([byte(o)?, byte(o + 1)?, byte(o + 2)?, byte(o + 3)?]));
    // Status register bit 4: the function has a capability list.
    match byte(0x06) {
        None => return Known::Unknown(format!("configuration space unreadable ({} bytes)", config.len())),
        Some(s) if s & 0x10 == 0 => return Known::No("no PCI capability list".into()),
        _ => {}
    }
    let mut at = byte(0x34).map(|p| (p & 0xfc) as usize);
    // The list lives in the first 256 bytes; 48 hops cover it (a loop in a
    // corrupt list ends there).
    for _ in 0..48 {
        let Some(p) = at.filter(|p| *p >= 0x40) else { break };
        let (Some(id), Some(next)) = (byte(p), byte(p + 1)) else {
            return Known::Unknown(format!(
                "the capability list continues past the {} bytes readable (reading more of the PCI configuration \
                 space needs root)",
                config.len()
            ));
        };
        if id == PCI_CAP_ID_EXP {
            return match word(p + PCI_EXP_DEVCAP2) {
                None => Known::Unknown(format!(
                    "Device Capabilities 2 lies past the {} bytes readable (needs root)",
                    config.len()
                )),
                Some(c) if c & PCI_EXP_DEVCAP2_ATOMIC_COMP64 != 0 => Known::Yes,
                Some(c) => Known::No(format!("the GPU's Device Capabilities 2 ({c:#010x}) has no 64-bit AtomicOp completer")),
            };
        }
        at = Some((next & 0xfc) as usize);
    }
    Known::No("no PCI Express capability".into())
}

/// The GPU's side, read from sysfs for its PCI bus id (`0000:c1:00.0`).
pub fn gpu_atomic_completer(pci_bus_id: Option<&str>, read: impl Fn(&str) -> std::io::Result<Vec<u8>>) -> Known {
    let Some(bdf) = pci_bus_id.filter(|b| !b.is_empty()) else {
        return Known::Unknown("the GPU's PCI bus id is unknown".into());
    };
    let path = format!("/sys/bus/pci/devices/{}/config", bdf.to_ascii_lowercase());
    match read(&path) {
        Ok(config) => atomic_completer(&config),
        Err(e) => Known::Unknown(format!("{path}: {e}")),
    }
}
