// allot's dashboard: reads /ui/api/<view> (the API's answers as JSON, as the signed-in identity)
// and draws the page the location's hash names, again every few seconds.
'use strict';

const REFRESH_MS = 3000;
const RES = ['gpu', 'neuron', 'cpu', 'memory'];
const LABEL = { gpu: 'GPUs', neuron: 'Neuron devices', cpu: 'vCPU', memory: 'Memory', efa: 'EFA' };
const SVGNS = 'http://www.w3.org/2000/svg';
const IDLE_COLOUR = '#c9d3e0';
let me = null;
let timer = null;
let generation = 0;
// Samples of the cluster's use while the page is open, for the live chart.
const samples = [];

const $ = (id) => document.getElementById(id);

function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids.flat()) {
    if (k == null) continue;
    e.append(k instanceof Node ? k : String(k));
  }
  return e;
}

function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) if (k != null) e.append(k instanceof Node ? k : String(k));
  return e;
}

async function get(view, params) {
  const q = new URLSearchParams(params || {});
  const r = await fetch(`/ui/api/${view}?${q}`, { credentials: 'same-origin' });
  const body = await r.json().catch(() => ({ message: r.statusText }));
  if (!r.ok) {
    const e = new Error(body.message || r.statusText);
    e.status = r.status;
    throw e;
  }
  return body;
}

// Amounts in the API's base units: millicores, bytes, devices.
function fmt(res, v) {
  v = Number(v || 0);
  if (res === 'cpu') return trim(v / 1000);
  if (res === 'memory') return trim(v / 2 ** 30) + ' GiB';
  return String(v);
}
// Hours to three significant digits below 100 (a short test's GPU-hours are not 0.00).
function figure(x) {
  if (x === 0) return '0';
  return Math.abs(x) >= 100 ? x.toFixed(0) : String(Number(x.toPrecision(3)));
}
function trim(x) {
  return Number.isInteger(x) ? String(x) : x.toFixed(1);
}
const val = (r, k) => Number((r || {})[k] || 0);

function ago(ms) {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.round(s / 60)}m`;
  if (s < 172800) return `${(s / 3600).toFixed(1)}h`;
  return `${(s / 86400).toFixed(1)}d`;
}
const when = (ms) => (ms ? new Date(ms).toLocaleString() : '');

// A legend's colour square.
function swatch(colour) {
  const i = h('i');
  i.style.background = colour;
  return i;
}

function bar(used, total) {
  const pct = total > 0 ? Math.min(100, (100 * used) / total) : 0;
  const fill = h('span');
  fill.style.width = `${pct}%`;
  return h('span', { class: 'bar', title: `${pct.toFixed(0)}%` }, fill);
}

function table(header, rows, attrs) {
  return h('table', attrs,
    h('thead', {}, h('tr', {}, header.map((c) => h('th', { class: c.endsWith('#') ? 'num' : null }, c.replace(/#$/, ''))))),
    h('tbody', {}, rows));
}
const num = (v, id) => h('td', { class: 'num', id }, v);
const link = (href, text) => h('a', { href }, text);
const wlink = (w) => link(`#/workload/${encodeURIComponent(w.team)}/${encodeURIComponent(w.name)}`, w.name);

function present(resources) {
  return RES.filter((r) => resources.some((x) => val(x, r) > 0));
}

// ------------------------------------------------------------------------------- pages

async function cluster() {
  const [nodes, teams] = await Promise.all([get('nodes'), get('teams')]);
  const ns = nodes.Nodes;
  const ts = teams.Teams;
  const res = present(ns.map((n) => n.capacity));
  const sum = (list, key, r) => list.reduce((a, x) => a + val(x[key], r), 0);
  const cards = res.map((r) => {
    const cap = sum(ns, 'capacity', r);
    const used = sum(ns, 'used', r);
    const borrowed = sum(ts, 'borrowed', r);
    return h('div', { class: 'card' },
      h('div', { class: 'label' }, LABEL[r] || r),
      h('div', { class: 'big' }, h('span', { id: `cluster-${r}-used` }, fmt(r, used)), ' / ',
        h('span', { id: `cluster-${r}-capacity` }, fmt(r, cap))),
      bar(used, cap),
      h('div', { class: 'label' }, 'idle ', h('span', { id: `cluster-${r}-idle` }, fmt(r, cap - used)),
        ' · borrowed ', h('span', { id: `cluster-${r}-borrowed` }, fmt(r, borrowed))));
  });
  const byType = new Map();
  for (const n of ns) {
    const t = byType.get(n.instance_type) || { nodes: 0, ready: 0, capacity: {}, used: {} };
    t.nodes += 1;
    if (n.status === 'Ready') t.ready += 1;
    for (const r of res) {
      t.capacity[r] = val(t.capacity, r) + val(n.capacity, r);
      t.used[r] = val(t.used, r) + val(n.used, r);
    }
    byType.set(n.instance_type, t);
  }
  const rows = [...byType.entries()].map(([type, t]) =>
    h('tr', { id: `type-row-${type}` }, h('td', {}, type), num(`${t.ready} / ${t.nodes}`),
      res.flatMap((r) => [num(fmt(r, t.capacity[r])), num(fmt(r, t.used[r])),
        num(fmt(r, t.capacity[r] - t.used[r]))])));
  const header = ['Instance type', 'Ready nodes#',
    ...res.flatMap((r) => [`${LABEL[r]}#`, 'used#', 'idle#'])];
  const main = res[0] || 'cpu';
  samples.push({ t: Date.now(), used: sum(ns, 'used', main), cap: sum(ns, 'capacity', main) });
  while (samples.length > 400) samples.shift();
  const admitted = ts.reduce((a, t) => a + t.admitted, 0);
  const pending = ts.reduce((a, t) => a + t.pending, 0);
  cards.push(h('div', { class: 'card' }, h('div', { class: 'label' }, 'Workloads'),
    h('div', { class: 'big' }, h('span', { id: 'cluster-admitted' }, admitted), ' admitted'),
    h('div', { class: 'label' }, h('span', { id: 'cluster-pending' }, pending), ' pending')));
  return h('div', {},
    h('h1', {}, 'Cluster'),
    h('div', { class: 'cards' }, cards),
    h('h2', {}, `${LABEL[main]} by team`),
    teamSplit(ts, main, sum(ns, 'capacity', main)),
    h('h2', {}, 'By instance type'),
    table(header, rows, { id: 'types' }),
    h('h2', {}, `${LABEL[main]} in use while this page is open`),
    liveChart(samples));
}

// One bar of the cluster's capacity: each team's use (its own quota, then what it borrowed),
// then what is idle.
function teamSplit(ts, r, cap) {
  const W = 640;
  const s = svg('svg', { width: W, height: 26, id: 'team-split' });
  let x = 0;
  const legend = [];
  ts.forEach((t, j) => {
    const used = val(t.usage, r);
    if (!used || !cap) return;
    const w = (used / cap) * W;
    const colour = TEAM_COLOURS[j % TEAM_COLOURS.length];
    s.append(svg('rect', { x, y: 0, width: w, height: 24, fill: colour },
      svg('title', {}, `${t.name}: ${fmt(r, used)} (borrowed ${fmt(r, val(t.borrowed, r))})`)));
    x += w;
    const borrowed = val(t.borrowed, r);
    legend.push(h('span', {}, swatch(colour), `${t.name} ${fmt(r, used)} of ${fmt(r, val(t.nominal, r))}`,
      borrowed ? ` (${fmt(r, borrowed)} borrowed)` : ''));
  });
  s.append(svg('rect', { x, y: 0, width: Math.max(0, W - x), height: 24, fill: IDLE_COLOUR }));
  legend.push(h('span', {}, swatch(IDLE_COLOUR), 'idle'));
  return h('div', {}, s, h('div', { class: 'legend' }, legend));
}

function liveChart(points) {
  const W = 640, H = 120;
  const s = svg('svg', { width: W, height: H + 20, id: 'live-chart' });
  if (points.length < 2) {
    s.append(svg('text', { x: 4, y: 14 }, 'collecting samples…'));
    return s;
  }
  const cap = Math.max(1, ...points.map((p) => p.cap));
  const t0 = points[0].t, t1 = points[points.length - 1].t;
  const x = (t) => ((t - t0) / Math.max(1, t1 - t0)) * (W - 40) + 36;
  const y = (v) => H - (v / cap) * (H - 10);
  s.append(svg('line', { x1: 36, y1: y(cap), x2: W - 4, y2: y(cap), stroke: '#c9d3e0' }));
  s.append(svg('text', { x: 0, y: y(cap) + 4 }, String(cap)));
  s.append(svg('text', { x: 0, y: H + 4 }, '0'));
  const line = points.map((p) => `${x(p.t).toFixed(1)},${y(p.used).toFixed(1)}`).join(' ');
  s.append(svg('polyline', { points: line, fill: 'none', stroke: '#2b6cb0', 'stroke-width': 2 }));
  return s;
}

async function teams() {
  // A coordinator without cohorts (an older release) leaves the teams as they are; one
  // without cohort weights leaves the weight column empty.
  const [t, w, c, cw] = await Promise.all([get('teams'), get('workloads'),
    get('cohorts').catch(() => ({})), get('cohort-weights').catch(() => ({}))]);
  const ts = t.Teams;
  const res = present(ts.map((x) => x.nominal).concat(ts.map((x) => x.usage)));
  const longest = new Map();
  for (const x of w.Workloads.filter((x) => x.state === 'Pending')) {
    const l = longest.get(x.team);
    if (!l || x.submitted_ms < l.submitted_ms) longest.set(x.team, x);
  }
  // The first accelerator in full (nominal, in use, borrowed, lent); the rest as use of nominal.
  const [main, ...rest] = res.length ? res : ['cpu'];
  const rows = ts.map((x) => {
    const l = longest.get(x.name);
    return h('tr', { id: `team-row-${x.name}` },
      h('td', {}, link(`#/queue/${encodeURIComponent(x.name)}`, x.name)),
      num(x.fair_share_weight),
      num(fmt(main, val(x.nominal, main))),
      h('td', { class: 'num' }, bar(val(x.usage, main), Math.max(val(x.nominal, main), 1)), fmt(main, val(x.usage, main))),
      num(fmt(main, val(x.borrowed, main))), num(fmt(main, val(x.lent, main))),
      rest.map((r) => num(`${fmt(r, val(x.usage, r))} / ${fmt(r, val(x.nominal, r))}`)),
      num(x.weighted_share == null ? '' : x.weighted_share.toFixed(3)),
      num(x.admitted), num(x.pending),
      h('td', {}, l ? [wlink(l), ` ${ago(l.submitted_ms)}`] : ''));
  });
  const header = ['Team', 'Weight#', `${LABEL[main]} nominal#`, 'in use#', 'borrowed#', 'lent#',
    ...rest.map((r) => `${LABEL[r]} used / nominal#`),
    'Weighted share#', 'Admitted#', 'Pending#', 'Waits longest'];
  return h('div', {}, h('h1', {}, 'Teams'), table(header, rows, { id: 'teams' }),
    me.team ? h('p', { class: 'muted' }, `Workloads shown are team ${me.team}'s; the totals are the cluster's.`) : null,
    cohorts(c.Cohorts || [], new Map((cw.CohortWeights || []).map((x) => [x.cohort, x.fair_share_weight]))));
}

// The tree of cohorts: where each sits, its teams, and per (flavor, resource) its pool (what
// it owns, its teams lend and its children lend up) and what its subtree uses of it.
function cohorts(cs, weights) {
  if (!cs.length) return null;
  const rows = cs.map((c) => h('tr', { id: `cohort-row-${c.name}` },
    h('td', {}, c.name), h('td', {}, c.parent || '—'), num(weights.get(c.name) || ''),
    h('td', {}, c.children.join(', ')), h('td', {}, c.teams.join(', ')),
    h('td', {}, c.pairs.map((p) => h('div', {},
      `${p.resource} ${p.flavor}: ${p.in_use} of ${p.pool}`
      + (p.borrowing_limit ? `, borrows ≤ ${p.borrowing_limit}` : '')
      + (p.lending_limit ? `, lends ≤ ${p.lending_limit}` : ''))))));
  return [h('h2', {}, 'Cohorts'),
    table(['Cohort', 'Parent', 'Weight#', 'Children', 'Teams', 'Pool in use'], rows, { id: 'cohorts' })];
}

// Kueue's StrictFIFO order within a queue: higher priority first, then the earlier submission.
const admissionOrder = (a, b) => b.priority - a.priority || a.submitted_ms - b.submitted_ms || a.id - b.id;

function reason(w) {
  const c = [...w.conditions].reverse().find((x) => !x.status && x.message);
  return c ? `${c.reason}: ${c.message}` : '';
}

async function queue(team) {
  const ts = (await get('teams')).Teams.map((x) => x.name);
  team = team || me.team || ts[0];
  if (!team) return h('div', {}, h('h1', {}, 'Queue'), h('p', {}, 'No teams yet.'));
  const ws = (await get('workloads', { team })).Workloads;
  const pending = ws.filter((w) => w.state === 'Pending').sort(admissionOrder);
  const explained = await Promise.all(pending.slice(0, 20).map((w) =>
    get('explain', { name: w.name, team }).then((e) => e.Explanation.join('\n')).catch((e) => e.message)));
  const rows = pending.map((w, i) => h('tr', { id: `queue-row-${w.name}` },
    num(i + 1), h('td', {}, wlink(w)), h('td', {}, w.priority_class || ''), num(w.priority),
    num(ago(w.submitted_ms)), h('td', {}, requests(w)),
    h('td', {}, h('div', {}, reason(w)), explained[i] ? h('pre', { class: 'explain' }, explained[i]) : null)));
  const active = ws.filter((w) => w.state !== 'Pending').sort(admissionOrder).map((w) =>
    h('tr', { id: `active-row-${w.name}` }, h('td', {}, wlink(w)), h('td', {}, w.state),
      h('td', {}, w.priority_class || ''), h('td', {}, requests(w)),
      h('td', {}, [...new Set(w.pods.map((p) => p.node))].join(', ')),
      num(w.admitted_ms ? ago(w.admitted_ms) : '')));
  const pick = h('select', { id: 'team-select', onchange: (e) => { location.hash = `#/queue/${encodeURIComponent(e.target.value)}`; } },
    ts.map((t) => h('option', t === team ? { value: t, selected: '' } : { value: t }, t)));
  return h('div', {},
    h('h1', {}, 'Queue of ', me.team ? team : pick),
    h('h2', {}, `Pending, in admission order (${pending.length})`),
    pending.length ? table(['#', 'Workload', 'Class', 'Priority#', 'Waiting#', 'Requests', 'Why it waits'], rows, { id: 'pending' })
      : h('p', { class: 'muted' }, 'Nothing waits.'),
    h('h2', {}, `Admitted and running (${active.length})`),
    active.length ? table(['Workload', 'State', 'Class', 'Requests', 'Nodes', 'Admitted#'], active, { id: 'active' })
      : h('p', { class: 'muted' }, 'Nothing runs.'));
}

function requests(w) {
  const r = w.requests || {};
  const per = RES.filter((k) => val(r, k)).map((k) => `${k} ${fmt(k, val(r, k))}`).join(', ');
  return w.count > 1 ? `${w.count} × (${per})` : per;
}

async function workload(team, name, rank) {
  const w = (await get('workload', { name, team })).Workload;
  rank = Number(rank || 0);
  const pod = w.pods[rank];
  let log = null;
  if (pod && pod.node) {
    log = await get('logs', { name, team, node: pod.node, rank })
      .then((l) => l.log).catch((e) => `(no log: ${e.message})`);
  }
  const facts = [
    ['State', h('span', { id: 'workload-state' }, w.state)], ['Team', w.team],
    ['Class', w.priority_class || ''], ['Priority', w.priority], ['Requests', requests(w)],
    ['Submitted', when(w.submitted_ms)], ['Admitted', when(w.admitted_ms)],
    ['Preemptions', w.preemptions], ['Run time lost to preemption', `${(w.lost_run_ms / 1000).toFixed(0)}s`],
  ];
  const conds = w.conditions.map((c) => h('tr', {}, h('td', {}, c.kind),
    h('td', { class: c.status ? 'ok' : 'muted' }, String(c.status)), h('td', {}, c.reason),
    h('td', {}, c.message), h('td', {}, when(c.time_ms))));
  const pods = w.pods.map((p, i) => h('tr', { id: `pod-row-${i}` }, h('td', {}, `${p.pod_set}/${p.index}`),
    h('td', {}, p.node), h('td', {}, Object.entries(p.devices).map(([r, v]) => `${r} ${v.join(',')}`).join('; ')),
    h('td', {}, p.status || p.outcome || ''), h('td', {}, when(p.started_ms)),
    num(p.exit_code == null ? '' : p.exit_code),
    h('td', {}, link(`#/workload/${encodeURIComponent(w.team)}/${encodeURIComponent(w.name)}/${i}`, 'log'))));
  return h('div', {},
    h('h1', {}, `Workload ${w.name}`),
    table(['', ''], facts.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, v))), { id: 'facts' }),
    h('h2', {}, 'Conditions'), table(['Condition', 'Status', 'Reason', 'Message', 'Since'], conds),
    h('h2', {}, 'Pods'), pods.length ? table(['Pod', 'Node', 'Devices', 'Status', 'Started', 'Exit#', ''], pods, { id: 'pods' })
      : h('p', { class: 'muted' }, 'No pods placed.'),
    log == null ? null : [h('h2', {}, `Log of pod ${rank}`), h('pre', { id: 'log' }, log)]);
}

async function nodes() {
  // A coordinator's topology answer failing leaves the node list as it is.
  const [nodeReply, topoReply] = await Promise.all([get('nodes'), get('topology').catch(() => ({}))]);
  const ns = nodeReply.Nodes;
  const res = present(ns.map((n) => n.capacity));
  const rows = ns.map((n) => h('tr', { id: `node-row-${n.name}` },
    h('td', {}, n.name), h('td', {}, n.instance_type),
    h('td', { class: n.status === 'Ready' ? 'ok' : 'bad' }, n.status, n.reason ? h('div', { class: 'muted' }, n.reason) : null),
    res.map((r) => h('td', { class: 'num' }, bar(val(n.used, r), val(n.capacity, r)), `${fmt(r, val(n.used, r))} / ${fmt(r, val(n.capacity, r))}`)),
    h('td', {}, n.devices.map((d) => h('div', { class: d.healthy ? '' : 'bad' },
      `${d.resource}${d.index} ${d.model || ''}${d.mig ? ' (MIG)' : ''} ${d.healthy ? '✓' : `✗ ${d.reason}`}`)))));
  return h('div', {}, h('h1', {}, 'Nodes'),
    table(['Node', 'Instance type', 'Status', ...res.map((r) => `${LABEL[r]}#`), 'Devices'], rows, { id: 'nodes' }),
    topology(topoReply.Topology || [], res));
}

// The topology domains (racks, network blocks) and what their ready nodes have free: where a
// gang that asks for one domain of a level can go.
function topology(ds, res) {
  if (!ds.length) return null;
  const rows = ds.map((d) => h('tr', { id: `domain-row-${d.level}-${d.domain}` },
    h('td', {}, d.level), h('td', {}, d.domain), h('td', {}, d.nodes.join(', ')),
    num(`${d.schedulable} / ${d.nodes.length}`),
    res.map((r) => {
      const cap = val(d.capacity, r);
      const free = val(d.free, r);
      return h('td', { class: 'num' }, bar(cap - free, cap), `${fmt(r, free)} free of ${fmt(r, cap)}`);
    })));
  return [h('h2', {}, 'Topology'),
    table(['Level', 'Domain', 'Nodes', 'Ready#', ...res.map((r) => `${LABEL[r]}#`)], rows, { id: 'topology' })];
}

const HOUR_MS = 3600 * 1000;
const TEAM_COLOURS = ['#2b6cb0', '#dd8a2f', '#2f855a', '#9f7aea', '#c53030', '#319795', '#d53f8c', '#718096'];

async function usage() {
  const days = 14;
  const report = (await get('usage', { days, by: 'day,team' })).Usage;
  const resources = [...new Set(report.lines.map((l) => l.resource))];
  const r = ['gpu', 'neuron', 'cpu'].find((x) => resources.includes(x)) || 'cpu';
  const unit = r === 'cpu' ? 1000 * HOUR_MS : HOUR_MS;
  const lines = report.lines.filter((l) => l.resource === r);
  const dayList = [...new Set(lines.map((l) => l.group[0]))].sort();
  const teamList = [...new Set(lines.map((l) => l.group[1]))].sort();
  const totals = new Map();
  for (const l of lines) {
    const t = totals.get(l.group[1]) || { used: 0, own: 0, borrowed: 0, lent: 0, idle: 0, lost: 0 };
    const a = l.amounts, q = a.quota || {};
    t.used += Number(a.used); t.lost += Number(a.lost);
    for (const k of ['own', 'borrowed', 'lent', 'idle']) t[k] += Number(q[k] || 0);
    totals.set(l.group[1], t);
  }
  const hours = (x) => figure(x / unit);
  const rows = teamList.map((t) => {
    const x = totals.get(t);
    return h('tr', { id: `usage-row-${t}` }, h('td', {}, t), num(hours(x.used)), num(hours(x.own)),
      num(hours(x.borrowed)), num(hours(x.lent)), num(hours(x.idle)), num(hours(x.lost)));
  });
  const what = r === 'cpu' ? 'vCPU-hours' : `${LABEL[r]}-hours`.replace('GPUs', 'GPU');
  const lend = report.lending.filter((l) => l.resource === r).map((l) => h('tr', {},
    h('td', {}, l.borrower), h('td', {}, l.lender), h('td', {}, l.instance_type), num(hours(Number(l.amount)))));
  return h('div', {}, h('h1', {}, `Usage, the last ${days} days`),
    h('h2', {}, `${what} used per day`), dayChart(dayList, teamList, lines, unit),
    h('h2', {}, `${what} by team`),
    table(['Team', 'Used#', 'On own quota#', 'Borrowed#', 'Lent#', 'Idle quota#', 'Lost to preemption#'], rows, { id: 'usage' }),
    lend.length ? [h('h2', {}, 'Who lent to whom'), table(['Borrower', 'Lender', 'Instance type', `${what}#`], lend)] : null);
}

function dayChart(dayList, teamList, lines, unit) {
  const W = 720, H = 180, left = 44;
  const s = svg('svg', { width: W, height: H + 34, id: 'usage-chart' });
  if (!dayList.length) {
    s.append(svg('text', { x: 4, y: 14 }, 'no usage recorded in the period'));
    return h('div', {}, s);
  }
  const per = new Map();
  for (const l of lines) per.set(`${l.group[0]}|${l.group[1]}`, Number(l.amounts.used) / unit);
  const dayTotal = dayList.map((d) => teamList.reduce((a, t) => a + (per.get(`${d}|${t}`) || 0), 0));
  const max = Math.max(1e-9, ...dayTotal);
  const bw = Math.min(40, (W - left) / dayList.length - 6);
  s.append(svg('text', { x: 0, y: 12 }, figure(max)));
  s.append(svg('text', { x: 0, y: H }, '0'));
  dayList.forEach((d, i) => {
    let y = H;
    const x = left + i * ((W - left) / dayList.length);
    teamList.forEach((t, j) => {
      const v = per.get(`${d}|${t}`) || 0;
      const hgt = (v / max) * (H - 10);
      y -= hgt;
      s.append(svg('rect', { x, y, width: bw, height: hgt, fill: TEAM_COLOURS[j % TEAM_COLOURS.length] },
        svg('title', {}, `${t} ${d}: ${figure(v)}`)));
    });
    s.append(svg('text', { x, y: H + 14 }, d.slice(5)));
  });
  const legend = h('div', { class: 'legend' }, teamList.map((t, j) => {
    return h('span', {}, swatch(TEAM_COLOURS[j % TEAM_COLOURS.length]), t);
  }));
  return h('div', {}, s, legend);
}

// ------------------------------------------------------------------------------- frame

const PAGES = { cluster, teams, queue, workload, nodes, usage };

async function render() {
  clearTimeout(timer);
  const g = ++generation;
  const [, page = 'cluster', ...args] = (location.hash || '#/cluster').split('/');
  for (const a of document.querySelectorAll('nav a')) {
    a.classList.toggle('active', a.id === `nav-${page === 'workload' ? 'queue' : page}`);
  }
  try {
    if (!me) {
      me = await get('whoami');
      $('who').textContent = me.identity;
    }
    const view = await (PAGES[page] || cluster)(...args.map(decodeURIComponent));
    if (g !== generation) return;
    const y = window.scrollY;
    $('main').replaceChildren(view);
    window.scrollTo(0, y);
    $('updated').textContent = `Updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.loaded = String(g);
  } catch (e) {
    if (g !== generation) return;
    const text = e.status === 401
      ? `Not signed in: run \`allot dashboard\` and open the link it prints. (${e.message})`
      : e.message;
    $('main').replaceChildren(h('div', { class: 'error', id: 'error' }, text));
    document.body.dataset.loaded = String(g);
    if (e.status === 401) return;
  }
  timer = setTimeout(render, REFRESH_MS);
}

window.addEventListener('hashchange', render);
window.addEventListener('DOMContentLoaded', render);
