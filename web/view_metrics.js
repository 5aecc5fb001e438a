// view_metrics.js - the "Metrics" view: the host and GPU metrics that
// ember-agent collects every -collect-metrics-interval (docs/internals/
// metrics.md), for the page's project, time range and query: CPU
// utilization, the top CPU consumers, memory (RSS per consumer, working set
// per cgroup), disk throughput per consumer, and a GPU section when NVML
// sent hw.gpu.* metrics. A table of the consumers leads to their flame
// graph; a click on a chart offers the flame graph of that moment.
//
// URL parameters: by (executable | container | pod | host: how consumers
// are grouped; default executable), sort (the consumers table's column).
//
// Requests: metrics/names first (which metrics exist under the query, and
// so which charts to ask for), then one metrics request per metric, all in
// parallel; nothing polls. The buckets are at least 30 s wide (the agent's
// default interval) so that each series has about one point per bucket;
// a gap of one or two buckets inside a series is interpolated.

import { escapeHTML, fmtCores, messageHTML, apiErrorHTML, sortableTable, withFilter, ApiError, loadStylesheet, setOwnParams } from './common.js';
import { timeChart, niceTicks } from './chart.js';

// The group-by choices: the label of the consumers, and the label the
// working set (per cgroup) is grouped by.
const GROUPS = {
	executable: { label: 'Executable', attr: 'process.executable.name', wss: 'cgroup.path', none: '[no executable]' },
	container: { label: 'Container', attr: 'container.name', wss: 'container.name', none: '[no container]' },
	pod: { label: 'Pod', attr: 'k8s.pod.name', wss: 'k8s.pod.name', none: '[no pod]' },
	host: { label: 'Host', attr: 'host.name', wss: 'host.name', none: '[no host]' },
};
const NONE_NAMES = { 'cgroup.path': '[no cgroup]', 'gpu.index': '[no GPU index]' };
const TOP = 8; // series per chart; the rest are summed as [other]
const OTHER = '[other]';
const OTHER_COLOR = '#9aa1ab';
const MIN_BUCKET_MS = 30000;
const MAX_BUCKETS = 120;
const FILL_GAP = 2; // empty buckets inside a series that are interpolated

// --- units ------------------------------------------------------------------

const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

function byteScale(a) {
	let k = 0;
	while (k < BYTE_UNITS.length - 1 && a >= 1024 ** (k + 1)) k++;
	return k;
}

export function fmtBytes(b) {
	if (b === null || b === undefined || !Number.isFinite(b)) return '\u2013';
	if (b === 0) return '0 B';
	let k = byteScale(Math.abs(b));
	const round = (x) => (Math.abs(x) >= 100 || k === 0 ? Math.round(x) : Number(x.toPrecision(3)));
	let v = round(b / 1024 ** k);
	// 1023.9 MiB is 1 GiB once rounded.
	if (Math.abs(v) >= 1024 && k < BYTE_UNITS.length - 1) v = round(b / 1024 ** ++k);
	return `${v} ${BYTE_UNITS[k]}`;
}

// Ticks of a bytes axis in round numbers of one binary unit.
function byteTicks(max) {
	const k = byteScale(max);
	const scale = 1024 ** k;
	return niceTicks(max / scale).map((t) => t * scale);
}

const fmtNum = (v) => (Math.abs(v) >= 100 ? v.toFixed(0) : String(Number(v.toPrecision(3))));

// The formats of each unit the agent sends: the readout's (with the unit)
// and the axis' (short).
const UNITS = {
	cores: { fmt: (v) => `${fmtCores(v)} cores`, axis: fmtCores, word: 'cores' },
	bytes: { fmt: fmtBytes, axis: fmtBytes, ticks: byteTicks, word: 'bytes' },
	'bytes/s': { fmt: (v) => `${fmtBytes(v)}/s`, axis: fmtBytes, ticks: byteTicks, word: 'bytes/s' },
	'%': { fmt: (v) => `${fmtNum(v)}%`, axis: (v) => `${fmtNum(v)}%`, ticks: (m) => (m <= 100 ? [0, 25, 50, 75, 100] : niceTicks(m)), word: '%' },
	W: { fmt: (v) => `${fmtNum(v)} W`, axis: (v) => `${fmtNum(v)} W`, word: 'watts' },
	Cel: { fmt: (v) => `${fmtNum(v)} \u00b0C`, axis: (v) => `${fmtNum(v)}\u00b0`, word: '\u00b0C' },
	ms: { fmt: (v) => `${fmtNum(v)} ms`, axis: fmtNum, word: 'ms' },
};
const unitOf = (u) => UNITS[u] || { fmt: (v) => `${fmtNum(v)}${u ? ' ' + u : ''}`, axis: fmtNum, word: u || '' };

// --- the panels ---------------------------------------------------------------

// Each chart: its metrics (one request each), how they combine into the
// chart's series, and what a click on it offers. `by` is the group-by
// choice (GROUPS), `names` the metrics present.
function panelsFor(by, names) {
	const g = GROUPS[by];
	const has = (m) => names.has(m);
	const hostCPU = has('host.cpu.user') || has('host.cpu.system');
	const gpuBy = by === 'host' ? 'host.name' : 'gpu.index';
	const gpuName = (name) => (gpuBy === 'gpu.index' && name !== '' ? `GPU ${name}` : null);
	// Bytes per second to or from storage, per group.
	const disk = (id, title, done, metric) => ({
		id,
		title,
		sub: `bytes ${done} storage per second, per ${g.label.toLowerCase()}`,
		metrics: [{ metric, group_by: g.attr }],
		unit: 'bytes/s',
		stacked: true,
		attr: g.attr,
	});
	const panels = [
		{
			id: 'cpu',
			title: 'CPU utilization',
			sub: hostCPU ? 'cores busy on the hosts, user and system' : 'cores used by the processes that match, user and system',
			metrics: hostCPU
				? [{ metric: 'host.cpu.user', as: 'user' }, { metric: 'host.cpu.system', as: 'system' }]
				: [{ metric: 'process.utime', as: 'user' }, { metric: 'process.stime', as: 'system' }],
			unit: 'cores',
			stacked: true,
			combine: 'named',
		},
		{
			id: 'consumers',
			title: 'CPU consumers',
			sub: `cores per ${g.label.toLowerCase()} (process user + system time), top ${TOP}`,
			metrics: [{ metric: 'process.utime', group_by: g.attr }, { metric: 'process.stime', group_by: g.attr }],
			unit: 'cores',
			stacked: true,
			combine: 'sum',
			attr: g.attr,
		},
		{
			id: 'rss',
			title: 'Memory: resident set (RSS)',
			sub: `per ${g.label.toLowerCase()}, top ${TOP}`,
			metrics: [{ metric: 'process.rss', group_by: g.attr }],
			unit: 'bytes',
			stacked: true,
			attr: g.attr,
		},
		{
			id: 'wss',
			title: 'Memory: working set (WSS)',
			sub: `per ${g.wss === 'cgroup.path' ? 'cgroup' : GROUPS[by].label.toLowerCase()} (cgroup memory in use minus inactive file cache), top ${TOP}`,
			metrics: [{ metric: 'process.wss', group_by: g.wss }],
			unit: 'bytes',
			stacked: true,
			attr: g.wss,
		},
		disk('read', 'Disk reads', 'read from', 'io.read_throughput'),
		disk('write', 'Disk writes', 'written to', 'io.write_throughput'),
	];
	const gpu = [
		{ id: 'gpu_util', title: 'GPU utilization', sub: 'share of time a kernel ran', metric: 'hw.gpu.utilization', unit: '%', spatial: 'avg' },
		{ id: 'gpu_mem', title: 'GPU memory used', sub: 'share of the GPU\u2019s memory', metric: 'hw.gpu.memory.utilization', unit: '%', spatial: 'avg' },
		{ id: 'gpu_power', title: 'GPU power', sub: 'power draw', metric: 'hw.gpu.power', unit: 'W', spatial: by === 'host' ? 'sum' : 'avg' },
		{ id: 'gpu_temp', title: 'GPU temperature', sub: 'hottest GPU of each group', metric: 'hw.gpu.temp', unit: 'Cel', spatial: 'max' },
		{ id: 'gpu_clock', title: 'SM clock', sub: 'streaming-multiprocessor clock', metric: 'hw.gpu.clock.sm', unit: 'MHz', spatial: 'avg' },
		{ id: 'gpu_occupancy', title: 'SM occupancy', sub: 'resident warps of the maximum (GPM, Hopper and later)', metric: 'hw.gpu.sm.occupancy', unit: '%', spatial: 'avg' },
		{ id: 'gpu_tensor', title: 'Tensor core activity', sub: 'time the tensor pipes were busy (GPM)', metric: 'hw.gpu.tensor_util', unit: '%', spatial: 'avg' },
		{ id: 'gpu_dram', title: 'DRAM bandwidth', sub: 'share of the peak (GPM)', metric: 'hw.gpu.dram_bw_util', unit: '%', spatial: 'avg' },
	].map((p) => ({
		...p,
		gpu: true,
		sub: `${p.sub}, ${gpuBy === 'host.name' ? (p.spatial === 'avg' ? 'average of each host\u2019s GPUs' : 'per host') : 'per GPU index'}`,
		metrics: [{ metric: p.metric, group_by: gpuBy, spatial: p.spatial }],
		attr: gpuBy,
		display: gpuName,
		// p50/p95/p99 of each GPU (or host) under the chart.
		percentiles: true,
	}));
	gpu.push(
		{
			id: 'gpu_throttle',
			title: 'Clocks throttle reasons',
			sub: 'share of the time each reason held the clocks back, on the worst GPU; reasons never seen are left out',
			metrics: [{ metric: 'hw.gpu.clocks_throttle', group_by: 'gpu.throttle_reason', spatial: 'max' }],
			unit: '%',
			scale: 100,
			hideZero: true,
			gpu: true,
		},
		{
			id: 'gpu_pcie',
			title: 'PCIe throughput',
			sub: 'bytes per second over PCIe, all GPUs',
			metrics: [{ metric: 'hw.gpu.pcie.tx', as: 'sent' }, { metric: 'hw.gpu.pcie.rx', as: 'received' }],
			unit: 'bytes/s',
			combine: 'named',
			gpu: true,
		},
		{
			id: 'gpu_nvlink',
			title: 'NVLink throughput',
			sub: 'data bytes per second over NVLink, all links of all GPUs',
			metrics: [{ metric: 'hw.gpu.nvlink.tx', as: 'sent' }, { metric: 'hw.gpu.nvlink.rx', as: 'received' }],
			unit: 'bytes/s',
			combine: 'named',
			gpu: true,
		},
		{
			id: 'gpu_ecc',
			title: 'ECC errors',
			sub: 'corrected + uncorrected, since the driver loaded (volatile) and over the GPUs\u2019 life (aggregate)',
			metrics: [{ metric: 'hw.gpu.ecc.errors', group_by: 'gpu.ecc.counter', spatial: 'sum' }],
			unit: 'errors',
			gpu: true,
		}
	);
	gpu.push({
		id: 'gpu_proc',
		title: 'GPU use per process',
		sub: `SM utilization per ${g.label.toLowerCase()}, summed over its processes and GPUs`,
		metrics: [{ metric: 'hw.gpu.process.utilization', group_by: g.attr }],
		unit: '%',
		stacked: true,
		gpu: true,
		attr: g.attr,
	});
	for (const p of panels.concat(gpu)) p.present = p.metrics.some((m) => has(m.metric));
	return { panels, gpu };
}

// --- the view's state -----------------------------------------------------------

let v = null;

function paramsOf(ctx) {
	const by = GROUPS[ctx.param('by')] ? ctx.param('by') : 'executable';
	const sort = ['cores', 'peak', 'rss', 'read', 'write', 'gpu'].includes(ctx.param('sort')) ? ctx.param('sort') : 'cores';
	return { by, sort };
}

// Sets this view's URL parameters (show() runs again, knowing it was us).
function setParam(obj, push) {
	setOwnParams(v, obj, push);
}

// The number of buckets for a range: at least 30 s each, at most 120.
export function bucketsFor(spanMs) {
	return Math.max(1, Math.min(MAX_BUCKETS, Math.floor(spanMs / MIN_BUCKET_MS)));
}

// --- the skeleton -------------------------------------------------------------------

function panelHTML(id, cls = '') {
	return `<section class="panel met-panel ${cls}" data-panel="${id}">
		<div class="met-panel-head"><h2></h2><span class="met-sub"></span></div>
		<div class="met-body"></div>
		<div class="met-extra"></div>
	</section>`;
}

function build(root) {
	root.innerHTML = `<div class="view-body met">
	<div class="met-head">
		<h1>Metrics</h1>
		<div class="field met-by">
			<label for="met-by">Group consumers by</label>
			<select id="met-by">${Object.entries(GROUPS).map(([k, g]) => `<option value="${k}">${g.label}</option>`).join('')}</select>
		</div>
		<p class="met-note"></p>
	</div>
	<div class="met-message" hidden></div>
	<div class="met-content" hidden>
		<p class="met-hint">Hover a chart for its values; drag across it to zoom into that time; click it for the flame graph of that moment; click a name in a legend to filter by it.</p>
		${panelHTML('cpu')}
		${panelHTML('consumers')}
		<div class="met-grid">${panelHTML('rss')}${panelHTML('wss')}</div>
		<div class="met-grid">${panelHTML('read')}${panelHTML('write')}</div>
		<h2 class="met-section">GPU <a class="met-topo-link" href="./?view=topology">GPU topology and findings</a></h2>
		<div class="met-gpu-empty" hidden></div>
		<div class="met-gpu">
			<div class="met-grid">${panelHTML('gpu_util')}${panelHTML('gpu_mem')}</div>
			<div class="met-grid">${panelHTML('gpu_power')}${panelHTML('gpu_temp')}</div>
			<div class="met-grid">${panelHTML('gpu_clock')}${panelHTML('gpu_throttle')}</div>
			<div class="met-grid">${panelHTML('gpu_pcie')}${panelHTML('gpu_nvlink')}</div>
			<div class="met-grid">${panelHTML('gpu_occupancy')}${panelHTML('gpu_tensor')}</div>
			<div class="met-grid">${panelHTML('gpu_dram')}${panelHTML('gpu_ecc')}</div>
			${panelHTML('gpu_proc')}
			<section class="panel met-xids" aria-label="XID events"></section>
		</div>
	</div>
	<div class="met-pop" role="dialog" aria-label="This moment" hidden></div>
</div>`;
	const q = (sel) => root.querySelector(sel);
	const els = {
		root,
		by: q('#met-by'),
		note: q('.met-note'),
		message: q('.met-message'),
		content: q('.met-content'),
		gpu: q('.met-gpu'),
		gpuEmpty: q('.met-gpu-empty'),
		xids: q('.met-xids'),
		pop: q('.met-pop'),
		panel: Object.fromEntries([...root.querySelectorAll('.met-panel')].map((p) => [p.dataset.panel, p])),
	};
	els.by.addEventListener('change', () => setParam({ by: els.by.value === 'executable' ? null : els.by.value, sort: null }, true));
	// The moment's popover closes on Escape and on a click elsewhere.
	document.addEventListener('keydown', (ev) => {
		if (ev.key === 'Escape' && !els.pop.hidden) closePop();
	});
	document.addEventListener('mousedown', (ev) => {
		if (!els.pop.hidden && !els.pop.contains(ev.target)) closePop();
	});
	return els;
}

// --- the requests -------------------------------------------------------------------

function filterOf(ctx) {
	const q = ctx.q.trim();
	return { start_ts: ctx.start_ts, end_ts: ctx.end_ts, query: q ? q : null };
}

async function run() {
	const s = v;
	const ctx = s.ctx;
	const filter = filterOf(ctx);
	const signal = s.ctl.signal;
	s.requests = [];
	const ask = (name, body) => {
		s.requests.push({ name, ...body, filter: undefined });
		return ctx.api(name, { filter, ...body }, signal);
	};
	let names;
	try {
		names = await ask('metrics/names', {});
	} catch (e) {
		if (e.name === 'AbortError' || s !== v) return;
		showMessage(apiErrorHTML(e));
		expose();
		return ctx.setState('error');
	}
	if (s !== v) return;
	s.names = new Map((names.names || []).map((n) => [n.name, n]));
	if (!s.names.size) {
		showMessage(noMetricsHTML(ctx));
		expose();
		return ctx.setState('empty');
	}
	s.els.message.hidden = true;
	s.els.content.hidden = false;
	const { panels, gpu } = panelsFor(s.params.by, s.names);
	const hasGPU = [...s.names.keys()].some((n) => n.startsWith('hw.gpu.'));
	s.els.gpu.hidden = !hasGPU;
	s.els.root.querySelector('.met-topo-link').href = ctx.href('topology', {});
	s.els.gpuEmpty.hidden = hasGPU;
	if (!hasGPU) s.els.gpuEmpty.innerHTML = noGPUHTML(ctx);
	const all = hasGPU ? panels.concat(gpu) : panels;
	s.panels = all;
	const num_buckets = bucketsFor(filter.end_ts - filter.start_ts);
	// XID events, marked on every GPU chart and listed under them.
	s.marks = [];
	const marksP = hasGPU && s.names.has('hw.gpu.xid') ? loadXids(ask, num_buckets).catch(() => []) : Promise.resolve([]);
	const jobs = all.map(async (p) => {
		head(p);
		if (!p.present) return renderNone(p, `No ${p.metrics.map((m) => m.metric).join(' or ')} in ${ctx.rangeText}${ctx.q.trim() ? ' for this query' : ''}.`);
		loadingPanel(p);
		try {
			// One request per metric of the panel, all at once.
			const answers = await Promise.all(
				p.metrics.map((m) =>
					s.names.has(m.metric)
						? ask('metrics', { metric: m.metric, group_by: m.group_by || null, temporal: 'avg', spatial: m.spatial || 'sum', num_buckets, ...(p.percentiles ? { percentiles: true } : {}) }).catch((e) => {
								// A metric the project never had: nothing to draw.
								if (e instanceof ApiError && e.status === 404) return null;
								throw e;
						  })
						: null
				)
			);
			if (p.gpu) s.marks = await marksP;
			if (s !== v) return;
			s.data[p.id] = seriesOf(p, answers, filter, num_buckets);
			if (p.percentiles) s.data[p.id].percentiles = percentilesOf(p, answers[0]);
			renderPanel(p);
		} catch (e) {
			if (e.name === 'AbortError' || s !== v) return;
			s.data[p.id] = null;
			p.body().innerHTML = apiErrorHTML(e);
		}
	});
	expose();
	await Promise.all(jobs);
	if (s !== v) return;
	s.marks = await marksP;
	renderXids();
	renderTable();
	expose();
	ctx.setState('ready');
}

// The XID events of the time range: one request per attribute (code,
// meaning, device), joined by bucket. Each is { ms (the middle of its
// bucket), codes, meanings, gpus, label }.
async function loadXids(ask, num_buckets) {
	const by = ['gpu.xid.code', 'gpu.xid.meaning', 'gpu.index'];
	const answers = await Promise.all(by.map((group_by) => ask('metrics', { metric: 'hw.gpu.xid', group_by, temporal: 'max', spatial: 'sum', num_buckets })));
	const at = new Map();
	answers.forEach((a, k) => {
		for (const s of a.series || [])
			for (const [ts, x] of s.points) {
				if (!Number.isFinite(x) || x <= 0) continue;
				const ms = ts + a.buckets_ms / 2;
				if (!at.has(ms)) at.set(ms, [new Set(), new Set(), new Set()]);
				at.get(ms)[k].add(s.group);
			}
	});
	return [...at]
		.sort((a, b) => a[0] - b[0])
		.map(([ms, [codes, meanings, gpus]]) => {
			const c = [...codes].join(', '), m = [...meanings].join('; '), g = [...gpus].map((x) => `GPU ${x}`).join(', ');
			return { ms, codes: [...codes], meanings: [...meanings], gpus: [...gpus], label: `XID ${c}: ${m}${g ? ` (${g})` : ''}` };
		});
}

function renderXids() {
	const el = v.els.xids;
	const marks = v.marks || [];
	el.hidden = !marks.length;
	if (!marks.length) return el.replaceChildren();
	el.innerHTML = `<div class="met-panel-head"><h2>XID events</h2><span class="met-sub">GPU errors the driver reported (marked in red on the charts above)</span></div>
		<table class="met-xid-table"><thead><tr><th>Time</th><th>XID</th><th>Meaning</th><th>GPU</th></tr></thead><tbody>${marks
			.map((m) => `<tr><td>${escapeHTML(new Date(m.ms).toLocaleString())}</td><td>${escapeHTML(m.codes.join(', '))}</td><td>${escapeHTML(m.meanings.join('; '))}</td><td>${escapeHTML(m.gpus.join(', '))}</td></tr>`)
			.join('')}</tbody></table>`;
}

// The answers of a panel as one list of series of values per bucket:
// { start_ts, bucket_ms, n, series: [{ name, group, values }] }, the
// values of every group (for the table), and the top ones (for the chart).
function seriesOf(p, answers, filter, num) {
	const got = answers.filter(Boolean);
	const bucket_ms = got.length ? got[0].buckets_ms : Math.ceil((filter.end_ts - filter.start_ts) / num);
	const start_ts = got.length ? got[0].start_ts : filter.start_ts;
	const n = Math.ceil((filter.end_ts - filter.start_ts) / bucket_ms);
	const groups = new Map();
	answers.forEach((a, k) => {
		if (!a) return;
		for (const s of a.series || []) {
			const key = p.combine === 'named' ? p.metrics[k].as : s.group;
			let vals = groups.get(key);
			if (!vals) groups.set(key, (vals = new Array(n).fill(null)));
			const own = new Array(n).fill(null);
			for (const [ts, x] of s.points) {
				const i = Math.floor((ts - start_ts) / bucket_ms);
				if (i >= 0 && i < n && Number.isFinite(x)) own[i] = x * (p.scale || 1);
			}
			fillGaps(own);
			own.forEach((x, i) => {
				if (x !== null) vals[i] = (vals[i] || 0) + x;
			});
		}
	});
	const all = [...groups].map(([group, values]) => {
		const present = values.filter((x) => x !== null);
		return {
			group,
			name: displayName(p, group),
			values,
			total: present.reduce((a, x) => a + x, 0),
			avg: present.length ? present.reduce((a, x) => a + x, 0) / present.length : null,
			peak: present.length ? Math.max(...present) : null,
		};
	});
	let shown;
	if (p.combine === 'named') {
		shown = p.metrics.map((m) => all.find((x) => x.group === m.as)).filter(Boolean);
	} else if (p.stacked) {
		let sorted = [...all].sort((a, b) => b.total - a.total || String(a.group).localeCompare(String(b.group)));
		// A consumer of nothing is left out of the chart (not the table),
		// unless nobody consumed anything.
		if (sorted.some((x) => x.total > 0)) sorted = sorted.filter((x) => x.total > 0);
		shown = sorted.slice(0, TOP);
		const rest = sorted.slice(TOP);
		if (rest.length) {
			const values = new Array(n).fill(null);
			for (const r of rest) r.values.forEach((x, i) => x !== null && (values[i] = (values[i] || 0) + x));
			shown.push({ group: null, name: `${OTHER} (${rest.length} more)`, values, total: rest.reduce((a, r) => a + r.total, 0), color: OTHER_COLOR });
		}
	} else {
		shown = [...all].sort((a, b) => String(a.group).localeCompare(String(b.group), undefined, { numeric: true }));
		if (p.hideZero) shown = shown.filter((x) => x.peak);
	}
	return { start_ts, bucket_ms, n, unit: (got[0] && got[0].unit) || p.unit, all, series: shown };
}

// Interpolates the short gaps inside a series (a collection that fell
// into the next bucket); the ends stay empty.
function fillGaps(vals) {
	let last = -1;
	for (let i = 0; i < vals.length; i++) {
		if (vals[i] === null) continue;
		const gap = i - last - 1;
		if (last >= 0 && gap > 0 && gap <= FILL_GAP) {
			for (let k = 1; k <= gap; k++) vals[last + k] = vals[last] + ((vals[i] - vals[last]) * k) / (gap + 1);
		}
		last = i;
	}
}

function displayName(p, group) {
	if (p.combine === 'named') return group;
	if (group === '') return GROUPS[v.params.by].attr === p.attr ? GROUPS[v.params.by].none : NONE_NAMES[p.attr] || `[no ${p.attr}]`;
	return (p.display && p.display(group)) || group;
}

// --- rendering ----------------------------------------------------------------------

function showMessage(html) {
	v.els.message.innerHTML = html;
	v.els.message.hidden = false;
	v.els.content.hidden = true;
}

function head(p) {
	const el = v.els.panel[p.id];
	p.el = el;
	p.body = () => el.querySelector('.met-body');
	el.querySelector('h2').textContent = p.title;
	el.querySelector('.met-sub').textContent = p.sub;
	el.querySelector('.met-extra').replaceChildren();
	el.dataset.unit = p.unit;
}

function loadingPanel(p) {
	destroyChart(p.id);
	p.body().innerHTML = '<p class="met-loading">Loading\u2026</p>';
}

function renderNone(p, text) {
	destroyChart(p.id);
	v.data[p.id] = null;
	p.body().innerHTML = `<p class="met-none">${escapeHTML(text)}</p>`;
}

function destroyChart(id) {
	if (v.charts[id]) {
		v.charts[id].destroy();
		delete v.charts[id];
	}
}

function renderPanel(p) {
	const d = v.data[p.id];
	destroyChart(p.id);
	if (!d || !d.series.length) return renderNone(p, `No data in ${v.ctx.rangeText}${v.ctx.q.trim() ? ' for this query' : ''}.`);
	const u = unitOf(d.unit);
	const ctx = v.ctx;
	const body = p.body();
	// A bytes axis speaks one unit, the one of its top.
	let axis = u.axis;
	if (u.ticks === byteTicks) {
		const max = p.stacked ? Math.max(0, ...stackedSums(d)) : Math.max(0, ...d.series.flatMap((s) => s.values.filter((x) => x !== null)));
		const k = byteScale(byteTicks(max || 1).at(-1));
		axis = (x) => (x === 0 ? '0' : `${fmtNum(x / 1024 ** k)} ${BYTE_UNITS[k]}`);
	}
	body.replaceChildren();
	v.charts[p.id] = timeChart(body, {
		start_ts: d.start_ts,
		bucket_ms: d.bucket_ms,
		series: d.series.map((s) => ({ name: s.name, values: s.values, color: s.color })),
		unit: '',
		stacked: !!p.stacked,
		gaps: true,
		height: p.id === 'cpu' || p.id === 'consumers' ? 200 : 170,
		format: u.fmt,
		axisFormat: axis,
		ticks: u.ticks,
		onZoom: (a, b) => ctx.setTimeRange(a, b),
		onClick: (ms, i, ev) => openPop(p, ms, i, ev),
		marks: p.gpu ? v.marks || [] : [],
		onSeries: p.attr
			? (name) => {
					const s = d.series.find((x) => x.name === name);
					if (s && s.group !== null) ctx.addFilter(p.attr, s.group);
			  }
			: null,
	});
	v.charts[p.id].el = body;
	if (p.id === 'cpu') cpuSummary(p, d);
	if (d.percentiles) percentileTable(p, d);
}

// The server's p50/p95/p99 of each group of a panel's metric: over the
// stored points themselves (every collection), which the chart's bucket
// averages would smooth away. [{ group, name, p50, p95, p99, points }].
function percentilesOf(p, answer) {
	if (!answer) return [];
	return (answer.series || [])
		.filter((s) => s.percentiles)
		.map((s) => ({ group: s.group, name: displayName(p, s.group), ...s.percentiles }));
}

// The percentiles under a chart, one row per GPU (or host).
function percentileTable(p, d) {
	const u = unitOf(d.unit);
	const rows = d.percentiles;
	const extra = p.el.querySelector('.met-extra');
	if (!rows.length) return (extra.innerHTML = '');
	// Over the readings themselves: grouped by host, every reading of
	// every GPU of the host counts (not the host's sum or maximum).
	const of = p.attr === 'host.name' ? 'every reading of the host\u2019s GPUs' : 'every reading of the GPU';
	extra.innerHTML = `<table class="met-pct" aria-label="${escapeHTML(p.title)} percentiles">
		<caption>Percentiles of ${of} in the range</caption>
		<thead><tr><th></th><th>p50</th><th>p95</th><th>p99</th><th class="muted">points</th></tr></thead>
		<tbody>${rows
			.map(
				(r) => `<tr><th scope="row">${escapeHTML(r.name)}</th><td>${escapeHTML(u.fmt(r.p50))}</td><td>${escapeHTML(u.fmt(r.p95))}</td><td>${escapeHTML(u.fmt(r.p99))}</td><td class="muted">${r.points}</td></tr>`
			)
			.join('')}</tbody></table>`;
}

// The sum of the shown series per bucket (null where none has a value).
function stackedSums(d) {
	const sums = new Array(d.n).fill(null);
	for (const s of d.series) s.values.forEach((x, i) => x !== null && (sums[i] = (sums[i] || 0) + x));
	return sums;
}

// Average and peak of the CPU chart, under it.
function cpuSummary(p, d) {
	const sums = stackedSums(d);
	const present = sums.filter((x) => x !== null);
	if (!present.length) return;
	const avg = present.reduce((a, x) => a + x, 0) / present.length;
	const peak = Math.max(...present);
	const at = d.start_ts + sums.indexOf(peak) * d.bucket_ms;
	const user = d.series.find((s) => s.group === 'user');
	const share = user && avg > 0 ? Math.round((100 * user.avg) / avg) : null;
	p.el.querySelector('.met-extra').innerHTML = `<p class="met-stats"><span>Average <b>${escapeHTML(fmtCores(avg))} cores</b></span>
		<span>Peak <b>${escapeHTML(fmtCores(peak))} cores</b> at ${escapeHTML(fmtTime(at))}</span>
		${share !== null ? `<span>User <b>${share}%</b>, system <b>${100 - share}%</b></span>` : ''}
		<span class="muted">${escapeHTML(fmtDuration(d.bucket_ms))} buckets</span></p>`;
}

const fmtTime = (ms) => new Date(ms).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' });

function fmtDuration(ms) {
	const s = Math.round(ms / 1000);
	if (s < 120) return `${s} s`;
	if (s < 7200) return `${Math.round(s / 60)} min`;
	return `${Number((s / 3600).toFixed(1))} h`;
}

// A link to another view that stays in the page (a plain click) or opens
// a new tab (Ctrl/Cmd/middle click), as a link does.
function link(text, title, view, params, cls = 'met-link') {
	const a = document.createElement('a');
	a.className = cls;
	a.textContent = text;
	a.title = title;
	a.href = v.ctx.href(view, params);
	const ctx = v.ctx;
	a.addEventListener('click', (ev) => {
		if (ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) return;
		ev.preventDefault();
		ev.stopPropagation();
		closePop();
		ctx.go(view, params);
	});
	a.addEventListener('keydown', (ev) => ev.key === 'Enter' && ev.stopPropagation());
	return a;
}

// The flame graph of one consumer (or of everything the query matches:
// group undefined), in the page's range or around one bucket.
function flameParams(attr, group, around) {
	const ctx = v.ctx;
	const q = attr && group !== undefined && group !== null ? withFilter(ctx.q, attr, group) : ctx.q;
	const params = { q };
	if (around) Object.assign(params, { range: 'custom', from: around[0], to: around[1] });
	return params;
}

// --- the moment's popover (a click on a chart) ---------------------------------------

function openPop(p, ms, i, ev) {
	const d = v.data[p.id];
	if (!d) return;
	const u = unitOf(d.unit);
	// The bucket, widened to a minute at least: samples are sparse.
	const mid = ms + d.bucket_ms / 2;
	const half = Math.max(d.bucket_ms, 60000) / 2;
	const around = [Math.floor(mid - half), Math.ceil(mid + half)];
	const pop = v.els.pop;
	const rows = d.series
		.map((s) => [s, s.values[i]])
		.filter(([, x]) => x !== null && x !== undefined)
		.sort((a, b) => b[1] - a[1]);
	pop.replaceChildren();
	const h = document.createElement('div');
	h.className = 'met-pop-head';
	h.textContent = `${p.title} at ${new Date(ms).toLocaleString()}`;
	pop.append(h);
	const list = document.createElement('ul');
	const consumers = p.attr && p.combine !== 'named' && !p.gpu;
	for (const [s, x] of rows.slice(0, 10)) {
		const li = document.createElement('li');
		const name = document.createElement('span');
		name.className = 'met-pop-name';
		name.textContent = s.name;
		const val = document.createElement('b');
		val.textContent = u.fmt(x);
		li.append(name, val);
		if (consumers && s.group !== null) li.append(link('Flamegraph', `Flame graph of ${s.name} from ${fmtTime(around[0])} to ${fmtTime(around[1])}`, 'flamegraph', flameParams(p.attr, s.group, around)));
		list.append(li);
	}
	if (!rows.length) {
		const li = document.createElement('li');
		li.textContent = 'No values in this bucket.';
		list.append(li);
	}
	pop.append(list);
	pop.append(link('Flamegraph of this moment', 'The flame graph of everything the query matches, around this time', 'flamegraph', flameParams(null, undefined, around), 'met-link met-pop-all'));
	pop.hidden = false;
	// The popover says what the hover readout said: one box at a time.
	for (const ro of p.el.querySelectorAll('.chart-readout')) ro.hidden = true;
	const r = v.els.root.querySelector('.met').getBoundingClientRect();
	const w = pop.offsetWidth;
	let left = ev.clientX - r.left + 8;
	if (left + w > r.width) left = Math.max(0, ev.clientX - r.left - w - 8);
	pop.style.left = `${left}px`;
	pop.style.top = `${ev.clientY - r.top + 8}px`;
	expose();
}

function closePop() {
	if (v && v.els && !v.els.pop.hidden) v.els.pop.hidden = true;
}

// --- the consumers table -------------------------------------------------------------

const COLUMNS = {
	cores: ['consumers', 'avg', 'Avg cores', 'cores'],
	peak: ['consumers', 'peak', 'Peak cores', 'cores'],
	rss: ['rss', 'avg', 'Avg RSS', 'bytes'],
	read: ['read', 'avg', 'Avg read', 'bytes/s'],
	write: ['write', 'avg', 'Avg write', 'bytes/s'],
	gpu: ['gpu_proc', 'avg', 'Avg GPU use', '%'],
};

function renderTable() {
	const p = v.panels.find((x) => x.id === 'consumers');
	if (!p) return;
	const extra = p.el.querySelector('.met-extra');
	const g = GROUPS[v.params.by];
	const rows = new Map();
	const cols = Object.entries(COLUMNS).filter(([, [panel]]) => v.data[panel] && v.data[panel].all.length);
	if (!cols.length) return extra.replaceChildren();
	for (const [key, [panel, field]] of cols)
		for (const s of v.data[panel].all) {
			if (!rows.has(s.group)) rows.set(s.group, { group: s.group, name: s.group === '' ? g.none : s.group });
			rows.get(s.group)[key] = s[field];
		}
	const sort = cols.some(([k]) => k === v.params.sort) ? v.params.sort : cols[0][0];
	const list = [...rows.values()].sort((a, b) => (b[sort] ?? -1) - (a[sort] ?? -1) || a.name.localeCompare(b.name));
	const shown = list.slice(0, 50);
	const ctx = v.ctx;
	const actions = (r) => {
		const span = document.createElement('span');
		span.className = 'met-actions';
		span.append(link('Flamegraph', `Flame graph of ${r.name} over ${ctx.rangeText}`, 'flamegraph', flameParams(g.attr, r.group)));
		const b = document.createElement('button');
		b.type = 'button';
		b.className = 'met-filter';
		b.textContent = 'Filter';
		b.title = `Add ${g.attr} == ${JSON.stringify(r.group)} to the query`;
		b.addEventListener('click', (ev) => {
			ev.stopPropagation();
			ctx.addFilter(g.attr, r.group);
		});
		span.append(b);
		return span;
	};
	const columns = [{ key: 'name', label: g.label, sortable: false }];
	for (const [key, [, , label, unit]] of cols) columns.push({ key, label, num: true, render: (r) => (r[key] === undefined || r[key] === null ? '\u2013' : unitOf(unit).fmt(r[key])) });
	columns.push({ key: 'actions', label: '', sortable: false, render: actions });
	const table = sortableTable(columns, shown, {
		sortKey: sort,
		onSort: (key) => setParam({ sort: key === 'cores' ? null : key }, false),
	});
	table.classList.add('met-table');
	table.querySelectorAll('tbody td:first-child').forEach((td) => td.classList.add('name'));
	const cap = document.createElement('p');
	cap.className = 'met-caption';
	cap.textContent = `${list.length > shown.length ? `The top ${shown.length} of ${list.length}` : `${list.length}`} ${g.label.toLowerCase()}${list.length === 1 ? '' : 's'}; averages over the buckets in which each one had data.`;
	extra.replaceChildren(cap, table);
}

// --- messages ---------------------------------------------------------------------------

function noMetricsHTML(ctx) {
	const q = ctx.q.trim();
	const host = location.host || '127.0.0.1:8080';
	if (q)
		return messageHTML(
			'empty',
			`<p><strong>No metrics match the query <code>${escapeHTML(q)}</code> in ${escapeHTML(ctx.rangeText)}.</strong> Metrics carry host, process, container and GPU labels (not thread or stack ones): clear the query or pick a longer time range.</p>`
		);
	return messageHTML(
		'empty',
		`<p><strong>No metrics were received in ${escapeHTML(ctx.rangeText)}.</strong></p>
		<p>ember-agent sends host, process, disk and GPU metrics every <code>-collect-metrics-interval</code> (default 30s), beside the profiles; the first rates appear after the second collection. <code>-enable-host-metrics=false</code> turns them off (GPU ones: <code>-enable-gpu-metrics=false</code>).</p>
		<p>Is ember-agent running with metrics on? Start it with:</p><pre><code>${escapeHTML(`sudo build/bin/ember-agent -collection-agent=${host} -disable-tls -collect-metrics-interval=30s`)}</code></pre>`
	);
}

function noGPUHTML(ctx) {
	return messageHTML(
		'empty',
		`<p><strong>No GPU metrics were received in ${escapeHTML(ctx.rangeText)}${ctx.q.trim() ? ' for this query' : ''}.</strong> ember-agent reads them from NVIDIA\u2019s NVML (<code>libnvidia-ml.so.1</code>, installed with the driver) on hosts with NVIDIA GPUs.</p>
		<p>If a host has GPUs, point the agent at the library with <code>-nvml-path=/path/to/libnvidia-ml.so.1</code>, or let it search the usual places with <code>-nvml-auto-scan</code>; its log says <code>GPU metrics off: NVML could not be loaded</code> when it found none. <code>-enable-gpu-metrics=false</code> turns them off.</p>`
	);
}

// --- for tests and the console ------------------------------------------------------------

function expose() {
	if (!v) return;
	window.emberMetrics = {
		params: { ...v.params },
		names: v.names ? [...v.names.keys()] : null,
		requests: v.requests.map((r) => ({ ...r })),
		panels: Object.fromEntries(
			Object.entries(v.data)
				.filter(([, d]) => d)
				.map(([id, d]) => [id, { unit: d.unit, bucket_ms: d.bucket_ms, start_ts: d.start_ts, series: d.series.map((s) => ({ name: s.name, group: s.group, values: s.values })), percentiles: d.percentiles || null }])
		),
		charts: v.charts,
		xids: (v.marks || []).map((m) => ({ ...m })),
	};
}

// --- the contract ----------------------------------------------------------------------

function show(root, ctx) {
	loadStylesheet('view_metrics.css');
	if (!v || v.els.root !== root || !root.querySelector('.met')) {
		if (v && v.ctl) v.ctl.abort();
		v = { els: build(root), ctx, params: null, key: '', ctl: null, names: null, data: {}, charts: {}, panels: [], requests: [], own: false };
	}
	const own = v.own;
	v.ctx = ctx;
	v.params = paramsOf(ctx);
	v.els.by.value = v.params.by;
	v.els.note.textContent = `Host, process, disk and GPU metrics from ember-agent, ${ctx.rangeText}${ctx.q.trim() ? ', for the query' : ''}.`;
	const key = JSON.stringify([ctx.project, ctx.range, ctx.range === 'custom' ? [ctx.start_ts, ctx.end_ts] : 0, ctx.q.trim(), v.params.by]);
	// Our own sort: the table only.
	if (own && key === v.key) {
		renderTable();
		expose();
		return;
	}
	v.key = key;
	closePop();
	if (v.ctl) v.ctl.abort();
	v.ctl = new AbortController();
	v.data = {};
	if (v.els.content.hidden) {
		v.els.message.innerHTML = messageHTML('info', 'Loading\u2026');
		v.els.message.hidden = false;
	}
	ctx.setState('loading');
	run();
}

function hide() {
	if (!v) return;
	if (v.ctl) v.ctl.abort();
	v.ctl = null;
	v.key = '';
	closePop();
}

export default { id: 'metrics', title: 'Metrics', show, hide };
