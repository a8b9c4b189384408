{{- define "hangar.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hangar.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hangar.headless" -}}
{{- printf "%s-nodes" (include "hangar.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hangar.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hangar.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "hangar.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "hangar.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "hangar.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "hangar.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Whether the store is PostgreSQL (several nodes need it). */}}
{{- define "hangar.sharedStore" -}}
{{- if or .Values.store.url .Values.store.existingSecret .Values.postgresql.enabled -}}true{{- end -}}
{{- end -}}

{{/* The Secret and key HANGAR_STORE_URL is read from, when not built from Bitnami's parts. */}}
{{- define "hangar.storeSecret" -}}
{{- default (printf "%s-store" (include "hangar.fullname" .)) .Values.store.existingSecret -}}
{{- end -}}

{{- define "hangar.secretsKeySecret" -}}
{{- default (printf "%s-secrets-key" (include "hangar.fullname" .)) .Values.secretsKey.existingSecret -}}
{{- end -}}

{{/* Requests and limits of one node, from its browsers: memory is never overcommitted (limit =
     request), since a Chromium past its share would take another tenant's. */}}
{{- define "hangar.memoryMiB" -}}
{{- add .Values.server.memoryMiB (mul .Values.browsersPerNode .Values.perBrowser.memoryMiB) -}}
{{- end -}}
{{- define "hangar.cpuMilli" -}}
{{- add .Values.server.cpuMilli (mul .Values.browsersPerNode .Values.perBrowser.cpuMilli) -}}
{{- end -}}

{{- define "hangar.publicUrl" -}}
{{- if .Values.publicUrl -}}
{{- .Values.publicUrl -}}
{{- else -}}
{{- printf "http://$(POD_NAME).%s.%s.svc.%s:%d" (include "hangar.headless" .) .Release.Namespace .Values.clusterDomain (int .Values.port) -}}
{{- end -}}
{{- end -}}
