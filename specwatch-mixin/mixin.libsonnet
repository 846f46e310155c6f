// specwatch's alerts, recording rules and Grafana dashboards as a monitoring mixin.
//
// The rules and dashboards are rendered by specwatch's Python into rendered.json (`make mixin`
// keeps the defaults' here); this file only puts your _config's strings into them. Thresholds
// and the speed budget are numbers inside the rules' text: set them in a specwatch mixin
// config, render it with `specwatch mixin --config FILE --out DIR` (it writes
// DIR/rendered.json beside the rules), and point `rendered` at that file.
//
//   local specwatch = (import 'specwatch-mixin/mixin.libsonnet') + {
//     _config+:: {
//       selector: 'job="specwatch", namespace="llm"',
//       alertLabels: { team: 'ml' },
//       // rendered: import 'my-specwatch/rendered.json',  // your thresholds, speed budget
//     },
//   };
//   specwatch.prometheusAlerts, specwatch.prometheusRules, specwatch.grafanaDashboards
//   (and specwatch.grafanaDashboardsV2, the same as Grafana 12+ v2 resources)
local validate = import 'validate.libsonnet';

{
  _config+:: {
    // The rendering the rest is filled into: the defaults', or `specwatch mixin`'s for yours.
    rendered: import 'rendered.json',
    local defaults = self.rendered.defaults,
    // PromQL label matchers on every specwatch series, written as `a="x", b="y"`.
    selector: defaults.selector,
    // Labels every alert carries, for Alertmanager routing (severity is set per alert).
    alertLabels: defaults.alertLabels,
    // Where the runbook is served (absolute, so a notification can link it); by default this
    // release's runbook in specwatch's repository.
    runbookUrlBase: defaults.runbookUrlBase,
    // Where each alert's runbook is: {base}, {alertname} and {alertname_lower} are filled in.
    runbookUrlTemplate: defaults.runbookUrlTemplate,
    // Grafana's address: each alert's dashboard_url opens its dashboard there.
    grafanaUrl: defaults.grafanaUrl,
    // Series of several clusters in one place (Thanos, Mimir), told apart by clusterLabel.
    multiCluster: defaults.multiCluster,
    clusterLabel: defaults.clusterLabel,
    dashboardUidPrefix: defaults.dashboardUidPrefix,
    dashboardTags: defaults.dashboardTags,
  },

  local config = self._config,
  local placeholder = config.rendered.placeholders,
  local shape = if config.multiCluster then config.rendered.multi_cluster else config.rendered.single,

  local runbookUrl(name) = std.foldl(
    function(acc, pair) std.strReplace(acc, pair[0], pair[1]),
    [
      ['{alertname_lower}', std.asciiLower(name)],
      ['{alertname}', name],
      ['{base}', std.rstripChars(config.runbookUrlBase, '/')],
    ],
    config.runbookUrlTemplate
  ),
  // The runbook itself: the address without the per-alert fragment.
  local runbookIndex = std.split(runbookUrl(''), '#')[0],
  // What each placeholder of the rendering becomes (exporter/mixin/jsonnet.py marks them).
  local values = {
    selector: config.selector,
    cluster: config.clusterLabel,
    uid: config.dashboardUidPrefix,
    grafana: std.rstripChars(config.grafanaUrl, '/'),
  },

  local fill(value) =
    if std.isArray(value) then std.map(fill, value)
    else if !std.isObject(value) then value
    else if std.objectHas(value, '@fill') then
      std.join('', [if std.isArray(part) then values[part[0]] else part for part in value['@fill']])
    else if std.objectHas(value, '@runbook') then
      if value['@runbook'] == '' then runbookIndex else runbookUrl(value['@runbook'])
    else if std.objectHas(value, '@tags') then config.dashboardTags
    else std.mapWithKey(function(_, v) fill(v), value),

  assert !std.objectHas(self._config, 'thresholds') :
         'thresholds: set them in a specwatch mixin config, render it with '
         + '`specwatch mixin --config FILE --out DIR` and set _config.rendered to '
         + "import 'DIR/rendered.json' (docs/alerts.md, jsonnet)",
  assert !std.objectHas(self._config.alertLabels, 'severity') :
         'alertLabels: severity is set by each alert, routing depends on it',
  local refused = validate.problems(config),
  assert refused == [] : refused[0],

  prometheusRules+:: { groups+: fill(shape.rules) },

  prometheusAlerts+:: {
    groups+: [
      group { rules: [rule { labels+: config.alertLabels } for rule in group.rules] }
      for group in fill(shape.alerts)
    ],
  },

  grafanaDashboards+:: fill(shape.dashboards),
  // The same dashboards as Grafana 12+ v2 resources (dashboard.grafana.app/v2).
  grafanaDashboardsV2+:: fill(shape.dashboards_v2),
}
