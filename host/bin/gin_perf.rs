//! gin-perf: the put/signal microbenchmark (issue: comparing against proxy GIN).
//! Until the benchmark lands it builds everything and prints where the
//! device artefacts are.

fn main() {
    let dir = option_env!("RUST_GIN_DEVICE_DIR").unwrap_or("(device artefacts not built)");
    println!("rust-gin device artefacts: {dir}");
    println!("GPU targets: {}", env!("RUST_GIN_GPU_TARGETS"));
}
