// fgtransform.js - the flame graph's display settings, applied to the tree
// the API answers before it is drawn: hiding frame types (from the legend),
// collapsing recursion, collapsing runs of unsymbolized frames, and naming
// unsymbolized frames by their binary only. Each removes frames from the
// stacks they are in: a removed frame's samples of its own (self) go to its
// parent and its children move up, merged with the parent's children of
// the same name, type and binary. Totals stay exact.
//
// transformTree(root, opts) returns a new tree (the input is not changed):
//   opts.hide           Set of frame types to remove (root is never removed)
//   opts.collapseRecursion  a frame called by a frame of the same name and
//                       type is merged into its caller
//   opts.collapseUnsymbolized  a run of unsymbolized frames of one binary
//                       becomes one frame
//   opts.addresses      false: an unsymbolized frame is named `[binary]`
//                       (same-named siblings merge); true: `binary+0x...`
//
// Which frames are unsymbolized, and their binary, the API says in fields
// (`symbolized: false`, `binary`, `address`): names are never parsed.

// The binary of an unsymbolized native frame ("[unknown]" when the API
// knows none), or null.
export function unsymbolizedBinary(node) {
	if (node.symbolized !== false) return null;
	if (node.frame_type && node.frame_type !== 'native') return null;
	return node.binary || '[unknown]';
}

function keyOf(n) {
	return `${n.frame_type || ''}\u0000${n.binary || ''}\u0000${n.name}`;
}

function copyNode(n, name) {
	const out = { name: name === undefined ? n.name : name, frame_type: n.frame_type, self: +n.self || 0, total: +n.total || 0, children: [] };
	for (const k of ['binary', 'file', 'line', 'symbolized']) if (n[k] !== undefined) out[k] = n[k];
	// Named by its binary only, it stands for every address there.
	if (n.address !== undefined && name === undefined) out.address = n.address;
	return out;
}

// Whether transformTree would change anything in the tree (a scan without
// allocation: most answers have nothing to collapse, and are drawn as
// they came).
export function needsTransform(root, opts) {
	const hide = opts.hide || new Set();
	const stack = [root];
	while (stack.length) {
		const n = stack.pop();
		const kids = n.children;
		if (!kids) continue;
		for (let k = 0; k < kids.length; k++) {
			const c = kids[k];
			const type = c.frame_type || 'native';
			if (hide.has(type)) return true;
			if (opts.collapseRecursion && n !== root && type === (n.frame_type || 'native') && c.name === n.name) return true;
			if ((opts.collapseUnsymbolized || !opts.addresses) && unsymbolizedBinary(c) !== null) return true;
			stack.push(c);
		}
	}
	return false;
}

export function transformTree(root, opts) {
	const hide = opts.hide || new Set();
	const out = copyNode(root);
	// Children by key, for all nodes in one map: "<node id>\0<key>".
	const ids = new Map([[out, 0]]);
	const index = new Map();
	// Work items: a source node whose children go under `target`; `shown`
	// is the source frame that target stands for (the collapse rules
	// compare a child with it).
	const work = [{ src: root, target: out, shown: null }];
	while (work.length) {
		const { src, target, shown } = work.pop();
		for (const c of src.children || []) {
			const type = c.frame_type || 'native';
			const bin = unsymbolizedBinary(c);
			const merge =
				hide.has(type) ||
				(opts.collapseRecursion && shown !== null && type === (shown.frame_type || 'native') && String(c.name) === String(shown.name)) ||
				(opts.collapseUnsymbolized && bin !== null && shown !== null && unsymbolizedBinary(shown) === bin);
			if (merge) {
				// Removed: its own samples become target's, its children
				// go under target.
				target.self += +c.self || 0;
				work.push({ src: c, target, shown });
				continue;
			}
			const node = copyNode(c, bin !== null && !opts.addresses ? `[${bin}]` : undefined);
			const k = ids.get(target) + '\u0000' + keyOf(node);
			const twin = index.get(k);
			if (twin) {
				twin.self += node.self;
				twin.total += node.total;
				work.push({ src: c, target: twin, shown: c });
			} else {
				target.children.push(node);
				index.set(k, node);
				ids.set(node, ids.size);
				work.push({ src: c, target: node, shown: c });
			}
		}
	}
	// Children largest first, as the API sends them.
	const stack = [out];
	while (stack.length) {
		const n = stack.pop();
		n.children.sort((a, b) => b.total - a.total);
		for (const c of n.children) stack.push(c);
	}
	return out;
}
