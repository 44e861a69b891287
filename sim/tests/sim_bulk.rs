//! The in-process bulk API benchmarks use: objects and paced changes without an HTTP round trip.

use std::time::Duration;

use herald_sim::ResourceRef;
use serde_json::{Value, json};

use crate::support::{Raw, sim, widgets_crd};

#[tokio::test]
async fn bulk_writes_are_ordinary_changes_for_watchers() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let widgets = ResourceRef::namespaced("example.com", "v1", "widgets", "default");
    let names: Vec<String> = (0..50).map(|i| format!("w{i:02}")).collect();
    let created = sim
        .create_many(&widgets, names.iter().map(|n| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": n}, "spec": {}})))
        .unwrap();
    assert_eq!(created, 50);
    let from = sim.resource_version();
    let mut w = raw
        .watch(&format!(
            "/apis/example.com/v1/namespaces/default/widgets?watch=1&resourceVersion={from}"
        ))
        .await;

    let churned = sim.churn(&widgets, &names, 2_000, 400).await.unwrap();
    assert_eq!(churned.changes, 400);
    assert!(
        churned.elapsed >= Duration::from_millis(150),
        "paced at 2,000/s: {:?}",
        churned.elapsed
    );
    let mut last_rv = from;
    for i in 0..400u64 {
        let (t, o): (String, Value) = w.next_event().await.unwrap();
        assert_eq!(t, "MODIFIED");
        assert_eq!(o["spec"]["churn"], i, "changes arrive in order");
        assert_eq!(o["metadata"]["name"], names[(i % 50) as usize]);
        assert_eq!(
            o["metadata"]["generation"],
            1 + i / 50 + 1,
            "every change is a spec change"
        );
        let rv: u64 = o["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(rv > last_rv);
        last_rv = rv;
    }
    let fast = sim.churn(&widgets, &names, 0, 10_000).await.unwrap();
    assert_eq!(fast.changes, 10_000);
    assert_eq!(sim.resource_version(), last_rv + 10_000);

    let obj = sim
        .merge_patch(
            &widgets,
            "w00",
            &json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .unwrap();
    assert_eq!(obj["metadata"]["labels"]["a"], "b");
    sim.delete(&widgets, "w00").unwrap();
    assert_eq!(
        raw.get("/apis/example.com/v1/namespaces/default/widgets/w00")
            .await
            .status,
        404
    );
}
