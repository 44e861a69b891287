//! The webhook sink against receivers it must authenticate to and be authenticated by: a private CA,
//! a client certificate (mutual TLS), a 500 retried, and batched mode.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::support::{Herald, Raw, sim, webhook_config, widget, widgets_crd};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

/// A private CA with a server certificate for 127.0.0.1 and a client certificate, as PEM files.
struct Pki {
    ca: std::path::PathBuf,
    client_cert: std::path::PathBuf,
    client_key: std::path::PathBuf,
    server_cert: CertificateDer<'static>,
    server_key: PrivateKeyDer<'static>,
    ca_der: CertificateDer<'static>,
}

fn pki(dir: &std::path::Path) -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&server_key, &ca)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let client = CertificateParams::new(vec!["herald".to_owned()])
        .unwrap()
        .signed_by(&client_key, &ca)
        .unwrap();
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    Pki {
        ca: write("ca.pem", ca.pem()),
        client_cert: write("client.pem", client.pem()),
        client_key: write("client-key.pem", client_key.serialize_pem()),
        server_cert: server.der().clone(),
        server_key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der())),
        ca_der: ca.der().clone(),
    }
}

/// TLS that requires a client certificate issued by the CA.
struct MutualTls {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
}

impl axum::serve::Listener for MutualTls {
    type Io = TlsStream<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, peer)) = self.tcp.accept().await else {
                continue;
            };
            // A client without a certificate fails here and is simply not served.
            if let Ok(tls) = self.acceptor.accept(tcp).await {
                return (tls, peer);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

type Seen = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

/// Answers each POST with the next scripted status (204 once the script is used up).
fn app(seen: Seen, script: Vec<u16>) -> Router {
    let script = Arc::new(Mutex::new(VecDeque::from(script)));
    Router::new()
        .route(
            "/hook",
            post(move |headers: HeaderMap, body: Bytes| {
                let (seen, script) = (seen.clone(), script.clone());
                async move {
                    let code = script.lock().unwrap().pop_front().unwrap_or(204);
                    seen.lock().unwrap().push((headers, body));
                    StatusCode::from_u16(code).unwrap()
                }
            }),
        )
        .fallback(|| async { StatusCode::METHOD_NOT_ALLOWED })
}

/// The event ids of the requests that were answered 2xx, in order (a batch contributes each of its
/// events).
fn ids(seen: &Seen, answered_ok_from: usize) -> Vec<String> {
    let seen = seen.lock().unwrap();
    let mut out = Vec::new();
    for (headers, body) in seen.iter().skip(answered_ok_from) {
        let content_type = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if content_type.starts_with("application/cloudevents-batch+json") {
            let batch: Vec<Value> = serde_json::from_slice(body).unwrap();
            out.extend(batch.iter().map(|e| e["id"].as_str().unwrap().to_owned()));
        } else if let Some(id) = headers.get("ce-id") {
            out.push(id.to_str().unwrap().to_owned());
        }
    }
    out
}

async fn until(what: &str, f: impl Fn() -> bool) {
    let started = std::time::Instant::now();
    while !f() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_private_ca_and_a_client_certificate_reach_a_mutual_tls_receiver_and_a_500_is_retried() {
    herald::cli::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki.ca_der.clone()).unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
        .build()
        .unwrap();
    let mut server = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![pki.server_cert.clone()], pki.server_key.clone_key())
        .unwrap();
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}/hook", tcp.local_addr().unwrap());
    let seen: Seen = Arc::default();
    let listener = MutualTls {
        tcp,
        acceptor: TlsAcceptor::from(Arc::new(server)),
    };
    tokio::spawn(axum::serve(listener, app(seen.clone(), vec![500])).into_future());

    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let tls = format!(
        "    tls:\n      caFile: {}\n      clientCertFile: {}\n      clientKeyFile: {}\n",
        pki.ca.display(),
        pki.client_cert.display(),
        pki.client_key.display()
    );

    // Without the client certificate the receiver refuses the handshake: `herald check --connect`
    // says so (exit 11) instead of starting a sink that can never deliver.
    let no_client = webhook_config(
        &sim,
        dir.path(),
        &[(
            "hook",
            &url,
            &format!("    tls:\n      caFile: {}\n", pki.ca.display()),
        )],
    );
    std::fs::write(dir.path().join("no-client.yaml"), &no_client).unwrap();
    // Not a blocking call: the simulator and the receiver run on this test's runtime.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["check", "--connect", "-c"])
        .arg(dir.path().join("no-client.yaml"))
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(herald::exit_code::HEALTHCHECK_FAILED),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let config = webhook_config(&sim, dir.path(), &[("hook", &url, &tls)]);
    let mut herald = Herald::start(dir.path(), &config);
    let created = raw.post(WIDGETS, &widget("a", json!({}), json!({}))).await;
    let id = format!(
        "{}:{}:created",
        created.body["metadata"]["uid"].as_str().unwrap(),
        created.body["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
    );
    until("the event after the 500", || ids(&seen, 1).contains(&id)).await;
    let first = seen.lock().unwrap()[0].0.get("ce-id").cloned();
    assert_eq!(
        first.and_then(|v| v.to_str().ok().map(str::to_owned)),
        Some(id.clone()),
        "the 500 was for the same event, retried with the same id"
    );
    assert_eq!(herald.terminate().await, Some(0));
}

#[tokio::test]
async fn batched_mode_sends_arrays_of_events_and_every_event_arrives_once() {
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", tcp.local_addr().unwrap());
    let seen: Seen = Arc::default();
    tokio::spawn(axum::serve(tcp, app(seen.clone(), vec![])).into_future());
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = webhook_config(
        &sim,
        dir.path(),
        &[("hook", &url, "    mode: batched\n    batchMaxEvents: 50\n")],
    );
    let mut herald = Herald::start(dir.path(), &config);
    let mut expected = Vec::new();
    for i in 0..30 {
        let created = raw
            .post(WIDGETS, &widget(&format!("w{i}"), json!({}), json!({})))
            .await;
        expected.push(format!(
            "{}:{}:created",
            created.body["metadata"]["uid"].as_str().unwrap(),
            created.body["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
        ));
    }
    until("30 events", || ids(&seen, 0).len() >= 30).await;
    let mut got = ids(&seen, 0);
    got.sort();
    expected.sort();
    assert_eq!(got, expected);
    let requests = seen.lock().unwrap().len();
    assert!(
        requests < 30,
        "{requests} requests for 30 events: not batched"
    );
    for (headers, _) in seen.lock().unwrap().iter() {
        assert_eq!(
            headers.get("content-type").unwrap(),
            "application/cloudevents-batch+json; charset=UTF-8"
        );
    }
    assert_eq!(herald.terminate().await, Some(0));
}
