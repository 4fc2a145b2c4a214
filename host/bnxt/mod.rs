//! The bnxt_re provider family (Broadcom Thor2): wire formats. Queue memory,
//! the emulated NIC and the hardware provider build on these.

pub mod wire;
