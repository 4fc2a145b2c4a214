//! The DC transport on ConnectX (docs/architecture.md, "DC transport";
//! docs/mlx5-provider.md, section 2): the DC target (DCT) with the CQ and
//! the minimal SRQ (an RMP) it needs, the capability check, and the address
//! vector by which this NIC's DC initiators reach a peer. DCIs are
//! [`super::qp::Mlx5Qp::create_dci`].

use super::addr::{self, GidType, LinkLayer, Mlx5Address};
use super::device::Context;
use super::devx::{Obj, Uar, Umem};
use super::prm;
use super::qp::{resolve_rmac, Memory, HOP_LIMIT, MIN_RNR_NAK};
use crate::error::{Error, Result};
use crate::gpu::RingHome;
use crate::mlx5::queue::{QueueMem, CQ_DBREC_OFF, MIN_LOG_DEPTH, QP_DBREC_OFF};
use crate::mlx5::wire::{DatagramSeg, CQE_SIZE};
use crate::provider::DcTarget;
use std::sync::Arc;

/// Whether the device does DC: QUERY_HCA_CAP's general `dct` bit (mlx5_ib
/// refuses a DC QP when it is clear: qp.c check_qp_type). Err names the NIC
/// and what to do.
pub(crate) fn check_dc_capable(ctx: &Context) -> Result<()> {
    let mut out = [0u8; prm::query_hca_cap::OUT_BYTES];
    ctx.platform.devx_general_cmd(ctx.ctx, &prm::query_hca_cap_general(), &mut out).map_err(|e| {
        let (status, syndrome) = prm::status(&out);
        Error::System(format!(
            "{}: DevX QUERY_HCA_CAP (general, current) for the DC capability failed: {e} (firmware status \
             {status:#x}, syndrome {syndrome:#010x})",
            ctx.name
        ))
    })?;
    if !prm::hca_cap_dct(&out) {
        return Err(Error::InvalidUsage(format!(
            "{}: the device does not offer the DC transport (HCA capability `dct` is 0); use \
             RCCL_RUST_GIN_TRANSPORT=rc",
            ctx.name
        )));
    }
    Ok(())
}

/// A DC target with its CQ and RMP; destroyed in reverse on drop (DevX's
/// destroy of the DCT drains it first: mlx5_ib devx.c devx_obj_cleanup ->
/// mlx5_core_destroy_dct sends DRAIN_DCT, waits for the drained event, then
/// DESTROY_DCT).
pub(crate) struct Mlx5Dct {
    // Drop order is declaration order: the DCT, the RMP and the CQ it names,
    // the umems under them, the UAR, the memory, the device context.
    _dct: Obj,
    _rmp: Obj,
    _cq: Obj,
    _umem_dbr: Umem,
    _umem_cq: Umem,
    _umem_rq: Umem,
    _uar: Arc<Uar>,
    _mem: QueueMem,
    ctx: Arc<Context>,
    dctn: u32,
    key: u64,
}

impl Mlx5Dct {
    /// CQ and RMP over one small QueueMem (its send ring is the RMP's
    /// receive ring, its records block holds both records), then CREATE_DCT.
    pub fn create(ctx: &Arc<Context>, memory: &Memory, eqn: u32, key: u64) -> Result<Mlx5Dct> {
        let name = &ctx.name;
        let alloc = memory.allocator();
        // The smallest queue: nothing is ever posted to the RMP, and RDMA
        // WRITE, READ and atomics make no responder CQE.
        let mem = QueueMem::new(alloc.as_ref(), MIN_LOG_DEPTH, RingHome::Host)
            .map_err(|e| Error::System(format!("{name}: DC target memory ({}): {e}", alloc.describe())))?;
        mem.cq
            .try_write(0, &vec![0xF1u8; CQE_SIZE << mem.log_cq_cnt])
            .map_err(|e| Error::System(format!("{name}: initialising the DC target's CQ ring: {e}")))?;
        let nic_addr = |b: &crate::gpu::GpuBuf| b.host_addr().map(|a| a as u64).unwrap_or(b.dev_addr());
        let uar = ctx.uars.get(ctx)?;
        // SAFETY: `mem` outlives the umems (declared after them in Mlx5Dct;
        // on the error paths the locals drop in reverse order).
        let umem_rq = unsafe { Umem::register(ctx, nic_addr(&mem.sq), mem.sq.len(), "DC target's receive ring")? };
        // SAFETY: as above.
        let umem_cq = unsafe { Umem::register(ctx, nic_addr(&mem.cq), mem.cq.len(), "DC target's CQ ring")? };
        // SAFETY: as above.
        let umem_dbr = unsafe { Umem::register(ctx, nic_addr(&mem.dbr), mem.dbr.len(), "DC target's records")? };
        let (cq, out) = Obj::create(
            ctx,
            "CREATE_CQ (DC target)",
            &prm::create_cq(&prm::CqArgs {
                log_cq_size: mem.log_cq_cnt,
                uar_page: uar.page_id,
                eqn,
                cq_umem_id: umem_cq.id,
                cq_umem_offset: 0,
                dbr_umem_id: umem_dbr.id,
                dbr_offset: CQ_DBREC_OFF as u64,
            }),
        )?;
        let cqn = prm::get(&out, prm::create_cq_out::CQN) as u32;
        let log_wq_sz = mem.log_wqe_cnt + crate::mlx5::wire::SEND_WQE_BB.trailing_zeros() - prm::RMP_LOG_WQ_STRIDE;
        let (rmp, out) = Obj::create(
            ctx,
            "CREATE_RMP (the DC target's SRQ)",
            &prm::create_rmp(&prm::RmpArgs {
                pdn: ctx.pdn,
                log_wq_sz,
                wq_umem_id: umem_rq.id,
                dbr_umem_id: umem_dbr.id,
                dbr_offset: QP_DBREC_OFF as u64,
            }),
        )?;
        let srqn = prm::get(&out, prm::create_rmp_out::RMPN) as u32;
        let roce = (ctx.link_layer == LinkLayer::Ethernet).then_some(prm::DctRoce {
            my_addr_index: ctx.gid_index,
            hop_limit: HOP_LIMIT,
            traffic_class: 0,
            v2: ctx.gid_type == GidType::RoceV2,
        });
        let (dct, out) = Obj::create(
            ctx,
            "CREATE_DCT",
            &prm::create_dct(&prm::DctArgs {
                pdn: ctx.pdn,
                cqn,
                srqn,
                key,
                port: ctx.port,
                mtu: ctx.active_mtu,
                min_rnr_nak: MIN_RNR_NAK,
                roce,
            }),
        )?;
        let dctn = prm::get(&out, prm::create_dct_out::DCTN) as u32;
        crate::info_line!(NET, "{name}: DevX DC target {dctn:#x} (CQ {cqn:#x}, SRQ (RMP) {srqn:#x})");
        Ok(Mlx5Dct {
            _dct: dct,
            _rmp: rmp,
            _cq: cq,
            _umem_dbr: umem_dbr,
            _umem_cq: umem_cq,
            _umem_rq: umem_rq,
            _uar: uar,
            _mem: mem,
            ctx: ctx.clone(),
            dctn,
            key,
        })
    }
}

impl DcTarget for Mlx5Dct {
    fn dctn(&self) -> u32 {
        self.dctn
    }
    fn key(&self) -> u64 {
        self.key
    }
}

impl Drop for Mlx5Dct {
    fn drop(&mut self) {
        tracing::debug!("{}: destroying DC target {:#x}", self.ctx.name, self.dctn);
    }
}

/// The address vector (datagram segment without DCT number and key) of the
/// port at `remote`, as rdma-core's mlx5_create_ah fills `ah->av`
/// (providers/mlx5/verbs.c, 691953d8d502):
/// - RoCE: `stat_rate_sl` = sl << 1 = 0, `grh_gid_fl` = (sgid index << 20)
///   | flow label with the GRH bit 30 clear (reserved on RoCE), `tclass`,
///   `hop_limit`, `rgid`, `rmac` (the kernel's answer for an address handle,
///   as RC's path has it); RoCE v2: `rlid` = the UDP source port
///   (mlx5_ah_set_udp_sport: the kernel's rdma_flow_label_to_udp_sport of the
///   flow label). The flow label is calc_flow_label of the two GIDs' low
///   words, so a pair of ports keeps one ECMP path, as RC's QPN pair does.
/// - InfiniBand (one subnet, no GRH): `rlid` = the peer's LID, sl 0.
pub(crate) fn dc_address(ctx: &Context, remote: &Mlx5Address) -> Result<DatagramSeg> {
    let local = ctx.address();
    addr::check_peer(&local, remote)?;
    Ok(match local.link_layer {
        LinkLayer::Infiniband => DatagramSeg { rlid: remote.lid, ..Default::default() },
        LinkLayer::Ethernet => {
            let low = |g: &[u8; 16]| u32::from_be_bytes(g[12..16].try_into().expect("4 bytes"));
            let fl = addr::calc_flow_label(low(&local.gid), low(&remote.gid));
            let rlid = if local.gid_type == GidType::RoceV2 { addr::flow_label_to_udp_sport(fl) } else { 0 };
            DatagramSeg {
                stat_rate_sl: 0,
                rlid,
                rmac: resolve_rmac(ctx, remote, 0)?,
                tclass: 0,
                hop_limit: HOP_LIMIT,
                grh_gid_fl: (u32::from(ctx.gid_index) << 20) | fl,
                rgid: remote.gid,
                ..Default::default()
            }
        }
    })
}
