//! The NIC families' field quirks as host-side policies, in one place
//! (docs/nic-families.md, "Field quirks as policies"). The device side of
//! each is a constant of its family (bnxt/family.h, ionic/family.h,
//! mlx5/family.h); what the host decides is here: the descriptor value of
//! bnxt_re's doorbell grouping, ionic's traffic class and its uDMA engines.

use crate::error::{Error, Result};

/// bnxt_re: how the device rings (`rust_gin_nic_sq.doorbell_group`).
/// Reports conflict: batched doorbells hung a Thor2 in torchcomms#2714,
/// per-peer doorbell groups ran at ~98 % of 400G in mori#421. One doorbell
/// per WQE is the default; `RCCL_RUST_GIN_BNXT_DOORBELL=peer` rings once per
/// published batch of a peer's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BnxtDoorbell {
    #[default]
    PerWqe,
    PerPeer,
}

impl BnxtDoorbell {
    pub const KNOB: &'static str = "RCCL_RUST_GIN_BNXT_DOORBELL";

    pub fn parse(v: &str) -> Result<BnxtDoorbell> {
        match v {
            "wqe" => Ok(BnxtDoorbell::PerWqe),
            "peer" => Ok(BnxtDoorbell::PerPeer),
            _ => Err(Error::InvalidArgument(format!("{}={v:?}: use wqe or peer", Self::KNOB))),
        }
    }

    /// The descriptor's `doorbell_group`: 0 per WQE, 1 per batch.
    pub fn descriptor_value(self) -> u32 {
        match self {
            BnxtDoorbell::PerWqe => 0,
            BnxtDoorbell::PerPeer => 1,
        }
    }
}

/// bnxt_re: bytes one WQE moves at most; the device splits larger puts and
/// gets (bnxt/family.h kMaxWqeBytes, which this mirrors for the emulated
/// NIC's check).
pub const BNXT_MAX_WQE_BYTES: u64 = 16 << 20;

/// Where an ionic QP's traffic class came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcSource {
    /// The device's sysfs traffic class (an administrator's setting).
    Sysfs,
    /// RCCL's trafficClass or `RCCL_RUST_GIN_TRAFFIC_CLASS` (default 0).
    Config,
}

/// The sysfs file a RoCE driver keeps its device-wide traffic class in
/// (mlx5_ib's `tc/<port>/traffic_class`; UNVERIFIED that the ionic driver
/// has it: docs/nic-families.md).
pub fn sysfs_traffic_class_path(dev: &str, port: u8) -> String {
    format!("/sys/class/infiniband/{dev}/tc/{port}/traffic_class")
}

/// A sysfs traffic class: "Global tclass=N" (mlx5_ib's form) or a bare N,
/// 0..=255; anything else (empty: none set) is no setting.
pub fn parse_sysfs_traffic_class(text: &[u8]) -> Option<u8> {
    let s = std::str::from_utf8(text).ok()?.trim();
    let n = s.strip_prefix("Global tclass=").unwrap_or(s).trim();
    n.parse::<u8>().ok()
}

/// ionic: the traffic class of a QP. NCCL's 224 maps to a rate-limited
/// fabric priority on Pollara clusters (one QP capped at ~3.9 GB/s, TC 0
/// ~24 GB/s: torchcomms#3116), so the configured class, whose default is 0,
/// is used unless the device's sysfs names one, which wins.
pub fn ionic_traffic_class(sysfs: Option<&[u8]>, configured: u8) -> (u8, TcSource) {
    match sysfs.and_then(parse_sysfs_traffic_class) {
        Some(tc) => (tc, TcSource::Sysfs),
        None => (configured, TcSource::Config),
    }
}

/// ionic: the uDMA engine (pipeline) the `n`th QP of a NIC goes to: QPs
/// alternate over the engines in the context's mask
/// (`ionic_dv_ctx_get_udma_mask`), as MORI's two parent domains do; one
/// engine alone runs out of completion resources after a few QPs
/// (torchcomms#3116). None when the mask is empty.
pub fn ionic_udma_engine(mask: u8, n: usize) -> Option<u8> {
    let engines: Vec<u8> = (0..8u8).filter(|i| mask & (1 << i) != 0).collect();
    (!engines.is_empty()).then(|| engines[n % engines.len()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_traffic_class_forms() {
        assert_eq!(parse_sysfs_traffic_class(b"Global tclass=106\n"), Some(106));
        assert_eq!(parse_sysfs_traffic_class(b"0\n"), Some(0));
        assert_eq!(parse_sysfs_traffic_class(b""), None);
        assert_eq!(parse_sysfs_traffic_class(b"Global tclass=300"), None);
        assert_eq!(ionic_traffic_class(None, 0), (0, TcSource::Config));
        assert_eq!(ionic_traffic_class(Some(b"Global tclass=96"), 0), (96, TcSource::Sysfs));
    }

    #[test]
    fn udma_engines_alternate_over_the_mask() {
        let picks: Vec<_> = (0..4).map(|n| ionic_udma_engine(0b11, n)).collect();
        assert_eq!(picks, [Some(0), Some(1), Some(0), Some(1)]);
        assert_eq!(ionic_udma_engine(0b10, 3), Some(1));
        assert_eq!(ionic_udma_engine(0, 0), None);
    }
}
