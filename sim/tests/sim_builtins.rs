//! The built-in APIs besides namespaces and CRDs: Leases, Events, SelfSubjectAccessReview, and the deny
//! switch that makes the simulator answer as a cluster without the right RBAC rule.

use herald_sim::DenyRule;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{Raw, sim};

#[tokio::test]
async fn leases_work_with_typed_kube_rs_clients() {
    let sim = sim().await;
    let leases: Api<Lease> = Api::namespaced(sim.client().unwrap(), "default");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "herald-leader"},
        "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 15}
    }))
    .unwrap();
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();
    assert!(
        created.metadata.generation.is_none(),
        "Leases have no generation"
    );
    let mut next = created.clone();
    next.spec.as_mut().unwrap().holder_identity = Some("pod-b".into());
    let replaced = leases
        .replace("herald-leader", &PostParams::default(), &next)
        .await
        .unwrap();
    assert_eq!(
        replaced.spec.unwrap().holder_identity.as_deref(),
        Some("pod-b")
    );
    match leases
        .replace("herald-leader", &PostParams::default(), &next)
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(
            s.code, 409,
            "optimistic concurrency is what leader election relies on"
        ),
        other => panic!("expected 409, got {other:?}"),
    }
    let patched = leases
        .patch(
            "herald-leader",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"leaseTransitions": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.spec.unwrap().lease_transitions, Some(2));
}

#[tokio::test]
async fn events_are_stored_and_selectable_by_involved_object() {
    let sim = sim().await;
    let events: Api<Event> = Api::namespaced(sim.client().unwrap(), "default");
    for (name, obj) in [("e1", "w1"), ("e2", "w2")] {
        let ev: Event = serde_json::from_value(json!({
            "metadata": {"name": name},
            "involvedObject": {"kind": "Widget", "name": obj, "namespace": "default"},
            "reason": "Delivered", "message": "sent", "type": "Normal"
        }))
        .unwrap();
        events.create(&PostParams::default(), &ev).await.unwrap();
    }
    let only_w2 = events
        .list(&ListParams::default().fields("involvedObject.name=w2"))
        .await
        .unwrap();
    assert_eq!(only_w2.items.len(), 1);
    assert_eq!(only_w2.items[0].metadata.name.as_deref(), Some("e2"));
    let raw = Raw::new(&sim);
    let r = raw
        .get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.color%3Dred")
        .await;
    assert_eq!(r.status, 400);
}

async fn review(sim: &herald_sim::Simulator, verb: &str, resource: &str) -> bool {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(sim.client().unwrap());
    let ssar = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some("example.com".into()),
                resource: Some(resource.into()),
                namespace: Some("default".into()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    reviews
        .create(&PostParams::default(), &ssar)
        .await
        .unwrap()
        .status
        .unwrap()
        .allowed
}

#[tokio::test]
async fn access_reviews_allow_by_default_and_deny_rules_deny() {
    let sim = sim().await;
    assert!(review(&sim, "watch", "widgets").await);
    sim.deny(DenyRule {
        verb: Some("watch".into()),
        resource: Some("widgets".into()),
        ..DenyRule::default()
    });
    assert!(!review(&sim, "watch", "widgets").await);
    assert!(
        review(&sim, "list", "widgets").await,
        "only the denied verb"
    );

    // The rule is enforced on real requests too.
    let raw = Raw::new(&sim);
    raw.install_crd(&crate::support::widgets_crd()).await;
    let r = raw
        .get("/apis/example.com/v1/namespaces/default/widgets?watch=1")
        .await;
    assert_eq!(
        (r.status, r.body["reason"].as_str()),
        (403, Some("Forbidden"))
    );
    assert_eq!(
        r.body["message"],
        "widgets.example.com is forbidden: User \"system:anonymous\" cannot watch resource \"widgets\" in API group \"example.com\" in the namespace \"default\""
    );
    assert_eq!(
        raw.get("/apis/example.com/v1/namespaces/default/widgets")
            .await
            .status,
        200
    );
    let admin = raw
        .send(
            reqwest::Method::POST,
            "/_herald/deny",
            "application/json",
            Some(br#"{"verb":"list","group":"example.com"}"#.to_vec()),
        )
        .await;
    assert_eq!(admin.status, 200);
    assert_eq!(
        raw.get("/apis/example.com/v1/namespaces/default/widgets")
            .await
            .status,
        403
    );
    assert_eq!(
        raw.get("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
            .await
            .status,
        405
    );
}

#[tokio::test]
async fn discovery_lists_the_builtins() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    let core = raw.get("/api/v1").await.body;
    let names: Vec<&str> = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"events") && names.contains(&"namespaces"),
        "{names:?}"
    );
    let coord = raw.get("/apis/coordination.k8s.io/v1").await.body;
    assert_eq!(coord["resources"][0]["name"], "leases");
    let authz = raw.get("/apis/authorization.k8s.io/v1").await.body;
    assert_eq!(authz["resources"][0]["verbs"], json!(["create"]));
}

#[tokio::test]
async fn tls_serves_https_with_the_certificate_in_the_kubeconfig() {
    let sim = crate::support::sim_with(herald_sim::SimConfig::default().tls(true)).await;
    assert!(sim.url().starts_with("https://127.0.0.1:"));
    assert!(
        sim.certificate_pem()
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----")
    );
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(sim.client().unwrap());
    assert_eq!(
        namespaces
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    // A kube client built from the kubeconfig alone trusts the simulator too.
    let kc = kube::config::Kubeconfig::read_from(sim.kubeconfig_path()).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    let from_file: Api<k8s_openapi::api::core::v1::Namespace> =
        Api::all(kube::Client::try_from(config).unwrap());
    assert!(from_file.get("default").await.is_ok());
    // Plain HTTP to the TLS port gets nowhere.
    let plain = reqwest::get(format!("http://{}/version", sim.addr())).await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
    if let Some(bin) = crate::support::kubectl_path() {
        let k = crate::support::Kubectl::new(bin, sim.kubeconfig_path());
        assert!(
            k.ok(&["get", "ns", "-o", "name"])
                .await
                .contains("namespace/kube-system")
        );
    }
}
