// api_docs.js - the API explorer at /public/api/v1/docs: every route of
// the OpenAPI document (/public/api/v1/openapi.json) with its parameters,
// request schema and answers, and a "Send" that makes the real request:
// through common.js's request() (the session cookie, the CSRF header,
// one refresh), or with a token typed into the page as a bearer token.
// No framework, no CDN: the page is served by ember like the rest of the UI.

import { escapeHTML, request } from '/common.js';

const $ = id => document.getElementById(id);
const METHODS = ['get', 'post', 'put', 'delete'];
const MAX_ANSWER = 200000; // characters of an answer shown

let doc = null;

// Follows a local "$ref" ("#/components/schemas/X"); other values as they are.
function deref(s, depth = 0) {
	if (!s || typeof s !== 'object' || depth > 20) return s;
	if (s.$ref && s.$ref.startsWith('#/')) {
		let v = doc;
		for (const k of s.$ref.slice(2).split('/')) v = v && v[k];
		return deref(v, depth + 1);
	}
	return s;
}

// A schema with its references filled in, for reading (cycles cut).
function expand(s, depth = 0) {
	s = deref(s);
	if (!s || typeof s !== 'object' || depth > 8) return s;
	if (Array.isArray(s)) return s.map(x => expand(x, depth + 1));
	const out = {};
	for (const [k, v] of Object.entries(s)) out[k] = expand(v, depth + 1);
	return out;
}

// An example value of a schema: its example or default, else one built
// from its type (objects with their required properties, or all when few).
export function exampleOf(s, depth = 0) {
	s = deref(s);
	if (!s || depth > 6) return null;
	if (s.example !== undefined) return s.example;
	if (s.default !== undefined) return s.default;
	if (s.enum) return s.enum[0];
	switch (s.type) {
	case 'object': {
		const o = {};
		const props = s.properties || {};
		const keys = s.required && s.required.length ? s.required : Object.keys(props);
		for (const k of keys) if (props[k]) o[k] = exampleOf(props[k], depth + 1);
		return o;
	}
	case 'array': return [];
	case 'integer': case 'number': return 0;
	case 'boolean': return false;
	case 'string': return s.format === 'date-time' ? new Date().toISOString() : '';
	default: return null;
	}
}

// The flamegraph and the other queries need a time range to answer
// anything: their examples ask for the last hour.
function withRange(body) {
	const f = body && body.filter;
	if (f && typeof f === 'object' && 'start_ts' in f && 'end_ts' in f) {
		f.end_ts = Date.now();
		f.start_ts = f.end_ts - 3600 * 1000;
	}
	return body;
}

function opHTML(path, method, op, i) {
	const params = (op.parameters || []).map(deref);
	const body = op.requestBody && deref(op.requestBody);
	const schema = body && body.content && body.content['application/json'] &&
		body.content['application/json'].schema;
	const example = schema ? JSON.stringify(withRange(exampleOf(schema)), null, 2) : '';
	const rows = params.map((p, j) => `
		<label for="p-${i}-${j}">${escapeHTML(p.name)} <small>(${escapeHTML(p.in)}${p.required ? ', required' : ''})</small></label>
		<input id="p-${i}-${j}" data-name="${escapeHTML(p.name)}" data-in="${escapeHTML(p.in)}"
			value="${p.name === 'project_id' ? '00000000-0000-0000-0000-000000000000' : ''}"
			placeholder="${escapeHTML((p.schema && p.schema.type) || '')}">`).join('');
	const answers = Object.entries(op.responses || {}).map(([code, r]) =>
		`<li><b>${escapeHTML(code)}</b> ${escapeHTML(deref(r).description || '')}</li>`).join('');
	return `<details class="api-op" data-op="${i}" data-search="${escapeHTML((method + ' ' + path + ' ' + (op.summary || '')).toLowerCase())}">
	<summary><span class="api-method ${method}">${method.toUpperCase()}</span>
		<span class="api-path">${escapeHTML(path)}</span>
		<span class="api-summary">${escapeHTML(op.summary || '')}</span></summary>
	<div class="api-body">
		${rows ? `<div class="api-params">${rows}</div>` : ''}
		${schema ? `<p>Request body (JSON):</p><textarea spellcheck="false" aria-label="request body">${escapeHTML(example)}</textarea>
		<details><summary>Request schema</summary><pre class="api-schema">${escapeHTML(JSON.stringify(expand(schema), null, 2))}</pre></details>` : ''}
		<ul class="api-answers">${answers}</ul>
		<button type="button" class="api-send">Send</button>
		<p class="api-status" hidden></p>
		<pre class="api-answer" hidden></pre>
	</div>
</details>`;
}

async function send(el, path, method) {
	const status = el.querySelector('.api-status');
	const out = el.querySelector('.api-answer');
	out.hidden = true;
	status.hidden = false;
	status.className = 'api-status';
	status.textContent = 'Sending\u2026';
	let url = path;
	const query = new URLSearchParams();
	for (const inp of el.querySelectorAll('.api-params input')) {
		const v = inp.value.trim();
		if (inp.dataset.in === 'path') url = url.replace(`{${inp.dataset.name}}`, encodeURIComponent(v));
		else if (inp.dataset.in === 'query' && v) query.set(inp.dataset.name, v);
	}
	if ([...query].length) url += '?' + query;
	let body;
	const ta = el.querySelector('textarea');
	if (ta && ta.value.trim()) {
		try {
			body = JSON.parse(ta.value);
		} catch (e) {
			status.hidden = false;
			status.className = 'api-status err';
			status.textContent = `The body is not JSON: ${e.message}`;
			return;
		}
	}
	const m = method.toUpperCase();
	const token = $('api-token').value.trim();
	const t0 = performance.now();
	let res;
	try {
		if (token) {
			const headers = { Authorization: `Bearer ${token}` };
			if (body !== undefined) headers['Content-Type'] = 'application/json';
			res = await fetch(url, { method: m, headers, credentials: 'omit',
				body: body === undefined ? undefined : JSON.stringify(body) });
		} else {
			res = await request(url, { method: m, body });
		}
	} catch (e) {
		status.hidden = false;
		status.className = 'api-status err';
		status.textContent = `cannot reach ember-server: ${e.message || e}`;
		return;
	}
	const text = await res.text();
	const ms = Math.round(performance.now() - t0);
	status.hidden = false;
	status.className = `api-status ${res.ok ? 'ok' : 'err'}`;
	status.textContent = `${res.status} ${res.statusText} · ${ms} ms · ${text.length} bytes`;
	let shown = text;
	try {
		shown = JSON.stringify(JSON.parse(text), null, 2);
	} catch { /* not JSON: as it came */ }
	if (shown.length > MAX_ANSWER) shown = shown.slice(0, MAX_ANSWER) + '\n… (cut here)';
	out.hidden = false;
	out.textContent = shown;
}

async function main() {
	try {
		const res = await fetch('/public/api/v1/openapi.json', { credentials: 'same-origin' });
		doc = await res.json();
	} catch (e) {
		$('api-error').hidden = false;
		$('api-error').textContent = `The API description could not be read: ${e.message || e}`;
		document.body.dataset.state = 'error';
		return;
	}
	$('api-description').textContent = (doc.info && doc.info.description) || '';
	const ops = [];
	for (const [path, item] of Object.entries(doc.paths || {}))
		for (const method of METHODS)
			if (item[method]) ops.push({ path, method, op: item[method] });
	const byTag = new Map();
	ops.forEach((o, i) => {
		const tag = (o.op.tags && o.op.tags[0]) || 'other';
		if (!byTag.has(tag)) byTag.set(tag, []);
		byTag.get(tag).push(opHTML(o.path, o.method, o.op, i));
	});
	$('api-ops').innerHTML = [...byTag].map(([tag, html]) =>
		`<section class="api-group"><h2 class="api-tag">${escapeHTML(tag)}</h2>${html.join('')}</section>`).join('');
	for (const el of document.querySelectorAll('.api-op')) {
		const o = ops[Number(el.dataset.op)];
		el.querySelector('.api-send').addEventListener('click', () => send(el, o.path, o.method));
	}
	$('api-filter').addEventListener('input', e => {
		const q = e.target.value.trim().toLowerCase();
		for (const el of document.querySelectorAll('.api-op')) el.hidden = q && !el.dataset.search.includes(q);
	});
	document.body.dataset.state = 'ready';
}

main();
