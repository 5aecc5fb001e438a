/* chstore.c - the storage interface over ClickHouse: see chstore.h. */
#include "chstore.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "chttp.h"
#include "claims.h"
#include "hmap.h"
#include "log.h"
#include "rowbinary.h"
#include "schema.h"
#include "server/store/part.h"
#include "strtab.h"
#include "util.h"

#define CH_READ_MAX_RESPONSE (512u << 20) /* a view's answers: bounded, large */

/* Content hashes of dictionary rows (strings, files, frames, stacks,
 * label sets) ClickHouse acknowledged: a batch leaves them out, as the
 * wire protocol sends each stack once. A cache, not a record: cleared
 * when it holds SENT_MAX, after which rows are sent again (harmless:
 * ReplacingMergeTree folds them). The seeds per table keep the hashes of
 * two tables apart. */
#define SENT_MAX (1u << 20)
struct sent {
	pthread_mutex_t mu;
	struct hmap index;
	uint64_t *h;
	size_t n, cap;
};

#define CH_SENDERS 4

/* One append waiting in the group commit queue. */
struct pending {
	const struct part *p;
	struct ch_batch *b;
	enum ch_rc rc;
	enum ch_insert_result res;
	struct buf err;
	bool done;
	struct pending *next;
};

struct chs {
	struct store_backend backend; /* first: a struct store's handle begins so */
	struct ch_pool *pool;         /* connections (chttp.h) */
	uint64_t sums_piece_rows;     /* CH_SUMS_PIECE_ROWS, or the environment's */
	char *urls, *database, *user, *password_file, *ca_file, *cluster;
	struct store_config cfg;
	const struct store_codec *codecs[256];
	pthread_mutex_t index_mu; /* index() calls one at a time; gen below */
	uint64_t gen;
	pthread_mutex_t stats_mu;
	struct store_stats stats;
	/* Hosts whose CPU count was sent (by name, the count beside), so a
	 * batch sends a host only when it is new or has more CPUs; cleared
	 * when it grows past HOSTS_SENT_MAX. Under hosts_mu. */
	struct sent sent;
	/* Group commit: appends queue their encoded batches; up to
	 * CH_SENDERS threads at a time each take what is queued (up to
	 * CH_MAX_BATCH_ROWS samples) and send it as one group
	 * (ch_insert_batches). Under q_mu. */
	pthread_mutex_t q_mu;
	pthread_cond_t q_cv;
	struct pending *queue, **queue_tail;
	int senders;
	/* the ids of the batches being sent (not random ones): a batch of
	 * the same id waits for them, so its dedup look-up sees them */
	uint64_t *inflight;
	size_t ninflight, capinflight;
	/* The retention thread (cfg.background): drops the day partitions
	 * older than cfg.retention_ms at the start and then hourly. */
	pthread_t retention;
	bool retention_started, stop;
	pthread_mutex_t stop_mu;
	pthread_cond_t stop_cv;
	struct ch_claims *claims; /* NULL: one replica, no claims */
	pthread_mutex_t hosts_mu;
	struct strtab hosts_sent;
	uint32_t *hosts_cpus;
	size_t caphosts_cpus;
};

#define HOSTS_SENT_MAX 100000


static const char *const kind_names[] = { "on_cpu", "off_cpu", "cuda", "alloc" };

static const char *kind_name(uint8_t kind)
{
	return kind >= 1 && kind <= 4 ? kind_names[kind - 1] : "";
}

static uint8_t kind_of(const char *s, size_t n)
{
	for (uint8_t k = 0; k < 4; k++)
		if (strlen(kind_names[k]) == n && !memcmp(kind_names[k], s, n))
			return (uint8_t)(k + 1);
	return 0;
}

/* A per-series read (load_sums) of more rows than this goes in pieces: 4 M
 * groups hold a few hundred MiB in ClickHouse and answer in under
 * CH_READ_MAX_RESPONSE (72 bytes a row). EMBER_CLICKHOUSE_SUMS_PIECE_ROWS
 * sets another bound (a ClickHouse allowing a query less memory, or
 * tests); read once, at open. */
#define CH_SUMS_PIECE_ROWS 4000000ull

static uint64_t sums_piece_rows(void)
{
	const char *e = getenv("EMBER_CLICKHOUSE_SUMS_PIECE_ROWS");
	if (!e || !*e)
		return CH_SUMS_PIECE_ROWS;
	char *end;
	errno = 0;
	unsigned long long n = strtoull(e, &end, 10);
	if (errno || *end || n == 0 || n > CH_SUMS_PIECE_ROWS * 1000) {
		log_warn("EMBER_CLICKHOUSE_SUMS_PIECE_ROWS=%s: expected 1 to %llu rows; %llu used", e,
			 CH_SUMS_PIECE_ROWS * 1000, CH_SUMS_PIECE_ROWS);
		return CH_SUMS_PIECE_ROWS;
	}
	return n;
}

/* --- connections --------------------------------------------------------------- */

static struct ch_conn *conn_get(struct chs *s, size_t max_response, struct buf *err)
{
	return ch_pool_get(s->pool, max_response, err);
}

/* Pooled connections are the insert path's (default answer size). */
static void conn_put(struct chs *s, struct ch_conn *c, bool pooled)
{
	ch_pool_put(s->pool, c, pooled);
}

/* --- writing -------------------------------------------------------------------- */

struct sent_key {
	const struct sent *s;
	uint64_t h;
};

static bool eq_sent(const void *ctx, uint32_t idx)
{
	const struct sent_key *k = ctx;
	return k->s->h[idx] == k->h;
}

static bool sent_has(struct sent *s, uint64_t h)
{
	struct sent_key k = { s, h };
	uint32_t idx;
	pthread_mutex_lock(&s->mu);
	bool found = hmap_find(&s->index, hash_u64(h), eq_sent, &k, &idx);
	pthread_mutex_unlock(&s->mu);
	return found;
}

/* Notes hashes as acknowledged. */
static void sent_add(struct sent *s, const uint64_t *h, size_t n)
{
	pthread_mutex_lock(&s->mu);
	if (s->n + n > SENT_MAX) {
		hmap_clear(&s->index);
		s->n = 0;
	}
	for (size_t i = 0; i < n && s->n < SENT_MAX; i++) {
		struct sent_key k = { s, h[i] };
		uint32_t idx;
		if (hmap_find(&s->index, hash_u64(h[i]), eq_sent, &k, &idx))
			continue;
		xgrow((void **)&s->h, &s->cap, s->n + 1, sizeof(uint64_t));
		s->h[s->n] = h[i];
		hmap_insert(&s->index, hash_u64(h[i]), (uint32_t)s->n++);
	}
	pthread_mutex_unlock(&s->mu);
}

/* One head's content as a batch: per-id hashes of what was sent (0: not
 * yet), so each string, frame, stack and label set goes once. */
struct enc {
	const struct part *p;
	struct ch_batch *b;
	struct sent *sent;
	uint64_t *added; /* hashes of the dictionary rows this batch sends */
	size_t nadded, capadded;
	uint64_t *sstr, *frame, *node, *labels, *file;
};

/* Whether the row of hash h is to be sent: not acknowledged before;
 * noted as this batch's. */
static bool enc_new(struct enc *x, uint64_t h)
{
	if (sent_has(x->sent, h))
		return false;
	xgrow((void **)&x->added, &x->capadded, x->nadded + 1, sizeof(uint64_t));
	x->added[x->nadded++] = h;
	return true;
}

static uint64_t enc_sstr(struct enc *x, uint32_t id)
{
	if (x->sstr[id])
		return x->sstr[id];
	const char *s = strtab_get(&x->p->sstr, id);
	size_t n = strtab_len(&x->p->sstr, id);
	uint64_t h = ch_string_hash(s, n);
	if (enc_new(x, h))
		ch_batch_string(x->b, s, n);
	return x->sstr[id] = h;
}

static uint64_t enc_file(struct enc *x, uint32_t i)
{
	if (x->file[i])
		return x->file[i];
	const struct store_file *f = &x->p->files[i];
	struct ch_file cf = { .id = f->id.b, .name = strtab_get(&x->p->sstr, f->name),
			      .name_len = strtab_len(&x->p->sstr, f->name), .build_id = f->build_id,
			      .build_id_len = MIN(f->build_id_len, sizeof(f->build_id)),
			      .segs = &f->segs[0][0], .nsegs = MIN(f->nsegs, STORE_FILE_SEGMENTS) };
	uint64_t h = ch_file_hash(&cf);
	if (enc_new(x, h))
		ch_batch_file(x->b, &cf);
	return x->file[i] = h;
}

static uint64_t enc_frame(struct enc *x, uint32_t id)
{
	if (x->frame[id])
		return x->frame[id];
	const struct store_frame *f = &x->p->frames[id];
	struct ch_frame cf = { .type = f->type, .address = f->address,
			       .function = enc_sstr(x, f->name), .binary = enc_sstr(x, f->binary),
			       .build_id = enc_sstr(x, 0) };
	if (f->file && f->file <= x->p->nfiles) {
		const struct store_file *file = &x->p->files[f->file - 1];
		const char *bid = (const char *)file->build_id;
		size_t blen = MIN(file->build_id_len, sizeof(file->build_id));
		cf.build_id = ch_string_hash(bid, blen);
		if (enc_new(x, cf.build_id))
			ch_batch_string(x->b, bid, blen);
		cf.file = enc_file(x, f->file - 1);
	}
	uint64_t h = ch_frame_hash(&cf);
	if (enc_new(x, h))
		ch_batch_frame(x->b, &cf);
	return x->frame[id] = h;
}

static uint64_t enc_stack(struct enc *x, uint32_t node, uint64_t **path, size_t *cap)
{
	if (node >= x->p->nnodes)
		node = 0;
	if (x->node[node])
		return x->node[node];
	size_t depth = 0;
	for (uint32_t n = node; n; n = x->p->node_parent[n])
		depth++;
	xgrow((void **)path, cap, depth + 1, sizeof(uint64_t));
	size_t d = depth;
	for (uint32_t n = node; n; n = x->p->node_parent[n])
		(*path)[--d] = enc_frame(x, x->p->node_frame[n]);
	uint64_t h = ch_stack_hash(*path, depth);
	if (enc_new(x, h))
		ch_batch_stack(x->b, *path, depth);
	return x->node[node] = h;
}

static int cmp_kv_key(const void *a, const void *b, void *ctx)
{
	const struct strtab *t = ctx;
	return strcmp(strtab_get(t, ((const uint32_t *)a)[0]), strtab_get(t, ((const uint32_t *)b)[0]));
}

static uint64_t enc_labels(struct enc *x, uint32_t id)
{
	if (x->labels[id])
		return x->labels[id];
	const uint32_t *kv;
	size_t n = part_label_pairs(x->p, id, &kv);
	uint32_t *sorted = xmalloc((2 * n + 1) * sizeof(uint32_t));
	memcpy(sorted, kv, 2 * n * sizeof(uint32_t));
	qsort_r(sorted, n, 2 * sizeof(uint32_t), cmp_kv_key, (void *)&x->p->lstr);
	const char **k = xmalloc((2 * n + 1) * sizeof(char *)), **v = k + n;
	for (size_t i = 0; i < n; i++) {
		k[i] = strtab_get(&x->p->lstr, sorted[2 * i]);
		v[i] = strtab_get(&x->p->lstr, sorted[2 * i + 1]);
	}
	x->labels[id] = ch_labels_hash(k, v, n);
	if (enc_new(x, x->labels[id]))
		ch_batch_label_set(x->b, k, v, n);
	free_all(k, sorted);
	return x->labels[id];
}

/* The head's rows into b; -1 when a row's time does not fit DateTime or
 * the batch is over CH_MAX_BATCH_ROWS. */
static int encode_part(struct enc *xp, struct buf *err)
{
	struct enc x = *xp;
	const struct part *p = x.p;
	struct ch_batch *b = x.b;
	x.sstr = xcalloc(strtab_count(&p->sstr) + 1, sizeof(uint64_t));
	x.frame = xcalloc(p->nframes + 1, sizeof(uint64_t));
	x.node = xcalloc(p->nnodes + 1, sizeof(uint64_t));
	x.labels = xcalloc(p->nlabels + 1, sizeof(uint64_t));
	x.file = xcalloc(p->nfiles + 1, sizeof(uint64_t));
	uint64_t *path = NULL;
	size_t cap = 0;
	int rc = 0;
	b->ts_min = UINT32_MAX;
	for (size_t i = 0; i < p->nseries && rc == 0; i++) {
		const struct part_series *ps = &p->series[i];
		struct ch_sample cs = { .kind = kind_name(ps->kind),
					.labels = enc_labels(&x, ps->labels), .hz = ps->hz };
		for (size_t r = 0; r < ps->nrows; r++) {
			int64_t ts = ps->rows[r].ts_ms / 1000;
			if (ts < 0 || ts > UINT32_MAX) {
				buf_puts(err, "a row's time does not fit ClickHouse's DateTime");
				rc = -1;
				break;
			}
			cs.ts = (uint32_t)ts;
			cs.stack = enc_stack(&x, ps->rows[r].stack, &path, &cap);
			cs.value = ps->rows[r].value;
			if (ch_batch_sample(b, &cs) < 0) {
				buf_printf(err, "a batch over %d rows", CH_MAX_BATCH_ROWS);
				rc = -1;
				break;
			}
			b->ts_min = MIN(b->ts_min, cs.ts);
			b->ts_max = MAX(b->ts_max, cs.ts);
		}
	}
	if (b->ts_min == UINT32_MAX)
		b->ts_min = 0;
	free_all(path, x.sstr, x.frame, x.node, x.labels, x.file);
	xp->added = x.added;
	xp->nadded = x.nadded;
	return rc;
}

/* The hosts of p this server has not sent yet (or with fewer CPUs), as
 * RowBinary rows of the hosts table; how many. */
static size_t hosts_rows(struct chs *s, const struct part *p, struct buf *rows)
{
	size_t n = 0;
	uint32_t now = (uint32_t)(now_unix_ms() / 1000);
	pthread_mutex_lock(&s->hosts_mu);
	for (size_t i = 0; i < p->nhosts; i++) {
		const char *name = strtab_get(&p->lstr, p->hosts[i].name);
		size_t len = strtab_len(&p->lstr, p->hosts[i].name);
		uint32_t id = strtab_lookup(&s->hosts_sent, name, len);
		if (id != UINT32_MAX && s->hosts_cpus[id] >= p->hosts[i].cpus)
			continue;
		ch_rb_string(rows, name, len);
		ch_rb_u32(rows, p->hosts[i].cpus);
		ch_rb_u32(rows, now);
		n++;
	}
	pthread_mutex_unlock(&s->hosts_mu);
	return n;
}

/* Notes p's hosts as sent (once ClickHouse acknowledged them). */
static void hosts_sent(struct chs *s, const struct part *p)
{
	pthread_mutex_lock(&s->hosts_mu);
	if (strtab_count(&s->hosts_sent) > HOSTS_SENT_MAX)
		strtab_reset(&s->hosts_sent);
	for (size_t i = 0; i < p->nhosts; i++) {
		uint32_t id = strtab_intern(&s->hosts_sent, strtab_get(&p->lstr, p->hosts[i].name),
					    strtab_len(&p->lstr, p->hosts[i].name));
		size_t cap = s->caphosts_cpus;
		xgrow((void **)&s->hosts_cpus, &s->caphosts_cpus, (size_t)id + 1, sizeof(uint32_t));
		memset(s->hosts_cpus + cap, 0, (s->caphosts_cpus - cap) * sizeof(uint32_t));
		s->hosts_cpus[id] = MAX(s->hosts_cpus[id], p->hosts[i].cpus);
	}
	pthread_mutex_unlock(&s->hosts_mu);
}

/* Sends a group of n queued batches (linked by next), and before them
 * the hosts of their heads not sent yet; sets each one's rc, res, err. */
static void send_group(struct chs *s, struct pending *group, size_t n)
{
	struct buf rows = { 0 }, sql = { 0 }, err = { 0 };
	struct ch_batch **b = xcalloc(n + 1, sizeof(*b));
	enum ch_insert_result *res = xcalloc(n + 1, sizeof(*res));
	size_t i = 0;
	for (struct pending *q = group; q; q = q->next)
		b[i++] = q->b;
	struct ch_conn *c = conn_get(s, 0, &err);
	enum ch_rc r = c ? CH_OK : CH_FAILED;
	size_t nhosts = 0;
	for (struct pending *q = group; q; q = q->next)
		nhosts += hosts_rows(s, q->p, &rows);
	if (r == CH_OK && nhosts) {
		buf_printf(&sql, "INSERT INTO %s.hosts (name, cpus, seen) FORMAT RowBinary", s->database);
		r = ch_query(c, 0, sql.data, rows.data, rows.len, 1, 0, "insert_distributed_sync=1",
			     NULL, &err);
	}
	if (r == CH_OK)
		r = ch_insert_batches(c, b, n, res, &err);
	conn_put(s, c, true);
	i = 0;
	for (struct pending *q = group; q; q = q->next, i++) {
		if (r == CH_OK)
			hosts_sent(s, q->p);
		q->rc = r;
		q->res = res[i];
		if (r != CH_OK)
			buf_puts(&q->err, err.data ? err.data : "clickhouse: failed");
	}
	free_all(b, res);
	buf_free(&rows);
	buf_free(&sql);
	buf_free(&err);
}

static bool in_flight(const struct chs *s, const struct ch_batch *b)
{
	for (size_t i = 0; !b->unique && i < s->ninflight; i++)
		if (s->inflight[i] == b->id)
			return true;
	return false;
}

/* Queues me and returns once its group was sent (by this thread or
 * another). */
static void group_commit(struct chs *s, struct pending *me)
{
	pthread_mutex_lock(&s->q_mu);
	*s->queue_tail = me;
	s->queue_tail = &me->next;
	while (!me->done) {
		/* Lead: take what is queued, in order, up to the row limit,
		 * but a batch whose id another sender has in flight. */
		struct pending *group = NULL, **gt = &group;
		size_t n = 0, rows = 0;
		for (struct pending **pp = &s->queue; s->senders < CH_SENDERS && *pp;) {
			struct pending *q = *pp;
			if ((n && rows + q->b->n_samples > CH_MAX_BATCH_ROWS) || in_flight(s, q->b)) {
				pp = &q->next;
				continue;
			}
			*pp = q->next;
			q->next = NULL;
			*gt = q;
			gt = &q->next;
			n++;
			rows += q->b->n_samples;
		}
		s->queue_tail = &s->queue;
		while (*s->queue_tail)
			s->queue_tail = &(*s->queue_tail)->next;
		if (!n) {
			pthread_cond_wait(&s->q_cv, &s->q_mu);
			continue;
		}
		size_t first = s->ninflight;
		for (struct pending *q = group; q; q = q->next)
			if (!q->b->unique) {
				xgrow((void **)&s->inflight, &s->capinflight, s->ninflight + 1,
				      sizeof(uint64_t));
				s->inflight[s->ninflight++] = q->b->id;
			}
		size_t mine = s->ninflight - first;
		s->senders++;
		pthread_mutex_unlock(&s->q_mu);
		send_group(s, group, n);
		pthread_mutex_lock(&s->q_mu);
		/* this group's ids leave the in-flight list (others' may have
		 * been added after them: remove by value) */
		for (struct pending *q = group; q && mine; q = q->next) {
			for (size_t i = 0; !q->b->unique && i < s->ninflight; i++)
				if (s->inflight[i] == q->b->id) {
					s->inflight[i] = s->inflight[--s->ninflight];
					mine--;
					break;
				}
		}
		/* done last: a follower may return (its entry gone) once it sees it */
		for (struct pending *q = group, *next; q; q = next) {
			next = q->next;
			q->done = true;
		}
		s->senders--;
		pthread_cond_broadcast(&s->q_cv);
	}
	pthread_mutex_unlock(&s->q_mu);
}

static void count_stat(struct chs *s, uint64_t *field, uint64_t n)
{
	pthread_mutex_lock(&s->stats_mu);
	*field += n;
	pthread_mutex_unlock(&s->stats_mu);
}

static int chs_append(struct store *st, const struct store_entry *e, struct buf *err)
{
	struct chs *s = (struct chs *)st;
	int arc = store_entry_admit(&s->cfg, s->codecs, e, err);
	if (arc != STORE_OK)
		return arc;
	/* A head of its own, filled by the entry's index() as the embedded
	 * store's would be; its dictionaries are new, so a codec's cached ids
	 * (keyed by store_head_dictionaries) do not apply to it. */
	struct part p;
	part_init(&p, 1);
	struct store_head w = { &p };
	pthread_mutex_lock(&s->index_mu);
	uint64_t gen = ++s->gen;
	int irc = e->index(e->ctx, &w, gen);
	pthread_mutex_unlock(&s->index_mu);
	if (irc < 0) {
		part_free(&p);
		buf_puts(err, "the batch refers to what its session did not define");
		return STORE_FAILED;
	}
	/* The batch's id: (agent instance, sequence); an entry without an
	 * instance is never a duplicate, so it gets a random one. */
	char anon[40];
	const char *agent = e->agent_instance;
	if (!agent || !agent[0]) {
		uint64_t r[2] = { 0, 0 };
		if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
			part_free(&p);
			buf_puts(err, "no random bytes for the batch's id");
			return STORE_FAILED;
		}
		snprintf(anon, sizeof(anon), "~%016llx%016llx", (unsigned long long)r[0],
			 (unsigned long long)r[1]);
		agent = anon;
	}
	struct ch_batch b;
	ch_batch_init(&b, e->project, agent, e->sequence);
	b.unique = agent == anon;
	struct enc x = { .p = &p, .b = &b, .sent = &s->sent };
	int rc = encode_part(&x, err) < 0 ? STORE_FAILED : STORE_OK;
	uint64_t rows = p.rows, samples = p.samples;
	/* Another replica may be storing this very batch now: the claim
	 * tells (claims.h). */
	struct buf claim_id = { 0 };
	int64_t token = 0;
	if (rc == STORE_OK && s->claims && !b.unique) {
		bool unavailable = false;
		buf_printf(&claim_id, "%s/%s/%llu", e->project, agent, (unsigned long long)e->sequence);
		int got = ch_claims_take(s->claims, claim_id.data, now_unix_ms(), &token, &unavailable, err);
		if (got <= 0) {
			if (got == 0)
				buf_puts(err, "another ember-server is storing this batch now; retry");
			count_stat(s, &s->stats.refused_busy, 1);
			rc = got == 0 || unavailable ? STORE_BUSY : STORE_FAILED;
		}
	}
	if (rc == STORE_OK) {
		struct pending me = { .p = &p, .b = &b };
		group_commit(s, &me);
		enum ch_rc r = me.rc;
		enum ch_insert_result res = me.res;
		if (me.err.len)
			buf_puts(err, me.err.data);
		buf_free(&me.err);
		if (r == CH_UNAVAILABLE) {
			count_stat(s, &s->stats.refused_busy, 1);
			rc = STORE_BUSY;
		} else if (r != CH_OK) {
			rc = STORE_FAILED;
		} else if (res == CH_DUPLICATE) {
			rc = STORE_DUPLICATE;
		} else {
			sent_add(&s->sent, x.added, x.nadded);
			pthread_mutex_lock(&s->stats_mu);
			s->stats.batches++;
			s->stats.rows += rows;
			s->stats.samples += samples;
			pthread_mutex_unlock(&s->stats_mu);
		}
	}
	if (token)
		ch_claims_release(s->claims, claim_id.data, token);
	buf_free(&claim_id);
	ch_batch_free(&b);
	part_free(&p);
	free(x.added);
	return rc;
}

static void chs_stats(struct store *st, struct store_stats *out)
{
	struct chs *s = (struct chs *)st;
	pthread_mutex_lock(&s->stats_mu);
	*out = s->stats;
	pthread_mutex_unlock(&s->stats_mu);
}

static void chs_close(struct store *st)
{
	struct chs *s = (struct chs *)st;
	if (s->retention_started) {
		thread_stop_join(s->retention, &s->stop_mu, &s->stop_cv, &s->stop);
	}
	pthread_mutex_destroy(&s->stop_mu);
	pthread_mutex_destroy(&s->q_mu);
	free(s->inflight);
	pthread_cond_destroy(&s->q_cv);
	pthread_cond_destroy(&s->stop_cv);
	ch_pool_free(s->pool);
	pthread_mutex_destroy(&s->index_mu);
	pthread_mutex_destroy(&s->stats_mu);
	pthread_mutex_destroy(&s->hosts_mu);
	pthread_mutex_destroy(&s->sent.mu);
	hmap_free(&s->sent.index);
	free(s->sent.h);
	strtab_free(&s->hosts_sent);
	ch_claims_close(s->claims);
	free_all(s->hosts_cpus, s->urls, s->database, s->user, s->password_file, s->ca_file, s->cluster,
		 s);
}

static const struct store_write_ops chs_write = {
	.name = "clickhouse",
	.append = chs_append,
	.stats = chs_stats,
	.close = chs_close,
};

/* --- reading: answers in RowBinary -------------------------------------------------- */

struct rb {
	const uint8_t *p, *end;
	bool bad;
};

/* A reader over a query's answer. */
static struct rb rb_over(const struct buf *ans)
{
	return (struct rb){ (const uint8_t *)ans->data, (const uint8_t *)ans->data + ans->len, false };
}

static uint64_t rb_int(struct rb *r, size_t bytes)
{
	if (r->bad || (size_t)(r->end - r->p) < bytes) {
		r->bad = true;
		return 0;
	}
	uint64_t v = 0;
	for (size_t i = 0; i < bytes; i++)
		v |= (uint64_t)r->p[i] << (8 * i);
	r->p += bytes;
	return v;
}

static uint64_t rb_varint(struct rb *r)
{
	uint64_t v = 0;
	for (int shift = 0; shift < 64; shift += 7) {
		if (r->bad || r->p >= r->end) {
			r->bad = true;
			return 0;
		}
		uint8_t c = *r->p++;
		v |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80))
			return v;
	}
	r->bad = true;
	return 0;
}

static const char *rb_str(struct rb *r, size_t *len)
{
	uint64_t n = rb_varint(r);
	if (r->bad || n > (uint64_t)(r->end - r->p)) {
		r->bad = true;
		*len = 0;
		return "";
	}
	const char *s = (const char *)r->p;
	r->p += n;
	*len = (size_t)n;
	return s;
}

static bool rb_more(const struct rb *r)
{
	return !r->bad && r->p < r->end;
}

/* --- reading: the view ---------------------------------------------------------------- */

struct chv_frame {
	uint8_t type;
	uint64_t address;
	uint32_t name, binary; /* string ids, 0: none */
	uint32_t file;         /* an index in files plus one, 0: none */
};

struct chv {
	struct store_view base; /* first */
	struct chs *s;
	struct ch_conn *c;
	struct buf where;  /* the scope's condition over samples, without time */
	int64_t from_ms, to_ms;
	bool loaded, failed;
	struct buf read_err; /* the first read that failed, "" = none (chv_failed) */
	struct store_segment pub;
	struct strtab strs;
	/* label sets: pairs of string ids, sorted by key id */
	uint32_t *label_kv, *label_off;
	size_t nlabels, nkv;
	uint64_t *label_hash;
	struct hmap label_index;
	/* series, their minutes and label hashes */
	struct store_series *series;
	size_t nseries, capseries;
	struct store_minute **minutes;
	size_t *capminutes;
	uint64_t *series_labels;
	struct hmap series_index;
	/* frames and the stack tree */
	struct chv_frame *frames;
	size_t nframes, capframes;
	struct store_file *files; /* name: a string id */
	uint64_t *file_hash;
	size_t nfiles, capfiles;
	struct hmap file_index;
	uint64_t *frame_hash;
	struct hmap frame_index;
	uint32_t *parent, *frame;
	size_t nnodes, capnodes;
	struct hmap node_index;
	uint64_t *stack_hash; /* of each stack fetched, its leaf in stack_leaf */
	uint32_t *stack_leaf;
	size_t nstacks, capstacks;
	struct hmap stack_index;
	uint32_t *host_cpus; /* by string id: the host's CPUs (0: unknown) */
	size_t nhost_cpus;
	/* sums of every series for one range, by series */
	int64_t sums_from, sums_to;
	bool sums_ok;
	uint32_t **ser_stacks;
	uint64_t **ser_sums;
	size_t *ser_n, *ser_cap;
	/* answers */
	uint64_t *acc;
	uint32_t *out_stacks;
	uint64_t *out_sums;
	struct store_row *rows;
	size_t caprows;
	struct store_view_stats stats;
};

static const struct store_read_ops chs_read;

static struct chv *chv_of(const struct store_segment *g)
{
	return (struct chv *)((char *)g - offsetof(struct chv, pub));
}

/* Notes the view's first failed read: its answer would be incomplete. */
static void read_failed(struct chv *v, const char *why)
{
	if (!v->read_err.len)
		buf_printf(&v->read_err, "clickhouse: %s", why);
}

/* Read queries group by spilling to disk past this many bytes (ClickHouse's
 * external GROUP BY) rather than fail at the server's memory limit: a
 * per-series grouping of a whole fleet's hour (label sets times stacks)
 * needs more than the 2 GiB a small server allows a query. */
#define CH_READ_SETTINGS "max_bytes_before_external_group_by=536870912"

/* A query over the view's connection; the answer in out. */
/* The end of a view's query: a failure logged and kept as the view's read
 * error, the bytes read counted; frees err. 0, or -1 when it failed. */
static int chv_answered(struct chv *v, enum ch_rc rc, struct buf *err, const struct buf *out)
{
	if (rc != CH_OK) {
		log_error("clickhouse store: a query failed: %s", err->data ? err->data : "");
		read_failed(v, err->data ? err->data : "a query failed");
	}
	buf_free(err);
	v->stats.bytes_read += out->len;
	return rc == CH_OK ? 0 : -1;
}

static int chv_query(struct chv *v, const char *sql, struct buf *out)
{
	struct buf err = { 0 }, q = { 0 };
	out->len = 0;
	buf_printf(&q, "%s FORMAT RowBinary", sql);
	/* In the body, not the URL: a long filter (its literals) fits any
	 * URL limit there (ClickHouse reads the body as the query when the
	 * query parameter is empty; max_query_size still bounds it). */
	enum ch_rc rc = ch_query(v->c, 0, "", q.data, q.len, 0, 0, CH_READ_SETTINGS, out, &err);
	buf_free(&q);
	return chv_answered(v, rc, &err, out);
}

/* The external table of the dictionary queries: the hashes (or host names)
 * ember already holds, sent beside the query (ch_query_ext) rather than
 * found again by a subquery over the samples. */
#define EXT_IDS "ember_ids"     /* h UInt64 */
#define EXT_NAMES "ember_names" /* name String */

/* A query with one external table (name, structure; data in RowBinary)
 * over the view's connection; the answer in out. The query goes in the
 * URL (the body is the table), so it is one of the short dictionary
 * queries, never the scope's filter. */
static int chv_query_ext(struct chv *v, const char *sql, const char *name, const char *structure,
			 const struct buf *data, struct buf *out)
{
	struct buf err = { 0 }, q = { 0 };
	out->len = 0;
	buf_printf(&q, "%s FORMAT RowBinary", sql);
	struct ch_ext_table t = { .name = name, .structure = structure, .format = "RowBinary",
				  .data = data->data, .len = data->len };
	enum ch_rc rc = ch_query_ext(v->c, 0, q.data, &t, 1, 0, CH_READ_SETTINGS, out, &err);
	buf_free(&q);
	return chv_answered(v, rc, &err, out);
}

static void where_time(struct buf *q, int64_t from_ms, int64_t to_ms)
{
	int64_t from = from_ms <= 0 ? 0 : from_ms / 1000;
	int64_t to = to_ms <= 0 ? 0 : (to_ms + 999) / 1000;
	if (from > UINT32_MAX)
		from = UINT32_MAX;
	if (to > UINT32_MAX)
		to = UINT32_MAX;
	buf_printf(q, " AND ts >= toDateTime(%lld) AND ts < toDateTime(%lld)", (long long)from,
		   (long long)to);
}

/* Equality callbacks of the indexes: ctx points at the hash sought. */
struct u64_key {
	const uint64_t *arr;
	uint64_t want;
};

static bool eq_u64(const void *ctx, uint32_t idx)
{
	const struct u64_key *k = ctx;
	return k->arr[idx] == k->want;
}

static uint32_t find_u64(const struct hmap *m, const uint64_t *arr, uint64_t h)
{
	struct u64_key k = { arr, h };
	uint32_t idx;
	return hmap_find(m, hash_u64(h), eq_u64, &k, &idx) ? idx : UINT32_MAX;
}

/* A set of hashes for an external table, each once (a stack's frames
 * repeat across stacks: 2.5 M frame hashes name about 100 000 frames),
 * in the order first added. */
struct idset {
	uint64_t *h;
	size_t n, cap;
	struct hmap index;
};

static void idset_add(struct idset *x, uint64_t h)
{
	if (find_u64(&x->index, x->h, h) != UINT32_MAX)
		return;
	xgrow((void **)&x->h, &x->cap, x->n + 1, sizeof(uint64_t));
	x->h[x->n] = h;
	hmap_insert(&x->index, hash_u64(h), (uint32_t)x->n++);
}

static void idset_free(struct idset *x)
{
	free(x->h);
	hmap_free(&x->index);
	*x = (struct idset){ 0 };
}

/* The set as an external table's RowBinary (UInt64 each) in out; the set
 * freed (empty for the next use). */
static void idset_take(struct idset *x, struct buf *out)
{
	out->len = 0;
	buf_reserve(out, x->n * 8 + 1);
	for (size_t i = 0; i < x->n; i++)
		ch_rb_u64(out, x->h[i]);
	idset_free(x);
}

struct series_key {
	const struct chv *v;
	uint32_t project;
	uint8_t kind;
	uint16_t hz;
	uint64_t labels;
};

static bool eq_series(const void *ctx, uint32_t idx)
{
	const struct series_key *k = ctx;
	const struct store_series *x = &k->v->series[idx];
	return x->project == k->project && x->kind == k->kind && x->hz == k->hz &&
	       k->v->series_labels[idx] == k->labels;
}

static uint64_t series_hash(const struct series_key *k)
{
	return hash_mix(hash_mix(hash_u64(k->labels), k->project), (uint64_t)k->kind << 16 | k->hz);
}

static uint32_t find_series(const struct chv *v, uint32_t project, uint8_t kind, uint16_t hz,
			    uint64_t labels)
{
	struct series_key k = { v, project, kind, hz, labels };
	uint32_t idx;
	return hmap_find(&v->series_index, series_hash(&k), eq_series, &k, &idx) ? idx : UINT32_MAX;
}

static uint32_t chv_node(struct chv *v, uint32_t parent, uint32_t frame)
{
	return hmap_pair_intern(&v->node_index, hash_mix(hash_u64(parent), frame), &v->parent,
				&v->frame, &v->nnodes, &v->capnodes, parent, frame);
}

/* --- reading: the query texts (one builder each, shared with
 * ch_store_query_texts; chv_query adds the FORMAT) --------------------------- */

/* The queries over a range of samples: "SELECT cols FROM d.samples WHERE
 * where" with the time bound, then tail. */
enum range_query {
	RQ_SERIES,   /* the series of the scope's condition, by minute */
	RQ_SUMS,     /* every series' per-stack sums */
	RQ_ROLLUP,   /* per-stack sums of one project and kind, by stack alone */
	RQ_ROWS,     /* one series' rows (where: its condition) */
	RQ_TOTAL,    /* its total */
	RQ_STACKS_OF /* the stacks the scope's samples name (a subquery) */
};

/* RQ_ROLLUP groups by stack alone, so a fleet's hour (thousands of label
 * sets) groups into as many rows as it has stacks, not label sets times
 * stacks. */
static const struct {
	const char *cols, *tail;
} range_sql[] = {
	[RQ_SERIES] = { "project, kind, labels, hz, toUInt32(intDiv(toUInt32(ts), 60)) AS m, "
			"toUInt32(min(ts)), toUInt32(max(ts)), sum(value), count()",
			" GROUP BY project, kind, labels, hz, m ORDER BY project, kind, labels, hz, m" },
	[RQ_SUMS] = { "project, kind, labels, hz, stack, sum(value)",
		      " GROUP BY project, kind, labels, hz, stack" },
	[RQ_ROLLUP] = { "stack, sum(value)", " GROUP BY stack" },
	[RQ_ROWS] = { "toUInt32(ts), stack, sum(value)", " GROUP BY ts, stack" },
	[RQ_TOTAL] = { "sum(value)", "" },
	[RQ_STACKS_OF] = { "stack", "" },
};

static void sql_range(struct buf *q, enum range_query t, const char *d, const char *where,
		      int64_t from_ms, int64_t to_ms)
{
	buf_printf(q, "SELECT %s FROM %s.samples WHERE %s", range_sql[t].cols, d, where);
	where_time(q, from_ms, to_ms);
	buf_puts(q, range_sql[t].tail);
}

/* Runs one range query of the view (where: its condition); the answer in
 * ans, *r reads it. 0, or -1 with the view's read error set. */
static int chv_range(struct chv *v, enum range_query t, const char *where, int64_t from_ms,
		     int64_t to_ms, struct buf *ans, struct rb *r)
{
	struct buf q = { 0 };
	sql_range(&q, t, v->s->database, where, from_ms, to_ms);
	int rc = chv_query(v, q.data, ans);
	buf_free(&q);
	*r = rb_over(ans);
	return rc;
}

/* The dictionaries' rows a view needs. DQ_STACKS reads the samples once
 * (the stacks of subquery sub); every other one takes the hashes ember
 * already holds as the external table EXT_IDS (EXT_NAMES for DQ_HOSTS):
 * the series' label sets, the frames those stacks name, the strings and
 * files those frames name, the hosts those label sets name. GLOBAL IN
 * ships the table to the shards under a Distributed table (and is IN
 * without one), so no query but two scans the samples. */
enum dict_query { DQ_STACKS, DQ_FRAMES, DQ_STRINGS, DQ_FILES, DQ_LABELS, DQ_HOSTS };

static void sql_dict(struct buf *q, enum dict_query t, const char *d, const char *sub)
{
	switch (t) {
	case DQ_STACKS:
		buf_printf(q, "SELECT hash, any(frames) FROM %s.stacks WHERE hash GLOBAL IN (%s) "
			      "GROUP BY hash", d, sub);
		break;
	case DQ_FRAMES:
		buf_printf(q, "SELECT hash, any(type), any(address), any(function), any(binary), any(file) "
			      "FROM %s.frames WHERE hash GLOBAL IN " EXT_IDS " GROUP BY hash", d);
		break;
	case DQ_STRINGS:
		buf_printf(q, "SELECT hash, any(value) FROM %s.strings WHERE hash GLOBAL IN " EXT_IDS
			      " GROUP BY hash", d);
		break;
	case DQ_FILES:
		buf_printf(q, "SELECT hash, any(id), any(name), any(build_id), any(segs) FROM %s.files "
			      "WHERE hash GLOBAL IN " EXT_IDS " GROUP BY hash", d);
		break;
	case DQ_LABELS:
		buf_printf(q, "SELECT hash, any(keys), any(values) FROM %s.label_sets WHERE hash GLOBAL IN "
			      EXT_IDS " GROUP BY hash", d);
		break;
	case DQ_HOSTS:
		buf_printf(q, "SELECT name, max(cpus) FROM %s.hosts WHERE name GLOBAL IN " EXT_NAMES
			      " GROUP BY name", d);
		break;
	}
}

/* Runs dictionary query t with ext (RowBinary) as its external table. */
static int chv_dict(struct chv *v, enum dict_query t, const struct buf *ext, struct buf *ans)
{
	struct buf q = { 0 };
	sql_dict(&q, t, v->s->database, "");
	int rc = chv_query_ext(v, q.data, t == DQ_HOSTS ? EXT_NAMES : EXT_IDS,
			       t == DQ_HOSTS ? "name String" : "h UInt64", ext, ans);
	buf_free(&q);
	return rc;
}

/* The scope's condition over samples (without time). */
static void sql_scope(struct buf *q, const char *d, const struct store_view_scope *scope)
{
	buf_puts(q, "1");
	if (scope && scope->project) {
		buf_puts(q, " AND project = ");
		ch_sql_string(q, scope->project, strlen(scope->project));
	}
	if (scope && scope->kind) {
		buf_puts(q, " AND kind = ");
		const char *k = kind_name(scope->kind);
		ch_sql_string(q, k, strlen(k));
	}
	if (scope && scope->label_sql)
		buf_printf(q, " AND labels GLOBAL IN (SELECT hash FROM %s.label_sets WHERE %s)", d,
			   scope->label_sql);
}

/* One series' condition: the scope's, narrowed to it. */
static void sql_series_where(struct buf *q, const char *where, const char *project, uint8_t kind,
			     uint64_t labels, uint16_t hz)
{
	buf_puts(q, where);
	buf_puts(q, " AND project = ");
	ch_sql_string(q, project, strlen(project));
	buf_puts(q, " AND kind = ");
	ch_sql_string(q, kind_name(kind), strlen(kind_name(kind)));
	buf_printf(q, " AND labels = %llu AND hz = %u", (unsigned long long)labels, (unsigned)hz);
}

/* The condition of piece `piece` of `pieces` of a per-series read
 * (load_sums): the series whose label hash is piece modulo pieces. */
static void sql_sums_where(struct buf *q, const char *where, uint64_t piece, uint64_t pieces)
{
	if (pieces > 1)
		buf_printf(q, "(%s) AND labels %% %" PRIu64 " = %" PRIu64, where, pieces, piece);
	else
		buf_puts(q, where);
}

int ch_store_query_texts(const char *database, struct buf *out)
{
	const char *d = database;
	struct buf where = { 0 }, series = { 0 }, sub = { 0 };
	struct store_view_scope scope = { .project = "p", .kind = SEK_ON_CPU,
					  .label_sql = "values[indexOf(keys, 'host.name')] = 'h'" };
	sql_scope(&where, d, &scope);
	sql_series_where(&series, where.data, "p", SEK_ON_CPU, 1, 19);
	int64_t from = 1796554800000, to = from + 3600000;
	sql_range(&sub, RQ_STACKS_OF, d, where.data, from, to);
	int n = 0;
	for (int t = RQ_SERIES; t <= RQ_ROLLUP; t++, n++) {
		sql_range(out, (enum range_query)t, d, where.data, from, to);
		buf_putc(out, '\0');
	}
	/* All but DQ_STACKS name an external table (EXT_IDS, EXT_NAMES):
	 * whoever runs them gives it (tests/integration/test_clickhouse_schema.py). */
	for (int t = DQ_STACKS; t <= DQ_HOSTS; t++, n++) {
		sql_dict(out, (enum dict_query)t, d, sub.data);
		buf_putc(out, '\0');
	}
	sql_range(out, RQ_ROWS, d, series.data, from, to);
	buf_putc(out, '\0');
	sql_range(out, RQ_TOTAL, d, series.data, from, to);
	buf_putc(out, '\0');
	struct buf piece = { 0 };
	sql_sums_where(&piece, where.data, 3, 7);
	sql_range(out, RQ_SUMS, d, piece.data, from, to);
	buf_putc(out, '\0');
	buf_free(&piece);
	buf_printf(out, "INSERT INTO %s.hosts (name, cpus, seen) VALUES ('h', 8, now())", d);
	buf_putc(out, '\0');
	buf_free(&where);
	buf_free(&series);
	buf_free(&sub);
	return n + 4;
}

/* Q1: the scope's series, with per-minute totals. */
static int load_series(struct chv *v, struct buf *ans)
{
	struct rb r;
	if (chv_range(v, RQ_SERIES, v->where.data, v->from_ms, v->to_ms, ans, &r) < 0)
		return -1;
	while (rb_more(&r)) {
		size_t plen, klen;
		const char *proj = rb_str(&r, &plen), *kind = rb_str(&r, &klen);
		uint64_t labels = rb_int(&r, 8);
		uint32_t hz = (uint32_t)rb_int(&r, 4), minute = (uint32_t)rb_int(&r, 4);
		uint32_t lo = (uint32_t)rb_int(&r, 4), hi = (uint32_t)rb_int(&r, 4);
		uint64_t sum = rb_int(&r, 8), cnt = rb_int(&r, 8);
		uint8_t k = kind_of(kind, klen);
		if (r.bad)
			break;
		if (!k)
			continue; /* a kind this build does not know */
		uint32_t project = strtab_intern(&v->strs, proj, plen);
		uint16_t rate = (uint16_t)MIN(hz, 65535u);
		uint32_t i = find_series(v, project, k, rate, labels);
		if (i == UINT32_MAX) {
			i = (uint32_t)v->nseries;
			size_t cap = v->capseries;
			xgrow((void **)&v->series, &v->capseries, v->nseries + 1, sizeof(*v->series));
			if (cap != v->capseries) {
				v->series_labels = xrealloc(v->series_labels, v->capseries * sizeof(uint64_t));
				v->minutes = xrealloc(v->minutes, v->capseries * sizeof(*v->minutes));
				v->capminutes = xrealloc(v->capminutes, v->capseries * sizeof(size_t));
			}
			v->series[i] = (struct store_series){ .project = project, .labels = UINT32_MAX,
							      .kind = k, .hz = rate, .min_ts = INT64_MAX,
							      .max_ts = INT64_MIN };
			v->series_labels[i] = labels;
			v->minutes[i] = NULL;
			v->capminutes[i] = 0;
			v->nseries++;
			struct series_key key = { v, project, k, rate, labels };
			hmap_insert(&v->series_index, series_hash(&key), i);
		}
		struct store_series *x = &v->series[i];
		x->min_ts = MIN(x->min_ts, (int64_t)lo * 1000);
		x->max_ts = MAX(x->max_ts, (int64_t)hi * 1000);
		x->total += sum;
		x->nrows += cnt;
		xgrow((void **)&v->minutes[i], &v->capminutes[i], x->nminutes + 1,
		      sizeof(struct store_minute));
		v->minutes[i][x->nminutes++] = (struct store_minute){ (int64_t)minute * 60000, sum };
		v->pub.min_ts = MIN(v->pub.min_ts, x->min_ts);
		v->pub.max_ts = MAX(v->pub.max_ts, x->max_ts);
	}
	if (r.bad) {
		log_error("clickhouse store: a malformed answer (series)");
		read_failed(v, "a malformed answer (series)");
		return -1;
	}
	for (size_t i = 0; i < v->nseries; i++)
		v->series[i].minutes = v->minutes[i];
	return 0;
}

static int cmp_pair(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* Q2: the label sets the series name (their hashes sent along). */
static int load_labels(struct chv *v, struct buf *ans)
{
	struct buf ids = { 0 };
	struct idset set = { 0 };
	for (size_t i = 0; i < v->nseries; i++)
		idset_add(&set, v->series_labels[i]);
	idset_take(&set, &ids);
	int rc = chv_dict(v, DQ_LABELS, &ids, ans);
	buf_free(&ids);
	if (rc < 0)
		return -1;
	struct rb r = rb_over(ans);
	uint32_t *kv = NULL;
	size_t capkv = 0;
	while (rb_more(&r)) {
		uint64_t h = rb_int(&r, 8);
		uint64_t nk = rb_varint(&r);
		if (nk > 4096) {
			r.bad = true;
			break;
		}
		xgrow((void **)&kv, &capkv, 2 * nk + 2, sizeof(uint32_t));
		for (uint64_t i = 0; i < nk; i++) {
			size_t len;
			const char *k = rb_str(&r, &len);
			kv[2 * i] = strtab_intern(&v->strs, k, len);
		}
		if (rb_varint(&r) != nk) {
			r.bad = true;
			break;
		}
		for (uint64_t i = 0; i < nk; i++) {
			size_t len;
			const char *val = rb_str(&r, &len);
			kv[2 * i + 1] = strtab_intern(&v->strs, val, len);
		}
		if (r.bad)
			break;
		if (find_u64(&v->label_index, v->label_hash, h) != UINT32_MAX)
			continue;
		qsort(kv, nk, 2 * sizeof(uint32_t), cmp_pair);
		size_t cap = v->nlabels + 2;
		v->label_off = xrealloc(v->label_off, cap * sizeof(uint32_t));
		v->label_hash = xrealloc(v->label_hash, cap * sizeof(uint64_t));
		v->label_kv = xrealloc(v->label_kv, (v->nkv + 2 * nk + 1) * sizeof(uint32_t));
		memcpy(v->label_kv + v->nkv, kv, 2 * nk * sizeof(uint32_t));
		v->nkv += 2 * nk;
		v->label_hash[v->nlabels] = h;
		hmap_insert(&v->label_index, hash_u64(h), (uint32_t)v->nlabels);
		v->label_off[++v->nlabels] = (uint32_t)v->nkv;
	}
	free(kv);
	if (r.bad) {
		log_error("clickhouse store: a malformed answer (label sets)");
		read_failed(v, "a malformed answer (label sets)");
		return -1;
	}
	for (size_t i = 0; i < v->nseries; i++) {
		uint32_t l = find_u64(&v->label_index, v->label_hash, v->series_labels[i]);
		v->series[i].labels = l == UINT32_MAX ? (uint32_t)v->nlabels : l; /* missing: no labels */
	}
	return 0;
}

/* The CPUs of the hosts the label sets name (host.name; "" for a set
 * without one, as ClickHouse's values[indexOf(keys, 'host.name')]). */
static int load_hosts(struct chv *v, struct buf *ans)
{
	struct buf names = { 0 };
	uint32_t key = strtab_lookup(&v->strs, "host.name", 9);
	size_t nstrs = strtab_count(&v->strs);
	uint8_t *seen = xcalloc(nstrs + 1, 1);
	for (size_t i = 0; i < v->nlabels; i++) {
		uint32_t val = 0; /* id 0: "" */
		for (uint32_t k = v->label_off[i]; k < v->label_off[i + 1]; k += 2)
			if (v->label_kv[k] == key) {
				val = v->label_kv[k + 1];
				break;
			}
		if (val < nstrs && !seen[val]) {
			seen[val] = 1;
			ch_rb_string(&names, strtab_get(&v->strs, val), strtab_len(&v->strs, val));
		}
	}
	free(seen);
	int rc = chv_dict(v, DQ_HOSTS, &names, ans);
	buf_free(&names);
	if (rc < 0)
		return -1;
	struct rb r = rb_over(ans);
	v->nhost_cpus = strtab_count(&v->strs);
	v->host_cpus = xcalloc(v->nhost_cpus + 1, sizeof(uint32_t));
	while (rb_more(&r)) {
		size_t len;
		const char *name = rb_str(&r, &len);
		uint32_t cpus = (uint32_t)rb_int(&r, 4);
		uint32_t id = r.bad ? UINT32_MAX : strtab_lookup(&v->strs, name, len);
		if (id < v->nhost_cpus)
			v->host_cpus[id] = cpus;
	}
	if (r.bad) {
		log_error("clickhouse store: a malformed answer (hosts)");
		read_failed(v, "a malformed answer (hosts)");
		return -1;
	}
	return 0;
}


/* Q3-Q6: the stacks those samples name (one scan of them), the frames
 * those stacks name, the strings and files those frames name (each by the
 * hashes the answer before gave); then the tree. */
static int load_stacks(struct chv *v, struct buf *ans)
{
	const char *d = v->s->database;
	struct buf sub = { 0 }, q = { 0 }, stacks = { 0 }, frames = { 0 }, ids = { 0 };
	struct idset hs = { 0 }, fh = { 0 };
	sql_range(&sub, RQ_STACKS_OF, d, v->where.data, v->from_ms, v->to_ms);
	sql_dict(&q, DQ_STACKS, d, sub.data);
	int rc = chv_query(v, q.data, &stacks);
	/* the frames the stacks name */
	struct rb r = rb_over(&stacks);
	while (rc == 0 && rb_more(&r)) {
		rb_int(&r, 8);
		uint64_t n = rb_varint(&r);
		if (n > (uint64_t)(r.end - r.p) / 8) {
			r.bad = true;
			break;
		}
		for (uint64_t i = 0; i < n; i++)
			idset_add(&hs, rb_int(&r, 8));
	}
	if (rc == 0 && !r.bad) {
		idset_take(&hs, &ids);
		rc = chv_dict(v, DQ_FRAMES, &ids, &frames);
		r = rb_over(&frames);
	}
	/* the strings and files those frames name */
	while (rc == 0 && rb_more(&r)) {
		rb_int(&r, 8);
		rb_int(&r, 1);
		rb_int(&r, 8);
		uint64_t fn = rb_int(&r, 8), bin = rb_int(&r, 8), file = rb_int(&r, 8);
		if (r.bad)
			break;
		idset_add(&hs, fn);
		idset_add(&hs, bin);
		idset_add(&fh, file);
	}
	/* strings */
	if (rc == 0 && !r.bad) {
		idset_take(&hs, &ids);
		rc = chv_dict(v, DQ_STRINGS, &ids, ans);
		r = rb_over(ans);
	}
	idset_free(&hs); /* a failure above left it full */
	struct hmap str_index = { 0 };
	uint64_t *str_hash = NULL;
	uint32_t *str_id = NULL;
	size_t nstr = 0, capstr = 0;
	while (rc == 0 && rb_more(&r)) {
		uint64_t h = rb_int(&r, 8);
		size_t len;
		const char *s = rb_str(&r, &len);
		if (r.bad)
			break;
		xgrow2((void **)&str_hash, (void **)&str_id, &capstr, nstr + 1,
		       sizeof(uint64_t), sizeof(uint32_t));
		str_hash[nstr] = h;
		str_id[nstr] = strtab_intern(&v->strs, s, len);
		hmap_insert(&str_index, hash_u64(h), (uint32_t)nstr++);
	}
	/* files */
	if (rc == 0 && !r.bad) {
		idset_take(&fh, &ids);
		rc = chv_dict(v, DQ_FILES, &ids, ans);
		r = rb_over(ans);
	}
	idset_free(&fh);
	buf_free(&ids);
	while (rc == 0 && rb_more(&r)) {
		uint64_t h = rb_int(&r, 8);
		size_t idlen, nlen, blen;
		const char *id = rb_str(&r, &idlen), *name = rb_str(&r, &nlen);
		const char *bid = rb_str(&r, &blen);
		uint64_t nsegs = rb_varint(&r);
		struct store_file f = { .build_id_len = (uint8_t)MIN(blen, sizeof(f.build_id)) };
		if (idlen != FILE_ID_LEN || nsegs % 3 || nsegs / 3 > STORE_FILE_SEGMENTS)
			r.bad = true;
		for (uint64_t k = 0; k < nsegs && !r.bad; k++)
			f.segs[k / 3][k % 3] = rb_int(&r, 8);
		if (r.bad)
			break;
		memcpy(f.id.b, id, FILE_ID_LEN);
		memcpy(f.build_id, bid, f.build_id_len);
		f.nsegs = (uint8_t)(nsegs / 3);
		f.name = strtab_intern(&v->strs, name, nlen);
		xgrow2((void **)&v->files, (void **)&v->file_hash, &v->capfiles, v->nfiles + 1,
		       sizeof(*v->files), sizeof(uint64_t));
		v->files[v->nfiles] = f;
		v->file_hash[v->nfiles] = h;
		hmap_insert(&v->file_index, hash_u64(h), (uint32_t)v->nfiles++);
	}
	/* frames (their answer read above) */
	if (rc == 0 && !r.bad)
		r = rb_over(&frames);
	while (rc == 0 && rb_more(&r)) {
		uint64_t h = rb_int(&r, 8);
		uint8_t type = (uint8_t)rb_int(&r, 1);
		uint64_t addr = rb_int(&r, 8), fn = rb_int(&r, 8), bin = rb_int(&r, 8);
		uint64_t file = rb_int(&r, 8);
		if (r.bad)
			break;
		uint32_t fl = file ? find_u64(&v->file_index, v->file_hash, file) : UINT32_MAX;
		xgrow2((void **)&v->frames, (void **)&v->frame_hash, &v->capframes, v->nframes + 1,
		       sizeof(*v->frames), sizeof(uint64_t));
		uint32_t fi = find_u64(&str_index, str_hash, fn), bi = find_u64(&str_index, str_hash, bin);
		v->frames[v->nframes] = (struct chv_frame){
			.type = type, .address = addr, .name = fi == UINT32_MAX ? 0 : str_id[fi],
			.binary = bi == UINT32_MAX ? 0 : str_id[bi], .file = fl == UINT32_MAX ? 0 : fl + 1
		};
		v->frame_hash[v->nframes] = h;
		hmap_insert(&v->frame_index, hash_u64(h), (uint32_t)v->nframes++);
	}
	free_all(str_hash, str_id);
	hmap_free(&str_index);
	/* stacks (their answer read first), each into the tree */
	if (rc == 0 && !r.bad)
		r = rb_over(&stacks);
	while (rc == 0 && rb_more(&r)) {
		uint64_t h = rb_int(&r, 8);
		uint64_t n = rb_varint(&r);
		if (n > (uint64_t)(r.end - r.p) / 8) {
			r.bad = true;
			break;
		}
		uint32_t node = 0;
		for (uint64_t i = 0; i < n; i++) {
			uint32_t f = find_u64(&v->frame_index, v->frame_hash, rb_int(&r, 8));
			if (f == UINT32_MAX) {
				r.bad = true; /* a stack naming a frame that is not stored */
				break;
			}
			node = chv_node(v, node, f);
		}
		if (r.bad)
			break;
		xgrow2((void **)&v->stack_hash, (void **)&v->stack_leaf, &v->capstacks, v->nstacks + 1,
		       sizeof(uint64_t), sizeof(uint32_t));
		v->stack_hash[v->nstacks] = h;
		v->stack_leaf[v->nstacks] = node;
		hmap_insert(&v->stack_index, hash_u64(h), (uint32_t)v->nstacks++);
	}
	buf_free(&q);
	buf_free(&sub);
	buf_free(&stacks);
	buf_free(&frames);
	if (rc == 0 && r.bad) {
		log_error("clickhouse store: a malformed answer (stacks)");
		read_failed(v, "a malformed answer (stacks)");
		rc = -1;
	}
	return rc;
}

/* The node of a stack hash (0: a stack not fetched). */
static uint32_t leaf_of(const struct chv *v, uint64_t h)
{
	uint32_t i = find_u64(&v->stack_index, v->stack_hash, h);
	return i == UINT32_MAX ? 0 : v->stack_leaf[i];
}

static struct store_view *chs_view_open(struct store *st, int64_t from_ms, int64_t to_ms,
					const struct store_view_scope *scope)
{
	struct chs *s = (struct chs *)st;
	struct chv *v = xcalloc(1, sizeof(*v));
	v->base.ops = &chs_read;
	v->s = s;
	v->from_ms = from_ms;
	v->to_ms = to_ms;
	strtab_init(&v->strs);
	v->label_off = xcalloc(1, sizeof(uint32_t));
	v->nnodes = 1; /* the root */
	v->capnodes = 1;
	v->parent = xcalloc(1, sizeof(uint32_t));
	v->frame = xcalloc(1, sizeof(uint32_t));
	sql_scope(&v->where, s->database, scope);
	v->pub = (struct store_segment){ .ops = &chs_read, .min_ts = INT64_MAX, .max_ts = INT64_MIN };
	return &v->base;
}

static size_t chv_count(const struct store_view *v)
{
	(void)v;
	return 1;
}

static void chv_carry(struct store_view *v)
{
	(void)v; /* one segment: nothing to carry */
}

static bool chv_same_ids(const struct store_view *v, size_t i, size_t j)
{
	(void)v, (void)i, (void)j;
	return false;
}

static const struct store_segment *chv_begin(struct store_view *bv, size_t i)
{
	struct chv *v = (struct chv *)bv;
	(void)i;
	if (!v->loaded) {
		v->loaded = true;
		struct buf err = { 0 };
		v->c = conn_get(v->s, CH_READ_MAX_RESPONSE, &err);
		if (!v->c) {
			log_error("clickhouse store: %s", err.data ? err.data : "no connection");
			read_failed(v, err.data ? err.data : "no connection");
		}
		buf_free(&err);
		struct buf ans = { 0 };
		v->failed = !v->c || load_series(v, &ans) < 0 ||
			    (v->nseries && (load_labels(v, &ans) < 0 || load_hosts(v, &ans) < 0 ||
					     load_stacks(v, &ans) < 0));
		buf_free(&ans);
		v->pub.series = v->series;
		v->pub.nseries = (uint32_t)v->nseries;
		v->pub.nlabels = (uint32_t)v->nlabels;
		v->pub.nframes = (uint32_t)v->nframes;
		v->pub.nnodes = (uint32_t)v->nnodes;
		v->pub.node_parent = v->parent;
		v->pub.node_frame = v->frame;
		v->pub.stack_nown = (uint32_t)v->nnodes;
		v->pub.stack_count = v->nnodes;
		v->acc = xcalloc(v->nnodes + 1, sizeof(uint64_t));
		v->out_stacks = xcalloc(v->nnodes + 1, sizeof(uint32_t));
		v->out_sums = xcalloc(v->nnodes + 1, sizeof(uint64_t));
	}
	if (v->failed) {
		v->stats.parts_skipped++;
		return NULL;
	}
	v->stats.parts++;
	return &v->pub;
}

static int cmp_row(const void *a, const void *b)
{
	const struct store_row *x = a, *y = b;
	if (x->ts_ms != y->ts_ms)
		return x->ts_ms < y->ts_ms ? -1 : 1;
	return x->stack < y->stack ? -1 : x->stack > y->stack;
}

/* The condition of one series (the scope's, narrowed). */
static void where_series(const struct chv *v, uint32_t series, struct buf *q)
{
	const struct store_series *x = &v->series[series];
	sql_series_where(q, v->where.data, strtab_get(&v->strs, x->project), x->kind,
			 v->series_labels[series], x->hz);
}

static long chv_rows(struct store_view *bv, size_t i, uint32_t series, int64_t since_ms,
		     const struct store_row **rows)
{
	struct chv *v = (struct chv *)bv;
	(void)i;
	if (series >= v->nseries)
		return -1;
	struct buf w = { 0 }, ans = { 0 };
	struct rb r;
	where_series(v, series, &w);
	int rc = chv_range(v, RQ_ROWS, w.data,
			   since_ms == INT64_MIN ? v->from_ms : MAX(since_ms, v->from_ms), v->to_ms, &ans, &r);
	buf_free(&w);
	long n = 0;
	while (rc == 0 && rb_more(&r)) {
		uint32_t ts = (uint32_t)rb_int(&r, 4);
		uint64_t h = rb_int(&r, 8), val = rb_int(&r, 8);
		if (r.bad)
			break;
		xgrow((void **)&v->rows, &v->caprows, (size_t)n + 1, sizeof(*v->rows));
		v->rows[n++] = (struct store_row){ (int64_t)ts * 1000, val, leaf_of(v, h), 0 };
	}
	buf_free(&ans);
	if (rc == 0 && r.bad)
		read_failed(v, "a malformed answer (rows)");
	if (rc < 0 || r.bad)
		return -1;
	qsort(v->rows, (size_t)n, sizeof(*v->rows), cmp_row);
	v->stats.series_read++;
	v->stats.rows_read += (uint64_t)n;
	*rows = v->rows;
	return n;
}

/* One piece of load_sums: the per-stack sums of the series whose label
 * hash is piece modulo pieces (all of them when pieces is 1) appended to
 * each series' arrays. 0, or -1 with the view's read error set. */
static int load_sums_piece(struct chv *v, int64_t from_ms, int64_t to_ms, uint64_t piece,
			   uint64_t pieces)
{
	struct buf where = { 0 }, ans = { 0 };
	sql_sums_where(&where, v->where.data, piece, pieces);
	struct rb r;
	int rc = chv_range(v, RQ_SUMS, where.data, from_ms, to_ms, &ans, &r);
	buf_free(&where);
	while (rc == 0 && rb_more(&r)) {
		size_t plen, klen;
		const char *proj = rb_str(&r, &plen), *kind = rb_str(&r, &klen);
		uint64_t labels = rb_int(&r, 8);
		uint32_t hz = (uint32_t)rb_int(&r, 4);
		uint64_t h = rb_int(&r, 8), sum = rb_int(&r, 8);
		if (r.bad)
			break;
		uint32_t project = strtab_lookup(&v->strs, proj, plen);
		uint32_t i = project == UINT32_MAX ? UINT32_MAX
			: find_series(v, project, kind_of(kind, klen), (uint16_t)MIN(hz, 65535u), labels);
		if (i == UINT32_MAX)
			continue; /* a series that arrived after the view was begun */
		xgrow2((void **)&v->ser_stacks[i], (void **)&v->ser_sums[i], &v->ser_cap[i], v->ser_n[i] + 1,
		       sizeof(uint32_t), sizeof(uint64_t));
		v->ser_stacks[i][v->ser_n[i]] = leaf_of(v, h);
		v->ser_sums[i][v->ser_n[i]++] = sum;
	}
	buf_free(&ans);
	if (rc == 0 && r.bad)
		read_failed(v, "a malformed answer (sums)");
	return rc < 0 || r.bad ? -1 : 0;
}

/* Every series' per-stack sums in [from_ms, to_ms), aggregated in
 * ClickHouse, kept for the next calls with that range. A scope of more
 * rows than sums_piece_rows is read in pieces, by label set (its hash
 * modulo the number of pieces): each piece's groups (series x stack) and
 * answer stay within what one ClickHouse query may hold and ember's
 * answer cap, where one query over a fleet's hour (about 100 M groups)
 * fails. Each piece scans the scope again; a scope under the bound is one
 * query, as before. */
static int load_sums(struct chv *v, int64_t from_ms, int64_t to_ms)
{
	if (v->sums_ok && v->sums_from == from_ms && v->sums_to == to_ms)
		return 0;
	if (!v->ser_n) {
		v->ser_stacks = xcalloc(v->nseries + 1, sizeof(*v->ser_stacks));
		v->ser_sums = xcalloc(v->nseries + 1, sizeof(*v->ser_sums));
		v->ser_n = xcalloc(v->nseries + 1, sizeof(size_t));
		v->ser_cap = xcalloc(v->nseries + 1, sizeof(size_t));
	}
	memset(v->ser_n, 0, (v->nseries + 1) * sizeof(size_t));
	v->sums_ok = false;
	/* the scope's rows bound its groups: the series' row counts */
	uint64_t rows = 0;
	for (size_t i = 0; i < v->nseries; i++)
		rows += v->series[i].nrows;
	uint64_t pieces = rows / v->s->sums_piece_rows + 1;
	int64_t lo = MAX(from_ms, v->from_ms), hi = MIN(to_ms, v->to_ms);
	for (uint64_t k = 0; k < pieces; k++)
		if (load_sums_piece(v, lo, hi, k, pieces) < 0)
			return -1;
	if (pieces > 1)
		log_debug("clickhouse store: per-series sums of %" PRIu64 " rows read in %" PRIu64 " pieces",
			  rows, pieces);
	v->sums_from = from_ms;
	v->sums_to = to_ms;
	v->sums_ok = true;
	return 0;
}

/* The stacks with a sum in acc, ascending; acc cleared. */
static long chv_collect(struct chv *v, const uint32_t **stacks, const uint64_t **sums)
{
	long n = 0;
	for (size_t k = 0; k < v->nnodes; k++)
		if (v->acc[k]) {
			v->out_stacks[n] = (uint32_t)k;
			v->out_sums[n++] = v->acc[k];
			v->acc[k] = 0;
		}
	*stacks = v->out_stacks;
	*sums = v->out_sums;
	v->stats.stack_sums_read += (uint64_t)n;
	return n;
}

static void chv_add_series(struct chv *v, uint32_t series)
{
	for (size_t k = 0; k < v->ser_n[series]; k++)
		v->acc[v->ser_stacks[series][k]] += v->ser_sums[series][k];
	v->stats.series_read++;
}

static long chv_sums(struct store_view *bv, size_t i, uint32_t series, int64_t from_ms,
		     int64_t to_ms, const uint32_t **stacks, const uint64_t **sums)
{
	struct chv *v = (struct chv *)bv;
	(void)i;
	if (series >= v->nseries || load_sums(v, from_ms, to_ms) < 0)
		return -1;
	chv_add_series(v, series);
	return chv_collect(v, stacks, sums);
}

static int64_t chv_total(struct store_view *bv, size_t i, uint32_t series, int64_t from_ms,
			 int64_t to_ms)
{
	struct chv *v = (struct chv *)bv;
	(void)i;
	if (series >= v->nseries)
		return -1;
	const struct store_series *x = &v->series[series];
	v->stats.series_read++;
	if (from_ms <= x->min_ts && to_ms > x->max_ts)
		return (int64_t)x->total;
	struct buf w = { 0 }, ans = { 0 };
	struct rb r;
	where_series(v, series, &w);
	int rc = chv_range(v, RQ_TOTAL, w.data, from_ms, to_ms, &ans, &r);
	buf_free(&w);
	uint64_t t = rc == 0 ? rb_int(&r, 8) : 0;
	buf_free(&ans);
	if (rc == 0 && r.bad)
		read_failed(v, "a malformed answer (total)");
	return rc < 0 || r.bad ? -1 : (int64_t)t;
}

static long chv_rollup_sums(struct store_view *bv, size_t i, uint32_t project, uint8_t kind,
			    int64_t from_ms, int64_t to_ms, const uint32_t **stacks,
			    const uint64_t **sums, uint16_t *hz)
{
	struct chv *v = (struct chv *)bv;
	(void)i;
	uint16_t rate = 0;
	for (size_t j = 0; j < v->nseries; j++) {
		const struct store_series *x = &v->series[j];
		if (x->project != project || x->kind != kind)
			continue;
		if (rate && rate != x->hz)
			return -1; /* two rates: the series know which is which */
		rate = x->hz;
	}
	if (!rate)
		return -1;
	struct buf w = { 0 }, ans = { 0 };
	struct rb r;
	const char *pname = strtab_get(&v->strs, project), *kname = kind_name(kind);
	buf_printf(&w, "%s AND project = ", v->where.data);
	ch_sql_string(&w, pname, strlen(pname));
	buf_puts(&w, " AND kind = ");
	ch_sql_string(&w, kname, strlen(kname));
	int rc = chv_range(v, RQ_ROLLUP, w.data, MAX(from_ms, v->from_ms), MIN(to_ms, v->to_ms),
			   &ans, &r);
	buf_free(&w);
	while (rc == 0 && rb_more(&r)) {
		uint64_t h = rb_int(&r, 8), sum = rb_int(&r, 8);
		if (r.bad)
			break;
		v->acc[leaf_of(v, h)] += sum;
	}
	buf_free(&ans);
	if (rc == 0 && r.bad)
		read_failed(v, "a malformed answer (rollup)");
	if (rc < 0 || r.bad) {
		memset(v->acc, 0, (v->nnodes + 1) * sizeof(uint64_t));
		return -1;
	}
	for (size_t j = 0; j < v->nseries; j++)
		if (v->series[j].project == project && v->series[j].kind == kind)
			v->stats.series_read++;
	*hz = rate;
	return chv_collect(v, stacks, sums);
}

static void chv_end(struct store_view *v, size_t i)
{
	(void)v, (void)i; /* the one segment lives as long as the view */
}

static const struct store_view_stats *chv_stats(const struct store_view *bv)
{
	return &((const struct chv *)bv)->stats;
}

static int chv_failed(const struct store_view *bv, struct buf *why)
{
	const struct chv *v = (const struct chv *)bv;
	if (!v->read_err.len && !v->failed)
		return 0;
	if (why)
		buf_puts(why, v->read_err.len ? v->read_err.data : "clickhouse: a read failed");
	return STORE_READ_RC;
}

static void chv_close(struct store_view *bv)
{
	struct chv *v = (struct chv *)bv;
	conn_put(v->s, v->c, false);
	buf_free(&v->read_err);
	buf_free(&v->where);
	strtab_free(&v->strs);
	free_all(v->label_kv, v->label_off, v->label_hash);
	hmap_free(&v->label_index);
	for (size_t i = 0; i < v->nseries; i++) {
		free(v->minutes[i]);
		if (v->ser_n) {
			free_all(v->ser_stacks[i], v->ser_sums[i]);
		}
	}
	free_all(v->series, v->minutes, v->capminutes, v->series_labels);
	hmap_free(&v->series_index);
	free_all(v->ser_stacks, v->ser_sums, v->ser_n, v->ser_cap, v->frames, v->frame_hash);
	hmap_free(&v->frame_index);
	free_all(v->files, v->file_hash);
	hmap_free(&v->file_index);
	free_all(v->parent, v->frame);
	hmap_free(&v->node_index);
	free_all(v->stack_hash, v->stack_leaf);
	hmap_free(&v->stack_index);
	free_all(v->acc, v->out_stacks, v->out_sums, v->rows, v->host_cpus, v);
}

static const char *chv_str(const struct store_segment *g, uint32_t id)
{
	const struct chv *v = chv_of(g);
	return id < strtab_count(&v->strs) ? strtab_get(&v->strs, id) : "";
}

static uint32_t chv_find(const struct store_segment *g, const char *s, size_t len)
{
	return strtab_lookup(&chv_of(g)->strs, s, len);
}

static size_t chv_label_pairs(const struct store_segment *g, uint32_t labels, const uint32_t **kv)
{
	const struct chv *v = chv_of(g);
	if (labels >= v->nlabels) {
		*kv = NULL;
		return 0;
	}
	*kv = v->label_kv + v->label_off[labels];
	return (v->label_off[labels + 1] - v->label_off[labels]) / 2;
}

static int chv_frame(const struct store_segment *g, uint32_t frame, struct store_frame_info *out)
{
	const struct chv *v = chv_of(g);
	if (frame >= v->nframes)
		return -1;
	const struct chv_frame *f = &v->frames[frame];
	*out = (struct store_frame_info){
		.type = f->type, .address = f->address,
		.name = f->name ? strtab_get(&v->strs, f->name) : NULL,
		.binary = f->binary ? strtab_get(&v->strs, f->binary) : NULL,
		.file = f->file ? &v->files[f->file - 1] : NULL,
		.file_name = f->file ? strtab_get(&v->strs, v->files[f->file - 1].name) : NULL,
	};
	return 0;
}

static uint32_t chv_host_cpus(const struct store_segment *g, uint32_t name)
{
	const struct chv *v = chv_of(g);
	return name < v->nhost_cpus ? v->host_cpus[name] : 0;
}

static const struct store_read_ops chs_read = {
	.name = "clickhouse",
	.view_open = chs_view_open,
	.count = chv_count,
	.carry = chv_carry,
	.same_ids = chv_same_ids,
	.begin = chv_begin,
	.rows = chv_rows,
	.sums = chv_sums,
	.total = chv_total,
	.rollup_sums = chv_rollup_sums,
	.end = chv_end,
	.stats = chv_stats,
	.close = chv_close,
	.str = chv_str,
	.find = chv_find,
	.label_pairs = chv_label_pairs,
	.frame = chv_frame,
	.host_cpus = chv_host_cpus,
	.failed = chv_failed,
};

/* --- retention ----------------------------------------------------------------------- */

#define RETENTION_EVERY_MS 3600000

static void *retention_main(void *arg)
{
	struct chs *s = arg;
	for (;;) {
		struct buf err = { 0 };
		struct ch_conn *c = conn_get(s, 0, &err);
		int dropped = 0;
		int64_t cutoff_s = (now_unix_ms() - s->cfg.retention_ms) / 1000;
		if (!c || ch_retention(c, s->cluster, cutoff_s, &dropped, &err) != CH_OK)
			log_error("clickhouse store: retention: %s", err.data ? err.data : "failed");
		else if (dropped)
			log_info("clickhouse store: retention dropped %d day partitions", dropped);
		count_stat(s, &s->stats.retention_deleted, (uint64_t)dropped);
		conn_put(s, c, true);
		if (s->claims)
			ch_claims_expire(s->claims, now_unix_ms() - RETENTION_EVERY_MS);
		buf_free(&err);
		pthread_mutex_lock(&s->stop_mu);
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += RETENTION_EVERY_MS / 1000;
		while (!s->stop && pthread_cond_timedwait(&s->stop_cv, &s->stop_mu, &until) == 0)
			;
		bool stop = s->stop;
		pthread_mutex_unlock(&s->stop_mu);
		if (stop)
			return NULL;
	}
}

/* --- opening ----------------------------------------------------------------------------- */

static char *dup_or_null(const char *s)
{
	return s && *s ? xstrdup(s) : NULL;
}

int ch_store_open(const struct ch_store_opts *o, const struct store_config *cfg,
		  struct store **out, struct buf *err)
{
	struct chs *s = xcalloc(1, sizeof(*s));
	s->backend.read = &chs_read;
	s->backend.write = &chs_write;
	s->urls = dup_or_null(o->urls);
	s->database = xstrdup(o->database && *o->database ? o->database : "ember");
	s->user = dup_or_null(o->user);
	s->password_file = dup_or_null(o->password_file);
	s->ca_file = dup_or_null(o->ca_file);
	s->cluster = dup_or_null(o->cluster);
	s->pool = ch_pool_new(&(struct ch_conn_opts){ .urls = s->urls, .database = s->database,
						      .user = s->user, .password_file = s->password_file,
						      .ca_file = s->ca_file,
						      .timeout_ms = o->timeout_ms ? o->timeout_ms : 10000 });
	s->sums_piece_rows = sums_piece_rows();
	s->cfg = *cfg;
	for (size_t i = 0; i < cfg->ncodecs; i++)
		s->codecs[cfg->codecs[i]->type] = cfg->codecs[i];
	pthread_mutex_init(&s->index_mu, NULL);
	pthread_mutex_init(&s->stats_mu, NULL);
	pthread_mutex_init(&s->hosts_mu, NULL);
	pthread_mutex_init(&s->sent.mu, NULL);
	pthread_mutex_init(&s->stop_mu, NULL);
	pthread_mutex_init(&s->q_mu, NULL);
	pthread_cond_init(&s->q_cv, NULL);
	s->queue_tail = &s->queue;
	pthread_cond_init(&s->stop_cv, NULL);
	strtab_init(&s->hosts_sent);
	struct store *st = (struct store *)s;
	if (o->claims_url && ch_claims_open(o->claims_url, o->claims_password, &s->claims, err) < 0) {
		chs_close(st);
		return -1;
	}
	struct ch_conn *c = conn_get(s, 0, err);
	if (!c) {
		chs_close(st);
		return -1;
	}
	/* The schema migrate made: every server named must be at this
	 * build's version. */
	struct buf sql = { 0 }, ans = { 0 };
	buf_printf(&sql, "SELECT max(version) FROM %s.schema_version", s->database);
	int rc = 0;
	for (int i = 0; i < ch_conn_servers(c) && rc == 0; i++) {
		ans.len = 0;
		enum ch_rc r = ch_query(c, i, sql.data, NULL, 0, 0, 0, NULL, &ans, err);
		long version = r == CH_OK && ans.data ? strtol(ans.data, NULL, 10) : -1;
		if (r != CH_OK) {
			buf_puts(err, " (has `ember-server migrate` been run?)");
			rc = -1;
		} else if (version != CH_SCHEMA_VERSION) {
			buf_printf(err, "clickhouse server %d: schema version %ld, this build needs %d: "
				   "run `ember-server migrate`", i + 1, version, CH_SCHEMA_VERSION);
			rc = -1;
		}
	}
	buf_free(&sql);
	buf_free(&ans);
	conn_put(s, c, true);
	if (rc == 0 && cfg->background) {
		if (pthread_create(&s->retention, NULL, retention_main, s) != 0) {
			buf_puts(err, "cannot start the retention thread");
			rc = -1;
		} else {
			s->retention_started = true;
		}
	}
	if (rc < 0) {
		chs_close(st);
		return -1;
	}
	*out = st;
	return 0;
}
