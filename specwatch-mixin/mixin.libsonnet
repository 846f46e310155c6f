// specwatch's alerts, recording rules and Grafana dashboards as a monitoring mixin.
//
// The rules and dashboards are rendered by specwatch's Python (`make mixin` writes
// rendered.json); this file only puts your _config into them, thresholds included, so
// `specwatch mixin` with the same settings (its YAML `thresholds:` in snake_case) gives the
// same rules, descriptions and dashboard threshold lines. The speed budget (`speed_slo`) is
// rendered only by `specwatch mixin --config FILE --out DIR`.
//
//   local specwatch = (import 'specwatch-mixin/mixin.libsonnet') + {
//     _config+:: {
//       selector: 'job="specwatch", namespace="llm"',
//       alertLabels: { team: 'ml' },
//       thresholds+: { slowerThanBaselineSpeedup: 0.95, slowerFor: '30m' },
//     },
//   };
//   specwatch.prometheusAlerts, specwatch.prometheusRules, specwatch.grafanaDashboards
local pyformat = import 'pyformat.libsonnet';
local validate = import 'validate.libsonnet';
local rendered = import 'rendered.json';
local placeholder = rendered.placeholders;
local thresholds = rendered.thresholds;

// A Prometheus duration: 10m, 1h30m, 500ms.
local digitsEnd(s, i) =
  if i < std.length(s) && s[i] >= '0' && s[i] <= '9' then digitsEnd(s, i + 1) else i;
local durationFrom(s, i) =
  local j = digitsEnd(s, i);
  local rest(k) = k == std.length(s) || durationFrom(s, k);
  j > i && (
    std.substr(s, j, 2) == 'ms' && rest(j + 2)
    || j < std.length(s) && std.findSubstr(s[j], 'smhdwy') != [] && rest(j + 1)
  );
local isDuration(value) = std.isString(value) && value != '' && durationFrom(value, 0);

// How the rendering writes a threshold, by the form its token names (exporter/mixin/jsonnet.py).
local written = {
  text(value): value,
  int(value): std.toString(value),
  str(value): pyformat.str(value),
  g(value): pyformat.g(value),
  percent(value): pyformat.g(value * 100),
  number(value): value,
  tenthAbove(value): pyformat.round(value * 1.1, 3),
};

{
  _config+:: {
    // PromQL label matchers on every specwatch series, written as `a="x", b="y"`.
    selector: 'job="specwatch"',
    // Labels every alert carries, for Alertmanager routing (severity is set per alert).
    alertLabels: {},
    // Where the runbook is served (absolute, so a notification can link it); by default this
    // release's runbook in specwatch's repository.
    runbookUrlBase: rendered.links.runbookUrlBase,
    // Where each alert's runbook is: {base}, {alertname} and {alertname_lower} are filled in.
    runbookUrlTemplate: rendered.links.runbookUrlTemplate,
    // Grafana's address: each alert's dashboard_url opens its dashboard there.
    grafanaUrl: rendered.links.grafanaUrl,
    // Series of several clusters in one place (Thanos, Mimir), told apart by clusterLabel.
    multiCluster: false,
    clusterLabel: 'cluster',
    dashboardUidPrefix: 'specwatch',
    dashboardTags: ['specwatch'],
    // When an alert fires, as `specwatch mixin` takes them under `thresholds:`; set the ones
    // you change with `thresholds+: {...}`. collapsedAcceptLength (accept length at or below
    // it: collapsed), lowAcceptFraction (below this share of the expected accept length:
    // low), slowerThanBaselineSpeedup, draftingOffSpeedup (the same while drafting is off:
    // the cost of keeping speculation ready tolerated), noBenefitShare and
    // noBenefitMinRequests (requests without benefit), and how long each must hold:
    // collapsedFor, lowAcceptFor, slowerFor (both speedups), noBenefitFor. noBenefitWindow is
    // the exporter's and fixed.
    thresholds: thresholds.defaults,
  },

  local config = self._config,
  local shape = if config.multiCluster then rendered.multi_cluster else rendered.single,
  local t = thresholds.defaults + config.thresholds,
  // What is wrong with config.thresholds, each naming its key, as `specwatch mixin` checks.
  local problem(key, ok, message) = if ok then [] else ['thresholds.%s: %s' % [key, message]],
  local number(key, ok, message) = problem(key, std.isNumber(t[key]) && ok(t[key]), message),
  local fixed = thresholds.defaults.noBenefitWindow,
  local known = std.objectFields(thresholds.defaults),
  local problems = std.flattenArrays(
    [
      problem(key, false, 'not a threshold; they are %s' % std.join(', ', known))
      for key in std.objectFields(config.thresholds)
      if !std.objectHas(thresholds.defaults, key)
    ] + [
      number(
        'collapsedAcceptLength',
        function(v) 1 <= v && v < thresholds.lowestFloor,
        "must be at least 1 and below every algorithm's accept-length floor (%s)"
        % pyformat.g(thresholds.lowestFloor)
      ),
      number('lowAcceptFraction', function(v) 0 < v && v <= 1, 'must be above 0 and at most 1'),
      number('slowerThanBaselineSpeedup', function(v) v > 0, 'must be above 0'),
      number(
        'draftingOffSpeedup',
        function(v) 0 < v && v <= t.slowerThanBaselineSpeedup,
        'must be above 0 and at most slowerThanBaselineSpeedup'
      ),
      number('noBenefitShare', function(v) 0 < v && v < 1, 'must be above 0 and below 1'),
      number(
        'noBenefitMinRequests',
        function(v) v >= 1 && v == std.floor(v),
        'must be a whole number, at least 1'
      ),
      problem('noBenefitWindow', t.noBenefitWindow == fixed, "is %s, as the exporter's" % fixed),
    ] + [
      problem(key, isDuration(t[key]), 'must be a Prometheus duration, e.g. 10m')
      for key in ['collapsedFor', 'lowAcceptFor', 'slowerFor', 'noBenefitFor']
    ]
  ),
  // Each token of a threshold in text, with the user's value written as Python writes it.
  local thresholdTexts = [
    [token, written[thresholds.texts[token][1]](t[thresholds.texts[token][0]])]
    for token in std.objectFields(thresholds.texts)
  ],

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

  local fillString(text) =
    if std.startsWith(text, placeholder.runbook) then
      local name = std.substr(text, std.length(placeholder.runbook), std.length(text));
      if name == '' then runbookIndex else runbookUrl(name)
    else
      std.foldl(
        function(acc, pair) std.strReplace(acc, pair[0], pair[1]),
        thresholdTexts + [
          [placeholder.selector, config.selector],
          [placeholder.grafana, std.rstripChars(config.grafanaUrl, '/')],
          [placeholder.cluster, config.clusterLabel],
          [placeholder.uid + '-', config.dashboardUidPrefix + '-'],
        ],
        text
      ),

  local fill(value) =
    if std.isString(value) && std.objectHas(thresholds.numbers, value) then
      local number = thresholds.numbers[value];
      written[number[1]](t[number[0]])
    else if std.isString(value) then fillString(value)
    else if std.isArray(value) then
      if value == [placeholder.tag] then config.dashboardTags else std.map(fill, value)
    else if std.isObject(value) then std.mapWithKey(function(_, v) fill(v), value)
    else value,

  assert !std.objectHas(self._config.alertLabels, 'severity') :
         'alertLabels: severity is set by each alert, routing depends on it',
  assert problems == [] : problems[0],
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
}
