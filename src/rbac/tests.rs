//! The rule set and pluralisation, without a cluster.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::config;

fn cfg(resources: &str) -> Config {
    config::from_str(&format!(
        "resources:\n{resources}\nsinks:\n  - name: out\n    type: file\n    path: /tmp/x.jsonl\n"
    ))
    .unwrap()
}

fn rules_json(rules: &[Rule]) -> Value {
    Value::Array(rules.iter().map(Rule::to_json).collect())
}

#[test]
fn conventional_plurals_follow_the_generators() {
    for (kind, plural) in [
        ("Database", "databases"),
        ("Policy", "policies"),
        ("Gateway", "gateways"),
        ("Ingress", "ingresses"),
        ("Box", "boxes"),
        ("Quiz", "quizes"),
        ("Branch", "branches"),
        ("Mesh", "meshes"),
        ("Graph", "graphs"),
        ("Widget", "widgets"),
        ("Y", "ys"),
    ] {
        assert_eq!(conventional_plural(kind), plural, "{kind}");
    }
}

#[test]
fn offline_uses_the_plural_key_and_guesses_only_without_it() {
    let c = cfg(
        "  - group: example.com\n    kind: Policy\n  - group: example.com\n    kind: Octopus\n    plural: octopi\n  - group: core\n    plural: configmaps",
    );
    let (targets, guesses) = offline_targets(&c);
    assert_eq!(
        guesses,
        vec![Guess {
            index: 0,
            kind: "Policy".into(),
            plural: "policies".into()
        }]
    );
    assert_eq!(
        rules_json(&cluster_rules(&targets)),
        json!([
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["example.com"], "resources": ["octopi", "policies"], "verbs": ["get", "list", "watch"]},
        ])
    );
}

#[test]
fn a_namespace_selector_adds_list_on_namespaces_and_nothing_else_does() {
    let plain = cfg("  - group: example.com\n    plural: widgets\n    namespaces: [a, b]");
    let (targets, _) = offline_targets(&plain);
    assert!(namespace_selector(&targets).is_empty());
    assert_eq!(cluster_rules(&targets).len(), 1);

    let selected =
        cfg("  - group: example.com\n    plural: widgets\n    namespaces: {selector: team=pay}");
    let (mut targets, _) = offline_targets(&selected);
    assert_eq!(
        rules_json(&namespace_selector(&targets)),
        json!([{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}])
    );
    // A cluster-scoped resource ignores `namespaces`.
    targets[0].cluster_scoped = Some(true);
    assert!(namespace_selector(&targets).is_empty());
}

#[test]
fn namespace_scoped_gives_one_role_per_listed_namespace() {
    let c = cfg(
        "  - group: example.com\n    plural: widgets\n    namespaces: [a, b]\n  - group: example.com\n    plural: gadgets\n    namespaces: [b]",
    );
    let (targets, _) = offline_targets(&c);
    let per_ns = namespace_rules(&targets).unwrap();
    assert_eq!(per_ns.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(
        rules_json(&per_ns["b"]),
        json!([{"apiGroups": ["example.com"], "resources": ["gadgets", "widgets"], "verbs": ["get", "list", "watch"]}])
    );
    let subject = Subject {
        name: "herald".into(),
        namespace: "ops".into(),
    };
    let objects = namespace_objects(&per_ns, &subject);
    assert_eq!(objects.len(), 4);
    assert_eq!(objects[1]["kind"], "RoleBinding");
    assert_eq!(objects[1]["metadata"]["namespace"], "a");
    assert_eq!(
        objects[1]["subjects"],
        json!([{"kind": "ServiceAccount", "name": "herald", "namespace": "ops"}])
    );
}

#[test]
fn namespace_scoped_refuses_what_only_a_cluster_role_grants() {
    let all = cfg(
        "  - group: example.com\n    plural: widgets\n    namespaces: [a]\n  - group: example.com\n    plural: gadgets",
    );
    let (targets, _) = offline_targets(&all);
    assert_eq!(
        namespace_rules(&targets),
        Err(RbacError::AllNamespaces { index: 1 })
    );
    let sel = cfg("  - group: example.com\n    plural: widgets\n    namespaces: {selector: a=b}");
    let (targets, _) = offline_targets(&sel);
    assert_eq!(
        namespace_rules(&targets),
        Err(RbacError::Selector { index: 0 })
    );
    let (mut targets, _) = offline_targets(&cfg(
        "  - group: example.com\n    plural: widgets\n    namespaces: [a]",
    ));
    targets[0].cluster_scoped = Some(true);
    assert!(matches!(
        namespace_rules(&targets),
        Err(RbacError::ClusterScoped { index: 0, .. })
    ));
}

#[test]
fn leader_election_adds_a_role_for_the_lease_and_the_positions_in_one_namespace() {
    let subject = Subject {
        name: "herald".into(),
        namespace: "ops".into(),
    };
    let off = cfg("  - group: example.com\n    kind: Widget");
    assert!(leader_election_objects(&off, &subject).is_empty());
    let mut on = off.clone();
    on.leader_election.enabled = true;
    let objects = leader_election_objects(&on, &subject);
    assert_eq!(objects.len(), 2);
    assert_eq!(objects[0]["kind"], "Role");
    assert_eq!(objects[0]["metadata"]["name"], "herald-leader-election");
    assert_eq!(objects[0]["metadata"]["namespace"], "ops");
    assert_eq!(
        objects[0]["rules"],
        serde_json::json!([
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
        ])
    );
    assert_eq!(objects[1]["kind"], "RoleBinding");
    assert_eq!(objects[1]["subjects"][0]["namespace"], "ops");
    on.leader_election.namespace = Some("coord".into());
    let objects = leader_election_objects(&on, &subject);
    assert_eq!(objects[0]["metadata"]["namespace"], "coord");
    assert_eq!(
        objects[1]["subjects"][0]["namespace"], "ops",
        "the ServiceAccount stays where it is"
    );
}
