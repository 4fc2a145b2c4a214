//! RCCL's generic GIN device code over rust-gin, for the host build
//! (device/src/host_only/rccl_caller.cpp): it includes patch 0004's own
//! nccl_device/gin/rust/*.h, taken out of the patch here so that the tests
//! run the headers RCCL will compile, not a copy that can drift.

use crate::util::{fail, manifest_dir, out_dir};
use std::path::Path;

const PATCH: &str = "patches/0004-gin-device-dispatch-for-the-rust-gin-backend-type-8.patch";
const HEADERS: [&str; 2] = [
    "projects/rccl/src/include/nccl_device/gin/rust/gin_rust.h",
    "projects/rccl/src/include/nccl_device/gin/rust/gin_rust_device_abi.h",
];
const STUBS: &str = "tests/fixtures/rccl_stubs/nccl_device/gin/gin_device_common.h";

/// The content of a file the patch creates: its one hunk's added lines.
fn new_file(patch: &str, path: &str) -> String {
    let start = format!("+++ b/{path}\n");
    let at = patch.find(&start).unwrap_or_else(|| fail(&format!("{PATCH} creates no {path}")));
    let mut out = String::new();
    for line in patch[at + start.len()..].lines() {
        if line.starts_with("diff --git ") || line == "-- " {
            break;
        }
        if line.starts_with("@@") {
            continue;
        }
        match line.strip_prefix('+') {
            Some(rest) => {
                out.push_str(rest);
                out.push('\n');
            }
            None => fail(&format!("{PATCH}: {path} is not a new file (line {line:?})")),
        }
    }
    out
}

pub fn build() {
    let root = manifest_dir();
    println!("cargo:rerun-if-changed={PATCH}");
    println!("cargo:rerun-if-changed={STUBS}");
    let patch = std::fs::read_to_string(root.join(PATCH)).unwrap_or_else(|e| fail(&format!("read {PATCH}: {e}")));
    let inc = out_dir().join("rccl_caller_include");
    let gin = inc.join("nccl_device/gin");
    std::fs::create_dir_all(gin.join("rust")).unwrap_or_else(|e| fail(&format!("{}: {e}", gin.display())));
    for h in HEADERS {
        let name = Path::new(h).file_name().unwrap();
        std::fs::write(gin.join("rust").join(name), new_file(&patch, h))
            .unwrap_or_else(|e| fail(&format!("write {h}: {e}")));
    }
    std::fs::copy(root.join(STUBS), gin.join("gin_device_common.h")).unwrap_or_else(|e| fail(&format!("{STUBS}: {e}")));
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .include(&inc)
        .include(root.join("device/include"))
        .flag("-fno-exceptions")
        .flag("-fno-rtti")
        .flag_if_supported("-Wall")
        .flag_if_supported("-Wextra")
        .flag_if_supported("-Wno-unused-parameter")
        .opt_level(2)
        .file(root.join("device/src/host_only/rccl_caller.cpp"))
        .compile("rust_gin_rccl_caller");
}
