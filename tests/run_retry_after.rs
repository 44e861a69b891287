//! `Retry-After` honoured end to end (issue 15, item 5): the real binary against a receiver that
//! answers 429, then 503, each with `Retry-After: 2`, then takes the event. A behaviour check with
//! a lower bound: each retry must come no sooner than the header said (herald's own first backoff is
//! under 100 ms, so a retry that ignored the header would come far earlier), and it must come.

use std::time::Duration;

use serde_json::json;

use crate::support::raw_receiver::{Answer, RawReceiver};
use crate::support::{Herald, Raw, sim, webhook_config, widget, widgets_crd};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_retries_wait_as_long_as_retry_after_says() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let receiver = RawReceiver::start().await;
    receiver.script.lock().unwrap().extend([
        Answer {
            status: 429,
            retry_after: Some("2".into()),
        },
        Answer {
            status: 503,
            retry_after: Some("2".into()),
        },
    ]);
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}/hook", receiver.base);
    let config = webhook_config(&sim, dir.path(), &[("hook", &url, "")]);
    let herald = Herald::start(dir.path(), &config);
    let created = raw
        .post(WIDGETS, &widget("w", json!({}), json!({})))
        .await
        .body;
    let id = crate::support::id_of(&created, "created");

    let started = std::time::Instant::now();
    let requests = loop {
        let got = receiver.to("/hook");
        if got.len() >= 3 {
            break got;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{} requests; the retries never came\n{}",
            got.len(),
            std::fs::read_to_string(&herald.stderr).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Whether herald's first list or its watch saw the create, the event has this id.
    let ours: Vec<_> = requests
        .iter()
        .filter(|r| r.header("ce-id").as_deref() == Some(id.as_str()))
        .collect();
    assert_eq!(ours.len(), 3, "one event, tried three times");
    for (answer, pair) in ["429", "503"].iter().zip(ours.windows(2)) {
        let waited = pair[1].at.duration_since(pair[0].at);
        // herald starts the wait once it has the answer, after the receiver stamped the request,
        // so the gap is above 2 s; 50 ms of slack keeps timer rounding out of it, far above
        // herald's own first backoff (under 100 ms) that an ignored header would give.
        assert!(
            waited >= Duration::from_millis(1950),
            "the retry after a {answer} with Retry-After: 2 came after {waited:?}"
        );
    }
    // Taken on the third try: no fourth request.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.to("/hook").len(), 3);
}
