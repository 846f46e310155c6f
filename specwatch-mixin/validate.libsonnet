// The checks `specwatch mixin --config` makes of the values that reach Prometheus, for the
// jsonnet face: a selector that is PromQL label matchers, label names, no control character,
// and no `{{` where Prometheus reads a Go template (alert labels, the runbook's annotation).
// Each value the checks let through renders rules `promtool check rules` accepts.
//
// problems(config) lists what is wrong, each naming its key as `specwatch mixin` does.
local all(xs) = std.foldl(function(acc, x) acc && x, xs, true);
local isLetter(c) = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
local isDigit(c) = c >= '0' && c <= '9';
// C0, DEL and C1 controls, and the line and paragraph separators YAML also breaks lines at.
local isControl(c) =
  local n = std.codepoint(c);
  n < 32 || (n >= 127 && n < 160) || n == 8232 || n == 8233;
local printable(s) = std.isString(s) && all([!isControl(c) for c in std.stringChars(s)]);
local labelName(s) =
  std.isString(s) && s != '' && isLetter(s[0]) && !std.startsWith(s, '__')
  && all([isLetter(c) || isDigit(c) for c in std.stringChars(s)]);

// A PromQL selector read a character at a time: the matchers, or an error. Escapes are
// Go's (the character after the backslash; hex and octal digits are not counted), and a
// regex value is kept with its escapes undone for the parenthesis check below.
local escapes = { a: '', b: '', f: '', n: '', r: '', t: '', v: '', '\\': '\\', '"': '"' };
local escapeStarts = std.objectFields(escapes) + ['x', 'u', 'U', '0', '1', '2', '3', '4', '5', '6', '7'];
local step(st, c) =
  local at(state, changes={}) = st { state: state } + changes;
  local wrong = st { state: 'error' };
  if st.state == 'error' then st
  else if st.state == 'start' then
    if c == ' ' then st else if isLetter(c) then at('name', { name: c }) else wrong
  else if st.state == 'name' then
    if isLetter(c) || isDigit(c) then st { name+: c }
    else if c == ' ' then at('afterName')
    else if c == '=' || c == '!' then at('op', { op: c })
    else wrong
  else if st.state == 'afterName' then
    if c == ' ' then st else if c == '=' || c == '!' then at('op', { op: c }) else wrong
  else if st.state == 'op' then
    if st.op == '=' && c == '~' then at('afterOp', { op: '=~' })
    else if st.op == '=' && c == ' ' then at('afterOp')
    else if st.op == '=' && c == '"' then at('string', { value: '' })
    else if st.op == '!' && (c == '=' || c == '~') then at('afterOp', { op: '!' + c })
    else wrong
  else if st.state == 'afterOp' then
    if c == ' ' then st else if c == '"' then at('string', { value: '' }) else wrong
  else if st.state == 'string' then
    if c == '\\' then at('escape')
    else if c == '"' then at('afterString', {
      matchers+: [{ name: st.name, op: st.op, value: st.value }],
    })
    else st { value+: c }
  else if st.state == 'escape' then
    if std.member(escapeStarts, c) then at('string', { value+: (if std.objectHas(escapes, c) then escapes[c] else '') })
    else wrong
  else if st.state == 'afterString' then
    if c == ' ' then st else if c == ',' then at('start') else wrong
  else wrong;
local parsed(selector) =
  std.foldl(step, std.stringChars(selector), { state: 'start', matchers: [] });

// Whether a regex's parentheses and brackets close: Prometheus refused every rule over
// `job=~"("`. (The rest of RE2's syntax is checked by `specwatch mixin` and promtool.)
local regexStep(st, c) =
  if st.escaped then st { escaped: false }
  else if c == '\\' then st { escaped: true }
  else if st.inClass then st { inClass: c != ']' }
  else if c == '[' then st { inClass: true }
  else if c == '(' then st { depth+: 1 }
  else if c == ')' then st { depth+: -1, bad: st.bad || st.depth == 0 }
  else st;
local balanced(regex) =
  local end = std.foldl(
    regexStep, std.stringChars(regex), { escaped: false, inClass: false, depth: 0, bad: false }
  );
  !end.bad && end.depth == 0 && !end.inClass && !end.escaped;

local selectorProblems(selector) =
  local st = parsed(selector);
  if !printable(selector) then ['selector: a control character is not allowed']
  else if st.state != 'afterString' then ['selector: must be PromQL label matchers, e.g. job="specwatch"']
  else [
    'selector: %s: a reserved label name (__name__ would name the metric)' % m.name
    for m in st.matchers
    if std.startsWith(m.name, '__')
  ] + [
    'selector: %s: invalid regular expression (unbalanced parentheses or brackets)' % m.name
    for m in st.matchers
    if (m.op == '=~' || m.op == '!~') && !balanced(m.value)
  ];

local templateProblems(key, value) =
  if !printable(value) then ['%s: a control character is not allowed' % key]
  else if std.findSubstr('{{', value) != [] then
    ["%s: '{{' is not allowed: Prometheus reads it as a template" % key]
  else [];

{
  problems(config)::
    selectorProblems(config.selector)
    + templateProblems('runbookUrlTemplate', config.runbookUrlTemplate)
    + templateProblems('runbookUrlBase', config.runbookUrlBase)
    + templateProblems('grafanaUrl', config.grafanaUrl)
    + std.flattenArrays([
      (if labelName(key) then [] else ['alertLabels: %s: not a Prometheus label name' % key])
      + templateProblems('alertLabels: %s' % key, config.alertLabels[key])
      for key in std.objectFields(config.alertLabels)
    ])
    + (if labelName(config.clusterLabel) then [] else ['clusterLabel: not a Prometheus label name'])
    + ['dashboardTags: a control character is not allowed' for tag in config.dashboardTags if !printable(tag)],
}
