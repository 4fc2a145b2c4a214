//! The capability probe (host/provider/caps.rs): the GPU's PCIe AtomicOp
//! completer bit read from configuration space as sysfs gives it, what the
//! mlx5 provider reports over the recording stand-in, the signal mode each
//! combination allows, and the inline limit against the device code itself.

#[path = "support/mlx5_standin.rs"]
#[allow(dead_code)]
mod mlx5_standin;

use mlx5_standin::{Setup, StandIn};
use rccl_rust_gin::abi::{rust_gin_mlx5_request, RUST_GIN_REQ_INLINE};
use rccl_rust_gin::config::Config;
use rccl_rust_gin::device;
use rccl_rust_gin::device::MAX_INLINE;
use rccl_rust_gin::mlx5::wire::opcode;
use rccl_rust_gin::provider::caps::{atomic_completer, Capabilities, Known, SignalMode, PCI_EXP_DEVCAP2_ATOMIC_COMP64};
use rccl_rust_gin::provider::mlx5::{MemoryMode, Mlx5Provider};
use rccl_rust_gin::provider::Nic;

/// A 256-byte configuration space: a power-management capability at 0x40,
/// then the PCI Express capability at 0x60 with Device Capabilities 2 =
/// `devcap2` (offset 0x24 in it).
fn config(devcap2: u32) -> Vec<u8> {
    let mut c = vec![0u8; 256];
    c[0x06] = 0x10; // status: capability list
    c[0x34] = 0x40;
    c[0x40] = 0x01; // PM
    c[0x41] = 0x60;
    c[0x60] = 0x10; // PCI Express
    c[0x61] = 0x00;
    c[0x60 + 0x24..0x60 + 0x28].copy_from_slice(&devcap2.to_le_bytes());
    c
}

#[test]
fn the_atomic_completer_bit_is_read_from_device_capabilities_2() {
    assert_eq!(atomic_completer(&config(PCI_EXP_DEVCAP2_ATOMIC_COMP64 | 0x40)), Known::Yes);
    // 32-bit completer only (bit 6): no 64-bit fetch-and-add.
    assert!(atomic_completer(&config(0x40)).is_no());
    // What an unprivileged read of sysfs returns: 64 bytes, before the list.
    let short = &config(PCI_EXP_DEVCAP2_ATOMIC_COMP64)[..64];
    assert!(matches!(atomic_completer(short), Known::Unknown(ref why) if why.contains("root")), "{:?}", atomic_completer(short));
    // No capability list at all; and a list that loops ends.
    let mut none = config(PCI_EXP_DEVCAP2_ATOMIC_COMP64);
    none[0x06] = 0;
    assert!(atomic_completer(&none).is_no());
    let mut looped = config(PCI_EXP_DEVCAP2_ATOMIC_COMP64);
    looped[0x60] = 0x05; // MSI instead of PCIe, pointing back at PM
    looped[0x61] = 0x40;
    assert!(atomic_completer(&looped).is_no());
    assert!(matches!(atomic_completer(&[]), Known::Unknown(_)));
}

fn caps(remote: Known, pcie: bool, gpu: Known) -> Capabilities {
    Capabilities {
        nic: "mlx5_7".into(),
        remote_atomics: remote,
        atomics_use_pcie: pcie,
        gpu_atomic_completer: gpu,
        dmabuf: true,
        max_inline: MAX_INLINE,
        max_qp: Some(1),
        qps_per_uar: Some(16),
    }
}

#[test]
fn the_signal_mode_is_atomics_where_they_work_else_slot_writes() {
    let no = || Known::No("test".into());
    let unknown = || Known::Unknown("test".into());
    assert_eq!(caps(Known::Yes, false, no()).signal_mode(), SignalMode::RemoteAtomic, "HCA atomics need no completer");
    assert_eq!(caps(Known::Yes, true, Known::Yes).signal_mode(), SignalMode::RemoteAtomic);
    assert_eq!(caps(Known::Yes, true, unknown()).signal_mode(), SignalMode::RemoteAtomic, "unknown is not no");
    assert_eq!(caps(no(), false, Known::Yes).signal_mode(), SignalMode::SlotWrite);
    let e = caps(no(), false, Known::Yes).atomics_unusable().unwrap();
    assert!(e.contains("mlx5_7") && e.contains("no remote atomics"), "{e}");
    assert_eq!(caps(Known::Yes, true, no()).signal_mode(), SignalMode::SlotWrite);
    let e = caps(Known::Yes, true, no()).atomics_unusable().unwrap();
    assert!(e.contains("PCIe AtomicOps"), "{e}");
    let line = caps(Known::Yes, true, no()).to_string();
    assert!(line.contains("signals: slot write"), "{line}");
}

fn probe(setup: Setup) -> (StandIn, Capabilities) {
    let s = StandIn::new(setup);
    let caps = {
        let p = Mlx5Provider::probe_on(s.platform(), &Config { qps_per_uar: 4, ..Config::default() }).expect("probe");
        let nic = p.open_mode(0, MemoryMode::Gpu).expect("open");
        nic.capabilities()
    };
    (s, caps)
}

#[test]
fn the_mlx5_provider_reports_what_the_device_and_the_gpu_say() {
    let bdf = "0000:c1:00.0".to_string();
    let (_s, c) = probe(Setup { gpu_pci: Some((bdf.clone(), config(PCI_EXP_DEVCAP2_ATOMIC_COMP64))), ..Setup::roce() });
    assert_eq!(c.nic, "mlx5_0");
    assert_eq!(c.remote_atomics, Known::Yes);
    assert!(!c.atomics_use_pcie, "atomic_cap HCA: the NIC's own read-modify-write");
    assert_eq!(c.gpu_atomic_completer, Known::Yes);
    assert!(c.dmabuf);
    assert_eq!((c.max_qp, c.qps_per_uar, c.max_inline), (Some(131_072), Some(4), MAX_INLINE));
    assert_eq!(c.signal_mode(), SignalMode::RemoteAtomic);

    // GLOB atomics on a GPU without a 64-bit completer: signals become slot writes.
    let (_s, c) = probe(Setup { atomic_cap: 2, gpu_pci: Some((bdf, config(0))), ..Setup::roce() });
    assert!(c.atomics_use_pcie);
    assert!(c.gpu_atomic_completer.is_no());
    assert_eq!(c.signal_mode(), SignalMode::SlotWrite);

    // No bus id from HIP: unknown, with the reason.
    let (_s, c) = probe(Setup::roce());
    assert!(matches!(c.gpu_atomic_completer, Known::Unknown(ref w) if w.contains("bus id")), "{:?}", c.gpu_atomic_completer);
}

#[test]
fn max_inline_is_the_device_codes_limit() {
    let req = |len: u32| rust_gin_mlx5_request {
        opcode: opcode::RDMA_WRITE as u8,
        flags: RUST_GIN_REQ_INLINE as u8,
        length: len,
        raddr: 0x1000,
        rkey: 1,
        ..Default::default()
    };
    assert!(device::build_wqe(&req(MAX_INLINE), 0, 1, false).is_ok(), "{MAX_INLINE} bytes inline");
    assert!(device::build_wqe(&req(MAX_INLINE + 1), 0, 1, false).is_err(), "one byte more is refused");
}

/// The command, as a user runs it, on the emulated NIC.
#[test]
fn gin_caps_prints_each_nic_and_its_signal_mode() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gin-caps"))
        .env("RCCL_RUST_GIN_PROVIDER", "emu")
        .arg("--host")
        .output()
        .expect("run gin-caps");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "gin-caps failed: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("rust-gin-emu0: remote atomics yes"), "{text}");
    assert!(text.contains("signals: remote atomic"), "{text}");
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_gin-caps"))
        .env("RCCL_RUST_GIN_QPS_PER_UAR", "-3")
        .output()
        .expect("run gin-caps");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("RCCL_RUST_GIN_QPS_PER_UAR"));
}
