//! `${VAR}` expansion in path fields and in `admin.listen`, so one file serves several
//! environments (`path: ${STATE_DIR}/journal`, `listen: "${POD_IP}:9464"` in a pod).

use std::env::VarError;
use std::net::{Ipv6Addr, SocketAddr};
use std::path::PathBuf;

pub(crate) use herald_sink_core::config::{EnvLookup, is_var_name};

/// Expands every `${NAME}` in `text`; `$${` stands for a literal `${`, any other `$` is literal.
///
/// The error message names the variable, the caller prefixes the field path.
pub(crate) fn expand(text: &str, env: EnvLookup<'_>) -> Result<String, String> {
    expand_with(text, env, false)
}

/// [`expand`], where `bracket_ipv6` puts a value that is a bare IPv6 address between brackets
/// unless the text already does (`${POD_IP}:9464` with `fd00::5` gives `[fd00::5]:9464`).
fn expand_with(text: &str, env: EnvLookup<'_>, bracket_ipv6: bool) -> Result<String, String> {
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
                Ok(value)
                    if bracket_ipv6 && !out.ends_with('[') && value.parse::<Ipv6Addr>().is_ok() =>
                {
                    out.push('[');
                    out.push_str(&value);
                    out.push(']');
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

/// Expands a socket address (`admin.listen`) and parses it. The downward API gives a pod's IP
/// bare, so an IPv6 value is bracketed before its `:port` (see [`expand_with`]).
///
/// The error message quotes the text and what it expanded to; the caller prefixes the field path.
pub(crate) fn expand_socket_addr(text: &str, env: EnvLookup<'_>) -> Result<SocketAddr, String> {
    let expanded = expand_with(text, env, true)?;
    expanded.parse().map_err(|_| {
        format!(
            "{text:?} expands to {expanded:?}, which is not an IP address and port (like 10.0.0.7:9464 or [fd00::7]:9464)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Result<String, VarError> {
        match name {
            "STATE" => Ok("/var/lib/herald".into()),
            "IP4" => Ok("10.1.2.3".into()),
            "IP6" => Ok("fd00::5".into()),
            "HOST" => Ok("herald.local".into()),
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

    #[test]
    fn socket_addresses_bracket_a_bare_ipv6_value() {
        assert_eq!(
            expand_socket_addr("${IP4}:9464", &env).map(|a| a.to_string()),
            Ok("10.1.2.3:9464".into())
        );
        assert_eq!(
            expand_socket_addr("${IP6}:9464", &env).map(|a| a.to_string()),
            Ok("[fd00::5]:9464".into())
        );
        // Brackets written in the file are not doubled.
        assert_eq!(
            expand_socket_addr("[${IP6}]:9464", &env).map(|a| a.to_string()),
            Ok("[fd00::5]:9464".into())
        );
        // Path fields never bracket.
        assert_eq!(expand("${IP6}:9464", &env), Ok("fd00::5:9464".into()));
    }

    #[test]
    fn socket_addresses_that_do_not_parse_quote_the_expansion() {
        assert_eq!(
            expand_socket_addr("${HOST}:9464", &env),
            Err(r#""${HOST}:9464" expands to "herald.local:9464", which is not an IP address and port (like 10.0.0.7:9464 or [fd00::7]:9464)"#.into())
        );
        assert_eq!(
            expand_socket_addr("${IP6}", &env),
            Err(r#""${IP6}" expands to "[fd00::5]", which is not an IP address and port (like 10.0.0.7:9464 or [fd00::7]:9464)"#.into())
        );
        assert_eq!(
            expand_socket_addr("${NOPE}:9464", &env),
            Err(r#"environment variable "NOPE" is not set"#.into())
        );
    }
}
