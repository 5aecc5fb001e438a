/* Unit tests: server/store/agents (the profiler inventory) on SQLite (the
 * same SQL runs on PostgreSQL in tests/integration/test_agents_inventory.py):
 * an agent's batches add up, a second replica's add to the same row, the
 * newest fields win, texts from headers are bounded and made printable,
 * an agent without an instance is not noted, the list is the most
 * recently seen first, and what is pending is written at close. */
#include "testutil.h"

#include <string.h>

#include "buf.h"
#include "server/store/agents.h"

struct got {
	struct agent_row rows[8];
	char text[8][6][AGENTS_TEXT_MAX + 1];
	int n;
};

static void on_row(void *ctx, const struct agent_row *r)
{
	struct got *g = ctx;
	if (g->n >= 8)
		return;
	const char *t[6] = { r->instance, r->project, r->host, r->version, r->protocol, r->address };
	g->rows[g->n] = *r;
	for (int i = 0; i < 6; i++)
		snprintf(g->text[g->n][i], sizeof(g->text[g->n][i]), "%s", t[i]);
	g->n++;
}

static void list(struct agents *a, struct got *g)
{
	struct buf err = { 0 };
	bool unavailable = true;
	memset(g, 0, sizeof(*g));
	assert_int_equal(agents_list(a, on_row, g, &unavailable, &err), 0);
	assert_false(unavailable);
	buf_free(&err);
}

static void test_inventory(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	struct buf url = { 0 }, err = { 0 };
	buf_printf(&url, "%s/meta.db", dir);
	struct agents *a = NULL, *b = NULL;
	assert_int_equal(agents_open(url.data, NULL, &a, &err), 0);
	assert_int_equal(agents_open(url.data, NULL, &b, &err), 0); /* a second replica */
	const int64_t t0 = 1800000000000LL;
	struct agent_note n = { .instance = "agent-1", .project = "p1", .host = "node-1",
				.version = "ember-agent/1.0", .protocol = "ember v2", .address = "10.0.0.1",
				.host_cpus = 8, .samples = 100 };
	agents_seen(a, &n, t0);
	agents_seen(a, &n, t0 + 1000);
	n.samples = 50;
	n.version = "ember-agent/1.1";
	agents_seen(b, &n, t0 + 2000);
	/* hostile texts: bounded, printable ASCII */
	char longhost[1000];
	memset(longhost, 'h', sizeof(longhost) - 1);
	longhost[sizeof(longhost) - 1] = '\0';
	struct agent_note h = { .instance = "agent-2", .project = "p2", .host = longhost,
				.version = "bad\x01\xff", .protocol = "ember v1", .samples = 1 };
	agents_seen(a, &h, t0 - 5000);
	struct agent_note none = { .instance = "", .samples = 7 };
	agents_seen(a, &none, t0);
	agents_flush(a, t0 + 3000);
	agents_flush(b, t0 + 3000);
	struct got g;
	list(a, &g);
	assert_int_equal(g.n, 2);
	assert_string_equal(g.text[0][0], "agent-1"); /* the most recently seen first */
	assert_int_equal(g.rows[0].batches, 3);
	assert_int_equal(g.rows[0].samples, 250);
	assert_int_equal(g.rows[0].first_seen_ms, t0);
	assert_int_equal(g.rows[0].last_seen_ms, t0 + 2000);
	assert_int_equal(g.rows[0].host_cpus, 8);
	assert_string_equal(g.text[0][3], "ember-agent/1.1");
	assert_string_equal(g.text[0][2], "node-1");
	assert_int_equal(strlen(g.text[1][2]), AGENTS_TEXT_MAX);
	assert_string_equal(g.text[1][3], "bad??");
	assert_string_equal(g.text[1][5], "");
	/* pending news are written at close; the other replica lists them */
	n.samples = 1;
	agents_seen(a, &n, t0 + 4000);
	agents_close(a);
	list(b, &g);
	assert_int_equal(g.rows[0].batches, 4);
	assert_int_equal(g.rows[0].samples, 251);
	assert_int_equal(g.rows[0].last_seen_ms, t0 + 4000);
	agents_close(b);
	/* a directory is no database: refused with a message */
	a = (struct agents *)&url;
	assert_int_equal(agents_open(dir, NULL, &a, &err), -1);
	assert_true(a == NULL && err.len > 0);
	buf_free(&err);
	buf_free(&url);
	rm_rf(dir);
	free(dir);
}

UNIT_TEST_MAIN(cmocka_unit_test(test_inventory))
