//! The `herald` binary: parse, dispatch, exit with a documented code (see `herald::exit_code`).

/// glibc's allocator spent a third of herald's CPU on the watch → journal → sink path (large JSON
/// trees built and dropped per event, sled's node copies); mimalloc more than halves that. See
/// docs/operations.md, "Throughput".
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    herald::cli::main()
}
