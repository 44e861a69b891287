//! `--data-dir` persistence (state survives restarts, the revision never goes backwards) and `--load`.

use herald_sim::{LoadError, SimConfig};
use serde_json::json;

use crate::support::{Raw, sim, sim_with, widget, widgets_crd};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

#[tokio::test]
async fn state_survives_a_clean_restart_and_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("state");
    let first = sim_with(SimConfig::default().data_dir(&data)).await;
    let raw = Raw::new(&first);
    raw.install_crd(&widgets_crd()).await;
    raw.post(WIDGETS, &widget("a", json!({"x": "1"}), json!({"n": 1})))
        .await;
    raw.post(WIDGETS, &widget("b", json!({}), json!({}))).await;
    raw.delete(&format!("{WIDGETS}/b")).await;
    let rv = first.resource_version();
    first.shutdown().await;

    let second = sim_with(SimConfig::default().data_dir(&data)).await;
    let raw = Raw::new(&second);
    assert_eq!(second.resource_version(), rv, "the revision survived");
    let a = raw.get(&format!("{WIDGETS}/a")).await;
    assert_eq!(
        (a.status, a.body["spec"]["n"].as_i64()),
        (200, Some(1)),
        "objects and their CRD are served again"
    );
    assert_eq!(raw.get(&format!("{WIDGETS}/b")).await.status, 404);
    let c = raw.post(WIDGETS, &widget("c", json!({}), json!({}))).await;
    assert!(
        c.body["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > rv
    );
    // History did not survive: resuming from before the restart is a 410, so clients relist.
    let mut w = raw
        .watch(&format!("{WIDGETS}?watch=1&resourceVersion={}", rv - 1))
        .await;
    let ev: serde_json::Value = serde_json::from_str(
        &w.next_line(std::time::Duration::from_secs(5))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(ev["object"]["code"], 410);
    let after_c = second.resource_version();
    drop(second); // no clean shutdown: the change log alone must carry the last write

    let third = sim_with(SimConfig::default().data_dir(&data)).await;
    assert_eq!(third.resource_version(), after_c);
    assert_eq!(
        Raw::new(&third).get(&format!("{WIDGETS}/c")).await.status,
        200
    );
}

const BUNDLE: &str = r#"
apiVersion: example.com/v1
kind: Widget
metadata: {name: w1, namespace: team}
spec: {size: 1}
---
apiVersion: v1
kind: Namespace
metadata: {name: team}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w2}
spec: {size: 2}
"#;

#[tokio::test]
async fn load_applies_crds_first_and_is_idempotent() {
    let sim = sim().await;
    assert_eq!(sim.load_yaml(BUNDLE).unwrap(), 4);
    let raw = Raw::new(&sim);
    assert_eq!(
        raw.get("/apis/example.com/v1/namespaces/team/widgets/w1")
            .await
            .body["spec"]["size"],
        1
    );
    assert_eq!(
        raw.get(&format!("{WIDGETS}/w2")).await.status,
        200,
        "no namespace means default"
    );
    // A namespace applied with nothing but its name is owned by nobody, so the next apply attributes its
    // server-set fields to `before-first-apply` (as the real server does); from then on loads are no-ops.
    sim.load_yaml(BUNDLE).unwrap();
    let rv = sim.resource_version();
    sim.load_yaml(BUNDLE).unwrap();
    assert_eq!(
        sim.resource_version(),
        rv,
        "loading the same documents again changes nothing"
    );

    match sim.load_yaml("apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: g}\n") {
        Err(LoadError::UnknownKind { doc: 1, kind, .. }) => assert_eq!(kind, "Gizmo"),
        other => panic!("expected UnknownKind, got {other:?}"),
    }
    match sim
        .load_yaml("---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: Bad_Name}\n")
    {
        Err(LoadError::ApplyFailed { doc, what, source }) => {
            assert_eq!(
                (doc, what.as_str(), source.code),
                (1, "Widget default/Bad_Name", 422)
            );
        }
        other => panic!("expected ApplyFailed, got {other:?}"),
    }
}
