//! The bnxt_re (Thor2) and ionic (Pollara) host providers over a recording
//! stand-in of rdma-core, the families' direct verbs and HIP
//! (`provider::dv::DvPlatform`), since neither library nor NIC exists here.
//!
//! The stand-in models what the providers must get right and fails the
//! call otherwise, as the real library or NIC would (each rule cites where
//! it comes from):
//! - objects are destroyed newest first (everything leaks or faults
//!   otherwise: the kernel refuses to free a PD/CQ/buffer still in use);
//! - QP transitions only RESET -> INIT -> RTR -> RTS (verbs state machine);
//! - bnxt_re: `bnxt_re_dv_create_cq/qp` check the user buffers as dv.c's
//!   `bnxt_re_dv_is_valid_buf` does (page-aligned offset, length within the
//!   buffer, dv.c:143-149), `comp_mask` must be 0 (dv.c:396-397), and the
//!   SQ must hold its slots and MSN table (bnxt_re_dv.h: "sq length
//!   including MSN area");
//! - ionic: a parent domain's rings come from its allocator unless the
//!   controller memory bar is left on (then libionic puts the SQ there:
//!   ionic_dv.h "Specify send queue preference for controller memory bar"),
//!   `ionic_dv_qp_set_gda` refuses an express-doorbell SQ (ionic_dv.c:
//!   166-167), and a GPU doorbell on a QP not in GDA mode "has no effect"
//!   (ROCm/mori PR 588): the stand-in reports it as such.
//!
//! Each test checks the call sequence, the arguments and the descriptor
//! (`rust_gin_nic_sq`) against values the stand-in handed out.

use rccl_rust_gin::abi::rust_gin_nic_sq;
use rccl_rust_gin::config::{Config, ProviderKind};
use rccl_rust_gin::error::{Error, Result};
use rccl_rust_gin::ffi::nccl::NCCL_INVALID_USAGE;
use rccl_rust_gin::gpu::{Allocator, GpuBuf, HostMemory, Object};
use rccl_rust_gin::provider::dv::{
    BnxtCtxPrivate, BnxtDbRegion, BnxtQpInit, DeviceEntry, DomainMemory, DvPlatform, DvProvider, Family, IonicCtxPrivate,
    IonicDvCtx, IonicDvQueue, IonicQpInit, QpTransition, VENDOR_BROADCOM, VENDOR_MELLANOX, VENDOR_PENSANDO,
};
use rccl_rust_gin::nic::gates::FwCheck;
use rccl_rust_gin::provider::mlx5::platform::FwVer;
use rccl_rust_gin::provider::mlx5::addr::GidType;
use rccl_rust_gin::provider::mlx5::platform::{DeviceAttr, DeviceMapping, GpuAccess, Handle, MrKeys, PortAttr};
use rccl_rust_gin::provider::{self, Access, MemoryMode, Nic, NicFamily, Provider, QueueDescriptor, QueuePair};
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

/// Where the stand-in's GPU sees an I/O page: CPU address + this.
const GPU_IO_OFFSET: u64 = 0x7f00_0000_0000;
const PAGE: usize = 4096;
const BNXT_DPI: u32 = 5;
/// ionic's context: doorbell offset inside the page and queue types
/// (`ionic_ctx`'s `dbpage` = page + dbell_offset, ionic.c:71-88).
const IONIC_DB_OFFSET: usize = 0x200;
const IONIC_SQ_QTYPE: u8 = 1;
const IONIC_RQ_QTYPE: u8 = 2;
const IONIC_CQ_QTYPE: u8 = 3;

#[derive(Clone, Debug)]
struct Call {
    name: String,
    detail: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ctx,
    Pd,
    Domain,
    UserBuf,
    Cq,
    Qp,
    Mr,
    Mapping,
}

#[derive(Clone, Debug)]
struct UserBuf {
    addr: u64,
    size: usize,
    fd: i32,
}

#[derive(Clone, Debug)]
struct Qp {
    num: u32,
    state: u8,
    gda_send: bool,
    gda_recv: bool,
    sq_in_cmb: bool,
    bnxt: Option<BnxtQpInit>,
    transitions: Vec<QpTransition>,
}

#[derive(Default)]
struct State {
    calls: Vec<Call>,
    live: Vec<(Handle, Kind)>,
    faults: Vec<String>,
    next: usize,
    user_bufs: HashMap<usize, UserBuf>,
    /// (ncqe or cqe, cqid, ring (ionic)).
    cqs: HashMap<usize, (u32, u32, Option<IonicDvQueue>)>,
    qps: HashMap<usize, Qp>,
    /// Parent domain -> (allocator, sq cmb on, sq expdb on).
    domains: HashMap<usize, (Arc<dyn DomainMemory>, bool, bool)>,
    ionic_rings: HashMap<usize, (IonicDvQueue, IonicDvQueue)>,
    /// ionic: a parent domain's uDMA mask (unset: the device's), and the
    /// engine each CQ and QP went to (the lowest the domain allowed).
    domain_udma: HashMap<usize, u8>,
    udma_of: HashMap<usize, u8>,
    fail_at: Option<usize>,
    steps: usize,
}

/// The stand-in: one family's NIC (or a list of devices for selection).
#[derive(Clone)]
struct StandIn {
    s: Arc<Mutex<State>>,
    devices: Vec<DeviceEntry>,
    atomic_cap: u32,
    /// Pages standing in for doorbell pages and the ionic CMB.
    pages: Arc<Vec<Box<[u64; 512]>>>,
    /// bnxt_re_dv_init_obj exists (Broadcom's libbnxt_re) or not (rdma-core).
    cq_id_query: bool,
    /// HIP exports GPU memory as dma-bufs (each a descriptor of /dev/null).
    dmabuf: bool,
    /// ibv_query_device's fw_ver.
    fw_ver: String,
    /// libionic's private context: the alloc-ucontext response's version,
    /// and whether its layout is the one ionic.h has (else the queue types
    /// read beside it differ from ionic_dv_get_ctx's).
    ionic_version: i32,
    ionic_layout: bool,
    /// libbnxt_re's private context: the ucontext response's WQE mode, and
    /// whether its layout is main.h's (else the doorbell page read beside it
    /// differs from bnxt_re_dv_get_default_db_region's).
    bnxt_wqe_mode: u32,
    bnxt_layout: bool,
    /// ionic: the device's uDMA engines (ionic_dv_ctx_get_udma_mask).
    udma_mask: u8,
    /// The device's sysfs traffic class file, if the driver has one.
    sysfs_tc: Option<&'static str>,
}

impl StandIn {
    fn new(devices: &[(&str, Option<u32>)]) -> StandIn {
        StandIn {
            s: Arc::new(Mutex::new(State { next: 0x1000, ..State::default() })),
            devices: devices.iter().map(|(n, v)| DeviceEntry { name: n.to_string(), vendor_id: *v }).collect(),
            atomic_cap: 0,
            pages: Arc::new((0..3).map(|_| Box::new([0u64; 512])).collect()),
            cq_id_query: true,
            dmabuf: false,
            fw_ver: "237.1.137.0".into(),
            ionic_version: 2,
            ionic_layout: true,
            bnxt_wqe_mode: 0,
            bnxt_layout: true,
            udma_mask: 0b11,
            sysfs_tc: None,
        }
    }
    fn bnxt() -> StandIn {
        StandIn::new(&[("bnxt_re0", Some(VENDOR_BROADCOM))])
    }
    fn ionic() -> StandIn {
        StandIn { fw_ver: "1.117.5-a-45".into(), ..StandIn::new(&[("ionic_0", Some(VENDOR_PENSANDO))]) }
    }
    fn platform(&self) -> Arc<dyn DvPlatform> {
        Arc::new(self.clone())
    }
    fn fail_at(self, n: usize) -> StandIn {
        self.s.lock().unwrap().fail_at = Some(n);
        self
    }
    fn st(&self) -> std::sync::MutexGuard<'_, State> {
        self.s.lock().unwrap()
    }
    fn page(&self, i: usize) -> usize {
        self.pages[i].as_ptr() as usize
    }
    fn log(&self, name: &str, detail: String) {
        self.st().calls.push(Call { name: name.into(), detail });
    }
    /// A call that can fail on request (the n-th such call, from 1).
    fn step(&self, name: &str, detail: String) -> io::Result<()> {
        let mut s = self.st();
        s.steps += 1;
        let fail = s.fail_at == Some(s.steps);
        s.calls.push(Call { name: name.into(), detail: format!("{detail}{}", if fail { " FAILED" } else { "" }) });
        if fail {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }
    fn make(&self, kind: Kind) -> Handle {
        let mut s = self.st();
        s.next += 0x10;
        let h = Handle(s.next);
        s.live.push((h, kind));
        h
    }
    fn destroy(&self, h: Handle, kind: Kind, name: &str) -> io::Result<()> {
        let mut s = self.st();
        s.calls.push(Call { name: name.into(), detail: format!("{h:?}") });
        match s.live.last() {
            Some(&(top, k)) if top == h && k == kind => {
                s.live.pop();
                Ok(())
            }
            _ => {
                let f = format!("{name}({h:?}, {kind:?}) while newer objects live: {:?}", s.live);
                s.faults.push(f);
                s.live.retain(|(x, _)| *x != h);
                Err(io::Error::from_raw_os_error(libc::EBUSY))
            }
        }
    }
    fn is_live(&self, h: Handle, kind: Kind) -> bool {
        self.st().live.iter().any(|&(x, k)| x == h && k == kind)
    }
    fn calls(&self) -> Vec<Call> {
        self.st().calls.clone()
    }
    fn names(&self) -> Vec<String> {
        self.calls().into_iter().map(|c| c.name).collect()
    }
    fn qps(&self) -> Vec<Qp> {
        let mut v: Vec<Qp> = self.st().qps.values().cloned().collect();
        v.sort_by_key(|q| q.num);
        v
    }
    fn assert_clean(&self, what: &str) {
        let s = self.st();
        assert!(s.live.is_empty(), "{what}: leaked {:?}", s.live);
        assert!(s.faults.is_empty(), "{what}: teardown faults {:?}", s.faults);
    }
    /// The effect a GPU doorbell store has (mori PR 588): none unless the
    /// QP is in GDA mode (ionic; bnxt_re has no such mode).
    /// The uDMA engine libionic gives a queue created on domain `pd`: the
    /// lowest its mask allows (without a mask every queue lands on 0).
    fn engine_of(&self, pd: Handle) -> u8 {
        let m = self.st().domain_udma.get(&pd.0).copied().unwrap_or(self.udma_mask);
        m.trailing_zeros() as u8
    }
    fn gpu_doorbell_rings(&self, qp_num: u32) -> bool {
        self.qps().iter().any(|q| q.num == qp_num && q.state == 3 && (q.bnxt.is_some() || q.gda_send))
    }
}

/// The kernel imports a user buffer's dma-buf when the CQ or QP is
/// created (libibverbs only records the fd): it must still be open.
fn fd_open(fd: i32) -> io::Result<()> {
    // SAFETY: F_GETFD on any number only reads the descriptor table.
    if fd >= 0 && unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    Ok(())
}

fn einval() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}

impl DvPlatform for StandIn {
    fn devices(&self) -> io::Result<Vec<DeviceEntry>> {
        self.log("ibv_get_device_list", String::new());
        if self.devices.is_empty() {
            return Err(io::Error::from_raw_os_error(libc::ENOSYS));
        }
        Ok(self.devices.clone())
    }
    fn open_device(&self, name: &str) -> io::Result<Handle> {
        self.step("ibv_open_device", name.into())?;
        Ok(self.make(Kind::Ctx))
    }
    fn close_device(&self, ctx: Handle) -> io::Result<()> {
        self.destroy(ctx, Kind::Ctx, "ibv_close_device")
    }
    fn query_device(&self, _ctx: Handle) -> io::Result<DeviceAttr> {
        self.step("ibv_query_device", String::new())?;
        Ok(DeviceAttr {
            atomic_cap: self.atomic_cap,
            phys_port_cnt: 1,
            node_guid: 0x1122_3344_5566_7788,
            max_qp_rd_atom: 32,
            max_qp_init_rd_atom: 8,
            max_qp: 65536,
            fw_ver: FwVer::new(&self.fw_ver),
        })
    }
    fn query_port(&self, _ctx: Handle, port: u8) -> io::Result<PortAttr> {
        self.step("ibv_query_port", format!("port {port}"))?;
        Ok(PortAttr {
            state: 4,
            link_layer: 2,
            gid_tbl_len: 2,
            active_mtu: 5,
            lid: 0,
            active_speed: 128,
            active_width: 2,
            max_msg_sz: 1 << 31,
        })
    }
    fn query_gid(&self, _ctx: Handle, _port: u8, index: i32) -> io::Result<[u8; 16]> {
        let mut g = [0u8; 16];
        match index {
            0 => g[..2].copy_from_slice(&[0xfe, 0x80]),
            1 => {
                g[10] = 0xff;
                g[11] = 0xff;
                g[12..].copy_from_slice(&[10, 0, 0, 7]);
            }
            _ => return Err(einval()),
        }
        g[15] |= 1;
        Ok(g)
    }
    fn gid_type(&self, _name: &str, _port: u8, index: i32) -> Option<GidType> {
        Some(if index == 1 { GidType::RoceV2 } else { GidType::RoceV1 })
    }
    fn pci_path(&self, name: &str) -> String {
        format!("/sys/devices/pci0000:00/0000:00:01.0/{name}")
    }
    fn read_sysfs(&self, path: &str) -> io::Result<Vec<u8>> {
        match self.sysfs_tc {
            Some(t) if path == "/sys/class/infiniband/ionic_0/tc/1/traffic_class" => Ok(t.as_bytes().to_vec()),
            _ => Err(io::Error::new(io::ErrorKind::NotFound, path.to_string())),
        }
    }
    fn alloc_pd(&self, _ctx: Handle) -> io::Result<Handle> {
        self.step("ibv_alloc_pd", String::new())?;
        Ok(self.make(Kind::Pd))
    }
    fn dealloc_pd(&self, pd: Handle) -> io::Result<()> {
        let kind = if self.st().domains.remove(&pd.0).is_some() { Kind::Domain } else { Kind::Pd };
        self.destroy(pd, kind, "ibv_dealloc_pd")
    }
    unsafe fn reg_mr(&self, pd: Handle, addr: u64, len: usize, access: i32) -> io::Result<MrKeys> {
        self.step("ibv_reg_mr", format!("{addr:#x} {len} access {access:#x}"))?;
        if !self.is_live(pd, Kind::Pd) {
            return Err(einval());
        }
        let h = self.make(Kind::Mr);
        Ok(MrKeys { handle: h, lkey: 0x100 | h.0 as u32, rkey: 0x200 | h.0 as u32 })
    }
    unsafe fn reg_dmabuf_mr(&self, _pd: Handle, _o: u64, _l: usize, _i: u64, _fd: i32, _a: i32) -> io::Result<MrKeys> {
        Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
    }
    fn dereg_mr(&self, mr: Handle) -> io::Result<()> {
        self.destroy(mr, Kind::Mr, "ibv_dereg_mr")
    }
    fn modify_qp(&self, qp: Handle, t: &QpTransition) -> io::Result<()> {
        self.step("ibv_modify_qp", format!("{t:?}"))?;
        let mut s = self.st();
        let q = s.qps.get_mut(&qp.0).ok_or_else(einval)?;
        let to = match t {
            QpTransition::Init { .. } => 1,
            QpTransition::Rtr { .. } => 2,
            QpTransition::Rts { .. } => 3,
        };
        if to != q.state + 1 {
            return Err(einval());
        }
        q.state = to;
        q.transitions.push(t.clone());
        Ok(())
    }
    fn destroy_qp(&self, qp: Handle) -> io::Result<()> {
        self.destroy(qp, Kind::Qp, "ibv_destroy_qp")?;
        // libionic returns the rings to the parent domain (ionic_queue_unmap).
        let rings = self.st().ionic_rings.remove(&qp.0);
        let domain = self.st().domains.values().next().cloned();
        if let (Some((sq, rq)), Some((m, _, _))) = (rings, domain) {
            m.free(sq.ptr);
            m.free(rq.ptr);
        }
        Ok(())
    }
    fn destroy_cq(&self, cq: Handle) -> io::Result<()> {
        self.destroy(cq, Kind::Cq, "ibv_destroy_cq")?;
        let ring = self.st().cqs.remove(&cq.0).and_then(|c| c.2);
        let domain = self.st().domains.values().next().cloned();
        if let (Some(q), Some((m, _, _))) = (ring, domain) {
            m.free(q.ptr);
        }
        Ok(())
    }
    fn open_gpu(&self) -> Result<Arc<dyn GpuAccess>> {
        self.step("hipGetDevice", String::new()).map_err(|e| Error::System(format!("no GPU: {e}")))?;
        Ok(Arc::new(StandInGpu(self.clone())))
    }
    fn export_dmabuf(&self, _addr: u64, _len: u64) -> std::result::Result<rccl_rust_gin::gpu::hip::DmaBufRange, String> {
        if !self.dmabuf {
            return Err("the stand-in exports no dma-bufs".into());
        }
        let f = std::fs::File::open("/dev/null").map_err(|e| e.to_string())?;
        Ok(rccl_rust_gin::gpu::hip::DmaBufRange { fd: f.into(), offset: 0 })
    }

    unsafe fn bnxt_alloc_user_buf(&self, pd: Handle, addr: u64, size: usize, fd: i32) -> io::Result<Handle> {
        self.step("ibv_alloc_user_buf", format!("{addr:#x} {size} fd {fd}"))?;
        if !self.is_live(pd, Kind::Pd) || size == 0 {
            return Err(einval());
        }
        let h = self.make(Kind::UserBuf);
        self.st().user_bufs.insert(h.0, UserBuf { addr, size, fd });
        Ok(h)
    }
    fn bnxt_free_user_buf(&self, buf: Handle) {
        let _ = self.destroy(buf, Kind::UserBuf, "ibv_free_user_buf");
    }
    fn bnxt_default_db_region(&self, _ctx: Handle) -> io::Result<BnxtDbRegion> {
        self.step("bnxt_re_dv_get_default_db_region", String::new())?;
        Ok(BnxtDbRegion { dpi: BNXT_DPI, dbr: self.page(0) })
    }
    fn bnxt_ctx_private(&self, _ctx: Handle) -> io::Result<BnxtCtxPrivate> {
        self.step("bnxt_re_context (private)", String::new())?;
        let dbpage = if self.bnxt_layout { self.page(0) } else { 0x4000 };
        Ok(BnxtCtxPrivate { dbpage, wqe_mode: self.bnxt_wqe_mode })
    }
    fn bnxt_create_cq(&self, _ctx: Handle, umem: Handle, offset: u64, ncqe: u32) -> io::Result<Handle> {
        self.step("bnxt_re_dv_create_cq", format!("umem {umem:?} offset {offset} ncqe {ncqe}"))?;
        let b = self.st().user_bufs.get(&umem.0).cloned().ok_or_else(einval)?;
        fd_open(b.fd)?;
        // bnxt_re_dv_is_valid_buf (dv.c:143-149), size = ncqe * 32 (dv.c:170).
        if !offset.is_multiple_of(PAGE as u64) || offset + ncqe as u64 * 32 > b.size as u64 || !self.is_live(umem, Kind::UserBuf) {
            return Err(einval());
        }
        let h = self.make(Kind::Cq);
        let cqid = 0x30 + (h.0 as u32 & 0xff);
        self.st().cqs.insert(h.0, (ncqe, cqid, None));
        Ok(h)
    }
    fn bnxt_cq_id(&self, cq: Handle) -> io::Result<u32> {
        self.log("bnxt_re_dv_init_obj(CQ)", format!("{cq:?}"));
        if !self.cq_id_query {
            return Err(io::Error::other("libbnxt_re.so.1 has no bnxt_re_dv_init_obj"));
        }
        self.st().cqs.get(&cq.0).map(|c| c.1).ok_or_else(einval)
    }
    fn bnxt_create_qp(&self, pd: Handle, cq: Handle, a: &BnxtQpInit) -> io::Result<(Handle, u32)> {
        self.step("bnxt_re_dv_create_qp", format!("{a:?}"))?;
        let bufs = self.st().user_bufs.clone();
        for h in [a.sq_umem, a.rq_umem] {
            fd_open(bufs.get(&h.0).map(|b| b.fd).unwrap_or(-1))?;
        }
        let valid = |h: Handle, off: u64, len: u32| {
            bufs.get(&h.0).is_some_and(|b| off.is_multiple_of(PAGE as u64) && off + len as u64 <= b.size as u64)
                && self.is_live(h, Kind::UserBuf)
        };
        // dv.c:332-333 and :349-350; the SQ holds slots and MSN table.
        let needs = a.sq_slots as u64 * 16 + a.sq_npsn as u64 * 8;
        if !self.is_live(pd, Kind::Pd)
            || !self.is_live(cq, Kind::Cq)
            || !valid(a.sq_umem, a.sq_umem_offset, a.sq_len)
            || !valid(a.rq_umem, a.rq_umem_offset, a.rq_len)
            || (a.sq_len as u64) < needs
            || a.max_send_wr == 0
        {
            return Err(einval());
        }
        let h = self.make(Kind::Qp);
        let num = 0x100 + (h.0 as u32 & 0xfff);
        self.st().qps.insert(
            h.0,
            Qp {
                num,
                state: 0,
                gda_send: false,
                gda_recv: false,
                sq_in_cmb: false,
                bnxt: Some(a.clone()),
                transitions: vec![],
            },
        );
        Ok((h, num))
    }

    fn ionic_alloc_parent_domain(&self, _ctx: Handle, pd: Handle, mem: Arc<dyn DomainMemory>) -> io::Result<Handle> {
        self.step("ibv_alloc_parent_domain", "ALLOCATORS | PD_CONTEXT".into())?;
        if !self.is_live(pd, Kind::Pd) {
            return Err(einval());
        }
        let h = self.make(Kind::Domain);
        // The NIC's default: the SQ in the controller memory bar with the
        // express doorbell (what a Pollara offers unless told otherwise).
        self.st().domains.insert(h.0, (mem, true, true));
        Ok(h)
    }
    fn ionic_pd_set_cmb(&self, pd: Handle, send: bool, enable: bool, expdb: bool, require: bool) -> io::Result<()> {
        self.step(if send { "ionic_dv_pd_set_sqcmb" } else { "ionic_dv_pd_set_rqcmb" }, format!("{enable} {expdb} {require}"))?;
        let mut s = self.st();
        let d = s.domains.get_mut(&pd.0).ok_or_else(einval)?;
        if send {
            d.1 = enable;
            d.2 = expdb;
        }
        Ok(())
    }
    fn ionic_create_cq(&self, _ctx: Handle, pd: Handle, cqe: u32) -> io::Result<Handle> {
        self.step("ibv_create_cq_ex", format!("cqe {cqe} parent domain {pd:?}"))?;
        let (mem, _, _) = self.st().domains.get(&pd.0).cloned().ok_or_else(einval)?;
        let depth = (cqe + 1).next_power_of_two();
        let ptr = mem.alloc(depth as usize * 32, PAGE, rccl_rust_gin::provider::ionic::PD_TAG_CQ).ok_or_else(einval)?;
        let h = self.make(Kind::Cq);
        let engine = self.engine_of(pd);
        self.st().udma_of.insert(h.0, engine);
        let qid = 0x30 + (h.0 as u32 & 0xff);
        let q = IonicDvQueue {
            ptr,
            size: depth as usize * 32,
            db_val: (qid as u64) << 24,
            mask: (depth - 1) as u16,
            depth_log2: depth.trailing_zeros() as u8,
            stride_log2: 5,
        };
        self.st().cqs.insert(h.0, (cqe, qid, Some(q)));
        Ok(h)
    }
    fn ionic_create_qp(&self, pd: Handle, cq: Handle, a: &IonicQpInit) -> io::Result<(Handle, u32)> {
        self.step("ibv_create_qp", format!("{a:?} parent domain {pd:?}"))?;
        let (mem, cmb, _) = self.st().domains.get(&pd.0).cloned().ok_or_else(einval)?;
        if !self.is_live(cq, Kind::Cq) {
            return Err(einval());
        }
        let sq_depth = (a.max_send_wr + 1).next_power_of_two();
        let rq_depth = (a.max_recv_wr + 1).next_power_of_two();
        let sq_ptr = if cmb {
            self.page(2) // the controller memory bar: not the domain's memory
        } else {
            mem.alloc(sq_depth as usize * 64, PAGE, rccl_rust_gin::provider::ionic::PD_TAG_SQ).ok_or_else(einval)?
        };
        let rq_ptr =
            mem.alloc(rq_depth as usize * 64, PAGE, rccl_rust_gin::provider::ionic::PD_TAG_RQ).ok_or_else(einval)?;
        let h = self.make(Kind::Qp);
        let engine = self.engine_of(pd);
        self.st().udma_of.insert(h.0, engine);
        let num = 0x100 + (h.0 as u32 & 0xfff);
        let q = |ptr, depth: u32| IonicDvQueue {
            ptr,
            size: depth as usize * 64,
            db_val: (num as u64) << 24,
            mask: (depth - 1) as u16,
            depth_log2: depth.trailing_zeros() as u8,
            stride_log2: 6,
        };
        let mut s = self.st();
        s.ionic_rings.insert(h.0, (q(if cmb { 0 } else { sq_ptr }, sq_depth), q(rq_ptr, rq_depth)));
        s.qps.insert(
            h.0,
            Qp { num, state: 0, gda_send: false, gda_recv: false, sq_in_cmb: cmb, bnxt: None, transitions: vec![] },
        );
        let _ = sq_ptr;
        Ok((h, num))
    }
    fn ionic_qp_set_gda(&self, qp: Handle, send: bool, recv: bool) -> io::Result<()> {
        self.step("ionic_dv_qp_set_gda", format!("send {send} recv {recv}"))?;
        let expdb = self.st().domains.values().next().map(|d| d.1 && d.2).unwrap_or(false);
        let mut s = self.st();
        let q = s.qps.get_mut(&qp.0).ok_or_else(einval)?;
        if send && q.sq_in_cmb && expdb {
            return Err(einval()); // ionic_dv.c:166-167
        }
        q.gda_send = send;
        q.gda_recv = recv;
        Ok(())
    }
    fn ionic_get_ctx(&self, _ctx: Handle) -> io::Result<IonicDvCtx> {
        self.step("ionic_dv_get_ctx", String::new())?;
        Ok(IonicDvCtx {
            db_page: self.page(1),
            db_ptr: self.page(1) + IONIC_DB_OFFSET,
            sq_qtype: IONIC_SQ_QTYPE,
            rq_qtype: IONIC_RQ_QTYPE,
            cq_qtype: IONIC_CQ_QTYPE,
        })
    }
    fn ionic_ctx_private(&self, _ctx: Handle) -> io::Result<IonicCtxPrivate> {
        self.step("ionic_ctx (private)", String::new())?;
        let shift = if self.ionic_layout { 0 } else { 1 };
        Ok(IonicCtxPrivate {
            pg_shift: 12,
            version: self.ionic_version,
            sq_qtype: IONIC_SQ_QTYPE + shift,
            rq_qtype: IONIC_RQ_QTYPE + shift,
            cq_qtype: IONIC_CQ_QTYPE + shift,
        })
    }
    fn ionic_qp_get_udma_idx(&self, qp: Handle) -> io::Result<u8> {
        self.log("ionic_dv_qp_get_udma_idx", String::new());
        self.st().udma_of.get(&qp.0).copied().ok_or_else(einval)
    }
    fn ionic_ctx_udma_mask(&self, _ctx: Handle) -> io::Result<u8> {
        self.log("ionic_dv_ctx_get_udma_mask", String::new());
        Ok(self.udma_mask)
    }
    fn ionic_pd_set_udma_mask(&self, pd: Handle, mask: u8) -> io::Result<()> {
        self.step("ionic_dv_pd_set_udma_mask", format!("{mask:#x}"))?;
        let mut s = self.st();
        if !s.domains.contains_key(&pd.0) {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        if mask & !self.udma_mask != 0 {
            return Err(einval()); // ionic_dv_pd_set_udma_mask.3
        }
        s.domain_udma.insert(pd.0, mask);
        Ok(())
    }
    fn ionic_get_cq(&self, cq: Handle, udma_idx: u8) -> io::Result<IonicDvQueue> {
        self.step("ionic_dv_get_cq", format!("udma {udma_idx}"))?;
        if self.st().udma_of.get(&cq.0) != Some(&udma_idx) {
            return Err(einval()); // the CQ has no ring on another engine
        }
        self.st().cqs.get(&cq.0).and_then(|c| c.2).ok_or_else(einval)
    }
    fn ionic_get_qp(&self, qp: Handle) -> io::Result<(IonicDvQueue, IonicDvQueue)> {
        self.step("ionic_dv_get_qp", String::new())?;
        let (mut sq, rq) = self.st().ionic_rings.get(&qp.0).copied().ok_or_else(einval)?;
        if sq.ptr == 0 {
            sq.ptr = self.page(2);
        }
        Ok((rq, sq))
    }
}

struct StandInGpu(StandIn);

impl GpuAccess for StandInGpu {
    fn allocator(&self) -> Arc<dyn Allocator> {
        Arc::new(StandInAlloc(self.0.clone()))
    }
    fn map_io(&self, addr: usize, len: usize) -> io::Result<Box<dyn DeviceMapping>> {
        self.0.step("hipHostRegister(IoMemory)", format!("{addr:#x} {len}"))?;
        let h = self.0.make(Kind::Mapping);
        Ok(Box::new(Mapping(self.0.clone(), h, addr as u64 + GPU_IO_OFFSET)))
    }
}

struct Mapping(StandIn, Handle, u64);
impl DeviceMapping for Mapping {
    fn dev_addr(&self) -> u64 {
        self.2
    }
}
impl Drop for Mapping {
    fn drop(&mut self) {
        let _ = self.0.destroy(self.1, Kind::Mapping, "hipHostUnregister");
    }
}

/// Host memory, each allocation recorded (and able to fail).
struct StandInAlloc(StandIn);
impl Allocator for StandInAlloc {
    fn alloc(&self, len: usize, align: usize, object: Object) -> io::Result<GpuBuf> {
        self.0.step("hipHostMalloc", format!("{object:?} {len}"))?;
        HostMemory.alloc(len, align, object)
    }
    fn describe(&self) -> String {
        "stand-in GPU memory".into()
    }
}

// ---------------------------------------------------------------------------

struct Run {
    qps: Vec<(u32, rust_gin_nic_sq)>,
    /// The family each QP's descriptor (through the provider interface) says.
    families: Vec<NicFamily>,
    keys: (u32, u32),
}

/// probe, open, two family QPs connected to each other, one registration,
/// the refused mlx5 QP, then everything dropped newest first.
fn run(s: &StandIn, family: Family, mode: MemoryMode) -> Result<Run> {
    run_with(s, family, mode, &Config::default())
}

fn run_with(s: &StandIn, family: Family, mode: MemoryMode, config: &Config) -> Result<Run> {
    let p = DvProvider::probe_on(s.platform(), family, config)?;
    assert_eq!(p.kind(), family.kind());
    let nic = p.open_mode(0, mode)?;
    // Through the provider interface, as createContext makes them.
    let a = Nic::create_qp(&*nic, 6, 3, false)?;
    let b = Nic::create_qp(&*nic, 6, 3, false)?;
    let me = nic.address();
    a.connect(&me, b.qpn())?;
    b.connect(&me, a.qpn())?;
    let data = HostMemory.alloc(2 * PAGE, PAGE, Object::WindowData).expect("host memory");
    // SAFETY: `data` outlives the region (declared before it).
    let mr = unsafe { nic.reg_mr(data.dev_addr(), PAGE as u64, Access::all())? };
    let nic_desc = |q: &dyn QueuePair, peer: u32| match q.descriptor(peer, 0xe770, 5) {
        QueueDescriptor::Nic(f, d) => (f, d),
        QueueDescriptor::Mlx5(_) => panic!("a {} QP with an mlx5 descriptor", family.name()),
    };
    let ((fa, da), (fb, db)) = (nic_desc(a.as_ref(), 1), nic_desc(b.as_ref(), 2));
    Ok(Run {
        qps: vec![(a.qpn(), da), (b.qpn(), db)],
        families: vec![fa, fb, Nic::family(&*nic)],
        keys: (mr.lkey(), mr.rkey()),
    })
}

fn assert_connected(s: &StandIn) {
    let qps = s.qps();
    assert_eq!(qps.len(), 2);
    for q in &qps {
        let peer = qps.iter().find(|o| o.num != q.num).unwrap().num;
        assert_eq!(q.state, 3, "QP {:#x} reached RTS", q.num);
        match &q.transitions[..] {
            [QpTransition::Init { port: 1, access }, QpTransition::Rtr { mtu, dest_qpn, hop_limit, sgid_index, traffic_class, dgid, max_dest_rd_atomic, .. }, QpTransition::Rts { timeout, retry_cnt, rnr_retry, max_rd_atomic, .. }] =>
            {
                assert_eq!(*access & 0x8, 0, "no REMOTE_ATOMIC on the QP (neither family does atomics into GPU memory)");
                assert_eq!(*access, 0x7, "local write, remote write, remote read");
                assert_eq!(*mtu, 5, "path MTU = the port's active MTU (4096)");
                assert_eq!(*dest_qpn, peer);
                assert_eq!(*hop_limit, 255, "hop limit 255 (mori PR 588: 1 drops routed traffic)");
                assert_eq!(*sgid_index, 1, "the RoCE v2 IPv4-mapped GID");
                assert_eq!(dgid[12..], [10, 0, 0, 7]);
                assert_eq!(*traffic_class, 3);
                assert_eq!(*max_dest_rd_atomic, 16, "min(16, max_qp_rd_atom 32)");
                assert_eq!((*timeout, *retry_cnt, *rnr_retry, *max_rd_atomic), (20, 7, 7, 8));
            }
            t => panic!("QP {:#x}: transitions {t:?}", q.num),
        }
    }
}

/// The QPs createContext gets from this NIC are of its family, with the
/// family-neutral descriptor the GIN operations post through.
fn assert_family(r: &Run, family: Family) {
    let want = match family {
        Family::Bnxt => NicFamily::Bnxt,
        Family::Ionic => NicFamily::Ionic,
        Family::Mlx5 => NicFamily::Mlx5,
    };
    assert_eq!(r.families, vec![want; 3], "QP descriptors and the NIC name its family");
}

#[test]
fn bnxt_re_creates_queues_in_gpu_memory_and_fills_the_descriptor() {
    let s = StandIn::bnxt();
    let r = run(&s, Family::Bnxt, MemoryMode::Gpu).expect("the bnxt_re control path over the stand-in");
    s.assert_clean("after the run");
    assert_connected(&s);
    assert_family(&r, Family::Bnxt);
    assert_ne!(r.keys.0, 0);

    // The sequence: default doorbell region, mapped for the GPU; per QP the
    // rings allocated, described, then CQ, CQ id, QP.
    let names = s.names();
    let at = |n: &str| names.iter().position(|x| x == n).unwrap_or_else(|| panic!("{n} not called: {names:?}"));
    assert!(at("bnxt_re_dv_get_default_db_region") < at("hipHostRegister(IoMemory)"));
    assert!(at("hipHostRegister(IoMemory)") < at("ibv_alloc_user_buf"));
    assert!(at("ibv_alloc_user_buf") < at("bnxt_re_dv_create_cq"));
    assert!(at("bnxt_re_dv_create_cq") < at("bnxt_re_dv_init_obj(CQ)"));
    assert!(at("bnxt_re_dv_init_obj(CQ)") < at("bnxt_re_dv_create_qp"));
    assert_eq!(names.iter().filter(|n| *n == "hipHostRegister(IoMemory)").count(), 1, "one mapping per NIC");
    let rings: Vec<String> =
        s.calls().into_iter().filter(|c| c.name == "hipHostMalloc").map(|c| c.detail).collect();
    assert!(rings.iter().any(|d| d.starts_with("CompletionRing(Host) 4096")), "{rings:?}");
    assert!(rings.iter().any(|d| d.starts_with("SendRing(Host) 12288")), "64 WQEs x 128 + 64 x 8, in pages: {rings:?}");

    for (qpn, d) in &r.qps {
        let q = s.qps().into_iter().find(|q| q.num == *qpn).unwrap();
        let a = q.bnxt.unwrap();
        // Static WQE mode: 8 slots per WQE; MSN entries = WQEs (verbs.c:1451-1458).
        assert_eq!((a.max_send_wr, a.sq_slots, a.sq_npsn), (64, 512, 64));
        assert_eq!(a.sq_len, 12288, "512 slots x 16 + 64 MSN entries x 8, in whole pages");
        assert_eq!((a.max_send_sge, a.max_inline_data, a.max_recv_wr), (1, 8, 1));
        assert_eq!(d.qpn, *qpn, "bnxt_re rings the SQ with the QP id");
        assert_eq!(d.log_wqe_cnt, 6);
        assert_eq!(d.log_cq_cnt, 6);
        assert_eq!(d.cq_phase, 1, "BNXT_RE_QUEUE_START_PHASE");
        let db = s.page(0) as u64 + GPU_IO_OFFSET;
        assert_eq!((d.sq_db, d.cq_db), (db, db), "both doorbells on the GPU mapping of the DPI page");
        assert_eq!(d.host_doorbell, 0, "GPU mode: no host doorbell");
        assert_eq!((d.peer, d.error, d.timeout_ns), (if *qpn == r.qps[0].0 { 1 } else { 2 }, 0xe770, 5));
        assert!((0x30..0x130).contains(&d.cqn), "the CQ id the library reported: {:#x}", d.cqn);
        assert_ne!(d.wqe_buf, 0);
        assert_ne!(d.state, 0);
    }
    assert_ne!(r.qps[0].1.wqe_buf, r.qps[1].1.wqe_buf);
}

#[test]
fn bnxt_re_user_buffers_are_the_rings_the_descriptor_names() {
    let s = StandIn::bnxt();
    let p = DvProvider::probe_on(s.platform(), Family::Bnxt, &Config::default()).unwrap();
    let nic = p.open_mode(0, MemoryMode::Host).unwrap();
    let q = nic.create_family_qp(7, 0, false).unwrap();
    let d = q.descriptor(0, 0, 0);
    let bufs: Vec<UserBuf> = s.st().user_bufs.values().cloned().collect();
    assert!(bufs.iter().any(|b| b.addr == d.wqe_buf && b.size == 20480), "the SQ buffer: {bufs:?} vs {:#x}", d.wqe_buf);
    assert!(bufs.iter().any(|b| b.addr == d.cq_buf && b.size == 4096), "the CQ buffer: {bufs:?}");
    assert!(bufs.iter().all(|b| b.fd == -1), "host memory goes by address");
    assert_eq!(d.sq_db, s.page(0) as u64, "host mode: the CPU mapping");
    assert_ne!(d.host_doorbell, 0, "host mode: the MMIO host doorbell");
    assert_eq!(d.log_wqe_cnt, 7);
    drop(q);
    drop(nic);
    s.assert_clean("host mode");
}

#[test]
fn bnxt_re_device_memory_rings_go_as_dma_bufs_kept_open_until_imported() {
    let mut s = StandIn::bnxt();
    s.dmabuf = true;
    let p = DvProvider::probe_on(s.platform(), Family::Bnxt, &Config::default()).unwrap();
    let nic = p.open_mode(0, MemoryMode::Gpu).unwrap();
    let q = nic.create_family_qp(6, 0, true).expect("rings in device memory, described by dma-buf");
    let bufs: Vec<UserBuf> = s.st().user_bufs.values().cloned().collect();
    assert_eq!(bufs.len(), 3);
    assert!(bufs.iter().all(|b| b.fd >= 0), "device memory goes as a dma-buf: {bufs:?}");
    let rings: Vec<String> = s.calls().into_iter().filter(|c| c.name == "hipHostMalloc").map(|c| c.detail).collect();
    assert!(rings.iter().any(|d| d.starts_with("SendRing(Device)")) && rings.iter().any(|d| d.starts_with("CompletionRing(Device)")));
    drop(q);
    drop(nic);
    s.assert_clean("device-memory rings");
}

#[test]
fn bnxt_re_without_a_cq_id_query_is_a_clear_error() {
    let mut s = StandIn::bnxt();
    s.cq_id_query = false;
    let p = DvProvider::probe_on(s.platform(), Family::Bnxt, &Config::default()).unwrap();
    let nic = p.open_mode(0, MemoryMode::Gpu).unwrap();
    let e = nic.create_family_qp(6, 0, false).err().expect("no CQ id, no CQ doorbell");
    assert!(e.to_string().contains("bnxt_re_dv_init_obj"), "{e}");
    drop(nic);
    s.assert_clean("after the refused QP");
}

#[test]
fn ionic_puts_qps_in_gda_mode_with_rings_from_the_parent_domain() {
    let s = StandIn::ionic();
    let r = run(&s, Family::Ionic, MemoryMode::Gpu).expect("the ionic control path over the stand-in");
    s.assert_clean("after the run");
    assert_connected(&s);
    assert_family(&r, Family::Ionic);

    let names = s.names();
    let at = |n: &str| names.iter().position(|x| x == n).unwrap_or_else(|| panic!("{n} not called: {names:?}"));
    assert!(at("ibv_alloc_parent_domain") < at("ionic_dv_pd_set_sqcmb"));
    assert!(at("ionic_dv_pd_set_sqcmb") < at("ibv_create_cq_ex"));
    assert!(at("ionic_dv_pd_set_rqcmb") < at("ibv_create_cq_ex"));
    assert!(at("ionic_dv_get_ctx") < at("hipHostRegister(IoMemory)"));
    assert!(at("ibv_create_cq_ex") < at("ibv_create_qp"));
    assert!(at("ibv_create_qp") < at("ionic_dv_qp_set_gda"));
    assert!(at("ionic_dv_qp_set_gda") < at("ibv_modify_qp"));
    for c in s.calls().iter().filter(|c| c.name.starts_with("ionic_dv_pd_set_") && c.name.ends_with("cmb")) {
        assert_eq!(c.detail, "false false false", "controller memory bar off, no express doorbell");
    }
    for q in s.qps() {
        assert!(q.gda_send && q.gda_recv, "QP {:#x} in GPU-direct-async mode for send and receive", q.num);
        assert!(s.gpu_doorbell_rings(q.num));
    }
    let rings: Vec<String> = s.calls().into_iter().filter(|c| c.name == "hipHostMalloc").map(|c| c.detail).collect();
    assert!(rings.iter().any(|d| d.starts_with("CompletionRing(Host)")), "the CQ ring by its tag: {rings:?}");
    for (qpn, d) in &r.qps {
        assert_eq!(d.qpn, *qpn, "the SQ's qid, from db_val >> 24");
        assert!((0x30..0x130).contains(&d.cqn), "the CQ's qid: {:#x}", d.cqn);
        // 64 WQEs + 1, rounded up by the stand-in's libionic: 128.
        assert_eq!((d.log_wqe_cnt, d.log_cq_cnt), (7, 7));
        let db = s.page(1) as u64 + GPU_IO_OFFSET + IONIC_DB_OFFSET as u64;
        assert_eq!(d.sq_db, db + 8 * IONIC_SQ_QTYPE as u64, "dbpage[sq_qtype] on the GPU mapping");
        assert_eq!(d.cq_db, db + 8 * IONIC_CQ_QTYPE as u64, "dbpage[cq_qtype]");
        assert_ne!(d.wqe_buf, s.page(2) as u64, "not in the controller memory bar");
        assert_eq!(d.cq_phase, 0);
    }
}

#[test]
fn ionic_registrations_leave_out_remote_atomic() {
    let s = StandIn::ionic();
    let p = DvProvider::probe_on(s.platform(), Family::Ionic, &Config::default()).unwrap();
    let nic = p.open_mode(0, MemoryMode::Host).unwrap();
    let data = HostMemory.alloc(PAGE, PAGE, Object::WindowData).unwrap();
    // SAFETY: `data` outlives the region.
    let mr = unsafe { nic.reg_mr(data.dev_addr(), PAGE as u64, Access::all()) }.unwrap();
    let c = s.calls().into_iter().find(|c| c.name == "ibv_reg_mr").unwrap();
    assert!(c.detail.ends_with("access 0x7"), "ionic refuses REMOTE_ATOMIC (mori 682): {}", c.detail);
    drop(mr);
    drop(nic);
    s.assert_clean("registration");
}

#[test]
fn both_families_report_no_atomics_into_gpu_memory() {
    for (s, fam) in [(StandIn::bnxt(), Family::Bnxt), (StandIn::ionic(), Family::Ionic)] {
        for cap in [0, 1] {
            let mut s = s.clone();
            s.atomic_cap = cap;
            let p = DvProvider::probe_on(s.platform(), fam, &Config::default()).unwrap();
            let nic = p.open_mode(0, MemoryMode::Host).unwrap();
            let c = nic.capabilities();
            assert!(c.remote_atomics.is_no(), "{fam:?} atomic_cap {cap}: {c}");
            assert_eq!(c.signal_mode(), rccl_rust_gin::provider::caps::SignalMode::SlotWrite, "no remote-atomic signals on {fam:?}: auto picks slot writes");
            assert!(!nic.family_capabilities().atomics_into_gpu_memory);
        }
    }
}

#[test]
fn a_failure_at_every_step_is_an_error_that_leaks_nothing() {
    for (mk, fam) in [(StandIn::bnxt as fn() -> StandIn, Family::Bnxt), (StandIn::ionic, Family::Ionic)] {
        let full = mk();
        run(&full, fam, MemoryMode::Gpu).expect("a clean run");
        let steps = full.st().steps;
        assert!(steps > 20, "{fam:?}: {steps} steps");
        for n in 1..=steps {
            let s = mk().fail_at(n);
            let r = run(&s, fam, MemoryMode::Gpu);
            let failed = s.calls().into_iter().find(|c| c.detail.ends_with("FAILED")).expect("the step failed");
            let e = r.err().unwrap_or_else(|| panic!("{fam:?} step {n} ({}) failed, yet the run succeeded", failed.name));
            assert!(matches!(e, Error::System(_)), "{fam:?} step {n} ({}): {e:?}", failed.name);
            s.assert_clean(&format!("{fam:?}, failure at step {n} ({})", failed.name));
        }
    }
}

// ---------------------------------------------------------------------------
// Firmware and ABI gates (nic/gates.rs; docs/nic-families.md)
// ---------------------------------------------------------------------------

/// The ionic firmware WQE ABI version the context reports reaches every
/// queue's descriptor, so the device writes that version's opcodes.
#[test]
fn ionic_descriptors_carry_the_firmware_wqe_abi_version() {
    for v in [1, 2] {
        let s = StandIn { ionic_version: v, ..StandIn::ionic() };
        let r = run(&s, Family::Ionic, MemoryMode::Gpu).expect("ionic over the stand-in");
        s.assert_clean("after the run");
        for (qpn, d) in &r.qps {
            assert_eq!(d.wqe_abi, v as u32, "QP {qpn:#x}: the descriptor names firmware WQE ABI version {v}");
        }
        assert!(s.names().iter().any(|n| n == "ionic_ctx (private)"), "the version was read");
    }
    // bnxt_re leaves it 0.
    let s = StandIn::bnxt();
    let r = run(&s, Family::Bnxt, MemoryMode::Gpu).expect("bnxt_re over the stand-in");
    assert!(r.qps.iter().all(|(_, d)| d.wqe_abi == 0));
}

/// Any other version, or a context whose layout is not ionic.h's (so the
/// version cannot be trusted), refuses the NIC with an error naming it,
/// before any queue exists.
#[test]
fn ionic_refuses_an_unknown_or_unreadable_firmware_wqe_abi() {
    for (s, want) in [
        (StandIn { ionic_version: 0, ..StandIn::ionic() }, "ionic firmware WQE ABI version 0"),
        (StandIn { ionic_version: 3, ..StandIn::ionic() }, "ionic firmware WQE ABI version 3"),
        (StandIn { ionic_layout: false, ..StandIn::ionic() }, "cannot be read"),
    ] {
        let e = run(&s, Family::Ionic, MemoryMode::Gpu).err().expect("refused");
        assert!(matches!(e, Error::System(_)), "{e:?}");
        assert!(e.message().contains("ionic_0") && e.message().contains(want), "{want}: {e}");
        assert!(!s.names().iter().any(|n| n == "ibv_create_qp"), "refused before any QP: {:?}", s.names());
        s.assert_clean(want);
    }
}

/// bnxt_re: a context in variable WQE mode (or one whose mode cannot be
/// read) is refused; static mode goes on.
#[test]
fn bnxt_re_refuses_a_variable_wqe_mode_context() {
    for (s, want) in [
        (StandIn { bnxt_wqe_mode: 1, ..StandIn::bnxt() }, "variable WQE mode"),
        (StandIn { bnxt_wqe_mode: 3, ..StandIn::bnxt() }, "cannot be read"),
        (StandIn { bnxt_layout: false, ..StandIn::bnxt() }, "cannot be read"),
    ] {
        let e = run(&s, Family::Bnxt, MemoryMode::Gpu).err().expect("refused");
        assert!(matches!(e, Error::System(_)), "{e:?}");
        assert!(e.message().contains("bnxt_re0") && e.message().contains(want), "{want}: {e}");
        assert!(!s.names().iter().any(|n| n == "bnxt_re_dv_create_qp"), "refused before any QP");
        s.assert_clean(want);
    }
    let s = StandIn { bnxt_wqe_mode: 0, ..StandIn::bnxt() };
    run(&s, Family::Bnxt, MemoryMode::Gpu).expect("static mode");
    assert!(s.names().iter().any(|n| n == "bnxt_re_context (private)"), "the mode was read");
}

/// Firmware below the versions known to be needed: a WARN and on by
/// default, refused with RCCL_RUST_GIN_FW_CHECK=refuse, unchecked with off.
#[test]
fn old_firmware_warns_or_is_refused_as_configured() {
    let cfg = |fw_check| Config { fw_check, ..Config::default() };
    for (mk, fam, old, good) in [
        (StandIn::bnxt as fn() -> StandIn, Family::Bnxt, "236.1.140.0", "235.2.86.0"),
        (StandIn::ionic, Family::Ionic, "1.117.5-a-44", "1.117.5-a-45"),
    ] {
        let with = |fw: &str| StandIn { fw_ver: fw.into(), ..mk() };
        let e = run_with(&with(old), fam, MemoryMode::Gpu, &cfg(FwCheck::Refuse)).err().expect("refused");
        assert!(matches!(e, Error::System(_)) && e.message().contains(old), "{e}");
        assert!(e.message().contains("RCCL_RUST_GIN_FW_CHECK"), "names the knob: {e}");
        run_with(&with(old), fam, MemoryMode::Gpu, &cfg(FwCheck::Warn)).expect("warn goes on");
        run_with(&with(old), fam, MemoryMode::Gpu, &cfg(FwCheck::Off)).expect("off goes on");
        run_with(&with(good), fam, MemoryMode::Gpu, &cfg(FwCheck::Refuse)).expect("a good firmware");
    }
}

#[test]
fn the_nic_family_is_chosen_by_vendor() {
    let config = Config::default();
    let pick = |devs: &[(&str, Option<u32>)]| {
        provider::select_by_vendor(StandIn::new(devs).platform(), &config, MemoryMode::Gpu)
    };
    assert!(pick(&[("mlx5_0", Some(VENDOR_MELLANOX)), ("bnxt_re0", Some(VENDOR_BROADCOM))]).is_none(), "ConnectX first");
    assert!(pick(&[]).is_none(), "no device: the mlx5 probe's error stands");
    let p = pick(&[("rocep1s0", Some(VENDOR_BROADCOM))]).unwrap().unwrap();
    assert_eq!(p.kind(), ProviderKind::Bnxt, "by vendor, whatever the name");
    let p = pick(&[("ionic_0", None)]).unwrap().unwrap();
    assert_eq!(p.kind(), ProviderKind::Ionic, "by name when sysfs has no vendor");
    let e = pick(&[("irdma0", Some(0x8086)), ("siw0", None)]).unwrap().err().unwrap();
    let m = e.to_string();
    assert!(m.contains("irdma0 (PCI vendor 0x8086)") && m.contains("siw0"), "names the NICs it cannot drive: {m}");
    let only = Config { nic_filter: Some("ionic_1".into()), ..Config::default() };
    let e = DvProvider::probe_on(StandIn::ionic().platform(), Family::Ionic, &only).err().unwrap();
    assert!(e.to_string().contains("RCCL_RUST_GIN_NIC=ionic_1"), "{e}");
}

#[test]
fn provider_names_parse() {
    let c = |v: &str| Config::from_lookup(|k| (k == "RCCL_RUST_GIN_PROVIDER").then(|| v.to_string()));
    assert_eq!(c("bnxt_re").unwrap().provider, ProviderKind::Bnxt);
    assert_eq!(c("ionic").unwrap().provider, ProviderKind::Ionic);
    assert!(c("efa").is_err());
}

/// RCCL's GIN path (init, listen, connect, createContext through the v14
/// vtable, two ranks as threads) over a bnxt_re NIC whose family the GPU
/// device library was not built with (RUST_GIN_NIC_FAMILIES, mlx5 by
/// default): createContext fails with ncclInvalidUsage before any queue
/// exists, since kernels would find no bnxt_re code (gin/family.h). Built
/// with bnxt, createContext goes on and makes the family's queues.
#[test]
fn the_gin_data_path_needs_the_family_in_the_gpu_build() {
    use rccl_rust_gin::ffi::gin::NcclGinConfig;
    use rccl_rust_gin::ffi::nccl::{NCCL_NET_HANDLE_MAXSIZE, NCCL_SUCCESS};
    use std::ffi::c_void;
    let s = StandIn::bnxt();
    provider::dv::set_process_dv_platform(Some(s.platform()));
    // SAFETY: set before any thread of this test reads the environment; the
    // other tests of this binary never read it (they pass a Config).
    unsafe {
        std::env::set_var("NCCL_GIN_TYPE", "8");
        std::env::set_var("RCCL_RUST_GIN_PROVIDER", "bnxt_re");
        std::env::set_var("RCCL_RUST_GIN_SOCKET_IFNAME", "lo");
        std::env::set_var("RCCL_RUST_GIN_TIMEOUT_MS", "20000");
        // The stand-in executes no WQE: init's loopback self-test cannot
        // pass over it (tests/self_test.rs runs it on the emulated NIC).
        std::env::set_var("RCCL_RUST_GIN_SELF_TEST", "off");
    }
    let v = &rccl_rust_gin::gin::vtable::ncclGinRustPlugin_v14;
    let n = 2;
    let handles = Mutex::new(vec![[0u8; NCCL_NET_HANDLE_MAXSIZE]; n]);
    let barrier = std::sync::Barrier::new(n);
    let results: Vec<i32> = std::thread::scope(|sc| {
        let ts: Vec<_> = (0..n)
            .map(|rank| {
                let (handles, barrier) = (&handles, &barrier);
                sc.spawn(move || {
                    // SAFETY: the plugin's entry points with valid pointers,
                    // in the order RCCL calls them.
                    unsafe {
                        let mut ctx = std::ptr::null_mut();
                        assert_eq!((v.init.unwrap())(&mut ctx, 0x5eed, None), NCCL_SUCCESS, "init over the bnxt_re provider");
                        let mut h = [0u8; NCCL_NET_HANDLE_MAXSIZE];
                        let mut listen = std::ptr::null_mut();
                        assert_eq!((v.listen.unwrap())(ctx, 0, h.as_mut_ptr() as *mut c_void, &mut listen), NCCL_SUCCESS);
                        handles.lock().unwrap()[rank] = h;
                        barrier.wait();
                        let mut all = handles.lock().unwrap().clone();
                        let mut ptrs: Vec<*mut c_void> = all.iter_mut().map(|h| h.as_mut_ptr() as *mut c_void).collect();
                        let mut coll = std::ptr::null_mut();
                        let r = (v.connect.unwrap())(ctx, ptrs.as_mut_ptr(), n as i32, rank as i32, listen, &mut coll);
                        assert_eq!(r, NCCL_SUCCESS, "connect");
                        let mut cfg = NcclGinConfig {
                            n_signals: 4,
                            n_counters: 2,
                            n_contexts: 1,
                            queue_depth: 128,
                            traffic_class: -1,
                            backend_version: 0,
                            rank_stride: 1,
                        };
                        let (mut gc, mut dh) = (std::ptr::null_mut(), std::ptr::null_mut());
                        (v.create_context.unwrap())(coll, &mut cfg, &mut gc, &mut dh)
                    }
                })
            })
            .collect();
        ts.into_iter().map(|t| t.join().unwrap()).collect()
    });
    provider::dv::set_process_dv_platform(None);
    if NicFamily::Bnxt.in_gpu_build() {
        for r in results {
            assert_eq!(r, NCCL_SUCCESS, "createContext on a bnxt_re NIC, bnxt in the GPU build");
        }
        assert!(!s.qps().is_empty(), "the family's queues were made");
    } else {
        for r in results {
            assert_eq!(r, NCCL_INVALID_USAGE, "createContext on a bnxt_re NIC, bnxt not in the GPU build");
        }
        assert!(s.qps().is_empty(), "no queue of any kind was created for the GIN path");
    }
}

/// On a node with a Thor2 or a Pollara: the provider over rdma-core (host
/// memory, the CPU's doorbell mapping), two QPs of the family connected
/// to each other, and a 4 KiB RDMA WRITE posted through the family's
/// device policy in the device library's x86-64 build (the code a kernel
/// runs), polled to completion. Prints what it finds at each step.
#[test]
#[ignore = "needs a bnxt_re or ionic NIC: RUST_GIN_HW_TEST=1 cargo test --test family_providers -- --ignored --nocapture"]
fn hw_loopback_write_through_the_family_policy() {
    use rccl_rust_gin::abi::{rust_gin_error, rust_gin_mlx5_request, RUST_GIN_REQ_SIGNALED};
    use rccl_rust_gin::mlx5::wire::opcode;
    extern "C" {
        fn rust_gin_bnxt_post(sq: *const rust_gin_nic_sq, reqs: *const rust_gin_mlx5_request, n: u32) -> i32;
        fn rust_gin_ionic_post(sq: *const rust_gin_nic_sq, reqs: *const rust_gin_mlx5_request, n: u32) -> i32;
        fn rust_gin_bnxt_poll(sq: *const rust_gin_nic_sq) -> i32;
        fn rust_gin_ionic_poll(sq: *const rust_gin_nic_sq) -> i32;
    }
    assert_eq!(
        std::env::var("RUST_GIN_HW_TEST").as_deref(),
        Ok("1"),
        "this test drives a real Thor2 or Pollara: set RUST_GIN_HW_TEST=1 on a node that has one"
    );
    let config = Config::from_env().expect("RCCL_RUST_GIN_* knobs");
    let platform = provider::dv::process_dv_platform();
    let devs = platform.devices().expect("RDMA devices");
    eprintln!("devices: {}", devs.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "));
    let family = devs
        .iter()
        .filter(|d| config.nic_filter.as_ref().is_none_or(|f| f.split(',').any(|w| w.trim() == d.name)))
        .find_map(|d| Family::of(d).filter(|f| *f != Family::Mlx5))
        .expect("a bnxt_re or ionic device (RCCL_RUST_GIN_NIC chooses one)");
    let p = DvProvider::probe_on(platform, family, &config).expect("probe");
    let nic = p.open_mode(0, MemoryMode::Host).expect("open in host mode");
    eprintln!("{} {:?}\ncapabilities: {}", family.name(), nic.info(), nic.capabilities());
    let me = nic.address();
    let a = nic.create_family_qp(6, 0, false).expect("QP a");
    let b = nic.create_family_qp(6, 0, false).expect("QP b");
    a.connect(&me, b.qpn()).expect("connect a -> b");
    b.connect(&me, a.qpn()).expect("connect b -> a");

    let alloc = nic.allocator();
    let src = alloc.alloc(4096, 4096, Object::WindowData).unwrap();
    let dst = alloc.alloc(4096, 4096, Object::WindowData).unwrap();
    let err = alloc.alloc(std::mem::size_of::<rust_gin_error>(), 64, Object::ErrorRecord).unwrap();
    err.write(0, &vec![0u8; err.len()]);
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    src.write(0, &pattern);
    // SAFETY: both buffers outlive the regions (declared before them).
    let (ms, md) = unsafe {
        (
            nic.reg_mr(src.dev_addr(), 4096, Access::all()).expect("reg src"),
            nic.reg_mr(dst.dev_addr(), 4096, Access::all()).expect("reg dst"),
        )
    };
    let d = a.descriptor(1, err.dev_addr(), 5_000_000_000);
    eprintln!("descriptor: {d:?}");
    let req = rust_gin_mlx5_request {
        opcode: opcode::RDMA_WRITE,
        flags: RUST_GIN_REQ_SIGNALED as u8,
        length: 4096,
        lkey: ms.lkey(),
        rkey: md.rkey(),
        laddr: src.dev_addr(),
        raddr: dst.dev_addr(),
        ..Default::default()
    };
    let (post, poll): (unsafe extern "C" fn(_, _, _) -> i32, unsafe extern "C" fn(_) -> i32) = match family {
        Family::Bnxt => (rust_gin_bnxt_post, rust_gin_bnxt_poll),
        _ => (rust_gin_ionic_post, rust_gin_ionic_poll),
    };
    // SAFETY: a descriptor of a live queue in host memory, one request.
    let r = unsafe { post(&d, &req, 1) };
    assert_eq!(r, 0, "post WRITE");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut got = vec![0u8; 4096];
    loop {
        // SAFETY: as above.
        let r = unsafe { poll(&d) };
        dst.read(0, &mut got);
        if got == pattern || r != 0 {
            assert_eq!(r, 0, "poll: an error completion (the error record: {:?})", err.read_pod::<rust_gin_error>(0));
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the WRITE did not land within 5 s (no CQE, no data)");
        std::thread::yield_now();
    }
    assert_eq!(got, pattern, "WRITE landed");
    eprintln!("WRITE landed; error record {:?}", err.read_pod::<rust_gin_error>(0));
}

/// The hand-written FFI structs (bnxt/ffi.rs, ionic/ffi.rs) against a C
/// compiler's layout of the same declarations, re-stated from the headers
/// they cite (rdma-core PR 1654 bnxt_re_dv.h:47-84, PR 1771 ionic_dv.h:
/// 174-202, MORI's vendored Broadcom bnxt_re_dv.h for bnxt_re_dv_cq/_obj),
/// with the types verbs.h gives them (enum ibv_qp_type, pointers, bool).
const FFI_LAYOUT_C: &str = r#"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <infiniband/verbs.h>
struct ibv_buf;
struct bnxt_re_dv_db_region_attr { uint32_t handle; uint32_t dpi; uint64_t umdbr; uint64_t *dbr; };
struct bnxt_re_dv_cq_init_attr { struct ibv_buf *umem_handle; uint64_t umem_offset; uint32_t ncqe; };
struct bnxt_re_dv_qp_init_attr {
	enum ibv_qp_type qp_type; uint32_t max_send_wr; uint32_t max_recv_wr; uint32_t max_send_sge;
	uint32_t max_recv_sge; uint32_t max_inline_data; struct ibv_cq *send_cq; struct ibv_cq *recv_cq;
	struct ibv_srq *srq; uint64_t qp_handle; void *dbr_handle; struct ibv_buf *sq_umem_handle;
	uint64_t sq_umem_offset; uint32_t sq_len; uint32_t sq_slots; struct ibv_buf *rq_umem_handle;
	uint64_t rq_umem_offset; uint32_t sq_npsn; uint32_t rq_len; uint64_t comp_mask; };
struct bnxt_re_dv_cq { uint32_t cqn; uint32_t cqe_size; uint64_t comp_mask; };
struct bnxt_re_dv_obj {
	struct { struct ibv_qp *in; void *out; } qp; struct { struct ibv_cq *in; struct bnxt_re_dv_cq *out; } cq;
	struct { struct ibv_srq *in; void *out; } srq; struct { struct ibv_ah *in; void *out; } ah;
	struct { struct ibv_pd *in; void *out; } pd; };
struct ionic_dv_ctx { void *db_page; uint64_t *db_ptr; uint8_t sq_qtype; uint8_t rq_qtype; uint8_t cq_qtype; };
struct ionic_dv_queue { void *ptr; size_t size; uint64_t db_val; uint16_t mask; uint8_t depth_log2; uint8_t stride_log2; };
struct ionic_dv_cq { struct ionic_dv_queue q; };
struct ionic_dv_qp { struct ionic_dv_queue rq; struct ionic_dv_queue sq; };
#define S(t) printf("sizeof(%s) %zu\n", #t, sizeof(struct t));
#define O(t, f) printf("%s.%s %zu\n", #t, #f, offsetof(struct t, f));
int main(void) {
	S(bnxt_re_dv_db_region_attr) O(bnxt_re_dv_db_region_attr, dpi) O(bnxt_re_dv_db_region_attr, umdbr) O(bnxt_re_dv_db_region_attr, dbr)
	S(bnxt_re_dv_cq_init_attr) O(bnxt_re_dv_cq_init_attr, umem_offset) O(bnxt_re_dv_cq_init_attr, ncqe)
	S(bnxt_re_dv_qp_init_attr) O(bnxt_re_dv_qp_init_attr, max_inline_data) O(bnxt_re_dv_qp_init_attr, send_cq)
	O(bnxt_re_dv_qp_init_attr, srq) O(bnxt_re_dv_qp_init_attr, qp_handle) O(bnxt_re_dv_qp_init_attr, sq_umem_handle)
	O(bnxt_re_dv_qp_init_attr, sq_len) O(bnxt_re_dv_qp_init_attr, sq_slots) O(bnxt_re_dv_qp_init_attr, rq_umem_handle)
	O(bnxt_re_dv_qp_init_attr, rq_umem_offset) O(bnxt_re_dv_qp_init_attr, sq_npsn) O(bnxt_re_dv_qp_init_attr, rq_len)
	O(bnxt_re_dv_qp_init_attr, comp_mask)
	S(bnxt_re_dv_cq) O(bnxt_re_dv_cq, comp_mask)
	S(bnxt_re_dv_obj) O(bnxt_re_dv_obj, cq.in) O(bnxt_re_dv_obj, cq.out) O(bnxt_re_dv_obj, pd)
	S(ionic_dv_ctx) O(ionic_dv_ctx, db_ptr) O(ionic_dv_ctx, sq_qtype) O(ionic_dv_ctx, rq_qtype) O(ionic_dv_ctx, cq_qtype)
	S(ionic_dv_queue) O(ionic_dv_queue, size) O(ionic_dv_queue, db_val) O(ionic_dv_queue, mask)
	O(ionic_dv_queue, depth_log2) O(ionic_dv_queue, stride_log2)
	S(ionic_dv_cq) S(ionic_dv_qp) O(ionic_dv_qp, sq)
	return 0;
}
"#;

#[test]
fn ffi_structs_have_the_c_layout_of_the_cited_headers() {
    use rccl_rust_gin::provider::bnxt::ffi as b;
    use rccl_rust_gin::provider::ionic::ffi as i;
    use std::mem::{offset_of, size_of};
    let dir = std::env::temp_dir().join(format!("rust-gin-dv-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&src, FFI_LAYOUT_C).unwrap();
    let st = std::process::Command::new("cc").arg("-o").arg(&exe).arg(&src).status().expect("a C compiler (cc)");
    assert!(st.success(), "compiling the layout table against infiniband/verbs.h");
    let out = std::process::Command::new(&exe).output().expect("running the layout table");
    std::fs::remove_dir_all(&dir).ok();
    let c: HashMap<String, usize> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect();
    let rust: &[(&str, usize)] = &[
        ("sizeof(bnxt_re_dv_db_region_attr)", size_of::<b::bnxt_re_dv_db_region_attr>()),
        ("bnxt_re_dv_db_region_attr.dpi", offset_of!(b::bnxt_re_dv_db_region_attr, dpi)),
        ("bnxt_re_dv_db_region_attr.umdbr", offset_of!(b::bnxt_re_dv_db_region_attr, umdbr)),
        ("bnxt_re_dv_db_region_attr.dbr", offset_of!(b::bnxt_re_dv_db_region_attr, dbr)),
        ("sizeof(bnxt_re_dv_cq_init_attr)", size_of::<b::bnxt_re_dv_cq_init_attr>()),
        ("bnxt_re_dv_cq_init_attr.umem_offset", offset_of!(b::bnxt_re_dv_cq_init_attr, umem_offset)),
        ("bnxt_re_dv_cq_init_attr.ncqe", offset_of!(b::bnxt_re_dv_cq_init_attr, ncqe)),
        ("sizeof(bnxt_re_dv_qp_init_attr)", size_of::<b::bnxt_re_dv_qp_init_attr>()),
        ("bnxt_re_dv_qp_init_attr.max_inline_data", offset_of!(b::bnxt_re_dv_qp_init_attr, max_inline_data)),
        ("bnxt_re_dv_qp_init_attr.send_cq", offset_of!(b::bnxt_re_dv_qp_init_attr, send_cq)),
        ("bnxt_re_dv_qp_init_attr.srq", offset_of!(b::bnxt_re_dv_qp_init_attr, srq)),
        ("bnxt_re_dv_qp_init_attr.qp_handle", offset_of!(b::bnxt_re_dv_qp_init_attr, qp_handle)),
        ("bnxt_re_dv_qp_init_attr.sq_umem_handle", offset_of!(b::bnxt_re_dv_qp_init_attr, sq_umem_handle)),
        ("bnxt_re_dv_qp_init_attr.sq_len", offset_of!(b::bnxt_re_dv_qp_init_attr, sq_len)),
        ("bnxt_re_dv_qp_init_attr.sq_slots", offset_of!(b::bnxt_re_dv_qp_init_attr, sq_slots)),
        ("bnxt_re_dv_qp_init_attr.rq_umem_handle", offset_of!(b::bnxt_re_dv_qp_init_attr, rq_umem_handle)),
        ("bnxt_re_dv_qp_init_attr.rq_umem_offset", offset_of!(b::bnxt_re_dv_qp_init_attr, rq_umem_offset)),
        ("bnxt_re_dv_qp_init_attr.sq_npsn", offset_of!(b::bnxt_re_dv_qp_init_attr, sq_npsn)),
        ("bnxt_re_dv_qp_init_attr.rq_len", offset_of!(b::bnxt_re_dv_qp_init_attr, rq_len)),
        ("bnxt_re_dv_qp_init_attr.comp_mask", offset_of!(b::bnxt_re_dv_qp_init_attr, comp_mask)),
        ("sizeof(bnxt_re_dv_cq)", size_of::<b::bnxt_re_dv_cq>()),
        ("bnxt_re_dv_cq.comp_mask", offset_of!(b::bnxt_re_dv_cq, comp_mask)),
        ("sizeof(bnxt_re_dv_obj)", size_of::<b::bnxt_re_dv_obj>()),
        ("bnxt_re_dv_obj.cq.in", offset_of!(b::bnxt_re_dv_obj, cq_in)),
        ("bnxt_re_dv_obj.cq.out", offset_of!(b::bnxt_re_dv_obj, cq_out)),
        ("bnxt_re_dv_obj.pd", offset_of!(b::bnxt_re_dv_obj, pd)),
        ("sizeof(ionic_dv_ctx)", size_of::<i::ionic_dv_ctx>()),
        ("ionic_dv_ctx.db_ptr", offset_of!(i::ionic_dv_ctx, db_ptr)),
        ("ionic_dv_ctx.sq_qtype", offset_of!(i::ionic_dv_ctx, sq_qtype)),
        ("ionic_dv_ctx.rq_qtype", offset_of!(i::ionic_dv_ctx, rq_qtype)),
        ("ionic_dv_ctx.cq_qtype", offset_of!(i::ionic_dv_ctx, cq_qtype)),
        ("sizeof(ionic_dv_queue)", size_of::<i::ionic_dv_queue>()),
        ("ionic_dv_queue.size", offset_of!(i::ionic_dv_queue, size)),
        ("ionic_dv_queue.db_val", offset_of!(i::ionic_dv_queue, db_val)),
        ("ionic_dv_queue.mask", offset_of!(i::ionic_dv_queue, mask)),
        ("ionic_dv_queue.depth_log2", offset_of!(i::ionic_dv_queue, depth_log2)),
        ("ionic_dv_queue.stride_log2", offset_of!(i::ionic_dv_queue, stride_log2)),
        ("sizeof(ionic_dv_cq)", size_of::<i::ionic_dv_cq>()),
        ("sizeof(ionic_dv_qp)", size_of::<i::ionic_dv_qp>()),
        ("ionic_dv_qp.sq", offset_of!(i::ionic_dv_qp, sq)),
    ];
    let mut bad = Vec::new();
    for (k, v) in rust {
        match c.get(*k) {
            Some(cv) if cv == v => {}
            other => bad.push(format!("{k}: Rust {v}, C {other:?}")),
        }
    }
    assert_eq!(c.len(), rust.len(), "every fact the C table prints is compared: {c:?}");
    assert!(bad.is_empty(), "layouts differ: {bad:#?}");
}

// ---------------------------------------------------------------------------
// Field quirks as policies (nic/quirks.rs; docs/nic-families.md)
// ---------------------------------------------------------------------------

/// The traffic class each QP's RTR transition carries.
fn rtr_traffic_classes(s: &StandIn) -> Vec<u8> {
    s.qps()
        .iter()
        .flat_map(|q| q.transitions.iter())
        .filter_map(|t| match t {
            QpTransition::Rtr { traffic_class, .. } => Some(*traffic_class),
            _ => None,
        })
        .collect()
}

/// ionic QPs run at traffic class 0 by default (NCCL's 224 capped one QP at
/// ~3.9 GB/s on Pollara, torchcomms#3116), at the configured class when one
/// is given (3 here), and at the device's sysfs class when the driver keeps
/// one. Checked by hand (2026-12-06): with the sysfs read left out of
/// IonicOps::create_qp this fails on the 96 and 0 cases.
#[test]
fn ionic_traffic_class_is_zero_unless_configured_or_sysfs_names_one() {
    assert_eq!(Config::default().traffic_class, 0, "the default traffic class (RCCL's trafficClass undefined)");
    let s = StandIn::ionic();
    run(&s, Family::Ionic, MemoryMode::Gpu).expect("ionic over the stand-in");
    assert_eq!(rtr_traffic_classes(&s), [3, 3], "no sysfs class: the configured one");
    for (file, want) in [("Global tclass=96\n", 96u8), ("0\n", 0)] {
        let s = StandIn { sysfs_tc: Some(file), ..StandIn::ionic() };
        run(&s, Family::Ionic, MemoryMode::Gpu).expect("ionic over the stand-in");
        s.assert_clean("after the run");
        assert_eq!(rtr_traffic_classes(&s), [want, want], "sysfs says {file:?}");
    }
    // An empty file (no class set) leaves the configured one.
    let s = StandIn { sysfs_tc: Some(""), ..StandIn::ionic() };
    run(&s, Family::Ionic, MemoryMode::Gpu).expect("ionic over the stand-in");
    assert_eq!(rtr_traffic_classes(&s), [3, 3]);
}

/// ionic QPs alternate over both uDMA engines (one engine alone runs out of
/// completion resources after a few QPs, torchcomms#3116): the domain's
/// mask is set to the next engine before each QP's CQ and QP exist, and the
/// CQ's ring is taken for the QP's engine. Checked by hand (2026-12-06):
/// without the ionic_dv_pd_set_udma_mask call both QPs land on engine 0 and
/// this fails.
#[test]
fn ionic_qps_alternate_over_both_udma_engines() {
    let s = StandIn::ionic();
    let r = run(&s, Family::Ionic, MemoryMode::Gpu).expect("ionic over the stand-in");
    s.assert_clean("after the run");
    let calls = s.calls();
    let masks: Vec<&str> =
        calls.iter().filter(|c| c.name == "ionic_dv_pd_set_udma_mask").map(|c| c.detail.as_str()).collect();
    assert_eq!(masks, ["0x1", "0x2"], "one engine per QP, in turn");
    // Each mask is set before that QP's CQ is created.
    let names = s.names();
    let pos = |n: &str, k: usize| names.iter().enumerate().filter(|(_, x)| *x == n).nth(k).map(|(i, _)| i).unwrap();
    for k in 0..2 {
        assert!(pos("ionic_dv_pd_set_udma_mask", k) < pos("ibv_create_cq_ex", k), "QP {k}: mask before its CQ");
        assert!(pos("ibv_create_qp", k) < pos("ionic_dv_get_cq", k));
    }
    let get_cq: Vec<&str> = calls.iter().filter(|c| c.name == "ionic_dv_get_cq").map(|c| c.detail.as_str()).collect();
    assert_eq!(get_cq, ["udma 0", "udma 1"], "each CQ's ring on its QP's engine");
    assert_eq!(r.qps.len(), 2);
    // A device with one engine keeps every QP on it.
    let s = StandIn { udma_mask: 0b10, ..StandIn::ionic() };
    run(&s, Family::Ionic, MemoryMode::Gpu).expect("ionic with one uDMA engine");
    let masks: Vec<String> =
        s.calls().into_iter().filter(|c| c.name == "ionic_dv_pd_set_udma_mask").map(|c| c.detail).collect();
    assert_eq!(masks, ["0x2", "0x2"]);
}

/// bnxt_re's doorbell grouping reaches every descriptor: one doorbell per
/// WQE (0) by default, one per batch (1) with RCCL_RUST_GIN_BNXT_DOORBELL=
/// peer; ionic's descriptors never ask for it.
#[test]
fn bnxt_re_descriptors_carry_the_doorbell_grouping() {
    use rccl_rust_gin::nic::quirks::BnxtDoorbell;
    for (knob, want) in [(None, 0u32), (Some("wqe"), 0), (Some("peer"), 1)] {
        let config = Config::from_lookup(|k| (k == "RCCL_RUST_GIN_BNXT_DOORBELL").then(|| knob.map(String::from)).flatten())
            .expect("the knob parses");
        assert_eq!(config.bnxt_doorbell == BnxtDoorbell::PerPeer, want == 1);
        let s = StandIn::bnxt();
        let r = run_with(&s, Family::Bnxt, MemoryMode::Gpu, &config).expect("bnxt_re over the stand-in");
        for (qpn, d) in &r.qps {
            assert_eq!(d.doorbell_group, want, "QP {qpn:#x} with the knob at {knob:?}");
        }
        let s = StandIn::ionic();
        let r = run_with(&s, Family::Ionic, MemoryMode::Gpu, &config).expect("ionic over the stand-in");
        assert!(r.qps.iter().all(|(_, d)| d.doorbell_group == 0));
    }
    let bad = Config::from_lookup(|k| (k == "RCCL_RUST_GIN_BNXT_DOORBELL").then(|| "batch".to_string()));
    let e = bad.err().expect("an unknown value is refused");
    assert!(e.to_string().contains("RCCL_RUST_GIN_BNXT_DOORBELL=\"batch\""), "{e}");
}
