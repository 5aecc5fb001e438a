// app.js - ember's page: the views and their navigation, the controls of
// the top bar, the whole view state in the URL, and the flame graph view
// (its API call, tooltip and keyboard, around the renderer in
// flamegraph.js). The other views are modules (view_*.js, see common.js
// for their contract), loaded when first shown.

import { FlameGraph, FRAME_TYPES, ROW_HEIGHT, baseColor, typeLabel } from './flamegraph.js';
import { DEFAULT_PROJECT, RANGES, api, request, escapeHTML, filterFor, withFilter, apiErrorHTML, rangeText, sortableTable, fmtPct, gpuHowHTML } from './common.js';
import { transformTree, needsTransform } from './fgtransform.js';
import { attachQueryBox } from './querybox.js';
import { startSession } from './session.js';
import { attachDownload } from './download.js';

// Every view: its URL name and title. The flame graph is the default.
const VIEWS = {
	iq: 'Efficiency IQ',
	flamegraph: 'Flamegraph',
	functions: 'Top functions',
	entities: 'Top entities',
	diff: 'Diff',
	metrics: 'Metrics',
	topology: 'GPU topology',
	recs: 'Recommendations',
	assistant: 'AI assistant',
	settings: 'Settings',
	// Reached from the user menu (session.js), not the views' tabs.
	account: 'Account',
};
// URL parameters of the page itself; any other belongs to the active view.
const PAGE_PARAMS = new Set(['view', 'project', 'range', 'from', 'to', 'group', 'kind', 'q', 's', 'sf', 'f', 'hide', 'o']);
// What the flamegraph weighs: CPU samples, time spent waiting (off-CPU,
// nanoseconds), or GPU time (cuda: nanoseconds of GPU work, under the CPU
// stack that launched it).
const KINDS = { on_cpu: 'On-CPU', off_cpu: 'Off-CPU', cuda: 'GPU time' };
// Display settings (URL parameter o, the ones that differ from the
// defaults): unsym/rec = do not collapse unsymbolized runs / recursion,
// raw = names as compiled, addr = addresses of unsymbolized frames,
// verbose = parameter lists.
const OPTIONS = ['unsym', 'rec', 'raw', 'addr', 'verbose'];
const GROUPS = {
	none: [],
	executable: ['executable'],
	thread: ['thread'],
	host: ['host'],
	process: ['process'],
	script: ['script'],
	container: ['container'],
	deployment: ['deployment'],
	namespace: ['namespace'],
	pod: ['pod'],
};
// The attribute a group frame of each kind stands for (Add as filter).
const GROUP_ATTRIBUTES = {
	executable: 'process.executable.name',
	thread: 'thread.name',
	host: 'host.name',
	process: 'process.pid',
	script: 'script.name',
	container: 'container.name',
	deployment: 'k8s.deployment.name',
	namespace: 'k8s.namespace.name',
	pod: 'k8s.pod.name',
};
// The views the Show switch (On-CPU / Off-CPU / GPU time, `kind`) applies to.
const KIND_VIEWS = new Set(['flamegraph', 'functions', 'entities', 'diff']);
const DEFAULTS = { view: 'flamegraph', project: DEFAULT_PROJECT, range: '15m', from: 0, to: 0, group: 'executable', kind: 'on_cpu', q: '', s: '', sf: false, f: [], hide: [], o: [], extra: [] };
// The time window of a state: its length in seconds and its end (Unix ms).
function windowOf(s) {
	if (s.range === 'custom') return { seconds: (s.to - s.from) / 1000, end: s.to };
	return { seconds: RANGES[s.range][0], end: Date.now() };
}

const ALWAYS_IN_LEGEND = ['native', 'kernel', 'synthetic', 'error'];

const $ = (id) => document.getElementById(id);
const el = {
	controls: $('controls'),
	nav: document.querySelector('.views-nav'),
	groupField: $('group-field'),
	flamegraphView: $('view-flamegraph'),
	projectField: $('project-field'),
	project: $('project'),
	range: $('range'),
	group: $('group'),
	kind: $('kind'),
	kindField: $('kind-field'),
	query: $('query'),
	search: $('search'),
	matchInfo: $('match-info'),
	searchFilter: $('search-filter'),
	resetZoom: $('reset-zoom'),
	summary: $('summary'),
	legend: $('legend'),
	message: $('message'),
	graph: $('graph'),
	canvas: $('flamegraph'),
	minimap: $('minimap'),
	settings: $('settings'),
	settingsButton: $('settings-button'),
	helpButton: $('help-button'),
	help: $('help'),
	menu: $('context-menu'),
	hoverBox: $('hover-box'),
	hint: $('hint'),
	tooltip: $('tooltip'),
};

const fg = new FlameGraph(el.canvas);
let fontSet = false;

let state = readURL();
let data = null; // the last good answer
let loadedKey = ''; // what `data` answers (project, range, group, query)
let seconds = windowOf(state).seconds; // length of the range `data` covers
let inflight = null; // AbortController of the running request
let requestSeq = 0;
let lastMaxNodes = 0; // max_nodes of the last flamegraph request
let lastRequest = null; // the last flamegraph request body: what Download sends
// Frames still unnamed while their symbols are on their way
// (symbols_pending): the same query is asked again after a few seconds,
// up to PENDING_RETRIES times for one query.
const PENDING_RETRY_MS = 5000;
const PENDING_RETRIES = 6;
let pendingTimer = 0;
let pendingKey = '';
let pendingTries = 0;
let selected = -1; // frame chosen with the keyboard
let hovered = -1;

const nf = new Intl.NumberFormat('en-US');

// --- the view state in the URL --------------------------------------------

function readURL() {
	const p = new URLSearchParams(location.search);
	const s = { ...DEFAULTS };
	const view = p.get('view');
	if (view && VIEWS[view]) s.view = view;
	s.extra = [...p.entries()].filter(([k]) => !PAGE_PARAMS.has(k));
	const range = p.get('range');
	if (range && RANGES[range]) s.range = range;
	const from = Number(p.get('from')), to = Number(p.get('to'));
	if (range === 'custom' && Number.isSafeInteger(from) && Number.isSafeInteger(to) && from >= 0 && to > from) {
		s.range = 'custom';
		s.from = from;
		s.to = to;
	}
	const group = p.get('group');
	if (group && GROUPS[group]) s.group = group;
	const kind = p.get('kind');
	if (kind && KINDS[kind]) s.kind = kind;
	const project = p.get('project');
	if (project) s.project = project;
	s.q = p.get('q') || '';
	s.s = p.get('s') || '';
	s.sf = p.get('sf') === '1';
	s.f = p.getAll('f');
	s.hide = (p.get('hide') || '').split(',').filter((t) => FRAME_TYPES[t] && t !== 'root');
	s.o = (p.get('o') || '').split(',').filter((o) => OPTIONS.includes(o));
	return s;
}

function urlOf(s) {
	const p = new URLSearchParams();
	if (s.view !== DEFAULTS.view) p.set('view', s.view);
	if (s.project !== DEFAULTS.project) p.set('project', s.project);
	if (s.range !== DEFAULTS.range) p.set('range', s.range);
	if (s.range === 'custom') {
		p.set('from', String(s.from));
		p.set('to', String(s.to));
	}
	if (s.group !== DEFAULTS.group) p.set('group', s.group);
	if (s.kind !== DEFAULTS.kind) p.set('kind', s.kind);
	if (s.q) p.set('q', s.q);
	if (s.s) p.set('s', s.s);
	if (s.sf) p.set('sf', '1');
	for (const name of s.f) p.append('f', name);
	if (s.hide.length) p.set('hide', s.hide.join(','));
	if (s.o.length) p.set('o', s.o.join(','));
	for (const [k, v] of s.extra) p.append(k, v);
	const qs = p.toString();
	return location.pathname + (qs ? '?' + qs : '');
}

// push: a step the back button should undo (zoom, new query); otherwise
// the current entry is replaced (typing in the search box).
function writeURL(push) {
	const url = urlOf(state);
	if (url === location.pathname + location.search) return;
	if (push) history.pushState(null, '', url);
	else history.replaceState(null, '', url);
}

function dataKey(s) {
	return JSON.stringify([s.project, s.range, s.from, s.to, s.group, s.kind, s.q.trim(), s.o.includes('raw'), s.o.includes('verbose'),
		s.sf ? s.s : '']);
}

function syncControls() {
	// The Account page has no time range, project or query.
	el.controls.hidden = state.view === 'account';
	el.groupField.hidden = state.view !== 'flamegraph';
	// The Show switch is the page's: the views that can show off-CPU time
	// (Efficiency IQ and Metrics are on-CPU and host metrics).
	el.kindField.hidden = !KIND_VIEWS.has(state.view);
	for (const a of el.nav.querySelectorAll('a')) {
		const v = a.dataset.view;
		a.href = urlOf({ ...state, view: v, extra: v === state.view ? state.extra : [], s: '', f: [] });
		if (v === state.view) a.setAttribute('aria-current', 'page');
		else a.removeAttribute('aria-current');
	}
	const custom = el.range.querySelector('option[value="custom"]');
	custom.textContent = state.range === 'custom' ? rangeText('custom', state.from, state.to) : 'Custom range\u2026';
	el.range.value = state.range;
	el.group.value = state.group;
	el.kind.value = state.kind;
	syncSettings();
	el.query.value = state.q;
	if (document.activeElement !== el.search) el.search.value = state.s;
	el.searchFilter.checked = state.sf;
	if (el.project.value !== state.project && [...el.project.options].some((o) => o.value === state.project))
		el.project.value = state.project;
}

// --- page states ------------------------------------------------------------

function setState(name) {
	// The sign-in page's state (session.js) stays until someone signs in.
	if (document.body.classList.contains('signed-out')) return;
	document.body.dataset.state = name;
}

function showMessage(kind, html) {
	el.message.className = 'message message-' + kind;
	el.message.innerHTML = html;
	el.message.hidden = false;
}

function expose() {
	const hasData = document.body.dataset.state === 'ready';
	window.emberFlamegraph = {
		get frames() {
			return hasData ? fg.drawnFrames() : [];
		},
		total: hasData ? fg.grandTotal : 0,
		sampleRateHz: data ? data.sample_rate_hz : 0,
		maxNodes: lastMaxNodes,
		symbolsPending: data ? data.symbols_pending || 0 : 0,
		pendingTries,
		nodesWritten: data ? data.nodes_written : 0,
		unit: data ? data.unit : '',
		kind: state.kind,
		seconds,
		focus: hasData ? fg.pathOf(fg.focus) : [],
		search: fg.searchTerm,
		matches: hasData ? fg.searchResult.count : 0,
		matchedTotal: hasData ? fg.searchResult.total : 0,
		matchedShare: hasData ? fg.searchResult.share : 0,
		renderMs: fg.lastRenderMs || 0,
		view: { x0: fg.viewX0, x1: fg.viewX1, scrollY: fg.scrollY, height: fg.viewHeight, content: fg.contentHeight },
		width: fg.width,
		truncated: fg.truncatedRows,
		graph: fg,
	};
}

// --- loading ----------------------------------------------------------------

// The node budget asked of the server: about as many frames as the canvas
// can show legibly at once (a frame narrower than 2 CSS px is a sliver;
// as many rows as the window is high), within [4096, 65536]. The server
// folds the smallest nodes beyond it into one "[other]" node per parent,
// so every total stays exact.
function nodeBudget(width, height) {
	const rows = Math.ceil(height / ROW_HEIGHT);
	return Math.max(4096, Math.min(65536, Math.ceil(width / 2) * rows));
}

function requestBody() {
	const w = windowOf(state);
	seconds = w.seconds;
	return {
		filter: filterFor(seconds, state.q, w.end, state.kind),
		num_samples: null,
		num_stat_buckets: null,
		synthetic_frames: GROUPS[state.group],
		raw_names: state.o.includes('raw'),
		verbose_names: state.o.includes('verbose'),
		search: state.sf && state.s ? serverPattern(state.s) : null,
		max_nodes: nodeBudget((el.graph && el.graph.clientWidth) || window.innerWidth || 1024,
			window.innerHeight || 768),
	};
}

async function load() {
	if (inflight) inflight.abort();
	const ctl = new AbortController();
	inflight = ctl;
	const seq = ++requestSeq;
	const key = dataKey(state);
	setState('loading');
	el.summary.textContent = 'Loading\u2026';
	if (el.graph.hidden) showMessage('info', 'Loading profile\u2026');
	else el.graph.classList.add('stale');
	hideHover();
	let res, body;
	const t0 = performance.now();
	const reqBody = requestBody();
	lastMaxNodes = reqBody.max_nodes;
	lastRequest = { project: state.project, body: reqBody };
	try {
		res = await request(`/public/api/v1/project/${encodeURIComponent(state.project)}/flamegraph/json`, {
			method: 'POST',
			body: reqBody,
			signal: ctl.signal,
		});
		body = await res.text();
	} catch (e) {
		if (e.name === 'AbortError' || seq !== requestSeq) return;
		inflight = null;
		return showError('Cannot reach ember-server', e.message || String(e));
	}
	if (seq !== requestSeq) return;
	inflight = null;
	let json = null;
	try {
		json = JSON.parse(body);
	} catch {
		json = null;
	}
	if (!res.ok) {
		const msg = json && json.error ? json.error : `HTTP ${res.status} ${res.statusText}`;
		return showError(res.status === 400 ? 'The query was rejected' : `The server answered ${res.status}`, msg);
	}
	if (!json || !json.root) return showError('Unexpected answer from the server', body.slice(0, 300));
	data = json;
	data.fetchMs = performance.now() - t0;
	loadedKey = key;
	shownKey = '';
	applyView();
	schedulePendingRefresh(key);
}

// While the answer says some frames' names are on their way, asks again
// in a few seconds (the same query: the view, zoom and search stay).
function schedulePendingRefresh(key) {
	clearTimeout(pendingTimer);
	pendingTimer = 0;
	if (key !== pendingKey) {
		pendingKey = key;
		pendingTries = 0;
	}
	if (!(data && data.symbols_pending > 0) || pendingTries >= PENDING_RETRIES) return;
	pendingTries++;
	pendingTimer = setTimeout(() => {
		pendingTimer = 0;
		if (loadedKey === key && !inflight && dataKey(state) === key) load();
	}, PENDING_RETRY_MS);
}

function showError(title, detail) {
	data = null;
	loadedKey = '';
	fg.setData({ total: 0, root: { name: 'root', frame_type: 'root', self: 0, total: 0, children: [] } });
	shownKey = '';
	el.graph.hidden = true;
	el.minimap.hidden = true;
	el.hint.hidden = true;
	el.graph.classList.remove('stale');
	el.summary.textContent = '';
	el.matchInfo.textContent = '';
	el.resetZoom.hidden = true;
	updateLegend();
	showMessage('error', `<strong>${escapeHTML(title)}.</strong> <span class="detail">${escapeHTML(detail)}</span>`);
	setState('error');
	expose();
}

function showEmpty() {
	el.graph.hidden = true;
	el.minimap.hidden = true;
	el.hint.hidden = true;
	el.graph.classList.remove('stale');
	el.resetZoom.hidden = true;
	el.matchInfo.textContent = '';
	el.summary.textContent = `0 samples in ${rangeText(state.range, state.from, state.to)}`;
	updateLegend();
	const host = location.host || '127.0.0.1:8080';
	const off = state.kind === 'off_cpu', gpu = state.kind === 'cuda';
	const q = state.q.trim();
	if (gpu) {
		const what = 'GPU time (CUDA kernels, copies and syncs)';
		const filter = q
			? `<p>No ${what} matches the query <code>${escapeHTML(q)}</code> in this time range. Clear the query or pick a longer time range.</p>`
			: `<p><strong>No ${what} in this time range.</strong> Pick a longer time range, or check that a CUDA program runs with ember's injection library.</p>`;
		showMessage('empty', `${filter}${gpuHowHTML(host)}`);
		setState('empty');
		expose();
		return;
	}
	const cmd = `sudo build/bin/ember-agent -collection-agent=${host} -disable-tls${off ? ' -enable-off-cpu' : ''}`;
	const what = off ? 'off-CPU samples (time threads spent waiting)' : 'samples';
	const filter = q
		? `<p>No ${what} match the query <code>${escapeHTML(q)}</code> in this time range. Clear the query or pick a longer time range.</p>`
		: `<p><strong>No ${what} in this time range.</strong> Pick a longer time range, or check that an agent is sending data.</p>`;
	showMessage('empty', `${filter}
		<p>Is ember-agent running${off ? ' with off-CPU profiling' : ''}? Start it with:</p>
		<pre><code>${escapeHTML(cmd)}</code></pre>`);
	setState('empty');
	expose();
}

// The display settings of the state, for fgtransform.js.
function displayOptions(s) {
	return {
		hide: new Set(s.hide),
		collapseRecursion: !s.o.includes('rec'),
		collapseUnsymbolized: !s.o.includes('unsym'),
		addresses: s.o.includes('addr'),
	};
}

let shownKey = ''; // the settings the graph's tree was made with

// Gives the renderer the loaded tree with the display settings applied.
function applySettings() {
	const key = JSON.stringify([state.hide, state.o]);
	if (key === shownKey) return;
	shownKey = key;
	const opts = displayOptions(state);
	const root = needsTransform(data.root, opts) ? transformTree(data.root, opts) : data.root;
	fg.setData({ ...data, root });
	fg.typesSeen = typesIn(data.root);
}

// Frame types present in the answer (the legend lists hidden ones too).
function typesIn(root) {
	const seen = new Set();
	const stack = [root];
	while (stack.length) {
		const n = stack.pop();
		if (n.frame_type) seen.add(n.frame_type);
		if (n.children) for (const c of n.children) stack.push(c);
	}
	return seen;
}

// Applies the focus and search of `state` to the loaded data, then draws.
function applyView() {
	if (!data) return;
	applySettings();
	if (!(fg.grandTotal > 0)) return showEmpty();
	el.message.hidden = true;
	el.graph.hidden = false;
	el.minimap.hidden = false;
	el.hint.hidden = false;
	el.graph.classList.remove('stale');
	const { index, complete } = fg.findPath(state.f);
	fg.setFocus(index);
	if (!complete) {
		// The link named a frame this data does not have: show its
		// deepest ancestor that exists, and say so in the URL.
		state.f = fg.pathOf(index);
		writeURL(false);
	}
	selected = -1;
	runSearch();
	updateSummary();
	updateLegend();
	draw();
}

function draw() {
	if (!data || el.graph.hidden) return;
	if (!fontSet) {
		fg.font = `12px ${getComputedStyle(document.body).fontFamily}`;
		fontSet = true;
	}
	const top = el.graph.getBoundingClientRect().top;
	const avail = Math.max(240, Math.floor(window.innerHeight - Math.max(top, 0) - 12));
	fg.render(el.graph.clientWidth, avail);
	drawMinimap();
	el.resetZoom.hidden = fg.focus === 0 && !fg.zoomed;
	const name = fg.focus ? String(fg.node(fg.focus).name) : '';
	document.title = name ? `${name} \u00b7 ember` : 'ember';
	if (selected >= 0) showSelection();
	setState('ready');
	expose();
}

// --- formatting -------------------------------------------------------------

function pct(part, whole) {
	if (!(whole > 0)) return '0%';
	const v = (100 * part) / whole;
	return (v >= 10 || v === 0 ? v.toFixed(1) : v >= 0.01 ? v.toFixed(2) : '<0.01') + '%';
}

// Off-CPU values are nanoseconds waited, GPU time nanoseconds of GPU
// work; on-CPU values are samples.
function waited() {
	return !!data && data.unit === 'nanoseconds';
}

// The loaded data is GPU time (the kind is part of loadedKey).
function gpuTime() {
	return waited() && state.kind === 'cuda';
}

// The average number of cores busy (on-CPU) or threads waiting (off-CPU)
// over the range, or null when unknown.
function cores(v) {
	let c;
	if (waited()) {
		if (!seconds) return null;
		c = v / 1e9 / seconds;
	} else {
		const hz = data && data.sample_rate_hz;
		if (!hz || !seconds) return null;
		c = v / hz / seconds;
	}
	if (c === 0) return '0';
	if (c < 0.001) return '<0.001';
	return c >= 100 ? c.toFixed(0) : String(Number(c.toPrecision(3)));
}

function durationText(ns) {
	if (ns === 0) return '0 s';
	const s = ns / 1e9;
	if (s >= 3600) return `${(s / 3600).toPrecision(3)} h`;
	if (s >= 60) return `${(s / 60).toPrecision(3)} min`;
	if (s >= 1) return `${s.toPrecision(3)} s`;
	if (s >= 1e-3) return `${(s * 1e3).toPrecision(3)} ms`;
	return `${(s * 1e6).toPrecision(3)} \u00b5s`;
}

function samplesText(n) {
	if (gpuTime()) return `${durationText(n)} of GPU time`;
	if (waited()) return `${durationText(n)} waited`;
	return `${nf.format(n)} sample${n === 1 ? '' : 's'}`;
}

// " cores", " threads waiting" or " GPUs busy", after a cores() figure.
function coresUnit() {
	if (gpuTime()) return ' GPUs busy';
	return waited() ? ' threads waiting' : ' cores';
}

function updateSummary() {
	const total = fg.grandTotal;
	const parts = [samplesText(total)];
	if (data.sample_rate_hz && !waited()) parts.push(`${data.sample_rate_hz} Hz`);
	const c = cores(total);
	if (c !== null) parts.push(`${c}${coresUnit()} avg over ${rangeText(state.range, state.from, state.to).replace(/^the last /, 'the ')}`);
	const pending = data.symbols_pending || 0;
	if (pending > 0)
		parts.push(`names of ${nf.format(pending)} frame${pending === 1 ? '' : 's'} on their way (symbols being uploaded or fetched): refreshing shortly`);
	el.summary.textContent = parts.join(' \u00b7 ');
	const qs = data.query_stats;
	el.summary.title = qs ? `server query: ${qs.time_ms} ms, ${qs.rows_matched} rows, ${data.distinct_stacks} stacks, ${data.nodes} nodes; fetched in ${Math.round(data.fetchMs)} ms` : '';
}

function updateLegend() {
	el.legend.hidden = !(data && data.total > 0);
	const types = ALWAYS_IN_LEGEND.slice();
	for (const t of Object.keys(FRAME_TYPES))
		if ((fg.typesSeen.has(t) || state.hide.includes(t)) && !types.includes(t) && t !== 'root') types.push(t);
	el.legend.replaceChildren(
		...types.map((t) => {
			const li = document.createElement('li');
			const sw = document.createElement('span');
			sw.className = 'swatch';
			sw.style.background = baseColor(t);
			sw.setAttribute('aria-hidden', 'true');
			li.append(sw, typeLabel(t));
			li.dataset.type = t;
			if (t !== 'synthetic') {
				// Synthetic frames are the group-by levels: hide them
				// with Group by: None.
				const off = state.hide.includes(t);
				li.className = 'toggle' + (off ? ' off' : '');
				li.tabIndex = 0;
				li.setAttribute('role', 'switch');
				li.setAttribute('aria-checked', String(!off));
				li.title = off ? `Show ${typeLabel(t)} frames` : `Hide ${typeLabel(t)} frames (their callees move up)`;
			}
			return li;
		})
	);
}

function toggleType(t) {
	state.hide = state.hide.includes(t) ? state.hide.filter((x) => x !== t) : [...state.hide, t];
	state.f = [];
	writeURL(true);
	applyView();
}

el.legend.addEventListener('click', (ev) => {
	const li = ev.target.closest('li.toggle');
	if (li) toggleType(li.dataset.type);
});
el.legend.addEventListener('keydown', (ev) => {
	const li = ev.target.closest('li.toggle');
	if (li && (ev.key === 'Enter' || ev.key === ' ')) {
		ev.preventDefault();
		toggleType(li.dataset.type);
	}
});

// --- search -----------------------------------------------------------------

function runSearch() {
	const term = state.s;
	el.search.classList.remove('invalid');
	if (!term) {
		fg.setSearch('');
		el.matchInfo.textContent = '';
		return;
	}
	try {
		const r = fg.setSearch(term);
		el.matchInfo.textContent = r.count
			? `${nf.format(r.count)} frame${r.count === 1 ? '' : 's'} match \u00b7 ${pct(r.total, fg.grandTotal)} of total`
			: 'no frame matches';
	} catch (e) {
		fg.setSearch('');
		el.search.classList.add('invalid');
		el.matchInfo.textContent = `invalid regular expression: ${e.message}`;
	}
}

let searchTimer = 0;
el.search.addEventListener('input', () => {
	clearTimeout(searchTimer);
	searchTimer = setTimeout(applySearch, 80);
});

function applySearch() {
	clearTimeout(searchTimer);
	state.s = el.search.value.trim();
	writeURL(false);
	if (state.sf) return load(); // the server filters: ask again
	if (!data || !(fg.grandTotal > 0)) return;
	runSearch();
	draw();
}

// The search box's term as the server's PCRE2 pattern: /re/ as written
// (an i flag becomes (?i)), text as a case-insensitive literal.
function serverPattern(term) {
	const m = /^\/(.+)\/([a-z]*)$/.exec(term);
	if (m) return (m[2].includes('i') ? '(?i)' : '') + m[1];
	return '(?i)' + term.replace(/[\\^$.*+?()[\]{}|]/g, '\\$&');
}

el.searchFilter.addEventListener('change', () => {
	state.sf = el.searchFilter.checked;
	state.s = el.search.value.trim();
	state.f = [];
	writeURL(true);
	if (state.s) load();
});

// --- zoom -------------------------------------------------------------------

function zoomTo(i) {
	if (!data) return;
	if (i < 0) i = 0;
	if (i === fg.focus) return;
	fg.setFocus(i);
	state.f = fg.pathOf(i);
	writeURL(true);
	hideHover();
	draw();
}

el.resetZoom.addEventListener('click', () => resetZoom());
attachDownload($('download'), () => lastRequest || { project: state.project, body: requestBody() },
	text => { el.summary.textContent = text; });

// --- tooltip and hover ------------------------------------------------------

function tooltipHTML(i) {
	const n = fg.node(i);
	const total = fg.total[i], self = fg.self[i], all = fg.grandTotal;
	const rows = [];
	const row = (k, v) => rows.push(`<dt>${k}</dt><dd>${v}</dd>`);
	row('type', escapeHTML(i === 0 ? 'root' : typeLabel(fg.typeName(i))));
	if (n.binary) row('binary', escapeHTML(n.binary));
	if (n.address) row('address', escapeHTML(n.address));
	if (n.file) row('source', escapeHTML(n.file + (n.line ? ':' + n.line : '')));
	const line = (v) => {
		const c = cores(v);
		return `${escapeHTML(samplesText(v))} \u00b7 ${pct(v, all)}${c !== null ? ` \u00b7 ${c}${coresUnit()}` : ''}`;
	};
	if (gpuTime()) {
		// The reference's GPU Time: total is the GPU time of the work this
		// frame launched (CPU frames) or ran (CUDA frames); self is zero
		// on CPU frames, which never run on the GPU.
		const gline = (v) => `${escapeHTML(durationText(v))} \u00b7 ${pct(v, all)}`;
		row('GPU Time (Total)', gline(total));
		row('GPU Time (Self)', gline(self));
		const c = cores(total);
		if (c !== null) row('GPUs busy', `${c} on average (total)`);
	} else {
		row('total', line(total));
		row('self', line(self));
	}
	if (fg.focus !== 0 && fg.isAncestorOrSelf(fg.focus, i) && i !== fg.focus)
		row('of zoom', pct(total, fg.total[fg.focus]));
	const name = i === 0 ? 'all samples' : String(n.name);
	return `<div class="tt-name">${escapeHTML(name)}</div><dl>${rows.join('')}</dl>`;
}

function showHoverBox(i) {
	const b = fg.box(i);
	if (!b) return hideHover();
	const s = el.hoverBox.style;
	s.left = b.x + 'px';
	s.top = b.y + 'px';
	s.width = Math.max(b.width - 1, 1) + 'px';
	s.height = b.height - 1 + 'px';
	el.hoverBox.hidden = false;
	return b;
}

function placeTooltip(i, clientX, clientY) {
	const tt = el.tooltip;
	if (tt.dataset.index !== String(i)) {
		tt.innerHTML = tooltipHTML(i);
		tt.dataset.index = String(i);
	}
	tt.hidden = false;
	const pad = 14;
	const w = tt.offsetWidth, h = tt.offsetHeight;
	let x = clientX + pad, y = clientY + pad;
	if (x + w > window.innerWidth - 4) x = Math.max(4, clientX - w - pad);
	if (y + h > window.innerHeight - 4) y = Math.max(4, clientY - h - pad);
	tt.style.left = x + 'px';
	tt.style.top = y + 'px';
}

function hideHover() {
	hovered = -1;
	el.hoverBox.hidden = true;
	el.tooltip.hidden = true;
	el.tooltip.dataset.index = '';
	el.canvas.style.cursor = '';
}

function canvasPoint(ev) {
	const r = el.canvas.getBoundingClientRect();
	return [ev.clientX - r.left, ev.clientY - r.top];
}

el.canvas.addEventListener('mousemove', (ev) => {
	const [x, y] = canvasPoint(ev);
	const i = fg.hit(x, y);
	if (i < 0) return hideHover();
	hovered = i;
	showHoverBox(i);
	placeTooltip(i, ev.clientX, ev.clientY);
	el.canvas.style.cursor = 'pointer';
});
el.canvas.addEventListener('mouseleave', hideHover);
el.canvas.addEventListener('click', (ev) => {
	if (dragged) return; // the end of a pan, not a click
	const [x, y] = canvasPoint(ev);
	const i = fg.hit(x, y);
	selected = -1;
	if (i < 0) return resetZoom(); // empty space
	zoomTo(i === fg.focus && i !== 0 ? fg.parent[i] : i);
});

function resetZoom() {
	if (fg.focus !== 0) return zoomTo(0);
	fg.resetView();
	draw();
}

// --- pan and zoom: wheel, drag, minimap -------------------------------------

// Redraws at most once per animation frame while panning.
let panFrame = 0;
function redrawSoon() {
	if (panFrame) return;
	panFrame = requestAnimationFrame(() => {
		panFrame = 0;
		draw();
	});
}

el.canvas.addEventListener(
	'wheel',
	(ev) => {
		if (!data || !(fg.grandTotal > 0)) return;
		const unit = ev.deltaMode === 1 ? 18 : ev.deltaMode === 2 ? fg.viewHeight : 1;
		if (ev.ctrlKey || ev.metaKey) {
			const [x] = canvasPoint(ev);
			fg.zoomAt(x, Math.exp(ev.deltaY * unit * 0.0025));
		} else if (ev.shiftKey || Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) {
			const d = (ev.shiftKey && !ev.deltaX ? ev.deltaY : ev.deltaX) * unit;
			fg.panBy(d, 0);
		} else {
			// Up and down; at the graph's ends the page scrolls.
			const before = fg.scrollY;
			fg.panBy(0, ev.deltaY * unit);
			if (fg.scrollY === before) return;
		}
		ev.preventDefault();
		hideHover();
		redrawSoon();
	},
	{ passive: false }
);

let drag = null, dragged = false;
el.canvas.addEventListener('mousedown', (ev) => {
	if (ev.button !== 0 || !data) return;
	drag = { x: ev.clientX, y: ev.clientY, moved: false };
	dragged = false;
});
window.addEventListener('mousemove', (ev) => {
	if (!drag) return;
	const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
	if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
	drag.moved = true;
	el.canvas.classList.add('grabbing');
	hideHover();
	fg.panBy(-dx, -dy);
	drag.x = ev.clientX;
	drag.y = ev.clientY;
	redrawSoon();
});
window.addEventListener('mouseup', () => {
	if (!drag) return;
	dragged = drag.moved;
	drag = null;
	el.canvas.classList.remove('grabbing');
	// A click event follows mouseup: it sees `dragged`, then it resets.
	setTimeout(() => (dragged = false), 0);
});

function drawMinimap() {
	if (el.minimap.hidden) return;
	fg.renderMinimap(el.minimap, el.graph.clientWidth, 48);
}

let miniDrag = false;
function minimapMove(ev) {
	const r = el.minimap.getBoundingClientRect();
	fg.centerOn((ev.clientX - r.left) / r.width, (ev.clientY - r.top) / r.height);
	redrawSoon();
}
el.minimap.addEventListener('mousedown', (ev) => {
	if (ev.button !== 0 || !data) return;
	miniDrag = true;
	ev.preventDefault();
	minimapMove(ev);
});
window.addEventListener('mousemove', (ev) => miniDrag && minimapMove(ev));
window.addEventListener('mouseup', () => (miniDrag = false));

// --- the context menu ---------------------------------------------------------

function menuItems(i) {
	const n = fg.node(i);
	const name = String(n.name);
	const items = [];
	if (i !== fg.focus) items.push(['Focus on this frame', () => zoomTo(i)]);
	if (fg.typeName(i) === 'synthetic') {
		// A group-by level: its attribute is a filter.
		const attr = GROUP_ATTRIBUTES[groupLevelOf(i)];
		if (attr && !n.absent) {
			items.push([`Add filter ${attr} == "${name}"`, () => addQueryFilter(attr, name)]);
			items.push([`Top functions of this ${groupLevelOf(i)}`, () => go('functions', { q: withFilter(state.q, attr, name) })]);
		}
	} else if (i !== 0) {
		items.push(['Sandwich view: callers and callees', () => go('functions', { q: state.q, fn: name, bin: n.binary || null })]);
		items.push(['Top functions under this frame', () => showTopUnder(i)]);
		items.push(['Search for this function', () => setSearchTerm(name)]);
		items.push(['Show only stacks through this function', () => onlyThrough(name)]);
	}
	if (assistantOn && i !== 0) items.push(['Explain this (AI assistant)', () => explainFrame(i)]);
	items.push(['Copy name', () => copyText(name)]);
	return items;
}

// --- the AI assistant's panel (view_assistant.js) -----------------------------------

let assistantOn = false; // the server has an LLM (GET /public/api/v1/assistant/config)

// What the model reads of frame i: its path from the root, its numbers,
// the heaviest functions under it, the range, the query and the kind.
function frameContext(i) {
	const path = [];
	for (let j = i, d = fg.depth[i]; j >= 0 && d >= 0; j--) {
		if (fg.depth[j] === d && fg.next[j] > i) {
			path.unshift(j);
			d--;
		}
	}
	const whole = fg.total[0] || 1;
	const n = fg.node(i);
	const lines = [`Flamegraph of ${KINDS[state.kind] || state.kind} over ${rangeText(state.range, state.from, state.to)}${state.q ? `, query ${state.q}` : ''}.`,
		`Selected frame: ${n.name} (${fg.typeName(i)}${n.binary ? `, ${n.binary}` : ''}${n.file ? `, ${n.file}${n.line ? ':' + n.line : ''}` : ''}): ${fmtPct((100 * fg.total[i]) / whole)} of the total, ${fmtPct((100 * fg.self[i]) / whole)} self.`,
		'Path from the root: ' + path.filter((j) => j !== 0).map((j) => String(fg.node(j).name)).join(' > '),
		'Heaviest functions under it (self % of the total): ' + functionsUnder(i).slice(0, 8).map((r) => `${r.name} ${fmtPct((100 * r.self) / whole)}`).join(', ')];
	return lines.join('\n');
}

async function openAssistant(context, first) {
	const m = await import('./view_assistant.js');
	m.openPanel($('assistant-panel'), state.project, context, first);
}

function explainFrame(i) {
	openAssistant(frameContext(i), `Explain what ${fg.node(i).name} does here, why it costs this much, and how to make it cheaper.`);
}

import('./view_assistant.js').then((m) => m.assistantConfig()).then((c) => {
	assistantOn = !!(c && c.enabled);
	$('assistant-button').hidden = !assistantOn;
});
$('assistant-button').addEventListener('click', () => openAssistant(fg && fg.total && fg.total.length ? frameContext(fg.focus || 0) : null, null));

// The group-by level of a synthetic frame (its depth among the levels).
function groupLevelOf(i) {
	const levels = GROUPS[state.group];
	return levels[Math.max(0, Math.min(levels.length - 1, fg.depth[i] - 1))] || state.group;
}

function addQueryFilter(attr, value) {
	state.q = withFilter(state.q, attr, value);
	state.f = [];
	writeURL(true);
	syncControls();
	load();
}

function onlyThrough(name) {
	state.s = '/^' + name.replace(/[\\^$.*+?()[\]{}|/]/g, '\\$&') + '$/';
	state.sf = true;
	state.f = [];
	writeURL(true);
	syncControls();
	load();
}

function setSearchTerm(term) {
	state.s = term;
	el.search.value = term;
	writeURL(true);
	runSearch();
	draw();
}

async function copyText(text) {
	try {
		await navigator.clipboard.writeText(text);
	} catch {
		// No clipboard permission (plain HTTP, headless): the old way.
		const ta = document.createElement('textarea');
		ta.value = text;
		document.body.append(ta);
		ta.select();
		document.execCommand('copy');
		ta.remove();
	}
	el.summary.dataset.copied = text;
}

// The functions in node i's subtree: self and total samples per name (a
// name on a path twice counts once in total), largest self first.
function functionsUnder(i) {
	const rows = new Map();
	const path = [], onPath = new Map();
	for (let j = i; j < fg.next[i]; j++) {
		while (path.length && fg.next[path[path.length - 1]] <= j) {
			const name = String(fg.node(path.pop()).name);
			onPath.set(name, onPath.get(name) - 1);
		}
		const name = String(fg.node(j).name);
		if (fg.typeName(j) !== 'synthetic' && j !== 0) {
			let r = rows.get(name);
			if (!r) rows.set(name, (r = { name, type: fg.typeName(j), self: 0, total: 0 }));
			r.self += fg.self[j];
			if (!onPath.get(name)) r.total += fg.total[j];
		}
		path.push(j);
		onPath.set(name, (onPath.get(name) || 0) + 1);
	}
	return [...rows.values()].sort((a, b) => b.self - a.self || b.total - a.total);
}

function showTopUnder(i) {
	const dlg = $('under-dialog');
	const rows = functionsUnder(i).slice(0, 50);
	const whole = fg.total[i];
	const coresOf = (v) => {
		const c = cores(v);
		return c === null ? '\u2013' : c;
	};
	dlg.querySelector('h2').textContent = `Top functions under ${i === 0 ? 'all samples' : fg.node(i).name}`;
	const table = sortableTable(
		[
			{ key: 'name', label: 'Function', render: (r) => r.name },
			{ key: 'self', label: gpuTime() ? 'Self GPUs busy' : waited() ? 'Self threads waiting' : 'Self cores', num: true, render: (r) => coresOf(r.self) },
			{ key: 'selfp', label: 'Self % of frame', num: true, render: (r) => fmtPct((100 * r.self) / whole) },
			{ key: 'total', label: 'Total % of frame', num: true, render: (r) => fmtPct((100 * r.total) / whole) },
		],
		rows,
		{
			onRow: (r) => {
				dlg.close();
				setSearchTerm(r.name);
			},
			rowTitle: 'Search the graph for this function',
		}
	);
	table.querySelectorAll('tbody tr td:first-child').forEach((td) => td.classList.add('name'));
	dlg.querySelector('.under-table').replaceChildren(table);
	dlg.showModal();
}

function closeMenu() {
	el.menu.hidden = true;
	el.menu.replaceChildren();
}

el.canvas.addEventListener('contextmenu', (ev) => {
	const [x, y] = canvasPoint(ev);
	const i = fg.hit(x, y);
	if (i < 0) return;
	ev.preventDefault();
	hideHover();
	const title = document.createElement('li');
	title.className = 'title';
	title.textContent = i === 0 ? 'all samples' : String(fg.node(i).name);
	const lis = menuItems(i).map(([label, run]) => {
		const li = document.createElement('li');
		li.setAttribute('role', 'menuitem');
		li.tabIndex = -1;
		li.textContent = label;
		li.addEventListener('click', () => {
			closeMenu();
			run();
		});
		li.addEventListener('keydown', (e) => {
			if (e.key === 'Enter') {
				closeMenu();
				run();
			}
		});
		return li;
	});
	el.menu.replaceChildren(title, ...lis);
	el.menu.hidden = false;
	const w = el.menu.offsetWidth, h = el.menu.offsetHeight;
	el.menu.style.left = Math.min(ev.clientX, window.innerWidth - w - 4) + 'px';
	el.menu.style.top = Math.min(ev.clientY, window.innerHeight - h - 4) + 'px';
	lis[0].focus();
});
document.addEventListener('mousedown', (ev) => {
	if (!el.menu.hidden && !el.menu.contains(ev.target)) closeMenu();
	if (!el.settings.hidden && !el.settings.contains(ev.target) && ev.target !== el.settingsButton) toggleSettings(false);
});
el.menu.addEventListener('keydown', (ev) => {
	const items = [...el.menu.querySelectorAll('[role="menuitem"]')];
	const at = items.indexOf(document.activeElement);
	if (ev.key === 'Escape') {
		closeMenu();
		el.canvas.focus();
	} else if (ev.key === 'ArrowDown' || ev.key === 'ArrowUp') {
		ev.preventDefault();
		items[(at + (ev.key === 'ArrowDown' ? 1 : items.length - 1)) % items.length].focus();
	}
});

// --- settings and help ----------------------------------------------------------

function toggleSettings(open) {
	el.settings.hidden = !open;
	el.settingsButton.setAttribute('aria-expanded', String(open));
}

function syncSettings() {
	const f = el.settings.elements;
	f.unsym.checked = !state.o.includes('unsym');
	f.rec.checked = !state.o.includes('rec');
	f.common.checked = !state.o.includes('raw');
	f.addr.checked = state.o.includes('addr');
	f.verbose.checked = state.o.includes('verbose');
}

el.settingsButton.addEventListener('click', () => toggleSettings(el.settings.hidden));
el.settings.addEventListener('change', () => {
	const f = el.settings.elements;
	const o = [];
	if (!f.unsym.checked) o.push('unsym');
	if (!f.rec.checked) o.push('rec');
	if (!f.common.checked) o.push('raw');
	if (f.addr.checked) o.push('addr');
	if (f.verbose.checked) o.push('verbose');
	applyOptions(o);
});
$('settings-reset').addEventListener('click', () => applyOptions([]));

function applyOptions(o) {
	const refetch = o.includes('raw') !== state.o.includes('raw') || o.includes('verbose') !== state.o.includes('verbose');
	state.o = o;
	state.f = [];
	writeURL(true);
	syncSettings();
	if (refetch) load();
	else applyView();
}

el.helpButton.addEventListener('click', () => el.help.showModal());

// --- keyboard ---------------------------------------------------------------

// Frames drawn at the depth of node i, left to right.
function drawnRow(d) {
	const out = [];
	for (let k = 0; k < fg.drawnCount; k++) {
		const i = fg.drawnIdx[k];
		if (fg.depth[i] === d) out.push(i);
	}
	return out;
}

function showSelection() {
	const b = showHoverBox(selected);
	if (!b) return;
	const r = el.canvas.getBoundingClientRect();
	const cx = r.left + b.x + Math.min(b.width / 2, 40);
	const cy = r.top + b.y + b.height;
	placeTooltip(selected, cx, cy - 8);
	el.canvas.setAttribute('aria-label', `Flame graph. Selected: ${fg.node(selected).name}, ${pct(fg.total[selected], fg.grandTotal)} of total.`);
	const top = r.top + b.y;
	if (top < 0 || top + b.height > window.innerHeight) window.scrollBy(0, top < 0 ? top - 40 : top + b.height - window.innerHeight + 40);
}

el.canvas.addEventListener('keydown', (ev) => {
	if (!data || !(fg.grandTotal > 0)) return;
	let i = selected >= 0 && fg.box(selected) ? selected : -1;
	switch (ev.key) {
		case 'ArrowDown': {
			if (i < 0) i = fg.focus;
			else {
				const kids = fg.children(i).filter((c) => fg.box(c));
				if (kids.length) i = kids[0];
			}
			break;
		}
		case 'ArrowUp':
			if (i < 0) i = fg.focus;
			else if (fg.parent[i] >= 0) i = fg.parent[i];
			break;
		case 'ArrowLeft':
		case 'ArrowRight': {
			if (i < 0) {
				i = fg.focus;
				break;
			}
			const row = drawnRow(fg.depth[i]);
			const at = row.indexOf(i) + (ev.key === 'ArrowLeft' ? -1 : 1);
			if (at >= 0 && at < row.length) i = row[at];
			break;
		}
		case 'Enter':
		case ' ':
			if (i >= 0) {
				ev.preventDefault();
				zoomTo(i);
				selected = i;
				showSelection();
			}
			return;
		default:
			return;
	}
	ev.preventDefault();
	selected = i;
	showSelection();
});
el.canvas.addEventListener('blur', () => {
	selected = -1;
	hideHover();
});

document.addEventListener('keydown', (ev) => {
	if (state.view !== 'flamegraph') return;
	const t = ev.target;
	const typing = t instanceof HTMLInputElement || t instanceof HTMLSelectElement || t instanceof HTMLTextAreaElement;
	if (ev.key === 'Escape') {
		if (!el.menu.hidden) return closeMenu();
		if (!el.settings.hidden) return toggleSettings(false);
		if (t === el.search && el.search.value) {
			el.search.value = '';
			applySearch();
			return;
		}
		if (t === el.query) return;
		hideHover();
		selected = -1;
		resetZoom();
		return;
	}
	if (ev.key === '/' && !typing && !ev.ctrlKey && !ev.metaKey && !ev.altKey) {
		ev.preventDefault();
		el.search.focus();
		el.search.select();
	}
});

// --- the controls -----------------------------------------------------------

function applyControls(push) {
	const next = {
		...state,
		project: el.project.value || state.project,
		range: el.range.value,
		group: el.group.value,
		kind: el.kind.value,
		q: el.query.value.trim(),
	};
	if (next.group !== state.group || next.project !== state.project) next.f = [];
	state = next;
	writeURL(push);
	if (state.view === 'flamegraph') load();
	else showView();
}

// --- the views --------------------------------------------------------------

const modules = {}; // view id -> its module, once loaded
let shown = 'flamegraph'; // the view on screen
let showSeq = 0;

// The context a view module gets (common.js).
function contextFor(view) {
	const params = new URLSearchParams(state.extra);
	const w = windowOf(state);
	return {
		project: state.project,
		range: state.range,
		seconds: w.seconds,
		start_ts: w.end - w.seconds * 1000,
		end_ts: w.end,
		rangeText: rangeText(state.range, state.from, state.to),
		q: state.q,
		kind: state.kind,
		filter: () => {
			const now = windowOf(state);
			return filterFor(now.seconds, state.q, now.end, state.kind);
		},
		setTimeRange: (from, to) => setTimeRange(from, to),
		api: (name, body, signal) => api(state.project, name, body, signal),
		param: (name) => params.get(name),
		setParams(obj, push) {
			if (state.view !== view) return;
			const p = new URLSearchParams(state.extra);
			for (const [k, v] of Object.entries(obj)) {
				if (PAGE_PARAMS.has(k)) continue;
				if (v === null || v === undefined || v === '') p.delete(k);
				else p.set(k, String(v));
			}
			state.extra = [...p.entries()];
			writeURL(push);
			syncControls();
			showView();
		},
		go: (target, p = {}) => go(target, p),
		href: (target, p = {}) => urlOf(stateFor(target, p)),
		addFilter(attr, value) {
			state.q = withFilter(state.q, attr, value);
			writeURL(true);
			syncControls();
			if (state.view === 'flamegraph') load();
			else showView();
		},
		setState,
	};
}

// Makes [from, to) (Unix ms) the page's time range: a chart's drag-to-zoom.
function setTimeRange(from, to) {
	if (!(to > from)) return;
	state = { ...state, range: 'custom', from: Math.floor(from), to: Math.ceil(to), f: [] };
	writeURL(true);
	syncControls();
	if (state.view === 'flamegraph') load();
	else showView();
}

// The state of a view with params: they may set q, group, range (with
// from and to, Unix ms, for a custom one) and the view's own parameters.
function stateFor(view, params = {}) {
	const next = { ...state, view, extra: [], s: '', f: [] };
	for (const [k, v] of Object.entries(params)) {
		if (v === null || v === undefined) continue;
		if (k === 'q' || k === 'group' || k === 'range' || k === 's') next[k] = String(v);
		else if (k === 'kind') next.kind = KINDS[v] ? String(v) : state.kind;
		else if (k === 'from' || k === 'to') next[k] = Math.round(Number(v));
		else if (k === 'f') next.f = Array.isArray(v) ? v.map(String) : [String(v)];
		else if (!PAGE_PARAMS.has(k)) next.extra.push([k, String(v)]);
	}
	if (!RANGES[next.range] && next.range !== 'custom') next.range = state.range;
	if (next.range === 'custom' && !(Number.isSafeInteger(next.from) && Number.isSafeInteger(next.to) && next.to > next.from && next.from >= 0)) {
		next.range = state.range === 'custom' ? DEFAULTS.range : state.range;
		if (state.range === 'custom' && state.to > state.from) next.range = 'custom';
		next.from = state.from;
		next.to = state.to;
	}
	return next;
}

// Switches to a view; params as stateFor's.
function go(view, params = {}) {
	if (!VIEWS[view]) return;
	state = stateFor(view, params);
	writeURL(true);
	syncControls();
	activate();
}

// Shows the view of `state`, hiding the others.
function activate() {
	const view = state.view;
	if (shown !== view && shown !== 'flamegraph' && modules[shown]) modules[shown].hide();
	shown = view;
	document.title = view === 'flamegraph' ? 'ember' : `${VIEWS[view]} \u00b7 ember`;
	for (const id of Object.keys(VIEWS)) $(`view-${id}`).hidden = id !== view;
	if (view === 'flamegraph') {
		hideHover();
		if (dataKey(state) !== loadedKey) load();
		else applyView();
		return;
	}
	if (inflight) {
		inflight.abort();
		inflight = null;
	}
	hideHover();
	showView();
}

async function showView() {
	const view = state.view;
	if (view === 'flamegraph') return;
	const root = $(`view-${view}`);
	const seq = ++showSeq;
	if (!modules[view]) {
		setState('loading');
		try {
			modules[view] = (await import(`./view_${view}.js`)).default;
		} catch (e) {
			root.innerHTML = apiErrorHTML(e);
			setState('error');
			return;
		}
		if (seq !== showSeq || state.view !== view) return;
	}
	modules[view].show(root, contextFor(view));
}

el.nav.addEventListener('click', (ev) => {
	const a = ev.target.closest('a[data-view]');
	if (!a || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) return;
	ev.preventDefault();
	if (a.dataset.view === state.view) return;
	go(a.dataset.view, { q: state.q, range: state.range, group: state.group });
});

el.controls.addEventListener('submit', (ev) => {
	ev.preventDefault();
	applyControls(dataKey({ ...state, q: el.query.value.trim() }) !== dataKey(state));
});
for (const s of [el.group, el.kind, el.project]) s.addEventListener('change', () => applyControls(true));
el.range.addEventListener('change', () => {
	if (el.range.value === 'custom') return openCustomRange();
	applyControls(true);
});

// --- the custom time range ----------------------------------------------------

const customBox = $('custom-range');

// A Unix ms time as the value of a datetime-local input (local time).
function localInput(ms) {
	const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60000);
	return d.toISOString().slice(0, 19);
}

function openCustomRange() {
	const w = windowOf(state);
	$('range-from').value = localInput(w.end - w.seconds * 1000);
	$('range-to').value = localInput(w.end);
	$('range-error').textContent = '';
	customBox.hidden = false;
	$('range-from').focus();
}

function closeCustomRange() {
	customBox.hidden = true;
	el.range.value = state.range;
}

$('range-apply').addEventListener('click', () => {
	const from = new Date($('range-from').value).getTime();
	const to = new Date($('range-to').value).getTime();
	if (!Number.isFinite(from) || !Number.isFinite(to)) {
		$('range-error').textContent = 'Enter both times.';
		return;
	}
	if (to <= from) {
		$('range-error').textContent = '"To" must be after "From".';
		return;
	}
	customBox.hidden = true;
	setTimeRange(from, to);
});
$('range-cancel').addEventListener('click', closeCustomRange);
customBox.addEventListener('keydown', (ev) => {
	if (ev.key === 'Escape') {
		ev.stopPropagation();
		closeCustomRange();
	} else if (ev.key === 'Enter') {
		ev.preventDefault();
		$('range-apply').click();
	}
});
el.search.addEventListener('keydown', (ev) => {
	if (ev.key === 'Enter') {
		ev.preventDefault();
		applySearch();
	}
});

window.addEventListener('popstate', () => {
	state = readURL();
	syncControls();
	activate();
});

// Redraw when the width changes (window resize, zoom, scroll bar).
let lastWidth = 0, resizeFrame = 0;
new ResizeObserver(() => {
	cancelAnimationFrame(resizeFrame);
	resizeFrame = requestAnimationFrame(() => {
		const w = el.graph.clientWidth;
		if (w && w !== lastWidth) {
			lastWidth = w;
			if (document.body.dataset.state === 'ready') draw();
		}
	});
}).observe(el.graph);
matchMedia(`(resolution: ${window.devicePixelRatio}dppx)`).addEventListener('change', () => draw());

async function loadProjects() {
	try {
		const res = await request('/public/api/v1/projects');
		if (!res.ok) return;
		const { projects } = await res.json();
		if (!Array.isArray(projects)) return;
		el.project.replaceChildren(
			...projects.map((p) => {
				const o = document.createElement('option');
				o.value = p.id;
				o.textContent = p.name;
				return o;
			})
		);
		if (!projects.some((p) => p.id === state.project)) {
			const o = document.createElement('option');
			o.value = state.project;
			o.textContent = state.project;
			el.project.append(o);
		}
		el.project.value = state.project;
		el.projectField.hidden = el.project.options.length < 2;
	} catch {
		// The project list is a convenience: the default project still works.
	}
}

// Suggestions for the query: names and values of the range (not narrowed
// by the query itself, so that alternatives can be added).
const labels = (body) => {
	const w = windowOf(state);
	return api(state.project, 'labels', { ...body, filter: filterFor(w.seconds, '', w.end) });
};
labels.scope = () => JSON.stringify([state.project, state.range, state.from, state.to]);
attachQueryBox(el.query, $('add-filter'), { labels, apply: () => el.controls.requestSubmit() });

syncControls();
// Who is signed in first (session.js): the sign-in page, or the page.
startSession(() => {
	loadProjects();
	activate();
}, { onAccount: () => go('account', {}) });
