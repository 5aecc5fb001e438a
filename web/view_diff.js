// view_diff.js - the Diff view: what changed, function by function, between
// two scopes, Baseline and Comparison, each a time range and a CEL filter
// (ANDed with the page's query). By default the baseline is the first half
// of the page's time range and the comparison the second half, so "what
// changed lately" takes one click. The table lists every function with its
// cores in both scopes (self or total), the change in cores and in percent,
// new and removed ones marked; clicking a function opens its trend: its CPU
// over time in both ranges on one chart.
//
// URL parameters (all optional):
//   cmp      halves (default), previous, same or custom: how the two time
//            ranges follow from the page's range
//   bs be    the baseline's range (Unix ms), with cmp=custom
//   cs ce    the comparison's range (Unix ms), with cmp=custom
//   bq cq    each scope's own filter (CEL), ANDed with the page's query
//   m        self (default) or total: the cores the table compares
//   sort dir the table's order: abs (largest change either way, the
//            default), change, pct, base, cmp or name; asc or desc
//   find     the table's search
//   fn bin   the function whose trend is open, and its binary

import { ApiError, escapeHTML, fmtCores, fmtPct, messageHTML, errorHTML, apiErrorHTML, emptyHTML, sortableTable, kindInfo, loadStylesheet } from './common.js';
import { timeChart } from './chart.js';

const PRESETS = {
	halves: 'First half vs second half of the range',
	previous: 'The period before vs the range',
	same: 'The same range (compare the filters)',
	custom: 'Custom time ranges',
};
const SCOPES = ['baseline', 'comparison'];
const LABEL = { baseline: 'Baseline', comparison: 'Comparison' };
const COLOR = { baseline: '#2563eb', comparison: '#c2410c' };
const LIMIT = 2000; // functions asked for
const SHOWN = 500; // table rows drawn at most
const SIGNIFICANT_PCT = 5; // a smaller change counts as unchanged
const BUCKETS = 20; // trend buckets at most
const MIN_BUCKET_MS = 10000; // an agent reports every 10 s
const SORTS = ['abs', 'change', 'pct', 'base', 'cmp', 'name'];

let root = null; // the view's <section>
let els = null; // the elements built once
let ctx = null; // the latest context
let dataKey = ''; // what `data` answers (or is being fetched for)
let data = null; // the diff's answer
let shownScopes = null; // the scopes `data` answers
let diffCtl = null; // the diff request in flight
let phase = 'loading'; // the diff's state
let force = false; // fetch again even when nothing changed (Compare)
let trendKey = '';
let trend = null; // {n, baseline: {...}, comparison: {...}} of the open function
let trendCtl = null;
let trendErr = null;
let chart = null;

// The page's event kind (the Show switch): on-CPU cores, off-CPU threads
// waiting (time waited ÷ seconds), or GPUs busy (GPU time ÷ seconds);
// both scopes ask for it.
function kindOf() {
	return ctx && (ctx.kind === 'off_cpu' || ctx.kind === 'cuda') ? ctx.kind : 'on_cpu';
}
function K() {
	return kindInfo(kindOf());
}
// What the table's numbers are, after a number: " cores" / " threads waiting".
function unitWord() {
	return K().gpu ? 'GPUs busy' : K().off ? 'threads waiting' : 'cores';
}
// "off-CPU " / "GPU " before "samples" in messages ('' for on-CPU).
function kindWord() {
	return K().gpu ? 'GPU ' : K().off ? 'off-CPU ' : '';
}

// --- scopes -------------------------------------------------------------------

// `(a) && (b)` of the non-empty ones.
function andQueries(...qs) {
	const parts = qs.map((q) => (q || '').trim()).filter(Boolean);
	if (parts.length < 2) return parts[0] || '';
	return parts.map((q) => `(${q})`).join(' && ');
}

function msParam(c, name) {
	const v = c.param(name);
	const n = v === null ? NaN : Number(v);
	return Number.isSafeInteger(n) && n >= 0 ? n : null;
}

// The two scopes of a context: {preset, baseline, comparison}, each scope
// {start, end, filter (its own), query (with the page's)}.
function resolveScopes(c) {
	let preset = PRESETS[c.param('cmp')] ? c.param('cmp') : 'halves';
	const a = c.start_ts, b = c.end_ts, mid = Math.round((a + b) / 2);
	let t = null;
	if (preset === 'custom') {
		const v = ['bs', 'be', 'cs', 'ce'].map((n) => msParam(c, n));
		if (v.every((x) => x !== null) && v[1] > v[0] && v[3] > v[2]) t = v;
		else preset = 'halves';
	}
	if (!t) {
		if (preset === 'previous') t = [a - (b - a), a, a, b];
		else if (preset === 'same') t = [a, b, a, b];
		else t = [a, mid, mid, b];
	}
	const bq = (c.param('bq') || '').trim(), cq = (c.param('cq') || '').trim();
	return {
		preset,
		baseline: { start: t[0], end: t[1], filter: bq, query: andQueries(c.q, bq) },
		comparison: { start: t[2], end: t[3], filter: cq, query: andQueries(c.q, cq) },
	};
}

function metricOf(c) {
	return c.param('m') === 'total' ? 'total' : 'self';
}

// What the table's data depends on. A preset over a relative page range
// leaves the times out: they follow "now" when fetched.
function keyOf(c, sc) {
	const times = sc.preset === 'custom' || c.range === 'custom'
		? [sc.baseline.start, sc.baseline.end, sc.comparison.start, sc.comparison.end]
		: c.range;
	return JSON.stringify([c.project, c.kind, sc.preset, times, sc.baseline.query, sc.comparison.query, metricOf(c)]);
}

function filterOf(scope) {
	return { start_ts: scope.start, end_ts: scope.end, event_kind: kindOf(), frame_mask: { patterns: [] }, query: scope.query || null };
}

// --- time formatting ----------------------------------------------------------

const two = (n) => String(n).padStart(2, '0');

// Unix ms as a datetime-local input's value (local time, seconds).
function toLocalInput(ms) {
	const d = new Date(ms);
	return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())}T${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}

function fromLocalInput(s) {
	if (!s) return NaN;
	return new Date(s).getTime();
}

function fmtTime(ms) {
	const d = new Date(ms);
	return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}

// "Apr 3, 10:01:00 – 10:05:00", the date once when both ends share it.
function fmtRange(a, b) {
	const da = new Date(a), db = new Date(b);
	const day = (d) => d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' });
	const sameDay = da.toDateString() === db.toDateString();
	return `${day(da)}, ${fmtTime(a)} \u2013 ${sameDay ? '' : day(db) + ', '}${fmtTime(b)}`;
}

function fmtDuration(ms) {
	const s = Math.round(ms / 1000);
	if (s < 120) return `${s} s`;
	const m = s / 60;
	if (m < 120) return `${Number(m.toFixed(1))} min`;
	const h = m / 60;
	if (h < 48) return `${Number(h.toFixed(1))} h`;
	return `${Number((h / 24).toFixed(1))} days`;
}

function signed(v, fmt) {
	if (v === null || v === undefined || Number.isNaN(v)) return '\u2013';
	return (v > 0 ? '+' : v < 0 ? '\u2212' : '') + fmt(Math.abs(v));
}

// --- the page -----------------------------------------------------------------

function scopeFieldset(s) {
	const p = s === 'baseline' ? 'b' : 'c';
	const hint = s === 'baseline' ? 'before' : 'after';
	return `<fieldset class="diff-scope diff-scope-${s}" data-scope="${s}">
		<legend><span class="diff-dot" aria-hidden="true"></span>${LABEL[s]} <span class="muted">(${hint})</span></legend>
		<div class="diff-times">
			<label>From <input type="datetime-local" step="1" name="${p}s" required></label>
			<label>to <input type="datetime-local" step="1" name="${p}e" required></label>
			<span class="diff-duration muted"></span>
		</div>
		<label class="diff-filter">Filter <input type="text" name="${p}q" spellcheck="false" autocapitalize="off"
			placeholder='CEL, e.g. host.name == "${s === 'baseline' ? 'a' : 'b'}" (empty: every sample)'></label>
	</fieldset>`;
}

// The top bar's Refresh runs the comparison again even when nothing changed
// (a relative range moves on). Captured before app.js handles it.
document.addEventListener('submit', (ev) => {
	if (ev.target && ev.target.id === 'controls' && root && !root.hidden) force = true;
}, true);

function build(r) {
	root = r;
	loadStylesheet('view_diff.css');
	const presetOptions = Object.entries(PRESETS).map(([k, v]) => `<option value="${k}">${escapeHTML(v)}</option>`).join('');
	r.innerHTML = `<div class="view-body diff-view">
	<form class="panel diff-form" novalidate autocomplete="off">
		<div class="diff-form-head">
			<h2>Compare</h2>
			<label class="field"><span>Time ranges</span><select name="cmp">${presetOptions}</select></label>
			<button type="submit" class="diff-apply">Compare</button>
			<span class="diff-pagequery muted" hidden></span>
		</div>
		<div class="diff-scopes">${SCOPES.map(scopeFieldset).join('')}</div>
	</form>
	<div class="diff-status"></div>
	<div class="diff-results" hidden>
		<p class="diff-summary" aria-live="polite"></p>
		<div class="diff-toolbar">
			<label class="field"><span>Search functions</span><input type="search" name="find" spellcheck="false" placeholder="substring of the name or binary"></label>
			<div class="diff-metric" role="group" aria-label="Cores to compare">
				<button type="button" data-m="self" title="CPU spent in the function itself">Self</button><button type="button" data-m="total" title="CPU spent in the function and everything it calls">Total</button>
			</div>
			<span class="diff-count muted"></span>
		</div>
		<div class="diff-main">
			<div class="diff-table"></div>
			<aside class="panel diff-trend" hidden aria-label="Trend of the selected function"></aside>
		</div>
	</div>
</div>`;
	const form = r.querySelector('.diff-form');
	els = {
		form,
		cmp: form.elements.cmp,
		inputs: {
			bs: form.elements.bs, be: form.elements.be, cs: form.elements.cs, ce: form.elements.ce,
			bq: form.elements.bq, cq: form.elements.cq,
		},
		pageQuery: r.querySelector('.diff-pagequery'),
		status: r.querySelector('.diff-status'),
		results: r.querySelector('.diff-results'),
		summary: r.querySelector('.diff-summary'),
		find: r.querySelector('input[name="find"]'),
		metric: r.querySelector('.diff-metric'),
		count: r.querySelector('.diff-count'),
		main: r.querySelector('.diff-main'),
		table: r.querySelector('.diff-table'),
		trend: r.querySelector('.diff-trend'),
	};
	form.addEventListener('submit', (ev) => {
		ev.preventDefault();
		apply();
	});
	els.cmp.addEventListener('change', () => {
		if (els.cmp.value !== 'custom') for (const n of ['bs', 'be', 'cs', 'ce']) delete els.inputs[n].dataset.dirty;
		apply();
	});
	for (const n of ['bs', 'be', 'cs', 'ce']) {
		els.inputs[n].addEventListener('input', () => {
			els.inputs[n].dataset.dirty = '1';
			els.inputs[n].classList.remove('invalid');
			els.cmp.value = 'custom';
		});
	}
	for (const n of ['bq', 'cq']) els.inputs[n].addEventListener('input', () => els.inputs[n].classList.remove('invalid'));
	els.find.addEventListener('input', () => ctx.setParams({ find: els.find.value }, false));
	els.find.addEventListener('keydown', (ev) => {
		if (ev.key === 'Escape' && els.find.value) {
			els.find.value = '';
			ctx.setParams({ find: null }, false);
		}
	});
	els.metric.addEventListener('click', (ev) => {
		const b = ev.target.closest('button[data-m]');
		if (b) ctx.setParams({ m: b.dataset.m === 'self' ? null : b.dataset.m }, true);
	});
	r.addEventListener('keydown', (ev) => {
		if (ev.key !== 'Escape' || !ctx.param('fn')) return;
		const t = ev.target;
		if (t instanceof HTMLInputElement || t instanceof HTMLSelectElement) return;
		closeTrend();
	});
}

// The form's scopes into the URL, and a fresh comparison.
function apply() {
	const f = els.inputs;
	const preset = els.cmp.value;
	const p = { cmp: preset === 'halves' ? null : preset, bq: f.bq.value.trim() || null, cq: f.cq.value.trim() || null, bs: null, be: null, cs: null, ce: null };
	if (preset === 'custom') {
		let ok = true;
		const t = {};
		for (const n of ['bs', 'be', 'cs', 'ce']) {
			const inp = f[n];
			t[n] = inp.dataset.dirty ? fromLocalInput(inp.value) : Number(inp.dataset.ms);
			if (!Number.isFinite(t[n]) || t[n] < 0) {
				inp.classList.add('invalid');
				ok = false;
			}
		}
		for (const [a, b] of [['bs', 'be'], ['cs', 'ce']]) {
			if (ok && !(t[b] > t[a])) {
				f[b].classList.add('invalid');
				ok = false;
			}
		}
		if (!ok) {
			els.status.innerHTML = errorHTML('Check the time ranges', 'Each scope needs a start and an end after it.');
			return;
		}
		Object.assign(p, t);
	}
	force = true;
	ctx.setParams(p, true);
}

// The form shows the scopes (after the URL changed).
function syncForm(sc) {
	els.cmp.value = sc.preset;
	for (const s of SCOPES) {
		const p = s[0];
		for (const [n, ms] of [[p + 's', sc[s].start], [p + 'e', sc[s].end]]) {
			const inp = els.inputs[n];
			inp.value = toLocalInput(ms);
			inp.dataset.ms = String(ms);
			delete inp.dataset.dirty;
			inp.classList.remove('invalid');
		}
		els.inputs[p + 'q'].value = sc[s].filter;
		els.inputs[p + 'q'].classList.remove('invalid');
		els.inputs[p + 'q'].removeAttribute('aria-invalid');
		root.querySelector(`.diff-scope-${s} .diff-duration`).textContent = fmtDuration(sc[s].end - sc[s].start);
	}
}

function setPhase(p) {
	phase = p;
	syncState();
}

// body[data-state]: the diff's state, loading while the trend loads.
function syncState() {
	if (!ctx) return;
	ctx.setState(phase === 'ready' && trendCtl ? 'loading' : phase);
}

// --- the comparison -----------------------------------------------------------

async function load(sc) {
	if (diffCtl) diffCtl.abort();
	const ctl = (diffCtl = new AbortController());
	setPhase('loading');
	if (data && !els.results.hidden) els.results.classList.add('stale');
	else {
		els.results.hidden = true;
		els.status.innerHTML = messageHTML('info', 'Comparing the baseline with the comparison\u2026');
	}
	const c = ctx;
	const body = { baseline: filterOf(sc.baseline), comparison: filterOf(sc.comparison), sort: metricOf(c), limit: LIMIT };
	try {
		const ans = await c.api('diff', body, ctl.signal);
		if (ctl !== diffCtl) return;
		diffCtl = null;
		data = ans;
		shownScopes = sc;
		els.results.classList.remove('stale');
		const bEmpty = !ans.baseline || !ans.baseline.total, cEmpty = !ans.comparison || !ans.comparison.total;
		if (bEmpty || cEmpty) {
			showEmpty(sc, bEmpty, cEmpty);
			return;
		}
		els.status.innerHTML = '';
		els.results.hidden = false;
		renderResults();
		setPhase('ready');
		updateTrend();
	} catch (e) {
		if (e.name === 'AbortError' || ctl !== diffCtl) return;
		await showError(e, sc, ctl);
	}
}

function scopeText(scope) {
	const f = scope.query ? ` with the filter <code>${escapeHTML(scope.query)}</code>` : '';
	return `${escapeHTML(fmtRange(scope.start, scope.end))}${f}`;
}

function showEmpty(sc, bEmpty, cEmpty) {
	data = null;
	els.results.hidden = true;
	if (bEmpty && cEmpty && !sc.baseline.filter && !sc.comparison.filter && sc.preset !== 'custom') {
		els.status.innerHTML = emptyHTML(ctx.rangeText, ctx.q, ctx.kind);
	} else {
		const which = bEmpty && cEmpty ? 'either scope' : bEmpty ? 'the baseline' : 'the comparison';
		const rows = SCOPES.map((s) => {
			const empty = s === 'baseline' ? bEmpty : cEmpty;
			return `<li><strong>${LABEL[s]}</strong>: ${scopeText(sc[s])}${empty ? ` \u2014 <strong>no ${kindWord()}samples</strong>` : ''}</li>`;
		}).join('');
		const advice = bEmpty && !cEmpty
			? 'Every function would show as new. Pick a baseline range that holds data (e.g. a longer or later one), or loosen its filter.'
			: !bEmpty && cEmpty
				? 'Every function would show as removed. Pick a comparison range that holds data, or loosen its filter.'
				: `Pick time ranges that hold data, or loosen the filters. ${K().gpu ? 'Does a CUDA program run with CUDA_INJECTION64_PATH set to ember\u2019s injection library?' : `Is ember-agent running${K().off ? ' with -enable-off-cpu' : ''}?`}`;
		els.status.innerHTML = messageHTML('empty', `<p><strong>No ${kindWord()}samples in ${which}.</strong></p><ul class="diff-scope-list">${rows}</ul><p>${advice}</p>`);
	}
	closeChart();
	setPhase('empty');
}

// Which filter the server rejected: the diff's error names neither scope,
// so each query is checked alone (an empty time range: nothing is read).
async function showError(e, sc, ctl) {
	let html = apiErrorHTML(e);
	if (e instanceof ApiError && e.status === 400 && /query/.test(e.message)) {
		const checks = [['the page\u2019s query', ctx.q, null], ['the baseline filter', sc.baseline.filter, 'bq'], ['the comparison filter', sc.comparison.filter, 'cq']]
			.filter(([, q]) => q && q.trim());
		const bad = [];
		await Promise.all(checks.map(async ([what, q, input]) => {
			try {
				await ctx.api('top_functions', { filter: { start_ts: 0, end_ts: 1, event_kind: kindOf(), query: q }, limit: 1 }, ctl.signal);
			} catch (err) {
				if (err instanceof ApiError && err.status === 400) bad.push({ what, input, message: err.message.replace(/^filter\.query: /, '') });
			}
		}));
		if (ctl !== diffCtl) return;
		bad.sort((a, b) => checks.findIndex((c) => c[0] === a.what) - checks.findIndex((c) => c[0] === b.what));
		if (bad.length) {
			html = bad.map((b) => errorHTML(`${b.what[0].toUpperCase()}${b.what.slice(1)} was rejected`, b.message)).join('');
			for (const b of bad) {
				if (!b.input) continue;
				els.inputs[b.input].classList.add('invalid');
				els.inputs[b.input].setAttribute('aria-invalid', 'true');
			}
		}
	}
	if (ctl !== diffCtl) return;
	diffCtl = null;
	data = null;
	els.results.hidden = true;
	els.results.classList.remove('stale');
	els.status.innerHTML = `<div class="diff-errors">${html}</div>`;
	closeChart();
	setPhase('error');
}

// --- the table ----------------------------------------------------------------

// The answer's functions for the metric: base, cmp, change, pct, kind
// (worse, better, same) and status (new, removed, changed).
function rowsOf(ans, m) {
	const out = [];
	for (const f of ans.functions || []) {
		const base = f[`baseline_${m}_cores`] || 0, cmp = f[`comparison_${m}_cores`] || 0;
		if (!base && !cmp) continue;
		const change = f[`${m}_cores_change`] ?? cmp - base;
		const pct = f[`${m}_change_percent`] ?? null;
		let kind = 'same';
		if (change > 0 && (pct === null || pct >= SIGNIFICANT_PCT)) kind = 'worse';
		else if (change < 0 && pct !== null && pct <= -SIGNIFICANT_PCT) kind = 'better';
		out.push({ f, name: f.name, binary: f.binary || '', status: f.status, base, cmp, change, pct, kind });
	}
	return out;
}

function sortOf(c) {
	const key = SORTS.includes(c.param('sort')) ? c.param('sort') : 'abs';
	const d = c.param('dir');
	const dir = d === 'asc' || d === 'desc' ? d : key === 'name' ? 'asc' : 'desc';
	return { key, dir };
}

function sortRows(rows, { key, dir }) {
	const sign = dir === 'asc' ? 1 : -1;
	const val = {
		abs: (r) => Math.abs(r.change),
		change: (r) => r.change,
		pct: (r) => (r.pct === null ? Infinity : r.pct),
		base: (r) => r.base,
		cmp: (r) => r.cmp,
	}[key];
	return rows.sort((a, b) => {
		if (key === 'name') return sign * a.name.localeCompare(b.name) || a.binary.localeCompare(b.binary);
		const x = val(a), y = val(b);
		if (x !== y) return x < y ? -sign : sign;
		return a.name.localeCompare(b.name);
	});
}

function nameCell(r) {
	const span = document.createElement('span');
	span.className = 'diff-fn';
	const name = document.createElement('span');
	name.className = 'diff-fn-name';
	name.textContent = r.name;
	span.append(name);
	if (r.status === 'new' || r.status === 'removed') {
		const b = document.createElement('span');
		b.className = `diff-badge diff-badge-${r.status}`;
		b.textContent = r.status;
		b.title = r.status === 'new' ? 'Only in the comparison' : 'Only in the baseline';
		span.append(' ', b);
	}
	if (r.binary) {
		const bin = document.createElement('span');
		bin.className = 'diff-bin';
		bin.textContent = r.binary;
		span.append(' ', bin);
	}
	return span;
}

function changeCell(r) {
	const s = document.createElement('span');
	s.className = r.kind;
	const arrow = r.kind === 'worse' ? '\u25B2 ' : r.kind === 'better' ? '\u25BC ' : '';
	s.textContent = arrow + signed(r.change, fmtCores);
	return s;
}

function pctCell(r) {
	const s = document.createElement('span');
	s.className = r.kind;
	s.textContent = r.pct === null ? 'new' : signed(r.pct, fmtPct);
	return s;
}

function renderResults() {
	if (!data) return;
	const c = ctx;
	const m = metricOf(c);
	const all = rowsOf(data, m);
	renderSummary(all, m);
	for (const b of els.metric.querySelectorAll('button')) b.setAttribute('aria-pressed', String(b.dataset.m === m));
	const find = (c.param('find') || '').trim().toLowerCase();
	if (document.activeElement !== els.find) els.find.value = c.param('find') || '';
	const rows = find ? all.filter((r) => r.name.toLowerCase().includes(find) || r.binary.toLowerCase().includes(find)) : all;
	const sort = sortOf(c);
	sortRows(rows, sort);
	const shown = rows.slice(0, SHOWN);
	const word = (m === 'self' ? 'self' : 'total') + (K().gpu ? ' GPUs busy' : K().off ? ' waiting' : '');
	const columns = [
		{ key: 'name', label: 'Function', render: nameCell },
		{ key: 'base', label: `Baseline ${word}`, num: true, render: (r) => fmtCores(r.base) },
		{ key: 'cmp', label: `Comparison ${word}`, num: true, render: (r) => fmtCores(r.cmp) },
		{ key: 'change', label: 'Change', num: true, render: changeCell },
		{ key: 'pct', label: 'Change %', num: true, render: pctCell },
	];
	const table = sortableTable(columns, shown, {
		sortKey: sort.key === 'abs' ? 'change' : sort.key,
		onSort: (key) => ctx.setParams(nextSort(sort, key), true),
		onRow: (r) => openTrend(r),
		rowTitle: 'Show its trend in both scopes',
	});
	table.classList.add('diff-data');
	for (const th of table.tHead.rows[0].cells) {
		const key = th.dataset.key;
		const active = key === sort.key || (sort.key === 'abs' && key === 'change');
		th.setAttribute('aria-sort', active ? (sort.dir === 'asc' ? 'ascending' : 'descending') : 'none');
		if (sort.key === 'abs' && key === 'change') th.classList.add('diff-sort-abs');
		th.title = key === 'change'
			? `${K().gpu ? 'GPUs busy' : K().off ? 'Threads waiting' : 'Cores'} in the comparison minus the baseline. Sorted by the size of the change either way, then click: the largest increase first, the largest decrease first`
			: key === 'name' ? 'Sort by name' : 'Sort by this column';
	}
	table.tHead.rows[0].cells[1].classList.add('diff-col-baseline');
	table.tHead.rows[0].cells[2].classList.add('diff-col-comparison');
	const fn = c.param('fn'), bin = c.param('bin') || '';
	const trs = table.tBodies[0].rows;
	shown.forEach((r, i) => {
		const tr = trs[i];
		tr.dataset.name = r.name;
		tr.dataset.binary = r.binary;
		tr.dataset.status = r.status;
		tr.dataset.kind = r.kind;
		tr.cells[0].classList.add('name');
		if (r.name === fn && r.binary === bin) {
			tr.classList.add('selected');
			tr.setAttribute('aria-selected', 'true');
		}
	});
	// Keep the keyboard's place across the redraw.
	const had = els.table.contains(document.activeElement) ? document.activeElement : null;
	els.table.replaceChildren(table);
	if (had && had.tagName === 'TH') table.tHead.querySelector(`th[data-key="${had.dataset.key}"]`)?.focus();
	else if (had && had.tagName === 'TR') [...trs].find((tr) => tr.dataset.name === had.dataset.name && tr.dataset.binary === had.dataset.binary)?.focus();
	if (!rows.length) {
		const p = document.createElement('p');
		p.className = 'diff-none muted';
		p.textContent = find ? `No function matches \u201c${c.param('find')}\u201d.` : `No function has ${word}${K().off ? '' : ' CPU'} in either scope.`;
		els.table.append(p);
	}
	const sortText = {
		abs: 'the largest change either way',
		change: sort.dir === 'desc' ? 'the largest increase' : 'the largest decrease',
		pct: sort.dir === 'desc' ? 'the largest increase in percent' : 'the largest decrease in percent',
		base: 'the baseline', cmp: 'the comparison', name: 'name',
	}[sort.key];
	const of = rows.length > shown.length ? `the first ${shown.length} of ${rows.length}` : `${rows.length}`;
	const more = data.functions_total > (data.functions || []).length ? ` (of the ${data.functions.length} largest changes of ${data.functions_total})` : '';
	els.count.textContent = `${of} function${rows.length === 1 ? '' : 's'}${more}, by ${sortText}${sort.key === 'name' || sort.key === 'abs' ? '' : sort.dir === 'asc' ? ', ascending' : ''}`;
	window.emberDiff = { rows: shown.map((r) => ({ name: r.name, binary: r.binary, status: r.status, kind: r.kind, base: r.base, cmp: r.cmp, change: r.change, pct: r.pct })), trend: window.emberDiff?.trend || null };
}

// The sort after a click on a column's header.
function nextSort(cur, key) {
	if (key === 'change') {
		// largest change either way -> largest increase -> largest decrease
		if (cur.key === 'abs') return { sort: 'change', dir: null };
		if (cur.key === 'change' && cur.dir === 'desc') return { sort: 'change', dir: 'asc' };
		return { sort: null, dir: null };
	}
	const def = key === 'name' ? 'asc' : 'desc';
	if (cur.key === key) {
		const dir = cur.dir === 'asc' ? 'desc' : 'asc';
		return { sort: key, dir: dir === def ? null : dir };
	}
	return { sort: key, dir: null };
}

function coresOf(ctxOfScope) {
	const c = ctxOfScope || {};
	if (K().off) return c.seconds ? c.total / 1e9 / c.seconds : 0;
	return c.sample_rate_hz && c.seconds ? c.total / c.sample_rate_hz / c.seconds : 0;
}

function renderSummary(rows, m) {
	const changed = rows.filter((r) => r.status === 'changed');
	const slower = changed.filter((r) => r.kind === 'worse').length;
	const faster = changed.filter((r) => r.kind === 'better').length;
	const b = coresOf(data.baseline), c = coresOf(data.comparison);
	const d = c - b;
	const dk = Math.abs(d) < 1e-9 ? '' : d > 0 ? 'worse' : 'better';
	const fn = (n) => `${n} function${n === 1 ? '' : 's'}`;
	const parts = [
		`<span class="${slower ? 'worse' : ''}"><strong>${fn(slower)}</strong> ${K().gpu ? 'use more GPU' : K().off ? 'wait more' : 'got slower'}</span>`,
		`<span class="${faster ? 'better' : ''}"><strong>${faster}</strong> ${K().gpu ? 'use less GPU' : K().off ? 'wait less' : 'faster'}</span>`,
		`<strong>${data.functions_new || 0}</strong> new`,
		`<strong>${data.functions_removed || 0}</strong> removed`,
	];
	const total = `total <strong class="${dk}">${escapeHTML(signed(d, fmtCores))} ${unitWord()}</strong>` +
		` <span class="muted">(${escapeHTML(fmtCores(b))} \u2192 ${escapeHTML(fmtCores(c))}${b > 0 ? ', ' + escapeHTML(signed((100 * d) / b, fmtPct)) : ''})</span>`;
	els.summary.innerHTML = `${parts.join(', ')}; ${total}` +
		`<span class="diff-summary-note muted">${m === 'self' ? 'Self' : 'Total'} ${unitWord()}${K().gpu ? ' (GPU time \u00f7 seconds)' : K().off ? ' (off-CPU: time waited \u00f7 seconds)' : ''}; changes under ${SIGNIFICANT_PCT}% count as unchanged.</span>`;
}

// --- the trend of one function ----------------------------------------------

function openTrend(r) {
	const same = ctx.param('fn') === r.name && (ctx.param('bin') || '') === r.binary;
	if (same) return closeTrend();
	ctx.setParams({ fn: r.name, bin: r.binary || null }, true);
}

function closeTrend() {
	ctx.setParams({ fn: null, bin: null }, true);
}

function closeChart() {
	if (chart) chart.destroy();
	chart = null;
	if (trendCtl) trendCtl.abort();
	trendCtl = null;
	trendKey = '';
	if (els) {
		els.trend.hidden = true;
		els.trend.replaceChildren();
		els.main.classList.remove('with-trend');
	}
	if (window.emberDiff) window.emberDiff.trend = null;
}

// A name as a literal PCRE2 pattern.
function escapeRegex(s) {
	return s.replace(/[\\^$.|?*+()[\]{}]/g, '\\$&');
}

// How many buckets: equal numbers for both scopes (aligned by position),
// each a multiple of the agent's reporting interval over the longer one.
function bucketCount(sc) {
	const span = Math.max(sc.baseline.end - sc.baseline.start, sc.comparison.end - sc.comparison.start);
	const w = Math.max(MIN_BUCKET_MS, Math.ceil(span / BUCKETS / MIN_BUCKET_MS) * MIN_BUCKET_MS);
	return Math.max(2, Math.min(BUCKETS, Math.ceil(span / w)));
}

// Runs async jobs, `width` at a time.
async function pool(jobs, width) {
	const out = new Array(jobs.length);
	let next = 0;
	const worker = async () => {
		while (next < jobs.length) {
			const i = next++;
			out[i] = await jobs[i]();
		}
	};
	await Promise.all(Array.from({ length: Math.min(width, jobs.length) }, worker));
	return out;
}

// The function's self and total cores per bucket of one scope: one
// top_functions query per bucket, searching for exactly its name (the
// flamegraph's per-bucket stats count every sample, not the search's).
async function scopeTrend(c, scope, n, fn, bin, signal) {
	const span = scope.end - scope.start;
	const edges = Array.from({ length: n + 1 }, (_, i) => scope.start + Math.round((i * span) / n));
	const search = `^${escapeRegex(fn)}$`;
	const jobs = edges.slice(0, -1).map((a, i) => async () => {
		const b = edges[i + 1];
		const ans = await c.api('top_functions', { filter: filterOf({ start: a, end: b, query: scope.query }), search, sort: 'total', limit: 50 }, signal);
		const f = (ans.functions || []).find((x) => x.name === fn && (x.binary || '') === bin);
		const hz = ans.sample_rate_hz, secs = (b - a) / 1000;
		if (ans.unit === 'nanoseconds') return f ? [f.self / 1e9 / secs, f.total / 1e9 / secs] : [0, 0];
		return f && hz ? [f.self / hz / secs, f.total / hz / secs] : [0, 0];
	});
	const res = await pool(jobs, 4);
	return { start: scope.start, end: scope.end, bucket_ms: span / n, self: res.map((x) => x[0]), total: res.map((x) => x[1]) };
}

// Opens, refreshes or closes the trend panel for the URL's function.
function updateTrend() {
	const fn = ctx.param('fn');
	if (!fn || !data || phase !== 'ready') {
		if (!fn) closeChart();
		return;
	}
	const bin = ctx.param('bin') || '';
	const sc = shownScopes;
	const key = JSON.stringify([ctx.project, ctx.kind, sc.baseline, sc.comparison, fn, bin]);
	if (key !== trendKey) {
		trendKey = key;
		trend = null;
		trendErr = null;
		loadTrend(fn, bin);
	}
	renderTrend(fn, bin);
}

async function loadTrend(fn, bin) {
	if (trendCtl) trendCtl.abort();
	const ctl = (trendCtl = new AbortController());
	syncState();
	const sc = shownScopes, c = ctx;
	const n = bucketCount(sc);
	try {
		const [b, cm] = await Promise.all([
			scopeTrend(c, sc.baseline, n, fn, bin, ctl.signal),
			scopeTrend(c, sc.comparison, n, fn, bin, ctl.signal),
		]);
		if (ctl !== trendCtl) return;
		trend = { n, fn, bin, baseline: b, comparison: cm };
		window.emberDiff = { ...(window.emberDiff || {}), trend };
	} catch (e) {
		if (e.name === 'AbortError' || ctl !== trendCtl) return;
		trendErr = e;
	}
	trendCtl = null;
	if (ctx.param('fn') === fn && (ctx.param('bin') || '') === bin) renderTrend(fn, bin);
	syncState();
}

function numbersTable(f) {
	const rows = ['self', 'total'].map((m) => {
		const base = f ? f[`baseline_${m}_cores`] || 0 : 0, cmp = f ? f[`comparison_${m}_cores`] || 0 : 0;
		const d = cmp - base, pct = f ? f[`${m}_change_percent`] : null;
		const kind = d > 0 && (pct === null || pct >= SIGNIFICANT_PCT) ? 'worse' : d < 0 && pct !== null && pct <= -SIGNIFICANT_PCT ? 'better' : '';
		return `<tr data-metric="${m}"><th>${m === 'self' ? 'Self' : 'Total'}</th>
			<td class="num">${escapeHTML(fmtCores(base))}</td><td class="num">${escapeHTML(fmtCores(cmp))}</td>
			<td class="num ${kind}">${escapeHTML(signed(d, fmtCores))}</td>
			<td class="num ${kind}">${pct === null || pct === undefined ? (cmp > 0 && !base ? 'new' : '\u2013') : escapeHTML(signed(pct, fmtPct))}</td></tr>`;
	}).join('');
	return `<table class="data-table diff-numbers"><thead><tr><th>${K().gpu ? 'GPUs busy' : K().off ? 'Threads waiting' : 'Cores'}</th><th class="num diff-col-baseline">Baseline</th><th class="num diff-col-comparison">Comparison</th><th class="num">Change</th><th class="num">%</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function renderTrend(fn, bin) {
	const el = els.trend;
	const m = metricOf(ctx);
	const f = (data.functions || []).find((x) => x.name === fn && (x.binary || '') === bin);
	const sc = shownScopes;
	const status = f ? f.status : null;
	const badge = status === 'new' || status === 'removed' ? ` <span class="diff-badge diff-badge-${status}">${status}</span>` : '';
	const where = [f && f.binary, f && f.file].filter(Boolean).map((s) => escapeHTML(s)).join(' \u00b7 ');
	const bSpan = sc.baseline.end - sc.baseline.start, cSpan = sc.comparison.end - sc.comparison.start;
	const shift = sc.comparison.start - sc.baseline.start;
	let how = '';
	if (bSpan !== cSpan) how = 'The ranges differ in length: the baseline is stretched over the comparison\u2019s, points line up by their position in the range.';
	el.innerHTML = `<div class="diff-trend-head">
		<h2><span class="diff-trend-name">${escapeHTML(fn)}</span>${badge}</h2>
		<button type="button" class="diff-trend-close" title="Close (Escape)" aria-label="Close the trend">\u00d7</button>
	</div>
	${where ? `<p class="diff-trend-where muted">${where}</p>` : ''}
	${f ? numbersTable(f) : '<p class="muted">Not among the functions of this comparison.</p>'}
	<h3>${m === 'self' ? 'Self' : 'Total'} ${unitWord()} over time</h3>
	<div class="diff-trend-chart" data-state="${trend ? 'ready' : trendErr ? 'error' : 'loading'}"></div>
	${how ? `<p class="diff-trend-how muted">${escapeHTML(how)}</p>` : ''}
	<ul class="diff-trend-ranges">
		<li><span class="diff-dot diff-dot-baseline"></span>Baseline: ${scopeText(sc.baseline)}</li>
		<li><span class="diff-dot diff-dot-comparison"></span>Comparison: ${scopeText(sc.comparison)}</li>
	</ul>
	<p class="diff-trend-links"><button type="button" class="diff-trend-fg">Find it in the flame graph</button></p>`;
	el.hidden = false;
	els.main.classList.add('with-trend');
	el.querySelector('.diff-trend-close').addEventListener('click', closeTrend);
	const fgButton = el.querySelector('.diff-trend-fg');
	fgButton.title = `The flame graph of the page's time range${sc.comparison.query ? ' with the comparison\u2019s filter' : ''}, searching for this function`;
	fgButton.addEventListener('click', () => ctx.go('flamegraph', { q: sc.comparison.query, s: fn }));
	const box = el.querySelector('.diff-trend-chart');
	if (chart) chart.destroy();
	chart = null;
	if (trendErr) {
		box.innerHTML = apiErrorHTML(trendErr);
		return;
	}
	if (!trend) {
		box.innerHTML = '<p class="diff-trend-loading muted">Loading it over time\u2026</p>';
		return;
	}
	const bName = bSpan !== cSpan ? 'Baseline (stretched)' : shift ? `Baseline (${fmtDuration(Math.abs(shift))} ${shift > 0 ? 'earlier' : 'later'})` : 'Baseline';
	chart = timeChart(box, {
		start_ts: trend.comparison.start,
		bucket_ms: trend.comparison.bucket_ms,
		series: [
			{ name: bName, values: trend.baseline[m], color: COLOR.baseline },
			{ name: 'Comparison', values: trend.comparison[m], color: COLOR.comparison },
		],
		unit: unitWord(),
		height: 150,
		format: fmtCores,
	});
}

// --- the view -----------------------------------------------------------------

export default {
	id: 'diff',
	title: 'Diff',
	show(r, c) {
		ctx = c;
		if (root !== r || !els || !r.contains(els.form)) build(r);
		const sc = resolveScopes(c);
		els.pageQuery.hidden = !c.q;
		els.pageQuery.innerHTML = c.q ? `Both scopes also apply the page\u2019s query <code>${escapeHTML(c.q)}</code>` : '';
		const key = keyOf(c, sc);
		if (key !== dataKey || force) {
			force = false;
			dataKey = key;
			syncForm(sc);
			load(sc);
			return;
		}
		if (phase === 'ready') {
			renderResults();
			updateTrend();
		}
		syncState();
	},
	hide() {
		if (diffCtl) {
			diffCtl.abort();
			diffCtl = null;
			dataKey = ''; // fetch again when shown
		}
		if (trendCtl) {
			trendCtl.abort();
			trendCtl = null;
			trendKey = '';
		}
	},
};
