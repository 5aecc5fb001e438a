// view_account.js - the Account page (?view=account&tab=...), reached from
// the user menu: Profile, Service Tokens, Users, Roles & Permissions and
// Audit Log, over the identity API (/public/api/v1/service-tokens, users,
// roles, audit). A tab shows only when GET /api/v1/auth/me lists the
// permission it needs (auth.can); the server refuses the calls anyway.
// Every call goes through common.js's apiJSON (CSRF header, refresh).

import { apiJSON, apiErrorHTML, auth, h, loadStylesheet, messageHTML } from './common.js';
import { signOut } from './session.js';

const TABS = [
	{ id: 'profile', label: 'Profile', perm: null, render: renderProfile },
	{ id: 'tokens', label: 'Service Tokens', perm: 'service:token:read', render: renderTokens },
	{ id: 'users', label: 'Users', perm: 'admin:user:read', render: renderUsers },
	{ id: 'roles', label: 'Roles & Permissions', perm: 'admin:role:read', render: renderRoles },
	{ id: 'audit', label: 'Audit Log', perm: 'admin:audit:read', render: renderAudit },
];

// The scopes a new token may get in one click (the custom choice takes
// patterns).
const SCOPE_PRESETS = [
	{ id: 'agent', label: 'Agent (ingest only)', scopes: ['ingest:**'] },
	{ id: 'read', label: 'Read only', scopes: ['**:read'] },
	{ id: 'custom', label: 'Custom patterns', scopes: null },
];
const EXPIRIES = [
	['7', '7 days'],
	['30', '30 days'],
	['90', '90 days'],
	['365', '1 year'],
	['never', 'Never'],
];
const AUDIT_PAGE = 50;

let root = null;
let ctx = null;
let shownTab = '';
let seq = 0; // bumped when another tab shows: late answers are dropped

// --- small DOM helpers -------------------------------------------------------------

function fmtTime(ms) {
	return ms ? new Date(ms).toLocaleString() : '';
}

// A padlock (built-in roles), drawn: no emoji font needed.
function lockIcon() {
	const ns = 'http://www.w3.org/2000/svg';
	const svg = document.createElementNS(ns, 'svg');
	svg.setAttribute('viewBox', '0 0 16 16');
	svg.setAttribute('width', '12');
	svg.setAttribute('height', '12');
	svg.setAttribute('class', 'lock');
	svg.setAttribute('role', 'img');
	svg.setAttribute('aria-label', 'Built in: locked');
	const title = document.createElementNS(ns, 'title');
	title.textContent = 'Built in: locked';
	const path = document.createElementNS(ns, 'path');
	path.setAttribute('fill', 'currentColor');
	path.setAttribute('fill-rule', 'evenodd');
	path.setAttribute('d', 'M4 7V5a4 4 0 0 1 8 0v2h1v8H3V7h1zm2 0h4V5a2 2 0 0 0-4 0v2z');
	svg.append(title, path);
	return svg;
}

function chips(list, empty) {
	if (!list || !list.length) return h('span', { class: 'muted', text: empty });
	return h('span', { class: 'chips' }, list.map((s) => h('code', { class: 'chip', text: s })));
}

// Project ids as their names (every project when none).
function projectNames(ids, projects) {
	if (!ids || !ids.length) return h('span', { class: 'muted', text: 'All projects' });
	const byId = new Map(projects.map((p) => [p.id, p.name]));
	return h('span', { class: 'chips' }, ids.map((id) => h('span', { class: 'chip', title: id, text: byId.get(id) || id })));
}

// Checkboxes of the projects: none checked means every project.
function projectPicker(projects, checked = [], legend = 'Projects', name = 'projects') {
	const box = h('fieldset', { class: 'acc-projects' }, h('legend', { text: legend }));
	for (const p of projects)
		box.append(h('label', {}, h('input', { type: 'checkbox', name, value: p.id, checked: checked.includes(p.id) }), ` ${p.name}`));
	box.append(h('p', { class: 'muted hint-line', text: 'None checked: every project.' }));
	return box;
}

function checkedValues(form, name) {
	return [...form.querySelectorAll(`input[name="${name}"]:checked`)].map((i) => i.value);
}

// Patterns typed one a line (or separated by commas or spaces).
function patternsOf(text) {
	return text.split(/[\s,]+/).map((s) => s.trim()).filter(Boolean);
}

function formError(form) {
	let p = form.querySelector('.acc-error');
	if (!p) {
		p = h('p', { class: 'acc-error', role: 'alert', hidden: true });
		form.querySelector('.acc-actions').before(p);
	}
	return p;
}

function showFormError(form, e) {
	const p = formError(form);
	p.textContent = e.message || String(e);
	p.hidden = false;
}

// Submitting form runs send (async: checks the fields and calls the API,
// throwing an Error to refuse); a refusal is shown in the form, else slot
// (where the form stands) is emptied and done runs with send's answer.
function onFormSubmit(form, slot, send, done) {
	form.addEventListener('submit', async (ev) => {
		ev.preventDefault();
		let answer;
		try {
			answer = await send();
		} catch (e) {
			return showFormError(form, e);
		}
		slot.replaceChildren();
		done(answer);
	});
}

// A question with two buttons, as a modal dialog: resolves true when the
// user confirms.
function confirmDialog(title, text, okLabel) {
	return new Promise((resolve) => {
		const dlg = h('dialog', { class: 'help acc-confirm' },
			h('h2', { text: title }),
			h('p', { text }),
			h('div', { class: 'acc-actions' },
				h('button', { type: 'button', class: 'danger', 'data-confirm': 'yes', text: okLabel, onclick: () => dlg.close('yes') }),
				h('button', { type: 'button', 'data-confirm': 'no', text: 'Cancel', onclick: () => dlg.close('no') })));
		dlg.addEventListener('close', () => {
			dlg.remove();
			resolve(dlg.returnValue === 'yes');
		});
		document.body.append(dlg);
		dlg.showModal();
	});
}

async function projectsList() {
	try {
		const { projects } = await apiJSON('GET', '/public/api/v1/projects');
		return Array.isArray(projects) ? projects : [];
	} catch {
		return [];
	}
}

// Runs load(), showing its error in the tab's body; ready or error.
async function loading(body, load) {
	const mine = seq;
	ctx.setState('loading');
	try {
		await load(() => mine === seq);
		if (mine === seq) ctx.setState('ready');
	} catch (e) {
		if (mine !== seq || e.name === 'AbortError') return;
		body.replaceChildren();
		body.insertAdjacentHTML('beforeend', apiErrorHTML(e));
		ctx.setState('error');
	}
}

// --- the page -------------------------------------------------------------------------

function visibleTabs() {
	return TABS.filter((t) => !t.perm || auth.can(t.perm));
}

function show(r, c) {
	root = r;
	ctx = c;
	loadStylesheet('view_account.css');
	const tabs = visibleTabs();
	const want = ctx.param('tab');
	const tab = tabs.find((t) => t.id === want) || tabs[0];
	if (tab.id === shownTab && root.querySelector('.acc-body')) {
		ctx.setState('ready');
		return;
	}
	shownTab = tab.id;
	seq++;
	const nav = h('nav', { class: 'acc-tabs', role: 'tablist', 'aria-label': 'Account' },
		tabs.map((t) => h('button', {
			type: 'button', role: 'tab', 'data-tab': t.id, 'aria-selected': String(t.id === tab.id), text: t.label,
			onclick: () => ctx.setParams({ tab: t.id === 'profile' ? null : t.id }, true),
		})));
	const body = h('div', { class: 'acc-body', role: 'tabpanel', 'data-tab': tab.id });
	root.replaceChildren(h('div', { class: 'view-body acc' }, h('h1', { class: 'acc-title', text: 'Account' }), nav, body));
	tab.render(body);
}

function hide() {
	seq++;
	shownTab = '';
}

// --- Profile ---------------------------------------------------------------------------

function renderProfile(body) {
	const me = auth.me || {};
	if (!me.user) {
		body.append(h('div', { class: 'panel' },
			h('h2', { text: 'Open access' }),
			h('p', { text: me.kind === 'open'
				? 'This server is open (--auth none): anyone who reaches it can read and change everything, and no one signs in. Start ember-server with --auth local to require sign-in.'
				: 'Not signed in as a user.' })));
	} else {
		const u = me.user;
		const name = [u.given_name, u.family_name].filter(Boolean).join(' ');
		body.append(h('div', { class: 'panel' },
			h('h2', { text: 'Profile' }),
			h('dl', { class: 'acc-dl' },
				h('dt', { text: 'Email' }), h('dd', { class: 'acc-email', text: u.email }),
				name && [h('dt', { text: 'Name' }), h('dd', { text: name })],
				h('dt', { text: 'User id' }), h('dd', {}, h('code', { text: u.id })),
				h('dt', { text: 'Member since' }), h('dd', { text: fmtTime(u.created_at) })),
			h('div', { class: 'acc-actions' }, h('button', { type: 'button', id: 'profile-sign-out', text: 'Sign out', onclick: signOut }))));
	}
	body.append(h('div', { class: 'panel' },
		h('h2', { text: 'Your permissions' }),
		h('p', { class: 'muted', text: 'What you may do outside any project (roles bound to projects add more there).' }),
		chips(me.permissions, 'None')));
	ctx.setState('ready');
}

// --- Service tokens --------------------------------------------------------------------

function renderTokens(body) {
	const secretBox = h('div', { class: 'acc-secret-slot' });
	const formSlot = h('div');
	const list = h('div', { class: 'panel' });
	const bar = h('div', { class: 'acc-bar' },
		h('p', { class: 'muted', text: 'Service tokens let agents, the CLI and scripts call ember: send one as "Authorization: Bearer TOKEN".' }),
		auth.can('service:token:create') && h('button', { type: 'button', id: 'token-new', class: 'primary', text: 'Create Token', onclick: () => openForm() }));
	body.append(bar, secretBox, formSlot, list);
	let projects = [];

	const reload = () => loading(list, async (live) => {
		const [{ tokens }, ps] = await Promise.all([apiJSON('GET', '/public/api/v1/service-tokens'), projectsList()]);
		if (!live()) return;
		projects = ps;
		list.replaceChildren(h('h2', { text: 'Service tokens' }));
		if (!tokens.length) {
			list.append(h('p', { class: 'muted acc-empty', text: 'No live tokens.' }));
			return;
		}
		const table = h('table', { class: 'data-table acc-table', id: 'tokens-table' },
			h('thead', {}, h('tr', {}, ['Name', 'Type', 'Scopes', 'Projects', 'Created', 'Expires', 'Last used', ''].map((t) => h('th', { text: t })))));
		const tb = h('tbody');
		for (const t of tokens) {
			tb.append(h('tr', { 'data-id': t.id },
				h('td', { class: 'acc-name', text: t.name || '(unnamed)' }),
				h('td', { text: t.type }),
				h('td', {}, chips(t.scopes, 'As its owner')),
				h('td', {}, projectNames(t.project_ids, projects)),
				h('td', { text: fmtTime(t.created_at) }),
				h('td', { text: t.expires_at ? fmtTime(t.expires_at) : 'Never' }),
				h('td', { text: t.last_used_at ? fmtTime(t.last_used_at) : 'Never' }),
				h('td', { class: 'acc-row-actions' }, auth.can('service:token:revoke') &&
					h('button', { type: 'button', class: 'danger token-revoke', text: 'Revoke', onclick: () => revoke(t) }))));
		}
		table.append(tb);
		list.append(table);
	});

	async function revoke(t) {
		const ok = await confirmDialog('Revoke token', `Revoke "${t.name}"? Every agent or script that uses it is refused from its next request. This cannot be undone.`, 'Revoke');
		if (!ok) return;
		try {
			await apiJSON('DELETE', `/public/api/v1/service-tokens/${encodeURIComponent(t.id)}`);
		} catch (e) {
			list.insertAdjacentHTML('afterbegin', apiErrorHTML(e));
			return;
		}
		reload();
	}

	async function openForm() {
		if (formSlot.firstChild) return;
		if (!projects.length) projects = await projectsList();
		const custom = h('textarea', { name: 'patterns', rows: '3', spellcheck: 'false', placeholder: 'one pattern a line, e.g. project:read', disabled: true });
		const form = h('form', { class: 'panel acc-form', id: 'token-form' },
			h('h2', { text: 'Create Token' }),
			h('label', { class: 'acc-field' }, 'Name', h('input', { name: 'name', required: true, maxlength: '200', placeholder: 'e.g. Production profiler - server01' })),
			h('fieldset', { class: 'acc-scopes' }, h('legend', { text: 'Scopes' }),
				SCOPE_PRESETS.map((p, i) => h('label', {},
					h('input', { type: 'radio', name: 'preset', value: p.id, checked: i === 0,
						onchange: () => { custom.disabled = p.id !== 'custom'; if (!custom.disabled) custom.focus(); } }),
					` ${p.label}`, p.scopes && h('code', { class: 'chip', text: p.scopes.join(' ') }))),
				custom,
				h('p', { class: 'muted hint-line', text: 'A token never holds more than its owner: its scopes narrow what you may do.' })),
			projectPicker(projects),
			h('label', { class: 'acc-field' }, 'Expires',
				h('select', { name: 'expiry' }, EXPIRIES.map(([v, t]) => h('option', { value: v, text: t, selected: v === '90' })))),
			h('div', { class: 'acc-actions' },
				h('button', { type: 'submit', class: 'primary', text: 'Create Token' }),
				h('button', { type: 'button', text: 'Cancel', onclick: () => formSlot.replaceChildren() })));
		onFormSubmit(form, formSlot, () => {
			const preset = SCOPE_PRESETS.find((p) => p.id === form.elements.preset.value) || SCOPE_PRESETS[0];
			const scopes = preset.scopes || patternsOf(custom.value);
			if (!scopes.length) throw new Error('Enter at least one permission pattern.');
			const exp = form.elements.expiry.value;
			return apiJSON('POST', '/public/api/v1/service-tokens', {
				name: form.elements.name.value.trim(),
				scopes,
				project_ids: checkedValues(form, 'projects'),
				expires_at: exp === 'never' ? null : Date.now() + Number(exp) * 86400000,
			});
		}, (made) => {
			showSecret(made);
			reload();
		});
		formSlot.append(form);
		form.elements.name.focus();
	}

	// The secret, once: it is not kept anywhere but this box.
	function showSecret(made) {
		const input = h('input', { id: 'token-secret', class: 'acc-secret', readonly: true, spellcheck: 'false', value: made.token });
		const note = h('span', { class: 'muted acc-copied', 'aria-live': 'polite' });
		secretBox.replaceChildren(h('div', { class: 'panel acc-secret-box', role: 'alert' },
			h('h2', { text: `Token "${made.name}" created` }),
			h('p', { class: 'acc-warning', text: 'Copy this token now: it is shown only once. ember keeps only its hash and cannot show it again.' }),
			h('div', { class: 'acc-secret-row' }, input,
				h('button', { type: 'button', id: 'token-copy', text: 'Copy', onclick: async () => {
					input.select();
					try {
						await navigator.clipboard.writeText(made.token);
						note.textContent = 'Copied.';
					} catch {
						note.textContent = document.execCommand('copy') ? 'Copied.' : 'Select it and copy it by hand.';
					}
				} }), note),
			h('div', { class: 'acc-actions' }, h('button', { type: 'button', id: 'token-done', text: 'Done', onclick: () => secretBox.replaceChildren() }))));
		input.focus();
		input.select();
	}

	reload();
}

// --- Users ------------------------------------------------------------------------------

function renderUsers(body) {
	const formSlot = h('div');
	const editSlot = h('div');
	const list = h('div', { class: 'panel' });
	body.append(h('div', { class: 'acc-bar' },
		h('p', { class: 'muted', text: 'People who sign in, and their roles.' }),
		auth.can('admin:user:create') && h('button', { type: 'button', id: 'user-new', class: 'primary', text: 'Create User', onclick: () => openForm() })),
	formSlot, editSlot, list);
	let roles = [];

	const reload = () => loading(list, async (live) => {
		const [{ users }, r] = await Promise.all([
			apiJSON('GET', '/public/api/v1/users?page_size=100'),
			auth.can('admin:role:read') ? apiJSON('GET', '/public/api/v1/roles').then((x) => x.roles) : Promise.resolve([]),
		]);
		if (!live()) return;
		roles = r;
		const canEdit = auth.can('admin:role:assignment:set') && roles.length > 0;
		const table = h('table', { class: 'data-table acc-table', id: 'users-table' },
			h('thead', {}, h('tr', {}, ['Email', 'Name', 'Roles', 'Created', ''].map((t) => h('th', { text: t })))));
		const tb = h('tbody');
		for (const u of users) {
			tb.append(h('tr', { 'data-id': u.id, 'data-email': u.email },
				h('td', { class: 'acc-name', text: u.email }),
				h('td', { text: [u.given_name, u.family_name].filter(Boolean).join(' ') }),
				h('td', { class: 'user-roles' }, chips(u.roles, 'No roles')),
				h('td', { text: fmtTime(u.created_at) }),
				h('td', { class: 'acc-row-actions' }, canEdit && h('button', { type: 'button', class: 'user-edit-roles', text: 'Edit roles', onclick: () => editRoles(u) }))));
		}
		table.append(tb);
		list.replaceChildren(h('h2', { text: 'Users' }), table);
	});

	function openForm() {
		if (formSlot.firstChild) return;
		const form = h('form', { class: 'panel acc-form', id: 'user-form' },
			h('h2', { text: 'Create User' }),
			h('label', { class: 'acc-field' }, 'Email', h('input', { name: 'email', type: 'email', required: true, autocomplete: 'off' })),
			h('label', { class: 'acc-field' }, 'Password', h('input', { name: 'password', type: 'password', required: true, autocomplete: 'new-password' })),
			h('label', { class: 'acc-field' }, 'Given name', h('input', { name: 'given_name' })),
			h('label', { class: 'acc-field' }, 'Family name', h('input', { name: 'family_name' })),
			h('p', { class: 'muted hint-line', text: 'A new user starts with the Default Project Viewer role; edit its roles in the list.' }),
			h('div', { class: 'acc-actions' },
				h('button', { type: 'submit', class: 'primary', text: 'Create User' }),
				h('button', { type: 'button', text: 'Cancel', onclick: () => formSlot.replaceChildren() })));
		onFormSubmit(form, formSlot, () => {
			const f = form.elements;
			return apiJSON('POST', '/public/api/v1/users', {
				email: f.email.value.trim(), password: f.password.value,
				given_name: f.given_name.value.trim(), family_name: f.family_name.value.trim(),
			});
		}, reload);
		formSlot.append(form);
		form.elements.email.focus();
	}

	function editRoles(u) {
		const have = new Set(u.roles || []);
		const form = h('form', { class: 'panel acc-form', id: 'roles-form', 'data-user': u.email },
			h('h2', { text: `Roles of ${u.email}` }),
			h('fieldset', { class: 'acc-role-boxes' }, h('legend', { text: 'Roles' }),
				roles.map((r) => h('label', {}, h('input', { type: 'checkbox', name: 'role', value: r.name, checked: have.has(r.name) }), ` ${r.name}`,
					r.project_ids.length ? h('span', { class: 'muted', text: ` (${r.project_ids.length} project${r.project_ids.length === 1 ? '' : 's'})` }) : null))),
			h('p', { class: 'muted hint-line', text: 'None checked revokes every role.' }),
			h('div', { class: 'acc-actions' },
				h('button', { type: 'submit', class: 'primary', text: 'Save' }),
				h('button', { type: 'button', text: 'Cancel', onclick: () => editSlot.replaceChildren() })));
		onFormSubmit(form, editSlot,
			() => apiJSON('PUT', `/public/api/v1/users/${encodeURIComponent(u.id)}/roles`, { roles: checkedValues(form, 'role') }),
			reload);
		editSlot.replaceChildren(form);
		form.querySelector('input')?.focus();
	}

	reload();
}

// --- Roles & permissions ---------------------------------------------------------------

function renderRoles(body) {
	const formSlot = h('div');
	const list = h('div', { class: 'panel' });
	body.append(h('div', { class: 'acc-bar' },
		h('p', { class: 'muted', text: 'A role grants permission patterns (resource:sub:action; * one level, ** any), in every project or only in its projects. Built-in roles are locked.' }),
		auth.can('admin:role:create') && h('button', { type: 'button', id: 'role-new', class: 'primary', text: 'Add Role', onclick: () => openForm(null) })),
	formSlot, list);
	let projects = [];

	const reload = () => loading(list, async (live) => {
		const [{ roles }, ps] = await Promise.all([apiJSON('GET', '/public/api/v1/roles'), projectsList()]);
		if (!live()) return;
		projects = ps;
		const table = h('table', { class: 'data-table acc-table', id: 'roles-table' },
			h('thead', {}, h('tr', {}, ['Role', 'Permissions', 'Project access', 'Users', ''].map((t) => h('th', { class: t === 'Users' ? 'num' : null, text: t })))));
		const tb = h('tbody');
		for (const r of roles) {
			tb.append(h('tr', { 'data-id': r.id, 'data-name': r.name },
				h('td', { class: 'acc-name' }, r.is_locked && lockIcon(), r.name),
				h('td', {}, chips(r.patterns, 'None')),
				h('td', {}, projectNames(r.project_ids, projects)),
				h('td', { class: 'num', text: String(r.users) }),
				h('td', { class: 'acc-row-actions' }, !r.is_locked && [
					auth.can('admin:role:update') && h('button', { type: 'button', class: 'role-edit', text: 'Edit', onclick: () => openForm(r) }),
					auth.can('admin:role:delete') && h('button', { type: 'button', class: 'danger role-delete', text: 'Delete', onclick: () => remove(r) }),
				])));
		}
		table.append(tb);
		list.replaceChildren(h('h2', { text: 'Roles' }), table);
	});

	async function remove(r) {
		if (!(await confirmDialog('Delete role', `Delete the role "${r.name}"? Its ${r.users} user(s) lose what it grants.`, 'Delete'))) return;
		try {
			await apiJSON('DELETE', `/public/api/v1/roles/${encodeURIComponent(r.id)}`);
		} catch (e) {
			list.insertAdjacentHTML('afterbegin', apiErrorHTML(e));
			return;
		}
		reload();
	}

	async function openForm(role) {
		if (!projects.length) projects = await projectsList();
		const form = h('form', { class: 'panel acc-form', id: 'role-form' },
			h('h2', { text: role ? `Edit role ${role.name}` : 'Add Role' }),
			h('label', { class: 'acc-field' }, 'Name', h('input', { name: 'name', required: true, value: role ? role.name : '' })),
			h('label', { class: 'acc-field acc-field-top' }, 'Permissions',
				h('textarea', { name: 'patterns', rows: '4', spellcheck: 'false', placeholder: 'one pattern a line, e.g. project:read or service:token:*', value: role ? role.patterns.join('\n') : '' })),
			projectPicker(projects, role ? role.project_ids : [], 'Project access'),
			h('div', { class: 'acc-actions' },
				h('button', { type: 'submit', class: 'primary', text: role ? 'Save' : 'Add Role' }),
				h('button', { type: 'button', text: 'Cancel', onclick: () => formSlot.replaceChildren() })));
		onFormSubmit(form, formSlot, () => {
			const body = { name: form.elements.name.value.trim(), patterns: patternsOf(form.elements.patterns.value), project_ids: checkedValues(form, 'projects') };
			return role ? apiJSON('PUT', `/public/api/v1/roles/${encodeURIComponent(role.id)}`, body)
				: apiJSON('POST', '/public/api/v1/roles', body);
		}, reload);
		formSlot.replaceChildren(form);
		form.elements.name.focus();
	}

	reload();
}

// --- Audit log ---------------------------------------------------------------------------

function renderAudit(body) {
	const panel = h('div', { class: 'panel' }, h('h2', { text: 'Audit log' }));
	const tb = h('tbody');
	const table = h('table', { class: 'data-table acc-table', id: 'audit-table' },
		h('thead', {}, h('tr', {}, ['Time', 'Actor', 'Origin', 'Action', 'Target', 'Outcome', 'Detail'].map((t) => h('th', { text: t })))), tb);
	const more = h('button', { type: 'button', id: 'audit-more', text: 'Load more', hidden: true, onclick: () => page() });
	panel.append(h('p', { class: 'muted', text: 'Sign-ins, user, role and token changes, and every refused request, newest first.' }), table, h('div', { class: 'acc-actions' }, more));
	body.append(panel);
	let before = 0;
	let emails = new Map(); // user id -> email, when the caller may list users

	const page = () => loading(panel, async (live) => {
		more.disabled = true;
		if (!before && auth.can('admin:user:read')) {
			try {
				const { users } = await apiJSON('GET', '/public/api/v1/users?page_size=100');
				emails = new Map(users.map((u) => [u.id, u.email]));
			} catch {
				emails = new Map();
			}
		}
		const q = new URLSearchParams({ limit: String(AUDIT_PAGE) });
		if (before) q.set('before', String(before));
		const { entries } = await apiJSON('GET', `/public/api/v1/audit?${q}`);
		if (!live()) return;
		for (const e of entries) {
			tb.append(h('tr', { 'data-id': String(e.id), 'data-action': e.action, class: `outcome-${e.outcome}` },
				h('td', { text: fmtTime(e.time) }),
				h('td', { title: e.actor, text: emails.get(e.actor) || e.actor }),
				h('td', { text: e.origin }),
				h('td', {}, h('code', { text: e.action })),
				h('td', { class: 'acc-target', title: e.target, text: emails.get(e.target) || e.target }),
				h('td', { class: 'acc-outcome', text: e.outcome }),
				h('td', { text: e.detail })));
		}
		if (entries.length) before = entries[entries.length - 1].id;
		more.hidden = entries.length < AUDIT_PAGE;
		more.disabled = false;
		if (!tb.rows.length) table.outerHTML = messageHTML('empty', 'No entries.');
	});
	page();
}

export default { id: 'account', title: 'Account', show, hide };
