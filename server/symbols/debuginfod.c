/* debuginfod.c - see debuginfod.h. */
#include "debuginfod.h"

#include <elfutils/debuginfod.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "elfsyms.h"
#include "hmap.h"
#include "log.h"
#include "util.h"

#define MAX_QUEUE 1024
#define RETRY_NS (600ull * 1000000000ull)
#define BUILD_DEADLINE_NS (120ull * 1000000000ull)

struct known {
	struct file_id id;
	uint64_t when_ns; /* last attempt */
	bool ok;
};

struct fetcher {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	struct symbols *sym;
	struct store_file *queue;
	size_t nqueue, capqueue;
	struct known *known;
	size_t nknown, capknown;
	struct hmap known_index;
	bool stopping;
	struct fetcher_stats stats;
	bool busy;             /* the thread is fetching `current` */
	struct file_id current;
};

static struct known *known_entry(struct fetcher *f, const struct file_id *id, bool create)
{
	struct hmap_field_key k = HMAP_FIELD_KEY(f->known, id, id);
	uint32_t idx;
	uint64_t h = hash_bytes(id->b, FILE_ID_LEN);
	if (hmap_find(&f->known_index, h, hmap_field_eq, &k, &idx))
		return &f->known[idx];
	if (!create)
		return NULL;
	xgrow((void **)&f->known, &f->capknown, f->nknown + 1, sizeof(*f->known));
	idx = (uint32_t)f->nknown++;
	f->known[idx] = (struct known){ *id, 0, false };
	hmap_insert(&f->known_index, h, idx);
	return &f->known[idx];
}

static bool fetch(struct fetcher *f, debuginfod_client *c, const struct store_file *file)
{
	char hex[2 * ELF_BUILD_ID_MAX + 1];
	hex_encode(file->build_id, file->build_id_len, hex);
	char *path = NULL;
	int fd = debuginfod_find_debuginfo(c, file->build_id, file->build_id_len, &path);
	if (fd < 0) {
		log_info("debuginfod: no debug info for build ID %s: %s", hex, strerror(-fd));
		return false;
	}
	struct elf_segment segs[STORE_FILE_SEGMENTS];
	int nsegs = 0;
	for (int i = 0; i < file->nsegs && i < STORE_FILE_SEGMENTS; i++)
		segs[nsegs++] = (struct elf_segment){ file->segs[i][0], file->segs[i][1], file->segs[i][2] };
	int exe_fd = -1;
	if (nsegs == 0) {
		/* The agent did not say: the executable's own headers will. */
		char *epath = NULL;
		exe_fd = debuginfod_find_executable(c, file->build_id, file->build_id_len, &epath);
		free(epath);
		if (exe_fd >= 0)
			nsegs = elfsyms_exec_segments(exe_fd, segs, STORE_FILE_SEGMENTS);
	}
	bool ok = false;
	if (nsegs <= 0) {
		log_warn("debuginfod: debug info for %s found, but not the executable's segments", hex);
	} else {
		struct elfsyms_opts o = { true, 0, now_mono_ns() + BUILD_DEADLINE_NS, segs, nsegs };
		struct buf sf = { 0 }, err = { 0 };
		const char *why = NULL;
		long n = elfsyms_extract(fd, fd, &o, &sf, &why);
		if (n < 0) {
			log_warn("debuginfod: cannot read the debug info of %s (%s): %s", hex, path, why);
		} else {
			int rc = symbols_put(f->sym, &file->id, file->build_id, file->build_id_len, sf.data,
					     sf.len, &err);
			ok = rc >= 0;
			if (rc < 0)
				log_warn("debuginfod: storing symbols of %s failed: %s", hex, err.data);
			else
				log_info("debuginfod: symbols for build ID %s: %ld ranges, %zu bytes", hex, n, sf.len);
		}
		buf_free(&sf);
		buf_free(&err);
	}
	if (exe_fd >= 0)
		close(exe_fd);
	close(fd);
	free(path);
	return ok;
}

static void *run(void *arg)
{
	struct fetcher *f = arg;
	debuginfod_client *c = debuginfod_begin();
	pthread_mutex_lock(&f->mu);
	while (!f->stopping) {
		if (!f->nqueue) {
			pthread_cond_wait(&f->cond, &f->mu);
			continue;
		}
		struct store_file file = f->queue[0];
		memmove(f->queue, f->queue + 1, (f->nqueue - 1) * sizeof(*f->queue));
		f->nqueue--;
		f->busy = true;
		f->current = file.id;
		pthread_mutex_unlock(&f->mu);
		bool ok = c && fetch(f, c, &file);
		pthread_mutex_lock(&f->mu);
		f->busy = false;
		struct known *k = known_entry(f, &file.id, true);
		k->ok = ok;
		k->when_ns = now_mono_ns();
		if (ok)
			f->stats.fetched++;
		else
			f->stats.failed++;
	}
	pthread_mutex_unlock(&f->mu);
	if (c)
		debuginfod_end(c);
	return NULL;
}

struct fetcher *fetcher_start(struct symbols *sym, const char *urls, const char *data_dir,
			      struct buf *err)
{
	/* libdebuginfod takes its settings from the environment: set once,
	 * here, before the thread that uses them starts. */
	struct buf cache = { 0 };
	buf_printf(&cache, "%s/debuginfod-cache", data_dir);
	if (mkdir(cache.data, 0755) < 0 && errno != EEXIST) {
		buf_printf(err, "cannot create %s: %s", cache.data, strerror(errno));
		buf_free(&cache);
		return NULL;
	}
	setenv("DEBUGINFOD_URLS", urls, 1);
	setenv("DEBUGINFOD_CACHE_PATH", cache.data, 1);
	if (!getenv("DEBUGINFOD_TIMEOUT"))
		setenv("DEBUGINFOD_TIMEOUT", "30", 1);
	buf_free(&cache);
	struct fetcher *f = xcalloc(1, sizeof(*f));
	f->sym = sym;
	pthread_mutex_init(&f->mu, NULL);
	pthread_cond_init(&f->cond, NULL);
	if (pthread_create(&f->thread, NULL, run, f) != 0) {
		buf_puts(err, "cannot start the debuginfod thread");
		free(f);
		return NULL;
	}
	return f;
}

void fetcher_stop(struct fetcher *f)
{
	if (!f)
		return;
	thread_stop_join(f->thread, &f->mu, &f->cond, &f->stopping);
	free_all(f->queue, f->known);
	hmap_free(&f->known_index);
	pthread_mutex_destroy(&f->mu);
	pthread_cond_destroy(&f->cond);
	free(f);
}

bool fetcher_request(struct fetcher *f, const struct store_file *file)
{
	if (!f || !file->build_id_len)
		return false;
	pthread_mutex_lock(&f->mu);
	struct known *k = known_entry(f, &file->id, false);
	uint64_t now = now_mono_ns();
	bool queued = false;
	for (size_t i = 0; i < f->nqueue && !queued; i++)
		queued = fileid_equal(&f->queue[i].id, &file->id);
	if (!queued && (!k || (!k->ok && now - k->when_ns > RETRY_NS)) && f->nqueue < MAX_QUEUE) {
		k = known_entry(f, &file->id, true);
		k->when_ns = now;
		xgrow((void **)&f->queue, &f->capqueue, f->nqueue + 1, sizeof(*f->queue));
		f->queue[f->nqueue++] = *file;
		f->stats.requested++;
		pthread_cond_signal(&f->cond);
		queued = true;
	}
	bool pending = queued || (f->busy && fileid_equal(&f->current, &file->id));
	pthread_mutex_unlock(&f->mu);
	return pending;
}

void fetcher_get_stats(struct fetcher *f, struct fetcher_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!f)
		return;
	pthread_mutex_lock(&f->mu);
	*out = f->stats;
	pthread_mutex_unlock(&f->mu);
}
