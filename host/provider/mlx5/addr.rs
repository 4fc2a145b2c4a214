//! What a peer needs to reach an mlx5 port, as the 40 bytes of a
//! [`NicAddress`] in the listen handle, and the path arithmetic of connect:
//! path MTU, RoCE v2 flow label and UDP source port, link speed.

use crate::error::{Error, Result};
use crate::provider::{NicAddress, NIC_ADDRESS_BYTES};

/// First byte of an mlx5 address ('5'); the emulated NIC uses another.
pub const ADDRESS_TAG: u8 = 0x35;
/// Layout version, bumped on any change of the encoding below.
pub const ADDRESS_VERSION: u8 = 1;

/// ibv_port_attr.link_layer values (verbs.h IBV_LINK_LAYER_*).
pub const LINK_LAYER_UNSPECIFIED: u8 = 0;
pub const LINK_LAYER_INFINIBAND: u8 = 1;
pub const LINK_LAYER_ETHERNET: u8 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkLayer {
    Infiniband,
    /// RoCE.
    Ethernet,
}

impl LinkLayer {
    /// From ibv_port_attr.link_layer (UNSPECIFIED is InfiniBand, as in verbs).
    pub fn from_verbs(v: u8) -> Option<LinkLayer> {
        match v {
            LINK_LAYER_UNSPECIFIED | LINK_LAYER_INFINIBAND => Some(LinkLayer::Infiniband),
            LINK_LAYER_ETHERNET => Some(LinkLayer::Ethernet),
            _ => None,
        }
    }
    fn code(self) -> u8 {
        match self {
            LinkLayer::Infiniband => LINK_LAYER_INFINIBAND,
            LinkLayer::Ethernet => LINK_LAYER_ETHERNET,
        }
    }
    fn name(self) -> &'static str {
        match self {
            LinkLayer::Infiniband => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet (RoCE)",
        }
    }
}

/// The type of a GID table entry (sysfs gid_attrs/types, ibv_gid_type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GidType {
    Ib,
    RoceV1,
    RoceV2,
}

impl GidType {
    /// From the text of /sys/class/infiniband/<dev>/ports/<p>/gid_attrs/types/<i>.
    pub fn from_sysfs(s: &str) -> Option<GidType> {
        match s.trim() {
            "IB/RoCE v1" => Some(GidType::RoceV1),
            "RoCE v2" => Some(GidType::RoceV2),
            "IB" => Some(GidType::Ib),
            _ => None,
        }
    }
    fn code(self) -> u8 {
        match self {
            GidType::Ib => 0,
            GidType::RoceV1 => 1,
            GidType::RoceV2 => 2,
        }
    }
    fn from_code(c: u8) -> Option<GidType> {
        match c {
            0 => Some(GidType::Ib),
            1 => Some(GidType::RoceV1),
            2 => Some(GidType::RoceV2),
            _ => None,
        }
    }
}

/// One mlx5 port as its peers see it.
///
/// Encoding (40 bytes, the rest zero): `[0]` tag 0x35, `[1]` version, `[2]`
/// link layer (1 IB, 2 Ethernet), `[3]` port, `[4]` active MTU (ibv_mtu,
/// 1..=5), `[5]` GID index, `[6]` GID type (0 IB, 1 RoCE v1, 2 RoCE v2),
/// `[8..10]` LID (little-endian), `[16..32]` GID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mlx5Address {
    pub link_layer: LinkLayer,
    pub port: u8,
    pub mtu: u8,
    pub gid_index: u8,
    pub gid_type: GidType,
    pub lid: u16,
    pub gid: [u8; 16],
}

impl Mlx5Address {
    pub fn encode(&self) -> NicAddress {
        let mut a = [0u8; NIC_ADDRESS_BYTES];
        a[0] = ADDRESS_TAG;
        a[1] = ADDRESS_VERSION;
        a[2] = self.link_layer.code();
        a[3] = self.port;
        a[4] = self.mtu;
        a[5] = self.gid_index;
        a[6] = self.gid_type.code();
        a[8..10].copy_from_slice(&self.lid.to_le_bytes());
        a[16..32].copy_from_slice(&self.gid);
        a
    }

    pub fn decode(a: &NicAddress) -> Result<Mlx5Address> {
        if a[0] != ADDRESS_TAG {
            return Err(Error::InvalidArgument(
                "the peer's handle is not from the mlx5 provider (its ranks run another RCCL_RUST_GIN_PROVIDER)".into(),
            ));
        }
        if a[1] != ADDRESS_VERSION {
            return Err(Error::InvalidArgument(format!(
                "the peer's mlx5 address has layout version {} (this build speaks {ADDRESS_VERSION}): mixed rust-gin builds",
                a[1]
            )));
        }
        let link_layer = match a[2] {
            LINK_LAYER_INFINIBAND => LinkLayer::Infiniband,
            LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
            v => return Err(Error::InvalidArgument(format!("the peer's mlx5 address has link layer {v}"))),
        };
        if !(1..=5).contains(&a[4]) {
            return Err(Error::InvalidArgument(format!("the peer's mlx5 address has MTU code {} (not 1..=5)", a[4])));
        }
        let gid_type = GidType::from_code(a[6])
            .ok_or_else(|| Error::InvalidArgument(format!("the peer's mlx5 address has GID type {}", a[6])))?;
        Ok(Mlx5Address {
            link_layer,
            port: a[3],
            mtu: a[4],
            gid_index: a[5],
            gid_type,
            lid: u16::from_le_bytes([a[8], a[9]]),
            gid: a[16..32].try_into().expect("16 bytes"),
        })
    }

    /// The subnet prefix: the first 8 bytes of the GID.
    pub fn subnet_prefix(&self) -> u64 {
        u64::from_be_bytes(self.gid[..8].try_into().expect("8 bytes"))
    }
}

fn gid_text(g: &[u8; 16]) -> String {
    g.chunks(2).map(|c| format!("{:02x}{:02x}", c[0], c[1])).collect::<Vec<_>>().join(":")
}

/// Whether `local` can build an RC connection to `remote`; the error says why
/// not. MTUs may differ (the smaller is used).
pub fn check_peer(local: &Mlx5Address, remote: &Mlx5Address) -> Result<()> {
    if local.link_layer != remote.link_layer {
        return Err(Error::InvalidArgument(format!(
            "the local port is {} but the peer's is {}: the ranks are on different fabrics (check RCCL_RUST_GIN_NIC \
             and RCCL_RUST_GIN_IB_PORT on both)",
            local.link_layer.name(),
            remote.link_layer.name()
        )));
    }
    match local.link_layer {
        LinkLayer::Infiniband => {
            if remote.lid == 0 {
                return Err(Error::InvalidArgument(
                    "the peer's InfiniBand port has LID 0 (no subnet manager has configured it)".into(),
                ));
            }
            if local.subnet_prefix() != remote.subnet_prefix() {
                return Err(Error::InvalidArgument(format!(
                    "the peer is on another InfiniBand subnet (prefix {:#018x}, ours {:#018x}); routing between \
                     subnets (GRH) is not supported by the mlx5 provider",
                    remote.subnet_prefix(),
                    local.subnet_prefix()
                )));
            }
        }
        LinkLayer::Ethernet => {
            if remote.gid == [0; 16] {
                return Err(Error::InvalidArgument("the peer's RoCE GID is zero (no IP address on its port?)".into()));
            }
            if local.gid_type != remote.gid_type {
                return Err(Error::InvalidArgument(format!(
                    "RoCE version mismatch: our GID {} (index {}) is {:?}, the peer's {} (index {}) is {:?}; pick GIDs \
                     of one version with RCCL_RUST_GIN_GID_INDEX",
                    gid_text(&local.gid),
                    local.gid_index,
                    local.gid_type,
                    gid_text(&remote.gid),
                    remote.gid_index,
                    remote.gid_type
                )));
            }
        }
    }
    Ok(())
}

/// The path MTU (ibv_mtu code, which is also the PRM qpc.mtu code).
pub fn path_mtu(local: &Mlx5Address, remote: &Mlx5Address) -> u8 {
    local.mtu.min(remote.mtu)
}

/// Bytes of an ibv_mtu code (1 = 256 ... 5 = 4096).
pub fn mtu_bytes(code: u8) -> u32 {
    128 << code.clamp(1, 5)
}

/// The kernel's rdma_calc_flow_label (include/rdma/ib_verbs.h): a flow label
/// both ends derive from the two QP numbers.
pub fn calc_flow_label(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = u64::from(lqpn) * u64::from(rqpn);
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xF_FFFF) as u32
}

/// The kernel's rdma_flow_label_to_udp_sport (include/rdma/ib_verbs.h): the
/// RoCE v2 UDP source port, in [0xC000, 0xFFFF].
pub fn flow_label_to_udp_sport(fl: u32) -> u16 {
    let fl_low = (fl & 0x03FFF) ^ ((fl & 0xFC000) >> 14);
    (fl_low | 0xC000) as u16
}

/// Port speed in Mbps from ibv_port_attr active_speed and active_width, as
/// NCCL's net_ib computes it (src/transport/net_ib/init.cc, ncclIbSpeed and
/// ncclIbWidth: the lowest set bit indexes each table).
pub fn speed_mbps(active_speed: u8, active_width: u8) -> i32 {
    const WIDTHS: [i32; 5] = [1, 4, 8, 12, 2];
    const SPEEDS: [i32; 9] = [2500, 5000, 10000, 10000, 14000, 25000, 50000, 100000, 200000];
    fn first_bit(v: u32, max: usize) -> usize {
        (0..max).find(|&i| v & (1 << i) != 0).unwrap_or(max)
    }
    SPEEDS[first_bit(active_speed.into(), SPEEDS.len() - 1)] * WIDTHS[first_bit(active_width.into(), WIDTHS.len() - 1)]
}

/// Whether a GID is an IPv4-mapped IPv6 address (::ffff:a.b.c.d), the GIDs
/// RoCE v2 gives IPv4 interfaces.
pub fn is_ipv4_mapped(g: &[u8; 16]) -> bool {
    g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff
}
