"""The one Lua script every shared account is settled with, and the layout of its keys.

A worker never debits Redis per grant: it holds a *lease* (spare capacity it took from the
shared account) and answers admission from it. The script is how the lease moves. One call
settles any number of accounts that live under one namespace, atomically, on Redis's own clock
(``TIME``), and does for each of them, in this order:

1. **refresh**: expire the holders and reservations whose lifetime ran out (a crashed worker's
   lease; an expired window lease is stamped at its expiry, since its slots may have been used
   up to then), refill a bucket with the time elapsed, drop the window stamps that left;
2. **report**: apply the worker's throttle reports (push-back and successes), stamp the window
   slots it used, credit what it gives back, and set its holder record to the absolute amount
   it still holds (idempotent, so a lost reply or a Redis restart never double-counts);
3. **need** (all accounts or none): when every account the call names with a need has that
   much free beside the reservations of older waiters of other workers, take every need;
   otherwise take none, and keep (or refresh) this worker's reservation on each of them;
4. **extra** (best effort, each account on its own): after a granted need, top the lease up by
   what is free beside everyone's reservations;
5. **log** each debit and credit to the grant log stream when the account has one.

The free level of every kind counts the leases as taken: a bucket's level plus the leases
outstanding never exceeds its burst, so capacity banked in a lease and spent later cannot add to
a refilled bucket (the upstream sees at most ``burst + rate * T`` in any ``T`` seconds); a
window counts every slot a worker holds unconfirmed as inside the window until it is stamped;
a gate's use is the sum of what the holders hold.

Keys, all under one hash tag ``{namespace}`` so one call can name many accounts on a cluster:

* ``{ns}:<name>:state`` (hash): the levels, the throttle, the stamp, the creation instant;
* ``{ns}:<name>:holders`` (hash): ``h:<worker>`` -> ``a,b,expires`` per lease holder and
  ``w:<worker>`` -> ``a,b,expires,arrival`` per reservation;
* ``{ns}:<name>:stamps`` (sorted set): a window's stamps (score: Redis time in seconds);
* the grant log (stream), named by the account when it keeps one: ``XADD`` ids are Redis time;
* ``{ns}:epoch`` (string, no expiry): when the namespace was first written. A worker that finds
  another epoch than the one it remembers knows Redis lost its data, and the accounts it settles
  are re-created conservatively (a bucket empty, a window full for one window, a gate granting
  nothing new for one lease lifetime) instead of full.

Wake-ups go to the channel ``{ns}:wake``: the account's name when capacity came back (a
give-back, an expiry, a reservation served, a relaxed throttle), ``want:<name>`` when a worker
starts waiting, so that workers holding spare give it back.
"""

from __future__ import annotations

__all__ = ["ARGS_PER_ACCOUNT", "KEYS_PER_ACCOUNT", "SETTLE"]

KEYS_PER_ACCOUNT = 4
"""state, holders, stamps, log; the namespace's epoch key comes last, once."""

ARGS_PER_ACCOUNT = 21
"""The per-account block of ARGV (after the wake channel, the epoch and a test's clock), in the
order :meth:`SharedAccount._settlement` writes it."""

SETTLE = r"""
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
if ARGV[3] ~= '' then now = tonumber(ARGV[3]) end  -- a test's clock, in place of Redis's
local wake_channel = ARGV[1]
local KA, NA = 4, 21
local count = (#KEYS - 1) / KA

-- The epoch: written once, never expiring, so a Redis that lost its data (a restart without
-- persistence, a flush) is told apart from an account whose keys expired while idle.
local epoch_key = KEYS[#KEYS]
local epoch = redis.call('GET', epoch_key)
if not epoch then
  epoch = string.format('%.6f', tonumber(t[1]) + tonumber(t[2]) / 1000000)
  redis.call('SET', epoch_key, epoch)
end
local restarted = ARGV[2] ~= '' and ARGV[2] ~= epoch

local function parse(value)
  local out = {}
  for piece in string.gmatch(value, '[^,]+') do out[#out + 1] = tonumber(piece) end
  return out
end

local function fmt(x) return string.format('%.17g', x) end

local acc = {}
for i = 1, count do
  local k, a = (i - 1) * KA, 3 + (i - 1) * NA
  local c = {
    state = KEYS[k + 1], holders = KEYS[k + 2], stamps = KEYS[k + 3], log = KEYS[k + 4],
    name = ARGV[a + 1], kind = ARGV[a + 2],
    p1 = tonumber(ARGV[a + 3]), p2 = tonumber(ARGV[a + 4]), p3 = tonumber(ARGV[a + 5]),
    worker = ARGV[a + 6],
    base_a = tonumber(ARGV[a + 7]), base_b = tonumber(ARGV[a + 8]),
    ret_a = tonumber(ARGV[a + 9]), ret_b = tonumber(ARGV[a + 10]),
    confirm = tonumber(ARGV[a + 11]),
    need_a = tonumber(ARGV[a + 12]), need_b = tonumber(ARGV[a + 13]),
    extra_a = tonumber(ARGV[a + 14]), extra_b = tonumber(ARGV[a + 15]),
    ttl = tonumber(ARGV[a + 16]), reservation_ttl = tonumber(ARGV[a + 17]),
    pressure = tonumber(ARGV[a + 18]), successes = tonumber(ARGV[a + 19]),
    logging = ARGV[a + 20] == '1', increment = tonumber(ARGV[a + 21]),
  }
  acc[i] = c
end

-- a is the account's first unit (tokens, slots, permits), b a bucket's requests
local function log(c, what, a, b, worker)
  worker = worker or c.worker
  if c.logging and (a > 0 or b > 0) then
    if c.kind == 'bucket' then
      redis.call('XADD', c.log, '*', 'kind', what, 'account', c.name, 'worker', worker,
        'requests', fmt(b), 'tokens', fmt(a))
    elseif c.kind == 'window' then
      redis.call('XADD', c.log, '*', 'kind', what, 'account', c.name, 'worker', worker,
        'requests', fmt(a))
    else
      redis.call('XADD', c.log, '*', 'kind', what, 'account', c.name, 'worker', worker,
        'permits', fmt(a))
    end
  end
end

-- 1. refresh -----------------------------------------------------------------------------------
for _, c in ipairs(acc) do
  local s = redis.call('HGETALL', c.state)
  local st = {}
  for j = 1, #s, 2 do st[s[j]] = s[j + 1] end
  local fresh = st.born == nil
  c.throttle = tonumber(st.th or '0')
  c.last_pressure = tonumber(st.lp or '-1')
  c.success_count = tonumber(st.sc or '0')
  c.serial = tonumber(st.n or '0')
  c.born = tonumber(st.born or fmt(now))
  if c.kind == 'bucket' then
    c.window = 60 * (1 + c.throttle)
    c.cap_a, c.cap_b = c.p2, c.p3
    if fresh then
      -- A bucket re-created after Redis lost its data starts empty: what it granted before
      -- may still be inside the upstream's window. One whose keys expired while idle is full.
      c.level_a = restarted and 0 or c.cap_a
      c.level_b = restarted and 0 or c.cap_b
      c.stamp = now
    else
      c.level_a, c.level_b, c.stamp = tonumber(st.la), tonumber(st.lb), tonumber(st.s)
    end
  elseif c.kind == 'window' then
    c.window = c.p2 * (1 + c.throttle)
    c.cap_a, c.cap_b = c.p1, 0
  else
    c.window = 0
    c.cap_a, c.cap_b = c.p1, 0
  end
  c.reservations = {}
  c.held_a, c.held_b, c.mine = 0, 0, nil
  c.prev_a, c.prev_b = 0, 0  -- this worker's holder record as it stood until this call
  local h = redis.call('HGETALL', c.holders)
  for j = 1, #h, 2 do
    local field, v = h[j], parse(h[j + 1])
    local expired = v[3] < now
    if string.sub(field, 1, 2) == 'h:' then
      if expired then
        redis.call('HDEL', c.holders, field)
        if c.kind == 'window' and v[1] > 0 then
          -- its unconfirmed slots may have gone out up to the expiry: stamp them there
          for _ = 1, v[1] do
            c.serial = c.serial + 1
            redis.call('ZADD', c.stamps, v[3], c.serial)
          end
        elseif c.kind == 'gate' and v[1] > 0 then
          log(c, 'expire', v[1], 0, string.sub(field, 3))  -- a dead worker's permits come back
          c.woke = true
        end
        -- a bucket's expired lease is not credited back: it may have been spent
      elseif field == 'h:' .. c.worker then
        c.prev_a, c.prev_b = v[1], v[2]
      else
        c.held_a, c.held_b = c.held_a + v[1], c.held_b + v[2]
        if v[1] > 0 and (c.next_expiry == nil or v[3] < c.next_expiry) then
          c.next_expiry = v[3]
        end
      end
    else
      local who = string.sub(field, 3)
      if expired then
        redis.call('HDEL', c.holders, field)
        c.woke = true
      elseif who == c.worker then
        c.mine = v
      else
        c.reservations[#c.reservations + 1] = {a = v[1], b = v[2], arrival = v[4]}
      end
    end
  end
  if fresh and restarted and c.kind == 'window' then
    -- a window re-created after Redis lost its data starts full for one window
    for _ = 1, c.cap_a do
      c.serial = c.serial + 1
      redis.call('ZADD', c.stamps, now, c.serial)
    end
  end
  if fresh and restarted and c.kind == 'gate' then
    -- a gate re-created after Redis lost its data grants nothing new until every live
    -- worker had one lifetime to say what it holds
    c.grace = now + c.ttl
  else
    c.grace = tonumber(st.grace or '0')
  end
  if c.kind == 'window' then
    redis.call('ZREMRANGEBYSCORE', c.stamps, '-inf', '(' .. fmt(now - c.window))
  end
end

-- the free level beside every holder but this worker, before this call's report
local function free(c)
  if c.kind == 'bucket' then
    return c.level_a, c.level_b
  elseif c.kind == 'window' then
    local used = redis.call('ZCARD', c.stamps) + c.held_a + c.base_a
    return c.cap_a - used, 0
  else
    if c.grace > now then return 0, 0 end
    return c.cap_a - c.held_a - c.base_a, 0
  end
end

-- 2. report ------------------------------------------------------------------------------------
for _, c in ipairs(acc) do
  if c.kind == 'bucket' then
    local elapsed = now - c.stamp
    if elapsed > 0 then
      -- The refill of the time since the last call is room beside the leases as they stood
      -- then: what this worker spent from its lease meanwhile may have been spent right now,
      -- and must not also be refilled (that would grant it twice at one instant).
      local room_a = c.cap_a - c.held_a - math.max(c.prev_a, c.base_a)
      local room_b = c.cap_b - c.held_b - math.max(c.prev_b, c.base_b)
      if c.level_a < room_a then
        c.level_a = math.min(room_a, c.level_a + elapsed / c.window * c.p2)
      end
      if c.level_b < room_b then
        c.level_b = math.min(room_b, c.level_b + elapsed / c.window * c.p1)
      end
      c.stamp = now
    end
    -- a give-back or a credit (capped: never above the burst beside the leases), or a debt
    -- (negative: what a local share granted while Redis was out of reach)
    c.level_a = math.min(c.cap_a - c.held_a - c.base_a, c.level_a + c.ret_a)
    c.level_b = math.min(c.cap_b - c.held_b - c.base_b, c.level_b + c.ret_b)
    log(c, 'return', math.max(0, c.ret_a), math.max(0, c.ret_b))
    log(c, 'take', math.max(0, -c.ret_a), math.max(0, -c.ret_b))
  elseif c.kind == 'window' then
    for _ = 1, c.confirm do
      c.serial = c.serial + 1
      redis.call('ZADD', c.stamps, now, c.serial)
    end
    log(c, 'return', c.ret_a, 0)
  else
    log(c, 'return', c.ret_a, 0)
  end
  if c.ret_a > 0 or c.ret_b > 0 then c.woke = true end
  local inc = c.increment
  if c.pressure > 0 then
    local most = 9
    if c.kind == 'window' then most = c.p3 end
    c.throttle = math.min(c.throttle + inc * c.pressure, most)
    c.last_pressure = now
  end
  if c.successes > 0 and c.throttle > 0 then
    local before = c.throttle
    if c.last_pressure < 0 or now - c.last_pressure >= 300 then
      c.throttle = math.max(0, c.throttle - 0.5 * c.successes)
      c.success_count = 0
    else
      c.success_count = c.success_count + c.successes
      local steps = math.floor(c.success_count / 3)
      c.success_count = c.success_count - 3 * steps
      c.throttle = math.max(0, c.throttle - 0.2 * steps)
    end
    if c.throttle < before then c.woke = true end
  end
  -- the stretch from here on (the refill above was earned at the old one)
  if c.kind == 'bucket' then
    c.window = 60 * (1 + c.throttle)
  elseif c.kind == 'window' then
    c.window = c.p2 * (1 + c.throttle)
  end
end

-- 3. need, all or nothing ----------------------------------------------------------------------
local function ahead_of(c)
  local arrival = c.mine and c.mine[4] or math.huge
  local a, b, all_a, all_b = 0, 0, 0, 0
  for _, r in ipairs(c.reservations) do
    all_a, all_b = all_a + r.a, all_b + r.b
    if r.arrival < arrival then a, b = a + r.a, b + r.b end
  end
  return a, b, all_a, all_b
end

local all_fit, any_need = true, false
for _, c in ipairs(acc) do
  c.free_a, c.free_b = free(c)
  c.ahead_a, c.ahead_b, c.reserved_a, c.reserved_b = ahead_of(c)
  c.got_a, c.got_b = 0, 0
  if c.need_a > 0 or c.need_b > 0 then
    any_need = true
    if c.free_a - c.ahead_a < c.need_a or c.free_b - c.ahead_b < c.need_b then
      all_fit = false
    end
  end
end

for _, c in ipairs(acc) do
  local needs = c.need_a > 0 or c.need_b > 0
  if any_need and all_fit and needs then
    c.got_a, c.got_b = c.need_a, c.need_b
    if c.mine then
      redis.call('HDEL', c.holders, 'w:' .. c.worker)
      c.woke = true  -- the next in line may go now
    end
  elseif needs then
    local arrival = c.mine and c.mine[4] or now
    if not c.mine then
      -- a new waiter: the workers holding spare hear it and give theirs back
      redis.call('PUBLISH', wake_channel, 'want:' .. c.name)
    end
    redis.call('HSET', c.holders, 'w:' .. c.worker,
      fmt(c.need_a) .. ',' .. fmt(c.need_b) .. ',' .. fmt(now + c.reservation_ttl) .. ',' .. fmt(arrival))
  elseif c.mine then
    redis.call('HDEL', c.holders, 'w:' .. c.worker)
    c.woke = true
  end
  -- 4. extra, best effort, only beside a granted need or with no need at all
  if all_fit then
    local room_a = c.free_a - c.got_a - c.reserved_a
    local room_b = c.free_b - c.got_b - c.reserved_b
    local ea = math.max(0, math.min(c.extra_a, room_a))
    local eb = math.max(0, math.min(c.extra_b, room_b))
    if c.kind == 'bucket' and (ea < c.extra_a or eb < c.extra_b or eb <= 0) then
      -- a bucket's extra is requests with their tokens: both or neither, never tokens alone
      ea, eb = 0, 0
    end
    c.got_a, c.got_b = c.got_a + ea, c.got_b + eb
  end
  if c.kind == 'bucket' then
    c.level_a, c.level_b = c.level_a - c.got_a, c.level_b - c.got_b
    log(c, 'take', c.got_a, c.got_b)
  else
    log(c, 'take', c.got_a, 0)
  end
  -- the holder record: absolute, renewed for one lifetime
  local hold_a, hold_b = c.base_a + c.got_a, c.base_b + c.got_b
  if hold_a > 0 or hold_b > 0 then
    redis.call('HSET', c.holders, 'h:' .. c.worker,
      fmt(hold_a) .. ',' .. fmt(hold_b) .. ',' .. fmt(now + c.ttl))
  else
    redis.call('HDEL', c.holders, 'h:' .. c.worker)
  end
end

-- 5. write back, wake, answer ------------------------------------------------------------------
local out = {fmt(now), epoch}
for _, c in ipairs(acc) do
  local fields = {'th', fmt(c.throttle), 'lp', fmt(c.last_pressure), 'sc', fmt(c.success_count),
    'n', fmt(c.serial), 'born', fmt(c.born), 'grace', fmt(c.grace)}
  if c.kind == 'bucket' then
    for _, f in ipairs({'la', fmt(c.level_a), 'lb', fmt(c.level_b), 's', fmt(c.stamp)}) do
      fields[#fields + 1] = f
    end
  end
  redis.call('HSET', c.state, unpack(fields))
  local life = math.max(c.ttl, c.reservation_ttl, c.window, 1) * 4
  for _, key in ipairs({c.state, c.holders, c.stamps}) do
    redis.call('PEXPIRE', key, math.ceil(life * 1000) + 60000)
  end
  if c.woke then redis.call('PUBLISH', wake_channel, c.name) end
  -- the free level after this call, beside everyone's lease (this worker's included)
  local free_a, free_b
  if c.kind == 'bucket' then
    free_a, free_b = c.level_a, c.level_b
  elseif c.kind == 'window' then
    free_a, free_b = c.cap_a - redis.call('ZCARD', c.stamps) - c.held_a - c.base_a - c.got_a, 0
  else
    free_a, free_b = c.cap_a - c.held_a - c.base_a - c.got_a, 0
  end
  -- seconds until the clock alone lets this worker's need in (-1: only an event can)
  local wait = -1
  if c.got_a == 0 and c.got_b == 0 and (c.need_a > 0 or c.need_b > 0) then
    local want_a, want_b = c.need_a + c.ahead_a, c.need_b + c.ahead_b
    if c.kind == 'bucket' then
      if want_a <= c.cap_a - c.held_a - c.base_a and want_b <= c.cap_b - c.held_b - c.base_b then
        local da = math.max(0, want_a - c.level_a) / c.p2
        local db = math.max(0, want_b - c.level_b) / c.p1
        wait = math.max(da, db) * c.window
      end
    elseif c.kind == 'window' then
      local deficit = want_a - free_a
      local stamped = redis.call('ZCARD', c.stamps)
      if deficit <= 0 then
        wait = 0
      elseif deficit <= stamped then
        local oldest = redis.call('ZRANGE', c.stamps, deficit - 1, deficit - 1, 'WITHSCORES')
        wait = math.max(0, tonumber(oldest[2]) + c.window - now)
      end
    elseif c.grace > now then
      wait = c.grace - now
    elseif c.next_expiry then
      -- a gate frees permits by the clock only when a holder dies: look again when the
      -- first holder's lifetime ends (a live holder will have renewed it by then)
      wait = math.max(0, c.next_expiry - now)
    end
  end
  local others_a = c.held_a
  out[#out + 1] = {fmt(c.got_a), fmt(c.got_b), fmt(free_a), fmt(free_b), fmt(c.throttle),
    fmt(wait), fmt(others_a), fmt(#c.reservations)}
end
return out
"""
