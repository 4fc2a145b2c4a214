//! One opened mlx5 device: its verbs context (DevX-enabled for queue
//! creation), protection domain, port and GID, and the facts getProperties
//! reports (NicInfo).

use super::addr::{self, GidType, LinkLayer, Mlx5Address};
use super::platform::{Handle, OpenFailure, Platform, ATOMIC_NONE, PORT_ACTIVE};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::ffi::nccl::{NCCL_PTR_CUDA, NCCL_PTR_DMABUF, NCCL_PTR_HOST};
use crate::provider::NicInfo;
use std::sync::Arc;

/// An opened device with its PD; closed on drop, after everything created
/// from it (queue pairs and regions hold an `Arc<Context>`).
pub(crate) struct Context {
    /// Where every call for this device goes.
    pub platform: Arc<dyn Platform>,
    pub ctx: Handle,
    pub pd: Handle,
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
    /// verbs `atomic_cap` and `max_qp`, for the capability probe.
    pub atomic_cap: u32,
    pub max_qp: u32,
    /// Where the context's QPs get their doorbell pages.
    pub uars: super::devx::UarPool,
}

impl Drop for Context {
    fn drop(&mut self) {
        // Last: every object made from them holds this context through an Arc.
        if let Err(e) = self.platform.dealloc_pd(self.pd) {
            tracing::warn!("{}: ibv_dealloc_pd: {e}", self.name);
        }
        if let Err(e) = self.platform.close_device(self.ctx) {
            tracing::warn!("{}: ibv_close_device: {e}", self.name);
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
    pub fn open(platform: &Arc<dyn Platform>, name: &str, config: &Config, devx: bool) -> Result<Context> {
        let ctx = platform.open_device(name, devx).map_err(|f| match f {
            OpenFailure::List(e) => Error::System(format!("{name}: ibv_get_device_list: {e}")),
            OpenFailure::NoSuchDevice => {
                Error::System(format!("{name}: no such RDMA device any more (ibv_get_device_list)"))
            }
            OpenFailure::NotMlx5 => Error::System(format!("{name}: not an mlx5 device (mlx5dv_is_supported is false)")),
            OpenFailure::Open(e) if devx => Error::System(format!(
                "{name}: opening with DevX (mlx5dv_open_device with MLX5DV_CONTEXT_FLAGS_DEVX) failed: {e}; {}",
                devx_hint(&e)
            )),
            OpenFailure::Open(e) => Error::System(format!("{name}: ibv_open_device: {e}; {}", devx_hint(&e))),
        })?;
        // From here `guard` closes the context on every error path.
        let guard = CtxGuard(platform, ctx);

        let dattr = platform.query_device(ctx).map_err(|e| Error::System(format!("{name}: ibv_query_device: {e}")))?;
        if dattr.atomic_cap == ATOMIC_NONE {
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
        let pattr = platform
            .query_port(ctx, port)
            .map_err(|e| Error::System(format!("{name}: ibv_query_port({port}): {e}")))?;
        if pattr.state != PORT_ACTIVE {
            return Err(Error::System(format!(
                "{name} port {port} is not active (state {}): check the link (ibstat / ibv_devinfo), or choose another \
                 port with RCCL_RUST_GIN_IB_PORT or another NIC with RCCL_RUST_GIN_NIC",
                pattr.state
            )));
        }
        let link_layer = LinkLayer::from_verbs(pattr.link_layer)
            .ok_or_else(|| Error::System(format!("{name} port {port}: unknown link layer {}", pattr.link_layer)))?;
        let (gid_index, gid, gid_type) =
            pick_gid(platform.as_ref(), ctx, name, port, link_layer, pattr.gid_tbl_len, config.gid_index)?;

        let pd = platform.alloc_pd(ctx).map_err(|e| Error::System(format!("{name}: ibv_alloc_pd: {e}")))?;
        let pdn = match platform.pd_number(pd) {
            Ok(n) => n,
            Err(e) => {
                if let Err(d) = platform.dealloc_pd(pd) {
                    tracing::warn!("{name}: ibv_dealloc_pd: {d}");
                }
                return Err(Error::System(format!("{name}: mlx5dv_init_obj(PD): {e}")));
            }
        };
        std::mem::forget(guard);
        Ok(Context {
            uars: super::devx::UarPool::new(config.qps_per_uar),
            atomic_cap: dattr.atomic_cap,
            max_qp: dattr.max_qp.max(0) as u32,
            platform: platform.clone(),
            ctx,
            pd,
            name: name.to_string(),
            port,
            pdn,
            // Kept as verbs returns it (big-endian), as NCCL's net_ib reports it.
            node_guid: dattr.node_guid,
            max_qp_rd_atom: dattr.max_qp_rd_atom,
            max_qp_init_rd_atom: dattr.max_qp_init_rd_atom,
            link_layer,
            active_mtu: pattr.active_mtu,
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
        let pci_path = self.platform.pci_path(&self.name);
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
        // fd -1 makes the kernel refuse before touching anything; a region
        // returned anyway is released at once.
        // SAFETY: fd -1 is the probe the contract allows; nothing is mapped.
        match unsafe { self.platform.reg_dmabuf_mr(self.pd, 0, 0, 0, -1, 0) } {
            Ok(mr) => {
                if let Err(e) = self.platform.dereg_mr(mr.handle) {
                    tracing::warn!("{}: ibv_dereg_mr of the dma-buf probe: {e}", self.name);
                }
                true
            }
            Err(e) => !matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::EPROTONOSUPPORT)),
        }
    }

    /// log2 of the largest message (qpc.log_msg_max), at most 30 (1 GiB).
    pub fn log_msg_max(&self) -> u8 {
        let m = self.max_msg_sz.max(1);
        (31 - m.leading_zeros()).min(30) as u8
    }
}

struct CtxGuard<'a>(&'a Arc<dyn Platform>, Handle);
impl Drop for CtxGuard<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.0.close_device(self.1) {
            tracing::warn!("ibv_close_device after a failed open: {e}");
        }
    }
}

fn query_gid(p: &dyn Platform, ctx: Handle, port: u8, index: i32) -> Option<[u8; 16]> {
    p.query_gid(ctx, port, index).ok().filter(|raw| *raw != [0; 16])
}

/// The GID to use: RCCL_RUST_GIN_GID_INDEX when set; otherwise index 0 on
/// InfiniBand, and on RoCE the first RoCE v2 IPv4-mapped GID, else the first
/// RoCE v2 GID, else the first non-zero one.
fn pick_gid(
    p: &dyn Platform,
    ctx: Handle,
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
        let g = query_gid(p, ctx, port, wanted).ok_or_else(|| {
            Error::System(format!("{name} port {port}: GID index {wanted} (RCCL_RUST_GIN_GID_INDEX) is empty"))
        })?;
        let t = p.gid_type(name, port, wanted).unwrap_or(default_type);
        return Ok((wanted as u8, g, t));
    }
    if ll == LinkLayer::Infiniband {
        let g = query_gid(p, ctx, port, 0)
            .ok_or_else(|| Error::System(format!("{name} port {port}: GID 0 is empty (no subnet manager?)")))?;
        return Ok((0, g, GidType::Ib));
    }
    let mut any: Option<(u8, [u8; 16], GidType)> = None;
    let mut v2: Option<(u8, [u8; 16], GidType)> = None;
    for i in 0..table_len.min(256) {
        let Some(g) = query_gid(p, ctx, port, i) else { continue };
        let t = p.gid_type(name, port, i);
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
