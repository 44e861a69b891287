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
