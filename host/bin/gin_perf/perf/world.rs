//! A GIN world for measurements: ranks as threads of this process, each with
//! its own NIC, connected through the real backend objects (listen handles,
//! connection setup, createContext, symmetric windows), as RCCL would build
//! them.

use rccl_rust_gin::config::Config;
use rccl_rust_gin::error::{Error, Result};
use rccl_rust_gin::gin::comm::{CollComm, Instance, ListenComm};
use rccl_rust_gin::gin::context::{GinContext, Settings};
use rccl_rust_gin::gin::window::{Source, Window};
use rccl_rust_gin::gpu::{Allocator, GpuBuf, HostMemory, Object};
use rccl_rust_gin::ffi::nccl::NCCL_PTR_CUDA;
use std::sync::{Arc, Barrier, Mutex};

/// One rank's objects.
pub struct Rank {
    pub coll: Arc<CollComm>,
    pub ctx: GinContext,
    /// Source and destination windows of `window_bytes` each.
    pub src: Window,
    pub dst: Window,
    _src_buf: GpuBuf,
    _dst_buf: GpuBuf,
}

impl Rank {
    /// The device handle kernels (and the host build of the device code) take.
    pub fn handle(&self) -> *const std::ffi::c_void {
        self.ctx.device_handle() as *const std::ffi::c_void
    }
    pub fn counters(&self) -> Option<rccl_rust_gin::nic::CounterSnapshot> {
        self.coll.nic.counters()
    }
    /// Host addresses of the source and destination windows' memory (the
    /// emulated NIC's memory is host memory).
    pub fn host_addrs(&self) -> (usize, usize) {
        (self._src_buf.host_addr().unwrap_or(0), self._dst_buf.host_addr().unwrap_or(0))
    }
}

// SAFETY: GinContext and windows are Send + Sync; the buffers are owned.
unsafe impl Send for Rank {}
// SAFETY: as above.
unsafe impl Sync for Rank {}

/// Builds `nranks` connected ranks with one context set per rank.
pub fn build(config: &Config, nranks: usize, settings: Settings, window_bytes: usize) -> Result<Vec<Rank>> {
    build_sized(config, nranks, settings, window_bytes, window_bytes)
}

/// As [`build`], with a source window of `src_bytes` and a destination
/// window of `dst_bytes` on every rank.
pub fn build_sized(config: &Config, nranks: usize, settings: Settings, src_bytes: usize, dst_bytes: usize) -> Result<Vec<Rank>> {
    let provider = rccl_rust_gin::provider::select(config)?;
    let barrier = Barrier::new(nranks);
    let handles = Mutex::new(vec![None; nranks]);
    let out: Vec<Result<Rank>> = std::thread::scope(|s| {
        let joins: Vec<_> = (0..nranks)
            .map(|r| {
                let (provider, barrier, handles) = (provider.clone(), &barrier, &handles);
                s.spawn(move || -> Result<Rank> {
                    let inst = Arc::new(Instance::new(config.clone(), provider, 0x9e37_79b9));
                    let listen = ListenComm::new(inst, 0, config.rails as usize);
                    let h = listen.as_ref().map(|l| l.handle.clone()).ok();
                    handles.lock().unwrap_or_else(|e| e.into_inner())[r] = h;
                    barrier.wait();
                    let all: Vec<_> = handles.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    let listen = listen?;
                    let all: Vec<_> = all
                        .into_iter()
                        .enumerate()
                        .map(|(p, h)| h.ok_or_else(|| Error::Internal(format!("rank {p} could not listen"))))
                        .collect::<Result<_>>()?;
                    let coll = Arc::new(CollComm::connect(&listen, all, r as u32)?);
                    let ctx = GinContext::create(coll.clone(), settings)?;
                    let alloc = HostMemory;
                    let src_buf = alloc.alloc(src_bytes, 4096, Object::WindowData)?;
                    let dst_buf = alloc.alloc(dst_bytes, 4096, Object::WindowData)?;
                    let src = Window::register(coll.clone(), src_buf.dev_addr(), src_bytes as u64, NCCL_PTR_CUDA, Source::Pointer)?;
                    let dst = Window::register(coll.clone(), dst_buf.dev_addr(), dst_bytes as u64, NCCL_PTR_CUDA, Source::Pointer)?;
                    Ok(Rank { coll, ctx, src, dst, _src_buf: src_buf, _dst_buf: dst_buf })
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap_or_else(|_| Err(Error::Internal("rank thread panicked".into())))).collect()
    });
    out.into_iter().collect()
}
