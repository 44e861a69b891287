//! Strategic merge patch (`application/strategic-merge-patch+json`) for the built-in kinds: a JSON merge
//! patch whose lists of objects merge element by element on a key (`containers` by `name`, ...), with the
//! directives client-go's three-way patches carry (`$patch`, `$retainKeys`, `$setElementOrder/…`,
//! `$deleteFromPrimitiveList/…`). Helm's client-side upgrades and `kubectl patch`/`apply` send these.
//!
//! The real server reads each list's strategy from the Go types' `patchStrategy`/`patchMergeKey` tags;
//! the simulator has no Go types, so it keeps the table of the tagged fields of the kinds it serves,
//! keyed by field name (`ports` merges by `containerPort` inside a container and by `port` in a Service;
//! a label `selector` is replaced whole, as a PodDisruptionBudget's).

use serde_json::{Map, Value};

/// How a list field merges.
enum Strategy {
    /// Lists of objects merged on this key.
    Key(&'static str),
    /// Lists of scalars merged as a set (`finalizers`).
    Set,
    /// Replaced whole (every untagged list).
    Replace,
}

fn strategy(field: &str, sample: Option<&Value>) -> Strategy {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims" => Strategy::Key("name"),
        "volumeMounts" => Strategy::Key("mountPath"),
        "volumeDevices" => Strategy::Key("devicePath"),
        "ownerReferences" => Strategy::Key("uid"),
        "conditions" => Strategy::Key("type"),
        "hostAliases" => Strategy::Key("ip"),
        "topologySpreadConstraints" => Strategy::Key("topologyKey"),
        "ports" if sample.is_some_and(|s| s.get("containerPort").is_some()) => {
            Strategy::Key("containerPort")
        }
        "ports" => Strategy::Key("port"),
        "finalizers" => Strategy::Set,
        _ => Strategy::Replace,
    }
}

const SET_ORDER: &str = "$setElementOrder/";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";

/// Applies `patch` to `target` in place. A non-object patch replaces the target, as in a merge patch.
pub(crate) fn apply(target: &mut Value, patch: &Value) -> Result<(), String> {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut replaced = patch.clone();
            replaced.remove("$patch");
            *target = Value::Object(replaced);
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Null;
            return Ok(());
        }
        Some(other) => return Err(format!("Unknown patch type: {other}")),
        None => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(members) = target else {
        return Ok(());
    };
    for (key, value) in patch {
        if key == "$retainKeys" || key.starts_with(SET_ORDER) || key.starts_with(DELETE_FROM) {
            continue;
        }
        if value.is_null() {
            members.shift_remove(key);
            continue;
        }
        match (members.get_mut(key), value) {
            (Some(Value::Array(current)), Value::Array(items)) => {
                let sample = items.first().or(current.first()).cloned();
                match strategy(key, sample.as_ref()) {
                    Strategy::Key(k) if items.iter().all(Value::is_object) => {
                        merge_keyed(current, items, k)?;
                    }
                    Strategy::Set => {
                        for item in items {
                            if !current.contains(item) {
                                current.push(item.clone());
                            }
                        }
                    }
                    _ => *current = items.clone(),
                }
            }
            // A PodDisruptionBudget's label selector has patch strategy `replace` (the workloads'
            // selectors are immutable, so replacing them is the same as merging).
            (Some(slot), Value::Object(v))
                if key == "selector"
                    && (v.contains_key("matchLabels") || v.contains_key("matchExpressions")) =>
            {
                *slot = Value::Null;
                apply(slot, value)?;
            }
            (Some(slot), v) if v.is_object() => {
                apply(slot, v)?;
                if slot.is_null() {
                    members.shift_remove(key);
                }
            }
            _ => {
                let mut fresh = Value::Null;
                apply(&mut fresh, value)?;
                if let Value::Array(items) = &mut fresh {
                    // A new keyed list drops the elements that only delete.
                    items.retain(|i| i.get("$patch").is_none());
                }
                if !fresh.is_null() {
                    members.insert(key.clone(), fresh);
                }
            }
        }
    }
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix(DELETE_FROM)
            && let (Some(Value::Array(current)), Some(gone)) =
                (members.get_mut(field), value.as_array())
        {
            current.retain(|x| !gone.contains(x));
        }
        if let Some(field) = key.strip_prefix(SET_ORDER)
            && let (Some(Value::Array(current)), Some(order)) =
                (members.get_mut(field), value.as_array())
        {
            reorder(current, order, field);
        }
    }
    if let Some(keep) = patch.get("$retainKeys").and_then(Value::as_array) {
        members.retain(|k, _| keep.iter().any(|x| x.as_str() == Some(k)));
    }
    Ok(())
}

fn merge_keyed(current: &mut Vec<Value>, items: &[Value], key: &str) -> Result<(), String> {
    for item in items {
        let Some(id) = item.get(key) else {
            return Err(format!(
                "map: {item} does not contain declared merge key: {key}"
            ));
        };
        let pos = current.iter().position(|c| c.get(key) == Some(id));
        match (pos, item.get("$patch").and_then(Value::as_str)) {
            (Some(i), Some("delete")) => {
                current.remove(i);
            }
            (None, Some("delete")) => {}
            (Some(i), _) => apply(&mut current[i], item)?,
            (None, _) => {
                let mut fresh = Value::Null;
                apply(&mut fresh, item)?;
                current.push(fresh);
            }
        }
    }
    Ok(())
}

/// Orders `current` as `$setElementOrder` lists it (elements it does not name keep their place at the end).
fn reorder(current: &mut Vec<Value>, order: &[Value], field: &str) {
    let sample = current.first().cloned();
    let key_of = |v: &Value| -> Value {
        match strategy(field, sample.as_ref()) {
            Strategy::Key(k) => v.get(k).cloned().unwrap_or(Value::Null),
            _ => v.clone(),
        }
    };
    let mut sorted = Vec::with_capacity(current.len());
    for want in order {
        let want_key = key_of(want);
        if let Some(i) = current.iter().position(|c| key_of(c) == want_key) {
            sorted.push(current.remove(i));
        }
    }
    sorted.append(current);
    *current = sorted;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merges_containers_by_name_and_ports_by_their_key() {
        let mut deploy = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "a:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
             "ports": [{"containerPort": 80}]},
            {"name": "side", "image": "s:1"}
        ]}}}});
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "side"}, {"name": "app"}],
            "containers": [{"name": "app", "image": "a:2",
                            "$setElementOrder/env": [{"name": "A"}],
                            "env": [{"name": "B", "$patch": "delete"}, {"name": "A", "value": "9"}]}]
        }}}});
        apply(&mut deploy, &patch).unwrap();
        assert_eq!(
            deploy,
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "side", "image": "s:1"},
                {"name": "app", "image": "a:2", "env": [{"name": "A", "value": "9"}],
                 "ports": [{"containerPort": 80}]}
            ]}}}})
        );
    }

    #[test]
    fn untagged_lists_replace_and_directives_apply() {
        let mut obj = json!({"metadata": {"finalizers": ["a"]}, "rules": [{"verbs": ["get"]}],
                             "spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}},
                             "data": {"x": "1", "y": "2"}});
        let patch = json!({"metadata": {"finalizers": ["b"]}, "rules": [{"verbs": ["list"]}],
                           "spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}},
                           "data": {"y": null}});
        apply(&mut obj, &patch).unwrap();
        assert_eq!(
            obj,
            json!({"metadata": {"finalizers": ["a", "b"]}, "rules": [{"verbs": ["list"]}],
                   "spec": {"strategy": {"type": "Recreate"}}, "data": {"x": "1"}})
        );
        let mut pdb = json!({"spec": {"selector": {"matchLabels": {"a": "1"}}}});
        apply(
            &mut pdb,
            &json!({"spec": {"selector": {"matchLabels": {"b": "2"}}}}),
        )
        .unwrap();
        assert_eq!(
            pdb,
            json!({"spec": {"selector": {"matchLabels": {"b": "2"}}}})
        );
        let mut svc = json!({"spec": {"selector": {"a": "1", "c": "3"}}});
        apply(
            &mut svc,
            &json!({"spec": {"selector": {"b": "2", "c": null}}}),
        )
        .unwrap();
        assert_eq!(svc, json!({"spec": {"selector": {"a": "1", "b": "2"}}}));
        let mut m = json!({"data": {"x": "1"}});
        apply(&mut m, &json!({"data": {"$patch": "replace", "z": "3"}})).unwrap();
        assert_eq!(m, json!({"data": {"z": "3"}}));
        assert!(apply(&mut m, &json!({"$patch": "bogus"})).is_err());
    }
}
