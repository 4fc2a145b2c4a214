//! The hardware benchmark builds the way RCCL needs (issue 11, part 5):
//! scripts/build-hw-bench.sh passes -DENABLE_RUST_GIN and the installed
//! device archive to the compiler, and docs/benchmarks.md's command has both.
//! No GPU compiler runs here: a stand-in `hipcc` records its arguments.
//! The expert-parallel benchmark (benches/hw/gin_ep_hw.hip, issue 28) builds
//! the same way, and its routing, compiled for the host with the system C++
//! compiler, routes exactly as gin-perf's does (the layouts both compute
//! must agree for the hardware figures to be the emulated ones' twins).

#[allow(dead_code)]
#[path = "../host/bin/gin_perf/perf/ep/routing.rs"]
mod routing;

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
    run_which(rccl_home, gfx, dir, None)
}

fn run_which(rccl_home: &Path, gfx: &str, dir: &Path, which: Option<&str>) -> (bool, Vec<String>, String) {
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
        .args(which)
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

#[test]
fn the_ep_benchmark_builds_the_same_way() {
    let dir = scratch("ep");
    let home = dir.join("rccl");
    let archive = home.join("lib/rust-gin/gfx942/librccl_rust_gin_device_gfx942.a");
    std::fs::create_dir_all(archive.parent().unwrap()).unwrap();
    std::fs::write(&archive, b"!<arch>\n").unwrap();
    let (ok, args, err) = run_which(&home, "gfx942", &dir, Some("ep"));
    assert!(ok, "the script failed: {err}");
    for want in ["-DENABLE_RUST_GIN", "-fgpu-rdc", "--offload-arch=gfx942", "-lrccl"] {
        assert!(args.iter().any(|a| a == want), "{want} missing from {args:?}");
    }
    assert!(args.iter().any(|a| Path::new(a) == archive), "the device archive is not linked: {args:?}");
    assert!(args.iter().any(|a| a.ends_with("benches/hw/gin_ep_hw.hip")), "{args:?}");
    let (ok, _, err) = run_which(&home, "gfx942", &dir, Some("moe"));
    assert!(!ok && err.contains("perf or ep"), "an unknown benchmark name was accepted: {err}");
    // The kernels go through RCCL's device API, not rust-gin's C entry points.
    let src = std::fs::read_to_string(root().join("benches/hw/gin_ep_hw.hip")).unwrap();
    assert!(src.contains("ncclGin gin{comm, 0}") && !src.contains("rust_gin_put"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_ep_benchmark_routes_as_gin_perf_does() {
    let src = std::fs::read_to_string(root().join("benches/hw/gin_ep_hw.hip")).unwrap();
    let start = src.find("// ---- routing").expect("routing section");
    let end = src.find("// ---- kernels").expect("kernels section");
    let dir = scratch("route");
    let prog = format!(
        "#include <vector>\n#include <algorithm>\n#include <cstdint>\n#include <cstdio>\n{}\n\
         int main() {{\n  const int cases[][5] = {{{{16, 128, 0, 28, 8}}, {{16, 128, 1, 28, 8}}, {{8, 12, 0, 7, 8}}, {{64, 3, 1, 5, 4}}}};\n\
           for (auto& c : cases) {{\n    Plan p = route(c[0], c[1], 256, c[4], c[2], c[3]);\n    unsigned long h = 1469598103934665603ul;\n\
             for (auto& row : p.sends) for (auto& v : row) {{ h = (h ^ v.size()) * 1099511628211ul; for (auto t : v) h = (h ^ t) * 1099511628211ul; }}\n\
             printf(\"%zu %zu %lu\\n\", p.recv_slots, p.comb_slots, h);\n  }}\n}}\n",
        &src[start..end]
    );
    std::fs::write(dir.join("route.cc"), prog).unwrap();
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = Command::new(&cxx).args(["-std=c++17", "-O1", "-o"]).arg(dir.join("route")).arg(dir.join("route.cc")).output();
    let out = match out {
        Ok(o) => o,
        Err(e) => panic!("no C++ compiler ({cxx}: {e}); set CXX"),
    };
    assert!(out.status.success(), "{cxx} failed: {}", String::from_utf8_lossy(&out.stderr));
    let got = Command::new(dir.join("route")).output().unwrap();
    let got = String::from_utf8_lossy(&got.stdout).to_string();
    let mut want = String::new();
    for (ranks, tokens, hot, seed, topk) in [(16, 128, false, 28, 8), (16, 128, true, 28, 8), (8, 12, false, 7, 8), (64, 3, true, 5, 4)] {
        let skew = if hot { routing::Skew::Hot } else { routing::Skew::Uniform };
        let p = routing::Plan::route(ranks, tokens, 256, topk, skew, seed).unwrap();
        let mut h: u64 = 1469598103934665603;
        for v in p.sends.iter().flatten() {
            h = (h ^ v.len() as u64).wrapping_mul(1099511628211);
            for &t in v {
                h = (h ^ t as u64).wrapping_mul(1099511628211);
            }
        }
        want += &format!("{} {} {h}\n", p.recv_slots, p.comb_slots);
    }
    assert_eq!(got, want, "gin_ep_hw.hip's routing differs from gin-perf's");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn both_benchmarks_compile_for_the_host_against_the_device_api_surface() {
    // No HIP compiler here: the host C++ compiler checks the sources against
    // stand-ins of HIP, RCCL and ncclGin's documented surface
    // (tests/fixtures/hw_bench_stubs/), kernels compiled as host functions.
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    for bench in ["gin_perf_hw", "gin_ep_hw"] {
        let out = Command::new(&cxx)
            .args(["-x", "c++", "-std=c++17", "-fsyntax-only", "-Wall", "-Werror", "-Wno-unused-variable", "-I"])
            .arg(root().join("tests/fixtures/hw_bench_stubs"))
            .arg(root().join(format!("benches/hw/{bench}.hip")))
            .output()
            .unwrap_or_else(|e| panic!("no C++ compiler ({cxx}: {e}); set CXX"));
        assert!(out.status.success(), "{bench}.hip does not compile against the stand-ins:\n{}", String::from_utf8_lossy(&out.stderr));
    }
}
