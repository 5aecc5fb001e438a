// view_recs.js - the "Recommendations" view: the built-in analyzer's
// recommendations for the page's project (GET /public/api/v1/project/{p}/
// recommendations?kind=..., docs/recommendations.md), one per application
// and kind, sorted by peak usage, on the tabs All / CPU / CUDA; and the
// detail panel of the one selected, with the reference's sections: issue
// detected, usage over time, recommended actions with savings, analysis
// (evidence with source locations), affected entities, technical details;
// and Dismiss / Restore (POST .../recommendations/{id}/state). The
// lifecycle: Regenerate (the analysis again) and Refresh traces (the hot
// traces read again, then the analysis) for the project, Suppress on each
// hot trace (an accepted cost, left out until unsuppressed from the
// "Suppressed hot traces" list). Cards say whether a recommendation is
// new or worsened since the previous generation.
//
// URL parameters: tab (all | cpu | cuda; default all), rec (the id of the
// recommendation shown), dismissed (1: list the dismissed ones too).
// The time range and query of the page do not apply: the server analyzes
// its own window (--recs-window, 6 h by default).

import { apiJSON, escapeHTML, fmtCores, fmtPct, apiErrorHTML, messageHTML, loadStylesheet } from './common.js';

const TABS = { all: 'All', cpu: 'CPU', cuda: 'CUDA' };
const COLORS = ['#c2410c', '#2563eb', '#16a34a', '#9333ea', '#ca8a04', '#0891b2', '#db2777', '#4b5563'];

let v = null;

const money = new Intl.NumberFormat('en-US', { style: 'currency', currency: 'USD', maximumFractionDigits: 0 });

export function fmtMoney(x) {
	return Number.isFinite(x) ? money.format(x) : '\u2013';
}

// "1.2 cores", "0.4 GPUs", "3 threads".
export function fmtAmount(x, unit) {
	const word = unit === 'gpus' ? 'GPUs' : unit === 'threads' ? 'threads' : 'cores';
	return `${fmtCores(x)} ${word}`;
}

// The savings of a recommendation or action, in words.
export function fmtSavings(s) {
	if (!s) return '\u2013';
	if (s.gpu_seconds_per_hour !== undefined) return `${fmtCores(s.gpu_seconds_per_hour)} GPU-s/h \u00b7 ${fmtMoney(s.annual_cost)}/yr`;
	if (s.blocked_threads) return `${fmtCores(s.blocked_threads)} waiting threads`;
	return `${fmtCores(s.cores)} cores \u00b7 ${fmtMoney(s.annual_cost)}/yr`;
}

function url(ctx, kind) {
	return `/public/api/v1/project/${encodeURIComponent(ctx.project)}/recommendations?kind=${kind}`;
}

function build(root) {
	root.innerHTML = `<div class="view-body recs">
	<div class="recs-head">
		<h1>Recommendations</h1>
		<div class="recs-tabs" role="tablist" aria-label="Kind">
			${Object.entries(TABS).map(([k, t]) => `<button type="button" role="tab" data-tab="${k}">${t}</button>`).join('')}
		</div>
		<label class="recs-dismissed"><input type="checkbox" data-dismissed> Show dismissed</label>
		<div class="recs-lifecycle"><button type="button" data-act="regenerate" title="Run the analysis again on the hot traces of the last generation">Regenerate</button>
		<button type="button" data-act="refresh" title="Read the heaviest hot traces again, then run the analysis">Refresh traces</button>
		<span class="recs-gen recs-muted"></span></div>
	</div>
	<p class="recs-note">The heaviest code paths of the last hours, grouped by application and matched against ember's built-in knowledge base of performance patterns. Sorted by peak usage.</p>
	<div class="recs-message" hidden></div>
	<div class="recs-layout">
		<div class="recs-list" role="list"></div>
		<div class="recs-detail panel" hidden></div>
	</div>
	<details class="recs-suppressed" hidden><summary>Suppressed hot traces</summary><div class="recs-suppressed-body"></div></details>
</div>`;
	root.querySelector('.recs-tabs').addEventListener('click', (ev) => {
		const b = ev.target.closest('button[data-tab]');
		if (b) v.ctx.setParams({ tab: b.dataset.tab === 'all' ? null : b.dataset.tab, rec: null }, true);
	});
	root.querySelector('[data-dismissed]').addEventListener('change', (ev) => {
		v.ctx.setParams({ dismissed: ev.target.checked ? '1' : null });
	});
	root.querySelector('.recs-lifecycle').addEventListener('click', (ev) => {
		const b = ev.target.closest('button[data-act]');
		if (b) lifecycle(b.dataset.act, 'POST', `/${b.dataset.act}`);
	});
	root.querySelector('.recs-suppressed').addEventListener('click', (ev) => {
		const b = ev.target.closest('button[data-unsuppress]');
		if (b) lifecycle('unsuppress', 'DELETE', `/hot-traces/${encodeURIComponent(b.dataset.unsuppress)}/suppress`);
	});
	root.querySelector('.recs-list').addEventListener('click', (ev) => {
		const card = ev.target.closest('[data-rec]');
		if (card) v.ctx.setParams({ rec: card.dataset.rec }, true);
	});
	root.querySelector('.recs-detail').addEventListener('click', (ev) => {
		const b = ev.target.closest('button[data-act]');
		if (!b) return;
		if (b.dataset.act === 'close') v.ctx.setParams({ rec: null }, true);
		else if (b.dataset.act === 'state') setStateOf(b.dataset.id, b.dataset.state);
		else if (b.dataset.act === 'flame') v.ctx.go('flamegraph', { q: b.dataset.q, range: '6h' });
		else if (b.dataset.act === 'suppress') {
			ev.preventDefault(); // inside a <summary>: do not toggle it
			lifecycle('suppress', 'POST', `/hot-traces/${encodeURIComponent(b.dataset.trace)}/suppress`);
		}
	});
	return { root, gen: root.querySelector('.recs-gen'), suppressed: root.querySelector('.recs-suppressed'), list: root.querySelector('.recs-list'), detail: root.querySelector('.recs-detail'), message: root.querySelector('.recs-message') };
}

function show(root, ctx) {
	loadStylesheet('view_recs.css');
	if (!v || v.els.root !== root || !root.querySelector('.recs')) {
		if (v && v.ctl) v.ctl.abort();
		v = { els: build(root), ctx, key: null, data: null };
	}
	v.ctx = ctx;
	const tab = TABS[ctx.param('tab')] ? ctx.param('tab') : 'all';
	for (const b of root.querySelectorAll('.recs-tabs button')) b.setAttribute('aria-selected', String(b.dataset.tab === tab));
	root.querySelector('[data-dismissed]').checked = ctx.param('dismissed') === '1';
	const key = JSON.stringify([ctx.project, tab]);
	if (key === v.key && v.data) {
		render();
		return;
	}
	v.key = key;
	v.data = null;
	load(tab);
}

async function load(tab) {
	if (v.ctl) v.ctl.abort();
	const ctl = (v.ctl = new AbortController());
	v.ctx.setState('loading');
	v.els.message.innerHTML = messageHTML('info', 'Analyzing the hot traces\u2026');
	v.els.message.hidden = false;
	try {
		const data = await apiJSON('GET', url(v.ctx, tab), undefined, ctl.signal);
		if (ctl !== v.ctl) return;
		v.data = data;
		render();
		loadSuppressed(ctl);
	} catch (e) {
		if (e.name === 'AbortError') return;
		v.els.message.innerHTML = apiErrorHTML(e);
		v.els.message.hidden = false;
		v.els.list.innerHTML = '';
		v.els.detail.hidden = true;
		v.ctx.setState('error');
	}
}

// The suppressed hot traces of the project, each with Unsuppress.
async function loadSuppressed(ctl) {
	try {
		const d = await apiJSON('GET', `/public/api/v1/project/${encodeURIComponent(v.ctx.project)}/recommendations/suppressed`, undefined, ctl.signal);
		if (ctl !== v.ctl) return;
		const list = d.suppressed;
		v.els.suppressed.hidden = !list.length;
		v.els.suppressed.querySelector('summary').textContent = `Suppressed hot traces (${list.length})`;
		v.els.suppressed.querySelector('.recs-suppressed-body').innerHTML = `<ul>${list.map((s) => `<li data-trace="${escapeHTML(s.trace_id)}"><code>${escapeHTML(s.trace_id)}</code> ${escapeHTML(s.application)} · leaf <code>${escapeHTML(s.leaf)}</code> <span class="recs-muted">by ${escapeHTML(s.actor)}, ${escapeHTML(new Date(s.at).toLocaleString())}</span> <button type="button" data-unsuppress="${escapeHTML(s.trace_id)}">Unsuppress</button></li>`).join('')}</ul>`;
	} catch (e) {
		if (e.name !== 'AbortError') v.els.suppressed.hidden = true;
	}
}

// Regenerate, refresh, suppress or unsuppress (path under
// .../recommendations), then the list again.
async function lifecycle(what, method, path) {
	const busy = { regenerate: 'Regenerating…', refresh: 'Reading the hot traces again…', suppress: 'Suppressing the hot trace…', unsuppress: 'Bringing the hot trace back…' }[what];
	v.els.message.innerHTML = messageHTML('info', busy);
	v.els.message.hidden = false;
	try {
		await apiJSON(method, `/public/api/v1/project/${encodeURIComponent(v.ctx.project)}/recommendations${path}`);
		v.data = null;
		await load(TABS[v.ctx.param('tab')] ? v.ctx.param('tab') : 'all');
	} catch (e) {
		v.els.message.innerHTML = apiErrorHTML(e);
		v.els.message.hidden = false;
	}
}

async function setStateOf(id, state) {
	try {
		await apiJSON('POST', `/public/api/v1/project/${encodeURIComponent(v.ctx.project)}/recommendations/${encodeURIComponent(id)}/state`, { state });
		const r = v.data && v.data.recommendations.find((x) => x.id === id);
		if (r) r.state = state;
		render();
	} catch (e) {
		v.els.message.innerHTML = apiErrorHTML(e);
		v.els.message.hidden = false;
	}
}

function visible() {
	const all = (v.data && v.data.recommendations) || [];
	return v.ctx.param('dismissed') === '1' ? all : all.filter((r) => r.state !== 'dismissed');
}

function render() {
	const recs = visible();
	const els = v.els;
	const g = v.data.generation;
	els.gen.textContent = g ? `Generation ${g.seq} · ${new Date(g.generated_at).toLocaleTimeString()} (${g.trigger})` : '';
	if (!recs.length) {
		const s = v.data.settings || {};
		els.message.innerHTML = messageHTML('info', `No recommendations: no code path of this project used at least ${fmtPct((s.min_share || 0.005) * 100)} of its ${v.ctx.param('tab') === 'cuda' ? 'GPU' : 'CPU or GPU'} time in the last ${Math.round((s.window_ms || 0) / 3600000) || 6} hours${v.data.recommendations.length ? ' (the dismissed ones are hidden)' : ''}.`);
		els.message.hidden = false;
		els.list.innerHTML = '';
		els.detail.hidden = true;
		v.ctx.setState('empty');
		return;
	}
	els.message.hidden = true;
	const sel = v.ctx.param('rec');
	els.list.innerHTML = recs.map((r) => cardHTML(r, r.id === sel)).join('');
	const r = recs.find((x) => x.id === sel);
	els.detail.hidden = !r;
	els.root.querySelector('.recs-layout').classList.toggle('with-detail', !!r);
	if (r) els.detail.innerHTML = detailHTML(r);
	v.ctx.setState('ready');
}

function cardHTML(r, selected) {
	const top = r.actions[0];
	return `<div class="recs-card${selected ? ' selected' : ''}${r.state === 'dismissed' ? ' dismissed' : ''}" role="listitem" data-rec="${escapeHTML(r.id)}" tabindex="0">
	<div class="recs-card-top"><span class="recs-badge ${r.kind}">${r.kind === 'cuda' ? 'CUDA' : r.event_kind === 'off_cpu' ? 'CPU \u00b7 off-CPU' : 'CPU'}</span>
	<span class="recs-app">${escapeHTML(r.application)}</span><span class="recs-src">${escapeHTML(r.application_source)}</span>${r.state === 'dismissed' ? '<span class="recs-src">dismissed</span>' : ''}${r.status === 'new' || r.status === 'worsened' ? `<span class="recs-status ${r.status}" title="Since the previous generation">${r.status}</span>` : ''}</div>
	<div class="recs-title">${escapeHTML(r.title)}</div>
	<div class="recs-figs"><span>Peak <b>${fmtAmount(r.peak, r.unit)}</b></span><span>Share <b>${fmtPct(r.share * 100)}</b></span>
	<span>Savings <b>${top ? escapeHTML(fmtSavings(r.savings)) : '\u2013'}</b></span>${sparkSVG(r.usage.total, 120, 28)}</div>
</div>`;
}

function sparkSVG(series, w, h) {
	const max = Math.max(...series, 1e-9);
	const pts = series.map((y, i) => `${((i / Math.max(1, series.length - 1)) * w).toFixed(1)},${(h - (y / max) * (h - 2) - 1).toFixed(1)}`).join(' ');
	return `<svg class="recs-spark" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}" aria-hidden="true"><polyline points="${pts}" fill="none" stroke="#c2410c" stroke-width="1.5"/></svg>`;
}

// Usage over time: the application's total and each hot trace, one line
// each, over the window's buckets.
function usageSVG(r) {
	const w = 640, h = 160, pad = 34;
	const lines = [{ name: 'total', series: r.usage.total }].concat(r.usage.traces.slice(0, 6).map((t, i) => ({ name: `trace ${i + 1}`, series: t.series })));
	const max = Math.max(...r.usage.total, 1e-9);
	const n = r.usage.total.length;
	const x = (i) => pad + (i / Math.max(1, n - 1)) * (w - pad - 8);
	const y = (val) => h - 18 - (val / max) * (h - 30);
	const paths = lines.map((l, k) => `<polyline points="${l.series.map((val, i) => `${x(i).toFixed(1)},${y(val).toFixed(1)}`).join(' ')}" fill="none" stroke="${COLORS[k % COLORS.length]}" stroke-width="${k ? 1.2 : 2}"${k ? ' stroke-dasharray="4 2"' : ''}><title>${l.name}</title></polyline>`).join('');
	const start = new Date(r.window.start_ms), end = new Date(r.window.end_ms);
	const t = (d) => d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
	return `<svg class="recs-usage" viewBox="0 0 ${w} ${h}" role="img" aria-label="Usage over time">
	<line x1="${pad}" y1="${h - 18}" x2="${w - 8}" y2="${h - 18}" stroke="#ccc"/>
	<text x="2" y="${y(max) + 4}" font-size="10">${fmtCores(max)}</text><text x="2" y="${h - 18}" font-size="10">0</text>
	<text x="${pad}" y="${h - 4}" font-size="10">${t(start)}</text><text x="${w - 8}" y="${h - 4}" font-size="10" text-anchor="end">${t(end)}</text>
	${paths}</svg>
	<div class="recs-legend">${lines.map((l, k) => `<span><i style="background:${COLORS[k % COLORS.length]}"></i>${l.name}</span>`).join('')} <span class="recs-unit">${r.unit === 'gpus' ? 'GPUs busy' : r.unit === 'threads' ? 'threads waiting' : 'cores'}</span></div>`;
}

function frameHTML(f) {
	const where = f.file ? ` <span class="recs-src-loc">${escapeHTML(f.file)}${f.line ? ':' + f.line : ''}</span>` : '';
	return `<li class="recs-frame${f.role ? ' ' + f.role : ''}"><code>${escapeHTML(f.name)}</code> <span class="recs-ftype">${escapeHTML(f.type)}</span> <span class="recs-bin">${escapeHTML(f.binary)}</span>${where}${f.role ? ` <span class="recs-role">${f.role}</span>` : ''}</li>`;
}

// The LLM mode's analysis (docs/recommendations.md), beside the built-in
// one: ok, or the error / refusal (never the model's raw text).
function llmHTML(r) {
	const l = r.llm;
	if (!l) return '';
	if (l.status !== 'ok') {
		return `<section data-section="llm" class="recs-llm bad"><h3>LLM analysis</h3><p>${l.status === 'refused' ? 'Not asked: ' : 'Failed'} (${escapeHTML(l.step || '')}${l.attempts ? `, ${l.attempts} attempts` : ''}): ${escapeHTML(l.error)}. The built-in analysis below stands.</p></section>`;
	}
	return `<section data-section="llm" class="recs-llm"><h3>LLM analysis: ${escapeHTML(l.title)}</h3>
	<p>${escapeHTML(l.description)}</p>
	<p class="recs-muted">${l.tags.map((t) => `<span class="recs-src">${escapeHTML(t)}</span>`).join(' ')} \u00b7 confidence ${escapeHTML(l.confidence)} \u00b7 ${escapeHTML(l.provider)}: ${escapeHTML(l.models.examine)} / ${escapeHTML(l.models.summarize)} \u00b7 ${l.usage.input_tokens + l.usage.output_tokens} tokens</p>
	<h4>Diagnosis</h4><p>${escapeHTML(l.diagnosis)}</p>
	<ol class="recs-actions">${l.actions.map((a) => `<li><div class="recs-action-head"><b>${escapeHTML(a.title)}</b><span class="recs-save">saves ${escapeHTML(fmtAmount(a.savings, r.unit))}</span></div><p>${escapeHTML(a.detail)}</p>${a.source ? `<div class="recs-why">At <code>${escapeHTML(a.source)}</code></div>` : ''}</li>`).join('')}</ol>
	${l.lower_priority.length ? `<h4>Lower-priority ideas</h4><ul>${l.lower_priority.map((x) => `<li>${escapeHTML(x)}</li>`).join('')}</ul>` : ''}</section>`;
}

function detailHTML(r) {
	const attr = { deployment: 'k8s.deployment.name', container: 'container.name', executable: 'process.executable.name' }[r.application_source] || 'process.executable.name';
	// A script's application is "train.py (python3.11)": filter by the script.
	const script = r.entities.find((e) => e.type === 'script');
	const q = r.application_source === 'script' && script ? `script.name == ${JSON.stringify(script.value)}` : `${attr} == ${JSON.stringify(r.application)}`;
	const window = `${new Date(r.window.start_ms).toLocaleString()} \u2013 ${new Date(r.window.end_ms).toLocaleString()}`;
	const actions = r.actions.length ? `<ol class="recs-actions">${r.actions.map((a) => `<li>
		<div class="recs-action-head"><b>${escapeHTML(a.title)}</b><span class="recs-save">saves ${escapeHTML(fmtSavings(a.savings))}</span></div>
		<ul>${a.steps.map((s) => `<li>${escapeHTML(s)}</li>`).join('')}</ul>
		<div class="recs-why">Matched ${a.hot_traces} hot trace${a.hot_traces === 1 ? '' : 's'} (${fmtPct(a.share * 100)} of the project); the fix typically removes ${Math.round(a.removes * 100)}% of that time. Pattern <code>${escapeHTML(a.pattern)}</code>.</div></li>`).join('')}</ol>`
		: '<p>No pattern of the knowledge base explains these code paths; see the technical details for the hot traces, and open them in the flame graph.</p>';
	const analysis = r.actions.map((a) => `<h4>${escapeHTML(a.title)}</h4><p>${escapeHTML(a.explanation)}</p>` +
		r.evidence.filter((e) => e.pattern === a.pattern).slice(0, 4).map((e) => `<div class="recs-evidence"><div>Hot trace <code>${e.trace}</code>: ${fmtPct(e.share * 100)} of the project, ${fmtAmount(e.cores, r.unit)}</div><ul>${e.frames.map(frameHTML).join('')}</ul></div>`).join('')).join('');
	const ents = r.entities.length ? `<table class="recs-ents"><thead><tr><th>Type</th><th>Name</th><th>${r.unit === 'gpus' ? 'GPUs' : 'Cores'}</th></tr></thead><tbody>${r.entities.map((e) => `<tr><td>${escapeHTML(e.type)}</td><td>${escapeHTML(e.value)}</td><td>${fmtCores(e.cores)}</td></tr>`).join('')}</tbody></table>` : '<p>No entity attributes were sent with these samples.</p>';
	const tech = r.technical;
	const traces = tech.hot_traces.map((t, i) => `<details class="recs-trace"><summary>Trace ${i + 1} <code>${t.id}</code> \u00b7 ${fmtPct(t.share * 100)} \u00b7 leaf <code>${escapeHTML(t.leaf)}</code> \u00b7 ${t.pattern ? `pattern <code>${escapeHTML(t.pattern)}</code>` : 'no pattern'}${t.also_matched.length ? ` (also: ${t.also_matched.map(escapeHTML).join(', ')})` : ''} <button type="button" class="recs-suppress" data-act="suppress" data-trace="${escapeHTML(t.id)}" title="An accepted cost: leave this hot trace out of every later analysis until unsuppressed">Suppress</button></summary><ol>${t.frames.map(frameHTML).join('')}</ol></details>`).join('');
	return `<div class="recs-detail-head"><h2>${escapeHTML(r.title)}</h2>
	<div class="recs-buttons"><button type="button" data-act="flame" data-q="${escapeHTML(q)}">Flamegraph</button>
	<button type="button" data-act="state" data-id="${r.id}" data-state="${r.state === 'dismissed' ? 'active' : 'dismissed'}">${r.state === 'dismissed' ? 'Restore' : 'Dismiss'}</button>
	<button type="button" data-act="close" aria-label="Close">\u00d7</button></div></div>
	<div class="recs-kpis"><div><span>Peak</span><b>${fmtAmount(r.peak, r.unit)}</b></div><div><span>Average</span><b>${fmtAmount(r.cores, r.unit)}</b></div>
	<div><span>Estimated savings</span><b>${escapeHTML(fmtSavings(r.savings))}</b></div><div><span>Confidence</span><b>${escapeHTML(tech.confidence)}</b></div></div>
	<section data-section="issue"><h3>Issue detected</h3><p>${escapeHTML(r.issue)}</p><p class="recs-muted">Application <b>${escapeHTML(r.application)}</b> (${escapeHTML(r.application_source)}) \u00b7 ${escapeHTML(window)}</p></section>
	<section data-section="usage"><h3>Usage over time</h3>${usageSVG(r)}</section>
	${llmHTML(r)}
	<section data-section="actions"><h3>Recommended actions</h3>${actions}</section>
	<section data-section="analysis"><h3>Analysis</h3>${analysis || '<p>\u2013</p>'}</section>
	<section data-section="entities"><h3>Affected entities</h3>${ents}</section>
	<section data-section="technical"><h3>Technical details</h3><p>Analyzer: ${escapeHTML(tech.analyzer)}${r.llm ? ', and the LLM above' : ' (no LLM)'} \u00b7 confidence ${escapeHTML(tech.confidence)}</p>
	${tech.lower_priority.length ? `<h4>Lower-priority ideas</h4><ul>${tech.lower_priority.map((s) => `<li>${escapeHTML(s)}</li>`).join('')}</ul>` : ''}
	<h4>Hot traces analyzed</h4>${traces}</section>`;
}

function hide() {
	if (v && v.ctl) v.ctl.abort();
	if (v) v.key = null; // shown again: fetch again
}

// The Efficiency IQ card: the active recommendations of a kind ('cpu' or
// 'cuda') of the project, their total savings, and the top three.
export async function recsCard(el, project, kind, go) {
	if (!el) return;
	loadStylesheet('view_recs.css');
	el.innerHTML = `<div class="recs-iq-card panel"><h2>Recommendations</h2><p class="recs-muted">Loading\u2026</p></div>`;
	try {
		const d = await apiJSON('GET', `/public/api/v1/project/${encodeURIComponent(project)}/recommendations?kind=${kind}`);
		const recs = d.recommendations.filter((r) => r.state !== 'dismissed');
		const cost = recs.reduce((s, r) => s + (r.savings.annual_cost || 0), 0);
		const amount = recs.reduce((s, r) => s + (kind === 'cuda' ? r.savings.gpu_seconds_per_hour || 0 : r.savings.cores || 0), 0);
		el.innerHTML = `<div class="recs-iq-card panel"><div class="iq-panel-head"><h2>Recommendations</h2><button type="button" class="iq-link" data-recs-all>All recommendations \u2192</button></div>
		<p><b>${recs.length}</b> active \u00b7 estimated savings <b>${kind === 'cuda' ? `${fmtCores(amount)} GPU-s/h` : `${fmtCores(amount)} cores`}</b> \u00b7 <b>${fmtMoney(cost)}</b>/yr</p>
		<ol>${recs.slice(0, 3).map((r) => `<li><a href="#" data-rec="${escapeHTML(r.id)}">${escapeHTML(r.title)}</a> <span class="recs-muted">${escapeHTML(fmtSavings(r.savings))}</span></li>`).join('')}</ol></div>`;
		el.querySelector('[data-recs-all]').addEventListener('click', () => go('recs', { tab: kind }));
		for (const a of el.querySelectorAll('a[data-rec]')) a.addEventListener('click', (ev) => {
			ev.preventDefault();
			go('recs', { tab: kind, rec: a.dataset.rec });
		});
	} catch (e) {
		el.innerHTML = `<div class="recs-iq-card panel"><h2>Recommendations</h2>${apiErrorHTML(e)}</div>`;
	}
}

export default { id: 'recs', title: 'Recommendations', show, hide };
