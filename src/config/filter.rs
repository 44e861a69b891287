//! The filter keys of `resources[]` and `routes[]`: `when` (a CEL expression, [`When`]) and the
//! field lists of `changed` and `ignoreFields` ([`FieldPath`]).

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

pub use crate::event::filter::FieldPath;
use crate::event::filter::{CompileError, EvalError, Expression, Vars};

/// `onError`: what happens to a change when its `when` expression fails on it (a missing field, a
/// wrong type, a result that is not a boolean).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum OnError {
    /// The change is not emitted (or not sent to the route's sinks).
    #[default]
    Skip,
    /// The change is emitted as if the expression had said `true`.
    Emit,
}

/// A `when` key: a CEL expression over `object`, `oldObject`, `op`, `resync`, `namespace` and
/// `name`, written as a string or as `{expr: EXPR, onError: skip|emit}`.
///
/// It is compiled as it is read; validation reports a compile error with the key's path and the
/// position in the expression, so a loaded configuration only holds expressions that compiled.
#[derive(Clone)]
pub struct When {
    /// The expression as written.
    pub expr: String,
    /// What a failed evaluation means.
    pub on_error: OnError,
    compiled: Result<Expression, CompileError>,
}

impl When {
    /// A `when` with this expression and rule.
    pub fn new(expr: impl Into<String>, on_error: OnError) -> Self {
        let expr = expr.into();
        let compiled = Expression::compile(&expr);
        Self {
            expr,
            on_error,
            compiled,
        }
    }

    /// Why the expression does not compile, if it does not.
    pub fn compile_error(&self) -> Option<&CompileError> {
        self.compiled.as_ref().err()
    }

    /// Whether the expression reads `oldObject`.
    pub fn uses_old_object(&self) -> bool {
        self.compiled
            .as_ref()
            .is_ok_and(Expression::uses_old_object)
    }

    /// Whether the expression reads `object`.
    pub fn uses_object(&self) -> bool {
        self.compiled.as_ref().is_ok_and(Expression::uses_object)
    }

    /// Whether the expression may read a field under `status`.
    pub fn reads_status(&self) -> bool {
        self.compiled.as_ref().is_ok_and(Expression::reads_status)
    }

    /// Evaluates the expression on one change.
    ///
    /// # Errors
    /// The evaluation failed or gave no boolean (and, for a configuration that skipped validation,
    /// the expression did not compile).
    pub fn evaluate(&self, vars: &Vars<'_>) -> Result<bool, EvalError> {
        match &self.compiled {
            Ok(e) => e.evaluate(vars),
            Err(e) => Err(EvalError::from(e.clone())),
        }
    }
}

impl fmt::Debug for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("When")
            .field("expr", &self.expr)
            .field("on_error", &self.on_error)
            .finish()
    }
}

/// Two `when` keys are the same when written the same.
impl PartialEq for When {
    fn eq(&self, other: &Self) -> bool {
        self.expr == other.expr && self.on_error == other.on_error
    }
}

impl Eq for When {}

impl<'de> Deserialize<'de> for When {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(WhenVisitor)
    }
}

struct WhenVisitor;

/// The `{expr, onError}` form.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WhenMap {
    expr: String,
    #[serde(default)]
    on_error: OnError,
}

impl<'de> Visitor<'de> for WhenVisitor {
    type Value = When;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a CEL expression, or {expr: EXPRESSION, onError: skip|emit}")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<When, E> {
        Ok(When::new(v, OnError::default()))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<When, A::Error> {
        let m = WhenMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(When::new(m.expr, m.on_error))
    }
}

impl JsonSchema for When {
    fn schema_name() -> Cow<'static, str> {
        "When".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A CEL expression over object, oldObject, op, resync, namespace, name; or {expr, onError}.",
            "oneOf": [
                { "type": "string" },
                {
                    "type": "object",
                    "properties": {
                        "expr": { "type": "string", "description": "The CEL expression." },
                        "onError": { "enum": ["skip", "emit"], "description": "What a failed evaluation means. Default `skip`." }
                    },
                    "required": ["expr"],
                    "additionalProperties": false
                }
            ]
        })
    }
}

impl<'de> Deserialize<'de> for FieldPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        FieldPath::parse(&s).map_err(de::Error::custom)
    }
}

impl JsonSchema for FieldPath {
    fn schema_name() -> Cow<'static, str> {
        "FieldPath".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A field: dotted keys (status.phase) or a JSON pointer (/metadata/annotations/example.com~1owner).",
            "type": "string"
        })
    }
}
