// flamegraph.js - ember's flame graph renderer.
//
// The tree from the flamegraph API is flattened once (setData) into typed
// arrays in depth-first pre-order, so that a node's subtree is the index
// range [i, next[i]). A render is then one pass over that range, in which
// subtrees narrower than half a pixel are skipped as a whole; what it keeps
// (drawn*) is filled row by row, pixel-aligned, with runs of sub-2 px
// frames merged into one rectangle, then labelled. The drawn frames serve
// hit testing and tests that inspect the graph.
//
// The graph is an icicle: the root on top, callees below, children left to
// right in the order the API sends them (largest first).
//
// The canvas is the size of the viewport, not of the graph: the view is a
// horizontal window [viewX0, viewX1) of the focused frame's width (1 = all
// of it; Ctrl+wheel zooms, drag and Shift+wheel pan) and a vertical scroll
// offset (scrollY, CSS px). Only frames inside the window are drawn, so a
// pan redraws what is on screen, not the whole tree.

export const ROW_HEIGHT = 18;
const MIN_WIDTH = 0.5; // frames narrower than this (CSS px) are not drawn
const MIN_LABEL = 22; // frames narrower than this get no text
const LABEL_PAD = 4;
const MAX_CANVAS_PX = 32000; // Chrome's limit is 32767 device px per side
const MAX_CANVAS_AREA = 250e6;

// Base colours per frame type: [hue, saturation %, lightness %, label].
// Lightness stays high so dark text remains readable on every frame.
export const FRAME_TYPES = {
	root: [220, 8, 82, 'root'],
	synthetic: [212, 30, 80, 'synthetic'],
	kernel: [14, 78, 70, 'kernel'],
	native: [46, 85, 62, 'native'],
	cpython: [205, 70, 70, 'Python'],
	go: [186, 58, 60, 'Go'],
	jvm: [118, 45, 62, 'JVM'],
	v8: [78, 55, 60, 'V8 (JS)'],
	ruby: [338, 62, 72, 'Ruby'],
	php: [250, 50, 76, 'PHP'],
	perl: [286, 42, 74, 'Perl'],
	dotnet: [266, 55, 74, '.NET'],
	cuda_launch: [150, 50, 60, 'CUDA launch'],
	cuda_kernel: [88, 62, 52, 'CUDA kernel'],
	cuda_sass: [128, 38, 66, 'CUDA SASS'],
	// apart from native's yellow: a stall leaf sits beside native-heavy stacks
	cuda_stall: [318, 55, 76, 'CUDA stall'],
	cuda_memcpy: [172, 55, 58, 'CUDA memcpy'],
	cuda_memset: [196, 45, 64, 'CUDA memset'],
	cuda_sync: [28, 65, 64, 'CUDA sync'],
	nvtx: [236, 40, 76, 'NVTX range'],
	error: [354, 62, 60, 'error'],
};
const TYPE_NAMES = Object.keys(FRAME_TYPES);
const TYPE_INDEX = new Map(TYPE_NAMES.map((t, i) => [t, i]));
const NO_VARIATION = new Set(['root', 'error']);

// FNV-1a: a small, stable hash of a frame name.
function hashName(s) {
	let h = 0x811c9dc5;
	for (let i = 0; i < s.length; i++) {
		h ^= s.charCodeAt(i);
		h = Math.imul(h, 0x01000193);
	}
	return h >>> 0;
}

// The colour of a frame: its type's base colour, varied a little by a hash
// of its name so that neighbouring frames differ. Same name, same colour.
// The variations are few (VARIANTS per type), so colours are indexes into a
// palette of strings made once.
const HUE_STEPS = 13, LIGHT_STEPS = 11, SAT_STEPS = 9;
const VARIANTS = HUE_STEPS * LIGHT_STEPS * SAT_STEPS;
const palette = [];

function variant(name) {
	const x = hashName(name);
	return (x % HUE_STEPS) + HUE_STEPS * (((x >>> 8) % LIGHT_STEPS) + LIGHT_STEPS * ((x >>> 16) % SAT_STEPS));
}

function paletteColor(t, v) {
	const key = t * VARIANTS + v;
	let c = palette[key];
	if (c === undefined) {
		const type = TYPE_NAMES[t];
		let [h, s, l] = FRAME_TYPES[type];
		if (!NO_VARIATION.has(type)) {
			h += (v % HUE_STEPS) - (HUE_STEPS >> 1);
			l += (Math.floor(v / HUE_STEPS) % LIGHT_STEPS) - (LIGHT_STEPS >> 1);
			s += Math.floor(v / (HUE_STEPS * LIGHT_STEPS)) - (SAT_STEPS >> 1);
		}
		c = palette[key] = `hsl(${(h + 360) % 360} ${s}% ${l}%)`;
	}
	return c;
}

export function frameColor(type, name) {
	const t = TYPE_INDEX.has(type) ? TYPE_INDEX.get(type) : TYPE_INDEX.get('native');
	return paletteColor(t, variant(String(name)));
}

// The colour of a frame that does not match the current search.
function dimColor(type) {
	const [h] = FRAME_TYPES[type] || FRAME_TYPES.native;
	return `hsl(${h} 10% 90%)`;
}

const NARROW = 2; // CSS px
const BASE_COLORS = TYPE_NAMES.map((t) => {
	const [h, s, l] = FRAME_TYPES[t];
	return `hsl(${h} ${s}% ${l}%)`;
});
const DIM_COLORS = TYPE_NAMES.map(dimColor);

// A frame type's colour without the variation by name (for legends).
export function baseColor(type) {
	return BASE_COLORS[TYPE_INDEX.has(type) ? TYPE_INDEX.get(type) : TYPE_INDEX.get('native')];
}

export function typeLabel(type) {
	return (FRAME_TYPES[type] || [0, 0, 0, type])[3];
}

// Parses a search term: /re/flags is a regular expression (add the i flag
// to ignore case), anything else a case-insensitive substring. Returns a
// predicate, or throws SyntaxError.
export function searchPredicate(term) {
	const m = /^\/(.+)\/([a-z]*)$/.exec(term);
	if (m) {
		const re = new RegExp(m[1], m[2].replace(/[gy]/g, ''));
		return (name) => re.test(name);
	}
	const needle = term.toLowerCase();
	return (name) => name.toLowerCase().includes(needle);
}

export class FlameGraph {
	constructor(canvas) {
		this.canvas = canvas;
		this.ctx = canvas.getContext('2d');
		this.font = '12px system-ui, sans-serif';
		this.rowHeight = ROW_HEIGHT;
		this.width = 0; // CSS px, set by render()
		this.height = 0;
		this.truncatedRows = false;
		this.viewX0 = 0; // the horizontal window, as fractions of the focus
		this.viewX1 = 1;
		this.scrollY = 0; // CSS px scrolled down
		this.contentHeight = 0; // CSS px the focus's graph needs
		this.viewHeight = 0; // CSS px of canvas
		this.textWidths = new Map();
		this.setData({ total: 0, root: { name: 'root', frame_type: 'root', self: 0, total: 0, children: [] } });
		this.drawnCap = 0;
		this.growDrawn(1024);
	}

	// --- data ------------------------------------------------------------

	setData(data) {
		const root = data.root;
		// Count the nodes first so that the arrays are allocated once.
		let n = 0;
		const stack = [root];
		while (stack.length) {
			const node = stack.pop();
			n++;
			const kids = node.children;
			if (kids) for (let i = 0; i < kids.length; i++) stack.push(kids[i]);
		}
		this.n = n;
		this.nodes = new Array(n);
		this.parent = new Int32Array(n);
		this.depth = new Uint16Array(n);
		this.start = new Float64Array(n);
		this.total = new Float64Array(n);
		this.self = new Float64Array(n);
		this.next = new Int32Array(n);
		this.type = new Uint8Array(n);
		this.color = new Array(n);
		this.matched = null;
		this.maxDepth = 0;
		const typesSeen = new Set();
		const nativeType = TYPE_INDEX.get('native');

		// Pre-order walk with an explicit stack: a node's children are pushed
		// in reverse so that the first (largest) is visited first. The stack
		// never holds more than n entries.
		const sNode = new Array(n), sParent = new Int32Array(n), sDepth = new Int32Array(n);
		const sStart = new Float64Array(n);
		let sp = 0;
		sNode[sp] = root;
		sParent[sp] = -1;
		sDepth[sp] = 0;
		sStart[sp] = 0;
		sp++;
		let i = 0;
		while (sp > 0) {
			sp--;
			const node = sNode[sp], st = sStart[sp], d = sDepth[sp];
			sNode[sp] = undefined;
			const type = node.frame_type || 'native';
			let t = TYPE_INDEX.get(type);
			if (t === undefined) t = nativeType;
			else typesSeen.add(type);
			const name = typeof node.name === 'string' ? node.name : String(node.name);
			this.nodes[i] = node;
			this.parent[i] = sParent[sp];
			this.depth[i] = d > 65535 ? 65535 : d;
			this.start[i] = st;
			this.total[i] = +node.total || 0;
			this.self[i] = +node.self || 0;
			this.type[i] = t;
			this.color[i] = paletteColor(t, variant(name));
			if (d > this.maxDepth) this.maxDepth = d;
			const kids = node.children;
			if (kids && kids.length) {
				// Children sit left to right inside their parent; pushed last
				// to first, each starts where the ones after it end.
				let off = st;
				for (let k = 0; k < kids.length; k++) off += +kids[k].total || 0;
				for (let k = kids.length - 1; k >= 0; k--) {
					off -= +kids[k].total || 0;
					sNode[sp] = kids[k];
					sParent[sp] = i;
					sStart[sp] = off;
					sDepth[sp] = d + 1;
					sp++;
				}
			}
			i++;
		}
		// Subtree ends: size[i] = 1 + the sizes of its children.
		const size = this.next;
		size.fill(1);
		for (let k = n - 1; k > 0; k--) size[this.parent[k]] += size[k];
		for (let k = 0; k < n; k++) size[k] += k;

		this.grandTotal = this.total[0];
		this.version = (this.version || 0) + 1;
		this.typesSeen = typesSeen;
		this.focus = 0;
		this.searchTerm = '';
		this.searchResult = { count: 0, total: 0, share: 0 };
		this.drawnCount = 0;
	}

	node(i) {
		return this.nodes[i];
	}

	typeName(i) {
		return TYPE_NAMES[this.type[i]];
	}

	// The names from the root's child down to node i (the root excluded).
	pathOf(i) {
		const names = [];
		for (let k = i; k > 0; k = this.parent[k]) names.push(String(this.nodes[k].name));
		return names.reverse();
	}

	// The node at a path of names, or the deepest node that matches a prefix
	// of it. Returns {index, complete}.
	findPath(names) {
		let at = 0;
		for (let d = 0; d < names.length; d++) {
			let found = -1;
			for (let c = at + 1; c < this.next[at]; c = this.next[c]) {
				if (String(this.nodes[c].name) === names[d]) {
					found = c;
					break;
				}
			}
			if (found < 0) return { index: at, complete: false };
			at = found;
		}
		return { index: at, complete: true };
	}

	children(i) {
		const out = [];
		for (let c = i + 1; c < this.next[i]; c = this.next[c]) out.push(c);
		return out;
	}

	setFocus(i) {
		this.focus = i >= 0 && i < this.n ? i : 0;
		this.resetView();
	}

	// --- the viewport ----------------------------------------------------

	resetView() {
		this.viewX0 = 0;
		this.viewX1 = 1;
		this.scrollY = 0;
	}

	get zoomed() {
		return this.viewX0 > 0 || this.viewX1 < 1;
	}

	// Zooms the horizontal window by factor (< 1 narrows it) around the
	// CSS x coordinate x, which keeps showing the same point.
	zoomAt(x, factor) {
		const span = this.viewX1 - this.viewX0;
		const minSpan = this.total[this.focus] > 0 ? Math.min(1, 2 / this.total[this.focus]) : 1;
		const next = Math.min(1, Math.max(minSpan, 1e-9, span * factor));
		const at = this.viewX0 + (this.width > 0 ? x / this.width : 0.5) * span;
		let x0 = at - (at - this.viewX0) * (next / span);
		x0 = Math.min(Math.max(0, x0), 1 - next);
		this.viewX0 = x0;
		this.viewX1 = x0 + next;
	}

	// Moves the window by dx, dy CSS px (positive: the graph moves left, up).
	panBy(dx, dy) {
		const span = this.viewX1 - this.viewX0;
		if (dx && this.width > 0) {
			let x0 = this.viewX0 + (dx / this.width) * span;
			x0 = Math.min(Math.max(0, x0), 1 - span);
			this.viewX0 = x0;
			this.viewX1 = x0 + span;
		}
		if (dy) this.scrollY = this.clampScroll(this.scrollY + dy);
	}

	clampScroll(y) {
		return Math.max(0, Math.min(y, this.contentHeight - this.viewHeight));
	}

	// Centres the window on fractions (fx of the focus's width, fy of the
	// graph's height): the minimap's navigation.
	centerOn(fx, fy) {
		const span = this.viewX1 - this.viewX0;
		const x0 = Math.min(Math.max(0, fx - span / 2), 1 - span);
		this.viewX0 = x0;
		this.viewX1 = x0 + span;
		this.scrollY = this.clampScroll(fy * this.contentHeight - this.viewHeight / 2);
	}

	isAncestorOrSelf(a, i) {
		return i >= a && i < this.next[a];
	}

	// Marks the frames whose name or binary matches term. Returns {count, total, share}
	// where total counts each matched subtree once (a match below a match is
	// not counted again). Throws SyntaxError for a bad regular expression.
	setSearch(term) {
		term = term || '';
		this.searchTerm = term;
		if (!term) {
			this.matched = null;
			this.searchResult = { count: 0, total: 0, share: 0 };
			return this.searchResult;
		}
		const test = searchPredicate(term);
		const matched = new Uint8Array(this.n);
		const cache = new Map();
		let count = 0, total = 0, coveredUntil = 0;
		const binaries = new Map();
		for (let i = 1; i < this.n; i++) {
			const node = this.nodes[i];
			const name = String(node.name);
			let m = cache.get(name);
			if (m === undefined) {
				m = test(name);
				cache.set(name, m);
			}
			// A frame of a matching binary matches too (libc.so.6).
			if (!m && node.binary) {
				m = binaries.get(node.binary);
				if (m === undefined) {
					m = test(String(node.binary));
					binaries.set(node.binary, m);
				}
			}
			if (!m) continue;
			matched[i] = 1;
			count++;
			if (i >= coveredUntil) {
				total += this.total[i];
				coveredUntil = this.next[i];
			}
		}
		this.matched = matched;
		const share = this.grandTotal > 0 ? total / this.grandTotal : 0;
		this.searchResult = { count, total, share };
		return this.searchResult;
	}

	// --- drawing ---------------------------------------------------------

	growDrawn(cap) {
		if (cap <= this.drawnCap) return;
		cap = Math.max(cap, this.drawnCap * 2);
		const idx = new Int32Array(cap), x = new Float32Array(cap), w = new Float32Array(cap);
		if (this.drawnCount) {
			idx.set(this.drawnIdx.subarray(0, this.drawnCount));
			x.set(this.drawnX.subarray(0, this.drawnCount));
			w.set(this.drawnW.subarray(0, this.drawnCount));
		}
		this.drawnIdx = idx;
		this.drawnX = x;
		this.drawnW = w;
		this.drawnCap = cap;
	}

	// Draws the graph at width CSS pixels into a canvas at most maxHeight
	// CSS px high (default: as high as the graph, within the canvas limits);
	// returns the time it took in ms.
	render(width, maxHeight) {
		const t0 = performance.now();
		const dpr = window.devicePixelRatio || 1;
		const W = Math.max(1, Math.floor(width));
		const rowH = this.rowHeight;
		const limit = Math.min(MAX_CANVAS_PX / dpr, MAX_CANVAS_AREA / (W * dpr * dpr));
		const canvasMax = Math.max(rowH, Math.floor(Math.min(limit, maxHeight > 0 ? maxHeight : limit)));
		// Rows in view: known once the depth of the graph is (below).
		let rowLo = 0, rowHi = Math.floor(canvasMax / rowH) + 1;
		if (maxHeight > 0) {
			rowLo = Math.floor(this.scrollY / rowH);
			rowHi = Math.ceil((this.scrollY + canvasMax) / rowH);
		} else this.scrollY = 0;

		// Pass 1: choose what is drawn. Ancestors of the focus span the
		// width; the focus's subtree is scaled so that the focus does too.
		this.drawnCount = 0;
		const F = this.focus;
		let count = 0;
		const chain = [];
		for (let a = this.parent[F]; a >= 0; a = this.parent[a]) chain.push(a);
		this.growDrawn(chain.length + 1024);
		let deepest = 0, truncated = false;
		for (let k = chain.length - 1; k >= 0; k--) {
			const d = this.depth[chain[k]];
			if (d > deepest) deepest = d;
			if (d < rowLo || d >= rowHi) continue;
			this.drawnIdx[count] = chain[k];
			this.drawnX[count] = 0;
			this.drawnW[count] = W;
			count++;
		}
		const total = this.total[F];
		const span = this.viewX1 - this.viewX0;
		const scale = total > 0 ? W / (total * span) : 0;
		const base = this.start[F] + this.viewX0 * total;
		const end = this.next[F];
		const next = this.next, depth = this.depth, start = this.start, tot = this.total;
		for (let i = F; i < end;) {
			const w = tot[i] * scale;
			const x = (start[i] - base) * scale;
			// Too narrow, or outside the window: the whole subtree is.
			if (w < MIN_WIDTH || x >= W || x + w <= 0) {
				i = next[i];
				continue;
			}
			const d = depth[i];
			if (d > deepest) deepest = d;
			if (d >= rowLo && d < rowHi) {
				if (count === this.drawnCap) this.growDrawn(count + 1);
				const cx = x < 0 ? 0 : x;
				this.drawnIdx[count] = i;
				this.drawnX[count] = cx;
				this.drawnW[count] = Math.min(x + w, W) - cx;
				count++;
			} else if (d >= rowHi && !(maxHeight > 0)) truncated = true; // past the canvas limit
			i++;
		}
		if (total <= 0 && F === 0) {
			// An empty graph still shows its root, so the canvas is not blank.
			count = 0;
			this.drawnIdx[count] = 0;
			this.drawnX[count] = 0;
			this.drawnW[count] = W;
			count++;
		}
		this.drawnCount = count;
		this.truncatedRows = truncated;

		// Size the canvas to the viewport (or to the graph), in device pixels.
		this.contentHeight = (deepest + 1) * rowH;
		const H = Math.min(this.contentHeight, canvasMax);
		this.viewHeight = H;
		const scrollY = maxHeight > 0 ? this.scrollY : 0;
		const cw = Math.round(W * dpr), ch = Math.round(H * dpr);
		const canvas = this.canvas, ctx = this.ctx;
		if (canvas.width !== cw || canvas.height !== ch) {
			canvas.width = cw;
			canvas.height = ch;
		}
		canvas.style.width = W + 'px';
		canvas.style.height = H + 'px';
		this.width = W;
		this.height = H;
		this.dpr = dpr;
		ctx.setTransform(1, 0, 0, 1, 0, 0);
		ctx.fillStyle = '#fff';
		ctx.fillRect(0, 0, cw, ch);

		// Pass 2: the rectangles, row by row, in device pixels and snapped
		// to them (unaligned rectangles are slow to fill and blurry). Frames
		// narrower than NARROW px are filled with their type's plain colour,
		// and a run of them side by side is filled with one rectangle: their
		// own colours would not show at that width anyway.
		const idx = this.drawnIdx, xs = this.drawnX, ws = this.drawnW;
		const matched = this.matched, color = this.color, type = this.type;
		const order = this.order && this.order.length >= count ? this.order : (this.order = new Int32Array(Math.max(count, 1024)));
		const rowStart = new Int32Array(deepest + 2);
		for (let k = 0; k < count; k++) rowStart[depth[idx[k]] + 1]++;
		for (let d = 1; d <= deepest + 1; d++) rowStart[d] += rowStart[d - 1];
		for (let k = 0; k < count; k++) order[rowStart[depth[idx[k]]]++] = k;
		const labelIdx = this.labelIdx && this.labelIdx.length >= count ? this.labelIdx : (this.labelIdx = new Int32Array(Math.max(count, 1024)));
		const gap = Math.max(1, Math.round(dpr));
		const rowPx = Math.round(rowH * dpr);
		let labels = 0, last = '', row = -1, y = 0;
		let runFill = '', runX0 = 0, runX1 = 0; // the pending run of narrow frames
		const flush = () => {
			if (!runFill) return;
			if (runFill !== last) ctx.fillStyle = last = runFill;
			ctx.fillRect(runX0, y, runX1 - runX0, rowPx - gap);
			runFill = '';
		};
		for (let r = 0; r < count; r++) {
			const k = order[r], i = idx[k];
			const x = xs[k], w = ws[k];
			if (depth[i] !== row) {
				flush();
				row = depth[i];
				y = Math.round((row * rowH - scrollY) * dpr);
			}
			const dim = matched !== null && i > 0 && !matched[i];
			const px0 = Math.round(x * dpr);
			let px1 = Math.round((x + w) * dpr);
			if (w < NARROW) {
				const fill = dim ? DIM_COLORS[type[i]] : BASE_COLORS[type[i]];
				if (px1 <= px0) px1 = px0 + 1;
				if (fill === runFill && px0 <= runX1) {
					if (px1 > runX1) runX1 = px1;
				} else {
					flush();
					runFill = fill;
					runX0 = px0;
					runX1 = px1;
				}
				continue;
			}
			flush();
			const fill = dim ? DIM_COLORS[type[i]] : color[i];
			if (fill !== last) ctx.fillStyle = last = fill;
			ctx.fillRect(px0, y, Math.max(px1 - px0 - gap, 1), rowPx - gap);
			if (w >= MIN_LABEL) labelIdx[labels++] = k;
		}
		flush();
		ctx.setTransform(dpr, 0, 0, dpr, 0, 0);

		// Pass 3: the labels, clipped to their frames.
		ctx.font = this.font;
		ctx.textBaseline = 'middle';
		ctx.fillStyle = '#1d2127';
		const dimText = '#8a9099';
		for (let j = 0; j < labels; j++) {
			const k = labelIdx[j];
			const i = idx[k];
			const text = this.fit(this.labelOf(i), ws[k] - 2 * LABEL_PAD);
			if (!text) continue;
			const dim = matched && i > 0 && !matched[i];
			if (dim) ctx.fillStyle = dimText;
			ctx.fillText(text, xs[k] + LABEL_PAD, depth[i] * rowH - scrollY + rowH / 2);
			if (dim) ctx.fillStyle = '#1d2127';
		}
		this.lastRenderMs = performance.now() - t0;
		if (maxHeight > 0 && this.scrollY !== this.clampScroll(this.scrollY)) {
			// The graph got shorter than where it was scrolled to.
			this.scrollY = this.clampScroll(this.scrollY);
			return this.render(width, maxHeight);
		}
		return this.lastRenderMs;
	}

	// The minimap: the focused frame's whole graph squeezed into width x
	// height CSS px of canvas, with the viewport's window outlined. The
	// graph part is drawn once per data, focus, search and size; a pan only
	// redraws the outline.
	renderMinimap(canvas, width, height) {
		const dpr = window.devicePixelRatio || 1;
		const W = Math.max(1, Math.floor(width)), H = Math.max(1, Math.floor(height));
		const cw = Math.round(W * dpr), ch = Math.round(H * dpr);
		const key = `${this.version}|${this.focus}|${cw}x${ch}|${this.searchTerm}`;
		if (!this.mini || this.miniKey !== key) {
			const off = this.mini || document.createElement('canvas');
			off.width = cw;
			off.height = ch;
			const c = off.getContext('2d');
			c.fillStyle = '#fff';
			c.fillRect(0, 0, cw, ch);
			const F = this.focus, total = this.total[F];
			const base = this.start[F], d0 = this.depth[F], end = this.next[F];
			let rows = 1;
			for (let i = F; i < end; i++) if (this.depth[i] - d0 + 1 > rows) rows = this.depth[i] - d0 + 1;
			const rh = ch / rows, scale = total > 0 ? cw / total : 0;
			const matched = this.matched;
			for (let i = F; i < end;) {
				const w = this.total[i] * scale;
				if (w < 0.5) {
					i = this.next[i];
					continue;
				}
				const dim = matched !== null && i > 0 && !matched[i];
				c.fillStyle = dim ? DIM_COLORS[this.type[i]] : BASE_COLORS[this.type[i]];
				c.fillRect((this.start[i] - base) * scale, (this.depth[i] - d0) * rh, Math.max(w, 1), Math.max(rh, 1));
				i++;
			}
			this.mini = off;
			this.miniKey = key;
			this.miniRows = rows;
		}
		if (canvas.width !== cw || canvas.height !== ch) {
			canvas.width = cw;
			canvas.height = ch;
		}
		canvas.style.width = W + 'px';
		canvas.style.height = H + 'px';
		const ctx = canvas.getContext('2d');
		ctx.setTransform(1, 0, 0, 1, 0, 0);
		ctx.drawImage(this.mini, 0, 0);
		// The window: the part of the graph the main canvas shows.
		const content = Math.max(this.contentHeight, 1);
		const ancestors = this.depth[this.focus] * this.rowHeight;
		const y0 = Math.max(0, (this.scrollY - ancestors) / Math.max(content - ancestors, 1)) * ch;
		const y1 = Math.min(1, (this.scrollY + this.viewHeight - ancestors) / Math.max(content - ancestors, 1)) * ch;
		const x0 = this.viewX0 * cw, x1 = this.viewX1 * cw;
		ctx.fillStyle = 'rgba(37, 99, 235, 0.10)';
		ctx.fillRect(x0, y0, x1 - x0, Math.max(y1 - y0, 2 * dpr));
		ctx.strokeStyle = 'rgba(37, 99, 235, 0.9)';
		ctx.lineWidth = Math.max(1, Math.round(dpr));
		ctx.strokeRect(x0 + 0.5, y0 + 0.5, Math.max(x1 - x0 - 1, 1), Math.max(y1 - y0 - 1, 1));
	}

	labelOf(i) {
		if (i === 0) return 'all';
		return String(this.nodes[i].name);
	}

	textWidth(s) {
		let w = this.textWidths.get(s);
		if (w === undefined) {
			w = this.ctx.measureText(s).width;
			if (this.textWidths.size > 50000) this.textWidths.clear();
			this.textWidths.set(s, w);
		}
		return w;
	}

	// The longest prefix of text (with an ellipsis when cut) that fits in
	// avail pixels, or null when not even a few characters do.
	fit(text, avail) {
		const full = this.textWidth(text);
		if (full <= avail) return text;
		let n = Math.floor((text.length * avail) / full);
		while (n >= 2) {
			const s = text.slice(0, n) + '\u2026';
			if (this.ctx.measureText(s).width <= avail) return s;
			n = Math.min(n - 1, Math.floor(n * 0.92));
		}
		return null;
	}

	// --- queries over what was drawn -----------------------------------

	// The node drawn at (x, y) CSS px, or -1.
	hit(x, y) {
		const d = Math.floor((y + this.scrollY) / this.rowHeight);
		if (x < 0 || d < 0) return -1;
		for (let k = 0; k < this.drawnCount; k++) {
			const i = this.drawnIdx[k];
			if (this.depth[i] !== d) continue;
			const x0 = this.drawnX[k];
			if (x >= x0 && x < x0 + this.drawnW[k]) return i;
		}
		return -1;
	}

	// Where node i was drawn ({x, y, width, height} in CSS px), or null.
	box(i) {
		for (let k = 0; k < this.drawnCount; k++) {
			if (this.drawnIdx[k] === i)
				return { x: this.drawnX[k], y: this.depth[i] * this.rowHeight - this.scrollY, width: this.drawnW[k], height: this.rowHeight };
		}
		return null;
	}

	// Every drawn frame as a plain object (built on demand: tests use it).
	drawnFrames() {
		const out = new Array(this.drawnCount);
		for (let k = 0; k < this.drawnCount; k++) {
			const i = this.drawnIdx[k];
			out[k] = {
				name: String(this.nodes[i].name),
				frame_type: this.typeName(i),
				depth: this.depth[i],
				x: this.drawnX[k],
				width: this.drawnW[k],
				total: this.total[i],
				self: this.self[i],
				matched: !!(this.matched && this.matched[i]),
			};
		}
		return out;
	}
}
