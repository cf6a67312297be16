{{- define "rota.name" -}}rota{{- end -}}
{{- define "rota.fullname" -}}{{- if contains "rota" .Release.Name -}}{{ .Release.Name | trunc 50 | trimSuffix "-" }}{{- else -}}{{ printf "%s-rota" .Release.Name | trunc 50 | trimSuffix "-" }}{{- end -}}{{- end -}}
{{- define "rota.labels" -}}
app.kubernetes.io/name: rota
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
{{- define "rota.selector" -}}
app.kubernetes.io/name: rota
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}
{{- define "rota.image" -}}
{{- $tag := default .root.Chart.AppVersion .root.Values.image.tag -}}
{{- $repo := printf "%s-%s" .root.Values.image.repository .binary -}}
{{- if .root.Values.image.registry -}}{{ printf "%s/%s:%s" .root.Values.image.registry $repo $tag }}{{- else -}}{{ printf "%s:%s" $repo $tag }}{{- end -}}
{{- end -}}
{{- define "rota.extenderURL" -}}http://{{ include "rota.fullname" . }}-extender.{{ .Release.Namespace }}.svc:{{ .Values.extender.port }}{{- end -}}
