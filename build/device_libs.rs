//! Locates ROCm's device libraries (ocml, ockl, oclc_*) for HIP programs built
//! against the device library's `-fgpu-rdc` archive. The device library itself
//! is built with `-nogpulib` and needs none of them (docs/building.md says why).
//!
//! Debian's rocm-device-libs stop at gfx940: this module builds a shim folder
//! with the missing `oclc_isa_version_<n>.bc` files, assembled by the
//! compiler's own llvm-as, next to links to every other library.

use crate::toolchain::{Target, Toolchain};
use crate::util::{env, fail, run};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the device libraries are, as given or found; None if nowhere.
pub fn locate() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    for var in ["RUST_GIN_DEVICE_LIB_PATH", "HIP_DEVICE_LIB_PATH", "DEVICE_LIB_PATH"] {
        if let Some(v) = env(var) {
            candidates.push(v.into());
        }
    }
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Some(r) = env("ROCM_PATH") {
        roots.push(r.into());
    }
    roots.push("/opt/rocm".into());
    for root in &roots {
        candidates.push(root.join("amdgcn/bitcode"));
        if let Ok(rd) = std::fs::read_dir(root.join("lib/llvm/lib/clang")) {
            for e in rd.flatten() {
                candidates.push(e.path().join("lib/amdgcn/bitcode"));
            }
        }
    }
    candidates.push("/usr/lib/x86_64-linux-gnu/amdgcn/bitcode".into());
    candidates.into_iter().find(|d| d.join("ocml.bc").is_file())
}

/// `gfx942` -> `942`, `gfx90a` -> `90a`: the suffix of oclc_isa_version files.
fn isa_suffix(arch: &str) -> &str {
    arch.trim_start_matches("gfx")
}

/// `__oclc_ISA_version` as the device libraries encode it: major*1000 +
/// minor*100 + stepping, with the stepping read as hex (gfx90a -> 9010).
fn isa_number(arch: &str) -> u32 {
    let s = isa_suffix(arch);
    let (major, rest) = s.split_at(s.len() - 2);
    let major: u32 = major.parse().unwrap_or_else(|_| fail(&format!("cannot parse ISA version of {arch}")));
    let minor = u32::from_str_radix(&rest[..1], 16).unwrap_or(0);
    let stepping = u32::from_str_radix(&rest[1..], 16).unwrap_or(0);
    major * 1000 + minor * 100 + stepping
}

/// A folder with every library of `found` plus the ISA-version files it lacks
/// for `targets`. Returns the folder and the architectures that needed a shim.
pub fn shim(found: &Path, targets: &[Target], tc: &Toolchain, out: &Path) -> (PathBuf, Vec<String>) {
    let dir = out.join("device-libs");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| fail(&format!("create {}: {e}", dir.display())));
    for e in std::fs::read_dir(found).into_iter().flatten().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "bc") {
            let _ = std::os::unix::fs::symlink(&p, dir.join(e.file_name()));
        }
    }
    let mut shimmed = Vec::new();
    for t in targets {
        let name = format!("oclc_isa_version_{}.bc", isa_suffix(&t.arch));
        if dir.join(&name).exists() {
            continue;
        }
        let ll = dir.join(format!("oclc_isa_version_{}.ll", isa_suffix(&t.arch)));
        let text = format!(
            "target triple = \"amdgcn-amd-amdhsa\"\n\
             @__oclc_ISA_version = linkonce_odr protected local_unnamed_addr addrspace(4) constant i32 {}, align 4\n",
            isa_number(&t.arch)
        );
        std::fs::write(&ll, text).unwrap_or_else(|e| fail(&format!("write {}: {e}", ll.display())));
        run(
            Command::new(tc.tool("llvm-as")).arg(&ll).arg("-o").arg(dir.join(&name)),
            "assembling a device-library ISA-version shim",
        );
        shimmed.push(t.arch.clone());
    }
    (dir, shimmed)
}
