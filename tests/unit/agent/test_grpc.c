/* Unit tests: the agent's gRPC client (agent/grpc.h: framing, the answer's
 * headers, trailers and body, hostile ones first, and the time bound of a
 * call to a server that never answers) and the decoding of containerd's
 * Containers/Get answer (agent/containerd.h), and which API a runtime
 * socket is spoken to in (agent/attrib.h). */
#include "testutil.h"

#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include "agent/attrib.h"
#include "agent/containerd.h"
#include "agent/grpc.h"
#include "containerd.pb-c.h"

typedef Containerd__Services__Containers__V1__Container Ctr;
typedef Containerd__Services__Containers__V1__Container__LabelsEntry Label;
typedef Containerd__Services__Containers__V1__GetContainerResponse GetResp;

#define CID "4f1c2b3a4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8"

/* --- framing ------------------------------------------------------------------------ */

static void test_frame_roundtrip(void **state)
{
	(void)state;
	struct buf b = { 0 };
	assert_true(grpc_frame(&b, "\x0a\x03" "abc", 5));
	assert_int_equal(b.len, 10);
	assert_memory_equal(b.data, "\0\0\0\0\x05\x0a\x03" "abc", 10);
	const uint8_t *m;
	size_t n;
	assert_int_equal(grpc_unframe((uint8_t *)b.data, b.len, 100, &m, &n), GRPC_OK);
	assert_int_equal(n, 5);
	assert_ptr_equal(m, (uint8_t *)b.data + 5);
	buf_free(&b);
	/* An empty message is a frame of its own. */
	assert_true(grpc_frame(&b, NULL, 0));
	assert_int_equal(b.len, 5);
	assert_int_equal(grpc_unframe((uint8_t *)b.data, b.len, 100, &m, &n), GRPC_OK);
	assert_int_equal(n, 0);
	buf_free(&b);
	/* A gzip message (OTLP export): flag 1. */
	assert_true(grpc_frame_gzip(&b, "\x1f\x8b", 2));
	assert_memory_equal(b.data, "\x01\0\0\0\x02\x1f\x8b", 7);
	buf_free(&b);
}

static void test_unframe_hostile(void **state)
{
	(void)state;
	const uint8_t *m = NULL;
	size_t n = 0;
	/* nothing, or less than a prefix */
	assert_int_equal(grpc_unframe((const uint8_t *)"", 0, 100, &m, &n), GRPC_PROTOCOL);
	assert_int_equal(grpc_unframe((const uint8_t *)"\0\0\0\0", 4, 100, &m, &n), GRPC_PROTOCOL);
	/* truncated: 10 announced, 3 there */
	assert_int_equal(grpc_unframe((const uint8_t *)"\0\0\0\0\x0a" "abc", 8, 100, &m, &n),
			 GRPC_PROTOCOL);
	/* bytes after the message (a second frame, or garbage) */
	assert_int_equal(grpc_unframe((const uint8_t *)"\0\0\0\0\x01" "a\0\0\0\0\x01" "b", 12, 100,
				      &m, &n),
			 GRPC_PROTOCOL);
	/* compressed flag, and flags nobody defined */
	assert_int_equal(grpc_unframe((const uint8_t *)"\x01\0\0\0\x01" "a", 6, 100, &m, &n),
			 GRPC_PROTOCOL);
	assert_int_equal(grpc_unframe((const uint8_t *)"\x80\0\0\0\x01" "a", 6, 100, &m, &n),
			 GRPC_PROTOCOL);
	/* longer than the cap, even when all of it is there */
	uint8_t big[5 + 200] = { 0, 0, 0, 0, 200 };
	assert_int_equal(grpc_unframe(big, sizeof(big), 199, &m, &n), GRPC_PROTOCOL);
	assert_int_equal(grpc_unframe(big, sizeof(big), 200, &m, &n), GRPC_OK);
	/* a length that would wrap a 32-bit size computation */
	assert_int_equal(grpc_unframe((const uint8_t *)"\0\xff\xff\xff\xff" "a", 6, UINT32_MAX, &m,
				      &n),
			 GRPC_PROTOCOL);
}

/* --- the answer --------------------------------------------------------------------- */

/* Feeds header lines (each ending in \r\n, as libcurl hands them over)
 * and a body; returns what grpc_answer_finish says. */
static int answer(struct grpc_answer *a, size_t max, const char *const *lines, const void *body,
		  size_t blen)
{
	grpc_answer_init(a, max);
	for (size_t i = 0; lines[i]; i++)
		grpc_answer_header(a, lines[i], strlen(lines[i]));
	if (blen)
		grpc_answer_body(a, body, blen);
	return grpc_answer_finish(a);
}

/* answer() of lines and body gives want; the answer is freed. */
static void expect_answer(const char *const *lines, const void *body, size_t blen, int want)
{
	struct grpc_answer a;
	assert_int_equal(answer(&a, 100, lines, body, blen), want);
	grpc_answer_free(&a);
}

static void test_answer_ok(void **state)
{
	(void)state;
	struct grpc_answer a;
	/* headers, body, then trailers */
	const char *lines[] = { "HTTP/2 200\r\n", "content-type: application/grpc\r\n", "\r\n",
				"grpc-status: 0\r\n", "grpc-message: \r\n", NULL };
	assert_int_equal(answer(&a, 100, lines, "\0\0\0\0\x02hi", 7), GRPC_OK);
	assert_int_equal(a.status, 0);
	assert_int_equal(a.len, 2);
	assert_memory_equal(a.msg, "hi", 2);
	grpc_answer_free(&a);
	/* content types with a sub-type or parameters; names in any case */
	const char *lines2[] = { "HTTP/2 200\r\n", "Content-Type: application/grpc+proto\r\n",
				 "Grpc-Status:0\r\n", NULL };
	assert_int_equal(answer(&a, 100, lines2, "\0\0\0\0\0", 5), GRPC_OK);
	assert_int_equal(a.len, 0);
	grpc_answer_free(&a);
	const char *lines3[] = { "HTTP/2 200\r\n", "content-type: application/grpc; charset=x\r\n",
				 "grpc-status: 0\r\n", NULL };
	expect_answer(lines3, "\0\0\0\0\0", 5, GRPC_OK);
}

static void test_answer_status(void **state)
{
	(void)state;
	struct grpc_answer a;
	/* "trailers-only": the status in the headers, no body */
	const char *lines[] = { "HTTP/2 200\r\n", "content-type: application/grpc\r\n",
				"grpc-status: 5\r\n",
				"grpc-message: container \"x\" in namespace \"k8s.io\": not found\r\n",
				"\r\n", NULL };
	assert_int_equal(answer(&a, 100, lines, NULL, 0), GRPC_STATUS);
	assert_int_equal(a.status, GRPC_STATUS_NOT_FOUND);
	assert_string_equal(a.message, "container \"x\" in namespace \"k8s.io\": not found");
	assert_null(a.msg);
	grpc_answer_free(&a);
	/* a message with control characters, and a long one: cut, replaced */
	char longmsg[600] = "grpc-message: ";
	memset(longmsg + 14, 'm', 500);
	strcpy(longmsg + 514, "\r\n");
	const char *lines2[] = { "HTTP/2 200\r\n", "content-type: application/grpc\r\n",
				 "grpc-status: 13\r\n", longmsg, NULL };
	assert_int_equal(answer(&a, 100, lines2, NULL, 0), GRPC_STATUS);
	assert_int_equal(a.status, 13);
	assert_int_equal(strlen(a.message), sizeof(a.message) - 1);
	grpc_answer_free(&a);
	const char *lines3[] = { "HTTP/2 200\r\n", "content-type: application/grpc\r\n",
				 "grpc-status: 2\r\n", "grpc-message: a\x1b[31mb\x7f\r\n", NULL };
	assert_int_equal(answer(&a, 100, lines3, NULL, 0), GRPC_STATUS);
	assert_string_equal(a.message, "a?[31mb?");
	grpc_answer_free(&a);
}

static void test_answer_hostile(void **state)
{
	(void)state;
	struct grpc_answer a;
	const char *frame = "\0\0\0\0\x02hi";
	/* no grpc-status at all (a server that closed mid-answer, or no gRPC) */
	const char *no_status[] = { "HTTP/2 200\r\n", "content-type: application/grpc\r\n", NULL };
	expect_answer(no_status, frame, 7, GRPC_PROTOCOL);
	/* grpc-status that is no number, empty, too long, or said twice */
	const char *bad[][5] = {
		{ "HTTP/2 200\r\n", "content-type: application/grpc\r\n", "grpc-status: zero\r\n" },
		{ "HTTP/2 200\r\n", "content-type: application/grpc\r\n", "grpc-status: \r\n" },
		{ "HTTP/2 200\r\n", "content-type: application/grpc\r\n", "grpc-status: -1\r\n" },
		{ "HTTP/2 200\r\n", "content-type: application/grpc\r\n", "grpc-status: 0000\r\n" },
		{ "HTTP/2 200\r\n", "content-type: application/grpc\r\n", "grpc-status: 5\r\n",
		  "grpc-status: 0\r\n" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_answer(bad[i], frame, 7, GRPC_PROTOCOL);
	/* not gRPC's content type, or none */
	const char *json[] = { "HTTP/2 200\r\n", "content-type: application/json\r\n",
			       "grpc-status: 0\r\n", NULL };
	expect_answer(json, frame, 7, GRPC_PROTOCOL);
	const char *grpcx[] = { "HTTP/2 200\r\n", "content-type: application/grpcx\r\n",
				"grpc-status: 0\r\n", NULL };
	expect_answer(grpcx, frame, 7, GRPC_PROTOCOL);
	const char *no_type[] = { "HTTP/2 200\r\n", "grpc-status: 0\r\n", NULL };
	expect_answer(no_type, frame, 7, GRPC_PROTOCOL);
	/* an HTTP error, or no status line */
	const char *http404[] = { "HTTP/2 404\r\n", "content-type: application/grpc\r\n",
				  "grpc-status: 0\r\n", NULL };
	expect_answer(http404, frame, 7, GRPC_TRANSPORT);
	const char *no_line[] = { "content-type: application/grpc\r\n", "grpc-status: 0\r\n",
				  NULL };
	expect_answer(no_line, frame, 7, GRPC_TRANSPORT);
	/* status 0 without a message, a truncated one, a compressed one */
	const char *ok[] = { "HTTP/2 200\r\n", "content-type: application/grpc\r\n",
			     "grpc-status: 0\r\n", NULL };
	expect_answer(ok, NULL, 0, GRPC_PROTOCOL);
	expect_answer(ok, "\0\0\0\0\x09hi", 7, GRPC_PROTOCOL);
	expect_answer(ok, "\x01\0\0\0\x02hi", 7, GRPC_PROTOCOL);
	/* a body past 5 + max bytes is cut off, not kept */
	grpc_answer_init(&a, 4);
	for (size_t i = 0; ok[i]; i++)
		grpc_answer_header(&a, ok[i], strlen(ok[i]));
	assert_true(grpc_answer_body(&a, "\0\0\0\0\x05", 5));
	assert_true(grpc_answer_body(&a, "abcd", 4));
	assert_false(grpc_answer_body(&a, "e", 1));
	assert_false(grpc_answer_body(&a, "", 0)); /* stays refused */
	assert_int_equal(a.body.len, 9);
	assert_true(a.too_large);
	assert_int_equal(grpc_answer_finish(&a), GRPC_PROTOCOL);
	grpc_answer_free(&a);
	/* a 1xx answer before the real one: only the last one counts */
	const char *cont[] = { "HTTP/2 100\r\n", "grpc-status: 5\r\n", "\r\n", "HTTP/2 200\r\n",
			       "content-type: application/grpc\r\n", "grpc-status: 0\r\n", NULL };
	expect_answer(cont, frame, 7, GRPC_OK);
	/* lines of odd shapes are ignored */
	const char *odd[] = { "HTTP/2 200\r\n", "content-type: application/grpc\r\n", ":\r\n",
			      "grpc-status\r\n", "x", "", "grpc-status: 0\r\n", NULL };
	expect_answer(odd, frame, 7, GRPC_OK);
}

/* --- a server that never answers ----------------------------------------------------- */

struct mute {
	int fd;
	char path[108];
};

/* Accepts connections and says nothing; ends when the listening socket is
 * shut down. */
static void *mute_server(void *arg)
{
	struct mute *m = arg;
	int conns[16], n = 0;
	for (;;) {
		int c = accept(m->fd, NULL, NULL);
		if (c < 0)
			break;
		if (n < 16)
			conns[n++] = c;
		else
			close(c);
	}
	for (int i = 0; i < n; i++)
		close(conns[i]);
	return NULL;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_call_bounded(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	struct mute m;
	snprintf(m.path, sizeof(m.path), "%s/containerd.sock", dir);
	m.fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(m.fd >= 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", m.path);
	assert_int_equal(bind(m.fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(m.fd, 16), 0);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, mute_server, &m), 0);

	struct grpc_answer a;
	grpc_answer_init(&a, GRPC_MAX_MESSAGE);
	double t0 = now_s();
	int rc = grpc_unary(m.path, "/x.Y/Z", NULL, "", 0, 200, &a);
	double dt = now_s() - t0;
	assert_int_equal(rc, GRPC_TRANSPORT);
	assert_true(dt >= 0.15 && dt < 1.5);
	grpc_answer_free(&a);
	/* containerd's lookup gives up after the first namespace's timeout */
	struct ctr_names n;
	t0 = now_s();
	assert_false(containerd_lookup(m.path, CID, 200, &n));
	dt = now_s() - t0;
	assert_true(dt < 0.55);
	assert_null(n.name);
	/* no socket at all: at once */
	char gone[160];
	snprintf(gone, sizeof(gone), "%s/none.sock", dir);
	grpc_answer_init(&a, GRPC_MAX_MESSAGE);
	t0 = now_s();
	assert_int_equal(grpc_unary(gone, "/x.Y/Z", NULL, "", 0, 200, &a), GRPC_TRANSPORT);
	assert_true(now_s() - t0 < 0.15);
	grpc_answer_free(&a);

	shutdown(m.fd, SHUT_RDWR);
	assert_int_equal(pthread_join(t, NULL), 0);
	close(m.fd);
	rm_rf(dir);
	free(dir);
}

/* --- containerd ---------------------------------------------------------------------- */

/* A packed GetContainerResponse about id with the labels k[i]=v[i]
 * (malloc'ed, *len set); with_container false leaves the container out. */
static uint8_t *get_response(const char *id, const char *const *k, const char *const *v,
			     size_t nl, bool with_container, size_t *len)
{
	Ctr c = CONTAINERD__SERVICES__CONTAINERS__V1__CONTAINER__INIT;
	Label ls[8], *lp[8];
	assert_true(nl <= 8);
	c.id = (char *)id;
	c.image = (char *)"registry.example/app:1";
	for (size_t i = 0; i < nl; i++) {
		containerd__services__containers__v1__container__labels_entry__init(&ls[i]);
		ls[i].key = (char *)k[i];
		ls[i].value = (char *)v[i];
		lp[i] = &ls[i];
	}
	c.n_labels = nl;
	c.labels = lp;
	GetResp r = CONTAINERD__SERVICES__CONTAINERS__V1__GET_CONTAINER_RESPONSE__INIT;
	r.container = with_container ? &c : NULL;
	*len = containerd__services__containers__v1__get_container_response__get_packed_size(&r);
	uint8_t *out = malloc(*len + 1);
	assert_non_null(out);
	containerd__services__containers__v1__get_container_response__pack(&r, out);
	return out;
}

static void test_containerd_request(void **state)
{
	(void)state;
	struct buf b = { 0 };
	containerd_get_request(CID, &b);
	/* field 1, length-delimited, 64 bytes */
	assert_int_equal(b.len, 66);
	assert_memory_equal(b.data, "\x0a\x40", 2);
	assert_memory_equal(b.data + 2, CID, 64);
	buf_free(&b);
}

static void test_containerd_decode(void **state)
{
	(void)state;
	struct ctr_names n;
	size_t len;
	/* the CRI plugin's labels (and others) */
	const char *k[] = { "io.cri-containerd.kind", "io.kubernetes.container.name",
			    "io.kubernetes.pod.name", "io.kubernetes.pod.namespace",
			    "io.kubernetes.pod.uid" };
	const char *v[] = { "container", "web", "checkout-7d9f8b6c5-x2x9k", "shop",
			    "5e6c7d8a-1b2c-4d3e-8f40-123456789abc" };
	uint8_t *msg = get_response(CID, k, v, 5, true, &len);
	assert_true(containerd_decode_get(msg, len, CID, &n));
	assert_string_equal(n.name, "web");
	assert_string_equal(n.cname, "web");
	assert_string_equal(n.pod, "checkout-7d9f8b6c5-x2x9k");
	assert_string_equal(n.ns, "shop");
	ctr_names_free(&n);
	/* every truncation of it either decodes to the same container or not at all */
	for (size_t cut = 0; cut < len; cut++) {
		if (containerd_decode_get(msg, cut, CID, &n))
			assert_string_equal(n.name, n.cname ? n.cname : "4f1c2b3a4d5e");
		ctr_names_free(&n);
	}
	/* an answer about another container is refused */
	assert_false(containerd_decode_get(msg, len, "ffff" CID, &n));
	assert_null(n.name);
	free(msg);

	/* nerdctl's name */
	const char *k2[] = { "nerdctl/name", "io.kubernetes.pod.name" };
	const char *v2[] = { "redis-1", "" };
	msg = get_response(CID, k2, v2, 2, true, &len);
	assert_true(containerd_decode_get(msg, len, CID, &n));
	assert_string_equal(n.name, "redis-1");
	assert_null(n.cname);
	assert_null(n.pod); /* empty values are no values */
	assert_null(n.ns);
	ctr_names_free(&n);
	free(msg);

	/* no labels: the short id */
	msg = get_response(CID, NULL, NULL, 0, true, &len);
	assert_true(containerd_decode_get(msg, len, CID, &n));
	assert_string_equal(n.name, "4f1c2b3a4d5e");
	ctr_names_free(&n);
	free(msg);

	/* no container in the answer; not protobuf at all */
	msg = get_response(CID, NULL, NULL, 0, false, &len);
	assert_false(containerd_decode_get(msg, len, CID, &n));
	free(msg);
	assert_false(containerd_decode_get((const uint8_t *)"\x0a\xff\xff\xff\xff\x0f", 6, CID, &n));
	assert_false(containerd_decode_get((const uint8_t *)"\xff", 1, CID, &n));
	assert_null(n.name);
}

static void test_runtime_api(void **state)
{
	(void)state;
	assert_int_equal(attrib_runtime_api("/run/containerd/containerd.sock"), ATTRIB_API_CONTAINERD);
	assert_int_equal(attrib_runtime_api("/run/k3s/containerd/containerd.sock"),
			 ATTRIB_API_CONTAINERD);
	assert_int_equal(attrib_runtime_api("/var/run/docker.sock"), ATTRIB_API_DOCKER);
	assert_int_equal(attrib_runtime_api("/run/podman/podman.sock"), ATTRIB_API_DOCKER);
	assert_int_equal(attrib_runtime_api("/var/run/crio/crio.sock"), ATTRIB_API_CRIO);
	/* the directory does not make a containerd socket */
	assert_int_equal(attrib_runtime_api("/run/containerd/docker.sock"), ATTRIB_API_DOCKER);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_frame_roundtrip),
	cmocka_unit_test(test_unframe_hostile),
	cmocka_unit_test(test_answer_ok),
	cmocka_unit_test(test_answer_status),
	cmocka_unit_test(test_answer_hostile),
	cmocka_unit_test(test_call_bounded),
	cmocka_unit_test(test_containerd_request),
	cmocka_unit_test(test_containerd_decode),
	cmocka_unit_test(test_runtime_api))
