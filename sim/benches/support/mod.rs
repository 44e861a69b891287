//! Helpers every benchmark shares: process CPU time and a bare watch line reader (the ceiling).
//! herald's benchmarks (the top-level `benches/`) include this file too, so it uses nothing of the herald crate.

use futures::StreamExt;

/// The allocator the `herald` binary ships with (its src/main.rs), so figures match the binary, which
/// serves `herald sim` too.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// User + system CPU time of this process, from /proc: clock ticks (10 ms), plenty for runs of seconds.
pub fn cpu_seconds() -> f64 {
    process_cpu_seconds(std::process::id())
}

/// User + system CPU-seconds of process `pid` (a broker the bench started), from /proc.
pub fn process_cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15 overall.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// Reads a watch as bare lines until `want` arrived; the fastest a client can take them.
// Not every benchmark reads a watch directly.
#[allow(dead_code)]
pub async fn raw_reader(url: String, want: u64) -> u64 {
    // reqwest's rustls has no bundled provider: install ring, herald's one, before any client.
    herald_sim::install_crypto_provider();
    let resp = reqwest::get(url).await.expect("watch starts");
    let mut body = resp.bytes_stream();
    let mut seen = 0;
    while let Some(chunk) = body.next().await {
        seen += chunk
            .expect("chunk")
            .iter()
            .filter(|b| **b == b'\n')
            .count() as u64;
        if seen >= want {
            break;
        }
    }
    seen
}
