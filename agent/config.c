/* config.c - see config.h. */
#include "config.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "flags.h"
#include "util.h"

#define OFF(f) offsetof(struct agent_config, f)

static const struct flag_def defs[] = {
	{ "collection-agent", FLAG_STRING, "", OFF(collection_agent), 0, 0,
	  "host:port of ember-server, e.g. 127.0.0.1:8080" },
	{ "disable-tls", FLAG_BOOL, "false", OFF(disable_tls), 0, 0,
	  "send to the server over plain HTTP" },
	{ "insecure", FLAG_BOOL, "false", OFF(insecure), 0, 0,
	  "use TLS but do not verify the server's certificate" },
	{ "tls-ca-file", FLAG_STRING, "", OFF(tls_ca_file), 0, 0,
	  "PEM file of the CA certificates to trust for the server (default: the system's)" },
	{ "project", FLAG_STRING, "default", OFF(project), 0, 0,
	  "project the samples belong to (created on the server when new)" },
	{ "auth-token", FLAG_STRING, "", OFF(auth_token), 0, 0, "bearer token sent to the server" },
	{ "cluster-name", FLAG_STRING, "", OFF(cluster_name), 0, 0,
	  "cluster.name attribute of every sample (filter and group by it)" },
	{ "host-type", FLAG_STRING, "", OFF(host_type), 0, 0,
	  "host.type attribute of every sample, e.g. the instance type" },
	{ "machine-id", FLAG_STRING, "", OFF(machine_id), 0, 0,
	  "host.id attribute of every sample (default: /etc/machine-id)" },
	{ "on-cpu-sampling-rate", FLAG_UINT, "19", OFF(on_cpu_hz), 1, 1000,
	  "on-CPU samples per second per CPU (Hz)" },
	{ "reporter-interval", FLAG_DURATION, "5s", OFF(reporter_interval_ms), 1000, 3600000,
	  "how often a batch is sent to the server" },
	{ "ember-protocol", FLAG_BOOL, "true", OFF(ember_protocol), 0, 0,
	  "send with ember's session protocol; false: OTLP Profiles over HTTP (/v1development/profiles)" },
	{ "v", FLAG_BOOL, "false", OFF(verbose), 0, 0, "verbose (debug) logging" },
	{ "json-log", FLAG_BOOL, "false", OFF(json_log), 0, 0, "log one JSON object per line" },
	{ "dwarf", FLAG_BOOL, "false", OFF(dwarf), 0, 0,
	  "upload source lines and inlined functions (DWARF) with the symbols" },
	{ "max-input-file-size", FLAG_UINT, "2147483648", OFF(max_input_file_size), 1, UINT64_MAX,
	  "with -dwarf: no DWARF is read from files larger than this many bytes" },
	{ "max-symbfile-size", FLAG_UINT, "52428800", OFF(max_symbfile_size), 1024, 1ull << 30,
	  "with -dwarf: symbol files larger than this many bytes are sent without DWARF" },
	{ "config", FLAG_STRING, "", OFF(config_path), 0, 0,
	  "file of 'name value' lines with lower-precedence settings" },
	{ "help", FLAG_BOOL, "false", OFF(help), 0, 0, "print this help and exit" },
};

static const struct flag_set agent_flags = {
	.program = "ember-agent",
	.env_prefix = "EMBER_",
	.defs = defs,
	.count = ARRAY_SIZE(defs),
	.config_flag = "config",
};

int agent_config_load(struct agent_config *cfg, int argc, char **argv, char **envp,
		      struct buf *err)
{
	memset(cfg, 0, sizeof(*cfg));
	if (flags_load(&agent_flags, cfg, argc, argv, envp, err) < 0)
		return -1;
	if (cfg->help)
		return 0;
	if (!*cfg->collection_agent) {
		buf_puts(err, "-collection-agent: not set; expected host:port of ember-server, e.g. -collection-agent=127.0.0.1:8080");
		return -1;
	}
	const char *colon = strrchr(cfg->collection_agent, ':');
	uint64_t port;
	if (!colon || colon == cfg->collection_agent || parse_u64(colon + 1, &port) < 0 ||
	    port == 0 || port > 65535 || strpbrk(cfg->collection_agent, "/ ?#@")) {
		buf_printf(err, "-collection-agent: expected host:port, got \"%s\"",
			   cfg->collection_agent);
		return -1;
	}
	if (*cfg->tls_ca_file && access(cfg->tls_ca_file, R_OK) != 0) {
		buf_printf(err, "-tls-ca-file: cannot read \"%s\"", cfg->tls_ca_file);
		return -1;
	}
	if (cfg->insecure && cfg->disable_tls) {
		buf_puts(err, "-insecure: cannot be used together with -disable-tls");
		return -1;
	}
	const struct {
		const char *flag, *value;
	} attrs[] = { { "cluster-name", cfg->cluster_name }, { "host-type", cfg->host_type },
		      { "machine-id", cfg->machine_id } };
	for (size_t i = 0; i < ARRAY_SIZE(attrs); i++) {
		const char *v = attrs[i].value;
		bool printable = true;
		for (const char *c = v; *c; c++)
			printable &= (unsigned char)*c >= 0x20 && *c != 0x7f;
		if (strlen(v) > 128 || !printable) {
			buf_printf(err, "-%s: expected at most 128 printable characters", attrs[i].flag);
			return -1;
		}
	}
	if (!*cfg->project || strlen(cfg->project) > 128 || strpbrk(cfg->project, " \t\r\n/")) {
		buf_printf(err, "-project: expected a name of 1 to 128 characters without spaces or '/', got \"%s\"",
			   cfg->project);
		return -1;
	}
	return 0;
}

void agent_config_free(struct agent_config *cfg)
{
	flags_free(&agent_flags, cfg);
}

void agent_config_usage(struct buf *out)
{
	flags_usage(&agent_flags, "-collection-agent=HOST:PORT [flags]", out);
}
