//! A recording stand-in for rdma-core (verbs, mlx5dv, DevX), sysfs and HIP,
//! behind the mlx5 provider's `Platform` trait, so the provider's control
//! path runs where no ConnectX and no GPU exist.
//!
//! It hands out fake handles (never dereferenced by the provider) and real
//! memory where the provider writes (the UAR pages: the host doorbell's
//! volatile store lands there; queue memory comes from host memory). It
//! keeps:
//! - a log of every call ([`Call`]), with the DevX command bytes it received;
//! - the live objects, checking that each destroy is of a live object and of
//!   the most recently created one (teardown in reverse order; memory
//!   regions, which nothing but their PD depends on, may go in any order);
//! - a firmware model of the QP state machine (RST -> INIT -> RTR -> RTS, by
//!   the QPN the command names) that refuses a transition out of order;
//! - a step counter over every call that can fail: `fail_at(n)` makes step n
//!   fail (errno EIO; DevX commands also get a firmware status and syndrome).
//!
//! Fields of the commands are read with [`bits`], written here from the PRM's
//! rule (big-endian bit fields numbered from the MSB of byte 0), not with the
//! provider's encoder.

#![allow(dead_code)]

use rccl_rust_gin::error::{Error, Result};
use rccl_rust_gin::gpu::hip::DmaBufRange;
use rccl_rust_gin::gpu::{Allocator, GpuBuf, HostMemory, Object};
use rccl_rust_gin::provider::mlx5::addr::GidType;
use rccl_rust_gin::provider::mlx5::platform::{
    AhAttr, DeviceAttr, DeviceMapping, GpuAccess, Handle, MrKeys, OpenFailure, Platform, PortAttr, UarInfo,
};
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

/// A field of a PRM command: `width` bits from bit `bit` (bit 0 is the MSB of byte 0).
pub fn bits(buf: &[u8], bit: usize, width: usize) -> u64 {
    (bit..bit + width).fold(0u64, |v, pos| (v << 1) | u64::from((buf[pos / 8] >> (7 - pos % 8)) & 1))
}

/// The errno every injected failure carries.
pub const INJECTED_ERRNO: i32 = libc::EIO;
/// The firmware status and syndrome a failed DevX command reports.
pub const INJECTED_STATUS: u8 = 0x05;
pub const INJECTED_SYNDROME: u32 = 0x5eed_0bad;
/// Where the stand-in "GPU" sees a mapped I/O address: the CPU address plus this.
pub const GPU_IO_OFFSET: u64 = 0x1000_0000_0000;
/// The EQ number devx_query_eqn answers.
pub const EQN: u32 = 0x17;
/// The PD number pd_number answers.
pub const PDN: u32 = 0x2a;
/// The byte offset of the doorbell register in a UAR page (MLX5_BF_OFFSET).
pub const UAR_REG_OFFSET: usize = 0x800;

/// One call the provider made.
#[derive(Clone, Debug)]
pub struct Call {
    /// The C function (or the step) named as the provider's messages name it.
    pub name: String,
    /// Arguments, for the log.
    pub detail: String,
    /// The object made or destroyed.
    pub handle: Option<usize>,
    /// The injectable step number, when the call could fail.
    pub step: Option<usize>,
    /// Whether the stand-in made it fail.
    pub failed: bool,
    /// A DevX command's input bytes.
    pub input: Vec<u8>,
}

/// What kind of device the stand-in plays.
#[derive(Clone, Debug)]
pub struct Setup {
    pub devices: Vec<String>,
    /// IBV_LINK_LAYER_INFINIBAND (1) or _ETHERNET (2).
    pub link_layer: u8,
    /// GID table: (gid, sysfs type).
    pub gids: Vec<([u8; 16], Option<GidType>)>,
    pub lid: u16,
    /// Whether the kernel imports dma-bufs (the probe's answer).
    pub dmabuf: bool,
    /// Whether a GPU exists.
    pub gpu: bool,
    /// The MAC the kernel resolves for every AH.
    pub rmac: [u8; 6],
    pub max_msg_sz: u32,
    /// verbs `atomic_cap` (1 = IBV_ATOMIC_HCA, 2 = GLOB).
    pub atomic_cap: u32,
    /// The GPU's PCI bus id and the configuration space sysfs shows for it.
    pub gpu_pci: Option<(String, Vec<u8>)>,
    /// QUERY_HCA_CAP's general `dct` bit (DC transport).
    pub dct: bool,
    /// What QUERY_Q_COUNTER answers: (bit offset in the output, value),
    /// placed by the PRM's rule, not the provider's decoder.
    pub q_counters: Vec<(usize, u32)>,
}

impl Setup {
    /// One RoCE v2 port: GID 0 link-local (RoCE v1), GID 1 IPv4-mapped RoCE v2.
    pub fn roce() -> Setup {
        let mut v1 = [0u8; 16];
        v1[0] = 0xfe;
        v1[1] = 0x80;
        v1[15] = 0x01;
        let mut v2 = [0u8; 16];
        v2[10] = 0xff;
        v2[11] = 0xff;
        v2[12..].copy_from_slice(&[192, 168, 7, 1]);
        Setup {
            devices: vec!["mlx5_0".into()],
            link_layer: 2,
            gids: vec![(v1, Some(GidType::RoceV1)), (v2, Some(GidType::RoceV2))],
            lid: 0,
            dmabuf: true,
            gpu: true,
            rmac: [0x02, 0x11, 0x22, 0x33, 0x44, 0x55],
            max_msg_sz: 1 << 31,
            atomic_cap: 1,
            gpu_pci: None,
            dct: true,
            // local_ack_timeout_err (0x300) and out_of_sequence (0x1c0),
            // mlx5_ifc.h query_q_counter_out.
            q_counters: vec![(0x300, 7), (0x1c0, 2)],
        }
    }

    /// One InfiniBand port, LID 7.
    pub fn infiniband() -> Setup {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[15] = 0x07;
        Setup { link_layer: 1, gids: vec![(g, None)], lid: 7, ..Setup::roce() }
    }
}

/// A live object.
#[derive(Clone, Debug)]
pub struct Live {
    pub handle: usize,
    pub kind: &'static str,
}

/// A QP as the firmware model sees it.
#[derive(Clone, Debug)]
pub struct FwQp {
    pub handle: usize,
    pub qpn: u32,
    /// "RST", "INIT", "RTR" or "RTS".
    pub state: &'static str,
}

#[derive(Default)]
struct State {
    log: Vec<Call>,
    live: Vec<Live>,
    /// Teardown faults: a destroy of something not live, or out of order.
    faults: Vec<String>,
    next_handle: usize,
    steps: usize,
    fail_at: Option<usize>,
    /// Registered umems: id -> (addr, len).
    umems: HashMap<u32, (u64, usize)>,
    umem_order: Vec<u32>,
    /// UAR pages handed out (kept until the stand-in drops: the host
    /// doorbell stores into them, and the test reads them afterwards).
    uar_pages: Vec<UarPage>,
    next_id: u32,
    qps: Vec<FwQp>,
    objs: HashMap<usize, (&'static str, u32)>,
    exported_fds: Vec<i32>,
}

/// One 4 KiB UAR page of ordinary memory.
pub struct UarPage {
    pub handle: usize,
    pub page_id: u32,
    mem: Box<Page>,
}

#[repr(C, align(4096))]
struct Page([u8; 4096]);

impl UarPage {
    pub fn base(&self) -> usize {
        self.mem.0.as_ptr() as usize
    }
    /// The 64-bit doorbell register's content, as stored (wire order).
    pub fn doorbell(&self) -> u64 {
        let p = (self.base() + UAR_REG_OFFSET) as *const u64;
        // SAFETY: an aligned word inside the page this stand-in owns; the
        // provider's host doorbell stores to it with volatile writes.
        unsafe { p.read_volatile() }
    }
}

/// The stand-in. Clones share one state.
#[derive(Clone)]
pub struct StandIn {
    setup: Arc<Setup>,
    state: Arc<Mutex<State>>,
    /// Held for the whole of each call that logs a step: a call's step, its
    /// input, its object and its number are recorded together even when
    /// ranks on several threads call at once (their calls interleaved once
    /// made one command's input land on another's log entry).
    call: Arc<Mutex<()>>,
}

impl StandIn {
    pub fn new(setup: Setup) -> StandIn {
        StandIn {
            setup: Arc::new(setup),
            state: Arc::new(Mutex::new(State { next_id: 1, ..State::default() })),
            call: Arc::new(Mutex::new(())),
        }
    }

    /// The same stand-in failing at injectable step `n` (0-based).
    pub fn fail_at(self, n: usize) -> StandIn {
        self.st().fail_at = Some(n);
        self
    }

    /// One platform call at a time (see `call`).
    fn one_call(&self) -> MutexGuard<'_, ()> {
        self.call.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn st(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn platform(&self) -> Arc<dyn Platform> {
        Arc::new(self.clone())
    }

    pub fn log(&self) -> Vec<Call> {
        self.st().log.clone()
    }
    pub fn live(&self) -> Vec<Live> {
        self.st().live.clone()
    }
    pub fn faults(&self) -> Vec<String> {
        self.st().faults.clone()
    }
    pub fn steps(&self) -> usize {
        self.st().steps
    }
    pub fn qps(&self) -> Vec<FwQp> {
        self.st().qps.clone()
    }
    /// (id, addr, len) of every umem registered, in order.
    pub fn umems(&self) -> Vec<(u32, u64, usize)> {
        let s = self.st();
        s.umem_order.iter().map(|id| (*id, s.umems[id].0, s.umems[id].1)).collect()
    }
    /// The doorbell word of the UAR page with `page_id`.
    pub fn doorbell(&self, page_id: u32) -> Option<u64> {
        self.st().uar_pages.iter().find(|p| p.page_id == page_id).map(|p| p.doorbell())
    }
    /// The CPU doorbell register of the UAR page with `page_id`.
    pub fn doorbell_addr(&self, page_id: u32) -> Option<usize> {
        self.st().uar_pages.iter().find(|p| p.page_id == page_id).map(|p| p.base() + UAR_REG_OFFSET)
    }
    /// The kind of the object with handle `h` (live or destroyed).
    pub fn kind_of(&self, h: usize) -> &'static str {
        self.st().objs.get(&h).map(|o| o.0).unwrap_or("?")
    }
    /// The numbers (cqn, qpn, dctn, rmpn) of the DevX objects of `kind`, in
    /// creation order.
    pub fn nums_of(&self, kind: &str) -> Vec<u32> {
        let s = self.st();
        let mut v: Vec<(usize, u32)> = s.objs.iter().filter(|(_, o)| o.0 == kind).map(|(h, o)| (*h, o.1)).collect();
        v.sort();
        v.into_iter().map(|x| x.1).collect()
    }
    /// The number of the one DevX object of `kind`.
    pub fn num_of(&self, kind: &str) -> u64 {
        let v = self.nums_of(kind);
        assert_eq!(v.len(), 1, "one {kind}");
        v[0].into()
    }
    /// The calls named `name`.
    /// The numbers of the live DevX objects of one kind ("qp", "q_counter").
    pub fn objs_of(&self, kind: &str) -> Vec<u32> {
        self.st().objs.values().filter(|(k, _)| *k == kind).map(|(_, n)| *n).collect()
    }

    pub fn calls(&self, name: &str) -> Vec<Call> {
        self.st().log.iter().filter(|c| c.name == name).cloned().collect()
    }

    /// Counts a call that can fail; Err when it is the step to fail.
    fn step(&self, name: &str, detail: String) -> io::Result<usize> {
        let mut s = self.st();
        let n = s.steps;
        s.steps += 1;
        let failed = s.fail_at == Some(n);
        s.log.push(Call { name: name.into(), detail, handle: None, step: Some(n), failed, input: Vec::new() });
        if failed {
            return Err(io::Error::from_raw_os_error(INJECTED_ERRNO));
        }
        Ok(n)
    }

    /// A new live object of `kind`, logged on the latest call.
    fn make(&self, kind: &'static str) -> Handle {
        let mut s = self.st();
        s.next_handle += 1;
        let h = 0x5ea_0000 + s.next_handle * 0x40;
        s.live.push(Live { handle: h, kind });
        if let Some(c) = s.log.last_mut() {
            c.handle = Some(h);
        }
        Handle(h)
    }

    /// Destroys `h`, which must be live, of `kind`, and the newest live object
    /// (regions aside).
    fn destroy(&self, name: &str, h: Handle, kind: &'static str) {
        let mut s = self.st();
        s.log.push(Call {
            name: name.into(),
            detail: format!("{kind} {:#x}", h.0),
            handle: Some(h.0),
            step: None,
            failed: false,
            input: Vec::new(),
        });
        match s.live.iter().rposition(|l| l.handle == h.0) {
            None => s.faults.push(format!("{name} of {:#x}, which is not live", h.0)),
            Some(i) => {
                let l = s.live.remove(i);
                if l.kind != kind {
                    s.faults.push(format!("{name} of a {} ({:#x}), expected a {kind}", l.kind, h.0));
                }
                // Regions depend only on their PD and context: they may go
                // in any order relative to the queue objects and each other.
                let newer: Vec<_> = s.live[i..]
                    .iter()
                    .map(|l| l.kind)
                    .filter(|k| *k != "mr" || kind == "pd" || kind == "context")
                    .collect();
                if !newer.is_empty() {
                    s.faults.push(format!("{name} of the {kind} {:#x} while newer objects live: {newer:?}", h.0));
                }
            }
        }
    }

    fn new_id(&self) -> u32 {
        let mut s = self.st();
        s.next_id += 1;
        s.next_id
    }
}

impl Platform for StandIn {
    fn device_names(&self) -> io::Result<Vec<String>> {
        let _one = self.one_call();
        self.step("ibv_get_device_list", String::new())?;
        if self.setup.devices.is_empty() {
            return Err(io::Error::from_raw_os_error(libc::ENOSYS));
        }
        Ok(self.setup.devices.clone())
    }

    fn open_device(&self, name: &str, devx: bool) -> std::result::Result<Handle, OpenFailure> {
        let _one = self.one_call();
        let call = if devx { "mlx5dv_open_device" } else { "ibv_open_device" };
        self.step(call, name.into()).map_err(OpenFailure::Open)?;
        if !self.setup.devices.iter().any(|d| d == name) {
            return Err(OpenFailure::NoSuchDevice);
        }
        Ok(self.make("context"))
    }

    fn close_device(&self, ctx: Handle) -> io::Result<()> {
        let _one = self.one_call();
        self.destroy("ibv_close_device", ctx, "context");
        Ok(())
    }

    fn query_device(&self, _ctx: Handle) -> io::Result<DeviceAttr> {
        let _one = self.one_call();
        self.step("ibv_query_device", String::new())?;
        Ok(DeviceAttr {
            atomic_cap: self.setup.atomic_cap,
            phys_port_cnt: 1,
            node_guid: 0x0102_0304_0506_0708,
            max_qp_rd_atom: 16,
            max_qp_init_rd_atom: 16,
            max_qp: 131_072,
            fw_ver: rccl_rust_gin::provider::mlx5::platform::FwVer::new("16.35.2000"),
        })
    }

    fn query_port(&self, _ctx: Handle, port: u8) -> io::Result<PortAttr> {
        let _one = self.one_call();
        self.step("ibv_query_port", format!("port {port}"))?;
        Ok(PortAttr {
            state: 4,
            link_layer: self.setup.link_layer,
            gid_tbl_len: self.setup.gids.len() as i32,
            active_mtu: 5,
            lid: self.setup.lid,
            active_speed: 0x80,
            active_width: 2,
            max_msg_sz: self.setup.max_msg_sz,
        })
    }

    fn query_gid(&self, _ctx: Handle, port: u8, index: i32) -> io::Result<[u8; 16]> {
        let _one = self.one_call();
        self.step("ibv_query_gid", format!("port {port} index {index}"))?;
        self.setup.gids.get(index as usize).map(|g| g.0).ok_or(io::Error::from_raw_os_error(libc::EINVAL))
    }

    fn gid_type(&self, _name: &str, _port: u8, index: i32) -> Option<GidType> {
        self.setup.gids.get(index as usize).and_then(|g| g.1)
    }

    fn pci_path(&self, name: &str) -> String {
        format!("/sys/devices/stand-in/{name}")
    }

    fn read_sysfs(&self, path: &str) -> io::Result<Vec<u8>> {
        match &self.setup.gpu_pci {
            Some((bdf, config)) if path == format!("/sys/bus/pci/devices/{bdf}/config") => Ok(config.clone()),
            _ => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    }

    fn alloc_pd(&self, _ctx: Handle) -> io::Result<Handle> {
        let _one = self.one_call();
        self.step("ibv_alloc_pd", String::new())?;
        Ok(self.make("pd"))
    }

    fn pd_number(&self, _pd: Handle) -> io::Result<u32> {
        let _one = self.one_call();
        self.step("mlx5dv_init_obj(PD)", String::new())?;
        Ok(PDN)
    }

    fn dealloc_pd(&self, pd: Handle) -> io::Result<()> {
        let _one = self.one_call();
        self.destroy("ibv_dealloc_pd", pd, "pd");
        Ok(())
    }

    unsafe fn reg_mr(&self, _pd: Handle, addr: u64, len: usize, access: i32) -> io::Result<MrKeys> {
        let _one = self.one_call();
        self.step("ibv_reg_mr", format!("addr {addr:#x} len {len} access {access:#x}"))?;
        let h = self.make("mr");
        let k = self.new_id();
        Ok(MrKeys { handle: h, lkey: 0x1000 + k, rkey: 0x2000 + k })
    }

    unsafe fn reg_dmabuf_mr(
        &self,
        _pd: Handle,
        offset: u64,
        len: usize,
        iova: u64,
        fd: i32,
        access: i32,
    ) -> io::Result<MrKeys> {
        let _one = self.one_call();
        if fd == -1 {
            // The support probe: the kernel's answer, not a step to fail.
            self.st().log.push(Call {
                name: "ibv_reg_dmabuf_mr(probe)".into(),
                detail: String::new(),
                handle: None,
                step: None,
                failed: false,
                input: Vec::new(),
            });
            let e = if self.setup.dmabuf { libc::EBADF } else { libc::EOPNOTSUPP };
            return Err(io::Error::from_raw_os_error(e));
        }
        self.step(
            "ibv_reg_dmabuf_mr",
            format!("offset {offset:#x} len {len} iova {iova:#x} fd {fd} access {access:#x}"),
        )?;
        if !self.st().exported_fds.contains(&fd) {
            self.st().faults.push(format!("ibv_reg_dmabuf_mr of fd {fd}, which was not exported"));
        }
        let h = self.make("mr");
        let k = self.new_id();
        Ok(MrKeys { handle: h, lkey: 0x1000 + k, rkey: 0x2000 + k })
    }

    fn dereg_mr(&self, mr: Handle) -> io::Result<()> {
        let _one = self.one_call();
        self.destroy("ibv_dereg_mr", mr, "mr");
        Ok(())
    }

    fn create_ah(&self, _pd: Handle, a: &AhAttr) -> io::Result<Handle> {
        let _one = self.one_call();
        self.step("ibv_create_ah", format!("{a:?}"))?;
        Ok(self.make("ah"))
    }

    fn ah_rmac(&self, _ah: Handle) -> io::Result<[u8; 6]> {
        let _one = self.one_call();
        self.step("mlx5dv_init_obj(AH)", String::new())?;
        Ok(self.setup.rmac)
    }

    fn destroy_ah(&self, ah: Handle) -> io::Result<()> {
        let _one = self.one_call();
        self.destroy("ibv_destroy_ah", ah, "ah");
        Ok(())
    }

    fn devx_query_eqn(&self, _ctx: Handle, vector: u32) -> io::Result<u32> {
        let _one = self.one_call();
        self.step("mlx5dv_devx_query_eqn", format!("vector {vector}"))?;
        Ok(EQN)
    }

    unsafe fn devx_umem_reg(&self, _ctx: Handle, addr: u64, len: usize, access: u32) -> io::Result<(Handle, u32)> {
        let _one = self.one_call();
        self.step("mlx5dv_devx_umem_reg", format!("addr {addr:#x} len {len} access {access:#x}"))?;
        let h = self.make("umem");
        let id = self.new_id();
        let mut s = self.st();
        s.umems.insert(id, (addr, len));
        s.umem_order.push(id);
        Ok((h, id))
    }

    fn devx_umem_dereg(&self, umem: Handle) -> io::Result<()> {
        let _one = self.one_call();
        self.destroy("mlx5dv_devx_umem_dereg", umem, "umem");
        Ok(())
    }

    fn devx_alloc_uar(&self, _ctx: Handle, flags: u32) -> io::Result<UarInfo> {
        let _one = self.one_call();
        self.step("mlx5dv_devx_alloc_uar", format!("flags {flags:#x}"))?;
        let h = self.make("uar");
        let page_id = 0x40 + self.new_id();
        let page = UarPage { handle: h.0, page_id, mem: Box::new(Page([0; 4096])) };
        let reg_addr = page.base() + UAR_REG_OFFSET;
        self.st().uar_pages.push(page);
        Ok(UarInfo { handle: h, reg_addr, page_id })
    }

    fn devx_free_uar(&self, uar: Handle) {
        let _one = self.one_call();
        self.destroy("mlx5dv_devx_free_uar", uar, "uar");
    }

    fn devx_obj_create(&self, _ctx: Handle, input: &[u8], out: &mut [u8]) -> io::Result<Handle> {
        let _one = self.one_call();
        // The opcode is the first 16 bits of every command.
        let (name, kind) = match bits(input, 0, 16) {
            0x400 => ("mlx5dv_devx_obj_create(CREATE_CQ)", "cq"),
            0x500 if bits(input, 0xc0 + 0x08, 8) == 0x5 => ("mlx5dv_devx_obj_create(CREATE_QP DCI)", "qp"),
            0x500 => ("mlx5dv_devx_obj_create(CREATE_QP)", "qp"),
            0x710 => ("mlx5dv_devx_obj_create(CREATE_DCT)", "dct"),
            0x90c => ("mlx5dv_devx_obj_create(CREATE_RMP)", "rmp"),
            0x771 => ("mlx5dv_devx_obj_create(ALLOC_Q_COUNTER)", "q_counter"),
            op => panic!("the stand-in knows no DevX create opcode {op:#x}"),
        };
        let r = self.step(name, format!("{} bytes", input.len()));
        self.st().log.last_mut().expect("just logged").input = input.to_vec();
        if let Err(e) = r {
            fail_output(out);
            return Err(e);
        }
        let h = self.make(kind);
        // The object number goes to bits 0x48..0x60 of the output (cqn, qpn,
        // dctn, rmpn; a queue-counter set's 8-bit id is bits 0x58..0x60).
        let num = match kind {
            "cq" => 0x80,
            "q_counter" => 0x20,
            "dct" => 0x3000,
            "rmp" => 0x2000,
            _ => 0x1000,
        } + self.new_id();
        out.fill(0);
        out[9..12].copy_from_slice(&num.to_be_bytes()[1..]);
        let mut s = self.st();
        s.objs.insert(h.0, (kind, num));
        if kind == "qp" {
            s.qps.push(FwQp { handle: h.0, qpn: num, state: "RST" });
        }
        Ok(h)
    }

    fn devx_obj_modify(&self, obj: Handle, input: &[u8], out: &mut [u8]) -> io::Result<()> {
        let _one = self.one_call();
        let (name, from, to) = match bits(input, 0, 16) {
            0x502 => ("mlx5dv_devx_obj_modify(RST2INIT)", "RST", "INIT"),
            0x503 => ("mlx5dv_devx_obj_modify(INIT2RTR)", "INIT", "RTR"),
            0x504 => ("mlx5dv_devx_obj_modify(RTR2RTS)", "RTR", "RTS"),
            op => panic!("the stand-in knows no DevX modify opcode {op:#x}"),
        };
        let r = self.step(name, format!("{} bytes", input.len()));
        self.st().log.last_mut().expect("just logged").input = input.to_vec();
        if let Err(e) = r {
            fail_output(out);
            return Err(e);
        }
        let qpn = bits(input, 0x48, 0x18) as u32;
        let mut s = self.st();
        let Some(qp) = s.qps.iter_mut().find(|q| q.handle == obj.0) else {
            s.faults.push(format!("{name} on {:#x}, which is no QP", obj.0));
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        if qp.qpn != qpn || qp.state != from {
            let why = format!("{name} names QP {qpn:#x} in {}, the object is QP {:#x} in {}", from, qp.qpn, qp.state);
            s.faults.push(why);
            // Bad parameter / bad state, as the firmware answers.
            out.fill(0);
            out[0] = 0x10;
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        qp.state = to;
        out.fill(0);
        Ok(())
    }

    fn devx_obj_query(&self, obj: Handle, input: &[u8], out: &mut [u8]) -> io::Result<()> {
        let _one = self.one_call();
        assert_eq!(bits(input, 0, 16), 0x773, "the stand-in answers QUERY_Q_COUNTER queries only");
        let asked = bits(input, 0xf8, 8) as u32;
        let r = self.step("mlx5dv_devx_obj_query(QUERY_Q_COUNTER)", format!("counter set {asked:#x}"));
        self.st().log.last_mut().expect("just logged").input = input.to_vec();
        if let Err(e) = r {
            fail_output(out);
            return Err(e);
        }
        let mut s = self.st();
        // The kernel checks that a query names the set of the object queried.
        if s.objs.get(&obj.0) != Some(&("q_counter", asked)) {
            s.faults.push(format!("QUERY_Q_COUNTER of set {asked:#x} on object {:#x}, which is not that set", obj.0));
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        assert!(out.len() >= 0x800 / 8, "QUERY_Q_COUNTER's output is 256 bytes");
        out.fill(0);
        for &(bit, v) in &self.setup.q_counters {
            out[bit / 8..bit / 8 + 4].copy_from_slice(&v.to_be_bytes());
        }
        Ok(())
    }

    fn devx_obj_destroy(&self, obj: Handle) -> io::Result<()> {
        let _one = self.one_call();
        let kind = self.st().objs.get(&obj.0).map(|o| o.0).unwrap_or("devx object");
        self.destroy("mlx5dv_devx_obj_destroy", obj, kind);
        self.st().qps.retain(|q| q.handle != obj.0);
        Ok(())
    }

    fn devx_general_cmd(&self, _ctx: Handle, input: &[u8], out: &mut [u8]) -> io::Result<()> {
        let _one = self.one_call();
        let (op, op_mod) = (bits(input, 0, 16), bits(input, 0x30, 16));
        assert_eq!((op, op_mod), (0x100, 1), "the stand-in answers QUERY_HCA_CAP (general, current) only");
        let r = self.step("mlx5dv_devx_general_cmd(QUERY_HCA_CAP)", format!("op_mod {op_mod}"));
        self.st().log.last_mut().expect("just logged").input = input.to_vec();
        if let Err(e) = r {
            fail_output(out);
            return Err(e);
        }
        out.fill(0);
        // cmd_hca_cap.dct at bit 0x21a of the capability, which starts at
        // bit 0x80 of the output (rdma-core mlx5_ifc.h).
        let bit = 0x80 + 0x21a;
        if self.setup.dct {
            out[bit / 8] |= 0x80 >> (bit % 8);
        }
        Ok(())
    }

    fn open_gpu(&self) -> Result<Arc<dyn GpuAccess>> {
        let _one = self.one_call();
        self.step("hipGetDeviceCount", String::new())
            .map_err(|e| Error::System(format!("no GPU: hipGetDeviceCount (stand-in): {e}")))?;
        if !self.setup.gpu {
            return Err(Error::System("no GPU: hipGetDeviceCount reports no device (stand-in)".into()));
        }
        Ok(Arc::new(StandInGpu(self.clone())))
    }

    fn export_dmabuf(&self, addr: u64, len: u64) -> std::result::Result<DmaBufRange, String> {
        let _one = self.one_call();
        self.step("hipMemGetHandleForAddressRange", format!("addr {addr:#x} len {len}"))
            .map_err(|e| format!("hipMemGetHandleForAddressRange (stand-in): {e}"))?;
        let fd: std::os::fd::OwnedFd =
            std::fs::File::open("/dev/null").map_err(|e| format!("stand-in dma-buf: {e}"))?.into();
        use std::os::fd::AsRawFd;
        self.st().exported_fds.push(fd.as_raw_fd());
        Ok(DmaBufRange { fd, offset: addr & 4095 })
    }
}

/// A failed command's output: the firmware's status and syndrome.
fn fail_output(out: &mut [u8]) {
    out.fill(0);
    out[0] = INJECTED_STATUS;
    out[4..8].copy_from_slice(&INJECTED_SYNDROME.to_be_bytes());
}

/// The stand-in's GPU: host memory for queues, recorded doorbell mappings.
struct StandInGpu(StandIn);

impl GpuAccess for StandInGpu {
    fn allocator(&self) -> Arc<dyn Allocator> {
        Arc::new(StandInAlloc(self.0.clone()))
    }
    fn pci_bus_id(&self) -> Option<String> {
        self.0.setup.gpu_pci.as_ref().map(|(bdf, _)| bdf.clone())
    }
    fn map_io(&self, addr: usize, len: usize) -> io::Result<Box<dyn DeviceMapping>> {
        let _one = self.0.one_call();
        self.0.step("hipHostRegister(IoMemory)", format!("addr {addr:#x} len {len}"))?;
        let h = self.0.make("gpu mapping");
        Ok(Box::new(StandInMapping { s: self.0.clone(), h, dev: addr as u64 + GPU_IO_OFFSET }))
    }
}

struct StandInMapping {
    s: StandIn,
    h: Handle,
    dev: u64,
}

impl DeviceMapping for StandInMapping {
    fn dev_addr(&self) -> u64 {
        self.dev
    }
}

impl Drop for StandInMapping {
    fn drop(&mut self) {
        let _one = self.s.one_call();
        self.s.destroy("hipHostUnregister", self.h, "gpu mapping");
    }
}

/// Host memory, each allocation a step that can fail (as hipHostMalloc can).
struct StandInAlloc(StandIn);

impl Allocator for StandInAlloc {
    fn alloc(&self, len: usize, align: usize, object: Object) -> io::Result<GpuBuf> {
        let _one = self.0.one_call();
        self.0.step("hipHostMalloc", format!("{object:?} {len} bytes"))?;
        HostMemory.alloc(len, align, object)
    }
    fn describe(&self) -> String {
        "stand-in GPU memory".into()
    }
}
