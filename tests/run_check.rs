//! `herald check`: offline validation, and `--connect` against the simulator (discovery, RBAC, sinks).

use herald_sim::DenyRule;

use crate::support::{Raw, WIDGETS_RESOURCE, herald_config, sim, widgets_crd};

async fn check(
    config: &str,
    dir: &std::path::Path,
    extra: &[&str],
) -> (Option<i32>, String, String) {
    let path = dir.join("check.yaml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_herald"));
    cmd.args(["check", "-c"]).arg(&path).args(extra);
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn check_validates_offline_and_against_the_cluster() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(&sim, dir.path(), WIDGETS_RESOURCE);

    let (code, stdout, _) = check(&config, dir.path(), &["--json"]).await;
    assert_eq!(code, Some(herald::exit_code::OK));
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (doc["ok"].as_bool(), doc["resources"].as_u64()),
        (Some(true), Some(1))
    );

    let (code, _, stderr) = check(&config, dir.path(), &["--connect"]).await;
    assert_eq!(
        code,
        Some(herald::exit_code::HEALTHCHECK_FAILED),
        "{stderr}"
    );
    assert!(
        stderr.contains(r#"resources[0].kind: unknown kind "Widget" in group example.com"#),
        "{stderr}"
    );

    Raw::new(&sim).install_crd(&widgets_crd()).await;
    let (code, stdout, stderr) = check(&config, dir.path(), &["--connect"]).await;
    assert_eq!(code, Some(herald::exit_code::OK), "{stderr}");
    assert!(stdout.contains("OK"));

    sim.deny(DenyRule {
        verb: Some("watch".into()),
        resource: Some("widgets".into()),
        ..DenyRule::default()
    });
    let (code, _, stderr) = check(&config, dir.path(), &["--connect"]).await;
    assert_eq!(code, Some(herald::exit_code::HEALTHCHECK_FAILED));
    assert!(
        stderr.contains("herald may not watch widgets.example.com/v1"),
        "{stderr}"
    );
}

/// Runs `herald <command> -c <config>` with `HERALD_TEST_UNSET` certainly unset; the exit code and
/// stderr.
fn herald_on(command: &str, dir: &std::path::Path, config: &str) -> (Option<i32>, String) {
    let path = dir.join(format!("{command}.yaml"));
    std::fs::write(&path, config).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args([command, "-c"])
        .arg(&path)
        .env_remove("HERALD_TEST_UNSET")
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An embedded-cluster configuration with `sinks` (YAML list items) and `admin` (a section).
fn offline_config(sinks: &str, extra: &str) -> String {
    format!(
        "cluster:\n  embedded:\nresources:\n  - {{group: example.com, kind: Widget}}\nsinks:\n{sinks}journal:\n  path: ./journal\n{extra}"
    )
}

#[test]
fn check_and_run_resolve_every_secret_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing-secret");
    let config = offline_config(
        &format!(
            "  - {{name: archive, type: file, path: events.jsonl}}\n  - {{name: hook, type: webhook, url: 'http://127.0.0.1:9/x', auth: {{bearer: '${{HERALD_TEST_UNSET}}'}}}}\n  - {{name: signed, type: webhook, url: 'http://127.0.0.1:9/y', signing: {{secret: {{fromFile: '{}'}}}}}}\n",
            missing.display()
        ),
        "admin:\n  listen: 127.0.0.1:0\n",
    );
    let unset = r#"sinks[1].auth.bearer: environment variable "HERALD_TEST_UNSET" is not set"#;
    let unreadable = format!(
        "sinks[2].signing.secret: cannot read secret file {}: No such file or directory",
        missing.display()
    );
    for command in ["check", "run"] {
        let (code, stderr) = herald_on(command, dir.path(), &config);
        assert_eq!(
            code,
            Some(herald::exit_code::CONFIG_INVALID),
            "{command}: {stderr}"
        );
        assert!(stderr.contains(unset), "{command}: {stderr}");
        assert!(stderr.contains(&unreadable), "{command}: {stderr}");
        assert!(!stderr.contains("health check"), "{command}: {stderr}");
    }
}

#[test]
fn a_missing_admin_token_is_one_clear_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = offline_config(
        "  - {name: archive, type: file, path: events.jsonl}\n  - {name: copy, type: file, path: copy.jsonl}\n",
        "admin:\n  listen: 127.0.0.1:0\n  token: ${HERALD_TEST_UNSET}\n",
    );
    let message = r#"admin.token: environment variable "HERALD_TEST_UNSET" is not set"#;
    for command in ["check", "run"] {
        let (code, stderr) = herald_on(command, dir.path(), &config);
        assert_eq!(
            code,
            Some(herald::exit_code::CONFIG_INVALID),
            "{command}: {stderr}"
        );
        assert_eq!(stderr.matches(message).count(), 1, "{command}: {stderr}");
        assert!(
            !stderr.contains("loop ended unexpectedly"),
            "{command}: {stderr}"
        );
    }
}

#[test]
fn check_refuses_absurd_durations_and_one_file_under_two_names() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = herald_on(
        "check",
        dir.path(),
        &offline_config(
            "  - {name: archive, type: file, path: x.jsonl}\n  - {name: copy, type: file, path: ./x.jsonl}\n",
            "",
        ),
    );
    assert_eq!(code, Some(herald::exit_code::CONFIG_INVALID), "{stderr}");
    assert!(
        stderr.contains(r#"sinks[1].path: "./x.jsonl" is the same file as "x.jsonl", the path of sinks[0]; two sinks cannot write one file"#),
        "{stderr}"
    );
    let (code, stderr) = herald_on(
        "check",
        dir.path(),
        &offline_config(
            "  - {name: archive, type: file, path: x.jsonl}\n",
            "  flushInterval: 100000000000days\n",
        ),
    );
    assert_eq!(code, Some(herald::exit_code::CONFIG_INVALID), "{stderr}");
    assert!(
        stderr.contains("journal.flushInterval: must be at most 10s"),
        "{stderr}"
    );
}
