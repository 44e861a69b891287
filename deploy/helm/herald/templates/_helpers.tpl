{{/* Names, labels, the rendered configuration and the RBAC rules of the herald chart. */}}

{{- define "herald.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "herald.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "herald.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "herald.selectorLabels" -}}
app.kubernetes.io/name: {{ include "herald.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "herald.labels" -}}
helm.sh/chart: {{ include "herald.chart" . }}
{{ include "herald.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: controller
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "herald.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "herald.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "herald.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Where the pod keeps what the configuration points at. */}}
{{- define "herald.journalPath" -}}/var/lib/herald/journal{{- end }}
{{- define "herald.adminListen" -}}${POD_IP}:9464{{- end }}
{{- define "herald.adminTokenDir" -}}/var/run/secrets/herald/admin{{- end }}

{{/*
herald's configuration as the pod runs it: `config` with what the pod needs set, refusing (fail) a
configuration that contradicts it. Rendered as YAML.
*/}}
{{- define "herald.config" -}}
{{- $cfg := deepCopy (default (dict) .Values.config) }}
{{- if not $cfg.resources }}
{{- fail "config.resources: list at least one custom resource to watch (see the chart's examples/), or use existingConfig" }}
{{- end }}
{{- if not $cfg.sinks }}
{{- fail "config.sinks: list at least one sink (see the chart's examples/), or use existingConfig" }}
{{- end }}
{{- $cluster := default (dict) $cfg.cluster }}
{{- range $key := list "kubeconfig" "embedded" }}
{{- if hasKey $cluster $key }}
{{- fail (printf "config.cluster.%s: the chart runs herald in the cluster (cluster.inCluster: true); remove %s" $key $key) }}
{{- end }}
{{- end }}
{{- if and (hasKey $cluster "inCluster") (not $cluster.inCluster) }}
{{- fail "config.cluster.inCluster: the chart runs herald in the cluster; remove it or set it to true" }}
{{- end }}
{{- $_ := set $cluster "inCluster" true }}
{{- $_ := set $cfg "cluster" $cluster }}
{{- $journal := default (dict) $cfg.journal }}
{{- if and (hasKey $journal "path") (ne (toString $journal.path) (include "herald.journalPath" .)) }}
{{- fail (printf "config.journal.path: the chart keeps the journal on its volume at %s; remove journal.path (size the volume with persistence.size)" (include "herald.journalPath" .)) }}
{{- end }}
{{- $_ := set $journal "path" (include "herald.journalPath" .) }}
{{- $_ := set $cfg "journal" $journal }}
{{- $admin := default (dict) $cfg.admin }}
{{- if and (hasKey $admin "listen") (ne (toString $admin.listen) (include "herald.adminListen" .)) }}
{{- fail (printf "config.admin.listen: the chart binds the admin endpoint to the pod IP (%s) for probes and scraping; remove admin.listen (the Service port is service.port)" (include "herald.adminListen" .)) }}
{{- end }}
{{- $_ := set $admin "listen" (include "herald.adminListen" .) }}
{{- if .Values.adminToken.existingSecret }}
{{- if hasKey $admin "token" }}
{{- fail "config.admin.token: adminToken.existingSecret sets the admin token; remove config.admin.token" }}
{{- end }}
{{- $_ := set $admin "token" (dict "fromFile" (printf "%s/%s" (include "herald.adminTokenDir" .) .Values.adminToken.key)) }}
{{- end }}
{{- $_ := set $cfg "admin" $admin }}
{{- if gt (int .Values.replicas) 1 }}
{{- $le := default (dict) $cfg.leaderElection }}
{{- if and (hasKey $le "enabled") (not $le.enabled) }}
{{- fail "config.leaderElection.enabled: replicas > 1 needs leader election (every replica would deliver every event); remove it or set it to true" }}
{{- end }}
{{- if .Values.persistence.existingClaim }}
{{- fail "persistence.existingClaim: replicas > 1 needs one journal volume per replica; remove existingClaim (each replica gets its own claim)" }}
{{- end }}
{{- if hasKey $le "identity" }}
{{- fail "config.leaderElection.identity: replicas > 1 needs one identity per replica (both would hold the Lease at once); remove it (each pod's name is its identity)" }}
{{- end }}
{{- $_ := set $le "enabled" true }}
{{- if not (hasKey $le "leaseName") }}{{- $_ := set $le "leaseName" (include "herald.fullname" .) }}{{- end }}
{{- if not (hasKey $le "namespace") }}{{- $_ := set $le "namespace" .Release.Namespace }}{{- end }}
{{- $_ := set $cfg "leaderElection" $le }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/*
Whether herald runs with leader election (replicas > 1, or config.leaderElection.enabled), and its
namespace: the chart's leader-election Role goes there.
*/}}
{{- define "herald.leaderElectionNamespace" -}}
{{- $le := default (dict) .Values.config.leaderElection }}
{{- if or (gt (int .Values.replicas) 1) $le.enabled }}
{{- default .Release.Namespace $le.namespace }}
{{- end }}
{{- end }}

{{/*
The conventional plural of a kind, exactly as `herald rbac` forms it offline (src/rbac,
conventional_plural): lowercased; a consonant and `y` take `ies`; `-s`, `-x`, `-z`, `-ch`, `-sh`
take `es`; everything else `s`.
*/}}
{{- define "herald.plural" -}}
{{- $lower := lower . }}
{{- if regexMatch "[b-df-hj-np-tv-z]y$" $lower }}
{{- printf "%sies" (trimSuffix "y" $lower) }}
{{- else if or (hasSuffix "s" $lower) (hasSuffix "x" $lower) (hasSuffix "z" $lower) (hasSuffix "ch" $lower) (hasSuffix "sh" $lower) }}
{{- printf "%ses" $lower }}
{{- else }}
{{- printf "%ss" $lower }}
{{- end }}
{{- end }}

{{/*
get/list/watch on the given resources, one rule per API group (src/rbac, watched_resources), as a
YAML list. Argument: a list of resource entries of `config.resources`.
*/}}
{{- define "herald.watchRules" -}}
{{- $byGroup := dict }}
{{- range $r := . }}
{{- $plurals := list }}
{{- if $r.kinds }}
{{- if has "*" $r.kinds }}
{{- $plurals = list "*" }}
{{- else }}
{{- range $k := $r.kinds }}
{{- $plurals = append $plurals (include "herald.plural" $k) }}
{{- end }}
{{- end }}
{{- else if $r.plural }}
{{- $plurals = list $r.plural }}
{{- else if $r.kind }}
{{- $plurals = list (include "herald.plural" $r.kind) }}
{{- end }}
{{- range $plural := $plurals }}
{{- $group := toString (default "" $r.group) }}
{{- $_ := set $byGroup $group (append (get $byGroup $group | default list) $plural) }}
{{- end }}
{{- end }}
{{- $rules := list }}
{{- range $group := keys $byGroup | sortAlpha }}
{{- $rules = append $rules (dict "apiGroups" (list $group) "resources" (get $byGroup $group | uniq | sortAlpha) "verbs" (list "get" "list" "watch")) }}
{{- end }}
{{- toYaml $rules }}
{{- end }}

{{/* Whether a resource entry uses `namespaces: {selector: …}` (alone or with name patterns). */}}
{{- define "herald.usesSelector" -}}
{{- if and (kindIs "map" .namespaces) (hasKey .namespaces "selector") }}true{{- end }}
{{- end }}

{{/*
The ClusterRole's rules (src/rbac, cluster_rules): the watch rules, `list` on namespaces when a
namespace selector is used, list/watch on CRDs when a group pattern (`kinds`) is, then
rbac.extraRules.
*/}}
{{- define "herald.clusterRules" -}}
{{- $resources := default list .Values.config.resources }}
{{- $rules := include "herald.watchRules" $resources | fromYamlArray }}
{{- $selector := false }}
{{- range $r := $resources }}
{{- if include "herald.usesSelector" $r }}
{{- $selector = true }}
{{- end }}
{{- end }}
{{- if $selector }}
{{- $rules = append $rules (dict "apiGroups" (list "") "resources" (list "namespaces") "verbs" (list "list")) }}
{{- end }}
{{- $pattern := false }}
{{- range $r := $resources }}
{{- if $r.kinds }}
{{- $pattern = true }}
{{- end }}
{{- end }}
{{- if $pattern }}
{{- $rules = append $rules (dict "apiGroups" (list "apiextensions.k8s.io") "resources" (list "customresourcedefinitions") "verbs" (list "list" "watch")) }}
{{- end }}
{{- $rules = concat $rules (default list .Values.rbac.extraRules) }}
{{- toYaml $rules }}
{{- end }}

{{/*
The Roles' rules per namespace (src/rbac, namespace_rules) as a YAML map namespace -> rules;
refuses, as `herald rbac --namespace-scoped` does, a resource watched in all namespaces or through
a selector.
*/}}
{{- define "herald.namespaceRules" -}}
{{- $perNs := dict }}
{{- range $i, $r := default list .Values.config.resources }}
{{- $ns := default "all" $r.namespaces }}
{{- if $r.kinds }}
{{- fail (printf "rbac.namespaceScoped: config.resources[%d].kinds: a group pattern follows the group's CustomResourceDefinitions, which only a ClusterRole can grant; name the kinds one by one, or set rbac.namespaceScoped=false" $i) }}
{{- else if and (kindIs "map" $ns) (not (hasKey $ns "selector")) }}
{{- fail (printf "rbac.namespaceScoped: config.resources[%d].namespaces: name patterns need a cluster-wide watch, which only a ClusterRole can grant; list the namespaces, or set rbac.namespaceScoped=false" $i) }}
{{- else if kindIs "map" $ns }}
{{- fail (printf "rbac.namespaceScoped: config.resources[%d].namespaces: a namespace selector needs a cluster-wide watch and the namespaces' labels, which only a ClusterRole can grant; list the namespaces, or set rbac.namespaceScoped=false" $i) }}
{{- else if not (kindIs "slice" $ns) }}
{{- fail (printf "rbac.namespaceScoped: config.resources[%d].namespaces: watches all namespaces, which only a ClusterRole can grant; list the namespaces, or set rbac.namespaceScoped=false" $i) }}
{{- end }}
{{- range $name := $ns }}
{{- $_ := set $perNs $name (append (get $perNs $name | default list) $r) }}
{{- end }}
{{- end }}
{{- $out := dict }}
{{- range $name, $rs := $perNs }}
{{- $_ := set $out $name (concat (include "herald.watchRules" $rs | fromYamlArray) (default list $.Values.rbac.extraRules)) }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/*
Refuses (fail) values the pod could not run with although each is valid on its own: two volumes
mounted at one path (the API server rejects the pod, after `helm install` has already succeeded),
and, with existingConfig, RBAC generated from nothing (herald would start and be forbidden every
watch). Renders nothing.
*/}}
{{- define "herald.validate" -}}
{{- $taken := dict "/etc/herald" "the configuration" "/var/lib/herald" "the journal" }}
{{- if .Values.adminToken.existingSecret }}
{{- $_ := set $taken (include "herald.adminTokenDir" .) "adminToken.existingSecret" }}
{{- end }}
{{- range $i, $s := .Values.secretFiles }}
{{- $path := trimSuffix "/" (default (printf "/var/run/secrets/herald/%s" $s.secretName) $s.mountPath) }}
{{- if hasKey $taken $path }}
{{- fail (printf "secretFiles[%d]: %s is already where %s is mounted; give this Secret another mountPath" $i $path (get $taken $path)) }}
{{- end }}
{{- $_ := set $taken $path (printf "secretFiles[%d]" $i) }}
{{- end }}
{{- if and .Values.rbac.create (or .Values.existingConfig.configMap .Values.existingConfig.secret) (not .Values.config.resources) (not .Values.rbac.extraRules) }}
{{- fail "config.resources: with existingConfig the chart still generates its RBAC from config.resources (plus rbac.extraRules); list the resources your configuration watches there, or set rbac.create=false and bind the ServiceAccount yourself" }}
{{- end }}
{{- end }}
