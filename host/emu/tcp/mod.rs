//! The TCP wire between emulated NICs on different hosts (or network
//! namespaces): the same packets as the shared-memory wire, in frames with a
//! sequence number and a CRC-32 each (frame.rs), over one connection per
//! ordered pair of processes, multiplexing every NIC of both (a process
//! opens a connection to each peer it sends to; the peer's acknowledgements
//! and reads come back on the peer's own connection).
//!
//! - One event-loop thread per process (event_loop.rs, on mio), not a thread
//!   per socket: a NIC's step never touches a socket; it appends frames to
//!   the peer's send buffer and wakes the loop.
//! - Flow control: a peer's send buffer holds at most [`OUT_LIMIT`] bytes;
//!   beyond, `send_batch` takes no more (the NIC keeps the packets in its
//!   outbox and goes on draining its own inbox, as with a full shared-memory
//!   ring), so no message size can deadlock. The loop stops reading from
//!   connections while a local NIC's inbox holds more than
//!   [`INBOX_LIMIT`] packets; TCP's window then slows exactly the peers
//!   sending to this process.
//! - Faults: a reset or closed connection, a connection on which nothing
//!   (not even a heartbeat) arrives for `dead_after` (a host that died, a
//!   partition, a half-open connection), a frame with a bad CRC or out of
//!   sequence: the peer is marked unreachable, with a WARN naming its listen
//!   address and the reason, and every operation towards it ends in an
//!   error CQE (the NIC's `check_peers`, within 100 ms of that). Peers are
//!   not reconnected: a job whose peer failed has to be restarted, as with
//!   RDMA after a QP enters the error state.

pub mod frame;
mod event_loop;

use super::inbox::Threads;
use super::packet::{Packet, WireError};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

/// Node ids at and above this name a NIC of another process (an alias made
/// by [`TcpWire::resolve`] or by the first packet it sent); below, a NIC of
/// this process.
pub const REMOTE: u32 = 0x8000_0000;
/// Bytes a peer's send buffer may hold before senders are held back.
pub const OUT_LIMIT: usize = 4 << 20;
/// Packets a local NIC's inbox may hold before the loop stops reading.
pub const INBOX_LIMIT: usize = 4096;

#[derive(Clone, Copy, Debug)]
pub struct TcpOptions {
    /// A connection on which nothing arrives for this long (heartbeats go
    /// every quarter of it) is dead; so is a connect that takes longer.
    pub dead_after: Duration,
    /// Identifies the fabric (the provider's hash of its spelling): a hello
    /// from another fabric is refused.
    pub fabric_id: u64,
}

impl Default for TcpOptions {
    fn default() -> TcpOptions {
        TcpOptions { dead_after: Duration::from_secs(5), fabric_id: 0 }
    }
}

/// Another process of the fabric, named by its listen address.
pub(super) struct Peer {
    pub addr: SocketAddr,
    pub out: Mutex<Out>,
    /// Bytes in `out` and in the loop's write buffer not yet written.
    pub queued: AtomicUsize,
    /// Why it is unreachable, once it is (the first reason stays).
    pub dead: OnceLock<String>,
    /// `out` has bytes the loop has not taken yet.
    pub flush: AtomicBool,
}

#[derive(Default)]
pub(super) struct Out {
    pub buf: Vec<u8>,
    /// Sequence number of the next data frame on the connection to it.
    pub seq: u64,
}

impl Peer {
    fn new(addr: SocketAddr) -> Peer {
        Peer { addr, out: Mutex::new(Out::default()), queued: AtomicUsize::new(0), dead: OnceLock::new(), flush: AtomicBool::new(false) }
    }
}

#[derive(Default)]
pub(super) struct Aliases {
    by_key: HashMap<(u32, u32), u32>,
    /// (peer index, that process's node id), by alias - REMOTE.
    list: Vec<(u32, u32)>,
}

pub(super) struct Shared {
    pub local: Threads,
    pub listen: SocketAddr,
    pub opts: TcpOptions,
    pub peers: RwLock<Vec<Arc<Peer>>>,
    pub aliases: RwLock<Aliases>,
    pub waker: mio::Waker,
    /// Some peer has `flush` set (or a new peer wants a connection).
    pub pending: AtomicBool,
    pub stop: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// The index of the peer listening at `addr` (added on first use).
    pub(super) fn peer_index(&self, addr: SocketAddr) -> usize {
        if let Some(i) = self.peers.read().unwrap_or_else(|e| e.into_inner()).iter().position(|p| p.addr == addr) {
            return i;
        }
        let mut w = self.peers.write().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = w.iter().position(|p| p.addr == addr) {
            return i;
        }
        w.push(Arc::new(Peer::new(addr)));
        w.len() - 1
    }

    pub(super) fn peer(&self, i: usize) -> Arc<Peer> {
        self.peers.read().unwrap_or_else(|e| e.into_inner())[i].clone()
    }

    /// The alias of node `node` of peer `peer`.
    pub(super) fn alias(&self, peer: usize, node: u32) -> Result<u32, WireError> {
        let key = (peer as u32, node);
        if let Some(a) = self.aliases.read().unwrap_or_else(|e| e.into_inner()).by_key.get(&key) {
            return Ok(*a);
        }
        let mut w = self.aliases.write().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = w.by_key.get(&key) {
            return Ok(*a);
        }
        if w.list.len() >= REMOTE as usize {
            return Err(WireError::UnknownNode(node));
        }
        let a = REMOTE | w.list.len() as u32;
        w.list.push(key);
        w.by_key.insert(key, a);
        Ok(a)
    }

    fn unalias(&self, alias: u32) -> Option<(usize, u32)> {
        let a = self.aliases.read().unwrap_or_else(|e| e.into_inner());
        a.list.get((alias - REMOTE) as usize).map(|&(p, n)| (p as usize, n))
    }

    /// Wakes the event loop (once until it looks).
    pub(super) fn kick(&self) {
        if !self.pending.swap(true, Ordering::AcqRel) {
            if let Err(e) = self.waker.wake() {
                tracing::warn!(error = %e, "emulated TCP fabric: could not wake the event loop");
            }
        }
    }
}

pub struct TcpWire {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TcpWire {
    /// Listens on `bind` and starts the event loop.
    pub fn start(bind: SocketAddr, opts: TcpOptions) -> std::io::Result<TcpWire> {
        let listener = mio::net::TcpListener::bind(bind)?;
        let listen = listener.local_addr()?;
        let poll = mio::Poll::new()?;
        let waker = mio::Waker::new(poll.registry(), event_loop::WAKER)?;
        let shared = Arc::new(Shared {
            local: Threads::default(),
            listen,
            opts,
            peers: RwLock::new(Vec::new()),
            aliases: RwLock::new(Aliases::default()),
            waker,
            pending: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("gin-tcp-{}", listen.port()))
            .spawn(move || event_loop::run(poll, listener, sh))?;
        tracing::debug!(%listen, "emulated TCP fabric: listening");
        Ok(TcpWire { shared, thread: Some(thread) })
    }

    pub fn listen_addr(&self) -> SocketAddr {
        self.shared.listen
    }

    pub(super) fn local(&self) -> &Threads {
        &self.shared.local
    }

    /// The node id by which this process's NICs reach NIC `node` of the
    /// process listening at `addr` (this process itself: `node`). Starts
    /// connecting to a new peer at once, so that an unreachable one is known
    /// early.
    pub fn resolve(&self, addr: SocketAddr, node: u32) -> Result<u32, WireError> {
        if addr == self.shared.listen {
            return Ok(node);
        }
        if node >= REMOTE {
            return Err(WireError::UnknownNode(node));
        }
        let p = self.shared.peer_index(addr);
        let a = self.shared.alias(p, node)?;
        self.shared.peer(p).flush.store(true, Ordering::Release);
        self.shared.kick();
        Ok(a)
    }

    fn remote(&self, node: u32) -> Result<(Arc<Peer>, u32), WireError> {
        let (p, n) = self.shared.unalias(node).ok_or(WireError::UnknownNode(node))?;
        Ok((self.shared.peer(p), n))
    }

    pub fn send_batch(&self, dst: u32, q: &mut VecDeque<Packet>) -> Result<usize, WireError> {
        if dst < REMOTE {
            return self.shared.local.deliver(dst, q);
        }
        let (peer, node) = self.remote(dst)?;
        if let Some(why) = peer.dead.get() {
            return Err(WireError::Unreachable { node: dst, peer: peer.addr.to_string(), why: why.clone() });
        }
        let mut n = 0;
        {
            let mut out = lock(&peer.out);
            while peer.queued.load(Ordering::Acquire) < OUT_LIMIT {
                let Some(mut p) = q.pop_front() else { break };
                p.dst_node = node;
                let before = out.buf.len();
                let seq = out.seq;
                frame::push_data(&mut out.buf, seq, &p);
                out.seq += 1;
                peer.queued.fetch_add(out.buf.len() - before, Ordering::AcqRel);
                n += 1;
            }
        }
        if n > 0 {
            peer.flush.store(true, Ordering::Release);
            self.shared.kick();
        }
        Ok(n)
    }

    pub fn peer_alive(&self, node: u32) -> bool {
        if node < REMOTE {
            return self.shared.local.node(node).is_some();
        }
        self.remote(node).is_ok_and(|(p, _)| p.dead.get().is_none())
    }

    pub fn peer_error(&self, node: u32) -> WireError {
        match self.remote(node) {
            Ok((p, _)) => WireError::Unreachable {
                node,
                peer: p.addr.to_string(),
                why: p.dead.get().cloned().unwrap_or_else(|| "no reason recorded".into()),
            },
            Err(e) => e,
        }
    }

    /// The listen address of the process of remote node `node`, for messages.
    pub fn describe(&self, node: u32) -> Option<SocketAddr> {
        self.remote(node).ok().map(|(p, _)| p.addr)
    }
}

impl Drop for TcpWire {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        let _ = self.shared.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
