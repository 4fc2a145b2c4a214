//! What each GPU-visible allocation holds, and therefore where it lives: the
//! one table of placements (docs/architecture.md, "Memory placement", is
//! checked against it both ways by tests/memory_placement.rs). The rule
//! behind it, from AMD's memory model for gfx90a/gfx942/gfx950 and what
//! rocSHMEM's GDA backend and MORI do: memory a NIC writes and a kernel polls
//! must not be cached by the GPU; memory a kernel writes and the NIC reads
//! must reach memory at the kernel's release; read-only descriptors may be
//! cached.

/// Where a buffer lives, named by its coherence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Host memory, mapped for the GPU and coherent (hipHostMalloc with
    /// hipHostMallocMapped | hipHostMallocCoherent): the GPU reaches it over
    /// PCIe without caching it; rocSHMEM's default for queues.
    HostPinned,
    /// GPU memory, coarse-grained and cached (hipMalloc): for what the host
    /// writes at setup and kernels only read, or what only kernels touch.
    Device,
    /// GPU memory the GPU does not cache (hipExtMallocWithFlags with
    /// hipDeviceMallocUncached): for what a NIC writes and kernels poll.
    DeviceUncached,
    /// GPU memory, fine-grained (hipExtMallocWithFlags with
    /// hipDeviceMallocFinegrained): kernels' writes are visible to the host
    /// while the kernels run.
    DeviceFine,
}

/// Where the send ring, the CQ ring and the doorbell records live
/// (RCCL_RUST_GIN_QUEUE_PLACEMENT).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RingHome {
    Host,
    Device,
}

/// What an allocation holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Object {
    /// `rust_gin_handle`: written at createContext, read by kernels.
    Handle,
    /// `rust_gin_context[]`.
    Contexts,
    /// `rust_gin_peer[]`, each with its send queue's descriptor.
    Peers,
    /// A `rust_gin_mlx5_sq` of the RMA plugin's host-side posting.
    SqDescriptor,
    /// `rust_gin_window` and its `rust_gin_window_peer[]`.
    WindowDescriptor,
    WindowPeers,
    /// `rust_gin_mlx5_sq_state`: producer and consumer counters, device atomics only.
    QueueState,
    /// Signal offsets (moved by resets) and completion counters: kernels only.
    SignalOffsets,
    Counters,
    /// Per queue, which counter each counted put's last WQE advances, and
    /// per context the peers with counted puts outstanding: kernels only.
    CounterLog,
    CountedPeers,
    /// The sticky error record: kernels write it, the host's queryLastError
    /// reads it while they run.
    ErrorRecord,
    /// The signal table: remote NICs add to it with atomics, kernels poll it.
    Signals,
    /// Write-mode signals (docs/nic-families.md, section 7): the slots remote
    /// NICs write each sender's running total into, which kernels poll and
    /// fold; and this rank's running totals per (peer, signal), kernels only.
    SignalSlots,
    SignalTotals,
    /// Atomic results (never read) and the byte a flush after gets has the
    /// NIC read: in GPU memory, like get destinations.
    Sink,
    /// The send ring (kernels write WQEs, the NIC reads them), the CQ ring
    /// (the NIC writes, kernels poll) and the doorbell records (kernels
    /// write, the NIC reads).
    SendRing(RingHome),
    CompletionRing(RingHome),
    DoorbellRecords(RingHome),
    /// Memory registered as a window by RCCL, or by a test or benchmark
    /// standing in for it; RCCL's own buffers are not allocated here.
    WindowData,
}

impl Object {
    /// Every object, each ring in both homes (for the placement table's test).
    pub const ALL: [Object; 23] = [
        Object::Handle,
        Object::Contexts,
        Object::Peers,
        Object::SqDescriptor,
        Object::WindowDescriptor,
        Object::WindowPeers,
        Object::QueueState,
        Object::SignalOffsets,
        Object::Counters,
        Object::CounterLog,
        Object::CountedPeers,
        Object::ErrorRecord,
        Object::Signals,
        Object::SignalSlots,
        Object::SignalTotals,
        Object::Sink,
        Object::SendRing(RingHome::Host),
        Object::SendRing(RingHome::Device),
        Object::CompletionRing(RingHome::Host),
        Object::CompletionRing(RingHome::Device),
        Object::DoorbellRecords(RingHome::Host),
        Object::DoorbellRecords(RingHome::Device),
        Object::WindowData,
    ];

    pub fn placement(self) -> Placement {
        match self {
            // Read-only after setup: cached, read with scalar loads.
            Object::Handle
            | Object::Contexts
            | Object::Peers
            | Object::SqDescriptor
            | Object::WindowDescriptor
            | Object::WindowPeers => Placement::Device,
            // Touched by kernels only, with agent-scope atomics, which keep
            // coarse-grained memory coherent between CUs (and XCDs).
            Object::QueueState
            | Object::SignalOffsets
            | Object::Counters
            | Object::CounterLog
            | Object::CountedPeers
            | Object::SignalTotals => Placement::Device,
            // The host reads it while kernels run.
            Object::ErrorRecord => Placement::DeviceFine,
            // A NIC writes, kernels poll: a cached copy would never change.
            Object::Signals | Object::SignalSlots => Placement::DeviceUncached,
            // The NIC writes atomic results and reads the flush byte; no
            // kernel reads it. In GPU memory, so that the flush's read takes
            // the path get data takes.
            Object::Sink => Placement::DeviceUncached,
            Object::SendRing(RingHome::Host)
            | Object::CompletionRing(RingHome::Host)
            | Object::DoorbellRecords(RingHome::Host) => Placement::HostPinned,
            Object::SendRing(RingHome::Device)
            | Object::CompletionRing(RingHome::Device)
            | Object::DoorbellRecords(RingHome::Device) => Placement::DeviceUncached,
            Object::WindowData => Placement::Device,
        }
    }
}
