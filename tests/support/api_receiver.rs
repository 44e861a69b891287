//! An HTTP receiver standing in for a third-party API (GitHub, PagerDuty, Loki): it keeps every
//! request whole (method, path and query, headers, body) and answers through the test's own
//! function, as that API would: its status, headers and body.

use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, Method, Uri};

/// One request exactly as it arrived.
#[derive(Debug, Clone)]
pub struct ApiRequest {
    pub method: String,
    /// The path, with `?query` when there is one.
    pub path: String,
    /// `(name, value)` in arrival order; names lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl ApiRequest {
    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

/// An answer: status, headers, body.
#[derive(Debug, Clone)]
pub struct ApiAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl ApiAnswer {
    /// `status` with a JSON body.
    pub fn json(status: u16, body: serde_json::Value) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string(),
        }
    }

    /// `status` with no body.
    pub fn empty(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: String::new(),
        }
    }
}

type Answerer = Arc<dyn Fn(&ApiRequest, usize) -> ApiAnswer + Send + Sync>;

/// Listens on 127.0.0.1 for any method and path; `answer(request, n)` (n: the request's index,
/// from 0) decides each answer. herald's start-up `OPTIONS` health check is answered 204 and not
/// kept.
pub struct ApiReceiver {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    pub requests: Arc<Mutex<Vec<ApiRequest>>>,
}

impl ApiReceiver {
    pub async fn start(
        answer: impl Fn(&ApiRequest, usize) -> ApiAnswer + Send + Sync + 'static,
    ) -> Self {
        let requests: Arc<Mutex<Vec<ApiRequest>>> = Arc::default();
        let answer: Answerer = Arc::new(answer);
        let rq = requests.clone();
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: axum::body::Bytes| {
                let (rq, answer) = (rq.clone(), answer.clone());
                async move {
                    if method == Method::OPTIONS {
                        // herald's start-up health check, not part of the API.
                        return axum::http::Response::builder()
                            .status(204)
                            .body(axum::body::Body::empty())
                            .unwrap();
                    }
                    let request = ApiRequest {
                        method: method.to_string(),
                        path: uri
                            .path_and_query()
                            .map(|p| p.as_str().to_owned())
                            .unwrap_or_default(),
                        headers: headers
                            .iter()
                            .map(|(k, v)| {
                                (
                                    k.as_str().to_owned(),
                                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                                )
                            })
                            .collect(),
                        body: body.to_vec(),
                    };
                    let n = {
                        let mut all = rq.lock().unwrap();
                        all.push(request.clone());
                        all.len() - 1
                    };
                    let reply = answer(&request, n);
                    let mut response = axum::http::Response::builder().status(reply.status);
                    for (name, value) in &reply.headers {
                        response = response.header(name, value);
                    }
                    response.body(axum::body::Body::from(reply.body)).unwrap()
                }
            },
        );
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { base, requests }
    }

    /// Every request so far.
    pub fn received(&self) -> Vec<ApiRequest> {
        self.requests.lock().unwrap().clone()
    }

    /// Waits (up to 30 s) until `n` requests arrived, and returns them all.
    pub async fn wait_for(&self, n: usize, what: &str) -> Vec<ApiRequest> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let got = self.received();
            if got.len() >= n {
                return got;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: {} of {n} requests arrived: {got:#?}",
                got.len()
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}
