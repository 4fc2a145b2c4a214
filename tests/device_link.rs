//! The device library's per-architecture artefacts work for their consumers:
//! a HIP program (with HIP headers and ROCm device libraries) links the
//! `-fgpu-rdc` archive and its code object carries our entry point; the
//! bitcode names every entry point and needs no device-library function.
//! Nothing here runs on a GPU; linking is what is checked.

#[path = "support/isa.rs"]
#[allow(dead_code)]
mod isa;

use std::path::{Path, PathBuf};
use std::process::Command;

fn need(var: Option<&'static str>, what: &str) -> &'static str {
    var.filter(|v| !v.is_empty()).unwrap_or_else(|| {
        panic!("DEVICE ARTEFACTS NOT BUILT: {what} is unknown (RUST_GIN_SKIP_DEVICE set?); see docs/building.md")
    })
}

fn targets() -> Vec<&'static str> {
    need(option_env!("RUST_GIN_GPU_TARGETS"), "RUST_GIN_GPU_TARGETS").split(',').collect()
}

fn artefact(arch: &str, name: &str) -> PathBuf {
    Path::new(need(option_env!("RUST_GIN_DEVICE_DIR"), "RUST_GIN_DEVICE_DIR")).join(arch).join(name)
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

fn llvm_tool(name: &str) -> PathBuf {
    let objdump = PathBuf::from(need(option_env!("RUST_GIN_LLVM_OBJDUMP"), "llvm-objdump"));
    let dir = objdump.parent().expect("tool folder");
    let same_dir = dir.join(name);
    if same_dir.exists() {
        return same_dir;
    }
    // Debian's versioned names: llvm-objdump-22 -> clang-offload-bundler-22
    let suffix = objdump.file_name().unwrap().to_string_lossy().trim_start_matches("llvm-objdump").to_string();
    dir.join(format!("{name}{suffix}"))
}

#[test]
fn bitcode_defines_every_entry_point_and_needs_no_device_library() {
    let dis = need(option_env!("RUST_GIN_LLVM_DIS"), "llvm-dis");
    for arch in targets() {
        let bc = artefact(arch, &format!("librccl_rust_gin_device_{arch}.bc"));
        let ir = run(Command::new(dis).arg(&bc).arg("-o").arg("-"));
        let defined: Vec<&str> = ir
            .lines()
            .filter(|l| l.starts_with("define "))
            .filter_map(|l| l.split('@').nth(1).and_then(|r| r.split('(').next()))
            .collect();
        let header = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("device/include/rust_gin/mlx5/api.h")).unwrap();
        for entry in isa::declared_entry_points(&header) {
            assert!(defined.contains(&entry.as_str()), "{arch}: {entry} is not defined in {}", bc.display());
        }
        let undefined: Vec<&str> = ir.lines().filter(|l| l.starts_with("declare ") && !l.contains("@llvm.")).collect();
        assert!(undefined.is_empty(), "{arch}: the bitcode needs external functions: {undefined:?}");
        assert!(!ir.contains("amdhsa_code_object_version"),
            "{arch}: the bitcode pins a code-object version; the consumer's must apply");
    }
}

#[test]
fn a_hip_program_links_the_rdc_archive() {
    let clang = need(option_env!("RUST_GIN_HIP_CLANG"), "the HIP compiler");
    let libs = need(option_env!("RUST_GIN_DEVICE_LIB_DIR"), "ROCm device libraries (apt-get install rocm-device-libs)");
    let hip_include = ["/opt/rocm/include", "/usr/include"]
        .into_iter()
        .find(|p| Path::new(p).join("hip/hip_runtime.h").exists())
        .expect("HIP headers (hip/hip_runtime.h) are needed: apt-get install libamdhip64-dev");
    let rocm_path = Path::new(hip_include).parent().unwrap();
    // Debian's device libraries predate code-object v6.
    let old_libs = !Path::new(libs).join("oclc_abi_version_600.bc").exists();
    let tmp = std::env::temp_dir().join(format!("rust-gin-device-link-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let app = tmp.join("app.hip");
    std::fs::write(
        &app,
        "#include <hip/hip_runtime.h>\n#include \"rust_gin/mlx5/api.h\"\n\
         __global__ void app_kernel(const rust_gin_mlx5_sq* sq) { rust_gin_mlx5_ring(sq); }\n\
         int main() { hipLaunchKernelGGL(app_kernel, dim3(1), dim3(1), 0, 0, nullptr); return 0; }\n",
    )
    .unwrap();
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("device/include");
    for arch in targets() {
        let mut common: Vec<String> = vec![
            format!("--offload-arch={arch}"),
            "-fgpu-rdc".into(),
            format!("--rocm-path={}", rocm_path.display()),
            format!("--rocm-device-lib-path={libs}"),
        ];
        if old_libs {
            common.push("-mcode-object-version=5".into());
        }
        let obj = tmp.join(format!("app_{arch}.o"));
        let mut compile = Command::new(clang);
        compile.args(["-x", "hip", "-std=c++17", "-D__AMDGCN_WAVEFRONT_SIZE=64"]).args(&common).arg("-I").arg(&include);
        if old_libs {
            // Debian's HIP 5.2 headers call device-library builtins that clang 22
            // only resolves with hip.bc linked as builtin bitcode.
            compile.args(["-Xclang", "-mlink-builtin-bitcode", "-Xclang"]).arg(Path::new(libs).join("hip.bc"));
        }
        run(compile.arg("-c").arg(&app).arg("-o").arg(&obj));
        let exe = tmp.join(format!("app_{arch}"));
        run(Command::new(clang)
            .args(["--hip-link"])
            .args(&common)
            .arg(&obj)
            .arg(artefact(arch, &format!("librccl_rust_gin_device_{arch}.a")))
            .arg("-o")
            .arg(&exe)
            .args(["-L/usr/lib/x86_64-linux-gnu", "-L/opt/rocm/lib", "-lamdhip64"]));
        let fatbin = tmp.join(format!("app_{arch}.fatbin"));
        run(Command::new("objcopy").arg(format!("--dump-section=.hip_fatbin={}", fatbin.display())).arg(&exe));
        let co = tmp.join(format!("app_{arch}.co"));
        run(Command::new(llvm_tool("clang-offload-bundler"))
            .args(["--unbundle", "--type=o"])
            .arg(format!("--targets=hipv4-amdgcn-amd-amdhsa--{arch}"))
            .arg(format!("--input={}", fatbin.display()))
            .arg(format!("--output={}", co.display())));
        let listing = run(Command::new(need(option_env!("RUST_GIN_LLVM_OBJDUMP"), "llvm-objdump"))
            .arg("-d")
            .arg(format!("--mcpu={arch}"))
            .arg(&co));
        assert!(listing.contains("<rust_gin_mlx5_ring>:") || listing.contains("flat_store_dwordx2"),
            "{arch}: the linked code object lacks the library's doorbell code");
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
