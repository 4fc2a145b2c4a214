//! The fabric between emulated NICs: ranks as threads of one process (queues
//! in memory), ranks as processes (rings in shared memory, shm.rs), or ranks
//! on different hosts (TCP connections, tcp/).
//! Packets between two nodes arrive in the order they were sent; loopback to
//! the sending node works like any other destination.

use super::packet::{Packet, WireError};
use super::shm::{SendError, ShmWire};
use super::tcp::TcpWire;
use std::collections::VecDeque;
use std::sync::{Arc, Weak};

pub use super::inbox::Stepper;
use super::inbox::Threads;

enum Kind {
    Threads(Threads),
    Shm(ShmWire),
    Tcp(TcpWire),
}

/// A fabric handle; clones share the fabric.
#[derive(Clone)]
pub struct Fabric(Arc<Kind>);

/// A fabric handle that does not keep the fabric alive.
#[derive(Clone)]
pub struct WeakFabric(Weak<Kind>);

impl WeakFabric {
    pub fn upgrade(&self) -> Option<Fabric> {
        self.0.upgrade().map(Fabric)
    }
}

impl Fabric {
    /// Ranks as threads of this process.
    pub fn threads() -> Fabric {
        Fabric(Arc::new(Kind::Threads(Threads::default())))
    }

    /// Ranks as processes: creates the named shared-memory fabric for up to
    /// `max_nodes` NICs (one process creates, the others attach).
    pub fn shm_create(name: &str, max_nodes: u32) -> std::io::Result<Fabric> {
        Ok(Fabric(Arc::new(Kind::Shm(ShmWire::create(name, max_nodes)?))))
    }

    pub fn shm_attach(name: &str) -> std::io::Result<Fabric> {
        Ok(Fabric(Arc::new(Kind::Shm(ShmWire::attach(name)?))))
    }

    /// Attaches to the named shared-memory fabric or creates it (removing
    /// one a crashed job left behind).
    pub fn shm_open(name: &str, max_nodes: u32) -> std::io::Result<Fabric> {
        Ok(Fabric(Arc::new(Kind::Shm(ShmWire::open(name, max_nodes)?))))
    }

    /// Ranks on hosts joined by TCP: listens on `bind` (port 0: any) and
    /// starts the event loop (tcp/). Peers are named by their listen address
    /// ([`Fabric::listen_addr`]) together with a node id ([`Fabric::resolve`]).
    pub fn tcp(bind: std::net::SocketAddr, opts: super::tcp::TcpOptions) -> std::io::Result<Fabric> {
        Ok(Fabric(Arc::new(Kind::Tcp(TcpWire::start(bind, opts)?))))
    }

    /// The TCP fabric's listen address (None on the other fabrics).
    pub fn listen_addr(&self) -> Option<std::net::SocketAddr> {
        match &*self.0 {
            Kind::Tcp(t) => Some(t.listen_addr()),
            _ => None,
        }
    }

    /// The node id that names NIC `node` of the process listening at `peer`
    /// on this fabric (TCP: a local alias, made on first use; the NIC sends
    /// to it like to any other node). Other fabrics: `node` itself.
    pub fn resolve(&self, peer: Option<std::net::SocketAddr>, node: u32) -> Result<u32, WireError> {
        match (&*self.0, peer) {
            (Kind::Tcp(t), Some(p)) => t.resolve(p, node),
            (Kind::Tcp(_), None) => Err(WireError::UnknownNode(node)),
            (_, _) => Ok(node),
        }
    }

    /// The largest packet payload this wire carries (None: no limit).
    pub fn max_payload(&self) -> Option<usize> {
        match &*self.0 {
            Kind::Threads(_) => None,
            // Headers take well under 256 bytes of a packet.
            Kind::Shm(_) => Some(super::shm::MAX_PACKET - 256),
            Kind::Tcp(_) => Some(super::tcp::frame::MAX_FRAME - 1024),
        }
    }

    /// Whether `node` can still receive: false when its process is gone.
    pub fn peer_alive(&self, node: u32) -> bool {
        match &*self.0 {
            Kind::Threads(t) => t.node(node).is_some(),
            Kind::Shm(s) => s.peer_alive(node),
            Kind::Tcp(t) => t.peer_alive(node),
        }
    }

    /// Why `node` cannot be reached (once peer_alive says so), naming it as
    /// precisely as the fabric can.
    pub fn peer_error(&self, node: u32) -> WireError {
        match &*self.0 {
            Kind::Tcp(t) => t.peer_error(node),
            _ => WireError::PeerGone(node),
        }
    }

    pub fn downgrade(&self) -> WeakFabric {
        WeakFabric(Arc::downgrade(&self.0))
    }

    pub fn is_shared_memory(&self) -> bool {
        matches!(&*self.0, Kind::Shm(_))
    }

    /// Joins a NIC; returns its node id.
    pub fn join(&self, nic: Weak<dyn Stepper>) -> Result<u32, WireError> {
        match &*self.0 {
            Kind::Threads(t) => Ok(t.join(nic)),
            Kind::Shm(s) => s.join(),
            Kind::Tcp(t) => Ok(t.local().join(nic)),
        }
    }

    pub fn leave(&self, node: u32) {
        match &*self.0 {
            Kind::Threads(t) => t.leave(node),
            Kind::Shm(s) => s.leave(node),
            Kind::Tcp(t) => t.local().leave(node),
        }
    }

    /// Sends `p` unless the wire to its destination is full now (then the
    /// packet comes back in [`SendError::Full`]); never waits.
    pub fn try_send(&self, p: Packet) -> Result<(), SendError> {
        match &*self.0 {
            Kind::Shm(s) => s.try_send(p),
            _ => {
                let dst = p.dst_node;
                let mut q = VecDeque::from([p]);
                match self.send_batch(dst, &mut q) {
                    Ok(_) => match q.pop_front() {
                        Some(p) => Err(SendError::Full(p)),
                        None => Ok(()),
                    },
                    Err(e) => Err(SendError::Wire(e)),
                }
            }
        }
    }

    /// Sends the packets of `q` (all for `dst`, in order) until the wire is
    /// full; what it could not take stays in `q`. One lock and one wake for
    /// an in-process inbox, whatever the count. Returns how many went.
    pub fn send_batch(&self, dst: u32, q: &mut VecDeque<Packet>) -> Result<usize, WireError> {
        match &*self.0 {
            Kind::Threads(t) => t.deliver(dst, q),
            Kind::Tcp(t) => t.send_batch(dst, q),
            Kind::Shm(s) => {
                let mut n = 0;
                while let Some(p) = q.pop_front() {
                    match s.try_send(p) {
                        Ok(()) => n += 1,
                        Err(SendError::Full(p)) => {
                            q.push_front(p);
                            break;
                        }
                        Err(SendError::Wire(e)) => return Err(e),
                    }
                }
                Ok(n)
            }
        }
    }

    /// Moves up to `max` packets for `node` into `out` (one lock for an
    /// in-process inbox). Returns how many.
    pub fn recv_batch(&self, node: u32, out: &mut VecDeque<Packet>, max: usize) -> usize {
        match &*self.0 {
            Kind::Threads(t) => t.recv_batch(node, out, max),
            Kind::Tcp(t) => t.local().recv_batch(node, out, max),
            Kind::Shm(s) => {
                let mut k = 0;
                while k < max {
                    let Some(p) = s.recv(node) else { break };
                    out.push_back(p);
                    k += 1;
                }
                k
            }
        }
    }

    /// The next packet for `node`, if any.
    pub fn recv(&self, node: u32) -> Option<Packet> {
        match &*self.0 {
            Kind::Threads(t) => t.recv(node),
            Kind::Tcp(t) => t.local().recv(node),
            Kind::Shm(s) => s.recv(node),
        }
    }

    /// Deterministic mode: steps every NIC of this (in-process) fabric until
    /// none has work left. Returns the number of rounds that made progress.
    pub fn step_until_idle(&self) -> usize {
        let nics: Vec<Arc<dyn Stepper>> = match &*self.0 {
            Kind::Threads(t) => t.nics(),
            Kind::Shm(_) | Kind::Tcp(_) => Vec::new(),
        };
        let mut rounds = 0;
        loop {
            let mut progress = false;
            for n in &nics {
                progress |= n.step();
            }
            if !progress {
                return rounds;
            }
            rounds += 1;
        }
    }
}
