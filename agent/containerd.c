/* containerd.c - see containerd.h. */
#include "containerd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "containerd.pb-c.h"
#include "grpc.h"
#include "log.h"
#include "util.h"

typedef Containerd__Services__Containers__V1__GetContainerRequest GetReq;
typedef Containerd__Services__Containers__V1__GetContainerResponse GetResp;
typedef Containerd__Services__Containers__V1__Container Ctr;

#define GET_METHOD "/containerd.services.containers.v1.Containers/Get"

void ctr_names_free(struct ctr_names *n)
{
	free(n->name);
	free(n->pod);
	free(n->ns);
	free(n->cname);
	memset(n, 0, sizeof(*n));
}

void containerd_get_request(const char *id, struct buf *out)
{
	GetReq req = CONTAINERD__SERVICES__CONTAINERS__V1__GET_CONTAINER_REQUEST__INIT;
	req.id = (char *)id;
	size_t n = containerd__services__containers__v1__get_container_request__get_packed_size(&req);
	buf_reserve(out, n);
	containerd__services__containers__v1__get_container_request__pack(
		&req, (uint8_t *)out->data + out->len);
	out->len += n;
	out->data[out->len] = '\0';
}

static const char *label(const Ctr *c, const char *key)
{
	for (size_t i = 0; i < c->n_labels; i++)
		if (c->labels[i] && c->labels[i]->key && strcmp(c->labels[i]->key, key) == 0)
			return c->labels[i]->value && *c->labels[i]->value ? c->labels[i]->value
									   : NULL;
	return NULL;
}

static char *dup_or_null(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

bool containerd_decode_get(const uint8_t *msg, size_t len, const char *id, struct ctr_names *out)
{
	memset(out, 0, sizeof(*out));
	GetResp *r = containerd__services__containers__v1__get_container_response__unpack(NULL, len,
											   msg);
	if (!r)
		return false;
	const Ctr *c = r->container;
	bool ok = c && c->id && strcmp(c->id, id) == 0;
	if (ok) {
		const char *kname = label(c, "io.kubernetes.container.name");
		out->cname = dup_or_null(kname);
		out->pod = dup_or_null(label(c, "io.kubernetes.pod.name"));
		out->ns = dup_or_null(label(c, "io.kubernetes.pod.namespace"));
		const char *name = kname ? kname : label(c, "nerdctl/name");
		out->name = name ? xstrdup(name) : xstrndup(id, 12);
	}
	containerd__services__containers__v1__get_container_response__free_unpacked(r, NULL);
	return ok;
}

bool containerd_lookup(const char *socket_path, const char *id, long timeout_ms,
		       struct ctr_names *out)
{
	static const char *const namespaces[] = { "k8s.io", "default", "moby" };
	memset(out, 0, sizeof(*out));
	struct buf req = { 0 };
	containerd_get_request(id, &req);
	bool found = false;
	for (size_t i = 0; i < ARRAY_SIZE(namespaces) && !found; i++) {
		char ns[64];
		snprintf(ns, sizeof(ns), "containerd-namespace: %s", namespaces[i]);
		const char *headers[] = { ns, NULL };
		struct grpc_answer a;
		grpc_answer_init(&a, GRPC_MAX_MESSAGE);
		int rc = grpc_unary(socket_path, GET_METHOD, headers, req.data, req.len, timeout_ms,
				    &a);
		bool next = rc == GRPC_STATUS && a.status == GRPC_STATUS_NOT_FOUND;
		if (rc == GRPC_OK) {
			found = containerd_decode_get(a.msg, a.len, id, out);
			if (!found)
				log_debug("container %.12s: containerd's answer does not decode", id);
		} else if (!next) {
			log_debug("container %.12s: containerd at %s: %s (grpc-status %d %s)", id,
				  socket_path,
				  rc == GRPC_TRANSPORT ? "no answer"
				  : rc == GRPC_PROTOCOL ? "not a gRPC answer"
							: "error",
				  a.status, a.message);
		}
		grpc_answer_free(&a);
		if (!next)
			break;
	}
	buf_free(&req);
	return found;
}
