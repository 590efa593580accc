// leasehold's dashboard. It reads nodes and leases through the Kubernetes
// API with the bearer token its user signs in with, and keeps them current
// with watches. See the Go package's comment for the model.
'use strict';

const TOKEN_KEY = 'leasehold.token';
const PAGE_SIZE = 500; // objects per list page
const MAX_ROWS = 200; // rows of a table drawn at once
const MAX_BACKOFF_MS = 10000; // between retries after an error
const NODE_LEASE_NAMESPACE = 'kube-node-lease';
const IDENTITY_LABEL = 'apiserver.kubernetes.io/identity';
const HOSTNAME_LABEL = 'kubernetes.io/hostname';

const $ = (id) => document.getElementById(id);

// APIError is a failed request, carrying the metav1.Status the server sent.
class APIError extends Error {
  constructor(code, status) {
    super((status && status.message) || `the server answered ${code}`);
    this.code = code;
    this.reason = (status && status.reason) || '';
  }
}

let token = '';
let session = null; // the signed-in state: {abort, reflectors, ticker}
let restoreTimer = 0; // the next attempt to sign in with the tab's saved token
let attempts = 0; // sign-in attempts: only the latest one's answer counts

// serverOffset is the server's clock minus this browser's, in ms, learnt
// from the Date header of the server's answers; 0 while the two agree
// within what the header can tell (it is truncated to the second). Ages
// are reckoned on the server's clock, so a browser whose clock is off
// shows neither fresh heartbeats as expired nor dead ones as fresh.
let serverOffset = 0;

function noteServerDate(header, sent, received) {
  const server = Date.parse(header || '');
  if (!Number.isFinite(server)) return;
  // The server read its clock somewhere in [server, server+1000) while
  // this browser's read somewhere in [sent, received].
  const offset = server + 500 - (sent + received) / 2;
  serverOffset = Math.abs(offset) <= 1000 + (received - sent) / 2 ? 0 : Math.round(offset);
}

function serverNow() {
  return Date.now() + serverOffset;
}

async function api(path, init = {}) {
  const headers = { Accept: 'application/json', Authorization: `Bearer ${token}`, ...init.headers };
  const sent = Date.now();
  const res = await fetch(path, { ...init, headers, cache: 'no-store' });
  noteServerDate(res.headers.get('Date'), sent, Date.now());
  if (!res.ok) {
    let status = null;
    try {
      status = await res.json();
    } catch (_) {
      // not a Status: keep the code alone
    }
    throw new APIError(res.status, status && status.kind === 'Status' ? status : null);
  }
  return res;
}

// sleep waits ms, or less when signal aborts. It leaves no listener on
// the signal behind, which lives as long as the session.
function sleep(ms, signal) {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done);
  });
}

// A Reflector keeps items (namespace/name → compact record) equal to one
// collection on the server: a paged list, then a watch from the list's
// resourceVersion, resumed from the last one seen when it ends, and a new
// list after 410 Gone.
class Reflector {
  constructor(name, path, selector, compact) {
    this.name = name;
    this.path = path;
    this.selector = selector;
    this.compact = compact;
    this.items = new Map();
    this.listed = false; // once a list has been answered: items mean something
    this.state = 'listing';
    this.error = null;
    this.version = 0; // counts changes, for the views' caches
  }

  async run(signal, changed) {
    let rv = '';
    let backoff = 1000;
    while (!signal.aborted) {
      try {
        if (!rv) {
          this.state = 'listing';
          rv = await this.list(signal);
          this.error = null;
          this.state = 'watching';
          changed(this);
        }
        // After an error the state stays 'retrying', and the error shown,
        // until the watch is answered (watch()).
        rv = await this.watch(rv, signal, changed);
        backoff = 1000;
      } catch (err) {
        if (signal.aborted) return;
        if (err instanceof APIError && err.code === 410) {
          rv = ''; // compacted: list again
          continue;
        }
        this.state = 'retrying';
        this.error = err;
        changed(this);
        if (err instanceof APIError && err.code === 401) return; // signed out
        if (err instanceof SyntaxError) rv = ''; // a garbled stream: start over
        await sleep(backoff, signal);
        backoff = Math.min(2 * backoff, MAX_BACKOFF_MS);
      }
    }
  }

  query(extra) {
    const q = new URLSearchParams(extra);
    if (this.selector) q.set('fieldSelector', this.selector);
    return `${this.path}?${q}`;
  }

  async list(signal) {
    const items = new Map();
    let cont = '';
    let rv = '';
    do {
      const page = { limit: PAGE_SIZE };
      if (cont) page.continue = cont;
      const res = await api(this.query(page), { signal });
      const body = await res.json();
      for (const o of body.items || []) items.set(key(o), this.compact(o));
      cont = body.metadata.continue || '';
      rv = rv || body.metadata.resourceVersion;
    } while (cont);
    this.items = items;
    this.listed = true;
    this.version++;
    return rv;
  }

  async watch(rv, signal, changed) {
    const timeout = 240 + Math.floor(Math.random() * 120);
    const res = await api(this.query({ watch: '1', resourceVersion: rv, allowWatchBookmarks: 'true', timeoutSeconds: timeout }), { signal });
    if (this.error || this.state !== 'watching') {
      this.error = null;
      this.state = 'watching';
      changed(this);
    }
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return rv;
      buf += value;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (!line) continue;
        const ev = JSON.parse(line);
        if (ev.type === 'ERROR') throw new APIError(ev.object.code || 500, ev.object);
        rv = ev.object.metadata.resourceVersion || rv;
        if (ev.type === 'BOOKMARK') continue;
        if (ev.type === 'DELETED') this.items.delete(key(ev.object));
        else this.items.set(key(ev.object), this.compact(ev.object));
        this.version++;
        changed(this);
      }
    }
  }
}

function key(o) {
  return o.metadata.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata.name;
}

// compactNode keeps what the table shows. The status is kubectl's: Ready
// when the Ready condition is True, NotReady when it is anything else,
// Unknown when there is none, and SchedulingDisabled when cordoned.
function compactNode(o) {
  const spec = o.spec || {};
  const status = o.status || {};
  const ready = (status.conditions || []).find((c) => c.type === 'Ready');
  const ok = !!ready && ready.status === 'True';
  let text = ready ? (ok ? 'Ready' : 'NotReady') : 'Unknown';
  if (spec.unschedulable) text += ',SchedulingDisabled';
  return {
    name: o.metadata.name,
    ok,
    status: text,
    taints: (spec.taints || []).map((t) => `${t.key}${t.value ? '=' + t.value : ''}:${t.effect}`),
    version: (status.nodeInfo && status.nodeInfo.kubeletVersion) || '',
    created: Date.parse(o.metadata.creationTimestamp),
  };
}

function compactLease(o) {
  const spec = o.spec || {};
  const labels = o.metadata.labels || {};
  return {
    namespace: o.metadata.namespace,
    name: o.metadata.name,
    holder: spec.holderIdentity || '',
    renewed: spec.renewTime ? Date.parse(spec.renewTime) : NaN,
    duration: spec.leaseDurationSeconds || 0,
    transitions: spec.leaseTransitions || 0,
    identity: labels[IDENTITY_LABEL] || '',
    host: labels[HOSTNAME_LABEL] || '',
  };
}

// age prints a duration the way kubectl's AGE column does.
function age(ms) {
  if (!Number.isFinite(ms)) return '';
  const s = Math.max(0, Math.floor(ms / 1000));
  const m = Math.floor(s / 60);
  const h = Math.floor(m / 60);
  const d = Math.floor(h / 24);
  if (s < 120) return `${s}s`;
  if (m < 10) return s % 60 ? `${m}m${s % 60}s` : `${m}m`;
  if (h < 3) return `${m}m`;
  if (h < 8) return m % 60 ? `${h}h${m % 60}m` : `${h}h`;
  if (d < 2) return `${h}h`;
  if (d < 8) return h % 24 ? `${d}d${h % 24}h` : `${d}d`;
  return `${d}d`;
}

function count(n) {
  return n.toLocaleString('en-US');
}

function row(cells) {
  const tr = document.createElement('tr');
  for (const c of cells) {
    const td = document.createElement('td');
    if (typeof c === 'object' && c !== null) {
      td.textContent = c.text;
      if (c.className) td.className = c.className;
      if (c.title) td.title = c.title;
    } else {
      td.textContent = c;
    }
    tr.appendChild(td);
  }
  return tr;
}

function fill(table, rows, empty) {
  const body = $(table).tBodies[0];
  if (rows.length === 0) {
    const tr = row([{ text: empty, className: 'empty' }]);
    tr.firstChild.colSpan = $(table).tHead.rows[0].cells.length;
    rows = [tr];
  }
  body.replaceChildren(...rows);
}

// heartbeat describes a Lease: how long since its renewTime, by the
// server's clock, and whether that is longer than its duration (said in
// words as well as in red).
function heartbeat(lease, now) {
  if (!lease) return { text: 'no lease', className: 'stale' };
  if (!Number.isFinite(lease.renewed)) return { text: 'never renewed', className: 'stale' };
  const ms = now - lease.renewed;
  const stale = lease.duration > 0 && ms > lease.duration * 1000;
  return {
    text: stale ? `${age(ms)} ago, expired` : `${age(ms)} ago`,
    className: stale ? 'stale' : '',
    title: `renewed ${new Date(lease.renewed).toISOString()} by ${lease.holder || 'no holder'}, duration ${lease.duration}s`,
  };
}

// memo keeps what render derives from a reflector's items (sorted, split)
// until they change: the page renders every second to move the ages on,
// and a fleet's lists do not change that often.
let memo = new Map();
function memoized(name, version, compute) {
  const m = memo.get(name);
  if (m && m.version === version) return m.value;
  const value = compute();
  memo.set(name, { version, value });
  return value;
}

const byNodeStatus = (a, b) => (a.ok === b.ok ? (a.name < b.name ? -1 : a.name > b.name ? 1 : 0) : a.ok ? 1 : -1);
const byNamespacedName = (a, b) => {
  const x = `${a.namespace}/${a.name}`;
  const y = `${b.namespace}/${b.name}`;
  return x < y ? -1 : x > y ? 1 : 0;
};

// firstRows returns up to MAX_ROWS of items that pass keep, and how many
// pass.
function firstRows(items, keep) {
  const shown = [];
  let matching = 0;
  for (const x of items) {
    if (!keep(x)) continue;
    matching++;
    if (shown.length < MAX_ROWS) shown.push(x);
  }
  return { shown, matching };
}

// emptyText is what a table with no rows says: why, when its collection
// has not been listed yet.
function emptyText(r, none) {
  if (r.listed) return none;
  return r.state === 'listing' ? 'Loading…' : 'Not loaded: see the error above.';
}

// clockNote says how far this browser's clock is off, if it is: to the
// second under two minutes, to the minute above (the estimate is good to
// about a second).
function clockNote() {
  if (!serverOffset) return '';
  const off = Math.abs(serverOffset);
  const unit = off < 120000 ? 1000 : 60000;
  const ahead = serverOffset < 0;
  return ` This browser's clock is ${age(Math.round(off / unit) * unit)} ${ahead ? 'ahead of' : 'behind'} the server's; ages are reckoned on the server's.`;
}

function render() {
  if (!session) return;
  const [nodes, nodeLeases, leases] = session.reflectors;
  const now = serverNow();

  const all = memoized('nodes', nodes.version, () => [...nodes.items.values()].sort(byNodeStatus));
  const ready = memoized('ready', nodes.version, () => all.reduce((n, x) => n + (x.ok ? 1 : 0), 0));
  const { servers, elections } = memoized('leases', leases.version, () => {
    const split = { servers: [], elections: [] };
    for (const l of leases.items.values()) {
      if (!l.identity) split.elections.push(l);
      else if (l.namespace === 'kube-system') split.servers.push(l);
    }
    split.servers.sort(byNamespacedName);
    split.elections.sort(byNamespacedName);
    return split;
  });
  $('count-nodes').textContent = nodes.listed ? count(all.length) : '–';
  $('count-ready').textContent = nodes.listed ? count(ready) : '–';
  $('count-notready').textContent = nodes.listed ? count(all.length - ready) : '–';
  $('count-elections').textContent = leases.listed ? count(elections.length) : '–';
  $('count-servers').textContent = leases.listed ? count(servers.length) : '–';

  const filter = $('filter').value.trim().toLowerCase();
  const { shown, matching } = firstRows(all, (n) => !filter || n.name.toLowerCase().includes(filter));
  fill('nodes', shown.map((n) => row([
    n.name,
    { text: n.status, className: n.ok ? 'ok' : 'bad' },
    heartbeat(nodeLeases.items.get(`${NODE_LEASE_NAMESPACE}/${n.name}`), now),
    { text: n.taints.join(', '), className: 'wrap' },
    n.version,
    age(now - n.created),
  ])), emptyText(nodes, filter ? 'No node matches the filter.' : 'No nodes.'));
  $('nodes-shown').textContent = matching > shown.length
    ? `Showing ${count(shown.length)} of ${count(matching)} nodes, NotReady first; filter by name to find others.`
    : '';

  const first = firstRows(elections, () => true);
  fill('elections', first.shown.map((l) => row([
    l.namespace,
    l.name,
    l.holder ? { text: l.holder, className: 'wrap' } : { text: 'none', className: 'stale' },
    heartbeat(l, now),
    l.duration ? `${l.duration}s` : '',
    String(l.transitions),
  ])), emptyText(leases, 'No leader elections.'));
  $('elections-shown').textContent = first.matching > first.shown.length
    ? `Showing the first ${count(first.shown.length)} of ${count(first.matching)} leader elections, by namespace and name.`
    : '';
  fill('servers', servers.map((l) => row([
    l.name,
    l.host,
    { text: l.holder, className: 'wrap' },
    heartbeat(l, now),
  ])), emptyText(leases, 'No server identity leases.'));

  showError('nodes-error', nodes.error || nodeLeases.error);
  showError('leases-error', leases.error);
  const states = session.reflectors.map((r) => r.state);
  $('connection').textContent = (states.every((s) => s === 'watching')
    ? 'Live: watching nodes and leases.'
    : states.includes('retrying') ? 'Reconnecting…' : 'Loading…') + clockNote();
}

function showError(id, err) {
  $(id).textContent = err ? describe(err) : '';
}

function describe(err) {
  if (err instanceof APIError) return `${err.message} (${err.code}${err.reason ? ' ' + err.reason : ''})`;
  return `Cannot reach the server: ${err.message}`;
}

let renderPending = false;
function scheduleRender() {
  if (renderPending) return;
  renderPending = true;
  setTimeout(() => { renderPending = false; render(); }, 200);
}

function start() {
  const abort = new AbortController();
  const reflectors = [
    new Reflector('nodes', '/api/v1/nodes', '', compactNode),
    new Reflector('node leases', `/apis/coordination.k8s.io/v1/namespaces/${NODE_LEASE_NAMESPACE}/leases`, '', compactLease),
    new Reflector('leases', '/apis/coordination.k8s.io/v1/leases', `metadata.namespace!=${NODE_LEASE_NAMESPACE}`, compactLease),
  ];
  session = { abort, reflectors, ticker: setInterval(render, 1000) };
  for (const r of reflectors) {
    r.run(abort.signal, (changed) => {
      if (changed.error instanceof APIError && changed.error.code === 401) {
        signOut('The server no longer accepts this token (401 Unauthorized). Sign in again.');
        return;
      }
      scheduleRender();
    });
  }
  render();
}

// showSignIn ends the session, if any, and shows the sign-in form with
// message and value in the token field.
function showSignIn(message, value) {
  if (session) {
    session.abort.abort();
    clearInterval(session.ticker);
    session = null;
  }
  memo = new Map();
  $('fleet').hidden = true;
  $('sign-out').hidden = true;
  $('user').textContent = '';
  $('sign-in').hidden = false;
  $('sign-in-error').textContent = message || '';
  $('token').value = value;
  $('token').focus();
}

function signOut(message) {
  clearTimeout(restoreTimer);
  attempts++;
  token = '';
  sessionStorage.removeItem(TOKEN_KEY);
  showSignIn(message, '');
}

// signIn checks the token with a SelfSubjectReview, which every
// authenticated user may create, and shows who it names. Only a 401 says
// the token is no good: any other failure (the server restarting, a
// proxy's 502) leaves it in the form, and a token the tab had saved is
// tried again until the server answers.
async function signIn(candidate, restoring = false, backoff = 1000) {
  clearTimeout(restoreTimer);
  const attempt = ++attempts;
  token = candidate;
  let review;
  try {
    const res = await api('/apis/authentication.k8s.io/v1/selfsubjectreviews', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' }),
    });
    review = await res.json();
  } catch (err) {
    if (attempt !== attempts) return;
    if (err instanceof APIError && err.code === 401) {
      signOut('The server does not accept this token (401 Unauthorized).');
      return;
    }
    showSignIn(describe(err) + (restoring ? '. Trying again…' : ''), candidate);
    if (restoring) {
      restoreTimer = setTimeout(() => signIn(candidate, true, Math.min(2 * backoff, MAX_BACKOFF_MS)), backoff);
    }
    return;
  }
  if (attempt !== attempts) return;
  sessionStorage.setItem(TOKEN_KEY, candidate);
  $('user').textContent = (review.status && review.status.userInfo && review.status.userInfo.username) || '';
  $('sign-in').hidden = true;
  $('sign-in-error').textContent = '';
  $('sign-out').hidden = false;
  $('fleet').hidden = false;
  start();
}

async function showVersion() {
  try {
    const res = await fetch('/version', { headers: { Accept: 'application/json' } });
    if (res.ok) $('server-version').textContent = (await res.json()).gitVersion || '';
  } catch (_) {
    // the version is decoration
  }
}

document.addEventListener('DOMContentLoaded', () => {
  $('sign-in-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const t = $('token').value.trim();
    if (t) signIn(t);
  });
  $('sign-out').addEventListener('click', () => signOut(''));
  $('filter').addEventListener('input', render);
  showVersion();
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (saved) signIn(saved, true);
  else signOut('');
});
