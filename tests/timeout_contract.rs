//! What a reported timeout means (issue 24, "Timeouts that mean what they
//! say"): a put reported failed after a timeout can still land later, since
//! a stopped peer that resumes delivers all of it. The contract
//! (docs/architecture.md, "Contract"): once a wait has reported a timeout,
//! the queue's error record keeps it (queryLastError reports it until the
//! context is destroyed), and nothing later on that queue reads as success:
//! later waits return the error at once, even after the peer resumed and the
//! data landed.

#[path = "support/emu.rs"]
mod emu;

use emu::*;
use rccl_rust_gin::abi::RUST_GIN_ERR_TIMEOUT;
use rccl_rust_gin::device::DeviceStatus;
use rccl_rust_gin::emu::Fabric;
use std::time::{Duration, Instant};

const MS: u64 = 1_000_000;

/// Planted fault, seen failing: the error record cleared after the timeout
/// (as a naive retry would); after the peer resumed, the record no longer
/// named the timeout ("the first error is kept").
#[test]
fn a_timeout_stays_reported_after_the_stopped_peer_resumes() {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 1 << 16, ALL);
    let b = Side::new(&fabric, "b", 1 << 16, ALL);
    let link = Link::new(&a, &b, 6, 200 * MS);
    a.nic.start_polling();
    // b is stopped: its NIC answers nothing.
    a.buf.write(0, &0x5eed_u64.to_ne_bytes());
    link.sq.post(&[signaled(write(a.addr(0), a.mr.lkey, b.addr(64), b.mr.rkey, 8))]).expect("post");
    let t = Instant::now();
    let first = link.sq.quiet();
    assert_eq!(first, Err(DeviceStatus::Timeout), "a stopped peer: the wait reports a timeout");
    assert!(t.elapsed() < Duration::from_secs(10), "within its bound: {:?}", t.elapsed());
    let e = link.sq.error().expect("the timeout is recorded");
    assert_eq!(e.code, RUST_GIN_ERR_TIMEOUT, "{e}");
    // The peer resumes and delivers what was sent before the timeout.
    b.nic.start_polling();
    let landed = Instant::now();
    loop {
        let mut w = [0u8; 8];
        b.buf.read(64, &mut w);
        if u64::from_ne_bytes(w) == 0x5eed {
            break;
        }
        assert!(landed.elapsed() < Duration::from_secs(10), "the resumed peer never delivered the put");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Nothing later on the queue reads as success.
    let second = link.sq.quiet();
    assert!(second.is_err(), "a quiet after a reported timeout read as success");
    let e = link.sq.error().expect("still recorded");
    assert_eq!(e.code, RUST_GIN_ERR_TIMEOUT, "the first error is kept: {e}");
    a.nic.stop_polling();
    b.nic.stop_polling();
}
