//! What the GIN backend ([`crate::gin`]) and the RMA plugin ([`crate::rma`])
//! share below their C vtables: a plugin instance per init(), the provider
//! behind devices() and getProperties(), listen and connect (the comms, the
//! listen handle, the out-of-band mesh), the queue-pair mesh of
//! createContext, and the opaque tokens RCCL holds.
//!
//! A "session" is one job's connection to its peers through one NIC per
//! rail (rails.rs; one unless RCCL_RUST_GIN_RAILS asks for more), from
//! init() to finalize(). It lives in a folder of its own, named for neither
//! plugin, so that neither vtable's C-boundary file owns logic the other
//! calls: each plugin keeps one [`Sessions`] (its own tokens, so a GIN token
//! handed to the RMA plugin is refused) and adds only what differs (how init
//! picks the provider, what getProperties announces, its contexts and
//! registrations).

pub mod comm;
pub mod dc;
pub mod handle;
pub mod mesh;
pub mod properties;
pub mod rails;
pub mod registry;
pub mod thunks;

pub use comm::{CollComm, Instance, ListenComm, MAX_NRANKS};
pub use properties::Offload;
pub use thunks::Plugin;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::provider::Provider;
use registry::{Kind, Registry};
use std::ffi::c_void;
use std::sync::{Arc, RwLock};

/// One plugin's instances, listen comms and collective comms (each a
/// registry of tokens), and the provider of its latest init().
pub struct Sessions {
    pub instances: Registry<Instance>,
    pub listens: Registry<ListenComm>,
    pub colls: Registry<CollComm>,
    /// devices() and getProperties() take no plugin context: they answer for
    /// the provider the latest init() opened.
    provider: RwLock<Option<Arc<dyn Provider>>>,
}

impl Default for Sessions {
    fn default() -> Sessions {
        Sessions::new()
    }
}

impl Sessions {
    pub const fn new() -> Sessions {
        Sessions {
            instances: Registry::new(Kind::Instance),
            listens: Registry::new(Kind::Listen),
            colls: Registry::new(Kind::Coll),
            provider: RwLock::new(None),
        }
    }

    /// init(): registers an instance and remembers its provider for
    /// devices() and getProperties(); the token is what RCCL gets.
    pub fn init(&self, config: Config, provider: Arc<dyn Provider>, comm_id: u64) -> *mut c_void {
        *self.provider.write().unwrap_or_else(|e| e.into_inner()) = Some(provider.clone());
        self.instances.insert(Arc::new(Instance::new(config, provider, comm_id)))
    }

    pub fn provider(&self) -> Result<Arc<dyn Provider>> {
        self.provider
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| Error::InvalidUsage("called before init()".into()))
    }

    /// The collective comm behind a collComm token.
    pub fn coll(&self, coll_comm: *mut c_void) -> Result<Arc<CollComm>> {
        self.colls.get(coll_comm, "collComm")
    }
}
