//! bnxt_re (Broadcom Thor2) send-queue, doorbell and completion wire formats
//! (little-endian on the wire), the host-side twin of
//! device/include/rust_gin/bnxt/wire.h. Names follow rdma-core's
//! providers/bnxt_re without the BNXT_RE_ prefix; tests/wire_oracle_bnxt.rs
//! checks every value here against the installed uapi header and the cited
//! provider sources, and every encoder against bytes built from the cited
//! layout. docs/nic-families.md describes the formats.

/// The send queue is a ring of 16-byte slots (`sizeof(struct bnxt_re_sge)`).
pub const SLOT_BYTES: usize = 16;
pub const SLOT_SHIFT: u32 = 4;
/// The two header slots of every send WQE (`bnxt_re_get_sqe_hdr_sz()`).
pub const SQE_HDR_BYTES: usize = 32;
/// Slots a static-mode WQE occupies whatever its size.
pub const STATIC_WQE_SLOTS: u32 = 8;
pub const STATIC_WQE_MAX_SGE: u32 = 6;
pub const MAX_INLINE: u32 = 0x60;
/// A CQ entry: `struct bnxt_re_req_cqe` then `struct bnxt_re_bcqe`.
pub const CQE_BYTES: usize = 32;
/// The phase of a fresh CQ's first pass.
pub const CQ_START_PHASE: u32 = 1;
/// `uctx_resp.comp_mask` bit: the QP keeps an MSN search table.
pub const UCNTX_MSN_TABLE_ENABLED: u64 = 0x08;
/// Byte offset of the requester CQE's `con_indx` and of the `bcqe` word.
pub const CQE_CON_INDX_OFFSET: usize = 8;
pub const CQE_BCQE_OFFSET: usize = 24;

/// The uapi's answers the host reads (`<rdma/bnxt_re-abi.h>`).
pub mod uapi {
    pub const ABI_VERSION: u32 = 1;
    pub const CHIP_ID0_CHIP_NUM_SFT: u32 = 0x00;
    pub const CHIP_ID0_CHIP_REV_SFT: u32 = 0x10;
    pub const CHIP_ID0_CHIP_MET_SFT: u32 = 0x18;
    pub const UCNTX_CMASK_HAVE_MODE: u64 = 0x02;
    pub const WQE_MODE_STATIC: u32 = 0x00;
    pub const WQE_MODE_VARIABLE: u32 = 0x01;
    /// Thor2's chip number (providers/bnxt_re/main.h, CHIP_NUM_57608).
    pub const CHIP_NUM_57608: u32 = 0x1760;
    pub const UCTX_RESP_SIZE: usize = 48;
    pub const UCTX_RESP_COMP_MASK: usize = 24;
    pub const UCTX_RESP_CHIP_ID0: usize = 32;
    pub const UCTX_RESP_MODE: usize = 40;
    pub const PD_RESP_SIZE: usize = 16;
    pub const PD_RESP_DPI: usize = 4;
    pub const PD_RESP_DBR: usize = 8;
    pub const CQ_RESP_SIZE: usize = 16;
    pub const CQ_RESP_CQID: usize = 0;
    pub const CQ_RESP_TAIL: usize = 4;
    pub const CQ_RESP_PHASE: usize = 8;
    pub const QP_RESP_SIZE: usize = 8;
    pub const QP_RESP_QPID: usize = 0;
}

/// Send opcodes (byte 0 of the header slot).
pub mod opcode {
    pub const SEND: u8 = 0x00;
    pub const SEND_IMM: u8 = 0x01;
    pub const RDMA_WRITE: u8 = 0x04;
    pub const RDMA_WRITE_IMM: u8 = 0x05;
    pub const RDMA_READ: u8 = 0x06;
    pub const ATOMIC_CS: u8 = 0x08;
    pub const ATOMIC_FA: u8 = 0x0B;
}

/// Header flags (byte 1 of the header slot).
pub mod flags {
    pub const SIGNALED: u8 = 0x01;
    pub const RD_FENCE: u8 = 0x02;
    pub const UC_FENCE: u8 = 0x04;
    pub const SE: u8 = 0x08;
    pub const INLINE: u8 = 0x10;
}

/// `rsv_ws_fl_wt` = opcode | flags << 8 | wqe slots << 16.
pub mod hdr {
    pub const WT_MASK: u32 = 0xFF;
    pub const FLAGS_MASK: u32 = 0xFF;
    pub const FLAGS_SHIFT: u32 = 8;
    pub const WS_MASK: u32 = 0xFF;
    pub const WS_SHIFT: u32 = 16;
}

/// The 64-bit doorbell: low word index | epoch << 24, high word
/// qid | valid << 26 | type << 28.
pub mod db {
    pub const INDX_MASK: u32 = 0xFF_FFFF;
    pub const EPOCH_SHIFT: u32 = 24;
    pub const TOGGLE_SHIFT: u32 = 25;
    pub const QID_MASK: u32 = 0xF_FFFF;
    pub const VALID_SHIFT: u32 = 26;
    pub const TYP_MASK: u32 = 0x0F;
    pub const TYP_SHIFT: u32 = 28;
    pub const QUE_TYPE_SQ: u32 = 0x00;
    pub const QUE_TYPE_RQ: u32 = 0x01;
    pub const QUE_TYPE_CQ: u32 = 0x04;
    pub const QUE_TYPE_CQ_ARMALL: u32 = 0x06;
}

/// `flg_st_typ_ph` of the CQE's bcqe word.
pub mod bcqe {
    pub const PH_MASK: u32 = 0x01;
    pub const TYPE_MASK: u32 = 0x0F;
    pub const TYPE_SHIFT: u32 = 0x01;
    pub const STATUS_MASK: u32 = 0xFF;
    pub const STATUS_SHIFT: u32 = 0x08;
    pub const WC_TYPE_SEND: u32 = 0x00;
    pub const WC_TYPE_RECV_RC: u32 = 0x01;
    pub const WC_TYPE_TERM: u32 = 0x0E;
    pub const WC_TYPE_COFF: u32 = 0x0F;
}

/// Requester completion status.
pub mod status {
    pub const OK: u8 = 0x00;
    pub const BAD_RESP: u8 = 0x01;
    pub const LOC_LEN: u8 = 0x02;
    pub const LOC_QP_OP: u8 = 0x03;
    pub const PROT: u8 = 0x04;
    pub const MEM_OP: u8 = 0x05;
    pub const REM_INVAL: u8 = 0x06;
    pub const REM_ACC: u8 = 0x07;
    pub const REM_OP: u8 = 0x08;
    pub const RNR_NAK_XCED: u8 = 0x09;
    pub const TRNSP_XCED: u8 = 0x0A;
    pub const WR_FLUSH: u8 = 0x0B;

    /// rdma-core's name for a status, for log lines.
    pub fn name(s: u8) -> &'static str {
        match s {
            OK => "OK",
            BAD_RESP => "BAD_RESP",
            LOC_LEN => "LOC_LEN",
            LOC_QP_OP => "LOC_QP_OP",
            PROT => "PROT",
            MEM_OP => "MEM_OP",
            REM_INVAL => "REM_INVAL",
            REM_ACC => "REM_ACC",
            REM_OP => "REM_OP",
            RNR_NAK_XCED => "RNR_NAK_XCED",
            TRNSP_XCED => "TRNSP_XCED",
            WR_FLUSH => "WR_FLUSH",
            _ => "UNKNOWN_STATUS",
        }
    }
}

/// One MSN search-table entry per WQE (Thor2):
/// start_idx << 48 | next_psn << 24 | start_psn.
pub mod msn {
    pub const START_PSN_MASK: u32 = 0xFF_FFFF;
    pub const NEXT_PSN_SHIFT: u32 = 24;
    pub const START_IDX_SHIFT: u32 = 48;
    /// PSNs are 24 bits.
    pub const PSN_MASK: u32 = 0xFF_FFFF;
}

/// Byte offsets inside the slots (bnxt_re-abi.h structures).
pub mod off {
    pub const BSQE_KEY_IMMD: usize = 4;
    pub const BSQE_LHDR: usize = 8;
    pub const RDMA_RKEY: usize = 8;
    pub const ATOMIC_CMP: usize = 8;
    pub const SGE_LKEY: usize = 8;
    pub const SGE_LENGTH: usize = 12;
    /// Within the bcqe word pair: `qphi_rwrid` follows `flg_st_typ_ph`.
    pub const BCQE_QPHI_RWRID: usize = 4;
}

/// The header word `rsv_ws_fl_wt`.
pub fn hdr_word(opcode: u8, flags: u8, wqe_slots: u32) -> u32 {
    (opcode as u32 & hdr::WT_MASK)
        | ((flags as u32 & hdr::FLAGS_MASK) << hdr::FLAGS_SHIFT)
        | ((wqe_slots & hdr::WS_MASK) << hdr::WS_SHIFT)
}

/// Slots the header counts: two header slots plus one per SGE, or plus the
/// inline bytes rounded up to whole slots.
pub fn wqe_slots(num_sge: u32, inline_bytes: u32, is_inline: bool) -> u32 {
    let body = if is_inline { inline_bytes.div_ceil(SLOT_BYTES as u32) } else { num_sge };
    (SQE_HDR_BYTES / SLOT_BYTES) as u32 + body
}

/// Slots the producer index advances by for a WQE using `slots_used`.
pub fn ring_slots(mode: u32, slots_used: u32) -> u32 {
    if mode == uapi::WQE_MODE_STATIC {
        STATIC_WQE_SLOTS
    } else {
        slots_used
    }
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn get64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// A three-slot send WQE, decoded: header, second header slot, one SGE or
/// inline data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wqe {
    pub opcode: u8,
    pub flags: u8,
    pub wqe_slots: u8,
    /// Immediate (host order) for WRITE_IMM, the rkey for atomics.
    pub key_immd: u32,
    /// Payload length, or the remote address for atomics.
    pub lhdr: u64,
    /// Second slot: rva / rkey for RDMA; swap_add / compare for atomics.
    pub slot1: [u8; SLOT_BYTES],
    /// Third slot: an SGE, or inline data.
    pub slot2: [u8; SLOT_BYTES],
}

pub const WQE3_BYTES: usize = 3 * SLOT_BYTES;

fn rdma_slot(raddr: u64, rkey: u32) -> [u8; SLOT_BYTES] {
    let mut s = [0u8; SLOT_BYTES];
    put64(&mut s, 0, raddr);
    put32(&mut s, off::RDMA_RKEY, rkey);
    s
}
fn sge_slot(addr: u64, lkey: u32, length: u32) -> [u8; SLOT_BYTES] {
    let mut s = [0u8; SLOT_BYTES];
    put64(&mut s, 0, addr);
    put32(&mut s, off::SGE_LKEY, lkey);
    put32(&mut s, off::SGE_LENGTH, length);
    s
}

impl Wqe {
    /// RDMA WRITE / WRITE_IMM / READ with one SGE.
    #[allow(clippy::too_many_arguments)]
    pub fn rdma(opcode: u8, fl: u8, raddr: u64, rkey: u32, laddr: u64, lkey: u32, length: u32, imm_host: u32) -> Wqe {
        Wqe {
            opcode,
            flags: fl & !flags::INLINE,
            wqe_slots: wqe_slots(1, 0, false) as u8,
            key_immd: if opcode == opcode::RDMA_WRITE_IMM { imm_host } else { 0 },
            lhdr: length as u64,
            slot1: rdma_slot(raddr, rkey),
            slot2: sge_slot(laddr, lkey, length),
        }
    }

    /// RDMA WRITE of up to 8 inline bytes (`value`'s first `len` bytes).
    pub fn write_inline8(fl: u8, raddr: u64, rkey: u32, value: u64, len: u32) -> Wqe {
        let mut data = [0u8; SLOT_BYTES];
        data[..len as usize].copy_from_slice(&value.to_le_bytes()[..len as usize]);
        Wqe {
            opcode: opcode::RDMA_WRITE,
            flags: fl | flags::INLINE,
            wqe_slots: wqe_slots(0, len, true) as u8,
            key_immd: 0,
            lhdr: len as u64,
            slot1: rdma_slot(raddr, rkey),
            slot2: data,
        }
    }

    /// FETCH_ADD / CMP_SWAP; the 8-byte result lands at `laddr`.
    #[allow(clippy::too_many_arguments)]
    pub fn atomic(opcode: u8, fl: u8, raddr: u64, rkey: u32, swap_add: u64, compare: u64, laddr: u64, lkey: u32) -> Wqe {
        let mut a = [0u8; SLOT_BYTES];
        put64(&mut a, 0, swap_add);
        put64(&mut a, off::ATOMIC_CMP, if opcode == opcode::ATOMIC_CS { compare } else { 0 });
        Wqe {
            opcode,
            flags: fl & !flags::INLINE,
            wqe_slots: wqe_slots(1, 0, false) as u8,
            key_immd: rkey,
            lhdr: raddr,
            slot1: a,
            slot2: sge_slot(laddr, lkey, 8),
        }
    }

    pub fn encode(&self) -> [u8; WQE3_BYTES] {
        let mut b = [0u8; WQE3_BYTES];
        put32(&mut b, 0, hdr_word(self.opcode, self.flags, self.wqe_slots as u32));
        put32(&mut b, off::BSQE_KEY_IMMD, self.key_immd);
        put64(&mut b, off::BSQE_LHDR, self.lhdr);
        b[SLOT_BYTES..2 * SLOT_BYTES].copy_from_slice(&self.slot1);
        b[2 * SLOT_BYTES..].copy_from_slice(&self.slot2);
        b
    }

    pub fn parse(b: &[u8]) -> Wqe {
        let w = get32(b, 0);
        Wqe {
            opcode: (w & hdr::WT_MASK) as u8,
            flags: ((w >> hdr::FLAGS_SHIFT) & hdr::FLAGS_MASK) as u8,
            wqe_slots: ((w >> hdr::WS_SHIFT) & hdr::WS_MASK) as u8,
            key_immd: get32(b, off::BSQE_KEY_IMMD),
            lhdr: get64(b, off::BSQE_LHDR),
            slot1: b[SLOT_BYTES..2 * SLOT_BYTES].try_into().unwrap(),
            slot2: b[2 * SLOT_BYTES..3 * SLOT_BYTES].try_into().unwrap(),
        }
    }

    /// The second slot read as (rva, rkey).
    pub fn rdma_seg(&self) -> (u64, u32) {
        (get64(&self.slot1, 0), get32(&self.slot1, off::RDMA_RKEY))
    }
    /// The second slot read as (swap_add, compare).
    pub fn atomic_seg(&self) -> (u64, u64) {
        (get64(&self.slot1, 0), get64(&self.slot1, off::ATOMIC_CMP))
    }
    /// The third slot read as an SGE (addr, lkey, length).
    pub fn sge(&self) -> (u64, u32, u32) {
        (get64(&self.slot2, 0), get32(&self.slot2, off::SGE_LKEY), get32(&self.slot2, off::SGE_LENGTH))
    }
}

/// The 64-bit doorbell value (written little-endian to the doorbell page).
pub fn db_value(index: u32, epoch: u32, qid: u32, typ: u32) -> u64 {
    let lo = (index & db::INDX_MASK) | ((epoch & 1) << db::EPOCH_SHIFT);
    let hi = (qid & db::QID_MASK) | (1 << db::VALID_SHIFT) | ((typ & db::TYP_MASK) << db::TYP_SHIFT);
    ((hi as u64) << 32) | lo as u64
}

/// A decoded doorbell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Doorbell {
    pub index: u32,
    pub epoch: u32,
    pub qid: u32,
    pub typ: u32,
    pub valid: bool,
}

pub fn parse_doorbell(v: u64) -> Doorbell {
    let lo = v as u32;
    let hi = (v >> 32) as u32;
    Doorbell {
        index: lo & db::INDX_MASK,
        epoch: (lo >> db::EPOCH_SHIFT) & 1,
        qid: hi & db::QID_MASK,
        typ: (hi >> db::TYP_SHIFT) & db::TYP_MASK,
        valid: (hi >> db::VALID_SHIFT) & 1 == 1,
    }
}

/// Epoch of a free-running producer count on a ring of `depth` slots.
pub fn db_epoch(produced: u64, depth: u32) -> u32 {
    ((produced / depth as u64) & 1) as u32
}

/// Packets of one message: ceil(len / mtu), 1 for a zero-length message.
pub fn packets(len: u32, mtu: u32) -> u32 {
    if len == 0 {
        1
    } else {
        len.div_ceil(mtu)
    }
}

/// One MSN search-table entry.
pub fn msn_entry(start_idx: u32, next_psn: u32, start_psn: u32) -> u64 {
    ((start_idx as u64 & 0xFFFF) << msn::START_IDX_SHIFT)
        | (((next_psn & msn::PSN_MASK) as u64) << msn::NEXT_PSN_SHIFT)
        | (start_psn & msn::START_PSN_MASK) as u64
}

/// A requester CQE as the NIC writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqe {
    pub qp_handle: u64,
    /// The SQ consumer index after the completed WQE (16 bits valid).
    pub con_indx: u32,
    pub wc_type: u32,
    pub status: u8,
}

impl Cqe {
    pub fn encode(&self, phase: u32) -> [u8; CQE_BYTES] {
        let mut b = [0u8; CQE_BYTES];
        put64(&mut b, 0, self.qp_handle);
        put32(&mut b, CQE_CON_INDX_OFFSET, self.con_indx);
        let flg = (phase & bcqe::PH_MASK)
            | ((self.wc_type & bcqe::TYPE_MASK) << bcqe::TYPE_SHIFT)
            | ((self.status as u32 & bcqe::STATUS_MASK) << bcqe::STATUS_SHIFT);
        put32(&mut b, CQE_BCQE_OFFSET, flg);
        b
    }
    pub fn parse(b: &[u8]) -> Cqe {
        let flg = get32(b, CQE_BCQE_OFFSET);
        Cqe {
            qp_handle: get64(b, 0),
            con_indx: get32(b, CQE_CON_INDX_OFFSET),
            wc_type: (flg >> bcqe::TYPE_SHIFT) & bcqe::TYPE_MASK,
            status: ((flg >> bcqe::STATUS_SHIFT) & bcqe::STATUS_MASK) as u8,
        }
    }
}

/// The phase software expects at free-running consumer index `head` of a CQ
/// of `depth` entries: the start phase, flipped at every wrap.
pub fn cq_expected_phase(head: u64, depth: u32) -> u32 {
    CQ_START_PHASE ^ ((head / depth as u64) & 1) as u32
}

/// Whether the CQE whose bcqe word is `flg` is new at consumer index `head`.
pub fn cqe_is_valid(flg: u32, head: u64, depth: u32) -> bool {
    flg & bcqe::PH_MASK == cq_expected_phase(head, depth)
}
