//! Builds the HIP device library for each requested GPU architecture:
//!   librccl_rust_gin_device_<gfx>.bc  bitcode, the form RCCL's device linker injects
//!   <gfx>.hsaco                       code object with the ISA-check entry kernels
//!   librccl_rust_gin_device_<gfx>.a   -fgpu-rdc archive for HIP programs
//! and, for the ISA checks, the same code object for every NIC family the
//! library is not built with (isa_family_<family>_<gfx>.hsaco: each GIN
//! operation instantiated for that family alone) and code objects with
//! planted faults.

use crate::toolchain::{self, Target, Toolchain};
use crate::util::{env, fail, manifest_dir, out_dir, profile_dir, run};
use crate::device_libs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Planted faults the ISA checks must catch (tests/isa_checks.rs).
const FAULTS: &[(&str, &str)] = &[
    ("split_doorbell", "RUST_GIN_ISA_FAULT_SPLIT_DOORBELL"),
    ("missing_fence", "RUST_GIN_ISA_FAULT_MISSING_FENCE"),
    ("scratch", "RUST_GIN_ISA_FAULT_SCRATCH"),
    ("dropped_wait", "RUST_GIN_ISA_FAULT_DROPPED_WAIT"),
    // The instruction-path counter's own test (tests/isa_path.rs): one more
    // instruction on every post's path must be on the route it counts.
    ("path_nop", "RUST_GIN_ISA_FAULT_PATH_NOP"),
    // Plain loads of words the NIC writes, which the host build cannot tell
    // from the scoped loads they replace (tests/isa_path.rs, NIC-written loads).
    ("plain_cqe_load", "RUST_GIN_ISA_FAULT_PLAIN_CQE_LOAD"),
    ("plain_signal_load", "RUST_GIN_ISA_FAULT_PLAIN_SIGNAL_LOAD"),
];

/// The NIC families one at a time, with the mask gin/family.h takes. Every
/// family the library itself is not built for alone gets its own ISA code
/// object, so that the checks see each family's GIN operations as a
/// single-family GPU build inlines them (tests/isa_checks.rs).
pub const FAMILIES: &[(&str, u32)] = &[("mlx5", 1), ("bnxt", 2), ("ionic", 4)];

const LIB_SOURCE: &str = "device/src/rust_gin_device.hip";
const ISA_SOURCE: &str = "device/src/isa_entry.hip";

/// The NIC families the GPU library serves (`RUST_GIN_NIC_FAMILIES`, a
/// comma list of mlx5, bnxt, ionic; mlx5 alone by default), as the mask
/// gin/family.h takes: each family's code inlined into every GIN entry point
/// costs the kernels registers (docs/nic-families.md, "Choosing the families
/// at build time"). The host build always has all three.
pub fn gpu_families() -> u32 {
    let list = env("RUST_GIN_NIC_FAMILIES").unwrap_or_else(|| "mlx5".into());
    let mut mask = 0;
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        mask |= match name {
            "mlx5" => 1,
            "bnxt" | "bnxt_re" => 2,
            "ionic" => 4,
            _ => fail(&format!("RUST_GIN_NIC_FAMILIES={list}: unknown family {name:?} (mlx5, bnxt, ionic)")),
        };
    }
    if mask == 0 {
        fail(&format!("RUST_GIN_NIC_FAMILIES={list:?} names no family (mlx5, bnxt, ionic)"));
    }
    mask
}

fn common_flags(cmd: &mut Command, target: &Target, families: u32) {
    let include = manifest_dir().join("device/include");
    cmd.args(["-x", "hip", "-std=c++17", "-O3", "-nogpuinc", "-nogpulib", "-Wall", "-Wextra"])
        .arg(format!("-DRUST_GIN_FAMILIES={families}"))
        .arg(format!("--offload-arch={}", target.id))
        .arg("-I")
        .arg(include);
}

/// The code-object version: as asked, else none at all for the library
/// forms (bitcode, archive), so that the consumer's own version applies when
/// it links them (a conflicting `amdhsa_code_object_version` module flag is a
/// link error), else the compiler's default for the finished code objects.
fn code_object_version(cmd: &mut Command, library_form: bool) {
    match env("RUST_GIN_CODE_OBJECT_VERSION") {
        Some(cov) => {
            cmd.arg(format!("-mcode-object-version={cov}"));
        }
        None if library_form => {
            cmd.args(["-Xclang", "-mcode-object-version=none"]);
        }
        None => {}
    }
}

fn compile_bitcode(tc: &Toolchain, t: &Target, dir: &Path) -> PathBuf {
    let out = dir.join(format!("librccl_rust_gin_device_{}.bc", t.arch));
    let mut cmd = Command::new(&tc.clang);
    common_flags(&mut cmd, t, gpu_families());
    code_object_version(&mut cmd, true);
    cmd.args(["--cuda-device-only", "-fgpu-rdc", "-emit-llvm", "-c"])
        .arg(manifest_dir().join(LIB_SOURCE))
        .arg("-o")
        .arg(&out);
    run(&mut cmd, &format!("device bitcode for {}", t.id));
    out
}

fn compile_hsaco(tc: &Toolchain, t: &Target, out: &Path, families: u32, defines: &[&str]) {
    let mut cmd = Command::new(&tc.clang);
    common_flags(&mut cmd, t, families);
    for d in defines {
        cmd.arg(format!("-D{d}"));
    }
    code_object_version(&mut cmd, false);
    // Line tables name the source (and the inlined call chain) of every
    // instruction, which the instruction-path counter walks by; LLVM keeps
    // debug info from changing the code it generates (docs/performance.md, "ISA path").
    cmd.arg("-gline-tables-only");
    cmd.args(["--cuda-device-only", "--no-gpu-bundle-output", "-c"])
        .arg(manifest_dir().join(ISA_SOURCE))
        .arg("-o")
        .arg(out);
    run(&mut cmd, &format!("code object for {}", t.id));
}

fn compile_rdc_archive(tc: &Toolchain, t: &Target, obj_dir: &Path, dir: &Path) -> PathBuf {
    let obj = obj_dir.join(format!("rust_gin_device_{}.o", t.arch));
    let mut cmd = Command::new(&tc.clang);
    common_flags(&mut cmd, t, gpu_families());
    code_object_version(&mut cmd, true);
    cmd.args(["-fgpu-rdc", "-fPIC", "-c"])
        .arg(manifest_dir().join(LIB_SOURCE))
        .arg("-o")
        .arg(&obj);
    run(&mut cmd, &format!("-fgpu-rdc object for {}", t.id));
    let lib = dir.join(format!("librccl_rust_gin_device_{}.a", t.arch));
    let _ = std::fs::remove_file(&lib);
    run(Command::new(tc.tool("llvm-ar")).arg("rcs").arg(&lib).arg(&obj), "llvm-ar");
    lib
}

/// The stable, documented place for the artefacts (docs/building.md).
fn artefact_root() -> PathBuf {
    env("RUST_GIN_DEVICE_OUT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| profile_dir().join("rust-gin-device"))
}

pub fn build() {
    if env("RUST_GIN_SKIP_DEVICE").is_some_and(|v| v != "0") {
        println!(
            "cargo:warning=RUST_GIN_SKIP_DEVICE is set: no device artefacts were built; the ISA \
             checks and device-link tests will fail. Never set it for CI or for RCCL."
        );
        println!("cargo:rustc-env=RUST_GIN_GPU_TARGETS=");
        println!("cargo:rustc-env=RUST_GIN_GPU_FAMILIES={}", gpu_families());
        return;
    }
    let targets = toolchain::requested_targets();
    let tc = toolchain::find(&targets);
    let build_dir = out_dir().join("device");
    let root = artefact_root();
    let _ = std::fs::create_dir_all(&build_dir);
    // Artefacts of architectures no longer requested would look current.
    for arch in toolchain::SUPPORTED {
        if !targets.iter().any(|t| t.arch == *arch) {
            let _ = std::fs::remove_dir_all(root.join(arch));
        }
    }

    std::thread::scope(|s| {
        for t in &targets {
            let (tc, build_dir, root) = (&tc, &build_dir, &root);
            s.spawn(move || {
                let dir = root.join(&t.arch);
                std::fs::create_dir_all(&dir)
                    .unwrap_or_else(|e| fail(&format!("create {}: {e}", dir.display())));
                compile_bitcode(tc, t, &dir);
                compile_hsaco(tc, t, &dir.join(format!("{}.hsaco", t.arch)), gpu_families(), &[]);
                compile_rdc_archive(tc, t, build_dir, &dir);
                for (name, define) in FAULTS {
                    let out = build_dir.join(format!("isa_fault_{name}_{}.hsaco", t.arch));
                    compile_hsaco(tc, t, &out, gpu_families(), &[define]);
                }
                for (family, mask) in FAMILIES.iter().filter(|(_, m)| *m != gpu_families()) {
                    let out = build_dir.join(format!("isa_family_{family}_{}.hsaco", t.arch));
                    compile_hsaco(tc, t, &out, *mask, &[]);
                }
            });
        }
    });

    let libs = device_libs::locate();
    let (lib_dir, shimmed) = match &libs {
        Some(found) => {
            let (d, s) = device_libs::shim(found, &targets, &tc, &build_dir);
            (d.display().to_string(), s)
        }
        None => (String::new(), Vec::new()),
    };

    let archs: Vec<&str> = targets.iter().map(|t| t.arch.as_str()).collect();
    let manifest = format!(
        "compiler: {}\nversion: {}\ntargets: {}\nNIC families (mask): {}\ndevice-libs: {}{}\n",
        tc.clang.display(),
        tc.description,
        targets.iter().map(|t| t.id.as_str()).collect::<Vec<_>>().join(";"),
        gpu_families(),
        libs.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "not found".into()),
        if shimmed.is_empty() { String::new() } else { format!(" (ISA-version shim for {})", shimmed.join(", ")) },
    );
    let _ = std::fs::write(root.join("manifest.txt"), &manifest);

    println!("cargo:rustc-cfg=rust_gin_device_built");
    println!("cargo:rustc-env=RUST_GIN_GPU_TARGETS={}", archs.join(","));
    println!("cargo:rustc-env=RUST_GIN_GPU_FAMILIES={}", gpu_families());
    let families: Vec<String> = FAMILIES.iter().map(|(f, m)| format!("{f}={m}")).collect();
    println!("cargo:rustc-env=RUST_GIN_ISA_FAMILIES={}", families.join(","));
    println!("cargo:rustc-env=RUST_GIN_DEVICE_DIR={}", root.display());
    println!("cargo:rustc-env=RUST_GIN_LLVM_SYMBOLIZER={}", tc.tool("llvm-symbolizer").display());
    println!("cargo:rustc-env=RUST_GIN_DEVICE_BUILD_DIR={}", build_dir.display());
    println!("cargo:rustc-env=RUST_GIN_HIP_CLANG={}", tc.clang.display());
    println!("cargo:rustc-env=RUST_GIN_LLVM_OBJDUMP={}", tc.tool("llvm-objdump").display());
    println!("cargo:rustc-env=RUST_GIN_LLVM_READELF={}", tc.tool("llvm-readelf").display());
    println!("cargo:rustc-env=RUST_GIN_LLVM_DIS={}", tc.tool("llvm-dis").display());
    println!("cargo:rustc-env=RUST_GIN_DEVICE_LIB_DIR={lib_dir}");
    println!(
        "cargo:warning=rust-gin device artefacts ({}; {}) in {}",
        archs.join(", "),
        tc.description,
        root.display()
    );
}
