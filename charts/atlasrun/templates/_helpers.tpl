{{/*
Names, labels and small values shared by the templates.
*/}}

{{- define "atlasrun.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* <release>-atlasrun, or the release name alone when it already contains the chart name. */}}
{{- define "atlasrun.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "atlasrun.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "atlasrun.selectorLabels" -}}
app.kubernetes.io/name: {{ include "atlasrun.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "atlasrun.labels" -}}
helm.sh/chart: {{ include "atlasrun.chart" . }}
{{ include "atlasrun.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: atlasrun
{{- end }}

{{- define "atlasrun.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "atlasrun.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator image, by digest only. */}}
{{- define "atlasrun.image" -}}
{{- $digest := required "image.digest is required: the operator image is pulled by digest only (--set image.digest=sha256:<64 hex>)" .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository $digest }}
{{- end }}

{{/* The default runner image (empty when none is configured). */}}
{{- define "atlasrun.runnerImage" -}}
{{- if .Values.runnerImage.repository }}
{{- printf "%s@%s" .Values.runnerImage.repository .Values.runnerImage.digest }}
{{- end }}
{{- end }}

{{- define "atlasrun.metricsServiceName" -}}
{{- printf "%s-metrics" (include "atlasrun.fullname" .) }}
{{- end }}

{{/* The `job` label of the operator's scrape target: a ServiceMonitor uses the Service's name. */}}
{{- define "atlasrun.metricsJob" -}}
{{- default (include "atlasrun.metricsServiceName" .) .Values.prometheusRule.operatorJob }}
{{- end }}

{{/*
The RBAC rules of the operator (see README.md, "RBAC"). Exactly what operator.py calls, plus what
kopf itself needs: list/watch/patch on the watched resource, status patches for its progress
storage, events. No secrets (pods reference them by name), no pods/exec, no pods/log.
*/}}
{{- define "atlasrun.rules" -}}
- apiGroups: ["atlasrun.dev"]
  resources: ["atlasruns"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["atlasrun.dev"]
  resources: ["atlasruns/status"]
  verbs: ["patch", "update"]
# Creating objects whose ownerReference sets blockOwnerDeletion needs update on the owner's
# finalizers (admission plugin OwnerReferencesPermissionEnforcement).
- apiGroups: ["atlasrun.dev"]
  resources: ["atlasruns/finalizers"]
  verbs: ["update"]
# Indexed Jobs: created per chunk, patched (parallelism, suspend), deleted once counted.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["create", "get", "list", "watch", "patch", "delete"]
# Termination messages of finished runner containers; never exec or logs.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
# The run's ConfigMap (create) and tasks.configMap sources (get).
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["create", "get"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["create", "get"]
{{- if .Values.networkPolicy.cilium }}
- apiGroups: ["cilium.io"]
  resources: ["ciliumnetworkpolicies"]
  verbs: ["create", "get"]
{{- end }}
# Kueue (spec.cluster.queueName): why a queued Job waits, from its Workload; suspending a queued
# run deactivates its Workloads (patch spec.active). Harmless without Kueue.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "list", "patch"]
# Events: the run's own (create); the Job controller's FailedCreate (list: quota refusals).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch", "list"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/* Host shell patterns (policy.allowedApiHosts) as one anchored regular expression; none: "^$". */}}
{{- define "atlasrun.hostRegex" -}}
^({{ range $i, $p := . }}{{ if $i }}|{{ end }}{{ $p | lower | replace "." "\\." | replace "*" ".*" | replace "?" "." }}{{ end }})$
{{- end }}

{{/* The pre-pull DaemonSet's containers: restricted, and reserving almost nothing. */}}
{{- define "atlasrun.prePullContainer" -}}
imagePullPolicy: IfNotPresent
resources:
  requests: {cpu: 1m, memory: 8Mi}
  limits: {cpu: 50m, memory: 32Mi}
securityContext:
  runAsNonRoot: true
  readOnlyRootFilesystem: true
  allowPrivilegeEscalation: false
  capabilities:
    drop: ["ALL"]
  seccompProfile:
    type: RuntimeDefault
{{- end }}
