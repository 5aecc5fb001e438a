// view_assistant.js - the AI assistant (?view=assistant, docs/assistant.md):
// a chat with the model the server is configured with (--llm-provider),
// which answers with ember's own MCP tools. POST
// /public/api/v1/project/{p}/assistant sends the whole conversation; the
// answer and every tool call it made (arguments and result, folded) are
// shown. When the server has no LLM (GET /public/api/v1/assistant/config),
// the page says how to configure one. openPanel() puts the same chat in a
// panel beside the flamegraph ("Explain this": the selected frame's
// context goes with the first question).

import { apiJSON, apiErrorHTML, escapeHTML, loadStylesheet, messageHTML } from './common.js';

const SUGGESTED = [
	'Where is most of the CPU time going?',
	'Which functions should I optimize first, and what would it save?',
	'Is any workload GPU-bound, or waiting on the CPU?',
];

let config = null;

// Whether the server has an LLM (cached for the page's life).
export async function assistantConfig() {
	if (!config) config = apiJSON('GET', '/public/api/v1/assistant/config').catch(() => ({ enabled: false }));
	return config;
}

function stepHTML(s) {
	return `<details class="asst-step${s.is_error ? ' bad' : ''}" data-tool="${escapeHTML(s.tool)}">
<summary>Tool <code>${escapeHTML(s.tool)}</code>${s.is_error ? ' (error)' : ''}</summary>
<div class="asst-args"><b>Arguments</b><pre>${escapeHTML(JSON.stringify(s.arguments, null, 1))}</pre></div>
<div class="asst-result"><b>Result</b><pre>${escapeHTML(s.result)}</pre></div>
</details>`;
}

function messageBlock(role, html, extra = '') {
	return `<div class="asst-msg asst-${role}">${extra}<div class="asst-text">${html}</div></div>`;
}

// A chat in el for project; context (optional) goes with every request.
function chat(el, project, context, first) {
	const msgs = [];
	el.innerHTML = `<div class="asst-log" aria-live="polite"></div>
<div class="asst-suggest">${SUGGESTED.map((s) => `<button type="button" class="asst-chip">${escapeHTML(s)}</button>`).join('')}</div>
<form class="asst-form"><textarea name="q" rows="3" placeholder="Ask about this project's profiles\u2026" aria-label="Question"></textarea>
<div class="asst-actions"><button type="submit" class="primary">Send</button><button type="button" class="asst-new">New chat</button><span class="asst-status" role="status"></span></div></form>`;
	const log = el.querySelector('.asst-log');
	const form = el.querySelector('form');
	const status = el.querySelector('.asst-status');
	if (context) log.insertAdjacentHTML('beforeend', `<div class="asst-context"><b>Context</b><pre>${escapeHTML(context)}</pre></div>`);
	async function send(text) {
		if (!text.trim()) return;
		msgs.push({ role: 'user', content: text });
		log.insertAdjacentHTML('beforeend', messageBlock('user', escapeHTML(text)));
		form.elements.q.value = '';
		status.textContent = 'Thinking\u2026';
		el.dataset.state = 'loading';
		try {
			const d = await apiJSON('POST', `/public/api/v1/project/${encodeURIComponent(project)}/assistant`, { messages: msgs, context: context || null });
			msgs.push({ role: 'assistant', content: d.answer || '' });
			const stopped = d.stopped === 'done' ? '' : `<p class="asst-stopped">Stopped: ${escapeHTML(d.stopped === 'max_steps' ? 'the step limit' : 'the token budget')}.</p>`;
			log.insertAdjacentHTML('beforeend', messageBlock('assistant', escapeHTML(d.answer || '(no answer)').replace(/\n/g, '<br>') + stopped, d.steps.map(stepHTML).join('')));
			status.textContent = `${d.usage.model_calls} model call${d.usage.model_calls === 1 ? '' : 's'}, ${d.steps.length} tool call${d.steps.length === 1 ? '' : 's'}, ${d.usage.input_tokens + d.usage.output_tokens} tokens (${escapeHTML(d.model)})`;
			el.dataset.state = 'ready';
		} catch (e) {
			msgs.pop();
			log.insertAdjacentHTML('beforeend', `<div class="asst-msg asst-error">${apiErrorHTML(e)}</div>`);
			status.textContent = '';
			el.dataset.state = 'error';
		}
		log.scrollTop = log.scrollHeight;
	}
	form.addEventListener('submit', (ev) => {
		ev.preventDefault();
		send(form.elements.q.value);
	});
	form.elements.q.addEventListener('keydown', (ev) => {
		if (ev.key === 'Enter' && !ev.shiftKey) {
			ev.preventDefault();
			send(form.elements.q.value);
		}
	});
	el.querySelector('.asst-suggest').addEventListener('click', (ev) => {
		const b = ev.target.closest('.asst-chip');
		if (b) send(b.textContent);
	});
	el.querySelector('.asst-new').addEventListener('click', () => chat(el, project, context));
	if (first) send(first);
}

function notConfiguredHTML() {
	return messageHTML('info', 'The AI assistant needs an LLM: start ember-server with <code>--llm-provider</code> (anthropic, openai, gemini or openai-compatible), <code>--llm-model-examine</code> and the key in <code>--llm-api-key-file</code> or its environment variable. See docs/assistant.md.');
}

// The flamegraph's panel: a chat about context, first asking first.
export async function openPanel(panel, project, context, first) {
	loadStylesheet('view_assistant.css');
	panel.hidden = false;
	panel.classList.add('asst-panel');
	panel.innerHTML = `<div class="asst-head"><h2>AI assistant</h2><button type="button" class="asst-close" aria-label="Close the assistant">\u00d7</button></div><div class="asst-chat"></div>`;
	panel.querySelector('.asst-close').addEventListener('click', () => {
		panel.hidden = true;
		panel.replaceChildren();
	});
	const c = await assistantConfig();
	const body = panel.querySelector('.asst-chat');
	if (!c.enabled) {
		body.innerHTML = notConfiguredHTML();
		return;
	}
	chat(body, project, context, first);
}

let root = null;
let shownProject = null;

async function show(el, ctx) {
	loadStylesheet('view_assistant.css');
	root = el;
	if (shownProject === ctx.project && root.querySelector('.assistant')) {
		ctx.setState('ready');
		return;
	}
	shownProject = ctx.project;
	root.innerHTML = `<div class="view-body assistant"><h1>AI assistant</h1>
<p class="asst-note">Ask about this project's profiles. The assistant reads them with ember's MCP tools, as you: each tool call and its result are shown under the answer.</p>
<div class="asst-chat panel">${messageHTML('info', 'Loading\u2026')}</div></div>`;
	const c = await assistantConfig();
	const body = root.querySelector('.asst-chat');
	if (!c.enabled) {
		body.innerHTML = notConfiguredHTML();
		ctx.setState('empty');
		return;
	}
	root.querySelector('.asst-note').insertAdjacentHTML('beforeend', ` Model: <code>${escapeHTML(c.llm.models.examine)}</code> (${escapeHTML(c.llm.provider)}).`);
	chat(body, ctx.project, null);
	ctx.setState('ready');
}

function hide() {}

export default { id: 'assistant', title: 'AI assistant', show, hide };
