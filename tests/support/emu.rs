//! A two-sided test bed on the emulated NIC: a requester QP posting through
//! the device library's host build, connected to a responder QP, with
//! registered buffers on both sides.

#![allow(dead_code)]

use rccl_rust_gin::abi::{rust_gin_mlx5_request, RUST_GIN_REQ_INLINE, RUST_GIN_REQ_SIGNALED};
use rccl_rust_gin::emu::{Access, EmuNic, EmuQp, Fabric, NicConfig, Region};
use rccl_rust_gin::gpu::{Allocator, GpuBuf, HostMemory, Object, RingHome};
use rccl_rust_gin::mlx5::queue::QueueMem;
use rccl_rust_gin::mlx5::sq::{new_error_record, SendQueue};
use rccl_rust_gin::mlx5::wire::opcode;

pub struct Side {
    pub nic: EmuNic,
    pub pd: u32,
    pub buf: GpuBuf,
    pub mr: Region,
}

impl Side {
    pub fn new(fabric: &Fabric, name: &str, bytes: usize, access: Access) -> Side {
        Side::with_config(fabric, NicConfig { name: name.into(), ..Default::default() }, bytes, access)
    }

    pub fn with_config(fabric: &Fabric, config: NicConfig, bytes: usize, access: Access) -> Side {
        let nic = EmuNic::new(fabric, config).expect("nic");
        let pd = nic.alloc_pd();
        let buf = HostMemory.alloc(bytes, 4096, Object::WindowData).expect("buffer");
        // SAFETY: buf lives in Side as long as the registration (and the NIC).
        let mr = unsafe { nic.reg_mr(pd, buf.host_addr().unwrap(), bytes, access) }.expect("reg_mr");
        Side { nic, pd, buf, mr }
    }

    pub fn addr(&self, off: u64) -> u64 {
        self.buf.dev_addr() + off
    }
}

pub const ALL: Access = Access::all();

/// A requester QP on `a` connected to a responder QP on `b` (which may be
/// the same NIC: loopback).
pub struct Link {
    pub error: GpuBuf,
    pub sq: SendQueue,
    pub qp: EmuQp,
    pub peer_qp: EmuQp,
}

impl Link {
    pub fn new(a: &Side, b: &Side, log_depth: u32, timeout_ns: u64) -> Link {
        Link::build(a, b, log_depth, timeout_ns, None)
    }

    /// A link whose flushes after READs have the NIC read byte `flush_off`
    /// of `a`'s buffer (a DUMP WQE).
    pub fn with_read_flush(a: &Side, b: &Side, log_depth: u32, timeout_ns: u64, flush_off: u64) -> Link {
        Link::build(a, b, log_depth, timeout_ns, Some(flush_off))
    }

    fn build(a: &Side, b: &Side, log_depth: u32, timeout_ns: u64, flush_off: Option<u64>) -> Link {
        let qp = EmuQp::create(&a.nic, a.pd, QueueMem::new(&HostMemory, log_depth, RingHome::Host).unwrap())
            .expect("requester qp");
        let peer_qp =
            EmuQp::create(&b.nic, b.pd, QueueMem::new(&HostMemory, log_depth, RingHome::Host).unwrap())
                .expect("responder qp");
        qp.connect(b.nic.node(), peer_qp.qpn).expect("connect requester");
        peer_qp.connect(a.nic.node(), qp.qpn).expect("connect responder");
        let error = new_error_record(&HostMemory).unwrap();
        let mut desc = qp.descriptor(1, error.dev_addr(), timeout_ns);
        if let Some(off) = flush_off {
            desc = desc.with_read_flush(a.addr(off), a.mr.lkey);
        }
        let sq = SendQueue::new(&HostMemory, &desc).unwrap();
        Link { error, sq, qp, peer_qp }
    }
}

pub fn write(laddr: u64, lkey: u32, raddr: u64, rkey: u32, len: u32) -> rust_gin_mlx5_request {
    rust_gin_mlx5_request { opcode: opcode::RDMA_WRITE, length: len, lkey, rkey, laddr, raddr, ..Default::default() }
}

pub fn write_inline(value: u64, len: u32, raddr: u64, rkey: u32) -> rust_gin_mlx5_request {
    rust_gin_mlx5_request {
        opcode: opcode::RDMA_WRITE,
        flags: RUST_GIN_REQ_INLINE as u8,
        length: len,
        rkey,
        raddr,
        operand0: value,
        ..Default::default()
    }
}

pub fn read(laddr: u64, lkey: u32, raddr: u64, rkey: u32, len: u32) -> rust_gin_mlx5_request {
    rust_gin_mlx5_request { opcode: opcode::RDMA_READ, length: len, lkey, rkey, laddr, raddr, ..Default::default() }
}

pub fn fetch_add(sink: u64, lkey: u32, raddr: u64, rkey: u32, add: u64) -> rust_gin_mlx5_request {
    rust_gin_mlx5_request {
        opcode: opcode::ATOMIC_FA,
        length: 8,
        lkey,
        rkey,
        laddr: sink,
        raddr,
        operand0: add,
        ..Default::default()
    }
}

pub fn signaled(mut r: rust_gin_mlx5_request) -> rust_gin_mlx5_request {
    r.flags |= RUST_GIN_REQ_SIGNALED as u8;
    r
}
