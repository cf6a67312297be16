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
{{- define "rota.extenderHost" -}}{{ include "rota.fullname" . }}-extender.{{ .Release.Namespace }}.svc{{- end -}}
{{- /* The URL kube-scheduler calls: scheduler.extenderURL, or the Service's name. */ -}}
{{- define "rota.schedulerExtenderURL" -}}{{ .Values.scheduler.extenderURL | default (include "rota.extenderURL" .) }}{{- end -}}
{{- /* The pod spec's network lines with hostNetwork. */ -}}
{{- define "rota.podNetwork" -}}
{{- if .Values.hostNetwork -}}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end -}}
{{- end -}}
{{- define "rota.extenderURL" -}}{{ if .Values.extender.insecureHTTP }}http{{ else }}https{{ end }}://{{ include "rota.extenderHost" . }}:{{ .Values.extender.port }}{{- end -}}
{{- /* "true" when cert-manager issues the extender's certificates:
       extender.tls.certManager.enabled, or when that is unset (null),
       admission.certManager.enabled. */ -}}
{{- define "rota.extenderCertManager" -}}
{{- $v := .Values.extender.tls.certManager.enabled -}}
{{- if kindIs "bool" $v -}}{{ $v }}{{- else -}}{{ .Values.admission.certManager.enabled }}{{- end -}}
{{- end -}}
{{- /* The chart-generated extender certificates (cert-manager off), as JSON:
       ca, serverCrt, serverKey, clientCrt, clientKey (base64). The Secrets
       already in the cluster are kept (lookup), so helm upgrade does not
       rotate them; they are generated (one CA, valid 10 years, for both)
       on install, and again when either Secret is missing or they no
       longer share a CA. Computed once per render (kept in .Values), so
       extender-tls.yaml and the scheduler's checksum see the same. */ -}}
{{- define "rota.extenderTLS" -}}
{{- if not (hasKey .Values "_extenderTLS") -}}
{{- $name := printf "%s-extender" (include "rota.fullname" .) -}}
{{- $svc := printf "%s.%s.svc" $name .Release.Namespace -}}
{{- $server := (lookup "v1" "Secret" .Release.Namespace (printf "%s-tls" $name)).data | default dict -}}
{{- $client := (lookup "v1" "Secret" .Release.Namespace (printf "%s-scheduler-tls" (include "rota.fullname" .))).data | default dict -}}
{{- $d := dict -}}
{{- if and (index $server "ca.crt") (index $server "tls.crt") (index $server "tls.key") (index $client "tls.crt") (index $client "tls.key") (eq (index $server "ca.crt") (index $client "ca.crt" | default "")) -}}
{{- $d = dict "ca" (index $server "ca.crt") "serverCrt" (index $server "tls.crt") "serverKey" (index $server "tls.key") "clientCrt" (index $client "tls.crt") "clientKey" (index $client "tls.key") -}}
{{- else -}}
{{- $ca := genCA (printf "%s-ca" $name) 3650 -}}
{{- $srv := genSignedCert $svc nil (list $svc (printf "%s.cluster.local" $svc) (printf "%s.%s" $name .Release.Namespace) $name) 3650 $ca -}}
{{- $cl := genSignedCert (printf "%s-scheduler" (include "rota.fullname" .)) nil nil 3650 $ca -}}
{{- $d = dict "ca" ($ca.Cert | b64enc) "serverCrt" ($srv.Cert | b64enc) "serverKey" ($srv.Key | b64enc) "clientCrt" ($cl.Cert | b64enc) "clientKey" ($cl.Key | b64enc) -}}
{{- end -}}
{{- $_ := set .Values "_extenderTLS" $d -}}
{{- end -}}
{{- toJson .Values._extenderTLS -}}
{{- end -}}
{{- /* Changes when the scheduler's CA or client certificate is replaced, so
       its pod restarts (kube-scheduler reads caFile only at start). With
       cert-manager the chart cannot see the certificate: renewals keep the
       CA, and the client certificate is re-read per connection. */ -}}
{{- define "rota.extenderTLSChecksum" -}}
{{- if eq (include "rota.extenderCertManager" .) "true" -}}cert-manager{{- else -}}
{{- $t := include "rota.extenderTLS" . | fromJson -}}{{ printf "%s/%s" $t.ca $t.clientCrt | sha256sum }}
{{- end -}}
{{- end -}}
{{- /* The pod asks for a Rota resource (any container, init containers
       included): the CEL the webhooks and the records policy send pods by. */ -}}
{{- define "rota.asksForRota" -}}
{{- printf `object.spec.containers.exists(c, has(c.resources.limits) &&
            c.resources.limits.exists(k, k.startsWith('%[1]s/'))) ||
          object.spec.containers.exists(c, has(c.resources.requests) &&
            c.resources.requests.exists(k, k.startsWith('%[1]s/'))) ||
          (has(object.spec.initContainers) && object.spec.initContainers.exists(c,
            (has(c.resources.limits) && c.resources.limits.exists(k, k.startsWith('%[1]s/'))) ||
            (has(c.resources.requests) && c.resources.requests.exists(k, k.startsWith('%[1]s/')))))` .Values.domain -}}
{{- end -}}
{{- /* Who writes Rota's records: the queue controller and the extender
       (admission.queueControllerUsers, else the extender's ServiceAccount),
       and the device plugins (their ServiceAccount), as CEL lists. */ -}}
{{- define "rota.extenderUsers" -}}
{{- $u := .Values.admission.queueControllerUsers | default (list (printf "system:serviceaccount:%s:%s-extender" .Release.Namespace (include "rota.fullname" .))) -}}
[{{ range $i, $x := $u }}{{ if $i }}, {{ end }}'{{ $x }}'{{ end }}]
{{- end -}}
{{- define "rota.devicePluginUsers" -}}
['system:serviceaccount:{{ .Release.Namespace }}:{{ include "rota.fullname" . }}-device-plugin']
{{- end -}}
