//! Build script: the HIP device library per GPU architecture, the same device
//! sources for x86-64 (linked into this crate) with RCCL's generic GIN code
//! restated over them (build/rccl_caller.rs), and bindgen bindings for the
//! GPU-context layouts and rdma-core's mlx5dv.h. Every knob is in
//! docs/building.md.

#[path = "build/bindings.rs"]
mod bindings;
#[path = "build/device.rs"]
mod device;
#[path = "build/device_libs.rs"]
mod device_libs;
#[path = "build/host_device.rs"]
mod host_device;
#[path = "build/rccl_caller.rs"]
mod rccl_caller;
#[path = "build/toolchain.rs"]
mod toolchain;
#[path = "build/util.rs"]
mod util;

fn main() {
    println!("cargo:rustc-check-cfg=cfg(rust_gin_device_built)");
    for dir in ["device/include", "device/src", "build"] {
        println!("cargo:rerun-if-changed={dir}");
    }
    println!("cargo:rerun-if-changed=build.rs");

    host_device::build();
    rccl_caller::build();
    bindings::generate();
    device::build();
}
