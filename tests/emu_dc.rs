//! The DC transport on the emulated NIC (docs/architecture.md, "DC
//! transport"): a DC initiator posting through the device library's host
//! build (the producer a kernel runs, two WQEBBs per WQE, the target's
//! datagram segment from its dc_targets table), executed by the emulated NIC,
//! which routes each WQE by its address vector and DCT number and checks the
//! DC key; completions consumed by the device code again.

#[path = "support/emu.rs"]
mod emu;

use emu::*;
use rccl_rust_gin::abi::{rust_gin_mlx5_request, rust_gin_mlx5_sq, RUST_GIN_MLX5_DC_TARGET_STRIDE};
use rccl_rust_gin::device::DeviceStatus;
use rccl_rust_gin::emu::{EmuQp, Fabric};
use rccl_rust_gin::gpu::{Allocator, GpuBuf, HostMemory, Object, RingHome};
use rccl_rust_gin::mlx5::queue::QueueMem;
use rccl_rust_gin::mlx5::sq::{new_error_record, SendQueue};
use rccl_rust_gin::mlx5::wire::{opcode, syndrome};

const SECOND: u64 = 1_000_000_000;

/// A DCI on `a` with a target table: entry i addresses `targets[i]` = (side,
/// DCT number, DC key presented).
struct Dci {
    _error: GpuBuf,
    _table: GpuBuf,
    sq: SendQueue,
    qp: EmuQp,
}

fn dci(a: &Side, targets: &[(&Side, u32, u64)], log_wqebbs: u32) -> Dci {
    let qp = EmuQp::create_dci(&a.nic, a.pd, QueueMem::new(&HostMemory, log_wqebbs, RingHome::Host).unwrap())
        .expect("dci");
    let stride = RUST_GIN_MLX5_DC_TARGET_STRIDE as usize;
    let table = HostMemory.alloc(stride * targets.len().max(1), 64, Object::Peers).unwrap();
    for (i, (side, dctn, key)) in targets.iter().enumerate() {
        table.write(i * stride, &side.nic.dc_address().with_dc_addr(*dctn, *key).encode());
    }
    let error = new_error_record(&HostMemory).unwrap();
    let mut desc: rust_gin_mlx5_sq = qp.descriptor(0, error.dev_addr(), SECOND);
    desc.dc_targets = table.dev_addr();
    assert_eq!(desc.wqe_shift, 1, "a DCI's WQEs are two WQEBBs");
    assert_eq!(desc.log_wqe_cnt, log_wqebbs - 1, "the descriptor counts WQEs (tickets)");
    let sq = SendQueue::new(&HostMemory, &desc).unwrap();
    Dci { _error: error, _table: table, sq, qp }
}

fn to(target: u32, mut r: rust_gin_mlx5_request) -> rust_gin_mlx5_request {
    r.dc_target = target;
    r
}

/// Two targets on two NICs through one DCI, far more WQEs than the ring
/// holds (its ticket and credit math across many wraps of a ring whose WQEs
/// are two WQEBBs each), alternating targets (DCI reuse) with a put and a
/// fetch-and-add (a signal) per step: every byte and every addend arrives,
/// at the right NIC, and the credit ends exactly at the tickets handed out.
#[test]
fn one_dci_reaches_two_dcts_in_order_across_ring_wraps() {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 1 << 16, ALL);
    let b = Side::new(&fabric, "b", 1 << 16, ALL);
    let c = Side::new(&fabric, "c", 1 << 16, ALL);
    let (kb, kc) = (0x1111_2222_3333_4444u64, 0x5555_6666_7777_8888u64);
    let db = b.nic.create_dct(b.pd, kb);
    let dc = c.nic.create_dct(c.pd, kc);
    // 64 WQEBBs: 32 WQEs, batches of at most 8.
    let d = dci(&a, &[(&b, db, kb), (&c, dc, kc)], 6);
    let src: Vec<u8> = (0..4096u32).map(|i| (i * 13 + 5) as u8).collect();
    a.buf.write(0, &src);
    let rounds = 100u64;
    for k in 0..rounds {
        let off = 256 * (k % 16);
        let batch = [
            to(0, write(a.addr(off), a.mr.lkey, b.addr(8192 + off), b.mr.rkey, 256)),
            to(0, fetch_add(a.addr(40960), a.mr.lkey, b.addr(32768), b.mr.rkey, 1)),
            to(1, write(a.addr(off), a.mr.lkey, c.addr(8192 + off), c.mr.rkey, 256)),
            to(1, fetch_add(a.addr(40968), a.mr.lkey, c.addr(32768), c.mr.rkey, 2)),
        ];
        d.sq.post(&batch).unwrap();
        fabric.step_until_idle();
    }
    d.sq.quiet().unwrap();
    let st = d.sq.state();
    assert!(st.resv >= 4 * rounds && st.resv <= 4 * rounds + 1, "at most one flush NOP: {}", st.resv);
    assert_eq!(st.done, st.resv, "every ticket credited back, none twice");
    assert!(st.resv > 3 * 32, "the ring wrapped several times");
    let mut got = vec![0u8; 4096];
    for (side, add) in [(&b, 1u64), (&c, 2)] {
        side.buf.read(8192, &mut got);
        assert_eq!(got, src, "{}: the puts' bytes", side.nic.name());
        let mut w = [0u8; 8];
        side.buf.read(32768, &mut w);
        assert_eq!(u64::from_ne_bytes(w), add * rounds, "{}: every signal, once", side.nic.name());
    }
    assert!(d.sq.error().is_none());
    // Two WQEBBs per WQE on the NIC's side too.
    assert_eq!(a.nic.counters().wqebbs_read, 2 * st.resv);
    assert_eq!(b.nic.dct_key_violations(db).unwrap(), 0);
}

/// A get through a DCI, then a flush: the READ's data is there once the
/// flush (a DUMP, then the NOP in the same two-WQEBB ticket that takes the
/// CQE) has completed.
#[test]
fn read_and_flush_through_a_dci() {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 1 << 16, ALL);
    let b = Side::new(&fabric, "b", 1 << 16, ALL);
    let key = 0xfeed_f00d_u64;
    let db = b.nic.create_dct(b.pd, key);
    let d = dci(&a, &[(&b, db, key)], 6);
    let data: Vec<u8> = (0..2048u32).map(|i| (i * 3 + 1) as u8).collect();
    b.buf.write(4096, &data);
    d.sq.post(&[to(0, read(a.addr(0), a.mr.lkey, b.addr(4096), b.mr.rkey, 2048))]).unwrap();
    let t = std::thread::spawn({
        let f = fabric.clone();
        move || {
            for _ in 0..1000 {
                f.step_until_idle();
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
    });
    d.sq.quiet().unwrap();
    let mut got = vec![0u8; 2048];
    a.buf.read(0, &mut got);
    assert_eq!(got, data);
    t.join().unwrap();
}

/// What a ConnectX gives for a WQE its target never answers. A DCT drops a
/// request with the wrong DC key (counting it: the DCT context's
/// access_violations and the DCT_KEY_VIOLATION event, 0x1d in Linux
/// include/linux/mlx5/device.h) and an unknown DCT number reaches no
/// responder: either way the initiator retries until it gives up, an error
/// CQE with TRANSPORT_RETRY_EXC_ERR, and the DCI is in error from then on.
fn failing_target(dctn_of: impl Fn(u32) -> u32, key_of: impl Fn(u64) -> u64) -> (Side, Side, u32, DeviceStatus, u8) {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 1 << 16, ALL);
    let b = Side::new(&fabric, "b", 1 << 16, ALL);
    let key = 0x0123_4567_89ab_cdef_u64;
    let db = b.nic.create_dct(b.pd, key);
    let d = dci(&a, &[(&b, dctn_of(db), key_of(key))], 6);
    a.buf.write(0, &[0xab; 64]);
    d.sq.post(&[signaled(to(0, write(a.addr(0), a.mr.lkey, b.addr(1024), b.mr.rkey, 64)))]).unwrap();
    fabric.step_until_idle();
    let s = d.sq.quiet().unwrap_err();
    let e = d.sq.error().expect("the error CQE is recorded");
    assert_eq!(e.qpn, d.qp.qpn, "the error names the DCI");
    assert_eq!(e.wqe_opcode, opcode::RDMA_WRITE);
    let mut got = [0u8; 64];
    b.buf.read(1024, &mut got);
    assert_eq!(got, [0u8; 64], "nothing reached the target's memory");
    // The DCI is in error: what follows is flushed.
    assert_eq!(d.sq.post(&[to(0, write(a.addr(0), a.mr.lkey, b.addr(0), b.mr.rkey, 8))]), Err(DeviceStatus::QpFailed));
    (a, b, db, s, e.syndrome)
}

#[test]
fn a_wrong_dc_key_ends_in_transport_retry_exceeded() {
    let (_a, b, db, status, synd) = failing_target(|d| d, |k| k ^ 1);
    assert_eq!(status, DeviceStatus::CqeError);
    assert_eq!(synd, syndrome::TRANSPORT_RETRY_EXC_ERR);
    assert_eq!(b.nic.dct_key_violations(db).unwrap(), 1, "the DCT counted the violation");
}

#[test]
fn an_unknown_dct_number_ends_in_transport_retry_exceeded() {
    let (_a, b, db, status, synd) = failing_target(|d| d + 100, |k| k);
    assert_eq!(status, DeviceStatus::CqeError);
    assert_eq!(synd, syndrome::TRANSPORT_RETRY_EXC_ERR);
    assert_eq!(b.nic.dct_key_violations(db).unwrap(), 0, "no DCT saw it");
}

/// An address vector that names no NIC of the fabric: nothing ever
/// answers, the same completion.
#[test]
fn an_address_of_no_nic_ends_in_transport_retry_exceeded() {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 1 << 16, ALL);
    let qp = EmuQp::create_dci(&a.nic, a.pd, QueueMem::new(&HostMemory, 6, RingHome::Host).unwrap()).unwrap();
    let table = HostMemory.alloc(64, 64, Object::Peers).unwrap();
    let mut av = a.nic.dc_address();
    av.rmac[5] ^= 0xff; // the GID names node 0's NIC, the MAC another
    table.write(0, &av.with_dc_addr(0x123, 7).encode());
    let error = new_error_record(&HostMemory).unwrap();
    let mut desc = qp.descriptor(0, error.dev_addr(), SECOND);
    desc.dc_targets = table.dev_addr();
    let sq = SendQueue::new(&HostMemory, &desc).unwrap();
    sq.post(&[signaled(write(a.addr(0), a.mr.lkey, a.addr(64), a.mr.rkey, 8))]).unwrap();
    fabric.step_until_idle();
    assert_eq!(sq.quiet(), Err(DeviceStatus::CqeError));
    assert_eq!(sq.error().unwrap().syndrome, syndrome::TRANSPORT_RETRY_EXC_ERR);
}

/// The emulated NIC reads a DCI's WQE as rdma-core lays it out: a WQE
/// without the datagram segment's EXTENDED_UD_AV bit (a short AV) is
/// refused as malformed, not executed.
#[test]
fn a_dc_wqe_without_the_extended_av_bit_is_refused() {
    use rccl_rust_gin::emu::wqe::decode_dc;
    use rccl_rust_gin::mlx5::wire::{CtrlSeg, DataSeg, RaddrSeg};
    let mut w = [0u8; 128];
    w[..16].copy_from_slice(
        &CtrlSeg { opmod: 0, wqe_index: 4, opcode: opcode::RDMA_WRITE, qpn: 9, ds: 6, signature: 0, fm_ce_se: 0, imm: 0 }
            .encode(),
    );
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 4096, ALL);
    let good = a.nic.dc_address().with_dc_addr(5, 6);
    w[16..64].copy_from_slice(&good.encode());
    w[64..80].copy_from_slice(&RaddrSeg { raddr: 0x1000, rkey: 3 }.encode());
    w[80..96].copy_from_slice(&DataSeg { byte_count: 8, lkey: 4, addr: 0x2000 }.encode());
    let (_, av) = decode_dc(&w, 4, 9).expect("a well-formed DC WRITE");
    assert_eq!(av, Some(good));
    let mut bad = good;
    bad.ext = false;
    w[16..64].copy_from_slice(&bad.encode());
    let e = decode_dc(&w, 4, 9).unwrap_err();
    assert_eq!(e.syndrome, syndrome::LOCAL_QP_OP_ERR);
    assert_eq!(e.wqebbs, 2);
}
