//! What a NIC counted: doorbells, WQEBBs read, CQEs, operations, packets.
//! The emulated NIC counts all of it (the figures of the emulated performance
//! numbers); hardware providers do not report counters yet.

use std::sync::atomic::{AtomicU64, Ordering};

/// One live counter on cache lines of its own. The ringing threads bump the
/// doorbell counters while the NIC's thread bumps the rest: sharing lines,
/// every doorbell and every WQE took a line from the other core (128 bytes:
/// x86 fetches lines in adjacent pairs).
#[derive(Default, Debug)]
#[repr(align(128))]
pub struct Counter(AtomicU64);

impl std::ops::Deref for Counter {
    type Target = AtomicU64;
    fn deref(&self) -> &AtomicU64 {
        &self.0
    }
}

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// Live counters of one emulated NIC.
        #[derive(Default, Debug)]
        pub struct Counters { $($(#[$doc])* pub $name: Counter,)* }

        /// A snapshot of [`Counters`].
        #[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
        pub struct CounterSnapshot { $($(#[$doc])* pub $name: u64,)* }

        impl Counters {
            pub fn snapshot(&self) -> CounterSnapshot {
                CounterSnapshot { $($name: self.$name.load(Ordering::Relaxed),)* }
            }
        }

        impl CounterSnapshot {
            /// Field-wise difference `self - earlier`.
            pub fn since(&self, earlier: &CounterSnapshot) -> CounterSnapshot {
                CounterSnapshot { $($name: self.$name.wrapping_sub(earlier.$name),)* }
            }
            /// (name, value) pairs, for reports.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }
        }
    };
}

counters! {
    /// 64-byte WQE blocks the NIC read from send queues (DMA reads).
    wqebbs_read,
    /// 8-byte doorbell writes that reached the NIC (MMIO).
    doorbells,
    /// Doorbells whose producer index disagreed with the doorbell record.
    doorbell_dbr_mismatches,
    /// Doorbell writes to a UAR page that does not belong to the named QP.
    doorbells_misdirected,
    /// Doorbell-record writes by the device (host memory the NIC reads).
    dbr_writes,
    /// CQEs written, of which errors (flushes included).
    cqes_written,
    error_cqes,
    /// Payload bytes the NIC moved (read from the source plus written to the target).
    payload_bytes,
    /// Operations executed as requester.
    writes,
    reads,
    atomics,
    nops,
    /// DUMP WQEs (flushes after READs) executed.
    dumps,
    /// READ-data writes held back by the posted-write model
    /// (`NicConfig::read_data_delay`), and of those, landed by a later local
    /// read (a DUMP, or the gather of a non-inline WRITE such as the bnxt_re
    /// and ionic flush WRITE).
    read_writes_delayed,
    read_writes_landed_by_dump,
    /// Packets sent on the wire (requests and responses).
    packets_sent,
    /// CQE writes dropped because the CQ was full (a consumer bug).
    cq_overruns,
    /// Packets for an unknown QP or from an unexpected peer.
    packets_dropped,
}
