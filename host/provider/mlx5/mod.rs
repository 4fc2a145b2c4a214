//! ConnectX through verbs (rdma-sys) and mlx5 DevX (bindgen of mlx5dv.h).
//! Probing is here; queue creation follows rocSHMEM's GDA design.

use super::{Nic, NicInfo, Provider};
use crate::config::{Config, ProviderKind};
use crate::error::{Error, Result};
use std::sync::Arc;

pub struct Mlx5Provider {
    names: Vec<String>,
}

impl Mlx5Provider {
    /// Lists the mlx5 RDMA devices; fails, saying what to do, when none is usable.
    pub fn probe(config: &Config) -> Result<Mlx5Provider> {
        let mut n: i32 = 0;
        // SAFETY: ibv_get_device_list returns a NULL-terminated array we free below.
        let list = unsafe { rdma_sys::ibv_get_device_list(&mut n) };
        if list.is_null() || n <= 0 {
            let errno = std::io::Error::last_os_error();
            if !list.is_null() {
                // SAFETY: freeing the list returned above.
                unsafe { rdma_sys::ibv_free_device_list(list) };
            }
            return Err(Error::System(format!(
                "no RDMA device found (ibv_get_device_list: {errno}). Check that the ConnectX driver (mlx5_ib) is \
                 loaded and /dev/infiniband is accessible; to run without hardware set RCCL_RUST_GIN_PROVIDER=emu"
            )));
        }
        let mut names = Vec::new();
        for i in 0..n as usize {
            // SAFETY: i < n entries of the list; ibv_get_device_name returns a C string.
            let name = unsafe {
                let d = *list.add(i);
                std::ffi::CStr::from_ptr(rdma_sys::ibv_get_device_name(d)).to_string_lossy().into_owned()
            };
            let wanted = config.nic_filter.as_ref().is_none_or(|f| f.split(',').any(|w| w.trim() == name));
            if name.starts_with("mlx5") && wanted {
                names.push(name);
            }
        }
        // SAFETY: freeing the list returned above.
        unsafe { rdma_sys::ibv_free_device_list(list) };
        if names.is_empty() {
            return Err(Error::System(format!(
                "no usable mlx5 device among {n} RDMA device(s){}; set RCCL_RUST_GIN_NIC to an mlx5 device name, or \
                 RCCL_RUST_GIN_PROVIDER=emu to run without hardware",
                config.nic_filter.as_ref().map(|f| format!(" matching RCCL_RUST_GIN_NIC={f}")).unwrap_or_default()
            )));
        }
        Ok(Mlx5Provider { names })
    }
}

impl Provider for Mlx5Provider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Mlx5
    }
    fn devices(&self) -> usize {
        self.names.len()
    }
    fn info(&self, dev: usize) -> Result<NicInfo> {
        super::check_dev(dev, self.names.len())?;
        Err(Error::InvalidUsage(format!("{}: the mlx5 provider's device queries are not built yet", self.names[dev])))
    }
    fn open(&self, dev: usize) -> Result<Arc<dyn Nic>> {
        super::check_dev(dev, self.names.len())?;
        Err(Error::InvalidUsage(format!("{}: the mlx5 provider's queue creation is not built yet", self.names[dev])))
    }
}
