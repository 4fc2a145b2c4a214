//! A GIN context set on the DC transport over the mlx5 provider, the
//! provider's every call going to the recording stand-in
//! (tests/support/mlx5_standin.rs): three ranks as threads of this process,
//! each opening the stand-in's one ConnectX, createContext with two
//! contexts of two DCIs, destroyContext, finalize. Checks the DevX sequence
//! a DC context set makes (QUERY_HCA_CAP, per rank a DCT with its CQ and
//! RMP, per context its DCIs through RTS), that each rank's peer table
//! carries the AV of the stand-in's port with the other ranks' DCT numbers,
//! and that teardown destroys everything once.
//!
//! One test in this program: the plugin reads the environment, and the
//! process platform is one per process.

#[path = "support/mlx5_standin.rs"]
mod mlx5_standin;
#[path = "support/rccl_host.rs"]
mod rccl_host;

use mlx5_standin::{bits, Setup, StandIn};
use rccl_host::*;
use rccl_rust_gin::abi::{rust_gin_context, rust_gin_dc_peer, rust_gin_handle, rust_gin_mlx5_sq};
use rccl_rust_gin::ffi::nccl::NCCL_NET_HANDLE_MAXSIZE;
use rccl_rust_gin::mlx5::wire::DatagramSeg;
use rccl_rust_gin::provider::mlx5::platform::set_process_platform;
use std::ffi::c_void;

const N: usize = 3;
const CONTEXTS: u32 = 2;
const DCIS: u32 = 2;

#[test]
fn a_dc_context_set_over_the_mlx5_provider() {
    let p = in_process_plugin();
    // SAFETY: before any thread of this test program reads the environment
    // (in_process_plugin only set the harness's variables, on this thread).
    unsafe {
        std::env::set_var("RCCL_RUST_GIN_PROVIDER", "mlx5");
        std::env::set_var("RCCL_RUST_GIN_TRANSPORT", "dc");
        std::env::set_var("RCCL_RUST_GIN_DCIS", DCIS.to_string());
        // The stand-in executes no WQE: init's loopback self-test cannot
        // pass over it (tests/self_test.rs runs it on the emulated NIC).
        std::env::set_var("RCCL_RUST_GIN_SELF_TEST", "off");
    }
    let setup = Setup { dmabuf: false, ..Setup::roce() };
    let s = StandIn::new(setup.clone());
    set_process_platform(Some(s.platform()));

    let ex = Exchange::new(N);
    let seen = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|sc| {
        for rank in 0..N {
            let (ex, seen) = (ex.clone(), &seen);
            sc.spawn(move || {
                let (r, ctx) = p.init();
                assert_eq!(r, OK, "init");
                let mut handle = [0u8; NCCL_NET_HANDLE_MAXSIZE];
                let mut listen = std::ptr::null_mut();
                let mut coll = std::ptr::null_mut();
                // SAFETY: the vtable as RCCL calls it, with valid pointers.
                unsafe {
                    assert_eq!((p.v.listen.unwrap())(ctx, 0, handle.as_mut_ptr() as *mut c_void, &mut listen), OK);
                }
                let all = ex.allgather(rank, handle);
                let mut ptrs: Vec<*mut c_void> = all.iter().map(|h| h.as_ptr() as *mut c_void).collect();
                // SAFETY: as above.
                unsafe {
                    let res = (p.v.connect.unwrap())(ctx, ptrs.as_mut_ptr(), N as i32, rank as i32, listen, &mut coll);
                    assert_eq!(res, OK, "connect");
                    assert_eq!((p.v.close_listen.unwrap())(listen), OK);
                }
                let mut cfg = default_config();
                cfg.n_contexts = CONTEXTS as i32;
                let (res, gctx, dh) = p.create_context(coll, &mut cfg);
                assert_eq!(res, OK, "createContext on DC over mlx5");
                // SAFETY: the device handle and what it points at are host
                // memory here (the stand-in's GPU allocates host memory).
                unsafe {
                    let h = &*((*dh).handle as *const rust_gin_handle);
                    let mut tables = Vec::new();
                    for c in 0..CONTEXTS {
                        let cx = &*(h.contexts as *const rust_gin_context).add(c as usize);
                        assert_eq!(cx.n_dci, DCIS, "context {c}'s DCIs");
                        for i in 0..DCIS {
                            let d = &*(cx.dcis as *const rust_gin_mlx5_sq).add(i as usize);
                            assert_eq!((d.wqe_shift, d.dc_targets), (1, cx.peers), "DCI {i} of context {c}");
                        }
                        let row: Vec<[u8; 48]> =
                            (0..N).map(|q| (*(cx.peers as *const rust_gin_dc_peer).add(q)).av).collect();
                        tables.push(row);
                    }
                    seen.lock().unwrap().push((rank, tables));
                }
                ex.barrier();
                assert_eq!(p.call_ptr(p.v.destroy_context, gctx), OK);
                ex.barrier();
                assert_eq!(p.call_ptr(p.v.close_coll, coll), OK);
                assert_eq!(p.call_ptr(p.v.finalize, ctx), OK);
            });
        }
    });
    set_process_platform(None);

    // Everything made was destroyed, once each. (The order is checked per
    // NIC by tests/mlx5_standin.rs: here three ranks create and destroy
    // concurrently on one stand-in, so its newest-first rule sees the other
    // ranks' objects.)
    assert!(s.live().is_empty(), "leaked {:?}", s.live());
    let bad: Vec<String> = s.faults().into_iter().filter(|f| !f.contains("while newer objects live")).collect();
    assert!(bad.is_empty(), "teardown faults {bad:?}");

    // Per rank one DCT (with its CQ and RMP); per rank and context DCIS DCIs,
    // each through RST2INIT, INIT2RTR, RTR2RTS (the firmware model refused
    // nothing: no faults).
    let dcts = s.calls("mlx5dv_devx_obj_create(CREATE_DCT)");
    assert_eq!(dcts.len(), N);
    assert_eq!(s.calls("mlx5dv_devx_obj_create(CREATE_RMP)").len(), N);
    let dcis = (N as u32 * CONTEXTS * DCIS) as usize;
    assert_eq!(s.calls("mlx5dv_devx_obj_create(CREATE_QP DCI)").len(), dcis);
    assert!(s.calls("mlx5dv_devx_obj_create(CREATE_QP)").is_empty(), "no RC QP on DC");
    for t in ["RST2INIT", "INIT2RTR", "RTR2RTS"] {
        assert_eq!(s.calls(&format!("mlx5dv_devx_obj_modify({t})")).len(), dcis, "{t}");
    }
    assert_eq!(s.calls("mlx5dv_devx_general_cmd(QUERY_HCA_CAP)").len(), N, "once per opened NIC");
    // One address handle (the MAC) per rank and peer address, not one per
    // context and peer: every rank here is the stand-in's one port, so one
    // per rank (CONTEXTS * N per rank without the NIC's cache).
    assert_eq!(s.calls("ibv_create_ah").len(), N, "AVs are kept per peer address");

    // Every rank's table: for each rank q, the stand-in port's AV (its one
    // GID, the MAC the AH resolved) with one of the DCT numbers created and
    // the EXTENDED_UD_AV bit; different ranks, different DCTs and keys; the
    // same row in both contexts (one rail).
    let dctns: Vec<u64> = s.nums_of("dct").into_iter().map(u64::from).collect();
    let keys: Vec<u64> = dcts.iter().map(|c| bits(&c.input, 0x80 + 0x100, 64)).collect();
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), N);
    let first = &seen[0].1[0];
    for (rank, tables) in &seen {
        assert_eq!(tables[0], tables[1], "rank {rank}: both contexts reach the same targets");
        assert_eq!(&tables[0], first, "rank {rank}: every rank sees the same targets");
    }
    let mut pairs: Vec<(u64, u64)> = first
        .iter()
        .map(|av| {
            let a = DatagramSeg::parse(av);
            assert!(a.ext, "EXTENDED_UD_AV");
            assert_eq!(a.rgid, setup.gids[1].0, "the stand-in port's RoCE v2 GID");
            assert_eq!(a.rmac, setup.rmac, "the MAC the AH resolved");
            assert_eq!(a.grh_gid_fl >> 20, 1, "our GID index");
            (u64::from(a.dqp_dct), a.dc_key)
        })
        .collect();
    let mut want: Vec<(u64, u64)> = dctns.iter().copied().zip(keys.iter().copied()).collect();
    pairs.sort();
    want.sort();
    assert_eq!(pairs, want, "each rank's (DCT number, DC key) exactly once");
}
