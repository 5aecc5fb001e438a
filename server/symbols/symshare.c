/* symshare.c - see symshare.h. */
#include "symshare.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fileid.h"

#include "log.h"
#include "metadb.h"
#include "util.h"

struct symshare {
	struct symbols *symbols;
	int64_t interval_ms;
	pthread_mutex_t pub_mu; /* guards pub */
	struct metadb *pub;     /* the uploads' connection */
	struct metadb *sync;    /* the copying thread's */
	pthread_t thread;
	bool started;
	pthread_mutex_t mu; /* guards stop */
	pthread_cond_t cv;
	bool stop;
	int64_t seen; /* the highest seq copied (the thread's) */
	unsigned scans;
};

static const char symshare_ddl[] =
	"CREATE SEQUENCE IF NOT EXISTS symbol_files_seq;"
	"CREATE TABLE IF NOT EXISTS symbol_files ("
	" scope TEXT NOT NULL,"
	" kind {int} NOT NULL,"
	" name TEXT NOT NULL,"
	" rank {int} NOT NULL,"
	" build_id {blob},"
	" data {blob} NOT NULL,"
	" seq {int} NOT NULL,"
	" PRIMARY KEY (scope, kind, name));"
	"CREATE INDEX IF NOT EXISTS symbol_files_by_seq ON symbol_files (seq)";

static int publish(void *ctx, const char *project, enum symbols_kind kind, const char *name,
		   const uint8_t *build_id, int build_id_len, int rank, const void *data, size_t len,
		   struct buf *err)
{
	struct symshare *sh = ctx;
	struct metadb_stmt *st = NULL;
	int rc = -1;
	pthread_mutex_lock(&sh->pub_mu);
	if (metadb_prepare(sh->pub,
			   "INSERT INTO symbol_files (scope, kind, name, rank, build_id, data, seq) "
			   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, nextval('symbol_files_seq')) "
			   "ON CONFLICT (scope, kind, name) DO UPDATE SET rank = excluded.rank, "
			   "build_id = excluded.build_id, data = excluded.data, seq = excluded.seq "
			   "WHERE symbol_files.rank < excluded.rank",
			   &st, err) == 0) {
		metadb_bind_text(st, 1, project);
		metadb_bind_int64(st, 2, kind);
		metadb_bind_text(st, 3, name);
		metadb_bind_int64(st, 4, rank);
		if (build_id_len > 0)
			metadb_bind_blob(st, 5, build_id, (size_t)build_id_len);
		else
			metadb_bind_null(st, 5);
		metadb_bind_blob(st, 6, data, len);
		rc = metadb_step(st, err) < 0 ? -1 : 0;
	}
	metadb_finalize(st);
	pthread_mutex_unlock(&sh->pub_mu);
	return rc;
}

/* One row's local copy: whether the store here lacks it, or holds it less
 * complete. */
static bool wanted(struct symbols *dst, int64_t kind, const char *name, int64_t rank)
{
	if (kind == SYMBOLS_KIND_CUBIN) {
		uint64_t crc;
		return parse_hex_u64(name, strlen(name), &crc) == 0 && !symbols_have_cubin(dst, crc);
	}
	struct file_id id;
	return fileid_parse_hex(name, &id) == 0 && symbols_rank(symbols_quality(dst, &id)) < rank;
}

/* Fetches one row's data and stores it here (validated as an upload). */
static void fetch(struct symshare *sh, struct symbols *dst, const char *scope, int64_t kind, const char *name)
{
	struct metadb_stmt *st = NULL;
	struct buf err = { 0 };
	if (metadb_prepare(sh->sync, "SELECT data, build_id FROM symbol_files WHERE scope = ?1 AND kind = ?2 "
			   "AND name = ?3", &st, &err) == 0) {
		metadb_bind_text(st, 1, scope);
		metadb_bind_int64(st, 2, kind);
		metadb_bind_text(st, 3, name);
		if (metadb_step(st, &err) == 1) {
			/* The build ID first: a column read as a blob stands only
			 * until the next is (metadb.h). */
			uint8_t bid[64];
			size_t blen = metadb_is_null(st, 1) ? 0 : metadb_bytes(st, 1);
			if (blen <= sizeof(bid) && blen)
				memcpy(bid, metadb_blob(st, 1), blen);
			const void *data = metadb_blob(st, 0);
			size_t len = metadb_bytes(st, 0);
			struct file_id id;
			uint64_t crc;
			int rc = -1;
			if (kind == SYMBOLS_KIND_CUBIN && parse_hex_u64(name, strlen(name), &crc) == 0)
				rc = symbols_put_cubin_local(dst, crc, data, len, &err);
			else if (kind == SYMBOLS_KIND_FILE && fileid_parse_hex(name, &id) == 0 && blen <= 64)
				rc = symbols_put_local(dst, &id, blen ? bid : NULL, (int)blen, data, len, &err);
			else
				buf_puts(&err, "not a symbol file or cubin ember names");
			if (rc < 0)
				log_warn("shared symbols: %s %s: %s", kind == SYMBOLS_KIND_CUBIN ? "cubin" : "file",
					 name, err.data ? err.data : "not stored");
		}
	}
	if (err.data && err.len)
		log_debug("shared symbols: %s", err.data);
	metadb_finalize(st);
	buf_free(&err);
}

/* One pass: the rows past seen (all of them every SYMSHARE_FULL_SCANS
 * passes), each fetched when the store here wants it. */
static void copy_pass(struct symshare *sh)
{
	struct metadb_stmt *st = NULL;
	struct buf err = { 0 };
	int64_t from = sh->scans++ % SYMSHARE_FULL_SCANS == 0 ? 0 : sh->seen - SYMSHARE_SEQ_MARGIN;
	/* (scope, kind, name) of the rows to fetch: read all first, so that
	 * the listing's statement is done before the fetches run. */
	struct want {
		char scope[37];
		char name[FILE_ID_HEX_LEN + 1];
		int64_t kind;
	} *w = NULL;
	size_t nw = 0, capw = 0;
	int64_t top = sh->seen;
	if (metadb_prepare(sh->sync, "SELECT scope, kind, name, rank, seq FROM symbol_files WHERE seq > ?1",
			   &st, &err) == 0) {
		metadb_bind_int64(st, 1, from);
		int r;
		while ((r = metadb_step(st, &err)) == 1) {
			const char *scope = metadb_text(st, 0), *name = metadb_text(st, 2);
			int64_t kind = metadb_int64(st, 1), seq = metadb_int64(st, 4);
			top = seq > top ? seq : top;
			if (strlen(scope) > 36 || strlen(name) > FILE_ID_HEX_LEN)
				continue; /* no row ember wrote */
			struct buf serr = { 0 };
			struct symbols *dst = symbols_scope(sh->symbols, *scope ? scope : NULL, &serr);
			if (dst && wanted(dst, kind, name, metadb_int64(st, 3))) {
				xgrow((void **)&w, &capw, nw + 1, sizeof(*w));
				snprintf(w[nw].scope, sizeof(w[nw].scope), "%s", scope);
				snprintf(w[nw].name, sizeof(w[nw].name), "%s", name);
				w[nw++].kind = kind;
			}
			buf_free(&serr);
		}
		if (r < 0)
			top = sh->seen; /* cut short: read again */
	}
	metadb_finalize(st);
	if (err.data && err.len)
		log_warn("shared symbols: %s", err.data);
	buf_free(&err);
	for (size_t i = 0; i < nw; i++) {
		struct buf serr = { 0 };
		struct symbols *dst = symbols_scope(sh->symbols, *w[i].scope ? w[i].scope : NULL, &serr);
		if (dst)
			fetch(sh, dst, w[i].scope, w[i].kind, w[i].name);
		buf_free(&serr);
	}
	if (nw)
		log_info("shared symbols: %zu copied from the metadata database", nw);
	free(w);
	sh->seen = top;
}

static void *run(void *arg)
{
	struct symshare *sh = arg;
	pthread_mutex_lock(&sh->mu);
	while (!sh->stop) {
		pthread_mutex_unlock(&sh->mu);
		copy_pass(sh);
		pthread_mutex_lock(&sh->mu);
		struct timespec until;
		deadline_in_ms(&until, (uint64_t)sh->interval_ms);
		while (!sh->stop && pthread_cond_timedwait(&sh->cv, &sh->mu, &until) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&sh->mu);
	return NULL;
}

int symshare_open(const char *url, const char *password, struct symbols *s, int64_t interval_ms,
		  struct symshare **out, struct buf *err)
{
	*out = NULL;
	if (!metadb_url_is_postgres(url)) {
		buf_puts(err, "shared symbols: the metadata database must be PostgreSQL");
		return -1;
	}
	struct symshare *sh = xcalloc(1, sizeof(*sh));
	sh->symbols = s;
	sh->interval_ms = interval_ms > 0 ? interval_ms : 1000;
	pthread_mutex_init(&sh->pub_mu, NULL);
	pthread_mutex_init(&sh->mu, NULL);
	cond_init_monotonic(&sh->cv);
	if (metadb_open_schema(url, password, "symbols", 1, symshare_ddl, &sh->pub, err) < 0 ||
	    metadb_open(url, password, &sh->sync, err) < 0) {
		symshare_close(sh);
		return -1;
	}
	if (pthread_create(&sh->thread, NULL, run, sh) != 0) {
		buf_puts(err, "shared symbols: cannot start a thread");
		symshare_close(sh);
		return -1;
	}
	sh->started = true;
	symbols_set_publisher(s, publish, sh);
	*out = sh;
	return 0;
}

void symshare_close(struct symshare *sh)
{
	if (!sh)
		return;
	if (sh->started) {
		symbols_set_publisher(sh->symbols, NULL, NULL);
		thread_stop_join(sh->thread, &sh->mu, &sh->cv, &sh->stop);
	}
	metadb_close(sh->sync);
	metadb_close(sh->pub);
	pthread_cond_destroy(&sh->cv);
	pthread_mutex_destroy(&sh->mu);
	pthread_mutex_destroy(&sh->pub_mu);
	free(sh);
}
