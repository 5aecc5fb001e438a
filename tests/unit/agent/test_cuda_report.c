/* test_cuda_report.c - gpu/cuda_report.c: libembercuda.so's aggregation
 * table, span list and lib/cuda_wire.h encoding, decoded back here. */
#include "testutil.h"

#include "../../gpu/cuda_report.h"

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
			size_t next = off + ((sizeof(a) + a.api_len + a.name_len + 7) & ~(size_t)7);
			assert_true(next <= s->lens[i]);
			for (size_t p = strings + a.api_len + a.name_len; p < next; p++)
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
	struct cuda_wire_span w = { .start_ns = 10, .end_ns = 20, .stack_id = 4, .tid = 9,
				    .kind = CUDA_WIRE_KIND_MEMCPY, .device = 1, .stream = 2 };
	for (int i = 0; i < 5; i++)
		assert_int_equal(cuda_spans_add(sp, &w, "HtoD", 4), i < 3 ? 0 : 1);
	assert_int_equal(cuda_spans_count(sp), 3);
	assert_int_equal(cuda_spans_refused(sp), 2);
	struct sink s = { .refuse_after = -1 };
	assert_int_equal(cuda_spans_encode(sp, sink_emit, &s), 1);
	struct cuda_wire_hdr h;
	memcpy(&h, s.msgs[0], sizeof(h));
	assert_int_equal(h.type, CUDA_WIRE_SPAN);
	assert_int_equal(h.count, 3);
	assert_int_equal(h.length, sizeof(h) + 3 * (sizeof(w) + 8));
	struct cuda_wire_span back;
	memcpy(&back, s.msgs[0] + sizeof(h) + sizeof(w) + 8, sizeof(back));
	assert_int_equal(back.stack_id, 4);
	assert_int_equal(back.name_len, 4);
	assert_memory_equal(s.msgs[0] + sizeof(h) + 2 * (sizeof(w) + 8) + sizeof(w), "HtoD\0\0\0\0", 8);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_agg_sums_by_key),
		cmocka_unit_test(test_agg_overflow_and_split),
		cmocka_unit_test(test_agg_carry_what_was_not_sent),
		cmocka_unit_test(test_spans_capped_and_encoded),
		cmocka_unit_test(test_single_messages),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
