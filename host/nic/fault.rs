//! Firmware faults the emulated NIC can be told to have
//! (`RCCL_RUST_GIN_EMU_FAULT`): what a NIC in the field gets wrong silently,
//! planted so that the init self-test (host/selftest.rs) is seen catching
//! each one. Kept here, below the emulator and the configuration, because
//! both name them.

/// One planted firmware fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlantedFault {
    /// Every RDMA WRITE lands with its first byte flipped.
    CorruptWrite,
    /// A fetch-and-add or compare-and-swap runs as an 8-byte WRITE of its
    /// operand and returns 0: the ionic v1/v2 opcode overlap (issue 26).
    AtomicAsWrite,
    /// RDMA READ responses carry zeros.
    ReadZeros,
    /// Only the first CQE of a completion queue is ever written: a
    /// collapsed or compressed CQ the device code does not read
    /// (rocm-xio#127).
    CollapsedCq,
}

impl PlantedFault {
    pub const ALL: [PlantedFault; 4] =
        [PlantedFault::CorruptWrite, PlantedFault::AtomicAsWrite, PlantedFault::ReadZeros, PlantedFault::CollapsedCq];

    /// The knob's spelling.
    pub fn name(self) -> &'static str {
        match self {
            PlantedFault::CorruptWrite => "corrupt-write",
            PlantedFault::AtomicAsWrite => "atomic-as-write",
            PlantedFault::ReadZeros => "read-zeros",
            PlantedFault::CollapsedCq => "collapsed-cq",
        }
    }

    pub fn parse(s: &str) -> Option<PlantedFault> {
        Self::ALL.into_iter().find(|f| f.name() == s)
    }
}

/// A reordering NIC for ordering tests (`RCCL_RUST_GIN_EMU_QP_SKEW`): queue
/// pair q starts each batch `step × (q mod modulus)` after the doorbell that
/// found it idle, or `step × (modulus - 1 - q mod modulus)` reversed. Two
/// queues whose numbers differ by d land in different classes for any
/// modulus that does not divide d, each first in one direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QpSkew {
    pub modulus: u32,
    pub reverse: bool,
    pub step: std::time::Duration,
}

impl QpSkew {
    pub fn delay(&self, qpn: u32) -> std::time::Duration {
        let class = qpn % self.modulus;
        let k = if self.reverse { self.modulus - 1 - class } else { class };
        self.step * k
    }

    /// `mod<m>:<us>` or `revmod<m>:<us>`, m from 2 to 16, us from 1 to 10^7.
    pub fn parse(s: &str) -> Option<QpSkew> {
        let (class, us) = s.split_once(':')?;
        let (reverse, m) = match class.strip_prefix("rev") {
            Some(rest) => (true, rest),
            None => (false, class),
        };
        let modulus = m.strip_prefix("mod")?.parse::<u32>().ok().filter(|m| (2..=16).contains(m))?;
        let us = us.parse::<u64>().ok().filter(|u| (1..=10_000_000).contains(u))?;
        Some(QpSkew { modulus, reverse, step: std::time::Duration::from_micros(us) })
    }
}
