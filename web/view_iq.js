// view_iq.js - the "Efficiency IQ" view, ember's landing overview: the
// fleet's compute over time (stacked per host, drag to zoom the page's time
// range), headline numbers (average and peak cores, hosts, the share of the
// fleet's CPUs or of the profiled CPU time), the top 5 functions and the
// top 5 hosts, deployments, containers or executables. A CPU tab and a GPU
// tab: GPU time (event_kind cuda) over time, the top 5 kernels (the CUDA
// frames that ran: kernels, copies, memsets, syncs) and the GPU time by
// device, GPU model, process, executable or host, and a timeline of the
// newest GPU work per device and stream (gpu_timeline.js: click a bar for
// the stack that launched it), and when the hosts send NVML metrics, how
// busy and idle the GPUs were (hw.gpu.utilization); while there is no GPU
// time, how to record it.
//
// URL parameters: tab (cpu | gpu), mode (relative | absolute), etype (CPU:
// host | deployment | container | executable; GPU: device | model | process
// | executable | host), by (host | total).
//
// Four requests run in parallel, each panel with its own loading and error
// state; a change of mode, entity type or stacking refetches only the
// panels it concerns.

import { escapeHTML, fmtCores, fmtInt, fmtPct, fmtWaited, emptyHTML, apiErrorHTML, messageHTML, sortableTable, withFilter, ApiError, loadStylesheet, setOwnParams, gpuHowHTML, KERNEL_TYPES } from './common.js';
import { timeChart } from './chart.js';
import { renderTimeline } from './gpu_timeline.js';
import { typeLabel } from './flamegraph.js';
import { recsCard } from './view_recs.js';

const ENTITY_TYPES = {
	host: ['Hosts', 'host.name'],
	deployment: ['Deployments', 'k8s.deployment.name'],
	container: ['Containers', 'container.name'],
	executable: ['Executables', 'process.executable.name'],
};
// The GPU tab's entities: the GPU time of each device (gpu.device.index,
// one host's GPUs apart; filter by a host to tell hosts' GPU 0 apart), GPU
// model, process (PID), executable or host.
const GPU_ENTITY_TYPES = {
	device: ['Devices', 'gpu.device.index'],
	model: ['GPU models', 'gpu.name'],
	process: ['Processes', 'process.pid'],
	executable: ['Executables', 'process.executable.name'],
	host: ['Hosts', 'host.name'],
};
const entityTypes = (tab) => (tab === 'gpu' ? GPU_ENTITY_TYPES : ENTITY_TYPES);
const DEFAULT_ETYPE = { cpu: 'host', gpu: 'device' };
const MODE_NOTE = {
	absolute:
		'Absolute: percentages are of the logical CPUs of the hosts that sent samples, as htop shows \u2014 100% is every CPU busy (a host\u2019s row: of its own CPUs).',
	relative:
		'Relative: percentages are shares of all CPU time profiled in the project in this time range (whatever the query), to compare workloads with each other.',
};
const GPU_NOTE = 'GPU percentages are shares of all GPU time profiled in the project in this time range; values are GPUs busy on average (GPU-seconds per second).';
const PANELS = ['series', 'hosts', 'functions', 'entities'];
const TIMELINE_SPANS = 5000; // the newest GPU spans the timeline draws

let v = null; // the view's state while shown (see show)

// "2 min 10 s", "15 min", "6 h"
function fmtDuration(sec) {
	const s = Math.round(sec);
	if (s < 60) return `${s} s`;
	if (s < 3600) return s % 60 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${s / 60} min`;
	const h = Math.floor(s / 3600), m = Math.round((s % 3600) / 60);
	if (s < 86400) return m ? `${h} h ${m} min` : `${h} h`;
	return `${Number((s / 86400).toFixed(1))} days`;
}

const fmtTime = (ms) => new Date(ms).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' });

// The params of the view, with their defaults.
function paramsOf(ctx) {
	const tab = ctx.param('tab') === 'gpu' ? 'gpu' : 'cpu';
	const mode = tab === 'gpu' ? 'relative' : ctx.param('mode') === 'absolute' ? 'absolute' : 'relative';
	const etype = entityTypes(tab)[ctx.param('etype')] ? ctx.param('etype') : DEFAULT_ETYPE[tab];
	const by = ctx.param('by') === 'total' ? 'total' : 'host';
	return { tab, mode, etype, by };
}

// A name like "[no host]" stands for samples without the attribute, which
// compare as "" in a query.
const filterValue = (name) => (/^\[no [^\]]*\]$/.test(name) ? '' : name);

// --- the skeleton -------------------------------------------------------------

function build(root) {
	root.innerHTML = `<div class="view-body iq">
	<div class="iq-head">
		<h1>Efficiency IQ</h1>
		<div class="iq-tabs" role="tablist" aria-label="Resource">
			<button type="button" role="tab" data-tab="cpu">CPU</button>
			<button type="button" role="tab" data-tab="gpu">GPU</button>
		</div>
		<div class="iq-mode" role="group" aria-label="CPU percentage mode">
			<span class="iq-mode-label">CPU %</span>
			<button type="button" data-mode="absolute" title="Percent of the hosts' logical CPUs, as htop shows">Absolute</button>
			<button type="button" data-mode="relative" title="Percent of all CPU time profiled in this range">Relative</button>
		</div>
	</div>
	<p class="iq-note"></p>
	<p class="iq-kind-note" hidden>Efficiency IQ shows CPU use (on-CPU samples) and GPU time (the GPU tab). The Show choice applies to the flame graph, Top functions, Top entities and Diff.</p>
	<div class="iq-message" hidden></div>
	<div class="iq-content" hidden>
		<div class="iq-cards">
			<div class="iq-card" data-card="avg"><div class="iq-card-label"></div><div class="iq-card-value"></div><div class="iq-card-sub"></div></div>
			<div class="iq-card" data-card="peak"><div class="iq-card-label"></div><div class="iq-card-value"></div><div class="iq-card-sub"></div></div>
			<div class="iq-card" data-card="hosts"><div class="iq-card-label"></div><div class="iq-card-value"></div><div class="iq-card-sub"></div></div>
			<div class="iq-card" data-card="share"><div class="iq-card-label"></div><div class="iq-card-value"></div><div class="iq-card-sub"></div></div>
		</div>
		<section class="panel iq-util">
			<div class="iq-panel-head">
				<h2></h2>
				<div class="iq-small-tabs" role="group" aria-label="Stack by">
					<button type="button" data-by="host">Per host</button>
					<button type="button" data-by="total">Total</button>
				</div>
			</div>
			<div class="iq-body" data-panel="series"></div>
			<p class="iq-hint">Drag across the chart to zoom into that time range; click a host in the legend to filter by it.</p>
		</section>
		<div class="iq-recs" data-recs></div>
		<div class="iq-grid">
			<section class="panel iq-functions">
				<div class="iq-panel-head">
					<h2><span class="iq-fn-title">Top 5 functions</span> <span class="iq-h2-sub">by self time</span></h2>
					<button type="button" class="iq-link" data-go="functions">All functions \u2192</button>
				</div>
				<div class="iq-body" data-panel="functions"></div>
			</section>
			<section class="panel iq-entities">
				<div class="iq-panel-head">
					<h2>Top 5 entities</h2>
					<div class="iq-small-tabs iq-etypes" role="tablist" aria-label="Entity type"></div>
					<button type="button" class="iq-link" data-go="entities">All entities \u2192</button>
				</div>
				<div class="iq-body" data-panel="entities"></div>
			</section>
		</div>
		<section class="panel iq-timeline" hidden>
			<div class="iq-panel-head">
				<h2>GPU timeline <span class="iq-h2-sub">per device and stream, the newest ${TIMELINE_SPANS} kernels and copies</span></h2>
			</div>
			<p class="iq-hint">Each bar is one kernel, copy, memset or sync as it ran on its GPU and stream, from its start to its end. Click a bar for the CPU stack that launched it.</p>
			<div class="iq-body" data-panel="timeline"></div>
		</section>
	</div>
</div>`;
	const q = (sel) => root.querySelector(sel);
	const els = {
		root,
		note: q('.iq-note'),
		message: q('.iq-message'),
		content: q('.iq-content'),
		mode: q('.iq-mode'),
		utilTitle: q('.iq-util h2'),
		fnTitle: q('.iq-fn-title'),
		fnSub: q('.iq-functions .iq-h2-sub'),
		fnLink: q('.iq-functions [data-go]'),
		etypes: q('.iq-etypes'),
		timeline: q('.iq-timeline'),
		body: Object.fromEntries(PANELS.filter((p) => p !== 'hosts').map((p) => [p, q(`.iq-body[data-panel="${p}"]`)])),
		cards: Object.fromEntries([...root.querySelectorAll('.iq-card')].map((c) => [c.dataset.card, c])),
	};
	root.querySelector('.iq-tabs').addEventListener('click', (ev) => {
		const b = ev.target.closest('button[data-tab]');
		if (b) setParam({ tab: b.dataset.tab === 'gpu' ? 'gpu' : null }, true);
	});
	root.querySelector('.iq-tabs').addEventListener('keydown', (ev) => {
		if (ev.key !== 'ArrowLeft' && ev.key !== 'ArrowRight') return;
		const next = v.params.tab === 'gpu' ? 'cpu' : 'gpu';
		setParam({ tab: next === 'gpu' ? 'gpu' : null }, true);
		root.querySelector(`.iq-tabs [data-tab="${next}"]`).focus();
	});
	els.mode.addEventListener('click', (ev) => {
		const b = ev.target.closest('button[data-mode]');
		if (b && b.dataset.mode !== v.params.mode) setParam({ mode: b.dataset.mode }, true);
	});
	q('.iq-util .iq-small-tabs').addEventListener('click', (ev) => {
		const b = ev.target.closest('button[data-by]');
		if (b) setParam({ by: b.dataset.by === 'total' ? 'total' : null }, false);
	});
	q('.iq-entities .iq-small-tabs').addEventListener('click', (ev) => {
		const b = ev.target.closest('button[data-etype]');
		if (b) setParam({ etype: b.dataset.etype === DEFAULT_ETYPE[v.params.tab] ? null : b.dataset.etype }, false);
	});
	for (const b of root.querySelectorAll('[data-go]'))
		b.addEventListener('click', () => {
			const ctx = v.ctx;
			const gpu = v.params.tab === 'gpu';
			if (b.dataset.go === 'functions') ctx.go('functions', gpu ? { q: ctx.q, kind: 'cuda', only: 'kernels' } : { q: ctx.q });
			else if (gpu) {
				// Top entities has no tab per GPU device or model: their hosts.
				const e = ['process', 'executable', 'host'].includes(v.params.etype) ? v.params.etype : 'host';
				ctx.go('entities', { q: ctx.q, kind: 'cuda', entity: e });
			} else ctx.go('entities', { q: ctx.q, entity: v.params.etype });
		});
	return els;
}

// Sets this view's URL parameters (show() runs again, knowing it was us).
function setParam(obj, push) {
	setOwnParams(v, obj, push);
}

function syncControls() {
	const { els, params } = v;
	for (const b of els.root.querySelectorAll('[data-tab]')) {
		const on = b.dataset.tab === params.tab;
		b.setAttribute('aria-selected', String(on));
		b.tabIndex = on ? 0 : -1;
	}
	for (const b of els.root.querySelectorAll('[data-mode]')) b.setAttribute('aria-pressed', String(b.dataset.mode === params.mode));
	for (const b of els.root.querySelectorAll('[data-by]')) b.setAttribute('aria-pressed', String(b.dataset.by === params.by));
	const types = entityTypes(params.tab);
	if (els.etypes.dataset.tab !== params.tab) {
		els.etypes.dataset.tab = params.tab;
		els.etypes.innerHTML = Object.entries(types)
			.map(([k, [label]]) => `<button type="button" role="tab" data-etype="${k}">${label}</button>`)
			.join('');
	}
	for (const b of els.root.querySelectorAll('[data-etype]')) b.setAttribute('aria-selected', String(b.dataset.etype === params.etype));
	const gpu = params.tab === 'gpu';
	els.fnTitle.textContent = gpu ? 'Top 5 kernels' : 'Top 5 functions';
	els.fnSub.textContent = gpu ? 'by GPU time' : 'by self time';
	els.fnLink.textContent = gpu ? 'All kernels \u2192' : 'All functions \u2192';
	els.mode.hidden = params.tab === 'gpu';
	els.note.textContent = params.tab === 'gpu' ? GPU_NOTE : MODE_NOTE[params.mode];
	els.utilTitle.textContent = params.tab === 'gpu' ? 'GPU utilization over time' : 'Fleet compute utilization over time';
}

// --- the requests ---------------------------------------------------------------

// What each panel's answer depends on.
function keysOf(base, p) {
	return {
		series: JSON.stringify([base, p.by]),
		hosts: base,
		functions: JSON.stringify([base, p.mode]),
		entities: JSON.stringify([base, p.etype, p.mode]),
	};
}

function requestOf(panel, filter, p) {
	switch (panel) {
		case 'series':
			return ['timeseries', { filter, group_by: p.by === 'host' ? 'host' : null, num_buckets: 60, limit: 10 }];
		case 'hosts':
			return ['top_entities', { filter, entity: 'host', limit: 1000, cpu_mode: 'absolute' }];
		case 'functions':
			// The GPU tab ranks the GPU work itself: kernels, copies, memsets, syncs.
			return ['top_functions', { filter, limit: 5, sort: 'self', cpu_mode: p.mode, ...(p.tab === 'gpu' ? { frame_types: KERNEL_TYPES } : {}) }];
		default:
			return ['top_entities', { filter, entity: p.tab === 'gpu' ? GPU_ENTITY_TYPES[p.etype][1] : p.etype, limit: 5, cpu_mode: p.mode }];
	}
}

async function load(panel, filter) {
	const s = v;
	if (s.ctl[panel]) s.ctl[panel].abort();
	const ctl = new AbortController();
	s.ctl[panel] = ctl;
	s.pending.add(panel);
	s.err[panel] = null;
	renderLoading(panel);
	const [name, body] = requestOf(panel, filter, s.params);
	try {
		const data = await s.ctx.api(name, body, ctl.signal);
		if (s !== v || s.ctl[panel] !== ctl) return;
		s.data[panel] = data;
	} catch (e) {
		if (e.name === 'AbortError' || s !== v || s.ctl[panel] !== ctl) return;
		s.data[panel] = null;
		s.err[panel] = e;
	}
	s.ctl[panel] = null;
	s.pending.delete(panel);
	render(panel);
	settle();
}

// --- rendering ------------------------------------------------------------------

const unitWord = () => (v.params.tab === 'gpu' ? 'GPUs' : 'cores');

function renderLoading(panel) {
	const body = v.els.body[panel];
	if (body) {
		if (body.childElementCount && !body.querySelector('.iq-loading')) body.classList.add('stale');
		else body.innerHTML = '<p class="iq-loading">Loading\u2026</p>';
	}
	if (panel === 'series' || panel === 'hosts') renderCards();
}

function render(panel) {
	if (panel === 'series') renderSeries();
	else if (panel === 'functions') renderFunctions();
	else if (panel === 'entities') renderEntities();
	if (panel === 'series' || panel === 'hosts') renderCards();
}

function panelError(panel) {
	const body = v.els.body[panel];
	body.classList.remove('stale');
	body.innerHTML = apiErrorHTML(v.err[panel]);
}

function emptyPanel(body, text) {
	body.classList.remove('stale');
	body.innerHTML = `<p class="iq-none">${escapeHTML(text)}</p>`;
}

function renderSeries() {
	const body = v.els.body.series;
	v.chartLater = false;
	if (v.chart) {
		v.chart.destroy();
		v.chart = null;
	}
	if (v.err.series) return panelError('series');
	const d = v.data.series;
	if (!d || !d.series || !d.series.length) return emptyPanel(body, `No samples in ${v.ctx.rangeText}.`);
	// The chart takes its container's width: draw it once it is shown.
	v.chartLater = v.els.content.hidden;
	if (v.chartLater) return;
	body.classList.remove('stale');
	const grouped = v.params.by === 'host';
	const series = d.series.map((s) => ({ name: grouped ? s.name : 'All hosts', values: s.values }));
	const ctx = v.ctx;
	v.chart = timeChart(body, {
		start_ts: d.start_ts,
		bucket_ms: d.bucket_ms,
		series,
		unit: unitWord(),
		stacked: true,
		height: 180,
		format: fmtCores,
		onZoom: (a, b) => ctx.setTimeRange(a, b),
		onSeries: grouped ? (name) => name !== '[other]' && ctx.addFilter('host.name', filterValue(name)) : null,
	});
}

// The cores of each bucket, summed over the series.
function bucketSums(d) {
	const n = d.series.reduce((m, s) => Math.max(m, s.values.length), 0);
	const sums = new Array(n).fill(0);
	for (const s of d.series) s.values.forEach((x, i) => (sums[i] += Number(x) || 0));
	return sums;
}

function setCard(name, label, value, sub, title = '') {
	const c = v.els.cards[name];
	c.querySelector('.iq-card-label').textContent = label;
	c.querySelector('.iq-card-value').textContent = value;
	c.querySelector('.iq-card-sub').textContent = sub;
	c.title = title;
}

function renderCards() {
	const gpu = v.params.tab === 'gpu';
	const loading = (p) => v.pending.has(p);
	const failed = (p) => (v.err[p] ? `could not load: ${v.err[p].message}` : '');
	const wait = '\u2026', none = '\u2013';

	// Average and peak: both from the time series, on one time base (its
	// buckets). The average is over the buckets from the first with data
	// to the last, so it can never exceed the busiest bucket (the peak);
	// a total divided by the seconds its rows span would (a row of 10 s in
	// a 15 s bucket).
	const h = v.data.hosts;
	const d = v.data.series;
	let avg = null, peak = null, peakAt = 0, spanS = 0;
	if (d && !loading('series') && d.series && d.series.length) {
		const sums = bucketSums(d);
		let first = -1, last = -1;
		sums.forEach((x, i) => {
			if (x > 0) {
				if (first < 0) first = i;
				last = i;
			}
			if (peak === null || x > peak) {
				peak = x;
				peakAt = d.start_ts + i * d.bucket_ms;
			}
		});
		if (first >= 0) {
			let sum = 0;
			for (let i = first; i <= last; i++) sum += sums[i];
			avg = sum / (last - first + 1);
			spanS = ((last - first + 1) * d.bucket_ms) / 1000;
		} else {
			avg = 0;
		}
	}
	const buckets = d ? `${fmtDuration(d.bucket_ms / 1000)} buckets` : '';
	const over = !spanS
		? 'no samples'
		: Math.abs(spanS - v.ctx.seconds) > Math.max(2, v.ctx.seconds * 0.01)
			? `over the ${fmtDuration(spanS)} with data, ${buckets}`
			: `over ${v.ctx.rangeText}, ${buckets}`;
	const hv = (x) => (loading('hosts') ? wait : h && !v.err.hosts ? x() : none);
	const sv = (x) => (loading('series') ? wait : d && !v.err.series ? x() : none);
	const base = 'Average and peak are read from the chart\'s buckets: the average over the buckets from the first with data to the last.';
	setCard('avg', gpu ? 'Average GPUs busy' : 'Average cores used', sv(() => fmtCores(avg)), sv(() => over), failed('series') || base);

	// Peak: the busiest bucket of the time series.
	setCard(
		'peak',
		gpu ? 'Peak GPUs busy' : 'Peak cores used',
		sv(() => (peak === null ? '0' : fmtCores(peak))),
		sv(() => (peak === null ? 'no samples' : `at ${fmtTime(peakAt)}, ${buckets}`)),
		failed('series') || base
	);

	// Hosts and their logical CPUs.
	const ents = (h && h.entities) || [];
	const withCpus = ents.filter((e) => e.cpus > 0);
	const cpus = withCpus.reduce((a, e) => a + e.cpus, 0);
	const hostCount = h ? h.entities_total ?? ents.length : 0;
	setCard(
		'hosts',
		gpu ? 'Hosts with GPU time' : 'Hosts',
		hv(() => fmtInt(hostCount)),
		hv(() => (gpu ? 'sent GPU samples' : cpus ? `${fmtInt(cpus)} logical CPUs${withCpus.length < ents.length ? ` (${ents.length - withCpus.length} unknown)` : ''}` : 'CPU count unknown')),
		failed('hosts')
	);

	// The share: of the fleet's CPUs (absolute) or of the profiled time (relative).
	if (v.params.mode === 'absolute') {
		const used = withCpus.reduce((a, e) => a + (e.cores || 0), 0);
		setCard(
			'share',
			'Fleet CPU utilization',
			hv(() => (cpus ? fmtPct((100 * used) / cpus) : none)),
			hv(() => (cpus ? `${fmtCores(used)} of ${fmtInt(cpus)} CPUs busy on average` : 'the hosts sent no CPU count')),
			failed('hosts')
		);
	} else if (gpu && v.nvml && v.nvml.util !== null) {
		// NVML's view: the share of time a kernel ran on the GPUs, averaged
		// over the GPUs and the range; the rest is idle.
		const u = v.nvml.util;
		setCard(
			'share',
			'GPUs busy (NVML)',
			fmtPct(u),
			`idle ${fmtPct(100 - u)} of the time, ${fmtInt(v.nvml.gpus)} GPU${v.nvml.gpus === 1 ? '' : 's'} reporting`,
			'hw.gpu.utilization from NVML (ember-agent -enable-gpu-metrics): the share of time a kernel ran, averaged over the GPUs that match the query and over the range; idle is the rest.'
		);
	} else {
		const all = h && h.scope ? h.scope.all_total : 0;
		setCard(
			'share',
			gpu ? 'Share of profiled GPU time' : 'Share of profiled CPU',
			hv(() => (all ? fmtPct((100 * h.total) / all) : none)),
			hv(() => (v.ctx.q.trim() ? 'what the query matches, of the whole project' : 'the whole project (no query)')),
			failed('hosts')
		);
	}
}

// A percentage with a bar scaled to the largest of the list.
function pctCell(percent, max) {
	const span = document.createElement('span');
	span.className = 'iq-pct';
	const bar = document.createElement('span');
	bar.className = 'bar';
	bar.style.width = `${max > 0 ? Math.max(1, Math.round((60 * (percent || 0)) / max)) : 0}px`;
	bar.setAttribute('aria-hidden', 'true');
	const text = document.createElement('span');
	text.textContent = fmtPct(percent);
	span.append(bar, text);
	return span;
}

function nameCell(name, title) {
	const span = document.createElement('span');
	span.textContent = name;
	if (title) span.title = title;
	return span;
}

function renderFunctions() {
	const body = v.els.body.functions;
	if (v.err.functions) return panelError('functions');
	const d = v.data.functions;
	// Sorted by self time: a function with none (only calling) says nothing here.
	const rows = ((d && d.functions) || []).filter((r) => r.self > 0);
	const gpu = v.params.tab === 'gpu';
	if (!rows.length) return emptyPanel(body, gpu ? 'No kernels in this range.' : 'No functions in this range.');
	const max = Math.max(...rows.map((r) => r.self_percent || 0));
	const ctx = v.ctx;
	const unit = unitWord();
	const table = sortableTable(
		gpu
			? [
				{ key: 'name', label: 'Kernel', render: (r) => nameCell(r.name, typeLabel(r.frame_type)) },
				{ key: 'self', label: 'GPU time', num: true, render: (r) => fmtWaited(r.self) },
				{ key: 'self_percent', label: 'GPU %', num: true, render: (r) => pctCell(r.self_percent, max) },
			]
			: [
				{ key: 'name', label: 'Function', render: (r) => nameCell(r.name, [r.binary, r.file].filter(Boolean).join(' \u00b7 ')) },
				{ key: 'self_cores', label: `Self ${unit}`, num: true, render: (r) => fmtCores(r.self_cores) },
				{ key: 'self_percent', label: 'Self CPU %', num: true, render: (r) => pctCell(r.self_percent, max) },
			],
		rows,
		{
			onRow: (r) => ctx.go('flamegraph', gpu ? { q: ctx.q, s: r.name, kind: 'cuda' } : { q: ctx.q, s: r.name }),
			rowTitle: gpu ? 'Open the GPU flame graph with this kernel highlighted: the CPU stacks that launched it' : 'Open the flame graph with this function highlighted',
		}
	);
	table.classList.add('iq-table');
	table.querySelectorAll('tbody td:first-child').forEach((td) => td.classList.add('name'));
	body.classList.remove('stale');
	body.replaceChildren(table);
}

function renderEntities() {
	const body = v.els.body.entities;
	if (v.err.entities) return panelError('entities');
	const d = v.data.entities;
	const rows = (d && d.entities) || [];
	const gpu = v.params.tab === 'gpu';
	const [label, defaultAttr] = entityTypes(v.params.tab)[v.params.etype];
	if (!rows.length) return emptyPanel(body, `No ${label.toLowerCase()} in this range.`);
	const attr = (d && d.attribute) || defaultAttr;
	const max = Math.max(...rows.map((r) => r.percent || 0));
	const ctx = v.ctx;
	const flame = (r) => {
		const b = document.createElement('button');
		b.type = 'button';
		b.className = 'iq-flame';
		b.textContent = 'Flamegraph';
		b.title = `Open the flame graph of ${r.name}`;
		const go = (ev) => {
			ev.stopPropagation();
			const q = withFilter(ctx.q, attr, filterValue(r.name));
			ctx.go('flamegraph', gpu ? { q, kind: 'cuda' } : { q });
		};
		b.addEventListener('click', go);
		b.addEventListener('keydown', (ev) => ev.key === 'Enter' && ev.stopPropagation());
		return b;
	};
	const absHost = v.params.mode === 'absolute' && v.params.etype === 'host';
	const table = sortableTable(
		[
			{ key: 'name', label: label.replace(/s$/, ''), render: (r) => nameCell(gpu ? gpuEntityName(v.params.etype, r.name) : r.name, absHost && r.cpus ? `${r.cpus} logical CPUs` : '') },
			...(gpu ? [{ key: 'total', label: 'GPU time', num: true, render: (r) => fmtWaited(r.total) }] : []),
			{ key: 'cores', label: gpu ? 'GPUs busy' : unitWord()[0].toUpperCase() + unitWord().slice(1), num: true, render: (r) => fmtCores(r.cores) },
			{ key: 'percent', label: absHost ? '% of its CPUs' : v.params.tab === 'gpu' ? 'GPU %' : 'CPU %', num: true, render: (r) => pctCell(r.percent, max) },
			{ key: 'open', label: '', render: flame },
		],
		rows,
		{
			onRow: (r) => ctx.addFilter(attr, filterValue(r.name)),
			rowTitle: `Filter the page by ${attr}`,
		}
	);
	table.classList.add('iq-table');
	table.querySelectorAll('tbody td:first-child').forEach((td) => td.classList.add('name'));
	body.classList.remove('stale');
	body.replaceChildren(table);
}

// A GPU entity as the panel names it: "GPU 0" for device index 0, "PID
// 123" for a process; "[no ...]" names stay.
function gpuEntityName(etype, name) {
	if (/^\[no [^\]]*\]$/.test(name)) return name;
	if (etype === 'device') return `GPU ${name}`;
	if (etype === 'process') return `PID ${name}`;
	return name;
}

// --- the page's state -----------------------------------------------------------

// The GPU tab with no GPU samples: what it needs.
function gpuEmptyHTML() {
	const host = location.host || '127.0.0.1:8080';
	return messageHTML(
		'empty',
		`<p><strong>No GPU time in ${escapeHTML(v.ctx.rangeText)}: GPU profiling needs ember-agent on a host with NVIDIA GPUs, and a CUDA program started with its injection library.</strong></p>
		${gpuHowHTML(host)}
		<p>This tab also shows GPU time that any OpenTelemetry Profiles producer sends to this server: a <code>POST http://${escapeHTML(host)}/v1development/profiles</code> (protobuf) whose profile has the sample type <code>cuda</code>, <code>gpu_time</code> or <code>gpu_kernel_time</code> (nanoseconds).</p>
		<p>The CPU tab shows the fleet\u2019s CPU time meanwhile.</p>`
	);
}

const isKindRejected = (e) => e instanceof ApiError && e.status === 400 && /event_kind/.test(e.message);

function settle() {
	const s = v;
	if (s.pending.size) {
		s.ctx.setState('loading');
		return;
	}
	const { els, params } = s;
	const errs = PANELS.filter((p) => s.err[p]);
	const gpu = params.tab === 'gpu';
	const show = (html) => {
		els.message.innerHTML = html;
		els.message.hidden = false;
		els.content.hidden = true;
	};
	expose();
	if (gpu && errs.length && errs.every((p) => isKindRejected(s.err[p]))) {
		show(gpuEmptyHTML());
		return s.ctx.setState('empty');
	}
	if (errs.length === PANELS.length) {
		show(apiErrorHTML(s.err.series));
		return s.ctx.setState('error');
	}
	const totals = [];
	if (s.data.series && !s.err.series) totals.push(s.data.series.series.reduce((a, x) => a + (x.total || 0), 0));
	if (s.data.hosts && !s.err.hosts) totals.push(s.data.hosts.total || 0);
	if (s.data.functions && !s.err.functions) totals.push(s.data.functions.total || 0);
	if (totals.length && totals.every((t) => t === 0)) {
		show(gpu && !s.ctx.q.trim() ? gpuEmptyHTML() : emptyHTML(s.ctx.rangeText, s.ctx.q));
		return s.ctx.setState('empty');
	}
	els.message.hidden = true;
	els.content.hidden = false;
	if (s.chartLater) {
		renderSeries();
		expose();
	}
	s.ctx.setState('ready');
}

// For tests and the console: what the view shows.
function expose() {
	window.emberIQ = {
		chart: v.chart,
		params: { ...v.params },
		data: { ...v.data },
		timeline: v.timeline,
		nvml: v.nvml,
	};
}

// The GPU tab's busy / idle card: hw.gpu.utilization (NVML) averaged over
// the GPUs and the range. Without the metric in the range, the card stays
// the share of GPU time.
async function loadNvml(filter) {
	const s = v;
	if (s.nvmlCtl) s.nvmlCtl.abort();
	s.nvml = null;
	if (s.params.tab !== 'gpu') return;
	const ctl = new AbortController();
	s.nvmlCtl = ctl;
	const f = { start_ts: filter.start_ts, end_ts: filter.end_ts, query: filter.query };
	let nvml = null;
	try {
		// The names first: a project that never had the metric would answer 404.
		const names = await s.ctx.api('metrics/names', { filter: f }, ctl.signal);
		const n = (names.names || []).find((x) => x.name === 'hw.gpu.utilization');
		if (n) {
			const m = await s.ctx.api('metrics', { filter: f, metric: 'hw.gpu.utilization', group_by: null, temporal: 'avg', spatial: 'avg', num_buckets: 1 }, ctl.signal);
			const pt = m.series && m.series[0] && m.series[0].points && m.series[0].points[0];
			if (pt && Number.isFinite(pt[1])) nvml = { util: Math.max(0, Math.min(100, pt[1])), gpus: n.series };
		}
	} catch (e) {
		if (e.name === 'AbortError') return;
		nvml = null; // NVML metrics unreadable: the share card stays
	}
	if (s !== v || s.nvmlCtl !== ctl) return;
	s.nvmlCtl = null;
	s.nvml = nvml;
	renderCards();
	expose();
}

// The GPU tab's timeline: the newest GPU spans (its own request,
// apart from the four panels: the page is ready without it).
async function loadTimeline(filter) {
	const s = v;
	if (s.tlCtl) s.tlCtl.abort();
	const box = s.els.timeline;
	box.hidden = s.params.tab !== 'gpu';
	s.timeline = null;
	if (box.hidden) return;
	const ctl = new AbortController();
	s.tlCtl = ctl;
	const body = box.querySelector('.iq-body');
	body.innerHTML = '<p class="iq-loading">Loading\u2026</p>';
	try {
		const d = await s.ctx.api('gpu/timeline', { filter, limit: TIMELINE_SPANS }, ctl.signal);
		if (s !== v || s.tlCtl !== ctl) return;
		s.timeline = renderTimeline(body, d);
	} catch (e) {
		if (e.name === 'AbortError' || s !== v || s.tlCtl !== ctl) return;
		body.innerHTML = apiErrorHTML(e);
		s.timeline = { error: e.message };
	}
	s.tlCtl = null;
	expose();
}

// --- the contract ---------------------------------------------------------------

function show(root, ctx) {
	loadStylesheet('view_iq.css');
	if (!v || v.els.root !== root || !root.querySelector('.iq')) {
		abortAll();
		v = { els: null, ctx, params: null, keys: {}, data: {}, err: {}, ctl: {}, pending: new Set(), chart: null, own: false, fetchedAt: 0 };
		v.els = build(root);
	}
	const own = v.own;
	v.ctx = ctx;
	// The page's Show switch is off-CPU: this view stays on CPU and GPU use.
	root.querySelector('.iq-kind-note').hidden = ctx.kind === 'on_cpu';
	const params = paramsOf(ctx);
	const tabChanged = v.params && v.params.tab !== params.tab;
	v.params = params;
	syncControls();
	const base = JSON.stringify([ctx.project, ctx.range, ctx.range === 'custom' ? [ctx.start_ts, ctx.end_ts] : 0, ctx.q.trim(), params.tab]);
	const keys = keysOf(base, params);
	// Shown again by the page (activation, Refresh, popstate) rather than
	// by our own controls: fetch everything again, the data may be old.
	if (!own) v.keys = {};
	const stale = PANELS.filter((p) => v.keys[p] !== keys[p]);
	if (!stale.length) {
		renderCards();
		if (!v.pending.size) settle();
		return;
	}
	if (tabChanged || !v.fetchedAt) {
		els().content.hidden = true;
		els().message.hidden = true;
	}
	const filter = ctx.filter();
	filter.event_kind = params.tab === 'gpu' ? 'cuda' : 'on_cpu';
	v.fetchedAt = Date.now();
	for (const p of stale) {
		v.keys[p] = keys[p];
		if (tabChanged) v.data[p] = null;
	}
	if (!els().message.hidden && stale.length === PANELS.length) els().message.hidden = true;
	if (els().content.hidden && els().message.hidden) {
		els().message.innerHTML = messageHTML('info', 'Loading\u2026');
		els().message.hidden = false;
	}
	ctx.setState('loading');
	recsCard(root.querySelector('[data-recs]'), ctx.project, params.tab === 'gpu' ? 'cuda' : 'cpu', ctx.go);
	for (const p of stale) load(p, filter);
	if (stale.includes('series')) {
		loadTimeline(filter);
		loadNvml(filter);
	}
	if (PANELS.some((p) => !stale.includes(p))) renderCards();
}

const els = () => v.els;

function abortAll() {
	if (!v) return;
	for (const p of PANELS) if (v.ctl[p]) v.ctl[p].abort();
	v.ctl = {};
	if (v.tlCtl) v.tlCtl.abort();
	v.tlCtl = null;
	if (v.nvmlCtl) v.nvmlCtl.abort();
	v.nvmlCtl = null;
	v.pending.clear();
}

function hide() {
	if (!v) return;
	abortAll();
	// The next show fetches again.
	v.keys = {};
	v.fetchedAt = 0;
}

export default { id: 'iq', title: 'Efficiency IQ', show, hide };
