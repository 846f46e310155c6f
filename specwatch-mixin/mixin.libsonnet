// specwatch's alerts, recording rules and Grafana dashboards as a monitoring mixin.
//
// The rules and dashboards are rendered by specwatch's Python (`make mixin` writes
// rendered.json); this file only puts your _config into them, so `specwatch mixin` with the
// same settings gives the same rules. Thresholds are part of the rendered expressions: to
// change them, render a YAML config with `specwatch mixin --config FILE --out DIR` instead.
//
//   local specwatch = (import 'specwatch-mixin/mixin.libsonnet') + {
//     _config+:: { selector: 'job="specwatch", namespace="llm"', alertLabels: { team: 'ml' } },
//   };
//   specwatch.prometheusAlerts, specwatch.prometheusRules, specwatch.grafanaDashboards
local rendered = import 'rendered.json';
local placeholder = rendered.placeholders;

{
  _config+:: {
    // PromQL label matchers on every specwatch series, written as `a="x", b="y"`.
    selector: 'job="specwatch"',
    // Labels every alert carries, for Alertmanager routing (severity is set per alert).
    alertLabels: {},
    // Where each alert's runbook is: {alertname} and {alertname_lower} are filled in.
    runbookUrlTemplate: 'alerts/runbook.md#{alertname_lower}',
    // Series of several clusters in one place (Thanos, Mimir), told apart by clusterLabel.
    multiCluster: false,
    clusterLabel: 'cluster',
    dashboardUidPrefix: 'specwatch',
    dashboardTags: ['specwatch'],
  },

  local config = self._config,
  local shape = if config.multiCluster then rendered.multi_cluster else rendered.single,

  local runbookUrl(name) = std.strReplace(
    std.strReplace(config.runbookUrlTemplate, '{alertname_lower}', std.asciiLower(name)),
    '{alertname}',
    name
  ),
  // The runbook itself: the address without the per-alert fragment.
  local runbookIndex = std.split(runbookUrl(''), '#')[0],

  local fillString(text) =
    if std.startsWith(text, placeholder.runbook) then
      local name = std.substr(text, std.length(placeholder.runbook), std.length(text));
      if name == '' then runbookIndex else runbookUrl(name)
    else
      std.foldl(
        function(acc, pair) std.strReplace(acc, pair[0], pair[1]),
        [
          [placeholder.selector, config.selector],
          [placeholder.cluster, config.clusterLabel],
          [placeholder.uid + '-', config.dashboardUidPrefix + '-'],
        ],
        text
      ),

  local fill(value) =
    if std.isString(value) then fillString(value)
    else if std.isArray(value) then
      if value == [placeholder.tag] then config.dashboardTags else std.map(fill, value)
    else if std.isObject(value) then std.mapWithKey(function(_, v) fill(v), value)
    else value,

  assert !std.objectHas(self._config.alertLabels, 'severity') :
         'alertLabels: severity is set by each alert, routing depends on it',

  prometheusRules+:: { groups+: fill(shape.rules) },

  prometheusAlerts+:: {
    groups+: [
      group { rules: [rule { labels+: config.alertLabels } for rule in group.rules] }
      for group in fill(shape.alerts)
    ],
  },

  grafanaDashboards+:: fill(shape.dashboards),
}
