//! Webhook request templates end to end (issue 20): `herald check` finds a broken template with
//! its path and line, a template that fails on an event dead-letters it and `herald dlq replay`
//! renders it again after the fix, `herald render` prints exactly what the receiver gets, and a
//! templated request is still signed and carries `ce-` headers only when asked.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::support::api_receiver::{ApiAnswer, ApiReceiver};
use crate::support::{Herald, Raw, id_of, sim, webhook_config, widget, widgets_crd};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// `herald <args>`: exit code, stdout, stderr.
fn herald(args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A receiver answering 204 to everything.
async fn accepting() -> ApiReceiver {
    ApiReceiver::start(|_, _| ApiAnswer::empty(204)).await
}

#[tokio::test]
async fn a_broken_template_fails_check_with_its_path_and_line() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "    template:\n      body: |\n        {\n          \"subject\": {{ subject | tojsn }}\n        }\n",
            "sinks[0].template.body: line 2: unknown filter \"tojsn\"",
        ),
        (
            "    template:\n      headers:\n        X-Object: \"{{ subject }\"\n",
            "sinks[0].template.headers.X-Object: line 1: syntax error",
        ),
        (
            "    template:\n      path: \"/x\\n{% if op %}\\n{{ op | nope }}{% endif %}\"\n",
            "sinks[0].template.path: line 3: unknown filter \"nope\"",
        ),
    ];
    for (template, expected) in cases {
        let config = webhook_config(
            &sim,
            dir.path(),
            &[("hook", "http://127.0.0.1:9/h", template)],
        );
        let path = dir.path().join("herald.yaml");
        std::fs::write(&path, &config).unwrap();
        let (code, _, stderr) = herald(&["check", "-c", path.to_str().unwrap()]);
        assert_eq!(code, Some(herald::exit_code::CONFIG_INVALID), "{stderr}");
        assert!(
            stderr.contains(expected),
            "expected {expected:?} in {stderr}"
        );
    }
}

#[tokio::test]
async fn a_render_failure_is_dead_lettered_and_replays_with_the_fixed_template() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let receiver = accepting().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "s3cret\n").unwrap();
    let url = format!("{}/hook", receiver.base);
    // `spec.owner.team` is there for `w-ok` only: the template breaks on `w-bad`.
    let broken_body = "{\"team\": {{ object.spec.owner.team | tojson }}}";
    let broken = webhook_config(
        &sim,
        dir.path(),
        &[(
            "hook",
            &url,
            &format!("    template:\n      body: |\n        {broken_body}\n"),
        )],
    ) + &format!(
        "  token: {{fromFile: {}}}\n",
        dir.path().join("token").display()
    );
    let mut herald_run = Herald::start(dir.path(), &broken);
    let cfg = herald_run.config.to_str().unwrap().to_owned();
    let ok = raw
        .post(
            WIDGETS,
            &widget("w-ok", json!({}), json!({"owner": {"team": "shop"}})),
        )
        .await
        .body;
    let bad = raw
        .post(WIDGETS, &widget("w-bad", json!({}), json!({})))
        .await
        .body;
    let first = receiver.wait_for(1, "w-ok delivered").await;
    assert_eq!(first[0].json(), json!({"team": "shop"}));
    // w-bad is dead-lettered with the render error, never sent, and herald keeps running.
    let list = || {
        let (code, out, stderr) = herald(&["dlq", "list", "-c", &cfg, "--sink", "hook", "--json"]);
        assert_eq!(code, Some(0), "{stderr}");
        serde_json::from_str::<Value>(&out).unwrap()
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let letters = loop {
        let letters = list();
        if letters.as_array().is_some_and(|a| a.len() == 1) {
            break letters;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no dead letter: {letters}; {}",
            herald_run.stderr_text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let letter = &letters[0];
    assert_eq!(letter["id"], id_of(&bad, "created"), "{letter}");
    assert_eq!(letter["code"], "render_failed", "{letter}");
    assert_eq!(letter["class"], "permanent", "{letter}");
    assert!(
        letter["error"]
            .as_str()
            .unwrap()
            .starts_with("template.body: line 1: undefined value"),
        "{letter}"
    );
    assert_eq!(
        receiver.received().len(),
        1,
        "the broken event was never sent"
    );
    assert_eq!(first[0].path, "/hook");
    assert!(id_of(&ok, "created").ends_with(":created"));

    // The fix: `dig` with a default. Reloaded, then the dead letter replayed: rendered anew.
    let fixed_body =
        "{\"team\": {{ object | dig('spec', 'owner', 'team', default='unowned') | tojson }}}";
    std::fs::write(&herald_run.config, broken.replace(broken_body, fixed_body)).unwrap();
    let (code, _, stderr) = herald(&["reload", "-c", &cfg]);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _, stderr) = herald(&["dlq", "replay", "-c", &cfg, "--sink", "hook", "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let got = receiver.wait_for(2, "the replayed letter").await;
    assert_eq!(got[1].json(), json!({"team": "unowned"}));
    assert_eq!(list(), json!([]));
    assert_eq!(herald_run.terminate().await, Some(0));
}

#[tokio::test]
async fn render_prints_byte_for_byte_what_the_receiver_gets() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let receiver = accepting().await;
    let dir = tempfile::tempdir().unwrap();
    let template = "    method: PUT\n    headers: {X-Tenant: shop}\n    template:\n      path: /objects/{{ namespace }}/{{ name }}\n      contentType: \"application/vnd.example+json; v={{ version }}\"\n      headers:\n        X-Op: \"{{ op }}\"\n        X-Kind: \"{{ kind | lower }}\"\n      body: |\n        {\"id\": {{ id | tojson }}, \"op\": \"{{ op }}\", \"size\": {{ object | dig('spec', 'size') | tojson }},\n         \"labels\": {{ object.metadata.labels | tojson }}, \"kind\": \"{{ kind }}\"}\n";
    let config = webhook_config(&sim, dir.path(), &[("hook", &receiver.base, template)]);
    let mut herald_run = Herald::start(dir.path(), &config);
    let created = raw
        .post(
            WIDGETS,
            &widget("w1", json!({"app": "shop"}), json!({"size": 3})),
        )
        .await
        .body;
    let got = receiver.wait_for(1, "the templated request").await;
    let received = &got[0];
    assert_eq!(received.method, "PUT");
    assert_eq!(received.path, "/objects/default/w1");

    // The object as the API returned it, through `herald render`.
    let object_file = dir.path().join("w1.yaml");
    std::fs::write(&object_file, serde_yaml_ng::to_string(&created).unwrap()).unwrap();
    let cfg = herald_run.config.to_str().unwrap().to_owned();
    let (code, out, stderr) = herald(&[
        "render",
        "-c",
        &cfg,
        "--sink",
        "hook",
        "--object",
        object_file.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let rendered: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rendered["method"], "PUT");
    assert_eq!(
        rendered["url"],
        format!("{}/objects/default/w1", receiver.base)
    );
    let body = rendered["body"].as_str().unwrap();
    assert_eq!(
        String::from_utf8(received.body.clone()).unwrap(),
        body,
        "byte for byte"
    );
    assert_eq!(
        received.json(),
        json!({"id": id_of(&created, "created"), "op": "created", "size": 3,
               "labels": {"app": "shop"}, "kind": "Widget"}),
    );
    let headers = rendered["headers"].as_array().unwrap();
    let names: Vec<&str> = headers
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "X-Tenant",
            "X-Kind",
            "X-Op",
            "content-type",
            "content-length"
        ]
    );
    for header in headers {
        let name = header["name"].as_str().unwrap().to_ascii_lowercase();
        assert_eq!(
            received.header(&name),
            header["value"].as_str(),
            "header {name}"
        );
    }
    assert_eq!(received.header("x-kind"), Some("widget"));
    assert_eq!(
        received.header("content-type"),
        Some("application/vnd.example+json; v=v1")
    );
    assert!(
        received.header("ce-id").is_none(),
        "no ce- headers unless asked"
    );

    // The text form: the request line, the headers, a blank line, the body.
    let (code, text, stderr) = herald(&[
        "render",
        "-c",
        &cfg,
        "--sink",
        "hook",
        "--object",
        object_file.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let (head, text_body) = text.split_once("\n\n").unwrap();
    assert!(
        head.starts_with(&format!(
            "PUT {}/objects/default/w1\nX-Tenant: shop\nX-Kind: widget\nX-Op: created\n",
            receiver.base
        )),
        "{head}"
    );
    let text_body: Value = serde_json::from_str(text_body).unwrap();
    assert_eq!(text_body["labels"], json!({"app": "shop"}));
    assert_eq!(herald_run.terminate().await, Some(0));
}

#[tokio::test]
async fn render_masks_secrets_and_names_a_failing_template() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let template = "    auth:\n      bearer: ${HERALD_TEST_TOKEN}\n    template:\n      secrets:\n        key: ${HERALD_TEST_KEY}\n      headers: {X-Key: \"k={{ secrets.key }}\"}\n      body: '{\"routing_key\": \"{{ secrets.key }}\", \"kind\": \"{{ object.spec.kind.name }}\"}'\n";
    let config = webhook_config(
        &sim,
        dir.path(),
        &[("hook", "http://127.0.0.1:9/h", template)],
    );
    let path = dir.path().join("herald.yaml");
    std::fs::write(&path, &config).unwrap();
    let object = dir.path().join("o.yaml");
    std::fs::write(
        &object,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: default, uid: u1, resourceVersion: '5'}\nspec: {kind: {name: big}}\n",
    )
    .unwrap();
    let render = |object: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
            .args([
                "render",
                "-c",
                path.to_str().unwrap(),
                "--sink",
                "hook",
                "--object",
                object,
                "--json",
            ])
            .env("HERALD_TEST_TOKEN", "t0ken-abc")
            .env("HERALD_TEST_KEY", "r0uting-key")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, stderr) = render(object.to_str().unwrap());
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        !out.contains("t0ken-abc") && !out.contains("r0uting-key"),
        "{out}"
    );
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["body"], r#"{"routing_key": "***", "kind": "big"}"#);
    let header = |name: &str| {
        doc["headers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["name"] == name)
            .map(|h| h["value"].clone())
    };
    assert_eq!(header("authorization"), Some(json!("Bearer ***")));
    assert_eq!(header("X-Key"), Some(json!("k=***")));

    // An object the template cannot render: exit 10 with the template's path and line.
    std::fs::write(
        &object,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: default, uid: u1, resourceVersion: '5'}\nspec: {}\n",
    )
    .unwrap();
    let (code, _, stderr) = render(object.to_str().unwrap());
    assert_eq!(code, Some(herald::exit_code::CONFIG_INVALID), "{stderr}");
    assert!(
        stderr.contains("render_failed: template.body: line 1: undefined value"),
        "{stderr}"
    );
}

#[tokio::test]
async fn templated_requests_are_signed_and_carry_ce_headers_only_when_asked() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let receiver = accepting().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("whsec"), SECRET).unwrap();
    let signing = format!(
        "    signing: {{secret: {{fromFile: {}}}}}\n",
        dir.path().join("whsec").display()
    );
    let config = webhook_config(
        &sim,
        dir.path(),
        &[
            (
                "plain",
                &format!("{}/plain", receiver.base),
                &format!(
                    "{signing}    template:\n      body: '{{{{ subject }}}}'\n      contentType: text/plain\n"
                ),
            ),
            (
                "ce",
                &format!("{}/ce", receiver.base),
                "    template:\n      ceHeaders: true\n      body: '{{ subject }}'\n",
            ),
        ],
    );
    let mut herald_run = Herald::start(dir.path(), &config);
    let created = raw
        .post(WIDGETS, &widget("w1", json!({}), json!({})))
        .await
        .body;
    let id = id_of(&created, "created");
    let got = receiver.wait_for(2, "both sinks").await;
    let plain = got.iter().find(|r| r.path == "/plain").unwrap();
    let ce = got.iter().find(|r| r.path == "/ce").unwrap();
    assert_eq!(plain.body, b"default/w1");
    assert_eq!(plain.header("content-type"), Some("text/plain"));
    assert!(plain.header("ce-id").is_none(), "{plain:?}");
    // The Standard Webhooks signature covers the templated body.
    let key = base64::engine::general_purpose::STANDARD
        .decode(&SECRET["whsec_".len()..])
        .unwrap();
    let ts = plain.header("webhook-timestamp").unwrap();
    assert_eq!(plain.header("webhook-id"), Some(id.as_str()));
    use hmac::{Hmac, KeyInit, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.default/w1").as_bytes());
    let expected = format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    );
    assert_eq!(plain.header("webhook-signature"), Some(expected.as_str()));
    // ceHeaders: the binary-mode attributes beside the templated body and its content type.
    assert_eq!(ce.body, b"default/w1");
    assert_eq!(ce.header("ce-id"), Some(id.as_str()));
    assert_eq!(ce.header("ce-type"), Some("dev.herald.resource.created"));
    assert_eq!(ce.header("ce-subject"), Some("default/w1"));
    assert_eq!(ce.header("content-type"), Some("application/json"));
    assert_eq!(herald_run.terminate().await, Some(0));
}
