//! Events → request headers and body, without any I/O; start at [`build`].

use herald_sink_core::Sendable;
use herald_sink_core::encode::{
    BATCH_CONTENT_TYPE, CONTENT_TYPE_HEADER, STRUCTURED_CONTENT_TYPE, encode_header_value,
};
use herald_sink_core::event::CloudEvent;
use sha2::{Digest, Sha256};

use crate::settings::{Mode, Settings};
use crate::sign;

/// One HTTP request, ready to send: the headers in sending order and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Built {
    /// `webhook-id`: the event's `id` percent-encoded like `ce-id`, or for a batch an id derived
    /// from its events' ids.
    pub(crate) id: String,
    /// Lower-case names except the configured extra headers, which keep their spelling.
    pub(crate) headers: Vec<(String, String)>,
    /// The body.
    pub(crate) body: Vec<u8>,
    /// The method a template rendered; `None`: the configured one.
    pub(crate) method: Option<reqwest::Method>,
    /// The path a template rendered, appended to the URL's; `None`: the URL as configured.
    pub(crate) path: Option<String>,
}

/// The request for `events` under `config`, signed with `timestamp` (unix seconds) when signing
/// is configured.
///
/// `events` holds exactly one event in binary and structured mode, and one request's worth in
/// batched mode. `error_headers` (dead-letter forwarding: `herald-error-*` names, checked by the
/// caller) have their values percent-encoded like `ce-` headers. Header order: the configured
/// extra headers, `error_headers`, the binding's headers (`ce-*`, `content-type`),
/// `authorization`, then the signature headers.
///
/// With a template (`config.template`) the rendered headers follow the extra headers, the `ce-`
/// headers are sent only when it asks for them, and the rendered body, content type, method and
/// path replace the mode's.
///
/// # Errors
///
/// The template's render error (`template.<part>: line N: …`).
pub(crate) fn build<E: Sendable>(
    config: &Settings,
    events: &[&E],
    error_headers: &[(String, String)],
    timestamp: u64,
) -> Result<Built, String> {
    let mut headers = config.headers.clone();
    let rendered = match &config.template {
        Some(template) => {
            let batched = matches!(config.mode, Mode::Batched { .. });
            // A template may read `data`: only then is a journaled event's parsed.
            let whole: Vec<&CloudEvent> = events.iter().map(|e| e.event()).collect();
            Some((template, template.render(&whole, batched)?))
        }
        None => None,
    };
    if let Some((_, rendered)) = &rendered {
        headers.extend(rendered.headers.iter().cloned());
    }
    headers.extend(
        error_headers
            .iter()
            .map(|(name, value)| (name.clone(), encode_header_value(value).into_owned())),
    );
    let (id, mut binding_headers, mut body) = match (config.mode, events) {
        // A journaled event's stored bytes go out as they are: no mode parses `data`.
        (Mode::Binary, [event]) => (
            event.attributes().id.clone(),
            event.binding_attributes().http_binary_headers(),
            event.body_bytes().into_owned(),
        ),
        (Mode::Structured, [event]) => (
            event.attributes().id.clone(),
            vec![(
                CONTENT_TYPE_HEADER.to_owned(),
                STRUCTURED_CONTENT_TYPE.to_owned(),
            )],
            event.json_bytes().into_owned(),
        ),
        // Batched mode, or (never from `send`) several events in a per-event mode: an array.
        _ => (
            batch_id(events),
            vec![(
                CONTENT_TYPE_HEADER.to_owned(),
                BATCH_CONTENT_TYPE.to_owned(),
            )],
            json_batch(events),
        ),
    };
    let (mut method, mut path) = (None, None);
    if let Some((template, rendered)) = rendered {
        let mode_content_type = binding_headers
            .iter()
            .find(|(name, _)| name == CONTENT_TYPE_HEADER)
            .map(|(_, value)| value.clone());
        binding_headers = match events {
            [event] if template.ce_headers => event
                .binding_attributes()
                .http_binary_headers()
                .into_iter()
                .filter(|(name, _)| name != CONTENT_TYPE_HEADER)
                .collect(),
            _ => Vec::new(),
        };
        if let Some(content_type) = rendered.content_type.or(mode_content_type) {
            binding_headers.push((CONTENT_TYPE_HEADER.to_owned(), content_type));
        }
        if let Some(rendered_body) = rendered.body {
            body = rendered_body;
        }
        method = rendered.method;
        path = rendered.path;
    }
    headers.append(&mut binding_headers);
    if let Some(auth) = &config.auth {
        headers.push(("authorization".to_owned(), auth.header_value()));
    }
    // `webhook-id` is a header and the signature covers it as sent: percent-encoded like `ce-id`, so
    // an id with a line break (from an object's uid) can be carried; herald's usual ids are unchanged.
    let id = encode_header_value(&id).into_owned();
    if let Some(signing) = &config.signing {
        headers.push((sign::WEBHOOK_ID.to_owned(), id.clone()));
        headers.push((sign::WEBHOOK_TIMESTAMP.to_owned(), timestamp.to_string()));
        headers.push((
            sign::WEBHOOK_SIGNATURE.to_owned(),
            sign::standard_signature(&signing.secret, &id, timestamp, &body),
        ));
        if let Some(hub_secret) = &signing.hub_signature_256_secret {
            headers.push((
                sign::HUB_SIGNATURE_256.to_owned(),
                sign::hub_signature_256(hub_secret, &body),
            ));
        }
    }
    Ok(Built {
        id,
        headers,
        body,
        method,
        path,
    })
}

/// `events` as a JSON array of JSON-format events, as
/// [`to_structured_json_batch`](herald_sink_core::encode::to_structured_json_batch) writes it,
/// from each event's stored bytes.
fn json_batch<E: Sendable>(events: &[&E]) -> Vec<u8> {
    let mut out = vec![b'['];
    for (index, event) in events.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&event.json_bytes());
    }
    out.push(b']');
    out
}

/// `batch_<32 hex digits>`: the start of SHA-256 over the events' ids, one per line, so a retried
/// batch of the same events repeats its `webhook-id` (receivers de-duplicate on it). It has no `.`,
/// which the Standard Webhooks signed content uses as its delimiter.
fn batch_id<E: Sendable>(events: &[&E]) -> String {
    let mut hasher = Sha256::new();
    for event in events {
        hasher.update(event.attributes().id.as_bytes());
        hasher.update(b"\n");
    }
    let digest = hasher.finalize();
    format!("batch_{}", sign::hex(&digest[..16]))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::settings::{Auth, SigningConfig};

    fn event(id: &str) -> CloudEvent {
        CloudEvent::new(
            id,
            "k8s://prod/example.com/widgets",
            "dev.herald.resource.updated",
        )
        .subject("default/w 1")
        .time("2026-01-02T03:04:05.678Z")
        .datacontenttype("application/json")
        .dataschema("urn:herald:change:v1")
        .extension("partitionkey", "default/w 1")
        .extension("resync", false)
        .data(json!({"op": "updated", "resync": false}))
    }

    fn names(built: &Built) -> Vec<&str> {
        built.headers.iter().map(|(n, _)| n.as_str()).collect()
    }

    fn header<'a>(built: &'a Built, name: &str) -> Option<&'a str> {
        built
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn binary_mode_sends_data_with_ce_headers() {
        let e = event("u1:10:updated");
        let built = build(&Settings::new("http://h/"), &[&e], &[], 0).unwrap();
        assert_eq!(built.id, "u1:10:updated");
        assert_eq!(built.body, br#"{"op":"updated","resync":false}"#);
        assert_eq!(built.headers, e.http_binary_headers());
        assert_eq!(header(&built, "ce-subject"), Some("default/w%201"));
        assert_eq!(header(&built, "ce-resync"), Some("false"));
        assert_eq!(header(&built, "content-type"), Some("application/json"));
        assert_eq!(header(&built, "ce-datacontenttype"), None);
        assert_eq!(header(&built, "webhook-signature"), None);
        assert_eq!(header(&built, "authorization"), None);
        // What a receiver decodes is the event that was sent.
        let decoded =
            herald_sink_core::encode::http_binary_decode(built.headers.clone(), &built.body)
                .unwrap();
        assert_eq!(decoded.id, e.id);
        assert_eq!(decoded.subject, e.subject);
        assert_eq!(decoded.data, e.data);
    }

    #[test]
    fn binary_mode_without_data_has_an_empty_body_and_no_content_type() {
        let e = CloudEvent::new("1", "/s", "t");
        let built = build(&Settings::new("http://h/"), &[&e], &[], 0).unwrap();
        assert!(built.body.is_empty());
        assert_eq!(header(&built, "content-type"), None);
    }

    #[test]
    fn structured_mode_sends_the_json_event() {
        let e = event("u1:10:updated");
        let config = Settings {
            mode: Mode::Structured,
            ..Settings::new("http://h/")
        };
        let built = build(&config, &[&e], &[], 0).unwrap();
        assert_eq!(
            built.headers,
            [(
                "content-type".to_owned(),
                "application/cloudevents+json; charset=UTF-8".to_owned()
            )]
        );
        assert_eq!(built.body, e.to_structured_json());
        assert_eq!(CloudEvent::from_structured_json(&built.body).unwrap(), e);
        assert_eq!(built.id, e.id);
    }

    #[test]
    fn batched_mode_sends_a_json_array() {
        let (a, b) = (event("a:1:created"), event("b:2:deleted"));
        let config = Settings {
            mode: Mode::Batched { max_events: 10 },
            ..Settings::new("http://h/")
        };
        let built = build(&config, &[&a, &b], &[], 0).unwrap();
        assert_eq!(names(&built), ["content-type"]);
        assert!(
            header(&built, "content-type")
                .unwrap()
                .starts_with("application/cloudevents-batch+json")
        );
        let events = herald_sink_core::encode::from_structured_json_batch(&built.body).unwrap();
        assert_eq!(events, [a.clone(), b.clone()]);
        // Stable for the same events, different for others, and free of '.'.
        assert_eq!(built.id, build(&config, &[&a, &b], &[], 99).unwrap().id);
        assert_ne!(built.id, build(&config, &[&a], &[], 0).unwrap().id);
        assert!(
            built.id.starts_with("batch_") && built.id.len() == 38,
            "{}",
            built.id
        );
        assert!(!built.id.contains('.'));
    }

    #[test]
    fn extra_headers_auth_and_signatures_are_added_in_order() {
        let e = event("u1:10:updated");
        let config = Settings {
            headers: vec![("X-Tenant".into(), "payments".into())],
            auth: Some(Auth::Bearer("t0ken".into())),
            signing: Some(
                SigningConfig::standard("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
                    .unwrap()
                    .with_hub_signature_256(b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_vec()),
            ),
            ..Settings::new("http://h/")
        };
        let built = build(&config, &[&e], &[], 1_614_265_330).unwrap();
        let names = names(&built);
        assert_eq!(names.first(), Some(&"X-Tenant"));
        assert_eq!(
            &names[names.len() - 5..],
            [
                "authorization",
                "webhook-id",
                "webhook-timestamp",
                "webhook-signature",
                "x-hub-signature-256"
            ]
        );
        assert_eq!(header(&built, "authorization"), Some("Bearer t0ken"));
        assert_eq!(header(&built, "webhook-id"), Some("u1:10:updated"));
        assert_eq!(header(&built, "webhook-timestamp"), Some("1614265330"));
        let signing = config.signing.as_ref().unwrap();
        assert_eq!(
            header(&built, "webhook-signature").unwrap(),
            sign::standard_signature(&signing.secret, &e.id, 1_614_265_330, &built.body)
        );
        assert_eq!(
            header(&built, "x-hub-signature-256").unwrap(),
            sign::hub_signature_256(b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &built.body)
        );
    }

    #[test]
    fn dead_letter_headers_follow_the_configured_ones_percent_encoded() {
        let e = event("u1:10:updated");
        let config = Settings {
            headers: vec![("X-Tenant".into(), "payments".into())],
            ..Settings::new("http://h/")
        };
        let error_headers = [
            ("herald-error-code".to_owned(), "http_4xx".to_owned()),
            (
                "herald-error-message".to_owned(),
                "HTTP 404 Not Found: \"no\" 100%".to_owned(),
            ),
        ];
        let built = build(&config, &[&e], &error_headers, 0).unwrap();
        assert_eq!(
            &built.headers[..3],
            [
                ("X-Tenant".to_owned(), "payments".to_owned()),
                ("herald-error-code".to_owned(), "http_4xx".to_owned()),
                (
                    "herald-error-message".to_owned(),
                    "HTTP%20404%20Not%20Found:%20%22no%22%20100%25".to_owned()
                ),
            ]
        );
        assert_eq!(built.body, e.data_bytes());
    }

    #[test]
    fn each_attempt_is_signed_with_its_own_timestamp() {
        let e = event("u1:10:updated");
        let config = Settings {
            signing: Some(
                SigningConfig::standard("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap(),
            ),
            ..Settings::new("http://h/")
        };
        let first = build(&config, &[&e], &[], 100).unwrap();
        let second = build(&config, &[&e], &[], 160).unwrap();
        assert_eq!(header(&first, "webhook-id"), header(&second, "webhook-id"));
        assert_ne!(
            header(&first, "webhook-signature"),
            header(&second, "webhook-signature")
        );
    }

    #[test]
    fn batch_signatures_cover_the_whole_array() {
        let (a, b) = (event("a:1:created"), event("b:2:deleted"));
        let config = Settings {
            mode: Mode::Batched { max_events: 2 },
            signing: Some(SigningConfig {
                secret: b"key".to_vec(),
                hub_signature_256_secret: None,
            }),
            ..Settings::new("http://h/")
        };
        let built = build(&config, &[&a, &b], &[], 7).unwrap();
        assert_eq!(header(&built, "webhook-id"), Some(built.id.as_str()));
        assert_eq!(
            header(&built, "webhook-signature").unwrap(),
            sign::standard_signature(b"key", &built.id, 7, &built.body)
        );
    }

    /// Issue 14, item 4: control characters in a name or id still make headers HTTP can carry,
    /// and the signature covers the `webhook-id` as sent.
    #[test]
    fn control_characters_make_carriable_headers_and_a_matching_signature() {
        let mut e = event("u\n1:10:updated").subject("default/a\nb\0c\u{7F}");
        e.extensions.insert(
            "k8sname".into(),
            herald_sink_core::ExtensionValue::String("a\nb\0c\u{7F}".into()),
        );
        let config = Settings {
            signing: Some(SigningConfig {
                secret: b"key".to_vec(),
                hub_signature_256_secret: None,
            }),
            ..Settings::new("http://h/")
        };
        let built = build(&config, &[&e], &[], 7).unwrap();
        for (name, value) in &built.headers {
            assert!(
                reqwest::header::HeaderValue::from_str(value).is_ok(),
                "{name}: {value:?}"
            );
        }
        assert_eq!(built.id, "u%0A1:10:updated");
        assert_eq!(header(&built, "webhook-id"), Some("u%0A1:10:updated"));
        assert_eq!(
            header(&built, "webhook-signature").unwrap(),
            sign::standard_signature(b"key", "u%0A1:10:updated", 7, &built.body)
        );
        let decoded =
            herald_sink_core::encode::http_binary_decode(built.headers.clone(), &built.body)
                .unwrap();
        assert_eq!(decoded.id, e.id);
        assert_eq!(decoded.subject, e.subject);
    }
}
