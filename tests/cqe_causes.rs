//! Every error status each family names decodes into words (issue 26 item
//! 6, host/nic/completion.rs), the three families agree on what their
//! parallel statuses mean, and a retry-exceeded completion reads as a lost
//! peer, an expected event, in the line queryLastError WARNs.

use rccl_rust_gin::abi::{rust_gin_error, RUST_GIN_ERROR_VALID, RUST_GIN_ERR_CQE};
use rccl_rust_gin::device::DeviceError;
use rccl_rust_gin::nic::completion::{cause, Cause};
use rccl_rust_gin::nic::NicFamily;

const FAMILIES: [NicFamily; 3] = [NicFamily::Mlx5, NicFamily::Bnxt, NicFamily::Ionic];

fn name(f: NicFamily, s: u8) -> &'static str {
    match f {
        NicFamily::Mlx5 => rccl_rust_gin::mlx5::wire::syndrome::name(s),
        NicFamily::Bnxt => rccl_rust_gin::bnxt::wire::status::name(s),
        NicFamily::Ionic => rccl_rust_gin::ionic::wire::status::name(u32::from(s)),
    }
}

#[test]
fn every_named_error_status_has_a_cause_and_no_unnamed_one_does() {
    for f in FAMILIES {
        let mut named = 0;
        for s in 0..=255u8 {
            let n = name(f, s);
            let c = cause(f, s);
            if n.starts_with("UNKNOWN") || n == "OK" {
                assert_eq!(c, Cause::Unknown, "{} status {s:#x} ({n})", f.name());
            } else {
                named += 1;
                assert_ne!(c, Cause::Unknown, "{} status {s:#x} ({n}) has no cause", f.name());
                assert!(c.words().len() > 30, "{n}: {}", c.words());
            }
        }
        assert!(named >= 11, "{}: {named} named statuses", f.name());
    }
}

#[test]
fn the_families_parallel_statuses_mean_the_same() {
    use rccl_rust_gin::bnxt::wire::status as b;
    use rccl_rust_gin::ionic::wire::status as i;
    use rccl_rust_gin::mlx5::wire::syndrome as m;
    let rows: [(Cause, u8, u8, u32); 6] = [
        (Cause::RetryExceeded, m::TRANSPORT_RETRY_EXC_ERR, b::TRNSP_XCED, i::RETRY_EXCEEDED),
        (Cause::Flushed, m::WR_FLUSH_ERR, b::WR_FLUSH, i::WQE_FLUSHED_ERR),
        (Cause::RemoteAccess, m::REMOTE_ACCESS_ERR, b::REM_ACC, i::REMOTE_ACC_ERR),
        (Cause::LocalProtection, m::LOCAL_PROT_ERR, b::PROT, i::LOCAL_PROT_ERR),
        (Cause::RemoteInvalidRequest, m::REMOTE_INVAL_REQ_ERR, b::REM_INVAL, i::REMOTE_INV_REQ_ERR),
        (Cause::LocalQpOperation, m::LOCAL_QP_OP_ERR, b::LOC_QP_OP, i::LOCAL_QP_OPER_ERR),
    ];
    for (c, ms, bs, is) in rows {
        assert_eq!(cause(NicFamily::Mlx5, ms), c);
        assert_eq!(cause(NicFamily::Bnxt, bs), c);
        assert_eq!(cause(NicFamily::Ionic, is as u8), c);
    }
    assert!(Cause::RetryExceeded.is_peer_loss());
    assert!(!Cause::RemoteAccess.is_peer_loss());
}

#[test]
fn a_retry_exceeded_completion_reads_as_a_lost_peer_on_every_family() {
    for (f, s) in [
        (NicFamily::Mlx5, rccl_rust_gin::mlx5::wire::syndrome::TRANSPORT_RETRY_EXC_ERR),
        (NicFamily::Bnxt, rccl_rust_gin::bnxt::wire::status::TRNSP_XCED),
        (NicFamily::Ionic, rccl_rust_gin::ionic::wire::status::RETRY_EXCEEDED as u8),
    ] {
        let r = rust_gin_error {
            state: RUST_GIN_ERROR_VALID,
            code: RUST_GIN_ERR_CQE,
            peer: 3,
            qpn: 0x42,
            syndrome: s,
            count: 1,
            ..Default::default()
        };
        let line = DeviceError::from_record(&r).unwrap().on_family(f).to_string();
        for words in ["peer 3", name(f, s), "unreachable", "expected when a peer dies"] {
            assert!(line.contains(words), "{}: {line}", f.name());
        }
    }
}
