// session.js - who uses the page: GET /api/v1/auth/me before the page
// loads, the sign-in page, and the user menu of the top bar (the signed-in
// email, Account, Sign out).
//
// A server started with --auth none answers /api/v1/auth/me with kind
// "open": no sign-in page ever shows, and the menu only leads to the
// Account page. With --auth local a page without a session gets 401:
// common.js's request() tries a refresh first, then the sign-in page shows
// (body[data-state=login], the rest of the page hidden). After signing in
// the page loads as it would have (start() runs once), or, when the
// session ran out while the page was in use, loads again from its URL.

import { auth, apiJSON, onSignedOut, request } from './common.js';

const $ = (id) => document.getElementById(id);

let started = false; // whether the page behind the sign-in page has loaded
let onStart = null;

// Loads who is signed in, then calls start() (the page's own loading), or
// shows the sign-in page first. opts.onAccount(): the menu's Account entry.
export async function startSession(start, opts = {}) {
	onStart = start;
	onSignedOut(showLogin);
	initLogin();
	initMenu(opts.onAccount);
	let me = null;
	try {
		me = await apiJSON('GET', '/api/v1/auth/me');
	} catch (e) {
		if (e.status === 401) return showLogin();
		// A server without the endpoint, or one not reachable: the page
		// says what its own requests meet.
		me = null;
	}
	if (me && me.kind !== 'open' && !me.user) return showLogin();
	setMe(me);
	started = true;
	start();
}

function setMe(me) {
	auth.me = me;
	const menu = $('user-menu');
	if (!me) {
		menu.hidden = true;
		return;
	}
	menu.hidden = false;
	const who = me.user ? me.user.email : me.kind === 'open' ? 'Open access' : me.kind;
	$('user-email').textContent = who;
	$('user-avatar').textContent = (me.user ? me.user.email : 'A').slice(0, 1).toUpperCase();
	$('user-popover-who').textContent = me.user
		? `Signed in as ${me.user.email}`
		: 'This server is open (--auth none): no one signs in.';
	$('sign-out').hidden = !me.user;
}

// --- the sign-in page ---------------------------------------------------------

export function showLogin() {
	const box = $('login');
	if (!box.hidden) return;
	auth.me = null;
	closeMenu();
	document.body.classList.add('signed-out');
	box.hidden = false;
	$('login-error').hidden = true;
	$('login-password').value = '';
	document.body.dataset.state = 'login';
	document.title = 'Sign in \u00b7 ember';
	$('login-email').focus();
	showOidc();
}

// With --auth oidc the page offers the identity provider's sign-in too
// (GET /api/v1/auth/config, which answers before anyone signs in).
async function showOidc() {
	try {
		const cfg = await apiJSON('GET', '/api/v1/auth/config');
		$('login-or').hidden = $('login-oidc').hidden = !cfg.oidc;
	} catch (e) {
		$('login-or').hidden = $('login-oidc').hidden = true;
	}
}

function initLogin() {
	const form = $('login-form');
	form.addEventListener('submit', async (ev) => {
		ev.preventDefault();
		const err = $('login-error');
		const button = $('login-submit');
		err.hidden = true;
		document.body.dataset.state = 'loading';
		button.disabled = true;
		button.textContent = 'Signing in\u2026';
		try {
			await apiJSON('POST', '/api/v1/auth/login', {
				email: $('login-email').value.trim(),
				password: $('login-password').value,
			}, undefined, { retry: false });
			const me = await apiJSON('GET', '/api/v1/auth/me');
			$('login-password').value = '';
			if (started) {
				// The session ran out while the page was in use: load
				// it again from its URL, as it was.
				location.reload();
				return;
			}
			$('login').hidden = true;
			document.body.classList.remove('signed-out');
			setMe(me);
			started = true;
			onStart();
		} catch (e) {
			err.textContent = e.status === 0 || !e.status ? `Cannot reach ember-server: ${e.message}` : e.message;
			err.hidden = false;
			document.body.dataset.state = 'login';
			$('login-password').select();
		} finally {
			button.disabled = false;
			button.textContent = 'Sign in';
		}
	});
}

// --- the user menu --------------------------------------------------------------

function closeMenu() {
	$('user-popover').hidden = true;
	$('user-button').setAttribute('aria-expanded', 'false');
}

// Ends the session and shows the sign-in page (the page loads afresh).
export async function signOut() {
	try {
		await request('/api/v1/auth/logout', { method: 'POST', retry: false });
	} catch {
		// The cookies stay then; the page says so by staying signed in.
	}
	location.reload();
}

function initMenu(onAccount) {
	const button = $('user-button');
	const pop = $('user-popover');
	button.addEventListener('click', () => {
		const open = pop.hidden;
		pop.hidden = !open;
		button.setAttribute('aria-expanded', String(open));
	});
	document.addEventListener('click', (ev) => {
		if (!pop.hidden && !ev.target.closest('#user-menu')) closeMenu();
	});
	document.addEventListener('keydown', (ev) => {
		if (ev.key === 'Escape' && !pop.hidden) {
			closeMenu();
			button.focus();
		}
	});
	$('account-link').addEventListener('click', (ev) => {
		if (ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0 || !onAccount) return;
		ev.preventDefault();
		closeMenu();
		onAccount();
	});
	$('sign-out').addEventListener('click', () => {
		closeMenu();
		signOut();
	});
}
