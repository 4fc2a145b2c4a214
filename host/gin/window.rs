//! Symmetric windows (regMrSym): a local registration plus every peer's base
//! address and rkey, in a descriptor kernels read (abi::rust_gin_window).

use crate::abi::{rust_gin_window, rust_gin_window_peer, RUST_GIN_WINDOW_MAGIC};
use crate::error::{Error, Result};
use crate::ffi::nccl::{NCCL_PTR_CUDA, NCCL_PTR_DMABUF, NCCL_PTR_HOST};
use crate::gpu::{GpuBuf, Object};
use crate::provider::{Access, MemoryRegion};
use crate::session::comm::CollComm;
use std::sync::Arc;

pub struct Window {
    pub coll: Arc<CollComm>,
    region: Box<dyn MemoryRegion>,
    desc: GpuBuf,
    _peers: GpuBuf,
    pub size: u64,
    /// Every rank's registration, as the allgather delivered it (host copy of
    /// the descriptor's peer table, for host-side posting: the RMA plugin).
    remote: Vec<RemoteRegion>,
}

/// One rank's registration of a symmetric window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteRegion {
    pub base: u64,
    pub rkey: u32,
    /// What that rank registered (sizes may differ across ranks).
    pub size: u64,
}

/// Where the memory to register comes from.
pub enum Source {
    Pointer,
    DmaBuf { offset: u64, fd: i32 },
}

impl Window {
    /// Registers [data, data+size) of kind `ptr_type` and exchanges the
    /// registration with every rank (collective: all ranks call it in order).
    pub fn register(coll: Arc<CollComm>, data: u64, size: u64, ptr_type: i32, src: Source) -> Result<Window> {
        coll.instance.check_alive()?;
        if data == 0 {
            return Err(Error::InvalidArgument("data is NULL".into()));
        }
        if size == 0 {
            return Err(Error::InvalidArgument("size is 0".into()));
        }
        if data.checked_add(size).is_none() {
            return Err(Error::InvalidArgument(format!("data {data:#x} + size {size} wraps the address space")));
        }
        if ptr_type != NCCL_PTR_HOST && ptr_type != NCCL_PTR_CUDA {
            return Err(Error::InvalidArgument(format!(
                "type {ptr_type}: regMrSym takes NCCL_PTR_HOST ({NCCL_PTR_HOST}) or NCCL_PTR_CUDA ({NCCL_PTR_CUDA})"
            )));
        }
        let supported = coll.nic.info().ptr_support;
        if supported & ptr_type == 0 {
            return Err(Error::InvalidUsage(format!(
                "this NIC cannot register memory of type {ptr_type} (ptrSupport {supported:#x})"
            )));
        }
        // Host memory is checked here, for every provider, as ibv_reg_mr
        // would (mapped, read-write, the whole range). GPU memory is checked
        // by the provider: the emulated one (whose "GPU" memory is host
        // memory) the same way, mlx5 by the kernel's peer-memory or dma-buf
        // import, which refuses ranges outside a GPU allocation.
        if ptr_type == NCCL_PTR_HOST && matches!(src, Source::Pointer) {
            crate::mapping::check_range(data, size)?;
        }
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
        let _one_at_a_time = coll.collective.lock().unwrap_or_else(|e| e.into_inner());
        let region = match src {
            // SAFETY: RCCL keeps a registered buffer alive until deregMrSym,
            // which drops this region first.
            Source::Pointer => unsafe { coll.nic.reg_mr(data, size, access)? },
            Source::DmaBuf { offset, fd } => {
                if supported & NCCL_PTR_DMABUF == 0 {
                    return Err(Error::InvalidUsage("this NIC does not support dma-buf registration".into()));
                }
                // SAFETY: as above; RCCL passes a dma-buf fd covering the range.
                unsafe { coll.nic.reg_dmabuf_mr(data, size, offset, fd, access)? }
            }
        };
        // Every rank sends its base and size and its rkey on each rail (each
        // rail's NIC hands out its own keys); kernels pick the table of their
        // context's rail.
        let keys = region.rail_keys();
        let rails = keys.len();
        let mut mine = Vec::with_capacity(16 + 4 * rails);
        mine.extend_from_slice(&region.addr().to_le_bytes());
        mine.extend_from_slice(&size.to_le_bytes());
        for (_, rkey) in &keys {
            mine.extend_from_slice(&rkey.to_le_bytes());
        }
        let all = coll.mesh.allgather(&mine)?;
        let alloc = coll.nic.allocator();
        let n = coll.nranks as usize;
        let entry = std::mem::size_of::<rust_gin_window_peer>();
        // [rails][nranks] peer entries, then the local key of each rail.
        let peers = alloc.alloc(entry * n * rails + 4 * rails, 64, Object::WindowPeers)?;
        let lkeys_at = (entry * n * rails) as u64;
        for (k, (lkey, _)) in keys.iter().enumerate() {
            peers.write_pod(lkeys_at as usize + 4 * k, lkey);
        }
        let mut remote = Vec::with_capacity(n);
        for (p, m) in all.iter().enumerate() {
            if m.len() != 16 + 4 * rails {
                return Err(Error::Remote(format!(
                    "rank {p} sent a malformed window registration ({} bytes, {} expected for {rails} rail(s))",
                    m.len(),
                    16 + 4 * rails
                )));
            }
            let base = u64::from_le_bytes(m[0..8].try_into().expect("8"));
            let psize = u64::from_le_bytes(m[8..16].try_into().expect("8"));
            if psize != size {
                tracing::warn!(peer = p, size, peer_size = psize, "regMrSym: window sizes differ across ranks");
            }
            for k in 0..rails {
                let rkey = u32::from_le_bytes(m[16 + 4 * k..20 + 4 * k].try_into().expect("4"));
                peers.write_pod(entry * (k * n + p), &rust_gin_window_peer { base, rkey, reserved: 0 });
                if k == 0 {
                    remote.push(RemoteRegion { base, rkey, size: psize });
                }
            }
        }
        // Kernels bound-check against the smallest registration of any rank.
        let min_size = all.iter().map(|m| u64::from_le_bytes(m[8..16].try_into().expect("8"))).min().unwrap_or(size);
        let desc = alloc.alloc(std::mem::size_of::<rust_gin_window>(), 64, Object::WindowDescriptor)?;
        desc.write_pod(
            0,
            &rust_gin_window {
                magic: RUST_GIN_WINDOW_MAGIC,
                nranks: coll.nranks,
                local_base: region.addr(),
                size: min_size,
                lkey: region.lkey(),
                rails: rails as u32,
                peers: peers.dev_addr(),
                lkeys: peers.dev_addr() + lkeys_at,
            },
        );
        drop(_one_at_a_time);
        Ok(Window { coll, region, desc, _peers: peers, size, remote })
    }

    /// What regMrSym returns as ginHandle: the descriptor's device address.
    pub fn gin_handle(&self) -> u64 {
        self.desc.dev_addr()
    }

    pub fn lkey(&self) -> u32 {
        self.region.lkey()
    }

    /// The local registration's address as the NIC uses it.
    pub fn local_addr(&self) -> u64 {
        self.region.addr()
    }

    /// Rank `rank`'s registration (None when out of range).
    pub fn remote(&self, rank: u32) -> Option<RemoteRegion> {
        self.remote.get(rank as usize).copied()
    }

    /// Deregistration: the descriptor stops validating at once, so a kernel
    /// still holding the ginHandle gets a clean error, not freed memory. The
    /// descriptor's memory itself is kept until the comm closes.
    pub fn retire(self) -> GpuBuf {
        self.desc.write_pod(0, &0u32);
        self.desc
    }
}
