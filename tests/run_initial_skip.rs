//! `initialState: skip` across a crash during the first list: herald killed (SIGKILL) after it
//! recorded part of its first list, restarted, must not report the objects that list had not
//! reached yet (they are part of the initial state), only the changes made after it is synced.
//!
//! Where herald is in its first list is read off the API requests it makes, through a small
//! proxy in front of the simulator: a relist asks for page N + 2 only after it appended page N
//! (ADR 0015), so holding the 4th list request keeps herald waiting with pages 1 and 2 (600
//! objects) in its journal. An event of another resource, delivered after that, proves they are
//! durable (one group commit flushes every earlier append).
//!
//! And the case that must keep reporting: an index without a checkpoint that is no first start
//! (a salvage dropped the checkpoint of a resource whose skipping first start had completed).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use herald_sim::{ResourceRef, Simulator};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::support::{
    Herald, Raw, admin_addr, admin_get, crd, herald_config, id_of, ids, sim, widgets_crd,
};

/// Widgets before herald's first start: pages of 100, 500, 500 and 500.
const WIDGETS: usize = 1_600;
/// The list request held: the 4th page's, asked for once the 2nd page was appended.
const HOLD_AT: usize = 4;

/// A TCP proxy to the simulator that counts herald's widget LIST requests and holds the
/// `hold_at`-th one unanswered (its connection stays open, nothing more of it is forwarded).
struct Proxy {
    addr: SocketAddr,
    hold_at: Arc<AtomicUsize>,
    held: Arc<Notify>,
}

/// Whether an HTTP request line asks for a page of the widget list (not a watch).
fn is_widget_list(line: &[u8]) -> bool {
    let line = String::from_utf8_lossy(line);
    line.starts_with("GET ")
        && line.contains("/widgets?")
        && line.contains("limit=")
        && !line.contains("watch=")
}

impl Proxy {
    async fn start(upstream: SocketAddr, hold_at: usize) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hold_at = Arc::new(AtomicUsize::new(hold_at));
        let held = Arc::new(Notify::new());
        let lists = Arc::new(AtomicUsize::new(0));
        {
            let (hold_at, held) = (hold_at.clone(), held.clone());
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        continue;
                    };
                    let (hold_at, held, lists) = (hold_at.clone(), held.clone(), lists.clone());
                    tokio::spawn(async move {
                        let (mut from_client, mut to_client) = client.into_split();
                        let (mut from_server, mut to_server) = server.into_split();
                        tokio::spawn(async move {
                            let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
                        });
                        let mut line = Vec::new();
                        let mut buf = vec![0u8; 64 * 1024];
                        loop {
                            let n = match from_client.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            let mut hold = false;
                            for &b in &buf[..n] {
                                line.push(b);
                                if b == b'\n' {
                                    if is_widget_list(&line)
                                        && lists.fetch_add(1, Ordering::SeqCst) + 1
                                            == hold_at.load(Ordering::SeqCst)
                                    {
                                        hold = true;
                                    }
                                    line.clear();
                                }
                            }
                            if hold {
                                held.notify_one();
                                // Unanswered until herald is killed.
                                std::future::pending::<()>().await;
                            }
                            if to_server.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    });
                }
            });
        }
        Self {
            addr,
            hold_at,
            held,
        }
    }

    /// From now on every request passes.
    fn release(&self) {
        self.hold_at.store(usize::MAX, Ordering::SeqCst);
    }
}

fn widgets() -> ResourceRef {
    ResourceRef::namespaced("example.com", "v1", "widgets", "default")
}

fn gadgets() -> ResourceRef {
    ResourceRef::namespaced("example.com", "v1", "gadgets", "default")
}

fn object(kind: &str, name: &str) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": kind,
           "metadata": {"name": name, "namespace": "default"}, "spec": {"v": 1}})
}

/// A kubeconfig like the simulator's that points at `proxy` instead.
fn kubeconfig_via(sim: &Simulator, proxy: SocketAddr, dir: &std::path::Path) -> String {
    let text = std::fs::read_to_string(sim.kubeconfig_path()).unwrap();
    let direct = sim.url();
    assert!(text.contains(&direct), "{text}");
    let path = dir.join("proxied.kubeconfig");
    std::fs::write(&path, text.replace(&direct, &format!("http://{proxy}"))).unwrap();
    path.to_str().unwrap().to_owned()
}

/// `herald journal verify --json` of a stopped herald's journal.
async fn verify(dir: &std::path::Path) -> Value {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["journal", "verify", "--json", "--journal"])
        .arg(dir.join("journal"))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn a_first_list_killed_half_way_with_initial_state_skip_reports_only_later_changes() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    raw.install_crd(&crd(
        "example.com",
        "gadgets",
        "Gadget",
        "Namespaced",
        &[("v1", true, true)],
    ))
    .await;
    let (w, g) = (widgets(), gadgets());
    let names: Vec<String> = (0..WIDGETS).map(|i| format!("w-{i:05}")).collect();
    sim.create_many(&w, names.iter().map(|n| object("Widget", n)))
        .unwrap();
    sim.create(&g, object("Gadget", "g0")).unwrap();

    let proxy = Proxy::start(sim.addr(), HOLD_AT).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        "  - group: example.com\n    kind: Widget\n    initialState: skip\n  - group: example.com\n    kind: Gadget",
    )
    .replace(
        sim.kubeconfig_path().to_str().unwrap(),
        &kubeconfig_via(&sim, proxy.addr, dir.path()),
    );
    let addr = admin_addr(&config);
    let mut herald = Herald::start(dir.path(), &config);
    // The gadgets' first sync reports g0 (`initialState: emit`).
    herald.wait_for(1).await;
    tokio::time::timeout(std::time::Duration::from_secs(60), proxy.held.notified())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "herald never asked for list page {HOLD_AT}\n{}",
                herald.stderr_text()
            )
        });
    // Appended after the widgets' first two pages, and delivered only once durable: so are they.
    let g1 = sim.create(&g, object("Gadget", "g1")).unwrap();
    let before = herald.wait_for(2).await;
    herald.kill().await;
    assert_eq!(ids(&before)[1], id_of(&g1, "created"), "{before:#?}");

    // The crash left the widgets' first sync half done: no checkpoint, part of the list indexed.
    let report = verify(dir.path()).await;
    let checkpoints = report["report"]["checkpoints"].as_object().unwrap();
    assert!(
        !checkpoints.keys().any(|s| s.contains("widgets")),
        "{report}"
    );
    assert_eq!(
        report["report"]["skippingFirstSyncs"],
        json!(["example.com/widgets/*"]),
        "{report}"
    );
    let indexed = report["report"]["indexEntries"].as_u64().unwrap();
    assert!(
        (2 + 600..2 + WIDGETS as u64).contains(&indexed),
        "{indexed} index entries: {report}"
    );

    // While herald is down: a change to a widget recorded before the crash and to one not reached.
    // Both belong to the initial state of a first sync that had not completed: not reported.
    sim.merge_patch(&w, "w-00001", &json!({"spec": {"v": 2}}))
        .unwrap();
    sim.merge_patch(&w, "w-01500", &json!({"spec": {"v": 2}}))
        .unwrap();

    proxy.release();
    herald.restart();
    herald
        .until(60, "herald ready after the restart", async || {
            admin_get(&addr, "/readyz").await.0 == 200
        })
        .await;

    // Real changes after the first sync completed: each is reported once, in order.
    let updated_early = sim
        .merge_patch(&w, "w-00002", &json!({"spec": {"v": 3}}))
        .unwrap();
    let updated_late = sim
        .merge_patch(&w, "w-01200", &json!({"spec": {"v": 3}}))
        .unwrap();
    let gone = raw
        .get("/apis/example.com/v1/namespaces/default/widgets/w-00050")
        .await
        .body;
    sim.delete(&w, "w-00050").unwrap();
    let created = sim.create(&w, object("Widget", "w-new")).unwrap();

    // The kill came right after the second event reached the file, possibly before its
    // acknowledgement was durable: at least once, what was delivered before may come again after
    // the restart (with the same id). Those are not reports of the initial state; every other event is.
    let before_ids: Vec<String> = ids(&before);
    let fresh = |all: &[Value]| -> Vec<String> {
        ids(&all[before.len()..])
            .into_iter()
            .filter(|id| !before_ids.contains(id))
            .collect()
    };
    let mut want = before.len() + 4;
    let all = loop {
        let all = herald.wait_for(want).await;
        if fresh(&all).len() >= 4 {
            break all;
        }
        want = all.len() + 1;
    };
    let after = herald.settle(all.len()).await;
    let got = fresh(&after);
    assert_eq!(
        got[..2],
        [
            id_of(&updated_early, "updated"),
            id_of(&updated_late, "updated")
        ],
        "{got:#?}"
    );
    let uid = gone["metadata"]["uid"].as_str().unwrap();
    assert!(
        got[2].starts_with(uid) && got[2].ends_with(":deleted"),
        "{got:#?}"
    );
    assert_eq!(got[3], id_of(&created, "created"), "{got:#?}");
    assert_eq!(got.len(), 4, "{got:#?}");
}

/// A resource with `initialState: skip` whose first start completed, and whose checkpoint a salvage
/// then dropped (the store lost committed events): its index has no checkpoint and no first-sync
/// marker, which is no first start. The next start reports the differences as `resync` events,
/// as before schema 4: every object the index held unconfirmed, sent whole as `created`.
#[tokio::test]
async fn a_skipping_resource_whose_checkpoint_a_salvage_dropped_reports_the_differences() {
    let sim = sim().await;
    Raw::new(&sim).install_crd(&widgets_crd()).await;
    let w = widgets();
    for n in ["a", "b", "c"] {
        sim.create(&w, object("Widget", n)).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        "  - group: example.com\n    kind: Widget\n    initialState: skip",
    );
    let addr = admin_addr(&config);
    let mut herald = Herald::start(dir.path(), &config);
    herald
        .until(30, "herald ready", async || {
            admin_get(&addr, "/readyz").await.0 == 200
        })
        .await;
    let d = sim.create(&w, object("Widget", "d")).unwrap();
    let before = herald.wait_for(1).await;
    assert_eq!(ids(&before), [id_of(&d, "created")]);
    assert_eq!(herald.terminate().await, Some(0));

    // The store loses its one event (as sled's recovery rolls back after a truncation).
    let journal = dir.path().join("journal");
    {
        let db = sled::Config::new().path(&journal).open().unwrap();
        let events: Vec<_> = db.scan_prefix(b"e/").keys().map(Result::unwrap).collect();
        assert_eq!(events.len(), 1);
        for k in events {
            db.remove(k).unwrap();
        }
        db.insert(b"meta/head", &0u64.to_be_bytes()[..]).unwrap();
        db.flush().unwrap();
    }
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["journal", "salvage", "--json", "--journal"])
        .arg(&journal)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let salvaged: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        salvaged["checkpointsDropped"],
        json!(["example.com/widgets/*"]),
        "{salvaged}"
    );
    let report = verify(dir.path()).await;
    assert_eq!(report["report"]["indexEntries"], 4, "{report}");
    assert_eq!(report["report"]["checkpoints"], json!({}), "{report}");
    let b = sim
        .merge_patch(&w, "b", &json!({"spec": {"v": 2}}))
        .unwrap();

    herald.restart();
    let all = herald.wait_for(before.len() + 4).await;
    let all = herald.settle(all.len()).await;
    let mut got = ids(&all[before.len()..]);
    got.sort_unstable();
    let raw = Raw::new(&sim);
    let path = |name: &str| format!("/apis/example.com/v1/namespaces/default/widgets/{name}");
    let (a, c) = (
        raw.get(&path("a")).await.body,
        raw.get(&path("c")).await.body,
    );
    let mut want = vec![
        id_of(&a, "created"),
        id_of(&b, "created"),
        id_of(&c, "created"),
        id_of(&d, "created"),
    ];
    want.sort_unstable();
    assert_eq!(got, want);
    assert!(
        all[before.len()..].iter().all(|e| e["resync"] == true),
        "{all:#?}"
    );
}
