//! Compiles the device library's sources for x86-64 and links them into the
//! crate, so tests, benchmarks and the emulated provider call exactly the code
//! a kernel runs. device/include/rust_gin/port/port.h maps the GPU builtins
//! (qualifiers, atomics, fences, doorbell and doorbell-record stores, clock)
//! to host equivalents.

use crate::util::manifest_dir;

pub fn build() {
    let root = manifest_dir();
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .include(root.join("device/include"))
        .flag("-x")
        .flag("c++")
        .flag("-fno-exceptions")
        .flag("-fno-rtti")
        .flag_if_supported("-Wall")
        .flag_if_supported("-Wextra")
        .opt_level(2)
        .file(root.join("device/src/rust_gin_device.hip"))
        .file(root.join("device/src/host_only/wire_layout.cpp"))
        .file(root.join("device/src/host_only/wire_layout_bnxt.cpp"))
        .file(root.join("device/src/host_only/wire_layout_ionic.cpp"))
        .file(root.join("device/src/host_only/lockstep.cpp"))
        .file(root.join("device/src/host_only/hazards.cpp"))
        .compile("rust_gin_device_host");
}
