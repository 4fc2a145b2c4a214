//! bindgen bindings:
//! - the GPU-visible context layouts (device/include/rust_gin/abi/), so host and
//!   device share one definition of every struct the host fills for kernels;
//! - rdma-core's mlx5dv.h (types, functions, and its static inline setters
//!   through generated C wrappers), for the mlx5 provider and as the oracle the
//!   wire-format tests compare against. ibv_* types come from rdma-sys.

use crate::util::{fail, manifest_dir, out_dir};

pub fn generate() {
    abi();
    device_functions();
    mlx5dv();
}

/// The device library's extern "C" functions, declared for Rust from the very
/// headers kernels (and RCCL's patch) use: the host build implements them.
fn device_functions() {
    let inc = manifest_dir().join("device/include");
    let bindings = bindgen::Builder::default()
        .header_contents(
            "rust_gin_device_all.h",
            "#include \"rust_gin/rust_gin_device.h\"\n#include \"rust_gin/mlx5/api.h\"\n#include \"rust_gin/queue/api.h\"\n#include \"rust_gin/abi/lockstep.h\"\n#include \"rust_gin/abi/rccl_caller.h\"\n",
        )
        .clang_arg(format!("-I{}", inc.display()))
        .clang_args(["-xc++", "-std=c++17"])
        .allowlist_function("rust_gin_.*")
        .blocklist_function("rust_gin_host_.*")
        .blocklist_type("rust_gin_.*")
        .raw_line("#[allow(unused_imports)] use crate::abi::*;")
        .generate()
        .unwrap_or_else(|e| fail(&format!("bindgen of the device ABI headers: {e}")));
    bindings
        .write_to_file(out_dir().join("device_functions.rs"))
        .unwrap_or_else(|e| fail(&format!("write device_functions.rs: {e}")));
}

fn abi() {
    let header = manifest_dir().join("device/include/rust_gin/abi/abi.h");
    let bindings = bindgen::Builder::default()
        .header(header.display().to_string())
        .clang_arg(format!("-I{}", manifest_dir().join("device/include").display()))
        .clang_arg("-xc")
        .clang_arg("-std=c11")
        .allowlist_type("rust_gin_.*")
        .allowlist_var("RUST_GIN_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .derive_default(true)
        .layout_tests(true)
        .generate()
        .unwrap_or_else(|e| fail(&format!("bindgen of {}: {e}", header.display())));
    bindings
        .write_to_file(out_dir().join("abi.rs"))
        .unwrap_or_else(|e| fail(&format!("write abi.rs: {e}")));
}

fn mlx5dv() {
    let out = out_dir();
    let wrappers = out.join("mlx5dv_static_wrappers.c");
    let bindings = bindgen::Builder::default()
        .header_contents("rust_gin_mlx5dv.h", "#include <infiniband/mlx5dv.h>\n")
        .allowlist_function("mlx5dv_.*")
        .allowlist_type("mlx5dv_.*")
        .allowlist_type("mlx5_.*")
        .allowlist_var("MLX5.*")
        .allowlist_var("mlx5.*")
        // ibv_* types come from rdma-sys, except ibv_tmh, which rdma-sys lacks
        // and mlx5_cqe64 embeds.
        .blocklist_type("ibv_[^t].*")
        .blocklist_type("ibv_t[^m].*")
        .blocklist_type("ibv_tm_.*")
        .blocklist_type("verbs_.*")
        .blocklist_type("ib_uverbs_.*")
        .blocklist_type("pthread_.*")
        .blocklist_type("__u?int[0-9]+_t")
        .blocklist_type("u?int[0-9]+_t")
        .blocklist_type("__be[0-9]+")
        .raw_line("#[allow(unused_imports)] use rdma_sys::*;")
        // rdma-sys renders this C enum as a module of constants.
        .raw_line("#[allow(non_camel_case_types)] pub type ibv_flow_attr_type = rdma_sys::ibv_flow_attr_type::Type;")
        .raw_line("#[allow(non_camel_case_types)] pub type __be16 = u16;")
        .raw_line("#[allow(non_camel_case_types)] pub type __be32 = u32;")
        .raw_line("#[allow(non_camel_case_types)] pub type __be64 = u64;")
        // Packed and 4-byte aligned at once: Rust cannot say both, so it stays
        // opaque; its field offsets are checked through the C oracle table.
        .opaque_type("mlx5_wqe_ctrl_seg")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(false)
        .wrap_static_fns(true)
        .wrap_static_fns_path(&wrappers)
        .generate()
        .unwrap_or_else(|e| {
            fail(&format!(
                "bindgen of infiniband/mlx5dv.h failed: {e}\nInstall rdma-core's headers: \
                 apt-get install libibverbs-dev rdma-core"
            ))
        });
    bindings
        .write_to_file(out.join("mlx5dv.rs"))
        .unwrap_or_else(|e| fail(&format!("write mlx5dv.rs: {e}")));

    let root = manifest_dir();
    cc::Build::new()
        .file(wrappers.with_extension("c"))
        .include(".")
        .include(&root)
        .flag("-include")
        .flag("infiniband/mlx5dv.h")
        .file(root.join("build/mlx5dv_oracle.c"))
        // The bnxt_re uapi facts (<rdma/bnxt_re-abi.h>, from linux-libc-dev).
        .file(root.join("build/bnxt_re_oracle.c"))
        .warnings(false)
        .compile("rust_gin_mlx5dv_shim");
    println!("cargo:rustc-link-lib=dylib=mlx5");
    println!("cargo:rustc-link-lib=dylib=ibverbs");
}
