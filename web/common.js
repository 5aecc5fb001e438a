// common.js - what every view of ember's UI shares: the time ranges, the
// API call, number formatting, and the page's messages.
//
// The page (app.js) owns the URL and the controls in the top bar (project,
// time range, query). A view other than the flame graph is a module that
// exports default { id, title, show(root, ctx), hide() }:
//   show(root, ctx)  called when the view becomes active and again whenever
//                    the state changes while it is (time range, query,
//                    project, its own URL parameters). root is the view's
//                    <section>; the view fetches again only when what it
//                    shows changed (compare a key of ctx's state).
//   hide()           called when another view becomes active: abort
//                    requests, stop timers.
// ctx (built by app.js for each call):
//   ctx.project, ctx.range (a RANGES key, or 'custom'), ctx.seconds, ctx.q
//                           (the CEL query), ctx.start_ts, ctx.end_ts (Unix ms)
//   ctx.rangeText           "the last 15 minutes", or the custom range
//   ctx.kind                the page's event kind (the Show switch, `kind` in
//                           the URL): 'on_cpu', 'off_cpu' or 'cuda' (kindInfo)
//   ctx.filter()            the API's filter for the range, query and kind
//   ctx.setTimeRange(startMs, endMs)  makes the page's range that absolute
//                           range (a chart's drag-to-zoom)
//   ctx.api(name, body, signal)  POST /public/api/v1/project/{p}/{name}:
//                           the JSON answer, or throws ApiError (every
//                           other call goes through request()/apiJSON())
//   ctx.param(name)         this view's URL parameter (string or null)
//   ctx.setParams(obj, push)  sets (null deletes) this view's URL parameters;
//                           push: a step the back button undoes
//   ctx.go(view, params)    switches view; params may set q, group, range
//                           (custom: with from and to, Unix ms) and the new
//                           view's own parameters
//   ctx.href(view, params)  the address ctx.go(view, params) leads to (links)
//   ctx.addFilter(attr, value)  adds `attr == "value"` to the query (&&)
//   ctx.setState(name)      body[data-state]: loading, ready, empty, error
//                           (the browser tests wait on it)

export const DEFAULT_PROJECT = '00000000-0000-0000-0000-000000000000';

export const RANGES = {
	'5m': [5 * 60, '5 minutes'],
	'15m': [15 * 60, '15 minutes'],
	'1h': [3600, 'hour'],
	'6h': [6 * 3600, '6 hours'],
	'24h': [24 * 3600, '24 hours'],
	'7d': [7 * 86400, '7 days'],
};

export class ApiError extends Error {
	constructor(status, message) {
		super(message);
		this.status = status;
	}
}

// --- the one way the UI calls the server -----------------------------------
// Every request of the page goes through request(). A request that changes
// something (not GET or HEAD) carries X-Ember-CSRF, the value of the
// ember_csrf cookie (the server refuses a signed-in one without it). An
// answer 401 (the 5-minute access cookie ran out) makes it ask
// POST /api/v1/auth/refresh once (one refresh at a time for all requests)
// and send the request again; when that fails too and GET /api/v1/auth/me
// says no one is signed in, the handler set with onSignedOut runs (app.js
// shows the sign-in page) and the caller gets the 401 answer.

// What GET /api/v1/auth/me answered ({mode, kind, user, permissions}),
// set by session.js before the page loads; null while unknown.
export const auth = {
	me: null,
	// Whether the caller holds perm outside any project (a server with
	// --auth none grants everything).
	can(perm) {
		return !!(this.me && Array.isArray(this.me.permissions) && this.me.permissions.includes(perm));
	},
};

export function cookieValue(name) {
	for (const part of document.cookie.split(';')) {
		const i = part.indexOf('=');
		if (i > 0 && part.slice(0, i).trim() === name) {
			try {
				return decodeURIComponent(part.slice(i + 1).trim());
			} catch {
				return part.slice(i + 1).trim();
			}
		}
	}
	return '';
}

let signedOutHandler = null;
let refreshing = null; // the refresh in flight, shared by every 401
let checking = null; // the GET /api/v1/auth/me in flight after a failed refresh

// fn() runs when a request found that no one is signed in any more.
export function onSignedOut(fn) {
	signedOutHandler = fn;
}

function init(method, body, signal) {
	const headers = {};
	if (body !== undefined) headers['Content-Type'] = 'application/json';
	if (method !== 'GET' && method !== 'HEAD') {
		const csrf = cookieValue('ember_csrf');
		if (csrf) headers['X-Ember-CSRF'] = csrf;
	}
	return {
		method,
		headers,
		body: body === undefined ? undefined : JSON.stringify(body),
		signal,
		credentials: 'same-origin',
	};
}

// Renews the access cookie from the refresh cookie: whether it worked.
export function refreshSession() {
	if (!refreshing) {
		refreshing = fetch('/api/v1/auth/refresh', init('POST'))
			.then((r) => r.ok, () => false)
			.finally(() => {
				refreshing = null;
			});
	}
	return refreshing;
}

async function checkSignedOut() {
	if (!checking) {
		checking = fetch('/api/v1/auth/me', init('GET'))
			.then(async (r) => {
				if (r.status === 401) return true;
				const me = r.ok ? await r.json().catch(() => null) : null;
				return !!(me && me.kind !== 'open' && !me.user);
			}, () => false)
			.finally(() => {
				checking = null;
			});
	}
	if ((await checking) && signedOutHandler) signedOutHandler();
}

// fetch() for the page: method, body (an object, sent as JSON), signal;
// retry: false for the sign-in endpoints themselves (no refresh on 401).
// The Response; throws what fetch throws.
export async function request(url, { method = 'GET', body, signal, retry = true } = {}) {
	let res = await fetch(url, init(method, body, signal));
	if (res.status !== 401 || !retry) return res;
	if (await refreshSession()) {
		res = await fetch(url, init(method, body, signal));
		if (res.status !== 401) return res;
	}
	await checkSignedOut();
	return res;
}

// request() and its JSON answer, or an ApiError carrying the server's
// message (or the network's).
export async function apiJSON(method, url, body, signal, opts = {}) {
	let res, text;
	try {
		res = await request(url, { method, body, signal, ...opts });
		text = await res.text();
	} catch (e) {
		if (e.name === 'AbortError') throw e;
		throw new ApiError(0, `cannot reach ember-server: ${e.message || e}`);
	}
	let json = null;
	try {
		json = JSON.parse(text);
	} catch {
		json = null;
	}
	if (!res.ok) throw new ApiError(res.status, json && json.error ? json.error : `HTTP ${res.status} ${res.statusText}`);
	if (!json) throw new ApiError(res.status, 'unexpected answer: ' + text.slice(0, 200));
	return json;
}

// POSTs body to one of the project's queries; the JSON answer, or an
// ApiError.
export function api(project, name, body, signal) {
	return apiJSON('POST', `/public/api/v1/project/${encodeURIComponent(project)}/${name}`, body, signal);
}

// Adds a view's stylesheet to the page once (views load theirs when first shown).
export function loadStylesheet(href) {
	if (document.querySelector(`link[rel="stylesheet"][href="${href}"]`)) return;
	const link = document.createElement('link');
	link.rel = 'stylesheet';
	link.href = href;
	document.head.append(link);
}

// The filter of the API for the last `seconds`, a CEL query ('' = none)
// and an event kind (on_cpu, off_cpu, cuda).
export function filterFor(seconds, q, end = Date.now(), kind = 'on_cpu') {
	const query = (q || '').trim();
	return {
		start_ts: end - seconds * 1000,
		end_ts: end,
		event_kind: kind,
		frame_mask: { patterns: [] },
		query: query ? query : null,
	};
}

// `attr == "value"` added to a query with &&.
export function withFilter(q, attr, value) {
	const term = `${attr} == ${JSON.stringify(String(value))}`;
	const cur = (q || '').trim();
	if (!cur) return term;
	if (cur.includes(term)) return cur;
	return `(${cur}) && ${term}`;
}

export function escapeHTML(s) {
	return String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}

const nf = new Intl.NumberFormat('en-US');

export function fmtInt(n) {
	return nf.format(n);
}

export function fmtSamples(n) {
	return `${nf.format(n)} sample${n === 1 ? '' : 's'}`;
}

// A percentage with as many digits as it needs.
export function fmtPct(v) {
	if (v === null || v === undefined || Number.isNaN(v)) return '\u2013';
	const a = Math.abs(v);
	return (a >= 10 || a === 0 ? v.toFixed(1) : a >= 0.01 ? v.toFixed(2) : v > 0 ? '<0.01' : '>-0.01') + '%';
}

export function pct(part, whole) {
	return whole > 0 ? fmtPct((100 * part) / whole) : '0%';
}

// Cores, three significant digits.
export function fmtCores(c) {
	if (c === null || c === undefined || Number.isNaN(c)) return '\u2013';
	const a = Math.abs(c);
	if (a === 0) return '0';
	if (a < 0.001) return c > 0 ? '<0.001' : '>-0.001';
	return a >= 100 ? c.toFixed(0) : String(Number(c.toPrecision(3)));
}

// Cores in the units of the reference: mc (1/1000 core), c, kc, Mc.
export function fmtCoreUnits(c) {
	if (c === null || c === undefined || !Number.isFinite(c)) return '\u2013';
	if (c === 0) return '0';
	const a = Math.abs(c), sign = c < 0 ? '-' : '';
	for (const [scale, unit] of [[1e6, 'Mc'], [1e3, 'kc'], [1, 'c']]) {
		const v = Number((a / scale).toPrecision(3));
		if (v >= 1) return `${sign}${v} ${unit}`;
	}
	const m = a * 1000;
	return m < 0.01 ? `${c < 0 ? '>-' : '<'}0.01 mc` : `${sign}${Number(m.toPrecision(3))} mc`;
}

// Sets URL parameters for a view whose state (view.ctx, view.own) tells
// its show(), which the page runs again for the change, that the view
// made it itself: view.own is true while ctx.setParams runs.
export function setOwnParams(view, obj, push) {
	view.own = true;
	try {
		view.ctx.setParams(obj, push);
	} finally {
		view.own = false;
	}
}

// An element: attrs (class, text, value, on* handlers, DOM properties given
// other than as strings, other attributes) and children (arrays flattened;
// null, undefined and false left out).
export function h(tag, attrs = {}, ...children) {
	const e = document.createElement(tag);
	for (const [k, v] of Object.entries(attrs)) {
		if (v === null || v === undefined || v === false) continue;
		if (k === 'class') e.className = v;
		else if (k === 'text') e.textContent = v;
		else if (k === 'value') e.value = v;
		else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
		else if (k in e && typeof v !== 'string') e[k] = v;
		else e.setAttribute(k, v === true ? '' : v);
	}
	for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) e.append(c);
	return e;
}

// The message box of a view: kind is info, empty or error.
export function messageHTML(kind, html) {
	return `<div class="message message-${kind}" role="status">${html}</div>`;
}

export function errorHTML(title, detail) {
	return messageHTML('error', `<strong>${escapeHTML(title)}.</strong> <span class="detail">${escapeHTML(detail)}</span>`);
}

// "the last 15 minutes" for a RANGES key; for a custom range, from - to.
export function rangeText(range, startMs, endMs) {
	if (RANGES[range]) return `the last ${RANGES[range][1]}`;
	const f = (ms) => new Date(ms).toLocaleString();
	return `${f(startMs)} \u2013 ${f(endMs)}`;
}

// What to do when a range holds no samples; range: a RANGES key or the
// text of a range (ctx.rangeText).
// kind: the page's event kind; off-CPU names the agent's -enable-off-cpu,
// GPU time the injection library.
export function emptyHTML(range, q, kind = 'on_cpu') {
	const text = RANGES[range] ? `the last ${RANGES[range][1]}` : String(range);
	const host = location.host || '127.0.0.1:8080';
	if (kind === 'cuda') {
		const query = (q || '').trim();
		const what = query
			? `<p>No GPU time matches the query <code>${escapeHTML(query)}</code> in ${escapeHTML(text)}. Clear the query or pick a longer time range.</p>`
			: `<p><strong>No GPU time in ${escapeHTML(text)}.</strong> Pick a longer time range, or check that a CUDA program runs with ember's injection library.</p>`;
		return messageHTML('empty', what + gpuHowHTML(host));
	}
	const off = kind === 'off_cpu';
	const cmd = `sudo build/bin/ember-agent -collection-agent=${host} -disable-tls${off ? ' -enable-off-cpu' : ''}`;
	const query = (q || '').trim();
	const samples = off ? 'off-CPU samples (time threads spent waiting)' : 'samples';
	const what = query
		? `<p>No ${samples} match the query <code>${escapeHTML(query)}</code> in ${escapeHTML(text)}. Clear the query or pick a longer time range.</p>`
		: `<p><strong>No ${samples} in ${escapeHTML(text)}.</strong> Pick a longer time range, or check that an agent is sending data.</p>`;
	const running = off ? 'Is ember-agent running with off-CPU profiling (<code>-enable-off-cpu</code>)?' : 'Is ember-agent running?';
	return messageHTML('empty', `${what}<p>${running} Start it with:</p><pre><code>${escapeHTML(cmd)}</code></pre>`);
}

// The frame types of GPU work itself: the leaves of GPU-time stacks (the
// API's frame_types for "Top kernels").
export const KERNEL_TYPES = ['cuda_kernel', 'cuda_memcpy', 'cuda_memset', 'cuda_sync'];

// How GPU time reaches ember: the agent installs its CUDA injection
// library (-enable-cuda-profiler, on by default) and a CUDA program opts in
// with CUDA_INJECTION64_PATH. host: the server's address for the agent.
export const CUDA_INJECTION_PATH = '/var/lib/ember/profiler/libembercuda.so';
export function gpuHowHTML(host) {
	const agent = `sudo build/bin/ember-agent -collection-agent=${host} -disable-tls -enable-cuda-profiler`;
	const prog = `CUDA_INJECTION64_PATH=${CUDA_INJECTION_PATH} python3 train.py`;
	return `<p>ember-agent records every CUDA kernel, memory copy, memset and synchronisation with the CPU stack (Python frames included) that launched it. With <code>-enable-cuda-profiler</code> (on by default) it installs its injection library into <code>-cuda-profiler-dir</code> (<code>/var/lib/ember/profiler</code>); a CUDA program opts in, unchanged, by starting with <code>CUDA_INJECTION64_PATH</code> pointing at it:</p>
		<pre><code>${escapeHTML(agent)}\n${escapeHTML(prog)}</code></pre>`;
}

// A rate in words: four significant digits and what, or 'unknown'.
const rateText = (what) => (c) => (c === null || c === undefined || !Number.isFinite(c) ? 'unknown' : `${Number(c.toPrecision(4))} ${what}`);
// Nanoseconds of a scope per second of it: how many (GPUs, threads) were
// busy on average; null without the scope's length.
const nsPerSecond = (ns, scope) => (scope && scope.seconds ? ns / 1e9 / scope.seconds : null);

// The event kinds of the Show switch: what their values are and how a view
// names and formats them. On-CPU values are samples (cores = samples ÷ rate
// ÷ seconds); off-CPU values are nanoseconds waited (threads waiting on
// average = ns ÷ 1e9 ÷ seconds), and only relative percentages mean
// something for them.
export function kindInfo(kind) {
	if (kind === 'cuda') {
		// GPU time: nanoseconds of GPU work (kernels, copies, memsets,
		// syncs), GPUs busy on average = ns ÷ 1e9 ÷ seconds.
		return {
			kind, off: true, gpu: true,
			label: 'GPU time',
			rate: 'GPUs busy', Rate: 'GPUs busy',
			pct: 'GPU %', valueWord: 'GPU time', ValueWord: 'GPU time',
			rateOf: nsPerSecond,
			fmtRate: fmtGpus,
			rateText: rateText('GPUs busy on average'),
			fmtValue: (ns) => fmtWaited(ns),
		};
	}
	if (kind === 'off_cpu') {
		return {
			kind, off: true,
			label: 'Off-CPU',
			rate: 'threads waiting', Rate: 'Threads waiting',
			pct: 'Wait %', valueWord: 'time waited', ValueWord: 'Waited',
			rateOf: nsPerSecond, // threads waiting on average
			fmtRate: fmtThreads,
			rateText: rateText('threads waiting on average'),
			fmtValue: (ns) => `${fmtWaited(ns)} waited`,
		};
	}
	return {
		kind: 'on_cpu', off: false,
		label: 'On-CPU',
		rate: 'cores', Rate: 'Cores',
		pct: 'CPU %', valueWord: 'samples', ValueWord: 'Samples',
		rateOf: (samples, scope) => (scope && scope.sample_rate_hz && scope.seconds ? samples / scope.sample_rate_hz / scope.seconds : null),
		fmtRate: fmtCoreUnits,
		rateText: rateText('cores'),
		fmtValue: fmtSamples,
	};
}

// Time waited, from nanoseconds: h, min, s, ms, µs.
export function fmtWaited(ns) {
	if (ns === null || ns === undefined || !Number.isFinite(ns)) return '\u2013';
	const a = Math.abs(ns) / 1e9, sign = ns < 0 ? '-' : '';
	if (a === 0) return '0 s';
	const p = (v) => String(Number(v.toPrecision(3)));
	if (a >= 3600) return `${sign}${p(a / 3600)} h`;
	if (a >= 60) return `${sign}${p(a / 60)} min`;
	if (a >= 1) return `${sign}${p(a)} s`;
	if (a >= 1e-3) return `${sign}${p(a * 1e3)} ms`;
	return `${sign}${p(a * 1e6)} \u00b5s`;
}

// GPUs busy on average, three significant digits and the word.
export function fmtGpus(c) {
	if (c === null || c === undefined || !Number.isFinite(c)) return '\u2013';
	return `${fmtCores(c)} GPU`;
}

// Threads waiting on average, three significant digits and the word.
export function fmtThreads(c) {
	if (c === null || c === undefined || !Number.isFinite(c)) return '\u2013';
	return `${fmtCores(c)} thr`;
}

// An error of a view's request, for the user.
export function apiErrorHTML(e) {
	if (e instanceof ApiError && e.status === 400) return errorHTML('The query was rejected', e.message);
	if (e instanceof ApiError && e.status) return errorHTML(`The server answered ${e.status}`, e.message);
	return errorHTML('Cannot reach ember-server', e.message || String(e));
}

// A sortable table: columns [{key, label, num, render(row), sortable}];
// clicking a header sorts by it (numbers largest first) unless the column
// says sortable: false. Returns the <table>.
export function sortableTable(columns, rows, { sortKey, onSort, onRow, rowTitle } = {}) {
	const table = document.createElement('table');
	table.className = 'data-table';
	const thead = table.createTHead().insertRow();
	for (const c of columns) {
		const th = document.createElement('th');
		th.textContent = c.label;
		th.dataset.key = c.key;
		if (c.num) th.className = 'num';
		if (onSort && c.sortable !== false) {
			th.tabIndex = 0;
			th.setAttribute('role', 'button');
			th.setAttribute('aria-sort', c.key === sortKey ? 'descending' : 'none');
			const go = () => onSort(c.key);
			th.addEventListener('click', go);
			th.addEventListener('keydown', (ev) => {
				if (ev.key === 'Enter' || ev.key === ' ') {
					ev.preventDefault();
					go();
				}
			});
		}
		thead.append(th);
	}
	const tbody = table.createTBody();
	for (const r of rows) {
		const tr = tbody.insertRow();
		for (const c of columns) {
			const td = tr.insertCell();
			if (c.num) td.className = 'num';
			const v = c.render ? c.render(r) : r[c.key];
			if (v instanceof Node) td.append(v);
			else td.textContent = v === null || v === undefined ? '' : String(v);
		}
		if (onRow) {
			tr.tabIndex = 0;
			tr.classList.add('clickable');
			if (rowTitle) tr.title = rowTitle;
			tr.addEventListener('click', (ev) => onRow(r, ev));
			tr.addEventListener('keydown', (ev) => {
				if (ev.key === 'Enter') onRow(r, ev);
			});
		}
	}
	return table;
}
