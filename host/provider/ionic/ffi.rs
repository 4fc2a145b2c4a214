//! The ionic direct verbs, declared by hand: the rdma-core installed here
//! (44.0) has no libionic, and the GPU-direct calls are rdma-core pull
//! request 1771 (head 69787abe, 2026-07-21), `providers/ionic/ionic_dv.h` at
//! the lines cited; the CMB preferences are in master 691953d8's
//! ionic_dv.h:57 and :69. Looked up at run time (host/provider/dv_sys.rs).
#![allow(non_camel_case_types)]

use rdma_sys::{ibv_context, ibv_cq, ibv_pd, ibv_qp};
use std::ffi::c_void;

/// ionic_dv.h:174-181 (PR 1771).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ionic_dv_ctx {
    pub db_page: *mut c_void,
    pub db_ptr: *mut u64,
    pub sq_qtype: u8,
    pub rq_qtype: u8,
    pub cq_qtype: u8,
}

/// ionic_dv.h:183-191 (PR 1771).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ionic_dv_queue {
    pub ptr: *mut c_void,
    pub size: usize,
    pub db_val: u64,
    pub mask: u16,
    pub depth_log2: u8,
    pub stride_log2: u8,
}

/// ionic_dv.h:193-196: `struct ionic_dv_cq { struct ionic_dv_queue q; }`.
#[repr(C)]
pub struct ionic_dv_cq {
    pub q: ionic_dv_queue,
}

/// ionic_dv.h:198-202: rq then sq.
#[repr(C)]
pub struct ionic_dv_qp {
    pub rq: ionic_dv_queue,
    pub sq: ionic_dv_queue,
}

/// master ionic_dv.h:57, :69: `int ionic_dv_pd_set_sqcmb(struct ibv_pd *ibpd,
/// bool enable, bool expdb, bool require)` (and `_rqcmb`, the same).
pub type PdSetCmb = unsafe extern "C" fn(*mut ibv_pd, bool, bool, bool) -> i32;
/// ionic_dv.h:127: `int ionic_dv_qp_set_gda(struct ibv_qp *ibqp, bool
/// enable_send, bool enable_recv)`.
pub type QpSetGda = unsafe extern "C" fn(*mut ibv_qp, bool, bool) -> i32;
/// ionic_dv.h:74: `uint8_t ionic_dv_qp_get_udma_idx(struct ibv_qp *ibqp)`.
pub type QpGetUdmaIdx = unsafe extern "C" fn(*mut ibv_qp) -> u8;
/// master ionic_dv.h: `uint8_t ionic_dv_ctx_get_udma_mask(struct
/// ibv_context *ibctx)`, the mask of the device's uDMA pipelines.
pub type CtxGetUdmaMask = unsafe extern "C" fn(*mut ibv_context) -> u8;
/// master ionic_dv.h: `int ionic_dv_pd_set_udma_mask(struct ibv_pd *ibpd,
/// uint8_t udma_mask)`: 0, or a positive errno (EPERM not ionic, EINVAL
/// bits outside the device's mask; ionic_dv_pd_set_udma_mask.3).
pub type PdSetUdmaMask = unsafe extern "C" fn(*mut ibv_pd, u8) -> i32;
/// ionic_dv.h:207.
pub type GetCtx = unsafe extern "C" fn(*mut ionic_dv_ctx, *mut ibv_context) -> i32;
/// ionic_dv.h:212.
pub type GetCq = unsafe extern "C" fn(*mut ionic_dv_cq, *mut ibv_cq, u8) -> i32;
/// ionic_dv.h:217.
pub type GetQp = unsafe extern "C" fn(*mut ionic_dv_qp, *mut ibv_qp) -> i32;
