/* open.c - opening the store: blocks, lineage, log replay; see store.h and docs/internals/store.md. */
#include "store_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

/* --- opening: blocks, lineage, log replay ----------------------------------------- */

static int parse_gen(const char *name, const char *suffix, uint64_t *gen)
{
	size_t n = strlen(name), sl = strlen(suffix);
	if (n <= sl || strcmp(name + n - sl, suffix) != 0 || n - sl > 20)
		return -1;
	char digits[24];
	memcpy(digits, name, n - sl);
	digits[n - sl] = '\0';
	return parse_u64(digits, gen);
}

int st_cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

int st_cmp_sref_gen(const void *a, const void *b)
{
	const struct sref *x = *(struct sref *const *)a, *y = *(struct sref *const *)b;
	return x->gen < y->gen ? -1 : x->gen > y->gen;
}

/* Lists names ending in suffix in dir as generations, sorted. */
static int list_gens(const char *dir, const char *suffix, uint64_t **out, size_t *n,
		     struct buf *err)
{
	DIR *d = opendir(dir);
	if (!d) {
		buf_printf(err, "cannot read %s: %s", dir, strerror(errno));
		return -1;
	}
	size_t cap = 0;
	*n = 0;
	*out = NULL;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		uint64_t g;
		if (parse_gen(e->d_name, suffix, &g) == 0) {
			xgrow((void **)out, &cap, *n + 1, sizeof(uint64_t));
			(*out)[(*n)++] = g;
		}
	}
	closedir(d);
	if (*n)
		xqsort(*out, *n, sizeof(uint64_t), cmp_u64);
	return 0;
}

void st_block_file(const struct store *s, uint64_t gen, const char *suffix, struct buf *out)
{
	buf_reset(out);
	buf_printf(out, "%s/%016llu%s", s->blocks_dir, (unsigned long long)gen, suffix);
}

void st_remove_file(const char *path, const char *why)
{
	if (unlink(path) < 0 && errno != ENOENT)
		log_error("cannot delete %s: %s", path, strerror(errno));
	else
		log_info("store: deleted %s (%s)", path, why);
}

/* Makes the creations and deletions of names in dir durable. */
void st_sync_dir(const char *dir)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return;
	if (fsync(dfd) < 0)
		log_warn("syncing %s: %s", dir, strerror(errno));
	close(dfd);
}

static bool gen_in(const uint64_t *set, size_t n, uint64_t g)
{
	return n && bsearch(&g, set, n, sizeof(uint64_t), cmp_u64) != NULL;
}

int st_open_blocks(struct store *s, uint64_t *wals, size_t *nwals, struct buf *err)
{
	uint64_t *gens;
	size_t n;
	if (list_gens(s->blocks_dir, ".blk", &gens, &n, err) < 0)
		return -1;
	struct block **blks = xcalloc(n ? n : 1, sizeof(*blks));
	uint64_t *superseded = NULL;
	size_t nsup = 0, capsup = 0;
	struct buf path = { 0 };
	/* Unfinished writes: never referenced, deleted. */
	uint64_t *tmps;
	size_t ntmp;
	if (list_gens(s->blocks_dir, ".tmp", &tmps, &ntmp, err) < 0) {
		free_all(gens, blks);
		return -1;
	}
	for (size_t i = 0; i < ntmp; i++) {
		st_block_file(s, tmps[i], ".tmp", &path);
		st_remove_file(path.data, "an unfinished block write");
		s->next_gen = MAX(s->next_gen, tmps[i] + 1);
	}
	free(tmps);
	for (size_t i = 0; i < n; i++) {
		/* Numbers are never reused, even a damaged block's. */
		s->next_gen = MAX(s->next_gen, gens[i] + 1);
		st_block_file(s, gens[i], ".blk", &path);
		struct buf berr = { 0 };
		if (block_open(path.data, &blks[i], &berr) < 0) {
			log_error("store: %s; the block is skipped and kept as %s.corrupt", berr.data,
				  path.data);
			struct buf to = { 0 };
			buf_printf(&to, "%s.corrupt", path.data);
			if (rename(path.data, to.data) < 0)
				log_error("cannot move %s aside: %s", path.data, strerror(errno));
			buf_free(&to);
			s->stats.corrupt_blocks++;
			buf_free(&berr);
			continue;
		}
		const struct block_info *in = block_info(blks[i]);
		for (size_t k = 0; k < in->nsources; k++) {
			xgrow((void **)&superseded, &capsup, nsup + 1, sizeof(uint64_t));
			superseded[nsup++] = in->sources[k];
		}
		s->next_gen = MAX(s->next_gen, gens[i] + 1);
	}
	if (nsup)
		xqsort(superseded, nsup, sizeof(uint64_t), cmp_u64);
	for (size_t i = 0; i < n; i++) {
		if (!blks[i])
			continue;
		const struct block_info *in = block_info(blks[i]);
		bool replaced = gen_in(superseded, nsup, gens[i]);
		/* A flush deletes its logs lowest first, and that first
		 * deletion is its commit: while the lowest log exists the flush
		 * did not finish, the block goes and the logs are replayed.
		 * Once it is gone, logs of the block's range still here are
		 * the rest of a deletion a crash cut short: they are deleted,
		 * not replayed (their rows are in the block). No other part
		 * ever covers them: only a head that replayed logs at a start
		 * covers several, and its first seal starts a new log, so
		 * heads share only a log that is a whole range of each. */
		bool unfinished = in->wal_lo && gen_in(wals, *nwals, in->wal_lo);
		if (!replaced && !unfinished && in->gen == gens[i] && in->wal_lo) {
			size_t kept = 0;
			for (size_t w = 0; w < *nwals; w++) {
				if (wals[w] > in->wal_lo && wals[w] <= in->wal_hi) {
					wal_path(s->wal_dir, wals[w], &path);
					st_remove_file(path.data, "the rest of a flushed log range");
					continue;
				}
				wals[kept++] = wals[w];
			}
			*nwals = kept;
		}
		if (replaced || unfinished || in->gen != gens[i]) {
			block_close(blks[i]);
			st_block_file(s, gens[i], ".blk", &path);
			st_remove_file(path.data, replaced ? "replaced by a compacted block"
					       : unfinished ? "an unfinished flush; its log is replayed"
							    : "its name and footer disagree");
			continue;
		}
		for (size_t k = 0; k < in->nagents; k++)
			st_note_agent(s, in->agents[k].instance, in->agents[k].seq);
		xgrow((void **)&s->parts, &s->capparts, s->nparts + 1, sizeof(*s->parts));
		s->parts[s->nparts++] = sref_from_block(blks[i]);
		s->stats.blocks++;
		s->stats.block_bytes += in->file_bytes;
		s->stats.block_rows += in->rows;
		s->stats.block_samples += in->samples;
	}
	buf_free(&path);
	free_all(superseded, blks, gens);
	if (s->nparts)
		xqsort(s->parts, s->nparts, sizeof(*s->parts), st_cmp_sref_gen);
	return 0;
}

/* Seals the head: it joins the parts, and a new empty head covering log
 * `wal` takes its place, starting with the old one's dictionaries while
 * they use at most head_dict_bytes: what the agents send next is mostly
 * what they sent, so it is found in the copies rather than added again,
 * and the sessions' maps to its ids stay valid (same dict_id). Nothing
 * may be writing the head. Takes list_mu. Returns the sealed part. */
struct sref *st_swap_head(struct store *s, uint64_t wal)
{
	struct sref *old = s->head, *n = sref_new();
	part_init(&n->part, 1);
	if (part_dict_memory(&old->part) <= s->cfg.head_dict_bytes)
		part_copy_dictionaries(&n->part, &old->part);
	n->loaded = true;
	n->gen = s->next_gen++;
	n->wal_lo = n->wal_hi = wal;
	pthread_mutex_lock(&s->list_mu);
	old->min_ts = old->part.min_ts;
	old->max_ts = old->part.max_ts;
	xgrow((void **)&s->parts, &s->capparts, s->nparts + 1, sizeof(*s->parts));
	s->parts[s->nparts++] = old;
	s->head = n;
	s->stats.head_rows = 0;
	pthread_mutex_unlock(&s->list_mu);
	return old;
}

struct replay_ctx {
	struct store *s;
	struct part *head;
	void *state[256];       /* each codec's replay state, by record type */
	uint64_t rows, samples; /* replayed, whether still in the head or written */
	uint32_t head_no;       /* the head's number in this replay, from 1 */
	int missing;            /* a record type without a codec, plus one (0: none) */
};

/* At a start, before any other thread runs: the replay head becomes a
 * sealed part and is written as blocks at once, and a new head (swap_head,
 * as at a seal) replays on, so a log of many heads is
 * replayed holding one head in memory. Called when the head reaches
 * head_max_rows and before a head with rows goes on to the next log, so
 * a part written here holds rows of one log: its blocks name that log as
 * their range and are not committed while it exists (open_blocks: a
 * crash before it goes drops them and replays the log again). A write
 * that fails leaves the part in memory for the maintenance thread. */
static void replay_seal(struct replay_ctx *rc)
{
	struct store *s = rc->s;
	struct sref *old = st_swap_head(s, s->head->wal_hi);
	s->stats.unflushed_rows += old->part.rows;
	rc->head = &s->head->part;
	rc->head_no++; /* the sessions' series ids were the old head's */
	struct buf err = { 0 };
	if (st_flush_one(s, &err) < 0)
		log_error("store: writing replayed rows as a block failed (%s); they stay in memory "
			  "and are written later", err.data);
	buf_free(&err);
}

/* A log record (store.h: the record payloads), through its type's codec. */
static int replay_record(void *ctx, const uint8_t *p, size_t len)
{
	struct replay_ctx *rc = ctx;
	uint8_t type = 0;
	if (len >= 2 && p[0] == 0) {
		type = p[1];
		p += 2;
		len -= 2;
	}
	const struct store_codec *c = rc->s->codecs[type];
	if (!c) {
		if (!rc->missing)
			rc->missing = type + 1;
		return -1;
	}
	if (len < 1 || p[0] == 0 || (size_t)p[0] + 1 > len)
		return -1;
	char project[256];
	memcpy(project, p + 1, p[0]);
	project[p[0]] = '\0';
	const uint8_t *body = p + 1 + p[0];
	size_t blen = len - 1 - p[0];
	uint64_t rows = rc->head->rows, samples = rc->head->samples;
	struct store_head w = { rc->head };
	struct store_replayed out = { .agent_instance = "" };
	if (c->replay(rc->state[type], project, body, blen, &w, rc->head_no, &out) < 0)
		return -1;
	out.agent_instance[STORE_AGENT_MAX] = '\0';
	if (out.agent_instance[0])
		st_note_agent(rc->s, out.agent_instance, out.sequence);
	rc->s->stats.batches++;
	rc->rows += rc->head->rows - rows;
	rc->samples += rc->head->samples - samples;
	if (rc->head->rows >= rc->s->cfg.head_max_rows)
		replay_seal(rc);
	return 0;
}

/* Ends every codec's replay. */
static void replay_end(struct replay_ctx *rc)
{
	for (size_t t = 0; t < 256; t++)
		if (rc->s->codecs[t] && rc->s->codecs[t]->replay_end && rc->state[t])
			rc->s->codecs[t]->replay_end(rc->state[t]);
}

int st_noop_record(void *ctx, const uint8_t *p, size_t len)
{
	(void)ctx;
	(void)p;
	(void)len;
	return 0;
}


static int make_dir(const char *path, struct buf *err)
{
	if (mkdir(path, 0755) < 0 && errno != EEXIST) {
		buf_printf(err, "cannot create %s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

int store_open(const char *dir, const struct store_config *cfg, struct store **out,
	       struct buf *err)
{
	struct store *s = xcalloc(1, sizeof(*s));
	if (cfg)
		s->cfg = *cfg;
	else
		store_config_default(&s->cfg);
	if (!s->cfg.block_granularity_ms)
		s->cfg.block_granularity_ms = 1;
	s->dir = xstrdup(dir);
	struct buf p = { 0 };
	buf_printf(&p, "%s/blocks", dir);
	s->blocks_dir = buf_steal(&p, NULL);
	buf_printf(&p, "%s/wal", dir);
	s->wal_dir = buf_steal(&p, NULL);
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	pthread_mutex_init(&s->list_mu, NULL);
	pthread_mutex_init(&s->maint_mu, NULL);
	pthread_mutex_init(&s->stop_mu, NULL);
	pthread_cond_init(&s->stop_cv, NULL);
	strtab_init(&s->agent_names);
	s->queue_tail = &s->queue;
	s->wal.fd = -1;
	s->next_gen = 1;
	if (make_dir(dir, err) < 0 || make_dir(s->blocks_dir, err) < 0 ||
	    make_dir(s->wal_dir, err) < 0) {
		store_close(s);
		return -1;
	}
	uint64_t t0 = now_mono_ns();
	/* The log of the first storage engine, replayed once as generation 1. */
	buf_printf(&p, "%s/samples.wal", dir);
	struct stat st;
	uint64_t *wals = NULL;
	size_t nwals = 0;
	if (stat(p.data, &st) == 0) {
		struct buf to = { 0 };
		if (list_gens(s->wal_dir, ".log", &wals, &nwals, err) < 0) {
			buf_free(&p);
			store_close(s);
			return -1;
		}
		wal_path(s->wal_dir, nwals ? wals[0] - 1 : 1, &to);
		if (!nwals || wals[0] > 1) {
			if (rename(p.data, to.data) < 0)
				log_error("cannot move %s to %s: %s", p.data, to.data, strerror(errno));
			else
				log_info("store: the old log %s is replayed as %s", p.data, to.data);
		}
		buf_free(&to);
		free(wals);
	}
	buf_free(&p);
	for (size_t i = 0; i < s->cfg.ncodecs; i++) {
		const struct store_codec *c = s->cfg.codecs[i];
		if (s->codecs[c->type]) {
			buf_printf(err, "two codecs for log records of type %u (%s, %s)", c->type,
				   s->codecs[c->type]->name, c->name);
			store_close(s);
			return -1;
		}
		s->codecs[c->type] = c;
	}
	if (list_gens(s->wal_dir, ".log", &wals, &nwals, err) < 0 ||
	    st_open_blocks(s, wals, &nwals, err) < 0) {
		free(wals);
		store_close(s);
		return -1;
	}
	for (size_t i = 0; i < nwals; i++)
		s->next_gen = MAX(s->next_gen, wals[i] + 1);

	/* Every log left is replayed into the head, which then covers them. */
	s->head = sref_new();
	part_init(&s->head->part, 1);
	s->head->loaded = true;
	s->head->gen = s->next_gen++;
	struct replay_ctx rc = { .s = s, .head = &s->head->part, .head_no = 1 };
	for (size_t t = 0; t < 256; t++)
		if (s->codecs[t] && s->codecs[t]->replay_begin)
			rc.state[t] = s->codecs[t]->replay_begin();
	for (size_t i = 0; i < nwals; i++) {
		struct wal_file w;
		/* Rows of one log per written part (replay_seal); the head,
		 * empty here, covers this log. */
		if (s->head->part.rows)
			replay_seal(&rc);
		s->head->wal_lo = s->head->wal_hi = wals[i];
		if (wal_open(s->wal_dir, wals[i], replay_record, &rc, &w,
			     &s->stats.wal_skipped_records, err) < 0) {
			free(wals);
			replay_end(&rc);
			store_close(s);
			return -1;
		}
		wal_close(&w);
		if (rc.missing) {
			/* Its records would be lost with the log once the head
			 * is written: refuse to start rather than drop them. */
			struct buf path = { 0 };
			wal_path(s->wal_dir, wals[i], &path);
			buf_printf(err, "the log %s holds records of type %d, which no registered codec "
					"reads (store_config.codecs)", path.data, rc.missing - 1);
			buf_free(&path);
			free(wals);
			replay_end(&rc);
			store_close(s);
			return -1;
		}
	}
	s->logs = wals;
	s->nlogs = s->caplogs = nwals;
	s->rotate_next = nwals > 0;
	replay_end(&rc);
	uint64_t gen = s->next_gen++;
	if (wal_open(s->wal_dir, gen, st_noop_record, NULL, &s->wal, &s->stats.wal_skipped_records,
		     err) < 0) {
		store_close(s);
		return -1;
	}
	xgrow((void **)&s->logs, &s->caplogs, s->nlogs + 1, sizeof(uint64_t));
	s->logs[s->nlogs++] = gen;
	s->log_heads = 1;
	s->wal_synced = s->wal.size;
	if (!s->head->wal_lo)
		s->head->wal_lo = gen;
	s->head->wal_hi = gen;
	s->head->min_ts = s->head->part.min_ts;
	s->head->max_ts = s->head->part.max_ts;
	if (s->head->part.rows)
		s->head->first_row_mono_ms = st_mono_ms();
	s->stats.rows = rc.rows;
	s->stats.samples = rc.samples;
	s->stats.head_rows = s->head->part.rows;
	s->stats.unflushed_rows += s->head->part.rows;
	log_info("store: %s opened in %.1f ms: %zu blocks (%llu rows), %llu rows replayed from logs "
		 "(%llu of them written as blocks while replaying)",
		 dir, (double)(now_mono_ns() - t0) / 1e6, s->nparts,
		 (unsigned long long)s->stats.block_rows, (unsigned long long)rc.rows,
		 (unsigned long long)(rc.rows - s->head->part.rows));
	if (s->cfg.background) {
		if (pthread_create(&s->thread, NULL, st_maintenance, s) != 0) {
			buf_puts(err, "cannot start the store's st_maintenance thread");
			store_close(s);
			return -1;
		}
		s->thread_started = true;
	}
	*out = s;
	return 0;
}

void store_close(struct store *s)
{
	if (!s)
		return;
	if (s->backend.write) {
		s->backend.write->close(s);
		return;
	}
	if (s->thread_started) {
		thread_stop_join(s->thread, &s->stop_mu, &s->stop_cv, &s->stop);
	}
	if (s->wal.path)
		wal_close(&s->wal);
	if (s->head)
		sref_put(s, s->head);
	for (size_t i = 0; i < s->nparts; i++)
		sref_put(s, s->parts[i]);
	free_all(s->parts, s->logs);
	strtab_free(&s->agent_names);
	free(s->agent_seq);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->list_mu);
	pthread_mutex_destroy(&s->maint_mu);
	pthread_mutex_destroy(&s->stop_mu);
	pthread_cond_destroy(&s->stop_cv);
	free_all(s->dir, s->blocks_dir, s->wal_dir, s);
}
