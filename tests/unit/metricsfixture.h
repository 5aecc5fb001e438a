/* metricsfixture.h - a metrics store in a fresh temporary directory, for
 * the tests of the metrics store and of the routes that read it
 * (test_metrics.c, test_gputopo.c). The fixture owns the directory and
 * the store; metrics_fixture_close removes both. */
#ifndef EMBER_TESTS_METRICSFIXTURE_H
#define EMBER_TESTS_METRICSFIXTURE_H

#include "testutil.h"

#include <jansson.h>

#include "buf.h"
#include "server/metrics/metrics.h"

struct metrics_fixture {
	char *dir;
	struct metrics_store *st;
};

/* Opens a store keeping retention_ms of points; fails the test if it
 * cannot. */
static inline struct metrics_store *metrics_fixture_open(struct metrics_fixture *f, int64_t retention_ms)
{
	struct buf err = { 0 };
	f->dir = make_temp_dir();
	if (metrics_open_dir(f->dir, retention_ms, &f->st, &err) != 0)
		fail_msg("metrics_open: %s", err.data ? err.data : "?");
	buf_free(&err);
	return f->st;
}

static inline void metrics_fixture_close(struct metrics_fixture *f)
{
	metrics_close(f->st);
	rm_temp_dir(f->dir);
}

/* A route that reads the store: metrics_query, metrics_names, gputopo_query. */
typedef int (*metrics_route_fn)(struct metrics_store *m, const char *project, const char *body,
				size_t len, struct buf *out, struct buf *err);

/* Runs route for project "p" over the body printf(fmt, ap); fails the
 * test unless it returns want. The answer parsed (want 0), or
 * {"error": message}; the caller frees it. */
static inline json_t *metrics_fixture_vquery(metrics_route_fn route, struct metrics_store *st, int want,
					     const char *fmt, va_list ap)
{
	char body[1024];
	vsnprintf(body, sizeof(body), fmt, ap);
	struct buf out = { 0 }, err = { 0 };
	int rc = route(st, "p", body, strlen(body), &out, &err);
	if (rc != want)
		fail_msg("%s: %d %s", body, rc, err.data ? err.data : "");
	json_t *doc = rc == 0 ? json_loads(out.data, 0, NULL) : json_pack("{s:s}", "error", err.data);
	assert_non_null(doc);
	buf_free(&out);
	buf_free(&err);
	return doc;
}

#endif
