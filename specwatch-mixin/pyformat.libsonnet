// Python's number formatting, in jsonnet: `specwatch mixin` writes a threshold with str(),
// format(x, 'g') or round(x, n), and the same threshold set in _config must read the same.
//
// Digits come from the decimal jsonnet itself writes for a number (17 significant digits, or
// every digit of an integral one). Python rounds the exact binary value: where those digits
// end in a tie (1.045 * 1.1 to three places), the exact product of Dekker's algorithm tells
// which side of the tie the number is, and only an exact tie goes to the even digit. str()
// is exact up to 15 significant digits; beyond that a tie is taken as exact.

// x (> 0) as its significant digits without trailing zeros and the power of ten of the first.
local decimal(x) =
  local parts = std.splitLimit(std.toString(x), 'e', 1);
  local power =
    if std.length(parts) == 1 then 0
    else if std.startsWith(parts[1], '+') then std.parseInt(std.substr(parts[1], 1, 9))
    else std.parseInt(parts[1]);
  local halves = std.splitLimit(parts[0], '.', 1);
  local whole = halves[0];
  local all = whole + (if std.length(halves) == 2 then halves[1] else '');
  local significant = std.lstripChars(all, '0');
  local digits = std.rstripChars(significant, '0');
  local exponent = power + std.length(whole) - 1 - (std.length(all) - std.length(significant));
  { digits: digits, exponent: exponent };

// a * b as p + error, both doubles, exactly (Dekker: each factor split into halves).
local split(a) =
  local c = 134217729 * a;
  local high = c - (c - a);
  [high, a - high];
local exactProduct(a, b) =
  local p = a * b;
  local x = split(a);
  local y = split(b);
  [p, ((x[0] * y[0] - p) + x[0] * y[1] + x[1] * y[0]) + x[1] * y[1]];

// The sign of x - m * 10^q, where m and the power of ten are exact doubles; else 0.
local side(x, m, q) =
  local difference =
    if m >= std.pow(2, 53) || std.abs(q) > 22 then 0
    else if q < 0 then
      local product = exactProduct(x, std.pow(10, -q));
      (product[0] - m) + product[1]
    else
      local product = exactProduct(m, std.pow(10, q));
      (x - product[0]) - product[1];
  if difference > 0 then 1 else if difference < 0 then -1 else 0;

// The digits one up: '1299' -> '13' (trailing zeros dropped), '99' -> '1' a power higher.
local increment(digits, exponent) =
  local head = std.rstripChars(digits, '9');
  if head == '' then { digits: '1', exponent: exponent + 1 }
  else
    local last = std.parseInt(head[std.length(head) - 1]);
    local up = std.substr(head, 0, std.length(head) - 1) + std.toString(last + 1);
    { digits: up, exponent: exponent };

// x, whose decimal is d, to n significant digits; no digits at all when it rounds to zero.
local rounded(x, d, n) =
  local digits = d.digits;
  local exponent = d.exponent;
  if n < 0 then { digits: '', exponent: exponent }
  else if std.length(digits) <= n then d
  else
    local head = std.substr(digits, 0, n);
    local rest = std.substr(digits, n, std.length(digits) - n);
    local tie = side(x, std.parseInt(head + '5'), exponent - n);
    local odd = n > 0 && std.parseInt(digits[n - 1]) % 2 == 1;
    local up =
      if rest != '5' then rest[0] >= '5'
      else tie > 0 || tie == 0 && odd;
    if up then increment(head, exponent)
    else { digits: std.rstripChars(head, '0'), exponent: exponent };

local zeros(n) = std.join('', std.makeArray(std.max(n, 0), function(_) '0'));

// The number d stands for, as JSON reads it (the nearest double).
local value(d) =
  if d.digits == '' then 0
  else std.parseJson(d.digits + 'e' + std.toString(d.exponent - std.length(d.digits) + 1));

// Python's layout: 1.5e-05 or 0.00015, and '1.0' for an integral value when pointZero.
local layout(d, scientific, pointZero) =
  local n = std.length(d.digits);
  local e = d.exponent;
  if scientific then
    local power = std.toString(std.abs(e));
    d.digits[0] + (if n > 1 then '.' + std.substr(d.digits, 1, n - 1) else '')
    + 'e' + (if e < 0 then '-' else '+') + zeros(2 - std.length(power)) + power
  else if e < 0 then '0.' + zeros(-e - 1) + d.digits
  else if n <= e + 1 then d.digits + zeros(e + 1 - n) + (if pointZero then '.0' else '')
  else std.substr(d.digits, 0, e + 1) + '.' + std.substr(d.digits, e + 1, n - e - 1);

// The fewest significant digits, from `from` on, that read back as x.
local shortest(x, d, from) =
  local candidate = rounded(x, d, from);
  if from >= std.length(d.digits) || value(candidate) == x then candidate
  else shortest(x, d, from + 1);

local signed(x, positive, zero) =
  if x == 0 then zero else if x < 0 then '-' + positive(-x) else positive(x);

{
  // Python's str(x) of a float: 1.0, 1.05, 0.7, 1e-05.
  str(x)::
    signed(x, function(v)
      local d = shortest(v, decimal(v), 1);
      layout(d, d.exponent < -4 || d.exponent >= 16, true), '0.0'),

  // Python's format(x, 'g'): six significant digits, 1, 0.7, 1.23457e+06.
  g(x)::
    signed(x, function(v)
      local d = rounded(v, decimal(v), 6);
      layout(d, d.exponent < -4 || d.exponent >= 6, false), '0'),

  // Python's round(x, places) of a float.
  round(x, places)::
    if x == 0 then 0
    else if x < 0 then -self.round(-x, places)
    else
      local d = decimal(x);
      value(rounded(x, d, d.exponent + 1 + places)),
}
