//! The device library's x86-64 build, linked into this crate by build.rs.
//! These are the very functions a kernel calls, compiled for the CPU; the
//! portability header routes their doorbell and doorbell-record stores into
//! the emulated NIC (see [`crate::emu::bus`]).
//!
//! All functions take pointers to device-visible memory (descriptors, queue
//! state, WQE and CQE rings) that must stay valid for the call; callers wrap
//! them in safe types.

use crate::abi::{rust_gin_mlx5_request, rust_gin_mlx5_sq};

extern "C" {
    pub fn rust_gin_mlx5_post(sq: *const rust_gin_mlx5_sq, reqs: *const rust_gin_mlx5_request, n: u32) -> i32;
    pub fn rust_gin_mlx5_post_deferred(
        sq: *const rust_gin_mlx5_sq,
        reqs: *const rust_gin_mlx5_request,
        n: u32,
    ) -> i32;
    pub fn rust_gin_mlx5_ring(sq: *const rust_gin_mlx5_sq);
    pub fn rust_gin_mlx5_quiet(sq: *const rust_gin_mlx5_sq) -> i32;
    pub fn rust_gin_mlx5_poll(sq: *const rust_gin_mlx5_sq) -> i32;
    pub fn rust_gin_mlx5_build_wqe(
        req: *const rust_gin_mlx5_request,
        index: u16,
        qpn: u32,
        cq_update: i32,
        out64: *mut u8,
    );
}

/// Builds the 64-byte WQE the device code writes for `req`.
pub fn build_wqe(req: &rust_gin_mlx5_request, index: u16, qpn: u32, cq_update: bool) -> [u8; 64] {
    // The device code stores 16-byte vectors: the buffer must be 16-aligned.
    #[repr(C, align(16))]
    struct Wqe([u8; 64]);
    let mut out = Wqe([0u8; 64]);
    // SAFETY: build_wqe reads one request and writes exactly 64 bytes to a
    // 16-byte aligned buffer.
    unsafe { rust_gin_mlx5_build_wqe(req, index, qpn, cq_update as i32, out.0.as_mut_ptr()) };
    out.0
}

/// A status code a device function returned (abi/error.h), other than OK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceStatus {
    /// An error completion; the sticky error record has the syndrome.
    CqeError,
    /// A bounded wait expired; the record says what it waited for.
    Timeout,
    /// The queue failed earlier.
    QpFailed,
    /// A bad argument (id or offset out of range, unregistered window).
    Invalid,
    /// RCCL's abort flag was raised during a wait.
    Aborted,
    /// A code this host does not know (a newer device library).
    Unknown(i32),
}

impl DeviceStatus {
    /// `Ok(())` for RUST_GIN_OK, else the status.
    pub fn check(code: i32) -> Result<(), DeviceStatus> {
        use crate::abi as a;
        match code as u32 {
            a::RUST_GIN_OK => Ok(()),
            a::RUST_GIN_ERR_CQE => Err(DeviceStatus::CqeError),
            a::RUST_GIN_ERR_TIMEOUT => Err(DeviceStatus::Timeout),
            a::RUST_GIN_ERR_QP_FAILED => Err(DeviceStatus::QpFailed),
            a::RUST_GIN_ERR_INVALID => Err(DeviceStatus::Invalid),
            a::RUST_GIN_ERR_ABORTED => Err(DeviceStatus::Aborted),
            _ => Err(DeviceStatus::Unknown(code)),
        }
    }
}

/// What a timed-out wait was waiting for (abi/error.h RUST_GIN_WAIT_*).
pub fn wait_kind_name(kind: u8) -> &'static str {
    use crate::abi as a;
    match kind as u32 {
        a::RUST_GIN_WAIT_SQ_CREDIT => "send-queue credit (completions from the NIC)",
        a::RUST_GIN_WAIT_SQ_PUBLISH => "an earlier producer to publish its WQEs",
        a::RUST_GIN_WAIT_FLUSH => "completion of everything posted (flush)",
        a::RUST_GIN_WAIT_SIGNAL => "a signal to reach its value",
        a::RUST_GIN_WAIT_COUNTER => "a counter to reach its value",
        _ => "nothing (not a timeout)",
    }
}

/// The sticky device-side error, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceError {
    pub code: u32,
    pub peer: u32,
    pub qpn: u32,
    pub wqe_index: u32,
    pub syndrome: u8,
    pub vendor_syndrome: u8,
    pub wqe_opcode: u8,
    pub wait_kind: u8,
    pub expected: u64,
    pub observed: u64,
    /// Errors seen, this one included.
    pub count: u64,
}

impl DeviceError {
    /// Reads a record; None while it is empty (or being written).
    pub fn from_record(r: &crate::abi::rust_gin_error) -> Option<DeviceError> {
        (r.state == crate::abi::RUST_GIN_ERROR_VALID).then_some(DeviceError {
            code: r.code,
            peer: r.peer,
            qpn: r.qpn,
            wqe_index: r.wqe_index,
            syndrome: r.syndrome,
            vendor_syndrome: r.vendor_syndrome,
            wqe_opcode: r.wqe_opcode,
            wait_kind: r.wait_kind,
            expected: r.expected,
            observed: r.observed,
            count: r.count,
        })
    }
}

impl std::fmt::Display for DeviceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::abi as a;
        match self.code {
            a::RUST_GIN_ERR_CQE => write!(
                f,
                "error completion from peer {} on QP {:#x}, WQE index {}, syndrome {:#04x} ({}), vendor syndrome {:#04x}, WQE opcode {:#04x}",
                self.peer,
                self.qpn,
                self.wqe_index,
                self.syndrome,
                crate::mlx5::wire::syndrome::name(self.syndrome),
                self.vendor_syndrome,
                self.wqe_opcode
            ),
            a::RUST_GIN_ERR_TIMEOUT => write!(
                f,
                "timeout waiting for {} (peer {}, QP {:#x}, expected {}, last seen {})",
                wait_kind_name(self.wait_kind),
                self.peer,
                self.qpn,
                self.expected,
                self.observed
            ),
            a::RUST_GIN_ERR_INVALID => write!(
                f,
                "invalid argument in a device call (peer {}, detail {}, {})",
                self.peer, self.expected, self.observed
            ),
            c => write!(f, "device error code {c} (peer {}, QP {:#x})", self.peer, self.qpn),
        }?;
        if self.count > 1 {
            write!(f, "; {} more error(s) after it", self.count - 1)?;
        }
        Ok(())
    }
}
