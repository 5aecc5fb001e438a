/* append.c - appending: the log and group commit; see store.h and docs/internals/store.md. */
#include "store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

/* --- appending: the log and group commit -------------------------------------------- */

uint64_t st_unflushed_rows(struct store *s)
{
	pthread_mutex_lock(&s->list_mu);
	uint64_t n = s->stats.unflushed_rows;
	pthread_mutex_unlock(&s->list_mu);
	return n;
}

/* Fails one append that will not be acknowledged (under s->mu): its agent
 * sequence is given back, and its entry is told when its record was made
 * (the record is not in the log, or is cut off it). */
static void fail_commit(struct store *s, struct commit *q)
{
	q->rc = STORE_FAILED;
	if (q->agent != UINT32_MAX && s->agent_seq[q->agent] == q->e->sequence)
		s->agent_seq[q->agent] = q->prev_seq;
	if (q->recorded && q->e->failed)
		q->e->failed(q->e->ctx);
}

int store_entry_admit(const struct store_config *cfg, const struct store_codec *const *codecs,
		      const struct store_entry *e, struct buf *err)
{
	size_t plen = strlen(e->project);
	if (plen == 0 || plen > 255) {
		buf_puts(err, "invalid project id");
		return STORE_FAILED;
	}
	if (!codecs[e->record_type]) {
		buf_printf(err, "no codec reads log records of type %u (store_config.codecs)",
			   e->record_type);
		return STORE_FAILED;
	}
	if (cfg->time_window) {
		int64_t now = now_unix_ms();
		if (e->start_unix_ms < now - cfg->retention_ms || e->start_unix_ms > now + 86400000) {
			buf_printf(err, "the batch's time (%lld ms) lies outside what this server keeps "
				   "(the last %lld days, up to a day ahead): check the agent's clock",
				   (long long)e->start_unix_ms, (long long)(cfg->retention_ms / 86400000));
			return STORE_REFUSED;
		}
	}
	return STORE_OK;
}

int store_append_entry(struct store *s, const struct store_entry *e, struct buf *err)
{
	if (s->backend.write)
		return s->backend.write->append(s, e, err);
	int arc = store_entry_admit(&s->cfg, s->codecs, e, err);
	if (arc != STORE_OK)
		return arc;
	size_t plen = strlen(e->project);
	pthread_mutex_lock(&s->mu);
	while (s->sealing)
		pthread_cond_wait(&s->cv, &s->mu);
	if (st_unflushed_rows(s) > s->cfg.max_unflushed_rows) {
		pthread_mutex_unlock(&s->mu);
		pthread_mutex_lock(&s->list_mu);
		s->stats.refused_busy++;
		pthread_mutex_unlock(&s->list_mu);
		buf_puts(err, "the store is behind writing blocks (disk full or slow?): retry later");
		return STORE_BUSY;
	}
	struct commit c = { .e = e, .agent = UINT32_MAX };
	if (e->agent_instance && e->agent_instance[0]) {
		uint32_t a = st_agent_index(s, e->agent_instance, true);
		if (e->sequence <= s->agent_seq[a]) {
			pthread_mutex_unlock(&s->mu);
			return STORE_DUPLICATE;
		}
		c.agent = a;
		c.prev_seq = s->agent_seq[a];
		s->agent_seq[a] = e->sequence;
	}
	/* The record's head: the project prefix, then what record() adds. */
	struct buf head = { 0 };
	const void *body = NULL;
	size_t blen = 0;
	if (e->record_type) {
		buf_putc(&head, 0);
		buf_putc(&head, (char)e->record_type);
	}
	buf_putc(&head, (char)plen);
	buf_append(&head, e->project, plen);
	c.recorded = true;
	if (e->record(e->ctx, s->wal.gen, &head, &body, &blen, err) < 0) {
		fail_commit(s, &c);
		pthread_mutex_unlock(&s->mu);
		buf_free(&head);
		return STORE_FAILED;
	}
	if (wal_append(&s->wal, head.data, head.len, body, blen) < 0) {
		buf_printf(err, "writing the log failed: %s", strerror(errno));
		fail_commit(s, &c);
		pthread_mutex_unlock(&s->mu);
		buf_free(&head);
		return STORE_FAILED;
	}
	buf_free(&head);
	*s->queue_tail = &c;
	s->queue_tail = &c.next;
	while (!c.done) {
		if (s->syncing) {
			pthread_cond_wait(&s->cv, &s->mu);
			continue;
		}
		/* Lead: sync everything written so far, then index it. */
		s->syncing = true;
		struct commit *batch = s->queue;
		s->queue = NULL;
		s->queue_tail = &s->queue;
		uint64_t target = s->wal.size;
		int fd = s->wal.fd;
		struct sref *hd = s->head;
		pthread_mutex_unlock(&s->mu);
		int rc = fdatasync(fd);
		int serr = errno;
		uint64_t rows = 0, samples = 0, n = 0;
		if (rc == 0) {
			pthread_rwlock_wrlock(&hd->rw);
			uint64_t r0 = hd->part.rows, s0 = hd->part.samples;
			struct store_head w = { &hd->part };
			for (struct commit *q = batch; q; q = q->next, n++)
				if (q->e->index(q->e->ctx, &w, hd->gen) < 0)
					log_error("store: a batch of project %s could not be indexed",
						  q->e->project);
			rows = hd->part.rows - r0;
			samples = hd->part.samples - s0;
			pthread_rwlock_unlock(&hd->rw);
		}
		pthread_mutex_lock(&s->mu);
		if (rc == 0) {
			s->wal_synced = target;
			s->log_rows += rows;
		} else {
			/* Nothing after the last good sync is acknowledged: cut it
			 * off and fail every append written since, queued or not. */
			log_error("store: syncing the log failed: %s", strerror(serr));
			if (wal_truncate(&s->wal, s->wal_synced) < 0)
				log_error("cannot roll back the log: %s", strerror(errno));
			for (struct commit *q = s->queue; q; q = q->next) {
				fail_commit(s, q);
				q->done = true;
			}
			s->queue = NULL;
			s->queue_tail = &s->queue;
		}
		for (struct commit *q = batch; q; q = q->next) {
			if (rc == 0)
				q->rc = STORE_OK;
			else
				fail_commit(s, q);
		}
		/* Mark done last: a follower may return (and free its commit)
		 * as soon as it sees done. */
		for (struct commit *q = batch, *next; q; q = next) {
			next = q->next;
			q->done = true;
		}
		s->syncing = false;
		if (rc == 0) {
			pthread_mutex_lock(&s->list_mu);
			s->stats.batches += n;
			s->stats.rows += rows;
			s->stats.samples += samples;
			s->stats.head_rows += rows;
			s->stats.unflushed_rows += rows;
			if (!hd->first_row_mono_ms && rows)
				hd->first_row_mono_ms = st_mono_ms();
			pthread_mutex_unlock(&s->list_mu);
		}
		pthread_cond_broadcast(&s->cv);
	}
	int rc = c.rc;
	pthread_mutex_unlock(&s->mu);
	if (rc < 0)
		buf_puts(err, "syncing the log failed");
	return rc;
}
