/* rowbinary.c - RowBinary rows and the insert of one batch: see rowbinary.h. */
#include "rowbinary.h"

#include "fileid.h"
#include "util.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

void ch_rb_u8(struct buf *b, uint8_t v)
{
	buf_append(b, &v, 1);
}

void ch_rb_u32(struct buf *b, uint32_t v)
{
	uint8_t x[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };
	buf_append(b, x, 4);
}

void ch_rb_u64(struct buf *b, uint64_t v)
{
	uint8_t x[8];
	for (int i = 0; i < 8; i++)
		x[i] = (uint8_t)(v >> (8 * i));
	buf_append(b, x, 8);
}

void ch_rb_varint(struct buf *b, uint64_t v)
{
	uint8_t x[10];
	int n = 0;
	do {
		x[n] = v & 0x7f;
		v >>= 7;
		if (v)
			x[n] |= 0x80;
		n++;
	} while (v);
	buf_append(b, x, (size_t)n);
}

void ch_rb_string(struct buf *b, const char *s, size_t n)
{
	ch_rb_varint(b, n);
	buf_append(b, s, n);
}

static void hash_bytes(XXH3_state_t *st, const void *p, size_t n)
{
	uint64_t len = n;
	XXH3_64bits_update(st, &len, sizeof(len));
	XXH3_64bits_update(st, p, n);
}

uint64_t ch_string_hash(const char *s, size_t n)
{
	return XXH3_64bits_withSeed(s, n, CH_SEED_STRING);
}

uint64_t ch_frame_hash(const struct ch_frame *f)
{
	uint64_t v[6] = { f->type, f->address, f->function, f->binary, f->build_id, f->file };
	return XXH3_64bits_withSeed(v, (f->file ? 6 : 5) * sizeof(uint64_t), CH_SEED_FRAME);
}

uint64_t ch_file_hash(const struct ch_file *f)
{
	XXH3_state_t st;
	XXH3_64bits_reset_withSeed(&st, CH_SEED_FILE);
	uint64_t n[3] = { f->name_len, f->build_id_len, f->nsegs };
	XXH3_64bits_update(&st, n, sizeof(n));
	XXH3_64bits_update(&st, f->id, FILE_ID_LEN);
	XXH3_64bits_update(&st, f->name, f->name_len);
	XXH3_64bits_update(&st, f->build_id, f->build_id_len);
	XXH3_64bits_update(&st, f->segs, 3 * f->nsegs * sizeof(uint64_t));
	uint64_t h = XXH3_64bits_digest(&st);
	return h ? h : 1; /* 0 means none */
}

uint64_t ch_batch_file(struct ch_batch *b, const struct ch_file *f)
{
	uint64_t h = ch_file_hash(f);
	ch_rb_u64(&b->files, h);
	ch_rb_string(&b->files, (const char *)f->id, FILE_ID_LEN);
	ch_rb_string(&b->files, f->name, f->name_len);
	ch_rb_string(&b->files, (const char *)f->build_id, f->build_id_len);
	ch_rb_varint(&b->files, 3 * f->nsegs);
	for (size_t i = 0; i < 3 * f->nsegs; i++)
		ch_rb_u64(&b->files, f->segs[i]);
	b->n_files++;
	return h;
}

uint64_t ch_stack_hash(const uint64_t *frames, size_t n)
{
	return XXH3_64bits_withSeed(frames, n * sizeof(*frames), CH_SEED_STACK);
}

uint64_t ch_labels_hash(const char *const *keys, const char *const *values, size_t n)
{
	XXH3_state_t st;
	XXH3_64bits_reset_withSeed(&st, CH_SEED_LABELS);
	for (size_t i = 0; i < n; i++) {
		hash_bytes(&st, keys[i], strlen(keys[i]));
		hash_bytes(&st, values[i], strlen(values[i]));
	}
	return XXH3_64bits_digest(&st);
}

uint64_t ch_batch_id(const char *agent, uint64_t sequence)
{
	XXH3_state_t st;
	XXH3_64bits_reset_withSeed(&st, CH_SEED_BATCH);
	hash_bytes(&st, agent, strlen(agent));
	XXH3_64bits_update(&st, &sequence, sizeof(sequence));
	return XXH3_64bits_digest(&st);
}

void ch_rb_sample(struct buf *out, const struct ch_sample *s)
{
	ch_rb_string(out, s->project, strlen(s->project));
	ch_rb_string(out, s->kind, strlen(s->kind));
	ch_rb_u32(out, s->ts);
	ch_rb_u64(out, s->stack);
	ch_rb_u64(out, s->labels);
	ch_rb_u32(out, s->hz);
	ch_rb_u64(out, s->value);
	ch_rb_u64(out, s->batch);
}

void ch_batch_init(struct ch_batch *b, const char *project, const char *agent, uint64_t sequence)
{
	memset(b, 0, sizeof(*b));
	b->project = project;
	b->agent = agent;
	b->sequence = sequence;
	b->id = ch_batch_id(agent, sequence);
}

void ch_batch_free(struct ch_batch *b)
{
	buf_free(&b->samples);
	buf_free(&b->stacks);
	buf_free(&b->frames);
	buf_free(&b->strings);
	buf_free(&b->label_sets);
	buf_free(&b->files);
}

int ch_batch_sample(struct ch_batch *b, const struct ch_sample *s)
{
	if (b->n_samples >= CH_MAX_BATCH_ROWS)
		return -1;
	struct ch_sample r = *s;
	r.project = b->project;
	r.batch = b->id;
	ch_rb_sample(&b->samples, &r);
	if (!b->n_samples || s->ts < b->ts_min)
		b->ts_min = s->ts;
	if (!b->n_samples || s->ts > b->ts_max)
		b->ts_max = s->ts;
	b->n_samples++;
	return 0;
}

uint64_t ch_batch_string(struct ch_batch *b, const char *s, size_t n)
{
	uint64_t h = ch_string_hash(s, n);
	ch_rb_u64(&b->strings, h);
	ch_rb_string(&b->strings, s, n);
	b->n_strings++;
	return h;
}

uint64_t ch_batch_frame(struct ch_batch *b, const struct ch_frame *f)
{
	uint64_t h = ch_frame_hash(f);
	ch_rb_u64(&b->frames, h);
	ch_rb_u8(&b->frames, f->type);
	ch_rb_u64(&b->frames, f->address);
	ch_rb_u64(&b->frames, f->function);
	ch_rb_u64(&b->frames, f->binary);
	ch_rb_u64(&b->frames, f->build_id);
	ch_rb_u64(&b->frames, f->file);
	b->n_frames++;
	return h;
}

uint64_t ch_batch_stack(struct ch_batch *b, const uint64_t *frames, size_t n)
{
	uint64_t h = ch_stack_hash(frames, n);
	ch_rb_u64(&b->stacks, h);
	ch_rb_varint(&b->stacks, n);
	for (size_t i = 0; i < n; i++)
		ch_rb_u64(&b->stacks, frames[i]);
	b->n_stacks++;
	return h;
}

uint64_t ch_batch_label_set(struct ch_batch *b, const char *const *keys, const char *const *values,
			    size_t n)
{
	uint64_t h = ch_labels_hash(keys, values, n);
	ch_rb_u64(&b->label_sets, h);
	ch_rb_varint(&b->label_sets, n);
	for (size_t i = 0; i < n; i++)
		ch_rb_string(&b->label_sets, keys[i], strlen(keys[i]));
	ch_rb_varint(&b->label_sets, n);
	for (size_t i = 0; i < n; i++)
		ch_rb_string(&b->label_sets, values[i], strlen(values[i]));
	b->n_label_sets++;
	return h;
}

void ch_sql_string(struct buf *out, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	buf_reserve(out, n + 2);
	buf_putc(out, '\'');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '\\' || c == '\'') {
			buf_putc(out, '\\');
			buf_putc(out, (char)c);
		} else if (c < 0x20 || c >= 0x7f) {
			char x[4] = { '\\', 'x', hex[c >> 4], hex[c & 15] };
			buf_append(out, x, 4);
		} else {
			buf_putc(out, (char)c);
		}
	}
	buf_putc(out, '\'');
}

/* Synchronous Distributed inserts: acknowledged means on the shard. */
#define INSERT_SETTINGS "insert_distributed_sync=1"

enum ch_rc ch_insert_rows(struct ch_conn *c, const char *table, const char *columns,
			  const struct buf *body, struct buf *err)
{
	if (!body->len)
		return CH_OK;
	struct buf sql = { 0 };
	buf_printf(&sql, "INSERT INTO %s.%s (%s) FORMAT RowBinary", ch_conn_database(c), table, columns);
	enum ch_rc rc = ch_query(c, 0, sql.data, body->data, body->len, 1, 0, INSERT_SETTINGS, NULL, err);
	buf_free(&sql);
	return rc;
}

/* The ids, of the batches b[i] with want[i] set, that the batches table
 * (samples: 0) holds: found[i] set for each. */
static enum ch_rc stored(struct ch_conn *c, struct ch_batch *const *b, size_t n, const bool *want,
			 int samples, bool *found, struct buf *err)
{
	struct buf sql = { 0 }, ans = { 0 };
	const char *d = ch_conn_database(c);
	size_t k = 0;
	if (samples)
		buf_printf(&sql, "SELECT DISTINCT batch FROM %s.samples WHERE ", d);
	else
		buf_printf(&sql, "SELECT batch FROM %s.batches WHERE batch IN (", d);
	for (size_t i = 0; i < n; i++) {
		if (!want[i])
			continue;
		if (samples) {
			/* the primary key's prefix bounds the read */
			buf_puts(&sql, k ? " OR (project = " : "(project = ");
			ch_sql_string(&sql, b[i]->project, strlen(b[i]->project));
			buf_printf(&sql, " AND ts >= toDateTime(%u) AND ts <= toDateTime(%u) AND batch = %llu)",
				   b[i]->ts_min, b[i]->ts_max, (unsigned long long)b[i]->id);
		} else {
			buf_printf(&sql, "%s%llu", k ? ", " : "", (unsigned long long)b[i]->id);
		}
		k++;
	}
	if (!samples)
		buf_putc(&sql, ')');
	enum ch_rc rc = k ? ch_query(c, 0, sql.data, NULL, 0, 0, 0, NULL, &ans, err) : CH_OK;
	for (const char *p = ans.data; rc == CH_OK && p && *p;) {
		char *end;
		unsigned long long id = strtoull(p, &end, 10);
		if (end == p)
			break;
		for (size_t i = 0; i < n; i++)
			if (want[i] && b[i]->id == id)
				found[i] = true;
		p = *end ? end + 1 : end;
	}
	buf_free(&sql);
	buf_free(&ans);
	return rc;
}

static void batch_row(struct buf *row, const struct ch_batch *b)
{
	ch_rb_u64(row, b->id);
	ch_rb_string(row, b->project, strlen(b->project));
	ch_rb_string(row, b->agent, strlen(b->agent));
	ch_rb_u64(row, b->sequence);
	ch_rb_u64(row, b->n_samples);
	ch_rb_u32(row, b->ts_min);
	ch_rb_u32(row, b->ts_max);
	ch_rb_u32(row, (uint32_t)time(NULL));
}

static enum ch_rc record(struct ch_conn *c, const struct buf *rows, struct buf *err)
{
	return ch_insert_rows(c, "batches", "batch, project, agent, sequence, rows, ts_min, ts_max, inserted",
		      rows, err);
}

enum ch_rc ch_insert_batch(struct ch_conn *c, struct ch_batch *b, enum ch_insert_result *result,
			   struct buf *err)
{
	return ch_insert_batches(c, &b, 1, result, err);
}

enum ch_rc ch_insert_batches(struct ch_conn *c, struct ch_batch *const *b, size_t n,
			     enum ch_insert_result *result, struct buf *err)
{
	enum ch_rc rc = CH_OK;
	bool *want = xcalloc(2 * n + 1, sizeof(bool)), *found = want + n;
	struct buf rows = { 0 };
	/* Stored before? The batches row is written last, so a batch whose
	 * samples landed but whose row did not (the answer lost between the
	 * two) is found by its samples: they went in one block, whole. */
	for (size_t i = 0; i < n; i++) {
		result[i] = CH_INSERTED;
		want[i] = !b[i]->unique;
	}
	/* the same id twice in the group: the later one is the duplicate */
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < i && want[i] && !found[i]; j++)
			found[i] = want[j] && b[j]->id == b[i]->id;
	for (size_t i = 0; i < n; i++)
		want[i] = want[i] && !found[i];
	rc = stored(c, b, n, want, 0, found, err);
	for (size_t i = 0; i < n; i++)
		want[i] = want[i] && !found[i] && b[i]->n_samples;
	if (rc == CH_OK)
		rc = stored(c, b, n, want, 1, found, err);
	for (size_t i = 0; rc == CH_OK && i < n; i++)
		if (want[i] && found[i])
			batch_row(&rows, b[i]);
	if (rc == CH_OK)
		rc = record(c, &rows, err);
	/* Dictionaries before the samples that name them: every new batch's
	 * rows of a table in one insert (RowBinary bodies concatenate). */
	static const struct { const char *table, *columns; size_t off; } tables[] = {
		{ "strings", "hash, value", offsetof(struct ch_batch, strings) },
		{ "files", "hash, id, name, build_id, segs", offsetof(struct ch_batch, files) },
		{ "frames", "hash, type, address, function, binary, build_id, file",
		  offsetof(struct ch_batch, frames) },
		{ "stacks", "hash, frames", offsetof(struct ch_batch, stacks) },
		{ "label_sets", "hash, keys, values", offsetof(struct ch_batch, label_sets) },
		{ "samples", "project, kind, ts, stack, labels, hz, value, batch",
		  offsetof(struct ch_batch, samples) },
	};
	struct buf body = { 0 };
	for (size_t t = 0; rc == CH_OK && t < sizeof(tables) / sizeof(tables[0]); t++) {
		body.len = 0;
		for (size_t i = 0; i < n; i++) {
			const struct buf *part = (const struct buf *)((const char *)b[i] + tables[t].off);
			if (!found[i] && part->len)
				buf_append(&body, part->data, part->len);
		}
		rc = ch_insert_rows(c, tables[t].table, tables[t].columns, &body, err);
	}
	rows.len = 0;
	for (size_t i = 0; i < n; i++) {
		if (found[i])
			result[i] = CH_DUPLICATE;
		else
			batch_row(&rows, b[i]);
	}
	if (rc == CH_OK)
		rc = record(c, &rows, err);
	buf_free(&body);
	buf_free(&rows);
	free(want);
	return rc;
}
