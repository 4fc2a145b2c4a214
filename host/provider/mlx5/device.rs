//! One opened mlx5 device: its verbs context (DevX-enabled for queue
//! creation), protection domain, port and GID, and the facts getProperties
//! reports (NicInfo).

use super::addr::{self, GidType, LinkLayer, Mlx5Address};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::ffi::nccl::{NCCL_PTR_CUDA, NCCL_PTR_DMABUF, NCCL_PTR_HOST};
use crate::provider::NicInfo;
use crate::sys::mlx5dv;
use rdma_sys::{ibv_context, ibv_device_attr, ibv_gid, ibv_pd, ibv_port_attr};
use std::ffi::CStr;

/// The errno of the last failed call, as text with a hint where one helps.
pub(crate) fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// An opened device with its PD; closed on drop, after everything created
/// from it (queue pairs and regions hold an `Arc<Context>`).
pub(crate) struct Context {
    pub ctx: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub name: String,
    pub port: u8,
    /// The PD's number for DevX commands.
    pub pdn: u32,
    pub node_guid: u64,
    pub max_qp_rd_atom: i32,
    pub max_qp_init_rd_atom: i32,
    pub link_layer: LinkLayer,
    pub active_mtu: u8,
    pub lid: u16,
    pub active_speed: u8,
    pub active_width: u8,
    pub max_msg_sz: u32,
    pub gid: [u8; 16],
    pub gid_index: u8,
    pub gid_type: GidType,
}

// SAFETY: verbs and DevX calls on a context and PD are thread-safe (rdma-core
// serialises what needs it); the pointers are only passed to those calls.
unsafe impl Send for Context {}
// SAFETY: as above; no Rust references into the C objects are handed out.
unsafe impl Sync for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: created in open(), destroyed once, after every object made
        // from them (they hold this context alive through an Arc).
        unsafe {
            if rdma_sys::ibv_dealloc_pd(self.pd) != 0 {
                tracing::warn!("{}: ibv_dealloc_pd: {}", self.name, errno());
            }
            if rdma_sys::ibv_close_device(self.ctx) != 0 {
                tracing::warn!("{}: ibv_close_device: {}", self.name, errno());
            }
        }
    }
}

/// Why opening with DevX failed, and what to do.
fn devx_hint(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::EPROTONOSUPPORT) | Some(libc::EINVAL) => {
            "the kernel, rdma-core or firmware does not offer DevX to this process (it needs mlx5_ib with DevX, \
             rdma-core built with it, and firmware with DevX user contexts: ConnectX-5 or newer; some VFs have none)"
        }
        Some(libc::EPERM) | Some(libc::EACCES) => {
            "permission denied: the process needs read/write access to /dev/infiniband/uverbs*, and kernels that \
             restrict DevX want CAP_NET_RAW (run with cap_net_raw, or as root)"
        }
        _ => "check that mlx5_ib is loaded and the device is usable (ibv_devinfo)",
    }
}

impl Context {
    /// Opens `name` (DevX-enabled when `devx`), queries it and picks the
    /// port and GID the configuration asks for.
    pub fn open(name: &str, config: &Config, devx: bool) -> Result<Context> {
        let mut n: i32 = 0;
        // SAFETY: returns a NULL-terminated array we free below.
        let list = unsafe { rdma_sys::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(Error::System(format!("{name}: ibv_get_device_list: {}", errno())));
        }
        let mut ctx: *mut ibv_context = std::ptr::null_mut();
        let mut found = false;
        let mut open_err = None;
        for i in 0..n.max(0) as usize {
            // SAFETY: i < n entries of the list; names are C strings.
            let dev = unsafe { *list.add(i) };
            // SAFETY: as above.
            let dname = unsafe { CStr::from_ptr(rdma_sys::ibv_get_device_name(dev)) }.to_string_lossy();
            if dname != name {
                continue;
            }
            found = true;
            if devx {
                // SAFETY: `dev` is an entry of the live list.
                if !unsafe { mlx5dv::mlx5dv_is_supported(dev) } {
                    break;
                }
                let mut attr = mlx5dv::mlx5dv_context_attr { flags: mlx5dv::MLX5DV_CONTEXT_FLAGS_DEVX, comp_mask: 0 };
                // SAFETY: `dev` is live; `attr` is a valid attribute struct.
                ctx = unsafe { mlx5dv::mlx5dv_open_device(dev, &mut attr) };
            } else {
                // SAFETY: `dev` is live.
                ctx = unsafe { rdma_sys::ibv_open_device(dev) };
            }
            if ctx.is_null() {
                open_err = Some(errno());
            }
            break;
        }
        // SAFETY: freeing the list from above; an opened context stays valid.
        unsafe { rdma_sys::ibv_free_device_list(list) };
        if !found {
            return Err(Error::System(format!("{name}: no such RDMA device any more (ibv_get_device_list)")));
        }
        if ctx.is_null() {
            return Err(match open_err {
                Some(e) if devx => Error::System(format!(
                    "{name}: opening with DevX (mlx5dv_open_device with MLX5DV_CONTEXT_FLAGS_DEVX) failed: {e}; {}",
                    devx_hint(&e)
                )),
                Some(e) => Error::System(format!("{name}: ibv_open_device: {e}; {}", devx_hint(&e))),
                None => Error::System(format!("{name}: not an mlx5 device (mlx5dv_is_supported is false)")),
            });
        }
        // From here `guard` closes the context on every error path.
        let guard = CtxGuard(ctx);

        // SAFETY: zeroed plain C struct, filled by the call.
        let mut dattr: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: valid context and out-pointer.
        if unsafe { rdma_sys::ibv_query_device(ctx, &mut dattr) } != 0 {
            return Err(Error::System(format!("{name}: ibv_query_device: {}", errno())));
        }
        if dattr.atomic_cap == rdma_sys::ibv_atomic_cap::IBV_ATOMIC_NONE {
            // mlx5_ib reports IBV_ATOMIC_NONE unless the device does 8-byte
            // CmpSwap and FetchAdd with the requester in host-endianness mode
            // (Linux da7525d2a9ae, "IB/mlx5: Advertise atomic capabilities in
            // query device"; mlx5_core sets that mode at load when supported).
            return Err(Error::System(format!(
                "{name}: the device reports no remote atomics (atomic_cap NONE); rust-gin's signals need 8-byte \
                 fetch-and-add. Check the firmware version and that mlx5_core put atomics in host-endianness mode"
            )));
        }
        let port = config.ib_port;
        if port == 0 || port > dattr.phys_port_cnt {
            return Err(Error::System(format!(
                "{name}: RCCL_RUST_GIN_IB_PORT={port} but the device has {} port(s)",
                dattr.phys_port_cnt
            )));
        }
        // SAFETY: zeroed plain C struct.
        let mut pattr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: the exported ibv_query_port fills the leading (compat) part
        // of struct ibv_port_attr; verbs.h's inline wrapper passes the same
        // zeroed struct this way when the provider has no query_port op.
        let rc = unsafe {
            rdma_sys::ibv_query_port(
                ctx,
                port,
                &mut pattr as *mut ibv_port_attr as *mut rdma_sys::_compat_ibv_port_attr,
            )
        };
        if rc != 0 {
            return Err(Error::System(format!(
                "{name}: ibv_query_port({port}): {}",
                std::io::Error::from_raw_os_error(rc)
            )));
        }
        if pattr.state != rdma_sys::ibv_port_state::IBV_PORT_ACTIVE {
            return Err(Error::System(format!(
                "{name} port {port} is not active (state {}): check the link (ibstat / ibv_devinfo), or choose another \
                 port with RCCL_RUST_GIN_IB_PORT or another NIC with RCCL_RUST_GIN_NIC",
                pattr.state
            )));
        }
        let link_layer = LinkLayer::from_verbs(pattr.link_layer)
            .ok_or_else(|| Error::System(format!("{name} port {port}: unknown link layer {}", pattr.link_layer)))?;
        let (gid_index, gid, gid_type) = pick_gid(ctx, name, port, link_layer, pattr.gid_tbl_len, config.gid_index)?;

        // SAFETY: valid context.
        let pd = unsafe { rdma_sys::ibv_alloc_pd(ctx) };
        if pd.is_null() {
            return Err(Error::System(format!("{name}: ibv_alloc_pd: {}", errno())));
        }
        let mut dvpd = mlx5dv::mlx5dv_pd::default();
        // SAFETY: zeroed union of in/out pointer pairs; only .pd is used.
        let mut obj: mlx5dv::mlx5dv_obj = unsafe { std::mem::zeroed() };
        obj.pd.in_ = pd;
        obj.pd.out = &mut dvpd;
        // SAFETY: obj.pd points at a live PD and an output struct.
        let rc = unsafe { mlx5dv::mlx5dv_init_obj(&mut obj, mlx5dv::MLX5DV_OBJ_PD as u64) };
        if rc != 0 {
            // SAFETY: the PD just allocated.
            unsafe { rdma_sys::ibv_dealloc_pd(pd) };
            return Err(Error::System(format!(
                "{name}: mlx5dv_init_obj(PD): {}",
                std::io::Error::from_raw_os_error(rc.abs())
            )));
        }
        std::mem::forget(guard);
        Ok(Context {
            ctx,
            pd,
            name: name.to_string(),
            port,
            pdn: dvpd.pdn,
            // Kept as verbs returns it (big-endian), as NCCL's net_ib reports it.
            node_guid: dattr.node_guid,
            max_qp_rd_atom: dattr.max_qp_rd_atom,
            max_qp_init_rd_atom: dattr.max_qp_init_rd_atom,
            link_layer,
            active_mtu: pattr.active_mtu as u8,
            lid: pattr.lid,
            active_speed: pattr.active_speed,
            active_width: pattr.active_width,
            max_msg_sz: pattr.max_msg_sz,
            gid,
            gid_index,
            gid_type,
        })
    }

    /// This port as its peers see it.
    pub fn address(&self) -> Mlx5Address {
        Mlx5Address {
            link_layer: self.link_layer,
            port: self.port,
            mtu: self.active_mtu,
            gid_index: self.gid_index,
            gid_type: self.gid_type,
            lid: self.lid,
            gid: self.gid,
        }
    }

    /// What getProperties reports.
    pub fn info(&self) -> NicInfo {
        let pci_path = std::fs::canonicalize(format!("/sys/class/infiniband/{}/device", self.name))
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let mut ptr_support = NCCL_PTR_HOST | NCCL_PTR_CUDA;
        if self.dmabuf_supported() {
            ptr_support |= NCCL_PTR_DMABUF;
        }
        NicInfo {
            name: self.name.clone(),
            pci_path,
            guid: self.node_guid,
            speed_mbps: addr::speed_mbps(self.active_speed, self.active_width),
            port: self.port.into(),
            ptr_support,
            max_message: self.max_msg_sz.into(),
            latency_us: 0.0,
            // Independent QPs and processing units, PCIe writes that may pass
            // each other (relaxed ordering), possibly several NICs: no such
            // guarantee (docs/rma-plugin.md).
            flushes_all_puts_on_any_signal: false,
        }
    }

    /// Whether the kernel can register dma-bufs with this device, probed as
    /// NCCL's net_ib does (src/transport/net_ib/gdr.cc): ibv_reg_dmabuf_mr
    /// with fd -1 fails with EBADF when supported, EOPNOTSUPP or
    /// EPROTONOSUPPORT when not.
    pub fn dmabuf_supported(&self) -> bool {
        // SAFETY: clearing errno before the probe.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: valid PD; fd -1 makes the kernel refuse before touching
        // anything; a region returned anyway is released at once.
        let mr = unsafe { rdma_sys::ibv_reg_dmabuf_mr(self.pd, 0, 0, 0, -1, 0) };
        let e = errno().raw_os_error();
        if !mr.is_null() {
            // SAFETY: the region just returned.
            unsafe { rdma_sys::ibv_dereg_mr(mr) };
            return true;
        }
        !matches!(e, Some(libc::EOPNOTSUPP) | Some(libc::EPROTONOSUPPORT))
    }

    /// log2 of the largest message (qpc.log_msg_max), at most 30 (1 GiB).
    pub fn log_msg_max(&self) -> u8 {
        let m = self.max_msg_sz.max(1);
        (31 - m.leading_zeros()).min(30) as u8
    }
}

struct CtxGuard(*mut ibv_context);
impl Drop for CtxGuard {
    fn drop(&mut self) {
        // SAFETY: a context opened by Context::open and not handed out.
        unsafe { rdma_sys::ibv_close_device(self.0) };
    }
}

fn gid_type_of(name: &str, port: u8, index: i32) -> Option<GidType> {
    std::fs::read_to_string(format!("/sys/class/infiniband/{name}/ports/{port}/gid_attrs/types/{index}"))
        .ok()
        .and_then(|s| GidType::from_sysfs(&s))
}

fn query_gid(ctx: *mut ibv_context, port: u8, index: i32) -> Option<[u8; 16]> {
    let mut g = ibv_gid { raw: [0; 16] };
    // SAFETY: valid context and out-pointer.
    let rc = unsafe { rdma_sys::ibv_query_gid(ctx, port, index, &mut g) };
    // SAFETY: ibv_gid is a union over 16 bytes; raw is always initialised.
    let raw = unsafe { g.raw };
    (rc == 0 && raw != [0; 16]).then_some(raw)
}

/// The GID to use: RCCL_RUST_GIN_GID_INDEX when set; otherwise index 0 on
/// InfiniBand, and on RoCE the first RoCE v2 IPv4-mapped GID, else the first
/// RoCE v2 GID, else the first non-zero one.
fn pick_gid(
    ctx: *mut ibv_context,
    name: &str,
    port: u8,
    ll: LinkLayer,
    table_len: i32,
    wanted: i32,
) -> Result<(u8, [u8; 16], GidType)> {
    let default_type = if ll == LinkLayer::Infiniband { GidType::Ib } else { GidType::RoceV2 };
    if wanted >= 0 {
        if wanted >= table_len {
            return Err(Error::System(format!(
                "{name} port {port}: RCCL_RUST_GIN_GID_INDEX={wanted} but the GID table has {table_len} entries"
            )));
        }
        let g = query_gid(ctx, port, wanted).ok_or_else(|| {
            Error::System(format!("{name} port {port}: GID index {wanted} (RCCL_RUST_GIN_GID_INDEX) is empty"))
        })?;
        let t = gid_type_of(name, port, wanted).unwrap_or(default_type);
        return Ok((wanted as u8, g, t));
    }
    if ll == LinkLayer::Infiniband {
        let g = query_gid(ctx, port, 0)
            .ok_or_else(|| Error::System(format!("{name} port {port}: GID 0 is empty (no subnet manager?)")))?;
        return Ok((0, g, GidType::Ib));
    }
    let mut any: Option<(u8, [u8; 16], GidType)> = None;
    let mut v2: Option<(u8, [u8; 16], GidType)> = None;
    for i in 0..table_len.min(256) {
        let Some(g) = query_gid(ctx, port, i) else { continue };
        let t = gid_type_of(name, port, i);
        let entry = (i as u8, g, t.unwrap_or(GidType::RoceV1));
        if t == Some(GidType::RoceV2) {
            if addr::is_ipv4_mapped(&g) {
                return Ok(entry);
            }
            v2.get_or_insert(entry);
        }
        any.get_or_insert(entry);
    }
    v2.or(any).ok_or_else(|| {
        Error::System(format!(
            "{name} port {port}: the RoCE GID table has no usable entry (does the interface have an IP address?)"
        ))
    })
}
