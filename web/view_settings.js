// view_settings.js - the Settings page (?view=settings): the
// recommendations' analysis (window, minimum share, step) and the cost
// (price of a core-hour and of a GPU-hour), GET/PUT
// /public/api/v1/settings/recommendations (admin:settings:read/update;
// a user without them sees the server's refusal). A value saved is kept
// in the server's recs.db over its flag; "Reset" sends null for it (back
// to the flag's value). The project's recent lifecycle history (who
// dismissed, regenerated, suppressed or changed what) is listed below,
// and the profiler inventory (GET /public/api/v1/agents: every agent
// that sent profiles, reporting or silent, with a CSV download).

import { apiJSON, apiErrorHTML, escapeHTML, loadStylesheet, messageHTML } from './common.js';
import { downloadFile } from './download.js';

// Each field: the API key, its label, and how the form shows it (the API
// keeps milliseconds and fractions).
const FIELDS = [
	{ key: 'window_ms', label: 'Window size', unit: 'hours', help: 'How much recent profiling data the hot traces are found in (at most 24 h).', toForm: (v) => v / 3600000, toApi: (v) => Math.round(v * 3600000), step: '0.25', min: '0.0167', max: '24' },
	{ key: 'min_share', label: 'Minimum share to analyze a trace', unit: '%', help: "The share of the project's CPU (or GPU) time a code path must use to be analyzed.", toForm: (v) => +(v * 100).toFixed(6), toApi: (v) => v / 100, step: '0.01', min: '0', max: '100' },
	{ key: 'step_ms', label: 'Step interval', unit: 'seconds', help: 'How often every project is analyzed again in the background.', toForm: (v) => v / 1000, toApi: (v) => Math.round(v * 1000), step: '1', min: '1', max: '86400' },
	{ key: 'cost_per_core_hour', label: 'Price of a CPU core-hour', unit: 'USD', help: 'Turns the cores a recommendation saves into an annual cost.', toForm: (v) => v, toApi: (v) => v, step: '0.001', min: '0', max: '1000000' },
	{ key: 'cost_per_gpu_hour', label: 'Price of a GPU-hour', unit: 'USD', help: 'Turns the GPU time a recommendation saves into an annual cost.', toForm: (v) => v, toApi: (v) => v, step: '0.01', min: '0', max: '1000000' },
];
const PATH = '/public/api/v1/settings/recommendations';
const LLM_PATH = '/public/api/v1/settings/llm';

// The AI configuration (GET/PUT /public/api/v1/settings/llm): the models
// and token limits change here; the provider, its URL and the key are the
// server's flags only (the key is never sent to or from the browser).
function llmHTML(l) {
	if (!l.provider) return `<h2>AI configuration</h2><p class="settings-help">No LLM: the built-in analyzer writes every recommendation and the AI assistant is off. Start ember-server with <code>--llm-provider</code>, <code>--llm-model-examine</code> and the key in <code>--llm-api-key-file</code> or its environment variable (docs/assistant.md).</p>`;
	const over = (k) => l.overridden.includes(k);
	const text = (k, label, help) => `<div class="settings-field" data-field="${k}"><label for="set-${k}">${escapeHTML(label)}</label>
	<div class="settings-input"><input id="set-${k}" name="${k}" type="text" value="${escapeHTML(l[k])}" required>${over(k) ? ` <button type="button" class="settings-reset" data-llm-reset="${k}" title="Back to the server's flag value">Reset</button>` : ''}</div>
	<p class="settings-help">${escapeHTML(help)} ${over(k) ? `<b>Saved here</b> (flag: ${escapeHTML(l.defaults[k])})` : 'From the server\u2019s flag.'}</p></div>`;
	const num = (k, label, help) => `<div class="settings-field" data-field="${k}"><label for="set-${k}">${escapeHTML(label)}</label>
	<div class="settings-input"><input id="set-${k}" name="${k}" type="number" min="0" step="1000" value="${l[k] || ''}" placeholder="no limit"> <span>tokens / hour</span>${over(k) ? ` <button type="button" class="settings-reset" data-llm-reset="${k}" title="Back to the server's flag value">Reset</button>` : ''}</div>
	<p class="settings-help">${escapeHTML(help)}</p></div>`;
	return `<h2>AI configuration</h2>
	<p class="settings-help">Provider <b>${escapeHTML(l.provider)}</b> at <code>${escapeHTML(l.base_url)}</code>; key from the ${escapeHTML(l.key_source)} (set only on the server, never here).</p>
	<div class="settings-field"><label><input type="checkbox" name="recommendations"${l.recommendations ? ' checked' : ''}> LLM analysis of recommendations</label><p class="settings-help">The model examines each new or changed recommendation beside the built-in analyzer.</p></div>
	${text('model_examine', 'Model: trace examination and assistant', 'The in-depth analysis and the AI assistant.')}
	${text('model_summarize', 'Model: summary and classification', 'A smaller, cheaper model is enough for the short title, description and tags.')}
	${num('max_input_tokens_per_hour', 'Input token limit', 'Checked before each request; empty: no limit.')}
	${num('max_output_tokens_per_hour', 'Output token limit', 'Checked before each request; empty: no limit.')}
	<div class="settings-actions"><button type="submit" class="primary">Save AI configuration</button><span class="settings-llm-status" role="status"></span></div>`;
}

async function loadLLM(mine) {
	const el = root.querySelector('.settings-llm');
	if (!el) return;
	try {
		const l = await apiJSON('GET', LLM_PATH);
		if (mine !== seq) return;
		el.innerHTML = llmHTML(l);
		el.onsubmit = (ev) => {
			ev.preventDefault();
			const f = el.elements;
			const doc = {};
			for (const k of ['model_examine', 'model_summarize']) if (f[k].value !== l[k]) doc[k] = f[k].value;
			for (const k of ['max_input_tokens_per_hour', 'max_output_tokens_per_hour']) {
				const v = f[k].value === '' ? 0 : Number(f[k].value);
				if (v !== l[k]) doc[k] = v;
			}
			if (f.recommendations.checked !== l.recommendations) doc.recommendations = f.recommendations.checked;
			saveLLM(doc);
		};
		el.onclick = (ev) => {
			const b = ev.target.closest('[data-llm-reset]');
			if (b) saveLLM({ [b.dataset.llmReset]: null });
		};
	} catch (e) {
		if (mine === seq) el.innerHTML = `<h2>AI configuration</h2>${apiErrorHTML(e)}`;
	}
}

async function saveLLM(doc) {
	const st = () => root.querySelector('.settings-llm-status');
	if (!Object.keys(doc).length) {
		st().textContent = 'Nothing changed.';
		return;
	}
	try {
		await apiJSON('PUT', LLM_PATH, doc);
		await loadLLM(seq);
		st().textContent = 'Saved.';
	} catch (e) {
		st().textContent = e.message || 'Could not save';
		st().classList.add('bad');
	}
}

let root = null;
let ctx = null;
let seq = 0;

function fieldHTML(f, s) {
	const over = s.overridden.includes(f.key);
	return `<div class="settings-field" data-field="${f.key}">
	<label for="set-${f.key}">${escapeHTML(f.label)}</label>
	<div class="settings-input"><input id="set-${f.key}" name="${f.key}" type="number" step="${f.step}" min="${f.min}" max="${f.max}" value="${f.toForm(s[f.key])}" required> <span>${escapeHTML(f.unit)}</span>
	${over ? `<button type="button" class="settings-reset" data-reset="${f.key}" title="Back to the server's flag value">Reset</button>` : ''}</div>
	<p class="settings-help">${escapeHTML(f.help)} ${over ? `<b>Saved here</b> (flag: ${escapeHTML(String(f.toForm(s.defaults[f.key])))} ${escapeHTML(f.unit)})` : 'From the server\u2019s flag.'}</p>
</div>`;
}

const AGENTS_PATH = '/public/api/v1/agents';

// How long ago t (Unix ms) was, in the largest whole unit.
function ago(t) {
	const s = Math.max(0, Math.round((Date.now() - t) / 1000));
	if (s < 90) return `${s} s ago`;
	if (s < 5400) return `${Math.round(s / 60)} min ago`;
	if (s < 129600) return `${Math.round(s / 3600)} h ago`;
	return `${Math.round(s / 86400)} d ago`;
}

function inventoryHTML(d, names) {
	const head = `<p class="settings-help"><b class="inventory-total">${d.total}</b> agent${d.total === 1 ? '' : 's'}, <b class="inventory-reporting">${d.reporting}</b> reporting (seen in the last ${Math.round(d.reporting_window_ms / 60000)} minutes). <button type="button" class="inventory-csv">Download CSV</button> <span class="inventory-status" role="status"></span></p>`;
	if (!d.agents.length) return `${head}<p class="settings-help">No agent has sent profiles yet.</p>`;
	const rows = d.agents.map((a) => `<tr data-instance="${escapeHTML(a.instance)}" class="${a.reporting ? 'reporting' : 'silent'}">
	<td><span class="inventory-dot" title="${a.reporting ? 'reporting' : 'silent'}"></span>${a.reporting ? 'reporting' : 'silent'}</td>
	<td>${escapeHTML(a.host || '\u2013')}</td><td>${escapeHTML(a.version || '\u2013')}</td>
	<td title="${escapeHTML(a.project_id)}">${escapeHTML(names.get(a.project_id) || a.project_id)}</td><td>${escapeHTML(a.protocol)}</td><td>${escapeHTML(a.address || '\u2013')}</td>
	<td title="${escapeHTML(new Date(a.last_seen_ms).toLocaleString())}">${escapeHTML(ago(a.last_seen_ms))}</td>
	<td class="num">${a.samples.toLocaleString()}</td></tr>`).join('');
	return `${head}<table class="settings-history inventory"><thead><tr><th>Status</th><th>Host</th><th>Version</th><th>Project</th><th>Protocol</th><th>Address</th><th>Last seen</th><th class="num">Samples</th></tr></thead><tbody>${rows}</tbody></table>`;
}

async function loadInventory(mine) {
	const el = root.querySelector('.settings-inventory-body');
	try {
		const [d, p] = await Promise.all([apiJSON('GET', AGENTS_PATH),
			apiJSON('GET', '/public/api/v1/projects').catch(() => ({ projects: [] }))]);
		if (mine !== seq || !el) return;
		el.innerHTML = inventoryHTML(d, new Map((p.projects || []).map((x) => [x.id, x.name])));
		el.querySelector('.inventory-csv').addEventListener('click', async () => {
			const st = el.querySelector('.inventory-status');
			try {
				st.textContent = `Saved ${await downloadFile('GET', `${AGENTS_PATH}?format=csv`, undefined, 'ember-agents.csv')}.`;
			} catch (e) {
				st.textContent = e.message || 'Could not download';
			}
		});
	} catch (e) {
		if (mine === seq && el) el.innerHTML = apiErrorHTML(e);
	}
}

function historyHTML(hist) {
	if (!hist.length) return '<p class="settings-help">No changes yet.</p>';
	const what = { state: 'state', regenerate: 'regenerated', refresh: 'refreshed traces', suppress: 'suppressed hot trace', unsuppress: 'unsuppressed hot trace', settings: 'setting' };
	return `<table class="settings-history"><thead><tr><th>When</th><th>Who</th><th>What</th><th>Target</th><th>Change</th></tr></thead><tbody>${hist.map((h) => `<tr data-action="${escapeHTML(h.action)}"><td>${escapeHTML(new Date(h.at).toLocaleString())}</td><td>${escapeHTML(h.actor)}</td><td>${escapeHTML(what[h.action] || h.action)}</td><td><code>${escapeHTML(h.id || '\u2013')}</code></td><td>${h.from || h.to ? `${escapeHTML(h.from || '\u2013')} \u2192 ${escapeHTML(h.to)}` : ''}</td></tr>`).join('')}</tbody></table>`;
}

async function load() {
	const mine = ++seq;
	ctx.setState('loading');
	const body = root.querySelector('.settings-body');
	try {
		const s = await apiJSON('GET', PATH);
		if (mine !== seq) return;
		body.innerHTML = `<form class="settings-form panel" novalidate>
	<h2>Recommendations</h2>
	${FIELDS.slice(0, 3).map((f) => fieldHTML(f, s)).join('')}
	<h2>Cost</h2>
	${FIELDS.slice(3).map((f) => fieldHTML(f, s)).join('')}
	<div class="settings-actions"><button type="submit" class="primary">Save</button><span class="settings-status" role="status"></span></div>
</form>
<form class="settings-llm settings-form panel" novalidate><h2>AI configuration</h2>${messageHTML('info', 'Loading\u2026')}</form>
<div class="settings-hist panel"><h2>Recommendations history</h2><div class="settings-hist-body">Loading\u2026</div></div>
<div class="settings-hist settings-inventory panel"><h2>Profiler inventory</h2><div class="settings-inventory-body">Loading\u2026</div></div>`;
		const form = body.querySelector('form.settings-form:not(.settings-llm)');
		form.addEventListener('submit', (ev) => {
			ev.preventDefault();
			const doc = {};
			for (const f of FIELDS) {
				const raw = form.elements[f.key].value;
				const n = Number(raw);
				if (raw === '' || !Number.isFinite(n)) {
					status(`${f.label}: enter a number`, true);
					return;
				}
				const v = f.toApi(n);
				if (v !== s[f.key]) doc[f.key] = v;
			}
			save(doc);
		});
		form.addEventListener('click', (ev) => {
			const b = ev.target.closest('[data-reset]');
			if (b) save({ [b.dataset.reset]: null });
		});
		ctx.setState('ready');
		loadLLM(mine);
		loadHistory(mine);
		loadInventory(mine);
	} catch (e) {
		if (mine !== seq) return;
		body.innerHTML = apiErrorHTML(e);
		ctx.setState('error');
	}
}

async function loadHistory(mine) {
	const el = root.querySelector('.settings-hist-body');
	try {
		const d = await apiJSON('GET', `/public/api/v1/project/${encodeURIComponent(ctx.project)}/recommendations/history?limit=50`);
		if (mine === seq && el) el.innerHTML = historyHTML(d.history);
	} catch (e) {
		if (mine === seq && el) el.innerHTML = apiErrorHTML(e);
	}
}

function status(text, bad) {
	const el = root.querySelector('.settings-status');
	if (!el) return;
	el.textContent = text;
	el.classList.toggle('bad', !!bad);
}

async function save(doc) {
	if (!Object.keys(doc).length) {
		status('Nothing changed.');
		return;
	}
	try {
		await apiJSON('PUT', PATH, doc);
		await load();
		status('Saved.');
	} catch (e) {
		status(e.message || 'Could not save', true);
	}
}

function show(el, c) {
	loadStylesheet('view_settings.css');
	root = el;
	ctx = c;
	if (!root.querySelector('.settings')) {
		root.innerHTML = `<div class="view-body settings"><h1>Settings</h1>
<p class="settings-note">How recommendations are found, and what their savings cost. Saved values override the server's flags until reset; they apply at once (every project is analyzed again). Below: every agent that sends profiles.</p>
<div class="settings-body">${messageHTML('info', 'Loading\u2026')}</div></div>`;
	}
	load();
}

function hide() {
	seq++;
}

export default { id: 'settings', title: 'Settings', show, hide };
