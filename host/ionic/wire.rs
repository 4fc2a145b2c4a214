//! ionic (AMD Pensando Pollara) send-queue, doorbell and completion wire
//! formats, the host-side twin of device/include/rust_gin/ionic/wire.h. The
//! WQE index is little-endian, every other field big-endian. Names follow
//! rdma-core's providers/ionic without the IONIC_ prefix;
//! tests/wire_oracle_ionic.rs checks every value here against the cited
//! rdma-core definitions and every encoder against bytes built from the cited
//! layout. docs/nic-families.md describes the formats.

/// The smallest send WQE (`sizeof(struct ionic_v1_wqe)`); rings use a
/// power-of-two stride of at least this.
pub const WQE_BYTES: usize = 64;
pub const WQE_BASE_BYTES: usize = 16;
/// Where the SGEs or the inline data start in a WQE.
pub const PLD_OFFSET: usize = 32;
pub const PLD_BYTES: usize = 32;
pub const SGE_BYTES: usize = 16;
pub const CQE_BYTES: usize = 32;
/// The express doorbell some rings keep in the last 8 bytes of each WQE.
pub const EXP_DBELL_SZ: usize = 8;
pub const MIN_RDMA_VERSION: u16 = 1;
/// Firmware ABI version 2 and later take the v2 opcodes.
pub const MAX_RDMA_VERSION: u16 = 2;
pub const QUEUE_DEPTH_MAX: u32 = 0xFFFF;

/// Send opcodes of firmware ABI version 1.
pub mod op_v1 {
    pub const SEND: u8 = 0;
    pub const SEND_IMM: u8 = 2;
    pub const RDMA_READ: u8 = 3;
    pub const RDMA_WRITE: u8 = 4;
    pub const RDMA_WRITE_IMM: u8 = 5;
    pub const ATOMIC_CS: u8 = 6;
    pub const ATOMIC_FA: u8 = 7;
}

/// Send opcodes of firmware ABI version 2.
pub mod op_v2 {
    pub const OPSL_OUT: u8 = 0x20;
    pub const OPSL_IMM: u8 = 0x40;
    pub const SEND: u8 = 0x20;
    pub const SEND_IMM: u8 = 0x60;
    pub const RDMA_WRITE: u8 = 0x21;
    pub const RDMA_WRITE_IMM: u8 = 0x61;
    pub const RDMA_READ: u8 = 0x02;
    pub const ATOMIC_CS: u8 = 0x04;
    pub const ATOMIC_FA: u8 = 0x05;
}

/// Base-header flags (be16).
pub mod flags {
    pub const FENCE: u16 = 1 << 0;
    pub const SOL: u16 = 1 << 1;
    pub const INL: u16 = 1 << 2;
    pub const SIG: u16 = 1 << 3;
    pub const COLOR: u16 = 1 << 4;
}

/// The doorbell: qid << 24 | producer index, one le64 write to dbpage[qtype].
pub mod db {
    pub const QID_MASK: u64 = (1 << 24) - 1;
    pub const QID_SHIFT: u32 = 24;
    pub const RING_ARM: u64 = 1 << 16;
    pub const RING_SONLY: u64 = 1 << 17;
}

/// `qid_type_flags` (be32) = qid << 8 | type << 5 | error << 1 | color.
pub mod cqe {
    pub const COLOR: u32 = 1 << 0;
    pub const ERROR: u32 = 1 << 1;
    pub const TYPE_SHIFT: u32 = 5;
    pub const TYPE_MASK: u32 = 0x7;
    pub const QID_SHIFT: u32 = 8;
    pub const WQE_IDX_MASK: u64 = 0xffff;
    pub const TIMESTAMP_SHIFT: u32 = 16;
    pub const TYPE_RECV: u32 = 1;
    pub const TYPE_SEND_MSN: u32 = 2;
    pub const TYPE_SEND_NPG: u32 = 3;
}

/// `status_length` when the CQE's error bit is set.
pub mod status {
    pub const OK: u32 = 0;
    pub const LOCAL_LEN_ERR: u32 = 1;
    pub const LOCAL_QP_OPER_ERR: u32 = 2;
    pub const LOCAL_PROT_ERR: u32 = 3;
    pub const WQE_FLUSHED_ERR: u32 = 4;
    pub const MEM_MGMT_OPER_ERR: u32 = 5;
    pub const BAD_RESP_ERR: u32 = 6;
    pub const LOCAL_ACC_ERR: u32 = 7;
    pub const REMOTE_INV_REQ_ERR: u32 = 8;
    pub const REMOTE_ACC_ERR: u32 = 9;
    pub const REMOTE_OPER_ERR: u32 = 10;
    pub const RETRY_EXCEEDED: u32 = 11;
    pub const RNR_RETRY_EXCEEDED: u32 = 12;
    pub const XRC_VIO_ERR: u32 = 13;

    /// rdma-core's name for a status, for log lines.
    pub fn name(s: u32) -> &'static str {
        match s {
            OK => "OK",
            LOCAL_LEN_ERR => "LOCAL_LEN_ERR",
            LOCAL_QP_OPER_ERR => "LOCAL_QP_OPER_ERR",
            LOCAL_PROT_ERR => "LOCAL_PROT_ERR",
            WQE_FLUSHED_ERR => "WQE_FLUSHED_ERR",
            MEM_MGMT_OPER_ERR => "MEM_MGMT_OPER_ERR",
            BAD_RESP_ERR => "BAD_RESP_ERR",
            LOCAL_ACC_ERR => "LOCAL_ACC_ERR",
            REMOTE_INV_REQ_ERR => "REMOTE_INV_REQ_ERR",
            REMOTE_ACC_ERR => "REMOTE_ACC_ERR",
            REMOTE_OPER_ERR => "REMOTE_OPER_ERR",
            RETRY_EXCEEDED => "RETRY_EXCEEDED",
            RNR_RETRY_EXCEEDED => "RNR_RETRY_EXCEEDED",
            XRC_VIO_ERR => "XRC_VIO_ERR",
            _ => "UNKNOWN_STATUS",
        }
    }
}

/// Byte offsets inside a WQE and a CQE.
pub mod off {
    pub const OP: usize = 8;
    pub const NUM_SGE_KEY: usize = 9;
    pub const FLAGS: usize = 10;
    pub const IMM_DATA_KEY: usize = 12;
    pub const REMOTE_VA_HIGH: usize = 16;
    pub const REMOTE_VA_LOW: usize = 20;
    pub const REMOTE_RKEY: usize = 24;
    /// `common.length` of RDMA WQEs, `atomic_v2.swap_add_high` of atomics.
    pub const LENGTH: usize = 28;
    pub const SWAP_ADD_HIGH: usize = 28;
    pub const SWAP_ADD_LOW: usize = 32;
    pub const COMPARE_HIGH: usize = 36;
    pub const COMPARE_LOW: usize = 40;
    pub const ATOMIC_LKEY: usize = 44;
    pub const ATOMIC_LOCAL_VA: usize = 48;
    /// `atomic.sge` of a version-1 atomic: the result's SGE.
    pub const ATOMIC_V1_SGE: usize = 48;
    pub const SGE_LEN: usize = 8;
    pub const SGE_LKEY: usize = 12;
    pub const CQE_MSG_MSN: usize = 4;
    pub const CQE_NPG_WQE_IDX_TIMESTAMP: usize = 16;
    pub const CQE_STATUS_LENGTH: usize = 24;
    pub const CQE_QID_TYPE_FLAGS: usize = 28;
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}
fn put_be32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// The colour of free-running index `i` on a ring of `depth` entries:
/// 1 on the first pass, flipped at every wrap (rdma-core starts the SQ and
/// CQ colour at 1 and flips it when the index wraps to 0).
pub fn color_for(i: u64, depth: u32) -> u32 {
    (((i / depth as u64) & 1) ^ 1) as u32
}

/// A decoded send WQE (RDMA or v2 atomic).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wqe {
    pub wqe_idx: u16,
    pub op: u8,
    pub num_sge_key: u8,
    pub flags: u16,
    /// As stored (wire order).
    pub imm_be: u32,
    pub remote_va: u64,
    pub rkey: u32,
    /// RDMA: `common.length`; atomics: `swap_add_high`.
    pub word28: u32,
    /// Bytes 32..64: SGEs, inline data, or the rest of an atomic body.
    pub tail: [u8; 32],
}

impl Wqe {
    fn base(op: u8, idx: u16, num_sge_key: u8, fl: u16, color: u32, raddr: u64, rkey: u32) -> Wqe {
        let fl = (fl & !flags::COLOR) | if color != 0 { flags::COLOR } else { 0 };
        Wqe { wqe_idx: idx, op, num_sge_key, flags: fl, imm_be: 0, remote_va: raddr, rkey, word28: 0, tail: [0; 32] }
    }

    /// RDMA WRITE / WRITE_IMM / READ with one SGE.
    #[allow(clippy::too_many_arguments)]
    pub fn rdma(
        op: u8,
        idx: u16,
        fl: u16,
        color: u32,
        raddr: u64,
        rkey: u32,
        laddr: u64,
        lkey: u32,
        length: u32,
        imm_be: u32,
    ) -> Wqe {
        let mut w = Wqe::base(op, idx, 1, fl & !flags::INL, color, raddr, rkey);
        w.imm_be = imm_be;
        w.word28 = length;
        w.tail[0..8].copy_from_slice(&laddr.to_be_bytes());
        put_be32(&mut w.tail, off::SGE_LEN, length);
        put_be32(&mut w.tail, off::SGE_LKEY, lkey);
        w
    }

    /// RDMA WRITE of up to 8 inline bytes.
    #[allow(clippy::too_many_arguments)]
    pub fn write_inline8(op: u8, idx: u16, fl: u16, color: u32, raddr: u64, rkey: u32, value: u64, len: u32) -> Wqe {
        let mut w = Wqe::base(op, idx, 0, fl | flags::INL, color, raddr, rkey);
        w.word28 = len;
        w.tail[..len as usize].copy_from_slice(&value.to_le_bytes()[..len as usize]);
        w
    }

    /// Version-2 FETCH_ADD / CMP_SWAP; the result lands at `laddr`.
    #[allow(clippy::too_many_arguments)]
    pub fn atomic_v2(
        op: u8,
        idx: u16,
        fl: u16,
        color: u32,
        raddr: u64,
        rkey: u32,
        swap_add: u64,
        compare: u64,
        laddr: u64,
        lkey: u32,
    ) -> Wqe {
        let mut w = Wqe::base(op, idx, 1, fl & !(flags::INL | flags::SOL), color, raddr, rkey);
        let compare = if op == op_v2::ATOMIC_CS { compare } else { 0 };
        w.word28 = (swap_add >> 32) as u32;
        let t = off::SWAP_ADD_LOW - PLD_OFFSET;
        put_be32(&mut w.tail, t, swap_add as u32);
        put_be32(&mut w.tail, off::COMPARE_HIGH - PLD_OFFSET, (compare >> 32) as u32);
        put_be32(&mut w.tail, off::COMPARE_LOW - PLD_OFFSET, compare as u32);
        put_be32(&mut w.tail, off::ATOMIC_LKEY - PLD_OFFSET, lkey);
        let v = off::ATOMIC_LOCAL_VA - PLD_OFFSET;
        w.tail[v..v + 8].copy_from_slice(&laddr.to_be_bytes());
        w
    }

    /// Version-1 FETCH_ADD / CMP_SWAP (`ionic_v1_atomic_bdy`): the operands
    /// as in version 2, then a reserved word and the result's SGE (va, 8,
    /// lkey) at @48.
    #[allow(clippy::too_many_arguments)]
    pub fn atomic_v1(
        op: u8,
        idx: u16,
        fl: u16,
        color: u32,
        raddr: u64,
        rkey: u32,
        swap_add: u64,
        compare: u64,
        laddr: u64,
        lkey: u32,
    ) -> Wqe {
        let v2 = if op == op_v1::ATOMIC_CS { op_v2::ATOMIC_CS } else { op_v2::ATOMIC_FA };
        let mut w = Wqe::atomic_v2(v2, idx, fl, color, raddr, rkey, swap_add, compare, laddr, lkey);
        w.op = op;
        put_be32(&mut w.tail, off::ATOMIC_LKEY - PLD_OFFSET, 0);
        let s = off::ATOMIC_V1_SGE - PLD_OFFSET;
        w.tail[s..s + 8].copy_from_slice(&laddr.to_be_bytes());
        put_be32(&mut w.tail, s + off::SGE_LEN, 8);
        put_be32(&mut w.tail, s + off::SGE_LKEY, lkey);
        w
    }

    pub fn encode(&self) -> [u8; WQE_BYTES] {
        let mut b = [0u8; WQE_BYTES];
        b[0..8].copy_from_slice(&(self.wqe_idx as u64).to_le_bytes());
        b[off::OP] = self.op;
        b[off::NUM_SGE_KEY] = self.num_sge_key;
        b[off::FLAGS..off::FLAGS + 2].copy_from_slice(&self.flags.to_be_bytes());
        b[off::IMM_DATA_KEY..off::IMM_DATA_KEY + 4].copy_from_slice(&self.imm_be.to_ne_bytes());
        put_be32(&mut b, off::REMOTE_VA_HIGH, (self.remote_va >> 32) as u32);
        put_be32(&mut b, off::REMOTE_VA_LOW, self.remote_va as u32);
        put_be32(&mut b, off::REMOTE_RKEY, self.rkey);
        put_be32(&mut b, off::LENGTH, self.word28);
        b[PLD_OFFSET..].copy_from_slice(&self.tail);
        b
    }

    pub fn parse(b: &[u8]) -> Wqe {
        Wqe {
            wqe_idx: u64::from_le_bytes(b[0..8].try_into().unwrap()) as u16,
            op: b[off::OP],
            num_sge_key: b[off::NUM_SGE_KEY],
            flags: u16::from_be_bytes([b[off::FLAGS], b[off::FLAGS + 1]]),
            imm_be: u32::from_ne_bytes(b[off::IMM_DATA_KEY..off::IMM_DATA_KEY + 4].try_into().unwrap()),
            remote_va: ((be32(b, off::REMOTE_VA_HIGH) as u64) << 32) | be32(b, off::REMOTE_VA_LOW) as u64,
            rkey: be32(b, off::REMOTE_RKEY),
            word28: be32(b, off::LENGTH),
            tail: b[PLD_OFFSET..WQE_BYTES].try_into().unwrap(),
        }
    }

    /// The first SGE of an RDMA WQE: (addr, len, lkey).
    pub fn sge0(&self) -> (u64, u32, u32) {
        (
            u64::from_be_bytes(self.tail[0..8].try_into().unwrap()),
            be32(&self.tail, off::SGE_LEN),
            be32(&self.tail, off::SGE_LKEY),
        )
    }
}

/// The doorbell value: qid << 24 | producer index.
pub fn db_value(qid: u32, prod: u16) -> u64 {
    ((qid as u64 & db::QID_MASK) << db::QID_SHIFT) | prod as u64
}

/// Decodes a doorbell value into (qid, producer index).
pub fn parse_doorbell(v: u64) -> (u32, u16) {
    ((v >> db::QID_SHIFT) as u32 & db::QID_MASK as u32, v as u16)
}

/// Byte offset of a queue type's doorbell in the doorbell page.
pub fn db_offset(qtype: u8) -> usize {
    qtype as usize * 8
}

/// A send CQE as the NIC writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqe {
    /// SEND_MSN: completed remote messages so far (the low bits index the SQ).
    pub msg_msn: u32,
    /// SEND_NPG: the WQE index (low 16 bits) and timestamp.
    pub npg_wqe_idx_timestamp: u64,
    /// The status when `error`, else the length.
    pub status_length: u32,
    pub qid: u32,
    pub typ: u32,
    pub error: bool,
}

impl Cqe {
    pub fn qtf(&self, color: u32) -> u32 {
        (self.qid << cqe::QID_SHIFT)
            | ((self.typ & cqe::TYPE_MASK) << cqe::TYPE_SHIFT)
            | if self.error { cqe::ERROR } else { 0 }
            | (color & cqe::COLOR)
    }
    pub fn encode(&self, color: u32) -> [u8; CQE_BYTES] {
        let mut b = [0u8; CQE_BYTES];
        put_be32(&mut b, off::CQE_MSG_MSN, self.msg_msn);
        b[16..24].copy_from_slice(&self.npg_wqe_idx_timestamp.to_le_bytes());
        put_be32(&mut b, off::CQE_STATUS_LENGTH, self.status_length);
        put_be32(&mut b, off::CQE_QID_TYPE_FLAGS, self.qtf(color));
        b
    }
    pub fn parse(b: &[u8]) -> Cqe {
        let qtf = be32(b, off::CQE_QID_TYPE_FLAGS);
        Cqe {
            msg_msn: be32(b, off::CQE_MSG_MSN),
            npg_wqe_idx_timestamp: u64::from_le_bytes(b[16..24].try_into().unwrap()),
            status_length: be32(b, off::CQE_STATUS_LENGTH),
            qid: qtf >> cqe::QID_SHIFT,
            typ: (qtf >> cqe::TYPE_SHIFT) & cqe::TYPE_MASK,
            error: qtf & cqe::ERROR != 0,
        }
    }
}

/// Whether the CQE with host-order `qtf` is new at free-running consumer
/// index `ci` of a CQ of `depth` entries.
pub fn cqe_is_valid(qtf: u32, ci: u64, depth: u32) -> bool {
    qtf & cqe::COLOR == color_for(ci, depth)
}
