//! Bindings to rdma-core beyond what rdma-sys offers.

pub mod mlx5dv;
pub mod oracle;
