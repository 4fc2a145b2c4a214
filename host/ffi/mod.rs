//! C ABI mirrors of what RCCL passes to a GIN backend and an RMA plugin, at
//! the pinned RCCL revision (docs/rccl-abi.md lists the sources). Every struct
//! has size and offset assertions (tests/abi_mirror.rs checks them against
//! the facts of RCCL's headers).

pub mod boundary;
pub mod gin;
pub mod nccl;
pub mod rma;
