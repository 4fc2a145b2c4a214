//! What every layer says about a NIC, below both the emulated NIC and the
//! providers: its family, the access rights of a registration, what it holds
//! and what it counts, and the firmware and ABI gates both apply. It depends
//! on nothing in the crate but the ABI constants, the wire formats and the
//! error type, so the emulator (host/emu/), which models a NIC, and the
//! providers (host/provider/), which drive one, share it without depending on
//! each other's side.
mod access;
pub mod completion;
pub mod counters;
pub mod fault;
pub mod gates;
pub mod quirks;

pub use access::Access;
pub use counters::{CounterSnapshot, Counters};
pub use fault::{PlantedFault, QpSkew};

use crate::abi::{RUST_GIN_FAMILY_BNXT, RUST_GIN_FAMILY_IONIC, RUST_GIN_FAMILY_MLX5};

/// The NIC family of a queue (abi/gin.h RUST_GIN_FAMILY_*): which WQE,
/// doorbell and CQE formats the device code uses for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NicFamily {
    Mlx5,
    Bnxt,
    Ionic,
}

impl NicFamily {
    /// The value of `rust_gin_context.family`.
    pub fn abi(self) -> u32 {
        match self {
            NicFamily::Mlx5 => RUST_GIN_FAMILY_MLX5,
            NicFamily::Bnxt => RUST_GIN_FAMILY_BNXT,
            NicFamily::Ionic => RUST_GIN_FAMILY_IONIC,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            NicFamily::Mlx5 => "mlx5",
            NicFamily::Bnxt => "bnxt_re",
            NicFamily::Ionic => "ionic",
        }
    }
    /// Whether the GPU build of the device library serves this family
    /// (build.rs: RUST_GIN_NIC_FAMILIES; the host build serves all).
    pub fn in_gpu_build(self) -> bool {
        let mask: u32 = env!("RUST_GIN_GPU_FAMILIES").parse().unwrap_or(1);
        mask & (1 << self.abi()) != 0
    }
}

/// What a NIC holds, counted by the provider (gin-scale): objects, and the
/// bytes of the rings it was given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NicResources {
    pub qps: usize,
    pub cqs: usize,
    pub uar_pages: usize,
    pub mrs: usize,
    pub send_queue_bytes: usize,
    pub completion_queue_bytes: usize,
}
