//! The `herald` binary: parse, dispatch, exit with a documented code (see `herald::exit_code`).

/// glibc's allocator spent a third of herald's CPU on the watch → journal → sink path (large JSON
/// trees built and dropped per event, sled's node copies); mimalloc more than halves that. See
/// docs/operations.md, "Throughput".
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // mimalloc asks for transparent huge pages on its arenas, so every 2 MiB region it touches
    // becomes resident whole: 60–70 MiB of herald's RSS at 100,000 objects went to pages it barely
    // used (docs/operations.md, "Memory at 100,000 objects"). Turned off for the process before
    // anything sizeable is allocated, as `MIMALLOC_ALLOW_THP=0` would; the catch-up's CPU did not
    // notice. A kernel without the call leaves the default: nothing to report. (mimalloc itself is
    // built without its huge-page requests, `no_thp` in Cargo.toml, which also covers what the
    // runtime allocated before this line, unless the kernel gives huge pages unasked: `always`.)
    let _ = rustix::thread::disable_transparent_huge_pages(true);
    herald::cli::main()
}
