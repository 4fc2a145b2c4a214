//! What travels between emulated NICs: RC request and response packets of at
//! most one MTU of payload each, in order per QP pair.

use super::guarded::{self, Unmapped};
use super::wqe::AtomicKind;

/// Why the wire (the in-process fabric or a shared-memory ring) did not
/// carry a packet.
#[derive(Debug)]
pub enum WireError {
    UnknownNode(u32),
    /// A shared-memory ring stayed full: the receiving process is stuck or gone.
    Stalled { dst: u32, secs: u64 },
    /// The node's process is gone.
    PeerGone(u32),
    /// A packet larger than the wire carries.
    TooLarge { bytes: usize, max: usize },
    Closed,
    /// A NIC in another process of the TCP fabric cannot be reached: its
    /// listen address and why (a reset, a silent connection, a damaged or
    /// out-of-order frame).
    Unreachable { node: u32, peer: String, why: String },
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::UnknownNode(n) => write!(f, "no emulated NIC with node id {n} on this fabric"),
            WireError::Stalled { dst, secs } => {
                write!(f, "the shared-memory wire to node {dst} stayed full for {secs} s (is that process alive?)")
            }
            WireError::PeerGone(n) => write!(f, "the process of node {n} is gone"),
            WireError::TooLarge { bytes, max } => write!(f, "a packet of {bytes} bytes (the wire carries {max})"),
            WireError::Closed => write!(f, "the fabric is closed"),
            WireError::Unreachable { node, peer, why } => {
                write!(f, "the emulated NIC at {peer} (node {node:#x}) is unreachable over the TCP fabric: {why}")
            }
        }
    }
}

/// A packet's payload: up to [`Payload::SMALL`] bytes travel in the packet
/// itself (no allocation: 8-byte puts, signals), larger ones on the heap.
#[derive(Clone)]
pub enum Payload {
    Small { len: u8, bytes: [u8; Payload::SMALL] },
    Heap(Vec<u8>),
}

impl Payload {
    pub const SMALL: usize = 16;

    #[inline]
    pub fn new() -> Payload {
        Payload::Small { len: 0, bytes: [0; Payload::SMALL] }
    }

    /// Room for `cap` bytes, allocated only above [`Payload::SMALL`].
    #[inline]
    pub fn with_capacity(cap: usize) -> Payload {
        if cap <= Self::SMALL {
            Payload::new()
        } else {
            Payload::Heap(Vec::with_capacity(cap))
        }
    }

    #[inline]
    pub fn from_slice(d: &[u8]) -> Payload {
        let mut p = Payload::with_capacity(d.len());
        p.extend_from_slice(d);
        p
    }

    #[inline]
    pub fn extend_from_slice(&mut self, d: &[u8]) {
        match self {
            Payload::Small { len, bytes } if *len as usize + d.len() <= Self::SMALL => {
                bytes[*len as usize..*len as usize + d.len()].copy_from_slice(d);
                *len += d.len() as u8;
            }
            Payload::Small { len, bytes } => {
                let mut v = Vec::with_capacity(*len as usize + d.len());
                v.extend_from_slice(&bytes[..*len as usize]);
                v.extend_from_slice(d);
                *self = Payload::Heap(v);
            }
            Payload::Heap(v) => v.extend_from_slice(d),
        }
    }

    /// Appends `n` bytes read from `addr` (one copy, no per-byte loop);
    /// Err, with the payload's length unchanged, when the memory is not
    /// mapped (a buffer unmapped while registered).
    ///
    /// # Safety
    /// [addr, addr+n) must lie inside a registered region (checked by the
    /// caller), which may however have been unmapped.
    pub unsafe fn extend_from_raw(&mut self, addr: u64, n: usize) -> Result<(), Unmapped> {
        match self {
            Payload::Small { len, bytes } if *len as usize + n <= Self::SMALL => {
                // SAFETY: the destination lies inside `bytes`; the source per
                // the function contract.
                unsafe { guarded::copy(bytes.as_mut_ptr().add(*len as usize), addr as *const u8, n) }?;
                *len += n as u8;
                Ok(())
            }
            Payload::Small { len, bytes } => {
                let mut v = Vec::with_capacity(*len as usize + n);
                v.extend_from_slice(&bytes[..*len as usize]);
                *self = Payload::Heap(v);
                // SAFETY: per the function contract.
                unsafe { self.extend_from_raw(addr, n) }
            }
            Payload::Heap(v) => {
                v.reserve(n);
                // SAFETY: reserve() made room for n bytes after the length;
                // the source per the function contract.
                unsafe { guarded::copy(v.as_mut_ptr().add(v.len()), addr as *const u8, n) }?;
                // SAFETY: those n bytes are now initialized.
                unsafe { v.set_len(v.len() + n) };
                Ok(())
            }
        }
    }
}

impl Default for Payload {
    fn default() -> Payload {
        Payload::new()
    }
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Payload::Small { len, bytes } => &bytes[..*len as usize],
            Payload::Heap(v) => v,
        }
    }
}

impl From<Vec<u8>> for Payload {
    fn from(v: Vec<u8>) -> Payload {
        Payload::Heap(v)
    }
}

impl PartialEq for Payload {
    fn eq(&self, o: &Payload) -> bool {
        **self == **o
    }
}
impl Eq for Payload {}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// One packet of an RDMA WRITE message: payload for raddr+offset.
    Write { raddr: u64, rkey: u32, total: u64, offset: u64, last: bool, imm: Option<u32>, data: Payload },
    Read { raddr: u64, rkey: u32, len: u64 },
    Atomic { kind: AtomicKind, raddr: u64, rkey: u32, swap_add: u64, compare: u64 },
    /// The whole message `msg` was executed.
    Ack,
    /// The message failed at the responder with this requester syndrome.
    Nak { syndrome: u8 },
    ReadResponse { offset: u64, last: bool, data: Payload },
    AtomicResponse { old: u64 },
}

impl Body {
    pub fn is_request(&self) -> bool {
        matches!(self, Body::Write { .. } | Body::Read { .. } | Body::Atomic { .. })
    }
    pub fn payload_len(&self) -> usize {
        match self {
            Body::Write { data, .. } | Body::ReadResponse { data, .. } => data.len(),
            _ => 0,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    pub src_node: u32,
    pub dst_node: u32,
    pub src_qpn: u32,
    pub dst_qpn: u32,
    /// The requester's message number, echoed in responses.
    pub msg: u64,
    /// DC: the DC key of the request (the DCT checks it); 0 otherwise.
    pub dc_key: u64,
    pub body: Body,
}

// --- a flat encoding for the shared-memory wire ------------------------------

const T_WRITE: u8 = 1;
const T_READ: u8 = 2;
const T_ATOMIC: u8 = 3;
const T_ACK: u8 = 4;
const T_NAK: u8 = 5;
const T_READ_RESP: u8 = 6;
const T_ATOMIC_RESP: u8 = 7;

struct Writer(Vec<u8>);
impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v)
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes())
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes())
    }
    fn bytes(&mut self, d: &[u8]) {
        self.u32(d.len() as u32);
        self.0.extend_from_slice(d)
    }
}

struct Reader<'a>(&'a [u8], usize);
impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.0.get(self.1..self.1 + n)?;
        self.1 += n;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<Payload> {
        let n = self.u32()? as usize;
        Some(Payload::from_slice(self.take(n)?))
    }
}

impl Packet {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(64 + self.body.payload_len());
        self.encode_into(&mut v);
        v
    }

    /// Appends the encoding to `out` (the TCP fabric writes frames straight
    /// into its send buffer, without a packet-sized copy in between).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let mut w = Writer(std::mem::take(out));
        w.u32(self.src_node);
        w.u32(self.dst_node);
        w.u32(self.src_qpn);
        w.u32(self.dst_qpn);
        w.u64(self.msg);
        w.u64(self.dc_key);
        match &self.body {
            Body::Write { raddr, rkey, total, offset, last, imm, data } => {
                w.u8(T_WRITE);
                w.u64(*raddr);
                w.u32(*rkey);
                w.u64(*total);
                w.u64(*offset);
                w.u8(*last as u8);
                w.u8(imm.is_some() as u8);
                w.u32(imm.unwrap_or(0));
                w.bytes(data);
            }
            Body::Read { raddr, rkey, len } => {
                w.u8(T_READ);
                w.u64(*raddr);
                w.u32(*rkey);
                w.u64(*len);
            }
            Body::Atomic { kind, raddr, rkey, swap_add, compare } => {
                w.u8(T_ATOMIC);
                w.u8(matches!(kind, AtomicKind::CompareSwap) as u8);
                w.u64(*raddr);
                w.u32(*rkey);
                w.u64(*swap_add);
                w.u64(*compare);
            }
            Body::Ack => w.u8(T_ACK),
            Body::Nak { syndrome } => {
                w.u8(T_NAK);
                w.u8(*syndrome);
            }
            Body::ReadResponse { offset, last, data } => {
                w.u8(T_READ_RESP);
                w.u64(*offset);
                w.u8(*last as u8);
                w.bytes(data);
            }
            Body::AtomicResponse { old } => {
                w.u8(T_ATOMIC_RESP);
                w.u64(*old);
            }
        }
        *out = w.0;
    }

    pub fn decode(b: &[u8]) -> Option<Packet> {
        let mut r = Reader(b, 0);
        let (src_node, dst_node, src_qpn, dst_qpn, msg) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?, r.u64()?);
        let dc_key = r.u64()?;
        let body = match r.u8()? {
            T_WRITE => {
                let (raddr, rkey, total, offset) = (r.u64()?, r.u32()?, r.u64()?, r.u64()?);
                let last = r.u8()? != 0;
                let has_imm = r.u8()? != 0;
                let imm = r.u32()?;
                Body::Write { raddr, rkey, total, offset, last, imm: has_imm.then_some(imm), data: r.bytes()? }
            }
            T_READ => Body::Read { raddr: r.u64()?, rkey: r.u32()?, len: r.u64()? },
            T_ATOMIC => {
                let kind = if r.u8()? != 0 { AtomicKind::CompareSwap } else { AtomicKind::FetchAdd };
                Body::Atomic { kind, raddr: r.u64()?, rkey: r.u32()?, swap_add: r.u64()?, compare: r.u64()? }
            }
            T_ACK => Body::Ack,
            T_NAK => Body::Nak { syndrome: r.u8()? },
            T_READ_RESP => {
                let offset = r.u64()?;
                let last = r.u8()? != 0;
                Body::ReadResponse { offset, last, data: r.bytes()? }
            }
            T_ATOMIC_RESP => Body::AtomicResponse { old: r.u64()? },
            _ => return None,
        };
        Some(Packet { src_node, dst_node, src_qpn, dst_qpn, msg, dc_key, body })
    }
}

#[cfg(test)]
mod size {
    /// What the step moves per packet stays small (each byte is copied
    /// several times on its way through the outbox and the inbox): 96 bytes
    /// until DC's 8-byte key joined the header.
    #[test]
    fn a_packet_is_small() {
        assert!(std::mem::size_of::<super::Packet>() <= 104, "{}", std::mem::size_of::<super::Packet>());
    }
}
