// gpu_timeline.js - the GPU timeline of the Efficiency IQ GPU tab: one row
// per (host, GPU device, CUDA stream), each kernel, copy, memset and sync
// the profiled programs ran as a bar from its start to its end, and a click
// on a bar shows what ran and the CPU stack that launched it.
//
// The bars are the spans of POST .../gpu/timeline (server/query/timeline.h):
// single GPU activities with their own start and end (Unix nanoseconds),
// device and stream, as the CUDA profiler recorded them (its first 256
// activities a second per process), and an index into the answer's stacks
// (outermost frame first) and label sets (the process's attributes).
//
// renderTimeline(container, answer, { onSelect }) draws into container
// (replacing its content) and answers { rows, bars } for tests.

import { escapeHTML, fmtWaited } from './common.js';
import { baseColor, typeLabel } from './flamegraph.js';

const NONE = '\u2013';
const LEAF_TYPES = { kernel: 'cuda_kernel', graph: 'cuda_kernel', memcpy: 'cuda_memcpy', memset: 'cuda_memset', sync: 'cuda_sync' };

// The row of a span: its host, device and stream, and their label.
function rowOf(span, labels) {
	const host = labels['host.name'] || '';
	const dev = String(span.device);
	const stream = String(span.stream);
	const key = JSON.stringify([host, dev, stream]);
	return { key, host, dev, stream, label: `${host || '[no host]'} \u00b7 GPU ${dev} \u00b7 stream ${stream}`, gpuName: labels['gpu.name'] || '' };
}

// Rows by host, then device and stream as numbers.
function rowOrder(a, b) {
	return a.host.localeCompare(b.host) || Number(a.dev) - Number(b.dev) || Number(a.stream) - Number(b.stream);
}

// The bars of the answer's spans, by row.
export function layout(answer) {
	const sets = answer.label_sets || [];
	const stacks = answer.stacks || [];
	const rows = new Map();
	const pending = [];
	for (const s of answer.spans || []) {
		if (!(s.end_ns >= s.start_ns)) continue;
		const labels = sets[s.labels] || {};
		const r = rowOf(s, labels);
		if (!rows.has(r.key)) rows.set(r.key, r);
		pending.push({ key: r.key, span: s, labels, stack: stacks[s.stack] || [] });
	}
	const list = [...rows.values()].sort(rowOrder);
	const index = new Map(list.map((r, i) => [r.key, i]));
	let t0 = Infinity, t1 = -Infinity;
	const bars = pending.map((p) => {
		// milliseconds for the axis (a double holds them to a fraction of a microsecond)
		const start = p.span.start_ns / 1e6, end = p.span.end_ns / 1e6;
		t0 = Math.min(t0, start);
		t1 = Math.max(t1, end);
		const leafType = LEAF_TYPES[p.span.kind] || 'cuda_kernel';
		return { row: index.get(p.key), start, end, span: p.span, labels: p.labels, stack: p.stack, leaf: { name: p.span.name || '?', frame_type: leafType } };
	});
	return { rows: list, bars, t0, t1 };
}

function fmtClock(ms, precise) {
	const d = new Date(ms);
	const hms = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' });
	return precise ? `${hms}.${String(d.getMilliseconds()).padStart(3, '0')}` : hms;
}

// The details of one bar: the GPU work and the stack that launched it.
export function detailsHTML(bar, row) {
	const s = bar.span;
	const stack = bar.stack;
	const frames = stack
		.map((f, i) => `<li class="tl-frame${i === stack.length - 1 ? ' tl-leaf' : ''}"><span class="swatch" style="background:${baseColor(f.frame_type)}" aria-hidden="true"></span>` +
			`<span class="tl-frame-name">${escapeHTML(f.name)}</span> <span class="muted">${escapeHTML(typeLabel(f.frame_type))}${f.binary ? ` \u00b7 ${escapeHTML(f.binary)}` : ''}</span></li>`)
		.join('');
	const lab = bar.labels;
	const dd = (k, v) => `<dt>${escapeHTML(k)}</dt><dd>${escapeHTML(v || NONE)}</dd>`;
	return `<div class="tl-detail-head"><strong class="tl-detail-name">${escapeHTML(bar.leaf.name)}</strong> <span class="muted">${escapeHTML(typeLabel(bar.leaf.frame_type))}</span></div>
		<dl class="tl-detail-facts">${dd('Duration', fmtWaited(s.end_ns - s.start_ns))}${dd('Start', fmtClock(bar.start, true))}${dd('Host', row.host)}${dd('Device', `GPU ${row.dev}${row.gpuName ? ` (${row.gpuName})` : ''}`)}${dd('Stream', row.stream)}${dd('Process', [lab['process.executable.name'], lab['process.pid'] ? `PID ${lab['process.pid']}` : ''].filter(Boolean).join(' \u00b7 '))}</dl>
		<p class="tl-stack-title">Launched from (outermost caller first):</p>
		<ol class="tl-stack">${frames || `<li class="muted">${NONE}</li>`}</ol>`;
}

// Ticks for [t0, t1]: about five, on whole milliseconds, seconds or minutes.
function ticks(t0, t1) {
	const span = Math.max(t1 - t0, 1e-3);
	const steps = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 10e3, 15e3, 30e3, 60e3, 120e3, 300e3, 600e3, 900e3, 1800e3, 3600e3];
	const step = steps.find((s) => span / s <= 6) || 3600e3;
	const out = [];
	for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) out.push({ t, precise: step < 1e3 });
	return out;
}

export function renderTimeline(container, answer, { onSelect } = {}) {
	const { rows, bars, t0, t1 } = layout(answer);
	container.replaceChildren();
	if (!bars.length) {
		container.innerHTML = '<p class="iq-none">No GPU spans in this range. The CUDA profiler sends its first 256 kernels, copies and syncs a second per process; the server keeps them for the last minutes (<code>--gpu-span-retention</code>).</p>';
		return { rows: [], bars: [] };
	}
	const pad = Math.max((t1 - t0) * 0.03, 0.01);
	const a = t0 - pad, b = t1 + pad;
	const x = (t) => (100 * (t - a)) / (b - a);
	const grid = document.createElement('div');
	grid.className = 'tl-grid';
	const axis = document.createElement('div');
	axis.className = 'tl-row tl-axis';
	axis.innerHTML = `<span class="tl-label"></span><span class="tl-track">${ticks(a, b)
		.map((k) => `<span class="tl-tick" style="left:${x(k.t).toFixed(3)}%">${escapeHTML(fmtClock(k.t, k.precise))}</span>`)
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
		const dur = fmtWaited(bar.span.end_ns - bar.span.start_ns);
		el.title = `${bar.leaf.name} \u00b7 ${dur} \u00b7 ${fmtClock(bar.start, true)}`;
		el.setAttribute('aria-label', `${bar.leaf.name}, ${dur} on ${rows[bar.row].label}: show the stack that launched it`);
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
	return {
		rows: rows.map((r) => r.label),
		bars: bars.map((b) => ({ row: rows[b.row].label, name: b.leaf.name, kind: b.span.kind, start_ns: b.span.start_ns, end_ns: b.span.end_ns })),
		truncated: !!answer.truncated,
	};
}
