"""The Lua scripts of the Redis heartbeat store: each operation is one script, so one round trip
and atomic on the server.

Every script gets the same keys, all under one hash tag so they live in one cluster slot, and
the calling store's token as its first argument:

* ``due``: a sorted set, heartbeat id scored by its run instant (ties ordered by id, as Redis
  orders equal scores by member): the schedule;
* ``entry``: a hash, heartbeat id to its stored row (JSON written by the store);
* ``claim``: a hash, heartbeat id to the claim on a slot a worker took out and has not recorded
  yet: ``token \\n run_at \\n boot \\n row`` (the claimant's token, the slot's instant, the
  ``run_id`` of the Redis process that granted it, and the row to put back);
* ``until``: a sorted set, heartbeat id scored by the Redis-clock millisecond its claim runs out;
* ``fired``: a hash, heartbeat id to the latest run instant of it that fired;
* ``changed``: not a key but the pub/sub channel a script announces a move of the schedule's
  head on, with the token of the store that moved it.

Instants travel as decimal strings a double reads back exactly (Python's ``repr`` going in,
Redis's own formatting of a score coming out) and are compared as numbers. The scripts read the
clock with ``TIME`` (the server's clock, never a worker's) and answer whether the head of the
schedule changed, so the calling store can tell its change listeners; the other stores hear it
on the channel.
"""

from __future__ import annotations

__all__ = [
    "CANCEL",
    "ENQUEUE",
    "INSPECT",
    "PEEK",
    "POLL",
    "RELEASE_MINE",
    "SETTLE",
]

_COMMON = """
local due, entry, claim, untl, fired = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local channel = KEYS[6]
local token = ARGV[1]

local function head()
  local h = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
  if h[1] then return h[1] .. '@' .. h[2] end
  return ''
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function boot()
  local info = redis.call('INFO', 'server')
  return string.match(info, 'run_id:(%w+)') or ''
end

local function split_claim(v)
  local a = string.find(v, '\\n', 1, true)
  local b = string.find(v, '\\n', a + 1, true)
  local c = string.find(v, '\\n', b + 1, true)
  return string.sub(v, 1, a - 1), string.sub(v, a + 1, b - 1), string.sub(v, b + 1, c - 1),
    string.sub(v, c + 1)
end

-- Whether the head moved since ``before``; when it did, other workers hear it on the channel.
local function changed(before)
  if before ~= head() then
    redis.call('PUBLISH', channel, token)
    return 1
  end
  return 0
end
"""

POLL = (
    _COMMON
    + """
-- ARGV: token, now (the Heart's instant), claim TTL in ms.
-- Answers {id, run_at, row, fired mark, head changed, then id, run_at, put back (1 or 0) of
-- each claim that ran out}; id '' when nothing is due.
local now, ttl = ARGV[2], tonumber(ARGV[3])
local before = head()
local t = now_ms()
local recovered = {}
local expired = redis.call('ZRANGEBYSCORE', untl, '-inf', t)
if #expired > 0 then
  local current = boot()
  for _, id in ipairs(expired) do
    local v = redis.call('HGET', claim, id)
    if not v then
      redis.call('ZREM', untl, id)
    else
      local owner, at, granted, row = split_claim(v)
      if granted ~= current then
        -- This Redis restarted since the claim was granted: the downtime is not the claimant's,
        -- so it gets a whole TTL from now to record its fire.
        redis.call('HSET', claim, id, owner .. '\\n' .. at .. '\\n' .. current .. '\\n' .. row)
        redis.call('ZADD', untl, t + ttl, id)
      else
        redis.call('HDEL', claim, id)
        redis.call('ZREM', untl, id)
        local put_back = 0
        if not redis.call('ZSCORE', due, id) then
          redis.call('HSET', entry, id, row)
          redis.call('ZADD', due, at, id)
          put_back = 1
        end
        table.insert(recovered, id)
        table.insert(recovered, at)
        table.insert(recovered, put_back)
      end
    end
  end
end
local offset = 0
while true do
  local batch = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'WITHSCORES', 'LIMIT', offset, 64)
  if #batch == 0 then break end
  for i = 1, #batch, 2 do
    local id, at = batch[i], batch[i + 1]
    if redis.call('HEXISTS', claim, id) == 0 then
      local row = redis.call('HGET', entry, id)
      redis.call('ZREM', due, id)
      redis.call('HDEL', entry, id)
      redis.call('HSET', claim, id, token .. '\\n' .. at .. '\\n' .. boot() .. '\\n' .. row)
      redis.call('ZADD', untl, t + ttl, id)
      local mark = redis.call('HGET', fired, id) or ''
      local answer = {id, at, row, mark, changed(before)}
      for _, r in ipairs(recovered) do table.insert(answer, r) end
      return answer
    end
  end
  offset = offset + 64
end
local answer = {'', '', '', '', changed(before)}
for _, r in ipairs(recovered) do table.insert(answer, r) end
return answer
"""
)
"""Claim the most overdue free slot for the calling store, after putting back the slots whose
claims ran out."""

SETTLE = (
    _COMMON
    + """
-- ARGV: token, id, claimed run_at ('' for none), fired ('1' or '0'), next run_at ('' for
-- none), next row. Records the claimed slot as fired (when it was), lets go of the claim when it is
-- still this token's, and stores the next entry when the id is free (no entry, no claim).
-- Answers {owned, stored, head changed}.
local id, at, was_fired, next_at, next_row = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local before = head()
if was_fired == '1' and at ~= '' then
  local mark = redis.call('HGET', fired, id)
  if (not mark) or tonumber(mark) < tonumber(at) then redis.call('HSET', fired, id, at) end
end
local owned = 0
if at ~= '' then
  local v = redis.call('HGET', claim, id)
  if v then
    local owner = split_claim(v)
    if owner == token then
      redis.call('HDEL', claim, id)
      redis.call('ZREM', untl, id)
      owned = 1
    end
  end
end
local stored = 0
local free = not redis.call('ZSCORE', due, id) and redis.call('HEXISTS', claim, id) == 0
if next_at ~= '' and free then
  redis.call('HSET', entry, id, next_row)
  redis.call('ZADD', due, next_at, id)
  stored = 1
end
return {owned, stored, changed(before)}
"""
)
"""Record a claimed slot as fired, let go of the claim, and store the next slot when the id is
free."""

ENQUEUE = (
    _COMMON
    + """
-- ARGV: token, id, run_at, row. Answers {displaced row or '', head changed}.
local id, at, row = ARGV[2], ARGV[3], ARGV[4]
local before = head()
local old = redis.call('HGET', entry, id) or ''
redis.call('HSET', entry, id, row)
redis.call('ZADD', due, at, id)
return {old, changed(before)}
"""
)
"""Store a row under its id, replacing any, and answer the row it displaced."""

CANCEL = (
    _COMMON
    + """
-- ARGV: token, id. Removes the entry and any claim on the id. Answers {removed row or '',
-- head changed}.
local id = ARGV[2]
local before = head()
local old = redis.call('HGET', entry, id) or ''
redis.call('ZREM', due, id)
redis.call('HDEL', entry, id)
local v = redis.call('HGET', claim, id)
if v then
  redis.call('HDEL', claim, id)
  redis.call('ZREM', untl, id)
  if old == '' then
    local _, _, _, row = split_claim(v)
    old = row
  end
end
return {old, changed(before)}
"""
)
"""Remove an id's entry and any claim on it, and answer the row removed."""

PEEK = (
    _COMMON
    + """
-- Answers {head run_at or '', milliseconds until the earliest claim runs out or ''}.
local h = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
local c = redis.call('ZRANGE', untl, 0, 0, 'WITHSCORES')
local remaining = ''
if c[1] then remaining = tostring(tonumber(c[2]) - now_ms()) end
return {h[2] or '', remaining}
"""
)
"""Answer the head's run instant and the milliseconds until the earliest claim runs out."""

INSPECT = (
    _COMMON
    + """
-- Answers every stored row, in the order they fall due.
local ids = redis.call('ZRANGE', due, 0, -1)
local rows = {}
for _, id in ipairs(ids) do
  local row = redis.call('HGET', entry, id)
  if row then table.insert(rows, row) end
end
return rows
"""
)
"""Answer every stored row, in the order they fall due."""

RELEASE_MINE = (
    _COMMON
    + """
-- ARGV: token, then the ids whose claims the caller knows it holds. Every other claim of this
-- token (one granted by a poll whose answer was lost) is let go: its slot goes back on the
-- schedule when the id is free. Answers {released ids..., head changed}.
local known = {}
for i = 2, #ARGV do known[ARGV[i]] = true end
local before = head()
local released = {}
local all = redis.call('HGETALL', claim)
for i = 1, #all, 2 do
  local id, v = all[i], all[i + 1]
  local owner, at, _, row = split_claim(v)
  if owner == token and not known[id] then
    redis.call('HDEL', claim, id)
    redis.call('ZREM', untl, id)
    if not redis.call('ZSCORE', due, id) then
      redis.call('HSET', entry, id, row)
      redis.call('ZADD', due, at, id)
    end
    table.insert(released, id)
  end
end
table.insert(released, changed(before))
return released
"""
)
"""Let go of the calling store's claims it no longer knows of (their answers were lost), putting
their slots back."""
