//! The in-process fabric's inbox: what a receiver takes, and that the
//! "maybe queued" flag a receiver reads without the lock (so that an empty
//! inbox costs a load: host/emu/fabric.rs, Node::queued) never hides a
//! packet. And the threads that run the NICs (host/emu/nic/poller.rs):
//! NICs sharing one thread, stopped one at a time, and the provider's
//! RCCL_RUST_GIN_EMU_THREADS. Emulated: packets between host threads.

#[path = "support/emu.rs"]
mod emu;

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

/// Threads of this process whose name is exactly `name` (Linux keeps 15
/// bytes of it).
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.trim_end() == name)
        .count()
}

/// Polls `f` for up to 10 s (a NIC thread's progress is asynchronous).
fn eventually(what: &str, f: impl Fn() -> bool) {
    let t = std::time::Instant::now();
    while !f() {
        assert!(t.elapsed() < std::time::Duration::from_secs(10), "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn nics_sharing_a_poller_run_on_one_thread_and_leave_it_one_at_a_time() {
    use emu::{write_inline, Link, Side, ALL};
    use rccl_rust_gin::emu::nic::Poller;
    use rccl_rust_gin::emu::NicConfig;
    const SECOND: u64 = 1_000_000_000;
    let fabric = Fabric::threads();
    let poller = Poller::new("pshare");
    let config = |name: &str| NicConfig { name: name.into(), poller: Some(poller.clone()), ..Default::default() };
    let a = Side::with_config(&fabric, config("pa"), 1 << 16, ALL);
    let b = Side::with_config(&fabric, config("pb"), 1 << 16, ALL);
    assert_eq!(threads_named("emu-nic-pshare"), 0, "no thread before polling starts");
    a.nic.start_polling();
    b.nic.start_polling();
    // A thread names itself once it runs.
    eventually("the poller's thread", || threads_named("emu-nic-pshare") == 1);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(threads_named("emu-nic-pshare"), 1, "two NICs, one thread");
    assert_eq!((threads_named("emu-nic-pa"), threads_named("emu-nic-pb")), (0, 0), "no thread of their own");
    assert_eq!(poller.nics(), 2);

    // a -> b and b -> a, both NICs stepped by the one thread.
    let ab = Link::new(&a, &b, 6, 10 * SECOND);
    let ba = Link::new(&b, &a, 6, 10 * SECOND);
    ab.sq.post(&[write_inline(0x1111, 8, b.addr(0), b.mr.rkey)]).unwrap();
    ba.sq.post(&[write_inline(0x2222, 8, a.addr(8), a.mr.rkey)]).unwrap();
    ab.sq.quiet().unwrap();
    ba.sq.quiet().unwrap();
    let word = |s: &Side, off: usize| {
        let mut w = [0u8; 8];
        s.buf.read(off, &mut w);
        u64::from_ne_bytes(w)
    };
    assert_eq!((word(&b, 0), word(&a, 8)), (0x1111, 0x2222));

    // a leaves the thread: b is still stepped, a is not.
    a.nic.stop_polling();
    assert!(!a.nic.is_polling() && b.nic.is_polling());
    assert_eq!(threads_named("emu-nic-pshare"), 1, "the thread stays for b");
    let executed = a.nic.counters().writes;
    ab.sq.post(&[write_inline(0x3333, 8, b.addr(16), b.mr.rkey)]).unwrap();
    ba.sq.post(&[write_inline(0x4444, 8, a.addr(24), a.mr.rkey)]).unwrap();
    // b's WRITE reaches a's inbox, but a is stepped by nobody.
    eventually("b to execute its WRITE", || b.nic.counters().writes >= 2);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(a.nic.counters().writes, executed, "a stopped NIC executed a WQE");
    assert_eq!((word(&b, 16), word(&a, 24)), (0, 0), "nothing lands while a is not stepped");

    // Back on the thread: everything completes.
    a.nic.start_polling();
    ab.sq.quiet().unwrap();
    ba.sq.quiet().unwrap();
    assert_eq!((word(&b, 16), word(&a, 24)), (0x3333, 0x4444));

    // The last NIC to leave ends the thread (joined by stop_polling).
    a.nic.stop_polling();
    b.nic.stop_polling();
    assert_eq!(poller.nics(), 0);
    // Joined; the kernel may list the task a moment longer.
    eventually("the thread to end with its last NIC", || threads_named("emu-nic-pshare") == 0);
    // And a NIC's drop takes it off a running thread.
    b.nic.start_polling();
    eventually("a new thread for b", || threads_named("emu-nic-pshare") == 1);
    drop((ab, ba, b));
    assert_eq!(poller.nics(), 0);
    eventually("dropping the last NIC to end the thread", || threads_named("emu-nic-pshare") == 0);
}

#[test]
fn the_provider_shares_as_many_threads_as_rccl_rust_gin_emu_threads_says() {
    use rccl_rust_gin::config::{Config, EmuFabric, EmuThreads, ProviderKind};
    let open = |threads: EmuThreads, fabric: &str, nics: usize| {
        let config = Config {
            provider: ProviderKind::Emu,
            emu_fabric: EmuFabric::Local(fabric.into()),
            emu_threads: threads,
            rails: nics as u32,
            ..Config::default()
        };
        let provider = rccl_rust_gin::provider::select(&config).unwrap();
        (0..nics).map(|d| provider.open(d).unwrap()).collect::<Vec<_>>()
    };
    let pid = std::process::id();
    let own = |d: usize| format!("emu-nic-emu-{pid}-{d}").chars().take(15).collect::<String>();
    let shared = |k: usize| format!("emu-nic-f{k}");
    // Both assertions below count names only this test uses.
    {
        let _three = open(EmuThreads::Shared(2), "threads-2", 3);
        eventually("two named threads", || threads_named(&shared(0)) + threads_named(&shared(1)) == 2);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!((threads_named(&shared(0)), threads_named(&shared(1))), (1, 1), "3 NICs on 2 threads");
        assert_eq!(threads_named(&shared(2)), 0);
    }
    eventually("the threads to end with their NICs", || threads_named(&shared(0)) + threads_named(&shared(1)) == 0);
    {
        let _three = open(EmuThreads::PerNic, "threads-nic", 3);
        // Names may be cut to 15 bytes and so coincide: count them all.
        let mut names: Vec<String> = (0..3).map(own).collect();
        names.dedup();
        let count = || names.iter().map(|n| threads_named(n)).sum::<usize>();
        eventually("three named threads", || count() >= 3);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(count(), 3, "a thread per NIC");
    }
    assert!(matches!(EmuThreads::Auto.resolve(), Some(n) if n >= 1));
}
