//! Topic and subject name templates and their sanitizers; start at [`Template::parse`].

use std::fmt;
use std::fmt::Write as _;
use std::str::FromStr;

/// What `{namespace}` renders as for a cluster-scoped object (no namespace). Kubernetes namespace
/// names are DNS labels (`[a-z0-9-]`), so no real namespace can collide with it.
pub const CLUSTER_SCOPED_NAMESPACE: &str = "_cluster";

/// What `{group}` renders as for the core API group (whose name is empty), matching the `source`
/// attribute's `k8s://<cluster>/core/<plural>`.
pub const CORE_GROUP: &str = "core";

/// Longest legal Kafka topic name.
pub const KAFKA_TOPIC_MAX_LEN: usize = 249;

/// A variable a template may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variable {
    /// `{group}`: the API group, [`CORE_GROUP`] for the core group.
    Group,
    /// `{version}`: the watched API version, e.g. `v1`.
    Version,
    /// `{kind}`: the kind as Kubernetes spells it, e.g. `Widget` (not lower-cased).
    Kind,
    /// `{plural}`: the resource's plural name, e.g. `widgets`.
    Plural,
    /// `{namespace}`: the object's namespace, [`CLUSTER_SCOPED_NAMESPACE`] when cluster-scoped.
    Namespace,
    /// `{name}`: the object's name. NATS subjects only: a topic per object is not a Kafka design.
    Name,
    /// `{op}`: `created`, `updated` or `deleted`. NATS subjects only.
    Op,
}

impl Variable {
    /// Every variable, in the order the docs list them.
    pub const ALL: [Variable; 7] = [
        Self::Group,
        Self::Version,
        Self::Kind,
        Self::Plural,
        Self::Namespace,
        Self::Name,
        Self::Op,
    ];

    /// The name between the braces, e.g. `group`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Group => "group",
            Self::Version => "version",
            Self::Kind => "kind",
            Self::Plural => "plural",
            Self::Namespace => "namespace",
            Self::Name => "name",
            Self::Op => "op",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == name)
    }
}

/// The values a template is rendered with, borrowed from the watched resource and the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Vars<'a> {
    /// API group; empty for the core group (rendered as [`CORE_GROUP`]).
    pub group: &'a str,
    /// API version.
    pub version: &'a str,
    /// Kind.
    pub kind: &'a str,
    /// Plural resource name.
    pub plural: &'a str,
    /// Namespace; `None` (or empty) for cluster-scoped objects (rendered as
    /// [`CLUSTER_SCOPED_NAMESPACE`]).
    pub namespace: Option<&'a str>,
    /// The object's name.
    pub name: &'a str,
    /// The operation: `created`, `updated` or `deleted`.
    pub op: &'a str,
}

impl Vars<'_> {
    /// The raw value of `variable`, placeholders applied but not sanitized.
    #[must_use]
    pub fn value(&self, variable: Variable) -> &str {
        match variable {
            Variable::Group if self.group.is_empty() => CORE_GROUP,
            Variable::Group => self.group,
            Variable::Version => self.version,
            Variable::Kind => self.kind,
            Variable::Plural => self.plural,
            Variable::Namespace => match self.namespace {
                Some(ns) if !ns.is_empty() => ns,
                _ => CLUSTER_SCOPED_NAMESPACE,
            },
            Variable::Name => self.name,
            Variable::Op => self.op,
        }
    }
}

impl<'a> Vars<'a> {
    /// The values of a herald event: its `k8s*` extensions, the plural from `source`
    /// (`k8s://<cluster>/<group>/<plural>`) and the operation from `type` (`<prefix>.<op>`).
    /// Missing attributes render as empty values.
    #[must_use]
    pub fn from_event(event: &'a crate::event::CloudEvent) -> Self {
        let ext = |name: &str| {
            event
                .extensions
                .get(name)
                .and_then(crate::event::ExtensionValue::as_str)
                .unwrap_or_default()
        };
        Self {
            group: ext("k8sgroup"),
            version: ext("k8sversion"),
            kind: ext("k8skind"),
            plural: event
                .source
                .strip_prefix("k8s://")
                .and_then(|rest| rest.split('/').nth(2))
                .unwrap_or_default(),
            namespace: Some(ext("k8snamespace")).filter(|ns| !ns.is_empty()),
            name: ext("k8sname"),
            op: event.ty.rsplit_once('.').map_or("", |(_, op)| op),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal { text: String, start: usize },
    Variable(Variable),
}

/// A parsed name template: literal text with `{variable}` placeholders (see [`Variable`]), such
/// as `herald.{group}.{kind}`, naming the Kafka topic or NATS subject an event goes to.
///
/// There is no escape for literal braces: neither Kafka topics nor sensible NATS subjects contain
/// them.
///
/// # Sanitizing
///
/// **Sanitizing happens per variable value, before the values are joined with the literal text.**
/// This matters for NATS, where `.` separates tokens: the group `example.com` becomes the single
/// token `example_com`, so `herald.{group}.{kind}` renders as `herald.example_com.Widget` (three
/// tokens, as the template promises), never `herald.example.com.Widget`. Kafka topics are
/// sanitized per value too (`.` is legal there, so `herald.example.com.Widget` is kept), then the
/// whole name is held to Kafka's length and `.`/`..` rules. The core group renders as
/// [`CORE_GROUP`] and a cluster-scoped object's namespace as [`CLUSTER_SCOPED_NAMESPACE`].
///
/// Literal text is the operator's: check it once at config load with
/// [`Template::check_kafka_topic`] / [`Template::check_nats_subject`] rather than relying on the
/// render-time sanitizers to repair it.
///
/// ```
/// use herald_sink_core::template::{Template, Vars};
///
/// let template = Template::parse("herald.{group}.{kind}")?;
/// let vars = Vars { group: "example.com", version: "v1", kind: "Widget", plural: "widgets", namespace: None, name: "w", op: "created" };
/// assert_eq!(template.render_nats_subject(&vars), "herald.example_com.Widget");
/// assert_eq!(template.render_kafka_topic(&vars), "herald.example.com.Widget");
/// # Ok::<(), herald_sink_core::TemplateError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct Template {
    source: String,
    segments: Vec<Segment>,
}

impl Template {
    /// Parses `source`.
    ///
    /// # Errors
    ///
    /// [`TemplateError`] for an empty template, an unknown variable (names are case-sensitive), a
    /// `{` without its `}` or a `}` without its `{`; each names the offending text and its byte
    /// offset.
    pub fn parse(source: &str) -> Result<Self, TemplateError> {
        if source.is_empty() {
            return Err(TemplateError::Empty);
        }
        let mut segments = Vec::new();
        let mut literal_start = 0;
        let mut rest = source.char_indices().peekable();
        while let Some((i, c)) = rest.next() {
            match c {
                '{' => {
                    if literal_start < i {
                        segments.push(Segment::Literal {
                            text: source[literal_start..i].to_owned(),
                            start: literal_start,
                        });
                    }
                    let name_start = i + 1;
                    let close = loop {
                        match rest.next() {
                            Some((j, '}')) => break j,
                            Some((_, '{')) | None => {
                                return Err(TemplateError::UnclosedBrace { position: i });
                            }
                            Some(_) => {}
                        }
                    };
                    let name = &source[name_start..close];
                    let variable = Variable::from_name(name).ok_or_else(|| {
                        TemplateError::UnknownVariable {
                            name: name.to_owned(),
                            position: i,
                        }
                    })?;
                    segments.push(Segment::Variable(variable));
                    literal_start = close + 1;
                }
                '}' => return Err(TemplateError::UnmatchedBrace { position: i }),
                _ => {}
            }
        }
        if literal_start < source.len() {
            segments.push(Segment::Literal {
                text: source[literal_start..].to_owned(),
                start: literal_start,
            });
        }
        Ok(Self {
            source: source.to_owned(),
            segments,
        })
    }

    /// The template as written.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The variables used, in order of appearance (repeats included).
    pub fn variables(&self) -> impl Iterator<Item = Variable> + '_ {
        self.segments.iter().filter_map(|s| match s {
            Segment::Variable(v) => Some(*v),
            Segment::Literal { .. } => None,
        })
    }

    /// Renders with raw values (placeholders for the core group and cluster-scoped namespace
    /// applied, nothing sanitized). For names with target rules use
    /// [`Template::render_kafka_topic`] or [`Template::render_nats_subject`].
    #[must_use]
    pub fn render(&self, vars: &Vars<'_>) -> String {
        self.render_with(vars, str::to_owned)
    }

    /// Renders a Kafka topic name: each value sanitized with the character rule of
    /// [`sanitize_kafka_topic`], then the whole name passed through it for the length and `.`/`..`
    /// rules.
    #[must_use]
    pub fn render_kafka_topic(&self, vars: &Vars<'_>) -> String {
        sanitize_kafka_topic(
            &self.render_with(vars, |value| value.chars().map(kafka_char).collect()),
        )
    }

    /// Renders a NATS subject: each value becomes exactly one token through
    /// [`sanitize_nats_token`], then the whole subject passes [`sanitize_nats_subject`] as a safety
    /// net for literal text that [`Template::check_nats_subject`] would have refused.
    #[must_use]
    pub fn render_nats_subject(&self, vars: &Vars<'_>) -> String {
        sanitize_nats_subject(&self.render_with(vars, sanitize_nats_token))
    }

    fn render_with(&self, vars: &Vars<'_>, sanitize: impl Fn(&str) -> String) -> String {
        let mut out = String::with_capacity(self.source.len() + 32);
        for segment in &self.segments {
            match segment {
                Segment::Literal { text, .. } => out.push_str(text),
                Segment::Variable(v) => out.push_str(&sanitize(vars.value(*v))),
            }
        }
        out
    }

    /// Checks that the literal text is legal in a Kafka topic name (`[a-zA-Z0-9._-]`) and that the
    /// template is not just `.` or `..`. Call it at config load.
    ///
    /// # Errors
    ///
    /// [`TemplateError::IllegalCharacter`] or [`TemplateError::ReservedName`].
    pub fn check_kafka_topic(&self) -> Result<(), TemplateError> {
        // One topic per object or per operation would break per-key ordering and topic counts.
        if let Some(v) = self
            .variables()
            .find(|v| matches!(v, Variable::Name | Variable::Op))
        {
            return Err(TemplateError::VariableNotAllowed {
                name: v.name(),
                target: "kafka topic",
            });
        }
        for (position, c) in self.literal_chars() {
            if kafka_char(c) != c {
                return Err(TemplateError::IllegalCharacter {
                    character: c,
                    position,
                    target: "kafka topic",
                });
            }
        }
        if self.source == "." || self.source == ".." {
            return Err(TemplateError::ReservedName {
                name: self.source.clone(),
            });
        }
        Ok(())
    }

    /// Checks that the literal text can form a NATS publish subject: no wildcard (`*`, `>`),
    /// whitespace or control characters, and no empty token (leading, trailing or doubled `.`).
    /// Variables always render as exactly one non-empty token. Call it at config load.
    ///
    /// # Errors
    ///
    /// [`TemplateError::IllegalCharacter`] or [`TemplateError::EmptyToken`].
    pub fn check_nats_subject(&self) -> Result<(), TemplateError> {
        for (position, c) in self.literal_chars() {
            if c != '.' && nats_token_char(c) != c {
                return Err(TemplateError::IllegalCharacter {
                    character: c,
                    position,
                    target: "nats subject",
                });
            }
        }
        // A token is empty when no variable and no literal character sits between two dots (or a
        // dot and an end of the template).
        let mut token_is_empty = true;
        let mut last_dot = None;
        for segment in &self.segments {
            match segment {
                Segment::Variable(_) => token_is_empty = false,
                Segment::Literal { text, start } => {
                    for (offset, c) in text.char_indices() {
                        if c == '.' {
                            if token_is_empty {
                                return Err(TemplateError::EmptyToken {
                                    position: start + offset,
                                });
                            }
                            token_is_empty = true;
                            last_dot = Some(start + offset);
                        } else {
                            token_is_empty = false;
                        }
                    }
                }
            }
        }
        match last_dot {
            Some(position) if token_is_empty => Err(TemplateError::EmptyToken { position }),
            _ => Ok(()),
        }
    }

    fn literal_chars(&self) -> impl Iterator<Item = (usize, char)> + '_ {
        self.segments
            .iter()
            .filter_map(|s| match s {
                Segment::Literal { text, start } => {
                    Some(text.char_indices().map(move |(i, c)| (start + i, c)))
                }
                Segment::Variable(_) => None,
            })
            .flatten()
    }
}

impl FromStr for Template {
    type Err = TemplateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl TryFrom<String> for Template {
    type Error = TemplateError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<Template> for String {
    fn from(template: Template) -> Self {
        template.source
    }
}

/// Writes the template as written.
impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// Why a template is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// The template is the empty string.
    #[error("template is empty")]
    Empty,
    /// `{name}` is not one of the known variables.
    #[error(
        "unknown template variable `{{{name}}}` at byte {position} \
         (known: {{group}}, {{version}}, {{kind}}, {{plural}}, {{namespace}}, {{name}}, {{op}})"
    )]
    UnknownVariable {
        /// The text between the braces.
        name: String,
        /// Byte offset of the `{`.
        position: usize,
    },
    /// A `{` has no matching `}` before the end or the next `{`.
    #[error("unclosed `{{` at byte {position}")]
    UnclosedBrace {
        /// Byte offset of the `{`.
        position: usize,
    },
    /// A `}` has no matching `{`.
    #[error("unmatched `}}` at byte {position}")]
    UnmatchedBrace {
        /// Byte offset of the `}`.
        position: usize,
    },
    /// Literal text holds a character the target does not allow.
    #[error("character {character:?} at byte {position} is not allowed in a {target} name")]
    IllegalCharacter {
        /// The character.
        character: char,
        /// Its byte offset.
        position: usize,
        /// `kafka topic` or `nats subject`.
        target: &'static str,
    },
    /// The NATS subject would have an empty token.
    #[error("empty nats subject token at the `.` at byte {position}")]
    EmptyToken {
        /// Byte offset of the `.` next to the empty token.
        position: usize,
    },
    /// The variable is known but not usable for this target (`{name}` and `{op}` in a Kafka topic).
    #[error("`{{{name}}}` cannot be used in a {target} name")]
    VariableNotAllowed {
        /// The variable's name.
        name: &'static str,
        /// `kafka topic`.
        target: &'static str,
    },
    /// The Kafka topic would be `.` or `..`, which Kafka forbids.
    #[error("kafka topic name {name:?} is reserved")]
    ReservedName {
        /// The name.
        name: String,
    },
}

fn kafka_char(c: char) -> char {
    if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
        c
    } else {
        '_'
    }
}

fn nats_token_char(c: char) -> char {
    if matches!(c, '.' | '*' | '>') || c.is_whitespace() || c.is_control() {
        '_'
    } else {
        c
    }
}

/// Makes `name` a legal Kafka topic name: characters outside `[a-zA-Z0-9._-]` become `_`, an
/// empty name becomes `_`, `.` and `..` become `_` and `__`, and a name longer than
/// [`KAFKA_TOPIC_MAX_LEN`] is cut and given an 8-hex-digit FNV-1a hash of the full sanitized name
/// (`<first 240 chars>_<hash>`), so two long names that share a prefix still get distinct topics.
///
/// Kafka treats `.` and `_` alike in metric names, so `a.b` and `a_b` should not both be used;
/// that is the operator's choice and is not changed here.
#[must_use]
pub fn sanitize_kafka_topic(name: &str) -> String {
    let mut topic: String = name.chars().map(kafka_char).collect();
    if topic.is_empty() || topic == "." || topic == ".." {
        return "_".repeat(topic.len().max(1));
    }
    if topic.len() > KAFKA_TOPIC_MAX_LEN {
        let hash = fnv1a_32(topic.as_bytes());
        // Every character is ASCII now, so any byte index is a char boundary.
        topic.truncate(KAFKA_TOPIC_MAX_LEN - 9);
        // Writing to a String cannot fail.
        let _ = write!(topic, "_{hash:08x}");
    }
    topic
}

/// Makes one variable value a single NATS subject token: `.`, `*`, `>`, whitespace and control
/// characters become `_`, and an empty value becomes `_`. Case and other characters are kept.
#[must_use]
pub fn sanitize_nats_token(value: &str) -> String {
    if value.is_empty() {
        return "_".to_owned();
    }
    value.chars().map(nats_token_char).collect()
}

/// Makes a whole subject publishable: `.` stays the token separator, within tokens `*`, `>`,
/// whitespace and control characters become `_`, and empty tokens (including an empty subject)
/// become `_`.
///
/// This cannot tell a dot inside a value from a separator, so it is not a substitute for
/// sanitizing values first; [`Template::render_nats_subject`] does both.
#[must_use]
pub fn sanitize_nats_subject(subject: &str) -> String {
    subject
        .split('.')
        .map(sanitize_nats_token)
        .collect::<Vec<_>>()
        .join(".")
}

/// 32-bit FNV-1a: tiny, dependency-free and stable across releases, which a topic name needs.
fn fnv1a_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |hash: u32, &b| {
        (hash ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn widget() -> Vars<'static> {
        Vars {
            group: "example.com",
            version: "v1alpha1",
            kind: "Widget",
            plural: "widgets",
            namespace: Some("team-a"),
            name: "",
            op: "",
        }
    }

    #[test]
    fn parses_and_renders_every_variable() {
        let source = "{group}/{version}/{kind}/{plural}/{namespace}/{name}/{op}";
        let t = Template::parse(source).unwrap();
        let vars = Vars {
            name: "web",
            op: "updated",
            ..widget()
        };
        assert_eq!(
            t.render(&vars),
            "example.com/v1alpha1/Widget/widgets/team-a/web/updated"
        );
        assert_eq!(t.variables().collect::<Vec<_>>(), Variable::ALL);
        assert_eq!(t.as_str(), source);
        assert_eq!(t.to_string(), t.as_str());
    }

    #[test]
    fn renders_literal_only_and_repeated_variables() {
        assert_eq!(
            Template::parse("events").unwrap().render(&widget()),
            "events"
        );
        let t = Template::parse("{kind}-{kind}").unwrap();
        assert_eq!(t.render(&widget()), "Widget-Widget");
    }

    #[test]
    fn rejects_unknown_variables_naming_them() {
        for (source, name, position) in [
            ("herald.{uid}", "uid", 7),
            ("{Group}", "Group", 0),
            ("x{}", "", 1),
            ("{ group }", " group ", 0),
        ] {
            let err = Template::parse(source).unwrap_err();
            assert_eq!(
                err,
                TemplateError::UnknownVariable {
                    name: name.to_owned(),
                    position
                },
                "{source}"
            );
        }
        let message = Template::parse("herald.{uid}").unwrap_err().to_string();
        assert!(
            message.starts_with("unknown template variable `{uid}` at byte 7"),
            "{message}"
        );
    }

    #[test]
    fn rejects_unbalanced_braces() {
        for (source, err) in [
            (
                "herald.{group",
                TemplateError::UnclosedBrace { position: 7 },
            ),
            ("{{group}}", TemplateError::UnclosedBrace { position: 0 }),
            ("{group{kind}", TemplateError::UnclosedBrace { position: 0 }),
            (
                "herald.group}",
                TemplateError::UnmatchedBrace { position: 12 },
            ),
            ("{group}}", TemplateError::UnmatchedBrace { position: 7 }),
            ("", TemplateError::Empty),
        ] {
            assert_eq!(Template::parse(source).unwrap_err(), err, "{source}");
        }
        assert_eq!(
            TemplateError::UnclosedBrace { position: 3 }.to_string(),
            "unclosed `{` at byte 3"
        );
    }

    #[test]
    fn byte_positions_count_utf8() {
        assert_eq!(
            Template::parse("é.{nope}").unwrap_err(),
            TemplateError::UnknownVariable {
                name: "nope".into(),
                position: 3
            }
        );
    }

    #[test]
    fn nats_keeps_a_dotted_group_in_one_token() {
        let t = Template::parse("herald.{group}.{kind}").unwrap();
        let subject = t.render_nats_subject(&widget());
        assert_eq!(subject, "herald.example_com.Widget");
        assert_eq!(subject.split('.').count(), 3);
    }

    #[test]
    fn kafka_keeps_dots_and_case() {
        let t = Template::parse("herald.{group}.{kind}").unwrap();
        assert_eq!(t.render_kafka_topic(&widget()), "herald.example.com.Widget");
    }

    #[test]
    fn cluster_scoped_objects_render_a_placeholder_namespace() {
        let t = Template::parse("herald.{namespace}.{plural}").unwrap();
        for namespace in [None, Some("")] {
            let vars = Vars {
                namespace,
                ..widget()
            };
            assert_eq!(t.render(&vars), "herald._cluster.widgets");
            assert_eq!(t.render_nats_subject(&vars), "herald._cluster.widgets");
            assert_eq!(t.render_kafka_topic(&vars), "herald._cluster.widgets");
        }
    }

    #[test]
    fn core_group_renders_as_core() {
        let vars = Vars {
            group: "",
            version: "v1",
            kind: "ConfigMap",
            plural: "configmaps",
            namespace: Some("default"),
            name: "",
            op: "",
        };
        let t = Template::parse("herald.{group}.{plural}").unwrap();
        assert_eq!(t.render_nats_subject(&vars), "herald.core.configmaps");
        assert_eq!(t.render_kafka_topic(&vars), "herald.core.configmaps");
    }

    #[test]
    fn nats_token_replaces_separators_wildcards_whitespace_and_controls() {
        for (value, token) in [
            ("example.com", "example_com"),
            ("a*b", "a_b"),
            (">", "_"),
            ("two words", "two_words"),
            ("tab\there", "tab_here"),
            ("nbsp\u{A0}x", "nbsp_x"),
            ("del\u{7F}", "del_"),
            ("UpperCase-ü", "UpperCase-ü"),
            ("", "_"),
        ] {
            assert_eq!(sanitize_nats_token(value), token, "{value:?}");
        }
    }

    #[test]
    fn nats_subject_sanitizer_keeps_separators_and_fills_empty_tokens() {
        assert_eq!(sanitize_nats_subject("a.b c.>"), "a.b_c._");
        assert_eq!(sanitize_nats_subject(".a..b."), "_.a._.b._");
        assert_eq!(sanitize_nats_subject(""), "_");
    }

    #[test]
    fn nats_render_never_yields_empty_or_wildcard_tokens() {
        let vars = Vars {
            group: "*.>",
            version: "",
            kind: "K ind",
            plural: "p",
            namespace: None,
            name: "",
            op: "",
        };
        let t = Template::parse("{group}.{version}.{kind}.{namespace}").unwrap();
        let subject = t.render_nats_subject(&vars);
        assert_eq!(subject, "___._.K_ind._cluster");
        assert!(
            subject
                .split('.')
                .all(|tok| !tok.is_empty() && tok != "*" && tok != ">")
        );
    }

    #[test]
    fn kafka_replaces_illegal_characters() {
        assert_eq!(sanitize_kafka_topic("a b/c:d"), "a_b_c_d");
        assert_eq!(sanitize_kafka_topic("Straße"), "Stra_e");
        assert_eq!(sanitize_kafka_topic("ok.Name_1-2"), "ok.Name_1-2");
        let vars = Vars {
            group: "weird/group",
            ..widget()
        };
        let t = Template::parse("herald.{group}.{kind}").unwrap();
        assert_eq!(t.render_kafka_topic(&vars), "herald.weird_group.Widget");
    }

    #[test]
    fn kafka_avoids_empty_and_reserved_names() {
        assert_eq!(sanitize_kafka_topic(""), "_");
        assert_eq!(sanitize_kafka_topic("."), "_");
        assert_eq!(sanitize_kafka_topic(".."), "__");
        assert_eq!(sanitize_kafka_topic("..."), "...");
    }

    #[test]
    fn kafka_shortens_long_names_without_collisions() {
        let long_a = "a".repeat(300);
        let long_b = format!("{}b", "a".repeat(299));
        let topic_a = sanitize_kafka_topic(&long_a);
        let topic_b = sanitize_kafka_topic(&long_b);
        assert_eq!(topic_a.len(), KAFKA_TOPIC_MAX_LEN);
        assert_eq!(topic_b.len(), KAFKA_TOPIC_MAX_LEN);
        assert_ne!(topic_a, topic_b);
        assert!(topic_a.starts_with(&"a".repeat(240)));
        assert_eq!(sanitize_kafka_topic(&long_a), topic_a, "deterministic");
        assert_eq!(sanitize_kafka_topic(&"x".repeat(249)), "x".repeat(249));
        // Multi-byte characters count once each after replacement.
        assert_eq!(sanitize_kafka_topic(&"é".repeat(249)), "_".repeat(249));
    }

    #[test]
    fn kafka_render_applies_the_length_rule_to_the_whole_name() {
        let plural = "p".repeat(63);
        let group = format!("{}.example.com", "g".repeat(240));
        let vars = Vars {
            group: &group,
            plural: &plural,
            ..widget()
        };
        let t = Template::parse("herald.{group}.{plural}").unwrap();
        assert_eq!(t.render_kafka_topic(&vars).len(), KAFKA_TOPIC_MAX_LEN);
    }

    #[test]
    fn fnv1a_matches_reference_values() {
        assert_eq!(fnv1a_32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a_32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a_32(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn checks_kafka_literals() {
        Template::parse("herald.{group}.{kind}")
            .unwrap()
            .check_kafka_topic()
            .unwrap();
        assert_eq!(
            Template::parse("herald/{kind}")
                .unwrap()
                .check_kafka_topic(),
            Err(TemplateError::IllegalCharacter {
                character: '/',
                position: 6,
                target: "kafka topic"
            })
        );
        assert_eq!(
            Template::parse("..").unwrap().check_kafka_topic(),
            Err(TemplateError::ReservedName { name: "..".into() })
        );
    }

    #[test]
    fn checks_nats_literals() {
        for good in [
            "herald.{group}.{kind}",
            "{group}",
            "a.{kind}-x.b",
            "{group}{kind}.x",
        ] {
            Template::parse(good).unwrap().check_nats_subject().unwrap();
        }
        for (bad, err) in [
            ("herald..{kind}", TemplateError::EmptyToken { position: 7 }),
            (".{kind}", TemplateError::EmptyToken { position: 0 }),
            ("{kind}.", TemplateError::EmptyToken { position: 6 }),
            (
                "herald.>",
                TemplateError::IllegalCharacter {
                    character: '>',
                    position: 7,
                    target: "nats subject",
                },
            ),
            (
                "herald.*.{kind}",
                TemplateError::IllegalCharacter {
                    character: '*',
                    position: 7,
                    target: "nats subject",
                },
            ),
            (
                "my events.{kind}",
                TemplateError::IllegalCharacter {
                    character: ' ',
                    position: 2,
                    target: "nats subject",
                },
            ),
        ] {
            assert_eq!(
                Template::parse(bad).unwrap().check_nats_subject(),
                Err(err),
                "{bad}"
            );
        }
    }

    #[test]
    fn name_and_op_are_for_nats_subjects_only_and_come_from_the_event() {
        let event = crate::event::CloudEvent::new(
            "u:1:deleted",
            "k8s://prod/example.com/widgets",
            "dev.herald.resource.deleted",
        )
        .extension("k8sgroup", "example.com")
        .extension("k8sversion", "v1")
        .extension("k8skind", "Widget")
        .extension("k8snamespace", "team-a")
        .extension("k8sname", "web.v2 *big*");
        let vars = Vars::from_event(&event);
        let t = Template::parse("herald.{plural}.{namespace}.{name}.{op}").unwrap();
        assert_eq!(
            t.render_nats_subject(&vars),
            "herald.widgets.team-a.web_v2__big_.deleted"
        );
        assert!(t.check_nats_subject().is_ok());
        assert_eq!(
            t.check_kafka_topic().unwrap_err().to_string(),
            "`{name}` cannot be used in a kafka topic name"
        );
    }

    #[test]
    fn deserializes_from_a_string_and_reports_parse_errors() {
        let t: Template = serde_json::from_str(r#""herald.{kind}""#).unwrap();
        assert_eq!(t, "herald.{kind}".parse().unwrap());
        assert_eq!(serde_json::to_string(&t).unwrap(), r#""herald.{kind}""#);
        let err = serde_json::from_str::<Template>(r#""herald.{uid}""#).unwrap_err();
        assert!(
            err.to_string()
                .contains("unknown template variable `{uid}`"),
            "{err}"
        );
    }
}
