/* cli.h - what the `ember` command's subcommands share. */
#ifndef EMBER_CLI_H
#define EMBER_CLI_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"

#define DEFAULT_PROJECT "00000000-0000-0000-0000-000000000000"

struct cli_opts {
	const char *endpoint;  /* --endpoint / -e, $EMBER_ENDPOINT, http://127.0.0.1:8080 */
	const char *project;   /* --project-id / -p */
	const char *query;     /* --query */
	const char *group_by;  /* --group-by */
	const char *format;    /* --format: json, pprof, folded, speedscope (NULL: print a tree) */
	const char *output;    /* -o / --output: the file a --format export goes to ("-": stdout) */
	int64_t since_ms;      /* --since */
	long depth;            /* --depth */
	double min_percent;    /* --min-percent */
	bool no_dwarf;         /* --no-dwarf */
	const char *token;     /* --token, else $EMBER_SERVICE_TOKEN (NULL: none) */
	const char *ca_file;   /* --ca-file, else $SSL_CERT_FILE (NULL: the system's CAs) */
	bool insecure;         /* --insecure: no certificate check */
	const char *args[2];   /* positional arguments */
	int nargs;
};

/* Sends a request to the server (token and TLS from o). On 2xx
 * returns 0 and the answer in resp; otherwise prints why and returns -1. */
int cli_request(const struct cli_opts *o, const char *method, const char *path,
		const char *content_type, const char *encoding, const void *body, size_t len,
		struct buf *resp);
/* The same for a JSON answer (NULL after printing why). */
json_t *cli_request_json(const struct cli_opts *o, const char *method, const char *path,
			 const char *body);

int cmd_flamegraph(const struct cli_opts *o, bool top);
/* `ember flamegraph --format F -o FILE`: the server's export of the
 * flamegraph (POST .../flamegraph/F) saved as it came. */
int cmd_flamegraph_export(const struct cli_opts *o);
int cmd_projects(const struct cli_opts *o);
int cmd_upload_symbols(const struct cli_opts *o);

#endif
