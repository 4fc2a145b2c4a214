//! A model of RCCL's proxy GIN path (src/gin/gin_host_proxy.cc at the pinned
//! revision), used only to measure both paths on the same emulated NIC.
//! (The RMA-plugin adapter lands with the RMA plugin.)

use crate::config::Config;
use crate::error::{Error, Result};

pub fn build(_config: &Config, _nranks: usize, _window: usize) -> Result<Box<dyn super::Path>> {
    Err(Error::InvalidUsage("the proxy path needs the RMA plugin (in progress)".into()))
}
