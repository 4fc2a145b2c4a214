//! The GIN operations on the DC transport (docs/architecture.md, "DC
//! transport"): the very world tests/gin_vtable.rs runs over RC (put,
//! putValue, indexed and VA signals, counters, get with flush_async and
//! wait, flush; support/gin_flow.rs), here with RCCL_RUST_GIN_TRANSPORT=dc
//! and two DC initiators per context, so that with three or more ranks
//! several peers share a DCI and every DCI serves several targets in turn.
//! `assert_transport` checks that every context really has its DCIs.

#[path = "support/gin_flow.rs"]
mod gin_flow;
#[path = "support/rccl_host.rs"]
mod rccl_host;

use gin_flow::*;
use rccl_host::*;

/// Before main, so before the plugin (or any thread) reads the environment:
/// this test binary runs on DC.
extern "C" fn on_dc() {
    // SAFETY: runs before main, single-threaded.
    unsafe {
        std::env::set_var("RCCL_RUST_GIN_TRANSPORT", "dc");
        std::env::set_var("RCCL_RUST_GIN_DCIS", "2");
    }
}
#[used]
#[link_section = ".init_array"]
static ON_DC: extern "C" fn() = on_dc;

fn run_threads(n: usize) {
    let p = plugin();
    Exchange::as_threads(n, |rank, ex| {
        let mut r = p.open_rank(rank as i32, n as i32);
        let all = ex.allgather(rank, r.handle);
        assert_eq!(p.connect(&mut r, &all), OK, "connect");
        run_connected(p, &r, &|| ex.barrier());
    });
}

#[test]
fn two_ranks_on_dc() {
    run_threads(2);
}

#[test]
fn three_ranks_on_dc_two_peers_share_a_dci() {
    run_threads(3);
}

#[test]
fn five_ranks_on_dc() {
    run_threads(5);
}

/// session::dc::peer_of_failed_wqe on an emulated DCI's ring: the WQE of
/// the error CQE's WQEBB index (any of its two WQEBBs, the 16-bit counter
/// wrapped past the ring) names the rank whose datagram segment it carries;
/// a WQE without an address (NOP) or with an address of no rank names none.
#[test]
fn the_failed_wqes_address_names_the_rank() {
    use rccl_rust_gin::config::Config;
    use rccl_rust_gin::mlx5::wire::DatagramSeg;
    use rccl_rust_gin::provider::emu::EmuProvider;
    use rccl_rust_gin::provider::Provider;
    use rccl_rust_gin::session::dc::peer_of_failed_wqe;

    let nic = EmuProvider::new(&Config::default()).unwrap().open(0).unwrap();
    let dci = nic.create_dci(6, 0, false).unwrap();
    let wqebbs = 1u32 << dci.mlx5_memory().expect("mlx5").log_wqe_cnt;
    assert_eq!(wqebbs, 128, "64 WQEs of two WQEBBs");
    let av = |p: u8| {
        let mut a = DatagramSeg { rgid: [p; 16], hop_limit: 64, ..Default::default() };
        a.rmac = [2, 0, 0, 0, 0, p];
        a.with_dc_addr(0x100 + u32::from(p), 0xfeed_0000 + u64::from(p)).encode()
    };
    let table: Vec<[u8; 48]> = (0..4u8).map(av).collect();
    // Rank 3's WQE at ticket 5 (WQEBBs 10 and 11), rank 1's at ticket 6.
    let sq = &dci.mlx5_memory().expect("mlx5").sq;
    sq.write(10 * 64 + 16, &table[3]);
    sq.write(12 * 64 + 16, &table[1]);
    for index in [10, 11, 10 + wqebbs, 10 + 512 * wqebbs] {
        assert_eq!(peer_of_failed_wqe(dci.as_ref(), index & 0xffff, &table), Some(3), "WQEBB index {index}");
    }
    assert_eq!(peer_of_failed_wqe(dci.as_ref(), 12, &table), Some(1));
    // Ticket 7: a NOP carries no datagram segment (no EXTENDED_UD_AV).
    assert_eq!(peer_of_failed_wqe(dci.as_ref(), 14, &table), None, "no address");
    // An address no rank has (a stale key).
    let mut stale = table[2];
    stale[7] ^= 1;
    sq.write(16 * 64 + 16, &stale);
    assert_eq!(peer_of_failed_wqe(dci.as_ref(), 16, &table), None, "no rank has that key");
}
