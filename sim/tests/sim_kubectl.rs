//! Fidelity with kubectl, the reference client: CRDs with default validation, apply, get -w, patch
//! types, the status subresource, delete with finalizers and wait.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::support::{Kubectl, kubectl_path, sim};

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

const WIDGET_V1: &str = r#"
apiVersion: example.com/v1
kind: Widget
metadata: {name: w1, labels: {app: demo}}
spec: {size: 1}
"#;

#[tokio::test]
async fn kubectl_applies_watches_patches_and_deletes_with_finalizers() {
    let Some(bin) = kubectl_path() else { return };
    let sim = sim().await;
    let k = Kubectl::new(bin, sim.kubeconfig_path());

    assert!(k.ok(&["get", "namespaces"]).await.contains("kube-system"));
    // Default (strict) validation: kubectl reads the OpenAPI v3 documents first.
    k.ok_with_stdin(&["apply", "-f", "-"], CRD).await;
    k.ok(&[
        "wait",
        "--for=condition=established",
        "crd/widgets.example.com",
        "--timeout=20s",
    ])
    .await;

    // `get -w` lists, then watches from the list's revision.
    let mut watch = k.command(&[
        "get",
        "widgets",
        "-w",
        "--output-watch-events",
        "-o",
        "json",
    ]);
    watch.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = watch.spawn().expect("kubectl get -w starts");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        // `-o json` pretty-prints each event; collect whole objects by brace depth.
        let mut depth = 0i32;
        let mut current = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
            current.push_str(&line);
            if depth == 0 && !current.trim().is_empty() {
                let _ = tx.send(std::mem::take(&mut current));
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;

    k.ok_with_stdin(&["apply", "-f", "-"], WIDGET_V1).await;
    k.ok_with_stdin(
        &["apply", "-f", "-"],
        &WIDGET_V1.replace("size: 1", "size: 2"),
    )
    .await;
    let got: Value = serde_json::from_str(&k.ok(&["get", "wd", "w1", "-o", "json"]).await).unwrap();
    assert_eq!(
        (
            got["spec"]["size"].as_i64(),
            got["metadata"]["generation"].as_i64()
        ),
        (Some(2), Some(2))
    );
    assert!(
        got["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string()
    );

    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
    ])
    .await;
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--type",
        "json",
        "-p",
        r#"[{"op":"replace","path":"/spec/size","value":3}]"#,
    ])
    .await;
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--subresource",
        "status",
        "--type",
        "merge",
        "-p",
        r#"{"status":{"phase":"Ready"}}"#,
    ])
    .await;
    let (ok, _, stderr) = k
        .run(&["patch", "widget", "w1", "-p", r#"{"spec":{"size":9}}"#])
        .await;
    assert!(
        !ok && stderr.contains("strategic-merge-patch"),
        "strategic merge is refused for CRs: {stderr}"
    );

    k.ok(&["delete", "widget", "w1", "--wait=false"]).await;
    let deleting: Value =
        serde_json::from_str(&k.ok(&["get", "wd", "w1", "-o", "json"]).await).unwrap();
    assert!(deleting["metadata"]["deletionTimestamp"].is_string());
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--type",
        "json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ])
    .await;
    k.ok(&["wait", "--for=delete", "widget/w1", "--timeout=20s"])
        .await;

    let mut events = Vec::new();
    while events.len() < 7 {
        let ev = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("watch event in time")
            .expect("watch open");
        let v: Value = serde_json::from_str(&ev).expect("watch event JSON");
        events.push(format!(
            "{} {}",
            v["type"].as_str().unwrap(),
            v["object"]["spec"]["size"]
        ));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        events,
        [
            "ADDED 1",
            "MODIFIED 2",
            "MODIFIED 2",
            "MODIFIED 3",
            "MODIFIED 3",
            "MODIFIED 3",
            "DELETED 3"
        ],
        "create, apply, finalizer, json patch, status, deletionTimestamp, delete"
    );
}

#[tokio::test]
async fn kubectl_deletes_a_crd_and_its_objects() {
    let Some(bin) = kubectl_path() else { return };
    let sim = sim().await;
    let k = Kubectl::new(bin, sim.kubeconfig_path());
    k.ok_with_stdin(&["create", "-f", "-"], CRD).await;
    k.ok(&[
        "wait",
        "--for=condition=established",
        "crd/widgets.example.com",
        "--timeout=20s",
    ])
    .await;
    k.ok_with_stdin(&["create", "-f", "-"], WIDGET_V1).await;
    assert!(
        k.ok(&["get", "widgets", "-l", "app=demo"])
            .await
            .contains("w1")
    );
    k.ok(&["delete", "crd", "widgets.example.com", "--timeout=20s"])
        .await;
    let (_, stdout, _) = k.run(&["get", "crd"]).await;
    assert!(!stdout.contains("widgets"), "{stdout}");
}
