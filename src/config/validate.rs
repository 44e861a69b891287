//! Semantic checks that run after parsing; each problem is recorded with its path and checking
//! goes on, so one run reports everything.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::resource::{Namespaces, ResourceConfig};
use super::route::split_resource;
use super::sink::{Fsync, SinkKind, WebhookAuth, WebhookSinkConfig};
use super::{Config, FieldError};
use super::{KafkaSinkConfig, NatsAuth, NatsSinkConfig, SECRET_PROPERTIES};
use herald_sim::selector::{FieldSelector, LabelOp, LabelSelector};
use herald_sink_core::Template;

/// Collects problems in document order.
#[derive(Default)]
pub(crate) struct Problems(pub(crate) Vec<FieldError>);

impl Problems {
    pub(crate) fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            path: path.into(),
            message: message.into(),
        });
    }
}

pub(crate) fn check(config: &Config, problems: &mut Problems) {
    check_cluster(config, problems);
    check_resources(config, problems);
    check_sinks(config, problems);
    check_routes(config, problems);
    check_journal(config, problems);
}

fn check_cluster(config: &Config, problems: &mut Problems) {
    let name = &config.cluster.name;
    let mut chars = name.chars();
    let pattern_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-');
    if !pattern_ok || name.len() > 253 {
        problems.add(
            "cluster.name",
            format!(
                "{name:?} must match [a-z0-9][a-z0-9.-]* (lowercase letters, digits, '.' and '-'), \
                 at most 253 characters"
            ),
        );
    }
    if let super::ClusterSource::Kubeconfig(k) = &config.cluster.source {
        if k.context.as_deref() == Some("") {
            problems.add(
                "cluster.kubeconfig.context",
                "must not be empty; omit it for the current context",
            );
        }
        if k.path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
            problems.add(
                "cluster.kubeconfig.path",
                "must not be empty; omit it for the default kubeconfig",
            );
        }
    }
}

fn check_resources(config: &Config, problems: &mut Problems) {
    if config.resources.is_empty() {
        problems.add("resources", "at least one resource is required");
    }
    // (group, kind or plural) → first index, to catch the same resource watched twice.
    let mut seen: HashMap<(&str, &str), usize> = HashMap::new();
    for (i, r) in config.resources.iter().enumerate() {
        let at = format!("resources[{i}]");
        check_resource(r, &at, problems);
        for name in [r.kind.as_deref(), r.plural.as_deref()]
            .into_iter()
            .flatten()
        {
            if let Some(first) = seen.get(&(r.group.as_str(), name)) {
                if *first != i {
                    problems.add(
                        &at,
                        format!(
                            "watches the same resource as resources[{first}] ({name:?} in group {:?}); \
                             their events would share ids and checkpoints",
                            r.group
                        ),
                    );
                    break;
                }
            } else {
                seen.insert((r.group.as_str(), name), i);
            }
        }
    }
}

fn check_resource(r: &ResourceConfig, at: &str, problems: &mut Problems) {
    if !r.group.is_empty() && !is_dns_subdomain(&r.group) {
        problems.add(
            format!("{at}.group"),
            format!(
                "{:?} is not an API group (a lowercase DNS name like example.com, or core)",
                r.group
            ),
        );
    }
    if let Some(version) = &r.version
        && !is_dns1035_label(version)
    {
        problems.add(
            format!("{at}.version"),
            format!("{version:?} is not an API version (like v1 or v1beta2)"),
        );
    }
    match (&r.kind, &r.plural) {
        (None, None) => problems.add(at, "give kind, plural or both"),
        (kind, plural) => {
            if let Some(kind) = kind
                && !is_dns1035_label(&kind.to_ascii_lowercase())
            {
                problems.add(
                    format!("{at}.kind"),
                    format!("{kind:?} is not a kind (letters and digits, like Database)"),
                );
            }
            if let Some(plural) = plural
                && !is_dns1035_label(plural)
            {
                problems.add(
                    format!("{at}.plural"),
                    format!("{plural:?} is not a plural resource name (lowercase, like databases)"),
                );
            }
        }
    }
    match &r.namespaces {
        Namespaces::All => {}
        Namespaces::Selector { selector } => {
            if let Err(e) = check_label_selector(selector) {
                problems.add(format!("{at}.namespaces.selector"), e);
            }
        }
        Namespaces::List(names) => {
            if names.is_empty() {
                problems.add(
                    format!("{at}.namespaces"),
                    "an empty list watches nothing; write `all` for every namespace",
                );
            }
            for (j, name) in names.iter().enumerate() {
                let path = format!("{at}.namespaces[{j}]");
                if !is_dns_label(name) {
                    problems.add(&path, format!("{name:?} is not a namespace name"));
                } else if names[..j].contains(name) {
                    problems.add(&path, format!("namespace {name:?} is listed twice"));
                }
            }
        }
    }
    if let Some(selector) = &r.label_selector
        && let Err(e) = check_label_selector(selector)
    {
        problems.add(format!("{at}.labelSelector"), e);
    }
    if let Some(selector) = &r.field_selector
        && let Err(e) = check_field_selector(selector)
    {
        problems.add(format!("{at}.fieldSelector"), e);
    }
    if r.events.is_empty() {
        problems.add(
            format!("{at}.events"),
            "an empty list emits nothing; omit the key for all three",
        );
    }
    for (j, pointer) in r.redact.iter().enumerate() {
        if let Err(e) = check_json_pointer(pointer) {
            problems.add(format!("{at}.redact[{j}]"), e);
        }
    }
    if !is_type_prefix(&r.type_prefix) {
        problems.add(
            format!("{at}.typePrefix"),
            format!(
                "{:?} is not a reverse-DNS prefix (dot-separated words of letters, digits, '-' and '_', \
                 like dev.herald.resource)",
                r.type_prefix
            ),
        );
    }
}

fn check_sinks(config: &Config, problems: &mut Problems) {
    if config.sinks.is_empty() {
        problems.add("sinks", "at least one sink is required");
    }
    let mut names: HashMap<&str, usize> = HashMap::new();
    let mut files: HashMap<&std::path::Path, usize> = HashMap::new();
    for (i, sink) in config.sinks.iter().enumerate() {
        let at = format!("sinks[{i}]");
        let name = sink.name.as_str();
        if !is_sink_name(name) {
            problems.add(
                format!("{at}.name"),
                format!(
                    "{name:?} must match [a-z0-9][a-z0-9-]* (lowercase letters, digits and '-'), \
                     at most 63 characters"
                ),
            );
        }
        if let Some(first) = names.insert(name, i) {
            names.insert(name, first);
            problems.add(
                format!("{at}.name"),
                format!("duplicate sink name {name:?} (also sinks[{first}])"),
            );
        }
        match &sink.kind {
            SinkKind::File(file) => {
                if file.path.as_os_str().is_empty() {
                    problems.add(format!("{at}.path"), "must not be empty; use - for stdout");
                } else if let Some(first) = files.insert(&file.path, i) {
                    files.insert(&file.path, first);
                    problems.add(
                        format!("{at}.path"),
                        format!(
                            "{:?} is also the path of sinks[{first}]; two sinks cannot write one file",
                            file.path
                        ),
                    );
                }
                if file.fsync == Fsync::Interval && file.fsync_interval.is_zero() {
                    problems.add(
                        format!("{at}.fsyncInterval"),
                        "must be greater than 0s; use fsync: always to sync every batch",
                    );
                }
                if let Some(rotate) = &file.rotate {
                    if file.is_stdout() {
                        problems.add(format!("{at}.rotate"), "stdout (path: -) cannot be rotated");
                    }
                    if rotate.max_size == 0 {
                        problems.add(format!("{at}.rotate.maxSize"), "must be greater than 0B");
                    }
                    if rotate.max_files == 0 {
                        problems.add(format!("{at}.rotate.maxFiles"), "must be at least 1");
                    }
                }
            }
            SinkKind::Webhook(webhook) => check_webhook(webhook, &at, problems),
            SinkKind::Kafka(kafka) => check_kafka(kafka, &at, problems),
            SinkKind::Nats(nats) => check_nats(nats, &at, problems),
        }
    }
    check_dead_letter_sinks(config, problems);
}

fn check_webhook(w: &WebhookSinkConfig, at: &str, problems: &mut Problems) {
    if let Err(message) = check_http_url(&w.url) {
        problems.add(format!("{at}.url"), message);
    }
    let mut seen: HashMap<String, &str> = HashMap::new();
    for (name, value) in &w.headers {
        let path = format!("{at}.headers.{name}");
        if let Err(message) = check_extra_header(name, value) {
            problems.add(path, message);
        } else if let Some(first) = seen.insert(name.to_ascii_lowercase(), name) {
            problems.add(
                path,
                format!("header names ignore case: {name:?} repeats {first:?}"),
            );
        }
    }
    if let Some(WebhookAuth::Basic(basic)) = &w.auth {
        if basic.username.is_empty() {
            problems.add(format!("{at}.auth.basic.username"), "must not be empty");
        } else if basic.username.contains(':') || basic.username.chars().any(char::is_control) {
            problems.add(
                format!("{at}.auth.basic.username"),
                format!(
                    "{:?} cannot be a basic auth user name (no ':' or control characters)",
                    basic.username
                ),
            );
        }
    }
    if let Some(tls) = &w.tls {
        for (path, key) in [
            (&tls.ca_file, "caFile"),
            (&tls.client_cert_file, "clientCertFile"),
            (&tls.client_key_file, "clientKeyFile"),
        ] {
            if path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                problems.add(format!("{at}.tls.{key}"), "must not be empty");
            }
        }
        match (&tls.client_cert_file, &tls.client_key_file) {
            (Some(_), None) => problems.add(
                format!("{at}.tls.clientKeyFile"),
                "required with clientCertFile",
            ),
            (None, Some(_)) => problems.add(
                format!("{at}.tls.clientCertFile"),
                "required with clientKeyFile",
            ),
            _ => {}
        }
    }
    if w.timeout.is_zero() {
        problems.add(format!("{at}.timeout"), "must be greater than 0s");
    }
    check_delivery(
        at,
        w.concurrency,
        w.batch_max_events,
        w.max_attempts,
        w.max_age,
        problems,
    );
}

/// The delivery settings the webhook, Kafka and NATS sinks share.
fn check_delivery(
    at: &str,
    concurrency: usize,
    batch_max_events: usize,
    max_attempts: Option<u32>,
    max_age: Option<std::time::Duration>,
    problems: &mut Problems,
) {
    if batch_max_events == 0 {
        problems.add(format!("{at}.batchMaxEvents"), "must be at least 1");
    }
    if concurrency == 0 {
        problems.add(format!("{at}.concurrency"), "must be at least 1");
    }
    if max_attempts == Some(0) {
        problems.add(
            format!("{at}.maxAttempts"),
            "must be at least 1; omit it to retry without limit",
        );
    }
    if max_age.is_some_and(|age| age.is_zero()) {
        problems.add(
            format!("{at}.maxAge"),
            "must be greater than 0s; omit it to retry without limit",
        );
    }
}

fn check_kafka(k: &KafkaSinkConfig, at: &str, problems: &mut Problems) {
    if k.brokers.is_empty() {
        problems.add(format!("{at}.brokers"), "at least one broker is required");
    }
    for (i, broker) in k.brokers.iter().enumerate() {
        if !is_host_port(broker) {
            problems.add(
                format!("{at}.brokers[{i}]"),
                format!("{broker:?} is not host:port (like kafka-0.kafka:9092)"),
            );
        }
    }
    match Template::parse(&k.topic) {
        Err(error) => problems.add(format!("{at}.topic"), error.to_string()),
        Ok(template) => {
            if let Err(error) = template.check_kafka_topic() {
                problems.add(format!("{at}.topic"), error.to_string());
            }
        }
    }
    if k.message_timeout.is_zero() {
        problems.add(format!("{at}.messageTimeout"), "must be greater than 0s");
    }
    for name in k.properties.keys() {
        if SECRET_PROPERTIES.contains(&name.as_str()) {
            problems.add(
                format!("{at}.properties.{name}"),
                "holds a secret: put it in secretProperties as ${VAR} or {fromFile: PATH}",
            );
        } else if name.trim().is_empty() {
            problems.add(
                format!("{at}.properties"),
                "a property name must not be empty",
            );
        }
    }
    for name in k.secret_properties.keys() {
        if k.properties.contains_key(name) {
            problems.add(
                format!("{at}.secretProperties.{name}"),
                "is also set in properties; set it once",
            );
        }
    }
    check_delivery(
        at,
        k.concurrency,
        k.batch_max_events,
        k.max_attempts,
        k.max_age,
        problems,
    );
}

fn check_nats(n: &NatsSinkConfig, at: &str, problems: &mut Problems) {
    if n.servers.is_empty() {
        problems.add(
            format!("{at}.servers"),
            "at least one server URL is required",
        );
    }
    for (i, server) in n.servers.iter().enumerate() {
        let ok = ["nats://", "tls://", "ws://", "wss://"]
            .iter()
            .find_map(|scheme| server.strip_prefix(scheme))
            .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'));
        if !ok {
            problems.add(
                format!("{at}.servers[{i}]"),
                format!("{server:?} is not a NATS URL (nats://host:4222 or tls://host:4222)"),
            );
        }
    }
    match Template::parse(&n.subject) {
        Err(error) => problems.add(format!("{at}.subject"), error.to_string()),
        Ok(template) => {
            if let Err(error) = template.check_nats_subject() {
                problems.add(format!("{at}.subject"), error.to_string());
            }
        }
    }
    if let Some(js) = &n.jetstream {
        if js.stream.is_empty()
            || js
                .stream
                .chars()
                .any(|c| c.is_whitespace() || matches!(c, '.' | '*' | '>' | '/' | '\\'))
        {
            problems.add(
                format!("{at}.jetstream.stream"),
                format!(
                    "{:?} is not a stream name (no '.', '*', '>', '/', '\\' or whitespace)",
                    js.stream
                ),
            );
        }
        if let Some(create) = &js.create {
            if create.subjects.is_empty() {
                problems.add(
                    format!("{at}.jetstream.create.subjects"),
                    "at least one subject is required",
                );
            }
            if !(1..=5).contains(&create.replicas) {
                problems.add(format!("{at}.jetstream.create.replicas"), "must be 1 to 5");
            }
            if create.duplicate_window.is_zero() {
                problems.add(
                    format!("{at}.jetstream.create.duplicateWindow"),
                    "must be greater than 0s",
                );
            }
        }
    }
    if let Some(NatsAuth::UserPassword { user, .. }) = &n.auth
        && user.is_empty()
    {
        problems.add(format!("{at}.auth.user"), "must not be empty");
    }
    if let Some(tls) = &n.tls {
        match (&tls.client_cert_file, &tls.client_key_file) {
            (Some(_), None) => problems.add(
                format!("{at}.tls.clientKeyFile"),
                "required with clientCertFile",
            ),
            (None, Some(_)) => problems.add(
                format!("{at}.tls.clientCertFile"),
                "required with clientKeyFile",
            ),
            _ => {}
        }
    }
    for (value, key) in [
        (n.connect_timeout, "connectTimeout"),
        (n.ack_timeout, "ackTimeout"),
    ] {
        if value.is_zero() {
            problems.add(format!("{at}.{key}"), "must be greater than 0s");
        }
    }
    if n.max_in_flight == 0 {
        problems.add(format!("{at}.maxInFlight"), "must be at least 1");
    }
    check_delivery(
        at,
        n.concurrency,
        n.batch_max_events,
        n.max_attempts,
        n.max_age,
        problems,
    );
}

/// `host:port` with a non-empty host and a numeric port (IPv6 in brackets).
fn is_host_port(s: &str) -> bool {
    s.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok_and(|p| p > 0)
    })
}

/// `deadLetterSink` names another configured sink, and following those names never comes back to
/// where it started (a dead letter would circle).
fn check_dead_letter_sinks(config: &Config, problems: &mut Problems) {
    let target = |name: &str| {
        config
            .sinks
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| s.kind.dead_letter_sink())
    };
    for (i, sink) in config.sinks.iter().enumerate() {
        let Some(dlq) = sink.kind.dead_letter_sink() else {
            continue;
        };
        let at = format!("sinks[{i}].deadLetterSink");
        if dlq == sink.name {
            problems.add(at, "a sink cannot be its own dead-letter sink");
        } else if !config.sinks.iter().any(|s| s.name == dlq) {
            problems.add(at, format!("unknown sink {dlq:?}"));
        } else {
            let mut chain = vec![sink.name.as_str(), dlq];
            let mut next = target(dlq);
            while let Some(name) = next {
                if chain.contains(&name) {
                    if name == sink.name {
                        chain.push(name);
                        problems.add(
                            at,
                            format!("dead letters would circle: {}", chain.join(" -> ")),
                        );
                    }
                    break;
                }
                chain.push(name);
                next = target(name);
            }
        }
    }
}

/// An absolute `http`/`https` URL with a host, no credentials, no spaces or control characters.
fn check_http_url(url: &str) -> Result<(), String> {
    let lower = url.to_ascii_lowercase();
    let Some(rest) = ["http://", "https://"]
        .iter()
        .find_map(|scheme| lower.starts_with(scheme).then(|| &url[scheme.len()..]))
    else {
        return Err(format!(
            "{url:?} is not an http or https URL (like https://events.example.com/herald)"
        ));
    };
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{url:?} contains spaces or control characters"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        // The value may be a credential: do not repeat it.
        return Err(
            "credentials in the URL are refused; use auth, whose secrets are references".into(),
        );
    }
    let host = authority.strip_prefix('[').map_or_else(
        || authority.split(':').next().unwrap_or_default(),
        |v6| v6.split(']').next().unwrap_or_default(),
    );
    if host.is_empty() {
        return Err(format!("{url:?} has no host"));
    }
    Ok(())
}

/// The rules the webhook sink applies to extra headers: an HTTP token as the name, not a header
/// herald sets itself, no control characters in the value.
fn check_extra_header(name: &str, value: &str) -> Result<(), String> {
    const RESERVED: [&str; 9] = [
        "content-type",
        "content-length",
        "content-encoding",
        "transfer-encoding",
        "connection",
        "host",
        "te",
        "x-hub-signature-256",
        "authorization",
    ];
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err(format!("{name:?} is not an HTTP header name"));
    }
    let lower = name.to_ascii_lowercase();
    if lower == "authorization" {
        return Err("use auth for the Authorization header; its secrets are references".into());
    }
    if RESERVED.contains(&lower.as_str())
        || ["ce-", "webhook-", "herald-error-"]
            .iter()
            .any(|prefix| lower.starts_with(prefix))
    {
        return Err(format!(
            "{name:?} is set by herald and cannot be configured"
        ));
    }
    if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7F) {
        return Err(format!(
            "the value of {name:?} contains a control character"
        ));
    }
    Ok(())
}

fn check_routes(config: &Config, problems: &mut Problems) {
    for (i, route) in config.routes.iter().enumerate() {
        let at = format!("routes[{i}]");
        if route.resources.is_empty() {
            problems.add(
                format!("{at}.resources"),
                "an empty list matches nothing; omit the key (or write [\"*\"]) for all resources",
            );
        }
        for (j, entry) in route.resources.iter().enumerate() {
            match split_resource(entry) {
                Ok(None) => {}
                Ok(Some((name, group))) => {
                    if !config.resources.iter().any(|r| could_match(r, name, group)) {
                        problems.add(
                            format!("{at}.resources[{j}]"),
                            format!("{entry:?} matches no configured resource"),
                        );
                    }
                }
                Err(message) => problems.add(format!("{at}.resources[{j}]"), message),
            }
        }
        if route.events.is_empty() {
            problems.add(
                format!("{at}.events"),
                "an empty list matches nothing; omit the key for all three",
            );
        }
        if route.sinks.is_empty() {
            problems.add(format!("{at}.sinks"), "name at least one sink");
        }
        for (j, sink) in route.sinks.iter().enumerate() {
            if !config.sinks.iter().any(|s| &s.name == sink) {
                problems.add(format!("{at}.sinks[{j}]"), format!("unknown sink {sink:?}"));
            }
        }
    }
}

/// Whether a route entry may name `r`. Without discovery, a resource given only by kind may
/// still be named by its plural (and the reverse), so those cases pass here.
fn could_match(r: &ResourceConfig, name: &str, group: &str) -> bool {
    if r.group != group {
        return false;
    }
    let looks_like_kind = name.starts_with(|c: char| c.is_ascii_uppercase());
    r.kind.as_deref() == Some(name)
        || r.plural.as_deref() == Some(name)
        || (r.plural.is_none() && !looks_like_kind)
        || (r.kind.is_none() && looks_like_kind)
}

fn check_journal(config: &Config, problems: &mut Problems) {
    let journal = &config.journal;
    if journal.path.as_os_str().is_empty() {
        problems.add("journal.path", "must not be empty");
    }
    if journal.flush_entries == 0 {
        problems.add("journal.flushEntries", "must be at least 1");
    }
    if journal.max_backlog == 0 {
        problems.add("journal.maxBacklog", "must be at least 1");
    }
}

// ---------------------------------------------------------------------------------------------
// Syntax of names, selectors and pointers.
// ---------------------------------------------------------------------------------------------

/// RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters (namespace names).
pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1035 label: an RFC 1123 label that starts with a letter (versions, plurals, lowercased kinds).
fn is_dns1035_label(s: &str) -> bool {
    is_dns_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters (API groups).
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// `[a-z0-9][a-z0-9-]*`, at most 63 characters: it becomes a metric label and a journal key.
fn is_sink_name(s: &str) -> bool {
    s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Dot-separated words of `[A-Za-z0-9_-]`, as CloudEvents `type` prefixes are written.
fn is_type_prefix(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').all(|word| {
            !word.is_empty()
                && word
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// RFC 6901 JSON pointer, not the empty one (that would redact the whole object).
pub(crate) fn check_json_pointer(pointer: &str) -> Result<(), String> {
    if pointer.is_empty() {
        return Err(
            "\"\" would redact the whole object; use payload: reference to send no object".into(),
        );
    }
    if !pointer.starts_with('/') {
        return Err(format!(
            "{pointer:?} is not a JSON pointer: it must start with '/', like /spec/password"
        ));
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(format!(
                "{pointer:?} is not a JSON pointer: '~' must be followed by 0 ('~') or 1 ('/')"
            ));
        }
    }
    Ok(())
}

/// Label selector syntax as the API server parses it (herald-sim's parser, the one the simulator
/// serves with), plus one rule of herald's: a value list of `in`/`notin` holds no empty value.
pub(crate) fn check_label_selector(selector: &str) -> Result<(), String> {
    label_selector(selector)
        .map_err(|detail| format!("invalid label selector {selector:?}: {detail}"))
}

fn label_selector(selector: &str) -> Result<(), String> {
    let parsed = LabelSelector::parse_explained(selector).map_err(|e| e.reason().to_owned())?;
    // The API server reads `in ()` as "the empty value" and `(a,,b)` as holding it; written into
    // a configuration, that is more likely a slip than a wish.
    for requirement in parsed.requirements() {
        let word = match requirement.op() {
            LabelOp::In => "in",
            LabelOp::NotIn => "notin",
            _ => continue,
        };
        match requirement.values() {
            [only] if only.is_empty() => return Err(format!("{word:?} needs at least one value")),
            values if values.iter().any(String::is_empty) => {
                return Err(format!("the value list of {word:?} holds an empty value"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Field selector syntax as the API server parses it (herald-sim's parser), plus one rule of
/// herald's: every term names a field.
pub(crate) fn check_field_selector(selector: &str) -> Result<(), String> {
    field_selector(selector)
        .map_err(|detail| format!("invalid field selector {selector:?}: {detail}"))
}

fn field_selector(selector: &str) -> Result<(), String> {
    let parsed = FieldSelector::parse_explained(selector).map_err(|e| e.reason().to_owned())?;
    for term in parsed.requirements() {
        if term.field.trim().is_empty() {
            let op = if term.negated { "!=" } else { "=" };
            let value = term
                .value
                .replace('\\', r"\\")
                .replace(',', r"\,")
                .replace('=', r"\=");
            let written = format!("{}{op}{value}", term.field);
            return Err(format!("{written:?} has no field name"));
        }
    }
    Ok(())
}

/// Renders problems for `ConfigError`'s message.
pub(crate) fn render(errors: &[FieldError]) -> String {
    let mut out = String::new();
    for e in errors {
        let _ = write!(out, "\n  {e}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_label_selectors_the_api_server_accepts() {
        for ok in [
            "",
            "tier=gold",
            "tier==gold",
            "tier!=gold",
            "tier=",
            "tier",
            "!tier",
            "tier in (gold, silver)",
            "tier notin (bronze)",
            "example.com/tier=gold,env in (prod,staging),!legacy",
            "replicas>3",
            "replicas < 10",
        ] {
            assert_eq!(check_label_selector(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn rejects_malformed_label_selectors() {
        for (bad, detail) in [
            (
                "tier gold",
                "expected an operator (=, ==, !=, in, notin, >, <) after \"tier\", found \"gold\"",
            ),
            ("tier=gold,", "trailing ','"),
            (
                "tier in gold",
                "\"in\" needs a list in parentheses, like (in (a,b))",
            ),
            ("tier in ()", "\"in\" needs at least one value"),
            ("tier in (a,b", "expected ',' or ')' in a value list"),
            ("tier in (a,", "unterminated value list"),
            (
                "-tier=gold",
                "\"-tier\" is not a label key ([prefix/]name: name up to 63 letters, digits, '-', '_', '.', starting and ending with a letter or digit)",
            ),
            ("tier=gold!", "expected ',' or the end, found '!'"),
            ("tier==(", "expected a value after \"tier\"=, found '('"),
            (
                "tier=-gold",
                "\"-gold\" is not a label value (up to 63 letters, digits, '-', '_', '.', starting and ending with a letter or digit)",
            ),
            (
                "replicas>three",
                "\"replicas\" with > or < needs an integer",
            ),
            (",", "expected a label key"),
        ] {
            assert_eq!(
                check_label_selector(bad),
                Err(format!("invalid label selector {bad:?}: {detail}")),
                "{bad}"
            );
        }
    }

    #[test]
    fn checks_field_selectors() {
        for ok in [
            "",
            "metadata.name=x",
            "metadata.name!=scratch,metadata.namespace==a",
            "spec.x=a\\,b",
        ] {
            assert_eq!(check_field_selector(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            check_field_selector("metadata.name"),
            Err(
                r#"invalid field selector "metadata.name": "metadata.name" has no =, == or !="#
                    .into()
            )
        );
        assert_eq!(
            check_field_selector("=x"),
            Err(r#"invalid field selector "=x": "=x" has no field name"#.into())
        );
        assert_eq!(
            check_field_selector("a=b=c"),
            Err(r#"invalid field selector "a=b=c": unescaped '=' in value "b=c"; write \="#.into())
        );
        assert_eq!(
            check_field_selector(r"a=b\x"),
            Err(r#"invalid field selector "a=b\\x": invalid escape in "b\\x": only \\, \, and \= are allowed"#.into())
        );
    }

    #[test]
    fn checks_json_pointers() {
        assert_eq!(check_json_pointer("/spec/password"), Ok(()));
        assert_eq!(check_json_pointer("/metadata/annotations/a~1b~0c"), Ok(()));
        assert_eq!(
            check_json_pointer("spec/password"),
            Err(r#""spec/password" is not a JSON pointer: it must start with '/', like /spec/password"#.into())
        );
        assert_eq!(
            check_json_pointer("/a~2"),
            Err(
                r#""/a~2" is not a JSON pointer: '~' must be followed by 0 ('~') or 1 ('/')"#
                    .into()
            )
        );
        assert!(check_json_pointer("").is_err());
    }
}
