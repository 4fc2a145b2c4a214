//! The implementation behind every exported version: one Rust function per
//! callback, in the v16 shape (optFlags, isStrongSignal, getRmaProperties).
//! The version adapters in [`super::vtable`] fill in what older versions do
//! not pass. Every function runs inside the boundary guard there and works on
//! registry tokens, never on raw pointers RCCL hands back.

use super::context::{fetch_add, rdma, req_flags, Op, Request, RmaContext, RmaSettings, MAX_CHUNK};
use super::memory::RmaMem;
use crate::config::Config;
use crate::error::Result;
use crate::ffi::boundary::out;
use crate::ffi::nccl::*;
use crate::ffi::rma::*;
use crate::gin::window::{Source, Window};
use crate::mlx5::wire::opcode;
use crate::provider::{MemoryMode, Provider};
use crate::session::mesh::{built_line, PeerSet};
use crate::session::registry::{Kind, Registry};
use crate::session::{Offload, Plugin, Sessions};
use crate::{bad_arg, bad_usage, info_line};
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// Instances, listen and collective comms of the RMA plugin.
pub(crate) static SESSIONS: Sessions = Sessions::new();
pub(crate) static CONTEXTS: Registry<RmaContext> = Registry::new(Kind::RmaContext);
pub(crate) static MEMS: Registry<RmaMem> = Registry::new(Kind::Memory);
pub(crate) static REQUESTS: Registry<Request> = Registry::new(Kind::RmaRequest);

/// maxRecvs in getProperties: RCCL's proxy keeps NCCL_NET_MAX_REQUESTS (32)
/// times this many requests in flight per peer and context (its GFD queue
/// size). 8 is what RCCL's own IB backend reports, so both proxy backends get
/// the same queue.
pub const MAX_RECVS: c_int = 8;

// --- the provider -----------------------------------------------------------

/// The provider RCCL_RUST_GIN_PROVIDER selects, opened for host-side posting:
/// the RMA plugin posts from RCCL's proxy thread through the device library's
/// host build, so queue memory must be host memory and the doorbell the CPU's
/// mapping (the GIN backend opens them for the GPU, which the CPU cannot use).
pub fn select_provider(config: &Config) -> Result<Arc<dyn Provider>> {
    crate::provider::select_for(config, MemoryMode::Host)
}

/// What the NIC behind a collComm counted (doorbells, WQEBBs, CQEs, ...),
/// for diagnostics and benchmarks; None where the provider does not count
/// (hardware, for now).
pub fn nic_counters(coll_comm: *mut c_void) -> Result<Option<crate::nic::CounterSnapshot>> {
    Ok(SESSIONS.coll(coll_comm)?.nic.counters())
}

// --- init and properties -----------------------------------------------

/// The RMA plugin's side of the callbacks it shares with the GIN backend.
pub struct Rma;

impl Plugin for Rma {
    fn sessions() -> &'static Sessions {
        &SESSIONS
    }

    /// The RMA plugin is selected by NCCL_RMA_PLUGIN (RCCL loads it only
    /// when asked), so unlike the GIN backend it does not look at
    /// NCCL_GIN_TYPE. RCCL calls init twice per communicator (rma.cc, then
    /// the GIN proxy's init); each call makes its own plugin context.
    fn open() -> Result<(Config, Arc<dyn Provider>)> {
        let config = Config::from_env()?;
        let provider = select_provider(&config)?;
        info_line!(INIT, "RMA plugin: provider {:?}, {} device(s)", provider.kind(), provider.devices());
        // Its posts are the self-test's (host memory, the same builders).
        crate::selftest::check_at_init(&config)?;
        Ok((config, provider))
    }

    /// RCCL's own proxy offload (its device handle and queue sizing).
    const OFFLOAD: Offload =
        Offload { net_device_type: NCCL_NET_DEVICE_GIN_PROXY, net_device_version: NCCL_GIN_PROXY_VERSION, max_recvs: MAX_RECVS };
}

pub(crate) fn get_rma_properties(coll_comm: *mut c_void, props: *mut NcclRmaProperties) -> Result<()> {
    let props = out(props, "rmaProps")?;
    let coll = SESSIONS.coll(coll_comm)?;
    *props = NcclRmaProperties { flushes_all_puts_on_any_signal: coll.nic.info().flushes_all_puts_on_any_signal };
    Ok(())
}

// --- contexts and registrations ----------------------------------------------

/// createContext (v14 and later; v13 passes queueDepth too).
pub(crate) fn create_context(coll_comm: *mut c_void, cfg: RawConfig, rma_ctx: *mut *mut c_void) -> Result<Arc<RmaContext>> {
    let rc = out(rma_ctx, "rmaCtx")?;
    *rc = std::ptr::null_mut();
    let coll = SESSIONS.coll(coll_comm)?;
    let ic = &coll.instance.config;
    let s = RmaSettings::new(
        cfg.n_contexts,
        cfg.traffic_class,
        cfg.rank_stride,
        cfg.queue_depth,
        ic.queue_depth,
        ic.traffic_class,
    )?;
    let (peers, scope) = match cfg.peer_array {
        None => (PeerSet::all(coll.nranks), format!("rank stride {}", s.rank_stride)),
        Some((array, count)) => {
            // SAFETY: RCCL's peer array of `count` ints (checked against NULL
            // and the comm's size first), alive for the call.
            let p = unsafe { PeerSet::from_raw(coll.nranks, array, count, "config")? };
            let n = p.len();
            (p, format!("peer array of {n}"))
        }
    };
    let ctx = Arc::new(RmaContext::create(coll.clone(), s, peers)?);
    let built = built_line(&coll, ctx.queue_pairs(), ctx.peers(), s.n_contexts, s.log_depth, s.traffic_class);
    info_line!(INIT, "RMA plugin: {built}, {scope}), {} queues", ctx.family().name());
    *rc = CONTEXTS.insert(ctx.clone());
    Ok(ctx)
}

/// RCCL's config, whichever version it came in.
#[derive(Clone, Copy, Debug)]
pub struct RawConfig {
    pub n_contexts: c_int,
    pub traffic_class: c_int,
    pub rank_stride: c_int,
    pub queue_depth: c_int,
    /// v17: the peer array and its count (rank_stride is then 1, unused).
    pub peer_array: Option<(*const c_int, c_int)>,
}

impl RawConfig {
    pub(crate) fn from_v14(c: *mut NcclRmaConfig) -> Result<RawConfig> {
        // SAFETY: RCCL passes a valid config or NULL.
        let c = unsafe { c.as_ref() }.ok_or_else(|| bad_arg!("config is NULL"))?;
        Ok(RawConfig {
            n_contexts: c.n_contexts,
            traffic_class: c.traffic_class,
            rank_stride: c.rank_stride,
            queue_depth: 0,
            peer_array: None,
        })
    }

    /// v17: nContexts, trafficClass and the peer array.
    pub(crate) fn from_v17(c: *mut NcclRmaConfigV17) -> Result<RawConfig> {
        // SAFETY: RCCL passes a valid config or NULL.
        let c = unsafe { c.as_ref() }.ok_or_else(|| bad_arg!("config is NULL"))?;
        Ok(RawConfig {
            n_contexts: c.n_contexts,
            traffic_class: c.traffic_class,
            rank_stride: 1,
            queue_depth: 0,
            peer_array: Some((c.peer_array as *const c_int, c.peer_array_count)),
        })
    }

    /// v13: RCCL's wrapper fills only nContexts and trafficClass; the rest is
    /// zero. nSignals and nCounters mean nothing to an RMA plugin (RCCL's
    /// proxy keeps signals and counters itself) but must not be negative.
    pub(crate) fn from_v13(c: *mut NcclGinConfigV13) -> Result<RawConfig> {
        // SAFETY: as above.
        let c = unsafe { c.as_ref() }.ok_or_else(|| bad_arg!("config is NULL"))?;
        if c.n_signals < 0 || c.n_counters < 0 {
            return Err(bad_arg!(
                "config.nSignals = {}, nCounters = {}: must not be negative",
                c.n_signals,
                c.n_counters
            ));
        }
        Ok(RawConfig {
            n_contexts: c.n_contexts,
            traffic_class: c.traffic_class,
            rank_stride: 1,
            queue_depth: c.queue_depth,
            peer_array: None,
        })
    }
}

pub(crate) fn reg_mr_sym(
    coll_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    type_: c_int,
    _mr_flags: u64,
    mhandle: *mut *mut c_void,
) -> Result<()> {
    let mh = out(mhandle, "mhandle")?;
    *mh = std::ptr::null_mut();
    let coll = SESSIONS.coll(coll_comm)?;
    // mrFlags are hints (NCCL_NET_MR_FLAG_FORCE_SO, SIGNAL_NEVER_RESET):
    // every registration here is already strongly ordered for signals on the
    // same queue pair; nothing depends on a signal never being reset.
    let w = Window::register(coll, data as u64, size as u64, type_, Source::Pointer)?;
    *mh = MEMS.insert(Arc::new(RmaMem::new(w)));
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn reg_mr_sym_dma_buf(
    coll_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    type_: c_int,
    offset: u64,
    fd: c_int,
    _mr_flags: u64,
    mhandle: *mut *mut c_void,
) -> Result<()> {
    let mh = out(mhandle, "mhandle")?;
    *mh = std::ptr::null_mut();
    let coll = SESSIONS.coll(coll_comm)?;
    let ptr_support = coll.nic.info().ptr_support;
    if ptr_support & NCCL_PTR_DMABUF == 0 {
        return Err(bad_usage!(
            "getProperties does not advertise NCCL_PTR_DMABUF for this NIC (ptrSupport {ptr_support:#x}); use regMrSym"
        ));
    }
    if fd < 0 {
        return Err(bad_arg!("fd {fd} is not a file descriptor"));
    }
    let w = Window::register(coll, data as u64, size as u64, type_, Source::DmaBuf { offset, fd })?;
    *mh = MEMS.insert(Arc::new(RmaMem::new(w)));
    Ok(())
}

pub(crate) fn dereg_mr_sym(coll_comm: *mut c_void, mhandle: *mut c_void) -> Result<()> {
    let coll = SESSIONS.coll(coll_comm)?;
    let m = MEMS.get(mhandle, "mhandle")?;
    if !Arc::ptr_eq(&m.window.coll, &coll) {
        return Err(bad_arg!("mhandle {mhandle:?} was registered on another collComm"));
    }
    drop(m);
    MEMS.remove(mhandle, "mhandle").map(drop)
}

pub(crate) fn destroy_context(rma_ctx: *mut c_void) -> Result<()> {
    let ctx = CONTEXTS.remove(rma_ctx, "rmaCtx")?;
    // Requests still outstanding die with their context.
    drop(REQUESTS.take_where(|r| Arc::ptr_eq(&r.ctx, &ctx)));
    Ok(())
}

pub(crate) fn close_coll(coll_comm: *mut c_void) -> Result<()> {
    let coll = SESSIONS.colls.remove(coll_comm, "collComm")?;
    // RCCL destroys contexts and deregisters first; if it did not, do it now
    // rather than leak them.
    let contexts = CONTEXTS.take_where(|c| Arc::ptr_eq(&c.coll, &coll));
    let requests = REQUESTS.take_where(|r| Arc::ptr_eq(&r.ctx.coll, &coll));
    let mems = MEMS.take_where(|m| Arc::ptr_eq(&m.window.coll, &coll));
    if !contexts.is_empty() || !mems.is_empty() {
        crate::warn_line!(
            "closeColl: {} RMA context(s), {} registration(s) and {} request(s) were still open; released them",
            contexts.len(),
            mems.len(),
            requests.len()
        );
    }
    Ok(())
}

// --- data path ---------------------------------------------------------------

fn live_context(rma_ctx: *mut c_void) -> Result<Arc<RmaContext>> {
    let ctx = CONTEXTS.get(rma_ctx, "rmaCtx")?;
    ctx.coll.instance.check_alive()?;
    Ok(ctx)
}

fn check_opt_flags(opt_flags: u32) -> Result<bool> {
    let unknown = opt_flags & !NCCL_RMA_OPT_FLAGS_KNOWN;
    if unknown != 0 {
        return Err(bad_arg!(
            "optFlags {opt_flags:#x} has bits this plugin does not know ({unknown:#x}); known: \
             ncclRmaOptFlagsAggregateRequests ({NCCL_RMA_OPT_FLAGS_AGGREGATE_REQUESTS:#x})"
        ));
    }
    Ok(opt_flags & NCCL_RMA_OPT_FLAGS_AGGREGATE_REQUESTS != 0)
}

fn mem(ctx: &RmaContext, mhandle: *mut c_void, what: &str) -> Result<Arc<RmaMem>> {
    let m = MEMS.get(mhandle, what)?;
    ctx.check_mem(&m, what)?;
    Ok(m)
}

/// RDMA WRITEs or READs of `size` bytes, split at MAX_CHUNK; the last asks
/// for a CQE.
fn transfers(
    op: u8,
    local: (u64, u32),
    remote: (u64, u32),
    size: u64,
    last_flags: u8,
    out: &mut Vec<crate::abi::rust_gin_mlx5_request>,
) {
    let mut off = 0;
    while off < size {
        let n = (size - off).min(MAX_CHUNK);
        let flags = if off + n == size { last_flags } else { 0 };
        out.push(rdma(op, local.0 + off, local.1, remote.0 + off, remote.1, n as u32, flags));
        off += n;
    }
}

fn publish(
    ctx: &Arc<RmaContext>,
    qi: usize,
    reqs: &[crate::abi::rust_gin_mlx5_request],
    op: Op,
    aggregate: bool,
    request: &mut *mut c_void,
) -> Result<()> {
    let r = ctx.post(qi, reqs, op, aggregate)?;
    *request = REQUESTS.insert(Arc::new(r));
    Ok(())
}

/// iput: an RDMA WRITE from this rank's registration to `rank`'s.
#[allow(clippy::too_many_arguments)]
pub(crate) fn iput(
    rma_ctx: *mut c_void,
    context: c_int,
    src_off: u64,
    src_mhandle: *mut c_void,
    size: usize,
    dst_off: u64,
    dst_mhandle: *mut c_void,
    rank: u32,
    opt_flags: u32,
    request: *mut *mut c_void,
) -> Result<()> {
    let request = out(request, "request")?;
    *request = std::ptr::null_mut();
    let ctx = live_context(rma_ctx)?;
    let aggregate = check_opt_flags(opt_flags)?;
    let qi = ctx.queue_index(context, rank)?;
    let src = mem(&ctx, src_mhandle, "srcMhandle")?;
    let dst = mem(&ctx, dst_mhandle, "dstMhandle")?;
    let size = size as u64;
    let local = src.local(src_off, size, "iput source", "srcOff")?;
    let remote = dst.remote(rank, dst_off, size, "iput destination", "dstOff")?;
    let mut reqs = Vec::with_capacity(1);
    if size == 0 {
        // Nothing to move (a WRITE of length 0 would mean 2 GiB to mlx5):
        // a request that moves nothing keeps its place and completion order.
        reqs.push(ctx.empty_request(qi));
        return publish(&ctx, qi, &reqs, Op::Nop, aggregate, request);
    }
    transfers(opcode::RDMA_WRITE, local, (remote.addr, remote.rkey), size, req_flags::SIGNALED, &mut reqs);
    publish(&ctx, qi, &reqs, Op::Put, aggregate, request)
}

/// iputSignal: the WRITE (when size > 0) and then an 8-byte fetch-and-add on
/// `rank`'s signal, on the same queue pair: the peer's NIC executes them in
/// order, so the signal lands after the data. Every signal is strong.
#[allow(clippy::too_many_arguments)]
pub(crate) fn iput_signal(
    rma_ctx: *mut c_void,
    context: c_int,
    src_off: u64,
    src_mhandle: *mut c_void,
    size: usize,
    dst_off: u64,
    dst_mhandle: *mut c_void,
    rank: u32,
    signal_off: u64,
    signal_mhandle: *mut c_void,
    signal_value: u64,
    signal_op: u32,
    _is_strong_signal: bool,
    opt_flags: u32,
    request: *mut *mut c_void,
) -> Result<()> {
    let request = out(request, "request")?;
    *request = std::ptr::null_mut();
    let ctx = live_context(rma_ctx)?;
    let aggregate = check_opt_flags(opt_flags)?;
    let qi = ctx.queue_index(context, rank)?;
    let add = match signal_op {
        NCCL_NET_SIGNAL_OP_INC => 1,
        NCCL_NET_SIGNAL_OP_ADD => signal_value,
        other => {
            return Err(bad_arg!(
                "signalOp {other}: use NCCL_NET_SIGNAL_OP_INC ({NCCL_NET_SIGNAL_OP_INC}) or NCCL_NET_SIGNAL_OP_ADD \
                 ({NCCL_NET_SIGNAL_OP_ADD})"
            ))
        }
    };
    if signal_mhandle.is_null() {
        return Err(bad_arg!("signalMhandle is NULL"));
    }
    let sig = mem(&ctx, signal_mhandle, "signalMhandle")?;
    let signal = sig.remote(rank, signal_off, 8, "iputSignal signal", "signalOff")?;
    if signal.addr % 8 != 0 {
        return Err(bad_arg!("signal at offset {signal_off} of rank {rank}'s registration is not 8-byte aligned"));
    }
    let size = size as u64;
    let mut reqs = Vec::with_capacity(2);
    // A signal without data (RCCL's VA signal): size 0, data handles NULL.
    let op = if size == 0 { Op::Signal } else { Op::PutSignal };
    if size > 0 || !src_mhandle.is_null() || !dst_mhandle.is_null() {
        let src = mem(&ctx, src_mhandle, "srcMhandle")?;
        let dst = mem(&ctx, dst_mhandle, "dstMhandle")?;
        let local = src.local(src_off, size, "iputSignal source", "srcOff")?;
        let remote = dst.remote(rank, dst_off, size, "iputSignal destination", "dstOff")?;
        transfers(opcode::RDMA_WRITE, local, (remote.addr, remote.rkey), size, 0, &mut reqs);
    }
    reqs.push(fetch_add(ctx.sink(), signal.addr, signal.rkey, add, req_flags::SIGNALED));
    publish(&ctx, qi, &reqs, op, aggregate, request)
}

/// iget: an RDMA READ from `rank`'s registration into this rank's.
#[allow(clippy::too_many_arguments)]
pub(crate) fn iget(
    rma_ctx: *mut c_void,
    context: c_int,
    remote_off: u64,
    remote_mhandle: *mut c_void,
    size: usize,
    local_off: u64,
    local_mhandle: *mut c_void,
    rank: u32,
    opt_flags: u32,
    request: *mut *mut c_void,
) -> Result<()> {
    let request = out(request, "request")?;
    *request = std::ptr::null_mut();
    let ctx = live_context(rma_ctx)?;
    let aggregate = check_opt_flags(opt_flags)?;
    let qi = ctx.queue_index(context, rank)?;
    let remote_m = mem(&ctx, remote_mhandle, "remoteMhandle")?;
    let local_m = mem(&ctx, local_mhandle, "localMhandle")?;
    let size = size as u64;
    let remote = remote_m.remote(rank, remote_off, size, "iget source", "remoteOff")?;
    let local = local_m.local(local_off, size, "iget destination", "localOff")?;
    let mut reqs = Vec::with_capacity(1);
    if size == 0 {
        reqs.push(ctx.empty_request(qi));
        return publish(&ctx, qi, &reqs, Op::Nop, aggregate, request);
    }
    transfers(opcode::RDMA_READ, local, (remote.addr, remote.rkey), size, req_flags::SIGNALED, &mut reqs);
    publish(&ctx, qi, &reqs, Op::Get, aggregate, request)
}

/// iflush: a signalled DUMP (bnxt_re, ionic: a 1-byte WRITE to the peer's
/// landing byte; [`RmaContext::flush_request`]) with the small fence behind
/// everything posted to `rank` in `context`: it starts after earlier READs
/// and atomics completed,
/// and its read of local memory cannot pass their data's writes, so once
/// test() reports it done every earlier get's data is in local memory (a
/// READ's own CQE does not prove that). `mhandle` (RCCL passes its signal
/// registration) is checked when given, not needed.
pub(crate) fn iflush(
    rma_ctx: *mut c_void,
    context: c_int,
    mhandle: *mut c_void,
    rank: u32,
    request: *mut *mut c_void,
) -> Result<()> {
    let request = out(request, "request")?;
    *request = std::ptr::null_mut();
    let ctx = live_context(rma_ctx)?;
    let qi = ctx.queue_index(context, rank)?;
    if !mhandle.is_null() {
        mem(&ctx, mhandle, "mhandle")?;
    }
    let reqs = [ctx.flush_request(qi)];
    publish(&ctx, qi, &reqs, Op::Flush, false, request)
}

/// test: polls the request's queue; done frees the request.
pub(crate) fn test(coll_comm: *mut c_void, request: *mut c_void, done: *mut c_int) -> Result<()> {
    let done = out(done, "done")?;
    *done = 0;
    let coll = SESSIONS.coll(coll_comm)?;
    let req = REQUESTS.get(request, "request")?;
    if !Arc::ptr_eq(&req.ctx.coll, &coll) {
        return Err(bad_arg!("request {request:?} belongs to another collComm"));
    }
    req.ctx.coll.instance.check_alive()?;
    match req.ctx.test(&req) {
        Ok(true) => {
            *done = 1;
            REQUESTS.remove(request, "request").map(drop)
        }
        Ok(false) => Ok(()),
        Err(e) => {
            // A failed request is finished too: it is released with its error.
            let _ = REQUESTS.remove(request, "request");
            Err(e)
        }
    }
}

pub(crate) fn rma_progress(rma_ctx: *mut c_void) -> Result<()> {
    live_context(rma_ctx)?.progress();
    Ok(())
}

pub(crate) fn query_last_error(rma_ctx: *mut c_void, has_error: *mut bool) -> Result<()> {
    let he = out(has_error, "hasError")?;
    *he = false;
    let ctx = live_context(rma_ctx)?;
    let (errors, newly) = ctx.errors();
    if !errors.is_empty() {
        *he = true;
        if newly {
            crate::warn_line!("rank {}: RMA error: {}", ctx.coll.rank, errors.join("; "));
        }
    }
    Ok(())
}
