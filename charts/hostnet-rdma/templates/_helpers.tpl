{{/* Names are truncated to 63 characters (DNS label limit). */}}
{{- define "hostnet-rdma.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hostnet-rdma.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hostnet-rdma.labels" -}}
app.kubernetes.io/name: {{ include "hostnet-rdma.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "hostnet-rdma.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hostnet-rdma.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: webhook
{{- end -}}

{{- define "hostnet-rdma.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end }}

{{- define "hostnet-rdma.wrapperImage" -}}
{{- /* Beside the webhook's image by default: a user who points image.repository at their
registry gets the wrapper image from there too, never from a registry they did not choose. */}}
{{- $repository := .Values.wrapperImage.repository | default (printf "%s-wrapper" .Values.image.repository) -}}
{{- printf "%s:%s" $repository (.Values.wrapperImage.tag | default .Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "hostnet-rdma.tlsSecret" -}}
{{- if eq .Values.certs.mode "provided" -}}
{{- required "certs.provided.secretName is required when certs.mode=provided" .Values.certs.provided.secretName -}}
{{- else -}}
{{- printf "%s-tls" (include "hostnet-rdma.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hostnet-rdma.webhookName" -}}
{{- include "hostnet-rdma.fullname" . -}}
{{- end -}}

{{- /* The wrapper delivery in effect. auto: image volumes where the API server has them on by
default (1.35+), else an init container. */}}
{{- define "hostnet-rdma.wrapperDelivery" -}}
{{- $delivery := default "auto" ((.Values.config).wrapper).delivery -}}
{{- if eq $delivery "auto" -}}
{{- ternary "imageVolume" "initContainer" (semverCompare ">=1.35.0-0" .Capabilities.KubeVersion.Version) -}}
{{- else -}}
{{- $delivery -}}
{{- end -}}
{{- end -}}

{{/*
Whether the webhook calls the API server (its ServiceAccount token is mounted only then):
for self-managed certificates, and for Events.
*/}}
{{- define "hostnet-rdma.callsApi" -}}
{{- or (eq .Values.certs.mode "self-managed") .Values.events.enabled -}}
{{- end }}

{{/* Which namespaces' pods the webhook is sent: labelled ones, never the excluded ones or the
release's own. The policy on pods created without it (unplumbed-pods-policy.yaml) matches the same. */}}
{{- define "hostnet-rdma.namespaceSelector" -}}
matchExpressions:
  - key: hostnet-rdma.io/inject
    operator: In
    values: [enabled]
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values:
      {{- range .Values.webhook.excludeNamespaces }}
      - {{ . }}
      {{- end }}
      - {{ .Release.Namespace }}
{{- end }}

{{/* Which pods of those namespaces (config.optIn). */}}
{{- define "hostnet-rdma.objectSelector" -}}
{{- if eq .Values.config.optIn "pod" -}}
matchLabels:
  hostnet-rdma.io/inject: enabled
{{- else -}}
matchExpressions:
  - key: hostnet-rdma.io/inject
    operator: NotIn
    values: [disabled]
{{- end }}
{{- end }}
