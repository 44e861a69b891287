use std::collections::BTreeSet;
use std::env::VarError;
use std::path::PathBuf;
use std::time::Duration;

use herald_sink_core::config::DeliveryOptions;
use herald_sink_file::{Fsync, Rotate};
use herald_sink_webhook::{
    WebhookAuth, WebhookBasicAuth, WebhookConfig, WebhookMode, WebhookSigning, WebhookTls,
    WebhookTokenAuth,
};
use serde_json::Value;

use super::*;

/// A fake environment, so no test mutates the process environment.
fn env(name: &str) -> Result<String, VarError> {
    match name {
        "STATE" => Ok("/var/lib/herald".into()),
        "KUBE" => Ok("/etc/kube".into()),
        "POD_IP" => Ok("10.1.2.3".into()),
        "POD_IP6" => Ok("fd00::5".into()),
        "EMPTY" => Ok(String::new()),
        _ => Err(VarError::NotPresent),
    }
}

fn parse(yaml: &str) -> Result<Config> {
    from_str_with_env(yaml, &env)
}

fn ok(yaml: &str) -> Config {
    match parse(yaml) {
        Ok(config) => config,
        Err(e) => panic!("{e}\n--- in ---\n{yaml}"),
    }
}

/// The rendered problems, `path: message` each.
fn errors(yaml: &str) -> Vec<String> {
    match parse(yaml) {
        Err(ConfigError::Invalid { errors }) => errors.iter().map(ToString::to_string).collect(),
        Err(e) => panic!("unexpected error {e}"),
        Ok(config) => panic!("accepted:\n{yaml}\n{config:#?}"),
    }
}

/// The single problem of `yaml`.
fn error(yaml: &str) -> String {
    let all = errors(yaml);
    assert_eq!(all.len(), 1, "expected one error, got {all:#?}");
    all.into_iter().next().unwrap_or_default()
}

const RESOURCE: &str = "resources:\n- {group: example.com, kind: Database}\n";
const SINK: &str = "sinks:\n- {name: archive, type: file, path: events.jsonl}\n";

/// A valid configuration plus `extra` (which may add sections).
fn base(extra: &str) -> String {
    format!("{RESOURCE}{SINK}{extra}")
}

/// A valid configuration whose only resource has `fields` (flow-mapping entries) added.
fn resource(fields: &str) -> String {
    format!("resources:\n- {{group: example.com, kind: Database, {fields}}}\n{SINK}")
}

/// A valid configuration whose only sink has `fields` added.
fn sink(fields: &str) -> String {
    format!("{RESOURCE}sinks:\n- {{name: archive, type: file, path: events.jsonl, {fields}}}\n")
}

// ----- defaults ------------------------------------------------------------------------------

#[test]
fn minimal_config_gets_every_default() {
    let config = ok(&base(""));
    assert_eq!(config.cluster, ClusterConfig::default());
    assert_eq!(config.cluster.name, "default");
    assert_eq!(
        config.cluster.source,
        ClusterSource::Kubeconfig(KubeconfigSource {
            path: None,
            context: None
        })
    );

    let r = &config.resources[0];
    assert_eq!(r.group, "example.com");
    assert_eq!(r.version, None);
    assert_eq!(r.kind.as_deref(), Some("Database"));
    assert_eq!(r.plural, None);
    assert_eq!(r.namespaces, Namespaces::All);
    assert_eq!(r.label_selector, None);
    assert_eq!(r.field_selector, None);
    assert_eq!(r.events, EventType::ALL);
    assert_eq!(r.initial_state, InitialState::Emit);
    assert!(!r.skip_status_only_updates);
    assert_eq!(
        r.payload,
        PayloadParts::Parts(vec![PayloadPart::Object, PayloadPart::Patch])
    );
    assert!(r.payload.includes(PayloadPart::Object) && !r.payload.includes(PayloadPart::OldObject));
    assert!(r.redact.is_empty());
    assert!(!r.keep_managed_fields);
    assert_eq!(r.type_prefix, "dev.herald.resource");
    assert_eq!(r.on_oversize, OnOversize::Reference);

    let s = &config.sinks[0];
    assert_eq!(s.name, "archive");
    assert_eq!(s.kind.sink_type(), SinkType::File);
    let SinkKind::File(file) = &s.kind else {
        panic!("a file sink")
    };
    assert_eq!(file.path, PathBuf::from("events.jsonl"));
    assert_eq!(file.fsync, Fsync::Interval);
    assert_eq!(file.fsync_interval, Duration::from_secs(1));
    assert_eq!(file.rotate, None);
    assert_eq!(s.delivery.start, SinkStart::Head);
    assert!(!file.is_stdout());

    assert_eq!(
        config.routes,
        vec![RouteConfig {
            resources: vec!["*".to_owned()],
            events: EventType::ALL.to_vec(),
            sinks: vec!["archive".into()],
            when: None,
        }]
    );
    assert_eq!(config.journal, JournalSettings::default());
    assert_eq!(config.journal.path, PathBuf::from("./herald-journal"));
    assert_eq!(config.journal.flush_interval, Duration::from_millis(10));
    assert_eq!(config.journal.flush_entries, 1000);
    assert_eq!(config.journal.retain, Duration::ZERO);
    assert_eq!(config.journal.max_backlog, 1_000_000);
    assert_eq!(config.admin.listen.to_string(), "127.0.0.1:9464");
}

#[test]
fn default_route_sends_everything_to_every_sink() {
    let config = ok(&format!(
        "{RESOURCE}sinks:\n- {{name: a, type: file, path: a.jsonl}}\n- {{name: b, type: file, path: '-'}}\n"
    ));
    assert_eq!(config.routes.len(), 1);
    assert_eq!(config.routes[0].sinks, ["a", "b"]);
}

#[test]
fn bare_section_keys_mean_their_defaults() {
    let config = ok(&base("cluster:\n  embedded:\njournal:\nadmin:\n"));
    assert_eq!(
        config.cluster.source,
        ClusterSource::Embedded(EmbeddedSource { load: None })
    );
    assert_eq!(config.journal, JournalSettings::default());
    assert_eq!(config.admin, AdminConfig::default());
}

#[test]
fn embedded_cluster_is_named_herald_sim_unless_named() {
    let config = ok(&base("cluster:\n  embedded: {load: demo.yaml}\n"));
    assert_eq!(config.cluster.name, "herald-sim");
    assert_eq!(
        config.cluster.source,
        ClusterSource::Embedded(EmbeddedSource {
            load: Some("demo.yaml".into())
        })
    );
    let named = ok(&base("cluster:\n  name: demo\n  embedded: {}\n"));
    assert_eq!(named.cluster.name, "demo");
}

#[test]
fn reads_every_cluster_source() {
    let kube = ok(&base(
        "cluster:\n  name: prod-eu\n  kubeconfig: {path: /etc/kube/config, context: prod}\n",
    ));
    assert_eq!(kube.cluster.name, "prod-eu");
    assert_eq!(
        kube.cluster.source,
        ClusterSource::Kubeconfig(KubeconfigSource {
            path: Some("/etc/kube/config".into()),
            context: Some("prod".into())
        })
    );
    let in_cluster = ok(&base("cluster: {inCluster: true}\n"));
    assert_eq!(in_cluster.cluster.source, ClusterSource::InCluster);
    let off = ok(&base("cluster: {inCluster: false}\n"));
    assert_eq!(off.cluster, ClusterConfig::default());
}

#[test]
fn cluster_sources_are_exclusive() {
    assert_eq!(
        error(&base("cluster:\n  kubeconfig: {}\n  embedded: {}\n")),
        "cluster: give at most one of kubeconfig, inCluster and embedded, not kubeconfig and embedded"
    );
    assert_eq!(
        error(&base(
            "cluster: {inCluster: true, kubeconfig: {context: x}, embedded: {}}\n"
        )),
        "cluster: give at most one of kubeconfig, inCluster and embedded, not kubeconfig and inCluster and embedded"
    );
}

#[test]
fn reads_the_example_from_the_brief() {
    let config = ok(r#"
cluster:
  name: prod-eu
  kubeconfig: {path: /etc/kube/config, context: prod}
resources:
  - group: example.com
    version: v1
    kind: Database
    plural: databases
    namespaces: all
    labelSelector: "tier=gold"
    fieldSelector: "metadata.name!=scratch"
    events: [created, updated, deleted]
    initialState: emit
    skipStatusOnlyUpdates: false
    payload: [object, patch]
    redact: ["/spec/password"]
    keepManagedFields: false
    typePrefix: dev.herald.resource
    onOversize: reference
  - group: example.com
    kind: Backup
    namespaces: {selector: "team=payments"}
    payload: reference
    initialState: skip
    onOversize: deadLetter
  - group: core
    plural: configmaps
    namespaces: [a, b]
    payload: [oldObject]
sinks:
  - name: archive
    type: file
    path: /var/lib/herald/events.jsonl
    fsync: interval
    fsyncInterval: 1s
    rotate: {maxSize: 64MiB, maxFiles: 5}
    start: head
  - name: console
    path: "-"
    type: file
    start: earliest
    fsync: never
routes:
  - resources: ["databases.example.com", "Backup.example.com", configmaps.core]
    events: [deleted]
    sinks: [archive]
  - sinks: [console]
journal:
  path: ./herald-journal
  flushInterval: 10ms
  flushEntries: 1000
  retain: 0s
  maxBacklog: 1000000
admin:
  listen: 127.0.0.1:9464
"#);
    let [db, backup, cm] = &config.resources[..] else {
        panic!("three resources")
    };
    assert_eq!(db.plural.as_deref(), Some("databases"));
    assert_eq!(db.redact, ["/spec/password"]);
    assert_eq!(
        backup.namespaces,
        Namespaces::Selector {
            selector: "team=payments".into()
        }
    );
    assert!(backup.payload.is_reference());
    assert_eq!(backup.initial_state, InitialState::Skip);
    assert_eq!(backup.on_oversize, OnOversize::DeadLetter);
    assert_eq!(cm.group, "", "core is stored as Kubernetes spells it");
    assert_eq!(
        cm.namespaces,
        Namespaces::List(vec!["a".into(), "b".into()])
    );
    assert_eq!(
        cm.payload,
        PayloadParts::Parts(vec![PayloadPart::OldObject])
    );
    let SinkKind::File(archive) = &config.sinks[0].kind else {
        panic!("a file sink")
    };
    assert_eq!(
        archive.rotate,
        Some(Rotate {
            max_size: 64 << 20,
            max_files: 5
        })
    );
    let console = &config.sinks[1];
    let SinkKind::File(console_file) = &console.kind else {
        panic!("a file sink")
    };
    assert!(console_file.is_stdout());
    assert_eq!(console.delivery.start, SinkStart::Earliest);
    assert_eq!(console_file.fsync, Fsync::Never);
    assert_eq!(
        config.routes[0].resources,
        ["databases.example.com", "Backup.example.com", "configmaps"]
    );
    assert_eq!(config.routes[0].events, [EventType::Deleted]);
    assert_eq!(config.routes[1].resources, ["*"]);
    assert_eq!(config.routes[1].events, EventType::ALL);
}

// ----- enum spellings -------------------------------------------------------------------------

#[test]
fn misspelled_enum_values_name_the_path_and_the_choices() {
    for (yaml, expected) in [
        (
            resource("initialState: emitt"),
            "resources[0].initialState: unknown variant `emitt`, expected `emit` or `skip`",
        ),
        (
            resource("events: [created, delete]"),
            "resources[0].events[1]: unknown variant `delete`, expected one of `created`, `updated`, `deleted`",
        ),
        (
            resource("onOversize: deadletter"),
            "resources[0].onOversize: unknown variant `deadletter`, expected `reference` or `deadLetter`",
        ),
        (
            resource("payload: [object, old_object]"),
            "resources[0].payload[1]: unknown variant `old_object`, expected one of `object`, `oldObject`, `patch`",
        ),
        (
            resource("payload: references"),
            "resources[0].payload: invalid value: string \"references\", expected a list of object, oldObject, patch, or `reference`",
        ),
        (
            resource("payload: []"),
            "resources[0].payload: empty list; write `reference` for reference-only events",
        ),
        (
            resource("namespaces: any"),
            "resources[0].namespaces: invalid value: string \"any\", expected `all`, a list of namespaces, or {selector: LABEL_SELECTOR}",
        ),
        (
            sink("fsync: sometimes"),
            "sinks[0].fsync: unknown variant `sometimes`, expected one of `always`, `interval`, `never`",
        ),
        (
            sink("start: latest"),
            "sinks[0].start: unknown variant `latest`, expected `head` or `earliest`",
        ),
        (
            format!("{RESOURCE}sinks:\n- {{name: a, type: kafak, path: x}}\n"),
            "sinks[0].type: unknown variant `kafak`, expected one of `file`, `webhook`, `kafka`, `nats`",
        ),
        (
            base("routes:\n- {events: [removed], sinks: [archive]}\n"),
            "routes[0].events[0]: unknown variant `removed`, expected one of `created`, `updated`, `deleted`",
        ),
    ] {
        assert_eq!(error(&yaml), expected, "{yaml}");
    }
}

#[test]
fn wrong_types_name_the_path() {
    assert_eq!(
        error(&resource("skipStatusOnlyUpdates: sometimes")),
        "resources[0].skipStatusOnlyUpdates: invalid type: string \"sometimes\", expected a boolean"
    );
    assert_eq!(
        error(&base("journal: {flushEntries: -1}\n")),
        "journal.flushEntries: invalid value: integer `-1`, expected u32"
    );
    assert_eq!(
        error(&base("admin: {listen: localhost:9464}\n")),
        "admin.listen: invalid socket address syntax"
    );
    assert_eq!(
        error(&format!("{SINK}resources: {{group: example.com}}\n")),
        "resources: invalid type: map, expected a sequence"
    );
}

// ----- unknown keys ---------------------------------------------------------------------------

#[test]
fn unknown_keys_are_errors_at_every_depth() {
    for (yaml, expected) in [
        (
            base("sink: []\n"),
            "sink: unknown field `sink`, expected one of `cluster`, `resources`, `sinks`, `routes`, `journal`, `admin`, `leaderElection`",
        ),
        (
            base("cluster: {nmae: x}\n"),
            "cluster.nmae: unknown field `nmae`, expected one of `name`, `kubeconfig`, `inCluster`, `embedded`",
        ),
        (
            base("cluster:\n  kubeconfig: {file: x}\n"),
            "cluster.kubeconfig.file: unknown field `file`, expected `path` or `context`",
        ),
        (
            resource("labelselector: a=b"),
            "resources[0].labelselector: unknown field `labelselector`, expected one of `group`, `version`, `kind`, `plural`, `kinds`, `namespaces`, `labelSelector`, `fieldSelector`, `events`, `initialState`, `skipStatusOnlyUpdates`, `when`, `changed`, `ignoreFields`, `payload`, `redact`, `keepManagedFields`, `typePrefix`, `onOversize`",
        ),
        (
            resource("namespaces: {selector: a=b, names: [x]}"),
            "resources[0].namespaces.names: unknown field `names`, expected one of `selector`, `include`, `exclude`",
        ),
        (
            sink("fsyncIntervall: 1s"),
            "sinks[0].fsyncIntervall: unknown field `fsyncIntervall`, expected one of `path`, `fsync`, `fsyncInterval`, `rotate`, `rateLimit`, `debounce`, `start`",
        ),
        (
            sink("rotate: {maxSize: 1MiB, maxFile: 3}"),
            "sinks[0].rotate.maxFile: unknown field `maxFile`, expected `maxSize` or `maxFiles`",
        ),
        (
            base("routes:\n- {sinks: [archive], sink: archive}\n"),
            "routes[0].sink: unknown field `sink`, expected one of `resources`, `events`, `sinks`, `when`",
        ),
        (
            base("journal: {flushIntervall: 1s}\n"),
            "journal.flushIntervall: unknown field `flushIntervall`, expected one of `path`, `flushInterval`, `flushEntries`, `retain`, `maxBacklog`, `maxDeadLetters`",
        ),
        (
            base("admin: {address: 0.0.0.0:1}\n"),
            "admin.address: unknown field `address`, expected `listen` or `token`",
        ),
    ] {
        assert_eq!(error(&yaml), expected, "{yaml}");
    }
}

#[test]
fn sink_errors_have_exact_paths_whatever_the_key_order() {
    // `type` last, `name` in the middle: the paths must not collapse to `sinks[0]`.
    let yaml =
        format!("{RESOURCE}sinks:\n- path: x\n  name: a\n  fsyncInterval: soon\n  type: file\n");
    assert_eq!(
        error(&yaml),
        "sinks[0].fsyncInterval: invalid duration \"soon\": expected number at 0"
    );
    let missing = format!("{RESOURCE}sinks:\n- {{name: a, type: file}}\n");
    assert_eq!(error(&missing), "sinks[0]: missing field `path`");
    let no_type = format!("{RESOURCE}sinks:\n- {{name: a, path: x}}\n");
    assert_eq!(error(&no_type), "sinks[0]: missing field `type`");
    let no_name = format!("{RESOURCE}sinks:\n- {{type: file, path: x}}\n");
    assert_eq!(error(&no_name), "sinks[0]: missing field `name`");
    let bad_name = format!("{RESOURCE}sinks:\n- {{type: file, path: x, name: [a]}}\n");
    assert_eq!(
        error(&bad_name),
        "sinks[0].name: invalid type: sequence, expected a string"
    );
}

#[test]
fn sink_config_deserializes_without_the_reordering_too() {
    // Other callers (tests, future tools) may deserialize a sink directly, `type` anywhere.
    let sink: SinkConfig =
        serde_yaml_ng::from_str("path: x\nname: a\nstart: earliest\ntype: file\nfsync: always\n")
            .unwrap();
    assert_eq!(sink.name, "a");
    assert_eq!(sink.delivery.start, SinkStart::Earliest);
    let SinkKind::File(file) = sink.kind else {
        panic!("a file sink")
    };
    assert_eq!(file.fsync, Fsync::Always);
    let bad = serde_yaml_ng::from_str::<SinkConfig>("path: x\nname: a\ntype: file\nbogus: 1\n")
        .unwrap_err();
    assert!(bad.to_string().contains("unknown field `bogus`"), "{bad}");
}

// ----- semantic rules -------------------------------------------------------------------------

#[test]
fn cluster_name_must_match_the_pattern() {
    assert_eq!(
        error(&base("cluster: {name: Prod_EU}\n")),
        "cluster.name: \"Prod_EU\" must match [a-z0-9][a-z0-9.-]* (lowercase letters, digits, '.' and '-'), at most 253 characters"
    );
    assert!(parse(&base("cluster: {name: -x}\n")).is_err());
    assert!(parse(&base("cluster: {name: ''}\n")).is_err());
    ok(&base("cluster: {name: 0.prod-eu.example}\n"));
}

#[test]
fn resources_and_sinks_are_required() {
    assert_eq!(
        errors("cluster: {name: x}\n"),
        [
            "resources: at least one resource is required",
            "sinks: at least one sink is required"
        ]
    );
}

#[test]
fn resource_needs_kind_or_plural() {
    let yaml = format!("resources:\n- {{group: example.com, version: v1}}\n{SINK}");
    assert_eq!(error(&yaml), "resources[0]: give kind, plural or both");
    ok(&format!(
        "resources:\n- {{group: example.com, plural: databases}}\n{SINK}"
    ));
    // Both given and inconsistent is for discovery to judge.
    ok(&resource("plural: backups"));
}

#[test]
fn resource_names_are_checked_for_form() {
    let yaml = format!(
        "resources:\n- {{group: Example.com, version: '1', kind: 'Data base', plural: Databases}}\n{SINK}"
    );
    assert_eq!(
        errors(&yaml),
        [
            "resources[0].group: \"Example.com\" is not an API group (a lowercase DNS name like example.com, or core)",
            "resources[0].version: \"1\" is not an API version (like v1 or v1beta2)",
            "resources[0].kind: \"Data base\" is not a kind (letters and digits, like Database)",
            "resources[0].plural: \"Databases\" is not a plural resource name (lowercase, like databases)",
        ]
    );
}

#[test]
fn the_same_resource_twice_is_refused() {
    let yaml = format!(
        "resources:\n- {{group: example.com, kind: Database}}\n- {{group: example.com, kind: Database, namespaces: [a]}}\n{SINK}"
    );
    assert_eq!(
        error(&yaml),
        "resources[1]: watches the same resource as resources[0] (\"Database\" in group \"example.com\"); their events would share ids and checkpoints"
    );
    ok(&format!(
        "resources:\n- {{group: example.com, kind: Database}}\n- {{group: other.example, kind: Database}}\n{SINK}"
    ));
}

#[test]
fn namespace_lists_are_checked() {
    assert_eq!(
        errors(&resource("namespaces: [a, B_, a]")),
        [
            "resources[0].namespaces[1]: \"B_\" is not a namespace name",
            "resources[0].namespaces[2]: namespace \"a\" is listed twice",
        ]
    );
    assert_eq!(
        error(&resource("namespaces: []")),
        "resources[0].namespaces: an empty list watches nothing; write `all` for every namespace"
    );
    assert_eq!(
        error(&resource("namespaces: {selector: 'team in payments'}")),
        "resources[0].namespaces.selector: invalid label selector \"team in payments\": \"in\" needs a list in parentheses, like (in (a,b))"
    );
}

#[test]
fn selectors_are_checked() {
    assert_eq!(
        errors(&resource(
            "labelSelector: 'tier gold', fieldSelector: 'metadata.name'"
        )),
        [
            "resources[0].labelSelector: invalid label selector \"tier gold\": expected an operator (=, ==, !=, in, notin, >, <) after \"tier\", found \"gold\"",
            "resources[0].fieldSelector: invalid field selector \"metadata.name\": \"metadata.name\" has no =, == or !=",
        ]
    );
    ok(&resource(
        "labelSelector: 'tier in (gold,silver),!legacy', fieldSelector: 'metadata.name!=scratch'",
    ));
}

#[test]
fn redact_entries_must_be_json_pointers() {
    assert_eq!(
        errors(&resource(
            "redact: [/spec/password, spec/token, '/a~2', '']"
        )),
        [
            "resources[0].redact[1]: \"spec/token\" is not a JSON pointer: it must start with '/', like /spec/password",
            "resources[0].redact[2]: \"/a~2\" is not a JSON pointer: '~' must be followed by 0 ('~') or 1 ('/')",
            "resources[0].redact[3]: \"\" would redact the whole object; use payload: reference to send no object",
        ]
    );
}

#[test]
fn empty_event_lists_and_bad_type_prefixes_are_refused() {
    assert_eq!(
        errors(&resource("events: [], typePrefix: 'dev..herald'")),
        [
            "resources[0].events: an empty list emits nothing; omit the key for all three",
            "resources[0].typePrefix: \"dev..herald\" is not a reverse-DNS prefix (dot-separated words of letters, digits, '-' and '_', like dev.herald.resource)",
        ]
    );
}

#[test]
fn sink_names_must_match_the_pattern_and_be_unique() {
    let yaml = format!(
        "{RESOURCE}sinks:\n- {{name: archive, type: file, path: a}}\n- {{name: Archive, type: file, path: b}}\n- {{name: archive, type: file, path: c}}\n"
    );
    assert_eq!(
        errors(&yaml),
        [
            "sinks[1].name: \"Archive\" must match [a-z0-9][a-z0-9-]* (lowercase letters, digits and '-'), at most 63 characters",
            "sinks[2].name: duplicate sink name \"archive\" (also sinks[0])",
        ]
    );
}

#[test]
fn file_sink_rules() {
    let yaml = format!(
        "{RESOURCE}sinks:\n\
         - {{name: a, type: file, path: x, fsyncInterval: 0s}}\n\
         - {{name: b, type: file, path: x}}\n\
         - {{name: c, type: file, path: '-', rotate: {{maxSize: 0B, maxFiles: 0}}}}\n\
         - {{name: d, type: file, path: y, fsync: always, fsyncInterval: 0s}}\n"
    );
    assert_eq!(
        errors(&yaml),
        [
            "sinks[0].fsyncInterval: must be greater than 0s; use fsync: always to sync every batch",
            "sinks[1].path: \"x\" is also the path of sinks[0]; two sinks cannot write one file",
            "sinks[2].rotate: stdout (path: -) cannot be rotated",
            "sinks[2].rotate.maxSize: must be greater than 0B",
            "sinks[2].rotate.maxFiles: must be at least 1",
        ]
    );
}

#[test]
fn one_file_per_file_sink_after_normalisation() {
    let cwd = std::env::current_dir().unwrap();
    let absolute = cwd.join("x.jsonl");
    let yaml = format!(
        "{RESOURCE}sinks:\n\
         - {{name: a, type: file, path: x.jsonl}}\n\
         - {{name: b, type: file, path: ./x.jsonl}}\n\
         - {{name: c, type: file, path: 'out/../x.jsonl'}}\n\
         - {{name: d, type: file, path: '{}'}}\n\
         - {{name: e, type: file, path: ./-}}\n\
         - {{name: f, type: file, path: y/x.jsonl}}\n",
        absolute.display()
    );
    assert_eq!(
        errors(&yaml),
        [
            "sinks[1].path: \"./x.jsonl\" is the same file as \"x.jsonl\", the path of sinks[0]; two sinks cannot write one file",
            "sinks[2].path: \"out/../x.jsonl\" is the same file as \"x.jsonl\", the path of sinks[0]; two sinks cannot write one file",
            &format!(
                "sinks[3].path: {absolute:?} is the same file as \"x.jsonl\", the path of sinks[0]; two sinks cannot write one file"
            ),
        ]
    );
    // `./-` is a file named `-`, not stdout, so it shares nothing with `-`.
    ok(&format!(
        "{RESOURCE}sinks:\n- {{name: a, type: file, path: '-'}}\n- {{name: b, type: file, path: ./-}}\n"
    ));
}

#[test]
fn durations_and_sizes_have_upper_bounds() {
    let absurd = "100000000000days";
    let cases = [
        (
            base(&format!("journal: {{flushInterval: {absurd}}}\n")),
            "journal.flushInterval: must be at most 10s: appended events wait up to this long before any sink sees them",
        ),
        (
            base("journal: {retain: 3651days}\n"),
            "journal.retain: must be at most 3650d: events are kept on disk that long",
        ),
        (
            sink(&format!("fsyncInterval: {absurd}")),
            "sinks[0].fsyncInterval: must be at most 1h: a crash may lose, and the journal re-send, up to this window",
        ),
        (
            sink("rotate: {maxSize: 2TiB}"),
            "sinks[0].rotate.maxSize: must be at most 1TiB; omit rotate to never rotate",
        ),
        (
            format!(
                "{RESOURCE}sinks:\n- {{name: h, type: webhook, url: 'http://r.example', timeout: 61m, maxAge: {absurd}}}\n"
            ),
            "sinks[0].timeout: must be at most 1h: an unanswered request is better retried",
        ),
        (
            format!(
                "{RESOURCE}sinks:\n- {{name: k, type: kafka, brokers: ['k:9092'], topic: t, messageTimeout: 2h}}\n"
            ),
            "sinks[0].messageTimeout: must be at most 1h: a dead cluster must show up as a retrying sink",
        ),
        (
            format!(
                "{RESOURCE}sinks:\n- {{name: n, type: nats, servers: ['nats://n:4222'], subject: s, connectTimeout: 2h, ackTimeout: 2h}}\n"
            ),
            "sinks[0].connectTimeout: must be at most 1h: an unanswered server is better retried",
        ),
        (
            format!(
                "{RESOURCE}sinks:\n- {{name: n, type: nats, servers: ['nats://n:4222'], subject: s, jetstream: {{stream: S, create: {{subjects: [s], duplicateWindow: 8d, maxAge: {absurd}}}}}}}\n"
            ),
            "sinks[0].jetstream.create.duplicateWindow: must be at most 7d: the server holds every id of the window in memory",
        ),
    ];
    for (yaml, first) in cases {
        let all = errors(&yaml);
        assert_eq!(all.first().map(String::as_str), Some(first), "{yaml}");
    }
    // The second problems of the sinks with two.
    assert!(
        errors(&format!(
            "{RESOURCE}sinks:\n- {{name: h, type: webhook, url: 'http://r.example', maxAge: {absurd}}}\n"
        ))
        .contains(&"sinks[0].maxAge: must be at most 3650d: omit it to retry without limit".to_owned())
    );
    assert!(
        errors(&format!(
            "{RESOURCE}sinks:\n- {{name: n, type: nats, servers: ['nats://n:4222'], subject: s, jetstream: {{stream: S, create: {{subjects: [s], maxAge: {absurd}}}}}}}\n"
        ))
        .contains(&"sinks[0].jetstream.create.maxAge: must be at most 3650d: omit it to keep messages until other limits apply".to_owned())
    );
    assert!(
        errors(&format!(
            "{RESOURCE}sinks:\n- {{name: n, type: nats, servers: ['nats://n:4222'], subject: s, ackTimeout: 2h}}\n"
        ))
        .contains(&"sinks[0].ackTimeout: must be at most 1h: an unanswered server is better retried".to_owned())
    );
    // Each bound itself is accepted.
    ok(&format!(
        "{RESOURCE}sinks:\n\
         - {{name: a, type: file, path: a, fsyncInterval: 1h, rotate: {{maxSize: 1TiB}}}}\n\
         - {{name: h, type: webhook, url: 'http://r.example', timeout: 1h, maxAge: 3650d}}\n\
         - {{name: k, type: kafka, brokers: ['k:9092'], topic: t, messageTimeout: 1h}}\n\
         - {{name: n, type: nats, servers: ['nats://n:4222'], subject: s, connectTimeout: 1h, ackTimeout: 1h, jetstream: {{stream: S, create: {{subjects: [s], duplicateWindow: 7d, maxAge: 3650d}}}}}}\n\
         journal: {{flushInterval: 10s, retain: 3650d}}\n"
    ));
}

// ----- secrets ----------------------------------------------------------------------------------

/// The problems `check_secrets` finds in `yaml` (valid otherwise), `path: message` each.
fn secret_errors(yaml: &str) -> Vec<String> {
    match ok(yaml).check_secrets_with(&env) {
        Ok(()) => Vec::new(),
        Err(ConfigError::Invalid { errors }) => errors.iter().map(ToString::to_string).collect(),
        Err(e) => panic!("unexpected error {e}"),
    }
}

#[test]
fn every_secret_reference_is_resolved() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let token = dir.path().join("token");
    std::fs::write(&token, "t0ken\n").unwrap();
    let not_whsec = dir.path().join("not-whsec");
    std::fs::write(&not_whsec, "not base64!\n").unwrap();
    let (missing, token, not_whsec) = (
        missing.display().to_string(),
        token.display().to_string(),
        not_whsec.display().to_string(),
    );
    let yaml = format!(
        "{RESOURCE}sinks:\n\
         - {{name: archive, type: file, path: x}}\n\
         - {{name: a, type: webhook, url: 'http://r.example', auth: {{bearer: '${{UNSET}}'}}, signing: {{secret: {{fromFile: '{missing}'}}}}}}\n\
         - {{name: b, type: webhook, url: 'http://r.example', auth: {{basic: {{username: u, password: '${{EMPTY}}'}}}}, signing: {{secret: {{fromFile: '{not_whsec}'}}}}}}\n\
         - {{name: c, type: kafka, brokers: ['k:9092'], topic: t, secretProperties: {{sasl.password: '${{UNSET}}', ssl.key.password: {{fromFile: '{token}'}}}}}}\n\
         - {{name: d, type: nats, servers: ['nats://n:4222'], subject: s, auth: {{token: '${{UNSET}}'}}}}\n\
         - {{name: e, type: nats, servers: ['nats://n:4222'], subject: s, auth: {{user: u, password: '${{UNSET}}'}}}}\n\
         - {{name: f, type: nats, servers: ['nats://n:4222'], subject: s, auth: {{nkeySeed: {{fromFile: '{missing}'}}}}}}\n\
         - {{name: g, type: nats, servers: ['nats://n:4222'], subject: s, auth: {{credentialsFile: '{missing}'}}}}\n\
         admin: {{token: '${{UNSET}}'}}\n"
    );
    assert_eq!(
        secret_errors(&yaml),
        [
            "sinks[1].auth.bearer: environment variable \"UNSET\" is not set".to_owned(),
            format!(
                "sinks[1].signing.secret: cannot read secret file {missing}: No such file or directory (os error 2)"
            ),
            "sinks[2].auth.basic.password: secret from environment variable \"EMPTY\" is empty"
                .to_owned(),
            "sinks[2].signing.secret: invalid sink configuration: the signing secret must be whsec_ followed by base64 (Standard Webhooks)".to_owned(),
            "sinks[3].secretProperties.sasl.password: environment variable \"UNSET\" is not set"
                .to_owned(),
            "sinks[4].auth.token: environment variable \"UNSET\" is not set".to_owned(),
            "sinks[5].auth.password: environment variable \"UNSET\" is not set".to_owned(),
            format!(
                "sinks[6].auth.nkeySeed: cannot read secret file {missing}: No such file or directory (os error 2)"
            ),
            format!(
                "sinks[7].auth.credentialsFile: cannot read credentials file {missing}: No such file or directory (os error 2)"
            ),
            "admin.token: environment variable \"UNSET\" is not set".to_owned(),
        ]
    );
    // Resolvable secrets pass, and no message ever holds a secret's value.
    assert!(secret_errors(&format!(
        "{RESOURCE}sinks:\n- {{name: a, type: webhook, url: 'http://r.example', auth: {{bearer: {{fromFile: '{token}'}}}}}}\nadmin: {{token: '${{STATE}}'}}\n"
    ))
    .is_empty());
    assert!(!format!("{:?}", secret_errors(&yaml)).contains("t0ken"));
}

#[test]
fn routes_must_name_known_sinks() {
    assert_eq!(
        error(&base(
            "routes:\n- {events: [deleted], sinks: [archive, archiv]}\n"
        )),
        "routes[0].sinks[1]: unknown sink \"archiv\""
    );
    assert_eq!(
        error(&base("routes:\n- {sinks: []}\n")),
        "routes[0].sinks: name at least one sink"
    );
    assert_eq!(
        error(&base("routes:\n- {events: [deleted]}\n")),
        "routes[0]: missing field `sinks`"
    );
    assert_eq!(
        error(&base("routes: []\n")),
        "routes: an empty list routes nothing; omit the key to send every event to every sink"
    );
}

#[test]
fn route_resources_must_name_a_configured_resource() {
    // `kind: Database` only: its plural is unknown until discovery, so a plural may match.
    ok(&base(
        "routes:\n- {resources: [databases.example.com, Database.example.com, '*'], sinks: [archive]}\n",
    ));
    assert_eq!(
        errors(&base(
            "routes:\n- {resources: [Backup.example.com, databases.example.org, 'a b'], sinks: [archive]}\n"
        )),
        [
            "routes[0].resources[0]: \"Backup.example.com\" matches no configured resource",
            "routes[0].resources[1]: \"databases.example.org\" matches no configured resource",
            "routes[0].resources[2]: invalid resource \"a b\": expected plural.group (databases.example.com), Kind.group (Database.example.com) or *",
        ]
    );
    let both = format!(
        "resources:\n- {{group: example.com, kind: Database, plural: databases}}\n{SINK}routes:\n- {{resources: [database.example.com], sinks: [archive]}}\n"
    );
    assert_eq!(
        error(&both),
        "routes[0].resources[0]: \"database.example.com\" matches no configured resource"
    );
    let core = format!(
        "resources:\n- {{group: '', plural: configmaps}}\n{SINK}routes:\n- {{resources: [configmaps.core, configmaps], sinks: [archive]}}\n"
    );
    ok(&core);
}

#[test]
fn journal_counts_must_be_positive() {
    assert_eq!(
        errors(&base("journal: {flushEntries: 0, maxBacklog: 0}\n")),
        [
            "journal.flushEntries: must be at least 1",
            "journal.maxBacklog: must be at least 1"
        ]
    );
}

#[test]
fn reports_every_semantic_problem_at_once() {
    let yaml = r"
cluster: {name: PROD}
resources:
  - {group: example.com}
  - {group: example.com, kind: Backup, redact: [spec]}
sinks:
  - {name: archive, type: file, path: '${DATA_DIR}/a'}
  - {name: archive, type: file, path: b}
routes:
  - {sinks: [archiv]}
";
    // The same lines as docs/configuration.md shows.
    assert_eq!(
        errors(yaml),
        [
            "sinks[0].path: environment variable \"DATA_DIR\" is not set",
            "cluster.name: \"PROD\" must match [a-z0-9][a-z0-9.-]* (lowercase letters, digits, '.' and '-'), at most 253 characters",
            "resources[0]: give kind, plural or both",
            "resources[1].redact[0]: \"spec\" is not a JSON pointer: it must start with '/', like /spec/password",
            "sinks[1].name: duplicate sink name \"archive\" (also sinks[0])",
            "routes[0].sinks[0]: unknown sink \"archiv\"",
        ]
    );
}

// ----- durations and sizes ----------------------------------------------------------------------

#[test]
fn durations_and_sizes_need_units() {
    let config = ok(&format!(
        "{RESOURCE}sinks:\n- {{name: a, type: file, path: x, fsyncInterval: 250ms, rotate: {{maxSize: 512 KiB}}}}\njournal: {{flushInterval: 1s, retain: 1h 30m}}\n"
    ));
    let SinkKind::File(file) = &config.sinks[0].kind else {
        panic!("a file sink")
    };
    assert_eq!(file.fsync_interval, Duration::from_millis(250));
    assert_eq!(
        file.rotate,
        Some(Rotate {
            max_size: 512 * 1024,
            max_files: 5
        })
    );
    assert_eq!(config.journal.flush_interval, Duration::from_secs(1));
    assert_eq!(config.journal.retain, Duration::from_secs(5400));

    for (yaml, expected) in [
        (
            sink("fsyncInterval: 10"),
            "sinks[0].fsyncInterval: invalid type: integer `10`, expected a duration with a unit, like 500ms, 10s or 1h",
        ),
        (
            sink("fsyncInterval: '10'"),
            "sinks[0].fsyncInterval: invalid duration \"10\": time unit needed, for example 10sec or 10ms",
        ),
        (
            base("journal: {retain: 3 fortnights}\n"),
            "journal.retain: invalid duration \"3 fortnights\": unknown time unit \"fortnights\", supported units: ns, us/µs, ms, sec, min, hours, days, weeks, months, years (and few variations)",
        ),
        (
            sink("rotate: {maxSize: 64}"),
            "sinks[0].rotate.maxSize: invalid type: integer `64`, expected a size with a unit, like 64MiB, 512KiB or 1GB",
        ),
        (
            sink("rotate: {maxSize: 64 MiBs}"),
            "sinks[0].rotate.maxSize: invalid size \"64 MiBs\": unknown unit \"MiBs\", expected one of B, KB, MB, GB, TB, KiB, MiB, GiB, TiB, Ki, Mi, Gi, Ti",
        ),
        (
            sink("rotate: {maxFiles: 2}"),
            "sinks[0].rotate: missing field `maxSize`",
        ),
    ] {
        assert_eq!(error(&yaml), expected, "{yaml}");
    }
}

// ----- interpolation ----------------------------------------------------------------------------

#[test]
fn expands_variables_in_path_fields() {
    let config = ok(&format!(
        "cluster:\n  kubeconfig: {{path: '${{KUBE}}/config'}}\n{RESOURCE}sinks:\n- {{name: a, type: file, path: '${{STATE}}/events.jsonl'}}\njournal: {{path: '${{STATE}}/journal'}}\n"
    ));
    assert_eq!(
        config.cluster.source,
        ClusterSource::Kubeconfig(KubeconfigSource {
            path: Some("/etc/kube/config".into()),
            context: None
        })
    );
    let SinkKind::File(file) = &config.sinks[0].kind else {
        panic!("a file sink")
    };
    assert_eq!(file.path, PathBuf::from("/var/lib/herald/events.jsonl"));
    assert_eq!(
        config.journal.path,
        PathBuf::from("/var/lib/herald/journal")
    );

    let embedded = ok(&base(
        "cluster:\n  embedded: {load: '${STATE}/demo.yaml'}\n",
    ));
    assert_eq!(
        embedded.cluster.source,
        ClusterSource::Embedded(EmbeddedSource {
            load: Some("/var/lib/herald/demo.yaml".into())
        })
    );
}

#[test]
fn unset_variables_name_the_field_and_the_variable() {
    let yaml = format!(
        "cluster:\n  embedded: {{load: '${{DEMO}}/x.yaml'}}\n{RESOURCE}sinks:\n- {{name: a, type: file, path: '${{DATA_DIR}}/events.jsonl'}}\njournal: {{path: '${{EMPTY}}/journal'}}\n"
    );
    assert_eq!(
        errors(&yaml),
        [
            "cluster.embedded.load: environment variable \"DEMO\" is not set",
            "sinks[0].path: environment variable \"DATA_DIR\" is not set",
            "journal.path: environment variable \"EMPTY\" is empty",
        ]
    );
}

#[test]
fn other_fields_are_not_expanded() {
    let config = ok(&base("cluster:\n  kubeconfig: {context: '${STATE}'}\n"));
    assert_eq!(
        config.cluster.source,
        ClusterSource::Kubeconfig(KubeconfigSource {
            path: None,
            context: Some("${STATE}".into())
        })
    );
}

#[test]
fn admin_listen_expands_variables_and_brackets_ipv6() {
    // The chart's value: the pod's own IP from the downward API, unquoted or quoted.
    for (listen, expected) in [
        ("${POD_IP}:9464", "10.1.2.3:9464"),
        ("'${POD_IP}:9464'", "10.1.2.3:9464"),
        ("\"${POD_IP6}:9464\"", "[fd00::5]:9464"),
        ("'[${POD_IP6}]:9464'", "[fd00::5]:9464"),
        // A plain address is read as written.
        ("127.0.0.1:9464", "127.0.0.1:9464"),
    ] {
        let config = ok(&base(&format!("admin:\n  listen: {listen}\n")));
        assert_eq!(config.admin.listen.to_string(), expected, "{listen}");
    }
}

#[test]
fn admin_listen_errors_name_the_field() {
    assert_eq!(
        error(&base("admin:\n  listen: ${NOPE}:9464\n")),
        r#"admin.listen: environment variable "NOPE" is not set"#
    );
    assert_eq!(
        error(&base("admin:\n  listen: ${EMPTY}:9464\n")),
        r#"admin.listen: environment variable "EMPTY" is empty"#
    );
    assert_eq!(
        error(&base("admin:\n  listen: ${STATE}:9464\n")),
        r#"admin.listen: "${STATE}:9464" expands to "/var/lib/herald:9464", which is not an IP address and port (like 10.0.0.7:9464 or [fd00::7]:9464)"#
    );
    // Reported with the other problems of the file, not instead of them.
    assert_eq!(
        errors(&format!(
            "{RESOURCE}sinks:\n- {{name: a, type: file, path: '${{DATA_DIR}}/e.jsonl'}}\nadmin:\n  listen: ${{POD_IP}}\n"
        )),
        [
            r#"admin.listen: "${POD_IP}" expands to "10.1.2.3", which is not an IP address and port (like 10.0.0.7:9464 or [fd00::7]:9464)"#,
            r#"sinks[0].path: environment variable "DATA_DIR" is not set"#,
        ]
    );
}

// ----- documents, files and errors --------------------------------------------------------------

#[test]
fn malformed_or_empty_documents_are_reported_at_the_root() {
    assert_eq!(error(""), ".: the configuration is empty");
    assert_eq!(error("# only a comment\n"), ".: the configuration is empty");
    assert_eq!(
        error("- a\n"),
        ".: invalid type: sequence, expected struct Config"
    );
    let syntax = error("resources: [\n");
    assert!(
        syntax.starts_with(".: ") && syntax.contains("line 2 column 1"),
        "{syntax}"
    );
}

#[test]
fn yaml_anchors_and_merge_keys_work() {
    let config = ok(r"
resources:
  - &db {group: example.com, kind: Database, payload: reference}
  - {<<: *db, kind: Backup}
sinks:
  - {name: archive, type: file, path: x}
");
    assert!(config.resources[1].payload.is_reference());
    assert_eq!(config.resources[1].kind.as_deref(), Some("Backup"));
}

#[test]
fn config_error_displays_every_problem_on_its_own_line() {
    let err = parse("cluster: {name: X}\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid configuration:\n  cluster.name: \"X\" must match [a-z0-9][a-z0-9.-]* (lowercase letters, digits, '.' and '-'), at most 253 characters\n  resources: at least one resource is required\n  sinks: at least one sink is required"
    );
    let field = FieldError {
        path: "routes[0].sinks[1]".into(),
        message: "unknown sink \"archiv\"".into(),
    };
    assert_eq!(
        field.to_string(),
        "routes[0].sinks[1]: unknown sink \"archiv\""
    );
}

#[test]
fn load_reads_a_file_and_names_it_when_it_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("herald.yaml");
    std::fs::write(&path, base("")).unwrap();
    assert_eq!(load(&path).unwrap().sinks[0].name, "archive");
    let from_trait: Config = base("").parse().unwrap();
    assert_eq!(from_trait.sinks[0].name, "archive");

    let missing = dir.path().join("nope.yaml");
    let err = load(&missing).unwrap_err();
    assert!(matches!(err, ConfigError::ReadFailed { .. }));
    assert_eq!(
        err.to_string(),
        format!("cannot read configuration file {}", missing.display())
    );
}

// ----- the user documentation -------------------------------------------------------------------

const DOCS: &str = include_str!("../../docs/configuration.md");

/// Every key path in the JSON schema: `cluster.name`, `resources[].labelSelector`, `sinks[].type`.
fn schema_paths() -> BTreeSet<String> {
    fn walk(node: &Value, prefix: &str, defs: &Value, out: &mut BTreeSet<String>) {
        if let Some(name) = node
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix("#/$defs/"))
        {
            walk(&defs[name], prefix, defs, out);
        }
        if let Some(properties) = node.get("properties").and_then(Value::as_object) {
            for (key, value) in properties {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                out.insert(path.clone());
                walk(value, &path, defs, out);
            }
        }
        if let Some(items) = node.get("items") {
            walk(items, &format!("{prefix}[]"), defs, out);
        }
        for combinator in ["oneOf", "anyOf", "allOf"] {
            for branch in node
                .get(combinator)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                walk(branch, prefix, defs, out);
            }
        }
    }
    let schema = schemars::schema_for!(Config);
    let root = schema.as_value();
    let mut out = BTreeSet::new();
    walk(root, "", &root["$defs"], &mut out);
    out
}

/// The key in the first cell of each reference-table row (`` | `journal.path` | … ``).
fn documented_paths() -> BTreeSet<String> {
    DOCS.lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(key, _)| key.to_owned())
        .collect()
}

#[test]
fn docs_describe_every_key() {
    let schema = schema_paths();
    assert!(schema.contains("resources[].labelSelector"), "{schema:#?}");
    assert!(schema.contains("sinks[].rotate.maxSize"), "{schema:#?}");
    assert!(
        schema.contains("resources[].namespaces.selector"),
        "{schema:#?}"
    );
    let documented = documented_paths();
    let missing: Vec<_> = schema.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "docs/configuration.md has no table row for {missing:?}"
    );
    let stale: Vec<_> = documented.difference(&schema).collect();
    assert!(
        stale.is_empty(),
        "docs/configuration.md documents keys that do not exist: {stale:?}"
    );
    // key | type | default | meaning | example, none left empty.
    for row in DOCS.lines().filter(|line| line.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert!(
            cells.len() == 7 && cells[1..6].iter().all(|cell| !cell.is_empty()),
            "row needs key, type, default, meaning and example: {row}"
        );
    }
}

#[test]
fn docs_complete_example_parses() {
    let section = DOCS
        .split_once("\n## Complete example")
        .map(|(_, rest)| rest)
        .expect("a \"## Complete example\" section");
    let yaml = section
        .split_once("```yaml\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .map(|(yaml, _)| yaml)
        .expect("a ```yaml block in it");
    // Whatever variables the example uses are set here.
    let config = from_str_with_env(yaml, &|_| Ok("/srv/herald".to_owned()))
        .unwrap_or_else(|e| panic!("the complete example does not parse: {e}"));
    assert!(!config.resources.is_empty());
    assert!(!config.sinks.is_empty());
}

#[test]
fn every_sink_type_is_dispatched() {
    // `SinkConfig`'s streaming deserializer has its own dispatch table; the schema derives from
    // `SinkKind`. Both must know the same types.
    let schema = schemars::schema_for!(Config);
    let variants: Vec<&str> = schema.as_value()["$defs"]["SinkConfig"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["properties"]["type"]["const"].as_str().unwrap())
        .collect();
    for ty in &variants {
        let required = match *ty {
            "file" => "path: x",
            "webhook" => "url: 'http://127.0.0.1:8080/'",
            "kafka" => "brokers: ['127.0.0.1:9092'], topic: herald",
            "nats" => "servers: ['nats://127.0.0.1:4222'], subject: herald",
            other => panic!("no minimal settings for sink type {other}"),
        };
        let yaml = format!("{RESOURCE}sinks:\n- {{name: a, type: {ty}, {required}}}\n");
        let config = ok(&yaml);
        assert_eq!(config.sinks[0].kind.sink_type().as_str(), *ty);
    }
    assert_eq!(variants, ["file", "webhook", "kafka", "nats"]);
}

// ----- webhook sinks ----------------------------------------------------------------------------

/// A valid configuration whose only sink is a webhook with `fields` added.
fn webhook(fields: &str) -> String {
    format!(
        "{RESOURCE}sinks:\n- {{name: hook, type: webhook, url: 'https://events.example.com/herald', {fields}}}\n"
    )
}

fn webhook_of(config: &Config) -> &WebhookConfig {
    match &config.sinks[0].kind {
        SinkKind::Webhook(w) => w,
        other => panic!("not a webhook sink: {other:?}"),
    }
}

#[test]
fn webhook_sink_defaults() {
    let config = ok(&format!(
        "{RESOURCE}sinks:\n- {{name: hook, type: webhook, url: 'http://127.0.0.1:8080/events'}}\n"
    ));
    let sink = &config.sinks[0];
    assert_eq!(sink.kind.sink_type(), SinkType::Webhook);
    assert_eq!(sink.kind.sink_type().to_string(), "webhook");
    assert_eq!(sink.delivery.start, SinkStart::Head);
    assert_eq!(sink.delivery.dead_letter_sink, None);
    // Key by key, so that a new webhook key is a change in its crate alone.
    let w = webhook_of(&config);
    assert_eq!(w.url, "http://127.0.0.1:8080/events");
    assert!(w.headers.is_empty());
    assert_eq!(w.auth, None);
    assert_eq!(w.tls, None);
    assert_eq!(w.timeout, Duration::from_secs(10));
    assert_eq!(w.mode, WebhookMode::Binary);
    assert_eq!(w.signing, None);
    assert_eq!(
        sink.delivery,
        DeliveryOptions {
            batch_max_events: Some(100),
            concurrency: Some(8),
            max_attempts: None,
            max_age: None,
            dead_letter_sink: None,
            start: SinkStart::Head,
            rate_limit: None,
            debounce: None,
        }
    );
}

#[test]
fn webhook_sink_reads_every_key() {
    let config = ok(&format!(
        r#"{RESOURCE}sinks:
- name: hook
  type: webhook
  url: https://events.example.com/herald?tenant=a
  headers: {{X-Tenant: payments, X-Trace: "on"}}
  auth: {{bearer: "${{WEBHOOK_TOKEN}}"}}
  tls:
    caFile: ${{STATE}}/ca.pem
    clientCertFile: /etc/herald/client.pem
    clientKeyFile: ${{STATE}}/client-key.pem
  timeout: 2500ms
  mode: batched
  batchMaxEvents: 500
  signing: {{secret: {{fromFile: /run/secrets/whsec}}, hubSignature256: true}}
  concurrency: 16
  maxAttempts: 20
  maxAge: 24h
  deadLetterSink: archive
  start: earliest
- {{name: archive, type: file, path: dead.jsonl}}
"#
    ));
    let w = webhook_of(&config);
    assert_eq!(w.url, "https://events.example.com/herald?tenant=a");
    assert_eq!(
        w.headers.iter().collect::<Vec<_>>(),
        [
            (&"X-Tenant".to_owned(), &"payments".to_owned()),
            (&"X-Trace".to_owned(), &"on".to_owned())
        ]
    );
    assert_eq!(
        w.auth,
        Some(WebhookAuth::Bearer(SecretRef::Env("WEBHOOK_TOKEN".into())))
    );
    assert_eq!(
        w.tls,
        Some(WebhookTls {
            ca_file: Some("/var/lib/herald/ca.pem".into()),
            client_cert_file: Some("/etc/herald/client.pem".into()),
            client_key_file: Some("/var/lib/herald/client-key.pem".into()),
        })
    );
    assert_eq!(w.timeout, Duration::from_millis(2500));
    assert_eq!(w.mode, WebhookMode::Batched);
    let d = &config.sinks[0].delivery;
    assert_eq!(d.batch_max_events, Some(500));
    assert_eq!(
        w.signing,
        Some(WebhookSigning {
            secret: SecretRef::File("/run/secrets/whsec".into()),
            hub_signature_256: true,
        })
    );
    assert_eq!(d.concurrency, Some(16));
    assert_eq!(d.max_attempts, Some(20));
    assert_eq!(d.max_age, Some(Duration::from_secs(86_400)));
    assert_eq!(d.dead_letter_sink.as_deref(), Some("archive"));
    assert_eq!(d.start, SinkStart::Earliest);
    assert_eq!(config.routes[0].sinks, ["hook", "archive"]);
}

#[test]
fn webhook_auth_takes_bearer_basic_or_token_with_secret_references() {
    let basic = ok(&webhook(
        "auth: {basic: {username: herald, password: {fromFile: /run/secrets/pw}}}",
    ));
    assert_eq!(
        webhook_of(&basic).auth,
        Some(WebhookAuth::Basic(WebhookBasicAuth {
            username: "herald".into(),
            password: SecretRef::File("/run/secrets/pw".into()),
        }))
    );
    let literal = error(&webhook("auth: {bearer: hunter2}"));
    assert!(
        literal.starts_with("sinks[0].auth.bearer: secrets must come from the environment"),
        "{literal}"
    );
    assert!(!literal.contains("hunter2"), "{literal}");
    let literal = error(&webhook("auth: {basic: {username: u, password: hunter2}}"));
    assert!(
        literal.starts_with("sinks[0].auth.basic.password: secrets must come from"),
        "{literal}"
    );
    assert!(!literal.contains("hunter2"), "{literal}");
    assert_eq!(
        error(&webhook("auth: {apiKey: '${T}'}")),
        "sinks[0].auth.apiKey: unknown field `apiKey`, expected one of `bearer`, `basic`, `token`"
    );
    let splunk = ok(&webhook(
        "auth: {token: {scheme: Splunk, value: {fromFile: /run/secrets/hec}}}",
    ));
    assert_eq!(
        webhook_of(&splunk).auth,
        Some(WebhookAuth::Token(WebhookTokenAuth {
            scheme: "Splunk".into(),
            value: SecretRef::File("/run/secrets/hec".into()),
        }))
    );
    let literal = error(&webhook("auth: {token: {scheme: Splunk, value: hunter2}}"));
    assert!(
        literal.starts_with("sinks[0].auth.token.value: secrets must come from"),
        "{literal}"
    );
    assert!(!literal.contains("hunter2"), "{literal}");
    assert_eq!(
        error(&webhook(
            "auth: {token: {scheme: 'Splunk key', value: '${T}'}}"
        )),
        "sinks[0].auth.token.scheme: \"Splunk key\" is not an authentication scheme (an HTTP token such as Splunk)"
    );
    for both_or_none in [
        "auth: {bearer: '${T}', basic: {username: u, password: '${P}'}}",
        "auth: {bearer: '${T}', token: {scheme: Splunk, value: '${T}'}}",
        "auth: {}",
    ] {
        assert_eq!(
            error(&webhook(both_or_none)),
            "sinks[0].auth: give exactly one of bearer, basic and token",
            "{both_or_none}"
        );
    }
    assert_eq!(
        error(&webhook("auth: {basic: {user: u, password: '${P}'}}")),
        "sinks[0].auth.basic.user: unknown field `user`, expected `username` or `password`"
    );
    let secret = error(&webhook(
        "signing: {secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}",
    ));
    assert!(
        secret.starts_with("sinks[0].signing.secret: secrets must come from"),
        "{secret}"
    );
    assert!(!secret.contains("MfKQ"), "{secret}");
}

#[test]
fn webhook_keys_are_spelled_exactly() {
    for (yaml, expected) in [
        (
            webhook("mode: batch"),
            "sinks[0].mode: unknown variant `batch`, expected one of `binary`, `structured`, `batched`",
        ),
        (
            webhook("signing: {secret: '${S}', hubSignature: true}"),
            "sinks[0].signing.hubSignature: unknown field `hubSignature`, expected `secret` or `hubSignature256`",
        ),
        (
            webhook("tls: {ca: /x}"),
            "sinks[0].tls.ca: unknown field `ca`, expected one of `caFile`, `clientCertFile`, `clientKeyFile`",
        ),
        (
            webhook("timeout: 10"),
            "sinks[0].timeout: invalid type: integer `10`, expected a duration with a unit, like 500ms, 10s or 1h",
        ),
        (
            webhook("maxAge: forever"),
            "sinks[0].maxAge: invalid duration \"forever\": expected number at 0",
        ),
        (
            webhook("headers: {X-Count: 5}"),
            "sinks[0].headers.X-Count: invalid type: integer `5`, expected a string",
        ),
        (
            format!("{RESOURCE}sinks:\n- {{name: hook, type: webhook}}\n"),
            "sinks[0]: missing field `url`",
        ),
    ] {
        assert_eq!(error(&yaml), expected, "{yaml}");
    }
}

#[test]
fn webhook_urls_must_be_http_or_https_without_credentials() {
    for url in [
        "http://127.0.0.1:8080/events",
        "https://events.example.com",
        "HTTPS://events.example.com:8443/a?b=c#d",
        "http://[::1]:9000/x",
    ] {
        ok(&format!(
            "{RESOURCE}sinks:\n- {{name: hook, type: webhook, url: '{url}'}}\n"
        ));
    }
    for (url, expected) in [
        (
            "ftp://events.example.com/",
            "sinks[0].url: \"ftp://events.example.com/\" is not an http or https URL (like https://events.example.com/herald)",
        ),
        (
            "events.example.com/herald",
            "sinks[0].url: \"events.example.com/herald\" is not an http or https URL (like https://events.example.com/herald)",
        ),
        (
            "https:///path",
            "sinks[0].url: \"https:///path\" has no host",
        ),
        (
            "http://:8080/",
            "sinks[0].url: \"http://:8080/\" has no host",
        ),
        (
            "https://events.example.com/a b",
            "sinks[0].url: \"https://events.example.com/a b\" contains spaces or control characters",
        ),
        (
            "https://herald:hunter2@events.example.com/",
            "sinks[0].url: credentials in the URL are refused; use auth, whose secrets are references",
        ),
    ] {
        let yaml = format!("{RESOURCE}sinks:\n- {{name: hook, type: webhook, url: '{url}'}}\n");
        assert_eq!(error(&yaml), expected, "{url}");
    }
}

#[test]
fn webhook_sink_rules() {
    let yaml = webhook(
        "headers: {Content-Type: text/plain, ce-id: x, Authorization: Bearer x, X-A: a, x-a: b, 'bad name': c}, \
         auth: {basic: {username: 'a:b', password: '${P}'}}, \
         tls: {clientCertFile: /c.pem, caFile: ''}, \
         timeout: 0s, batchMaxEvents: 0, concurrency: 0, maxAttempts: 0, maxAge: 0s",
    );
    assert_eq!(
        errors(&yaml),
        [
            "sinks[0].headers.Authorization: use auth for the Authorization header; its secrets are references",
            "sinks[0].headers.Content-Type: \"Content-Type\" is set by herald and cannot be configured",
            "sinks[0].headers.bad name: \"bad name\" is not an HTTP header name",
            "sinks[0].headers.ce-id: \"ce-id\" is set by herald and cannot be configured",
            "sinks[0].headers.x-a: header names ignore case: \"x-a\" repeats \"X-A\"",
            "sinks[0].auth.basic.username: \"a:b\" cannot be a basic auth user name (no ':' or control characters)",
            "sinks[0].tls.caFile: must not be empty",
            "sinks[0].tls.clientKeyFile: required with clientCertFile",
            "sinks[0].timeout: must be greater than 0s",
            "sinks[0].batchMaxEvents: must be at least 1",
            "sinks[0].concurrency: must be at least 1",
            "sinks[0].maxAttempts: must be at least 1; omit it to retry without limit",
            "sinks[0].maxAge: must be greater than 0s; omit it to retry without limit",
        ]
    );
    assert_eq!(
        error(&webhook("tls: {clientKeyFile: /k.pem}")),
        "sinks[0].tls.clientCertFile: required with clientKeyFile"
    );
    assert_eq!(
        error(&webhook("auth: {basic: {username: '', password: '${P}'}}")),
        "sinks[0].auth.basic.username: must not be empty"
    );
    assert_eq!(
        errors(&webhook(
            "headers: {herald-error-code: x, webhook-id: y, X-Ok: \"a\\u0001\", X-Tab: \"a\\tb\"}"
        )),
        [
            "sinks[0].headers.X-Ok: the value of \"X-Ok\" contains a control character",
            "sinks[0].headers.herald-error-code: \"herald-error-code\" is set by herald and cannot be configured",
            "sinks[0].headers.webhook-id: \"webhook-id\" is set by herald and cannot be configured",
        ]
    );
}

#[test]
fn dead_letter_sinks_must_exist_and_not_circle() {
    let sinks = |a: &str, b: &str| {
        format!(
            "{RESOURCE}sinks:\n\
             - {{name: a, type: webhook, url: 'http://127.0.0.1:1/', {a}}}\n\
             - {{name: b, type: webhook, url: 'http://127.0.0.1:2/', {b}}}\n\
             - {{name: c, type: file, path: c.jsonl}}\n"
        )
    };
    let config = ok(&sinks("deadLetterSink: b", "deadLetterSink: c"));
    assert_eq!(
        config.sinks[0].delivery.dead_letter_sink.as_deref(),
        Some("b")
    );
    assert_eq!(config.sinks[2].delivery.dead_letter_sink.as_deref(), None);
    assert_eq!(
        error(&sinks("deadLetterSink: a", "start: head")),
        "sinks[0].deadLetterSink: a sink cannot be its own dead-letter sink"
    );
    assert_eq!(
        error(&sinks("deadLetterSink: archiv", "start: head")),
        "sinks[0].deadLetterSink: unknown sink \"archiv\""
    );
    assert_eq!(
        errors(&sinks("deadLetterSink: b", "deadLetterSink: a")),
        [
            "sinks[0].deadLetterSink: dead letters would circle: a -> b -> a",
            "sinks[1].deadLetterSink: dead letters would circle: b -> a -> b",
        ]
    );
}

#[test]
fn webhook_tls_paths_expand_variables() {
    let config = ok(&webhook("tls: {caFile: '${STATE}/ca.pem'}"));
    assert_eq!(
        webhook_of(&config)
            .tls
            .as_ref()
            .and_then(|t| t.ca_file.clone()),
        Some(PathBuf::from("/var/lib/herald/ca.pem"))
    );
    assert_eq!(
        errors(&webhook(
            "tls: {clientCertFile: '${CERTS}/c.pem', clientKeyFile: '${EMPTY}/k.pem'}"
        )),
        [
            "sinks[0].tls.clientCertFile: environment variable \"CERTS\" is not set",
            "sinks[0].tls.clientKeyFile: environment variable \"EMPTY\" is empty",
        ]
    );
    // Other webhook keys are not paths and are not expanded.
    let config = ok(&webhook("headers: {X-Literal: '${STATE}'}"));
    assert_eq!(webhook_of(&config).headers["X-Literal"], "${STATE}");
}

#[test]
fn webhook_sink_deserializes_without_the_reordering_too() {
    let sink: SinkConfig = serde_yaml_ng::from_str(
        "url: http://127.0.0.1:1/\nname: hook\nmode: structured\ntype: webhook\n",
    )
    .unwrap();
    assert_eq!(sink.name, "hook");
    let SinkKind::Webhook(w) = sink.kind else {
        panic!("a webhook sink")
    };
    assert_eq!(w.mode, WebhookMode::Structured);
}

#[test]
fn docs_webhook_example_parses() {
    let yaml = DOCS
        .split_once("A webhook sink:\n\n```yaml\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .map(|(yaml, _)| yaml)
        .expect("the webhook example in docs/configuration.md");
    let config = from_str_with_env(&format!("{RESOURCE}{yaml}\n"), &|_| Ok("x".to_owned()))
        .unwrap_or_else(|e| panic!("the webhook example does not parse: {e}"));
    assert_eq!(config.sinks[0].kind.sink_type(), SinkType::Webhook);
    assert_eq!(
        config.sinks[0].delivery.dead_letter_sink.as_deref(),
        Some("archive")
    );
}

// ----- kafka and nats sinks ---------------------------------------------------------------------

fn sink_yaml(fields: &str) -> String {
    format!("{RESOURCE}sinks:\n- {{name: bus, {fields}}}\n")
}

#[test]
fn kafka_sink_defaults_and_checks() {
    let config = ok(&sink_yaml(
        "type: kafka, brokers: ['127.0.0.1:9092'], topic: 'herald.{group}.{plural}'",
    ));
    let SinkKind::Kafka(k) = &config.sinks[0].kind else {
        panic!("not kafka")
    };
    assert_eq!(k.mode, herald_sink_kafka::KafkaMode::Binary);
    assert_eq!(k.message_timeout, std::time::Duration::from_secs(30));
    let d = &config.sinks[0].delivery;
    assert_eq!((d.concurrency, d.batch_max_events), (Some(8), Some(256)));
    assert!(!k.tombstones);
    assert_eq!(
        error(&sink_yaml("type: kafka, brokers: ['kafka'], topic: t")),
        "sinks[0].brokers[0]: \"kafka\" is not host:port (like kafka-0.kafka:9092)"
    );
    assert_eq!(
        error(&sink_yaml(
            "type: kafka, brokers: ['k:9092'], topic: t, properties: {sasl.password: hunter2}"
        )),
        "sinks[0].properties.sasl.password: holds a secret: put it in secretProperties as ${VAR} or {fromFile: PATH}"
    );
    assert!(
        error(&sink_yaml(
            "type: kafka, brokers: ['k:9092'], topic: 'a.{name}'"
        ))
        .starts_with("sinks[0].topic: ")
    );
    assert_eq!(
        error(&sink_yaml(
            "type: kafka, brokers: ['k:9092'], topic: t, secretProperties: {sasl.password: hunter2}"
        )),
        "sinks[0].secretProperties.sasl.password: secrets must come from the environment (\"${VAR}\") or a file ({fromFile: /path}), not a literal value"
    );
}

#[test]
fn nats_sink_defaults_and_checks() {
    let config = ok(&sink_yaml(
        "type: nats, servers: ['nats://127.0.0.1:4222'], subject: 'herald.{plural}.{op}', jetstream: {stream: HERALD, create: {subjects: ['herald.>']}}, auth: {user: herald, password: '${NATS_PASSWORD}'}",
    ));
    let SinkKind::Nats(n) = &config.sinks[0].kind else {
        panic!("not nats")
    };
    assert_eq!(n.mode, herald_sink_nats::NatsMode::Structured);
    let js = n.jetstream.as_ref().unwrap();
    let create = js.create.as_ref().unwrap();
    assert_eq!(create.duplicate_window, std::time::Duration::from_secs(120));
    assert_eq!(create.replicas, 1);
    assert!(matches!(
        n.auth,
        Some(herald_sink_nats::NatsAuth::UserPassword { ref user, .. }) if user == "herald"
    ));
    assert_eq!(
        error(&sink_yaml(
            "type: nats, servers: ['http://x:4222'], subject: s"
        )),
        "sinks[0].servers[0]: \"http://x:4222\" is not a NATS URL (nats://host:4222 or tls://host:4222)"
    );
    assert!(
        error(&sink_yaml(
            "type: nats, servers: ['nats://x:4222'], subject: s, auth: {token: '${T}', user: u}"
        ))
        .ends_with("give exactly one of token, user with password, nkeySeed and credentialsFile")
    );
    assert!(
        error(&sink_yaml(
            "type: nats, servers: ['nats://x:4222'], subject: s, jetstream: {stream: a.b}"
        ))
        .starts_with("sinks[0].jetstream.stream: ")
    );
    assert_eq!(
        error(&sink_yaml(
            "type: nats, servers: ['nats://x:4222'], subject: s, tls: {clientCertFile: c.pem}"
        )),
        "sinks[0].tls.clientKeyFile: required with clientCertFile"
    );
}

// ----- filters (`when`, `changed`, `ignoreFields`) ----------------------------------------------

#[test]
fn when_expressions_are_compiled_as_the_file_loads() {
    let c = ok(&resource(
        "when: \"object.status.phase == 'Failed'\", changed: [spec, status.phase], \
         ignoreFields: [status.lastHeartbeatTime, /metadata/annotations/example.com~1x]",
    ));
    let r = &c.resources[0];
    let when = r.when.as_ref().unwrap();
    assert_eq!(when.expr, "object.status.phase == 'Failed'");
    assert_eq!(when.on_error, OnError::Skip);
    assert_eq!(r.changed.len(), 2);
    assert_eq!(
        r.ignore_fields[1].to_string(),
        "metadata.annotations.example.com/x"
    );
    let c = ok(&resource(
        "when: {expr: \"op == 'deleted'\", onError: emit}",
    ));
    assert_eq!(
        c.resources[0].when.as_ref().unwrap().on_error,
        OnError::Emit
    );
}

#[test]
fn when_errors_name_the_path_and_the_position() {
    assert_eq!(
        error(&resource("when: \"object.status.phase ==\"")),
        "resources[0].when: line 1, column 23: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}"
    );
    assert_eq!(
        error(&resource("when: {expr: \"object.spec.x == 1 && objct.y\"}")),
        "resources[0].when: line 1, column 23: unknown variable `objct` (the variables are object, oldObject, op, resync, namespace, name)"
    );
    // A route's expression too, and every problem of the file at once.
    let yaml = format!(
        "{}routes:\n- {{sinks: [archive], when: \"self.x\"}}\n",
        resource("when: \"op = 'created'\"")
    );
    let all = errors(&yaml);
    assert_eq!(all.len(), 2, "{all:#?}");
    assert!(
        all[0].starts_with("resources[0].when: line 1, column 4: "),
        "{all:#?}"
    );
    assert!(
        all[1].starts_with("routes[0].when: line 1, column 1: unknown variable `self`"),
        "{all:#?}"
    );
    assert_eq!(
        error(&resource("changed: [spec..x]")),
        "resources[0].changed[0]: invalid field \"spec..x\": expected dotted keys (status.phase) or a JSON pointer (/metadata/annotations/example.com~1owner)"
    );
    assert_eq!(
        error(&resource("when: {expr: x, onError: drop}")),
        "resources[0].when.onError: unknown variant `drop`, expected `skip` or `emit`"
    );
}

#[test]
fn a_route_reading_old_object_without_that_payload_is_warned_about() {
    let yaml = |payload: &str| {
        format!(
            "resources:\n- {{group: example.com, kind: Database{payload}}}\n{SINK}\
             routes:\n- {{sinks: [archive], when: \"oldObject == null\"}}\n"
        )
    };
    assert_eq!(
        ok(&yaml("")).warnings(),
        [
            "routes[0].when: uses oldObject, but the events of resources[0] do not carry it \
          (its payload lacks oldObject), so oldObject is always null there; add oldObject to \
          resources[0].payload or filter on the resource's own `when`"
        ]
    );
    assert!(
        ok(&yaml(", payload: [object, oldObject]"))
            .warnings()
            .is_empty()
    );
    assert!(
        ok(&resource("when: \"oldObject == null\""))
            .warnings()
            .is_empty()
    );
}

#[test]
fn a_route_reading_object_without_that_payload_is_warned_about() {
    let yaml = |payload: &str| {
        format!(
            "resources:\n- {{group: example.com, kind: Database{payload}}}\n{SINK}\
             routes:\n- {{sinks: [archive], when: \"object.spec.x == 1\"}}\n"
        )
    };
    for payload in [", payload: reference", ", payload: [patch]"] {
        assert_eq!(
            ok(&yaml(payload)).warnings(),
            [
                "routes[0].when: uses object, but the events of resources[0] do not carry it \
                 (its payload lacks object), so object is always null there; add object to \
                 resources[0].payload or filter on the resource's own `when`"
            ],
            "{payload}"
        );
    }
    assert!(ok(&yaml("")).warnings().is_empty());
    assert!(ok(&yaml(", payload: [object]")).warnings().is_empty());
}

#[test]
fn skip_status_only_updates_with_a_status_filter_is_warned_about() {
    let warnings = ok(&resource(
        "skipStatusOnlyUpdates: true, when: \"object.status.phase == 'Failed'\", changed: [spec, status.phase]",
    ))
    .warnings();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].starts_with("resources[0].when: reads status"),
        "{warnings:?}"
    );
    assert!(
        warnings[1].starts_with("resources[0].changed[1]: a status field"),
        "{warnings:?}"
    );
    assert!(
        ok(&resource(
            "skipStatusOnlyUpdates: true, when: \"object.spec.x == 1\", changed: [spec]"
        ))
        .warnings()
        .is_empty()
    );
}

// ----- namespace patterns and group patterns (issue 19) ----------------------------------------

#[test]
fn namespace_patterns_parse_alone_and_with_a_selector() {
    let config = ok(&resource(
        "namespaces: {include: ['team-*'], exclude: ['kube-*', herald]}",
    ));
    assert_eq!(
        config.resources[0].namespaces,
        Namespaces::Patterns {
            include: vec!["team-*".into()],
            exclude: vec!["kube-*".into(), "herald".into()],
            selector: None,
        }
    );
    let config = ok(&resource("namespaces: {exclude: ['kube-*']}"));
    assert_eq!(
        config.resources[0].namespaces,
        Namespaces::Patterns {
            include: vec![],
            exclude: vec!["kube-*".into()],
            selector: None,
        }
    );
    let config = ok(&resource(
        "namespaces: {selector: 'team=payments', exclude: ['*-test']}",
    ));
    assert_eq!(
        config.resources[0].namespaces.selector(),
        Some("team=payments")
    );
    // The selector alone keeps its own form.
    let config = ok(&resource("namespaces: {selector: 'team=payments'}"));
    assert!(matches!(
        config.resources[0].namespaces,
        Namespaces::Selector { .. }
    ));
}

#[test]
fn namespace_patterns_are_checked() {
    assert_eq!(
        errors(&resource(
            "namespaces: {include: ['Team_*'], exclude: [''], selector: 'a in b'}"
        )),
        [
            "resources[0].namespaces.selector: invalid label selector \"a in b\": \"in\" needs a list in parentheses, like (in (a,b))",
            "resources[0].namespaces.include[0]: \"Team_*\" is not a namespace name pattern (lowercase letters, digits, '-', and the wildcards * and ?)",
            "resources[0].namespaces.exclude[0]: \"\" is not a namespace name pattern (lowercase letters, digits, '-', and the wildcards * and ?)",
        ]
    );
    assert_eq!(
        error(&resource("namespaces: {include: [], exclude: []}")),
        "resources[0].namespaces: empty include and exclude lists watch every namespace; write `all`"
    );
    assert!(
        error(&resource("namespaces: {}")).contains("give selector, include or exclude"),
        "{}",
        error(&resource("namespaces: {}"))
    );
    assert!(error(&resource("namespaces: {inclde: [a]}")).contains("inclde"));
}

#[test]
fn globs_match_names() {
    use super::glob_match;
    for (pattern, name) in [
        ("kube-*", "kube-system"),
        ("kube-*", "kube-"),
        ("*", ""),
        ("*", "anything"),
        ("team-?", "team-a"),
        ("*-prod", "payments-prod"),
        ("a*b*c", "aXbYbZc"),
        ("herald", "herald"),
    ] {
        assert!(glob_match(pattern, name), "{pattern} should match {name}");
    }
    for (pattern, name) in [
        ("kube-*", "kube"),
        ("kube-*", "mykube-system"),
        ("team-?", "team-ab"),
        ("herald", "herald2"),
        ("a*b*c", "aXbYbZ"),
        ("", "a"),
    ] {
        assert!(
            !glob_match(pattern, name),
            "{pattern} should not match {name}"
        );
    }
}

#[test]
fn group_patterns_parse_and_are_checked() {
    let config = ok(&format!(
        "resources:\n- {{group: example.com, kinds: ['*']}}\n{SINK}"
    ));
    assert_eq!(config.resources[0].kinds, Some(vec!["*".to_owned()]));
    ok(&format!(
        "resources:\n- {{group: example.com, kinds: [Database, Backup]}}\n{SINK}"
    ));
    assert_eq!(
        errors(&format!(
            "resources:\n- {{group: example.com, kind: Database, kinds: ['*', Backup, backup, Backup]}}\n{SINK}"
        )),
        [
            "resources[0].kinds: give kinds or kind/plural, not both: kinds watches several resources of the group",
            "resources[0].kinds[0]: \"*\" already takes every kind; list nothing else",
            "resources[0].kinds[2]: \"backup\" is not a kind (letters and digits, like Database) or \"*\"",
            "resources[0].kinds[3]: kind \"Backup\" is listed twice",
        ]
    );
    assert_eq!(
        error(&format!(
            "resources:\n- {{group: core, kinds: ['*']}}\n{SINK}"
        )),
        "resources[0].kinds: only a custom resource group (one CRDs define) can be watched whole; name the kind for core resources"
    );
    assert_eq!(
        error(&format!(
            "resources:\n- {{group: example.com, kinds: []}}\n{SINK}"
        )),
        "resources[0].kinds: an empty list watches nothing; write [\"*\"] for every kind of the group"
    );
    assert_eq!(
        error(&format!(
            "resources:\n- {{group: example.com, kinds: ['*']}}\n- {{group: example.com, kind: Database}}\n{SINK}"
        )),
        "resources[1]: watches resources of group \"example.com\" that resources[0] watches too (a kinds list takes its group's resources); their events would share ids and checkpoints"
    );
}

#[test]
fn routes_may_name_a_group_pattern() {
    let config = ok(&format!(
        "resources:\n- {{group: example.com, kinds: [Database]}}\n{SINK}routes:\n- {{resources: ['*.example.com', Database.example.com, databases.example.com], sinks: [archive]}}\n"
    ));
    assert_eq!(config.routes[0].resources.len(), 3);
    assert_eq!(
        errors(&format!(
            "resources:\n- {{group: example.com, kinds: [Database]}}\n{SINK}routes:\n- {{resources: ['*.other.example', Backup.example.com], sinks: [archive]}}\n"
        )),
        [
            "routes[0].resources[0]: \"*.other.example\" matches no configured resource",
            "routes[0].resources[1]: \"Backup.example.com\" matches no configured resource",
        ]
    );
}

// ----- leaderElection ---------------------------------------------------------------------------

#[test]
fn leader_election_is_off_by_default_with_client_go_durations() {
    let c = ok(&base(""));
    assert!(!c.leader_election.enabled);
    assert_eq!(c.leader_election.lease_name, "herald");
    assert_eq!(c.leader_election.lease_duration, Duration::from_secs(15));
    assert_eq!(c.leader_election.renew_deadline, Duration::from_secs(10));
    assert_eq!(c.leader_election.retry_period, Duration::from_secs(2));
    assert_eq!(c.leader_election.publish_interval, Duration::from_secs(2));
    let on = ok(&base(
        "leaderElection:\n  enabled: true\n  identity: herald-0\n  namespace: ops\n  leaseDuration: 3s\n  renewDeadline: 2s\n  retryPeriod: 500ms\n",
    ));
    assert!(on.leader_election.enabled);
    assert_eq!(on.leader_election.identity.as_deref(), Some("herald-0"));
    assert_eq!(on.leader_election.retry_period, Duration::from_millis(500));
}

#[test]
fn leader_election_refuses_a_renew_deadline_the_lease_cannot_cover() {
    assert_eq!(
        error(&base(
            "leaderElection:\n  leaseDuration: 10s\n  renewDeadline: 10s\n"
        )),
        "leaderElection.renewDeadline: must be less than leaderElection.leaseDuration: the leader stops delivering before another replica may take over"
    );
    assert!(
        error(&base("leaderElection:\n  retryPeriod: 9s\n"))
            .starts_with("leaderElection.retryPeriod: must be greater than zero and less than")
    );
    let all = errors(&base(
        "leaderElection:\n  leaseName: Not_A_Name\n  namespace: \"a b\"\n  identity: \"\"\n  publishInterval: 0s\n",
    ));
    let paths: Vec<&str> = all
        .iter()
        .map(|e| e.split(':').next().unwrap_or_default())
        .collect();
    assert_eq!(
        paths,
        [
            "leaderElection.leaseName",
            "leaderElection.namespace",
            "leaderElection.identity",
            "leaderElection.publishInterval"
        ],
        "{all:#?}"
    );
    // The Lease records whole seconds.
    assert_eq!(
        error(&base("leaderElection:\n  leaseDuration: 15500ms\n")),
        "leaderElection.leaseDuration: must be a whole number of seconds (the Lease records leaseDurationSeconds)"
    );
    // A standby may see the last renewal up to a retryPeriod late.
    assert!(
        error(&base(
            "leaderElection:\n  leaseDuration: 12s\n  renewDeadline: 10s\n  retryPeriod: 2s\n"
        ))
        .starts_with(
            "leaderElection.renewDeadline: must be more than leaderElection.retryPeriod below"
        )
    );
    let margin = ok(&base(
        "leaderElection:\n  leaseDuration: 13s\n  renewDeadline: 10s\n  retryPeriod: 2s\n",
    ));
    assert_eq!(
        margin.leader_election.lease_duration,
        Duration::from_secs(13)
    );
    let long = errors(&base(
        "leaderElection:\n  leaseDuration: 7201s\n  renewDeadline: 7200s\n  retryPeriod: 2h\n  publishInterval: 2h\n",
    ));
    for path in [
        "leaderElection.leaseDuration: must be at most 1h",
        "leaderElection.renewDeadline: must be at most 1h",
        "leaderElection.retryPeriod: must be at most 1h",
        "leaderElection.publishInterval: must be at most 1h",
    ] {
        assert!(long.iter().any(|e| e == path), "{path}: {long:#?}");
    }
    let unknown = error(&base("leaderElection:\n  lease: x\n"));
    assert!(
        unknown.starts_with("leaderElection") && unknown.contains("unknown field `lease`"),
        "{unknown}"
    );
}
