//! Semantic checks that run after parsing; each problem is recorded with its path and checking
//! goes on, so one run reports everything.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use herald_sink_core::config::{Bound, EnvLookup, MAX_KEEP, check_secret};

use super::filter::When;
use super::resource::{Namespaces, PayloadPart, ResourceConfig};
use super::route::split_resource;
use super::sink::SinkKind;
use super::{Config, FieldError};
use herald_sim::selector::{FieldSelector, LabelOp, LabelSelector};

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
    check_leader_election(config, problems);
}

/// Resolves every secret reference: each sink's, then `admin.token`. Not part of [`check`]: a
/// configuration is valid without its secrets at hand (it is written, printed and tested
/// elsewhere); `herald check` and `herald run` call this on the machine that will run it.
pub(crate) fn check_secrets(config: &Config, env: EnvLookup<'_>, problems: &mut Problems) {
    for (i, sink) in config.sinks.iter().enumerate() {
        for problem in sink.secret_problems(env) {
            problems.add(format!("sinks[{i}].{}", problem.key), problem.message);
        }
    }
    if let Some(token) = &config.admin.token {
        let mut found = herald_sink_core::config::Problems::default();
        check_secret(&mut found, "admin.token", token, env);
        for problem in found {
            problems.add(problem.key, problem.message);
        }
    }
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
        // A group pattern and another entry of its group could both watch one resource.
        if let Some(first) = config.resources[..i]
            .iter()
            .position(|o| o.group == r.group && (o.kinds.is_some() || r.kinds.is_some()))
        {
            problems.add(
                &at,
                format!(
                    "watches resources of group {:?} that resources[{first}] watches too (a kinds list \
                     takes its group's resources); their events would share ids and checkpoints",
                    r.group
                ),
            );
            continue;
        }
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

/// A `namespaces.include`/`exclude` entry: a namespace name where `*` and `?` may stand for
/// characters.
fn is_namespace_pattern(pattern: &str) -> bool {
    !pattern.is_empty()
        && pattern.len() <= 63
        && pattern
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '*' | '?'))
}

/// `kinds`: `["*"]` or kind names, in a custom resource group, instead of `kind` and `plural`.
fn check_kinds(r: &ResourceConfig, kinds: &[String], at: &str, problems: &mut Problems) {
    if r.kind.is_some() || r.plural.is_some() {
        problems.add(
            format!("{at}.kinds"),
            "give kinds or kind/plural, not both: kinds watches several resources of the group",
        );
    }
    if r.group.is_empty() {
        problems.add(
            format!("{at}.kinds"),
            "only a custom resource group (one CRDs define) can be watched whole; name the kind for core resources",
        );
    }
    if kinds.is_empty() {
        problems.add(
            format!("{at}.kinds"),
            "an empty list watches nothing; write [\"*\"] for every kind of the group",
        );
    }
    for (j, kind) in kinds.iter().enumerate() {
        let path = format!("{at}.kinds[{j}]");
        if kind == crate::config::ANY_KIND {
            if kinds.len() > 1 {
                problems.add(&path, "\"*\" already takes every kind; list nothing else");
            }
        } else if !is_dns1035_label(&kind.to_ascii_lowercase())
            || !kind.starts_with(|c: char| c.is_ascii_uppercase())
        {
            problems.add(
                &path,
                format!("{kind:?} is not a kind (letters and digits, like Database) or \"*\""),
            );
        } else if kinds[..j].contains(kind) {
            problems.add(&path, format!("kind {kind:?} is listed twice"));
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
    if let Some(kinds) = &r.kinds {
        check_kinds(r, kinds, at, problems);
    }
    match (&r.kind, &r.plural) {
        (None, None) if r.kinds.is_some() => {}
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
        Namespaces::Patterns {
            include,
            exclude,
            selector,
        } => {
            if let Some(selector) = selector
                && let Err(e) = check_label_selector(selector)
            {
                problems.add(format!("{at}.namespaces.selector"), e);
            }
            for (key, patterns) in [("include", include), ("exclude", exclude)] {
                for (j, pattern) in patterns.iter().enumerate() {
                    if !is_namespace_pattern(pattern) {
                        problems.add(
                            format!("{at}.namespaces.{key}[{j}]"),
                            format!(
                                "{pattern:?} is not a namespace name pattern (lowercase letters, digits, '-', and the wildcards * and ?)"
                            ),
                        );
                    }
                }
            }
            if include.is_empty() && exclude.is_empty() && selector.is_none() {
                problems.add(
                    format!("{at}.namespaces"),
                    "empty include and exclude lists watch every namespace; write `all`",
                );
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
    if let Some(e) = r.when.as_ref().and_then(When::compile_error) {
        problems.add(format!("{at}.when"), e.to_string());
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
    // Paths are compared as the files they name: `x`, `./x` and `<cwd>/x` are one file.
    let cwd = std::env::current_dir().ok();
    let mut files: HashMap<PathBuf, (usize, &Path)> = HashMap::new();
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
        // Two sinks writing one file is no single sink's business; an empty path is the file
        // sink's own problem.
        if let SinkKind::File(file) = &sink.kind
            && !file.path.as_os_str().is_empty()
        {
            let key = if file.is_stdout() {
                file.path.clone()
            } else {
                normalize(&file.path, cwd.as_deref())
            };
            if let Some(&(first, first_path)) = files.get(&key) {
                let message = if first_path == file.path {
                    format!(
                        "{:?} is also the path of sinks[{first}]; two sinks cannot write one file",
                        file.path
                    )
                } else {
                    format!(
                        "{:?} is the same file as {first_path:?}, the path of sinks[{first}]; \
                         two sinks cannot write one file",
                        file.path
                    )
                };
                problems.add(format!("{at}.path"), message);
            } else {
                files.insert(key, (i, &file.path));
            }
        }
        for problem in sink.problems() {
            problems.add(format!("{at}.{}", problem.key), problem.message);
        }
    }
    check_dead_letter_sinks(config, problems);
}

/// `path` as the file it names, without touching the filesystem: relative to `cwd` (when known),
/// `.` dropped and `..` taken back lexically, as `open` would resolve them without symlinks.
fn normalize(path: &Path, cwd: Option<&Path>) -> PathBuf {
    let joined = match cwd {
        Some(cwd) if path.is_relative() => cwd.join(path),
        _ => path.to_owned(),
    };
    let mut out = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::CurDir => {}
            // `/..` is `/`; a relative path (no working directory) keeps a leading `..`.
            Component::ParentDir => {
                if !matches!(
                    out.components().next_back(),
                    None | Some(Component::RootDir | Component::Prefix(_) | Component::ParentDir)
                ) {
                    out.pop();
                } else if !out.has_root() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// `deadLetterSink` names another configured sink, and following those names never comes back to
/// where it started (a dead letter would circle).
fn check_dead_letter_sinks(config: &Config, problems: &mut Problems) {
    let target = |name: &str| {
        config
            .sinks
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| s.delivery.dead_letter_sink.as_deref())
    };
    for (i, sink) in config.sinks.iter().enumerate() {
        let Some(dlq) = sink.delivery.dead_letter_sink.as_deref() else {
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
        if let Some(e) = route.when.as_ref().and_then(When::compile_error) {
            problems.add(format!("{at}.when"), e.to_string());
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

/// What is valid but probably not what the author meant: a route `when` that reads `oldObject`
/// (or `object`) for a resource whose events do not carry it (it is then always `null`); a
/// resource `when` or `changed` on `status` that `skipStatusOnlyUpdates` never lets see an update.
pub(crate) fn warnings(config: &Config) -> Vec<String> {
    let mut out = Vec::new();
    for (i, r) in config.resources.iter().enumerate() {
        if !r.skip_status_only_updates {
            continue;
        }
        if r.when.as_ref().is_some_and(When::reads_status) {
            out.push(format!(
                "resources[{i}].when: reads status, but skipStatusOnlyUpdates drops status-only \
                 updates before `when` runs, so it never sees one; drop skipStatusOnlyUpdates to \
                 filter them with `when`"
            ));
        }
        if let Some(j) = r
            .changed
            .iter()
            .position(|p| p.to_string().starts_with("status"))
        {
            out.push(format!(
                "resources[{i}].changed[{j}]: a status field, but skipStatusOnlyUpdates drops \
                 status-only updates before `changed` runs, so a change there alone is never \
                 emitted; drop skipStatusOnlyUpdates"
            ));
        }
    }
    for (i, route) in config.routes.iter().enumerate() {
        let Some(when) = route.when.as_ref() else {
            continue;
        };
        for (j, r) in config.resources.iter().enumerate() {
            let routed = route
                .resources
                .iter()
                .any(|entry| match split_resource(entry) {
                    Ok(None) => true,
                    Ok(Some((name, group))) => could_match(r, name, group),
                    Err(_) => false,
                });
            if routed && when.uses_object() && !r.payload.includes(PayloadPart::Object) {
                out.push(format!(
                    "routes[{i}].when: uses object, but the events of resources[{j}] do not carry \
                     it (its payload lacks object), so object is always null there; add object to \
                     resources[{j}].payload or filter on the resource's own `when`"
                ));
            }
        }
        if !when.uses_old_object() {
            continue;
        }
        for (j, r) in config.resources.iter().enumerate() {
            let routed = route
                .resources
                .iter()
                .any(|entry| match split_resource(entry) {
                    Ok(None) => true,
                    Ok(Some((name, group))) => could_match(r, name, group),
                    Err(_) => false,
                });
            if routed && !r.payload.includes(PayloadPart::OldObject) {
                out.push(format!(
                    "routes[{i}].when: uses oldObject, but the events of resources[{j}] do not carry \
                     it (its payload lacks oldObject), so oldObject is always null there; add \
                     oldObject to resources[{j}].payload or filter on the resource's own `when`"
                ));
            }
        }
    }
    out
}

/// Whether a route entry may name `r`. Without discovery, a resource given only by kind may
/// still be named by its plural (and the reverse), so those cases pass here.
fn could_match(r: &ResourceConfig, name: &str, group: &str) -> bool {
    if r.group != group {
        return false;
    }
    let looks_like_kind = name.starts_with(|c: char| c.is_ascii_uppercase());
    if name == crate::config::ANY_KIND {
        return true;
    }
    if let Some(kinds) = &r.kinds {
        // A plural cannot be checked without discovery; a kind can.
        return !looks_like_kind
            || kinds
                .iter()
                .any(|k| k == crate::config::ANY_KIND || k == name);
    }
    r.kind.as_deref() == Some(name)
        || r.plural.as_deref() == Some(name)
        || (r.plural.is_none() && !looks_like_kind)
        || (r.kind.is_none() && looks_like_kind)
}

/// The longest `journal.flushInterval`: appended events wait up to this long before any sink sees
/// them, so a longer one is a slip, not a tuning.
const MAX_FLUSH_INTERVAL: Bound = Bound::new(Duration::from_secs(10), "10s");

fn check_journal(config: &Config, problems: &mut Problems) {
    let journal = &config.journal;
    if journal.path.as_os_str().is_empty() {
        problems.add("journal.path", "must not be empty");
    }
    if let Some(message) = MAX_FLUSH_INTERVAL.problem(
        journal.flush_interval,
        "appended events wait up to this long before any sink sees them",
    ) {
        problems.add("journal.flushInterval", message);
    }
    if let Some(message) = MAX_KEEP.problem(journal.retain, "events are kept on disk that long") {
        problems.add("journal.retain", message);
    }
    if journal.flush_entries == 0 {
        problems.add("journal.flushEntries", "must be at least 1");
    }
    if journal.max_backlog == 0 {
        problems.add("journal.maxBacklog", "must be at least 1");
    }
}

/// client-go's rules: the leader must give up (`renewDeadline`) before another replica may take
/// the Lease (`leaseDuration`), and must get several renewal attempts in before it gives up.
fn check_leader_election(config: &Config, problems: &mut Problems) {
    let le = &config.leader_election;
    if !is_dns_subdomain(&le.lease_name) || le.lease_name.len() > 240 {
        problems.add(
            "leaderElection.leaseName",
            format!("{:?} is not a valid object name (lower-case letters, digits, '-' and '.'; at most 240 characters, as `-positions` is appended)", le.lease_name),
        );
    }
    if let Some(ns) = &le.namespace
        && !is_dns_label(ns)
    {
        problems.add(
            "leaderElection.namespace",
            format!("{ns:?} is not a valid namespace name"),
        );
    }
    if le.identity.as_deref().is_some_and(str::is_empty) {
        problems.add("leaderElection.identity", "must not be empty");
    }
    // Past an hour a failover is no failover; the bound also keeps instants from overflowing.
    let hour = Duration::from_secs(3600);
    for (path, d) in [
        ("leaderElection.leaseDuration", le.lease_duration),
        ("leaderElection.renewDeadline", le.renew_deadline),
        ("leaderElection.retryPeriod", le.retry_period),
        ("leaderElection.publishInterval", le.publish_interval),
    ] {
        if d > hour {
            problems.add(path, "must be at most 1h");
        }
    }
    if le.lease_duration < Duration::from_secs(1) {
        problems.add("leaderElection.leaseDuration", "must be at least 1s");
    } else if le.lease_duration.subsec_nanos() != 0 {
        // The Lease records whole seconds (`leaseDurationSeconds`): a fraction would be cut
        // off there, and standbys would take over before the leader's renew deadline allows.
        problems.add(
            "leaderElection.leaseDuration",
            "must be a whole number of seconds (the Lease records leaseDurationSeconds)",
        );
    }
    if le.renew_deadline >= le.lease_duration {
        problems.add(
            "leaderElection.renewDeadline",
            "must be less than leaderElection.leaseDuration: the leader stops delivering before another replica may take over",
        );
    } else if le.lease_duration - le.renew_deadline <= le.retry_period
        && le.retry_period.mul_f64(1.2) < le.renew_deadline
    {
        // A standby counts the Lease's duration from when it saw the last renewal, which it
        // may read up to one retryPeriod after the leader sent it.
        problems.add(
            "leaderElection.renewDeadline",
            "must be more than leaderElection.retryPeriod below leaderElection.leaseDuration: the leader stops delivering before another replica may take over, whenever it last read the Lease",
        );
    }
    if le.retry_period.is_zero() || le.retry_period.mul_f64(1.2) >= le.renew_deadline {
        problems.add(
            "leaderElection.retryPeriod",
            "must be greater than zero and less than leaderElection.renewDeadline / 1.2 (client-go's rule: the leader gets more than one renewal attempt)",
        );
    }
    if le.publish_interval.is_zero() {
        problems.add(
            "leaderElection.publishInterval",
            "must be greater than zero",
        );
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
    fn paths_normalize_lexically() {
        let cwd = Path::new("/srv/herald");
        for (path, expected) in [
            ("x.jsonl", "/srv/herald/x.jsonl"),
            ("./x.jsonl", "/srv/herald/x.jsonl"),
            ("a/../x.jsonl", "/srv/herald/x.jsonl"),
            ("/srv/herald/./out/../x.jsonl", "/srv/herald/x.jsonl"),
            ("../../../../x", "/x"),
            ("/a//b/", "/a/b"),
        ] {
            assert_eq!(
                normalize(Path::new(path), Some(cwd)),
                Path::new(expected),
                "{path}"
            );
        }
        assert_eq!(normalize(Path::new("./a/../../x"), None), Path::new("../x"));
        assert_eq!(normalize(Path::new("a/./b"), None), Path::new("a/b"));
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
