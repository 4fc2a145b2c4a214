//! The bnxt_re (Broadcom Thor2) wire formats against upstream.
//!
//! Three descriptions of the same bytes are compared with upstream's facts:
//! - the C++ header the device code uses (device/include/rust_gin/bnxt/wire.h),
//!   through the table device/src/host_only/wire_layout_bnxt.cpp exports, and
//!   its builders, called through the same file;
//! - the Rust twin (host/bnxt/wire.rs);
//! - upstream, in two parts:
//!   - the kernel uapi header <rdma/bnxt_re-abi.h>, installed here: a table the
//!     C compiler fills from it (build/bnxt_re_oracle.c);
//!   - rdma-core's provider (providers/bnxt_re), not installed: its definitions
//!     restated below (`PROVIDER`, `REFERENCE`), each with file and line at
//!     commit `REV`, and its send, doorbell, MSN and CQ code restated as the
//!     reference builders of this file, which take every offset, shift and
//!     mask from those cited facts, never from our headers.
//!
//! The list is closed: a new constant in wire.h or wire.rs without an
//! upstream fact fails `every_constant_is_checked`.

use std::collections::BTreeMap;

use proptest::prelude::*;

use rccl_rust_gin::bnxt::wire::*;

#[macro_use]
#[path = "support/wire_facts.rs"]
#[allow(dead_code)]
mod wire_facts;
use wire_facts::*;

/// linux-rdma/rdma-core, the commit read (master, 2026-08-20).
const REV: &str = "691953d8d502f54088f776c5ba2aeed0a5ac945d";

/// rdma-core providers/bnxt_re definitions our headers mirror:
/// (fact, value, "file:line" at `REV`).
const PROVIDER: &[(&str, u64, &str)] = &[
    // structures, bnxt_re-abi.h
    ("sizeof(bnxt_re_bsqe)", 16, "bnxt_re-abi.h:297-304 (le32, le32/be32 union, le64 union)"),
    ("sizeof(bnxt_re_rdma)", 16, "bnxt_re-abi.h:345-349"),
    ("sizeof(bnxt_re_atomic)", 16, "bnxt_re-abi.h:351-354"),
    ("sizeof(bnxt_re_sge)", 16, "bnxt_re-abi.h:324-328"),
    ("sizeof(bnxt_re_db_hdr)", 8, "bnxt_re-abi.h:253-256"),
    ("sizeof(bnxt_re_req_cqe)", 24, "bnxt_re-abi.h:263-268"),
    ("sizeof(bnxt_re_bcqe)", 8, "bnxt_re-abi.h:258-261"),
    ("offsetof(bnxt_re_bsqe.rsv_ws_fl_wt)", 0, "bnxt_re-abi.h:298"),
    ("offsetof(bnxt_re_bsqe.key_immd)", 4, "bnxt_re-abi.h:299-302"),
    ("offsetof(bnxt_re_bsqe.lhdr)", 8, "bnxt_re-abi.h:303 (union lower_shdr: qkey_len / lkey_plkey / rva)"),
    ("offsetof(bnxt_re_rdma.rva)", 0, "bnxt_re-abi.h:346"),
    ("offsetof(bnxt_re_rdma.rkey)", 8, "bnxt_re-abi.h:347"),
    ("offsetof(bnxt_re_rdma.rsvd2)", 12, "bnxt_re-abi.h:348"),
    ("offsetof(bnxt_re_atomic.swp_dt)", 0, "bnxt_re-abi.h:352"),
    ("offsetof(bnxt_re_atomic.cmp_dt)", 8, "bnxt_re-abi.h:353"),
    ("offsetof(bnxt_re_sge.pa)", 0, "bnxt_re-abi.h:325"),
    ("offsetof(bnxt_re_sge.lkey)", 8, "bnxt_re-abi.h:326"),
    ("offsetof(bnxt_re_sge.length)", 12, "bnxt_re-abi.h:327"),
    ("offsetof(bnxt_re_db_hdr.indx)", 0, "bnxt_re-abi.h:254"),
    ("offsetof(bnxt_re_db_hdr.typ_qid)", 4, "bnxt_re-abi.h:255 (typ: 4, qid: 20)"),
    ("offsetof(bnxt_re_req_cqe.qp_handle)", 0, "bnxt_re-abi.h:264"),
    ("offsetof(bnxt_re_req_cqe.con_indx)", 8, "bnxt_re-abi.h:265 (16 bits valid)"),
    ("offsetof(bnxt_re_bcqe.flg_st_typ_ph)", 0, "bnxt_re-abi.h:259"),
    ("offsetof(bnxt_re_bcqe.qphi_rwrid)", 4, "bnxt_re-abi.h:260"),
    // geometry
    ("log2(sizeof(bnxt_re_sge))", 4, "verbs.c:2387 \"que->stride is always 2^4 = 16\"; verbs.c:1426 stride = sizeof(bnxt_re_sge)"),
    ("bnxt_re_get_sqe_hdr_sz()", 32, "main.h:363-366: sizeof(bnxt_re_bsqe) + sizeof(bnxt_re_send) (16 + 16, abi.h:333-337)"),
    ("STATIC_WQE_NUM_SLOTS", 8, "main.h:202"),
    ("BNXT_RE_STATIC_WQE_MAX_SGE", 6, "bnxt_re-abi.h:246"),
    ("BNXT_RE_MAX_INLINE_SIZE", 0x60, "bnxt_re-abi.h:331"),
    ("bnxt_re_get_cqe_sz()", 32, "main.h:392-395: sizeof(bnxt_re_req_cqe) + sizeof(bnxt_re_bcqe)"),
    ("BNXT_RE_QUEUE_START_PHASE", 1, "verbs.c:416; bnxt_re_resize_cq_complete() sets it, create_cq takes resp.phase (verbs.c:385)"),
    ("BNXT_RE_COMP_MASK_UCNTX_MSN_TABLE_ENABLED", 0x08, "bnxt_re-abi.h:230"),
    ("CHIP_NUM_57608", 0x1760, "main.h:66; main.c:129-132 makes it gen P7"),
    // opcodes, flags, header
    ("BNXT_RE_WR_OPCD_SEND", 0x00, "bnxt_re-abi.h:66"),
    ("BNXT_RE_WR_OPCD_SEND_IMM", 0x01, "bnxt_re-abi.h:67"),
    ("BNXT_RE_WR_OPCD_RDMA_WRITE", 0x04, "bnxt_re-abi.h:69"),
    ("BNXT_RE_WR_OPCD_RDMA_WRITE_IMM", 0x05, "bnxt_re-abi.h:70"),
    ("BNXT_RE_WR_OPCD_RDMA_READ", 0x06, "bnxt_re-abi.h:71"),
    ("BNXT_RE_WR_OPCD_ATOMIC_CS", 0x08, "bnxt_re-abi.h:72"),
    ("BNXT_RE_WR_OPCD_ATOMIC_FA", 0x0B, "bnxt_re-abi.h:73"),
    ("BNXT_RE_WR_FLAGS_INLINE", 0x10, "bnxt_re-abi.h:81"),
    ("BNXT_RE_WR_FLAGS_SE", 0x08, "bnxt_re-abi.h:82"),
    ("BNXT_RE_WR_FLAGS_UC_FENCE", 0x04, "bnxt_re-abi.h:83"),
    ("BNXT_RE_WR_FLAGS_RD_FENCE", 0x02, "bnxt_re-abi.h:84"),
    ("BNXT_RE_WR_FLAGS_SIGNALED", 0x01, "bnxt_re-abi.h:85"),
    ("BNXT_RE_HDR_WT_MASK", 0xFF, "bnxt_re-abi.h:126"),
    ("BNXT_RE_HDR_FLAGS_MASK", 0xFF, "bnxt_re-abi.h:127"),
    ("BNXT_RE_HDR_FLAGS_SHIFT", 0x08, "bnxt_re-abi.h:128"),
    ("BNXT_RE_HDR_WS_MASK", 0xFF, "bnxt_re-abi.h:129"),
    ("BNXT_RE_HDR_WS_SHIFT", 0x10, "bnxt_re-abi.h:130"),
    // doorbell
    ("BNXT_RE_QUE_TYPE_SQ", 0x00, "bnxt_re-abi.h:134"),
    ("BNXT_RE_QUE_TYPE_RQ", 0x01, "bnxt_re-abi.h:135"),
    ("BNXT_RE_QUE_TYPE_CQ", 0x04, "bnxt_re-abi.h:138"),
    ("BNXT_RE_QUE_TYPE_CQ_ARMALL", 0x06, "bnxt_re-abi.h:140"),
    ("BNXT_RE_DB_INDX_MASK", 0xFFFFFF, "bnxt_re-abi.h:150"),
    ("BNXT_RE_DB_QID_MASK", 0xFFFFF, "bnxt_re-abi.h:153"),
    ("BNXT_RE_DB_TYP_MASK", 0x0F, "bnxt_re-abi.h:156"),
    ("BNXT_RE_DB_TYP_SHIFT", 0x1C, "bnxt_re-abi.h:157"),
    ("BNXT_RE_DB_VALID_SHIFT", 0x1A, "bnxt_re-abi.h:158"),
    ("BNXT_RE_DB_EPOCH_SHIFT", 0x18, "bnxt_re-abi.h:159"),
    ("BNXT_RE_DB_TOGGLE_SHIFT", 0x19, "bnxt_re-abi.h:160"),
    // completion
    ("BNXT_RE_BCQE_PH_MASK", 0x01, "bnxt_re-abi.h:182"),
    ("BNXT_RE_BCQE_TYPE_MASK", 0x0F, "bnxt_re-abi.h:183"),
    ("BNXT_RE_BCQE_TYPE_SHIFT", 0x01, "bnxt_re-abi.h:184"),
    ("BNXT_RE_BCQE_STATUS_MASK", 0xFF, "bnxt_re-abi.h:187"),
    ("BNXT_RE_BCQE_STATUS_SHIFT", 0x08, "bnxt_re-abi.h:188"),
    ("BNXT_RE_WC_TYPE_SEND", 0x00, "bnxt_re-abi.h:89"),
    ("BNXT_RE_WC_TYPE_RECV_RC", 0x01, "bnxt_re-abi.h:90"),
    ("BNXT_RE_WC_TYPE_TERM", 0x0E, "bnxt_re-abi.h:93"),
    ("BNXT_RE_WC_TYPE_COFF", 0x0F, "bnxt_re-abi.h:94"),
    ("BNXT_RE_REQ_ST_OK", 0x00, "bnxt_re-abi.h:99"),
    ("BNXT_RE_REQ_ST_BAD_RESP", 0x01, "bnxt_re-abi.h:100"),
    ("BNXT_RE_REQ_ST_LOC_LEN", 0x02, "bnxt_re-abi.h:101"),
    ("BNXT_RE_REQ_ST_LOC_QP_OP", 0x03, "bnxt_re-abi.h:102"),
    ("BNXT_RE_REQ_ST_PROT", 0x04, "bnxt_re-abi.h:103"),
    ("BNXT_RE_REQ_ST_MEM_OP", 0x05, "bnxt_re-abi.h:104"),
    ("BNXT_RE_REQ_ST_REM_INVAL", 0x06, "bnxt_re-abi.h:105"),
    ("BNXT_RE_REQ_ST_REM_ACC", 0x07, "bnxt_re-abi.h:106"),
    ("BNXT_RE_REQ_ST_REM_OP", 0x08, "bnxt_re-abi.h:107"),
    ("BNXT_RE_REQ_ST_RNR_NAK_XCED", 0x09, "bnxt_re-abi.h:108"),
    ("BNXT_RE_REQ_ST_TRNSP_XCED", 0x0A, "bnxt_re-abi.h:109"),
    ("BNXT_RE_REQ_ST_WR_FLUSH", 0x0B, "bnxt_re-abi.h:110"),
    // MSN search table and PSNs
    ("BNXT_RE_SQ_MSN_SEARCH_START_PSN_MASK", 0xFFFFFF, "bnxt_re-abi.h:173"),
    ("BNXT_RE_SQ_MSN_SEARCH_NEXT_PSN_SHIFT", 0x18, "bnxt_re-abi.h:176"),
    ("BNXT_RE_SQ_MSN_SEARCH_START_IDX_SHIFT", 0x30, "bnxt_re-abi.h:178"),
    ("BNXT_RE_PSNS_NPSN_MASK", 0xFFFFFF, "bnxt_re-abi.h:167"),
];

/// Provider facts our headers do not mirror, used by the reference builders
/// below and by the cross-checks.
const REFERENCE: &[(&str, u64, &str)] = &[
    ("BNXT_RE_SQ_MSN_SEARCH_NEXT_PSN_MASK", 0xFFFFFF000000, "bnxt_re-abi.h:175"),
    ("BNXT_RE_SQ_MSN_SEARCH_START_IDX_MASK", 0xFFFF000000000000, "bnxt_re-abi.h:177"),
    ("BNXT_RE_FLAG_EPOCH_TAIL_MASK", 0x1, "bnxt_re-abi.h:237"),
    ("BNXT_RE_FLAG_EPOCH_HEAD_MASK", 0x2, "bnxt_re-abi.h:238"),
    ("BNXT_RE_DB_EPOCH_TAIL_SHIFT", 0x18, "bnxt_re-abi.h:242 (= BNXT_RE_DB_EPOCH_SHIFT)"),
    ("BNXT_RE_DB_EPOCH_HEAD_SHIFT", 0x17, "bnxt_re-abi.h:243 (= BNXT_RE_DB_EPOCH_SHIFT - 1)"),
    ("BNXT_RE_WQE_MODE_STATIC", 0x00, "bnxt_re-abi.h:249 (the provider's copy of the uapi mode)"),
    ("BNXT_RE_WQE_MODE_VARIABLE", 0x01, "bnxt_re-abi.h:250"),
];

extern "C" {
    // build/bnxt_re_oracle.c
    static rust_gin_bnxt_re_facts: [OracleFact; 0];
    static rust_gin_bnxt_re_facts_len: usize;
    // device/src/host_only/wire_layout_bnxt.cpp
    static rust_gin_bnxt_wire_facts: [CxxFact; 0];
    static rust_gin_bnxt_wire_facts_len: usize;
    fn rust_gin_bnxt_wqe_rdma(
        opcode: u8,
        flags: u8,
        raddr: u64,
        rkey: u32,
        laddr: u64,
        lkey: u32,
        length: u32,
        imm_host: u32,
        out: *mut u8,
    );
    fn rust_gin_bnxt_wqe_write_inline8(flags: u8, raddr: u64, rkey: u32, value: u64, len: u32, out: *mut u8);
    fn rust_gin_bnxt_wqe_atomic(
        opcode: u8,
        flags: u8,
        raddr: u64,
        rkey: u32,
        swap_add: u64,
        compare: u64,
        laddr: u64,
        lkey: u32,
        out: *mut u8,
    );
    fn rust_gin_bnxt_db_value(index: u32, epoch: u32, qid: u32, typ: u32) -> u64;
    fn rust_gin_bnxt_msn_entry(start_idx: u32, next_psn: u32, start_psn: u32) -> u64;
    fn rust_gin_bnxt_packets(len: u32, mtu: u32) -> u32;
    fn rust_gin_bnxt_wqe_slots(num_sge: u32, inline_bytes: u32, is_inline: i32) -> u32;
    fn rust_gin_bnxt_cqe_is_valid(flg: u32, head: u64, depth: u32) -> i32;
}

// ---------------------------------------------------------------------------
// The tables
// ---------------------------------------------------------------------------

fn uapi_facts() -> Vec<(String, u64)> {
    // SAFETY: an immutable static array of rust_gin_bnxt_re_facts_len entries.
    unsafe { oracle_table(rust_gin_bnxt_re_facts.as_ptr(), rust_gin_bnxt_re_facts_len) }
}

/// What our headers must equal: the uapi header's facts and the cited
/// provider facts.
fn upstream() -> Vec<(String, u64)> {
    let mut all = uapi_facts();
    all.extend(PROVIDER.iter().map(|(n, v, _)| (n.to_string(), *v)));
    all
}

/// Any upstream fact by name, including the reference-only ones.
fn fact(name: &str) -> u64 {
    upstream()
        .into_iter()
        .chain(REFERENCE.iter().map(|(n, v, _)| (n.to_string(), *v)))
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no upstream fact named {name}"))
}

fn cxx_rows() -> Vec<Row> {
    // SAFETY: an immutable static array of rust_gin_bnxt_wire_facts_len entries.
    unsafe { cxx_table(rust_gin_bnxt_wire_facts.as_ptr(), rust_gin_bnxt_wire_facts_len) }
}

fn rust_rows() -> Vec<Row> {
    const M64: u64 = 0x0102_0304_0506_0708;
    let w = Wqe::rdma(opcode::RDMA_WRITE, 0, M64, 0, M64 + 0x1111_1111_1111_1111, 0, 0, 0);
    let rva = measured_offset(&w.slot1, &M64.to_le_bytes());
    let pa = measured_offset(&w.slot2, &(M64 + 0x1111_1111_1111_1111).to_le_bytes());
    let rsvd2 = first_untouched(&Wqe::rdma(0, 0, !0, !0, 0, 0, 0, 0).slot1);
    let a = Wqe::atomic(opcode::ATOMIC_CS, 0, 0, 0, M64, 0, 0, 0);
    let swp = measured_offset(&a.slot1, &M64.to_le_bytes());
    let hdr_marker = hdr_word(0x0b, 0x11, 0x33).to_le_bytes();
    let mut hdr_probe = Wqe::parse(&[0u8; WQE3_BYTES]);
    hdr_probe.opcode = 0x0b;
    hdr_probe.flags = 0x11;
    hdr_probe.wqe_slots = 0x33;
    let hdr_off = measured_offset(&hdr_probe.encode(), &hdr_marker[..3]);
    let db = db_value(0xab_cdef, 0, 0x1_2345, 0).to_le_bytes();
    let db_indx = measured_offset(&db, &[0xef, 0xcd, 0xab]);
    let db_typ_qid = measured_offset(&db, &[0x45, 0x23, 0x01]);
    let cqe = Cqe { qp_handle: M64, con_indx: 0, wc_type: 0, status: 0x5a }.encode(0);
    let qp_handle = measured_offset(&cqe, &M64.to_le_bytes());
    let flg = measured_offset(&cqe, &[0x00, 0x5a]) - CQE_BCQE_OFFSET as u64;

    vec![
        // the uapi header
        rust_row!("sizeof(bnxt_re_uctx_resp)", uapi::UCTX_RESP_SIZE),
        rust_row!("sizeof(bnxt_re_pd_resp)", uapi::PD_RESP_SIZE),
        rust_row!("sizeof(bnxt_re_cq_resp)", uapi::CQ_RESP_SIZE),
        rust_row!("sizeof(bnxt_re_qp_resp)", uapi::QP_RESP_SIZE),
        rust_row!("offsetof(bnxt_re_uctx_resp.comp_mask)", uapi::UCTX_RESP_COMP_MASK),
        rust_row!("offsetof(bnxt_re_uctx_resp.chip_id0)", uapi::UCTX_RESP_CHIP_ID0),
        rust_row!("offsetof(bnxt_re_uctx_resp.mode)", uapi::UCTX_RESP_MODE),
        rust_row!("offsetof(bnxt_re_pd_resp.dpi)", uapi::PD_RESP_DPI),
        rust_row!("offsetof(bnxt_re_pd_resp.dbr)", uapi::PD_RESP_DBR),
        rust_row!("offsetof(bnxt_re_cq_resp.cqid)", uapi::CQ_RESP_CQID),
        rust_row!("offsetof(bnxt_re_cq_resp.tail)", uapi::CQ_RESP_TAIL),
        rust_row!("offsetof(bnxt_re_cq_resp.phase)", uapi::CQ_RESP_PHASE),
        rust_row!("offsetof(bnxt_re_qp_resp.qpid)", uapi::QP_RESP_QPID),
        rust_row!("BNXT_RE_ABI_VERSION", uapi::ABI_VERSION),
        rust_row!("BNXT_RE_CHIP_ID0_CHIP_NUM_SFT", uapi::CHIP_ID0_CHIP_NUM_SFT),
        rust_row!("BNXT_RE_CHIP_ID0_CHIP_REV_SFT", uapi::CHIP_ID0_CHIP_REV_SFT),
        rust_row!("BNXT_RE_CHIP_ID0_CHIP_MET_SFT", uapi::CHIP_ID0_CHIP_MET_SFT),
        rust_row!("BNXT_RE_UCNTX_CMASK_HAVE_MODE", uapi::UCNTX_CMASK_HAVE_MODE),
        rust_row!("BNXT_QPLIB_WQE_MODE_STATIC", uapi::WQE_MODE_STATIC),
        rust_row!("BNXT_QPLIB_WQE_MODE_VARIABLE", uapi::WQE_MODE_VARIABLE),
        rust_row!("CHIP_NUM_57608", uapi::CHIP_NUM_57608),
        // structures
        rust_row!("sizeof(bnxt_re_bsqe)", SLOT_BYTES),
        rust_row!("sizeof(bnxt_re_rdma)", SLOT_BYTES),
        rust_row!("sizeof(bnxt_re_atomic)", SLOT_BYTES),
        rust_row!("sizeof(bnxt_re_sge)", SLOT_BYTES),
        Row::new("sizeof(bnxt_re_db_hdr)", "db_value().to_le_bytes().len()", db.len() as u64),
        rust_row!("sizeof(bnxt_re_req_cqe)", CQE_BCQE_OFFSET),
        Row::new("sizeof(bnxt_re_bcqe)", "CQE_BYTES-CQE_BCQE_OFFSET", (CQE_BYTES - CQE_BCQE_OFFSET) as u64),
        Row::new("offsetof(bnxt_re_bsqe.rsv_ws_fl_wt)", "Wqe::encode(hdr_word)", hdr_off),
        rust_row!("offsetof(bnxt_re_bsqe.key_immd)", off::BSQE_KEY_IMMD),
        rust_row!("offsetof(bnxt_re_bsqe.lhdr)", off::BSQE_LHDR),
        Row::new("offsetof(bnxt_re_rdma.rva)", "Wqe::rdma(rva)", rva),
        rust_row!("offsetof(bnxt_re_rdma.rkey)", off::RDMA_RKEY),
        Row::new("offsetof(bnxt_re_rdma.rsvd2)", "Wqe::rdma(rsvd2)", rsvd2),
        Row::new("offsetof(bnxt_re_atomic.swp_dt)", "Wqe::atomic(swp_dt)", swp),
        rust_row!("offsetof(bnxt_re_atomic.cmp_dt)", off::ATOMIC_CMP),
        Row::new("offsetof(bnxt_re_sge.pa)", "Wqe::rdma(pa)", pa),
        rust_row!("offsetof(bnxt_re_sge.lkey)", off::SGE_LKEY),
        rust_row!("offsetof(bnxt_re_sge.length)", off::SGE_LENGTH),
        Row::new("offsetof(bnxt_re_db_hdr.indx)", "db_value(index)", db_indx),
        Row::new("offsetof(bnxt_re_db_hdr.typ_qid)", "db_value(qid)", db_typ_qid),
        Row::new("offsetof(bnxt_re_req_cqe.qp_handle)", "Cqe::encode(qp_handle)", qp_handle),
        rust_row!("offsetof(bnxt_re_req_cqe.con_indx)", CQE_CON_INDX_OFFSET),
        Row::new("offsetof(bnxt_re_bcqe.flg_st_typ_ph)", "Cqe::encode(flg)-CQE_BCQE_OFFSET", flg),
        rust_row!("offsetof(bnxt_re_bcqe.qphi_rwrid)", off::BCQE_QPHI_RWRID),
        // geometry
        rust_row!("sizeof(bnxt_re_sge)", SLOT_BYTES),
        rust_row!("log2(sizeof(bnxt_re_sge))", SLOT_SHIFT),
        rust_row!("bnxt_re_get_sqe_hdr_sz()", SQE_HDR_BYTES),
        rust_row!("STATIC_WQE_NUM_SLOTS", STATIC_WQE_SLOTS),
        rust_row!("BNXT_RE_STATIC_WQE_MAX_SGE", STATIC_WQE_MAX_SGE),
        rust_row!("BNXT_RE_MAX_INLINE_SIZE", MAX_INLINE),
        rust_row!("bnxt_re_get_cqe_sz()", CQE_BYTES),
        rust_row!("BNXT_RE_QUEUE_START_PHASE", CQ_START_PHASE),
        rust_row!("BNXT_RE_COMP_MASK_UCNTX_MSN_TABLE_ENABLED", UCNTX_MSN_TABLE_ENABLED),
        // opcodes, flags, header
        rust_row!("BNXT_RE_WR_OPCD_SEND", opcode::SEND),
        rust_row!("BNXT_RE_WR_OPCD_SEND_IMM", opcode::SEND_IMM),
        rust_row!("BNXT_RE_WR_OPCD_RDMA_WRITE", opcode::RDMA_WRITE),
        rust_row!("BNXT_RE_WR_OPCD_RDMA_WRITE_IMM", opcode::RDMA_WRITE_IMM),
        rust_row!("BNXT_RE_WR_OPCD_RDMA_READ", opcode::RDMA_READ),
        rust_row!("BNXT_RE_WR_OPCD_ATOMIC_CS", opcode::ATOMIC_CS),
        rust_row!("BNXT_RE_WR_OPCD_ATOMIC_FA", opcode::ATOMIC_FA),
        rust_row!("BNXT_RE_WR_FLAGS_SIGNALED", flags::SIGNALED),
        rust_row!("BNXT_RE_WR_FLAGS_RD_FENCE", flags::RD_FENCE),
        rust_row!("BNXT_RE_WR_FLAGS_UC_FENCE", flags::UC_FENCE),
        rust_row!("BNXT_RE_WR_FLAGS_SE", flags::SE),
        rust_row!("BNXT_RE_WR_FLAGS_INLINE", flags::INLINE),
        rust_row!("BNXT_RE_HDR_WT_MASK", hdr::WT_MASK),
        rust_row!("BNXT_RE_HDR_FLAGS_MASK", hdr::FLAGS_MASK),
        rust_row!("BNXT_RE_HDR_FLAGS_SHIFT", hdr::FLAGS_SHIFT),
        rust_row!("BNXT_RE_HDR_WS_MASK", hdr::WS_MASK),
        rust_row!("BNXT_RE_HDR_WS_SHIFT", hdr::WS_SHIFT),
        // doorbell
        rust_row!("BNXT_RE_DB_INDX_MASK", db::INDX_MASK),
        rust_row!("BNXT_RE_DB_EPOCH_SHIFT", db::EPOCH_SHIFT),
        rust_row!("BNXT_RE_DB_TOGGLE_SHIFT", db::TOGGLE_SHIFT),
        rust_row!("BNXT_RE_DB_QID_MASK", db::QID_MASK),
        rust_row!("BNXT_RE_DB_VALID_SHIFT", db::VALID_SHIFT),
        rust_row!("BNXT_RE_DB_TYP_MASK", db::TYP_MASK),
        rust_row!("BNXT_RE_DB_TYP_SHIFT", db::TYP_SHIFT),
        rust_row!("BNXT_RE_QUE_TYPE_SQ", db::QUE_TYPE_SQ),
        rust_row!("BNXT_RE_QUE_TYPE_RQ", db::QUE_TYPE_RQ),
        rust_row!("BNXT_RE_QUE_TYPE_CQ", db::QUE_TYPE_CQ),
        rust_row!("BNXT_RE_QUE_TYPE_CQ_ARMALL", db::QUE_TYPE_CQ_ARMALL),
        // completion
        rust_row!("BNXT_RE_BCQE_PH_MASK", bcqe::PH_MASK),
        rust_row!("BNXT_RE_BCQE_TYPE_MASK", bcqe::TYPE_MASK),
        rust_row!("BNXT_RE_BCQE_TYPE_SHIFT", bcqe::TYPE_SHIFT),
        rust_row!("BNXT_RE_BCQE_STATUS_MASK", bcqe::STATUS_MASK),
        rust_row!("BNXT_RE_BCQE_STATUS_SHIFT", bcqe::STATUS_SHIFT),
        rust_row!("BNXT_RE_WC_TYPE_SEND", bcqe::WC_TYPE_SEND),
        rust_row!("BNXT_RE_WC_TYPE_RECV_RC", bcqe::WC_TYPE_RECV_RC),
        rust_row!("BNXT_RE_WC_TYPE_TERM", bcqe::WC_TYPE_TERM),
        rust_row!("BNXT_RE_WC_TYPE_COFF", bcqe::WC_TYPE_COFF),
        rust_row!("BNXT_RE_REQ_ST_OK", status::OK),
        rust_row!("BNXT_RE_REQ_ST_BAD_RESP", status::BAD_RESP),
        rust_row!("BNXT_RE_REQ_ST_LOC_LEN", status::LOC_LEN),
        rust_row!("BNXT_RE_REQ_ST_LOC_QP_OP", status::LOC_QP_OP),
        rust_row!("BNXT_RE_REQ_ST_PROT", status::PROT),
        rust_row!("BNXT_RE_REQ_ST_MEM_OP", status::MEM_OP),
        rust_row!("BNXT_RE_REQ_ST_REM_INVAL", status::REM_INVAL),
        rust_row!("BNXT_RE_REQ_ST_REM_ACC", status::REM_ACC),
        rust_row!("BNXT_RE_REQ_ST_REM_OP", status::REM_OP),
        rust_row!("BNXT_RE_REQ_ST_RNR_NAK_XCED", status::RNR_NAK_XCED),
        rust_row!("BNXT_RE_REQ_ST_TRNSP_XCED", status::TRNSP_XCED),
        rust_row!("BNXT_RE_REQ_ST_WR_FLUSH", status::WR_FLUSH),
        // MSN table
        rust_row!("BNXT_RE_SQ_MSN_SEARCH_START_PSN_MASK", msn::START_PSN_MASK),
        rust_row!("BNXT_RE_SQ_MSN_SEARCH_NEXT_PSN_SHIFT", msn::NEXT_PSN_SHIFT),
        rust_row!("BNXT_RE_SQ_MSN_SEARCH_START_IDX_SHIFT", msn::START_IDX_SHIFT),
        rust_row!("BNXT_RE_PSNS_NPSN_MASK", msn::PSN_MASK),
    ]
}

/// Rust constants derived from several upstream facts: (name, ours, expected).
fn rust_derived() -> Vec<(&'static str, u64, u64)> {
    vec![(
        "WQE3_BYTES",
        WQE3_BYTES as u64,
        // the two header slots and one SGE (bnxt_re_calc_wqe_sz(1), verbs.c:1178-1184)
        fact("bnxt_re_get_sqe_hdr_sz()") + fact("sizeof(bnxt_re_sge)"),
    )]
}

// ---------------------------------------------------------------------------
// Sizes, offsets, constants
// ---------------------------------------------------------------------------

#[test]
fn upstream_tables_are_well_formed() {
    let uapi = uapi_facts();
    assert!(uapi.len() >= 20, "the uapi oracle table looks truncated: {} facts", uapi.len());
    let mut seen = BTreeMap::new();
    for (n, v) in uapi.iter().cloned().chain(PROVIDER.iter().chain(REFERENCE).map(|(n, v, _)| (n.to_string(), *v))) {
        assert!(seen.insert(n.clone(), v).is_none(), "upstream fact {n} appears twice");
    }
    for (n, _, src) in PROVIDER.iter().chain(REFERENCE) {
        let file = src.split(':').next().unwrap();
        assert!(
            ["bnxt_re-abi.h", "main.h", "main.c", "verbs.c", "verbs.h", "db.c", "memory.h"].contains(&file)
                && src.contains(':'),
            "{n}: the citation {src:?} names no providers/bnxt_re file and line at {REV}"
        );
    }
}

/// Two upstream sources agree where they overlap: the provider's copy of the
/// WQE modes and the installed uapi header's.
#[test]
fn provider_and_uapi_agree_on_wqe_modes() {
    assert_eq!(fact("BNXT_RE_WQE_MODE_STATIC"), fact("BNXT_QPLIB_WQE_MODE_STATIC"));
    assert_eq!(fact("BNXT_RE_WQE_MODE_VARIABLE"), fact("BNXT_QPLIB_WQE_MODE_VARIABLE"));
    assert_eq!(fact("BNXT_RE_DB_EPOCH_TAIL_SHIFT"), fact("BNXT_RE_DB_EPOCH_SHIFT"));
    // A static WQE holds the header and the most SGEs (verbs.c:1245 uses bnxt_re_calc_wqe_sz(6)).
    assert_eq!(
        fact("STATIC_WQE_NUM_SLOTS") * fact("sizeof(bnxt_re_sge)"),
        fact("bnxt_re_get_sqe_hdr_sz()") + fact("BNXT_RE_STATIC_WQE_MAX_SGE") * fact("sizeof(bnxt_re_sge)")
    );
}

#[test]
fn cxx_header_agrees_with_upstream() {
    assert_no_problems(compare(&upstream(), &cxx_rows(), "bnxt/wire.h"));
}

#[test]
fn rust_twin_agrees_with_upstream() {
    assert_no_problems(compare(&upstream(), &rust_rows(), "bnxt/wire.rs"));
    for (name, ours, expected) in rust_derived() {
        assert_eq!(ours, expected, "bnxt/wire.rs {name} disagrees with the value upstream's facts give");
    }
}

#[test]
fn every_constant_is_checked() {
    let derived: Vec<&str> = rust_derived().iter().map(|(n, _, _)| *n).collect();
    assert_every_constant_is_checked(
        "device/include/rust_gin/bnxt/wire.h",
        "host/bnxt/wire.rs",
        &cxx_rows(),
        &rust_rows(),
        &derived,
        60,
    );
}

#[test]
fn comparison_reports_perturbed_missing_and_unchecked_facts() {
    let oracle = upstream();
    let victims = ["offsetof(bnxt_re_cq_resp.phase)", "BNXT_RE_WR_OPCD_RDMA_WRITE", "BNXT_RE_DB_VALID_SHIFT"];
    for (side, ours) in [("bnxt/wire.h", cxx_rows()), ("bnxt/wire.rs", rust_rows())] {
        assert_comparison_catches(&oracle, &ours, side, &victims, "BNXT_RE_REQ_ST_TRNSP_XCED");
    }
}

// ---------------------------------------------------------------------------
// Whole WQEs, byte for byte, against rdma-core's bnxt_re_post_send()
// ---------------------------------------------------------------------------

/// A request and what else rdma-core's posting code reads.
#[derive(Clone, Copy, Debug)]
struct Wr {
    req: Request,
    solicited: bool,
}

impl std::ops::Deref for Wr {
    type Target = Request;
    fn deref(&self) -> &Request {
        &self.req
    }
}

fn put(b: &mut [u8], at: u64, v: u64, width: usize) {
    let at = at as usize;
    b[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
}

/// rdma-core's bnxt_re_post_send() (verbs.c:2525-2640) for one work request,
/// with every offset, shift and mask taken from the cited facts. The header
/// is slot 0, the second header slot is slot 1, SGEs or inline data start at
/// slot 2 (`idx = 2`, verbs.c:2560-2562).
fn reference_wqe(wr: &Wr) -> [u8; 48] {
    let slot = fact("sizeof(bnxt_re_sge)");
    let mut b = [0u8; 48];
    let (hdr, sqe, data) = (0, slot, 2 * slot);
    let inline = matches!(wr.kind, Kind::WriteInline);
    // bnxt_re_build_tx_sge(): one SGE (bnxt_re_put_tx_sge, verbs.c:2272-2277)
    // or the inline bytes copied to slot 2 (bnxt_re_put_inline, verbs.c:2292-2360).
    let atomic = matches!(wr.kind, Kind::FetchAdd | Kind::CmpSwap);
    let sge_len = if atomic { 8 } else { wr.length };
    let bytes = if inline {
        b[data as usize..data as usize + wr.length as usize]
            .copy_from_slice(&wr.inline_value.to_le_bytes()[..wr.length as usize]);
        wr.length
    } else {
        put(&mut b, data + fact("offsetof(bnxt_re_sge.pa)"), wr.laddr, 8);
        put(&mut b, data + fact("offsetof(bnxt_re_sge.lkey)"), wr.lkey as u64, 4);
        put(&mut b, data + fact("offsetof(bnxt_re_sge.length)"), sge_len as u64, 4);
        sge_len
    };
    // hdr->lhdr.qkey_len = htole64(bytes) (verbs.c:2575)
    put(&mut b, hdr + fact("offsetof(bnxt_re_bsqe.lhdr)"), bytes as u64, 8);
    // bnxt_re_required_slots(): wqe_sz = (inline bytes aligned to 16, or
    // 16 * num_sge) + bnxt_re_get_sqe_hdr_sz(), in 16-byte units (verbs.c:2369-2391)
    let body = if inline { (wr.length as u64).div_ceil(slot) * slot } else { slot };
    let wqe_size = (body + fact("bnxt_re_get_sqe_hdr_sz()")) >> fact("log2(sizeof(bnxt_re_sge))");
    // bnxt_re_set_hdr_flags() (verbs.c:2394-2422)
    let mut fl = 0;
    if wr.signaled {
        fl |= fact("BNXT_RE_WR_FLAGS_SIGNALED");
    }
    if wr.fence {
        fl |= fact("BNXT_RE_WR_FLAGS_UC_FENCE");
    }
    if wr.solicited {
        fl |= fact("BNXT_RE_WR_FLAGS_SE");
    }
    if inline {
        fl |= fact("BNXT_RE_WR_FLAGS_INLINE");
    }
    let opcd = fact(match wr.kind {
        Kind::Write | Kind::WriteInline => "BNXT_RE_WR_OPCD_RDMA_WRITE",
        Kind::WriteImm => "BNXT_RE_WR_OPCD_RDMA_WRITE_IMM",
        Kind::Read => "BNXT_RE_WR_OPCD_RDMA_READ",
        Kind::FetchAdd => "BNXT_RE_WR_OPCD_ATOMIC_FA",
        Kind::CmpSwap => "BNXT_RE_WR_OPCD_ATOMIC_CS",
    });
    let hdrval = ((fl & fact("BNXT_RE_HDR_FLAGS_MASK")) << fact("BNXT_RE_HDR_FLAGS_SHIFT"))
        | ((wqe_size & fact("BNXT_RE_HDR_WS_MASK")) << fact("BNXT_RE_HDR_WS_SHIFT"))
        | (opcd & fact("BNXT_RE_HDR_WT_MASK"));
    put(&mut b, hdr + fact("offsetof(bnxt_re_bsqe.rsv_ws_fl_wt)"), hdrval, 4);
    match wr.kind {
        Kind::WriteImm | Kind::Write | Kind::Read | Kind::WriteInline => {
            if let Kind::WriteImm = wr.kind {
                // hdr->key_immd = htole32(be32toh(wr->imm_data)) (verbs.c:2597)
                put(&mut b, hdr + fact("offsetof(bnxt_re_bsqe.key_immd)"), u32::from_be(wr.imm_data) as u64, 4);
            }
            // verbs.c:2600-2603
            put(&mut b, sqe + fact("offsetof(bnxt_re_rdma.rva)"), wr.raddr, 8);
            put(&mut b, sqe + fact("offsetof(bnxt_re_rdma.rkey)"), wr.rkey as u64, 4);
        }
        Kind::CmpSwap | Kind::FetchAdd => {
            // bnxt_re_build_cns_sqe / _fna_sqe (verbs.c:2472-2493): rkey in
            // key_immd, the remote address over lhdr.
            put(&mut b, hdr + fact("offsetof(bnxt_re_bsqe.key_immd)"), wr.rkey as u64, 4);
            put(&mut b, hdr + fact("offsetof(bnxt_re_bsqe.lhdr)"), wr.raddr, 8);
            if let Kind::CmpSwap = wr.kind {
                put(&mut b, sqe + fact("offsetof(bnxt_re_atomic.cmp_dt)"), wr.compare_add, 8);
                put(&mut b, sqe + fact("offsetof(bnxt_re_atomic.swp_dt)"), wr.swap, 8);
            } else {
                put(&mut b, sqe + fact("offsetof(bnxt_re_atomic.swp_dt)"), wr.compare_add, 8);
            }
        }
    }
    b
}

fn our_flags(wr: &Wr) -> u8 {
    (if wr.signaled { flags::SIGNALED } else { 0 })
        | (if wr.fence { flags::UC_FENCE } else { 0 })
        | (if wr.solicited { flags::SE } else { 0 })
}

/// The Rust twin's encoding of the same request.
fn rust_wqe(wr: &Wr) -> Wqe {
    let f = our_flags(wr);
    match wr.kind {
        Kind::Write => Wqe::rdma(opcode::RDMA_WRITE, f, wr.raddr, wr.rkey, wr.laddr, wr.lkey, wr.length, 0),
        Kind::WriteImm => Wqe::rdma(
            opcode::RDMA_WRITE_IMM,
            f,
            wr.raddr,
            wr.rkey,
            wr.laddr,
            wr.lkey,
            wr.length,
            u32::from_be(wr.imm_data),
        ),
        Kind::Read => Wqe::rdma(opcode::RDMA_READ, f, wr.raddr, wr.rkey, wr.laddr, wr.lkey, wr.length, 0),
        Kind::WriteInline => Wqe::write_inline8(f, wr.raddr, wr.rkey, wr.inline_value, wr.length),
        Kind::FetchAdd => Wqe::atomic(opcode::ATOMIC_FA, f, wr.raddr, wr.rkey, wr.compare_add, 0, wr.laddr, wr.lkey),
        Kind::CmpSwap => {
            Wqe::atomic(opcode::ATOMIC_CS, f, wr.raddr, wr.rkey, wr.swap, wr.compare_add, wr.laddr, wr.lkey)
        }
    }
}

/// The C++ header's builders on the same request.
fn cxx_wqe(wr: &Wr) -> [u8; 48] {
    let f = our_flags(wr);
    let mut out = [0u8; 48];
    let p = out.as_mut_ptr();
    // SAFETY: each builder writes exactly 48 bytes to `out`.
    unsafe {
        match wr.kind {
            Kind::Write => rust_gin_bnxt_wqe_rdma(opcode::RDMA_WRITE, f, wr.raddr, wr.rkey, wr.laddr, wr.lkey, wr.length, 0, p),
            Kind::WriteImm => rust_gin_bnxt_wqe_rdma(
                opcode::RDMA_WRITE_IMM,
                f,
                wr.raddr,
                wr.rkey,
                wr.laddr,
                wr.lkey,
                wr.length,
                u32::from_be(wr.imm_data),
                p,
            ),
            Kind::Read => rust_gin_bnxt_wqe_rdma(opcode::RDMA_READ, f, wr.raddr, wr.rkey, wr.laddr, wr.lkey, wr.length, 0, p),
            Kind::WriteInline => rust_gin_bnxt_wqe_write_inline8(f, wr.raddr, wr.rkey, wr.inline_value, wr.length, p),
            Kind::FetchAdd => {
                rust_gin_bnxt_wqe_atomic(opcode::ATOMIC_FA, f, wr.raddr, wr.rkey, wr.compare_add, 0, wr.laddr, wr.lkey, p)
            }
            Kind::CmpSwap => rust_gin_bnxt_wqe_atomic(
                opcode::ATOMIC_CS,
                f,
                wr.raddr,
                wr.rkey,
                wr.swap,
                wr.compare_add,
                wr.laddr,
                wr.lkey,
                p,
            ),
        }
    }
    out
}

fn wr_strategy() -> impl Strategy<Value = Wr> {
    (request_strategy(), any::<bool>()).prop_map(|(req, solicited)| Wr { req, solicited })
}

#[test]
fn whole_wqes_match_rdma_core_byte_for_byte() {
    assert_each_matches_reference(wr_strategy(), reference_wqe, |wr| {
        let rust = rust_wqe(wr);
        assert_eq!(Wqe::parse(&reference_wqe(wr)), rust, "parse of rdma-core's bytes for {wr:?}");
        vec![("Rust twin", rust.encode()), ("C++ header", cxx_wqe(wr))]
    });
}

/// The same comparison sees a wrong byte: a builder that puts the rkey one
/// slot off, or a flag in the wrong byte, does not pass.
#[test]
fn whole_wqe_comparison_sees_a_wrong_field() {
    let wr = Wr { req: Request::example(Kind::WriteImm), solicited: false };
    let reference = reference_wqe(&wr);
    assert_eq!(rust_wqe(&wr).encode(), reference);
    let mut w = rust_wqe(&wr);
    w.flags |= flags::RD_FENCE;
    assert_ne!(w.encode(), reference);
    let mut w = rust_wqe(&wr);
    w.key_immd = wr.imm_data; // the immediate left in wire order: rdma-core swaps it
    assert_ne!(w.encode(), reference);
}

#[test]
fn wqe_slot_counts_match_rdma_core() {
    for nsge in 0..=fact("BNXT_RE_STATIC_WQE_MAX_SGE") as u32 {
        // bnxt_re_calc_wqe_sz(nsge) >> 4 (verbs.c:1178-1184, 2387-2388)
        let expect = ((fact("sizeof(bnxt_re_sge)") * nsge as u64 + fact("bnxt_re_get_sqe_hdr_sz()")) >> 4) as u32;
        assert_eq!(wqe_slots(nsge, 0, false), expect);
        // SAFETY: a pure function.
        assert_eq!(unsafe { rust_gin_bnxt_wqe_slots(nsge, 0, 0) }, expect);
    }
    for il in 0..=fact("BNXT_RE_MAX_INLINE_SIZE") as u32 {
        let aligned = (il as u64).div_ceil(16) * 16;
        let expect = ((aligned + fact("bnxt_re_get_sqe_hdr_sz()")) >> 4) as u32;
        assert_eq!(wqe_slots(0, il, true), expect, "inline {il}");
        // SAFETY: a pure function.
        assert_eq!(unsafe { rust_gin_bnxt_wqe_slots(0, il, 1) }, expect, "inline {il}");
    }
    // bnxt_re_required_slots() returns 8 in the static mode (verbs.c:2389-2390).
    assert_eq!(ring_slots(uapi::WQE_MODE_STATIC, 3) as u64, fact("STATIC_WQE_NUM_SLOTS"));
    assert_eq!(ring_slots(uapi::WQE_MODE_VARIABLE, 3), 3);
}

// ---------------------------------------------------------------------------
// Doorbells: values and the epoch across wraps
// ---------------------------------------------------------------------------

/// bnxt_re_init_db_hdr() + bnxt_re_ring_db() (db.c:97-115): the le64 at
/// &hdr->indx, indx in the low word.
fn reference_db(indx_with_epoch: u64, qid: u64, typ: u64) -> u64 {
    let indx = indx_with_epoch;
    let typ_qid = (qid & fact("BNXT_RE_DB_QID_MASK"))
        | ((typ & fact("BNXT_RE_DB_TYP_MASK")) << fact("BNXT_RE_DB_TYP_SHIFT"))
        | (1 << fact("BNXT_RE_DB_VALID_SHIFT"));
    let mut b = [0u8; 8];
    put(&mut b, fact("offsetof(bnxt_re_db_hdr.indx)"), indx, 4);
    put(&mut b, fact("offsetof(bnxt_re_db_hdr.typ_qid)"), typ_qid, 4);
    u64::from_le_bytes(b)
}

/// rdma-core's SQ producer (bnxt_re_incr_tail, memory.h:133-141; the
/// doorbell index of bnxt_re_ring_sq_db, db.c:132-144, is the slot tail in
/// the variable mode and the WQE index jsqq->start_idx in the static mode,
/// verbs.c:1448-1449) against ours, over several wraps of the ring.
#[test]
fn sq_doorbells_match_rdma_core_across_wraps() {
    for mode in [uapi::WQE_MODE_STATIC, uapi::WQE_MODE_VARIABLE] {
        let nwr = 16u32;
        let depth = if mode == uapi::WQE_MODE_STATIC { nwr * STATIC_WQE_SLOTS } else { 256 };
        let (mut tail, mut flags_word, mut start_idx) = (0u32, 0u64, 0u32);
        let mut produced: u64 = 0;
        let qid = 0x9_abcd;
        let mut seen_epochs = [false; 2];
        for n in 0..(depth as u64 * 3) {
            let used = wqe_slots(1, 0, false) + (n % 3) as u32; // 3..5 slots
            let slots = ring_slots(mode, used);
            tail += slots;
            if tail >= depth {
                tail %= depth;
                flags_word ^= 1; // BNXT_RE_FLAG_EPOCH_TAIL_SHIFT = 0
            }
            start_idx = (start_idx + 1) % nwr;
            produced += slots as u64;
            let db_index = if mode == uapi::WQE_MODE_VARIABLE { tail } else { start_idx };
            let epoch = (flags_word & fact("BNXT_RE_FLAG_EPOCH_TAIL_MASK")) << fact("BNXT_RE_DB_EPOCH_TAIL_SHIFT");
            let expect = reference_db(db_index as u64 | epoch, qid, fact("BNXT_RE_QUE_TYPE_SQ"));
            let ours_epoch = db_epoch(produced, depth);
            seen_epochs[ours_epoch as usize] = true;
            assert_eq!(db_value(db_index, ours_epoch, qid as u32, db::QUE_TYPE_SQ), expect, "mode {mode} wqe {n}");
            // SAFETY: a pure function.
            assert_eq!(unsafe { rust_gin_bnxt_db_value(db_index, ours_epoch, qid as u32, db::QUE_TYPE_SQ) }, expect);
            let d = parse_doorbell(expect);
            assert_eq!((d.index, d.epoch, d.qid, d.typ, d.valid), (db_index, ours_epoch, qid as u32, 0, true));
        }
        assert!(seen_epochs[0] && seen_epochs[1], "the test must cross a wrap");
    }
}

// ---------------------------------------------------------------------------
// MSN search table
// ---------------------------------------------------------------------------

/// bnxt_re_fill_psns_for_msntbl() (verbs.c:1535-1565) with
/// bnxt_re_update_msn_tbl() (verbs.h:131-140), against packets() and
/// msn_entry().
#[test]
fn msn_entries_match_rdma_core() {
    runner()
        .run(&(any::<u32>(), 0u32..(1 << 22), prop_oneof![Just(256u32), Just(1024), Just(4096)], any::<u16>()), |(sq_psn, len, mtu, st_idx)| {
            let mut pkt_cnt = len / mtu;
            if len % mtu != 0 {
                pkt_cnt += 1;
            }
            if len == 0 {
                pkt_cnt = 1;
            }
            let npsn = sq_psn.wrapping_add(pkt_cnt);
            let expect = (((st_idx as u64) << fact("BNXT_RE_SQ_MSN_SEARCH_START_IDX_SHIFT"))
                & fact("BNXT_RE_SQ_MSN_SEARCH_START_IDX_MASK"))
                | (((npsn as u64) << fact("BNXT_RE_SQ_MSN_SEARCH_NEXT_PSN_SHIFT"))
                    & fact("BNXT_RE_SQ_MSN_SEARCH_NEXT_PSN_MASK"))
                | ((sq_psn as u64) & fact("BNXT_RE_SQ_MSN_SEARCH_START_PSN_MASK"));
            prop_assert_eq!(packets(len, mtu), pkt_cnt);
            // SAFETY: pure functions.
            prop_assert_eq!(unsafe { rust_gin_bnxt_packets(len, mtu) }, pkt_cnt);
            let ours = msn_entry(st_idx as u32, sq_psn.wrapping_add(packets(len, mtu)), sq_psn);
            prop_assert_eq!(ours, expect);
            prop_assert_eq!(
                unsafe { rust_gin_bnxt_msn_entry(st_idx as u32, sq_psn.wrapping_add(pkt_cnt), sq_psn) },
                expect
            );
            Ok(())
        })
        .unwrap();
}

// ---------------------------------------------------------------------------
// Completions: layout, status, phase across wraps
// ---------------------------------------------------------------------------

#[test]
fn cqes_match_rdma_core_layout() {
    runner()
        .run(&(any::<u64>(), any::<u16>(), 0u8..=0x0b, 0u32..=1), |(handle, con, st, phase)| {
            let c = Cqe { qp_handle: handle, con_indx: con as u32, wc_type: bcqe::WC_TYPE_SEND, status: st };
            let b = c.encode(phase);
            // What bnxt_re_poll_one() / bnxt_re_poll_scqe() read (verbs.c:629-645, 863-890).
            let mut r = [0u8; 32];
            put(&mut r, fact("offsetof(bnxt_re_req_cqe.qp_handle)"), handle, 8);
            put(&mut r, fact("offsetof(bnxt_re_req_cqe.con_indx)"), con as u64, 4);
            let flg = (phase as u64 & fact("BNXT_RE_BCQE_PH_MASK"))
                | ((fact("BNXT_RE_WC_TYPE_SEND") & fact("BNXT_RE_BCQE_TYPE_MASK")) << fact("BNXT_RE_BCQE_TYPE_SHIFT"))
                | ((st as u64 & fact("BNXT_RE_BCQE_STATUS_MASK")) << fact("BNXT_RE_BCQE_STATUS_SHIFT"));
            put(&mut r, fact("sizeof(bnxt_re_req_cqe)") + fact("offsetof(bnxt_re_bcqe.flg_st_typ_ph)"), flg, 4);
            prop_assert_eq!(b, r);
            prop_assert_eq!(Cqe::parse(&r), c);
            Ok(())
        })
        .unwrap();
}

/// rdma-core's consumer: bnxt_re_is_cqe_valid() (main.h:541-551) against
/// cq->phase, bnxt_re_incr_head() (memory.h:143-151) and
/// bnxt_re_change_cq_phase() (main.h:553-557) from the start phase, against
/// cqe_is_valid() over several wraps, for the NIC's current and stale phase.
#[test]
fn cq_phase_matches_rdma_core_across_wraps() {
    for depth in [1u32, 2, 64, 1024] {
        let (mut head, mut phase) = (0u32, fact("BNXT_RE_QUEUE_START_PHASE") as u32);
        for ci in 0..(depth as u64 * 4 + 3) {
            for written in [phase, phase ^ 1] {
                let flg = written | (status::REM_ACC as u32) << bcqe::STATUS_SHIFT;
                let rdma_core = (flg as u64 & fact("BNXT_RE_BCQE_PH_MASK")) == phase as u64;
                assert_eq!(cqe_is_valid(flg, ci, depth), rdma_core, "depth {depth} ci {ci}");
                // SAFETY: a pure function.
                assert_eq!(unsafe { rust_gin_bnxt_cqe_is_valid(flg, ci, depth) } != 0, rdma_core);
            }
            head += 1;
            if head >= depth {
                head %= depth;
            }
            if head == 0 {
                phase = !phase & fact("BNXT_RE_BCQE_PH_MASK") as u32;
            }
        }
    }
}
