//! [`SecretRef`]: how a configuration names a secret without containing it.

use std::borrow::Cow;
use std::env::VarError;
use std::fmt;
use std::path::{Path, PathBuf};

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// Looks up an environment variable; injectable so tests need not mutate the process
/// environment (which is `unsafe` in edition 2024 and racy across test threads).
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Result<String, VarError>;

/// `[A-Za-z_][A-Za-z0-9_]*`, the portable shell variable name, as `${NAME}` takes it.
#[must_use]
pub fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The message for anything that is not a reference; it never repeats the value, which may be
/// the very secret someone pasted in.
const NOT_A_REFERENCE: &str = "secrets must come from the environment (\"${VAR}\") or a file \
     ({fromFile: /path}), not a literal value";

/// Where a secret (a webhook token, a SASL password) comes from. Literal secrets are refused so
/// that configuration files can be committed, printed and attached to bug reports.
///
/// YAML: `token: ${WEBHOOK_TOKEN}` or `token: {fromFile: /var/run/secrets/herald/token}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretRef {
    /// `"${NAME}"`: the value of environment variable `NAME`, read by [`SecretRef::resolve`].
    Env(String),
    /// `{fromFile: /path}`: the contents of the file, one trailing newline removed.
    File(PathBuf),
}

/// Why [`SecretRef::resolve`] failed; every variant names the variable or file, never the value.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The environment variable is not set.
    #[error("environment variable {var:?} is not set")]
    EnvVarUnset {
        /// The variable's name.
        var: String,
    },
    /// The environment variable holds bytes that are not UTF-8.
    #[error("environment variable {var:?} is not valid UTF-8")]
    EnvVarNotUnicode {
        /// The variable's name.
        var: String,
    },
    /// The secret file could not be read.
    #[error("cannot read secret file {}", path.display())]
    FileReadFailed {
        /// The file.
        path: PathBuf,
        /// Why reading failed.
        #[source]
        source: std::io::Error,
    },
    /// The variable or file exists but holds nothing, which is never a usable secret.
    #[error("secret from {origin} is empty")]
    Empty {
        /// `environment variable "NAME"` or `file "/path"`.
        origin: String,
    },
}

impl SecretRef {
    /// The file a `{fromFile: …}` reference reads; `None` for an environment variable.
    #[must_use]
    pub fn file(&self) -> Option<&std::path::Path> {
        match self {
            Self::File(path) => Some(path),
            Self::Env(_) => None,
        }
    }

    /// Reads the secret now; call it at start-up so a missing secret fails `herald check`, not the
    /// first delivery.
    ///
    /// # Errors
    /// [`SecretError`] naming the variable or the file.
    pub fn resolve(&self) -> Result<String, SecretError> {
        self.resolve_with(&|name| std::env::var(name))
    }

    /// [`SecretRef::resolve`] with `env` in place of the process environment.
    ///
    /// # Errors
    /// [`SecretError`] naming the variable or the file.
    // The path is quoted (Debug) in the message, as users have always seen it.
    #[allow(clippy::unnecessary_debug_formatting)]
    pub fn resolve_with(&self, env: EnvLookup<'_>) -> Result<String, SecretError> {
        let (value, origin) = match self {
            Self::Env(var) => {
                let value = env(var).map_err(|e| match e {
                    VarError::NotPresent => SecretError::EnvVarUnset { var: var.clone() },
                    VarError::NotUnicode(_) => SecretError::EnvVarNotUnicode { var: var.clone() },
                })?;
                (value, format!("environment variable {var:?}"))
            }
            Self::File(path) => (read_secret_file(path)?, format!("file {path:?}")),
        };
        if value.is_empty() {
            return Err(SecretError::Empty { origin });
        }
        Ok(value)
    }
}

fn read_secret_file(path: &Path) -> Result<String, SecretError> {
    let mut text = std::fs::read_to_string(path).map_err(|source| SecretError::FileReadFailed {
        path: path.to_owned(),
        source,
    })?;
    // `echo token > file` and most editors add a newline that is never part of the secret.
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}

impl<'de> Deserialize<'de> for SecretRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SecretRefVisitor)
    }
}

struct SecretRefVisitor;

/// Every scalar that is not `${VAR}` gets the same message, without echoing the value.
macro_rules! refuse_scalar {
    ($($method:ident: $ty:ty),*) => {$(
        fn $method<E: de::Error>(self, _: $ty) -> Result<SecretRef, E> {
            Err(E::custom(NOT_A_REFERENCE))
        }
    )*};
}

impl<'de> Visitor<'de> for SecretRefVisitor {
    type Value = SecretRef;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"${VAR}\" or {fromFile: /path}")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<SecretRef, E> {
        v.strip_prefix("${")
            .and_then(|rest| rest.strip_suffix('}'))
            .filter(|name| is_var_name(name))
            .map(|name| SecretRef::Env(name.to_owned()))
            .ok_or_else(|| E::custom(NOT_A_REFERENCE))
    }

    refuse_scalar!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_f64: f64);

    fn visit_unit<E: de::Error>(self) -> Result<SecretRef, E> {
        Err(E::custom(NOT_A_REFERENCE))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<SecretRef, A::Error> {
        Err(de::Error::custom(NOT_A_REFERENCE))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<SecretRef, A::Error> {
        let file = FromFile::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(SecretRef::File(file.from_file))
    }
}

/// The `{fromFile: …}` form.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FromFile {
    from_file: PathBuf,
}

impl JsonSchema for SecretRef {
    fn schema_name() -> Cow<'static, str> {
        "SecretRef".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A secret reference: \"${VAR}\" (environment variable) or {fromFile: /path}.",
            "oneOf": [
                { "type": "string", "pattern": "^\\$\\{[A-Za-z_][A-Za-z0-9_]*\\}$" },
                {
                    "type": "object",
                    "properties": { "fromFile": { "type": "string" } },
                    "required": ["fromFile"],
                    "additionalProperties": false
                }
            ]
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::env::VarError;

    use super::*;

    #[test]
    fn secret_refs_come_from_env_or_file() {
        let env_ref: SecretRef = serde_yaml_ng::from_str("${WEBHOOK_TOKEN}").unwrap();
        assert_eq!(env_ref, SecretRef::Env("WEBHOOK_TOKEN".into()));
        let file_ref: SecretRef =
            serde_yaml_ng::from_str("{fromFile: /run/secrets/token}").unwrap();
        assert_eq!(file_ref, SecretRef::File("/run/secrets/token".into()));
    }

    #[test]
    fn literal_secrets_are_refused_without_repeating_them() {
        let message = "secrets must come from the environment (\"${VAR}\") or a file ({fromFile: /path}), not a literal value";
        for literal in [
            "hunter2",
            "Bearer ${TOKEN}",
            "${TOKEN",
            "${}",
            "123456",
            "true",
            "[a]",
            "~",
        ] {
            let err = serde_yaml_ng::from_str::<SecretRef>(literal)
                .unwrap_err()
                .to_string();
            assert!(err.starts_with(message), "{literal}: {err}");
            assert!(!err.contains("hunter2") && !err.contains("123456"), "{err}");
        }
        let extra = serde_yaml_ng::from_str::<SecretRef>("{fromFile: /x, value: y}")
            .unwrap_err()
            .to_string();
        assert!(
            extra.starts_with("unknown field `value`, expected `fromFile`"),
            "{extra}"
        );
    }

    #[test]
    fn secret_refs_resolve_and_name_their_origin() {
        let lookup = |name: &str| match name {
            "TOKEN" => Ok("s3cret".to_owned()),
            "EMPTY" => Ok(String::new()),
            _ => Err(VarError::NotPresent),
        };
        assert_eq!(
            SecretRef::Env("TOKEN".into())
                .resolve_with(&lookup)
                .unwrap(),
            "s3cret"
        );
        assert_eq!(
            SecretRef::Env("MISSING".into())
                .resolve_with(&lookup)
                .unwrap_err()
                .to_string(),
            "environment variable \"MISSING\" is not set"
        );
        assert_eq!(
            SecretRef::Env("EMPTY".into())
                .resolve_with(&lookup)
                .unwrap_err()
                .to_string(),
            "secret from environment variable \"EMPTY\" is empty"
        );

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cret\r\n").unwrap();
        assert_eq!(SecretRef::File(path.clone()).resolve().unwrap(), "s3cret");
        std::fs::write(&path, "\n").unwrap();
        assert_eq!(
            SecretRef::File(path.clone())
                .resolve()
                .unwrap_err()
                .to_string(),
            format!("secret from file {path:?} is empty")
        );
        let missing = dir.path().join("nope");
        let err = SecretRef::File(missing.clone()).resolve().unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("cannot read secret file {}", missing.display())
        );
        assert!(std::error::Error::source(&err).is_some());

        // The real environment, through the public entry point.
        let path_var = std::env::var("PATH").unwrap();
        assert_eq!(SecretRef::Env("PATH".into()).resolve().unwrap(), path_var);
    }
}
