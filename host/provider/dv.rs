//! What the bnxt_re (Broadcom Thor2) and ionic (AMD Pollara) providers share:
//! the system calls they make, behind one trait ([`DvPlatform`]) that the
//! tests implement with a recording stand-in (tests/family_providers.rs), the
//! opened device (PD, port, GID), the provider and NIC objects behind the
//! provider interface, and the queue pair both families build
//! ([`NicQp`], whose device descriptor is the family-neutral `rust_gin_nic_sq`).
//! The family-specific steps (how queue memory reaches the NIC, which
//! doorbell the GPU rings) are in `bnxt/` and `ionic/`.
//!
//! Direct verbs of either family are not in the rdma-core installed here
//! (Debian 44.0), and neither is in a released rdma-core at the revision read
//! (master 691953d8, 2026-08-20): bnxt_re's are rdma-core pull request 1654
//! (head 35fcb9e4, 2026-08-21), ionic's GPU-direct ones pull request 1771
//! (head 69787abe, 2026-07-21). [`RdmaCoreDv`] therefore looks each one up at
//! run time (dlopen of libbnxt_re / libionic, as MORI's dv_loader.cpp does)
//! and says which is missing; the declarations in `bnxt/ffi.rs` and
//! `ionic/ffi.rs` cite the header line of each.
//!
//! UNVERIFIED ON HARDWARE (docs/nic-families.md, "Host providers").

use super::caps::{self, Capabilities, Known};
use super::mlx5::addr::{self, GidType, LinkLayer, Mlx5Address};
use super::mlx5::platform::{DeviceAttr, DeviceMapping, GpuAccess, Handle, MrKeys, PortAttr, ATOMIC_NONE, PORT_ACTIVE};
use super::{Access, MemoryMode, MemoryRegion, Nic, NicAddress, NicFamily, NicInfo, Provider, QueueDescriptor, QueuePair};
use crate::abi::rust_gin_nic_sq;
use crate::config::{Config, ProviderKind};
use crate::error::{Error, Result};
use crate::gpu::hip::DmaBufRange;
use crate::gpu::{Allocator, GpuBuf, HostMemory, Object};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// The NIC family a device belongs to, by its PCI vendor (as MORI's
/// `RdmaDeviceVendorId`: core_device_types.hpp:160-162) or, where sysfs has
/// no vendor file, by the verbs device name's driver prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Mlx5,
    Bnxt,
    Ionic,
}

pub const VENDOR_MELLANOX: u32 = 0x02c9;
pub const VENDOR_BROADCOM: u32 = 0x14e4;
pub const VENDOR_PENSANDO: u32 = 0x1dd8;

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Mlx5 => "mlx5 (ConnectX)",
            Family::Bnxt => "bnxt_re (Broadcom Thor2)",
            Family::Ionic => "ionic (AMD Pollara)",
        }
    }

    /// The same family in the shared vocabulary (nic/).
    pub fn nic(self) -> NicFamily {
        match self {
            Family::Mlx5 => NicFamily::Mlx5,
            Family::Bnxt => NicFamily::Bnxt,
            Family::Ionic => NicFamily::Ionic,
        }
    }

    pub fn kind(self) -> ProviderKind {
        match self {
            Family::Mlx5 => ProviderKind::Mlx5,
            Family::Bnxt => ProviderKind::Bnxt,
            Family::Ionic => ProviderKind::Ionic,
        }
    }

    /// The family of an RDMA device, or None for a NIC rust-gin cannot drive.
    pub fn of(d: &DeviceEntry) -> Option<Family> {
        match d.vendor_id {
            Some(VENDOR_MELLANOX) => return Some(Family::Mlx5),
            Some(VENDOR_BROADCOM) => return Some(Family::Bnxt),
            Some(VENDOR_PENSANDO) => return Some(Family::Ionic),
            Some(_) => return None,
            None => {}
        }
        let n = d.name.as_str();
        if n.starts_with("mlx5") {
            Some(Family::Mlx5)
        } else if n.starts_with("bnxt_re") {
            Some(Family::Bnxt)
        } else if n.starts_with("ionic") {
            Some(Family::Ionic)
        } else {
            None
        }
    }
}

/// One RDMA device as listed (ibv_get_device_list) with its PCI vendor
/// (`/sys/class/infiniband/<name>/device/vendor`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceEntry {
    pub name: String,
    pub vendor_id: Option<u32>,
}

impl std::fmt::Display for DeviceEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.vendor_id {
            Some(v) => write!(f, "{} (PCI vendor {v:#06x})", self.name),
            None => write!(f, "{} (PCI vendor unknown)", self.name),
        }
    }
}

/// A QP state transition as ibv_modify_qp takes it; the platform fills
/// `struct ibv_qp_attr` and the attribute mask named in each variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QpTransition {
    /// IBV_QP_STATE | PKEY_INDEX | PORT | ACCESS_FLAGS (pkey index 0).
    Init { port: u8, access: i32 },
    /// IBV_QP_STATE | PATH_MTU | RQ_PSN | DEST_QPN | AV | MAX_DEST_RD_ATOMIC |
    /// MIN_RNR_TIMER; the AV is global (GRH) on RoCE.
    Rtr {
        mtu: u8,
        dest_qpn: u32,
        rq_psn: u32,
        max_dest_rd_atomic: u8,
        min_rnr_timer: u8,
        port: u8,
        dgid: [u8; 16],
        sgid_index: u8,
        hop_limit: u8,
        traffic_class: u8,
    },
    /// IBV_QP_STATE | SQ_PSN | MAX_QP_RD_ATOMIC | TIMEOUT | RETRY_CNT | RNR_RETRY.
    Rts { sq_psn: u32, max_rd_atomic: u8, timeout: u8, retry_cnt: u8, rnr_retry: u8 },
}

/// `struct bnxt_re_dv_db_region_attr` (bnxt_re_dv.h:45-50 at PR 1654).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BnxtDbRegion {
    pub dpi: u32,
    /// The doorbell page, mapped for the CPU.
    pub dbr: usize,
}

/// The head of libbnxt_re's `struct bnxt_re_context` after its
/// `verbs_context` (providers/bnxt_re/main.h:266-277 at PR 1654, unchanged
/// on master 691953d8 main.h:257-268): `udpi.dbpage` checks the layout
/// against `bnxt_re_dv_get_default_db_region` (which returns that pointer,
/// dv.c:65), `wqe_mode` is the ucontext response's mode (main.c:222-223).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BnxtCtxPrivate {
    pub dbpage: usize,
    pub wqe_mode: u32,
}

/// The head of libionic's `struct ionic_ctx` after its `verbs_context`
/// (providers/ionic/ionic.h:89-100 at PR 1771, the same since the provider
/// was added, 6d82ac7b): `version` is the alloc-ucontext response's
/// (ionic.c:54); the queue types check the layout against `ionic_dv_get_ctx`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IonicCtxPrivate {
    pub pg_shift: u32,
    pub version: i32,
    pub sq_qtype: u8,
    pub rq_qtype: u8,
    pub cq_qtype: u8,
}

/// `struct bnxt_re_dv_qp_init_attr` as this provider fills it (PR 1654
/// bnxt_re_dv.h:58-81); the CQ and PD are passed alongside.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BnxtQpInit {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub sq_umem: Handle,
    pub sq_umem_offset: u64,
    pub sq_len: u32,
    pub sq_slots: u32,
    pub sq_npsn: u32,
    pub rq_umem: Handle,
    pub rq_umem_offset: u64,
    pub rq_len: u32,
}

/// `struct ionic_dv_ctx` (PR 1771 ionic_dv.h, "Context information for
/// gpu-initiated rdma").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IonicDvCtx {
    pub db_page: usize,
    /// `db_page` + the context's doorbell offset: `db_ptr[qtype]` is the
    /// doorbell of each queue type.
    pub db_ptr: usize,
    pub sq_qtype: u8,
    pub rq_qtype: u8,
    pub cq_qtype: u8,
}

/// `struct ionic_dv_queue` (PR 1771 ionic_dv.h).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IonicDvQueue {
    pub ptr: usize,
    pub size: usize,
    /// The doorbell value's constant part (the queue id, shifted).
    pub db_val: u64,
    pub mask: u16,
    pub depth_log2: u8,
    pub stride_log2: u8,
}

/// `struct ibv_qp_init_attr` as the ionic provider fills it (RC, one SGE,
/// its own CQ for send and receive, created on a parent domain).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IonicQpInit {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_inline_data: u32,
}

/// Where a parent domain's queue memory comes from: libionic calls
/// `ibv_parent_domain_init_attr.alloc` for every queue ring of a QP or CQ
/// created on the domain (ionic_memory.c), and `free` when it is destroyed.
pub trait DomainMemory: Send + Sync {
    /// Memory for one ring, zeroed; None refuses (libionic then fails the
    /// create). `tag` says which ring (`IONIC_PD_TAG_CQ`/`_SQ`/`_RQ`).
    fn alloc(&self, len: usize, align: usize, tag: u64) -> Option<usize>;
    fn free(&self, addr: usize);
}

/// Every call the bnxt_re and ionic providers make into rdma-core, sysfs and
/// HIP. Errors carry the errno; the providers add what failed.
pub trait DvPlatform: Send + Sync {
    fn devices(&self) -> io::Result<Vec<DeviceEntry>>;
    fn open_device(&self, name: &str) -> io::Result<Handle>;
    fn close_device(&self, ctx: Handle) -> io::Result<()>;
    fn query_device(&self, ctx: Handle) -> io::Result<DeviceAttr>;
    fn query_port(&self, ctx: Handle, port: u8) -> io::Result<PortAttr>;
    fn query_gid(&self, ctx: Handle, port: u8, index: i32) -> io::Result<[u8; 16]>;
    fn gid_type(&self, name: &str, port: u8, index: i32) -> Option<GidType>;
    fn pci_path(&self, name: &str) -> String;
    fn read_sysfs(&self, path: &str) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }
    fn alloc_pd(&self, ctx: Handle) -> io::Result<Handle>;
    fn dealloc_pd(&self, pd: Handle) -> io::Result<()>;
    /// # Safety
    /// `[addr, addr+len)` stays valid for NIC access until dereg_mr.
    unsafe fn reg_mr(&self, pd: Handle, addr: u64, len: usize, access: i32) -> io::Result<MrKeys>;
    /// # Safety
    /// `fd` is a dma-buf covering `[offset, offset+len)`, valid until dereg_mr.
    unsafe fn reg_dmabuf_mr(&self, pd: Handle, offset: u64, len: usize, iova: u64, fd: i32, access: i32)
        -> io::Result<MrKeys>;
    fn dereg_mr(&self, mr: Handle) -> io::Result<()>;
    fn modify_qp(&self, qp: Handle, t: &QpTransition) -> io::Result<()>;
    fn destroy_qp(&self, qp: Handle) -> io::Result<()>;
    fn destroy_cq(&self, cq: Handle) -> io::Result<()>;
    fn open_gpu(&self) -> Result<Arc<dyn GpuAccess>>;
    fn export_dmabuf(&self, addr: u64, len: u64) -> std::result::Result<DmaBufRange, String>;

    // bnxt_re direct verbs (rdma-core PR 1654) and the verbs buffer call it
    // builds on (PR 1654 commit e2fcb50d, libibverbs/verbs.h).
    /// `ibv_alloc_user_buf(pd, addr, size, dmabuf_fd)`.
    ///
    /// # Safety
    /// `[addr, addr+size)` stays valid until bnxt_free_user_buf.
    unsafe fn bnxt_alloc_user_buf(&self, pd: Handle, addr: u64, size: usize, dmabuf_fd: i32) -> io::Result<Handle>;
    fn bnxt_free_user_buf(&self, buf: Handle);
    /// `bnxt_re_dv_get_default_db_region`.
    fn bnxt_default_db_region(&self, ctx: Handle) -> io::Result<BnxtDbRegion>;
    /// What libbnxt_re keeps of the ucontext response that no direct verb
    /// reports: the WQE mode (gates.rs).
    fn bnxt_ctx_private(&self, ctx: Handle) -> io::Result<BnxtCtxPrivate>;
    /// `bnxt_re_dv_create_cq` over `ncqe` CQEs at `offset` of `umem`.
    fn bnxt_create_cq(&self, ctx: Handle, umem: Handle, offset: u64, ncqe: u32) -> io::Result<Handle>;
    /// The CQ's id as its doorbell names it: rdma-core's PR has no call for
    /// it; Broadcom's libbnxt_re (as MORI vendors its header) has
    /// `bnxt_re_dv_init_obj(BNXT_RE_DV_OBJ_CQ)`.
    fn bnxt_cq_id(&self, cq: Handle) -> io::Result<u32>;
    /// `bnxt_re_dv_create_qp`: the QP and its number.
    fn bnxt_create_qp(&self, pd: Handle, cq: Handle, attr: &BnxtQpInit) -> io::Result<(Handle, u32)>;

    // ionic direct verbs (rdma-core PR 1771) and the parent domain.
    /// `ibv_alloc_parent_domain` with IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS:
    /// queue memory of QPs and CQs created on the domain from `mem`.
    fn ionic_alloc_parent_domain(&self, ctx: Handle, pd: Handle, mem: Arc<dyn DomainMemory>) -> io::Result<Handle>;
    /// `ionic_dv_pd_set_sqcmb` / `ionic_dv_pd_set_rqcmb` (ionic_dv.h at master).
    fn ionic_pd_set_cmb(&self, pd: Handle, send: bool, enable: bool, expdb: bool, require: bool) -> io::Result<()>;
    /// `ibv_create_cq_ex` with IBV_CQ_INIT_ATTR_MASK_PD = the parent domain.
    fn ionic_create_cq(&self, ctx: Handle, pd: Handle, cqe: u32) -> io::Result<Handle>;
    /// `ibv_create_qp` (RC) on the parent domain: the QP and its number.
    fn ionic_create_qp(&self, pd: Handle, cq: Handle, attr: &IonicQpInit) -> io::Result<(Handle, u32)>;
    /// `ionic_dv_qp_set_gda(qp, send, recv)`.
    fn ionic_qp_set_gda(&self, qp: Handle, send: bool, recv: bool) -> io::Result<()>;
    fn ionic_get_ctx(&self, ctx: Handle) -> io::Result<IonicDvCtx>;
    /// What libionic keeps of the alloc-ucontext response that no direct
    /// verb reports: the firmware WQE ABI version (gates.rs).
    fn ionic_ctx_private(&self, ctx: Handle) -> io::Result<IonicCtxPrivate>;
    fn ionic_qp_get_udma_idx(&self, qp: Handle) -> io::Result<u8>;
    /// `ionic_dv_ctx_get_udma_mask(ctx)`: the device's uDMA engines.
    fn ionic_ctx_udma_mask(&self, ctx: Handle) -> io::Result<u8>;
    /// `ionic_dv_pd_set_udma_mask(pd, mask)`: queues created on the (parent)
    /// domain afterwards go to an engine in `mask`.
    fn ionic_pd_set_udma_mask(&self, pd: Handle, mask: u8) -> io::Result<()>;
    fn ionic_get_cq(&self, cq: Handle, udma_idx: u8) -> io::Result<IonicDvQueue>;
    /// (rq, sq).
    fn ionic_get_qp(&self, qp: Handle) -> io::Result<(IonicDvQueue, IonicDvQueue)>;
}

static PROCESS_DV: Mutex<Option<Arc<dyn DvPlatform>>> = Mutex::new(None);

/// The platform the providers use: rdma-core, HIP and the families' dv
/// libraries, unless [`set_process_dv_platform`] chose another.
pub fn process_dv_platform() -> Arc<dyn DvPlatform> {
    PROCESS_DV.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_else(|| Arc::new(super::dv_sys::RdmaCoreDv))
}

/// For test programs that go through `provider::select`; production never calls it.
pub fn set_process_dv_platform(p: Option<Arc<dyn DvPlatform>>) {
    *PROCESS_DV.lock().unwrap_or_else(|e| e.into_inner()) = p;
}

/// An object made by the platform, destroyed through it when dropped.
pub(crate) struct Obj {
    platform: Arc<dyn DvPlatform>,
    handle: Handle,
    kind: ObjKind,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum ObjKind {
    Context,
    Pd,
    ParentDomain,
    Mr,
    Cq,
    Qp,
    UserBuf,
}

impl Obj {
    pub(crate) fn new(platform: &Arc<dyn DvPlatform>, handle: Handle, kind: ObjKind) -> Obj {
        Obj { platform: platform.clone(), handle, kind }
    }
    pub(crate) fn handle(&self) -> Handle {
        self.handle
    }
}

impl Drop for Obj {
    fn drop(&mut self) {
        let p = &self.platform;
        let h = self.handle;
        let r = match self.kind {
            ObjKind::Context => p.close_device(h),
            ObjKind::Pd | ObjKind::ParentDomain => p.dealloc_pd(h),
            ObjKind::Mr => p.dereg_mr(h),
            ObjKind::Cq => p.destroy_cq(h),
            ObjKind::Qp => p.destroy_qp(h),
            ObjKind::UserBuf => {
                p.bnxt_free_user_buf(h);
                Ok(())
            }
        };
        if let Err(e) = r {
            tracing::warn!("destroying {:?} {:?}: {e}", self.kind, h);
        }
    }
}

/// One opened device: verbs context, PD, port and GID.
pub(crate) struct DvContext {
    // Drop order: the PD before the context.
    pub pd: Obj,
    pub ctx: Obj,
    pub platform: Arc<dyn DvPlatform>,
    pub family: Family,
    pub name: String,
    pub port: u8,
    pub gid_index: u8,
    pub gid: [u8; 16],
    pub gid_type: GidType,
    pub mtu: u8,
    pub attr: DeviceAttr,
    pub port_attr: PortAttr,
    pub pci_path: String,
    /// bnxt_re's doorbell grouping (crate::nic::quirks).
    pub bnxt_doorbell: crate::nic::quirks::BnxtDoorbell,
}

fn sys(what: String) -> impl FnOnce(io::Error) -> Error {
    move |e| Error::System(format!("{what}: {e}"))
}

impl DvContext {
    pub fn open(platform: &Arc<dyn DvPlatform>, family: Family, name: &str, config: &Config) -> Result<DvContext> {
        let ctx = Obj::new(
            platform,
            platform.open_device(name).map_err(sys(format!("{name}: ibv_open_device")))?,
            ObjKind::Context,
        );
        let attr = platform.query_device(ctx.handle()).map_err(sys(format!("{name}: ibv_query_device")))?;
        let port = config.ib_port;
        if port == 0 || port > attr.phys_port_cnt {
            return Err(Error::System(format!(
                "{name}: port {port} does not exist ({} port(s)); set RCCL_RUST_GIN_IB_PORT",
                attr.phys_port_cnt
            )));
        }
        let pa = platform.query_port(ctx.handle(), port).map_err(sys(format!("{name}: ibv_query_port({port})")))?;
        if pa.state != PORT_ACTIVE {
            return Err(Error::System(format!(
                "{name} port {port} is not ACTIVE (state {}); check the link, or choose another with RCCL_RUST_GIN_IB_PORT",
                pa.state
            )));
        }
        if LinkLayer::from_verbs(pa.link_layer) != Some(LinkLayer::Ethernet) {
            return Err(Error::System(format!(
                "{name} port {port}: link layer {} is not Ethernet; {} NICs are RoCE only",
                pa.link_layer,
                family.name()
            )));
        }
        let (gid_index, gid, gid_type) = pick_roce_gid(platform.as_ref(), ctx.handle(), name, port, &pa, config.gid_index)?;
        let pd = Obj::new(platform, platform.alloc_pd(ctx.handle()).map_err(sys(format!("{name}: ibv_alloc_pd")))?, ObjKind::Pd);
        Ok(DvContext {
            pd,
            ctx,
            platform: platform.clone(),
            family,
            name: name.to_string(),
            port,
            gid_index,
            gid,
            gid_type,
            mtu: pa.active_mtu,
            attr,
            port_attr: pa,
            pci_path: platform.pci_path(name),
            bnxt_doorbell: config.bnxt_doorbell,
        })
    }

    pub fn address(&self) -> Mlx5Address {
        Mlx5Address {
            link_layer: LinkLayer::Ethernet,
            port: self.port,
            mtu: self.mtu,
            gid_index: self.gid_index,
            gid_type: self.gid_type,
            lid: 0,
            gid: self.gid,
        }
    }

    pub fn info(&self) -> NicInfo {
        NicInfo {
            name: self.name.clone(),
            pci_path: self.pci_path.clone(),
            guid: self.attr.node_guid,
            speed_mbps: addr::speed_mbps(self.port_attr.active_speed, self.port_attr.active_width),
            port: self.port as i32,
            ptr_support: crate::ffi::nccl::NCCL_PTR_HOST | crate::ffi::nccl::NCCL_PTR_CUDA,
            max_message: self.port_attr.max_msg_sz as u64,
            latency_us: 0.0,
            flushes_all_puts_on_any_signal: false,
        }
    }
}

/// RCCL_RUST_GIN_GID_INDEX when set, else the first RoCE v2 IPv4-mapped
/// GID, else the first RoCE v2 GID, else the first non-zero one (the mlx5
/// provider's rule on RoCE).
fn pick_roce_gid(
    p: &dyn DvPlatform,
    ctx: Handle,
    name: &str,
    port: u8,
    pa: &PortAttr,
    wanted: i32,
) -> Result<(u8, [u8; 16], GidType)> {
    let gid = |i: i32| p.query_gid(ctx, port, i).ok().filter(|g| *g != [0; 16]);
    if wanted >= 0 {
        let g = gid(wanted).ok_or_else(|| {
            Error::System(format!("{name} port {port}: GID index {wanted} (RCCL_RUST_GIN_GID_INDEX) is empty or absent"))
        })?;
        return Ok((wanted as u8, g, p.gid_type(name, port, wanted).unwrap_or(GidType::RoceV2)));
    }
    let (mut v2, mut any) = (None, None);
    for i in 0..pa.gid_tbl_len.min(256) {
        let Some(g) = gid(i) else { continue };
        let t = p.gid_type(name, port, i);
        let e = (i as u8, g, t.unwrap_or(GidType::RoceV1));
        if t == Some(GidType::RoceV2) {
            if addr::is_ipv4_mapped(&g) {
                return Ok(e);
            }
            v2.get_or_insert(e);
        }
        any.get_or_insert(e);
    }
    v2.or(any).ok_or_else(|| {
        Error::System(format!("{name} port {port}: no usable RoCE GID (does the interface have an IP address?)"))
    })
}

/// How queue memory and doorbells are reached.
#[derive(Clone)]
pub(crate) enum Memory {
    Gpu(Arc<dyn GpuAccess>),
    Host,
}

impl Memory {
    pub fn allocator(&self) -> Arc<dyn Allocator> {
        match self {
            Memory::Gpu(g) => g.allocator(),
            Memory::Host => Arc::new(HostMemory),
        }
    }
}

/// The address the NIC uses for a buffer (its CPU mapping for pinned host
/// memory, else its GPU address), as the mlx5 provider registers umems.
pub(crate) fn nic_addr(b: &GpuBuf) -> u64 {
    b.host_addr().map(|a| a as u64).unwrap_or(b.dev_addr())
}

/// The doorbell page of a NIC, as the device code stores to it.
pub(crate) enum DoorbellPage {
    Gpu { cpu: usize, map: Box<dyn DeviceMapping> },
    Host,
}

impl DoorbellPage {
    pub fn map(memory: &Memory, cpu: usize, name: &str) -> Result<DoorbellPage> {
        match memory {
            Memory::Gpu(g) => Ok(DoorbellPage::Gpu {
                cpu,
                map: g.map_io(cpu, PAGE).map_err(|e| {
                    Error::System(format!("{name}: mapping the doorbell page {cpu:#x} for the GPU (hipHostRegister IoMemory): {e}"))
                })?,
            }),
            Memory::Host => Ok(DoorbellPage::Host),
        }
    }
    /// The device address of CPU address `cpu_addr` within the page.
    pub fn dev(&self, cpu_addr: usize) -> u64 {
        match self {
            DoorbellPage::Gpu { cpu, map } => map.dev_addr() + (cpu_addr - cpu) as u64,
            DoorbellPage::Host => cpu_addr as u64,
        }
    }
    pub fn host_port(&self) -> u64 {
        match self {
            DoorbellPage::Gpu { .. } => 0,
            DoorbellPage::Host => super::mlx5::doorbell::host_mmio(),
        }
    }
}

pub(crate) const PAGE: usize = 4096;

/// What a family's QP creation hands to [`NicQp`].
pub(crate) struct QpParts {
    pub qp: Obj,
    /// Held only to be destroyed after the QP.
    #[allow(dead_code)]
    pub cq: Obj,
    /// Held until after the QP and CQ are destroyed (user buffers, the
    /// parent domain), released in order.
    #[allow(dead_code)]
    pub keep: Vec<Arc<Obj>>,
    /// The doorbell page, mapped while any of its queues lives.
    pub doorbell: Arc<DoorbellPage>,
    /// The QP number a peer connects to (ibv_qp.qp_num).
    pub qp_num: u32,
    /// The SQ's id as its doorbell names it.
    pub sq_qid: u32,
    /// The CQ's id as its doorbell names it.
    pub cq_qid: u32,
    pub wqe_buf: u64,
    pub log_wqe_cnt: u32,
    pub cq_buf: u64,
    pub log_cq_cnt: u32,
    pub sq_db: u64,
    pub cq_db: u64,
    pub cq_phase: u32,
    /// ionic: the firmware WQE ABI version the queue is written with
    /// (gates::ionic_wqe_abi); 0 for bnxt_re.
    pub wqe_abi: u32,
}

/// An RC queue pair of bnxt_re or ionic with its CQ, connected through
/// ibv_modify_qp, described to the device by `rust_gin_nic_sq`.
pub struct NicQp {
    // Drop order: QP, CQ, then what they were built on, then the memory.
    parts: QpParts,
    state: GpuBuf,
    _rings: Vec<GpuBuf>,
    ctx: Arc<DvContext>,
    host_port: u64,
    traffic_class: u8,
    connected: AtomicBool,
    /// bnxt_re: the path MTU in bytes once connected, for the device code's
    /// MSN table (0 before, and for ionic, which keeps none).
    path_mtu: AtomicU32,
}

pub const ACCESS_QP: i32 = (Access::LOCAL_WRITE.bits() | Access::REMOTE_WRITE.bits() | Access::REMOTE_READ.bits()) as i32;
pub const HOP_LIMIT: u8 = 255;
pub const TIMEOUT: u8 = 20;
pub const RETRY_CNT: u8 = 7;
pub const RNR_RETRY: u8 = 7;
pub const MIN_RNR_TIMER: u8 = 12;

impl NicQp {
    pub(crate) fn new(
        ctx: &Arc<DvContext>,
        parts: QpParts,
        rings: Vec<GpuBuf>,
        alloc: &dyn Allocator,
        traffic_class: u8,
    ) -> Result<NicQp> {
        let host_port = parts.doorbell.host_port();
        let state = alloc
            .alloc(std::mem::size_of::<crate::abi::rust_gin_mlx5_sq_state>(), 128, Object::QueueState)
            .map_err(|e| Error::System(format!("{}: queue state: {e}", ctx.name)))?;
        // The producer and consumer counters start at zero (device memory
        // is not zeroed by HIP).
        state
            .try_write(0, &vec![0u8; state.len()])
            .map_err(|e| Error::System(format!("{}: zeroing the queue state: {e}", ctx.name)))?;
        Ok(NicQp { parts, state, _rings: rings, ctx: ctx.clone(), host_port, traffic_class, connected: AtomicBool::new(false), path_mtu: AtomicU32::new(0) })
    }

    /// The QP number a peer connects to.
    pub fn qpn(&self) -> u32 {
        self.parts.qp_num
    }

    /// RST -> INIT -> RTR -> RTS through ibv_modify_qp (both families take
    /// the standard verbs; MORI's bnxt.cpp/ionic.cpp Modify* functions), RoCE
    /// with a global route and hop limit 255 (ionic's 1 drops routed
    /// traffic: MORI PR 588).
    pub fn connect(&self, remote: &NicAddress, remote_qpn: u32) -> Result<()> {
        let c = &self.ctx;
        let local = c.address();
        let peer = Mlx5Address::decode(remote)?;
        addr::check_peer(&local, &peer)?;
        if remote_qpn == 0 || remote_qpn > 0xff_ffff {
            return Err(Error::InvalidArgument(format!("remote QP number {remote_qpn:#x} is not a 24-bit QPN")));
        }
        if self.connected.swap(true, Ordering::AcqRel) {
            return Err(Error::InvalidUsage(format!("{}: connect was already called on QP {:#x}", c.name, self.qpn())));
        }
        let rd = |n: i32| n.clamp(1, 16) as u8;
        let mtu = addr::path_mtu(&local, &peer);
        let steps = [
            ("INIT", QpTransition::Init { port: c.port, access: ACCESS_QP }),
            (
                "RTR",
                QpTransition::Rtr {
                    mtu,
                    dest_qpn: remote_qpn,
                    rq_psn: 0,
                    max_dest_rd_atomic: rd(c.attr.max_qp_rd_atom),
                    min_rnr_timer: MIN_RNR_TIMER,
                    port: c.port,
                    dgid: peer.gid,
                    sgid_index: c.gid_index,
                    hop_limit: HOP_LIMIT,
                    traffic_class: self.traffic_class,
                },
            ),
            (
                "RTS",
                QpTransition::Rts {
                    sq_psn: 0,
                    max_rd_atomic: rd(c.attr.max_qp_init_rd_atom),
                    timeout: TIMEOUT,
                    retry_cnt: RETRY_CNT,
                    rnr_retry: RNR_RETRY,
                },
            ),
        ];
        for (name, t) in steps {
            c.platform.modify_qp(self.parts.qp.handle(), &t).map_err(|e| {
                Error::System(format!(
                    "{}: ibv_modify_qp to {name} of QP {:#x} (towards QP {remote_qpn:#x}): {e}",
                    c.name,
                    self.qpn()
                ))
            })?;
        }
        if c.family == Family::Bnxt {
            self.path_mtu.store(addr::mtu_bytes(mtu), Ordering::Release);
        }
        crate::info_line!(NET, "{}: QP {:#x} connected to QP {remote_qpn:#x} ({})", c.name, self.qpn(), c.family.name());
        Ok(())
    }

    /// The family-neutral device descriptor (abi/nic_queue.h).
    pub fn descriptor(&self, peer: u32, error: u64, timeout_ns: u64) -> rust_gin_nic_sq {
        let p = &self.parts;
        rust_gin_nic_sq {
            wqe_buf: p.wqe_buf,
            sq_db: p.sq_db,
            cq_buf: p.cq_buf,
            cq_db: p.cq_db,
            state: self.state.dev_addr(),
            error,
            qpn: p.sq_qid,
            log_wqe_cnt: p.log_wqe_cnt,
            cqn: p.cq_qid,
            log_cq_cnt: p.log_cq_cnt,
            peer,
            log_signal_period: p.log_wqe_cnt.saturating_sub(2),
            timeout_ns,
            flush_addr: 0,
            flush_lkey: 0,
            cq_phase: p.cq_phase,
            host_doorbell: self.host_port,
            counter_log: 0,
            counters: 0,
            path_mtu: self.path_mtu.load(Ordering::Acquire),
            flush_rkey: 0,
            flush_raddr: 0,
            wqe_abi: p.wqe_abi,
            doorbell_group: match self.ctx.family {
                Family::Bnxt => self.ctx.bnxt_doorbell.descriptor_value(),
                _ => 0,
            },
        }
    }
}

/// A [`NicQp`] behind the provider interface.
struct DvQueuePair(NicQp, NicFamily);
impl QueuePair for DvQueuePair {
    fn qpn(&self) -> u32 {
        self.0.qpn()
    }
    fn connect(&self, remote: &NicAddress, remote_qpn: u32) -> Result<()> {
        self.0.connect(remote, remote_qpn)
    }
    fn descriptor(&self, peer: u32, error: u64, timeout_ns: u64) -> QueueDescriptor {
        QueueDescriptor::Nic(self.1, self.0.descriptor(peer, error, timeout_ns))
    }
    fn log_slots(&self) -> u32 {
        self.0.parts.log_wqe_cnt
    }
}

/// What a family contributes to a [`DvNic`].
/// (Each family's per-NIC state, made when the NIC opens: bnxt_re's
/// doorbell page, ionic's parent domain and doorbell page.)
pub(crate) trait FamilyOps: Send + Sync {
    /// A queue pair of the family with its CQ, rings and doorbells.
    fn create_qp(&self, nic: &DvNic, log_depth: u32, traffic_class: u8, rings_in_device_memory: bool) -> Result<NicQp>;
}

/// The bnxt_re and ionic providers: the devices of one family.
pub struct DvProvider {
    platform: Arc<dyn DvPlatform>,
    family: Family,
    names: Vec<String>,
    config: Config,
    mode: MemoryMode,
    infos: Mutex<Vec<Option<NicInfo>>>,
}

impl DvProvider {
    /// The devices of `family` (filtered by RCCL_RUST_GIN_NIC); an error
    /// naming what exists when none is usable.
    pub fn probe_on(platform: Arc<dyn DvPlatform>, family: Family, config: &Config) -> Result<DvProvider> {
        let all = platform.devices().map_err(|e| {
            Error::System(format!(
                "no RDMA device found (ibv_get_device_list: {e}); to run without hardware set RCCL_RUST_GIN_PROVIDER=emu"
            ))
        })?;
        let wanted = |n: &str| config.nic_filter.as_ref().is_none_or(|f| f.split(',').any(|w| w.trim() == n));
        let names: Vec<String> =
            all.iter().filter(|d| Family::of(d) == Some(family) && wanted(&d.name)).map(|d| d.name.clone()).collect();
        if names.is_empty() {
            return Err(Error::System(format!(
                "no {} device among: {}{}",
                family.name(),
                all.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "),
                config.nic_filter.as_ref().map(|f| format!(" matching RCCL_RUST_GIN_NIC={f}")).unwrap_or_default()
            )));
        }
        let infos = Mutex::new(vec![None; names.len()]);
        Ok(DvProvider { platform, family, names, config: config.clone(), mode: MemoryMode::Gpu, infos })
    }

    pub fn for_mode(mut self, mode: MemoryMode) -> DvProvider {
        self.mode = mode;
        self
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Opens device `dev` for `mode`.
    pub fn open_mode(&self, dev: usize, mode: MemoryMode) -> Result<Arc<DvNic>> {
        super::check_dev(dev, self.names.len())?;
        let name = &self.names[dev];
        let ctx = Arc::new(DvContext::open(&self.platform, self.family, name, &self.config)?);
        crate::nic::gates::check_firmware(self.family.nic(), name, ctx.attr.fw_ver.as_str(), self.config.fw_check)?;
        let memory = match mode {
            MemoryMode::Gpu => Memory::Gpu(self.platform.open_gpu().map_err(|e| {
                Error::System(format!("{name}: queue memory and doorbells for the GPU: {}", e.message()))
            })?),
            MemoryMode::Host => Memory::Host,
        };
        let ops: Box<dyn FamilyOps> = match self.family {
            Family::Bnxt => Box::new(super::bnxt::BnxtOps::open(&ctx, &memory)?),
            Family::Ionic => Box::new(super::ionic::IonicOps::open(&ctx, &memory)?),
            Family::Mlx5 => return Err(Error::Internal("the mlx5 family has its own provider".into())),
        };
        let info = ctx.info();
        let nic = DvNic { ops, memory, info, ctx };
        crate::info_line!(
            INIT,
            "{} provider: {} port {} (GID index {} {:?}, {} Mbps, PCI {}), memory: {}",
            self.family.name(),
            name,
            nic.ctx.port,
            nic.ctx.gid_index,
            nic.ctx.gid_type,
            nic.info.speed_mbps,
            nic.info.pci_path,
            nic.memory.allocator().describe()
        );
        let caps = nic.capabilities();
        crate::info_line!(INIT, "capabilities of {caps}");
        if let Some(why) = caps.atomics_unusable() {
            crate::info_line!(INIT, "{why}: signals travel as slot writes (RCCL_RUST_GIN_SIGNAL_MODE=auto), no VA signals");
        }
        Ok(Arc::new(nic))
    }
}

impl Provider for DvProvider {
    fn kind(&self) -> ProviderKind {
        self.family.kind()
    }
    fn devices(&self) -> usize {
        self.names.len()
    }
    fn info(&self, dev: usize) -> Result<NicInfo> {
        super::check_dev(dev, self.names.len())?;
        let mut infos = self.infos.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = &infos[dev] {
            return Ok(i.clone());
        }
        let info = DvContext::open(&self.platform, self.family, &self.names[dev], &self.config)?.info();
        infos[dev] = Some(info.clone());
        Ok(info)
    }
    fn open(&self, dev: usize) -> Result<Arc<dyn Nic>> {
        Ok(self.open_mode(dev, self.mode)?)
    }
}

/// One opened bnxt_re or ionic port.
pub struct DvNic {
    // Drop order: the family's objects (doorbell mapping, parent domain)
    // before the memory and the context.
    ops: Box<dyn FamilyOps>,
    memory: Memory,
    info: NicInfo,
    pub(crate) ctx: Arc<DvContext>,
}

impl DvNic {
    pub fn family(&self) -> Family {
        self.ctx.family
    }

    pub(crate) fn memory(&self) -> &Memory {
        &self.memory
    }

    /// A queue pair of this family with its `rust_gin_nic_sq` descriptor:
    /// for the family's device policies (bnxt/family.h, ionic/family.h).
    pub fn create_family_qp(&self, log_depth: u32, traffic_class: u8, rings_in_device_memory: bool) -> Result<NicQp> {
        self.ops.create_qp(self, log_depth, traffic_class, rings_in_device_memory)
    }

    /// What this NIC and its GPU can do: no remote atomics into GPU memory
    /// on either family (issue 13: Thor2 has no PCIe AtomicOps completer,
    /// ionic reports IBV_ATOMIC_NONE), GPU-direct doorbells (ionic: GDA
    /// mode, set on every QP), dma-buf.
    pub fn family_capabilities(&self) -> FamilyCaps {
        FamilyCaps {
            family: self.ctx.family,
            atomics_into_gpu_memory: false,
            gpu_direct_mode: match self.ctx.family {
                Family::Ionic => "ionic_dv_qp_set_gda(send, recv) on every QP",
                _ => "not needed (the doorbell page is the device's)",
            },
            max_inline: match self.ctx.family {
                Family::Bnxt => crate::bnxt::wire::MAX_INLINE,
                Family::Ionic => super::ionic::MAX_INLINE,
                Family::Mlx5 => crate::device::MAX_INLINE,
            },
        }
    }
}

/// Facts of a family that caps.rs does not carry yet (issue 13 part 4):
/// `caps.rs` could add them to `Capabilities` and choose the signal mode
/// without atomics from `atomics_into_gpu_memory`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FamilyCaps {
    pub family: Family,
    /// RDMA atomics executed into GPU memory work (false on both families).
    pub atomics_into_gpu_memory: bool,
    pub gpu_direct_mode: &'static str,
    /// The family's largest inline payload per WQE.
    pub max_inline: u32,
}

impl Nic for DvNic {
    fn kind(&self) -> ProviderKind {
        self.ctx.family.kind()
    }
    fn info(&self) -> NicInfo {
        self.info.clone()
    }
    fn address(&self) -> NicAddress {
        self.ctx.address().encode()
    }
    fn check_peer(&self, remote: &NicAddress) -> Result<()> {
        addr::check_peer(&self.ctx.address(), &Mlx5Address::decode(remote)?)
    }
    fn allocator(&self) -> Arc<dyn Allocator> {
        self.memory.allocator()
    }
    fn family(&self) -> NicFamily {
        self.ctx.family.nic()
    }
    /// The family's queue pair: the GIN operations post its own WQEs
    /// (gin/family.h) through its `rust_gin_nic_sq`.
    fn create_qp(&self, log_depth: u32, traffic_class: u8, rings: bool) -> Result<Box<dyn QueuePair>> {
        let family = Nic::family(self);
        Ok(Box::new(DvQueuePair(self.create_family_qp(log_depth, traffic_class, rings)?, family)))
    }
    unsafe fn reg_mr(&self, addr: u64, len: u64, access: Access) -> Result<Box<dyn MemoryRegion>> {
        let c = &self.ctx;
        let access = family_access(c.family, access)?;
        if let Memory::Gpu(_) = self.memory {
            if let Ok(d) = c.platform.export_dmabuf(addr, len) {
                use std::os::fd::AsRawFd;
                // SAFETY: forwarded contract; the dma-buf covers the range.
                let r = unsafe {
                    c.platform.reg_dmabuf_mr(c.pd.handle(), d.offset, len as usize, addr, d.fd.as_raw_fd(), access)
                };
                if let Ok(k) = r {
                    return Ok(Box::new(DvMr::new(c, k, addr, len)));
                }
            }
        }
        // SAFETY: forwarded contract.
        let k = unsafe { c.platform.reg_mr(c.pd.handle(), addr, len as usize, access) }
            .map_err(sys(format!("{}: ibv_reg_mr of {len} bytes at {addr:#x}", c.name)))?;
        Ok(Box::new(DvMr::new(c, k, addr, len)))
    }
    unsafe fn reg_dmabuf_mr(&self, addr: u64, len: u64, offset: u64, fd: i32, access: Access) -> Result<Box<dyn MemoryRegion>> {
        let c = &self.ctx;
        let access = family_access(c.family, access)?;
        // SAFETY: forwarded contract.
        let k = unsafe { c.platform.reg_dmabuf_mr(c.pd.handle(), offset, len as usize, addr, fd, access) }
            .map_err(sys(format!("{}: ibv_reg_dmabuf_mr of {len} bytes", c.name)))?;
        Ok(Box::new(DvMr::new(c, k, addr, len)))
    }
    fn needs_progress(&self) -> bool {
        false
    }
    fn progress(&self) -> bool {
        false
    }
    fn capabilities(&self) -> Capabilities {
        let c = &self.ctx;
        let why = match c.family {
            Family::Bnxt => "Thor2 has no PCIe AtomicOps completer: RDMA atomics into GPU memory hang (ROCm/MAD 191)",
            _ => "ionic reports no atomics (IBV_ATOMIC_NONE; ROCm/mori 682)",
        };
        Capabilities {
            nic: c.name.clone(),
            remote_atomics: if c.attr.atomic_cap == ATOMIC_NONE {
                Known::No("verbs atomic_cap is IBV_ATOMIC_NONE".into())
            } else {
                Known::No(format!("{why}; verbs reports atomic_cap {}", c.attr.atomic_cap))
            },
            atomics_use_pcie: c.attr.atomic_cap == super::mlx5::platform::ATOMIC_GLOB,
            gpu_atomic_completer: match &self.memory {
                Memory::Gpu(g) => caps::gpu_atomic_completer(g.pci_bus_id().as_deref(), |p| c.platform.read_sysfs(p)),
                Memory::Host => Known::Unknown("host-memory mode: no GPU".into()),
            },
            dmabuf: false,
            max_inline: self.family_capabilities().max_inline.min(crate::device::MAX_INLINE),
            max_qp: Some(c.attr.max_qp.max(0) as u32),
            qps_per_uar: None,
        }
    }
}

/// ionic refuses REMOTE_ATOMIC registrations with EINVAL (ROCm/mori 682):
/// left out there, with a note; bnxt_re keeps what was asked.
fn family_access(family: Family, a: Access) -> Result<i32> {
    let mut bits = a.bits() as i32;
    if family == Family::Ionic {
        bits &= !(Access::REMOTE_ATOMIC.bits() as i32);
    }
    if bits & (Access::REMOTE_WRITE.bits() | Access::REMOTE_ATOMIC.bits()) as i32 != 0 {
        bits |= Access::LOCAL_WRITE.bits() as i32;
    }
    Ok(bits)
}

struct DvMr {
    _obj: Obj,
    keys: MrKeys,
    addr: u64,
    len: u64,
}

impl DvMr {
    fn new(c: &DvContext, keys: MrKeys, addr: u64, len: u64) -> DvMr {
        DvMr { _obj: Obj::new(&c.platform, keys.handle, ObjKind::Mr), keys, addr, len }
    }
}

impl MemoryRegion for DvMr {
    fn lkey(&self) -> u32 {
        self.keys.lkey
    }
    fn rkey(&self) -> u32 {
        self.keys.rkey
    }
    fn addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> u64 {
        self.len
    }
}
