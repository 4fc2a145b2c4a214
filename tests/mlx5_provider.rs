//! The mlx5 (ConnectX, DevX) provider and the HIP allocator, as far as they
//! can be checked without a NIC or a GPU:
//! - every PRM command the provider sends, byte by byte, against offsets
//!   worked out by hand from rdma-core's `providers/mlx5/mlx5_ifc.h`
//!   (linux-rdma/rdma-core 691953d8d502) and, for the CQ context, from NCCL's
//!   `src/transport/net_ib/gdaki/doca-gpunetio/include/host/mlx5_prm.h`
//!   (NVIDIA/nccl 5067397c2676);
//! - the peer address encoding and the checks connect relies on;
//! - access flags, path arithmetic (flow label, UDP port, speed);
//! - the errors this machine gives: no RDMA device, no GPU.
//!
//! Where a NIC or a GPU is present the probe and allocator tests check the
//! working path instead; nothing here skips itself. The loopback test on a
//! real NIC is `#[ignore]`d (ignored is not passing): docs/mlx5-provider.md.

#[path = "support/machine.rs"]
mod machine;

use machine::{kfd_gpus, sysfs_mlx5_devices};
use proptest::prelude::*;
use rccl_rust_gin::config::Config;
use rccl_rust_gin::error::Error;
use rccl_rust_gin::gpu::hip::{self, HipAllocator};
use rccl_rust_gin::gpu::{Allocator, HostMemory, Object, Placement, RingHome};
use rccl_rust_gin::provider::mlx5::addr::{self, GidType, LinkLayer, Mlx5Address};
use rccl_rust_gin::provider::mlx5::mr::verbs_access;
use rccl_rust_gin::provider::mlx5::prm::{self, ads, cqc, dctc, qpc, rmpc, wq, Field};
use rccl_rust_gin::provider::mlx5::{Mlx5Provider, UAR_ALLOC_TYPE_NC, UAR_ALLOC_TYPE_NC_DEDICATED};
use rccl_rust_gin::provider::{self, Access, Provider};

// ---------------------------------------------------------------------------
// The bit-field engine (DEVX_SET semantics)
// ---------------------------------------------------------------------------

#[test]
fn set_numbers_bits_from_the_msb_of_byte_0() {
    // qpc.pm_state: bits 0x13..0x15, i.e. bits 3 and 4 (from the MSB) of byte 2.
    let mut b = [0u8; 4];
    prm::set(&mut b, Field { bit: 0x13, width: 2 }, 3);
    assert_eq!(b, [0, 0, 0x18, 0]);
    // A 24-bit field ending on a dword boundary (qpc.pd at 0x28).
    let mut b = [0u8; 8];
    prm::set(&mut b, Field { bit: 0x28, width: 0x18 }, 0x12_3456);
    assert_eq!(b, [0, 0, 0, 0, 0, 0x12, 0x34, 0x56]);
    // Masked to the width, as DEVX_SET masks.
    let mut b = [0u8; 1];
    prm::set(&mut b, Field { bit: 4, width: 4 }, 0x1f);
    assert_eq!(b, [0x0f]);
}

proptest! {
    #[test]
    fn set_then_get_round_trips_and_leaves_other_bits(
        bit in 0usize..200,
        width in 1usize..=64,
        value: u64,
        fill: u8,
    ) {
        let mut b = [fill; 40];
        let before = b;
        let field = Field { bit, width };
        prm::set(&mut b, field, value);
        let mask = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
        prop_assert_eq!(prm::get(&b, field), value & mask);
        for pos in 0..b.len() * 8 {
            if pos < bit || pos >= bit + width {
                let m = 0x80u8 >> (pos % 8);
                prop_assert_eq!(b[pos / 8] & m, before[pos / 8] & m, "bit {} outside the field changed", pos);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Field offsets, as rdma-core's mlx5_ifc.h declares them
// ---------------------------------------------------------------------------

/// (name, field, bit offset, width) from `struct mlx5_ifc_qpc_bits` in
/// rdma-core providers/mlx5/mlx5_ifc.h; the `reserved_at_<bit>` names there
/// anchor each offset (e.g. `reserved_at_48` follows `log_msg_max`, so
/// mtu[3] + log_msg_max[5] start at 0x40).
const QPC: &[(&str, Field, usize, usize)] = &[
    ("st", qpc::ST, 0x008, 8),
    ("pm_state", qpc::PM_STATE, 0x013, 2),
    ("pd", qpc::PD, 0x028, 0x18),
    ("mtu", qpc::MTU, 0x040, 3),
    ("log_msg_max", qpc::LOG_MSG_MAX, 0x043, 5),
    ("log_sq_size", qpc::LOG_SQ_SIZE, 0x051, 4),
    ("ts_format", qpc::TS_FORMAT, 0x058, 2),
    ("uar_page", qpc::UAR_PAGE, 0x068, 0x18),
    ("log_page_size", qpc::LOG_PAGE_SIZE, 0x0a3, 5),
    ("remote_qpn", qpc::REMOTE_QPN, 0x0a8, 0x18),
    ("log_ack_req_freq", qpc::LOG_ACK_REQ_FREQ, 0x380, 4),
    ("log_sra_max", qpc::LOG_SRA_MAX, 0x388, 3),
    ("retry_count", qpc::RETRY_COUNT, 0x38d, 3),
    ("rnr_retry", qpc::RNR_RETRY, 0x390, 3),
    ("next_send_psn", qpc::NEXT_SEND_PSN, 0x3c8, 0x18),
    ("cqn_snd", qpc::CQN_SND, 0x3e8, 0x18),
    ("log_rra_max", qpc::LOG_RRA_MAX, 0x488, 3),
    ("atomic_mode", qpc::ATOMIC_MODE, 0x48c, 4),
    ("rre", qpc::RRE, 0x490, 1),
    ("rwe", qpc::RWE, 0x491, 1),
    ("rae", qpc::RAE, 0x492, 1),
    ("min_rnr_nak", qpc::MIN_RNR_NAK, 0x4a3, 5),
    ("next_rcv_psn", qpc::NEXT_RCV_PSN, 0x4a8, 0x18),
    ("cqn_rcv", qpc::CQN_RCV, 0x4e8, 0x18),
    ("dbr_addr", qpc::DBR_ADDR, 0x500, 0x40),
    ("rq_type", qpc::RQ_TYPE, 0x565, 3),
    ("cs_req", qpc::CS_REQ, 0x630, 8),
    ("cs_res", qpc::CS_RES, 0x638, 8),
    ("dbr_umem_valid", qpc::DBR_UMEM_VALID, 0x683, 1),
    ("dbr_umem_id", qpc::DBR_UMEM_ID, 0x720, 0x20),
];

/// From `struct mlx5_ifc_ads_bits` (rdma-core mlx5_ifc.h).
const ADS: &[(&str, Field, usize, usize)] = &[
    ("pkey_index", ads::PKEY_INDEX, 0x010, 0x10),
    ("grh", ads::GRH, 0x028, 1),
    ("mlid", ads::MLID, 0x029, 7),
    ("rlid", ads::RLID, 0x030, 0x10),
    ("ack_timeout", ads::ACK_TIMEOUT, 0x040, 5),
    ("src_addr_index", ads::SRC_ADDR_INDEX, 0x048, 8),
    ("stat_rate", ads::STAT_RATE, 0x054, 4),
    ("hop_limit", ads::HOP_LIMIT, 0x058, 8),
    ("tclass", ads::TCLASS, 0x064, 8),
    ("flow_label", ads::FLOW_LABEL, 0x06c, 0x14),
    ("rgid_rip", ads::RGID_RIP, 0x080, 0x80),
    ("dscp", ads::DSCP, 0x10a, 6),
    ("udp_sport", ads::UDP_SPORT, 0x110, 0x10),
    ("eth_prio", ads::ETH_PRIO, 0x121, 3),
    ("sl", ads::SL, 0x124, 4),
    ("vhca_port_num", ads::VHCA_PORT_NUM, 0x128, 8),
    ("rmac_47_32", ads::RMAC_47_32, 0x130, 0x10),
    ("rmac_31_0", ads::RMAC_31_0, 0x140, 0x20),
];

/// From `struct mlx5_ifc_cqc_bits` in NCCL's doca-gpunetio mlx5_prm.h
/// (rdma-core has no CQ context); c_eqn as the kernel's 32-bit
/// c_eqn_or_ext_element (DOCA's 8-bit c_eqn is its low byte, bit 0xb8).
const CQC: &[(&str, Field, usize, usize)] = &[
    ("dbr_umem_valid", cqc::DBR_UMEM_VALID, 0x006, 1),
    ("cqe_sz", cqc::CQE_SZ, 0x008, 3),
    ("cc", cqc::CC, 0x00b, 1),
    ("oi", cqc::OI, 0x00e, 1),
    ("cqe_comp_en", cqc::CQE_COMP_EN, 0x011, 1),
    ("dbr_umem_id", cqc::DBR_UMEM_ID, 0x020, 0x20),
    ("page_offset", cqc::PAGE_OFFSET, 0x054, 6),
    ("log_cq_size", cqc::LOG_CQ_SIZE, 0x063, 5),
    ("uar_page", cqc::UAR_PAGE, 0x068, 0x18),
    ("cq_period", cqc::CQ_PERIOD, 0x084, 0xc),
    ("cq_max_count", cqc::CQ_MAX_COUNT, 0x090, 0x10),
    ("c_eqn_or_ext_element", cqc::C_EQN, 0x0a0, 0x20),
    ("log_page_size", cqc::LOG_PAGE_SIZE, 0x0c3, 5),
    ("dbr_addr", cqc::DBR_ADDR, 0x1c0, 0x40),
];

/// From `struct mlx5_ifc_dctc_bits` in the Linux kernel's
/// include/linux/mlx5/mlx5_ifc.h (rdma-core's has only a stub): the
/// `reserved_at_<bit>` names anchor each row (reserved_at_73[0xd] ends the
/// rre/rwe/rae... run at 0x80, reserved_at_140[0x5] puts mtu at 0x145).
const DCTC: &[(&str, Field, usize, usize)] = &[
    ("state", dctc::STATE, 0x004, 4),
    ("user_index", dctc::USER_INDEX, 0x028, 0x18),
    ("cqn", dctc::CQN, 0x048, 0x18),
    ("atomic_mode", dctc::ATOMIC_MODE, 0x068, 4),
    ("rre", dctc::RRE, 0x06c, 1),
    ("rwe", dctc::RWE, 0x06d, 1),
    ("rae", dctc::RAE, 0x06e, 1),
    ("cs_res", dctc::CS_RES, 0x088, 8),
    ("min_rnr_nak", dctc::MIN_RNR_NAK, 0x093, 5),
    ("srqn_xrqn", dctc::SRQN_XRQN, 0x0a8, 0x18),
    ("pd", dctc::PD, 0x0c8, 0x18),
    ("tclass", dctc::TCLASS, 0x0e0, 8),
    ("flow_label", dctc::FLOW_LABEL, 0x0ec, 0x14),
    ("dc_access_key", dctc::DC_ACCESS_KEY, 0x100, 0x40),
    ("mtu", dctc::MTU, 0x145, 3),
    ("port", dctc::PORT, 0x148, 8),
    ("pkey_index", dctc::PKEY_INDEX, 0x150, 0x10),
    ("my_addr_index", dctc::MY_ADDR_INDEX, 0x168, 8),
    ("hop_limit", dctc::HOP_LIMIT, 0x178, 8),
    ("dc_access_key_violation_count", dctc::DC_ACCESS_KEY_VIOLATION_COUNT, 0x180, 0x20),
    ("eth_prio", dctc::ETH_PRIO, 0x1b5, 3),
    ("dscp", dctc::DSCP, 0x1ba, 6),
];

/// From `struct mlx5_ifc_wq_bits` (Linux mlx5_ifc.h; the umem fields
/// dbr_umem_id, wq_umem_id, wq_umem_offset replaced reserved_at_140[0x80]).
const WQ: &[(&str, Field, usize, usize)] = &[
    ("wq_type", wq::WQ_TYPE, 0x000, 4),
    ("pd", wq::PD, 0x048, 0x18),
    ("dbr_addr", wq::DBR_ADDR, 0x080, 0x40),
    ("log_wq_stride", wq::LOG_WQ_STRIDE, 0x10c, 4),
    ("log_wq_pg_sz", wq::LOG_WQ_PG_SZ, 0x113, 5),
    ("log_wq_sz", wq::LOG_WQ_SZ, 0x11b, 5),
    ("dbr_umem_valid", wq::DBR_UMEM_VALID, 0x120, 1),
    ("wq_umem_valid", wq::WQ_UMEM_VALID, 0x121, 1),
    ("dbr_umem_id", wq::DBR_UMEM_ID, 0x140, 0x20),
    ("wq_umem_id", wq::WQ_UMEM_ID, 0x160, 0x20),
    ("wq_umem_offset", wq::WQ_UMEM_OFFSET, 0x180, 0x40),
];

/// qpc's DCI field, as rocSHMEM vendors the kernel's qpc
/// (projects/rocshmem/src/gda/mlx5/mlx5_ifc_core.hpp: reserved_at_3e0[0x3],
/// log_num_dci_stream_channels[0x5], cqn_snd[0x18]); `rmpc.state` and
/// `cmd_hca_cap.dct` (rdma-core mlx5_ifc.h: reserved_at_219[0x1] before
/// dct[0x1]).
const DC_MISC: &[(&str, Field, usize, usize)] = &[
    ("qpc.log_num_dci_stream_channels", qpc::LOG_NUM_DCI_STREAM_CHANNELS, 0x3e3, 5),
    ("rmpc.state", rmpc::STATE, 0x008, 4),
    ("cmd_hca_cap.dct", prm::query_hca_cap::CAP_DCT, 0x21a, 1),
    ("query_hca_cap_in.op_mod", prm::query_hca_cap::OP_MOD, 0x030, 0x10),
    ("create_dct_out.dctn", prm::create_dct_out::DCTN, 0x048, 0x18),
    ("create_rmp_out.rmpn", prm::create_rmp_out::RMPN, 0x048, 0x18),
];

#[test]
fn dc_field_offsets_are_the_kernels_mlx5_ifc_h() {
    for (table, fields) in [("dctc", DCTC), ("wq", WQ), ("dc", DC_MISC)] {
        for &(name, f, bit, width) in fields {
            assert_eq!((f.bit, f.width), (bit, width), "{table}.{name}");
        }
    }
    // Sizes: dctc 0x200 bits (ece at 0x1e0 is last), wq 0x600, rmpc 0x780
    // (wq at 0x180); create_dct_in 0x400 bits (dct_context_entry at 0x80,
    // then reserved_at_280[0x180]); create_rmp_in 0x880 (ctx at 0x100);
    // query_hca_cap_in 0x80, _out 0x8080 (capability at 0x80).
    assert_eq!((dctc::BITS, wq::BITS, rmpc::BITS, rmpc::WQ), (0x200, 0x600, 0x780, 0x180));
    assert_eq!((prm::create_dct_in::BYTES, prm::create_dct_in::DCT_CONTEXT), (128, 0x80));
    assert_eq!((prm::create_rmp_in::BYTES, prm::create_rmp_in::CTX), (272, 0x100));
    assert_eq!(
        (prm::query_hca_cap::IN_BYTES, prm::query_hca_cap::OUT_BYTES, prm::query_hca_cap::CAPABILITY),
        (16, 4112, 0x80)
    );
    // MLX5_CMD_OP_QUERY_HCA_CAP, _CREATE_DCT, _DRAIN_DCT, _CREATE_RMP;
    // MLX5_QPC_ST_DCI, MLX5_RMPC_STATE_RDY, MLX5_WQ_TYPE_CYCLIC;
    // (MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE | HCA_CAP_OPMOD_GET_CUR).
    assert_eq!(
        [prm::opcode::QUERY_HCA_CAP, prm::opcode::CREATE_DCT, prm::opcode::DRAIN_DCT, prm::opcode::CREATE_RMP],
        [0x100, 0x710, 0x712, 0x90c]
    );
    assert_eq!((qpc::ST_DCI, rmpc::STATE_RDY, wq::WQ_TYPE_CYCLIC, prm::query_hca_cap::OP_MOD_GENERAL_CUR), (5, 1, 1, 1));
}

#[test]
fn create_dci_command() {
    let args = prm::QpArgs {
        pdn: 0x12_3456,
        log_sq_size: 10,
        uar_page: 0x0a_bcde,
        cqn: 0x65_4321,
        wq_umem_id: 0x1122_3344,
        dbr_umem_id: 0x5566_7788,
        dbr_offset: 0,
        counter_set_id: 0,
    };
    let got = prm::create_dci(&args);
    let mut want = prm::create_qp(&args);
    let q = 24; // qpc at bit 0xc0
    want[q + 1] = 0x05; // st = DCI (qpc bits 0x08..0x10)
    // log_num_dci_stream_channels (bits 0x3e3..0x3e8 of qpc) stays 0.
    assert!(got == want, "{}", diff(&got, &want));
    assert_eq!(got[q + 124] & 0x1f, 0, "log_num_dci_stream_channels");
}

#[test]
fn dci_transitions_carry_no_remote() {
    let got = prm::rst2init_dci(0xabc, 1);
    let mut want = [0u8; 272];
    want[0..2].copy_from_slice(&[0x05, 0x02]);
    want[9..12].copy_from_slice(&[0x00, 0x0a, 0xbc]);
    want[24 + 2] = 0x18; // pm_state
    want[24 + 24 + 37] = 0x01; // vhca_port_num; no rre/rwe/rae, no atomic_mode
    assert!(got == want, "{}", diff(&got, &want));

    let got = prm::init2rtr_dci(0xabc, 1, 5, 30);
    let mut want = [0u8; 272];
    want[0..2].copy_from_slice(&[0x05, 0x03]);
    want[9..12].copy_from_slice(&[0x00, 0x0a, 0xbc]);
    want[24 + 8] = 0xbe; // mtu 5, log_msg_max 30
    want[24 + 24 + 37] = 0x01; // vhca_port_num; no remote_qpn, no rgid/rlid
    assert!(got == want, "{}", diff(&got, &want));
}

#[test]
fn create_rmp_command() {
    let got = prm::create_rmp(&prm::RmpArgs {
        pdn: 0x12_3456,
        log_wq_sz: 8,
        wq_umem_id: 0x1122_3344,
        dbr_umem_id: 0x5566_7788,
        dbr_offset: 0x40,
    });
    let mut want = [0u8; 272];
    want[0..2].copy_from_slice(&[0x09, 0x0c]); // CREATE_RMP
    let r = 32; // ctx at bit 0x100
    want[r + 1] = 0x10; // rmpc.state = RDY (bits 0x08..0x0c)
    let w = r + 48; // rmpc.wq at bit 0x180
    want[w] = 0x10; // wq_type = cyclic (top nibble)
    want[w + 9..w + 12].copy_from_slice(&[0x12, 0x34, 0x56]); // pd
    want[w + 23] = 0x40; // dbr_addr (bytes 16..24)
    want[w + 33] = 0x04; // log_wq_stride 4 (bits 0x10c..0x110)
    want[w + 35] = 0x08; // log_wq_sz 8 (bits 0x11b..0x120)
    want[w + 36] = 0xc0; // dbr_umem_valid, wq_umem_valid
    want[w + 40..w + 44].copy_from_slice(&[0x55, 0x66, 0x77, 0x88]); // dbr_umem_id
    want[w + 44..w + 48].copy_from_slice(&[0x11, 0x22, 0x33, 0x44]); // wq_umem_id
    assert!(got == want, "{}", diff(&got, &want));
}

#[test]
fn create_dct_command() {
    let args = prm::DctArgs {
        pdn: 0x12_3456,
        cqn: 0x65_4321,
        srqn: 0x0a_0b0c,
        key: 0x0102_0304_0506_0708,
        port: 1,
        mtu: 5,
        min_rnr_nak: 12,
        roce: Some(prm::DctRoce { my_addr_index: 3, hop_limit: 255, traffic_class: 0x68, v2: true }),
    };
    let got = prm::create_dct(&args);
    let mut want = [0u8; 128];
    want[0..2].copy_from_slice(&[0x07, 0x10]); // CREATE_DCT
    let d = 16; // dct_context_entry at bit 0x80
    want[d + 9..d + 12].copy_from_slice(&[0x65, 0x43, 0x21]); // cqn
    want[d + 13] = 0x1e; // atomic_mode 1 (bits 0x68..0x6c), rre, rwe, rae (0x6c..0x6f)
    want[d + 18] = 0x0c; // min_rnr_nak 12 (bits 0x93..0x98)
    want[d + 21..d + 24].copy_from_slice(&[0x0a, 0x0b, 0x0c]); // srqn_xrqn
    want[d + 25..d + 28].copy_from_slice(&[0x12, 0x34, 0x56]); // pd
    want[d + 28] = 0x68; // tclass
    want[d + 32..d + 40].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]); // dc_access_key
    want[d + 40] = 0x05; // mtu (bits 0x145..0x148)
    want[d + 41] = 0x01; // port
    want[d + 45] = 0x03; // my_addr_index
    want[d + 47] = 0xff; // hop_limit
    want[d + 55] = 0x1a; // dscp = 0x68 >> 2 (bits 0x1ba..0x1c0)
    assert!(got == want, "{}", diff(&got, &want));

    // InfiniBand: no GID index, hop limit, traffic class or DSCP.
    let ib = prm::create_dct(&prm::DctArgs { roce: None, ..args });
    let mut want_ib = want;
    for b in [d + 28, d + 45, d + 47, d + 55] {
        want_ib[b] = 0;
    }
    assert!(ib == want_ib, "{}", diff(&ib, &want_ib));
}

#[test]
fn query_hca_cap_command_and_the_dct_bit() {
    let got = prm::query_hca_cap_general();
    assert_eq!(got, [0x01, 0x00, 0, 0, 0, 0, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 0]);
    let mut out = [0u8; 4112];
    assert!(!prm::hca_cap_dct(&out));
    // capability at bit 0x80 (byte 16), dct at bit 0x21a of it: byte 16 +
    // 0x43 = 83, bit 2 from the MSB.
    out[83] = 0x20;
    assert!(prm::hca_cap_dct(&out));
    out[83] = 0xdf;
    assert!(!prm::hca_cap_dct(&out), "only that bit");
}

#[test]
fn field_offsets_are_mlx5_ifc_h() {
    for (table, fields) in [("qpc", QPC), ("ads", ADS), ("cqc", CQC)] {
        for &(name, f, bit, width) in fields {
            assert_eq!((f.bit, f.width), (bit, width), "{table}.{name}");
        }
    }
    assert_eq!(qpc::BITS, 0x740, "sizeof qpc");
    assert_eq!(cqc::BITS, 0x200, "sizeof cqc");
    assert_eq!(qpc::PRIMARY_ADDRESS_PATH, 0xc0, "qpc.primary_address_path");
    // Command envelopes: all four QP commands and CREATE_CQ are 0x880 bits
    // (272 bytes) without their pas lists; outputs 16 bytes.
    assert_eq!(prm::create_qp_in::BYTES, 272);
    assert_eq!(prm::modify_qp_in::BYTES, 272);
    assert_eq!(prm::create_cq_in::BYTES, 272);
    assert_eq!(prm::create_qp_in::QPC, 0xc0);
    assert_eq!(prm::modify_qp_in::QPC, 0xc0);
    assert_eq!(prm::create_cq_in::CQ_CONTEXT, 0x80);
    assert_eq!((prm::create_qp_in::WQ_UMEM_ID.bit, prm::create_qp_in::WQ_UMEM_VALID.bit), (0x840, 0x860));
    assert_eq!((prm::create_cq_in::CQ_UMEM_ID.bit, prm::create_cq_in::CQ_UMEM_VALID.bit), (0x2c0, 0x2e0));
    assert_eq!(prm::create_cq_in::CQ_UMEM_OFFSET.bit, 0x280);
    assert_eq!((prm::modify_qp_in::QPN.bit, prm::modify_qp_in::OPT_PARAM_MASK.bit), (0x48, 0x80));
    assert_eq!(prm::create_qp_out::QPN.bit, 0x48);
    assert_eq!(prm::create_cq_out::CQN.bit, 0x48);
    // MLX5_CMD_OP_* (mlx5_ifc.h).
    assert_eq!(
        [
            prm::opcode::CREATE_CQ,
            prm::opcode::CREATE_QP,
            prm::opcode::RST2INIT_QP,
            prm::opcode::INIT2RTR_QP,
            prm::opcode::RTR2RTS_QP
        ],
        [0x400, 0x500, 0x502, 0x503, 0x504]
    );
    // MLX5_QPC_ST_RC, MLX5_QPC_PM_STATE_MIGRATED, MLX5_QPC_RQ_TYPE_ZERO_SIZE_RQ
    // (mlx5_ifc.h / DOCA); DOCA_VERBS_QP_ATOMIC_MODE_IB_SPEC (doca_verbs.h).
    assert_eq!((qpc::ST_RC, qpc::PM_STATE_MIGRATED, qpc::RQ_TYPE_ZERO_SIZE_RQ, qpc::ATOMIC_MODE_IB_SPEC), (0, 3, 3, 1));
    // mlx5dv.h: MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED (1U << 31), ..._NC = 0x1.
    assert_eq!((UAR_ALLOC_TYPE_NC_DEDICATED, UAR_ALLOC_TYPE_NC), (1 << 31, 1));
}

// ---------------------------------------------------------------------------
// Whole commands, byte by byte (offsets worked out by hand: a field at bit
// b lies in byte b/8, its MSB at bit b%8 counted from that byte's MSB)
// ---------------------------------------------------------------------------

/// Which bytes differ, for readable failures.
fn diff(got: &[u8], want: &[u8]) -> String {
    got.iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (g, w))| g != w)
        .map(|(i, (g, w))| format!("byte {i}: got {g:#04x} want {w:#04x}"))
        .collect::<Vec<_>>()
        .join("; ")
}

#[test]
fn create_cq_command() {
    let got = prm::create_cq(&prm::CqArgs {
        log_cq_size: 9,
        uar_page: 0x0a_bcde,
        eqn: 0x17,
        cq_umem_id: 0x0102_0304,
        cq_umem_offset: 0,
        dbr_umem_id: 0x0a0b_0c0d,
        dbr_offset: 32,
    });
    let mut want = [0u8; 272];
    want[0..2].copy_from_slice(&[0x04, 0x00]); // opcode CREATE_CQ
    let c = 16; // cq_context at bit 0x80
    want[c] = 0x02; // dbr_umem_valid (bit 6); cqe_sz 0 = 64 bytes; cc, oi = 0
    want[c + 4..c + 8].copy_from_slice(&[0x0a, 0x0b, 0x0c, 0x0d]); // dbr_umem_id
    want[c + 12] = 0x09; // log_cq_size in the low 5 bits of byte 12
    want[c + 13..c + 16].copy_from_slice(&[0x0a, 0xbc, 0xde]); // uar_page
    want[c + 20..c + 24].copy_from_slice(&[0, 0, 0, 0x17]); // c_eqn
    want[c + 63] = 32; // dbr_addr (bytes 56..64)
    want[88..92].copy_from_slice(&[1, 2, 3, 4]); // cq_umem_id
    want[92] = 0x80; // cq_umem_valid
    assert!(got == want, "{}", diff(&got, &want));
}

#[test]
fn create_qp_command() {
    let got = prm::create_qp(&prm::QpArgs {
        pdn: 0x12_3456,
        log_sq_size: 9,
        uar_page: 0x0a_bcde,
        cqn: 0x65_4321,
        wq_umem_id: 0x1122_3344,
        dbr_umem_id: 0x5566_7788,
        dbr_offset: 0x40,
        counter_set_id: 0x21,
    });
    let mut want = [0u8; 272];
    want[0..2].copy_from_slice(&[0x05, 0x00]); // opcode CREATE_QP
    let q = 24; // qpc at bit 0xc0
    want[q + 1] = 0x00; // st = RC
    want[q + 2] = 0x18; // pm_state = MIGRATED
    want[q + 5..q + 8].copy_from_slice(&[0x12, 0x34, 0x56]); // pd
    want[q + 10] = 0x48; // log_sq_size 9 at bits 0x51..0x55
    want[q + 12] = 0x21; // counter_set_id (bits 0x60..0x68)
    want[q + 13..q + 16].copy_from_slice(&[0x0a, 0xbc, 0xde]); // uar_page
    want[q + 125..q + 128].copy_from_slice(&[0x65, 0x43, 0x21]); // cqn_snd
    want[q + 167] = 0x40; // dbr_addr (bytes 160..168)
    want[q + 172] = 0x03; // rq_type = zero-size RQ
    want[q + 208] = 0x10; // dbr_umem_valid (bit 0x683)
    want[q + 228..q + 232].copy_from_slice(&[0x55, 0x66, 0x77, 0x88]); // dbr_umem_id
    want[264..268].copy_from_slice(&[0x11, 0x22, 0x33, 0x44]); // wq_umem_id
    want[268] = 0x80; // wq_umem_valid
    assert!(got == want, "{}", diff(&got, &want));
}

#[test]
fn rst2init_command() {
    let got = prm::rst2init(0xabc, 1);
    let mut want = [0u8; 272];
    want[0..2].copy_from_slice(&[0x05, 0x02]); // RST2INIT_QP
    want[9..12].copy_from_slice(&[0x00, 0x0a, 0xbc]); // qpn
    let q = 24;
    want[q + 2] = 0x18; // pm_state
    want[q + 145] = 0x01; // atomic_mode = IB spec (bits 0x48c..0x490)
    want[q + 146] = 0xe0; // rre, rwe, rae
    want[q + 24 + 37] = 0x01; // primary_address_path.vhca_port_num
    assert!(got == want, "{}", diff(&got, &want));
}

fn rtr_args(path: prm::PathArgs) -> prm::RtrArgs {
    prm::RtrArgs {
        qpn: 0xabc,
        remote_qpn: 0x12_3456,
        port: 1,
        mtu: 5,
        log_msg_max: 30,
        log_rra_max: 4,
        min_rnr_nak: 12,
        next_rcv_psn: 0,
        path,
    }
}

fn rtr_common(want: &mut [u8; 272]) {
    want[0..2].copy_from_slice(&[0x05, 0x03]); // INIT2RTR_QP
    want[9..12].copy_from_slice(&[0x00, 0x0a, 0xbc]); // qpn
    let q = 24;
    want[q + 8] = 0xbe; // mtu 5 (0b101) then log_msg_max 30 (0b11110)
    want[q + 21..q + 24].copy_from_slice(&[0x12, 0x34, 0x56]); // remote_qpn
    want[q + 145] = 0x80; // log_rra_max 4 (0b100) at bits 0x488..0x48b
    want[q + 148] = 0x0c; // min_rnr_nak 12
    want[q + 24 + 37] = 0x01; // vhca_port_num
}

#[test]
fn init2rtr_command_infiniband() {
    let got = prm::init2rtr(&rtr_args(prm::PathArgs::Ib { rlid: 0x0102, sl: 3 }));
    let mut want = [0u8; 272];
    rtr_common(&mut want);
    let p = 24 + 24; // primary_address_path
    want[p + 6..p + 8].copy_from_slice(&[0x01, 0x02]); // rlid; grh 0
    want[p + 36] = 0x03; // sl in the low nibble of byte 36
    assert!(got == want, "{}", diff(&got, &want));
}

#[test]
fn init2rtr_command_roce_v2() {
    let rgid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3];
    let rmac = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
    let got = prm::init2rtr(&rtr_args(prm::PathArgs::Roce {
        rgid,
        sgid_index: 3,
        hop_limit: 255,
        traffic_class: 0x68,
        flow_label: 0xa_bcde,
        rmac,
        udp_sport: Some(0xc123),
        eth_prio: 0,
    }));
    let mut want = [0u8; 272];
    rtr_common(&mut want);
    let p = 24 + 24;
    want[p + 9] = 3; // src_addr_index
    want[p + 11] = 0xff; // hop_limit
    want[p + 12] = 0x06; // tclass 0x68: high nibble at the end of byte 12
    want[p + 13] = 0x8a; // ... low nibble, then flow_label's top 4 bits
    want[p + 14..p + 16].copy_from_slice(&[0xbc, 0xde]); // flow_label
    want[p + 16..p + 32].copy_from_slice(&rgid); // rgid_rip
    want[p + 33] = 0x1a; // dscp = 0x68 >> 2 = 26
    want[p + 34..p + 36].copy_from_slice(&[0xc1, 0x23]); // udp_sport
    want[p + 38..p + 44].copy_from_slice(&rmac); // rmac_47_32, rmac_31_0
    assert!(got == want, "{}", diff(&got, &want));
}

#[test]
fn init2rtr_command_roce_v1_has_no_udp_port_nor_dscp() {
    let cmd = prm::init2rtr(&rtr_args(prm::PathArgs::Roce {
        rgid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
        sgid_index: 0,
        hop_limit: 255,
        traffic_class: 0x68,
        flow_label: 0,
        rmac: [2, 0, 0, 0, 0, 1],
        udp_sport: None,
        eth_prio: 0,
    }));
    let p = prm::modify_qp_in::QPC + qpc::PRIMARY_ADDRESS_PATH;
    assert_eq!(prm::get(&cmd, ads::UDP_SPORT.at(p)), 0);
    assert_eq!(prm::get(&cmd, ads::DSCP.at(p)), 0);
    assert_eq!(prm::get(&cmd, ads::TCLASS.at(p)), 0x68);
}

#[test]
fn rtr2rts_command() {
    let got = prm::rtr2rts(&prm::RtsArgs {
        qpn: 0xabc,
        next_send_psn: 0,
        log_sra_max: 4,
        retry_count: 7,
        rnr_retry: 7,
        ack_timeout: 20,
    });
    let mut want = [0u8; 272];
    want[0..2].copy_from_slice(&[0x05, 0x04]); // RTR2RTS_QP
    want[9..12].copy_from_slice(&[0x00, 0x0a, 0xbc]);
    let q = 24;
    want[q + 113] = 0x87; // log_sra_max 4 (0b100), then retry_count 7 in bits 5..7
    want[q + 114] = 0xe0; // rnr_retry 7
    want[q + 24 + 8] = 0xa0; // ack_timeout 20 (0b10100) in the top 5 bits
    assert!(got == want, "{}", diff(&got, &want));
}

#[test]
fn command_status_and_syndrome() {
    let mut out = [0u8; 16];
    out[0] = 0x03;
    out[4..8].copy_from_slice(&[0x12, 0x34, 0x56, 0x78]);
    out[9..12].copy_from_slice(&[0x00, 0x01, 0x23]);
    assert_eq!(prm::status(&out), (0x03, 0x1234_5678));
    assert_eq!(prm::get(&out, prm::create_qp_out::QPN), 0x123);
}

// ---------------------------------------------------------------------------
// Peer addresses
// ---------------------------------------------------------------------------

fn ib(lid: u16, prefix: u64) -> Mlx5Address {
    let mut gid = [0u8; 16];
    gid[..8].copy_from_slice(&prefix.to_be_bytes());
    gid[8..].copy_from_slice(&0x0011_2233_4455_6677u64.to_be_bytes());
    Mlx5Address { link_layer: LinkLayer::Infiniband, port: 1, mtu: 5, gid_index: 0, gid_type: GidType::Ib, lid, gid }
}

fn roce(gid_type: GidType, last: u8) -> Mlx5Address {
    Mlx5Address {
        link_layer: LinkLayer::Ethernet,
        port: 1,
        mtu: 3,
        gid_index: 3,
        gid_type,
        lid: 0,
        gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, last],
    }
}

#[test]
fn address_round_trips() {
    for a in [ib(0x1234, 0xfe80_0000_0000_0000), roce(GidType::RoceV2, 7), roce(GidType::RoceV1, 9)] {
        let enc = a.encode();
        assert_eq!(enc.len(), provider::NIC_ADDRESS_BYTES);
        assert_eq!(enc[0], addr::ADDRESS_TAG);
        assert_eq!(Mlx5Address::decode(&enc).unwrap(), a);
    }
    let enc = ib(0x1234, 0xfe80_0000_0000_0000).encode();
    assert_eq!(&enc[8..10], &[0x34, 0x12], "LID little-endian at byte 8");
    assert_eq!(enc[2], addr::LINK_LAYER_INFINIBAND);
    assert!(enc[32..].iter().all(|&b| b == 0), "unused bytes are zero");
}

fn message(e: Error) -> String {
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    e.message().to_string()
}

#[test]
fn address_decode_refuses_foreign_or_corrupt_handles() {
    let mut emu = [0u8; provider::NIC_ADDRESS_BYTES];
    emu[0] = 0xe1; // the emulated provider's tag
    assert!(message(Mlx5Address::decode(&emu).unwrap_err()).contains("not from the mlx5 provider"));
    let mut a = roce(GidType::RoceV2, 1).encode();
    a[1] = 99;
    assert!(message(Mlx5Address::decode(&a).unwrap_err()).contains("layout version"));
    let mut a = roce(GidType::RoceV2, 1).encode();
    a[4] = 7;
    assert!(message(Mlx5Address::decode(&a).unwrap_err()).contains("MTU"));
    let mut a = roce(GidType::RoceV2, 1).encode();
    a[2] = 9;
    assert!(message(Mlx5Address::decode(&a).unwrap_err()).contains("link layer"));
}

#[test]
fn check_peer_refuses_other_fabrics_subnets_and_roce_versions() {
    let l = ib(1, 0xfe80_0000_0000_0000);
    addr::check_peer(&l, &ib(2, 0xfe80_0000_0000_0000)).unwrap();
    let m = message(addr::check_peer(&l, &roce(GidType::RoceV2, 1)).unwrap_err());
    assert!(m.contains("InfiniBand") && m.contains("Ethernet") && m.contains("different fabrics"), "{m}");
    let m = message(addr::check_peer(&l, &ib(2, 0xfe80_0000_0000_0001)).unwrap_err());
    assert!(m.contains("another InfiniBand subnet"), "{m}");
    let m = message(addr::check_peer(&l, &ib(0, 0xfe80_0000_0000_0000)).unwrap_err());
    assert!(m.contains("LID 0"), "{m}");
    let r = roce(GidType::RoceV2, 1);
    addr::check_peer(&r, &roce(GidType::RoceV2, 2)).unwrap();
    let m = message(addr::check_peer(&r, &roce(GidType::RoceV1, 2)).unwrap_err());
    assert!(m.contains("RoCE version mismatch"), "{m}");
    let mut zero = roce(GidType::RoceV2, 2);
    zero.gid = [0; 16];
    assert!(message(addr::check_peer(&r, &zero).unwrap_err()).contains("GID is zero"));
    // Different MTUs are fine: the path takes the smaller.
    assert_eq!(addr::path_mtu(&l, &roce(GidType::RoceV2, 1)), 3);
    assert_eq!(addr::mtu_bytes(5), 4096);
    assert_eq!(addr::mtu_bytes(1), 256);
}

#[test]
fn gid_helpers() {
    assert_eq!(GidType::from_sysfs("RoCE v2\n"), Some(GidType::RoceV2));
    assert_eq!(GidType::from_sysfs("IB/RoCE v1\n"), Some(GidType::RoceV1));
    assert_eq!(GidType::from_sysfs("bogus"), None);
    assert!(addr::is_ipv4_mapped(&roce(GidType::RoceV2, 1).gid));
    assert!(!addr::is_ipv4_mapped(&ib(1, 0xfe80_0000_0000_0000).gid));
    assert_eq!(LinkLayer::from_verbs(0), Some(LinkLayer::Infiniband));
    assert_eq!(LinkLayer::from_verbs(2), Some(LinkLayer::Ethernet));
    assert_eq!(LinkLayer::from_verbs(3), None);
}

// ---------------------------------------------------------------------------
// Access flags and path arithmetic
// ---------------------------------------------------------------------------

#[test]
fn access_flags_map_to_verbs() {
    // verbs.h: IBV_ACCESS_LOCAL_WRITE 1, REMOTE_WRITE 2, REMOTE_READ 4,
    // REMOTE_ATOMIC 8. Remote write and atomic imply local write (ibv_reg_mr
    // refuses them without it).
    assert_eq!(verbs_access(Access::empty()), 0);
    assert_eq!(verbs_access(Access::LOCAL_WRITE), 1);
    assert_eq!(verbs_access(Access::REMOTE_READ), 4);
    assert_eq!(verbs_access(Access::REMOTE_WRITE), 2 | 1);
    assert_eq!(verbs_access(Access::REMOTE_ATOMIC), 8 | 1);
    assert_eq!(verbs_access(Access::all()), 15);
    assert_eq!(verbs_access(Access::REMOTE_READ | Access::REMOTE_WRITE), 7);
}

/// The ordering contract of signals (a VA signal's atomic, a slot write)
/// behind their data rests on PCIe keeping the NIC's writes in order: no
/// registration may ask for IBV_ACCESS_RELAXED_ORDERING, under which the
/// data's writes could pass the signal's on their way to GPU memory
/// (docs/architecture.md, "Contract"). Seen failing: with the flag added to
/// REMOTE_WRITE's mapping.
#[test]
fn no_registration_asks_for_relaxed_ordering() {
    let relaxed = rdma_sys::ibv_access_flags::IBV_ACCESS_RELAXED_ORDERING.0 as i32;
    assert_eq!(relaxed, 1 << 20, "verbs.h: IBV_ACCESS_OPTIONAL_FIRST");
    for bits in 0..16u32 {
        let a = Access::from_bits(bits).expect("four access bits");
        let v = verbs_access(a);
        assert_eq!(v & relaxed, 0, "{a:?} asks for relaxed ordering: {v:#x}");
        assert_eq!(v & !0xf, 0, "{a:?} asks for an optional access flag: {v:#x}");
    }
}

#[test]
fn flow_label_and_udp_port_follow_the_kernel() {
    // rdma_calc_flow_label and rdma_flow_label_to_udp_sport
    // (include/rdma/ib_verbs.h), values computed independently in Python.
    assert_eq!(addr::calc_flow_label(0x12, 0x34), 0x3a8);
    assert_eq!(addr::calc_flow_label(0xab_cdef, 0x12_3456), 0xa_c3e3);
    assert_eq!(addr::calc_flow_label(0xff_ffff, 0xff_ffff), 0xf_ff1e);
    assert_eq!(addr::calc_flow_label(7, 9), addr::calc_flow_label(9, 7), "symmetric");
    assert_eq!(addr::flow_label_to_udp_sport(0xa_bcde), 0xfcf4);
    assert_eq!(addr::flow_label_to_udp_sport(0xa_c3e3), 0xc3c8);
    assert_eq!(addr::flow_label_to_udp_sport(0), 0xc000);
}

#[test]
fn speed_follows_nccl_net_ib() {
    // active_speed bits: 0x20 EDR, 0x40 HDR, 0x80 NDR; active_width 2 = 4x.
    assert_eq!(addr::speed_mbps(0x80, 2), 400_000);
    assert_eq!(addr::speed_mbps(0x40, 2), 200_000);
    assert_eq!(addr::speed_mbps(0x20, 1), 25_000);
    assert_eq!(addr::speed_mbps(0x01, 0x10), 5_000, "SDR 2x");
    assert_eq!(addr::speed_mbps(0, 0), 200_000 * 2, "no bit set: the last entries, as NCCL's firstBitSet");
}

// ---------------------------------------------------------------------------
// This machine: no RDMA device, no GPU (or, where present, the real thing)
// ---------------------------------------------------------------------------

#[test]
fn probe_finds_exactly_what_sysfs_lists_or_says_what_is_missing() {
    let devs = sysfs_mlx5_devices();
    eprintln!(
        "THIS MACHINE: mlx5 devices in /sys/class/infiniband: {devs:?}; the probe is checked to {}",
        if devs.is_empty() { "FAIL with what is missing (no NIC)" } else { "WORK" }
    );
    match Mlx5Provider::probe(&Config::default()) {
        Err(Error::System(m)) if devs.is_empty() => {
            assert!(m.contains("no RDMA device") || m.contains("no usable mlx5 device"), "{m}");
            assert!(m.contains("RCCL_RUST_GIN_PROVIDER=emu"), "{m}");
        }
        Err(e) if devs.is_empty() => panic!("expected a system error, got {e:?}"),
        Err(e) => panic!("sysfs lists {devs:?}, yet the probe failed: {e}"),
        Ok(_) if devs.is_empty() => panic!("the probe succeeded on a machine whose sysfs lists no mlx5 device"),
        Ok(p) => {
            assert_eq!(p.names(), devs.as_slice(), "the probe's devices vs sysfs");
            let info = p.info(0).expect("info of device 0");
            assert!(info.name.starts_with("mlx5"), "{info:?}");
            assert!(info.speed_mbps > 0 && info.max_message > 0, "{info:?}");
            assert!(p.info(p.devices()).is_err(), "index out of range");
        }
    }
    // select() with the default configuration picks mlx5: the same outcome.
    match provider::select(&Config::default()) {
        Ok(p) => assert!(!devs.is_empty() && p.devices() == devs.len(), "select found {} device(s)", p.devices()),
        Err(e) => assert!(devs.is_empty() && matches!(e, Error::System(_)), "select: {e:?}"),
    }
}

#[test]
fn probe_with_a_filter_that_matches_nothing_names_the_filter() {
    let config = Config { nic_filter: Some("mlx5_does_not_exist".into()), ..Config::default() };
    let e = Mlx5Provider::probe(&config).err().expect("no device matches the filter");
    let m = e.message().to_string();
    assert!(matches!(e, Error::System(_)), "{e:?}");
    assert!(m.contains("RCCL_RUST_GIN_PROVIDER=emu"), "{m}");
}

#[test]
fn hip_allocator_works_on_a_gpu_and_reports_no_gpu_otherwise() {
    let gpus = kfd_gpus();
    eprintln!(
        "THIS MACHINE: {gpus} GPU(s) in the KFD topology; the HIP allocator is checked to {}",
        if gpus == 0 { "FAIL with what is missing (no GPU)" } else { "WORK" }
    );
    match HipAllocator::new() {
        Err(e) if gpus > 0 => panic!("KFD lists {gpus} GPU(s), yet the HIP allocator failed: {e}"),
        Ok(_) if gpus == 0 => panic!("the HIP allocator works on a machine whose KFD topology lists no GPU"),
        Err(Error::System(m)) => {
            assert_eq!(hip::device_count().unwrap_or(0), 0, "an error although HIP counts GPUs: {m}");
            assert!(m.contains("no GPU") || m.contains("HIP runtime is unusable"), "{m}");
            assert!(m.contains("RCCL_RUST_GIN_PROVIDER=emu"), "{m}");
            if hip::device_count() == Err(hip::HIP_ERROR_NO_DEVICE) {
                assert!(m.contains("100"), "names the HIP error code: {m}");
            }
        }
        Err(e) => panic!("expected a system error, got {e:?}"),
        Ok(a) => {
            // A GPU is present: every placement allocates, zeroed, and copies.
            let one_of_each = [Object::SendRing(RingHome::Host), Object::Handle, Object::Signals, Object::ErrorRecord];
            for object in one_of_each {
                let placement = object.placement();
                let b = a.alloc(4096, 4096, object).expect("alloc");
                assert_eq!(b.dev_addr() % 4096, 0);
                assert_eq!(b.host_addr().is_some(), placement == Placement::HostPinned);
                let mut out = [0xffu8; 64];
                b.read(0, &mut out);
                assert_eq!(out, [0u8; 64], "zeroed");
                b.write(100, b"rust-gin");
                let mut out = [0u8; 8];
                b.read(100, &mut out);
                assert_eq!(&out, b"rust-gin");
            }
        }
    }
}

#[test]
fn hip_error_text_handles_unknown_codes() {
    // Codes hip-sys's enum does not list must not be undefined behaviour.
    assert!(hip::error_text(100).contains("100"));
    assert!(hip::error_text(123_456).contains("123456"));
}

#[test]
fn host_memory_path_is_unchanged() {
    let b = HostMemory.alloc(256, 64, Object::WindowData).unwrap();
    assert!(b.host_addr().is_some());
    b.write(8, &[1, 2, 3]);
    b.try_write(16, &[4]).unwrap();
    let mut out = [0u8; 9];
    b.try_read(8, &mut out).unwrap();
    assert_eq!(out, [1, 2, 3, 0, 0, 0, 0, 0, 4]);
}

// ---------------------------------------------------------------------------
// On real hardware only
// ---------------------------------------------------------------------------

/// A loopback pair of DevX QPs on one port, posted to from the host through
/// the device library's x86-64 build (the producer code a kernel runs):
/// WRITE, fetch-and-add, READ, each checked in memory.
#[test]
#[ignore = "needs an mlx5 NIC: RUST_GIN_HW_TEST=1 cargo test --test mlx5_provider -- --ignored"]
fn hw_loopback_write_atomic_read() {
    use rccl_rust_gin::abi::{rust_gin_mlx5_request, RUST_GIN_REQ_SIGNALED};
    use rccl_rust_gin::mlx5::sq::{new_error_record, SendQueue};
    use rccl_rust_gin::mlx5::wire::opcode;
    use rccl_rust_gin::provider::mlx5::MemoryMode;
    use rccl_rust_gin::provider::Nic;

    assert_eq!(
        std::env::var("RUST_GIN_HW_TEST").as_deref(),
        Ok("1"),
        "this test drives a real ConnectX NIC: set RUST_GIN_HW_TEST=1 on a node that has one"
    );
    let config = Config::from_env().expect("RCCL_RUST_GIN_* knobs");
    let p = Mlx5Provider::probe(&config).expect("probe");
    eprintln!("NIC: {:?}", p.info(0).expect("info"));
    let nic = p.open_mode(0, MemoryMode::Host).expect("open in host mode");
    let me = nic.address();
    nic.check_peer(&me).expect("a port can reach itself");
    let a = nic.create_qp(6, 0, false).expect("QP a");
    let b = nic.create_qp(6, 0, false).expect("QP b");
    a.connect(&me, b.qpn()).expect("connect a -> b");
    b.connect(&me, a.qpn()).expect("connect b -> a");

    let alloc = nic.allocator();
    let src = alloc.alloc(4096, 4096, Object::WindowData).unwrap();
    let dst = alloc.alloc(4096, 4096, Object::WindowData).unwrap();
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    src.write(0, &pattern);
    // SAFETY: both buffers outlive the regions (dropped at the end of the test, after them).
    let (ms, md) = unsafe {
        (
            nic.reg_mr(src.dev_addr(), 4096, Access::all()).expect("reg src"),
            nic.reg_mr(dst.dev_addr(), 4096, Access::all()).expect("reg dst"),
        )
    };
    let err = new_error_record(alloc.as_ref()).unwrap();
    let sq = SendQueue::new(alloc.as_ref(), &a.descriptor(1, err.dev_addr(), 5_000_000_000).mlx5().expect("mlx5")).unwrap();
    let req = |op: u8, len: u32, l: u64, r: u64, operand0: u64| rust_gin_mlx5_request {
        opcode: op,
        flags: RUST_GIN_REQ_SIGNALED as u8,
        length: len,
        lkey: ms.lkey(),
        rkey: md.rkey(),
        laddr: l,
        raddr: r,
        operand0,
        ..Default::default()
    };

    sq.post(&[req(opcode::RDMA_WRITE, 4096, src.dev_addr(), dst.dev_addr(), 0)]).expect("post WRITE");
    sq.quiet().expect("WRITE completes");
    let mut got = vec![0u8; 4096];
    dst.read(0, &mut got);
    assert_eq!(got, pattern, "WRITE landed");

    dst.write(0, &10u64.to_ne_bytes());
    sq.post(&[req(opcode::ATOMIC_FA, 8, src.dev_addr(), dst.dev_addr(), 5)]).expect("post FA");
    sq.quiet().expect("FA completes");
    let mut w = [0u8; 8];
    dst.read(0, &mut w);
    assert_eq!(u64::from_ne_bytes(w), 15, "fetch-and-add on a host-endian word");
    src.read(0, &mut w);
    eprintln!("fetched value as stored by the NIC: {:#x} (10 = host-endian reply)", u64::from_ne_bytes(w));

    src.write(0, &[0u8; 4096]);
    sq.post(&[req(opcode::RDMA_READ, 4096, src.dev_addr(), dst.dev_addr(), 0)]).expect("post READ");
    sq.quiet().expect("READ completes");
    src.read(0, &mut got);
    dst.read(0, &mut w);
    assert_eq!(&got[..8], &w, "READ brought the word back");
    assert_eq!(&got[8..], &pattern[8..], "READ brought the rest back");
    assert!(sq.error().is_none(), "no error CQE: {:?}", sq.error());
    eprintln!("queue state: {:?}", sq.state());
}

/// The DC transport on a real ConnectX, loopback: a DCT and a DCI on one
/// port (every DevX command of docs/mlx5-provider.md §2a), the AV of the
/// port itself, a WRITE and a fetch-and-add through the DCI posted by the
/// device library's x86-64 build, as hw_loopback_write_atomic_read does on RC.
#[test]
#[ignore = "needs an mlx5 NIC with DC: RUST_GIN_HW_TEST=1 cargo test --test mlx5_provider -- --ignored"]
fn hw_dc_loopback_write_atomic() {
    use rccl_rust_gin::abi::{rust_gin_mlx5_request, RUST_GIN_MLX5_DC_TARGET_STRIDE, RUST_GIN_REQ_SIGNALED};
    use rccl_rust_gin::mlx5::sq::{new_error_record, SendQueue};
    use rccl_rust_gin::mlx5::wire::opcode;
    use rccl_rust_gin::provider::mlx5::MemoryMode;
    use rccl_rust_gin::provider::Nic;

    assert_eq!(
        std::env::var("RUST_GIN_HW_TEST").as_deref(),
        Ok("1"),
        "this test drives a real ConnectX NIC: set RUST_GIN_HW_TEST=1 on a node that has one"
    );
    let config = Config::from_env().expect("RCCL_RUST_GIN_* knobs");
    let p = Mlx5Provider::probe(&config).expect("probe");
    let nic = p.open_mode(0, MemoryMode::Host).expect("open in host mode");
    let key = 0x5eed_0000_0000_d00d_u64;
    let dct = nic.create_dct(key).expect("DevX CREATE_CQ, CREATE_RMP, CREATE_DCT");
    let dci = nic.create_dci(6, 0, false).expect("DevX CREATE_QP (DCI) through RTS");
    let av = nic.dc_address(&nic.address()).expect("the port's own AV").with_dc_addr(dct.dctn(), key);
    eprintln!("DCT {:#x}, DCI {:#x}, AV {:02x?}", dct.dctn(), dci.qpn(), av.encode());

    let alloc = nic.allocator();
    let table = alloc.alloc(RUST_GIN_MLX5_DC_TARGET_STRIDE as usize, 64, Object::Peers).unwrap();
    table.write(0, &av.encode());
    let src = alloc.alloc(4096, 4096, Object::WindowData).unwrap();
    let dst = alloc.alloc(4096, 4096, Object::WindowData).unwrap();
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 5 + 1) as u8).collect();
    src.write(0, &pattern);
    // SAFETY: both buffers outlive the regions (dropped at the end of the test, after them).
    let (ms, md) = unsafe {
        (
            nic.reg_mr(src.dev_addr(), 4096, Access::all()).expect("reg src"),
            nic.reg_mr(dst.dev_addr(), 4096, Access::all()).expect("reg dst"),
        )
    };
    let err = new_error_record(alloc.as_ref()).unwrap();
    let mut desc = dci.descriptor(0, err.dev_addr(), 5_000_000_000).mlx5().expect("mlx5");
    desc.dc_targets = table.dev_addr();
    let sq = SendQueue::new(alloc.as_ref(), &desc).unwrap();
    let req = |op: u8, len: u32, operand0: u64| rust_gin_mlx5_request {
        opcode: op,
        flags: RUST_GIN_REQ_SIGNALED as u8,
        length: len,
        lkey: ms.lkey(),
        rkey: md.rkey(),
        laddr: src.dev_addr(),
        raddr: dst.dev_addr(),
        operand0,
        dc_target: 0,
        ..Default::default()
    };
    sq.post(&[req(opcode::RDMA_WRITE, 4096, 0)]).expect("post a DC WRITE");
    sq.quiet().expect("the DC WRITE completes");
    let mut got = vec![0u8; 4096];
    dst.read(0, &mut got);
    assert_eq!(got, pattern, "the WRITE landed through the DCT");
    dst.write(0, &10u64.to_ne_bytes());
    sq.post(&[req(opcode::ATOMIC_FA, 8, 5)]).expect("post a DC fetch-and-add");
    sq.quiet().expect("the DC fetch-and-add completes");
    let mut w = [0u8; 8];
    dst.read(0, &mut w);
    assert_eq!(u64::from_ne_bytes(w), 15, "fetch-and-add through the DCT");
    assert!(sq.error().is_none(), "no error CQE: {:?}", sq.error());
    eprintln!("queue state: {:?}", sq.state());
}

#[test]
fn queue_counter_commands() {
    // mlx5_ifc.h: alloc_q_counter_in is 0x80 bits, opcode 0x771 first;
    // query_q_counter_in is 0x100 bits, clear at bit 0xc0, counter_set_id in
    // its last byte.
    let mut want = [0u8; 16];
    want[0..2].copy_from_slice(&[0x07, 0x71]);
    assert_eq!(prm::alloc_q_counter(), want);
    let mut want = [0u8; 32];
    want[0..2].copy_from_slice(&[0x07, 0x73]);
    want[31] = 0x21;
    assert_eq!(prm::query_q_counter(0x21), want, "no clear: the counters keep counting for the next report");
    // The output: local_ack_timeout_err at bit 0x300 (byte 96),
    // out_of_sequence at 0x1c0 (byte 56), req_transport_retries_exceeded at
    // 0x5a0 (byte 180), each a big-endian u32.
    let mut out = [0u8; 256];
    out[96..100].copy_from_slice(&7u32.to_be_bytes());
    out[56..60].copy_from_slice(&2u32.to_be_bytes());
    out[180..184].copy_from_slice(&0x0102_0304u32.to_be_bytes());
    let got = prm::q_counters(&out);
    let named = |n: &str| got.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
    assert_eq!(named("local_ack_timeout_err"), Some(7));
    assert_eq!(named("out_of_sequence"), Some(2));
    assert_eq!(named("req_transport_retries_exceeded"), Some(0x0102_0304));
    assert_eq!(got.iter().filter(|(_, v)| *v != 0).count(), 3);
    let mut names: Vec<_> = got.iter().map(|(k, _)| *k).collect();
    names.dedup();
    assert_eq!(names.len(), prm::q_counter::COUNTERS.len(), "each counter once");
}
