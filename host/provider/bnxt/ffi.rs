//! The bnxt_re direct verbs, declared by hand: no rdma-core installed here
//! has them. Every declaration restates rdma-core pull request 1654 (head
//! 35fcb9e4, 2026-08-21) `providers/bnxt_re/bnxt_re_dv.h` at the lines cited,
//! exported as `BNXT_RE_1.1` (providers/bnxt_re/bnxt_re.map); the verbs
//! buffer call is `IBVERBS_1.19` of commit e2fcb50d (libibverbs/verbs.h). The
//! CQ-id query is Broadcom's out-of-tree libbnxt_re as ROCm/mori 624002c8
//! vendors its header (include/mori/application/transport/rdma/providers/
//! bnxt/bnxt_re_dv.h); rdma-core has no equivalent. Symbols are looked up at
//! run time (host/provider/dv_sys.rs), so a library without them is an error
//! naming the symbol, not a load failure.
#![allow(non_camel_case_types)]

use rdma_sys::{ibv_context, ibv_cq, ibv_pd, ibv_qp, ibv_qp_type, ibv_srq};
use std::ffi::c_void;

/// Opaque `struct ibv_buf` (libibverbs).
#[repr(C)]
pub struct ibv_buf {
    _private: [u8; 0],
}

/// bnxt_re_dv.h:47-52.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct bnxt_re_dv_db_region_attr {
    pub handle: u32,
    pub dpi: u32,
    pub umdbr: u64,
    pub dbr: usize,
}

/// bnxt_re_dv.h:54-58.
#[repr(C)]
pub struct bnxt_re_dv_cq_init_attr {
    pub umem_handle: *mut ibv_buf,
    pub umem_offset: u64,
    pub ncqe: u32,
}

/// bnxt_re_dv.h:60-84.
#[repr(C)]
pub struct bnxt_re_dv_qp_init_attr {
    pub qp_type: ibv_qp_type::Type,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub qp_handle: u64,
    pub dbr_handle: *mut c_void,
    pub sq_umem_handle: *mut ibv_buf,
    pub sq_umem_offset: u64,
    pub sq_len: u32,
    pub sq_slots: u32,
    pub rq_umem_handle: *mut ibv_buf,
    pub rq_umem_offset: u64,
    pub sq_npsn: u32,
    pub rq_len: u32,
    pub comp_mask: u64,
}

/// bnxt_re_dv.h:90-91.
pub type GetDefaultDbRegion = unsafe extern "C" fn(*mut ibv_context, *mut bnxt_re_dv_db_region_attr) -> i32;
/// bnxt_re_dv.h:92-93.
pub type CreateCq = unsafe extern "C" fn(*mut ibv_context, *mut bnxt_re_dv_cq_init_attr) -> *mut ibv_cq;
/// bnxt_re_dv.h:94-95.
pub type CreateQp = unsafe extern "C" fn(*mut ibv_pd, *mut bnxt_re_dv_qp_init_attr) -> *mut ibv_qp;
/// libibverbs/verbs.h (e2fcb50d): `struct ibv_buf *ibv_alloc_user_buf(struct
/// ibv_pd *pd, void *addr, size_t size, int dmabuf_fd)`.
pub type AllocUserBuf = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, i32) -> *mut ibv_buf;
/// libibverbs/verbs.h (e2fcb50d): `void ibv_free_user_buf(struct ibv_buf *buf)`.
pub type FreeUserBuf = unsafe extern "C" fn(*mut ibv_buf);

/// Broadcom libbnxt_re (mori's bnxt_re_dv.h): `struct bnxt_re_dv_cq { uint32_t
/// cqn; uint32_t cqe_size; uint64_t comp_mask; }`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct bnxt_re_dv_cq {
    pub cqn: u32,
    pub cqe_size: u32,
    pub comp_mask: u64,
}

/// Broadcom libbnxt_re (mori's bnxt_re_dv.h): `struct bnxt_re_dv_obj`, five
/// {in, out} pointer pairs: qp, cq, srq, ah, pd.
#[repr(C)]
pub struct bnxt_re_dv_obj {
    pub qp: [*mut c_void; 2],
    pub cq_in: *mut ibv_cq,
    pub cq_out: *mut bnxt_re_dv_cq,
    pub srq: [*mut c_void; 2],
    pub ah: [*mut c_void; 2],
    pub pd: [*mut c_void; 2],
}

/// `BNXT_RE_DV_OBJ_CQ = 1 << 1` (mori's bnxt_re_dv.h, enum bnxt_re_dv_obj_type).
pub const BNXT_RE_DV_OBJ_CQ: u64 = 1 << 1;
/// `int bnxt_re_dv_init_obj(struct bnxt_re_dv_obj *obj, uint64_t obj_type)`.
pub type InitObj = unsafe extern "C" fn(*mut bnxt_re_dv_obj, u64) -> i32;
