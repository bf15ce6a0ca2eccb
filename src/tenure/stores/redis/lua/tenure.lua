local op, P = ARGV[1], ARGV[2]
local function key(kind, id) return P .. ':' .. kind .. ':' .. id end

local function alive(sid) return redis.call('exists', key('s', sid)) == 1 end
local function left(sid) return redis.call('pttl', key('s', sid)) end
local function delay(sid) return tonumber(redis.call('get', key('d', sid))) or 0 end

-- Ms the free name is still held back by lock-delay (0: not held back).
local function held_back(name) return math.max(0, redis.call('pttl', key('h', name))) end

-- Each change of a lock goes to its event stream, for watches.
local function note(name, fields)
  local e = key('e', name)
  redis.call('xadd', e, 'MAXLEN', '~', __KEPT__, '*', unpack(fields))
  redis.call('pexpire', e, 86400000)
end

-- The session's count of grants and queue places on a name.
local function involve(sid, name, delta)
  local n = key('n', sid)
  if redis.call('hincrby', n, name, delta) <= 0 then redis.call('hdel', n, name) end
  local ms = left(sid)
  if ms > 0 then redis.call('pexpire', n, ms) end
end

-- The lock's fields if its holder's session lives; a dead holder's lock is deleted.
local function holder(name)
  local l = key('l', name)
  local h = redis.call('hmget', l, 's', 't', 'r', 'q', 'o', 'v')
  if not h[1] then return nil end
  if not alive(h[1]) then
    redis.call('del', l)
    note(name, {'was', h[2]})
    return nil
  end
  return h
end

-- Grant a free lock: the counter is raised (and above floor), the lock lives as its session.
local function grant(name, sid, rid, score, floor)
  local c = key('c', name)
  local t = redis.call('incr', c)
  if t <= floor then t = floor + 1; redis.call('set', c, t) end
  local owner = redis.call('get', key('s', sid))
  local l = key('l', name)
  redis.call('hset', l, 's', sid, 't', t, 'r', rid, 'q', score, 'o', owner)
  local ms, d = math.max(1, left(sid)), delay(sid)
  redis.call('pexpire', l, ms)
  if d > 0 then redis.call('set', key('h', name), t, 'PX', ms + d)
  else redis.call('del', key('h', name)) end
  note(name, {'t', t, 's', sid, 'o', owner})
  return t
end

-- The first live waiter (request id, session id, score); dead ones are dropped.
local function first(name)
  local q = key('q', name)
  while true do
    local top = redis.call('zrange', q, 0, 0, 'WITHSCORES')
    if #top == 0 then return nil end
    local sid = string.match(top[1], '^([^/]+)/')
    if sid and alive(sid) then return top[1], sid, top[2] end
    redis.call('zrem', q, top[1])
  end
end

-- The lock is free: grant it to the first live waiter and wake that waiter only (not while
-- held back: then the first waiter to ask again after the delay hands it over). The wake-up
-- goes to the waiter's session's list, which one reader of that session pops for all its
-- waiters: '<rid> <token>'.
local function hand_over(name)
  if held_back(name) > 0 then return end
  local rid, sid, score = first(name)
  if not rid then return end
  redis.call('zrem', key('q', name), rid)
  local t = grant(name, sid, rid, score, 0)
  local w = key('w', sid)
  redis.call('rpush', w, rid .. ' ' .. t)
  redis.call('pexpire', w, math.max(1, left(sid)))
end

-- A grant handed to rid is gone before rid took it: its wake-up must not reach a later wait of
-- the same request (a waiter takes a pushed token without asking again).
local function unpush(sid, rid, t)
  redis.call('lrem', key('w', sid), 0, rid .. ' ' .. t)
end

-- A queue score after every score in the queue (server time in µs).
local function next_score(q)
  local now = redis.call('time')
  local s = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local last = redis.call('zrange', q, -1, -1, 'WITHSCORES')
  if #last > 0 and tonumber(last[2]) >= s then s = tonumber(last[2]) + 1 end
  return string.format('%d', s)
end

local function queue(sid, q, score, rid)
  redis.call('zadd', q, score, rid)
  local ms = left(sid)
  if redis.call('pttl', q) < ms then redis.call('pexpire', q, ms) end
end

if op == 'open' then  -- sid ttl owner lock-delay
  redis.call('set', key('s', ARGV[3]), ARGV[5], 'PX', ARGV[4])
  if (tonumber(ARGV[6]) or 0) > 0 then
    redis.call('set', key('d', ARGV[3]), ARGV[6], 'PX', ARGV[4])
  end
  return 1

elseif op == 'renew' then  -- sid ttl: the session and all it holds or waits for
  local sid, ttl = ARGV[3], tonumber(ARGV[4])
  if redis.call('pexpire', key('s', sid), ttl) == 0 then return 0 end
  redis.call('pexpire', key('d', sid), ttl)
  local d = delay(sid)
  local renewed = {'ok'}  -- and the names of the locks renewed (Redlock counts them)
  local n = key('n', sid)
  for _, name in ipairs(redis.call('hkeys', n)) do
    local l = key('l', name)
    local h = redis.call('hmget', l, 's', 't')
    if h[1] == sid then
      redis.call('pexpire', l, ttl)
      if d > 0 then redis.call('set', key('h', name), h[2], 'PX', ttl + d) end
      renewed[#renewed + 1] = name
    end
    local q = key('q', name)
    if redis.call('pttl', q) < ttl then redis.call('pexpire', q, ttl) end
  end
  redis.call('pexpire', n, ttl)
  redis.call('pexpire', key('v', sid), ttl)
  return renewed

elseif op == 'close' then  -- sid
  local sid = ARGV[3]
  redis.call('del', key('s', sid), key('d', sid))
  local n = key('n', sid)
  for _, name in ipairs(redis.call('hkeys', n)) do
    local l = key('l', name)
    local h = redis.call('hmget', l, 's', 't')
    if h[1] == sid then
      redis.call('del', l, key('h', name))
      note(name, {'was', h[2]})
      hand_over(name)
    end
  end
  redis.call('del', n, key('v', sid))
  return 1

elseif op == 'revoke' then  -- name token ('': any) now record: end the grant, hold it back
  local name = ARGV[3]
  local h = holder(name)
  if not h or (ARGV[4] ~= '' and h[2] ~= ARGV[4]) then return false end
  local sid, t, ms = h[1], h[2], 0
  -- Out of the session (its renewals no longer touch it, its release frees nothing); unless
  -- now, held back for the session's time left plus its lock-delay, as after an expiry.
  redis.call('del', key('l', name))
  involve(sid, name, -1)
  unpush(sid, h[3], t)
  if ARGV[5] == '1' then
    redis.call('del', key('h', name), key('x', name))
  else
    ms = math.max(1, left(sid)) + delay(sid)
    redis.call('set', key('h', name), t, 'PX', ms)
    redis.call('set', key('x', name), t .. ' ' .. ARGV[6], 'PX', ms)
  end
  local v = key('v', sid)  -- the session's notices: read after each renewal, gone with it
  redis.call('hset', v, name .. '/' .. t, ARGV[6])
  redis.call('pexpire', v, math.max(1, left(sid)))
  note(name, {'was', t})
  if ARGV[5] == '1' then hand_over(name) end
  return {t, ms}

elseif op == 'revoked' then  -- sid: its notices, field (name/token) and record, flat
  return redis.call('hgetall', key('v', ARGV[3]))

elseif op == 'attempt' then  -- sid name rid enqueue score floor
  local sid, name, rid = ARGV[3], ARGV[4], ARGV[5]
  local enqueue, score, floor = ARGV[6] == '1', ARGV[7], tonumber(ARGV[8])
  if not alive(sid) then return {'gone'} end
  local q = key('q', name)
  local h = holder(name)
  if h and h[3] == rid then  -- handed to us: its wake-up, if not read yet, is spent
    unpush(sid, rid, h[2])
    return {'granted', h[2], h[4]}
  end
  local back = 0
  if not h then back = held_back(name) end
  if not h and back == 0 then
    local top = first(name)
    if not top or top == rid then
      if top then redis.call('zrem', q, rid) else involve(sid, name, 1) end
      if score == '0' then score = next_score(q) end
      return {'granted', grant(name, sid, rid, score, floor), score}
    end
    hand_over(name)  -- freed by expiry, nobody handed it on: the first in line gets it now
    h = holder(name)
  end
  local mine = redis.call('zscore', q, rid)
  if not mine and enqueue then
    if score == '0' then score = next_score(q) end
    queue(sid, q, score, rid)
    involve(sid, name, 1)
    mine = score
  end
  h = h or {false, false, false, false, false, false}
  local ms = redis.call('pttl', key('l', name))
  return {'busy', mine or false, h[2], h[5], h[6], ms, redis.call('zcard', q), h[3], h[4], back}

elseif op == 'release' then  -- sid name token rid ('' for either: matched by the other)
  local sid, name = ARGV[3], ARGV[4]
  local l = key('l', name)
  local h = redis.call('hmget', l, 's', 't', 'r')
  if redis.call('zrem', key('q', name), ARGV[6]) == 1 then  -- a Redlock request's place
    involve(sid, name, -1)
  end
  if h[1] ~= sid or (h[2] ~= ARGV[5] and h[3] ~= ARGV[6]) then return 0 end
  redis.call('del', l, key('h', name))
  involve(sid, name, -1)
  note(name, {'was', h[2]})
  hand_over(name)
  return 1

elseif op == 'leave' then  -- sid name rid score: leave the queue, or ('' score) re-queue
  local sid, name, rid, score = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
  local q, l = key('q', name), key('l', name)
  local requeue = score ~= '' and alive(sid)
  local was = redis.call('zrem', q, rid) == 1
  local h = redis.call('hmget', l, 'r', 't')
  if h[1] == rid then  -- handed to us as we gave up: pass it on
    redis.call('del', l, key('h', name))
    note(name, {'was', h[2]})
    unpush(sid, rid, h[2])
    was = true
  end
  if requeue then
    queue(sid, q, score, rid)
    if not was then involve(sid, name, 1) end
  elseif was then
    involve(sid, name, -1)
  end
  if not holder(name) then hand_over(name) end
  return 1

elseif op == 'proclaim' then  -- sid name token value
  local sid, name = ARGV[3], ARGV[4]
  local l = key('l', name)
  local h = redis.call('hmget', l, 's', 't', 'o')
  if h[1] ~= sid or h[2] ~= ARGV[5] or not alive(sid) then return 0 end
  redis.call('hset', l, 'v', ARGV[6])
  note(name, {'t', h[2], 's', sid, 'o', h[3], 'v', ARGV[6]})
  return 1

elseif op == 'raise' then  -- name rid token: counter >= token; the grant of rid gets token
  local name, rid, t = ARGV[3], ARGV[4], tonumber(ARGV[5])
  local c = key('c', name)
  if (tonumber(redis.call('get', c)) or 0) < t then redis.call('set', c, t) end
  local l = key('l', name)
  local h = redis.call('hmget', l, 'r', 't', 's', 'o', 'v')
  if h[1] ~= rid then return 0 end
  if tonumber(h[2]) < t then
    redis.call('hset', l, 't', t)
    if redis.call('exists', key('h', name)) == 1 then
      redis.call('set', key('h', name), t, 'KEEPTTL')
    end
    local f = {'t', t, 's', h[3], 'o', h[4]}
    if h[5] then f[7] = 'v'; f[8] = h[5] end
    note(name, f)
  end
  return 1

elseif op == 'rget' then  -- key
  local h = redis.call('hmget', key('r', ARGV[3]), 'value', 'version')
  if not h[1] then return false end
  return {h[1], h[2]}

elseif op == 'rput' then  -- key value version wid: write if at version (0: absent)
  local k = key('r', ARGV[3])
  local h = redis.call('hmget', k, 'version', 'wid')
  if h[1] and h[2] == ARGV[6] then return tonumber(h[1]) end  -- ours, its answer was lost
  if (ARGV[5] == '0' and h[1]) or (ARGV[5] ~= '0' and h[1] ~= ARGV[5]) then return 0 end
  local v = (tonumber(h[1]) or 0) + 1
  redis.call('hset', k, 'value', ARGV[4], 'version', v, 'wid', ARGV[6])
  redis.call('zadd', P .. ':records', 0, ARGV[3])
  return v

elseif op == 'hput' then  -- sid name token key [value]: write (no value: delete) if held
  local sid, name = ARGV[3], ARGV[4]
  local h = redis.call('hmget', key('l', name), 's', 't')
  if h[1] ~= sid or h[2] ~= ARGV[5] or not alive(sid) then return 0 end
  local k = key('r', ARGV[6])
  if ARGV[7] then
    local v = (tonumber(redis.call('hget', k, 'version')) or 0) + 1
    redis.call('hset', k, 'value', ARGV[7], 'version', v)
    redis.call('hdel', k, 'wid')
    redis.call('zadd', P .. ':records', 0, ARGV[6])
  else
    redis.call('del', k)
    redis.call('zrem', P .. ':records', ARGV[6])
  end
  return 1

elseif op == 'rlist' then  -- prefix: key, value, version of each record, in key order
  local out = {}
  for _, k in ipairs(redis.call('zrangebylex', P .. ':records', '[' .. ARGV[3],
                                '(' .. ARGV[3] .. '\255')) do
    local h = redis.call('hmget', key('r', k), 'value', 'version')
    if h[1] then out[#out + 1] = k; out[#out + 1] = h[1]; out[#out + 1] = h[2] end
  end
  return out

elseif op == 'held' then  -- name: its hold-back's token and ms left, if nobody holds it
  local name = ARGV[3]
  if holder(name) then return false end
  local back = held_back(name)
  if back == 0 then return false end
  return {redis.call('get', key('h', name)), back, redis.call('get', key('x', name))}

elseif op == 'info' then  -- name
  local name = ARGV[3]
  local h = holder(name)
  if not h then return false end
  local ms = redis.call('pttl', key('l', name))
  return {h[2], h[5], h[6], ms, redis.call('zcard', key('q', name)), h[1], h[3], h[4]}
end
return redis.error_reply('tenure: unknown operation ' .. tostring(op))
