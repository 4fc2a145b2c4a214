//! Connection setup (host/oob/) against hostile and broken peers, on
//! loopback: garbage, truncated and oversized frames, senders that are not
//! ranks, forged and replayed frames, floods of connections and of early
//! messages, silent connections; the memory bound, printed; timeouts that
//! name the rank; IPv6; and NCCL's interface selection syntax.
//!
//! Where ordering matters the test plays the other ranks itself (it knows
//! the job key, so its frames are authentic), which makes every case
//! deterministic.

use rccl_rust_gin::error::Error;
use rccl_rust_gin::oob::frame::{self, Key, Reject, HEADER, MAX_PAYLOAD};
use rccl_rust_gin::oob::iface::{self, IfAddr};
use rccl_rust_gin::oob::{inbox, Listener, Mesh};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A line on the terminal even when libtest captures output: the memory
/// bound is a figure this test reports, not only checks.
macro_rules! shown {
    ($($t:tt)*) => {{
        let line = format!("{}\n", format!($($t)*));
        // SAFETY: writing a valid buffer to fd 2.
        unsafe { libc::write(2, line.as_ptr() as *const libc::c_void, line.len()) };
    }};
}

const COMM: u64 = 0x5247_0000_7e57;
const KEY: Key = *b"sixteen byte key";
const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Real meshes for `n` ranks on `ip` (each rank its own listener).
fn meshes(n: u32, ip: IpAddr, timeout: Duration) -> Vec<Arc<Mesh>> {
    let ls: Vec<Arc<Listener>> = (0..n).map(|_| Arc::new(Listener::bind(ip).unwrap())).collect();
    let peers: Vec<SocketAddr> = ls.iter().map(|l| l.addr()).collect();
    (0..n).map(|r| Arc::new(Mesh::new(ls[r as usize].clone(), r, peers.clone(), COMM, KEY, timeout))).collect()
}

/// Sends raw bytes on a fresh connection and closes it.
fn send_raw(to: SocketAddr, bytes: &[u8]) {
    let mut s = TcpStream::connect(to).unwrap();
    s.write_all(bytes).unwrap();
}

/// Each rank's payload for round `k`.
fn payload(rank: u32, k: u32) -> Vec<u8> {
    format!("rank {rank} round {k}").into_bytes()
}

/// `rounds` allgathers on every mesh at once (rank 0 starts after `delay`);
/// every result is checked.
fn allgathers(ms: &[Arc<Mesh>], rounds: u32, delay: Duration) {
    std::thread::scope(|s| {
        for m in ms {
            s.spawn(move || {
                if m.rank() == 0 {
                    std::thread::sleep(delay);
                }
                for k in 0..rounds {
                    let got = m.allgather(&payload(m.rank(), k)).unwrap_or_else(|e| panic!("rank {}: {e}", m.rank()));
                    let want: Vec<Vec<u8>> = (0..m.nranks()).map(|r| payload(r, k)).collect();
                    assert_eq!(got, want, "rank {} round {k}", m.rank());
                }
            });
        }
    });
}

fn dropped(m: &Mesh, r: Reject) -> u64 {
    m.stats().dropped.get(&r).copied().unwrap_or(0)
}

#[test]
fn garbage_truncated_oversized_and_stranger_frames_are_dropped_and_setup_completes() {
    let ms = meshes(2, LO, Duration::from_secs(20));
    let to = ms[0].listener_addr();
    let tag = ms[0].tag(1);
    // A stranger, before rank 0 reads anything: each case on its own connection.
    send_raw(to, &[0xa5; 1000]); // garbage
    send_raw(to, &frame::encode(&KEY, tag, 1, 0, b"cut short")[..HEADER + 3]); // truncated
    send_raw(to, &frame::encode(&KEY, tag, 1, 0, b"")[..10]); // a cut header
    let mut huge = frame::encode(&KEY, tag, 1, 0, b"");
    huge[16..20].copy_from_slice(&((MAX_PAYLOAD + 1) as u32).to_le_bytes());
    send_raw(to, &huge); // a length over the limit: refused before any allocation
    send_raw(to, &frame::encode(&KEY, tag, 7, 0, b"not a rank")); // sender out of range
    send_raw(to, &frame::encode(&KEY, tag, 0, 0, b"from myself")); // the receiver itself
    send_raw(to, &frame::encode(b"a guessed key!!!", tag, 1, 0, b"evil address")); // no key
    allgathers(&ms, 3, Duration::ZERO);
    let m = &ms[0];
    for (r, n) in [(Reject::Garbage, 1), (Reject::Truncated, 2), (Reject::TooLong, 1), (Reject::WrongRank, 2), (Reject::BadMac, 1)] {
        assert_eq!(dropped(m, r), n, "{r:?}: {:?}", m.stats());
    }
}

#[test]
fn a_silent_connection_is_dropped_without_holding_up_the_others() {
    let ms = meshes(2, LO, Duration::from_secs(20));
    let silent = TcpStream::connect(ms[0].listener_addr()).unwrap();
    let t = Instant::now();
    std::thread::scope(|s| {
        let m1 = ms[1].clone();
        s.spawn(move || {
            // Rank 1 comes late: rank 0 waits with the silent connection open.
            std::thread::sleep(inbox::CONN_TIMEOUT + Duration::from_millis(700));
            m1.allgather(&payload(1, 0)).unwrap();
        });
        let got = ms[0].allgather(&payload(0, 0)).unwrap();
        assert_eq!(got[1], payload(1, 0));
    });
    assert!(t.elapsed() < Duration::from_secs(10));
    assert_eq!(dropped(&ms[0], Reject::Slow), 1, "{:?}", ms[0].stats());
    drop(silent);
}

#[test]
fn a_forged_or_replayed_frame_cannot_stand_in_for_a_rank() {
    let ms = meshes(3, LO, Duration::from_secs(20));
    let tag = ms[0].tag(1);
    // A stranger claims to be rank 1 with its own "address", before rank 1 speaks.
    send_raw(ms[0].listener_addr(), &frame::encode(b"stranger's key..", tag, 1, 0, b"10.6.6.6:666"));
    // An authentic frame from rank 1 to rank 0, replayed to rank 2.
    send_raw(ms[2].listener_addr(), &frame::encode(&KEY, tag, 1, 0, &payload(1, 0)));
    allgathers(&ms, 1, Duration::ZERO);
    assert_eq!(dropped(&ms[0], Reject::BadMac), 1);
    assert_eq!(dropped(&ms[2], Reject::BadMac), 1, "a frame for rank 0 does not verify at rank 2");
}

/// Plays ranks 1.. of an `n`-rank job around one real rank 0: their
/// listeners swallow what rank 0 sends.
struct Scripted {
    mesh: Arc<Mesh>,
    _sinks: Vec<TcpListener>,
}

impl Scripted {
    fn new(n: u32, timeout: Duration) -> Scripted {
        let l0 = Arc::new(Listener::bind(LO).unwrap());
        let sinks: Vec<TcpListener> = (1..n).map(|_| TcpListener::bind((LO, 0)).unwrap()).collect();
        let mut peers = vec![l0.addr()];
        peers.extend(sinks.iter().map(|s| s.local_addr().unwrap()));
        Scripted { mesh: Arc::new(Mesh::new(l0, 0, peers, COMM, KEY, timeout)), _sinks: sinks }
    }
    /// An authentic frame of collective `seq` from rank `from`.
    fn say(&self, seq: u64, from: u32, p: &[u8]) {
        send_raw(self.mesh.listener_addr(), &frame::encode(&KEY, self.mesh.tag(seq), from, 0, p));
    }
}

#[test]
fn early_messages_stay_within_the_bound_and_over_it_a_timeout_names_the_ranks() {
    let n = 4;
    let s = Scripted::new(n, Duration::from_millis(1500));
    s.mesh.limit_early_bytes(100);
    for ranks in [n, 1024, 1 << 20] {
        let b = inbox::memory_bound(ranks);
        shown!(
            "MEMORY BOUND for untrusted input, {ranks} ranks: {} early messages, {} bytes of early payload, {} bytes \
             of connection buffers ({} connections x {} bytes): {} bytes in all",
            b.early_count,
            b.early_bytes,
            b.connection_bytes,
            inbox::MAX_PENDING,
            HEADER + MAX_PAYLOAD,
            b.total()
        );
        assert!(b.total() <= inbox::EARLY_MAX_BYTES + b.connection_bytes);
    }
    shown!("(this test lowers the early payload bound to 100 bytes)");
    // Collective 2 arrives before collective 1 from every peer, 80 bytes each:
    // only the first fits in 100 bytes. Then duplicates, and collectives
    // further ahead or behind, which no rank sends.
    for from in 1..n {
        s.say(2, from, &[from as u8; 80]);
    }
    // (Fewer than the listener's accept backlog of 128: rank 0 is not
    // accepting yet.)
    for _ in 0..30 {
        s.say(2, 1, &[9; 80]);
        s.say(5, 2, &[9; 80]);
        s.say(0, 3, &[9; 80]);
    }
    for from in 1..n {
        s.say(1, from, &payload(from, 1));
    }
    let got = s.mesh.allgather(&payload(0, 1)).unwrap();
    assert_eq!(got[1..], [payload(1, 1), payload(2, 1), payload(3, 1)]);
    let st = s.mesh.stats();
    println!("observed: {st:?}");
    assert_eq!(st.early_peak_count, 1, "one early message kept");
    assert!(st.early_peak_bytes <= 100, "{st:?}");
    assert_eq!(st.dropped.get(&Reject::OverBound), Some(&2), "{st:?}");
    assert_eq!(st.dropped.get(&Reject::Stale), Some(&90), "duplicates and collectives out of reach: {st:?}");
    // Collective 2: rank 1's early message is there; ranks 2 and 3 sent theirs
    // once and it was dropped, so rank 0 times out naming them.
    let t = Instant::now();
    let e = s.mesh.allgather(&payload(0, 2)).unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e:?}");
    let m = e.to_string();
    for r in [2, 3] {
        assert!(m.contains(&format!("rank {r} at 127.0.0.1:")), "the timeout names rank {r}: {m}");
    }
    assert!(!m.contains("rank 1 at"), "rank 1's early message counted: {m}");
    assert!(m.contains("RCCL_RUST_GIN_CONNECT_TIMEOUT_MS") && m.contains("OverBound"), "{m}");
    assert!(t.elapsed() < Duration::from_secs(5), "bounded wait");
}

#[test]
fn a_connection_flood_keeps_memory_bounded_and_setup_completes() {
    let s = Scripted::new(2, Duration::from_secs(20));
    let to = s.mesh.listener_addr();
    let n_flood = 3 * inbox::MAX_PENDING;
    std::thread::scope(|sc| {
        // Rank 0 is receiving (accepting) while the flood comes: the
        // kernel's accept queue alone would stall the flood, not rank 0.
        let m = s.mesh.clone();
        let rank0 = sc.spawn(move || m.allgather(&payload(0, 1)));
        // More connections than are read at once, each silent: the oldest go.
        let flood: Vec<TcpStream> = (0..n_flood).map(|_| TcpStream::connect(to).unwrap()).collect();
        // And many frames of garbage.
        for _ in 0..200 {
            send_raw(to, &[0u8; HEADER]);
        }
        s.say(1, 1, &payload(1, 1));
        let got = rank0.join().unwrap().unwrap();
        assert_eq!(got[1], payload(1, 1));
        drop(flood);
    });
    let st = s.mesh.stats();
    println!("after a flood of {n_flood} silent connections and 200 garbage frames: {st:?}");
    assert!(st.pending_peak <= inbox::MAX_PENDING, "{st:?}");
    assert!(st.dropped.get(&Reject::TooManyConnections).is_some_and(|&d| d > 0), "{st:?}");
}

#[test]
fn a_rank_that_never_comes_is_named_in_the_timeout() {
    let ms = meshes(3, LO, Duration::from_millis(1200));
    let e = std::thread::scope(|s| {
        let m1 = ms[1].clone();
        let h = s.spawn(move || m1.allgather(b"one"));
        let e = ms[0].allgather(b"zero").unwrap_err();
        let _ = h.join();
        e
    });
    let m = e.to_string();
    assert!(matches!(e, Error::Timeout(_)), "{e:?}");
    assert!(m.contains(&format!("rank 2 at {}", ms[2].listener_addr())) && !m.contains("rank 1 at"), "{m}");
}

#[test]
fn setup_runs_over_ipv6() {
    let ms = meshes(3, IpAddr::V6(Ipv6Addr::LOCALHOST), Duration::from_secs(20));
    assert!(ms[0].listener_addr().is_ipv6());
    allgathers(&ms, 2, Duration::ZERO);
}

fn ifs() -> Vec<IfAddr> {
    [
        ("lo", "127.0.0.1"),
        ("lo", "::1"),
        ("docker0", "172.17.0.1"),
        ("eth1", "10.0.0.1"),
        ("eth10", "10.0.0.10"),
        ("ib0", "fe80::1"),
        ("ib0", "fd00::5"),
    ]
    .iter()
    .map(|(n, ip)| IfAddr { name: n.to_string(), ip: ip.parse().unwrap() })
    .collect()
}

#[test]
fn socket_ifname_prefixes_exact_names_exclusions_and_ipv6() {
    let f = ifs();
    let pick = |spec: Option<&str>| iface::choose(&f, spec).map(|ip| ip.to_string());
    assert_eq!(pick(None).unwrap(), "172.17.0.1", "the first non-loopback IPv4");
    assert_eq!(pick(Some("eth1")).unwrap(), "10.0.0.1", "a prefix: eth1 and eth10 match, eth1 first");
    assert_eq!(pick(Some("=eth10")).unwrap(), "10.0.0.10", "exact");
    assert_eq!(pick(Some("eth10,eth1")).unwrap(), "10.0.0.1", "list order does not rank interfaces");
    assert!(pick(Some("=eth")).is_err(), "exact: eth is no interface");
    assert_eq!(pick(Some("^lo,docker,eth")).unwrap(), "fd00::5", "IPv6 when only IPv6 is left; link-local skipped");
    assert_eq!(pick(Some("^=eth1,lo,docker0")).unwrap(), "10.0.0.10", "exact exclusion keeps eth10");
    assert_eq!(pick(Some("ib")).unwrap(), "fd00::5");
    assert_eq!(pick(Some("=lo")).unwrap(), "127.0.0.1", "IPv4 before IPv6 on one interface");
    for bad in ["", "=", "^", " , "] {
        let e = iface::choose(&f, Some(bad)).unwrap_err();
        assert!(e.to_string().contains("names no interface"), "{bad:?}: {e}");
    }
    let e = iface::choose(&f, Some("=eth")).unwrap_err().to_string();
    assert!(e.contains("RCCL_RUST_GIN_SOCKET_IFNAME") && e.contains("exact names") && e.contains("eth10 10.0.0.10"), "{e}");
    // Only link-local IPv6 left: nothing usable.
    assert!(iface::choose(&f[5..6], None).is_ok_and(|ip| ip == LO), "falls back to loopback");
    // This machine: the loopback interface by exact name.
    assert_eq!(iface::pick_address(Some("=lo")).unwrap(), LO);
}

/// A caller that gives up (RMA v17's abortFlag) cancels the mesh: a
/// collective waiting for a rank that never comes returns at its next turn,
/// not at the connect timeout, and says why.
#[test]
fn a_cancelled_setup_stops_waiting_at_once() {
    let ls: Vec<Arc<Listener>> = (0..2).map(|_| Arc::new(Listener::bind(LO).unwrap())).collect();
    let peers: Vec<SocketAddr> = ls.iter().map(|l| l.addr()).collect();
    let cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let timeout = Duration::from_secs(120);
    let m0 = Mesh::new(ls[0].clone(), 0, peers, COMM, KEY, timeout).cancelled_by(cancel.clone());
    let t = std::time::Instant::now();
    let e = std::thread::scope(|s| {
        let h = s.spawn(|| m0.allgather(b"zero"));
        std::thread::sleep(Duration::from_millis(300));
        cancel.store(true, std::sync::atomic::Ordering::Release);
        h.join().unwrap().unwrap_err()
    });
    let took = t.elapsed();
    assert!(matches!(e, Error::Internal(_)) && e.to_string().contains("abandoned"), "{e:?}");
    assert!(took >= Duration::from_millis(300), "it waited until cancelled ({took:?})");
    assert!(took < Duration::from_secs(5), "cancelled, not timed out after {timeout:?} ({took:?})");
}
