/* otlp_grpc.h - OTLP Profiles over gRPC (--otlp-grpc-listen, default
 * 127.0.0.1:4317): the unary method
 * /opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export.
 *
 * HTTP/2 is libnghttp2's (frames, HPACK, flow control); the gRPC layer on
 * top is ours and small (docs/internals/otlp-grpc.md): a request is one
 * length-prefixed message (1 byte "compressed", 4 bytes big-endian length),
 * "grpc-encoding: gzip" or "identity"; the answer is the
 * ExportProfilesServiceResponse as one message and the trailers
 * grpc-status and grpc-message (percent-encoded), or only trailers for an
 * error. TLS (GnuTLS, as libmicrohttpd's HTTPS; ALPN "h2") when the server
 * has --tls-cert/--tls-key.
 *
 * Each request is answered exactly as POST /v1development/profiles
 * answers it: the metadata "authorization" goes through auth_request
 * (authz.h) with the OTLP route as soon as the headers arrive, so that a
 * refused call (UNAUTHENTICATED, PERMISSION_DENIED) is answered before its
 * message is read and none of it is held; the metadata "ember-project" plays
 * ?project= (default "default"), and handle_otlp_profiles stores it; its
 * HTTP status becomes a gRPC status (otlp_grpc_status_of_http). Requests run on
 * a bounded set of worker threads (--ingest-threads, --ingest-queue); a
 * full queue is answered UNAVAILABLE at once, so a slow client never holds
 * a worker: a request reaches a worker only once its whole message has
 * arrived.
 *
 * Bounds (the HTTP route's, struct http_limits): a message of at most
 * OTLP_MAX_BODY bytes (beyond: RESOURCE_EXHAUSTED, the rest discarded);
 * messages in memory, all streams together, within upload_memory (beyond:
 * UNAVAILABLE) and max_connections, both counted with the HTTP server's
 * when limits->budget is shared (http.h: struct http_budget);
 * per_ip_connections (this listener's); a connection with
 * no open stream and no byte for idle_timeout_s is closed (GOAWAY); a TLS
 * handshake must end within header_timeout_s; a stream's message must be
 * complete within header_timeout_s + body_timeout_s of its headers
 * (DEADLINE_EXCEEDED); OTLP_GRPC_MAX_STREAMS concurrent streams a connection;
 * OTLP_GRPC_MAX_HEADER_BYTES of metadata a stream.
 *
 * Ownership: otlp_grpc_start returns the listener; otlp_grpc_stop stops
 * its threads and frees it (NULL is fine). */
#ifndef EMBER_SERVER_OTLP_GRPC_H
#define EMBER_SERVER_OTLP_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "http.h"

#define GRPC_EXPORT_PATH "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"
#define OTLP_GRPC_MAX_STREAMS 32u
#define OTLP_GRPC_MAX_HEADER_BYTES (16u << 10)

/* The gRPC status codes this server answers. */
enum grpc_code {
	GRPC_CODE_OK = 0,
	GRPC_CODE_CANCELLED = 1,
	GRPC_CODE_UNKNOWN = 2,
	GRPC_CODE_INVALID_ARGUMENT = 3,
	GRPC_CODE_DEADLINE_EXCEEDED = 4,
	GRPC_CODE_PERMISSION_DENIED = 7,
	GRPC_CODE_RESOURCE_EXHAUSTED = 8,
	GRPC_CODE_ABORTED = 10,
	GRPC_CODE_UNIMPLEMENTED = 12,
	GRPC_CODE_INTERNAL = 13,
	GRPC_CODE_UNAVAILABLE = 14,
	GRPC_CODE_UNAUTHENTICATED = 16,
};

struct server;
struct otlp_grpc;

/* Listens on addr ("host:port"), over TLS when tls is not NULL. NULL with
 * err set. */
struct otlp_grpc *otlp_grpc_start(const char *addr, struct server *srv, const struct http_tls *tls,
				  const struct http_limits *limits, struct buf *err);
void otlp_grpc_stop(struct otlp_grpc *g);

/* The one message of a unary request body (prefix + message): GRPC_CODE_OK
 * with *msg, *len and *compressed set, or a status with err set (a frame
 * cut short, trailing bytes, more than max bytes, a bad flag). */
int otlp_grpc_unframe(const uint8_t *body, size_t n, size_t max, const uint8_t **msg, size_t *len,
		 bool *compressed, struct buf *err);
/* grpc-message's encoding: bytes outside 0x20..0x7e and '%' as %XX. */
void otlp_grpc_percent_encode(const char *s, struct buf *out);
/* The gRPC status of an HTTP answer of the OTLP route. */
int otlp_grpc_status_of_http(int http_status);

/* Checks a call's credential (the metadata "authorization", NULL when
 * absent) as the OTLP HTTP route's check does, on the headers, before a
 * byte of its message is held: GRPC_CODE_OK with *who set (free it with
 * principal_free), or UNAUTHENTICATED / PERMISSION_DENIED with message
 * set. */
struct principal;
int otlp_grpc_authenticate(struct server *srv, const char *authorization, struct principal **who,
			   struct buf *message);

/* Answers one Export call of who (otlp_grpc_authenticate's) in the calling
 * thread, as a worker does: project is the metadata (NULL: absent), body
 * the request body; user_agent (its metadata) and peer (the client's
 * address) name the sender in the profiler inventory (NULL: unknown).
 * Sets *status, the error message (status != OK) or the serialized
 * response (OK). */
void otlp_grpc_export(struct server *srv, const struct principal *who, const char *project,
		      const char *encoding, const char *user_agent, const char *peer,
		      const uint8_t *body, size_t n, int *status, struct buf *message,
		      struct buf *reply);

/* Runs bytes as a client's side of one connection through a server
 * session in memory, with complete requests only unframed and decoded,
 * not stored (the fuzz target: tests/fuzz/fuzz_otlp_grpc.c). Returns the
 * number of requests that reached the worker step. */
int otlp_grpc_feed(const uint8_t *data, size_t n);

#endif
