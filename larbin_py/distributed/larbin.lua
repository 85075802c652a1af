#!lua name=larbin
--[[
The distributed crawl's functions (Redis Functions, Redis >= 7.0).

Loaded once per connection by larbin_py/distributed/redisio.py (FUNCTION LOAD
REPLACE).  Every function touches the keys of one partition (hash tag {p})
or one IP ({X}), except lb_heartbeat, lb_join, lb_leave, lb_shares and
lb_view, which touch crawl-wide keys, and lb_enqueue and lb_ack, which
also keep the crawl-wide open count: in Redis Cluster they would be sent
per slot, the open count kept per slot and summed (not built).

Fencing (docs/distributed-design.md, "Membership, leases and fencing"): every function that changes a partition's
state checks first that own:{p} holds "<worker>:<token>", the caller's
lease, and otherwise changes nothing and answers the status FENCED.  Redis
is itself the protected resource, so the check is exact.

Fingerprints travel as decimal strings (signed int64) and never become Lua
numbers: Lua's numbers are doubles and would round them.
]]

local GROUP = 'crawl'

local function fenced()
  return redis.status_reply('FENCED')
end

local function owns(own_key, owner)
  return redis.call('GET', own_key) == owner
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function ms(n)
  return string.format('%d', n)
end

-- lb_meta(meta; mode, field, value, ...): mode 'create' writes the fields
-- when the crawl does not exist.  Answers {'created'} or {'absent'} or
-- {'exists', field, value, ...} (the stored meta).
local function lb_meta(keys, args)
  if redis.call('EXISTS', keys[1]) == 1 then
    local out = {'exists'}
    for _, v in ipairs(redis.call('HGETALL', keys[1])) do out[#out + 1] = v end
    return out
  end
  if args[1] ~= 'create' then return {'absent'} end
  for i = 2, #args, 2 do redis.call('HSET', keys[1], args[i], args[i + 1]) end
  redis.call('HSET', keys[1], 'created', ms(now_ms()))
  return {'created'}
end

-- lb_enqueue(q, cnt, open, bucket...; (bucket index, fingerprint, record)...):
-- per item, SADD the fingerprint into its bucket and, only when it is new,
-- XADD the record to the partition's stream.  Counts the new ones in the
-- partition's 'accepted' and in the crawl-wide open count (accepted less
-- acked, every partition: the end seen at once).  Answers how many were new.
local function lb_enqueue(keys, args)
  local q = keys[1]
  local new = 0
  for i = 1, #args, 3 do
    if redis.call('SADD', keys[tonumber(args[i])], args[i + 1]) == 1 then
      redis.call('XADD', q, '*', 'r', args[i + 2])
      new = new + 1
    end
  end
  if new > 0 then
    redis.call('HINCRBY', keys[2], 'accepted', new)
    redis.call('INCRBY', keys[3], new)
  end
  return new
end

-- lb_acquire(own, fence, q; worker, ttl_ms): the partition lease, when free
-- or already this worker's (a respawn).  Answers the new fencing token, or
-- nil when another worker holds it.
local function lb_acquire(keys, args)
  local cur = redis.call('GET', keys[1])
  if cur then
    local holder = string.match(cur, '^(.*):%d+$')
    if holder ~= args[1] then return false end
  end
  local token = redis.call('INCR', keys[2])
  redis.call('SET', keys[1], args[1] .. ':' .. token, 'PX', args[2])
  redis.pcall('XGROUP', 'CREATE', keys[3], GROUP, '0', 'MKSTREAM')  -- BUSYGROUP when it exists
  return token
end

-- lb_release(own; owner): the fenced DEL of the lease.
local function lb_release(keys, args)
  if not owns(keys[1], args[1]) then return fenced() end
  redis.call('DEL', keys[1])
  return 1
end

-- lb_read(own, q; owner, consumer, count): new entries for the owner,
-- flat {id, record, ...}.
local function lb_read(keys, args)
  if not owns(keys[1], args[1]) then return fenced() end
  local r = redis.call('XREADGROUP', 'GROUP', GROUP, args[2], 'COUNT', args[3], 'STREAMS', keys[2], '>')
  local out = {}
  if r then
    for _, e in ipairs(r[1][2]) do
      out[#out + 1] = e[1]
      out[#out + 1] = e[2][2]
    end
  end
  return out
end

-- lb_claim(own, q, crash; owner, consumer): every pending entry of the
-- stream (XAUTOCLAIM, min-idle 0), whoever it was delivered to, with the
-- number of times a worker died while fetching it (crash:{p}, written by
-- lb_crashed; deliveries are not tries): flat {id, record, crashes, ...}.
-- Consumers left with nothing pending are removed from the group.
local function lb_claim(keys, args)
  if not owns(keys[1], args[1]) then return fenced() end
  local q, consumer = keys[2], args[2]
  local records, order = {}, {}
  local start = '0-0'
  repeat
    local r = redis.call('XAUTOCLAIM', q, GROUP, consumer, 0, start, 'COUNT', 1000)
    start = r[1]
    for _, e in ipairs(r[2]) do
      if e and e[1] then
        records[e[1]] = e[2][2]
        order[#order + 1] = e[1]
      end
    end
  until start == '0-0'
  local crashed = redis.call('EXISTS', keys[3]) == 1
  local out = {}
  for _, id in ipairs(order) do
    out[#out + 1] = id
    out[#out + 1] = records[id]
    local n = 0
    if crashed then n = tonumber(redis.call('HGET', keys[3], id) or '0') end
    out[#out + 1] = n
  end
  for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', q, GROUP)) do
    local name, pending
    for i = 1, #c, 2 do
      if c[i] == 'name' then name = c[i + 1] elseif c[i] == 'pending' then pending = c[i + 1] end
    end
    if name ~= consumer and pending == 0 then redis.call('XGROUP', 'DELCONSUMER', q, GROUP, name) end
  end
  return out
end

-- lb_crashed(q, crash; id, ...): a worker died while fetching these entries
-- (its in-flight file, read by its next start or its launcher): one try
-- more for each entry still in the stream.  Not fenced: the dead worker has
-- no lease, and a try is a fact, not an ownership change.  Answers how many
-- were counted.
local function lb_crashed(keys, args)
  local n = 0
  for i = 1, #args do
    if #redis.call('XRANGE', keys[1], args[i], args[i], 'COUNT', 1) > 0 then
      redis.call('HINCRBY', keys[2], args[i], 1)
      n = n + 1
    end
  end
  return n
end

-- lb_ack(own, q, cnt, crash, open; owner, id, outcome, ...): XACK + XDEL of
-- each entry, its crash count dropped, and its count under 'fetched' or
-- 'forgotten:<outcome>', in one fenced call; the crawl-wide open count
-- lowered by the entries acked.  An outcome may end with ';' and a
-- recrawl's verdicts joined by ',' (larbin_py.recrawl): each is counted
-- under 'recrawl:<verdict>' with the ack.  An entry that is not pending
-- (acked before) counts nothing, so a retried ack keeps the counters exact.
-- Answers how many were acked.
local function lb_ack(keys, args)
  if not owns(keys[1], args[1]) then return fenced() end
  local q = keys[2]
  local counts, n = {}, 0
  local crashed = redis.call('EXISTS', keys[4]) == 1
  for i = 2, #args, 2 do
    if redis.call('XACK', q, GROUP, args[i]) == 1 then
      redis.call('XDEL', q, args[i])
      if crashed then redis.call('HDEL', keys[4], args[i]) end
      local outcome, verdicts = string.match(args[i + 1], '^([^;]*);?(.*)$')
      local field = outcome == 'fetched' and 'fetched' or ('forgotten:' .. outcome)
      counts[field] = (counts[field] or 0) + 1
      for v in string.gmatch(verdicts, '[^,]+') do
        counts['recrawl:' .. v] = (counts['recrawl:' .. v] or 0) + 1
      end
      n = n + 1
    end
  end
  for field, c in pairs(counts) do redis.call('HINCRBY', keys[3], field, c) end
  if n > 0 then redis.call('DECRBY', keys[5], n) end
  return n
end

-- lb_join(members, member:<w>; worker, instance, ttl_ms): register; answers
-- 1, or the instance that holds the worker id while its key lives.
local function lb_join(keys, args)
  local cur = redis.call('GET', keys[2])
  if cur and cur ~= args[2] then return cur end
  local now = now_ms()
  redis.call('SET', keys[2], args[2], 'PX', args[3])
  redis.call('ZADD', keys[1], ms(now + tonumber(args[3])), args[1])
  return 1
end

-- lb_heartbeat(members, member:<w>, own:{p}...; worker, instance, ttl_ms,
-- token...): renew the member key and every held lease whose token still
-- matches.  Answers {live members, indexes (1-based) of the lost leases,
-- Redis's time in ms, 1 when another instance holds the worker id}.
local function lb_heartbeat(keys, args)
  local worker, instance, ttl = args[1], args[2], tonumber(args[3])
  local now = now_ms()
  local dup = 0
  local cur = redis.call('GET', keys[2])
  if cur and cur ~= instance then
    dup = 1
  else
    redis.call('SET', keys[2], instance, 'PX', args[3])
    redis.call('ZADD', keys[1], ms(now + ttl), worker)
  end
  redis.call('ZREMRANGEBYSCORE', keys[1], '-inf', '(' .. ms(now))
  local lost = {}
  for i = 3, #keys do
    if dup == 0 and redis.call('GET', keys[i]) == worker .. ':' .. args[i + 1] then
      redis.call('PEXPIRE', keys[i], args[3])
    else
      lost[#lost + 1] = i - 2
    end
  end
  return {redis.call('ZRANGEBYSCORE', keys[1], ms(now), '+inf'), lost, now, dup}
end

-- lb_leave(members, member:<w>, idle, loads; worker, instance): a clean stop.
local function lb_leave(keys, args)
  redis.call('ZREM', keys[1], args[1])
  if redis.call('GET', keys[2]) == args[2] then redis.call('DEL', keys[2]) end
  redis.call('HDEL', keys[3], args[1])
  if keys[4] then redis.call('HDEL', keys[4], args[1]) end
  return 1
end

-- lb_shares(shares; expected epoch, epoch, at ms, worker, share, ...): the
-- partition shares (load-aware partitions), written only when the stored
-- epoch is still the one the caller computed from ('' when none): of two
-- workers computing the next shares from the same record, one writes.
-- Answers 1 when written, 0 when another write came first.
local function lb_shares(keys, args)
  local cur = redis.call('HGET', keys[1], 'epoch') or ''
  if cur ~= args[1] then return 0 end
  redis.call('DEL', keys[1])
  redis.call('HSET', keys[1], 'epoch', args[2], 'at', args[3])
  for i = 4, #args, 2 do redis.call('HSET', keys[1], 'w:' .. args[i], args[i + 1]) end
  return 1
end

-- lb_ip_acquire(ip, iplast, ipwant; holder, ttl_ms): the IP lease.  Answers
-- {granted, last start ms or '', pace or '', retry in ms, wanted by
-- another, clean}: a fresh grant carries the previous holder's last start
-- and server pace; clean is 0 when the previous lease expired instead of
-- being released (its last requests are unknown: wait a full delay).  A
-- renewal (already ours) answers last start '' and whether another worker
-- waits for the IP.  A denial records the caller in ipwant.
local function lb_ip_acquire(keys, args)
  local holder, ttl = args[1], args[2]
  local cur = redis.call('GET', keys[1])
  if cur == holder then
    redis.call('PEXPIRE', keys[1], ttl)
    local want = redis.call('GET', keys[3])
    return {1, '', '', 0, (want and want ~= holder) and 1 or 0, 1}
  end
  if cur then
    redis.call('SET', keys[3], holder, 'PX', ttl)
    return {0, '', '', redis.call('PTTL', keys[1]), 0, 1}
  end
  redis.call('SET', keys[1], holder, 'PX', ttl)
  local want = redis.call('GET', keys[3])
  if want == holder then redis.call('DEL', keys[3]) end
  local last = redis.call('HMGET', keys[2], 'start', 'pace', 'rel')
  local clean = 1
  if last[3] == '0' then clean = 0 end
  redis.call('HSET', keys[2], 'rel', '0')
  redis.call('PEXPIRE', keys[2], 3600000)
  return {1, last[1] or '', last[2] or '', 0, (want and want ~= holder) and 1 or 0, clean}
end

-- lb_ip_release(ip, iplast; holder, last start ms, pace, keep_ms): let go of
-- the IP, leaving the last start and the server pace for the next holder.
local function lb_ip_release(keys, args)
  if redis.call('GET', keys[1]) ~= args[1] then return 0 end
  redis.call('DEL', keys[1])
  redis.call('HSET', keys[2], 'start', args[2], 'pace', args[3], 'rel', '1')
  redis.call('PEXPIRE', keys[2], args[4])
  return 1
end

-- lb_put(own, hash; owner, replace, field, value, ...): the fenced write of a
-- partition's robots.txt answers or site waits (replace: the hash is a
-- snapshot, rewritten whole).
local function lb_put(keys, args)
  if not owns(keys[1], args[1]) then return fenced() end
  if args[2] == '1' then redis.call('DEL', keys[2]) end
  for i = 3, #args, 2 do redis.call('HSET', keys[2], args[i], args[i + 1]) end
  return 1
end

-- lb_prune(own, hash; owner, field, ...): the fenced removal of a
-- partition's expired robots.txt answers.  Answers how many left.
local function lb_prune(keys, args)
  if not owns(keys[1], args[1]) then return fenced() end
  local n = 0
  for i = 2, #args do n = n + redis.call('HDEL', keys[2], args[i]) end
  return n
end

-- lb_view(members, idle, (cnt, q, own, fence) per partition...; rows): one
-- consistent view of the crawl's counters.  Answers {totals {field, n, ...},
-- rows (when asked: per partition accepted, fetched, forgotten, queued,
-- pending, owner, acquisitions), live members, idle reports {w, report,
-- ...}, Redis's time in ms}.
local function lb_view(keys, args)
  local rows_wanted = args[1] == '1'
  local totals = {accepted = 0, fetched = 0, queued = 0, pending = 0}
  local rows = {}
  for i = 3, #keys, 4 do
    local acc, fet, forg = 0, 0, 0
    local h = redis.call('HGETALL', keys[i])
    for j = 1, #h, 2 do
      local f, n = h[j], tonumber(h[j + 1])
      if f == 'accepted' then acc = n
      elseif f == 'fetched' then fet = n
      elseif string.sub(f, 1, 10) == 'forgotten:' then forg = forg + n end
      totals[f] = (totals[f] or 0) + n
    end
    local queued = redis.call('XLEN', keys[i + 1])
    local pending = 0
    local pe = redis.pcall('XPENDING', keys[i + 1], GROUP)
    if type(pe) == 'table' and pe[1] then pending = pe[1] end
    totals.queued = totals.queued + queued
    totals.pending = totals.pending + pending
    if rows_wanted then
      rows[#rows + 1] = acc
      rows[#rows + 1] = fet
      rows[#rows + 1] = forg
      rows[#rows + 1] = queued
      rows[#rows + 1] = pending
      rows[#rows + 1] = redis.call('GET', keys[i + 2]) or ''
      rows[#rows + 1] = tonumber(redis.call('GET', keys[i + 3]) or '0')
    end
  end
  local flat = {}
  for f, n in pairs(totals) do
    flat[#flat + 1] = f
    flat[#flat + 1] = n
  end
  local now = now_ms()
  return {flat, rows, redis.call('ZRANGEBYSCORE', keys[1], ms(now), '+inf'),
          redis.call('HGETALL', keys[2]), now}
end

redis.register_function('lb_meta', lb_meta)
redis.register_function('lb_enqueue', lb_enqueue)
redis.register_function('lb_acquire', lb_acquire)
redis.register_function('lb_release', lb_release)
redis.register_function('lb_read', lb_read)
redis.register_function('lb_claim', lb_claim)
redis.register_function('lb_crashed', lb_crashed)
redis.register_function('lb_ack', lb_ack)
redis.register_function('lb_join', lb_join)
redis.register_function('lb_heartbeat', lb_heartbeat)
redis.register_function('lb_leave', lb_leave)
redis.register_function('lb_shares', lb_shares)
redis.register_function('lb_ip_acquire', lb_ip_acquire)
redis.register_function('lb_ip_release', lb_ip_release)
redis.register_function('lb_put', lb_put)
redis.register_function('lb_prune', lb_prune)
redis.register_function{function_name = 'lb_view', callback = lb_view, flags = {'no-writes'}}
