//! Everything the mlx5 provider asks of the system, behind one interface:
//! rdma-core's verbs (rdma-sys), mlx5dv and DevX (host/sys/mlx5dv.rs), the
//! sysfs facts verbs does not report, and HIP for GPU queue memory, the GPU
//! mapping of the doorbell page and dma-buf export.
//!
//! [`RdmaCore`] forwards each call to the C function of the same name and
//! holds all of the provider's `unsafe`. A recording stand-in (the tests'
//! `tests/support/mlx5_standin.rs`) implements the same trait, so the
//! provider's control path (open, DevX objects, QP transitions, registration,
//! teardown, every error path) runs in CI, where no NIC or GPU exists.
//!
//! Objects cross the interface as [`Handle`]s: opaque to the provider and
//! only ever passed back to the platform that made them.

use crate::error::Result;
use crate::gpu::hip::{self, DmaBufRange, HipAllocator, IoMapping};
use crate::gpu::Allocator;
use crate::sys::mlx5dv;
use std::ffi::{c_void, CStr};
use std::io;
use std::sync::{Arc, RwLock};

use super::addr::GidType;

/// An object the platform made (a verbs context, PD, MR, AH, DevX umem, UAR
/// or object): for the real platform, the C pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle(pub usize);

/// What `ibv_query_device` reports that the provider uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceAttr {
    /// `ibv_atomic_cap` (0 = IBV_ATOMIC_NONE).
    pub atomic_cap: u32,
    pub phys_port_cnt: u8,
    /// As verbs returns it (big-endian).
    pub node_guid: u64,
    pub max_qp_rd_atom: i32,
    pub max_qp_init_rd_atom: i32,
    /// Queue pairs the device offers (verbs `max_qp`).
    pub max_qp: i32,
    /// The firmware version string (verbs `fw_ver`), for the firmware gate
    /// (nic/gates.rs).
    pub fw_ver: FwVer,
}

/// `ibv_device_attr.fw_ver`: up to 64 bytes, NUL-terminated.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FwVer(pub [u8; 64]);

impl FwVer {
    pub fn new(s: &str) -> FwVer {
        let mut b = [0u8; 64];
        let n = s.len().min(63);
        b[..n].copy_from_slice(&s.as_bytes()[..n]);
        FwVer(b)
    }
    pub fn as_str(&self) -> &str {
        let n = self.0.iter().position(|&c| c == 0).unwrap_or(self.0.len());
        std::str::from_utf8(&self.0[..n]).unwrap_or("(not UTF-8)")
    }
}

impl Default for FwVer {
    fn default() -> Self {
        FwVer([0; 64])
    }
}

impl std::fmt::Debug for FwVer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// `ibv_atomic_cap::IBV_ATOMIC_NONE`.
pub const ATOMIC_NONE: u32 = 0;
/// `ibv_atomic_cap::IBV_ATOMIC_GLOB`: atomic with respect to the CPU too,
/// as PCIe AtomicOps on the target memory.
pub const ATOMIC_GLOB: u32 = 2;
/// `ibv_port_state::IBV_PORT_ACTIVE`.
pub const PORT_ACTIVE: u32 = 4;

/// What `ibv_query_port` reports that the provider uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortAttr {
    /// `ibv_port_state` ([`PORT_ACTIVE`] = 4).
    pub state: u32,
    /// `IBV_LINK_LAYER_*`.
    pub link_layer: u8,
    pub gid_tbl_len: i32,
    /// `ibv_mtu` (1 = 256 ... 5 = 4096).
    pub active_mtu: u8,
    pub lid: u16,
    pub active_speed: u8,
    pub active_width: u8,
    pub max_msg_sz: u32,
}

/// The address handle attributes the provider resolves a RoCE MAC with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AhAttr {
    pub dgid: [u8; 16],
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub port: u8,
}

/// A registered memory region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrKeys {
    pub handle: Handle,
    pub lkey: u32,
    pub rkey: u32,
}

/// A DevX UAR (`struct mlx5dv_devx_uar`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UarInfo {
    pub handle: Handle,
    /// The doorbell register, mapped for the CPU.
    pub reg_addr: usize,
    pub page_id: u32,
}

/// Why a device could not be opened.
#[derive(Debug)]
pub enum OpenFailure {
    /// ibv_get_device_list failed.
    List(io::Error),
    /// No device of that name (any more).
    NoSuchDevice,
    /// mlx5dv_is_supported is false.
    NotMlx5,
    /// The open call failed.
    Open(io::Error),
}

/// The GPU side: queue memory and the GPU's mapping of a doorbell page.
pub trait GpuAccess: Send + Sync {
    /// Where GPU-reachable queue memory comes from.
    fn allocator(&self) -> Arc<dyn Allocator>;
    /// Maps `[addr, addr+len)` of an I/O page (a UAR) for the GPU.
    fn map_io(&self, addr: usize, len: usize) -> io::Result<Box<dyn DeviceMapping>>;
    /// The GPU's PCI bus id (`0000:c1:00.0`), where known.
    fn pci_bus_id(&self) -> Option<String> {
        None
    }
}

/// A GPU mapping of an I/O range, unmapped on drop.
pub trait DeviceMapping: Send + Sync {
    /// The address kernels store to.
    fn dev_addr(&self) -> u64;
}

/// The system calls of the mlx5 provider. Errors are `io::Error`s carrying
/// the errno (or returned code) of the call; the provider adds what failed.
pub trait Platform: Send + Sync {
    /// The names of all RDMA devices (an error when there are none).
    fn device_names(&self) -> io::Result<Vec<String>>;
    /// Opens `name`, DevX-enabled (mlx5dv_open_device) when `devx`.
    fn open_device(&self, name: &str, devx: bool) -> std::result::Result<Handle, OpenFailure>;
    fn close_device(&self, ctx: Handle) -> io::Result<()>;
    fn query_device(&self, ctx: Handle) -> io::Result<DeviceAttr>;
    fn query_port(&self, ctx: Handle, port: u8) -> io::Result<PortAttr>;
    fn query_gid(&self, ctx: Handle, port: u8, index: i32) -> io::Result<[u8; 16]>;
    /// The GID's type from sysfs (`.../gid_attrs/types/<index>`), if known.
    fn gid_type(&self, name: &str, port: u8, index: i32) -> Option<GidType>;
    /// The device's PCI path from sysfs, empty when unknown.
    fn pci_path(&self, name: &str) -> String;
    /// A sysfs file's bytes (a PCI function's configuration space, for the
    /// capability probe).
    fn read_sysfs(&self, path: &str) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }
    fn alloc_pd(&self, ctx: Handle) -> io::Result<Handle>;
    /// The PD's number for DevX commands (mlx5dv_init_obj(MLX5DV_OBJ_PD)).
    fn pd_number(&self, pd: Handle) -> io::Result<u32>;
    fn dealloc_pd(&self, pd: Handle) -> io::Result<()>;
    /// # Safety
    /// `[addr, addr+len)` stays valid for NIC access until [`Platform::dereg_mr`].
    unsafe fn reg_mr(&self, pd: Handle, addr: u64, len: usize, access: i32) -> io::Result<MrKeys>;
    /// # Safety
    /// `fd` is a dma-buf covering `[offset, offset+len)` (or -1, to probe),
    /// kept valid for NIC access until [`Platform::dereg_mr`].
    unsafe fn reg_dmabuf_mr(
        &self,
        pd: Handle,
        offset: u64,
        len: usize,
        iova: u64,
        fd: i32,
        access: i32,
    ) -> io::Result<MrKeys>;
    fn dereg_mr(&self, mr: Handle) -> io::Result<()>;
    fn create_ah(&self, pd: Handle, attr: &AhAttr) -> io::Result<Handle>;
    /// The destination MAC the kernel resolved for an AH (mlx5dv_init_obj(AH)).
    fn ah_rmac(&self, ah: Handle) -> io::Result<[u8; 6]>;
    fn destroy_ah(&self, ah: Handle) -> io::Result<()>;
    fn devx_query_eqn(&self, ctx: Handle, vector: u32) -> io::Result<u32>;
    /// Returns the umem and its id.
    ///
    /// # Safety
    /// `[addr, addr+len)` stays mapped until [`Platform::devx_umem_dereg`].
    unsafe fn devx_umem_reg(&self, ctx: Handle, addr: u64, len: usize, access: u32) -> io::Result<(Handle, u32)>;
    fn devx_umem_dereg(&self, umem: Handle) -> io::Result<()>;
    fn devx_alloc_uar(&self, ctx: Handle, flags: u32) -> io::Result<UarInfo>;
    fn devx_free_uar(&self, uar: Handle);
    /// Sends a create command; `out` receives the command's output (also on failure).
    fn devx_obj_create(&self, ctx: Handle, input: &[u8], out: &mut [u8]) -> io::Result<Handle>;
    fn devx_obj_modify(&self, obj: Handle, input: &[u8], out: &mut [u8]) -> io::Result<()>;
    /// Sends a query of the object (QUERY_Q_COUNTER).
    fn devx_obj_query(&self, obj: Handle, input: &[u8], out: &mut [u8]) -> io::Result<()>;
    fn devx_obj_destroy(&self, obj: Handle) -> io::Result<()>;
    /// Sends a command that makes no object (QUERY_HCA_CAP);
    /// `out` receives its output (also on failure).
    fn devx_general_cmd(&self, ctx: Handle, input: &[u8], out: &mut [u8]) -> io::Result<()>;
    /// The GPU of the calling thread, for queue memory and doorbell mappings.
    fn open_gpu(&self) -> Result<Arc<dyn GpuAccess>>;
    /// Exports GPU memory `[addr, addr+len)` as a dma-buf.
    fn export_dmabuf(&self, addr: u64, len: u64) -> std::result::Result<DmaBufRange, String>;
}

static PROCESS_PLATFORM: RwLock<Option<Arc<dyn Platform>>> = RwLock::new(None);

/// The platform [`super::Mlx5Provider::probe`] uses: rdma-core and HIP,
/// unless [`set_process_platform`] chose another.
pub fn process_platform() -> Arc<dyn Platform> {
    PROCESS_PLATFORM.read().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_else(|| Arc::new(RdmaCore))
}

/// Makes later probes in this process use `p` (None: rdma-core again). For
/// test programs that drive the plugins, which probe on their own, over a
/// stand-in; production code never calls it.
pub fn set_process_platform(p: Option<Arc<dyn Platform>>) {
    *PROCESS_PLATFORM.write().unwrap_or_else(|e| e.into_inner()) = p;
}

/// rdma-core (libibverbs, libmlx5) and the HIP runtime.
pub struct RdmaCore;

fn errno() -> io::Error {
    io::Error::last_os_error()
}

/// A verbs return code (0 or an errno, sometimes negated) as a result.
fn rc_result(rc: i32) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc.abs()))
    }
}

fn ptr<T>(h: Handle) -> *mut T {
    h.0 as *mut T
}

fn handle<T>(p: *mut T) -> io::Result<Handle> {
    if p.is_null() {
        Err(errno())
    } else {
        Ok(Handle(p as usize))
    }
}

/// The device list, freed on drop.
struct DeviceList {
    list: *mut *mut rdma_sys::ibv_device,
    n: usize,
}

impl DeviceList {
    fn get() -> io::Result<DeviceList> {
        let mut n: i32 = 0;
        // SAFETY: returns a NULL-terminated array, freed in Drop.
        let list = unsafe { rdma_sys::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(errno());
        }
        Ok(DeviceList { list, n: n.max(0) as usize })
    }

    /// (device, name) for each entry.
    fn entries(&self) -> impl Iterator<Item = (*mut rdma_sys::ibv_device, String)> + '_ {
        (0..self.n).map(|i| {
            // SAFETY: i < n entries of the live list; names are C strings.
            unsafe {
                let d = *self.list.add(i);
                (d, CStr::from_ptr(rdma_sys::ibv_get_device_name(d)).to_string_lossy().into_owned())
            }
        })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list from ibv_get_device_list; opened contexts stay valid.
        unsafe { rdma_sys::ibv_free_device_list(self.list) };
    }
}

impl Platform for RdmaCore {
    fn device_names(&self) -> io::Result<Vec<String>> {
        let list = DeviceList::get()?;
        if list.n == 0 {
            // ibv_get_device_list sets errno (ENOSYS) when no device exists.
            return Err(errno());
        }
        Ok(list.entries().map(|(_, n)| n).collect())
    }

    fn open_device(&self, name: &str, devx: bool) -> std::result::Result<Handle, OpenFailure> {
        let list = DeviceList::get().map_err(OpenFailure::List)?;
        let (dev, _) = list.entries().find(|(_, n)| n == name).ok_or(OpenFailure::NoSuchDevice)?;
        let ctx = if devx {
            // SAFETY: `dev` is an entry of the live list.
            if !unsafe { mlx5dv::mlx5dv_is_supported(dev) } {
                return Err(OpenFailure::NotMlx5);
            }
            let mut attr = mlx5dv::mlx5dv_context_attr { flags: mlx5dv::MLX5DV_CONTEXT_FLAGS_DEVX, comp_mask: 0 };
            // SAFETY: `dev` is live; `attr` is a valid attribute struct.
            unsafe { mlx5dv::mlx5dv_open_device(dev, &mut attr) }
        } else {
            // SAFETY: `dev` is live.
            unsafe { rdma_sys::ibv_open_device(dev) }
        };
        handle(ctx).map_err(OpenFailure::Open)
    }

    fn close_device(&self, ctx: Handle) -> io::Result<()> {
        // SAFETY: a context open_device returned, closed once by its owner.
        if unsafe { rdma_sys::ibv_close_device(ptr(ctx)) } != 0 {
            return Err(errno());
        }
        Ok(())
    }

    fn query_device(&self, ctx: Handle) -> io::Result<DeviceAttr> {
        // SAFETY: zeroed plain C struct, filled by the call.
        let mut a: rdma_sys::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live context and an out-pointer.
        if unsafe { rdma_sys::ibv_query_device(ptr(ctx), &mut a) } != 0 {
            return Err(errno());
        }
        Ok(DeviceAttr {
            atomic_cap: a.atomic_cap,
            phys_port_cnt: a.phys_port_cnt,
            node_guid: a.node_guid,
            max_qp_rd_atom: a.max_qp_rd_atom,
            max_qp_init_rd_atom: a.max_qp_init_rd_atom,
            max_qp: a.max_qp,
            fw_ver: FwVer(a.fw_ver.map(|c| c as u8)),
        })
    }

    fn query_port(&self, ctx: Handle, port: u8) -> io::Result<PortAttr> {
        // SAFETY: zeroed plain C struct.
        let mut p: rdma_sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: the exported ibv_query_port fills the leading (compat) part
        // of struct ibv_port_attr; verbs.h's inline wrapper passes the same
        // zeroed struct this way when the provider has no query_port op.
        let rc = unsafe { rdma_sys::ibv_query_port(ptr(ctx), port, &mut p as *mut rdma_sys::ibv_port_attr as *mut _) };
        rc_result(rc)?;
        Ok(PortAttr {
            state: p.state,
            link_layer: p.link_layer,
            gid_tbl_len: p.gid_tbl_len,
            active_mtu: p.active_mtu as u8,
            lid: p.lid,
            active_speed: p.active_speed,
            active_width: p.active_width,
            max_msg_sz: p.max_msg_sz,
        })
    }

    fn query_gid(&self, ctx: Handle, port: u8, index: i32) -> io::Result<[u8; 16]> {
        let mut g = rdma_sys::ibv_gid { raw: [0; 16] };
        // SAFETY: a live context and an out-pointer.
        if unsafe { rdma_sys::ibv_query_gid(ptr(ctx), port, index, &mut g) } != 0 {
            return Err(errno());
        }
        // SAFETY: ibv_gid is a union over 16 bytes; raw is always initialised.
        Ok(unsafe { g.raw })
    }

    fn gid_type(&self, name: &str, port: u8, index: i32) -> Option<GidType> {
        std::fs::read_to_string(format!("/sys/class/infiniband/{name}/ports/{port}/gid_attrs/types/{index}"))
            .ok()
            .and_then(|s| GidType::from_sysfs(&s))
    }

    fn pci_path(&self, name: &str) -> String {
        std::fs::canonicalize(format!("/sys/class/infiniband/{name}/device"))
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    }

    fn alloc_pd(&self, ctx: Handle) -> io::Result<Handle> {
        // SAFETY: a live context.
        handle(unsafe { rdma_sys::ibv_alloc_pd(ptr(ctx)) })
    }

    fn pd_number(&self, pd: Handle) -> io::Result<u32> {
        let mut dvpd = mlx5dv::mlx5dv_pd::default();
        // SAFETY: zeroed union of in/out pointer pairs; only .pd is used.
        let mut obj: mlx5dv::mlx5dv_obj = unsafe { std::mem::zeroed() };
        obj.pd.in_ = ptr(pd);
        obj.pd.out = &mut dvpd;
        // SAFETY: obj.pd points at a live PD and an output struct.
        rc_result(unsafe { mlx5dv::mlx5dv_init_obj(&mut obj, mlx5dv::MLX5DV_OBJ_PD as u64) })?;
        Ok(dvpd.pdn)
    }

    fn dealloc_pd(&self, pd: Handle) -> io::Result<()> {
        // SAFETY: a PD alloc_pd returned, freed once by its owner.
        rc_result(unsafe { rdma_sys::ibv_dealloc_pd(ptr(pd)) })
    }

    unsafe fn reg_mr(&self, pd: Handle, addr: u64, len: usize, access: i32) -> io::Result<MrKeys> {
        // SAFETY: a live PD; the caller keeps the memory valid (the contract).
        mr_keys(unsafe { rdma_sys::ibv_reg_mr(ptr(pd), addr as *mut c_void, len, access) })
    }

    unsafe fn reg_dmabuf_mr(
        &self,
        pd: Handle,
        offset: u64,
        len: usize,
        iova: u64,
        fd: i32,
        access: i32,
    ) -> io::Result<MrKeys> {
        // Cleared first: the support probe reads errno after a refusal.
        // SAFETY: writing this thread's errno.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: a live PD; the caller vouches for the dma-buf (or passes
        // fd -1, which the kernel refuses before touching anything).
        mr_keys(unsafe { rdma_sys::ibv_reg_dmabuf_mr(ptr(pd), offset, len, iova, fd, access) })
    }

    fn dereg_mr(&self, mr: Handle) -> io::Result<()> {
        // SAFETY: a region reg_mr/reg_dmabuf_mr returned, deregistered once.
        rc_result(unsafe { rdma_sys::ibv_dereg_mr(ptr(mr)) })
    }

    fn create_ah(&self, pd: Handle, a: &AhAttr) -> io::Result<Handle> {
        // SAFETY: plain C struct; zero is a valid start for every field.
        let mut attr: rdma_sys::ibv_ah_attr = unsafe { std::mem::zeroed() };
        attr.grh.dgid = rdma_sys::ibv_gid { raw: a.dgid };
        attr.grh.sgid_index = a.sgid_index;
        attr.grh.hop_limit = a.hop_limit;
        attr.grh.traffic_class = a.traffic_class;
        attr.is_global = 1;
        attr.port_num = a.port;
        // SAFETY: a live PD and valid attributes.
        handle(unsafe { rdma_sys::ibv_create_ah(ptr(pd), &mut attr) })
    }

    fn ah_rmac(&self, ah: Handle) -> io::Result<[u8; 6]> {
        let mut dv = mlx5dv::mlx5dv_ah { av: std::ptr::null_mut(), comp_mask: 0 };
        // SAFETY: zeroed union of in/out pointer pairs; only .ah is used.
        let mut obj: mlx5dv::mlx5dv_obj = unsafe { std::mem::zeroed() };
        obj.ah.in_ = ptr(ah);
        obj.ah.out = &mut dv;
        // SAFETY: obj.ah points at a live AH and an output struct.
        rc_result(unsafe { mlx5dv::mlx5dv_init_obj(&mut obj, mlx5dv::MLX5DV_OBJ_AH as u64) })?;
        if dv.av.is_null() {
            return Err(io::Error::other("mlx5dv_init_obj(AH) returned no address vector"));
        }
        // SAFETY: dv.av points into the live AH.
        Ok(unsafe { (*dv.av).rmac })
    }

    fn destroy_ah(&self, ah: Handle) -> io::Result<()> {
        // SAFETY: an AH create_ah returned, destroyed once.
        rc_result(unsafe { rdma_sys::ibv_destroy_ah(ptr(ah)) })
    }

    fn devx_query_eqn(&self, ctx: Handle, vector: u32) -> io::Result<u32> {
        let mut eqn = 0u32;
        // SAFETY: a live context and an out-pointer.
        rc_result(unsafe { mlx5dv::mlx5dv_devx_query_eqn(ptr(ctx), vector, &mut eqn) })?;
        Ok(eqn)
    }

    unsafe fn devx_umem_reg(&self, ctx: Handle, addr: u64, len: usize, access: u32) -> io::Result<(Handle, u32)> {
        // SAFETY: a live context; the caller keeps the range mapped until the
        // umem is deregistered (the contract).
        let p = unsafe { mlx5dv::mlx5dv_devx_umem_reg(ptr(ctx), addr as *mut c_void, len, access) };
        let h = handle(p)?;
        // SAFETY: a non-null umem just returned.
        Ok((h, unsafe { (*p).umem_id }))
    }

    fn devx_umem_dereg(&self, umem: Handle) -> io::Result<()> {
        // SAFETY: a umem devx_umem_reg returned, deregistered once.
        rc_result(unsafe { mlx5dv::mlx5dv_devx_umem_dereg(ptr(umem)) })
    }

    fn devx_alloc_uar(&self, ctx: Handle, flags: u32) -> io::Result<UarInfo> {
        // SAFETY: a live context; rdma-core refuses flags it does not know.
        let p = unsafe { mlx5dv::mlx5dv_devx_alloc_uar(ptr(ctx), flags) };
        let h = handle(p)?;
        // SAFETY: a non-null UAR just returned.
        let u = unsafe { *p };
        Ok(UarInfo { handle: h, reg_addr: u.reg_addr as usize, page_id: u.page_id })
    }

    fn devx_free_uar(&self, uar: Handle) {
        // SAFETY: a UAR devx_alloc_uar returned, freed once.
        unsafe { mlx5dv::mlx5dv_devx_free_uar(ptr(uar)) }
    }

    fn devx_obj_create(&self, ctx: Handle, input: &[u8], out: &mut [u8]) -> io::Result<Handle> {
        // SAFETY: a live context; buffers of the lengths passed.
        handle(unsafe {
            mlx5dv::mlx5dv_devx_obj_create(
                ptr(ctx),
                input.as_ptr() as *const c_void,
                input.len(),
                out.as_mut_ptr() as *mut c_void,
                out.len(),
            )
        })
    }

    fn devx_obj_modify(&self, obj: Handle, input: &[u8], out: &mut [u8]) -> io::Result<()> {
        // SAFETY: a live object; buffers of the lengths passed.
        rc_result(unsafe {
            mlx5dv::mlx5dv_devx_obj_modify(
                ptr(obj),
                input.as_ptr() as *const c_void,
                input.len(),
                out.as_mut_ptr() as *mut c_void,
                out.len(),
            )
        })
    }

    fn devx_obj_query(&self, obj: Handle, input: &[u8], out: &mut [u8]) -> io::Result<()> {
        // SAFETY: a live object; buffers of the lengths passed.
        rc_result(unsafe {
            mlx5dv::mlx5dv_devx_obj_query(
                ptr(obj),
                input.as_ptr() as *const c_void,
                input.len(),
                out.as_mut_ptr() as *mut c_void,
                out.len(),
            )
        })
    }

    fn devx_obj_destroy(&self, obj: Handle) -> io::Result<()> {
        // SAFETY: an object devx_obj_create returned, destroyed once.
        rc_result(unsafe { mlx5dv::mlx5dv_devx_obj_destroy(ptr(obj)) })
    }

    fn devx_general_cmd(&self, ctx: Handle, input: &[u8], out: &mut [u8]) -> io::Result<()> {
        // SAFETY: a live context; buffers of the lengths passed.
        rc_result(unsafe {
            mlx5dv::mlx5dv_devx_general_cmd(
                ptr(ctx),
                input.as_ptr() as *const c_void,
                input.len(),
                out.as_mut_ptr() as *mut c_void,
                out.len(),
            )
        })
    }

    fn open_gpu(&self) -> Result<Arc<dyn GpuAccess>> {
        Ok(Arc::new(HipGpu(Arc::new(HipAllocator::new()?))))
    }

    fn export_dmabuf(&self, addr: u64, len: u64) -> std::result::Result<DmaBufRange, String> {
        hip::export_dmabuf(addr, len)
    }
}

fn mr_keys(mr: *mut rdma_sys::ibv_mr) -> io::Result<MrKeys> {
    let h = handle(mr)?;
    // SAFETY: a non-null region just returned by verbs.
    let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
    Ok(MrKeys { handle: h, lkey, rkey })
}

/// HIP on the calling thread's GPU.
struct HipGpu(Arc<HipAllocator>);

impl GpuAccess for HipGpu {
    fn allocator(&self) -> Arc<dyn Allocator> {
        self.0.clone()
    }
    fn map_io(&self, addr: usize, len: usize) -> io::Result<Box<dyn DeviceMapping>> {
        Ok(Box::new(self.0.map_io(addr, len)?))
    }
    fn pci_bus_id(&self) -> Option<String> {
        Some(self.0.pci_bus_id().to_string()).filter(|b| !b.is_empty())
    }
}

impl DeviceMapping for IoMapping {
    fn dev_addr(&self) -> u64 {
        IoMapping::dev_addr(self)
    }
}
