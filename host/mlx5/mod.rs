//! The mlx5 provider family: wire formats shared by the emulated NIC and the
//! hardware provider.

pub mod queue;
pub mod sq;
pub mod wire;
