/* attrib.h - where a process runs: its container, Kubernetes pod, SLURM
 * job and job tag, as OpenTelemetry-named attributes of its samples.
 *
 * Read once per process (when the agent first sees it):
 *   /proc/PID/cgroup   container.id (docker-<id>.scope, cri-containerd-,
 *                      crio-, libpod-, nerdctl-, or a 64-hex path component),
 *                      k8s.pod.uid (pod<uid> / kubepods-...-pod<uid>.slice),
 *                      slurm.job.id (.../slurm.../job_<id>/...)
 *   /proc/PID/environ  SLURM_JOB_ID, SLURM_JOB_NAME, SLURM_JOB_USER
 *                      (slurm.job.*), the job tag variable (job.tag,
 *                      EMBER_JOB_TAG by default), and in a Kubernetes
 *                      container HOSTNAME as k8s.pod.name
 *   the container runtime's API, when a Docker-compatible socket (Docker,
 *                      Podman), containerd's (gRPC, agent/containerd.h)
 *                      or CRI-O's is present: container.name and, for
 *                      Kubernetes containers, k8s.pod.name,
 *                      k8s.namespace.name, k8s.container.name; once per
 *                      container (cached, failures too; 4 096 containers
 *                      at most, then all are forgotten), 300 ms a call.
 * k8s.deployment.name is derived from the pod name (a Deployment's pods
 * are <deployment>-<replica set hash>-<5 characters>).
 * Everything read is bounded (64 KiB of environ, 16 KiB of cgroup, 1 MiB of
 * API answer) and values are cut to 128 bytes.
 */
#ifndef EMBER_AGENT_ATTRIB_H
#define EMBER_AGENT_ATTRIB_H

#include <stdbool.h>
#include <stddef.h>

#define ATTRIB_MAX 13

/* Attribute pairs of one process; owned strings. */
struct proc_attrs {
	size_t n;
	char *key[ATTRIB_MAX], *value[ATTRIB_MAX];
};

void proc_attrs_free(struct proc_attrs *a);

/* What /proc/PID/cgroup says. */
struct cgroup_info {
	char container_id[65];
	char pod_uid[37];
	char slurm_job[24];
};
void attrib_parse_cgroup(const char *text, size_t len, struct cgroup_info *out);

/* What /proc/PID/environ says (NUL-separated). */
struct env_info {
	char slurm_job_id[24], slurm_job_name[129], slurm_job_user[65];
	char job_tag[129];
	char hostname[65];
	bool k8s; /* KUBERNETES_SERVICE_HOST is set */
};
void attrib_parse_environ(const char *env, size_t len, const char *job_tag_var,
			  struct env_info *out);

/* script.name of a Python process from its command line (NUL-separated
 * /proc/PID/cmdline): the base name of the script it runs, the module of
 * `-m module`, "-c" for a command, "-" for standard input. False when
 * argv[0] is not a python interpreter or no script is named. */
bool attrib_python_script(const char *cmdline, size_t len, char *out, size_t n);

/* The Deployment of a pod name, or false when it does not look like one. */
bool attrib_k8s_deployment(const char *pod, char *out, size_t n);

struct attrib;

/* runtime_socket: the container runtime's API socket; "" probes, in this
 * order, /var/run/docker.sock, /run/containerd/containerd.sock,
 * /var/run/containerd/containerd.sock, /run/podman/podman.sock,
 * /var/run/crio/crio.sock and takes the first one the agent may write to;
 * "none" disables it. job_tag_var: the environment variable of job.tag. */
struct attrib *attrib_new(const char *proc_root, const char *runtime_socket,
			  const char *job_tag_var);
void attrib_free(struct attrib *a);
/* The API a runtime socket speaks, decided by its path (what answers on
 * it is not probed): containerd's gRPC when the file name contains
 * "containerd" (containerd.sock, also k3s's and Docker's own containerd),
 * CRI-O's info API when the path contains "crio", else Docker's Engine
 * API (Docker, Podman). */
enum attrib_api {
	ATTRIB_API_DOCKER,     /* GET /containers/{id}/json */
	ATTRIB_API_CRIO,       /* GET /containers/{id} */
	ATTRIB_API_CONTAINERD, /* gRPC Containers/Get (containerd.h) */
};
enum attrib_api attrib_runtime_api(const char *socket_path);
/* Fills out with what is known about pid (out->n = 0 when nothing). */
void attrib_read(struct attrib *a, int pid, struct proc_attrs *out);

#endif
