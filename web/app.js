// app.js - ember's flame graph page: the controls, the view state in the
// URL, the API calls, the tooltip and the keyboard, around the renderer in
// flamegraph.js.

import { FlameGraph, FRAME_TYPES, baseColor, typeLabel } from './flamegraph.js';

const DEFAULT_PROJECT = '00000000-0000-0000-0000-000000000000';
const RANGES = {
	'5m': [5 * 60, '5 minutes'],
	'15m': [15 * 60, '15 minutes'],
	'1h': [3600, 'hour'],
	'6h': [6 * 3600, '6 hours'],
	'24h': [24 * 3600, '24 hours'],
	'7d': [7 * 86400, '7 days'],
};
const GROUPS = {
	none: [],
	executable: ['executable'],
	thread: ['thread'],
	host: ['host'],
	process: ['process'],
};
const DEFAULTS = { project: DEFAULT_PROJECT, range: '15m', group: 'executable', q: '', s: '', f: [] };
const ALWAYS_IN_LEGEND = ['native', 'kernel', 'synthetic', 'error'];

const $ = (id) => document.getElementById(id);
const el = {
	controls: $('controls'),
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
let seconds = RANGES[state.range][0]; // length of the range `data` covers
let inflight = null; // AbortController of the running request
let requestSeq = 0;
let selected = -1; // frame chosen with the keyboard
let hovered = -1;

const nf = new Intl.NumberFormat('en-US');

// --- the view state in the URL --------------------------------------------

function readURL() {
	const p = new URLSearchParams(location.search);
	const s = { ...DEFAULTS };
	const range = p.get('range');
	if (range && RANGES[range]) s.range = range;
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
	if (s.project !== DEFAULTS.project) p.set('project', s.project);
	if (s.range !== DEFAULTS.range) p.set('range', s.range);
	if (s.group !== DEFAULTS.group) p.set('group', s.group);
	if (s.q) p.set('q', s.q);
	if (s.s) p.set('s', s.s);
	for (const name of s.f) p.append('f', name);
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
	return JSON.stringify([s.project, s.range, s.group, s.q.trim()]);
}

function syncControls() {
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

function escapeHTML(s) {
	return String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
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
	const end = Date.now();
	seconds = RANGES[state.range][0];
	const q = state.q.trim();
	return {
		filter: {
			start_ts: end - seconds * 1000,
			end_ts: end,
			event_kind: 'on_cpu',
			frame_mask: { patterns: [] },
			query: q ? q : null,
		},
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
	el.summary.textContent = `0 samples in the last ${RANGES[state.range][1]}`;
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
	if (c !== null) parts.push(`${c} cores avg over ${RANGES[state.range][1]}`);
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
	load();
}

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
	if (dataKey(state) !== loadedKey) load();
	else applyView();
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
load();
