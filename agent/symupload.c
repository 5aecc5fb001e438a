/* symupload.c - see symupload.h. */
#include "symupload.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "compress.h"
#include "elfsyms.h"
#include "log.h"
#include "memstats.h"
#include "symfile.h"
#include "util.h"

#define MAX_JOBS 4096
#define BATCH_JOBS 256
#define MAX_ATTEMPTS 3
#define MAX_SYMFILE (256u << 20)

struct job {
	struct file_id id;
	char name[256];
	char *path; /* where the file was mapped from (for its debug file), or NULL; owned */
	int fd;
	int attempts;
	bool cubin;         /* a cubin to PUT /ingest/v1/cubins/{crc} as it is */
	uint64_t cubin_crc;
};

static void job_done(struct job *j)
{
	close(j->fd);
	free(j->path);
	j->path = NULL;
}

struct symupload {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct job *jobs;
	size_t njobs, capjobs;
	struct http_client *http;
	struct symupload_opts opts;
	char *project_q; /* "project=<name, percent-encoded>" or "" */
	struct symupload_stats stats;
	bool stopping;
	bool check_failing; /* only the uploader thread touches it */
};

/* Appends s percent-encoded (RFC 3986 unreserved characters kept). */
static void percent_encode(struct buf *out, const char *s)
{
	for (const char *c = s; *c; c++) {
		if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
		    *c == '.' || *c == '-' || *c == '_' || *c == '~')
			buf_putc(out, *c);
		else
			buf_printf(out, "%%%02X", (unsigned char)*c);
	}
}

static void wait_ms(struct symupload *u, long ms)
{
	struct timespec ts;
	deadline_in_ms(&ts, (uint64_t)ms);
	while (!u->stopping && pthread_cond_timedwait(&u->cond, &u->lock, &ts) != ETIMEDOUT)
		;
}

/* Asks which of the jobs' files the server lacks. Fills missing[i].
 * Returns 0 or -1 (transport or protocol failure). */
static int query_missing(struct symupload *u, struct job *jobs, size_t n, char *missing)
{
	json_t *ids = json_array();
	for (size_t i = 0; i < n; i++) {
		if (jobs[i].cubin)
			continue; /* the server keeps one image per CRC: no question */
		char hex[FILE_ID_HEX_LEN + 1];
		fileid_hex(&jobs[i].id, hex);
		json_array_append_new(ids, json_string(hex));
	}
	json_t *req = json_pack("{s:o, s:i}", "file_ids", ids, "quality",
				(int)(u->opts.dwarf ? SYMFILE_HAS_LINES | SYMFILE_HAS_INLINES : 0));
	char *body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	struct buf resp = { 0 }, err = { 0 };
	struct buf mpath = { 0 };
	buf_printf(&mpath, "/ingest/v1/symbols/missing%s%s", *u->project_q ? "?" : "", u->project_q);
	int status = http_send(u->http, "POST", mpath.data, "application/json",
			       NULL, body, strlen(body), &resp, &err);
	buf_free(&mpath);
	free(body);
	int rc = -1;
	if (status != 200) {
		if (!u->check_failing)
			log_warn("cannot ask the server which symbols it lacks: %s (will retry)",
				 status < 0 ? err.data : "unexpected status");
		u->check_failing = true;
		goto out;
	}
	if (u->check_failing)
		log_info("symbol uploads resumed");
	u->check_failing = false;
	json_error_t jerr;
	json_t *doc = json_loadb(resp.data, resp.len, 0, &jerr);
	json_t *arr = doc ? json_object_get(doc, "missing") : NULL;
	if (!json_is_array(arr)) {
		log_warn("symbol check: malformed answer");
		json_decref(doc);
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		missing[i] = jobs[i].cubin;
	size_t k;
	json_t *v;
	json_array_foreach(arr, k, v)
	{
		struct file_id id;
		if (!json_is_string(v) || fileid_parse_hex(json_string_value(v), &id) < 0)
			continue;
		for (size_t i = 0; i < n; i++)
			if (fileid_equal(&id, &jobs[i].id))
				missing[i] = 1;
	}
	json_decref(doc);
	rc = 0;
out:
	buf_free(&resp);
	buf_free(&err);
	return rc;
}

/* The symbol file compressed as it is encoded (elfsyms_extract_to): only
 * the compressed bytes are held. Fails once more than limit bytes of
 * symbol file come. */
struct zsink {
	struct buf *z;
	size_t raw, limit;
	bool over;
};

static int zsink_write(void *ctx, const void *data, size_t n)
{
	struct zsink *s = ctx;
	s->raw += n;
	if (s->raw > s->limit) {
		s->over = true;
		return -1;
	}
	memstats_add(MEM_SYMBOLS, -(int64_t)s->z->cap);
	int rc = zstd_stream_write(data, n, s->z);
	memstats_add(MEM_SYMBOLS, (int64_t)s->z->cap);
	return rc;
}

/* What the builder holds once the symbols are read (elfsyms_opts.on_bytes). */
static void on_builder_bytes(void *ctx, size_t bytes)
{
	size_t *held = ctx;
	memstats_add(MEM_SYMBOLS, (int64_t)bytes - (int64_t)*held);
	*held = bytes;
}

/* Extracts the symbol file of fd (symbols from dfd) into z, compressed.
 * Returns the number of ranges, or -1 with *why (*over: more than limit
 * bytes). *raw is the symbol file's length. */
static long extract(int fd, int dfd, struct elfsyms_opts *eo, size_t limit, struct buf *z,
		    size_t *raw, bool *over, const char **why)
{
	memstats_add(MEM_SYMBOLS, -(int64_t)z->cap);
	buf_free(z);
	struct zsink s = { z, 0, limit, false };
	size_t held = 0, len = 0;
	eo->on_bytes = on_builder_bytes;
	eo->on_bytes_ctx = &held;
	long n = -1;
	if (zstd_stream_begin(3) < 0) {
		*why = "cannot start compressing";
	} else {
		n = elfsyms_extract_to(fd, dfd, eo, zsink_write, &s, &len, why);
		memstats_add(MEM_SYMBOLS, -(int64_t)z->cap);
		if (n >= 0 && zstd_stream_end(z) < 0) {
			*why = "cannot compress";
			n = -1;
		}
		memstats_add(MEM_SYMBOLS, (int64_t)z->cap);
	}
	memstats_add(MEM_SYMBOLS, -(int64_t)held);
	*over = s.over;
	*raw = len;
	return n;
}

/* An estimate of what extracting the symbols of a file of size bytes
 * holds at its peak (the names, the ranges, the compressed output): what
 * it reserves of the agent's memory budget (memstats.h). */
static uint64_t symbols_estimate(int fd, int dfd)
{
	struct stat st;
	uint64_t size = 0;
	if (fstat(fd, &st) == 0)
		size = (uint64_t)st.st_size;
	if (dfd >= 0 && fstat(dfd, &st) == 0)
		size = MAX(size, (uint64_t)st.st_size);
	return size < MEMSTATS_SMALL_FILE ? 0 : size / 5;
}

enum upload_result {
	UPLOAD_GIVE_UP = -1, /* refused, or cannot be sent: not tried again */
	UPLOAD_RETRY = 0,    /* the server failed: tried again later */
	UPLOAD_DONE = 1,
};

/* How the server took an upload (status < 0: not reached). */
static enum upload_result upload_answer(int status, const char *what, const struct buf *resp,
					const struct buf *err)
{
	if (status >= 200 && status < 300)
		return UPLOAD_DONE;
	if (status < 0 || status >= 500 || status == 429) {
		log_warn("uploading %s: %s", what, status < 0 ? err->data : "server error");
		return UPLOAD_RETRY;
	}
	log_warn("server refused %s (%d): %.200s", what, status, resp->data ? resp->data : "");
	return UPLOAD_GIVE_UP;
}

/* A cubin, read whole (at most MAX_SYMFILE bytes) and sent as it is. */
static enum upload_result upload_cubin(struct symupload *u, struct job *j)
{
	struct buf data = { 0 }, resp = { 0 }, err = { 0 }, path = { 0 };
	enum upload_result result = UPLOAD_GIVE_UP;
	char chunk[65536];
	ssize_t got;
	while ((got = read(j->fd, chunk, sizeof(chunk))) > 0 && data.len + (size_t)got <= MAX_SYMFILE)
		buf_append(&data, chunk, (size_t)got);
	if (got != 0 || data.len == 0) {
		log_warn("cubin %s: unreadable, empty or larger than %u bytes", j->name, MAX_SYMFILE);
		goto out;
	}
	buf_printf(&path, "/ingest/v1/cubins/%016llx%s%s", (unsigned long long)j->cubin_crc,
		   *u->project_q ? "?" : "", u->project_q);
	int status = http_send(u->http, "PUT", path.data, "application/octet-stream", NULL, data.data, data.len,
			       &resp, &err);
	result = upload_answer(status, j->name, &resp, &err);
	if (result == UPLOAD_DONE) {
		log_debug("uploaded cubin %s (%zu bytes)", j->name, data.len);
		pthread_mutex_lock(&u->lock);
		u->stats.uploaded_bytes += data.len;
		pthread_mutex_unlock(&u->lock);
	}
out:
	buf_free(&data);
	buf_free(&resp);
	buf_free(&err);
	buf_free(&path);
	return result;
}

static enum upload_result upload(struct symupload *u, struct job *j)
{
	if (j->cubin)
		return upload_cubin(u, j);
	struct buf z = { 0 }, resp = { 0 }, err = { 0 }, path = { 0 };
	const char *why = NULL;
	enum upload_result result = UPLOAD_GIVE_UP;
	struct elfsyms_opts eo = { u->opts.dwarf, u->opts.max_input, now_mono_ns() + 30000000000ull };
	/* A local debug file of the same build (a -dbgsym/-dbg package's, or
	 * one split off by the user) names what the stripped file cannot. */
	char found[4400];
	int dfd = u->opts.debug_dir && *u->opts.debug_dir
			  ? elfsyms_open_debug_file(j->fd, j->path, u->opts.debug_dir, found, sizeof(found))
			  : -1;
	/* Larger than anything sent: MAX_SYMFILE, and the flag's size unless
	 * DWARF is read (then a file over it is sent without DWARF). */
	size_t cap = (size_t)MIN((uint64_t)MAX_SYMFILE, u->opts.max_symbfile);
	size_t limit = eo.dwarf ? (size_t)MIN((uint64_t)SIZE_MAX, u->opts.max_symbfile) : cap;
	size_t raw = 0;
	bool over = false;
	uint64_t reserved = memstats_reserve(symbols_estimate(j->fd, dfd));
	long n = -1;
	if (dfd >= 0) {
		n = extract(j->fd, dfd, &eo, limit, &z, &raw, &over, &why);
		if (n >= 0) {
			log_debug("symbols of %s from the local debug file %s", j->name, found);
		} else if (!over) {
			log_debug("the local debug file %s of %s: %s; using the file itself", found, j->name, why);
			close(dfd);
			dfd = -1;
		}
	}
	if (n < 0 && !over)
		n = extract(j->fd, j->fd, &eo, limit, &z, &raw, &over, &why);
	if (over && eo.dwarf) {
		log_info("symbols of %s with DWARF are more than %llu bytes: uploading ELF symbols only",
			 j->name, (unsigned long long)u->opts.max_symbfile);
		eo.dwarf = false;
		n = extract(j->fd, dfd >= 0 ? dfd : j->fd, &eo, cap, &z, &raw, &over, &why);
	}
	if (dfd >= 0)
		close(dfd);
	memstats_release(reserved);
	if (reserved)
		memstats_trim();
	if (over || (n >= 0 && raw > cap)) {
		log_warn("symbols of %s too large to upload (more than %zu bytes)", j->name, cap);
		goto out;
	}
	if (n < 0) {
		log_debug("no symbols for %s: %s", j->name, why);
		goto out;
	}
	char hex[FILE_ID_HEX_LEN + 1];
	fileid_hex(&j->id, hex);
	buf_printf(&path, "/ingest/v1/symbols/%s?name=", hex);
	percent_encode(&path, j->name);
	if (*u->project_q)
		buf_printf(&path, "&%s", u->project_q);
	uint8_t bid[ELF_BUILD_ID_MAX];
	int bl = elfsyms_build_id(j->fd, bid);
	if (bl > 0) {
		char bhex[2 * ELF_BUILD_ID_MAX + 1];
		hex_encode(bid, (size_t)bl, bhex);
		buf_printf(&path, "&build_id=%s", bhex);
	}
	int status = http_send(u->http, "PUT", path.data, "application/x-ember-symfile", "zstd",
			       z.data, z.len, &resp, &err);
	result = upload_answer(status, j->name, &resp, &err);
	if (result == UPLOAD_DONE) {
		log_debug("uploaded %ld symbols of %s (%s, %zu bytes)", n, j->name, hex, z.len);
		pthread_mutex_lock(&u->lock);
		u->stats.uploaded_bytes += z.len;
		pthread_mutex_unlock(&u->lock);
	}
out:
	memstats_add(MEM_SYMBOLS, -(int64_t)z.cap);
	buf_free(&z);
	buf_free(&resp);
	buf_free(&err);
	buf_free(&path);
	return result;
}

static void *run(void *arg)
{
	struct symupload *u = arg;
	struct job *work = xcalloc(BATCH_JOBS, sizeof(*work));
	char missing[BATCH_JOBS];
	long backoff = 0;
	pthread_mutex_lock(&u->lock);
	while (!u->stopping) {
		if (!u->njobs) {
			pthread_cond_wait(&u->cond, &u->lock);
			continue;
		}
		size_t n = MIN(u->njobs, (size_t)BATCH_JOBS);
		memcpy(work, u->jobs, n * sizeof(*work));
		memmove(u->jobs, u->jobs + n, (u->njobs - n) * sizeof(*work));
		u->njobs -= n;
		pthread_mutex_unlock(&u->lock);

		/* An unreachable server costs no attempts: the files wait (the
		 * queue is bounded) and are asked about again after a backoff.
		 * Only uploads the server failed count towards MAX_ATTEMPTS. */
		size_t retry = 0;
		bool unreachable = query_missing(u, work, n, missing) < 0;
		if (unreachable) {
			retry = n;
		} else {
			for (size_t i = 0; i < n; i++) {
				enum upload_result r = missing[i] ? upload(u, &work[i]) : UPLOAD_DONE;
				pthread_mutex_lock(&u->lock);
				u->stats.checked++;
				if (!missing[i])
					u->stats.present++;
				else if (r == UPLOAD_DONE)
					u->stats.uploaded++;
				pthread_mutex_unlock(&u->lock);
				if (r == UPLOAD_RETRY && ++work[i].attempts < MAX_ATTEMPTS) {
					work[retry++] = work[i];
					continue;
				}
				if (r != UPLOAD_DONE) {
					pthread_mutex_lock(&u->lock);
					u->stats.failed++;
					pthread_mutex_unlock(&u->lock);
				}
				job_done(&work[i]);
			}
		}
		pthread_mutex_lock(&u->lock);
		for (size_t i = 0; i < retry; i++) {
			if (u->njobs >= MAX_JOBS) {
				u->stats.skipped++;
				job_done(&work[i]);
				continue;
			}
			xgrow((void **)&u->jobs, &u->capjobs, u->njobs + 1, sizeof(*u->jobs));
			u->jobs[u->njobs++] = work[i];
		}
		if (retry) {
			backoff = backoff ? MIN(backoff * 2, 30000L) : 1000L;
			wait_ms(u, backoff);
		} else {
			backoff = 0;
		}
	}
	for (size_t i = 0; i < u->njobs; i++)
		job_done(&u->jobs[i]);
	u->njobs = 0;
	pthread_mutex_unlock(&u->lock);
	free(work);
	return NULL;
}

struct symupload *symupload_start(const struct http_opts *opts, const struct symupload_opts *so)
{
	struct symupload *u = xcalloc(1, sizeof(*u));
	u->opts = *so;
	u->opts.debug_dir = so->debug_dir ? xstrdup(so->debug_dir) : NULL;
	u->opts.project = NULL;
	struct buf q = { 0 };
	if (so->project && *so->project) {
		buf_puts(&q, "project=");
		percent_encode(&q, so->project);
	}
	u->project_q = buf_steal(&q, NULL);
	u->http = http_client_new(opts);
	if (!u->http) {
		free(u->project_q);
		free((char *)u->opts.debug_dir);
		free(u);
		return NULL;
	}
	pthread_mutex_init(&u->lock, NULL);
	cond_init_monotonic(&u->cond);
	if (pthread_create(&u->thread, NULL, run, u) != 0) {
		http_client_free(u->http);
		free(u->project_q);
		free((char *)u->opts.debug_dir);
		free(u);
		return NULL;
	}
	pthread_setname_np(u->thread, "ember-symbols");
	return u;
}

/* Queues j (its fd owned from here). */
static void add_job(struct symupload *u, const struct job *j)
{
	pthread_mutex_lock(&u->lock);
	if (u->njobs >= MAX_JOBS || u->stopping) {
		u->stats.skipped++;
		pthread_mutex_unlock(&u->lock);
		close(j->fd);
		free(j->path);
		return;
	}
	xgrow((void **)&u->jobs, &u->capjobs, u->njobs + 1, sizeof(*u->jobs));
	u->jobs[u->njobs++] = *j;
	u->stats.queued++;
	pthread_cond_signal(&u->cond);
	pthread_mutex_unlock(&u->lock);
}

void symupload_add(struct symupload *u, const struct file_id *id, const char *name,
		   const char *path, int fd)
{
	struct job j = { .id = *id, .fd = fd };
	snprintf(j.name, sizeof(j.name), "%s", name);
	j.path = path && path[0] == '/' ? xstrndup(path, strnlen(path, 4095)) : NULL;
	add_job(u, &j);
}

void symupload_add_cubin(struct symupload *u, uint64_t crc, int fd)
{
	struct job j = { .fd = fd, .cubin = true, .cubin_crc = crc };
	snprintf(j.name, sizeof(j.name), "cubin:%016llx", (unsigned long long)crc);
	add_job(u, &j);
}

void symupload_get_stats(struct symupload *u, struct symupload_stats *out)
{
	pthread_mutex_lock(&u->lock);
	*out = u->stats;
	pthread_mutex_unlock(&u->lock);
}

void symupload_stop(struct symupload *u)
{
	if (!u)
		return;
	thread_stop_join(u->thread, &u->lock, &u->cond, &u->stopping);
	http_client_free(u->http);
	free(u->project_q);
	free((char *)u->opts.debug_dir);
	free(u->jobs);
	pthread_mutex_destroy(&u->lock);
	pthread_cond_destroy(&u->cond);
	free(u);
}
