//! Plugin instances, listening and collective comms: init, listen, connect.

use super::handle::ListenHandle;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::ffi::nccl::NCCL_NET_HANDLE_MAXSIZE;
use super::rails::{on_rail, RailSet};
use crate::{bad_arg, info_line, warn_line};
use std::ffi::{c_int, c_void};
use crate::oob::{self, Listener, Mesh};
use crate::provider::{CounterSnapshot, Nic, NicAddress, Provider, NIC_ADDRESS_BYTES};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What init() creates: the configuration and the selected provider.
pub struct Instance {
    pub config: Config,
    pub provider: Arc<dyn Provider>,
    pub comm_id: u64,
    alive: AtomicBool,
}

impl Instance {
    pub fn new(config: Config, provider: Arc<dyn Provider>, comm_id: u64) -> Instance {
        Instance { config, provider, comm_id, alive: AtomicBool::new(true) }
    }

    pub fn finalize(&self) {
        self.alive.store(false, Ordering::Release);
    }

    /// Fails once finalize() ran: objects created under it are unusable.
    pub fn check_alive(&self) -> Result<()> {
        if self.alive.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(Error::InvalidUsage("called after finalize() of the plugin context that created this object".into()))
        }
    }
}

/// listen(): the opened NICs (one per rail, `dev` first) and the
/// connection-setup socket.
pub struct ListenComm {
    pub instance: Arc<Instance>,
    pub dev: usize,
    /// Every rail's NIC as one ([`RailSet`]); rail 0's itself with one rail.
    pub nic: Arc<dyn Nic>,
    /// One NIC per rail, rail 0 = `dev`.
    pub rails: Vec<Arc<dyn Nic>>,
    pub listener: Arc<Listener>,
    pub handle: ListenHandle,
}

impl ListenComm {
    /// Opens `dev` and, for `rails` > 1, the next closest NICs
    /// ([`crate::provider::pick_rails`]); a NIC that fails to open is named
    /// with its rail in the error.
    pub fn new(instance: Arc<Instance>, dev: usize, rails: usize) -> Result<ListenComm> {
        instance.check_alive()?;
        let provider = &instance.provider;
        let devs = crate::provider::pick_rails(&**provider, dev, rails)?;
        if devs.len() < rails {
            warn_line!(
                "RCCL_RUST_GIN_RAILS={rails}, but the {:?} provider has {} NIC(s): using {} rail(s)",
                provider.kind(),
                provider.devices(),
                devs.len()
            );
        }
        let mut nics = Vec::with_capacity(devs.len());
        for (rail, &d) in devs.iter().enumerate() {
            let nic = provider.open(d).map_err(|e| {
                let name = provider.info(d).map(|i| i.name).unwrap_or_else(|_| format!("device {d}"));
                on_rail(e, &format!("rail {rail}: NIC {name} (device {d}) failed to open"))
            })?;
            nics.push(nic);
        }
        let nic = RailSet::nic(&nics);
        let ip = oob::pick_address(instance.config.socket_ifname.as_deref())?;
        let listener = Arc::new(Listener::bind(ip)?);
        let handle = ListenHandle {
            provider: instance.provider.kind(),
            socket: listener.addr(),
            nonce: rand_u32(),
            nic: nics[0].address(),
            secret: oob::frame::random_secret()?,
        };
        Ok(ListenComm { instance, dev, nic, rails: nics, listener, handle })
    }
}

/// connect(): every rank's NIC addresses and a mesh for small collectives.
pub struct CollComm {
    pub instance: Arc<Instance>,
    /// Every rail's NIC as one ([`RailSet`]: registers on every rail); rail
    /// 0's itself with one rail.
    pub nic: Arc<dyn Nic>,
    /// One NIC per rail, as many on every rank (the least any rank opened).
    pub rails: Vec<Arc<dyn Nic>>,
    pub mesh: Mesh,
    pub rank: u32,
    pub nranks: u32,
    /// `peers[rail][rank]`: that rank's NIC on that rail.
    pub peers: Vec<Vec<NicAddress>>,
    /// Serializes the collective calls on this comm (they share the mesh).
    pub collective: std::sync::Mutex<()>,
    /// Descriptors of deregistered windows, kept (invalidated) until close so
    /// that a kernel holding a stale ginHandle reads a clean "not a window".
    pub retired_windows: std::sync::Mutex<Vec<crate::gpu::GpuBuf>>,
}

impl CollComm {
    pub fn connect(listen: &ListenComm, handles: Vec<ListenHandle>, rank: u32) -> Result<CollComm> {
        Self::connect_cancellable(listen, handles, rank, Arc::new(std::sync::atomic::AtomicBool::new(false)))
    }

    /// As [`CollComm::connect`]; setting `cancel` makes the setup give up
    /// at its next wait (RMA v17's abortFlag), not at the connect timeout.
    pub fn connect_cancellable(
        listen: &ListenComm,
        handles: Vec<ListenHandle>,
        rank: u32,
        cancel: Arc<std::sync::atomic::AtomicBool>,
    ) -> Result<CollComm> {
        listen.instance.check_alive()?;
        let nranks = handles.len() as u32;
        if handles[rank as usize] != listen.handle {
            return Err(Error::InvalidArgument(format!(
                "handles[{rank}] is not the handle this listen comm produced (rank or handle order mixed up?)"
            )));
        }
        for (r, h) in handles.iter().enumerate() {
            listen.nic.check_peer(&h.nic).map_err(|e| Error::InvalidArgument(format!("rank {r}: {}", e.message())))?;
        }
        // The same on every rank: a digest of everyone's handle.
        let comm_id = handles.iter().fold(listen.instance.comm_id ^ 0x5247_434f_4d4d_0000, |acc, h| {
            acc.rotate_left(7) ^ (h.nonce as u64) ^ ((h.socket.port() as u64) << 32)
        });
        let timeout = Duration::from_millis(listen.instance.config.connect_timeout_ms);
        let key = oob::frame::job_key(handles.iter().map(|h| &h.secret), comm_id);
        let peers = handles.iter().map(|h| h.socket).collect();
        let mesh = Mesh::new(listen.listener.clone(), rank, peers, comm_id, key, timeout).cancelled_by(cancel);
        // Every rank is reachable and agrees on who is who; each tells the
        // others its NICs, one per rail (the handle has room for rail 0's).
        let mut mine = listen.handle.nonce.to_le_bytes().to_vec();
        mine.push(listen.rails.len() as u8);
        for nic in &listen.rails {
            mine.extend_from_slice(&nic.address());
        }
        let seen = mesh.allgather(&mine)?;
        let mut their_rails = Vec::with_capacity(seen.len());
        for (r, v) in seen.iter().enumerate() {
            if v.get(..4) != Some(&handles[r].nonce.to_le_bytes()[..]) {
                return Err(Error::Remote(format!(
                    "rank {r} answered connection setup with another identity (stale or mixed handles)"
                )));
            }
            let n = v.get(4).copied().unwrap_or(0) as usize;
            if n == 0 || v.len() != 5 + NIC_ADDRESS_BYTES * n || v[5..5 + NIC_ADDRESS_BYTES] != handles[r].nic[..] {
                return Err(Error::Remote(format!("rank {r} sent a malformed list of its NICs ({} bytes)", v.len())));
            }
            their_rails.push(v[5..].chunks_exact(NIC_ADDRESS_BYTES).map(|a| a.try_into().expect("40")).collect::<Vec<NicAddress>>());
        }
        // As many rails as the rank with the fewest: context c uses rail
        // c mod R on every rank.
        let nrails = their_rails.iter().map(Vec::len).min().unwrap_or(1);
        if nrails < listen.rails.len() {
            info_line!(NET, "rank {rank}: {} rail(s) opened, {nrails} used (another rank has fewer)", listen.rails.len());
        }
        let rails: Vec<Arc<dyn Nic>> = listen.rails[..nrails].to_vec();
        let peers: Vec<Vec<NicAddress>> = (0..nrails).map(|k| their_rails.iter().map(|t| t[k]).collect()).collect();
        for (k, nic) in rails.iter().enumerate().skip(1) {
            for (r, a) in peers[k].iter().enumerate() {
                nic.check_peer(a).map_err(|e| {
                    Error::InvalidArgument(format!("rank {r}, {}: {}", RailSet::label(k, &**nic), e.message()))
                })?;
            }
        }
        Ok(CollComm {
            instance: listen.instance.clone(),
            nic: if nrails == listen.rails.len() { listen.nic.clone() } else { RailSet::nic(&rails) },
            rails,
            mesh,
            rank,
            nranks,
            peers,
            collective: std::sync::Mutex::new(()),
            retired_windows: std::sync::Mutex::new(Vec::new()),
        })
    }
}

impl CollComm {
    /// What each rail's NIC counted ("rail r (NIC name)", None where the
    /// provider does not count), rail 0 first.
    pub fn rail_counters(&self) -> Vec<(String, Option<CounterSnapshot>)> {
        self.rails.iter().enumerate().map(|(k, n)| (RailSet::label(k, &**n), n.counters())).collect()
    }
}

/// listen() once the plugin context is found: opens the NICs of `rails`
/// rails (`dev` first) and the connection-setup socket and writes the
/// 128-byte handle into RCCL's buffer.
///
/// # Safety
/// `handle` is NULL (refused) or points to NCCL_NET_HANDLE_MAXSIZE writable bytes.
pub unsafe fn listen_on(inst: Arc<Instance>, dev: c_int, rails: usize, handle: *mut c_void) -> Result<ListenComm> {
    if handle.is_null() {
        return Err(bad_arg!("handle is NULL"));
    }
    if dev < 0 || dev as usize >= inst.provider.devices() {
        return Err(bad_arg!("dev {dev} out of range (this provider has {} device(s))", inst.provider.devices()));
    }
    let l = ListenComm::new(inst, dev as usize, rails)?;
    let bytes = l.handle.encode();
    // SAFETY: RCCL's handle buffer holds NCCL_NET_HANDLE_MAXSIZE bytes.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), handle as *mut u8, bytes.len()) };
    info_line!(NET, "listening for connection setup on {} (NIC {})", l.listener.addr(), l.nic.info().name);
    Ok(l)
}

/// The largest nranks connect() takes. Each rank holds one RC queue pair per
/// peer, and an mlx5 QP number is 24 bits wide, so no NIC serves more peers
/// than 2^24; anything above is a corrupted argument, refused before any
/// allocation sized by it.
pub const MAX_NRANKS: c_int = 1 << 24;

/// connect() once the plugin context and listen comm are found: checks rank
/// and nranks, decodes every rank's handle and builds the collective comm.
///
/// # Safety
/// As [`decode_handles`].
pub unsafe fn connect_with(
    inst: &Instance,
    l: &ListenComm,
    handles: *mut *mut c_void,
    nranks: c_int,
    rank: c_int,
) -> Result<CollComm> {
    // SAFETY: the caller's contract.
    let hs = unsafe { decode_handles(inst, handles, nranks, rank)? };
    connected(inst, CollComm::connect(l, hs, rank as u32)?)
}

/// The INFO line of a finished connect().
pub fn connected(inst: &Instance, c: CollComm) -> Result<CollComm> {
    info_line!(
        NET,
        "rank {}/{} connected (provider {:?}, NIC {}, {} rail(s))",
        c.rank,
        c.nranks,
        inst.provider.kind(),
        c.nic.info().name,
        c.rails.len()
    );
    Ok(c)
}

/// connect()'s checks of rank and nranks, and every rank's handle decoded.
///
/// # Safety
/// `handles` is NULL (refused) or points to `nranks` pointers, each NULL
/// (refused) or to NCCL_NET_HANDLE_MAXSIZE readable bytes.
pub unsafe fn decode_handles(
    inst: &Instance,
    handles: *mut *mut c_void,
    nranks: c_int,
    rank: c_int,
) -> Result<Vec<ListenHandle>> {
    inst.check_alive()?;
    if !(1..=MAX_NRANKS).contains(&nranks) {
        return Err(bad_arg!("nranks {nranks} out of range [1, {MAX_NRANKS}] (one queue pair per peer, 24-bit QP numbers)"));
    }
    if rank < 0 || rank >= nranks {
        return Err(bad_arg!("rank {rank} out of range [0, {nranks})"));
    }
    if handles.is_null() {
        return Err(bad_arg!("handles is NULL"));
    }
    // Grown as handles decode, not reserved from nranks: a bad handle stops
    // it early.
    let mut hs = Vec::new();
    for r in 0..nranks as usize {
        // SAFETY: RCCL passes nranks handle pointers.
        let p = unsafe { *handles.add(r) };
        if p.is_null() {
            return Err(bad_arg!("handles[{r}] is NULL"));
        }
        // SAFETY: each handle is an NCCL_NET_HANDLE_MAXSIZE-byte buffer.
        let b = unsafe { std::slice::from_raw_parts(p as *const u8, NCCL_NET_HANDLE_MAXSIZE) };
        hs.push(ListenHandle::decode(b, r, inst.provider.kind())?);
    }
    Ok(hs)
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.write_u32(std::process::id());
    h.finish() as u32
}
