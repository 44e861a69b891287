//! herald's process settings that keep its memory down (docs/operations.md, "Memory at 100,000
//! objects").

use crate::support::{
    Herald, WIDGETS_RESOURCE, admin_addr, admin_get_retrying, herald_config, sim,
};

/// mimalloc asks for transparent huge pages on its arenas; herald turns them off for its process
/// at start, which the kernel reports in `/proc/<pid>/status` (`THP_enabled: 0`).
#[tokio::test]
async fn a_running_herald_has_transparent_huge_pages_off() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(&sim, dir.path(), WIDGETS_RESOURCE);
    let addr = admin_addr(&config);
    let herald = Herald::start(dir.path(), &config);
    assert_eq!(
        admin_get_retrying(&addr, "/healthz", 20).await.0,
        200,
        "herald runs\n{}",
        herald.stderr_text()
    );
    let pid = herald.child.as_ref().unwrap().id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let thp = status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .unwrap_or_else(|| panic!("this kernel reports no THP_enabled line:\n{status}"));
    assert_eq!(thp.trim(), "0", "{status}");
}
