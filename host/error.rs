//! Errors of the host crate, and their ncclResult_t at the C boundary.

use crate::ffi::nccl::{self, NcclResult};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A bad argument (null pointer, out-of-range value, corrupted handle).
    InvalidArgument(String),
    /// A call out of order, after finalize, or for something not supported.
    InvalidUsage(String),
    /// The operating system, the verbs library or HIP refused.
    System(String),
    /// A peer misbehaved or the network failed.
    Remote(String),
    /// A bounded wait expired.
    Timeout(String),
    /// A bug of ours (a caught panic included).
    Internal(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn code(&self) -> NcclResult {
        match self {
            Error::InvalidArgument(_) => nccl::NCCL_INVALID_ARGUMENT,
            Error::InvalidUsage(_) => nccl::NCCL_INVALID_USAGE,
            Error::System(_) => nccl::NCCL_SYSTEM_ERROR,
            Error::Remote(_) => nccl::NCCL_REMOTE_ERROR,
            Error::Timeout(_) => nccl::NCCL_TIMEOUT,
            Error::Internal(_) => nccl::NCCL_INTERNAL_ERROR,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Error::InvalidArgument(m)
            | Error::InvalidUsage(m)
            | Error::System(m)
            | Error::Remote(m)
            | Error::Timeout(m)
            | Error::Internal(m) => m,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self {
            Error::InvalidArgument(_) => "invalid argument",
            Error::InvalidUsage(_) => "invalid usage",
            Error::System(_) => "system error",
            Error::Remote(_) => "remote error",
            Error::Timeout(_) => "timeout",
            Error::Internal(_) => "internal error",
        };
        write!(f, "{kind}: {}", self.message())
    }
}

impl std::error::Error for Error {}

/// Shorthand constructors: `arg!("rank {rank} out of range")`.
#[macro_export]
macro_rules! bad_arg { ($($t:tt)*) => { $crate::error::Error::InvalidArgument(format!($($t)*)) } }
#[macro_export]
macro_rules! bad_usage { ($($t:tt)*) => { $crate::error::Error::InvalidUsage(format!($($t)*)) } }
#[macro_export]
macro_rules! sys_err { ($($t:tt)*) => { $crate::error::Error::System(format!($($t)*)) } }

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::System(e.to_string())
    }
}
