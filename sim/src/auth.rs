//! Authentication and authorization as kube-apiserver does them for ServiceAccount tokens: the
//! TokenRequest subresource issues opaque bearer tokens, a request carrying one is the ServiceAccount's
//! user, and the RBAC authorizer decides from the Roles, ClusterRoles and bindings in the store.
//!
//! A request without a token (or with the simulator's own kubeconfig token) keeps the all-powerful
//! identity every existing client relies on: the simulator is a test double first.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use rand::Rng;
use serde_json::{Value, json};

use super::resource::{GroupResource, ObjectKey};
use super::status::ApiError;
use super::store::State;

/// The token the simulator's own kubeconfig carries: it stays the all-powerful identity.
pub(crate) const ADMIN_TOKEN: &str = "herald-sim";

const RBAC: &str = "rbac.authorization.k8s.io";

/// kube-apiserver's default `expirationSeconds` of a TokenRequest (one hour).
pub(crate) const DEFAULT_EXPIRATION: u64 = 3600;
/// The shortest `expirationSeconds` kube-apiserver accepts (ten minutes).
pub(crate) const MIN_EXPIRATION: u64 = 600;

/// Who a request is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Identity {
    /// No token: may do anything, as before authentication existed.
    Admin,
    /// A ServiceAccount authenticated by a token.
    User(User),
}

/// An authenticated user: name and groups.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct User {
    pub(crate) name: String,
    pub(crate) groups: Vec<String>,
}

impl User {
    fn service_account(namespace: &str, name: &str) -> Self {
        Self {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }
}

/// One issued token: whose it is and until when it is good.
#[derive(Debug, Clone)]
struct Issued {
    namespace: String,
    name: String,
    uid: String,
    expires: SystemTime,
}

/// The tokens issued since start (in memory only, as bound tokens are not stored by the real server).
#[derive(Debug, Default)]
pub(crate) struct Tokens {
    issued: Mutex<HashMap<String, Issued>>,
}

impl Tokens {
    /// Issues a token for the ServiceAccount `namespace/name` whose uid is `uid`.
    pub(crate) fn issue(&self, namespace: &str, name: &str, uid: &str, ttl: Duration) -> String {
        let mut bytes = [0u8; 32];
        rand::rng().fill(&mut bytes);
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let issued = Issued {
            namespace: namespace.into(),
            name: name.into(),
            uid: uid.into(),
            expires: SystemTime::now() + ttl,
        };
        lock(&self.issued).insert(token.clone(), issued);
        token
    }

    /// The user a bearer token authenticates as at `now`, or `None` (401) when the token is unknown,
    /// expired, or its ServiceAccount is gone (deleted, or deleted and re-created: another uid).
    fn authenticate(&self, state: &State, token: &str, now: SystemTime) -> Option<User> {
        let mut issued = lock(&self.issued);
        let t = issued.get(token)?.clone();
        let sa = state.get(
            &GroupResource::new("", "serviceaccounts"),
            &ObjectKey::new(&t.namespace, &t.name),
        );
        let alive = sa
            .is_some_and(|sa| sa.pointer("/metadata/uid").and_then(Value::as_str) == Some(&t.uid));
        if now >= t.expires || !alive {
            issued.remove(token);
            return None;
        }
        Some(User::service_account(&t.namespace, &t.name))
    }

    /// Who the `Authorization` header value (if any) says the request is; an error is the 401.
    pub(crate) fn identify(
        &self,
        state: &State,
        authorization: Option<&str>,
    ) -> Result<Identity, ApiError> {
        let token = authorization.and_then(|h| {
            let (scheme, token) = h.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
        match token {
            None | Some("") | Some(ADMIN_TOKEN) => Ok(Identity::Admin),
            Some(t) => self
                .authenticate(state, t, SystemTime::now())
                .map(Identity::User)
                .ok_or_else(|| ApiError::custom(401, "Unauthorized", "Unauthorized")),
        }
    }
}

/// What `Impersonate-User` and `Impersonate-Group` headers (kubectl `--as`, `--as-group`) ask for,
/// as kube-apiserver's impersonation filter reads them: the user to act as, with the groups it gets,
/// and the `impersonate` checks the requester must pass (none for the all-powerful identity).
/// `None` when no user is impersonated (groups alone are ignored here; the real server refuses them).
pub(crate) fn impersonation(
    user: Option<&str>,
    groups: &[&str],
) -> Option<(User, Vec<Attributes>)> {
    let name = user.filter(|u| !u.is_empty())?;
    let check = |resource: &str, namespace: &str, name: &str| Attributes::Resource {
        verb: "impersonate".into(),
        group: String::new(),
        resource: resource.into(),
        subresource: String::new(),
        namespace: namespace.into(),
        name: name.into(),
    };
    let mut checks = Vec::new();
    let mut user_groups: Vec<String> = Vec::new();
    let service_account = name
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .filter(|(ns, sa)| !ns.is_empty() && !sa.is_empty() && !sa.contains(':'));
    match service_account {
        Some((ns, sa)) => {
            checks.push(check("serviceaccounts", ns, sa));
            if groups.is_empty() {
                // A ServiceAccount's groups are a fixed mapping: given when none are asked for.
                user_groups = vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{ns}"),
                ];
            }
        }
        None => checks.push(check("users", "", name)),
    }
    for g in groups {
        checks.push(check("groups", "", g));
        user_groups.push((*g).to_string());
    }
    if name != "system:anonymous"
        && !user_groups
            .iter()
            .any(|g| g == "system:authenticated" || g == "system:unauthenticated")
    {
        user_groups.push("system:authenticated".into());
    }
    Some((
        User {
            name: name.to_string(),
            groups: user_groups,
        },
        checks,
    ))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A map of plain values: a panic cannot leave one half-written.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a request asks to do, as kube-apiserver's `RequestInfoFactory` reads it from the path.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Attributes {
    /// A request for a resource (`/api/v1/...` or `/apis/g/v/...` with a resource).
    Resource {
        verb: String,
        group: String,
        resource: String,
        subresource: String,
        namespace: String,
        name: String,
    },
    /// Any other path (discovery, `/version`, `/healthz`): a lower-cased HTTP method on a URL.
    NonResource { verb: String, path: String },
}

impl Attributes {
    /// Reads the attributes of `method path?query` like the real server's request-info factory.
    pub(crate) fn from_request(method: &str, path: &str, query: &super::http::Query) -> Self {
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let non_resource = || Attributes::NonResource {
            verb: method.to_ascii_lowercase(),
            path: path.to_string(),
        };
        if parts.len() < 3 {
            return non_resource();
        }
        let (group, mut rest) = match parts[0] {
            "api" => ("", &parts[2..]),
            "apis" if parts.len() >= 4 => (parts[1], &parts[3..]),
            _ => return non_resource(),
        };
        let mut verb = match method {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "",
        }
        .to_string();
        if rest.first() == Some(&"watch") {
            verb = "watch".into();
            rest = &rest[1..];
        }
        let mut namespace = String::new();
        if rest.first() == Some(&"namespaces") && rest.len() > 1 {
            namespace = rest[1].to_string();
            if rest.len() > 2 && !["status", "finalize"].contains(&rest[2]) {
                rest = &rest[2..];
            }
        }
        let at = |i: usize| rest.get(i).map(|s| (*s).to_string()).unwrap_or_default();
        let (resource, mut name, subresource) = (at(0), at(1), at(2));
        if name.is_empty() && verb == "get" {
            verb = if query.bool("watch").unwrap_or(false) {
                "watch".into()
            } else {
                "list".into()
            };
            if let Some(n) = name_from_field_selector(query.get("fieldSelector").unwrap_or("")) {
                name = n;
            }
        }
        if name.is_empty() && verb == "delete" {
            verb = "deletecollection".into();
        }
        Attributes::Resource {
            verb,
            group: group.to_string(),
            resource,
            subresource,
            namespace,
            name,
        }
    }

    /// Attributes from a SelfSubjectAccessReview's `spec`.
    pub(crate) fn from_review_spec(spec: &Value) -> Option<Self> {
        let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        if let Some(r) = spec.get("resourceAttributes").filter(|v| v.is_object()) {
            return Some(Attributes::Resource {
                verb: s(r, "verb"),
                group: s(r, "group"),
                resource: s(r, "resource"),
                subresource: s(r, "subresource"),
                namespace: s(r, "namespace"),
                name: s(r, "name"),
            });
        }
        let n = spec
            .get("nonResourceAttributes")
            .filter(|v| v.is_object())?;
        Some(Attributes::NonResource {
            verb: s(n, "verb"),
            path: s(n, "path"),
        })
    }

    /// The 403 kube-apiserver's `responsewriters.Forbidden` writes for a refusal of `user`.
    pub(crate) fn forbidden(&self, user: &str, reason: &str) -> ApiError {
        // Go quotes with %q (Rust's Debug quoting agrees for printable text) and the real server
        // escapes the message, not the reason, so it never reads as HTML.
        let why = |msg: String| {
            let msg = msg
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;");
            if reason.is_empty() {
                msg
            } else {
                format!("{msg}: {reason}")
            }
        };
        match self {
            Attributes::NonResource { verb, path } => ApiError::custom(
                403,
                "Forbidden",
                &format!(
                    "forbidden: {}",
                    why(format!("User {user:?} cannot {verb} path {path:?}"))
                ),
            )
            .with_details(json!({})),
            Attributes::Resource {
                verb,
                group,
                resource,
                subresource,
                namespace,
                name,
            } => {
                let combined = if subresource.is_empty() {
                    resource.clone()
                } else {
                    format!("{resource}/{subresource}")
                };
                let scope = if namespace.is_empty() {
                    "at the cluster scope".to_string()
                } else {
                    format!("in the namespace {namespace:?}")
                };
                ApiError::forbidden_verb(
                    &GroupResource::new(group.clone(), resource.clone()),
                    name,
                    &why(format!(
                        "User {user:?} cannot {verb} resource {combined:?} in API group {group:?} {scope}"
                    )),
                )
            }
        }
    }
}

/// The name a field selector requires exactly (`metadata.name=x` or `==`), read as the request-info
/// factory reads it: parsed by the same parser the list handler uses (escapes, no trimming, terms in
/// sorted order, the first match wins), and only a valid path segment name counts.
fn name_from_field_selector(selector: &str) -> Option<String> {
    let parsed = super::selector::FieldSelector::parse(selector).ok()?;
    let name = parsed
        .requirements()
        .iter()
        .find(|r| r.field == "metadata.name" && !r.negated)?
        .value
        .clone();
    // `path.IsValidPathSegmentName`.
    let valid = !matches!(name.as_str(), "." | "..") && !name.contains(['/', '%']);
    valid.then_some(name)
}

/// One RBAC `PolicyRule`.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Rule {
    verbs: Vec<String>,
    api_groups: Vec<String>,
    resources: Vec<String>,
    resource_names: Vec<String>,
    non_resource_urls: Vec<String>,
}

impl Rule {
    fn from_json(v: &Value) -> Self {
        let list = |k: &str| -> Vec<String> {
            v.get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        Self {
            verbs: list("verbs"),
            api_groups: list("apiGroups"),
            resources: list("resources"),
            resource_names: list("resourceNames"),
            non_resource_urls: list("nonResourceURLs"),
        }
    }

    fn non_resource(verbs: &[&str], urls: &[&str]) -> Self {
        Self {
            verbs: verbs.iter().map(|s| (*s).to_string()).collect(),
            non_resource_urls: urls.iter().map(|s| (*s).to_string()).collect(),
            ..Self::default()
        }
    }

    fn resource(verbs: &[&str], group: &str, resources: &[&str]) -> Self {
        Self {
            verbs: verbs.iter().map(|s| (*s).to_string()).collect(),
            api_groups: vec![group.to_string()],
            resources: resources.iter().map(|s| (*s).to_string()).collect(),
            ..Self::default()
        }
    }

    /// Whether the rule allows `attrs`, as rbac's `RuleAllows` decides.
    fn allows(&self, attrs: &Attributes) -> bool {
        let has = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
        match attrs {
            Attributes::NonResource { verb, path } => {
                has(&self.verbs, verb)
                    && self.non_resource_urls.iter().any(|u| {
                        u == "*"
                            || u == path
                            || (u.ends_with('*') && path.starts_with(u.trim_end_matches('*')))
                    })
            }
            Attributes::Resource {
                verb,
                group,
                resource,
                subresource,
                name,
                ..
            } => {
                let combined = if subresource.is_empty() {
                    resource.clone()
                } else {
                    format!("{resource}/{subresource}")
                };
                let resource_ok = self.resources.iter().any(|r| {
                    r == "*"
                        || *r == combined
                        || (!subresource.is_empty()
                            && r.strip_prefix("*/") == Some(subresource.as_str()))
                });
                // `ResourceNameMatches`: a list, watch or create carries no name and so only matches
                // a rule without resourceNames (or, literally, one naming "").
                let name_ok =
                    self.resource_names.is_empty() || self.resource_names.iter().any(|n| n == name);
                has(&self.verbs, verb) && has(&self.api_groups, group) && resource_ok && name_ok
            }
        }
    }

    /// The rule as a SelfSubjectRulesReview lists it, as the RBAC authorizer's `RulesFor` splits it:
    /// a resource rule when it names resources, a non-resource rule when it names URLs (a ClusterRole
    /// rule may do both, and one doing neither grants nothing and is not listed).
    fn to_review(&self) -> (Option<Value>, Option<Value>) {
        let resource = (!self.resources.is_empty()).then(|| {
            let mut r = json!({"verbs": self.verbs, "apiGroups": self.api_groups, "resources": self.resources});
            if !self.resource_names.is_empty() {
                r["resourceNames"] = json!(self.resource_names);
            }
            r
        });
        let non_resource = (!self.non_resource_urls.is_empty())
            .then(|| json!({"verbs": self.verbs, "nonResourceURLs": self.non_resource_urls}));
        (resource, non_resource)
    }
}

/// Rules granted through one binding, with the words of the real authorizer's allow reason.
struct Grant {
    rules: Vec<Rule>,
    why: String,
}

/// kube-apiserver's bootstrap ClusterRoles every authenticated user holds through their default
/// ClusterRoleBindings: `system:discovery`, `system:basic-user` and `system:public-info-viewer`.
fn default_grants() -> Vec<Grant> {
    let why = |role: &str| {
        format!(
            "RBAC: allowed by ClusterRoleBinding \"{role}\" of ClusterRole \"{role}\" to Group \"system:authenticated\""
        )
    };
    vec![
        Grant {
            rules: vec![Rule::non_resource(
                &["get"],
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
            )],
            why: why("system:discovery"),
        },
        Grant {
            rules: vec![
                Rule::resource(
                    &["create"],
                    "authentication.k8s.io",
                    &["selfsubjectreviews"],
                ),
                Rule::resource(
                    &["create"],
                    "authorization.k8s.io",
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
            ],
            why: why("system:basic-user"),
        },
        Grant {
            rules: vec![Rule::non_resource(
                &["get"],
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
            )],
            why: why("system:public-info-viewer"),
        },
    ]
}

/// Whether a binding subject names `user` (`namespace` is the RoleBinding's, for ServiceAccounts
/// listed without one).
fn applies(subject: &Value, user: &User, namespace: &str) -> bool {
    let s = |k: &str| subject.get(k).and_then(Value::as_str).unwrap_or("");
    match s("kind") {
        "User" => s("name") == user.name,
        "Group" => user.groups.iter().any(|g| g == s("name")),
        "ServiceAccount" => {
            let ns = if s("namespace").is_empty() {
                namespace
            } else {
                s("namespace")
            };
            !ns.is_empty() && user.name == format!("system:serviceaccount:{ns}:{}", s("name"))
        }
        _ => false,
    }
}

fn subject_words(subject: &Value, namespace: &str) -> String {
    let s = |k: &str| subject.get(k).and_then(Value::as_str).unwrap_or("");
    match s("kind") {
        "ServiceAccount" => {
            let ns = if s("namespace").is_empty() {
                namespace
            } else {
                s("namespace")
            };
            format!("ServiceAccount \"{}/{}\"", ns, s("name"))
        }
        kind => format!("{kind} \"{}\"", s("name")),
    }
}

/// The grants `user` holds where `namespace` applies (`""`: cluster-wide bindings only), and the
/// errors met on the way (a binding whose role is missing), worded as the real authorizer's.
fn grants(state: &State, user: &User, namespace: &str) -> (Vec<Grant>, Vec<String>) {
    let mut out = default_grants();
    let mut errors = Vec::new();
    let objects = |resource: &str| {
        state
            .objects
            .get(&GroupResource::new(RBAC, resource))
            .into_iter()
            .flat_map(|m| m.iter())
    };
    let role_rules = |kind: &str, ns: &str, name: &str| -> Result<Vec<Rule>, String> {
        let (resource, key, what) = match kind {
            "ClusterRole" => ("clusterroles", ObjectKey::new("", name), "clusterrole"),
            "Role" => ("roles", ObjectKey::new(ns, name), "role"),
            other => return Err(format!("unsupported role reference kind: {other:?}")),
        };
        let role = state
            .get(&GroupResource::new(RBAC, resource), &key)
            .ok_or_else(|| format!("{what}.{RBAC} \"{name}\" not found"))?;
        Ok(role
            .get("rules")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(Rule::from_json).collect())
            .unwrap_or_default())
    };
    let mut visit = |binding: &Value, binding_kind: &str, ns: &str| {
        let subjects = binding.get("subjects").and_then(Value::as_array);
        let Some(subject) = subjects.and_then(|s| s.iter().find(|s| applies(s, user, ns))) else {
            return;
        };
        let r = |k: &str| {
            binding
                .pointer(&format!("/roleRef/{k}"))
                .and_then(Value::as_str)
                .unwrap_or("")
        };
        let name = binding
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        match role_rules(r("kind"), ns, r("name")) {
            Ok(rules) => {
                let who = if ns.is_empty() {
                    format!("{binding_kind} \"{name}\"")
                } else {
                    format!("{binding_kind} \"{name}/{ns}\"")
                };
                out.push(Grant {
                    rules,
                    why: format!(
                        "RBAC: allowed by {who} of {} \"{}\" to {}",
                        r("kind"),
                        r("name"),
                        subject_words(subject, ns)
                    ),
                });
            }
            Err(e) => errors.push(e),
        }
    };
    for (_, b) in objects("clusterrolebindings") {
        visit(b, "ClusterRoleBinding", "");
    }
    if !namespace.is_empty() {
        for (key, b) in objects("rolebindings").filter(|(k, _)| k.namespace == namespace) {
            visit(b, "RoleBinding", &key.namespace);
        }
    }
    (out, errors)
}

/// The decision for `attrs`: `Ok(reason)` when allowed, `Err(reason)` (maybe empty) when not.
pub(crate) fn authorize(state: &State, user: &User, attrs: &Attributes) -> Result<String, String> {
    let namespace = match attrs {
        Attributes::Resource { namespace, .. } => namespace.as_str(),
        Attributes::NonResource { .. } => "",
    };
    let (grants, errors) = grants(state, user, namespace);
    if let Some(g) = grants
        .iter()
        .find(|g| g.rules.iter().any(|r| r.allows(attrs)))
    {
        return Ok(g.why.clone());
    }
    Err(match errors.len() {
        0 => String::new(),
        1 => format!("RBAC: {}", errors[0]),
        _ => format!("RBAC: [{}]", errors.join(", ")),
    })
}

/// A SelfSubjectRulesReview's `status` for `identity` in `namespace`.
pub(crate) fn rules_review(state: &State, identity: &Identity, namespace: &str) -> Value {
    let user = match identity {
        Identity::Admin => {
            return json!({
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                "incomplete": false,
            });
        }
        Identity::User(u) => u,
    };
    let (grants, errors) = grants(state, user, namespace);
    let (mut resource_rules, mut non_resource_rules) = (Vec::new(), Vec::new());
    for rule in grants.iter().flat_map(|g| g.rules.iter()) {
        let (resource, non_resource) = rule.to_review();
        resource_rules.extend(resource);
        non_resource_rules.extend(non_resource);
    }
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": !errors.is_empty(),
    });
    if !errors.is_empty() {
        status["evaluationError"] = json!(errors.join(", "));
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Query;

    fn attrs(method: &str, path_and_query: &str) -> Attributes {
        let (path, q) = path_and_query
            .split_once('?')
            .unwrap_or((path_and_query, ""));
        Attributes::from_request(method, path, &Query::parse(q))
    }

    fn res(verb: &str, group: &str, resource: &str, sub: &str, ns: &str, name: &str) -> Attributes {
        Attributes::Resource {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    #[test]
    fn request_attributes_follow_the_request_info_factory() {
        assert_eq!(
            attrs("GET", "/apis/example.com/v1/namespaces/x/widgets"),
            res("list", "example.com", "widgets", "", "x", "")
        );
        assert_eq!(
            attrs("GET", "/apis/example.com/v1/widgets?watch=true"),
            res("watch", "example.com", "widgets", "", "", "")
        );
        assert_eq!(
            attrs("GET", "/apis/example.com/v1/watch/namespaces/x/widgets/a"),
            res("watch", "example.com", "widgets", "", "x", "a")
        );
        assert_eq!(
            attrs(
                "GET",
                "/api/v1/namespaces/x/secrets?fieldSelector=metadata.name%3Dfoo"
            ),
            res("list", "", "secrets", "", "x", "foo")
        );
        assert_eq!(
            attrs("POST", "/api/v1/namespaces/x/serviceaccounts/sa/token"),
            res("create", "", "serviceaccounts", "token", "x", "sa")
        );
        assert_eq!(
            attrs("GET", "/api/v1/namespaces/x"),
            res("get", "", "namespaces", "", "x", "x")
        );
        assert_eq!(
            attrs("DELETE", "/api/v1/namespaces/x/configmaps"),
            res("deletecollection", "", "configmaps", "", "x", "")
        );
        for p in [
            "/api",
            "/api/v1",
            "/apis/example.com/v1",
            "/version",
            "/openapi/v3",
        ] {
            assert_eq!(
                attrs("GET", p),
                Attributes::NonResource {
                    verb: "get".into(),
                    path: p.into()
                }
            );
        }
    }

    #[test]
    fn rules_match_groups_resources_subresources_and_names() {
        let rule = |v: Value| Rule::from_json(&v);
        let r = rule(
            json!({"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "list"]}),
        );
        assert!(r.allows(&res("list", "example.com", "widgets", "", "x", "")));
        assert!(!r.allows(&res("watch", "example.com", "widgets", "", "x", "")));
        assert!(!r.allows(&res("list", "", "widgets", "", "x", "")));
        assert!(!r.allows(&res("get", "example.com", "widgets", "status", "x", "a")));
        let sub = rule(json!({"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["*"]}));
        assert!(sub.allows(&res("patch", "example.com", "widgets", "status", "x", "a")));
        assert!(!sub.allows(&res("patch", "example.com", "widgets", "", "x", "a")));
        let named = rule(
            json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s"], "verbs": ["get"]}),
        );
        assert!(named.allows(&res("get", "", "secrets", "", "x", "s")));
        assert!(!named.allows(&res("get", "", "secrets", "", "x", "t")));
        assert!(!named.allows(&res("get", "", "secrets", "", "x", "")));
        let urls = Rule::non_resource(&["get"], &["/apis/*", "/version"]);
        let nr = |p: &str| Attributes::NonResource {
            verb: "get".into(),
            path: p.into(),
        };
        assert!(urls.allows(&nr("/apis/example.com")));
        assert!(urls.allows(&nr("/version")));
        assert!(!urls.allows(&nr("/version/x")));
        assert!(!urls.allows(&nr("/api")));
    }

    #[test]
    fn a_field_selector_names_the_object_as_the_list_handler_reads_it() {
        let name = |selector: &str| {
            let q = format!("fieldSelector={}", form_urlencoded_value(selector));
            match attrs("GET", &format!("/api/v1/namespaces/x/secrets?{q}")) {
                Attributes::Resource { name, .. } => name,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(name("metadata.name==foo"), "foo");
        // apimachinery sorts the terms and takes the first exact match.
        assert_eq!(name("metadata.name=b,metadata.name=a"), "a");
        // An escaped comma is part of the value, not a separator.
        assert_eq!(name("metadata.name=fo\\,o"), "fo,o");
        // No trimming: " metadata.name" is another field, and the value keeps its space.
        assert_eq!(name(" metadata.name=foo"), "");
        // Not a valid path segment name, or not a selector at all: no name.
        assert_eq!(name("metadata.name=a/b"), "");
        assert_eq!(name("metadata.name=.."), "");
        assert_eq!(name("metadata.name=a=b"), "");
        assert_eq!(name("metadata.name!=foo"), "");
    }

    /// `s` encoded for a query string value.
    fn form_urlencoded_value(s: &str) -> String {
        s.bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    }

    #[test]
    fn rules_match_exactly_as_the_evaluation_helpers_do() {
        let rule = |v: Value| Rule::from_json(&v);
        // ResourceNameMatches compares names literally, the empty one included.
        let empty_name = rule(
            json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": [""], "verbs": ["list"]}),
        );
        assert!(empty_name.allows(&res("list", "", "secrets", "", "x", "")));
        // NonResourceURLMatches trims every trailing '*' before the prefix test.
        let stars = Rule::non_resource(&["get"], &["/apis/**"]);
        assert!(stars.allows(&Attributes::NonResource {
            verb: "get".into(),
            path: "/apis/example.com".into()
        }));
        // RulesFor lists a rule naming resources and URLs in both lists, and one naming neither in none.
        let both = rule(
            json!({"apiGroups": [""], "resources": ["pods"], "nonResourceURLs": ["/metrics"], "verbs": ["get"]}),
        );
        let (r, n) = both.to_review();
        assert_eq!(
            r,
            Some(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}))
        );
        assert_eq!(
            n,
            Some(json!({"verbs": ["get"], "nonResourceURLs": ["/metrics"]}))
        );
        assert_eq!(rule(json!({"verbs": ["get"]})).to_review(), (None, None));
    }

    #[test]
    fn forbidden_messages_are_worded_as_kube_apiserver_words_them() {
        let user = "system:serviceaccount:herald:herald";
        let e = res("list", "example.com", "widgets", "", "", "").forbidden(user, "");
        assert_eq!(
            e.to_status()["message"],
            "widgets.example.com is forbidden: User \"system:serviceaccount:herald:herald\" cannot list resource \"widgets\" in API group \"example.com\" at the cluster scope"
        );
        let e = res("get", "", "secrets", "", "herald", "foo").forbidden(user, "");
        let s = e.to_status();
        assert_eq!(
            s["message"],
            "secrets \"foo\" is forbidden: User \"system:serviceaccount:herald:herald\" cannot get resource \"secrets\" in API group \"\" in the namespace \"herald\""
        );
        assert_eq!(s["details"], json!({"name": "foo", "kind": "secrets"}));
        assert_eq!(s["reason"], "Forbidden");
        let e = Attributes::NonResource {
            verb: "get".into(),
            path: "/metrics".into(),
        }
        .forbidden(user, "");
        assert_eq!(
            e.to_status()["message"],
            "forbidden: User \"system:serviceaccount:herald:herald\" cannot get path \"/metrics\""
        );
    }

    #[test]
    fn impersonation_gives_the_groups_the_real_filter_gives() {
        assert_eq!(impersonation(None, &["g"]), None);
        let (user, checks) =
            impersonation(Some("system:serviceaccount:herald:herald"), &[]).unwrap();
        assert_eq!(user.name, "system:serviceaccount:herald:herald");
        assert_eq!(
            user.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:herald",
                "system:authenticated"
            ]
        );
        assert_eq!(
            checks,
            [res(
                "impersonate",
                "",
                "serviceaccounts",
                "",
                "herald",
                "herald"
            )]
        );
        let (user, checks) = impersonation(Some("jane"), &["devs"]).unwrap();
        assert_eq!(user.groups, ["devs", "system:authenticated"]);
        assert_eq!(
            checks,
            [
                res("impersonate", "", "users", "", "", "jane"),
                res("impersonate", "", "groups", "", "", "devs")
            ]
        );
    }

    #[test]
    fn a_refusal_quotes_like_go_and_escapes_html_as_responsewriters_does() {
        let nr = Attributes::NonResource {
            verb: "get".into(),
            path: "/a<b>&\"c".into(),
        };
        assert_eq!(
            nr.forbidden("u", "<reason>").to_status()["message"],
            "forbidden: User \"u\" cannot get path \"/a&lt;b&gt;&amp;\\\"c\": <reason>"
        );
    }

    #[test]
    fn tokens_expire_and_die_with_their_service_account() {
        let store = crate::store::Store::new(16);
        let gr = GroupResource::new("", "serviceaccounts");
        let put = |uid: &str| {
            store.write(|s| {
                s.put(
                    &gr,
                    ObjectKey::new("ns", "sa"),
                    json!({"metadata": {"name": "sa", "namespace": "ns", "uid": uid}}),
                );
            });
        };
        put("u1");
        let tokens = Tokens::default();
        let t = tokens.issue("ns", "sa", "u1", Duration::from_secs(600));
        let now = SystemTime::now();
        let user = tokens.authenticate(&store.read(), &t, now).unwrap();
        assert_eq!(user.name, "system:serviceaccount:ns:sa");
        assert_eq!(
            user.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:ns",
                "system:authenticated"
            ]
        );
        assert!(
            tokens
                .authenticate(&store.read(), &t, now + Duration::from_secs(601))
                .is_none()
        );
        assert!(
            tokens.authenticate(&store.read(), &t, now).is_none(),
            "an expired token is forgotten"
        );
        let t = tokens.issue("ns", "sa", "u1", Duration::from_secs(600));
        put("u2");
        assert!(
            tokens.authenticate(&store.read(), &t, now).is_none(),
            "a re-created ServiceAccount is another"
        );
        assert!(tokens.authenticate(&store.read(), "nope", now).is_none());
    }
}
