//! Request templates (minijinja): bodies, headers and keys rendered from an event; start at
//! [`Templates::compile`] and [`EventContext`].
//!
//! Two template languages live in herald's configuration, each where it fits: names (Kafka topics,
//! NATS subjects) keep the `{var}` templates of [`crate::template`], whose output is sanitized into
//! a legal name; what a receiver reads (a webhook body, headers, a path, a Kafka key) is a
//! minijinja template, rendered per event with the context [`EventContext`] builds and the filters
//! [`environment`] adds (docs/adr/0011-templates.md).
//!
//! Everything a template could get wrong is found when the configuration loads where it can be: a
//! syntax error, an unknown filter or test ([`Templates::compile`]). What depends on the event (a
//! missing field, a filter given the wrong type) fails when rendering; the sink then rejects the
//! event with the error as its reason, so it is dead-lettered, never dropped.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
pub use minijinja;
use minijinja::value::{Kwargs, Rest};
use minijinja::{Environment, Error, ErrorKind, UndefinedBehavior, Value};
use serde_json::Value as Json;

use crate::event::CloudEvent;

/// Reason code of an event whose request could not be rendered (it is dead-lettered with it).
pub const RENDER_FAILED: &str = "render_failed";

/// Longest text a `{{ … | truncate }}` keeps when given no length (Jinja's default).
const DEFAULT_TRUNCATE: usize = 255;

/// Instructions one render may run ([`Environment::set_fuel`]).
pub const FUEL: u64 = 5_000_000;

/// The environment every request template compiles in: minijinja's built-in filters and tests
/// (`tojson`, `default`, `lower`, `replace`, `join`, `urlencode` …) plus herald's:
///
/// - `b64encode`: the text's UTF-8 bytes in standard base64 (a value that is not text: its JSON).
/// - `dig(key, …, default=none)`: a safe path lookup, `object | dig("status", "phase")`; a
///   missing key, an index past the end or a value that is not a mapping gives `default`.
/// - `rfc3339`: an RFC 3339 time or Unix seconds → RFC 3339 UTC (`2026-01-02T03:04:05.678Z`).
/// - `unix`, `unix_ms`: an RFC 3339 time → Unix seconds, milliseconds (integers).
/// - `unix_nanos`: an RFC 3339 time → Unix nanoseconds as **text** (Loki's form; larger than a
///   JSON number keeps exactly).
/// - `truncate(length=255, end="...")`: at most `length` characters, `end` included.
///
/// Booleans print as JSON's `true` and `false`. Undefined values are lenient as in Jinja: `{{ missing }}` prints nothing, but an attribute of
/// a missing value (`object.status.phase` without `status`) is an error; `dig` is the safe form.
#[must_use]
pub fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    // Rendering runs on the sink's task: a template whose loops nest over large objects or
    // batches must end in a render failure (dead-lettered, replayable after a fix), not pin a
    // worker. Each render gets this many instructions, far above what a body over a full batch
    // of large objects takes.
    env.set_fuel(Some(FUEL));
    // Bodies are mostly JSON: `{{ resync }}` prints `true`, not Python's `True`.
    env.set_formatter(|out, state, value| {
        if value.kind() == minijinja::value::ValueKind::Bool {
            out.write_str(if value.is_true() { "true" } else { "false" })?;
            Ok(())
        } else {
            minijinja::escape_formatter(out, state, value)
        }
    });
    env.add_filter("b64encode", b64encode);
    env.add_filter("dig", dig);
    env.add_filter("rfc3339", rfc3339);
    env.add_filter("unix", unix);
    env.add_filter("unix_ms", unix_ms);
    env.add_filter("unix_nanos", unix_nanos);
    env.add_filter("truncate", truncate);
    env
}

/// A set of named templates compiled in [`environment`], cheap to clone and share.
#[derive(Clone)]
pub struct Templates {
    env: Arc<Environment<'static>>,
    /// The sources by name, for equality (a reload compares configurations) and `Debug`.
    sources: Arc<BTreeMap<String, String>>,
}

impl Templates {
    /// Compiles every `(name, source)`; names are the configuration's key paths
    /// (`template.body`).
    ///
    /// # Errors
    ///
    /// The first template that does not compile or uses an unknown filter or test, as
    /// [`TemplateProblem`] (its name and the message with the line).
    pub fn compile(
        templates: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, TemplateProblem> {
        let mut env = environment();
        let mut sources = BTreeMap::new();
        for (name, source) in templates {
            check_names(&env, &name, &source)?;
            env.add_template_owned(name.clone(), source.clone())
                .map_err(|e| TemplateProblem {
                    name: name.clone(),
                    message: describe(&e),
                })?;
            sources.insert(name, source);
        }
        Ok(Self {
            env: Arc::new(env),
            sources: Arc::new(sources),
        })
    }

    /// Whether a template named `name` was compiled.
    #[must_use]
    pub fn has(&self, name: &str) -> bool {
        self.sources.contains_key(name)
    }

    /// Renders the template `name` with `context`.
    ///
    /// # Errors
    ///
    /// The template is unknown or fails on this context; the message names the template and the
    /// line (see [`describe`]).
    pub fn render(&self, name: &str, context: &Value) -> Result<String, String> {
        self.env
            .get_template(name)
            .and_then(|t| t.render(context))
            .map_err(|e| format!("{name}: {}", describe(&e)))
    }
}

impl PartialEq for Templates {
    fn eq(&self, other: &Self) -> bool {
        self.sources == other.sources
    }
}

impl Eq for Templates {}

impl fmt::Debug for Templates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Templates")
            .field(&self.sources.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The compiled `template:` of a Kafka or NATS sink: a record key (Kafka) and header values,
/// rendered per event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageTemplate {
    templates: Templates,
    key: bool,
    header_names: Vec<String>,
    sink: String,
}

/// What a [`MessageTemplate`] rendered for one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedMessage {
    /// The key, when the template has one.
    pub key: Option<String>,
    /// `(name, value)` in the order of the configuration's `headers` mapping.
    pub headers: Vec<(String, String)>,
}

/// The key path of a message template's key.
const KEY: &str = "template.key";

impl MessageTemplate {
    /// Records the templates of `key` and `headers` that do not compile (at `template.key`,
    /// `template.headers.<name>`, with the line), and header names `reserved` refuses.
    pub fn validate(
        key: Option<&str>,
        headers: &BTreeMap<String, String>,
        reserved: impl Fn(&str) -> Option<String>,
        problems: &mut crate::config::Problems,
    ) {
        for (name, source) in Self::sources(key, headers) {
            if let Err(problem) = Templates::compile([(name.clone(), source)]) {
                problems.add(name, problem.message);
            }
        }
        for name in headers.keys() {
            if let Some(message) = reserved(name) {
                problems.add(format!("template.headers.{name}"), message);
            }
        }
    }

    /// Compiles `key` and `headers` for the sink named `sink`.
    ///
    /// # Errors
    ///
    /// The first template that does not compile.
    pub fn compile(
        sink: &str,
        key: Option<&str>,
        headers: &BTreeMap<String, String>,
    ) -> Result<Self, TemplateProblem> {
        Ok(Self {
            templates: Templates::compile(Self::sources(key, headers))?,
            key: key.is_some(),
            header_names: headers.keys().cloned().collect(),
            sink: sink.to_owned(),
        })
    }

    fn sources(key: Option<&str>, headers: &BTreeMap<String, String>) -> Vec<(String, String)> {
        key.map(|k| (KEY.to_owned(), k.to_owned()))
            .into_iter()
            .chain(
                headers
                    .iter()
                    .map(|(n, s)| (format!("template.headers.{n}"), s.clone())),
            )
            .collect()
    }

    /// The key and headers for `event`.
    ///
    /// # Errors
    ///
    /// `template.<part>: line N: …` when a template fails on this event, or renders an empty key
    /// (a keyless record would lose the key's partition and order) or a header value with a line
    /// break.
    pub fn render(&self, event: &CloudEvent) -> Result<RenderedMessage, String> {
        let context = event_context(event, &self.sink);
        let key = if self.key {
            let key = self.templates.render(KEY, &context)?;
            if key.is_empty() {
                return Err(format!("{KEY}: rendered an empty key"));
            }
            Some(key)
        } else {
            None
        };
        let mut headers = Vec::with_capacity(self.header_names.len());
        for name in &self.header_names {
            let path = format!("template.headers.{name}");
            let value = self.templates.render(&path, &context)?;
            if value.contains(['\r', '\n']) {
                return Err(format!("{path}: the rendered value contains a line break"));
            }
            headers.push((name.clone(), value));
        }
        Ok(RenderedMessage { key, headers })
    }
}

/// A template that cannot be used: its name (the key path) and why, with the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}: {message}")]
pub struct TemplateProblem {
    /// The template's name: its key path in the configuration (`template.body`).
    pub name: String,
    /// What is wrong, starting with `line N: ` when the line is known.
    pub message: String,
}

/// A minijinja error as herald prints it: `line N: <what> (in <name>)` without minijinja's
/// multi-line debug rendering, which would not fit a log line or a dead letter's context.
#[must_use]
pub fn describe(error: &Error) -> String {
    let what = match error.detail() {
        Some(detail) => format!("{}: {detail}", error.kind()),
        None => error.kind().to_string(),
    };
    let mut text = match error.line() {
        Some(line) => format!("line {line}: {what}"),
        None => what,
    };
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Fails on the first filter or test `source` names that `env` does not have. minijinja looks
/// filters up only when it renders, so a typo in a branch rarely taken would otherwise surface as
/// dead letters; the tokenizer finds every name after `|`, `is` / `is not`, and `{% filter %}`.
fn check_names(
    env: &Environment<'static>,
    name: &str,
    source: &str,
) -> Result<(), TemplateProblem> {
    use minijinja::machinery::{Token, WhitespaceConfig, tokenize};
    use minijinja::syntax::SyntaxConfig;
    let problem = |message: String| TemplateProblem {
        name: name.to_owned(),
        message,
    };
    let mut previous: [Option<Token<'_>>; 2] = [None, None];
    for token in tokenize(source, false, SyntaxConfig, WhitespaceConfig::default()) {
        // A syntax error: compiling reports it with its line.
        let Ok((token, span)) = token else {
            return Ok(());
        };
        if let Token::Ident(ident) = token {
            let kind = match &previous {
                [_, Some(Token::Pipe)]
                | [Some(Token::BlockStart), Some(Token::Ident("filter"))] => Some("filter"),
                [_, Some(Token::Ident("is"))]
                | [Some(Token::Ident("is")), Some(Token::Ident("not"))] => Some("test"),
                _ => None,
            };
            let probe = match kind {
                Some("filter") => format!("{{{{ none | {ident} }}}}"),
                Some(_) => format!("{{{{ none is {ident} }}}}"),
                None => String::new(),
            };
            if let Some(kind) = kind
                && let Err(e) = env.render_str(&probe, ())
                && matches!(e.kind(), ErrorKind::UnknownFilter | ErrorKind::UnknownTest)
            {
                return Err(problem(format!(
                    "line {}: unknown {kind} {ident:?}",
                    span.start_line
                )));
            }
        }
        previous = [previous[1].take(), Some(token)];
    }
    Ok(())
}

/// The values a template sees for one event, as the docs list them:
///
/// - the attributes `id`, `source`, `type`, `subject`, `time`, `datacontenttype`, `dataschema`;
/// - from the extensions: `sequence`, `partitionkey`, `resync`, `namespace` (`k8snamespace`),
///   `name` (`k8sname`), `kind`, `group`, `version`, `uid`, and `extensions` (every one, by name);
/// - from `data`: `op` (else the last part of `type`), `object`, `oldObject`, `patch`, and `data`
///   itself;
/// - `sink`: the sink's name.
///
/// Missing parts are undefined (print nothing, `dig` gives its default).
#[must_use]
pub fn event_context(event: &CloudEvent, sink: &str) -> Value {
    Value::from_serialize(event_map(event, sink))
}

/// The context of a batch: `events` (each as [`event_context`] builds it, without `sink`) and
/// `sink`.
#[must_use]
pub fn batch_context<'a>(events: impl IntoIterator<Item = &'a CloudEvent>, sink: &str) -> Value {
    let events: Vec<serde_json::Map<String, Json>> =
        events.into_iter().map(|e| event_map(e, sink)).collect();
    let mut map = serde_json::Map::new();
    map.insert("events".into(), Json::from(events));
    map.insert("sink".into(), Json::from(sink));
    Value::from_serialize(map)
}

/// The context as JSON; `data`'s parts are looked up once here, per event.
fn event_map(event: &CloudEvent, sink: &str) -> serde_json::Map<String, Json> {
    let mut map = serde_json::Map::new();
    let mut put = |k: &str, v: Json| {
        map.insert(k.to_owned(), v);
    };
    put("id", Json::from(event.id.as_str()));
    put("source", Json::from(event.source.as_str()));
    put("type", Json::from(event.ty.as_str()));
    for (key, value) in [
        ("subject", &event.subject),
        ("time", &event.time),
        ("datacontenttype", &event.datacontenttype),
        ("dataschema", &event.dataschema),
    ] {
        if let Some(value) = value {
            put(key, Json::from(value.as_str()));
        }
    }
    let ext = |name: &str| event.extensions.get(name);
    for (key, extension) in [
        ("sequence", "sequence"),
        ("partitionkey", "partitionkey"),
        ("namespace", "k8snamespace"),
        ("name", "k8sname"),
        ("kind", "k8skind"),
        ("group", "k8sgroup"),
        ("version", "k8sversion"),
        ("uid", "k8suid"),
    ] {
        if let Some(value) = ext(extension) {
            put(key, Json::from(value.to_string()));
        }
    }
    if let Some(resync) = ext("resync").and_then(crate::ExtensionValue::as_bool) {
        put("resync", Json::from(resync));
    }
    let extensions: serde_json::Map<String, Json> = event
        .extensions
        .iter()
        .map(|(k, v)| {
            let value = match v {
                crate::ExtensionValue::Bool(b) => Json::from(*b),
                crate::ExtensionValue::Integer(i) => Json::from(*i),
                crate::ExtensionValue::String(s) => Json::from(s.as_str()),
            };
            (k.clone(), value)
        })
        .collect();
    put("extensions", Json::Object(extensions));
    let data = event.data.as_ref();
    let op = data
        .and_then(|d| d.get("op"))
        .and_then(Json::as_str)
        .or_else(|| event.ty.rsplit('.').next())
        .unwrap_or_default();
    put("op", Json::from(op));
    for part in ["object", "oldObject", "patch"] {
        if let Some(value) = data.and_then(|d| d.get(part)) {
            put(part, value.clone());
        }
    }
    if let Some(data) = data {
        put("data", data.clone());
    }
    put("sink", Json::from(sink));
    map
}

fn b64encode(value: &Value) -> String {
    let text = value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned);
    base64::engine::general_purpose::STANDARD.encode(text)
}

// minijinja's filter signature takes the rest arguments and keywords by value.
#[allow(clippy::needless_pass_by_value)]
fn dig(value: &Value, path: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let default: Option<Value> = kwargs.get("default")?;
    kwargs.assert_all_used()?;
    let mut current = value.clone();
    for key in path.iter() {
        match current.get_item(key) {
            Ok(v) if !v.is_undefined() && !v.is_none() => current = v,
            _ => return Ok(default.unwrap_or(Value::from(()))),
        }
    }
    if current.is_undefined() {
        return Ok(default.unwrap_or(Value::from(())));
    }
    Ok(current)
}

/// An RFC 3339 time or Unix seconds as a timestamp.
fn timestamp(value: &Value) -> Result<jiff::Timestamp, Error> {
    let invalid = |detail: String| Error::new(ErrorKind::InvalidOperation, detail);
    if let Some(text) = value.as_str() {
        return text
            .parse::<jiff::Timestamp>()
            .map_err(|e| invalid(format!("{text:?} is not an RFC 3339 time: {e}")));
    }
    if let Ok(seconds) = i64::try_from(value.clone()) {
        return jiff::Timestamp::from_second(seconds)
            .map_err(|e| invalid(format!("{seconds} is not a Unix time: {e}")));
    }
    if let Ok(seconds) = f64::try_from(value.clone()) {
        let duration = jiff::SignedDuration::try_from_secs_f64(seconds)
            .map_err(|e| invalid(format!("{seconds} is not a Unix time: {e}")))?;
        return jiff::Timestamp::from_duration(duration)
            .map_err(|e| invalid(format!("{seconds} is not a Unix time: {e}")));
    }
    Err(invalid(format!(
        "{value} is neither an RFC 3339 time nor Unix seconds"
    )))
}

fn rfc3339(value: &Value) -> Result<String, Error> {
    Ok(timestamp(value)?
        .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string())
}

fn unix(value: &Value) -> Result<i64, Error> {
    Ok(timestamp(value)?.as_second())
}

fn unix_ms(value: &Value) -> Result<i64, Error> {
    Ok(timestamp(value)?.as_millisecond())
}

fn unix_nanos(value: &Value) -> Result<String, Error> {
    Ok(timestamp(value)?.as_nanosecond().to_string())
}

#[allow(clippy::needless_pass_by_value)] // minijinja's filter signature.
fn truncate(value: &Value, length: Option<usize>, kwargs: Kwargs) -> Result<String, Error> {
    let end: Option<String> = kwargs.get("end")?;
    let length: Option<usize> = match length {
        Some(length) => Some(length),
        None => kwargs.get("length")?,
    };
    kwargs.assert_all_used()?;
    let length = length.unwrap_or(DEFAULT_TRUNCATE);
    let end = end.unwrap_or_else(|| "...".to_owned());
    let text = value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned);
    if text.chars().count() <= length {
        return Ok(text);
    }
    let keep = length.saturating_sub(end.chars().count());
    let mut out: String = text.chars().take(keep).collect();
    out.push_str(&end);
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn event() -> CloudEvent {
        CloudEvent::new(
            "u1:42:updated",
            "k8s://prod/example.com/widgets",
            "dev.herald.resource.updated",
        )
        .subject("default/w1")
        .time("2026-01-02T03:04:05.678Z")
        .extension("k8snamespace", "default")
        .extension("k8sname", "w1")
        .extension("sequence", "00000000000000000042")
        .extension("partitionkey", "default/w1")
        .extension("resync", false)
        .data(json!({
            "op": "updated",
            "object": {"metadata": {"name": "w1", "labels": {"app.kubernetes.io/name": "w"}},
                       "status": {"phase": "Failed"}},
            "patch": [{"op": "replace", "path": "/status/phase", "value": "Failed"}],
            "resync": false
        }))
    }

    fn render(source: &str) -> Result<String, String> {
        let templates =
            Templates::compile([("t".to_owned(), source.to_owned())]).map_err(|e| e.to_string())?;
        templates.render("t", &event_context(&event(), "hooks"))
    }

    /// A template that would run for hours (nested loops) ends in a render error instead.
    #[test]
    fn a_runaway_template_runs_out_of_fuel() {
        let error = render(
            "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
        )
        .unwrap_err();
        assert!(error.contains("fuel"), "{error}");
        // An ordinary body is far inside the budget.
        assert!(render("{% for a in range(1000) %}{{ a }}{% endfor %}").is_ok());
    }

    #[test]
    fn the_context_holds_the_event_its_data_and_the_sink() {
        assert_eq!(
            render("{{ id }} {{ op }} {{ subject }} {{ sequence }} {{ namespace }}/{{ name }} {{ sink }} {{ resync }}").unwrap(),
            "u1:42:updated updated default/w1 00000000000000000042 default/w1 hooks false"
        );
        assert_eq!(
            render("{{ object.status.phase }} {{ patch[0].path }} {{ oldObject is defined }}")
                .unwrap(),
            "Failed /status/phase false"
        );
        assert_eq!(
            render("{{ {\"b\": 1, \"a\": subject} | tojson }}").unwrap(),
            r#"{"b":1,"a":"default/w1"}"#
        );
    }

    #[test]
    fn herald_filters() {
        assert_eq!(
            render("{{ subject | b64encode }}").unwrap(),
            "ZGVmYXVsdC93MQ=="
        );
        assert_eq!(
            render("{{ object | dig('status', 'phase') }}|{{ object | dig('spec', 'x', default='-') }}|{{ object | dig('metadata', 'labels', 'app.kubernetes.io/name') }}").unwrap(),
            "Failed|-|w"
        );
        assert_eq!(
            render("{{ oldObject | dig('status', 'phase') is none }}").unwrap(),
            "true"
        );
        assert_eq!(
            render("{{ time | unix }} {{ time | unix_ms }} {{ time | unix_nanos }} {{ 0 | rfc3339 }} {{ time | rfc3339 }}").unwrap(),
            "1767323045 1767323045678 1767323045678000000 1970-01-01T00:00:00.000Z 2026-01-02T03:04:05.678Z"
        );
        assert_eq!(
            render("{{ 'abcdefghij' | truncate(6) }}|{{ 'abc' | truncate(6) }}|{{ 'abcdefghij' | truncate(4, end='~') }}").unwrap(),
            "abc...|abc|abc~"
        );
    }

    #[test]
    fn unknown_filters_and_syntax_errors_are_found_at_compile_time_with_the_line() {
        let error = render("{\n\"a\": {{ subject | tojsn }}\n}").unwrap_err();
        assert_eq!(error, "t: line 2: unknown filter \"tojsn\"");
        let error = render("{% if op %}\n{% if x is oddd %}{% endif %}{% endif %}").unwrap_err();
        assert_eq!(error, "t: line 2: unknown test \"oddd\"");
        let error = render("a\nb {{ subject }\n").unwrap_err();
        assert!(error.starts_with("t: line 2: syntax error"), "{error}");
        // Known names pass, whatever their arguments.
        render("{{ x | default('y') | upper }}{% if 1 is odd %}{% endif %}{% filter upper %}a{% endfilter %}").unwrap();
    }

    #[test]
    fn render_errors_name_the_template_and_line() {
        let error = render("ok\n{{ object.spec.replicas.value }}").unwrap_err();
        assert!(error.starts_with("t: line 2: undefined value"), "{error}");
        let error = render("{{ 'soon' | unix }}").unwrap_err();
        assert!(error.contains("is not an RFC 3339 time"), "{error}");
    }

    #[test]
    fn message_templates_render_a_key_and_headers() {
        let headers = BTreeMap::from([("x-op".to_owned(), "{{ op }}".to_owned())]);
        let t = MessageTemplate::compile(
            "bus",
            Some("{{ namespace }}/{{ kind | default('?') }}"),
            &headers,
        )
        .unwrap();
        assert_eq!(
            t.render(&event()).unwrap(),
            RenderedMessage {
                key: Some("default/?".into()),
                headers: vec![("x-op".into(), "updated".into())],
            }
        );
        let empty =
            MessageTemplate::compile("bus", Some("{{ missing }}"), &BTreeMap::new()).unwrap();
        assert_eq!(
            empty.render(&event()).unwrap_err(),
            "template.key: rendered an empty key"
        );
        let mut problems = crate::config::Problems::default();
        MessageTemplate::validate(
            Some("{{ id | nope }}"),
            &BTreeMap::from([("ce_id".to_owned(), "x".to_owned())]),
            |name| name.starts_with("ce_").then(|| "reserved".to_owned()),
            &mut problems,
        );
        let problems: Vec<String> = problems
            .into_iter()
            .map(|p| format!("{}: {}", p.key, p.message))
            .collect();
        assert_eq!(
            problems,
            [
                "template.key: line 1: unknown filter \"nope\"",
                "template.headers.ce_id: reserved"
            ]
        );
    }

    #[test]
    fn batches_see_events() {
        let templates = Templates::compile([(
            "t".to_owned(),
            "{% for e in events %}{{ e.id }};{% endfor %}{{ sink }}".to_owned(),
        )])
        .unwrap();
        let (a, b) = (event(), event());
        assert_eq!(
            templates
                .render("t", &batch_context([&a, &b], "loki"))
                .unwrap(),
            "u1:42:updated;u1:42:updated;loki"
        );
    }
}
