//! The emulated NIC: executes real mlx5 work-queue entries in host memory.

pub mod bus;
