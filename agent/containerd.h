/* containerd.h - names of containerd's containers, from its gRPC API.
 *
 * containerd speaks only gRPC on its socket (/run/containerd/containerd.sock).
 * ember asks containerd.services.containers.v1.Containers/Get about one
 * container id (agent/grpc.h: HTTP/2 over the unix socket, timeout_ms per
 * call) in the namespaces where containers usually live, in this order:
 *   k8s.io    the kubelet's (CRI) containers
 *   default   ctr's and nerdctl's
 *   moby      Docker's, when Docker runs on this containerd
 * The namespace goes in the "containerd-namespace" header. The next
 * namespace is asked only when containerd answered NOT_FOUND; any other
 * failure (no answer within timeout_ms, not gRPC, another status) ends the
 * lookup, so a hung containerd costs one timeout_ms per container at most.
 *
 * From the container's labels (the CRI plugin sets the io.kubernetes.*
 * ones on every container it creates):
 *   io.kubernetes.container.name  -> name (container.name) and cname
 *                                    (k8s.container.name)
 *   io.kubernetes.pod.name        -> pod (k8s.pod.name)
 *   io.kubernetes.pod.namespace   -> ns (k8s.namespace.name)
 * Without io.kubernetes.container.name, the nerdctl/name label names the
 * container, else the first 12 characters of its id (what docker and
 * nerdctl show). An answer about another id than the one asked is refused.
 */
#ifndef EMBER_AGENT_CONTAINERD_H
#define EMBER_AGENT_CONTAINERD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/* What containerd says about a container; owned strings, NULL = unknown. */
struct ctr_names {
	char *name, *pod, *ns, *cname;
};

void ctr_names_free(struct ctr_names *n);

/* The GetContainerRequest message for id, appended to out. */
void containerd_get_request(const char *id, struct buf *out);

/* Decodes a GetContainerResponse message (hostile bytes) about container
 * id into *out (zeroed first); false when it does not decode, has no
 * container or names another container. */
bool containerd_decode_get(const uint8_t *msg, size_t len, const char *id, struct ctr_names *out);

/* Asks the containerd at socket_path about id (see above); false when no
 * namespace knows it or containerd did not answer. */
bool containerd_lookup(const char *socket_path, const char *id, long timeout_ms,
		       struct ctr_names *out);

#endif
