//! The few mlx5 PRM (Programmer's Reference Manual) command layouts the DevX
//! provider sends: CREATE_CQ, CREATE_QP and the RST2INIT / INIT2RTR / RTR2RTS
//! modifications. Commands are big-endian bit fields; a [`Field`] is a bit
//! offset counted from the most significant bit of byte 0 and a width, exactly
//! as rdma-core's `DEVX_SET(typ, p, fld, v)` computes them from the
//! `struct mlx5_ifc_<typ>_bits` declarations (one `u8` per bit).
//!
//! Sources of every offset (the tests in tests/mlx5_provider.rs check the
//! bytes each setter writes):
//! - `qpc`, `ads` (the address path), `create_qp_in/out`, `rst2init_qp_in`,
//!   `init2rtr_qp_in`, `rtr2rts_qp_in`, the command output header:
//!   rdma-core `providers/mlx5/mlx5_ifc.h` (linux-rdma/rdma-core
//!   691953d8d502), `struct mlx5_ifc_qpc_bits`, `mlx5_ifc_ads_bits`, ...;
//!   identical in NVIDIA/nccl 5067397c2676
//!   `src/transport/net_ib/gdaki/doca-gpunetio/include/host/mlx5_ifc.h`.
//! - `cqc` and `create_cq_in` (rdma-core's mlx5_ifc.h has no CQ context):
//!   NVIDIA/nccl `.../doca-gpunetio/include/host/mlx5_prm.h`
//!   (`struct mlx5_ifc_cqc_bits`, `mlx5_ifc_create_cq_in_bits`), which agrees
//!   with the Linux kernel's `include/linux/mlx5/mlx5_ifc.h` as vendored by
//!   rocSHMEM (`projects/rocshmem/src/gda/mlx5/mlx5_ifc_core.hpp`), where the
//!   32-bit `c_eqn_or_ext_element` at bit 0xa0 holds the EQ number (DOCA
//!   names its low byte `c_eqn`).
//!
//! What is set in each command, and why, is in docs/mlx5-provider.md.

/// A bit field of a PRM structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Offset in bits from the most significant bit of byte 0.
    pub bit: usize,
    /// Width in bits.
    pub width: usize,
}

const fn f(bit: usize, width: usize) -> Field {
    Field { bit, width }
}

impl Field {
    /// The same field inside a structure that starts at bit `base`.
    pub const fn at(self, base: usize) -> Field {
        Field { bit: base + self.bit, width: self.width }
    }
}

/// Stores `value` (masked to the field's width, as DEVX_SET does) into `buf`.
/// Panics if the field lies outside `buf` or is wider than 64 bits.
pub fn set(buf: &mut [u8], field: Field, value: u64) {
    assert!(field.width >= 1 && field.width <= 64, "PRM field width {}", field.width);
    assert!(field.bit + field.width <= buf.len() * 8, "PRM field {field:?} outside a {}-byte command", buf.len());
    for i in 0..field.width {
        let pos = field.bit + i;
        let mask = 0x80u8 >> (pos % 8);
        if (value >> (field.width - 1 - i)) & 1 == 1 {
            buf[pos / 8] |= mask;
        } else {
            buf[pos / 8] &= !mask;
        }
    }
}

/// Reads a field (up to 64 bits) from `buf`.
pub fn get(buf: &[u8], field: Field) -> u64 {
    assert!(field.width >= 1 && field.width <= 64, "PRM field width {}", field.width);
    assert!(field.bit + field.width <= buf.len() * 8, "PRM field {field:?} outside a {}-byte buffer", buf.len());
    (0..field.width).fold(0u64, |v, i| {
        let pos = field.bit + i;
        (v << 1) | u64::from((buf[pos / 8] >> (7 - pos % 8)) & 1)
    })
}

/// Copies `bytes` into a byte-aligned field of the same size (GIDs, MACs).
pub fn set_bytes(buf: &mut [u8], field: Field, bytes: &[u8]) {
    assert!(
        field.bit.is_multiple_of(8) && field.width == bytes.len() * 8,
        "PRM byte field {field:?} vs {} bytes",
        bytes.len()
    );
    buf[field.bit / 8..field.bit / 8 + bytes.len()].copy_from_slice(bytes);
}

/// Command opcodes (mlx5_ifc.h `MLX5_CMD_OP_*`).
pub mod opcode {
    pub const CREATE_CQ: u64 = 0x400;
    pub const CREATE_QP: u64 = 0x500;
    pub const RST2INIT_QP: u64 = 0x502;
    pub const INIT2RTR_QP: u64 = 0x503;
    pub const RTR2RTS_QP: u64 = 0x504;
}

/// The header every command output starts with (`mlx5_ifc_*_out_bits`).
pub mod cmd_out {
    use super::{f, Field};
    pub const STATUS: Field = f(0x00, 0x08);
    pub const SYNDROME: Field = f(0x20, 0x20);
    /// Every output this provider reads is 16 bytes.
    pub const BYTES: usize = 16;
}

/// Queue pair context, `struct mlx5_ifc_qpc_bits` (0x740 bits).
pub mod qpc {
    use super::{f, Field};
    pub const BITS: usize = 0x740;
    pub const STATE: Field = f(0x000, 0x04);
    pub const ST: Field = f(0x008, 0x08);
    pub const PM_STATE: Field = f(0x013, 0x02);
    pub const PD: Field = f(0x028, 0x18);
    pub const MTU: Field = f(0x040, 0x03);
    pub const LOG_MSG_MAX: Field = f(0x043, 0x05);
    pub const LOG_RQ_SIZE: Field = f(0x049, 0x04);
    pub const NO_SQ: Field = f(0x050, 0x01);
    pub const LOG_SQ_SIZE: Field = f(0x051, 0x04);
    pub const TS_FORMAT: Field = f(0x058, 0x02);
    pub const UAR_PAGE: Field = f(0x068, 0x18);
    pub const USER_INDEX: Field = f(0x088, 0x18);
    pub const LOG_PAGE_SIZE: Field = f(0x0a3, 0x05);
    pub const REMOTE_QPN: Field = f(0x0a8, 0x18);
    /// Start of `primary_address_path` (an `ads`, 0x160 bits).
    pub const PRIMARY_ADDRESS_PATH: usize = 0x0c0;
    pub const LOG_ACK_REQ_FREQ: Field = f(0x380, 0x04);
    pub const LOG_SRA_MAX: Field = f(0x388, 0x03);
    pub const RETRY_COUNT: Field = f(0x38d, 0x03);
    pub const RNR_RETRY: Field = f(0x390, 0x03);
    pub const NEXT_SEND_PSN: Field = f(0x3c8, 0x18);
    pub const CQN_SND: Field = f(0x3e8, 0x18);
    pub const LOG_RRA_MAX: Field = f(0x488, 0x03);
    pub const ATOMIC_MODE: Field = f(0x48c, 0x04);
    pub const RRE: Field = f(0x490, 0x01);
    pub const RWE: Field = f(0x491, 0x01);
    pub const RAE: Field = f(0x492, 0x01);
    pub const MIN_RNR_NAK: Field = f(0x4a3, 0x05);
    pub const NEXT_RCV_PSN: Field = f(0x4a8, 0x18);
    pub const CQN_RCV: Field = f(0x4e8, 0x18);
    pub const DBR_ADDR: Field = f(0x500, 0x40);
    pub const RQ_TYPE: Field = f(0x565, 0x03);
    pub const CS_REQ: Field = f(0x630, 0x08);
    pub const CS_RES: Field = f(0x638, 0x08);
    pub const DBR_UMEM_VALID: Field = f(0x683, 0x01);
    pub const DBR_UMEM_ID: Field = f(0x720, 0x20);

    /// `st`: reliable connected (MLX5_QPC_ST_RC).
    pub const ST_RC: u64 = 0x0;
    /// `pm_state`: migrated (MLX5_QPC_PM_STATE_MIGRATED).
    pub const PM_STATE_MIGRATED: u64 = 0x3;
    /// `rq_type`: no receive queue (MLX5_QPC_RQ_TYPE_ZERO_SIZE_RQ).
    pub const RQ_TYPE_ZERO_SIZE_RQ: u64 = 0x3;
    /// `atomic_mode`: the IB-spec 8-byte CmpSwap and FetchAdd on a 64-bit
    /// word in the responder's host byte order (DOCA's
    /// DOCA_VERBS_QP_ATOMIC_MODE_IB_SPEC = 0x1, the mode NCCL's GDAKI host
    /// code sets, gin_host_gdaki.cc; rocSHMEM's MLX5_QPC_ATOMIC_MODE_IB_SPEC).
    pub const ATOMIC_MODE_IB_SPEC: u64 = 0x1;
}

/// Address path, `struct mlx5_ifc_ads_bits` (0x160 bits); offsets relative
/// to the path (use `.at(qpc::PRIMARY_ADDRESS_PATH)` inside a `qpc`).
pub mod ads {
    use super::{f, Field};
    pub const PKEY_INDEX: Field = f(0x010, 0x10);
    pub const GRH: Field = f(0x028, 0x01);
    pub const MLID: Field = f(0x029, 0x07);
    pub const RLID: Field = f(0x030, 0x10);
    pub const ACK_TIMEOUT: Field = f(0x040, 0x05);
    pub const SRC_ADDR_INDEX: Field = f(0x048, 0x08);
    pub const STAT_RATE: Field = f(0x054, 0x04);
    pub const HOP_LIMIT: Field = f(0x058, 0x08);
    pub const TCLASS: Field = f(0x064, 0x08);
    pub const FLOW_LABEL: Field = f(0x06c, 0x14);
    pub const RGID_RIP: Field = f(0x080, 0x80);
    pub const DSCP: Field = f(0x10a, 0x06);
    pub const UDP_SPORT: Field = f(0x110, 0x10);
    pub const ETH_PRIO: Field = f(0x121, 0x03);
    pub const SL: Field = f(0x124, 0x04);
    pub const VHCA_PORT_NUM: Field = f(0x128, 0x08);
    pub const RMAC_47_32: Field = f(0x130, 0x10);
    pub const RMAC_31_0: Field = f(0x140, 0x20);
}

/// Completion queue context, `struct mlx5_ifc_cqc_bits` (0x200 bits).
pub mod cqc {
    use super::{f, Field};
    pub const BITS: usize = 0x200;
    pub const STATUS: Field = f(0x000, 0x04);
    pub const DBR_UMEM_VALID: Field = f(0x006, 0x01);
    pub const CQE_SZ: Field = f(0x008, 0x03);
    /// Collapsed CQ: left 0 (the device code polls CQEs one by one).
    pub const CC: Field = f(0x00b, 0x01);
    /// Overrun ignore: left 0 (the device code writes the CQ doorbell record).
    pub const OI: Field = f(0x00e, 0x01);
    pub const CQE_COMP_EN: Field = f(0x011, 0x01);
    pub const DBR_UMEM_ID: Field = f(0x020, 0x20);
    pub const PAGE_OFFSET: Field = f(0x054, 0x06);
    pub const LOG_CQ_SIZE: Field = f(0x063, 0x05);
    pub const UAR_PAGE: Field = f(0x068, 0x18);
    pub const CQ_PERIOD: Field = f(0x084, 0x0c);
    pub const CQ_MAX_COUNT: Field = f(0x090, 0x10);
    /// `c_eqn_or_ext_element` (kernel); DOCA's `c_eqn` is its low byte.
    pub const C_EQN: Field = f(0x0a0, 0x20);
    pub const LOG_PAGE_SIZE: Field = f(0x0c3, 0x05);
    pub const DBR_ADDR: Field = f(0x1c0, 0x40);

    /// `cqe_sz`: 64-byte CQEs (MLX5_CQC_CQE_SZ_64_BYTES).
    pub const CQE_SZ_64: u64 = 0x0;
}

/// `struct mlx5_ifc_create_cq_in_bits` without its `pas` list (0x880 bits).
pub mod create_cq_in {
    use super::{f, Field};
    pub const BYTES: usize = 0x880 / 8;
    pub const OPCODE: Field = f(0x000, 0x10);
    /// Start of `cq_context` (a `cqc`).
    pub const CQ_CONTEXT: usize = 0x080;
    pub const CQ_UMEM_OFFSET: Field = f(0x280, 0x40);
    pub const CQ_UMEM_ID: Field = f(0x2c0, 0x20);
    pub const CQ_UMEM_VALID: Field = f(0x2e0, 0x01);
}

/// `struct mlx5_ifc_create_cq_out_bits`.
pub mod create_cq_out {
    use super::{f, Field};
    pub const CQN: Field = f(0x048, 0x18);
}

/// `struct mlx5_ifc_create_qp_in_bits` without its `pas` list (0x880 bits).
/// The WQ starts at offset 0 of its umem (rdma-core declares the 64 bits at
/// 0x800 reserved; the kernel calls them wq_umem_offset, left 0 here).
pub mod create_qp_in {
    use super::{f, Field};
    pub const BYTES: usize = 0x880 / 8;
    pub const OPCODE: Field = f(0x000, 0x10);
    /// Start of `qpc`.
    pub const QPC: usize = 0x0c0;
    pub const WQ_UMEM_ID: Field = f(0x840, 0x20);
    pub const WQ_UMEM_VALID: Field = f(0x860, 0x01);
}

/// `struct mlx5_ifc_create_qp_out_bits`.
pub mod create_qp_out {
    use super::{f, Field};
    pub const QPN: Field = f(0x048, 0x18);
}

/// `rst2init_qp_in`, `init2rtr_qp_in` and `rtr2rts_qp_in` share this layout
/// (0x880 bits each).
pub mod modify_qp_in {
    use super::{f, Field};
    pub const BYTES: usize = 0x880 / 8;
    pub const OPCODE: Field = f(0x000, 0x10);
    pub const QPN: Field = f(0x048, 0x18);
    pub const OPT_PARAM_MASK: Field = f(0x080, 0x20);
    /// Start of `qpc`.
    pub const QPC: usize = 0x0c0;
}

/// CREATE_CQ arguments.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqArgs {
    pub log_cq_size: u32,
    pub uar_page: u32,
    pub eqn: u32,
    pub cq_umem_id: u32,
    pub cq_umem_offset: u64,
    pub dbr_umem_id: u32,
    /// Byte offset of the CQ doorbell record in its umem.
    pub dbr_offset: u64,
}

/// CREATE_CQ: a normal CQ of 2^log_cq_size 64-byte CQEs in a umem, its
/// doorbell record in another (or the same) umem; neither collapsed nor
/// overrun-ignoring, no moderation, no compression.
pub fn create_cq(a: &CqArgs) -> [u8; create_cq_in::BYTES] {
    let mut b = [0u8; create_cq_in::BYTES];
    let c = create_cq_in::CQ_CONTEXT;
    set(&mut b, create_cq_in::OPCODE, opcode::CREATE_CQ);
    set(&mut b, cqc::CQE_SZ.at(c), cqc::CQE_SZ_64);
    set(&mut b, cqc::LOG_CQ_SIZE.at(c), a.log_cq_size.into());
    set(&mut b, cqc::UAR_PAGE.at(c), a.uar_page.into());
    set(&mut b, cqc::C_EQN.at(c), a.eqn.into());
    // Ignored when cq_umem_valid: the firmware takes the page size from the umem.
    set(&mut b, cqc::LOG_PAGE_SIZE.at(c), 0);
    set(&mut b, cqc::DBR_UMEM_VALID.at(c), 1);
    set(&mut b, cqc::DBR_UMEM_ID.at(c), a.dbr_umem_id.into());
    set(&mut b, cqc::DBR_ADDR.at(c), a.dbr_offset);
    set(&mut b, create_cq_in::CQ_UMEM_OFFSET, a.cq_umem_offset);
    set(&mut b, create_cq_in::CQ_UMEM_ID, a.cq_umem_id.into());
    set(&mut b, create_cq_in::CQ_UMEM_VALID, 1);
    b
}

/// CREATE_QP arguments.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpArgs {
    pub pdn: u32,
    pub log_sq_size: u32,
    pub uar_page: u32,
    pub cqn: u32,
    pub wq_umem_id: u32,
    pub dbr_umem_id: u32,
    /// Byte offset of the QP doorbell record (be32[2]) in its umem.
    pub dbr_offset: u64,
}

/// CREATE_QP: an RC QP in RESET with a send queue of 2^log_sq_size WQEBBs at
/// offset 0 of its umem and no receive queue; scatter-to-CQE off both ways
/// (a READ's or atomic's data must land in memory, never in the CQE).
pub fn create_qp(a: &QpArgs) -> [u8; create_qp_in::BYTES] {
    let mut b = [0u8; create_qp_in::BYTES];
    let q = create_qp_in::QPC;
    set(&mut b, create_qp_in::OPCODE, opcode::CREATE_QP);
    set(&mut b, qpc::ST.at(q), qpc::ST_RC);
    set(&mut b, qpc::PM_STATE.at(q), qpc::PM_STATE_MIGRATED);
    set(&mut b, qpc::PD.at(q), a.pdn.into());
    set(&mut b, qpc::LOG_SQ_SIZE.at(q), a.log_sq_size.into());
    set(&mut b, qpc::UAR_PAGE.at(q), a.uar_page.into());
    set(&mut b, qpc::LOG_PAGE_SIZE.at(q), 0);
    set(&mut b, qpc::CQN_SND.at(q), a.cqn.into());
    set(&mut b, qpc::RQ_TYPE.at(q), qpc::RQ_TYPE_ZERO_SIZE_RQ);
    set(&mut b, qpc::CS_REQ.at(q), 0);
    set(&mut b, qpc::CS_RES.at(q), 0);
    set(&mut b, qpc::DBR_UMEM_VALID.at(q), 1);
    set(&mut b, qpc::DBR_UMEM_ID.at(q), a.dbr_umem_id.into());
    set(&mut b, qpc::DBR_ADDR.at(q), a.dbr_offset);
    set(&mut b, create_qp_in::WQ_UMEM_ID, a.wq_umem_id.into());
    set(&mut b, create_qp_in::WQ_UMEM_VALID, 1);
    b
}

fn modify(op: u64, qpn: u32) -> [u8; modify_qp_in::BYTES] {
    let mut b = [0u8; modify_qp_in::BYTES];
    set(&mut b, modify_qp_in::OPCODE, op);
    set(&mut b, modify_qp_in::QPN, qpn.into());
    // opt_param_mask stays 0: only each transition's required parameters.
    b
}

/// RST2INIT: port, P_Key index 0, remote read/write/atomic enabled with the
/// IB-spec atomic mode.
pub fn rst2init(qpn: u32, port: u8) -> [u8; modify_qp_in::BYTES] {
    let mut b = modify(opcode::RST2INIT_QP, qpn);
    let q = modify_qp_in::QPC;
    let p = q + qpc::PRIMARY_ADDRESS_PATH;
    set(&mut b, qpc::PM_STATE.at(q), qpc::PM_STATE_MIGRATED);
    set(&mut b, qpc::RRE.at(q), 1);
    set(&mut b, qpc::RWE.at(q), 1);
    set(&mut b, qpc::RAE.at(q), 1);
    set(&mut b, qpc::ATOMIC_MODE.at(q), qpc::ATOMIC_MODE_IB_SPEC);
    set(&mut b, ads::VHCA_PORT_NUM.at(p), port.into());
    set(&mut b, ads::PKEY_INDEX.at(p), 0);
    b
}

/// How to reach the remote port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathArgs {
    /// InfiniBand within one subnet: by LID, no GRH.
    Ib { rlid: u16, sl: u8 },
    /// RoCE: by GID, always with a GRH; `udp_sport` only for RoCE v2.
    Roce {
        rgid: [u8; 16],
        sgid_index: u8,
        hop_limit: u8,
        traffic_class: u8,
        flow_label: u32,
        rmac: [u8; 6],
        udp_sport: Option<u16>,
        eth_prio: u8,
    },
}

/// INIT2RTR arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtrArgs {
    pub qpn: u32,
    pub remote_qpn: u32,
    pub port: u8,
    /// PRM MTU code (1 = 256 ... 5 = 4096, the ibv_mtu values).
    pub mtu: u8,
    pub log_msg_max: u8,
    /// log2 of the RDMA READs / atomics this QP answers at once.
    pub log_rra_max: u8,
    pub min_rnr_nak: u8,
    pub next_rcv_psn: u32,
    pub path: PathArgs,
}

/// INIT2RTR: the remote QP and the path to it (set as the kernel's
/// mlx5_set_path does for a verbs QP).
pub fn init2rtr(a: &RtrArgs) -> [u8; modify_qp_in::BYTES] {
    let mut b = modify(opcode::INIT2RTR_QP, a.qpn);
    let q = modify_qp_in::QPC;
    let p = q + qpc::PRIMARY_ADDRESS_PATH;
    set(&mut b, qpc::MTU.at(q), a.mtu.into());
    set(&mut b, qpc::LOG_MSG_MAX.at(q), a.log_msg_max.into());
    set(&mut b, qpc::REMOTE_QPN.at(q), a.remote_qpn.into());
    set(&mut b, qpc::LOG_RRA_MAX.at(q), a.log_rra_max.into());
    set(&mut b, qpc::MIN_RNR_NAK.at(q), a.min_rnr_nak.into());
    set(&mut b, qpc::NEXT_RCV_PSN.at(q), a.next_rcv_psn.into());
    set(&mut b, ads::VHCA_PORT_NUM.at(p), a.port.into());
    set(&mut b, ads::STAT_RATE.at(p), 0);
    match a.path {
        PathArgs::Ib { rlid, sl } => {
            set(&mut b, ads::GRH.at(p), 0);
            set(&mut b, ads::MLID.at(p), 0);
            set(&mut b, ads::RLID.at(p), rlid.into());
            set(&mut b, ads::SL.at(p), sl.into());
        }
        PathArgs::Roce { rgid, sgid_index, hop_limit, traffic_class, flow_label, rmac, udp_sport, eth_prio } => {
            set(&mut b, ads::SRC_ADDR_INDEX.at(p), sgid_index.into());
            set(&mut b, ads::HOP_LIMIT.at(p), hop_limit.into());
            set(&mut b, ads::TCLASS.at(p), traffic_class.into());
            set(&mut b, ads::FLOW_LABEL.at(p), flow_label.into());
            set_bytes(&mut b, ads::RGID_RIP.at(p), &rgid);
            set_bytes(&mut b, ads::RMAC_47_32.at(p), &rmac[..2]);
            set_bytes(&mut b, ads::RMAC_31_0.at(p), &rmac[2..]);
            set(&mut b, ads::ETH_PRIO.at(p), eth_prio.into());
            if let Some(sport) = udp_sport {
                set(&mut b, ads::DSCP.at(p), (traffic_class >> 2).into());
                set(&mut b, ads::UDP_SPORT.at(p), sport.into());
            }
        }
    }
    b
}

/// RTR2RTS arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtsArgs {
    pub qpn: u32,
    pub next_send_psn: u32,
    /// log2 of the RDMA READs / atomics this QP has outstanding at once.
    pub log_sra_max: u8,
    pub retry_count: u8,
    pub rnr_retry: u8,
    /// Local ACK timeout, 4.096 us * 2^ack_timeout.
    pub ack_timeout: u8,
}

/// RTR2RTS: send PSN, retries and the ACK timeout.
pub fn rtr2rts(a: &RtsArgs) -> [u8; modify_qp_in::BYTES] {
    let mut b = modify(opcode::RTR2RTS_QP, a.qpn);
    let q = modify_qp_in::QPC;
    let p = q + qpc::PRIMARY_ADDRESS_PATH;
    set(&mut b, qpc::NEXT_SEND_PSN.at(q), a.next_send_psn.into());
    set(&mut b, qpc::LOG_SRA_MAX.at(q), a.log_sra_max.into());
    set(&mut b, qpc::RETRY_COUNT.at(q), a.retry_count.into());
    set(&mut b, qpc::RNR_RETRY.at(q), a.rnr_retry.into());
    set(&mut b, qpc::LOG_ACK_REQ_FREQ.at(q), 0);
    set(&mut b, ads::ACK_TIMEOUT.at(p), a.ack_timeout.into());
    b
}

/// The status and syndrome of a command's output.
pub fn status(out: &[u8]) -> (u8, u32) {
    (get(out, cmd_out::STATUS) as u8, get(out, cmd_out::SYNDROME) as u32)
}
