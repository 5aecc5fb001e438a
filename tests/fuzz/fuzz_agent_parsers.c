/* Fuzz target: the agent's parsers of kernel-provided text that another
 * process can influence: /proc/PID/maps lines, /proc/PID/stat, CPU lists,
 * kallsyms, /proc/PID/cgroup and /proc/PID/environ, a Python command line (script.name), a
 * CPython location table read from process memory, a CPython
 * _Py_DebugOffsets table read from an interpreter file and the kubelet's
 * pod list (-k8s-pod-labels), and the metrics collector's /proc and
 * cgroup parsers (agent/hostmetrics.h; first byte 0xf0 and above). The
 * first byte selects the parser. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/attrib.h"
#include "agent/gpumetrics.h"
#include "agent/hostmetrics.h"
#include "agent/kallsyms.h"
#include "agent/kubelet.h"
#include "agent/maps.h"
#include "agent/oncpu.h"
#include "agent/proc.h"
#include "agent/python.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 65536)
		return 0;
	const char *text = (const char *)data + 1;
	size_t n = size - 1;
	if (data[0] >= 0xf0) {
		/* The metrics collector's parsers: whatever the text, results
		 * stay inside their buffers and bounds. */
		struct hm_cpu c;
		struct hm_meminfo m;
		struct hm_pstat ps;
		struct hm_disk d[8];
		uint64_t a, b;
		char cg[64];
		switch (data[0] & 7) {
		case 0:
			(void)hm_parse_stat(text, n, &c);
			break;
		case 1:
			(void)hm_parse_meminfo(text, n, &m);
			break;
		case 2:
			if (hm_parse_pid_stat(text, n, &ps) == 0 && strlen(ps.comm) >= sizeof(ps.comm))
				abort();
			break;
		case 3:
			(void)hm_parse_pid_io(text, n, &a, &b);
			break;
		case 4:
			if (hm_parse_cgroup2_path(text, n, cg, sizeof(cg)) == 0 &&
			    (strlen(cg) >= sizeof(cg) || cg[0] != '/' || strstr(cg, "/..")))
				abort();
			break;
		case 5:
			(void)hm_parse_memory_stat(text, n, &a);
			break;
		default: {
			size_t nd = hm_parse_diskstats(text, n, d, 8);
			if (nd > 8)
				abort();
			for (size_t i = 0; i < nd; i++)
				if (strlen(d[i].name) >= sizeof(d[i].name) || !d[i].name[0])
					abort();
			break;
		}
		}
		return 0;
	}
	switch (data[0] % 9) {
	case 0: {
		struct maps_line m;
		if (maps_parse_line(text, n, &m) == 0 && m.path_len > n)
			abort();
		break;
	}
	case 1: {
		uint64_t st;
		proc_parse_stat_start(text, n, &st);
		break;
	}
	case 2: {
		char *s = malloc(n + 1);
		memcpy(s, text, n);
		s[n] = '\0';
		int ids[64];
		parse_cpu_list(s, ids, 64);
		/* The same text as a set, as /proc/PID/status's Cpus_allowed_list
		 * (agent/gpumetrics.h) and written back: the list re-reads as
		 * the same set. */
		struct cpuset cs, again;
		if (cpuset_parse(s, &cs) >= 0 || gpu_parse_cpus_allowed(s, &cs) == 0) {
			struct buf out = { 0 };
			cpuset_format(&cs, &out);
			if (cpuset_parse(out.data ? out.data : "", &again) != cpuset_count(&cs) ||
			    memcmp(&cs, &again, sizeof(cs)) != 0)
				abort();
			buf_free(&out);
		}
		free(s);
		break;
	}
	case 4: {
		/* A CPython location table from process memory. */
		uint32_t at = n > 0 ? (uint8_t)text[0] : 0;
		for (int f = PY_LINES_LNOTAB; f <= PY_LINES_LOCATIONS; f++)
			(void)python_line(f, (const uint8_t *)text, n, 1, at);
		break;
	}
	case 5: {
		char script[129];
		if (attrib_python_script(text, n, script, sizeof(script)) && strlen(script) >= sizeof(script))
			abort();
		break;
	}
	case 6: {
		/* cgroup files and environments */
		struct cgroup_info cg;
		attrib_parse_cgroup(text, n, &cg);
		/* The same bytes as an environment (a truncated one ends in no
		 * NUL; values may be empty, keys missing), with the job tag's
		 * variable named, empty and absent: every value a string that
		 * fits its field. */
		static const char *const tag_vars[] = { "EMBER_JOB_TAG", "", NULL };
		for (size_t i = 0; i < 3; i++) {
			struct env_info e;
			attrib_parse_environ(text, n, tag_vars[i], &e);
			if (strnlen(e.slurm_job_id, sizeof(e.slurm_job_id)) == sizeof(e.slurm_job_id) ||
			    strnlen(e.slurm_job_name, sizeof(e.slurm_job_name)) == sizeof(e.slurm_job_name) ||
			    strnlen(e.slurm_job_user, sizeof(e.slurm_job_user)) == sizeof(e.slurm_job_user) ||
			    strnlen(e.job_tag, sizeof(e.job_tag)) == sizeof(e.job_tag) ||
			    strnlen(e.hostname, sizeof(e.hostname)) == sizeof(e.hostname) ||
			    (!tag_vars[i] || !*tag_vars[i] ? e.job_tag[0] != '\0' : false))
				abort();
		}
		break;
	}
	case 7: {
		/* _Py_DebugOffsets: whatever it says, an applied table leaves
		 * every code-object field inside what the symbolizer reads. */
		for (uint32_t minor = 13; minor <= 14; minor++) {
			struct py_layout l = *python_layout(EMBER_PY_VERSION(3, minor));
			if (python_apply_debug_offsets(text, n, EMBER_PY_VERSION(3, minor), &l) == 0 &&
			    (l.code_filename > 152 || l.code_name > 152 || l.off.code_qualname > 152 ||
			     l.code_linetable > 152 || l.code_firstlineno > 152))
				abort();
		}
		break;
	}
	case 8: {
		/* The kubelet's pod list: whatever it holds, the pods kept are
		 * sorted, distinct, bounded, with clean values. */
		static const char *const labels[] = { "app", "tier", "app.kubernetes.io/name" };
		struct kube_pods pods;
		struct buf err = { 0 };
		if (kubelet_parse_pods(text, n, labels, 3, &pods, &err) == 0) {
			if (pods.n > KUBELET_MAX_PODS)
				abort();
			for (size_t i = 0; i < pods.n; i++) {
				const struct kube_pod *p = &pods.pods[i];
				if (i && strcmp(pods.pods[i - 1].uid, p->uid) >= 0)
					abort();
				if (kube_pods_find(&pods, p->uid) != p)
					abort();
				for (size_t k = 0; k < 3; k++)
					if (p->values[k] && (strlen(p->values[k]) > KUBELET_VALUE_MAX ||
							     strpbrk(p->values[k], "\n\r\t")))
						abort();
			}
		} else if (pods.n || pods.pods || !err.len) {
			abort();
		}
		kube_pods_free(&pods);
		buf_free(&err);
		break;
	}
	default: {
		struct kallsyms k = { 0 };
		kallsyms_parse(&k, text, n);
		const char *mod;
		kallsyms_lookup(&k, 0xffffffff81000000ull, &mod);
		kallsyms_free(&k);
		break;
	}
	}
	return 0;
}
