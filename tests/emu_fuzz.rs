//! Random and malformed WQEs never crash the emulated NIC: the decoder returns
//! a syndrome for anything it cannot execute, and the NIC turns it into an
//! error completion. Fixed case counts and seeds keep this fast and repeatable.

#[path = "support/emu.rs"]
mod emu;

use emu::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, RngAlgorithm, TestRng, TestRunner};
use rccl_rust_gin::emu::{wqe, Fabric};
use rccl_rust_gin::mlx5::wire::{opcode, syndrome, CtrlSeg, Cqe, CQE_SIZE};

fn runner(cases: u32) -> TestRunner {
    let config = Config { cases, failure_persistence: Some(Box::new(FileFailurePersistence::Off)), ..Config::default() };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]))
}

#[test]
fn decoder_survives_random_bytes() {
    runner(8_000)
        .run(&(proptest::collection::vec(any::<u8>(), 0..1100), any::<u16>(), any::<u32>()), |(bytes, index, qpn)| {
            match wqe::decode(&bytes, index, qpn & 0xff_ffff) {
                Ok(w) => {
                    prop_assert_eq!(w.wqebbs, wqe::wqebbs_for_ds(w.ctrl.ds));
                    prop_assert!(w.op.length() <= wqe::MAX_MESSAGE);
                }
                Err(e) => prop_assert!(e.wqebbs >= 1 && e.syndrome != 0),
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn decoder_survives_random_segments_behind_a_valid_header() {
    // Random bytes pass the index/QPN checks only rarely; this keeps the
    // control segment valid so the segment decoding itself is exercised.
    let ops = prop_oneof![
        Just(opcode::NOP),
        Just(opcode::RDMA_WRITE),
        Just(opcode::RDMA_WRITE_IMM),
        Just(opcode::RDMA_READ),
        Just(opcode::ATOMIC_FA),
        Just(opcode::ATOMIC_CS),
        Just(opcode::DUMP),
        any::<u8>()
    ];
    let known = [
        opcode::NOP,
        opcode::RDMA_WRITE,
        opcode::RDMA_WRITE_IMM,
        opcode::RDMA_READ,
        opcode::ATOMIC_FA,
        opcode::ATOMIC_CS,
        opcode::DUMP,
    ];
    let (oks, errs) = (std::cell::Cell::new(0u32), std::cell::Cell::new(0u32));
    runner(8_000)
        .run(&(ops, 0u8..64, proptest::collection::vec(any::<u8>(), 1008)), |(op, ds, tail)| {
            let c = CtrlSeg { opmod: 0, wqe_index: 5, opcode: op, qpn: 0x42, ds, signature: 0, fm_ce_se: 0, imm: 0 };
            let mut bytes = c.encode().to_vec();
            bytes.extend_from_slice(&tail);
            // A panic inside decode fails the case (proptest catches it).
            match wqe::decode(&bytes, 5, 0x42) {
                Ok(w) => {
                    oks.set(oks.get() + 1);
                    prop_assert_eq!(w.ctrl, c, "the control segment round-trips");
                    prop_assert_eq!(w.wqebbs, wqe::wqebbs_for_ds(ds));
                    prop_assert!(ds != 0 && known.contains(&op), "accepted DS {} opcode {:#x}", ds, op);
                    prop_assert!(w.op.length() <= wqe::MAX_MESSAGE);
                    let kind_matches = match &w.op {
                        wqe::WqeOp::Nop => op == opcode::NOP,
                        wqe::WqeOp::Write { imm, .. } => {
                            op == opcode::RDMA_WRITE && imm.is_none() || op == opcode::RDMA_WRITE_IMM && imm.is_some()
                        }
                        wqe::WqeOp::Read { .. } => op == opcode::RDMA_READ,
                        wqe::WqeOp::Dump { .. } => op == opcode::DUMP && ds == 2,
                        wqe::WqeOp::Atomic { kind, .. } => {
                            (op, *kind) == (opcode::ATOMIC_FA, wqe::AtomicKind::FetchAdd)
                                || (op, *kind) == (opcode::ATOMIC_CS, wqe::AtomicKind::CompareSwap)
                        }
                    };
                    prop_assert!(kind_matches, "opcode {:#x} decoded as {:?}", op, w.op);
                }
                Err(e) => {
                    errs.set(errs.get() + 1);
                    prop_assert!(e.syndrome != 0, "an error without a syndrome: {:?}", e);
                    // The header is valid, so the skip is what DS says.
                    prop_assert_eq!(e.wqebbs, wqe::wqebbs_for_ds(ds));
                    prop_assert!(e.wqebbs >= 1);
                    prop_assert_eq!(e.opcode, op);
                    prop_assert!(!e.reason.is_empty());
                }
            }
            Ok(())
        })
        .unwrap();
    // Both outcomes were exercised, or the properties above proved little.
    assert!(oks.get() > 100 && errs.get() > 100, "{} accepted, {} refused", oks.get(), errs.get());
}

fn malformed_case(patch: impl Fn(&mut [u8; 64]), want: u8, what: &str) {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 1 << 12, ALL);
    let link = Link::new(&a, &a, 6, 1_000_000_000);
    let d = link.sq.descriptor();
    let mut w = [0u8; 64];
    w.copy_from_slice(&rccl_rust_gin::device::build_wqe(&write_inline(1, 8, a.addr(0), a.mr.rkey), 0, d.qpn, true).unwrap());
    patch(&mut w);
    link.qp.mem.sq.write(0, &w);
    // SAFETY: test-only stores to the QP's own doorbell record and register.
    unsafe {
        rccl_rust_gin::device::ring_by_hand(&d, 1, 1);
    }
    fabric.step_until_idle();
    let mut raw = [0u8; CQE_SIZE];
    link.qp.mem.cq.read(0, &mut raw);
    let cqe = Cqe::parse(&raw);
    assert!(cqe.is_error(), "{what}: expected an error CQE, got {cqe:?}");
    assert_eq!(cqe.syndrome, want, "{what}");
    assert_eq!(cqe.wqe_counter, 0, "{what}");
    assert_eq!(a.nic.qp_state(link.qp.qpn).unwrap(), rccl_rust_gin::emu::QpState::Error, "{what}");
    assert_eq!(link.sq.poll(), Err(rccl_rust_gin::device::DeviceStatus::CqeError), "{what}");
    assert_eq!(link.sq.error().unwrap().syndrome, want, "{what}");
}

#[test]
fn unknown_opcode_completes_with_a_local_qp_operation_error() {
    malformed_case(|w| w[3] = 0x2f, syndrome::LOCAL_QP_OP_ERR, "unknown opcode");
}

#[test]
fn zero_ds_completes_with_a_local_qp_operation_error() {
    malformed_case(|w| w[7] &= 0xc0, syndrome::LOCAL_QP_OP_ERR, "DS 0");
}

#[test]
fn atomic_with_the_wrong_ds_is_refused() {
    malformed_case(
        |w| {
            w[3] = opcode::ATOMIC_FA;
            w[7] = (w[7] & 0xc0) | 3;
        },
        syndrome::LOCAL_QP_OP_ERR,
        "atomic with DS 3",
    );
}

#[test]
fn stale_wqe_index_is_refused() {
    // A WQE whose control segment names another index: the slot was never
    // written for this round (a producer bug the NIC must not execute).
    malformed_case(|w| w[2] ^= 0x01, syndrome::LOCAL_QP_OP_ERR, "wrong WQE index");
}

#[test]
fn inline_length_past_the_wqe_is_a_length_error() {
    malformed_case(|w| w[32..36].copy_from_slice(&(0x8000_0000u32 | 500).to_be_bytes()), syndrome::LOCAL_LENGTH_ERR, "inline overrun");
}

#[test]
fn nic_survives_random_wqes_in_its_ring() {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 1 << 12, ALL);
    let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[11; 32]);
    for round in 0..300u32 {
        let link = Link::new(&a, &a, 6, 1_000_000_000);
        let d = link.sq.descriptor();
        let mut ring = vec![0u8; 64 * 64];
        rng.fill_bytes(&mut ring);
        // Half the rounds keep a plausible header so decoding goes deeper.
        if round % 2 == 0 {
            for slot in 0..64usize {
                let w = &mut ring[slot * 64..slot * 64 + 64];
                w[1..3].copy_from_slice(&(slot as u16).to_be_bytes());
                w[4..7].copy_from_slice(&d.qpn.to_be_bytes()[1..4]);
            }
        }
        link.qp.mem.sq.write(0, &ring);
        let n = 1 + rng.next_u32() % 64;
        // SAFETY: test-only stores to the QP's own doorbell record and register.
        unsafe {
            rccl_rust_gin::device::ring_by_hand(&d, n, n as u16);
        }
        fabric.step_until_idle();
        // Whatever happened, the CQ is consistent: polling it terminates.
        let _ = link.sq.poll();
    }
    assert!(a.nic.counters().error_cqes > 0, "random WQEs produced error completions");
}
