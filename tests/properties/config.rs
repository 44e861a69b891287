//! The configuration loader: arbitrary YAML text, and valid configurations with one value
//! replaced by something odd, give a `Config` or a `ConfigError`, never a panic.

use proptest::prelude::*;
use serde_yaml_ng::Value as Yaml;

use crate::odd_string;

/// A configuration that loads, touching most of what the loader checks.
const BASE: &str = r#"
cluster:
  name: prod
  kubeconfig: {path: /nonexistent/kubeconfig}
resources:
  - group: example.com
    kind: Widget
    namespaces: [team-a, team-b]
    labelSelector: "app in (web, api),tier!=cache"
    fieldSelector: "metadata.name!=skip"
    redact: [/spec/password]
    payload: [object, patch]
  - group: ""
    version: v1
    plural: configmaps
    namespaces: {selector: "team=payments"}
sinks:
  - name: out
    type: file
    path: /tmp/herald-properties.jsonl
  - name: hook
    type: webhook
    url: https://events.example.com/hook
    timeout: 5s
    maxAttempts: 5
    maxAge: 1h
  - name: bus
    type: nats
    servers: [nats://127.0.0.1:4222]
    subject: "herald.{group}.{kind}.{namespace}.{name}.{op}"
  - name: log
    type: kafka
    brokers: [127.0.0.1:9092]
    topic: "herald.{group}.{kind}"
routes:
  - resources: [Widget.example.com]
    sinks: [hook, bus]
journal:
  path: /tmp/herald-properties-journal
  flushInterval: 5ms
admin:
  listen: 127.0.0.1:9464
"#;

/// Values that stress the loader's units, bounds and types.
fn odd_yaml() -> impl Strategy<Value = Yaml> {
    let tricky = prop_oneof![
        Just(""),
        Just("0s"),
        Just("0"),
        Just("-1s"),
        Just("1ns"),
        Just("100000000000days"),
        Just("18446744073709551616ms"),
        Just("1e400"),
        Just("NaN"),
        Just("64MiB"),
        Just("99999999999999999999GiB"),
        Just("0B"),
        Just("~"),
        Just("{"),
        Just("*"),
        Just("{name}"),
        Just("{"),
        Just("${UNSET_HERALD_PROPERTY}"),
        Just("file:/nonexistent"),
        Just("x.jsonl"),
        Just("./x.jsonl"),
        Just("-"),
        Just("all"),
        Just("a in (b"),
        Just("metadata.name==x,,"),
        Just("http://[::1"),
        Just("nats://"),
        Just("/"),
        Just("//"),
        Just("/~2"),
    ]
    .prop_map(|s| Yaml::String(s.to_owned()));
    let leaf = prop_oneof![
        Just(Yaml::Null),
        any::<bool>().prop_map(Yaml::Bool),
        any::<i64>().prop_map(|n| Yaml::Number(n.into())),
        any::<u64>().prop_map(|n| Yaml::Number(n.into())),
        any::<f64>().prop_map(|n| Yaml::Number(n.into())),
        tricky,
        odd_string().prop_map(Yaml::String),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Yaml::Sequence),
            proptest::collection::vec(("[a-zA-Z]{1,12}", inner), 0..4).prop_map(|pairs| {
                Yaml::Mapping(
                    pairs
                        .into_iter()
                        .map(|(k, v)| (Yaml::String(k), v))
                        .collect(),
                )
            }),
        ]
    })
}

/// Every path (keys and list indexes) to a node of `value`.
fn paths(value: &Yaml, at: &mut Vec<Yaml>, out: &mut Vec<Vec<Yaml>>) {
    out.push(at.clone());
    match value {
        Yaml::Mapping(map) => {
            for (k, v) in map {
                at.push(k.clone());
                paths(v, at, out);
                at.pop();
            }
        }
        Yaml::Sequence(items) => {
            for (i, v) in items.iter().enumerate() {
                at.push(Yaml::Number(i.into()));
                paths(v, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

fn node_mut<'a>(value: &'a mut Yaml, path: &[Yaml]) -> Option<&'a mut Yaml> {
    let Some((first, rest)) = path.split_first() else {
        return Some(value);
    };
    let next = match (value, first) {
        (Yaml::Mapping(map), key) => map.get_mut(key)?,
        (Yaml::Sequence(items), Yaml::Number(n)) => {
            items.get_mut(usize::try_from(n.as_u64()?).ok()?)?
        }
        _ => return None,
    };
    node_mut(next, rest)
}

/// What a mutation does at the chosen node.
#[derive(Debug, Clone)]
enum Mutation {
    Replace(Yaml),
    Remove,
    AddKey(String, Yaml),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => odd_yaml().prop_map(Mutation::Replace),
        1 => Just(Mutation::Remove),
        1 => ("[a-zA-Z]{1,16}", odd_yaml()).prop_map(|(k, v)| Mutation::AddKey(k, v)),
    ]
}

fn mutate(base: &Yaml, picks: &[(prop::sample::Index, Mutation)]) -> Yaml {
    let mut doc = base.clone();
    for (pick, change) in picks {
        let mut all = Vec::new();
        paths(&doc, &mut Vec::new(), &mut all);
        let path = pick.get(&all).clone();
        match change {
            Mutation::Replace(v) => {
                if let Some(node) = node_mut(&mut doc, &path) {
                    *node = v.clone();
                }
            }
            Mutation::Remove => {
                if let Some((last, parent)) = path.split_last()
                    && let Some(parent) = node_mut(&mut doc, parent)
                {
                    match parent {
                        Yaml::Mapping(map) => {
                            map.remove(last);
                        }
                        Yaml::Sequence(items) => {
                            if let Some(i) = last.as_u64().and_then(|i| usize::try_from(i).ok())
                                && i < items.len()
                            {
                                items.remove(i);
                            }
                        }
                        _ => {}
                    }
                }
            }
            Mutation::AddKey(k, v) => {
                if let Some(Yaml::Mapping(map)) = node_mut(&mut doc, &path) {
                    map.insert(Yaml::String(k.clone()), v.clone());
                }
            }
        }
    }
    doc
}

#[test]
fn the_base_configuration_loads() {
    herald::config::from_str(BASE).unwrap();
}

proptest! {
    #[test]
    fn arbitrary_text_gives_a_config_or_an_error(text in "(?s).{0,400}") {
        let _ = herald::config::from_str(&text);
    }

    #[test]
    fn yaml_shaped_text_gives_a_config_or_an_error(
        text in "([a-zA-Z]{1,10}: ?(\\{|\\[|-|[a-z0-9./{}*>:%\"' ]{0,16})?\n {0,4}){0,20}"
    ) {
        let _ = herald::config::from_str(&text);
    }

    #[test]
    fn a_mutated_configuration_gives_a_config_or_an_error(
        picks in proptest::collection::vec((any::<prop::sample::Index>(), mutation()), 1..4)
    ) {
        let base: Yaml = serde_yaml_ng::from_str(BASE).unwrap();
        let doc = mutate(&base, &picks);
        let text = serde_yaml_ng::to_string(&doc).unwrap();
        if let Ok(config) = herald::config::from_str(&text) {
            // What loads also checks its secrets without panicking.
            let _ = config.check_secrets();
        }
    }
}
