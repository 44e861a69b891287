//! `template:` of a webhook sink: the request a receiver's API wants (GitHub, `PagerDuty`, Loki)
//! instead of a `CloudEvent`; start at [`WebhookTemplate`] (as users write it) and
//! [`RequestTemplate`] (compiled, secrets resolved).
//!
//! The templates are minijinja ([`herald_sink_core::jinja`]); they compile when the configuration
//! loads, so a syntax error or an unknown filter is a configuration error with its key path and
//! line. A template that fails for one event rejects that event (code `render_failed`): it is
//! dead-lettered with the error as its context, and `herald dlq replay` renders it again with the
//! configuration then in force.

use std::collections::BTreeMap;
use std::fmt;

use herald_sink_core::config::{Problems, SecretRef};
use herald_sink_core::event::CloudEvent;
use herald_sink_core::jinja::{self, Templates};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::config::header_problem;

/// The content type of a templated body when `contentType` is not given.
pub const DEFAULT_TEMPLATE_CONTENT_TYPE: &str = "application/json";

/// `template` of a webhook sink: each request's parts rendered from the event (or, in batched mode,
/// from the batch's `events`). Parts left out keep their usual value: the mode's body and content
/// type, `method`, the `url` as written. With a template, the `ce-` headers are sent only when
/// `ceHeaders` is `true`; auth and Standard Webhooks signing apply as always.
///
/// ```yaml
/// template:
///   path: /repos/acme/deploy/dispatches
///   headers: {Accept: application/vnd.github+json}
///   body: |
///     {"event_type": "herald.{{ op }}", "client_payload": {{ {"subject": subject} | tojson }}}
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookTemplate {
    /// The body. Default: what `mode` sends (the event's `data`, the JSON event, or the batch).
    /// Example: `{"text": {{ subject | tojson }}}`.
    #[serde(default)]
    pub body: Option<String>,
    /// The `Content-Type` header. Default `application/json` with a `body` template, else the
    /// mode's. Example: `application/x-ndjson`.
    #[serde(default)]
    pub content_type: Option<String>,
    /// The method, rendered and upper-cased (`POST`, `PUT`, `PATCH`, `DELETE` …); it replaces
    /// `method`. Default: `method`. Example: `{% if op == 'deleted' %}DELETE{% else %}PUT{% endif %}`.
    #[serde(default)]
    pub method: Option<String>,
    /// A path appended to the path of `url` (its query kept), starting with `/`; values are
    /// inserted as rendered, so escape them with `urlencode`. Default: `url` as written.
    /// Example: `/repos/acme/{{ name | urlencode }}/dispatches`.
    #[serde(default)]
    pub path: Option<String>,
    /// Headers, name to template, sent after `headers`. The names herald sets itself are refused
    /// as in `headers`. Default: none. Example: `{X-Object: "{{ subject }}"}`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Also send the CloudEvents `ce-` headers (binary mode's) with the templated request.
    /// Default `false`. Example: `true`.
    #[serde(default)]
    pub ce_headers: bool,
    /// Secrets the templates may use as `secrets.<name>` (a `PagerDuty` routing key in the body),
    /// name to secret reference; `herald render` masks their values. Default: none.
    /// Example: `{routingKey: ${PAGERDUTY_ROUTING_KEY}}`.
    #[serde(default)]
    pub secrets: BTreeMap<String, SecretRef>,
}

/// Template names: the key paths below the sink, so errors read as configuration errors.
const BODY: &str = "template.body";
const CONTENT_TYPE: &str = "template.contentType";
const METHOD: &str = "template.method";
const PATH: &str = "template.path";

impl WebhookTemplate {
    /// Every template with its key path.
    fn sources(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (name, source) in [
            (BODY, &self.body),
            (CONTENT_TYPE, &self.content_type),
            (METHOD, &self.method),
            (PATH, &self.path),
        ] {
            if let Some(source) = source {
                out.push((name.to_owned(), source.clone()));
            }
        }
        for (name, source) in &self.headers {
            out.push((format!("template.headers.{name}"), source.clone()));
        }
        out
    }

    /// Records the templates that do not compile (with their line), header names herald sets
    /// itself or that repeat `headers`, and secret names a template cannot spell.
    pub(crate) fn validate(
        &self,
        literal_headers: &BTreeMap<String, String>,
        problems: &mut Problems,
    ) {
        for (name, source) in self.sources() {
            if let Err(problem) = Templates::compile([(name.clone(), source)]) {
                problems.add(name, problem.message);
            }
        }
        for (name, value) in &self.headers {
            let key = format!("template.headers.{name}");
            if let Some(message) = header_problem(name, value) {
                problems.add(key, message);
            } else if literal_headers
                .keys()
                .chain(self.headers.keys().filter(|n| *n != name))
                .any(|other| other.eq_ignore_ascii_case(name))
            {
                problems.add(
                    key,
                    format!("{name:?} is set twice (header names ignore case)"),
                );
            }
        }
        for name in self.secrets.keys() {
            if !herald_sink_core::config::is_var_name(name) {
                problems.add(
                    format!("template.secrets.{name}"),
                    format!("{name:?} is not a name a template can use (letters, digits, _)"),
                );
            }
        }
    }

    /// Compiles the templates and resolves the secrets.
    pub(crate) fn compile(
        &self,
        sink: &str,
    ) -> Result<RequestTemplate, herald_sink_core::sink::SinkError> {
        let templates = Templates::compile(self.sources())
            .map_err(|e| herald_sink_core::config::setting_failed(e.name.clone(), e.message))?;
        let mut secrets = BTreeMap::new();
        for (name, secret) in &self.secrets {
            let value = herald_sink_core::config::resolve_secret(
                &format!("template.secrets.{name}"),
                secret,
            )?;
            secrets.insert(name.clone(), value);
        }
        Ok(RequestTemplate {
            templates,
            header_names: self.headers.keys().cloned().collect(),
            ce_headers: self.ce_headers,
            secrets,
            sink: sink.to_owned(),
        })
    }

    /// The secret files the templates read, for the reloader.
    pub(crate) fn secret_files(&self) -> impl Iterator<Item = &std::path::Path> {
        self.secrets.values().filter_map(SecretRef::file)
    }
}

/// The compiled templates of a sink and the secrets they see. `Debug` names the templates, never
/// a secret's value.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct RequestTemplate {
    templates: Templates,
    /// The templated headers' names, in order.
    header_names: Vec<String>,
    /// Send the `ce-` headers too.
    pub(crate) ce_headers: bool,
    /// `secrets.<name>` → value.
    secrets: BTreeMap<String, String>,
    /// The sink's name (`sink` in the context).
    sink: String,
}

impl fmt::Debug for RequestTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestTemplate")
            .field("templates", &self.templates)
            .field("ce_headers", &self.ce_headers)
            .field("secrets", &self.secrets.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The parts a template rendered for one request; `None` where the template has no such part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rendered {
    pub(crate) body: Option<Vec<u8>>,
    pub(crate) content_type: Option<String>,
    pub(crate) method: Option<reqwest::Method>,
    pub(crate) path: Option<String>,
    pub(crate) headers: Vec<(String, String)>,
}

impl RequestTemplate {
    /// The secrets' values, for masking (`herald render`).
    pub(crate) fn secret_values(&self) -> impl Iterator<Item = &str> {
        self.secrets.values().map(String::as_str)
    }

    /// Renders every part for `events`: one event in binary and structured mode (its context),
    /// a batch in batched mode (`events`).
    ///
    /// # Errors
    ///
    /// The first part that fails, `template.<part>: line N: …`, or a rendered method, path or
    /// header value HTTP cannot carry.
    pub(crate) fn render(&self, events: &[&CloudEvent], batched: bool) -> Result<Rendered, String> {
        let base = if batched {
            jinja::batch_context(events.iter().copied(), &self.sink)
        } else {
            match events {
                [event] => jinja::event_context(event, &self.sink),
                _ => jinja::batch_context(events.iter().copied(), &self.sink),
            }
        };
        let context = jinja::minijinja::context! { secrets => &self.secrets, ..base };
        let part = |name: &str| -> Result<Option<String>, String> {
            if self.templates.has(name) {
                self.templates.render(name, &context).map(Some)
            } else {
                Ok(None)
            }
        };
        let body = part(BODY)?.map(String::into_bytes);
        // A content type that renders empty (`{% if … %}` without an else) is as if not given:
        // an empty Content-Type header would be sent otherwise.
        let content_type = match part(CONTENT_TYPE)?.filter(|t| !t.trim().is_empty()) {
            Some(text) => Some(header_value(CONTENT_TYPE, text.trim())?),
            None => body
                .as_ref()
                .map(|_| DEFAULT_TEMPLATE_CONTENT_TYPE.to_owned()),
        };
        let method = match part(METHOD)? {
            None => None,
            Some(text) => {
                let text = text.trim().to_ascii_uppercase();
                let valid = !text.is_empty() && text.bytes().all(|b| b.is_ascii_uppercase());
                let method = reqwest::Method::from_bytes(text.as_bytes())
                    .ok()
                    .filter(|_| valid)
                    // The rendered text is not quoted: it may hold a secret (errors reach
                    // dead letters and logs).
                    .ok_or_else(|| {
                        format!(
                            "{METHOD}: the rendered method ({} characters) is not an HTTP method",
                            text.chars().count()
                        )
                    })?;
                Some(method)
            }
        };
        let path = match part(PATH)? {
            None => None,
            Some(text) => {
                let text = text.trim();
                if !text.starts_with('/')
                    || text.contains('#')
                    || text.chars().any(|c| c.is_whitespace() || c.is_control())
                {
                    return Err(format!(
                        "{PATH}: the rendered path ({} characters) is not a URL path (it starts \
                         with / and has no spaces, control characters or #)",
                        text.chars().count()
                    ));
                }
                Some(text.to_owned())
            }
        };
        let mut headers = Vec::with_capacity(self.header_names.len());
        for name in &self.header_names {
            let key = format!("template.headers.{name}");
            let value = self.templates.render(&key, &context)?;
            headers.push((name.clone(), header_value(&key, value.trim())?));
        }
        Ok(Rendered {
            body,
            content_type,
            method,
            path,
            headers,
        })
    }
}

/// `text` when HTTP can carry it as a header value.
fn header_value(key: &str, text: &str) -> Result<String, String> {
    if text.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7F) {
        return Err(format!(
            "{key}: the rendered value contains a control character"
        ));
    }
    Ok(text.to_owned())
}

/// `url` with `path` appended to its path: `http://h/api` + `/v1/x?y=1` → `http://h/api/v1/x?y=1`;
/// a query in both is joined with `&`.
pub(crate) fn join_path(url: &reqwest::Url, path: &str) -> Result<reqwest::Url, String> {
    let (path, query) = match path.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path, None),
    };
    let mut out = url.clone();
    let joined = format!("{}{path}", url.path().trim_end_matches('/'));
    out.set_path(&joined);
    match (url.query(), query) {
        (Some(a), Some(b)) => out.set_query(Some(&format!("{a}&{b}"))),
        (None, Some(b)) => out.set_query(Some(b)),
        _ => {}
    }
    if out.path() != joined {
        // set_path percent-encoded something: say so rather than send another path.
        return Err(format!(
            "{PATH}: the rendered path holds characters a URL path cannot carry unescaped (use \
             urlencode)"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn template(t: &WebhookTemplate) -> RequestTemplate {
        t.compile("hooks").unwrap()
    }

    fn event() -> CloudEvent {
        CloudEvent::new("u1:7:updated", "k8s://c/g/p", "dev.herald.resource.updated")
            .subject("default/w1")
            .data(json!({"op": "updated", "object": {"status": {"phase": "Failed"}}}))
    }

    #[test]
    fn renders_every_part() {
        let t = template(&WebhookTemplate {
            body: Some("{\"s\": {{ subject | tojson }}, \"sink\": \"{{ sink }}\"}\n".into()),
            method: Some(" put ".into()),
            path: Some("/x/{{ op }}?a=1".into()),
            headers: BTreeMap::from([("X-Phase".into(), "{{ object.status.phase }}".into())]),
            ..WebhookTemplate::default()
        });
        let rendered = t.render(&[&event()], false).unwrap();
        assert_eq!(
            rendered.body.unwrap(),
            br#"{"s": "default/w1", "sink": "hooks"}"#
        );
        assert_eq!(rendered.content_type.unwrap(), "application/json");
        assert_eq!(rendered.method.unwrap(), reqwest::Method::PUT);
        assert_eq!(rendered.path.unwrap(), "/x/updated?a=1");
        assert_eq!(rendered.headers, [("X-Phase".into(), "Failed".into())]);
        // A content type rendering empty falls back to the default, never an empty header.
        let t = template(&WebhookTemplate {
            body: Some("{}".into()),
            content_type: Some("{% if op == 'created' %}text/plain{% endif %}".into()),
            ..WebhookTemplate::default()
        });
        let rendered = t.render(&[&event()], false).unwrap();
        assert_eq!(rendered.content_type.unwrap(), "application/json");
    }

    #[test]
    fn batched_mode_renders_one_body_for_the_batch() {
        let config = crate::settings::Settings {
            mode: crate::settings::Mode::Batched { max_events: 10 },
            template: Some(template(&WebhookTemplate {
                body: Some(
                    "{% for e in events %}{{ {\"id\": e.id, \"sink\": sink} | tojson }}\n{% endfor %}"
                        .into(),
                ),
                content_type: Some("application/x-ndjson".into()),
                ..WebhookTemplate::default()
            })),
            ..crate::settings::Settings::new("http://h/")
        };
        let (a, b) = (event(), CloudEvent::new("u2:8:created", "/s", "t"));
        let built = crate::encode::build(&config, &[&a, &b], &[], 0).unwrap();
        assert_eq!(
            String::from_utf8(built.body).unwrap(),
            "{\"id\":\"u1:7:updated\",\"sink\":\"hooks\"}\n{\"id\":\"u2:8:created\",\"sink\":\"hooks\"}\n"
        );
        assert_eq!(
            built.headers,
            [("content-type".to_owned(), "application/x-ndjson".to_owned())]
        );
        assert!(built.id.starts_with("batch_"), "{}", built.id);
    }

    #[test]
    fn bad_renders_are_errors_naming_the_part() {
        let bad = |t: WebhookTemplate| template(&t).render(&[&event()], false).unwrap_err();
        assert_eq!(
            bad(WebhookTemplate {
                method: Some("GE T".into()),
                ..WebhookTemplate::default()
            }),
            "template.method: the rendered method (4 characters) is not an HTTP method"
        );
        assert!(
            bad(WebhookTemplate {
                path: Some("x/{{ op }}".into()),
                ..WebhookTemplate::default()
            })
            .starts_with("template.path: the rendered path (9 characters) is not a URL path")
        );
        let error = bad(WebhookTemplate {
            body: Some("{\n{{ object.spec.replicas.x }}}".into()),
            ..WebhookTemplate::default()
        });
        assert!(
            error.starts_with("template.body: line 2: undefined value"),
            "{error}"
        );
    }

    #[test]
    fn validation_names_the_key_and_line() {
        let mut problems = Problems::default();
        WebhookTemplate {
            body: Some("{\n  \"a\": {{ subject | nope }}\n}".into()),
            headers: BTreeMap::from([
                ("ce-id".into(), "x".into()),
                ("X-A".into(), "{{ id }".into()),
            ]),
            ..WebhookTemplate::default()
        }
        .validate(&BTreeMap::new(), &mut problems);
        let problems: Vec<String> = problems
            .into_iter()
            .map(|p| format!("{}: {}", p.key, p.message))
            .collect();
        assert_eq!(
            problems[0],
            "template.body: line 2: unknown filter \"nope\""
        );
        assert!(
            problems[1].starts_with("template.headers.X-A: line 1: syntax error"),
            "{problems:?}"
        );
        assert_eq!(
            problems[2],
            "template.headers.ce-id: \"ce-id\" is set by herald and cannot be configured"
        );
    }

    #[test]
    fn paths_join_the_url() {
        let url = |u: &str| reqwest::Url::parse(u).unwrap();
        assert_eq!(
            join_path(&url("http://h:1/"), "/repos/a/b/dispatches")
                .unwrap()
                .as_str(),
            "http://h:1/repos/a/b/dispatches"
        );
        assert_eq!(
            join_path(&url("http://h/api/?t=1"), "/v1/x?y=2")
                .unwrap()
                .as_str(),
            "http://h/api/v1/x?t=1&y=2"
        );
        assert!(join_path(&url("http://h/"), "/a\"b").is_err());
    }
}
