//! CustomResourceDefinitions: validation and defaulting as apiextensions does, the status the server
//! fills in, and the resource definition a CRD makes the simulator serve.

use serde_json::{Map, Value, json};

use super::meta;
use super::resource::{Behaviour, GroupResource, ResourceDef, VersionDef};
use super::status::Cause;

/// Validates a CRD (and, on update, its immutable fields against `old`), filling the defaults the real
/// server fills. Returns the causes of a 422 on failure.
pub(crate) fn validate_and_default(obj: &mut Value, old: Option<&Value>) -> Result<(), Vec<Cause>> {
    let mut causes = Vec::new();
    let name = meta::name(obj).to_string();
    let spec = meta::object_mut(meta::object_mut(obj).entry("spec").or_insert(Value::Null));

    let group = spec
        .get("group")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if group.is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "spec.group",
            "Required value",
        ));
    } else if !group.contains('.') {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.group",
            format!("Invalid value: \"{group}\": should be a domain with at least one dot"),
        ));
    } else if let Err(e) = meta::validate_subdomain(&group) {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.group",
            format!("Invalid value: \"{group}\": {e}"),
        ));
    }

    let scope = spec
        .get("scope")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if scope.is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "spec.scope",
            "Required value",
        ));
    } else if scope != "Namespaced" && scope != "Cluster" {
        causes.push(Cause::new(
            "FieldValueNotSupported",
            "spec.scope",
            format!(
                "Unsupported value: \"{scope}\": supported values: \"Cluster\", \"Namespaced\""
            ),
        ));
    }

    let names = meta::object_mut(spec.entry("names").or_insert(Value::Null));
    let plural = names
        .get("plural")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let kind = names
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if plural.is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "spec.names.plural",
            "Required value",
        ));
    } else if let Err(e) = meta::validate_label(&plural) {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.names.plural",
            format!("Invalid value: \"{plural}\": {e}"),
        ));
    }
    if kind.is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "spec.names.kind",
            "Required value",
        ));
    } else if !kind.chars().all(|c| c.is_ascii_alphanumeric())
        || !kind.starts_with(|c: char| c.is_ascii_alphabetic())
    {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.names.kind",
            format!("Invalid value: \"{kind}\": may have mixed case, but should otherwise match: [a-z]([-a-z0-9]*[a-z0-9])?"),
        ));
    }
    if !kind.is_empty() {
        names
            .entry("singular")
            .or_insert_with(|| Value::String(kind.to_lowercase()));
        names
            .entry("listKind")
            .or_insert_with(|| Value::String(format!("{kind}List")));
    }

    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "metadata.name",
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }

    validate_versions(spec, &mut causes);

    spec.entry("conversion")
        .or_insert_with(|| json!({"strategy": "None"}));

    if let Some(old) = old {
        for (field, path) in [("group", "spec.group"), ("scope", "spec.scope")] {
            let before = old.get("spec").and_then(|s| s.get(field));
            if before.is_some() && before != spec.get(field) {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    path,
                    "Invalid value: field is immutable",
                ));
            }
        }
    }

    if causes.is_empty() {
        Ok(())
    } else {
        Err(causes)
    }
}

fn validate_versions(spec: &mut Map<String, Value>, causes: &mut Vec<Cause>) {
    let Some(versions) = spec.get_mut("versions").and_then(Value::as_array_mut) else {
        causes.push(Cause::new(
            "FieldValueRequired",
            "spec.versions",
            "Required value: must have at least one version",
        ));
        return;
    };
    if versions.is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "spec.versions",
            "Required value: must have at least one version",
        ));
        return;
    }
    let mut seen = Vec::new();
    let (mut storage, mut served) = (0, 0);
    for (i, v) in versions.iter_mut().enumerate() {
        let v = meta::object_mut(v);
        let name = v
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let path = format!("spec.versions[{i}]");
        if name.is_empty() {
            causes.push(Cause::new(
                "FieldValueRequired",
                format!("{path}.name"),
                "Required value",
            ));
        } else if let Err(e) = meta::validate_label(&name) {
            causes.push(Cause::new(
                "FieldValueInvalid",
                format!("{path}.name"),
                format!("Invalid value: \"{name}\": {e}"),
            ));
        } else if seen.contains(&name) {
            causes.push(Cause::new(
                "FieldValueDuplicate",
                format!("{path}.name"),
                format!("Duplicate value: \"{name}\""),
            ));
        }
        seen.push(name);
        for flag in ["served", "storage"] {
            if !v.get(flag).is_some_and(Value::is_boolean) {
                causes.push(Cause::new(
                    "FieldValueRequired",
                    format!("{path}.{flag}"),
                    "Required value",
                ));
            }
        }
        if v.get("storage").and_then(Value::as_bool) == Some(true) {
            storage += 1;
        }
        if v.get("served").and_then(Value::as_bool) == Some(true) {
            served += 1;
        }
        let has_schema = v
            .get("schema")
            .and_then(|s| s.get("openAPIV3Schema"))
            .is_some_and(Value::is_object);
        if !has_schema {
            causes.push(Cause::new(
                "FieldValueRequired",
                format!("{path}.schema.openAPIV3Schema"),
                "Required value: schemas are required",
            ));
        }
    }
    if storage != 1 {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.versions",
            format!("Invalid value: []apiextensions.CustomResourceDefinitionVersion{{...}}: must have exactly one version marked as storage version (found {storage})"),
        ));
    }
    if served == 0 {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.versions",
            "Invalid value: []apiextensions.CustomResourceDefinitionVersion{...}: must have at least one served version",
        ));
    }
}

/// The status the server keeps on an accepted CRD. `terminating` adds the `Terminating` condition.
pub(crate) fn status(obj: &Value, old: Option<&Value>, terminating: bool) -> Value {
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let now = meta::now();
    let mut stored: Vec<Value> = spec
        .get("versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .filter_map(|v| v.get("name").cloned())
                .collect()
        })
        .unwrap_or_default();
    // storedVersions only ever grows: objects may still be stored in an earlier storage version.
    if let Some(before) = old
        .and_then(|o| o.pointer("/status/storedVersions"))
        .and_then(Value::as_array)
    {
        let mut all = before.clone();
        for v in stored {
            if !all.contains(&v) {
                all.push(v);
            }
        }
        stored = all;
    }
    // A CRD keeps the condition times of its first acceptance: rewriting them on every update would make
    // every no-op write a change.
    let kept_time = |ty: &str| {
        obj.pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["type"] == ty))
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| Value::String(now.clone()))
    };
    let mut conditions = vec![
        json!({"type": "NamesAccepted", "status": "True", "lastTransitionTime": kept_time("NamesAccepted"),
               "reason": "NoConflicts", "message": "no conflicts found"}),
        json!({"type": "Established", "status": "True", "lastTransitionTime": kept_time("Established"),
               "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}),
    ];
    if terminating {
        conditions.push(json!({"type": "Terminating", "status": "True", "lastTransitionTime": kept_time("Terminating"),
            "reason": "InstanceDeletionInProgress", "message": "CustomResource deletion is in progress"}));
    }
    json!({
        "conditions": conditions,
        "acceptedNames": spec.get("names").cloned().unwrap_or(Value::Null),
        "storedVersions": stored,
    })
}

/// The resource a validated CRD serves.
pub(crate) fn resource_def(obj: &Value) -> ResourceDef {
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let names = spec.get("names").cloned().unwrap_or(Value::Null);
    let strings = |k: &str| -> Vec<String> {
        names
            .get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .map(|v| VersionDef {
                    name: s(v, "name"),
                    served: v.get("served").and_then(Value::as_bool).unwrap_or(false),
                    storage: v.get("storage").and_then(Value::as_bool).unwrap_or(false),
                    status_subresource: v
                        .pointer("/subresources/status")
                        .is_some_and(|x| !x.is_null()),
                    schema: v.pointer("/schema/openAPIV3Schema").cloned(),
                })
                .collect()
        })
        .unwrap_or_default();
    ResourceDef {
        gr: GroupResource::new(s(&spec, "group"), s(&names, "plural")),
        kind: s(&names, "kind"),
        list_kind: s(&names, "listKind"),
        singular: s(&names, "singular"),
        namespaced: s(&spec, "scope") == "Namespaced",
        short_names: strings("shortNames"),
        categories: strings("categories"),
        versions,
        behaviour: Behaviour::Custom,
        terminating: meta::is_deleting(obj),
        scale_subresource: false,
        tracks_generation: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": "widgets", "kind": "Widget"},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                                   "schema": {"openAPIV3Schema": {"type": "object"}}}]}
        })
    }

    #[test]
    fn accepts_and_defaults_a_minimal_crd() {
        let mut c = crd();
        validate_and_default(&mut c, None)
            .map_err(|e| e.len())
            .unwrap();
        assert_eq!(c["spec"]["names"]["singular"], "widget");
        assert_eq!(c["spec"]["names"]["listKind"], "WidgetList");
        let def = resource_def(&c);
        assert_eq!(def.gr, GroupResource::new("example.com", "widgets"));
        assert!(def.namespaced);
        let st = status(&c, None, false);
        assert_eq!(st["conditions"][1]["type"], "Established");
        assert_eq!(st["storedVersions"], json!(["v1"]));
    }

    #[test]
    fn rejects_a_name_that_is_not_plural_dot_group() {
        let mut c = crd();
        c["metadata"]["name"] = json!("widget.example.com");
        let causes = validate_and_default(&mut c, None).err().unwrap();
        assert_eq!(causes[0].field, "metadata.name");
    }

    #[test]
    fn rejects_two_storage_versions_and_missing_schema() {
        let mut c = crd();
        c["spec"]["versions"] = json!([
            {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}},
            {"name": "v2", "served": true, "storage": true}
        ]);
        let causes = validate_and_default(&mut c, None).err().unwrap();
        let fields: Vec<_> = causes.iter().map(|c| c.field.as_str()).collect();
        assert!(
            fields.contains(&"spec.versions[1].schema.openAPIV3Schema"),
            "{fields:?}"
        );
        assert!(fields.contains(&"spec.versions"), "{fields:?}");
    }

    #[test]
    fn scope_and_group_are_immutable() {
        let old = crd();
        let mut c = crd();
        c["spec"]["scope"] = json!("Cluster");
        let causes = validate_and_default(&mut c, Some(&old)).err().unwrap();
        assert_eq!(causes[0].field, "spec.scope");
    }
}
