//! The mlx5 provider's control path over the recording stand-in
//! (tests/support/mlx5_standin.rs) instead of rdma-core and HIP: open, query,
//! UAR/umem/CQ/QP through DevX with the commands checked field by field, QPs
//! through INIT -> RTR -> RTS, registration (dma-buf first, then
//! peer-memory), the GPU mapping of the UAR, teardown in reverse order, and a
//! failure injected at every step. Last, the RMA plugin over the mlx5
//! provider, whose host doorbell stores into the stand-in's UAR page.
//!
//! Expected command fields are literal bit offsets from rdma-core's
//! `providers/mlx5/mlx5_ifc.h` (qpc, ads, create_qp_in, modify QP commands)
//! and NCCL's doca-gpunetio `mlx5_prm.h` (cqc, create_cq_in), as cited in
//! host/provider/mlx5/prm.rs; values are what the stand-in handed out.

#[path = "support/mlx5_standin.rs"]
mod mlx5_standin;

use mlx5_standin::{bits, Setup, StandIn, EQN, GPU_IO_OFFSET, PDN};
use rccl_rust_gin::mlx5::wire::DatagramSeg;
use rccl_rust_gin::provider::mlx5::addr::{GidType, LinkLayer, Mlx5Address};
use rccl_rust_gin::abi::rust_gin_mlx5_sq;
use rccl_rust_gin::config::Config;
use rccl_rust_gin::error::{Error, Result};
use rccl_rust_gin::ffi::nccl::{NCCL_PTR_DMABUF, NCCL_SYSTEM_ERROR};
use rccl_rust_gin::gpu::{Allocator, HostMemory, Object};
use rccl_rust_gin::provider::mlx5::{MemoryMode, Mlx5Provider};
use rccl_rust_gin::provider::{Access, Nic, Provider};

/// What a successful run leaves to check.
struct Run {
    qpns: [u32; 2],
    descriptors: [rust_gin_mlx5_sq; 2],
    dmabuf_supported: bool,
    keys: (u32, u32),
}

/// probe, open, two QPs connected to each other, one registration, then
/// everything dropped (in reverse order, as a user's scope drops them).
fn run(s: &StandIn, mode: MemoryMode) -> Result<Run> {
    let p = Mlx5Provider::probe_on(s.platform(), &Config::default())?;
    let nic = p.open_mode(0, mode)?;
    let a = nic.create_qp(6, 3, false)?;
    let b = nic.create_qp(6, 3, false)?;
    let me = nic.address();
    a.connect(&me, b.qpn())?;
    b.connect(&me, a.qpn())?;
    let data = HostMemory.alloc(3 * 4096, 4096, Object::WindowData).expect("host memory");
    // SAFETY: `data` outlives the region (declared before it).
    let mr = unsafe { nic.reg_mr(data.dev_addr() + 0x100, 2 * 4096, Access::all())? };
    Ok(Run {
        qpns: [a.qpn(), b.qpn()],
        descriptors: [a.descriptor(1, 0, 0).mlx5().expect("mlx5"), b.descriptor(1, 0, 0).mlx5().expect("mlx5")],
        dmabuf_supported: nic.info().ptr_support & NCCL_PTR_DMABUF != 0,
        keys: (mr.lkey(), mr.rkey()),
    })
}

/// The DevX commands of one kind, in order.
fn commands(s: &StandIn, name: &str) -> Vec<Vec<u8>> {
    s.calls(name).into_iter().map(|c| c.input).collect()
}

/// Asserts that nothing is left and nothing was destroyed out of order.
fn assert_clean(s: &StandIn, what: &str) {
    assert!(s.live().is_empty(), "{what}: leaked {:?}", s.live());
    assert!(s.faults().is_empty(), "{what}: teardown faults {:?}", s.faults());
}

#[test]
fn roce_in_gpu_mode_sends_the_right_commands_and_tears_down_in_order() {
    let s = StandIn::new(Setup::roce());
    let r = run(&s, MemoryMode::Gpu).expect("the control path over the stand-in");
    assert_clean(&s, "after the run");
    assert!(r.dmabuf_supported, "the probe's EBADF means dma-bufs work");

    // Umems by what they hold: three per QP (send ring, CQ ring, doorbell
    // records), each QP with a dedicated NC UAR.
    let umems = s.umems();
    assert_eq!(umems.len(), 6, "{umems:?}");
    for c in s.calls("mlx5dv_devx_alloc_uar") {
        assert_eq!(c.detail, "flags 0x80000000", "MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED (1 << 31)");
    }

    let cqs = commands(&s, "mlx5dv_devx_obj_create(CREATE_CQ)");
    let qps = commands(&s, "mlx5dv_devx_obj_create(CREATE_QP)");
    assert_eq!((cqs.len(), qps.len()), (2, 2));
    for (k, (cq, qp)) in cqs.iter().zip(&qps).enumerate() {
        let (sq_id, _, sq_len) = umems[3 * k];
        let (cq_id, _, cq_len) = umems[3 * k + 1];
        let (dbr_id, _, dbr_len) = umems[3 * k + 2];
        assert_eq!((sq_len, dbr_len), (64 << 6, 64), "a 64-WQEBB send ring, one 64-byte record block");
        let d = &r.descriptors[k];
        // create_cq_in: opcode, then cq_context (cqc) at bit 0x80.
        assert_eq!(cq.len(), 0x880 / 8);
        let c = 0x80;
        assert_eq!(bits(cq, 0, 16), 0x400, "CREATE_CQ");
        assert_eq!(bits(cq, c + 0x06, 1), 1, "cqc.dbr_umem_valid");
        assert_eq!(bits(cq, c + 0x08, 3), 0, "cqc.cqe_sz = 64 bytes");
        assert_eq!(bits(cq, c + 0x0b, 1), 0, "cqc.cc: not collapsed");
        assert_eq!(bits(cq, c + 0x0e, 1), 0, "cqc.oi: overruns not ignored");
        assert_eq!(bits(cq, c + 0x20, 32), u64::from(dbr_id), "cqc.dbr_umem_id");
        assert_eq!(64usize << bits(cq, c + 0x63, 5), cq_len, "cqc.log_cq_size matches the CQ umem");
        assert_eq!(bits(cq, c + 0x68, 24), u64::from(d.uar_db_page(&s)), "cqc.uar_page");
        assert_eq!(bits(cq, c + 0xa0, 32), u64::from(EQN), "cqc.c_eqn_or_ext_element");
        assert_eq!(bits(cq, c + 0x1c0, 64), 32, "cqc.dbr_addr: the CQ record at byte 32");
        assert_eq!(bits(cq, 0x280, 64), 0, "cq_umem_offset");
        assert_eq!(bits(cq, 0x2c0, 32), u64::from(cq_id), "cq_umem_id");
        assert_eq!(bits(cq, 0x2e0, 1), 1, "cq_umem_valid");
        assert_eq!(d.log_cq_cnt, bits(cq, c + 0x63, 5) as u32, "the descriptor's CQ size");
        assert_eq!(d.cq_dbrec, d.dbrec + 32, "the CQ doorbell record is where the command says");

        // create_qp_in: qpc at bit 0xc0.
        let q = 0xc0;
        assert_eq!(bits(qp, 0, 16), 0x500, "CREATE_QP");
        assert_eq!(bits(qp, q + 0x08, 8), 0, "qpc.st = RC");
        assert_eq!(bits(qp, q + 0x13, 2), 3, "qpc.pm_state = migrated");
        assert_eq!(bits(qp, q + 0x28, 24), u64::from(PDN), "qpc.pd");
        assert_eq!(64usize << bits(qp, q + 0x51, 4), sq_len, "qpc.log_sq_size matches the send-ring umem");
        assert_eq!(bits(qp, q + 0x68, 24), bits(cq, c + 0x68, 24), "qpc.uar_page: the CQ's UAR");
        assert_eq!(bits(qp, q + 0x3e8, 24), u64::from(d.cqn), "qpc.cqn_snd: the CQ just made");
        assert_eq!(bits(qp, q + 0x500, 64), 0, "qpc.dbr_addr: the QP record at byte 0");
        assert_eq!(bits(qp, q + 0x565, 3), 3, "qpc.rq_type: no receive queue");
        assert_eq!(bits(qp, q + 0x630, 16), 0, "qpc.cs_req, cs_res: no scatter to CQE");
        assert_eq!(bits(qp, q + 0x683, 1), 1, "qpc.dbr_umem_valid");
        assert_eq!(bits(qp, q + 0x720, 32), u64::from(dbr_id), "qpc.dbr_umem_id");
        assert_eq!(bits(qp, 0x840, 32), u64::from(sq_id), "wq_umem_id");
        assert_eq!(bits(qp, 0x860, 1), 1, "wq_umem_valid");
        assert_eq!(d.qpn, r.qpns[k]);
        // The GPU's mapping of the dedicated UAR's register.
        let cpu = s.doorbell_addr(bits(cq, c + 0x68, 24) as u32).expect("a UAR the stand-in made") as u64;
        assert_eq!(d.uar_db, cpu + GPU_IO_OFFSET, "kernels ring the GPU mapping of the register");
        assert_eq!(d.host_doorbell, 0, "a GPU queue has no host doorbell");
    }

    // Transitions, by QP: each named by its QPN, in order, towards the other.
    let rst = commands(&s, "mlx5dv_devx_obj_modify(RST2INIT)");
    let rtr = commands(&s, "mlx5dv_devx_obj_modify(INIT2RTR)");
    let rts = commands(&s, "mlx5dv_devx_obj_modify(RTR2RTS)");
    assert_eq!((rst.len(), rtr.len(), rts.len()), (2, 2, 2));
    let (q, p) = (0xc0, 0xc0 + 0xc0); // qpc, qpc.primary_address_path
    for k in 0..2 {
        let (me, peer) = (r.qpns[k], r.qpns[1 - k]);
        for cmd in [&rst[k], &rtr[k], &rts[k]] {
            assert_eq!(bits(cmd, 0x48, 24), u64::from(me), "the command names its QP");
            assert_eq!(bits(cmd, 0x80, 32), 0, "opt_param_mask");
        }
        let i = &rst[k];
        assert_eq!(bits(i, 0, 16), 0x502);
        assert_eq!(bits(i, q + 0x490, 3), 0b111, "rre, rwe, rae");
        assert_eq!(bits(i, q + 0x48c, 4), 1, "atomic_mode = IB spec");
        assert_eq!(bits(i, p + 0x128, 8), 1, "vhca_port_num");
        assert_eq!(bits(i, p + 0x10, 16), 0, "pkey_index");
        let t = &rtr[k];
        assert_eq!(bits(t, 0, 16), 0x503);
        assert_eq!(bits(t, q + 0xa8, 24), u64::from(peer), "remote_qpn");
        assert_eq!(bits(t, q + 0x40, 3), 5, "mtu 4096 (both ports report 5)");
        assert_eq!(bits(t, q + 0x43, 5), 30, "log_msg_max capped at 1 GiB");
        assert_eq!(bits(t, q + 0x488, 3), 4, "log_rra_max = log2(16)");
        assert_eq!(bits(t, q + 0x4a3, 5), 12, "min_rnr_nak");
        assert_eq!(bits(t, p + 0x48, 8), 1, "src_addr_index: the IPv4-mapped RoCE v2 GID");
        assert_eq!(bits(t, p + 0x58, 8), 255, "hop_limit");
        assert_eq!(bits(t, p + 0x64, 8), 3, "tclass (the traffic class asked for)");
        assert_eq!(bits(t, p + 0x10a, 6), 0, "dscp = tclass >> 2");
        assert_eq!(&t[(p + 0x80) / 8..(p + 0x100) / 8], &Setup::roce().gids[1].0, "rgid_rip");
        assert_eq!(bits(t, p + 0x130, 48), 0x02_1122_3344_55, "rmac: what the AH resolved");
        // rdma_calc_flow_label / rdma_flow_label_to_udp_sport of the QPN pair.
        let fl = {
            let v = u64::from(me) * u64::from(peer);
            let v = v ^ (v >> 20);
            let v = v ^ (v >> 40);
            (v & 0xfffff) as u32
        };
        assert_eq!(bits(t, p + 0x6c, 20), u64::from(fl), "flow_label");
        let sport = (((fl & 0x3fff) ^ ((fl & 0xfc000) >> 14)) | 0xc000) as u64;
        assert_eq!(bits(t, p + 0x110, 16), sport, "udp_sport (RoCE v2)");
        let t = &rts[k];
        assert_eq!(bits(t, 0, 16), 0x504);
        assert_eq!(bits(t, q + 0x388, 3), 4, "log_sra_max");
        assert_eq!(bits(t, q + 0x38d, 3), 7, "retry_count");
        assert_eq!(bits(t, q + 0x390, 3), 7, "rnr_retry");
        assert_eq!(bits(t, q + 0x3c8, 24), 0, "next_send_psn");
        assert_eq!(bits(t, p + 0x40, 5), 20, "ack_timeout");
    }
    // Every QP reached RTS before teardown destroyed it: the model refused
    // nothing (faults are empty) and saw six transitions.

    // One AH per connect, destroyed at once.
    assert_eq!(s.calls("ibv_create_ah").len(), 2);
    assert_eq!(s.calls("ibv_destroy_ah").len(), 2);

    // GPU memory: dma-buf first, and it worked: no ibv_reg_mr.
    let reg = s.calls("ibv_reg_dmabuf_mr");
    assert_eq!(reg.len(), 1);
    let export = &s.calls("hipMemGetHandleForAddressRange")[0];
    let addr =
        u64::from_str_radix(export.detail.split_whitespace().nth(1).unwrap().trim_start_matches("0x"), 16).unwrap();
    assert_eq!(addr % 4096, 0x100);
    assert!(
        reg[0].detail.starts_with(&format!("offset 0x100 len 8192 iova {addr:#x} fd ")),
        "offset inside the dma-buf, iova = the address: {}",
        reg[0].detail
    );
    assert!(reg[0].detail.ends_with("access 0xf"), "LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC");
    assert!(s.calls("ibv_reg_mr").is_empty(), "no peer-memory fallback when dma-buf works");
    assert_ne!(r.keys.0, r.keys.1);

    // Teardown: in exact reverse of creation (the stand-in checked each
    // destroy against the newest live object), ending with the device.
    let destroys: Vec<String> =
        s.log().iter().filter(|c| c.step.is_none() && c.handle.is_some()).map(|c| c.name.clone()).collect();
    let tail: Vec<&str> = destroys.iter().rev().take(2).map(|s| s.as_str()).collect();
    assert_eq!(tail, ["ibv_close_device", "ibv_dealloc_pd"], "{destroys:?}");
}

/// Reads the UAR page id back from a descriptor: the page whose register the
/// GPU address maps (tests only).
trait UarPage {
    fn uar_db_page(&self, s: &StandIn) -> u32;
}

impl UarPage for rust_gin_mlx5_sq {
    fn uar_db_page(&self, s: &StandIn) -> u32 {
        (0..200)
            .find(|id| s.doorbell_addr(*id).is_some_and(|a| a as u64 + GPU_IO_OFFSET == self.uar_db))
            .expect("the descriptor's doorbell is a stand-in UAR")
    }
}

#[test]
fn infiniband_in_host_mode_uses_lids_and_the_cpu_doorbell() {
    let s = StandIn::new(Setup::infiniband());
    let r = run(&s, MemoryMode::Host).expect("the control path over the stand-in");
    assert_clean(&s, "after the run");
    for (k, rtr) in commands(&s, "mlx5dv_devx_obj_modify(INIT2RTR)").iter().enumerate() {
        let p = 0xc0 + 0xc0;
        assert_eq!(bits(rtr, 0xc0 + 0xa8, 24), u64::from(r.qpns[1 - k]), "remote_qpn");
        assert_eq!(bits(rtr, p + 0x28, 1), 0, "no GRH within a subnet");
        assert_eq!(bits(rtr, p + 0x30, 16), 7, "rlid: the port's LID");
        assert_eq!(bits(rtr, p + 0x124, 4), 0, "sl");
        assert_eq!(bits(rtr, p + 0x110, 16), 0, "no UDP port on InfiniBand");
    }
    assert!(s.calls("ibv_create_ah").is_empty(), "no MAC to resolve on InfiniBand");
    assert!(s.calls("hipGetDeviceCount").is_empty() && s.calls("hipHostRegister(IoMemory)").is_empty(), "no GPU");
    for d in &r.descriptors {
        let page = (0..200).find(|id| s.doorbell_addr(*id).is_some_and(|a| a as u64 == d.uar_db));
        assert!(page.is_some(), "host posting rings the CPU mapping of the register");
        assert_ne!(d.host_doorbell, 0, "with the provider's MMIO doorbell");
    }
    // Host memory registers through ibv_reg_mr, no dma-buf.
    assert_eq!(s.calls("ibv_reg_mr").len(), 1);
    assert!(s.calls("ibv_reg_dmabuf_mr").is_empty());
}

/// What injecting a failure at a step of [`run`] must do: fail naming it, or
/// be recovered from (a fallback the provider has).
fn expected(name: &str, mode: MemoryMode, roce: bool) -> Option<&'static [&'static str]> {
    Some(match name {
        "ibv_query_gid" if !roce => &["mlx5_0 port 1: GID 0 is empty"],
        "ibv_get_device_list" => &["no RDMA device found", "Input/output error"],
        "mlx5dv_open_device" => &["mlx5dv_open_device with MLX5DV_CONTEXT_FLAGS_DEVX", "Input/output error"],
        "ibv_query_device" => &["mlx5_0: ibv_query_device", "Input/output error"],
        "ibv_query_port" => &["mlx5_0: ibv_query_port(1)", "Input/output error"],
        "ibv_alloc_pd" => &["mlx5_0: ibv_alloc_pd", "Input/output error"],
        "mlx5dv_init_obj(PD)" => &["mlx5_0: mlx5dv_init_obj(PD)", "Input/output error"],
        "hipGetDeviceCount" => &["queue memory and doorbells for the GPU", "hipGetDeviceCount"],
        "mlx5dv_devx_query_eqn" => &["mlx5dv_devx_query_eqn", "Input/output error"],
        "hipHostMalloc" => &["queue memory (stand-in GPU memory)", "Input/output error"],
        "mlx5dv_devx_umem_reg" => &["mlx5dv_devx_umem_reg of the", "Input/output error"],
        "mlx5dv_devx_obj_create(CREATE_CQ)" => &["DevX CREATE_CQ failed", "firmware status 0x5", "0x5eed0bad"],
        "mlx5dv_devx_obj_create(CREATE_QP)" => &["DevX CREATE_QP failed", "firmware status 0x5", "0x5eed0bad"],
        "hipHostRegister(IoMemory)" => &["doorbell", "Input/output error"],
        "ibv_create_ah" => &["ibv_create_ah", "Input/output error"],
        "mlx5dv_init_obj(AH)" => &["mlx5dv_init_obj(AH)", "Input/output error"],
        "mlx5dv_devx_obj_modify(RST2INIT)" => &["DevX RST2INIT of QP", "towards QP", "0x5eed0bad"],
        "mlx5dv_devx_obj_modify(INIT2RTR)" => &["DevX INIT2RTR of QP", "towards QP", "0x5eed0bad"],
        "mlx5dv_devx_obj_modify(RTR2RTS)" => &["DevX RTR2RTS of QP", "towards QP", "0x5eed0bad"],
        "ibv_reg_mr" if mode == MemoryMode::Host => &["ibv_reg_mr of 8192 bytes", "Input/output error"],
        // Recovered: another GID, the shared NC UAR, peer-memory registration.
        // Recovered: no queue-counter set (the NIC works, its WARNs say less).
        "ibv_query_gid"
        | "mlx5dv_devx_alloc_uar"
        | "hipMemGetHandleForAddressRange"
        | "ibv_reg_dmabuf_mr"
        | "mlx5dv_devx_obj_create(ALLOC_Q_COUNTER)" => return None,
        other => panic!("no expectation written for a failure of {other}"),
    })
}

fn inject_everywhere(setup: fn() -> Setup, mode: MemoryMode) {
    let clean = StandIn::new(setup());
    run(&clean, mode).expect("the run without failures");
    let steps = clean.steps();
    assert!(steps > 20, "a full run has {steps} steps");
    let mut fatal = 0;
    for n in 0..steps {
        let s = StandIn::new(setup()).fail_at(n);
        let out = run(&s, mode);
        let failed = s.log().into_iter().find(|c| c.failed).expect("the step was reached");
        let what = format!("step {n} ({} {})", failed.name, failed.detail);
        match (expected(&failed.name, mode, setup().link_layer == 2), out) {
            (Some(words), Err(e)) => {
                fatal += 1;
                assert!(matches!(e, Error::System(_)), "{what}: {e:?}");
                assert_eq!(e.code(), NCCL_SYSTEM_ERROR, "{what}");
                for w in words {
                    assert!(e.message().contains(w), "{what}: the error names {w:?}: {}", e.message());
                }
            }
            (Some(_), Ok(_)) => panic!("{what}: a failure went unreported"),
            (None, Err(e)) => panic!("{what}: should have been recovered from, got {e}"),
            (None, Ok(_)) => {}
        }
        assert_clean(&s, &what);
    }
    eprintln!("{mode:?}: {steps} steps, {fatal} fatal when failed, {} recovered", steps - fatal);
}

#[test]
fn a_failure_at_any_step_of_a_gpu_run_is_named_and_leaks_nothing() {
    inject_everywhere(Setup::roce, MemoryMode::Gpu);
}

#[test]
fn a_failure_at_any_step_of_a_host_run_is_named_and_leaks_nothing() {
    inject_everywhere(Setup::infiniband, MemoryMode::Host);
}

#[test]
fn gpu_memory_falls_back_to_peer_memory_and_names_both_when_both_fail() {
    // dma-buf export refused: peer-memory registration of the GPU address.
    let s = StandIn::new(Setup::roce());
    let p = Mlx5Provider::probe_on(s.platform(), &Config::default()).unwrap();
    let nic = p.open_mode(0, MemoryMode::Gpu).unwrap();
    let base = s.steps();
    drop(nic);
    let s = StandIn::new(Setup::roce()).fail_at(base);
    let p = Mlx5Provider::probe_on(s.platform(), &Config::default()).unwrap();
    let nic = p.open_mode(0, MemoryMode::Gpu).unwrap();
    // SAFETY: the stand-in maps nothing; the address is never touched.
    let mr = unsafe { nic.reg_mr(0x7000_0000_1000, 4096, Access::REMOTE_WRITE) }.expect("peer-memory");
    assert_eq!(s.calls("hipMemGetHandleForAddressRange").len(), 1);
    assert!(s.calls("ibv_reg_dmabuf_mr").is_empty());
    let reg = s.calls("ibv_reg_mr");
    assert_eq!(reg.len(), 1);
    assert_eq!(reg[0].detail, "addr 0x700000001000 len 4096 access 0x3", "REMOTE_WRITE implies LOCAL_WRITE");
    drop(mr);

    // The kernel cannot import dma-bufs: straight to peer-memory, and when
    // that fails too the error names both.
    let s = StandIn::new(Setup { dmabuf: false, ..Setup::roce() });
    let p = Mlx5Provider::probe_on(s.platform(), &Config::default()).unwrap();
    assert_eq!(p.info(0).unwrap().ptr_support & NCCL_PTR_DMABUF, 0, "getProperties reports no DMABUF");
    let nic = p.open_mode(0, MemoryMode::Gpu).unwrap();
    let next = s.steps();
    let s = s.fail_at(next);
    // SAFETY: as above.
    let e = unsafe { nic.reg_mr(0x7000_0000_1000, 4096, Access::all()) }.err().expect("both paths fail");
    assert!(s.calls("hipMemGetHandleForAddressRange").is_empty(), "no export when the NIC cannot import");
    let m = e.message();
    for w in [
        "registering 4096 bytes of GPU memory at 0x700000001000",
        "dma-buf failed (mlx5_0 cannot import dma-bufs)",
        "peer-memory failed",
        "ibv_reg_mr",
        "Input/output error",
    ] {
        assert!(m.contains(w), "names {w:?}: {m}");
    }
    drop(nic);
    assert_clean(&s, "after the failed registration");

    // A dma-buf handed in by RCCL goes to ibv_reg_dmabuf_mr as given.
    let s = StandIn::new(Setup::roce());
    let p = Mlx5Provider::probe_on(s.platform(), &Config::default()).unwrap();
    let nic = p.open_mode(0, MemoryMode::Gpu).unwrap();
    // SAFETY: the stand-in touches nothing; fd 77 is only recorded.
    let mr = unsafe { nic.reg_dmabuf_mr(0x7000_0000_0000, 8192, 4096, 77, Access::REMOTE_READ) }.unwrap();
    assert_eq!(s.calls("ibv_reg_dmabuf_mr")[0].detail, "offset 0x1000 len 8192 iova 0x700000000000 fd 77 access 0x4");
    assert_eq!(s.faults(), ["ibv_reg_dmabuf_mr of fd 77, which was not exported"], "the stand-in saw a foreign fd");
    drop((mr, nic));
    assert!(s.live().is_empty());
}

#[test]
fn the_plain_info_query_opens_and_closes_a_verbs_context() {
    let s = StandIn::new(Setup::infiniband());
    let p = Mlx5Provider::probe_on(s.platform(), &Config::default()).unwrap();
    let info = p.info(0).unwrap();
    assert_eq!(info.name, "mlx5_0");
    assert_eq!(info.pci_path, "/sys/devices/stand-in/mlx5_0");
    assert_eq!(info.guid, 0x0102_0304_0506_0708);
    assert_eq!(info.speed_mbps, 400_000, "NDR 4x");
    assert!(s.calls("mlx5dv_open_device").is_empty(), "no DevX for a query");
    assert_eq!(s.calls("ibv_open_device").len(), 1);
    assert_clean(&s, "after info");
    p.info(0).unwrap();
    assert_eq!(s.calls("ibv_open_device").len(), 1, "cached");
    // Other device names are filtered out; an unknown index is refused.
    let s = StandIn::new(Setup { devices: vec!["bnxt_re0".into(), "mlx5_3".into()], ..Setup::infiniband() });
    let p = Mlx5Provider::probe_on(s.platform(), &Config::default()).unwrap();
    assert_eq!(p.names(), ["mlx5_3"]);
    assert!(p.open(1).is_err());
    let s = StandIn::new(Setup { devices: vec!["bnxt_re0".into()], ..Setup::infiniband() });
    let e = Mlx5Provider::probe_on(s.platform(), &Config::default()).err().unwrap();
    assert!(e.message().contains("no usable mlx5 device among 1 RDMA device(s)"), "{}", e.message());
}

#[test]
fn the_firmware_model_refuses_transitions_out_of_order() {
    // The stand-in's state machine is what makes "INIT -> RTR -> RTS" a
    // check: a second connect would send RST2INIT to a QP in RTS.
    let s = StandIn::new(Setup::infiniband());
    let p = Mlx5Provider::probe_on(s.platform(), &Config::default()).unwrap();
    let nic = p.open_mode(0, MemoryMode::Host).unwrap();
    let a = nic.create_qp(6, 0, false).unwrap();
    a.connect(&nic.address(), 0x1234).unwrap();
    assert!(s.qps().iter().all(|q| q.state == "RTS"), "{:?}", s.qps());
    let e = a.connect(&nic.address(), 0x1234).unwrap_err();
    assert!(e.message().contains("connect was already called"), "refused before any command: {}", e.message());
    assert!(s.faults().is_empty());
    assert_eq!(s.calls("mlx5dv_devx_obj_modify(RST2INIT)").len(), 1);
}

// ---------------------------------------------------------------------------
// The RMA plugin over the mlx5 provider: the host doorbell's real MMIO store
// lands in the stand-in's UAR page
// ---------------------------------------------------------------------------

#[test]
fn the_rma_plugin_over_mlx5_stores_one_doorbell_per_batch_at_the_uar() {
    use rccl_rust_gin::ffi::nccl::{NCCL_NET_HANDLE_MAXSIZE, NCCL_PTR_CUDA, NCCL_SUCCESS};
    use rccl_rust_gin::ffi::rma::{NcclRmaConfig, NCCL_RMA_OPT_FLAGS_AGGREGATE_REQUESTS as AGG};
    use rccl_rust_gin::provider::mlx5::platform::set_process_platform;
    use std::ffi::c_void;
    type P = *mut c_void;
    let null: P = std::ptr::null_mut();
    let v = &rccl_rust_gin::rma::ncclRmaPlugin_v16;

    // The plugin reads its configuration from the environment: mlx5 (the
    // default, made explicit) with connection setup on loopback. No other
    // test of this program reads the environment.
    std::env::set_var("RCCL_RUST_GIN_PROVIDER", "mlx5");
    std::env::set_var("RCCL_RUST_GIN_SOCKET_IFNAME", "lo");
    // The stand-in records commands and executes no WQE, so init's loopback
    // self-test cannot pass over it (tests/self_test.rs runs it on the
    // emulated NIC of every family).
    std::env::set_var("RCCL_RUST_GIN_SELF_TEST", "off");
    let s = StandIn::new(Setup::infiniband());
    set_process_platform(Some(s.platform()));

    // SAFETY (every call below): the plugin's C entry points, called with
    // valid out-pointers and the tokens it handed out.
    let (mut ctx, mut lc, mut coll, mut rctx) = (null, null, null, null);
    unsafe {
        assert_eq!(v.init.unwrap()(&mut ctx, 0x5eed, None), NCCL_SUCCESS, "init over the stand-in");
        let mut ndev = 0;
        assert_eq!(v.devices.unwrap()(&mut ndev), NCCL_SUCCESS);
        assert_eq!(ndev, 1, "the stand-in's one mlx5 device");
        let mut handle = [0u8; NCCL_NET_HANDLE_MAXSIZE];
        assert_eq!(v.listen.unwrap()(ctx, 0, handle.as_mut_ptr() as P, &mut lc), NCCL_SUCCESS, "listen");
        let mut handles = [handle.as_mut_ptr() as P];
        assert_eq!(v.connect.unwrap()(ctx, handles.as_mut_ptr(), 1, 0, lc, &mut coll), NCCL_SUCCESS, "connect");
        assert_eq!(v.close_listen.unwrap()(lc), NCCL_SUCCESS);
        let mut cfg = NcclRmaConfig { n_contexts: 1, traffic_class: -1, rank_stride: 1 };
        assert_eq!(v.create_context.unwrap()(coll, &mut cfg, &mut rctx), NCCL_SUCCESS, "createContext");
    }
    assert!(s.qps().iter().all(|q| q.state == "RTS"), "connect moved every QP to RTS: {:?}", s.qps());

    let src = HostMemory.alloc(4 * 4096, 4096, Object::WindowData).unwrap();
    let dst = HostMemory.alloc(4 * 4096, 4096, Object::WindowData).unwrap();
    let reg = |b: &rccl_rust_gin::gpu::GpuBuf| {
        let mut mh = null;
        // SAFETY: as above; the buffer outlives the registration.
        let rc = unsafe { v.reg_mr_sym.unwrap()(coll, b.dev_addr() as P, b.len(), NCCL_PTR_CUDA, 0, &mut mh) };
        assert_eq!(rc, NCCL_SUCCESS, "regMrSym");
        mh
    };
    let before = s.calls("ibv_reg_mr").len();
    let (sm, dm) = (reg(&src), reg(&dst));
    assert_eq!(s.calls("ibv_reg_mr").len(), before + 2, "host posting registers through ibv_reg_mr");
    let put = |k: u64, flags: u32| {
        let mut q = null;
        // SAFETY: as above.
        let rc = unsafe { v.iput.unwrap()(rctx, 0, k * 4096, sm, 4096, k * 4096, dm, 0, flags, &mut q) };
        assert_eq!(rc, NCCL_SUCCESS, "iput {k}");
        q
    };

    // Every UAR starts zeroed; a sentinel shows whether a store happened.
    const SENTINEL: u64 = 0x5e5e_5e5e_5e5e_5e5e;
    let uar_ids: Vec<u32> = (0..400).filter(|id| s.doorbell_addr(*id).is_some()).collect();
    assert!(!uar_ids.is_empty(), "the plugin's QPs have UARs");
    let arm = || {
        for id in &uar_ids {
            let a = s.doorbell_addr(*id).unwrap() as *mut u64;
            // SAFETY: the stand-in's page, aligned; the plugin is idle.
            unsafe { a.write_volatile(SENTINEL) };
        }
    };
    let rung = || -> Vec<(u32, u64)> {
        uar_ids.iter().map(|id| (*id, s.doorbell(*id).unwrap())).filter(|(_, w)| *w != SENTINEL).collect()
    };

    // Batch 1: one plain put rings once.
    arm();
    let mut reqs = vec![put(0, 0)];
    let first = rung();
    assert_eq!(first.len(), 1, "one UAR rung: {first:?}");
    let (page, word) = first[0];

    // The queue behind that UAR, from the commands the stand-in received.
    let cq_cmd = commands(&s, "mlx5dv_devx_obj_create(CREATE_CQ)")
        .into_iter()
        .find(|c| bits(c, 0x80 + 0x68, 24) == u64::from(page))
        .expect("a CQ on the rung UAR");
    let qp_idx = commands(&s, "mlx5dv_devx_obj_create(CREATE_QP)")
        .iter()
        .position(|c| bits(c, 0xc0 + 0x68, 24) == u64::from(page))
        .expect("a QP on the rung UAR");
    let qpn = s.qps()[qp_idx].qpn;
    let qp_cmd = &commands(&s, "mlx5dv_devx_obj_create(CREATE_QP)")[qp_idx];
    let umem = |id: u64| s.umems().into_iter().find(|u| u64::from(u.0) == id).expect("a registered umem");
    let sq = umem(bits(qp_cmd, 0x840, 32));
    let cq = umem(bits(&cq_cmd, 0x2c0, 32));
    let dbr = umem(bits(qp_cmd, 0xc0 + 0x720, 32));

    // The doorbell (NVSHMEM IBGDA's form, device/include/rust_gin/mlx5/sq.h):
    // the first 8 bytes of a control segment naming the QP and the new
    // producer index, stored as they lie in memory: opmod 0, index (be16),
    // opcode 0, QPN (be24), DS 0. The doorbell record holds the same index
    // (be32 send counter at byte 4), and the WQE before it is the put.
    let check = |word: u64, pi: u16, what: &str| {
        let b = word.to_ne_bytes();
        assert_eq!(b, [0, (pi >> 8) as u8, pi as u8, 0, (qpn >> 16) as u8, (qpn >> 8) as u8, qpn as u8, 0], "{what}");
        // SAFETY: the QP's doorbell record in the umem the stand-in registered.
        let rec = unsafe { std::slice::from_raw_parts((dbr.1 + 4) as *const u8, 4) };
        assert_eq!(u32::from_be_bytes(rec.try_into().unwrap()), u32::from(pi), "{what}: the doorbell record");
        // SAFETY: inside the send ring the stand-in registered (64 WQEBBs).
        let last = unsafe { std::slice::from_raw_parts((sq.1 as usize + usize::from(pi - 1) * 64) as *const u8, 8) };
        let n = pi - 1;
        let want = [0, (n >> 8) as u8, n as u8, 0x08, (qpn >> 16) as u8, (qpn >> 8) as u8, qpn as u8, 3];
        assert_eq!(last, want, "{what}: the last WQE is an RDMA_WRITE of ctrl + raddr + data segments");
    };
    check(word, 1, "batch 1");

    // Batch 2: three aggregated puts store nothing; the plain fourth rings
    // once, for all four.
    arm();
    for k in 1..4 {
        reqs.push(put(k, AGG));
        assert!(rung().is_empty(), "aggregated put {k} stored no doorbell");
    }
    reqs.push(put(0, 0));
    let second = rung();
    assert_eq!(second.iter().map(|r| r.0).collect::<Vec<_>>(), [page], "the same UAR, once");
    check(second[0].1, 5, "batch 2");

    // Complete everything as the NIC would: one CQE for WQE 4 (op_own 0:
    // requester, owner bit 0 on the first pass), then test() sees it.
    let cqe_tail = (cq.1 as usize + 60) as *mut u32;
    // SAFETY: CQE 0's last word in the CQ ring the stand-in registered.
    let last = 4u16.to_be_bytes();
    unsafe { cqe_tail.write_volatile(u32::from_ne_bytes([last[0], last[1], 0, 0x00])) };
    for (i, q) in reqs.iter().enumerate() {
        let t = std::time::Instant::now();
        loop {
            let mut done = 0;
            // SAFETY: as above.
            assert_eq!(unsafe { v.test.unwrap()(coll, *q, &mut done) }, NCCL_SUCCESS);
            if done != 0 {
                break;
            }
            assert!(t.elapsed().as_secs() < 10, "request {i} never completed");
        }
    }

    // SAFETY: as above; teardown in RCCL's order.
    unsafe {
        assert_eq!(v.dereg_mr_sym.unwrap()(coll, sm), NCCL_SUCCESS);
        assert_eq!(v.dereg_mr_sym.unwrap()(coll, dm), NCCL_SUCCESS);
        assert_eq!(v.destroy_context.unwrap()(rctx), NCCL_SUCCESS);
        assert_eq!(v.close_coll.unwrap()(coll), NCCL_SUCCESS);
        assert_eq!(v.finalize.unwrap()(ctx), NCCL_SUCCESS);
    }
    set_process_platform(None);
    assert_clean(&s, "after finalize");
}

/// The UAR page of each QP, read from its CREATE_QP command (qpc.uar_page).
fn qp_uar_pages(s: &StandIn) -> Vec<u32> {
    commands(s, "mlx5dv_devx_obj_create(CREATE_QP)").iter().map(|qp| bits(qp, 0xc0 + 0x68, 24) as u32).collect()
}

/// QPs share UAR pages `RCCL_RUST_GIN_QPS_PER_UAR` at a time: a page per
/// group, every QP of a group rings the group page's register through one
/// GPU address, a page is freed with its last QP and not before.
#[test]
fn qps_share_uar_pages_as_configured_and_free_them_with_their_last_qp() {
    for (per_page, qps, pages) in [(1u32, 5usize, 5usize), (16, 40, 3), (0, 40, 1), (4, 8, 2)] {
        let s = StandIn::new(Setup::roce());
        {
            let config = Config { qps_per_uar: per_page, ..Config::default() };
            let p = Mlx5Provider::probe_on(s.platform(), &config).expect("probe");
            let nic = p.open_mode(0, MemoryMode::Gpu).expect("open");
            let mut made: Vec<_> = (0..qps).map(|_| nic.create_qp(6, 0, false).expect("create_qp")).collect();
            let what = format!("{per_page} QPs per page, {qps} QPs");
            assert_eq!(s.calls("mlx5dv_devx_alloc_uar").len(), pages, "{what}: UAR pages");
            let per_qp = qp_uar_pages(&s);
            for (k, page) in per_qp.iter().enumerate() {
                let group = if per_page == 0 { 0 } else { k / per_page as usize };
                assert_eq!(*page, per_qp[group * per_page.max(1) as usize], "{what}: QP {k} is on its group's page");
                let cpu = s.doorbell_addr(*page).expect("a page the stand-in made") as u64;
                assert_eq!(made[k].descriptor(1, 0, 0).mlx5().expect("mlx5").uar_db, cpu + GPU_IO_OFFSET, "{what}: QP {k} rings its page");
            }
            let distinct: std::collections::BTreeSet<_> = per_qp.iter().collect();
            assert_eq!(distinct.len(), pages, "{what}: distinct pages in the QP contexts");
            // Newest first, as a scope drops them: a page is freed with the
            // last of its QPs (its group's first) and not before.
            while let Some(q) = made.pop() {
                drop(q);
                let left = made.len();
                let live_pages = if per_page == 0 { usize::from(left > 0) } else { left.div_ceil(per_page as usize) };
                assert_eq!(s.calls("mlx5dv_devx_free_uar").len(), pages - live_pages, "{what}: pages freed, {left} QPs left");
            }
        }
        assert_clean(&s, &format!("{per_page} QPs per page"));
    }
}

// --- The DC transport: DCIs, a DCT, the address vector ---------------------------
//
// Expected fields are literal bit offsets from the kernel's
// include/linux/mlx5/mlx5_ifc.h (dctc, create_dct_in, rmpc, wq,
// create_rmp_in; gregkh/linux aeeea0293f79), qpc as rocSHMEM vendors it
// (st, log_num_dci_stream_channels) and rdma-core's mlx5_ifc.h
// (query_hca_cap, cmd_hca_cap.dct), as cited in host/provider/mlx5/prm.rs.

/// What a DC run leaves to check.
struct DcRun {
    dcis: Vec<(u32, rust_gin_mlx5_sq)>,
    dctn: u32,
    av: DatagramSeg,
}

const DC_KEY: u64 = 0x0123_4567_89ab_cdef;

/// A peer of the stand-in's port: the next IPv4 address (RoCE v2) or LID 9
/// (InfiniBand, same subnet).
fn peer_of(setup: &Setup) -> Mlx5Address {
    let roce = setup.link_layer == 2;
    let mut gid = setup.gids.last().expect("a GID").0;
    gid[15] = gid[15].wrapping_add(1);
    Mlx5Address {
        link_layer: if roce { LinkLayer::Ethernet } else { LinkLayer::Infiniband },
        port: 1,
        mtu: 5,
        gid_index: 3,
        gid_type: if roce { GidType::RoceV2 } else { GidType::Ib },
        lid: 9,
        gid,
    }
}

/// probe, open, what a context set on DC makes on one NIC (its DCT, then
/// two DCIs of 64 WQEs), the address of a peer; then everything dropped.
fn run_dc(s: &StandIn, setup: &Setup, mode: MemoryMode) -> Result<DcRun> {
    let p = Mlx5Provider::probe_on(s.platform(), &Config::default())?;
    let nic = p.open_mode(0, mode)?;
    let dct = nic.create_dct(DC_KEY)?;
    let a = nic.create_dci(6, 3, false)?;
    let b = nic.create_dci(6, 3, false)?;
    let av = nic.dc_address(&peer_of(setup).encode())?;
    Ok(DcRun {
        dcis: vec![(a.qpn(), a.descriptor(7, 0x1000, 99).mlx5().expect("mlx5")), (b.qpn(), b.descriptor(7, 0x1000, 99).mlx5().expect("mlx5"))],
        dctn: dct.dctn(),
        av,
    })
}

#[test]
fn dc_on_roce_sends_the_right_commands_and_tears_down_in_reverse() {
    let setup = Setup::roce();
    let s = StandIn::new(setup.clone());
    let run = run_dc(&s, &setup, MemoryMode::Gpu).expect("the DC control path over the stand-in");
    assert_clean(&s, "after the DC run");

    // The capability is asked once, before the first DC object.
    let caps = commands(&s, "mlx5dv_devx_general_cmd(QUERY_HCA_CAP)");
    assert_eq!(caps.len(), 1, "QUERY_HCA_CAP once per NIC");
    assert_eq!((caps[0].len(), bits(&caps[0], 0, 16), bits(&caps[0], 0x30, 16)), (16, 0x100, 1), "general, current");

    // The call sequence: the DCT (its CQ, RMP, DCT), then per DCI its CQ,
    // QP (st = DCI) and three transitions; destroys in exact reverse.
    let order: Vec<String> = s
        .log()
        .iter()
        .filter(|c| c.name.starts_with("mlx5dv_devx_obj") || c.name.starts_with("mlx5dv_devx_general"))
        .map(|c| match c.handle {
            Some(h) if c.step.is_none() => format!("destroy {}", s.kind_of(h)),
            _ => c.name.trim_start_matches("mlx5dv_devx_").to_string(),
        })
        .collect();
    let want = [
        "obj_create(ALLOC_Q_COUNTER)",
        "general_cmd(QUERY_HCA_CAP)",
        "obj_create(CREATE_CQ)",
        "obj_create(CREATE_RMP)",
        "obj_create(CREATE_DCT)",
        "obj_create(CREATE_CQ)",
        "obj_create(CREATE_QP DCI)",
        "obj_modify(RST2INIT)",
        "obj_modify(INIT2RTR)",
        "obj_modify(RTR2RTS)",
        "obj_create(CREATE_CQ)",
        "obj_create(CREATE_QP DCI)",
        "obj_modify(RST2INIT)",
        "obj_modify(INIT2RTR)",
        "obj_modify(RTR2RTS)",
        "destroy qp",
        "destroy cq",
        "destroy qp",
        "destroy cq",
        "destroy dct",
        "destroy rmp",
        "destroy cq",
        "destroy q_counter",
    ];
    assert_eq!(order, want);

    let umems = s.umems();
    let cqs = commands(&s, "mlx5dv_devx_obj_create(CREATE_CQ)");
    // The DCT's pieces: umems 0..3 (receive ring, CQ ring, records).
    let (rq_id, _, rq_len) = umems[0];
    let (dcq_id, _, _) = umems[1];
    let (ddbr_id, _, _) = umems[2];
    assert_eq!(bits(&cqs[0], 0x2c0, 32), u64::from(dcq_id), "the DCT's CQ in its own umem");
    let rmp = &commands(&s, "mlx5dv_devx_obj_create(CREATE_RMP)")[0];
    let (r, w) = (0x100, 0x100 + 0x180); // rmpc, rmpc.wq
    assert_eq!(rmp.len(), 0x880 / 8);
    assert_eq!(bits(rmp, 0, 16), 0x90c, "CREATE_RMP");
    assert_eq!(bits(rmp, r + 0x08, 4), 1, "rmpc.state = RDY");
    assert_eq!(bits(rmp, w, 4), 1, "wq.wq_type = cyclic");
    assert_eq!(bits(rmp, w + 0x48, 24), u64::from(PDN), "wq.pd");
    assert_eq!(bits(rmp, w + 0x80, 64), 0, "wq.dbr_addr: the record at byte 0");
    assert_eq!(bits(rmp, w + 0x10c, 4), 4, "wq.log_wq_stride: 16-byte receive WQEs");
    assert_eq!(16usize << bits(rmp, w + 0x11b, 5), rq_len, "wq.log_wq_sz fills the ring umem");
    assert_eq!((bits(rmp, w + 0x120, 1), bits(rmp, w + 0x121, 1)), (1, 1), "dbr_umem_valid, wq_umem_valid");
    assert_eq!(bits(rmp, w + 0x140, 32), u64::from(ddbr_id), "wq.dbr_umem_id");
    assert_eq!(bits(rmp, w + 0x160, 32), u64::from(rq_id), "wq.wq_umem_id");
    assert_eq!(bits(rmp, w + 0x180, 64), 0, "wq.wq_umem_offset");
    let rmpn = s.num_of("rmp");
    let dcqn = s.nums_of("cq")[0];

    let dct = &commands(&s, "mlx5dv_devx_obj_create(CREATE_DCT)")[0];
    let d = 0x80; // create_dct_in.dct_context_entry
    assert_eq!(dct.len(), 0x400 / 8);
    assert_eq!(bits(dct, 0, 16), 0x710, "CREATE_DCT");
    assert_eq!(bits(dct, d + 0x04, 4), 0, "dctc.state");
    assert_eq!(bits(dct, d + 0x28, 24), 0, "dctc.user_index");
    assert_eq!(bits(dct, d + 0x48, 24), u64::from(dcqn), "dctc.cqn: the DCT's CQ");
    assert_eq!(bits(dct, d + 0x68, 4), 1, "dctc.atomic_mode = IB spec, as the RC QP's");
    assert_eq!(bits(dct, d + 0x6c, 3), 0b111, "dctc.rre, rwe, rae");
    assert_eq!(bits(dct, d + 0x88, 8), 0, "dctc.cs_res: no scatter to CQE");
    assert_eq!(bits(dct, d + 0x93, 5), 12, "dctc.min_rnr_nak");
    assert_eq!(bits(dct, d + 0xa8, 24), u64::from(rmpn), "dctc.srqn_xrqn: the RMP");
    assert_eq!(bits(dct, d + 0xc8, 24), u64::from(PDN), "dctc.pd");
    assert_eq!(bits(dct, d + 0xe0, 8), 0, "dctc.tclass");
    assert_eq!(bits(dct, d + 0x100, 64), DC_KEY, "dctc.dc_access_key");
    assert_eq!(bits(dct, d + 0x145, 3), 5, "dctc.mtu: the port's active MTU");
    assert_eq!(bits(dct, d + 0x148, 8), 1, "dctc.port");
    assert_eq!(bits(dct, d + 0x150, 16), 0, "dctc.pkey_index");
    assert_eq!(bits(dct, d + 0x168, 8), 1, "dctc.my_addr_index: the RoCE v2 GID");
    assert_eq!(bits(dct, d + 0x178, 8), 255, "dctc.hop_limit");
    assert_eq!(bits(dct, d + 0x1ba, 6), 0, "dctc.dscp");
    assert_eq!(u64::from(run.dctn), s.num_of("dct"), "the DCT number is create_dct_out.dctn");
    assert!(dct[(d + 0x200) / 8..].iter().all(|&b| b == 0), "nothing after the dctc");

    // The DCIs: CREATE_QP with st = DCI, one stream channel, a send ring
    // of 2 WQEBBs per WQE; transitions without a remote.
    let qps = commands(&s, "mlx5dv_devx_obj_create(CREATE_QP DCI)");
    let rst = commands(&s, "mlx5dv_devx_obj_modify(RST2INIT)");
    let rtr = commands(&s, "mlx5dv_devx_obj_modify(INIT2RTR)");
    let rts = commands(&s, "mlx5dv_devx_obj_modify(RTR2RTS)");
    let (q, p) = (0xc0, 0xc0 + 0xc0);
    for (k, (qpn, desc)) in run.dcis.iter().enumerate() {
        let (sq_id, _, sq_len) = umems[3 + 3 * k];
        let qp = &qps[k];
        assert_eq!(bits(qp, q + 0x08, 8), 5, "qpc.st = DCI");
        assert_eq!(bits(qp, q + 0x3e3, 5), 0, "qpc.log_num_dci_stream_channels: no DCI streams");
        assert_eq!(bits(qp, q + 0x13, 2), 3, "qpc.pm_state = migrated");
        assert_eq!(bits(qp, q + 0x28, 24), u64::from(PDN), "qpc.pd");
        assert_eq!(64usize << bits(qp, q + 0x51, 4), sq_len, "qpc.log_sq_size matches the send ring");
        assert_eq!(sq_len, 64 * 64 * 2, "64 WQEs of two WQEBBs");
        assert_eq!(bits(qp, q + 0x565, 3), 3, "qpc.rq_type: no receive queue");
        assert_eq!(bits(qp, 0x840, 32), u64::from(sq_id), "wq_umem_id");
        assert_eq!(bits(qp, q + 0x3e8, 24), u64::from(desc.cqn), "qpc.cqn_snd");
        assert_eq!(u64::from(*qpn), bits(&rst[k], 0x48, 24), "RST2INIT names the DCI");
        assert_eq!(bits(&rst[k], q + 0x490, 3), 0, "a DCI answers nothing: no rre, rwe, rae");
        assert_eq!(bits(&rst[k], q + 0x48c, 4), 0, "nor an atomic mode");
        assert_eq!(bits(&rst[k], p + 0x128, 8), 1, "vhca_port_num");
        assert_eq!(bits(&rtr[k], q + 0x40, 3), 5, "INIT2RTR: mtu");
        assert_eq!(bits(&rtr[k], q + 0x43, 5), 30, "log_msg_max");
        assert_eq!(bits(&rtr[k], q + 0xa8, 24), 0, "no remote_qpn");
        assert!(rtr[k][(p + 0x80) / 8..(p + 0x100) / 8].iter().all(|&b| b == 0), "no rgid: every WQE has its AV");
        assert_eq!(bits(&rtr[k], p + 0x128, 8), 1, "vhca_port_num");
        assert_eq!(bits(&rts[k], q + 0x38d, 3), 7, "RTR2RTS: retry_count");
        assert_eq!(bits(&rts[k], q + 0x390, 3), 7, "rnr_retry");
        assert_eq!(bits(&rts[k], q + 0x388, 3), 4, "log_sra_max");
        assert_eq!(bits(&rts[k], p + 0x40, 5), 20, "ack_timeout");
        assert_eq!((desc.wqe_shift, desc.log_wqe_cnt, desc.peer), (1, 6, 7), "two WQEBBs per WQE, 64 WQEs");
    }
    for f in s.qps() {
        panic!("QP {:#x} left in {}", f.qpn, f.state);
    }
}

#[test]
fn a_dci_descriptor_is_what_the_emulated_provider_gives_its_dcis() {
    let setup = Setup::roce();
    let s = StandIn::new(setup.clone());
    let r = run_dc(&s, &setup, MemoryMode::Gpu).expect("the DC control path");
    let emu = rccl_rust_gin::provider::emu::EmuProvider::new(&Config::default()).expect("emulated provider");
    let enic = emu.open(0).expect("an emulated NIC");
    let edci = enic.create_dci(6, 3, false).expect("an emulated DCI");
    let e = edci.descriptor(7, 0x1000, 99).mlx5().expect("mlx5");
    let m = r.dcis[0].1;
    // Everything but the addresses and numbers each NIC hands out.
    let shape = |d: &rust_gin_mlx5_sq| {
        (
            d.wqe_shift,
            d.log_wqe_cnt,
            d.log_cq_cnt,
            d.log_signal_period,
            d.peer,
            d.error,
            d.timeout_ns,
            d.dc_targets,
            d.flush_addr,
            d.counter_log,
            d.cq_dbrec - d.dbrec,
        )
    };
    assert_eq!(shape(&m), shape(&e), "mlx5 DCI vs emulated DCI");
    assert_eq!(m.wqe_shift, rccl_rust_gin::mlx5::queue::DC_WQE_SHIFT);
}

#[test]
fn the_dc_address_vector_is_mlx5_create_ahs() {
    // RoCE v2: the AV rdma-core's mlx5_create_ah writes (providers/mlx5/
    // verbs.c): sl 0, the GID index at bits 20..27 of grh_gid_fl with the
    // flow label, GRH bit 30 clear, hop limit, rgid, the resolved MAC, and
    // the UDP source port in rlid (mlx5_ah_set_udp_sport).
    let setup = Setup::roce();
    let s = StandIn::new(setup.clone());
    let r = run_dc(&s, &setup, MemoryMode::Gpu).expect("RoCE");
    let peer = peer_of(&setup);
    let low = |g: &[u8; 16]| u32::from_be_bytes([g[12], g[13], g[14], g[15]]);
    let fl = {
        let v = u64::from(low(&setup.gids[1].0)) * u64::from(low(&peer.gid));
        let v = v ^ (v >> 20);
        let v = v ^ (v >> 40);
        (v & 0xfffff) as u32
    };
    let sport = (((fl & 0x3fff) ^ ((fl & 0xfc000) >> 14)) | 0xc000) as u16;
    // struct mlx5_wqe_av (mlx5dv.h): dc_key 0..8, dqp_dct 8..12,
    // stat_rate_sl 12, fl_mlid 13, rlid 14..16, rmac 20..26, tclass 26,
    // hop_limit 27, grh_gid_fl 28..32, rgid 32..48.
    let b = r.av.with_dc_addr(0x3456, DC_KEY).encode();
    assert_eq!(&b[0..8], &DC_KEY.to_be_bytes(), "dc_key");
    assert_eq!(&b[8..12], &(0x8000_0000u32 | 0x3456).to_be_bytes(), "MLX5_EXTENDED_UD_AV | dct number");
    assert_eq!((b[12], b[13]), (0, 0), "stat_rate_sl, fl_mlid");
    assert_eq!(&b[14..16], &sport.to_be_bytes(), "rlid: the RoCE v2 UDP source port");
    assert_eq!(&b[20..26], &setup.rmac, "rmac: what the AH resolved");
    assert_eq!((b[26], b[27]), (0, 255), "tclass, hop_limit");
    assert_eq!(&b[28..32], &((1u32 << 20) | fl).to_be_bytes(), "grh_gid_fl: sgid index 1, the flow label");
    assert_eq!(&b[32..48], &peer.gid, "rgid");
    assert_eq!(s.calls("ibv_create_ah").len(), 1, "one AH for the MAC");

    // InfiniBand within one subnet: the peer's LID, nothing global.
    let setup = Setup::infiniband();
    let s = StandIn::new(setup.clone());
    let r = run_dc(&s, &setup, MemoryMode::Host).expect("InfiniBand");
    let b = r.av.encode();
    assert_eq!(&b[14..16], &9u16.to_be_bytes(), "rlid: the peer's LID");
    assert!(b[12..14].iter().chain(&b[16..48]).all(|&x| x == 0), "no GRH, no MAC: {b:?}");
    assert!(s.calls("ibv_create_ah").is_empty());
}

#[test]
fn a_device_without_dc_is_refused_naming_the_capability() {
    let s = StandIn::new(Setup { dct: false, ..Setup::roce() });
    let p = Mlx5Provider::probe_on(s.platform(), &Config::default()).unwrap();
    let nic = p.open_mode(0, MemoryMode::Gpu).unwrap();
    for e in [nic.create_dct(1).err().expect("no DCT"), nic.create_dci(6, 0, false).err().expect("no DCI")] {
        assert_eq!(e.code(), rccl_rust_gin::ffi::nccl::NCCL_INVALID_USAGE);
        for w in ["mlx5_0", "`dct` is 0", "RCCL_RUST_GIN_TRANSPORT=rc"] {
            assert!(e.message().contains(w), "{w}: {e}");
        }
    }
    assert_eq!(s.calls("mlx5dv_devx_general_cmd(QUERY_HCA_CAP)").len(), 1, "the answer is kept");
    assert!(s.calls("mlx5dv_devx_obj_create(CREATE_DCT)").is_empty());
    drop(nic);
    assert_clean(&s, "after the refusal");
}

/// What injecting a failure at a step of [`run_dc`] must say (the steps
/// RC shares with it as [`expected`]).
fn expected_dc(name: &str, mode: MemoryMode, roce: bool) -> Option<&'static [&'static str]> {
    Some(match name {
        "mlx5dv_devx_general_cmd(QUERY_HCA_CAP)" => &["mlx5_0", "DevX QUERY_HCA_CAP", "0x5eed0bad"],
        "mlx5dv_devx_obj_create(CREATE_CQ)" => &["mlx5_0", "DevX CREATE_CQ (DC ", "firmware status 0x5", "0x5eed0bad"],
        "mlx5dv_devx_obj_create(CREATE_RMP)" => &["mlx5_0", "DevX CREATE_RMP (the DC target's SRQ) failed", "0x5eed0bad"],
        "mlx5dv_devx_obj_create(CREATE_DCT)" => &["mlx5_0", "DevX CREATE_DCT failed", "0x5eed0bad"],
        "mlx5dv_devx_obj_create(CREATE_QP DCI)" => &["mlx5_0", "DevX CREATE_QP (DC initiator) failed", "0x5eed0bad"],
        "mlx5dv_devx_obj_modify(RST2INIT)" => &["mlx5_0", "DevX RST2INIT of DC initiator", "0x5eed0bad"],
        "mlx5dv_devx_obj_modify(INIT2RTR)" => &["mlx5_0", "DevX INIT2RTR of DC initiator", "0x5eed0bad"],
        "mlx5dv_devx_obj_modify(RTR2RTS)" => &["mlx5_0", "DevX RTR2RTS of DC initiator", "0x5eed0bad"],
        "hipHostMalloc" => &["mlx5_0", "memory (stand-in GPU memory)", "Input/output error"],
        other => return expected(other, mode, roce),
    })
}

fn inject_everywhere_dc(setup: fn() -> Setup, mode: MemoryMode) {
    let clean = StandIn::new(setup());
    run_dc(&clean, &setup(), mode).expect("the DC run without failures");
    let steps = clean.steps();
    let mut fatal = 0;
    for n in 0..steps {
        let s = StandIn::new(setup()).fail_at(n);
        let out = run_dc(&s, &setup(), mode);
        let failed = s.log().into_iter().find(|c| c.failed).expect("the step was reached");
        let what = format!("DC step {n} ({} {})", failed.name, failed.detail);
        if failed.name == "ibv_query_gid" && setup().link_layer == 2 {
            // Recovered; with the RoCE v1 GID (when the v2 one could not be
            // read) the RoCE v2 peer is refused, saying why.
            if let Err(e) = out {
                assert!(e.message().contains("RoCE version mismatch"), "{what}: {e}");
            }
            assert_clean(&s, &what);
            continue;
        }
        match (expected_dc(&failed.name, mode, setup().link_layer == 2), out) {
            (Some(words), Err(e)) => {
                fatal += 1;
                assert_eq!(e.code(), NCCL_SYSTEM_ERROR, "{what}: {e}");
                for w in words {
                    assert!(e.message().contains(w), "{what}: the error names {w:?}: {}", e.message());
                }
            }
            (Some(_), Ok(_)) => panic!("{what}: a failure went unreported"),
            (None, Err(e)) => panic!("{what}: should have been recovered from, got {e}"),
            (None, Ok(_)) => {}
        }
        assert_clean(&s, &what);
    }
    assert!(fatal > 20, "{fatal} fatal steps of {steps}");
}

#[test]
fn a_failure_at_any_step_of_a_dc_set_is_named_and_leaks_nothing() {
    inject_everywhere_dc(Setup::roce, MemoryMode::Gpu);
    inject_everywhere_dc(Setup::infiniband, MemoryMode::Host);
}

/// Issue 26 item 6: each NIC allocates one queue-counter set (a DevX
/// object, so the kernel frees it with the process), every QP it creates
/// counts into it (qpc.counter_set_id), and the NIC's error counters are the
/// set's nonzero ones, read by QUERY_Q_COUNTER on that set. A NIC whose
/// firmware refuses a set still works, and says nothing of counters.
#[test]
fn each_nic_counts_its_queues_into_one_counter_set_and_reports_it() {
    let s = StandIn::new(Setup::roce());
    let p = Mlx5Provider::probe_on(s.platform(), &Config::default()).unwrap();
    let nic = p.open_mode(0, MemoryMode::Host).unwrap();
    let (a, b) = (nic.create_qp(6, 3, false).unwrap(), nic.create_dci(6, 3, false).unwrap());
    let allocs = s.calls("mlx5dv_devx_obj_create(ALLOC_Q_COUNTER)");
    assert_eq!(allocs.len(), 1, "one set per NIC");
    let id = s.objs_of("q_counter");
    assert_eq!(id.len(), 1);
    // qpc at bit 0xc0 of CREATE_QP, counter_set_id at bits 0x60..0x68 of it.
    for (what, qp) in [("RC", "mlx5dv_devx_obj_create(CREATE_QP)"), ("DCI", "mlx5dv_devx_obj_create(CREATE_QP DCI)")] {
        let cmd = &commands(&s, qp)[0];
        assert_eq!(bits(cmd, 0xc0 + 0x60, 8) as u32, id[0], "{what} QP counts into the NIC's set");
    }
    assert_eq!(nic.error_counters().as_deref(), Some("out_of_sequence 2, local_ack_timeout_err 7"));
    let q = commands(&s, "mlx5dv_devx_obj_query(QUERY_Q_COUNTER)");
    assert_eq!((bits(&q[0], 0, 16), bits(&q[0], 0xf8, 8) as u32, bits(&q[0], 0xc0, 1)), (0x773, id[0], 0), "query, no clear");
    drop(b);
    drop(a);
    drop(nic);
    drop(p);
    assert_clean(&s, "counters");

    // The set refused: QPs count into the port's default set (0), no report.
    let clean = StandIn::new(Setup::roce());
    let pc = Mlx5Provider::probe_on(clean.platform(), &Config::default()).unwrap();
    drop(pc.open_mode(0, MemoryMode::Host).unwrap());
    let at = clean.calls("mlx5dv_devx_obj_create(ALLOC_Q_COUNTER)")[0].step.expect("a step that can fail");
    let s = StandIn::new(Setup::roce()).fail_at(at);
    let p = Mlx5Provider::probe_on(s.platform(), &Config::default()).unwrap();
    let nic = p.open_mode(0, MemoryMode::Host).expect("a NIC without a counter set still opens");
    let qp = nic.create_qp(6, 3, false).unwrap();
    assert!(s.log().iter().any(|c| c.failed && c.name == "mlx5dv_devx_obj_create(ALLOC_Q_COUNTER)"));
    assert_eq!(bits(&commands(&s, "mlx5dv_devx_obj_create(CREATE_QP)")[0], 0xc0 + 0x60, 8), 0);
    assert_eq!(nic.error_counters(), None);
    drop(qp);
    drop(nic);
    drop(p);
    assert_clean(&s, "no counter set");
}
