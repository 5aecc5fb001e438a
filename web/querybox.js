// querybox.js - autocompletion for the CEL query box of the top bar: the
// attribute names the range holds (with how many values each has), and
// after `name == "` the values of that attribute with their share of the
// samples. The Filter button opens the list at the end of the query, so a
// value is applied with two clicks. Names and values come from the labels
// API, cached per project, range and query.
//
//   attachQueryBox(input, button, { labels(body) -> Promise<json>, apply() })
//     labels: POSTs to the labels API (the page supplies project and range)
//     apply:  runs the query in the input (the form's submit)

import { escapeHTML, fmtPct } from './common.js';

const MAX_SHOWN = 50;

// What the text before the cursor asks for: {kind: 'name', prefix, from}
// (an attribute name starts at `from`), {kind: 'value', name, prefix, from,
// quote} (inside a string compared with an attribute), or null.
export function completionContext(text) {
	const value = /([A-Za-z_][\w.]*(?:\["[^"]*"\])?)\s*(?:==|!=)\s*(["'])([^"']*)$/.exec(text);
	if (value) return { kind: 'value', name: value[1], quote: value[2], prefix: value[3], from: text.length - value[3].length };
	// Inside an unfinished string: nothing to suggest.
	let inString = null;
	for (const ch of text) {
		if (inString) {
			if (ch === inString) inString = null;
		} else if (ch === '"' || ch === "'") inString = ch;
	}
	if (inString) return null;
	const name = /(?:^|[\s(!&|,[])([A-Za-z_][\w.]*)?$/.exec(text);
	if (!name) return null;
	const prefix = name[1] || '';
	// Right after a complete comparison or a name: operators come next.
	if (!prefix && /(?:["'\])]|[\w.])\s+$/.test(text) && !/(?:&&|\|\||!|\(|,|\[)\s*$/.test(text)) return null;
	return { kind: 'name', prefix, from: text.length - prefix.length };
}

export function attachQueryBox(input, button, { labels, apply }) {
	const list = document.createElement('ul');
	list.className = 'suggest';
	list.id = 'query-suggest';
	list.setAttribute('role', 'listbox');
	list.hidden = true;
	input.setAttribute('role', 'combobox');
	input.setAttribute('aria-autocomplete', 'list');
	input.setAttribute('aria-controls', list.id);
	input.setAttribute('aria-expanded', 'false');
	input.parentElement.append(list);

	const cache = new Map(); // key -> Promise of the labels answer
	let items = [], active = -1, ctxNow = null, seq = 0;

	function fetchLabels(name) {
		const body = { limit: 200 };
		if (name) body.name = name;
		const key = JSON.stringify([labels.scope(), name || '']);
		if (!cache.has(key)) {
			const p = labels(body).catch((e) => {
				cache.delete(key);
				throw e;
			});
			cache.set(key, p);
			if (cache.size > 64) cache.delete(cache.keys().next().value);
		}
		return cache.get(key);
	}

	function close() {
		seq++; // an answer still on its way must not reopen the list
		list.hidden = true;
		input.setAttribute('aria-expanded', 'false');
		input.removeAttribute('aria-activedescendant');
		items = [];
		active = -1;
	}

	function render(ctx, rows, note) {
		ctxNow = ctx;
		items = rows;
		active = rows.length ? 0 : -1;
		list.replaceChildren();
		if (note) {
			const li = document.createElement('li');
			li.className = 'note';
			li.textContent = note;
			list.append(li);
		}
		rows.forEach((r, k) => {
			const li = document.createElement('li');
			li.id = `query-suggest-${k}`;
			li.setAttribute('role', 'option');
			li.dataset.index = String(k);
			const share = r.percent !== undefined ? `<span class="share"><span class="bar" style="width:${Math.max(1, Math.min(60, r.percent * 0.6))}px"></span>${escapeHTML(fmtPct(r.percent))}</span>` : '';
			li.innerHTML = `<span class="text">${escapeHTML(r.label)}</span>${r.detail ? `<span class="detail">${escapeHTML(r.detail)}</span>` : ''}${share}`;
			li.addEventListener('mousedown', (ev) => {
				ev.preventDefault(); // keep the focus in the input
				choose(k);
			});
			list.append(li);
		});
		list.hidden = !rows.length && !note;
		input.setAttribute('aria-expanded', String(!list.hidden));
		highlight();
	}

	function highlight() {
		for (const li of list.querySelectorAll('[role=option]')) li.setAttribute('aria-selected', String(Number(li.dataset.index) === active));
		if (active >= 0) {
			input.setAttribute('aria-activedescendant', `query-suggest-${active}`);
			const li = list.querySelector(`#query-suggest-${active}`);
			if (li) li.scrollIntoView({ block: 'nearest' });
		} else input.removeAttribute('aria-activedescendant');
	}

	async function update() {
		const pos = input.selectionStart === null ? input.value.length : input.selectionStart;
		const before = input.value.slice(0, pos);
		const ctx = completionContext(before);
		if (!ctx) return close();
		const mine = ++seq;
		let answer;
		try {
			answer = await fetchLabels(ctx.kind === 'value' ? ctx.name : null);
		} catch (e) {
			if (mine === seq) render(ctx, [], `No suggestions: ${e.message || e}`);
			return;
		}
		// Stale: a newer request, the focus gone, or the text changed.
		if (mine !== seq || document.activeElement !== input || input.value.slice(0, pos) !== before) return;
		const p = ctx.prefix.toLowerCase();
		let rows;
		if (ctx.kind === 'name') {
			rows = (answer.names || [])
				.filter((n) => n.name.toLowerCase().startsWith(p) || (p && n.name.toLowerCase().includes('.' + p)))
				.map((n) => ({ label: n.name, detail: `${n.values} value${n.values === 1 ? '' : 's'}`, insert: n.name + ' == "', percent: n.percent }));
		} else {
			rows = (answer.values || [])
				.filter((v) => String(v.value).toLowerCase().includes(p))
				.map((v) => ({ label: v.value, insert: String(v.value).replace(/\\/g, '\\\\').replace(new RegExp(ctx.quote, 'g'), '\\' + ctx.quote) + ctx.quote, percent: v.percent }));
		}
		const total = rows.length;
		rows = rows.slice(0, MAX_SHOWN);
		const note = !total ? (ctx.kind === 'name' ? 'No attribute matches' : `No value of ${ctx.name} matches`) : total > MAX_SHOWN ? `${MAX_SHOWN} of ${total}: type to narrow` : '';
		render(ctx, rows, note);
	}

	function choose(k) {
		const r = items[k];
		if (!r || !ctxNow) return;
		const pos = input.selectionStart === null ? input.value.length : input.selectionStart;
		const after = input.value.slice(pos);
		const rest = ctxNow.kind === 'value' ? after.replace(/^[^"'\s)]*["']?/, '') : after.replace(/^[\w.]*/, '');
		const head = input.value.slice(0, ctxNow.from) + r.insert;
		input.value = head + rest;
		input.setSelectionRange(head.length, head.length);
		close();
		if (ctxNow.kind === 'value') apply();
		else update(); // now the values of that name
	}

	input.addEventListener('input', update);
	input.addEventListener('focus', () => {
		if (!input.value) update();
	});
	input.addEventListener('blur', () => setTimeout(close, 100));
	input.addEventListener('keydown', (ev) => {
		if (list.hidden || !items.length) {
			if (ev.key === 'ArrowDown') {
				ev.preventDefault();
				update();
			}
			return;
		}
		if (ev.key === 'ArrowDown' || ev.key === 'ArrowUp') {
			ev.preventDefault();
			active = (active + (ev.key === 'ArrowDown' ? 1 : items.length - 1)) % items.length;
			highlight();
		} else if ((ev.key === 'Enter' || ev.key === 'Tab') && active >= 0) {
			ev.preventDefault();
			ev.stopPropagation();
			choose(active);
		} else if (ev.key === 'Escape') {
			ev.stopPropagation();
			close();
		}
	});
	button.addEventListener('click', () => {
		// At the end of the query, after && when there is one.
		const v = input.value.trim();
		input.value = v ? `${v} && ` : '';
		input.focus();
		input.setSelectionRange(input.value.length, input.value.length);
		update();
	});
	return { close, invalidate: () => cache.clear() };
}
