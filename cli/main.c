/* main.c - ember, the command-line tool.
 *
 *   ember upload-symbols [-p PROJECT_ID] [-e URL] [--no-dwarf] EXECUTABLE [DEBUG_OBJECT]
 *   ember flamegraph [-e URL] [-p PROJECT_ID] [--query CEL] [--since DURATION]
 *                    [--group-by LEVEL] [--depth N] [--min-percent P]
 *                    [--format json|pprof|folded|speedscope] [-o FILE]: with
 *                    --format or -o, the server's export saved to FILE
 *   ember top        (the same flags)  functions by self time; with
 *                    --group-by, the groups largest first, each with its own
 *                    top functions
 *   ember projects   [-e URL]
 *   ember version    (or --version) the version and the binary's build ID
 *   ember identity user|roles ...  users and roles of a server on this host,
 *                    through its data directory (cli/identity_cmd.h)
 *
 * The endpoint defaults to $EMBER_ENDPOINT or http://127.0.0.1:8080; a
 * bearer token is sent from --token (TOKEN or @FILE) or, without it,
 * $EMBER_SERVICE_TOKEN. Over https the server's certificate is checked
 * against --ca-file, else $SSL_CERT_FILE, else the system's CAs, or not at
 * all with --insecure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli/identity_cmd.h"
#include "httpc.h"
#include "util.h"
#include "version.h"

#define MAX_RESPONSE (256u << 20)

int cli_request(const struct cli_opts *o, const char *method, const char *path,
		const char *content_type, const char *encoding, const void *body, size_t len,
		struct buf *resp)
{
	struct http_client *c = http_client_new_url(o->endpoint, o->token, 120000, MAX_RESPONSE);
	if (!c) {
		fprintf(stderr, "ember: cannot initialise libcurl\n");
		return -1;
	}
	http_client_set_tls(c, o->ca_file, o->insecure);
	struct buf err = { 0 };
	int status = http_send(c, method, path, content_type, encoding, body, len, resp, &err);
	http_client_free(c);
	int rc = 0;
	if (status < 0) {
		fprintf(stderr, "ember: %s\n", err.data);
		rc = -1;
	} else if (status < 200 || status >= 300) {
		json_error_t je;
		json_t *doc = json_loadb(resp->data ? resp->data : "", resp->len, 0, &je);
		json_t *e = doc ? json_object_get(doc, "error") : NULL;
		fprintf(stderr, "ember: the server answered %d: %s\n", status,
			json_is_string(e) ? json_string_value(e) : (resp->data ? resp->data : ""));
		json_decref(doc);
		rc = -1;
	}
	buf_free(&err);
	return rc;
}

json_t *cli_request_json(const struct cli_opts *o, const char *method, const char *path,
			 const char *body)
{
	struct buf resp = { 0 };
	json_t *doc = NULL;
	if (cli_request(o, method, path, body ? "application/json" : NULL, NULL, body,
			body ? strlen(body) : 0, &resp) == 0) {
		json_error_t je;
		doc = json_loadb(resp.data ? resp.data : "", resp.len, 0, &je);
		if (!doc)
			fprintf(stderr, "ember: the answer is not JSON: %s\n", je.text);
	}
	buf_free(&resp);
	return doc;
}

static int usage_to(FILE *f)
{
	fputs("usage: ember upload-symbols|flamegraph|top|projects|identity|version [flags]\n"
	      "  -e, --endpoint URL     ember-server (default $EMBER_ENDPOINT or http://127.0.0.1:8080)\n"
	      "  -p, --project-id ID    project UUID (default the default project)\n"
	      "  --query CEL            filter, e.g. 'process.executable.name == \"python3\"'\n"
	      "  --since DURATION       time range ending now (default 15m)\n"
	      "  --group-by LEVEL       executable, host, thread, process, container, deployment:\n"
	      "                         flamegraph: a first level per group; top: each group's top functions\n"
	      "  --depth N              flamegraph: levels to print (default 12)\n"
	      "  --min-percent P        flamegraph: hide frames below P% of the total (default 1)\n"
	      "  --format F             flamegraph: save the server's export instead of printing a tree:\n"
	      "                         json, pprof (gzipped profile.proto), folded, speedscope\n"
	      "  -o, --output FILE      flamegraph: the file to save it to (default stdout; json without --format)\n"
	      "  --no-dwarf             upload-symbols: ELF symbols only, no source lines\n"
	      "  --token TOKEN|@FILE    bearer token to send (default $EMBER_SERVICE_TOKEN);\n"
	      "                         (a service token; upload-symbols: one that may write symbols)\n"
	      "  --ca-file FILE         https: trust the CA certificates in FILE (PEM)\n"
	      "                         (default $SSL_CERT_FILE, else the system's CAs)\n"
	      "  --insecure             https: do not check the server's certificate\n"
	      "environment: EMBER_ENDPOINT, EMBER_SERVICE_TOKEN, SSL_CERT_FILE\n"
	      "ember upload-symbols [-p ID] [-e URL] EXECUTABLE [DEBUG_OBJECT]\n\n",
	      f);
	cmd_identity_usage(f);
	return 2;
}

static int usage(void)
{
	return usage_to(stderr);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage();
	const char *cmd = argv[1];
	if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
		usage_to(stdout);
		return 0;
	}
	if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0 ||
	    strcmp(cmd, "-version") == 0) {
		version_print(stdout, "ember");
		return 0;
	}
	/* Works on the data directory, not through the server: its own flags. */
	if (strcmp(cmd, "identity") == 0)
		return cmd_identity(argc - 2, argv + 2);
	const char *env = getenv("EMBER_ENDPOINT");
	struct cli_opts o = { .endpoint = env && *env ? env : "http://127.0.0.1:8080",
			      .since_ms = 15 * 60000, .depth = 12, .min_percent = 1.0 };
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];
		if (a[0] != '-') {
			if (o.nargs >= 2) {
				fprintf(stderr, "ember: unexpected argument %s\n", a);
				return usage();
			}
			o.args[o.nargs++] = a;
			continue;
		}
		if (a[1] == '-')
			a++;
		if (strcmp(a, "-no-dwarf") == 0) {
			o.no_dwarf = true;
			continue;
		}
		if (strcmp(a, "-insecure") == 0) {
			o.insecure = true;
			continue;
		}
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v) {
			fprintf(stderr, "ember: %s: missing value\n", argv[i]);
			return 2;
		}
		if (strcmp(a, "-endpoint") == 0 || strcmp(a, "-e") == 0)
			o.endpoint = v;
		else if (strcmp(a, "-project-id") == 0 || strcmp(a, "-p") == 0)
			o.project = v;
		else if (strcmp(a, "-query") == 0)
			o.query = v;
		else if (strcmp(a, "-token") == 0)
			o.token = v;
		else if (strcmp(a, "-ca-file") == 0)
			o.ca_file = v;
		else if (strcmp(a, "-group-by") == 0)
			o.group_by = v;
		else if (strcmp(a, "-format") == 0)
			o.format = v;
		else if (strcmp(a, "-output") == 0 || strcmp(a, "-o") == 0)
			o.output = v;
		else if (strcmp(a, "-since") == 0) {
			if (parse_duration_ms(v, &o.since_ms) < 0 || o.since_ms <= 0) {
				fprintf(stderr, "ember: --since: expected a duration such as 15m, got \"%s\"\n", v);
				return 2;
			}
		} else if (strcmp(a, "-depth") == 0) {
			o.depth = strtol(v, NULL, 10);
		} else if (strcmp(a, "-min-percent") == 0) {
			o.min_percent = strtod(v, NULL);
		} else {
			fprintf(stderr, "ember: unknown flag %s\n", argv[i]);
			return usage();
		}
		i++;
	}
	char *token_file = NULL;
	if (!o.token) {
		o.token = getenv("EMBER_SERVICE_TOKEN");
	} else if (o.token[0] == '@') {
		size_t n;
		if (read_file(o.token + 1, 4096, &token_file, &n) < 0) {
			fprintf(stderr, "ember: --token: cannot read %s\n", o.token + 1);
			return 2;
		}
		while (n && (token_file[n - 1] == '\n' || token_file[n - 1] == '\r' ||
			     token_file[n - 1] == ' '))
			token_file[--n] = '\0';
		o.token = token_file;
	}
	if (o.token && !str_printable(o.token, strlen(o.token))) {
		fprintf(stderr, "ember: the token holds a control character\n");
		free(token_file);
		return 2;
	}
	if (o.ca_file && access(o.ca_file, R_OK) != 0) {
		fprintf(stderr, "ember: --ca-file: cannot read %s\n", o.ca_file);
		free(token_file);
		return 2;
	}
	if (http_global_init() < 0) {
		free(token_file);
		return 1;
	}
	int rc;
	if (strcmp(cmd, "upload-symbols") == 0) {
		rc = cmd_upload_symbols(&o);
	} else {
		if (!o.project)
			o.project = DEFAULT_PROJECT;
		if (strcmp(cmd, "projects") == 0)
			rc = cmd_projects(&o);
		else if (strcmp(cmd, "flamegraph") == 0 && (o.format || o.output))
			rc = cmd_flamegraph_export(&o);
		else if (strcmp(cmd, "flamegraph") == 0 || strcmp(cmd, "top") == 0)
			rc = cmd_flamegraph(&o, strcmp(cmd, "top") == 0);
		else
			rc = usage();
	}
	http_global_cleanup();
	free(token_file);
	return rc;
}
