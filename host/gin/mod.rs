//! The GIN backend RCCL drives: its v14 vtable ([`vtable`]) over plugin
//! instances, listening and collective comms ([`comm`]), device contexts
//! ([`context`]) and symmetric windows ([`window`]). Listen handles are
//! [`handle`]; the opaque tokens RCCL holds are [`registry`].

pub mod comm;
pub mod context;
pub mod handle;
pub mod registry;
pub mod vtable;
pub mod window;
