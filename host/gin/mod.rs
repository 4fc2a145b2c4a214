//! The GIN backend RCCL drives: its v14 vtable ([`vtable`]) over device
//! contexts ([`context`]) and symmetric windows ([`window`]). Instances,
//! comms, listen handles, the queue-pair mesh and the tokens RCCL holds are
//! shared with the RMA plugin and live in [`crate::session`].

pub mod context;
pub mod vtable;
pub mod window;

/// The comms under their former path (gin-perf names them so).
pub use crate::session::comm;
