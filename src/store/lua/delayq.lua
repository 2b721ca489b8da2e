#!lua
-- delayq: every job transition of the Redis store (docs/redis.md).
-- One call runs a batch of requests against a set of shard groups; each
-- request is one transition and all of them run in this one atomic script.
--
-- KEYS: 9 per group: pool ready delay lease dead stats pready fz fo (one
-- hash tag each; the far tier's lists and index hashes, far.lua, are named
-- from pool's).
-- ARGV: now inst chan far G, G x (topic shard carry), R, then R requests:
--       far: the far tier's bucket width and horizon in ms (0: none);
--       op ngroups gidx... nargs args...
--       carry '1': the caller knows of jobs due by now in the group; with
--       '0' adds skip the carry (reserves, and the rarer ops, always do it).
-- Returns {results, info}: results is flat, per request a count then that
-- many values; info holds per group the next due time (>= 0, or -1: none),
-- or -2 (no change known), or -3 - t ("t or earlier": jobs were queued for
-- time t), the ready list's length if jobs became ready (else -1), and the
-- push ready list's length if push jobs became ready or wait there after a
-- carry (else -1).
--
-- pool:  id -> record: struct '<BIIIBIIddd' (state attempts ttr retries
--        bkind bbase bmax due created deadline), 8 bytes of ord (big
--        endian: created ms << 22 | a sequence, made by the instance that
--        added the job), then the body. A record whose state says delayed
--        but whose due time has passed is ready: the carry moves its id to
--        the ready list without rewriting it. Nor does a reserve rewrite
--        it: a job whose id is in the lease zset is reserved, its deadline
--        is its score there, and its attempts count that lease on top of
--        the record's (see "leases" below).
-- delay: zset, member = ord .. id, score = due time, so jobs due in the
--        same millisecond come out in the order they were added.
-- The far tier: see "far jobs" below.
-- ready: list of ids.  lease: zset id -> lease end.  dead: zset id -> time
-- of death.  stats: hash of counters.  pready: list of ids of ready push
-- jobs (see "push jobs" below).
-- The delay and lease zsets hold a sentinel at +inf whose long member keeps
-- them in Redis's skiplist encoding: in the compact encoding every insert
-- and remove scans the set, and a lease set typically holds just the tens
-- of jobs in flight.
--
-- Every redis.call costs more than the Lua around it, so runs of adds, and
-- runs of single-group reserves and del/acks, on one group are queued and
-- done with a few calls for the whole run (see sync); a request of any
-- other kind on the group first completes the run, so the requests take
-- effect in their order -- except that within a run the reserves go before
-- the del/acks. Those commute for reserved jobs, which is what ACK is for;
-- for others it is one of the orders concurrent clients could have seen.
--
-- Loaded once as a function library (FUNCTION LOAD, Redis 7: the server
-- puts "#!lua name=<lib>" first and registers main after the end), whose
-- functions then live across calls; or sent as a script (EVAL / EVALSHA,
-- older Redis: the server appends "return main(KEYS, ARGV)"), which
-- defines them all again on every call -- about 20 us a call. Nothing at
-- load time may touch a global (a library is loaded without them), so the
-- globals this file uses, and the call's own values, are bound by main.
local call, spack, sunpack, ssub, sbyte, fmt
local KEYS, ARGV, nows, now, inst, chan, FW
local HDR = '<BIIIBIIddd' -- then 8 bytes of ord, then the body
local BODY = 55
local CHUNK = 1000
local DCHUNK = 10000 -- due jobs carried per group and call
-- ids per HMGET of a run of GETs: a record may be as big as a body gets
-- (1 MiB by default), and one HMGET of 16 records of 512 KB costs Redis
-- half as much again as 16 HGETs or 4 HMGETs of 4 (docs/benchmarks.md)
local GCHUNK = 4
local DELAYED, READY, RESERVED, DEAD = 0, 1, 2, 3
local OK, EXISTS, BUSY, NOTRESERVED, TAKEN = 0, 1, 2, 3, 4
local LSENT = '\0' .. ('~'):rep(64)
local DSENT = ('\255'):rep(8) .. LSENT
local INF = 1 / 0

local function cnt(g, f, n)
  if n ~= 0 then g.c[f] = (g.c[f] or 0) + n end
end

-- --- push jobs (docs/push.md) -----------------------------------------------
-- A job added with a URL has the top bit of its ord set, in its record and so
-- in its delay member, and its URL and content type after the ord (read by
-- the server only). Wherever a job becomes ready, a push job goes to the
-- group's pready list instead of ready: RESERVE never sees it, reserve_push
-- (OPS.preserve) pops it. g.pd says push jobs became ready in this call,
-- g.pw that the caller wants pready's length anyway (a carry: the sweep
-- wakes the pushers of topics whose push jobs wait), g.plen its length.
local function precord(r) return sbyte(r, 47) >= 128 end
local function pmember(m) return sbyte(m, 1) >= 128 end

-- one job made ready, with cmd ('RPUSH', or 'LPUSH' for the head)
local function ready1(g, cmd, id, r)
  if precord(r) then
    g.plen = call(cmd, g.pready, id); g.pd = true
  else
    g.rlen = call(cmd, g.ready, id); g.rd = true
  end
end

-- Every command whose arguments come from a list goes through callv or
-- mget: Lua's unpack puts the list on the C stack, which holds about 8,000
-- values ("too many results to unpack"), so lists go in chunks of CHUNK (an
-- even number: field/value and score/member pairs stay whole).
local function callv(cmd, key, list)
  local n = #list
  local r
  for i = 1, n, CHUNK do
    local j = i + CHUNK - 1
    if j > n then j = n end
    r = call(cmd, key, unpack(list, i, j))
  end
  return r -- the last reply (RPUSH: the list's length)
end

-- HMGET or ZMSCORE (cmd) of any number of fields or members: the values,
-- in order (false if absent)
local function mget(cmd, key, ids)
  local n = #ids
  if n <= CHUNK then return call(cmd, key, unpack(ids)) end
  local out = {}
  for i = 1, n, CHUNK do
    local part = call(cmd, key, unpack(ids, i, math.min(n, i + CHUNK - 1)))
    for j = 1, #part do out[i + j - 1] = part[j] end
  end
  return out
end

-- the string of the byte values in list (string.char in chunks: unpack)
local function bytes(list)
  local n = #list
  if n <= CHUNK then return string.char(unpack(list)) end
  local parts = {}
  for i = 1, n, CHUNK do parts[#parts + 1] = string.char(unpack(list, i, math.min(n, i + CHUNK - 1))) end
  return table.concat(parts)
end

-- ids made ready, in order: plain ones to ready, push ones to pready
local function readyv(g, plain, push)
  if #plain > 0 then g.rlen = callv('RPUSH', g.ready, plain); g.rd = true end
  if #push > 0 then g.plen = callv('RPUSH', g.pready, push); g.pd = true end
end

-- record r with state st, attempts att and due time due (nil: r's) and
-- deadline dl (0: none)
local function reheader(r, st, att, due, dl)
  return spack('<B', st) .. (att and spack('<I', att) or ssub(r, 2, 5)) .. ssub(r, 6, 22) ..
    (due and spack('<d', due) or ssub(r, 23, 30)) .. ssub(r, 31, 38) .. spack('<d', dl) ..
    ssub(r, 47)
end

-- the delay zset's member for a record and id
local function dmember(r, id)
  return ssub(r, 47, 54) .. id
end

local function nextdue(g)
  local t = -1
  local a = call('ZRANGE', g.delay, 0, 0, 'WITHSCORES')
  if a[2] then
    g.sd = true -- not empty: it has its sentinel (insert)
    t = tonumber(a[2])
    if t == INF then t = -1 end
  end
  local b = call('ZRANGE', g.lease, 0, 0, 'WITHSCORES')
  if b[2] then
    g.sl = true
    local x = tonumber(b[2])
    if x ~= INF and (t < 0 or x < t) then t = x end
  end
  local f = call('ZRANGE', g.fz, 0, 0, 'WITHSCORES') -- the next far carry
  if f[2] then
    local x = tonumber(f[2]) - FW
    if t < 0 or x < t then t = x end
  end
  return t
end

-- real members of the delay or lease zset (not the sentinel)
local function zcount(key)
  return call('ZCOUNT', key, '-inf', '(+inf')
end

-- before a job is queued in the delay (z 'd') or lease (z 'l') zset at
-- time t: note the next due time the other instances may know of (the head
-- before it), and see that the zset has its sentinel (a zset that is not
-- empty has it: every insert comes through here, and nothing but UNLINK
-- removes the sentinel)
local function insert(g, t, z)
  if not g.h0 then g.h0 = nextdue(g) end
  if not g.mi or t < g.mi then g.mi = t end
  if z == 'd' then
    if not g.sd then g.sd = true; call('ZADD', g.delay, 'NX', '+inf', DSENT) end
  elseif not g.sl then
    g.sl = true; call('ZADD', g.lease, 'NX', '+inf', LSENT)
  end
end

-- --- leases ------------------------------------------------------------------
-- A reserve only adds the id to the lease zset: the record keeps the state
-- it had (ready, or delayed and due) and the attempts before this lease, and
-- the server reads the reserved job from it (redis_reply.c). Whatever ends
-- the lease rewrites the record anyway (nack, release, an ended lease) or
-- deletes it (ack). Records written reserved by an older build (state 2,
-- attempts already counting the lease) are still understood.

-- the attempts of a reserved job's record r, its lease counted
local function latt(r)
  local a = sunpack('<I', r, 2)
  if sbyte(r, 1) ~= RESERVED then a = a + 1 end
  return a
end

-- the job's lease end (a number), or nil if it is not reserved
local function leased(g, id)
  local s = call('ZSCORE', g.lease, id)
  return s and tonumber(s) or nil
end

-- --- far jobs (far.lua) --------------------------------------------------------
-- Jobs added due beyond the horizon are kept compact until shortly before
-- they are due: far.lua, which the build appends to this file, says how and
-- defines these.
local fstate, fkey, ikey, fbucket, tofar, fget, fdel, fput, fcarry, farpage, fpurge
local FPOS = 2 ^ 21 -- entries a far bucket may hold: a far LIST cursor is
                    -- FARCUR + bucket * FPOS + position
local FARCUR = 2 ^ 44 -- above any near cursor; itself: the near part's start

-- due delayed jobs -> ready (their records are not touched); ended leases
-- -> ready (attempts <= retries) or dead; both in time order. (Far buckets
-- are carried by OPS.carry only.)
local function carry(g)
  local push, pj = {}, {} -- plain and push ids, in time order
  local e = call('ZRANGEBYSCORE', g.lease, '-inf', nows, 'WITHSCORES', 'LIMIT', 0, CHUNK)
  local m
  if #e == 0 then
    m = call('ZRANGEBYSCORE', g.delay, '-inf', nows, 'LIMIT', 0, DCHUNK)
    for i = 1, #m do
      local x = m[i]
      if pmember(x) then pj[#pj + 1] = ssub(x, 9) else push[#push + 1] = ssub(x, 9) end
    end
  else -- times are needed to merge with the ended leases
    m = call('ZRANGEBYSCORE', g.delay, '-inf', nows, 'WITHSCORES', 'LIMIT', 0, DCHUNK)
  end
  local nm = #m
  if nm > 0 then
    local k = #e == 0 and nm or nm / 2
    call('ZREMRANGEBYRANK', g.delay, 0, k - 1)
    cnt(g, 'xdelay', k)
  end
  if #e > 0 then
    call('ZREMRANGEBYRANK', g.lease, 0, #e / 2 - 1)
    cnt(g, 'xlease', #e / 2)
    local ids = {}
    for i = 1, #e, 2 do ids[#ids + 1] = e[i] end
    local recs = mget('HMGET', g.pool, ids)
    local hs, dz, back, btime, bpush = {}, {}, {}, {}, {}
    local nexp, ndead = 0, 0
    for i = 1, #ids do
      local r, id, t = recs[i], ids[i], tonumber(e[2 * i])
      if r then
        nexp = nexp + 1
        hs[#hs + 1] = id
        local att = latt(r)
        if att <= sunpack('<I', r, 10) then
          back[#back + 1] = id
          btime[#btime + 1] = t
          bpush[#back] = precord(r)
          hs[#hs + 1] = reheader(r, READY, att, t, 0)
        else
          ndead = ndead + 1
          dz[#dz + 1] = t
          dz[#dz + 1] = id
          hs[#hs + 1] = reheader(r, DEAD, att, nil, 0)
        end
      end
    end
    if #hs > 0 then callv('HSET', g.pool, hs) end
    if #dz > 0 then callv('ZADD', g.dead, dz) end
    cnt(g, 'expired', nexp)
    cnt(g, 'dead', ndead)
    -- merge the due jobs and the ended leases by time
    local i, j = 1, 1
    while i <= nm or j <= #back do
      if j > #back or (i <= nm and tonumber(m[i + 1]) <= btime[j]) then
        local x = m[i]
        if pmember(x) then pj[#pj + 1] = ssub(x, 9) else push[#push + 1] = ssub(x, 9) end
        i = i + 2
      else
        if bpush[j] then pj[#pj + 1] = back[j] else push[#push + 1] = back[j] end
        j = j + 1
      end
    end
  end
  if nm > 0 or #e > 0 then g.moved = true end
  readyv(g, push, pj)
end

local function bring(g)
  if not g.carried then
    g.carried = true
    carry(g)
  end
end

-- pops up to need ids from the group's list ('ready' or 'pready'), carrying
-- the jobs due by now when it holds fewer (they queue behind those there:
-- every job in the list became ready before any still in the zsets) -> the
-- ids, in order
local function pop(g, list, need)
  local ids = call('LPOP', g[list], need) or {}
  if #ids < need and not g.carried then
    bring(g)
    local more = call('LPOP', g[list], need - #ids)
    if more then
      for i = 1, #more do ids[#ids + 1] = more[i] end
    end
  end
  return ids
end

-- removes a ready job's id (record r) from its ready list (an LREM scans
-- it) -> 1, or 0 if it was not there
local function unready(g, id, r)
  local x
  if precord(r) then
    x = call('LREM', g.pready, 1, id)
    g.plen = nil
  else
    x = call('LREM', g.ready, 1, id)
    g.rlen = nil
  end
  cnt(g, 'xready', x)
  return x
end

-- removes a job's id from the structure that holds it
local function unlink(g, id, r)
  local st = sbyte(r, 1)
  if st == DEAD then
    cnt(g, 'xdead', call('ZREM', g.dead, id))
  elseif call('ZREM', g.lease, id) == 1 then
    cnt(g, 'xlease', 1)
  elseif st == READY or st == RESERVED or call('ZREM', g.delay, dmember(r, id)) == 0 then
    unready(g, id, r)
  else
    cnt(g, 'xdelay', 1)
  end
end

local function backoff(bk, bb, bm, att)
  if bk == 1 then return bb end
  local d, i = bb, 1
  while i < att and d < bm do d = d * 2; i = i + 1 end
  if d > bm then d = bm end
  return d
end

-- --- runs of queued requests ---------------------------------------------

-- adds: q holds runs of adds as they came in requests: q[k] the ARGV
-- index of the run's first (id record flags [due member]), qm[k] how many,
-- qt[k] the request's result bytes (48 + code * 2 + 1 if the id was new,
-- from qe[k] on). No table or function call per add: in Lua those cost
-- more than the rest of an add.
local function run_add(g, q, qm, qt, qe)
  local ids, at, bt, bi = {}, {}, {}, {}
  local n = 0
  for k = 1, #q do
    local a, t, e = q[k], qt[k], qe[k]
    for x = 0, qm[k] - 1 do
      n = n + 1
      ids[n] = ARGV[a]
      at[n] = a
      bt[n] = t
      bi[n] = e + x
      a = a + (sbyte(ARGV[a + 1], 1) == DELAYED and 5 or 3)
    end
  end
  local ex = mget('HMGET', g.pool, ids)
  local far = fstate(g) > 0 -- ids missing from the pool may be far jobs
  local hs, pr, pp, pz, seen = {}, {}, {}, {}, {}
  local nh, npr, nz = 0, 0, 0
  local fq, flen, nf = {}, {}, 0 -- far jobs by bucket (id, record, i, ...)
  local added = 0
  local function clash(i) -- fput: the far index had ids[i] after all
    bt[i][bi[i]] = 48 + (ARGV[at[i] + 2] == 'g' and TAKEN or EXISTS) * 2
    added = added - 1
  end
  local function write()
    if nh > 0 then callv('HSET', g.pool, hs); hs = {}; nh = 0 end
    if npr > 0 or #pp > 0 then readyv(g, pr, pp); pr = {}; pp = {}; npr = 0 end
    if nz > 0 then callv('ZADD', g.delay, pz); pz = {}; nz = 0 end
    if nf > 0 then fput(g, fq, clash); fq = {}; nf = 0; far = true end
  end
  for i = 1, n do
    local a, id = at[i], ids[i]
    local rec = ARGV[a + 1]
    local fl = ARGV[a + 2]
    local code, new = OK, 1
    local delayed = sbyte(rec, 1) == DELAYED -- its add has due and member
    local b -- the far bucket it goes to, if any
    if delayed then
      b = fbucket(tonumber(ARGV[a + 3]))
      if b then
        local len = flen[b] or call('LLEN', fkey(g, b))
        flen[b] = len
        if len >= FPOS then b = nil end -- the bucket is full: near
      end
    end
    -- taken: in the pool, earlier in this run, or far. A far-bound add
    -- without REPLACE asks the far index by its HSETNX (fput, clash).
    if ex[i] or seen[id] or
        (far and (not b or fl == 'r') and call('HEXISTS', ikey(g, id), id) == 1) then
      new = 0
      if fl == 'g' then code = TAKEN
      elseif fl ~= 'r' then code = EXISTS
      else
        write()
        local old = call('HGET', g.pool, id)
        if not old then fdel(g, id)
        elseif leased(g, id) then code = BUSY
        else unlink(g, id, old); call('HDEL', g.pool, id) end -- the new one may be far
      end
    end
    bt[i][bi[i]] = 48 + code * 2 + new
    if code == OK then
      seen[id] = true
      added = added + 1
      if b then
        flen[b] = flen[b] + 1
        local l = fq[b]
        if not l then l = {}; fq[b] = l end
        local k = #l
        l[k + 1] = id
        l[k + 2] = tofar(id, rec)
        l[k + 3] = i
        nf = nf + 1
      else
        hs[nh + 1] = id
        hs[nh + 2] = rec
        nh = nh + 2
        if not delayed then
          if sbyte(rec, 47) >= 128 then pp[#pp + 1] = id else npr = npr + 1; pr[npr] = id end
        else
          local due = ARGV[a + 3]
          pz[nz + 1] = due
          pz[nz + 2] = ARGV[a + 4]
          nz = nz + 2
          insert(g, tonumber(due), 'd')
        end
      end
    end
  end
  write()
  cnt(g, 'added', added)
end

-- ids popped from the ready list, reserved (leases above): their ids and
-- records, as stored, go to oid and orec; returns how many
local function take(g, ids, oid, orec)
  local recs = mget('HMGET', g.pool, ids)
  local zs, nz, k = {}, 0, 0
  local sdl = {} -- per ttr: the printed deadline
  for i = 1, #ids do
    local r = recs[i]
    if r then
      local id = ids[i]
      local t1, t2, t3, t4 = sbyte(r, 6, 9)
      local ttr = t1 + t2 * 256 + t3 * 65536 + t4 * 16777216
      local dl = sdl[ttr]
      if not dl then
        dl = fmt('%d', now + ttr)
        sdl[ttr] = dl
        insert(g, now + ttr, 'l')
      end
      zs[nz + 1] = dl
      zs[nz + 2] = id
      nz = nz + 2
      k = k + 1
      oid[k] = id
      orec[k] = r
    end
  end
  if k > 0 then
    callv('ZADD', g.lease, zs)
    cnt(g, 'reserved', k)
  end
  return k
end

-- appends jobs [j, j + n) of oid/orec to rt as (gi, id, record) triplets,
-- or as (id, record) pairs if gi is nil: a reserve from one group
local function hand(rt, gi, oid, orec, j, n)
  local x = #rt
  for i = j, j + n - 1 do
    if gi then x = x + 1; rt[x] = gi end
    rt[x + 1] = oid[i]
    rt[x + 2] = orec[i]
    x = x + 2
  end
end

-- single-group reserves: q their COUNTs, qt their results; one LPOP for
-- all, the jobs handed out in order
local function run_reserve(g, q, qt)
  local need = 0
  for i = 1, #q do need = need + q[i] end
  local ids = pop(g, 'ready', need)
  g.rlen = nil
  if #ids == 0 then return end
  cnt(g, 'xready', #ids)
  local oid, orec = {}, {}
  local k = take(g, ids, oid, orec)
  local j = 1
  for i = 1, #q do
    local n = math.min(q[i], k - j + 1)
    if n <= 0 then break end
    hand(qt[i], nil, oid, orec, j, n)
    j = j + n
  end
end

-- del / ack: q holds runs of requests: q[k] the ARGV index of the run's
-- first request (its count n, then n ids, then the next request), qm[k]
-- how many requests, qf[k] 'acked' or 'deleted', qt[k] where their counts
-- go (added to qt[k][qe[k]] on). Fast path: every id was reserved (ZREM
-- removed them all, so none was named twice).
local function run_del(g, q, qm, qf, qt, qe)
  local all, ns, n = {}, {}, 0
  local nr = 0
  for k = 1, #q do
    local p = q[k]
    for _ = 1, qm[k] do
      local c = tonumber(ARGV[p])
      nr = nr + 1
      ns[nr] = c
      for x = p + 1, p + c do n = n + 1; all[n] = ARGV[x] end
      p = p + 1 + c
    end
  end
  local removed = 0
  for i = 1, n, CHUNK do
    removed = removed + call('ZREM', g.lease, unpack(all, i, math.min(n, i + CHUNK - 1)))
  end
  cnt(g, 'xlease', removed)
  if removed == n then
    callv('HDEL', g.pool, all)
    local r, acked = 0, 0
    for k = 1, #q do
      local t, e = qt[k], qe[k]
      local sum = 0
      for x = 0, qm[k] - 1 do
        r = r + 1
        t[e + x] = t[e + x] + ns[r]
        sum = sum + ns[r]
      end
      if qf[k] == 'acked' then acked = acked + sum end
    end
    cnt(g, 'acked', acked)
    cnt(g, 'deleted', n - acked)
    return
  end
  -- Those that were reserved (removed of them) left the lease zset above,
  -- and a reserve leaves the record's state as it was: a job recorded
  -- ready, or delayed but not in the delay zset, is in the ready list or
  -- was one of those. Only as many of them as were not are looked for there
  -- (an LREM scans the list); leases taken by an older build say reserved.
  local recs, amb, seen = {}, 0, {}
  for i = 1, n do
    local id = all[i]
    local rec = not seen[id] and call('HGET', g.pool, id)
    seen[id] = true
    if rec then
      local st = sbyte(rec, 1)
      if st == RESERVED then
        removed = removed - 1
        rec = true
      elseif st == DEAD then
        unlink(g, id, rec)
        rec = true
      elseif st == DELAYED and call('ZREM', g.delay, dmember(rec, id)) == 1 then
        cnt(g, 'xdelay', 1)
        rec = true
      else
        amb = amb + 1
      end
    end
    recs[i] = rec
  end
  local left = amb - removed -- ids of ready jobs among the ambiguous ones
  local r, i = 0, 0
  for k = 1, #q do
    local t, e = qt[k], qe[k]
    for x = 0, qm[k] - 1 do
      r = r + 1
      local c = 0
      for _ = 1, ns[r] do
        i = i + 1
        local id, rec = all[i], recs[i]
        if rec then
          if rec ~= true and left > 0 then left = left - unready(g, id, rec) end
          call('HDEL', g.pool, id)
          c = c + 1
        elseif fdel(g, id) then
          c = c + 1
        end
      end
      t[e + x] = t[e + x] + c
      cnt(g, qf[k], c)
    end
  end
end

-- completes the group's queued run
local function sync(g)
  if g.qa[1] then
    local q, qm, qt, qe = g.qa, g.qam, g.qat, g.qae
    g.qa, g.qam, g.qat, g.qae = {}, {}, {}, {}
    run_add(g, q, qm, qt, qe)
  end
  if g.qr[1] then
    local q, qt = g.qr, g.qrt
    g.qr, g.qrt = {}, {}
    run_reserve(g, q, qt)
  end
  if g.qd[1] then
    local q, qm, qf, qt, qe = g.qd, g.qdm, g.qdf, g.qdt, g.qde
    g.qd, g.qdm, g.qdf, g.qdt, g.qde = {}, {}, {}, {}, {}
    run_del(g, q, qm, qf, qt, qe)
  end
end

-- queues m adds from ARGV index a on (3 or 5 values each); their result bytes
-- go to t[e...]. A run of adds ends at the first reserve or del/ack.
local function qadd(g, a, m, t, e)
  if g.qr[1] or g.qd[1] then sync(g) end
  local n = #g.qa + 1
  g.qa[n], g.qam[n], g.qat[n], g.qae[n] = a, m, t, e
end

-- queues a single-group reserve of need jobs, handed to rt
local function qreserve(g, need, rt)
  if g.qa[1] then sync(g) end
  local n = #g.qr
  if n >= CHUNK then sync(g); n = 0 end
  n = n + 1
  g.qr[n], g.qrt[n] = need, rt
end

-- queues m del/ack requests from ARGV index a on (each a count n, then n
-- ids); their counts are added to t[e...]
local function qdel(g, a, m, field, t, e)
  if g.qa[1] then sync(g) end
  local x = #g.qd + 1
  g.qd[x], g.qdm[x], g.qdf[x], g.qdt[x], g.qde[x] = a, m, field, t, e
end

-- first touch of a group in this call: note its next due time (what the
-- other instances may know) and, unless lazy, bring it up to date. A
-- reserve that finds enough ready jobs may skip the carry: every job in
-- the ready list became ready before any job still waiting in the zsets.
local function open(g, lazy)
  sync(g)
  if not g.o then
    g.o = true
    g.c = {}
  end
  if not lazy then bring(g) end
end

-- the end of the call for a group: counters, what the caller learns
-- (next due time, ready jobs) and what the other instances are told
local function finish(g)
  sync(g)
  for f, n in pairs(g.c) do
    if n ~= 0 then call('HINCRBY', g.stats, f, n) end
  end
  local nx = -2
  if g.exact or g.moved then
    nx = nextdue(g)
  elseif g.mi then
    nx = -3 - g.mi
  end
  local rl = -1
  if g.rd then
    rl = g.rlen or call('LLEN', g.ready)
    if rl == 0 then g.rd = false; rl = -1 end
  end
  local pl = -1
  if g.pd or g.pw then
    pl = g.plen or call('LLEN', g.pready)
    if pl == 0 then g.pd = false; pl = -1 end
  end
  local newhead = g.mi and (g.h0 < 0 or g.mi < g.h0)
  if g.rd or g.pd or newhead then
    -- the ready field: 1 jobs became ready, 2 push jobs did, 3 both
    call('PUBLISH', chan, inst .. ' ' .. g.shard .. ' ' ..
      (newhead and fmt('%d', g.mi) or '-1') .. ' ' ..
      ((g.rd and 1 or 0) + (g.pd and 2 or 0)) .. ' ' .. g.topic)
  end
  return nx, rl, pl
end

-- --- the requests: OPS[op](groups, first arg index, result table) --------

local OPS = {}

-- adds: m, then m x (id record flags [due member]): m adds on one group,
-- merged by the caller. The record (header, ord, body) is made by the
-- caller, which decided ready or delayed from the same now; a delayed job's
-- add goes on with due and member (the delay zset's score and ord .. id),
-- a ready one's stops at flags (Redis spends ~60 ns an argument). flags:
-- '-' plain, 'r' REPLACE, 'g' a generated id (TAKEN if it exists).
-- -> code, then a string of one byte per add: '0' + its code * 2 + (1 if
-- the id was new)
OPS.adds = function(gs, a, rt)
  local g = gs[1]
  if not g.o then open(g, g.cf ~= '1') end
  local m = tonumber(ARGV[a])
  local codes = {}
  qadd(g, a + 1, m, codes, 1)
  rt[1] = OK
  rt.codes = codes
end

-- del / ack: mode ('ack' or 'del'), then per group: n ids... -> code, how
-- many existed; or mode 'ack*' / 'del*' (below)
OPS.del = function(gs, a, rt)
  local mode = ARGV[a]
  local field = (mode == 'ack' or mode == 'ack*') and 'acked' or 'deleted'
  local p = a + 1
  rt[1], rt[2] = OK, 0
  if mode == 'ack*' or mode == 'del*' then
    -- requests merged by the caller, all on the first group: m, then per
    -- request n ids... -> code, the sum, then a string of each one's count
    -- as a digit if all are below 10, else each one's count
    local g = gs[1]
    if not g.o then open(g, true) end
    local m = tonumber(ARGV[p])
    local cnts = {}
    for e = 1, m do cnts[e] = 0 end
    qdel(g, p + 1, m, field, cnts, 1)
    rt.cnts = cnts
    return
  end
  for _, g in ipairs(gs) do
    if not g.o then open(g, true) end
    local n = tonumber(ARGV[p])
    qdel(g, p, 1, field, rt, 2)
    p = p + 1 + n
  end
end

-- pops up to need ids from the groups' lists in turn (list: 'ready' or
-- 'pready'; lenf: the field caching its length) and hands them out leased
local function reserve_from(gs, need, rt, list, lenf)
  local one = #gs == 1
  for gi, g in ipairs(gs) do
    if need <= 0 then break end
    open(g, true)
    local ids = pop(g, list, need)
    g[lenf] = nil
    if #ids > 0 then
      cnt(g, 'xready', #ids)
      local oid, orec = {}, {}
      local k = take(g, ids, oid, orec)
      hand(rt, not one and gi or nil, oid, orec, 1, k)
      need = need - k
    end
  end
end

-- gets: m, then m ids: m GETs on one group, merged by the caller (a lone
-- GET is a run of one) -> code, then per GET the job's record, or false if
-- there is no such job (for a far job the record it will have in the pool),
-- or for a reserved job {record, lease end} (the record as a reserve left
-- it, see "leases").
-- The pool is read by HMGETs of GCHUNK ids, the far index only for ids
-- missing from it. The GETs change nothing, so the run reads where its
-- first GET stands: after the requests before it (open completes the
-- group's queued runs), before those after it. Lazy: the server reports the
-- state the next carry will give the job.
OPS.gets = function(gs, a, rt)
  local g = gs[1]
  open(g, true)
  local m = tonumber(ARGV[a])
  rt[1] = OK
  local cand, at = {}, {} -- records that may be leased: ids, result index
  for i = 1, m, GCHUNK do
    local j = math.min(m, i + GCHUNK - 1)
    local recs = call('HMGET', g.pool, unpack(ARGV, a + i, a + j))
    for x = i, j do
      local r = recs[x - i + 1]
      if not r and fstate(g) > 0 then r = fget(g, ARGV[a + x]) or false end
      rt[x + 1] = r
      local st = r and sbyte(r, 1)
      if st and st ~= DEAD and (st ~= DELAYED or sunpack('<d', r, 23) <= now) then
        cand[#cand + 1] = ARGV[a + x]
        at[#cand] = x + 1
      end
    end
  end
  if #cand == 0 then return end
  local dls = mget('ZMSCORE', g.lease, cand)
  for k = 1, #cand do
    if dls[k] then rt[at[k]] = {rt[at[k]], tonumber(dls[k])} end
  end
end

-- reserve: count; groups in order -> code, then gidx id record per job, or
-- id record if there is one group (the record as stored: see "leases")
OPS.reserve = function(gs, a, rt)
  local need = tonumber(ARGV[a])
  rt[1] = OK
  if #gs == 1 then
    local g = gs[1]
    if not g.o then open(g, true) end
    qreserve(g, need, rt)
    return
  end
  reserve_from(gs, need, rt, 'ready', 'rlen')
end

-- preserve (reserve_push): count; groups in order -> as reserve, from the
-- push ready lists (the records carry the URL and content type)
OPS.preserve = function(gs, a, rt)
  rt[1] = OK
  reserve_from(gs, tonumber(ARGV[a]), rt, 'pready', 'plen')
end

-- nack: id delay (< 0 = the job's backoff; -2 dead at once) -> code, new state
OPS.nack = function(gs, a, rt)
  local g = gs[1]
  open(g)
  local id = ARGV[a]
  local r = call('HGET', g.pool, id)
  if not r or call('ZREM', g.lease, id) == 0 then rt[1] = NOTRESERVED; return end
  local _, _, _, ret, bk, bb, bm, due = sunpack(HDR, r)
  local att = latt(r)
  local st
  cnt(g, 'xlease', 1)
  cnt(g, 'nacked', 1)
  local d = tonumber(ARGV[a + 1])
  if att <= ret and d ~= -2 then -- -2: dead at once (a push answered 410)
    if d < 0 then d = backoff(bk, bb, bm, att) end
    due = now + d
    if d <= 0 then
      st = READY; ready1(g, 'RPUSH', id, r)
    else
      insert(g, due, 'd')
      st = DELAYED; call('ZADD', g.delay, fmt('%d', due), dmember(r, id))
    end
  else
    st = DEAD; call('ZADD', g.dead, nows, id); cnt(g, 'dead', 1)
  end
  call('HSET', g.pool, id, reheader(r, st, att, due, 0))
  rt[1], rt[2] = OK, st
end

-- touch: id ttr (0 = the job's own) -> code, new deadline
OPS.touch = function(gs, a, rt)
  local g = gs[1]
  open(g)
  local id = ARGV[a]
  local r = leased(g, id) and call('HGET', g.pool, id)
  if not r then rt[1] = NOTRESERVED; return end
  local t = tonumber(ARGV[a + 1])
  if t <= 0 then t = sunpack('<I', r, 6) end
  local dl = now + t
  insert(g, dl, 'l')
  call('ZADD', g.lease, fmt('%d', dl), id)
  cnt(g, 'xlease', 1) -- it moved: as if removed (LIST's positions, see listpage)
  rt[1], rt[2] = OK, dl
end

-- release: id. reserved -> head of ready, attempts - 1 -> code, 1 or 0
OPS.release = function(gs, a, rt)
  local g = gs[1]
  open(g)
  local id = ARGV[a]
  rt[1], rt[2] = OK, 0
  local r = call('HGET', g.pool, id)
  if not r or call('ZREM', g.lease, id) == 0 then return end
  local att = latt(r)
  if att > 0 then att = att - 1 end
  cnt(g, 'xlease', 1)
  call('HSET', g.pool, id, reheader(r, READY, att, nil, 0))
  ready1(g, 'LPUSH', id, r)
  cnt(g, 'reserved', -1)
  rt[2] = 1
end

-- kickjob: id. dead -> ready, attempts 0, due now -> code, 1 or 0
OPS.kickjob = function(gs, a, rt)
  local g = gs[1]
  open(g)
  local id = ARGV[a]
  rt[1], rt[2] = OK, 0
  local r = call('HGET', g.pool, id)
  if not r or sbyte(r, 1) ~= DEAD then return end
  cnt(g, 'xdead', call('ZREM', g.dead, id))
  call('HSET', g.pool, id, reheader(r, READY, 0, now, 0))
  ready1(g, 'RPUSH', id, r)
  cnt(g, 'kicked', 1)
  rt[2] = 1
end

-- kick: count (0 = all); groups in order. dead -> ready, attempts 0
-- -> code, how many
OPS.kick = function(gs, a, rt)
  local need = tonumber(ARGV[a])
  if need == 0 then need = -1 end
  local total = 0
  for _, g in ipairs(gs) do
    if need == 0 then break end
    open(g)
    while need ~= 0 do
      local take = CHUNK
      if need > 0 and need < take then take = need end
      local ids = call('ZRANGE', g.dead, 0, take - 1)
      if #ids == 0 then break end
      local recs = mget('HMGET', g.pool, ids)
      local hs, push, pj = {}, {}, {}
      for i = 1, #ids do
        local r = recs[i]
        if r then
          hs[#hs + 1] = ids[i]
          hs[#hs + 1] = reheader(r, READY, 0, now, 0)
          if precord(r) then pj[#pj + 1] = ids[i] else push[#push + 1] = ids[i] end
        end
      end
      call('ZREMRANGEBYRANK', g.dead, 0, #ids - 1)
      cnt(g, 'xdead', #ids)
      if #hs > 0 then
        callv('HSET', g.pool, hs)
        readyv(g, push, pj)
      end
      cnt(g, 'kicked', #push + #pj)
      total = total + #push + #pj
      if need > 0 then need = need - #ids end
      if #ids < take then break end
    end
  end
  rt[1], rt[2] = OK, total
end

-- one page of a LIST over one group: appends up to n ids to out and
-- returns the mode and cursor to continue with ('0', '0': the group is
-- done). Fewer than n only when the group has no more.
--
-- Small sets (<= 512) are paged in the order of a hash of the id, the
-- cursor being the next hash (mode 1). Larger ones by position (mode 0):
-- the cursor is 1 + the position after the page, counted from the set's
-- first member ever, i.e. plus the members ever removed from it. Every
-- removal from a set or list adds one to its counter in the stats hash
-- (xdelay xlease xdead xready; a member that moves counts as removed), so
-- a page resumes at cursor - 1 - counter: exactly after the last page when
-- members before it left, earlier (repeating a few ids, never skipping
-- one) when members after it left or members were inserted before it.
-- Either way a job that stays in the state for the whole scan is listed,
-- and each page costs O(log n + COUNT) whatever the set's size.
local XF = {[DELAYED] = 'xdelay', [READY] = 'xready', [RESERVED] = 'xlease', [DEAD] = 'xdead'}

-- The ready state is two lists, ready then pready (push jobs), paged as one:
-- n ids from position i of the two (n < 0: all of them). Removals from
-- either count in xready.
local function readyrange(g, i, n)
  if n < 0 then
    local out = call('LRANGE', g.ready, 0, -1)
    for _, x in ipairs(call('LRANGE', g.pready, 0, -1)) do out[#out + 1] = x end
    return out
  end
  local a = call('LLEN', g.ready)
  local out = {}
  if i < a then out = call('LRANGE', g.ready, i, math.min(a - 1, i + n - 1)) end
  if i + n > a then
    local from = i > a and i - a or 0
    for _, x in ipairs(call('LRANGE', g.pready, from, i + n - 1 - a)) do out[#out + 1] = x end
  end
  return out
end
local function listpage(g, st, mode, cur, n, out)
  if st == DELAYED and mode == '0' then -- the far jobs first (farpage)
    local c = tonumber(cur)
    if cur == '0' or c > FARCUR then
      local o = #out
      local nc = farpage(g, cur == '0' and 0 or c - FARCUR, n, out)
      if nc then return '0', fmt('%d', nc) end
      n = n - (#out - o)
      if n <= 0 then
        if zcount(g.delay) == 0 then return '0', '0' end
        return '0', fmt('%d', FARCUR)
      end
      cur = '0'
    elseif c == FARCUR then
      cur = '0'
    end
  end
  local key, size, skip = g.dead, 0, 1
  if st == READY then
    key = g.ready
    size = call('LLEN', key) + call('LLEN', g.pready)
  else
    if st == DELAYED then key = g.delay; skip = 9 elseif st == RESERVED then key = g.lease end
    size = zcount(key)
  end
  if mode == '1' or (cur == '0' and size <= 512) then
    local all
    if st == READY then all = readyrange(g, 0, -1) else all = call('ZRANGE', key, 0, -1) end
    local lo, items = tonumber(cur), {}
    for _, m in ipairs(all) do
      if m ~= LSENT and m ~= DSENT then
        local id = ssub(m, skip)
        local h = tonumber(ssub(redis.sha1hex(id), 1, 13), 16)
        if h >= lo then items[#items + 1] = {h, id} end
      end
    end
    table.sort(items, function(x, y) return x[1] < y[1] end)
    local last
    for i = 1, #items do
      local it = items[i]
      if i > n and it[1] ~= last then return '1', fmt('%d', it[1]) end
      out[#out + 1] = it[2]
      last = it[1]
    end
    return '0', '0'
  end
  local xf = XF[st]
  local x = (tonumber(call('HGET', g.stats, xf)) or 0) + (g.c[xf] or 0)
  local i = 0
  if cur ~= '0' then
    i = tonumber(cur) - 1 - x
    if i < 0 then i = 0 end
  end
  local items
  if st == READY then
    items = readyrange(g, i, n)
  else
    items = call('ZRANGE', key, i, i + n - 1)
  end
  local k = 0
  for _, m in ipairs(items) do -- a zset's sentinel sorts last (+inf)
    if m ~= LSENT and m ~= DSENT then k = k + 1; out[#out + 1] = ssub(m, skip) end
  end
  if i + k >= size then return '0', '0' end
  return '0', fmt('%d', x + i + k + 1)
end

-- list: state mode cursor count; groups in order, the first continuing from
-- mode/cursor, the next ones from their start while the page is not full.
-- -> code, index of the group to continue with, mode, cursor, ids...
-- (mode 0 and cursor '0': that group is done)
OPS.list = function(gs, a, rt)
  local st, mode, cur, n = tonumber(ARGV[a]), ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3])
  rt[1], rt[2], rt[3], rt[4] = OK, 0, 0, '0'
  for gi, g in ipairs(gs) do
    open(g)
    mode, cur = listpage(g, st, mode, cur, n - (#rt - 4), rt)
    rt[2], rt[3], rt[4] = gi, tonumber(mode), cur
    if cur ~= '0' or #rt - 4 >= n then break end
  end
end

-- purge: every job of the groups -> code, how many
OPS.purge = function(gs, a, rt)
  local total = 0
  for _, g in ipairs(gs) do
    sync(g)
    if not g.o then g.o = true; g.carried = true; g.c = {} end
    g.exact = true
    g.rlen = nil
    g.plen = nil
    local n = call('HLEN', g.pool) + fpurge(g)
    call('UNLINK', g.pool, g.ready, g.delay, g.lease, g.dead, g.pready)
    cnt(g, 'deleted', n)
    total = total + n
  end
  rt[1], rt[2] = OK, total
end

local FIELDS = {'added', 'reserved', 'acked', 'nacked', 'expired', 'dead', 'deleted', 'kicked'}
-- stats -> code, jobs per state, then the counters, summed over the groups,
-- then the due time of the oldest ready job (0 = none)
OPS.stats = function(gs, a, rt)
  local s = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
  local oldest = 0 -- due time of the oldest ready job, 0 = none
  for _, g in ipairs(gs) do
    open(g)
    s[1] = s[1] + zcount(g.delay) + fstate(g)
    s[2] = s[2] + call('LLEN', g.ready) + call('LLEN', g.pready)
    local head = call('LINDEX', g.ready, 0)
    local r = head and call('HGET', g.pool, head)
    if r then
      local due = select(8, sunpack(HDR, r))
      if oldest == 0 or due < oldest then oldest = due end
    end
    s[3] = s[3] + zcount(g.lease)
    s[4] = s[4] + call('ZCARD', g.dead)
    local v = call('HMGET', g.stats, unpack(FIELDS))
    for i = 1, 8 do
      s[4 + i] = s[4 + i] + (tonumber(v[i]) or 0) + (g.c[FIELDS[i]] or 0)
    end
  end
  rt[1] = OK
  for i = 1, 12 do rt[i + 1] = s[i] end
  rt[14] = oldest
end

-- carry: bring the groups up to date, far buckets included -> code, jobs
-- held per group (pool and far)
OPS.carry = function(gs, a, rt)
  rt[1] = OK
  for i, g in ipairs(gs) do
    -- only this request carries far buckets (the timers' and the sweep's):
    -- a slice of ~2 ms at a time, never inside a consumer's RESERVE
    open(g, true)
    fcarry(g)
    bring(g)
    g.exact = true
    g.pw = true
    rt[i + 1] = call('HLEN', g.pool) + fstate(g)
  end
end

-- --- the call ----------------------------------------------------------------

-- one call: keys and args as described at the top
local function main(keys, args)
  call = redis.call
  spack, sunpack, ssub, sbyte = struct.pack, struct.unpack, string.sub, string.byte
  fmt = string.format
  KEYS, ARGV = keys, args
  nows = ARGV[1]
  now = tonumber(nows)
  inst, chan = ARGV[2], ARGV[3]
  FW = tonumber(ARGV[4])
  local G = tonumber(ARGV[5])
  local groups = {}
  local p = 6
  for i = 1, G do
    local b = (i - 1) * 9
    local base = ssub(KEYS[b + 1], 1, -5) -- the tag and ':', before 'pool'
    groups[i] = {pool = KEYS[b + 1], ready = KEYS[b + 2], delay = KEYS[b + 3],
      base = base, fz = KEYS[b + 8], fo = KEYS[b + 9],
      lease = KEYS[b + 4], dead = KEYS[b + 5], stats = KEYS[b + 6], pready = KEYS[b + 7],
      topic = ARGV[p], shard = ARGV[p + 1], cf = ARGV[p + 2],
      qa = {}, qam = {}, qat = {}, qae = {},
      qr = {}, qrt = {}, qd = {}, qdm = {}, qdf = {}, qdt = {}, qde = {}}
    p = p + 3
  end
  local R = tonumber(ARGV[p])
  p = p + 1
  local rts, one = {}, {}
  for r = 1, R do
    local op, ng = ARGV[p], tonumber(ARGV[p + 1])
    p = p + 2
    local gs = one
    if ng == 1 then
      one[1] = groups[tonumber(ARGV[p])]
      p = p + 1
    else
      gs = {}
      for j = 1, ng do gs[j] = groups[tonumber(ARGV[p])]; p = p + 1 end
    end
    local na = tonumber(ARGV[p])
    p = p + 1
    local rt = {}
    rts[r] = rt
    OPS[op](gs, p, rt)
    p = p + na
  end
  local info = {}
  for i = 1, G do
    local g = groups[i]
    if g.o then
      local nx, rl, pl = finish(g)
      info[3 * i - 2] = nx
      info[3 * i - 1] = rl
      info[3 * i] = pl
    else
      info[3 * i - 2] = -2
      info[3 * i - 1] = -1
      info[3 * i] = -1
    end
  end
  local res, n = {}, 0
  for r = 1, R do
    local rt = rts[r]
    if rt.cnts then
      local c, big = rt.cnts, false
      for i = 1, #c do
        rt[2] = rt[2] + c[i]
        if c[i] > 9 then big = true end
      end
      if big then
        for i = 1, #c do rt[2 + i] = c[i] end
      else
        for i = 1, #c do c[i] = c[i] + 48 end
        rt[3] = bytes(c)
      end
    elseif rt.codes then
      rt[2] = bytes(rt.codes)
    end
    local k = #rt
    res[n + 1] = k
    for i = 1, k do res[n + 1 + i] = rt[i] end
    n = n + 1 + k
  end
  return {res, info}
end
