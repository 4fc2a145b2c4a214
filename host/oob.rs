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

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MAGIC: u32 = 0x5247_4f42; // "RGOB"
const MAX_PAYLOAD: usize = 64 << 20;

/// The address of the interface to listen on: `ifname` if given (a name,
/// several comma-separated, or a `^`-prefixed exclusion list as NCCL spells
/// it), else the first non-loopback IPv4 interface that is up, else loopback.
pub fn pick_address(ifname: Option<&str>) -> Result<IpAddr> {
    let mut found: Vec<(String, IpAddr)> = Vec::new();
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list we free below; we only read it.
    if unsafe { libc::getifaddrs(&mut ifa) } == 0 {
        let mut p = ifa;
        while !p.is_null() {
            // SAFETY: p walks the list getifaddrs returned.
            let e = unsafe { &*p };
            p = e.ifa_next;
            if e.ifa_addr.is_null() || e.ifa_flags & libc::IFF_UP as u32 == 0 {
                continue;
            }
            // SAFETY: a non-null sockaddr; the family tells its real type.
            let fam = unsafe { (*e.ifa_addr).sa_family } as i32;
            if fam != libc::AF_INET {
                continue;
            }
            // SAFETY: AF_INET means sockaddr_in.
            let sin = unsafe { &*(e.ifa_addr as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            // SAFETY: ifa_name is a NUL-terminated C string.
            let name = unsafe { std::ffi::CStr::from_ptr(e.ifa_name) }.to_string_lossy().into_owned();
            found.push((name, IpAddr::V4(ip)));
        }
        // SAFETY: freeing what getifaddrs allocated.
        unsafe { libc::freeifaddrs(ifa) };
    }
    match ifname {
        Some(spec) => {
            let (exclude, list) = match spec.strip_prefix('^') {
                Some(rest) => (true, rest),
                None => (false, spec),
            };
            let names: Vec<&str> = list.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
            let matches = |n: &str| names.iter().any(|w| n.starts_with(w.trim_start_matches('=')));
            found
                .iter()
                .find(|(n, _)| matches(n) != exclude)
                .map(|(_, ip)| *ip)
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "no IPv4 interface matches RCCL_RUST_GIN_SOCKET_IFNAME (or NCCL_SOCKET_IFNAME) {spec:?} (have: {})",
                        found.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
                    ))
                })
        }
        None => Ok(found
            .iter()
            .find(|(_, ip)| !ip.is_loopback())
            .map(|(_, ip)| *ip)
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))),
    }
}

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

struct Stash {
    /// Messages that arrived before anyone asked for them: (tag, from) -> payload.
    early: HashMap<(u64, u32), Vec<u8>>,
    seq: u64,
}

/// The ranks of one communicator, able to run small collectives.
pub struct Mesh {
    rank: u32,
    peers: Vec<SocketAddr>,
    listener: Arc<Listener>,
    comm_id: u64,
    timeout: Duration,
    stash: Mutex<Stash>,
}

impl Mesh {
    /// `peers[r]` is rank r's listening address; `comm_id` must be the same on
    /// every rank (it keeps two communicators' messages apart).
    pub fn new(listener: Arc<Listener>, rank: u32, peers: Vec<SocketAddr>, comm_id: u64, timeout: Duration) -> Mesh {
        Mesh { rank, peers, listener, comm_id, timeout, stash: Mutex::new(Stash { early: HashMap::new(), seq: 0 }) }
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }
    pub fn nranks(&self) -> u32 {
        self.peers.len() as u32
    }

    /// Every rank gives every other rank its own message; returns, per rank,
    /// what that rank gave us (our own entry is `payload(self.rank)`).
    pub fn alltoall(&self, payload: impl Fn(u32) -> Vec<u8>) -> Result<Vec<Vec<u8>>> {
        let mut stash = self.stash.lock().unwrap_or_else(|e| e.into_inner());
        stash.seq += 1;
        let tag = self.comm_id.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ stash.seq;
        let n = self.nranks();
        let deadline = Instant::now() + self.timeout;
        let outgoing: Vec<(u32, Vec<u8>)> =
            (1..n).map(|s| (self.rank + s) % n).map(|dst| (dst, payload(dst))).collect();
        let mut got: Vec<Option<Vec<u8>>> = vec![None; n as usize];
        got[self.rank as usize] = Some(payload(self.rank));
        for from in 0..n {
            if let Some(p) = stash.early.remove(&(tag, from)) {
                got[from as usize] = Some(p);
            }
        }
        std::thread::scope(|s| -> Result<()> {
            let sender = s.spawn(|| -> Result<()> {
                for (dst, msg) in &outgoing {
                    self.send(*dst, tag, msg, deadline)?;
                }
                Ok(())
            });
            let recv = self.receive(tag, &mut got, &mut stash.early, deadline);
            let sent = sender.join().unwrap_or_else(|_| Err(Error::Internal("the OOB sender thread panicked".into())));
            recv.and(sent)
        })?;
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
        let mut frame = Vec::with_capacity(20 + msg.len());
        frame.extend_from_slice(&MAGIC.to_le_bytes());
        frame.extend_from_slice(&tag.to_le_bytes());
        frame.extend_from_slice(&self.rank.to_le_bytes());
        frame.extend_from_slice(&(msg.len() as u32).to_le_bytes());
        frame.extend_from_slice(msg);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout(format!(
                    "connection setup: cannot reach rank {dst} at {addr} (RCCL_RUST_GIN_CONNECT_TIMEOUT_MS)"
                )));
            }
            match TcpStream::connect_timeout(&addr, left.min(Duration::from_secs(5))) {
                Ok(mut s) => {
                    s.set_write_timeout(Some(left.max(Duration::from_millis(1))))?;
                    return s.write_all(&frame).map_err(|e| Error::Remote(format!("sending to rank {dst} at {addr}: {e}")));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    fn receive(
        &self,
        tag: u64,
        got: &mut [Option<Vec<u8>>],
        early: &mut HashMap<(u64, u32), Vec<u8>>,
        deadline: Instant,
    ) -> Result<()> {
        while got.iter().any(Option::is_none) {
            match self.listener.sock.accept() {
                Ok((mut s, from_addr)) => {
                    s.set_nonblocking(false)?;
                    s.set_read_timeout(Some(Duration::from_secs(10)))?;
                    let Some((t, from, payload)) = read_frame(&mut s) else {
                        tracing::warn!(%from_addr, "connection setup: ignored a malformed message");
                        continue;
                    };
                    if from as usize >= got.len() {
                        continue;
                    }
                    if t == tag {
                        got[from as usize] = Some(payload);
                    } else {
                        early.insert((t, from), payload);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        let missing: Vec<usize> = (0..got.len()).filter(|&r| got[r].is_none()).collect();
                        return Err(Error::Timeout(format!(
                            "connection setup: no message from rank(s) {missing:?} within the timeout \
                             (RCCL_RUST_GIN_CONNECT_TIMEOUT_MS); is every rank alive and reachable?"
                        )));
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err(e) => return Err(Error::System(format!("accepting a connection-setup message: {e}"))),
            }
        }
        Ok(())
    }
}

fn read_frame(s: &mut TcpStream) -> Option<(u64, u32, Vec<u8>)> {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).ok()?;
    if u32::from_le_bytes(h[0..4].try_into().ok()?) != MAGIC {
        return None;
    }
    let tag = u64::from_le_bytes(h[4..12].try_into().ok()?);
    let from = u32::from_le_bytes(h[12..16].try_into().ok()?);
    let len = u32::from_le_bytes(h[16..20].try_into().ok()?) as usize;
    if len > MAX_PAYLOAD {
        return None;
    }
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).ok()?;
    Some((tag, from, p))
}
