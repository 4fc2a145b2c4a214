//! The hardware benchmark builds the way RCCL needs (issue 11, part 5):
//! scripts/build-hw-bench.sh passes -DENABLE_RUST_GIN and the installed
//! device archive to the compiler, and docs/benchmarks.md's command has both.
//! No GPU compiler runs here: a stand-in `hipcc` records its arguments.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rust-gin-hwbench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the script with a stand-in compiler; returns (success, its arguments, stderr).
fn run(rccl_home: &Path, gfx: &str, dir: &Path) -> (bool, Vec<String>, String) {
    let args_file = dir.join("args");
    let stub = dir.join("hipcc");
    std::fs::write(&stub, format!("#!/bin/sh\nprintf '%s\\n' \"$@\" > {}\n", args_file.display())).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = Command::new(root().join("scripts/build-hw-bench.sh"))
        .arg(rccl_home)
        .arg(gfx)
        .arg(dir.join("gin_perf_hw"))
        .env("HIPCC", &stub)
        .output()
        .unwrap();
    let args = std::fs::read_to_string(&args_file).unwrap_or_default().lines().map(str::to_string).collect();
    (out.status.success(), args, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn the_script_compiles_the_type_8_dispatch_and_links_the_device_archive() {
    let dir = scratch("ok");
    let home = dir.join("rccl");
    let archive = home.join("lib/rust-gin/gfx950/librccl_rust_gin_device_gfx950.a");
    std::fs::create_dir_all(archive.parent().unwrap()).unwrap();
    std::fs::write(&archive, b"!<arch>\n").unwrap();
    let (ok, args, err) = run(&home, "gfx950", &dir);
    assert!(ok, "the script failed: {err}");
    for want in ["-DENABLE_RUST_GIN", "-fgpu-rdc", "--offload-arch=gfx950", "-lrccl"] {
        assert!(args.iter().any(|a| a == want), "{want} missing from {args:?}");
    }
    assert!(args.iter().any(|a| Path::new(a) == archive), "the device archive is not linked: {args:?}");
    assert!(args.iter().any(|a| a.ends_with("benches/hw/gin_perf_hw.hip")));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_the_installed_archive_the_script_refuses_to_build() {
    let dir = scratch("missing");
    let (ok, args, err) = run(&dir.join("rccl"), "gfx942", &dir);
    assert!(!ok, "built without the device archive");
    assert!(args.is_empty(), "the compiler ran: {args:?}");
    assert!(err.contains("librccl_rust_gin_device_gfx942.a") && err.contains("--rust-gin"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_documented_command_has_both() {
    let doc = std::fs::read_to_string(root().join("docs/benchmarks.md")).unwrap();
    // The hipcc command of the build step, joined across its continuation lines.
    let start = doc.find("hipcc -O3").expect("docs/benchmarks.md shows the compiler command");
    let cmd: String = doc[start..].lines().take_while(|l| !l.trim_start().starts_with("```")).collect::<Vec<_>>().join(" ");
    assert!(cmd.contains("-DENABLE_RUST_GIN"), "the documented command lacks -DENABLE_RUST_GIN: {cmd}");
    assert!(cmd.contains("librccl_rust_gin_device_"), "the documented command lacks the device archive: {cmd}");
    assert!(cmd.contains("-fgpu-rdc"), "{cmd}");
    assert!(doc.contains("./scripts/build-hw-bench.sh"), "the page names the script");
}
