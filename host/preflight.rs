//! Platform pre-flight (issue 26, item 4): what the machine around the NIC
//! must provide for GPU-initiated networking and that no NIC or GPU call
//! reports, checked once when a real NIC's provider opens, with one WARN line
//! per problem naming its fix. Each check reads files under a root ("/" in
//! use, a planted tree in tests/preflight.rs) and a view of the environment,
//! so every fault has a test. Facts: shared/reference/anchors.md §8 (MORI's
//! known issues) and the GIN README's NCCL_CUMEM_ENABLE=1.

use std::path::{Path, PathBuf};

/// One check's result: `ok` is None where the machine did not let us tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub check: &'static str,
    pub ok: Option<bool>,
    /// What was found, and on a problem the fix.
    pub line: String,
}

impl Finding {
    fn ok(check: &'static str, line: String) -> Finding {
        Finding { check, ok: Some(true), line }
    }
    fn bad(check: &'static str, line: String) -> Finding {
        Finding { check, ok: Some(false), line }
    }
    fn unknown(check: &'static str, line: String) -> Finding {
        Finding { check, ok: None, line }
    }
}

/// Every check, in a fixed order.
pub fn run(root: &Path, env: &dyn Fn(&str) -> Option<String>) -> Vec<Finding> {
    vec![kernel_config(root), rocm_version(root, env), cumem(env), pcie_atomics(root), iommu(root)]
}

/// Runs the checks on this machine and writes a WARN line per problem and
/// an INFO line per check it could not make.
pub fn warn_all() {
    for f in run(Path::new("/"), &|k| std::env::var(k).ok()) {
        match f.ok {
            Some(false) => crate::warn_line!("pre-flight {}: {}", f.check, f.line),
            None => crate::info_line!(INIT, "pre-flight {}: {}", f.check, f.line),
            Some(true) => crate::info_line!(INIT, "pre-flight {}: {}", f.check, f.line),
        }
    }
}

fn read(root: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(root.join(rel.trim_start_matches('/'))).ok()
}

/// CONFIG_DMABUF_MOVE_NOTIFY: without it the kernel pins dma-buf exports of
/// VMM (peer) memory to host memory, silently (~9x slower; MORI).
fn kernel_config(root: &Path) -> Finding {
    const C: &str = "kernel config";
    let Some(release) = read(root, "proc/sys/kernel/osrelease").map(|s| s.trim().to_string()) else {
        return Finding::unknown(C, "cannot read /proc/sys/kernel/osrelease".into());
    };
    let places = [format!("boot/config-{release}"), format!("lib/modules/{release}/config")];
    let Some((path, text)) = places.iter().find_map(|p| read(root, p).map(|t| (p.clone(), t))) else {
        return Finding::unknown(
            C,
            format!(
                "no plain kernel config for {release} (/boot/config-{release}, /lib/modules/{release}/config; \
                 /proc/config.gz is not read): check CONFIG_DMABUF_MOVE_NOTIFY=y by hand"
            ),
        );
    };
    if text.lines().any(|l| l.trim() == "CONFIG_DMABUF_MOVE_NOTIFY=y") {
        Finding::ok(C, format!("CONFIG_DMABUF_MOVE_NOTIFY=y in /{path}"))
    } else {
        Finding::bad(
            C,
            format!(
                "kernel {release} is built without CONFIG_DMABUF_MOVE_NOTIFY (/{path}): dma-buf exports of VMM \
                 (peer) memory are pinned to host memory, silently (~9x slower); use a kernel built with \
                 CONFIG_DMABUF_MOVE_NOTIFY=y"
            ),
        )
    }
}

/// ROCm 7.2.x turns uncached VMM memory coarse-grained (MORI): NIC-written
/// words (CQEs, signals) would then be read stale.
fn rocm_version(root: &Path, env: &dyn Fn(&str) -> Option<String>) -> Finding {
    const C: &str = "ROCm";
    let rocm = env("ROCM_PATH").unwrap_or_else(|| "/opt/rocm".into());
    let file = PathBuf::from(&rocm).join(".info/version");
    let Some(v) = read(root, &file.to_string_lossy()).map(|s| s.trim().to_string()) else {
        return Finding::unknown(C, format!("no {} (ROCM_PATH): version not checked", file.display()));
    };
    let mut parts = v.split(['.', '-']);
    let (major, minor) = (parts.next(), parts.next());
    if major == Some("7") && minor == Some("2") {
        Finding::bad(
            C,
            format!(
                "ROCm {v} ({}) turns uncached VMM memory coarse-grained, so words the NIC writes into GPU \
                 memory (CQEs, signals) can be read stale; use another ROCm release, or \
                 RCCL_RUST_GIN_QUEUE_PLACEMENT=host",
                file.display()
            ),
        )
    } else {
        Finding::ok(C, format!("ROCm {v}"))
    }
}

/// RCCL's GIN needs cuMem-style (VMM) allocations: NCCL_CUMEM_ENABLE=1.
fn cumem(env: &dyn Fn(&str) -> Option<String>) -> Finding {
    const C: &str = "NCCL_CUMEM_ENABLE";
    match env("NCCL_CUMEM_ENABLE").map(|v| v.trim().to_string()) {
        Some(v) if v == "1" => Finding::ok(C, "NCCL_CUMEM_ENABLE=1".into()),
        other => Finding::bad(
            C,
            format!(
                "NCCL_CUMEM_ENABLE is {}: RCCL's GIN registers VMM (cuMem) allocations; set NCCL_CUMEM_ENABLE=1",
                other.map_or("unset".to_string(), |v| format!("{v:?}"))
            ),
        ),
    }
}

/// PCIe Device Capabilities 2 (PCIe base spec 7.5.3.15): 64-bit AtomicOp
/// completer, bit 9.
const DEVCAP2_ATOMIC64_COMPLETER: u32 = 1 << 9;

/// The DevCap2 register of a PCI function's config space, or None where the
/// bytes we may read do not reach it (non-root readers get 64 bytes).
pub fn devcap2(config: &[u8]) -> Option<u32> {
    const STATUS_CAP_LIST: u8 = 1 << 4;
    if config.len() < 0x40 || config[0x06] & STATUS_CAP_LIST == 0 {
        return None;
    }
    let mut at = (config[0x34] & !3) as usize;
    for _ in 0..48 {
        if at < 0x40 || at + 0x28 > config.len() {
            return None;
        }
        if config[at] == 0x10 {
            let b = &config[at + 0x24..at + 0x28];
            return Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        }
        at = (config[at + 1] & !3) as usize;
    }
    None
}

/// AMD GPUs must complete 64-bit AtomicOps for signals the NIC delivers as
/// atomics into GPU memory (Broadcom Thor2 paths lack it: ROCm/MAD 191).
fn pcie_atomics(root: &Path) -> Finding {
    const C: &str = "PCIe AtomicOps";
    let dir = root.join("sys/bus/pci/devices");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Finding::unknown(C, "cannot list /sys/bus/pci/devices".into());
    };
    let mut names: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    names.sort();
    let (mut gpus, mut missing, mut unread) = (0, vec![], vec![]);
    for d in names {
        let id = |f: &str| std::fs::read_to_string(d.join(f)).ok().map(|s| s.trim().to_string());
        let vendor = id("vendor");
        let class = id("class").unwrap_or_default();
        // AMD, display (0x03) or processing accelerator (0x12) class.
        if vendor.as_deref() != Some("0x1002") || !(class.starts_with("0x03") || class.starts_with("0x12")) {
            continue;
        }
        gpus += 1;
        let name = d.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        match std::fs::read(d.join("config")).ok().as_deref().and_then(devcap2) {
            Some(cap) if cap & DEVCAP2_ATOMIC64_COMPLETER != 0 => {}
            Some(_) => missing.push(name),
            None => unread.push(name),
        }
    }
    if gpus == 0 {
        return Finding::unknown(C, "no AMD GPU in /sys/bus/pci/devices".into());
    }
    if !missing.is_empty() {
        return Finding::bad(
            C,
            format!(
                "GPU(s) {} do not complete 64-bit PCIe AtomicOps: NIC atomics into GPU memory fail; \
                 use RCCL_RUST_GIN_SIGNAL_MODE=write (signals as RDMA writes), or a platform whose root ports \
                 route AtomicOps",
                missing.join(", ")
            ),
        );
    }
    if !unread.is_empty() {
        return Finding::unknown(
            C,
            format!("config space of GPU(s) {} not readable this far (run as root to check)", unread.join(", ")),
        );
    }
    Finding::ok(C, format!("{gpus} AMD GPU(s) complete 64-bit AtomicOps"))
}

/// An IOMMU that translates (not pass-through) costs every NIC DMA an IOTLB
/// lookup and breaks peer-to-peer routing on some platforms.
fn iommu(root: &Path) -> Finding {
    const C: &str = "IOMMU";
    let on = std::fs::read_dir(root.join("sys/class/iommu")).map(|mut d| d.next().is_some()).unwrap_or(false);
    if !on {
        return Finding::ok(C, "no IOMMU enabled".into());
    }
    let Ok(groups) = std::fs::read_dir(root.join("sys/kernel/iommu_groups")) else {
        return Finding::unknown(C, "IOMMU on, /sys/kernel/iommu_groups unreadable".into());
    };
    let mut translated = 0;
    let mut total = 0;
    for g in groups.filter_map(|e| e.ok()) {
        if let Ok(t) = std::fs::read_to_string(g.path().join("type")) {
            total += 1;
            if t.trim() != "identity" {
                translated += 1;
            }
        }
    }
    if total == 0 {
        return Finding::unknown(C, "IOMMU on, no group says its type".into());
    }
    if translated > 0 {
        Finding::bad(
            C,
            format!(
                "IOMMU translates DMA for {translated} of {total} groups (not pass-through): NIC access to GPU \
                 memory pays IOTLB misses and peer-to-peer may be blocked; boot with iommu=pt \
                 (amd_iommu=on iommu=pt on AMD hosts)"
            ),
        )
    } else {
        Finding::ok(C, format!("IOMMU in pass-through ({total} groups identity)"))
    }
}
