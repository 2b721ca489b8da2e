// clients.js -- drives delayqd with the Node.js Redis clients nobody here wrote.
// Usage: node clients.js ioredis|node-redis|node-redis-resp3 PORT
// Prints one JSON object of what the client saw; exits 1 on any failure.
'use strict';

const [which, portArg] = process.argv.slice(2);
const port = Number(portArg);

function fail(msg) {
  console.error(which + ': ' + msg);
  process.exit(1);
}
setTimeout(() => fail('timed out (the client never got going?)'), 15000).unref();

// What every client must see, whatever its protocol: plain JS values.
async function scenario(cmd) {
  const out = {};
  out.ping = await cmd(['PING']);
  out.add = await cmd(['ADD', 'orders', 'o-1', 'hello', 'DELAY', '0', 'TTR', '5000']);
  out.get = await cmd(['GET', 'orders', 'o-1']);
  out.reserve = await cmd(['RESERVE', 'TIMEOUT', '0', 'FROM', 'orders']);
  out.get_reserved = await cmd(['GET', 'orders', 'o-1']);
  out.ack = await cmd(['ACK', 'orders', 'o-1']);
  out.get_missing = await cmd(['GET', 'orders', 'o-1']);
  out.reserve_empty = await cmd(['RESERVE', 'TIMEOUT', '50', 'FROM', 'orders']);
  await cmd(['ADD', 'orders', 'o-2', 'x']);
  try {
    await cmd(['ADD', 'orders', 'o-2', 'x']);
    out.exists = 'no error';
  } catch (e) {
    out.exists = String(e.message);
  }
  out.stats = await cmd(['STATS', 'orders']);
  out.topics = await cmd(['TOPICS']);
  out.list = await cmd(['LIST', 'orders', 'ready']);
  return out;
}

// Maps (RESP3) become plain objects, so both protocols print alike.
function plain(v) {
  if (v instanceof Map) {
    const o = {};
    for (const [k, x] of v) o[String(k)] = plain(x);
    return o;
  }
  if (Array.isArray(v)) return v.map(plain);
  if (Buffer.isBuffer(v)) return v.toString();
  if (v && typeof v === 'object') {
    const o = {};
    for (const k of Object.keys(v)) o[k] = plain(v[k]);
    return o;
  }
  return v;
}

async function main() {
  let out, info;
  if (which === 'ioredis') {
    const Redis = require('ioredis');
    const r = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 0,
                          retryStrategy: () => null, enableReadyCheck: true });
    r.on('error', (e) => fail('connection error: ' + e.message));
    out = await scenario((args) => r.call(...args));
    info = (await r.info()).includes('connected_clients:');
    r.disconnect();
  } else {
    const { createClient } = require('redis');
    const opts = { socket: { port, host: '127.0.0.1', reconnectStrategy: false } };
    if (which === 'node-redis-resp3') opts.RESP = 3;
    const c = createClient(opts);
    c.on('error', (e) => fail('connection error: ' + e.message));
    await c.connect();
    out = await scenario((args) => c.sendCommand(args));
    info = (await c.info()).includes('connected_clients:');
    await c.quit();
  }
  out.info = info;
  console.log(JSON.stringify(plain(out)));
}

main().catch((e) => fail(e && e.stack ? e.stack : String(e)));
