//! Many producers, one send queue: 8 host threads standing in for lanes post
//! 102,400 puts through one 256-WQEBB send queue (wrapping it 400 times)
//! while the emulated NIC runs on its own thread.
//!
//! Checked: every put lands exactly once (fetch-and-adds count to exactly 1,
//! writes carry their own id), the NIC executed the WQE indices as one
//! gap-free, duplicate-free sequence, each thread's puts executed in the order
//! it posted them, and the NIC's and the device code's counters agree.

#[path = "support/emu.rs"]
mod emu;

use emu::*;
use rccl_rust_gin::emu::Fabric;
use rccl_rust_gin::mlx5::wire::opcode;
use std::collections::HashMap;

const THREADS: u64 = 8;
const PER_THREAD: u64 = 12_800;
const TOTAL: u64 = THREADS * PER_THREAD;

#[test]
fn eight_producers_one_queue_every_put_exactly_once_in_order() {
    let fabric = Fabric::threads();
    let a = Side::new(&fabric, "a", 4096, ALL);
    let b = Side::new(&fabric, "b", (TOTAL * 8) as usize, ALL);
    let link = Link::new(&a, &b, 8, 30_000_000_000);
    a.nic.start_trace();
    a.nic.start_polling();
    b.nic.start_polling();

    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (link, a, b) = (&link, &a, &b);
            s.spawn(move || {
                let mut k = 0;
                let mut batch = 1 + (t as usize % 5);
                while k < PER_THREAD {
                    let n = batch.min((PER_THREAD - k) as usize);
                    let reqs: Vec<_> = (0..n as u64)
                        .map(|j| {
                            let id = t * PER_THREAD + k + j;
                            let slot = b.addr(8 * id);
                            if id.is_multiple_of(2) {
                                write_inline(id + 1, 8, slot, b.mr.rkey)
                            } else {
                                fetch_add(a.addr(8 * t), a.mr.lkey, slot, b.mr.rkey, 1)
                            }
                        })
                        .collect();
                    link.sq.post(&reqs).unwrap_or_else(|e| panic!("thread {t}: post failed: {e:?}: {:?}", link.sq.error()));
                    k += n as u64;
                    batch = batch % 16 + 1;
                }
            });
        }
    });
    link.sq.quiet().unwrap_or_else(|e| panic!("quiet failed: {e:?}: {:?}", link.sq.error()));
    a.nic.stop_polling();
    b.nic.stop_polling();

    // Every put exactly once.
    let mut lost = Vec::new();
    let mut wrong = Vec::new();
    for id in 0..TOTAL {
        let mut w = [0u8; 8];
        b.buf.read(8 * id as usize, &mut w);
        let v = u64::from_ne_bytes(w);
        let want = if id % 2 == 0 { id + 1 } else { 1 };
        if v == 0 {
            lost.push(id);
        } else if v != want {
            wrong.push((id, v));
        }
    }
    assert!(lost.is_empty(), "{} puts never landed, first {:?}", lost.len(), &lost[..lost.len().min(8)]);
    assert!(wrong.is_empty(), "{} puts landed wrongly (a duplicated fetch-add shows as 2): {:?}", wrong.len(), &wrong[..wrong.len().min(8)]);

    // One gap-free sequence of WQE indices; each thread's puts in order.
    let trace: Vec<_> = a.nic.take_trace().into_iter().filter(|e| e.qpn == link.qp.qpn).collect();
    let puts: Vec<_> = trace.iter().filter(|e| e.opcode != opcode::NOP).collect();
    assert_eq!(puts.len() as u64, TOTAL, "executed puts");
    for (i, e) in trace.iter().enumerate() {
        assert_eq!(e.index, i as u16, "WQE #{i} executed out of sequence (gap or duplicate)");
    }
    let mut last: HashMap<u64, u64> = HashMap::new();
    for e in &puts {
        let id = (e.raddr - b.addr(0)) / 8;
        let t = id / PER_THREAD;
        if let Some(prev) = last.insert(t, id) {
            assert!(id > prev, "thread {t}: put {id} executed after {prev}");
        }
    }

    // The counters add up.
    let ca = a.nic.counters();
    let st = link.sq.state();
    let nops = trace.len() as u64 - TOTAL;
    assert_eq!(st.resv, TOTAL + nops);
    assert_eq!(st.done, st.resv, "everything credited back");
    assert_eq!(ca.wqebbs_read, st.resv, "one WQEBB per WQE");
    assert_eq!(ca.writes + ca.atomics, TOTAL);
    assert_eq!(ca.writes, TOTAL / 2);
    assert_eq!(ca.doorbells, st.doorbells, "every doorbell the device rang reached the NIC, no more");
    assert!(ca.doorbells <= TOTAL, "doorbells are per batch, never more than per WQE");
    assert_eq!(ca.cqes_written, st.cq_ci, "every CQE written was consumed");
    assert_eq!(ca.error_cqes, 0);
    assert_eq!(ca.cq_overruns, 0);
    assert_eq!(ca.doorbells_misdirected, 0);
    let cb = b.nic.counters();
    // The requester reads each payload once, the responder writes it once;
    // an atomic moves 8 bytes at the responder.
    assert_eq!(ca.payload_bytes, 8 * TOTAL / 2, "requester side: write payloads read");
    assert_eq!(cb.payload_bytes, 8 * TOTAL / 2 + 8 * TOTAL / 2, "responder side: writes placed, atomics applied");
    println!(
        "stress: {TOTAL} puts, {} doorbells ({:.2} WQEs per doorbell), {} CQEs, {} NOPs, queue wrapped {} times",
        ca.doorbells,
        st.resv as f64 / ca.doorbells as f64,
        ca.cqes_written,
        nops,
        st.resv / 256
    );
}
