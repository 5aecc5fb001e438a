/* grpc.h - unary gRPC calls with libcurl: over a unix socket (containerd)
 * or TCP, with or without TLS (OTLP export, -otlp-transport=grpc).
 *
 * On a unix socket, or TCP without TLS, the transport is HTTP/2 in clear
 * text with "prior knowledge" (no upgrade), which is what local gRPC
 * servers such as containerd speak; over TLS libcurl negotiates HTTP/2
 * with ALPN "h2" (an answer in HTTP/1 is GRPC_TRANSPORT). A call is
 *
 *   POST http://localhost/<package.Service>/<Method>
 *   content-type: application/grpc, te: trailers, grpc-timeout: <ms>m,
 *   plus the caller's headers (containerd-namespace: ...)
 *   body: one length-prefixed message: 1 byte flags (0: not compressed),
 *         4 bytes big-endian length, the protobuf message
 *
 * and its answer is HTTP status 200, content-type application/grpc (or
 * application/grpc+proto, ...), a body of exactly one such frame when the
 * call succeeded, and grpc-status (with grpc-message) in the trailers - or,
 * for an error answer without body ("trailers-only"), in the headers.
 * libcurl hands both the headers and the trailers to the header callback.
 *
 * Everything the server sends is hostile input and bounded:
 *   - the call takes at most timeout_ms in all (connecting included), so a
 *     hung runtime never stalls the caller for longer;
 *   - the body is cut off (the call fails) past 5 + max bytes;
 *   - the answer is refused (GRPC_PROTOCOL) when grpc-status is missing,
 *     repeated or not a number, the content type is not gRPC's, the frame
 *     is truncated, has bytes after it, declares more than max bytes, or
 *     has its compressed flag set (ember never offers a compression, so
 *     a server must not use one), or when no frame comes with status 0;
 *   - grpc-message is kept for logs only, cut to 127 bytes, control
 *     characters replaced.
 * The parts are exported so that tests and the fuzz target can feed them
 * hostile answers without a server.
 */
#ifndef EMBER_AGENT_GRPC_H
#define EMBER_AGENT_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/* The largest answer message ember accepts from a runtime. */
#define GRPC_MAX_MESSAGE (1u << 20)

/* gRPC status codes ember looks at. */
#define GRPC_STATUS_OK 0
#define GRPC_STATUS_DEADLINE_EXCEEDED 4
#define GRPC_STATUS_NOT_FOUND 5
#define GRPC_STATUS_PERMISSION_DENIED 7
#define GRPC_STATUS_RESOURCE_EXHAUSTED 8
#define GRPC_STATUS_ABORTED 10
#define GRPC_STATUS_INTERNAL 13
#define GRPC_STATUS_UNAVAILABLE 14
#define GRPC_STATUS_UNAUTHENTICATED 16

enum grpc_result {
	GRPC_OK = 0,         /* grpc-status 0 and one message (in msg/len) */
	GRPC_STATUS = 1,     /* a well-formed answer with a non-zero grpc-status */
	GRPC_TRANSPORT = -1, /* no usable answer: connect, timeout, HTTP/1, status != 200 */
	GRPC_PROTOCOL = -2,  /* an answer that breaks the rules above */
};

/* The answer of one call, as it arrives. Zero-initialise with
 * grpc_answer_init; the owner frees it with grpc_answer_free. */
struct grpc_answer {
	size_t max;       /* the largest message accepted */
	long http_status; /* from the last status line; 0 before one */
	bool grpc_type;   /* content-type is application/grpc[+...|;...] */
	bool bad_status;  /* grpc-status repeated or not a number */
	bool too_large;   /* the body passed 5 + max bytes (the rest dropped) */
	int status;       /* grpc-status; -1 until one is seen */
	char message[128];
	struct buf body;  /* the raw body, at most 5 + max bytes */
	/* After grpc_answer_finish() returned GRPC_OK: the message, inside body. */
	const uint8_t *msg;
	size_t len;
};

void grpc_answer_init(struct grpc_answer *a, size_t max);
void grpc_answer_free(struct grpc_answer *a);
/* One header or trailer line as libcurl hands it over ("name: value\r\n",
 * or a status line "HTTP/2 200\r\n"); lines of other shapes are ignored. */
void grpc_answer_header(struct grpc_answer *a, const char *line, size_t n);
/* Body bytes; false (and too_large set) once they pass 5 + max. */
bool grpc_answer_body(struct grpc_answer *a, const void *p, size_t n);
/* Decides the answer (enum grpc_result); on GRPC_OK a->msg/a->len are the
 * message. */
int grpc_answer_finish(struct grpc_answer *a);

/* Appends the 5-byte prefix and msg[0..len) to out; false when len does
 * not fit the 32-bit length. grpc_frame_gzip marks the message compressed
 * (flag 1: msg is gzip, sent with grpc-encoding: gzip). */
bool grpc_frame(struct buf *out, const void *msg, size_t len);
bool grpc_frame_gzip(struct buf *out, const void *msg, size_t len);
/* The one message framed in body[0..n): GRPC_OK with *msg and *len set, or
 * GRPC_PROTOCOL (empty, truncated, trailing bytes, compressed or unknown
 * flags, longer than max). */
int grpc_unframe(const uint8_t *body, size_t n, size_t max, const uint8_t **msg, size_t *len);

/* Calls method ("/package.Service/Method") on the server at the unix
 * socket path with request message req[0..req_len) and the extra headers
 * ("name: value", NULL-terminated list, may be NULL). Fills *a (which the
 * caller initialised with grpc_answer_init and frees) and returns an enum
 * grpc_result. */
int grpc_unary(const char *socket_path, const char *method, const char *const *headers,
	       const void *req, size_t req_len, long timeout_ms, struct grpc_answer *a);

/* Where a client's calls go: unix_path (a unix socket, clear text), or
 * else host_port over TCP, with TLS when tls is set (the certificate
 * checked against ca_file, or the system's CAs when NULL or "", or not at
 * all with insecure). */
struct grpc_endpoint {
	const char *unix_path;
	const char *host_port;
	bool tls;
	bool insecure;
	const char *ca_file;
};

/* A client: one libcurl handle, one thread at a time; each call opens
 * its own connection (grpc.c says why). grpc_client_new copies ep's
 * strings. */
struct grpc_client;
struct grpc_client *grpc_client_new(const struct grpc_endpoint *ep);
void grpc_client_free(struct grpc_client *c);
/* One call, as grpc_unary; with gzip, req is gzip-compressed already and
 * goes with flag 1 and grpc-encoding: gzip. A transport failure is
 * described in err (may be NULL). */
int grpc_client_call(struct grpc_client *c, const char *method, const char *const *headers,
		     const void *req, size_t req_len, bool gzip, long timeout_ms,
		     struct grpc_answer *a, struct buf *err);

#endif
