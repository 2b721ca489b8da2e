/* delayq dashboard -- plain JavaScript, no library, no request to any other
 * host. Everything shown comes from the HTTP API (docs/http.md): GET
 * /v1/server, /v1/overview, /v1/stats, the job routes; every action is a
 * call to the same routes any client uses. Lists are paged: the overview
 * shows the top topics of a sort (never all 10,000), a topic shows one
 * LIST page of ids at a time. */
'use strict';

const POLL_MS = 2000;            /* overview and topic counts */
const HISTORY = 300;             /* chart samples kept: 10 minutes at 2 s */
const PAGE = 50;                 /* ids per LIST page, topics per overview page */
const LIST_CALLS = 20;
const OVERVIEW_SHARE = 200;      /* the topic table's request: at most 1/200 of the time */           /* LIST calls at most to fill one page */
const STATES = ['ready', 'delayed', 'reserved', 'dead'];

/* ---- small helpers -------------------------------------------------------- */

const $ = (id) => document.getElementById(id);

/* el('td', {class: 'num'}, 'text', child...): text is never parsed as HTML. */
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const k of kids) {
    if (k === null || k === undefined || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function fmtInt(n) {
  return n === null || n === undefined ? '–' : Number(n).toLocaleString('en-US');
}

function plural(n, word) {
  return fmtInt(n) + ' ' + word + (n === 1 ? '' : 's');
}

function fmtBytes(n) {
  if (n === null || n === undefined) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + ' ' + u[i];
}

function fmtDuration(ms) {
  const s = Math.abs(ms) / 1000;
  if (s < 1) return Math.round(Math.abs(ms)) + ' ms';
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + ' s';
  if (s < 3600) return Math.round(s / 60) + ' min';
  if (s < 86400 * 2) return (s / 3600).toFixed(1) + ' h';
  return Math.round(s / 86400) + ' days';
}

/* "in 3 min" / "12 s ago", relative to the server's clock. */
function fmtRelative(ms, now) {
  const d = ms - now;
  return d >= 0 ? 'in ' + fmtDuration(d) : fmtDuration(d) + ' ago';
}

function fmtTime(ms) {
  const d = new Date(ms);
  const p = (n, w) => String(n).padStart(w || 2, '0');
  return d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' + p(d.getDate()) + ' ' +
    p(d.getHours()) + ':' + p(d.getMinutes()) + ':' + p(d.getSeconds()) + '.' + p(d.getMilliseconds(), 3);
}

function fmtLag(sec) {
  if (sec === null || sec === undefined) return '–';
  if (sec === 0) return '0';
  const ms = sec * 1000;
  return ms < 1 ? ms.toFixed(3) + ' ms' : ms < 100 ? ms.toFixed(1) + ' ms' : fmtDuration(ms);
}

function fmtRate(r) {
  if (r === null || r === undefined) return '–';
  return r < 10 ? r.toFixed(1) : fmtInt(Math.round(r));
}

function hexDump(bytes) {
  const lines = [];
  for (let off = 0; off < bytes.length; off += 16) {
    const row = bytes.subarray(off, off + 16);
    let hex = '', asc = '';
    for (let i = 0; i < 16; i++) {
      if (i < row.length) {
        hex += row[i].toString(16).padStart(2, '0') + ' ';
        asc += row[i] >= 32 && row[i] < 127 ? String.fromCharCode(row[i]) : '.';
      } else hex += '   ';
      if (i === 7) hex += ' ';
    }
    lines.push(off.toString(16).padStart(8, '0') + '  ' + hex + ' |' + asc + '|');
  }
  return lines.join('\n');
}

function b64bytes(s) {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/* ---- the API -------------------------------------------------------------- */

const TOKEN_KEY = 'delayq.token';
let token = sessionStorage.getItem(TOKEN_KEY) || '';
let serverInfo = null;           /* last GET /v1/server */
let needLogin = false;

class ApiError extends Error {
  constructor(status, code, message) {
    super(message || code || ('HTTP ' + status));
    this.status = status;
    this.code = code;
  }
}

/* Every request of the page goes through here: same origin, the bearer
 * token when there is one, and the dashboard's marker header (the server
 * refuses changes marked so in --dashboard readonly). */
async function api(method, path, body) {
  const headers = {'X-Delayq-Dashboard': '1'};
  if (token) headers.Authorization = 'Bearer ' + token;
  const init = {method, headers, cache: 'no-store'};
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let r;
  try {
    r = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, 'NETWORK', 'cannot reach the server');
  }
  let j = null;
  const text = await r.text();
  if (text && (r.headers.get('Content-Type') || '').includes('json')) {
    try { j = JSON.parse(text); } catch (e) { j = null; }
  }
  if (r.status === 401) {
    setLogin(true);
    throw new ApiError(401, 'NOAUTH', (j && j.message) || 'a password is needed');
  }
  if (!r.ok) throw new ApiError(r.status, j && j.error, (j && j.message) || text.trim());
  return j;
}

const enc = encodeURIComponent;
const topicPath = (t) => '/v1/topics/' + enc(t);
const jobPath = (t, id) => topicPath(t) + '/jobs/' + enc(id);

function setLogin(show) {
  needLogin = show;
  $('login').hidden = !show;
  $('logout').hidden = show || !token;
  if (show) $('token').focus();
}

function flash(msg, kind) {
  const f = $('flash');
  f.textContent = msg;
  f.className = 'flash' + (kind ? ' ' + kind : '');
  f.hidden = !msg;
  clearTimeout(flash.timer);
  if (msg && kind === 'info') flash.timer = setTimeout(() => { f.hidden = true; }, 4000);
}

const readonly = () => serverInfo && serverInfo.dashboard === 'readonly';

/* ---- confirmation dialog -------------------------------------------------- */

/* Shows a dialog; resolves with the form's FormData on OK, or null. `run`
 * (optional) performs the action: the dialog stays open with the error
 * when it throws. */
function dialog(title, body, okText, run, okClass) {
  return new Promise((resolve) => {
    const m = $('modal'), form = $('modal-form');
    $('modal-title').textContent = title;
    const b = $('modal-body');
    b.replaceChildren(...(Array.isArray(body) ? body : [body]));
    $('modal-ok').textContent = okText;
    $('modal-ok').className = okClass || 'danger';
    m.hidden = false;
    const first = b.querySelector('input, textarea');
    (first || $('modal-ok')).focus();
    const done = (v) => {
      m.hidden = true;
      form.onsubmit = null;
      $('modal-cancel').onclick = null;
      document.removeEventListener('keydown', onKey);
      resolve(v);
    };
    const onKey = (e) => { if (e.key === 'Escape') done(null); };
    document.addEventListener('keydown', onKey);
    $('modal-cancel').onclick = () => done(null);
    form.onsubmit = async (e) => {
      e.preventDefault();
      const data = new FormData(form);
      if (!run) return done(data);
      $('modal-ok').disabled = true;
      try {
        await run(data);
        done(data);
      } catch (err) {
        let p = b.querySelector('.err');
        if (!p) b.append(p = el('p', {class: 'err'}));
        p.textContent = err.message;
      } finally {
        $('modal-ok').disabled = false;
      }
    };
  });
}

/* ---- charts (canvas, drawn here) ------------------------------------------ */

function drawChart(canvas, series, fmt) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== w * dpr) { canvas.width = w * dpr; canvas.height = h * dpr; }
  const g = canvas.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  const padL = 64, padB = 18, padT = 6;
  let max = 0;
  for (const s of series) for (const v of s.data) if (v !== null && v > max) max = v;
  max = max > 0 ? max * 1.15 : 1;
  g.font = '11px system-ui, sans-serif';
  g.fillStyle = '#6b7483';
  g.strokeStyle = '#e6e9ee';
  g.lineWidth = 1;
  for (let i = 0; i <= 3; i++) {
    const y = padT + (h - padT - padB) * i / 3;
    g.beginPath(); g.moveTo(padL, y); g.lineTo(w, y); g.stroke();
    g.fillText(fmt(max * (3 - i) / 3), 2, y + 4);
  }
  /* the window grows with the readings kept: 1 minute at first, up to 10 */
  let len = 0;
  for (const s of series) len = Math.max(len, s.data.length);
  const n = Math.min(HISTORY, Math.max(len, 60000 / POLL_MS));
  g.fillText(fmtDuration(n * POLL_MS) + ' ago', padL, h - 4);
  g.fillText('now', w - 24, h - 4);
  for (const s of series) {
    g.strokeStyle = s.color;
    g.lineWidth = 1.6;
    g.beginPath();
    let pen = false;
    const off = n - s.data.length;
    s.data.forEach((v, i) => {
      if (v === null) { pen = false; return; }
      const x = padL + (w - padL) * (off + i) / (n - 1);
      const y = padT + (h - padT - padB) * (1 - v / max);
      if (pen) g.lineTo(x, y); else g.moveTo(x, y);
      pen = true;
    });
    g.stroke();
    if (pen && s.data.length) { /* the latest reading, visible even alone */
      const v = s.data[s.data.length - 1];
      const y = padT + (h - padT - padB) * (1 - v / max);
      g.fillStyle = s.color;
      g.beginPath(); g.arc(w - 2, y, 2.5, 0, 2 * Math.PI); g.fill();
    }
  }
}

/* Quantile q of the observations between two cumulative histogram
 * snapshots (Prometheus's histogram_quantile over an interval). */
function intervalQuantile(prev, cur, q) {
  const b = cur.bounds, c = cur.buckets, p = prev.buckets;
  const total = (c[c.length - 1] || 0) - (p[p.length - 1] || 0);
  if (total <= 0) return null;
  const rank = q * total;
  let lower = 0, below = 0;
  for (let i = 0; i < b.length; i++) {
    const cum = c[i] - p[i];
    if (cum >= rank) {
      const inb = cum - below;
      return lower + (b[i] - lower) * (inb > 0 ? (rank - below) / inb : 1);
    }
    lower = b[i];
    below = cum;
  }
  return b[b.length - 1];
}

/* ---- state kept across polls ---------------------------------------------- */

const hist = {t: [], added: [], acked: [], reserved: [], p50: [], p99: []};
let prevServer = null;
const prevTopics = new Map();    /* topic -> {t, counters} for rates */
let pollTimer = null;
let view = null;                 /* the current view's {poll, stop} */

function pushSample(key, v) {
  hist[key].push(v);
  if (hist[key].length > HISTORY) hist[key].shift();
}

/* Reads GET /v1/server and turns counters into chart samples. */
async function pollServer() {
  const s = await api('GET', '/v1/server');
  s.polled_at = performance.now();
  serverInfo = s;
  $('mode').hidden = s.dashboard !== 'readonly';
  $('mode').textContent = 'read-only';
  if (prevServer) {
    const dt = (s.now - prevServer.now) / 1000;
    if (dt > 0) {
      for (const k of ['added', 'acked', 'reserved'])
        pushSample(k, Math.max(0, (s.totals[k] - prevServer.totals[k]) / dt));
      pushSample('p50', intervalQuantile(prevServer.fire_lag, s.fire_lag, 0.5));
      pushSample('p99', intervalQuantile(prevServer.fire_lag, s.fire_lag, 0.99));
    }
  }
  prevServer = s;
  return s;
}

/* How long the next ready job of a topic has waited since it was due. */
function oldest(t, now) {
  if (!t.jobs.ready) return '–';
  if (!t.oldest_ready) return el('span', {class: 'muted', title: 'this store does not say'}, 'n/a');
  return fmtDuration(Math.max(0, now - t.oldest_ready));
}

/* ---- overview ------------------------------------------------------------- */

function overviewView() {
  const q = {sort: 'ready', match: '', offset: 0};
  const root = el('div');
  const server = el('dl', {class: 'kv', id: 'server-kv'});
  const tput = el('canvas', {class: 'chart', id: 'chart-throughput'});
  const lag = el('canvas', {class: 'chart', id: 'chart-lag'});
  const lagNow = el('span', {class: 'sub', id: 'lag-now'});
  const rateNow = el('span', {class: 'sub', id: 'rate-now'});
  root.append(el('div', {class: 'grid'},
    el('section', {class: 'panel', id: 'server-panel'}, el('h2', {}, 'Server'), server),
    el('section', {class: 'panel'}, el('h2', {}, 'Throughput ', rateNow), tput,
      el('div', {class: 'legend'},
        el('span', {}, el('i', {class: 'c-blue'}), 'added'),
        el('span', {}, el('i', {class: 'c-amber'}), 'reserved'),
        el('span', {}, el('i', {class: 'c-green'}), 'acked'))),
    el('section', {class: 'panel'}, el('h2', {}, 'Fire lag ', lagNow), lag,
      el('div', {class: 'legend'},
        el('span', {}, el('i', {class: 'c-blue'}), 'p50'),
        el('span', {}, el('i', {class: 'c-red'}), 'p99'),
        el('span', {class: 'grow'}), el('span', {}, 'handed out − due')))));

  const count = el('span', {class: 'muted', id: 'topic-count'});
  const match = el('input', {type: 'search', id: 'topic-filter', placeholder: 'filter topics'});
  const sort = el('select', {id: 'topic-sort'},
    ...[['ready', 'backlog (ready)'], ['dead', 'dead'], ['delayed', 'delayed'],
      ['reserved', 'reserved'], ['total', 'all jobs'], ['name', 'name']]
      .map(([v, t]) => el('option', {value: v}, t)));
  const tbody = el('tbody', {id: 'topics'});
  const prev = el('button', {id: 'topics-prev'}, '‹ Prev');
  const next = el('button', {id: 'topics-next'}, 'Next ›');
  const pageInfo = el('span', {class: 'muted'});
  const addBtn = el('button', {class: 'primary action', id: 'add-job'}, 'Add job');
  root.append(el('section', {class: 'panel'},
    el('div', {class: 'toolbar'}, el('h2', {class: 'grow'}, 'Topics ', count), match,
      el('label', {class: 'muted'}, 'sort by ', sort), addBtn),
    el('table', {},
      el('thead', {}, el('tr', {},
        el('th', {}, 'topic'),
        ...STATES.map((s) => el('th', {class: 'num s-' + s}, s)),
        el('th', {class: 'num'}, 'oldest ready'),
        el('th', {class: 'num'}, 'added/s'), el('th', {class: 'num'}, 'acked/s'),
        el('th', {class: 'num'}, 'dead/s'))),
      tbody),
    el('div', {class: 'pager'}, prev, pageInfo, next)));

  let timer = null;
  match.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(() => { q.match = match.value.trim(); q.offset = 0; poll(); }, 250);
  });
  sort.addEventListener('change', () => { q.sort = sort.value; q.offset = 0; poll(); });
  prev.addEventListener('click', () => { q.offset = Math.max(0, q.offset - PAGE); poll(); });
  next.addEventListener('click', () => { q.offset += PAGE; poll(); });
  addBtn.addEventListener('click', () => addJobDialog(''));

  function renderServer(s) {
    const info = s.store.info || {};
    const rows = [
      ['version', s.version],
      ['uptime', fmtDuration(s.uptime_s * 1000)],
      ['store', el('span', {}, s.store.name + ' ',
        el('span', {class: s.store.up ? 'up' : 'down'}, s.store.up ? 'up' : 'DOWN'))],
      ['jobs', fmtInt(s.jobs.total) + ' (' + STATES.map((k) => fmtInt(s.jobs[k]) + ' ' + k).join(', ') + ')'],
    ];
    if (info.jobs_in_ram !== undefined) rows.push(['jobs in RAM', fmtInt(info.jobs_in_ram)]);
    if (info.jobs_on_disk !== undefined) rows.push(['jobs on disk', fmtInt(info.jobs_on_disk)]);
    if (info.log_bytes !== undefined) rows.push(['log size', fmtBytes(Number(info.log_bytes))]);
    rows.push(['memory (RSS)', fmtBytes(s.rss_bytes)]);
    rows.push(['memory per job', s.memory_per_job === null ? '–' : fmtBytes(Math.round(s.memory_per_job))]);
    rows.push(['clients', fmtInt(s.clients) + ' (' + fmtInt(s.blocked) + ' waiting in RESERVE)']);
    if (s.dashboard === 'readonly') rows.push(['dashboard', 'read-only']);
    server.replaceChildren(...rows.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
  }

  function renderCharts() {
    const last = (a) => a.length ? a[a.length - 1] : null;
    rateNow.textContent = hist.added.length
      ? '· ' + fmtRate(last(hist.added)) + ' added/s, ' + fmtRate(last(hist.acked)) + ' acked/s' : '· jobs/s';
    lagNow.textContent = last(hist.p99) !== null && hist.p99.length
      ? '· p50 ' + fmtLag(last(hist.p50)) + ', p99 ' + fmtLag(last(hist.p99)) : '· no jobs handed out lately';
    drawChart(tput, [
      {color: '#2f6fdd', data: hist.added},
      {color: '#b7791f', data: hist.reserved},
      {color: '#23864a', data: hist.acked}], fmtRate);
    drawChart(lag, [
      {color: '#2f6fdd', data: hist.p50},
      {color: '#c93a32', data: hist.p99}], fmtLag);
  }

  function renderTopics(o) {
    const total = o.matched;
    count.textContent = '· ' + fmtInt(o.ntopics) + ' with jobs' +
      (q.match ? ', ' + fmtInt(total) + ' matching' : '');
    prev.disabled = q.offset === 0;
    next.disabled = q.offset + PAGE >= total;
    pageInfo.textContent = total ? (q.offset + 1) + '–' + Math.min(total, q.offset + PAGE) + ' of ' + fmtInt(total) : '';
    const rows = o.topics.map((t) => {
      const p = prevTopics.get(t.topic);
      const rate = (k) => {
        if (!p || o.now <= p.now) return null;
        return Math.max(0, (t.counters[k] - p.counters[k]) * 1000 / (o.now - p.now));
      };
      const r = {added: rate('added'), acked: rate('acked'), dead: rate('dead')};
      prevTopics.set(t.topic, {now: o.now, counters: t.counters});
      return el('tr', {'data-topic': t.topic},
        el('td', {}, el('a', {href: '#/topic/' + enc(t.topic)}, t.topic)),
        ...STATES.map((s) => el('td', {class: 'num ' + (t.jobs[s] ? 's-' + s : 'muted'), 'data-state': s},
          fmtInt(t.jobs[s]))),
        el('td', {class: 'num'}, oldest(t, o.now)),
        el('td', {class: 'num'}, fmtRate(r.added)),
        el('td', {class: 'num'}, fmtRate(r.acked)),
        el('td', {class: 'num'}, fmtRate(r.dead)));
    });
    if (!rows.length)
      rows.push(el('tr', {}, el('td', {colspan: 9, class: 'muted'},
        q.match ? 'no topic matches' : 'no topic holds a job yet')));
    tbody.replaceChildren(...rows);
    if (prevTopics.size > 5000) prevTopics.clear();
  }

  /* The topic page reads every topic's counts on the server: with many
   * topics (or a slow store) it is asked for less often, so that it takes
   * at most 1/OVERVIEW_SHARE of the time. A change of sort, filter or page
   * asks at once. */
  let nextOverview = 0, lastQuery = '';
  async function poll() {
    const s = await pollServer();
    renderServer(s);
    renderCharts();
    const query = '/v1/overview?sort=' + enc(q.sort) + '&limit=' + PAGE +
      '&offset=' + q.offset + (q.match ? '&match=' + enc(q.match) : '');
    const t0 = performance.now();
    if (t0 >= nextOverview || query !== lastQuery) {
      const o = await api('GET', query);
      const took = performance.now() - t0;
      nextOverview = t0 + Math.max(POLL_MS, took * OVERVIEW_SHARE) - POLL_MS / 2;
      lastQuery = query;
      renderTopics(o);
    }
    addBtn.hidden = readonly();
  }
  return {root, poll, crumbs: []};
}

/* ---- topic view ----------------------------------------------------------- */

function topicView(topic, state, jobId) {
  state = STATES.includes(state) ? state : 'ready';
  const root = el('div');
  const counts = el('dl', {class: 'kv'});
  const tabs = el('div', {class: 'tabs'});
  const tbody = el('tbody', {id: 'jobs'});
  const pageInfo = el('span', {class: 'muted', id: 'page-info'});
  const first = el('button', {id: 'page-first'}, '« First');
  const next = el('button', {id: 'page-next'}, 'Next ›');
  const refresh = el('button', {id: 'page-refresh'}, 'Refresh');
  const detail = el('section', {class: 'panel', id: 'job-detail'},
    el('h2', {}, 'Job'), el('p', {class: 'muted'}, 'Pick a job, or look one up by id.'));
  const lookup = el('form', {class: 'toolbar', id: 'lookup'},
    el('input', {name: 'id', id: 'lookup-id', placeholder: 'job id', required: true, size: 28}),
    el('button', {type: 'submit'}, 'Look up'));
  const kickAll = el('button', {class: 'action', id: 'kick-all'}, 'Kick all dead');
  const purge = el('button', {class: 'danger action', id: 'purge'}, 'Purge topic');
  const add = el('button', {class: 'primary action', id: 'add-job'}, 'Add job');

  root.append(el('div', {class: 'grid'},
    el('section', {class: 'panel'},
      el('div', {class: 'toolbar'}, el('h2', {class: 'grow'}, 'Topic ', el('span', {class: 'sub mono'}, topic)),
        add, kickAll, purge),
      counts)));
  root.append(el('div', {class: 'split'},
    el('section', {class: 'panel'},
      el('div', {class: 'toolbar'}, el('h2', {class: 'grow'}, 'Jobs'), lookup),
      tabs,
      el('div', {class: 'scroll'}, el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'id'),
        el('th', {}, 'due'), el('th', {class: 'num'}, 'attempts'))), tbody)),
      el('div', {class: 'pager'}, first, pageInfo, next, el('span', {class: 'grow'}), refresh)),
    detail));

  /* Cursor paging: `cursor` is the page being shown; the LIST reply gives
   * the next one (0 = this was the last page). */
  let cursor = 0, nextCursor = 0, pageNo = 1, seen = 0, selected = jobId || null;
  let stats = null;

  /* One page: LIST calls from `cursor` until PAGE ids or the end. A LIST
   * call does bounded work, so in a sparse state (5 dead among a million
   * delayed) one call may bring few ids; at most LIST_CALLS calls a page. */
  async function loadPage() {
    const ids = [];
    let c = cursor, calls = 0;
    do {
      const j = await api('GET', topicPath(topic) + '/jobs?state=' + state + '&count=' + (PAGE - ids.length) +
        (c && c !== '0' ? '&cursor=' + enc(c) : ''));
      ids.push(...j.ids);
      c = j.cursor;
    } while (ids.length < PAGE && c && c !== '0' && ++calls < LIST_CALLS);
    nextCursor = c;
    seen += ids.length;
    tbody.replaceChildren(...ids.map((id) => {
      const tr = el('tr', {'data-id': id, class: id === selected ? 'sel' : null},
        el('td', {class: 'id mono'}, el('a', {href: '#/topic/' + enc(topic) + '/' + state + '/' + enc(id)}, id)),
        el('td', {class: 'muted'}, ''), el('td', {class: 'num'}, ''));
      return tr;
    }));
    if (!ids.length)
      tbody.append(el('tr', {}, el('td', {colspan: 3, class: 'muted'},
        pageNo === 1 ? 'no ' + state + ' job' : 'no more jobs')));
    pageInfo.textContent = 'page ' + pageNo + ' · ' + fmtInt(seen) + ' listed' +
      (nextCursor && nextCursor !== '0' ? '' : ' · end');
    next.disabled = !nextCursor || nextCursor === '0';
    first.disabled = pageNo === 1;
    fillRows(ids);
  }

  /* Due time and attempts of the ids on the page (one GET each, in
   * parallel, only for this page). */
  async function fillRows(ids) {
    const now = serverNow();
    await Promise.all(ids.map(async (id) => {
      let j;
      try { j = await api('GET', jobPath(topic, id)); } catch (e) { return; }
      const tr = tbody.querySelector('tr[data-id="' + CSS.escape(id) + '"]');
      if (!tr) return;
      const when = j.state === 'reserved' && j.deadline ? j.deadline : j.due;
      tr.children[1].textContent = (j.state === 'reserved' ? 'lease ends ' : '') + fmtRelative(when, now);
      tr.children[1].title = fmtTime(when);
      tr.children[2].textContent = j.attempts;
    }));
  }

  function renderTabs() {
    tabs.replaceChildren(...STATES.map((s) => el('button', {
      class: s === state ? 'on' : null, 'data-state': s,
      onclick: () => { location.hash = '#/topic/' + enc(topic) + '/' + s; },
    }, s + ' ', el('span', {class: 'muted'}, stats ? fmtInt(stats.jobs[s]) : ''))));
  }

  first.addEventListener('click', () => { cursor = 0; pageNo = 1; seen = 0; loadPage().catch(showErr); });
  next.addEventListener('click', () => { cursor = nextCursor; pageNo++; loadPage().catch(showErr); });
  refresh.addEventListener('click', () => { cursor = 0; pageNo = 1; seen = 0; loadPage().catch(showErr); });
  lookup.addEventListener('submit', (e) => {
    e.preventDefault();
    const id = $('lookup-id').value.trim();
    if (id) showJob(id);
  });
  kickAll.addEventListener('click', () => dialog('Kick all dead jobs of ' + topic + '?',
    el('p', {}, 'Every dead job of this topic goes back to ready, attempts reset to 0.'),
    'Kick all', async () => {
      const r = await api('POST', topicPath(topic) + '/kick', {});
      flash(fmtInt(r.kicked) + ' job(s) kicked back to ready', 'info');
      refreshAll();
    }, 'primary'));
  purge.addEventListener('click', () => dialog('Purge ' + topic + '?',
    [el('p', {}, 'This deletes every job of the topic, in every state. It cannot be undone.'),
      el('label', {for: 'confirm-topic'}, 'Type the topic name to confirm'),
      el('input', {id: 'confirm-topic', name: 'confirm', autocomplete: 'off'})],
    'Purge', async (data) => {
      if (data.get('confirm') !== topic) throw new Error('the name typed is not ' + topic);
      const r = await api('DELETE', topicPath(topic));
      flash(fmtInt(r.removed) + ' job(s) removed from ' + topic, 'info');
      refreshAll();
    }));
  add.addEventListener('click', () => addJobDialog(topic, refreshAll));

  async function showJob(id) {
    selected = id;
    for (const tr of tbody.querySelectorAll('tr.sel')) tr.classList.remove('sel');
    const tr = tbody.querySelector('tr[data-id="' + CSS.escape(id) + '"]');
    if (tr) tr.classList.add('sel');
    let j;
    try {
      j = await api('GET', jobPath(topic, id));
    } catch (e) {
      detail.replaceChildren(el('h2', {}, 'Job'),
        el('p', {class: e.status === 404 ? 'muted' : 'down', id: 'job-missing'},
          e.status === 404 ? 'No job ' + id + ' in ' + topic + '.' : e.message));
      return;
    }
    detail.replaceChildren(...jobDetail(j, () => refreshAll()));
  }

  function refreshAll() {
    cursor = 0; pageNo = 1; seen = 0;
    loadPage().catch(showErr);
    pollCounts().catch(showErr);
    if (selected) showJob(selected);
  }

  async function pollCounts() {
    const o = await api('GET', '/v1/overview?topic=' + enc(topic));
    const t = o.topics[0] || {topic, jobs: {ready: 0, delayed: 0, reserved: 0, dead: 0},
      counters: {}, oldest_ready: null};
    stats = t;
    const c = t.counters;
    counts.replaceChildren(
      el('dt', {}, 'jobs'), el('dd', {id: 'topic-counts'}, STATES.map((s) => fmtInt(t.jobs[s]) + ' ' + s).join(' · ')),
      el('dt', {}, 'oldest ready'), el('dd', {}, oldest(t, o.now)),
      el('dt', {}, 'since start'), el('dd', {}, ['added', 'reserved', 'acked', 'nacked', 'expired', 'dead', 'kicked', 'deleted']
        .filter((k) => c[k] !== undefined).map((k) => fmtInt(c[k]) + ' ' + k).join(' · ')));
    renderTabs();
    for (const b of root.querySelectorAll('.action')) b.hidden = readonly();
  }

  async function poll() {
    if (!serverInfo) await pollServer();
    await pollCounts();
  }

  renderTabs();
  /* the mode (read-only or not) decides which actions the detail shows */
  (serverInfo ? Promise.resolve() : pollServer()).then(() => {
    loadPage().catch(showErr);
    if (jobId) showJob(jobId);
  }, showErr);
  return {root, poll, crumbs: [el('a', {href: '#/topic/' + enc(topic)}, topic)]};
}

function serverNow() {
  /* The server's clock, advanced by the browser's since the last poll. */
  if (!serverInfo) return Date.now();
  return serverInfo.now + (performance.now() - serverInfo.polled_at);
}

/* The detail panel of a job: every field, times local and relative, the
 * body pretty-printed (JSON) or as hex (binary), and its actions. */
function jobDetail(j, after) {
  const now = serverNow();
  const rows = [];
  const time = (ms) => el('span', {}, fmtTime(ms) + ' ', el('span', {class: 'muted'}, '(' + fmtRelative(ms, now) + ')'));
  const known = new Set(['topic', 'id', 'state', 'body', 'body_base64', 'due', 'deadline', 'created',
    'ttr', 'retries', 'attempts', 'url', 'content_type', 'last_push']);
  rows.push(['id', el('span', {class: 'mono'}, j.id)]);
  rows.push(['state', el('span', {class: 's-' + j.state, id: 'job-state'}, j.state)]);
  rows.push(['due', time(j.due)]);
  if (j.deadline) rows.push(['lease ends', time(j.deadline)]);
  rows.push(['created', time(j.created)]);
  rows.push(['attempts', j.attempts + ' of ' + (Number(j.retries) + 1)]);
  rows.push(['ttr', fmtDuration(j.ttr) + ' (' + fmtInt(j.ttr) + ' ms)']);
  if (j.url) rows.push(['push URL', el('span', {class: 'mono'}, j.url)]);
  if (j.content_type) rows.push(['content type', el('span', {class: 'mono'}, j.content_type)]);
  if (j.last_push) /* the server keeps the last attempt only when it failed */
    rows.push(['last push', el('span', {id: 'job-last-push'},
      (j.last_push.status ? 'HTTP ' + j.last_push.status : 'no answer') + ': ' + j.last_push.error +
      ' (attempt ' + j.last_push.attempt + ') ', time(j.last_push.at))]);
  else if (j.url) rows.push(['last push', el('span', {class: 'muted', id: 'job-last-push'}, 'no failed attempt')]);
  for (const [k, v] of Object.entries(j))
    if (!known.has(k)) rows.push([k, typeof v === 'object' ? JSON.stringify(v) : String(v)]);

  let bodyView;
  if (j.body_base64 !== undefined) {
    const bytes = b64bytes(j.body_base64);
    bodyView = [el('h2', {}, 'Body ', el('span', {class: 'sub'}, plural(bytes.length, 'byte') + ', binary')),
      el('pre', {class: 'body hex', id: 'job-body'}, hexDump(bytes.subarray(0, 64 * 1024)) +
        (bytes.length > 64 * 1024 ? '\n… (first 64 KiB shown)' : ''))];
  } else {
    let text = j.body || '', kind = 'text';
    try {
      const v = JSON.parse(text);
      if (v !== null && typeof v === 'object') { text = JSON.stringify(v, null, 2); kind = 'JSON'; }
    } catch (e) { /* not JSON: shown as it is */ }
    bodyView = [el('h2', {}, 'Body ', el('span', {class: 'sub'}, plural(new TextEncoder().encode(j.body || '').length, 'byte') + ', ' + kind)),
      el('pre', {class: 'body', id: 'job-body'}, text)];
  }

  const actions = el('div', {class: 'toolbar'});
  if (!readonly()) {
    if (j.state === 'dead')
      actions.append(el('button', {class: 'primary', id: 'job-kick', onclick: () => kickJob(j, after)}, 'Kick'));
    actions.append(el('button', {class: 'danger', id: 'job-delete', onclick: () => dialog(
      'Delete job ' + j.id + '?', el('p', {}, 'The job is removed from ' + j.topic + ' in whatever state it is.'),
      'Delete', async () => {
        const r = await api('DELETE', jobPath(j.topic, j.id));
        flash(r.deleted ? 'job ' + j.id + ' deleted' : 'job ' + j.id + ' was already gone', 'info');
        after();
      })}, 'Delete'));
  }
  return [el('h2', {}, 'Job'),
    el('dl', {class: 'kv'}, ...rows.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)])),
    ...bodyView, actions];
}

/* Kick one dead job (POST .../jobs/{id}/kick): back to ready, attempts 0. */
function kickJob(j, after) {
  return dialog('Kick job ' + j.id + '?',
    el('p', {}, 'The job goes back to ready with its attempts reset to 0.'), 'Kick', async () => {
      const r = await api('POST', jobPath(j.topic, j.id) + '/kick', {});
      if (!r.kicked) throw new Error('the job is not dead (any more)');
      flash('job ' + j.id + ' kicked back to ready', 'info');
      after();
    }, 'primary');
}

function addJobDialog(topic, after) {
  return dialog('Add a job', [
    el('label', {for: 'add-topic'}, 'topic'),
    el('input', {id: 'add-topic', name: 'topic', value: topic, required: true}),
    el('label', {for: 'add-id'}, 'id (empty = the server makes one)'),
    el('input', {id: 'add-id', name: 'id'}),
    el('label', {for: 'add-delay'}, 'delay (ms, or 500ms, 30s, 1h30m; empty = now)'),
    el('input', {id: 'add-delay', name: 'delay'}),
    el('label', {for: 'add-body'}, 'body'),
    el('textarea', {id: 'add-body', name: 'body'}),
  ], 'Add', async (data) => {
    const t = data.get('topic').trim();
    const req = {body: data.get('body')};
    const id = data.get('id').trim();
    if (id) req.id = id;
    const d = data.get('delay').trim();
    if (d) req.delay = /^\d+$/.test(d) ? Number(d) : d;
    const r = await api('POST', topicPath(t) + '/jobs', req);
    flash('job ' + r.id + ' added to ' + r.topic, 'info');
    if (after) after();
  }, 'primary');
}

/* ---- routing and polling ---------------------------------------------------- */

function showErr(e) {
  if (e && e.status === 401) return flash('');
  flash(e && e.message ? e.message : String(e));
}

function route() {
  const h = location.hash.replace(/^#\/?/, '');
  const parts = h.split('/').map(decodeURIComponent);
  if (parts[0] === 'topic' && parts[1]) return topicView(parts[1], parts[2], parts[3]);
  return overviewView();
}

async function tick() {
  clearTimeout(pollTimer);
  if (document.visibilityState === 'hidden' || needLogin || !view) return;
  const v = view;
  try {
    await v.poll();
    if (v === view) flash('');
  } catch (e) {
    if (v === view) showErr(e);
  }
  if (v === view) pollTimer = setTimeout(tick, POLL_MS);
}

function show() {
  view = route();
  $('view').replaceChildren(view.root);
  $('crumbs').replaceChildren(...view.crumbs.flatMap((c) => [' / ', c]));
  tick();
}

window.addEventListener('hashchange', show);
document.addEventListener('visibilitychange', () => { if (document.visibilityState === 'visible') tick(); });
$('login').addEventListener('submit', (e) => {
  e.preventDefault();
  token = $('token').value;
  sessionStorage.setItem(TOKEN_KEY, token);
  $('token').value = '';
  setLogin(false);
  show();
});
$('logout').addEventListener('click', () => {
  token = '';
  sessionStorage.removeItem(TOKEN_KEY);
  setLogin(true);
});
$('logout').hidden = !token;
show();
