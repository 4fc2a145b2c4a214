//! bindgen bindings of rdma-core's infiniband/mlx5dv.h (build/bindings.rs),
//! including C wrappers for its static inline setters. ibv_* types come from
//! rdma-sys.
#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case, dead_code)]
#![allow(clippy::all, unused_imports, improper_ctypes)]

include!(concat!(env!("OUT_DIR"), "/mlx5dv.rs"));
