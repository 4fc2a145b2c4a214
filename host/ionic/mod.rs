//! The ionic provider family (AMD Pensando Pollara): wire formats. Queue
//! memory, the emulated NIC and the hardware provider build on these.

pub mod wire;
