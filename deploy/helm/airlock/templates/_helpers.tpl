{{/* The prefix of every object's name: the release's name when it already
     says "airlock" (release "airlock" gives airlock-node, airlock-api ...,
     the names of deploy/kubernetes), else RELEASE-airlock. */}}
{{- define "airlock.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; "airlock.labels" takes (list $ "component"). */}}
{{- define "airlock.labels" -}}
{{- $ := index . 0 -}}
{{- $component := index . 1 -}}
{{ include "airlock.selector" . }}
app.kubernetes.io/component: {{ $component }}
app.kubernetes.io/part-of: airlock
app.kubernetes.io/version: {{ $.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" $.Chart.Name $.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The labels a selector matches: (list $ "component"). */}}
{{- define "airlock.selector" -}}
{{- $ := index . 0 -}}
{{- $component := index . 1 -}}
app.kubernetes.io/name: {{ printf "%s-%s" (include "airlock.fullname" $) $component }}
app.kubernetes.io/instance: {{ $.Release.Name }}
{{- end -}}

{{/* The Secret with cluster.key: the operator's, or the chart's. */}}
{{- define "airlock.clusterKeySecret" -}}
{{- default (printf "%s-cluster-key" (include "airlock.fullname" .)) .Values.clusterKey.existingSecret -}}
{{- end -}}

{{/* The Secret with conninfo (and password): the trial database's, or the
     operator's. */}}
{{- define "airlock.databaseSecret" -}}
{{- if .Values.postgresql.enabled -}}
{{- printf "%s-postgresql" (include "airlock.fullname" .) -}}
{{- else -}}
{{- required "externalDatabase.secretName: name the Secret with your PostgreSQL's conninfo (deploy/README.md), or set postgresql.enabled=true for a trial" .Values.externalDatabase.secretName -}}
{{- end -}}
{{- end -}}

{{/* conninfo without the password (a process list shows it) and the
     password as PGPASSWORD, which libpq reads: both programs' env. */}}
{{- define "airlock.databaseEnv" -}}
- name: AIRLOCK_CLUSTER_DB
  valueFrom:
    secretKeyRef:
      name: {{ include "airlock.databaseSecret" . }}
      key: conninfo
- name: PGPASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "airlock.databaseSecret" . }}
      key: password
      optional: true
{{- end -}}

{{/* An image's reference: (dict "image" .Values.node.image "root" $). */}}
{{- define "airlock.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* A value kept across upgrades: the existing Secret's key, else a new
     random one (helm template, and the first install, make a new one). */}}
{{- define "airlock.keepRandom" -}}
{{- $old := lookup "v1" "Secret" .root.Release.Namespace .secret -}}
{{- if and $old $old.data (hasKey $old.data .key) -}}
{{- index $old.data .key | b64dec -}}
{{- else -}}
{{- randAlphaNum .length -}}
{{- end -}}
{{- end -}}
