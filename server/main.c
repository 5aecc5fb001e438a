/* main.c - ember-server: ingest, store, symbols, query API and web UI.
 * Flags: --listen ADDR, --data-dir DIR, --config FILE (and EMBER_SERVER_*). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>


#include "flags.h"
#include "server/ingest/codecs.h"
#include "server/ingest/sessions.h"
#include "server/symbols/debuginfod.h"
#include "server/symbols/symshare.h"
#include "server/http/http.h"
#include "log.h"
#include "metadb.h"
#include "server/metrics/metrics.h"
#include "server/http/mcp.h"
#include "pidlock.h"
#include "server/notify/slack.h"
#include "server/llm/llm.h"
#include "server/llm/llm_recs.h"
#include "server/llm/mcp_remote.h"
#include "server/query/recommend.h"
#include "server/http/otlp_grpc.h"
#include "server/http/server.h"
#include "server/auth/authz.h"
#include "server/store/clickhouse/chspans.h"
#include "server/store/clickhouse/chstore.h"
#include "server/store/clickhouse/schema.h"
#include "server/store/agents.h"
#include "server/store/spanstore.h"
#include "util.h"
#include "version.h"

/* The OTLP port. Taken by another process, it only turns gRPC ingest off
 * (with a warning); an address given explicitly must be free. */
#define OTLP_GRPC_DEFAULT "127.0.0.1:4317"

struct server_config {
	char *listen;
	char *mcp_allowed_hosts;
	char *otlp_grpc_listen;
	char *roles;
	char *data_dir;
	char *metadata, *metadata_password_file;
	char *store, *clickhouse_url, *clickhouse_database, *clickhouse_cluster;
	char *clickhouse_user, *clickhouse_password_file, *clickhouse_ca_file;
	char *debuginfod_urls;
	char *nvdisasm;
	char *config;
	int64_t retention_ms;
	int64_t block_resolution_ms;
	uint64_t cache_mib;
	uint64_t max_unflushed_rows;
	uint64_t dictionary_mib;
	int64_t flush_after_ms;
	int64_t compact_delay_ms;
	uint64_t session_memory_mib;
	char *tls_cert, *tls_key;
	char *ingest_tokens;
	char *auth, *admin_email, *admin_password_file, *jwt_private_key, *jwt_public_key;
	char *jwt_issuer, *basic_user, *basic_password_file, *cookie_same_site;
	char *oidc_issuer, *oidc_client_id, *oidc_client_secret_file, *oidc_redirect_uri;
	char *oidc_scopes, *oidc_extra_params;
	bool cookie_secure, public_metrics;
	int64_t session_idle_ms;
	int64_t gpu_span_retention_ms;
	uint64_t gpu_span_max;
	int64_t log_rate_limit_ms;
	uint64_t max_connections, per_client_connections, max_upload_mib;
	uint64_t query_threads, query_queue, ingest_threads, ingest_queue;
	int64_t idle_timeout_ms, header_timeout_ms, body_timeout_ms;
	char *cost_core_hour, *cost_gpu_hour, *recs_min_share;
	int64_t recs_window_ms, recs_step_ms;
	int64_t symbols_sync_ms;
	char *slack_webhook_url_file, *public_url;
	uint64_t slack_max_messages;
	int64_t slack_rate_window_ms;
	char *llm_provider, *llm_base_url, *llm_api_key_file, *llm_api_key_env;
	char *llm_model_examine, *llm_model_summarize;
	uint64_t llm_max_in, llm_max_out, llm_max_retries;
	int64_t llm_timeout_ms;
	bool llm_recommendations;
	char *assistant_mcp_servers_file;
	bool verbose;
	bool json_log;
	bool help;
	bool version;
};

#define OFF(f) offsetof(struct server_config, f)

/* The metadata URL, or without one the SQLite file of the data dir
 * (file, e.g. "meta.db"), into path. */
static const char *db_url(const char *url, const char *data_dir, const char *file, struct buf *path)
{
	if (url)
		return url;
	buf_printf(path, "%s/%s", data_dir, file);
	return path->data;
}

/* The profiler inventory in the metadata database: url (PostgreSQL), or
 * DATA_DIR/meta.db beside the projects. */
static int open_agents(const char *url, const char *password, const char *data_dir, struct agents **out,
		       struct buf *err)
{
	struct buf path = { 0 };
	int rc = agents_open(db_url(url, data_dir, "meta.db", &path), url ? password : NULL, out, err);
	buf_free(&path);
	return rc;
}

/* Metrics go with the metadata: on a shared PostgreSQL every replica
 * reads every replica's (metrics.h). */
static int open_metrics(const char *url, const char *password, const char *data_dir, int64_t retention_ms,
			struct metrics_store **out, struct buf *err)
{
	struct buf path = { 0 };
	int rc = metrics_open(db_url(url, data_dir, "metrics.db", &path), url ? password : NULL, retention_ms,
			      out, err);
	buf_free(&path);
	return rc;
}

/* A number from 0 to max (a price or a percentage flag). */
static int parse_price(const char *s, const char *flag, double max, double *out)
{
	char *end = NULL;
	double v = strtod(s, &end);
	if (!*s || !end || *end || !(v >= 0 && v <= max)) {
		log_error("%s: expected a number from 0 to %g, got \"%s\"", flag, max, s);
		return -1;
	}
	*out = v;
	return 0;
}

static const struct flag_def defs[] = {
	{ "listen", FLAG_STRING, "127.0.0.1:8080", OFF(listen), 0, 0,
	  "address to serve HTTP on (host:port; 0.0.0.0:8080 for every interface)" },
	{ "mcp-allowed-hosts", FLAG_STRING, "", OFF(mcp_allowed_hosts), 0, 0,
	  "more host names /mcp answers (comma-separated; Host and Origin headers are checked "
	  "against DNS rebinding: localhost, 127.0.0.1, [::1] and --listen's host always pass; * any)" },
	{ "otlp-grpc-listen", FLAG_STRING, OTLP_GRPC_DEFAULT, OFF(otlp_grpc_listen), 0, 0,
	  "address to receive OTLP Profiles over gRPC on (\"\" turns it off; TLS and tokens as on HTTP)" },
	{ "roles", FLAG_STRING, "ingest,query,ui,symbols", OFF(roles), 0, 0,
	  "what this server serves, comma-separated: ingest (agents' profiles and metrics, OTLP), "
	  "query (the query, admin and MCP APIs, recommendations), ui (the web UI), symbols "
	  "(symbol uploads); replicas on one ClickHouse and PostgreSQL can split them "
	  "(docs/deploy/clickhouse.md)" },
	{ "data-dir", FLAG_STRING, "./data", OFF(data_dir), 0, 0,
	  "directory of the store, symbols and metadata" },
	{ "metadata", FLAG_STRING, "sqlite", OFF(metadata), 0, 0,
	  "where projects, users, roles, tokens and the audit log live: sqlite (DATA_DIR/meta.db and "
	  "identity.db) or postgres://USER@HOST:PORT/DB, shared by every replica (docs/internals/metadata.md)" },
	{ "metadata-password-file", FLAG_STRING, "", OFF(metadata_password_file), 0, 0,
	  "file whose first line is the PostgreSQL password of --metadata (or use the URL's or libpq's own forms)" },
	{ "symbols-sync", FLAG_DURATION, "5s", OFF(symbols_sync_ms), 100, 3600000,
	  "with --metadata postgres://: how often a replica copies the symbols other replicas stored "
	  "(docs/internals/symbols.md)" },
	{ "store", FLAG_STRING, "embedded", OFF(store), 0, 0,
	  "where samples live: embedded (block files in --data-dir) or clickhouse (the fleet store: "
	  "--clickhouse-url, after `ember-server migrate`; docs/internals/clickhouse.md)" },
	{ "clickhouse-url", FLAG_STRING, "", OFF(clickhouse_url), 0, 0,
	  "ClickHouse's HTTP interface for --store clickhouse (http[s]://HOST:8123; with a cluster, "
	  "a comma-separated list of every shard's server: inserts and queries go to the first)" },
	{ "clickhouse-database", FLAG_STRING, "ember", OFF(clickhouse_database), 0, 0,
	  "the ClickHouse database of --store clickhouse" },
	{ "clickhouse-cluster", FLAG_STRING, "", OFF(clickhouse_cluster), 0, 0,
	  "the remote_servers cluster migrate made Distributed tables over (\"\": one server)" },
	{ "clickhouse-user", FLAG_STRING, "", OFF(clickhouse_user), 0, 0,
	  "ClickHouse user (HTTP basic auth; \"\": ClickHouse's default user)" },
	{ "clickhouse-password-file", FLAG_STRING, "", OFF(clickhouse_password_file), 0, 0,
	  "file whose first line is the ClickHouse user's password" },
	{ "clickhouse-ca-file", FLAG_STRING, "", OFF(clickhouse_ca_file), 0, 0,
	  "with https:// in --clickhouse-url: the PEM CA bundle that signs ClickHouse's certificates "
	  "(\"\": the system's CAs; certificates are always verified)" },
	{ "debuginfod-urls", FLAG_STRING, "", OFF(debuginfod_urls), 0, 0,
	  "space-separated debuginfod servers to fetch symbols from by build ID (global symbolization)" },
	{ "nvdisasm", FLAG_STRING, "", OFF(nvdisasm), 0, 0,
	  "NVIDIA's nvdisasm, which names PC sampling's SASS instructions from the cubins agents upload "
	  "(\"\": found on PATH or in /usr/local/cuda/bin; \"none\": instructions keep their cubin+offset names)" },
	{ "retention", FLAG_DURATION, "14d", OFF(retention_ms), 3600000, 3650ULL * 86400000,
	  "how long samples are kept (partitions older than this are deleted)" },
	{ "block-resolution", FLAG_DURATION, "10s", OFF(block_resolution_ms), 1, 3600000,
	  "time resolution of compacted samples (finer costs disk)" },
	{ "cache-size", FLAG_UINT, "1024", OFF(cache_mib), 16, 1 << 20,
	  "MiB of block dictionaries kept in memory" },
	{ "max-unflushed-rows", FLAG_UINT, "16000000", OFF(max_unflushed_rows), 1000, 1ULL << 40,
	  "sample rows held in memory before ingest answers 503 (while blocks cannot be written)" },
	{ "dictionary-memory", FLAG_UINT, "256", OFF(dictionary_mib), 0, 1 << 20,
	  "MiB up to which the in-memory head's dictionaries (frames, stacks, strings) carry over to "
	  "the next head, so stacks seen before are found rather than added again (0: never)" },
	{ "flush-after", FLAG_DURATION, "60s", OFF(flush_after_ms), 1000, 3600000,
	  "write samples from memory into a block file once the oldest is this old" },
	{ "compact-delay", FLAG_DURATION, "5m", OFF(compact_delay_ms), 0, 86400000,
	  "how long late data for a past hour is gathered before that hour's block is rewritten" },
	{ "cost-per-core-hour", FLAG_STRING, "0.04", OFF(cost_core_hour), 0, 0,
	  "price of one CPU core for an hour: turns the cores a recommendation saves into an annual cost" },
	{ "cost-per-gpu-hour", FLAG_STRING, "2.50", OFF(cost_gpu_hour), 0, 0,
	  "price of one GPU for an hour: turns the GPU time a recommendation saves into an annual cost" },
	{ "recs-window", FLAG_DURATION, "6h", OFF(recs_window_ms), 60000, 86400000LL,
	  "recommendations: how much recent profiling data the hot traces are found in" },
	{ "recs-min-share", FLAG_STRING, "0.5", OFF(recs_min_share), 0, 0,
	  "recommendations: the percent of a project's CPU (or GPU) time a code path must use to be analyzed" },
	{ "recs-step", FLAG_DURATION, "60s", OFF(recs_step_ms), 1000, 86400000,
	  "recommendations: how often every project is analysed again in the background (a new generation)" },
	{ "slack-webhook-url-file", FLAG_STRING, "", OFF(slack_webhook_url_file), 0, 0,
	  "file holding a Slack incoming-webhook URL: new or worsened recommendations and GPU XID events "
	  "are posted to it (the URL is never logged)" },
	{ "slack-max-messages", FLAG_UINT, "5", OFF(slack_max_messages), 1, 1000,
	  "Slack: at most this many messages per --slack-rate-window; the rest wait and go out grouped" },
	{ "slack-rate-window", FLAG_DURATION, "10m", OFF(slack_rate_window_ms), 1000, 86400000,
	  "Slack: the window of --slack-max-messages" },
	{ "llm-provider", FLAG_STRING, "", OFF(llm_provider), 0, 0,
	  "the LLM of the assistant and of LLM-mode recommendations: anthropic, openai, gemini or "
	  "openai-compatible (empty: none)" },
	{ "llm-base-url", FLAG_STRING, "", OFF(llm_base_url), 0, 0,
	  "the provider's API URL (openai-compatible: its chat completions URL; empty: the provider's)" },
	{ "llm-api-key-file", FLAG_STRING, "", OFF(llm_api_key_file), 0, 0,
	  "file holding the LLM API key (else the variable of --llm-api-key-env)" },
	{ "llm-api-key-env", FLAG_STRING, "", OFF(llm_api_key_env), 0, 0,
	  "environment variable holding the LLM API key (empty: ANTHROPIC_API_KEY, OPENAI_API_KEY, "
	  "GEMINI_API_KEY or CUSTOM_LLM_API_KEY)" },
	{ "llm-model-examine", FLAG_STRING, "", OFF(llm_model_examine), 0, 0,
	  "the model of trace examination and of the assistant" },
	{ "llm-model-summarize", FLAG_STRING, "", OFF(llm_model_summarize), 0, 0,
	  "the model of summary and classification (empty: --llm-model-examine)" },
	{ "llm-max-input-tokens-per-hour", FLAG_UINT, "0", OFF(llm_max_in), 0, 1ULL << 40,
	  "LLM input tokens allowed per hour, checked before each request (0: no limit)" },
	{ "llm-max-output-tokens-per-hour", FLAG_UINT, "0", OFF(llm_max_out), 0, 1ULL << 40,
	  "LLM output tokens allowed per hour, checked before each request (0: no limit)" },
	{ "llm-timeout", FLAG_DURATION, "120s", OFF(llm_timeout_ms), 1000, 3600000,
	  "the time limit of one LLM request" },
	{ "llm-max-retries", FLAG_UINT, "3", OFF(llm_max_retries), 0, 10,
	  "retries of an LLM request answered 429 or 5xx (after its Retry-After)" },
	{ "llm-recommendations", FLAG_BOOL, "true", OFF(llm_recommendations), 0, 0,
	  "with --llm-provider: the LLM also examines the recommendations (LLM mode)" },
	{ "assistant-mcp-servers-file", FLAG_STRING, "", OFF(assistant_mcp_servers_file), 0, 0,
	  "JSON file of the assistant's external MCP servers: [{\"name\",\"endpoint\",\"auth-token\"}]" },
	{ "public-url", FLAG_STRING, "", OFF(public_url), 0, 0,
	  "the address users reach the UI at, for links in notifications (default: http(s)://--listen)" },
	{ "tls-cert", FLAG_STRING, "", OFF(tls_cert), 0, 0,
	  "PEM file of the server's certificate (chain): serve HTTPS (with --tls-key)" },
	{ "tls-key", FLAG_STRING, "", OFF(tls_key), 0, 0, "PEM file of the certificate's private key" },
	{ "ingest-tokens", FLAG_STRING, "", OFF(ingest_tokens), 0, 0,
	  "bearer tokens agents must send (comma-separated, or @FILE with one per line); empty: no check" },
	{ "auth", FLAG_STRING, "none", OFF(auth), 0, 0,
	  "who may use the server: none (anyone: loopback only), local (users and passwords), "
	  "oidc (an OpenID Connect provider) or basic (one static credential, deprecated)" },
	{ "admin-email", FLAG_STRING, "admin@localhost", OFF(admin_email), 0, 0,
	  "the admin user created at start when absent (System Admin)" },
	{ "admin-password-file", FLAG_STRING, "", OFF(admin_password_file), 0, 0,
	  "file whose first line is the admin user's first password (empty: \"admin\", with a warning)" },
	{ "jwt-private-key", FLAG_STRING, "", OFF(jwt_private_key), 0, 0,
	  "Ed25519 PKCS#8 PEM that signs session tokens (empty: DATA_DIR/jwt-private.pem, made when absent)" },
	{ "jwt-public-key", FLAG_STRING, "", OFF(jwt_public_key), 0, 0,
	  "its SPKI PEM public key (empty: DATA_DIR/jwt-public.pem)" },
	{ "jwt-issuer", FLAG_STRING, "ember", OFF(jwt_issuer), 0, 0,
	  "the iss of the session tokens this server signs and accepts" },
	{ "oidc-issuer", FLAG_STRING, "", OFF(oidc_issuer), 0, 0,
	  "--auth oidc: the provider's issuer URL (e.g. https://accounts.google.com)" },
	{ "oidc-client-id", FLAG_STRING, "", OFF(oidc_client_id), 0, 0,
	  "--auth oidc: the client id the provider gave this server" },
	{ "oidc-client-secret-file", FLAG_STRING, "", OFF(oidc_client_secret_file), 0, 0,
	  "--auth oidc: file whose first line is the client secret" },
	{ "oidc-redirect-uri", FLAG_STRING, "", OFF(oidc_redirect_uri), 0, 0,
	  "--auth oidc: this server's callback as registered at the provider "
	  "(https://HOST/api/v1/oauth2/callback)" },
	{ "oidc-scopes", FLAG_STRING, "openid email profile", OFF(oidc_scopes), 0, 0,
	  "--auth oidc: the scopes asked for (space or comma separated; openid is required)" },
	{ "oidc-extra-params", FLAG_STRING, "", OFF(oidc_extra_params), 0, 0,
	  "--auth oidc: more query parameters for the provider's sign-in page, k=v,k=v "
	  "(e.g. prompt=consent,access_type=offline)" },
	{ "basic-user", FLAG_STRING, "", OFF(basic_user), 0, 0, "--auth basic: the user name" },
	{ "basic-password-file", FLAG_STRING, "", OFF(basic_password_file), 0, 0,
	  "--auth basic: file whose first line is the password" },
	{ "cookie-same-site", FLAG_STRING, "Lax", OFF(cookie_same_site), 0, 0,
	  "SameSite of the session cookies: Strict, Lax or None" },
	{ "cookie-secure", FLAG_BOOL, "false", OFF(cookie_secure), 0, 0,
	  "mark the session cookies Secure (on by itself with --tls-cert)" },
	{ "public-metrics", FLAG_BOOL, "false", OFF(public_metrics), 0, 0,
	  "serve GET /metrics without a credential (else it needs server:metrics:read)" },
	{ "session-memory", FLAG_UINT, "1024", OFF(session_memory_mib), 16, 1 << 20,
	  "MiB of agent sessions (protocol version 2 dictionaries); the least recently used are forgotten beyond it" },
	{ "session-idle", FLAG_DURATION, "30m", OFF(session_idle_ms), 10000, 7ULL * 86400000,
	  "forget an agent session unused this long" },
	{ "gpu-span-retention", FLAG_DURATION, "30m", OFF(gpu_span_retention_ms), 60000, 7ULL * 86400000,
	  "keep the GPU timeline's spans (single kernels and copies, in memory) this long" },
	{ "gpu-span-max", FLAG_UINT, "4194304", OFF(gpu_span_max), 65536, 1ULL << 32,
	  "GPU timeline spans kept in all (about 100 bytes each); the oldest go first beyond it" },
	{ "max-connections", FLAG_UINT, "1024", OFF(max_connections), 16, 1000000,
	  "HTTP connections open at once, in all (the open-file limit is raised to allow them); OTLP gRPC ones too, counted apart" },
	{ "max-connections-per-client", FLAG_UINT, "128", OFF(per_client_connections), 1, 1000000,
	  "HTTP connections open at once from one client address; OTLP gRPC ones too, counted apart" },
	{ "idle-timeout", FLAG_DURATION, "30s", OFF(idle_timeout_ms), 1000, 3600000,
	  "close a connection that sends and receives nothing for this long" },
	{ "header-timeout", FLAG_DURATION, "10s", OFF(header_timeout_ms), 1000, 3600000,
	  "a request's headers must arrive within this (slow clients are cut off)" },
	{ "body-timeout", FLAG_DURATION, "120s", OFF(body_timeout_ms), 1000, 3600000,
	  "a request's body must arrive within this after its headers" },
	{ "max-upload-memory", FLAG_UINT, "512", OFF(max_upload_mib), 16, 1 << 20,
	  "MiB of request bodies held in memory by all requests together; beyond it 503 "
	  "(symbol uploads beyond 1 MiB go to a file in the data dir)" },
	{ "query-threads", FLAG_UINT, "2", OFF(query_threads), 1, 256,
	  "threads that run queries (health checks never wait for them)" },
	{ "query-queue", FLAG_UINT, "16", OFF(query_queue), 0, 100000,
	  "queries that may wait for a query thread; beyond them 503 with Retry-After" },
	{ "ingest-threads", FLAG_UINT, "4", OFF(ingest_threads), 1, 256,
	  "threads that store ingest requests and symbol uploads" },
	{ "ingest-queue", FLAG_UINT, "256", OFF(ingest_queue), 0, 100000,
	  "ingest requests that may wait for an ingest thread; beyond them 503 with Retry-After" },
	FLAG_DEF_CONFIG(struct server_config, config),
	FLAG_DEFS_LOG(struct server_config),
	FLAG_DEFS_HELP_VERSION(struct server_config),
};

static const struct flag_set server_flags = {
	.program = "ember-server",
	.env_prefix = "EMBER_SERVER_",
	.defs = defs,
	.count = ARRAY_SIZE(defs),
	.config_flag = "config",
};

/* True when addr (host:port) listens on a loopback address only. */
static bool listen_is_loopback(const char *addr)
{
	return !strncmp(addr, "127.", 4) || !strncmp(addr, "localhost:", 10) ||
	       !strncmp(addr, "[::1]:", 6);
}

/* `ember-server migrate --clickhouse-url URL[,URL...] [--clickhouse-database
 * ember] [--clickhouse-cluster NAME] [--clickhouse-user U
 * --clickhouse-password-file F] [--clickhouse-ca-file F]`: creates or upgrades the fleet store's
 * schema on every server named (docs/internals/clickhouse.md) and exits:
 * 0 done (or nothing to do), 1 a server failed, 2 bad flags. */
static int migrate_main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "clickhouse-url", required_argument, NULL, 'u' },
		{ "clickhouse-database", required_argument, NULL, 'd' },
		{ "clickhouse-cluster", required_argument, NULL, 'c' },
		{ "clickhouse-user", required_argument, NULL, 'U' },
		{ "clickhouse-password-file", required_argument, NULL, 'p' },
		{ "clickhouse-ca-file", required_argument, NULL, 'C' },
		{ "print-sql", no_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct ch_conn_opts o = { .timeout_ms = 60000 };
	const char *cluster = NULL;
	int ch, print_sql = 0;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 'u': o.urls = optarg; break;
		case 'd': o.database = optarg; break;
		case 'c': cluster = optarg; break;
		case 'U': o.user = optarg; break;
		case 'p': o.password_file = optarg; break;
		case 'C': o.ca_file = optarg; break;
		case 'P': print_sql = 1; break;
		case 'h':
			puts("usage: ember-server migrate --clickhouse-url URL[,URL...] [--clickhouse-database ember]\n"
			     "       [--clickhouse-cluster NAME] [--clickhouse-user U --clickhouse-password-file F]\n"
			     "       [--clickhouse-ca-file F: the CA bundle of https:// servers]\n"
			     "       [--print-sql: print every statement and query text, connect to nothing]");
			return 0;
		default:
			return 2;
		}
	}
	if (print_sql && optind == argc) {
		/* The DDL and every other query text the fleet store sends,
		 * one per line ending in ";", for a reader or a check of the
		 * dialect (tests/integration/test_clickhouse_schema.py). */
		struct ch_schema s = { .database = o.database ? o.database : "ember", .cluster = cluster };
		struct buf sql = { 0 };
		int n = ch_schema_statements(&s, 0, &sql);
		n += ch_schema_query_texts(&s, &sql);
		n += ch_store_query_texts(s.database, &sql);
		for (const char *p = sql.data; n-- > 0; p += strlen(p) + 1)
			printf("%s;\n", p);
		buf_free(&sql);
		return 0;
	}
	if (optind < argc || !o.urls) {
		fprintf(stderr, "ember-server migrate: %s\n",
			optind < argc ? "unexpected argument" : "--clickhouse-url is required");
		return 2;
	}
	if (cluster) {
		for (const char *p = cluster; *p; p++)
			if (!(*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			      (*p >= '0' && *p <= '9')) || p - cluster > 64) {
				fprintf(stderr, "ember-server migrate: --clickhouse-cluster: letters, digits and _ only\n");
				return 2;
			}
	}
	struct buf err = { 0 }, log = { 0 };
	curl_global_init(CURL_GLOBAL_DEFAULT);
	struct ch_conn *c = ch_conn_new(&o, &err);
	if (!c) {
		fprintf(stderr, "ember-server migrate: %s\n", err.data);
		buf_free(&err);
		curl_global_cleanup();
		return 2;
	}
	enum ch_rc rc = ch_migrate(c, cluster, &log, &err);
	if (log.data)
		fputs(log.data, stdout);
	if (rc != CH_OK)
		fprintf(stderr, "ember-server migrate: %s\n", err.data);
	ch_conn_free(c);
	buf_free(&err);
	buf_free(&log);
	curl_global_cleanup();
	return rc == CH_OK ? 0 : 1;
}

/* The nvdisasm -nvdisasm names: the flag's path, else the first
 * executable one on PATH or in /usr/local/cuda/bin; false for none. */
static bool find_nvdisasm(const char *flag, char *out, size_t cap)
{
	if (!strcmp(flag, "none"))
		return false;
	if (*flag) {
		snprintf(out, cap, "%s", flag);
		return true;
	}
	const char *env = getenv("PATH");
	char *dirs = xstrdup(env && *env ? env : "/usr/bin:/bin"), *save = NULL;
	bool found = false;
	for (char *d = strtok_r(dirs, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
		int n = snprintf(out, cap, "%s/nvdisasm", d);
		found = n > 0 && (size_t)n < cap && access(out, X_OK) == 0;
	}
	free(dirs);
	if (!found)
		found = snprintf(out, cap, "/usr/local/cuda/bin/nvdisasm") > 0 && access(out, X_OK) == 0;
	return found;
}

int main(int argc, char **argv, char **envp)
{
	struct server_config cfg = { 0 };
	struct buf err = { 0 };
	if (argc > 1 && !strcmp(argv[1], "migrate"))
		return migrate_main(argc - 1, argv + 1);
	if (flags_load(&server_flags, &cfg, argc, argv, envp, &err) < 0) {
		fprintf(stderr, "ember-server: %s\n", err.data);
		return 2;
	}
	if (cfg.version) {
		version_print(stdout, "ember-server");
		return 0;
	}
	if (cfg.help) {
		struct buf u = { 0 };
		flags_usage(&server_flags, "[--listen HOST:PORT] [--data-dir DIR] [--config FILE]", &u);
		fputs(u.data, stdout);
		buf_free(&u);
		return 0;
	}
	log_init("ember-server", cfg.verbose ? LOG_DEBUG : LOG_INFO, cfg.json_log);
	/* A full disk fails every ingest request the same way: one line a
	 * request would be hundreds of thousands a minute. */
	log_set_rate_limit(cfg.log_rate_limit_ms);

	/* Block the stop signals in every thread; main waits for them. */
	sigset_t stop;
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	signal(SIGPIPE, SIG_IGN);

	struct server srv = { .started_ms = now_unix_ms() };
	int rc = 1;
	struct http_server *http = NULL;
	struct otlp_grpc *grpc = NULL;
	struct slack *slack = NULL;
	struct symshare *symshare = NULL;
	/* One server per data dir, locked before anything in it is read or
	 * written: a second one would replay the logs and delete blocks the
	 * first is writing. */
	int lock_fd = -1;
	struct buf lock_path = { 0 };
	/* --metadata: NULL for SQLite in the data dir, else the PostgreSQL URL
	 * (never logged: it may hold a password) and its password. */
	const char *metadata_url = NULL;
	char *metadata_pw = NULL;
	unsigned roles = 0;
	if (http_roles_parse(cfg.roles, &roles, &err) < 0) {
		log_error("--roles: %s", err.data);
		goto out;
	}
	buf_printf(&lock_path, "%s/lock", cfg.data_dir);
	if (mkdir(cfg.data_dir, 0755) < 0 && errno != EEXIST) {
		log_error("--data-dir %s: cannot create it: %s", cfg.data_dir, strerror(errno));
		goto out;
	}
	long holder = 0;
	lock_fd = pidlock_take(lock_path.data, &holder, &err);
	if (lock_fd == -2) {
		char pid[32] = "";
		if (holder)
			snprintf(pid, sizeof(pid), " (pid %ld)", holder);
		log_error("--data-dir %s is in use by another ember-server%s, which holds %s: stop it "
			  "first, or give this one another --data-dir",
			  cfg.data_dir, pid, lock_path.data);
		goto out;
	}
	if (lock_fd < 0) {
		log_error("--data-dir %s: %s", cfg.data_dir, err.data);
		goto out;
	}
	struct store_config sc;
	store_config_default(&sc);
	sc.retention_ms = cfg.retention_ms;
	sc.block_granularity_ms = (uint32_t)cfg.block_resolution_ms;
	sc.cache_bytes = cfg.cache_mib << 20;
	sc.max_unflushed_rows = cfg.max_unflushed_rows;
	sc.head_dict_bytes = cfg.dictionary_mib << 20;
	sc.head_max_age_ms = cfg.flush_after_ms;
	sc.late_data_wait_ms = cfg.compact_delay_ms;
	ingest_codecs(&sc);
	srv.data_dir = cfg.data_dir;
	if (metadb_url_is_postgres(cfg.metadata)) {
		metadata_url = cfg.metadata;
		if (*cfg.metadata_password_file &&
		    metadb_read_password(cfg.metadata_password_file, &metadata_pw, &err) < 0) {
			log_error("--metadata-password-file: %s", err.data);
			goto out;
		}
	} else if (strcmp(cfg.metadata, "sqlite") != 0) {
		log_error("--metadata: expected sqlite or postgres://USER@HOST:PORT/DB");
		goto out;
	}
	struct ch_store_opts cho = {
		.urls = cfg.clickhouse_url, .database = cfg.clickhouse_database,
		.cluster = cfg.clickhouse_cluster, .user = cfg.clickhouse_user,
		.password_file = cfg.clickhouse_password_file, .ca_file = cfg.clickhouse_ca_file,
		/* replicas share PostgreSQL: they claim a batch there before
		 * they store it (one SQLite metadata means one replica) */
		.claims_url = metadata_url, .claims_password = metadata_pw,
	};
	bool clickhouse = !strcmp(cfg.store, "clickhouse");
	if (!clickhouse && strcmp(cfg.store, "embedded") != 0) {
		log_error("--store: expected embedded or clickhouse");
		goto out;
	}
	if (clickhouse && !*cfg.clickhouse_url) {
		log_error("--store clickhouse needs --clickhouse-url");
		goto out;
	}
	if ((clickhouse ? ch_store_open(&cho, &sc, &srv.store, &err)
			: store_open(cfg.data_dir, &sc, &srv.store, &err)) < 0 ||
	    symbols_open(cfg.data_dir, &srv.symbols, &err) < 0 ||
	    (metadata_url ? projects_open_url(metadata_url, metadata_pw, &srv.projects, &err)
			  : projects_open(cfg.data_dir, &srv.projects, &err)) < 0 ||
	    open_agents(metadata_url, metadata_pw, cfg.data_dir, &srv.agents, &err) < 0 ||
	    open_metrics(metadata_url, metadata_pw, cfg.data_dir, cfg.retention_ms, &srv.metrics, &err) < 0) {
		log_error("%s", err.data);
		goto out;
	}
	struct recs_config rc_cfg;
	recs_config_default(&rc_cfg);
	if (parse_price(cfg.cost_core_hour, "--cost-per-core-hour", 1e6, &rc_cfg.cost_per_core_hour) < 0 ||
	    parse_price(cfg.cost_gpu_hour, "--cost-per-gpu-hour", 1e6, &rc_cfg.cost_per_gpu_hour) < 0 ||
	    parse_price(cfg.recs_min_share, "--recs-min-share", 100, &rc_cfg.min_share) < 0)
		goto out;
	rc_cfg.min_share /= 100;
	rc_cfg.window_ms = cfg.recs_window_ms;
	rc_cfg.stale_ms = cfg.recs_step_ms;
	struct buf recs_path = { 0 };
	int recs_rc = recs_open(db_url(metadata_url, cfg.data_dir, "recs.db", &recs_path),
				metadata_url ? metadata_pw : NULL, &rc_cfg, &srv.recs, &err);
	buf_free(&recs_path);
	if (recs_rc < 0) {
		log_error("%s", err.data);
		goto out;
	}
	if (*cfg.slack_webhook_url_file) {
		struct buf hook = { 0 }, pub = { 0 };
		if (*cfg.public_url)
			buf_puts(&pub, cfg.public_url);
		else
			buf_printf(&pub, "%s://%s", *cfg.tls_cert ? "https" : "http", cfg.listen);
		struct slack_config slc = { .public_url = pub.data, .max_messages = (unsigned)cfg.slack_max_messages,
					    .window_ms = cfg.slack_rate_window_ms };
		if (slack_read_url(cfg.slack_webhook_url_file, &hook, &err) == 0 &&
		    curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
			buf_puts(&err, "slack: libcurl could not start");
		else if (hook.data) {
			slc.webhook_url = hook.data;
			slack = slack_start(&slc, srv.metrics, &err);
		}
		buf_free(&hook);
		buf_free(&pub);
		if (!slack) {
			log_error("%s", err.data ? err.data : "slack: cannot start");
			goto out;
		}
		recs_set_listener(srv.recs, slack_recs_event, slack);
		log_info("slack: notifications on (at most %llu messages per %lld s)",
			 (unsigned long long)cfg.slack_max_messages, (long long)(cfg.slack_rate_window_ms / 1000));
	}
	{
		struct llm_config lc = {
			.provider = cfg.llm_provider, .base_url = cfg.llm_base_url,
			.api_key_file = cfg.llm_api_key_file, .api_key_env = cfg.llm_api_key_env,
			.model_examine = cfg.llm_model_examine, .model_summarize = cfg.llm_model_summarize,
			.max_input_tokens_hour = cfg.llm_max_in, .max_output_tokens_hour = cfg.llm_max_out,
			.timeout_ms = cfg.llm_timeout_ms, .max_retries = (unsigned)cfg.llm_max_retries,
			.recommendations = cfg.llm_recommendations, .data_dir = cfg.data_dir,
		};
		if (*cfg.llm_provider && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
			log_error("--llm-provider: libcurl could not start");
			goto out;
		}
		if (llm_open(&lc, &srv.llm, &err) < 0) {
			log_error("%s", err.data);
			goto out;
		}
		if (mcp_remotes_open(cfg.assistant_mcp_servers_file, &srv.mcp_remotes, &err) < 0) {
			log_error("%s", err.data);
			goto out;
		}
		if (srv.llm) {
			/* Always set: the settings may turn the LLM mode on or off. */
			recs_set_analyzer(srv.recs, llm_recs_analyze, srv.llm);
			char mex[LLM_MAX_MODEL], msu[LLM_MAX_MODEL];
			log_info("llm: %s, models %s and %s; recommendations in LLM mode: %s",
				 llm_provider_name(srv.llm), llm_model(srv.llm, false, mex), llm_model(srv.llm, true, msu),
				 llm_recs_enabled(srv.llm) ? "on" : "off");
		}
	}
	/* Recommendations are made where they are asked for. */
	if ((roles & HTTP_ROLE_QUERY) &&
	    recs_start(srv.recs, srv.store, srv.symbols, srv.projects, &err) < 0) {
		log_error("%s", err.data);
		goto out;
	}
	srv.sessions = sessions_new(cfg.session_memory_mib << 20,
				    MIN(cfg.session_memory_mib << 20, (uint64_t)SESSION_MAX_BYTES),
				    cfg.session_idle_ms);
	char nvdisasm[4096];
	if (find_nvdisasm(cfg.nvdisasm, nvdisasm, sizeof(nvdisasm))) {
		symbols_set_nvdisasm(srv.symbols, nvdisasm);
		log_info("SASS instructions named by %s", nvdisasm);
	}
	if (clickhouse) {
		struct ch_conn_opts so = { .urls = cho.urls, .database = cho.database, .user = cho.user,
					   .password_file = cho.password_file, .ca_file = cho.ca_file };
		srv.spans = chspans_open(&so, cho.cluster, cfg.gpu_span_retention_ms, &err);
		if (!srv.spans) {
			log_error("%s", err.data);
			goto out;
		}
	} else {
		srv.spans = span_store_memory(cfg.gpu_span_retention_ms, cfg.gpu_span_max);
	}
	/* Replicas on one PostgreSQL share their symbols through it. */
	if (metadata_url &&
	    symshare_open(metadata_url, metadata_pw, srv.symbols, cfg.symbols_sync_ms, &symshare, &err) < 0) {
		log_error("%s", err.data);
		goto out;
	}
	if (*cfg.debuginfod_urls) {
		srv.fetcher = fetcher_start(srv.symbols, cfg.debuginfod_urls, cfg.data_dir, &err);
		if (!srv.fetcher) {
			log_error("%s", err.data);
			goto out;
		}
		log_info("global symbolization from %s", cfg.debuginfod_urls);
	}
	char *cert = NULL, *key = NULL;
	struct http_tls tls = { 0 };
	if (*cfg.tls_cert || *cfg.tls_key) {
		size_t n;
		if (!*cfg.tls_cert || !*cfg.tls_key) {
			log_error("--tls-cert and --tls-key: give both, or neither");
			goto out;
		}
		int rc1 = read_file(cfg.tls_cert, 1 << 20, &cert, &n);
		int rc2 = rc1 < 0 ? 0 : read_file(cfg.tls_key, 1 << 20, &key, &n);
		if (rc1 < 0 || rc2 < 0) {
			log_error("--tls-cert/--tls-key: cannot read %s: %s",
				  rc1 < 0 ? cfg.tls_cert : cfg.tls_key, strerror(rc1 < 0 ? -rc1 : -rc2));
			free_all(cert, key);
			goto out;
		}
		tls.cert_pem = cert;
		tls.key_pem = key;
	}
	enum auth_mode mode;
	if (auth_mode_parse(cfg.auth, &mode) < 0) {
		log_error("--auth: expected none, local, oidc or basic, not \"%s\"", cfg.auth);
		free_all(cert, key);
		goto out;
	}
	if (mode == AUTH_OIDC && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		log_error("--auth oidc: libcurl could not start");
		free_all(cert, key);
		goto out;
	}
	if (strcmp(cfg.cookie_same_site, "Strict") && strcmp(cfg.cookie_same_site, "Lax") &&
	    strcmp(cfg.cookie_same_site, "None")) {
		log_error("--cookie-same-site: expected Strict, Lax or None");
		free_all(cert, key);
		goto out;
	}
	struct auth_settings as = {
		.mode = mode,
		.data_dir = cfg.data_dir,
		.metadata_url = metadata_url,
		.metadata_password = metadata_pw,
		.issuer = cfg.jwt_issuer,
		.jwt_private_key = cfg.jwt_private_key,
		.jwt_public_key = cfg.jwt_public_key,
		.admin_email = cfg.admin_email,
		.admin_password_file = cfg.admin_password_file,
		.basic_user = cfg.basic_user,
		.basic_password_file = cfg.basic_password_file,
		.ingest_tokens = cfg.ingest_tokens,
		.cookie_same_site = cfg.cookie_same_site,
		.cookie_secure = cfg.cookie_secure || cert,
		.public_metrics = cfg.public_metrics,
		.oidc_issuer = cfg.oidc_issuer,
		.oidc_client_id = cfg.oidc_client_id,
		.oidc_client_secret_file = cfg.oidc_client_secret_file,
		.oidc_redirect_uri = cfg.oidc_redirect_uri,
		.oidc_scopes = cfg.oidc_scopes,
		.oidc_extra_params = cfg.oidc_extra_params,
	};
	if (auth_open(&as, &srv.auth, &err) < 0) {
		log_error("auth: %s", err.data);
		free_all(cert, key);
		goto out;
	}
	if (mode == AUTH_NONE && !listen_is_loopback(cfg.listen))
		log_warn("--auth none on %s: anyone who can reach this address reads every project and "
			 "changes users and tokens; use --auth local (or listen on 127.0.0.1)", cfg.listen);
	struct http_limits lim;
	http_limits_default(&lim);
	lim.max_connections = (unsigned)cfg.max_connections;
	lim.per_ip_connections = (unsigned)cfg.per_client_connections;
	lim.idle_timeout_s = (unsigned)((cfg.idle_timeout_ms + 999) / 1000);
	lim.header_timeout_s = (unsigned)((cfg.header_timeout_ms + 999) / 1000);
	lim.body_timeout_s = (unsigned)((cfg.body_timeout_ms + 999) / 1000);
	lim.upload_memory = (size_t)cfg.max_upload_mib << 20;
	lim.query_threads = (unsigned)cfg.query_threads;
	lim.query_queue = (unsigned)cfg.query_queue;
	lim.ingest_threads = (unsigned)cfg.ingest_threads;
	lim.ingest_queue = (unsigned)cfg.ingest_queue;
	lim.spool_dir = cfg.data_dir;
	lim.roles = roles;
	/* One budget of connections and body memory for both listeners. */
	struct http_budget budget = { 0 };
	lim.budget = &budget;
	srv.mcp = mcp_new(cfg.mcp_allowed_hosts, cfg.listen);
	http = http_start(cfg.listen, server_routes, server_route_count, &srv, cert ? &tls : NULL,
			  &lim, &err);
	if (http && *cfg.otlp_grpc_listen && (roles & HTTP_ROLE_INGEST)) {
		struct buf gerr = { 0 };
		grpc = otlp_grpc_start(cfg.otlp_grpc_listen, &srv, cert ? &tls : NULL, &lim, &gerr);
		if (grpc) {
			log_info("OTLP over gRPC on %s%s", cfg.otlp_grpc_listen, cert ? " (TLS)" : "");
		} else if (!strcmp(cfg.otlp_grpc_listen, OTLP_GRPC_DEFAULT)) {
			log_warn("%s: OTLP over gRPC is off (--otlp-grpc-listen)", gerr.data);
		} else {
			log_error("%s", gerr.data);
			buf_free(&gerr);
			free_all(cert, key);
			goto out;
		}
		buf_free(&gerr);
	}
	/* libmicrohttpd and GnuTLS keep their own copies. */
	free_all(cert, key);
	if (!http) {
		log_error("%s", err.data);
		goto out;
	}
	log_info("ember-server listening on %s://%s (data in %s; --auth %s; --roles %s)%s",
		 tls.cert_pem ? "https" : "http", cfg.listen, cfg.data_dir, cfg.auth, cfg.roles,
		 *cfg.ingest_tokens ? "; agents must send a token" : "");
	int sig = 0;
	sigwait(&stop, &sig);
	log_info("received %s: stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
	rc = 0;
out:
	otlp_grpc_stop(grpc);
	http_stop(http);
	mcp_free(srv.mcp);
	fetcher_stop(srv.fetcher);
	symshare_close(symshare);
	recs_close(srv.recs); /* its thread tells slack: first */
	slack_stop(slack);
	llm_close(srv.llm); /* after recs_close: its thread uses it */
	mcp_remotes_free(srv.mcp_remotes);
	sessions_free(srv.sessions);
	span_store_close(srv.spans);
	auth_close(srv.auth);
	projects_close(srv.projects);
	agents_close(srv.agents);
	metrics_close(srv.metrics);
	symbols_close(srv.symbols);
	store_close(srv.store);
	pidlock_release(lock_fd); /* after everything in the dir is closed */
	log_flush_suppressed();
	buf_free(&lock_path);
	if (metadata_pw)
		explicit_bzero(metadata_pw, strlen(metadata_pw));
	free(metadata_pw);
	flags_free(&server_flags, &cfg);
	buf_free(&err);
	return rc;
}
