/* claims.c - see claims.h. */
#include "claims.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/random.h>

#include "log.h"
#include "metadb.h"
#include "util.h"

struct ch_claims {
	pthread_mutex_t mu;
	struct metadb *db;
};

static const char claims_ddl[] =
	"CREATE TABLE IF NOT EXISTS ch_batch_claims ("
	" batch TEXT PRIMARY KEY,"
	" token {int} NOT NULL,"
	" claimed_ms {int} NOT NULL)";

void ch_claims_close(struct ch_claims *c)
{
	if (!c)
		return;
	metadb_close(c->db);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

int ch_claims_open(const char *url, const char *password, struct ch_claims **out,
		   struct buf *err)
{
	*out = NULL;
	struct ch_claims *c = xcalloc(1, sizeof(*c));
	pthread_mutex_init(&c->mu, NULL);
	if (metadb_open(url, password, &c->db, err) < 0 ||
	    metadb_migrate(c->db, "ch_claims", 1, claims_ddl, err) < 0) {
		ch_claims_close(c);
		return -1;
	}
	*out = c;
	return 0;
}

/* Runs one statement with up to three parameters (batch text, then
 * integers); the rows it changed, or -1 with err set. */
static long run(struct ch_claims *c, const char *sql, const char *batch, int nint,
		const int64_t *ints, struct buf *err)
{
	struct metadb_stmt *st = NULL;
	long changed = -1;
	if (metadb_prepare(c->db, sql, &st, err) == 0) {
		int i = 1;
		if (batch)
			metadb_bind_text(st, i++, batch);
		for (int k = 0; k < nint; k++)
			metadb_bind_int64(st, i++, ints[k]);
		if (metadb_step(st, err) >= 0)
			changed = metadb_changes(st);
	}
	metadb_finalize(st);
	return changed;
}

int ch_claims_take(struct ch_claims *c, const char *batch, int64_t now_ms, int64_t *token,
		   bool *unavailable, struct buf *err)
{
	*unavailable = false;
	uint64_t r = 0;
	if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
		buf_puts(err, "no random bytes for a batch claim");
		return -1;
	}
	*token = (int64_t)(r >> 1); /* positive: a BIGINT either way */
	/* New, or taken over from a claim whose lease ran out: one row
	 * changed. Another's fresh claim: none. */
	const int64_t args[3] = { *token, now_ms, now_ms - CH_CLAIM_LEASE_MS };
	pthread_mutex_lock(&c->mu);
	long n = run(c,
		     "INSERT INTO ch_batch_claims (batch, token, claimed_ms) VALUES (?1, ?2, ?3) "
		     "ON CONFLICT(batch) DO UPDATE SET token = excluded.token, "
		     "claimed_ms = excluded.claimed_ms WHERE ch_batch_claims.claimed_ms < ?4",
		     batch, 3, args, err);
	if (n < 0)
		*unavailable = metadb_unavailable(c->db);
	pthread_mutex_unlock(&c->mu);
	return n < 0 ? -1 : n > 0;
}

void ch_claims_release(struct ch_claims *c, const char *batch, int64_t token)
{
	struct buf err = { 0 };
	pthread_mutex_lock(&c->mu);
	long n = run(c, "DELETE FROM ch_batch_claims WHERE batch = ?1 AND token = ?2", batch, 1,
		     &token, &err);
	pthread_mutex_unlock(&c->mu);
	if (n < 0)
		log_warn("clickhouse store: a batch claim stays until its lease ends: %s", err.data);
	buf_free(&err);
}

long ch_claims_expire(struct ch_claims *c, int64_t before_ms)
{
	struct buf err = { 0 };
	pthread_mutex_lock(&c->mu);
	long n = run(c, "DELETE FROM ch_batch_claims WHERE claimed_ms < ?1", NULL, 1, &before_ms, &err);
	pthread_mutex_unlock(&c->mu);
	if (n < 0)
		log_warn("clickhouse store: old batch claims not deleted: %s", err.data);
	buf_free(&err);
	return n;
}
