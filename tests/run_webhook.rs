//! `herald run` delivering into a webhook receiver on 127.0.0.1: binary mode, signed, retried on 503.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use base64::Engine as _;
use serde_json::json;

use crate::support::{Herald, Raw, sim, widget, widgets_crd};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

type Seen = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

/// A receiver that answers 503 (Retry-After: 1) to the first POST and 204 afterwards.
async fn receiver() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let app = Router::new()
        .route(
            "/hook",
            post(move |headers: HeaderMap, body: Bytes| {
                let s = s.clone();
                async move {
                    let mut v = s.lock().unwrap();
                    v.push((headers, body));
                    if v.len() == 1 {
                        (StatusCode::SERVICE_UNAVAILABLE, [("retry-after", "1")]).into_response()
                    } else {
                        StatusCode::NO_CONTENT.into_response()
                    }
                }
            }),
        )
        .fallback(|| async { StatusCode::METHOD_NOT_ALLOWED });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

#[tokio::test]
async fn delivers_signed_binary_events_and_retries_a_503() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let (url, seen) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("whsec");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    let config = format!(
        "cluster:\n  name: test\n  kubeconfig:\n    path: {kc}\nresources:\n  - group: example.com\n    kind: Widget\nsinks:\n  - name: hook\n    type: webhook\n    url: {url}\n    signing:\n      secret: {{fromFile: {secret}}}\n      hubSignature256: true\njournal:\n  path: {journal}\n  flushInterval: 2ms\n",
        kc = sim.kubeconfig_path().display(),
        secret = secret_file.display(),
        journal = dir.path().join("journal").display(),
    );
    let _herald = Herald::start(dir.path(), &config);
    let created = raw
        .post(
            WIDGETS,
            &widget("w1", json!({"app": "shop"}), json!({"size": 1})),
        )
        .await
        .body;
    let id = format!(
        "{}:{}:created",
        created["metadata"]["uid"].as_str().unwrap(),
        created["metadata"]["resourceVersion"].as_str().unwrap()
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while seen.lock().unwrap().len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no retry arrived; stderr: {}",
            std::fs::read_to_string(dir.path().join("herald.stderr")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = seen.lock().unwrap();
    let key = base64::engine::general_purpose::STANDARD
        .decode(&SECRET["whsec_".len()..])
        .unwrap();
    for (headers, body) in seen.iter() {
        assert_eq!(headers["ce-id"], id.as_str());
        assert_eq!(headers["webhook-id"], id.as_str());
        assert_eq!(headers["ce-type"], "dev.herald.resource.created");
        assert_eq!(headers["content-type"], "application/json");
        let ts = headers["webhook-timestamp"].to_str().unwrap();
        use hmac::{Hmac, KeyInit, Mac};
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
        mac.update(format!("{id}.{ts}.").as_bytes());
        mac.update(body);
        let expected = format!(
            "v1,{}",
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
        );
        assert_eq!(headers["webhook-signature"], expected.as_str());
        let mut hub = Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
        hub.update(body);
        let hex: String = hub
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            headers["x-hub-signature-256"],
            format!("sha256={hex}").as_str()
        );
        let data: serde_json::Value = serde_json::from_slice(body).unwrap();
        assert_eq!(data["op"], "created");
    }
}
