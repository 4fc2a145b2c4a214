//! tests/gin_counters.rs (puts with counters, credited by whoever polls,
//! the NIC stepped only by ginProgress) on the DC transport: the same tests,
//! compiled here with RCCL_RUST_GIN_TRANSPORT=dc set before main.

extern "C" fn on_dc() {
    // SAFETY: runs before main, single-threaded.
    unsafe {
        std::env::set_var("RCCL_RUST_GIN_TRANSPORT", "dc");
        std::env::set_var("RCCL_RUST_GIN_DCIS", "1");
    }
}
#[used]
#[link_section = ".init_array"]
static ON_DC: extern "C" fn() = on_dc;

#[path = "gin_counters.rs"]
mod on_dc_transport;
