//! Fault injection: failures on the next N requests, latency, stalled and slow watches, restarts —
//! from the Rust API and the `/_herald/` admin API.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use herald_sim::{FailRule, LatencyRule, SimConfig};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::support::{Raw, sim, sim_with, widget, widgets_crd};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

fn fail(prefix: &str, status: u16, count: u32) -> FailRule {
    FailRule {
        path_prefix: prefix.into(),
        method: None,
        watch: None,
        status,
        count,
        retry_after_seconds: Some(1),
        client: None,
    }
}

#[tokio::test]
async fn the_next_n_matching_requests_fail_with_the_real_bodies() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    let r = raw
        .send(reqwest::Method::POST, "/_herald/fail", "application/json",
              Some(json!({"pathPrefix": "/api/v1/namespaces", "status": 503, "count": 2, "retryAfterSeconds": 3}).to_string().into_bytes()))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    for _ in 0..2 {
        let r = raw.get("/api/v1/namespaces").await;
        assert_eq!(
            (r.status, r.body["reason"].as_str()),
            (503, Some("ServiceUnavailable"))
        );
        assert_eq!(r.headers["retry-after"], "3");
        assert_eq!(r.body["details"]["retryAfterSeconds"], 3);
    }
    assert_eq!(
        raw.get("/api/v1/namespaces").await.status,
        200,
        "the rule is spent"
    );
    assert_eq!(
        raw.get("/api/v1").await.status,
        200,
        "other paths were never affected"
    );

    sim.fail(fail("/api", 429, 1));
    let r = raw.get("/api/v1").await;
    assert_eq!(
        (r.status, r.body["reason"].as_str()),
        (429, Some("TooManyRequests"))
    );
    sim.fail(fail("/api", 504, 1));
    let r = raw.get("/api/v1").await;
    assert_eq!(r.status, 504);
    assert_eq!(
        r.body["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    sim.fail(fail("/api", 500, 1));
    assert_eq!(raw.get("/api/v1").await.body["reason"], "InternalError");
}

#[tokio::test]
async fn kube_client_retries_429_and_503_with_retry_after() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    raw.post(WIDGETS, &widget("a", json!({}), json!({}))).await;
    sim.fail(fail(WIDGETS, 429, 1));
    sim.fail(fail(WIDGETS, 503, 1));
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(sim.client().unwrap(), "default", &ar);
    let started = Instant::now();
    let got = api
        .get("a")
        .await
        .expect("kube-client's retry policy rides out both failures");
    assert_eq!(got.metadata.name.as_deref(), Some("a"));
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After was honoured"
    );
    let mut created = DynamicObject::new("b", &ar).data(json!({"spec": {}}));
    created.metadata.namespace = Some("default".into());
    api.create(&PostParams::default(), &created).await.unwrap();
}

#[tokio::test]
async fn method_and_watch_filters_narrow_a_rule() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    sim.fail(FailRule {
        method: Some("POST".into()),
        ..fail(WIDGETS, 500, 1)
    });
    assert_eq!(raw.get(WIDGETS).await.status, 200);
    assert_eq!(
        raw.post(WIDGETS, &widget("a", json!({}), json!({})))
            .await
            .status,
        500
    );
    sim.fail(FailRule {
        watch: Some(true),
        ..fail(WIDGETS, 503, 1)
    });
    assert_eq!(raw.get(WIDGETS).await.status, 200, "a list is not a watch");
    assert_eq!(raw.get(&format!("{WIDGETS}?watch=1")).await.status, 503);
}

#[tokio::test]
async fn latency_delays_matching_requests() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    sim.add_latency(LatencyRule {
        path_prefix: "/api/v1".into(),
        delay: Duration::from_millis(300),
        client: None,
    });
    let t = Instant::now();
    assert_eq!(raw.get("/api/v1/namespaces").await.status, 200);
    assert!(t.elapsed() >= Duration::from_millis(300));
    let t = Instant::now();
    raw.get("/version").await;
    assert!(
        t.elapsed() < Duration::from_millis(300),
        "other paths are not delayed"
    );
    let cleared = raw
        .send(reqwest::Method::DELETE, "/_herald/faults", "", None)
        .await;
    assert_eq!(cleared.status, 200);
    let t = Instant::now();
    raw.get("/api/v1/namespaces").await;
    assert!(t.elapsed() < Duration::from_millis(300));
}

#[tokio::test]
async fn stalled_watches_stay_open_and_send_nothing_until_resumed() {
    let sim = sim_with(SimConfig::default().bookmark_interval(Duration::from_millis(100))).await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let rv = sim.resource_version();
    let mut w = raw
        .watch(&format!("{WIDGETS}?watch=1&resourceVersion={rv}"))
        .await;
    assert_eq!(
        raw.send(reqwest::Method::POST, "/_herald/stall-watches", "", None)
            .await
            .status,
        200
    );
    raw.post(WIDGETS, &widget("a", json!({}), json!({}))).await;
    let waited = tokio::time::timeout(
        Duration::from_millis(600),
        w.next_line(Duration::from_secs(5)),
    )
    .await;
    assert!(waited.is_err(), "nothing arrives while stalled");
    assert_eq!(sim.open_watches(), 1, "the connection stays open");
    sim.resume_watches();
    let (t, o) = w.next_event().await.unwrap();
    assert_eq!(
        (t.as_str(), o["metadata"]["name"].as_str()),
        ("ADDED", Some("a"))
    );
}

#[tokio::test]
async fn garbled_watches_answer_one_line_that_is_not_json_until_mended() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    raw.post(WIDGETS, &widget("a", json!({}), json!({}))).await;
    assert_eq!(
        raw.send(reqwest::Method::POST, "/_herald/garble-watches", "", None)
            .await
            .status,
        200
    );
    assert_eq!(
        raw.get("/_herald/faults").await.body["watchesGarbled"],
        true
    );
    let mut w = raw.watch(&format!("{WIDGETS}?watch=1")).await;
    let line = w.next_line(Duration::from_secs(5)).await.unwrap();
    assert!(serde_json::from_str::<Value>(&line).is_err(), "{line}");
    assert_eq!(w.next_line(Duration::from_secs(5)).await, None);
    // Lists are served as usual.
    let list = raw.get(WIDGETS).await;
    assert_eq!(
        (
            list.status,
            list.body["items"][0]["metadata"]["name"].as_str()
        ),
        (200, Some("a"))
    );
    assert_eq!(
        raw.send(reqwest::Method::POST, "/_herald/mend-watches", "", None)
            .await
            .status,
        200
    );
    let mut w = raw.watch(&format!("{WIDGETS}?watch=1")).await;
    let (t, o) = w.next_event().await.unwrap();
    assert_eq!(
        (t.as_str(), o["metadata"]["name"].as_str()),
        ("ADDED", Some("a"))
    );
    sim.garble_watches();
    sim.clear_faults();
    assert_eq!(
        raw.get("/_herald/faults").await.body["watchesGarbled"],
        false
    );
}

#[tokio::test]
async fn a_watcher_that_stops_reading_is_dropped_once_its_buffer_fills() {
    let sim = sim_with(SimConfig::default().slow_reader_timeout(Duration::from_millis(300))).await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    // A raw connection that sends a watch request and then never reads.
    let mut conn = std::net::TcpStream::connect(sim.addr()).unwrap();
    conn.set_nodelay(true).unwrap();
    let rv = sim.resource_version();
    write!(
        conn,
        "GET {WIDGETS}?watch=1&resourceVersion={rv} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let started = Instant::now();
    while sim.open_watches() == 0 {
        assert!(started.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let padding = "x".repeat(8 * 1024);
    let mut written = 0;
    while sim.open_watches() > 0 {
        assert!(
            written < 20_000,
            "the watcher should have been dropped after {written} objects"
        );
        raw.post(
            WIDGETS,
            &widget(&format!("w{written}"), json!({}), json!({"pad": padding})),
        )
        .await;
        written += 1;
    }
    // The server closed it: reading now reaches the end after whatever was buffered. (Off the runtime:
    // a blocking read here would starve the simulator, which runs on this test's runtime.)
    let sink = tokio::task::spawn_blocking(move || {
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut sink = Vec::new();
        conn.read_to_end(&mut sink).map(|_| sink)
    })
    .await
    .unwrap()
    .expect("the server ends the response");
    assert!(
        sink.ends_with(b"0\r\n\r\n"),
        "a clean end of the chunked body"
    );
}

#[tokio::test]
async fn restart_keeping_state_ends_watches_and_keeps_objects_and_history() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    raw.post(WIDGETS, &widget("a", json!({}), json!({}))).await;
    let rv = sim.resource_version();
    let mut w = raw
        .watch(&format!("{WIDGETS}?watch=1&resourceVersion={rv}"))
        .await;
    sim.restart(true, false, Duration::from_millis(200)).await;
    assert!(
        w.next_line(Duration::from_secs(5)).await.is_none(),
        "open watches end"
    );
    assert_eq!(raw.get(&format!("{WIDGETS}/a")).await.status, 200);
    raw.post(WIDGETS, &widget("b", json!({}), json!({}))).await;
    let mut resumed = raw
        .watch(&format!("{WIDGETS}?watch=1&resourceVersion={rv}"))
        .await;
    let (t, o) = resumed.next_event().await.unwrap();
    assert_eq!(
        (t.as_str(), o["metadata"]["name"].as_str()),
        ("ADDED", Some("b")),
        "history survived"
    );
}

#[tokio::test]
async fn restart_losing_state_keeps_the_revision_moving_forward() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    raw.post(WIDGETS, &widget("a", json!({}), json!({}))).await;
    let before = sim.resource_version();
    let r = raw
        .send(
            reqwest::Method::POST,
            "/_herald/restart",
            "application/json",
            Some(br#"{"keepState":false,"downFor":"100ms"}"#.to_vec()),
        )
        .await;
    assert_eq!(r.status, 202);
    let started = Instant::now();
    loop {
        let ok = reqwest::get(format!("{}/api/v1/namespaces", raw.base)).await;
        if let Ok(resp) = ok
            && resp.status() == 200
            && sim.resource_version() > before
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "back up in time"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        raw.get("/apis/example.com/v1").await.status,
        404,
        "the CRD is gone"
    );
    let nss = raw.get("/api/v1/namespaces").await.body;
    assert_eq!(
        nss["items"].as_array().unwrap().len(),
        2,
        "default and kube-system are back"
    );
    assert!(
        sim.resource_version() > before,
        "the revision never goes backwards"
    );
    let mut w = raw
        .watch(&format!(
            "/api/v1/namespaces?watch=1&resourceVersion={before}"
        ))
        .await;
    let ev: Value =
        serde_json::from_str(&w.next_line(Duration::from_secs(5)).await.unwrap()).unwrap();
    assert_eq!(
        (ev["type"].as_str(), ev["object"]["code"].as_i64()),
        (Some("ERROR"), Some(410))
    );

    sim.restart(false, true, Duration::ZERO).await;
    assert_eq!(
        sim.resource_version(),
        2,
        "reset_revision starts the counter over"
    );
}

#[tokio::test]
async fn admin_state_and_bad_requests() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    sim.fail(fail("/x", 500, 3));
    let state = raw.get("/_herald/state").await.body;
    assert_eq!(state["resourceVersion"], sim.resource_version());
    assert_eq!(state["faults"]["fail"][0]["count"], 3);
    assert_eq!(state["openWatches"], 0);
    let bad = raw
        .send(
            reqwest::Method::POST,
            "/_herald/fail",
            "application/json",
            Some(br#"{"status":500}"#.to_vec()),
        )
        .await;
    assert_eq!(bad.status, 400);
    assert!(
        bad.body["message"].as_str().unwrap().contains("pathPrefix"),
        "{}",
        bad.body
    );
    assert_eq!(raw.get("/_herald/nope").await.status, 404);
    let compact = raw
        .send(reqwest::Method::POST, "/_herald/compact", "", None)
        .await;
    assert_eq!(compact.body["compacted"], sim.resource_version());
}

/// The test hook for non-conformant names: `create` refuses a name with a control character, as
/// the real server does; `create_with_any_name` stores it, and lists and watches serve it intact
/// (JSON-escaped), in the namespace it names even when that one breaks the rules too.
#[tokio::test]
async fn any_name_hook_stores_what_the_name_rules_refuse_and_serves_it_intact() {
    use herald_sim::ResourceRef;
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let mut watch = raw.watch(&format!("{WIDGETS}?watch=true")).await;
    let widgets = ResourceRef::namespaced("example.com", "v1", "widgets", "default");
    let odd = "a\nb\0c\u{7f}";
    let err = sim
        .create(&widgets, widget(odd, json!({}), json!({})))
        .unwrap_err();
    assert_eq!(err.code, 422, "{err:?}");
    let created = sim
        .create_with_any_name(&widgets, widget(odd, json!({}), json!({})))
        .unwrap();
    assert_eq!(created["metadata"]["name"], odd);
    let listed = raw.get(WIDGETS).await;
    assert_eq!(listed.body["items"][0]["metadata"]["name"], odd);
    let (kind, object) = watch.next_event().await.unwrap();
    assert_eq!(
        (kind.as_str(), object["metadata"]["name"].as_str()),
        ("ADDED", Some(odd))
    );

    let namespaces = ResourceRef::cluster("", "v1", "namespaces");
    sim.create_with_any_name(
        &namespaces,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "odd\tns"}}),
    )
    .unwrap();
    let in_odd = ResourceRef::namespaced("example.com", "v1", "widgets", "odd\tns");
    let mut w = widget("w\n1", json!({}), json!({}));
    w["metadata"]["namespace"] = json!("odd\tns");
    let w = sim.create_with_any_name(&in_odd, w).unwrap();
    assert_eq!(w["metadata"]["namespace"], "odd\tns");
}

#[tokio::test]
async fn a_client_selector_cuts_off_one_client_only() {
    let sim = sim().await;
    let client = |agent: &str| Raw {
        base: sim.url(),
        http: reqwest::Client::builder()
            .user_agent(agent)
            .build()
            .unwrap(),
    };
    let (a, b) = (
        client("herald/0.1.0 (herald-a)"),
        client("herald/0.1.0 (herald-b)"),
    );
    // Through the admin API, as a test of separate processes adds it.
    let added = Raw::new(&sim)
        .post(
            "/_herald/fail",
            &json!({"pathPrefix": "/", "status": 503, "count": 1000,
                    "client": {"userAgent": "(herald-a)"}}),
        )
        .await;
    assert!(added.status < 300, "{}", added.body);
    assert_eq!(a.get("/api/v1/namespaces").await.status, 503);
    assert_eq!(b.get("/api/v1/namespaces").await.status, 200);
    assert_eq!(a.get("/apis").await.status, 503);
    let described = Raw::new(&sim).get("/_herald/faults").await;
    assert_eq!(
        described.body["fail"][0]["client"]["userAgent"], "(herald-a)",
        "{}",
        described.body
    );
}
