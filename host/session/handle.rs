//! The listen handle: what one rank tells all others through RCCL's
//! allgather (at most NCCL_NET_HANDLE_MAXSIZE = 128 bytes). It carries the
//! rank's connection-setup socket and its NIC's address; a checksum catches a
//! corrupted or foreign handle before anyone connects to it.
//!
//! Layout (little-endian): magic u32 | version u16 | provider u8 | family u8 |
//! ip [16] | port u16 | reserved u16 | nonce u32 | NIC address [40] |
//! secret [16] | zeros | FNV-1a-32 of bytes 0..124 at 124.
//!
//! The secret (random per listen) reaches the other ranks only through
//! RCCL's allgather; together they make the key that authenticates
//! connection-setup frames (oob::frame::job_key).

use crate::config::ProviderKind;
use crate::error::{Error, Result};
use crate::ffi::nccl::NCCL_NET_HANDLE_MAXSIZE;
use crate::provider::{NicAddress, NIC_ADDRESS_BYTES};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

pub const MAGIC: u32 = 0x4e49_4752; // "RGIN"
pub const VERSION: u16 = 2;
const CHECKSUM_AT: usize = NCCL_NET_HANDLE_MAXSIZE - 4;
const SECRET_AT: usize = 32 + NIC_ADDRESS_BYTES;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenHandle {
    pub provider: ProviderKind,
    pub socket: SocketAddr,
    pub nonce: u32,
    pub nic: NicAddress,
    pub secret: crate::oob::Key,
}

fn fnv1a32(b: &[u8]) -> u32 {
    b.iter().fold(0x811c_9dc5u32, |h, x| (h ^ *x as u32).wrapping_mul(0x0100_0193))
}

fn provider_code(p: ProviderKind) -> u8 {
    match p {
        ProviderKind::Mlx5 => 1,
        ProviderKind::Emu => 2,
        ProviderKind::Bnxt => 3,
        ProviderKind::Ionic => 4,
    }
}

impl ListenHandle {
    pub fn encode(&self) -> [u8; NCCL_NET_HANDLE_MAXSIZE] {
        let mut b = [0u8; NCCL_NET_HANDLE_MAXSIZE];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6] = provider_code(self.provider);
        match self.socket.ip() {
            IpAddr::V4(v4) => {
                b[7] = 4;
                b[8..12].copy_from_slice(&v4.octets());
            }
            IpAddr::V6(v6) => {
                b[7] = 6;
                b[8..24].copy_from_slice(&v6.octets());
            }
        }
        b[24..26].copy_from_slice(&self.socket.port().to_le_bytes());
        b[28..32].copy_from_slice(&self.nonce.to_le_bytes());
        b[32..32 + NIC_ADDRESS_BYTES].copy_from_slice(&self.nic);
        b[SECRET_AT..SECRET_AT + 16].copy_from_slice(&self.secret);
        let sum = fnv1a32(&b[..CHECKSUM_AT]);
        b[CHECKSUM_AT..].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Decodes rank `rank`'s handle, refusing anything that is not an intact
    /// rust-gin handle of the same provider and version.
    pub fn decode(b: &[u8], rank: usize, expect: ProviderKind) -> Result<ListenHandle> {
        let bad = |why: &str| Err(Error::InvalidArgument(format!("handle of rank {rank}: {why}")));
        if b.len() != NCCL_NET_HANDLE_MAXSIZE {
            return bad(&format!("{} bytes, expected {NCCL_NET_HANDLE_MAXSIZE}", b.len()));
        }
        if u32::from_le_bytes(b[0..4].try_into().expect("4")) != MAGIC {
            return bad("not a rust-gin handle (wrong magic)");
        }
        let sum = u32::from_le_bytes(b[CHECKSUM_AT..].try_into().expect("4"));
        if sum != fnv1a32(&b[..CHECKSUM_AT]) {
            return bad("checksum mismatch (corrupted in transit?)");
        }
        let version = u16::from_le_bytes(b[4..6].try_into().expect("2"));
        if version != VERSION {
            return bad(&format!("handle version {version}, this library speaks {VERSION} (mixed rust-gin builds?)"));
        }
        if b[6] != provider_code(expect) {
            return bad(&format!(
                "made by another provider (code {}); every rank must use the same RCCL_RUST_GIN_PROVIDER",
                b[6]
            ));
        }
        let ip = match b[7] {
            4 => IpAddr::V4(Ipv4Addr::new(b[8], b[9], b[10], b[11])),
            6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&b[8..24]).expect("16"))),
            f => return bad(&format!("unknown address family {f}")),
        };
        let port = u16::from_le_bytes(b[24..26].try_into().expect("2"));
        if port == 0 {
            return bad("port 0");
        }
        let mut nic = [0u8; NIC_ADDRESS_BYTES];
        nic.copy_from_slice(&b[32..32 + NIC_ADDRESS_BYTES]);
        Ok(ListenHandle {
            provider: expect,
            socket: SocketAddr::new(ip, port),
            nonce: u32::from_le_bytes(b[28..32].try_into().expect("4")),
            nic,
            secret: b[SECRET_AT..SECRET_AT + 16].try_into().expect("16"),
        })
    }
}
