/* Unit tests: protocol version 2, the agent's session encoder
 * (agent/session.c) against the server's sessions (server/ingest/sessions.c):
 * what is stored equals what was sampled, definitions are sent once,
 * duplicates, lost batches, restarts, failed stores, hostile input and the
 * memory bounds. */
#include "testutil.h"
#include <jansson.h>
#include "storeutil.h"

#include "agent/batch.h"
#include "agent/session.h"
#include "server/ingest/codecs.h"
#include "server/ingest/batch_decode.h"
#include "server/store/part.h"
#include "server/query/scan.h"
#include "server/ingest/sessions.h"
#include "server/query/timeline.h"
#include "server/store/gpuspans.h"
#include "server/store/store.h"
#include "strtab.h"
#include "util.h"

#define T0 1700000000000LL

/* A batch of n samples over a few stacks: stack k is main -> f<k % 7> ->
 * g<k> -> an address in libx.so, in process "app<k % 3>"; salt changes
 * the leaf names. With reverse set the same content is added last to
 * first after an unrelated string, so every batch id differs; file is
 * libx.so's registry index (a different one is a different file); depth
 * 3 leaves the address out; addr is the first leaf address (0x1000). */
static struct batch *make_batch(int n, int salt, bool reverse, uint32_t file, int depth, uint64_t addr)
{
	struct batch *b = xmalloc(sizeof(*b));
	batch_init(b);
	struct file_id fid;
	memset(fid.b, 0x22 + (int)file, sizeof(fid.b));
	if (reverse)
		batch_string(b, "unrelated", 9);
	for (int i = 0; i < n; i++) {
		int k = reverse ? n - 1 - i : i;
		char f1[32], f2[32], exe[16];
		snprintf(f1, sizeof(f1), "f%d", k % 7);
		snprintf(f2, sizeof(f2), "g%d_%d", k, salt);
		snprintf(exe, sizeof(exe), "app%d", k % 3);
		struct bframe fr[4] = {
			{ .type = FT_NATIVE, .name = batch_string(b, "main", 4), .binary = batch_string(b, exe, strlen(exe)) },
			{ .type = FT_NATIVE, .name = batch_string(b, f1, strlen(f1)), .binary = batch_string(b, exe, strlen(exe)) },
			{ .type = FT_NATIVE, .name = batch_string(b, f2, strlen(f2)), .binary = batch_string(b, exe, strlen(exe)) },
			{ .type = FT_NATIVE, .address = addr + (uint64_t)k },
		};
		fr[3].file = batch_file(b, file, &fid, "libx.so", (const uint8_t *)"\1\2\3", 3, NULL, 0);
		uint32_t ids[4];
		for (int j = 0; j < depth; j++)
			ids[j] = batch_frame(b, &fr[j]);
		uint32_t kv[] = {
			batch_string(b, "process.executable.name", 23), batch_string(b, exe, strlen(exe)),
			batch_string(b, "host.name", 9), batch_string(b, "h1", 2),
		};
		batch_add(b, batch_stack(b, ids, (size_t)depth), batch_resource(b, kv, 4), EK_ON_CPU,
			  (uint64_t)(k + 1));
	}
	return b;
}

static struct batch *make(int n, int salt)
{
	return make_batch(n, salt, false, 0, 4, 0x1000);
}

static void free_batch(struct batch *b)
{
	batch_free(b);
	free(b);
}

/* One line per sample: frames, attributes, kind and value, sorted. */
static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_pair(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Attribute pairs sorted by key (the store keeps them canonical). */
static void put_labels(struct buf *l, const char **kv, size_t np)
{
	qsort(kv, np, 2 * sizeof(char *), cmp_pair);
	for (size_t j = 0; j < 2 * np; j++)
		buf_printf(l, "|%s", kv[j]);
}

static char *join_sorted(char **lines, size_t n)
{
	qsort(lines, n, sizeof(char *), cmp_str);
	struct buf all = { 0 };
	for (size_t i = 0; i < n; i++) {
		buf_printf(&all, "%s\n", lines[i]);
		free(lines[i]);
	}
	free(lines);
	return buf_steal(&all, NULL);
}

static char *canon(const Ember__Ingest__V1__Batch *b)
{
	char **lines = xcalloc(b->n_samples + 1, sizeof(char *));
	for (size_t i = 0; i < b->n_samples; i++) {
		const Ember__Ingest__V1__Sample *s = b->samples[i];
		struct buf l = { 0 };
		const Ember__Ingest__V1__Stack *st = b->stacks[s->stack];
		for (size_t j = 0; j < st->n_frames; j++) {
			const Ember__Ingest__V1__Frame *f = b->frames[st->frames[j]];
			buf_printf(&l, "%d:%s:%s:%llx", f->type, b->strings[f->name],
				   b->strings[f->binary], (unsigned long long)f->address);
			if (f->file) {
				const Ember__Ingest__V1__File *fl = b->files[f->file - 1];
				buf_printf(&l, ":%s/%02x/%zu", b->strings[fl->name], fl->file_id.data[0],
					   fl->build_id.len);
			}
			buf_putc(&l, ';');
		}
		const Ember__Ingest__V1__Resource *r = b->resources[s->resource];
		const char *kv[256];
		size_t np = r->n_attributes / 2;
		for (size_t j = 0; j < 2 * np; j++)
			kv[j] = b->strings[r->attributes[j]];
		put_labels(&l, kv, np);
		buf_printf(&l, " %d %llu", s->kind, (unsigned long long)s->value);
		lines[i] = buf_steal(&l, NULL);
	}
	return join_sorted(lines, b->n_samples);
}

/* The same form of the rows a part gained since *seen (per series row
 * counts, updated): what the store indexed for one batch. */
static char *canon_part(const struct part *p, size_t **seen, size_t *nseen)
{
	size_t n = 0;
	for (size_t i = 0; i < p->nseries; i++)
		n += p->series[i].nrows - (i < *nseen ? (*seen)[i] : 0);
	char **lines = xcalloc(n + 1, sizeof(char *));
	size_t k = 0;
	for (size_t i = 0; i < p->nseries; i++) {
		const struct part_series *se = &p->series[i];
		for (size_t r = i < *nseen ? (*seen)[i] : 0; r < se->nrows; r++) {
			struct buf l = { 0 };
			uint32_t frames[64];
			size_t depth = part_stack(p, se->rows[r].stack, frames, 64);
			for (size_t j = 0; j < depth && j < 64; j++) {
				const struct store_frame *f = &p->frames[frames[j]];
				buf_printf(&l, "%d:%s:%s:%llx", f->type, strtab_get(&p->sstr, f->name),
					   strtab_get(&p->sstr, f->binary), (unsigned long long)f->address);
				if (f->file) {
					const struct store_file *fl = &p->files[f->file - 1];
					buf_printf(&l, ":%s/%02x/%u", strtab_get(&p->sstr, fl->name),
						   fl->id.b[0], fl->build_id_len);
				}
				buf_putc(&l, ';');
			}
			const uint32_t *kv;
			size_t np = part_label_pairs(p, se->labels, &kv);
			const char *names[256];
			for (size_t j = 0; j < 2 * np && j < 256; j++)
				names[j] = strtab_get(&p->lstr, kv[j]);
			put_labels(&l, names, np);
			buf_printf(&l, " %d %llu", se->kind, (unsigned long long)se->rows[r].value);
			lines[k++] = buf_steal(&l, NULL);
		}
	}
	*seen = xrealloc(*seen, (p->nseries + 1) * sizeof(size_t));
	for (size_t i = 0; i < p->nseries; i++)
		(*seen)[i] = p->series[i].nrows;
	*nseen = p->nseries;
	return join_sorted(lines, k);
}

/* The canonical form of an agent batch, through the version 1 encoding. */
static char *canon_agent(const struct batch *b)
{
	struct batch_meta meta = { "agent", 1, "default", T0, T0 + 5000, 19, 0 };
	struct buf z = { 0 }, err = { 0 };
	assert_int_equal(batch_encode(b, &meta, &z), 0);
	Ember__Ingest__V1__Batch *d = batch_decode(z.data, z.len, &err);
	assert_non_null(d);
	char *c = canon(d);
	batch_decode_free(d);
	buf_free(&z);
	buf_free(&err);
	return c;
}

/* The store: indexes each batch into a part as the store's head would,
 * replays its log record into another part as store_open would, checks
 * that both gained the same rows, and answers rc. With rc != 0 the record
 * is made and then cut off (failed()), as after a failed log write. */
#define PROJECT_ID "0b7a8f6e-1c2d-4e3f-8a9b-0c1d2e3f4a5b"

struct sink {
	int rc;
	int calls;
	char *last;
	uint64_t seq;
	char agent[64];
	uint64_t gen;     /* the store's log generation (and head) */
	struct part live, replayed;
	bool ready;
	struct session_replay *replay;
	size_t *seen_live, *seen_replayed, nseen_live, nseen_replayed;
	struct buf log;   /* this generation's records: u32 length, bytes */
};

static void sink_init(struct sink *k)
{
	if (k->ready)
		return;
	part_init(&k->live, 1);
	part_init(&k->replayed, 1);
	k->replay = session_replay_new();
	k->gen = k->gen ? k->gen : 1;
	k->ready = true;
}

static void sink_free(struct sink *k)
{
	if (!k->ready)
		return;
	part_free(&k->live);
	part_free(&k->replayed);
	session_replay_free(k->replay);
	buf_free(&k->log);
	free_all(k->seen_live, k->seen_replayed, k->last);
	memset(k, 0, sizeof(*k));
}

/* The store sealed its head: a new log file and a new head part, which
 * starts with the old one's dictionaries (fresh: without them). */
static void sink_seal(struct sink *k, bool fresh)
{
	sink_init(k);
	k->gen++;
	struct part old = k->live;
	part_init(&k->live, 1);
	if (!fresh)
		part_copy_dictionaries(&k->live, &old);
	part_free(&old);
	free(k->seen_live);
	k->seen_live = NULL;
	k->nseen_live = 0;
	buf_reset(&k->log);
}

static int sink_store(void *ctx, const char *project_name, struct store_entry *e)
{
	struct sink *k = ctx;
	sink_init(k);
	k->calls++;
	assert_string_equal(project_name, "default");
	e->project = PROJECT_ID;
	struct buf head = { 0 }, err = { 0 };
	const void *body = NULL;
	size_t blen = 0;
	assert_int_equal(e->record_type, STORE_RECORD_SESSION);
	assert_int_equal(e->record(e->ctx, k->gen, &head, &body, &blen, &err), 0);
	if (k->rc != STORE_OK) {
		e->failed(e->ctx);
		buf_free(&head);
		buf_free(&err);
		return k->rc;
	}
	struct store_head live = { &k->live }, replayed = { &k->replayed };
	assert_int_equal(e->index(e->ctx, &live, k->gen), 0);
	free(k->last);
	k->last = canon_part(&k->live, &k->seen_live, &k->nseen_live);
	if (blen) {
		buf_append(&head, body, blen);
		uint32_t n = (uint32_t)head.len;
		buf_append(&k->log, &n, 4);
		buf_append(&k->log, head.data, head.len);
		struct store_replayed out;
		assert_int_equal(session_replay_record(k->replay, PROJECT_ID, (const uint8_t *)head.data,
						       head.len, &replayed, 1, &out), 0);
		assert_int_equal(out.sequence, e->sequence);
		assert_string_equal(out.agent_instance, e->agent_instance);
		char *again = canon_part(&k->replayed, &k->seen_replayed, &k->nseen_replayed);
		assert_string_equal(again, k->last);
		free(again);
	}
	k->seq = e->sequence;
	snprintf(k->agent, sizeof(k->agent), "%s", e->agent_instance);
	buf_free(&head);
	buf_free(&err);
	return 0;
}

/* Replays this generation's log alone, as store_open would after a crash:
 * every record must resolve from the records before it in the same file.
 * Returns the canonical rows. */
static char *replay_generation(struct sink *k)
{
	struct session_replay *r = session_replay_new();
	struct part p;
	part_init(&p, 1);
	struct store_head h = { &p };
	for (size_t at = 0; at + 4 <= k->log.len;) {
		uint32_t n;
		memcpy(&n, k->log.data + at, 4);
		struct store_replayed out;
		assert_int_equal(session_replay_record(r, PROJECT_ID, (const uint8_t *)k->log.data + at + 4,
						       n, &h, 1, &out), 0);
		at += 4 + n;
	}
	size_t *seen = NULL, nseen = 0;
	char *c = canon_part(&p, &seen, &nseen);
	free(seen);
	part_free(&p);
	session_replay_free(r);
	return c;
}

/* This generation's log replays alone to the rows its batches gave the
 * live head (and, when b is set, to exactly batch b's rows). */
static void replay_check(struct sink *k, const struct batch *b)
{
	char *c = replay_generation(k);
	size_t *seen = NULL, nseen = 0;
	char *live = canon_part(&k->live, &seen, &nseen);
	assert_string_equal(c, live);
	if (b) {
		char *want = canon_agent(b);
		assert_string_equal(c, want);
		free(want);
	}
	free(live);
	free(seen);
	free(c);
}

static void encode(struct session *s, const struct batch *b, uint64_t seq, struct buf *z)
{
	struct batch_meta meta = { "agent-a", seq, "default", T0 + (int64_t)seq * 5000,
				   T0 + (int64_t)seq * 5000 + 5000, 19, 4 };
	buf_reset(z);
	assert_int_equal(session_encode(s, b, &meta, z), 0);
}

/* Decodes z and gives it to the server's sessions, storing through store. */
static int send_to_fn(struct sessions *ss, const struct buf *z, session_store_fn store, void *ctx)
{
	struct buf err = { 0 };
	Ember__Ingest__V1__SessionBatch *m = session_batch_decode(z->data, z->len, &err);
	assert_non_null(m);
	int rc = sessions_ingest(ss, m, z->data, z->len, T0, store, ctx, &err);
	session_batch_free(m);
	buf_free(&err);
	return rc;
}

static int send_to(struct sessions *ss, const struct buf *z, struct sink *k)
{
	return send_to_fn(ss, z, sink_store, k);
}

/* Checks that what the server stored last is batch b. */
static void assert_stored(const struct sink *k, const struct batch *b)
{
	char *want = canon_agent(b);
	assert_string_equal(k->last, want);
	free(want);
}

/* The server's sessions with room enough for every test here. */
static struct sessions *new_sessions(void)
{
	return sessions_new(64u << 20, 64u << 20, 60000);
}

/* One agent's session, the server's sessions and the store sink it sends
 * to, and a buffer for the bytes on the wire: the cmocka fixture of the
 * tests that follow one connection. */
struct wire {
	struct session s;
	struct sessions *ss;
	struct sink k;
	struct buf z;
};

static int wire_setup(void **state)
{
	struct wire *w = xcalloc(1, sizeof(*w));
	session_init(&w->s);
	w->ss = new_sessions();
	*state = w;
	return 0;
}

/* Encodes b as batch seq of the wire's session and sends it to the
 * server's sessions: send_to's answer. */
static int wire_send(struct wire *w, const struct batch *b, uint64_t seq)
{
	encode(&w->s, b, seq, &w->z);
	return send_to(w->ss, &w->z, &w->k);
}

static int wire_teardown(void **state)
{
	struct wire *w = *state;
	sink_free(&w->k);
	buf_free(&w->z);
	session_free(&w->s);
	sessions_free(w->ss);
	free(w);
	return 0;
}

static void test_round_trip_and_definitions_once(void **state)
{
	struct wire *w = *state;

	struct batch *b1 = make(200, 1);
	encode(&w->s, b1, 1, &w->z);
	size_t first = w->z.len;
	assert_int_equal(send_to(w->ss, &w->z, &w->k), 0);
	assert_stored(&w->k, b1);
	assert_int_equal((int)w->k.seq, 1);
	assert_string_equal(w->k.agent, "agent-a");

	/* The same stacks again: only samples travel. */
	encode(&w->s, b1, 2, &w->z);
	size_t again = w->z.len;
	assert_int_equal(send_to(w->ss, &w->z, &w->k), 0);
	assert_true(again * 4 < first);

	/* Half new stacks: new definitions, old ones by id. */
	struct batch *b3 = make(300, 1);
	assert_int_equal(wire_send(w, b3, 3), 0);
	assert_stored(&w->k, b3);

	/* A retry of the same bytes (the answer was lost) is recognized. */
	int calls = w->k.calls;
	assert_int_equal(send_to(w->ss, &w->z, &w->k), SESSION_SEEN);
	assert_int_equal(w->k.calls, calls);

	/* The store seals its head: a new log file, which must replay alone,
	 * so the first batch after it carries every definition it uses. */
	replay_check(&w->k, NULL);
	sink_seal(&w->k, true);
	encode(&w->s, b1, 4, &w->z);
	size_t after_seal = w->z.len;
	assert_int_equal(send_to(w->ss, &w->z, &w->k), 0);
	assert_stored(&w->k, b1);
	replay_check(&w->k, b1);
	assert_true(after_seal * 4 < first); /* the wire still sends ids only */
	assert_int_equal(wire_send(w, b3, 5), 0);
	replay_check(&w->k, NULL);
	/* A head that starts with its predecessor's dictionaries: the
	 * session's ids still map, and the new log still replays alone. */
	size_t nodes = w->k.live.nnodes;
	sink_seal(&w->k, false);
	assert_int_equal(w->k.live.nnodes, nodes);
	assert_int_equal(wire_send(w, b3, 6), 0);
	assert_int_equal(w->k.live.nnodes, nodes); /* nothing added again */
	assert_stored(&w->k, b3);
	replay_check(&w->k, b3);

	/* A reset gives the memory back (the agent resets a session that grew
	 * past its limit; the next must start small). */
	assert_true(session_memory(&w->s) > 8192);
	session_reset(&w->s);
	assert_true(session_memory(&w->s) < 4096);

	free_batch(b1);
	free_batch(b3);
}

/* What a batch defined: its decoded counts of strings, frames and nodes. */
struct defs {
	size_t strings, frames, nodes;
};

/* Sends b in w's session and checks what the server stored; returns what
 * the encoded batch defined. */
static struct defs memo_step(struct wire *w, struct batch *b, uint64_t seq)
{
	struct buf z = { 0 }, err = { 0 };
	encode(&w->s, b, seq, &z);
	Ember__Ingest__V1__SessionBatch *m = session_batch_decode(z.data, z.len, &err);
	assert_non_null(m);
	struct defs d = { m->n_strings, m->n_frame_types, m->n_node_parents };
	session_batch_free(m);
	assert_int_equal(send_to(w->ss, &z, &w->k), 0);
	assert_stored(&w->k, b);
	buf_free(&z);
	buf_free(&err);
	return d;
}

/* The session's memos: a stack or resource placed in an earlier batch is
 * found by its content whatever its ids in the new batch, and only what
 * differs in content is new. */
static void test_memo_across_batches(void **state)
{
	struct wire *w = *state;
	struct defs d;

	struct batch *b1 = make_batch(60, 1, false, 0, 4, 0x1000);
	d = memo_step(w, b1, 1);
	assert_int_equal(w->s.stack_memo.n, 60);
	assert_int_equal(w->s.res_memo.n, 3);
	size_t had_nodes = w->s.nnodes;

	/* The same content under other batch ids: every stack and resource
	 * from the memos, nothing defined (not even "unrelated", which no
	 * frame or resource names). */
	struct batch *b2 = make_batch(60, 1, true, 0, 4, 0x1000);
	assert_int_not_equal(strtab_lookup(&b2->strings, "main", 4), strtab_lookup(&b1->strings, "main", 4));
	assert_int_not_equal(b2->frames[b2->stack_ids[2]].name, b1->frames[b1->stack_ids[2]].name);
	d = memo_step(w, b2, 2);
	assert_int_equal(d.strings + d.frames + d.nodes, 0);
	assert_int_equal(w->s.stack_memo.n, 60);
	assert_int_equal(w->s.res_memo.n, 3);

	/* The leaf address in another file (another registry index): new
	 * leaves under the nodes already sent. */
	struct batch *b3 = make_batch(60, 1, false, 1, 4, 0x1000);
	d = memo_step(w, b3, 3);
	assert_int_equal(d.frames, 60);
	assert_int_equal(d.nodes, 60);
	assert_int_equal(w->s.stack_memo.n, 120);
	assert_int_equal(w->s.nnodes, had_nodes + 60);

	/* Stacks that stop one frame short: new to the memo, but their nodes
	 * are all there (each names an inner node). */
	struct batch *b4 = make_batch(60, 1, true, 0, 3, 0x1000);
	d = memo_step(w, b4, 4);
	assert_int_equal(d.strings + d.frames + d.nodes, 0);
	assert_int_equal(w->s.stack_memo.n, 180);
	assert_int_equal(w->s.nnodes, had_nodes + 60);

	/* Other leaf names: new frames and nodes, the resources known. */
	struct batch *b5 = make_batch(60, 2, false, 0, 4, 0x1000);
	d = memo_step(w, b5, 5);
	assert_int_equal(d.strings, 60);
	assert_int_equal(d.nodes, 120);
	assert_int_equal(w->s.res_memo.n, 3);

	/* Other leaf instructions, all else the same: new leaves. */
	struct batch *b6 = make_batch(60, 1, true, 0, 4, 0x2000);
	d = memo_step(w, b6, 6);
	assert_int_equal(d.strings, 0);
	assert_int_equal(d.frames, 60);
	assert_int_equal(d.nodes, 60);

	/* At its bound the memo is emptied and refilled; a batch with more
	 * stacks than it could ever hold does without it. Either way the
	 * stacks are found node by node and nothing is defined again. */
	w->s.stack_memo.max_slots = 256; /* room for 192 */
	d = memo_step(w, b2, 7);
	assert_int_equal(d.strings + d.frames + d.nodes, 0);
	assert_int_equal(w->s.stack_memo.flushes, 1);
	assert_int_equal(w->s.stack_memo.n, 60);
	struct batch *big = make_batch(200, 1, false, 0, 4, 0x1000);
	d = memo_step(w, big, 8);
	assert_int_equal(w->s.stack_memo.flushes, 1);
	assert_int_equal(w->s.stack_memo.n, 60);
	assert_int_equal(d.frames, 280); /* stacks 60 to 199: their g names and leaf addresses */
	d = memo_step(w, b6, 9);
	assert_int_equal(d.strings + d.frames + d.nodes, 0);
	assert_int_equal(w->s.stack_memo.n, 120);
	free_batch(big);

	/* A new session forgets the memos with everything else. */
	session_reset(&w->s);
	assert_int_equal(w->s.stack_memo.n + w->s.res_memo.n, 0);
	assert_int_equal(w->s.stack_memo.max_slots, 256);

	free_batch(b1);
	free_batch(b2);
	free_batch(b3);
	free_batch(b4);
	free_batch(b5);
	free_batch(b6);
}

static void test_lost_batch_and_restart_resync(void **state)
{
	struct wire *w = *state;
	struct batch *b1 = make(50, 1), *b2 = make(80, 2), *b3 = make(80, 3);

	assert_int_equal(wire_send(w, b1, 1), 0);
	/* Batch 2 is encoded but never arrives: batch 3 is out of step. */
	encode(&w->s, b2, 2, &w->z);
	assert_int_equal(wire_send(w, b3, 3), SESSION_RESYNC);
	/* The agent starts a new session and encodes batch 3 again. */
	session_reset(&w->s);
	assert_int_equal(wire_send(w, b3, 3), 0);
	assert_stored(&w->k, b3);

	/* The server restarts: its sessions are gone. */
	sessions_free(w->ss);
	w->ss = new_sessions();
	assert_int_equal(wire_send(w, b1, 4), SESSION_RESYNC);
	session_reset(&w->s);
	assert_int_equal(wire_send(w, b1, 4), 0);
	assert_stored(&w->k, b1);
	struct sessions_stats st;
	sessions_get_stats(w->ss, &st);
	assert_int_equal((int)st.resyncs, 1);
	assert_int_equal((int)st.count, 1);

	free_batch(b1);
	free_batch(b2);
	free_batch(b3);
}

/* A store that fails takes the batch's definitions back: the agent's retry
 * of the same bytes fits, and later batches stay in step. */
static void test_failed_store_rolls_back(void **state)
{
	struct wire *w = *state;
	struct batch *b1 = make(40, 1), *b2 = make(90, 2);
	assert_int_equal(wire_send(w, b1, 1), 0);
	encode(&w->s, b2, 2, &w->z);
	w->k.rc = STORE_BUSY;
	assert_int_equal(send_to(w->ss, &w->z, &w->k), STORE_BUSY);
	w->k.rc = STORE_OK;
	assert_int_equal(send_to(w->ss, &w->z, &w->k), STORE_OK);
	assert_stored(&w->k, b2);
	/* The store already had it (a retry across a server restart): fine. */
	encode(&w->s, b1, 3, &w->z);
	w->k.rc = STORE_DUPLICATE;
	assert_int_equal(send_to(w->ss, &w->z, &w->k), STORE_DUPLICATE);
	w->k.rc = STORE_OK;
	assert_int_equal(wire_send(w, b2, 4), 0);
	free_batch(b1);
	free_batch(b2);
}

/* Hostile batches: built by hand, each gets SESSION_INVALID and leaves the
 * session as it was. */
static void test_hostile_batches(void **state)
{
	(void)state;
	struct sessions *ss = new_sessions();
	struct sink k = { 0 };
	struct buf err = { 0 };
	char *strings[] = { "", "main", "app", "process.executable.name" };
	Ember__Ingest__V1__FrameType types[] = { EMBER__INGEST__V1__FRAME_TYPE__NATIVE };
	uint32_t ffile[] = { 0 }, fname[] = { 1 }, fbin[] = { 2 };
	uint64_t faddr[] = { 0 };
	uint32_t nparent[] = { 0 }, nframe[] = { 0 };
	uint32_t rlen[] = { 2 }, rattr[] = { 3, 2 };
	uint32_t sst[] = { 0 }, sres[] = { 0 };
	Ember__Ingest__V1__EventKind skind[] = { EMBER__INGEST__V1__EVENT_KIND__ON_CPU };
	uint64_t sval[] = { 7 };
	Ember__Ingest__V1__SessionBatch good = EMBER__INGEST__V1__SESSION_BATCH__INIT;
	good.session = "6c1d0d2e-3f4a-4b5c-8d6e-7f8091a2b3c4";
	good.agent_instance = "agent-h";
	good.sequence = 1;
	good.project = "default";
	good.start_unix_ms = T0;
	good.end_unix_ms = T0 + 1000;
	good.sample_rate_hz = 19;
	good.n_strings = 4;
	good.strings = strings;
	good.n_frame_types = good.n_frame_files = good.n_frame_addresses = good.n_frame_names =
		good.n_frame_binaries = 1;
	good.frame_types = types;
	good.frame_files = ffile;
	good.frame_addresses = faddr;
	good.frame_names = fname;
	good.frame_binaries = fbin;
	good.n_node_parents = good.n_node_frames = 1;
	good.node_parents = nparent;
	good.node_frames = nframe;
	good.n_resource_lengths = 1;
	good.resource_lengths = rlen;
	good.n_resource_attributes = 2;
	good.resource_attributes = rattr;
	good.n_sample_nodes = good.n_sample_resources = good.n_sample_kinds =
		good.n_sample_values = 1;
	good.sample_nodes = sst;
	good.sample_resources = sres;
	good.sample_kinds = skind;
	good.sample_values = sval;

	Ember__Ingest__V1__SessionBatch m;
#define BAD(mutation, what)                                                          \
	do {                                                                         \
		m = good;                                                            \
		mutation;                                                            \
		buf_reset(&err);                                                     \
		assert_int_equal(sessions_ingest(ss, &m, NULL, 0, T0, sink_store, &k, &err),  \
				 SESSION_INVALID);                                   \
		if (!strstr(err.data, what))                                         \
			fail_msg("expected \"%s\" in: %s", what, err.data);          \
	} while (0)
	BAD(m.session = "not-a-uuid", "session");
	BAD(m.n_frame_names = 0, "frame");
	BAD(m.n_sample_values = 0, "sample");
	BAD(m.strings = strings + 1, "empty string");
	BAD(m.frame_names = (uint32_t[]){ 9 }, "not defined");
	BAD(m.node_frames = (uint32_t[]){ 5 }, "not defined");
	BAD(m.node_parents = (uint32_t[]){ 2 }, "not defined");
	BAD(m.n_node_frames = 0, "node");
	uint32_t badnode[] = { 1 };
	BAD(m.sample_nodes = badnode, "not defined");
	BAD(m.resource_lengths = (uint32_t[]){ 1 }, "pairs");
	uint32_t emptykey[] = { 0, 2 };
	BAD(m.resource_attributes = emptykey, "empty key");
	BAD(m.sample_kinds = (Ember__Ingest__V1__EventKind[]){ 77 }, "event kind");
	uint64_t zero[] = { 0 };
	BAD(m.sample_values = zero, "value");
	BAD(m.frame_types = (Ember__Ingest__V1__FrameType[]){ 99 }, "frame type");
	BAD(m.sample_rate_hz = 0, "sample_rate_hz");
	BAD(m.project = "", "project");
	/* timeline spans: parallel arrays, defined node and resource, a known
	 * kind, an end at or after a start */
	uint32_t spnode[] = { 0 }, spres[] = { 0 }, spkind[] = { 1 }, spdev[] = { 0 }, spstream[] = { 7 };
	uint64_t spstart[] = { 1000 }, spend[] = { 2000 };
#define SPANS(x)                                                                             \
	(x.n_span_nodes = x.n_span_resources = x.n_span_starts_ns = x.n_span_ends_ns = x.n_span_kinds = \
		 x.n_span_devices = x.n_span_streams = 1,                                   \
	 x.span_nodes = spnode, x.span_resources = spres, x.span_starts_ns = spstart,        \
	 x.span_ends_ns = spend, x.span_kinds = spkind, x.span_devices = spdev, x.span_streams = spstream)
	BAD((SPANS(m), m.n_span_streams = 0), "span arrays differ");
	BAD((SPANS(m), m.span_nodes = badnode), "spans[0]: node or resource not defined");
	BAD((SPANS(m), m.span_resources = badnode), "spans[0]: node or resource not defined");
	BAD((SPANS(m), m.span_kinds = (uint32_t[]){ 6 }), "spans[0]: unknown kind 6");
	BAD((SPANS(m), m.span_ends_ns = (uint64_t[]){ 999 }), "spans[0]: start and end");
	BAD((SPANS(m), m.span_starts_ns = zero, m.span_ends_ns = zero), "spans[0]: start and end");
	assert_int_equal(k.calls, 0);

	/* A chain of nodes deeper than a stack may be. */
	uint32_t *chain_p = xmalloc(4097 * sizeof(uint32_t)), *chain_f = xcalloc(4097, sizeof(uint32_t));
	for (uint32_t i = 0; i < 4097; i++)
		chain_p[i] = i;
	BAD((m.node_parents = chain_p, m.node_frames = chain_f, m.n_node_parents = m.n_node_frames = 4097), "deeper");
	free(chain_p);
	free(chain_f);
	/* After all that, the session still takes its first batch. */
	assert_int_equal(sessions_ingest(ss, &good, NULL, 0, T0, sink_store, &k, &err), 0);
	assert_int_equal(k.calls, 1);
	/* A second batch that claims another project is refused. */
	m = good;
	m.sequence = 2;
	m.strings_base = 4;
	m.frames_base = m.nodes_base = m.resources_base = 1;
	m.n_strings = m.n_frame_types = m.n_frame_files = m.n_frame_addresses = m.n_frame_names =
		m.n_frame_binaries = m.n_node_parents = m.n_node_frames = m.n_resource_lengths =
			m.n_resource_attributes = 0;
	m.n_sample_kinds = 0; /* all on-CPU */
	m.project = "other";
	buf_reset(&err);
	assert_int_equal(sessions_ingest(ss, &m, NULL, 0, T0, sink_store, &k, &err), SESSION_INVALID);
	m.project = "default";
	assert_int_equal(sessions_ingest(ss, &m, NULL, 0, T0, sink_store, &k, &err), 0);
	assert_string_equal(k.last, "2:main:app:0;|process.executable.name|app 1 7\n");
	/* An unknown session that does not start at zero must resync. */
	m.session = "00000000-1111-4222-8333-444444444444";
	assert_int_equal(sessions_ingest(ss, &m, NULL, 0, T0, sink_store, &k, &err), SESSION_RESYNC);
#undef BAD
#undef SPANS
	sink_free(&k);
	buf_free(&err);
	sessions_free(ss);
}

/* The timeline of project over the spans in g for the body
 * printf(fmt, ...), parsed. */
static json_t *__attribute__((format(printf, 3, 4)))
timeline_of(struct gpuspans *g, const char *project, const char *fmt, ...)
{
	char body[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(body, sizeof(body), fmt, ap);
	va_end(ap);
	struct tl_request r;
	struct buf err = { 0 }, out = { 0 };
	if (tl_request_parse(&r, body, strlen(body), &err) != 0)
		fail_msg("%s: %s", body, err.data);
	memcpy(r.scope.project_id, project, 37);
	assert_int_equal(timeline_query(g, NULL, &r, T0, &out, &err), 0);
	json_t *doc = json_loads(out.data, 0, NULL);
	assert_non_null(doc);
	tl_request_free(&r);
	buf_free(&out);
	buf_free(&err);
	return doc;
}

/* The store function of the HTTP layer's ingest (server/http/ingest_api.c):
 * the sink's, then the batch's spans into a span store. */
struct span_sink {
	struct sink k;
	struct gpuspans *g;
};

static void keep_span(void *ctx, const struct gpuspan_in *span)
{
	struct span_sink *ss = ctx;
	gpuspans_add(ss->g, PROJECT_ID, span, 1, T0);
}

static int span_store(void *ctx, const char *project_name, struct store_entry *e)
{
	struct span_sink *ss = ctx;
	int rc = sink_store(&ss->k, project_name, e);
	if (rc == STORE_OK)
		sessions_spans(e, keep_span, ss);
	return rc;
}

/* Spans the agent added to its batch reach the span store with their
 * launch stacks (as the samples') and resources, exactly; the timeline
 * answers them by start, each stack and label set written once. */
static void test_spans_to_the_timeline(void **state)
{
	(void)state;
	struct session s;
	session_init(&s);
	struct sessions *ss = new_sessions();
	struct span_sink sk = { .g = gpuspans_new(0, 0) };
	struct batch *b = xmalloc(sizeof(*b));
	batch_init(b);
	const char *names[] = { "main", "train", "cudaLaunchKernel", "k_big" };
	uint8_t types[] = { FT_NATIVE, FT_CPYTHON, FT_CUDA_LAUNCH, FT_CUDA_KERNEL };
	uint32_t frames[4];
	for (int i = 0; i < 4; i++) {
		struct bframe f = { .type = types[i], .name = batch_string(b, names[i], strlen(names[i])),
				    .binary = i == 1 ? batch_string(b, "train.py", 8) : 0 };
		frames[i] = batch_frame(b, &f);
	}
	uint32_t stack = batch_stack(b, frames, 4), other = batch_stack(b, frames, 2);
	uint32_t kv[] = { batch_string(b, "process.pid", 11), batch_string(b, "42", 2),
			  batch_string(b, "gpu.device.index", 16), batch_string(b, "1", 1) };
	uint32_t res = batch_resource(b, kv, 4), res2 = batch_resource(b, kv, 2);
	batch_add(b, stack, res, EK_CUDA, 3000);
	int64_t base = T0 * 1000000 + 5;
	assert_true(batch_add_span(b, &(struct bspan){ stack, res, 1, 1, 7, base + 2000, base + 3000 }));
	assert_true(batch_add_span(b, &(struct bspan){ stack, res, 1, 1, 7, base, base + 2000 }));
	assert_true(batch_add_span(b, &(struct bspan){ other, res2, 2, 0, 9, base + 500, base + 600 }));
	struct buf z = { 0 };
	encode(&s, b, 1, &z);
	assert_int_equal(send_to_fn(ss, &z, span_store, &sk), 0);

	const char *range = "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld}}";
	json_t *doc = timeline_of(sk.g, PROJECT_ID, range, (long long)T0 - 1000, (long long)T0 + 1000);
	json_t *sp = json_object_get(doc, "spans");
	assert_int_equal(json_array_size(sp), 3);
	int64_t want_start[] = { base, base + 500, base + 2000 }, want_end[] = { base + 2000, base + 600, base + 3000 };
	const char *want_kind[] = { "kernel", "memcpy", "kernel" }, *want_name[] = { "k_big", "train", "k_big" };
	for (size_t i = 0; i < 3; i++) {
		json_t *o = json_array_get(sp, i);
		assert_int_equal(json_integer_value(json_object_get(o, "start_ns")), want_start[i]);
		assert_int_equal(json_integer_value(json_object_get(o, "end_ns")), want_end[i]);
		assert_string_equal(json_string_value(json_object_get(o, "kind")), want_kind[i]);
		assert_string_equal(json_string_value(json_object_get(o, "name")), want_name[i]);
		assert_int_equal(json_integer_value(json_object_get(o, "device")), i == 1 ? 0 : 1);
		assert_int_equal(json_integer_value(json_object_get(o, "stream")), i == 1 ? 9 : 7);
	}
	/* one stack and one label set for both k_big spans */
	assert_int_equal(json_array_size(json_object_get(doc, "stacks")), 2);
	assert_int_equal(json_array_size(json_object_get(doc, "label_sets")), 2);
	json_t *st = json_array_get(json_object_get(doc, "stacks"),
				    (size_t)json_integer_value(json_object_get(json_array_get(sp, 0), "stack")));
	assert_int_equal(json_array_size(st), 4);
	for (size_t i = 0; i < 4; i++)
		assert_string_equal(json_string_value(json_object_get(json_array_get(st, i), "name")), names[i]);
	assert_string_equal(json_string_value(json_object_get(json_array_get(st, 2), "frame_type")), "cuda_launch");
	json_t *ls = json_array_get(json_object_get(doc, "label_sets"),
				    (size_t)json_integer_value(json_object_get(json_array_get(sp, 0), "labels")));
	assert_string_equal(json_string_value(json_object_get(ls, "process.pid")), "42");
	assert_string_equal(json_string_value(json_object_get(ls, "gpu.device.index")), "1");
	assert_true(json_is_false(json_object_get(doc, "truncated")));
	json_decref(doc);

	/* CEL over the spans' attributes, and the limit */
	doc = timeline_of(sk.g, PROJECT_ID,
			  "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld,\"query\":\"gpu.device.index == 1\"},"
			  "\"limit\":1}",
			  (long long)T0 - 1000, (long long)T0 + 1000);
	assert_int_equal(json_array_size(json_object_get(doc, "spans")), 1);
	assert_true(json_is_true(json_object_get(doc, "truncated")));
	json_decref(doc);
	/* a range to the year 3000 (past what nanoseconds hold) */
	doc = timeline_of(sk.g, PROJECT_ID, "{\"filter\":{\"start_ts\":0,\"end_ts\":32503680000000}}");
	assert_int_equal(json_array_size(json_object_get(doc, "spans")), 3);
	json_decref(doc);
	/* another project's timeline is empty */
	doc = timeline_of(sk.g, "11111111-1111-4111-8111-111111111111", range, (long long)T0 - 1000,
			  (long long)T0 + 1000);
	assert_true(json_is_array(json_object_get(doc, "spans")));
	assert_int_equal(json_array_size(json_object_get(doc, "spans")), 0);
	json_decref(doc);

	buf_free(&z);
	free_batch(b);
	sink_free(&sk.k);
	gpuspans_free(sk.g);
	sessions_free(ss);
	session_free(&s);
}

/* Sessions beyond the memory budget, or idle too long, are forgotten
 * (their agents resync); a session over its own limit must restart. */
static void test_memory_bounds(void **state)
{
	(void)state;
	struct batch *b = make(2000, 1);
	struct sink k = { 0 };
	struct buf z = { 0 };
	struct session a, c;
	session_init(&a);
	session_init(&c);
	/* What one session of this batch holds, with its store maps. */
	struct sessions *ss = new_sessions();
	encode(&a, b, 1, &z);
	assert_int_equal(send_to(ss, &z, &k), 0);
	struct sessions_stats st;
	sessions_get_stats(ss, &st);
	size_t one = st.bytes;
	assert_true(one > 100u << 10 && one < 1u << 20);
	sessions_free(ss);
	/* Room for about one session. */
	ss = sessions_new(one * 3 / 2, 1u << 20, 60000);
	session_reset(&a);
	encode(&a, b, 1, &z);
	assert_int_equal(send_to(ss, &z, &k), 0);
	encode(&c, b, 1, &z);
	assert_int_equal(send_to(ss, &z, &k), 0);
	sessions_get_stats(ss, &st);
	assert_int_equal((int)st.count, 1);
	assert_int_equal((int)st.evicted, 1);
	assert_true(st.bytes <= one * 3 / 2);
	encode(&a, b, 2, &z); /* a was forgotten */
	assert_int_equal(send_to(ss, &z, &k), SESSION_RESYNC);
	sessions_free(ss);

	/* Idle sessions expire when a new one arrives. */
	ss = sessions_new(64u << 20, 64u << 20, 1000);
	session_reset(&a);
	encode(&a, b, 3, &z);
	assert_int_equal(send_to(ss, &z, &k), 0);
	struct buf err = { 0 };
	session_reset(&c);
	encode(&c, b, 3, &z);
	Ember__Ingest__V1__SessionBatch *m = session_batch_decode(z.data, z.len, &err);
	assert_int_equal(sessions_ingest(ss, m, z.data, z.len, T0 + 5000, sink_store, &k, &err), 0);
	session_batch_free(m);
	sessions_get_stats(ss, &st);
	assert_int_equal((int)st.expired, 1);
	assert_int_equal((int)st.count, 1);
	sessions_free(ss);

	/* One session may not outgrow its limit. */
	ss = sessions_new(64u << 20, 64u << 10, 60000);
	session_reset(&a);
	encode(&a, b, 4, &z);
	assert_int_equal(send_to(ss, &z, &k), SESSION_RESYNC);
	sessions_free(ss);

	free_batch(b);
	sink_free(&k);
	buf_free(&z);
	buf_free(&err);
	session_free(&a);
	session_free(&c);
}

/* The agent's node index: a tree of 4^8 stacks (every path of 8 levels,
 * 4 frames a level) has 87 380 nodes; each is defined once, the index
 * grows through several sizes on the way, and a node costs well under
 * the 32-64 bytes of a general hash index. */
static void test_node_index(void **state)
{
	(void)state;
	struct batch *b = xmalloc(sizeof(*b));
	batch_init(b);
	uint32_t fr[8][4];
	for (int d = 0; d < 8; d++)
		for (int k = 0; k < 4; k++) {
			char name[32];
			snprintf(name, sizeof(name), "l%d_%d", d, k);
			struct bframe f = { .type = FT_NATIVE, .name = batch_string(b, name, strlen(name)),
					    .binary = batch_string(b, "app", 3) };
			fr[d][k] = batch_frame(b, &f);
		}
	uint32_t kv[] = { batch_string(b, "host.name", 9), batch_string(b, "h1", 2) };
	uint32_t res = batch_resource(b, kv, 2);
	for (uint32_t k = 0; k < 65536; k++) {
		uint32_t ids[8];
		for (int d = 0; d < 8; d++)
			ids[d] = fr[d][(k >> (14 - 2 * d)) & 3];
		batch_add(b, batch_stack(b, ids, 8), res, EK_ON_CPU, 1);
	}
	const size_t want = 4 + 16 + 64 + 256 + 1024 + 4096 + 16384 + 65536;
	struct session s;
	session_init(&s);
	struct buf z = { 0 };
	encode(&s, b, 1, &z);
	assert_int_equal(s.nnodes, want);
	assert_int_equal(s.sent_nodes, want);
	uint64_t *pairs = xmalloc(want * sizeof(uint64_t));
	for (size_t i = 0; i < want; i++)
		pairs[i] = (uint64_t)s.node_parent[i] << 32 | s.node_frame[i];
	qsort(pairs, want, sizeof(uint64_t), cmp_u64);
	for (size_t i = 1; i < want; i++)
		assert_true(pairs[i] != pairs[i - 1]); /* no node twice */
	free(pairs);
	assert_true(session_memory(&s) < want * 24 + (64u << 10)); /* the memos are apart */
	assert_int_equal(s.stack_memo.n, 65536);

	/* Everything again: nothing new is defined, every sample names a leaf. */
	encode(&s, b, 2, &z);
	assert_int_equal(s.nnodes, want);
	struct buf err = { 0 };
	Ember__Ingest__V1__SessionBatch *m = session_batch_decode(z.data, z.len, &err);
	assert_non_null(m);
	assert_int_equal(m->n_node_parents, 0);
	assert_int_equal(m->n_sample_nodes, 65536);
	uint64_t node = 0;
	for (size_t i = 0; i < m->n_sample_nodes; i++) {
		node += m->sample_nodes[i];
		size_t depth = 0;
		for (uint64_t n = node + 1; n; n = s.node_parent[n - 1])
			depth++;
		assert_int_equal(depth, 8);
	}
	session_batch_free(m);

	/* A batch that would pass the node limit is refused, nothing changed;
	 * the reporter starts a new session for it first. */
	size_t had = s.nnodes;
	s.nnodes = SESSION_MAX_NODES - 1000;
	assert_false(session_fits(&s, b));
	size_t zlen = z.len;
	struct batch_meta meta = { "agent-a", 3, "default", T0, T0 + 5000, 19, 4 };
	assert_int_equal(session_encode(&s, b, &meta, &z), -1);
	assert_int_equal(z.len, zlen);
	s.nnodes = had;
	assert_true(session_fits(&s, b));

	buf_free(&err);
	buf_free(&z);
	session_free(&s);
	free_batch(b);
}

/* --- through the real store ------------------------------------------------------ */

static uint64_t store_total(struct store *st)
{
	return store_sum(st, PROJECT_ID, 0, INT64_MAX / 2);
}

static int real_store(void *ctx, const char *project_name, struct store_entry *e)
{
	(void)project_name;
	struct buf err = { 0 };
	e->project = PROJECT_ID;
	int rc = store_append_entry(ctx, e, &err);
	buf_free(&err);
	return rc;
}

static uint64_t batch_total(const struct batch *b)
{
	uint64_t t = 0;
	for (size_t i = 0; i < batch_samples(b); i++)
		t += b->samples[i].value;
	return t;
}

/* Two agents' sessions go on across head seals (one keeping the old
 * head's dictionaries, one starting fresh); the store is then closed
 * without a flush, as after a crash, and every log file left must replay
 * alone: everything acknowledged is there once, and retries of batches in
 * the log are recognised. */
static void test_store_replays_sessions_across_seals(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	struct store_config cfg;
	store_config_default(&cfg);
	ingest_codecs(&cfg);
	cfg.background = false;
	cfg.time_window = false;
	struct store *st;
	struct buf err = { 0 }, z = { 0 };
	assert_int_equal(store_open(dir, &cfg, &st, &err), 0);
	struct sessions *ss = new_sessions();
	struct session a, c;
	session_init(&a);
	session_init(&c);
	struct batch *b[3] = { make(150, 1), make(90, 2), make(120, 3) };
	uint64_t want = 0, seq = 0;
	/* Rounds 5 to 8 all go to the last log: four batches per session. */
	const int rounds = 9;
	for (int round = 0; round < rounds; round++) {
		for (int agent = 0; agent < 2; agent++) {
			struct session *sa = agent ? &c : &a;
			struct batch *bb = b[(round + agent) % 3];
			seq++;
			struct batch_meta meta = { agent ? "agent-c" : "agent-a", seq, "default",
						   T0 + (int64_t)seq * 5000, T0 + (int64_t)seq * 5000 + 5000,
						   19, 4 };
			buf_reset(&z);
			assert_int_equal(session_encode(sa, bb, &meta, &z), 0);
			Ember__Ingest__V1__SessionBatch *m = session_batch_decode(z.data, z.len, &err);
			assert_non_null(m);
			assert_int_equal(sessions_ingest(ss, m, z.data, z.len, T0, real_store, st, &err), 0);
			session_batch_free(m);
			want += batch_total(bb);
		}
		if (round == 1 || round == 3) {
			/* A crash and a restart: the logs replay, then are written
			 * as blocks; the new heads keep their dictionaries (round
			 * 1) or start empty (round 3). */
			cfg.head_dict_bytes = round == 1 ? 1ull << 30 : 0;
			store_close(st);
			assert_int_equal(store_open(dir, &cfg, &st, &err), 0);
			assert_int_equal(store_total(st), want);
			assert_int_equal(store_flush(st, &err), 0);
			/* The server restarted: the agents start new sessions. */
			sessions_free(ss);
			ss = new_sessions();
			session_reset(&a);
			session_reset(&c);
		} else if (round == 2 || round == 4) {
			assert_int_equal(store_flush(st, &err), 0); /* a seal, sessions go on */
		}
	}
	assert_int_equal(store_total(st), want);
	store_close(st); /* no flush: the logs stay */
	assert_int_equal(store_open(dir, &cfg, &st, &err), 0);
	assert_int_equal(store_total(st), want);
	struct store_stats sst;
	store_get_stats(st, &sst);
	assert_int_equal(sst.wal_skipped_records, 0);
	assert_true(sst.unflushed_rows > 0); /* the last rounds came from the logs */
	/* The same log replayed a head at a time (replay_seal): each head
	 * that fills is written as blocks during the start, and each session
	 * goes on into the next head (its series are that head's own), with
	 * the dictionaries carried over (pass 0) or not (pass 1);
	 * a crash before the log goes drops those blocks and replays it
	 * again, so nothing is lost or counted twice. */
	uint64_t blocks0 = sst.blocks;
	for (int pass = 0; pass < 3; pass++) {
		store_close(st);
		cfg.head_max_rows = 40;
		cfg.head_dict_bytes = pass == 1 ? 0 : 1ull << 30;
		assert_int_equal(store_open(dir, &cfg, &st, &err), 0);
		assert_int_equal(store_total(st), want);
		store_get_stats(st, &sst);
		assert_int_equal(sst.wal_skipped_records, 0);
		assert_true(sst.blocks > blocks0);
		assert_int_equal(sst.unflushed_rows, sst.head_rows); /* nothing else in memory */
		assert_true(sst.head_rows < 40 + 150);
	}
	/* A retry of the last batch is a duplicate. */
	sessions_free(ss);
	ss = new_sessions();
	session_reset(&c);
	struct batch_meta meta = { "agent-c", seq, "default", T0 + (int64_t)seq * 5000,
				   T0 + (int64_t)seq * 5000 + 5000, 19, 4 };
	buf_reset(&z);
	assert_int_equal(session_encode(&c, b[(rounds - 1 + 1) % 3], &meta, &z), 0);
	Ember__Ingest__V1__SessionBatch *m = session_batch_decode(z.data, z.len, &err);
	assert_int_equal(sessions_ingest(ss, m, z.data, z.len, T0, real_store, st, &err), STORE_DUPLICATE);
	session_batch_free(m);
	assert_int_equal(store_total(st), want);
	store_close(st);
	sessions_free(ss);
	for (int i = 0; i < 3; i++)
		free_batch(b[i]);
	session_free(&a);
	session_free(&c);
	buf_free(&z);
	buf_free(&err);
	rm_temp_dir(dir);
}

/* A test run with a wire of its own. */
#define WIRE_TEST(f) cmocka_unit_test_setup_teardown(f, wire_setup, wire_teardown)

UNIT_TEST_MAIN(
	WIRE_TEST(test_round_trip_and_definitions_once),
	WIRE_TEST(test_memo_across_batches),
	WIRE_TEST(test_lost_batch_and_restart_resync),
	WIRE_TEST(test_failed_store_rolls_back),
	cmocka_unit_test(test_hostile_batches),
	cmocka_unit_test(test_spans_to_the_timeline),
	cmocka_unit_test(test_memory_bounds),
	cmocka_unit_test(test_node_index),
	cmocka_unit_test(test_store_replays_sessions_across_seals))
