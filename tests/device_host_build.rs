//! The x86-64 build of the device sources is linked into the crate and is the
//! code the GPU runs: its WQE builder agrees with the Rust wire-format twin.

use rccl_rust_gin::abi::rust_gin_mlx5_request;
use rccl_rust_gin::device;
use rccl_rust_gin::mlx5::wire::{opcode, CtrlSeg, DataSeg, RaddrSeg};

#[test]
fn host_built_device_code_builds_an_rdma_write() {
    let req = rust_gin_mlx5_request {
        opcode: opcode::RDMA_WRITE,
        length: 4096,
        lkey: 0x1234,
        rkey: 0xabcd,
        laddr: 0x7f00_0000_1000,
        raddr: 0x7e00_0000_2000,
        ..Default::default()
    };
    let w = device::build_wqe(&req, 0x1_2345u32 as u16, 0x00ab_cdef, true).unwrap();
    let ctrl = CtrlSeg::parse(&w[0..16]);
    assert_eq!(ctrl.opcode, opcode::RDMA_WRITE);
    assert_eq!(ctrl.wqe_index, 0x2345);
    assert_eq!(ctrl.qpn, 0x00ab_cdef);
    assert_eq!(ctrl.ds, 3);
    assert!(ctrl.cq_update());
    assert_eq!(RaddrSeg::parse(&w[16..32]), RaddrSeg { raddr: 0x7e00_0000_2000, rkey: 0xabcd });
    assert_eq!(DataSeg::parse(&w[32..48]), DataSeg { byte_count: 4096, lkey: 0x1234, addr: 0x7f00_0000_1000 });
    assert_eq!(&w[48..64], &[0u8; 16]);
}
