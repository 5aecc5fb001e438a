// chart.js - a time-series chart in SVG for ember's views: lines or stacked
// areas over time buckets, time and value axes, a legend, a hover readout
// of every series at the bucket under the pointer, and drag-to-zoom (the
// selected time range goes to onZoom; the view usually makes it the page's
// time range with ctx.setTimeRange).
//
//   const c = timeChart(container, {
//     start_ts, bucket_ms,          // the first bucket's start (Unix ms), its width
//     series: [{ name, values }],   // values per bucket (numbers; null = no data)
//     unit: 'cores',                // shown in the readout
//     stacked: false,               // stacked areas instead of lines
//     height: 180,
//     format: (v) => string,        // a value in the readout and on the axis
//     axisFormat: (v) => string,    // the axis' labels, when not format
//     ticks: (max) => [0, ..., top], // the value axis' ticks (default 1-2-5 steps)
//     gaps: false,                  // lines break where a value is null (stacked:
//                                   // where every series is null; else null is 0)
//     onZoom: (startMs, endMs) => {},   // drag across the chart
//     onClick: (ms, i, ev) => {},   // a click (not a drag) on bucket i starting at ms
//     onSeries: (name) => {},       // a click on a legend entry
//     marks: [{ ms, label }],       // events marked at their time: a dashed
//                                   // red line and a flag whose tooltip is label
//   });
//   c.destroy();
//
// The chart draws into an <svg> sized to the container's width and redraws
// when that width changes. Nothing here fetches data.

const SVG = 'http://www.w3.org/2000/svg';
export const PALETTE = ['#c2410c', '#2563eb', '#15803d', '#9333ea', '#b45309', '#0e7490', '#be123c', '#4d7c0f', '#6d28d9', '#a16207'];
const PAD = { left: 52, right: 12, top: 10, bottom: 22 };

function node(name, attrs = {}, parent = null) {
	const e = document.createElementNS(SVG, name);
	for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
	if (parent) parent.append(e);
	return e;
}

// 1, 2, 5 x 10^n steps giving about `count` ticks up to max.
export function niceTicks(max, count = 4) {
	if (!(max > 0)) return [0, 1];
	const raw = max / count;
	const mag = 10 ** Math.floor(Math.log10(raw));
	const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || 10 * mag;
	const out = [];
	for (let v = 0; v <= max + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
	if (out[out.length - 1] < max) out.push(Number((out[out.length - 1] + step).toPrecision(12)));
	return out;
}

function timeLabel(ms, spanMs) {
	const d = new Date(ms);
	const two = (n) => String(n).padStart(2, '0');
	const hm = `${two(d.getHours())}:${two(d.getMinutes())}`;
	if (spanMs <= 10 * 60 * 1000) return `${hm}:${two(d.getSeconds())}`;
	if (spanMs <= 36 * 3600 * 1000) return hm;
	return `${d.getMonth() + 1}/${d.getDate()} ${hm}`;
}

const defaultFormat = (v) => (v === null || v === undefined ? '\u2013' : String(Number(v.toPrecision(3))));

export function timeChart(container, opts) {
	const o = { unit: '', stacked: false, height: 180, format: defaultFormat, ...opts };
	const series = (o.series || []).map((s, i) => ({ ...s, color: s.color || PALETTE[i % PALETTE.length] }));
	const n = series.reduce((m, s) => Math.max(m, s.values.length), 0);
	const wrap = document.createElement('div');
	wrap.className = 'chart';
	const svg = node('svg', { class: 'chart-svg', height: o.height, role: 'img' });
	const readout = document.createElement('div');
	readout.className = 'chart-readout';
	readout.hidden = true;
	const legend = document.createElement('ul');
	legend.className = 'chart-legend';
	wrap.append(svg, readout, legend);
	container.replaceChildren(wrap);
	svg.setAttribute('aria-label', `Chart over time of ${series.map((s) => s.name).join(', ') || 'no series'}`);

	for (const s of series) {
		const li = document.createElement('li');
		const sw = document.createElement('span');
		sw.className = 'swatch';
		sw.style.background = s.color;
		li.append(sw, document.createTextNode(s.name));
		if (o.onSeries) {
			li.tabIndex = 0;
			li.classList.add('clickable');
			li.addEventListener('click', () => o.onSeries(s.name));
			li.addEventListener('keydown', (ev) => ev.key === 'Enter' && o.onSeries(s.name));
		}
		legend.append(li);
	}

	// Stacked: each series drawn on top of the sum of the ones before.
	const base = new Float64Array(n);
	const tops = series.map((s) => {
		const t = new Float64Array(n);
		for (let i = 0; i < n; i++) {
			const v = Number(s.values[i]) || 0;
			t[i] = o.stacked ? base[i] + v : v;
			if (o.stacked) base[i] += v;
		}
		return t;
	});
	let max = 0;
	for (const t of tops) for (let i = 0; i < n; i++) max = Math.max(max, t[i]);
	const ticks = (o.ticks || niceTicks)(max || 1);
	const ymax = ticks[ticks.length - 1];
	const t0 = o.start_ts, t1 = o.start_ts + n * o.bucket_ms;

	let width = 0, plotW = 0;
	const plotH = o.height - PAD.top - PAD.bottom;
	const xOf = (i) => PAD.left + (n ? (i / n) * plotW : 0);
	const yOf = (v) => PAD.top + plotH - (v / ymax) * plotH;
	let cursor = null, selection = null;

	function draw() {
		width = container.clientWidth || 600;
		plotW = Math.max(10, width - PAD.left - PAD.right);
		svg.setAttribute('width', width);
		svg.replaceChildren();
		const axis = node('g', { class: 'chart-axis' }, svg);
		for (const v of ticks) {
			const y = yOf(v);
			node('line', { x1: PAD.left, x2: PAD.left + plotW, y1: y, y2: y, class: 'chart-grid' }, axis);
			const label = node('text', { x: PAD.left - 6, y: y + 4, 'text-anchor': 'end' }, axis);
			label.textContent = (o.axisFormat || o.format)(v);
		}
		const labels = Math.max(2, Math.min(8, Math.floor(plotW / 90)));
		for (let k = 0; k <= labels; k++) {
			const ms = t0 + ((t1 - t0) * k) / labels;
			const x = PAD.left + (plotW * k) / labels;
			const label = node('text', { x, y: o.height - 6, 'text-anchor': k === 0 ? 'start' : k === labels ? 'end' : 'middle' }, axis);
			label.textContent = timeLabel(ms, t1 - t0);
		}
		const step = n ? plotW / n : 0;
		const missing = (s, i) => s.values[i] === null || s.values[i] === undefined || Number.isNaN(Number(s.values[i]));
		// The runs of buckets drawn: all of them, or with gaps, those with a
		// value (stacked: in any series). A lone bucket is a short dash.
		const runsOf = (has) => {
			const out = [];
			for (let i = 0; i < n; i++) {
				if (!has(i)) continue;
				const a = i;
				while (i + 1 < n && has(i + 1)) i++;
				out.push([a, i]);
			}
			return out;
		};
		const shared = o.gaps && o.stacked ? runsOf((i) => series.some((s) => !missing(s, i))) : null;
		series.forEach((s, si) => {
			const top = tops[si];
			const below = o.stacked && si ? tops[si - 1] : null;
			const runs = !o.gaps ? (n ? [[0, n - 1]] : []) : shared || runsOf((i) => !missing(s, i));
			let line = '', area = '';
			for (const [a, b] of runs) {
				const pts = [];
				if (a === b) {
					const x = xOf(a) + step / 2, w = Math.min(2, step / 2);
					pts.push([x - w, a], [x + w, a]);
				} else for (let i = a; i <= b; i++) pts.push([xOf(i) + step / 2, i]);
				const fwd = pts.map(([x, i], k) => `${k ? 'L' : 'M'}${x.toFixed(1)},${yOf(top[i]).toFixed(1)}`).join('');
				line += fwd;
				if (o.stacked) {
					let back = '';
					for (let k = pts.length - 1; k >= 0; k--) back += `L${pts[k][0].toFixed(1)},${yOf(below ? below[pts[k][1]] : 0).toFixed(1)}`;
					area += fwd + back + 'Z';
				}
			}
			if (!line) return;
			if (area) node('path', { d: area, fill: s.color, 'fill-opacity': 0.35, stroke: 'none' }, svg);
			node('path', { d: line, fill: 'none', stroke: s.color, 'stroke-width': 1.6, 'data-series': s.name }, svg);
		});
		cursor = node('line', { y1: PAD.top, y2: PAD.top + plotH, class: 'chart-cursor', visibility: 'hidden' }, svg);
		selection = node('rect', { y: PAD.top, height: plotH, class: 'chart-selection', visibility: 'hidden' }, svg);
		node('rect', { x: PAD.left, y: PAD.top, width: plotW, height: plotH, fill: 'transparent', class: 'chart-hit' }, svg);
		// Events over everything (their flags take the pointer for the tooltip).
		for (const m of o.marks || []) {
			if (!(m.ms >= t0 && m.ms <= t1) || t1 <= t0) continue;
			const x = PAD.left + ((m.ms - t0) / (t1 - t0)) * plotW;
			const g = node('g', { class: 'chart-mark', 'data-mark': m.label, 'data-ms': m.ms }, svg);
			node('line', { x1: x, x2: x, y1: PAD.top, y2: PAD.top + plotH, class: 'chart-mark-line' }, g);
			const flag = node('path', { d: `M${x.toFixed(1)},${PAD.top}l6,0l-6,7z`, class: 'chart-mark-flag' }, g);
			node('title', {}, flag).textContent = m.label;
		}
	}

	const bucketAt = (x) => Math.max(0, Math.min(n - 1, Math.floor(((x - PAD.left) / plotW) * n)));
	const localX = (ev) => ev.clientX - svg.getBoundingClientRect().left;
	let dragFrom = null;

	function showReadout(i, ev) {
		if (!n) return;
		const x = xOf(i) + plotW / n / 2;
		cursor.setAttribute('x1', x);
		cursor.setAttribute('x2', x);
		cursor.setAttribute('visibility', 'visible');
		const rows = series
			.filter((s) => !o.gaps || (s.values[i] !== null && s.values[i] !== undefined))
			.map((s) => [s, Number(s.values[i]) || 0])
			.sort((a, b) => b[1] - a[1])
			.slice(0, 8)
			.map(([s, v]) => `<div><span class="swatch" style="background:${s.color}"></span>${escape(s.name)} <b>${escape(o.format(v))}</b>${o.unit ? ' ' + escape(o.unit) : ''}</div>`);
		readout.innerHTML = `<div class="chart-when">${escape(new Date(t0 + i * o.bucket_ms).toLocaleString())}</div>${rows.join('') || '<div class="muted">no data</div>'}`;
		readout.hidden = false;
		const r = wrap.getBoundingClientRect();
		let left = ev.clientX - r.left + 12;
		if (left + readout.offsetWidth > r.width) left = Math.max(0, ev.clientX - r.left - readout.offsetWidth - 12);
		readout.style.left = left + 'px';
		readout.style.top = PAD.top + 'px';
	}

	function onMove(ev) {
		const x = localX(ev);
		if (x < PAD.left || x > PAD.left + plotW) {
			if (dragFrom === null) hide();
			return;
		}
		showReadout(bucketAt(x), ev);
		if (dragFrom !== null && o.onZoom) {
			const a = Math.min(dragFrom, x), b = Math.max(dragFrom, x);
			selection.setAttribute('x', a);
			selection.setAttribute('width', Math.max(1, b - a));
			selection.setAttribute('visibility', 'visible');
		}
	}
	function hide() {
		if (cursor) cursor.setAttribute('visibility', 'hidden');
		readout.hidden = true;
	}
	function onDown(ev) {
		if (ev.button !== 0 || (!o.onZoom && !o.onClick)) return;
		const x = localX(ev);
		if (x < PAD.left || x > PAD.left + plotW) return;
		dragFrom = x;
		ev.preventDefault();
	}
	function onUp(ev) {
		if (dragFrom === null) return;
		const x = Math.max(PAD.left, Math.min(PAD.left + plotW, localX(ev)));
		const a = Math.min(dragFrom, x), b = Math.max(dragFrom, x);
		const dragFrom0 = dragFrom;
		dragFrom = null;
		selection.setAttribute('visibility', 'hidden');
		if (b - a < 4 || !o.onZoom) {
			// A click, not a drag.
			if (o.onClick && b - a < 4 && n) {
				const i = bucketAt(dragFrom0);
				o.onClick(t0 + i * o.bucket_ms, i, ev);
			}
			return;
		}
		const ms = (px) => t0 + ((px - PAD.left) / plotW) * (t1 - t0);
		o.onZoom(Math.floor(ms(a)), Math.ceil(ms(b)));
	}
	const escape = (s) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);

	svg.addEventListener('mousemove', onMove);
	svg.addEventListener('mouseleave', () => dragFrom === null && hide());
	svg.addEventListener('mousedown', onDown);
	window.addEventListener('mouseup', onUp);
	if (o.onZoom) svg.classList.add('zoomable');
	else if (o.onClick) svg.classList.add('pointable');

	draw();
	let lastW = width;
	const ro = new ResizeObserver(() => {
		const w = container.clientWidth;
		if (w && w !== lastW) {
			lastW = w;
			draw();
		}
	});
	ro.observe(container);

	return {
		destroy() {
			ro.disconnect();
			window.removeEventListener('mouseup', onUp);
			container.replaceChildren();
		},
		// For tests: where a time (Unix ms) is, in client coordinates.
		clientXOf(ms) {
			const r = svg.getBoundingClientRect();
			return r.left + PAD.left + ((ms - t0) / (t1 - t0)) * plotW;
		},
	};
}
