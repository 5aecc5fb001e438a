/* kubelet.h - Kubernetes pod labels (-k8s-pod-labels) from the kubelet's
 * pod list.
 *
 * A thread of its own reads GET <url>/pods (-kubelet-url: by default the
 * authenticated port https://127.0.0.1:10250, which needs the service
 * account token and get on nodes/proxy; or the read-only port
 * http://127.0.0.1:10255) and keeps, per pod uid, its name, namespace and
 * the values of the requested labels only. The sampling loop and the
 * metrics thread ask for a pod by uid (kubelet_pod_attributes) without
 * waiting: the answer comes from the latest list, under a mutex the
 * thread holds only to swap lists.
 *
 * When the list is read:
 *   - at start, so pods already running are known from their first sample;
 *   - when a lookup finds the list older than 30 s (a host without pods
 *     never asks again);
 *   - when a lookup misses a pod uid: once per uid (a uid still missing
 *     after a newer list waits for the 30 s refresh), never sooner than
 *     5 s after the previous read, many misses sharing one read;
 *   - after a failure, not before 30 s.
 * Each request: 3 s to connect, 10 s in all, answers of at most 16 MiB
 * (gzip allowed), no redirects, http and https only; the token
 * (-kubelet-token-file, re-read each time since projected tokens rotate;
 * absent: no Authorization header) and, for https, the service account's
 * CA (/var/run/secrets/kubernetes.io/serviceaccount/ca.crt when readable,
 * else the system's; -kubelet-insecure: no verification).
 * The answer is hostile input: at most 2 048 pods are kept, uids must be
 * UUIDs, names, namespaces and label values are cut to 128 bytes with
 * control characters replaced (as attrib.c does), and only the requested
 * labels are looked at.
 */
#ifndef EMBER_AGENT_KUBELET_H
#define EMBER_AGENT_KUBELET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attrib.h"
#include "buf.h"

#define KUBELET_MAX_LABELS 16
#define KUBELET_MAX_PODS 2048
#define KUBELET_MAX_BODY (16u << 20)
#define KUBELET_VALUE_MAX 128
/* A label name: [prefix/]name, prefix at most 253 bytes, name 1 to 63. */
#define KUBELET_LABEL_NAME_MAX 317
/* Attribute pairs a pod can add: its labels, name, namespace and the
 * Deployment derived from the name (collect.c). */
#define KUBELET_MAX_ATTRS (KUBELET_MAX_LABELS + 3)

/* One pod of a list; owned strings, NULL = absent. */
struct kube_pod {
	char uid[37]; /* lower case */
	char *name, *ns;
	char *values[KUBELET_MAX_LABELS]; /* of the requested labels, in order */
};

/* A parsed pod list, sorted by uid, uids distinct. */
struct kube_pods {
	struct kube_pod *pods;
	size_t n;
	bool truncated; /* more than KUBELET_MAX_PODS pods: the rest were left out */
};

/* Parses the kubelet's /pods answer (a v1 PodList) keeping the labels
 * named in labels[0..nlabels). Returns 0, or -1 with the reason in err
 * (not JSON, no "items" array); malformed pods are skipped. */
int kubelet_parse_pods(const char *body, size_t len, const char *const *labels, size_t nlabels,
		       struct kube_pods *out, struct buf *err);
const struct kube_pod *kube_pods_find(const struct kube_pods *p, const char *uid);
void kube_pods_free(struct kube_pods *p);

/* True when name is a valid Kubernetes label name ([prefix/]name). */
bool kubelet_label_name_valid(const char *name, size_t len);

struct kubelet_opts {
	const char *url;        /* base URL, "/pods" is appended */
	const char *token_file; /* "" = none */
	bool insecure;
	const char *const *labels;
	size_t nlabels;         /* 1 to KUBELET_MAX_LABELS */
};

struct kubelet_stats {
	uint64_t fetches, errors;
	uint64_t pods; /* in the latest list */
};

struct kubelet;

struct kubelet *kubelet_start(const struct kubelet_opts *o);
/* Stops the thread (an ongoing request is cut short) and frees k. */
void kubelet_stop(struct kubelet *k);

typedef void (*kubelet_attr_fn)(void *ctx, const char *key, const char *value);
/* Calls fn for each attribute the latest list gives the pod with this uid:
 * "k8s.pod.label[NAME]" for each requested label it has, "k8s.pod.name"
 * and "k8s.namespace.name". Never waits for the network: an unknown uid
 * asks the thread for a new list (see above) and returns false. Safe
 * from any thread: the sampling loop and the metrics thread both ask. */
bool kubelet_pod_attributes(struct kubelet *k, const char *uid, uint64_t now_ns,
			    kubelet_attr_fn fn, void *ctx);
/* What a process gets from its pod, for samples and metrics alike: when
 * attrs (the process's own, attrib_read) hold a k8s.pod.uid, the
 * attributes kubelet_pod_attributes gives that attrs lack, and
 * k8s.deployment.name derived from the pod name. Returns false when the
 * pod is missing from the latest list (ask again later); true otherwise,
 * also without a pod uid or without a kubelet (k NULL). */
bool kubelet_process_attributes(struct kubelet *k, const struct proc_attrs *attrs,
				uint64_t now_ns, kubelet_attr_fn fn, void *ctx);
void kubelet_get_stats(struct kubelet *k, struct kubelet_stats *out);

#endif
