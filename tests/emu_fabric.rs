//! The in-process fabric's inbox: what a receiver takes, and that the
//! "maybe queued" flag a receiver reads without the lock (so that an empty
//! inbox costs a load: host/emu/fabric.rs, Node::queued) never hides a
//! packet. Emulated: packets between host threads.

use rccl_rust_gin::emu::fabric::Stepper;
use rccl_rust_gin::emu::packet::{Body, Packet};
use rccl_rust_gin::emu::Fabric;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A node that only counts the wake-ups it gets.
#[derive(Default)]
struct Counting(AtomicUsize);
impl Stepper for Counting {
    fn step(&self) -> bool {
        false
    }
    fn wake(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

fn packet(dst: u32, msg: u64) -> Packet {
    Packet { src_node: 0, dst_node: dst, src_qpn: 1, dst_qpn: 2, msg, dc_key: 0, body: Body::Ack }
}

fn msgs(q: &VecDeque<Packet>) -> Vec<u64> {
    q.iter().map(|p| p.msg).collect()
}

#[test]
fn inbox_gives_every_packet_once_in_order() {
    let fabric = Fabric::threads();
    let node = Arc::new(Counting::default());
    let as_stepper: Arc<dyn Stepper> = node.clone();
    let id = fabric.join(Arc::downgrade(&as_stepper)).unwrap();
    let mut out = VecDeque::new();

    // Nothing sent: nothing received.
    assert_eq!(fabric.recv_batch(id, &mut out, 16), 0);

    // One packet, then the inbox is empty again.
    assert!(fabric.try_send(packet(id, 1)).is_ok());
    assert_eq!(fabric.recv_batch(id, &mut out, 16), 1);
    assert_eq!(msgs(&out), [1]);
    out.clear();
    assert_eq!(fabric.recv_batch(id, &mut out, 16), 0);

    // A batch taken in two parts: the part left behind must still be found
    // (the flag stays set until the inbox is empty).
    let mut batch: VecDeque<Packet> = (2..=4).map(|m| packet(id, m)).collect();
    assert_eq!(fabric.send_batch(id, &mut batch).unwrap(), 3);
    assert!(batch.is_empty());
    assert_eq!(fabric.recv_batch(id, &mut out, 2), 2);
    assert_eq!(fabric.recv_batch(id, &mut out, 2), 1);
    assert_eq!(msgs(&out), [2, 3, 4]);
    out.clear();
    assert_eq!(fabric.recv_batch(id, &mut out, 16), 0);

    // Packets sent while the receiver holds some: appended behind them.
    assert!(fabric.try_send(packet(id, 5)).is_ok());
    out.push_back(packet(id, 0));
    assert_eq!(fabric.recv_batch(id, &mut out, 16), 1);
    assert_eq!(msgs(&out), [0, 5]);

    // Every send woke the node once (try_send x2, one send_batch).
    assert_eq!(node.0.load(Ordering::Relaxed), 3);
}
