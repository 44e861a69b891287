//! Events → NATS messages (subject, headers, payload); start at [`render_subject`].

use async_nats::{HeaderMap, HeaderName, HeaderValue};
use herald_sink_core::Sendable;
use herald_sink_core::encode::{CONTENT_TYPE_HEADER, STRUCTURED_CONTENT_TYPE, encode_header_value};
use herald_sink_core::event::CloudEvent;
use herald_sink_core::sink::{ErrorContext, Reason};
use herald_sink_core::template::{Template, Vars};

use crate::NatsMode;
use crate::classify::codes;

/// The header JetStream de-duplicates on; herald sets it to the event `id`.
pub const MSG_ID_HEADER: &str = "Nats-Msg-Id";

/// The subject `event` is published to: `template` rendered with [`Vars::from_event`] (the
/// `k8s*` extensions, `{plural}` from `source`, `{op}` from `type`), each value made exactly one
/// token (`.`, `*`, `>`, whitespace and control characters become `_`, an empty value becomes
/// `_`; case and length are kept). The core group renders as `core` and a cluster-scoped
/// object's namespace as `_cluster`.
///
/// ```
/// use herald_sink_core::{CloudEvent, Template};
///
/// let event = CloudEvent::new("u:1:created", "k8s://prod/example.com/widgets", "dev.herald.resource.created")
///     .extension("k8sgroup", "example.com")
///     .extension("k8sversion", "v1")
///     .extension("k8skind", "Widget")
///     .extension("k8snamespace", "team-a")
///     .extension("k8sname", "web.v2");
/// let template = Template::parse("herald.{namespace}.{group}.{kind}.{name}.{op}")?;
/// assert_eq!(
///     herald_sink_nats::render_subject(&template, &event),
///     "herald.team-a.example_com.Widget.web_v2.created"
/// );
/// # Ok::<(), herald_sink_core::TemplateError>(())
/// ```
#[must_use]
pub fn render_subject(template: &Template, event: &CloudEvent) -> String {
    template.render_nats_subject(&Vars::from_event(event))
}

/// One NATS message, before it becomes the client's types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Message {
    pub(crate) subject: String,
    /// `(name, value)` in the order built; NATS keeps no order, but tests read it.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) payload: Vec<u8>,
}

impl Message {
    /// The event as a message in `mode`: structured puts the JSON event in the payload with
    /// `content-type: application/cloudevents+json; charset=UTF-8`; binary puts `data` in the
    /// payload and every attribute, `datacontenttype` included, in a percent-encoded `ce-` header
    /// ([`CloudEvent::nats_binary_headers`], the NATS binding's mapping). On JetStream, `Nats-Msg-Id` is the event `id`,
    /// percent-encoded like `ce-id` (unchanged for herald's usual `<uid>:<rv>:<op>` ids).
    /// A dead letter's context is added as `herald-error-*` headers, percent-encoded like `ce-`
    /// values (a server message may hold a line break, which a NATS header cannot carry).
    pub(crate) fn build<E: Sendable>(
        subject: String,
        mode: NatsMode,
        event: &E,
        jetstream: bool,
        error: Option<&ErrorContext>,
    ) -> Self {
        // A journaled event's stored bytes go out as they are: neither mode parses `data`.
        let (mut headers, payload) = match mode {
            NatsMode::Structured => (
                vec![(
                    CONTENT_TYPE_HEADER.to_owned(),
                    STRUCTURED_CONTENT_TYPE.to_owned(),
                )],
                event.json_bytes().into_owned(),
            ),
            NatsMode::Binary => (
                event.binding_attributes().nats_binary_headers(),
                event.body_bytes().into_owned(),
            ),
        };
        let event = event.attributes();
        if jetstream {
            // Percent-encoded like `ce-id`: an id holding a line break (from an object's uid) must
            // not make the message unsendable; equal ids still give equal values for de-duplication.
            headers.push((
                MSG_ID_HEADER.to_owned(),
                encode_header_value(&event.id).into_owned(),
            ));
        }
        if let Some(error) = error {
            headers.extend(
                error
                    .hyphen_headers()
                    .into_iter()
                    .map(|(name, value)| (name, encode_header_value(&value).into_owned())),
            );
        }
        Self {
            subject,
            headers,
            payload,
        }
    }

    /// Bytes the server counts against `max_payload`: the header block as `HPUB` sends it
    /// (`NATS/1.0\r\n`, `name: value\r\n` per header, `\r\n`) plus the payload.
    pub(crate) fn wire_len(&self) -> usize {
        if self.headers.is_empty() {
            return self.payload.len();
        }
        let block: usize = self
            .headers
            .iter()
            .map(|(name, value)| name.len() + ": ".len() + value.len() + "\r\n".len())
            .sum();
        "NATS/1.0\r\n".len() + block + "\r\n".len() + self.payload.len()
    }

    /// The headers as the client's map, checked without panicking (the client's infallible
    /// conversions assert).
    ///
    /// # Errors
    ///
    /// A reason with code `invalid_header` for a name NATS cannot carry (control characters,
    /// non-ASCII, `:`) or a value with a line break; it names the header, not the value.
    pub(crate) fn header_map(&self) -> Result<HeaderMap, Reason> {
        let mut map = HeaderMap::new();
        for (name, value) in &self.headers {
            let header_name: HeaderName = name.parse().map_err(|_| {
                Reason::new(
                    codes::INVALID_HEADER,
                    format!("header name {name:?} cannot be carried by NATS"),
                )
            })?;
            let header_value: HeaderValue = value.parse().map_err(|_| {
                Reason::new(
                    codes::INVALID_HEADER,
                    format!("the value of header {name} contains a line break"),
                )
            })?;
            map.append(header_name, header_value);
        }
        Ok(map)
    }
}

/// `the NATS message of N bytes (headers and payload) exceeds the server's max_payload of M
/// bytes`, the detail of an `oversize` rejection.
pub(crate) fn oversize_detail(size: usize, max_payload: usize) -> String {
    format!(
        "the NATS message (headers and payload) of {size} bytes exceeds the server's max_payload of {max_payload} bytes"
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn widget() -> CloudEvent {
        CloudEvent::new(
            "0c5f-42:1234:updated",
            "k8s://prod/example.com/widgets",
            "dev.herald.resource.updated",
        )
        .subject("team-a/my-widget")
        .time("2026-01-02T03:04:05.678Z")
        .datacontenttype("application/json")
        .extension("k8sgroup", "example.com")
        .extension("k8sversion", "v1alpha1")
        .extension("k8skind", "Widget")
        .extension("k8snamespace", "team-a")
        .extension("k8sname", "my-widget")
        .extension("partitionkey", "team-a/my-widget")
        .extension("resync", false)
        .data(json!({"op": "updated", "resync": false}))
    }

    fn header<'a>(message: &'a Message, name: &str) -> Option<&'a str> {
        message
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn every_variable_comes_from_the_event() {
        let template =
            Template::parse("herald.{group}.{version}.{kind}.{plural}.{namespace}.{name}.{op}")
                .unwrap();
        assert_eq!(
            render_subject(&template, &widget()),
            "herald.example_com.v1alpha1.Widget.widgets.team-a.my-widget.updated"
        );
    }

    #[test]
    fn renders_core_group_and_cluster_scoped_objects() {
        let event = CloudEvent::new("u:1:created", "k8s://c/core/namespaces", "t")
            .extension("k8sgroup", "")
            .extension("k8sversion", "v1")
            .extension("k8skind", "Namespace");
        let template = Template::parse("herald.{group}.{version}.{plural}.{namespace}").unwrap();
        assert_eq!(
            render_subject(&template, &event),
            "herald.core.v1.namespaces._cluster"
        );
    }

    #[test]
    fn each_value_is_one_token_whatever_it_holds() {
        let long_group = format!("{}.example.com", "g".repeat(240));
        let long_name = format!("{}.x", "n".repeat(250));
        let event = CloudEvent::new("id", "k8s://c/x/we.ird*plural>", "t.up*")
            .extension("k8sgroup", long_group.as_str())
            .extension("k8sversion", "v1 beta")
            .extension("k8skind", "UPPER.Case")
            .extension("k8snamespace", ">")
            .extension("k8sname", long_name.as_str());
        let template =
            Template::parse("h.{group}.{version}.{kind}.{plural}.{namespace}.{name}.{op}").unwrap();
        let subject = render_subject(&template, &event);
        let tokens: Vec<&str> = subject.split('.').collect();
        assert_eq!(
            tokens,
            [
                "h",
                format!("{}_example_com", "g".repeat(240)).as_str(),
                "v1_beta",
                "UPPER_Case",
                "we_ird_plural_",
                "_",
                format!("{}_x", "n".repeat(250)).as_str(),
                "up_"
            ]
        );
        assert!(
            tokens
                .iter()
                .all(|t| !t.is_empty() && !t.contains(['*', '>', ' ']))
        );
    }

    #[test]
    fn missing_extensions_render_as_placeholders() {
        let event = CloudEvent::new("id", "", "t");
        let template =
            Template::parse("h.{group}.{kind}.{plural}.{namespace}.{name}.{op}").unwrap();
        assert_eq!(render_subject(&template, &event), "h.core._._._cluster._._");
    }

    #[test]
    fn structured_mode_carries_the_json_event() {
        let event = widget();
        let message = Message::build("s".into(), NatsMode::Structured, &event, false, None);
        assert_eq!(
            message.headers,
            [(
                "content-type".to_owned(),
                "application/cloudevents+json; charset=UTF-8".to_owned()
            )]
        );
        assert_eq!(message.payload, event.to_structured_json());
        assert_eq!(
            CloudEvent::from_structured_json(&message.payload).unwrap(),
            event
        );
    }

    #[test]
    fn binary_mode_carries_ce_headers_and_data() {
        let event = widget().subject("team-a/my widget");
        let message = Message::build("s".into(), NatsMode::Binary, &event, false, None);
        assert_eq!(message.payload, br#"{"op":"updated","resync":false}"#);
        assert_eq!(header(&message, "ce-id"), Some("0c5f-42:1234:updated"));
        assert_eq!(header(&message, "ce-specversion"), Some("1.0"));
        assert_eq!(header(&message, "ce-subject"), Some("team-a/my%20widget"));
        assert_eq!(header(&message, "ce-resync"), Some("false"));
        assert_eq!(header(&message, "ce-k8skind"), Some("Widget"));
        // Issue 15, item 3: the NATS binding maps datacontenttype like every other attribute.
        assert_eq!(
            header(&message, "ce-datacontenttype"),
            Some("application/json")
        );
        assert_eq!(header(&message, "content-type"), None);
        assert_eq!(header(&message, MSG_ID_HEADER), None);
        assert_eq!(message.headers, event.nats_binary_headers());
    }

    #[test]
    fn jetstream_messages_carry_the_event_id_for_dedup() {
        for mode in [NatsMode::Structured, NatsMode::Binary] {
            let message = Message::build("s".into(), mode, &widget(), true, None);
            assert_eq!(
                header(&message, "Nats-Msg-Id"),
                Some("0c5f-42:1234:updated")
            );
        }
    }

    /// Issue 14, item 4: a name (or uid) with control characters still makes a message NATS can
    /// carry, in both modes, and the binary headers decode back to the same attributes.
    #[test]
    fn control_characters_in_names_make_sendable_messages() {
        let odd = "a\nb\r\0c\u{7F} d";
        let event = widget()
            .subject(format!("team-a/{odd}"))
            .extension("k8sname", odd)
            .extension("partitionkey", format!("team-a/{odd}"));
        let mut event = event;
        event.id = format!("uid-{odd}:1:created");
        for mode in [NatsMode::Structured, NatsMode::Binary] {
            let message = Message::build("s".into(), mode, &event, true, None);
            message.header_map().unwrap();
            assert!(
                message
                    .headers
                    .iter()
                    .all(|(_, v)| !v.contains(['\r', '\n', '\0']))
            );
        }
        let binary = Message::build("s".into(), NatsMode::Binary, &event, true, None);
        let decoded =
            herald_sink_core::encode::nats_binary_decode(binary.headers.clone(), &binary.payload)
                .unwrap();
        assert_eq!(decoded.subject, event.subject);
        assert_eq!(decoded.id, event.id);
        assert_eq!(
            decoded.extensions["k8sname"],
            herald_sink_core::ExtensionValue::String(odd.to_owned())
        );
    }

    #[test]
    fn dead_letters_carry_percent_encoded_error_headers() {
        let error = ErrorContext {
            sink: "webhook".into(),
            class: "permanent".into(),
            code: "http_4xx".into(),
            message: "HTTP 400 Bad Request:\r\nno 100% sure".into(),
            attempts: 3,
            first_failure: "2026-01-02T03:04:05.678Z".into(),
            last_failure: "2026-01-02T03:04:09.000Z".into(),
        };
        let message = Message::build(
            "s".into(),
            NatsMode::Structured,
            &widget(),
            true,
            Some(&error),
        );
        assert_eq!(header(&message, "herald-error-sink"), Some("webhook"));
        assert_eq!(header(&message, "herald-error-class"), Some("permanent"));
        assert_eq!(header(&message, "herald-error-code"), Some("http_4xx"));
        assert_eq!(header(&message, "herald-error-attempts"), Some("3"));
        assert_eq!(
            header(&message, "herald-error-message"),
            Some("HTTP%20400%20Bad%20Request:%0D%0Ano%20100%25%20sure")
        );
        assert_eq!(
            header(&message, "herald-error-first-failure"),
            Some("2026-01-02T03:04:05.678Z")
        );
        assert_eq!(
            header(&message, "herald-error-last-failure"),
            Some("2026-01-02T03:04:09.000Z")
        );
        assert!(message.header_map().is_ok());
    }

    #[test]
    fn wire_length_counts_the_header_block() {
        let message = Message {
            subject: "s".into(),
            headers: vec![("a".into(), "1".into()), ("bc".into(), "23".into())],
            payload: b"xyz".to_vec(),
        };
        // "NATS/1.0\r\n" + "a: 1\r\n" + "bc: 23\r\n" + "\r\n" + "xyz"
        assert_eq!(message.wire_len(), 10 + 6 + 8 + 2 + 3);
        let bare = Message {
            headers: vec![],
            ..message
        };
        assert_eq!(bare.wire_len(), 3);
    }

    #[test]
    fn header_map_refuses_what_nats_cannot_carry() {
        let with = |name: &str, value: &str| Message {
            subject: "s".into(),
            headers: vec![(name.into(), value.into())],
            payload: vec![],
        };
        let map = with("ce-id", "a:b").header_map().unwrap();
        assert_eq!(map.get("ce-id").map(HeaderValue::as_str), Some("a:b"));
        for (name, value) in [("ce-id", "a\r\nb"), ("bad:name", "v"), ("naïve", "v")] {
            let reason = with(name, value).header_map().unwrap_err();
            assert_eq!(reason.code, "invalid_header", "{name}");
            assert!(!reason.detail.contains("a\r\nb"), "{}", reason.detail);
        }
    }

    #[test]
    fn oversize_detail_names_both_sizes() {
        assert_eq!(
            oversize_detail(2048, 1024),
            "the NATS message (headers and payload) of 2048 bytes exceeds the server's max_payload of 1024 bytes"
        );
    }
}
