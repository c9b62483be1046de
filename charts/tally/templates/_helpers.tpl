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

{{- /*
tally.crds chooses the CRDs this release installs, as JSON:
{"install": [files of files/crd], "foreign": [names of CRDs left alone]}.
With crds.install=false, none. Else the CRDs of the mode (beside Kyverno:
only the four intermediate report kinds Kyverno 1.13+ no longer installs;
Kyverno's reports.kyverno.io kinds never), each unless it already exists
without being this release's: Helm would refuse to install over it ("exists
and cannot be imported into the current release"), and tally reads and
writes the same API through the existing definition. `helm template` and
client-side dry runs see no cluster: they render every CRD of the mode.
*/ -}}
{{- define "tally.crds" -}}
{{- $beside := include "tally.besideKyverno" . }}
{{- $install := list }}
{{- $foreign := list }}
{{- if .Values.crds.install }}
{{- range $path, $_ := .Files.Glob "files/crd/*.yaml" }}
{{- $base := base $path }}
{{- /* BackgroundScanReports never reach the API server: no CRD for them. */}}
{{- if and (not (hasPrefix "reports.kyverno.io_" $base)) (not (hasSuffix "backgroundscanreports.yaml" $base)) (not $beside) }}
{{- /* controller-gen names the file <group>_<plural>.yaml; the CRD is <plural>.<group>. */}}
{{- $parts := splitn "_" 2 (trimSuffix ".yaml" $base) }}
{{- $name := printf "%s.%s" $parts._1 $parts._0 }}
{{- $existing := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" $name }}
{{- if or (not $existing) (include "tally.ownedByRelease" (dict "obj" $existing "root" $)) }}
{{- $install = append $install $path }}
{{- else }}
{{- $foreign = append $foreign $name }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson (dict "install" $install "foreign" $foreign) }}
{{- end }}

{{- /* tally.ownedByRelease is "true" when .obj carries the ownership metadata Helm checks before it updates an existing object for this release. */ -}}
{{- define "tally.ownedByRelease" -}}
{{- $labels := .obj.metadata.labels | default dict }}
{{- $annotations := .obj.metadata.annotations | default dict }}
{{- if and (eq (get $labels "app.kubernetes.io/managed-by") "Helm") (eq (get $annotations "meta.helm.sh/release-name") .root.Release.Name) (eq (get $annotations "meta.helm.sh/release-namespace") .root.Release.Namespace) }}true{{ end }}
{{- end }}
