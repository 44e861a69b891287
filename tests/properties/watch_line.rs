//! The path from a watch line to a journaled change: kube's line decoding into a `Value`,
//! [`Line::of`], the normalizer writing the journal's bytes, and both journal decoders. Arbitrary
//! bytes and arbitrary JSON objects give a change or a typed error, never a panic, and the
//! normalizer and the readers always agree on whether an event is valid (one definition:
//! `CloudEvent::validate`), so nothing journaled is silently unreadable.

use herald::event::{self, Observed, Op, Payload, Resource};
use herald::watch::{Line, Seen, Spans, Stripped, Whole};
use herald_sink_core::encode::DecodeError;
use herald_sink_core::{CloudEvent, Journaled};
use kube::api::WatchEvent;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::{json_value, odd_string};

fn resource(namespaced: bool) -> Resource {
    Resource {
        cluster: "prod".into(),
        group: "example.com".into(),
        version: "v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
        namespaced,
        type_prefix: event::DEFAULT_TYPE_PREFIX.into(),
        payload: Payload {
            object: true,
            old_object: true,
            patch: true,
        },
        redact: vec!["/spec/password".into(), "/metadata/name".into()],
        keep_managed_fields: false,
    }
}

/// kube's decoding of one watch line into a `Value` (what herald's watch stream does with each
/// line).
fn decode(bytes: &[u8]) -> kube::Result<WatchEvent<Value>> {
    serde_json::from_slice(bytes).map_err(kube::Error::SerdeError)
}

/// The watch's own decoders (`Whole`, and `Stripped` without managedFields) on the same line:
/// each gives the change the `Value` decoding gives (the same state, `Stripped` without
/// `metadata.managedFields`), and bytes, when it writes them, that are the serialization of that
/// state.
fn the_watchs_decoders_agree(bytes: &[u8]) {
    let by_value = Line::of(decode(bytes));
    let whole = Line::of(
        serde_json::from_slice::<WatchEvent<Whole>>(bytes).map_err(kube::Error::SerdeError),
    );
    let stripped = Line::of(
        serde_json::from_slice::<WatchEvent<Stripped>>(bytes).map_err(kube::Error::SerdeError),
    );
    for (line, strip) in [(whole, false), (stripped, true)] {
        if let Ok(Line::Change(_, value, Some(json))) = &line {
            assert_eq!(
                json,
                &serde_json::to_vec(value).unwrap(),
                "bytes of {value}"
            );
        }
        if let Ok(Line::Change(seen, raw, _)) = &by_value {
            let Ok(Line::Change(s, value, _)) = &line else {
                panic!(
                    "{} decodes by value but not by the watch's decoder (strip: {strip})",
                    String::from_utf8_lossy(bytes)
                );
            };
            let mut expected = raw.clone();
            if strip
                && *seen != Seen::Bookmark
                && let Some(m) = expected.get_mut("metadata").and_then(Value::as_object_mut)
            {
                m.shift_remove("managedFields");
            }
            assert_eq!((s, value), (seen, &expected), "strip: {strip}");
        }
    }
}

/// The watch's scanner on the same line: what it takes, the serde decoder of [`Spans`] reads
/// the same (the change, the same `Spanned`).
fn the_scanner_agrees<const STRIP: bool>(bytes: &[u8]) {
    use herald::watch::scan::{self, Kind};
    let Some((kind, scanned)) = std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| scan::watch_line(text, STRIP))
    else {
        return;
    };
    let text = String::from_utf8_lossy(bytes);
    let (k, s) = match serde_json::from_slice::<WatchEvent<Spans<STRIP>>>(bytes) {
        Ok(WatchEvent::Added(s)) => (Kind::Added, s.0),
        Ok(WatchEvent::Modified(s)) => (Kind::Modified, s.0),
        Ok(WatchEvent::Deleted(s)) => (Kind::Deleted, s.0),
        _ => panic!("the scanner took a line serde reads otherwise: {text}"),
    };
    assert_eq!((kind, &scanned), (k, &s), "{text}");
}

/// The decoder that keeps objects as bytes and spans ([`Spans`]) on the same line: the change the
/// `Value` decoder gives, with the same bytes; a plain object's identity is what its tree says,
/// and its event, written from the bytes, is the event written from the tree, byte for byte.
fn the_spans_decoders_agree(bytes: &[u8]) {
    the_scanner_agrees::<false>(bytes);
    the_scanner_agrees::<true>(bytes);
    fn both<T, S>(
        bytes: &[u8],
    ) -> (
        Result<Line, Box<kube::core::Status>>,
        Result<Line, Box<kube::core::Status>>,
    )
    where
        T: herald::watch::WatchedObject + serde::de::DeserializeOwned,
        S: herald::watch::WatchedObject + serde::de::DeserializeOwned,
    {
        (
            Line::of(
                serde_json::from_slice::<WatchEvent<T>>(bytes).map_err(kube::Error::SerdeError),
            ),
            Line::of(
                serde_json::from_slice::<WatchEvent<S>>(bytes).map_err(kube::Error::SerdeError),
            ),
        )
    }
    let mut res = resource(true);
    res.redact.clear();
    for (tree, spans) in [
        both::<Whole, Spans<false>>(bytes),
        both::<Stripped, Spans<true>>(bytes),
    ] {
        match (tree, spans) {
            (Ok(Line::Change(seen, value, json)), Ok(Line::Change(s, v, j))) => {
                assert_eq!((seen, &value, &json), (s, &v, &j));
            }
            (Ok(Line::Change(seen, value, json)), Ok(Line::Spans(s, spanned))) => {
                assert_eq!(seen, s);
                assert!(spanned.plain());
                assert_eq!(json.as_ref(), Some(&spanned.bytes), "bytes of {value}");
                assert_eq!(spanned.clone().into_tree(), (value.clone(), json.clone()));
                let ident = spanned.ident();
                let meta = |k: &str| value["metadata"][k].as_str().unwrap_or("");
                assert_eq!(
                    (
                        ident.name,
                        ident.namespace,
                        ident.uid,
                        ident.resource_version
                    ),
                    (
                        meta("name"),
                        meta("namespace"),
                        meta("uid"),
                        meta("resourceVersion")
                    )
                );
                assert_eq!(ident.generation, value["metadata"]["generation"].as_i64());
                let op = match seen {
                    Seen::Added => Op::Created,
                    Seen::Modified => Op::Updated,
                    Seen::Deleted | Seen::Bookmark => Op::Deleted,
                };
                let at = jiff::Timestamp::now();
                let (_, by_tree) = event::normalize_structured_with(
                    &res,
                    Observed {
                        op,
                        object: &value,
                        old: None,
                        resync: false,
                        resource_version: None,
                        observed_at: at,
                    },
                    json.as_deref(),
                    None,
                );
                let (head, by_bytes) = event::normalize_bytes(
                    &res,
                    event::ObservedBytes {
                        op,
                        ident,
                        object: &spanned.bytes,
                        old: None,
                        patch: None,
                        resync: false,
                        resource_version: None,
                        observed_at: at,
                    },
                );
                assert_eq!(
                    String::from_utf8_lossy(&by_bytes),
                    String::from_utf8_lossy(&by_tree)
                );
                let _ = head.validate();
            }
            (Ok(Line::Expired), Ok(Line::Expired))
            | (Ok(Line::Broken(_)), Ok(Line::Broken(_)))
            | (Err(_), Err(_)) => {}
            (tree, spans) => panic!(
                "{}: the decoders part ({:?} against {:?})",
                String::from_utf8_lossy(bytes),
                tree.map(|l| format!("{l:?}")),
                spans.map(|l| format!("{l:?}"))
            ),
        }
    }
}

/// Normalizes a change the way the recorder does and checks that the journal reader agrees with
/// the normalizer's verdict; returns the event.
fn journal_and_read_back(
    resource: &Resource,
    seen: Seen,
    raw: Value,
    old: Option<Value>,
) -> CloudEvent {
    let op = match seen {
        Seen::Added => Op::Created,
        Seen::Modified => Op::Updated,
        Seen::Deleted | Seen::Bookmark => Op::Deleted,
    };
    let object = event::prepare(resource, raw);
    let old = old.map(|o| event::prepare(resource, o));
    let _ = event::object_key(resource, &object);
    let _ = event::status_only_change(old.as_ref().unwrap_or(&object), &object);
    let observed = Observed {
        op,
        object: &object,
        old: old.as_ref(),
        resync: false,
        resource_version: None,
        observed_at: jiff::Timestamp::now(),
    };
    let ev = event::normalize(resource, observed);
    let (head, bytes) = event::normalize_structured(resource, observed);
    let verdict = head.validate();
    assert_eq!(verdict, ev.validate(), "both normalizers judge alike");
    assert_eq!(
        String::from_utf8_lossy(&bytes),
        String::from_utf8_lossy(&ev.to_structured_json()),
        "the journaled bytes are the event's JSON"
    );
    let full = CloudEvent::from_structured_json(&bytes);
    let cheap = Journaled::from_structured_json(bytes.clone());
    match (verdict, full, cheap) {
        (Ok(()), Ok(read), Ok(cheap)) => {
            assert_eq!(read.id, ev.id, "the reader reads back what was journaled");
            assert_eq!(
                read.data, ev.data,
                "the reader reads back what was journaled"
            );
            assert_eq!(cheap, read, "both decoders agree");
        }
        (Err(made), Err(DecodeError::Invalid(read)), Err(cheap)) => {
            assert_eq!(made, read);
            assert_eq!(cheap.to_string(), DecodeError::Invalid(read).to_string());
        }
        (verdict, read, cheap) => panic!(
            "normalizer and readers disagree: {verdict:?} vs {read:?} vs {:?} for {}",
            cheap.err(),
            String::from_utf8_lossy(&bytes)
        ),
    }
    // The file sink's lazy read: the attributes it reads from the bytes, then the whole event.
    match (
        CloudEvent::from_structured_json(&bytes),
        Journaled::read_lazily(bytes.clone()),
    ) {
        (Ok(read), Ok(lazy)) => {
            assert_eq!(lazy.id(), read.id);
            assert_eq!(lazy.source(), read.source);
            assert_eq!(lazy.ty(), read.ty);
            assert_eq!(lazy.partition_key(), read.partition_key());
            assert_eq!(lazy.time(), read.time.as_deref());
            assert_eq!(lazy, read, "the lazy read agrees");
        }
        (Err(read), Err(lazy)) => assert_eq!(lazy.to_string(), read.to_string()),
        (read, lazy) => panic!(
            "the lazy read disagrees: {read:?} vs {:?} for {}",
            lazy.err(),
            String::from_utf8_lossy(&bytes)
        ),
    }
    // The reference-only form (oversized events) is as valid as the event it stands for.
    assert_eq!(
        event::to_reference(&ev).validate().is_ok(),
        ev.validate().is_ok()
    );
    ev
}

fn watch_type() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("ADDED"),
        Just("MODIFIED"),
        Just("DELETED"),
        Just("BOOKMARK"),
        Just("ERROR"),
        Just("SOMETHING"),
    ]
}

/// A Kubernetes-shaped object whose metadata strings are arbitrary (control characters included).
fn odd_object() -> impl Strategy<Value = Value> {
    (
        odd_string(),
        odd_string(),
        odd_string(),
        prop_oneof![Just("1".to_owned()), Just("42".to_owned()), odd_string()],
        proptest::option::of(any::<i64>()),
        json_value(),
    )
        .prop_map(|(name, namespace, uid, rv, generation, spec)| {
            let mut meta = json!({"name": name, "namespace": namespace, "uid": uid, "resourceVersion": rv});
            if let Some(g) = generation {
                meta["generation"] = json!(g);
            }
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta, "spec": spec})
        })
}

proptest! {
    #[test]
    fn arbitrary_bytes_give_a_line_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        the_watchs_decoders_agree(&bytes);
        the_spans_decoders_agree(&bytes);
        if let Ok(Line::Change(seen, raw, _)) = Line::of(decode(&bytes))
            && seen != Seen::Bookmark
        {
            journal_and_read_back(&resource(true), seen, raw, None);
        }
    }

    #[test]
    fn arbitrary_json_objects_give_a_change_or_an_error(
        ty in watch_type(),
        object in json_value(),
        old in proptest::option::of(json_value()),
        namespaced in any::<bool>(),
    ) {
        let line = serde_json::to_vec(&json!({"type": ty, "object": object})).unwrap();
        the_watchs_decoders_agree(&line);
        the_spans_decoders_agree(&line);
        // The object before the type: serde holds the object until it knows the variant.
        let reversed = format!(r#"{{"object":{},"type":"{ty}"}}"#, serde_json::to_string(&object).unwrap());
        the_watchs_decoders_agree(reversed.as_bytes());
        the_spans_decoders_agree(reversed.as_bytes());
        if let Ok(Line::Change(seen, raw, _)) = Line::of(decode(&line))
            && seen != Seen::Bookmark
        {
            journal_and_read_back(&resource(namespaced), seen, raw, old);
        }
    }

    /// Names with control characters are valid events, and the name comes back intact.
    #[test]
    fn odd_names_make_valid_events_that_read_back_intact(
        ty in prop_oneof![Just("ADDED"), Just("MODIFIED"), Just("DELETED")],
        object in odd_object(),
        old in proptest::option::of(odd_object()),
    ) {
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        let namespace = object["metadata"]["namespace"].as_str().unwrap().to_owned();
        let rv = object["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
        let line = serde_json::to_vec(&json!({"type": ty, "object": object})).unwrap();
        the_spans_decoders_agree(&line);
        let Ok(Line::Change(seen, raw, _)) = Line::of(decode(&line)) else {
            panic!("a well-formed watch line must decode: {}", String::from_utf8_lossy(&line));
        };
        // The redaction of `/metadata/name` must not change what the event says about the object.
        let mut res = resource(true);
        res.redact.pop();
        let ev = journal_and_read_back(&res, seen, raw, old);
        let key = format!("{namespace}/{name}");
        prop_assert_eq!(ev.subject.as_deref(), Some(key.as_str()));
        prop_assert_eq!(ev.partition_key(), Some(key.as_str()));
        prop_assert_eq!(ev.extensions["k8sname"].as_str(), Some(name.as_str()));
        prop_assert_eq!(ev.extensions["k8snamespace"].as_str(), Some(namespace.as_str()));
        // Valid unless the event would carry an empty sequence (no resourceVersion).
        prop_assert_eq!(ev.validate().is_ok(), !rv.is_empty());
    }
}

proptest! {
    /// The bytes the watch's decoder writes while it parses an object are `serde_json::to_vec` of
    /// the value it builds (the recorder stores and sends them in its place), whether the line is
    /// compact or spaced out, with managedFields kept or skipped.
    #[test]
    fn the_decoders_bytes_are_the_serialization_of_its_value(
        spec in json_value(),
        name in odd_string(),
        managed in json_value(),
        pretty in any::<bool>(),
    ) {
        let object = json!({"kind": "Widget", "metadata": {"name": name, "managedFields": managed}, "spec": spec});
        let text = if pretty {
            serde_json::to_vec_pretty(&object).unwrap()
        } else {
            serde_json::to_vec(&object).unwrap()
        };
        let whole: Value = serde_json::from_slice(&text).unwrap();
        let Whole { value, json } = serde_json::from_slice(&text).unwrap();
        prop_assert_eq!(&value, &whole);
        prop_assert_eq!(json, Some(serde_json::to_vec(&whole).unwrap()));
        let Stripped { value, json } = serde_json::from_slice(&text).unwrap();
        prop_assert!(value.pointer("/metadata/managedFields").is_none());
        prop_assert_eq!(&json, &Some(serde_json::to_vec(&value).unwrap()));
        // The spans decoder writes the same bytes.
        let Spans::<true>(spanned) = serde_json::from_slice(&text).unwrap();
        prop_assert_eq!(Some(spanned.bytes), json);
        let Spans::<false>(spanned) = serde_json::from_slice(&text).unwrap();
        prop_assert_eq!(spanned.bytes, serde_json::to_vec(&whole).unwrap());
    }
}

/// A cluster-scoped object without a name would make an event with an empty subject: the reader
/// and the normalizer both call it invalid (it is then dead-lettered, never skipped).
#[test]
fn a_nameless_cluster_scoped_object_is_invalid_for_both_sides() {
    let ev = journal_and_read_back(
        &resource(false),
        Seen::Added,
        json!({"metadata": {"uid": "u", "resourceVersion": "3"}}),
        None,
    );
    assert_eq!(ev.validate().unwrap_err().attribute(), "subject");
}
