//! The TCP fabric in one process, over loopback: two fabrics are two hosts
//! (each its own listener and event loop), and hand-written peers misbehave
//! as a network and its hosts can: a connection that goes silent
//! (half-open), a damaged byte, a lost frame, a refused connect. Each fault
//! ends the operations towards that peer in an error CQE within the
//! documented bound (RCCL_RUST_GIN_EMU_TCP_TIMEOUT_MS, plus a heartbeat period
//! of a quarter of it, plus 100 ms), with a
//! WARN naming the peer's address, and the healthy peer goes on unharmed.
//! Faults across network namespaces (a host that dies, a partition, netem)
//! are in tests/emu_tcp_netns.rs.
//!
//! Planted faults, each making these tests fail (checked by hand once):
//! - heartbeat timeouts off (event_loop.rs heartbeats_and_timeouts returned
//!   at once): `a_silent_peer_*` waited for the QP's own 60 s timeout and
//!   failed its bound;
//! - the CRC check removed from frame.rs `take`: `a_damaged_byte_*` saw no
//!   error, the write completed;
//! - the sequence check removed: `a_lost_frame_*` saw no error.

#[path = "support/emu.rs"]
mod emu;

use emu::*;
use rccl_rust_gin::device::DeviceStatus;
use rccl_rust_gin::emu::tcp::{frame, TcpOptions};
use rccl_rust_gin::emu::{EmuQp, Fabric};
use rccl_rust_gin::gpu::{HostMemory, RingHome};
use rccl_rust_gin::mlx5::queue::QueueMem;
use rccl_rust_gin::mlx5::sq::{new_error_record, SendQueue};
use rccl_rust_gin::mlx5::wire::syndrome;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

const SECOND: u64 = 1_000_000_000;
const MIB: usize = 1 << 20;
/// The fabrics' dead_after in these tests.
const DEAD_AFTER: Duration = Duration::from_millis(600);
/// The documented bound (dead_after + a heartbeat period + 100 ms of the
/// NIC's peer check), with
/// room for a loaded two-core machine.
const BOUND: Duration = Duration::from_millis(600 + 150 + 100 + 2000);

/// Everything traced, for the WARN checks.
fn log() -> &'static Mutex<Vec<u8>> {
    static LOG: OnceLock<&'static Mutex<Vec<u8>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let log: &'static Mutex<Vec<u8>> = Box::leak(Box::new(Mutex::new(Vec::new())));
        struct W(&'static Mutex<Vec<u8>>);
        impl Write for W {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let _ = tracing_subscriber::fmt().with_writer(move || W(log)).with_ansi(false).try_init();
        log
    })
}

fn warned_about(peer: SocketAddr) -> Vec<String> {
    let text = String::from_utf8_lossy(&log().lock().unwrap()).to_string();
    text.lines().filter(|l| l.contains("WARN") && l.contains(&peer.to_string())).map(String::from).collect()
}

fn fabric() -> Fabric {
    log();
    let opts = TcpOptions { dead_after: DEAD_AFTER, fabric_id: 7 };
    Fabric::tcp("127.0.0.1:0".parse().unwrap(), opts).expect("a TCP fabric on loopback")
}

/// A send queue on `a` to NIC `node` of the process listening at `peer`,
/// whose QP there is `qpn`; the QP's own timeout (60 s) is far beyond the
/// fabric's bound, so only the fabric can end an operation early.
fn queue_to(fa: &Fabric, a: &Side, peer: SocketAddr, node: u32, qpn: u32) -> (EmuQp, SendQueue, rccl_rust_gin::gpu::GpuBuf) {
    let qp = EmuQp::create(&a.nic, a.pd, QueueMem::new(&HostMemory, 8, RingHome::Host).unwrap()).unwrap();
    qp.connect(fa.resolve(Some(peer), node).expect("resolve"), qpn).unwrap();
    let error = new_error_record(&HostMemory).unwrap();
    let sq = SendQueue::new(&HostMemory, &qp.descriptor(1, error.dev_addr(), 60 * SECOND)).unwrap();
    (qp, sq, error)
}

/// Two fabrics (hosts) with a NIC each and RC queues both ways.
struct Pair {
    fa: Fabric,
    fb: Fabric,
    a: Side,
    b: Side,
    ab: (EmuQp, SendQueue, rccl_rust_gin::gpu::GpuBuf),
    _ba: EmuQp,
}

fn pair() -> Pair {
    let (fa, fb) = (fabric(), fabric());
    let a = Side::new(&fa, "a", 4 * MIB, ALL);
    let b = Side::new(&fb, "b", 4 * MIB, ALL);
    a.nic.start_polling();
    b.nic.start_polling();
    let ba = EmuQp::create(&b.nic, b.pd, QueueMem::new(&HostMemory, 8, RingHome::Host).unwrap()).unwrap();
    let ab = queue_to(&fa, &a, fb.listen_addr().unwrap(), b.nic.node(), ba.qpn);
    ba.connect(fb.resolve(fa.listen_addr(), a.nic.node()).unwrap(), ab.0.qpn).unwrap();
    Pair { fa, fb, a, b, ab, _ba: ba }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed ^ (i >> 11) as u8)).collect()
}

/// A put and a get of `len` bytes between the two hosts, checked.
fn put_and_get(p: &Pair, len: usize, seed: u8) {
    let data = pattern(len, seed);
    p.a.buf.write(0, &data);
    let sq = &p.ab.1;
    sq.post(&[write(p.a.addr(0), p.a.mr.lkey, p.b.addr(MIB as u64), p.b.mr.rkey, len as u32)]).unwrap();
    sq.quiet().unwrap_or_else(|e| panic!("put of {len} bytes: {e:?} {:?}", sq.error()));
    let mut got = vec![0u8; len];
    p.b.buf.read(MIB, &mut got);
    assert!(got == data, "put of {len} bytes landed wrong");
    sq.post(&[read(p.a.addr(2 * MIB as u64), p.a.mr.lkey, p.b.addr(MIB as u64), p.b.mr.rkey, len as u32)]).unwrap();
    sq.quiet().unwrap_or_else(|e| panic!("get of {len} bytes: {e:?} {:?}", sq.error()));
    p.a.buf.read(2 * MIB, &mut got);
    assert!(got == data, "get of {len} bytes landed wrong");
}

#[test]
fn puts_gets_and_atomics_cross_between_two_fabrics() {
    let p = pair();
    for (len, seed) in [(8, 1), (4096, 2), (64 << 10, 3), (MIB, 4), (2 * MIB - 3, 5)] {
        put_and_get(&p, len, seed);
    }
    // A fetch-and-add returns the old value across the wire.
    let sq = &p.ab.1;
    p.b.buf.write(0, &40u64.to_ne_bytes());
    sq.post(&[fetch_add(p.a.addr(8), p.a.mr.lkey, p.b.addr(0), p.b.mr.rkey, 2)]).unwrap();
    sq.quiet().unwrap();
    let (mut old, mut now) = ([0u8; 8], [0u8; 8]);
    p.a.buf.read(8, &mut old);
    p.b.buf.read(0, &mut now);
    assert_eq!((u64::from_ne_bytes(old), u64::from_ne_bytes(now)), (40, 42));
}

/// Many messages in flight at once, more than the sender's buffer
/// (OUT_LIMIT) holds: flow control holds senders back, nothing is lost.
#[test]
fn more_in_flight_than_the_send_buffer_holds_loses_nothing() {
    let p = pair();
    let sq = &p.ab.1;
    let data = pattern(MIB, 9);
    p.a.buf.write(0, &data);
    // 12 MiB in flight: three times OUT_LIMIT.
    let reqs: Vec<_> = (0..12).map(|_| write(p.a.addr(0), p.a.mr.lkey, p.b.addr(MIB as u64), p.b.mr.rkey, MIB as u32)).collect();
    sq.post(&reqs).unwrap();
    sq.quiet().unwrap_or_else(|e| panic!("{e:?} {:?}", sq.error()));
    let mut got = vec![0u8; MIB];
    p.b.buf.read(MIB, &mut got);
    assert!(got == data);
    let c = p.a.nic.counters();
    assert!(c.packets_sent >= 12 * (MIB as u64 / 4096), "{c:?}");
}

/// Ends with the error CQE of a write towards `peer` (posted on `sq`), in
/// the bound, and a WARN naming it; returns how long it took.
fn fails_within_bound(sq: &SendQueue, a: &Side, peer: SocketAddr, raddr: u64, rkey: u32) -> Duration {
    let t = Instant::now();
    let reqs: Vec<_> = (0..8).map(|i| write(a.addr(0), a.mr.lkey, raddr + 4096 * i, rkey, 4096)).collect();
    sq.post(&reqs).unwrap();
    let q = sq.quiet();
    let took = t.elapsed();
    assert!(matches!(q, Err(DeviceStatus::CqeError) | Err(DeviceStatus::QpFailed)), "{q:?}");
    assert_eq!(sq.error().expect("an error recorded").syndrome, syndrome::TRANSPORT_RETRY_EXC_ERR);
    assert!(took < BOUND, "the fault towards {peer} was reported after {took:?} (bound {BOUND:?})");
    let w = warned_about(peer);
    assert!(!w.is_empty(), "no WARN names {peer}");
    took
}

/// A peer that accepts the connection, reads everything and never writes a
/// byte: to the sender the connection is open, but nothing ever answers (a
/// half-open connection: its host lost the state, or hangs).
#[test]
fn a_silent_peer_half_open_fails_its_operations_in_the_bound_and_nobody_else() {
    let p = pair();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut sink = [0u8; 65536];
        while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
    });
    let (_qp, sq, _e) = queue_to(&p.fa, &p.a, fake, 0, 0x1234);
    let took = fails_within_bound(&sq, &p.a, fake, 0x10000, 0x99);
    assert!(took >= DEAD_AFTER / 2, "failed after {took:?}: before the peer could have been silent that long");
    assert!(warned_about(fake).iter().any(|l| l.contains("nothing heard")), "{:?}", warned_about(fake));
    // The healthy host on the same NIC is unaffected.
    put_and_get(&p, 64 << 10, 11);
    assert!(p.fa.peer_alive(p.fa.resolve(p.fb.listen_addr(), p.b.nic.node()).unwrap()));
}

/// A peer whose first heartbeat back carries a damaged byte: the CRC-32
/// catches it and the peer is unreachable at once (its stream cannot be
/// trusted any more).
#[test]
fn a_damaged_byte_fails_the_peer_at_once() {
    let p = pair();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut hb = Vec::new();
        frame::push_heartbeat(&mut hb);
        hb[9] ^= 0x40; // inside the sequence field
        s.write_all(&hb).unwrap();
        let mut sink = [0u8; 65536];
        while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
    });
    let (_qp, sq, _e) = queue_to(&p.fa, &p.a, fake, 0, 0x1234);
    fails_within_bound(&sq, &p.a, fake, 0x10000, 0x99);
    assert!(warned_about(fake).iter().any(|l| l.contains("CRC")), "{:?}", warned_about(fake));
    put_and_get(&p, 4096, 12);
}

/// A peer that connects to us and sends data frames 0 and 2: frame 1 was
/// lost. The sequence check catches it; that peer fails, the other not.
#[test]
fn a_lost_frame_fails_the_peer_and_nobody_else() {
    let p = pair();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake = l.local_addr().unwrap();
    // Our QP towards the fake, and the fake's "responder" packets to it.
    let (qp, sq, _e) = queue_to(&p.fa, &p.a, fake, 0, 0x1234);
    let to = p.fa.listen_addr().unwrap();
    let (node, qpn) = (p.a.nic.node(), qp.qpn);
    std::thread::spawn(move || {
        let _keep = l;
        let mut s = TcpStream::connect(to).unwrap();
        let mut b = Vec::new();
        frame::push_hello(&mut b, fake, 7);
        let ack = |msg| rccl_rust_gin::emu::packet::Packet {
            src_node: 0,
            dst_node: node,
            src_qpn: 0x1234,
            dst_qpn: qpn,
            msg,
            dc_key: 0,
            body: rccl_rust_gin::emu::packet::Body::Ack,
        };
        frame::push_data(&mut b, 0, &ack(1000));
        frame::push_data(&mut b, 2, &ack(1001));
        s.write_all(&b).unwrap();
        std::thread::sleep(Duration::from_secs(5));
    });
    fails_within_bound(&sq, &p.a, fake, 0x10000, 0x99);
    assert!(warned_about(fake).iter().any(|l| l.contains("frame 2 arrived where frame 1 was due")), "{:?}", warned_about(fake));
    put_and_get(&p, 4096, 13);
}

/// Nobody listens at the peer's address: the connect is refused and the
/// operations fail at once.
#[test]
fn a_refused_connect_fails_the_peer() {
    let p = pair();
    let gone = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let (_qp, sq, _e) = queue_to(&p.fa, &p.a, gone, 0, 0x1234);
    fails_within_bound(&sq, &p.a, gone, 0x10000, 0x99);
    put_and_get(&p, 4096, 14);
}

/// The GPU case's host side (docs/architecture.md, "GIN over Ethernet on
/// AMD GPUs without an RDMA NIC"): a queue mapped for kernels only has no
/// host doorbell, so its doorbell store reaches nobody (as a kernel's store
/// to a page of pinned memory); a NIC that polls doorbell records still
/// executes its WQEs, across the TCP fabric. Control (the planted fault):
/// the same queue on a NIC that does not poll is never executed and its
/// wait times out.
#[test]
fn a_queue_without_a_host_doorbell_runs_when_the_nic_polls_its_doorbell_record() {
    use rccl_rust_gin::emu::NicConfig;
    let (fa, fb) = (fabric(), fabric());
    let polled = NicConfig { name: "gpu-side".into(), poll_doorbell_records: true, ..NicConfig::default() };
    let a = Side::with_config(&fa, polled, 4 * MIB, ALL);
    let deaf = Side::new(&fa, "no-polling", 4 * MIB, ALL);
    let b = Side::new(&fb, "b", 4 * MIB, ALL);
    for s in [&a, &deaf, &b] {
        s.nic.start_polling();
    }
    let run = |from: &Side, timeout_ns: u64| {
        let peer = EmuQp::create(&b.nic, b.pd, QueueMem::new(&HostMemory, 8, RingHome::Host).unwrap()).unwrap();
        let qp = EmuQp::create(&from.nic, from.pd, QueueMem::new(&HostMemory, 8, RingHome::Host).unwrap()).unwrap();
        qp.connect(fa.resolve(fb.listen_addr(), b.nic.node()).unwrap(), peer.qpn).unwrap();
        peer.connect(fb.resolve(fa.listen_addr(), from.nic.node()).unwrap(), qp.qpn).unwrap();
        let error = new_error_record(&HostMemory).unwrap();
        let mut d = qp.descriptor(1, error.dev_addr(), timeout_ns);
        d.host_doorbell = 0; // mapped for GPU kernels only
        let sq = SendQueue::new(&HostMemory, &d).unwrap();
        // Connecting marks the QP for the NIC's next step; let that step
        // pass first, or it would find the WQE below without any doorbell.
        std::thread::sleep(Duration::from_millis(100));
        let data = pattern(64 << 10, 21);
        from.buf.write(0, &data);
        sq.post(&[write(from.addr(0), from.mr.lkey, b.addr(0), b.mr.rkey, 64 << 10)]).unwrap();
        let q = sq.quiet();
        let mut got = vec![0u8; 64 << 10];
        b.buf.read(0, &mut got);
        (q, got == data, qp, peer)
    };
    let (q, landed, _qp, _peer) = run(&a, 20 * SECOND);
    assert!(q.is_ok() && landed, "the polling NIC executed the queue: {q:?}, data landed: {landed}");
    let unowned = rccl_rust_gin::device::unowned_doorbells();
    assert!(unowned >= 1, "the doorbell store reached no NIC (counted as unowned)");
    b.buf.write(0, &vec![0u8; 64 << 10]);
    let (q, landed, _qp, _peer) = run(&deaf, SECOND / 2);
    assert!(matches!(q, Err(DeviceStatus::Timeout)) && !landed, "without polling nothing runs: {q:?}");
}

/// A receiver that does not keep up (its NIC not running at all, here):
/// 24 MiB towards it is more than its inbox limit (4096 packets) and the
/// sender's buffer (4 MiB) together, so the receiver's loop stops reading
/// and the sender's NIC holds the rest. Nobody fails meanwhile: the paused
/// side still sends heartbeats and does not count its sender as silent,
/// for longer than the fabric's timeout. Once the receiver runs, all of it
/// lands. (Planted fault, checked by hand: without the pause's refresh of
/// `last_rx` in event_loop.rs, the receiver declared the sender unreachable
/// after the timeout.)
#[test]
fn a_receiver_that_does_not_keep_up_slows_its_sender_and_fails_nobody() {
    let (fa, fb) = (fabric(), fabric());
    let a = Side::new(&fa, "a", 4 * MIB, ALL);
    let b = Side::new(&fb, "b", 4 * MIB, ALL);
    a.nic.start_polling(); // b's NIC does not run yet
    let ba = EmuQp::create(&b.nic, b.pd, QueueMem::new(&HostMemory, 8, RingHome::Host).unwrap()).unwrap();
    let (qp, sq, _e) = queue_to(&fa, &a, fb.listen_addr().unwrap(), b.nic.node(), ba.qpn);
    ba.connect(fb.resolve(fa.listen_addr(), a.nic.node()).unwrap(), qp.qpn).unwrap();
    let data = pattern(2 * MIB, 31);
    a.buf.write(0, &data);
    let reqs: Vec<_> = (0..12).map(|_| write(a.addr(0), a.mr.lkey, b.addr(0), b.mr.rkey, 2 * MIB as u32)).collect();
    sq.post(&reqs).unwrap();
    std::thread::sleep(DEAD_AFTER * 2);
    let alias_b = fa.resolve(fb.listen_addr(), b.nic.node()).unwrap();
    let alias_a = fb.resolve(fa.listen_addr(), a.nic.node()).unwrap();
    assert!(fa.peer_alive(alias_b) && fb.peer_alive(alias_a), "a slow receiver was taken for a dead one");
    assert!(sq.error().is_none(), "{:?}", sq.error());
    b.nic.start_polling();
    sq.quiet().unwrap_or_else(|e| panic!("{e:?} {:?}", sq.error()));
    let mut got = vec![0u8; 2 * MIB];
    b.buf.read(0, &mut got);
    assert!(got == data);
}
