//! One connection-setup message on the wire, authenticated with the job key:
//! magic u32 | tag u64 | from u32 | len u32 | mac u64 | payload[len], all
//! little-endian. The MAC (SipHash-2-4 under the job key) covers tag, sender,
//! receiver and payload, so a frame can neither be forged by someone without
//! the key nor replayed to another rank or collective.

use super::siphash::siphash24;

pub const MAGIC: u32 = 0x5247_4f43; // "RGOC" (the authenticated format)
pub const HEADER: usize = 28;
/// Largest payload: connection setup sends QP numbers (4 bytes per context,
/// at most 64 contexts), window registrations (20 bytes) and identities;
/// 64 KiB leaves room and bounds what one connection can make us allocate.
pub const MAX_PAYLOAD: usize = 64 << 10;

/// The job key: 128 bits only ranks that saw RCCL's allgather of handles
/// know (every rank's random secret, combined in rank order).
pub type Key = [u8; 16];

pub fn mac(key: &Key, tag: u64, from: u32, to: u32, payload: &[u8]) -> u64 {
    let mut m = Vec::with_capacity(16 + payload.len());
    m.extend_from_slice(&tag.to_le_bytes());
    m.extend_from_slice(&from.to_le_bytes());
    m.extend_from_slice(&to.to_le_bytes());
    m.extend_from_slice(payload);
    siphash24(key, &m)
}

pub fn encode(key: &Key, tag: u64, from: u32, to: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(HEADER + payload.len());
    f.extend_from_slice(&MAGIC.to_le_bytes());
    f.extend_from_slice(&tag.to_le_bytes());
    f.extend_from_slice(&from.to_le_bytes());
    f.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    f.extend_from_slice(&mac(key, tag, from, to, payload).to_le_bytes());
    f.extend_from_slice(payload);
    f
}

/// A frame header as read, not yet trusted.
#[derive(Clone, Copy, Debug)]
pub struct Header {
    pub tag: u64,
    pub from: u32,
    pub len: usize,
    pub mac: u64,
}

/// Why a frame or connection was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reject {
    /// Not our magic (garbage, or another protocol).
    Garbage,
    /// A payload length over MAX_PAYLOAD.
    TooLong,
    /// Closed before the whole frame arrived.
    Truncated,
    /// Did not finish within the per-connection limit.
    Slow,
    /// A sender that is not another rank of this communicator.
    WrongRank,
    /// The MAC does not verify: no key, or altered.
    BadMac,
    /// Authentic, but for a collective that is over (or a duplicate).
    Stale,
    /// Authentic and early, but over the bound on early messages.
    OverBound,
    /// Too many connections open at once; the oldest was closed.
    TooManyConnections,
}

/// Parses a header; refuses a foreign magic, an oversized length, a sender
/// outside [0, nranks) or the receiver itself.
pub fn parse_header(h: &[u8; HEADER], me: u32, nranks: u32) -> Result<Header, Reject> {
    let word = |a: usize, n: usize| &h[a..a + n];
    if u32::from_le_bytes(word(0, 4).try_into().expect("4")) != MAGIC {
        return Err(Reject::Garbage);
    }
    let header = Header {
        tag: u64::from_le_bytes(word(4, 8).try_into().expect("8")),
        from: u32::from_le_bytes(word(12, 4).try_into().expect("4")),
        len: u32::from_le_bytes(word(16, 4).try_into().expect("4")) as usize,
        mac: u64::from_le_bytes(word(20, 8).try_into().expect("8")),
    };
    if header.len > MAX_PAYLOAD {
        return Err(Reject::TooLong);
    }
    if header.from >= nranks || header.from == me {
        return Err(Reject::WrongRank);
    }
    Ok(header)
}

/// A rank's random secret for its handle, from the kernel's CSPRNG.
pub fn random_secret() -> crate::error::Result<Key> {
    let mut k = [0u8; 16];
    // SAFETY: getrandom writes at most k.len() bytes into k.
    let n = unsafe { libc::getrandom(k.as_mut_ptr() as *mut libc::c_void, k.len(), 0) };
    if n != k.len() as isize {
        return Err(crate::error::Error::System(format!(
            "getrandom for the connection-setup secret: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(k)
}

/// The job key: every rank's secret (in rank order) and the communicator,
/// through SipHash under two fixed keys. Without all secrets it is
/// unpredictable; every rank computes the same one.
pub fn job_key<'a>(secrets: impl Iterator<Item = &'a Key>, comm_id: u64) -> Key {
    let mut all = comm_id.to_le_bytes().to_vec();
    secrets.for_each(|s| all.extend_from_slice(s));
    let half = |domain: u8| siphash24(&[domain; 16], &all).to_le_bytes();
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&half(0x4a));
    k[8..].copy_from_slice(&half(0x4b));
    k
}
