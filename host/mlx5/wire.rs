//! mlx5 send-queue and completion wire formats (big-endian on the wire), the
//! host-side twin of device/include/rust_gin/mlx5/wire.h. Names follow
//! rdma-core's infiniband/mlx5dv.h; tests/wire_oracle.rs checks every value
//! here against rdma-core itself.

pub const SEND_WQE_BB: usize = 64;
pub const SEND_WQE_SHIFT: u32 = 6;
/// DS counts 16-byte octowords; the field is 6 bits wide.
pub const SEND_DS_BYTES: usize = 16;
pub const MAX_DS: u8 = 63;
pub const INLINE_SEG: u32 = 0x8000_0000;
pub const INVALID_LKEY: u32 = 0x100;
pub const RCV_DBR: usize = 0;
pub const SND_DBR: usize = 1;
pub const CQE_SIZE: usize = 64;
pub const CQE_OWNER_MASK: u8 = 1;
/// Offset of the CQ doorbell in a UAR page.
pub const CQ_DOORBELL: usize = 0x20;
/// Offset of the send doorbell (BlueFlame register 0) in a UAR page.
pub const UAR_DB_OFFSET: usize = 0x800;

/// Send opcodes (the low byte of `opmod_idx_opcode`).
pub mod opcode {
    pub const NOP: u8 = 0x00;
    pub const RDMA_WRITE: u8 = 0x08;
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    pub const SEND: u8 = 0x0a;
    pub const RDMA_READ: u8 = 0x10;
    pub const ATOMIC_CS: u8 = 0x11;
    pub const ATOMIC_FA: u8 = 0x12;
    pub const ATOMIC_MASKED_CS: u8 = 0x14;
    pub const ATOMIC_MASKED_FA: u8 = 0x15;
    /// Not in mlx5dv.h (Linux include/linux/mlx5/qp.h); see wire.h.
    pub const DUMP: u8 = 0x23;
}

/// Bits of the control segment's `fm_ce_se` byte.
pub mod ctrl {
    pub const SOLICITED: u8 = 1 << 1;
    pub const CQ_UPDATE: u8 = 2 << 2;
    /// Completion-and-event mode field (bits 3:2).
    pub const CE_MASK: u8 = 3 << 2;
    pub const FENCE: u8 = 4 << 5;
    pub const INITIATOR_SMALL_FENCE: u8 = 1 << 5;
    /// Fence-mode field (bits 7:5).
    pub const FM_MASK: u8 = 7 << 5;
}

/// CQE opcodes (the high nibble of `op_own`).
pub mod cqe_opcode {
    pub const REQ: u8 = 0;
    pub const RESP_WR_IMM: u8 = 1;
    pub const RESP_SEND: u8 = 2;
    pub const REQ_ERR: u8 = 13;
    pub const RESP_ERR: u8 = 14;
    pub const INVALID: u8 = 15;
}

/// Error-CQE syndromes.
pub mod syndrome {
    pub const LOCAL_LENGTH_ERR: u8 = 0x01;
    pub const LOCAL_QP_OP_ERR: u8 = 0x02;
    pub const LOCAL_PROT_ERR: u8 = 0x04;
    pub const WR_FLUSH_ERR: u8 = 0x05;
    pub const MW_BIND_ERR: u8 = 0x06;
    pub const BAD_RESP_ERR: u8 = 0x10;
    pub const LOCAL_ACCESS_ERR: u8 = 0x11;
    pub const REMOTE_INVAL_REQ_ERR: u8 = 0x12;
    pub const REMOTE_ACCESS_ERR: u8 = 0x13;
    pub const REMOTE_OP_ERR: u8 = 0x14;
    pub const TRANSPORT_RETRY_EXC_ERR: u8 = 0x15;
    pub const RNR_RETRY_EXC_ERR: u8 = 0x16;
    pub const REMOTE_ABORTED_ERR: u8 = 0x22;

    /// rdma-core's name for a syndrome, for log lines.
    pub fn name(s: u8) -> &'static str {
        match s {
            LOCAL_LENGTH_ERR => "LOCAL_LENGTH_ERR",
            LOCAL_QP_OP_ERR => "LOCAL_QP_OP_ERR",
            LOCAL_PROT_ERR => "LOCAL_PROT_ERR",
            WR_FLUSH_ERR => "WR_FLUSH_ERR",
            MW_BIND_ERR => "MW_BIND_ERR",
            BAD_RESP_ERR => "BAD_RESP_ERR",
            LOCAL_ACCESS_ERR => "LOCAL_ACCESS_ERR",
            REMOTE_INVAL_REQ_ERR => "REMOTE_INVAL_REQ_ERR",
            REMOTE_ACCESS_ERR => "REMOTE_ACCESS_ERR",
            REMOTE_OP_ERR => "REMOTE_OP_ERR",
            TRANSPORT_RETRY_EXC_ERR => "TRANSPORT_RETRY_EXC_ERR",
            RNR_RETRY_EXC_ERR => "RNR_RETRY_EXC_ERR",
            REMOTE_ABORTED_ERR => "REMOTE_ABORTED_ERR",
            _ => "UNKNOWN_SYNDROME",
        }
    }
}

/// Byte offsets inside a 16-byte control segment.
pub mod ctrl_off {
    pub const OPMOD_IDX_OPCODE: usize = 0;
    pub const QPN_DS: usize = 4;
    pub const SIGNATURE: usize = 8;
    pub const DCI_STREAM_CHANNEL_ID: usize = 9;
    pub const FM_CE_SE: usize = 11;
    pub const IMM: usize = 12;
}

/// Byte offsets inside a 64-byte CQE (struct mlx5_cqe64 / mlx5_err_cqe).
pub mod cqe_off {
    pub const SRQN_UIDX: usize = 32;
    pub const IMM_INVAL_PKEY: usize = 36;
    pub const BYTE_CNT: usize = 44;
    pub const TIMESTAMP: usize = 48;
    pub const VENDOR_ERR_SYND: usize = 54;
    pub const SYNDROME: usize = 55;
    /// `sop_drop_qpn` in a good CQE, `s_wqe_opcode_qpn` in an error CQE.
    pub const SOP_DROP_QPN: usize = 56;
    pub const WQE_COUNTER: usize = 60;
    pub const SIGNATURE: usize = 62;
    pub const OP_OWN: usize = 63;
}

/// Segment sizes (all 16 bytes but the inline header).
pub const CTRL_SEG_SIZE: usize = 16;
pub const RADDR_SEG_SIZE: usize = 16;
pub const DATA_SEG_SIZE: usize = 16;
pub const ATOMIC_SEG_SIZE: usize = 16;
pub const INLINE_HDR_SIZE: usize = 4;
/// The DC datagram segment (`struct mlx5_wqe_datagram_seg` = `struct mlx5_wqe_av`).
pub const DATAGRAM_SEG_SIZE: usize = 48;
/// `dqp_dct`: the AV is the 48-byte extended form.
pub const EXTENDED_UD_AV: u32 = 0x8000_0000;

/// Byte offsets inside the datagram segment (`struct mlx5_wqe_av`).
pub mod av_off {
    pub const DC_KEY: usize = 0;
    pub const DQP_DCT: usize = 8;
    pub const STAT_RATE_SL: usize = 12;
    pub const FL_MLID: usize = 13;
    pub const RLID: usize = 14;
    pub const RESERVED0: usize = 16;
    pub const RMAC: usize = 20;
    pub const TCLASS: usize = 26;
    pub const HOP_LIMIT: usize = 27;
    pub const GRH_GID_FL: usize = 28;
    pub const RGID: usize = 32;
}

// One bounds check per field, not one per byte (the emulated NIC parses a
// control segment per WQE).
#[inline]
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

/// A decoded control segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtrlSeg {
    pub opmod: u8,
    pub wqe_index: u16,
    pub opcode: u8,
    pub qpn: u32,
    pub ds: u8,
    pub signature: u8,
    pub fm_ce_se: u8,
    /// As stored (wire order).
    pub imm: u32,
}

impl CtrlSeg {
    #[inline]
    pub fn parse(b: &[u8]) -> CtrlSeg {
        // One bounds check for the whole segment.
        let b: &[u8; 16] = b[..16].try_into().expect("16 bytes");
        let oio = be32(b, ctrl_off::OPMOD_IDX_OPCODE);
        let qd = be32(b, ctrl_off::QPN_DS);
        CtrlSeg {
            opmod: (oio >> 24) as u8,
            wqe_index: (oio >> 8) as u16,
            opcode: oio as u8,
            qpn: qd >> 8,
            ds: (qd & 0x3f) as u8,
            signature: b[ctrl_off::SIGNATURE],
            fm_ce_se: b[ctrl_off::FM_CE_SE],
            imm: u32::from_ne_bytes([b[12], b[13], b[14], b[15]]),
        }
    }

    /// The bytes `mlx5dv_set_ctrl_seg` would write.
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        let oio = ((self.opmod as u32) << 24) | ((self.wqe_index as u32) << 8) | self.opcode as u32;
        b[0..4].copy_from_slice(&oio.to_be_bytes());
        b[4..8].copy_from_slice(&((self.qpn << 8) | self.ds as u32).to_be_bytes());
        b[ctrl_off::SIGNATURE] = self.signature;
        b[ctrl_off::FM_CE_SE] = self.fm_ce_se;
        b[12..16].copy_from_slice(&self.imm.to_ne_bytes());
        b
    }

    pub fn cq_update(&self) -> bool {
        self.fm_ce_se & ctrl::CE_MASK == ctrl::CQ_UPDATE
    }
    pub fn fence_mode(&self) -> u8 {
        self.fm_ce_se & ctrl::FM_MASK
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaddrSeg {
    pub raddr: u64,
    pub rkey: u32,
}
impl RaddrSeg {
    pub fn parse(b: &[u8]) -> RaddrSeg {
        RaddrSeg { raddr: be64(b, 0), rkey: be32(b, 8) }
    }
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&self.raddr.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataSeg {
    pub byte_count: u32,
    pub lkey: u32,
    pub addr: u64,
}
impl DataSeg {
    pub fn parse(b: &[u8]) -> DataSeg {
        DataSeg { byte_count: be32(b, 0), lkey: be32(b, 4), addr: be64(b, 8) }
    }
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..4].copy_from_slice(&self.byte_count.to_be_bytes());
        b[4..8].copy_from_slice(&self.lkey.to_be_bytes());
        b[8..16].copy_from_slice(&self.addr.to_be_bytes());
        b
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicSeg {
    pub swap_add: u64,
    pub compare: u64,
}
impl AtomicSeg {
    pub fn parse(b: &[u8]) -> AtomicSeg {
        AtomicSeg { swap_add: be64(b, 0), compare: be64(b, 8) }
    }
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&self.swap_add.to_be_bytes());
        b[8..16].copy_from_slice(&self.compare.to_be_bytes());
        b
    }
}

/// The datagram segment of a DC initiator's WQE (`struct mlx5_wqe_av`), as
/// rdma-core's `mlx5dv_set_dgram_seg` fills it; `dqp_dct` holds the DCT
/// number (24 bits) and `ext` the [`EXTENDED_UD_AV`] bit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DatagramSeg {
    pub dc_key: u64,
    pub dqp_dct: u32,
    pub ext: bool,
    pub stat_rate_sl: u8,
    pub fl_mlid: u8,
    pub rlid: u16,
    pub rmac: [u8; 6],
    pub tclass: u8,
    pub hop_limit: u8,
    pub grh_gid_fl: u32,
    pub rgid: [u8; 16],
}

impl DatagramSeg {
    /// The 48 bytes `mlx5dv_set_dgram_seg` writes.
    pub fn encode(&self) -> [u8; DATAGRAM_SEG_SIZE] {
        let mut b = [0u8; DATAGRAM_SEG_SIZE];
        b[av_off::DC_KEY..av_off::DC_KEY + 8].copy_from_slice(&self.dc_key.to_be_bytes());
        let dqp = ((self.ext as u32) << 31) | self.dqp_dct;
        b[av_off::DQP_DCT..av_off::DQP_DCT + 4].copy_from_slice(&dqp.to_be_bytes());
        b[av_off::STAT_RATE_SL] = self.stat_rate_sl;
        b[av_off::FL_MLID] = self.fl_mlid;
        b[av_off::RLID..av_off::RLID + 2].copy_from_slice(&self.rlid.to_be_bytes());
        b[av_off::RMAC..av_off::RMAC + 6].copy_from_slice(&self.rmac);
        b[av_off::TCLASS] = self.tclass;
        b[av_off::HOP_LIMIT] = self.hop_limit;
        b[av_off::GRH_GID_FL..av_off::GRH_GID_FL + 4].copy_from_slice(&self.grh_gid_fl.to_be_bytes());
        b[av_off::RGID..av_off::RGID + 16].copy_from_slice(&self.rgid);
        b
    }

    pub fn parse(b: &[u8]) -> DatagramSeg {
        let dqp = be32(b, av_off::DQP_DCT);
        let mut rmac = [0u8; 6];
        rmac.copy_from_slice(&b[av_off::RMAC..av_off::RMAC + 6]);
        let mut rgid = [0u8; 16];
        rgid.copy_from_slice(&b[av_off::RGID..av_off::RGID + 16]);
        DatagramSeg {
            dc_key: be64(b, av_off::DC_KEY),
            dqp_dct: dqp & !EXTENDED_UD_AV,
            ext: dqp & EXTENDED_UD_AV != 0,
            stat_rate_sl: b[av_off::STAT_RATE_SL],
            fl_mlid: b[av_off::FL_MLID],
            rlid: u16::from_be_bytes([b[av_off::RLID], b[av_off::RLID + 1]]),
            rmac,
            tclass: b[av_off::TCLASS],
            hop_limit: b[av_off::HOP_LIMIT],
            grh_gid_fl: be32(b, av_off::GRH_GID_FL),
            rgid,
        }
    }

    /// What rdma-core's `mlx5_send_wr_set_dc_addr` writes: the address
    /// handle's AV (`self`) with `dctn | EXTENDED_UD_AV` or-ed into
    /// `dqp_dct` and the DC key replaced.
    pub fn with_dc_addr(&self, dctn: u32, dc_key: u64) -> DatagramSeg {
        DatagramSeg { dqp_dct: self.dqp_dct | (dctn & !EXTENDED_UD_AV), ext: true, dc_key, ..*self }
    }
}

/// The inline-data header: byte count with [`INLINE_SEG`] set.
pub fn inline_header(len: u32) -> [u8; 4] {
    (len | INLINE_SEG).to_be_bytes()
}

/// The 8-byte send doorbell: the first 8 bytes of a control segment naming
/// the QP and the new producer index.
pub fn doorbell_value(qpn: u32, pi: u16) -> u64 {
    let c = CtrlSeg { opmod: 0, wqe_index: pi, opcode: 0, qpn, ds: 0, signature: 0, fm_ce_se: 0, imm: 0 };
    let b = c.encode();
    u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

/// Decodes the 8-byte doorbell into (qpn, producer index).
pub fn parse_doorbell(value: u64) -> (u32, u16) {
    let c = CtrlSeg::parse(&[value.to_le_bytes().as_slice(), &[0u8; 8]].concat());
    (c.qpn, c.wqe_index)
}

/// A CQE as the NIC writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqe {
    pub opcode: u8,
    pub qpn: u32,
    pub wqe_counter: u16,
    pub byte_cnt: u32,
    /// Error CQEs only.
    pub syndrome: u8,
    pub vendor_syndrome: u8,
    /// Error CQEs only: opcode of the failed WQE.
    pub wqe_opcode: u8,
    /// RESP_WR_IMM only, wire order.
    pub imm: u32,
}

impl Cqe {
    pub fn is_error(&self) -> bool {
        self.opcode == cqe_opcode::REQ_ERR || self.opcode == cqe_opcode::RESP_ERR
    }

    /// The 64 bytes of the CQE with the given owner bit.
    pub fn encode(&self, owner: u8) -> [u8; CQE_SIZE] {
        let mut b = [0u8; CQE_SIZE];
        b[cqe_off::IMM_INVAL_PKEY..cqe_off::IMM_INVAL_PKEY + 4].copy_from_slice(&self.imm.to_ne_bytes());
        b[cqe_off::BYTE_CNT..cqe_off::BYTE_CNT + 4].copy_from_slice(&self.byte_cnt.to_be_bytes());
        let qpn_word = if self.is_error() {
            b[cqe_off::VENDOR_ERR_SYND] = self.vendor_syndrome;
            b[cqe_off::SYNDROME] = self.syndrome;
            ((self.wqe_opcode as u32) << 24) | (self.qpn & 0xff_ffff)
        } else {
            self.qpn & 0xff_ffff
        };
        b[cqe_off::SOP_DROP_QPN..cqe_off::SOP_DROP_QPN + 4].copy_from_slice(&qpn_word.to_be_bytes());
        b[cqe_off::WQE_COUNTER..cqe_off::WQE_COUNTER + 2].copy_from_slice(&self.wqe_counter.to_be_bytes());
        b[cqe_off::OP_OWN] = (self.opcode << 4) | (owner & CQE_OWNER_MASK);
        b
    }

    pub fn parse(b: &[u8]) -> Cqe {
        let op_own = b[cqe_off::OP_OWN];
        let opcode = op_own >> 4;
        let word = be32(b, cqe_off::SOP_DROP_QPN);
        let is_err = opcode == cqe_opcode::REQ_ERR || opcode == cqe_opcode::RESP_ERR;
        Cqe {
            opcode,
            qpn: word & 0xff_ffff,
            wqe_counter: u16::from_be_bytes([b[cqe_off::WQE_COUNTER], b[cqe_off::WQE_COUNTER + 1]]),
            byte_cnt: be32(b, cqe_off::BYTE_CNT),
            syndrome: if is_err { b[cqe_off::SYNDROME] } else { 0 },
            vendor_syndrome: if is_err { b[cqe_off::VENDOR_ERR_SYND] } else { 0 },
            wqe_opcode: if is_err { (word >> 24) as u8 } else { 0 },
            imm: u32::from_ne_bytes([b[36], b[37], b[38], b[39]]),
        }
    }
}

/// The owner-bit rule: the CQE at consumer index `ci` of a CQ with
/// `2^log_cnt` entries belongs to software when its owner bit equals the wrap
/// parity of `ci` and its opcode is not INVALID.
pub fn cqe_is_sw_owned(op_own: u8, ci: u32, log_cnt: u32) -> bool {
    (op_own & CQE_OWNER_MASK) as u32 == ((ci >> log_cnt) & 1) && (op_own >> 4) != cqe_opcode::INVALID
}

/// The owner bit the NIC writes into the CQE at producer index `pi`.
pub fn cqe_owner_for(pi: u32, log_cnt: u32) -> u8 {
    ((pi >> log_cnt) & 1) as u8
}

/// Initial `op_own` of every CQE: INVALID opcode, owner bit 1, so a fresh
/// CQ reads as hardware-owned on the first pass.
pub const CQE_INIT_OP_OWN: u8 = 0xF1;
