//! An HTTP receiver that keeps every request as it came (headers as bytes, body, arrival time) and
//! answers from a script: what an independent decoder is fed, and what timing checks measure.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::http::{HeaderMap, StatusCode, Uri};

/// One request exactly as herald sent it.
#[derive(Debug, Clone)]
pub struct RawRequest {
    /// The path it was sent to (one receiver serves several sinks on different paths).
    pub path: String,
    /// `(name, value bytes)` in arrival order; names are lower case (HTTP/1 is case-insensitive).
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
    /// When the receiver got it.
    pub at: Instant,
}

impl RawRequest {
    /// The first value of header `name` (lower case), as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }
}

/// One scripted answer: a status and, if given, a `Retry-After` value.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<String>,
}

/// Listens on 127.0.0.1 (any path, POST); answers each request with the next scripted
/// [`Answer`], 204 once the script is used up.
pub struct RawReceiver {
    /// `http://127.0.0.1:<port>`; sinks append their own path.
    pub base: String,
    pub requests: Arc<Mutex<Vec<RawRequest>>>,
    pub script: Arc<Mutex<VecDeque<Answer>>>,
}

impl RawReceiver {
    pub async fn start() -> Self {
        let requests: Arc<Mutex<Vec<RawRequest>>> = Arc::default();
        let script: Arc<Mutex<VecDeque<Answer>>> = Arc::default();
        let (rq, sc) = (requests.clone(), script.clone());
        let app = axum::Router::new().fallback(axum::routing::post(
            move |uri: Uri, headers: HeaderMap, body: axum::body::Bytes| {
                let (rq, sc) = (rq.clone(), sc.clone());
                async move {
                    rq.lock().unwrap().push(RawRequest {
                        path: uri.path().to_owned(),
                        headers: headers
                            .iter()
                            .map(|(k, v)| (k.as_str().to_owned(), v.as_bytes().to_vec()))
                            .collect(),
                        body: body.to_vec(),
                        at: Instant::now(),
                    });
                    let answer = sc.lock().unwrap().pop_front();
                    let mut response = axum::http::Response::builder();
                    let status = match answer {
                        Some(Answer {
                            status,
                            retry_after,
                        }) => {
                            if let Some(value) = retry_after {
                                response = response.header("retry-after", value);
                            }
                            StatusCode::from_u16(status).unwrap()
                        }
                        None => StatusCode::NO_CONTENT,
                    };
                    response
                        .status(status)
                        .body(axum::body::Body::empty())
                        .unwrap()
                }
            },
        ));
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            base,
            requests,
            script,
        }
    }

    /// Requests to `path` received so far, in arrival order.
    pub fn to(&self, path: &str) -> Vec<RawRequest> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }
}
