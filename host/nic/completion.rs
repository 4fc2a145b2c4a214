//! What an error completion means, in words, whatever the family: each
//! family's status (mlx5 syndrome, bnxt_re and ionic CQE status, named as
//! rdma-core names them in host/{mlx5,bnxt,ionic}/wire.rs) maps to one
//! cause, and each cause says what usually happened and what to look at.
//! The families' tables are parallel to verbs' `ibv_wc_status` (rdma-core's
//! providers translate each into one of its values), so one cause per
//! `ibv_wc_status` serves all three.

use super::NicFamily;

/// The cause of an error completion (one per `ibv_wc_status` an RC
/// requester can see).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    LocalLength,
    LocalQpOperation,
    LocalProtection,
    Flushed,
    MemoryOperation,
    BadResponse,
    LocalAccess,
    RemoteInvalidRequest,
    RemoteAccess,
    RemoteOperation,
    RetryExceeded,
    RnrRetryExceeded,
    RemoteAborted,
    XrcViolation,
    /// A status the family's table does not name.
    Unknown,
}

impl Cause {
    /// What usually happened, and what to look at.
    pub fn words(self) -> &'static str {
        match self {
            Cause::LocalLength => "a local length error: a WQE's length disagrees with its segments (a WQE format bug)",
            Cause::LocalQpOperation => {
                "a local QP operation error: the NIC could not execute the WQE as written (opcode, inline size or \
                 segment count the QP does not allow: a WQE format or firmware ABI mismatch)"
            }
            Cause::LocalProtection => {
                "a local protection error: the source or landing buffer is not covered by the local key (deregistered, \
                 unmapped, or registered without the access this operation needs)"
            }
            Cause::Flushed => {
                "flushed: the queue was already in error when the NIC reached this WQE; the first error of the queue is \
                 the cause"
            }
            Cause::MemoryOperation => "a memory-management operation failed (a registration or key operation)",
            Cause::BadResponse => "a bad response: the responder answered with an unexpected transport opcode",
            Cause::LocalAccess => {
                "a local access error: the responder reported a protection error on data this side sent (keys or rights)"
            }
            Cause::RemoteInvalidRequest => {
                "a remote invalid request: the peer refused the request (an atomic to an unaligned address, a length past \
                 its limits, or an operation its QP does not enable)"
            }
            Cause::RemoteAccess => {
                "a remote access error: the peer's key, bounds or rights do not cover the target (the window was \
                 deregistered, the offset is past its end, or the registration lacks remote write/read/atomic)"
            }
            Cause::RemoteOperation => "a remote operation error: the peer could not complete the request (its QP or memory failed)",
            Cause::RetryExceeded => {
                "retries exceeded: the peer's NIC did not acknowledge within the transport retry budget, so it is \
                 unreachable (its process, node or link went away, or the fabric drops packets); expected when a peer \
                 dies: abort the communicator, and check the link and the peer if it did not"
            }
            Cause::RnrRetryExceeded => {
                "receiver-not-ready retries exceeded: the peer had no receive posted for a WRITE with immediate"
            }
            Cause::RemoteAborted => "remote aborted: the peer aborted the operation",
            Cause::XrcViolation => "an XRC domain violation (not a transport rust-gin uses)",
            Cause::Unknown => "a status this version of rust-gin does not know (newer firmware?)",
        }
    }

    /// Whether the cause is an expected event of a running job (a peer went
    /// away), not a defect: WARN it as such.
    pub fn is_peer_loss(self) -> bool {
        matches!(self, Cause::RetryExceeded)
    }
}

/// The cause of `family`'s error status `status` (the record's syndrome byte).
pub fn cause(family: NicFamily, status: u8) -> Cause {
    match family {
        NicFamily::Mlx5 => {
            use crate::mlx5::wire::syndrome as s;
            match status {
                s::LOCAL_LENGTH_ERR => Cause::LocalLength,
                s::LOCAL_QP_OP_ERR => Cause::LocalQpOperation,
                s::LOCAL_PROT_ERR => Cause::LocalProtection,
                s::WR_FLUSH_ERR => Cause::Flushed,
                s::MW_BIND_ERR => Cause::MemoryOperation,
                s::BAD_RESP_ERR => Cause::BadResponse,
                s::LOCAL_ACCESS_ERR => Cause::LocalAccess,
                s::REMOTE_INVAL_REQ_ERR => Cause::RemoteInvalidRequest,
                s::REMOTE_ACCESS_ERR => Cause::RemoteAccess,
                s::REMOTE_OP_ERR => Cause::RemoteOperation,
                s::TRANSPORT_RETRY_EXC_ERR => Cause::RetryExceeded,
                s::RNR_RETRY_EXC_ERR => Cause::RnrRetryExceeded,
                s::REMOTE_ABORTED_ERR => Cause::RemoteAborted,
                _ => Cause::Unknown,
            }
        }
        NicFamily::Bnxt => {
            use crate::bnxt::wire::status as s;
            match status {
                s::BAD_RESP => Cause::BadResponse,
                s::LOC_LEN => Cause::LocalLength,
                s::LOC_QP_OP => Cause::LocalQpOperation,
                s::PROT => Cause::LocalProtection,
                s::MEM_OP => Cause::MemoryOperation,
                s::REM_INVAL => Cause::RemoteInvalidRequest,
                s::REM_ACC => Cause::RemoteAccess,
                s::REM_OP => Cause::RemoteOperation,
                s::RNR_NAK_XCED => Cause::RnrRetryExceeded,
                s::TRNSP_XCED => Cause::RetryExceeded,
                s::WR_FLUSH => Cause::Flushed,
                _ => Cause::Unknown,
            }
        }
        NicFamily::Ionic => {
            use crate::ionic::wire::status as s;
            match u32::from(status) {
                s::LOCAL_LEN_ERR => Cause::LocalLength,
                s::LOCAL_QP_OPER_ERR => Cause::LocalQpOperation,
                s::LOCAL_PROT_ERR => Cause::LocalProtection,
                s::WQE_FLUSHED_ERR => Cause::Flushed,
                s::MEM_MGMT_OPER_ERR => Cause::MemoryOperation,
                s::BAD_RESP_ERR => Cause::BadResponse,
                s::LOCAL_ACC_ERR => Cause::LocalAccess,
                s::REMOTE_INV_REQ_ERR => Cause::RemoteInvalidRequest,
                s::REMOTE_ACC_ERR => Cause::RemoteAccess,
                s::REMOTE_OPER_ERR => Cause::RemoteOperation,
                s::RETRY_EXCEEDED => Cause::RetryExceeded,
                s::RNR_RETRY_EXCEEDED => Cause::RnrRetryExceeded,
                s::XRC_VIO_ERR => Cause::XrcViolation,
                _ => Cause::Unknown,
            }
        }
    }
}
