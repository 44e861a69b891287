//! The CloudEvents bindings: the decoders (HTTP and NATS `ce-` headers; Kafka `ce_`
//! headers; the JSON format and its batch; dead-letter records) give an event or a typed error for
//! arbitrary input, never a panic; and an event with arbitrary names survives every encoding: what
//! is encoded decodes to the same attributes, every header value is one HTTP and NATS can carry,
//! and subjects and topics built from names stay legal.

use herald_sink_core::encode::{
    self, decode_header_value, from_structured_json_batch, http_binary_decode, kafka_binary_decode,
    nats_binary_decode, to_structured_json_batch,
};
use herald_sink_core::template::{Template, Vars};
use herald_sink_core::{CloudEvent, DeadLetter, ExtensionValue};
use proptest::prelude::*;
use serde_json::Value;

use crate::{json_value, odd_string};

fn header_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("ce-specversion".to_owned()),
        Just("ce-id".to_owned()),
        Just("ce-source".to_owned()),
        Just("ce-type".to_owned()),
        Just("ce-subject".to_owned()),
        Just("ce-time".to_owned()),
        Just("ce-dataschema".to_owned()),
        Just("ce-datacontenttype".to_owned()),
        Just("CE-Partitionkey".to_owned()),
        Just("ce_specversion".to_owned()),
        Just("ce_id".to_owned()),
        Just("ce_source".to_owned()),
        Just("ce_type".to_owned()),
        Just("ce_subject".to_owned()),
        Just("ce_time".to_owned()),
        Just("content-type".to_owned()),
        "ce[-_][a-zA-Z0-9_-]{0,24}",
        "[a-zA-Z-]{1,12}",
    ]
}

fn header_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"1.0".to_vec()),
        Just(b"application/json".to_vec()),
        Just(b"text/plain".to_vec()),
        Just(b"application/cloudevents+json".to_vec()),
        Just(b"2026-01-02T03:04:05.678Z".to_vec()),
        Just(b"%".to_vec()),
        Just(b"%C0%A0".to_vec()),
        Just(b"\"quoted \\\" %41\"".to_vec()),
        "[ -~]{0,24}".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..24),
    ]
}

fn headers() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
    proptest::collection::vec((header_name(), header_value()), 0..14)
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(Vec::new()),
        Just(b"null".to_vec()),
        json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        proptest::collection::vec(any::<u8>(), 0..64),
    ]
}

const TIMES: [&str; 3] = [
    "2026-01-02T03:04:05.678Z",
    "1970-01-01T00:00:00Z",
    "2024-02-29T23:59:60.5+01:00",
];

fn non_empty_odd() -> impl Strategy<Value = String> {
    odd_string().prop_map(|s| if s.is_empty() { "x".to_owned() } else { s })
}

/// Valid events whose string attributes hold anything a name can (control characters included).
fn odd_event() -> impl Strategy<Value = CloudEvent> {
    let extension = prop_oneof![
        3 => odd_string().prop_map(ExtensionValue::String),
        1 => any::<bool>().prop_map(ExtensionValue::Bool),
        1 => any::<i32>().prop_map(ExtensionValue::Integer),
    ];
    let data = prop_oneof![
        Just((None, None)),
        json_value().prop_map(|v| (Some("application/json".to_owned()), Some(v))),
        json_value().prop_map(|v| (None, Some(v))),
        non_empty_odd().prop_map(|t| (
            Some("text/plain; charset=utf-8".to_owned()),
            Some(Value::String(t))
        )),
    ];
    (
        non_empty_odd(),
        non_empty_odd(),
        non_empty_odd(),
        proptest::option::of(non_empty_odd()),
        proptest::option::of(proptest::sample::select(TIMES.to_vec())),
        proptest::option::of(Just("urn:herald:change:v1")),
        proptest::collection::btree_map("[a-z0-9]{1,20}", extension, 0..6),
        data,
    )
        .prop_map(
            |(id, source, ty, subject, time, schema, extensions, (ct, data))| {
                let mut event = CloudEvent::new(id, source, ty);
                event.subject = subject;
                event.time = time.map(str::to_owned);
                event.dataschema = schema.map(str::to_owned);
                event.datacontenttype = ct;
                event.extensions = extensions;
                event.data = data;
                event
            },
        )
        .prop_filter("a valid event", |e| e.validate().is_ok())
}

/// Binary modes carry no types: extensions come back as their canonical strings, and the implicit
/// JSON content type is made explicit.
fn as_binary_decodes(event: &CloudEvent) -> CloudEvent {
    let mut out = event.clone();
    for value in out.extensions.values_mut() {
        *value = ExtensionValue::String(value.to_string());
    }
    if out.datacontenttype.is_none() && out.data.is_some() {
        out.datacontenttype = Some(encode::JSON_CONTENT_TYPE.to_owned());
    }
    out
}

proptest! {
    #[test]
    fn header_values_decode_or_fail_typed(raw in header_value()) {
        let _ = decode_header_value("subject", &raw);
    }

    #[test]
    fn http_and_nats_binary_mode_decode_or_fail_typed(headers in headers(), body in body()) {
        let _ = http_binary_decode(headers.iter().map(|(k, v)| (k.as_str(), v.as_slice())), &body);
        let _ = nats_binary_decode(headers.iter().map(|(k, v)| (k.as_str(), v.as_slice())), &body);
    }

    #[test]
    fn kafka_binary_mode_decodes_or_fails_typed(headers in headers(), body in body()) {
        let _ = kafka_binary_decode(headers.iter().map(|(k, v)| (k.as_str(), v.as_slice())), &body);
    }

    #[test]
    fn json_format_decodes_or_fails_typed(bytes in body(), value in json_value()) {
        let _ = CloudEvent::from_structured_json(&bytes);
        let _ = from_structured_json_batch(&bytes);
        let _ = CloudEvent::from_json_value(value.clone());
        let _ = DeadLetter::from_bytes(&bytes);
        let _ = DeadLetter::from_bytes(&serde_json::to_vec(&value).unwrap());
    }

    #[test]
    fn odd_events_round_trip_through_every_binding(event in odd_event()) {
        // JSON format and batch: exact, extension types kept.
        prop_assert_eq!(&CloudEvent::from_structured_json(&event.to_structured_json()).unwrap(), &event);
        let batch = to_structured_json_batch([&event, &event]);
        prop_assert_eq!(from_structured_json_batch(&batch).unwrap(), vec![event.clone(), event.clone()]);

        // HTTP binary mode: every value is one HTTP and NATS can carry, and decodes back.
        let expected = as_binary_decodes(&event);
        let headers = event.http_binary_headers();
        for (name, value) in &headers {
            prop_assert!(reqwest::header::HeaderValue::from_str(value).is_ok(), "HTTP {}: {:?}", name, value);
            prop_assert!(value.parse::<async_nats::HeaderValue>().is_ok(), "NATS {}: {:?}", name, value);
            prop_assert!(!value.contains(['\r', '\n', '\0']));
        }
        prop_assert_eq!(&http_binary_decode(headers, &event.data_bytes()).unwrap(), &expected);

        // NATS binary mode: the same values, `ce-datacontenttype` included.
        let headers = event.nats_binary_headers();
        for (name, value) in &headers {
            prop_assert!(value.parse::<async_nats::HeaderValue>().is_ok(), "NATS {}: {:?}", name, value);
            prop_assert!(!value.contains(['\r', '\n', '\0']));
        }
        prop_assert_eq!(&nats_binary_decode(headers, &event.data_bytes()).unwrap(), &expected);

        // Kafka binary mode: UTF-8 header values, decoded back.
        prop_assert_eq!(&kafka_binary_decode(event.kafka_binary_headers(), &event.data_bytes()).unwrap(), &expected);
    }

    #[test]
    fn subjects_and_topics_built_from_odd_names_stay_legal(
        group in odd_string(),
        kind in odd_string(),
        namespace in proptest::option::of(odd_string()),
        name in odd_string(),
        op in odd_string(),
    ) {
        let vars = Vars { group: &group, version: "v1", kind: &kind, plural: "widgets", namespace: namespace.as_deref(), name: &name, op: &op };
        let nats = Template::parse("herald.{group}.{kind}.{namespace}.{name}.{op}").unwrap();
        let subject = nats.render_nats_subject(&vars);
        let tokens: Vec<&str> = subject.split('.').collect();
        prop_assert_eq!(tokens.len(), 6, "{:?}", subject);
        for token in tokens {
            prop_assert!(!token.is_empty(), "{:?}", subject);
            prop_assert!(!token.contains(|c: char| c.is_whitespace() || c.is_control() || c == '*' || c == '>'), "{:?}", subject);
        }
        let kafka = Template::parse("herald.{group}.{kind}.{namespace}").unwrap();
        let topic = kafka.render_kafka_topic(&vars);
        prop_assert!(!topic.is_empty() && topic.len() <= herald_sink_core::template::KAFKA_TOPIC_MAX_LEN, "{:?}", topic);
        prop_assert!(topic != "." && topic != "..");
        prop_assert!(topic.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')), "{:?}", topic);
    }
}
