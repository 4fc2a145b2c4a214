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
