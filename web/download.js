// download.js - saving an answer as a file (downloadFile: the Settings
// view's inventory CSV too), and the flamegraph view's "Download" menu:
// the flamegraph the view shows, saved as a file in one of the server's
// export formats
// (docs/api.md, "Exports"): the same request body the view sent, POSTed
// to .../flamegraph/{format}, its answer saved under the file name the
// server gives (Content-Disposition).
//
// It goes through common.js's request(), as every call of the page does:
// the session cookie, the CSRF header the server asks of cookie sessions,
// and one refresh of an expired session.

import { request } from './common.js';

export const FORMATS = [
	{ value: 'json', label: 'JSON', ext: 'json' },
	{ value: 'pprof', label: 'pprof (.pb.gz)', ext: 'pb.gz' },
	{ value: 'folded', label: 'Folded stacks', ext: 'folded.txt' },
	{ value: 'speedscope', label: 'speedscope', ext: 'speedscope.json' },
];

// The file name in a Content-Disposition value (attachment; filename="x").
function fileName(disposition) {
	const m = /filename="([^"]+)"/.exec(disposition || '');
	return m ? m[1] : '';
}

// Fetches method url (body) and saves its answer as a file, named as the
// server says (Content-Disposition) or fallback. Returns the name; throws
// an Error with the server's message when it answers an error.
export async function downloadFile(method, url, body, fallback) {
	const res = await request(url, { method, body });
	if (!res.ok) {
		let msg = '';
		try {
			msg = (await res.json()).error || '';
		} catch {
			msg = '';
		}
		throw new Error(msg || `HTTP ${res.status} ${res.statusText}`);
	}
	const blob = await res.blob();
	const name = fileName(res.headers.get('Content-Disposition')) || fallback;
	const href = URL.createObjectURL(blob);
	const a = document.createElement('a');
	a.href = href;
	a.download = name;
	a.hidden = true;
	document.body.appendChild(a);
	a.click();
	a.remove();
	setTimeout(() => URL.revokeObjectURL(href), 30000);
	return name;
}

// Fetches the flamegraph export and saves it.
export async function downloadFlamegraph(project, format, body) {
	const f = FORMATS.find(x => x.value === format);
	if (!f) throw new Error(`unknown format ${format}`);
	return downloadFile('POST', `/public/api/v1/project/${encodeURIComponent(project)}/flamegraph/${format}`,
		body, `ember-flamegraph.${f.ext}`);
}

// Makes `select` (a <select> whose first option is the "Download…"
// prompt) the menu: choosing a format downloads with what request()
// returns ({project, body}), then the prompt shows again. report(text)
// says what happened (a file saved, or why not).
export function attachDownload(select, request, report) {
	for (const f of FORMATS) {
		const o = document.createElement('option');
		o.value = f.value;
		o.textContent = f.label;
		select.appendChild(o);
	}
	select.addEventListener('change', async () => {
		const format = select.value;
		select.value = '';
		if (!format) return;
		const { project, body } = request();
		select.disabled = true;
		try {
			const name = await downloadFlamegraph(project, format, body);
			report(`Saved ${name}`);
		} catch (e) {
			report(`Download failed: ${e.message || e}`);
		} finally {
			select.disabled = false;
		}
	});
}
