//! Fidelity with kube-rs, a client nobody here wrote: typed CRDs, await_condition, discovery,
//! `Api<DynamicObject>`, the kube-runtime watcher through a forced 410, and the finalizer helper.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Discovery;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher::{self, Event};
use serde_json::json;

use crate::support::{sim, widgets_crd};

fn widgets_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    )
}

async fn install(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(widgets_crd()).unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let established = await_condition(
        crds,
        "widgets.example.com",
        conditions::is_crd_established(),
    );
    tokio::time::timeout(Duration::from_secs(10), established)
        .await
        .expect("established in time")
        .unwrap();
}

fn widget(name: &str) -> DynamicObject {
    DynamicObject::new(name, &widgets_resource()).data(json!({"spec": {"n": 1}}))
}

#[tokio::test]
async fn typed_crd_is_established_and_discovered() {
    let sim = sim().await;
    let client = sim.client().unwrap();
    install(&client).await;
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("legacy discovery");
    let (ar, caps) = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(ar, _)| ar.kind == "Widget")
        .expect("Widget discovered");
    assert_eq!((ar.plural.as_str(), ar.version.as_str()), ("widgets", "v1"));
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
    let aggregated = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .expect("aggregated discovery");
    assert!(
        aggregated.groups().any(|g| g.name() == "example.com"),
        "aggregated discovery finds the group"
    );
}

#[tokio::test]
async fn dynamic_objects_round_trip_with_conflicts_and_patches() {
    let sim = sim().await;
    let client = sim.client().unwrap();
    install(&client).await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &widgets_resource());

    let mut generated = widget("");
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("w-".into());
    let created = api
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    let name = created.metadata.name.clone().unwrap();
    assert!(name.starts_with("w-"));

    let mut stale = created.clone();
    let mut fresh = created.clone();
    fresh.data["spec"]["n"] = json!(2);
    let replaced = api
        .replace(&name, &PostParams::default(), &fresh)
        .await
        .unwrap();
    assert_eq!(replaced.metadata.generation, Some(2));
    stale.data["spec"]["n"] = json!(3);
    match api.replace(&name, &PostParams::default(), &stale).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (409, "Conflict")),
        other => panic!("expected 409, got {other:?}"),
    }

    let merged = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"n": 4}})),
        )
        .await
        .unwrap();
    assert_eq!(merged.data["spec"]["n"], 4);
    let ops: json_patch::Patch =
        serde_json::from_value(json!([{"op": "replace", "path": "/spec/n", "value": 5}])).unwrap();
    let jp = api
        .patch(&name, &PatchParams::default(), &Patch::<()>::Json(ops))
        .await
        .unwrap();
    assert_eq!(jp.data["spec"]["n"], 5);
    let st = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Ready"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        (st.data["status"]["phase"].as_str(), st.metadata.generation),
        (Some("Ready"), Some(4))
    );

    let listed = api
        .list(&ListParams::default().labels("").limit(1))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    let deleted = api.delete(&name, &DeleteParams::default()).await.unwrap();
    assert!(deleted.is_right(), "no finalizers: a Status comes back");
    match api.get(&name).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 404),
        other => panic!("expected 404, got {other:?}"),
    }
}

#[tokio::test]
async fn kube_runtime_watcher_relists_after_a_forced_410_and_sees_missed_deletes() {
    let sim = sim().await;
    let client = sim.client().unwrap();
    install(&client).await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &widgets_resource());
    for n in ["a", "b"] {
        api.create(&PostParams::default(), &widget(n))
            .await
            .unwrap();
    }

    let mut stream = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
    let mut initial = BTreeSet::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            Event::Init => {}
            Event::InitApply(o) => {
                initial.insert(o.metadata.name.unwrap());
            }
            Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(initial, BTreeSet::from(["a".to_string(), "b".to_string()]));

    // While the watcher is not polled: its watch is dropped, an object is deleted and one created,
    // and the history is compacted past its resume point.
    sim.drop_watches();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &widget("c"))
        .await
        .unwrap();
    sim.compact();

    let mut saw_410 = false;
    let mut relisted = BTreeSet::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap()
        {
            Err(watcher::Error::WatchError(s)) => {
                assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
                saw_410 = true;
            }
            Err(other) => panic!("unexpected error {other}"),
            Ok(Event::Init) => relisted.clear(),
            Ok(Event::InitApply(o)) => {
                relisted.insert(o.metadata.name.unwrap());
            }
            Ok(Event::InitDone) => break,
            Ok(other) => panic!("expected a relist, got {other:?}"),
        }
    }
    assert!(saw_410, "the 410 came as an in-stream ERROR");
    assert_eq!(
        relisted,
        BTreeSet::from(["b".to_string(), "c".to_string()]),
        "the relist shows the delete"
    );

    // And it keeps watching afterwards.
    api.create(&PostParams::default(), &widget("d"))
        .await
        .unwrap();
    match tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .unwrap()
        .unwrap()
    {
        Some(Event::Apply(o)) => assert_eq!(o.metadata.name.as_deref(), Some("d")),
        other => panic!("expected Apply(d), got {other:?}"),
    }
}

#[derive(Debug, thiserror::Error)]
#[error("reconcile failed")]
struct ReconcileError;

#[tokio::test]
async fn kube_runtime_finalizer_helper_adds_and_removes_its_finalizer() {
    let sim = sim().await;
    let client = sim.client().unwrap();
    install(&client).await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &widgets_resource());
    api.create(&PostParams::default(), &widget("f"))
        .await
        .unwrap();
    const NAME: &str = "herald.dev/cleanup";

    let run = |obj: DynamicObject| {
        let api = api.clone();
        async move {
            finalizer(&api, NAME, Arc::new(obj), |ev| async move {
                match ev {
                    Finalizer::Apply(_) | Finalizer::Cleanup(_) => {
                        Ok::<_, ReconcileError>(Action::await_change())
                    }
                }
            })
            .await
        }
    };
    // First pass adds the finalizer (JSON patch: test null on a missing path, then add).
    run(api.get("f").await.unwrap())
        .await
        .expect("finalizer added");
    assert_eq!(
        api.get("f").await.unwrap().metadata.finalizers,
        Some(vec![NAME.to_string()])
    );
    run(api.get("f").await.unwrap()).await.expect("apply");

    let pending = api.delete("f", &DeleteParams::default()).await.unwrap();
    assert!(
        pending.is_left(),
        "finalizer keeps the object: the object comes back"
    );
    let deleting = api.get("f").await.unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    // Cleanup removes the finalizer (test the index, remove it), which deletes the object.
    run(deleting).await.expect("cleanup");
    match api.get("f").await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 404),
        other => panic!("expected 404 after cleanup, got {other:?}"),
    }
}

#[tokio::test]
async fn kube_runtime_streaming_list_watcher_reaches_init_done() {
    let sim = sim().await;
    let client = sim.client().unwrap();
    install(&client).await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &widgets_resource());
    for n in ["a", "b", "c"] {
        api.create(&PostParams::default(), &widget(n))
            .await
            .unwrap();
    }
    let mut stream =
        watcher::watcher(api.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut initial = BTreeSet::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            Event::Init => {}
            Event::InitApply(o) => {
                initial.insert(o.metadata.name.unwrap());
            }
            Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(initial.len(), 3);
    api.create(&PostParams::default(), &widget("d"))
        .await
        .unwrap();
    match tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .unwrap()
        .unwrap()
    {
        Some(Event::Apply(o)) => assert_eq!(o.metadata.name.as_deref(), Some("d")),
        other => panic!("expected Apply(d), got {other:?}"),
    }
}
