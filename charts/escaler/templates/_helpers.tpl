{{/* The release's name prefix: the release name, or "<release>-escaler" when it does not say escaler. */}}
{{- define "escaler.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The manager's image, and the SLO API's (its own: the manager's has no FastAPI). */}}
{{- define "escaler.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "escaler.sloApiImage" -}}
{{- printf "%s:%s" .Values.sloApi.image.repository (.Values.sloApi.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "escaler.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: escaler
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: escaler
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "manager"). */}}
{{- define "escaler.selector" -}}
app.kubernetes.io/name: escaler
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "escaler.componentLabels" -}}
{{ include "escaler.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The security context every escaler container runs with (Pod Security "restricted"). */}}
{{- define "escaler.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "escaler.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The serving-certificate Secret (servingCert) and the names its certificate covers: every Service
of the release that serves HTTPS, as <svc>.<namespace>.svc and its cluster.local form. */}}
{{- define "escaler.servingCertSecret" -}}
{{- printf "%s-serving-cert" (include "escaler.fullname" .) -}}
{{- end -}}

{{- define "escaler.servingCertNames" -}}
{{- $names := list -}}
{{- range $svc := list "manager" "manager-metrics" "webhook" "slo-api" -}}
{{- $host := printf "%s-%s.%s.svc" (include "escaler.fullname" $) $svc $.Release.Namespace -}}
{{- $names = append $names $host -}}
{{- $names = append $names (printf "%s.cluster.local" $host) -}}
{{- end -}}
{{- join "," $names -}}
{{- end -}}

{{/* The webhook is served with the serving certificate (no certSecretName of its own). */}}
{{- define "escaler.webhookFromServingCert" -}}
{{- if and .Values.webhook.enabled (not .Values.webhook.certSecretName) -}}
{{- if not .Values.servingCert.enabled -}}
{{- fail "webhook.enabled: needs webhook.certSecretName, or servingCert.enabled" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}
