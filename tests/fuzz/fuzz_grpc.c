/* Fuzz target: the answer of a gRPC runtime (agent/grpc.h) and containerd's
 * Containers/Get message (agent/containerd.h). The input is header and
 * trailer lines, one per '\n', then a NUL byte, then the body as it would
 * come from the socket, in pieces of at most 300 bytes. What the decoder
 * keeps must stay inside the body and the caps; a message it accepts is
 * then decoded as a GetContainerResponse about a fixed id. Inputs without
 * a NUL are decoded as the message itself. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/containerd.h"
#include "agent/grpc.h"

#define ID "4f1c2b3a4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8"
#define MAX 4096

static void check_names(const struct ctr_names *n)
{
	/* A container found always has a name; the rest are strings or NULL. */
	if (!n->name || strlen(n->name) > MAX)
		abort();
}

static void decode(const uint8_t *msg, size_t len)
{
	struct ctr_names n;
	if (containerd_decode_get(msg, len, ID, &n))
		check_names(&n);
	else if (n.name || n.pod || n.ns || n.cname)
		abort();
	ctr_names_free(&n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 65536)
		return 0;
	const uint8_t *nul = memchr(data, 0, size);
	if (!nul) {
		decode(data, size);
		return 0;
	}
	struct grpc_answer a;
	grpc_answer_init(&a, MAX);
	for (const uint8_t *s = data; s < nul;) {
		const uint8_t *nl = memchr(s, '\n', (size_t)(nul - s));
		const uint8_t *e = nl ? nl + 1 : nul;
		grpc_answer_header(&a, (const char *)s, (size_t)(e - s));
		s = e;
	}
	const uint8_t *body = nul + 1, *end = data + size;
	while (body < end) {
		size_t piece = (size_t)(end - body) < 300 ? (size_t)(end - body) : 300;
		if (!grpc_answer_body(&a, body, piece))
			break;
		body += piece;
	}
	if (a.body.len > MAX + 5 || strlen(a.message) >= sizeof(a.message))
		abort();
	int rc = grpc_answer_finish(&a);
	if (rc == GRPC_OK) {
		if (a.status != 0 || a.http_status != 200 || a.len > MAX ||
		    a.msg != (const uint8_t *)a.body.data + 5 || a.len + 5 != a.body.len)
			abort();
		decode(a.msg, a.len);
	} else if (a.msg || a.len) {
		abort();
	} else if (rc == GRPC_STATUS && (a.status <= 0 || a.status > 999)) {
		abort();
	}
	grpc_answer_free(&a);
	return 0;
}
