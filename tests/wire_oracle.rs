//! The mlx5 wire formats against rdma-core itself.
//!
//! Three descriptions of the same bytes are compared with rdma-core's
//! `infiniband/mlx5dv.h`:
//! - the C++ header the device code uses (device/include/rust_gin/mlx5/wire.h),
//!   through the table device/src/host_only/wire_layout.cpp exports;
//! - the Rust twin (host/mlx5/wire.rs);
//! - the device code's WQE builder itself (its x86-64 build, `device::build_wqe`).
//!
//! The oracle is rdma-core, never a copy of our own assumptions:
//! - sizes, offsets and constants come from build/mlx5dv_oracle.c, a table the
//!   C compiler fills from mlx5dv.h (`sys::oracle`), and from bindgen's reading
//!   of the same header (`sys::mlx5dv`);
//! - whole WQEs are built with rdma-core's own inline setters
//!   (`mlx5dv_set_ctrl_seg`, `mlx5dv_set_data_seg`, through bindgen's wrappers)
//!   and, for the segments rdma-core has no public setter for, by filling the
//!   bindgen structs exactly as rdma-core's providers/mlx5/qp.c does;
//! - CQEs are read back with rdma-core's getters (`mlx5dv_get_cqe_*`) and its
//!   `struct mlx5_cqe64` / `struct mlx5_err_cqe`.
//!
//! Four values have no counterpart in mlx5dv.h (`OUTSIDE_MLX5DV` below); they
//! are checked against the rdma-core source lines cited there, and the list is
//! closed: a new constant in wire.h or wire.rs without an oracle fact fails
//! `every_constant_is_checked`.

use std::collections::BTreeMap;
use std::ffi::c_char;
use std::mem::{offset_of, size_of};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use rccl_rust_gin::abi::{
    rust_gin_mlx5_request, RUST_GIN_REQ_FENCE, RUST_GIN_REQ_INLINE, RUST_GIN_REQ_SIGNALED, RUST_GIN_REQ_SMALL_FENCE,
    RUST_GIN_REQ_SOLICITED,
};
use rccl_rust_gin::device;
use rccl_rust_gin::mlx5::wire::*;
use rccl_rust_gin::sys::mlx5dv as dv;
use rccl_rust_gin::sys::oracle::{mlx5dv_fact, mlx5dv_facts};

#[macro_use]
#[path = "support/wire_facts.rs"]
#[allow(dead_code)]
mod wire_facts;
use wire_facts::*;

// ---------------------------------------------------------------------------
// The three tables
// ---------------------------------------------------------------------------

#[repr(C)]
struct CxxExtra {
    ours: *const c_char,
    value: u64,
    source: *const c_char,
}

extern "C" {
    // device/src/host_only/wire_layout.cpp
    static rust_gin_wire_facts: [CxxFact; 0];
    static rust_gin_wire_facts_len: usize;
    static rust_gin_wire_extras: [CxxExtra; 0];
    static rust_gin_wire_extras_len: usize;
    fn rust_gin_wire_cqe_is_sw_owned(op_own: u8, ci: u32, log_cnt: u32) -> i32;
    fn rust_gin_wire_cqe_opcode(op_own: u8) -> u8;
    fn rust_gin_wire_cqe_owner(op_own: u8) -> u8;
    fn rust_gin_wire_build_listed_wqe(
        req: *const rust_gin_mlx5_request,
        index: u16,
        qpn: u32,
        cq_update: i32,
        uniform: i32,
        out64: *mut u8,
    ) -> i32;
}

/// The device's RC WQE as the list entry points write it (SendQueue::post_list):
/// with `uniform`, by the writer of a list of this request's shape alone,
/// else by that of a mixed list (ShapePolicy::by_shape); `device::build_wqe`
/// builds as the GIN operations do (select).
fn device_wqe_listed(r: &rust_gin_mlx5_request, index: u16, qpn: u32, cq_update: bool, uniform: bool) -> Option<[u8; 64]> {
    #[repr(C, align(16))]
    struct Out([u8; 64]);
    let mut out = Out([0u8; 64]);
    // SAFETY: one request, a 16-aligned 64-byte output.
    let s = unsafe {
        rust_gin_wire_build_listed_wqe(r, index, qpn, cq_update as i32, uniform as i32, out.0.as_mut_ptr())
    };
    (s == 0).then_some(out.0)
}

/// The C++ header's facts, as wire_layout.cpp exports them.
fn cxx_rows() -> Vec<Row> {
    // SAFETY: an immutable static array of rust_gin_wire_facts_len entries.
    unsafe { cxx_table(rust_gin_wire_facts.as_ptr(), rust_gin_wire_facts_len) }
}

/// The C++ constants mlx5dv.h does not state: (name, value, cited source).
fn cxx_extras() -> Vec<(String, u64, String)> {
    // SAFETY: an immutable static array of rust_gin_wire_extras_len entries.
    unsafe {
        let base = rust_gin_wire_extras.as_ptr();
        (0..rust_gin_wire_extras_len)
            .map(|i| {
                let f = &*base.add(i);
                (cstr(f.ours), f.value, cstr(f.source))
            })
            .collect()
    }
}

/// The Rust twin's facts, each named after the oracle fact it must equal.
/// Field offsets the twin has no constant for are measured from its encoders.
fn rust_rows() -> Vec<Row> {
    const M64: u64 = 0x0102_0304_0506_0708;
    const M32: u32 = 0x0a0b_0c0d;
    let raddr_raddr = measured_offset(&RaddrSeg { raddr: M64, rkey: 0 }.encode(), &M64.to_be_bytes());
    let raddr_rkey = measured_offset(&RaddrSeg { raddr: 0, rkey: M32 }.encode(), &M32.to_be_bytes());
    let raddr_reserved = first_untouched(&RaddrSeg { raddr: !0, rkey: !0 }.encode());
    let data_count = measured_offset(&DataSeg { byte_count: M32, lkey: 0, addr: 0 }.encode(), &M32.to_be_bytes());
    let data_lkey = measured_offset(&DataSeg { byte_count: 0, lkey: M32, addr: 0 }.encode(), &M32.to_be_bytes());
    let data_addr = measured_offset(&DataSeg { byte_count: 0, lkey: 0, addr: M64 }.encode(), &M64.to_be_bytes());
    let atomic_swap = measured_offset(&AtomicSeg { swap_add: M64, compare: 0 }.encode(), &M64.to_be_bytes());
    let atomic_cmp = measured_offset(&AtomicSeg { swap_add: 0, compare: M64 }.encode(), &M64.to_be_bytes());
    let inline_count = measured_offset(&inline_header(0x0b0c0d), &(0x0b0c0d | INLINE_SEG).to_be_bytes());

    vec![
        // sizes
        rust_row!("sizeof(mlx5_wqe_ctrl_seg)", CTRL_SEG_SIZE),
        rust_row!("sizeof(mlx5_wqe_raddr_seg)", RADDR_SEG_SIZE),
        rust_row!("sizeof(mlx5_wqe_data_seg)", DATA_SEG_SIZE),
        rust_row!("sizeof(mlx5_wqe_atomic_seg)", ATOMIC_SEG_SIZE),
        rust_row!("sizeof(mlx5_wqe_inl_data_seg)", INLINE_HDR_SIZE),
        rust_row!("sizeof(mlx5_cqe64)", CQE_SIZE),
        rust_row!("sizeof(mlx5_err_cqe)", CQE_SIZE),
        // A DS is one octoword: exactly one data segment.
        rust_row!("sizeof(mlx5_wqe_data_seg)", SEND_DS_BYTES),
        Row::new(
            "sizeof(mlx5_wqe_raddr_seg)",
            "RaddrSeg::encode().len()",
            RaddrSeg { raddr: 0, rkey: 0 }.encode().len() as u64,
        ),
        Row::new(
            "sizeof(mlx5_wqe_data_seg)",
            "DataSeg::encode().len()",
            DataSeg { byte_count: 0, lkey: 0, addr: 0 }.encode().len() as u64,
        ),
        Row::new(
            "sizeof(mlx5_wqe_atomic_seg)",
            "AtomicSeg::encode().len()",
            AtomicSeg { swap_add: 0, compare: 0 }.encode().len() as u64,
        ),
        Row::new("sizeof(mlx5_wqe_inl_data_seg)", "inline_header().len()", inline_header(0).len() as u64),
        // control segment
        rust_row!("offsetof(mlx5_wqe_ctrl_seg.opmod_idx_opcode)", ctrl_off::OPMOD_IDX_OPCODE),
        rust_row!("offsetof(mlx5_wqe_ctrl_seg.qpn_ds)", ctrl_off::QPN_DS),
        rust_row!("offsetof(mlx5_wqe_ctrl_seg.signature)", ctrl_off::SIGNATURE),
        rust_row!("offsetof(mlx5_wqe_ctrl_seg.dci_stream_channel_id)", ctrl_off::DCI_STREAM_CHANNEL_ID),
        rust_row!("offsetof(mlx5_wqe_ctrl_seg.fm_ce_se)", ctrl_off::FM_CE_SE),
        rust_row!("offsetof(mlx5_wqe_ctrl_seg.imm)", ctrl_off::IMM),
        // other segments, measured from the encoders
        Row::new("offsetof(mlx5_wqe_raddr_seg.raddr)", "RaddrSeg::encode(raddr)", raddr_raddr),
        Row::new("offsetof(mlx5_wqe_raddr_seg.rkey)", "RaddrSeg::encode(rkey)", raddr_rkey),
        Row::new("offsetof(mlx5_wqe_raddr_seg.reserved)", "RaddrSeg::encode(reserved)", raddr_reserved),
        Row::new("offsetof(mlx5_wqe_data_seg.byte_count)", "DataSeg::encode(byte_count)", data_count),
        Row::new("offsetof(mlx5_wqe_data_seg.lkey)", "DataSeg::encode(lkey)", data_lkey),
        Row::new("offsetof(mlx5_wqe_data_seg.addr)", "DataSeg::encode(addr)", data_addr),
        Row::new("offsetof(mlx5_wqe_atomic_seg.swap_add)", "AtomicSeg::encode(swap_add)", atomic_swap),
        Row::new("offsetof(mlx5_wqe_atomic_seg.compare)", "AtomicSeg::encode(compare)", atomic_cmp),
        Row::new("offsetof(mlx5_wqe_inl_data_seg.byte_count)", "inline_header()", inline_count),
        // CQE64 and the error CQE
        rust_row!("offsetof(mlx5_cqe64.srqn_uidx)", cqe_off::SRQN_UIDX),
        rust_row!("offsetof(mlx5_cqe64.imm_inval_pkey)", cqe_off::IMM_INVAL_PKEY),
        rust_row!("offsetof(mlx5_cqe64.byte_cnt)", cqe_off::BYTE_CNT),
        rust_row!("offsetof(mlx5_cqe64.timestamp)", cqe_off::TIMESTAMP),
        rust_row!("offsetof(mlx5_cqe64.sop_drop_qpn)", cqe_off::SOP_DROP_QPN),
        rust_row!("offsetof(mlx5_cqe64.wqe_counter)", cqe_off::WQE_COUNTER),
        rust_row!("offsetof(mlx5_cqe64.signature)", cqe_off::SIGNATURE),
        rust_row!("offsetof(mlx5_cqe64.op_own)", cqe_off::OP_OWN),
        rust_row!("offsetof(mlx5_err_cqe.srqn)", cqe_off::SRQN_UIDX),
        rust_row!("offsetof(mlx5_err_cqe.vendor_err_synd)", cqe_off::VENDOR_ERR_SYND),
        rust_row!("offsetof(mlx5_err_cqe.syndrome)", cqe_off::SYNDROME),
        rust_row!("offsetof(mlx5_err_cqe.s_wqe_opcode_qpn)", cqe_off::SOP_DROP_QPN),
        rust_row!("offsetof(mlx5_err_cqe.wqe_counter)", cqe_off::WQE_COUNTER),
        rust_row!("offsetof(mlx5_err_cqe.signature)", cqe_off::SIGNATURE),
        rust_row!("offsetof(mlx5_err_cqe.op_own)", cqe_off::OP_OWN),
        // the DC datagram segment
        rust_row!("sizeof(mlx5_wqe_datagram_seg)", DATAGRAM_SEG_SIZE),
        rust_row!("sizeof(mlx5_wqe_av)", DATAGRAM_SEG_SIZE),
        Row::new("sizeof(mlx5_wqe_av)", "DatagramSeg::encode().len()", DatagramSeg::default().encode().len() as u64),
        rust_row!("offsetof(mlx5_wqe_av.key.dc_key)", av_off::DC_KEY),
        rust_row!("offsetof(mlx5_wqe_av.dqp_dct)", av_off::DQP_DCT),
        rust_row!("offsetof(mlx5_wqe_av.stat_rate_sl)", av_off::STAT_RATE_SL),
        rust_row!("offsetof(mlx5_wqe_av.fl_mlid)", av_off::FL_MLID),
        rust_row!("offsetof(mlx5_wqe_av.rlid)", av_off::RLID),
        rust_row!("offsetof(mlx5_wqe_av.reserved0)", av_off::RESERVED0),
        rust_row!("offsetof(mlx5_wqe_av.rmac)", av_off::RMAC),
        rust_row!("offsetof(mlx5_wqe_av.tclass)", av_off::TCLASS),
        rust_row!("offsetof(mlx5_wqe_av.hop_limit)", av_off::HOP_LIMIT),
        rust_row!("offsetof(mlx5_wqe_av.grh_gid_fl)", av_off::GRH_GID_FL),
        rust_row!("offsetof(mlx5_wqe_av.rgid)", av_off::RGID),
        rust_row!("MLX5_EXTENDED_UD_AV", EXTENDED_UD_AV),
        // queue constants
        rust_row!("MLX5_SEND_WQE_BB", SEND_WQE_BB),
        rust_row!("MLX5_SEND_WQE_SHIFT", SEND_WQE_SHIFT),
        rust_row!("MLX5_INLINE_SEG", INLINE_SEG),
        rust_row!("MLX5_INVALID_LKEY", INVALID_LKEY),
        rust_row!("MLX5_RCV_DBR", RCV_DBR),
        rust_row!("MLX5_SND_DBR", SND_DBR),
        rust_row!("MLX5_CQE_OWNER_MASK", CQE_OWNER_MASK),
        rust_row!("MLX5_CQ_DOORBELL", CQ_DOORBELL),
        // send opcodes
        rust_row!("MLX5_OPCODE_NOP", opcode::NOP),
        rust_row!("MLX5_OPCODE_RDMA_WRITE", opcode::RDMA_WRITE),
        rust_row!("MLX5_OPCODE_RDMA_WRITE_IMM", opcode::RDMA_WRITE_IMM),
        rust_row!("MLX5_OPCODE_SEND", opcode::SEND),
        rust_row!("MLX5_OPCODE_RDMA_READ", opcode::RDMA_READ),
        rust_row!("MLX5_OPCODE_ATOMIC_CS", opcode::ATOMIC_CS),
        rust_row!("MLX5_OPCODE_ATOMIC_FA", opcode::ATOMIC_FA),
        rust_row!("MLX5_OPCODE_ATOMIC_MASKED_CS", opcode::ATOMIC_MASKED_CS),
        rust_row!("MLX5_OPCODE_ATOMIC_MASKED_FA", opcode::ATOMIC_MASKED_FA),
        // fm_ce_se
        rust_row!("MLX5_WQE_CTRL_CQ_UPDATE", ctrl::CQ_UPDATE),
        rust_row!("MLX5_WQE_CTRL_SOLICITED", ctrl::SOLICITED),
        rust_row!("MLX5_WQE_CTRL_FENCE", ctrl::FENCE),
        rust_row!("MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE", ctrl::INITIATOR_SMALL_FENCE),
        // CQE opcodes
        rust_row!("MLX5_CQE_REQ", cqe_opcode::REQ),
        rust_row!("MLX5_CQE_RESP_WR_IMM", cqe_opcode::RESP_WR_IMM),
        rust_row!("MLX5_CQE_RESP_SEND", cqe_opcode::RESP_SEND),
        rust_row!("MLX5_CQE_REQ_ERR", cqe_opcode::REQ_ERR),
        rust_row!("MLX5_CQE_RESP_ERR", cqe_opcode::RESP_ERR),
        rust_row!("MLX5_CQE_INVALID", cqe_opcode::INVALID),
        // syndromes
        rust_row!("MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR", syndrome::LOCAL_LENGTH_ERR),
        rust_row!("MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR", syndrome::LOCAL_QP_OP_ERR),
        rust_row!("MLX5_CQE_SYNDROME_LOCAL_PROT_ERR", syndrome::LOCAL_PROT_ERR),
        rust_row!("MLX5_CQE_SYNDROME_WR_FLUSH_ERR", syndrome::WR_FLUSH_ERR),
        rust_row!("MLX5_CQE_SYNDROME_MW_BIND_ERR", syndrome::MW_BIND_ERR),
        rust_row!("MLX5_CQE_SYNDROME_BAD_RESP_ERR", syndrome::BAD_RESP_ERR),
        rust_row!("MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR", syndrome::LOCAL_ACCESS_ERR),
        rust_row!("MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR", syndrome::REMOTE_INVAL_REQ_ERR),
        rust_row!("MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR", syndrome::REMOTE_ACCESS_ERR),
        rust_row!("MLX5_CQE_SYNDROME_REMOTE_OP_ERR", syndrome::REMOTE_OP_ERR),
        rust_row!("MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR", syndrome::TRANSPORT_RETRY_EXC_ERR),
        rust_row!("MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR", syndrome::RNR_RETRY_EXC_ERR),
        rust_row!("MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR", syndrome::REMOTE_ABORTED_ERR),
    ]
}

/// The flush-after-READ WQE's opcode: rdma-core's mlx5dv.h does not define it.
const DUMP_OPCODE: u64 = 0x23;
const DUMP_SOURCE: &str = "Linux include/linux/mlx5/qp.h: MLX5_OPCODE_DUMP = 0x23 (also NCCL's DOCA GPUNetIO \
     copy: DOCA_GPUNETIO_IB_MLX5_OPCODE_DUMP, written by doca_gpu_dev_verbs_wqe_prepare_dump as ctrl + one data segment)";

/// Values mlx5dv.h does not state, with the rdma-core source that does. The
/// test holds these values; C++ and Rust must both equal them. Closed list:
/// a new entry needs a citation here.
const OUTSIDE_MLX5DV: &[(&str, u64, &str)] = &[
    ("MAX_DS", 0x3f, "rdma-core providers/mlx5/qp.c reads the DS field as be32toh(ctrl->qpn_ds) & 0x3F"),
    ("UAR_DB_OFFSET", 0x800, "rdma-core providers/mlx5/mlx5.h: MLX5_BF_OFFSET = 0x800"),
    ("opcode::DUMP", DUMP_OPCODE, DUMP_SOURCE),
    ("OP_DUMP", DUMP_OPCODE, DUMP_SOURCE),
    ("ctrl::CE_MASK", 3 << 2, "fm_ce_se bits 3:2 (CE); MLX5_WQE_CTRL_CQ_UPDATE = 2 << 2 is one of its values"),
    (
        "ctrl::FM_MASK",
        7 << 5,
        "fm_ce_se bits 7:5 (FM); MLX5_WQE_CTRL_FENCE = 4 << 5 and INITIATOR_SMALL_FENCE = 1 << 5 are two of its values",
    ),
];

/// The Rust values of [`OUTSIDE_MLX5DV`], by name.
fn rust_outside() -> Vec<(&'static str, u64)> {
    vec![
        ("MAX_DS", MAX_DS as u64),
        ("UAR_DB_OFFSET", UAR_DB_OFFSET as u64),
        ("opcode::DUMP", opcode::DUMP as u64),
        ("ctrl::CE_MASK", ctrl::CE_MASK as u64),
        ("ctrl::FM_MASK", ctrl::FM_MASK as u64),
    ]
}

/// Rust constants derived from several oracle facts: (name, ours, expected).
fn rust_derived() -> Vec<(&'static str, u64, u64)> {
    vec![(
        "CQE_INIT_OP_OWN",
        CQE_INIT_OP_OWN as u64,
        (mlx5dv_fact("MLX5_CQE_INVALID") << 4) | mlx5dv_fact("MLX5_CQE_OWNER_MASK"),
    )]
}

// ---------------------------------------------------------------------------
// Sizes, offsets, constants
// ---------------------------------------------------------------------------

#[test]
fn oracle_table_is_well_formed() {
    let facts = mlx5dv_facts();
    assert!(facts.len() > 50, "the oracle table looks truncated: {} facts", facts.len());
    let mut seen = BTreeMap::new();
    for (n, v) in &facts {
        assert!(seen.insert(n.clone(), *v).is_none(), "oracle fact {n} appears twice");
    }
}

#[test]
fn cxx_header_agrees_with_rdma_core() {
    assert_no_problems(compare(&mlx5dv_facts(), &cxx_rows(), "wire.h"));
}

#[test]
fn rust_twin_agrees_with_rdma_core() {
    assert_no_problems(compare(&mlx5dv_facts(), &rust_rows(), "wire.rs"));
    for (name, ours, expected) in rust_derived() {
        assert_eq!(ours, expected, "wire.rs {name} disagrees with the value rdma-core's facts give");
    }
}

#[test]
fn constants_outside_mlx5dv_match_their_rdma_core_sources() {
    let cxx = cxx_extras();
    let rust = rust_outside();
    for (name, value, source) in OUTSIDE_MLX5DV {
        if let Some(r) = rust.iter().find(|(n, _)| n == name) {
            assert_eq!(r.1, *value, "wire.rs {name} = {:#x}, but {source}", r.1);
        }
        if let Some(c) = cxx.iter().find(|(n, _, _)| n == name) {
            assert_eq!(c.1, *value, "wire.h {name} = {:#x}, but {source}", c.1);
        }
        assert!(
            rust.iter().any(|(n, _)| n == name) || cxx.iter().any(|(n, _, _)| n == name),
            "{name} is listed as outside mlx5dv.h but neither side has it"
        );
    }
    for (name, _, _) in &cxx {
        let bare = name.as_str();
        assert!(
            OUTSIDE_MLX5DV.iter().any(|(n, _, _)| *n == bare),
            "wire_layout.cpp lists {name} as outside mlx5dv.h, but the test has no rdma-core source for it"
        );
    }
    // The masks contain the rdma-core values of their fields and nothing else.
    let ce = ctrl::CE_MASK as u64;
    let fm = ctrl::FM_MASK as u64;
    assert_eq!(ce & fm, 0, "CE and FM fields overlap");
    assert_eq!(mlx5dv_fact("MLX5_WQE_CTRL_CQ_UPDATE") & !ce, 0);
    assert_eq!(mlx5dv_fact("MLX5_WQE_CTRL_FENCE") & !fm, 0);
    assert_eq!(mlx5dv_fact("MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE") & !fm, 0);
    assert_eq!(mlx5dv_fact("MLX5_WQE_CTRL_SOLICITED") & (ce | fm), 0);
}

#[test]
fn every_constant_is_checked() {
    let root = env!("CARGO_MANIFEST_DIR");
    let wire_h = std::fs::read_to_string(format!("{root}/device/include/rust_gin/mlx5/wire.h")).unwrap();
    let wire_rs = std::fs::read_to_string(format!("{root}/host/mlx5/wire.rs")).unwrap();

    let cxx = cxx_rows();
    let cxx_extra = cxx_extras();
    let enumerators = cxx_enumerators(&wire_h);
    assert!(enumerators.len() > 40, "parsed only {} enumerators from wire.h", enumerators.len());
    let mut unchecked: Vec<String> = enumerators
        .iter()
        .filter(|e| !cxx.iter().any(|r| &r.ours == *e) && !cxx_extra.iter().any(|(n, _, _)| n == *e))
        .map(|e| format!("wire.h {e}"))
        .collect();

    let rust = rust_rows();
    let consts = rust_consts(&wire_rs);
    assert!(consts.len() > 40, "parsed only {} constants from wire.rs", consts.len());
    let derived = rust_derived();
    unchecked.extend(
        consts
            .iter()
            .filter(|c| {
                !rust.iter().any(|r| &r.ours == *c)
                    && !OUTSIDE_MLX5DV.iter().any(|(n, _, _)| n == c)
                    && !derived.iter().any(|(n, _, _)| n == c)
            })
            .map(|c| format!("wire.rs {c}")),
    );
    assert!(
        unchecked.is_empty(),
        "constants compared with nothing in rdma-core (add a row to wire_layout.cpp / rust_rows, \
         or a cited entry to OUTSIDE_MLX5DV):\n  {}",
        unchecked.join("\n  ")
    );

    // And the C++ and Rust sides agree on the values outside mlx5dv.h too.
    for (name, value, _) in &cxx_extra {
        if let Some((_, r)) = rust_outside().iter().find(|(n, _)| n == name) {
            assert_eq!(value, r, "{name}: wire.h and wire.rs disagree");
        }
    }
}

/// The comparison reports what it must: a perturbed fact, a missing fact, an
/// unchecked fact. Without this, an empty problem list proves nothing.
#[test]
fn comparison_reports_perturbed_missing_and_unchecked_facts() {
    let oracle = mlx5dv_facts();
    let victims = ["offsetof(mlx5_cqe64.wqe_counter)", "MLX5_OPCODE_RDMA_WRITE", "sizeof(mlx5_wqe_ctrl_seg)"];
    for (side, ours) in [("wire.h", cxx_rows()), ("wire.rs", rust_rows())] {
        assert_comparison_catches(&oracle, &ours, side, &victims, "MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR");
    }

    // The coverage scan sees a new constant.
    let src = "enum : uint32_t {\n  A = 1,\n  B = 2,  // two\n};\nenum X : uint8_t { C = 3, D };\n";
    assert_eq!(cxx_enumerators(src), ["A", "B", "C", "D"]);
    let src = "pub const A: u8 = 1;\npub mod m {\n    pub const B: u8 = 2;\n}\npub const C: u8 = 3;\n";
    assert_eq!(rust_consts(src), ["A", "m::B", "C"]);
}

/// bindgen's reading of mlx5dv.h (the structs the provider and these tests
/// use) agrees with the C compiler's.
#[test]
fn bindgen_layouts_agree_with_rdma_core() {
    let facts: Vec<(&str, usize)> = vec![
        ("sizeof(mlx5_wqe_ctrl_seg)", size_of::<dv::mlx5_wqe_ctrl_seg>()),
        ("sizeof(mlx5_wqe_raddr_seg)", size_of::<dv::mlx5_wqe_raddr_seg>()),
        ("sizeof(mlx5_wqe_data_seg)", size_of::<dv::mlx5_wqe_data_seg>()),
        ("sizeof(mlx5_wqe_atomic_seg)", size_of::<dv::mlx5_wqe_atomic_seg>()),
        ("sizeof(mlx5_wqe_inl_data_seg)", size_of::<dv::mlx5_wqe_inl_data_seg>()),
        ("sizeof(mlx5_cqe64)", size_of::<dv::mlx5_cqe64>()),
        ("sizeof(mlx5_err_cqe)", size_of::<dv::mlx5_err_cqe>()),
        ("offsetof(mlx5_wqe_raddr_seg.raddr)", offset_of!(dv::mlx5_wqe_raddr_seg, raddr)),
        ("offsetof(mlx5_wqe_raddr_seg.rkey)", offset_of!(dv::mlx5_wqe_raddr_seg, rkey)),
        ("offsetof(mlx5_wqe_raddr_seg.reserved)", offset_of!(dv::mlx5_wqe_raddr_seg, reserved)),
        ("offsetof(mlx5_wqe_data_seg.byte_count)", offset_of!(dv::mlx5_wqe_data_seg, byte_count)),
        ("offsetof(mlx5_wqe_data_seg.lkey)", offset_of!(dv::mlx5_wqe_data_seg, lkey)),
        ("offsetof(mlx5_wqe_data_seg.addr)", offset_of!(dv::mlx5_wqe_data_seg, addr)),
        ("offsetof(mlx5_wqe_atomic_seg.swap_add)", offset_of!(dv::mlx5_wqe_atomic_seg, swap_add)),
        ("offsetof(mlx5_wqe_atomic_seg.compare)", offset_of!(dv::mlx5_wqe_atomic_seg, compare)),
        ("offsetof(mlx5_wqe_inl_data_seg.byte_count)", offset_of!(dv::mlx5_wqe_inl_data_seg, byte_count)),
        ("offsetof(mlx5_cqe64.srqn_uidx)", offset_of!(dv::mlx5_cqe64, srqn_uidx)),
        ("offsetof(mlx5_cqe64.imm_inval_pkey)", offset_of!(dv::mlx5_cqe64, imm_inval_pkey)),
        ("offsetof(mlx5_cqe64.byte_cnt)", offset_of!(dv::mlx5_cqe64, byte_cnt)),
        ("offsetof(mlx5_cqe64.timestamp)", offset_of!(dv::mlx5_cqe64, timestamp)),
        ("offsetof(mlx5_cqe64.sop_drop_qpn)", offset_of!(dv::mlx5_cqe64, sop_drop_qpn)),
        ("offsetof(mlx5_cqe64.wqe_counter)", offset_of!(dv::mlx5_cqe64, wqe_counter)),
        ("offsetof(mlx5_cqe64.signature)", offset_of!(dv::mlx5_cqe64, signature)),
        ("offsetof(mlx5_cqe64.op_own)", offset_of!(dv::mlx5_cqe64, op_own)),
        ("offsetof(mlx5_err_cqe.srqn)", offset_of!(dv::mlx5_err_cqe, srqn)),
        ("offsetof(mlx5_err_cqe.vendor_err_synd)", offset_of!(dv::mlx5_err_cqe, vendor_err_synd)),
        ("offsetof(mlx5_err_cqe.syndrome)", offset_of!(dv::mlx5_err_cqe, syndrome)),
        ("offsetof(mlx5_err_cqe.s_wqe_opcode_qpn)", offset_of!(dv::mlx5_err_cqe, s_wqe_opcode_qpn)),
        ("offsetof(mlx5_err_cqe.wqe_counter)", offset_of!(dv::mlx5_err_cqe, wqe_counter)),
        ("offsetof(mlx5_err_cqe.signature)", offset_of!(dv::mlx5_err_cqe, signature)),
        ("offsetof(mlx5_err_cqe.op_own)", offset_of!(dv::mlx5_err_cqe, op_own)),
        ("sizeof(mlx5_wqe_datagram_seg)", size_of::<dv::mlx5_wqe_datagram_seg>()),
        ("sizeof(mlx5_wqe_av)", size_of::<dv::mlx5_wqe_av>()),
        ("offsetof(mlx5_wqe_av.key.dc_key)", offset_of!(dv::mlx5_wqe_av, key)),
        ("offsetof(mlx5_wqe_av.dqp_dct)", offset_of!(dv::mlx5_wqe_av, dqp_dct)),
        ("offsetof(mlx5_wqe_av.stat_rate_sl)", offset_of!(dv::mlx5_wqe_av, stat_rate_sl)),
        ("offsetof(mlx5_wqe_av.fl_mlid)", offset_of!(dv::mlx5_wqe_av, fl_mlid)),
        ("offsetof(mlx5_wqe_av.rlid)", offset_of!(dv::mlx5_wqe_av, rlid)),
        ("offsetof(mlx5_wqe_av.reserved0)", offset_of!(dv::mlx5_wqe_av, reserved0)),
        ("offsetof(mlx5_wqe_av.rmac)", offset_of!(dv::mlx5_wqe_av, rmac)),
        ("offsetof(mlx5_wqe_av.tclass)", offset_of!(dv::mlx5_wqe_av, tclass)),
        ("offsetof(mlx5_wqe_av.hop_limit)", offset_of!(dv::mlx5_wqe_av, hop_limit)),
        ("offsetof(mlx5_wqe_av.grh_gid_fl)", offset_of!(dv::mlx5_wqe_av, grh_gid_fl)),
        ("offsetof(mlx5_wqe_av.rgid)", offset_of!(dv::mlx5_wqe_av, rgid)),
    ];
    let oracle = mlx5dv_facts();
    for (name, v) in &facts {
        assert_eq!(mlx5dv_fact(name), *v as u64, "bindgen's {name} disagrees with the C compiler's");
    }
    // Every layout fact is covered, except the control segment's fields:
    // bindgen keeps that packed-and-aligned struct opaque (build/bindings.rs).
    for (name, _) in &oracle {
        if name.starts_with("sizeof(")
            || (name.starts_with("offsetof(") && !name.starts_with("offsetof(mlx5_wqe_ctrl_seg."))
        {
            assert!(facts.iter().any(|(n, _)| n == name), "no bindgen check for {name}");
        }
    }
    // bindgen's constants are rdma-core's too (they feed the WQE oracle below).
    let consts: &[(&str, u64)] = &[
        ("MLX5_OPCODE_NOP", dv::MLX5_OPCODE_NOP as u64),
        ("MLX5_OPCODE_RDMA_WRITE", dv::MLX5_OPCODE_RDMA_WRITE as u64),
        ("MLX5_OPCODE_RDMA_WRITE_IMM", dv::MLX5_OPCODE_RDMA_WRITE_IMM as u64),
        ("MLX5_OPCODE_RDMA_READ", dv::MLX5_OPCODE_RDMA_READ as u64),
        ("MLX5_OPCODE_ATOMIC_CS", dv::MLX5_OPCODE_ATOMIC_CS as u64),
        ("MLX5_OPCODE_ATOMIC_FA", dv::MLX5_OPCODE_ATOMIC_FA as u64),
        ("MLX5_WQE_CTRL_CQ_UPDATE", dv::MLX5_WQE_CTRL_CQ_UPDATE as u64),
        ("MLX5_WQE_CTRL_SOLICITED", dv::MLX5_WQE_CTRL_SOLICITED as u64),
        ("MLX5_WQE_CTRL_FENCE", dv::MLX5_WQE_CTRL_FENCE as u64),
        ("MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE", dv::MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE as u64),
        ("MLX5_INLINE_SEG", dv::MLX5_INLINE_SEG as u64),
        ("MLX5_CQE_INVALID", dv::MLX5_CQE_INVALID as u64),
        ("MLX5_CQE_OWNER_MASK", dv::MLX5_CQE_OWNER_MASK as u64),
    ];
    for (name, v) in consts {
        assert_eq!(mlx5dv_fact(name), *v, "bindgen's {name} disagrees with the C compiler's");
    }
}

// ---------------------------------------------------------------------------
// Whole WQEs, byte for byte
// ---------------------------------------------------------------------------

/// One WQEBB, aligned as a send queue's are.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Wqebb([u8; 64]);

#[derive(Clone, Copy, Debug)]
struct Case {
    req: rust_gin_mlx5_request,
    index: u16,
    qpn: u32,
    cq_update: bool,
}

const FLAG_SIGNALED: u8 = RUST_GIN_REQ_SIGNALED as u8;
const FLAG_FENCE: u8 = RUST_GIN_REQ_FENCE as u8;
const FLAG_SMALL_FENCE: u8 = RUST_GIN_REQ_SMALL_FENCE as u8;
const FLAG_INLINE: u8 = RUST_GIN_REQ_INLINE as u8;
const FLAG_SOLICITED: u8 = RUST_GIN_REQ_SOLICITED as u8;

fn is_inline(r: &rust_gin_mlx5_request) -> bool {
    r.flags & FLAG_INLINE != 0
}

/// The inline payload: the first `length` bytes of operand0 as it sits in memory.
fn inline_payload(r: &rust_gin_mlx5_request) -> Vec<u8> {
    r.operand0.to_ne_bytes()[..r.length as usize].to_vec()
}

/// rdma-core's providers/mlx5/qp.c, set_raddr_seg():
///   rseg->raddr = htobe64(remote_addr); rseg->rkey = htobe32(rkey); rseg->reserved = 0;
unsafe fn rdma_core_set_raddr_seg(rseg: *mut dv::mlx5_wqe_raddr_seg, remote_addr: u64, rkey: u32) {
    (*rseg).raddr = remote_addr.to_be();
    (*rseg).rkey = rkey.to_be();
    (*rseg).reserved = 0;
}

/// rdma-core's providers/mlx5/qp.c, _set_atomic_seg():
///   CMP_AND_SWP: swap_add = htobe64(swap); compare = htobe64(compare_add);
///   FETCH_AND_ADD: swap_add = htobe64(compare_add);  (compare is left as it is)
/// The verbs names: for fetch-and-add the add value travels in compare_add.
unsafe fn rdma_core_set_atomic_seg(aseg: *mut dv::mlx5_wqe_atomic_seg, cmp_and_swp: bool, swap: u64, compare_add: u64) {
    if cmp_and_swp {
        (*aseg).swap_add = swap.to_be();
        (*aseg).compare = compare_add.to_be();
    } else {
        (*aseg).swap_add = compare_add.to_be();
    }
}

/// rdma-core's providers/mlx5/qp.c, set_data_inl_seg(): the data right after
/// a 4-byte header, then seg->byte_count = htobe32(inl | MLX5_INLINE_SEG);
/// *sz = align(inl + sizeof seg->byte_count, 16) / 16. Returns the DS count.
unsafe fn rdma_core_set_data_inl_seg(seg: *mut u8, data: &[u8]) -> u8 {
    let hdr = seg as *mut dv::mlx5_wqe_inl_data_seg;
    std::ptr::copy_nonoverlapping(data.as_ptr(), seg.add(size_of::<dv::mlx5_wqe_inl_data_seg>()), data.len());
    (*hdr).byte_count = (data.len() as u32 | dv::MLX5_INLINE_SEG).to_be();
    ((data.len() + size_of::<u32>()).div_ceil(16)) as u8
}

/// fm_ce_se as rdma-core's mlx5_post_send() composes it: CQ_UPDATE when
/// signalled, SOLICITED on request, and one fence mode. That a strong fence
/// wins over a small one is our policy (the FM field holds one mode).
fn rdma_core_fm_ce_se(flags: u8, cq_update: bool) -> u8 {
    let mut f = 0u8;
    if cq_update {
        f |= dv::MLX5_WQE_CTRL_CQ_UPDATE as u8;
    }
    if flags & FLAG_FENCE != 0 {
        f |= dv::MLX5_WQE_CTRL_FENCE as u8;
    } else if flags & FLAG_SMALL_FENCE != 0 {
        f |= dv::MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE as u8;
    }
    if flags & FLAG_SOLICITED != 0 {
        f |= dv::MLX5_WQE_CTRL_SOLICITED as u8;
    }
    f
}

/// The WQE rdma-core would write for this request into a zeroed WQEBB, with
/// its own setters for ctrl and data segments.
fn rdma_core_wqe(c: &Case) -> [u8; 64] {
    let r = &c.req;
    let mut bb = Wqebb([0u8; 64]);
    let base = bb.0.as_mut_ptr();
    let op = r.opcode as u32;
    // SAFETY: every segment pointer stays inside the 64-byte, 64-aligned WQEBB.
    unsafe {
        let mut off = size_of::<dv::mlx5_wqe_ctrl_seg>();
        let mut ds = (off / 16) as u8;
        let mut imm = 0u32;
        match op {
            dv::MLX5_OPCODE_NOP => {}
            dv::MLX5_OPCODE_RDMA_WRITE | dv::MLX5_OPCODE_RDMA_WRITE_IMM | dv::MLX5_OPCODE_RDMA_READ => {
                if op == dv::MLX5_OPCODE_RDMA_WRITE_IMM {
                    imm = r.imm; // send_ieth(): wr->imm_data, already big-endian
                }
                rdma_core_set_raddr_seg(base.add(off) as *mut _, r.raddr, r.rkey);
                off += size_of::<dv::mlx5_wqe_raddr_seg>();
                ds += (size_of::<dv::mlx5_wqe_raddr_seg>() / 16) as u8;
                if is_inline(r) {
                    ds += rdma_core_set_data_inl_seg(base.add(off), &inline_payload(r));
                } else {
                    dv::mlx5dv_set_data_seg(base.add(off) as *mut _, r.length, r.lkey, r.laddr as usize);
                    ds += (size_of::<dv::mlx5_wqe_data_seg>() / 16) as u8;
                }
            }
            dv::MLX5_OPCODE_ATOMIC_CS | dv::MLX5_OPCODE_ATOMIC_FA => {
                rdma_core_set_raddr_seg(base.add(off) as *mut _, r.raddr, r.rkey);
                off += size_of::<dv::mlx5_wqe_raddr_seg>();
                let cs = op == dv::MLX5_OPCODE_ATOMIC_CS;
                // ibv_send_wr.wr.atomic: CS {swap, compare_add = compare}, FA {compare_add = add}
                let (swap, compare_add) = if cs { (r.operand0, r.operand1) } else { (0, r.operand0) };
                rdma_core_set_atomic_seg(base.add(off) as *mut _, cs, swap, compare_add);
                off += size_of::<dv::mlx5_wqe_atomic_seg>();
                // set_data_ptr_seg_atomic(): byte_count = MLX5_ATOMIC_SIZE (8)
                dv::mlx5dv_set_data_seg(base.add(off) as *mut _, 8, r.lkey, r.laddr as usize);
                ds += ((size_of::<dv::mlx5_wqe_raddr_seg>()
                    + size_of::<dv::mlx5_wqe_atomic_seg>()
                    + size_of::<dv::mlx5_wqe_data_seg>())
                    / 16) as u8;
            }
            // Not an rdma-core WQE: ctrl + one data segment (DOCA's
            // prepare_dump), composed with rdma-core's segment setters.
            op if op as u64 == DUMP_OPCODE => {
                dv::mlx5dv_set_data_seg(base.add(off) as *mut _, r.length, r.lkey, r.laddr as usize);
                ds += (size_of::<dv::mlx5_wqe_data_seg>() / 16) as u8;
            }
            _ => panic!("no oracle for opcode {op:#x}"),
        }
        dv::mlx5dv_set_ctrl_seg(
            base as *mut dv::mlx5_wqe_ctrl_seg,
            c.index,
            r.opcode,
            0,
            c.qpn,
            rdma_core_fm_ce_se(r.flags, c.cq_update),
            ds,
            0,
            imm,
        );
    }
    bb.0
}

/// The same WQE composed with the Rust twin's encoders and constants.
fn rust_twin_wqe(c: &Case) -> [u8; 64] {
    let r = &c.req;
    let mut w = [0u8; 64];
    let mut fm = if c.cq_update { ctrl::CQ_UPDATE } else { 0 };
    if r.flags & FLAG_FENCE != 0 {
        fm |= ctrl::FENCE;
    } else if r.flags & FLAG_SMALL_FENCE != 0 {
        fm |= ctrl::INITIATOR_SMALL_FENCE;
    }
    if r.flags & FLAG_SOLICITED != 0 {
        fm |= ctrl::SOLICITED;
    }
    let mut off = CTRL_SEG_SIZE;
    let mut imm = 0;
    match r.opcode {
        opcode::NOP => {}
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM | opcode::RDMA_READ => {
            if r.opcode == opcode::RDMA_WRITE_IMM {
                imm = r.imm;
            }
            w[off..off + RADDR_SEG_SIZE].copy_from_slice(&RaddrSeg { raddr: r.raddr, rkey: r.rkey }.encode());
            off += RADDR_SEG_SIZE;
            if is_inline(r) {
                let data = inline_payload(r);
                w[off..off + INLINE_HDR_SIZE].copy_from_slice(&inline_header(r.length));
                w[off + INLINE_HDR_SIZE..off + INLINE_HDR_SIZE + data.len()].copy_from_slice(&data);
                off += (INLINE_HDR_SIZE + data.len()).div_ceil(SEND_DS_BYTES) * SEND_DS_BYTES;
            } else {
                w[off..off + DATA_SEG_SIZE]
                    .copy_from_slice(&DataSeg { byte_count: r.length, lkey: r.lkey, addr: r.laddr }.encode());
                off += DATA_SEG_SIZE;
            }
        }
        opcode::ATOMIC_CS | opcode::ATOMIC_FA => {
            w[off..off + RADDR_SEG_SIZE].copy_from_slice(&RaddrSeg { raddr: r.raddr, rkey: r.rkey }.encode());
            off += RADDR_SEG_SIZE;
            let compare = if r.opcode == opcode::ATOMIC_CS { r.operand1 } else { 0 };
            w[off..off + ATOMIC_SEG_SIZE].copy_from_slice(&AtomicSeg { swap_add: r.operand0, compare }.encode());
            off += ATOMIC_SEG_SIZE;
            w[off..off + DATA_SEG_SIZE]
                .copy_from_slice(&DataSeg { byte_count: 8, lkey: r.lkey, addr: r.laddr }.encode());
            off += DATA_SEG_SIZE;
        }
        opcode::DUMP => {
            w[off..off + DATA_SEG_SIZE]
                .copy_from_slice(&DataSeg { byte_count: r.length, lkey: r.lkey, addr: r.laddr }.encode());
            off += DATA_SEG_SIZE;
        }
        op => panic!("no Rust composition for opcode {op:#x}"),
    }
    let ds = (off / SEND_DS_BYTES) as u8;
    let ctrl_seg =
        CtrlSeg { opmod: 0, wqe_index: c.index, opcode: r.opcode, qpn: c.qpn, ds, signature: 0, fm_ce_se: fm, imm };
    w[..CTRL_SEG_SIZE].copy_from_slice(&ctrl_seg.encode());
    w
}

fn hexdump(w: &[u8; 64], other: &[u8; 64]) -> String {
    let mut s = String::new();
    for row in 0..4 {
        s.push_str(&format!("  @{:02}:", row * 16));
        for i in row * 16..row * 16 + 16 {
            let mark = if w[i] != other[i] { '*' } else { ' ' };
            s.push_str(&format!(" {:02x}{mark}", w[i]));
        }
        s.push('\n');
    }
    s
}

/// Compares the three builds of one case; returns a description of any difference.
fn check_case(c: &Case) -> Result<(), String> {
    let oracle = rdma_core_wqe(c);
    let dev = device::build_wqe(&c.req, c.index, c.qpn, c.cq_update)
        .map_err(|e| format!("the device refused {:?}: {e:?}", c.req))?;
    let by_shape = device_wqe_listed(&c.req, c.index, c.qpn, c.cq_update, false)
        .ok_or_else(|| format!("the by_shape builder refused {:?}", c.req))?;
    let uniform = device_wqe_listed(&c.req, c.index, c.qpn, c.cq_update, true)
        .ok_or_else(|| format!("the uniform list's writer refused {:?}", c.req))?;
    let twin = rust_twin_wqe(c);
    let mut err = String::new();
    if dev != oracle {
        err += &format!(
            "device build_wqe differs from rdma-core (* = differs):\n{}rdma-core:\n{}",
            hexdump(&dev, &oracle),
            hexdump(&oracle, &dev)
        );
    }
    if by_shape != oracle {
        err += &format!(
            "device by_shape builder differs from rdma-core (* = differs):\n{}rdma-core:\n{}",
            hexdump(&by_shape, &oracle),
            hexdump(&oracle, &by_shape)
        );
    }
    if uniform != oracle {
        err += &format!(
            "device writer of a one-shape list differs from rdma-core (* = differs):\n{}rdma-core:\n{}",
            hexdump(&uniform, &oracle),
            hexdump(&oracle, &uniform)
        );
    }
    if twin != oracle {
        err += &format!(
            "Rust twin differs from rdma-core (* = differs):\n{}rdma-core:\n{}",
            hexdump(&twin, &oracle),
            hexdump(&oracle, &twin)
        );
    }
    if err.is_empty() {
        Ok(())
    } else {
        Err(format!("{c:x?}\n{err}"))
    }
}

/// The requests the device code builds: (opcode, inline length or 0).
const SHAPES: &[(u8, u32)] = &[
    (opcode::NOP, 0),
    (opcode::RDMA_WRITE, 0),
    (opcode::RDMA_WRITE_IMM, 0),
    (opcode::RDMA_READ, 0),
    (opcode::ATOMIC_FA, 0),
    (opcode::ATOMIC_CS, 0),
    (opcode::DUMP, 0),
    (opcode::RDMA_WRITE, 1),
    (opcode::RDMA_WRITE, 2),
    (opcode::RDMA_WRITE, 4),
    (opcode::RDMA_WRITE, 8),
    (opcode::RDMA_WRITE_IMM, 1),
    (opcode::RDMA_WRITE_IMM, 2),
    (opcode::RDMA_WRITE_IMM, 4),
    (opcode::RDMA_WRITE_IMM, 8),
];

/// A request with distinctive values in every field, including the fields
/// the opcode does not use (they must not leak into the WQE).
fn request(op: u8, inline_len: u32, flags: u8) -> rust_gin_mlx5_request {
    let mut r = rust_gin_mlx5_request {
        opcode: op,
        flags,
        length: 0x0012_3456,
        lkey: 0x1122_3344,
        rkey: 0x5566_7788,
        laddr: 0x0102_0304_0506_0708,
        raddr: 0xf0e0_d0c0_b0a0_9080,
        operand0: 0xa1a2_a3a4_a5a6_a7a8,
        operand1: 0xb1b2_b3b4_b5b6_b7b8,
        imm: 0xdead_beef,
        ..Default::default()
    };
    if op == opcode::ATOMIC_FA || op == opcode::ATOMIC_CS {
        r.length = 8; // the ABI's one atomic size; the device refuses others
    }
    if inline_len > 0 {
        r.flags |= FLAG_INLINE;
        r.length = inline_len;
        // a value of inline_len bytes, as putValue stores it
        r.operand0 &= u64::MAX >> (64 - 8 * inline_len);
    }
    r
}

#[test]
fn every_wqe_shape_matches_rdma_core_byte_for_byte() {
    let indices = [0u16, 1, 0x7fff, 0x8000, 0xfffe, 0xffff, 0x1_0005u32 as u16];
    let qpns = [0u32, 1, 0x00ab_cdef, 0x0080_0001, 0x00ff_ffff];
    let mut failures = Vec::new();
    let mut n = 0;
    for &(op, inline_len) in SHAPES {
        for flag_bits in 0u8..16 {
            let mut flags = 0;
            for (bit, f) in [FLAG_FENCE, FLAG_SMALL_FENCE, FLAG_SOLICITED, FLAG_SIGNALED].into_iter().enumerate() {
                if flag_bits & (1 << bit) != 0 {
                    flags |= f;
                }
            }
            for cq_update in [false, true] {
                for &index in &indices {
                    for &qpn in &qpns {
                        let c = Case { req: request(op, inline_len, flags), index, qpn, cq_update };
                        n += 1;
                        if let Err(e) = check_case(&c) {
                            failures.push(e);
                        }
                    }
                }
            }
        }
    }
    assert_eq!(n, SHAPES.len() * 16 * 2 * indices.len() * qpns.len());
    assert!(failures.is_empty(), "{} of {n} WQEs differ; first:\n{}", failures.len(), failures[0]);
}

/// The oracle sees every field: change one input and the rdma-core bytes
/// change, so a builder that ignored that input would be caught.
#[test]
fn the_wqe_oracle_depends_on_every_input() {
    let base = Case { req: request(opcode::ATOMIC_CS, 0, 0), index: 7, qpn: 0x1234, cq_update: false };
    let reference = rdma_core_wqe(&base);
    let mut variants: Vec<(&str, Case)> = Vec::new();
    let mut v = base;
    v.index = 8;
    variants.push(("index", v));
    let mut v = base;
    v.qpn = 0x1235;
    variants.push(("qpn", v));
    let mut v = base;
    v.cq_update = true;
    variants.push(("cq_update", v));
    for (name, f) in [("fence", FLAG_FENCE), ("small fence", FLAG_SMALL_FENCE), ("solicited", FLAG_SOLICITED)] {
        let mut v = base;
        v.req.flags |= f;
        variants.push((name, v));
    }
    let mut v = base;
    v.req.opcode = opcode::ATOMIC_FA;
    variants.push(("opcode", v));
    type Tweak = fn(&mut rust_gin_mlx5_request);
    let fields: [(&str, Tweak); 6] = [
        ("lkey", |r| r.lkey ^= 1),
        ("rkey", |r| r.rkey ^= 1),
        ("laddr", |r| r.laddr ^= 1 << 40),
        ("raddr", |r| r.raddr ^= 1 << 40),
        ("operand0", |r| r.operand0 ^= 1),
        ("operand1", |r| r.operand1 ^= 1 << 63),
    ];
    for (name, f) in fields {
        let mut v = base;
        f(&mut v.req);
        variants.push((name, v));
    }
    for (name, v) in variants {
        assert_ne!(rdma_core_wqe(&v), reference, "changing {name} left the rdma-core WQE unchanged");
        check_case(&v).unwrap();
    }
}

/// Inline data of fewer than 8 bytes: rdma-core copies exactly `length`
/// bytes. The NIC reads only those (byte_count); the rest of the octoword is
/// padding. The device code copies all 8 bytes of operand0, so with bytes
/// beyond `length` set, only the padding differs from rdma-core.
#[test]
fn inline_data_beyond_its_length_is_only_padding() {
    for len in [1u32, 2, 4] {
        let mut req = request(opcode::RDMA_WRITE, len, 0);
        req.operand0 = 0xa1a2_a3a4_a5a6_a7a8; // bytes beyond len are not zero
        let c = Case { req, index: 3, qpn: 0x42, cq_update: true };
        let oracle = rdma_core_wqe(&c);
        let dev = device::build_wqe(&c.req, c.index, c.qpn, c.cq_update)
            .expect("a valid inline request");
        let data_end = 32 + 4 + len as usize;
        assert_eq!(dev[..data_end], oracle[..data_end], "len {len}: header or payload differs");
        assert_eq!(dev[48..], oracle[48..], "len {len}: bytes after the inline segment differ");
        assert_eq!(CtrlSeg::parse(&dev[..16]).ds, 3);
    }
}

#[test]
fn random_wqes_match_rdma_core_byte_for_byte() {
    let shape = prop_oneof![
        Just((opcode::RDMA_WRITE, 0u32)),
        Just((opcode::RDMA_WRITE_IMM, 0)),
        Just((opcode::RDMA_READ, 0)),
        Just((opcode::ATOMIC_FA, 0)),
        Just((opcode::ATOMIC_CS, 0)),
        Just((opcode::DUMP, 0)),
        (1u32..=8).prop_map(|len| (opcode::RDMA_WRITE, len)),
        (1u32..=8).prop_map(|len| (opcode::RDMA_WRITE_IMM, len)),
    ];
    let flags = any::<u8>().prop_map(|b| b & (FLAG_FENCE | FLAG_SMALL_FENCE | FLAG_SOLICITED | FLAG_SIGNALED));
    let keys = (any::<u32>(), any::<u32>(), any::<u64>(), any::<u64>());
    let values = (any::<u64>(), any::<u64>(), any::<u32>(), any::<u32>());
    let queue = (any::<u16>(), 0u32..=0x00ff_ffff, any::<bool>());
    let strategy = (shape, flags, keys, values, queue).prop_map(
        |(
            (op, inline_len),
            flags,
            (lkey, rkey, laddr, raddr),
            (operand0, operand1, imm, length),
            (index, qpn, cq_update),
        )| {
            let mut req = rust_gin_mlx5_request {
                opcode: op,
                flags,
                length,
                lkey,
                rkey,
                laddr,
                raddr,
                operand0,
                operand1,
                imm,
                ..Default::default()
            };
            // Lengths the device accepts (refusals: tests/lockstep.rs).
            req.length = if op == opcode::ATOMIC_FA || op == opcode::ATOMIC_CS { 8 } else { 1 + length % 0x8000_0000 };
            if inline_len > 0 {
                req.flags |= FLAG_INLINE;
                req.length = inline_len;
                req.operand0 &= u64::MAX >> (64 - 8 * inline_len);
            }
            Case { req, index, qpn, cq_update }
        },
    );
    let config = Config { cases: 256, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    runner
        .run(&strategy, |c| {
            check_case(&c).map_err(TestCaseError::fail)?;
            Ok(())
        })
        .unwrap();
}

// ---------------------------------------------------------------------------
// CQEs
// ---------------------------------------------------------------------------

/// One CQE, aligned as a CQ's are.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct CqeBuf([u8; 64]);

impl CqeBuf {
    fn cqe64(&mut self) -> *mut dv::mlx5_cqe64 {
        self.0.as_mut_ptr() as *mut dv::mlx5_cqe64
    }
    fn err_cqe(&mut self) -> *mut dv::mlx5_err_cqe {
        self.0.as_mut_ptr() as *mut dv::mlx5_err_cqe
    }
    fn owner(&mut self) -> u8 {
        // SAFETY: a 64-byte, 64-aligned buffer is a struct mlx5_cqe64.
        unsafe { dv::mlx5dv_get_cqe_owner(self.cqe64()) }
    }
    fn opcode(&mut self) -> u8 {
        // SAFETY: as above.
        unsafe { dv::mlx5dv_get_cqe_opcode(self.cqe64()) }
    }
}

fn be16_at(b: &[u8], fact: &str) -> u16 {
    let at = mlx5dv_fact(fact) as usize;
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be32_at(b: &[u8], fact: &str) -> u32 {
    let at = mlx5dv_fact(fact) as usize;
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[test]
fn good_cqe_reads_back_through_rdma_core() {
    for owner in [0u8, 1] {
        for (op, imm) in [(cqe_opcode::REQ, 0u32), (cqe_opcode::RESP_WR_IMM, 0x1234_5678u32.to_be())] {
            let cqe = Cqe {
                opcode: op,
                qpn: 0x00ab_cdef,
                wqe_counter: 0xfffe,
                byte_cnt: 0x0001_0000,
                syndrome: 0,
                vendor_syndrome: 0,
                wqe_opcode: 0,
                imm,
            };
            let mut b = CqeBuf(cqe.encode(owner));
            assert_eq!(b.owner(), owner);
            assert_eq!(
                b.opcode() as u32,
                if op == cqe_opcode::REQ { dv::MLX5_CQE_REQ } else { dv::MLX5_CQE_RESP_WR_IMM }
            );
            // SAFETY: the buffer is a struct mlx5_cqe64.
            unsafe {
                let p = b.cqe64();
                assert_eq!(dv::mlx5dv_get_cqe_se(p), 0);
                assert_eq!(dv::mlx5dv_get_cqe_format(p), 0);
                // rdma-core's cq.c: wc->byte_len = be32toh(cqe->byte_cnt);
                // qpn = be32toh(cqe->sop_drop_qpn) & 0xffffff; wqe_ctr = be16toh(cqe->wqe_counter);
                // wc->imm_data = cqe->imm_inval_pkey (kept in wire order).
                assert_eq!(u32::from_be((*p).byte_cnt), 0x0001_0000);
                assert_eq!(u32::from_be((*p).sop_drop_qpn) & 0xff_ffff, 0x00ab_cdef);
                assert_eq!(u16::from_be((*p).wqe_counter), 0xfffe);
                assert_eq!((*p).imm_inval_pkey, imm);
            }
            assert_eq!(be32_at(&b.0, "offsetof(mlx5_cqe64.byte_cnt)"), 0x0001_0000);
            assert_eq!(be32_at(&b.0, "offsetof(mlx5_cqe64.sop_drop_qpn)"), 0x00ab_cdef);
            assert_eq!(be16_at(&b.0, "offsetof(mlx5_cqe64.wqe_counter)"), 0xfffe);
            let op_own = b.0[mlx5dv_fact("offsetof(mlx5_cqe64.op_own)") as usize];
            assert_eq!(op_own, (op << 4) | owner);
            assert_eq!(Cqe::parse(&b.0), cqe);
            // Nothing else is written.
            let mut written = [false; 64];
            for (fact, len) in [
                ("offsetof(mlx5_cqe64.imm_inval_pkey)", 4),
                ("offsetof(mlx5_cqe64.byte_cnt)", 4),
                ("offsetof(mlx5_cqe64.sop_drop_qpn)", 4),
                ("offsetof(mlx5_cqe64.wqe_counter)", 2),
                ("offsetof(mlx5_cqe64.op_own)", 1),
            ] {
                let at = mlx5dv_fact(fact) as usize;
                written[at..at + len].iter_mut().for_each(|w| *w = true);
            }
            for (i, &byte) in b.0.iter().enumerate() {
                assert!(written[i] || byte == 0, "byte {i} = {byte:#x} written outside the CQE's fields");
            }
        }
    }
}

#[test]
fn error_cqe_reads_back_through_rdma_core() {
    let syndromes = [
        syndrome::LOCAL_LENGTH_ERR,
        syndrome::LOCAL_QP_OP_ERR,
        syndrome::LOCAL_PROT_ERR,
        syndrome::WR_FLUSH_ERR,
        syndrome::MW_BIND_ERR,
        syndrome::BAD_RESP_ERR,
        syndrome::LOCAL_ACCESS_ERR,
        syndrome::REMOTE_INVAL_REQ_ERR,
        syndrome::REMOTE_ACCESS_ERR,
        syndrome::REMOTE_OP_ERR,
        syndrome::TRANSPORT_RETRY_EXC_ERR,
        syndrome::RNR_RETRY_EXC_ERR,
        syndrome::REMOTE_ABORTED_ERR,
    ];
    for (i, &synd) in syndromes.iter().enumerate() {
        for (op, dv_op) in [(cqe_opcode::REQ_ERR, dv::MLX5_CQE_REQ_ERR), (cqe_opcode::RESP_ERR, dv::MLX5_CQE_RESP_ERR)]
        {
            let cqe = Cqe {
                opcode: op,
                qpn: 0x00fe_dcba,
                wqe_counter: 0x0100 + i as u16,
                byte_cnt: 0,
                syndrome: synd,
                vendor_syndrome: 0x88,
                wqe_opcode: opcode::RDMA_WRITE,
                imm: 0,
            };
            let owner = (i & 1) as u8;
            let mut b = CqeBuf(cqe.encode(owner));
            assert_eq!(b.opcode() as u32, dv_op);
            assert_eq!(b.owner(), owner);
            // SAFETY: the buffer is a struct mlx5_err_cqe.
            unsafe {
                // rdma-core's cq.c mlx5_handle_error_cqe(): ecqe->syndrome, ecqe->vendor_err_synd;
                // the failed WQE's opcode is be32toh(s_wqe_opcode_qpn) >> 24.
                let e = b.err_cqe();
                assert_eq!((*e).syndrome, synd);
                assert_eq!((*e).vendor_err_synd, 0x88);
                let word = u32::from_be((*e).s_wqe_opcode_qpn);
                assert_eq!(word >> 24, dv::MLX5_OPCODE_RDMA_WRITE);
                assert_eq!(word & 0xff_ffff, 0x00fe_dcba);
                assert_eq!(u16::from_be((*e).wqe_counter), 0x0100 + i as u16);
            }
            assert_eq!(b.0[mlx5dv_fact("offsetof(mlx5_err_cqe.syndrome)") as usize], synd);
            assert_eq!(b.0[mlx5dv_fact("offsetof(mlx5_err_cqe.vendor_err_synd)") as usize], 0x88);
            assert_eq!(be32_at(&b.0, "offsetof(mlx5_err_cqe.s_wqe_opcode_qpn)"), (0x08 << 24) | 0x00fe_dcba);
            assert_eq!(be16_at(&b.0, "offsetof(mlx5_err_cqe.wqe_counter)"), 0x0100 + i as u16);
            assert_eq!(Cqe::parse(&b.0), cqe);
        }
    }
}

/// rdma-core's cq.c get_sw_cqe(): a CQE at consumer index n of a CQ of ncqe
/// entries is software's iff its opcode is not INVALID and
/// !((op_own & MLX5_CQE_OWNER_MASK) ^ !!(n & ncqe)). Read with rdma-core's getters.
fn rdma_core_sw_owned(b: &mut CqeBuf, n: u32, log_cnt: u32) -> bool {
    let ncqe = 1u32 << log_cnt;
    b.opcode() as u32 != dv::MLX5_CQE_INVALID && (b.owner() as u32 ^ ((n & ncqe) != 0) as u32) == 0
}

fn cxx_sw_owned(op_own: u8, ci: u32, log_cnt: u32) -> bool {
    // SAFETY: a pure function.
    unsafe { rust_gin_wire_cqe_is_sw_owned(op_own, ci, log_cnt) != 0 }
}

#[test]
fn owner_rule_agrees_with_rdma_core_for_every_op_own() {
    for log_cnt in [0u32, 1, 2, 3, 8] {
        let ncqe = 1u32 << log_cnt;
        for op_own in 0..=255u8 {
            let mut b = CqeBuf([0; 64]);
            b.0[cqe_off::OP_OWN] = op_own;
            for ci in (0..4 * ncqe).chain([u32::MAX - 1, u32::MAX]) {
                let expected = rdma_core_sw_owned(&mut b, ci, log_cnt);
                assert_eq!(
                    cqe_is_sw_owned(op_own, ci, log_cnt),
                    expected,
                    "wire.rs: op_own {op_own:#x} ci {ci} log {log_cnt}"
                );
                assert_eq!(
                    cxx_sw_owned(op_own, ci, log_cnt),
                    expected,
                    "wire.h: op_own {op_own:#x} ci {ci} log {log_cnt}"
                );
            }
            // SAFETY: pure functions.
            unsafe {
                assert_eq!(rust_gin_wire_cqe_opcode(op_own), b.opcode());
                assert_eq!(rust_gin_wire_cqe_owner(op_own), b.owner());
            }
        }
    }
}

#[test]
fn owner_rule_on_an_initialised_cq_across_two_wraps() {
    let log_cnt = 2u32;
    let ncqe = 1usize << log_cnt;
    let mut cq = vec![CqeBuf([0; 64]); ncqe];
    for slot in &mut cq {
        slot.0[cqe_off::OP_OWN] = CQE_INIT_OP_OWN;
        // A fresh CQE is INVALID and hardware-owned, as rdma-core reads it.
        assert_eq!(slot.opcode() as u32, dv::MLX5_CQE_INVALID);
        assert_eq!(slot.owner(), 1);
    }
    let owned = |slot: &mut CqeBuf, ci: u32| {
        let op_own = slot.0[cqe_off::OP_OWN];
        let (rust, cxx, rdma) = (
            cqe_is_sw_owned(op_own, ci, log_cnt),
            cxx_sw_owned(op_own, ci, log_cnt),
            rdma_core_sw_owned(slot, ci, log_cnt),
        );
        assert_eq!(rust, rdma, "wire.rs vs rdma-core at ci {ci}, op_own {op_own:#x}");
        assert_eq!(cxx, rdma, "wire.h vs rdma-core at ci {ci}, op_own {op_own:#x}");
        rdma
    };
    // The NIC writes CQEs 0 .. 3*ncqe (three passes: two wraps); the consumer
    // polls each index before and after the NIC wrote it.
    for pi in 0..(3 * ncqe) as u32 {
        let slot = pi as usize % ncqe;
        assert!(!owned(&mut cq[slot], pi), "ci {pi}: the slot reads as new before the NIC wrote it");
        let cqe = Cqe {
            opcode: cqe_opcode::REQ,
            qpn: 0x77,
            wqe_counter: pi as u16,
            byte_cnt: 0,
            syndrome: 0,
            vendor_syndrome: 0,
            wqe_opcode: 0,
            imm: 0,
        };
        cq[slot].0 = cqe.encode(cqe_owner_for(pi, log_cnt));
        assert!(owned(&mut cq[slot], pi), "ci {pi}: the new CQE is not seen");
        // Later consumer indices mapping to the same slot do not see it.
        assert!(!owned(&mut cq[slot], pi + ncqe as u32), "ci {}: a stale CQE reads as new", pi + ncqe as u32);
        // The next slot is still stale or fresh.
        let next = (pi + 1) as usize % ncqe;
        assert!(!owned(&mut cq[next], pi + 1), "ci {}: read as new before it was written", pi + 1);
    }
}

// ---------------------------------------------------------------------------
// The doorbell
// ---------------------------------------------------------------------------

/// The 8-byte doorbell is the first 8 bytes of a control segment (rdma-core
/// rings with mmio_write64_be(uar, *(__be64 *)ctrl)); ours is built for
/// (pi, opcode 0, opmod 0, qpn, ds 0).
fn rdma_core_doorbell_bytes(qpn: u32, pi: u16) -> [u8; 8] {
    let mut bb = Wqebb([0u8; 64]);
    // SAFETY: the first 16 bytes of an aligned WQEBB are a control segment.
    unsafe { dv::mlx5dv_set_ctrl_seg(bb.0.as_mut_ptr() as *mut _, pi, 0, 0, qpn, 0, 0, 0, 0) };
    bb.0[..8].try_into().unwrap()
}

fn check_doorbell(qpn: u32, pi: u16) -> Result<(), String> {
    let v = doorbell_value(qpn, pi);
    // The doorbell is one 64-bit store: its bytes in memory are what the NIC gets.
    if v.to_ne_bytes() != rdma_core_doorbell_bytes(qpn, pi) {
        return Err(format!(
            "doorbell({qpn:#x}, {pi:#x}) = {:02x?}, rdma-core ctrl = {:02x?}",
            v.to_ne_bytes(),
            rdma_core_doorbell_bytes(qpn, pi)
        ));
    }
    if parse_doorbell(v) != (qpn, pi) {
        return Err(format!("parse_doorbell(doorbell({qpn:#x}, {pi:#x})) = {:x?}", parse_doorbell(v)));
    }
    Ok(())
}

#[test]
fn doorbell_is_the_first_8_bytes_of_rdma_cores_ctrl_segment() {
    for qpn in [0u32, 1, 0x00ab_cdef, 0x0080_0000, 0x00ff_ffff] {
        for pi in [0u16, 1, 0x00ff, 0x0100, 0x7fff, 0x8000, 0xfffe, 0xffff] {
            check_doorbell(qpn, pi).unwrap();
        }
    }
    // A different queue or index gives a different doorbell.
    assert_ne!(doorbell_value(0x10, 5), doorbell_value(0x11, 5));
    assert_ne!(doorbell_value(0x10, 5), doorbell_value(0x10, 6));
    let config = Config { cases: 256, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    runner
        .run(&(0u32..=0x00ff_ffff, any::<u16>()), |(qpn, pi)| {
            check_doorbell(qpn, pi).map_err(TestCaseError::fail)?;
            Ok(())
        })
        .unwrap();
}

// ---------------------------------------------------------------------------
// DC: the datagram segment and whole DC WQEs
// ---------------------------------------------------------------------------

extern "C" {
    // device/src/host_only/wire_layout.cpp: mlx5/wqe.h's emit_dc_wqe and
    // wire.h's setters.
    fn rust_gin_wire_build_dc_wqe(
        req: *const rust_gin_mlx5_request,
        ticket: u64,
        qpn: u32,
        cq_update: i32,
        av48: *const u8,
        by_shape: i32,
        out128: *mut u8,
    ) -> i32;
    #[allow(clippy::too_many_arguments)]
    fn rust_gin_wire_set_dgram_seg(
        out48: *mut u8,
        key: u64,
        dqp_dct: u32,
        ext: u8,
        stat_rate_sl: u8,
        fl_mlid: u8,
        rlid: u16,
        rmac: *const u8,
        tclass: u8,
        hop_limit: u8,
        grh_gid_fl: u32,
        rgid: *const u8,
    );
    fn rust_gin_wire_set_dc_addr(out48: *mut u8, ah_av48: *const u8, dctn: u32, dc_key: u64);
}

/// An address handle's AV with a distinct value in every field.
fn sample_av(seed: u64) -> DatagramSeg {
    let b = seed.to_le_bytes();
    DatagramSeg {
        dc_key: 0,
        dqp_dct: 0,
        ext: false,
        stat_rate_sl: b[0] ^ 0x11,
        fl_mlid: b[1] ^ 0x22,
        rlid: 0x3344 ^ seed as u16,
        rmac: [0x02, b[2], b[3], 0x44, 0x55, 0x66],
        tclass: b[4] ^ 0x77,
        hop_limit: 0x40 ^ b[5],
        grh_gid_fl: 0x4000_0000 | (seed as u32 & 0xfffff),
        rgid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]],
    }
}

/// rdma-core's mlx5dv_set_dgram_seg, through bindgen's wrapper.
fn rdma_core_dgram(av: &DatagramSeg) -> [u8; 48] {
    let mut seg = [0u8; 48];
    let mut rmac = av.rmac;
    let mut rgid = av.rgid;
    // SAFETY: a 48-byte buffer is one struct mlx5_wqe_datagram_seg; the
    // setter reads 6 bytes of rmac and 16 of rgid.
    unsafe {
        dv::mlx5dv_set_dgram_seg(
            seg.as_mut_ptr() as *mut dv::mlx5_wqe_datagram_seg,
            av.dc_key,
            av.dqp_dct,
            av.ext as u8,
            av.stat_rate_sl,
            av.fl_mlid,
            av.rlid,
            rmac.as_mut_ptr(),
            av.tclass,
            av.hop_limit,
            av.grh_gid_fl,
            rgid.as_mut_ptr(),
        )
    };
    seg
}

/// rdma-core's providers/mlx5/qp.c, mlx5_send_wr_set_dc_addr(), on bindgen's
/// struct: memcpy(&dseg->av, &mah->av, sizeof(dseg->av));
/// dseg->av.dqp_dct |= htobe32(remote_dctn | MLX5_EXTENDED_UD_AV);
/// dseg->av.key.dc_key = htobe64(remote_dc_key);
/// (rdma-core 691953d8d502f54088f776c5ba2aeed0a5ac945d)
fn rdma_core_set_dc_addr(ah_av: &[u8; 48], dctn: u32, dc_key: u64) -> [u8; 48] {
    let mut out = [0u8; 48];
    // SAFETY: both buffers are one struct mlx5_wqe_av (48 bytes, checked by
    // the size facts); unaligned accesses go through read/write_unaligned.
    unsafe {
        let d = out.as_mut_ptr() as *mut dv::mlx5_wqe_datagram_seg;
        std::ptr::copy_nonoverlapping(ah_av.as_ptr(), std::ptr::addr_of_mut!((*d).av) as *mut u8, size_of::<dv::mlx5_wqe_av>());
        let dq = std::ptr::addr_of_mut!((*d).av.dqp_dct);
        dq.write_unaligned(dq.read_unaligned() | (dctn | dv::MLX5_EXTENDED_UD_AV).to_be());
        (std::ptr::addr_of_mut!((*d).av.key.dc_key) as *mut u64).write_unaligned(dc_key.to_be());
    }
    out
}

#[test]
fn datagram_segment_setters_match_rdma_core() {
    assert_eq!(size_of::<dv::mlx5_wqe_datagram_seg>(), DATAGRAM_SEG_SIZE);
    for seed in [0u64, 1, 0x0123_4567_89ab_cdef, u64::MAX] {
        let mut av = sample_av(seed);
        av.dc_key = seed ^ 0xdc00_0000_0000_00dc;
        av.dqp_dct = (seed as u32) & 0xff_ffff;
        av.ext = seed & 1 == 0;
        let oracle = rdma_core_dgram(&av);
        assert_eq!(av.encode(), oracle, "DatagramSeg::encode vs mlx5dv_set_dgram_seg (seed {seed:#x})");
        assert_eq!(DatagramSeg::parse(&oracle), av, "DatagramSeg::parse of rdma-core's bytes");
        let mut cxx = [0u8; 48];
        // SAFETY: 48-byte output, 6-byte rmac, 16-byte rgid.
        unsafe {
            rust_gin_wire_set_dgram_seg(
                cxx.as_mut_ptr(),
                av.dc_key,
                av.dqp_dct,
                av.ext as u8,
                av.stat_rate_sl,
                av.fl_mlid,
                av.rlid,
                av.rmac.as_ptr(),
                av.tclass,
                av.hop_limit,
                av.grh_gid_fl,
                av.rgid.as_ptr(),
            )
        };
        assert_eq!(cxx, oracle, "wire.h set_dgram_seg vs mlx5dv_set_dgram_seg (seed {seed:#x})");

        // set_dc_addr over an address handle's AV (no DCT, no key yet).
        let ah = rdma_core_dgram(&sample_av(seed));
        for (dctn, key) in [(0x1u32, 0u64), (0xab_cdef, 0x0102_0304_0506_0708), (0xff_ffff, u64::MAX)] {
            let oracle = rdma_core_set_dc_addr(&ah, dctn, key);
            let twin = DatagramSeg::parse(&ah).with_dc_addr(dctn, key).encode();
            assert_eq!(twin, oracle, "DatagramSeg::with_dc_addr vs mlx5_send_wr_set_dc_addr");
            let mut cxx = [0u8; 48];
            // SAFETY: 48-byte buffers.
            unsafe { rust_gin_wire_set_dc_addr(cxx.as_mut_ptr(), ah.as_ptr(), dctn, key) };
            assert_eq!(cxx, oracle, "wire.h set_dc_addr vs mlx5_send_wr_set_dc_addr");
            let back = DatagramSeg::parse(&oracle);
            assert!(back.ext && back.dqp_dct == dctn && back.dc_key == key);
        }
    }
}

/// The DC WQE rdma-core's wr API writes for a request into a zeroed pair of
/// WQEBBs: ctrl, then the datagram segment (mlx5_send_wr_set_dc_addr), then
/// what the RC WQE has after its ctrl (transport_seg_sz =
/// sizeof(struct mlx5_wqe_datagram_seg) in _mlx5_send_wr_rdma /
/// _mlx5_send_wr_atomic), with DS counting all of it. NOP and DUMP are ours
/// (no rdma-core DC form): the RC WQE without a CQE, then a DS-1 NOP with
/// index + 1 that carries the CQE, composed with rdma-core's setters.
fn rdma_core_dc_wqe(r: &rust_gin_mlx5_request, ticket: u64, qpn: u32, cq_update: bool, av: &[u8; 48]) -> [u8; 128] {
    let index = (ticket << 1) as u16;
    let mut out = [0u8; 128];
    if r.opcode == opcode::NOP || r.opcode == opcode::DUMP {
        let first = rdma_core_wqe(&Case { req: *r, index, qpn, cq_update: false });
        out[..64].copy_from_slice(&first);
        let mut bb = Wqebb([0u8; 64]);
        let fm = if cq_update { dv::MLX5_WQE_CTRL_CQ_UPDATE as u8 } else { 0 };
        // SAFETY: one ctrl segment at the start of a 64-byte WQEBB.
        unsafe {
            dv::mlx5dv_set_ctrl_seg(bb.0.as_mut_ptr() as *mut _, index.wrapping_add(1), opcode::NOP, 0, qpn, fm, 1, 0, 0)
        };
        out[64..].copy_from_slice(&bb.0);
        return out;
    }
    // The RC WQE's segments after ctrl move behind the datagram segment.
    let rc = rdma_core_wqe(&Case { req: *r, index, qpn, cq_update });
    let dg = size_of::<dv::mlx5_wqe_datagram_seg>();
    let ctrl = size_of::<dv::mlx5_wqe_ctrl_seg>();
    out[ctrl..ctrl + dg].copy_from_slice(av);
    out[ctrl + dg..ctrl + dg + 64 - ctrl].copy_from_slice(&rc[ctrl..]);
    let rc_ds = rc[7] & 0x3f;
    let mut bb = Wqebb([0u8; 64]);
    // SAFETY: one ctrl segment at the start of a 64-byte WQEBB.
    unsafe {
        dv::mlx5dv_set_ctrl_seg(
            bb.0.as_mut_ptr() as *mut _,
            index,
            r.opcode,
            0,
            qpn,
            rdma_core_fm_ce_se(r.flags, cq_update),
            rc_ds + (dg / 16) as u8,
            0,
            if r.opcode == opcode::RDMA_WRITE_IMM { r.imm } else { 0 },
        )
    };
    out[..ctrl].copy_from_slice(&bb.0[..ctrl]);
    out
}

/// The device's DC WQE, built under both shape policies (mlx5/wqe.h), which
/// must agree byte for byte; the caller compares it with rdma-core.
fn device_dc_wqe(r: &rust_gin_mlx5_request, ticket: u64, qpn: u32, cq_update: bool, av: &[u8; 48]) -> [u8; 128] {
    #[repr(C, align(16))]
    struct Out([u8; 128]);
    let build = |by_shape: i32| {
        let mut out = Out([0u8; 128]);
        // SAFETY: one request, a 48-byte AV, a 16-aligned 128-byte output.
        let s = unsafe {
            rust_gin_wire_build_dc_wqe(r, ticket, qpn, cq_update as i32, av.as_ptr(), by_shape, out.0.as_mut_ptr())
        };
        assert_eq!(s, 0, "the device refused {r:?}");
        out.0
    };
    let (select, by_shape) = (build(0), build(1));
    assert!(select == by_shape, "DC WQE of {r:x?}: select and by_shape builders differ:\n{select:02x?}\n{by_shape:02x?}");
    select
}

#[test]
fn every_dc_wqe_shape_matches_rdma_core_byte_for_byte() {
    let av = rdma_core_set_dc_addr(&rdma_core_dgram(&sample_av(0x5151)), 0x00ab_cdef, 0x1122_3344_5566_7788);
    let mut n = 0;
    for &(op, inline_len) in SHAPES {
        for flags in [0, FLAG_FENCE, FLAG_SMALL_FENCE | FLAG_SOLICITED, FLAG_SIGNALED] {
            for cq_update in [false, true] {
                // Tickets whose WQEBB index wraps the 16-bit counter.
                for ticket in [0u64, 1, 0x7fff, 0x8000, 0xffff, 0x1_2345] {
                    for qpn in [1u32, 0x00ff_ffff] {
                        let r = request(op, inline_len, flags);
                        let oracle = rdma_core_dc_wqe(&r, ticket, qpn, cq_update, &av);
                        let dev = device_dc_wqe(&r, ticket, qpn, cq_update, &av);
                        assert_eq!(
                            dev.to_vec(),
                            oracle.to_vec(),
                            "DC WQE op {op:#x} inline {inline_len} flags {flags:#x} cq {cq_update} ticket {ticket:#x}"
                        );
                        // The NIC sees a WQE that fits its two WQEBBs.
                        let ds = (dev[7] & 0x3f) as usize;
                        assert!(ds * 16 <= 128 && ds >= 1);
                        n += 1;
                    }
                }
            }
        }
    }
    assert_eq!(n, SHAPES.len() * 4 * 2 * 6 * 2);
}

/// The DC oracle is not blind: the AV, the DCT number and the key each
/// reach the bytes, and a device builder that skipped the datagram segment
/// (an RC WQE in the first WQEBB) is told apart.
#[test]
fn the_dc_wqe_oracle_sees_the_address() {
    let ah = rdma_core_dgram(&sample_av(7));
    let r = request(opcode::RDMA_WRITE, 0, 0);
    let base = rdma_core_dc_wqe(&r, 3, 0x99, true, &rdma_core_set_dc_addr(&ah, 0x10, 0x20));
    assert_ne!(base, rdma_core_dc_wqe(&r, 3, 0x99, true, &rdma_core_set_dc_addr(&ah, 0x11, 0x20)), "DCT number");
    assert_ne!(base, rdma_core_dc_wqe(&r, 3, 0x99, true, &rdma_core_set_dc_addr(&ah, 0x10, 0x21)), "DC key");
    assert_ne!(base, rdma_core_dc_wqe(&r, 3, 0x99, true, &rdma_core_set_dc_addr(&rdma_core_dgram(&sample_av(8)), 0x10, 0x20)), "AV");
    let rc = rdma_core_wqe(&Case { req: r, index: 6, qpn: 0x99, cq_update: true });
    assert_ne!(base[..64], rc[..], "a DC WQE is not the RC WQE");
}
