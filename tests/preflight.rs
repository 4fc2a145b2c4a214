//! Platform pre-flight (host/preflight.rs): each check over a planted file
//! tree, passing on a good platform and failing, with the fix named, on the
//! one fault planted for it; where the tree does not say, it says so (None),
//! never "fine".

#[path = "support/scratch.rs"]
#[allow(dead_code)]
mod scratch;

use rccl_rust_gin::preflight::{devcap2, run, Finding};
use scratch::TempDir;
use std::path::Path;

/// A PCIe config space of 256 bytes with a capability list whose second
/// entry is the PCIe capability, DevCap2 = `cap2`.
fn config_space(cap2: u32) -> Vec<u8> {
    let mut c = vec![0u8; 256];
    c[0x06] = 1 << 4; // status: capabilities list
    c[0x34] = 0x50; // first capability
    c[0x50] = 0x01; // power management
    c[0x51] = 0x70; // next
    c[0x70] = 0x10; // PCI Express
    c[0x71] = 0x00; // end of list
    c[0x70 + 0x24..0x70 + 0x28].copy_from_slice(&cap2.to_le_bytes());
    c
}

fn write(root: &Path, rel: &str, bytes: &[u8]) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

/// A platform where every check passes.
fn good(root: &Path) {
    write(root, "proc/sys/kernel/osrelease", b"6.8.0-rg\n");
    write(root, "boot/config-6.8.0-rg", b"CONFIG_X=y\nCONFIG_DMABUF_MOVE_NOTIFY=y\n");
    write(root, "opt/rocm/.info/version", b"7.1.1-38\n");
    let gpu = "sys/bus/pci/devices/0000:c1:00.0";
    write(root, &format!("{gpu}/vendor"), b"0x1002\n");
    write(root, &format!("{gpu}/class"), b"0x120000\n");
    write(root, &format!("{gpu}/config"), &config_space(1 << 9 | 1 << 8 | 1 << 7));
    let nic = "sys/bus/pci/devices/0000:41:00.0";
    write(root, &format!("{nic}/vendor"), b"0x15b3\n");
    write(root, &format!("{nic}/class"), b"0x020000\n");
    write(root, "sys/class/iommu/ivhd0/uevent", b"");
    write(root, "sys/kernel/iommu_groups/0/type", b"identity\n");
    write(root, "sys/kernel/iommu_groups/1/type", b"identity\n");
}

fn env_good(k: &str) -> Option<String> {
    (k == "NCCL_CUMEM_ENABLE").then(|| "1".to_string())
}

fn finding<'a>(all: &'a [Finding], check: &str) -> &'a Finding {
    all.iter().find(|f| f.check == check).unwrap_or_else(|| panic!("no {check} in {all:?}"))
}

#[test]
fn a_good_platform_passes_every_check() {
    let t = TempDir::new("preflight");
    good(&t.0);
    let all = run(&t.0, &env_good);
    assert_eq!(all.len(), 5);
    for f in &all {
        assert_eq!(f.ok, Some(true), "{f:?}");
    }
}

/// Each planted fault fails its own check only, naming the fix.
#[test]
fn each_planted_fault_fails_its_check_and_names_the_fix() {
    type Plant = fn(&Path);
    let cases: [(&str, Plant, &str); 4] = [
        ("kernel config", |r| write(r, "boot/config-6.8.0-rg", b"CONFIG_X=y\n# CONFIG_DMABUF_MOVE_NOTIFY is not set\n"), "CONFIG_DMABUF_MOVE_NOTIFY=y"),
        ("ROCm", |r| write(r, "opt/rocm/.info/version", b"7.2.0-43\n"), "coarse-grained"),
        ("PCIe AtomicOps", |r| write(r, "sys/bus/pci/devices/0000:c1:00.0/config", &config_space(1 << 7)), "RCCL_RUST_GIN_SIGNAL_MODE=write"),
        ("IOMMU", |r| write(r, "sys/kernel/iommu_groups/1/type", b"DMA-FQ\n"), "iommu=pt"),
    ];
    for (check, plant, fix) in cases {
        let t = TempDir::new("preflight");
        good(&t.0);
        plant(&t.0);
        let all = run(&t.0, &env_good);
        let f = finding(&all, check);
        assert_eq!(f.ok, Some(false), "{check}: the planted fault passed: {f:?}");
        assert!(f.line.contains(fix), "{check}: the line does not name the fix {fix:?}: {}", f.line);
        for other in all.iter().filter(|o| o.check != check) {
            assert_eq!(other.ok, Some(true), "{check} planted, {} failed too: {other:?}", other.check);
        }
    }
    // The environment: NCCL_CUMEM_ENABLE unset, and set to 0.
    let t = TempDir::new("preflight");
    good(&t.0);
    for env in [&(|_: &str| None) as &dyn Fn(&str) -> Option<String>, &|k: &str| (k == "NCCL_CUMEM_ENABLE").then(|| "0".into())] {
        let f = finding(&run(&t.0, env), "NCCL_CUMEM_ENABLE").clone();
        assert_eq!(f.ok, Some(false), "{f:?}");
        assert!(f.line.contains("set NCCL_CUMEM_ENABLE=1"), "{}", f.line);
    }
}

/// What the machine does not let us read is "not checked", never "fine".
#[test]
fn what_cannot_be_read_is_reported_as_not_checked() {
    let t = TempDir::new("preflight");
    good(&t.0);
    // A non-root reader gets 64 bytes of config space; no kernel config file.
    write(&t.0, "sys/bus/pci/devices/0000:c1:00.0/config", &config_space(1 << 9)[..64]);
    std::fs::remove_file(&t.0.join("boot/config-6.8.0-rg")).unwrap();
    let all = run(&t.0, &env_good);
    assert_eq!(finding(&all, "PCIe AtomicOps").ok, None, "{all:?}");
    let k = finding(&all, "kernel config");
    assert_eq!(k.ok, None, "{k:?}");
    assert!(k.line.contains("by hand"), "{}", k.line);
    // The capability walk itself: a list without the PCIe capability.
    let mut c = config_space(1 << 9);
    c[0x70] = 0x05; // MSI, not PCIe
    assert_eq!(devcap2(&c), None);
    assert_eq!(devcap2(&config_space(1 << 9)), Some(1 << 9));
}
