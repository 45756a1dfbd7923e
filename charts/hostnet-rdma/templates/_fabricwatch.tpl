{{- /* The fabric watch's names and labels (docs/fabric-watch.md). */ -}}
{{- define "hostnet-rdma.fabricWatch.name" -}}
{{- printf "%s-fabric-watch" (include "hostnet-rdma.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hostnet-rdma.fabricWatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hostnet-rdma.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: fabric-watch
{{- end -}}

{{- define "hostnet-rdma.fabricWatch.serviceAccount" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "hostnet-rdma.fabricWatch.name" .) -}}
{{- end -}}

{{- /* The post-delete hook that clears the agents' marks (fabricwatch-clear-hook.yaml): its own
name, never the agent's, so fabricwatch-vap.yaml (it matches the agent's user name) never holds it. */ -}}
{{- define "hostnet-rdma.fabricWatch.clearName" -}}
{{- printf "%s-clear" (include "hostnet-rdma.fabricWatch.name" . | trunc 57 | trimSuffix "-") -}}
{{- end -}}
