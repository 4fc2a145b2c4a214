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
//! - The DC transport's layouts (`dctc`, `create_dct_in/out`, `rmpc`, `wq`,
//!   `create_rmp_in/out`, qpc's `log_num_dci_stream_channels`, `st` = DCI)
//!   and `cmd_hca_cap.dct`: the Linux kernel's
//!   `include/linux/mlx5/mlx5_ifc.h` (gregkh/linux aeeea0293f79 for
//!   create_dct_in/out, create_rmp_in, drain/destroy_dct_in; the same
//!   `mlx5_ifc_dctc_bits`, `_rmpc_bits`, `_wq_bits` as the kernel header
//!   copies the code index holds); qpc as rocSHMEM vendors it
//!   (ROCm/rocm-systems d4c13191ef3a
//!   `projects/rocshmem/src/gda/mlx5/mlx5_ifc_core.hpp`); `cmd_hca_cap`,
//!   `query_hca_cap_in/out` and `create_dct_out` also in rdma-core's
//!   `providers/mlx5/mlx5_ifc.h` (691953d8d502), whose `dctc` is a stub.
//!   tests/mlx5_provider.rs checks each offset and each command's bytes.
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
    pub const QUERY_HCA_CAP: u64 = 0x100;
    pub const CREATE_DCT: u64 = 0x710;
    /// Sent by the kernel, not by us: DevX's destroy of a DCT object drains
    /// it first (mlx5_ib devx.c devx_obj_cleanup -> mlx5_core_destroy_dct).
    pub const DRAIN_DCT: u64 = 0x712;
    pub const CREATE_RMP: u64 = 0x90c;
    pub const ALLOC_Q_COUNTER: u64 = 0x771;
    /// Sent by rdma-core when the DevX object is destroyed.
    pub const DEALLOC_Q_COUNTER: u64 = 0x772;
    pub const QUERY_Q_COUNTER: u64 = 0x773;
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
    pub const COUNTER_SET_ID: Field = f(0x060, 0x08);
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

    /// One DCI stream channel is 2^0: DCI streams off, as rdma-core's
    /// mlx5dv_create_qp(DCI) without MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS.
    pub const LOG_NUM_DCI_STREAM_CHANNELS: Field = f(0x3e3, 0x05);

    /// `st`: reliable connected (MLX5_QPC_ST_RC).
    pub const ST_RC: u64 = 0x0;
    /// `st`: DC initiator (MLX5_QPC_ST_DCI).
    pub const ST_DCI: u64 = 0x5;
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

/// DC target context, `struct mlx5_ifc_dctc_bits` (0x200 bits; Linux).
pub mod dctc {
    use super::{f, Field};
    pub const BITS: usize = 0x200;
    pub const STATE: Field = f(0x004, 0x04);
    pub const USER_INDEX: Field = f(0x028, 0x18);
    pub const CQN: Field = f(0x048, 0x18);
    pub const ATOMIC_MODE: Field = f(0x068, 0x04);
    pub const RRE: Field = f(0x06c, 0x01);
    pub const RWE: Field = f(0x06d, 0x01);
    pub const RAE: Field = f(0x06e, 0x01);
    pub const CS_RES: Field = f(0x088, 0x08);
    pub const MIN_RNR_NAK: Field = f(0x093, 0x05);
    pub const SRQN_XRQN: Field = f(0x0a8, 0x18);
    pub const PD: Field = f(0x0c8, 0x18);
    pub const TCLASS: Field = f(0x0e0, 0x08);
    pub const FLOW_LABEL: Field = f(0x0ec, 0x14);
    pub const DC_ACCESS_KEY: Field = f(0x100, 0x40);
    pub const MTU: Field = f(0x145, 0x03);
    pub const PORT: Field = f(0x148, 0x08);
    pub const PKEY_INDEX: Field = f(0x150, 0x10);
    pub const MY_ADDR_INDEX: Field = f(0x168, 0x08);
    pub const HOP_LIMIT: Field = f(0x178, 0x08);
    /// Read by QUERY_DCT (a wrong DC key's count); never written.
    pub const DC_ACCESS_KEY_VIOLATION_COUNT: Field = f(0x180, 0x20);
    pub const ETH_PRIO: Field = f(0x1b5, 0x03);
    pub const DSCP: Field = f(0x1ba, 0x06);
}

/// `struct mlx5_ifc_create_dct_in_bits` (0x400 bits; Linux).
pub mod create_dct_in {
    use super::{f, Field};
    pub const BYTES: usize = 0x400 / 8;
    pub const OPCODE: Field = f(0x000, 0x10);
    /// Start of `dct_context_entry` (a `dctc`).
    pub const DCT_CONTEXT: usize = 0x080;
}

/// `struct mlx5_ifc_create_dct_out_bits`.
pub mod create_dct_out {
    use super::{f, Field};
    pub const DCTN: Field = f(0x048, 0x18);
}

/// Work queue, `struct mlx5_ifc_wq_bits` (0x600 bits; Linux), inside an `rmpc`.
pub mod wq {
    use super::{f, Field};
    pub const BITS: usize = 0x600;
    pub const WQ_TYPE: Field = f(0x000, 0x04);
    pub const PD: Field = f(0x048, 0x18);
    pub const DBR_ADDR: Field = f(0x080, 0x40);
    pub const LOG_WQ_STRIDE: Field = f(0x10c, 0x04);
    pub const LOG_WQ_PG_SZ: Field = f(0x113, 0x05);
    pub const LOG_WQ_SZ: Field = f(0x11b, 0x05);
    pub const DBR_UMEM_VALID: Field = f(0x120, 0x01);
    pub const WQ_UMEM_VALID: Field = f(0x121, 0x01);
    pub const DBR_UMEM_ID: Field = f(0x140, 0x20);
    pub const WQ_UMEM_ID: Field = f(0x160, 0x20);
    pub const WQ_UMEM_OFFSET: Field = f(0x180, 0x40);

    /// MLX5_WQ_TYPE_CYCLIC.
    pub const WQ_TYPE_CYCLIC: u64 = 0x1;
}

/// Receive memory pool context, `struct mlx5_ifc_rmpc_bits` (0x780 bits;
/// Linux): what an SRQ is on ConnectX with ISSI > 0 (mlx5_ib's srq_cmd.c
/// creates every plain SRQ as an RMP).
pub mod rmpc {
    use super::{f, Field};
    pub const BITS: usize = 0x780;
    pub const STATE: Field = f(0x008, 0x04);
    /// Start of `wq`.
    pub const WQ: usize = 0x180;

    /// MLX5_RMPC_STATE_RDY.
    pub const STATE_RDY: u64 = 0x1;
}

/// `struct mlx5_ifc_create_rmp_in_bits` (0x880 bits; Linux).
pub mod create_rmp_in {
    use super::{f, Field};
    pub const BYTES: usize = 0x880 / 8;
    pub const OPCODE: Field = f(0x000, 0x10);
    /// Start of `ctx` (an `rmpc`).
    pub const CTX: usize = 0x100;
}

/// `struct mlx5_ifc_create_rmp_out_bits`.
pub mod create_rmp_out {
    use super::{f, Field};
    pub const RMPN: Field = f(0x048, 0x18);
}

/// `struct mlx5_ifc_query_hca_cap_in_bits` and `_out_bits` (rdma-core
/// mlx5_ifc.h), with the one general capability read: `cmd_hca_cap.dct`.
pub mod query_hca_cap {
    use super::{f, Field};
    pub const IN_BYTES: usize = 0x80 / 8;
    pub const OUT_BYTES: usize = 0x8080 / 8;
    pub const OPCODE: Field = f(0x000, 0x10);
    pub const OP_MOD: Field = f(0x030, 0x10);
    /// Start of `capability` in the output (a `cmd_hca_cap` for op_mod 1).
    pub const CAPABILITY: usize = 0x080;
    /// `cmd_hca_cap.dct`: the device does DC transport.
    pub const CAP_DCT: Field = f(0x21a, 0x01);
    /// (MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE = 0 << 1) | HCA_CAP_OPMOD_GET_CUR (1).
    pub const OP_MOD_GENERAL_CUR: u64 = 0x1;
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
    /// The queue counter set the QP counts into (0: the port's default).
    pub counter_set_id: u32,
}

/// CREATE_QP: an RC QP in RESET with a send queue of 2^log_sq_size WQEBBs at
/// offset 0 of its umem and no receive queue; scatter-to-CQE off both ways
/// (a READ's or atomic's data must land in memory, never in the CQE).
pub fn create_qp(a: &QpArgs) -> [u8; create_qp_in::BYTES] {
    create_qp_of(a, qpc::ST_RC)
}

/// CREATE_QP of a DC initiator: as [`create_qp`] (its send queue, CQ and
/// records in umems, no receive queue) with `st` = DCI and one DCI stream
/// channel (log 0), as mlx5_ib creates a DCI for rdma-core's
/// `mlx5dv_create_qp(MLX5DV_DCTYPE_DCI)` without DCI streams.
pub fn create_dci(a: &QpArgs) -> [u8; create_qp_in::BYTES] {
    let mut b = create_qp_of(a, qpc::ST_DCI);
    set(&mut b, qpc::LOG_NUM_DCI_STREAM_CHANNELS.at(create_qp_in::QPC), 0);
    b
}

fn create_qp_of(a: &QpArgs, st: u64) -> [u8; create_qp_in::BYTES] {
    let mut b = [0u8; create_qp_in::BYTES];
    let q = create_qp_in::QPC;
    set(&mut b, create_qp_in::OPCODE, opcode::CREATE_QP);
    set(&mut b, qpc::ST.at(q), st);
    set(&mut b, qpc::PM_STATE.at(q), qpc::PM_STATE_MIGRATED);
    set(&mut b, qpc::PD.at(q), a.pdn.into());
    set(&mut b, qpc::LOG_SQ_SIZE.at(q), a.log_sq_size.into());
    set(&mut b, qpc::UAR_PAGE.at(q), a.uar_page.into());
    set(&mut b, qpc::COUNTER_SET_ID.at(q), a.counter_set_id.into());
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

/// RST2INIT of a DCI: port and P_Key index only. A DCI is never a
/// responder, so no remote access rights or atomic mode (mlx5_ib's
/// modify_dci_qp_is_ok allows only IB_QP_PKEY_INDEX | IB_QP_PORT here).
pub fn rst2init_dci(qpn: u32, port: u8) -> [u8; modify_qp_in::BYTES] {
    let mut b = modify(opcode::RST2INIT_QP, qpn);
    let q = modify_qp_in::QPC;
    let p = q + qpc::PRIMARY_ADDRESS_PATH;
    set(&mut b, qpc::PM_STATE.at(q), qpc::PM_STATE_MIGRATED);
    set(&mut b, ads::VHCA_PORT_NUM.at(p), port.into());
    set(&mut b, ads::PKEY_INDEX.at(p), 0);
    b
}

/// INIT2RTR of a DCI: path MTU, largest message and the port; no remote
/// QP and no destination in the path: every WQE carries its own address
/// vector (mlx5_ib's modify_dci_qp_is_ok: IB_QP_PATH_MTU, optionally the AV
/// for the port and SL, which is what UCX's dc_mlx5 passes).
pub fn init2rtr_dci(qpn: u32, port: u8, mtu: u8, log_msg_max: u8) -> [u8; modify_qp_in::BYTES] {
    let mut b = modify(opcode::INIT2RTR_QP, qpn);
    let q = modify_qp_in::QPC;
    let p = q + qpc::PRIMARY_ADDRESS_PATH;
    set(&mut b, qpc::MTU.at(q), mtu.into());
    set(&mut b, qpc::LOG_MSG_MAX.at(q), log_msg_max.into());
    set(&mut b, ads::VHCA_PORT_NUM.at(p), port.into());
    b
}

/// CREATE_RMP arguments: the receive queue a DCT needs (see [`create_rmp`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RmpArgs {
    pub pdn: u32,
    /// log2 of the receive WQEs (16 bytes each).
    pub log_wq_sz: u32,
    pub wq_umem_id: u32,
    pub dbr_umem_id: u32,
    /// Byte offset of the receive doorbell record in its umem.
    pub dbr_offset: u64,
}

/// log2 of a receive WQE's bytes: one 16-byte data segment.
pub const RMP_LOG_WQ_STRIDE: u32 = 4;

/// CREATE_RMP: the minimal shared receive queue every DCT names (mlx5_ib
/// refuses a DCT without an SRQ: create_dct, `!attr->srq`). Ready, cyclic,
/// in a umem, never posted to: rust-gin sends only RDMA WRITE, READ and
/// atomics, which consume no receive WQE.
pub fn create_rmp(a: &RmpArgs) -> [u8; create_rmp_in::BYTES] {
    let mut b = [0u8; create_rmp_in::BYTES];
    let r = create_rmp_in::CTX;
    let w = r + rmpc::WQ;
    set(&mut b, create_rmp_in::OPCODE, opcode::CREATE_RMP);
    set(&mut b, rmpc::STATE.at(r), rmpc::STATE_RDY);
    set(&mut b, wq::WQ_TYPE.at(w), wq::WQ_TYPE_CYCLIC);
    set(&mut b, wq::PD.at(w), a.pdn.into());
    set(&mut b, wq::DBR_ADDR.at(w), a.dbr_offset);
    set(&mut b, wq::LOG_WQ_STRIDE.at(w), RMP_LOG_WQ_STRIDE.into());
    // Ignored with a umem (the firmware takes the page size from it).
    set(&mut b, wq::LOG_WQ_PG_SZ.at(w), 0);
    set(&mut b, wq::LOG_WQ_SZ.at(w), a.log_wq_sz.into());
    set(&mut b, wq::DBR_UMEM_VALID.at(w), 1);
    set(&mut b, wq::WQ_UMEM_VALID.at(w), 1);
    set(&mut b, wq::DBR_UMEM_ID.at(w), a.dbr_umem_id.into());
    set(&mut b, wq::WQ_UMEM_ID.at(w), a.wq_umem_id.into());
    set(&mut b, wq::WQ_UMEM_OFFSET.at(w), 0);
    b
}

/// CREATE_DCT arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DctArgs {
    pub pdn: u32,
    pub cqn: u32,
    /// The RMP (SRQ) number.
    pub srqn: u32,
    pub key: u64,
    pub port: u8,
    /// PRM MTU code: the port's active MTU (a DCT serves every peer).
    pub mtu: u8,
    pub min_rnr_nak: u8,
    /// RoCE only: our GID index, hop limit, traffic class (DSCP = tc >> 2
    /// on RoCE v2).
    pub roce: Option<DctRoce>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DctRoce {
    pub my_addr_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub v2: bool,
}

/// CREATE_DCT: a DC target, active at once, with what mlx5_ib sends when
/// an rdma-core DCT goes INIT -> RTR (qp.c mlx5_ib_modify_dct: the fields
/// collected at create and RST2INIT, then one CREATE_DCT): PD, CQ, SRQ, DC
/// key, remote read/write/atomic with the RC QP's atomic mode, port, P_Key
/// index 0, MTU, min RNR NAK timer, and on RoCE the GID index, hop limit
/// and traffic class. user_index 0, no scatter to CQE, no ECE.
pub fn create_dct(a: &DctArgs) -> [u8; create_dct_in::BYTES] {
    let mut b = [0u8; create_dct_in::BYTES];
    let d = create_dct_in::DCT_CONTEXT;
    set(&mut b, create_dct_in::OPCODE, opcode::CREATE_DCT);
    set(&mut b, dctc::PD.at(d), a.pdn.into());
    set(&mut b, dctc::CQN.at(d), a.cqn.into());
    set(&mut b, dctc::SRQN_XRQN.at(d), a.srqn.into());
    set(&mut b, dctc::DC_ACCESS_KEY.at(d), a.key);
    set(&mut b, dctc::RRE.at(d), 1);
    set(&mut b, dctc::RWE.at(d), 1);
    set(&mut b, dctc::RAE.at(d), 1);
    set(&mut b, dctc::ATOMIC_MODE.at(d), qpc::ATOMIC_MODE_IB_SPEC);
    set(&mut b, dctc::PORT.at(d), a.port.into());
    set(&mut b, dctc::PKEY_INDEX.at(d), 0);
    set(&mut b, dctc::MTU.at(d), a.mtu.into());
    set(&mut b, dctc::MIN_RNR_NAK.at(d), a.min_rnr_nak.into());
    set(&mut b, dctc::CS_RES.at(d), 0);
    set(&mut b, dctc::USER_INDEX.at(d), 0);
    if let Some(r) = a.roce {
        set(&mut b, dctc::MY_ADDR_INDEX.at(d), r.my_addr_index.into());
        set(&mut b, dctc::HOP_LIMIT.at(d), r.hop_limit.into());
        set(&mut b, dctc::TCLASS.at(d), r.traffic_class.into());
        if r.v2 {
            set(&mut b, dctc::DSCP.at(d), (r.traffic_class >> 2).into());
        }
    }
    b
}

/// QUERY_HCA_CAP of the current general device capabilities.
pub fn query_hca_cap_general() -> [u8; query_hca_cap::IN_BYTES] {
    let mut b = [0u8; query_hca_cap::IN_BYTES];
    set(&mut b, query_hca_cap::OPCODE, opcode::QUERY_HCA_CAP);
    set(&mut b, query_hca_cap::OP_MOD, query_hca_cap::OP_MOD_GENERAL_CUR);
    b
}

/// Whether QUERY_HCA_CAP's output says the device does DC (`dct`).
pub fn hca_cap_dct(out: &[u8]) -> bool {
    get(out, query_hca_cap::CAP_DCT.at(query_hca_cap::CAPABILITY)) == 1
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

/// Queue counters: `mlx5_ifc_alloc_q_counter_{in,out}_bits` and
/// `mlx5_ifc_query_q_counter_{in,out}_bits`. A set is a DevX object (the
/// kernel sends DEALLOC_Q_COUNTER when it is destroyed, and checks that a
/// query names a set this process allocated).
pub mod q_counter {
    use super::{f, Field};
    pub const ALLOC_IN_BYTES: usize = 0x80 / 8;
    pub const OPCODE: Field = f(0x000, 0x10);
    /// In ALLOC_Q_COUNTER's output.
    pub const ALLOC_OUT_COUNTER_SET_ID: Field = f(0x058, 0x08);
    pub const QUERY_IN_BYTES: usize = 0x100 / 8;
    pub const QUERY_IN_CLEAR: Field = f(0x0c0, 0x01);
    pub const QUERY_IN_COUNTER_SET_ID: Field = f(0x0f8, 0x08);
    pub const QUERY_OUT_BYTES: usize = 0x800 / 8;
    /// The 32-bit counters of QUERY_Q_COUNTER's output, by name and bit.
    pub const COUNTERS: [(&str, usize); 29] = [
        ("rx_write_requests", 0x080),
        ("rx_read_requests", 0x0c0),
        ("rx_atomic_requests", 0x100),
        ("rx_dct_connect", 0x140),
        ("out_of_buffer", 0x180),
        ("out_of_sequence", 0x1c0),
        ("duplicate_request", 0x200),
        ("rnr_nak_retry_err", 0x240),
        ("packet_seq_err", 0x280),
        ("implied_nak_seq_err", 0x2c0),
        ("local_ack_timeout_err", 0x300),
        ("req_rnr_retries_exceeded", 0x380),
        ("resp_local_length_error", 0x3c0),
        ("req_local_length_error", 0x3e0),
        ("resp_local_qp_error", 0x400),
        ("local_operation_error", 0x420),
        ("resp_local_protection", 0x440),
        ("req_local_protection", 0x460),
        ("resp_cqe_error", 0x480),
        ("req_cqe_error", 0x4a0),
        ("req_mw_binding", 0x4c0),
        ("req_bad_response", 0x4e0),
        ("req_remote_invalid_request", 0x500),
        ("resp_remote_invalid_request", 0x520),
        ("req_remote_access_errors", 0x540),
        ("resp_remote_access_errors", 0x560),
        ("req_remote_operation_errors", 0x580),
        ("req_transport_retries_exceeded", 0x5a0),
        ("cq_overflow", 0x5c0),
    ];
}

/// ALLOC_Q_COUNTER.
pub fn alloc_q_counter() -> [u8; q_counter::ALLOC_IN_BYTES] {
    let mut b = [0u8; q_counter::ALLOC_IN_BYTES];
    set(&mut b, q_counter::OPCODE, opcode::ALLOC_Q_COUNTER);
    b
}

/// QUERY_Q_COUNTER of set `id`, without clearing it.
pub fn query_q_counter(id: u32) -> [u8; q_counter::QUERY_IN_BYTES] {
    let mut b = [0u8; q_counter::QUERY_IN_BYTES];
    set(&mut b, q_counter::OPCODE, opcode::QUERY_Q_COUNTER);
    set(&mut b, q_counter::QUERY_IN_CLEAR, 0);
    set(&mut b, q_counter::QUERY_IN_COUNTER_SET_ID, id.into());
    b
}

/// The counters of a QUERY_Q_COUNTER output, by name.
pub fn q_counters(out: &[u8]) -> Vec<(&'static str, u64)> {
    q_counter::COUNTERS.iter().map(|&(name, bit)| (name, get(out, f(bit, 0x20)))).collect()
}
