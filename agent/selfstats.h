/* selfstats.h - the agent's own counters, and the HTTP server of -pprof
 * that serves them.
 *
 * The main loop fills an array of values (enum selfstat, one per metric:
 * samples, lost samples, unwinding, tables, delivery, symbols, Python, the
 * kubelet; the names, types and help of all in agent/counters.h) and
 * publishes it with selfstats_publish() about once a second
 * and after every batch; the server copies the latest published array
 * under its mutex and renders it, so it never reads the main loop's live
 * structures. Endpoints (GET or HEAD; other methods: 405 with a JSON
 * error; other paths: 404 with a JSON error):
 *   /metrics       Prometheus text format 0.0.4: every metric named
 *                  ember_agent_<name>, with HELP and TYPE lines
 *   /debug/stats   the same values as one JSON object: "time_unix_ms" (when
 *                  they were published), then "<name>": value per metric;
 *                  a labelled family is an object of label value -> value
 * The server is libmicrohttpd with its own thread, on a socket the agent
 * binds itself (so "address in use" is told as such), 16 connections at
 * most, 10 s idle timeout.
 */
#ifndef EMBER_AGENT_SELFSTATS_H
#define EMBER_AGENT_SELFSTATS_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "counters.h"

/* One per counter, in the order of agent/counters.h's table. */
enum selfstat {
#define SS_ENUM(id, ...) SS_##id,
	AGENT_COUNTERS(SS_ENUM, SS_ENUM, SS_ENUM, SS_ENUM, SS_ENUM)
#undef SS_ENUM
	SS_COUNT
};

struct selfstats_values {
	uint64_t v[SS_COUNT];
	int64_t time_unix_ms; /* when they were taken */
};

/* Renders values as Prometheus text / as the JSON object above. */
void selfstats_prometheus(const struct selfstats_values *s, struct buf *out);
void selfstats_json(const struct selfstats_values *s, struct buf *out);
/* The Prometheus name of a metric, without the ember_agent_ prefix (for
 * tests; NULL past the end). */
const char *selfstats_name(enum selfstat i);

/* Splits "host:port" ("[v6]:port"; an empty host means every address)
 * into host (at most hostcap - 1 bytes) and port (1 to 65535). Returns 0,
 * or -1 when malformed. */
int selfstats_split_addr(const char *addr, char *host, size_t hostcap, uint16_t *port);

struct selfstats_server;

/* Listens on addr (host:port) and serves the published values. Returns
 * NULL with the reason in err ("-pprof: cannot listen on ...: Address
 * already in use"). */
struct selfstats_server *selfstats_start(const char *addr, struct buf *err);
/* Copies s for the server to serve; s stays the caller's. */
void selfstats_publish(struct selfstats_server *srv, const struct selfstats_values *s);
/* Stops the server (its connections are closed) and frees it; NULL is a
 * no-op. */
void selfstats_stop(struct selfstats_server *srv);

#endif
