// Writes deploy/kubernetes/base/prometheus-rule.yaml: the Prometheus Operator's PrometheusRule whose groups are
// deploy/prometheus/alerts.yml's, text and comments alike, so the alerts have one source. Kustomize cannot wrap a
// file in a custom resource by itself (its generators make ConfigMaps and Secrets only). Run it after changing the
// alerts: `node scripts/prometheus-rule.mjs`; test/deploy/kubernetes.deploy-spec.ts fails while the two differ.
import { readFileSync, writeFileSync } from 'node:fs';

const SOURCE = 'deploy/prometheus/alerts.yml';
const TARGET = 'deploy/kubernetes/base/prometheus-rule.yaml';

const alerts = readFileSync(SOURCE, 'utf8');
// From `groups:` on: the comments above it speak of Compose's prometheus.yml.
const groups = alerts.slice(alerts.search(/^groups:/m));
const indented = groups.replace(/^(?=.)/gm, '  ');

writeFileSync(
  TARGET,
  `# DO NOT EDIT. Generated from ${SOURCE} by \`node scripts/prometheus-rule.mjs\`.
# What each alert means and what to do when it fires: docs/operations.md, "Metrics and alerts".
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: igs
  labels:
    app.kubernetes.io/name: igs
    app.kubernetes.io/component: monitoring
spec:
${indented}`,
);
