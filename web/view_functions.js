// view_functions.js - the "Top functions" view of ember's UI.
//
// A table of the hottest functions of the top bar's time range and query
// (the top_functions API): self and total in cores and percent, sortable by
// either, narrowed by a search (substring or /regex/), in relative or
// absolute CPU % mode. Clicking a function (or Enter on its row) opens its
// sandwich view (the sandwich API): the function's own values, its callers
// as an inverted tree (the function on top, the functions that called it
// below) and its callees as a tree under it.
//
// GPU time (the Show switch on GPU time, kind cuda): the same table in GPU
// time and GPU %, self only on the CUDA frames (the kernels, copies,
// memsets and syncs; CPU frames launch GPU work and never run it), and a
// "Top kernels" switch (only=kernels) that lists those CUDA frames alone,
// ranked by GPU time (the API's frame_types).
//
// The view's URL parameters: sort (self|total), search, mode (absolute),
// limit (rows shown), only (kernels), and fn + bin (the function of the
// sandwich), so that a copied link restores what is on screen.

import { apiErrorHTML, emptyHTML, errorHTML, escapeHTML, fmtInt, fmtPct, kindInfo, messageHTML, sortableTable, loadStylesheet, KERNEL_TYPES } from './common.js';
import { baseColor, typeLabel } from './flamegraph.js';

const LIMITS = [100, 500, 1000, 5000, 10000];
const DEFAULT_LIMIT = 100;
const MAX_LIMIT = 100000; // the server's FN_MAX_LIMIT
const SANDWICH_NODES = 2000;
const EXPAND_LEVELS = 4; // levels of the hottest paths open at first
const EXPAND_CHAIN = 12; // an only child is opened down to this level
const EXPAND_SHARE = 0.2; // a child this share of the function is opened too
const SEARCH_DELAY_MS = 300;
const CHUNK = 500; // table rows drawn at a time

loadStylesheet('view_functions.css');

// --- state ---------------------------------------------------------------------

let ctx = null; // the latest context from app.js
let root = null; // the view's <section>
let el = null; // the view's elements, built once per root
let params = null; // the view's parameters of the latest show()
const loaded = { list: { key: '', data: null, error: null }, sandwich: { key: '', data: null, error: null } };
let pending = null; // { kind, key, ctl } of the running request
let refresh = false; // the top bar's Refresh was pressed: fetch again
let searchTimer = 0;
let toastTimer = 0;
let listScroll = 0; // where the list was scrolled when a sandwich opened
let focusAfter = null; // 'sandwich', or { name, binary } of the row to focus
let list = null; // the table on screen: { data, fns, shown, tbody, more, all }

// --- formatting ----------------------------------------------------------------

// The page's event kind (the Show switch): how values are named and
// formatted (common.js kindInfo). On-CPU: samples and cores; off-CPU:
// nanoseconds waited and threads waiting on average.
let K = kindInfo('on_cpu');

// Cores in the units of the reference (mc, c, kc, Mc), or threads waiting.
function coresText(c) {
	return K.rateText(c);
}

// The values of a scope (an API answer's `scope`) in cores (threads
// waiting) and in the percent of a CPU mode, as the server computes them.
function coresOf(samples, scope) {
	return K.rateOf(samples, scope);
}

function percentOf(samples, scope, mode) {
	if (mode === 'absolute' && !K.off) {
		const c = coresOf(samples, scope);
		return c === null || !scope.host_cpus ? null : (100 * c) / scope.host_cpus;
	}
	return scope && scope.all_total ? (100 * samples) / scope.all_total : null;
}

function secondsText(s) {
	if (s < 90) return `${Number(s.toPrecision(3))} s`;
	if (s < 5400) return `${Number((s / 60).toPrecision(3))} min`;
	if (s < 2 * 86400) return `${Number((s / 3600).toPrecision(3))} h`;
	return `${Number((s / 86400).toPrecision(3))} days`;
}

// What a percent means in a mode, for the line under the toolbar.
function modeNote(scope, mode) {
	if (!scope) return '';
	const range = ctx.rangeText || 'the time range';
	const span = ctx.seconds && Math.abs(scope.seconds - ctx.seconds) > 0.01 * ctx.seconds
		? `the ${secondsText(scope.seconds)} of ${range} that hold samples`
		: range;
	if (K.gpu) {
		const all = `${K.fmtValue(scope.all_total)} (${K.fmtRate(coresOf(scope.all_total, scope))} busy on average)`;
		const q = (ctx.q || '').trim() ? ', whether they match the query or not' : '';
		return `GPU time: how long the GPUs ran CUDA kernels, copies, memsets and syncs. GPU %: the share of all ${all} the project recorded in ${range}${q}. Self: time on the GPU in the CUDA frame itself (zero for CPU code, which only launches GPU work); total: the GPU time of everything the function launched.`;
	}
	if (K.off) {
		const all = `${K.fmtValue(scope.all_total)} (${K.fmtRate(coresOf(scope.all_total, scope))})`;
		const q = (ctx.q || '').trim() ? ', whether they match the query or not' : '';
		return `Off-CPU: time threads spent waiting (locks, sleeps, I/O). Wait %: the share of all ${all} the project recorded in ${range}${q}. Threads waiting (thr): threads blocked on average over ${span}. Self: waiting in the function itself; total: with the functions it calls.`;
	}
	const cores = `Cores: CPU cores used on average over ${span}. Self: in the function's own code; total: with the functions it calls.`;
	if (mode === 'absolute') {
		if (!scope.host_cpus)
			return `Absolute CPU %: the hosts did not report how many CPUs they have, so the percentages are unknown (\u2013); Relative mode still works. ${cores}`;
		return `Absolute CPU %: the share of the ${fmtInt(scope.host_cpus)} logical CPUs of the ${fmtInt(scope.hosts)} host${scope.hosts === 1 ? '' : 's'} that sent samples, as htop shows it (100% = all of them busy). ${cores}`;
	}
	const all = `${K.fmtValue(scope.all_total)} (${K.fmtRate(coresOf(scope.all_total, scope))})`;
	const q = (ctx.q || '').trim() ? ', whether they match the query or not' : '';
	return `Relative CPU %: the share of all ${all} the project recorded in ${range}${q}. ${cores}`;
}

// --- small DOM helpers -------------------------------------------------------

function make(tag, className, text) {
	const e = document.createElement(tag);
	if (className) e.className = className;
	if (text !== undefined) e.textContent = text;
	return e;
}

function swatchHTML(type) {
	return `<span class="swatch fn-swatch" style="background:${baseColor(type)}" title="${escapeHTML(typeLabel(type))} frame" role="img" aria-label="${escapeHTML(typeLabel(type))}"></span>`;
}

function swatch(type) {
	const s = make('span', 'swatch fn-swatch');
	s.style.background = baseColor(type);
	s.title = `${typeLabel(type)} frame`;
	s.setAttribute('role', 'img');
	s.setAttribute('aria-label', typeLabel(type));
	return s;
}

// --- the view's parameters and the requests --------------------------------

function readParams(c) {
	const sort = c.param('sort') === 'total' ? 'total' : 'self';
	const mode = c.param('mode') === 'absolute' ? 'absolute' : 'relative';
	let limit = parseInt(c.param('limit') || '', 10);
	if (!(limit > 0)) limit = DEFAULT_LIMIT;
	limit = Math.min(limit, MAX_LIMIT);
	const kernels = c.kind === 'cuda' && c.param('only') === 'kernels';
	return { sort, mode, limit, kernels, search: c.param('search') || '', fn: c.param('fn') || '', bin: c.param('bin') || '' };
}

function rangeKey(c) {
	return c.range === 'custom' ? [c.range, c.start_ts, c.end_ts] : [c.range];
}

// The API's `search` (PCRE2) for what a user typed: /re/ (add i to ignore
// case) as it is, any other text a case-insensitive substring.
export function searchPattern(term) {
	const t = term.trim();
	if (!t) return null;
	const m = /^\/(.+)\/([a-z]*)$/.exec(t);
	if (m) return (m[2].includes('i') ? '(?i)' : '') + m[1];
	return '(?i)' + t.replace(/[\\^$.|?*+()[\]{}]/g, '\\$&');
}

function listKey(c, p) {
	return JSON.stringify([c.project, c.kind, ...rangeKey(c), (c.q || '').trim(), p.sort, p.search, p.mode, p.limit, p.kernels]);
}

function sandwichKey(c, p) {
	return JSON.stringify([c.project, c.kind, ...rangeKey(c), (c.q || '').trim(), p.fn, p.bin, p.mode]);
}

// Fetches what `kind` shows for `key` unless it is loaded (or loading);
// render() draws the slot, whatever it holds.
function ensure(kind, key, body, render) {
	const slot = loaded[kind];
	const again = refresh;
	refresh = false;
	if (!again && slot.key === key) return render(false);
	if (!again && pending && pending.kind === kind && pending.key === key) return;
	if (pending) pending.ctl.abort();
	const ctl = new AbortController();
	const mine = { kind, key, ctl, mode: body.cpu_mode };
	pending = mine;
	ctx.setState('loading');
	render(true);
	const name = kind === 'list' ? 'top_functions' : 'sandwich';
	const c = ctx;
	c.api(name, { filter: c.filter(), ...body }, ctl.signal).then(
		(data) => done(mine, data, null, render),
		(e) => {
			if (e && e.name === 'AbortError') return;
			done(mine, null, e, render);
		}
	);
}

function done(mine, data, error, render) {
	if (pending !== mine) return;
	pending = null;
	loaded[mine.kind] = { key: mine.key, data, error, mode: mine.mode };
	render(false);
}

function loadingHTML(what) {
	return messageHTML('info', `Loading ${escapeHTML(what)}\u2026`);
}

// --- the view's skeleton -------------------------------------------------------

function build(r) {
	root = r;
	r.innerHTML = `
<div class="fn-list">
  <div class="toolbar fn-toolbar">
    <div class="field">
      <label for="fn-search">Search functions</label>
      <input id="fn-search" type="search" spellcheck="false" autocomplete="off" autocapitalize="off"
             placeholder="substring or /regex/" aria-describedby="fn-search-help">
      <span id="fn-search-help" class="visually-hidden">Text matches function names containing it, ignoring case; /regex/ is a regular expression. Applies as you type; press / to come here.</span>
    </div>
    <div class="fn-mode" role="group" aria-label="CPU % mode"></div>
    <div class="fn-only" role="group" aria-label="What to list" hidden>
      <button type="button" class="fn-only-btn" data-only="functions" title="Every function: CPU code by the GPU time it launched, CUDA frames by the time they ran">Functions</button>
      <button type="button" class="fn-only-btn" data-only="kernels" title="Only the GPU work itself (kernels, copies, memsets, syncs), ranked by GPU time">Top kernels</button>
    </div>
    <div class="field">
      <label for="fn-limit">Rows</label>
      <select id="fn-limit"></select>
    </div>
    <span class="fn-summary" aria-live="polite"></span>
  </div>
  <div class="view-body">
    <p class="fn-note"></p>
    <div class="fn-content"></div>
  </div>
</div>
<div class="fn-sandwich" hidden>
  <div class="toolbar fn-sw-bar">
    <button type="button" class="fn-back">\u2190 Back to top functions</button>
    <div class="fn-mode" role="group" aria-label="CPU % mode"></div>
    <span class="fn-sw-actions">
      <a class="fn-open-fg" href="./">Open in flamegraph</a>
      <button type="button" class="fn-copy">Copy name</button>
    </span>
  </div>
  <div class="view-body fn-sw-body"></div>
</div>
<div class="fn-toast" role="status" aria-live="polite" hidden></div>`;
	const $ = (s) => r.querySelector(s);
	el = {
		list: $('.fn-list'),
		search: $('#fn-search'),
		limit: $('#fn-limit'),
		summary: $('.fn-summary'),
		note: $('.fn-list .fn-note'),
		content: $('.fn-content'),
		sandwich: $('.fn-sandwich'),
		back: $('.fn-back'),
		openFg: $('.fn-open-fg'),
		copy: $('.fn-copy'),
		swBody: $('.fn-sw-body'),
		toast: $('.fn-toast'),
		modes: [...r.querySelectorAll('.fn-mode')],
		only: $('.fn-only'),
	};
	for (const b of el.only.querySelectorAll('button'))
		b.addEventListener('click', () => ctx.setParams({ only: b.dataset.only === 'kernels' ? 'kernels' : null, sort: null }, true));
	// The table's header sticks under the page's sticky top bar.
	const bar = document.querySelector('.topbar');
	if (bar && window.ResizeObserver)
		new ResizeObserver(() => r.style.setProperty('--fn-sticky-top', `${bar.offsetHeight}px`)).observe(bar);
	for (const group of el.modes) {
		const label = make('span', 'fn-mode-label', 'CPU %');
		label.setAttribute('aria-hidden', 'true');
		group.append(label);
		for (const [mode, text, title] of [
			['relative', 'Relative', 'Percent of all the CPU time the project recorded'],
			['absolute', 'Absolute', 'Percent of the CPUs of the hosts, as htop shows it'],
		]) {
			const b = make('button', 'fn-mode-btn', text);
			b.type = 'button';
			b.dataset.mode = mode;
			b.title = title;
			b.addEventListener('click', () => ctx.setParams({ mode: mode === 'absolute' ? 'absolute' : null }, true));
			group.append(b);
		}
	}
	el.search.addEventListener('input', () => {
		clearTimeout(searchTimer);
		searchTimer = setTimeout(applySearch, SEARCH_DELAY_MS);
	});
	el.search.addEventListener('keydown', (ev) => {
		if (ev.key === 'Enter') {
			ev.preventDefault();
			applySearch();
		} else if (ev.key === 'Escape' && el.search.value) {
			ev.preventDefault();
			el.search.value = '';
			applySearch();
		}
	});
	el.limit.addEventListener('change', () => setLimit(Number(el.limit.value)));
	el.content.addEventListener('click', onListClick);
	el.content.addEventListener('keydown', onListKey);
	el.back.addEventListener('click', closeSandwich);
	el.openFg.addEventListener('click', (ev) => {
		if (ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) return;
		ev.preventDefault();
		ctx.go('flamegraph', { q: ctx.q, s: params.fn });
	});
	el.copy.addEventListener('click', () => copyName(params.fn, el.copy));
}

function syncToolbar(p) {
	if (document.activeElement !== el.search) el.search.value = p.search;
	el.search.classList.remove('invalid');
	const options = LIMITS.includes(p.limit) ? LIMITS : [...LIMITS, p.limit].sort((a, b) => a - b);
	if (el.limit.options.length !== options.length || [...el.limit.options].some((o, i) => Number(o.value) !== options[i]))
		el.limit.replaceChildren(...options.map((n) => new Option(`top ${fmtInt(n)}`, String(n))));
	el.limit.value = String(p.limit);
	el.only.hidden = !K.gpu;
	for (const b of el.only.querySelectorAll('button'))
		b.setAttribute('aria-pressed', String((b.dataset.only === 'kernels') === p.kernels));
	el.search.placeholder = p.kernels ? 'kernel: substring or /regex/' : 'substring or /regex/';
	for (const group of el.modes) {
		// Absolute CPU % has no meaning for time waited: off-CPU is relative.
		group.hidden = K.off;
		for (const b of group.querySelectorAll('button')) b.setAttribute('aria-pressed', String(b.dataset.mode === p.mode));
	}
}

function applySearch() {
	clearTimeout(searchTimer);
	const v = el.search.value.trim();
	if (v === params.search) return;
	ctx.setParams({ search: v || null }, false);
}

function setLimit(n) {
	ctx.setParams({ limit: n === DEFAULT_LIMIT ? null : n }, true);
}

// --- the list ------------------------------------------------------------------

const COLUMNS_ON = [
	{ key: 'name', label: 'Function', render: nameCell },
	{ key: 'binary', label: 'Binary / file', render: binaryCell },
	{ key: 'self_cores', label: 'Self', num: true, sort: 'self', title: 'Cores used in the function\u2019s own code (average over the range); click to sort by self', render: (f) => coresCell(f.self_cores, f.self) },
	{ key: 'self_percent', label: 'Self %', num: true, sort: 'self', title: 'CPU % of the function\u2019s own code; click to sort by self', render: (f) => fmtPct(f.self_percent) },
	{ key: 'total_cores', label: 'Total', num: true, sort: 'total', title: 'Cores used in the function and everything it calls; click to sort by total', render: (f) => coresCell(f.total_cores, f.total) },
	{ key: 'total_percent', label: 'Total %', num: true, sort: 'total', title: 'CPU % of the function and everything it calls; click to sort by total', render: (f) => fmtPct(f.total_percent) },
	{ key: 'share', label: 'Share', title: 'Share of all samples of the sorted value', render: shareCell },
	{ key: 'actions', label: 'Actions', render: actionsCell },
];
// Off-CPU: the same columns in time waited and threads waiting.
const COLUMNS_OFF = COLUMNS_ON.map((c) => ({
	...c,
	...({
		self_cores: { label: 'Self waiting', title: 'Threads waiting in the function itself (average over the range; hover: time waited); click to sort by self' },
		self_percent: { label: 'Self wait %', title: 'Share of all the time waited, in the function itself; click to sort by self' },
		total_cores: { label: 'Total waiting', title: 'Threads waiting in the function and everything it calls; click to sort by total' },
		total_percent: { label: 'Total wait %', title: 'Share of all the time waited, in the function and everything it calls; click to sort by total' },
		share: { title: 'Share of all the time waited of the sorted value' },
	})[c.key],
}));
// GPU time: durations and GPU %, as the reference's GPU Top Functions.
const COLUMNS_GPU = COLUMNS_ON.map((c) => ({
	...c,
	...({
		self_cores: { label: 'Self GPU time', title: 'Time on the GPU in this CUDA frame itself (zero for CPU code: it launches GPU work, it does not run it); hover: GPUs busy; click to sort by self', render: (f) => timeCell(f.self, f.self_cores) },
		self_percent: { label: 'Self GPU %', title: 'Share of all GPU time, in this CUDA frame itself; click to sort by self' },
		total_cores: { label: 'Total GPU time', title: 'GPU time of everything the function launched (CPU code) or ran (CUDA frames); hover: GPUs busy; click to sort by total', render: (f) => timeCell(f.total, f.total_cores) },
		total_percent: { label: 'Total GPU %', title: 'Share of all GPU time, of everything the function launched or ran; click to sort by total' },
		share: { title: 'Share of all GPU time of the sorted value' },
	})[c.key],
}));
// Top kernels: the GPU work itself, whose self is its total.
const COLUMNS_KERNELS = [
	{ key: 'name', label: 'Kernel', render: nameCell },
	{ key: 'frame_type', label: 'Kind', render: (f) => typeLabel(f.frame_type) },
	{ key: 'self_cores', label: 'GPU time', num: true, sort: 'self', title: 'Time the GPUs spent running it (hover: GPUs busy on average)', render: (f) => timeCell(f.self, f.self_cores) },
	{ key: 'self_percent', label: 'GPU %', num: true, sort: 'self', title: 'Share of all GPU time', render: (f) => fmtPct(f.self_percent) },
	{ key: 'gpus', label: 'GPUs busy', num: true, title: 'GPUs busy with it on average over the range', render: (f) => K.fmtRate(f.self_cores) },
	{ key: 'share', label: 'Share', title: 'Share of all GPU time', render: shareCell },
	{ key: 'actions', label: 'Actions', render: actionsCell },
];
let COLUMNS = COLUMNS_ON;
let shareOf = { total: 0, sort: 'self' }; // what the share bars of the current render measure

function nameCell(f) {
	const wrap = make('span', 'fn-name');
	wrap.append(swatch(f.frame_type), make('span', 'fn-name-text', f.name));
	return wrap;
}

function binaryCell(f) {
	const wrap = make('span', 'fn-bin');
	wrap.append(make('span', 'fn-bin-name', f.binary || '\u2013'));
	if (f.file) wrap.append(make('span', 'fn-file', f.file));
	return wrap;
}

function coresCell(c, samples) {
	const s = make('span', null, K.fmtRate(c));
	s.title = `${coresText(c)} \u00b7 ${K.fmtValue(samples)}`;
	return s;
}

function timeCell(ns, gpus) {
	const s = make('span', null, K.fmtValue(ns));
	s.title = `${K.fmtValue(ns)} \u00b7 ${coresText(gpus)}`;
	return s;
}

function shareCell(f) {
	const v = shareOf.sort === 'total' ? f.total : f.self;
	const share = shareOf.total > 0 ? v / shareOf.total : 0;
	const track = make('span', 'fn-share');
	track.title = `${fmtPct(100 * share)} of all ${K.valueWord} (${shareOf.sort})`;
	const bar = make('span', 'bar');
	bar.style.width = share > 0 ? `max(1px, ${Math.min(100, 100 * share)}%)` : '0';
	track.append(bar);
	return track;
}

function actionsCell() {
	const wrap = make('span', 'fn-actions');
	const fg = make('button', 'fn-action', 'Flamegraph');
	fg.type = 'button';
	fg.dataset.action = 'flamegraph';
	fg.title = 'Filter flamegraph to this function';
	const copy = make('button', 'fn-action', 'Copy name');
	copy.type = 'button';
	copy.dataset.action = 'copy';
	copy.title = 'Copy the function\u2019s name';
	wrap.append(fg, copy);
	return wrap;
}

function showList(p) {
	el.list.hidden = false;
	el.sandwich.hidden = true;
	document.title = 'Top functions \u00b7 ember';
	const body = { sort: p.sort, limit: p.limit, cpu_mode: p.mode, search: searchPattern(p.search) };
	if (p.kernels) body.frame_types = KERNEL_TYPES;
	ensure('list', listKey(ctx, p), body, renderList);
}

function renderList(loading) {
	if (!params || params.fn) return;
	const slot = loaded.list;
	if (loading) {
		if (el.content.querySelector('table')) el.content.classList.add('stale');
		else {
			el.content.innerHTML = loadingHTML('top functions');
			el.summary.textContent = '';
			el.note.textContent = '';
		}
		return;
	}
	el.content.classList.remove('stale');
	if (slot.error) {
		const e = slot.error;
		const bySearch = e.status === 400 && /^search\b/.test(e.message || '');
		if (bySearch) {
			el.search.classList.add('invalid');
			el.content.innerHTML = errorHTML('The search is not a valid regular expression', e.message);
		} else el.content.innerHTML = apiErrorHTML(e);
		el.summary.textContent = '';
		el.note.textContent = '';
		ctx.setState('error');
		return;
	}
	const data = slot.data;
	if (!data || !(data.total > 0)) {
		el.content.innerHTML = emptyHTML(ctx.rangeText || ctx.range, ctx.q, ctx.kind);
		el.summary.textContent = '';
		el.note.textContent = '';
		ctx.setState('empty');
		return;
	}
	if (list && list.data === data && el.content.contains(list.tbody)) {
		// What is on screen answers this already (back from a sandwich).
		ctx.setState('ready');
		return restoreListFocus();
	}
	list = null;
	const fns = data.functions || [];
	const sort = params.sort;
	el.note.textContent = modeNote(data.scope, slot.mode);
	const shown = fns.length;
	const all = data.functions_total;
	const noun = params.kernels ? 'kernel' : 'function';
	el.summary.textContent = `${fmtInt(all)} ${noun}${all === 1 ? '' : 's'}${params.search ? ' match' : ''}` +
		(shown < all ? ` \u00b7 top ${fmtInt(shown)} by ${sort}` : ` \u00b7 by ${sort}`);
	if (!fns.length && params.kernels && !params.search) {
		el.content.innerHTML = messageHTML('empty', `<p>The GPU time of ${escapeHTML(ctx.rangeText || 'this time range')} has no kernel, copy, memset or sync frames.</p><p>Switch to Functions to see every frame.</p>`);
		ctx.setState('ready');
		return;
	}
	if (!fns.length) {
		el.content.innerHTML = messageHTML('empty', `<p>No ${params.kernels ? 'kernel' : 'function'} matches <code>${escapeHTML(params.search)}</code> in ${escapeHTML(ctx.rangeText || 'this time range')}.</p><p>Text matches any part of a name, ignoring case; <code>/regex/</code> is a regular expression (PCRE2).</p>`);
		ctx.setState('ready');
		return;
	}
	shareOf = { total: data.scope && data.scope.all_total ? data.scope.all_total : data.total, sort };
	const table = buildTable([]);
	const wrap = make('div', 'fn-table-wrap');
	wrap.append(table);
	const more = make('div', 'fn-more');
	list = { data, fns, shown: 0, tbody: table.tBodies[0], more, all };
	el.content.replaceChildren(wrap, more);
	appendRows(Math.max(CHUNK, focusAfter && focusAfter.index !== undefined ? focusAfter.index + CHUNK : 0, wantedRow(fns) + 1));
	ctx.setState('ready');
	restoreListFocus();
}

// A table of rows (sortableTable) with the headers this view wants: only
// self and total sort, both columns of the current order marked.
function buildTable(fns) {
	const table = sortableTable(COLUMNS, fns, {
		sortKey: params.sort + '_cores',
		onSort: (key) => {
			const c = COLUMNS.find((x) => x.key === key);
			if (c && c.sort && c.sort !== params.sort) ctx.setParams({ sort: c.sort === 'self' ? null : c.sort }, true);
		},
		onRow: (f, ev) => {
			if (ev.target.closest('button, a')) return;
			openSandwich(f);
		},
		rowTitle: 'Open the sandwich view: its callers and callees',
	});
	table.classList.add('fn-table');
	if (K.off) table.classList.add('fn-off');
	for (const th of table.tHead.rows[0].cells) {
		const c = COLUMNS.find((x) => x.key === th.dataset.key);
		if (c.title) th.title = c.title;
		if (!c.sort) {
			th.removeAttribute('tabindex');
			th.removeAttribute('role');
			th.removeAttribute('aria-sort');
		} else th.setAttribute('aria-sort', c.sort === params.sort ? 'descending' : 'none');
		if (c.key === 'actions') th.innerHTML = '<span class="visually-hidden">Actions</span>';
	}
	return table;
}

// Draws up to n more of the fetched rows: a long list is drawn a part at a
// time, as "Show more" asks for it, not all at once.
function appendRows(n) {
	const { fns } = list;
	const from = list.shown, to = Math.min(fns.length, from + n);
	if (to > from) {
		const rows = [...buildTable(fns.slice(from, to)).tBodies[0].rows];
		rows.forEach((tr, k) => {
			const f = fns[from + k];
			tr.dataset.index = String(from + k);
			tr.setAttribute('aria-label', `${f.name}${f.binary ? ' in ' + f.binary : ''}: self ${fmtPct(f.self_percent)}, total ${fmtPct(f.total_percent)}. Enter opens callers and callees.`);
		});
		list.tbody.append(...rows);
		list.shown = to;
	}
	updateMore();
}

// The line under the table: how many are shown, and a button for more
// (drawn from what was fetched, else fetched with a larger limit).
function updateMore() {
	const { more, shown, fns, all } = list;
	more.replaceChildren();
	more.hidden = shown >= all;
	if (more.hidden) return;
	more.append(make('span', null, `Showing the top ${fmtInt(shown)} of ${fmtInt(all)} functions.`));
	let count, action;
	if (shown < fns.length) {
		count = Math.min(CHUNK, fns.length - shown);
		action = () => {
			const first = list.shown;
			appendRows(CHUNK);
			const row = list.tbody.rows[first];
			if (row) row.focus();
		};
	} else {
		const next = LIMITS.find((x) => x > params.limit) || Math.min(MAX_LIMIT, params.limit * 2);
		if (next <= params.limit) return;
		count = Math.min(next, all) - shown;
		action = () => {
			focusAfter = { index: shown };
			setLimit(next);
		};
	}
	const b = make('button', 'fn-show-more', `Show ${fmtInt(count)} more`);
	b.type = 'button';
	b.addEventListener('click', action);
	more.append(b);
}

// The index of the row to focus when the list is drawn again (back from a
// sandwich), or -1.
function wantedRow(fns, want = focusAfter) {
	if (!want || want === 'sandwich' || want.name === undefined) return -1;
	return fns.findIndex((f) => f.name === want.name && (f.binary || '') === (want.binary || ''));
}

function restoreListFocus() {
	const want = focusAfter;
	if (!want || want === 'sandwich' || !list) return;
	focusAfter = null;
	const i = want.index !== undefined ? Math.min(want.index, list.shown - 1) : wantedRow(list.fns, want);
	if (want.scroll !== undefined) window.scrollTo(0, want.scroll);
	const row = i >= 0 ? list.tbody.rows[i] : null;
	if (row) row.focus({ preventScroll: want.scroll !== undefined });
}

function rowFunction(tr) {
	return tr && list ? list.fns[Number(tr.dataset.index)] : null;
}

function onListClick(ev) {
	const b = ev.target.closest('button[data-action]');
	if (!b) return;
	const f = rowFunction(b.closest('tr'));
	if (!f) return;
	if (b.dataset.action === 'flamegraph') ctx.go('flamegraph', { q: ctx.q, s: f.name });
	else if (b.dataset.action === 'copy') copyName(f.name, b);
}

// Arrow keys move between the rows; Home and End to the first and last.
function onListKey(ev) {
	const tr = ev.target.closest && ev.target.closest('tbody tr');
	if (!tr || ev.target !== tr) return;
	let next = null;
	if (ev.key === 'ArrowDown') next = tr.nextElementSibling;
	else if (ev.key === 'ArrowUp') next = tr.previousElementSibling;
	else if (ev.key === 'Home') next = tr.parentElement.firstElementChild;
	else if (ev.key === 'End') next = tr.parentElement.lastElementChild;
	else return;
	ev.preventDefault();
	if (next) next.focus();
}

function openSandwich(f) {
	listScroll = window.scrollY;
	focusAfter = 'sandwich';
	ctx.setParams({ fn: f.name, bin: f.binary || null }, true);
}

function closeSandwich() {
	focusAfter = { name: params.fn, binary: params.bin, scroll: listScroll };
	ctx.setParams({ fn: null, bin: null }, true);
}

// --- the sandwich ----------------------------------------------------------------

function showSandwich(p) {
	el.list.hidden = true;
	el.sandwich.hidden = false;
	document.title = `${p.fn} \u00b7 Top functions \u00b7 ember`;
	el.openFg.href = flamegraphHref(p.fn);
	el.openFg.title = `The flamegraph of the same range and query, searching ${p.fn}`;
	const body = { function: p.fn, binary: p.bin || null, max_nodes: SANDWICH_NODES, cpu_mode: p.mode };
	ensure('sandwich', sandwichKey(ctx, p), body, renderSandwich);
}

// The address of the flamegraph view searching name (for a new tab; a
// plain click goes through ctx.go).
function flamegraphHref(name) {
	const cur = new URLSearchParams(location.search);
	const p = new URLSearchParams();
	for (const k of ['project', 'range', 'from', 'to', 'group', 'kind', 'q']) for (const v of cur.getAll(k)) p.append(k, v);
	p.set('s', name);
	return `${location.pathname}?${p}`;
}

function renderSandwich(loading) {
	if (!params || !params.fn) return;
	const slot = loaded.sandwich;
	const body = el.swBody;
	if (loading) {
		if (body.querySelector('.fn-sw-head') && body.dataset.fn === params.fn) body.classList.add('stale');
		else body.innerHTML = loadingHTML(`the callers and callees of ${params.fn}`);
		return;
	}
	body.classList.remove('stale');
	body.dataset.fn = params.fn;
	if (slot.error) {
		body.innerHTML = headHTML(null) + apiErrorHTML(slot.error);
		ctx.setState('error');
		return focusSandwich();
	}
	const data = slot.data;
	if (!data || !(data.total > 0)) {
		body.innerHTML = headHTML(null) + emptyHTML(ctx.rangeText || ctx.range, ctx.q, ctx.kind);
		ctx.setState('empty');
		return focusSandwich();
	}
	const fn = data.function;
	if (!(fn.total > 0)) {
		const where = (ctx.q || '').trim() ? ` matching the query <code>${escapeHTML(ctx.q.trim())}</code>` : '';
		body.innerHTML = headHTML(null) + messageHTML('empty',
			`<p><code>${escapeHTML(params.fn)}</code>${params.bin ? ` in <code>${escapeHTML(params.bin)}</code>` : ''} has no ${K.off ? 'off-CPU samples' : 'samples'} in ${escapeHTML(ctx.rangeText || 'this time range')}${where}.</p><p>Pick a longer time range, or go back to the top functions.</p>`);
		ctx.setState('empty');
		return focusSandwich();
	}
	const type = typeOf();
	body.innerHTML = headHTML(fn, type, data) + `<p class="fn-note">${escapeHTML(modeNote(data.scope, slot.mode))}</p>`;
	const info = { scope: data.scope, mode: slot.mode, fnTotal: fn.total, name: fn.name, type };
	body.append(
		treePanel('callers', 'Callers', `The paths that lead to ${fn.name}: the function on top, below it the functions that called it, then their callers.`, data.callers, info),
		treePanel('callees', 'Callees', `What ${fn.name} calls: the function on top, below it its own code (self) and the functions it called, then theirs.`, data.callees, info)
	);
	ctx.setState('ready');
	focusSandwich();
}

// The function's frame type: as the table listed it, when it is there
// (the sandwich API does not say); null when unknown.
function typeOf() {
	const fns = loaded.list.data && loaded.list.data.functions;
	const f = fns && fns.find((x) => x.name === params.fn && (x.binary || '') === params.bin);
	return f ? f.frame_type : null;
}

function focusSandwich() {
	if (focusAfter !== 'sandwich') return;
	focusAfter = null;
	window.scrollTo(0, 0);
	const h = el.swBody.querySelector('h2');
	if (h) h.focus({ preventScroll: true });
}

function headHTML(fn, type, data) {
	const name = `<h2 class="fn-sw-name" tabindex="-1">${fn && type ? swatchHTML(type) : ''}<span>${escapeHTML(params.fn)}</span></h2>`;
	const bin = params.bin ? `<div class="fn-sw-bin">in <span>${escapeHTML(params.bin)}</span></div>` : '';
	if (!fn) return `<div class="panel fn-sw-head">${name}${bin}</div>`;
	const stat = (label, samples, cores, percent, help) => `
		<div class="fn-stat" title="${escapeHTML(help)}">
			<div class="fn-stat-label">${label}</div>
			<div class="fn-stat-value">${escapeHTML(K.fmtRate(cores))}<span class="fn-stat-pct">${escapeHTML(fmtPct(percent))}</span></div>
			<div class="fn-stat-samples">${escapeHTML(K.fmtValue(samples))}</div>
		</div>`;
	const callers = data.callers.children.length, callees = data.callees.children.length;
	return `<div class="panel fn-sw-head">
		<div class="fn-sw-title">${name}${bin}</div>
		<div class="fn-stats">
			${stat('Self', fn.self, fn.self_cores, fn.self_percent, 'In the function\u2019s own code')}
			${stat('Total', fn.total, fn.total_cores, fn.total_percent, 'In the function and everything it calls')}
			<div class="fn-stat"><div class="fn-stat-label">Calls</div>
				<div class="fn-stat-small">${fmtInt(callers)} direct caller${callers === 1 ? '' : 's'}</div>
				<div class="fn-stat-small">${fmtInt(callees)} direct callee${callees === 1 ? '' : 's'}</div></div>
		</div>
	</div>`;
}

// --- the trees of the sandwich --------------------------------------------------

function treePanel(kind, title, help, node, info) {
	const panel = make('section', `panel fn-tree-panel fn-${kind}`);
	const head = make('div', 'fn-tree-head');
	const h = make('h2', null, title);
	h.id = `fn-${kind}-title`;
	const tools = make('span', 'fn-tree-tools');
	const t = { kind, root: node, info, expanded: new Set(), focus: '0', el: make('div', 'fn-tree') };
	for (const [text, fn] of [['Expand all', () => expandAll(t)], ['Collapse all', () => collapseAll(t)]]) {
		const b = make('button', 'fn-small', text);
		b.type = 'button';
		b.addEventListener('click', fn);
		tools.append(b);
	}
	head.append(h, tools);
	const p = make('p', 'fn-tree-help', help);
	const cols = make('div', 'fn-tree-row fn-tree-cols');
	cols.setAttribute('aria-hidden', 'true');
	cols.innerHTML = K.gpu
		? '<span>Function</span><span class="num">GPU time</span><span class="num">GPUs</span><span class="num">GPU %</span><span>Of the function</span>'
		: K.off
		? '<span>Function</span><span class="num">Waited</span><span class="num">Threads</span><span class="num">Wait %</span><span>Of the function</span>'
		: `<span>Function</span><span class="num">Samples</span><span class="num">Cores</span><span class="num">${info.mode === 'absolute' ? 'Abs' : 'Rel'} CPU %</span><span>Of the function</span>`;
	t.el.setAttribute('role', 'tree');
	t.el.setAttribute('aria-labelledby', h.id);
	initialExpand(t);
	t.el.addEventListener('click', (ev) => {
		const row = ev.target.closest('[role="treeitem"]');
		if (row) {
			t.focus = row.dataset.path;
			toggle(t, row.dataset.path);
		}
	});
	t.el.addEventListener('keydown', (ev) => treeKey(t, ev));
	renderTree(t, false);
	panel.append(head, p, cols, t.el);
	return panel;
}

function initialExpand(t) {
	const all = t.root.total || 1;
	const walk = (n, path, depth) => {
		const kids = n.children || [];
		if (!kids.length) return;
		if (depth >= EXPAND_LEVELS && !(kids.length === 1 && depth < EXPAND_CHAIN)) return;
		t.expanded.add(path);
		kids.forEach((c, i) => {
			if (i === 0 || c.total >= EXPAND_SHARE * all) walk(c, `${path}/${i}`, depth + 1);
		});
	};
	walk(t.root, '0', 0);
}

function nodeAt(t, path) {
	let n = t.root;
	for (const i of path.split('/').slice(1)) n = n && n.children ? n.children[Number(i)] : null;
	return n;
}

// The rows on screen: the expanded part of the tree, depth first.
function visibleRows(t) {
	const out = [];
	const walk = (n, path, depth, pos, size) => {
		out.push({ n, path, depth, pos, size });
		if (!t.expanded.has(path) || !n.children) return;
		const kids = n.children;
		// A callee's own code, first among what it called.
		const own = t.kind === 'callees' && n.self > 0 ? 1 : 0;
		if (own) out.push({ n, own: true, path: `${path}/s`, depth: depth + 1, pos: 1, size: kids.length + 1 });
		for (let i = 0; i < kids.length; i++) walk(kids[i], `${path}/${i}`, depth + 1, i + 1 + own, kids.length + own);
	};
	walk(t.root, '0', 0, 1, 1);
	return out;
}

function rowHTML(t, r) {
	if (r.own) return ownRowHTML(t, r);
	const { n, path, depth } = r;
	const { scope, mode, fnTotal } = t.info;
	const kids = n.children ? n.children.length : 0;
	const open = t.expanded.has(path);
	const share = fnTotal > 0 ? n.total / fnTotal : 0;
	const type = depth === 0 ? t.info.type : n.frame_type;
	const title = [`${n.name}`, n.binary ? `binary: ${n.binary}` : '', n.file ? `source: ${n.file}${n.line ? ':' + n.line : ''}` : '',
		`total: ${K.fmtValue(n.total)}`, t.kind === 'callees' && n.self ? `self: ${K.fmtValue(n.self)}` : ''].filter(Boolean).join('\n');
	return `<div class="fn-tree-row${depth === 0 ? ' fn-tree-root' : ''}" role="treeitem" aria-level="${depth + 1}" aria-setsize="${r.size}" aria-posinset="${r.pos}"${kids ? ` aria-expanded="${open}"` : ''} tabindex="${path === t.focus ? 0 : -1}" data-path="${path}" title="${escapeHTML(title)}">` +
		`<span class="fn-tree-name" style="--depth:${depth}"><span class="fn-twisty" aria-hidden="true">${kids ? (open ? '\u25be' : '\u25b8') : ''}</span>` +
		(type ? swatchHTML(type) : '') + `<span class="fn-node-name">${escapeHTML(n.name)}</span>` +
		(n.binary && depth > 0 ? `<span class="fn-node-bin">${escapeHTML(n.binary)}</span>` : '') + `</span>` +
		`<span class="num">${escapeHTML(valueCell(n.total))}</span>` +
		`<span class="num">${escapeHTML(K.fmtRate(coresOf(n.total, scope)))}</span>` +
		`<span class="num">${escapeHTML(fmtPct(percentOf(n.total, scope, mode)))}</span>` +
		`<span class="fn-share" aria-hidden="true"><span class="bar" style="width:${Math.min(100, 100 * share).toFixed(2)}%"></span></span></div>`;
}

// The samples of a callee in its own code (its self), not in what it called.
function ownRowHTML(t, r) {
	const { n, path, depth } = r;
	const { scope, mode, fnTotal } = t.info;
	const share = fnTotal > 0 ? n.self / fnTotal : 0;
	return `<div class="fn-tree-row fn-tree-own" role="treeitem" aria-level="${depth + 1}" aria-setsize="${r.size}" aria-posinset="${r.pos}" tabindex="${path === t.focus ? 0 : -1}" data-path="${path}" title="${escapeHTML(`${K.fmtValue(n.self)} in ${n.name}\u2019s own code, not in the functions it called`)}">` +
		`<span class="fn-tree-name" style="--depth:${depth}"><span class="fn-twisty" aria-hidden="true"></span>` +
		`<span class="fn-node-name">(own code)</span></span>` +
		`<span class="num">${escapeHTML(valueCell(n.self))}</span>` +
		`<span class="num">${escapeHTML(K.fmtRate(coresOf(n.self, scope)))}</span>` +
		`<span class="num">${escapeHTML(fmtPct(percentOf(n.self, scope, mode)))}</span>` +
		`<span class="fn-share" aria-hidden="true"><span class="bar" style="width:${Math.min(100, 100 * share).toFixed(2)}%"></span></span></div>`;
}

// A tree row's value: samples, or time waited (off-CPU).
function valueCell(v) {
	return K.off ? K.fmtValue(v).replace(/ waited$/, '') : fmtInt(v);
}

function renderTree(t, keepFocus) {
	const rows = visibleRows(t);
	if (!rows.some((r) => r.path === t.focus)) t.focus = '0';
	t.el.innerHTML = rows.map((r) => rowHTML(t, r)).join('');
	if (keepFocus) {
		const row = t.el.querySelector(`[data-path="${t.focus}"]`);
		if (row) row.focus();
	}
}

function toggle(t, path) {
	const n = nodeAt(t, path);
	if (n && n.children && n.children.length) {
		if (t.expanded.has(path)) t.expanded.delete(path);
		else t.expanded.add(path);
	}
	renderTree(t, true);
}

function expandAll(t) {
	const walk = (n, path) => {
		if (!n.children || !n.children.length) return;
		t.expanded.add(path);
		n.children.forEach((c, i) => walk(c, `${path}/${i}`));
	};
	walk(t.root, '0');
	renderTree(t, false);
}

function collapseAll(t) {
	t.expanded = new Set(['0']);
	renderTree(t, false);
}

// The keys of a tree (WAI-ARIA): up and down move, right opens or goes to
// the first child, left closes or goes to the parent, Enter toggles.
function treeKey(t, ev) {
	const row = ev.target.closest('[role="treeitem"]');
	if (!row) return;
	const path = row.dataset.path;
	const n = nodeAt(t, path);
	const open = t.expanded.has(path);
	const hasKids = n && n.children && n.children.length > 0;
	const move = (target) => {
		if (!target) return;
		row.tabIndex = -1;
		target.tabIndex = 0;
		t.focus = target.dataset.path;
		target.focus();
	};
	switch (ev.key) {
		case 'ArrowDown':
			move(row.nextElementSibling);
			break;
		case 'ArrowUp':
			move(row.previousElementSibling);
			break;
		case 'Home':
			move(t.el.firstElementChild);
			break;
		case 'End':
			move(t.el.lastElementChild);
			break;
		case 'ArrowRight':
			if (hasKids && !open) {
				t.focus = path;
				toggle(t, path);
			} else if (hasKids) move(row.nextElementSibling);
			break;
		case 'ArrowLeft':
			if (hasKids && open) {
				t.focus = path;
				toggle(t, path);
			} else if (path.includes('/')) move(t.el.querySelector(`[data-path="${path.slice(0, path.lastIndexOf('/'))}"]`));
			break;
		case 'Enter':
		case ' ':
			t.focus = path;
			toggle(t, path);
			break;
		default:
			return;
	}
	ev.preventDefault();
}

// --- copying -------------------------------------------------------------------

async function copyName(name, from) {
	let ok = false;
	try {
		await navigator.clipboard.writeText(name);
		ok = true;
	} catch {
		// No clipboard API (or no permission): the old way.
		const ta = document.createElement('textarea');
		ta.value = name;
		ta.setAttribute('readonly', '');
		ta.className = 'fn-copy-area';
		document.body.append(ta);
		ta.focus();
		ta.select();
		try {
			ok = document.execCommand('copy');
		} catch {
			ok = false;
		}
		ta.remove();
		if (from && from.isConnected) from.focus();
	}
	toast(ok ? `Copied \u201c${name}\u201d` : `Could not copy; the name is: ${name}`);
}

function toast(text) {
	clearTimeout(toastTimer);
	el.toast.textContent = text;
	el.toast.hidden = false;
	toastTimer = setTimeout(() => {
		el.toast.hidden = true;
	}, 2500);
}

// --- the contract of a view -----------------------------------------------------

// The top bar's Refresh (or Enter in the query box) fetches again even when
// nothing changed: this runs before app.js calls show().
function onSubmit(ev) {
	if (ev.target && ev.target.id === 'controls') refresh = true;
}

// "/" focuses the search box, as in the flamegraph view.
function onKey(ev) {
	if (ev.key !== '/' || ev.ctrlKey || ev.metaKey || ev.altKey || !el || el.list.hidden) return;
	const t = ev.target;
	if (t instanceof HTMLInputElement || t instanceof HTMLSelectElement || t instanceof HTMLTextAreaElement || t.isContentEditable) return;
	ev.preventDefault();
	el.search.focus();
	el.search.select();
}

export default {
	id: 'functions',
	title: 'Top functions',
	show(r, c) {
		ctx = c;
		K = kindInfo(c.kind);
		if (root !== r || !el) build(r);
		document.addEventListener('submit', onSubmit, true);
		document.addEventListener('keydown', onKey);
		params = readParams(c);
		COLUMNS = params.kernels ? COLUMNS_KERNELS : K.gpu ? COLUMNS_GPU : K.off ? COLUMNS_OFF : COLUMNS_ON;
		syncToolbar(params);
		if (params.fn) {
			if (pending && pending.kind === 'list') {
				pending.ctl.abort();
				pending = null;
			}
			showSandwich(params);
		} else {
			if (pending && pending.kind === 'sandwich') {
				pending.ctl.abort();
				pending = null;
			}
			showList(params);
		}
	},
	hide() {
		document.removeEventListener('submit', onSubmit, true);
		document.removeEventListener('keydown', onKey);
		clearTimeout(searchTimer);
		if (pending) pending.ctl.abort();
		pending = null;
		refresh = false;
		if (el) el.toast.hidden = true;
	},
};
