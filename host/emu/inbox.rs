//! The NICs of one process and their inboxes: the whole in-process fabric
//! (ranks as threads), and the local half of the TCP fabric, whose event
//! loop delivers here what arrives for this process's NICs.

use super::packet::{Packet, WireError};
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

pub(super) struct Node {
    inbox: Mutex<VecDeque<Packet>>,
    /// Whether `inbox` may hold packets: set by a sender under the lock,
    /// cleared by the receiver that empties it. A receiver that finds it
    /// clear takes no lock (every step of a NIC looks; most find nothing).
    /// A packet pushed after that look wakes the NIC (Stepper::wake), whose
    /// next step finds the flag set.
    queued: AtomicBool,
    nic: Weak<dyn Stepper>,
}

/// The NICs of this process and their inboxes: the whole in-process fabric,
/// and the local half of the TCP fabric (whose event loop delivers here).
#[derive(Default)]
pub(super) struct Threads {
    /// Read on every packet, written when a NIC joins or leaves.
    nodes: RwLock<Vec<Option<Arc<Node>>>>,
}

impl Threads {
    pub(super) fn join(&self, nic: Weak<dyn Stepper>) -> u32 {
        let mut nodes = self.nodes.write().unwrap_or_else(|e| e.into_inner());
        nodes.push(Some(Arc::new(Node { inbox: Mutex::new(VecDeque::new()), queued: AtomicBool::new(false), nic })));
        (nodes.len() - 1) as u32
    }

    pub(super) fn leave(&self, node: u32) {
        if let Some(slot) = self.nodes.write().unwrap_or_else(|e| e.into_inner()).get_mut(node as usize) {
            *slot = None;
        }
    }

    pub(super) fn node(&self, id: u32) -> Option<Arc<Node>> {
        self.nodes.read().unwrap_or_else(|e| e.into_inner()).get(id as usize).cloned().flatten()
    }

    /// Whether some NIC's inbox holds more than `limit` packets.
    pub(super) fn any_backlog_over(&self, limit: usize) -> bool {
        let nodes = self.nodes.read().unwrap_or_else(|e| e.into_inner());
        nodes.iter().flatten().any(|n| {
            n.queued.load(Ordering::Acquire) && n.inbox.lock().unwrap_or_else(|e| e.into_inner()).len() > limit
        })
    }

    /// Queues the packets of `q` (all for `dst`, in order) in its inbox: one
    /// lock and one wake whatever the count.
    pub(super) fn deliver(&self, dst: u32, q: &mut VecDeque<Packet>) -> Result<usize, WireError> {
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

    pub(super) fn recv_batch(&self, node: u32, out: &mut VecDeque<Packet>, max: usize) -> usize {
        // Under the read lock, without taking a reference count.
        let nodes = self.nodes.read().unwrap_or_else(|e| e.into_inner());
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

    pub(super) fn recv(&self, node: u32) -> Option<Packet> {
        self.node(node)?.inbox.lock().unwrap_or_else(|e| e.into_inner()).pop_front()
    }

    pub(super) fn nics(&self) -> Vec<Arc<dyn Stepper>> {
        self.nodes.read().unwrap_or_else(|e| e.into_inner()).iter().flatten().filter_map(|n| n.nic.upgrade()).collect()
    }
}
