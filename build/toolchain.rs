//! Finds a clang that compiles HIP for every requested GPU architecture, and
//! the LLVM tools of the same release (bitcode and disassembly must come from
//! the compiler that produced them).

use crate::util::{env, fail, output_text};
use std::path::{Path, PathBuf};

pub const DEFAULT_TARGETS: &[&str] = &["gfx90a", "gfx942", "gfx950"];
/// CDNA architectures the device code is written for (wave64, gfx9 memory model).
pub const SUPPORTED: &[&str] = &["gfx90a", "gfx942", "gfx950"];

/// One requested offload target: `gfx942` or a target ID such as `gfx942:xnack-`.
#[derive(Clone, Debug)]
pub struct Target {
    pub id: String,
    pub arch: String,
}

pub struct Toolchain {
    pub clang: PathBuf,
    pub major: u32,
    pub description: String,
    bin_dir: Option<PathBuf>,
}

impl Toolchain {
    /// An LLVM tool of the compiler's own release: next to the compiler, else
    /// Debian's `<tool>-<major>` on PATH.
    pub fn tool(&self, name: &str) -> PathBuf {
        if let Some(dir) = &self.bin_dir {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
        let versioned = format!("{name}-{}", self.major);
        which(&versioned).unwrap_or_else(|| {
            fail(&format!(
                "cannot find {name} for LLVM {} (looked next to {} and for {versioned} on PATH)",
                self.major,
                self.clang.display()
            ))
        })
    }
}

pub fn requested_targets() -> Vec<Target> {
    let raw = env("GPU_TARGETS");
    let ids: Vec<String> = match &raw {
        Some(s) => s
            .split([';', ',', ' '])
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(String::from)
            .collect(),
        None => DEFAULT_TARGETS.iter().map(|s| s.to_string()).collect(),
    };
    if ids.is_empty() {
        fail("GPU_TARGETS is set but names no architecture (example: GPU_TARGETS=\"gfx942;gfx950\")");
    }
    let mut targets: Vec<Target> = Vec::new();
    for id in ids {
        let arch = id.split(':').next().unwrap_or("").to_string();
        if !SUPPORTED.contains(&arch.as_str()) {
            fail(&format!(
                "unknown or unsupported GPU target `{id}` in GPU_TARGETS; rust-gin's device code \
                 supports {} (CDNA, wave64). Example: GPU_TARGETS=\"gfx942;gfx950\"",
                SUPPORTED.join(", ")
            ));
        }
        if targets.iter().any(|t| t.arch == arch) {
            fail(&format!("GPU_TARGETS names {arch} twice"));
        }
        targets.push(Target { id, arch });
    }
    targets
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn candidates() -> Vec<(String, PathBuf)> {
    if let Some(explicit) = env("HIP_CLANG") {
        return vec![("HIP_CLANG".into(), resolve_hipcc(PathBuf::from(explicit)))];
    }
    let mut c = Vec::new();
    if let Some(rocm) = env("ROCM_PATH") {
        c.push(("$ROCM_PATH/llvm/bin/clang++".into(), Path::new(&rocm).join("llvm/bin/clang++")));
    }
    c.push(("/opt/rocm/llvm/bin/clang++".into(), PathBuf::from("/opt/rocm/llvm/bin/clang++")));
    for v in (15..=22).rev() {
        let name = format!("clang++-{v}");
        let p = which(&name).unwrap_or_else(|| PathBuf::from(&name));
        c.push((name, p));
    }
    c
}

/// RCCL may hand us hipcc; its clang lives in ../llvm/bin next to it.
fn resolve_hipcc(p: PathBuf) -> PathBuf {
    let is_hipcc = p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("hipcc"));
    if is_hipcc {
        if let Some(parent) = std::fs::canonicalize(&p).ok().and_then(|c| c.parent().map(Path::to_path_buf)) {
            let clang = parent.join("../llvm/bin/clang++");
            if clang.is_file() {
                return clang;
            }
        }
    }
    p
}

fn major_version(clang: &Path) -> Option<(u32, String)> {
    let text = output_text(std::process::Command::new(clang).arg("--version"))?;
    let first = text.lines().next()?.to_string();
    let idx = first.find("version ")?;
    let major = first[idx + 8..].split('.').next()?.trim().parse().ok()?;
    Some((major, first))
}

fn supported_cpus(clang: &Path) -> Vec<String> {
    let text = output_text(
        std::process::Command::new(clang)
            .args(["--target=amdgcn-amd-amdhsa", "-nogpulib", "--print-supported-cpus"]),
    )
    .unwrap_or_default();
    text.split_whitespace()
        .filter(|w| w.starts_with("gfx"))
        .map(String::from)
        .collect()
}

/// The first candidate that knows every requested architecture. One compiler
/// for all of them keeps the bitcode of every architecture on one LLVM.
pub fn find(targets: &[Target]) -> Toolchain {
    let mut tried = Vec::new();
    for (origin, clang) in candidates() {
        let Some((major, description)) = major_version(&clang) else {
            tried.push(format!("  {origin} ({}): not found or not runnable", clang.display()));
            continue;
        };
        let cpus = supported_cpus(&clang);
        let missing: Vec<&str> = targets
            .iter()
            .filter(|t| !cpus.contains(&t.arch))
            .map(|t| t.arch.as_str())
            .collect();
        if missing.is_empty() {
            let bin_dir = std::fs::canonicalize(&clang).ok().and_then(|c| c.parent().map(Path::to_path_buf));
            return Toolchain { clang, major, description, bin_dir };
        }
        tried.push(format!(
            "  {origin} ({}): {description}; does not know {}",
            clang.display(),
            missing.join(", ")
        ));
    }
    let archs: Vec<&str> = targets.iter().map(|t| t.arch.as_str()).collect();
    fail(&format!(
        "no HIP-capable clang knows all of: {}.\nTried:\n{}\n\
         Get one of:\n  - Debian 12: `apt-get install clang-22 lld-22 llvm-22` (bookworm-security; \
         the only Debian clang that knows gfx950), or clang-19 for gfx90a/gfx942 only;\n  \
         - ROCm 6.2+ (/opt/rocm/llvm/bin/clang++, or point HIP_CLANG at it);\n  \
         - or build fewer architectures: GPU_TARGETS=\"gfx90a\".\n\
         To build the host crate without device artefacts (not for CI or RCCL), set RUST_GIN_SKIP_DEVICE=1.",
        archs.join(", "),
        tried.join("\n")
    ))
}
