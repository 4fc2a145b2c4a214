//! A queue-counter set per opened NIC (DevX ALLOC_Q_COUNTER): every queue
//! pair the NIC creates counts into it, so when a queue fails the WARN can
//! say what the NIC saw (local ACK timeouts, sequence errors, remote access
//! errors) next to the CQE's syndrome. Optional: a NIC whose firmware or
//! permissions refuse a set works without one.

use super::device::Context;
use super::devx::Obj;
use super::prm;
use crate::error::Result;
use std::sync::Arc;

pub(crate) struct QueueCounters {
    obj: Obj,
    pub id: u32,
    // The context outlives the set (DevX destroys the set first).
    ctx: Arc<Context>,
}

impl QueueCounters {
    pub fn alloc(ctx: &Arc<Context>) -> Result<QueueCounters> {
        let (obj, out) = Obj::create(ctx, "ALLOC_Q_COUNTER", &prm::alloc_q_counter())?;
        let id = prm::get(&out, prm::q_counter::ALLOC_OUT_COUNTER_SET_ID) as u32;
        Ok(QueueCounters { obj, id, ctx: ctx.clone() })
    }

    /// Every counter of the set, by name.
    pub fn query(&self) -> Result<Vec<(&'static str, u64)>> {
        let mut out = [0u8; prm::q_counter::QUERY_OUT_BYTES];
        self.obj.query(&self.ctx.name, "QUERY_Q_COUNTER", &prm::query_q_counter(self.id), &mut out)?;
        Ok(prm::q_counters(&out))
    }
}
