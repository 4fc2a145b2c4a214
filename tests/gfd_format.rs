//! The proxy model's GFD encoding against the bit positions of RCCL's
//! ncclGinProxyQword_t (computed from the header's bitfields with gcc; see
//! docs/proxy-model.md), and the take/put protocol.

#[path = "../host/bin/gin_perf/perf/gfd.rs"]
mod gfd;

use gfd::{op, Gfd, GFD_QWORDS};
use std::sync::atomic::AtomicU64;
use std::time::Duration;

#[test]
fn every_field_sits_at_rccls_bit_positions() {
    let g = Gfd { op: 0xabcd, size: 0x1_2345_6789, src_off: 0x7ff_ffff_0000, src_handle: 0x5247_0000_0000_0001, dst_off: 3, dst_handle: 4, counter_id: 0x7f_fffe, signal_id: 0xab_cdef, signal_value: 0x1234_5678_9abc_def0, strong: true };
    let q = g.encode();
    assert!(q.iter().all(|w| w & 1 == 1), "every qword carries its flag");
    assert_eq!((q[0] >> 1) & 0xf, 2, "header.version: bits 1..5");
    assert_eq!(q[0] >> 7, 0x1_2345_6789, "header.size: bits 7..64");
    assert_eq!(q[1] >> 1, 0x7ff_ffff_0000, "srcOff: bits 1..64");
    assert_eq!(q[5] & 0x0000_0000_00ff_fffe, (0x7f_fffe << 1) & 0xff_fffe, "completion.counterId: bits 1..24");
    assert_eq!((q[5] >> 24) & 0xff_ffff, 0xab_cdef, "completion.signalId: bits 24..48");
    assert_eq!(q[5] >> 48, 0xdef0, "completion.signalValLow: bits 48..64");
    assert_eq!((q[6] >> 1) & 1, 1, "signalVal.isStrongSignal: bit 1");
    assert_eq!((q[6] >> 8) & 0xffff, 0x9abc, "signalVal.signalValLow2: bits 8..24");
    assert_eq!((q[6] >> 24) & 0xffff_ffff, 0x1234_5678, "signalVal.signalValHigh: bits 24..56");
    assert_eq!((q[7] >> 8) & 0xffff, 0xabcd, "headerExt.op: bits 8..24");
    assert_eq!(Gfd::decode(&q), g, "round trip");
}

#[test]
fn signal_op_follows_rccls_rule() {
    let mut g = Gfd { op: op::PUT | op::WITH_SIGNAL_INC, ..Default::default() };
    assert_eq!(g.signal_op(), Some(1));
    g.op = op::PUT | op::WITH_SIGNAL_ADD;
    assert_eq!(g.signal_op(), Some(2));
    g.op = op::PUT | op::WITH_SIGNAL_INC | op::WITH_SIGNAL_ADD;
    assert_eq!(g.signal_op(), None, "both bits: a plain put");
    g.op = op::PUT;
    assert_eq!(g.signal_op(), None);
}

#[test]
fn a_torn_descriptor_is_waited_for_then_refused() {
    let slot: [AtomicU64; GFD_QWORDS] = std::array::from_fn(|_| AtomicU64::new(0));
    assert_eq!(gfd::take(&slot, Duration::from_millis(10)), Ok(None), "empty slot");
    let g = Gfd { op: op::GET, size: 64, ..Default::default() };
    gfd::put(&slot, &g);
    let w = gfd::take(&slot, Duration::from_millis(10)).unwrap().unwrap();
    assert_eq!(Gfd::decode(&w), g);
    assert!(slot.iter().all(|w| w.load(std::sync::atomic::Ordering::Relaxed) == 0), "the slot is cleared");
    // Qword 0 flagged, qword 9 not: torn.
    let words = g.encode();
    for (k, w) in words.iter().enumerate() {
        slot[k].store(if k == 9 { 0 } else { *w }, std::sync::atomic::Ordering::Relaxed);
    }
    let e = gfd::take(&slot, Duration::from_millis(10)).unwrap_err();
    assert!(e.contains("qword 9"), "{e}");
}
