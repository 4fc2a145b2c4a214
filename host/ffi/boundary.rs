//! The C boundary: every exported function runs its body here, so that an
//! error becomes its ncclResult_t plus a WARN line naming the call, and a
//! panic never unwinds into C.

use crate::error::{Error, Result};
use crate::ffi::nccl::{NcclResult, NCCL_INTERNAL_ERROR, NCCL_SUCCESS};

pub fn guard(call: &'static str, f: impl FnOnce() -> Result<()>) -> NcclResult {
    let span = tracing::debug_span!("rust_gin", call);
    let _entered = span.enter();
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => NCCL_SUCCESS,
        Ok(Err(e)) => {
            crate::warn_line!("{call}: {e}");
            e.code()
        }
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            crate::warn_line!("{call}: internal error (a bug in rust-gin): {msg}");
            NCCL_INTERNAL_ERROR
        }
    }
}

/// A non-null out-pointer, or an error naming the argument. Crate-private:
/// only the exported C functions call it, with the out-parameters RCCL
/// passes them.
pub(crate) fn out<'a, T>(p: *mut T, name: &str) -> Result<&'a mut T> {
    // SAFETY: callers pass RCCL's out-parameters, which point to valid,
    // writable storage (or are NULL, which is refused).
    unsafe { p.as_mut() }.ok_or_else(|| Error::InvalidArgument(format!("{name} is NULL")))
}
