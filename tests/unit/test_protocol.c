/* Unit tests: protocol version 2, the agent's session encoder
 * (agent/session.c) against the server's sessions (server/sessions.c):
 * what is stored equals what was sampled, definitions are sent once,
 * duplicates, lost batches, restarts, failed stores, hostile input and the
 * memory bounds. */
#include "testutil.h"

#include "agent/batch.h"
#include "agent/session.h"
#include "server/batch_decode.h"
#include "server/sessions.h"
#include "util.h"

#define T0 1700000000000LL

/* A batch of n samples over a few stacks: stack k is main -> f<k % 7> ->
 * g<k>, in process "app<k % 3>"; salt changes the leaf names. */
static struct batch *make(int n, int salt)
{
	struct batch *b = xmalloc(sizeof(*b));
	batch_init(b);
	struct file_id fid;
	memset(fid.b, 0x22, sizeof(fid.b));
	for (int k = 0; k < n; k++) {
		char f1[32], f2[32], exe[16];
		snprintf(f1, sizeof(f1), "f%d", k % 7);
		snprintf(f2, sizeof(f2), "g%d_%d", k, salt);
		snprintf(exe, sizeof(exe), "app%d", k % 3);
		struct bframe fr[4] = {
			{ .type = FT_NATIVE, .name = batch_string(b, "main", 4), .binary = batch_string(b, exe, strlen(exe)) },
			{ .type = FT_NATIVE, .name = batch_string(b, f1, strlen(f1)), .binary = batch_string(b, exe, strlen(exe)) },
			{ .type = FT_NATIVE, .name = batch_string(b, f2, strlen(f2)), .binary = batch_string(b, exe, strlen(exe)) },
			{ .type = FT_NATIVE, .address = 0x1000u + (uint64_t)k },
		};
		fr[3].file = batch_file(b, 0, &fid, "libx.so", (const uint8_t *)"\1\2\3", 3, NULL, 0);
		uint32_t ids[4];
		for (int j = 0; j < 4; j++)
			ids[j] = batch_frame(b, &fr[j]);
		uint32_t kv[] = {
			batch_string(b, "process.executable.name", 23), batch_string(b, exe, strlen(exe)),
			batch_string(b, "host.name", 9), batch_string(b, "h1", 2),
		};
		batch_add(b, batch_stack(b, ids, 4), batch_resource(b, kv, 4), EK_ON_CPU,
			  (uint64_t)(k + 1));
	}
	return b;
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
		for (size_t j = 0; j < r->n_attributes; j++)
			buf_printf(&l, "|%s", b->strings[r->attributes[j]]);
		buf_printf(&l, " %d %llu", s->kind, (unsigned long long)s->value);
		lines[i] = buf_steal(&l, NULL);
	}
	qsort(lines, b->n_samples, sizeof(char *), cmp_str);
	struct buf all = { 0 };
	for (size_t i = 0; i < b->n_samples; i++) {
		buf_printf(&all, "%s\n", lines[i]);
		free(lines[i]);
	}
	free(lines);
	return buf_steal(&all, NULL);
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

/* The store: records what it was given and answers rc. */
struct sink {
	int rc;
	int calls;
	char *last;
	uint64_t seq;
	char agent[64];
};

static int sink_store(void *ctx, const Ember__Ingest__V1__Batch *b)
{
	struct sink *k = ctx;
	k->calls++;
	free(k->last);
	k->last = canon(b);
	k->seq = b->sequence;
	snprintf(k->agent, sizeof(k->agent), "%s", b->agent_instance);
	return k->rc;
}

static void encode(struct session *s, const struct batch *b, uint64_t seq, struct buf *z)
{
	struct batch_meta meta = { "agent-a", seq, "default", T0 + (int64_t)seq * 5000,
				   T0 + (int64_t)seq * 5000 + 5000, 19, 4 };
	buf_reset(z);
	assert_int_equal(session_encode(s, b, &meta, z), 0);
}

/* Decodes z and gives it to the server's sessions. */
static int send_to(struct sessions *ss, const struct buf *z, struct sink *k)
{
	struct buf err = { 0 };
	Ember__Ingest__V1__SessionBatch *m = session_batch_decode(z->data, z->len, &err);
	assert_non_null(m);
	int rc = sessions_ingest(ss, m, T0, sink_store, k, &err);
	session_batch_free(m);
	buf_free(&err);
	return rc;
}

static void test_round_trip_and_definitions_once(void **state)
{
	(void)state;
	struct session s;
	session_init(&s);
	struct sessions *ss = sessions_new(64u << 20, 64u << 20, 60000);
	struct sink k = { 0 };
	struct buf z = { 0 };

	struct batch *b1 = make(200, 1);
	encode(&s, b1, 1, &z);
	size_t first = z.len;
	assert_int_equal(send_to(ss, &z, &k), 0);
	char *want = canon_agent(b1);
	assert_string_equal(k.last, want);
	free(want);
	assert_int_equal((int)k.seq, 1);
	assert_string_equal(k.agent, "agent-a");

	/* The same stacks again: only samples travel. */
	encode(&s, b1, 2, &z);
	size_t again = z.len;
	assert_int_equal(send_to(ss, &z, &k), 0);
	assert_true(again * 4 < first);

	/* Half new stacks: new definitions, old ones by id. */
	struct batch *b3 = make(300, 1);
	encode(&s, b3, 3, &z);
	assert_int_equal(send_to(ss, &z, &k), 0);
	want = canon_agent(b3);
	assert_string_equal(k.last, want);
	free(want);

	/* A retry of the same bytes (the answer was lost) is recognized. */
	int calls = k.calls;
	assert_int_equal(send_to(ss, &z, &k), SESSION_SEEN);
	assert_int_equal(k.calls, calls);

	/* A reset gives the memory back (the agent resets a session that grew
	 * past its limit; the next must start small). */
	assert_true(session_memory(&s) > 8192);
	session_reset(&s);
	assert_true(session_memory(&s) < 4096);

	free_batch(b1);
	free_batch(b3);
	free(k.last);
	buf_free(&z);
	session_free(&s);
	sessions_free(ss);
}

static void test_lost_batch_and_restart_resync(void **state)
{
	(void)state;
	struct session s;
	session_init(&s);
	struct sessions *ss = sessions_new(64u << 20, 64u << 20, 60000);
	struct sink k = { 0 };
	struct buf z = { 0 };
	struct batch *b1 = make(50, 1), *b2 = make(80, 2), *b3 = make(80, 3);

	encode(&s, b1, 1, &z);
	assert_int_equal(send_to(ss, &z, &k), 0);
	/* Batch 2 is encoded but never arrives: batch 3 is out of step. */
	encode(&s, b2, 2, &z);
	encode(&s, b3, 3, &z);
	assert_int_equal(send_to(ss, &z, &k), SESSION_RESYNC);
	/* The agent starts a new session and encodes batch 3 again. */
	session_reset(&s);
	encode(&s, b3, 3, &z);
	assert_int_equal(send_to(ss, &z, &k), 0);
	char *want = canon_agent(b3);
	assert_string_equal(k.last, want);
	free(want);

	/* The server restarts: its sessions are gone. */
	sessions_free(ss);
	ss = sessions_new(64u << 20, 64u << 20, 60000);
	encode(&s, b1, 4, &z);
	assert_int_equal(send_to(ss, &z, &k), SESSION_RESYNC);
	session_reset(&s);
	encode(&s, b1, 4, &z);
	assert_int_equal(send_to(ss, &z, &k), 0);
	want = canon_agent(b1);
	assert_string_equal(k.last, want);
	free(want);
	struct sessions_stats st;
	sessions_get_stats(ss, &st);
	assert_int_equal((int)st.resyncs, 1);
	assert_int_equal((int)st.count, 1);

	free_batch(b1);
	free_batch(b2);
	free_batch(b3);
	free(k.last);
	buf_free(&z);
	session_free(&s);
	sessions_free(ss);
}

/* A store that fails takes the batch's definitions back: the agent's retry
 * of the same bytes fits, and later batches stay in step. */
static void test_failed_store_rolls_back(void **state)
{
	(void)state;
	struct session s;
	session_init(&s);
	struct sessions *ss = sessions_new(64u << 20, 64u << 20, 60000);
	struct sink k = { 0 };
	struct buf z = { 0 };
	struct batch *b1 = make(40, 1), *b2 = make(90, 2);
	encode(&s, b1, 1, &z);
	assert_int_equal(send_to(ss, &z, &k), 0);
	encode(&s, b2, 2, &z);
	k.rc = -2; /* busy */
	assert_int_equal(send_to(ss, &z, &k), -2);
	k.rc = 0;
	assert_int_equal(send_to(ss, &z, &k), 0);
	char *want = canon_agent(b2);
	assert_string_equal(k.last, want);
	free(want);
	/* The store already had it (a retry across a server restart): fine. */
	encode(&s, b1, 3, &z);
	k.rc = 1;
	assert_int_equal(send_to(ss, &z, &k), 1);
	k.rc = 0;
	encode(&s, b2, 4, &z);
	assert_int_equal(send_to(ss, &z, &k), 0);
	free_batch(b1);
	free_batch(b2);
	free(k.last);
	buf_free(&z);
	session_free(&s);
	sessions_free(ss);
}

/* Hostile batches: built by hand, each gets SESSION_INVALID and leaves the
 * session as it was. */
static void test_hostile_batches(void **state)
{
	(void)state;
	struct sessions *ss = sessions_new(64u << 20, 64u << 20, 60000);
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
		assert_int_equal(sessions_ingest(ss, &m, T0, sink_store, &k, &err),  \
				 SESSION_INVALID);                                   \
		if (!strstr(err.data, what))                                         \
			fail_msg("expected \"%s\" in: %s", what, err.data);          \
	} while (0)
	BAD(m.session = "not-a-uuid", "session");
	BAD(m.n_frame_names = 0, "frame");
	BAD(m.n_sample_values = 0, "sample");
	BAD(m.strings = strings + 1, "empty string");
	uint32_t badname[] = { 9 };
	BAD(m.frame_names = badname, "not defined");
	uint32_t badframe[] = { 5 };
	BAD(m.node_frames = badframe, "not defined");
	uint32_t badparent[] = { 2 };
	BAD(m.node_parents = badparent, "not defined");
	BAD(m.n_node_frames = 0, "node");
	uint32_t badnode[] = { 1 };
	BAD(m.sample_nodes = badnode, "not defined");
	uint32_t oddlen[] = { 1 };
	BAD(m.resource_lengths = oddlen, "pairs");
	uint32_t emptykey[] = { 0, 2 };
	BAD(m.resource_attributes = emptykey, "empty key");
	Ember__Ingest__V1__EventKind badkind[] = { 77 };
	BAD(m.sample_kinds = badkind, "event kind");
	uint64_t zero[] = { 0 };
	BAD(m.sample_values = zero, "value");
	Ember__Ingest__V1__FrameType badtype[] = { 99 };
	BAD(m.frame_types = badtype, "frame type");
	BAD(m.sample_rate_hz = 0, "sample_rate_hz");
	BAD(m.project = "", "project");
	assert_int_equal(k.calls, 0);

	/* A chain of nodes deeper than a stack may be. */
	uint32_t *chain_p = xmalloc(4097 * sizeof(uint32_t)), *chain_f = xcalloc(4097, sizeof(uint32_t));
	for (uint32_t i = 0; i < 4097; i++)
		chain_p[i] = i;
	BAD((m.node_parents = chain_p, m.node_frames = chain_f, m.n_node_parents = m.n_node_frames = 4097), "deeper");
	free(chain_p);
	free(chain_f);
	/* After all that, the session still takes its first batch. */
	assert_int_equal(sessions_ingest(ss, &good, T0, sink_store, &k, &err), 0);
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
	assert_int_equal(sessions_ingest(ss, &m, T0, sink_store, &k, &err), SESSION_INVALID);
	m.project = "default";
	assert_int_equal(sessions_ingest(ss, &m, T0, sink_store, &k, &err), 0);
	assert_string_equal(k.last, "2:main:app:0;|process.executable.name|app 1 7\n");
	/* An unknown session that does not start at zero must resync. */
	m.session = "00000000-1111-4222-8333-444444444444";
	assert_int_equal(sessions_ingest(ss, &m, T0, sink_store, &k, &err), SESSION_RESYNC);
#undef BAD
	free(k.last);
	buf_free(&err);
	sessions_free(ss);
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
	/* Room for about one session. */
	struct sessions *ss = sessions_new(300u << 10, 1u << 20, 60000);
	encode(&a, b, 1, &z);
	assert_int_equal(send_to(ss, &z, &k), 0);
	encode(&c, b, 1, &z);
	assert_int_equal(send_to(ss, &z, &k), 0);
	struct sessions_stats st;
	sessions_get_stats(ss, &st);
	assert_int_equal((int)st.count, 1);
	assert_int_equal((int)st.evicted, 1);
	assert_true(st.bytes <= 300u << 10);
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
	assert_int_equal(sessions_ingest(ss, m, T0 + 5000, sink_store, &k, &err), 0);
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
	free(k.last);
	buf_free(&z);
	buf_free(&err);
	session_free(&a);
	session_free(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip_and_definitions_once),
		cmocka_unit_test(test_lost_batch_and_restart_resync),
		cmocka_unit_test(test_failed_store_rolls_back),
		cmocka_unit_test(test_hostile_batches),
		cmocka_unit_test(test_memory_bounds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
