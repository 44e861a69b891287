//! Which observed changes matter: CEL `when` expressions ([`Expression`]) and the field comparisons
//! behind `changed` and `ignoreFields` ([`FieldPath`], [`meaningful_update`]).
//!
//! Expressions are compiled when the configuration loads; a syntax error or a variable that does
//! not exist is reported there with its line and column. The `cel` crate has no type checker, so a
//! result that is not a boolean is only found at run time, where it is handled like any other
//! evaluation error (`onError`).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::objects::{Key, Map};
use cel::{Context, Env, Program};
use serde_json::Value;

use super::{Op, members};

/// The variables an expression may use, as in Kubernetes' admission policies (`object`,
/// `oldObject`) plus herald's own.
pub const VARIABLES: [&str; 6] = ["object", "oldObject", "op", "resync", "namespace", "name"];

/// What `namespace` is bound as: CEL reserves the word `namespace` as an identifier (a field of
/// that name, `object.metadata.namespace`, is fine), so the variable is renamed before parsing,
/// to a name of the same length so that every position in an error stays right.
const NAMESPACE_BINDING: &str = "__ns_var_";

/// The names the variables are bound as, in [`VARIABLES`]' order.
const BINDINGS: [&str; 6] = [
    "object",
    "oldObject",
    "op",
    "resync",
    NAMESPACE_BINDING,
    "name",
];

/// Identifiers CEL itself gives meaning to (type names), which are not variables.
const TYPE_NAMES: [&str; 11] = [
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
];

/// The standard library, built once: building it per evaluation would cost more than most
/// expressions.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

/// A compiled `when` expression.
#[derive(Clone)]
pub struct Expression {
    source: String,
    program: Arc<Program>,
    /// Which of [`VARIABLES`] it reads: only those are converted for an evaluation.
    uses: [bool; 6],
    /// What of `object` and `oldObject` the expression reads (see [`Reads`]).
    reads: [Reads; 2],
}

/// What an expression reads of an object variable. Converting a whole object into CEL values costs
/// more than most expressions; an expression that only selects fields (`object.status.phase`,
/// `has(object.spec.x)`) and compares the variable with `null` needs only those fields.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reads {
    /// The variable is used as a whole (passed to a function, iterated, compared with an object):
    /// convert all of it.
    All,
    /// Only these field paths, each converted whole (none: only whether it is `null`).
    Fields(Vec<Vec<String>>),
}

impl Reads {
    fn add(&mut self, path: Vec<String>) {
        if let Self::Fields(paths) = self {
            paths.push(path);
        }
    }
}

/// The variable and field path a chain of field selections spells: `object.status.phase` is
/// (`object`, [status, phase]).
fn selection(e: &IdedExpr) -> Option<(&str, Vec<String>)> {
    match &e.expr {
        Expr::Ident(name) => Some((name, Vec::new())),
        Expr::Select(s) => {
            let (root, mut path) = selection(&s.operand)?;
            path.push(s.field.clone());
            Some((root, path))
        }
        _ => None,
    }
}

/// Fills in what `e` reads of `object` (`reads[0]`) and `oldObject` (`reads[1]`).
fn object_reads(e: &IdedExpr, reads: &mut [Reads; 2]) {
    let slot = |name: &str| BINDINGS[..2].iter().position(|b| *b == name);
    if let Some((root, path)) = selection(e)
        && let Some(i) = slot(root)
    {
        if path.is_empty() {
            // The bare variable anywhere but in a comparison with null (handled below).
            reads[i] = Reads::All;
        } else {
            reads[i].add(path);
        }
        return;
    }
    match &e.expr {
        Expr::Call(call) => {
            let null = |a: &IdedExpr| {
                matches!(&a.expr, Expr::Literal(cel::common::ast::LiteralValue::Null))
            };
            if matches!(call.func_name.as_str(), "_==_" | "_!=_")
                && call.target.is_none()
                && let [a, b] = call.args.as_slice()
            {
                let bare = |x: &IdedExpr| match &x.expr {
                    Expr::Ident(name) => slot(name),
                    _ => None,
                };
                if let Some(i) = bare(a).filter(|_| null(b)).or(bare(b).filter(|_| null(a))) {
                    // Only null or not: any conversion of a present object answers that.
                    reads[i].add(Vec::new());
                    return;
                }
            }
            if let Some(target) = &call.target {
                object_reads(target, reads);
            }
            for arg in &call.args {
                object_reads(arg, reads);
            }
        }
        Expr::Comprehension(c) => {
            let binds = |v: &str| slot(v).is_some();
            if binds(&c.iter_var) || c.iter_var2.as_deref().is_some_and(binds) {
                // A macro variable that hides one of ours: do not guess.
                *reads = [Reads::All, Reads::All];
                return;
            }
            for part in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                object_reads(part, reads);
            }
        }
        Expr::List(list) => {
            for el in &list.elements {
                object_reads(el, reads);
            }
        }
        Expr::Map(m) => entry_reads(&m.entries, reads),
        Expr::Struct(s) => entry_reads(&s.entries, reads),
        // A selection from something that is not a variable (`{'a': object}.a.b`).
        Expr::Select(s) => object_reads(&s.operand, reads),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn entry_reads(list: &[cel::common::ast::IdedEntryExpr], reads: &mut [Reads; 2]) {
    for entry in list {
        match &entry.expr {
            EntryExpr::StructField(f) => object_reads(&f.value, reads),
            EntryExpr::MapEntry(m) => {
                object_reads(&m.key, reads);
                object_reads(&m.value, reads);
            }
        }
    }
}

/// `v` as CEL sees it, reduced to what `reads` needs: the listed paths (each converted whole),
/// and the maps on the way to them with only those keys. A selection or `has()` along a listed
/// path gives what it gives on the whole object; nothing else is read.
fn to_cel_reading(v: &Value, reads: &Reads) -> cel::Value {
    match reads {
        Reads::All => to_cel(v),
        Reads::Fields(paths) => {
            let paths: Vec<&[String]> = paths.iter().map(Vec::as_slice).collect();
            pruned(v, &paths)
        }
    }
}

fn pruned(v: &Value, paths: &[&[String]]) -> cel::Value {
    let Value::Object(o) = v else {
        // Selecting a field of a scalar or list fails whatever it holds; converting it whole keeps
        // the error the same.
        return to_cel(v);
    };
    // At the top, an empty path is a null check and needs no key; below, the caller converts a
    // value whose path ends there whole and never gets here with one.
    let mut map: HashMap<Key, cel::Value> = HashMap::new();
    for (k, child) in o {
        let below: Vec<&[String]> = paths
            .iter()
            .filter(|p| p.first() == Some(k))
            .map(|p| &p[1..])
            .collect();
        if below.is_empty() {
            continue;
        }
        let value = if below.iter().any(|p| p.is_empty()) {
            to_cel(child)
        } else {
            pruned(child, &below)
        };
        map.insert(Key::String(Arc::new(k.clone())), value);
    }
    cel::Value::Map(Map { map: Arc::new(map) })
}

impl fmt::Debug for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Expression").field(&self.source).finish()
    }
}

/// Two expressions are the same when they are written the same.
impl PartialEq for Expression {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for Expression {}

/// Why an expression does not compile: where (1-based line and column, in characters) and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct CompileError {
    /// Line in the expression, from 1.
    pub line: usize,
    /// Column in that line, from 1, counted in characters.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

/// Why an evaluation gave no answer: a missing field, a wrong type, a result that is not a boolean.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EvalError(String);

impl EvalError {
    /// An evaluation that could not start, for this reason.
    pub fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }
}

/// Evaluating an expression that did not compile (only a configuration that skipped validation
/// holds one).
impl From<CompileError> for EvalError {
    fn from(e: CompileError) -> Self {
        Self(format!("the expression does not compile: {e}"))
    }
}

/// What an expression sees of one change.
#[derive(Debug, Clone, Copy)]
pub struct Vars<'a> {
    /// The new state (the last known state for a deletion). `None` is CEL `null`.
    pub object: Option<&'a Value>,
    /// The state herald recorded before; `None` (CEL `null`) on creation.
    pub old_object: Option<&'a Value>,
    /// The operation.
    pub op: Op,
    /// Whether the change was synthesized by a list (first start, relist after a gap).
    pub resync: bool,
    /// The object's namespace (`""` for a cluster-scoped one).
    pub namespace: &'a str,
    /// The object's name.
    pub name: &'a str,
}

/// Line and column (1-based, characters) of byte `offset` in `source`.
fn position(source: &str, offset: usize) -> (usize, usize) {
    let before = source.get(..offset).unwrap_or(source);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, column)
}

impl Expression {
    /// Compiles `source`.
    ///
    /// # Errors
    /// The first syntax error, or the first identifier that is neither one of [`VARIABLES`] nor
    /// bound by a macro (`all`, `exists`, `map`, `filter`), with its position.
    pub fn compile(source: &str) -> Result<Self, CompileError> {
        if source.trim().is_empty() {
            return Err(CompileError {
                line: 1,
                column: 1,
                message: "empty expression".to_owned(),
            });
        }
        let program = ENV.compile(&bind_namespace(source)).map_err(|errors| {
            let first = errors.errors.first();
            let (line, column) = first.map_or((1, 1), |e| {
                (
                    usize::try_from(e.pos.0).unwrap_or(1).max(1),
                    usize::try_from(e.pos.1).unwrap_or(1).max(1),
                )
            });
            CompileError {
                line,
                column,
                message: first.map_or_else(|| errors.to_string(), |e| e.msg.clone()),
            }
        })?;
        let mut unknown = None;
        let mut bound = Vec::new();
        unknown_identifier(program.expression(), &mut bound, &mut unknown);
        if let Some((id, name)) = unknown {
            let offset = program
                .source_info()
                .offset_for(id)
                .map_or(0, |(start, _)| start as usize);
            let (line, column) = position(source, offset);
            return Err(CompileError {
                line,
                column,
                message: format!(
                    "unknown variable `{name}` (the variables are {})",
                    VARIABLES.join(", ")
                ),
            });
        }
        let refs = program.references();
        let uses = BINDINGS.map(|v| refs.has_variable(v));
        let mut reads = [Reads::Fields(Vec::new()), Reads::Fields(Vec::new())];
        object_reads(program.expression(), &mut reads);
        Ok(Self {
            source: source.to_owned(),
            program: Arc::new(program),
            uses,
            reads,
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the expression reads `oldObject`.
    pub fn uses_old_object(&self) -> bool {
        self.uses[1]
    }

    /// Whether the expression reads `object`.
    pub fn uses_object(&self) -> bool {
        self.uses[0]
    }

    /// Whether the expression may read something under `status` of `object` or `oldObject` (it
    /// reads a field there, or a variable whole).
    pub fn reads_status(&self) -> bool {
        self.reads.iter().zip(&self.uses[..2]).any(|(r, used)| {
            *used
                && match r {
                    Reads::All => true,
                    Reads::Fields(paths) => paths
                        .iter()
                        .any(|p| p.first().is_some_and(|k| k == "status")),
                }
        })
    }

    /// Evaluates the expression on one change.
    ///
    /// # Errors
    /// The evaluation failed (a missing field, an operator applied to the wrong type) or gave
    /// something other than a boolean.
    pub fn evaluate(&self, vars: &Vars<'_>) -> Result<bool, EvalError> {
        let mut ctx = Context::with_env(ENV.clone());
        let values: [Option<cel::Value>; 6] = [
            self.uses[0].then(|| {
                vars.object
                    .map_or(cel::Value::Null, |v| to_cel_reading(v, &self.reads[0]))
            }),
            self.uses[1].then(|| {
                vars.old_object
                    .map_or(cel::Value::Null, |v| to_cel_reading(v, &self.reads[1]))
            }),
            self.uses[2].then(|| cel::Value::from(vars.op.as_str())),
            self.uses[3].then_some(cel::Value::Bool(vars.resync)),
            self.uses[4].then(|| cel::Value::from(vars.namespace)),
            self.uses[5].then(|| cel::Value::from(vars.name)),
        ];
        for (name, value) in BINDINGS.iter().zip(values) {
            if let Some(value) = value {
                ctx.add_variable_from_value(*name, value);
            }
        }
        // A panic inside the interpreter on one odd object must not take down the watcher or the
        // sink's reader that evaluates it: it is an evaluation error like any other.
        let run =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.program.execute(&ctx)))
                .map_err(|_| EvalError("the expression's evaluation panicked".to_owned()))?;
        match run {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(EvalError(format!(
                "the result is {:?}, not a boolean",
                other.type_of()
            ))),
            Err(e) => Err(EvalError(e.to_string())),
        }
    }
}

/// `source` with every use of the variable `namespace` renamed to [`NAMESPACE_BINDING`]: the
/// identifier `namespace` outside string literals and comments, not selected as a field
/// (`x.namespace`) and not called (`namespace(…)`, which stays the parser's error).
fn bind_namespace(source: &str) -> String {
    const WORD: &str = "namespace";
    if !source.contains(WORD) {
        return source.to_owned();
    }
    let b = source.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = source.to_owned();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            q @ (b'\'' | b'"') => {
                let raw = i > 0 && matches!(b[i - 1], b'r' | b'R');
                let triple = b.get(i + 1) == Some(&q) && b.get(i + 2) == Some(&q);
                let quote_len = if triple { 3 } else { 1 };
                i += quote_len;
                while i < b.len() {
                    if b[i] == b'\\' && !raw {
                        i += 2;
                        continue;
                    }
                    if b[i] == q
                        && (!triple || (b.get(i + 1) == Some(&q) && b.get(i + 2) == Some(&q)))
                    {
                        i += quote_len;
                        break;
                    }
                    i += 1;
                }
            }
            c if ident(c) => {
                let start = i;
                while i < b.len() && ident(b[i]) {
                    i += 1;
                }
                let head = source[..start].trim_end();
                // An optional selection (`x.?namespace`, spaces allowed) is a field too.
                let head = match head.strip_suffix('?') {
                    Some(h) if h.trim_end().ends_with('.') => h.trim_end(),
                    _ => head,
                };
                let before = head.as_bytes().last().copied();
                let after = source[i..].trim_start().as_bytes().first().copied();
                if &source[start..i] == WORD && before != Some(b'.') && after != Some(b'(') {
                    out.replace_range(start..i, NAMESPACE_BINDING);
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// The first identifier in `e` that is not a variable, a type name or bound by an enclosing macro.
fn unknown_identifier<'e>(
    e: &'e IdedExpr,
    bound: &mut Vec<&'e str>,
    found: &mut Option<(u64, String)>,
) {
    if found.is_some() {
        return;
    }
    match &e.expr {
        Expr::Ident(name) => {
            // `@`-names are the macros' own accumulators.
            if !name.starts_with('@')
                && !BINDINGS.contains(&name.as_str())
                && !TYPE_NAMES.contains(&name.as_str())
                && !bound.contains(&name.as_str())
            {
                *found = Some((e.id, name.clone()));
            }
        }
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                unknown_identifier(target, bound, found);
            }
            for arg in &call.args {
                unknown_identifier(arg, bound, found);
            }
        }
        Expr::Comprehension(c) => {
            unknown_identifier(&c.iter_range, bound, found);
            let depth = bound.len();
            bound.push(&c.accu_var);
            unknown_identifier(&c.accu_init, bound, found);
            bound.push(&c.iter_var);
            if let Some(v2) = &c.iter_var2 {
                bound.push(v2);
            }
            unknown_identifier(&c.loop_cond, bound, found);
            unknown_identifier(&c.loop_step, bound, found);
            unknown_identifier(&c.result, bound, found);
            bound.truncate(depth);
        }
        Expr::List(list) => {
            for el in &list.elements {
                unknown_identifier(el, bound, found);
            }
        }
        Expr::Map(m) => entries(&m.entries, bound, found),
        Expr::Struct(s) => entries(&s.entries, bound, found),
        Expr::Select(s) => unknown_identifier(&s.operand, bound, found),
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn entries<'e>(
    list: &'e [cel::common::ast::IdedEntryExpr],
    bound: &mut Vec<&'e str>,
    found: &mut Option<(u64, String)>,
) {
    for entry in list {
        match &entry.expr {
            EntryExpr::StructField(f) => unknown_identifier(&f.value, bound, found),
            EntryExpr::MapEntry(m) => {
                unknown_identifier(&m.key, bound, found);
                unknown_identifier(&m.value, bound, found);
            }
        }
    }
}

/// A JSON value as CEL sees it: integers that fit are `int` (as in Kubernetes), others `uint` or
/// `double`.
pub fn to_cel(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(a) => cel::Value::List(Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(o) => {
            let map: HashMap<Key, cel::Value> = o
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            cel::Value::Map(Map { map: Arc::new(map) })
        }
    }
}

/// A field of an object, for `changed` and `ignoreFields`: `status.phase` (dots separate keys) or,
/// for keys that contain dots, a JSON pointer (`/metadata/annotations/example.com~1owner`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldPath(Vec<String>);

impl FieldPath {
    /// Parses a dotted path or a JSON pointer.
    ///
    /// # Errors
    /// An empty path or an empty key (`spec..x`, `.spec`).
    pub fn parse(path: &str) -> Result<Self, String> {
        let keys: Vec<String> = if let Some(pointer) = path.strip_prefix('/') {
            pointer
                .split('/')
                .map(|t| t.replace("~1", "/").replace("~0", "~"))
                .collect()
        } else {
            path.split('.').map(str::to_owned).collect()
        };
        if path.is_empty() || keys.iter().any(String::is_empty) {
            return Err(format!(
                "invalid field {path:?}: expected dotted keys (status.phase) or a JSON pointer \
                 (/metadata/annotations/example.com~1owner)"
            ));
        }
        Ok(Self(keys))
    }

    fn of(keys: &[&str]) -> Self {
        Self(keys.iter().map(|k| (*k).to_owned()).collect())
    }

    /// Whether `other` is this field or lies within it.
    pub fn covers(&self, other: &FieldPath) -> bool {
        other.0.starts_with(&self.0)
    }

    /// The value at this path, if every key on the way exists. A key that is a number indexes a
    /// list (`spec.containers.0.image`).
    pub fn get<'v>(&self, v: &'v Value) -> Option<&'v Value> {
        self.0.iter().try_fold(v, |v, k| child(v, k))
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("."))
    }
}

/// Fields that never make an update worth reporting on their own: the version every write bumps,
/// and the server's bookkeeping of who wrote what.
pub static ALWAYS_IGNORED: LazyLock<[FieldPath; 2]> = LazyLock::new(|| {
    [
        FieldPath::of(&["metadata", "resourceVersion"]),
        FieldPath::of(&["metadata", "managedFields"]),
    ]
});

/// The member `k` of an object, or the element `k` (a decimal index) of a list.
fn child<'v>(v: &'v Value, k: &str) -> Option<&'v Value> {
    match v {
        Value::Array(a) => k.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => members::get(v, k),
    }
}

/// Whether `a` and `b` differ anywhere outside the `ignored` fields.
fn differ_outside(a: &Value, b: &Value, ignored: &[&[String]]) -> bool {
    if ignored.iter().any(|p| p.is_empty()) {
        return false;
    }
    if ignored.is_empty() {
        return !members::same(a, b);
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            // Every key of either side, each once: those of `x`, with `y` walked beside it (two
            // states of one object hold the same keys in the same order) and looked up by key only
            // once the orders part; then those only `y` has, unless every key of `x` met its twin
            // in `y` in order and `y` has no more.
            let mut beside = y.iter();
            let mut in_step = true;
            let differ = |k: &String, va: Option<&Value>, vb: Option<&Value>| {
                let below: Vec<&[String]> = ignored
                    .iter()
                    .filter(|p| p.first() == Some(k))
                    .map(|p| &p[1..])
                    .collect();
                if below.iter().any(|p| p.is_empty()) {
                    return false;
                }
                match (va, vb) {
                    (Some(va), Some(vb)) => differ_outside(va, vb, &below),
                    (None, None) => false,
                    // A map that appears or disappears holding only ignored fields
                    // (`status: {lastHeartbeatTime}`) is no change: compare it with an empty one.
                    (Some(v @ Value::Object(_)), None) | (None, Some(v @ Value::Object(_)))
                        if !below.is_empty() =>
                    {
                        differ_outside(v, &Value::Object(serde_json::Map::new()), &below)
                    }
                    _ => true,
                }
            };
            if x.iter().any(|(k, va)| {
                let vb = match in_step.then(|| beside.next()).flatten() {
                    Some((kb, vb)) if kb == k => Some(vb),
                    _ => {
                        in_step = false;
                        members::member(y, k)
                    }
                };
                differ(k, Some(va), vb)
            }) {
                return true;
            }
            if in_step && beside.next().is_none() {
                return false;
            }
            y.iter()
                .filter(|(k, _)| members::member(x, k).is_none())
                .any(|(k, vb)| differ(k, None, Some(vb)))
        }
        // Ignored fields inside list elements (`spec.containers.0.image`): a list that changes
        // length differs; otherwise element by element.
        (Value::Array(x), Value::Array(y)) => {
            x.len() != y.len()
                || x.iter().zip(y).enumerate().any(|(i, (va, vb))| {
                    let i = i.to_string();
                    let below: Vec<&[String]> = ignored
                        .iter()
                        .filter(|p| p.first() == Some(&i))
                        .map(|p| &p[1..])
                        .collect();
                    differ_outside(va, vb, &below)
                })
        }
        _ => !members::same(a, b),
    }
}

/// Whether an update from `old` to `new` is worth an event: it changes something outside
/// `metadata.resourceVersion`, `metadata.managedFields` and `ignore`, and, when `changed` is not
/// empty, one of the `changed` fields.
pub fn meaningful_update(
    old: &Value,
    new: &Value,
    changed: &[FieldPath],
    ignore: &[FieldPath],
) -> bool {
    let ignored: Vec<&[String]> = ALWAYS_IGNORED
        .iter()
        .chain(ignore)
        .map(|p| p.0.as_slice())
        .collect();
    if !differ_outside(old, new, &ignored) {
        return false;
    }
    changed.is_empty()
        || changed.iter().any(|p| match (p.get(old), p.get(new)) {
            (Some(a), Some(b)) => differ_outside(a, b, &sub_paths(&ignored, &p.0)),
            (None, None) => {
                warn_absent(p);
                false
            }
            _ => true,
        })
}

/// Logs, once per field (up to a bound), that a `changed` field is in neither object: a typo or a
/// field that does not exist makes every update through it silent.
fn warn_absent(path: &FieldPath) {
    static LOGGED: LazyLock<std::sync::Mutex<HashSet<FieldPath>>> = LazyLock::new(Default::default);
    let Ok(mut logged) = LOGGED.lock() else {
        return;
    };
    if logged.len() < 1_000 && logged.insert(path.clone()) {
        tracing::warn!(
            message = "A `changed` field is in neither the recorded nor the new object: no update passes through it. Check the path (list elements are numbered: spec.containers.0.image). Logged once per field.",
            field = %path,
        );
    }
}

/// The ignored paths below `prefix`, relative to it (empty when `prefix` itself is ignored).
fn sub_paths<'p>(ignored: &[&'p [String]], prefix: &[String]) -> Vec<&'p [String]> {
    ignored
        .iter()
        .filter_map(|p| {
            if p.len() >= prefix.len() && p[..prefix.len()] == *prefix {
                Some(&p[prefix.len()..])
            } else if prefix.len() > p.len() && prefix[..p.len()] == **p {
                Some(&p[p.len()..])
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vars<'a>(object: &'a Value, old: Option<&'a Value>, op: Op) -> Vars<'a> {
        Vars {
            object: Some(object),
            old_object: old,
            op,
            resync: false,
            namespace: "default",
            name: "db1",
        }
    }

    const TRANSITION: &str = "object.status.phase == 'Failed' && (oldObject == null || oldObject.status.phase != 'Failed')";

    #[test]
    fn the_transition_expression_fires_on_the_transition_only() {
        let e = Expression::compile(TRANSITION).unwrap();
        let failed = json!({"status": {"phase": "Failed"}});
        let ready = json!({"status": {"phase": "Ready"}});
        assert!(e.evaluate(&vars(&failed, None, Op::Created)).unwrap());
        assert!(
            e.evaluate(&vars(&failed, Some(&ready), Op::Updated))
                .unwrap()
        );
        assert!(
            !e.evaluate(&vars(&failed, Some(&failed), Op::Updated))
                .unwrap()
        );
        assert!(
            !e.evaluate(&vars(&ready, Some(&failed), Op::Updated))
                .unwrap()
        );
        assert!(e.uses_old_object());
    }

    #[test]
    fn every_variable_is_bound() {
        let e = Expression::compile(
            "op == 'updated' && !resync && namespace == 'default' && name.startsWith('db') \
             && object.spec.replicas > 2 && oldObject.spec.replicas == 2",
        )
        .unwrap();
        let new = json!({"spec": {"replicas": 3}});
        let old = json!({"spec": {"replicas": 2}});
        assert!(e.evaluate(&vars(&new, Some(&old), Op::Updated)).unwrap());
        assert!(!e.evaluate(&vars(&new, Some(&old), Op::Created)).unwrap());
        let e = Expression::compile("object.spec.items.all(i, i.size() > 0)").unwrap();
        assert!(!e.uses_old_object());
        let ok = json!({"spec": {"items": ["a", "b"]}});
        assert!(e.evaluate(&vars(&ok, None, Op::Created)).unwrap());
    }

    #[test]
    fn runtime_errors_and_non_booleans_are_errors() {
        let obj = json!({"spec": {}});
        let missing = Expression::compile("object.status.phase == 'Failed'").unwrap();
        assert!(missing.evaluate(&vars(&obj, None, Op::Created)).is_err());
        let guarded =
            Expression::compile("has(object.status) && object.status.phase == 'Failed'").unwrap();
        assert!(!guarded.evaluate(&vars(&obj, None, Op::Created)).unwrap());
        let number = Expression::compile("object.spec").unwrap();
        let err = number.evaluate(&vars(&obj, None, Op::Created)).unwrap_err();
        assert!(err.to_string().contains("not a boolean"), "{err}");
    }

    #[test]
    fn syntax_errors_carry_line_and_column() {
        let err = Expression::compile("object.status.phase == ").unwrap_err();
        assert_eq!((err.line, err.column), (1, 24), "{err}");
        let err = Expression::compile("object.spec.x &&\n  object.spec.y ==== 1").unwrap_err();
        assert_eq!(err.line, 2, "{err}");
        assert!(err.to_string().starts_with("line 2, column "), "{err}");
        assert!(Expression::compile("  ").is_err());
    }

    #[test]
    fn unknown_variables_are_compile_errors_with_their_position() {
        assert!(
            Expression::compile("namespace == object.metadata.namespace && 'namespace' != name")
                .is_ok()
        );
        // The field `namespace` is the object's, the variable is the change's.
        let obj = json!({"metadata": {"namespace": "team-a", "name": "db1"}});
        let cluster = json!({"metadata": {"name": "n1"}});
        for (src, want, on_cluster) in [
            ("object.metadata.namespace == 'team-a'", true, None),
            (
                "object.metadata.?namespace.orValue('') == 'team-a'",
                true,
                Some(false),
            ),
            (
                "object.metadata . ? namespace.orValue('') == ''",
                false,
                Some(true),
            ),
            (
                "namespace == 'default' && object.metadata.?namespace.hasValue()",
                true,
                Some(false),
            ),
        ] {
            let e = Expression::compile(src).unwrap_or_else(|err| panic!("{src}: {err}"));
            assert_eq!(
                e.evaluate(&vars(&obj, None, Op::Created)).ok(),
                Some(want),
                "{src}"
            );
            if let Some(on_cluster) = on_cluster {
                assert_eq!(
                    e.evaluate(&vars(&cluster, None, Op::Created)).ok(),
                    Some(on_cluster),
                    "{src} on a cluster-scoped object"
                );
            }
        }
        let err = Expression::compile("object.spec.x == 1 && objct.spec.y == 2").unwrap_err();
        assert_eq!((err.line, err.column), (1, 23), "{err}");
        assert!(err.message.contains("`objct`"), "{err}");
        let err = Expression::compile("object.spec.x == 1 ||\n    self.x").unwrap_err();
        assert_eq!((err.line, err.column), (2, 5), "{err}");
        // Macro variables are bound inside their macro only.
        assert!(Expression::compile("object.spec.l.exists(x, x == 1)").is_ok());
        let err = Expression::compile("object.spec.l.exists(x, x == 1) && x == 2").unwrap_err();
        assert!(err.message.contains("`x`"), "{err}");
    }

    /// Reading only the selected fields gives every expression the answer the whole object gives.
    #[test]
    fn selected_fields_answer_as_the_whole_object_does() {
        let obj = json!({"metadata": {"name": "a", "labels": {"tier": "gold"}},
                         "spec": {"replicas": 3, "items": [1, 2], "nested": {"x": {"y": 1}}},
                         "status": {"phase": "Failed"}});
        let old = json!({"spec": {"replicas": 2}, "status": {}});
        let cases = [
            (
                "object.metadata.labels.tier == 'gold' && oldObject != null",
                Some(true),
            ),
            (
                "has(object.status.phase) && !has(oldObject.status.phase)",
                Some(true),
            ),
            ("has(object.spec.nested.x.z)", Some(false)),
            (
                "object.spec.items.all(i, i > 0) && size(object.spec.items) == 2",
                Some(true),
            ),
            ("object.spec.nested == {'x': {'y': 1}}", Some(true)),
            ("object.metadata.labels['tier'] == 'gold'", Some(true)),
            ("size(object) == 3 && 'status' in oldObject", Some(true)),
            ("object.spec.replicas > oldObject.spec.replicas", Some(true)),
            ("oldObject.status.phase == 'x'", None),
            ("object.spec.items.x == 1", None),
            (
                "[object.spec, oldObject.spec].all(s, s.replicas > 1)",
                Some(true),
            ),
            ("object.spec.items.exists(object, object == 2)", Some(true)),
        ];
        for (src, want) in cases {
            let e = Expression::compile(src).unwrap();
            let got = e.evaluate(&vars(&obj, Some(&old), Op::Updated)).ok();
            assert_eq!(got, want, "{src} with {:?}", e.reads);
        }
        let reads = |src: &str| Expression::compile(src).unwrap().reads;
        assert_eq!(
            reads(
                "object.status.phase == 'Failed' && (oldObject == null || oldObject.status.phase != 'Failed')"
            ),
            [
                Reads::Fields(vec![vec!["status".into(), "phase".into()]]),
                Reads::Fields(vec![vec![], vec!["status".into(), "phase".into()]]),
            ]
        );
        assert_eq!(reads("size(object) > 1")[0], Reads::All);
    }

    #[test]
    fn ignored_fields_are_found_whatever_order_the_two_states_keep_their_members_in() {
        // `differ_outside` walks the two states side by side while their orders agree and looks
        // members up by key once they part: each case below leaves that walk at another point.
        let beat = FieldPath::parse("status.lastHeartbeatTime").unwrap();
        let ignore = std::slice::from_ref(&beat);
        let old = json!({"metadata": {"name": "w", "resourceVersion": "1"}, "a": 1, "b": {"x": [1, 2]},
                         "status": {"phase": "Ready", "lastHeartbeatTime": "t1"}});
        // The same members in another order, only the heartbeat changed: no change.
        let reordered = json!({"b": {"x": [1, 2]}, "status": {"lastHeartbeatTime": "t2", "phase": "Ready"},
                               "a": 1, "metadata": {"resourceVersion": "2", "name": "w"}});
        assert!(!meaningful_update(&old, &reordered, &[], ignore));
        assert!(!meaningful_update(&reordered, &old, &[], ignore));
        // Reordered, and a member only the new state has: a change, in either direction.
        let mut more = reordered.clone();
        more["c"] = json!(3);
        assert!(meaningful_update(&old, &more, &[], ignore));
        assert!(meaningful_update(&more, &old, &[], ignore));
        // In step all along, and one more member at the end of the new state: a change.
        let mut appended = old.clone();
        appended["status"]["lastHeartbeatTime"] = json!("t2");
        appended["d"] = json!(null);
        assert!(meaningful_update(&old, &appended, &[], ignore));
        // Reordered, and a value changed behind the point where the orders parted: a change.
        let mut changed = reordered.clone();
        changed["b"]["x"] = json!([1, 3]);
        assert!(meaningful_update(&old, &changed, &[], ignore));
        // Reordered, and a member gone: a change.
        let mut fewer = reordered;
        fewer.as_object_mut().unwrap().remove("a");
        assert!(meaningful_update(&old, &fewer, &[], ignore));
        assert!(meaningful_update(&fewer, &old, &[], ignore));
    }

    #[test]
    fn bookkeeping_and_ignored_fields_are_not_changes() {
        let old = json!({"metadata": {"resourceVersion": "1", "managedFields": [{"a": 1}], "labels": {"a": "1"}},
                         "spec": {"v": 1}, "status": {"phase": "Ready", "lastHeartbeatTime": "t1"}});
        let mut new = old.clone();
        new["metadata"]["resourceVersion"] = json!("2");
        new["metadata"]["managedFields"] = json!([{"a": 2}]);
        assert!(!meaningful_update(&old, &new, &[], &[]));
        new["status"]["lastHeartbeatTime"] = json!("t2");
        assert!(meaningful_update(&old, &new, &[], &[]));
        let heartbeat = FieldPath::parse("status.lastHeartbeatTime").unwrap();
        assert!(!meaningful_update(
            &old,
            &new,
            &[],
            std::slice::from_ref(&heartbeat)
        ));
        let status = FieldPath::parse("status").unwrap();
        new["status"]["phase"] = json!("Failed");
        // `changed: [status]` ignores the heartbeat within it but sees the phase.
        assert!(meaningful_update(
            &old,
            &new,
            std::slice::from_ref(&status),
            std::slice::from_ref(&heartbeat)
        ));
        let spec = FieldPath::parse("spec").unwrap();
        assert!(!meaningful_update(
            &old,
            &new,
            std::slice::from_ref(&spec),
            &[]
        ));
        new["metadata"]["labels"]["a"] = json!("2");
        assert!(!meaningful_update(
            &old,
            &new,
            std::slice::from_ref(&spec),
            &[]
        ));
        new["spec"]["v"] = json!(2);
        assert!(meaningful_update(&old, &new, &[spec], &[]));
        // A map that appears with only ignored fields in it is no change; with more, it is.
        let mut beat = old.clone();
        beat["status"] = json!({"lastHeartbeatTime": "t3"});
        let mut no_status = old.clone();
        no_status.as_object_mut().unwrap().remove("status");
        assert!(!meaningful_update(
            &no_status,
            &beat,
            &[],
            std::slice::from_ref(&heartbeat)
        ));
        assert!(!meaningful_update(
            &beat,
            &no_status,
            &[],
            std::slice::from_ref(&heartbeat)
        ));
        beat["status"]["phase"] = json!("Ready");
        assert!(meaningful_update(
            &no_status,
            &beat,
            &[],
            std::slice::from_ref(&heartbeat)
        ));
        // A field that appears or disappears is a change.
        let labels = FieldPath::parse("metadata.labels.b").unwrap();
        let mut with_b = old.clone();
        with_b["metadata"]["labels"]["b"] = json!("x");
        assert!(meaningful_update(&old, &with_b, &[labels], &[]));
    }

    #[test]
    fn paths_index_lists() {
        let old = json!({"metadata": {"resourceVersion": "1"},
                         "spec": {"containers": [{"image": "a:1", "restarts": 1}, {"image": "b:1"}]}});
        let mut new = old.clone();
        new["metadata"]["resourceVersion"] = json!("2");
        new["spec"]["containers"][0]["image"] = json!("a:2");
        let image = FieldPath::parse("spec.containers.0.image").unwrap();
        assert_eq!(image.get(&new), Some(&json!("a:2")));
        assert!(meaningful_update(
            &old,
            &new,
            std::slice::from_ref(&image),
            &[]
        ));
        let second = FieldPath::parse("spec.containers.1.image").unwrap();
        assert!(!meaningful_update(&old, &new, &[second], &[]));
        // Ignored fields inside list elements.
        let mut restarted = old.clone();
        restarted["spec"]["containers"][0]["restarts"] = json!(2);
        let restarts = FieldPath::parse("spec.containers.0.restarts").unwrap();
        assert!(!meaningful_update(
            &old,
            &restarted,
            &[],
            std::slice::from_ref(&restarts)
        ));
        restarted["spec"]["containers"][1]["image"] = json!("b:2");
        assert!(meaningful_update(&old, &restarted, &[], &[restarts]));
    }

    #[test]
    fn field_paths_take_dots_or_json_pointers() {
        let p = FieldPath::parse("/metadata/annotations/example.com~1owner").unwrap();
        let v = json!({"metadata": {"annotations": {"example.com/owner": "me"}}});
        assert_eq!(p.get(&v), Some(&json!("me")));
        assert_eq!(
            FieldPath::parse("status.phase").unwrap().to_string(),
            "status.phase"
        );
        for bad in ["", "spec..x", ".spec", "/", "spec."] {
            assert!(FieldPath::parse(bad).is_err(), "{bad:?}");
        }
    }
}
