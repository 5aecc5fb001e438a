/* test_cuda_report.c - gpu/cuda_report.c: libembercuda.so's aggregation
 * table, span list and lib/cuda_wire.h encoding, decoded back here. */
#include "testutil.h"

#include "../../gpu/cuda_report.h"
#include "../../agent/cuda_wire_parse.h"

/* Collected datagrams. */
struct sink {
	unsigned char *msgs[64];
	size_t lens[64];
	int n;
	int refuse_after; /* emit fails from this message on; -1 never */
};

static int sink_emit(const void *msg, size_t len, void *ctx)
{
	struct sink *s = ctx;
	if (s->refuse_after >= 0 && s->n >= s->refuse_after)
		return -1;
	assert_true(s->n < 64);
	assert_true(len <= CUDA_WIRE_MAX_MSG);
	s->msgs[s->n] = malloc(len);
	assert_non_null(s->msgs[s->n]);
	memcpy(s->msgs[s->n], msg, len);
	s->lens[s->n] = len;
	s->n++;
	return 0;
}

static void sink_free(struct sink *s)
{
	for (int i = 0; i < s->n; i++)
		free(s->msgs[i]);
	s->n = 0;
}

/* Decodes every AGG entry of the sink, checking the framing; calls fn for each. */
static unsigned decode_aggs(struct sink *s, void (*fn)(const struct cuda_wire_agg *, const char *api,
						     const char *name, void *), void *ctx)
{
	unsigned total = 0;
	for (int i = 0; i < s->n; i++) {
		struct cuda_wire_hdr h;
		memcpy(&h, s->msgs[i], sizeof(h));
		assert_int_equal(h.magic, CUDA_WIRE_MAGIC);
		assert_int_equal(h.version, CUDA_WIRE_VERSION);
		assert_int_equal(h.type, CUDA_WIRE_AGG);
		assert_int_equal(h.length, s->lens[i]);
		assert_true(h.count > 0);
		size_t off = sizeof(h);
		for (uint32_t k = 0; k < h.count; k++) {
			struct cuda_wire_agg a;
			assert_true(off + sizeof(a) <= s->lens[i]);
			memcpy(&a, s->msgs[i] + off, sizeof(a));
			assert_true(a.api_len >= 1 && a.api_len <= CUDA_WIRE_API_MAX);
			assert_true(a.name_len >= 1 && a.name_len <= CUDA_WIRE_NAME_MAX);
			size_t strings = off + sizeof(a);
			assert_true(a.nvtx_len <= CUDA_WIRE_NVTX_BYTES_MAX);
			size_t next = off + ((sizeof(a) + a.api_len + a.name_len + a.nvtx_len + 7) & ~(size_t)7);
			assert_true(next <= s->lens[i]);
			for (size_t p = strings + a.api_len + a.name_len + a.nvtx_len; p < next; p++)
				assert_int_equal(s->msgs[i][p], 0);
			char api[CUDA_WIRE_API_MAX + 1], name[CUDA_WIRE_NAME_MAX + 1];
			memcpy(api, s->msgs[i] + strings, a.api_len);
			api[a.api_len] = 0;
			memcpy(name, s->msgs[i] + strings + a.api_len, a.name_len);
			name[a.name_len] = 0;
			fn(&a, api, name, ctx);
			off = next;
			total++;
		}
		assert_int_equal(off, s->lens[i]);
	}
	return total;
}

static struct cuda_agg_key key(uint64_t stack, uint32_t tid, const char *name)
{
	struct cuda_agg_key k = {
		.stack_id = stack, .tid = tid, .kind = CUDA_WIRE_KIND_KERNEL, .device = 0, .stream = 7,
		.context = 1, .api = "cudaLaunchKernel", .name = name, .name_len = strlen(name),
	};
	return k;
}

/* The NVTX path is part of the key: the same launch under other ranges is
 * another entry, and the path travels after the name. */
struct nvtx_seen {
	unsigned with_path[3];
	uint64_t ns[3];
};

static void on_nvtx_entry(const struct cuda_wire_agg *a, const char *api, const char *name, void *ctx)
{
	(void)api;
	(void)name;
	struct nvtx_seen *seen = ctx;
	unsigned which = a->nvtx_len == 0 ? 0 : a->nvtx_len == 6 ? 1 : 2;
	seen->with_path[which]++;
	seen->ns[which] += a->total_ns;
}

static void test_agg_nvtx_path(void **state)
{
	(void)state;
	struct cuda_agg *agg = cuda_agg_new(64);
	assert_non_null(agg);
	static const char outer[] = "\x05" "epoch", both[] = "\x05" "epoch" "\x0a" "train_step";
	struct cuda_agg_key k = key(9, 1, "_Z4stepv");
	assert_int_equal(cuda_agg_add(agg, &k, 10), 0);
	k.nvtx = outer;
	k.nvtx_len = sizeof(outer) - 1;
	assert_int_equal(cuda_agg_add(agg, &k, 20), 0);
	assert_int_equal(cuda_agg_add(agg, &k, 1), 0);
	k.nvtx = both;
	k.nvtx_len = sizeof(both) - 1;
	assert_int_equal(cuda_agg_add(agg, &k, 300), 0);
	assert_int_equal(cuda_agg_entries(agg), 3);
	k.nvtx_len = CUDA_WIRE_NVTX_BYTES_MAX + 1; /* longer than the wire allows */
	assert_int_equal(cuda_agg_add(agg, &k, 1), -1);
	struct sink s = { .refuse_after = -1 };
	unsigned next = 0;
	assert_int_equal(cuda_agg_encode(agg, sink_emit, &s, 0, &next), 1);
	struct nvtx_seen seen = { { 0 }, { 0 } };
	assert_int_equal(decode_aggs(&s, on_nvtx_entry, &seen), 3);
	assert_int_equal(seen.ns[0], 10);
	assert_int_equal(seen.ns[1], 21);
	assert_int_equal(seen.ns[2], 300);
	/* the bytes themselves */
	const unsigned char *m = s.msgs[0];
	int found = 0;
	for (size_t i = 0; i + 8 + sizeof(both) - 1 <= s.lens[0]; i++)
		found |= memcmp(m + i, "_Z4stepv" "\x05" "epoch" "\x0a" "train_step", 8 + sizeof(both) - 1) == 0;
	assert_true(found);
	sink_free(&s);
	cuda_agg_free(agg);
}

struct sums {
	uint64_t ns, count;
	unsigned entries;
	unsigned long_names;
	unsigned others;
};

static void sum_entry(const struct cuda_wire_agg *a, const char *api, const char *name, void *ctx)
{
	struct sums *s = ctx;
	s->ns += a->total_ns;
	s->count += a->count;
	s->entries++;
	if (a->name_len == CUDA_WIRE_NAME_MAX)
		s->long_names++;
	if (!strcmp(name, "[other]")) {
		s->others++;
		assert_int_equal(a->stack_id, 0);
	}
	assert_string_equal(api, "cudaLaunchKernel");
}

static void test_agg_sums_by_key(void **state)
{
	(void)state;
	struct cuda_agg *agg = cuda_agg_new(16);
	assert_non_null(agg);
	struct cuda_agg_key a = key(5, 100, "k_big"), b = key(6, 100, "k_big"), c = key(5, 100, "k_small");
	for (int i = 0; i < 10; i++) {
		assert_int_equal(cuda_agg_add(agg, &a, 700), 0);
		assert_int_equal(cuda_agg_add(agg, &b, 1), 0);
		assert_int_equal(cuda_agg_add(agg, &c, 300), 0);
	}
	/* the name is copied: the caller's buffer may change */
	char buf[16] = "k_tmp";
	struct cuda_agg_key t = key(5, 100, buf);
	assert_int_equal(cuda_agg_add(agg, &t, 9), 0);
	strcpy(buf, "k_xxx");
	assert_int_equal(cuda_agg_entries(agg), 4);

	struct sink s = { .refuse_after = -1 };
	assert_int_equal(cuda_agg_encode(agg, sink_emit, &s, 0, NULL), 1);
	struct sums sum = { 0 };
	assert_int_equal(decode_aggs(&s, sum_entry, &sum), 4);
	assert_int_equal(sum.ns, 10 * 700 + 10 + 10 * 300 + 9);
	assert_int_equal(sum.count, 31);
	sink_free(&s);

	/* bad keys are refused */
	struct cuda_agg_key bad = a;
	bad.kind = 0;
	assert_int_equal(cuda_agg_add(agg, &bad, 1), -1);
	bad = a;
	bad.name_len = 0;
	assert_int_equal(cuda_agg_add(agg, &bad, 1), -1);

	cuda_agg_reset(agg);
	assert_int_equal(cuda_agg_entries(agg), 0);
	assert_int_equal(cuda_agg_encode(agg, sink_emit, &s, 0, NULL), 0);
	assert_int_equal(s.n, 0);
	cuda_agg_free(agg);
}

/* More keys than fit: the rest is summed under "[other]", nothing is lost,
 * and the datagrams split at CUDA_WIRE_MAX_MSG. */
static void test_agg_overflow_and_split(void **state)
{
	(void)state;
	struct cuda_agg *agg = cuda_agg_new(1000);
	assert_non_null(agg);
	static char longname[3000];
	memset(longname, 'x', sizeof(longname) - 1);
	uint64_t want = 0;
	for (unsigned i = 0; i < 1500; i++) {
		struct cuda_agg_key k = key(i + 1, 1, longname);
		k.name_len = 100 + i; /* distinct names, some past CUDA_WIRE_NAME_MAX */
		int rc = cuda_agg_add(agg, &k, i);
		assert_int_equal(rc, i < 1000 ? 0 : 1);
		want += i;
	}
	assert_int_equal(cuda_agg_entries(agg), 1000);
	assert_int_equal(cuda_agg_overflowed(agg), 500);

	struct sink s = { .refuse_after = -1 };
	int msgs = cuda_agg_encode(agg, sink_emit, &s, 0, NULL);
	assert_true(msgs > 1);
	struct sums sum = { 0 };
	assert_int_equal(decode_aggs(&s, sum_entry, &sum), 1001);
	assert_int_equal(sum.ns, want);
	assert_int_equal(sum.count, 1500);
	assert_int_equal(sum.others, 1);
	assert_true(sum.long_names > 0); /* cut to CUDA_WIRE_NAME_MAX */
	sink_free(&s);

	/* an emit that fails stops the encoding */
	s.refuse_after = 1;
	assert_int_equal(cuda_agg_encode(agg, sink_emit, &s, 0, NULL), -1);
	assert_int_equal(s.n, 1);
	sink_free(&s);
	cuda_agg_free(agg);
	assert_null(cuda_agg_new(0));
}

/* An emit that fails part way (the agent went away, or its queue is
 * full): encoding again from where it stopped, or carrying the rest into
 * the next report's table, sends every entry exactly once -- the overflow
 * entries too, and entries the next table already has are summed. */
static void test_agg_carry_what_was_not_sent(void **state)
{
	(void)state;
	struct cuda_agg *agg = cuda_agg_new(1000);
	assert_non_null(agg);
	static char longname[3000];
	memset(longname, 'y', sizeof(longname) - 1);
	uint64_t want = 0, want_count = 0;
	for (unsigned i = 0; i < 1400; i++) {
		struct cuda_agg_key k = key(i + 1, 1, longname);
		k.name_len = 200 + i;
		for (unsigned n = 0; n < 1 + i % 3; n++) {
			assert_true(cuda_agg_add(agg, &k, 10 + i) >= 0);
			want += 10 + i;
			want_count++;
		}
	}
	for (int refuse = 0; refuse < 6; refuse++) {
		struct sink s = { .refuse_after = refuse };
		unsigned next = 12345;
		int rc = cuda_agg_encode(agg, sink_emit, &s, 0, &next);
		struct sums sent = { 0 };
		decode_aggs(&s, sum_entry, &sent);
		int emitted = s.n;
		sink_free(&s);
		assert_int_equal(rc, -1); /* the table takes more than 6 messages */
		assert_int_equal(emitted, refuse);

		/* again from where it stopped: the rest, once */
		struct sink rest = { .refuse_after = -1 };
		unsigned end = 0;
		assert_true(cuda_agg_encode(agg, sink_emit, &rest, next, &end) >= 1);
		assert_true(end > next);
		struct sums more = { 0 };
		decode_aggs(&rest, sum_entry, &more);
		sink_free(&rest);
		assert_int_equal(sent.ns + more.ns, want);
		assert_int_equal(sent.count + more.count, want_count);
		assert_int_equal(more.others, 1);

		/* or carried into the next report's table, which has time of
		 * its own under one of the same keys */
		struct cuda_agg *later = cuda_agg_new(1000);
		assert_non_null(later);
		struct cuda_agg_key k = key(1400, 1, longname);
		k.name_len = 200 + 1399;
		assert_int_equal(cuda_agg_add(later, &k, 5), 0);
		assert_int_equal(cuda_agg_carry(later, agg, next), 0);
		struct sink all = { .refuse_after = -1 };
		assert_true(cuda_agg_encode(later, sink_emit, &all, 0, NULL) >= 1);
		struct sums carried = { 0 };
		decode_aggs(&all, sum_entry, &carried);
		sink_free(&all);
		assert_int_equal(sent.ns + carried.ns, want + 5);
		assert_int_equal(sent.count + carried.count, want_count + 1);
		cuda_agg_free(later);
	}
	/* carrying from past the end adds nothing */
	struct cuda_agg *none = cuda_agg_new(10);
	unsigned end = 0;
	struct sink s = { .refuse_after = -1 };
	assert_true(cuda_agg_encode(agg, sink_emit, &s, 0, &end) > 1);
	sink_free(&s);
	assert_int_equal(cuda_agg_carry(none, agg, end), 0);
	assert_int_equal(cuda_agg_entries(none), 0);
	assert_int_equal(cuda_agg_encode(none, sink_emit, &s, 0, NULL), 0);
	cuda_agg_free(none);
	cuda_agg_free(agg);
}

static void test_spans_capped_and_encoded(void **state)
{
	(void)state;
	struct cuda_spans *sp = cuda_spans_new(3);
	assert_non_null(sp);
	/* the launch as the AGG key names it: API, name and NVTX path go out */
	const char path[] = "\x05" "epoch";
	struct cuda_agg_key k = { .stack_id = 4, .tid = 9, .kind = CUDA_WIRE_KIND_MEMCPY, .device = 1,
				  .stream = 2, .context = 3, .api = "cuMemcpyHtoDAsync", .name = "HtoD",
				  .name_len = 4, .nvtx = path, .nvtx_len = 6 };
	for (int i = 0; i < 5; i++)
		assert_int_equal(cuda_spans_add(sp, 10 + (uint64_t)i, 20 + (uint64_t)i, &k), i < 3 ? 0 : 1);
	struct cuda_agg_key noapi = k;
	noapi.api = NULL;
	assert_int_equal(cuda_spans_add(sp, 10, 20, &noapi), -1);
	assert_int_equal(cuda_spans_count(sp), 3);
	assert_int_equal(cuda_spans_refused(sp), 2);
	struct sink s = { .refuse_after = -1 };
	assert_int_equal(cuda_spans_encode(sp, sink_emit, &s), 1);
	struct cuda_wire_hdr h;
	memcpy(&h, s.msgs[0], sizeof(h));
	assert_int_equal(h.type, CUDA_WIRE_SPAN);
	assert_int_equal(h.count, 3);
	struct cuda_wire_span w;
	size_t entry = sizeof(w) + 32; /* 17 + 4 + 6 bytes of strings, padded to 32 */
	assert_int_equal(h.length, sizeof(h) + 3 * entry);
	struct cuda_wire_span back;
	memcpy(&back, s.msgs[0] + sizeof(h) + entry, sizeof(back));
	/* every field of the second span (the struct has no padding) */
	const struct cuda_wire_span want = { .start_ns = 11, .end_ns = 21, .stack_id = 4, .tid = 9,
					     .kind = CUDA_WIRE_KIND_MEMCPY, .name_len = 4, .device = 1,
					     .stream = 2, .context = 3, .api_len = 17, .nvtx_len = 6 };
	assert_memory_equal(&back, &want, sizeof(back));
	assert_memory_equal(s.msgs[0] + sizeof(h) + 2 * entry + sizeof(w),
			    "cuMemcpyHtoDAsyncHtoD\x05" "epoch\0\0\0\0\0", 32);
	/* what the agent reads back */
	uint16_t type;
	uint32_t count;
	assert_int_equal(cuda_wire_check(s.msgs[0], h.length, &type, &count), CWR_OK);
	size_t off = 0;
	struct cuda_agg_view v;
	unsigned n = 0;
	while (cuda_wire_next_span(s.msgs[0], h.length, &off, &v)) {
		assert_int_equal(v.start_ns, 10 + n);
		assert_int_equal(v.end_ns, 20 + n);
		assert_int_equal(v.a.total_ns, 10);
		assert_int_equal(v.a.count, 1);
		assert_memory_equal(v.api, "cuMemcpyHtoDAsync", 17);
		assert_memory_equal(v.name, "HtoD", 4);
		assert_memory_equal(v.nvtx, path, 6);
		n++;
	}
	assert_int_equal(n, 3);
	sink_free(&s);
	cuda_spans_reset(sp);
	assert_int_equal(cuda_spans_count(sp), 0);
	cuda_spans_free(sp);
}

static void test_single_messages(void **state)
{
	(void)state;
	unsigned char buf[CUDA_WIRE_MAX_MSG];
	struct cuda_wire_stats st = { .launches = 3, .launches_sampled = 2 };
	size_t n = cuda_msg_single(buf, CUDA_WIRE_STATS, &st, sizeof(st));
	assert_int_equal(n, sizeof(struct cuda_wire_hdr) + sizeof(st));
	struct cuda_wire_hdr h;
	memcpy(&h, buf, sizeof(h));
	assert_int_equal(h.magic, CUDA_WIRE_MAGIC);
	assert_int_equal(h.type, CUDA_WIRE_STATS);
	assert_int_equal(h.count, 1);
	assert_int_equal(h.length, n);
}


/* The exact split: parts proportional, remainders to the largest
 * fractions (the lower index among equal ones), summing to the total. */
static void test_split(void **state)
{
	(void)state;
	uint64_t parts[4];
	const uint64_t w311[3] = { 3, 1, 1 };
	assert_int_equal(cuda_split(700000, w311, 3, parts), 0);
	assert_int_equal(parts[0], 420000);
	assert_int_equal(parts[1], 140000);
	assert_int_equal(parts[2], 140000);
	const uint64_t w111[3] = { 1, 1, 1 };
	assert_int_equal(cuda_split(10, w111, 3, parts), 0);
	assert_int_equal(parts[0], 4);
	assert_int_equal(parts[1], 3);
	assert_int_equal(parts[2], 3);
	const uint64_t w12[2] = { 1, 2 };
	assert_int_equal(cuda_split(7, w12, 2, parts), 0); /* 2.33, 4.67 */
	assert_int_equal(parts[0], 2);
	assert_int_equal(parts[1], 5);
	/* no overflow: total * weight needs 128 bits */
	const uint64_t big[3] = { UINT64_MAX / 2, UINT64_MAX / 3, 7 };
	uint64_t total = UINT64_MAX - 5;
	assert_int_equal(cuda_split(total, big, 3, parts), 0);
	assert_true(parts[0] + parts[1] + parts[2] == total);
	assert_true(parts[0] > parts[1] && parts[1] > parts[2]);
	/* a zero weight takes nothing; every one zero, or none: refused */
	const uint64_t w0[4] = { 0, 5, 0, 5 };
	assert_int_equal(cuda_split(11, w0, 4, parts), 0);
	assert_int_equal(parts[0], 0);
	assert_int_equal(parts[1], 6);
	assert_int_equal(parts[2], 0);
	assert_int_equal(parts[3], 5);
	const uint64_t zeros[2] = { 0, 0 };
	assert_int_equal(cuda_split(11, zeros, 2, parts), -1);
	assert_int_equal(cuda_split(11, w0, 0, parts), -1);
	/* many random cases: the sum is exact and no part strays more than one
	 * unit from its share */
	uint64_t x = 88172645463325252ull;
	for (int round = 0; round < 2000; round++) {
		uint64_t w[7];
		size_t n = 1 + (size_t)(round % 7);
		uint64_t sum = 0;
		for (size_t i = 0; i < n; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			w[i] = x % 1000;
			sum += w[i];
		}
		if (sum == 0)
			continue;
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		uint64_t t = x % 100000000000ull, got = 0;
		uint64_t p[7];
		assert_int_equal(cuda_split(t, w, n, p), 0);
		for (size_t i = 0; i < n; i++) {
			unsigned __int128 share = (unsigned __int128)t * w[i] / sum;
			assert_true(p[i] == (uint64_t)share || p[i] == (uint64_t)share + 1);
			got += p[i];
		}
		assert_true(got == t);
	}
}

struct pc_seen {
	unsigned entries;
	uint64_t ns[8];
	char stall[8][64];
	uint64_t offset[8], cubin[8], count[8], stack[8];
	char nvtx[8][32]; /* the NVTX path's bytes, NUL-terminated */
};

/* Decodes the PC messages of the sink. */
static void decode_pcs(struct sink *s, struct pc_seen *out)
{
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < s->n; i++) {
		struct cuda_wire_hdr h;
		memcpy(&h, s->msgs[i], sizeof(h));
		if (h.type != CUDA_WIRE_PC)
			continue;
		size_t off = sizeof(h);
		for (uint32_t j = 0; j < h.count; j++) {
			struct cuda_wire_pc w;
			assert_true(off + sizeof(w) <= h.length);
			memcpy(&w, s->msgs[i] + off, sizeof(w));
			const char *api = (const char *)s->msgs[i] + off + sizeof(w);
			assert_memory_equal(api, "cuLaunchKernel", w.api_len);
			assert_memory_equal(api + w.api_len, "gemm", w.name_len);
			assert_true(out->entries < 8 && w.stall_len < 64);
			unsigned e = out->entries++;
			memcpy(out->stall[e], api + w.api_len + w.name_len, w.stall_len);
			out->ns[e] = w.total_ns;
			out->offset[e] = w.pc_offset;
			out->cubin[e] = w.cubin_id;
			out->count[e] = w.count;
			out->stack[e] = w.stack_id;
			assert_true(w.nvtx_len < sizeof(out->nvtx[e]));
			memcpy(out->nvtx[e], api + w.api_len + w.name_len + w.stall_len, w.nvtx_len);
			assert_int_equal(w.reserved16, 0);
			assert_int_equal(w.reserved, 0);
			off += (sizeof(w) + w.api_len + w.name_len + w.stall_len + w.nvtx_len + 7) & ~(size_t)7;
		}
		assert_int_equal(off, h.length);
		uint16_t type;
		uint32_t count;
		assert_int_equal(cuda_wire_check(s->msgs[i], h.length, &type, &count), CWR_OK); /* as the agent reads it */
	}
}

static const char stall_ls[] = "smsp__pcsamp_warps_issue_stalled_long_scoreboard";
static const char stall_mt[] = "smsp__pcsamp_warps_issue_stalled_math_pipe_throttle";

/* A report's kernel entry split over its samples into PC entries (sent in
 * PC messages), a copy left alone, and the samples of a kernel without
 * time in the report kept for the next. */
static void test_apply_pcs(void **state)
{
	(void)state;
	struct cuda_agg *agg = cuda_agg_new(16), *out = cuda_agg_new(64);
	struct cuda_pcs *pcs = cuda_pcs_new(16), *keep = cuda_pcs_new(16);
	assert_non_null(agg);
	assert_non_null(out);
	assert_non_null(pcs);
	assert_non_null(keep);
	struct cuda_agg_key k = { .stack_id = 5, .tid = 1, .kind = CUDA_WIRE_KIND_KERNEL, .api = "cuLaunchKernel",
				  .name = "gemm", .name_len = 4 };
	assert_int_equal(cuda_agg_add(agg, &k, 600), 0);
	assert_int_equal(cuda_agg_add(agg, &k, 401), 0); /* 1001 ns, 2 launches */
	struct cuda_agg_key copy = { .stack_id = 5, .tid = 1, .kind = CUDA_WIRE_KIND_MEMCPY, .api = "cuMemcpy",
				     .name = "HtoD", .name_len = 4 };
	assert_int_equal(cuda_agg_add(agg, &copy, 50), 0);
	assert_int_equal(cuda_pcs_add(pcs, "gemm", 4, 0xc0b1, 0x1a0, stall_ls, 2), 0);
	assert_int_equal(cuda_pcs_add(pcs, "gemm", 4, 0xc0b1, 0x1a0, stall_ls, 1), 0); /* summed: 3 */
	assert_int_equal(cuda_pcs_add(pcs, "gemm", 4, 0xc0b1, 0x1c0, stall_mt, 1), 0);
	assert_int_equal(cuda_pcs_add(pcs, "softmax", 7, 0xc0b1, 0x40, stall_ls, 4), 0);
	assert_int_equal(cuda_pcs_add(pcs, "gemm", 4, 0xc0b1, 0x40, NULL, 4), -1);
	assert_int_equal(cuda_pcs_add(pcs, "gemm", 4, 0xc0b1, 0x40, stall_ls, 0), -1);
	assert_int_equal(cuda_pcs_entries(pcs), 3);

	assert_int_equal(cuda_agg_apply_pcs(out, agg, pcs, keep), 0);
	assert_int_equal(cuda_pcs_entries(pcs), 0);
	assert_int_equal(cuda_pcs_entries(keep), 1); /* softmax waits */
	assert_int_equal(cuda_agg_entries(out), 3);  /* two PC parts and the copy */

	struct sink s = { .refuse_after = -1 };
	assert_int_equal(cuda_agg_encode(out, sink_emit, &s, 0, NULL), 2); /* an AGG and a PC message */
	struct pc_seen seen;
	decode_pcs(&s, &seen);
	assert_int_equal(seen.entries, 2);
	uint64_t sum = 0;
	for (unsigned i = 0; i < seen.entries; i++) {
		sum += seen.ns[i];
		assert_int_equal(seen.cubin[i], 0xc0b1);
		if (seen.offset[i] == 0x1a0) {
			assert_string_equal(seen.stall[i], stall_ls);
			assert_int_equal(seen.ns[i], 751); /* 1001 * 3/4 = 750.75 */
			assert_int_equal(seen.count[i], 3);
		} else {
			assert_int_equal(seen.offset[i], 0x1c0);
			assert_string_equal(seen.stall[i], stall_mt);
			assert_int_equal(seen.ns[i], 250);
			assert_int_equal(seen.count[i], 1);
		}
	}
	assert_int_equal(sum, 1001);
	unsigned aggs = 0;
	for (int i = 0; i < s.n; i++) {
		struct cuda_wire_hdr h;
		memcpy(&h, s.msgs[i], sizeof(h));
		aggs += h.type == CUDA_WIRE_AGG ? h.count : 0;
	}
	assert_int_equal(aggs, 1); /* the copy, whole */
	sink_free(&s);

	/* A PC entry carried to the next report stays a PC entry: applying
	 * again with no samples changes nothing. */
	struct cuda_agg *again = cuda_agg_new(64);
	assert_int_equal(cuda_agg_carry(again, out, 0), 0);
	cuda_agg_reset(agg);
	assert_int_equal(cuda_agg_apply_pcs(agg, again, keep, NULL), 0);
	assert_int_equal(cuda_agg_entries(agg), 3);
	assert_int_equal(cuda_pcs_entries(keep), 0); /* no softmax time: dropped with keep NULL */
	assert_int_equal(cuda_agg_encode(agg, sink_emit, &s, 0, NULL), 2);
	decode_pcs(&s, &seen);
	assert_int_equal(seen.entries, 2);
	assert_int_equal(seen.ns[0] + seen.ns[1], 1001);
	sink_free(&s);

	/* A full table: the parts that do not fit keep their time under
	 * [other] (as a plain kernel entry). */
	struct cuda_agg *small = cuda_agg_new(1);
	cuda_agg_reset(agg);
	assert_int_equal(cuda_agg_add(agg, &k, 1001), 0);
	assert_int_equal(cuda_pcs_add(pcs, "gemm", 4, 0xc0b1, 0x1a0, stall_ls, 3), 0);
	assert_int_equal(cuda_pcs_add(pcs, "gemm", 4, 0xc0b1, 0x1c0, stall_mt, 1), 0);
	assert_int_equal(cuda_agg_apply_pcs(small, agg, pcs, NULL), 0);
	assert_int_equal(cuda_agg_entries(small), 1);
	/* (the part that did not fit counts its samples) */
	assert_true(cuda_agg_overflowed(small) == 1 || cuda_agg_overflowed(small) == 3);
	assert_int_equal(cuda_agg_encode(small, sink_emit, &s, 0, NULL), 2);
	decode_pcs(&s, &seen);
	assert_int_equal(seen.entries, 1);
	sink_free(&s);

	/* More (offset, stall) keys than CUDA_PC_PARTS_MAX: the busiest get
	 * parts, the share of the others stays on the kernel; exact sum. */
	struct cuda_agg *many = cuda_agg_new(1024), *one = cuda_agg_new(4);
	struct cuda_pcs *lots = cuda_pcs_new(1024);
	assert_int_equal(cuda_agg_add(one, &k, 1000000007), 0);
	for (unsigned i = 0; i < CUDA_PC_PARTS_MAX + 10; i++)
		assert_int_equal(cuda_pcs_add(lots, "gemm", 4, 0xc0b1, 16 * i, stall_ls, i < 10 ? 1 : 100 + i), 0);
	assert_int_equal(cuda_agg_apply_pcs(many, one, lots, NULL), 0);
	assert_int_equal(cuda_agg_entries(many), CUDA_PC_PARTS_MAX + 1);
	assert_int_equal(cuda_agg_encode(many, sink_emit, &s, 0, NULL), 2);
	uint64_t pc_ns = 0, kernel_ns = 0;
	unsigned pcs_seen = 0;
	for (int i = 0; i < s.n; i++) {
		struct cuda_wire_hdr h;
		memcpy(&h, s.msgs[i], sizeof(h));
		size_t off = sizeof(h);
		for (uint32_t j = 0; j < h.count; j++) {
			if (h.type == CUDA_WIRE_PC) {
				struct cuda_wire_pc w;
				memcpy(&w, s.msgs[i] + off, sizeof(w));
				assert_true(w.pc_offset >= 16 * 10); /* the ten least sampled left out */
				pc_ns += w.total_ns;
				pcs_seen++;
				off += (sizeof(w) + w.api_len + w.name_len + w.stall_len + w.nvtx_len + 7) & ~(size_t)7;
			} else {
				struct cuda_wire_agg w;
				memcpy(&w, s.msgs[i] + off, sizeof(w));
				kernel_ns += w.total_ns;
				off += (sizeof(w) + w.api_len + w.name_len + 7) & ~(size_t)7;
			}
		}
	}
	assert_int_equal(pcs_seen, CUDA_PC_PARTS_MAX);
	assert_true(kernel_ns > 0 && kernel_ns < 1000000007 / 100);
	assert_true(pc_ns + kernel_ns == 1000000007);
	sink_free(&s);
	cuda_agg_free(many);
	cuda_agg_free(one);
	cuda_pcs_free(lots);

	cuda_agg_free(small);
	cuda_agg_free(again);
	cuda_agg_free(agg);
	cuda_agg_free(out);
	cuda_pcs_free(pcs);
	cuda_pcs_free(keep);
}

/* The PC entries of a kernel launched inside NVTX ranges name their
 * launch as the kernel entry they were split from does (stack id, thread,
 * NVTX path), so the agent joins them under the same ranges; each
 * entry's time is split over the name's samples on its own path. */
static void test_apply_pcs_keeps_nvtx_path(void **state)
{
	(void)state;
	struct cuda_agg *agg = cuda_agg_new(16), *out = cuda_agg_new(64);
	struct cuda_pcs *pcs = cuda_pcs_new(16);
	assert_non_null(agg);
	assert_non_null(out);
	assert_non_null(pcs);
	static const char path[] = "\x05" "epoch" "\x04" "step";
	struct cuda_agg_key in = { .stack_id = 9, .tid = 1, .kind = CUDA_WIRE_KIND_KERNEL, .api = "cuLaunchKernel",
				   .name = "gemm", .name_len = 4, .nvtx = path, .nvtx_len = sizeof(path) - 1 };
	struct cuda_agg_key bare = in;
	bare.stack_id = 5;
	bare.nvtx = NULL;
	bare.nvtx_len = 0;
	assert_int_equal(cuda_agg_add(agg, &in, 4000), 0);
	assert_int_equal(cuda_agg_add(agg, &bare, 400), 0);
	assert_int_equal(cuda_pcs_add(pcs, "gemm", 4, 0xc0b1, 0x1a0, stall_ls, 3), 0);
	assert_int_equal(cuda_pcs_add(pcs, "gemm", 4, 0xc0b1, 0x1c0, stall_mt, 1), 0);
	assert_int_equal(cuda_agg_apply_pcs(out, agg, pcs, NULL), 0);
	assert_int_equal(cuda_agg_entries(out), 4); /* two parts of each entry */

	struct sink s = { .refuse_after = -1 };
	assert_int_equal(cuda_agg_encode(out, sink_emit, &s, 0, NULL), 1); /* PC entries only */
	struct pc_seen seen;
	decode_pcs(&s, &seen);
	assert_int_equal(seen.entries, 4);
	uint64_t in_ns = 0, bare_ns = 0;
	for (unsigned i = 0; i < seen.entries; i++) {
		if (seen.stack[i] == 9) {
			assert_string_equal(seen.nvtx[i], path);
			in_ns += seen.ns[i];
			assert_int_equal(seen.ns[i], seen.offset[i] == 0x1a0 ? 3000 : 1000);
		} else {
			assert_int_equal(seen.stack[i], 5);
			assert_string_equal(seen.nvtx[i], "");
			bare_ns += seen.ns[i];
		}
	}
	assert_int_equal(in_ns, 4000);
	assert_int_equal(bare_ns, 400);
	sink_free(&s);
	cuda_agg_free(agg);
	cuda_agg_free(out);
	cuda_pcs_free(pcs);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_agg_sums_by_key),
	cmocka_unit_test(test_agg_nvtx_path),
	cmocka_unit_test(test_apply_pcs_keeps_nvtx_path),
	cmocka_unit_test(test_agg_overflow_and_split),
	cmocka_unit_test(test_agg_carry_what_was_not_sent),
	cmocka_unit_test(test_spans_capped_and_encoded),
	cmocka_unit_test(test_single_messages),
	cmocka_unit_test(test_split),
	cmocka_unit_test(test_apply_pcs))
