//! The data path end to end on the emulated NIC: WQEs built and posted by the
//! device library's host build, executed by the emulated NIC, completions
//! consumed by the device code again.

#[path = "support/emu.rs"]
mod emu;

use emu::*;
use rccl_rust_gin::abi::RUST_GIN_REQ_SMALL_FENCE;
use rccl_rust_gin::device::DeviceStatus;
use rccl_rust_gin::emu::{Access, Fabric, NicConfig};
use std::time::Duration;
use rccl_rust_gin::mlx5::wire::{opcode, syndrome};

const SECOND: u64 = 1_000_000_000;

#[test]
fn loopback_write_read_and_atomics_land_byte_for_byte() {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 1 << 16, ALL);
    let link = Link::new(&a, &a, 8, SECOND);
    let src: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    a.buf.write(0, &src);
    a.buf.write(40960, &100u64.to_ne_bytes());
    let reqs = [
        write(a.addr(0), a.mr.lkey, a.addr(8192), a.mr.rkey, 4096),
        read(a.addr(16384), a.mr.lkey, a.addr(0), a.mr.rkey, 4096),
        write_inline(0xdead_beef_0bad_f00d, 8, a.addr(32768), a.mr.rkey),
        fetch_add(a.addr(49152), a.mr.lkey, a.addr(40960), a.mr.rkey, 5),
        signaled(rccl_rust_gin::abi::rust_gin_mlx5_request { opcode: opcode::NOP, ..Default::default() }),
    ];
    link.sq.post(&reqs).unwrap();
    fabric.step_until_idle();
    link.sq.poll().unwrap();

    let mut got = vec![0u8; 4096];
    a.buf.read(8192, &mut got);
    assert_eq!(got, src, "WRITE payload");
    a.buf.read(16384, &mut got);
    assert_eq!(got, src, "READ payload");
    let mut w = [0u8; 8];
    a.buf.read(32768, &mut w);
    assert_eq!(u64::from_ne_bytes(w), 0xdead_beef_0bad_f00d, "inline WRITE");
    a.buf.read(40960, &mut w);
    assert_eq!(u64::from_ne_bytes(w), 105, "fetch-and-add target");
    a.buf.read(49152, &mut w);
    assert_eq!(u64::from_ne_bytes(w), 100, "fetch-and-add result (old value)");

    let st = link.sq.state();
    assert_eq!(st.done, 5, "all five WQEs are credited back");
    assert_eq!(st.resv, 5);
    let c = a.nic.counters();
    assert_eq!(c.wqebbs_read, 5);
    assert_eq!(c.doorbells, 1, "one batch, one doorbell");
    assert_eq!(c.writes, 2);
    assert_eq!(c.reads, 1);
    assert_eq!(c.atomics, 1);
    assert_eq!(c.nops, 1);
    assert_eq!(c.cqes_written, 1, "only the signalled NOP asks for a CQE");
    assert!(link.sq.error().is_none());
}

#[test]
fn compare_and_swap_swaps_only_on_match() {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 1 << 14, ALL);
    let link = Link::new(&a, &a, 6, SECOND);
    a.buf.write(1024, &7u64.to_ne_bytes());
    let cas = |sink: u64, cmp: u64, swap: u64| rccl_rust_gin::abi::rust_gin_mlx5_request {
        opcode: opcode::ATOMIC_CS,
        length: 8,
        lkey: a.mr.lkey,
        rkey: a.mr.rkey,
        laddr: a.addr(sink),
        raddr: a.addr(1024),
        operand0: swap,
        operand1: cmp,
        ..Default::default()
    };
    link.sq.post(&[cas(2048, 6, 99), cas(2056, 7, 42)]).unwrap();
    fabric.step_until_idle();
    let mut w = [0u8; 8];
    a.buf.read(1024, &mut w);
    assert_eq!(u64::from_ne_bytes(w), 42, "the second CAS matched");
    a.buf.read(2048, &mut w);
    assert_eq!(u64::from_ne_bytes(w), 7, "the first CAS saw 7 and did not swap");
    a.buf.read(2056, &mut w);
    assert_eq!(u64::from_ne_bytes(w), 7);
}

#[test]
fn a_wqe_beyond_the_doorbell_record_is_not_executed() {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 1 << 14, ALL);
    let link = Link::new(&a, &a, 6, SECOND);
    // Published but not rung: the NIC has not heard of it.
    link.sq.post_deferred(&[write_inline(1, 8, a.addr(0), a.mr.rkey)]).unwrap();
    fabric.step_until_idle();
    assert_eq!(a.nic.counters().wqebbs_read, 0, "no doorbell, no execution");
    // Ring a doorbell by hand that claims two WQEs while the record says one:
    // the record rules.
    let d = link.sq.descriptor();
    // SAFETY: test-only MMIO store to the QP's own doorbell register.
    unsafe {
        rccl_rust_gin::device::ring_by_hand(&d, 1, 2);
    }
    fabric.step_until_idle();
    let c = a.nic.counters();
    assert_eq!(c.wqebbs_read, 1, "only the WQE inside the doorbell record runs");
    assert_eq!(c.doorbell_dbr_mismatches, 1);
}

#[test]
fn fenced_wqe_waits_for_earlier_reads() {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 1 << 14, ALL);
    let link = Link::new(&a, &a, 6, SECOND);
    a.buf.write(0, &[9u8; 64]);
    let mut second = write(a.addr(1024), a.mr.lkey, a.addr(2048), a.mr.rkey, 64);
    second.flags |= RUST_GIN_REQ_SMALL_FENCE as u8;
    // READ 0 -> 1024, then (fenced) WRITE 1024 -> 2048: the write must carry
    // the read's data.
    a.nic.start_trace();
    link.sq.post(&[read(a.addr(1024), a.mr.lkey, a.addr(0), a.mr.rkey, 64), second]).unwrap();
    fabric.step_until_idle();
    let mut got = [0u8; 64];
    a.buf.read(2048, &mut got);
    assert_eq!(got, [9u8; 64], "the fenced WRITE saw the READ's data");
    assert_eq!(a.nic.take_trace().len(), 2);
    assert_eq!(a.nic.counters().wqebbs_read, 2, "a fenced WQE read again while it waits is counted once");
}

fn expect_error(link: &Link, want: u8, what: &str) {
    let e = link.sq.error().unwrap_or_else(|| panic!("{what}: no sticky error recorded"));
    assert_eq!(e.code, rccl_rust_gin::abi::RUST_GIN_ERR_CQE, "{what}: {e}");
    assert_eq!(e.syndrome, want, "{what}: {e}");
    assert_eq!(e.peer, 1, "{what}: the error names the peer");
    assert_eq!(e.qpn, link.qp.qpn, "{what}: the error names the QP");
}

fn error_case(build: impl Fn(&Side, &Side) -> rccl_rust_gin::abi::rust_gin_mlx5_request, want: u8, what: &str) {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 1 << 14, ALL);
    let b = Side::new(&fabric, "b", 1 << 14, Access::LOCAL_WRITE | Access::REMOTE_READ);
    let link = Link::new(&a, &b, 6, SECOND);
    // The failing WQE first, then two good ones that the error flushes.
    let good = write(a.addr(0), a.mr.lkey, b.addr(0), b.mr.rkey, 8);
    let reqs = &[build(&a, &b), good, good];
    link.sq.post(reqs).unwrap();
    fabric.step_until_idle();
    assert_eq!(link.sq.poll(), Err(DeviceStatus::CqeError), "{what}: polling reports the error CQE");
    expect_error(&link, want, what);
    assert_eq!(link.sq.error().unwrap().wqe_index, 0, "{what}: the first WQE failed");
    let c = a.nic.counters();
    assert_eq!(c.error_cqes, 3, "{what}: the failed WQE and two flushed ones");
    assert_eq!(c.cqes_written, 3);
    assert_eq!(link.sq.state().done, 3, "{what}: flushed WQEs still return credit");
    // Later posts fail fast instead of hanging.
    assert_eq!(link.sq.post(&[good]), Err(DeviceStatus::QpFailed), "{what}");
    assert_eq!(link.sq.quiet(), Err(DeviceStatus::QpFailed), "{what}");
}

#[test]
fn bad_rkey_is_a_remote_access_error() {
    error_case(|a, b| write(a.addr(0), a.mr.lkey, b.addr(0), b.mr.rkey ^ 0x100, 8), syndrome::REMOTE_ACCESS_ERR, "bad rkey");
}

#[test]
fn out_of_bounds_is_a_remote_access_error() {
    error_case(|a, b| write(a.addr(0), a.mr.lkey, b.addr((1 << 14) - 4), b.mr.rkey, 8), syndrome::REMOTE_ACCESS_ERR, "out of bounds");
}

#[test]
fn missing_remote_write_permission_is_a_remote_access_error() {
    // b's region allows remote reads only.
    error_case(|a, b| write(a.addr(0), a.mr.lkey, b.addr(0), b.mr.rkey, 8), syndrome::REMOTE_ACCESS_ERR, "no REMOTE_WRITE");
}

#[test]
fn bad_lkey_is_a_local_protection_error() {
    error_case(|a, b| write(a.addr(0), a.mr.lkey + 0x100, b.addr(0), b.mr.rkey, 8), syndrome::LOCAL_PROT_ERR, "bad lkey");
}

#[test]
fn full_queue_applies_backpressure_and_times_out_without_overwriting() {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 1 << 14, ALL);
    // 64 WQEBBs, a 50 ms bound, and a NIC that makes no progress.
    let link = Link::new(&a, &a, 6, 50_000_000);
    let reqs: Vec<_> = (0..64u64).map(|i| write_inline(i, 8, a.addr(8 * i), a.mr.rkey)).collect();
    link.sq.post(&reqs).unwrap();
    let ring_before = {
        let mut v = vec![0u8; 64 * 64];
        link.qp.mem.sq.read(0, &mut v);
        v
    };
    let t = std::time::Instant::now();
    assert_eq!(link.sq.post(&[write_inline(99, 8, a.addr(0), a.mr.rkey)]), Err(DeviceStatus::Timeout));
    assert!(t.elapsed() < std::time::Duration::from_secs(5), "the wait is bounded");
    let mut ring_after = vec![0u8; 64 * 64];
    link.qp.mem.sq.read(0, &mut ring_after);
    assert_eq!(ring_before, ring_after, "no WQE the NIC had not consumed was overwritten");
    let e = link.sq.error().expect("a timeout is a sticky error");
    assert_eq!(e.code, rccl_rust_gin::abi::RUST_GIN_ERR_TIMEOUT);
    assert_eq!(e.wait_kind as u32, rccl_rust_gin::abi::RUST_GIN_WAIT_SQ_CREDIT);
    assert_eq!(e.expected, 1, "it waited for the first WQEBB to be credited");
    assert!(e.to_string().contains("send-queue credit"), "{e}");
}

#[test]
fn full_queue_waits_for_credit_while_the_nic_runs() {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 1 << 16, ALL);
    a.nic.start_polling();
    let link = Link::new(&a, &a, 6, 10 * SECOND);
    // Ten times the queue depth through a 64-entry queue, in batches.
    for round in 0..40u64 {
        let reqs: Vec<_> = (0..16u64).map(|i| write_inline(round * 16 + i, 8, a.addr(8 * (round * 16 + i)), a.mr.rkey)).collect();
        link.sq.post(&reqs).unwrap();
    }
    link.sq.quiet().unwrap();
    for i in 0..640u64 {
        let mut w = [0u8; 8];
        a.buf.read(8 * i as usize, &mut w);
        assert_eq!(u64::from_ne_bytes(w), i);
    }
    let st = link.sq.state();
    assert_eq!(st.resv, st.done, "quiet means everything is credited back");
    assert!(link.sq.error().is_none());
}

/// READ data may reach memory after the READ's CQE (PCIe writes the GPU
/// memory path does not order with the CQE): the model holds it back, a
/// flush without a DUMP returns with the data still missing, and a flush
/// with one (fenced behind the READ, its local read unable to pass the
/// data's writes) returns with the data in memory.
#[test]
fn read_data_lands_after_its_cqe_unless_a_dump_flushes_it() {
    let fabric = Fabric::threads();
    let lagging = NicConfig { name: "a".into(), read_data_delay: Some(Duration::from_secs(600)), ..Default::default() };
    let a = Side::with_config(&fabric, lagging, 1 << 16, ALL);
    let b = Side::new(&fabric, "b", 1 << 16, ALL);
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 13 + 5) as u8).collect();
    b.buf.write(0, &pattern);
    a.nic.start_polling();
    b.nic.start_polling();
    let bytes = |off: usize| {
        let mut v = vec![0u8; 4096];
        a.buf.read(off, &mut v);
        v
    };

    // No flush byte: quiet waits for a NOP behind the READ, nothing more.
    let plain = Link::new(&a, &b, 6, 10 * SECOND);
    plain.sq.post(&[read(a.addr(4096), a.mr.lkey, b.addr(0), b.mr.rkey, 4096)]).unwrap();
    plain.sq.quiet().unwrap();
    assert_eq!(plain.sq.state().done, 2, "the READ and the flush's NOP completed");
    assert_eq!(bytes(4096), vec![0u8; 4096], "the model holds READ data back after its CQE");
    let c = a.nic.counters();
    assert_eq!((c.dumps, c.nops), (0, 1), "a flush without a flush byte posts a NOP");
    assert!(c.read_writes_delayed >= 1);

    // With one: quiet posts a fenced DUMP, which lands what is on its way.
    let flushing = Link::with_read_flush(&a, &b, 6, 10 * SECOND, 60000);
    flushing.sq.post(&[read(a.addr(8192), a.mr.lkey, b.addr(0), b.mr.rkey, 4096)]).unwrap();
    flushing.sq.quiet().unwrap();
    assert_eq!(bytes(8192), pattern, "data of the READ the DUMP covers");
    assert_eq!(bytes(4096), pattern, "a DUMP lands every earlier READ's data of its NIC");
    let st = flushing.sq.state();
    assert_eq!((st.read_end, st.dump_end, st.done), (1, 2, 2), "READ at 0, DUMP at 1");
    let c = a.nic.counters();
    assert_eq!(c.dumps, 1);
    assert!(c.read_writes_landed_by_dump >= 2, "{c:?}");

    // No READ since the last DUMP: the next flush posts none, and waits for
    // the newest WQE's own CQE.
    flushing.sq.post(&[signaled(write(a.addr(0), a.mr.lkey, b.addr(8192), b.mr.rkey, 64))]).unwrap();
    flushing.sq.quiet().unwrap();
    assert_eq!(a.nic.counters().dumps, 1, "no READ since the last DUMP: no DUMP");
    assert_eq!(flushing.sq.state().done, 3);
}

/// The DUMP's own local access is checked like any data segment.
#[test]
fn a_dump_with_a_bad_lkey_is_a_local_protection_error() {
    error_case(
        |a, _| rccl_rust_gin::abi::rust_gin_mlx5_request {
            opcode: opcode::DUMP,
            length: 1,
            lkey: a.mr.lkey ^ 0x100,
            laddr: a.addr(0),
            ..Default::default()
        },
        syndrome::LOCAL_PROT_ERR,
        "DUMP with a bad lkey",
    );
}

#[test]
fn a_write_gathered_from_three_entries_crosses_packet_boundaries_byte_for_byte() {
    // Three data segments (1000 + 5000 + 3 bytes, from scattered places) in
    // one WQE written by hand: the payload is cut into MTU packets (4096)
    // that do not line up with the entries.
    use rccl_rust_gin::mlx5::wire::{ctrl, CtrlSeg, DataSeg, RaddrSeg};
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 1 << 16, ALL);
    let link = Link::new(&a, &a, 6, SECOND);
    let base = a.buf.host_addr().unwrap();
    let pattern = |i: usize| (i * 7 + 3) as u8;
    let entries = [(0usize, 1000usize), (12_000, 5000), (30_001, 3)];
    let mut want = Vec::new();
    for &(off, len) in &entries {
        for i in 0..len {
            // SAFETY: inside the side's buffer, which nothing else uses yet.
            unsafe { *((base + off + i) as *mut u8) = pattern(off + i) };
            want.push(pattern(off + i));
        }
    }
    let dst = 40_000u64;
    let qpn = link.qp.qpn;
    let ds = 1 + 1 + entries.len() as u8;
    let c = CtrlSeg { opmod: 0, wqe_index: 0, opcode: opcode::RDMA_WRITE, qpn, ds, signature: 0, fm_ce_se: ctrl::CQ_UPDATE, imm: 0 };
    let mut wqe = c.encode().to_vec();
    wqe.extend_from_slice(&RaddrSeg { raddr: a.addr(dst), rkey: a.mr.rkey }.encode());
    for &(off, len) in &entries {
        wqe.extend_from_slice(&DataSeg { byte_count: len as u32, lkey: a.mr.lkey, addr: a.addr(off as u64) }.encode());
    }
    let ring = link.qp.mem.sq.host_addr().unwrap();
    // SAFETY: slots 0 and 1 of the QP's own send queue, not yet published.
    unsafe { std::ptr::copy_nonoverlapping(wqe.as_ptr(), ring as *mut u8, wqe.len()) };
    let d = link.sq.descriptor();
    // SAFETY: the QP's own doorbell record and register; the WQE spans 2 WQEBBs.
    unsafe { rccl_rust_gin::device::ring_by_hand(&d, 2, 2) };
    fabric.step_until_idle();
    // SAFETY: the NIC wrote these bytes and is idle.
    let got = unsafe { std::slice::from_raw_parts((base + dst as usize) as *const u8, want.len()) };
    assert!(got == &want[..], "the gathered bytes land in order");
    // SAFETY: as above: the byte after the message is untouched.
    assert_eq!(unsafe { *((base + dst as usize + want.len()) as *const u8) }, 0);
    let k = a.nic.counters();
    assert_eq!((k.cqes_written, k.error_cqes, k.writes), (1, 0, 1));
    assert_eq!(k.packets_sent, 2 + 1, "6003 bytes in two 4096-byte packets, and one ACK");
    assert_eq!(k.payload_bytes, 2 * 6003, "read once at the requester, written once at the responder");
}

/// The responder coalesces ACKs as RC responders do: one ACK answers every
/// WRITE of a QP that arrived in one step, and acknowledges them all, and
/// an error reply comes after the ACK of the writes before it, so the
/// requester completes those and fails only the bad one.
#[test]
fn one_coalesced_ack_completes_a_burst_of_writes_and_a_nak_stays_in_order() {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 1 << 16, ALL);
    let link = Link::new(&a, &a, 6, SECOND);
    let reqs: Vec<_> = (0..16u64).map(|i| write_inline(i + 1, 8, a.addr(8 * i), a.mr.rkey)).collect();
    link.sq.post_deferred(&reqs).unwrap();
    link.sq.ring();
    fabric.step_until_idle();
    link.sq.quiet().unwrap();
    for i in 0..16u64 {
        let mut w = [0u8; 8];
        a.buf.read(8 * i as usize, &mut w);
        assert_eq!(u64::from_ne_bytes(w), i + 1);
    }
    let k = a.nic.counters();
    assert_eq!(k.writes, 16);
    assert_eq!(k.packets_sent, 16 + 1, "16 WRITE packets and one ACK for all of them");

    // Three good writes, a bad rkey, then more: the three complete, the bad
    // one fails with a remote access error, the rest are flushed.
    let mut reqs: Vec<_> = (0..6u64).map(|i| write_inline(100 + i, 8, a.addr(1024 + 8 * i), a.mr.rkey)).collect();
    reqs[3].rkey ^= 0x100;
    link.sq.post_deferred(&reqs).unwrap();
    link.sq.ring();
    fabric.step_until_idle();
    assert!(link.sq.quiet().is_err(), "the bad rkey fails the queue");
    for i in 0..3u64 {
        let mut w = [0u8; 8];
        a.buf.read(1024 + 8 * i as usize, &mut w);
        assert_eq!(u64::from_ne_bytes(w), 100 + i, "write {i} before the bad one landed");
    }
    let e = link.sq.error().expect("the error is recorded");
    assert_eq!(e.syndrome, syndrome::REMOTE_ACCESS_ERR, "{e}");
    assert_eq!(e.wqe_index, 16 + 3, "the failed WQE is the bad one, not an earlier write");
}

/// A step sends at most about 256 KiB of WRITE payload (whole WQEs) and
/// leaves the rest to the next steps, as a NIC bounds what it has in flight
/// (host/emu/nic/mod.rs, STEP_PAYLOAD_BUDGET): a deep queue of 64 KiB
/// WRITEs no longer becomes megabytes of packets in one step. Everything
/// still lands, in order, with nobody ringing again.
#[test]
fn a_step_sends_a_bounded_payload_and_the_next_steps_the_rest() {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 2 << 20, ALL);
    let b = Side::new(&fabric, "b", 2 << 20, ALL);
    let pattern: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 7 + (i >> 12)) as u8).collect();
    a.buf.write(0, &pattern);
    let link = Link::new(&a, &b, 6, 10 * SECOND);
    let reqs: Vec<_> = (0..16u64).map(|i| write(a.addr(65536 * i), a.mr.lkey, b.addr(65536 * i), b.mr.rkey, 65536)).collect();
    link.sq.post(&reqs).unwrap();
    let sent = |n: &rccl_rust_gin::emu::EmuNic| n.counters().packets_sent;
    assert!(a.nic.step());
    // 4 KiB packets: 256 KiB is 4 WRITEs of 16 packets.
    assert_eq!(sent(&a.nic), 4 * 16, "the first step sent one budget of WRITEs");
    assert_eq!(a.nic.counters().writes, 4);
    fabric.step_until_idle();
    assert_eq!(a.nic.counters().writes, 16, "the later steps sent the rest without a doorbell");
    link.sq.quiet().unwrap();
    let mut got = vec![0u8; 1 << 20];
    b.buf.read(0, &mut got);
    assert!(got == pattern, "1 MiB of WRITEs landed byte for byte");
}

/// The same bound on the responder: a step answers READs until it has sent
/// about 256 KiB of READ responses, and the requests left wait in its inbox
/// for the next step, in order.
#[test]
fn a_step_answers_a_bounded_read_payload_and_the_next_steps_the_rest() {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 2 << 20, ALL);
    let b = Side::new(&fabric, "b", 2 << 20, ALL);
    let pattern: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 11 + (i >> 13)) as u8).collect();
    b.buf.write(0, &pattern);
    let link = Link::new(&a, &b, 6, 10 * SECOND);
    let reqs: Vec<_> = (0..16u64).map(|i| read(a.addr(65536 * i), a.mr.lkey, b.addr(65536 * i), b.mr.rkey, 65536)).collect();
    link.sq.post(&reqs).unwrap();
    assert!(a.nic.step());
    assert_eq!(a.nic.counters().packets_sent, 16, "a READ request carries no payload: all 16 go");
    assert!(b.nic.step());
    assert_eq!(b.nic.counters().packets_sent, 4 * 16, "the first step answered one budget of READs");
    fabric.step_until_idle();
    assert_eq!(b.nic.counters().packets_sent, 16 * 16, "the later steps answered the rest");
    link.sq.quiet().unwrap();
    let mut got = vec![0u8; 1 << 20];
    a.buf.read(0, &mut got);
    assert!(got == pattern, "1 MiB of READs landed byte for byte");
}
