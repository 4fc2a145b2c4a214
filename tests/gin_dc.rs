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
