//! Label and field selectors, parsed and matched the way kube-apiserver (apimachinery) does.
//!
//! [`LabelSelector::parse`] and [`FieldSelector::parse`] accept exactly what the API server accepts
//! and fail with its messages ([`SelectorError`]'s `Display`), which is what the simulator answers.
//! Programs that check selectors before using them, as herald checks its configuration, call
//! [`LabelSelector::parse_explained`] and [`FieldSelector::parse_explained`]: the same parser, whose
//! [`Rejection`] adds a plain-language reason (`"in" needs a list in parentheses, ...` rather than
//! `found 'gold' expected: '('`).
//!
//! ```
//! use herald_sim::selector::{FieldSelector, LabelSelector};
//! use serde_json::json;
//!
//! let gold = LabelSelector::parse("tier in (gold,silver),!legacy")?;
//! let labels = json!({"tier": "gold"});
//! assert!(gold.matches(labels.as_object()));
//!
//! let named = FieldSelector::parse("metadata.name!=scratch")?;
//! assert!(named.matches(|field| (field == "metadata.name").then(|| "web".to_owned())));
//!
//! let bad = LabelSelector::parse_explained("tier gold").unwrap_err();
//! assert_eq!(
//!     bad.error().to_string(),
//!     "unable to parse requirement: found 'gold', expected: in, notin, =, ==, !=, gt, lt"
//! );
//! assert_eq!(
//!     bad.reason(),
//!     r#"expected an operator (=, ==, !=, in, notin, >, <) after "tier", found "gold""#
//! );
//! # Ok::<(), herald_sim::selector::SelectorError>(())
//! ```

use std::collections::BTreeSet;
use std::fmt::{self, Write as _};

use serde_json::{Map, Value};

/// Why a label or field selector was rejected; `Display` reproduces the apiserver's message.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum SelectorError {
    /// A label requirement is syntactically malformed (e.g. `found 'x', expected: identifier`).
    #[error("unable to parse requirement: {0}")]
    RequirementSyntax(String),
    /// A label requirement parsed but its key or values are invalid.
    #[error("unable to parse requirement: {}", Aggregate(.0))]
    InvalidRequirement(Vec<InvalidValue>),
    /// Tokens between label requirements are out of place (e.g. a missing `,`).
    #[error("{0}")]
    Syntax(String),
    /// A field selector term has no `=`, `==` or `!=`.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    InvalidFieldTerm {
        /// The whole selector as given.
        selector: String,
        /// The offending comma-separated term.
        term: String,
    },
    /// A field selector value holds a `\` not followed by `\`, `,` or `=`.
    #[error("invalid field selector: invalid escape sequence: {0}")]
    InvalidEscapeSequence(String),
    /// A field selector value holds a bare `,` or `=`.
    // Go formats the rune with `%v`, which prints its code point number, not the character.
    #[error("invalid field selector: unescaped character in value: {}", u32::from(*.0))]
    UnescapedCharacter(char),
}

/// One apimachinery `field.Invalid` error.
#[derive(Debug, Clone, PartialEq)]
pub struct InvalidValue {
    /// Field path, e.g. `values[0][app]`; `<nil>` for label keys, as the apiserver prints it.
    pub path: String,
    /// The rejected key or value.
    pub value: String,
    /// Why it was rejected.
    pub detail: String,
}

/// A rejected selector: the API server's error and a plain-language reason, for people who write
/// selectors into configuration files. `Display` is the reason.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{reason}")]
pub struct Rejection {
    error: SelectorError,
    reason: String,
}

impl Rejection {
    fn new(error: SelectorError, reason: impl Into<String>) -> Self {
        Self {
            error,
            reason: reason.into(),
        }
    }

    /// The API server's error, as [`LabelSelector::parse`] or [`FieldSelector::parse`] returns it.
    pub fn error(&self) -> &SelectorError {
        &self.error
    }

    /// The plain-language reason: what is wrong, naming the offending key, value or token.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The API server's error, dropping the reason.
    pub fn into_error(self) -> SelectorError {
        self.error
    }
}

impl fmt::Display for InvalidValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: Invalid value: {}: {}",
            self.path,
            go_quote(&self.value),
            self.detail
        )
    }
}

/// Renders a list of errors like `utilerrors.NewAggregate`: one bare, several bracketed.
struct Aggregate<'a>(&'a [InvalidValue]);

impl fmt::Display for Aggregate<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut seen: Vec<String> = Vec::new();
        for e in self.0 {
            let msg = e.to_string();
            if !seen.contains(&msg) {
                seen.push(msg);
            }
        }
        match seen.as_slice() {
            [one] => f.write_str(one),
            many => write!(f, "[{}]", many.join(", ")),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Label selectors
// ---------------------------------------------------------------------------------------------

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

/// The operator of a label requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelOp {
    /// `key in (a,b)`.
    In,
    /// `key notin (a,b)`.
    NotIn,
    /// `key=value`.
    Equals,
    /// `key==value`.
    DoubleEquals,
    /// `key!=value`.
    NotEquals,
    /// `key`.
    Exists,
    /// `!key`.
    DoesNotExist,
    /// `key>1`.
    GreaterThan,
    /// `key<1`.
    LessThan,
}

/// One requirement of a label selector, e.g. `tier in (gold,silver)`.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelRequirement {
    key: String,
    op: LabelOp,
    /// Sorted and deduplicated, like the `sets.String` apimachinery builds.
    values: Vec<String>,
}

impl LabelRequirement {
    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn op(&self) -> LabelOp {
        self.op
    }

    /// The values, sorted and deduplicated; `in ()` holds the empty value, as in apimachinery.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let value = labels.and_then(|m| m.get(&self.key)).map(label_text);
        match self.op {
            LabelOp::In | LabelOp::Equals | LabelOp::DoubleEquals => {
                value.is_some_and(|v| self.values.contains(&v))
            }
            LabelOp::NotIn | LabelOp::NotEquals => value.is_none_or(|v| !self.values.contains(&v)),
            LabelOp::Exists => value.is_some(),
            LabelOp::DoesNotExist => value.is_none(),
            LabelOp::GreaterThan | LabelOp::LessThan => {
                let Some(actual) = value.and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                let [wanted] = self.values.as_slice() else {
                    return false;
                };
                let Ok(wanted) = wanted.parse::<i64>() else {
                    return false;
                };
                if self.op == LabelOp::GreaterThan {
                    actual > wanted
                } else {
                    actual < wanted
                }
            }
        }
    }
}

/// The text of a label value. Labels are strings once validated; anything else is compared by
/// its JSON text so a stray number still behaves sensibly instead of vanishing.
fn label_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl LabelSelector {
    /// Parses `s` with apimachinery's `labels.Parse` grammar and validation.
    ///
    /// # Errors
    ///
    /// [`SelectorError`] with the API server's message when it would refuse `s`.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        Self::parse_explained(s).map_err(Rejection::into_error)
    }

    /// [`LabelSelector::parse`], explaining a refusal in plain words as well.
    ///
    /// # Errors
    ///
    /// [`Rejection`] when the API server would refuse `s`.
    pub fn parse_explained(s: &str) -> Result<Self, Rejection> {
        let mut requirements = Parser::new(s).parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { requirements })
    }

    /// Whether the selector has no requirements (and so matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[LabelRequirement] {
        &self.requirements
    }

    /// `labels` is the object's metadata.labels (None when absent).
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn literal_token(s: &[u8]) -> Option<Token> {
    Some(match s {
        b")" => Token::ClosedPar,
        b"," => Token::Comma,
        b"!" => Token::DoesNotExist,
        b"==" => Token::DoubleEquals,
        b"=" => Token::Equals,
        b">" => Token::GreaterThan,
        b"in" => Token::In,
        b"<" => Token::LessThan,
        b"!=" => Token::NotEquals,
        b"notin" => Token::NotIn,
        b"(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(ch: u8) -> bool {
    matches!(ch, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special_symbol(ch: u8) -> bool {
    matches!(ch, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Byte-level port of apimachinery's label lexer. Like the original, a NUL byte reads as end of
/// input: where a token would start it ends the selector, inside a token it just ends the token.
struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Lexer<'_> {
    fn read(&mut self) -> u8 {
        match self.s.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    fn lex(&mut self) -> (Token, String) {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return (Token::EndOfString, String::new());
        }
        self.unread();
        if is_special_symbol(ch) {
            self.scan_special_symbol()
        } else {
            self.scan_id_or_keyword()
        }
    }

    fn scan_id_or_keyword(&mut self) -> (Token, String) {
        let mut buffer = Vec::new();
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if is_special_symbol(ch) || is_whitespace(ch) {
                self.unread();
                break;
            }
            buffer.push(ch);
        }
        let tok = literal_token(&buffer).unwrap_or(Token::Identifier);
        // The token ends at ASCII bytes only, so it is always whole UTF-8.
        (tok, String::from_utf8_lossy(&buffer).into_owned())
    }

    /// Longest-match over the operator symbols: `!=` and `==` win over `!` and `=`.
    fn scan_special_symbol(&mut self) -> (Token, String) {
        let mut buffer = Vec::new();
        let mut last: Option<(Token, usize)> = None;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if !is_special_symbol(ch) {
                self.unread();
                break;
            }
            buffer.push(ch);
            if let Some(tok) = literal_token(&buffer) {
                last = Some((tok, buffer.len()));
            } else if last.is_some() {
                self.unread();
                break;
            }
        }
        match last {
            Some((tok, len)) => (tok, String::from_utf8_lossy(&buffer[..len]).into_owned()),
            None => (
                Token::Error,
                format!(
                    "error expected: keyword found '{}'",
                    String::from_utf8_lossy(&buffer)
                ),
            ),
        }
    }
}

/// Whether `in`/`notin` read as operators or, where a key or value is expected, as plain words.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Token, String)>,
    position: usize,
}

impl Parser {
    fn new(s: &str) -> Self {
        let mut lexer = Lexer {
            s: s.as_bytes(),
            pos: 0,
        };
        let mut items = Vec::new();
        loop {
            let item = lexer.lex();
            let end = item.0 == Token::EndOfString;
            items.push(item);
            if end {
                break;
            }
        }
        Self { items, position: 0 }
    }

    fn item(&self, index: usize, ctx: Context) -> (Token, String) {
        // Past the end behaves as end of string; apimachinery never gets there on valid paths.
        let (tok, lit) = self
            .items
            .get(index)
            .cloned()
            .unwrap_or((Token::EndOfString, String::new()));
        let tok = match tok {
            Token::In | Token::NotIn if ctx == Context::Values => Token::Identifier,
            other => other,
        };
        (tok, lit)
    }

    fn lookahead(&self, ctx: Context) -> (Token, String) {
        self.item(self.position, ctx)
    }

    fn consume(&mut self, ctx: Context) -> (Token, String) {
        self.position += 1;
        self.item(self.position - 1, ctx)
    }

    fn parse(&mut self) -> Result<Vec<LabelRequirement>, Rejection> {
        let mut requirements = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Token::Identifier | Token::DoesNotExist => {
                    requirements.push(self.parse_requirement()?);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                let reason = if t2 == Token::EndOfString {
                                    "trailing ','"
                                } else {
                                    "expected a label key"
                                };
                                return Err(Rejection::new(
                                    SelectorError::Syntax(format!(
                                        "found '{l2}', expected: identifier after ','"
                                    )),
                                    reason,
                                ));
                            }
                        }
                        _ => {
                            return Err(Rejection::new(
                                SelectorError::Syntax(format!(
                                    "found '{l}', expected: ',' or 'end of string'"
                                )),
                                format!("expected ',' or the end, found {}", describe(t, &l)),
                            ));
                        }
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => {
                    return Err(Rejection::new(
                        SelectorError::Syntax(format!(
                            "found '{lit}', expected: !, identifier, or 'end of string'"
                        )),
                        "expected a label key",
                    ));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<LabelRequirement, Rejection> {
        let (key, op) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (LabelOp::Exists | LabelOp::DoesNotExist)) = op {
            return new_requirement(key, op, Vec::new());
        }
        let op = self.parse_operator(&key)?;
        let values = match op {
            LabelOp::In | LabelOp::NotIn => self.parse_values(op)?,
            _ => self.parse_exact_value(&key, op)?,
        };
        new_requirement(key, op, values.into_iter().collect())
    }

    /// Reads `[!]key`; the operator is known only when the key stands alone (`Exists`) or is
    /// negated (`DoesNotExist`, even if an operator follows: that is then a syntax error later).
    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<LabelOp>), Rejection> {
        let mut op = None;
        let (mut tok, mut lit) = self.consume(Context::Values);
        if tok == Token::DoesNotExist {
            op = Some(LabelOp::DoesNotExist);
            (tok, lit) = self.consume(Context::Values);
        }
        if tok != Token::Identifier {
            return Err(Rejection::new(
                SelectorError::RequirementSyntax(format!("found '{lit}', expected: identifier")),
                "expected a label key",
            ));
        }
        // The parser passes a nil field path here, which Go prints as `<nil>`.
        let errs = qualified_name_errors(&lit);
        if !errs.is_empty() {
            let reason = format!(
                "{lit:?} is not a label key ([prefix/]name: name up to 63 letters, digits, '-', \
                 '_', '.', starting and ending with a letter or digit)"
            );
            return Err(Rejection::new(
                SelectorError::InvalidRequirement(vec![InvalidValue {
                    path: "<nil>".into(),
                    value: lit,
                    detail: errs.join("; "),
                }]),
                reason,
            ));
        }
        let (next, _) = self.lookahead(Context::Values);
        if matches!(next, Token::EndOfString | Token::Comma) && op.is_none() {
            op = Some(LabelOp::Exists);
        }
        Ok((lit, op))
    }

    fn parse_operator(&mut self, key: &str) -> Result<LabelOp, Rejection> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Token::In => LabelOp::In,
            Token::Equals => LabelOp::Equals,
            Token::DoubleEquals => LabelOp::DoubleEquals,
            Token::GreaterThan => LabelOp::GreaterThan,
            Token::LessThan => LabelOp::LessThan,
            Token::NotIn => LabelOp::NotIn,
            Token::NotEquals => LabelOp::NotEquals,
            _ => {
                return Err(Rejection::new(
                    SelectorError::RequirementSyntax(format!(
                        "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                    )),
                    format!(
                        "expected an operator (=, ==, !=, in, notin, >, <) after {key:?}, found {}",
                        describe(tok, &lit)
                    ),
                ));
            }
        })
    }

    /// The `(a,b)` after `in` or `notin` (`op`).
    fn parse_values(&mut self, op: LabelOp) -> Result<BTreeSet<String>, Rejection> {
        let word = if op == LabelOp::NotIn { "notin" } else { "in" };
        let (tok, lit) = self.consume(Context::Values);
        if tok != Token::OpenPar {
            // Sic: apimachinery has no comma before "expected" in this one message.
            return Err(Rejection::new(
                SelectorError::RequirementSyntax(format!("found '{lit}' expected: '('")),
                format!("{word:?} needs a list in parentheses, like ({word} (a,b))"),
            ));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        match tok {
            Token::Identifier | Token::Comma => {
                let set = self.parse_identifiers_list()?;
                let (closing, _) = self.consume(Context::Values);
                if closing != Token::ClosedPar {
                    return Err(Rejection::new(
                        SelectorError::RequirementSyntax(format!("found '{lit}', expected: ')'")),
                        "expected ',' or ')' in a value list",
                    ));
                }
                Ok(set)
            }
            // `()` is the set holding only the empty value, not an empty set.
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(BTreeSet::from([String::new()]))
            }
            _ => Err(Rejection::new(
                SelectorError::RequirementSyntax(format!(
                    "found '{lit}', expected: ',', ')' or identifier"
                )),
                "unterminated value list",
            )),
        }
    }

    /// Comma-separated values where every gap (`(,a`, `a,,b`, `a,)`) stands for the empty value.
    fn parse_identifiers_list(&mut self) -> Result<BTreeSet<String>, Rejection> {
        let mut set = BTreeSet::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Token::Identifier => {
                    set.insert(lit);
                    let (tok2, lit2) = self.lookahead(Context::Values);
                    match tok2 {
                        Token::Comma => {}
                        Token::ClosedPar => return Ok(set),
                        _ => {
                            return Err(Rejection::new(
                                SelectorError::RequirementSyntax(format!(
                                    "found '{lit2}', expected: ',' or ')'"
                                )),
                                "expected ',' or ')' in a value list",
                            ));
                        }
                    }
                }
                Token::Comma => {
                    if set.is_empty() {
                        set.insert(String::new());
                    }
                    let (tok2, _) = self.lookahead(Context::Values);
                    if tok2 == Token::ClosedPar {
                        set.insert(String::new());
                        return Ok(set);
                    }
                    if tok2 == Token::Comma {
                        self.consume(Context::Values);
                        set.insert(String::new());
                    }
                }
                _ => {
                    return Err(Rejection::new(
                        SelectorError::RequirementSyntax(format!(
                            "found '{lit}', expected: ',', or identifier"
                        )),
                        "unterminated value list",
                    ));
                }
            }
        }
    }

    /// The one value after `key` and `op` (`=`, `==`, `!=`, `>`, `<`).
    fn parse_exact_value(&mut self, key: &str, op: LabelOp) -> Result<BTreeSet<String>, Rejection> {
        let (tok, _) = self.lookahead(Context::Values);
        if matches!(tok, Token::EndOfString | Token::Comma) {
            return Ok(BTreeSet::from([String::new()]));
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Token::Identifier {
            return Ok(BTreeSet::from([lit]));
        }
        let reason = if matches!(op, LabelOp::GreaterThan | LabelOp::LessThan) {
            integer_needed(key)
        } else {
            format!(
                "expected a value after {key:?}=, found {}",
                describe(tok, &lit)
            )
        };
        Err(Rejection::new(
            SelectorError::RequirementSyntax(format!("found '{lit}', expected: identifier")),
            reason,
        ))
    }
}

/// A token as a plain-language reason names it: words quoted, symbols in single quotes.
fn describe(tok: Token, lit: &str) -> String {
    match tok {
        Token::Identifier | Token::In | Token::NotIn | Token::Error => format!("{lit:?}"),
        Token::EndOfString => "the end".into(),
        _ => format!("'{lit}'"),
    }
}

fn integer_needed(key: &str) -> String {
    format!("{key:?} with > or < needs an integer")
}

/// apimachinery's `NewRequirement` checks, for the shapes the parser can produce (it always
/// yields at least one value for set operators and exactly one for the others).
fn new_requirement(
    key: String,
    op: LabelOp,
    values: Vec<String>,
) -> Result<LabelRequirement, Rejection> {
    let mut errs = Vec::new();
    let mut reason = None;
    if matches!(op, LabelOp::GreaterThan | LabelOp::LessThan) {
        for (i, v) in values.iter().enumerate() {
            if v.parse::<i64>().is_err() {
                reason.get_or_insert_with(|| integer_needed(&key));
                errs.push(InvalidValue {
                    path: format!("values[{i}]"),
                    value: v.clone(),
                    detail: "for 'Gt', 'Lt' operators, the value must be an integer".into(),
                });
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        let problems = label_value_errors(v);
        if !problems.is_empty() {
            reason.get_or_insert_with(|| {
                format!(
                    "{v:?} is not a label value (up to 63 letters, digits, '-', '_', '.', starting \
                     and ending with a letter or digit)"
                )
            });
            errs.push(InvalidValue {
                path: format!("values[{i}][{key}]"),
                value: v.clone(),
                detail: problems.join("; "),
            });
        }
    }
    match reason {
        None => Ok(LabelRequirement { key, op, values }),
        Some(reason) => Err(Rejection::new(
            SelectorError::InvalidRequirement(errs),
            reason,
        )),
    }
}

// Validation messages as in apimachinery v1.33 `pkg/util/validation`.

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_MAX: usize = 63;
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_MAX: usize = 63;
const DNS1123_SUBDOMAIN_FMT: &str =
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_MAX: usize = 253;

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// `validation.RegexError`, double spaces between examples included.
fn regex_error(msg: &str, re: &str, examples: &[&str]) -> String {
    let mut out = msg.to_owned();
    if examples.is_empty() {
        let _ = write!(out, " (regex used for validation is '{re}')");
        return out;
    }
    out.push_str(" (e.g. ");
    for (i, ex) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        let _ = write!(out, "'{ex}', ");
    }
    let _ = write!(out, "regex used for validation is '{re}')");
    out
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`
fn is_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(|label| {
        let b = label.as_bytes();
        let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        match (b.first(), b.last()) {
            (Some(first), Some(last)) => {
                edge(first) && edge(last) && b.iter().all(|c| edge(c) || *c == b'-')
            }
            _ => false,
        }
    })
}

/// `validation.IsQualifiedName`: the label key rules.
pub(crate) fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                if prefix.len() > DNS1123_SUBDOMAIN_MAX {
                    errs.push(format!(
                        "prefix part {}",
                        max_len_error(DNS1123_SUBDOMAIN_MAX)
                    ));
                }
                if !is_dns1123_subdomain(prefix) {
                    errs.push(format!(
                        "prefix part {}",
                        regex_error(
                            DNS1123_SUBDOMAIN_ERR,
                            DNS1123_SUBDOMAIN_FMT,
                            &["example.com"]
                        )
                    ));
                }
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_ERR,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > QUALIFIED_NAME_MAX {
        errs.push(format!("name part {}", max_len_error(QUALIFIED_NAME_MAX)));
    }
    if !is_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `validation.IsValidLabelValue`.
pub(crate) fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX {
        errs.push(max_len_error(LABEL_VALUE_MAX));
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// Go's `%q` (`strconv.Quote`), so rejected keys and values print as the apiserver prints them.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{07}' => out.push_str("\\a"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{0b}' => out.push_str("\\v"),
            c if is_go_printable(c) => out.push(c),
            c if u32::from(c) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if u32::from(c) < 0x1_0000 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => {
                let _ = write!(out, "\\U{:08x}", u32::from(c));
            }
        }
    }
    out.push('"');
    out
}

/// Approximates Go's `unicode.IsPrint` without its tables: control, non-ASCII space, common
/// format characters and private-use code points are escaped.
fn is_go_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    let cp = u32::from(c);
    !(c.is_control()
        || c.is_whitespace()
        || cp == 0xad
        || (0x200b..=0x200f).contains(&cp)
        || (0x202a..=0x202e).contains(&cp)
        || (0x2060..=0x2064).contains(&cp)
        || cp == 0xfeff
        || (0xe000..=0xf8ff).contains(&cp)
        || cp >= 0xf_0000)
}

// ---------------------------------------------------------------------------------------------
// Field selectors
// ---------------------------------------------------------------------------------------------

/// A parsed field selector; the empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

/// One `field=value` (or `field!=value` when `negated`) term, value unescaped.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldRequirement {
    /// The field label, e.g. `metadata.name`, taken verbatim (no trimming, as apimachinery).
    pub field: String,
    /// `!=` rather than `=`/`==`.
    pub negated: bool,
    /// The unescaped value.
    pub value: String,
}

impl FieldSelector {
    /// Parses `s` like apimachinery's `fields.ParseSelector`.
    ///
    /// # Errors
    ///
    /// [`SelectorError`] with the API server's message when it would refuse `s`.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        Self::parse_explained(s).map_err(Rejection::into_error)
    }

    /// [`FieldSelector::parse`], explaining a refusal in plain words as well.
    ///
    /// # Errors
    ///
    /// [`Rejection`] when the API server would refuse `s`.
    pub fn parse_explained(s: &str) -> Result<Self, Rejection> {
        let mut parts = split_terms(s);
        // apimachinery sorts the raw terms, which fixes the order `requirements` reports.
        parts.sort_unstable();
        let mut requirements = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((field, negated, raw)) = split_term(part) else {
                return Err(Rejection::new(
                    SelectorError::InvalidFieldTerm {
                        selector: s.to_owned(),
                        term: part.to_owned(),
                    },
                    format!("{part:?} has no =, == or !="),
                ));
            };
            let value = unescape_value(raw)?;
            // The identity transform apimachinery applies drops terms whose field and value
            // are both empty (`=`, `!=`), turning them into "everything".
            if field.is_empty() && value.is_empty() {
                continue;
            }
            requirements.push(FieldRequirement {
                field: field.to_owned(),
                negated,
                value,
            });
        }
        Ok(Self { requirements })
    }

    /// Whether the selector has no requirements (and so matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The terms, in apimachinery's order (sorted by their raw text).
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// `get(field)` returns the object's value for that field label (None = absent, compared as "").
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|r| {
            let actual = get(&r.field).unwrap_or_default();
            (actual == r.value) != r.negated
        })
    }
}

/// Splits on commas not preceded by a backslash escape; escapes stay in the terms.
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// Splits at the first operator; `!=` and `==` are tried before `=` at each position so a
/// leading `=` never leaks into the value. Returns (field, negated, raw value).
fn split_term(term: &str) -> Option<(&str, bool, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (op, negated) in [("!=", true), ("==", false), ("=", false)] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], negated, value));
            }
        }
    }
    None
}

/// `fields.UnescapeValue`: `\\`, `\,` and `\=` are the only escapes; bare `,`/`=` are errors.
fn unescape_value(s: &str) -> Result<String, Rejection> {
    let invalid_escape = |sequence: String| {
        Rejection::new(
            SelectorError::InvalidEscapeSequence(sequence),
            format!("invalid escape in {s:?}: only \\\\, \\, and \\= are allowed"),
        )
    };
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(invalid_escape(format!("\\{c}")));
            }
            out.push(c);
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => {
                return Err(Rejection::new(
                    SelectorError::UnescapedCharacter(c),
                    format!("unescaped '{c}' in value {s:?}; write \\{c}"),
                ));
            }
            c => out.push(c),
        }
    }
    if in_slash {
        return Err(invalid_escape("\\".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NAME_REGEX_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const VALUE_REGEX_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

    fn labels(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            other => panic!("not an object: {other}"),
        }
    }

    fn label_err(s: &str) -> String {
        match LabelSelector::parse(s) {
            Ok(sel) => panic!("{s:?} parsed unexpectedly: {sel:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn field_err(s: &str) -> String {
        match FieldSelector::parse(s) {
            Ok(sel) => panic!("{s:?} parsed unexpectedly: {sel:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn label_parse_valid() {
        let cases = [
            "",
            "   ",
            "x=a",
            "x==a",
            "x!=a",
            "x=a,y=b,z=c",
            "x!=a,y=b",
            "x=,z= ",
            "x= ,z= ",
            "x",
            "!x",
            "! x",
            "x,!y",
            "x>1",
            "x>1,z<5",
            "x in (a,b)",
            "x notin (a)",
            "x in (a)",
            "x in()",
            "x in ()",
            "x in (,a)",
            "x in (a,)",
            "x in (a,,b)",
            "x in (,)",
            "in in (in)",
            "notin notin (notin)",
            "x=in,y=notin",
            "x in(a),y notin(b)",
            "  x  =  a  ,  y  in  (  b  ,  c  )  ",
            "x\t=\ta\n,\ry",
            "example.com/x=a",
            "a.b-c_d=A.b-C_9",
            "x=a \0 anything after a NUL at a token start is ignored",
        ];
        for s in cases {
            if let Err(e) = LabelSelector::parse(s) {
                panic!("{s:?} should parse: {e}");
            }
        }
    }

    #[test]
    fn label_parse_syntax_errors() {
        let cases = [
            ("x==a==b", "found '==', expected: ',' or 'end of string'"),
            ("!x=a", "found '=', expected: ',' or 'end of string'"),
            ("x=a b", "found 'b', expected: ',' or 'end of string'"),
            (
                "x=a\0junk",
                "found 'junk', expected: ',' or 'end of string'",
            ),
            ("x=a,", "found '', expected: identifier after ','"),
            ("x=a,,y=b", "found ',', expected: identifier after ','"),
            ("x=a,=b", "found '=', expected: identifier after ','"),
            (
                ",x",
                "found ',', expected: !, identifier, or 'end of string'",
            ),
            (
                "(x)",
                "found '(', expected: !, identifier, or 'end of string'",
            ),
            (
                "=a",
                "found '=', expected: !, identifier, or 'end of string'",
            ),
            (
                "!",
                "unable to parse requirement: found '', expected: identifier",
            ),
            (
                "!!x",
                "unable to parse requirement: found '!', expected: identifier",
            ),
            (
                "x IN (a)",
                "unable to parse requirement: found 'IN', expected: in, notin, =, ==, !=, gt, lt",
            ),
            (
                "x NotIn (a)",
                "unable to parse requirement: found 'NotIn', expected: in, notin, =, ==, !=, gt, lt",
            ),
            (
                "x (a)",
                "unable to parse requirement: found '(', expected: in, notin, =, ==, !=, gt, lt",
            ),
            (
                "x!",
                "unable to parse requirement: found '!', expected: in, notin, =, ==, !=, gt, lt",
            ),
            (
                "x in a",
                "unable to parse requirement: found 'a' expected: '('",
            ),
            (
                "x in",
                "unable to parse requirement: found '' expected: '('",
            ),
            (
                "x in (a",
                "unable to parse requirement: found '', expected: ',' or ')'",
            ),
            (
                "x in (a b)",
                "unable to parse requirement: found 'b', expected: ',' or ')'",
            ),
            (
                "x in (a,",
                "unable to parse requirement: found '', expected: ',', or identifier",
            ),
            (
                "x in (a,=)",
                "unable to parse requirement: found '=', expected: ',', or identifier",
            ),
            (
                "x in (=)",
                "unable to parse requirement: found '=', expected: ',', ')' or identifier",
            ),
            // apimachinery quirk: a doubled comma right before ')' is rejected.
            (
                "x notin (,,)",
                "unable to parse requirement: found ')', expected: ',', or identifier",
            ),
            (
                "x in (a,,)",
                "unable to parse requirement: found ')', expected: ',', or identifier",
            ),
            (
                "x in (",
                "unable to parse requirement: found '', expected: ',', ')' or identifier",
            ),
            (
                "x=(a)",
                "unable to parse requirement: found '(', expected: identifier",
            ),
            (
                "x<=5",
                "unable to parse requirement: found '=', expected: identifier",
            ),
            (
                "x==!a",
                "unable to parse requirement: found '!', expected: identifier",
            ),
        ];
        for (s, want) in cases {
            assert_eq!(label_err(s), want, "selector {s:?}");
        }
    }

    #[test]
    fn label_parse_validation_errors() {
        let long = "a".repeat(64);
        let long_prefix = format!("{}/x", "a".repeat(254));
        let dns_msg = r"a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
        let cases = [
            (
                "Foo_=bar".to_owned(),
                format!(
                    "unable to parse requirement: <nil>: Invalid value: \"Foo_\": name part {NAME_REGEX_MSG}"
                ),
            ),
            (
                "-x".to_owned(),
                format!(
                    "unable to parse requirement: <nil>: Invalid value: \"-x\": name part {NAME_REGEX_MSG}"
                ),
            ),
            (
                "a/b/c".to_owned(),
                format!(
                    "unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a qualified name {NAME_REGEX_MSG} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
                ),
            ),
            (
                "/x=a".to_owned(),
                "unable to parse requirement: <nil>: Invalid value: \"/x\": prefix part must be non-empty".to_owned(),
            ),
            (
                "Example.com/x".to_owned(),
                format!(
                    "unable to parse requirement: <nil>: Invalid value: \"Example.com/x\": prefix part {dns_msg}"
                ),
            ),
            (
                "example.com/".to_owned(),
                format!(
                    "unable to parse requirement: <nil>: Invalid value: \"example.com/\": name part must be non-empty; name part {NAME_REGEX_MSG}"
                ),
            ),
            (
                long.clone(),
                format!(
                    "unable to parse requirement: <nil>: Invalid value: \"{long}\": name part must be no more than 63 characters"
                ),
            ),
            (
                long_prefix.clone(),
                format!(
                    "unable to parse requirement: <nil>: Invalid value: \"{long_prefix}\": prefix part must be no more than 253 characters"
                ),
            ),
            (
                "x\u{0b}y".to_owned(),
                format!(
                    "unable to parse requirement: <nil>: Invalid value: \"x\\vy\": name part {NAME_REGEX_MSG}"
                ),
            ),
            (
                format!("k={long}"),
                format!(
                    "unable to parse requirement: values[0][k]: Invalid value: \"{long}\": must be no more than 63 characters"
                ),
            ),
            (
                format!("k={long}_"),
                format!(
                    "unable to parse requirement: values[0][k]: Invalid value: \"{long}_\": must be no more than 63 characters; {VALUE_REGEX_MSG}"
                ),
            ),
            (
                "x=a||y=b".to_owned(),
                format!(
                    "unable to parse requirement: values[0][x]: Invalid value: \"a||y\": {VALUE_REGEX_MSG}"
                ),
            ),
            (
                "k in (ok,-b,-a)".to_owned(),
                format!(
                    "unable to parse requirement: [values[0][k]: Invalid value: \"-a\": {VALUE_REGEX_MSG}, values[1][k]: Invalid value: \"-b\": {VALUE_REGEX_MSG}]"
                ),
            ),
            (
                "x<a".to_owned(),
                "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' operators, the value must be an integer".to_owned(),
            ),
            (
                "x>".to_owned(),
                "unable to parse requirement: values[0]: Invalid value: \"\": for 'Gt', 'Lt' operators, the value must be an integer".to_owned(),
            ),
            (
                "x>1.5".to_owned(),
                "unable to parse requirement: values[0]: Invalid value: \"1.5\": for 'Gt', 'Lt' operators, the value must be an integer".to_owned(),
            ),
            (
                "x>9223372036854775808".to_owned(),
                "unable to parse requirement: values[0]: Invalid value: \"9223372036854775808\": for 'Gt', 'Lt' operators, the value must be an integer".to_owned(),
            ),
            (
                "x>-5".to_owned(),
                format!(
                    "unable to parse requirement: values[0][x]: Invalid value: \"-5\": {VALUE_REGEX_MSG}"
                ),
            ),
            (
                "x<a_".to_owned(),
                format!(
                    "unable to parse requirement: [values[0]: Invalid value: \"a_\": for 'Gt', 'Lt' operators, the value must be an integer, values[0][x]: Invalid value: \"a_\": {VALUE_REGEX_MSG}]"
                ),
            ),
        ];
        for (s, want) in cases {
            assert_eq!(label_err(&s), want, "selector {s:?}");
        }
    }

    #[test]
    fn label_errors_are_structured() {
        let err = LabelSelector::parse("Bad_=x").unwrap_err();
        let SelectorError::InvalidRequirement(errs) = err else {
            panic!("wrong variant: {err:?}");
        };
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].path, "<nil>");
        assert_eq!(errs[0].value, "Bad_");

        let err = LabelSelector::parse("k=-v").unwrap_err();
        let SelectorError::InvalidRequirement(errs) = err else {
            panic!("wrong variant: {err:?}");
        };
        assert_eq!(errs[0].path, "values[0][k]");
        assert_eq!(errs[0].value, "-v");

        assert!(matches!(
            LabelSelector::parse("x=a y"),
            Err(SelectorError::Syntax(_))
        ));
        assert!(matches!(
            LabelSelector::parse("x in y"),
            Err(SelectorError::RequirementSyntax(_))
        ));
    }

    #[test]
    fn label_matching() {
        let cases: &[(&str, Value, bool)] = &[
            // Empty selector matches everything, including objects without labels.
            ("", json!(null), true),
            ("", json!({"a": "b"}), true),
            ("x=a", json!({"x": "a"}), true),
            ("x=a", json!({"x": "b"}), false),
            ("x=a", json!({}), false),
            ("x=a", json!(null), false),
            ("x==a", json!({"x": "a"}), true),
            ("x==a", json!({"y": "a"}), false),
            ("x=", json!({"x": ""}), true),
            ("x=", json!({}), false),
            ("x!=a", json!({"x": "a"}), false),
            ("x!=a", json!({"x": "b"}), true),
            ("x!=a", json!({}), true),
            ("x!=a", json!(null), true),
            ("x!=", json!({"x": ""}), false),
            ("x in (a,b)", json!({"x": "b"}), true),
            ("x in (a,b)", json!({"x": "c"}), false),
            ("x in (a,b)", json!({}), false),
            ("x in ()", json!({"x": ""}), true),
            ("x in ()", json!({"x": "a"}), false),
            ("x in (a,)", json!({"x": ""}), true),
            ("x in (,a)", json!({"x": "a"}), true),
            ("x notin (a,b)", json!({"x": "a"}), false),
            ("x notin (a,b)", json!({"x": "c"}), true),
            ("x notin (a,b)", json!({}), true),
            ("x notin (a,b)", json!(null), true),
            ("x", json!({"x": ""}), true),
            ("x", json!({"y": "x"}), false),
            ("x", json!(null), false),
            ("!x", json!({"x": "a"}), false),
            ("!x", json!({"y": "a"}), true),
            ("!x", json!(null), true),
            ("x>1", json!({"x": "2"}), true),
            ("x>1", json!({"x": "1"}), false),
            ("x>1", json!({"x": "+5"}), true),
            ("x>1", json!({"x": "abc"}), false),
            ("x>1", json!({"x": "2.5"}), false),
            ("x>1", json!({}), false),
            ("x>1", json!(null), false),
            ("x<1", json!({"x": "0"}), true),
            ("x<1", json!({"x": "-7"}), true),
            ("x<1", json!({"x": "1"}), false),
            ("x<1", json!({}), false),
            ("x>0", json!({"x": "9223372036854775807"}), true),
            ("x>0", json!({"x": "9223372036854775808"}), false),
            // Non-string label values compare by their JSON text.
            ("x>3", json!({"x": 5}), true),
            ("x=true", json!({"x": true}), true),
            ("x=a,y!=b", json!({"x": "a"}), true),
            ("x=a,y!=b", json!({"x": "a", "y": "b"}), false),
            ("x,!y", json!({"x": "1"}), true),
            ("x,!y", json!({"x": "1", "y": "2"}), false),
            ("in in (in)", json!({"in": "in"}), true),
            ("x=in", json!({"x": "in"}), true),
            ("example.com/x=a", json!({"example.com/x": "a"}), true),
            ("x=A", json!({"x": "a"}), false),
        ];
        for (s, obj, want) in cases {
            let sel = LabelSelector::parse(s).unwrap();
            let m = match obj {
                Value::Null => None,
                other => Some(labels(other.clone())),
            };
            assert_eq!(sel.matches(m.as_ref()), *want, "{s:?} against {obj}");
        }
    }

    #[test]
    fn label_selector_shape() {
        assert!(LabelSelector::parse("").unwrap().is_empty());
        assert!(LabelSelector::parse(" \t ").unwrap().is_empty());
        assert!(!LabelSelector::parse("x").unwrap().is_empty());
        assert_eq!(LabelSelector::parse("").unwrap(), LabelSelector::default());
        // Requirements are kept sorted by key and value sets deduplicated, so equivalent
        // selectors compare equal.
        assert_eq!(
            LabelSelector::parse("b=1,a in (y,x,x)").unwrap(),
            LabelSelector::parse(" a in (x,y) , b=1 ").unwrap()
        );
        assert_ne!(
            LabelSelector::parse("a=1").unwrap(),
            LabelSelector::parse("a=2").unwrap()
        );
        let sel = LabelSelector::parse("x in (a,,b)").unwrap();
        assert_eq!(sel.requirements[0].values, ["", "a", "b"]);
        let sel = LabelSelector::parse("!x = a").unwrap_err();
        assert_eq!(
            sel.to_string(),
            "found '=', expected: ',' or 'end of string'"
        );
    }

    #[test]
    fn rejections_explain_in_plain_words() {
        let key = r#""-tier" is not a label key ([prefix/]name: name up to 63 letters, digits, '-', '_', '.', starting and ending with a letter or digit)"#;
        let value = r#""-gold" is not a label value (up to 63 letters, digits, '-', '_', '.', starting and ending with a letter or digit)"#;
        let labels = [
            (
                "tier gold",
                r#"expected an operator (=, ==, !=, in, notin, >, <) after "tier", found "gold""#,
            ),
            (
                "tier (",
                r#"expected an operator (=, ==, !=, in, notin, >, <) after "tier", found '('"#,
            ),
            ("tier=gold,", "trailing ','"),
            ("tier=gold,,x", "expected a label key"),
            (",", "expected a label key"),
            ("!", "expected a label key"),
            ("!!x", "expected a label key"),
            (
                "tier in gold",
                r#""in" needs a list in parentheses, like (in (a,b))"#,
            ),
            (
                "tier notin gold",
                r#""notin" needs a list in parentheses, like (notin (a,b))"#,
            ),
            ("tier in (a,b", "expected ',' or ')' in a value list"),
            ("tier in (a b)", "expected ',' or ')' in a value list"),
            ("tier in (a,", "unterminated value list"),
            ("tier in (", "unterminated value list"),
            ("tier in (=)", "unterminated value list"),
            ("tier=gold!", "expected ',' or the end, found '!'"),
            ("tier=gold x", r#"expected ',' or the end, found "x""#),
            ("tier==(", r#"expected a value after "tier"=, found '('"#),
            ("tier!=!", r#"expected a value after "tier"=, found '!'"#),
            ("x<=5", r#""x" with > or < needs an integer"#),
            (
                "replicas>three",
                r#""replicas" with > or < needs an integer"#,
            ),
            ("replicas>", r#""replicas" with > or < needs an integer"#),
            ("-tier=gold", key),
            ("!-tier", key),
            ("tier=-gold", value),
            ("tier in (ok,-gold)", value),
        ];
        for (s, want) in labels {
            let rejection = LabelSelector::parse_explained(s).unwrap_err();
            assert_eq!(rejection.reason(), want, "selector {s:?}");
            assert_eq!(rejection.to_string(), want, "selector {s:?}");
            assert_eq!(
                Err(rejection.error().clone()),
                LabelSelector::parse(s),
                "selector {s:?}"
            );
        }
        let fields = [
            ("metadata.name", r#""metadata.name" has no =, == or !="#),
            ("a=b=c", r#"unescaped '=' in value "b=c"; write \="#),
            (
                r"a=b\x",
                r#"invalid escape in "b\\x": only \\, \, and \= are allowed"#,
            ),
            (
                r"a=b\",
                r#"invalid escape in "b\\": only \\, \, and \= are allowed"#,
            ),
        ];
        for (s, want) in fields {
            let rejection = FieldSelector::parse_explained(s).unwrap_err();
            assert_eq!(rejection.reason(), want, "selector {s:?}");
            assert_eq!(
                Err(rejection.into_error()),
                FieldSelector::parse(s),
                "selector {s:?}"
            );
        }
    }

    #[test]
    fn label_requirements_are_readable() {
        let sel = LabelSelector::parse("tier in (silver,gold),!legacy,replicas>2").unwrap();
        let read: Vec<(&str, LabelOp, &[String])> = sel
            .requirements()
            .iter()
            .map(|r| (r.key(), r.op(), r.values()))
            .collect();
        assert_eq!(
            read,
            [
                ("legacy", LabelOp::DoesNotExist, &[][..]),
                ("replicas", LabelOp::GreaterThan, &["2".to_owned()][..]),
                (
                    "tier",
                    LabelOp::In,
                    &["gold".to_owned(), "silver".to_owned()][..]
                ),
            ]
        );
        assert_eq!(
            LabelSelector::parse("x in ()").unwrap().requirements()[0].values(),
            [""]
        );
    }

    #[test]
    fn field_parse_valid() {
        let req = |field: &str, negated: bool, value: &str| FieldRequirement {
            field: field.into(),
            negated,
            value: value.into(),
        };
        let cases: Vec<(&str, Vec<FieldRequirement>)> = vec![
            ("", vec![]),
            (",", vec![]),
            (",,", vec![]),
            ("=", vec![]),
            ("!=", vec![]),
            ("==", vec![]),
            (
                "metadata.name=foo",
                vec![req("metadata.name", false, "foo")],
            ),
            (
                "metadata.name==foo",
                vec![req("metadata.name", false, "foo")],
            ),
            (
                "metadata.name!=foo",
                vec![req("metadata.name", true, "foo")],
            ),
            ("spec.nodeName=", vec![req("spec.nodeName", false, "")]),
            ("spec.nodeName!=", vec![req("spec.nodeName", true, "")]),
            ("=x", vec![req("", false, "x")]),
            ("z=1,a!=2", vec![req("a", true, "2"), req("z", false, "1")]),
            ("a=b,,c=d", vec![req("a", false, "b"), req("c", false, "d")]),
            (r"a=b\,c", vec![req("a", false, "b,c")]),
            (r"a=b\=c", vec![req("a", false, "b=c")]),
            (r"a=b\\c", vec![req("a", false, r"b\c")]),
            (r"a=b\\", vec![req("a", false, "b\\")]),
            (
                r"a=x\,y,b=z",
                vec![req("a", false, "x,y"), req("b", false, "z")],
            ),
            (r"a\,b=c", vec![req(r"a\,b", false, "c")]),
            ("a = b", vec![req("a ", false, " b")]),
            ("a!b=c", vec![req("a!b", false, "c")]),
            ("a=!b", vec![req("a", false, "!b")]),
            ("a=é", vec![req("a", false, "é")]),
        ];
        for (s, want) in cases {
            let sel = FieldSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"));
            assert_eq!(sel.requirements(), want.as_slice(), "selector {s:?}");
            assert_eq!(sel.is_empty(), want.is_empty(), "selector {s:?}");
        }
    }

    #[test]
    fn field_parse_errors() {
        let cases = [
            ("foo", "invalid selector: 'foo'; can't understand 'foo'"),
            (
                "a=b,foo",
                "invalid selector: 'a=b,foo'; can't understand 'foo'",
            ),
            (" ", "invalid selector: ' '; can't understand ' '"),
            ("a<b", "invalid selector: 'a<b'; can't understand 'a<b'"),
            (
                "a=b=c",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                "a==b=c",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                "a!==b",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                r"a=b\x",
                r"invalid field selector: invalid escape sequence: \x",
            ),
            (
                r"a=b\é",
                r"invalid field selector: invalid escape sequence: \é",
            ),
            (
                r"a=b\",
                r"invalid field selector: invalid escape sequence: \",
            ),
        ];
        for (s, want) in cases {
            assert_eq!(field_err(s), want, "selector {s:?}");
        }
        assert_eq!(
            FieldSelector::parse("a=b=c"),
            Err(SelectorError::UnescapedCharacter('='))
        );
        assert_eq!(
            FieldSelector::parse("oops"),
            Err(SelectorError::InvalidFieldTerm {
                selector: "oops".into(),
                term: "oops".into()
            })
        );
    }

    #[test]
    fn field_matching() {
        let obj = |field: &str| match field {
            "metadata.name" => Some("web-0".to_owned()),
            "metadata.namespace" => Some("default".to_owned()),
            "status.phase" => Some("Running".to_owned()),
            "spec.nodeName" => Some(String::new()),
            "weird" => Some("a,b=c".to_owned()),
            _ => None,
        };
        let cases = [
            ("", true),
            ("metadata.name=web-0", true),
            ("metadata.name==web-0", true),
            ("metadata.name=web-1", false),
            ("metadata.name!=web-1", true),
            ("metadata.name!=web-0", false),
            ("metadata.name=web-0,metadata.namespace=default", true),
            ("metadata.name=web-0,metadata.namespace=kube-system", false),
            ("status.phase!=Succeeded,status.phase!=Failed", true),
            ("spec.nodeName=", true),
            ("spec.nodeName!=", false),
            // An absent field reads as the empty string.
            ("missing=", true),
            ("missing!=", false),
            ("missing=x", false),
            ("missing!=x", true),
            (r"weird=a\,b\=c", true),
        ];
        for (s, want) in cases {
            let sel = FieldSelector::parse(s).unwrap();
            assert_eq!(sel.matches(obj), want, "selector {s:?}");
        }
    }

    #[test]
    fn go_quote_matches_strconv_quote() {
        let cases = [
            ("", r#""""#),
            ("abc", r#""abc""#),
            ("a\"b", r#""a\"b""#),
            ("a\\b", r#""a\\b""#),
            ("\u{07}\u{08}\u{0c}\n\r\t\u{0b}", r#""\a\b\f\n\r\t\v""#),
            ("\u{01}\u{7f}", r#""\x01\x7f""#),
            ("\u{85}", r#""\u0085""#),
            ("\u{a0}", r#""\u00a0""#),
            ("\u{feff}", r#""\ufeff""#),
            ("é日本", "\"é日本\""),
            ("\u{1f600}", "\"\u{1f600}\""),
            ("\u{f0000}", r#""\U000f0000""#),
        ];
        for (s, want) in cases {
            assert_eq!(go_quote(s), want, "input {s:?}");
        }
    }

    #[test]
    fn lexer_tokens() {
        use Token as T;
        let lex_all = |s: &str| Parser::new(s).items;
        assert_eq!(
            lex_all("a!=b"),
            [
                (T::Identifier, "a".into()),
                (T::NotEquals, "!=".into()),
                (T::Identifier, "b".into()),
                (T::EndOfString, String::new()),
            ]
        );
        assert_eq!(
            lex_all("!(=="),
            [
                (T::DoesNotExist, "!".into()),
                (T::OpenPar, "(".into()),
                (T::DoubleEquals, "==".into()),
                (T::EndOfString, String::new()),
            ]
        );
        assert_eq!(
            lex_all("x in(notin)"),
            [
                (T::Identifier, "x".into()),
                (T::In, "in".into()),
                (T::OpenPar, "(".into()),
                (T::NotIn, "notin".into()),
                (T::ClosedPar, ")".into()),
                (T::EndOfString, String::new()),
            ]
        );
        assert_eq!(
            lex_all("=!<>"),
            [
                (T::Equals, "=".into()),
                (T::DoesNotExist, "!".into()),
                (T::LessThan, "<".into()),
                (T::GreaterThan, ">".into()),
                (T::EndOfString, String::new()),
            ]
        );
    }
}
