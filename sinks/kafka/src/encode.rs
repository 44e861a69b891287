//! Events → Kafka records (topic, key, value, headers); start at [`record`].

use herald_sink_core::Sendable;
use herald_sink_core::encode::{CONTENT_TYPE_HEADER, STRUCTURED_CONTENT_TYPE};
use herald_sink_core::event::CloudEvent;
use herald_sink_core::jinja::MessageTemplate;
use herald_sink_core::template::{Template, Vars};
use rdkafka::message::{Header, OwnedHeaders};

use crate::KafkaMode;

/// Prefix of `source` for events herald builds: `k8s://<cluster>/<group>/<plural>`.
const SOURCE_SCHEME: &str = "k8s://";

/// One record, before it is handed to librdkafka.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// The rendered, sanitised topic.
    pub topic: String,
    /// The rendered `template.key`, else the `partitionkey` extension, if the event has one.
    pub key: Option<String>,
    /// The value; `None` is a null value (a tombstone on a compacted topic).
    pub value: Option<Vec<u8>>,
    /// Headers in order: binding headers, then any dead-letter headers.
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Record {
    /// What librdkafka counts against `message.max.bytes` for this record (its
    /// `rd_kafka_msg_max_wire_size`): the largest v2 record overhead, key, value and serialised
    /// headers. Checking the same number locally gives the same verdict librdkafka would, with a
    /// clearer reason.
    pub(crate) fn wire_size(&self) -> usize {
        // RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD: length, attributes, timestamp delta, offset delta,
        // key length, value length and header count as their largest varints.
        const MAX_OVERHEAD: usize = 5 + 1 + 10 + 5 + 5 + 5 + 5;
        let key = self.key.as_ref().map_or(0, String::len);
        let value = self.value.as_ref().map_or(0, Vec::len);
        let headers: usize = self
            .headers
            .iter()
            .map(|(name, value)| {
                name.len()
                    + value.len()
                    + zigzag_varint_len(name.len())
                    + zigzag_varint_len(value.len())
            })
            .sum();
        MAX_OVERHEAD + key + value + headers
    }

    /// The headers in librdkafka's form.
    pub(crate) fn owned_headers(&self) -> OwnedHeaders {
        self.headers.iter().fold(
            OwnedHeaders::new_with_capacity(self.headers.len()),
            |headers, (name, value)| {
                headers.insert(Header {
                    key: name,
                    value: Some(value),
                })
            },
        )
    }
}

/// Bytes of `n` as a zigzag varint, the way Kafka encodes header lengths.
fn zigzag_varint_len(n: usize) -> usize {
    let mut zigzag = (n as u64) << 1;
    let mut len = 1;
    while zigzag >= 0x80 {
        zigzag >>= 7;
        len += 1;
    }
    len
}

/// The record for `event`: topic from `topic`, key from `partitionkey` (or `template.key`), value
/// and headers per `mode`, then the template's headers, then `extra_headers` (a dead letter's
/// `herald_error_*`).
///
/// # Errors
///
/// The template's render error (`template.<part>: line N: …`).
pub(crate) fn record<E: Sendable>(
    topic: &Template,
    mode: KafkaMode,
    template: Option<&MessageTemplate>,
    event: &E,
    extra_headers: Vec<(String, Vec<u8>)>,
) -> Result<Record, String> {
    // A template may read `data`: only then is a journaled event's `data` parsed.
    let rendered = template.map(|t| t.render(event.event())).transpose()?;
    let (value, mut headers) = match mode {
        KafkaMode::Binary => {
            // The binding maps "no data" to "no value" (1.0.3-wip). herald's events always carry
            // data (DECISIONS.md), so this never turns a real event into a tombstone.
            let value = event
                .carries_data()
                .then(|| event.body_bytes().into_owned());
            (value, event.binding_attributes().kafka_binary_headers())
        }
        KafkaMode::Structured => (
            Some(event.json_bytes().into_owned()),
            vec![(
                CONTENT_TYPE_HEADER.to_owned(),
                STRUCTURED_CONTENT_TYPE.as_bytes().to_vec(),
            )],
        ),
    };
    let event = event.attributes();
    let mut key = event.partition_key().map(str::to_owned);
    if let Some(rendered) = rendered {
        if rendered.key.is_some() {
            key = rendered.key;
        }
        headers.extend(
            rendered
                .headers
                .into_iter()
                .map(|(name, value)| (name, value.into_bytes())),
        );
    }
    headers.extend(extra_headers);
    Ok(Record {
        topic: topic.render_kafka_topic(&vars(event)),
        key,
        value,
        headers,
    })
}

/// The tombstone that follows a `deleted` event's `record`: same topic and key, null value, no
/// headers (it is not an event, so it carries no `ce_` headers that would make it look like one).
pub(crate) fn tombstone(record: &Record) -> Record {
    Record {
        topic: record.topic.clone(),
        key: record.key.clone(),
        value: None,
        headers: Vec::new(),
    }
}

/// True for a `deleted` event: `type` is `<prefix>.deleted` (the prefix is configurable, the op
/// is always the last segment; EVENT-FORMAT.md Part 1).
pub(crate) fn is_deleted(event: &CloudEvent) -> bool {
    event.ty.rsplit('.').next() == Some("deleted")
}

/// Template variables from a herald event ([`Vars::from_event`]); the group falls back to `source`
/// (`k8s://<cluster>/<group>/<plural>`) for an event without `k8sgroup` (one herald did not build).
pub(crate) fn vars(event: &CloudEvent) -> Vars<'_> {
    let mut vars = Vars::from_event(event);
    if !event.extensions.contains_key("k8sgroup") {
        vars.group = event
            .source
            .strip_prefix(SOURCE_SCHEME)
            .and_then(|rest| rest.split('/').nth(1))
            .unwrap_or_default();
    }
    vars
}

#[cfg(test)]
mod tests {
    use herald_sink_core::encode::kafka_binary_decode;
    use rdkafka::message::Headers;
    use serde_json::json;

    use super::*;

    fn widget(op: &str) -> CloudEvent {
        CloudEvent::new(
            format!("uid-1:42:{op}"),
            "k8s://prod/example.com/widgets",
            format!("dev.herald.resource.{op}"),
        )
        .subject("default/w1")
        .time("2026-01-02T03:04:05.678Z")
        .datacontenttype("application/json")
        .dataschema("urn:herald:change:v1")
        .extension("k8sgroup", "example.com")
        .extension("k8sversion", "v1")
        .extension("k8skind", "Widget")
        .extension("k8snamespace", "default")
        .extension("k8sname", "w1")
        .extension("partitionkey", "default/w1")
        .extension("sequence", "00000000000000000042")
        .extension("resync", false)
        .data(json!({"op": op, "resync": false}))
    }

    fn template(source: &str) -> Template {
        Template::parse(source).unwrap()
    }

    fn header<'a>(record: &'a Record, name: &str) -> Option<&'a [u8]> {
        record
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    #[test]
    fn binary_records_carry_data_and_every_attribute_as_ce_headers() {
        let event = widget("updated");
        let record = record(
            &template("herald"),
            KafkaMode::Binary,
            None,
            &event,
            Vec::new(),
        )
        .unwrap();
        assert_eq!(record.topic, "herald");
        assert_eq!(record.key.as_deref(), Some("default/w1"));
        assert_eq!(
            record.value.as_deref(),
            Some(&br#"{"op":"updated","resync":false}"#[..])
        );
        for (name, value) in [
            ("content-type", "application/json"),
            ("ce_specversion", "1.0"),
            ("ce_id", "uid-1:42:updated"),
            ("ce_source", "k8s://prod/example.com/widgets"),
            ("ce_type", "dev.herald.resource.updated"),
            ("ce_subject", "default/w1"),
            ("ce_time", "2026-01-02T03:04:05.678Z"),
            ("ce_dataschema", "urn:herald:change:v1"),
            ("ce_k8sgroup", "example.com"),
            ("ce_k8sversion", "v1"),
            ("ce_k8skind", "Widget"),
            ("ce_k8snamespace", "default"),
            ("ce_k8sname", "w1"),
            ("ce_partitionkey", "default/w1"),
            ("ce_sequence", "00000000000000000042"),
            ("ce_resync", "false"),
        ] {
            assert_eq!(header(&record, name), Some(value.as_bytes()), "{name}");
        }
        assert_eq!(header(&record, "ce_datacontenttype"), None);
        assert_eq!(record.headers.len(), 16);
        // The core decoder reads the record back into the same event.
        let decoded = kafka_binary_decode(
            record
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_slice())),
            record.value.as_deref().unwrap_or_default(),
        )
        .unwrap();
        assert_eq!(decoded.id, event.id);
        assert_eq!(decoded.data, event.data);
        assert_eq!(decoded.partition_key(), Some("default/w1"));
    }

    #[test]
    fn binary_events_without_data_have_no_value() {
        let event = CloudEvent::new("1", "/s", "t").extension("partitionkey", "k");
        let record = record(&template("t"), KafkaMode::Binary, None, &event, Vec::new()).unwrap();
        assert_eq!(record.value, None);
        assert_eq!(header(&record, "content-type"), None);
    }

    #[test]
    fn structured_records_carry_the_json_event() {
        let event = widget("created");
        let record = record(
            &template("t"),
            KafkaMode::Structured,
            None,
            &event,
            Vec::new(),
        )
        .unwrap();
        assert_eq!(record.key.as_deref(), Some("default/w1"));
        assert_eq!(
            record.headers,
            vec![(
                "content-type".to_owned(),
                b"application/cloudevents+json; charset=UTF-8".to_vec()
            )]
        );
        let value = record.value.unwrap();
        assert_eq!(value, event.to_structured_json());
        let json: serde_json::Value = serde_json::from_slice(&value).unwrap();
        assert_eq!(json["id"], "uid-1:42:created");
        assert_eq!(json["partitionkey"], "default/w1");
    }

    #[test]
    fn dead_letter_headers_follow_the_binding_headers() {
        let context = herald_sink_core::ErrorContext {
            sink: "webhook".into(),
            class: "permanent".into(),
            code: "http_4xx".into(),
            message: "HTTP 404 Not Found".into(),
            attempts: 3,
            first_failure: "2026-01-02T03:04:05.678Z".into(),
            last_failure: "2026-01-02T03:05:05.678Z".into(),
        };
        let record = record(
            &template("dlq"),
            KafkaMode::Binary,
            None,
            &widget("updated"),
            context.kafka_headers(),
        )
        .unwrap();
        for (name, value) in [
            ("herald_error_sink", "webhook"),
            ("herald_error_class", "permanent"),
            ("herald_error_code", "http_4xx"),
            ("herald_error_message", "HTTP 404 Not Found"),
            ("herald_error_attempts", "3"),
            ("herald_error_first_failure", "2026-01-02T03:04:05.678Z"),
            ("herald_error_last_failure", "2026-01-02T03:05:05.678Z"),
        ] {
            assert_eq!(header(&record, name), Some(value.as_bytes()), "{name}");
        }
        assert_eq!(record.headers[0].0, "ce_specversion");
        assert_eq!(
            record.headers.last().unwrap().0,
            "herald_error_last_failure"
        );
    }

    #[test]
    fn a_template_sets_the_key_and_adds_headers_or_fails_with_its_line() {
        let headers =
            std::collections::BTreeMap::from([("x-op".to_owned(), "{{ op }}".to_owned())]);
        let by_namespace =
            MessageTemplate::compile("bus", Some("{{ namespace }}"), &headers).unwrap();
        let event = widget("updated");
        let keyed = record(
            &template("t"),
            KafkaMode::Binary,
            Some(&by_namespace),
            &event,
            Vec::new(),
        )
        .unwrap();
        assert_eq!(keyed.key.as_deref(), Some("default"));
        assert_eq!(header(&keyed, "x-op"), Some(&b"updated"[..]));
        assert_eq!(
            keyed.headers[..keyed.headers.len() - 1],
            event.kafka_binary_headers()[..]
        );
        let broken = MessageTemplate::compile(
            "bus",
            Some("{{ object.spec.x.y }}"),
            &std::collections::BTreeMap::default(),
        )
        .unwrap();
        let error = record(
            &template("t"),
            KafkaMode::Binary,
            Some(&broken),
            &event,
            Vec::new(),
        )
        .unwrap_err();
        assert!(
            error.starts_with("template.key: line 1: undefined value"),
            "{error}"
        );
    }

    #[test]
    fn topics_render_from_extensions_and_source() {
        let event = widget("updated");
        let record = record(
            &template("herald.{group}.{version}.{kind}.{plural}.{namespace}"),
            KafkaMode::Binary,
            None,
            &event,
            Vec::new(),
        )
        .unwrap();
        assert_eq!(record.topic, "herald.example.com.v1.Widget.widgets.default");
    }

    #[test]
    fn core_group_and_cluster_scoped_objects_get_placeholders() {
        let event = CloudEvent::new("1", "k8s://prod/core/namespaces", "t.created")
            .extension("k8sgroup", "")
            .extension("k8sversion", "v1")
            .extension("k8skind", "Namespace");
        let vars = vars(&event);
        assert_eq!(vars.plural, "namespaces");
        assert_eq!(vars.namespace, None);
        assert_eq!(
            template("k8s.{group}.{plural}.{namespace}").render_kafka_topic(&vars),
            "k8s.core.namespaces._cluster"
        );
    }

    #[test]
    fn topics_are_sanitised() {
        let event = CloudEvent::new("1", "k8s://c/example.com/things", "t")
            .extension("k8skind", "Thing/with spaces")
            .extension("k8snamespace", "ns:1");
        let topic = template("herald-{kind}-{namespace}").render_kafka_topic(&vars(&event));
        assert_eq!(topic, "herald-Thing_with_spaces-ns_1");
        let long = CloudEvent::new("1", "k8s://c/g/p", "t").extension("k8skind", "k".repeat(400));
        let topic = template("{kind}").render_kafka_topic(&vars(&long));
        assert_eq!(topic.len(), herald_sink_core::template::KAFKA_TOPIC_MAX_LEN);
    }

    #[test]
    fn events_from_elsewhere_render_empty_variables() {
        let event = CloudEvent::new("1", "/not/herald", "t");
        assert_eq!(vars(&event), Vars::default());
        assert_eq!(template("x.{kind}").render_kafka_topic(&vars(&event)), "x.");
    }

    #[test]
    fn the_group_falls_back_to_source() {
        let event = CloudEvent::new("1", "k8s://c/apps/deployments", "t");
        assert_eq!(vars(&event).group, "apps");
        assert_eq!(vars(&event).plural, "deployments");
    }

    #[test]
    fn deleted_is_the_last_type_segment() {
        assert!(is_deleted(&widget("deleted")));
        assert!(is_deleted(&CloudEvent::new(
            "1",
            "/s",
            "com.example.deleted"
        )));
        assert!(!is_deleted(&widget("updated")));
        assert!(!is_deleted(&CloudEvent::new(
            "1",
            "/s",
            "com.example.undeleted"
        )));
    }

    #[test]
    fn tombstones_keep_topic_and_key_only() {
        let event = record(
            &template("t"),
            KafkaMode::Binary,
            None,
            &widget("deleted"),
            Vec::new(),
        )
        .unwrap();
        let tombstone = tombstone(&event);
        assert_eq!(tombstone.topic, "t");
        assert_eq!(tombstone.key.as_deref(), Some("default/w1"));
        assert_eq!(tombstone.value, None);
        assert!(tombstone.headers.is_empty());
    }

    #[test]
    fn wire_size_matches_librdkafkas_estimate() {
        let bare = Record {
            topic: "t".into(),
            key: None,
            value: None,
            headers: Vec::new(),
        };
        assert_eq!(bare.wire_size(), 36);
        let record = Record {
            topic: "t".into(),
            key: Some("abc".into()),
            value: Some(vec![0; 100]),
            // Name 4 bytes (varint 1), value 63 bytes (zigzag 126: varint 1), 64 bytes (zigzag
            // 128: varint 2).
            headers: vec![("name".into(), vec![1; 63]), ("n".into(), vec![1; 64])],
        };
        assert_eq!(
            record.wire_size(),
            36 + 3 + 100 + (4 + 63 + 2) + (1 + 64 + 3)
        );
        assert_eq!(zigzag_varint_len(0), 1);
        assert_eq!(zigzag_varint_len(63), 1);
        assert_eq!(zigzag_varint_len(64), 2);
        assert_eq!(zigzag_varint_len(8191), 2);
        assert_eq!(zigzag_varint_len(8192), 3);
    }

    #[test]
    fn owned_headers_keep_names_values_and_order() {
        let record = record(
            &template("t"),
            KafkaMode::Binary,
            None,
            &widget("updated"),
            Vec::new(),
        )
        .unwrap();
        let owned = record.owned_headers();
        assert_eq!(owned.count(), record.headers.len());
        for (i, (name, value)) in record.headers.iter().enumerate() {
            let header = owned.get(i);
            assert_eq!(header.key, name);
            assert_eq!(header.value, Some(value.as_slice()));
        }
    }
}
