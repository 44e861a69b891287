//! The `herald` binary: parse, dispatch, exit with a documented code (see `herald::exit_code`).

/// glibc's allocator spent a third of herald's CPU on the watch → journal → sink path (large JSON
/// trees built and dropped per event, sled's node copies); mimalloc more than halves that. See
/// docs/operations.md, "Throughput".
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's option for how long freed memory stays committed before it goes back to the kernel.
const PURGE_DELAY_ENV: &str = "MIMALLOC_PURGE_DELAY";

/// 100 ms instead of mimalloc 2's 10: sled takes a fresh 512 KiB io buffer every time its log
/// segment fills (every ~100 events in a catch-up) and frees the last one through its epoch
/// collector; 10 ms after that free the memory was gone to the kernel, so the append writing the
/// next buffer faulted its 128 pages in again. Whether it had been purged depended on timing, so
/// one build's catch-up took 20,695–79,382 page faults per 60,000 changes, its CPU per event
/// following them; at 100 ms every run took under 19,000 (docs/operations.md, "sled's two modes
/// (round 7)"). The cost: 10–20 MiB more idle RSS at 100,000 objects, still under the target.
const PURGE_DELAY_MS: &str = "100";

/// mimalloc reads its options from the environment when the process loads, before `main`, and
/// setting one from Rust needs `unsafe`; so a herald started without the option runs itself
/// again with it (same pid, arguments and everything else; `exec` only returns on failure, and
/// then this process goes on with mimalloc's default). An operator's own value is kept.
fn with_allocator_options() {
    use std::os::unix::process::CommandExt;
    if std::env::var_os(PURGE_DELAY_ENV).is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let mut again = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        again.arg0(arg0);
    }
    let _failed = again.args(args).env(PURGE_DELAY_ENV, PURGE_DELAY_MS).exec();
}

fn main() -> std::process::ExitCode {
    with_allocator_options();
    // mimalloc asks for transparent huge pages on its arenas, so every 2 MiB region it touches
    // becomes resident whole: 60–70 MiB of herald's RSS at 100,000 objects went to pages it barely
    // used (docs/operations.md, "Memory at 100,000 objects"). Turned off for the process before
    // anything sizeable is allocated, as `MIMALLOC_ALLOW_THP=0` would; the catch-up's CPU did not
    // notice. A kernel without the call leaves the default: nothing to report.
    let _ = rustix::thread::disable_transparent_huge_pages(true);
    herald::cli::main()
}
