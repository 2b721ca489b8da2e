-- far.lua: the far tier of the Redis store's script. The build appends
-- this file to delayq.lua: one chunk, one library. The functions not marked
-- local are declared local in delayq.lua ("far jobs"), which calls them;
-- they call its helpers in turn.
--
-- A job added delayed beyond the horizon costs less than half the memory of
-- a near one: a hash field and a zset member each cost more than a 100-byte
-- body (docs/benchmarks.md). Far jobs live in buckets of FW ms of due time:
--
-- f:<b>  list of far records, appended as added: the id's length - 1 (u8),
--        the id, then the record without its state and deadline (bytes
--        2-38 and 47 on: attempts ... created, ord, the rest). b is the
--        bucket's start in seconds from 2024 (EPOCH); FW is whole seconds.
-- fz     zset of the buckets: member b, score the bucket's start (ms).
-- fo     hash b -> how far the carry got in bucket b (see fcarry).
-- fi:<n> the index: hashes id -> struct '<II' (b, position in f:<b>),
--        small enough (FLOAD ids on average) to stay listpacks. Their
--        number grows by linear hashing: with level L and split pointer S
--        there are 2^L + S of them, and id goes to h mod 2^L, or h mod
--        2^(L+1) if that is below S (h: the top 32 bits of its SHA-1).
--        The stats fields fn (far jobs), fl (L) and fs (S) hold the state;
--        when fn is back to 0 the index starts again from one hash.
--
-- A job is far from its ADD to the carry that takes its bucket, FW ms
-- before the bucket starts: fcarry adds its record to the pool and its id
-- to the delay zset as an ADD would have. A far job deleted or replaced
-- leaves its list entry behind (a hole: the index no longer points at it),
-- which the carry and LIST skip. A bucket holds at most FPOS entries (the
-- LIST cursor's room); adds beyond that, and past 2092, stay near.
--
-- If a call stops halfway. Redis does not undo what a script did before an
-- error, and the lists and index hashes are not among the call's KEYS (their
-- names depend on the data), so Redis checks them only when they are used:
-- while their slot migrates to another node (resharding), the first use of
-- one that is not here fails the call. So every far operation reads all
-- it needs before it writes, writes in an order where each prefix is a
-- state the others handle, and keeps its bookkeeping at once, not at the
-- end of the call: ADD registers the bucket in fz and counts the jobs (fn)
-- before it pushes them (a count may run over, never short: at 0 the index
-- is empty); the carry writes the pool and the delay zset before the index
-- forgets the jobs, and moves its bookmark (fo) last (an entry met again is
-- a hole); a split writes the moved entries before it deletes them and then
-- the new level and split pointer. fz and fo are among the KEYS.
local EPOCH = 1704067200000 -- 2024-01-01, as ord's
local FLOAD = 32
local FCHUNK = 100 -- far list entries a call carries (~10 us each: ~1 ms a
                   -- call; the timers send the next call at once)
local Z8 = '\0\0\0\0\0\0\0\0'

-- the group's far state, read once per call; returns how many far jobs
function fstate(g)
  if not g.fn then
    local v = call('HMGET', g.stats, 'fn', 'fl', 'fs')
    g.fn, g.fl, g.fs = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0
  end
  return g.fn
end

-- adds d to the count of far jobs, at once (see "If a call stops halfway");
-- at 0 the index starts again from one hash
local function fcount(g, d)
  if d == 0 then return end
  g.fn = g.fn + d
  call('HINCRBY', g.stats, 'fn', d)
  if g.fn <= 0 and (g.fl > 0 or g.fs > 0) then
    g.fl, g.fs = 0, 0
    call('HSET', g.stats, 'fl', 0, 'fs', 0)
  end
end

function fkey(g, b) return g.base .. 'f:' .. fmt('%d', b) end

-- an id's hash for the index: the top 32 bits of its SHA-1
local function ihash(id) return tonumber(ssub(redis.sha1hex(id), 1, 8), 16) end

-- the index hash holding id
function ikey(g, id)
  local h = ihash(id)
  local m = 2 ^ g.fl
  local n = h % m
  if n < g.fs then n = h % (2 * m) end
  return g.base .. 'fi:' .. fmt('%d', n)
end

-- the bucket (its start, s from 2024) of a delayed job due then, or nil
-- if the job is near
function fbucket(due)
  if FW <= 0 then return nil end
  local b = math.floor((due - EPOCH) / FW) * (FW / 1000)
  if EPOCH + b * 1000 <= now + FW or b >= 2 ^ 31 then return nil end
  return b
end

-- a record (delayed) as stored in a far list, and back
function tofar(id, r)
  return string.char(#id - 1) .. id .. ssub(r, 2, 38) .. ssub(r, 47)
end
local function unfar(f)
  local l = sbyte(f, 1) + 1
  return ssub(f, 2, l + 1), '\0' .. ssub(f, l + 2, l + 38) .. Z8 .. ssub(f, l + 39)
end

-- the far record of id, or nil
function fget(g, id)
  if fstate(g) == 0 then return nil end
  local v = call('HGET', ikey(g, id), id)
  if not v then return nil end
  local b, pos = sunpack('<II', v)
  local f = call('LINDEX', fkey(g, b), pos)
  if not f then return nil end
  local _, r = unfar(f)
  return r
end

-- forgets far job id (its list entry becomes a hole); true if it was one
function fdel(g, id)
  if fstate(g) == 0 or call('HDEL', ikey(g, id), id) == 0 then return false end
  fcount(g, -1)
  return true
end

-- splits the index hash at the split pointer
local function split(g)
  local m = 2 ^ g.fl
  local from = g.base .. 'fi:' .. fmt('%d', g.fs)
  local kv = call('HGETALL', from)
  local mv, gone = {}, {}
  for i = 1, #kv, 2 do
    local id = kv[i]
    if ihash(id) % (2 * m) ~= g.fs then
      mv[#mv + 1] = id
      mv[#mv + 1] = kv[i + 1]
      gone[#gone + 1] = id
    end
  end
  if #gone > 0 then
    callv('HSET', g.base .. 'fi:' .. fmt('%d', g.fs + m), mv)
    callv('HDEL', from, gone)
  end
  g.fs = g.fs + 1
  if g.fs == m then g.fl = g.fl + 1; g.fs = 0 end
  call('HSET', g.stats, 'fl', g.fl, 'fs', g.fs)
end

-- appends far jobs: q maps a bucket to its ids, far records and their
-- places in the caller's run (id, f, i, id, f, i, ...), in the order added.
-- An id the index already holds is a far job added before: its new entry is
-- a hole, and clash(i) is told.
function fput(g, q, clash)
  fstate(g)
  for b, l in pairs(q) do
    local fs = {}
    for i = 2, #l, 3 do fs[#fs + 1] = l[i] end
    local start = EPOCH + b * 1000
    call('ZADD', g.fz, 'NX', fmt('%d', start), fmt('%d', b))
    fcount(g, #fs) -- before the index has them: a count never falls short
    local len = callv('RPUSH', fkey(g, b), fs)
    local pos, taken = len - #fs, 0
    for i = 1, #l, 3 do
      local id = l[i]
      if call('HSETNX', ikey(g, id), id, spack('<II', b, pos)) == 0 then
        clash(l[i + 2])
        taken = taken + 1
      end
      pos = pos + 1
    end
    fcount(g, -taken)
    -- the instances wake for the carry, FW before the bucket starts
    if not g.h0 then g.h0 = nextdue(g) end
    if not g.mi or start - FW < g.mi then g.mi = start - FW end
    while g.fn > FLOAD * (2 ^ g.fl + g.fs) do split(g) end
  end
end

-- moves the jobs of the buckets starting by now + FW to the pool and the
-- delay zset, up to FCHUNK list entries a call, ten times that once the
-- first starts within FW / 2 (behind: a bucket as full as ADDs can make it
-- is carried in about FW / 2 at FCHUNK a call); fo holds how far a bucket
-- got, whose list is deleted when done
function fcarry(g)
  local budget
  while budget ~= 0 do
    local h = call('ZRANGEBYSCORE', g.fz, '-inf', now + FW, 'WITHSCORES', 'LIMIT', 0, 1)
    if #h == 0 then return end
    if not budget then
      budget = tonumber(h[2]) - now < FW / 2 and 10 * FCHUNK or FCHUNK
    end
    fstate(g)
    local bs = h[1]
    local b = tonumber(bs)
    local key = fkey(g, b)
    local k = tonumber(call('HGET', g.fo, bs)) or 0
    local want = math.min(budget, CHUNK)
    local fs = call('LRANGE', key, k, k + want - 1)
    -- reads first: the live entries (the index points at them)
    local ids, recs, iks = {}, {}, {}
    for i = 1, #fs do
      local id, r = unfar(fs[i])
      local ik = ikey(g, id)
      if call('HGET', ik, id) == spack('<II', b, k + i - 1) then
        ids[#ids + 1], recs[#recs + 1], iks[#iks + 1] = id, r, ik
      end
    end
    -- then the pool and the delay zset, then the index forgets them
    if #ids > 0 then
      local hs, pz, byk = {}, {}, {}
      for i = 1, #ids do
        local id, r = ids[i], recs[i]
        hs[2 * i - 1], hs[2 * i] = id, r
        local due = sunpack('<d', r, 23)
        pz[2 * i - 1], pz[2 * i] = fmt('%d', due), dmember(r, id)
        insert(g, due, 'd')
        local l = byk[iks[i]]
        if not l then l = {}; byk[iks[i]] = l end
        l[#l + 1] = id
      end
      callv('HSET', g.pool, hs)
      callv('ZADD', g.delay, pz)
      for ik, l in pairs(byk) do callv('HDEL', ik, l) end
      fcount(g, -#ids)
    end
    budget = budget - #fs
    if #fs < want then
      call('UNLINK', key)
      call('ZREM', g.fz, bs)
      call('HDEL', g.fo, bs)
    else
      call('HSET', g.fo, bs, k + #fs)
    end
  end
end

-- one page of the far part of a delayed LIST from cursor c (b * FPOS +
-- position; 0: the first bucket): appends the ids of live far jobs to out
-- until it holds n more (reading at most about 16 n entries: holes); returns
-- the next cursor (FARCUR + ...), or nil at the end. Far jobs are listed
-- before near ones: a job the carry moves during a scan is then listed in
-- one part or the other.
function farpage(g, c, n, out)
  local b = math.floor(c / FPOS)
  local pos = c - b * FPOS
  local o, work = #out, 0
  fstate(g)
  while #out - o < n and work < 16 * n + 256 do
    local h = call('ZRANGEBYSCORE', g.fz, EPOCH + b * 1000, '+inf', 'LIMIT', 0, 1)
    if #h == 0 then return nil end
    local nb = tonumber(h[1])
    if nb ~= b then b = nb; pos = 0 end
    local want = n - (#out - o)
    local fs = call('LRANGE', fkey(g, b), pos, pos + want - 1)
    for i = 1, #fs do
      local l = sbyte(fs[i], 1) + 1
      local id = ssub(fs[i], 2, l + 1)
      if call('HGET', ikey(g, id), id) == spack('<II', b, pos + i - 1) then
        out[#out + 1] = id
      end
    end
    work = work + #fs + 1
    if #fs < want then b = b + 1; pos = 0 else pos = pos + #fs end
  end
  return FARCUR + b * FPOS + pos
end

-- deletes every far job of the group; returns how many there were
function fpurge(g)
  local n = fstate(g)
  -- the index first: a list entry it no longer points at is a hole
  local keys = {}
  for i = 0, 2 ^ g.fl + g.fs - 1 do keys[#keys + 1] = g.base .. 'fi:' .. fmt('%d', i) end
  for i = 1, #keys, CHUNK do call('UNLINK', unpack(keys, i, math.min(#keys, i + CHUNK - 1))) end
  for _, b in ipairs(call('ZRANGE', g.fz, 0, -1)) do call('UNLINK', g.base .. 'f:' .. b) end
  call('UNLINK', g.fz, g.fo)
  g.fn, g.fl, g.fs = 0, 0, 0
  call('HSET', g.stats, 'fn', 0, 'fl', 0, 'fs', 0)
  return n
end
