//! createContext: the queue pairs to every peer and the GPU-visible objects a
//! kernel sees (docs/architecture.md, "What a kernel sees").
//!
//! Per context and peer: one RC queue pair (send queue, CQ of the same depth,
//! doorbell records, a dedicated UAR) and its descriptor, on the context's
//! rail (session::rails). Per context: a signal table (the target of the
//! peers' remote atomics), signal offsets, counters and an 8-byte sink for
//! atomic results. Once: the handle and the sticky error record. The signal
//! tables and the sink are registered on every rail, and each context's
//! descriptors carry its rail's keys.
//!
//! Signals travel in one of two modes per context set (provider/caps.rs,
//! `RCCL_RUST_GIN_SIGNAL_MODE`), the same on every rank: remote atomics into
//! the signal table, or (write mode) RDMA WRITEs of running totals into
//! per-sender slot tables, which are then what is registered for the peers
//! and exchanged instead (docs/nic-families.md, section 7).

use crate::session::comm::CollComm;
use crate::config::Transport;
use crate::session::dc::DcMesh;
use crate::session::mesh::{PeerSet, QpMesh};
use crate::session::rails::{on_rail, rail_of, RailSet};
use crate::abi::{
    rust_gin_context, rust_gin_dc_peer, rust_gin_error, rust_gin_handle, rust_gin_mlx5_sq, rust_gin_nic_peer,
    rust_gin_nic_sq, rust_gin_peer, RUST_GIN_DEVICE_ABI_VERSION, RUST_GIN_HANDLE_MAGIC,
};
use crate::device::DeviceError;
use crate::error::{Error, Result};
use crate::ffi::gin::{NcclGinConfig, NcclGinConfigV15};
use crate::config::SignalModeKnob;
use crate::ffi::nccl::{NcclNetDeviceHandle, NCCL_NET_DEVICE_GIN_RUST};
use crate::gpu::{GpuBuf, Object};
use crate::mlx5::queue::log_depth_for;
use crate::provider::caps::SignalMode;
use crate::config::ProviderKind;
use crate::provider::{Access, DcTarget, MemoryRegion, NicFamily, QueueDescriptor, QueuePair};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// rust-gin's backend version list, as the patch puts it in gin_host.cc:
/// index 0 is the only version ("version-less", like types 6 and 7).
pub const BACKEND_VERSIONS: &[i32] = &[0];
pub const MAX_CONTEXTS: i32 = 64;
pub const MAX_SIGNALS: i32 = 1 << 22;

/// The validated configuration of one context set.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub n_signals: u32,
    pub n_counters: u32,
    pub n_contexts: u32,
    pub log_depth: u32,
    pub traffic_class: u8,
    pub backend_version: i32,
    pub rank_stride: u32,
}

impl Settings {
    /// Checks every field of RCCL's config; `default_depth` and `default_tc`
    /// apply where RCCL leaves queueDepth at 0 and trafficClass undefined (-1).
    pub fn from_config(c: &NcclGinConfig, default_depth: u32, default_tc: i32) -> Result<Settings> {
        if c.rank_stride < 1 {
            return Err(Error::InvalidArgument(format!("config.rankStride = {}: must be at least 1", c.rank_stride)));
        }
        let f = [c.n_signals, c.n_counters, c.n_contexts, c.queue_depth, c.traffic_class, c.backend_version];
        Self::check(f, c.rank_stride as u32, default_depth, default_tc)
    }

    /// The fields of a v15 config but its peer array (checked where the
    /// comm's size is known, [`PeerSet::from_raw`]);
    /// `rank_stride` is then 1 and means nothing.
    pub fn from_v15(c: &NcclGinConfigV15, default_depth: u32, default_tc: i32) -> Result<Settings> {
        let f = [c.n_signals, c.n_counters, c.n_contexts, c.queue_depth, c.traffic_class, c.backend_version];
        Self::check(f, 1, default_depth, default_tc)
    }

    /// nSignals, nCounters, nContexts, queueDepth, trafficClass and
    /// backendVersion, in that order.
    fn check(f: [i32; 6], rank_stride: u32, default_depth: u32, default_tc: i32) -> Result<Settings> {
        let [n_signals, n_counters, n_contexts, queue_depth, traffic_class, backend_version] = f;
        let bad = |f: &str, v: i32, want: &str| Err(Error::InvalidArgument(format!("config.{f} = {v}: {want}")));
        if !(0..=MAX_SIGNALS).contains(&n_signals) {
            return bad("nSignals", n_signals, &format!("must be in [0, {MAX_SIGNALS}]"));
        }
        if !(0..=MAX_SIGNALS).contains(&n_counters) {
            return bad("nCounters", n_counters, &format!("must be in [0, {MAX_SIGNALS}]"));
        }
        if !(1..=MAX_CONTEXTS).contains(&n_contexts) {
            return bad("nContexts", n_contexts, &format!("must be in [1, {MAX_CONTEXTS}]"));
        }
        if !(0..=32768).contains(&queue_depth) {
            return bad("queueDepth", queue_depth, "must be 0 (default) or in [1, 32768]");
        }
        if !(-1..=255).contains(&traffic_class) {
            return bad("trafficClass", traffic_class, "must be -1 (undefined) or in [0, 255]");
        }
        if !BACKEND_VERSIONS.contains(&backend_version) {
            return bad(
                "backendVersion",
                backend_version,
                &format!("not in rust-gin's version list {BACKEND_VERSIONS:?}"),
            );
        }
        let depth = if queue_depth == 0 { default_depth } else { queue_depth as u32 };
        let tc = if traffic_class < 0 { default_tc } else { traffic_class };
        Ok(Settings {
            n_signals: n_signals as u32,
            n_counters: n_counters as u32,
            n_contexts: n_contexts as u32,
            log_depth: log_depth_for(depth),
            traffic_class: tc as u8,
            backend_version,
            rank_stride,
        })
    }
}

pub struct GinContext {
    pub coll: Arc<CollComm>,
    pub settings: Settings,
    qps: Vec<Box<dyn QueuePair>>,
    /// The connected ranks (all, or createContext's v15 peer array).
    peers: PeerSet,
    _regions: Vec<Box<dyn MemoryRegion>>,
    handle: GpuBuf,
    _contexts: GpuBuf,
    _peers: GpuBuf,
    /// DC: the contexts' DCI descriptors (rust_gin_mlx5_sq[n_contexts * n_dci]).
    _dcis: Option<GpuBuf>,
    /// DC: this rank's DC target per rail.
    _dcts: Vec<Box<dyn DcTarget>>,
    /// DC: initiators per context (0 on RC); `qps` holds them context by context.
    n_dci: u32,
    error: GpuBuf,
    signals: GpuBuf,
    _offsets: GpuBuf,
    counters: GpuBuf,
    _sink: GpuBuf,
    _counter_log: GpuBuf,
    _counted_peers: GpuBuf,
    /// Write mode only: the slot table and the running totals.
    _slots: Option<(GpuBuf, GpuBuf)>,
    pub signal_mode: SignalMode,
    /// The NIC family of every queue of the set.
    pub family: NicFamily,
    /// What RCCL gets from createContext; it reads it, so it is real memory.
    pub dev_handle: Box<NcclNetDeviceHandle>,
    /// Errors already reported through queryLastError.
    reported: AtomicU64,
    /// Serializes progress calls (RCCL may run several proxy threads).
    progress_lock: Mutex<()>,
}

// SAFETY: the raw pointer in dev_handle points into `handle`, owned by self;
// every other field is Send + Sync.
unsafe impl Send for GinContext {}
// SAFETY: as above; dev_handle is never written after construction.
unsafe impl Sync for GinContext {}

fn u64s(n: u32) -> usize {
    (n.max(1) as usize) * 8
}

impl GinContext {
    /// A context set connected to every rank (GIN v14).
    pub fn create(coll: Arc<CollComm>, settings: Settings) -> Result<GinContext> {
        let all = PeerSet::all(coll.nranks);
        Self::create_for(coll, settings, all)
    }

    /// A context set whose queue pairs go to the ranks of `peers` only (GIN
    /// v15's peer array); the others get a descriptor without queue state, which the device treats as not connected.
    pub fn create_for(coll: Arc<CollComm>, settings: Settings, peers: PeerSet) -> Result<GinContext> {
        coll.instance.check_alive()?;
        let _one_at_a_time = coll.collective.lock().unwrap_or_else(|e| e.into_inner());
        let cfg = &coll.instance.config;
        let nic = &coll.nic;
        let alloc = nic.allocator();
        let (nranks, rank) = (coll.nranks, coll.rank);
        let nctx = settings.n_contexts;

        let family = context_family(&coll)?;
        let error = alloc.alloc(std::mem::size_of::<rust_gin_error>(), 64, Object::ErrorRecord)?;
        error.write_pod(0, &rust_gin_error::default());
        let per = |n: u32| u64s(n) * nctx as usize;
        // bnxt_re and ionic: the registration peers' signals land in ends
        // with FLUSH_PAD bytes where their flush WRITEs land (no DUMP in
        // these families; abi/nic_queue.h).
        let pad = if family == NicFamily::Mlx5 { 0 } else { FLUSH_PAD };
        let signals_len = per(settings.n_signals);
        let signals = alloc.alloc(signals_len + pad, 64, Object::Signals)?;
        let offsets = alloc.alloc(per(settings.n_signals), 64, Object::SignalOffsets)?;
        let counters = alloc.alloc(per(settings.n_counters), 64, Object::Counters)?;
        let sink = alloc.alloc(64, 64, Object::Sink)?;
        let mode = signal_mode(cfg.signal_mode, &coll)?;
        // Write mode: per context, [nranks][nSignals] slots (row s: rank s's
        // totals, written by its NIC) and as many running totals of our own.
        let slots = match mode {
            SignalMode::RemoteAtomic => None,
            SignalMode::SlotWrite => {
                let len = per(settings.n_signals) * nranks as usize;
                let table = alloc.alloc(len + pad, 64, Object::SignalSlots)?;
                let totals = alloc.alloc(len, 64, Object::SignalTotals)?;
                table.zero();
                totals.zero();
                Some((table, totals))
            }
        };
        // What the peers' signals land in: the signal table, or the slots.
        let (target, target_access, target_name) = match &slots {
            None => (
                &signals,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
                "signal table",
            ),
            Some((table, _)) => (table, Access::LOCAL_WRITE | Access::REMOTE_WRITE, "signal slot table"),
        };
        // Per rail: the signal target (peers' signals arrive on every rail)
        // and the sink (atomic results, the flush byte), in the same order
        // on every rail.
        let nrails = coll.rails.len();
        let mut signals_mrs = Vec::with_capacity(nrails);
        let mut sink_mrs = Vec::with_capacity(nrails);
        for (k, rail_nic) in coll.rails.iter().enumerate() {
            let at = |what: &str| format!("registering the {what} on {}", RailSet::label(k, &**rail_nic));
            // SAFETY: the buffers live in the context, which drops the regions first.
            let mr = unsafe { rail_nic.reg_mr(target.dev_addr(), target.len() as u64, target_access) };
            signals_mrs.push(mr.map_err(|e| on_rail(e, &at(target_name)))?);
            // SAFETY: as above.
            let mr = unsafe { rail_nic.reg_mr(sink.dev_addr(), sink.len() as u64, Access::LOCAL_WRITE) };
            sink_mrs.push(mr.map_err(|e| on_rail(e, &at("sink")))?);
        }

        // Tell every peer the QPs meant for it (RC) or our DC target (DC),
        // where our signals land (address and rkey per rail) and our signal
        // mode.
        let tables: Vec<(u64, u32)> = signals_mrs.iter().map(|mr| (mr.addr(), mr.rkey())).collect();
        let sig = signal_record(&tables, mode);
        let dc = cfg.transport == Transport::Dc;
        let (qps, extras, dcts, dc_mesh, connected) = if dc {
            let m = DcMesh::build(
                &coll,
                nctx,
                cfg.dcis,
                settings.log_depth,
                settings.traffic_class,
                cfg.rings_in_device_memory,
                &sig,
            )?;
            let DcMesh { dcis, dcts, extras, targets, n_dci } = m;
            (dcis, extras, dcts, Some((targets, n_dci)), peers)
        } else {
            let mesh = QpMesh::build(
                &coll,
                nctx,
                settings.log_depth,
                settings.traffic_class,
                cfg.rings_in_device_memory,
                &sig,
                peers,
            )?;
            (mesh.qps, mesh.extras, Vec::new(), None, mesh.peers)
        };
        // remote_signals[rank][rail]
        let mut remote_signals = Vec::with_capacity(nranks as usize);
        for m in &extras {
            // Empty for a rank not connected: its signals are never addressed.
            let per_rail: Vec<(u64, u32)> = (0..nrails)
                .map(|k| {
                    let at = 12 * k;
                    let base = m.get(at..at + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8")));
                    let rkey = m.get(at + 8..at + 12).map_or(0, |b| u32::from_le_bytes(b.try_into().expect("4")));
                    (base, rkey)
                })
                .collect();
            remote_signals.push(per_rail);
        }
        // Both ends must agree: a slot write into a peer's signal table, or
        // an atomic into its slots, would corrupt its signals.
        for (p, m) in extras.iter().enumerate() {
            let Some(&theirs) = m.get(12 * nrails) else { continue };
            if u32::from(theirs) != mode.abi() {
                let named = SignalMode::from_abi(theirs.into()).map_or("unknown", |m| m.name());
                return Err(Error::InvalidUsage(format!(
                    "signal mode differs between ranks: rank {rank} uses {}, rank {p} uses {named}; set \
                     RCCL_RUST_GIN_SIGNAL_MODE to the same value on every rank",
                    mode.name()
                )));
            }
        }
        let npeers = connected.len() as u32;
        // Per queue, one u32 per WQEBB naming the counter of the put whose
        // last WQE sits there; per context, a bit per peer with counted puts
        // outstanding (abi/mlx5_queue.h, abi/gin.h).
        let log_bytes = |q: &dyn QueuePair| 4usize << q.log_slots();
        let counter_log =
            alloc.alloc(qps.iter().map(|q| log_bytes(q.as_ref())).sum::<usize>().max(64), 64, Object::CounterLog)?;
        let bitmap_words = (nranks as usize).div_ceil(64);
        let counted_peers = alloc.alloc(8 * bitmap_words * nctx as usize, 64, Object::CountedPeers)?;
        let mut log_at = Vec::with_capacity(qps.len());
        let mut next = counter_log.dev_addr();
        for q in &qps {
            log_at.push(next);
            next += log_bytes(q.as_ref()) as u64;
        }

        let timeout_ns = cfg.timeout_ns();
        let counters_of = |c: u32| counters.dev_addr() + (c as usize * u64s(settings.n_counters)) as u64;
        let nsig = settings.n_signals.max(1) as u64;
        let signal_raddr = |p: u32, c: u32, rail: usize| {
            let base = remote_signals[p as usize][rail].0;
            match mode {
                // The peer's signal table for context c.
                SignalMode::RemoteAtomic => base + 8 * (c as u64) * nsig,
                // Our row of the peer's slot table for context c.
                SignalMode::SlotWrite => base + 8 * nsig * ((c as u64) * nranks as u64 + rank as u64),
            }
        };
        // Where a peer's flush WRITEs land: the pad after its signal target.
        let target_len = match mode {
            SignalMode::RemoteAtomic => signals_len,
            SignalMode::SlotWrite => signals_len * nranks as usize,
        } as u64;
        let peer_bytes = match (dc, family) {
            (true, _) => std::mem::size_of::<rust_gin_dc_peer>(),
            (false, NicFamily::Mlx5) => std::mem::size_of::<rust_gin_peer>(),
            (false, _) => std::mem::size_of::<rust_gin_nic_peer>(),
        };
        let peers_buf = alloc.alloc(peer_bytes * (nctx * nranks) as usize, 64, Object::Peers)?;
        let n_dci = dc_mesh.as_ref().map_or(0, |m| m.1);
        // DC only: the contexts' DCI descriptors (RC's queues live in the peers).
        let dcis_buf = match dc {
            true => Some(alloc.alloc(std::mem::size_of::<rust_gin_mlx5_sq>() * (nctx * n_dci) as usize, 64, Object::Peers)?),
            false => None,
        };
        let contexts = alloc.alloc(std::mem::size_of::<rust_gin_context>() * nctx as usize, 64, Object::Contexts)?;
        let per_ctx_slots = u64s(settings.n_signals) * nranks as usize;
        for c in 0..nctx {
            let rail = rail_of(c, nrails);
            let sink_lkey = sink_mrs[rail].lkey();
            let peers_at = peers_buf.dev_addr() + (peer_bytes * (c * nranks) as usize) as u64;
            let dcis_at = dcis_buf
                .as_ref()
                .map_or(0, |b| b.dev_addr() + (std::mem::size_of::<rust_gin_mlx5_sq>() * (c * n_dci) as usize) as u64);
            if let Some((targets, _)) = &dc_mesh {
                // DC: 64 bytes per peer (its DCT's datagram segment, its
                // signal table), the context's DCIs pointing at them.
                for p in 0..nranks {
                    let reach = connected.slot(p).is_some();
                    let av = if reach {
                        DcMesh::datagram_of(&coll, targets, rail, p).map_err(|e| {
                            on_rail(e, &format!("context {c}: the DC address of rank {p}"))
                        })?
                    } else {
                        [0u8; 48]
                    };
                    let d = rust_gin_dc_peer {
                        av,
                        signal_raddr: if reach { signal_raddr(p, c, rail) } else { 0 },
                        signal_rkey: if reach { remote_signals[p as usize][rail].1 } else { 0 },
                        connected: reach as u32,
                    };
                    peers_buf.write_pod(peer_bytes * (c * nranks + p) as usize, &d);
                }
                for i in 0..n_dci {
                    let k = (c * n_dci + i) as usize;
                    let QueueDescriptor::Mlx5(d) = qps[k].descriptor(rank, error.dev_addr(), timeout_ns) else {
                        return Err(Error::Internal("a DC initiator without an mlx5 descriptor".into()));
                    };
                    let mut d = d
                        .with_read_flush(sink.dev_addr() + crate::mlx5::queue::SINK_FLUSH_BYTE, sink_lkey)
                        .with_counters(log_at[k], counters_of(c));
                    d.dc_targets = peers_at;
                    dcis_buf.as_ref().expect("DC").write_pod(std::mem::size_of::<rust_gin_mlx5_sq>() * k, &d);
                }
            } else {
                let qp = |c: u32, s: u32| &qps[(c * npeers + s) as usize];
                let flush_byte = sink.dev_addr() + crate::mlx5::queue::SINK_FLUSH_BYTE;
                for p in 0..nranks {
                    let (base, rkey) = remote_signals[p as usize][rail];
                    let (raddr, at) = (signal_raddr(p, c, rail), peer_bytes * (c * nranks + p) as usize);
                    // A rank outside a v15 peer array gets a descriptor without
                    // queue state: the device refuses operations to it
                    // (RUST_GIN_ARG_PEER_NOT_CONNECTED) and flushes skip it.
                    let desc = connected.slot(p).map(|s| {
                        (qp(c, s).descriptor(p, error.dev_addr(), timeout_ns), log_at[(c * npeers + s) as usize])
                    });
                    match (family, desc) {
                        (NicFamily::Mlx5, None) => {
                            let sq = rust_gin_mlx5_sq { peer: p, error: error.dev_addr(), ..Default::default() };
                            peers_buf.write_pod(at, &rust_gin_peer { sq, signal_raddr: raddr, signal_rkey: rkey, reserved: 0 });
                        }
                        (NicFamily::Mlx5, Some((QueueDescriptor::Mlx5(d), log))) => {
                            let sq = d.with_read_flush(flush_byte, sink_lkey).with_counters(log, counters_of(c));
                            peers_buf.write_pod(at, &rust_gin_peer { sq, signal_raddr: raddr, signal_rkey: rkey, reserved: 0 });
                        }
                        (_, None) => {
                            let sq = rust_gin_nic_sq { peer: p, error: error.dev_addr(), ..Default::default() };
                            peers_buf.write_pod(at, &rust_gin_nic_peer { sq, signal_raddr: raddr, signal_rkey: rkey, reserved: 0 });
                        }
                        // The peer's flush WRITEs land in the pad after its signal target.
                        (f, Some((QueueDescriptor::Nic(g, d), log))) if g == f => {
                            let sq = d
                                .with_read_flush(flush_byte, sink_lkey, base + target_len, rkey)
                                .with_counters(log, counters_of(c));
                            peers_buf.write_pod(at, &rust_gin_nic_peer { sq, signal_raddr: raddr, signal_rkey: rkey, reserved: 0 });
                        }
                        (_, Some((d, _))) => return Err(mixed(d.family())),
                    }
                }
            }
            let ctx = rust_gin_context {
                peers: peers_at,
                signals: signals.dev_addr() + (c as usize * u64s(settings.n_signals)) as u64,
                signal_offsets: offsets.dev_addr() + (c as usize * u64s(settings.n_signals)) as u64,
                counters: counters_of(c),
                sink: sink.dev_addr(),
                sink_lkey,
                n_signals: settings.n_signals,
                n_counters: settings.n_counters,
                // Picks the window keys of this context's NIC (device ABI 2).
                rail: rail as u32,
                counted_peers: counted_peers.dev_addr() + (8 * bitmap_words * c as usize) as u64,
                signal_slots: slots.as_ref().map_or(0, |(t, _)| t.dev_addr() + (c as usize * per_ctx_slots) as u64),
                signal_totals: slots.as_ref().map_or(0, |(_, t)| t.dev_addr() + (c as usize * per_ctx_slots) as u64),
                signal_mode: mode.abi(),
                dcis: dcis_at,
                n_dci,
                family: family.abi(),
                reserved: 0,
            };
            contexts.write_pod(std::mem::size_of::<rust_gin_context>() * c as usize, &ctx);
        }
        let handle = alloc.alloc(std::mem::size_of::<rust_gin_handle>(), 64, Object::Handle)?;
        handle.write_pod(
            0,
            &rust_gin_handle {
                magic: RUST_GIN_HANDLE_MAGIC,
                abi_version: RUST_GIN_DEVICE_ABI_VERSION,
                rank,
                nranks,
                n_contexts: nctx,
                reserved: 0,
                contexts: contexts.dev_addr(),
                error: error.dev_addr(),
                timeout_ns,
            },
        );
        let dev_handle = Box::new(NcclNetDeviceHandle {
            net_device_type: NCCL_NET_DEVICE_GIN_RUST,
            net_device_version: RUST_GIN_DEVICE_ABI_VERSION as i32,
            handle: handle.dev_addr() as *mut std::ffi::c_void,
            size: std::mem::size_of::<rust_gin_handle>(),
            needs_proxy_progress: nic.needs_progress() as i32,
        });
        Ok(GinContext {
            coll: coll.clone(),
            settings,
            qps,
            peers: connected,
            _regions: signals_mrs.into_iter().chain(sink_mrs).collect(),
            handle,
            _contexts: contexts,
            _peers: peers_buf,
            _dcis: dcis_buf,
            _dcts: dcts,
            n_dci,
            error,
            signals,
            _offsets: offsets,
            counters,
            _sink: sink,
            _counter_log: counter_log,
            _counted_peers: counted_peers,
            _slots: slots,
            signal_mode: mode,
            family,
            dev_handle,
            reported: AtomicU64::new(0),
            progress_lock: Mutex::new(()),
        })
    }

    pub fn queue_pairs(&self) -> usize {
        self.qps.len()
    }

    /// The ranks this context set connects to.
    pub fn peers(&self) -> &PeerSet {
        &self.peers
    }

    /// The device handle's address (what kernels get).
    pub fn device_handle(&self) -> u64 {
        self.handle.dev_addr()
    }

    /// Drives the NIC when it needs it (the emulated NIC in proxy mode).
    pub fn progress(&self) {
        if self.coll.nic.needs_progress() {
            let _g = self.progress_lock.lock().unwrap_or_else(|e| e.into_inner());
            self.coll.nic.progress();
        }
    }

    /// The sticky device-side error, if any; `newly` tells whether it has not
    /// been reported before.
    pub fn last_error(&self) -> Option<(DeviceError, bool)> {
        let rec: rust_gin_error = self.error.read_pod(0);
        let mut e = DeviceError::from_record(&rec)?.on_family(self.family);
        if self.n_dci > 0 {
            e.peer = self.dc_peer_of(&e);
        }
        let newly = self.reported.swap(e.count, Ordering::AcqRel) != e.count;
        Some((e, newly))
    }

    /// The rank an error on a DC initiator concerns: the rank whose WQE
    /// failed, read back from the DCI's ring (session::dc::peer_of_failed_wqe),
    /// or crate::device::PEER_UNKNOWN when the record cannot say (a timeout
    /// on a DCI, which waits for a ticket, not for a peer). Records of other
    /// queues keep their peer.
    fn dc_peer_of(&self, e: &DeviceError) -> u32 {
        use crate::abi::{RUST_GIN_ERR_CQE, RUST_GIN_ERR_TIMEOUT};
        if e.code != RUST_GIN_ERR_CQE && e.code != RUST_GIN_ERR_TIMEOUT {
            return e.peer;
        }
        let Some(k) = self.qps.iter().position(|q| q.qpn() == e.qpn) else { return e.peer };
        if e.code != RUST_GIN_ERR_CQE {
            return crate::device::PEER_UNKNOWN;
        }
        let nranks = self.coll.nranks as usize;
        let c = k / self.n_dci as usize;
        let size = std::mem::size_of::<rust_gin_dc_peer>();
        let table: Vec<[u8; 48]> =
            (0..nranks).map(|p| self._peers.read_pod::<rust_gin_dc_peer>(size * (c * nranks + p)).av).collect();
        crate::session::dc::peer_of_failed_wqe(self.qps[k].as_ref(), e.wqe_index, &table)
            .unwrap_or(crate::device::PEER_UNKNOWN)
    }

    /// Local signal and counter values (host view; tests and diagnostics).
    pub fn signal_word(&self, context: u32, id: u32) -> u64 {
        let off = (context as usize * u64s(self.settings.n_signals)) + 8 * id as usize;
        let mut b = [0u8; 8];
        self.signals.read(off, &mut b);
        u64::from_ne_bytes(b)
    }

    /// Write mode: the slot rank `sender` wrote for signal `id` of
    /// `context` (host view; tests and diagnostics).
    pub fn signal_slot(&self, context: u32, id: u32, sender: u32) -> Option<u64> {
        let (table, _) = self._slots.as_ref()?;
        let nranks = self.coll.nranks as usize;
        let row = u64s(self.settings.n_signals);
        let off = context as usize * row * nranks + sender as usize * row + 8 * id as usize;
        let mut b = [0u8; 8];
        table.read(off, &mut b);
        Some(u64::from_ne_bytes(b))
    }

    pub fn counter_word(&self, context: u32, id: u32) -> u64 {
        let off = (context as usize * u64s(self.settings.n_counters)) + 8 * id as usize;
        let mut b = [0u8; 8];
        self.counters.read(off, &mut b);
        u64::from_ne_bytes(b)
    }
}

/// Bytes after a bnxt_re or ionic rank's signal target where its peers'
/// flush WRITEs land (one byte is written; a cache line keeps them apart
/// from the signals).
const FLUSH_PAD: usize = 64;

/// The NIC family of the context set: every rail's NIC must be of one (the
/// device code serves one family per handle), and a GPU build must serve it.
fn context_family(coll: &CollComm) -> Result<NicFamily> {
    let family = coll.rails.first().map_or_else(|| coll.nic.family(), |n| n.family());
    for (k, nic) in coll.rails.iter().enumerate() {
        if nic.family() != family {
            return Err(Error::InvalidUsage(format!(
                "{} is a {} NIC but rail 0's is {}: a context set's rails must be of one NIC family \
                 (RCCL_RUST_GIN_RAILS)",
                RailSet::label(k, &**nic),
                nic.family().name(),
                family.name()
            )));
        }
    }
    // Kernels run the GPU build of the device library unless the NIC is the
    // emulated one (whose host build serves every family).
    if coll.nic.kind() != ProviderKind::Emu && !family.in_gpu_build() {
        return Err(Error::InvalidUsage(format!(
            "the NIC is {}, but the GPU device library was built without that family: rebuild with \
             RUST_GIN_NIC_FAMILIES naming it (docs/nic-families.md, \"Choosing the families at build time\")",
            family.name()
        )));
    }
    Ok(family)
}

/// A queue whose family is not the context set's (a provider bug).
fn mixed(f: NicFamily) -> Error {
    Error::Internal(format!("a {} queue in a context set of another NIC family", f.name()))
}

/// The context set's signal mode: the knob, or with `auto` remote atomics
/// unless the probe says some rail's NIC cannot deliver them into GPU memory.
/// What createContext tells each peer before the QP numbers (host/session/
/// mesh.rs appends those): where its signals land, address and rkey per rail,
/// then its signal mode. Public for gin-scale's stand-in ranks.
pub fn signal_record(tables: &[(u64, u32)], mode: SignalMode) -> Vec<u8> {
    let mut sig = Vec::with_capacity(12 * tables.len() + 1);
    for &(addr, rkey) in tables {
        sig.extend_from_slice(&addr.to_le_bytes());
        sig.extend_from_slice(&rkey.to_le_bytes());
    }
    sig.push(mode.abi() as u8);
    sig
}

fn signal_mode(knob: SignalModeKnob, coll: &CollComm) -> Result<SignalMode> {
    Ok(match knob {
        SignalModeKnob::Atomic => SignalMode::RemoteAtomic,
        SignalModeKnob::Write => SignalMode::SlotWrite,
        SignalModeKnob::Auto => {
            let why: Vec<String> = coll.rails.iter().filter_map(|nic| nic.capabilities().atomics_unusable()).collect();
            if why.is_empty() {
                SignalMode::RemoteAtomic
            } else {
                crate::info_line!(INIT, "signals travel as slot writes: {}", why.join("; "));
                SignalMode::SlotWrite
            }
        }
    })
}
