{{/* Names, labels and the image, shared by every template. */}}

{{- define "barge.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the release name alone when it already contains the chart name. */}}
{{- define "barge.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "barge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "barge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "barge.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "barge.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: barge
{{- end }}

{{- define "barge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "barge.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag, or repository@digest when a digest is set. */}}
{{- define "barge.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "barge.ha" -}}
{{- if or (gt (int .Values.replicas) 1) .Values.peering.enabled }}true{{ end }}
{{- end }}

{{/* Several operators, each active for its shard of the namespaces (sharding.shards > 1). */}}
{{- define "barge.sharded" -}}
{{- if gt (int .Values.sharding.shards) 1 }}true{{ end }}
{{- end }}

{{/* The Kopf peering names in use: peering.name, and <peering.name>-shard-i for each shard i > 0 (the operator
derives its own from --peering and BARGE_SHARD). */}}
{{- define "barge.peeringNames" -}}
{{- $names := list .Values.peering.name }}
{{- range $shard := until (int .Values.sharding.shards) }}
{{- if $shard }}
{{- $names = append $names (printf "%s-shard-%d" $.Values.peering.name $shard) }}
{{- end }}
{{- end }}
{{- toJson $names }}
{{- end }}

{{/* Annotations of a CRD: kept on uninstall while crds.keep. */}}
{{- define "barge.crdAnnotations" -}}
{{- if .Values.crds.keep }}
annotations:
  helm.sh/resource-policy: keep
{{- end }}
{{- end }}
