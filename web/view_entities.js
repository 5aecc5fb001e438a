// view_entities.js - the "Top entities" view: the hosts, deployments,
// containers, executables, threads, scripts, namespaces, pods, processes
// and shared objects that use the most CPU in the page's range and query
// (the top_entities API), one tab per kind; and an entity's page (URL
// parameters entity + name): its cores over time (timeseries, drag to zoom)
// and where its time goes (its hosts, executables, shared objects ...).
// Every row leads to its flame graph, its top functions, a query filter
// and its own page.
//
// When the project has GPU time in the range, the list of every kind but
// shared objects gets a GPU column: each entity's share of all GPU time
// (event_kind cuda), beside its CPU numbers. With the Show switch on GPU
// time, the list itself is in GPU time, GPUs busy and GPU %.
//
// URL parameters: entity (the tab, default host), name (an entity's page),
// mode (relative | absolute CPU %), sort, match (the name filter).

import { apiJSON, emptyHTML, apiErrorHTML, messageHTML, escapeHTML, withFilter, sortableTable, fmtCores, fmtPct, fmtInt, fmtSamples, kindInfo, loadStylesheet, h as el } from './common.js';
import { timeChart } from './chart.js';
import { fmtMoney } from './view_recs.js';

// The kinds of entity: their tab, their attribute (null: not a resource
// attribute, so neither a query filter nor a page of its own) and, when
// none is in the range, why that may be.
const KINDS = [
	{ id: 'host', label: 'Hosts', one: 'host', attr: 'host.name' },
	{ id: 'deployment', label: 'Deployments', one: 'deployment', attr: 'k8s.deployment.name', why: 'Deployments come from Kubernetes attributes: ember-agent derives the deployment from the pod name of processes running in Kubernetes pods.' },
	{ id: 'container', label: 'Containers', one: 'container', attr: 'container.name', why: 'Container names come from the container runtime (a Docker, Podman or CRI-O socket) for processes that run in a container.' },
	{ id: 'executable', label: 'Executables', one: 'executable', attr: 'process.executable.name' },
	{ id: 'thread', label: 'Threads', one: 'thread', attr: 'thread.name' },
	{ id: 'script', label: 'Scripts', one: 'script', attr: 'script.name', why: 'Script names are recorded for Python processes (the script, or the module of python -m).' },
	{ id: 'namespace', label: 'Namespaces', one: 'namespace', attr: 'k8s.namespace.name', why: 'Namespaces come from Kubernetes attributes, which ember-agent reads from the container runtime for processes running in Kubernetes pods.' },
	{ id: 'pod', label: 'Pods', one: 'pod', attr: 'k8s.pod.name', why: 'Pods come from Kubernetes attributes, which ember-agent records for processes running in Kubernetes pods.' },
	{ id: 'process', label: 'Processes', one: 'process', attr: 'process.pid' },
	{ id: 'shared_object', label: 'Shared objects', one: 'shared object', attr: null },
];
const KIND = Object.fromEntries(KINDS.map((k) => [k.id, k]));

// An entity's page: the breakdowns below its chart.
const RELATED = {
	executable: [['host', 'Hosts where it runs'], ['shared_object', 'Shared objects']],
	host: [['executable', 'Top executables'], ['thread', 'Top threads']],
	thread: [['executable', 'Executables'], ['host', 'Hosts']],
	process: [['executable', 'Executable'], ['thread', 'Threads']],
	default: [['executable', 'Top executables'], ['host', 'Hosts']],
};

const LIST_LIMIT = 1000;
const RELATED_LIMIT = 50;

let cur = null; // the latest ctx
let root = null;
let loadedKey = '';
let reload = false; // the Refresh button was pressed
let ctl = null; // AbortController of the requests in flight
let seq = 0;
let model = null; // what is on screen: { page, kind, answer, ... }
let chart = null;
let lastState = 'loading';
let styled = false;

function setState(name) {
	lastState = name;
	cur.setState(name);
}

function button(text, title, onClick, cls = '') {
	return el('button', { type: 'button', class: cls, title, text, onclick: onClick });
}

// --- the state in the URL ---------------------------------------------------

function params(ctx) {
	let entity = ctx.param('entity');
	if (!KIND[entity]) entity = 'host';
	let name = ctx.param('name');
	if (name !== null && !KIND[entity].attr) name = null;
	return {
		entity,
		name,
		mode: ctx.param('mode') === 'absolute' ? 'absolute' : 'relative',
		sort: ctx.param('sort') || '',
		match: ctx.param('match') || '',
	};
}

function keyOf(ctx, p) {
	const when = ctx.range === 'custom' ? [ctx.start_ts, ctx.end_ts] : ctx.range;
	return JSON.stringify([ctx.project, ctx.kind, when, (ctx.q || '').trim(), p.entity, p.mode, p.name]);
}

// The page's event kind (the Show switch): on-CPU samples and cores, or
// off-CPU time waited and threads waiting (common.js kindInfo).
function K() {
	return kindInfo(cur && cur.kind);
}

// A row's value: samples (on-CPU) or time waited (off-CPU).
function fmtValue(v) {
	return K().off ? K().fmtValue(v) : fmtSamples(v);
}

// --- entities and queries ---------------------------------------------------

// Samples without the attribute are grouped as "[no host]".
function isNone(kind, name) {
	return name === `[no ${kind}]`;
}

// The query narrowed to one entity (an absent attribute compares as "").
function narrowed(q, kind, name) {
	const k = KIND[kind];
	if (!k || !k.attr) return q || '';
	return withFilter(q, k.attr, isNone(kind, name) ? '' : name);
}

function filterWith(q) {
	const f = cur.filter();
	const query = (q || '').trim();
	return { ...f, query: query ? query : null };
}

function topEntities(kind, q, limit, signal) {
	return cur.api('top_entities', { filter: filterWith(q), entity: kind, limit, cpu_mode: K().off ? 'relative' : params(cur).mode }, signal);
}

// The GPU time of the same entities (the GPU column beside CPU numbers):
// null when the page already shows GPU time, for shared objects (GPU work
// has none), or when the range holds no GPU time or the query fails.
async function gpuEntities(kind, q, limit, signal) {
	if (K().gpu || kind === 'shared_object') return null;
	try {
		const a = await cur.api('top_entities', { filter: { ...filterWith(q), event_kind: 'cuda' }, entity: kind, limit, cpu_mode: 'relative' }, signal);
		return a && a.total > 0 ? a : null;
	} catch (e) {
		if (e.name === 'AbortError') throw e;
		return null;
	}
}

// Where a row leads: q is the query its numbers were read with.
function actionsFor(kind, name, q) {
	const k = KIND[kind];
	const out = [];
	if (k.attr) {
		const nq = narrowed(q, kind, name);
		out.push(button('Flamegraph', `Flame graph of ${name}`, () => cur.go('flamegraph', { q: nq })));
		out.push(button('Functions', `Top functions of ${name}`, () => cur.go('functions', { q: nq })));
		out.push(button('Filter', `Add ${k.attr} == "${isNone(kind, name) ? '' : name}" to the query`, () => cur.addFilter(k.attr, isNone(kind, name) ? '' : name)));
		if (kind === 'host' && !isNone(kind, name)) out.push(metricsButton(name, nq));
	} else {
		// A shared object is not a resource attribute: search its frames.
		out.push(button('Flamegraph search', `Flame graph with frames of ${name} highlighted (a shared object cannot be a query filter)`, () => cur.go('flamegraph', { q: q || '', s: name })));
	}
	const cell = el('span', { class: 'ent-actions' }, ...out);
	// Enter on a button must not also open the row.
	cell.addEventListener('keydown', (ev) => ev.stopPropagation());
	cell.addEventListener('click', (ev) => ev.stopPropagation());
	return cell;
}

// A host's metrics (CPU, memory, disk, GPU) in the Metrics view.
function metricsButton(name, q) {
	return button('Metrics', `Host metrics of ${name} (CPU, memory, disk, GPU)`, () => cur.go('metrics', { q }));
}

function openEntity(kind, name) {
	if (!KIND[kind].attr) return;
	cur.setParams({ entity: kind, name, sort: null, match: null }, true);
}

function nameCell(kind, name) {
	const span = el('span', { class: 'ent-name', text: name });
	if (isNone(kind, name)) {
		span.classList.add('ent-none');
		span.title = `samples without ${KIND[kind].attr || 'a known binary'}`;
	}
	return span;
}

function shareBar(frac) {
	const w = Math.max(0, Math.min(1, frac || 0));
	return el('span', { class: 'ent-share', 'aria-hidden': 'true' }, el('span', { class: 'bar', style: `width:${(w * 100).toFixed(1)}%` }));
}

// --- the list of a kind -----------------------------------------------------

function renderListFrame(p) {
	chart?.destroy();
	chart = null;
	const tabs = el('div', { class: 'ent-tabs', role: 'tablist', 'aria-label': 'Entity kind' });
	for (const k of KINDS) {
		const t = el('button', {
			type: 'button', role: 'tab', class: 'ent-tab', 'data-entity': k.id,
			'aria-selected': String(k.id === p.entity), tabindex: k.id === p.entity ? '0' : '-1', text: k.label,
			onclick: () => k.id !== params(cur).entity && cur.setParams({ entity: k.id, sort: null, match: null }, true),
		});
		tabs.append(t);
	}
	tabs.addEventListener('keydown', (ev) => {
		if (ev.key !== 'ArrowRight' && ev.key !== 'ArrowLeft') return;
		const all = [...tabs.children];
		const i = all.indexOf(document.activeElement);
		if (i < 0) return;
		ev.preventDefault();
		all[(i + (ev.key === 'ArrowRight' ? 1 : all.length - 1)) % all.length].focus();
	});
	const input = el('input', { type: 'search', id: 'ent-match', class: 'ent-match', placeholder: `filter ${KIND[p.entity].label.toLowerCase()} by name`, spellcheck: 'false', 'aria-label': 'Filter by name' });
	input.value = p.match;
	let timer = 0;
	input.addEventListener('input', () => {
		clearTimeout(timer);
		timer = setTimeout(() => cur.setParams({ match: input.value.trim() || null }, false), 60);
	});
	const toolbar = el('div', { class: 'ent-toolbar' },
		el('label', { class: 'ent-field', for: 'ent-match', text: 'Name' }), input,
		modeToggle(p.mode),
		el('span', { class: 'ent-count', 'aria-live': 'polite' }));
	const explain = el('p', { class: 'ent-explain' });
	const content = el('div', { class: 'ent-content' });
	content.innerHTML = messageHTML('info', `Loading ${escapeHTML(KIND[p.entity].label.toLowerCase())}\u2026`);
	root.replaceChildren(el('div', { class: 'view-body ent' }, tabs, toolbar, explain, content));
}

function modeToggle(mode) {
	// Off-CPU time has no absolute CPU %: its percentages are relative only.
	const group = el('div', { class: 'ent-mode', role: 'group', 'aria-label': 'CPU % mode', hidden: K().off }, el('span', { class: 'ent-mode-label', text: 'CPU %' }));
	for (const [m, text, title] of [
		['relative', 'Relative', 'CPU % = share of all CPU time profiled in the range'],
		['absolute', 'Absolute', 'CPU % = cores as a share of the logical CPUs, as htop shows'],
	]) {
		group.append(el('button', {
			type: 'button', class: 'ent-mode-btn', 'data-mode': m, 'aria-pressed': String(m === mode), title, text,
			onclick: () => m !== params(cur).mode && cur.setParams({ mode: m === 'relative' ? null : m }, true),
		}));
	}
	return group;
}

// One line on what the numbers mean.
function explainText(kind, mode, a) {
	const s = a.scope || {};
	if (K().gpu)
		return `GPU time: how long the GPUs ran CUDA kernels, copies, memsets and syncs. GPU %: each ${KIND[kind].one}'s share of all GPU time profiled in ${cur.rangeText}${(cur.q || '').trim() ? ', whatever the query' : ''}. GPUs busy: GPUs kept busy on average (GPU time \u00f7 ${fmtInt(Math.round(s.seconds || 0))} s with data).`;
	if (K().off)
		return `Off-CPU: time threads spent waiting (locks, sleeps, I/O). Wait %: each ${KIND[kind].one}'s share of all the time waited in ${cur.rangeText}${(cur.q || '').trim() ? ', whatever the query' : ''}. Threads waiting: threads blocked on average (time waited \u00f7 ${fmtInt(Math.round(s.seconds || 0))} s with data).`;
	const coresHow = s.sample_rate_hz ? `Cores: CPUs kept busy on average (samples \u00f7 ${s.sample_rate_hz} Hz \u00f7 ${fmtInt(Math.round(s.seconds))} s with data).` : '';
	if (mode === 'relative')
		return `CPU %: each ${KIND[kind].one}'s share of all CPU time profiled in ${cur.rangeText}${(cur.q || '').trim() ? ', whatever the query' : ''}. ${coresHow}`;
	if (kind === 'host') return `CPU %: each host's cores as a share of its own logical CPUs, as htop shows. ${coresHow}`;
	if (!s.host_cpus) return `CPU %: cores as a share of the hosts' logical CPUs \u2014 unknown here, as no host reported its CPU count. ${coresHow}`;
	return `CPU %: cores as a share of the ${fmtInt(s.host_cpus)} logical CPUs of the ${fmtInt(s.hosts)} host${s.hosts === 1 ? '' : 's'} that sent samples, as htop shows. ${coresHow}`;
}

async function loadList(p, key) {
	const my = ++seq;
	setState('loading');
	let a, g;
	try {
		[a, g] = await Promise.all([topEntities(p.entity, cur.q, LIST_LIMIT, ctl.signal), gpuEntities(p.entity, cur.q, LIST_LIMIT, ctl.signal)]);
	} catch (e) {
		if (e.name === 'AbortError' || my !== seq) return;
		model = null;
		loadedKey = key;
		root.querySelector('.ent-content').innerHTML = apiErrorHTML(e);
		root.querySelector('.ent-explain').textContent = '';
		setState('error');
		return;
	}
	if (my !== seq) return;
	loadedKey = key;
	model = { page: 'list', kind: p.entity, answer: a, gpu: g };
	root.querySelector('.ent-explain').textContent = explainText(p.entity, p.mode, a);
	renderList();
}

// The table of the loaded list, sorted and filtered as the URL says.
function renderList() {
	const p = params(cur);
	const content = root.querySelector('.ent-content');
	const focused = content.contains(document.activeElement) ? document.activeElement.dataset.key : null;
	const count = root.querySelector('.ent-count');
	const input = root.querySelector('#ent-match');
	if (input && document.activeElement !== input && input.value !== p.match) input.value = p.match;
	for (const b of root.querySelectorAll('.ent-mode-btn')) b.setAttribute('aria-pressed', String(b.dataset.mode === p.mode));
	const a = model.answer;
	const kind = model.kind;
	const k = KIND[kind];
	const rows = a.entities || [];
	if (!rows.length) {
		count.textContent = '';
		content.innerHTML = emptyHTML(cur.rangeText, cur.q, cur.kind);
		return setState('empty');
	}
	if (rows.every((r) => isNone(kind, r.name))) {
		count.textContent = '';
		const samples = rows.reduce((s, r) => s + r.total, 0);
		content.innerHTML = messageHTML('empty', `<p><strong>No ${escapeHTML(k.one)} in ${escapeHTML(cur.rangeText)}.</strong> None of the ${escapeHTML(fmtValue(samples))}${(cur.q || '').trim() ? ' that match the query' : ''} has <code>${escapeHTML(k.attr)}</code>.</p>${k.why ? `<p>${escapeHTML(k.why)}</p>` : ''}`);
		return setState('empty');
	}
	const needle = p.match.toLowerCase();
	const shown = needle ? rows.filter((r) => String(r.name).toLowerCase().includes(needle)) : rows.slice();
	const so = kind === 'shared_object';
	const hz = a.scope?.sample_rate_hz, secs = a.scope?.seconds;
	const off = K().off, gpu = K().gpu;
	const selfRate = (r) => (off ? (secs ? r.self / 1e9 / secs : null) : hz && secs ? r.self / hz / secs : null);
	const word = gpu ? 'GPUs' : off ? 'waiting' : 'cores', Word = K().Rate.replace(/^./, (c) => c.toUpperCase()), pctWord = K().pct;
	// The GPU share of each entity, from the GPU time answer (names absent
	// from it: no GPU time, or beyond its top).
	const g = model.gpu;
	const gpuOf = new Map(g ? g.entities.map((r) => [r.name, r]) : []);
	for (const r of rows) {
		const x = gpuOf.get(r.name);
		r.gpu_percent = x ? x.percent : g && g.entities_total <= g.entities.length ? 0 : null;
		r.gpu_total = x ? x.total : 0;
	}
	const maxCores = rows.reduce((m, r) => Math.max(m, r.cores || 0), 0);
	const columns = [
		{ key: 'name', label: kind === 'process' ? 'Process (PID)' : k.one[0].toUpperCase() + k.one.slice(1), render: (r) => nameCell(kind, r.name) },
	];
	if (kind === 'host' && !gpu) columns.push({ key: 'cpus', label: 'CPUs', num: true, render: (r) => (r.cpus ? fmtInt(r.cpus) : '\u2013') });
	if (so) columns.push({ key: 'self', label: `Self ${word}`, num: true, render: (r) => fmtCores(selfRate(r)) });
	columns.push({ key: 'cores', label: so ? `Total ${word}` : Word, num: true, render: (r) => fmtCores(r.cores) });
	if (off) columns.push({ key: 'total', label: gpu ? 'GPU time' : 'Waited', num: true, render: (r) => K().fmtValue(r.total).replace(/ waited$/, '') });
	if (so) columns.push({ key: 'self_percent', label: `Self ${pctWord}`, num: true, render: (r) => fmtPct(r.total ? (r.percent * r.self) / r.total : null) });
	columns.push({ key: 'percent', label: so ? `Total ${pctWord}` : pctWord, num: true, render: (r) => fmtPct(r.percent) });
	if (g) columns.push({ key: 'gpu_percent', label: 'GPU %', num: true, render: (r) => gpuCell(r) });
	columns.push({ key: 'share', label: '', render: (r) => shareBar(maxCores ? r.cores / maxCores : 0) });
	columns.push({ key: 'actions', label: '', render: (r) => actionsFor(kind, r.name, cur.q) });
	const sortKey = columns.some((c) => c.key === p.sort && c.label) ? p.sort : 'cores';
	sortRows(shown, sortKey);
	const table = sortableTable(columns, shown, {
		sortKey,
		onSort: (key) => key !== 'share' && key !== 'actions' && cur.setParams({ sort: key === 'cores' ? null : key }, false),
		onRow: (r) => (k.attr ? openEntity(kind, r.name) : cur.go('flamegraph', { q: cur.q, s: r.name })),
		rowTitle: k.attr ? 'Enter or click: this entity\u2019s page' : 'Enter or click: the flame graph with its frames highlighted',
	});
	table.classList.add('ent-table');
	for (const th of table.tHead.rows[0].cells) {
		if (!th.textContent) {
			th.removeAttribute('role');
			th.removeAttribute('tabindex');
			th.removeAttribute('aria-sort');
		}
		if (th.dataset.key === 'percent' || th.dataset.key === 'self_percent') th.title = explainText(kind, p.mode, a);
		if (th.dataset.key === 'gpu_percent') th.title = `Each ${k.one}'s share of all GPU time (CUDA kernels, copies, memsets, syncs) in ${cur.rangeText}; hover a cell for its GPU time.`;
	}
	const more = a.entities_total > rows.length ? ` (the top ${fmtInt(rows.length)} of ${fmtInt(a.entities_total)})` : '';
	count.textContent = needle
		? `${fmtInt(shown.length)} of ${fmtInt(rows.length)} ${k.label.toLowerCase()} match${more}`
		: `${fmtInt(a.entities_total)} ${a.entities_total === 1 ? k.one : k.label.toLowerCase()}${more}`;
	if (!shown.length) {
		content.replaceChildren(el('div', { class: 'panel ent-panel' }, table));
		content.insertAdjacentHTML('beforeend', messageHTML('info', `No ${escapeHTML(k.one)} name contains \u201c${escapeHTML(p.match)}\u201d.`));
	} else content.replaceChildren(el('div', { class: 'panel ent-panel' }, table));
	if (focused) table.querySelector(`th[data-key="${focused}"]`)?.focus();
	setState('ready');
}

// A row's share of all GPU time; hover: its GPU time.
function gpuCell(r) {
	const s = document.createElement('span');
	s.textContent = fmtPct(r.gpu_percent);
	s.title = r.gpu_percent === null ? 'not among the entities with the most GPU time' : `${kindInfo('cuda').fmtValue(r.gpu_total)} of GPU time`;
	return s;
}

function sortRows(rows, key) {
	if (key === 'name') rows.sort((x, y) => String(x.name).localeCompare(String(y.name), undefined, { numeric: true }));
	else {
		const v = (r) => (key === 'self_percent' ? (r.total ? r.self / r.total : 0) * (r.percent || 0) : Number(r[key]) || 0);
		rows.sort((x, y) => v(y) - v(x) || (y.total || 0) - (x.total || 0));
	}
}

// --- an entity's page -------------------------------------------------------

function renderPageFrame(p) {
	chart?.destroy();
	chart = null;
	const k = KIND[p.entity];
	const back = button('\u2190 Back to top entities', `All ${k.label.toLowerCase()}`, () => cur.setParams({ name: null }, true), 'ent-back');
	const head = el('div', { class: 'ent-page-head' },
		back,
		el('div', { class: 'ent-title' },
			el('span', { class: 'ent-kind', text: k.one }),
			el('h2', { class: 'ent-title-name', text: p.name })),
		el('dl', { class: 'ent-stats' }),
		el('span', { class: 'ent-page-actions' }),
		modeToggle(p.mode));
	const chartPanel = el('section', { class: 'panel ent-chart-panel' },
		el('h2', { text: K().gpu ? 'GPU time over time (GPUs busy)' : K().off ? 'Time waited over time (threads waiting)' : 'CPU usage over time (cores)' }),
		el('div', { class: 'ent-chart' }),
		el('p', { class: 'ent-hint', text: 'Drag across the chart to zoom into that time range.' }));
	const related = el('div', { class: 'ent-related' });
	const body = el('div', { class: 'view-body ent ent-page' }, head, el('p', { class: 'ent-explain' }), chartPanel, related);
	body.querySelector('.ent-chart').innerHTML = messageHTML('info', 'Loading\u2026');
	root.replaceChildren(body);
	document.title = `${p.name} \u00b7 ${k.one} \u00b7 ember`;
}

async function loadPage(p, key) {
	const my = ++seq;
	setState('loading');
	const q = narrowed(cur.q, p.entity, p.name);
	const signal = ctl.signal;
	const rel = RELATED[p.entity] || RELATED.default;
	const head = topEntities(p.entity, q, 5, signal);
	const series = cur.api('timeseries', { filter: filterWith(q), num_buckets: 60 }, signal);
	const related = rel.map(([kind]) => topEntities(kind, q, RELATED_LIMIT, signal));
	let a, ts;
	try {
		[a, ts] = await Promise.all([head, series]);
	} catch (e) {
		related.forEach((r) => r.catch(() => {}));
		if (e.name === 'AbortError' || my !== seq) return;
		loadedKey = key;
		model = null;
		root.querySelector('.ent-chart-panel').hidden = true;
		root.querySelector('.ent-related').innerHTML = apiErrorHTML(e);
		setState('error');
		return;
	}
	if (my !== seq) return;
	loadedKey = key;
	const row = (a.entities || []).find((r) => r.name === p.name) || (a.entities || [])[0];
	model = { page: 'entity', kind: p.entity, answer: a };
	if (!row) {
		root.querySelector('.ent-chart-panel').hidden = true;
		root.querySelector('.ent-related').innerHTML = emptyHTML(cur.rangeText, q, cur.kind);
		related.forEach((r) => r.catch(() => {}));
		return setState('empty');
	}
	renderStats(p, row, a);
	costStats(p, row, my);
	root.querySelector('.ent-explain').textContent = explainText(p.entity, p.mode, a);
	renderChart(p, ts);
	const box = root.querySelector('.ent-related');
	const panels = rel.map(([kind, title]) => {
		const panel = el('section', { class: 'panel ent-panel', 'data-related': kind }, el('h2', { text: title }));
		panel.insertAdjacentHTML('beforeend', messageHTML('info', 'Loading\u2026'));
		box.append(panel);
		return panel;
	});
	const results = await Promise.allSettled(related);
	if (my !== seq) return;
	results.forEach((r, i) => {
		const [kind, title] = rel[i];
		const panel = panels[i];
		panel.replaceChildren(el('h2', { text: title }));
		if (r.status === 'rejected') {
			if (r.reason?.name === 'AbortError') return;
			panel.insertAdjacentHTML('beforeend', apiErrorHTML(r.reason));
			return;
		}
		renderRelated(panel, kind, r.value, q, row.total);
	});
	setState('ready');
}

function renderStats(p, row, a) {
	const k = KIND[p.entity];
	const stats = root.querySelector('.ent-stats');
	const item = (dt, dd, title) => el('div', { title }, el('dt', { text: dt }), el('dd', { text: dd }));
	const off = K().off;
	const items = K().gpu
		? [item('GPUs busy', fmtCores(row.cores), 'GPUs kept busy on average over the range'),
			item('GPU %', fmtPct(row.percent), explainText(p.entity, p.mode, a))]
		: off
		? [item('Threads waiting', fmtCores(row.cores), 'threads blocked on average over the range'),
			item('Wait %', fmtPct(row.percent), explainText(p.entity, p.mode, a))]
		: [item('Cores', fmtCores(row.cores), 'CPUs kept busy on average over the range'),
			item('CPU %', fmtPct(row.percent), explainText(p.entity, p.mode, a))];
	if (row.cpus) items.push(item('CPUs', fmtInt(row.cpus), 'logical CPUs of the host'));
	if (off) items.push(item(K().gpu ? 'GPU time' : 'Waited', K().fmtValue(row.total).replace(/ waited$/, ''), `${K().fmtValue(row.total)} in ${cur.rangeText}`));
	else items.push(item('Samples', fmtInt(row.total), `${fmtSamples(row.total)} in ${cur.rangeText}`));
	stats.replaceChildren(...items);
	const filterValue = isNone(p.entity, p.name) ? '' : p.name;
	const q = narrowed(cur.q, p.entity, p.name);
	root.querySelector('.ent-page-actions').replaceChildren(
		button('Flamegraph', `Flame graph of ${p.name}`, () => cur.go('flamegraph', { q })),
		button('Top functions', `Top functions of ${p.name}`, () => cur.go('functions', { q })),
		button('Add as filter', `Add ${k.attr} == "${filterValue}" to the query`, () => cur.addFilter(k.attr, filterValue)),
		...(p.entity === 'host' && filterValue ? [metricsButton(p.name, q)] : []),
	);
}

// Cost on an entity's page: what its usage costs a year at this rate
// (the recommendations' prices: Settings), and the active recommendations
// whose affected entities name it, with the savings they estimate.
async function costStats(p, row, my) {
	const off = K().off, gpu = K().gpu;
	let d;
	try {
		d = await apiJSON('GET', `/public/api/v1/project/${encodeURIComponent(cur.project)}/recommendations?kind=all`, undefined, ctl.signal);
	} catch {
		return; // the page stands without them
	}
	if (my !== seq) return;
	const stats = root.querySelector('.ent-stats');
	const item = (dt, dd, title, extra) => el('div', { title, class: extra }, el('dt', { text: dt }), el('dd', { text: dd }));
	const s = d.settings || {};
	if (!off && Number.isFinite(s.cost_per_core_hour)) {
		stats.append(item('Cost at this rate', `${fmtMoney(row.cores * 8766 * s.cost_per_core_hour)}/yr`, `${fmtCores(row.cores)} cores for a year at ${s.cost_per_core_hour} per core-hour (Settings)`, 'ent-cost'));
	} else if (gpu && Number.isFinite(s.cost_per_gpu_hour)) {
		stats.append(item('Cost at this rate', `${fmtMoney(row.cores * 8766 * s.cost_per_gpu_hour)}/yr`, `${fmtCores(row.cores)} GPUs busy for a year at ${s.cost_per_gpu_hour} per GPU-hour (Settings)`, 'ent-cost'));
	}
	const recs = d.recommendations.filter((r) => r.state !== 'dismissed' && r.entities.some((e) => e.type === p.entity && e.value === p.name));
	if (!recs.length) return;
	const saved = recs.reduce((t, r) => t + (r.savings.annual_cost || 0), 0);
	const box = item('Recommendations', `${recs.length} · save ${fmtMoney(saved)}/yr`, recs.map((r) => r.title).join('\n'), 'ent-recs');
	box.querySelector('dd').append(' ', button('Open', 'The recommendations of this entity', () => cur.go('recs', { rec: recs[0].id }), 'ent-recs-open'));
	stats.append(box);
}

function renderChart(p, ts) {
	const box = root.querySelector('.ent-chart');
	const s = (ts.series || [])[0];
	if (!s) {
		box.innerHTML = messageHTML('info', K().gpu ? 'No GPU time over time.' : K().off ? 'No off-CPU samples over time.' : 'No samples over time.');
		return;
	}
	chart = timeChart(box, {
		start_ts: ts.start_ts,
		bucket_ms: ts.bucket_ms,
		series: [{ name: p.name, values: s.values }],
		unit: ts.unit === 'threads' ? 'threads waiting' : ts.unit || 'cores',
		height: 200,
		format: (v) => fmtCores(v),
		onZoom: (a, b) => cur.setTimeRange(a, b),
	});
	window.emberEntityChart = chart; // for the browser tests (clientXOf)
}

// A breakdown of the entity: q is the query narrowed to it, whole its samples.
function renderRelated(panel, kind, a, q, whole) {
	const k = KIND[kind];
	const rows = (a.entities || []).slice();
	if (!rows.length) {
		panel.insertAdjacentHTML('beforeend', messageHTML('info', `No ${escapeHTML(k.one)} in this range.`));
		return;
	}
	const so = kind === 'shared_object';
	const max = rows.reduce((m, r) => Math.max(m, r.total), 0);
	const columns = [{ key: 'name', label: k.one[0].toUpperCase() + k.one.slice(1), render: (r) => nameCell(kind, r.name) }];
	if (kind === 'host' && !K().gpu) columns.push({ key: 'cpus', label: 'CPUs', num: true, render: (r) => (r.cpus ? fmtInt(r.cpus) : '\u2013') });
	if (so) columns.push({ key: 'self', label: 'Self', num: true, render: (r) => fmtPct(whole ? (100 * r.self) / whole : null) });
	columns.push({ key: 'cores', label: K().gpu ? 'GPUs busy' : K().off ? 'Threads waiting' : 'Cores', num: true, render: (r) => fmtCores(r.cores) });
	columns.push({ key: 'total', label: so ? 'Total' : 'Share', num: true, render: (r) => fmtPct(whole ? (100 * r.total) / whole : null) });
	columns.push({ key: 'bar', label: '', render: (r) => shareBar(max ? r.total / max : 0) });
	columns.push({ key: 'actions', label: '', render: (r) => actionsFor(kind, r.name, q) });
	let sortKey = 'total';
	const draw = () => {
		sortRows(rows, sortKey === 'cores' ? 'total' : sortKey);
		const table = sortableTable(columns, rows, {
			sortKey,
			onSort: (key) => {
				if (key === 'bar' || key === 'actions') return;
				sortKey = key;
				draw();
				panel.querySelector(`th[data-key="${key}"]`)?.focus();
			},
			onRow: (r) => (k.attr ? openEntity(kind, r.name) : cur.go('flamegraph', { q, s: r.name })),
			rowTitle: k.attr ? 'Enter or click: this entity\u2019s page' : 'Enter or click: the flame graph with its frames highlighted',
		});
		table.classList.add('ent-table');
		for (const th of table.tHead.rows[0].cells)
			if (!th.textContent) {
				th.removeAttribute('role');
				th.removeAttribute('tabindex');
				th.removeAttribute('aria-sort');
			}
		const old = panel.querySelector('table');
		if (old) old.replaceWith(table);
		else panel.append(table);
	};
	draw();
	const what = K().gpu ? 'GPU time' : K().off ? 'time waited' : 'samples';
	const note = so
		? `Share of this ${KIND[model.kind].one}'s ${what}: self (in the object's own code) and total (with what it calls).`
		: `Share: of this ${KIND[model.kind].one}'s ${what}.`;
	panel.append(el('p', { class: 'ent-note', text: a.entities_total > rows.length ? `${note} The top ${fmtInt(rows.length)} of ${fmtInt(a.entities_total)}.` : note }));
}

// --- the view ---------------------------------------------------------------

function onSubmit(ev) {
	if (ev.target && ev.target.id === 'controls') reload = true;
}

export default {
	id: 'entities',
	title: 'Top entities',
	show(r, ctx) {
		cur = ctx;
		root = r;
		if (!styled) {
			styled = true;
			loadStylesheet('view_entities.css');
			// Refresh (the top bar's form) fetches again even when nothing changed;
			// the capture phase runs before the page's own handler.
			document.addEventListener('submit', onSubmit, true);
		}
		const p = params(ctx);
		const key = keyOf(ctx, p);
		const page = p.name !== null ? 'entity' : 'list';
		if (key === loadedKey && !reload && root.firstChild && (!model || model.page === page)) {
			// Only the sort or the name filter changed (or nothing).
			if (model && page === 'list') renderList();
			else setState(lastState);
			return;
		}
		reload = false;
		ctl?.abort();
		ctl = new AbortController();
		loadedKey = '';
		if (page === 'entity') {
			renderPageFrame(p);
			loadPage(p, key);
		} else {
			renderListFrame(p);
			document.title = 'Top entities \u00b7 ember';
			loadList(p, key);
		}
	},
	hide() {
		ctl?.abort();
		ctl = null;
		seq++;
		loadedKey = '';
		reload = false;
		chart?.destroy();
		chart = null;
	},
};
