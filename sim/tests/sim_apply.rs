//! Server-side apply, field ownership (`managedFields`) and structural-schema validation and pruning.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::support::{Kubectl, Raw, kubectl_path, sim, widget, widgets_crd};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";
const APPLY: &str = "application/apply-patch+yaml";

fn gadgets_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "gadgets", "kind": "Gadget"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                   "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                     "spec": {"type": "object", "required": ["size"], "properties": {
                       "size": {"type": "integer", "minimum": 1},
                       "color": {"type": "string", "enum": ["red", "blue"]},
                       "labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
                     "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}
    })
}

const GADGETS: &str = "/apis/example.com/v1/namespaces/default/gadgets";

fn gadget(spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": spec})
}

#[tokio::test]
async fn schema_violations_are_422_with_the_field_named() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&gadgets_crd()).await;
    let cases = [
        (json!({"size": "big"}), "spec.size", "FieldValueTypeInvalid"),
        (json!({"color": "red"}), "spec.size", "FieldValueRequired"),
        (
            json!({"size": 1, "color": "pink"}),
            "spec.color",
            "FieldValueNotSupported",
        ),
        (json!({"size": 0}), "spec.size", "FieldValueInvalid"),
    ];
    for (spec, field, reason) in cases {
        let r = raw.post(GADGETS, &gadget(spec.clone())).await;
        assert_eq!(
            (r.status, r.body["reason"].as_str()),
            (422, Some("Invalid")),
            "{spec}: {}",
            r.body
        );
        let cause = &r.body["details"]["causes"][0];
        assert_eq!(
            (cause["field"].as_str(), cause["reason"].as_str()),
            (Some(field), Some(reason)),
            "{spec}"
        );
        assert!(
            r.body["message"]
                .as_str()
                .unwrap()
                .starts_with("Gadget.example.com \"g\" is invalid: ")
        );
    }
    // Updates are validated too.
    assert_eq!(
        raw.post(GADGETS, &gadget(json!({"size": 2}))).await.status,
        201
    );
    let r = raw
        .patch(
            &format!("{GADGETS}/g"),
            "application/merge-patch+json",
            &json!({"spec": {"size": "x"}}),
        )
        .await;
    assert_eq!(r.status, 422);
}

#[tokio::test]
async fn unknown_fields_are_pruned_warned_or_refused_as_asked() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&gadgets_crd()).await;
    let body = gadget(json!({"size": 2, "extra": true, "labels": {"a": "b"}}));

    let strict = raw
        .send(
            reqwest::Method::POST,
            &format!("{GADGETS}?fieldValidation=Strict"),
            "application/json",
            Some(body.to_string().into_bytes()),
        )
        .await;
    assert_eq!(strict.status, 400);
    assert!(
        strict.body["message"]
            .as_str()
            .unwrap()
            .contains("strict decoding error: unknown field \"spec.extra\""),
        "{}",
        strict.body
    );

    let warned = raw.post(GADGETS, &body).await;
    assert_eq!(warned.status, 201);
    assert!(warned.body["spec"].get("extra").is_none(), "pruned");
    assert_eq!(
        warned.body["spec"]["labels"]["a"], "b",
        "declared maps are kept"
    );
    let warning = warned
        .headers
        .get("warning")
        .expect("a Warning header")
        .to_str()
        .unwrap();
    assert_eq!(warning, r#"299 - "unknown field \"spec.extra\"""#);

    let mut other = body.clone();
    other["metadata"]["name"] = json!("quiet");
    let ignored = raw
        .send(
            reqwest::Method::POST,
            &format!("{GADGETS}?fieldValidation=Ignore"),
            "application/json",
            Some(other.to_string().into_bytes()),
        )
        .await;
    assert_eq!(ignored.status, 201);
    assert!(ignored.headers.get("warning").is_none());
    assert!(ignored.body["spec"].get("extra").is_none());
    assert_eq!(
        raw.post(&format!("{GADGETS}?fieldValidation=Loose"), &body)
            .await
            .status,
        400
    );
}

#[tokio::test]
async fn every_write_records_its_field_manager() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let created = raw
        .post(
            &format!("{WIDGETS}?fieldManager=herald-test"),
            &widget("a", json!({"app": "x"}), json!({"n": 1})),
        )
        .await
        .body;
    let mf = &created["metadata"]["managedFields"][0];
    assert_eq!(
        (mf["manager"].as_str(), mf["operation"].as_str()),
        (Some("herald-test"), Some("Update"))
    );
    assert_eq!(mf["fieldsType"], "FieldsV1");
    assert!(mf["fieldsV1"]["f:spec"]["f:n"].is_object(), "{mf}");
    // Without fieldManager, the User-Agent's product names the manager.
    let patched = raw
        .http
        .patch(format!("{}{WIDGETS}/a", raw.base))
        .header("content-type", "application/merge-patch+json")
        .header("user-agent", "my-controller/1.2 (linux)")
        .body(json!({"spec": {"n": 2}}).to_string())
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let managers: Vec<&str> = patched["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["manager"].as_str().unwrap())
        .collect();
    assert!(managers.contains(&"my-controller"), "{managers:?}");
}

#[tokio::test]
async fn server_side_apply_upserts_owns_fields_and_reports_conflicts() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let a = format!("{WIDGETS}/a");
    let yaml = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: a\nspec:\n  size: 1\n  color: red\n";

    let missing_manager = raw
        .send(
            reqwest::Method::PATCH,
            &a,
            APPLY,
            Some(yaml.as_bytes().to_vec()),
        )
        .await;
    assert_eq!(
        (
            missing_manager.status,
            missing_manager.body["details"]["kind"].as_str()
        ),
        (422, Some("PatchOptions"))
    );

    let created = raw
        .send(
            reqwest::Method::PATCH,
            &format!("{a}?fieldManager=ci"),
            APPLY,
            Some(yaml.as_bytes().to_vec()),
        )
        .await;
    assert_eq!(created.status, 201, "apply creates: {}", created.body);
    let rv = created.body["metadata"]["resourceVersion"].clone();
    let again = raw
        .send(
            reqwest::Method::PATCH,
            &format!("{a}?fieldManager=ci"),
            APPLY,
            Some(yaml.as_bytes().to_vec()),
        )
        .await;
    assert_eq!(
        (
            again.status,
            again.body["metadata"]["resourceVersion"].clone()
        ),
        (200, rv),
        "identical apply is a no-op"
    );

    // Another writer takes spec.size; re-applying a different size now conflicts.
    raw.patch(
        &format!("{a}?fieldManager=editor"),
        "application/merge-patch+json",
        &json!({"spec": {"size": 5}}),
    )
    .await;
    let changed = yaml.replace("size: 1", "size: 3");
    let conflict = raw
        .send(
            reqwest::Method::PATCH,
            &format!("{a}?fieldManager=ci"),
            APPLY,
            Some(changed.as_bytes().to_vec()),
        )
        .await;
    assert_eq!(
        (conflict.status, conflict.body["reason"].as_str()),
        (409, Some("Conflict"))
    );
    assert!(
        conflict.body["message"]
            .as_str()
            .unwrap()
            .starts_with("Apply failed with 1 conflict: conflict with \"editor\""),
        "{}",
        conflict.body
    );
    let cause = &conflict.body["details"]["causes"][0];
    assert_eq!(
        (cause["reason"].as_str(), cause["field"].as_str()),
        (Some("FieldManagerConflict"), Some(".spec.size"))
    );

    let forced = raw
        .send(
            reqwest::Method::PATCH,
            &format!("{a}?fieldManager=ci&force=true"),
            APPLY,
            Some(changed.as_bytes().to_vec()),
        )
        .await;
    assert_eq!(
        (forced.status, forced.body["spec"]["size"].as_i64()),
        (200, Some(3))
    );

    // Dropping a field from the applied configuration removes it.
    let without_color = changed.replace("  color: red\n", "");
    let pruned = raw
        .send(
            reqwest::Method::PATCH,
            &format!("{a}?fieldManager=ci"),
            APPLY,
            Some(without_color.as_bytes().to_vec()),
        )
        .await;
    assert!(
        pruned.body["spec"].get("color").is_none(),
        "{}",
        pruned.body
    );

    let force_on_merge = raw
        .patch(
            &format!("{a}?force=true"),
            "application/merge-patch+json",
            &json!({}),
        )
        .await;
    assert_eq!(force_on_merge.status, 422, "force is for apply only");
}

#[tokio::test]
async fn kube_rs_patch_apply_round_trips() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(sim.client().unwrap(), "default", &ar);
    let desired = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "k"}, "spec": {"n": 1}});
    let pp = PatchParams::apply("herald-test");
    let first = api.patch("k", &pp, &Patch::Apply(&desired)).await.unwrap();
    assert_eq!(first.data["spec"]["n"], 1);
    let status =
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "status": {"phase": "Ready"}});
    let st = api
        .patch_status("k", &pp, &Patch::Apply(&status))
        .await
        .unwrap();
    assert_eq!(st.data["status"]["phase"], "Ready");
    assert_eq!(st.data["spec"]["n"], 1, "a status apply leaves spec alone");
    let second = api.patch("k", &pp, &Patch::Apply(&desired)).await.unwrap();
    assert_eq!(
        second.data["status"]["phase"], "Ready",
        "a main apply leaves status alone"
    );
    assert_eq!(
        second.metadata.resource_version, st.metadata.resource_version,
        "no-op"
    );
}

#[tokio::test]
async fn kubectl_server_side_apply_and_strict_validation() {
    let Some(bin) = kubectl_path() else { return };
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&gadgets_crd()).await;
    let k = Kubectl::new(bin, sim.kubeconfig_path());
    let doc = "apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: g\nspec:\n  size: 2\n  color: red\n";
    k.ok_with_stdin(&["apply", "--server-side", "-f", "-"], doc)
        .await;
    k.ok(&[
        "patch",
        "gadget",
        "g",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"size":7}}"#,
    ])
    .await;
    let (ok, _, stderr) = {
        let mut c = k.command(&["apply", "--server-side", "-f", "-"]);
        c.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let doc = doc.replace("size: 2", "size: 3");
        let out = tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let mut child = c.spawn().unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(doc.as_bytes())
                .unwrap();
            child.wait_with_output().unwrap()
        })
        .await
        .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert!(
        !ok && stderr.contains("conflict"),
        "a conflicting server-side apply fails: {stderr}"
    );
    k.ok_with_stdin(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        &doc.replace("size: 2", "size: 3"),
    )
    .await;
    let got: Value =
        serde_json::from_str(&k.ok(&["get", "gadget", "g", "-o", "json"]).await).unwrap();
    assert_eq!(got["spec"]["size"], 3);

    // kubectl validates strictly by default: the server refuses unknown fields.
    let bad = "apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: h\nspec:\n  size: 2\n  typo: 1\n";
    let mut c = k.command(&["create", "-f", "-"]);
    c.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let out = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = c.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(bad.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("unknown field \"spec.typo\""),
        "{stderr}"
    );
}
