//! One test per attribute rule of EVENT-FORMAT.md Part 1, and per op.

use herald_sink_core::event::ExtensionValue;
use serde_json::{Value, json};

use super::*;

fn resource() -> Resource {
    Resource {
        cluster: "prod-eu".into(),
        group: "example.com".into(),
        version: "v1".into(),
        kind: "Database".into(),
        plural: "databases".into(),
        namespaced: true,
        type_prefix: DEFAULT_TYPE_PREFIX.into(),
        payload: Payload::DEFAULT,
        redact: vec![],
        keep_managed_fields: false,
    }
}

fn db(rv: &str, replicas: i64) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Database",
           "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1", "resourceVersion": rv, "generation": 3,
                        "managedFields": [{"manager": "kubectl"}]},
           "spec": {"replicas": replicas}})
}

fn at() -> jiff::Timestamp {
    "2026-01-02T03:04:05.678912Z".parse().unwrap()
}

fn observed<'a>(op: Op, object: &'a Value, old: Option<&'a Value>) -> Observed<'a> {
    Observed {
        op,
        object,
        old,
        resync: false,
        resource_version: None,
        observed_at: at(),
    }
}

fn ext<'a>(ev: &'a herald_sink_core::event::CloudEvent, k: &str) -> Option<&'a ExtensionValue> {
    ev.extensions.get(k)
}

fn s(v: &str) -> Option<ExtensionValue> {
    Some(ExtensionValue::String(v.into()))
}

#[test]
fn id_is_uid_resource_version_op() {
    let o = db("42", 1);
    assert_eq!(
        normalize(&resource(), observed(Op::Updated, &o, None)).id,
        "u-1:42:updated"
    );
    let synthesized = Observed {
        resource_version: Some("99"),
        ..observed(Op::Deleted, &o, None)
    };
    assert_eq!(
        normalize(&resource(), synthesized).id,
        "u-1:99:deleted",
        "a missed deletion uses the list revision"
    );
}

#[test]
fn a_replaced_objects_deletion_sorts_between_its_last_state_and_the_new_objects_creation() {
    // The old object was last recorded at 1800; the name was deleted and re-created at 1924; the
    // relist that found it ran at 2048.
    let mut old = db("1800", 1);
    old["metadata"]["uid"] = json!("u-old");
    let mut new = db("1924", 1);
    new["metadata"]["uid"] = json!("u-new");
    let rv = replaced_deletion_version("1924");
    assert_eq!(rv.as_deref(), Some("1923"));
    let deleted = normalize(
        &resource(),
        Observed {
            resource_version: rv.as_deref(),
            resync: true,
            ..observed(Op::Deleted, &old, None)
        },
    );
    let created = normalize(
        &resource(),
        Observed {
            resync: true,
            ..observed(Op::Created, &new, None)
        },
    );
    assert_eq!(deleted.id, "u-old:1923:deleted");
    assert_eq!(created.id, "u-new:1924:created");
    let seq = |ev: &herald_sink_core::event::CloudEvent| match ext(ev, "sequence") {
        Some(ExtensionValue::String(s)) => s.clone(),
        other => panic!("sequence is a string: {other:?}"),
    };
    assert!(sequence("1800") < seq(&deleted) && seq(&deleted) < seq(&created));
    assert_eq!(ext(&deleted, "partitionkey"), ext(&created, "partitionkey"));
    assert_eq!(ext(&deleted, "resourceversion").cloned(), s("1923"));
    // Opaque resourceVersions have no "one less": the caller falls back.
    assert_eq!(replaced_deletion_version("abc"), None);
    assert_eq!(replaced_deletion_version("0"), None);
    assert_eq!(replaced_deletion_version("10"), Some("9".into()));
}

#[test]
fn source_has_cluster_group_plural_and_core_for_the_core_group() {
    let o = db("1", 1);
    assert_eq!(
        normalize(&resource(), observed(Op::Created, &o, None)).source,
        "k8s://prod-eu/example.com/databases"
    );
    let core = Resource {
        group: String::new(),
        plural: "configmaps".into(),
        ..resource()
    };
    assert_eq!(
        normalize(&core, observed(Op::Created, &o, None)).source,
        "k8s://prod-eu/core/configmaps"
    );
}

#[test]
fn type_is_prefix_dot_op_and_the_prefix_is_configurable() {
    let o = db("1", 1);
    for (op, want) in [
        (Op::Created, "created"),
        (Op::Updated, "updated"),
        (Op::Deleted, "deleted"),
    ] {
        assert_eq!(
            normalize(&resource(), observed(op, &o, None)).ty,
            format!("dev.herald.resource.{want}")
        );
    }
    let custom = Resource {
        type_prefix: "com.acme.db".into(),
        ..resource()
    };
    assert_eq!(
        normalize(&custom, observed(Op::Created, &o, None)).ty,
        "com.acme.db.created"
    );
}

#[test]
fn subject_and_partition_key_are_namespace_slash_name_or_name() {
    let o = db("1", 1);
    let ev = normalize(&resource(), observed(Op::Created, &o, None));
    assert_eq!(ev.subject.as_deref(), Some("shop/orders"));
    assert_eq!(ext(&ev, "partitionkey").cloned(), s("shop/orders"));
    assert_eq!(ext(&ev, "k8snamespace").cloned(), s("shop"));

    let cluster = Resource {
        namespaced: false,
        ..resource()
    };
    let co = json!({"metadata": {"name": "global", "uid": "u-2", "resourceVersion": "5"}});
    let ev = normalize(&cluster, observed(Op::Created, &co, None));
    assert_eq!(ev.subject.as_deref(), Some("global"));
    assert_eq!(ext(&ev, "partitionkey").cloned(), s("global"));
    assert!(
        ext(&ev, "k8snamespace").is_none(),
        "cluster-scoped objects carry no k8snamespace"
    );
}

#[test]
fn time_is_observation_time_in_milliseconds() {
    let o = db("1", 1);
    assert_eq!(
        normalize(&resource(), observed(Op::Created, &o, None))
            .time
            .as_deref(),
        Some("2026-01-02T03:04:05.678Z")
    );
}

#[test]
fn content_type_and_dataschema_are_fixed() {
    let o = db("1", 1);
    let ev = normalize(&resource(), observed(Op::Created, &o, None));
    assert_eq!(ev.datacontenttype.as_deref(), Some("application/json"));
    assert_eq!(ev.dataschema.as_deref(), Some("urn:herald:change:v1"));
}

#[test]
fn extensions_are_strings_except_resync_and_sequence_is_zero_padded() {
    let o = db("42", 1);
    let ev = normalize(&resource(), observed(Op::Created, &o, None));
    assert_eq!(ext(&ev, "k8sgroup").cloned(), s("example.com"));
    assert_eq!(ext(&ev, "k8sversion").cloned(), s("v1"));
    assert_eq!(ext(&ev, "k8skind").cloned(), s("Database"));
    assert_eq!(ext(&ev, "k8sname").cloned(), s("orders"));
    assert_eq!(ext(&ev, "k8suid").cloned(), s("u-1"));
    assert_eq!(ext(&ev, "resourceversion").cloned(), s("42"));
    assert_eq!(ext(&ev, "generation").cloned(), s("3"));
    assert_eq!(ext(&ev, "sequence").cloned(), s("00000000000000000042"));
    assert_eq!(
        ext(&ev, "resync").cloned(),
        Some(ExtensionValue::Bool(false))
    );
    assert!(ext(&ev, "truncated").is_none());
    for name in ev.extensions.keys() {
        assert!(
            name.len() <= 20
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
            "{name}"
        );
    }
    let resync = Observed {
        resync: true,
        ..observed(Op::Created, &o, None)
    };
    assert_eq!(
        ext(&normalize(&resource(), resync), "resync").cloned(),
        Some(ExtensionValue::Bool(true))
    );
}

#[test]
fn created_carries_the_object_and_no_patch() {
    let o = prepare(&resource(), db("1", 1));
    let data = normalize(&resource(), observed(Op::Created, &o, None))
        .data
        .unwrap();
    assert_eq!(data["op"], "created");
    assert_eq!(data["object"]["spec"]["replicas"], 1);
    assert!(data.get("patch").is_none());
    assert!(data.get("oldObject").is_none(), "oldObject is opt-in");
    assert_eq!(data["resync"], false);
}

#[test]
fn updated_carries_the_object_and_the_patch_from_the_recorded_state() {
    let old = prepare(&resource(), db("1", 1));
    let new = prepare(&resource(), db("2", 3));
    let data = normalize(&resource(), observed(Op::Updated, &new, Some(&old)))
        .data
        .unwrap();
    assert_eq!(data["op"], "updated");
    assert_eq!(
        data["patch"],
        json!([{"op": "replace", "path": "/metadata/resourceVersion", "value": "2"},
               {"op": "replace", "path": "/spec/replicas", "value": 3}])
    );
    let with_old = Resource {
        payload: Payload {
            old_object: true,
            ..Payload::DEFAULT
        },
        ..resource()
    };
    let data = normalize(&with_old, observed(Op::Updated, &new, Some(&old)))
        .data
        .unwrap();
    assert_eq!(data["oldObject"]["spec"]["replicas"], 1);
}

#[test]
fn deleted_carries_the_last_known_state() {
    let last = prepare(&resource(), db("7", 2));
    let data = normalize(&resource(), observed(Op::Deleted, &last, None))
        .data
        .unwrap();
    assert_eq!(data["op"], "deleted");
    assert_eq!(data["object"]["spec"]["replicas"], 2);
    assert!(data.get("patch").is_none());
}

#[test]
fn reference_only_payload_still_sends_op_and_resync() {
    let r = Resource {
        payload: Payload::REFERENCE,
        ..resource()
    };
    let o = db("1", 1);
    let ev = normalize(&r, observed(Op::Updated, &o, None));
    assert_eq!(
        ev.data,
        Some(json!({"op": "updated", "resync": false})),
        "never empty: an empty Kafka value is a tombstone"
    );
    let truncated = to_reference(&normalize(&resource(), observed(Op::Created, &o, None)));
    assert_eq!(
        truncated.data,
        Some(json!({"op": "created", "resync": false}))
    );
    assert_eq!(ext(&truncated, "truncated").cloned(), s("true"));
}

#[test]
fn managed_fields_are_stripped_and_redactions_applied_before_anything_is_recorded() {
    let r = Resource {
        redact: vec!["/spec/password".into(), "/spec/missing".into()],
        ..resource()
    };
    let mut o = db("1", 1);
    o["spec"]["password"] = json!("hunter2");
    let p = prepare(&r, o.clone());
    assert!(p["metadata"].get("managedFields").is_none());
    assert_eq!(p["spec"]["password"], REDACTED);
    assert!(
        p["spec"].get("missing").is_none(),
        "redacting an absent field adds nothing"
    );
    let kept = prepare(
        &Resource {
            keep_managed_fields: true,
            ..resource()
        },
        o,
    );
    assert!(kept["metadata"]["managedFields"].is_array());
}

#[test]
fn status_only_changes_are_recognised() {
    let mut a = db("1", 1);
    let mut b = db("2", 1);
    a["status"] = json!({"phase": "Pending"});
    b["status"] = json!({"phase": "Ready"});
    assert!(status_only_change(&a, &b));
    b["spec"]["replicas"] = json!(2);
    assert!(!status_only_change(&a, &b));
    assert!(
        !status_only_change(&a, &a),
        "no change is not a status-only change"
    );
}

#[test]
fn the_journaled_bytes_are_the_normalized_events_json_for_every_payload_and_op() {
    let (old, new) = (db("41", 2), db("42", 3));
    for payload in [
        Payload::DEFAULT,
        Payload::REFERENCE,
        Payload {
            object: true,
            old_object: true,
            patch: true,
        },
        Payload {
            object: false,
            old_object: true,
            patch: false,
        },
    ] {
        let r = Resource {
            payload,
            ..resource()
        };
        for (op, prior) in [
            (Op::Created, None),
            (Op::Updated, Some(&old)),
            (Op::Updated, None),
            (Op::Deleted, Some(&old)),
        ] {
            let ob = Observed {
                resync: op == Op::Deleted,
                ..observed(op, &new, prior)
            };
            let whole = normalize(&r, ob);
            let (attributes, bytes) = normalize_structured(&r, ob);
            assert_eq!(
                String::from_utf8(bytes).unwrap(),
                String::from_utf8(whole.to_structured_json()).unwrap(),
                "{payload:?} {op:?}"
            );
            assert_eq!(attributes.event().data, None);
            assert_eq!(
                CloudEvent {
                    data: whole.data.clone(),
                    ..attributes.event()
                },
                whole
            );
        }
    }
}

#[test]
fn stripping_managed_fields_keeps_the_servers_key_order_in_metadata() {
    // managedFields in the middle, as a server that does not put it last would send it.
    let o = json!({"apiVersion": "example.com/v1", "kind": "Database", "metadata": {
        "name": "db", "managedFields": [{"manager": "kubectl"}], "namespace": "default",
        "uid": "u-1", "resourceVersion": "7", "zLast": "x"
    }});
    let p = prepare(&resource(), o);
    let keys: Vec<&String> = p["metadata"].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["name", "namespace", "uid", "resourceVersion", "zLast"]
    );
}

/// The attributes written straight into the journaled bytes are those the event's serializer
/// writes, for every shape they take: the core group, a cluster-scoped resource, no `generation`,
/// an opaque resourceVersion, characters JSON escapes in every string.
#[test]
fn the_attributes_written_directly_are_the_serialized_events_attributes() {
    let odd = "a\"b\\c\u{1}\u{8}\t\n\u{c}\r\u{1f}\u{7f}é/~ü";
    let object = json!({"apiVersion": "v1", "kind": "Thing",
        "metadata": {"name": odd, "namespace": odd, "uid": odd, "resourceVersion": odd}});
    let numeric = json!({"apiVersion": "v1", "kind": "Thing",
        "metadata": {"name": "n", "uid": "u", "resourceVersion": "0012", "generation": -4}});
    let empty = json!({"metadata": {}});
    for r in [
        resource(),
        Resource {
            cluster: odd.into(),
            group: String::new(),
            version: odd.into(),
            kind: odd.into(),
            plural: odd.into(),
            namespaced: false,
            type_prefix: odd.into(),
            ..resource()
        },
    ] {
        for object in [&object, &numeric, &empty] {
            for resync in [false, true] {
                let ob = Observed {
                    resync,
                    ..observed(Op::Created, object, None)
                };
                let whole = normalize(&r, ob);
                let (attributes, bytes) = normalize_structured(&r, ob);
                assert_eq!(
                    String::from_utf8(bytes).unwrap(),
                    String::from_utf8(whole.to_structured_json()).unwrap()
                );
                assert_eq!(attributes.validate(), whole.validate());
                assert_eq!(attributes.id(), whole.id);
                assert_eq!(Some(attributes.subject()), whole.subject.as_deref());
            }
        }
    }
}

/// `time` and `sequence` written without the formatter are what `strftime` and `format!` write,
/// at the edges of their fields (milliseconds truncated, not rounded; years padded to four digits;
/// resourceVersions that `u64` parses with a sign or leading zeros, or at its maximum).
#[test]
fn time_and_sequence_written_directly_are_what_the_formatters_write() {
    for time in [
        "2026-01-02T03:04:05.678912Z",
        "2026-12-31T23:59:59.999999999Z",
        "1970-01-01T00:00:00Z",
        "0005-03-04T05:06:07.001Z",
        "9999-12-30T21:59:59.999Z",
        "1969-12-31T23:59:59.5Z",
        "-000001-01-01T00:00:00Z",
        "2000-02-29T12:00:00.0999Z",
    ] {
        let t: jiff::Timestamp = time.parse().unwrap();
        let mut out = Vec::new();
        write_time(&mut out, t);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            t.strftime(TIME_FORMAT).to_string(),
            "{time}"
        );
    }
    for rv in [
        "0",
        "1",
        "42",
        "0012",
        "+5",
        "18446744073709551615",
        "18446744073709551616",
        "-1",
        "",
        "abc",
    ] {
        let expected = match rv.parse::<u64>() {
            Ok(n) => format!("{n:020}"),
            Err(_) => rv.to_owned(),
        };
        assert_eq!(sequence(rv), expected, "{rv}");
        let object = json!({"metadata": {"name": "n", "namespace": "ns", "uid": "u", "resourceVersion": rv}});
        let ob = observed(Op::Created, &object, None);
        let whole = normalize(&resource(), ob);
        let (_, bytes) = normalize_structured(&resource(), ob);
        assert_eq!(bytes, whole.to_structured_json(), "{rv}");
    }
}

/// Whether the patch has an operation outside `metadata.resourceVersion` and
/// `metadata.managedFields` is `meaningful_update`'s answer without `changed` or `ignoreFields`,
/// for every pair of objects with `metadata` objects: the recorder decides updates by the patch
/// it writes for the event.
#[test]
fn the_patch_outside_the_bookkeeping_is_what_meaningful_update_says() {
    let states = [
        json!({"metadata": {}}),
        json!({"metadata": {"resourceVersion": "1"}}),
        json!({"metadata": {"resourceVersion": "2"}}),
        json!({"metadata": {"resourceVersion": "2", "managedFields": [{"m": 1}]}}),
        json!({"metadata": {"resourceVersion": "2", "managedFields": [{"m": 2}]}}),
        json!({"metadata": {"managedFields": {"a": {"b": 1}}}}),
        json!({"metadata": {"managedFields": {"a": {"b": 2}}}}),
        json!({"metadata": {"resourceVersion": {"x": 1}}}),
        json!({"metadata": {"resourceVersionX": "1"}}),
        json!({"metadata": {"managedFieldsX": [1]}}),
        json!({"metadata": {"name": "a", "resourceVersion": "1"}}),
        json!({"metadata": {"resourceVersion": "1", "name": "a"}}),
        json!({"metadata": {"name": "b", "resourceVersion": "1"}}),
        json!({"metadata": {"labels": {"a/b": "x"}, "resourceVersion": "3"}}),
        json!({"metadata": {"labels": {"a/b": "y"}, "resourceVersion": "4"}}),
        json!({"metadata": {"resourceVersion": "5"}, "spec": {"x": [1, 2]}}),
        json!({"metadata": {"resourceVersion": "6"}, "spec": {"x": [1, 3]}}),
        json!({"metadata": {"resourceVersion": "6"}, "spec": null}),
        json!({"metadata": {"resourceVersion": "6"}, "status": {}}),
        json!({"metadata": {"resourceVersion": "6"}, "status": {"resourceVersion": "1"}}),
        json!({"metadata": {"resourceVersion": "7"}, "resourceVersion": "1"}),
        json!({"metadata": {"resourceVersion": "7", "managedFields": null}, "spec": {"metadata": {"resourceVersion": "1"}}}),
        json!({"metadata": {"resourceVersion": "8"}, "spec": {"metadata": {"resourceVersion": "2"}}}),
    ];
    for old in &states {
        for new in &states {
            let mut patch = Vec::new();
            assert_eq!(
                write_diff(&mut patch, old, new),
                filter::meaningful_update(old, new, &[], &[]),
                "{old} -> {new}"
            );
            assert_eq!(
                String::from_utf8(patch).unwrap(),
                serde_json::to_string(&diff(old, new)).unwrap()
            );
        }
    }
}

/// Where `bytes` (an event as herald writes it, its attributes unescaped) hold the string after
/// `"<name>":"`, found by searching rather than by the writer's bookkeeping.
fn string_at(bytes: &[u8], name: &str) -> std::ops::Range<usize> {
    let marker = format!("\"{name}\":\"");
    let start = bytes
        .windows(marker.len())
        .position(|w| w == marker.as_bytes())
        .unwrap()
        + marker.len();
    let len = bytes[start..].iter().position(|&b| b == b'"').unwrap();
    start..start + len
}

/// The layout both writers give is where a reader finds the attributes and `data` (searched for
/// here; and a vouched read is the lazy read), for every payload, op and scope; and none is given
/// when an attribute a reader takes from the bytes holds an escape.
#[test]
fn the_layout_written_is_where_a_reader_finds_the_attributes() {
    let (old, new) = (db("41", 1), db("42", 2));
    let odd = {
        let mut o = db("43", 2);
        o["metadata"]["name"] = json!("or\"ders");
        o
    };
    for payload in [
        Payload::DEFAULT,
        Payload {
            object: false,
            old_object: true,
            patch: false,
        },
    ] {
        for namespaced in [true, false] {
            let r = Resource {
                payload,
                namespaced,
                ..resource()
            };
            for (op, object, prior) in [
                (Op::Created, &new, None),
                (Op::Updated, &new, Some(&old)),
                (Op::Deleted, &new, Some(&old)),
                (Op::Created, &odd, None),
            ] {
                let ob = observed(op, object, prior);
                let object_bytes = serde_json::to_vec(object).unwrap();
                let old_bytes = prior.map(|o| serde_json::to_vec(o).unwrap());
                let by_tree = normalize_structured_laid_out(&r, ob, None, None);
                let by_bytes = normalize_bytes_laid_out(
                    &r,
                    ObservedBytes {
                        op,
                        ident: Ident {
                            uid: "u-1",
                            resource_version: meta_str(object, "resourceVersion"),
                            name: meta_str(object, "name"),
                            namespace: meta_str(object, "namespace"),
                            generation: Some(3),
                        },
                        object: &object_bytes,
                        old: old_bytes.as_deref(),
                        patch: None,
                        resync: false,
                        resource_version: None,
                        observed_at: at(),
                    },
                );
                for (_, bytes, layout) in [by_tree, by_bytes] {
                    let text = String::from_utf8(bytes.clone()).unwrap();
                    if std::ptr::eq(object, &odd) {
                        assert_eq!(layout, None, "an escaped partition key: {text}");
                        continue;
                    }
                    let expected = herald_sink_core::Layout::new(
                        string_at(&bytes, "id"),
                        string_at(&bytes, "source"),
                        string_at(&bytes, "type"),
                        string_at(&bytes, "partitionkey"),
                        string_at(&bytes, "time"),
                        text.find(",\"data\":").unwrap() + b",\"data\":".len()..bytes.len() - 1,
                    );
                    assert!(expected.is_some());
                    assert_eq!(layout, expected, "{text}");
                    let layout = layout.unwrap();
                    let vouched =
                        herald_sink_core::Journaled::vouched(bytes.clone(), &layout).unwrap();
                    let lazy = herald_sink_core::Journaled::read_lazily(bytes.clone()).unwrap();
                    assert_eq!(vouched.id(), lazy.id());
                    assert_eq!(vouched.source(), lazy.source());
                    assert_eq!(vouched.ty(), lazy.ty());
                    assert_eq!(vouched.partition_key(), lazy.partition_key());
                    assert_eq!(vouched.time(), lazy.time());
                    assert_eq!(&*vouched.data_bytes(), &*lazy.data_bytes());
                    assert_eq!(vouched, lazy);
                }
            }
        }
    }
}

/// A string escaped for the event is what `serde_json` writes inside its quotes: every ASCII
/// character and some wider ones, at every offset of the eight-byte step, alone, in runs and at
/// the end.
#[test]
fn escaped_text_is_what_serde_json_writes() {
    let mut texts = Vec::new();
    for c in (0u8..0x80).map(char::from).chain(['é', '\u{2028}', '😀']) {
        for len in 0..18 {
            let filler = "ab".repeat(len / 2) + &"x".repeat(len % 2);
            texts.push(format!("{filler}{c}"));
            texts.push(format!("{c}{filler}{c}{c}"));
            texts.push(format!("{filler}{c}{filler}"));
        }
    }
    texts.push(String::new());
    for text in texts {
        let mut out = Vec::new();
        write_escaped(&mut out, &text);
        let quoted = serde_json::to_string(&text).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            quoted[1..quoted.len() - 1],
            "{text:?}"
        );
    }
}

/// The event written from bytes is written into a buffer sized for it at once: a first guess
/// short of the attributes (a fixed 640 bytes) grew it, a copy of the whole event, every time.
#[test]
fn the_event_from_bytes_fits_the_buffer_it_was_given() {
    let object = br#"{"apiVersion":"example.com/v1","kind":"Database","metadata":{"name":"orders-primary-0001","namespace":"payments-production","uid":"0f8fad5b-d9cb-469f-a165-70867728950e","resourceVersion":"123456789","generation":1234}}"#;
    let patch = br#"[{"op":"replace","path":"/metadata/resourceVersion","value":"123456789"}]"#;
    for (r, rv) in [(resource(), "123456789"), (resource(), "opaque-version-x")] {
        for op in [Op::Created, Op::Updated, Op::Deleted] {
            let (_, bytes) = normalize_bytes(
                &r,
                ObservedBytes {
                    op,
                    ident: Ident {
                        uid: "0f8fad5b-d9cb-469f-a165-70867728950e",
                        resource_version: rv,
                        name: "orders-primary-0001",
                        namespace: "payments-production",
                        generation: Some(i64::MIN),
                    },
                    object,
                    old: Some(object),
                    patch: Some(patch),
                    resync: true,
                    resource_version: None,
                    observed_at: at(),
                },
            );
            // Grown, the buffer would hold at least twice its first size.
            assert!(
                bytes.capacity() <= bytes.len() + 512,
                "{op:?} {rv}: {} of {}",
                bytes.len(),
                bytes.capacity()
            );
        }
    }
}
