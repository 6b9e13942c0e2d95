//! The Lua scripts: every write is one script, so it is atomic, and every script reads the
//! time from Redis (`TIME`), so no replica's clock decides a deadline.
//!
//! Keys, under the configured prefix `P`:
//!
//! - `P:t:<provider>:<model>` and `P:c:<credential id>`: one hash per shared record (see
//!   `wire`), expiring by itself an hour after its last deadline (or its last write);
//! - `P:index`: the set of record names, for resyncs and resets of everything;
//! - `P:seq`: the fleet-wide write counter, each record's `gen`;
//! - `P:epoch`: names this Redis's copy of the records (set by the first replica to find
//!   none); a replica that sees it change knows the records were lost and writes back its own;
//! - `P:replica:<id>`: each replica's heartbeat, expiring unless renewed; `P:replicas` the set
//!   of their ids;
//! - `P:pace:<lane>`: one hash per paced lane (a provider, or `provider/credential`): the
//!   fleet's requests and tokens buckets (`l0`, `l1`, refilled from `t`), the windows the
//!   provider's headers state (`h<i>` left, `h<i>l` limit, `h<i>r` reset, `h<i>p` a probe
//!   window after a reset) and a 429's `hold`; see `switchyard_pacing::fleet`;
//! - `P:changes`: the channel every write is published on (and pacing's holds and windows).
//!
//! Each script answers with the JSON it published (or would have), so the writer learns the
//! merged record and its generation without waiting for its own message. The scripts name
//! their keys through the prefix argument rather than `KEYS`: a single Redis (or a primary
//! with replicas) is supported, a Redis Cluster is not.

use redis::Script;

/// Shared by every script: the server's now in milliseconds, and a record's fields.
const PRELUDE: &str = r#"
local prefix = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function fmt(n) return string.format('%.0f', n) end
local function hash(key)
  -- A key of another type under the prefix (not a record) reads as no record.
  local flat = redis.pcall('HGETALL', key)
  if type(flat) ~= 'table' or flat.err then return {} end
  local out = {}
  for i = 1, #flat, 2 do out[flat[i]] = flat[i + 1] end
  return out
end
local function num(v)
  if v == nil or v == '' then return nil end
  return tonumber(v)
end
"#;

/// The most records of targets (and of keys' rests for one) the fleet keeps in Redis: twice
/// what a replica keeps in memory ([`MemoryStore::DEFAULT_TARGETS`]), for the keys' rests. A
/// record past it stays with the replica that wrote it (the write answers `full`).
///
/// [`MemoryStore::DEFAULT_TARGETS`]: switchyard::health::MemoryStore::DEFAULT_TARGETS
pub const MOST_RECORDS: usize = 2 * switchyard::health::MemoryStore::DEFAULT_TARGETS;

/// Merges changed fields into a record. ARGV: prefix, name, replica, the floor of the record's
/// lifetime in ms, the most records the fleet keeps when this one is bounded ([`MOST_RECORDS`];
/// `0`: not bounded), then
/// field/value pairs with times relative to now.
///
/// The rules: status, reason and since are the last writer's (since kept when the status is
/// the same); the failure time, the provider's reset and a cooldown only ever move later; a
/// breaker is never closed by a merge (closing is a clear) and, once not closed, takes the
/// write whose open time or lease ends later, or that a failed probe made (it reopens the
/// breaker before the probe's lease would end), except that a probe (a half-open write) takes
/// no running lease or open time of another replica's; failed probes only grow. A write whose
/// status began before an operator's reset of the record ran is refused, answered as a forget.
const PUT: &str = r#"
local name, me, floor, most = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local key = prefix .. ':' .. name
local cur = hash(key)
local index = prefix .. ':index'
-- A new record: the names of records that expired stay in the index until a resync, so each
-- new one drops some it finds gone. Past the most the fleet keeps, a new record the writer
-- calls bounded (a target the configuration does not name, or a key's rest for one) is
-- refused: clients name targets, and made-up ones would each be kept an hour. A configured
-- target's record and a key's own are always kept.
if cur.gen == nil then
  local full = most > 0 and redis.call('SCARD', index) >= most
  local sample = 8
  if full then sample = 64 end
  for _, old in ipairs(redis.call('SRANDMEMBER', index, sample)) do
    if redis.call('EXISTS', prefix .. ':' .. old) == 0 then redis.call('SREM', index, old) end
  end
  if full and redis.call('SCARD', index) >= most then
    return cjson.encode({op = 'full', key = name, gen = 0, now = now, by = me})
  end
end
local new = {}
for i = 6, #ARGV, 2 do new[ARGV[i]] = ARGV[i + 1] end
for _, f in ipairs({'since', 'failed', 'retry', 'cool', 'bu'}) do
  local rel = num(new[f])
  if rel ~= nil then new[f] = fmt(now + rel) end
end
-- What a replica learned before an operator's reset forgot it (its write was on its way, or a
-- replica wrote back what it knew to a Redis restarted empty, `wb`) is not kept: the writer
-- forgets it too.
local reset_at = math.max(num(redis.call('GET', prefix .. ':reset:' .. name)) or 0,
  num(redis.call('GET', prefix .. ':reset_all')) or 0)
local before = new.wb ~= nil or (num(new.since) ~= nil and num(new.since) < reset_at)
if reset_at > 0 and before then
  -- What Redis holds (written since the reset) stands, and the writer takes it.
  if cur.gen ~= nil then
    return cjson.encode({op = 'put', key = name, gen = tonumber(cur.gen), now = now, by = cur.by, rec = cur})
  end
  return cjson.encode({op = 'forget', key = name, gen = 0, now = now, by = me})
end
local out = {}
if new.st ~= nil then
  if new.st ~= cur.st or cur.since == nil then out.since = new.since end
  out.st = new.st
end
if new.re ~= nil then out.re = new.re end
for _, f in ipairs({'failed', 'retry', 'cool'}) do
  local old = num(cur[f])
  if new[f] == '' then
    -- No time known: a running one stands, an expired one goes.
    if old ~= nil and old <= now then out[f] = '' end
  elseif new[f] ~= nil then
    if old == nil or tonumber(new[f]) > old then out[f] = new[f] end
  end
end
if new.ro ~= nil and tonumber(new.ro) > (num(cur.ro) or 0) then out.ro = new.ro end
if new.br ~= nil and new.br ~= 'closed' then
  local closed = cur.br == nil or cur.br == 'closed'
  -- A probe that failed reopens the breaker (its count of failed probes grew), though the
  -- probe's lease it ends may have run later than the new open time.
  local reopened = new.ro ~= nil and tonumber(new.ro) > (num(cur.ro) or 0)
  -- A probe takes no live lease of another replica's, nor an open time another replica set
  -- that still runs: of replicas that probe at once, the first write holds the probe, and the
  -- others learn it from their writes' answers.
  local held = new.br == 'half_open' and cur.pr ~= nil and cur.pr ~= me
    and (cur.br == 'half_open' or cur.br == 'open') and (num(cur.bu) or 0) > now
  if not held and (closed or reopened or (num(new.bu) or 0) >= (num(cur.bu) or 0)) then
    out.br = new.br
    out.bu = new.bu
    out.pr = me
  end
end
local gen = redis.call('INCR', prefix .. ':seq')
out.gen = tostring(gen)
out.by = me
local flat = {}
for k, v in pairs(out) do
  flat[#flat + 1] = k
  flat[#flat + 1] = v
  cur[k] = v
end
redis.call('HSET', key, unpack(flat))
local last = now
for _, f in ipairs({'failed', 'retry', 'cool', 'bu'}) do
  local at = num(cur[f])
  if at ~= nil and at > last then last = at end
end
local expires = math.max(last, now) + floor
redis.call('PEXPIREAT', key, fmt(expires))
redis.call('SADD', index, name)
-- The index outlives every record it names.
if redis.call('PTTL', index) < expires - now then redis.call('PEXPIREAT', index, fmt(expires)) end
local msg = cjson.encode({op = 'put', key = name, gen = gen, now = now, by = me, rec = cur})
redis.call('PUBLISH', prefix .. ':changes', msg)
return msg
"#;

/// Clears a recovered record unless it is newer than what the replica knew. ARGV: prefix,
/// name, replica, the generation the replica had seen. A refused clear answers with the newer
/// record, unpublished; a record already gone publishes nothing.
const CLEAR: &str = r#"
local name, me, seen = ARGV[2], ARGV[3], tonumber(ARGV[4])
local key = prefix .. ':' .. name
local cur = hash(key)
if cur.gen == nil then
  return cjson.encode({op = 'none', key = name, gen = 0, now = now, by = me})
end
if tonumber(cur.gen) > seen then
  return cjson.encode({op = 'put', key = name, gen = tonumber(cur.gen), now = now, by = cur.by, rec = cur})
end
redis.call('DEL', key)
redis.call('SREM', prefix .. ':index', name)
local gen = redis.call('INCR', prefix .. ':seq')
local msg = cjson.encode({op = 'clear', key = name, gen = gen, now = now, by = me})
redis.call('PUBLISH', prefix .. ':changes', msg)
return msg
"#;

/// Forgets records whatever they hold: an operator's reset. ARGV: prefix, replica, the
/// reset's id (a reset sent again because its answer was lost runs once), then the names; no
/// names forgets every record. When it ran is kept an hour (`P:reset:<name>`, `P:reset_all`):
/// a later write of a record whose status began before it is refused (see `PUT`).
const RESET: &str = r#"
local me = ARGV[2]
if not redis.call('SET', prefix .. ':op:' .. ARGV[3], '1', 'NX', 'PX', 600000) then
  return cjson.encode({op = 'none', gen = 0, now = now, by = me})
end
local names = {}
for i = 4, #ARGV do names[#names + 1] = ARGV[i] end
local op = 'reset'
if #names == 0 then
  op = 'reset_all'
  names = redis.call('SMEMBERS', prefix .. ':index')
end
for _, name in ipairs(names) do
  redis.call('DEL', prefix .. ':' .. name)
  redis.call('SREM', prefix .. ':index', name)
end
-- When it ran, for the writes of what was learned before it that are still to come (an
-- hour: longer than a record lives unwritten).
if op == 'reset_all' then
  redis.call('SET', prefix .. ':reset_all', fmt(now), 'PX', 3600000)
else
  for _, name in ipairs(names) do redis.call('SET', prefix .. ':reset:' .. name, fmt(now), 'PX', 3600000) end
end
local gen = redis.call('INCR', prefix .. ':seq')
local msg = {op = op, gen = gen, now = now, by = me}
if op == 'reset' then msg.keys = names end
msg = cjson.encode(msg)
redis.call('PUBLISH', prefix .. ':changes', msg)
return msg
"#;

/// The periodic round trip: renews this replica's heartbeat (unless another run of the same
/// name holds it: then it says so, `taken`), drops the dead from the membership, and reads
/// every record unless the fleet's write counter still reads what the
/// replica has applied. ARGV: prefix, replica, heartbeat ttl in ms, the replica's description
/// (JSON), the generation it has applied (-1 for a full resync), and an epoch to set when
/// none is (the epoch names this Redis's copy of the records: a new one means they were lost).
const SYNC: &str = r#"
local me, ttl, info, known = ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local epoch = redis.call('GET', prefix .. ':epoch')
if not epoch then
  epoch = ARGV[6]
  redis.call('SET', prefix .. ':epoch', epoch)
end
redis.call('PEXPIRE', prefix .. ':epoch', 86400000)
-- The name is this run's unless another run holds it (this one was paused past its heartbeat
-- and the name was claimed meanwhile): then that run's heartbeat stands, and this one is told.
local taken = nil
local held = redis.call('GET', prefix .. ':replica:' .. me)
if held then
  local other = cjson.decode(held)
  local mine = cjson.decode(info).instance
  if other.instance ~= nil and other.instance ~= '' and other.instance ~= mine then taken = other end
end
if taken == nil then
  redis.call('SET', prefix .. ':replica:' .. me, info, 'PX', ttl)
end
redis.call('SADD', prefix .. ':replicas', me)
redis.call('PEXPIRE', prefix .. ':replicas', ttl * 10)
local replicas = {}
for _, id in ipairs(redis.call('SMEMBERS', prefix .. ':replicas')) do
  local about = redis.call('GET', prefix .. ':replica:' .. id)
  if about then
    replicas[#replicas + 1] = cjson.decode(about)
  else
    redis.call('SREM', prefix .. ':replicas', id)
  end
end
local seq = tonumber(redis.call('GET', prefix .. ':seq') or '0')
if seq == known then
  return cjson.encode({now = now, replicas = replicas, seq = seq, epoch = epoch, unchanged = true, taken = taken})
end
local recs = {}
local count = 0
for _, name in ipairs(redis.call('SMEMBERS', prefix .. ':index')) do
  local rec = hash(prefix .. ':' .. name)
  if rec.gen == nil then
    redis.call('SREM', prefix .. ':index', name)
  else
    recs[name] = rec
    count = count + 1
  end
end
local out = {now = now, replicas = replicas, count = count, seq = seq, epoch = epoch, taken = taken}
if count > 0 then out.recs = recs end
return cjson.encode(out)
"#;

/// Removes this replica from the membership at shutdown, unless another run holds its name.
/// ARGV: prefix, replica, this run's instance.
const LEAVE: &str = r#"
local held = redis.call('GET', prefix .. ':replica:' .. ARGV[2])
if held and cjson.decode(held).instance ~= ARGV[3] then return now end
redis.call('DEL', prefix .. ':replica:' .. ARGV[2])
redis.call('SREM', prefix .. ':replicas', ARGV[2])
return now
"#;

/// Shared by the pacing scripts: the lane's hash, read and refilled.
const PACE_PRELUDE: &str = r#"
local lane, me = ARGV[2], ARGV[3]
local key = prefix .. ':pace:' .. lane
local cur = hash(key)
local function g(n) return string.format('%.17g', n) end
-- The buckets, refilled to now: caps and rates come with each call (the lane's config). Each
-- capacity has a bucket of its own (`l<b>@<cap>`, refilled at `t<b>@<cap>`): a limit changed by
-- a reload starts a new one, as a replica alone does, and replicas still on the old limit and
-- those on the new drain their own rather than gain by taking turns.
local fields = {}
local function refill(caps, rates, seen)
  local levels = {}
  for b = 1, 2 do
    if caps[b] ~= nil then
      local at = (b - 1) .. '@' .. g(caps[b])
      fields[b] = at
      local last = num(cur['t' .. at]) or now
      -- A bucket the fleet lost (Redis restarted empty) starts where a replica last saw it.
      local level = num(cur['l' .. at]) or math.min(caps[b], (seen and seen[b]) or caps[b])
      levels[b] = math.min(caps[b], level + math.max(0, now - last) * rates[b] / 1000)
    end
  end
  return levels
end
local function keep(levels)
  local args = {'t', fmt(now)}
  for b = 1, 2 do
    if levels[b] ~= nil then
      table.insert(args, 'l' .. fields[b]); table.insert(args, g(levels[b]))
      table.insert(args, 't' .. fields[b]); table.insert(args, fmt(now))
    end
  end
  redis.call('HSET', key, unpack(args))
end
local function expire()
  local last = math.max(now, num(cur.hold) or 0)
  for h = 0, 3 do last = math.max(last, num(cur['h' .. h .. 'r']) or 0) end
  redis.call('PEXPIREAT', key, last + 120000)
end
"#;

/// Leases a slice of a lane. ARGV: prefix, lane, replica, the probe window in ms, then per
/// dimension (requests, tokens buckets; requests, tokens, input, output header windows) its
/// need and want, then per bucket its capacity and rate per second ('' when the lane has
/// none), then per bucket the level the replica last saw ('' when unknown: a bucket not in
/// Redis starts full).
///
/// While a hold runs nothing is granted. A header window whose reset passed becomes a probe
/// window: one request until an answer says more (or the probe window ends). When some
/// dimension cannot meet its need, nothing is granted and the answer says when it could; a
/// need larger than a bucket's capacity is met once the bucket is full (into debt, as the
/// local bucket does). The first replica whose need could not be met is served first: the
/// buckets' units it needs are kept for it (`w`) until a second after it may come back.
const PACE_LEASE: &str = r#"
local probe = tonumber(ARGV[4])
local need, want = {}, {}
for d = 1, 6 do
  need[d] = tonumber(ARGV[3 + 2 * d])
  want[d] = tonumber(ARGV[4 + 2 * d])
end
local caps, rates, seen = {}, {}, {}
for b = 1, 2 do
  caps[b] = num(ARGV[15 + 2 * b])
  rates[b] = num(ARGV[16 + 2 * b])
  seen[b] = num(ARGV[20 + b])
end
local levels = refill(caps, rates, seen)
local windows = {}
for h = 0, 3 do
  local left = num(cur['h' .. h])
  if left ~= nil then
    local reset = num(cur['h' .. h .. 'r']) or now
    if reset <= now then
      -- One request goes as the probe; a token window lets it go whatever it costs (its
      -- whole limit, or any cost when none is known): the requests window holds the rest.
      if h == 0 then
        left = 1
      else
        left = num(cur['h' .. h .. 'l']) or 1e15
      end
      -- `x` keeps the end of the window just closed (an answer of it is stale from now on),
      -- `g` counts what is granted until an answer opens the next one.
      local closed = reset
      reset = now + probe
      cur['h' .. h .. 'r'] = fmt(reset)
      cur['h' .. h .. 'p'] = '1'
      redis.call('HSET', key, 'h' .. h .. 'r', fmt(reset), 'h' .. h .. 'p', '1', 'h' .. h .. 'x', fmt(closed),
        'h' .. h .. 'g', '0')
    end
    levels[3 + h] = left
    local probing = 0
    if cur['h' .. h .. 'p'] == '1' then probing = 1 end
    windows[h + 1] = {lim = num(cur['h' .. h .. 'l']) or '', ends = reset - now, probe = probing}
  else
    windows[h + 1] = ''
  end
end
local out = {now = now}
local hold = num(cur.hold) or 0
local granted = {0, 0, 0, 0, 0, 0}
local wait = 0
-- The buckets' units kept for a replica whose need could not be met, until it comes back for
-- them (`w` the replica, `wu` until when, `wn0`/`wn1` its need): what refills goes to it, not
-- to another replica's prefetch, which would take each fraction as it came and starve the
-- replica that waits for a whole unit.
local reserved = {0, 0}
if cur.w ~= nil and cur.w ~= me and (num(cur.wu) or 0) > now then
  reserved = {num(cur.wn0) or 0, num(cur.wn1) or 0}
end
if hold > now then
  out.hold = hold - now
else
  for d = 1, 6 do
    local level = levels[d]
    if level ~= nil and need[d] > 0 then
      local enough = need[d]
      if d <= 2 then
        enough = math.min(enough, caps[d])
        level = level - reserved[d]
      elseif windows[d - 2].lim ~= '' then
        -- A call larger than the whole window goes when the window is full.
        enough = math.min(enough, windows[d - 2].lim)
      end
      if level < enough then
        if d > 2 then
          wait = math.max(wait, windows[d - 2].ends)
        elseif rates[d] > 0 then
          wait = math.max(wait, (enough - level) / rates[d] * 1000)
        else
          wait = math.max(wait, probe)
        end
      end
    end
  end
  if wait == 0 then
    for d = 1, 6 do
      local level = levels[d]
      if level ~= nil and want[d] > 0 then
        local free = level
        if d <= 2 then free = level - reserved[d] end
        local take = math.max(math.min(want[d], free), need[d], 0)
        granted[d] = take
        levels[d] = level - take
      end
    end
    if cur.w == me then redis.call('HDEL', key, 'w', 'wu', 'wn0', 'wn1') end
  else
    out.retry = math.max(1, math.ceil(wait))
    -- The first to wait is served first: kept for it until a while after it may come back. Not
    -- for a client key's lane, whose refused request does not wait (its client is told 429).
    local waits = string.sub(lane, 1, 4) ~= 'key:'
    if waits and (cur.w == nil or cur.w == me or (num(cur.wu) or 0) <= now) then
      local keep = {0, 0}
      for b = 1, 2 do
        if caps[b] ~= nil and need[b] > 0 then keep[b] = math.min(need[b], caps[b]) end
      end
      redis.call('HSET', key, 'w', me, 'wu', fmt(now + wait + 1000), 'wn0', g(keep[1]), 'wn1', g(keep[2]))
    end
  end
end
keep(levels)
for h = 0, 3 do
  if levels[3 + h] ~= nil then redis.call('HSET', key, 'h' .. h, g(levels[3 + h])) end
  if granted[3 + h] > 0 then redis.call('HINCRBYFLOAT', key, 'h' .. h .. 'g', granted[3 + h]) end
end
expire()
local lv = {}
for d = 1, 6 do lv[d] = levels[d] or '' end
out.granted = granted
out.levels = lv
out.windows = windows
return cjson.encode(out)
"#;

/// What an answer's headers said, from one replica. ARGV: prefix, lane, replica, the probe
/// window in ms, the hold in ms (''), then per header dimension: whether stated ('1' or ''),
/// its limit (''), what is left, the reset in ms (''), and what the answered call cost the
/// dimension when the fleet did not count it (0 when it did).
///
/// A window the fleet does not know (none, reset, or a probe window) is opened with what
/// the answer said, and announced; within a running window the fleet's count is only
/// lowered (as a lane's own is, and for the same reasons), and a call it did not count is
/// taken from it. A hold only moves later.
const PACE_REPORT: &str = r#"
local probe = tonumber(ARGV[4])
local hold = num(ARGV[5])
local margin = 10
local opened = {}
for h = 0, 3 do
  local at = 6 + 5 * h
  if ARGV[at] == '1' then
    local limit, left, reset = num(ARGV[at + 1]), tonumber(ARGV[at + 2]), num(ARGV[at + 3])
    local uncounted = tonumber(ARGV[at + 4]) or 0
    -- A little after the stated reset: the provider's clock and rounding must not end the
    -- fleet's window before its own.
    local ends = now + (reset or probe) + margin
    local f = 'h' .. h
    local running = num(cur[f]) ~= nil and (num(cur[f .. 'r']) or 0) > now and cur[f .. 'p'] ~= '1'
    if running then
      -- The fleet's count holds every unit it granted, but not a call it did not count (sent
      -- before its replica knew the window): the answer's `left` may predate grants
      -- already made, so the call is taken from the fleet's count too.
      local lim = limit or num(cur[f .. 'l'])
      redis.call('HSET', key, f, g(math.min(tonumber(cur[f]) - uncounted, left)), f .. 'r',
        fmt(math.max(tonumber(cur[f .. 'r']), ends)), f .. 'l', lim and fmt(lim) or '')
    else
      -- A window that ended and no lease has rolled yet closes now.
      local closed = num(cur[f .. 'x'])
      if cur[f .. 'p'] ~= '1' and num(cur[f]) ~= nil then
        closed = num(cur[f .. 'r'])
        cur[f .. 'g'] = '0'
      end
      -- An answer of the window that closed (late: its reset is no later than that
      -- window's end, or already due, which says nothing of the next window) opens nothing.
      local stale = closed ~= nil and reset ~= nil and (reset <= margin or now + reset <= closed + margin)
      if not stale then
        -- Requests granted since the window closed may still be on their way, uncounted
        -- by the provider: all but the one this answer may be (none, when the fleet did
        -- not count its call) are counted here.
        local outstanding = 0
        if h == 0 then
          local answered = 1
          if uncounted > 0 then answered = 0 end
          outstanding = math.max(0, (num(cur[f .. 'g']) or 0) - answered)
        end
        redis.call('HSET', key, f, g(left - outstanding), f .. 'r', fmt(ends), f .. 'l', limit and fmt(limit) or '',
          f .. 'p', '', f .. 'x', closed and fmt(closed) or '', f .. 'g', '0')
        table.insert(opened, h)
      end
    end
    cur[f .. 'r'] = fmt(math.max(num(cur[f .. 'r']) or 0, ends))
  end
end
local out = {op = 'pace', lane = lane, by = me}
if hold ~= nil and hold > 0 then
  local until_ms = math.max(num(cur.hold) or 0, now + hold)
  redis.call('HSET', key, 'hold', fmt(until_ms))
  cur.hold = fmt(until_ms)
  out.hold = until_ms - now
end
expire()
if out.hold ~= nil or #opened > 0 then
  if #opened > 0 then out.opened = opened end
  redis.call('PUBLISH', prefix .. ':changes', cjson.encode(out))
end
return cjson.encode(out)
"#;

/// Gives unspent bucket units back. ARGV: prefix, lane, replica, then per bucket the units,
/// its capacity and rate ('' when the lane has none).
const PACE_RETURN: &str = r#"
-- A bucket Redis does not hold (it restarted empty): nothing to give back to; the next lease
-- starts it where its replica last saw it.
if cur.t == nil then return now end
local caps, rates, units = {}, {}, {}
for b = 1, 2 do
  units[b] = tonumber(ARGV[1 + 3 * b]) or 0
  caps[b] = num(ARGV[2 + 3 * b])
  rates[b] = num(ARGV[3 + 3 * b])
end
local levels = refill(caps, rates)
for b = 1, 2 do
  -- Nor to a bucket of another capacity than the one it held (its limit changed since).
  if levels[b] ~= nil and cur['l' .. fields[b]] == nil then levels[b] = nil end
  if levels[b] ~= nil then levels[b] = math.min(caps[b], levels[b] + units[b]) end
end
keep(levels)
expire()
return now
"#;

/// The scripts, loaded once per store (EVALSHA, reloaded by the client after a `SCRIPT FLUSH`
/// or a restart).
pub struct Scripts {
    pub put: Script,
    pub clear: Script,
    pub reset: Script,
    pub sync: Script,
    pub leave: Script,
    pub pace_lease: Script,
    pub pace_report: Script,
    pub pace_return: Script,
}

impl Scripts {
    pub fn new() -> Self {
        let with_prelude = |body: &str| Script::new(&format!("{PRELUDE}{body}"));
        Self {
            put: with_prelude(PUT),
            clear: with_prelude(CLEAR),
            reset: with_prelude(RESET),
            sync: with_prelude(SYNC),
            leave: with_prelude(LEAVE),
            pace_lease: with_prelude(&format!("{PACE_PRELUDE}{PACE_LEASE}")),
            pace_report: with_prelude(&format!("{PACE_PRELUDE}{PACE_REPORT}")),
            pace_return: with_prelude(&format!("{PACE_PRELUDE}{PACE_RETURN}")),
        }
    }
}
