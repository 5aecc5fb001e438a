/* server.h - the state ember-server's handlers share. */
#ifndef EMBER_SERVER_SERVER_H
#define EMBER_SERVER_SERVER_H

#include <stdint.h>

#include "server/store/projects.h"
#include "server/store/store.h"
#include "server/symbols/symbols.h"

/* Counters exported on /metrics; updated with atomic adds. */
struct server_counters {
	uint64_t http_requests, http_errors;
	uint64_t http_timeouts;   /* connections closed past a header/body deadline */
	uint64_t queries_refused; /* 503: the query pool was full */
	uint64_t ingest_batches, ingest_duplicates, ingest_rejected, ingest_failed;
	/* Stored sample values by event kind (ember.ingest.v1.EventKind): each
	 * kind counts in its own unit, so none is added to another. */
	uint64_t ingest_samples;          /* ON_CPU: samples */
	uint64_t ingest_off_cpu_ns;       /* OFF_CPU: nanoseconds off CPU */
	uint64_t ingest_cuda_ns;          /* CUDA: nanoseconds of GPU kernels */
	uint64_t ingest_alloc_bytes;      /* ALLOC: bytes allocated */
	uint64_t ingest_bytes, ingest_resyncs;
	uint64_t otlp_requests, otlp_rejected;
	uint64_t ingest_unauthorized;
	uint64_t auth_refused; /* 401 and 403 answers of the route check */
	uint64_t symbols_uploaded, symbols_rejected;
	uint64_t flamegraph_queries;
	uint64_t queries; /* every query endpoint, the flamegraph included */
	uint64_t metrics_batches, metrics_points, metrics_rejected, metrics_failed;
};

/* Sample values of one request by event kind (index: EventKind, 1..4;
 * 0 and anything past 4 are not counted). */
struct kind_values {
	uint64_t v[5];
};

struct auth;
struct fetcher;
struct mcp;
struct metrics_store;
struct recs;
struct sessions;
struct span_store;
struct agents;

struct server {
	struct store *store;
	struct symbols *symbols;
	struct projects *projects;
	struct sessions *sessions; /* protocol version 2 */
	struct metrics_store *metrics; /* host and GPU metrics (metrics.h) */
	/* The GPU timeline's spans (store/spanstore.h): in memory, or with
	 * --store clickhouse in ClickHouse for every replica; NULL: not kept. */
	struct span_store *spans;
	struct agents *agents;     /* the profiler inventory (store/agents.h); NULL: not kept */
	/* Users, roles, tokens and the audit log (auth/authz.h); NULL in
	 * in-process tests, where every request is open. */
	struct auth *auth;
	struct fetcher *fetcher; /* global symbolization; NULL when not configured */
	struct mcp *mcp; /* the MCP endpoint's sessions and allowed hosts; NULL: no /mcp */
	struct recs *recs;       /* recommendations (recommend.h); NULL: answered 503 */
	struct llm *llm;         /* the LLM client (server/llm/llm.h); NULL: no assistant, no LLM mode */
	struct mcp_remotes *mcp_remotes; /* the assistant's external MCP servers; NULL: none */
	struct server_counters counters;
	int64_t started_ms;
	const char *data_dir; /* --data-dir; decompressed symbol uploads go to files in it */
};

struct route;
/* The route table: ingest (server/http/ingest_api.c), API and UI (server/http/query_api.c). */
extern const struct route server_routes[];
extern const unsigned server_route_count;

#endif
