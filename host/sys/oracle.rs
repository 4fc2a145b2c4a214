//! Facts about rdma-core's mlx5 wire formats, taken from infiniband/mlx5dv.h
//! by a C compiler (build/mlx5dv_oracle.c): sizes, field offsets, constants.

use std::ffi::{c_char, CStr};

#[repr(C)]
struct Fact {
    name: *const c_char,
    value: u64,
}

extern "C" {
    static rust_gin_mlx5dv_facts: [Fact; 0];
    static rust_gin_mlx5dv_facts_len: usize;
}

/// Every (name, value) pair of the oracle table, for example
/// `("offsetof(mlx5_cqe64.wqe_counter)", 60)` or `("MLX5_OPCODE_RDMA_WRITE", 8)`.
pub fn mlx5dv_facts() -> Vec<(String, u64)> {
    // SAFETY: the table and its length are immutable statics defined in
    // build/mlx5dv_oracle.c; each name is a NUL-terminated string literal.
    unsafe {
        let base = rust_gin_mlx5dv_facts.as_ptr();
        (0..rust_gin_mlx5dv_facts_len)
            .map(|i| {
                let f = &*base.add(i);
                (CStr::from_ptr(f.name).to_string_lossy().into_owned(), f.value)
            })
            .collect()
    }
}

/// The value of one oracle fact; panics if the table lacks it (a test bug).
pub fn mlx5dv_fact(name: &str) -> u64 {
    mlx5dv_facts()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("mlx5dv oracle has no fact named {name}"))
}
