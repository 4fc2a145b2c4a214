//! [`RdmaCoreDv`]: the [`DvPlatform`] of real hardware. Verbs calls shared
//! with the mlx5 provider go through its `RdmaCore`; the rest call
//! libibverbs through rdma-sys, and the families' direct verbs through
//! symbols looked up at run time in libbnxt_re.so.1 / libionic.so.1 /
//! libibverbs.so.1 (declared in bnxt/ffi.rs and ionic/ffi.rs, each with its
//! header line), so that a library without them gives an error naming the
//! missing symbol. Holds all of these providers' `unsafe` FFI.
//!
//! UNVERIFIED: never run against a bnxt_re or ionic device (none here).

use super::bnxt::ffi as bffi;
use super::dv::{
    BnxtCtxPrivate, BnxtDbRegion, BnxtQpInit, DeviceEntry, DomainMemory, DvPlatform, IonicCtxPrivate, IonicDvCtx, IonicDvQueue,
    IonicQpInit, QpTransition,
};
use super::ionic::ffi as iffi;
use super::mlx5::addr::GidType;
use super::mlx5::platform::{DeviceAttr, GpuAccess, Handle, MrKeys, OpenFailure, Platform, PortAttr, RdmaCore};
use crate::error::Result;
use crate::gpu::hip::DmaBufRange;
use rdma_sys as v;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::io;
use std::sync::{Arc, Mutex, OnceLock};

pub struct RdmaCoreDv;

fn ptr<T>(h: Handle) -> *mut T {
    h.0 as *mut T
}

fn handle<T>(p: *mut T) -> io::Result<Handle> {
    if p.is_null() {
        Err(io::Error::last_os_error())
    } else {
        Ok(Handle(p as usize))
    }
}

fn rc(r: i32) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r.abs()))
    }
}

/// A shared library opened once per process (never closed: its functions
/// may be called until exit).
struct Lib(usize);

fn lib(name: &'static str) -> Option<&'static Lib> {
    static LIBS: OnceLock<Mutex<HashMap<&'static str, Option<&'static Lib>>>> = OnceLock::new();
    let mut m = LIBS.get_or_init(|| Mutex::new(HashMap::new())).lock().unwrap_or_else(|e| e.into_inner());
    *m.entry(name).or_insert_with(|| {
        let c = CString::new(name).ok()?;
        // SAFETY: dlopen of a library name; a null result is handled.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        (!h.is_null()).then(|| &*Box::leak(Box::new(Lib(h as usize))))
    })
}

/// The function `sym` of `library`, as `F` (a function pointer type
/// declared from the cited header).
///
/// # Safety
/// `F` must be the C signature of `sym`.
unsafe fn func<F: Copy>(library: &'static str, sym: &str) -> io::Result<F> {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    let l = lib(library).ok_or_else(|| io::Error::other(format!("{library} cannot be loaded (dlopen)")))?;
    let c = CString::new(sym).map_err(io::Error::other)?;
    // SAFETY: a live handle from dlopen and a C string.
    let p = unsafe { libc::dlsym(l.0 as *mut c_void, c.as_ptr()) };
    if p.is_null() {
        return Err(io::Error::other(format!("{library} has no {sym} (an rdma-core without these direct verbs)")));
    }
    // SAFETY: per the function contract, F is a function pointer of that symbol.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

const LIBIBVERBS: &str = "libibverbs.so.1";
const LIBBNXT_RE: &str = "libbnxt_re.so.1";
const LIBIONIC: &str = "libionic.so.1";

/// The parent domains' allocators, by domain: their `pd_context`.
type Domains = Mutex<HashMap<usize, Box<Arc<dyn DomainMemory>>>>;

fn domains() -> &'static Domains {
    static D: OnceLock<Domains> = OnceLock::new();
    D.get_or_init(|| Mutex::new(HashMap::new()))
}

/// `ibv_parent_domain_init_attr.alloc`: libionic asks for a queue ring.
unsafe extern "C" fn domain_alloc(_pd: *mut v::ibv_pd, ctx: *mut c_void, size: usize, align: usize, tag: u64) -> *mut c_void {
    // SAFETY: `ctx` is the Box<Arc<dyn DomainMemory>> registered with the
    // domain, alive until the domain is deallocated.
    let mem = unsafe { &*(ctx as *const Arc<dyn DomainMemory>) };
    mem.alloc(size, align, tag).map(|a| a as *mut c_void).unwrap_or(std::ptr::null_mut())
}

/// `ibv_parent_domain_init_attr.free`.
unsafe extern "C" fn domain_free(_pd: *mut v::ibv_pd, ctx: *mut c_void, p: *mut c_void, _tag: u64) {
    // SAFETY: as in domain_alloc.
    let mem = unsafe { &*(ctx as *const Arc<dyn DomainMemory>) };
    mem.free(p as usize);
}

impl DvPlatform for RdmaCoreDv {
    fn devices(&self) -> io::Result<Vec<DeviceEntry>> {
        Ok(RdmaCore
            .device_names()?
            .into_iter()
            .map(|name| {
                let vendor_id = std::fs::read_to_string(format!("/sys/class/infiniband/{name}/device/vendor"))
                    .ok()
                    .and_then(|s| u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok());
                DeviceEntry { name, vendor_id }
            })
            .collect())
    }
    fn open_device(&self, name: &str) -> io::Result<Handle> {
        RdmaCore.open_device(name, false).map_err(|f| match f {
            OpenFailure::List(e) | OpenFailure::Open(e) => e,
            OpenFailure::NoSuchDevice => io::Error::other("no such device (any more)"),
            OpenFailure::NotMlx5 => io::Error::other("not mlx5"),
        })
    }
    fn close_device(&self, ctx: Handle) -> io::Result<()> {
        RdmaCore.close_device(ctx)
    }
    fn query_device(&self, ctx: Handle) -> io::Result<DeviceAttr> {
        RdmaCore.query_device(ctx)
    }
    fn query_port(&self, ctx: Handle, port: u8) -> io::Result<PortAttr> {
        RdmaCore.query_port(ctx, port)
    }
    fn query_gid(&self, ctx: Handle, port: u8, index: i32) -> io::Result<[u8; 16]> {
        RdmaCore.query_gid(ctx, port, index)
    }
    fn gid_type(&self, name: &str, port: u8, index: i32) -> Option<GidType> {
        RdmaCore.gid_type(name, port, index)
    }
    fn pci_path(&self, name: &str) -> String {
        RdmaCore.pci_path(name)
    }
    fn alloc_pd(&self, ctx: Handle) -> io::Result<Handle> {
        RdmaCore.alloc_pd(ctx)
    }
    fn dealloc_pd(&self, pd: Handle) -> io::Result<()> {
        RdmaCore.dealloc_pd(pd)?;
        // A parent domain's allocator is no longer called.
        domains().lock().unwrap_or_else(|e| e.into_inner()).remove(&pd.0);
        Ok(())
    }
    unsafe fn reg_mr(&self, pd: Handle, addr: u64, len: usize, access: i32) -> io::Result<MrKeys> {
        // SAFETY: forwarded contract.
        unsafe { RdmaCore.reg_mr(pd, addr, len, access) }
    }
    unsafe fn reg_dmabuf_mr(&self, pd: Handle, offset: u64, len: usize, iova: u64, fd: i32, access: i32) -> io::Result<MrKeys> {
        // SAFETY: forwarded contract.
        unsafe { RdmaCore.reg_dmabuf_mr(pd, offset, len, iova, fd, access) }
    }
    fn dereg_mr(&self, mr: Handle) -> io::Result<()> {
        RdmaCore.dereg_mr(mr)
    }
    fn modify_qp(&self, qp: Handle, t: &QpTransition) -> io::Result<()> {
        use v::ibv_qp_attr_mask as m;
        // SAFETY: plain C struct; zero is valid for every field.
        let mut a: v::ibv_qp_attr = unsafe { std::mem::zeroed() };
        let mask = match *t {
            QpTransition::Init { port, access } => {
                a.qp_state = v::ibv_qp_state::IBV_QPS_INIT;
                a.pkey_index = 0;
                a.port_num = port;
                a.qp_access_flags = access as u32;
                m::IBV_QP_STATE.0 | m::IBV_QP_PKEY_INDEX.0 | m::IBV_QP_PORT.0 | m::IBV_QP_ACCESS_FLAGS.0
            }
            QpTransition::Rtr {
                mtu,
                dest_qpn,
                rq_psn,
                max_dest_rd_atomic,
                min_rnr_timer,
                port,
                dgid,
                sgid_index,
                hop_limit,
                traffic_class,
            } => {
                a.qp_state = v::ibv_qp_state::IBV_QPS_RTR;
                a.path_mtu = mtu as u32;
                a.dest_qp_num = dest_qpn;
                a.rq_psn = rq_psn;
                a.max_dest_rd_atomic = max_dest_rd_atomic;
                a.min_rnr_timer = min_rnr_timer;
                a.ah_attr.is_global = 1;
                a.ah_attr.port_num = port;
                a.ah_attr.grh.dgid = v::ibv_gid { raw: dgid };
                a.ah_attr.grh.sgid_index = sgid_index;
                a.ah_attr.grh.hop_limit = hop_limit;
                a.ah_attr.grh.traffic_class = traffic_class;
                m::IBV_QP_STATE.0
                    | m::IBV_QP_PATH_MTU.0
                    | m::IBV_QP_RQ_PSN.0
                    | m::IBV_QP_DEST_QPN.0
                    | m::IBV_QP_AV.0
                    | m::IBV_QP_MAX_DEST_RD_ATOMIC.0
                    | m::IBV_QP_MIN_RNR_TIMER.0
            }
            QpTransition::Rts { sq_psn, max_rd_atomic, timeout, retry_cnt, rnr_retry } => {
                a.qp_state = v::ibv_qp_state::IBV_QPS_RTS;
                a.sq_psn = sq_psn;
                a.max_rd_atomic = max_rd_atomic;
                a.timeout = timeout;
                a.retry_cnt = retry_cnt;
                a.rnr_retry = rnr_retry;
                m::IBV_QP_STATE.0
                    | m::IBV_QP_SQ_PSN.0
                    | m::IBV_QP_MAX_QP_RD_ATOMIC.0
                    | m::IBV_QP_TIMEOUT.0
                    | m::IBV_QP_RETRY_CNT.0
                    | m::IBV_QP_RNR_RETRY.0
            }
        };
        // SAFETY: a live QP and a filled attribute struct.
        rc(unsafe { v::ibv_modify_qp(ptr(qp), &mut a, mask as i32) })
    }
    fn destroy_qp(&self, qp: Handle) -> io::Result<()> {
        // SAFETY: a QP created here, destroyed once by its owner.
        rc(unsafe { v::ibv_destroy_qp(ptr(qp)) })
    }
    fn destroy_cq(&self, cq: Handle) -> io::Result<()> {
        // SAFETY: a CQ created here, destroyed once by its owner.
        rc(unsafe { v::ibv_destroy_cq(ptr(cq)) })
    }
    fn open_gpu(&self) -> Result<Arc<dyn GpuAccess>> {
        RdmaCore.open_gpu()
    }
    fn export_dmabuf(&self, addr: u64, len: u64) -> std::result::Result<DmaBufRange, String> {
        RdmaCore.export_dmabuf(addr, len)
    }

    unsafe fn bnxt_alloc_user_buf(&self, pd: Handle, addr: u64, size: usize, dmabuf_fd: i32) -> io::Result<Handle> {
        // SAFETY: the declared signature of the symbol.
        let f: bffi::AllocUserBuf = unsafe { func(LIBIBVERBS, "ibv_alloc_user_buf")? };
        // SAFETY: a live PD; the caller keeps the memory valid (the contract).
        handle(unsafe { f(ptr(pd), addr as *mut c_void, size, dmabuf_fd) })
    }
    fn bnxt_free_user_buf(&self, buf: Handle) {
        // SAFETY: the declared signature of the symbol.
        if let Ok(f) = unsafe { func::<bffi::FreeUserBuf>(LIBIBVERBS, "ibv_free_user_buf") } {
            // SAFETY: a buffer from ibv_alloc_user_buf, freed once.
            unsafe { f(ptr(buf)) }
        }
    }
    fn bnxt_default_db_region(&self, ctx: Handle) -> io::Result<BnxtDbRegion> {
        // SAFETY: the declared signature of the symbol.
        let f: bffi::GetDefaultDbRegion = unsafe { func(LIBBNXT_RE, "bnxt_re_dv_get_default_db_region")? };
        let mut out = bffi::bnxt_re_dv_db_region_attr::default();
        // SAFETY: a live context and an out-struct.
        rc(unsafe { f(ptr(ctx), &mut out) })?;
        Ok(BnxtDbRegion { dpi: out.dpi, dbr: out.dbr })
    }
    fn bnxt_ctx_private(&self, ctx: Handle) -> io::Result<BnxtCtxPrivate> {
        // `struct bnxt_re_context` begins with its `verbs_context`, whose
        // last field is the `ibv_context` the handle points at (verbs.h:
        // "Must be last field in the struct"), so the provider's own fields
        // start right after it: rdev @0, dev_id @8, max_qp @12, cctx @16
        // (6 bytes), comp_mask @24, max_srq @32, udpi @40 {dpindx, wcdpi,
        // dbpage @48, wcdbpg}, shpg @64, wqe_mode @72 (main.h:266-277 at PR
        // 1654). The caller checks dbpage against the direct verb's.
        let base = ptr::<v::ibv_context>(ctx) as usize + std::mem::size_of::<v::ibv_context>();
        // SAFETY: a live libbnxt_re context, which is at least this long.
        unsafe {
            Ok(BnxtCtxPrivate {
                dbpage: std::ptr::read_unaligned((base + 48) as *const usize),
                wqe_mode: std::ptr::read_unaligned((base + 72) as *const u32),
            })
        }
    }
    fn bnxt_create_cq(&self, ctx: Handle, umem: Handle, offset: u64, ncqe: u32) -> io::Result<Handle> {
        // SAFETY: the declared signature of the symbol.
        let f: bffi::CreateCq = unsafe { func(LIBBNXT_RE, "bnxt_re_dv_create_cq")? };
        let mut a = bffi::bnxt_re_dv_cq_init_attr { umem_handle: ptr(umem), umem_offset: offset, ncqe };
        // SAFETY: a live context and an ibv_buf from ibv_alloc_user_buf.
        handle(unsafe { f(ptr(ctx), &mut a) })
    }
    fn bnxt_cq_id(&self, cq: Handle) -> io::Result<u32> {
        // SAFETY: the declared signature of the symbol.
        let f: bffi::InitObj = unsafe { func(LIBBNXT_RE, "bnxt_re_dv_init_obj")? };
        let mut out = bffi::bnxt_re_dv_cq::default();
        let null = [std::ptr::null_mut(); 2];
        let mut o =
            bffi::bnxt_re_dv_obj { qp: null, cq_in: ptr(cq), cq_out: &mut out, srq: null, ah: null, pd: null };
        // SAFETY: a live CQ and an out-struct.
        rc(unsafe { f(&mut o, bffi::BNXT_RE_DV_OBJ_CQ) })?;
        Ok(out.cqn)
    }
    fn bnxt_create_qp(&self, pd: Handle, cq: Handle, b: &BnxtQpInit) -> io::Result<(Handle, u32)> {
        // SAFETY: the declared signature of the symbol.
        let f: bffi::CreateQp = unsafe { func(LIBBNXT_RE, "bnxt_re_dv_create_qp")? };
        let mut a = bffi::bnxt_re_dv_qp_init_attr {
            qp_type: v::ibv_qp_type::IBV_QPT_RC,
            max_send_wr: b.max_send_wr,
            max_recv_wr: b.max_recv_wr,
            max_send_sge: b.max_send_sge,
            max_recv_sge: b.max_recv_sge,
            max_inline_data: b.max_inline_data,
            send_cq: ptr(cq),
            recv_cq: ptr(cq),
            srq: std::ptr::null_mut(),
            qp_handle: 0,
            dbr_handle: std::ptr::null_mut(),
            sq_umem_handle: ptr(b.sq_umem),
            sq_umem_offset: b.sq_umem_offset,
            sq_len: b.sq_len,
            sq_slots: b.sq_slots,
            rq_umem_handle: ptr(b.rq_umem),
            rq_umem_offset: b.rq_umem_offset,
            sq_npsn: b.sq_npsn,
            rq_len: b.rq_len,
            comp_mask: 0,
        };
        // SAFETY: a live PD, CQ and user buffers.
        let qp: *mut v::ibv_qp = unsafe { f(ptr(pd), &mut a) };
        let h = handle(qp)?;
        // SAFETY: a QP just returned.
        Ok((h, unsafe { (*qp).qp_num }))
    }

    fn ionic_alloc_parent_domain(&self, ctx: Handle, pd: Handle, mem: Arc<dyn DomainMemory>) -> io::Result<Handle> {
        let boxed = Box::new(mem);
        // SAFETY: plain C struct; zero is valid for every field.
        let mut a: v::ibv_parent_domain_init_attr = unsafe { std::mem::zeroed() };
        a.pd = ptr(pd);
        a.comp_mask = v::ibv_parent_domain_init_attr_mask::IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS.0
            | v::ibv_parent_domain_init_attr_mask::IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT.0;
        a.alloc = Some(domain_alloc);
        a.free = Some(domain_free);
        a.pd_context = &*boxed as *const Arc<dyn DomainMemory> as *mut c_void;
        // SAFETY: a live context and PD; the Box outlives the domain (kept in
        // `domains()` until dealloc_pd).
        let d = unsafe { v::ibv_alloc_parent_domain(ptr(ctx), &mut a) };
        let h = match d {
            Some(p) => handle(p)?,
            None => return Err(io::Error::last_os_error()),
        };
        domains().lock().unwrap_or_else(|e| e.into_inner()).insert(h.0, boxed);
        Ok(h)
    }
    fn ionic_pd_set_cmb(&self, pd: Handle, send: bool, enable: bool, expdb: bool, require: bool) -> io::Result<()> {
        let sym = if send { "ionic_dv_pd_set_sqcmb" } else { "ionic_dv_pd_set_rqcmb" };
        // SAFETY: the declared signature of the symbol.
        let f: iffi::PdSetCmb = unsafe { func(LIBIONIC, sym)? };
        // SAFETY: a live (parent) domain.
        rc(unsafe { f(ptr(pd), enable, expdb, require) })
    }
    fn ionic_create_cq(&self, ctx: Handle, pd: Handle, cqe: u32) -> io::Result<Handle> {
        // SAFETY: plain C struct; zero is valid for every field.
        let mut a: v::ibv_cq_init_attr_ex = unsafe { std::mem::zeroed() };
        a.cqe = cqe;
        a.comp_mask = v::ibv_cq_init_attr_mask::IBV_CQ_INIT_ATTR_MASK_PD.0;
        a.parent_domain = ptr(pd);
        // SAFETY: a live context and parent domain.
        match unsafe { v::ibv_create_cq_ex(ptr(ctx), &mut a) } {
            // SAFETY: a CQ just returned (ibv_cq_ex_to_cq is a cast).
            Some(cq) if !cq.is_null() => Ok(Handle(unsafe { v::ibv_cq_ex_to_cq(cq) } as usize)),
            _ => Err(io::Error::last_os_error()),
        }
    }
    fn ionic_create_qp(&self, pd: Handle, cq: Handle, b: &IonicQpInit) -> io::Result<(Handle, u32)> {
        // SAFETY: plain C struct; zero is valid for every field.
        let mut a: v::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        a.send_cq = ptr(cq);
        a.recv_cq = ptr(cq);
        a.cap.max_send_wr = b.max_send_wr;
        a.cap.max_recv_wr = b.max_recv_wr;
        a.cap.max_send_sge = 1;
        a.cap.max_recv_sge = 1;
        a.cap.max_inline_data = b.max_inline_data;
        a.qp_type = v::ibv_qp_type::IBV_QPT_RC;
        // SAFETY: a live parent domain and CQ.
        let qp = unsafe { v::ibv_create_qp(ptr(pd), &mut a) };
        let h = handle(qp)?;
        // SAFETY: a QP just returned.
        Ok((h, unsafe { (*qp).qp_num }))
    }
    fn ionic_qp_set_gda(&self, qp: Handle, send: bool, recv: bool) -> io::Result<()> {
        // SAFETY: the declared signature of the symbol.
        let f: iffi::QpSetGda = unsafe { func(LIBIONIC, "ionic_dv_qp_set_gda")? };
        // SAFETY: a live QP.
        rc(unsafe { f(ptr(qp), send, recv) })
    }
    fn ionic_get_ctx(&self, ctx: Handle) -> io::Result<IonicDvCtx> {
        // SAFETY: the declared signature of the symbol.
        let f: iffi::GetCtx = unsafe { func(LIBIONIC, "ionic_dv_get_ctx")? };
        let mut o = iffi::ionic_dv_ctx {
            db_page: std::ptr::null_mut(),
            db_ptr: std::ptr::null_mut(),
            sq_qtype: 0,
            rq_qtype: 0,
            cq_qtype: 0,
        };
        // SAFETY: a live context and an out-struct.
        rc(unsafe { f(&mut o, ptr(ctx)) })?;
        Ok(IonicDvCtx {
            db_page: o.db_page as usize,
            db_ptr: o.db_ptr as usize,
            sq_qtype: o.sq_qtype,
            rq_qtype: o.rq_qtype,
            cq_qtype: o.cq_qtype,
        })
    }
    fn ionic_ctx_private(&self, ctx: Handle) -> io::Result<IonicCtxPrivate> {
        // `struct ionic_ctx` begins with its `verbs_context`, whose last
        // field is the `ibv_context` the handle points at, so libionic's own
        // fields start right after it: spec @0, pg_shift @4, version @8,
        // opcodes @12, sq/rq/cq_qtype @13..16 (ionic.h:89-100 at PR 1771).
        // No direct verb reports the version; the caller checks the layout
        // against ionic_dv_get_ctx's queue types.
        let base = ptr::<v::ibv_context>(ctx) as usize + std::mem::size_of::<v::ibv_context>();
        // SAFETY: a live libionic context, which is at least this long.
        unsafe {
            let b = |at: usize| std::ptr::read((base + at) as *const u8);
            Ok(IonicCtxPrivate {
                pg_shift: std::ptr::read_unaligned((base + 4) as *const u32),
                version: std::ptr::read_unaligned((base + 8) as *const i32),
                sq_qtype: b(13),
                rq_qtype: b(14),
                cq_qtype: b(15),
            })
        }
    }
    fn ionic_qp_get_udma_idx(&self, qp: Handle) -> io::Result<u8> {
        // SAFETY: the declared signature of the symbol.
        let f: iffi::QpGetUdmaIdx = unsafe { func(LIBIONIC, "ionic_dv_qp_get_udma_idx")? };
        // SAFETY: a live QP.
        Ok(unsafe { f(ptr(qp)) })
    }
    fn ionic_ctx_udma_mask(&self, ctx: Handle) -> io::Result<u8> {
        // SAFETY: the declared signature of the symbol.
        let f: iffi::CtxGetUdmaMask = unsafe { func(LIBIONIC, "ionic_dv_ctx_get_udma_mask")? };
        // SAFETY: a live context.
        Ok(unsafe { f(ptr(ctx)) })
    }
    fn ionic_pd_set_udma_mask(&self, pd: Handle, mask: u8) -> io::Result<()> {
        // SAFETY: the declared signature of the symbol.
        let f: iffi::PdSetUdmaMask = unsafe { func(LIBIONIC, "ionic_dv_pd_set_udma_mask")? };
        // SAFETY: a live (parent) domain.
        rc(unsafe { f(ptr(pd), mask) })
    }
    fn ionic_get_cq(&self, cq: Handle, udma_idx: u8) -> io::Result<IonicDvQueue> {
        // SAFETY: the declared signature of the symbol.
        let f: iffi::GetCq = unsafe { func(LIBIONIC, "ionic_dv_get_cq")? };
        let mut o = iffi::ionic_dv_cq { q: empty_queue() };
        // SAFETY: a live CQ and an out-struct.
        rc(unsafe { f(&mut o, ptr(cq), udma_idx) })?;
        Ok(queue(&o.q))
    }
    fn ionic_get_qp(&self, qp: Handle) -> io::Result<(IonicDvQueue, IonicDvQueue)> {
        // SAFETY: the declared signature of the symbol.
        let f: iffi::GetQp = unsafe { func(LIBIONIC, "ionic_dv_get_qp")? };
        let mut o = iffi::ionic_dv_qp { rq: empty_queue(), sq: empty_queue() };
        // SAFETY: a live QP and an out-struct.
        rc(unsafe { f(&mut o, ptr(qp)) })?;
        Ok((queue(&o.rq), queue(&o.sq)))
    }
}

fn empty_queue() -> iffi::ionic_dv_queue {
    iffi::ionic_dv_queue { ptr: std::ptr::null_mut(), size: 0, db_val: 0, mask: 0, depth_log2: 0, stride_log2: 0 }
}

fn queue(q: &iffi::ionic_dv_queue) -> IonicDvQueue {
    IonicDvQueue {
        ptr: q.ptr as usize,
        size: q.size,
        db_val: q.db_val,
        mask: q.mask,
        depth_log2: q.depth_log2,
        stride_log2: q.stride_log2,
    }
}
