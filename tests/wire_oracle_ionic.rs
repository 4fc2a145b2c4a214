//! The ionic (AMD Pensando Pollara) wire formats against upstream.
//!
//! Three descriptions of the same bytes are compared:
//! - the C++ header the device code uses (device/include/rust_gin/ionic/wire.h),
//!   through the table device/src/host_only/wire_layout_ionic.cpp exports, and
//!   its builders, called through the same file;
//! - the Rust twin (host/ionic/wire.rs);
//! - upstream: ionic's headers are not installed here (neither rdma-core's
//!   provider nor the kernel uapi <rdma/ionic-abi.h>), so their definitions
//!   are restated below (`UPSTREAM`, `REFERENCE`), each with its rdma-core
//!   file and line at commit `REV`, and rdma-core's posting, doorbell and
//!   polling code is restated as the reference builders of this file, which
//!   take every offset, shift and mask from those cited facts, never from our
//!   headers.
//!
//! The list is closed: a new constant in wire.h or wire.rs without an
//! upstream fact fails `every_constant_is_checked`.

use std::collections::BTreeMap;

use proptest::prelude::*;

use rccl_rust_gin::ionic::wire::*;

#[macro_use]
#[path = "support/wire_facts.rs"]
#[allow(dead_code)]
mod wire_facts;
use wire_facts::*;

/// linux-rdma/rdma-core, the commit read (master, 2026-08-20). Files are under
/// providers/ionic/ unless they say kernel-headers/ (rdma-core's copy of the
/// Linux uapi).
const REV: &str = "691953d8d502f54088f776c5ba2aeed0a5ac945d";

/// ionic definitions our headers mirror: (fact, value, "file:line" at `REV`).
const UPSTREAM: &[(&str, u64, &str)] = &[
    // structures, ionic_fw_types.h
    ("sizeof(ionic_sge)", 16, "ionic_fw_types.h:14-18 (be64 va, be32 len, be32 lkey)"),
    ("sizeof(ionic_v1_base_hdr)", 16, "ionic_fw_types.h:133-139"),
    ("sizeof(ionic_v1_wqe)", 64, "ionic_fw_types.h:202-211: base header + 48-byte body union"),
    ("sizeof(ionic_v1_cqe)", 32, "ionic_fw_types.h:74-92"),
    ("sizeof(ionic_v1_pld)", 32, "ionic_fw_types.h:66-71 (sgl[2] / data[32])"),
    ("offsetof(ionic_sge.va)", 0, "ionic_fw_types.h:15"),
    ("offsetof(ionic_sge.len)", 8, "ionic_fw_types.h:16"),
    ("offsetof(ionic_sge.lkey)", 12, "ionic_fw_types.h:17"),
    ("offsetof(ionic_v1_base_hdr.wqe_idx)", 0, "ionic_fw_types.h:134 (le64)"),
    ("offsetof(ionic_v1_base_hdr.op)", 8, "ionic_fw_types.h:135"),
    ("offsetof(ionic_v1_base_hdr.num_sge_key)", 9, "ionic_fw_types.h:136"),
    ("offsetof(ionic_v1_base_hdr.flags)", 10, "ionic_fw_types.h:137 (be16)"),
    ("offsetof(ionic_v1_base_hdr.imm_data_key)", 12, "ionic_fw_types.h:138 (be32)"),
    ("offsetof(ionic_v1_wqe.common.rdma.remote_va_high)", 16, "ionic_fw_types.h:156 (after the 16-byte base, :203)"),
    ("offsetof(ionic_v1_wqe.common.rdma.remote_va_low)", 20, "ionic_fw_types.h:157"),
    ("offsetof(ionic_v1_wqe.common.rdma.remote_rkey)", 24, "ionic_fw_types.h:158"),
    ("offsetof(ionic_v1_wqe.common.length)", 28, "ionic_fw_types.h:161 (after the 12-byte union, :149-160)"),
    ("offsetof(ionic_v1_wqe.common.pld)", 32, "ionic_fw_types.h:162"),
    ("offsetof(ionic_v1_wqe.atomic.sge)", 48, "ionic_fw_types.h:175 (after 7 be32 and rsvd[4], :167-174)"),
    ("offsetof(ionic_v1_wqe.atomic_v2.remote_va_high)", 16, "ionic_fw_types.h:180"),
    ("offsetof(ionic_v1_wqe.atomic_v2.remote_va_low)", 20, "ionic_fw_types.h:181"),
    ("offsetof(ionic_v1_wqe.atomic_v2.remote_rkey)", 24, "ionic_fw_types.h:182"),
    ("offsetof(ionic_v1_wqe.atomic_v2.swap_add_high)", 28, "ionic_fw_types.h:183"),
    ("offsetof(ionic_v1_wqe.atomic_v2.swap_add_low)", 32, "ionic_fw_types.h:184"),
    ("offsetof(ionic_v1_wqe.atomic_v2.compare_high)", 36, "ionic_fw_types.h:185"),
    ("offsetof(ionic_v1_wqe.atomic_v2.compare_low)", 40, "ionic_fw_types.h:186"),
    ("offsetof(ionic_v1_wqe.atomic_v2.lkey)", 44, "ionic_fw_types.h:187"),
    ("offsetof(ionic_v1_wqe.atomic_v2.local_va)", 48, "ionic_fw_types.h:188 (be64)"),
    ("offsetof(ionic_v1_wqe.atomic_v2.rsvd_expdb)", 56, "ionic_fw_types.h:189"),
    ("offsetof(ionic_v1_cqe.send.msg_msn)", 4, "ionic_fw_types.h:84-85 (after rsvd[4])"),
    ("offsetof(ionic_v1_cqe.send.npg_wqe_idx_timestamp)", 16, "ionic_fw_types.h:86-87 (after rsvd2[8])"),
    ("offsetof(ionic_v1_cqe.status_length)", 24, "ionic_fw_types.h:90 (after the 24-byte union)"),
    ("offsetof(ionic_v1_cqe.qid_type_flags)", 28, "ionic_fw_types.h:91"),
    // geometry and versions
    ("IONIC_EXP_DBELL_SZ", 8, "ionic_fw_types.h:9"),
    ("IONIC_MIN_RDMA_VERSION", 1, "ionic.h:31"),
    ("IONIC_MAX_RDMA_VERSION", 2, "ionic.h:32"),
    ("IONIC_QUEUE_DEPTH_MAX", 0xFFFF, "ionic.h:40"),
    // opcodes, v1 (enum ionic_v1_op, consecutive from 0) and v2
    ("IONIC_V1_OP_SEND", 0, "ionic_fw_types.h:215"),
    ("IONIC_V1_OP_SEND_IMM", 2, "ionic_fw_types.h:217"),
    ("IONIC_V1_OP_RDMA_READ", 3, "ionic_fw_types.h:218"),
    ("IONIC_V1_OP_RDMA_WRITE", 4, "ionic_fw_types.h:219"),
    ("IONIC_V1_OP_RDMA_WRITE_IMM", 5, "ionic_fw_types.h:220"),
    ("IONIC_V1_OP_ATOMIC_CS", 6, "ionic_fw_types.h:221"),
    ("IONIC_V1_OP_ATOMIC_FA", 7, "ionic_fw_types.h:222"),
    ("IONIC_V1_FLAG_FENCE", 1 << 0, "ionic_fw_types.h:228"),
    ("IONIC_V1_FLAG_SOL", 1 << 1, "ionic_fw_types.h:229"),
    ("IONIC_V1_FLAG_INL", 1 << 2, "ionic_fw_types.h:230"),
    ("IONIC_V1_FLAG_SIG", 1 << 3, "ionic_fw_types.h:231"),
    ("IONIC_V1_FLAG_COLOR", 1 << 4, "ionic_fw_types.h:232"),
    ("IONIC_V2_OPSL_OUT", 0x20, "ionic_fw_types.h:242"),
    ("IONIC_V2_OPSL_IMM", 0x40, "ionic_fw_types.h:243"),
    ("IONIC_V2_OP_SEND", 0x20, "ionic_fw_types.h:246: 0x0 | OPSL_OUT"),
    ("IONIC_V2_OP_SEND_IMM", 0x60, "ionic_fw_types.h:247: SEND | OPSL_IMM"),
    ("IONIC_V2_OP_RDMA_WRITE", 0x21, "ionic_fw_types.h:250: 0x1 | OPSL_OUT"),
    ("IONIC_V2_OP_RDMA_WRITE_IMM", 0x61, "ionic_fw_types.h:251: RDMA_WRITE | OPSL_IMM"),
    ("IONIC_V2_OP_RDMA_READ", 0x02, "ionic_fw_types.h:253"),
    ("IONIC_V2_OP_ATOMIC_CS", 0x04, "ionic_fw_types.h:255"),
    ("IONIC_V2_OP_ATOMIC_FA", 0x05, "ionic_fw_types.h:256"),
    // doorbell, ionic_queue.h
    ("IONIC_QID_MASK", (1 << 24) - 1, "ionic_queue.h:16"),
    ("IONIC_DBELL_QID_SHIFT", 24, "ionic_queue.h:17"),
    ("IONIC_DBELL_RING_ARM", 1 << 16, "ionic_queue.h:18"),
    ("IONIC_DBELL_RING_SONLY", 1 << 17, "ionic_queue.h:19"),
    // completion
    ("IONIC_V1_CQE_COLOR", 1 << 0, "ionic_fw_types.h:120"),
    ("IONIC_V1_CQE_ERROR", 1 << 1, "ionic_fw_types.h:121"),
    ("IONIC_V1_CQE_TYPE_SHIFT", 5, "ionic_fw_types.h:122"),
    ("IONIC_V1_CQE_TYPE_MASK", 0x7, "ionic_fw_types.h:123"),
    ("IONIC_V1_CQE_QID_SHIFT", 8, "ionic_fw_types.h:124"),
    ("IONIC_V1_CQE_TYPE_RECV", 1, "ionic_fw_types.h:126"),
    ("IONIC_V1_CQE_TYPE_SEND_MSN", 2, "ionic_fw_types.h:127"),
    ("IONIC_V1_CQE_TYPE_SEND_NPG", 3, "ionic_fw_types.h:128"),
    ("IONIC_V1_CQE_WQE_IDX_MASK", 0xffff, "ionic_fw_types.h:96"),
    ("IONIC_V1_CQE_TIMESTAMP_SHIFT", 16, "ionic_fw_types.h:97"),
    ("IONIC_STS_OK", 0, "ionic_fw_types.h:46 (enum ionic_status, consecutive from 0)"),
    ("IONIC_STS_LOCAL_LEN_ERR", 1, "ionic_fw_types.h:47"),
    ("IONIC_STS_LOCAL_QP_OPER_ERR", 2, "ionic_fw_types.h:48"),
    ("IONIC_STS_LOCAL_PROT_ERR", 3, "ionic_fw_types.h:49"),
    ("IONIC_STS_WQE_FLUSHED_ERR", 4, "ionic_fw_types.h:50"),
    ("IONIC_STS_MEM_MGMT_OPER_ERR", 5, "ionic_fw_types.h:51"),
    ("IONIC_STS_BAD_RESP_ERR", 6, "ionic_fw_types.h:52"),
    ("IONIC_STS_LOCAL_ACC_ERR", 7, "ionic_fw_types.h:53"),
    ("IONIC_STS_REMOTE_INV_REQ_ERR", 8, "ionic_fw_types.h:54"),
    ("IONIC_STS_REMOTE_ACC_ERR", 9, "ionic_fw_types.h:55"),
    ("IONIC_STS_REMOTE_OPER_ERR", 10, "ionic_fw_types.h:56"),
    ("IONIC_STS_RETRY_EXCEEDED", 11, "ionic_fw_types.h:57"),
    ("IONIC_STS_RNR_RETRY_EXCEEDED", 12, "ionic_fw_types.h:58"),
    ("IONIC_STS_XRC_VIO_ERR", 13, "ionic_fw_types.h:59"),
];

/// Facts our headers do not mirror, used by the reference builders and the
/// cross-checks below.
const REFERENCE: &[(&str, u64, &str)] = &[
    ("IONIC_V2_OP_SEND_INV_BIT", 0x80, "ionic_fw_types.h:244 (IONIC_V2_OPSL_INV)"),
    ("ionic_cq.color initial", 1, "ionic_verbs.c:509 (cq->color = true)"),
    ("ionic_sq.color initial", 1, "ionic_verbs.c:1748 (qp->sq.color = true)"),
    ("IONIC_CMB_EXPDB", 4, "kernel-headers/rdma/ionic-abi.h:21"),
];

extern "C" {
    // device/src/host_only/wire_layout_ionic.cpp
    static rust_gin_ionic_wire_facts: [CxxFact; 0];
    static rust_gin_ionic_wire_facts_len: usize;
    fn rust_gin_ionic_wqe_rdma(
        op: u8,
        idx: u16,
        flags: u16,
        color: u32,
        raddr: u64,
        rkey: u32,
        laddr: u64,
        lkey: u32,
        length: u32,
        imm_be: u32,
        out: *mut u8,
    );
    fn rust_gin_ionic_wqe_write_inline8(
        op: u8,
        idx: u16,
        flags: u16,
        color: u32,
        raddr: u64,
        rkey: u32,
        value: u64,
        len: u32,
        out: *mut u8,
    );
    fn rust_gin_ionic_wqe_atomic_v2(
        op: u8,
        idx: u16,
        flags: u16,
        color: u32,
        raddr: u64,
        rkey: u32,
        swap_add: u64,
        compare: u64,
        laddr: u64,
        lkey: u32,
        out: *mut u8,
    );
    fn rust_gin_ionic_wqe_atomic_v1(
        op: u8,
        idx: u16,
        flags: u16,
        color: u32,
        raddr: u64,
        rkey: u32,
        swap_add: u64,
        compare: u64,
        laddr: u64,
        lkey: u32,
        out: *mut u8,
    );
    fn rust_gin_ionic_db_value(qid: u32, prod: u16) -> u64;
    fn rust_gin_ionic_color_for(i: u64, depth: u32) -> u32;
    fn rust_gin_ionic_cqe_is_valid(qtf_stored: u32, ci: u64, depth: u32) -> i32;
}

// ---------------------------------------------------------------------------
// The tables
// ---------------------------------------------------------------------------

fn upstream() -> Vec<(String, u64)> {
    UPSTREAM.iter().map(|(n, v, _)| (n.to_string(), *v)).collect()
}

fn fact(name: &str) -> u64 {
    UPSTREAM
        .iter()
        .chain(REFERENCE)
        .find(|(n, _, _)| *n == name)
        .map(|(_, v, _)| *v)
        .unwrap_or_else(|| panic!("no upstream fact named {name}"))
}

fn cxx_rows() -> Vec<Row> {
    // SAFETY: an immutable static array of rust_gin_ionic_wire_facts_len entries.
    unsafe { cxx_table(rust_gin_ionic_wire_facts.as_ptr(), rust_gin_ionic_wire_facts_len) }
}

fn rust_rows() -> Vec<Row> {
    const M64: u64 = 0x0102_0304_0506_0708;
    let w = Wqe::rdma(0, 0, 0, 0, 0, 0, M64, 0, 0, 0).encode();
    let sge_va = measured_offset(&w, &M64.to_be_bytes()) - PLD_OFFSET as u64;
    let idx = Wqe::rdma(0, 0xa5b6, 0, 0, 0, 0, 0, 0, 0, 0).encode();
    let wqe_idx = measured_offset(&idx, &[0xb6, 0xa5]);
    let npg = Cqe { msg_msn: 0, npg_wqe_idx_timestamp: M64, status_length: 0, qid: 0, typ: 0, error: false }.encode(0);
    let npg_off = measured_offset(&npg, &M64.to_le_bytes());
    let cs = Wqe::atomic_v2(op_v2::ATOMIC_CS, !0, !0, 1, !0, !0, !0, !0, !0, !0).encode();
    let rsvd_expdb = PLD_OFFSET as u64 + first_untouched(&cs[PLD_OFFSET..]);
    vec![
        // structures
        rust_row!("sizeof(ionic_sge)", SGE_BYTES),
        rust_row!("sizeof(ionic_v1_base_hdr)", WQE_BASE_BYTES),
        rust_row!("sizeof(ionic_v1_wqe)", WQE_BYTES),
        rust_row!("sizeof(ionic_v1_cqe)", CQE_BYTES),
        rust_row!("sizeof(ionic_v1_pld)", PLD_BYTES),
        Row::new("offsetof(ionic_sge.va)", "Wqe::rdma(laddr)-PLD_OFFSET", sge_va),
        rust_row!("offsetof(ionic_sge.len)", off::SGE_LEN),
        rust_row!("offsetof(ionic_sge.lkey)", off::SGE_LKEY),
        Row::new("offsetof(ionic_v1_base_hdr.wqe_idx)", "Wqe::encode(wqe_idx)", wqe_idx),
        rust_row!("offsetof(ionic_v1_base_hdr.op)", off::OP),
        rust_row!("offsetof(ionic_v1_base_hdr.num_sge_key)", off::NUM_SGE_KEY),
        rust_row!("offsetof(ionic_v1_base_hdr.flags)", off::FLAGS),
        rust_row!("offsetof(ionic_v1_base_hdr.imm_data_key)", off::IMM_DATA_KEY),
        rust_row!("offsetof(ionic_v1_wqe.common.rdma.remote_va_high)", off::REMOTE_VA_HIGH),
        rust_row!("offsetof(ionic_v1_wqe.common.rdma.remote_va_low)", off::REMOTE_VA_LOW),
        rust_row!("offsetof(ionic_v1_wqe.common.rdma.remote_rkey)", off::REMOTE_RKEY),
        rust_row!("offsetof(ionic_v1_wqe.common.length)", off::LENGTH),
        rust_row!("offsetof(ionic_v1_wqe.common.pld)", PLD_OFFSET),
        rust_row!("offsetof(ionic_v1_wqe.atomic.sge)", off::ATOMIC_V1_SGE),
        rust_row!("offsetof(ionic_v1_wqe.atomic_v2.remote_va_high)", off::REMOTE_VA_HIGH),
        rust_row!("offsetof(ionic_v1_wqe.atomic_v2.remote_va_low)", off::REMOTE_VA_LOW),
        rust_row!("offsetof(ionic_v1_wqe.atomic_v2.remote_rkey)", off::REMOTE_RKEY),
        rust_row!("offsetof(ionic_v1_wqe.atomic_v2.swap_add_high)", off::SWAP_ADD_HIGH),
        rust_row!("offsetof(ionic_v1_wqe.atomic_v2.swap_add_low)", off::SWAP_ADD_LOW),
        rust_row!("offsetof(ionic_v1_wqe.atomic_v2.compare_high)", off::COMPARE_HIGH),
        rust_row!("offsetof(ionic_v1_wqe.atomic_v2.compare_low)", off::COMPARE_LOW),
        rust_row!("offsetof(ionic_v1_wqe.atomic_v2.lkey)", off::ATOMIC_LKEY),
        rust_row!("offsetof(ionic_v1_wqe.atomic_v2.local_va)", off::ATOMIC_LOCAL_VA),
        Row::new("offsetof(ionic_v1_wqe.atomic_v2.rsvd_expdb)", "Wqe::atomic_v2(rsvd_expdb)", rsvd_expdb),
        rust_row!("offsetof(ionic_v1_cqe.send.msg_msn)", off::CQE_MSG_MSN),
        Row::new("offsetof(ionic_v1_cqe.send.npg_wqe_idx_timestamp)", "Cqe::encode(npg)", npg_off),
        rust_row!("offsetof(ionic_v1_cqe.send.npg_wqe_idx_timestamp)", off::CQE_NPG_WQE_IDX_TIMESTAMP),
        rust_row!("offsetof(ionic_v1_cqe.status_length)", off::CQE_STATUS_LENGTH),
        rust_row!("offsetof(ionic_v1_cqe.qid_type_flags)", off::CQE_QID_TYPE_FLAGS),
        // geometry and versions
        rust_row!("IONIC_EXP_DBELL_SZ", EXP_DBELL_SZ),
        rust_row!("IONIC_MIN_RDMA_VERSION", MIN_RDMA_VERSION),
        rust_row!("IONIC_MAX_RDMA_VERSION", MAX_RDMA_VERSION),
        rust_row!("IONIC_QUEUE_DEPTH_MAX", QUEUE_DEPTH_MAX),
        // opcodes and flags
        rust_row!("IONIC_V1_OP_SEND", op_v1::SEND),
        rust_row!("IONIC_V1_OP_SEND_IMM", op_v1::SEND_IMM),
        rust_row!("IONIC_V1_OP_RDMA_READ", op_v1::RDMA_READ),
        rust_row!("IONIC_V1_OP_RDMA_WRITE", op_v1::RDMA_WRITE),
        rust_row!("IONIC_V1_OP_RDMA_WRITE_IMM", op_v1::RDMA_WRITE_IMM),
        rust_row!("IONIC_V1_OP_ATOMIC_CS", op_v1::ATOMIC_CS),
        rust_row!("IONIC_V1_OP_ATOMIC_FA", op_v1::ATOMIC_FA),
        rust_row!("IONIC_V2_OPSL_OUT", op_v2::OPSL_OUT),
        rust_row!("IONIC_V2_OPSL_IMM", op_v2::OPSL_IMM),
        rust_row!("IONIC_V2_OP_SEND", op_v2::SEND),
        rust_row!("IONIC_V2_OP_SEND_IMM", op_v2::SEND_IMM),
        rust_row!("IONIC_V2_OP_RDMA_WRITE", op_v2::RDMA_WRITE),
        rust_row!("IONIC_V2_OP_RDMA_WRITE_IMM", op_v2::RDMA_WRITE_IMM),
        rust_row!("IONIC_V2_OP_RDMA_READ", op_v2::RDMA_READ),
        rust_row!("IONIC_V2_OP_ATOMIC_CS", op_v2::ATOMIC_CS),
        rust_row!("IONIC_V2_OP_ATOMIC_FA", op_v2::ATOMIC_FA),
        rust_row!("IONIC_V1_FLAG_FENCE", flags::FENCE),
        rust_row!("IONIC_V1_FLAG_SOL", flags::SOL),
        rust_row!("IONIC_V1_FLAG_INL", flags::INL),
        rust_row!("IONIC_V1_FLAG_SIG", flags::SIG),
        rust_row!("IONIC_V1_FLAG_COLOR", flags::COLOR),
        // doorbell
        rust_row!("IONIC_QID_MASK", db::QID_MASK),
        rust_row!("IONIC_DBELL_QID_SHIFT", db::QID_SHIFT),
        rust_row!("IONIC_DBELL_RING_ARM", db::RING_ARM),
        rust_row!("IONIC_DBELL_RING_SONLY", db::RING_SONLY),
        // completion
        rust_row!("IONIC_V1_CQE_COLOR", cqe::COLOR),
        rust_row!("IONIC_V1_CQE_ERROR", cqe::ERROR),
        rust_row!("IONIC_V1_CQE_TYPE_SHIFT", cqe::TYPE_SHIFT),
        rust_row!("IONIC_V1_CQE_TYPE_MASK", cqe::TYPE_MASK),
        rust_row!("IONIC_V1_CQE_QID_SHIFT", cqe::QID_SHIFT),
        rust_row!("IONIC_V1_CQE_WQE_IDX_MASK", cqe::WQE_IDX_MASK),
        rust_row!("IONIC_V1_CQE_TIMESTAMP_SHIFT", cqe::TIMESTAMP_SHIFT),
        rust_row!("IONIC_V1_CQE_TYPE_RECV", cqe::TYPE_RECV),
        rust_row!("IONIC_V1_CQE_TYPE_SEND_MSN", cqe::TYPE_SEND_MSN),
        rust_row!("IONIC_V1_CQE_TYPE_SEND_NPG", cqe::TYPE_SEND_NPG),
        rust_row!("IONIC_STS_OK", status::OK),
        rust_row!("IONIC_STS_LOCAL_LEN_ERR", status::LOCAL_LEN_ERR),
        rust_row!("IONIC_STS_LOCAL_QP_OPER_ERR", status::LOCAL_QP_OPER_ERR),
        rust_row!("IONIC_STS_LOCAL_PROT_ERR", status::LOCAL_PROT_ERR),
        rust_row!("IONIC_STS_WQE_FLUSHED_ERR", status::WQE_FLUSHED_ERR),
        rust_row!("IONIC_STS_MEM_MGMT_OPER_ERR", status::MEM_MGMT_OPER_ERR),
        rust_row!("IONIC_STS_BAD_RESP_ERR", status::BAD_RESP_ERR),
        rust_row!("IONIC_STS_LOCAL_ACC_ERR", status::LOCAL_ACC_ERR),
        rust_row!("IONIC_STS_REMOTE_INV_REQ_ERR", status::REMOTE_INV_REQ_ERR),
        rust_row!("IONIC_STS_REMOTE_ACC_ERR", status::REMOTE_ACC_ERR),
        rust_row!("IONIC_STS_REMOTE_OPER_ERR", status::REMOTE_OPER_ERR),
        rust_row!("IONIC_STS_RETRY_EXCEEDED", status::RETRY_EXCEEDED),
        rust_row!("IONIC_STS_RNR_RETRY_EXCEEDED", status::RNR_RETRY_EXCEEDED),
        rust_row!("IONIC_STS_XRC_VIO_ERR", status::XRC_VIO_ERR),
    ]
}

// ---------------------------------------------------------------------------
// Sizes, offsets, constants
// ---------------------------------------------------------------------------

#[test]
fn upstream_tables_are_well_formed() {
    assert!(UPSTREAM.len() > 60, "the upstream table looks truncated: {} facts", UPSTREAM.len());
    let mut seen = BTreeMap::new();
    for (n, v, src) in UPSTREAM.iter().chain(REFERENCE) {
        assert!(seen.insert(*n, *v).is_none(), "upstream fact {n} appears twice");
        let file = src.split(':').next().unwrap();
        assert!(
            ["ionic_fw_types.h", "ionic_fw.h", "ionic_queue.h", "ionic.h", "ionic_verbs.c", "kernel-headers/rdma/ionic-abi.h"]
                .contains(&file)
                && src.contains(':'),
            "{n}: the citation {src:?} names no ionic file and line at {REV}"
        );
    }
    // The v2 opcodes are built from their selector bits as upstream says.
    assert_eq!(fact("IONIC_V2_OP_RDMA_WRITE_IMM"), fact("IONIC_V2_OP_RDMA_WRITE") | fact("IONIC_V2_OPSL_IMM"));
    assert_eq!(fact("IONIC_V2_OP_SEND_IMM"), fact("IONIC_V2_OP_SEND") | fact("IONIC_V2_OPSL_IMM"));
    assert_eq!(fact("IONIC_V2_OP_RDMA_WRITE") & fact("IONIC_V2_OPSL_OUT"), fact("IONIC_V2_OPSL_OUT"));
    assert_eq!(fact("IONIC_V2_OP_RDMA_READ") & (fact("IONIC_V2_OPSL_OUT") | fact("IONIC_V2_OP_SEND_INV_BIT")), 0);
    // A WQE's body is the 48 bytes after the base header; the payload ends it.
    assert_eq!(fact("offsetof(ionic_v1_wqe.common.pld)") + fact("sizeof(ionic_v1_pld)"), fact("sizeof(ionic_v1_wqe)"));
}

#[test]
fn cxx_header_agrees_with_upstream() {
    assert_no_problems(compare(&upstream(), &cxx_rows(), "ionic/wire.h"));
}

#[test]
fn rust_twin_agrees_with_upstream() {
    assert_no_problems(compare(&upstream(), &rust_rows(), "ionic/wire.rs"));
}

#[test]
fn every_constant_is_checked() {
    assert_every_constant_is_checked(
        "device/include/rust_gin/ionic/wire.h",
        "host/ionic/wire.rs",
        &cxx_rows(),
        &rust_rows(),
        &[],
        50,
    );
}

#[test]
fn comparison_reports_perturbed_missing_and_unchecked_facts() {
    let oracle = upstream();
    let victims = ["offsetof(ionic_v1_cqe.qid_type_flags)", "IONIC_V2_OP_RDMA_WRITE", "IONIC_V1_FLAG_COLOR"];
    for (side, ours) in [("ionic/wire.h", cxx_rows()), ("ionic/wire.rs", rust_rows())] {
        assert_comparison_catches(&oracle, &ours, side, &victims, "IONIC_STS_RETRY_EXCEEDED");
    }
}

// ---------------------------------------------------------------------------
// Whole WQEs, byte for byte, against rdma-core's ionic_v1_prep_*()
// ---------------------------------------------------------------------------

/// A request plus the SQ state rdma-core's prep functions read (firmware
/// ABI version, producer index and colour).
#[derive(Clone, Copy, Debug)]
struct Wr {
    req: Request,
    v2: bool,
    prod: u16,
    color: bool,
}

impl std::ops::Deref for Wr {
    type Target = Request;
    fn deref(&self) -> &Request {
        &self.req
    }
}

fn put_be(b: &mut [u8], at: u64, v: u64, width: usize) {
    let at = at as usize;
    b[at..at + width].copy_from_slice(&v.to_be_bytes()[8 - width..]);
}

fn op_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Write | Kind::WriteInline => "RDMA_WRITE",
        Kind::WriteImm => "RDMA_WRITE_IMM",
        Kind::Read => "RDMA_READ",
        Kind::FetchAdd => "ATOMIC_FA",
        Kind::CmpSwap => "ATOMIC_CS",
    }
}

/// IONIC_OP(version, name) (ionic_verbs.c:167-168).
fn upstream_op(wr: &Wr) -> u64 {
    fact(&format!("IONIC_V{}_OP_{}", if wr.v2 { 2 } else { 1 }, op_name(wr.kind)))
}

/// rdma-core's ionic_v1_prep_rdma / ionic_v1_prep_atomic (version >= 2) +
/// ionic_v1_prep_common + ionic_v1_prep_base (ionic_verbs.c:2610-2883) on a
/// zeroed 64-byte WQE (ionic_prep_sq_wqe, :2689-2697), every offset from the
/// cited facts.
fn reference_wqe(wr: &Wr) -> [u8; 64] {
    let mut b = [0u8; 64];
    let mut flags = 0u64;
    b[fact("offsetof(ionic_v1_base_hdr.op)") as usize] = upstream_op(wr) as u8;
    match wr.kind {
        Kind::Write | Kind::WriteImm | Kind::Read | Kind::WriteInline => {
            if let Kind::WriteImm = wr.kind {
                // wqe->base.imm_data_key = wr->imm_data (stored as given)
                let at = fact("offsetof(ionic_v1_base_hdr.imm_data_key)") as usize;
                b[at..at + 4].copy_from_slice(&wr.imm_data.to_ne_bytes());
            }
            put_be(&mut b, fact("offsetof(ionic_v1_wqe.common.rdma.remote_va_high)"), wr.raddr >> 32, 4);
            put_be(&mut b, fact("offsetof(ionic_v1_wqe.common.rdma.remote_va_low)"), wr.raddr & 0xffff_ffff, 4);
            put_be(&mut b, fact("offsetof(ionic_v1_wqe.common.rdma.remote_rkey)"), wr.rkey as u64, 4);
            let pld = fact("offsetof(ionic_v1_wqe.common.pld)");
            if let Kind::WriteInline = wr.kind {
                // num_sge_key = 0; FLAG_INL; ionic_prep_inline copies to pld.data
                flags |= fact("IONIC_V1_FLAG_INL");
                let n = wr.length as usize;
                b[pld as usize..pld as usize + n].copy_from_slice(&wr.inline_value.to_le_bytes()[..n]);
            } else {
                // num_sge_key = num_sge; ionic_v1_prep_pld fills sgl[0] (:2555-2608)
                b[fact("offsetof(ionic_v1_base_hdr.num_sge_key)") as usize] = 1;
                put_be(&mut b, pld + fact("offsetof(ionic_sge.va)"), wr.laddr, 8);
                put_be(&mut b, pld + fact("offsetof(ionic_sge.len)"), wr.length as u64, 4);
                put_be(&mut b, pld + fact("offsetof(ionic_sge.lkey)"), wr.lkey as u64, 4);
            }
            // wqe->common.length = htobe32(signed_len)
            put_be(&mut b, fact("offsetof(ionic_v1_wqe.common.length)"), wr.length as u64, 4);
        }
        Kind::FetchAdd | Kind::CmpSwap => {
            let (sw, cmp) = match wr.kind {
                Kind::CmpSwap => (wr.swap, wr.compare_add),
                _ => (wr.compare_add, 0),
            };
            put_be(&mut b, fact("offsetof(ionic_v1_wqe.atomic_v2.swap_add_high)"), sw >> 32, 4);
            put_be(&mut b, fact("offsetof(ionic_v1_wqe.atomic_v2.swap_add_low)"), sw & 0xffff_ffff, 4);
            put_be(&mut b, fact("offsetof(ionic_v1_wqe.atomic_v2.compare_high)"), cmp >> 32, 4);
            put_be(&mut b, fact("offsetof(ionic_v1_wqe.atomic_v2.compare_low)"), cmp & 0xffff_ffff, 4);
            put_be(&mut b, fact("offsetof(ionic_v1_wqe.atomic_v2.remote_va_high)"), wr.raddr >> 32, 4);
            put_be(&mut b, fact("offsetof(ionic_v1_wqe.atomic_v2.remote_va_low)"), wr.raddr & 0xffff_ffff, 4);
            put_be(&mut b, fact("offsetof(ionic_v1_wqe.atomic_v2.remote_rkey)"), wr.rkey as u64, 4);
            b[fact("offsetof(ionic_v1_base_hdr.num_sge_key)") as usize] = 1;
            if wr.v2 {
                put_be(&mut b, fact("offsetof(ionic_v1_wqe.atomic_v2.local_va)"), wr.laddr, 8);
                put_be(&mut b, fact("offsetof(ionic_v1_wqe.atomic_v2.lkey)"), wr.lkey as u64, 4);
            } else {
                // ionic_verbs.c:2875-2877: atomic.sge = { va, htobe32(8), lkey }
                let sge = fact("offsetof(ionic_v1_wqe.atomic.sge)");
                put_be(&mut b, sge + fact("offsetof(ionic_sge.va)"), wr.laddr, 8);
                put_be(&mut b, sge + fact("offsetof(ionic_sge.len)"), 8, 4);
                put_be(&mut b, sge + fact("offsetof(ionic_sge.lkey)"), wr.lkey as u64, 4);
            }
        }
    }
    // ionic_v1_prep_base: wqe_idx = htole64(prod); COLOR, FENCE, SIG flags (be16)
    let at = fact("offsetof(ionic_v1_base_hdr.wqe_idx)") as usize;
    b[at..at + 8].copy_from_slice(&(wr.prod as u64).to_le_bytes());
    if wr.color {
        flags |= fact("IONIC_V1_FLAG_COLOR");
    }
    if wr.fence {
        flags |= fact("IONIC_V1_FLAG_FENCE");
    }
    if wr.signaled {
        flags |= fact("IONIC_V1_FLAG_SIG");
    }
    put_be(&mut b, fact("offsetof(ionic_v1_base_hdr.flags)"), flags, 2);
    b
}

fn our_op(wr: &Wr) -> u8 {
    match (wr.v2, wr.kind) {
        (false, Kind::Write | Kind::WriteInline) => op_v1::RDMA_WRITE,
        (false, Kind::WriteImm) => op_v1::RDMA_WRITE_IMM,
        (false, Kind::Read) => op_v1::RDMA_READ,
        (false, Kind::FetchAdd) => op_v1::ATOMIC_FA,
        (false, Kind::CmpSwap) => op_v1::ATOMIC_CS,
        (true, Kind::Write | Kind::WriteInline) => op_v2::RDMA_WRITE,
        (true, Kind::WriteImm) => op_v2::RDMA_WRITE_IMM,
        (true, Kind::Read) => op_v2::RDMA_READ,
        (true, Kind::FetchAdd) => op_v2::ATOMIC_FA,
        (true, Kind::CmpSwap) => op_v2::ATOMIC_CS,
    }
}

fn our_flags(wr: &Wr) -> u16 {
    (if wr.signaled { flags::SIG } else { 0 }) | (if wr.fence { flags::FENCE } else { 0 })
}

fn rust_wqe(wr: &Wr) -> Wqe {
    let (op, f, c) = (our_op(wr), our_flags(wr), wr.color as u32);
    match wr.kind {
        Kind::Write | Kind::Read => Wqe::rdma(op, wr.prod, f, c, wr.raddr, wr.rkey, wr.laddr, wr.lkey, wr.length, 0),
        Kind::WriteImm => Wqe::rdma(op, wr.prod, f, c, wr.raddr, wr.rkey, wr.laddr, wr.lkey, wr.length, wr.imm_data),
        Kind::WriteInline => Wqe::write_inline8(op, wr.prod, f, c, wr.raddr, wr.rkey, wr.inline_value, wr.length),
        Kind::FetchAdd if !wr.v2 => {
            Wqe::atomic_v1(op, wr.prod, f, c, wr.raddr, wr.rkey, wr.compare_add, 0, wr.laddr, wr.lkey)
        }
        Kind::CmpSwap if !wr.v2 => {
            Wqe::atomic_v1(op, wr.prod, f, c, wr.raddr, wr.rkey, wr.swap, wr.compare_add, wr.laddr, wr.lkey)
        }
        Kind::FetchAdd => Wqe::atomic_v2(op, wr.prod, f, c, wr.raddr, wr.rkey, wr.compare_add, 0, wr.laddr, wr.lkey),
        Kind::CmpSwap => {
            Wqe::atomic_v2(op, wr.prod, f, c, wr.raddr, wr.rkey, wr.swap, wr.compare_add, wr.laddr, wr.lkey)
        }
    }
}

fn cxx_wqe(wr: &Wr) -> [u8; 64] {
    let (op, f, c) = (our_op(wr), our_flags(wr), wr.color as u32);
    let mut out = [0u8; 64];
    let p = out.as_mut_ptr();
    let atomic = if wr.v2 { rust_gin_ionic_wqe_atomic_v2 } else { rust_gin_ionic_wqe_atomic_v1 };
    // SAFETY: each builder writes exactly 64 bytes to `out`.
    unsafe {
        match wr.kind {
            Kind::Write | Kind::Read => {
                rust_gin_ionic_wqe_rdma(op, wr.prod, f, c, wr.raddr, wr.rkey, wr.laddr, wr.lkey, wr.length, 0, p)
            }
            Kind::WriteImm => rust_gin_ionic_wqe_rdma(
                op,
                wr.prod,
                f,
                c,
                wr.raddr,
                wr.rkey,
                wr.laddr,
                wr.lkey,
                wr.length,
                wr.imm_data,
                p,
            ),
            Kind::WriteInline => {
                rust_gin_ionic_wqe_write_inline8(op, wr.prod, f, c, wr.raddr, wr.rkey, wr.inline_value, wr.length, p)
            }
            Kind::FetchAdd => atomic(op, wr.prod, f, c, wr.raddr, wr.rkey, wr.compare_add, 0, wr.laddr, wr.lkey, p),
            Kind::CmpSwap => atomic(
                op,
                wr.prod,
                f,
                c,
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
    (request_strategy(), any::<(bool, bool)>(), any::<u16>()).prop_map(|(req, (v2, color), prod)| Wr {
        req,
        // rdma-core writes the atomic_v2 body for version >= 2, the v1 body
        // with its SGE otherwise (ionic_verbs.c:2871-2878): both are drawn.
        v2,
        prod,
        color,
    })
}

#[test]
fn whole_wqes_match_rdma_core_byte_for_byte() {
    assert_each_matches_reference(wr_strategy(), reference_wqe, |wr| {
        let rust = rust_wqe(wr);
        assert_eq!(Wqe::parse(&reference_wqe(wr)), rust, "parse of rdma-core's bytes for {wr:?}");
        vec![("Rust twin", rust.encode()), ("C++ header", cxx_wqe(wr))]
    });
}

/// The comparison sees a wrong byte: the colour left out, the flags in host
/// order, the remote address halves swapped.
#[test]
fn whole_wqe_comparison_sees_a_wrong_field() {
    let wr = Wr { req: Request::example(Kind::Write), v2: true, prod: 7, color: true };
    let reference = reference_wqe(&wr);
    assert_eq!(rust_wqe(&wr).encode(), reference);
    let mut w = rust_wqe(&wr);
    w.flags &= !flags::COLOR;
    assert_ne!(w.encode(), reference);
    let mut w = rust_wqe(&wr);
    w.flags = w.flags.swap_bytes();
    assert_ne!(w.encode(), reference);
    let mut w = rust_wqe(&wr);
    w.remote_va = w.remote_va.rotate_left(32);
    assert_ne!(w.encode(), reference);
}

// ---------------------------------------------------------------------------
// Doorbells and colours across wraps
// ---------------------------------------------------------------------------

/// rdma-core's SQ producer: ionic_queue_dbell_init / _dbell_val
/// (ionic_queue.h:212-225), ionic_queue_produce (:189-192) and
/// ionic_color_wrap (:129-133) after each WQE (ionic_verbs.c:2650-2651),
/// from colour 1 (:1748), against db_value() and color_for().
#[test]
fn sq_doorbells_and_colours_match_rdma_core_across_wraps() {
    for depth_log2 in [0u32, 1, 4, 8] {
        let mask = (1u32 << depth_log2) - 1;
        let depth = 1u32 << depth_log2;
        let qid = 0xab_cdef_u32;
        let dbell = (qid as u64 & fact("IONIC_QID_MASK")) << fact("IONIC_DBELL_QID_SHIFT");
        let (mut prod, mut color) = (0u32, fact("ionic_sq.color initial") == 1);
        for n in 0..(depth as u64 * 4 + 2) {
            // the WQE at `prod` carries the current colour
            assert_eq!(color_for(n, depth) == 1, color, "depth {depth} wqe {n}");
            // SAFETY: a pure function.
            assert_eq!(unsafe { rust_gin_ionic_color_for(n, depth) } == 1, color);
            prod = (prod + 1) & mask;
            color = color != (prod == 0);
            let expect = dbell | prod as u64;
            assert_eq!(db_value(qid, prod as u16), expect);
            // SAFETY: a pure function.
            assert_eq!(unsafe { rust_gin_ionic_db_value(qid, prod as u16) }, expect);
            assert_eq!(parse_doorbell(expect), (qid, prod as u16));
        }
    }
}

/// rdma-core's consumer: ionic_next_cqe() (ionic_verbs.c:1317-1331) compares
/// the CQE's colour (ionic_fw.h:71-74, on the be32 qid_type_flags) with
/// cq->color, which starts at 1 (:509) and flips when the CQ index wraps
/// (:1531-1532).
#[test]
fn cq_colours_match_rdma_core_across_wraps() {
    for depth in [1u32, 2, 64, 1024] {
        let (mut prod, mut color) = (0u32, fact("ionic_cq.color initial") == 1);
        for ci in 0..(depth as u64 * 4 + 3) {
            for written in [color, !color] {
                let c = Cqe {
                    msg_msn: ci as u32,
                    npg_wqe_idx_timestamp: 0,
                    status_length: 0,
                    qid: 0x1234,
                    typ: cqe::TYPE_SEND_MSN,
                    error: false,
                };
                let bytes = c.encode(written as u32);
                let at = fact("offsetof(ionic_v1_cqe.qid_type_flags)") as usize;
                let stored = u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap());
                // !!(cqe->qid_type_flags & htobe32(IONIC_V1_CQE_COLOR))
                let cqe_color = stored & (fact("IONIC_V1_CQE_COLOR") as u32).to_be() != 0;
                let rdma_core = cqe_color == color;
                assert_eq!(cqe_is_valid(u32::from_be(stored), ci, depth), rdma_core, "depth {depth} ci {ci}");
                // SAFETY: a pure function.
                assert_eq!(unsafe { rust_gin_ionic_cqe_is_valid(stored, ci, depth) } != 0, rdma_core);
            }
            prod = (prod + 1) % depth;
            color = color != (prod == 0);
        }
    }
}

/// What ionic_comp_msn() and ionic_poll_send() read from a send CQE
/// (ionic_verbs.c:1210-1266; ionic_fw.h:76-79, 98-111): the MSN, the error
/// bit, the status in status_length, the type and the qid.
#[test]
fn send_cqes_match_rdma_core_layout() {
    runner()
        .run(&(any::<u32>(), any::<u64>(), 0u32..=13, 0u32..(1 << 24), 1u32..=3, any::<(bool, bool)>()), |(msn, npg, st, qid, typ, (err, color))| {
            let c = Cqe { msg_msn: msn, npg_wqe_idx_timestamp: npg, status_length: st, qid, typ, error: err };
            let b = c.encode(color as u32);
            let mut r = [0u8; 32];
            put_be(&mut r, fact("offsetof(ionic_v1_cqe.send.msg_msn)"), msn as u64, 4);
            let at = fact("offsetof(ionic_v1_cqe.send.npg_wqe_idx_timestamp)") as usize;
            r[at..at + 8].copy_from_slice(&npg.to_le_bytes());
            put_be(&mut r, fact("offsetof(ionic_v1_cqe.status_length)"), st as u64, 4);
            let qtf = ((qid as u64) << fact("IONIC_V1_CQE_QID_SHIFT"))
                | ((typ as u64 & fact("IONIC_V1_CQE_TYPE_MASK")) << fact("IONIC_V1_CQE_TYPE_SHIFT"))
                | if err { fact("IONIC_V1_CQE_ERROR") } else { 0 }
                | if color { fact("IONIC_V1_CQE_COLOR") } else { 0 };
            put_be(&mut r, fact("offsetof(ionic_v1_cqe.qid_type_flags)"), qtf, 4);
            prop_assert_eq!(b, r);
            prop_assert_eq!(Cqe::parse(&r), c);
            Ok(())
        })
        .unwrap();
}
