{{- define "tally.labels" -}}
app.kubernetes.io/name: tally
app.kubernetes.io/part-of: tally
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "tally.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "tally.besideKyverno" -}}
{{- if eq .Values.mode "besideKyverno" }}true{{ else if eq .Values.mode "standalone" }}{{ else }}{{ fail (printf "mode %q: want standalone or besideKyverno" .Values.mode) }}{{ end -}}
{{- end }}

{{/* A file of files/ with tally's namespace replaced by the release's. */}}
{{- define "tally.file" -}}
{{ .root.Files.Get .path | replace "namespace: tally-system" (printf "namespace: %s" .root.Release.Namespace) }}
{{- end }}

{{- define "tally.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  seccompProfile:
    type: RuntimeDefault
{{- end }}

{{- define "tally.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  runAsNonRoot: true
  capabilities:
    drop: [ALL]
  seccompProfile:
    type: RuntimeDefault
{{- end }}

{{- define "tally.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
  initialDelaySeconds: 5
  periodSeconds: 10
readinessProbe:
  httpGet:
    path: /readyz
    port: metrics
  periodSeconds: 5
{{- end }}
