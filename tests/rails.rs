//! Several NICs per GPU (rails; docs/architecture.md, "Rails"): a 2-rank
//! world with 2 emulated NICs per rank driven through the GIN vtable, whose
//! contexts land on different NICs (each NIC's counters show exactly its
//! contexts' traffic) and whose data and signals arrive; the order in which
//! NICs become rails; a NIC that fails to open is named with its rail; each
//! rail keeps its own keys.

#[path = "support/gin_flow.rs"]
mod gin_flow;
#[path = "support/mlx5_standin.rs"]
mod mlx5_standin;
#[path = "support/rccl_host.rs"]
mod rccl_host;

use gin_flow::*;
use rccl_host::*;
use rccl_rust_gin::abi::*;
use rccl_rust_gin::config::{Config, ProviderKind};
use rccl_rust_gin::device as dev;
use rccl_rust_gin::ffi::nccl::*;
use rccl_rust_gin::gin::comm::{Instance, ListenComm};
use rccl_rust_gin::gpu::{Allocator, HostMemory, Object};
use rccl_rust_gin::provider::{rail_order, Access, Nic, Provider};
use rccl_rust_gin::session::rails::RailSet;
use std::ffi::c_void;
use std::sync::{Arc, Once};

const RAILS: usize = 2;
const CONTEXTS: u32 = 4;

/// The harness environment plus RCCL_RUST_GIN_RAILS=2, before any thread of
/// this test binary reads the environment (every test calls this first).
fn plugin_with_rails() -> &'static Plugin {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the first thing every test of this binary does, under a
        // Once, before any of them reads the environment.
        unsafe { std::env::set_var("RCCL_RUST_GIN_RAILS", RAILS.to_string()) };
    });
    in_process_plugin()
}

/// init, devices (one emulated NIC per rail), listen on device 0.
fn open(p: &Plugin, rank: i32, nranks: i32) -> Rank {
    let (r, ctx) = p.init();
    assert_eq!(r, OK, "init");
    let mut ndev = 0;
    let mut handle = [0u8; NCCL_NET_HANDLE_MAXSIZE];
    let mut listen = std::ptr::null_mut();
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!((p.v.devices.unwrap())(&mut ndev), OK);
        assert_eq!(ndev as usize, RAILS, "the emulated provider offers one NIC per rail");
        assert_eq!((p.v.listen.unwrap())(ctx, 0, handle.as_mut_ptr() as *mut c_void, &mut listen), OK);
    }
    Rank { rank, nranks, ctx, listen, coll: std::ptr::null_mut(), handle }
}

fn rail_snapshot(coll: *mut c_void) -> Vec<(String, rccl_rust_gin::nic::CounterSnapshot)> {
    rccl_rust_gin::gin::vtable::rail_counters(coll)
        .expect("rail counters")
        .into_iter()
        .map(|(name, c)| (name, c.expect("the emulated NIC counts")))
        .collect()
}

/// One rank: 4 contexts over 2 rails; from every context a put with a
/// signal to every rank, a VA signal and (context 1, rail 1) a get.
fn rank_body(p: &Plugin, r: &Rank, sync: &dyn Fn()) {
    let n = r.nranks as usize;
    let me = r.rank as usize;
    let mut cfg = default_config();
    cfg.n_contexts = CONTEXTS as i32;
    let (res, gctx, dh) = p.create_context(r.coll, &mut cfg);
    assert_eq!(res, OK, "createContext");
    // SAFETY: createContext returned a device handle it owns until destroyContext.
    let h = unsafe { (*dh).handle } as *const c_void;
    for c in 0..CONTEXTS {
        let family = family_asked().unwrap_or(RUST_GIN_FAMILY_MLX5);
        assert_eq!(context_family(h, c), family, "context {c}: NIC family (RCCL_RUST_GIN_EMU_FAMILY)");
    }
    let slot = 1024usize;
    let src = register(p, r.coll, slot);
    let dst = register(p, r.coll, CONTEXTS as usize * n * slot);
    let sig = register(p, r.coll, CONTEXTS as usize * n * 8);
    let got = register(p, r.coll, slot);
    src.buf.write(0, &(0..slot).map(|i| pattern(me, i)).collect::<Vec<u8>>());
    let rails = rail_snapshot(r.coll);
    assert_eq!(rails.len(), RAILS, "rails of the comm");
    assert_eq!(rails[0].0, "rail 0 (NIC rust-gin-emu0)");
    assert_eq!(rails[1].0, "rail 1 (NIC rust-gin-emu1)");
    sync();
    let before = rail_snapshot(r.coll);
    // SAFETY (device calls): the handle and windows are live; the host build
    // of the device library takes them as a kernel would.
    unsafe {
        for c in 0..CONTEXTS {
            for peer in 0..n as u32 {
                let off = ((c as usize * n + me) * slot) as u64;
                let s = dev::rust_gin_put(
                    h, c, peer, dst.gh, off, src.gh, 0, slot as u64,
                    signal_indexed(0, RUST_GIN_SIGNAL_OP_INC, 0), 0, 0, 0,
                );
                assert_eq!(s, 0, "put on context {c} to {peer}");
                let va = signal_va(&sig, ((c as usize * n + me) * 8) as u64);
                assert_eq!(dev::rust_gin_signal_peer(h, c, peer, va, 0), 0, "VA signal on context {c} to {peer}");
            }
        }
        for c in 0..CONTEXTS {
            assert_eq!(dev::rust_gin_signal_wait(h, c, 0, n as u64, std::ptr::null(), 0), 0, "signals of context {c}");
            assert_eq!(dev::rust_gin_signal_read(h, c, 0), n as u64, "one signal per rank on context {c}");
            assert_eq!(dev::rust_gin_flush(h, c, 0, 1, std::ptr::null(), 0), 0, "flush context {c}");
        }
    }
    // The signal of each put came after its data, on the same queue.
    for c in 0..CONTEXTS as usize {
        for s in 0..n {
            let mut b = vec![0u8; slot];
            dst.buf.read((c * n + s) * slot, &mut b);
            assert!(b.iter().enumerate().all(|(i, x)| *x == pattern(s, i)), "rank {me}: context {c} data from {s}");
        }
    }
    let t = std::time::Instant::now();
    for i in 0..CONTEXTS as usize * n {
        while sig.buf.atomic_u64(i * 8).load(std::sync::atomic::Ordering::Acquire) != 1 {
            assert!(t.elapsed().as_secs() < 20, "rank {me}: VA signal {i} never came");
            std::thread::yield_now();
        }
    }
    let after = rail_snapshot(r.coll);
    // Rail k carries the contexts c with c mod 2 = k: per context, a WRITE
    // and two atomics (indexed and VA signal) to each of n ranks.
    let per_rail = (CONTEXTS as usize / RAILS * n) as u64;
    // Each queue's flush finds its newest WQE (the VA signal) unsignalled and
    // posts a signalled flush WQE: a NOP on mlx5, a 1-byte WRITE to the
    // peer's landing byte on bnxt_re and ionic (no NOP there).
    let flush_writes = if family_asked().is_some() { per_rail } else { 0 };
    for k in 0..RAILS {
        let d = after[k].1.since(&before[k].1);
        let writes = per_rail + flush_writes;
        assert_eq!(d.writes, writes, "rank {me}, {}: WRITEs of its contexts only ({d:?})", after[k].0);
        assert_eq!(d.atomics, 2 * per_rail, "rank {me}, {}: signals of its contexts only", after[k].0);
        assert!(d.doorbells > 0, "rank {me}, {}: rung", after[k].0);
    }
    // SAFETY: as above. A get on context 1 (rail 1): its flush must DUMP
    // through rail 1's sink key (READ data is held back 30 s otherwise).
    unsafe {
        let peer = ((me + 1) % n) as u32;
        assert_eq!(dev::rust_gin_get(h, 1, peer, src.gh, 0, got.gh, 0, slot as u64, 0), 0, "get on rail 1");
        assert_eq!(dev::rust_gin_flush(h, 1, 0, 1, std::ptr::null(), 0), 0, "flush after the get");
        let mut g = vec![0u8; slot];
        got.buf.read(0, &mut g);
        assert!(g.iter().enumerate().all(|(i, b)| *b == pattern(peer as usize, i)), "rank {me}: get from {peer}");
    }
    teardown(p, r, gctx, &[&src, &dst, &sig, &got], sync);
}

#[test]
fn two_ranks_two_rails_contexts_on_different_nics_data_and_signals_arrive() {
    let p = plugin_with_rails();
    let n = 2;
    Exchange::as_threads(n, |rank, ex| {
        let mut r = open(p, rank as i32, n as i32);
        let all = ex.allgather(rank, r.handle);
        assert_eq!(p.connect(&mut r, &all), OK, "connect");
        rank_body(p, &r, &|| ex.barrier());
    });
}

/// The same world on emulated bnxt_re and ionic NICs (two of them per rank),
/// with atomic signals only: the test sends VA signals, which write mode
/// refuses.
#[test]
fn the_same_world_on_bnxt_re_and_ionic_rails() {
    rerun_on_families_in_modes(&["atomic"], &["two_ranks_two_rails_contexts_on_different_nics_data_and_signals_arrive"]);
}

#[test]
fn rails_are_the_listen_nic_then_the_closest_to_the_gpu() {
    let gpu = "/sys/devices/pci0000:c0/0000:c0:01.1/0000:c1:00.0/0000:c2:00.0/0000:c3:00.0";
    let nics: Vec<String> = [
        "/sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0",             // another root complex
        "/sys/devices/pci0000:c0/0000:c0:01.1/0000:c1:00.0/0000:c2:01.0/0000:c5:00.0", // the GPU's switch
        "/sys/devices/pci0000:c0/0000:c0:03.1/0000:c9:00.0",             // the GPU's root complex
        "",                                                              // unknown
        "/sys/devices/pci0000:c0/0000:c0:01.1/0000:c1:00.0/0000:c2:02.0/0000:c6:00.0", // the GPU's switch
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(rail_order(0, Some(gpu), &nics), [0, 1, 4, 2, 3], "listen's NIC, then by distance, ties by index");
    assert_eq!(rail_order(2, Some(gpu), &nics), [2, 1, 4, 0, 3], "the NIC RCCL names stays rail 0");
    assert_eq!(rail_order(3, None, &nics), [3, 0, 1, 2, 4], "no GPU path: index order after rail 0");
}

/// The mlx5 provider (over the stand-in platform) opens the listen NIC and
/// the next one; when the second fails to open, the error names it and its
/// rail.
#[test]
fn a_nic_that_fails_to_open_is_named_with_its_rail() {
    use mlx5_standin::{Setup, StandIn};
    use rccl_rust_gin::provider::mlx5::Mlx5Provider;
    let _ = plugin_with_rails();
    let setup = || Setup { devices: vec!["mlx5_0".into(), "mlx5_1".into()], ..Setup::roce() };
    let config = Config { socket_ifname: Some("lo".into()), rails: 2, ..Config::default() };
    let listen = |s: &StandIn| {
        let provider: Arc<dyn Provider> = Arc::new(Mlx5Provider::probe_on(s.platform(), &config).expect("probe"));
        ListenComm::new(Arc::new(Instance::new(config.clone(), provider, 7)), 0, 2)
    };
    let ok = StandIn::new(setup());
    let l = listen(&ok).expect("two rails open");
    assert_eq!(l.rails.iter().map(|n| n.info().name).collect::<Vec<_>>(), ["mlx5_0", "mlx5_1"]);
    assert_eq!(l.nic.info().name, "mlx5_0+mlx5_1");
    drop(l);
    let step = ok
        .log()
        .into_iter()
        .find(|c| c.name == "mlx5dv_open_device" && c.detail == "mlx5_1")
        .and_then(|c| c.step)
        .expect("rail 1 was opened with DevX");
    let failing = StandIn::new(setup()).fail_at(step);
    let e = listen(&failing).err().expect("rail 1 fails to open");
    for word in ["rail 1", "mlx5_1", "failed to open"] {
        assert!(e.message().contains(word), "the error names {word:?}: {e}");
    }
}

/// Each rail's NIC hands out its own keys (the emulated NICs do, as two
/// ConnectX NICs do): a registration on the rail set keeps every rail's
/// pair, and the window a kernel reads carries them per rail (device ABI 2);
/// the world test above then puts, gets and signals on rail 1 with rail 1's
/// keys, which rail 0's keys would fail with a remote access error.
#[test]
fn each_rail_keeps_its_own_keys() {
    let _ = plugin_with_rails();
    let config = Config { provider: ProviderKind::Emu, rails: 2, ..Config::default() };
    let provider = rccl_rust_gin::provider::select(&config).expect("emu");
    let nics: Vec<Arc<dyn Nic>> = (0..2).map(|d| provider.open(d).expect("open")).collect();
    let buf = HostMemory.alloc(8192, 4096, Object::WindowData).unwrap();
    let set = RailSet::nic(&nics);
    // SAFETY: `buf` outlives the region (dropped at the end of the test, after it).
    let r = unsafe { set.reg_mr(buf.dev_addr(), 4096, Access::all()) }.expect("registered on both rails");
    let keys = r.rail_keys();
    assert_eq!(keys.len(), 2, "a key pair per rail");
    assert_ne!(keys[0], keys[1], "two NICs, two key pairs");
    assert_eq!((r.lkey(), r.rkey()), keys[0], "rail 0's pair stands for the region");
    drop(r);
}
