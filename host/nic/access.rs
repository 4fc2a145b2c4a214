//! Access rights of a registration, as every provider takes them.

use bitflags::bitflags;

bitflags! {
    /// Access rights of a memory region (the ibv_access_flags subset used).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Access: u32 {
        const LOCAL_WRITE = 1 << 0;
        const REMOTE_WRITE = 1 << 1;
        const REMOTE_READ = 1 << 2;
        const REMOTE_ATOMIC = 1 << 3;
    }
}
