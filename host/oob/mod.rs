//! Out-of-band exchange between the ranks of one communicator, over TCP.
//!
//! RCCL hands a GIN backend a single allgather of 128-byte handles; queue
//! pair numbers (one per peer and context) and window keys need more. Each
//! rank therefore listens on a socket whose address travels in its handle,
//! and collectives run as direct messages: message i -> j goes on its own
//! short connection, sent in a pairwise schedule (step s: to rank+s, from
//! rank-s), so a rank holds at most one outgoing connection at a time and
//! setup grows linearly with the number of ranks. Every wait is bounded and
//! names the peers it still waits for.
//!
//! The socket is open to anyone who can reach it, so nothing that arrives is
//! trusted ([`inbox`]): every frame carries a MAC under a job key that only
//! ranks which saw RCCL's allgather of handles know (each handle carries a
//! random secret; [`frame::job_key`]); senders must be other ranks; memory
//! for early messages and half-read connections is bounded
//! ([`inbox::memory_bound`]); a silent connection is dropped after
//! [`inbox::CONN_TIMEOUT`] without holding up the others. TCP itself is not
//! encrypted: someone on the path sees the frames (not the key) and can cut
//! them, as with RCCL's own bootstrap; they cannot forge or replay one.

pub mod frame;
pub mod iface;
pub mod inbox;
mod siphash;

pub use frame::Key;
pub use iface::pick_address;

use crate::error::{Error, Result};
use inbox::Inbox;
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A listening socket, created at listen() time.
pub struct Listener {
    sock: TcpListener,
    addr: SocketAddr,
}

impl Listener {
    pub fn bind(ip: IpAddr) -> Result<Listener> {
        let sock = TcpListener::bind(SocketAddr::new(ip, 0))
            .map_err(|e| Error::System(format!("cannot listen on {ip}: {e}")))?;
        sock.set_nonblocking(true)?;
        let addr = sock.local_addr()?;
        Ok(Listener { sock, addr })
    }
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

struct State {
    inbox: Inbox,
    seq: u64,
}

/// Answers a mesh's collectives for all the other ranks, in place of the
/// sockets: a tool that emulates thousands of ranks in one process (gin-scale)
/// measures one real rank against it.
pub trait StandIn: Send + Sync {
    /// Collective number `seq` of rank `me` of `nranks`: `mine(r)` is what
    /// `me` gives rank r; returns what every rank gives `me` (entry `me`
    /// ignored: the mesh puts `mine(me)` there).
    fn alltoall(&self, seq: u64, me: u32, nranks: u32, mine: &dyn Fn(u32) -> Vec<u8>) -> Result<Vec<Vec<u8>>>;
}

/// The ranks of one communicator, able to run small collectives.
pub struct Mesh {
    rank: u32,
    peers: Vec<SocketAddr>,
    listener: Arc<Listener>,
    comm_id: u64,
    key: Key,
    timeout: Duration,
    /// Set by whoever gave up on this mesh (RMA v17's abortFlag): every
    /// wait of a collective stops at its next turn instead of at the timeout.
    cancel: Arc<AtomicBool>,
    state: Mutex<State>,
    /// Answers the collectives instead of the other ranks' sockets.
    stand_in: Option<Arc<dyn StandIn>>,
}

impl Mesh {
    /// `peers[r]` is rank r's listening address; `comm_id` must be the same on
    /// every rank (it keeps two communicators' messages apart), `key` too
    /// (frames without it are dropped).
    pub fn new(listener: Arc<Listener>, rank: u32, peers: Vec<SocketAddr>, comm_id: u64, key: Key, timeout: Duration) -> Mesh {
        let inbox = Inbox::new(rank, peers.len() as u32, key);
        let cancel = Arc::new(AtomicBool::new(false));
        Mesh { rank, peers, listener, comm_id, key, timeout, cancel, state: Mutex::new(State { inbox, seq: 0 }), stand_in: None }
    }

    /// Rank `rank` of `nranks` whose collectives `stand_in` answers; no
    /// socket is ever used (the listener is bound on loopback and idle).
    pub fn with_stand_in(rank: u32, nranks: u32, stand_in: Arc<dyn StandIn>) -> Result<Mesh> {
        let listener = Arc::new(Listener::bind(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))?);
        let peers = vec![listener.addr(); nranks as usize];
        let mut m = Mesh::new(listener, rank, peers, 0, [0u8; 16], Duration::from_secs(1));
        m.stand_in = Some(stand_in);
        Ok(m)
    }

    /// The same mesh, whose collectives give up once `cancel` is set.
    pub fn cancelled_by(mut self, cancel: Arc<AtomicBool>) -> Mesh {
        self.cancel = cancel;
        self
    }

    fn check_cancel(&self) -> Result<()> {
        if self.cancel.load(Ordering::Acquire) {
            return Err(Error::Internal(format!("connection setup of rank {} abandoned: its caller gave up", self.rank)));
        }
        Ok(())
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }
    pub fn nranks(&self) -> u32 {
        self.peers.len() as u32
    }
    /// Where this rank listens.
    pub fn listener_addr(&self) -> SocketAddr {
        self.listener.addr()
    }

    /// The tag of collective number `seq` on this communicator.
    pub fn tag(&self, seq: u64) -> u64 {
        self.comm_id.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ seq
    }

    /// Keeps at most `bytes` of early messages (below the built-in bound).
    pub fn limit_early_bytes(&self, bytes: usize) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).inbox.limit_early_bytes(bytes);
    }

    /// What the inbox has kept and dropped so far.
    pub fn stats(&self) -> inbox::Stats {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).inbox.stats.clone()
    }

    /// Every rank gives every other rank its own message; returns, per rank,
    /// what that rank gave us (our own entry is `payload(self.rank)`).
    pub fn alltoall(&self, payload: impl Fn(u32) -> Vec<u8>) -> Result<Vec<Vec<u8>>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.seq += 1;
        if let Some(s) = &self.stand_in {
            let mut got = s.alltoall(state.seq, self.rank, self.nranks(), &payload)?;
            if got.len() != self.peers.len() {
                return Err(Error::Internal(format!("the stand-in answered for {} of {} ranks", got.len(), self.peers.len())));
            }
            got[self.rank as usize] = payload(self.rank);
            return Ok(got);
        }
        let (tag, next) = (self.tag(state.seq), self.tag(state.seq + 1));
        let n = self.nranks();
        let deadline = Instant::now() + self.timeout;
        let outgoing: Vec<(u32, Vec<u8>)> =
            (1..n).map(|s| (self.rank + s) % n).map(|dst| (dst, payload(dst))).collect();
        if let Some((dst, m)) = outgoing.iter().find(|(_, m)| m.len() > frame::MAX_PAYLOAD) {
            return Err(Error::Internal(format!(
                "connection setup: a {}-byte message to rank {dst} exceeds the {}-byte frame limit",
                m.len(),
                frame::MAX_PAYLOAD
            )));
        }
        let mut got: Vec<Option<Vec<u8>>> = vec![None; n as usize];
        got[self.rank as usize] = Some(payload(self.rank));
        let dropped_before: u64 = state.inbox.stats.dropped.values().sum();
        state.inbox.begin(tag, next, &mut got);
        let inbox = &mut state.inbox;
        std::thread::scope(|s| -> Result<()> {
            let sender = s.spawn(|| -> Result<()> {
                for (dst, msg) in &outgoing {
                    self.send(*dst, tag, msg, deadline)?;
                }
                Ok(())
            });
            let recv = self.receive(inbox, tag, &mut got, deadline);
            let sent = sender.join().unwrap_or_else(|_| Err(Error::Internal("the OOB sender thread panicked".into())));
            recv.and(sent)
        })?;
        let dropped: u64 = state.inbox.stats.dropped.values().sum::<u64>() - dropped_before;
        if dropped > 0 {
            // One line per collective, however many frames a flood brought.
            tracing::warn!(
                "connection setup (rank {}): dropped {dropped} frame(s) from strangers or broken peers so far: {:?}",
                self.rank,
                state.inbox.stats.dropped
            );
        }
        Ok(got.into_iter().map(|p| p.expect("every rank answered")).collect())
    }

    /// Every rank's `payload`, indexed by rank.
    pub fn allgather(&self, payload: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.alltoall(|_| payload.to_vec())
    }

    /// Waits until every rank reached this point.
    pub fn barrier(&self) -> Result<()> {
        self.allgather(&[]).map(|_| ())
    }

    fn send(&self, dst: u32, tag: u64, msg: &[u8], deadline: Instant) -> Result<()> {
        let addr = self.peers[dst as usize];
        let frame = frame::encode(&self.key, tag, self.rank, dst, msg);
        loop {
            self.check_cancel()?;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout(format!(
                    "connection setup: rank {} cannot reach rank {dst} at {addr} within {} ms \
                     (RCCL_RUST_GIN_CONNECT_TIMEOUT_MS)",
                    self.rank,
                    self.timeout.as_millis()
                )));
            }
            // Tries of at most a second, so that a cancel is seen soon.
            match TcpStream::connect_timeout(&addr, left.min(Duration::from_secs(1))) {
                Ok(mut s) => {
                    s.set_write_timeout(Some(left.max(Duration::from_millis(1))))?;
                    return s.write_all(&frame).map_err(|e| Error::Remote(format!("sending to rank {dst} at {addr}: {e}")));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    fn receive(&self, inbox: &mut Inbox, tag: u64, got: &mut [Option<Vec<u8>>], deadline: Instant) -> Result<()> {
        while got.iter().any(Option::is_none) {
            self.check_cancel()?;
            let mut progressed = false;
            for _ in 0..inbox.room() {
                match self.listener.sock.accept() {
                    Ok((s, _)) => {
                        inbox.add(s);
                        progressed = true;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    // A peer that reset before we accepted: its problem, not ours.
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => {}
                    Err(e) => return Err(Error::System(format!("accepting a connection-setup message: {e}"))),
                }
            }
            progressed |= inbox.poll(tag, got);
            if !progressed {
                if Instant::now() > deadline {
                    return Err(self.timed_out(inbox, got));
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        Ok(())
    }

    /// The timeout error: which ranks (and where) never answered.
    fn timed_out(&self, inbox: &Inbox, got: &[Option<Vec<u8>>]) -> Error {
        let missing: Vec<usize> = (0..got.len()).filter(|&r| got[r].is_none()).collect();
        let shown: Vec<String> = missing.iter().take(8).map(|&r| format!("rank {r} at {}", self.peers[r])).collect();
        let more = if missing.len() > shown.len() { format!(" and {} more", missing.len() - shown.len()) } else { String::new() };
        Error::Timeout(format!(
            "connection setup: rank {} waited {} ms for {}{more} (RCCL_RUST_GIN_CONNECT_TIMEOUT_MS); is every rank \
             alive and reachable?{}",
            self.rank,
            self.timeout.as_millis(),
            shown.join(", "),
            if inbox.stats.dropped.is_empty() {
                String::new()
            } else {
                format!(" Frames dropped meanwhile: {:?}", inbox.stats.dropped)
            }
        ))
    }
}
