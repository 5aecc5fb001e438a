/* Unit tests: the server's gRPC layer for OTLP (server/http/otlp_grpc.h):
 * unframing hostile bodies, grpc-message's encoding, the status of each
 * HTTP answer, and whole HTTP/2 conversations through a session in
 * memory (otlp_grpc_feed), the way the fuzz target drives it. */
#include "testutil.h"

#include <nghttp2/nghttp2.h>

#include "server/http/otlp_grpc.h"

static void test_unframe(void **state)
{
	(void)state;
	const uint8_t *m;
	size_t n;
	bool z;
	struct buf err = { 0 };
	assert_int_equal(otlp_grpc_unframe((const uint8_t *)"\0\0\0\0\x02" "ab", 7, 10, &m, &n, &z, &err),
			 GRPC_CODE_OK);
	assert_int_equal(n, 2);
	assert_false(z);
	assert_int_equal(otlp_grpc_unframe((const uint8_t *)"\x01\0\0\0\x01" "a", 6, 10, &m, &n, &z, &err),
			 GRPC_CODE_OK);
	assert_true(z);
	/* None, a prefix cut short, a bad flag, too long, cut short, two. */
	assert_int_equal(otlp_grpc_unframe((const uint8_t *)"", 0, 10, &m, &n, &z, &err),
			 GRPC_CODE_INVALID_ARGUMENT);
	assert_int_equal(otlp_grpc_unframe((const uint8_t *)"\0\0\0", 3, 10, &m, &n, &z, &err),
			 GRPC_CODE_INVALID_ARGUMENT);
	assert_int_equal(otlp_grpc_unframe((const uint8_t *)"\x02\0\0\0\x01" "a", 6, 10, &m, &n, &z, &err),
			 GRPC_CODE_INVALID_ARGUMENT);
	assert_int_equal(otlp_grpc_unframe((const uint8_t *)"\0\0\0\0\x0b", 5, 10, &m, &n, &z, &err),
			 GRPC_CODE_RESOURCE_EXHAUSTED);
	assert_int_equal(otlp_grpc_unframe((const uint8_t *)"\0\xff\xff\xff\xff", 5, UINT32_MAX, &m, &n,
					   &z, &err),
			 GRPC_CODE_INVALID_ARGUMENT);
	assert_int_equal(otlp_grpc_unframe((const uint8_t *)"\0\0\0\0\x02" "a", 6, 10, &m, &n, &z, &err),
			 GRPC_CODE_INVALID_ARGUMENT);
	assert_int_equal(otlp_grpc_unframe((const uint8_t *)"\0\0\0\0\x01" "a\0", 7, 10, &m, &n, &z, &err),
			 GRPC_CODE_INVALID_ARGUMENT);
	buf_free(&err);
}

static void test_percent_and_status(void **state)
{
	(void)state;
	struct buf b = { 0 };
	otlp_grpc_percent_encode("a %b\n\xc3\xa9", &b);
	assert_string_equal(b.data, "a %25b%0A%C3%A9");
	buf_free(&b);
	otlp_grpc_percent_encode("", &b);
	assert_string_equal(b.data, "");
	buf_free(&b);
	assert_int_equal(otlp_grpc_status_of_http(200), GRPC_CODE_OK);
	assert_int_equal(otlp_grpc_status_of_http(400), GRPC_CODE_INVALID_ARGUMENT);
	assert_int_equal(otlp_grpc_status_of_http(401), GRPC_CODE_UNAUTHENTICATED);
	assert_int_equal(otlp_grpc_status_of_http(403), GRPC_CODE_PERMISSION_DENIED);
	assert_int_equal(otlp_grpc_status_of_http(413), GRPC_CODE_RESOURCE_EXHAUSTED);
	assert_int_equal(otlp_grpc_status_of_http(503), GRPC_CODE_UNAVAILABLE);
	assert_int_equal(otlp_grpc_status_of_http(500), GRPC_CODE_INTERNAL);
}

/* A client's bytes: the preface, SETTINGS, then for each of n streams a
 * HEADERS (path) and a DATA frame with body, END_STREAM. */
static void conversation(struct buf *out, const char *path, const void *body, size_t len, int n)
{
	buf_append(out, NGHTTP2_CLIENT_MAGIC, NGHTTP2_CLIENT_MAGIC_LEN);
	buf_append(out, "\0\0\0\x04\0\0\0\0\0", 9);
	nghttp2_hd_deflater *d;
	assert_int_equal(nghttp2_hd_deflate_new(&d, 4096), 0);
	for (int i = 0; i < n; i++) {
		nghttp2_nv nv[] = {
#define NVS(a, b) { (uint8_t *)(a), (uint8_t *)(b), strlen(a), strlen(b), NGHTTP2_NV_FLAG_NONE }
			NVS(":method", "POST"), NVS(":scheme", "http"), NVS(":path", path),
			NVS(":authority", "x"), NVS("content-type", "application/grpc"),
			NVS("te", "trailers"),
#undef NVS
		};
		uint8_t hb[1024];
		ssize_t hl = nghttp2_hd_deflate_hd(d, hb, sizeof(hb), nv, 6);
		assert_true(hl > 0);
		uint32_t id = 1 + 2 * (uint32_t)i;
		uint8_t fh[9] = { 0, (uint8_t)(hl >> 8), (uint8_t)hl, 1, 4, (uint8_t)(id >> 24),
				  (uint8_t)(id >> 16), (uint8_t)(id >> 8), (uint8_t)id };
		buf_append(out, fh, 9);
		buf_append(out, hb, (size_t)hl);
		uint8_t dh[9] = { (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len, 0, 1,
				  fh[5], fh[6], fh[7], fh[8] };
		buf_append(out, dh, 9);
		buf_append(out, body, len);
	}
	nghttp2_hd_deflate_del(d);
}

static void test_feed(void **state)
{
	(void)state;
	struct buf c = { 0 };
	/* Two calls of Export (an empty request is a valid one). */
	conversation(&c, GRPC_EXPORT_PATH, "\0\0\0\0\0", 5, 2);
	assert_int_equal(otlp_grpc_feed((const uint8_t *)c.data, c.len), 2);
	/* Another method: answered at its headers, never reaches a worker. */
	buf_free(&c);
	conversation(&c, "/x.Y/Z", "\0\0\0\0\0", 5, 1);
	assert_int_equal(otlp_grpc_feed((const uint8_t *)c.data, c.len), 0);
	/* Cut anywhere: no call completes, nothing breaks. */
	buf_free(&c);
	conversation(&c, GRPC_EXPORT_PATH, "\0\0\0\0\0", 5, 1);
	for (size_t k = 0; k < c.len; k++)
		assert_int_equal(otlp_grpc_feed((const uint8_t *)c.data, k), 0);
	buf_free(&c);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_unframe),
	cmocka_unit_test(test_percent_and_status),
	cmocka_unit_test(test_feed))
