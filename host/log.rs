//! Logging through RCCL's logger. Messages go to the ncclDebugLogger_t that
//! init() received, so NCCL_DEBUG and NCCL_DEBUG_SUBSYS filter them as they
//! filter RCCL's own; without a logger (tests, tools) warnings go to stderr.
//! `tracing` events inside the crate reach the same logger through
//! [`RcclLayer`].

use crate::ffi::nccl::{level, subsys, NcclLogger};
use std::ffi::CString;
use std::sync::RwLock;

static LOGGER: RwLock<NcclLogger> = RwLock::new(None);

/// Remembers RCCL's logger (the most recent init wins; all share it).
pub fn set_logger(l: NcclLogger) {
    if l.is_some() {
        *LOGGER.write().unwrap_or_else(|e| e.into_inner()) = l;
        install_tracing_layer();
    }
}

pub fn log(lvl: i32, flags: u64, file: &str, line: u32, msg: &str) {
    let logger = *LOGGER.read().unwrap_or_else(|e| e.into_inner());
    match logger {
        Some(f) => {
            let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
            let file = CString::new(file).unwrap_or_default();
            // SAFETY: RCCL's logger is a printf-style C function; "%s" with one
            // NUL-terminated string is a valid call.
            unsafe { f(lvl, flags, file.as_ptr(), line as i32, c"%s".as_ptr(), c.as_ptr()) };
        }
        None if lvl <= level::WARN => eprintln!("rust-gin WARN {msg}"),
        None => {}
    }
}

/// A WARN line through RCCL's logger: `warn!("connect: rank {r} ...")`.
#[macro_export]
macro_rules! warn_line {
    ($($t:tt)*) => { $crate::log::log($crate::ffi::nccl::level::WARN, $crate::ffi::nccl::subsys::NET, file!(), line!(), &format!("rust-gin: {}", format!($($t)*))) };
}

/// An INFO line for a subsystem: `info_line!(INIT, "provider {p}")`.
#[macro_export]
macro_rules! info_line {
    ($sub:ident, $($t:tt)*) => { $crate::log::log($crate::ffi::nccl::level::INFO, $crate::ffi::nccl::subsys::$sub, file!(), line!(), &format!("rust-gin: {}", format!($($t)*))) };
}

/// Forwards `tracing` events to RCCL's logger: errors and warnings as WARN,
/// info as INFO, the rest as TRACE.
pub struct RcclLayer;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for RcclLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: tracing_subscriber::layer::Context<'_, S>) {
        struct V(String);
        impl tracing::field::Visit for V {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0.insert_str(0, &format!("{value:?} "));
                } else {
                    self.0.push_str(&format!("{}={value:?} ", field.name()));
                }
            }
        }
        let mut v = V(String::new());
        event.record(&mut v);
        let meta = event.metadata();
        let lvl = match *meta.level() {
            tracing::Level::ERROR | tracing::Level::WARN => level::WARN,
            tracing::Level::INFO => level::INFO,
            _ => level::TRACE,
        };
        log(
            lvl,
            subsys::NET,
            meta.file().unwrap_or("rust"),
            meta.line().unwrap_or(0),
            &format!("rust-gin: {}", v.0.trim_end()),
        );
    }
}

fn install_tracing_layer() {
    use tracing_subscriber::layer::SubscriberExt;
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Only if the host program has no subscriber of its own.
        let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry().with(RcclLayer));
    });
}
