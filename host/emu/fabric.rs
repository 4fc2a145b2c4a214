//! The fabric between emulated NICs: ranks as threads of one process (queues
//! in memory), or ranks as processes (rings in shared memory, shm.rs).
//! Packets between two nodes arrive in the order they were sent; loopback to
//! the sending node works like any other destination.

use super::packet::{Packet, WireError};
use super::shm::{SendError, ShmWire};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

/// Something the fabric can step (a NIC), for the deterministic mode.
pub trait Stepper: Send + Sync {
    /// Does all work available now; true if anything happened.
    fn step(&self) -> bool;
    /// Wakes a polling thread, if any (a packet or doorbell arrived).
    fn wake(&self);
}

struct Node {
    inbox: Mutex<VecDeque<Packet>>,
    /// Whether `inbox` may hold packets: set by a sender under the lock,
    /// cleared by the receiver that empties it. A receiver that finds it
    /// clear takes no lock (every step of a NIC looks; most find nothing).
    /// A packet pushed after that look wakes the NIC (Stepper::wake), whose
    /// next step finds the flag set.
    queued: AtomicBool,
    nic: Weak<dyn Stepper>,
}

#[derive(Default)]
struct Threads {
    /// Read on every packet, written when a NIC joins or leaves.
    nodes: RwLock<Vec<Option<Arc<Node>>>>,
}

enum Kind {
    Threads(Threads),
    Shm(ShmWire),
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

    /// The largest packet payload this wire carries (None: no limit).
    pub fn max_payload(&self) -> Option<usize> {
        match &*self.0 {
            Kind::Threads(_) => None,
            // Headers take well under 256 bytes of a packet.
            Kind::Shm(_) => Some(super::shm::MAX_PACKET - 256),
        }
    }

    /// Whether `node` can still receive: false when its process is gone.
    pub fn peer_alive(&self, node: u32) -> bool {
        match &*self.0 {
            Kind::Threads(_) => self.node(node).is_some(),
            Kind::Shm(s) => s.peer_alive(node),
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
            Kind::Threads(t) => {
                let mut nodes = t.nodes.write().unwrap_or_else(|e| e.into_inner());
                nodes.push(Some(Arc::new(Node { inbox: Mutex::new(VecDeque::new()), queued: AtomicBool::new(false), nic })));
                Ok((nodes.len() - 1) as u32)
            }
            Kind::Shm(s) => s.join(),
        }
    }

    pub fn leave(&self, node: u32) {
        match &*self.0 {
            Kind::Threads(t) => {
                if let Some(slot) = t.nodes.write().unwrap_or_else(|e| e.into_inner()).get_mut(node as usize) {
                    *slot = None;
                }
            }
            Kind::Shm(s) => s.leave(node),
        }
    }

    fn node(&self, id: u32) -> Option<Arc<Node>> {
        match &*self.0 {
            Kind::Threads(t) => t.nodes.read().unwrap_or_else(|e| e.into_inner()).get(id as usize).cloned().flatten(),
            Kind::Shm(_) => None,
        }
    }

    /// Sends `p` unless the wire to its destination is full now (then the
    /// packet comes back in [`SendError::Full`]); never waits.
    pub fn try_send(&self, p: Packet) -> Result<(), SendError> {
        match &*self.0 {
            Kind::Threads(_) => {
                let node = self.node(p.dst_node).ok_or(SendError::Wire(WireError::UnknownNode(p.dst_node)))?;
                let mut inbox = node.inbox.lock().unwrap_or_else(|e| e.into_inner());
                inbox.push_back(p);
                node.queued.store(true, Ordering::Release);
                drop(inbox);
                if let Some(nic) = node.nic.upgrade() {
                    nic.wake();
                }
                Ok(())
            }
            Kind::Shm(s) => s.try_send(p),
        }
    }

    /// Sends the packets of `q` (all for `dst`, in order) until the wire is
    /// full; what it could not take stays in `q`. One lock and one wake for
    /// an in-process inbox, whatever the count. Returns how many went.
    pub fn send_batch(&self, dst: u32, q: &mut VecDeque<Packet>) -> Result<usize, WireError> {
        match &*self.0 {
            Kind::Threads(_) => {
                let node = self.node(dst).ok_or(WireError::UnknownNode(dst))?;
                let n = q.len();
                let mut inbox = node.inbox.lock().unwrap_or_else(|e| e.into_inner());
                if inbox.is_empty() {
                    // The usual case: hand the whole queue over (buffers trade
                    // places) instead of moving packet by packet.
                    std::mem::swap(&mut *inbox, q);
                } else {
                    inbox.extend(q.drain(..));
                }
                node.queued.store(true, Ordering::Release);
                drop(inbox);
                if let Some(nic) = node.nic.upgrade() {
                    nic.wake();
                }
                Ok(n)
            }
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
            Kind::Threads(t) => {
                // Under the read lock, without taking a reference count.
                let nodes = t.nodes.read().unwrap_or_else(|e| e.into_inner());
                let Some(Some(n)) = nodes.get(node as usize) else { return 0 };
                if !n.queued.load(Ordering::Acquire) {
                    return 0;
                }
                let mut inbox = n.inbox.lock().unwrap_or_else(|e| e.into_inner());
                let k = inbox.len().min(max);
                if k == inbox.len() && out.is_empty() {
                    std::mem::swap(&mut *inbox, out); // all of it: trade buffers
                } else {
                    out.extend(inbox.drain(..k));
                }
                if inbox.is_empty() {
                    n.queued.store(false, Ordering::Relaxed);
                }
                k
            }
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
            Kind::Threads(_) => self.node(node)?.inbox.lock().unwrap_or_else(|e| e.into_inner()).pop_front(),
            Kind::Shm(s) => s.recv(node),
        }
    }

    /// Deterministic mode: steps every NIC of this (in-process) fabric until
    /// none has work left. Returns the number of rounds that made progress.
    pub fn step_until_idle(&self) -> usize {
        let nics: Vec<Arc<dyn Stepper>> = match &*self.0 {
            Kind::Threads(t) => t
                .nodes
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .flatten()
                .filter_map(|n| n.nic.upgrade())
                .collect(),
            Kind::Shm(_) => Vec::new(),
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
