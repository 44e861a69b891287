//! `${VAR}` expansion in path fields, so one file serves several environments
//! (`path: ${STATE_DIR}/journal`).

use std::env::VarError;
use std::path::PathBuf;

pub(crate) use herald_sink_core::config::{EnvLookup, is_var_name};

/// Expands every `${NAME}` in `text`; `$${` stands for a literal `${`, any other `$` is literal.
///
/// The error message names the variable, the caller prefixes the field path.
pub(crate) fn expand(text: &str, env: EnvLookup<'_>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let Some(end) = after.find('}') else {
                return Err(format!("unterminated \"${{\" in {text:?}"));
            };
            let name = &after[..end];
            if !is_var_name(name) {
                return Err(format!(
                    "invalid environment variable name {name:?} in {text:?} (expected letters, digits and _)"
                ));
            }
            match env(name) {
                Ok(value) if value.is_empty() => {
                    return Err(format!("environment variable {name:?} is empty"));
                }
                Ok(value) => out.push_str(&value),
                Err(VarError::NotPresent) => {
                    return Err(format!("environment variable {name:?} is not set"));
                }
                Err(VarError::NotUnicode(_)) => {
                    return Err(format!("environment variable {name:?} is not valid UTF-8"));
                }
            }
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Expands `path` in place; on failure returns the message and leaves `path` unchanged.
pub(crate) fn expand_path(path: &mut PathBuf, env: EnvLookup<'_>) -> Result<(), String> {
    // Paths come from YAML text, so they are always valid UTF-8.
    let Some(text) = path.to_str() else {
        return Ok(());
    };
    if text.contains('$') {
        *path = PathBuf::from(expand(text, env)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Result<String, VarError> {
        match name {
            "STATE" => Ok("/var/lib/herald".into()),
            "EMPTY" => Ok(String::new()),
            _ => Err(VarError::NotPresent),
        }
    }

    #[test]
    fn expands_variables_anywhere_in_the_text() {
        assert_eq!(
            expand("${STATE}/journal", &env),
            Ok("/var/lib/herald/journal".into())
        );
        assert_eq!(
            expand("a/${STATE}/b/${STATE}", &env),
            Ok("a//var/lib/herald/b//var/lib/herald".into())
        );
        assert_eq!(expand("plain/path", &env), Ok("plain/path".into()));
    }

    #[test]
    fn keeps_escaped_and_lone_dollars() {
        assert_eq!(expand("$${STATE}", &env), Ok("${STATE}".into()));
        assert_eq!(expand("cost$5/$HOME", &env), Ok("cost$5/$HOME".into()));
    }

    #[test]
    fn names_the_missing_variable() {
        assert_eq!(
            expand("${NOPE}/x", &env),
            Err(r#"environment variable "NOPE" is not set"#.into())
        );
        assert_eq!(
            expand("${EMPTY}/x", &env),
            Err(r#"environment variable "EMPTY" is empty"#.into())
        );
        assert_eq!(
            expand("${STATE/x", &env),
            Err(r#"unterminated "${" in "${STATE/x""#.into())
        );
        assert_eq!(
            expand("${1X}", &env),
            Err(r#"invalid environment variable name "1X" in "${1X}" (expected letters, digits and _)"#.into())
        );
    }
}
