// app.js - ember's page: the views and their navigation, the controls of
// the top bar, the whole view state in the URL, and the flame graph view
// (its API call, tooltip and keyboard, around the renderer in
// flamegraph.js). The other views are modules (view_*.js, see common.js
// for their contract), loaded when first shown.

import { FlameGraph, FRAME_TYPES, baseColor, typeLabel } from './flamegraph.js';
import { DEFAULT_PROJECT, RANGES, api, escapeHTML, filterFor, withFilter, apiErrorHTML, rangeText } from './common.js';

// Every view: its URL name and title. The flame graph is the default.
const VIEWS = {
	iq: 'Efficiency IQ',
	flamegraph: 'Flamegraph',
	functions: 'Top functions',
	entities: 'Top entities',
	diff: 'Diff',
};
// URL parameters of the page itself; any other belongs to the active view.
const PAGE_PARAMS = new Set(['view', 'project', 'range', 'from', 'to', 'group', 'q', 's', 'f']);
const GROUPS = {
	none: [],
	executable: ['executable'],
	thread: ['thread'],
	host: ['host'],
	process: ['process'],
};
const DEFAULTS = { view: 'flamegraph', project: DEFAULT_PROJECT, range: '15m', from: 0, to: 0, group: 'executable', q: '', s: '', f: [], extra: [] };
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
	query: $('query'),
	search: $('search'),
	matchInfo: $('match-info'),
	resetZoom: $('reset-zoom'),
	summary: $('summary'),
	legend: $('legend'),
	message: $('message'),
	graph: $('graph'),
	canvas: $('flamegraph'),
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
	const project = p.get('project');
	if (project) s.project = project;
	s.q = p.get('q') || '';
	s.s = p.get('s') || '';
	s.f = p.getAll('f');
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
	if (s.q) p.set('q', s.q);
	if (s.s) p.set('s', s.s);
	for (const name of s.f) p.append('f', name);
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
	return JSON.stringify([s.project, s.range, s.from, s.to, s.group, s.q.trim()]);
}

function syncControls() {
	el.groupField.hidden = state.view !== 'flamegraph';
	for (const a of el.nav.querySelectorAll('a')) {
		const v = a.dataset.view;
		a.href = urlOf({ ...state, view: v, extra: v === state.view ? state.extra : [], s: '', f: [] });
		if (v === state.view) a.setAttribute('aria-current', 'page');
		else a.removeAttribute('aria-current');
	}
	let custom = el.range.querySelector('option[value="custom"]');
	if (state.range === 'custom') {
		if (!custom) {
			custom = document.createElement('option');
			custom.value = 'custom';
			el.range.append(custom);
		}
		custom.textContent = rangeText('custom', state.from, state.to);
	} else if (custom) custom.remove();
	el.range.value = state.range;
	el.group.value = state.group;
	el.query.value = state.q;
	if (document.activeElement !== el.search) el.search.value = state.s;
	if (el.project.value !== state.project && [...el.project.options].some((o) => o.value === state.project))
		el.project.value = state.project;
}

// --- page states ------------------------------------------------------------

function setState(name) {
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
		seconds,
		focus: hasData ? fg.pathOf(fg.focus) : [],
		search: fg.searchTerm,
		matches: hasData ? fg.searchResult.count : 0,
		matchedTotal: hasData ? fg.searchResult.total : 0,
		matchedShare: hasData ? fg.searchResult.share : 0,
		renderMs: fg.lastRenderMs || 0,
		width: fg.width,
		truncated: fg.truncatedRows,
		graph: fg,
	};
}

// --- loading ----------------------------------------------------------------

function requestBody() {
	const w = windowOf(state);
	seconds = w.seconds;
	return {
		filter: filterFor(seconds, state.q, w.end),
		num_samples: null,
		num_stat_buckets: null,
		synthetic_frames: GROUPS[state.group],
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
	try {
		res = await fetch(`/public/api/v1/project/${encodeURIComponent(state.project)}/flamegraph/json`, {
			method: 'POST',
			headers: { 'Content-Type': 'application/json' },
			body: JSON.stringify(requestBody()),
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
	fg.setData(data);
	applyView();
}

function showError(title, detail) {
	data = null;
	loadedKey = '';
	fg.setData({ total: 0, root: { name: 'root', frame_type: 'root', self: 0, total: 0, children: [] } });
	el.graph.hidden = true;
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
	el.hint.hidden = true;
	el.graph.classList.remove('stale');
	el.resetZoom.hidden = true;
	el.matchInfo.textContent = '';
	el.summary.textContent = `0 samples in ${rangeText(state.range, state.from, state.to)}`;
	updateLegend();
	const host = location.host || '127.0.0.1:8080';
	const cmd = `sudo build/bin/ember-agent -collection-agent=${host} -disable-tls`;
	const q = state.q.trim();
	const filter = q
		? `<p>No samples match the query <code>${escapeHTML(q)}</code> in this time range. Clear the query or pick a longer time range.</p>`
		: `<p><strong>No samples in this time range.</strong> Pick a longer time range, or check that an agent is sending data.</p>`;
	showMessage('empty', `${filter}
		<p>Is ember-agent running? Start it with:</p>
		<pre><code>${escapeHTML(cmd)}</code></pre>`);
	setState('empty');
	expose();
}

// Applies the focus and search of `state` to the loaded data, then draws.
function applyView() {
	if (!data) return;
	if (!(fg.grandTotal > 0)) return showEmpty();
	el.message.hidden = true;
	el.graph.hidden = false;
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
	fg.render(el.graph.clientWidth);
	el.resetZoom.hidden = fg.focus === 0;
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

function cores(samples) {
	const hz = data && data.sample_rate_hz;
	if (!hz || !seconds) return null;
	const c = samples / hz / seconds;
	if (c === 0) return '0';
	if (c < 0.001) return '<0.001';
	return c >= 100 ? c.toFixed(0) : String(Number(c.toPrecision(3)));
}

function samplesText(n) {
	return `${nf.format(n)} sample${n === 1 ? '' : 's'}`;
}

function updateSummary() {
	const total = fg.grandTotal;
	const parts = [samplesText(total)];
	if (data.sample_rate_hz) parts.push(`${data.sample_rate_hz} Hz`);
	const c = cores(total);
	if (c !== null) parts.push(`${c} cores avg over ${rangeText(state.range, state.from, state.to).replace(/^the last /, 'the ')}`);
	el.summary.textContent = parts.join(' \u00b7 ');
	const qs = data.query_stats;
	el.summary.title = qs ? `server query: ${qs.time_ms} ms, ${qs.rows_matched} rows, ${data.distinct_stacks} stacks, ${data.nodes} nodes; fetched in ${Math.round(data.fetchMs)} ms` : '';
}

function updateLegend() {
	el.legend.hidden = !(fg.grandTotal > 0);
	const types = ALWAYS_IN_LEGEND.slice();
	for (const t of Object.keys(FRAME_TYPES))
		if (fg.typesSeen.has(t) && !types.includes(t) && t !== 'root') types.push(t);
	el.legend.replaceChildren(
		...types.map((t) => {
			const li = document.createElement('li');
			const sw = document.createElement('span');
			sw.className = 'swatch';
			sw.style.background = baseColor(t);
			sw.setAttribute('aria-hidden', 'true');
			li.append(sw, typeLabel(t));
			return li;
		})
	);
}

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
	if (!data || !(fg.grandTotal > 0)) return;
	runSearch();
	draw();
}

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

el.resetZoom.addEventListener('click', () => zoomTo(0));

// --- tooltip and hover ------------------------------------------------------

function tooltipHTML(i) {
	const n = fg.node(i);
	const total = fg.total[i], self = fg.self[i], all = fg.grandTotal;
	const rows = [];
	const row = (k, v) => rows.push(`<dt>${k}</dt><dd>${v}</dd>`);
	row('type', escapeHTML(i === 0 ? 'root' : typeLabel(fg.typeName(i))));
	if (n.binary) row('binary', escapeHTML(n.binary));
	if (n.file) row('source', escapeHTML(n.file + (n.line ? ':' + n.line : '')));
	const line = (v) => {
		const c = cores(v);
		return `${escapeHTML(samplesText(v))} \u00b7 ${pct(v, all)}${c !== null ? ` \u00b7 ${c} cores` : ''}`;
	};
	row('total', line(total));
	row('self', line(self));
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
	const [x, y] = canvasPoint(ev);
	const i = fg.hit(x, y);
	if (i < 0) return;
	selected = -1;
	zoomTo(i === fg.focus && i !== 0 ? fg.parent[i] : i);
});

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
		if (t === el.search && el.search.value) {
			el.search.value = '';
			applySearch();
			return;
		}
		if (t === el.query) return;
		hideHover();
		selected = -1;
		zoomTo(0);
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
		filter: () => {
			const now = windowOf(state);
			return filterFor(now.seconds, state.q, now.end);
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

// Switches to a view; params may set q, group, range and its own parameters.
function go(view, params = {}) {
	if (!VIEWS[view]) return;
	const next = { ...state, view, extra: [], s: '', f: [] };
	for (const [k, v] of Object.entries(params)) {
		if (v === null || v === undefined) continue;
		if (k === 'q' || k === 'group' || k === 'range' || k === 's') next[k] = String(v);
		else if (k === 'f') next.f = Array.isArray(v) ? v.map(String) : [String(v)];
		else if (!PAGE_PARAMS.has(k)) next.extra.push([k, String(v)]);
	}
	if (!RANGES[next.range] && next.range !== 'custom') next.range = state.range;
	state = next;
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
for (const s of [el.range, el.group, el.project]) s.addEventListener('change', () => applyControls(true));
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
		const res = await fetch('/public/api/v1/projects');
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

syncControls();
loadProjects();
activate();
