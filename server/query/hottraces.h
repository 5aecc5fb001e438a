/* hottraces.h - the hot traces of a project: the code paths (whole
 * stacks, as the user sees them: symbolized display frames) that hold at
 * least a minimum share of the project's time of one event kind in a
 * window, grouped by the application that runs them.
 *
 * The application of a sample is its k8s.deployment.name, else its
 * container.name, else the script an interpreter runs (script.name, named
 * with its executable: "train.py (python3.11)"), else its
 * process.executable.name ("[unknown]" without any): the same deployment
 * on several clusters is one application.
 *
 * Each trace carries its frames (outermost first: type, name, binary,
 * source file and line when known), its time in the window (value in the
 * kind's unit, and core-seconds: samples / rate for on_cpu, ns / 1e9 for
 * off_cpu and cuda), its share of the project's total, its average cores
 * (or GPUs, or waiting threads) over the window (from the window's first
 * bucket with data to its end: never above the peak bucket) and a series of
 * HT_BUCKETS buckets of cores. Each application carries the sum of its
 * hot traces, its peak bucket, and the entities its samples came from
 * (hosts, clusters, namespaces, deployments, pods, containers,
 * executables) with their core-seconds.
 *
 * Ownership: the result owns every array and string; ht_result_free
 * frees them. Threading: one call, one thread; the store and symbols
 * serve concurrent queries.
 */
#ifndef EMBER_SERVER_HOTTRACES_H
#define EMBER_SERVER_HOTTRACES_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "server/store/store.h"
#include "server/symbols/symbols.h"

#define HT_BUCKETS 24
#define HT_DEFAULT_WINDOW_MS (6 * 3600 * 1000LL)
#define HT_DEFAULT_MIN_SHARE 0.005
#define HT_MAX_APPS 64          /* applications kept, by time */
#define HT_MAX_TRACES_PER_APP 16 /* hot traces kept per application, by time */
#define HT_MAX_ENTITIES 32      /* entities named per application and type */

struct ht_frame {
	uint8_t type;          /* enum store_frame_type */
	char *name, *binary;   /* never NULL ("" when unknown) */
	char *file;            /* NULL when unknown */
	uint32_t line;         /* 0 when unknown */
};

struct ht_trace {
	uint64_t id;           /* stable: a hash of the application and the frames */
	struct ht_frame *frames; /* outermost first */
	size_t nframes;
	double seconds;        /* core-seconds (GPU-seconds, thread-seconds) in the window */
	double share;          /* of the project's total of the kind, 0..1 */
	double cores;          /* average over the window */
	double series[HT_BUCKETS]; /* cores per bucket */
};

struct ht_entity {
	const char *type;      /* "host", "cluster", "namespace", "deployment", "pod", "container", "executable", "script" */
	char *value;
	double seconds;
};

struct ht_app {
	char *name;
	const char *source;    /* what names it: "deployment", "container", "script" or "executable" */
	struct ht_trace *traces; /* by seconds, descending */
	size_t ntraces;
	double seconds, share, cores, peak; /* of its hot traces; peak: highest bucket */
	double series[HT_BUCKETS];
	struct ht_entity *entities;
	size_t nentities;
};

struct ht_params {
	char project_id[37];
	uint8_t kind;          /* SEK_ON_CPU, SEK_OFF_CPU or SEK_CUDA */
	int64_t end_ms;        /* the window ends here (now) */
	int64_t window_ms;     /* HT_DEFAULT_WINDOW_MS */
	double min_share;      /* HT_DEFAULT_MIN_SHARE */
	/* Trace ids left out (suppressed: an accepted cost); their time
	 * still counts in the project's total. Sorted ascending. */
	const uint64_t *suppressed;
	size_t nsuppressed;
};

struct ht_result {
	uint8_t kind;
	int64_t start_ms, end_ms;
	double total_seconds;  /* every sample of the project and kind in the window */
	double window_seconds; /* the window from its first bucket with data (>= 1) */
	double bucket_seconds;
	size_t suppressed;     /* hot traces left out because suppressed */
	struct ht_app *apps;   /* by peak, descending */
	size_t napps;
};

/* Reads the window and fills out (zeroed first). Returns 0, or -1 with a
 * message in err. */
int hottraces_compute(struct store *st, struct symbols *sym, const struct ht_params *p,
		      struct ht_result *out, struct buf *err);
void ht_result_free(struct ht_result *r);

/* The application of a label set: deployment, else container, else
 * the script an interpreter runs ("train.py (python3.11)", in buf), else
 * executable (source says which: "deployment", "container", "script",
 * "executable"); "[unknown]" when none. */
const char *ht_app_of(const char *deployment, const char *container, const char *executable,
		      const char *script, char *buf, size_t len, const char **source);

#endif
