//! gin-smoke, the GPU smoke test without RCCL (smoke/gin_smoke.hip; issue 26
//! item 5; docs/bring-up.md stage 2), built by scripts/build-gin-smoke.sh as
//! a person builds it:
//!
//! - the x86-64 build (`--host`) links this crate's staticlib and RUNS here on
//!   the emulated NIC: the program's own host code drives the GIN v14 vtable,
//!   and its kernel body, compiled as a host function, calls the device
//!   library's x86-64 build. The bytes it checks and the stage lines it prints
//!   are the ones a GPU run prints.
//! - the GPU build is compiled and linked for every GPU target of this build
//!   with the HIP compiler, against the device library's -fgpu-rdc archive;
//!   the linked code object must hold the kernel with the library's doorbell
//!   and wall_clock64 inlined, and the binary must start and say that there
//!   is no GPU. Running it on a GPU is NOT checked here (docs/bring-up.md).

#[path = "support/isa.rs"]
#[allow(dead_code)]
mod isa;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh folder under cargo's target tmp dir: the binaries built here are
/// large (the debug staticlib), and one place per tag keeps runs from piling up.
fn scratch(tag: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("gin-smoke-{tag}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The staticlib cargo built with this test (target/<profile>/deps/, next to
/// the test binary; `cargo build` copies it one level up).
fn host_lib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps.join("librccl_rust_gin.a"), deps.parent().unwrap().join("librccl_rust_gin.a")]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("librccl_rust_gin.a not found next to {}", exe.display()))
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn build_script() -> Command {
    let mut c = Command::new(root().join("scripts/build-gin-smoke.sh"));
    c.env("RUST_GIN_HOST_LIB", host_lib());
    c
}

/// The x86-64 build, once per test process: as the library is linked into
/// RCCL, or (`hooks`) with the library's stage hooks compiled in.
fn host_smoke_of(hooks: bool) -> &'static Path {
    static PLAIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    static HOOKS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    (if hooks { &HOOKS } else { &PLAIN }).get_or_init(|| {
        let exe = scratch(if hooks { "host-hooks" } else { "host" }).join("gin-smoke-host");
        let mut c = build_script();
        c.arg("--host");
        if hooks {
            c.arg("--stage-hooks");
        }
        let out = c.arg(&exe).output().expect("run scripts/build-gin-smoke.sh");
        assert!(out.status.success(), "scripts/build-gin-smoke.sh --host (hooks: {hooks}) failed:\n{}", text(&out));
        exe
    })
}

fn host_smoke() -> &'static Path {
    host_smoke_of(false)
}

fn run_host(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    run_host_of(false, args, env)
}

fn run_host_of(hooks: bool, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut c = Command::new(host_smoke_of(hooks));
    c.args(args).env("RCCL_RUST_GIN_PROVIDER", "emu").env("RCCL_RUST_GIN_SOCKET_IFNAME", "lo");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let t = text(&out);
    println!("{t}");
    (out.status.code().unwrap_or(-1), t)
}

/// The microseconds printed after `label` on `line`.
fn micros(line: &str, label: &str) -> f64 {
    let at = line.find(label).unwrap_or_else(|| panic!("no {label:?} in {line}")) + label.len();
    line[at..].trim_start().split(' ').next().unwrap().parse().unwrap_or_else(|e| panic!("{label} in {line}: {e}"))
}

/// The line of `out` that starts with `prefix`, and its cold and warm halves.
fn cold_warm<'a>(out: &'a str, prefix: &str) -> (&'a str, &'a str, &'a str) {
    let line = out.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no line {prefix:?}:\n{out}"));
    let (cold, warm) = line.split_once("; warm:").unwrap_or_else(|| panic!("no warm figures: {line}"));
    (line, cold, warm)
}

#[test]
fn the_host_build_puts_signals_and_checks_every_byte_on_the_emulated_nic() {
    let (code, out) = run_host(&["--bytes", "8192", "--rounds", "4"], &[]);
    assert_eq!(code, 0, "gin-smoke failed:\n{out}");
    assert!(out.contains("x86-64 build on the EMULATED NIC") && out.contains("NOT a GPU or NIC check"), "{out}");
    for from in 0..2 {
        for to in 0..2 {
            let (put, cold, warm) = cold_warm(&out, &format!("gin-smoke: rank {from} -> {to} put+signal 8192 B x4: cold:"));
            assert!(put.contains("signals seen") && put.ends_with("bytes ok"), "{put}");
            for half in [cold, warm] {
                assert!(micros(half, "CQE") >= micros(half, "posted"), "the CQE came before the post returned: {put}");
            }
            let (st, cold, warm) =
                cold_warm(&out, &format!("gin-smoke: rank {from} -> {to} stages (RDMA WRITE 8192 B x4): cold:"));
            for half in [cold, warm] {
                for label in ["reserve+WQE written", "doorbell", "CQE"] {
                    assert!(micros(half, label) >= 0.0, "{label} not measured: {st}");
                }
            }
            assert!(st.ends_with("bytes ok"), "{st}");
        }
    }
    assert!(out.contains("gin-smoke: PASS: 2 ranks (one GPU, NIC loopback), 16 puts with signals, 16 staged writes"), "{out}");
    assert!(out.contains("stage hooks off (the library as RCCL links it)") && !out.contains("inside rust_gin_put (stage hooks)"), "{out}");
}

#[test]
fn stage_hooks_split_the_put_into_reserve_wqe_doorbell_and_cqe() {
    let (code, out) = run_host_of(true, &["--rounds", "3"], &[]);
    assert_eq!(code, 0, "gin-smoke with stage hooks failed:\n{out}");
    assert!(out.contains("stage hooks ON") && out.contains("not the archive RCCL links"), "{out}");
    for from in 0..2 {
        for to in 0..2 {
            let (line, cold, warm) =
                cold_warm(&out, &format!("gin-smoke: rank {from} -> {to} inside rust_gin_put (stage hooks)"));
            for half in [cold, warm] {
                let t: Vec<f64> = ["reserve +", "WQE written +", "doorbell +", "CQE +"].iter().map(|l| micros(half, l)).collect();
                assert!(t[0] >= 0.0, "reserve not seen: {line}");
                assert!(t.windows(2).all(|w| w[0] <= w[1]), "the stages are out of order: {line}");
            }
            assert!(!line.contains("FAIL"), "{line}");
        }
    }
    assert!(out.contains("PASS: 2 ranks"), "{out}");
}

#[test]
fn a_wrong_byte_fails_the_run() {
    let (code, out) = run_host(&["--plant-fault", "--rounds", "1"], &[]);
    assert_eq!(code, 1, "a planted wrong byte passed:\n{out}");
    let bad = out.lines().find(|l| l.starts_with("gin-smoke: rank 0 -> 0 put+signal")).unwrap();
    assert!(bad.contains("bytes DIFFER") && bad.contains("1 bytes differ, first at 2048"), "{bad}");
    assert!(out.contains("rank 0 -> 1 put+signal 4096 B x1: cold:") && !out.contains("warm:") && out.contains("gin-smoke: FAIL: 2 check(s) failed"), "{out}");
}

#[test]
fn three_ranks_and_other_families_run_without_the_staged_split() {
    // bnxt_re queues are not mlx5 RC: the staged write is skipped, and says so.
    let (code, out) = run_host(&["--gpus", "0,0,0"], &[("RCCL_RUST_GIN_EMU_FAMILY", "bnxt_re")]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("family bnxt_re, signals write"), "{out}");
    assert_eq!(out.lines().filter(|l| l.contains("put+signal") && l.ends_with("bytes ok")).count(), 9, "{out}");
    assert_eq!(out.lines().filter(|l| l.contains("stages: NOT MEASURED (bnxt_re RC")).count(), 9, "{out}");
    assert!(out.contains("PASS: 3 ranks (one GPU, NIC loopback), 27 puts with signals, 0 staged writes"), "{out}");
}

#[test]
fn the_host_build_refuses_a_real_provider() {
    let out = Command::new(host_smoke()).env_remove("RCCL_RUST_GIN_PROVIDER").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("set RCCL_RUST_GIN_PROVIDER=emu"), "{}", text(&out));
}

fn need(var: Option<&'static str>, what: &str) -> &'static str {
    var.filter(|v| !v.is_empty()).unwrap_or_else(|| {
        panic!("DEVICE ARTEFACTS NOT BUILT: {what} is unknown (RUST_GIN_SKIP_DEVICE set?); see docs/building.md")
    })
}

#[test]
fn the_gpu_build_compiles_and_links_the_device_archive_for_every_target() {
    let clang = need(option_env!("RUST_GIN_HIP_CLANG"), "the HIP compiler");
    let libs = need(option_env!("RUST_GIN_DEVICE_LIB_DIR"), "ROCm device libraries (apt-get install rocm-device-libs)");
    let device_dir = need(option_env!("RUST_GIN_DEVICE_DIR"), "RUST_GIN_DEVICE_DIR");
    let objdump = PathBuf::from(need(option_env!("RUST_GIN_LLVM_OBJDUMP"), "llvm-objdump"));
    let hip_include = ["/opt/rocm/include", "/usr/include"]
        .into_iter()
        .find(|p| Path::new(p).join("hip/hip_runtime.h").exists())
        .expect("HIP headers (hip/hip_runtime.h) are needed: apt-get install libamdhip64-dev");
    let rocm = Path::new(hip_include).parent().unwrap();
    // Debian's HIP 5.2 headers and device libraries with clang 22: the
    // settings tests/device_link.rs uses (toolchain notes in docs/building.md).
    let old_libs = !Path::new(libs).join("oclc_abi_version_600.bc").exists();
    let mut flags = format!("--rocm-path={} --rocm-device-lib-path={libs}", rocm.display());
    let mut cflags = "-D__AMDGCN_WAVEFRONT_SIZE=64".to_string();
    if old_libs {
        flags += " -mcode-object-version=5";
        cflags += &format!(" -Xclang -mlink-builtin-bitcode -Xclang {libs}/hip.bc");
    }
    let dir = scratch("gpu");
    let targets = need(option_env!("RUST_GIN_GPU_TARGETS"), "RUST_GIN_GPU_TARGETS");
    let native_libs = format!("-L{}/lib -L/usr/lib/x86_64-linux-gnu -libverbs -lmlx5 -lamdhip64 -lgcc_s -lutil -lrt -lpthread -lm -ldl", rocm.display());
    // scripts/build-gin-smoke.sh with `args`, through clang 22 and these flags.
    let gpu_build = |args: &[&std::ffi::OsStr]| {
        build_script()
            .args(args)
            .env("HIPCC", clang)
            .env("HIP_FLAGS", &flags)
            .env("HIP_CFLAGS", &cflags)
            .env("RUST_GIN_NATIVE_LIBS", &native_libs)
            .output()
            .unwrap()
    };
    for arch in targets.split(',') {
        let exe = dir.join(format!("gin-smoke-{arch}"));
        let out = gpu_build(&[device_dir.as_ref(), arch.as_ref(), exe.as_os_str()]);
        assert!(out.status.success(), "{arch}: scripts/build-gin-smoke.sh failed:\n{}", text(&out));
        let args = text(&out);
        assert!(args.contains(&format!("librccl_rust_gin_device_{arch}.a")), "{arch}: the archive is not linked:\n{args}");

        // The kernel's code object, out of the program's fat binary.
        let fatbin = dir.join(format!("{arch}.fatbin"));
        let st = Command::new("objcopy").arg(format!("--dump-section=.hip_fatbin={}", fatbin.display())).arg(&exe).status();
        assert!(st.unwrap().success(), "{arch}: no .hip_fatbin in {}", exe.display());
        let co = dir.join(format!("{arch}.co"));
        let bundler = objdump.with_file_name(
            objdump.file_name().unwrap().to_string_lossy().replace("llvm-objdump", "clang-offload-bundler"),
        );
        let out = Command::new(&bundler)
            .args(["--unbundle", "--type=o"])
            .arg(format!("--targets=hipv4-amdgcn-amd-amdhsa--{arch}"))
            .arg(format!("--input={}", fatbin.display()))
            .arg(format!("--output={}", co.display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "{arch}: unbundle: {}", text(&out));
        let funcs = isa::disassemble(&objdump, &co, arch);
        let kernel = funcs.keys().find(|k| k.contains("gin_smoke_kernel")).unwrap_or_else(|| {
            panic!("{arch}: no gin_smoke_kernel in the code object: {:?}", funcs.keys().collect::<Vec<_>>())
        });
        let insns = isa::flatten(&funcs, kernel);
        assert!(insns.iter().any(|i| i.mnemonic == "s_memrealtime"), "{arch}: no wall_clock64 (s_memrealtime) in the kernel");
        let doorbells = insns
            .iter()
            .filter(|i| isa::store_kind(i) == Some(isa::StoreKind::Bits64) && isa::doorbell_form_error(arch, i).is_none())
            .count();
        assert!(doorbells > 0, "{arch}: the kernel holds no doorbell store of the library's form");

        if arch == targets.split(',').next().unwrap() {
            // The stage-hook build compiles the library from source instead.
            let hooked = dir.join(format!("gin-smoke-hooks-{arch}"));
            let out = gpu_build(&["--stage-hooks".as_ref(), arch.as_ref(), hooked.as_os_str()]);
            let t = text(&out);
            assert!(out.status.success(), "{arch}: --stage-hooks build failed:\n{t}");
            assert!(t.contains("-DRUST_GIN_STAGE_HOOKS") && !t.contains("librccl_rust_gin_device_"), "{arch}: {t}");
            let run = Command::new(&hooked).output().unwrap();
            assert_eq!(run.status.code(), Some(2), "{arch}: {}", text(&run));
        }

        // No GPU here: the program must start and say so, not crash.
        let out = Command::new(&exe).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{arch}: {}", text(&out));
        assert!(text(&out).contains("gin-smoke: no HIP device"), "{arch}: {}", text(&out));
        println!("{arch}: gin-smoke compiled and linked against {device_dir}/{arch}; NOT RUN on a GPU (none here)");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_the_device_archive_the_script_refuses() {
    let dir = scratch("missing");
    let out = build_script().arg(dir.join("rccl")).arg("gfx950").arg(dir.join("x")).env("HIPCC", "/bin/false").output().unwrap();
    assert!(!out.status.success());
    let t = text(&out);
    assert!(t.contains("librccl_rust_gin_device_gfx950.a") && t.contains("--rust-gin"), "{t}");
    let _ = std::fs::remove_dir_all(&dir);
}
