// view_topology.js - the "GPU topology" view: how the GPUs of one host are
// connected to each other and to the CPUs, from the latest topology the
// agent reported in the page's time range (POST .../gpu/topology, docs/
// api.md), and what is wrong with it.
//
// The drawing (SVG): one box per NUMA node with its CPUs, the node's GPUs
// inside it, under each GPU the processes that feed it (red when they may
// run only on the other node's CPUs); a line for each GPU pair: green and
// thick for NVLink (labelled NV<n>), grey for PCIe (labelled with the path:
// PIX, PXB, PHB, NODE, SYS), red and dashed for a pair that talks over PCIe
// although both GPUs have NVLink. Then the interconnect matrix in
// nvidia-smi topo -m notation, and the findings, each with its fix.
//
// URL parameter: host (default: the first host by name).
// Requests: one per show; nothing polls.

import { escapeHTML, messageHTML, apiErrorHTML, loadStylesheet } from './common.js';

const SVG = 'http://www.w3.org/2000/svg';
export const COLORS = { nvlink: '#2f9e44', pcie: '#868e96', fallback: '#e03131', far: '#e03131', near: '#1c7ed6' };
const GPU_W = 170;
const GPU_H = 56;
const PROC_H = 18;
const GAP = 36;
const NODE_PAD = 16;
const NODE_HEAD = 40;

let v = null; // { root, ctx, ctl, data }

function el(name, attrs = {}, text) {
	const e = document.createElementNS(SVG, name);
	for (const [k, x] of Object.entries(attrs)) e.setAttribute(k, String(x));
	if (text !== undefined) e.textContent = text;
	return e;
}

// Nodes in order, each with its GPUs; GPUs without a known node go in a
// box of their own ("NUMA node unknown").
function layoutOf(t) {
	const nodes = (t.numa_nodes || []).map((n) => ({ id: n.id, cpus: n.cpus || '', gpus: [] }));
	const byId = new Map(nodes.map((n) => [n.id, n]));
	for (const g of t.gpus || []) {
		const id = g.numa_node === null || g.numa_node === undefined ? null : g.numa_node;
		let n = byId.get(id);
		if (!n) {
			n = { id, cpus: g.cpus || '', gpus: [] };
			byId.set(id, n);
			nodes.push(n);
		}
		n.gpus.push(g);
	}
	return nodes.filter((n) => n.gpus.length || n.id !== null);
}

// Where each GPU's box is: nodes side by side, GPUs stacked in a node.
function place(nodes) {
	const at = new Map();
	let x = 0;
	let height = 0;
	const boxes = [];
	for (const n of nodes) {
		let y = NODE_HEAD;
		for (const g of n.gpus) {
			const procs = (g.processes || []).length;
			at.set(g.index, { x: x + NODE_PAD, y, w: GPU_W, h: GPU_H });
			y += GPU_H + procs * PROC_H + GAP;
		}
		const h = Math.max(y - GAP + NODE_PAD, NODE_HEAD + 30);
		boxes.push({ node: n, x, y: 0, w: GPU_W + 2 * NODE_PAD, h });
		height = Math.max(height, h);
		x += GPU_W + 2 * NODE_PAD + 2 * GAP;
	}
	return { at, boxes, width: Math.max(x - 2 * GAP, 10), height };
}

function kindOf(link, fallback) {
	if (link.nvlinks > 0) return 'nvlink';
	return fallback.has(`${link.a}|${link.b}`) ? 'fallback' : 'pcie';
}

function draw(t) {
	const nodes = layoutOf(t);
	const { at, boxes, width, height } = place(nodes);
	const fallback = new Set((t.findings || []).filter((f) => f.kind === 'pcie_fallback').map((f) => f.gpus.join('|')));
	const far = new Set((t.findings || []).filter((f) => f.kind === 'numa_placement').map((f) => `${f.gpus[0]}|${f.pid}`));
	// Links bend outwards (to the right of both boxes) so that they do not
	// cross the boxes between them; each pair gets its own lane.
	const lanes = Math.max(1, (t.links || []).length);
	const laneW = 22;
	const svg = el('svg', { class: 'topo-svg', width: width + 40 + lanes * laneW, height: height + 10, role: 'img', 'aria-label': 'GPU topology' });
	for (const b of boxes) {
		const g = el('g', { class: 'topo-node', 'data-node': b.node.id === null ? 'unknown' : b.node.id });
		g.append(el('rect', { x: b.x + 0.5, y: b.y + 0.5, width: b.w, height: b.h, rx: 8 }));
		g.append(el('text', { x: b.x + NODE_PAD, y: 18, class: 'topo-node-title' }, b.node.id === null ? 'NUMA node unknown' : `NUMA node ${b.node.id}`));
		g.append(el('text', { x: b.x + NODE_PAD, y: 32, class: 'topo-node-cpus' }, b.node.cpus ? `CPUs ${b.node.cpus}` : 'CPUs unknown'));
		svg.append(g);
	}
	const linkLayer = el('g', { class: 'topo-links' });
	svg.append(linkLayer);
	// Each link leaves a GPU at a height of its own, so that two links of
	// one GPU never share a segment.
	const ends = new Map();
	for (const k of t.links || []) for (const g of [k.a, k.b]) ends.set(g, (ends.get(g) || 0) + 1);
	const used = new Map();
	const attach = (g, box) => {
		const k = used.get(g) || 0;
		used.set(g, k + 1);
		return box.y + ((k + 1) * GPU_H) / (ends.get(g) + 1);
	};
	const n = (t.links || []).length;
	(t.links || []).forEach((k, i) => {
		const a = at.get(k.a);
		const b = at.get(k.b);
		if (!a || !b) return;
		const kind = kindOf(k, fallback);
		const ya = attach(k.a, a);
		const yb = attach(k.b, b);
		let d;
		let lx;
		let ly;
		if (a.x === b.x) {
			// Same node: a bracket on the right of the column.
			const xr = a.x + GPU_W + 10 + i * laneW * 0.5;
			d = `M${a.x + GPU_W},${ya} H${xr} V${yb} H${b.x + GPU_W}`;
			lx = xr + 4;
			ly = (ya + yb) / 2;
		} else {
			const [l, r] = a.x < b.x ? [a, b] : [b, a];
			const yl = l === a ? ya : yb;
			const yr = l === a ? yb : ya;
			const mx = (l.x + GPU_W + r.x) / 2 + (i - (n - 1) / 2) * 8;
			d = `M${l.x + GPU_W},${yl} H${mx} V${yr} H${r.x}`;
			lx = mx + 4;
			ly = (yl + yr) / 2 - 4;
		}
		const g = el('g', { class: `topo-link topo-${kind}`, 'data-link': `${k.a}-${k.b}`, 'data-kind': kind });
		g.append(el('title', {}, `GPU ${k.a} \u2194 GPU ${k.b}: ${k.path}${k.nvlinks ? ` (${k.nvlinks} NVLinks)` : ' over PCIe'}`));
		g.append(el('path', { d, fill: 'none', stroke: COLORS[kind], 'stroke-width': kind === 'nvlink' ? 5 : kind === 'fallback' ? 4 : 2, 'stroke-dasharray': kind === 'fallback' ? '8 5' : 'none' }));
		g.append(el('text', { x: lx, y: ly, class: 'topo-link-label', fill: COLORS[kind] }, k.path));
		linkLayer.append(g);
	});
	for (const n of nodes)
		for (const gpu of n.gpus) {
			const p = at.get(gpu.index);
			const g = el('g', { class: 'topo-gpu', 'data-gpu': gpu.index });
			g.append(el('title', {}, `${gpu.name} ${gpu.uuid}\nPCI ${gpu.pci_bus_id || 'unknown'}\nnear CPUs ${gpu.cpus || 'unknown'}\nNVLink ${gpu.nvlink_active} of ${gpu.nvlink_links} links up`));
			g.append(el('rect', { x: p.x, y: p.y, width: GPU_W, height: GPU_H, rx: 6, class: 'topo-gpu-box' }));
			g.append(el('text', { x: p.x + 10, y: p.y + 20, class: 'topo-gpu-title' }, `GPU ${gpu.index}`));
			g.append(el('text', { x: p.x + 10, y: p.y + 36, class: 'topo-gpu-sub' }, shorten(gpu.name, 22)));
			g.append(el('text', { x: p.x + 10, y: p.y + 50, class: 'topo-gpu-sub' }, `NVLink ${gpu.nvlink_active}/${gpu.nvlink_links} up`));
			(gpu.processes || []).forEach((proc, i) => {
				const isFar = far.has(`${gpu.index}|${proc.pid}`) || proc.near === false;
				const y = p.y + GPU_H + 4 + i * PROC_H;
				const pg = el('g', { class: `topo-proc ${isFar ? 'topo-far' : 'topo-near'}`, 'data-pid': proc.pid });
				pg.append(el('rect', { x: p.x + 8, y, width: 6, height: 12, fill: isFar ? COLORS.far : COLORS.near }));
				pg.append(el('text', { x: p.x + 20, y: y + 10, class: 'topo-proc-text' }, shorten(`${proc.name || '?'} ${proc.pid} \u00b7 CPUs ${proc.cpus_allowed}`, 26)));
				pg.append(el('title', {}, `${proc.name} (pid ${proc.pid}) may run on CPUs ${proc.cpus_allowed}${proc.numa_nodes ? ` (NUMA node ${proc.numa_nodes})` : ''}`));
				g.append(pg);
			});
			svg.append(g);
		}
	return svg;
}

const shorten = (s, n) => (s.length > n ? s.slice(0, n - 1) + '\u2026' : s);

// nvidia-smi topo -m: X on the diagonal, the pair's path elsewhere.
function matrixHTML(t) {
	const gpus = (t.gpus || []).map((g) => g.index);
	const path = new Map();
	for (const k of t.links || []) {
		path.set(`${k.a}|${k.b}`, k);
		path.set(`${k.b}|${k.a}`, k);
	}
	const fallback = new Set((t.findings || []).filter((f) => f.kind === 'pcie_fallback').flatMap((f) => [f.gpus.join('|'), [...f.gpus].reverse().join('|')]));
	const head = gpus.map((g) => `<th scope="col">GPU ${escapeHTML(g)}</th>`).join('');
	const rows = (t.gpus || [])
		.map((g) => {
			const cells = gpus
				.map((o) => {
					if (o === g.index) return '<td class="topo-self">X</td>';
					const k = path.get(`${g.index}|${o}`);
					if (!k) return '<td class="muted">?</td>';
					const cls = k.nvlinks > 0 ? 'topo-cell-nv' : fallback.has(`${g.index}|${o}`) ? 'topo-cell-fallback' : 'topo-cell-pcie';
					return `<td class="${cls}">${escapeHTML(k.path)}</td>`;
				})
				.join('');
			return `<tr><th scope="row">GPU ${escapeHTML(g.index)}</th>${cells}<td>${escapeHTML(g.cpus || '?')}</td><td>${g.numa_node ?? '?'}</td></tr>`;
		})
		.join('');
	return `<table class="topo-matrix" aria-label="Interconnect matrix"><thead><tr><th></th>${head}<th scope="col">CPU affinity</th><th scope="col">NUMA node</th></tr></thead><tbody>${rows}</tbody></table>
	<p class="topo-legend muted">NV<i>n</i>: <i>n</i> bonded NVLinks; PIX: one PCIe switch; PXB: several switches; PHB: a host bridge; NODE: host bridges of one NUMA node; SYS: across NUMA nodes (the inter-socket link).</p>`;
}

function findingsHTML(t) {
	const f = t.findings || [];
	if (!f.length) return messageHTML('info', 'No topology problem found: every feeding process may run near its GPU, and no GPU pair falls back to PCIe where NVLink exists.');
	const kind = { numa_placement: 'NUMA placement', pcie_fallback: 'Interconnect' };
	return `<ul class="topo-findings">${f
		.map(
			(x) => `<li class="topo-finding" data-kind="${escapeHTML(x.kind)}"><span class="topo-finding-kind">${escapeHTML(kind[x.kind] || x.kind)}</span>
			<strong>${escapeHTML(x.title)}</strong><p>${escapeHTML(x.detail)}</p><p class="topo-fix">Fix: <code>${escapeHTML(x.fix)}</code></p></li>`
		)
		.join('')}</ul>`;
}

function render(t) {
	const root = v.root;
	const hosts = t.hosts || [];
	const body = root.querySelector('.topo-body');
	const sel = root.querySelector('#topo-host');
	sel.innerHTML = hosts.map((h) => `<option value="${escapeHTML(h)}">${escapeHTML(h)}</option>`).join('');
	sel.value = t.host || '';
	sel.disabled = hosts.length < 2;
	if (!t.host) {
		body.innerHTML = messageHTML(
			'empty',
			`<p><strong>No GPU topology was received in ${escapeHTML(v.ctx.rangeText)}.</strong> ember-agent reports it with the GPU metrics (NVML, <code>-enable-gpu-metrics</code>) on hosts with NVIDIA GPUs, every <code>-collect-metrics-interval</code>.</p>`
		);
		return 'empty';
	}
	const gpus = t.gpus || [];
	const pairs = (t.links || []).filter((k) => k.nvlinks > 0).length;
	const metricsHref = v.ctx.href('metrics', { q: `host.name == ${JSON.stringify(t.host)}` });
	body.innerHTML = `<p class="topo-summary">${gpus.length} GPU${gpus.length === 1 ? '' : 's'} on ${(t.numa_nodes || []).length} NUMA node${(t.numa_nodes || []).length === 1 ? '' : 's'}, ${pairs} NVLink pair${pairs === 1 ? '' : 's'}; reported ${escapeHTML(new Date(t.ts).toLocaleString())}. <a class="topo-metrics" href="${escapeHTML(metricsHref)}">GPU metrics of ${escapeHTML(t.host)}</a></p>
		<section class="panel topo-findings-panel"><h2>Findings</h2>${findingsHTML(t)}</section>
		<section class="panel"><h2>NUMA nodes, GPUs and links</h2><div class="topo-drawing"></div>
		<p class="topo-legend"><span class="topo-key" style="background:${COLORS.nvlink}"></span>NVLink <span class="topo-key" style="background:${COLORS.pcie}"></span>PCIe <span class="topo-key topo-key-dash" style="background:${COLORS.fallback}"></span>PCIe although NVLink exists <span class="topo-key" style="background:${COLORS.near}"></span>process near its GPU <span class="topo-key" style="background:${COLORS.far}"></span>process on the far node</p></section>
		<section class="panel"><h2>Interconnect matrix</h2>${matrixHTML(t)}</section>`;
	body.querySelector('.topo-drawing').append(draw(t));
	return 'ready';
}

async function run() {
	const s = v;
	const ctx = s.ctx;
	try {
		const host = ctx.param('host');
		const t = await ctx.api('gpu/topology', { filter: { start_ts: ctx.start_ts, end_ts: ctx.end_ts }, host: host || null }, s.ctl.signal);
		if (s !== v) return;
		s.data = t;
		const state = render(t);
		expose();
		ctx.setState(state);
	} catch (e) {
		if (e.name === 'AbortError' || s !== v) return;
		s.root.querySelector('.topo-body').innerHTML = apiErrorHTML(e);
		expose();
		ctx.setState('error');
	}
}

function expose() {
	window.emberTopology = v && v.data ? JSON.parse(JSON.stringify(v.data)) : null;
}

function show(root, ctx) {
	loadStylesheet('view_topology.css');
	if (!v || v.root !== root || !root.querySelector('.topo')) {
		root.innerHTML = `<div class="view-body topo">
		<div class="topo-head"><h1>GPU topology</h1>
			<div class="field"><label for="topo-host">Host</label><select id="topo-host"></select></div></div>
		<div class="topo-body"></div></div>`;
		v = { root, ctx, ctl: null, data: null };
		root.querySelector('#topo-host').addEventListener('change', (ev) => v.ctx.setParams({ host: ev.target.value }, true));
	}
	v.ctx = ctx;
	if (v.ctl) v.ctl.abort();
	v.ctl = new AbortController();
	ctx.setState('loading');
	run();
}

function hide() {
	if (v && v.ctl) v.ctl.abort();
	if (v) v.ctl = null;
}

export default { id: 'topology', title: 'GPU topology', show, hide };
