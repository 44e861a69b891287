//! Structural-schema pruning and `openAPIV3Schema` validation of custom resources, worded as kube-apiserver words it.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::{Map, Number, Value};

use super::status::Cause;

/// What validation found: errors (→ 422 Invalid with these causes) and the paths of unknown fields that were pruned.
#[derive(Default)]
pub(crate) struct Checked {
    /// One cause per failed rule, as `details.causes` of the 422 lists them.
    pub(crate) errors: Vec<Cause>,
    /// Pruned fields in document order, e.g. `.spec.foo` or `.spec.list[0].x`.
    pub(crate) unknown: Vec<String>,
}

/// Prunes unknown fields from `obj` in place and validates what remains against `schema` (the openAPIV3Schema object).
pub(crate) fn validate_and_prune(schema: &Value, obj: &mut Value) -> Checked {
    let mut checked = Checked::default();
    let mut path = String::new();
    // The apiserver treats the resource root as an embedded resource, so apiVersion/kind/metadata survive pruning.
    prune(obj, Some(schema), true, &mut path, &mut checked.unknown);
    // The decoder drops nulls the schema cannot hold (and has no default for) before anything validates them.
    prune_nulls(obj, Some(schema));

    let mut validator = Validator::default();
    if let Some(meta) = obj.get("metadata")
        && !meta.is_object()
        && !meta.is_null()
    {
        // ObjectMeta coercion fails before schema validation; a JSON null decodes to an empty ObjectMeta.
        validator.errors.push(Cause::new(
            INVALID,
            "metadata",
            format!(
                "Invalid value: {}: json: cannot unmarshal {} into Go value of type v1.ObjectMeta",
                bad_value(meta),
                go_json_kind(meta)
            ),
        ));
    }
    validator.validate(schema, obj, "", true);
    checked.errors = validator.errors;
    checked
}

const PRESERVE: &str = "x-kubernetes-preserve-unknown-fields";
const EMBEDDED: &str = "x-kubernetes-embedded-resource";
const INT_OR_STRING: &str = "x-kubernetes-int-or-string";
const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

const INVALID: &str = "FieldValueInvalid";
const TYPE_INVALID: &str = "FieldValueTypeInvalid";
const NOT_SUPPORTED: &str = "FieldValueNotSupported";
const REQUIRED: &str = "FieldValueRequired";
const TOO_LONG: &str = "FieldValueTooLong";
const TOO_MANY: &str = "FieldValueTooMany";

/// Go's `swag` treats floats within ±2^53 as candidate JSON integers.
const MAX_JSON_INT: f64 = 9_007_199_254_740_992.0;

fn flag(s: &Value, key: &str) -> bool {
    s.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn properties(s: &Value) -> Option<&Map<String, Value>> {
    s.get("properties").and_then(Value::as_object)
}

fn items_schema(s: &Value) -> Option<&Value> {
    s.get("items").filter(|v| v.is_object())
}

/// Integer keyword values (`minLength`, `maxItems`, …), also when written as `3.0`.
fn schema_int(s: &Value, key: &str) -> Option<i64> {
    let v = s.get(key)?;
    v.as_i64()
        .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
}

enum Additional<'a> {
    Absent,
    /// `additionalProperties: true|false`: the structural schema has no schema for the values.
    Bool,
    Schema(&'a Value),
}

fn additional(s: &Value) -> Additional<'_> {
    match s.get("additionalProperties") {
        Some(Value::Bool(_)) => Additional::Bool,
        Some(a @ Value::Object(_)) => Additional::Schema(a),
        _ => Additional::Absent,
    }
}

/// How pruning treats one key of an object.
enum Rule<'a> {
    Meta,
    Known(Option<&'a Value>),
    Unknown,
}

fn rule<'a>(s: &'a Value, embedded: bool, key: &str) -> Rule<'a> {
    if embedded && META_FIELDS.contains(&key) {
        return Rule::Meta;
    }
    if let Some(p) = properties(s).and_then(|p| p.get(key)) {
        return Rule::Known(Some(p));
    }
    match additional(s) {
        Additional::Schema(a) => Rule::Known(Some(a)),
        Additional::Bool => Rule::Known(None),
        Additional::Absent => Rule::Unknown,
    }
}

fn push_key(path: &mut String, key: &str) -> usize {
    let len = path.len();
    path.push('.');
    path.push_str(key);
    len
}

/// apiextensions-apiserver's `pruning.prune`: a missing schema (`None`) prunes every object key beneath it.
fn prune(
    x: &mut Value,
    s: Option<&Value>,
    root: bool,
    path: &mut String,
    unknown: &mut Vec<String>,
) {
    if let Some(s) = s
        && flag(s, PRESERVE)
    {
        skip_prune(x, s, root, path, unknown);
        return;
    }
    match x {
        Value::Object(map) => {
            let Some(s) = s else {
                for key in map.keys() {
                    unknown.push(format!("{path}.{key}"));
                }
                map.clear();
                return;
            };
            let embedded = root || flag(s, EMBEDDED);
            for (key, v) in map.iter_mut() {
                match rule(s, embedded, key) {
                    Rule::Meta => {}
                    Rule::Known(child) => {
                        let len = push_key(path, key);
                        prune(v, child, false, path, unknown);
                        path.truncate(len);
                    }
                    Rule::Unknown => unknown.push(format!("{path}.{key}")),
                }
            }
            map.retain(|key, _| !matches!(rule(s, embedded, key), Rule::Unknown));
        }
        Value::Array(list) => {
            let items = s.and_then(items_schema);
            for (i, v) in list.iter_mut().enumerate() {
                let len = path.len();
                let _ = write!(path, "[{i}]");
                prune(v, items, false, path, unknown);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Under `x-kubernetes-preserve-unknown-fields` unknown keys stay untouched, but declared ones are still pruned.
fn skip_prune(x: &mut Value, s: &Value, root: bool, path: &mut String, unknown: &mut Vec<String>) {
    match x {
        Value::Object(map) => {
            let embedded = root || flag(s, EMBEDDED);
            for (key, v) in map.iter_mut() {
                if let Rule::Known(child) = rule(s, embedded, key) {
                    let len = push_key(path, key);
                    prune(v, child, false, path, unknown);
                    path.truncate(len);
                }
            }
        }
        Value::Array(list) => {
            let Some(items) = items_schema(s) else {
                return;
            };
            for (i, v) in list.iter_mut().enumerate() {
                let len = path.len();
                let _ = write!(path, "[{i}]");
                skip_prune(v, items, false, path, unknown);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

fn field_schema<'a>(s: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    let s = s?;
    if let Some(p) = properties(s).and_then(|p| p.get(key)) {
        return Some(p);
    }
    match additional(s) {
        Additional::Schema(a) => Some(a),
        _ => None,
    }
}

/// `defaulting.PruneNonNullableNullsWithoutDefaults`: only object members are dropped, never array elements.
fn prune_nulls(x: &mut Value, s: Option<&Value>) {
    match x {
        Value::Object(map) => {
            map.retain(|key, v| {
                !(v.is_null()
                    && field_schema(s, key).is_some_and(|f| {
                        !flag(f, "nullable") && f.get("default").is_none_or(Value::is_null)
                    }))
            });
            for (key, v) in map.iter_mut() {
                prune_nulls(v, field_schema(s, key));
            }
        }
        Value::Array(list) => {
            let items = s.and_then(items_schema);
            for v in list {
                prune_nulls(v, items);
            }
        }
        _ => {}
    }
}

/// A JSON number as Go's decoder types it: int64 when it fits, float64 otherwise.
#[derive(Clone, Copy)]
enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn of(n: &Number) -> Self {
        match n.as_i64() {
            Some(i) => Num::Int(i),
            None => Num::Float(n.as_f64().unwrap_or(f64::NAN)),
        }
    }

    fn render(self) -> String {
        match self {
            Num::Int(i) => i.to_string(),
            Num::Float(f) => go_float(f),
        }
    }
}

/// The JSON type name kube-openapi infers for a decoded value.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::String(_) => "string",
        Value::Number(n) => match Num::of(n) {
            Num::Int(_) => "integer",
            Num::Float(_) => "number",
        },
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `swag.IsFloat64AJSONInteger`, including its relative tolerance of 1e-9.
fn is_json_integer(f: f64) -> bool {
    if !f.is_finite() || !(-MAX_JSON_INT..=MAX_JSON_INT).contains(&f) {
        return false;
    }
    if f.fract() == 0.0 {
        return true;
    }
    if f < 0.0 {
        // Go converts through uint64 here, which never lands near a negative value.
        return false;
    }
    let g = f.trunc();
    let diff = (f - g).abs();
    if g == 0.0 {
        return false;
    }
    diff / (f.abs() + g.abs()).min(f64::MAX) < 1e-9
}

fn types_of(s: &Value) -> Vec<&str> {
    if flag(s, INT_OR_STRING) {
        return vec!["integer", "string"];
    }
    match s.get("type").and_then(Value::as_str) {
        Some(t) if !t.is_empty() => vec![t],
        _ => Vec::new(),
    }
}

/// Go's `field.Path` string for a kube-openapi error name: the leading dot of root-level map keys goes.
fn field_of(name: &str) -> String {
    let trimmed = name.strip_prefix('.').unwrap_or(name);
    if trimmed.is_empty() {
        "<nil>".to_string()
    } else {
        trimmed.to_string()
    }
}

#[derive(Default)]
struct Validator {
    errors: Vec<Cause>,
    patterns: HashMap<String, Option<pattern::Prog>>,
}

impl Validator {
    fn push(&mut self, reason: &'static str, name: &str, message: String) {
        self.errors
            .push(Cause::new(reason, field_of(name), message));
    }

    fn invalid(&mut self, name: &str, value: &str, detail: &str) {
        self.push(INVALID, name, format!("Invalid value: {value}: {detail}"));
    }

    fn type_error(&mut self, name: &str, expected: &str, actual: &str) {
        let actual = go_quote(actual);
        self.push(
            TYPE_INVALID,
            name,
            format!("Invalid value: {actual}: {name} in body must be of type {expected}: {actual}"),
        );
    }

    /// kube-openapi's `SchemaValidator.Validate`: rules apply by the value's actual kind, in its validator order.
    fn validate(&mut self, s: &Value, v: &mut Value, name: &str, root: bool) {
        let types = types_of(s);
        let enum_values = s
            .get("enum")
            .and_then(Value::as_array)
            .filter(|e| !e.is_empty());
        if v.is_null() {
            if !types.is_empty() && !flag(s, "nullable") {
                self.type_error(name, &types.join(","), "null");
            }
            // kube-openapi never matches a null against an enum, not even one that lists null.
            if let Some(values) = enum_values {
                self.enum_fail(name, v, values);
            }
            return;
        }
        let format = s.get("format").and_then(Value::as_str).unwrap_or("");
        self.check_type(&types, format, v, name);
        match v {
            Value::String(text) => self.check_string(s, text, name),
            Value::Number(n) => self.check_number(s, Num::of(n), name),
            Value::Array(list) => self.check_array(s, list, name),
            _ => {}
        }
        if let Some(values) = enum_values
            && !values.iter().any(|e| enum_matches(v, e))
        {
            self.enum_fail(name, v, values);
        }
        if let Value::Object(map) = v {
            self.check_object(s, map, name, root);
        }
        if types.contains(&"integer")
            && let Value::Number(n) = v
            && let Num::Float(f) = Num::of(n)
            && f.fract() == 0.0
            && f.abs() <= MAX_JSON_INT
        {
            // The real server keeps a float64 here and writes it back as `1`; a serde float would come back as `1.0`.
            *v = Value::from(f as i64);
        }
    }

    fn check_type(&mut self, types: &[&str], format: &str, v: &Value, name: &str) {
        let actual = json_type(v);
        let data_format = match v {
            Value::Number(n) => match Num::of(n) {
                Num::Int(_) => "int64",
                Num::Float(_) => "float64",
            },
            _ => "",
        };
        let float_int = matches!(v, Value::Number(n) if matches!(Num::of(n), Num::Float(f) if is_json_integer(f)))
            && types.contains(&"integer");
        let int_float = actual == "integer" && types.contains(&"number");
        // kube-openapi checks a declared format before the type,
        // and a non-numeric format waves strings and arrays through.
        let stringish = v.is_string() || v.is_array();
        let format_ok = stringish
            || format.is_empty()
            || types.contains(&actual)
            || data_format == format
            || float_int
            || int_float;
        if !format_ok {
            self.type_error(name, format, data_format);
            return;
        }
        let numeric = types.contains(&"number") || types.contains(&"integer");
        if types.is_empty() || (!numeric && !format.is_empty() && stringish) {
            return;
        }
        if !(types.contains(&actual) || float_int || int_float) {
            self.type_error(name, &types.join(","), actual);
        }
    }

    /// kube-openapi stops at the first failing string rule: maxLength, then minLength, then pattern.
    fn check_string(&mut self, s: &Value, text: &str, name: &str) {
        let len = i64::try_from(text.chars().count()).unwrap_or(i64::MAX);
        if let Some(max) = schema_int(s, "maxLength")
            && len > max
        {
            let unit = if max == 1 { "byte" } else { "bytes" };
            self.push(
                TOO_LONG,
                name,
                format!("Too long: may not be more than {max} {unit}"),
            );
            return;
        }
        if let Some(min) = schema_int(s, "minLength")
            && len < min
        {
            let detail = format!("{name} in body should be at least {min} chars long");
            self.invalid(name, &go_quote(text), &detail);
            return;
        }
        if let Some(p) = s.get("pattern").and_then(Value::as_str) {
            let prog = self
                .patterns
                .entry(p.to_string())
                .or_insert_with(|| pattern::compile(p));
            // A pattern this engine cannot compile is not checked rather than guessed at.
            if prog.as_ref().is_some_and(|prog| !prog.is_match(text)) {
                let detail = format!("{name} in body should match '{p}'");
                self.invalid(name, &go_quote(text), &detail);
            }
        }
    }

    fn check_number(&mut self, s: &Value, n: Num, name: &str) {
        if let Some(factor) = s.get("multipleOf").and_then(Value::as_f64) {
            self.check_multiple_of(n, factor, name);
        }
        if let Some(min) = s.get("minimum").and_then(Value::as_f64) {
            let exclusive = flag(s, "exclusiveMinimum");
            let words = if exclusive {
                "greater than"
            } else {
                "greater than or equal to"
            };
            // Integers compare against the bound truncated to int64, as kube-openapi's MinimumNativeType does.
            let (fails, bound) = match n {
                Num::Int(i) => {
                    let m = min as i64;
                    (if exclusive { i <= m } else { i < m }, m.to_string())
                }
                Num::Float(f) => (if exclusive { f <= min } else { f < min }, go_float(min)),
            };
            if fails {
                let detail = format!("{name} in body should be {words} {bound}");
                self.invalid(name, &n.render(), &detail);
            }
        }
        if let Some(max) = s.get("maximum").and_then(Value::as_f64) {
            let exclusive = flag(s, "exclusiveMaximum");
            let words = if exclusive {
                "less than"
            } else {
                "less than or equal to"
            };
            let (fails, bound) = match n {
                Num::Int(i) => {
                    let m = max as i64;
                    (if exclusive { i >= m } else { i > m }, m.to_string())
                }
                Num::Float(f) => (if exclusive { f >= max } else { f > max }, go_float(max)),
            };
            if fails {
                let detail = format!("{name} in body should be {words} {bound}");
                self.invalid(name, &n.render(), &detail);
            }
        }
    }

    fn check_multiple_of(&mut self, n: Num, factor: f64, name: &str) {
        if factor <= 0.0 {
            return;
        }
        let int_factor = factor as i64;
        match n {
            // Go divides by the truncated factor; a factor below 1 would divide by zero, so use the float rule.
            Num::Int(i) if int_factor != 0 => {
                if i.checked_rem(int_factor).is_some_and(|r| r != 0) {
                    let detail = format!("{name} in body should be a multiple of {int_factor}");
                    self.invalid(name, &i.to_string(), &detail);
                }
            }
            _ => {
                let data = match n {
                    Num::Int(i) => i as f64,
                    Num::Float(f) => f,
                };
                let mult = if factor < 1.0 {
                    1.0 / factor * data
                } else {
                    data / factor
                };
                if !is_json_integer(mult) {
                    let detail = format!(
                        "{name} in body should be a multiple of {}",
                        go_float(factor)
                    );
                    self.invalid(name, &go_float(data), &detail);
                }
            }
        }
    }

    fn check_array(&mut self, s: &Value, list: &mut [Value], name: &str) {
        if let Some(items) = items_schema(s) {
            for (i, item) in list.iter_mut().enumerate() {
                self.validate(items, item, &format!("{name}[{i}]"), false);
            }
        }
        let size = i64::try_from(list.len()).unwrap_or(i64::MAX);
        if let Some(min) = schema_int(s, "minItems")
            && size < min
        {
            let detail = format!("{name} in body should have at least {min} items");
            self.invalid(name, &size.to_string(), &detail);
        }
        if let Some(max) = schema_int(s, "maxItems")
            && size > max
        {
            self.too_many(name, size, max);
        }
    }

    fn too_many(&mut self, name: &str, actual: i64, max: i64) {
        let unit = if max == 1 { "item" } else { "items" };
        self.push(
            TOO_MANY,
            name,
            format!("Too many: {actual}: must have at most {max} {unit}"),
        );
    }

    fn check_object(&mut self, s: &Value, map: &mut Map<String, Value>, name: &str, root: bool) {
        let size = i64::try_from(map.len()).unwrap_or(i64::MAX);
        // kube-openapi returns right after a property-count failure, skipping members and `required`.
        if let Some(min) = schema_int(s, "minProperties")
            && size < min
        {
            let detail = format!("{name} in body should have at least {min} properties");
            self.invalid(name, &size.to_string(), &detail);
            return;
        }
        if let Some(max) = schema_int(s, "maxProperties")
            && size > max
        {
            self.too_many(name, size, max);
            return;
        }
        let props = properties(s);
        let extra = match additional(s) {
            Additional::Schema(a) => Some(a),
            _ => None,
        };
        for (key, child) in map.iter_mut() {
            if root && key == "metadata" {
                continue;
            }
            if let Some(ps) = props.and_then(|p| p.get(key)) {
                let child_name = if name.is_empty() {
                    key.clone()
                } else {
                    format!("{name}.{key}")
                };
                self.validate(ps, child, &child_name, false);
            } else if let Some(a) = extra {
                // kube-openapi joins map keys with a dot even at the root, hence `.key` there.
                self.validate(a, child, &format!("{name}.{key}"), false);
            }
        }
        if let Some(required) = s.get("required").and_then(Value::as_array) {
            for key in required.iter().filter_map(Value::as_str) {
                if !map.contains_key(key) {
                    self.push(
                        REQUIRED,
                        &format!("{name}.{key}"),
                        "Required value".to_string(),
                    );
                }
            }
        }
    }

    fn enum_fail(&mut self, name: &str, v: &Value, values: &[Value]) {
        let supported: Vec<String> = values
            .iter()
            .map(|e| match e {
                Value::String(text) => go_quote(text),
                other => go_quote(&go_json(other)),
            })
            .collect();
        self.push(
            NOT_SUPPORTED,
            name,
            format!(
                "Unsupported value: {}: supported values: {}",
                bad_value(v),
                supported.join(", ")
            ),
        );
    }
}

/// kube-openapi's enum test: deep equality, or equality after Go's conversion of the value to the enum value's type.
fn enum_matches(v: &Value, e: &Value) -> bool {
    match (v, e) {
        (Value::Number(a), Value::Number(b)) => match (Num::of(a), Num::of(b)) {
            (Num::Int(x), Num::Int(y)) => x == y,
            (Num::Float(x), Num::Int(y)) => x as i64 == y,
            (Num::Int(x), Num::Float(y)) => x as f64 == y,
            (Num::Float(x), Num::Float(y)) => x == y,
        },
        // Go converts an int64 to a string as a code point, so 97 matches "a".
        (Value::Number(a), Value::String(b)) => match Num::of(a) {
            Num::Int(x) => {
                let c = u32::try_from(x)
                    .ok()
                    .and_then(char::from_u32)
                    .unwrap_or('\u{FFFD}');
                b.chars().eq(std::iter::once(c))
            }
            Num::Float(_) => false,
        },
        _ => v == e,
    }
}

/// A `field.Error` bad value as apimachinery renders it: quoted strings, bare scalars, JSON otherwise.
fn bad_value(v: &Value) -> String {
    match v {
        Value::String(text) => go_quote(text),
        Value::Number(n) => Num::of(n).render(),
        Value::Bool(b) => b.to_string(),
        _ => go_json(v),
    }
}

/// The JSON kind encoding/json names in an `UnmarshalTypeError`.
fn go_json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Shortest round-trip digits and decimal exponent of `|f|` (`d.ddd × 10^exp`), the same digits Go's strconv picks.
fn shortest_digits(f: f64) -> (String, i32) {
    let s = format!("{:e}", f.abs());
    let (mantissa, exp) = s.split_once('e').unwrap_or((s.as_str(), "0"));
    let digits = mantissa.chars().filter(char::is_ascii_digit).collect();
    (digits, exp.parse().unwrap_or(0))
}

fn exp_form(negative: bool, digits: &str, exp: i32) -> String {
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    let mut chars = digits.chars();
    out.push(chars.next().unwrap_or('0'));
    let rest: String = chars.collect();
    if !rest.is_empty() {
        out.push('.');
        out.push_str(&rest);
    }
    out.push('e');
    out.push(if exp < 0 { '-' } else { '+' });
    let _ = write!(out, "{:02}", exp.unsigned_abs());
    out
}

fn fixed_form(negative: bool, digits: &str, exp: i32) -> String {
    let digits = digits.as_bytes();
    let nd = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    let digit = |i: i32| -> char {
        usize::try_from(i)
            .ok()
            .and_then(|i| digits.get(i))
            .map_or('0', |&b| char::from(b))
    };
    let point = exp + 1;
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    if point <= 0 {
        out.push('0');
    } else {
        for i in 0..point {
            out.push(digit(i));
        }
    }
    let decimals = (nd - point).max(0);
    if decimals > 0 {
        out.push('.');
        for i in 0..decimals {
            out.push(digit(point + i));
        }
    }
    out
}

/// Go's `%v` of a float64: shortest digits, exponent form below 1e-4 or from 1e+06 up.
fn go_float(f: f64) -> String {
    let (digits, exp) = shortest_digits(f);
    if !(-4..6).contains(&exp) {
        exp_form(f.is_sign_negative(), &digits, exp)
    } else {
        fixed_form(f.is_sign_negative(), &digits, exp)
    }
}

/// encoding/json's float64: exponent form below 1e-6 or from 1e21 up, with `e-07` shortened to `e-7`.
fn go_json_float(f: f64) -> String {
    let abs = f.abs();
    let (digits, exp) = shortest_digits(f);
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let mut out = exp_form(f.is_sign_negative(), &digits, exp);
        if let Some(stripped) = out.strip_suffix(|c: char| c.is_ascii_digit())
            && stripped.ends_with("e-0")
        {
            let last = out.pop().unwrap_or('0');
            out.pop();
            out.push(last);
        }
        out
    } else {
        fixed_form(f.is_sign_negative(), &digits, exp)
    }
}

/// Go's `encoding/json.Marshal` of a decoded value: sorted keys, HTML-safe escapes.
fn go_json(v: &Value) -> String {
    let mut out = String::new();
    write_go_json(v, &mut out);
    out
}

fn write_go_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match Num::of(n) {
            Num::Int(i) => out.push_str(&i.to_string()),
            Num::Float(f) => out.push_str(&go_json_float(f)),
        },
        Value::String(text) => write_go_json_string(text, out),
        Value::Array(list) => {
            out.push('[');
            for (i, item) in list.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json_string(key, out);
                out.push(':');
                if let Some(item) = map.get(key) {
                    write_go_json(item, out);
                }
            }
            out.push('}');
        }
    }
}

fn write_go_json_string(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if u32::from(c) < 0x20 || matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}') => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Go's `strconv.Quote`.
fn go_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if go_printable(c) => out.push(c),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if u32::from(c) < 0x10000 => {
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

/// An approximation of Go's `unicode.IsPrint` without Unicode category tables: controls, non-ASCII spaces,
/// format characters, private use and noncharacters are escaped; unassigned code points are not detected.
fn go_printable(c: char) -> bool {
    let u = u32::from(c);
    !(c.is_control()
        || (c.is_whitespace() && c != ' ')
        || matches!(
            u,
            0xAD | 0x600..=0x605
                | 0x61C
                | 0x6DD
                | 0x70F
                | 0x180E
                | 0x200B..=0x200F
                | 0x202A..=0x202E
                | 0x2060..=0x2064
                | 0x2066..=0x206F
                | 0xFEFF
                | 0xFFF9..=0xFFFB
                | 0xFFFE
                | 0xFFFF
                | 0xE000..=0xF8FF
                | 0xE0001
                | 0xE0020..=0xE007F
                | 0xF0000..
        ))
}

/// A small RE2-syntax matcher (Go's `regexp` dialect) for `pattern`, run as a Pike VM so it stays linear.
///
/// It answers only "does the pattern match anywhere in the text", which is all `pattern` needs. Unicode classes
/// (`\p{…}`) and anything RE2 rejects make `compile` return `None`.
mod pattern {
    const MAX_INSTS: usize = 20_000;
    const MAX_REPEAT: u32 = 1000;
    const MAX_DEPTH: usize = 250;

    #[derive(Clone, Copy, Default)]
    struct Flags {
        fold: bool,
        multi_line: bool,
        dot_nl: bool,
    }

    #[derive(Clone, Copy)]
    enum Look {
        TextStart,
        TextEnd,
        LineStart,
        LineEnd,
        WordBoundary,
        NotWordBoundary,
    }

    #[derive(Clone)]
    struct Class {
        ranges: Vec<(u32, u32)>,
        negated: bool,
        fold: bool,
    }

    impl Class {
        fn contains(&self, c: char) -> bool {
            let u = u32::from(c);
            self.ranges.iter().any(|&(lo, hi)| lo <= u && u <= hi)
        }

        fn matches(&self, c: char) -> bool {
            let hit = self.contains(c)
                || (self.fold && (self.contains(lower(c)) || self.contains(upper(c))));
            hit != self.negated
        }
    }

    fn lower(c: char) -> char {
        let mut it = c.to_lowercase();
        match (it.next(), it.next()) {
            (Some(l), None) => l,
            _ => c,
        }
    }

    fn upper(c: char) -> char {
        let mut it = c.to_uppercase();
        match (it.next(), it.next()) {
            (Some(u), None) => u,
            _ => c,
        }
    }

    fn same_char(a: char, b: char, fold: bool) -> bool {
        a == b || (fold && (lower(a) == lower(b) || upper(a) == upper(b)))
    }

    enum Node {
        Lit(char, bool),
        Class(Class),
        Any(bool),
        Look(Look),
        Concat(Vec<Node>),
        Alt(Vec<Node>),
        Repeat(Box<Node>, u32, Option<u32>),
    }

    enum Atom {
        Char(char),
        Set(Vec<(u32, u32)>),
    }

    enum Counted {
        Literal,
        Repeat(u32, Option<u32>),
        Invalid,
    }

    fn perl_class(c: char) -> Vec<(u32, u32)> {
        match c {
            'd' => vec![(0x30, 0x39)],
            's' => vec![(0x09, 0x0A), (0x0C, 0x0D), (0x20, 0x20)],
            _ => vec![(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
        }
    }

    fn posix_class(name: &str) -> Option<Vec<(u32, u32)>> {
        Some(match name {
            "alnum" => vec![(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)],
            "alpha" => vec![(0x41, 0x5A), (0x61, 0x7A)],
            "ascii" => vec![(0x00, 0x7F)],
            "blank" => vec![(0x09, 0x09), (0x20, 0x20)],
            "cntrl" => vec![(0x00, 0x1F), (0x7F, 0x7F)],
            "digit" => vec![(0x30, 0x39)],
            "graph" => vec![(0x21, 0x7E)],
            "lower" => vec![(0x61, 0x7A)],
            "print" => vec![(0x20, 0x7E)],
            "punct" => vec![(0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E)],
            "space" => vec![(0x09, 0x0D), (0x20, 0x20)],
            "upper" => vec![(0x41, 0x5A)],
            "word" => vec![(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
            "xdigit" => vec![(0x30, 0x39), (0x41, 0x46), (0x61, 0x66)],
            _ => return None,
        })
    }

    fn complement(ranges: &[(u32, u32)]) -> Vec<(u32, u32)> {
        let mut sorted = ranges.to_vec();
        sorted.sort_unstable();
        let mut out = Vec::new();
        let mut next = 0u32;
        for (lo, hi) in sorted {
            if lo > next {
                out.push((next, lo - 1));
            }
            next = next.max(hi.saturating_add(1));
        }
        if next <= 0x10FFFF {
            out.push((next, 0x10FFFF));
        }
        out
    }

    struct Parser {
        chars: Vec<char>,
        pos: usize,
        depth: usize,
    }

    impl Parser {
        fn peek(&self) -> Option<char> {
            self.chars.get(self.pos).copied()
        }

        fn peek_at(&self, offset: usize) -> Option<char> {
            self.chars.get(self.pos + offset).copied()
        }

        fn bump(&mut self) -> Option<char> {
            let c = self.peek()?;
            self.pos += 1;
            Some(c)
        }

        fn eat(&mut self, c: char) -> bool {
            let hit = self.peek() == Some(c);
            if hit {
                self.pos += 1;
            }
            hit
        }

        /// Flags stay set across `|` until the enclosing group closes, as in RE2.
        fn alternation(&mut self, flags: &mut Flags) -> Option<Node> {
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                return None;
            }
            let mut branches = vec![self.concat(flags)?];
            while self.eat('|') {
                branches.push(self.concat(flags)?);
            }
            self.depth -= 1;
            Some(if branches.len() == 1 {
                branches.pop()?
            } else {
                Node::Alt(branches)
            })
        }

        fn concat(&mut self, flags: &mut Flags) -> Option<Node> {
            let mut items: Vec<Node> = Vec::new();
            let mut repeated = false;
            while let Some(c) = self.peek() {
                let repeat = match c {
                    '|' | ')' => break,
                    '*' | '+' | '?' => {
                        self.pos += 1;
                        Some(match c {
                            '*' => (0, None),
                            '+' => (1, None),
                            _ => (0, Some(1)),
                        })
                    }
                    '{' => match self.counted() {
                        Counted::Repeat(min, max) => Some((min, max)),
                        Counted::Invalid => return None,
                        Counted::Literal => None,
                    },
                    _ => None,
                };
                if let Some((min, max)) = repeat {
                    // A trailing `?` only makes the repetition lazy, which cannot change whether it matches.
                    self.eat('?');
                    if repeated {
                        return None;
                    }
                    let last = items.pop()?;
                    items.push(Node::Repeat(Box::new(last), min, max));
                    repeated = true;
                    continue;
                }
                repeated = false;
                self.pos += 1;
                match c {
                    '(' => {
                        if let Some(node) = self.group(flags)? {
                            items.push(node);
                        }
                    }
                    '[' => items.push(Node::Class(self.class(flags.fold)?)),
                    '.' => items.push(Node::Any(flags.dot_nl)),
                    '^' => items.push(Node::Look(if flags.multi_line {
                        Look::LineStart
                    } else {
                        Look::TextStart
                    })),
                    '$' => items.push(Node::Look(if flags.multi_line {
                        Look::LineEnd
                    } else {
                        Look::TextEnd
                    })),
                    '\\' => items.push(self.escape(flags.fold)?),
                    _ => items.push(Node::Lit(c, flags.fold)),
                }
            }
            Some(Node::Concat(items))
        }

        /// `{n}`, `{n,}`, `{n,m}`; anything else starting with `{` is a literal brace.
        fn counted(&mut self) -> Counted {
            let start = self.pos;
            self.pos += 1;
            let Some(min) = self.number() else {
                self.pos = start;
                return Counted::Literal;
            };
            let max = if self.eat(',') {
                if self.peek() == Some('}') {
                    None
                } else {
                    match self.number() {
                        Some(m) => Some(m),
                        None => {
                            self.pos = start;
                            return Counted::Literal;
                        }
                    }
                }
            } else {
                Some(min)
            };
            if !self.eat('}') {
                self.pos = start;
                return Counted::Literal;
            }
            if min > MAX_REPEAT || max.is_some_and(|m| m > MAX_REPEAT || m < min) {
                return Counted::Invalid;
            }
            Counted::Repeat(min, max)
        }

        fn number(&mut self) -> Option<u32> {
            let start = self.pos;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.pos += 1;
            }
            if self.pos == start {
                return None;
            }
            let text: String = self.chars.get(start..self.pos)?.iter().collect();
            // Counts beyond u32 are over the repeat limit anyway.
            Some(text.parse().unwrap_or(u32::MAX))
        }

        /// After `(`: `Some(None)` is a bare flag group such as `(?i)`.
        fn group(&mut self, flags: &mut Flags) -> Option<Option<Node>> {
            if self.eat('?') {
                match (self.peek(), self.peek_at(1)) {
                    (Some('P'), Some('<')) => {
                        self.pos += 2;
                        self.skip_name()?;
                    }
                    (Some('<'), next) if next != Some('=') && next != Some('!') => {
                        self.pos += 1;
                        self.skip_name()?;
                    }
                    _ => {
                        let mut inner = *flags;
                        let mut negate = false;
                        loop {
                            let on = !negate;
                            match self.bump()? {
                                'i' => inner.fold = on,
                                'm' => inner.multi_line = on,
                                's' => inner.dot_nl = on,
                                'U' => {}
                                '-' if !negate => negate = true,
                                ':' => return self.group_body(inner).map(Some),
                                ')' => {
                                    *flags = inner;
                                    return Some(None);
                                }
                                _ => return None,
                            }
                        }
                    }
                }
            }
            self.group_body(*flags).map(Some)
        }

        fn group_body(&mut self, mut flags: Flags) -> Option<Node> {
            let node = self.alternation(&mut flags)?;
            self.eat(')').then_some(node)
        }

        fn skip_name(&mut self) -> Option<()> {
            let start = self.pos;
            while self.peek()? != '>' {
                let c = self.bump()?;
                if !(c.is_alphanumeric() || c == '_') {
                    return None;
                }
            }
            self.pos += 1;
            (self.pos > start + 1).then_some(())
        }

        fn escape(&mut self, fold: bool) -> Option<Node> {
            let c = self.bump()?;
            Some(match c {
                'd' | 'D' | 'w' | 'W' | 's' | 'S' => Node::Class(Class {
                    ranges: perl_class(c.to_ascii_lowercase()),
                    negated: c.is_ascii_uppercase(),
                    fold: false,
                }),
                'b' => Node::Look(Look::WordBoundary),
                'B' => Node::Look(Look::NotWordBoundary),
                'A' => Node::Look(Look::TextStart),
                'z' => Node::Look(Look::TextEnd),
                'Q' => {
                    let mut items = Vec::new();
                    while let Some(c) = self.bump() {
                        if c == '\\' && self.peek() == Some('E') {
                            self.pos += 1;
                            break;
                        }
                        items.push(Node::Lit(c, fold));
                    }
                    Node::Concat(items)
                }
                _ => Node::Lit(self.escaped_char(c)?, fold),
            })
        }

        /// The character a `\c` escape stands for (shared by classes and the top level).
        fn escaped_char(&mut self, c: char) -> Option<char> {
            Some(match c {
                'n' => '\n',
                't' => '\t',
                'r' => '\r',
                'f' => '\u{c}',
                'v' => '\u{b}',
                'a' => '\u{7}',
                'x' => return self.hex(),
                '0'..='7' => {
                    // A lone \1-\7 is a backreference, which RE2 rejects.
                    if c != '0' && !self.peek().is_some_and(|d| ('0'..='7').contains(&d)) {
                        return None;
                    }
                    let mut value = c.to_digit(8)?;
                    for _ in 0..2 {
                        match self.peek().and_then(|d| d.to_digit(8)) {
                            Some(d) => {
                                value = value * 8 + d;
                                self.pos += 1;
                            }
                            None => break,
                        }
                    }
                    char::from_u32(value)?
                }
                c if c.is_ascii() && !c.is_ascii_alphanumeric() => c,
                _ => return None,
            })
        }

        fn hex(&mut self) -> Option<char> {
            let mut value = 0u32;
            if self.eat('{') {
                let mut count = 0;
                while !self.eat('}') {
                    value = value.checked_mul(16)? + self.bump()?.to_digit(16)?;
                    count += 1;
                    if value > 0x10FFFF {
                        return None;
                    }
                }
                if count == 0 {
                    return None;
                }
            } else {
                for _ in 0..2 {
                    value = value * 16 + self.bump()?.to_digit(16)?;
                }
            }
            char::from_u32(value)
        }

        fn class(&mut self, fold: bool) -> Option<Class> {
            let negated = self.eat('^');
            let mut ranges = Vec::new();
            let mut first = true;
            loop {
                let c = self.peek()?;
                if c == ']' && !first {
                    self.pos += 1;
                    break;
                }
                first = false;
                if c == '['
                    && self.peek_at(1) == Some(':')
                    && let Some(set) = self.posix()?
                {
                    ranges.extend(set);
                    continue;
                }
                let lo = match self.class_atom()? {
                    Atom::Set(set) => {
                        ranges.extend(set);
                        continue;
                    }
                    Atom::Char(c) => c,
                };
                if self.peek() == Some('-') && self.peek_at(1).is_some_and(|c| c != ']') {
                    self.pos += 1;
                    let Atom::Char(hi) = self.class_atom()? else {
                        return None;
                    };
                    if hi < lo {
                        return None;
                    }
                    ranges.push((u32::from(lo), u32::from(hi)));
                } else {
                    ranges.push((u32::from(lo), u32::from(lo)));
                }
            }
            Some(Class {
                ranges,
                negated,
                fold,
            })
        }

        /// `[:name:]` inside a class: `Some(None)` when it is not one, so `[` is literal.
        fn posix(&mut self) -> Option<Option<Vec<(u32, u32)>>> {
            let rest: String = self.chars.get(self.pos + 2..)?.iter().collect();
            let Some(end) = rest.find(":]") else {
                return Some(None);
            };
            let name = rest.get(..end)?;
            let (negated, name) = match name.strip_prefix('^') {
                Some(n) => (true, n),
                None => (false, name),
            };
            let set = posix_class(name)?;
            self.pos += 2 + name.chars().count() + usize::from(negated) + 2;
            Some(Some(if negated { complement(&set) } else { set }))
        }

        fn class_atom(&mut self) -> Option<Atom> {
            let c = self.bump()?;
            if c != '\\' {
                return Some(Atom::Char(c));
            }
            let e = self.bump()?;
            match e {
                'd' | 'D' | 'w' | 'W' | 's' | 'S' => {
                    let set = perl_class(e.to_ascii_lowercase());
                    Some(Atom::Set(if e.is_ascii_uppercase() {
                        complement(&set)
                    } else {
                        set
                    }))
                }
                _ => self.escaped_char(e).map(Atom::Char),
            }
        }
    }

    enum Inst {
        Lit(char, bool),
        Class(Class),
        Any(bool),
        Look(Look),
        Split(usize, usize),
        Jmp(usize),
        Match,
    }

    /// A compiled pattern.
    pub(super) struct Prog {
        insts: Vec<Inst>,
    }

    /// Compiles `src`, or `None` if it is outside the supported syntax or too large.
    pub(super) fn compile(src: &str) -> Option<Prog> {
        let mut parser = Parser {
            chars: src.chars().collect(),
            pos: 0,
            depth: 0,
        };
        let mut flags = Flags::default();
        let node = parser.alternation(&mut flags)?;
        if parser.pos != parser.chars.len() {
            return None;
        }
        let mut prog = Prog { insts: Vec::new() };
        prog.emit(&node)?;
        prog.push(Inst::Match)?;
        Some(prog)
    }

    fn is_word(c: Option<&char>) -> bool {
        c.is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_')
    }

    fn look_holds(look: Look, text: &[char], pos: usize) -> bool {
        let before = pos.checked_sub(1).and_then(|i| text.get(i));
        let after = text.get(pos);
        match look {
            Look::TextStart => pos == 0,
            Look::TextEnd => pos == text.len(),
            Look::LineStart => before.is_none_or(|&c| c == '\n'),
            Look::LineEnd => after.is_none_or(|&c| c == '\n'),
            Look::WordBoundary => is_word(before) != is_word(after),
            Look::NotWordBoundary => is_word(before) == is_word(after),
        }
    }

    impl Prog {
        fn push(&mut self, inst: Inst) -> Option<usize> {
            if self.insts.len() >= MAX_INSTS {
                return None;
            }
            self.insts.push(inst);
            Some(self.insts.len() - 1)
        }

        fn patch(&mut self, at: usize, inst: Inst) {
            if let Some(slot) = self.insts.get_mut(at) {
                *slot = inst;
            }
        }

        fn emit(&mut self, node: &Node) -> Option<()> {
            match node {
                Node::Lit(c, fold) => {
                    self.push(Inst::Lit(*c, *fold))?;
                }
                Node::Class(class) => {
                    self.push(Inst::Class(class.clone()))?;
                }
                Node::Any(nl) => {
                    self.push(Inst::Any(*nl))?;
                }
                Node::Look(look) => {
                    self.push(Inst::Look(*look))?;
                }
                Node::Concat(items) => {
                    for item in items {
                        self.emit(item)?;
                    }
                }
                Node::Alt(branches) => {
                    let mut jumps = Vec::new();
                    let last = branches.len().saturating_sub(1);
                    for (i, branch) in branches.iter().enumerate() {
                        if i == last {
                            self.emit(branch)?;
                        } else {
                            let split = self.push(Inst::Split(0, 0))?;
                            self.emit(branch)?;
                            jumps.push(self.push(Inst::Jmp(0))?);
                            let next = self.insts.len();
                            self.patch(split, Inst::Split(split + 1, next));
                        }
                    }
                    let end = self.insts.len();
                    for jump in jumps {
                        self.patch(jump, Inst::Jmp(end));
                    }
                }
                Node::Repeat(body, min, max) => {
                    for _ in 0..*min {
                        self.emit(body)?;
                    }
                    match max {
                        None => {
                            let split = self.push(Inst::Split(0, 0))?;
                            self.emit(body)?;
                            self.push(Inst::Jmp(split))?;
                            let end = self.insts.len();
                            self.patch(split, Inst::Split(split + 1, end));
                        }
                        Some(max) => {
                            // `x{2,4}` as `xx` then two optional `x`: the same language, which is all that counts here.
                            let mut splits = Vec::new();
                            for _ in *min..*max {
                                splits.push(self.push(Inst::Split(0, 0))?);
                                self.emit(body)?;
                            }
                            let end = self.insts.len();
                            for split in splits {
                                self.patch(split, Inst::Split(split + 1, end));
                            }
                        }
                    }
                }
            }
            Some(())
        }

        /// Whether the pattern matches anywhere in `text` (Go's `regexp.MatchString`).
        pub(super) fn is_match(&self, text: &str) -> bool {
            let chars: Vec<char> = text.chars().collect();
            let mut run = Run {
                seen: vec![usize::MAX; self.insts.len()],
                stack: Vec::new(),
            };
            let mut current = Vec::new();
            let mut next = Vec::new();
            for pos in 0..=chars.len() {
                if self.add(&mut run, &mut current, 0, pos, &chars) {
                    return true;
                }
                let Some(&c) = chars.get(pos) else {
                    break;
                };
                next.clear();
                for &pc in &current {
                    let hit = match self.insts.get(pc) {
                        Some(Inst::Lit(l, fold)) => same_char(c, *l, *fold),
                        Some(Inst::Class(class)) => class.matches(c),
                        Some(Inst::Any(nl)) => *nl || c != '\n',
                        _ => false,
                    };
                    if hit && self.add(&mut run, &mut next, pc + 1, pos + 1, &chars) {
                        return true;
                    }
                }
                std::mem::swap(&mut current, &mut next);
            }
            false
        }

        /// Adds `pc` and everything reachable from it without consuming input; true once `Match` is reachable.
        fn add(
            &self,
            run: &mut Run,
            list: &mut Vec<usize>,
            pc: usize,
            pos: usize,
            text: &[char],
        ) -> bool {
            run.stack.clear();
            run.stack.push(pc);
            while let Some(pc) = run.stack.pop() {
                let Some(seen) = run.seen.get_mut(pc) else {
                    continue;
                };
                if *seen == pos {
                    continue;
                }
                *seen = pos;
                match self.insts.get(pc) {
                    Some(Inst::Match) => return true,
                    Some(Inst::Jmp(to)) => run.stack.push(*to),
                    Some(Inst::Split(a, b)) => {
                        run.stack.push(*b);
                        run.stack.push(*a);
                    }
                    Some(Inst::Look(look)) if look_holds(*look, text, pos) => {
                        run.stack.push(pc + 1);
                    }
                    Some(Inst::Look(_)) | None => {}
                    Some(_) => list.push(pc),
                }
            }
            false
        }
    }

    /// Scratch state of one match: the position each instruction was last queued at, and the DFS stack.
    struct Run {
        seen: Vec<usize>,
        stack: Vec<usize>,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn run(schema: &Value, mut obj: Value) -> (Value, Vec<(String, String, String)>, Vec<String>) {
        let checked = validate_and_prune(schema, &mut obj);
        let errors = checked
            .errors
            .iter()
            .map(|c| (c.reason.to_string(), c.field.clone(), c.message.clone()))
            .collect();
        (obj, errors, checked.unknown)
    }

    fn cause(reason: &str, field: &str, message: &str) -> (String, String, String) {
        (reason.to_string(), field.to_string(), message.to_string())
    }

    fn spec_schema(spec: Value) -> Value {
        json!({"type": "object", "properties": {"spec": spec}})
    }

    fn one_error(spec_props: Value, spec: Value) -> Vec<(String, String, String)> {
        let schema = spec_schema(json!({"type": "object", "properties": spec_props}));
        run(&schema, json!({"spec": spec})).1
    }

    #[test]
    fn prunes_nested_unknown_fields_in_document_order() {
        let schema = spec_schema(json!({
            "type": "object",
            "properties": {
                "size": {"type": "integer"},
                "template": {"type": "object", "properties": {"a": {"type": "string"}}},
            },
        }));
        let (obj, errors, unknown) = run(
            &schema,
            json!({
                "extra": 1,
                "spec": {"foo": true, "size": 3, "template": {"a": "x", "b": {"c": 1}}, "zed": null},
                "status": {"ready": true},
            }),
        );
        assert!(errors.is_empty());
        assert_eq!(obj, json!({"spec": {"size": 3, "template": {"a": "x"}}}));
        assert_eq!(
            unknown,
            [
                ".extra",
                ".spec.foo",
                ".spec.template.b",
                ".spec.zed",
                ".status"
            ]
        );
    }

    #[test]
    fn keeps_root_type_and_object_meta() {
        let schema = spec_schema(json!({"type": "object"}));
        let obj = json!({
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w", "anything": {"goes": 1}},
            "spec": {"dropped": 1},
        });
        let (obj, errors, unknown) = run(&schema, obj);
        assert!(errors.is_empty());
        assert_eq!(
            obj,
            json!({
                "apiVersion": "example.com/v1",
                "kind": "Widget",
                "metadata": {"name": "w", "anything": {"goes": 1}},
                "spec": {},
            })
        );
        assert_eq!(unknown, [".spec.dropped"]);
    }

    #[test]
    fn metadata_is_not_validated_but_must_be_an_object() {
        let schema = json!({
            "type": "object",
            "properties": {"metadata": {"type": "object", "properties": {"name": {"type": "integer"}}}},
        });
        let (_, errors, _) = run(&schema, json!({"metadata": {"name": "not-an-int"}}));
        assert!(errors.is_empty());
        let (_, errors, _) = run(&json!({"type": "object"}), json!({"metadata": "x"}));
        assert_eq!(
            errors,
            [cause(
                "FieldValueInvalid",
                "metadata",
                "Invalid value: \"x\": json: cannot unmarshal string into Go value of type v1.ObjectMeta"
            )]
        );
        let (_, errors, _) = run(&json!({"type": "object"}), json!({"metadata": null}));
        assert!(errors.is_empty());
    }

    #[test]
    fn preserve_unknown_fields_keeps_unknown_keys_but_prunes_declared_ones() {
        let schema = spec_schema(json!({
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"known": {"type": "object", "properties": {"x": {"type": "string"}}}},
        }));
        let (obj, errors, unknown) = run(
            &schema,
            json!({"spec": {"other": {"deep": [1, {"a": 2}]}, "known": {"x": "1", "y": 2}}}),
        );
        assert!(errors.is_empty());
        assert_eq!(
            obj,
            json!({"spec": {"other": {"deep": [1, {"a": 2}]}, "known": {"x": "1"}}})
        );
        assert_eq!(unknown, [".spec.known.y"]);
    }

    #[test]
    fn preserve_unknown_fields_at_the_root() {
        let schema = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        let (obj, _, unknown) = run(&schema, json!({"kind": "K", "anything": {"a": 1}}));
        assert_eq!(obj, json!({"kind": "K", "anything": {"a": 1}}));
        assert!(unknown.is_empty());
    }

    #[test]
    fn additional_properties_schema_makes_a_map() {
        let schema = spec_schema(json!({
            "type": "object",
            "properties": {
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "ports": {
                    "type": "object",
                    "additionalProperties": {"type": "object", "properties": {"port": {"type": "integer"}}},
                },
            },
        }));
        let (obj, errors, unknown) = run(
            &schema,
            json!({"spec": {
                "labels": {"a": "x", "b": 5},
                "ports": {"http": {"port": 80, "proto": "TCP"}},
            }}),
        );
        assert_eq!(
            obj,
            json!({"spec": {"labels": {"a": "x", "b": 5}, "ports": {"http": {"port": 80}}}})
        );
        assert_eq!(unknown, [".spec.ports.http.proto"]);
        assert_eq!(
            errors,
            [cause(
                "FieldValueTypeInvalid",
                "spec.labels.b",
                "Invalid value: \"integer\": spec.labels.b in body must be of type string: \"integer\""
            )]
        );
    }

    #[test]
    fn additional_properties_true_keeps_keys_but_has_no_schema_below() {
        let schema = spec_schema(json!({
            "type": "object",
            "properties": {"free": {"type": "object", "additionalProperties": true}},
        }));
        let (obj, errors, unknown) = run(
            &schema,
            json!({"spec": {"free": {"a": 1, "b": {"c": 2}, "d": [{"e": 3}]}}}),
        );
        assert!(errors.is_empty());
        assert_eq!(obj, json!({"spec": {"free": {"a": 1, "b": {}, "d": [{}]}}}));
        assert_eq!(unknown, [".spec.free.b.c", ".spec.free.d[0].e"]);
    }

    #[test]
    fn prunes_and_validates_arrays_of_objects() {
        let schema = spec_schema(json!({
            "type": "object",
            "properties": {"list": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string", "minLength": 2}},
                },
            }},
        }));
        let (obj, errors, unknown) = run(
            &schema,
            json!({"spec": {"list": [{"name": "a"}, {"name": "ok", "bogus": 1}, {}]}}),
        );
        assert_eq!(
            obj,
            json!({"spec": {"list": [{"name": "a"}, {"name": "ok"}, {}]}})
        );
        assert_eq!(unknown, [".spec.list[1].bogus"]);
        assert_eq!(
            errors,
            [
                cause(
                    "FieldValueInvalid",
                    "spec.list[0].name",
                    "Invalid value: \"a\": spec.list[0].name in body should be at least 2 chars long"
                ),
                cause("FieldValueRequired", "spec.list[2].name", "Required value"),
            ]
        );
    }

    #[test]
    fn embedded_resources_keep_type_and_object_meta() {
        let schema = spec_schema(json!({
            "type": "object",
            "properties": {"template": {
                "type": "object",
                "x-kubernetes-embedded-resource": true,
                "properties": {"spec": {"type": "object"}},
            }},
        }));
        let (obj, _, unknown) = run(
            &schema,
            json!({"spec": {"template": {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}, "other": 1,
            }}}),
        );
        assert_eq!(
            obj,
            json!({"spec": {"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}}})
        );
        assert_eq!(unknown, [".spec.template.other"]);
    }

    #[test]
    fn required_fields() {
        let schema = json!({
            "type": "object",
            "required": ["spec"],
            "properties": {"spec": {"type": "object", "required": ["size", "name"], "properties": {
                "size": {"type": "integer"}, "name": {"type": "string"},
            }}},
        });
        let (_, errors, _) = run(&schema, json!({}));
        assert_eq!(
            errors,
            [cause("FieldValueRequired", "spec", "Required value")]
        );
        let (_, errors, _) = run(&schema, json!({"spec": {"name": "n"}}));
        assert_eq!(
            errors,
            [cause("FieldValueRequired", "spec.size", "Required value")]
        );
    }

    #[test]
    fn enum_values() {
        let errors = one_error(
            json!({"color": {"type": "string", "enum": ["red", "blue"]}}),
            json!({"color": "pink"}),
        );
        assert_eq!(
            errors,
            [cause(
                "FieldValueNotSupported",
                "spec.color",
                "Unsupported value: \"pink\": supported values: \"red\", \"blue\""
            )]
        );
        let errors = one_error(
            json!({"n": {"type": "integer", "enum": [1, 2]}}),
            json!({"n": 3}),
        );
        assert_eq!(
            errors,
            [cause(
                "FieldValueNotSupported",
                "spec.n",
                "Unsupported value: 3: supported values: \"1\", \"2\""
            )]
        );
        let errors = one_error(
            json!({"color": {"type": "string", "enum": ["red"]}}),
            json!({"color": "red"}),
        );
        assert!(errors.is_empty());
    }

    #[test]
    fn type_mismatches_name_the_actual_json_type() {
        let props = json!({
            "size": {"type": "integer"},
            "name": {"type": "string"},
            "list": {"type": "array"},
            "flag": {"type": "boolean"},
            "obj": {"type": "object"},
            "ratio": {"type": "number"},
        });
        let errors = one_error(
            props,
            json!({"size": "abc", "name": {}, "list": true, "flag": [], "obj": 1.5, "ratio": "1"}),
        );
        let expect = |field: &str, want: &str, got: &str| {
            cause(
                "FieldValueTypeInvalid",
                &format!("spec.{field}"),
                &format!(
                    "Invalid value: \"{got}\": spec.{field} in body must be of type {want}: \"{got}\""
                ),
            )
        };
        assert_eq!(
            errors,
            [
                expect("size", "integer", "string"),
                expect("name", "string", "object"),
                expect("list", "array", "boolean"),
                expect("flag", "boolean", "array"),
                expect("obj", "object", "number"),
                expect("ratio", "number", "string"),
            ]
        );
    }

    #[test]
    fn integer_accepts_integral_floats_like_the_real_server() {
        let schema = spec_schema(json!({"type": "object", "properties": {
            "size": {"type": "integer"}, "ratio": {"type": "number"},
        }}));
        let (obj, errors, _) = run(&schema, json!({"spec": {"size": 2.0, "ratio": 3}}));
        assert!(errors.is_empty());
        assert_eq!(obj, json!({"spec": {"size": 2, "ratio": 3}}));
        assert!(obj.pointer("/spec/size").unwrap().is_i64());
        let (_, errors, _) = run(&schema, json!({"spec": {"size": 2.5}}));
        assert_eq!(
            errors,
            [cause(
                "FieldValueTypeInvalid",
                "spec.size",
                "Invalid value: \"number\": spec.size in body must be of type integer: \"number\""
            )]
        );
    }

    #[test]
    fn format_mismatch_uses_the_format_name() {
        let errors = one_error(
            json!({"at": {"type": "string", "format": "date-time"}}),
            json!({"at": 5}),
        );
        assert_eq!(
            errors,
            [cause(
                "FieldValueTypeInvalid",
                "spec.at",
                "Invalid value: \"int64\": spec.at in body must be of type date-time: \"int64\""
            )]
        );
    }

    #[test]
    fn nullable_and_non_nullable_nulls() {
        let schema = spec_schema(json!({
            "type": "object",
            "required": ["must"],
            "properties": {
                "opt": {"type": "string", "nullable": true},
                "plain": {"type": "string"},
                "must": {"type": "string"},
                "list": {"type": "array", "items": {"type": "string"}},
                "nlist": {"type": "array", "items": {"type": "string", "nullable": true}},
            },
        }));
        let (obj, errors, unknown) = run(
            &schema,
            json!({"spec": {"opt": null, "plain": null, "must": null, "list": ["a", null], "nlist": [null]}}),
        );
        assert_eq!(
            obj,
            json!({"spec": {"opt": null, "list": ["a", null], "nlist": [null]}})
        );
        assert!(unknown.is_empty());
        assert_eq!(
            errors,
            [
                cause(
                    "FieldValueTypeInvalid",
                    "spec.list[1]",
                    "Invalid value: \"null\": spec.list[1] in body must be of type string: \"null\""
                ),
                cause("FieldValueRequired", "spec.must", "Required value"),
            ]
        );
    }

    #[test]
    fn null_with_a_default_is_left_for_defaulting() {
        let errors = one_error(
            json!({"mode": {"type": "string", "default": "auto"}}),
            json!({"mode": null}),
        );
        assert_eq!(
            errors,
            [cause(
                "FieldValueTypeInvalid",
                "spec.mode",
                "Invalid value: \"null\": spec.mode in body must be of type string: \"null\""
            )]
        );
    }

    #[test]
    fn nullable_enum_rejects_null() {
        let errors = one_error(
            json!({"c": {"type": "string", "nullable": true, "enum": ["a"]}}),
            json!({"c": null}),
        );
        assert_eq!(
            errors,
            [cause(
                "FieldValueNotSupported",
                "spec.c",
                "Unsupported value: null: supported values: \"a\""
            )]
        );
    }

    #[test]
    fn int_or_string() {
        let props = json!({"port": {"x-kubernetes-int-or-string": true}});
        assert!(one_error(props.clone(), json!({"port": 8080})).is_empty());
        assert!(one_error(props.clone(), json!({"port": "http"})).is_empty());
        assert_eq!(
            one_error(props, json!({"port": true})),
            [cause(
                "FieldValueTypeInvalid",
                "spec.port",
                "Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\""
            )]
        );
    }

    #[test]
    fn minimum_and_maximum() {
        let props = json!({
            "size": {"type": "integer", "minimum": 1, "maximum": 10},
            "ex": {"type": "integer", "minimum": 1, "exclusiveMinimum": true, "maximum": 10, "exclusiveMaximum": true},
            "ratio": {"type": "number", "minimum": 1, "maximum": 1000000},
        });
        let errors = one_error(props.clone(), json!({"size": 0, "ex": 1, "ratio": 0.5}));
        assert_eq!(
            errors,
            [
                cause(
                    "FieldValueInvalid",
                    "spec.size",
                    "Invalid value: 0: spec.size in body should be greater than or equal to 1"
                ),
                cause(
                    "FieldValueInvalid",
                    "spec.ex",
                    "Invalid value: 1: spec.ex in body should be greater than 1"
                ),
                cause(
                    "FieldValueInvalid",
                    "spec.ratio",
                    "Invalid value: 0.5: spec.ratio in body should be greater than or equal to 1"
                ),
            ]
        );
        let errors = one_error(props, json!({"size": 11, "ex": 10, "ratio": 2e6}));
        assert_eq!(
            errors,
            [
                cause(
                    "FieldValueInvalid",
                    "spec.size",
                    "Invalid value: 11: spec.size in body should be less than or equal to 10"
                ),
                cause(
                    "FieldValueInvalid",
                    "spec.ex",
                    "Invalid value: 10: spec.ex in body should be less than 10"
                ),
                cause(
                    "FieldValueInvalid",
                    "spec.ratio",
                    "Invalid value: 2e+06: spec.ratio in body should be less than or equal to 1e+06"
                ),
            ]
        );
    }

    #[test]
    fn multiple_of() {
        let errors = one_error(
            json!({"n": {"type": "integer", "multipleOf": 5}, "f": {"type": "number", "multipleOf": 0.5}}),
            json!({"n": 7, "f": 0.75}),
        );
        assert_eq!(
            errors,
            [
                cause(
                    "FieldValueInvalid",
                    "spec.n",
                    "Invalid value: 7: spec.n in body should be a multiple of 5"
                ),
                cause(
                    "FieldValueInvalid",
                    "spec.f",
                    "Invalid value: 0.75: spec.f in body should be a multiple of 0.5"
                ),
            ]
        );
    }

    #[test]
    fn string_lengths() {
        let props = json!({"name": {"type": "string", "minLength": 3, "maxLength": 5}});
        assert_eq!(
            one_error(props.clone(), json!({"name": "ab"})),
            [cause(
                "FieldValueInvalid",
                "spec.name",
                "Invalid value: \"ab\": spec.name in body should be at least 3 chars long"
            )]
        );
        assert_eq!(
            one_error(props.clone(), json!({"name": "abcdef"})),
            [cause(
                "FieldValueTooLong",
                "spec.name",
                "Too long: may not be more than 5 bytes"
            )]
        );
        // Lengths count characters, not bytes.
        assert!(one_error(props, json!({"name": "äöüß"})).is_empty());
        assert_eq!(
            one_error(
                json!({"c": {"type": "string", "maxLength": 1}}),
                json!({"c": "ab"})
            ),
            [cause(
                "FieldValueTooLong",
                "spec.c",
                "Too long: may not be more than 1 byte"
            )]
        );
    }

    #[test]
    fn item_counts() {
        let props = json!({
            "list": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
            "one": {"type": "array", "maxItems": 1},
        });
        assert_eq!(
            one_error(props.clone(), json!({"list": []})),
            [cause(
                "FieldValueInvalid",
                "spec.list",
                "Invalid value: 0: spec.list in body should have at least 1 items"
            )]
        );
        assert_eq!(
            one_error(props, json!({"list": ["a", "b", "c"], "one": [1, 2]})),
            [
                cause(
                    "FieldValueTooMany",
                    "spec.list",
                    "Too many: 3: must have at most 2 items"
                ),
                cause(
                    "FieldValueTooMany",
                    "spec.one",
                    "Too many: 2: must have at most 1 item"
                ),
            ]
        );
    }

    #[test]
    fn property_counts() {
        let props = json!({
            "few": {"type": "object", "minProperties": 2, "required": ["x"], "additionalProperties": {"type": "string"}},
            "many": {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "string"}},
        });
        assert_eq!(
            one_error(
                props,
                json!({"few": {"a": "1"}, "many": {"a": "1", "b": "2"}})
            ),
            [
                cause(
                    "FieldValueInvalid",
                    "spec.few",
                    "Invalid value: 1: spec.few in body should have at least 2 properties"
                ),
                cause(
                    "FieldValueTooMany",
                    "spec.many",
                    "Too many: 2: must have at most 1 item"
                ),
            ]
        );
    }

    #[test]
    fn pattern() {
        let props =
            json!({"name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}});
        assert!(one_error(props.clone(), json!({"name": "my-app-1"})).is_empty());
        assert_eq!(
            one_error(props, json!({"name": "Bad_Name"})),
            [cause(
                "FieldValueInvalid",
                "spec.name",
                "Invalid value: \"Bad_Name\": spec.name in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'"
            )]
        );
        // Unsupported syntax is not enforced.
        let props = json!({"name": {"type": "string", "pattern": "^\\p{Greek}+$"}});
        assert!(one_error(props, json!({"name": "abc"})).is_empty());
    }

    #[test]
    fn collects_every_error_not_only_the_first() {
        let schema = spec_schema(json!({
            "type": "object",
            "required": ["size", "mode"],
            "properties": {
                "size": {"type": "integer", "minimum": 1},
                "name": {"type": "string", "maxLength": 3},
                "color": {"type": "string", "enum": ["red"]},
                "mode": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
        }));
        let (_, errors, unknown) = run(
            &schema,
            json!({"spec": {"size": 0, "name": "toolong", "color": "blue", "tags": ["a", 1, false], "x": 1}}),
        );
        assert_eq!(unknown, [".spec.x"]);
        let fields: Vec<&str> = errors.iter().map(|e| e.1.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.size",
                "spec.name",
                "spec.color",
                "spec.tags[1]",
                "spec.tags[2]",
                "spec.mode"
            ]
        );
    }

    #[test]
    fn root_level_map_keys_keep_kube_openapi_leading_dot_in_the_message() {
        let schema = json!({"type": "object", "additionalProperties": {"type": "string"}});
        let (_, errors, _) = run(&schema, json!({"a": 1}));
        assert_eq!(
            errors,
            [cause(
                "FieldValueTypeInvalid",
                "a",
                "Invalid value: \"integer\": .a in body must be of type string: \"integer\""
            )]
        );
    }

    #[test]
    fn go_float_formatting() {
        let cases = [
            (0.0, "0"),
            (0.5, "0.5"),
            (-2.5, "-2.5"),
            (1.0, "1"),
            (123_456.0, "123456"),
            (1e6, "1e+06"),
            (1_234_567.0, "1.234567e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1e21, "1e+21"),
            (1e100, "1e+100"),
        ];
        for (f, want) in cases {
            assert_eq!(go_float(f), want, "{f}");
        }
        let cases = [
            (1.0, "1"),
            (1e6, "1000000"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (1e-7, "1e-7"),
            (1.5e-10, "1.5e-10"),
            (0.000001, "0.000001"),
        ];
        for (f, want) in cases {
            assert_eq!(go_json_float(f), want, "{f}");
        }
    }

    #[test]
    fn go_quoting_and_json() {
        assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(go_quote("\n\t\u{1}\u{7f}"), r#""\n\t\x01\x7f""#);
        assert_eq!(go_quote("é\u{a0}\u{200b}😀"), "\"é\\u00a0\\u200b😀\"");
        assert_eq!(
            go_json(&json!({"b": [1, 2.5, null], "a": "<&>"})),
            r#"{"a":"\u003c\u0026\u003e","b":[1,2.5,null]}"#
        );
        assert_eq!(bad_value(&json!([1, "x"])), r#"[1,"x"]"#);
    }

    #[test]
    fn json_integer_tolerance_matches_swag() {
        assert!(is_json_integer(3.0));
        assert!(is_json_integer(3.000_000_000_1));
        assert!(!is_json_integer(2.999));
        assert!(!is_json_integer(-2.5));
        assert!(!is_json_integer(1e20));
    }

    fn matches(pattern: &str, text: &str) -> bool {
        pattern::compile(pattern).unwrap().is_match(text)
    }

    #[test]
    fn regex_engine() {
        assert!(matches("abc", "xxabcxx"));
        assert!(!matches("^abc$", "xxabcxx"));
        assert!(matches("^a(b|cd)*e$", "abcdbe"));
        assert!(!matches("^a(b|cd)*e$", "abce"));
        assert!(matches("^[a-z]{2,3}$", "abc"));
        assert!(!matches("^[a-z]{2,3}$", "abcd"));
        assert!(matches("^[a-z]{2}$", "ab"));
        assert!(matches("^x{2,}$", "xxxx"));
        assert!(!matches("^x{2,}$", "x"));
        assert!(matches("^a{,2}$", "a{,2}"));
        assert!(matches(r"^\d+(\.\d+)?(ms|s|m|h)$", "1.5s"));
        assert!(!matches(r"^\d+(\.\d+)?(ms|s|m|h)$", "1.s"));
        assert!(matches(r"^[^\s]+$", "no-space"));
        assert!(!matches(r"^[^\s]+$", "a space"));
        assert!(matches(r"^[\w.-]+$", "a_b.c-d"));
        assert!(matches("^[]a]+$", "]a]"));
        assert!(matches("^[[:alpha:]]+$", "abcXYZ"));
        assert!(!matches("^[[:alpha:]]+$", "abc1"));
        assert!(matches("(?i)^hello$", "HeLLo"));
        assert!(matches("^(?i:ab)c$", "ABc"));
        assert!(!matches("^(?i:ab)c$", "ABC"));
        assert!(matches(r"\bword\b", "a word here"));
        assert!(!matches(r"\bword\b", "swordfish"));
        assert!(matches("^.+$", "any"));
        assert!(!matches("^.$", "\n"));
        assert!(matches("(?s)^.$", "\n"));
        assert!(matches("(?m)^b$", "a\nb\nc"));
        assert!(!matches("^b$", "a\nb\nc"));
        assert!(matches("^$", ""));
        assert!(matches(r"^\x41\x{42}$", "AB"));
        assert!(matches(r"^(?P<x>a)(?<y>b)$", "ab"));
        assert!(matches("^(a*)*$", "aaa"));
        assert!(matches(r"^\Qa.b\E$", "a.b"));
        assert!(!matches(r"^\Qa.b\E$", "axb"));
        assert!(matches("^ä+$", "ää"));
        for unsupported in [
            r"\p{L}", "(?=a)", r"(a)\1", "a**", "*a", "(a", "a)", "[a", "x{1001}", "[z-a]",
        ] {
            assert!(pattern::compile(unsupported).is_none(), "{unsupported}");
        }
    }
}
