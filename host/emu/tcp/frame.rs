//! The byte stream between two processes of the TCP fabric: frames, each
//! with a sequence number (data frames) and a CRC-32 over everything but
//! the CRC itself, so that a lost, repeated, reordered or damaged packet is
//! an error that names the peer, never a silent loss.
//!
//! Layout (little-endian):
//! `len u32` (bytes after this field) | `kind u8` | 3 reserved | `seq u64` |
//! `crc32 u32` over bytes 4..16 and 20..end | body.
//!
//! Bodies: HELLO (first frame of a connection, from the side that opened
//! it): magic u32, version u16, ip family u8 (4 or 6), reserved u8, ip [16],
//! port u16, fabric id u64: the opener's listen address, which names it.
//! DATA: one [`Packet`] as `Packet::encode` writes it, its node ids those of
//! the sending and the receiving process. HEARTBEAT: empty.

use crate::emu::packet::Packet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

pub const HEADER: usize = 20;
/// No frame is larger: a packet carries at most one MTU (64 KiB at most)
/// plus well under 256 bytes of headers. A longer length is corruption.
pub const MAX_FRAME: usize = (1 << 16) + 1024;

pub const HELLO: u8 = 1;
pub const DATA: u8 = 2;
pub const HEARTBEAT: u8 = 3;

const MAGIC: u32 = 0x5043_5447; // "GTCP"
const VERSION: u16 = 1;
const HELLO_BODY: usize = 4 + 2 + 1 + 1 + 16 + 2 + 8;

/// Why a received stream cannot be trusted any more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    Length(usize),
    Checksum { seq: u64 },
    /// A data frame out of order: `want` was next.
    Sequence { want: u64, got: u64 },
    Kind(u8),
    Body(&'static str),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Length(n) => write!(f, "a frame claims {n} bytes (at most {MAX_FRAME})"),
            FrameError::Checksum { seq } => write!(f, "frame {seq} failed its CRC-32 check"),
            FrameError::Sequence { want, got } => write!(f, "frame {got} arrived where frame {want} was due (lost or reordered)"),
            FrameError::Kind(k) => write!(f, "unknown frame kind {k}"),
            FrameError::Body(w) => write!(f, "malformed frame body: {w}"),
        }
    }
}

fn crc(frame: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&frame[4..16]);
    h.update(&frame[20..]);
    h.finalize()
}

/// Appends one frame to `out`; `body` writes the body.
fn push(out: &mut Vec<u8>, kind: u8, seq: u64, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER]);
    body(out);
    let len = out.len() - start - 4;
    out[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
    out[start + 4] = kind;
    out[start + 8..start + 16].copy_from_slice(&seq.to_le_bytes());
    let c = crc(&out[start..]);
    out[start + 16..start + 20].copy_from_slice(&c.to_le_bytes());
}

pub fn push_data(out: &mut Vec<u8>, seq: u64, p: &Packet) {
    push(out, DATA, seq, |b| p.encode_into(b));
}

pub fn push_heartbeat(out: &mut Vec<u8>) {
    push(out, HEARTBEAT, 0, |_| {});
}

pub fn push_hello(out: &mut Vec<u8>, me: SocketAddr, fabric: u64) {
    push(out, HELLO, 0, |b| {
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&VERSION.to_le_bytes());
        let mut ip = [0u8; 16];
        match me.ip() {
            IpAddr::V4(v4) => {
                b.push(4);
                ip[..4].copy_from_slice(&v4.octets());
            }
            IpAddr::V6(v6) => {
                b.push(6);
                ip = v6.octets();
            }
        }
        b.push(0);
        b.extend_from_slice(&ip);
        b.extend_from_slice(&me.port().to_le_bytes());
        b.extend_from_slice(&fabric.to_le_bytes());
    });
}

/// One frame taken from the front of a stream.
#[derive(Debug)]
pub enum Frame {
    Hello { addr: SocketAddr, fabric: u64 },
    Data(Packet),
    Heartbeat,
}

/// Takes the next whole frame off `buf` (None: not all of it arrived yet).
/// `next_seq` is the data frame due next; it moves on past a good one.
pub fn take(buf: &[u8], next_seq: &mut u64) -> Result<Option<(Frame, usize)>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().expect("4")) as usize;
    if !(HEADER - 4..=MAX_FRAME).contains(&len) {
        return Err(FrameError::Length(len));
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    let f = &buf[..4 + len];
    let seq = u64::from_le_bytes(f[8..16].try_into().expect("8"));
    if crc(f) != u32::from_le_bytes(f[16..20].try_into().expect("4")) {
        return Err(FrameError::Checksum { seq });
    }
    let body = &f[HEADER..];
    let frame = match f[4] {
        DATA => {
            if seq != *next_seq {
                return Err(FrameError::Sequence { want: *next_seq, got: seq });
            }
            *next_seq += 1;
            Frame::Data(Packet::decode(body).ok_or(FrameError::Body("undecodable packet"))?)
        }
        HEARTBEAT => Frame::Heartbeat,
        HELLO => {
            if body.len() != HELLO_BODY || u32::from_le_bytes(body[0..4].try_into().expect("4")) != MAGIC {
                return Err(FrameError::Body("not a rust-gin TCP fabric hello"));
            }
            if u16::from_le_bytes(body[4..6].try_into().expect("2")) != VERSION {
                return Err(FrameError::Body("another version of the TCP fabric"));
            }
            let raw: [u8; 16] = body[8..24].try_into().expect("16");
            let ip = match body[6] {
                4 => IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3])),
                6 => IpAddr::V6(Ipv6Addr::from(raw)),
                _ => return Err(FrameError::Body("bad address family")),
            };
            let port = u16::from_le_bytes(body[24..26].try_into().expect("2"));
            let fabric = u64::from_le_bytes(body[26..34].try_into().expect("8"));
            Frame::Hello { addr: SocketAddr::new(ip, port), fabric }
        }
        k => return Err(FrameError::Kind(k)),
    };
    Ok(Some((frame, 4 + len)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emu::packet::{Body, Payload};

    fn packet(i: u64) -> Packet {
        Packet {
            src_node: 1,
            dst_node: 2,
            src_qpn: 0x100,
            dst_qpn: 0x200,
            msg: i,
            dc_key: 0,
            body: Body::Write { raddr: 64 * i, rkey: 7, total: 5, offset: 0, last: true, imm: None, data: Payload::from_slice(b"hello") },
        }
    }

    fn all(buf: &[u8]) -> Result<Vec<Frame>, FrameError> {
        let (mut at, mut seq, mut v) = (0, 0, Vec::new());
        while let Some((f, n)) = take(&buf[at..], &mut seq)? {
            v.push(f);
            at += n;
        }
        Ok(v)
    }

    #[test]
    fn frames_round_trip() {
        let mut b = Vec::new();
        push_hello(&mut b, "10.77.1.2:4567".parse().unwrap(), 99);
        push_data(&mut b, 0, &packet(0));
        push_heartbeat(&mut b);
        push_data(&mut b, 1, &packet(1));
        let f = all(&b).unwrap();
        assert!(matches!(f[0], Frame::Hello { addr, fabric: 99 } if addr == "10.77.1.2:4567".parse().unwrap()));
        assert!(matches!(&f[1], Frame::Data(p) if *p == packet(0)));
        assert!(matches!(f[2], Frame::Heartbeat));
        assert!(matches!(&f[3], Frame::Data(p) if *p == packet(1)));
        // A partial frame waits for the rest.
        let mut seq = 0;
        assert!(take(&b[..b.len() - 1], &mut seq).unwrap().is_some());
        let last = b.len() - (HEADER + packet(1).encode().len());
        let mut seq = 1;
        assert!(take(&b[last..b.len() - 1], &mut seq).unwrap().is_none());
    }

    #[test]
    fn a_flipped_bit_is_caught() {
        let mut b = Vec::new();
        push_data(&mut b, 0, &packet(0));
        for i in [4, 9, HEADER + 3, b.len() - 1] {
            let mut c = b.clone();
            c[i] ^= 0x10;
            assert!(matches!(all(&c), Err(FrameError::Checksum { .. })), "byte {i}");
        }
    }

    #[test]
    fn a_lost_or_repeated_frame_is_caught() {
        let mut b = Vec::new();
        push_data(&mut b, 0, &packet(0));
        push_data(&mut b, 2, &packet(2)); // frame 1 lost
        assert_eq!(all(&b).unwrap_err(), FrameError::Sequence { want: 1, got: 2 });
        let mut b = Vec::new();
        push_data(&mut b, 0, &packet(0));
        push_data(&mut b, 0, &packet(0)); // repeated
        assert_eq!(all(&b).unwrap_err(), FrameError::Sequence { want: 1, got: 0 });
    }

    #[test]
    fn a_garbage_length_is_caught() {
        let b = [0xffu8; 32];
        assert!(matches!(all(&b), Err(FrameError::Length(_))));
    }
}
