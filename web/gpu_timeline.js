// gpu_timeline.js - the GPU timeline of the Efficiency IQ GPU tab: one row
// per (host, GPU device, CUDA stream), the GPU work of the newest GPU-time
// samples (the events API with event_kind cuda) as bars along time, and a
// click on a bar shows its kernel and the CPU stack that launched it.
//
// What a bar is: the store keeps samples, not single kernel runs. One event
// is the GPU time of one stack (CPU frames -> launch API -> kernel, copy,
// memset or sync) on one device and stream in one agent interval, at the
// interval's start. A stream runs its work one piece at a time, so a row
// lays its events out back to back from their interval's start: a bar
// starts at max(its timestamp, the end of the previous bar of its row) and
// lasts its GPU time. Bars keep their true lengths; where an interval held
// more work than fits before the next one, the row runs on past it.
//
// renderTimeline(container, events, { onSelect }) draws into container
// (replacing its content) and answers { rows, bars } for tests; events are
// the events API's (ts in Unix ms, value in nanoseconds, labels, stack
// outermost first).

import { escapeHTML, fmtWaited } from './common.js';
import { baseColor, typeLabel } from './flamegraph.js';

const NONE = '\u2013';

// The row of an event: its host, device and stream, and their label.
function rowOf(labels) {
	const host = labels['host.name'] || '';
	const dev = labels['gpu.device.index'] ?? '';
	const stream = labels['cuda.stream.id'] ?? '';
	const key = JSON.stringify([host, dev, stream]);
	const devText = dev === '' ? 'GPU ?' : `GPU ${dev}`;
	return { key, host, dev, stream, label: `${host || '[no host]'} \u00b7 ${devText} \u00b7 stream ${stream === '' ? '?' : stream}`, gpuName: labels['gpu.name'] || '' };
}

// Sorts rows by host, then device and stream as numbers where they are.
function rowOrder(a, b) {
	const num = (s) => (/^\d+$/.test(s) ? Number(s) : NaN);
	const cmp = (x, y) => {
		const nx = num(x), ny = num(y);
		if (!Number.isNaN(nx) && !Number.isNaN(ny)) return nx - ny;
		return String(x).localeCompare(String(y));
	};
	return cmp(a.host, b.host) || cmp(a.dev, b.dev) || cmp(a.stream, b.stream);
}

// The bars of the events, laid out per row (see the top of the file).
export function layout(events) {
	const rows = new Map();
	for (const e of events) {
		if (!(e.value > 0)) continue;
		const r = rowOf(e.labels || {});
		let row = rows.get(r.key);
		if (!row) rows.set(r.key, (row = { ...r, events: [] }));
		row.events.push(e);
	}
	const list = [...rows.values()].sort(rowOrder);
	const bars = [];
	let t0 = Infinity, t1 = -Infinity;
	list.forEach((row, ri) => {
		// Oldest first; in one interval, the longest first (stable).
		row.events.sort((x, y) => x.ts - y.ts || y.value - x.value);
		let end = -Infinity;
		for (const e of row.events) {
			const start = Math.max(e.ts, end);
			end = start + e.value / 1e6;
			const leaf = (e.stack || [])[e.stack.length - 1] || { name: '?', frame_type: 'cuda_kernel' };
			bars.push({ row: ri, start, end, event: e, leaf });
			t0 = Math.min(t0, start);
			t1 = Math.max(t1, end);
		}
	});
	return { rows: list, bars, t0, t1 };
}

function fmtClock(ms) {
	return new Date(ms).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' });
}

// The details of one bar: the GPU work and the stack that launched it.
export function detailsHTML(bar, row) {
	const e = bar.event;
	const stack = e.stack || [];
	const frames = stack
		.map((f, i) => `<li class="tl-frame${i === stack.length - 1 ? ' tl-leaf' : ''}"><span class="swatch" style="background:${baseColor(f.frame_type)}" aria-hidden="true"></span>` +
			`<span class="tl-frame-name">${escapeHTML(f.name)}</span> <span class="muted">${escapeHTML(typeLabel(f.frame_type))}${f.binary ? ` \u00b7 ${escapeHTML(f.binary)}` : ''}</span></li>`)
		.join('');
	const lab = e.labels || {};
	const dd = (k, v) => `<dt>${escapeHTML(k)}</dt><dd>${escapeHTML(v || NONE)}</dd>`;
	return `<div class="tl-detail-head"><strong class="tl-detail-name">${escapeHTML(bar.leaf.name)}</strong> <span class="muted">${escapeHTML(typeLabel(bar.leaf.frame_type))}</span></div>
		<dl class="tl-detail-facts">${dd('GPU time', fmtWaited(e.value))}${dd('Interval', fmtClock(e.ts))}${dd('Host', row.host)}${dd('Device', `${row.dev === '' ? '?' : `GPU ${row.dev}`}${row.gpuName ? ` (${row.gpuName})` : ''}`)}${dd('Stream', row.stream)}${dd('Process', [lab['process.executable.name'], lab['process.pid'] ? `PID ${lab['process.pid']}` : ''].filter(Boolean).join(' \u00b7 '))}</dl>
		<p class="tl-stack-title">Launched from (outermost caller first):</p>
		<ol class="tl-stack">${frames}</ol>`;
}

// Ticks for [t0, t1]: about five, on whole seconds, minutes or hours.
function ticks(t0, t1) {
	const span = Math.max(t1 - t0, 1);
	const steps = [1e3, 2e3, 5e3, 10e3, 15e3, 30e3, 60e3, 120e3, 300e3, 600e3, 900e3, 1800e3, 3600e3];
	const step = steps.find((s) => span / s <= 6) || 3600e3;
	const out = [];
	for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) out.push(t);
	return out;
}

export function renderTimeline(container, events, { onSelect } = {}) {
	const { rows, bars, t0, t1 } = layout(events);
	container.replaceChildren();
	if (!bars.length) {
		container.innerHTML = '<p class="iq-none">No GPU work in this range.</p>';
		return { rows: [], bars: [] };
	}
	const pad = Math.max((t1 - t0) * 0.03, 500);
	const a = t0 - pad, b = t1 + pad;
	const x = (t) => (100 * (t - a)) / (b - a);
	const grid = document.createElement('div');
	grid.className = 'tl-grid';
	const axis = document.createElement('div');
	axis.className = 'tl-row tl-axis';
	axis.innerHTML = `<span class="tl-label"></span><span class="tl-track">${ticks(a, b)
		.map((t) => `<span class="tl-tick" style="left:${x(t).toFixed(3)}%">${escapeHTML(fmtClock(t))}</span>`)
		.join('')}</span>`;
	grid.append(axis);
	const tracks = rows.map((row) => {
		const r = document.createElement('div');
		r.className = 'tl-row';
		r.dataset.row = row.label;
		const label = document.createElement('span');
		label.className = 'tl-label';
		label.textContent = row.label;
		label.title = row.gpuName ? `${row.label} (${row.gpuName})` : row.label;
		const track = document.createElement('span');
		track.className = 'tl-track';
		r.append(label, track);
		grid.append(r);
		return track;
	});
	const details = document.createElement('div');
	details.className = 'tl-details';
	details.hidden = true;
	let selected = null;
	for (const bar of bars) {
		const el = document.createElement('button');
		el.type = 'button';
		el.className = 'tl-bar';
		el.style.left = `${x(bar.start).toFixed(4)}%`;
		el.style.width = `max(3px, ${(x(bar.end) - x(bar.start)).toFixed(4)}%)`;
		el.style.background = baseColor(bar.leaf.frame_type);
		el.dataset.name = bar.leaf.name;
		el.title = `${bar.leaf.name} \u00b7 ${fmtWaited(bar.event.value)} \u00b7 ${fmtClock(bar.event.ts)}`;
		el.setAttribute('aria-label', `${bar.leaf.name}, ${fmtWaited(bar.event.value)} of GPU time on ${rows[bar.row].label}: show the stack that launched it`);
		el.addEventListener('click', () => {
			if (selected) selected.classList.remove('selected');
			selected = el;
			el.classList.add('selected');
			details.innerHTML = detailsHTML(bar, rows[bar.row]);
			details.hidden = false;
			if (onSelect) onSelect(bar);
		});
		tracks[bar.row].append(el);
	}
	container.append(grid, details);
	return { rows: rows.map((r) => r.label), bars: bars.map((b) => ({ row: rows[b.row].label, name: b.leaf.name, start: b.start, end: b.end })) };
}
