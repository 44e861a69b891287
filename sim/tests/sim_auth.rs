//! ServiceAccount tokens (TokenRequest) and the RBAC authorizer, over HTTP and through kubectl:
//! what a token's user may do, and the 401/403 answers worded as kube-apiserver's.

use serde_json::{Value, json};

use crate::support::{Kubectl, Raw, kubectl_path, sim, widgets_crd};
use herald_sim::DenyRule;

/// One request with `token` as the bearer; returns (status, body).
async fn as_token(
    raw: &Raw,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut req = raw
        .http
        .request(method, format!("{}{path}", raw.base))
        .bearer_auth(token);
    if let Some(b) = body {
        req = req.json(b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn get(raw: &Raw, token: &str, path: &str) -> (u16, Value) {
    as_token(raw, token, reqwest::Method::GET, path, None).await
}

async fn token_for(raw: &Raw, ns: &str, sa: &str) -> String {
    let r = raw
        .post(
            &format!("/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token"),
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["kind"], "TokenRequest");
    assert_eq!(r.body["spec"]["expirationSeconds"], 3600);
    r.body["status"]["token"].as_str().unwrap().to_string()
}

async fn setup(raw: &Raw) {
    raw.install_crd(&widgets_crd()).await;
    for ns in ["herald", "other"] {
        let r = raw
            .post(
                "/api/v1/namespaces",
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let r = raw
        .post(
            "/api/v1/namespaces/herald/serviceaccounts",
            &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "herald"}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
}

const USER: &str = "system:serviceaccount:herald:herald";

#[tokio::test]
async fn a_service_account_token_is_refused_what_rbac_does_not_grant() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    setup(&raw).await;

    // No such ServiceAccount: 404, as the real server answers.
    let r = raw
        .post(
            "/api/v1/namespaces/herald/serviceaccounts/nobody/token",
            &json!({"spec": {}}),
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = raw
        .post(
            "/api/v1/namespaces/herald/serviceaccounts/herald/token",
            &json!({"spec": {"expirationSeconds": 60}}),
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.body);

    let token = token_for(&raw, "herald", "herald").await;

    // Unknown token: 401 Unauthorized, as kube-apiserver answers.
    let (code, body) = get(&raw, "not-a-token", "/api").await;
    assert_eq!(code, 401, "{body}");
    assert_eq!(body["reason"], "Unauthorized");
    assert_eq!(body["message"], "Unauthorized");

    // Discovery and /version through the default system:discovery binding.
    for path in [
        "/api",
        "/apis",
        "/api/v1",
        "/apis/example.com/v1",
        "/version",
    ] {
        let (code, body) = get(&raw, &token, path).await;
        assert_eq!(code, 200, "{path}: {body}");
    }
    // Nothing else.
    let (code, body) = get(&raw, &token, "/apis/example.com/v1/widgets").await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        format!(
            "widgets.example.com is forbidden: User \"{USER}\" cannot list resource \"widgets\" in API group \"example.com\" at the cluster scope"
        )
    );
    assert_eq!(body["reason"], "Forbidden");
    assert_eq!(
        body["details"],
        json!({"group": "example.com", "kind": "widgets"})
    );
    let (code, body) = get(&raw, &token, "/api/v1/namespaces/herald/secrets/foo").await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        format!(
            "secrets \"foo\" is forbidden: User \"{USER}\" cannot get resource \"secrets\" in API group \"\" in the namespace \"herald\""
        )
    );
    assert_eq!(body["details"], json!({"kind": "secrets", "name": "foo"}));

    // A Role granting list (not watch) on widgets, bound to the ServiceAccount in "herald".
    let r = raw
        .post(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/herald/roles",
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "read"}, "rules": [
                {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "list"]},
                {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["mine"], "verbs": ["get"]},
            ]}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = raw
        .post(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/herald/rolebindings",
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "read"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read"},
                    "subjects": [{"kind": "ServiceAccount", "name": "herald"}]}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let (code, body) = get(
        &raw,
        &token,
        "/apis/example.com/v1/namespaces/herald/widgets",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = get(
        &raw,
        &token,
        "/apis/example.com/v1/namespaces/herald/widgets?watch=true",
    )
    .await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        format!(
            "widgets.example.com is forbidden: User \"{USER}\" cannot watch resource \"widgets\" in API group \"example.com\" in the namespace \"herald\""
        )
    );
    // The grant is namespaced: not in "other", not cluster-wide.
    let (code, _) = get(
        &raw,
        &token,
        "/apis/example.com/v1/namespaces/other/widgets",
    )
    .await;
    assert_eq!(code, 403);
    let (code, _) = get(&raw, &token, "/apis/example.com/v1/widgets").await;
    assert_eq!(code, 403);
    // resourceNames: the named Secret only (404: allowed, absent), and no list.
    let (code, body) = get(&raw, &token, "/api/v1/namespaces/herald/secrets/mine").await;
    assert_eq!(code, 404, "{body}");
    let (code, _) = get(&raw, &token, "/api/v1/namespaces/herald/secrets/other").await;
    assert_eq!(code, 403);
    let (code, _) = get(&raw, &token, "/api/v1/namespaces/herald/secrets").await;
    assert_eq!(code, 403);
    // Status subresource is its own resource.
    let (code, body) = get(
        &raw,
        &token,
        "/apis/example.com/v1/namespaces/herald/widgets/a/status",
    )
    .await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("cannot get resource \"widgets/status\""),
        "{body}"
    );

    // A ClusterRole through a ClusterRoleBinding to a Group: watch everywhere.
    let r = raw
        .post(
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "watch-widgets"}, "rules": [
                {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["watch", "list"]}]}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = raw
        .post(
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "watch-widgets"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "watch-widgets"},
                    "subjects": [{"kind": "Group", "name": "system:serviceaccounts:herald"}]}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let (code, body) = get(&raw, &token, "/apis/example.com/v1/widgets").await;
    assert_eq!(code, 200, "{body}");

    // A RoleBinding to a missing ClusterRole: the refusal says so, as RBAC's does.
    let r = raw
        .post(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/other/rolebindings",
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "dangling"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gone"},
                    "subjects": [{"kind": "User", "name": USER}]}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let (code, body) = get(&raw, &token, "/api/v1/namespaces/other/configmaps").await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        format!(
            "configmaps is forbidden: User \"{USER}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"other\": RBAC: clusterrole.rbac.authorization.k8s.io \"gone\" not found"
        )
    );

    // SelfSubjectAccessReview and SelfSubjectRulesReview answer from the same rules.
    let review = |verb: &str, ns: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
               "spec": {"resourceAttributes": {"group": "example.com", "resource": "widgets", "verb": verb, "namespace": ns}}})
    };
    for (verb, ns, allowed) in [
        ("get", "herald", true),
        ("get", "other", false),
        ("watch", "other", true),
        ("delete", "herald", false),
    ] {
        let (code, body) = as_token(
            &raw,
            &token,
            reqwest::Method::POST,
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            Some(&review(verb, ns)),
        )
        .await;
        assert_eq!(code, 201, "{body}");
        assert_eq!(body["status"]["allowed"], allowed, "{verb} in {ns}: {body}");
    }
    let (code, body) = as_token(
        &raw,
        &token,
        reqwest::Method::POST,
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        Some(&json!({"spec": {"namespace": "herald"}})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let rules = body["status"]["resourceRules"].as_array().unwrap();
    assert!(
        rules.contains(&json!({"verbs": ["get", "list"], "apiGroups": ["example.com"], "resources": ["widgets"]})),
        "{body}"
    );
    assert!(
        rules.contains(&json!({"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["mine"]})),
        "{body}"
    );
    assert!(
        body["status"]["nonResourceRules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["nonResourceURLs"]
                .as_array()
                .unwrap()
                .contains(&json!("/apis/*"))),
        "{body}"
    );

    // The deny fault still refuses beside the authorizer, naming the token's user.
    sim.deny(DenyRule {
        verb: Some("list".into()),
        group: Some("example.com".into()),
        resource: Some("widgets".into()),
        namespace: None,
    });
    let (code, body) = get(
        &raw,
        &token,
        "/apis/example.com/v1/namespaces/herald/widgets",
    )
    .await;
    assert_eq!(code, 403, "{body}");
    assert!(body["message"].as_str().unwrap().contains(USER), "{body}");

    // Requests without a token keep the all-powerful identity.
    let r = raw.get("/api/v1/namespaces/herald/secrets").await;
    assert_eq!(r.status, 200, "{}", r.body);

    // Deleting the ServiceAccount invalidates its tokens.
    let r = raw
        .delete("/api/v1/namespaces/herald/serviceaccounts/herald")
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let (code, body) = get(&raw, &token, "/api").await;
    assert_eq!(code, 401, "{body}");
    sim.shutdown().await;
}

/// One GET with `Impersonate-User: as` (and `token` as the bearer, when given); returns (status, body).
async fn get_as(raw: &Raw, token: Option<&str>, as_user: &str, path: &str) -> (u16, Value) {
    let mut req = raw
        .http
        .get(format!("{}{path}", raw.base))
        .header("Impersonate-User", as_user);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn impersonation_acts_as_the_user_and_needs_the_impersonate_verb() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    setup(&raw).await;
    let token = token_for(&raw, "herald", "herald").await;

    // The all-powerful identity acting as the ServiceAccount (kubectl --as) gets its refusals.
    let (code, body) = get_as(&raw, None, USER, "/api/v1/namespaces/herald/secrets").await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        format!(
            "secrets is forbidden: User \"{USER}\" cannot list resource \"secrets\" in API group \"\" in the namespace \"herald\""
        )
    );
    // And its grants: discovery through system:authenticated.
    let (code, body) = get_as(&raw, None, USER, "/api/v1").await;
    assert_eq!(code, 200, "{body}");

    // A token's user may not impersonate without the impersonate verb.
    let (code, body) = get_as(&raw, Some(&token), "jane", "/api/v1").await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        format!(
            "users \"jane\" is forbidden: User \"{USER}\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        )
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn kubectl_creates_a_token_and_asks_can_i_with_it() {
    let Some(bin) = kubectl_path() else { return };
    // HTTPS: client-go sends a kubeconfig's (or --token's) credentials over TLS only.
    let sim = crate::support::sim_with(herald_sim::SimConfig::default().tls(true)).await;
    let kubectl = Kubectl::new(bin, sim.kubeconfig_path());
    kubectl
        .ok_with_stdin(&["apply", "-f", "-"], &widgets_crd().to_string())
        .await;
    kubectl
        .ok_with_stdin(
            &["apply", "-f", "-"],
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: herald}\n---\n\
             apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: herald, namespace: herald}\n",
        )
        .await;
    let (ok, token, err) = kubectl
        .run(&["create", "token", "herald", "-n", "herald"])
        .await;
    assert!(ok, "kubectl create token: {err}");
    let token = token.trim().to_string();
    assert!(!token.is_empty());
    kubectl
        .ok_with_stdin(
            &["apply", "-f", "-"],
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: widgets}\n\
             rules:\n- {apiGroups: [example.com], resources: [widgets], verbs: [list]}\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: widgets, namespace: herald}\n\
             roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: widgets}\n\
             subjects:\n- {kind: ServiceAccount, name: herald, namespace: herald}\n",
        )
        .await;
    let can_i = |args: &[&str]| {
        let mut a = vec!["auth", "can-i", "--token", token.as_str()];
        a.extend_from_slice(args);
        a.iter().map(|s| (*s).to_string()).collect::<Vec<_>>()
    };
    let run = |args: Vec<String>| {
        let kubectl = &kubectl;
        async move {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            kubectl.run(&refs).await
        }
    };
    let (_, out, err) = run(can_i(&["list", "widgets.example.com", "-n", "herald"])).await;
    assert_eq!(out.trim(), "yes", "{err}");
    let (ok, out, _) = run(can_i(&["watch", "widgets.example.com", "-n", "herald"])).await;
    assert_eq!((ok, out.trim()), (false, "no"));
    let (ok, out, _) = run(can_i(&["list", "widgets.example.com", "-n", "other"])).await;
    assert_eq!((ok, out.trim()), (false, "no"));
    // `--as` instead of the token: the same answers, as a cluster admin checking a role sees them.
    let (_, out, err) = kubectl
        .run(&[
            "auth",
            "can-i",
            "list",
            "widgets.example.com",
            "-n",
            "herald",
            "--as",
            USER,
        ])
        .await;
    assert_eq!(out.trim(), "yes", "{err}");
    let (ok, out, _) = kubectl
        .run(&[
            "auth",
            "can-i",
            "watch",
            "widgets.example.com",
            "-n",
            "herald",
            "--as",
            USER,
        ])
        .await;
    assert_eq!((ok, out.trim()), (false, "no"));
    let (_, out, err) = run(can_i(&["--list", "-n", "herald"])).await;
    let line = out
        .lines()
        .find(|l| l.starts_with("widgets.example.com"))
        .unwrap_or_else(|| panic!("widgets in can-i --list:\n{out}\n{err}"));
    assert!(line.contains("[list]"), "{line}");
    let (ok, out, err) = kubectl
        .run(&["auth", "whoami", "-o", "json", "--token", &token])
        .await;
    assert!(ok, "{err}");
    let me: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(me["status"]["userInfo"]["username"], USER);
    assert_eq!(
        me["status"]["userInfo"]["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:herald",
            "system:authenticated"
        ])
    );
    // kubectl's own request with the token is refused with the real server's words.
    let (ok, _, err) = kubectl
        .run(&["get", "secrets", "-n", "herald", "--token", &token])
        .await;
    assert!(!ok);
    assert!(
        err.contains(&format!(
            "secrets is forbidden: User \"{USER}\" cannot list resource \"secrets\" in API group \"\" in the namespace \"herald\""
        )),
        "{err}"
    );
    sim.shutdown().await;
}
